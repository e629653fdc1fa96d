#!/usr/bin/env bash
# SIGUSR1 to one rank only (twice, the second while it saves): every rank checkpoints at the next
# step boundary and the job exits with code 75; a second run resumes from that checkpoint and
# finishes. MODE sync | async: how the checkpoint is written (checkpoint.async).
# Usage: checkpoint_signal.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC [MODE]
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4 mode=${5:-sync}
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work"
common=(-i "$deck" --data.path="$data" --output.dir="$work/out" --checkpoint.dir="$work/ckpt" --train.eval_interval=0
        --checkpoint.async=$([ "$mode" = async ] && echo true || echo false))
fail() { echo "FAIL: $*"; tail -20 "$work/run1.txt"; exit 1; }
"$mpiexec" -n 2 --oversubscribe "$gridtrain" "${common[@]}" --train.steps=1000000 > "$work/run1.txt" 2>&1 &
job=$!
for _ in $(seq 300); do grep -q "^ *5 " "$work/run1.txt" 2>/dev/null && break; sleep 0.1; done
ranks=($(pgrep -f "^[^ ]*gridtrain .*--output.dir=$work/out"))
[ ${#ranks[@]} -eq 2 ] || fail "expected 2 rank processes, found ${#ranks[@]}"
kill -USR1 "${ranks[1]}"   # one rank only
sleep 0.05; kill -USR1 "${ranks[1]}" 2>/dev/null   # a second signal while it stops and saves
wait $job; code=$?
[ $code -eq 75 ] || fail "exit code $code, expected 75"
step=$(grep -oE "Stopping after step [0-9]+ on signal 10; checkpoint saved" "$work/run1.txt" | grep -oE "[0-9]+" | head -1)
[ -n "$step" ] || fail "no 'Stopping after step N on signal 10' line"
[ "$(cat "$work/ckpt/latest")" = "$(printf 'step-%08d.h5' "$step")" ] || fail "latest does not point at step $step"
"$mpiexec" -n 2 --oversubscribe "$gridtrain" "${common[@]}" --train.steps=$((step + 3)) --checkpoint.resume=auto \
  > "$work/run2.txt" 2>&1 || fail "resume failed: $(tail -5 "$work/run2.txt")"
grep -q "Resumed from .*at step $step " "$work/run2.txt" || fail "run 2 did not resume at step $step"
grep -q "Loop time of .* for 3 steps" "$work/run2.txt" || fail "run 2 did not run the 3 remaining steps"
echo "OK: $mode: SIGUSR1 to rank pid ${ranks[1]} stopped the job after step $step with exit 75; resumed and finished"
