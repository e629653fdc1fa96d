#!/usr/bin/env bash
# bf16 autocast on the KJV deck's model (2 ranks) learns, after the same steps, at least 90 % of
# what fp32 learns in the same script (each run's drop from its step-1 loss to its final
# validation loss), and reports its tokens/s next to fp32's and its gap to fp32's validation loss
# (3 % being the historical tolerance, now printed, not asserted). STEPS defaults to 150 where the
# kernels have native bf16 (AVX-512 BF16 or AMX, not capped below it by ONEDNN_MAX_CPU_ISA) and to
# 40 elsewhere, where LibTorch emulates bf16 matmuls at about 1/15 of fp32's speed (3.6 s a step
# on a 2-core AMD EPYC capped at AVX2).
# Usage: bf16_vs_fp32.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC PYTHON [STEPS]
set -eu
gridtrain=$1 data=$2 work=$3 mpiexec=$4 python=$5
native=$(grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo && echo yes || echo no)
isa=${ONEDNN_MAX_CPU_ISA:-ALL}
case "${isa^^}" in  # oneDNN capped below AVX512_CORE_BF16 runs bf16 without it
  SSE41 | AVX | AVX2 | AVX2_VNNI | AVX2_VNNI_2 | AVX512_CORE | AVX512_CORE_VNNI) native=no ;;
esac
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
def rows(p):
    return [json.loads(l) for l in open(f"{work}/{p}/metrics.jsonl")]
def tps(p):
    return float(re.search(r"Performance: ([0-9.]+) tokens/s", open(f"{work}/{p}.txt").read()).group(1))
assert all(rows(p)[0]["step"] == 1 for p in ("fp32", "bf16")), "metrics.jsonl must start at step 1"
(fa, a), (fb, b) = [(r[0]["loss"], r[-1]["val_loss"]) for r in (rows("fp32"), rows("bf16"))]
print(f"val loss after {steps} steps: fp32 {a:.4f}, bf16 {b:.4f} ({100 * (b - a) / a:+.2f} %; 3 % was the old "
      f"tolerance); tokens/s: fp32 {tps('fp32'):.0f}, bf16 {tps('bf16'):.0f} ({tps('bf16') / tps('fp32'):.2f}x)")
# Measured against fp32 in the same script, not against a fixed gap: AMX, AVX-512 BF16 and
# emulated bf16 round differently, and the step count itself depends on the host. Each run's
# learning is the drop from its step-1 loss (one forward at initialization, before any update:
# ~ln 256 for both) to its final validation loss. bf16 must learn at least 90 % of what fp32
# learns: the claim is that autocast is a substitute for fp32 on this model, so it may cost at
# most a tenth of the learning (what this guards against, updates lost to bf16 rounding or an
# autocast that stalls training, costs far more). One-sided: bf16 learning more is no failure.
# The fraction is a stated requirement, not a fit: it is wider than the old two-sided 3 % of the
# final loss (~0.98 of the learning at 150 steps), and it leaves a wide margin over what bf16's
# rounding (2^-9 relative per matmul input) does to 40-150 steps, which acts like another seed's
# trajectory: on a 2-core AMD EPYC Genoa the two learn within 0.5 % of each other (1.003 of fp32's
# at 150 steps with AVX-512 BF16, 1.001 at 40 steps capped at AVX2).
da, db = fa - a, fb - b
print(f"learning (step-1 loss - final val loss): fp32 {fa:.4f} - {a:.4f} = {da:.4f}, "
      f"bf16 {fb:.4f} - {b:.4f} = {db:.4f} ({db / da:.3f} of fp32's; bound 0.900)")
assert da > 0, f"fp32 did not learn: {fa} -> {a}"
assert db >= 0.9 * da, f"bf16 learned {db:.4f}, less than 90 % of fp32's {da:.4f}"
PY
