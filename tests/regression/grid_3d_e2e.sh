#!/usr/bin/env bash
# End to end on a 1 x 2 x 2 grid (tp = 2, pp = 2; 4 ranks): trains, reports tp and pp traffic and
# their rows in the timing breakdown (PP comm includes the bubble), and matches the one-rank
# run's final validation loss to 4 decimals.
# Usage: grid_3d_e2e.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -eu
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work"
"$mpiexec" -n 4 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --grid.tp=2 --grid.pp=2 \
  --output.dir="$work/grid" > "$work/grid.txt"
"$mpiexec" -n 1 "$gridtrain" -i "$deck" --data.path="$data" --output.dir="$work/one" > "$work/one.txt"
for pattern in "Process grid: 1 \(dp\) x 2 \(tp\) x 2 \(pp\) = 4 MPI ranks" "layers per stage auto = 1,1" \
               "^TP comm +\| [0-9]" "^PP comm +\| [0-9]" \
               "Bytes sent per training step and rank .avg over ranks.: dp 0, tp [1-9][0-9]*, pp [1-9][0-9]*"; do
  grep -Eq "$pattern" "$work/grid.txt" || { echo "FAIL: output lacks /$pattern/"; cat "$work/grid.txt"; exit 1; }
done
a=$(grep -E "^Final validation loss" "$work/grid.txt")
b=$(grep -E "^Final validation loss" "$work/one.txt")
[ "$a" = "$b" ] || { echo "FAIL: 1x2x2 gives '$a', one rank '$b'"; exit 1; }
echo "OK: $a on both"
