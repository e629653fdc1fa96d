#!/usr/bin/env bash
# Exposed gradient communication as a share of step time, with and without comm.overlap, on the
# KJV deck at dp = 2 (2 ranks), one run after the other.
# Usage: bench/overlap.sh [STEPS] [BUCKET_MB]     (needs build/ and data/kjv.h5)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-100} bucket=${2:-1}
out=$(mktemp -d)
. scripts/mpi-env
for overlap in false true; do
  mpirun -np 2 build/gridtrain -i inputs/in.kjv-gpt --train.steps="$steps" --train.eval_interval=0 \
    --train.eval_samples=2 --output.thermo="$steps" --output.dir="$out/$overlap" --checkpoint.dir=none \
    --comm.overlap="$overlap" --comm.bucket_mb="$bucket" > "$out/$overlap.txt"
  loop=$(grep -oE "^Loop time of [0-9.]+" "$out/$overlap.txt" | grep -oE "[0-9.]+$")
  line=$(grep "^Gradient exchange" "$out/$overlap.txt")
  exposed=$(echo "$line" | grep -oE "[0-9.]+ s exposed" | grep -oE "^[0-9.]+")
  bytes=$(python3 -c "import json; print(json.loads(open('$out/$overlap/metrics.jsonl').readlines()[-1])['comm_bytes'])")
  python3 -c "print(f'overlap=$overlap: loop {float($loop):.2f} s, exposed comm {float($exposed):.3f} s = {100*float($exposed)/float($loop):.2f} % of step time; {$bytes} bytes/step/rank; $line')"
done
rm -rf "$out"
