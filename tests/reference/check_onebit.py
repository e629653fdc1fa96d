#!/usr/bin/env python3
"""1-bit Adam checked step by step against an independent reference of the algorithm.

The reference is written here in PyTorch from Tang et al. 2021 ("1-bit Adam", Algorithm 1 and
the error-compensated compressed allreduce of §4.2) with DeepSpeed's OnebitAdam as the
definition, for P simulated dp workers in one process. From gridtrain's state after step t − 1
(dump_onebit), each worker's loss and gradient on its micro-batch of step t (check_gpt.gpt_loss,
the model written from GPT-2) must equal gridtrain's, and one step of the algorithm on
gridtrain's gradients must give its state after step t, each to 1e-5 relative, at every step,
through the freeze and past it: parameters, momentum, second moment, and every worker's and
server's error-feedback residual. The step takes gridtrain's gradients, checked equal, because
Adam divides a near-zero gradient by √v + ε: at ε = 1e-8 a coordinate whose gradient is
rounding noise (the key bias) moves by an O(1) fraction of lr on a last-bit difference.

Per step t, lr the learning rate, wd the weight decay (on matrices only):
  t <= freeze, AdamW: g = mean over workers of g_r; m = β1·m + (1 − β1)·g; v = β2·v + (1 − β2)·g²;
      bias corrections 1 − β1^t and 1 − β2^t.
  t = freeze + 1, with a floor f > 0 (optim.frozen_v_floor): v = max(v, f²·(1 − β2^freeze)), so
      that √v̂ ≥ f while frozen.
  t > freeze: v and its bias correction (1 − β2^freeze) stay frozen; each worker's momentum
      m_r = β1·m + (1 − β1)·g_r is averaged by the compressed allreduce, in chunks of
      k = ⌈n / P⌉ of the buffer zero-padded to P·k:
        worker r: c = m_r + e_r; chunk j: q_rj = sign(c_j)·‖c_j‖₂/√k; e_r = c − q_r
        server j: s = (1/P)·Σ_r q_rj + e'_j;  q_j = sign(s)·‖s‖₂/√k;  e'_j = s − q_j
        every worker: m = (q_0, …, q_{P−1}) cut to n
  update: p = p·(1 − lr·wd) − lr/(1 − β1^t) · m / (√(v / bc2) + ε)

sign(x) is −1 where x has its sign bit set (negatives and −0), +1 elsewhere. An element within
1e-6·scale of 0 can take either sign under a last-bit difference of the gradient (an exact zero
as −0 or +0, by the order of operations); the reference takes gridtrain's sign there. The count
of nonzero such elements is printed and must stay under 1e-4 of the elements.
A residual e = c − q is the small difference of the buffer c and its 1-bit image q: its error is
measured relative to ‖c‖.

Then variants that break the algorithm (no server residual, no worker residual, one scale for
the whole buffer, the second moment not frozen, and with a floor: no floor) must fail: the check
can tell. With a floor, no coordinate may move more than lr·|m̂|/f (+ weight decay) in a
compressed step, and the largest move is printed with and without it.
Usage: check_onebit.py FILE.h5
"""
import math
import os
import runpy
import sys

import h5py
import torch

gpt_loss = runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_gpt.py"))["gpt_loss"]

TOL = 1e-5
TIE = 1e-6


def signs(x):
    return torch.where(torch.signbit(x), -torch.ones_like(x), torch.ones_like(x))


class Ties:
    count = 0  # nonzero elements whose sign gridtrain's settled


def compress(c, k, residual_after, variant):
    """c (P·k,) or (k,) → (q, c − q): one scale per chunk of k (variant one-scale: per buffer).
    residual_after: gridtrain's residual after this compression, whose sign settles ties."""
    chunks = [c] if variant == "one-scale" else list(c.split(k))
    q = []
    for part in chunks:
        scale = float(torch.sqrt(part.double().square().sum() / part.numel()))
        q.append(signs(part) * scale)
    q = torch.cat(q)
    tie = c.abs() <= TIE * q.abs()
    Ties.count += int((tie & (c != 0)).sum())
    q = torch.where(tie, -signs(residual_after) * q.abs(), q)
    return q, c - q


def with_feedback(x, residual, residual_after, k, variant, side):
    """One error-compensated compression of x (side: worker or server): (q, new residual, c)."""
    off = variant == f"no-{side}-residual"
    c = x if off else x + residual
    q, e = compress(c, k, residual_after, variant)
    return q, torch.zeros_like(e) if off else e, c


def compressed_mean(momenta, worker, server, after, variant):
    """The two-phase compressed allreduce mean of the P workers' momenta (each (n,))."""
    P, n = len(momenta), momenta[0].numel()
    k = (n + P - 1) // P
    workers = [with_feedback(torch.cat([m, torch.zeros(P * k - n)]), worker[r], after["worker"][r], k, variant, "worker")
               for r, m in enumerate(momenta)]
    servers = [with_feedback(sum(q[j * k:(j + 1) * k] for q, _, _ in workers) / P, server[j], after["server"][j], k,
                             variant, "server") for j in range(P)]
    inputs = {"worker": torch.stack([c for _, _, c in workers]), "server": torch.stack([c for _, _, c in servers])}
    return (torch.cat([q for q, _, _ in servers])[:n], [e for _, e, _ in workers], [e for _, e, _ in servers], inputs)


def gradients(f, t, param, layout):
    """Each worker's loss and flat gradient (PyTorch's) at step t (1-based) from the flat parameters."""
    n_layer, n_head = int(f.attrs["n_layer"]), int(f.attrs["n_head"])
    idx, targets = torch.tensor(f["idx"][t - 1]), torch.tensor(f["targets"][t - 1])
    losses, grads = [], []
    for r in range(idx.shape[0]):
        w, at = {}, 0
        for name, shape in layout:
            size = math.prod(shape)
            w[name] = param[at:at + size].view(shape).clone().requires_grad_(True)
            at += size
        loss = gpt_loss(w, idx[r], targets[r], n_layer, n_head)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(torch.cat([w[name].grad.reshape(-1) for name, _ in layout]))
    return losses, grads


def state(f, t):
    return {key: torch.tensor(f[key][t]) for key in ("param", "exp_avg", "exp_avg_sq", "worker", "server")}


def rel(a, b, ref=None):
    """‖a − b‖ / ‖ref‖, ref = b unless given."""
    d = float((a - b).double().norm())
    return d / max(float((b if ref is None else ref).double().norm()), 1e-30) if d > 0 else 0.0


def step(f, t, before, after, grads, layout, variant):
    """The reference's state after step t from gridtrain's `before`."""
    b1, b2, eps, wd, lr = (float(f.attrs[k][0]) for k in ("beta1", "beta2", "eps", "weight_decay", "lr"))
    floor = 0.0 if variant == "no-floor" else v_floor(f)
    freeze = int(f.attrs["freeze_step"])
    m, v = before["exp_avg"].clone(), before["exp_avg_sq"].clone()
    worker, server = list(before["worker"]), list(before["server"])
    compressed, inputs = t > freeze, {}
    if not compressed or variant == "unfrozen":
        g = sum(grads) / len(grads)
        v = b2 * v + (1 - b2) * g * g
    if not compressed:
        m = b1 * m + (1 - b1) * g
        bc2 = 1 - b2 ** t
    else:
        m, worker, server, inputs = compressed_mean([b1 * m + (1 - b1) * g_r for g_r in grads], worker, server, after,
                                                    variant)
        bc2 = 1 - b2 ** (t if variant == "unfrozen" else freeze)
        if t == freeze + 1 and floor > 0:
            v = torch.clamp_min(v, floor * floor * bc2)
    decay = decay_of(layout, wd)
    p = before["param"] * (1 - lr * decay) - lr / (1 - b1 ** t) * m / (torch.sqrt(v) / math.sqrt(bc2) + eps)
    return ({"param": p, "exp_avg": m, "exp_avg_sq": v, "worker": torch.stack(worker), "server": torch.stack(server)},
            inputs)


def v_floor(f):
    return float(f.attrs["v_floor"][0]) if "v_floor" in f.attrs else 0.0


def decay_of(layout, wd):
    """(n,) the weight decay of each flat coordinate: wd on matrices, 0 on vectors."""
    return torch.cat([torch.full((math.prod(s),), wd if len(s) >= 2 else 0.0) for _, s in layout])


def largest_move(f, layout):
    """The largest |Δp| of one coordinate in a compressed step (weight decay taken out), and lr·max|m̂|/floor."""
    b1, lr, wd = (float(f.attrs[k][0]) for k in ("beta1", "lr", "weight_decay"))
    freeze, steps = int(f.attrs["freeze_step"]), f["loss"].shape[0]
    decay = decay_of(layout, wd)
    move = bound = 0.0
    for t in range(freeze + 1, steps + 1):
        before, after = torch.tensor(f["param"][t - 1]), torch.tensor(f["param"][t])
        move = max(move, float((after - before * (1 - lr * decay)).abs().max()))
        m_hat = float(torch.tensor(f["exp_avg"][t]).abs().max()) / (1 - b1 ** t)
        bound = max(bound, lr * m_hat / v_floor(f) if v_floor(f) > 0 else math.inf)
    return move, bound


def run(f, layout, variant, report):
    """The worst relative difference over every step and quantity, and where it is."""
    steps = f["loss"].shape[0]
    worst = (0.0, "")
    for t in range(1, steps + 1):
        before, after = state(f, t - 1), state(f, t)
        losses, grads = gradients(f, t, before["param"], layout)
        ours, inputs = step(f, t, before, after, [torch.tensor(g) for g in f["grad"][t - 1]], layout, variant)
        # A residual is the small difference c − q of the buffer c compressed and its 1-bit
        # image: its error is measured against c, as that of every other quantity against itself.
        diffs = {key: rel(ours[key], after[key], inputs.get(key)) for key in ours}
        diffs["loss"] = max(abs(a - b) / abs(b) for a, b in zip(losses, f["loss"][t - 1].tolist()))
        diffs["grad"] = max(rel(a, torch.tensor(b)) for a, b in zip(grads, f["grad"][t - 1]))
        key = max(diffs, key=diffs.get)
        if report and t in (1, int(f.attrs["freeze_step"]), int(f.attrs["freeze_step"]) + 1, steps):
            print(f"  step {t:3d}: " + ", ".join(f"{k} {d:.1e}" for k, d in diffs.items()))
        if diffs[key] > worst[0]:
            worst = (diffs[key], f"step {t}, {key}")
        if variant != "algorithm" and worst[0] > TOL:
            break
    return worst


def main(path):
    with h5py.File(path, "r") as f:
        text = f.attrs["layout"]
        text = text.decode() if isinstance(text, bytes) else text
        layout = [(name, [int(d) for d in dims.split("x")]) for name, dims in
                  (item.split(":") for item in text.split(";"))]
        n, P = f["param"].shape[1], f["worker"].shape[1]
        steps, freeze = f["loss"].shape[0], int(f.attrs["freeze_step"])
        print(f"1-bit Adam at dp = {P}: {n} parameters (chunks of {(n + P - 1) // P}), {steps} steps, freeze at {freeze}")
        worst, where = run(f, layout, "algorithm", report=True)
        elements = steps * (P + 1) * n
        print(f"worst relative difference {worst:.2e} ({where}); {Ties.count} tie(s) of {elements} compressed elements")
        ok = worst <= TOL and Ties.count < 1e-4 * elements
        variants = ["no-server-residual", "no-worker-residual", "one-scale", "unfrozen"]
        if v_floor(f) > 0:
            variants.append("no-floor")
        move, bound = largest_move(f, layout)
        print(f"eps {float(f.attrs['eps'][0]):g}, frozen sqrt(v) floor {v_floor(f):g}: the largest move of a coordinate "
              f"in a compressed step {move:.3e} (bound lr*max|m|/floor {bound:.3e})")
        ok = ok and move <= bound * (1 + TOL)
        for variant in variants:
            v_worst, v_where = run(f, layout, variant, report=False)
            caught = v_worst > TOL
            print(f"variant {variant}: {'fails' if caught else 'PASSES'} ({v_worst:.1e}, {v_where})")
            ok = ok and caught
    if steps - freeze < 40:
        print(f"FAIL: only {steps - freeze} steps past the freeze (40 needed)")
        ok = False
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
