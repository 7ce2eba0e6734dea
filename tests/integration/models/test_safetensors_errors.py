"""Bad safetensors / HF checkpoint files fail with one error naming the file and the tensor.

Files are written by the ``safetensors`` package itself (the reference writer), then truncated,
overwritten with garbage or given a wrong shape; the header layout used to find which tensor a cut
hits is parsed here from the format (8-byte little-endian length + JSON), not by mojax.
"""

import json
import os
import re
import shutil
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file as reference_save

import mojax.models as mm
from mojax.models import safetensors_io
from mojax.models.safetensors_io import SafetensorsError, SafetensorsFile


def _tensors():
    rng = np.random.RandomState(0)
    return {
        "a.weight": rng.randn(128, 64).astype(np.float32),
        "b.bias": rng.randn(64).astype(np.float32),
        "c.table": rng.randint(0, 9, (32, 16)).astype(np.int64),
    }


def _header(path):
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n))
    header.pop("__metadata__", None)
    return n, header


def test_a_good_file_reads_back_exactly(tmp_path):
    path = tmp_path / "ok.safetensors"
    reference_save(_tensors(), str(path))
    f = SafetensorsFile(path)
    assert sorted(f.names) == sorted(_tensors())
    for name, want in _tensors().items():
        np.testing.assert_array_equal(f.get(name), want)
    with pytest.raises(KeyError, match=re.escape(f"{path}: no tensor 'missing'")):
        f.get("missing")


@pytest.mark.parametrize("cut", [1, 1000, 20000])
def test_truncated_file_names_file_and_tensor(tmp_path, cut):
    path = tmp_path / "cut.safetensors"
    reference_save(_tensors(), str(path))
    size = os.path.getsize(path)
    n, header = _header(path)
    with open(path, "r+b") as fh:
        fh.truncate(size - cut)
    data_size = size - cut - 8 - n
    # the tensor reported is one whose bytes the cut removed (the header is checked in its order)
    hit = [k for k, v in header.items() if v["data_offsets"][1] > data_size]
    assert hit
    with pytest.raises(SafetensorsError) as info:
        SafetensorsFile(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: tensor ") and "truncated file?" in msg
    assert any(f"tensor {name!r}" in msg for name in hit), msg
    assert f"holds only {data_size}" in msg


def test_garbage_and_empty_files_name_the_file(tmp_path):
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(np.random.RandomState(1).bytes(5000))
    with pytest.raises(SafetensorsError, match=re.escape(f"{garbage}: not a safetensors file")):
        SafetensorsFile(garbage)
    junk_json = tmp_path / "junk.safetensors"
    junk_json.write_bytes(struct.pack("<Q", 16) + b"\xff\xfe{not json!!!!" + b"\0" * 64)
    with pytest.raises(SafetensorsError, match=re.escape(f"{junk_json}: corrupt safetensors")):
        SafetensorsFile(junk_json)
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(SafetensorsError, match=re.escape(f"{empty}: not a safetensors file: 0")):
        SafetensorsFile(empty)


def test_header_that_disagrees_with_the_shape_names_the_tensor(tmp_path):
    path = tmp_path / "lie.safetensors"
    reference_save(_tensors(), str(path))
    n, header = _header(path)
    header["b.bias"]["shape"] = [65]  # one element more than its 256 bytes hold
    blob = json.dumps(header).encode()
    blob += b" " * (n - len(blob)) if len(blob) <= n else b""
    with open(path, "rb") as fh:
        fh.seek(8 + n)
        data = fh.read()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)
    with pytest.raises(SafetensorsError, match=r"tensor 'b.bias': data_offsets span 256 bytes"):
        SafetensorsFile(path)


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    mm.save_pretrained(mm.from_pretrained("tiny-qwen2"), path)
    return path


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def test_hf_load_of_a_truncated_checkpoint_names_file_and_tensor(tiny_checkpoint, tmp_path):
    ckpt = _copy(tiny_checkpoint, tmp_path / "cut")
    st = ckpt / "model.safetensors"
    n, header = _header(st)
    last = max(header, key=lambda k: header[k]["data_offsets"][1])
    with open(st, "r+b") as fh:
        fh.truncate(os.path.getsize(st) - 100)
    with pytest.raises(SafetensorsError, match=re.escape(f"{st}: tensor {last!r}")):
        mm.from_pretrained(ckpt)


def test_hf_load_of_garbage_names_the_file(tiny_checkpoint, tmp_path):
    ckpt = _copy(tiny_checkpoint, tmp_path / "garbage")
    st = ckpt / "model.safetensors"
    st.write_bytes(np.random.RandomState(2).bytes(3733))
    with pytest.raises(SafetensorsError, match=re.escape(f"{st}: not a safetensors file")):
        mm.from_pretrained(ckpt)


def test_hf_load_with_a_wrong_shape_names_file_tensor_and_shapes(tiny_checkpoint, tmp_path):
    ckpt = _copy(tiny_checkpoint, tmp_path / "shape")
    st = ckpt / "model.safetensors"
    f = safetensors_io.SafetensorsFile(st)
    tensors = {k: np.array(f.get(k)) for k in f.names}
    name = "model.layers.1.mlp.down_proj.weight"
    want = tensors[name].shape
    tensors[name] = np.zeros((want[0], want[1] - 3), tensors[name].dtype)
    del f
    reference_save(tensors, str(st))
    pattern = (
        rf"checkpoint {re.escape(str(ckpt))} does not match the model config: mis-shaped tensors: "
        rf".*{re.escape(name)} \(in {re.escape(str(st))}\): checkpoint "
        rf"\({want[0]}, {want[1] - 3}\) != expected \({want[0]}, {want[1]}\)"
    )
    with pytest.raises(ValueError, match=pattern):
        mm.from_pretrained(ckpt)


def test_hf_index_errors_name_the_index(tiny_checkpoint, tmp_path):
    ckpt = _copy(tiny_checkpoint, tmp_path / "index")
    os.remove(ckpt / "model.safetensors")
    index = ckpt / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "model-00002.safetensors"}}))
    with pytest.raises(FileNotFoundError, match=re.escape(f"{index} lists model-00002")):
        mm.from_pretrained(ckpt)
    index.write_text("{ truncated")
    with pytest.raises(ValueError, match=re.escape(f"{index}: not a safetensors index")):
        mm.from_pretrained(ckpt)
