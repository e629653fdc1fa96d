#!/usr/bin/env bash
# Memory per rank does not grow with the corpus: the same training run (2 ranks, T = 1024) on the
# small test corpus and on a synthetic corpus of >= 4 GiB of tokens made here (and deleted after)
# peaks within 50 MiB of resident memory of each other: the reader keeps no per-token state and
# the sampler's permutation is computed, not stored.
# Usage: data_memory.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC PYTHON
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4 python=$5
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
"$python" - "$work/big.h5" <<'PY' || fail "cannot write the 4 GiB corpus"
import h5py, numpy as np, sys
block = np.random.default_rng(7).integers(0, 256, 1 << 24, dtype=np.uint8)  # 16 MiB, tiled
n = (1 << 32) + (1 << 24)
with h5py.File(sys.argv[1], "w") as f:
    train = f.create_dataset("train/tokens", (n,), dtype=np.uint8)  # contiguous: no chunks
    for at in range(0, n, block.size):
        train[at:at + block.size] = block[: n - at]
    f["val/tokens"] = block[: 1 << 20]
    f.attrs["vocab_size"], f.attrs["tokenizer"] = np.int64(256), np.bytes_(b"bytes")
PY
run() {  # corpus, name: prints the largest peak RSS over ranks, MiB
  timeout 300 "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --output.peak_gflops=1 --train.steps=20 \
    --model.block_size=1024 --train.micro_batch=2 --train.global_batch=4 --checkpoint.dir=none \
    --output.dir="$work/out-$2" --data.path="$1" > "$work/run.txt" 2>&1 || fail "training on $2 failed"
  sed -nE 's|^Memory: peak RSS min/avg/max over [0-9]+ ranks: [0-9.]+ / [0-9.]+ / ([0-9.]+) MiB.*|\1|p' "$work/run.txt"
}
small=$(run "$data" small) big=$(run "$work/big.h5" big)
[ -n "$small" ] && [ -n "$big" ] || fail "no peak RSS line in the summary"
grep -q "4311744512 train" "$work/run.txt" || fail "the big corpus was not read whole"
awk -v s="$small" -v b="$big" 'BEGIN { exit !(b - s <= 50) }' || fail "peak RSS $big MiB on 4 GiB against $small MiB"
echo "OK: peak RSS per rank $small MiB (small corpus) and $big MiB (4 GiB corpus)"
