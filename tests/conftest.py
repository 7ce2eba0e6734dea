"""Shared pytest fixtures: the location of ``../shared`` (real data, the real Qwen2 tokenizer)."""

import gc
import os
import pathlib
import shutil
import tempfile

import pytest

_REPO = pathlib.Path(__file__).resolve().parents[1]


_MAPS = {"most": 0}


def _memory_maps() -> int:
    """Memory mappings of this process (0 where /proc is absent)."""
    try:
        with open("/proc/self/maps") as f:
            return sum(1 for _ in f)
    except OSError:
        return 0


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Frees a test module's compiled programs when it ends. XLA CPU maps memory for every program
    it compiles; one process running the whole suite otherwise piles up mappings until a compile
    crashes (SIGSEGV) at the kernel's ``vm.max_map_count`` (65530 by default)."""
    yield
    _MAPS["most"] = max(_MAPS["most"], _memory_maps())
    import jax

    jax.clear_caches()
    gc.collect()


_CACHE_ENV = "JAX_COMPILATION_CACHE_DIR"


def pytest_configure(config):
    """One JAX persistent compilation cache for the whole session: the controller makes it (unless
    ``JAX_COMPILATION_CACHE_DIR`` is set already, as ``.ci/run`` does to share it between the fast and
    the slow set), and the xdist workers and every ``mojax.main`` subprocess inherit it from the
    environment. Tests and runs build the same tiny-model programs again and again; a program
    compiled once is read back (measured on tests/learner, 2 workers: 223 s without, 146 s with).
    Every small program is kept (minimum compile time 0)."""
    if hasattr(config.option, "loadscopereorder"):  # xdist: hand out files in collection order
        config.option.loadscopereorder = False  # (its default sorts them by their test counts)
    if hasattr(config, "workerinput"):
        return
    # every program, also where the cache directory was given (``.ci/run``): else the many
    # sub-second programs compile again in every module (``jax.clear_caches``) and every worker
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    if os.environ.get(_CACHE_ENV):
        return
    path = tempfile.mkdtemp(prefix="mojax-test-jax-cache-")
    config._mojax_cache_dir = path
    os.environ[_CACHE_ENV] = path


def pytest_unconfigure(config):
    path = getattr(config, "_mojax_cache_dir", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop(_CACHE_ENV, None)


# The longest test files (measured: their module fixtures and subprocess runs take minutes), run
# first: pytest-xdist's ``--dist loadfile`` hands out files in collection order (``pytest_configure``
# turns off its reordering by test count, which put test_experiments.py 9 minutes late), so a long
# file collected last would run alone at the end while the other worker idles.
_LONG_FIRST = ("test_experiments.py", "test_multiprocess.py", "test_notebook.py")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.path.name not in _LONG_FIRST)  # stable: files stay whole


def pytest_terminal_summary(terminalreporter):
    if _MAPS["most"]:
        terminalreporter.write_line(
            f"most memory mappings at the end of a test module: {_MAPS['most']}"
        )


def shared_dir() -> pathlib.Path:
    """``$MOJAX_SHARED_DIR`` or ``../shared`` beside the checkout."""
    return pathlib.Path(os.environ.get("MOJAX_SHARED_DIR", _REPO.parent / "shared"))


@pytest.fixture(scope="session")
def shared():
    path = shared_dir()
    if not (path / "data").is_dir():
        pytest.skip(f"shared data not found at {path} (set MOJAX_SHARED_DIR to the shared/ folder)")
    return path


@pytest.fixture(scope="session")
def qwen2_tokenizer_dir(shared):
    path = shared / "assets" / "qwen2-tokenizer"
    if not (path / "vocab.json").is_file():
        pytest.skip(f"real Qwen2 tokenizer not found at {path}")
    return path


def run_with_devices(fn, *args, devices: int = 8, timeout: float = 900, **kwargs):
    """Runs ``fn(*args, **kwargs)`` in a fresh Python process with ``devices`` forced CPU devices
    and returns its result (pickled back as data).

    ``fn`` must be a module-level function of an importable module or a test file (it is looked up
    by module file and name in the child). JAX in the parent may already be initialised with one
    device, hence the subprocess. A failure in the child raises here with its traceback.
    """
    import pickle
    import subprocess
    import sys
    import tempfile

    module = sys.modules[fn.__module__]
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = os.path.join(tmp, "in.pkl"), os.path.join(tmp, "out.pkl")
        with open(inp, "wb") as f:
            pickle.dump((module.__file__, fn.__name__, args, kwargs), f)
        env = dict(os.environ)
        env["XLA_FLAGS"] = (
            env.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={devices}"
        ).strip()
        env["JAX_PLATFORMS"] = "cpu"
        env["PYTHONPATH"] = os.pathsep.join(
            [str(_REPO), str(_REPO / "tests")] + [env.get("PYTHONPATH", "")]
        )
        proc = subprocess.run(
            [sys.executable, "-m", "_device_child", inp, out],
            cwd=str(_REPO / "tests"),
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"{fn.__name__} on {devices} devices failed (exit {proc.returncode}):\n"
                f"{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
            )
        with open(out, "rb") as f:
            return pickle.load(f)


def assert_cached_equals_packed_reference(model, toks, masks, outs, atol):
    """Logits of cached chunked calls (``outs``, one ``[B, T_i, V]`` per chunk of ``toks`` /
    ``masks``) equal the uncached forward over each row's real tokens packed to the left (right
    padding only at the end); returns the concatenated bool mask ``[B, sum T_i]``."""
    import numpy as np

    cached, mask = np.concatenate(outs, 1), np.concatenate(masks, 1).astype(bool)
    tokens = np.concatenate(toks, 1)
    n = mask.sum(1)
    packed = np.zeros_like(tokens)
    for row in range(tokens.shape[0]):
        packed[row, : n[row]] = tokens[row][mask[row]]
    packed_mask = (np.arange(tokens.shape[1])[None] < n[:, None]).astype(np.int32)
    ref = np.asarray(model(packed, attention_mask=packed_mask))
    for row in range(tokens.shape[0]):
        np.testing.assert_allclose(cached[row][mask[row]], ref[row, : n[row]], atol=atol, rtol=0)
    return mask
