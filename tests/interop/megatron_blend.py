#!/usr/bin/env python3
"""gridtrain's blend order (data/blend.hpp) against megatron-core's build_blending_indices.

  megatron_blend.py BLEND_ORDER

For two-dataset, three-dataset and extreme (0.001 / 0.999) weights, 100,000 samples: every
sample's dataset and its index within that dataset equal megatron-core's (its compiled
helpers_cpp), and each dataset's count stays within one sample of weight × samples drawn.
"""
import subprocess
import sys

import numpy as np
from megatron.core.datasets import helpers_cpp

BLEND_ORDER = sys.argv[1]
N = 100_000
failures = []
for weights in ([0.7, 0.3], [0.5, 0.25, 0.25], [0.001, 0.999], [0.2, 0.3, 0.1, 0.4]):
    w = np.array(weights, dtype=np.float64)
    dataset = np.zeros(N, dtype=np.int16)
    sample = np.zeros(N, dtype=np.int64)
    helpers_cpp.build_blending_indices(dataset, sample, w, len(w), N, False)
    out = subprocess.run([BLEND_ORDER, str(N)] + [repr(x) for x in weights], capture_output=True, text=True, check=True)
    ours = np.array([list(map(int, line.split())) for line in out.stdout.splitlines()])
    same = len(ours) == N and (ours[:, 0] == dataset).all() and (ours[:, 1] == sample).all()
    counts = np.zeros((N, len(w)))
    counts[np.arange(N), ours[:, 0]] = 1
    drift = np.abs(np.cumsum(counts, axis=0) - np.outer(np.arange(1, N + 1), w)).max()
    ok = same and drift <= 1.0
    print(("ok   " if ok else "FAIL ") + f"weights {weights}: {N} samples equal megatron-core's: {same}; "
          f"largest |count - w·j| {drift:.3f}")
    if not ok:
        failures.append(weights)
if failures:
    sys.exit(f"{len(failures)} weight set(s) differ")
print("all checks passed")
