#!/usr/bin/env bash
# End to end: in.smoke under mpirun -np 2 on a prepared corpus. Checks that the loss falls,
# metrics.jsonl parses with the documented keys, and the summary and timing table are printed.
# Usage: smoke_e2e.sh GRIDTRAIN DATA.h5 WORKDIR PYTHON MPIEXEC
set -eu
gridtrain=$1 data=$2 work=$3 python=$4 mpiexec=$5
rm -rf "$work" && mkdir -p "$work"
"$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$(dirname "$0")/../../inputs/in.smoke" \
  --data.path="$data" --output.dir="$work/out" | tee "$work/screen.txt"
for pattern in "Process grid: 2 \(dp\) x 1 \(tp\) x 1 \(pp\) = 2 MPI ranks" "Loop time of .* on 2 procs for 30 steps" \
               "Performance: .* tokens/s, .* samples/s, .*% MFU" "MPI task timing breakdown" "Bytes sent per training step and rank .avg over ranks.: dp [1-9][0-9]*, tp 0, pp 0" \
               "^(Data|Compute|Comm|Optim|Eval|Output|Other) +\|" "Final validation loss"; do
  grep -Eq "$pattern" "$work/screen.txt" || { echo "FAIL: screen output lacks /$pattern/"; exit 1; }
done
cmp -s "$work/screen.txt" "$work/out/log.gridtrain" || { echo "FAIL: log.gridtrain differs from the screen"; exit 1; }
"$python" - "$work/out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
keys = {"step", "loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "mfu", "comm_bytes"}
assert rows, "metrics.jsonl is empty"
for r in rows:
    assert keys <= r.keys(), f"missing keys in {r}"
assert rows[0]["step"] == 1 and rows[-1]["step"] == 30, [r["step"] for r in rows]
assert all(r["comm_bytes"] > 0 for r in rows), "2 dp ranks must send gradient bytes every step"
assert rows[-1]["loss"] < rows[0]["loss"] - 1.0, f"loss did not fall: {rows[0]['loss']} -> {rows[-1]['loss']}"
vals = [r["val_loss"] for r in rows if "val_loss" in r]
assert len(vals) == 3 and vals[-1] < vals[0], vals
print(f"OK: {len(rows)} thermo rows, loss {rows[0]['loss']:.3f} -> {rows[-1]['loss']:.3f}, val {vals}")
PY
