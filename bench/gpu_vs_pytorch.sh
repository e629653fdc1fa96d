#!/usr/bin/env bash
# gridtrain against plain PyTorch on one GPU, same shape (inputs/in.gpt2-bytes: GPT-2 small on
# bytes, T = 1024, micro-batch 16, bf16), same data, in one run: PyTorch with the written-out
# attention, with F.scaled_dot_product_attention, and with SDPA + torch.compile. Prints tokens/s,
# peak CUDA memory and gridtrain's ratio to each.
# Usage: bench/gpu_vs_pytorch.sh [GRIDTRAIN] [STEPS] [PYTHON]
#   (needs data/kjv.h5, a GPU, a build with the GPU path, and a PyTorch with CUDA for PYTHON)
set -euo pipefail
cd "$(dirname "$0")/.."
gridtrain=${1:-build/gridtrain} steps=${2:-60} python=${3:-python3}
out=$(mktemp -d)
shape=(--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --micro-batch 16)
"$gridtrain" -i inputs/in.gpt2-bytes --train.steps=$((steps + 10)) --output.thermo=10 --output.overwrite=true \
  --output.dir="$out/gt" > "$out/gt.txt"
# Tokens/s after the first 10 steps (warm-up), from metrics.jsonl; peak memory from the summary.
gt=$("$python" - "$out/gt/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
late = [(a, b) for a, b in zip(rows, rows[1:]) if a["step"] >= 10]
ms = sum(b["step_ms"] * (b["step"] - a["step"]) for a, b in late)
n = sum(b["step"] - a["step"] for a, b in late)
print(f"{n * 16 * 1024 / (ms / 1000):.0f}")
PY
)
gt_mem=$(grep -oE "peak allocated min/avg/max over 1 ranks: [0-9.]+" "$out/gt.txt" | grep -oE "[0-9.]+$" || echo "?")
echo "gridtrain: $gt tokens/s, peak memory $gt_mem MiB ($(grep -oE '[0-9.]+% MFU \(peak [^)]*\)' "$out/gt.txt"))"
for variant in "--attention math" "--attention sdpa" "--attention sdpa --compile"; do
  # shellcheck disable=SC2086
  line=$("$python" bench/pytorch_gpt.py data/kjv.h5 --device cuda --precision bf16 --steps "$steps" "${shape[@]}" $variant)
  tps=$(echo "$line" | grep -oE "^pytorch: [0-9.]+" | grep -oE "[0-9.]+$")
  echo "pytorch ($variant): $line; gridtrain / pytorch = $("$python" -c "print(f'{$gt / $tps:.2f}')")"
done
rm -rf "$out"
