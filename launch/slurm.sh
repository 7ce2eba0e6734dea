#!/usr/bin/env bash
# Multi-host GPU run under SLURM: one task per node, all GPUs of a node per task.
#
#   sbatch --nodes=4 --gpus-per-node=8 launch/slurm.sh configs/paretopo.py:model=qwen2.5-math-1.5b,task=math,checkpoint=/ckpt/Qwen2.5-Math-1.5B /runs/paretopo_math
#
# jax.distributed picks up the SLURM environment (coordinator = first node), so the same command line as a
# single-machine run works; the mesh (config.mesh.*) spans every device of every host.
#SBATCH --job-name=mojax
#SBATCH --ntasks-per-node=1
#SBATCH --exclusive
set -euo pipefail
config="${1:?usage: launch/slurm.sh CONFIG[:ARG] WORKDIR [extra flags]}"
workdir="${2:?usage: launch/slurm.sh CONFIG[:ARG] WORKDIR [extra flags]}"
shift 2
export MOJAX_DISTRIBUTED=1
srun --kill-on-bad-exit=1 python -m mojax.main --config="$config" --workdir="$workdir" "$@"
