#!/usr/bin/env bash
# The ZeRO paper's example (Rajbhandari et al. 2020, Fig. 1: Ψ = 7.5B parameters, N_d = 64,
# mixed-precision Adam): model state per GPU 120 / 31.4 / 16.6 / 1.9 GB at stages 0-3. With
# precision.weights = bf16, --dry-run on 64 ranks (its ZeRO table) and `gridtrain predict`
# (its state GB column) give each within 2 % for a 7.47B GPT, and both say which accounting
# they use.
# Usage: zero_paper.sh GRIDTRAIN DATA.h5 MPIEXEC
set -u
gridtrain=$1 data=$2 mpiexec=$3
deck=$(dirname "$0")/../../inputs/in.smoke
fail() { echo "FAIL: $*"; exit 1; }
model=(--data.path="$data" --model.n_layer=36 --model.n_embd=4096 --model.n_head=32 --model.block_size=2048
       --model.vocab_size=51200 --train.micro_batch=1 --train.global_batch=64 --precision.type=bf16
       --precision.weights=bf16)
accounting="bf16 weights and gradients, fp32 master weights with the optimizer state: 2 + 2 + 12 bytes per parameter"
# Within 2 % of the paper's figure for stage $1; $2 in GB.
near() { awk -v s="$1" -v got="$2" 'BEGIN { split("120 31.4 16.6 1.9", p, " "); want = p[s + 1]
  printf "stage %d: %.3f GB, paper %s GB (%+.1f %%)\n", s, got, want, 100 * (got / want - 1)
  exit !((got / want - 1) ^ 2 <= 0.02 ^ 2) }'; }

out=$("$mpiexec" -n 64 --oversubscribe "$gridtrain" -i "$deck" --dry-run --optim.zero_stage=1 "${model[@]}" 2>&1) \
  || fail "the 64-rank dry run failed: $out"
echo "$out" | grep -F "$accounting" || fail "--dry-run does not name the accounting"
echo "--dry-run's ZeRO table:"
for s in 0 1 2 3; do
  mib=$(echo "$out" | awk -v s="$s" '/^ZeRO over dp = 64/ { t = 1; next } t && $1 == s { print $5; exit }')
  [ -n "$mib" ] || fail "no stage $s row in: $out"
  near "$s" "$(awk -v m="$mib" 'BEGIN { print m * 1048576 / 1e9 }')" || fail "--dry-run at stage $s"
done

echo "predict's state GB:"
for s in 0 1 2 3; do
  out=$("$gridtrain" predict -i "$deck" --ranks 64 --layout 64,1,1,$s --device h100 "${model[@]}" 2>&1) \
    || fail "predict at stage $s failed: $out"
  echo "$out" | grep -qF "$accounting" || fail "predict does not name the accounting: $out"
  csv=$("$gridtrain" predict -i "$deck" --ranks 64 --layout 64,1,1,$s --device h100 --csv "${model[@]}" 2>&1) \
    || fail "predict --csv at stage $s failed: $csv"
  # The column by its name: the table gains a column with every grid axis.
  gb=$(echo "$csv" | awk -F, '/state_bytes/ { for (i = 1; i <= NF; i++) if ($i == "state_bytes") c = i; next }
                              c { print $c / 1e9; exit }')
  near "$s" "$gb" || fail "predict at stage $s: $out"
done
echo "OK: --dry-run and predict give the ZeRO paper's model state per GPU within 2 %"
