#!/usr/bin/env bash
# scripts/scaling end to end on this machine: a strong and a weak series of 1, 2 and 4 ranks of
# the KJV deck (on the test corpus; 4 ranks oversubscribe 2 cores) write scaling.csv, report.md
# and four PNG plots; `gridtrain predict`, calibrated on the 1- and 2-rank points only, predicts
# every point's step time within 15 % where each rank has a core, and within a factor of 2 where
# the ranks oversubscribe the cores: the OS scheduler's time slices, which no model of the step
# covers, put the 4-rank strong point on 2 cores at +30 % (2026-12-01) and +45 % (2026-12-02)
# in runs whose points with a core per rank were within 4 %, and within 35 % in the runs before and
# after them. Run again, the study reruns nothing.
# Usage: scaling.sh PYTHON SRCDIR GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
python=$1 src=$2 gridtrain=$3 data=$4 work=$5 mpiexec=$6
rm -rf "$work"
fail() { echo "FAIL: $*"; exit 1; }
study() {
  "$python" "$src/scripts/scaling" -i "$src/inputs/in.kjv-gpt" --series strong,weak --ranks 1,2,4 --steps 30 \
    --out "$work" --gridtrain "$gridtrain" --mpiexec "$mpiexec" -- --data.path="$data"
}
study > "$work.log" 2>&1 || { cat "$work.log"; fail "scripts/scaling failed"; }
for f in scaling.csv report.md speedup.png efficiency.png sections.png prediction.png; do
  [ -s "$work/$f" ] || fail "no $work/$f"
done
for f in "$work"/*.png; do
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = "211PNG" ] || fail "$f is not a PNG"
done
"$python" - "$work/scaling.csv" "$(nproc)" << 'PY' || fail "predictions off (see above)"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert [(r["series"], r["ranks"]) for r in rows] == [(s, n) for s in ("strong", "weak") for n in ("1", "2", "4")], rows
bad = 0
for r in rows:
    err = float(r["prediction_error_pct"])
    print(f"{r['series']:6} n{r['ranks']}: measured {1e3 * float(r['step_s']):7.1f} ms, predicted "
          f"{1e3 * float(r['predicted_step_s']):7.1f} ms ({err:+.1f} %), speedup {float(r['speedup']):.2f}")
    # err = (predicted / measured − 1) · 100: a factor of 2 either way is −50 % … +100 %.
    bad += abs(err) > 15.0 if int(r["ranks"]) <= int(sys.argv[2]) else not -50.0 <= err <= 100.0
for n in ("1", "2", "4"):
    strong, weak = (next(r for r in rows if r["series"] == s and r["ranks"] == n) for s in ("strong", "weak"))
    assert int(weak["global_batch"]) == 32 * int(n) and int(strong["global_batch"]) == 32, (strong, weak)
sys.exit(bad)
PY
grep -q "| strong | 4 | 4,1,1 |" "$work/report.md" || fail "report.md lacks the strong 4-rank row"
study > "$work.again.log" 2>&1 || fail "the second run failed"
grep -q "5 point(s), 5 already done" "$work.again.log" || fail "the second run reran points: $(head -3 "$work.again.log")"
echo "PASS"
