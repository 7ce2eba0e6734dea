#!/usr/bin/env bash
# Run on every worker of a Cloud TPU VM slice (jax.distributed finds the TPU topology itself).
#
#   launch/tpu_vm.sh my-tpu us-central2-b configs/awpo.py:model=qwen3-4b,checkpoint=gs://b/qwen3-4b gs://b/runs/awpo
#
set -euo pipefail
tpu="${1:?usage: launch/tpu_vm.sh TPU_NAME ZONE CONFIG[:ARG] WORKDIR [extra flags]}"
zone="${2:?zone}"
config="${3:?config}"
workdir="${4:?workdir}"
shift 4
extra="$*"
gcloud compute tpus tpu-vm ssh "$tpu" --zone="$zone" --worker=all --command="
  cd ~/mojax && pip install -q -e . 'jax[tpu]' &&
  MOJAX_DISTRIBUTED=1 python -m mojax.main --config='$config' --workdir='$workdir' $extra"
