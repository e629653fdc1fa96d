#!/usr/bin/env python3
"""Recomputes gridtrain's GPT loss, gradient norm and gradients with PyTorch (Debian python3-torch)
from the weights and batch that dump_gpt wrote, and fails when they differ by more than 1e-5 rel.

The model below is written from the GPT-2 description (pre-LN blocks, causal attention, tanh-GELU
MLP, tied head), independently of gridtrain's C++ code.
Usage: check_gpt.py FILE.h5
"""
import math
import sys

import h5py
import torch
import torch.nn.functional as F

TOL = 1e-5


def gpt_loss(w, idx, targets, n_layer, n_head):
    B, T = idx.shape
    x = w["wte.weight"][idx] + w["wpe.weight"][:T]
    C = x.shape[-1]
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    for i in range(n_layer):
        p = f"h.{i}."
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        q, k, v = F.linear(h, w[p + "attn.c_attn.weight"], w[p + "attn.c_attn.bias"]).split(C, dim=2)
        q, k, v = (t.view(B, T, n_head, C // n_head).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // n_head)
        att = att.masked_fill(mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + F.linear(y, w[p + "attn.c_proj.weight"], w[p + "attn.c_proj.bias"])
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        h = F.gelu(F.linear(h, w[p + "mlp.c_fc.weight"], w[p + "mlp.c_fc.bias"]), approximate="tanh")
        x = x + F.linear(h, w[p + "mlp.c_proj.weight"], w[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"])
    logits = x @ w["wte.weight"].T
    return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def main(path):
    with h5py.File(path, "r") as f:
        names = []
        f["model"].visit(lambda n: names.append(n) if isinstance(f["model"][n], h5py.Dataset) else None)
        w = {n.replace("/", "."): torch.tensor(f["model"][n][()], requires_grad=True) for n in names}
        grads = {n.replace("/", "."): torch.tensor(f["grad"][n][()]) for n in names}
        idx = torch.tensor(f["batch/idx"][()])
        targets = torch.tensor(f["batch/targets"][()])
        cpp_loss = float(f["result/loss"][0])
        cpp_norm = float(f["result/grad_norm"][0])
        n_layer, n_head = int(f.attrs["n_layer"]), int(f.attrs["n_head"])
    loss = gpt_loss(w, idx, targets, n_layer, n_head)
    loss.backward()
    norm = math.sqrt(sum(float(p.grad.double().square().sum()) for p in w.values()))
    print(f"pytorch:   loss {loss.item():.8f} grad_norm {norm:.8f}")
    print(f"gridtrain: loss {cpp_loss:.8f} grad_norm {cpp_norm:.8f}")
    failures = []
    if rel(cpp_loss, loss.item()) > TOL:
        failures.append(f"loss rel diff {rel(cpp_loss, loss.item()):.3g}")
    if rel(cpp_norm, norm) > TOL:
        failures.append(f"grad norm rel diff {rel(cpp_norm, norm):.3g}")
    for n, p in w.items():
        err = float((p.grad - grads[n]).norm() / max(float(p.grad.norm()), 1e-12))
        if err > 1e-4:
            failures.append(f"gradient of {n}: rel diff {err:.3g}")
    if len(w) != 2 + 12 * n_layer + 2:  # wte, wpe; 12 per block; ln_f weight, bias
        failures.append(f"unexpected parameter count {len(w)}")
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    print(f"OK: {len(w)} tensors, loss and grad norm within {TOL} rel")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
