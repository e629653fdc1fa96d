#!/usr/bin/env bash
# Two gridtrain binaries (say, a refactoring and the commit before it) on the main job's deck,
# side by side in one run: 2 ranks, STEPS steps each, alternating ROUNDS times so that the shared
# machine's noise hits both. Prints each run's tokens/s (the summary's Performance line) and the
# ratio of the medians, B / A. A and B may carry deck options after the binary (split at spaces),
# to compare settings of one binary: bench/compare_builds.sh build/gridtrain \
# "build/gridtrain --optim.zero_stage=1".
# Usage: bench/compare_builds.sh GRIDTRAIN_A GRIDTRAIN_B [STEPS] [ROUNDS]   (needs data/kjv.h5)
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 steps=${3:-150} rounds=${4:-3}
out=$(mktemp -d)
. scripts/mpi-env
run() {  # binary [options], label, round
  # shellcheck disable=SC2086  # $1 is split on purpose: a binary and its options
  mpirun -np 2 --oversubscribe $1 -i inputs/in.kjv-gpt --train.steps="$steps" --train.eval_interval=0 \
    --train.eval_samples=8 --checkpoint.dir=none --output.thermo=50 --output.overwrite=true \
    --output.dir="$out/$2-$3" > "$out/$2-$3.txt"
  sed -nE 's/^Performance: ([0-9.]+) tokens\/s.*/\1/p' "$out/$2-$3.txt"
}
for r in $(seq "$rounds"); do
  echo "round $r: A $(run "$a" a "$r") tokens/s, B $(run "$b" b "$r") tokens/s"
done | tee "$out/rounds.txt"
/usr/bin/python3 - "$out/rounds.txt" <<'PY'
import re, statistics, sys
rows = [re.findall(r"([0-9.]+) tokens/s", l) for l in open(sys.argv[1])]
a = statistics.median(float(r[0]) for r in rows)
b = statistics.median(float(r[1]) for r in rows)
print(f"median tokens/s: A {a:.0f}, B {b:.0f}; B / A = {b / a:.3f}")
PY
rm -rf "$out"
