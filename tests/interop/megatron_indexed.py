#!/usr/bin/env python3
"""gridtrain's Megatron indexed datasets proved against megatron-core's own reader and writer.

  megatron_indexed.py GRIDTRAIN INDEXED_DUMP MPIEXEC TEXT WORKDIR

TEXT is a text file (Genesis and Exodus, KJV); its lines, as bytes, are the documents.
1. megatron-core's IndexedDatasetBuilder writes it as uint16 and as int32, three lines per document
   (each line one sequence, as Megatron's preprocess_data.py writes sentences). gridtrain reads
   each document as megatron-core's IndexedDataset returns it, and its training and validation
   streams are the documents of Megatron's own split (megatron-core's parse_and_normalize_split,
   convert_split_vector_to_split_matrix and its rounding), concatenated.
2. gridtrain trains on each for 40 steps at dp 2: the training loss falls.
3. `gridtrain prepare text --format megatron` (one file, then shards from 2 ranks): megatron-core
   reads back one document per line of TEXT, and the shards are the one file's documents in order.
4. `gridtrain prepare jsonl` of documents with non-ASCII text, emoji, every kind of whitespace and
   empty documents, plain, gzip and Zstandard, from 1 and 3 ranks: megatron-core reads the
   non-empty documents' bytes; with a SentencePiece model and --append-eod, each document is
   SentencePiece's own encoding (its Python module) plus the eos id, and the HDF5 corpus records
   that id for document-aware training (data.eod_token and its refusals). Damaged files are
   refused by file and line.
"""
import gzip
import json
import math
import os
import subprocess
import sys

import h5py
import numpy as np
import sentencepiece
import torch
from megatron.core.datasets.blended_megatron_dataset_config import (convert_split_vector_to_split_matrix,
                                                                     parse_and_normalize_split)
from megatron.core.datasets.indexed_dataset import IndexedDataset, IndexedDatasetBuilder

GRIDTRAIN, DUMP, MPIEXEC, TEXT, WORK = sys.argv[1:6]
os.makedirs(WORK, exist_ok=True)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd, expect_ok=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if not expect_ok:
        return p
    if p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def gridtrain_view(path, split, vocab, *prefixes):
    return json.loads(run([DUMP, path, split, vocab, *prefixes]))


def megatron_split(documents, split):
    """Megatron's document ranges of the train and validation splits (BlendedMegatronDatasetBuilder)."""
    matrix = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))
    return [(int(round(m[0] * float(documents))), int(round(m[1] * float(documents)))) if m else (0, 0)
            for m in matrix[:2]]


lines = [list(line) for line in open(TEXT, "rb").read().splitlines(keepends=True)]

# 1. Written by megatron-core, read by gridtrain.
for dtype in (np.uint16, np.int32):
    prefix = f"{WORK}/mcore_{np.dtype(dtype).name}"
    builder = IndexedDatasetBuilder(prefix + ".bin", dtype=dtype)
    for i, line in enumerate(lines):
        builder.add_item(torch.tensor(line, dtype=torch.int64))
        if i % 3 == 2 or i == len(lines) - 1:
            builder.end_document()
    builder.finalize(prefix + ".idx")
    theirs = IndexedDataset(prefix)
    docs = [np.concatenate([theirs[s] for s in range(theirs.document_indices[d], theirs.document_indices[d + 1])])
            for d in range(len(theirs.document_indices) - 1)]
    for split in ("969,30,1", "90,10", "7,2,1"):
        mine = gridtrain_view(prefix, split, "256", prefix)
        if split == "969,30,1":
            ours = mine["documents"][prefix]
            check(len(ours) == len(docs) and all(list(map(int, d)) == o for d, o in zip(docs, ours)),
                  f"{dtype.__name__}: gridtrain's {len(ours)} documents equal megatron-core's {len(docs)}")
        (t0, t1), (v0, v1) = megatron_split(len(docs), split)
        for name, (b, e) in (("train", (t0, t1)), ("val", (v0, v1))):
            want = [int(t) for d in docs[b:e] for t in d]
            check(mine[name] == want, f"{dtype.__name__}, split {split}: gridtrain's {name} stream is documents "
                                      f"[{b}, {e}) of megatron-core's ({len(want)} tokens)")

# 2. gridtrain trains on them.
for dtype in ("uint16", "int32"):
    out = f"{WORK}/train_{dtype}"
    run([MPIEXEC, "-n", "2", "--oversubscribe", GRIDTRAIN, "--model.n_layer=2", "--model.n_head=2", "--model.n_embd=64",
         "--model.block_size=64", f"--data.path={WORK}/mcore_{dtype}", "--model.vocab_size=256", "--data.split=90,10",
         "--train.steps=40", "--train.micro_batch=8", "--train.global_batch=16", "--optim.warmup_steps=5",
         "--train.eval_interval=40", "--train.eval_samples=16", "--output.thermo=5", "--checkpoint.dir=none",
         f"--output.dir={out}", "--output.overwrite=true"])
    rows = [json.loads(r) for r in open(f"{out}/metrics.jsonl")]
    first, last = rows[0]["loss"], rows[-1]["loss"]
    # A byte model starts near ln 256 = 5.55 nats; 40 steps of English text take it below the
    # uniform loss by far more than 1 nat (the unigram entropy of English bytes is under 3.2).
    check(math.isfinite(last) and last < first - 1.0 and abs(first - math.log(256)) < 0.5,
          f"{dtype}: training on megatron-core's dataset lowers the loss from {first:.3f} to {last:.3f}")

# 3. Written by gridtrain, read by megatron-core.
run([GRIDTRAIN, "prepare", "text", "--input", TEXT, "--output", f"{WORK}/gt", "--format", "megatron"])
run([MPIEXEC, "-n", "2", "--oversubscribe", GRIDTRAIN, "prepare", "text", "--input", TEXT, "--output", f"{WORK}/gt_shards",
     "--format", "megatron", "--shard-size", "60000"])
one = IndexedDataset(f"{WORK}/gt")
read = [list(map(int, one[d])) for d in range(len(one))]
check(read == lines, f"prepare --format megatron: megatron-core reads {len(read)} documents, the {len(lines)} lines")
check(list(one.document_indices) == list(range(len(lines) + 1)), "one sequence per document")
shards = sorted(f[:-4] for f in os.listdir(f"{WORK}/gt_shards") if f.endswith(".idx"))
together = [list(map(int, s[d])) for p in shards for s in [IndexedDataset(f"{WORK}/gt_shards/{p}")] for d in range(len(s))]
check(len(shards) > 1 and together == lines, f"{len(shards)} shards from 2 ranks hold the lines in order")
mine = gridtrain_view(f"{WORK}/gt_shards", "-", "256")
whole = gridtrain_view(f"{WORK}/gt", "-", "256")
check(mine == whole, "gridtrain reads the shards as the one file (default split 969,30,1)")

# 4. JSON Lines documents.
texts = ["In the beginning God created the heaven and the earth.\n", "", "Ünïcödé — “quotes”, 日本語, emoji 🙂🚀",
         "tabs\tand\r\nCRLF, no-break\u00a0space, ideographic\u3000space,  two  spaces\n\n", "   ", "line\u2028sep"]
texts += [" ".join(line.decode() for line in map(bytes, lines[i:i + 5])) for i in range(0, 400, 5)]
texts.append("")
jsonl = f"{WORK}/docs.jsonl"
with open(jsonl, "w") as f:
    for i, t in enumerate(texts):
        f.write(json.dumps({"id": i, "text": t}, ensure_ascii=i % 2 == 0) + "\n")
        if i == 3:
            f.write("\n")  # a blank line: no document
with open(jsonl, "rb") as f, gzip.open(jsonl + ".gz", "wb") as g:
    g.write(f.read())
run(["zstd", "-q", "-f", jsonl, "-o", jsonl + ".zst"])
nonempty = [list(t.encode()) for t in texts if t]
for source in (jsonl, jsonl + ".gz", jsonl + ".zst"):
    for ranks in (1, 3):
        prefix = f"{WORK}/docs_{ranks}_{os.path.basename(source)}"
        run([MPIEXEC, "-n", ranks, "--oversubscribe", GRIDTRAIN, "prepare", "jsonl", "--input", source,
             "--output", prefix, "--format", "megatron"])
        got = IndexedDataset(prefix)
        check([list(map(int, got[d])) for d in range(len(got))] == nonempty,
              f"prepare jsonl {os.path.basename(source)} from {ranks} rank(s): megatron-core reads the "
              f"{len(nonempty)} non-empty documents' bytes")
# SentencePiece, with an end-of-document token.
run([GRIDTRAIN, "prepare", "text", "--input", TEXT, "--output", f"{WORK}/sp.h5", "--train-tokenizer", "--vocab-size", "600"])
with h5py.File(f"{WORK}/sp.h5") as f:
    open(f"{WORK}/sp.model", "wb").write(bytes(f["/tokenizer/model"][()]))
sp = sentencepiece.SentencePieceProcessor(model_file=f"{WORK}/sp.model")
run([MPIEXEC, "-n", 2, "--oversubscribe", GRIDTRAIN, "prepare", "jsonl", "--input", jsonl + ".zst", "--output",
     f"{WORK}/docs_sp", "--format", "megatron", "--sp-model", f"{WORK}/sp.model", "--append-eod"])
got = IndexedDataset(f"{WORK}/docs_sp")
want = [sp.encode(t) + [sp.eos_id()] for t in texts if sp.encode(t)]
check(sp.eos_id() >= 0 and [list(map(int, got[d])) for d in range(len(got))] == want,
      f"prepare jsonl --sp-model --append-eod: {len(want)} documents are SentencePiece's ids + eos {sp.eos_id()}")
# The HDF5 corpus records the end-of-document token, which document-aware training then finds;
# a Megatron dataset records none, and a token outside the vocabulary or unlike the recorded one
# is refused by name.
run([GRIDTRAIN, "prepare", "jsonl", "--input", jsonl, "--output", f"{WORK}/docs_sp.h5", "--sp-model", f"{WORK}/sp.model",
     "--append-eod", "--val-fraction", "0.5"])
with h5py.File(f"{WORK}/docs_sp.h5") as f:
    check(int(f.attrs["eod_id"]) == sp.eos_id(), f"prepare jsonl --append-eod records eod_id = {sp.eos_id()}")
small = ["--model.n_layer=1", "--model.n_head=2", "--model.n_embd=16", "--model.block_size=8", "--train.steps=2",
         "--train.micro_batch=2", "--train.global_batch=2", "--train.eval_samples=2", "--optim.warmup_steps=1",
         "--optim.decay_steps=2", "--checkpoint.dir=none", f"--output.dir={WORK}/docs_run", "--output.overwrite=true"]
documents = ["--data.reset_position_ids=true", "--data.document_mask=true", "--data.eod_mask_loss=true"]
p = run([GRIDTRAIN, f"--data.path={WORK}/docs_sp.h5", *small, *documents], expect_ok=False)
check(p.returncode == 0 and f"eod {sp.eos_id()}" in p.stdout, "document-aware training takes the recorded eod_id")
for path, extra, message in [(f"{WORK}/gt", ["--model.vocab_size=256"], "records none: set data.eod_token"),
                             (f"{WORK}/docs_sp.h5", ["--data.eod_token=600"], "not a token of the vocabulary (600 ids)"),
                             (f"{WORK}/docs_sp.h5", [f"--data.eod_token={sp.eos_id() + 1}"],
                              f"records its documents' end token as {sp.eos_id()}")]:
    p = run([GRIDTRAIN, f"--data.path={path}", *small, *documents, *extra], expect_ok=False)
    check(p.returncode != 0 and message in p.stderr, f"{os.path.basename(path)} {' '.join(extra)}: refused ('{message}')")

# Damaged input, refused by file and line (line 2 of each).
for name, body, message in [("notjson", '{"text": "a"}\n{"text": "b"\n', "bad2.jsonl:2: not JSON"),
                            ("array", '{"text": "a"}\n["b"]\n', "bad2.jsonl:2: a JSON array, not an object"),
                            ("nokey", '{"text": "a"}\n{"body": "b"}\n', "bad2.jsonl:2: no key \"text\""),
                            ("number", '{"text": "a"}\n{"text": 7}\n', "bad2.jsonl:2: \"text\" is a JSON number")]:
    bad = f"{WORK}/bad2.jsonl"
    open(bad, "w").write(body)
    p = run([GRIDTRAIN, "prepare", "jsonl", "--input", bad, "--output", f"{WORK}/bad"], expect_ok=False)
    check(p.returncode != 0 and message in p.stderr + p.stdout, f"{name}: refused with '{message}'")
for name, data, message in [("truncated.jsonl.zst", open(jsonl + ".zst", "rb").read()[:-20], "ends inside a frame"),
                            ("truncated.jsonl.gz", open(jsonl + ".gz", "rb").read()[:-300], "(truncated)"),
                            ("plain.jsonl.gz", open(jsonl, "rb").read(), "not gzip")]:
    open(f"{WORK}/{name}", "wb").write(data)
    p = run([GRIDTRAIN, "prepare", "jsonl", "--input", f"{WORK}/{name}", "--output", f"{WORK}/bad"], expect_ok=False)
    check(p.returncode != 0 and name in p.stderr and message in p.stderr, f"{name} is refused: '{message}'")
# Outputs that would land somewhere unexpected are refused; a data file named for its prefix is read.
for output, message in [(f"{WORK}/bad.bin", "without .bin"), (WORK, "is a directory")]:
    p = run([GRIDTRAIN, "prepare", "jsonl", "--input", jsonl, "--output", output, "--format", "megatron"], expect_ok=False)
    check(p.returncode != 0 and message in p.stderr, f"--output {os.path.basename(output)}: refused ('{message}')")
check(gridtrain_view(f"{WORK}/gt.bin", "-", "256") == whole, "data.path = P.bin reads the dataset P")
# Shards smaller than a document: only shards in which a document starts are written.
run([GRIDTRAIN, "prepare", "jsonl", "--input", jsonl, "--output", f"{WORK}/tiny_shards", "--format", "megatron",
     "--shard-size", "7"])
tiny = sorted(f[:-4] for f in os.listdir(f"{WORK}/tiny_shards") if f.endswith(".idx"))
sizes = [len(IndexedDataset(f"{WORK}/tiny_shards/{p}")) for p in tiny]
check(sum(sizes) == len(nonempty) and min(sizes) > 0, f"--shard-size 7: {len(tiny)} shards, none empty")

if failures:
    sys.exit(f"{len(failures)} check(s) failed")
print("all checks passed")
