#!/usr/bin/env bash
# Builds the peers' virtualenvs of benchmarks/rl_step_peers.py from the pinned lists in
# benchmarks/logs/rl_step_peers_env/ (pip freeze of the envs the benchmark was checked with):
#   $VENVS/trl    torch 2.13.0 (CPU build), transformers, trl
#   $VENVS/tunix  google-tunix and its jax
# Usage: bash benchmarks/peer_envs.sh            (VENVS=/work/venvs, PYTHON=python3.11)
# TORCH_WHEEL: the torch 2.13.0 CPU wheel (default the one this machine image ships in /opt/wheels);
# when absent, torch==2.13.0 comes from the default index (on Linux its build bundles CUDA
# libraries: larger, same CPU kernels).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
lock="$here/logs/rl_step_peers_env"
venvs="${VENVS:-/work/venvs}"
python="${PYTHON:-python3.11}"
wheel="${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"

mkdir -p "$venvs"
"$python" -m venv "$venvs/trl"
"$venvs/trl/bin/pip" install -q --upgrade pip
if [ -f "$wheel" ]; then torch_req="$wheel"; else torch_req="torch==2.13.0"; fi
"$venvs/trl/bin/pip" install -q "$torch_req" -r "$lock/trl.txt"

"$python" -m venv "$venvs/tunix"
"$venvs/tunix/bin/pip" install -q --upgrade pip
"$venvs/tunix/bin/pip" install -q -r "$lock/tunix.txt"

"$venvs/trl/bin/python" -c "import torch, transformers, trl; print('trl env:', torch.__version__, transformers.__version__, trl.__version__)"
"$venvs/tunix/bin/python" -c "import jax, tunix; print('tunix env: jax', jax.__version__)"
