#!/usr/bin/env bash
# A checkpoint directory never loses or silently adopts another run's state (G13, docs/checkpoint-format.md):
#  a) run A resumed where run B's step-20 file sits stops before its first step when it would
#     write step 20, naming both, and leaves B's file as it was (output.overwrite = true replaces
#     it); resumed to a step short of it, A runs and names B's file as skipped, never adopted;
#  b) with `latest` emptied, resume = auto among two runs' files refuses to guess (naming each
#     run's files) instead of adopting B's newer step;
#  c) a branch (--restart an older step of a run that went on) is a new lineage: it is refused
#     where it would replace the later file, never deletes it, and a later resume = auto continues
#     the branch, not the run it branched from;
#  d) a requeued Slurm job (SLURM_RESTART_COUNT > 0, the same SLURM_JOB_ID) started with the same
#     --restart continues the lineage its earlier attempt began (here a branch), from its newest
#     checkpoint, instead of branching again and being refused by its own files; a new job (another
#     id), or the same id not requeued, with that --restart is a new branch, refused there;
#  e) another run's file that appears during a run stops the commit, and the message says whose
#     each file is: that step file is the other run's, not "complete" as this run's.
# Usage: lineage.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
# The Slurm job this test may run in must not look like the jobs of d).
unset SLURM_JOB_ID SLURM_JOBID SLURM_RESTART_COUNT SLURM_CLUSTER_NAME
mpiopts=()  # mpiexec options of the next run (d: the Slurm variables the ranks see)
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
run() { "$mpiexec" -n 2 --oversubscribe "${mpiopts[@]}" "$gridtrain" -i "$deck" --data.path="$data" --output.peak_gflops=1 \
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

# d) Slurm job 4242 branches from A's step 5 (A went on to step 10) and writes steps 6 and 8; it is
#    requeued (restart 1) with the same --restart (train.steps raised only so that there is more to
#    run; the real requeue, same command line, is tests/slurm/slurm_local.sh d).
fresh_A
a=$(run_of "$work/A/step-00000010.h5") ours=$(sum "$work/A/step-00000010.h5")
job() {  # job ID RESTARTS ARGS...: A as attempt RESTARTS of Slurm job ID
  local id=$1 restarts=$2 rc
  shift 2
  mpiopts=(-x SLURM_JOB_ID="$id" -x SLURM_RESTART_COUNT="$restarts" -x SLURM_CLUSTER_NAME=lineage-test)
  A "$@"
  rc=$?
  mpiopts=()
  return $rc
}
branch=(--restart "$work/A/step-00000005.h5" --optim.lr=1e-2 --checkpoint.interval=3)
job 4242 0 "${branch[@]}" --train.steps=8 || fail "d) the job's first attempt failed"
says "so this run is a branch" "d) first attempt"
d=$(run_of "$work/A/step-00000008.h5")
[ -n "$d" ] && [ "$d" != "$a" ] || fail "d) the first attempt is no branch: run '$d'"
job 4242 1 "${branch[@]}" --train.steps=12 || fail "d) the requeued attempt did not continue the job's branch"
says "Resumed from $work/A/step-00000008.h5 at step 8" "d) requeue"
says "this is Slurm job lineage-test:4242 requeued or relaunched (attempt 2), whose earlier attempt started from $work/A/step-00000005.h5 as run $d" "d) requeue"
grep -q "so this run is a branch" "$work/run.txt" && fail "d) the requeued attempt branched again"
[ "$(run_of "$work/A/step-00000012.h5")" = "$d" ] || fail "d) step 12 is not the job's branch $d"
"$gridtrain" inspect "$work/A/step-00000012.h5" | grep -qF "run $d (branched from run $a at step 5)" \
  || fail "d) step 12 of the continued branch lost branched_from"
[ "$(cat "$work/A/latest")" = step-00000012.h5 ] || fail "d) latest is not the branch's step 12"
[ "$(sum "$work/A/step-00000010.h5")" = "$ours" ] && [ -f "$work/A/step-00000005.h5" ] || fail "d) A's files were touched"
keep=$(sum "$work/A/step-00000012.h5")
for other in "4343 1" "4242 0"; do  # another job's requeue; this job id not requeued: a new branch each
  # shellcheck disable=SC2086
  job $other "${branch[@]}" --train.steps=12 && fail "d) job/restart $other replaced the branch's files"
  says "so this run is a branch" "d) job/restart $other"
  says "holds step-00000012.h5 (run $d), step-00000009.h5 (run $d), which this run (" "d) job/restart $other"
  says ", a branch of run $a at step 5) would replace" "d) job/restart $other"
  [ "$(sum "$work/A/step-00000012.h5")" = "$keep" ] || fail "d) job/restart $other changed the branch's step 12"
done
# The same for a job that continued A (--restart its newest step, 10): the requeue continues A
# from the job's step 12, not a branch from step 10 refused by that file.
fresh_A
a=$(run_of "$work/A/step-00000010.h5")
job 5151 0 --restart "$work/A/step-00000010.h5" --train.steps=12 --checkpoint.interval=3 || fail "d) job 5151 failed"
grep -q "so this run is a branch" "$work/run.txt" && fail "d) job 5151 branched from A's newest step"
job 5151 1 --restart "$work/A/step-00000010.h5" --train.steps=15 --checkpoint.interval=3 \
  || fail "d) the requeue of job 5151 did not continue run $a"
says "Resumed from $work/A/step-00000012.h5 at step 12" "d) requeue of 5151"
says "as run $a (continuing run $a from step 10)" "d) requeue of 5151"
[ "$(run_of "$work/A/step-00000015.h5")" = "$a" ] || fail "d) step 15 of job 5151 is not run $a's"

# e) run B's checkpoint appears as step 15 in A's directory while A runs (slowed checkpoints)
rm -rf "$work/A" "$work/Ao"
A --train.steps=15 --checkpoint.interval=5 --debug.slow_checkpoint_s=1 &
pid=$!
for _ in $(seq 600); do
  [ -e "$work/A/step-00000005.h5.tmp" ] || [ -e "$work/A/step-00000005.h5" ] && break
  sleep 0.05
done
cp "$work/B/step-00000020.h5" "$work/A/step-00000015.h5"
wait $pid && fail "e) A replaced run B's file that appeared during the run"
says "step-00000015.h5 belongs to run $b (not this run, " "e)"
a=$(run_of "$work/A/step-00000010.h5")
kept=$work/A/step-00000015.run-$a.h5
says "checkpoint of step 15 is complete and kept as $kept (--restart $kept continues from it); $work/A/step-00000015.h5 is run $b's and was left as it was; 'latest' is unchanged" "e)"
grep -qF "step-00000015.h5 is complete" "$work/run.txt" && fail "e) the message calls run $b's file this run's complete checkpoint"
[ "$(sum "$work/A/step-00000015.h5")" = "$theirs" ] || fail "e) B's file changed"
[ "$(cat "$work/A/latest")" = step-00000010.h5 ] || fail "e) latest moved past A's step 10"
[ "$(run_of "$kept")" = "$a" ] || fail "e) the kept file is not run $a's"
"$gridtrain" inspect "$kept" > /dev/null || fail "e) the kept step 15 fails inspect"
A --restart "$kept" --train.steps=16 --checkpoint.interval=5 || fail "e) --restart the kept file failed"
says "Resumed from $kept at step 15" "e) resume from the kept file"
echo "OK: another run's step file is never replaced or adopted; a branch is its own lineage; a requeued job continues its own; messages name each file's run"
