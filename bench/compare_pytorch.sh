#!/usr/bin/env bash
# gridtrain vs a plain PyTorch script on the same GPT, data, batch, threads and precision (fp32),
# in one run, plus the matmul probe of the library gridtrain runs (MFU's peak). Both run on 1
# rank with THREADS threads, one after the other, ROUNDS times, alternating, so that noise from
# the shared machine hits both. The peer is PyTorch eager at its fastest on the CPU:
# F.scaled_dot_product_attention and the multi-tensor (foreach) AdamW, as gridtrain runs; PYTHON
# is the Python whose torch it uses (default /usr/bin/python3, with the torch wheel whose C++ part
# gridtrain links: the same library).
# Usage: bench/compare_pytorch.sh [STEPS] [THREADS] [ROUNDS] [MICRO_BATCH] [PYTHON] [GRIDTRAIN FLAGS...]
#   e.g. ... 60 1 3 16 /usr/bin/python3 --model.matmul=blas (PyTorch's own matmul library, MKL)
#   (needs build/ and data/kjv.h5)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-60} threads=${2:-1} rounds=${3:-3} mb=${4:-16} python=${5:-/usr/bin/python3}
shift $(($# < 5 ? $# : 5))
extra=("$@")
model=(--model.n_layer=4 --model.n_head=4 --model.n_embd=128 --model.block_size=128)
out=$(mktemp -d)
. scripts/mpi-env
run_gridtrain() {
  # 1 rank, global batch = micro-batch, no evaluation until the end.
  OMP_NUM_THREADS=$threads build/gridtrain -i inputs/in.kjv-gpt "${model[@]}" --train.steps=$((steps + 3)) \
    --train.micro_batch="$mb" --train.global_batch="$mb" --train.eval_interval=0 --train.eval_samples=1 \
    --output.thermo=3 --checkpoint.dir=none --output.overwrite=true --output.dir="$out/gt" "${extra[@]}" > "$out/gt.txt"
  # Tokens/s over the steps after the first 3 (warm-up), as the PyTorch script measures.
  gt=$($python - "$out/gt/metrics.jsonl" "$mb" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
mb = int(sys.argv[2])
# Each row's step_ms covers the steps since the previous row; skip rows up to step 3 (warm-up).
ms = tokens = 0.0
for prev, row in zip(rows, rows[1:]):
    if prev["step"] >= 3:
        n = row["step"] - prev["step"]
        ms += row["step_ms"] * n
        tokens += n * mb * 128
print(f"{tokens / (ms / 1000):.1f}")
PY
)
  peak=$(grep -oE "Peak: [0-9.]+ GFLOP/s" "$out/gt.txt" | grep -oE "[0-9.]+")
  mfu=$(grep -oE "[0-9.]+% MFU" "$out/gt.txt")
  library=$(grep -oE "fp32 CPU matmuls: [a-z]+" "$out/gt.txt" | cut -d" " -f4)
}
run_pytorch() {
  pt=$(OMP_NUM_THREADS=$threads $python bench/pytorch_gpt.py data/kjv.h5 --steps "$steps" --threads "$threads" \
       --micro-batch "$mb" --attention sdpa \
       | grep -oE "[0-9.]+ tokens/s" | grep -oE "[0-9.]+")
}
echo "micro-batch $mb, T 128, $threads thread(s); gridtrain $(build/gridtrain --version | head -1);" \
     "PyTorch $($python -c 'import torch; print(torch.__version__)'); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
for r in $(seq "$rounds"); do
  if ((r % 2)); then run_gridtrain; run_pytorch; else run_pytorch; run_gridtrain; fi  # alternate the order
  ratio=$($python -c "print(f'{$gt / $pt:.3f}')")
  echo "round $r: gridtrain $gt tokens/s ($library; $mfu of $peak GFLOP/s matmul probe), pytorch $pt tokens/s, ratio $ratio"
done
rm -rf "$out"
