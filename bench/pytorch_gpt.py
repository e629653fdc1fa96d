#!/usr/bin/env python3
"""Plain PyTorch training of the same GPT as gridtrain's (same shapes, init scheme, AdamW, clipping,
data file), single process, for the side-by-side speed comparisons in bench/compare_pytorch.sh
(CPU) and bench/gpu_vs_pytorch.sh (CUDA).

Usage: pytorch_gpt.py DATA.h5 --steps N --micro-batch B --block-size T --n-layer L --n-head H
                      --n-embd C --threads K [--device cpu|cuda] [--attention math|sdpa]
                      [--precision fp32|bf16] [--compile]
Prints one line: "pytorch: <tokens/s> tokens/s over <steps> steps (<seconds> s), peak memory <MiB> MiB"
(peak CUDA memory allocated; 0 on the CPU).
"""
import argparse
import math
import time

import h5py
import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, T, sdpa):
        super().__init__()
        self.H, self.sdpa = H, sdpa
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
            y = att.masked_fill(self.mask[:T, :T], float("-inf")).softmax(-1) @ v
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, V, T, L, H, C, sdpa=False):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, T, sdpa) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln_" in name:
                nn.init.ones_(p)
            else:
                std = 0.02 / math.sqrt(2 * L) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.h:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.T
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("data")
    for k, v in dict(steps=50, micro_batch=16, block_size=128, n_layer=4, n_head=4, n_embd=128, threads=1).items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--attention", default="math", choices=["math", "sdpa"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    with h5py.File(a.data, "r") as f:
        tokens = torch.from_numpy(f["train/tokens"][()].astype("int64"))
    model = GPT(256, a.block_size, a.n_layer, a.n_head, a.n_embd, a.attention == "sdpa").to(a.device)
    forward = torch.compile(model) if a.compile else model
    cuda = a.device == "cuda"
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    # The fastest eager AdamW on each device, as gridtrain runs: on a GPU the fused kernel (as
    # nanoGPT does), on the CPU the multi-tensor (foreach) one.
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8, **(dict(fused=True) if cuda else dict(foreach=True)))
    T = a.block_size

    def batch():
        starts = torch.randint(0, len(tokens) - T - 1, (a.micro_batch,))
        w = torch.stack([tokens[s:s + T + 1] for s in starts.tolist()]).to(a.device, non_blocking=True)
        return w[:, :T], w[:, 1:]

    def step():
        x, y = batch()
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = forward(x, y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(3):  # warm-up, as gridtrain's first thermo interval (and compilation)
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else 0.0
    print(f"pytorch: {a.steps * a.micro_batch * T / dt:.1f} tokens/s over {a.steps} steps ({dt:.2f} s), "
          f"peak memory {peak:.0f} MiB")


if __name__ == "__main__":
    main()
