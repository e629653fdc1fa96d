#!/usr/bin/env bash
# A full disk while a checkpoint is written, on a real tmpfs in a private mount namespace: the job
# stops within comm.timeout_s + 10 s naming the rank, the file, the phase and the OS error; no
# .tmp is left; `latest` still names the previous checkpoint, which passes `gridtrain inspect`;
# the run resumes from the newest complete checkpoint of the run: the previous one, or in MODE
# latest the newer step file the pointer could not be moved to (named with both files).
#   MODE sync | async: the filesystem holds one checkpoint and a half, so the second write fails.
#   MODE latest: it has no inode left when latest.tmp is created (the step file is complete).
# Usage: disk_full.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC NP MODE   (as root: mount, unshare)
set -u
[ "${GRIDTRAIN_IN_NAMESPACE:-}" = 1 ] || GRIDTRAIN_IN_NAMESPACE=1 exec unshare -m "$0" "$@"
gridtrain=$1 data=$2 work=$3 mpiexec=$4 np=$5 mode=$6
deck=$(dirname "$0")/../../inputs/in.smoke
timeout_s=5
rm -rf "$work" && mkdir -p "$work/small"
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
run=("$mpiexec" -n "$np" --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --output.peak_gflops=1 --train.micro_batch=4
     --train.eval_interval=0)
"${run[@]}" --train.steps=2 --checkpoint.dir="$work/measure" --output.dir="$work/measure-out" > "$work/run.txt" 2>&1 \
  || fail "the run that measures a checkpoint failed"
size=$(stat -c %s "$work/measure/step-00000002.h5")
case $mode in
  latest) opts=size=64m,nr_inodes=6 expect="\(committing\): cannot create .*latest.tmp: No space left on device" ;;
  *) opts=size=$((size * 3 / 2)) expect="\((creating the file|writing .*|sealing the checksums|flushing|closing)\): .*No space left on device" ;;
esac
mount -t tmpfs -o "$opts" tmpfs "$work/small" && mkdir "$work/small/ckpt" || fail "cannot mount a tmpfs (needs root)"
start=$(date +%s)
timeout 120 "${run[@]}" --train.steps=8 --checkpoint.interval=2 --checkpoint.dir="$work/small/ckpt" \
  --checkpoint.async=$([ "$mode" = async ] && echo true || echo false) --comm.timeout_s=$timeout_s \
  --output.dir="$work/out" > "$work/run.txt" 2>&1
code=$? elapsed=$(($(date +%s) - start))
[ $code -ne 0 ] || fail "exit code 0 on a full disk"
[ $code -ne 124 ] || fail "the job hung (killed by timeout after 120 s)"
[ $elapsed -le $((timeout_s + 10)) ] || fail "took ${elapsed} s, more than comm.timeout_s + 10 s"
grep -Eq "ERROR on rank [0-9]+: checkpoint '$work/small/ckpt/step-00000004.h5.tmp' $expect" "$work/run.txt" \
  || fail "no message naming the rank, file, phase and OS error"
ls "$work/small/ckpt" | grep -q '\.tmp$' && fail "a .tmp file was left: $(ls "$work/small/ckpt")"
[ "$(cat "$work/small/ckpt/latest")" = step-00000002.h5 ] || fail "latest is '$(cat "$work/small/ckpt/latest")', not step-00000002.h5"
"$gridtrain" inspect "$work/small/ckpt/step-00000002.h5" > "$work/inspect.txt" || fail "the previous checkpoint fails inspect"
"${run[@]}" --train.steps=3 --restart "$work/small/ckpt" --output.dir="$work/resume" > "$work/resume.txt" 2>&1 \
  || fail "resuming from the previous checkpoint failed: $(tail -3 "$work/resume.txt")"
want=2; [ "$mode" = latest ] && want=4  # step 4's file is complete there: only the pointer failed
grep -q "Resumed from $work/small/ckpt/step-0000000$want.h5 at step $want" "$work/resume.txt" \
  || fail "did not resume at step $want: $(grep -E "^Resume" "$work/resume.txt")"
if [ "$mode" = latest ]; then
  grep -q "'latest' names step-00000002.h5, but step-00000004.h5, a newer checkpoint of the same run, is complete" \
    "$work/resume.txt" || fail "the resume does not say why it passed over latest"
fi
echo "OK: np $np $mode: exit $code after ${elapsed} s: $(grep -o "ERROR on rank.*" "$work/run.txt" | cut -c1-160)...; step $want resumes"
