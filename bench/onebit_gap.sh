#!/usr/bin/env bash
# The validation gap of 1-bit Adam against AdamW on the main deck (inputs/in.kjv-gpt, 2 ranks),
# freeze at 20 % of the run (inside the 15–25 % warm-up of Tang et al. 2021), for each run length
# and seed, with the bytes each sends per step and rank after the freeze; then the mean gap per
# run length. The table goes to stdout (Markdown), each run's log and metrics under WORKDIR.
# Usage: bench/onebit_gap.sh [STEPS (300,1000)] [SEEDS (1337,42,7)] [DATA (data/kjv.h5)] [WORKDIR (/tmp/onebit-gap)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps_list=${1:-300,1000} seeds=${2:-1337,42,7} data=${3:-data/kjv.h5} work=${4:-/tmp/onebit-gap}
. scripts/mpi-env
mkdir -p "$work"
for steps in ${steps_list//,/ }; do
  for seed in ${seeds//,/ }; do
    for opt in adamw onebit_adam; do
      out="$work/$opt-$steps-$seed"
      [ -s "$out/summary.json" ] && continue  # done before: a rerun only adds what is missing
      mpiexec -n 2 --oversubscribe build/gridtrain -i inputs/in.kjv-gpt --data.path="$data" --train.steps="$steps" \
        --train.seed="$seed" --optim.type=$opt --optim.freeze_step=$((steps / 5)) --train.eval_interval=0 \
        --checkpoint.dir=none --output.thermo=10 --output.dir="$out" --output.overwrite=true > "$out.log" 2>&1 \
        || { echo "onebit_gap: $opt, $steps steps, seed $seed failed (log: $out.log)" >&2; exit 1; }
    done
  done
done
/usr/bin/python3 - "$work" "$steps_list" "$seeds" <<'PY'
import json, sys
work, steps_list, seeds = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
def rows(opt, steps, seed):
    return [json.loads(line) for line in open(f"{work}/{opt}-{steps}-{seed}/metrics.jsonl")]
print("| steps | seed | AdamW val loss | 1-bit Adam val loss | gap | bytes per step after the freeze (AdamW / 1-bit) |")
print("|---|---|---|---|---|---|")
means = []
for steps in steps_list:
    gaps = []
    for seed in seeds:
        a, b = rows("adamw", steps, seed), rows("onebit_adam", steps, seed)
        va, vb = a[-1]["val_loss"], b[-1]["val_loss"]
        freeze = int(steps) // 5
        ba = next(r["comm_bytes"] for r in a if r["step"] > freeze)
        bb = next(r["comm_bytes"] for r in b if r["step"] > freeze)
        gaps.append(100 * (vb - va) / va)
        print(f"| {steps} | {seed} | {va:.4f} | {vb:.4f} | {gaps[-1]:+.2f} % | {ba:,} / {bb:,} = {ba / bb:.1f}x |")
    means.append((steps, sum(gaps) / len(gaps)))
print()
for steps, mean in means:
    print(f"mean gap at {steps} steps over seeds {', '.join(seeds)}: {mean:+.2f} %")
PY
