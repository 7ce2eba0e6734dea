"""Minimal safetensors reader/writer on ``numpy.memmap`` (bf16 through ``ml_dtypes``).

Why not ``safetensors.numpy``: numpy has no bfloat16, and we want to read *slices* of a tensor from
disk (a memmap only touches the pages of the requested rows), so each device shard of a large
checkpoint is read without materialising the full tensor on the host.

Format: 8-byte little-endian header length N, N bytes of JSON ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {...}}``, then the raw little-endian data.
"""

from __future__ import annotations

import json
import os
import struct

import ml_dtypes
import numpy as np

_DTYPES = {
    "F64": np.dtype(np.float64),
    "F32": np.dtype(np.float32),
    "F16": np.dtype(np.float16),
    "BF16": np.dtype(ml_dtypes.bfloat16),
    "I64": np.dtype(np.int64),
    "I32": np.dtype(np.int32),
    "I16": np.dtype(np.int16),
    "I8": np.dtype(np.int8),
    "U8": np.dtype(np.uint8),
    "BOOL": np.dtype(np.bool_),
}
_CODES = {v: k for k, v in _DTYPES.items()}


class SafetensorsFile:
    """Lazy view of a ``.safetensors`` file: ``names``, ``shape(name)``, ``get(name)`` (memmap)."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        with open(self.path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise ValueError(f"{self.path}: not a safetensors file (truncated header)")
            (n,) = struct.unpack("<Q", raw)
            try:
                header = json.loads(fh.read(n))
            except json.JSONDecodeError as err:
                raise ValueError(f"{self.path}: corrupt safetensors header ({err})") from None
        self.metadata = header.pop("__metadata__", None) or {}
        self._header = header
        self._data_start = 8 + n
        self._mmap = None

    @property
    def names(self) -> list[str]:
        return list(self._header)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._header[name]["shape"])

    def dtype(self, name: str) -> np.dtype:
        code = self._header[name]["dtype"]
        if code not in _DTYPES:
            raise ValueError(f"{self.path}: tensor {name!r} has unsupported dtype {code}")
        return _DTYPES[code]

    def get(self, name: str) -> np.ndarray:
        """The tensor as a read-only memmap view (slice it to read only part of it)."""
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        info = self._header[name]
        begin, end = info["data_offsets"]
        buf = self._mmap[self._data_start + begin : self._data_start + end]
        return buf.view(self.dtype(name)).reshape(self.shape(name))


def save_file(tensors: dict[str, np.ndarray], path: str | os.PathLike, metadata=None) -> None:
    """Writes ``tensors`` (numpy arrays, bf16 allowed) as one safetensors file."""
    header, offset = {}, 0
    arrays = {}
    for name, arr in tensors.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype not in _CODES:
            raise ValueError(f"tensor {name!r}: dtype {arr.dtype} cannot be written to safetensors")
        arrays[name] = arr
        header[name] = {
            "dtype": _CODES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
    header["__metadata__"] = dict(metadata or {"format": "pt"})
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)))
        fh.write(blob)
        for arr in arrays.values():
            fh.write(arr.tobytes())
