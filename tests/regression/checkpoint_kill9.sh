#!/usr/bin/env bash
# kill -9 of the whole job while a checkpoint is being written: the previous checkpoint is still
# `latest`, passes `gridtrain inspect`, and a run resumes from it.
# Usage: checkpoint_kill9.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work"
common=(-i "$deck" --data.path="$data" --output.dir="$work/out" --checkpoint.dir="$work/ckpt")
# Every checkpoint sleeps 3 s before its file is closed: the second one (step 10) is killed mid-write.
"$mpiexec" -n 2 --oversubscribe "$gridtrain" "${common[@]}" --train.steps=100000 --checkpoint.interval=5 \
  --debug.slow_checkpoint_s=3 > "$work/run1.txt" 2>&1 &
job=$!
for _ in $(seq 600); do
  [ -f "$work/ckpt/latest" ] && [ -f "$work/ckpt/step-00000010.h5.tmp" ] && break
  sleep 0.1
done
pkill -9 -f "^[^ ]*gridtrain .*--output.dir=$work/out" ; kill -9 $job 2>/dev/null; wait $job 2>/dev/null
fail() { echo "FAIL: $*"; cat "$work/run1.txt" | tail -20; exit 1; }
[ -f "$work/ckpt/step-00000010.h5.tmp" ] || fail "the job was not killed while writing step 10"
[ -f "$work/ckpt/step-00000010.h5" ] && fail "step 10 was completed; the kill came too late"
[ "$(cat "$work/ckpt/latest")" = "step-00000005.h5" ] || fail "latest is '$(cat "$work/ckpt/latest")', expected step-00000005.h5"
"$gridtrain" inspect "$work/ckpt/step-00000005.h5" > "$work/inspect.txt" || fail "inspect of the previous checkpoint failed"
grep -q " 0 with a bad checksum" "$work/inspect.txt" || fail "inspect did not report all checksums ok"
# Standard tools read it too.
h5dump -H "$work/ckpt/step-00000005.h5" > /dev/null || fail "h5dump cannot read the checkpoint"
/usr/bin/python3 -c "import h5py, sys; f = h5py.File(sys.argv[1], 'r'); assert f.attrs['step'] == 5; \
assert f['model/wte.weight'].shape == (256, 32)" "$work/ckpt/step-00000005.h5" || fail "h5py cannot read the checkpoint"
"$mpiexec" -n 2 --oversubscribe "$gridtrain" "${common[@]}" --train.steps=7 --checkpoint.resume=auto > "$work/run2.txt" 2>&1 \
  || fail "resume run failed: $(tail -5 "$work/run2.txt")"
grep -q "Resumed from $work/ckpt/step-00000005.h5 at step 5" "$work/run2.txt" || fail "did not resume from step 5"
[ -f "$work/ckpt/step-00000010.h5.tmp" ] && fail "the interrupted write step-00000010.h5.tmp was not removed"
echo "OK: killed during the step-10 write; latest = step 5, checksums ok, resumed, partial file removed"
