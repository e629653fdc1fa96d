#!/usr/bin/env bash
# Starts a real single-node Slurm on this host (munged, slurmctld, slurmd; everything in a temp
# dir, as root), then submits slurm/gridtrain.sbatch:
#   a) in.smoke on 2 tasks: the job completes; log, metrics and a checkpoint are written;
#   b) a longer run is sent SIGUSR1 through the batch shell (scancel --signal=USR1 --batch): it
#      checkpoints, exits 75, the script requeues the job, the job resumes from `latest` and
#      finishes with a final training loss bit-identical to an uninterrupted run (mpirun -np 2);
#   d) a branch (--restart an older step of a run that went on) stopped by SIGUSR1 and requeued
#      with the same command line continues its own branch from its newest checkpoint; a new job
#      with that command line is a new branch, refused where it would replace the first one's files;
#   e) a rank SIGKILLed mid-run (debug.kill_rank) with its node's memory: the batch script
#      relaunches the step inside the allocation (no requeue), which resumes from the partner level
#      (two simulated nodes: checkpoint.ranks_per_node = 1) and finishes with the uninterrupted
#      run's final loss; f) the same with its partner killed too: it falls back to checkpoint.dir,
#      named;
#   c) scripts/scaling --launcher slurm runs a strong and a weak series of 1, 2, 4 ranks as one job
#      array of slurm/scaling.sbatch per rank count and writes the CSV, the report and the plots.
# Every daemon is stopped on exit, pass or fail. Honours GRIDTRAIN_LAUNCHER / GRIDTRAIN_SRUN_MPI
# (see slurm/gridtrain.sbatch) to test another launch path.
# Usage: slurm_local.sh GRIDTRAIN DATA.h5 WORKDIR SRCDIR [MPIEXEC]
set -u
gridtrain=$1 data=$2 work=$3 src=$4 mpiexec=${5:-mpirun}
steps=${GRIDTRAIN_SLURM_TEST_STEPS:-4000}   # the preempted run: several seconds on 2 cores
deadline=$((SECONDS + 240))                 # no wait of a) and b) goes past this, d) gets 200 s more (ctest TIMEOUT is 900)
export PATH=$PATH:/usr/sbin:/sbin

tmp='' ctld='' slurmd='' munged='' result=''
jobs=()
fail() {
  result="FAIL: $*"
  exit 1
}
note() { echo "slurm_local: $*"; }

# --- prerequisites -----------------------------------------------------------------------------
missing=()
for c in munged munge slurmctld slurmd slurmstepd sbatch srun scontrol scancel sinfo squeue; do
  command -v "$c" > /dev/null || missing+=("$c")
done
if ((${#missing[@]})); then
  echo "FAIL: Slurm is not installed (missing: ${missing[*]}); run scripts/install-deps (as root) to" \
       "install slurmctld, slurmd, slurm-client and munge"
  exit 1
fi
[ "$(id -u)" -eq 0 ] || { echo "FAIL: this test starts slurmd/slurmctld and must run as root"; exit 1; }
[ -x "$gridtrain" ] || { echo "FAIL: no gridtrain binary at $gridtrain"; exit 1; }
[ -r "$data" ] || { echo "FAIL: no corpus at $data (the corpus_prepare test makes it)"; exit 1; }

# Nothing from an enclosing Slurm job or the user's defaults may leak into ours.
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SRUN|SALLOC)_')
unset GRIDTRAIN GRIDTRAIN_CHECKPOINT_DIR GRIDTRAIN_SRUN_ARGS GRIDTRAIN_MPIRUN_ARGS GRIDTRAIN_REQUEUE
export OMP_NUM_THREADS=1

rm -rf "$work" && mkdir -p "$work" || { echo "FAIL: cannot create $work"; exit 1; }

# --- teardown: always ----------------------------------------------------------------------------
stop_pid() {  # stop_pid PID: TERM, up to 10 s, then KILL
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2> /dev/null || return 0
  kill -TERM "$pid" 2> /dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2> /dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2> /dev/null && kill -KILL "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  return 0
}
ours() {  # pids of processes started under our slurm.conf (job steps, slurmstepd, ...)
  local p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    grep -qzF "SLURM_CONF=$tmp/slurm.conf" "/proc/$p/environ" 2> /dev/null && echo "$p"
  done
}
dump() {  # the last lines of every log, for a failure
  local f
  for f in "$work"/*/slurm-*.out "$work"/reference.txt "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/munged.out; do
    [ -s "$f" ] || continue
    echo "----- last lines of $f"
    tail -n 25 "$f"
  done
}
teardown() {
  local rc=$? left
  set +e
  trap - EXIT INT TERM
  [ -n "$result" ] || result="FAIL: exited with status $rc"
  case $result in PASS*) ;; *) dump ;; esac
  if [ -n "$tmp" ]; then
    if [ -n "$ctld" ] && ((${#jobs[@]})); then
      scancel "${jobs[@]}" 2> /dev/null
      for _ in $(seq 30); do
        [ -z "$(squeue -h -j "$(IFS=,; echo "${jobs[*]}")" 2> /dev/null)" ] && break
        sleep 0.5
      done
    fi
    stop_pid "$slurmd"
    stop_pid "$ctld"
    stop_pid "$munged"
    left=$(ours)
    if [ -n "$left" ]; then
      note "killing leftover processes: $(echo "$left" | tr '\n' ' ')"
      # shellcheck disable=SC2086
      kill -KILL $left 2> /dev/null
    fi
    mkdir -p "$work/slurm-logs" && cp "$tmp"/*.log "$tmp"/*.out "$tmp"/slurm.conf "$work/slurm-logs/" 2> /dev/null
    rm -rf "$tmp"
  fi
  echo "$result (${SECONDS}s; logs in $work)"
  case $result in PASS*) exit 0 ;; *) exit 1 ;; esac
}
trap teardown EXIT
trap 'fail "interrupted"' INT TERM

wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll COMMAND every 0.5 s
  local limit=$((SECONDS + $1)) what=$2
  shift 2
  ((limit > deadline)) && limit=$deadline
  until "$@"; do
    ((SECONDS < limit)) || fail "timed out after ${SECONDS}s waiting for $what"
    sleep 0.5
  done
}
alive() { kill -0 "$1" 2> /dev/null || fail "$2 died; see its log below"; }

# --- munged --------------------------------------------------------------------------------------
tmp=$(mktemp -d /tmp/gridtrain-slurm.XXXXXX) || fail "mktemp"
chmod 755 "$tmp"
if command -v mungekey > /dev/null; then
  mungekey --create --keyfile="$tmp/munge.key" || fail "mungekey could not create a key"
else
  dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none || fail "cannot write a munge key"
fi
chmod 600 "$tmp/munge.key"
munged --foreground --force --key-file="$tmp/munge.key" --socket="$tmp/munge.socket" \
  --pid-file="$tmp/munged.pid" --seed-file="$tmp/munged.seed" --log-file="$tmp/munged.log" \
  > "$tmp/munged.out" 2>&1 &
munged=$!
munge_ok() { alive "$munged" munged; munge -S "$tmp/munge.socket" -n > /dev/null 2>&1; }
wait_for 15 "munged to answer on $tmp/munge.socket" munge_ok

# --- slurm.conf for this host --------------------------------------------------------------------
host=$(hostname -s)
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)  # nproc honours OMP_NUM_THREADS
mem=$(free -m | awk '/^Mem:/ { m = int($7 * 0.8); print (m > 0 ? m : 1) }')
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])' 2> /dev/null || echo $((20000 + RANDOM % 20000)) $((40000 + RANDOM % 20000)))
mkdir -p "$tmp/state" "$tmp/spool"
cat > "$tmp/slurm.conf" << EOF
# Generated by tests/slurm/slurm_local.sh: a throwaway single-node cluster on localhost.
ClusterName=gridtrain-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge.socket
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobRequeue=1
ReturnToService=2
MinJobAge=600
KillWait=10
InactiveLimit=0
SlurmdTimeout=120
SlurmctldTimeout=120
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf

# --- slurmctld, slurmd ---------------------------------------------------------------------------
slurmctld -D -c -f "$SLURM_CONF" > "$tmp/slurmctld.out" 2>&1 &
ctld=$!
ctld_up() { alive "$ctld" slurmctld; scontrol ping 2> /dev/null | grep -q UP; }
wait_for 30 "slurmctld to answer (scontrol ping)" ctld_up
slurmd -D -N "$host" -f "$SLURM_CONF" > "$tmp/slurmd.out" 2>&1 &
slurmd=$!
node_idle() { alive "$slurmd" slurmd; [ "$(sinfo -h -n "$host" -o %t 2> /dev/null)" = idle ]; }
wait_for 60 "node $host to become idle (sinfo)" node_idle
version=$(sinfo --version 2> /dev/null)
note "$version up on $host: $cpus CPUs, ${mem} MB, ports $ctld_port/$slurmd_port, config $SLURM_CONF"
note "srun MPI plugins: $(srun --mpi=list 2>&1 | tr -s '\n\t' '  ')"

# --- helpers for jobs ----------------------------------------------------------------------------
field() { scontrol show job -o "$1" 2> /dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1; }
finished() {
  case $(field "$1" JobState) in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;;
  esac
  return 1
}
overcommit=()
((cpus < 2)) && overcommit=(--overcommit)
submit() {  # submit NAME OUTDIR ARGS...: sbatch slurm/gridtrain.sbatch in.smoke ARGS, 2 tasks; prints the job id
  local name=$1 dir=$2 id
  shift 2
  mkdir -p "$dir"
  id=$(cd "$src" && GRIDTRAIN=$gridtrain sbatch --parsable -J "$name" -n 2 -c 1 -t 10 "${overcommit[@]}" \
         -o "$dir/slurm-%j.out" slurm/gridtrain.sbatch inputs/in.smoke "$@") || return 1
  echo "${id%%;*}"
}
check_done() {  # check_done ID WHAT: COMPLETED with exit code 0:0
  local state code
  state=$(field "$1" JobState) code=$(field "$1" ExitCode)
  [ "$state" = COMPLETED ] && [ "$code" = 0:0 ] || fail "$2: job $1 ended $state with exit code $code"
}

# preempt JOB OUT CASE: once JOB runs and has printed 3 thermo lines to OUT, SIGUSR1 to its batch
# shell; waits until it is requeued, starts again and ends (the caller checks how).
pj='' pout='' pcase='' kicked=0
thermo_lines() { local n; n=$(grep -cE '^ +[0-9]+ +[0-9.]+ ' "$pout" 2> /dev/null); echo "${n:-0}"; }
progressing() {
  finished "$pj" && fail "$pcase: job $pj ended before it could be signalled (raise GRIDTRAIN_SLURM_TEST_STEPS)"
  [ "$(field "$pj" JobState)" = RUNNING ] && [ "$(thermo_lines)" -ge 3 ]
}
requeued() {
  [ "$(field "$pj" Restarts)" -ge 1 ] 2> /dev/null && return 0
  finished "$pj" && fail "$pcase: job $pj ended ($(field "$pj" JobState)) instead of being requeued"
  return 1
}
# Slurm holds a requeued job for ~120 s (PENDING, Reason=BeginTime): bring its start forward, once,
# to a few seconds from now (slurmd refuses a launch in the same second as the requeue's credential
# revocation: "Job credential revoked").
released() {
  case $(field "$pj" JobState) in
    RUNNING) return 0 ;;
    PENDING)
      if [ $kicked = 0 ] && [ "$(field "$pj" Reason)" = BeginTime ]; then
        note "$pcase) job $pj requeued, pending with Reason=BeginTime: scontrol update StartTime=now+5"
        scontrol update JobId="$pj" StartTime=now+5 > /dev/null && kicked=1
      fi
      return 1 ;;
  esac
  finished "$pj"
}
preempt() {
  pj=$1 pout=$2 pcase=$3 kicked=0
  wait_for 120 "job $pj to run and print 3 thermo lines" progressing
  scancel --signal=USR1 --batch "$pj" || fail "scancel --signal=USR1 --batch $pj failed"
  note "$pcase) sent SIGUSR1 to the batch shell of job $pj after $(thermo_lines) thermo lines"
  wait_for 60 "job $pj to be requeued" requeued
  wait_for 60 "requeued job $pj to start again" released
  wait_for 150 "requeued job $pj to finish" finished "$pj"
}

# --- a) a short job completes ----------------------------------------------------------------------
a=$work/smoke
ja=$(submit gt-smoke "$a" --data.path="$data" --output.dir="$a/out" --checkpoint.dir="$a/ckpt") ||
  fail "sbatch failed for the smoke job"
jobs+=("$ja")
note "a) smoke job $ja submitted"
wait_for 120 "smoke job $ja to finish" finished "$ja"
check_done "$ja" "smoke"
out_a=$a/slurm-$ja.out
grep -q "Loop time of" "$a/out/log.gridtrain" 2> /dev/null || fail "smoke: no 'Loop time of' in $a/out/log.gridtrain"
grep -q "Process grid: .* = 2 MPI ranks" "$out_a" || fail "smoke: job output does not show 2 MPI ranks"
[ -s "$a/out/metrics.jsonl" ] || fail "smoke: no $a/out/metrics.jsonl"
[ "$(cat "$a/ckpt/latest" 2> /dev/null)" = step-00000030.h5 ] && [ -s "$a/ckpt/step-00000030.h5" ] ||
  fail "smoke: no checkpoint step-00000030.h5 named by $a/ckpt/latest"
note "a) PASS: job $ja completed (NumCPUs=$(field "$ja" NumCPUs) NumTasks=$(field "$ja" NumTasks)): $(grep -m1 'launcher' "$out_a" | sed 's/.*launcher/launcher/')"

# --- b) preemption: USR1 -> checkpoint -> exit 75 -> requeue -> resume -> same final loss ----------
b=$work/preempt
common=(--data.path="$data" --train.steps="$steps" --output.thermo=50 --train.eval_interval=1000)
jb=$(submit gt-preempt "$b" "${common[@]}" --output.dir="$b/out" --checkpoint.dir="$b/ckpt") ||
  fail "sbatch failed for the preemption job"
jobs+=("$jb")
out_b=$b/slurm-$jb.out
note "b) preemption job $jb submitted ($steps steps)"
preempt "$jb" "$out_b" b
check_done "$jb" "preempt"
[ "$(field "$jb" Restarts)" = 1 ] || fail "preempt: job $jb has Restarts=$(field "$jb" Restarts), expected 1"
stop=$(grep -oE "Stopping after step [0-9]+ on signal 10; checkpoint saved" "$out_b" | grep -oE "[0-9]+" | head -n 1)
[ -n "$stop" ] || fail "preempt: no 'Stopping after step N on signal 10; checkpoint saved' in $out_b"
grep -q "gridtrain exited with status 75" "$out_b" || fail "preempt: the batch script did not see exit status 75"
grep -q "requeueing job $jb" "$out_b" || fail "preempt: the batch script did not requeue the job"
grep -qE "Resumed from .*/step-0*$stop\.h5 at step $stop " "$out_b" ||
  fail "preempt: no 'Resumed from .../step-$stop.h5 at step $stop' in $out_b"
grep -q "Resumed from" "$b/out/log.gridtrain" || fail "preempt: $b/out/log.gridtrain is not the resumed run's log"
grep -q "Loop time of .* for $((steps - stop)) steps" "$out_b" ||
  fail "preempt: the resumed run did not run the remaining $((steps - stop)) steps"
note "b) job $jb stopped after step $stop (exit 75), was requeued, resumed at step $stop and completed"

# The same run, uninterrupted, outside Slurm.
r=$work/reference
limit=$((deadline + 60 - SECONDS))
((limit > 150)) && limit=150
timeout "$limit" "$mpiexec" -n 2 --oversubscribe -x OMP_NUM_THREADS=1 "$gridtrain" -i "$src/inputs/in.smoke" "${common[@]}" \
  --output.dir="$r/out" > "$work/reference.txt" 2>&1 || fail "the uninterrupted reference run failed (status $?)"
last() { tail -n 1 "$1" 2> /dev/null | grep -oE "\"$2\": *[^,}]+" | sed 's/^[^:]*: *//'; }
step_b=$(last "$b/out/metrics.jsonl" step) loss_b=$(last "$b/out/metrics.jsonl" loss)
step_r=$(last "$r/out/metrics.jsonl" step) loss_r=$(last "$r/out/metrics.jsonl" loss)
[ "$step_b" = "$steps" ] && [ "$step_r" = "$steps" ] ||
  fail "final metrics rows are at steps '$step_b' (preempted) and '$step_r' (reference), expected $steps"
[ -n "$loss_b" ] && [ "$loss_b" = "$loss_r" ] ||
  fail "final loss at step $steps differs: preempted+resumed $loss_b, uninterrupted $loss_r"
note "b) PASS: final loss at step $steps: resumed $loss_b == uninterrupted $loss_r"

# --- d) a branch through a requeue: the requeued attempt continues the job's own branch ------------
# Run A (outside Slurm) writes steps 5 and 6 into d/ck. The job, --restart d/ck/step-5, is a branch
# of A at step 5 (A went on); it checkpoints every 50 steps, is stopped by SIGUSR1 and requeued
# with the same command line: it must continue its branch from the step it saved, not branch from
# step 5 again (which its own files at steps 50, 100, ... would refuse, exit 1). A new job with the
# same command line is a new branch, and is refused there.
deadline=$((SECONDS + 200))
d=$work/branch
run_of() { "$gridtrain" inspect "$1" | sed -n 's/^  run \([0-9a-f]*\).*/\1/p'; }
timeout 120 "$mpiexec" -n 2 --oversubscribe -x OMP_NUM_THREADS=1 "$gridtrain" -i "$src/inputs/in.smoke" \
  --data.path="$data" --train.steps=6 --checkpoint.interval=5 --output.dir="$d/A" --checkpoint.dir="$d/ck" \
  > "$work/branch-A.txt" 2>&1 || { tail -n 20 "$work/branch-A.txt"; fail "branch: run A failed"; }
ra=$(run_of "$d/ck/step-00000006.h5") sum_a=$(cat "$d/ck/step-00000005.h5" "$d/ck/step-00000006.h5" | sha256sum)
[ -n "$ra" ] || fail "branch: no run id in $d/ck/step-00000006.h5"
branch=("${common[@]}" --restart "$d/ck/step-00000005.h5" --checkpoint.dir="$d/ck" --checkpoint.interval=50)
jd=$(submit gt-branch "$d" "${branch[@]}" --output.dir="$d/out") || fail "sbatch failed for the branch job"
jobs+=("$jd")
out_d=$d/slurm-$jd.out
note "d) branch job $jd submitted: --restart $d/ck/step-00000005.h5 of run $ra, which went on to step 6"
preempt "$jd" "$out_d" d
check_done "$jd" "branch requeue (the requeued attempt must continue the job's branch)"
[ "$(field "$jd" Restarts)" = 1 ] || fail "branch: job $jd has Restarts=$(field "$jd" Restarts), expected 1"
stop_d=$(grep -oE "Stopping after step [0-9]+ on signal 10; checkpoint saved" "$out_d" | grep -oE "[0-9]+" | head -n 1)
[ -n "$stop_d" ] || fail "branch: no 'Stopping after step N on signal 10; checkpoint saved' in $out_d"
[ "$(grep -c "so this run is a branch" "$out_d")" = 1 ] || fail "branch: the job did not branch exactly once"
grep -qE "Resumed from $d/ck/step-0*$stop_d\.h5 at step $stop_d " "$out_d" ||
  fail "branch: the requeued attempt did not resume the branch's step $stop_d"
grep -q "this is Slurm job .*$jd requeued or relaunched (attempt 2)" "$out_d" || fail "branch: the requeue is not explained"
grep -q "Loop time of .* for $((steps - stop_d)) steps" "$out_d" ||
  fail "branch: the requeued attempt did not run the remaining $((steps - stop_d)) steps"
final=$d/ck/$(printf 'step-%08d.h5' "$steps")
rd=$(run_of "$final")
[ -n "$rd" ] && [ "$rd" != "$ra" ] || fail "branch: $final is run '$rd', not a branch of $ra"
"$gridtrain" inspect "$final" | grep -qF "run $rd (branched from run $ra at step 5)" || fail "branch: $final lost branched_from"
[ "$(cat "$d/ck/step-00000005.h5" "$d/ck/step-00000006.h5" | sha256sum)" = "$sum_a" ] || fail "branch: run A's files changed"
note "d) job $jd branched (run $rd from $ra@5), stopped after step $stop_d, was requeued and continued its branch to step $steps"
# A new job, the same command line: a new branch, refused by the first job's files.
je=$(submit gt-branch2 "$d" "${branch[@]}" --output.dir="$d/out2") || fail "sbatch failed for the second branch job"
jobs+=("$je")
wait_for 120 "second branch job $je to finish" finished "$je"
[ "$(field "$je" ExitCode)" = 1:0 ] || fail "branch: a new job with the same --restart ended $(field "$je" JobState) $(field "$je" ExitCode), expected exit 1"
grep -q "so this run is a branch" "$d/slurm-$je.out" && grep -qF "(run $rd)" "$d/slurm-$je.out" ||
  fail "branch: the new job did not refuse as a new branch naming run $rd's files"
[ "$(run_of "$final")" = "$rd" ] || fail "branch: the new job replaced $final"
note "d) PASS: requeue continued the job's branch; new job $je is a new branch, refused (exit 1)"

# --- e), f) a killed rank: relaunch inside the allocation, resume from the partner level or the file system
# Local steps every 100, checkpoint.dir every 1500; rank 1 dies as it begins step 2051 (local step 2000
# complete, checkpoint.dir's newest 1500), its node's memory with it.
deadline=$((SECONDS + 240))
rj=''
relaunched() {  # relaunched CASE NAME EXTRA...: submits the killed run and checks the relaunch; sets rj to the job id
  local k=$1 name=$2 dir=$work/$2 id out
  shift 2
  id=$(submit "gt-$name" "$dir" "${common[@]}" --output.dir="$dir/out" --checkpoint.dir="$dir/ckpt" \
         --checkpoint.local_dir="$dir/local" --checkpoint.local_interval=100 --checkpoint.interval=1500 \
         --checkpoint.ranks_per_node=1 --debug.kill_rank=1 --debug.kill_step=2050 --debug.kill_memory=true "$@") ||
    fail "$k: sbatch failed"
  jobs+=("$id")
  wait_for 200 "$k: job $id to finish" finished "$id"
  check_done "$id" "$k (a relaunch inside the allocation must finish the job)"
  out=$dir/slurm-$id.out
  [ "$(field "$id" Restarts)" = 0 ] || fail "$k: job $id was requeued (Restarts=$(field "$id" Restarts)); it must relaunch inside the allocation"
  grep -q "debug.kill_rank: rank 1 kills itself with SIGKILL after step 2050" "$out" || fail "$k: rank 1 was not killed"
  grep -q "relaunch 1 of 3 inside job $id after status " "$out" || fail "$k: the batch script did not relaunch the step"
  [ "$(last "$dir/out/metrics.jsonl" step)" = "$steps" ] && [ "$(last "$dir/out/metrics.jsonl" loss)" = "$loss_r" ] ||
    fail "$k: final loss $(last "$dir/out/metrics.jsonl" loss) at step $(last "$dir/out/metrics.jsonl" step), uninterrupted $loss_r at $steps"
  rj=$id
}
relaunched e partner
je=$rj out_e=$work/partner/slurm-$rj.out
grep -q "Resume: local step 2000 of run .*: every rank's part found and verified: rank 0 from its own copy, rank 1 from its partner copy (held by rank 0)" "$out_e" ||
  fail "e: the relaunch did not resume rank 1 from its partner copy"
grep -q "relaunch 1 resumed from: Resumed from local step 2000 " "$out_e" || fail "e: the batch script did not log the level it resumed from"
note "e) PASS: job $je: rank 1 killed after step 2050, relaunched in the allocation, resumed local step 2000 (rank 1 from its partner's copy), final loss $loss_r"
relaunched f lost-pair --debug.kill_partner=true
jf=$rj out_f=$work/lost-pair/slurm-$rj.out
grep -q "Resume: the local levels hold no part" "$out_f" || fail "f: the lost local levels are not named"
grep -q "relaunch 1 resumed from: Resumed from .*/ckpt/step-00001500.h5 at step 1500 " "$out_f" || fail "f: the relaunch did not resume checkpoint.dir's step 1500"
note "f) PASS: job $jf: rank 1 and its partner killed with their memory; resumed checkpoint.dir's step 1500, final loss $loss_r"

# --- c) a scaling study through Slurm: job arrays of slurm/scaling.sbatch ----------------------------
c=$work/scaling
note "c) scripts/scaling --launcher slurm: strong and weak series of 1, 2, 4 ranks of in.kjv-gpt"
limit=$((deadline + 150 - SECONDS))
timeout "$limit" python3 "$src/scripts/scaling" -i "$src/inputs/in.kjv-gpt" --series strong,weak --ranks 1,2,4 \
  --steps 5 --out "$c" --gridtrain "$gridtrain" --launcher slurm --sbatch-args "-t 10 --overcommit -c 1" \
  -- --data.path="$data" > "$work/scaling.txt" 2>&1 || { tail -n 30 "$work/scaling.txt"; fail "scripts/scaling --launcher slurm failed"; }
for f in scaling.csv report.md speedup.png efficiency.png sections.png prediction.png; do
  [ -s "$c/$f" ] || fail "scaling: no $c/$f"
done
[ "$(grep -c '^strong\|^weak' "$c/scaling.csv")" = 6 ] || fail "scaling: $c/scaling.csv does not have 6 rows"
arrays=$(grep -c "sbatch --wait --array=" "$work/scaling.txt")
[ "$arrays" = 3 ] || fail "scaling: expected one job array per rank count (3), saw $arrays"
grep -q "Process grid: 4 (dp) x 1 (tp) x 1 (pp) = 4 MPI ranks" "$c"/points/n4-dp4-*-g128-*/run.log ||
  fail "scaling: the weak 4-rank point did not run on 4 ranks under Slurm"
note "c) PASS: 5 points in 3 job arrays; $(grep -m1 'Prediction:' "$c/report.md")"

result="PASS: $version; smoke job completed; job stopped by SIGUSR1 at step $stop, requeued, resumed and finished with the uninterrupted run's loss $loss_r; a requeued branch continued its own branch; a killed rank relaunched inside the allocation from the partner level, a killed pair from checkpoint.dir, both with that loss; scaling study through job arrays"
