#!/usr/bin/env bash
# The time remaining that thermo lines and metrics.jsonl carry (LAMMPS' cpuremain): at the
# half-way point of a 60-step run (a model whose steps take tens of ms, so that timer noise is
# small against them) it is within 20 % of the time the second half really took (elapsed_s at
# the end less elapsed_s there), and the time to the next checkpoint is its share up to it.
# Usage: remaining_time.sh GRIDTRAIN DATA.h5 WORKDIR PYTHON MPIEXEC
set -eu
gridtrain=$1 data=$2 work=$3 python=$4 mpiexec=$5
rm -rf "$work" && mkdir -p "$work"
"$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$(dirname "$0")/../../inputs/in.smoke" --data.path="$data" \
  --output.dir="$work/out" --checkpoint.dir="$work/ckpt" --checkpoint.interval=40 --train.steps=60 \
  --output.thermo=10 --train.eval_interval=10 --model.n_embd=128 --model.n_layer=4 --model.n_head=4 \
  --model.block_size=128 > "$work/run.txt" 2>&1 || { cat "$work/run.txt"; echo "FAIL: run"; exit 1; }
grep -Eq "Remain$" "$work/run.txt" && grep -Eq " [0-9]+:[0-9]{2}:[0-9]{2}$" "$work/run.txt" \
  || { echo "FAIL: no Remain column in thermo"; exit 1; }
"$python" - "$work/out/metrics.jsonl" <<'PY'
import json, sys
rows = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}
half, end = rows[30], rows[60]
real = end["elapsed_s"] - half["elapsed_s"]
err = half["remaining_s"] / real - 1
print(f"at step 30: {half['remaining_s']:.3f} s remaining estimated, {real:.3f} s taken ({100 * err:+.1f} %)")
assert abs(err) <= 0.2, "the estimate is off by more than 20 %"
assert abs(half["checkpoint_in_s"] - half["remaining_s"] / 3) <= 1e-3 * half["remaining_s"], "checkpoint at 40: 10 of 30 steps"
assert end["remaining_s"] == 0 and "checkpoint_in_s" not in end, end
print("OK")
PY
