#!/usr/bin/env bash
# 1-bit Adam on the KJV deck's model (2 ranks) reaches a validation loss within 2 % of AdamW's
# after the same steps, and sends >= 25x fewer bytes per step after its freeze (metrics comm_bytes).
# Usage: onebit_convergence.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC PYTHON
set -eu
gridtrain=$1 data=$2 work=$3 mpiexec=$4 python=$5
deck=$(dirname "$0")/../../inputs/in.kjv-gpt
rm -rf "$work" && mkdir -p "$work"
for opt in adamw onebit_adam; do
  "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --train.steps=200 \
    --train.eval_interval=0 --optim.warmup_steps=20 --optim.type=$opt --optim.freeze_step=80 \
    --checkpoint.dir=none --output.thermo=10 --output.dir="$work/$opt" > "$work/$opt.txt"
done
"$python" - "$work" <<'PY'
import json, sys
def rows(opt):
    return [json.loads(l) for l in open(f"{sys.argv[1]}/{opt}/metrics.jsonl")]
a, b = rows("adamw"), rows("onebit_adam")
va, vb = a[-1]["val_loss"], b[-1]["val_loss"]
print(f"val loss after 200 steps: adamw {va:.4f}, onebit_adam {vb:.4f} ({100 * (vb - va) / va:+.2f} %)")
assert vb <= va * 1.02, "onebit_adam is more than 2 % worse than adamw"
# After the freeze (step 80) gradients are not allreduced; the momentum exchange is 1-bit.
late_a = [r["comm_bytes"] for r in a if r["step"] > 80]
late_b = [r["comm_bytes"] for r in b if r["step"] > 80]
print(f"bytes sent per step and rank after the freeze: adamw {late_a[0]}, onebit_adam {late_b[0]} "
      f"({late_a[0] / late_b[0]:.1f}x fewer)")
assert all(x > 0 and late_a[0] / x >= 25 for x in late_b), "1-bit Adam must send >= 25x fewer bytes than fp32"
PY
