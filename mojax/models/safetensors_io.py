"""Minimal safetensors reader/writer on ``numpy.memmap`` (bf16 through ``ml_dtypes``).

Why not ``safetensors.numpy``: numpy has no bfloat16, and we want to read *slices* of a tensor from
disk (a memmap only touches the pages of the requested rows), so each device shard of a large
checkpoint is read without materialising the full tensor on the host.

Format: 8-byte little-endian header length N, N bytes of JSON ``{name: {"dtype", "shape",
"data_offsets": [begin, end]}, "__metadata__": {...}}``, then the raw little-endian data.
"""

from __future__ import annotations

import json
import math
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


class SafetensorsError(ValueError):
    """A file is not a readable safetensors file; the message names the file and the tensor."""


def _check_entry(path: str, name: str, info: object, data_size: int) -> None:
    """Raises ``SafetensorsError`` unless header entry ``name`` describes bytes the file holds."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
        raise SafetensorsError(f"{where}: malformed header entry {str(info)[:200]} (corrupt file?)")
    shape, offsets, code = info["shape"], info["data_offsets"], info["dtype"]
    if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
        raise SafetensorsError(f"{where}: malformed shape {str(shape)[:200]} (corrupt file?)")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise SafetensorsError(f"{where}: malformed data_offsets {str(offsets)[:200]}")
    begin, end = offsets
    if end > data_size:
        raise SafetensorsError(
            f"{where} ({code} {tuple(shape)}) needs bytes {begin}..{end} of the data section, but "
            f"the file holds only {data_size} (truncated file?)"
        )
    if code in _DTYPES and end - begin != math.prod(shape) * _DTYPES[code].itemsize:
        raise SafetensorsError(
            f"{where}: data_offsets span {end - begin} bytes, but {code} {tuple(shape)} needs "
            f"{math.prod(shape) * _DTYPES[code].itemsize} (corrupt header)"
        )


class SafetensorsFile:
    """Lazy view of a ``.safetensors`` file: ``names``, ``shape(name)``, ``get(name)`` (memmap).

    Opening checks the whole header against the file size, so a truncated file or garbage bytes
    raise ``SafetensorsError`` naming the file (and the tensor) before any array is built.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        size = os.path.getsize(self.path)
        with open(self.path, "rb") as fh:
            raw = fh.read(8)
            if len(raw) != 8:
                raise SafetensorsError(
                    f"{self.path}: not a safetensors file: {size} bytes, too short for the 8-byte "
                    "header length (empty or truncated file?)"
                )
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                raise SafetensorsError(
                    f"{self.path}: not a safetensors file: its header length {n} exceeds the "
                    f"{size - 8} bytes that follow (truncated file or garbage bytes?)"
                )
            blob = fh.read(n)
        try:
            header = json.loads(blob)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise SafetensorsError(f"{self.path}: corrupt safetensors header ({err})") from None
        if not isinstance(header, dict):
            raise SafetensorsError(f"{self.path}: corrupt safetensors header (not a JSON object)")
        self.metadata = header.pop("__metadata__", None) or {}
        for name, info in header.items():
            _check_entry(self.path, name, info, size - 8 - n)
        self._header = header
        self._data_start = 8 + n
        self._mmap = None

    def _info(self, name: str) -> dict:
        if name not in self._header:
            raise KeyError(f"{self.path}: no tensor {name!r}")
        return self._header[name]

    @property
    def names(self) -> list[str]:
        return list(self._header)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._info(name)["shape"])

    def dtype(self, name: str) -> np.dtype:
        code = self._info(name)["dtype"]
        if code not in _DTYPES:
            raise SafetensorsError(
                f"{self.path}: tensor {name!r} has unsupported dtype {code!r} "
                f"(supported: {sorted(_DTYPES)})"
            )
        return _DTYPES[code]

    def get(self, name: str) -> np.ndarray:
        """The tensor as a read-only memmap view (slice it to read only part of it)."""
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        info = self._info(name)
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
