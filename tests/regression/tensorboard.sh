#!/usr/bin/env bash
# output.tensorboard = true, read back with the tensorboard package's own reader
# (EventAccumulator): every scalar of every thermo line is there at its step, equal in fp32 to
# metrics.jsonl's value, and each section's time and the memory are tags too. A run resumed from
# step 10 of a 20-step run and taken to 30 continues the curves: steps 15 and 20 of the first run
# are gone and every tag has each step once. Then scripts/plot-run draws the run's PNGs.
# Usage: tensorboard.sh GRIDTRAIN DATA.h5 WORKDIR PYTHON MPIEXEC
set -eu
gridtrain=$1 data=$2 work=$3 python=$4 mpiexec=$5
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
run() {
  "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$(dirname "$0")/../../inputs/in.smoke" --data.path="$data" \
    --output.dir="$work/out" --checkpoint.dir="$work/ckpt" --checkpoint.interval=10 --output.thermo=5 \
    --train.eval_interval=10 --output.tensorboard=true "$@" > "$work/run.txt" 2>&1 || { cat "$work/run.txt"; fail "run $*"; }
}
run --train.steps=20
run --train.steps=30 --checkpoint.resume="$work/ckpt/step-00000010.h5" --output.overwrite=true  # replaces step 20
grep -q "dropped 2 TensorBoard event(s) after step 10" "$work/run.txt" || fail "the resume did not say what it dropped"
"$python" - "$work/out" <<'PY' || fail "event files do not match metrics.jsonl"
import json, math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
out = sys.argv[1]
acc = EventAccumulator(out, size_guidance={"scalars": 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
metrics = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
keys = {"loss": "loss/train", "val_loss": "loss/val", "lr": "optim/lr", "grad_norm": "optim/grad_norm",
        "loss_scale": "optim/loss_scale", "skipped_steps": "optim/skipped_steps",
        "tokens_per_s": "throughput/tokens_per_s", "mfu": "throughput/mfu", "step_ms": "time/step_ms",
        "remaining_s": "time/remaining_s", "comm_bytes": "comm/dp_bytes_per_step"}
sections = {f"time/{s}_ms" for s in ("data", "compute", "tp_comm", "pp_comm", "dp_comm", "optim", "eval", "checkpt", "output")}
need = set(keys.values()) | sections | {"memory/model_state_mib", "memory/peak_rss_mib"}
assert need <= tags, f"missing tags: {sorted(need - tags)}"
steps = [m["step"] for m in metrics]
assert steps == [1, 5, 10, 15, 20, 25, 30], steps
checked = 0
for tag in tags:
    events = acc.Scalars(tag)
    got = [e.step for e in events]
    assert got == sorted(set(got)), f"{tag}: steps {got} repeat or go back"
    assert set(got) <= set(steps), f"{tag}: steps {got} beyond metrics.jsonl's {steps}"
for key, tag in keys.items():
    want = {m["step"]: m[key] for m in metrics if m.get(key) is not None}
    got = {e.step: e.value for e in acc.Scalars(tag)}
    assert got.keys() == want.keys(), f"{tag}: steps {sorted(got)} != {sorted(want)}"
    for step, v in want.items():
        # metrics.jsonl prints 6 (rates, times) or 8 significant digits; TensorBoard holds fp32
        assert math.isclose(got[step], v, rel_tol=1e-5, abs_tol=1e-30), f"{tag} at step {step}: {got[step]} != {v}"
        checked += 1
print(f"OK: {len(tags)} tags, {checked} values equal to metrics.jsonl's at steps {steps}")
PY
"$python" "$(dirname "$0")/../../scripts/plot-run" "$work/out" || fail "plot-run"
for png in loss optim throughput timing; do
  [ -s "$work/out/$png.png" ] || fail "plot-run did not write $png.png"
done
echo "OK: event files read back by TensorBoard's reader; plot-run wrote its PNGs"
