#!/usr/bin/env bash
# bf16 autocast on the KJV deck's model (2 ranks) reaches a validation loss within 3 % of fp32's
# after the same steps, and reports its tokens/s next to fp32's. STEPS defaults to 150 on a CPU
# with native bf16 (AVX-512 BF16 or AMX) and to 40 elsewhere, where LibTorch emulates bf16
# matmuls at about 1/15 of fp32's speed (5 s a step on a 2-core AMD EPYC); from step 40 on the two
# curves are within 1 % (the warmup's first steps differ more).
# Usage: bf16_vs_fp32.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC PYTHON [STEPS]
set -eu
gridtrain=$1 data=$2 work=$3 mpiexec=$4 python=$5
native=$(grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo yes || echo no)
steps=${6:-$([ "$native" = yes ] && echo 150 || echo 40)}
echo "native bf16 on this CPU: $native; $steps steps"
deck=$(dirname "$0")/../../inputs/in.kjv-gpt
rm -rf "$work" && mkdir -p "$work"
for p in fp32 bf16; do
  "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --train.steps="$steps" \
    --train.eval_interval=0 --optim.warmup_steps=20 --precision.type=$p \
    --checkpoint.dir=none --output.thermo=10 --output.dir="$work/$p" > "$work/$p.txt"
done
"$python" - "$work" "$steps" <<'PY'
import json, re, sys
work, steps = sys.argv[1], sys.argv[2]
def val(p):
    return [json.loads(l) for l in open(f"{work}/{p}/metrics.jsonl")][-1]["val_loss"]
def tps(p):
    return float(re.search(r"Performance: ([0-9.]+) tokens/s", open(f"{work}/{p}.txt").read()).group(1))
a, b = val("fp32"), val("bf16")
print(f"val loss after {steps} steps: fp32 {a:.4f}, bf16 {b:.4f} ({100 * (b - a) / a:+.2f} %); "
      f"tokens/s: fp32 {tps('fp32'):.0f}, bf16 {tps('bf16'):.0f} ({tps('bf16') / tps('fp32'):.2f}x)")
assert abs(b - a) <= 0.03 * a, "bf16 is more than 3 % away from fp32"
PY
