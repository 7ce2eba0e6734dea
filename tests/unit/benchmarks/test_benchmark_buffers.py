"""``benchmarks/sampler_buffers.py`` reads the sampler's temporary allocation from XLA's buffer
assignment: its size is checked against the dry run's own ``sampler_temp`` (XLA's
``memory_analysis()`` of the same program), and its values against the allocation."""

import os
import pathlib
import re
import sys

import pytest

sys.path.append(os.path.join(os.fspath(pathlib.Path(__file__).resolve().parents[3]), "benchmarks"))

import sampler_buffers  # noqa: E402


@pytest.mark.slow
def test_temp_allocation_equals_the_dry_runs_sampler_temp(tmp_path, capsys):
    """Also with the sampler's program already in the persistent compilation cache (the session's,
    ``tests/conftest.py``), where a read-back program is not compiled and so not dumped: the tool
    compiles it anyway (it failed so in CI once another test had dry-run the same config)."""
    import subprocess

    assert os.environ.get("JAX_COMPILATION_CACHE_DIR")
    cmd = [sys.executable, "-m", "mojax.main", "--config=configs/grpo.py", "--config.dry_run=true"]
    repo = pathlib.Path(__file__).resolve().parents[3]
    subprocess.run(cmd, cwd=repo, check=True, capture_output=True)  # into the cache
    sampler_buffers.main(["--config", "configs/grpo.py", "--top", "4"])
    out = capsys.readouterr().out
    reported = float(re.search(r"sampler_temp\s+([0-9.]+)", out).group(1))
    read = float(re.search(r"temporary allocation: ([0-9.]+) GiB", out).group(1))
    assert reported > 0 and read == reported, out
    assert len(re.findall(r"GiB  \S+\[", out)) == 4, out  # the 4 largest values, with shapes


def test_temp_values_reads_only_the_temp_allocation():
    text = "\n".join(
        [
            "allocation 0: size 64, parameter 0, shape |f32[16]| at ShapeIndex {}:",
            " value: <1 p.1 @0> (size=64,offset=0): f32[16]{0}",
            "allocation 1: size 96, preallocated-temp:",
            " value: <7 wrapped_convert.3 @0> (size=64,offset=0): f32[16]{0}",
            " value: <8 wrapped_convert.12 @0> (size=32,offset=64): f32[8]{0}",
            " value: <9 stack.2 @0> (size=48,offset=0): f32[12]{0}",
            "allocation 2: size 8, output shape is |f32[2]|, maybe-live-out:",
            " value: <10 out.1 @0> (size=8,offset=0): f32[2]{0}",
        ]
    )
    size, values = sampler_buffers.temp_values(text)
    assert size == 96
    assert [v[0] for v in values] == ["wrapped_convert.3", "stack.2", "wrapped_convert.12"]
    assert sampler_buffers.by_kind(values) == [("wrapped_convert", 96, 2), ("stack", 48, 1)]
