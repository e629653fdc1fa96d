#!/usr/bin/env bash
# --dry-run's ZeRO lines at dp = 2, with fp32 weights and with precision.weights = bf16: every
# stage's row of the formula table equals Rajbhandari et al. 2020's bytes for the printed Ψ and
# accounting "W + W + K bytes per parameter" (params WΨ/(dp if stage 3), grads WΨ/(dp if stage
# >= 2), optimizer KΨ/(dp if stage >= 1); W = 4, K = 8 for fp32 AdamW; W = 2, K = 12 with the
# fp32 master), the configured stage is marked, and the per-rank estimate's optimizer column at
# stage 1 is half of stage 0's.
# Usage: dry_run_zero.sh GRIDTRAIN DATA.h5 MPIEXEC
set -u
gridtrain=$1 data=$2 mpiexec=$3
deck=$(dirname "$0")/../../inputs/in.smoke
fail() { echo "FAIL: $*"; exit 1; }
dry() { "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --dry-run --model.n_embd=512 \
          --optim.zero_stage="$1" "${@:2}"; }
for weights in fp32 bf16; do
  want_w=4 want_k=8
  [ "$weights" = bf16 ] && want_w=2 want_k=12
  flags=(--precision.type="$weights" --precision.weights="$weights")
  out0=$(dry 0 "${flags[@]}") || fail "dry run at stage 0 ($weights weights) failed: $out0"
  out1=$(dry 1 "${flags[@]}") || fail "dry run at stage 1 ($weights weights) failed: $out1"
  echo "$out1"
  echo "$out1" | grep -q "^ *1 .*<- optim.zero_stage" || fail "stage 1 is not marked"
  echo "$out1" | awk -v want_w="$want_w" -v want_k="$want_k" '
    /^ZeRO over dp = / { match($0, /dp = [0-9]+/); dp = substr($0, RSTART + 5, RLENGTH - 5) + 0
                         match($0, /= [0-9]+ parameters/); psi = substr($0, RSTART + 2, RLENGTH - 13) + 0
                         match($0, /[0-9]+ \+ [0-9]+ \+ [0-9]+ bytes per parameter/); split(substr($0, RSTART, RLENGTH), b, " ")
                         w = b[1] + 0; k = b[5] + 0; next }
    dp && /^ *[0-3] +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+/ {
      s = $1; mib = 1048576
      want[2] = w * psi / (s >= 3 ? dp : 1) / mib; want[3] = w * psi / (s >= 2 ? dp : 1) / mib
      want[4] = k * psi / (s >= 1 ? dp : 1) / mib
      for (c = 2; c <= 4; ++c) if ((want[c] - $c) ^ 2 > 0.0006 ^ 2) { print "stage " s " column " c ": " $c " != " want[c]; bad = 1 }
      rows++ }
    END { if (dp != 2 || psi == 0 || w != want_w || k != want_k || rows != 4) {
            print "table not found (dp " dp ", psi " psi ", W " w ", K " k ", rows " rows ")"; bad = 1 }
          exit bad }' || fail "the ZeRO table ($weights weights) does not follow the formula"
  optim() { echo "$1" | awk '/^ +stage +parameters/ { getline; print $5; exit }'; }
  o0=$(optim "$out0") o1=$(optim "$out1")
  awk -v a="$o0" -v b="$o1" 'BEGIN { exit !(a > 0 && (b - a / 2) ^ 2 <= 0.1 ^ 2) }' \
    || fail "the per-rank optimizer estimate at stage 1 ($o1 MiB) is not half of stage 0's ($o0 MiB)"
  echo "OK ($weights weights): ZeRO table follows the formula; optimizer estimate $o0 -> $o1 MiB"
done
