#!/usr/bin/env bash
# Run on every worker of a Cloud TPU VM slice (jax.distributed finds the TPU topology itself).
#
#   launch/tpu_vm.sh my-tpu us-central2-b configs/awpo.py:model=qwen3-4b,checkpoint=/mnt/ckpt/qwen3-4b /mnt/runs/awpo
#
# Paths are local to each worker, not URLs: mojax refuses gs:// (and any ://) paths. The workdir
# must be a directory every worker mounts with atomic directory rename (Filestore / NFS; not
# gcsfuse), and the model checkpoint a directory each worker can read (copy it first, e.g.
# `gcloud storage cp -r gs://b/qwen3-4b /mnt/ckpt/` on every worker or onto the shared mount).
#
set -euo pipefail
tpu="${1:?usage: launch/tpu_vm.sh TPU_NAME ZONE CONFIG[:ARG] WORKDIR [extra flags]}"
zone="${2:?zone}"
config="${3:?config}"
workdir="${4:?workdir}"
shift 4
extra="$*"
for path in "$config" "$workdir"; do
  if [[ "$path" == *://* ]]; then
    echo "launch/tpu_vm.sh: '$path' holds a URL; give local paths, not a URL (see this script's header)" >&2
    exit 2
  fi
done
# The run is detached from the ssh session (setsid nohup): closing the terminal or losing the
# connection does not stop it. Each worker logs to ~/mojax/<workdir name>.<worker host>.log; follow
# with `gcloud compute tpus tpu-vm ssh TPU --zone=ZONE --worker=0 --command='tail -f ~/mojax/*.log'`.
# Stop it with SIGTERM on every worker (`pkill -TERM -f mojax.main` there): mojax saves its last
# completed state and exits; rerunning this script resumes. A spot/preemptible TPU's own SIGTERM
# does the same within --config.preemption_grace_s.
log="\$(basename '$workdir').\$(hostname).log"
gcloud compute tpus tpu-vm ssh "$tpu" --zone="$zone" --worker=all --command="
  cd ~/mojax && pip install -q -e . 'jax[tpu]' && {
    MOJAX_DISTRIBUTED=1 setsid nohup python -m mojax.main --config='$config' --workdir='$workdir' \
      $extra > \"$log\" 2>&1 < /dev/null &
    echo \"mojax started on \$(hostname) (pid \$!), log ~/mojax/$log\"
  }"
