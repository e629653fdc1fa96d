#!/usr/bin/env bash
# checkpoint.resume = auto when `latest` is missing, empty, or names a corrupt or truncated file:
# the run resumes from the newest checkpoint that passes its checksums and says why; keep_last
# then deletes neither that checkpoint's successors it did not write nor anything of another run;
# with nothing usable it stops instead of starting fresh. --restart takes a file, a directory or
# a `latest` pointer; a stale pointer given to --restart (naming step 5 while the run's step 10 is
# complete) resumes the newer step, as the directory does, never a branch refused by its own file.
# Usage: resume_fallback.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
run() { "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --data.path="$data" --output.peak_gflops=1 \
          --train.eval_interval=0 --checkpoint.dir="$work/ckpt" --output.dir="$work/out" "$@" > "$work/run.txt" 2>&1; }
first_run() {  # step-5, step-10, latest
  rm -rf "$work" && mkdir -p "$work"
  run --train.steps=10 --checkpoint.interval=5 || fail "first run failed"
}
resumed_at() { grep -q "Resumed from $work/ckpt/step-$(printf %08d "$1").h5 at step $1" "$work/run.txt" || fail "$2: not resumed at step $1"; }
corrupt() { python3 -c "import os,sys; p=sys.argv[1]; f=open(p,'r+b'); f.seek(os.path.getsize(p)//2); f.write(b'\x7f'*64)" "$1"; }

for how in missing empty; do
  first_run
  if [ $how = missing ]; then rm "$work/ckpt/latest"; else : > "$work/ckpt/latest"; fi
  run --train.steps=15 --checkpoint.resume=auto --checkpoint.keep_last=1 || fail "latest $how: run failed"
  resumed_at 10 "latest $how"
  grep -q "latest is $how; falling back to the newest checkpoint that passes its checksums" "$work/run.txt" \
    || fail "latest $how: the fallback is not explained"
  grep -q "starting fresh" "$work/run.txt" && fail "latest $how: started fresh"
done

first_run
corrupt "$work/ckpt/step-00000010.h5"
run --train.steps=8 --checkpoint.resume=auto --checkpoint.keep_last=1 || fail "corrupt: run failed"
resumed_at 5 "latest names a corrupt file"
grep -q "step-00000010.h5 is unusable: dataset .* fails its checksum" "$work/run.txt" || fail "corrupt: no reason given"
[ -f "$work/ckpt/step-00000010.h5" ] || fail "keep_last deleted step 10, newer than the checkpoint the run started from"
[ -f "$work/ckpt/step-00000005.h5" ] && fail "keep_last = 1 kept step 5 (this run's, older than its step 8)"
python3 - "$work/out/metrics.jsonl" <<'PY' || fail "metrics.jsonl does not hold one line per step"
import json, sys
steps = [json.loads(line)["step"] for line in open(sys.argv[1])]
assert steps == sorted(set(steps)) and steps[-1] == 8, steps
PY

first_run
truncate -s 20000 "$work/ckpt/step-00000010.h5"
run --train.steps=11 --checkpoint.resume=auto || fail "truncated: run failed"
resumed_at 5 "latest names a truncated file"

first_run
run --train.steps=11 --restart "$work/ckpt/latest" || fail "--restart latest failed"
resumed_at 10 "--restart DIR/latest"
first_run
run --train.steps=11 --restart "$work/ckpt" || fail "--restart DIR failed"
resumed_at 10 "--restart DIR"
first_run
echo step-00000005.h5 > "$work/ckpt/latest"   # stale: a kill or a full disk kept it from moving on
run --train.steps=11 --checkpoint.interval=5 --restart "$work/ckpt/latest" || fail "--restart stale latest failed"
resumed_at 10 "--restart DIR/latest naming an older step of the run"
grep -qF "'latest' names step-00000005.h5, but step-00000010.h5, a newer checkpoint of the same run, is complete" \
  "$work/run.txt" || fail "--restart stale latest: the newer file is not explained"
grep -qE "branch|another run" "$work/run.txt" && fail "--restart stale latest: treated the run's own step 10 as another run's"
[ "$(cat "$work/ckpt/latest")" = step-00000011.h5 ] || fail "--restart stale latest: latest is not step 11"

first_run
corrupt "$work/ckpt/step-00000005.h5"; corrupt "$work/ckpt/step-00000010.h5"
run --train.steps=12 --checkpoint.resume=auto && fail "nothing usable: exit 0"
grep -q "holds 2 checkpoint file(s) but none can be resumed from" "$work/run.txt" || fail "nothing usable: no clear error"
[ -f "$work/ckpt/step-00000005.h5" ] && [ -f "$work/ckpt/step-00000010.h5" ] || fail "nothing usable: files were deleted"
echo "OK: latest missing/empty/corrupt/truncated fall back with a reason; keep_last spares newer files; --restart FILE|DIR|latest"
