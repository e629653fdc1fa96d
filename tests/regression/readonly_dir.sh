#!/usr/bin/env bash
# A checkpoint directory that cannot be written, on a read-only tmpfs in a private mount namespace:
#  1. read-only from the start: the run stops before its first step, naming the directory and
#     "Read-only file system" (not after checkpoint.interval steps of training);
#  2. made read-only while the run trains: the next checkpoint stops the job within
#     comm.timeout_s + 10 s with the OS error, and the last one written before still resumes.
# Usage: readonly_dir.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC   (as root: mount, unshare)
set -u
[ "${GRIDTRAIN_IN_NAMESPACE:-}" = 1 ] || GRIDTRAIN_IN_NAMESPACE=1 exec unshare -m "$0" "$@"
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work/fs"
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
run=("$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --output.peak_gflops=1
     --train.eval_interval=0 --comm.timeout_s=5)
mount -t tmpfs -o size=16m tmpfs "$work/fs" && mkdir "$work/fs/ckpt" && mount -o remount,ro "$work/fs" \
  || fail "cannot mount a tmpfs (needs root)"
"${run[@]}" --checkpoint.dir="$work/fs/ckpt" --output.dir="$work/out1" > "$work/run.txt" 2>&1 && fail "exit 0"
grep -Eq "checkpoint.dir = $work/fs/ckpt cannot be written.*Read-only file system" "$work/run.txt" \
  || fail "no message naming the directory and the OS error"
grep -q "^ *Step " "$work/run.txt" && fail "it trained before finding the directory read-only"

mount -o remount,rw "$work/fs" || fail "remount rw"
"${run[@]}" --checkpoint.dir="$work/fs/ckpt" --output.dir="$work/out2" --train.steps=100000 \
  --checkpoint.interval=40 > "$work/run.txt" 2>&1 &
job=$!
for _ in $(seq 600); do [ -f "$work/fs/ckpt/latest" ] && break; sleep 0.1; done
# A checkpoint write in flight holds a file open for writing ("mount point is busy"): try again
# between writes (one every 40 steps), for at most 5 s.
for _ in $(seq 100); do mount -o remount,ro "$work/fs" 2> /dev/null && break; sleep 0.05; done
findmnt -no OPTIONS "$work/fs" | grep -q '^ro' || fail "remount ro while training"
start=$(date +%s)
# The newest checkpoint the file system kept: read after the remount, when nothing can change it
# (on a fast CPU steps 80, 120, ... may have been written between the poll and the remount).
latest=$(cat "$work/fs/ckpt/latest") step=$((10#$(echo "$latest" | sed 's/^step-\([0-9]*\)\.h5$/\1/')))
wait $job; code=$? elapsed=$(($(date +%s) - start))
[ $code -ne 0 ] || fail "exit 0"
[ $elapsed -le 25 ] || fail "took ${elapsed} s after the remount"
next=$(printf 'step-%08d.h5.tmp' $((step + 40)))  # the first checkpoint after the remount
grep -Eq "ERROR on rank [0-9]+: checkpoint '$work/fs/ckpt/$next' .*Read-only file system" "$work/run.txt" \
  || fail "no message naming the file $next and the OS error"
"${run[@]}" --train.steps=$((step + 1)) --restart "$work/fs/ckpt" --output.dir="$work/out3" > "$work/resume.txt" 2>&1 \
  || fail "resuming from the previous checkpoint failed: $(tail -3 "$work/resume.txt")"
grep -q "Resumed from $work/fs/ckpt/$latest at step $step" "$work/resume.txt" || fail "did not resume at step $step"
echo "OK: read-only at start: stopped before training; read-only mid-run: exit $code ${elapsed} s after, step $step resumes"
