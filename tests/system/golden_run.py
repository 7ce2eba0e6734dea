"""The golden run of the system tests: one short ParetoPO run per (staleness, processes), computed
once per source tree and shared on disk by every pytest worker (``tests/system/conftest.py``).

The config is the tiny embedded default (ParetoPO on the calculator) made short: an 80-step SFT
warm start (enough for rewarded rows: after 20 steps every reward is 0 and no update moves), 4 RL steps (2 of Stage 1, 2 of Stage 2), an evaluation every 2 steps, a checkpoint
every 2 steps (so a signal after step 1 or 3 saves a step no periodic save would have), on a
``data = 2`` mesh, with a KL penalty to the initial policy (which a resumed run rebuilds): one process with 2 forced CPU devices, or two ``jax.distributed`` processes
of one device each (``launch/local_cluster.py``). ``rollout.staleness`` is 0 or 1.

A record (``golden.json`` in the run's cache directory) holds every non-``time/`` metric of every
step, the sha256 of the params of every kept checkpoint (RL and SFT) and the host state saved
with each. Multi-host: process 0 writes every file the record reads (metrics, host state); the
params are read back whole from the sharded checkpoint by the test process.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[2]
LAUNCHER = [sys.executable, str(REPO / "launch" / "local_cluster.py")]
STEPS = 4
FLAGS = (
    "--config=configs/paretopo.py",
    f"--config.steps={STEPS}",
    "--config.checkpoint_every=2",
    "--config.eval_every=2",
    "--config.sft.steps=80",  # enough for valid, trained rows (20 leave every reward 0)
    "--config.sft.batch_size=16",
    "--config.sft.num_examples=64",
    "--config.task.num_train=64",
    "--config.task.num_eval=3",  # 3 held-out rows: they do not divide into the 2 shards
    "--config.task.num_validation=0",  # validation = num_eval
    "--config.rollout.prompts_per_step=2",
    "--config.rollout.num_samples=4",
    "--config.paretopo.stage1_steps=2",
    "--config.paretopo.validate_every=1",
    "--config.eval.ks=(1,)",
    "--config.eval.num_samples=1",
    "--config.mesh.data=2",
    "--config.ppo.kl_coef=0.01",  # a resumed run must rebuild the initial policy as its reference
)


def flags(staleness: int) -> list[str]:
    return [*FLAGS, f"--config.rollout.staleness={staleness}"]


def env(cache_dir) -> dict[str, str]:
    """A run's environment: the session's compilation cache (else ``cache_dir``), every process's
    host state checked identical after every step."""
    from mojax_test_utils import compile_cache_env

    out = dict(os.environ)
    out.pop("XLA_FLAGS", None)
    out.update(
        **compile_cache_env(cache_dir),
        JAX_PLATFORMS="cpu",
        MOJAX_DEBUG_HOST_STATE="1",
        PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests")]),
    )
    return out


def command(
    workdir, staleness: int, processes: int, module="mojax.main", extra=(), devices=2
) -> tuple[list, dict]:
    """The command line and environment of the golden config (and ``extra`` flags) in
    ``workdir``: one process with ``devices`` forced devices, or ``processes`` processes of one
    device each."""
    main = [sys.executable, "-m", module, f"--workdir={workdir}", *flags(staleness), *extra]
    e = env(pathlib.Path(workdir).parent / "jax_cache")
    if processes == 1:
        e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
        return main, e
    return [*LAUNCHER, f"--num_processes={processes}", "--", *main], e


def start(workdir, staleness: int, processes: int, module="mojax.main", **kw) -> subprocess.Popen:
    cmd, e = command(workdir, staleness, processes, module, **kw)
    return subprocess.Popen(
        cmd,
        cwd=REPO,
        env=e,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def run(workdir, staleness: int, processes: int, module="mojax.main", **kw) -> str:
    """Runs the golden config to its end in ``workdir`` (a fresh run or a resume); its output."""
    from mojax_test_utils import cluster_tail

    p = start(workdir, staleness, processes, module, **kw)
    out, _ = p.communicate(timeout=1500)
    assert p.returncode == 0, cluster_tail(out)
    return out


def metrics(workdir) -> list[dict]:
    lines = (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if not k.startswith("time/")} for x in lines]


def params_sha(step_dir) -> str:
    """sha256 over the bytes, dtypes and shapes of every params leaf of a saved step."""
    import jax
    import orbax.checkpoint as ocp

    path = pathlib.Path(step_dir) / "state"
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])  # saved on 2 devices: read whole
    with ocp.StandardCheckpointer() as ck:
        tree = ck.metadata(path).item_metadata.tree
        target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=one), tree)
        params = ck.restore(path, target)["params"]
    h = hashlib.sha256()
    for leaf in jax.tree.leaves(params):
        a = np.ascontiguousarray(np.asarray(leaf))
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _steps(directory) -> list[int]:
    d = pathlib.Path(directory)
    return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def record(workdir) -> dict:
    """What a finished run is compared by: metrics (no ``time/`` keys), params sha256 and host
    state of every kept RL checkpoint, the SFT checkpoint's params sha256, transcript lines."""
    w = pathlib.Path(workdir)
    ck = w / "checkpoints"
    return {
        "metrics": metrics(w),
        "params": {s: params_sha(ck / str(s)) for s in _steps(ck)},
        "host": {
            s: json.loads((ck / str(s) / "host" / "metadata").read_text()) for s in _steps(ck)
        },
        "sft_params": {
            s: params_sha(w / "checkpoints_sft" / str(s)) for s in _steps(w / "checkpoints_sft")
        },
        "transcripts": len((w / "transcripts.jsonl").read_text().splitlines()),
    }


RECORD_VERSION = 1  # bump when the record or the way the run is started changes


def source_key(staleness: int, processes: int) -> str:
    """sha256 of what a golden run depends on: the flags, the process count, ``RECORD_VERSION``
    and every source file of mojax/, configs/ and launch/."""
    h = hashlib.sha256(repr((flags(staleness), processes, RECORD_VERSION)).encode())
    files = []
    for sub in ("mojax", "configs", "launch"):
        files += sorted((REPO / sub).rglob("*.py"))
    for f in files:
        h.update(str(f.relative_to(REPO)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:24]


def cache_root() -> pathlib.Path:
    """Next to the session's compilation cache where there is one, else the temp directory."""
    base = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    root = pathlib.Path(base).parent if base else pathlib.Path(tempfile.gettempdir())
    return root / "mojax_golden"


@contextlib.contextmanager
def _locked(path):
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released when the file closes
        yield


def golden(staleness: int, processes: int) -> tuple[pathlib.Path, dict]:
    """The finished golden run's workdir (read-only by convention) and its record. The first
    caller (of any pytest worker) runs it under an exclusive file lock; the others wait on the
    lock and read the record it left."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    key = f"s{staleness}_p{processes}_{source_key(staleness, processes)}"
    done = root / key / "golden.json"
    with _locked(root / f"{key}.lock"):
        if not done.exists():
            tmp = root / f"{key}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            run(tmp / "run", staleness, processes)
            rec = record(tmp / "run")
            (tmp / "golden.json").write_text(json.dumps(rec))
            shutil.rmtree(root / key, ignore_errors=True)
            os.rename(tmp, root / key)
    rec = json.loads(done.read_text())
    rec["params"] = {int(k): v for k, v in rec["params"].items()}
    rec["host"] = {int(k): v for k, v in rec["host"].items()}
    rec["sft_params"] = {int(k): v for k, v in rec["sft_params"].items()}
    return root / key / "run", rec
