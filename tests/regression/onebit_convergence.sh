#!/usr/bin/env bash
# 1-bit Adam on the KJV deck's model (2 ranks) keeps learning after its freeze (step 80): from
# step 80 to 200 its validation loss falls by at least half of what AdamW's falls in the same
# script (the gap to AdamW is printed, 2 % being the historical figure), and it sends >= 25x fewer
# bytes per step after the freeze (metrics comm_bytes).
# Usage: onebit_convergence.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC PYTHON
set -eu
gridtrain=$1 data=$2 work=$3 mpiexec=$4 python=$5
deck=$(dirname "$0")/../../inputs/in.kjv-gpt
rm -rf "$work" && mkdir -p "$work"
for opt in adamw onebit_adam; do
  "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --train.steps=200 \
    --train.eval_interval=40 --optim.warmup_steps=20 --optim.type=$opt --optim.freeze_step=80 \
    --checkpoint.dir=none --output.thermo=10 --output.dir="$work/$opt" > "$work/$opt.txt"
done
"$python" - "$work" <<'PY'
import json, sys
def rows(opt):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{opt}/metrics.jsonl")]
a, b = rows("adamw"), rows("onebit_adam")
def val_at(r, step):
    return next(x["val_loss"] for x in r if x["step"] == step)
va, vb = a[-1]["val_loss"], b[-1]["val_loss"]
print(f"val loss after 200 steps: adamw {va:.4f}, onebit_adam {vb:.4f} ({100 * (vb - va) / va:+.2f} %)")
# Up to the freeze both runs are Adam with fp32 allreduced gradients, so they arrive at step 80 at
# the same point up to rounding (the printed L80s). After it, 1-bit Adam's error-compensated 1-bit
# momentum and frozen variance take another path, one that parts by as much as the kernels differ;
# a fixed 2 % gap after 200 steps is one host's figure. What it must do on any host: keep learning
# at a rate comparable to AdamW's from the same point. So each run's drop from its own step-80
# validation loss to step 200, and 1-bit Adam's drop at least half of AdamW's (c = 1/2, the rule
# tests/mpi/test_master_weights.cpp applies past 1-bit Adam's freeze: at least half of what the
# reference run learns). A run that stops learning at the freeze (stuck momentum, a broken
# compressor or error feedback) drops ~0 and fails; one that diverges drops below 0.
la, lb = val_at(a, 80), val_at(b, 80)
da, db = la - va, lb - vb
print(f"val loss at the freeze (step 80): adamw {la:.4f}, onebit_adam {lb:.4f}; drop to step 200: "
      f"adamw {da:.4f}, onebit_adam {db:.4f} ({db / da:.2f} of adamw's; bound 0.50)")
assert da > 0, f"adamw did not learn after step 80: {la} -> {va}"
assert db >= 0.5 * da, f"onebit_adam learned {db:.4f} after its freeze, less than half of adamw's {da:.4f}"
# After the freeze (step 80) gradients are not allreduced; the momentum exchange is 1-bit.
late_a = [r["comm_bytes"] for r in a if r["step"] > 80]
late_b = [r["comm_bytes"] for r in b if r["step"] > 80]
print(f"bytes sent per step and rank after the freeze: adamw {late_a[0]}, onebit_adam {late_b[0]} "
      f"({late_a[0] / late_b[0]:.1f}x fewer)")
assert all(x > 0 and late_a[0] / x >= 25 for x in late_b), "1-bit Adam must send >= 25x fewer bytes than fp32"
PY
