#!/usr/bin/env bash
# Issue 17 item 6: every GPU measurement in one call (docs/performance.md section 6), sized for a
# 15-minute lease. Each step has its own time limit, so a slow or failing step leaves the others'
# numbers. Logs go to $OUT (or ./gpu_out). Run from the repository root on a GPU host:
#     bash benchmarks/gpu_suite.sh
set -u
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PY:-python3}
step() {  # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  echo "=== $name (limit ${secs}s) $(date -u +%T) load $(cut -d' ' -f1 /proc/loadavg)"
  timeout -k 5 "$secs" "$@" >"$OUT/$name.log" 2>&1
  echo "=== $name rc=$? $(date -u +%T)"
  pkill -f "[b]enchmarks/.*--worker" 2>/dev/null; sleep 1  # workers a timed-out driver left behind
}
{
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  $PY -c "import jax, flax, optax, torch, transformers; print('jax', jax.__version__, jax.devices(), 'flax', flax.__version__, 'optax', optax.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
} >"$OUT/env.log" 2>&1
cat "$OUT/env.log"
# PARTS=mfu runs only the train-step MFU measurements (about 10 minutes), PARTS=decode only
# benchmarks/gpu_decode.py (about 9 minutes); default: everything but decode
PARTS=${PARTS:-all}
if [ "$PARTS" = all ]; then
step ceilings 40 $PY benchmarks/gpu_ceilings.py
step sampler "${SAMPLER_S:-250}" $PY benchmarks/sampler.py --mode=gpu --batches=1,64 --rounds 3
step train_step "${TRAIN_S:-170}" $PY benchmarks/train_step.py --mode gpu --variant qwen2.5-1.5b \
  --batch 8 --seq 2048 --dtype bfloat16 --remat full --logprob_chunk 512 --rounds 3
step breakdown "${BREAKDOWN_S:-90}" $PY benchmarks/decode_breakdown.py --variant qwen2.5-0.5b \
  --batches 1,64 --rounds 3
fi
# train-step MFU with the fused (cuDNN) attention: 1.5B full fine-tune, 7B LoRA r=64 (frozen base)
if [ "$PARTS" = all ] || [ "$PARTS" = mfu ]; then
MFU="--mode gpu --dtype bfloat16 --remat full --logprob_chunk 512 --rounds 3"
step mfu_15b_t2048 "${MFU_S:-150}" $PY benchmarks/train_step.py $MFU --variant qwen2.5-1.5b \
  --batch 8 --seq 2048
step mfu_15b_t4096 "${MFU_S:-150}" $PY benchmarks/train_step.py $MFU --variant qwen2.5-1.5b \
  --batch 4 --seq 4096
step mfu_7b_lora_t2048 "${MFU_S:-150}" $PY benchmarks/train_step.py $MFU --variant qwen2.5-7b \
  --lora_rank 64 --batch 4 --seq 2048
step mfu_7b_lora_t4096 "${MFU_S:-150}" $PY benchmarks/train_step.py $MFU --variant qwen2.5-7b \
  --lora_rank 64 --batch 2 --seq 4096
fi
if [ "$PARTS" = all ]; then
# off-policy: the sampler-vs-learner mismatch of qwen2.5-0.5b in bf16 (random weights unless
# MISMATCH_CKPT names an HF directory; a measurement, not a timing), then the RL step time of
# rollout.staleness=1 vs 0 on the embedded default (one GPU: the sampler shares its device)
step mismatch "${MISMATCH_S:-120}" $PY benchmarks/mismatch.py --variant qwen2.5-0.5b \
  --dtype bfloat16 --prompts 16 --samples 4 --new 256 --chunk 512 ${MISMATCH_CKPT:+--checkpoint "$MISMATCH_CKPT"}
step async_overlap "${ASYNC_S:-300}" $PY benchmarks/async_overlap.py --mode gpu --steps 6 \
  --warmup 2 --sft_steps 20 --rounds 3
fi
[ "${PARTS#decode}" != "$PARTS" ] || [ "$PARTS" = rollout ] || [ "$PARTS" = fused ] || for f in $([ "$PARTS" = all ] && echo ceilings sampler train_step breakdown mismatch async_overlap) \
  mfu_15b_t2048 mfu_15b_t4096 mfu_7b_lora_t2048 mfu_7b_lora_t4096; do
  echo "----- $f"; grep -vE "^  round |^\s*$" "$OUT/$f.log" | tail -n 40
done
# PARTS=decode: decode at batch 1 / 64 / 256 as a fraction of the measured copy bandwidth, with the
# launch contrasts (command buffers over the loop, unrolled per-layer decode) and launches per step
if [ "$PARTS" = decode ] || [ "$PARTS" = decode_rollout ]; then
step gpu_decode "${DECODE_S:-540}" $PY benchmarks/gpu_decode.py --batches 1,64,256 \
  ${DECODE_CONFIGS:+--configs "$DECODE_CONFIGS"}
cat "$OUT/gpu_decode.log"
fi
# PARTS=decode_rollout: also continuous vs static batching on a long-tailed length distribution
if [ "$PARTS" = decode_rollout ] || [ "$PARTS" = rollout ]; then
step rollout_tail "${ROLLOUT_S:-240}" $PY benchmarks/rollout_tail.py --variant qwen2.5-0.5b \
  --prompts 16 --samples 4 --slots 16 --mean_len 32 --max_len 256 --refills "${REFILLS:-1,4}"
cat "$OUT/rollout_tail.log"
fi
# PARTS=paged: the continuous sampler's dense KV cache against the paged one (gather path and the
# Pallas GPU paged-attention kernel), after the kernel against a reference on the GPU
if [ "$PARTS" = paged ]; then
step paged_kernel 120 $PY benchmarks/paged_cache.py --kernel_check --page_size 16
step paged_cache "${PAGED_S:-480}" $PY benchmarks/paged_cache.py --variant qwen2.5-0.5b \
  --dtype bfloat16 --prompts 16 --samples 4 --slots 16 --mean_len 32 --max_len 256 \
  --page_size 16 --num_pages 160 --impls gather,pallas_gpu
cat "$OUT/paged_kernel.log" "$OUT/paged_cache.log"
fi
# PARTS=fused: decode with the fused q/k/v and gate/up products (Layouts.fuse_decode_projections)
# against the unfused per-layer decode, then a profiler trace of one step's kernels
if [ "$PARTS" = fused ]; then
step gpu_decode_fused "${DECODE_S:-330}" $PY benchmarks/gpu_decode.py --batches 1,64,256 \
  --configs "${FUSED_CONFIGS:-0.5b:unfused,0.5b:fused,1.5b:unfused,1.5b:fused,0.5b:fused_oneq}"
cat "$OUT/gpu_decode_fused.log"
step gpu_profile "${PROFILE_S:-170}" $PY benchmarks/gpu_profile.py --batch 64 \
  --configs "${PROFILE_CONFIGS:-0.5b:unfused,0.5b:fused,1.5b:fused}"
cat "$OUT/gpu_profile.log"
fi
