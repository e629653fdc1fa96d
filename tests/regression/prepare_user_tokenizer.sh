#!/usr/bin/env bash
# prepare with a SentencePiece model the user brings (--sp-model), trained by spm_train without
# byte fallback: what it has no piece for becomes its unknown piece, so the stored tokens would not
# be the text. prepare decodes what it stored, counts and locates the lines that do not come back,
# and refuses unless --accept-lossy (then it warns, and the file decodes to something else).
# Usage: prepare_user_tokenizer.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC PYTHON (DATA.h5's directory
# holds ge-ex.txt, its text)
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4 python=$5
text=$(dirname "$data")/ge-ex.txt
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; tail -20 out.txt; exit 1; }
# Trained on the lines (spm_train reads lines, so '\n' gets no piece), identity normalization,
# every character of the text covered.
spm_train --input="$text" --model_prefix=user --vocab_size=400 --model_type=unigram --byte_fallback=false \
  --normalization_rule_name=identity --character_coverage=1.0 > spm.txt 2>&1 || { cat spm.txt; exit 1; }
prepare() { timeout 120 "$mpiexec" -n 2 --oversubscribe "$gridtrain" prepare text --tokenizer sentencepiece \
  --sp-model user.model "$@" > out.txt 2>&1; }

# 1. The KJV text itself: every newline is the unknown piece, so every line is lost.
lines=$(wc -l < "$text")
prepare --input "$text" --output kjv.h5 && fail "the KJV text with a model that lacks '\\n' was stored"
grep -q "ERROR: prepare: '$text' holds $lines line(s) whose tokens do not decode back to the text (the first at byte [0-9]*, line 1: " out.txt ||
  fail "the refusal does not count the $lines lines and locate the first"
grep -q -- "--accept-lossy" out.txt || fail "the refusal does not name --accept-lossy"
[ -e kjv.h5 ] && fail "a refused prepare left kjv.h5"

# 2. One line without a newline, holding characters the text lacks: that line, at its byte.
prefix="In the beginning God created the heaven and the earth. "
printf '%sCaf\xc3\xa9 \xe2\x80\x94 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80' "$prefix" > mixed.txt
prepare --input mixed.txt --output mixed.h5 && fail "text with characters the model lacks was stored"
grep -q "holds 1 line(s) whose tokens do not decode back to the text (the first at byte $(( ${#prefix} + 3 )), line 1: \"\.\.\.[^\"]*Café — 中文 😀\" decodes as \"\.\.\.[^\"]*Caf" out.txt ||
  fail "the refusal does not name the line and the byte of é"

# 3. Accepted: stored, with the warning, and it decodes to something else than the text.
prepare --input "$text" --output kjv.h5 --accept-lossy || fail "--accept-lossy was refused"
grep -q -- "--accept-lossy: .*$lines line(s) whose tokens do not decode back" out.txt || fail "no warning with --accept-lossy"
"$python" - kjv.h5 > ids.txt <<'PY' || fail "cannot read kjv.h5"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    print(" ".join(str(int(i)) for i in list(f["train/tokens"][...]) + list(f["val/tokens"][...])))
PY
spm_decode --model=user.model --input_format=id < ids.txt > decoded.txt || fail "spm_decode failed"
cmp -s decoded.txt "$text" && fail "the accepted file decodes to the text: nothing was lost"
grep -q " ⁇ " decoded.txt || fail "the accepted file's tokens hold no unknown piece"
echo "OK"
