#!/usr/bin/env bash
# precision.weights = bf16 against fp32 weights (both with bf16 compute) at every ZeRO stage on
# the KJV deck at dp = 2: the model state per rank the summary's accountant measured (at the end,
# and the peak of parameters + gradients + optimizer state), the dp bytes sent per step, and
# throughput. The two weight dtypes alternate per stage, so each pair ran side by side.
# Usage: bench/weights_precision.sh [STEPS]     (needs build/ and data/kjv.h5: scripts/prepare-kjv)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. scripts/mpi-env
printf '%-5s %-7s %10s %10s %10s %10s %10s %12s %10s %8s\n' stage weights "params" "grads" "optim" "total" \
  "peak" "dp B/step" "tokens/s" "val loss"
for stage in 0 1 2 3; do
  for weights in fp32 bf16; do
    log=$out/$stage-$weights.txt
    mpirun -np 2 build/gridtrain -i inputs/in.kjv-gpt --train.steps="$steps" --train.eval_interval=0 \
      --train.eval_samples=64 --output.thermo="$steps" --output.dir="$out/$stage-$weights" --checkpoint.dir=none \
      --precision.type=bf16 --precision.weights="$weights" --optim.zero_stage="$stage" > "$log"
    awk -v stage="$stage" -v weights="$weights" '
      /^Performance:/ { rate = $2 }
      /^parameters / { p = $2; pp = $3 } /^gradients / { g = $2; gp = $3 } /^optimizer state / { o = $3; op = $4 }
      /^Bytes sent per training step/ { match($0, /dp [0-9]+/); bytes = substr($0, RSTART + 3, RLENGTH - 3) }
      /^Final validation loss/ { loss = $4 }
      END { printf "%-5s %-7s %10.3f %10.3f %10.3f %10.3f %10.3f %12d %10.0f %8.4f\n", stage, weights, p, g, o,
              p + g + o, pp + gp + op, bytes, rate, loss }' "$log"
  done
done
echo "(MiB per rank, max over ranks; peak: of each part, as the summary prints it)"
