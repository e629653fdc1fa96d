#!/usr/bin/env bash
# Time per new token of `gridtrain generate` against the prompt's length, with the KV cache and
# without, side by side: a model of the main deck's size (gpt or llama) with a context of 1024
# tokens (trained STEPS steps: the weights' quality does not change the work), prompts of 16,
# 256 and 960 bytes of the KJV, 64 new tokens, one thread.
# Usage: bench/generate_kv_cache.sh [gpt|llama] [STEPS]     (needs build/ and data/kjv.h5)
set -euo pipefail
cd "$(dirname "$0")/.."
family=${1:-gpt} steps=${2:-2}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. scripts/mpi-env
export OMP_NUM_THREADS=1
build/gridtrain -i inputs/in.kjv-gpt --model.type="$family" --model.block_size=1024 --data.path=data/kjv.h5 \
  --train.steps="$steps" --train.micro_batch=2 --train.global_batch=2 --train.eval_interval=0 \
  --train.eval_samples=2 --optim.warmup_steps=1 --output.dir="$out/run" --checkpoint.dir="$out/ckpt" \
  --checkpoint.async=false > "$out/train.txt"
ckpt=$(ls "$out"/ckpt/step-*.h5 | tail -1)
printf "%-14s %-8s %s\n" "prompt tokens" "KV cache" "ms per new token (after the first)"
for length in 16 256 960; do
  prompt=$(head -c 4000 data/kjv.txt | tr -c 'A-Za-z ' ' ' | head -c "$length")
  for cache in true false; do
    line=$(build/gridtrain generate "$ckpt" --prompt "$prompt" --max-new-tokens 64 --temperature 0 \
             --kv-cache "$cache" 2>&1 >/dev/null | grep "^generate:")
    printf "%-14s %-8s %s\n" "$length" "$cache" "$(echo "$line" | grep -oE '[0-9.]+ ms per token')"
  done
done
