"""The launch scripts and preemption: ``launch/slurm.sh`` asks SLURM for a SIGTERM before the time
limit (``--signal``) and requeues a job that mojax stopped on a signal after saving (``--requeue``);
``launch/tpu_vm.sh`` starts the run detached from the ssh session (``setsid nohup``), so closing it
does not stop the run.

The schedulers are stand-ins on ``PATH`` (``srun``, ``scontrol``, ``gcloud``) that record what they
were asked and run the command the way the real ones would, on this machine.
"""

import os
import pathlib
import signal
import subprocess
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _tool(bin_dir, name, body):
    path = bin_dir / name
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(0o755)


def test_slurm_script_asks_for_a_signal_before_the_time_limit_and_requeue():
    header = [x for x in (REPO / "launch" / "slurm.sh").read_text().splitlines() if "#SBATCH" in x]
    assert "#SBATCH --signal=TERM@120" in header and "#SBATCH --requeue" in header


@pytest.mark.parametrize(
    "code, requeued", [(143, True), (129, True), (130, True), (0, False), (1, False)]
)
def test_slurm_script_requeues_a_run_stopped_on_a_signal(tmp_path, code, requeued):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    _tool(bin_dir, "srun", f'echo "srun $*" >> {log}\nexit {code}\n')
    _tool(bin_dir, "scontrol", f'echo "scontrol $*" >> {log}\n')
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env["SLURM_JOB_ID"] = "4242"
    p = subprocess.run(
        ["bash", "launch/slurm.sh", "configs/grpo.py", str(tmp_path / "w")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == code, p.stderr
    calls = log.read_text().splitlines()
    assert calls[0].startswith("srun --kill-on-bad-exit=1 python -m mojax.main")
    assert (calls[1:] == ["scontrol requeue 4242"]) == requeued, calls
    if requeued:
        assert f"exit {code}" in p.stderr and "requeueing job 4242" in p.stderr
    env["MOJAX_REQUEUE"] = "0"
    log.unlink()
    subprocess.run(["bash", "launch/slurm.sh", "configs/grpo.py", "w"], cwd=REPO, env=env)
    assert len(log.read_text().splitlines()) == 1  # MOJAX_REQUEUE=0: no requeue


def test_tpu_vm_run_outlives_the_ssh_session(tmp_path):
    """The stand-in ``gcloud ... ssh --command=CMD`` runs CMD in a shell of its own session and
    then hangs up on it (SIGHUP to that session's process group), as a closed ssh session does.
    The run (a stand-in ``python`` that waits) is still alive afterwards, in a session of its own,
    and writes its log under ~/mojax."""
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    (home / "mojax").mkdir(parents=True)
    bin_dir.mkdir()
    pidfile = tmp_path / "run.pid"
    _tool(
        bin_dir,
        "gcloud",
        'for a in "$@"; do case "$a" in --command=*) cmd="${a#--command=}";; esac; done\n'
        'setsid bash -c "$cmd" &\nshell=$!\nsleep 2\n'
        "kill -HUP -- -$shell 2>/dev/null\nwait $shell\n",
    )
    _tool(bin_dir, "pip", "exit 0\n")
    _tool(
        bin_dir,
        "python",
        f'echo $$ > {pidfile}\necho started "$@"\nexec sleep 60\n',
    )
    env = {
        **os.environ,
        "HOME": str(home),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    p = subprocess.run(
        ["bash", "launch/tpu_vm.sh", "tpu", "zone", "configs/grpo.py", "/mnt/runs/r1"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "mojax started on" in p.stdout
    pid = int(pidfile.read_text())
    try:
        time.sleep(0.5)
        os.kill(pid, 0)  # alive after the hang-up
        assert os.getsid(pid) == pid  # a session of its own (setsid)
        logs = list((home / "mojax").glob("r1.*.log"))
        assert len(logs) == 1 and "started -m mojax.main --config=configs/grpo.py" in (
            logs[0].read_text()
        )
    finally:
        os.kill(pid, signal.SIGKILL)
