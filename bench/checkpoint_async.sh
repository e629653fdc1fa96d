#!/usr/bin/env bash
# Step-loop stall of asynchronous checkpoints against the time of synchronous ones, same run
# shape, one after the other: the KJV deck on 2 ranks, a checkpoint every INTERVAL steps. The wait
# for the last write at exit is reported apart (it is not in the step loop).
# Usage: bench/checkpoint_async.sh [STEPS] [INTERVAL]     (needs build/ and data/kjv.h5)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60} interval=${2:-10}
out=$(mktemp -d)
. scripts/mpi-env
for mode in false true; do
  mpirun -np 2 build/gridtrain -i inputs/in.kjv-gpt --train.steps="$steps" --train.eval_interval=0 \
    --train.eval_samples=2 --output.thermo="$steps" --output.dir="$out/$mode" --checkpoint.dir="$out/$mode/ckpt" \
    --checkpoint.interval="$interval" --checkpoint.async="$mode" > "$out/$mode.txt"
  line=$(grep "^Checkpoints:" "$out/$mode.txt")
  echo "async=$mode: $line"
done
sync_stall=$(grep -oE "stall [0-9.]+" "$out/false.txt" | grep -oE "[0-9.]+")
async_stall=$(grep -oE "stall [0-9.]+" "$out/true.txt" | grep -oE "[0-9.]+")
python3 -c "print(f'async stall / sync save time = {$async_stall / $sync_stall:.3f}')"
rm -rf "$out"
