#!/usr/bin/env bash
# A run owns its directories: a fresh run where another run left metrics or checkpoints stops
# (output.overwrite = true replaces them); a second run on a directory in use stops, naming the
# holder; a stale lock (its process killed) is taken over; a resume onto another corpus stops
# unless data.allow_change = true.
# Usage: run_ownership.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
run() { "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --output.peak_gflops=1 --train.eval_interval=0 \
          --checkpoint.dir="$work/ckpt" --output.dir="$work/out" "$@" > "$work/run.txt" 2>&1; }

run --data.path="$data" --train.steps=4 --checkpoint.interval=2 || fail "first run failed"
lines=$(wc -l < "$work/out/metrics.jsonl")
run --data.path="$data" --train.steps=3 && fail "a fresh run over another run's files exited 0"
grep -q "output.dir = $work/out, checkpoint.dir = $work/ckpt: another run's files are there .*checkpoint.resume = auto.*output.overwrite = true" \
  "$work/run.txt" || fail "the refusal does not name the directories and the ways out"
[ "$(wc -l < "$work/out/metrics.jsonl")" = "$lines" ] && [ -f "$work/ckpt/step-00000004.h5" ] || fail "the refused run changed files"

run --data.path="$data" --train.steps=3 --output.overwrite=true || fail "output.overwrite = true: run failed"
grep -q "output.overwrite = true: deleting $work/ckpt/step-00000004.h5" "$work/run.txt" || fail "overwrite did not say what it deleted"
[ -f "$work/ckpt/step-00000004.h5" ] && fail "overwrite left the other run's step 4 (its latest would mix two runs)"
[ "$(cat "$work/ckpt/latest")" = step-00000003.h5 ] || fail "latest is not this run's step 3"

# A run in progress holds the directories.
run --data.path="$data" --train.steps=1000000 --checkpoint.resume=auto --checkpoint.interval=2 &
job=$!
for _ in $(seq 300); do [ -f "$work/ckpt/step-00000004.h5" ] && break; sleep 0.1; done
"$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --output.peak_gflops=1 \
  --checkpoint.dir="$work/ckpt" --output.dir="$work/out" --checkpoint.resume=auto > "$work/second.txt" 2>&1 \
  && fail "a second run on a directory in use exited 0"
grep -Eq "output.dir = $work/out is in use by another run: $work/out/gridtrain.lock is held by PID [0-9]+ on host" \
  "$work/second.txt" || { cat "$work/second.txt" | tail -5; fail "the second run does not name the lock's holder"; }
pkill -9 -f "^[^ ]*gridtrain .*--output.dir=$work/out" ; kill -9 $job 2>/dev/null; wait $job 2>/dev/null
[ -f "$work/out/gridtrain.lock" ] || fail "the killed run left no lock (the test needs a stale one)"
run --data.path="$data" --train.steps=5 --checkpoint.resume=auto || fail "resume after kill -9 failed"
grep -q "Taking over the stale lock $work/out/gridtrain.lock (process [0-9]* is no longer running)" "$work/run.txt" \
  || fail "the stale lock was not taken over with a note"
[ -f "$work/out/gridtrain.lock" ] && fail "a run that ended left its lock"

# Another corpus: the first half of the same text.
/usr/bin/python3 - "$data" "$work/other.h5" <<'PY'
import h5py, sys
with h5py.File(sys.argv[1], "r") as src, h5py.File(sys.argv[2], "w") as dst:
    for split in ("train", "val"):
        t = src[split + "/tokens"][...]
        dst.create_dataset(split + "/tokens", data=t[: len(t) // 2])
    for k, v in src.attrs.items():
        dst.attrs[k] = v
PY
run --data.path="$work/other.h5" --train.steps=7 --checkpoint.resume=auto && fail "resume onto another corpus exited 0"
grep -q "was written for another corpus than data.path = $work/other.h5 (349277 train / 38808 val tokens then, 174638 / 19404 now).*data.allow_change = true" \
  "$work/run.txt" || fail "the corpus change is not explained"
run --data.path="$work/other.h5" --train.steps=7 --checkpoint.resume=auto --data.allow_change=true \
  || fail "data.allow_change = true: run failed"
grep -q "data.allow_change = true: the corpus changed" "$work/run.txt" || fail "allow_change does not say what changed"
echo "OK: fresh run refused over another run's files; overwrite replaces them; lock held and taken over when stale; corpus change refused unless allowed"
