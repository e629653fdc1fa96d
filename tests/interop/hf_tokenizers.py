#!/usr/bin/env python3
"""`gridtrain prepare --tokenizer hf` against transformers' AutoTokenizer.

  hf_tokenizers.py GRIDTRAIN MPIEXEC KJV_TEXT WORKDIR

A byte-level BPE tokenizer (GPT-2's scheme) is trained on the KJV by the `tokenizers` library and
saved as a transformers model directory with an eos_token. Then:
  - `prepare jsonl --tokenizer-json DIR --append-eod` at np 1 and np 2 (hdf5 and megatron): every
    document's ids equal AutoTokenizer(text, add_special_tokens=False) followed by the eos id, on
    documents with non-ASCII text, emoji, kinds of whitespace and empty ones (which hold no tokens);
  - `prepare text` of text with bytes that are not UTF-8 is refused, naming their count, the first
    byte's offset and its line; with --accept-lossy its ids are those of the text with each such
    byte replaced by U+FFFD;
  - a directory without tokenizer.json, --tokenizer hf without --tokenizer-json, --append-eod with a
    bare tokenizer.json (no eos_token) and a GRIDTRAIN_PYTHON that is not there are refused by name.
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

DOCS = [
    "In the beginning God created the heaven and the earth.",
    "",
    "Non-ASCII: café, naïve, Straße — “quoted” ½ ﬁ ｆｕｌｌ 中文 Ελληνικά ¡sí!",
    "emoji 😀👍🏽 and a family 👨‍👩‍👧 (ZWJ)",
    "whitespace:\ttab, \u00a0nbsp, \u2003em space, \u3000ideographic,\r\nCRLF\n\n\nnewlines  ",
    "   leading spaces",
    "",
    "<|endoftext|> written as text",
]


def run(cmd, ok=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def train_tokenizer(kjv, directory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=700, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train([kjv], trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(directory)


def main():
    gridtrain, mpiexec, kjv, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)  # a refusal must leave no output: none from an earlier run either
    os.makedirs(work)
    tokdir = os.path.join(work, "tokenizer")
    train_tokenizer(kjv, tokdir)
    from transformers import AutoTokenizer
    auto = AutoTokenizer.from_pretrained(tokdir)
    eos = auto.eos_token_id
    want = [auto(d, add_special_tokens=False).input_ids + [eos] for d in DOCS if d]
    if not all(len(w) > 1 for w in want) or eos is None:
        sys.exit("FAILED: the reference encodes a document to nothing")
    corpus = os.path.join(work, "docs.jsonl")
    with open(corpus, "w", encoding="utf-8") as f:
        for d in DOCS:
            f.write(json.dumps({"text": d}) + "\n")
    for np_ in (1, 2):
        out = os.path.join(work, f"docs-{np_}.h5")
        run([mpiexec, "-n", np_, "--oversubscribe", gridtrain, "prepare", "jsonl", "--input", corpus, "--output", out,
             "--tokenizer-json", tokdir, "--append-eod", "--val-fraction", "0.5"])
        with h5py.File(out) as f:
            got = np.concatenate([f["train/tokens"][()], f["val/tokens"][()]]).tolist()
            if f.attrs["tokenizer"] != b"hf" and f.attrs["tokenizer"] != "hf":
                sys.exit(f"FAILED: tokenizer attribute {f.attrs['tokenizer']!r}")
            if int(f.attrs["eod_id"]) != eos or int(f.attrs["vocab_size"]) != len(auto):
                sys.exit(f"FAILED: eod_id {f.attrs['eod_id']} / vocab {f.attrs['vocab_size']} != {eos} / {len(auto)}")
        if got != sum(want, []):
            sys.exit(f"FAILED: np {np_}: gridtrain's ids\n{got}\n differ from AutoTokenizer's\n{sum(want, [])}")
        print(f"prepare jsonl at np {np_}: {len(want)} documents, {len(got)} ids, equal to AutoTokenizer's")
    prefix = os.path.join(work, "docs-megatron")
    run([gridtrain, "prepare", "jsonl", "--input", corpus, "--output", prefix, "--tokenizer-json", tokdir,
         "--append-eod", "--format", "megatron"])
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    ds = IndexedDataset(prefix)
    docs = [ds[i].tolist() for i in range(len(ds))]
    if docs != want:
        sys.exit(f"FAILED: the Megatron dataset's documents differ from AutoTokenizer's:\n{docs}\n{want}")
    print(f"prepare jsonl --format megatron: megatron-core reads {len(docs)} documents, AutoTokenizer's ids")
    # Refused by name: what is missing, and an interpreter that is not there.
    bare = os.path.join(work, "bare")
    os.makedirs(bare, exist_ok=True)
    shutil.copy(os.path.join(tokdir, "tokenizer.json"), bare)  # no tokenizer_config.json: no eos_token
    out = os.path.join(work, "refused.h5")
    refusals = [
        (["--tokenizer-json", work], {}, f"'{work}': the directory holds no tokenizer.json"),
        (["--tokenizer", "hf"], {}, "--tokenizer hf needs --tokenizer-json PATH"),
        (["--tokenizer-json", os.path.join(bare, "tokenizer.json"), "--append-eod"], {},
         "the hf tokenizer has no end-of-document token"),
        (["--tokenizer-json", tokdir], {"GRIDTRAIN_PYTHON": "/nonexistent/python3"},
         "/nonexistent/python3: No such file or directory"),
    ]
    for flags, env, message in refusals:
        p = subprocess.run([gridtrain, "prepare", "jsonl", "--input", corpus, "--output", out, *flags],
                           capture_output=True, text=True, env={**os.environ, **env})
        if p.returncode == 0 or message not in p.stderr + p.stdout or os.path.exists(out):
            sys.exit(f"FAILED: {flags} {env} was not refused with '{message}':\n{p.stdout}\n{p.stderr}")
        print(f"refused: {message}")
    # Bytes that are not UTF-8: two Latin-1 bytes on line 2.
    text = "In the beginning\nGod cr\xe9ated the heaven and the earth, caf\xe9\n".encode("latin-1")
    raw = os.path.join(work, "latin1.txt")
    with open(raw, "wb") as f:
        f.write(text * 4)
    out = os.path.join(work, "latin1.h5")
    p = run([gridtrain, "prepare", "text", "--input", raw, "--output", out, "--tokenizer-json", tokdir], ok=False)
    first = text.index(b"\xe9")
    expect = f"8 byte(s) that are not UTF-8 (the first at byte {first}, line 2"
    if p.returncode == 0 or expect not in p.stderr + p.stdout or os.path.exists(out):
        sys.exit(f"FAILED: bytes that are not UTF-8 were not refused with '{expect}':\n{p.stdout}\n{p.stderr}")
    print("prepare text refuses bytes that are not UTF-8:", expect + ")")
    run([gridtrain, "prepare", "text", "--input", raw, "--output", out, "--tokenizer-json", tokdir, "--accept-lossy",
         "--val-fraction", "0.5"])
    with h5py.File(out) as f:
        got = np.concatenate([f["train/tokens"][()], f["val/tokens"][()]]).tolist()
    ref = auto((text * 4).decode("utf-8", errors="replace"), add_special_tokens=False).input_ids
    if got != ref:
        sys.exit(f"FAILED: --accept-lossy ids\n{got}\n differ from AutoTokenizer's on the text with U+FFFD\n{ref}")
    print(f"--accept-lossy: {len(got)} ids, AutoTokenizer's with each such byte as U+FFFD")


main()
