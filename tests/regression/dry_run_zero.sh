#!/usr/bin/env bash
# --dry-run's ZeRO lines at dp = 2: every stage's row of the formula table equals Rajbhandari et
# al. 2020's bytes for the printed Ψ and K (params 4Ψ/(dp if stage 3), grads 4Ψ/(dp if stage >= 2),
# optimizer KΨ/(dp if stage >= 1)), the configured stage is marked, and the per-rank estimate's
# optimizer column at stage 1 is half of stage 0's.
# Usage: dry_run_zero.sh GRIDTRAIN DATA.h5 MPIEXEC
set -u
gridtrain=$1 data=$2 mpiexec=$3
deck=$(dirname "$0")/../../inputs/in.smoke
fail() { echo "FAIL: $*"; exit 1; }
dry() { "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --dry-run --model.n_embd=512 --optim.zero_stage="$1"; }
out0=$(dry 0) || fail "dry run at stage 0 failed: $out0"
out1=$(dry 1) || fail "dry run at stage 1 failed: $out1"
echo "$out1"
echo "$out1" | grep -q "^ *1 .*<- optim.zero_stage" || fail "stage 1 is not marked"
echo "$out1" | awk '
  /^ZeRO over dp = / { match($0, /dp = [0-9]+/); dp = substr($0, RSTART + 5, RLENGTH - 5) + 0
                       match($0, /= [0-9]+ parameters/); psi = substr($0, RSTART + 2, RLENGTH - 13) + 0
                       match($0, /K = [0-9]+/); k = substr($0, RSTART + 4, RLENGTH - 4) + 0; next }
  dp && /^ *[0-3] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/ {
    s = $1; mib = 1048576
    want[2] = 4 * psi / (s >= 3 ? dp : 1) / mib; want[3] = 4 * psi / (s >= 2 ? dp : 1) / mib
    want[4] = k * psi / (s >= 1 ? dp : 1) / mib
    for (c = 2; c <= 4; ++c) if ((want[c] - $c) ^ 2 > 0.0006 ^ 2) { print "stage " s " column " c ": " $c " != " want[c]; bad = 1 }
    rows++ }
  END { if (dp != 2 || psi == 0 || k != 8 || rows != 4) { print "table not found (dp " dp ", psi " psi ", K " k ", rows " rows ")"; bad = 1 }
        exit bad }' || fail "the ZeRO table does not follow the formula"
optim() { echo "$1" | awk '/^ +stage +parameters/ { getline; print $5; exit }'; }
o0=$(optim "$out0") o1=$(optim "$out1")
awk -v a="$o0" -v b="$o1" 'BEGIN { exit !(a > 0 && (b - a / 2) ^ 2 <= 0.1 ^ 2) }' \
  || fail "the per-rank optimizer estimate at stage 1 ($o1 MiB) is not half of stage 0's ($o0 MiB)"
echo "OK: ZeRO table follows the formula; optimizer estimate $o0 -> $o1 MiB"
