#!/usr/bin/env bash
# slurm/gridtrain.sbatch's node choice when it relaunches a failed step, against stand-ins for
# srun and scontrol (the real-Slurm test, tests/slurm, runs one node and cannot lose one):
#   a) 3 nodes, 1 spare: node n2 goes DOWN as the first step fails (status 137): the relaunch
#      runs on n1 and n3, the same 4 tasks, logged with the level it resumed from;
#   b) 2 nodes, no spare, --grid.dp=4 given: n2 lost: the relaunch runs 2 tasks on n1 with
#      --grid.dp=auto in its place;
#   c) a step that keeps failing is relaunched GRIDTRAIN_RETRIES times, then the job gives up;
#   d) exit status 1 (gridtrain's own error) is not relaunched.
# Usage: sbatch_relaunch.sh SRCDIR WORKDIR
set -u
src=$1 work=$2
rm -rf "$work" && mkdir -p "$work/bin" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

# scontrol: the allocation's nodes (FAKE_NODES), each IDLE unless listed in $work/down.
cat > "$work/bin/scontrol" << 'EOF'
#!/usr/bin/env bash
case "$1 $2" in
  "show hostnames") tr ' ' '\n' <<< "$FAKE_NODES" ;;
  "show node") n=$4; if grep -qx "$n" "$FAKE_WORK/down" 2> /dev/null; then s=DOWN+NOT_RESPONDING; else s=IDLE; fi
               echo "NodeName=$n Arch=x86_64 State=$s Partitions=debug" ;;
  *) echo "scontrol stand-in: $*" >&2; exit 1 ;;
esac
EOF
# srun: records each launch; the first FAKE_FAILS launches exit FAKE_STATUS (the first also marks
# FAKE_LOST down), the next one prints a resume line and succeeds.
cat > "$work/bin/srun" << 'EOF'
#!/usr/bin/env bash
[ "$1" = --mpi=list ] && { echo "MPI plugin types are... pmix"; exit 0; }
echo "$* GRIDTRAIN_RELAUNCH=${GRIDTRAIN_RELAUNCH:-}" >> "$FAKE_WORK/launches"
n=$(wc -l < "$FAKE_WORK/launches")
if [ "$n" -le "$FAKE_FAILS" ]; then
  [ "$n" = 1 ] && [ -n "$FAKE_LOST" ] && echo "$FAKE_LOST" >> "$FAKE_WORK/down"
  echo "a rank died"
  exit "$FAKE_STATUS"
fi
echo "Resumed from local step 10 (/dev/shm/x) at step 10 (global sample index 160)"
EOF
printf '#!/bin/sh\nexit 0\n' > "$work/bin/gridtrain"
chmod +x "$work/bin/"*

job() {  # job NAME NODES SPARE LOST FAILS STATUS [ARGS...]: runs the batch script as Slurm would; its output in NAME.out
  local name=$1 nodes=$2 spare=$3 lost=$4 fails=$5 status=$6
  shift 6
  rm -f "$work/launches" "$work/down"
  (cd "$src" && env PATH="$work/bin:$PATH" FAKE_WORK="$work" FAKE_NODES="$nodes" GRIDTRAIN_SPARE_NODES="$spare" FAKE_LOST="$lost" \
     FAKE_FAILS="$fails" FAKE_STATUS="$status" SLURM_JOB_ID=42 SLURM_NTASKS=4 SLURM_CPUS_PER_TASK=1 SLURM_JOB_NODELIST=n[1-3] \
     SLURM_SUBMIT_DIR="$work" GRIDTRAIN="$work/bin/gridtrain" GRIDTRAIN_RETRIES=2 \
     bash slurm/gridtrain.sbatch inputs/in.smoke --train.steps=20 "$@" > "$work/$name.out" 2>&1)
  echo $? > "$work/$name.rc"
  cp "$work/launches" "$work/$name.launches" 2> /dev/null || : > "$work/$name.launches"
}
line() { sed -n "$2p" "$work/$1.launches"; }

job spare "n1 n2 n3" 1 n2 1 137
[ "$(cat "$work/spare.rc")" = 0 ] || fail "a) the job ended $(cat "$work/spare.rc"); $(cat "$work/spare.out")"
[ "$(wc -l < "$work/spare.launches")" = 2 ] || fail "a) expected 2 launches: $(cat "$work/spare.launches")"
line spare 1 | grep -q -- "--ntasks=4 .*--nodes=2 --nodelist=n1,n2 " || fail "a) first launch not on n1,n2: $(line spare 1)"
line spare 2 | grep -q -- "--ntasks=4 .*--nodes=2 --nodelist=n1,n3 .*--checkpoint.resume=auto.* GRIDTRAIN_RELAUNCH=1$" ||
  fail "a) the relaunch did not replace n2 by the spare n3 and resume: $(line spare 2)"
grep -q "relaunch 1 of 2 inside job 42 after status 137, excluding n2, on n1 n3 (spare nodes replace them)" "$work/spare.out" ||
  fail "a) the relaunch is not logged: $(cat "$work/spare.out")"
grep -q "relaunch 1 resumed from: Resumed from local step 10 " "$work/spare.out" || fail "a) the level it resumed from is not logged"

job shrink "n1 n2" 0 n2 1 137 --grid.dp=4
[ "$(cat "$work/shrink.rc")" = 0 ] || fail "b) the job ended $(cat "$work/shrink.rc")"
line shrink 1 | grep -q -- "--ntasks=4 " || fail "b) first launch: $(line shrink 1)"
line shrink 2 | grep -q -- "--ntasks=2 .*--nodes=1 --nodelist=n1 .*--grid.dp=auto" && ! line shrink 2 | grep -q -- "--grid.dp=4" ||
  fail "b) the relaunch did not go on at a smaller dp on n1: $(line shrink 2)"
grep -q "excluding n2, on the 1 healthy node(s) with 2 tasks: a smaller dp (--grid.dp=auto)" "$work/shrink.out" ||
  fail "b) the smaller dp is not logged: $(cat "$work/shrink.out")"

job retries "n1 n2" 0 "" 9 137
[ "$(cat "$work/retries.rc")" = 137 ] || fail "c) the job ended $(cat "$work/retries.rc"), expected the step's 137"
[ "$(wc -l < "$work/retries.launches")" = 3 ] || fail "c) expected 1 + GRIDTRAIN_RETRIES = 3 launches"
grep -q "the step failed 3 time(s); giving up (GRIDTRAIN_RETRIES=2)" "$work/retries.out" || fail "c) giving up is not logged"

job error "n1 n2" 0 "" 1 1
[ "$(cat "$work/error.rc")" = 1 ] && [ "$(wc -l < "$work/error.launches")" = 1 ] || fail "d) exit status 1 was relaunched"
echo "PASS: spare node replaces a lost one; without spares a smaller dp; retries bounded; status 1 not retried"
