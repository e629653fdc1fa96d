#!/usr/bin/env bash
# A checkpoint directory that cannot be written, on a read-only tmpfs in a private mount namespace:
#  1. read-only from the start: the run stops before its first step, naming the directory and
#     "Read-only file system" (not after checkpoint.interval steps of training);
#  2. made read-only while the run trains: the next checkpoint stops the job within
#     comm.timeout_s + 10 s with the OS error, and the previous checkpoint still resumes.
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
mount -o remount,ro "$work/fs" || fail "remount ro while training"
start=$(date +%s)
wait $job; code=$? elapsed=$(($(date +%s) - start))
[ $code -ne 0 ] || fail "exit 0"
[ $elapsed -le 25 ] || fail "took ${elapsed} s after the remount"
grep -Eq "ERROR on rank [0-9]+: checkpoint '$work/fs/ckpt/step-00000080.h5.tmp' .*Read-only file system" "$work/run.txt" \
  || fail "no message naming the file and the OS error"
[ "$(cat "$work/fs/ckpt/latest")" = step-00000040.h5 ] || fail "latest is not step-00000040.h5"
"${run[@]}" --train.steps=41 --restart "$work/fs/ckpt" --output.dir="$work/out3" > "$work/resume.txt" 2>&1 \
  || fail "resuming from the previous checkpoint failed: $(tail -3 "$work/resume.txt")"
grep -q "Resumed from $work/fs/ckpt/step-00000040.h5 at step 40" "$work/resume.txt" || fail "did not resume at step 40"
echo "OK: read-only at start: stopped before training; read-only mid-run: exit $code ${elapsed} s after, step 40 resumes"
