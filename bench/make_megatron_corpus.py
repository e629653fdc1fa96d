#!/usr/bin/env python3
"""A synthetic Megatron indexed dataset of a given size, for the loader bench (docs/performance.md).

  make_megatron_corpus.py PREFIX GIB [VOCAB]

Writes PREFIX.bin (uint16 tokens drawn uniformly from [0, VOCAB), default 50257, GPT-2's) and
PREFIX.idx in Megatron's MMIDIDX layout: documents of one sequence each, 64 to 4096 tokens long
(uniform, seed 0). Streamed in 256 MiB chunks, so memory stays flat whatever GIB is.
"""
import struct
import sys

import numpy as np

prefix, gib = sys.argv[1], float(sys.argv[2])
vocab = int(sys.argv[3]) if len(sys.argv) > 3 else 50257
total = int(gib * 2**30) // 2  # uint16 tokens
rng = np.random.default_rng(0)
lengths = []
with open(prefix + ".bin", "wb") as bin_file:
    written = 0
    while written < total:
        n = min(2**27, total - written)
        bin_file.write(rng.integers(0, vocab, n, dtype=np.uint16).tobytes())
        written += n
left = total
while left > 0:
    chunk = rng.integers(64, 4097, 1 << 20)
    cum = np.cumsum(chunk)
    k = int(np.searchsorted(cum, left))  # the first document that reaches the total
    if k < len(chunk):
        chunk = chunk[: k + 1]
        chunk[-1] -= int(cum[k]) - left
    lengths.append(chunk.astype(np.int32))
    left -= int(chunk.sum())
lengths = np.concatenate(lengths)
pointers = np.zeros(len(lengths), dtype=np.int64)
pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * 2)
with open(prefix + ".idx", "wb") as f:
    f.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", 8))
    f.write(struct.pack("<Q", len(lengths)) + struct.pack("<Q", len(lengths) + 1))
    f.write(lengths.tobytes() + pointers.tobytes() + np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
print(f"{prefix}: {total} tokens in {len(lengths)} documents")
