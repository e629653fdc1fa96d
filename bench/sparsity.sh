#!/usr/bin/env bash
# Dynamic sparse training against dense on a deck at its own steps: for each run the final
# validation loss (and accuracy for a classifier), the training FLOPs per item as Evci et al.
# 2020 count them (mean over the run's steps, whole model and the sparsified tensors' products,
# against dense), and the measured step time, which is the dense kernels' (masked weights run on
# dense kernels). Each run's summary.json stays in out/sparsity/<deck>/<run>/.
# Usage: bench/sparsity.sh DECK RUN...
#   RUN: dense, or METHOD-PERCENT-DISTRIBUTION (rigl-80-erk), optionally @STEPS for train.steps
#   (the LR decay and sparsity.end follow it): dense@620 is a dense run of 620 steps
#   bench/sparsity.sh inputs/in.fashion-cnn dense rigl-80-uniform gmp-80-uniform   (scripts/prepare-fashion-mnist)
#   bench/sparsity.sh inputs/in.kjv-gpt dense rigl-50-uniform rigl-75-uniform      (scripts/prepare-kjv)
# Extra gridtrain flags go in $SPARSITY_FLAGS (e.g. "--train.steps=200" for a short trial).
set -euo pipefail
cd "$(dirname "$0")/.."
deck=$1
shift
root=out/sparsity/$(basename "$deck" | sed 's/^in\.//')
mkdir -p "$root"
. scripts/mpi-env
printf '| %-17s | %9s | %8s | %13s | %13s | %12s | %8s |\n' run "val loss" "val acc" "FLOPs/item" "layer FLOPs" \
  "layer saving" "ms/step"
for run in "$@"; do
  flags=()
  if [[ $run == *@* ]]; then flags+=(--train.steps="${run#*@}"); fi
  if [[ ${run%@*} != dense ]]; then
    IFS=- read -r method percent distribution <<< "${run%@*}"
    flags+=(--sparsity.method="$method" --sparsity.target="0.$percent" --sparsity.distribution="$distribution")
  fi
  mpirun -np 2 build/gridtrain -i "$deck" --checkpoint.dir=none --output.overwrite=true --output.dir="$root/$run" \
    "${flags[@]}" ${SPARSITY_FLAGS:-} > "$root-$run.log" 2>&1 || { echo "$run failed: $root-$run.log"; exit 1; }
  python3 - "$root/$run/summary.json" "$run" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
sp = s.get("sparsity")
flops = f'{sp["mean_flops_per_item"]:.4g}' if sp else "dense"
layer = f'{sp["mean_layer_flops_per_item"]:.4g}' if sp else "dense"
saving = f'{100 * (1 - sp["mean_layer_flops_per_item"] / sp["layer_dense_flops_per_item"]):.1f} %' if sp else "-"
acc = s.get("final_val_accuracy")
print(f'| {sys.argv[2]:<17} | {s["final_val_loss"]:9.4f} | {acc if acc is None else round(acc, 4)!s:>8} | '
      f'{flops:>13} | {layer:>13} | {saving:>12} | {1e3 * s["step_s"]:8.1f} |')
PY
done
