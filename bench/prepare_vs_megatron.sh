#!/usr/bin/env bash
# Input MB/s per rank of `gridtrain prepare jsonl --tokenizer-json` beside Megatron-LM's
# tools/preprocess_data.py, on the same JSONL and the same Hugging Face tokenizer (G21 §2).
# The input is the KJV as one document per chapter, repeated COPIES times; the tokenizer a
# byte-level BPE of 8,192 tokens trained on it by `tokenizers` (GPT-2's scheme). Each side runs
# with 1 and 2 processes (gridtrain: mpirun -np N; Megatron: --workers N encoder processes beside
# its writer), twice, alternating; the faster run counts. Both write uint16 .bin/.idx, which must
# be byte for byte the same. Prints a Markdown table.
#
# MEGATRON_LM: a Megatron-LM tree with tools/preprocess_data.py, megatron/training and
# megatron/legacy (its megatron/core is not needed: the pinned megatron-core wheel is used), e.g.
#   git clone https://github.com/NVIDIA/Megatron-LM && git -C Megatron-LM checkout c3dc507c544d48e574d3b0a798d5b4dd0196b943
# (main just before the 0.14 version bump, which matches megatron-core 0.13.1; later trees need
# einops and triton). Needs data/kjv.txt (scripts/prepare-kjv).
# Usage: bench/prepare_vs_megatron.sh MEGATRON_LM [COPIES (8)] [WORKDIR (/tmp/prepare-bench)]
set -euo pipefail
cd "$(dirname "$0")/.."
megatron=$(realpath "$1") copies=${2:-8} work=${3:-/tmp/prepare-bench}
. scripts/mpi-env
rm -rf "$work" && mkdir -p "$work"
/usr/bin/python3 - "$work" "$copies" <<'PY'
import json, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
work, copies = sys.argv[1], int(sys.argv[2])
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train(["data/kjv.txt"], trainers.BpeTrainer(vocab_size=8192, special_tokens=["<|endoftext|>"],
                                                 initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(f"{work}/tokenizer")
chapters = {}
for line in open("data/kjv.txt", encoding="utf-8"):
    ref, _, verse = line.rstrip("\n").partition(" ")
    chapters.setdefault(ref.split(":")[0], []).append(verse)
with open(f"{work}/docs.jsonl", "w", encoding="utf-8") as f:
    for _ in range(copies):
        for verses in chapters.values():
            f.write(json.dumps({"text": "\n".join(verses)}) + "\n")
PY
bytes=$(stat -c %s "$work/docs.jsonl")
seconds() {  # seconds COMMAND...: its wall time; its output goes to $work/last.log
  local t0=$EPOCHREALTIME
  "$@" > "$work/last.log" 2>&1 || { cat "$work/last.log" >&2; exit 1; }
  awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }'
}
gridtrain() {
  mpiexec -n "$1" --oversubscribe build/gridtrain prepare jsonl --input "$work/docs.jsonl" --output "$work/gt-$1" \
    --format megatron --tokenizer-json "$work/tokenizer" --append-eod
}
megatron() {
  PYTHONPATH="$megatron" /usr/bin/python3 "$megatron/tools/preprocess_data.py" --input "$work/docs.jsonl" \
    --output-prefix "$work/mg-$1" --tokenizer-type HuggingFaceTokenizer --tokenizer-model "$work/tokenizer" \
    --append-eod --workers "$1" --log-interval 100000
}
declare -A best
for repeat in 1 2; do
  for n in 1 2; do
    for side in gridtrain megatron; do
      s=$(seconds $side $n)
      key=$side-$n
      if [ -z "${best[$key]:-}" ] || awk -v a="$s" -v b="${best[$key]}" 'BEGIN { exit !(a < b) }'; then best[$key]=$s; fi
    done
  done
done
for n in 1 2; do
  cmp "$work/gt-$n.bin" "$work/mg-${n}_text_document.bin" ||
    { echo "prepare_vs_megatron: the .bin files of $n process(es) differ" >&2; exit 1; }
  cmp "$work/gt-$n.idx" "$work/mg-${n}_text_document.idx" ||
    { echo "prepare_vs_megatron: the .idx files of $n process(es) differ" >&2; exit 1; }
done
echo "Input: $(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1e6 }') MB of JSONL ($copies copies of the KJV's 1,189 chapters); .bin/.idx identical"
echo
echo "| processes | gridtrain s | Megatron s | gridtrain MB/s per process | Megatron MB/s per process | ratio |"
echo "|---|---|---|---|---|---|"
for n in 1 2; do
  g=${best[gridtrain-$n]} m=${best[megatron-$n]}
  awk -v n="$n" -v g="$g" -v m="$m" -v b="$bytes" \
    'BEGIN { printf "| %d | %.2f | %.2f | %.2f | %.2f | %.2f |\n", n, g, m, b / 1e6 / g / n, b / 1e6 / m / n, m / g }'
done
