#!/usr/bin/env bash
# `gridtrain generate` from checkpoints written at tp = 1 and tp = 2: the same seed gives the
# same text (from both: fp32 tensor parallelism trains the same weights to rounding, and the
# sampler runs on the host), another seed other text, greedy decoding is deterministic, the text
# has the length asked for; a SentencePiece-trained checkpoint decodes with the model it carries;
# a prompt longer than the context is said to be cropped; the linears run on the checkpoint
# deck's model.matmul unless --matmul says otherwise (shown by a deck's onednn refused where oneDNN's
# matmul is capped away, and --matmul blas then running);
# and its errors (several ranks, a missing file, a bad option) are clear.
# Usage: generate.sh GRIDTRAIN DATA.h5 WORKDIR MPIEXEC
set -u
gridtrain=$1 data=$2 work=$3 mpiexec=$4
deck=$(dirname "$0")/../../inputs/in.smoke
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
train() {  # name, corpus, extra options
  "$mpiexec" -n 2 --oversubscribe "$gridtrain" -i "$deck" --output.peak_gflops=1 --train.steps=30 \
    --data.path="$2" --checkpoint.dir="$work/$1" --output.dir="$work/out-$1" "${@:3}" > "$work/train-$1.txt" 2>&1 \
    || { tail -20 "$work/train-$1.txt"; fail "training $1 failed"; }
}
train tp1 "$data"
train tp2 "$data" --grid.tp=2
"$gridtrain" prepare text --input "${data%.h5}.txt" --output "$work/sp.h5" --train-tokenizer --vocab-size 400 \
  > "$work/prepare.txt" 2>&1 || fail "prepare --train-tokenizer: $(cat "$work/prepare.txt")"
train sp "$work/sp.h5"
gen() { "$gridtrain" generate "$@" 2> "$work/err.txt"; }
for ck in tp1 tp2; do
  file=$work/$ck/step-00000030.h5
  a=$(gen "$file" --prompt "And God said" --max-new-tokens 60 --seed 7) || fail "generate ($ck): $(cat "$work/err.txt")"
  b=$(gen "$file" --prompt "And God said" --max-new-tokens 60 --seed 7)
  c=$(gen "$file" --prompt "And God said" --max-new-tokens 60 --seed 8)
  g1=$(gen "$file" --prompt "And" --max-new-tokens 40 --temperature 0)
  g2=$(gen "$file" --prompt "And" --max-new-tokens 40 --temperature 0 --seed 99)
  [ "$a" = "$b" ] || fail "$ck: seed 7 gave two texts"
  [ "$a" != "$c" ] || fail "$ck: seeds 7 and 8 gave the same text"
  [ "$g1" = "$g2" ] || fail "$ck: greedy decoding depends on the seed"
  case $a in "And God said"*) ;; *) fail "$ck: the text does not start with the prompt: $a" ;; esac
  [ "$(printf '%s' "$a" | wc -c)" -le $((12 + 60)) ] || fail "$ck: more than 60 new bytes"
  echo "$ck: $a"
  eval "text_$ck=\$a"
done
[ "$text_tp1" = "$text_tp2" ] || fail "seed 7 gave other text from the tp = 2 checkpoint"
sp1=$(gen "$work/sp/step-00000030.h5" --prompt "And God said" --max-new-tokens 20 --seed 3) || fail "generate (sp): $(cat "$work/err.txt")"
sp2=$(gen "$work/sp/step-00000030.h5" --prompt "And God said" --max-new-tokens 20 --seed 3)
[ "$sp1" = "$sp2" ] || fail "sentencepiece: seed 3 gave two texts"
case $sp1 in "And God said"?*) ;; *) fail "sentencepiece: no text after the prompt: $sp1" ;; esac
echo "sp: $sp1"
long="And God said, Let there be light: and there was light. And God saw the light."  # 77 bytes > T = 32
gen "$work/tp1/step-00000030.h5" --prompt "$long" --max-new-tokens 5 > /dev/null || fail "long prompt: $(cat "$work/err.txt")"
grep -q "WARNING: generate: --prompt is 77 tokens, longer than the model's context of 32 (model.block_size): only its last 32" \
  "$work/err.txt" || fail "a prompt longer than model.block_size is cropped without a word: $(cat "$work/err.txt")"
gen "$work/tp1/step-00000030.h5" --prompt "And" --max-new-tokens 5 > /dev/null
grep -q WARNING "$work/err.txt" && fail "a short prompt warned: $(cat "$work/err.txt")"
"$mpiexec" -n 2 --oversubscribe "$gridtrain" generate "$work/tp1/step-00000030.h5" > "$work/err.txt" 2>&1 \
  && fail "generate ran on 2 ranks"
grep -q "generate runs on one rank" "$work/err.txt" || fail "no clear error for 2 ranks: $(cat "$work/err.txt")"
gen "$work/none.h5" > /dev/null && fail "a missing checkpoint was accepted"
grep -q "generate: checkpoint '$work/none.h5'" "$work/err.txt" || fail "the missing file is not named: $(cat "$work/err.txt")"
gen "$work/tp1/step-00000030.h5" --matmul fast > /dev/null && fail "--matmul fast was accepted"
grep -q "generate: --matmul fast: valid: auto, onednn, blas" "$work/err.txt" || fail "no clear error for --matmul fast"
if "$mpiexec" -n 1 "$gridtrain" -i "$deck" --train.steps=2 --data.path="$data" --model.matmul=onednn \
     --checkpoint.dir="$work/onednn" --output.dir="$work/out-onednn" > "$work/train-onednn.txt" 2>&1; then
  # a CPU where oneDNN's matmul runs (elsewhere the training run itself refuses onednn)
  ONEDNN_MAX_CPU_ISA=AVX2 gen "$work/onednn/step-00000002.h5" --max-new-tokens 5 > /dev/null \
    && fail "the deck's model.matmul = onednn ran under ONEDNN_MAX_CPU_ISA=AVX2: generate ignores model.matmul"
  grep -q "model.matmul = onednn cannot run here" "$work/err.txt" || fail "no clear error: $(cat "$work/err.txt")"
  ONEDNN_MAX_CPU_ISA=AVX2 gen "$work/onednn/step-00000002.h5" --max-new-tokens 5 --matmul blas > /dev/null \
    || fail "--matmul blas did not override the deck: $(cat "$work/err.txt")"
fi
gen "$work/tp1/step-00000030.h5" --temperature -1 > /dev/null && fail "temperature -1 was accepted"
grep -q "must be >= 0" "$work/err.txt" || fail "no clear error for temperature -1"
echo "OK: generate is deterministic per seed from tp = 1 and tp = 2 checkpoints; errors named"
