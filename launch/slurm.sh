#!/usr/bin/env bash
# Multi-host GPU run under SLURM: one task per node, all GPUs of a node per task.
#
#   sbatch --nodes=4 --gpus-per-node=8 launch/slurm.sh configs/paretopo.py:model=qwen2.5-math-1.5b,task=math,checkpoint=/ckpt/Qwen2.5-Math-1.5B /runs/paretopo_math [--config.KEY=VALUE ...]
#
# Arguments: CONFIG[:ARG] WORKDIR, then flags passed on to `python -m mojax.main` unchanged. A sweep
# submits its points the same way: launch/sweep.py --launcher="sbatch --nodes=4 launch/slurm.sh" ...
# jax.distributed picks up the SLURM environment (coordinator = first node), so the same command line as a
# single-machine run works; the mesh (config.mesh.*) spans every device of every host.
#
# Preemption: 120 s before the time limit SLURM sends SIGTERM to every task (--signal; not B:, which
# would signal this script only). mojax abandons the rollout under way, saves its last completed
# state within --config.preemption_grace_s and exits 128 + the signal (143); this script then
# requeues the job (--requeue), which reruns the same command and resumes. A job preempted by the
# scheduler (PreemptMode=REQUEUE) gets SIGTERM, GraceTime seconds, and is requeued by SLURM. Set
# MOJAX_REQUEUE=0 to stop instead. scancel signals this script too, which then ends without requeueing.
#SBATCH --job-name=mojax
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
#SBATCH --signal=TERM@120
#SBATCH --requeue
set -euo pipefail
usage="usage: launch/slurm.sh CONFIG[:ARG] WORKDIR [--config.KEY=VALUE ...]"
config="${1:?$usage}"
workdir="${2:?$usage}"
case "$config" in
  *.py | *.py:*) ;;
  *) echo "launch/slurm.sh: CONFIG must be a config file (configs/*.py[:ARG]), got '$config'; $usage" >&2
     exit 2 ;;
esac
case "$workdir" in
  -*) echo "launch/slurm.sh: WORKDIR must be a directory, got '$workdir'; $usage" >&2
      exit 2 ;;
esac
shift 2
export MOJAX_DISTRIBUTED=1
rc=0
srun --kill-on-bad-exit=1 python -m mojax.main --config="$config" --workdir="$workdir" "$@" || rc=$?
# 143 / 130 / 129: stopped by SIGTERM / SIGINT / SIGHUP after saving; the same command resumes
if [[ $rc -eq 143 || $rc -eq 130 || $rc -eq 129 ]] && [[ -n "${SLURM_JOB_ID:-}" ]] \
    && [[ "${MOJAX_REQUEUE:-1}" == 1 ]]; then
  echo "launch/slurm.sh: mojax stopped on a signal (exit $rc) after saving; requeueing job $SLURM_JOB_ID" >&2
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
