#!/usr/bin/env bash
# A checkpoint directory never loses or silently adopts another run's state (G13, docs/checkpoint-format.md):
#  a) run A resumed where run B's step-20 file sits stops before its first step when it would
#     write step 20, naming both, and leaves B's file as it was (output.overwrite = true replaces
#     it); resumed to a step short of it, A runs and names B's file as skipped, never adopted;
#  b) with `latest` emptied, resume = auto among two runs' files refuses to guess (naming each
#     run's files) instead of adopting B's newer step;
#  c) a branch (--restart an older step of a run that went on) is a new lineage: it is refused
#     where it would replace the later file, never deletes it, and a later resume = auto continues
#     the branch, not the run it branched from.
# Usage: lineage.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
run() { "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --output.peak_gflops=1 \
          --train.eval_interval=0 --train.micro_batch=4 "$@" > "$work/run.txt" 2>&1; }
A() { run --checkpoint.dir="$work/A" --output.dir="$work/Ao" "$@"; }
fresh_A() { rm -rf "$work/A" "$work/Ao"; A --train.steps=10 --checkpoint.interval=5 || fail "run A failed"; }
run_of() { "$gridtrain" inspect "$1" | sed -n 's/^  run \([0-9a-f]*\).*/\1/p'; }
sum() { sha256sum < "$1"; }
says() { grep -qF -- "$1" "$work/run.txt" || fail "$2: the log does not say: $1"; }

rm -rf "$work" && mkdir -p "$work"
run --optim.lr=1e-2 --train.steps=20 --checkpoint.dir="$work/B" --output.dir="$work/Bo" || fail "run B failed"
fresh_A
cp "$work/B/step-00000020.h5" "$work/A/"
a=$(run_of "$work/A/step-00000010.h5") b=$(run_of "$work/A/step-00000020.h5") theirs=$(sum "$work/A/step-00000020.h5")
[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || fail "inspect names no distinct run ids: '$a', '$b'"

# a) latest intact
A --train.steps=25 --checkpoint.interval=5 --checkpoint.keep_last=3 --checkpoint.resume=auto && fail "a) A replaced B's step 20"
says "holds step-00000020.h5 (run $b), which this run ($a, from step 10) would replace" "a)"
says "skipped other runs' checkpoints step-00000020.h5 (run $b), never adopted by run $a" "a)"
[ "$(sum "$work/A/step-00000020.h5")" = "$theirs" ] || fail "a) B's step-20 file changed"
[ -f "$work/A/step-00000015.h5" ] && fail "a) the refused run wrote step 15"
A --train.steps=12 --checkpoint.interval=5 --checkpoint.keep_last=1 --checkpoint.resume=auto || fail "a) A to step 12 failed"
says "Resumed from $work/A/step-00000010.h5 at step 10" "a) to step 12"
says "skipped other runs' checkpoints step-00000020.h5 (run $b)" "a) to step 12"
[ "$(sum "$work/A/step-00000020.h5")" = "$theirs" ] || fail "a) keep_last touched B's step-20 file"

# b) latest emptied: A's steps 12 and 5 against B's 20
: > "$work/A/latest"
A --train.steps=25 --checkpoint.resume=auto && fail "b) resume = auto adopted a run without 'latest'"
says "belong to 2 runs" "b)"
says "step-00000020.h5" "b)"
says "step-00000012.h5" "b)"
grep -q "^Resumed" "$work/run.txt" && fail "b) resumed"
[ "$(sum "$work/A/step-00000020.h5")" = "$theirs" ] && [ -s "$work/A/step-00000012.h5" ] || fail "b) files changed"

# c) a branch from step 5 of A, which went on to step 10, with another learning rate
fresh_A
a=$(run_of "$work/A/step-00000010.h5") ours=$(sum "$work/A/step-00000010.h5")
A --restart "$work/A/step-00000005.h5" --optim.lr=1e-2 --train.steps=10 --checkpoint.interval=5 \
  && fail "c) the branch replaced A's step 10"
says "so this run is a branch" "c)"
says "holds step-00000010.h5 (run $a)" "c)"
[ "$(sum "$work/A/step-00000010.h5")" = "$ours" ] || fail "c) A's step-10 file changed"
A --restart "$work/A/step-00000005.h5" --optim.lr=1e-2 --train.steps=8 --checkpoint.interval=5 --checkpoint.keep_last=1 \
  || fail "c) the branch to step 8 failed"
c=$(run_of "$work/A/step-00000008.h5")
[ -n "$c" ] && [ "$c" != "$a" ] || fail "c) the branch kept run id $a"
"$gridtrain" inspect "$work/A/step-00000008.h5" | grep -qF "run $c (branched from run $a at step 5)" || fail "c) no branched_from"
[ "$(cat "$work/A/latest")" = step-00000008.h5 ] || fail "c) latest is not the branch's step 8"
[ "$(sum "$work/A/step-00000010.h5")" = "$ours" ] && [ -f "$work/A/step-00000005.h5" ] || fail "c) A's files were touched"
A --train.steps=9 --checkpoint.interval=0 --checkpoint.resume=auto || fail "c) resuming the branch failed"
says "Resumed from $work/A/step-00000008.h5 at step 8" "c) resume"
says "never adopted by run $c" "c) resume"
echo "OK: another run's step file is never replaced or adopted; a branch is its own lineage"
