#!/usr/bin/env bash
# The local checkpoint levels against the file system, side by side in one run (docs/performance.md,
# Local checkpoints): the KJV GPT deck on 2 ranks as two simulated nodes (checkpoint.ranks_per_node
# = 1, each rank the other's partner), all files under one temp dir.
#   1. step-loop stall: the time the loop spends in save() with a local checkpoint every L steps
#      (async) against none (both write checkpoint.dir at the last step), and the loop times,
#      alternating ROUNDS times (medians);
#   2. write bandwidth: one local step (own part + partner copy) against the parallel-HDF5 file
#      of the same state (sync, the same step);
#   3. recovery: rank 1 SIGKILLed after step 55 (debug.kill_rank) with its node's memory, then
#      relaunched with --checkpoint.resume=auto: the partner level (local step 50) against the file
#      system level (its partner killed too: checkpoint.dir's step 40); the relaunched run's
#      goodput (summary.json) gives the time lost to recomputed steps and the restart time (last
#      thermo line before the kill to the first step after the resume, thermo every step: the MPI
#      job's teardown and start included), its log the time to choose, verify and load;
#   4. Young/Daly: the optimal interval sqrt(2 C MTBF) and the expected goodput
#      1 - C/tau - (tau/2 + R)/MTBF with this machine's C and R, at MTBF 8 h (1K GPUs) and 2 h (16K).
# Usage: bench/local_checkpoint.sh [STEPS] [L] [ROUNDS]   (needs build/ and data/kjv.h5)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-200} every=${2:-10} rounds=${3:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
. scripts/mpi-env
run() {  # run NAME ARGS...: gridtrain on 2 ranks, output in $out/NAME (tolerates the killed runs)
  local name=$1
  shift
  mpirun -np 2 build/gridtrain -i inputs/in.kjv-gpt --train.eval_interval=0 --train.eval_samples=2 \
    --output.dir="$out/$name" --checkpoint.dir="$out/$name/ckpt" --checkpoint.local_dir="$out/$name/local" \
    --checkpoint.ranks_per_node=1 "$@" > "$out/$name.txt" 2>&1 || true
}
field() { /usr/bin/python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, d))" "$@"; }

echo "== 1. step-loop stall, $steps steps, local checkpoint every $every steps (async), $rounds rounds"
for r in $(seq "$rounds"); do
  run "none-$r" --train.steps="$steps" --output.thermo="$steps" --checkpoint.async=true
  run "local-$r" --train.steps="$steps" --output.thermo="$steps" --checkpoint.local_interval="$every" \
    --checkpoint.async=true --checkpoint.interval=1000000
done
/usr/bin/python3 - "$out" "$rounds" "$steps" "$every" << 'EOF'
import json, re, statistics, sys
out, rounds, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def median(name, f):
    return statistics.median(f(f"{out}/{name}-{r}") for r in range(1, rounds + 1))
# The step loop's time inside save() (Checkpointer::stall_s), both runs writing checkpoint.dir at the last step.
stall = lambda run: float(re.search(r"step-loop stall ([0-9.]+) s", open(run + ".txt").read()).group(1))
loop = lambda run: json.load(open(run + "/summary.json"))["loop_s"]
base, local = median("none", stall), median("local", stall)
step_s = median("none", loop) / steps
per_save = (local - base) / (steps // every)
print(f"stall in save(): {base:.3f} s without local steps, {local:.3f} s with {steps // every}; "
      f"{1e3 * per_save:.2f} ms per local step = {100 * per_save / step_s:.2f} % of a {1e3 * step_s:.1f} ms step, "
      f"{100 * per_save / (every * step_s):.3f} % of the step time at one every {every} steps")
print(f"loop time (noisier): {median('none', loop):.3f} s without, {median('local', loop):.3f} s with; "
      f"ratio {median('local', loop) / median('none', loop):.4f}")
open(f"{out}/stall.txt", "w").write(f"{per_save}\n{step_s}\n")
EOF

echo "== 2. write bandwidth: the state after 10 steps, sync"
run bw --train.steps=10 --output.thermo=10 --checkpoint.local_interval=10 --checkpoint.async=false
grep -E "^(Local c|C)heckpoints:" "$out/bw.txt"
fs_s=$(grep -oE "^Checkpoints: .* write [0-9.]+" "$out/bw.txt" | grep -oE "[0-9.]+$")
local_s=$(grep -oE "^Local checkpoints: .* write [0-9.]+" "$out/bw.txt" | grep -oE "[0-9.]+$")
fs_bytes=$(stat -c %s "$out/bw/ckpt/step-00000010.h5")
local_bytes=$(find "$out/bw/local" -name '*.part' -path '*step-00000010*' -printf '%s\n' | awk '{ s += $1 } END { print s }')
/usr/bin/python3 -c "
fs_b, fs_s, lo_b, lo_s = $fs_bytes, $fs_s, $local_bytes, $local_s
print(f'parallel HDF5: {fs_b / 2**20:.2f} MiB in {fs_s:.4f} s = {fs_b / fs_s / 2**20:.0f} MiB/s; '
      f'local + partner: {lo_b / 2**20:.2f} MiB (own + partner copies) in {lo_s:.4f} s = {lo_b / lo_s / 2**20:.0f} MiB/s; '
      f'ratio {lo_b / lo_s / (fs_b / fs_s):.2f}x')
open('$out/write.txt', 'w').write(f'{fs_s}\n')"

echo "== 3. recovery after rank 1 is killed after step 55 (local every 10, checkpoint.dir every 40), thermo every step"
kill=(--train.steps=80 --output.thermo=1 --checkpoint.local_interval=10 --checkpoint.interval=40
      --debug.kill_rank=1 --debug.kill_step=55 --debug.kill_memory=true)
for level in partner file-system; do
  extra=()
  [ "$level" = file-system ] && extra=(--debug.kill_partner=true)
  run "$level" "${kill[@]}" "${extra[@]}"
  run "$level" "${kill[@]}" "${extra[@]}" --checkpoint.resume=auto
  echo "$level: $(grep -m1 '^Resumed from' "$out/$level.txt" | cut -c1-110)"
  echo "  $(grep -m1 '^Resume: chosen, verified and loaded' "$out/$level.txt")"
  field "$out/$level/summary.json" \
    "f\"  lost {goodput['lost_s']:.3f} s, restart (kill to first step, load included) {goodput['restart_s']:.3f} s, goodput {100 * goodput['fraction']:.1f} % over {goodput['attempts']} attempts\""
  field "$out/$level/summary.json" "goodput['restart_s']" > "$out/restart-$level.txt"
done

echo "== 4. Young/Daly: tau = sqrt(2 C MTBF), goodput ~ 1 - C/tau - (tau/2 + R)/MTBF"
/usr/bin/python3 - "$out" << 'EOF'
import math, sys
out = sys.argv[1]
c_local, step_s = map(float, open(f"{out}/stall.txt").read().split())
c_fs = float(open(f"{out}/write.txt").read())
r_local, r_fs = (float(open(f"{out}/restart-{l}.txt").read()) for l in ("partner", "file-system"))
for gpus, hours in (("1K GPUs", 8.0), ("16K GPUs", 2.0)):
    m = hours * 3600
    for name, c, r in (("local + partner", max(c_local, 1e-6), r_local), ("file system (sync)", c_fs, r_fs)):
        tau = math.sqrt(2 * c * m)
        g = 1 - c / tau - (tau / 2 + r) / m
        print(f"{gpus}, MTBF {hours:g} h, {name}: C = {1e3 * c:.2f} ms, R = {r:.2f} s -> tau = {tau:.1f} s "
              f"({tau / step_s:.0f} steps of {1e3 * step_s:.1f} ms), expected goodput {100 * g:.3f} %")
EOF
