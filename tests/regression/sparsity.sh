#!/usr/bin/env bash
# sparsity.method = rigl through the program: the setup line, thermo's Sparse% column, the
# sparsity keys of metrics.jsonl and summary.json (the target reached in the matrices, the
# embedding dense, fewer FLOPs than dense), `gridtrain inspect`'s Zeros% of the masks and weights,
# `gridtrain export`'s weights with the same zeros, read back with safetensors; and the two ways a
# resume can mismatch: a dense run resuming the sparse checkpoint says its masks go unused, a
# sparse run refuses a dense checkpoint by name.
# Usage: sparsity.sh GRIDTRAIN DATA.h5 WORKDIR PYTHON MPIEXEC
set -eu
gridtrain=$1 data=$2 work=$3 python=$4 mpiexec=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
"$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$(dirname "$0")/../../inputs/in.smoke" --data.path="$data" \
  --output.dir="$work/out" --checkpoint.dir="$work/ckpt" --sparsity.method=rigl --sparsity.target=0.75 \
  --sparsity.interval=5 > "$work/run.txt" 2>&1 || { cat "$work/run.txt"; fail "the run"; }
grep -q "^Sparsity: rigl to 75.0 % zeros (uniform) in 8 tensors (matrix,conv)" "$work/run.txt" || fail "no setup line"
grep -q " Sparse% " "$work/run.txt" || fail "no Sparse% column"
grep -Eq "^ +30 .* 75\.00 " "$work/run.txt" || fail "step 30's Sparse% is not 75.00"
grep -q "^Training FLOPs per token as Evci et al. 2020 count them" "$work/run.txt" || fail "no FLOPs line in the summary"
"$gridtrain" inspect "$work/ckpt/step-00000030.h5" > "$work/inspect.txt" || fail "inspect"
grep -Eq "^/sparse/h.0.attn.c_attn.weight/mask +\([0-9, ]+\) +float32 +75\.00 ok" "$work/inspect.txt" || fail "inspect's mask row"
grep -Eq "^/model/h.0.attn.c_attn.weight +\([0-9, ]+\) +float32 +(7[5-9]|[89][0-9])\.[0-9]+ ok" "$work/inspect.txt" ||
  fail "inspect's weight row has fewer than 75 % zeros"
"$gridtrain" export "$work/ckpt/step-00000030.h5" --format hf --output "$work/hf" > "$work/export.txt" || fail "export"
"$python" - "$work/out" "$work/hf" <<'PY' || fail "metrics, summary or the exported weights"
import glob, json, sys
from safetensors.numpy import load_file
out, hf = sys.argv[1:]
last = [json.loads(line) for line in open(f"{out}/metrics.jsonl")][-1]
assert abs(last["sparsity"] - 0.75) < 1e-3, last
assert abs(last["sparsity_matrix"] - 0.75) < 1e-3 and last["sparsity_embedding"] == 0, last
assert 0 < last["sparsity_model"] < last["sparsity"], last
assert last["layer_flops_per_item"] < 0.26 * last["layer_dense_flops_per_item"], last
assert last["flops_per_item"] < last["dense_flops_per_item"], last
summary = json.load(open(f"{out}/summary.json"))["sparsity"]
assert summary["sparsified"] == last["sparsity"], summary
assert summary["mean_layer_flops_per_item"] < summary["layer_dense_flops_per_item"], summary
weights = {}
for f in glob.glob(f"{hf}/*.safetensors"):
    weights.update(load_file(f))
for name in ("h.0.attn.c_attn.weight", "h.1.mlp.c_fc.weight"):
    w = next(v for k, v in weights.items() if k.endswith(name))
    zeros = float((w == 0).mean())
    assert zeros >= 0.75, (name, zeros)
print("sparsity: metrics", {k: round(v, 4) for k, v in last.items() if "sparsity" in k}, "exported zeros ok")
PY
smoke() {
  "$mpiexec" -n 1 "$gridtrain" -i "$(dirname "$0")/../../inputs/in.smoke" --data.path="$data" "$@" > "$work/resume.txt" 2>&1
}
smoke --output.dir="$work/out" --checkpoint.dir="$work/ckpt" --checkpoint.resume=auto --train.steps=32 ||
  { cat "$work/resume.txt"; fail "a dense resume of the sparse checkpoint"; }
grep -q "; its sparsity masks are not used (sparsity.method = none)" "$work/resume.txt" || fail "no note on unused masks"
smoke --output.dir="$work/dense" --checkpoint.dir="$work/dense-ckpt" --train.steps=2 || fail "the dense run"
if smoke --output.dir="$work/dense" --checkpoint.dir="$work/dense-ckpt" --checkpoint.resume=auto --train.steps=4 \
  --sparsity.method=gmp; then fail "a sparse run resumed a dense checkpoint"; fi
grep -q "has no sparsity masks (/sparse): it was written with sparsity.method = none; start sparse training from its \
weights with checkpoint.init_from" "$work/resume.txt" || { cat "$work/resume.txt"; fail "no refusal by name"; }
echo "PASS"
