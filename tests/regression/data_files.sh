#!/usr/bin/env bash
# Token files as users make them with h5py: integers are read at their own width (a vocab_size
# or token beyond int32 is named as stored, not clipped), variable-length string attributes are
# accepted, and train.eval_samples beyond the validation windows uses each window once.
# Usage: data_files.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC PYTHON
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4 python=$5
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; tail -20 "$work/run.txt"; exit 1; }
"$python" - "$data" "$work" <<'PY'
import h5py, numpy as np, sys
src, work = h5py.File(sys.argv[1], "r"), sys.argv[2]
train, val = src["train/tokens"][...].astype(np.int64), src["val/tokens"][...].astype(np.int64)
def write(name, vocab, train, val, vlen, as_type=np.int64):
    with h5py.File(f"{work}/{name}.h5", "w") as f:
        f["train/tokens"], f["val/tokens"] = train, val
        f.attrs["vocab_size"] = as_type(vocab)
        if vlen:  # h5py's default for str: variable-length UTF-8
            f.attrs["tokenizer"], f.attrs["sha256"] = "bytes", "0" * 64
        else:
            f.attrs["tokenizer"] = np.bytes_(b"bytes")
write("wide_vocab", 2**32 + 256, train, val, False)
write("huge_vocab", 2**64 - 1, train, val, False, np.uint64)
bad = train.copy(); bad[1000] = 2**32 + 7
write("wide_token", 256, bad, val, False)
write("vlen", 256, train.astype(np.uint16), val.astype(np.uint16), True)
PY
[ $? -eq 0 ] || fail "cannot write the test files"
run() { timeout 120 "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --output.peak_gflops=1 --train.steps=1 \
          --output.dir="$work/out-$1" --data.path="$work/$1.h5" "${@:2}" > "$work/run.txt" 2>&1; }
run wide_vocab && fail "vocab_size 2^32 + 256 was accepted"
grep -q "vocab_size = 4294967552; valid: 1 .. 2147483647" "$work/run.txt" || fail "vocab_size not named as stored"
run huge_vocab && fail "vocab_size 2^64 - 1 was accepted"
grep -q "vocab_size = 18446744073709551615 (stored unsigned)" "$work/run.txt" || fail "uint64 vocab_size not named as stored"
run wide_token && fail "token 2^32 + 7 was accepted"
grep -q "/train/tokens holds token 4294967303 outside \[0, vocab_size = 256)" "$work/run.txt" || fail "token not named as stored"
run vlen || fail "variable-length string attributes were refused"
grep -q "source sha256 0000000000000000" "$work/run.txt" || fail "the vlen sha256 attribute was not read"
start=$(date +%s)
run vlen --train.eval_samples=1000000 --output.overwrite=true || fail "a huge train.eval_samples failed"
grep -Eq "train.eval_samples = 1000000 exceeds the [0-9]+ windows of 33 tokens in /val/tokens; each pass uses all of them once" \
  "$work/run.txt" || fail "eval_samples was not clamped with a note"
[ $(($(date +%s) - start)) -le 60 ] || fail "validation took over a minute"
echo "OK: wide and uint64 vocab_size and token named as stored; vlen strings read; eval_samples clamped"
