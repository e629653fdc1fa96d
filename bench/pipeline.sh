#!/usr/bin/env bash
# Pipeline bubble and per-axis traffic on the KJV deck's model (needs build/ and data/kjv.h5).
#  1. Bubble: pp = 2 (2 ranks, one core each) and pp = 4 (4 ranks on 2 cores: oversubscribed),
#     micro-batches m = 1, 2, 4, 8 of 4 sequences; the PP comm timer's share of the pipeline
#     phase (Data + Compute + PP comm) against 1F1B's (p − 1)/(m + p − 1).
#  3. Schedules: pp = 2 and 4 with 8 layers, m = 8, plain 1F1B against train.schedule = interleaved
#     with 2 chunks per rank and zb-h1 (ZB-H1); the same bubble share against the schedule's as
#     the summary prints it: (p − 1)/(v·m + p − 1), or (p − 1)(F + B − 2W) from measured F, B, W.
#  2. Bytes per training step and rank on tp and pp (the summary's line) against the analytic
#     volumes: tp, per micro-batch, 4 all-reduces of B·T·C per layer (2 forward, 2 backward),
#     1 for the embedding and 1 for the head's input gradient, 3 of B·T for the vocab-parallel
#     cross-entropy, each 2(t − 1)/t of its bytes; pp, B·T·C activations forward and as many
#     gradients back per micro-batch and stage boundary, plus the tied embedding's V·C
#     gradient between the first and last stage.
# Usage: bench/pipeline.sh [STEPS]
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-20}
out=$(mktemp -d)
. scripts/mpi-env
export OMPI_MCA_mpi_yield_when_idle=1
run() {  # run NAME RANKS ARGS...
  local name=$1 n=$2; shift 2
  mpirun -np "$n" --oversubscribe build/gridtrain -i inputs/in.kjv-gpt --train.steps="$steps" \
    --train.eval_interval=0 --train.eval_samples=2 --output.thermo="$steps" --output.dir="$out/$name" \
    --checkpoint.dir=none --train.micro_batch=4 "$@" > "$out/$name.txt"
}
for p in 2 4; do
  for m in 1 2 4 8; do run "pp$p-m$m" "$p" --grid.pp="$p" --train.global_batch=$((4 * m)); done
done
run tp2 2 --grid.tp=2 --train.global_batch=8
run pp2 2 --grid.pp=2 --train.global_batch=8
for p in 2 4; do
  for schedule in 1f1b interleaved zb-h1; do
    v=1; [ "$schedule" = interleaved ] && v=2
    run "pp$p-L8-$schedule" "$p" --grid.pp="$p" --model.n_layer=8 --train.global_batch=32 --train.schedule=$schedule \
      --grid.virtual_stages=$v
  done
done
python3 - "$out" "$steps" <<'PY'
import re, sys
out, steps = sys.argv[1], sys.argv[2]
def section(text, name):  # avg time of a timer section
    return float(re.search(rf"^{name}\s*\|\s*\S+\s*\|\s*(\S+)", text, re.M).group(1))
print("pp  m  measured bubble  1F1B (p-1)/(m+p-1)")
for p in (2, 4):
    for m in (1, 2, 4, 8):
        t = open(f"{out}/pp{p}-m{m}.txt").read()
        b, c, d = section(t, "PP comm"), section(t, "Compute"), section(t, "Data")
        print(f"{p:2d} {m:2d} {b / (b + c + d):16.3f} {(p - 1) / (m + p - 1):19.3f}")
print("8 layers, m 8: pp, schedule, measured bubble, the schedule's, step ms; the summary's line")
for p, schedule in [(p, s) for p in (2, 4) for s in ("1f1b", "interleaved", "zb-h1")]:
    t = open(f"{out}/pp{p}-L8-{schedule}.txt").read()
    line = re.search(r"^Pipeline: .*$", t, re.M).group(0)
    measured, formula = re.search(r"\) ([0-9.]+) measured, ([0-9.]+) by", line).groups()
    step = 1e3 * float(re.search(r"^Loop time of (\S+)", t, re.M).group(1)) / int(steps)  # the loop's mean
    print(f"{p} {schedule:12s} {measured:>8s} {formula:>8s} {step:10.1f}\n  {line}")
B, T, C, L, V, M = 4, 128, 128, 4, 256, 2  # in.kjv-gpt: block 128, n_embd 128, 4 layers; byte vocab
def measured(name, axis):
    t = open(f"{out}/{name}.txt").read()
    return float(re.search(rf"{axis} ([0-9.]+)", t.split("Bytes sent per training step")[1]).group(1))
tp = 2
ring = 2 * (tp - 1) / tp
tp_model = M * ring * 4 * ((4 * L + 2) * B * T * C + 3 * B * T)
print(f"tp = 2: {measured('tp2', 'tp'):.0f} bytes/step/rank measured, {tp_model:.0f} analytic")
# per rank: the boundary's forward + backward volume shared by its two ranks, and each rank's
# half of the 2-rank ring all-reduce of the tied V·C gradient, 2(2 − 1)/2 · V·C·4
pp_model = M * 2 * B * T * C * 4 / 2 + V * C * 4
print(f"pp = 2: {measured('pp2', 'pp'):.0f} bytes/step/rank measured, {pp_model:.0f} analytic")
PY
rm -rf "$out"
