#!/usr/bin/env python3
"""gridtrain's Hugging Face export and import proved against transformers itself.

  hf_check.py CASE GRIDTRAIN LM_LOGITS MPIEXEC CORPUS WORKDIR [ARGS...]

CASE (then its arguments):
  - export FAMILY DP TP PP ZERO   train a tiny FAMILY (gpt, llama, llama-tied, llama-v257) 2 steps at
                                that layout, export it, and check that transformers' logits equal
                                gridtrain's (<= 1e-5 relative) and that export -> import gives
                                bitwise the checkpoint's weights
  - import FAMILY               a transformers model (llama or gpt2) with random weights, saved with
                                save_pretrained (sharded; and in bf16 and fp16), imported:
                                gridtrain's logits equal transformers'; loaded at (1,2,2) it
                                saves the same weights; and
                                fine-tuning it 20 steps at dp 2 lowers the loss
  - generate FAMILY             greedy decoding of 32 tokens: `gridtrain generate --temperature 0`,
                                with and without its KV cache, and transformers' generate give
                                the same tokens
  - bad                         damaged safetensors files and configs are refused by name
"""
import json
import os
import struct
import subprocess
import sys

import h5py
import numpy as np
import torch

TOL = 1e-5
B, T = 2, 16


def run(cmd, expect_ok=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


class Env:
    def __init__(self, gridtrain, lm_logits, mpiexec, corpus, workdir):
        self.gridtrain, self.lm_logits, self.mpiexec, self.corpus, self.work = gridtrain, lm_logits, mpiexec, corpus, workdir
        os.makedirs(workdir, exist_ok=True)

    def train(self, name, keys, dp=1, tp=1, pp=1, steps=2):
        out = os.path.join(self.work, name)
        n = dp * tp * pp
        run([self.mpiexec, "-n", n, "--oversubscribe", self.gridtrain, "-i", "/dev/null",
             f"--data.path={self.corpus}", f"--output.dir={out}", "--output.overwrite=true",
             f"--checkpoint.dir={out}/ckpt", f"--train.steps={steps}", "--train.micro_batch=2",
             f"--train.global_batch={2 * dp * 2}", "--train.eval_interval=0", "--train.eval_samples=4",
             "--optim.warmup_steps=1", f"--grid.dp={dp}", f"--grid.tp={tp}", f"--grid.pp={pp}", *keys])
        return f"{out}/ckpt/step-{steps:08d}.h5"

    def logits(self, ckpt, ids):
        path = os.path.join(self.work, "ids.bin")
        ids.numpy().astype("<i8").tofile(path)
        out = os.path.join(self.work, "logits.bin")
        run([self.lm_logits, ckpt, path, ids.shape[0], ids.shape[1], out])
        return torch.from_numpy(np.fromfile(out, dtype="<f4")).view(ids.shape[0], ids.shape[1], -1)


FAMILIES = {
    "gpt": ["--model.type=gpt", "--model.n_layer=2", "--model.n_head=4", "--model.n_embd=32", f"--model.block_size={T}"],
    "llama": ["--model.type=llama", "--model.n_layer=2", "--model.n_head=4", "--model.n_kv_head=2", "--model.n_embd=32",
              "--model.ffn_hidden=48", f"--model.block_size={T}", "--model.rope_theta=500000", "--model.norm_eps=1e-6"],
}
FAMILIES["llama-tied"] = FAMILIES["llama"] + ["--model.tie_embeddings=true"]
FAMILIES["llama-v257"] = FAMILIES["llama"] + ["--model.vocab_size=257"]  # not divisible by tp = 2


def hf_logits(directory, ids):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    with torch.no_grad():
        return model(ids).logits


def check_close(name, got, want):
    err = float((got - want).abs().max() / want.abs().max())
    print(f"{name}: max |gridtrain - transformers| / max |transformers| = {err:.2e}")
    if not err <= TOL:
        sys.exit(f"FAILED: {name}: {err:.2e} > {TOL}")


def model_weights(path):
    with h5py.File(path, "r") as f:
        return {n: f["model"][n][()] for n in f["model"]}


def case_export(env, family, dp, tp, pp, zero):
    dp, tp, pp, zero = int(dp), int(tp), int(pp), int(zero)
    ckpt = env.train(f"export-{family}-{dp}{tp}{pp}{zero}", FAMILIES[family] + [f"--optim.zero_stage={zero}"], dp, tp, pp)
    hf_dir = os.path.join(env.work, f"hf-{family}-{dp}{tp}{pp}{zero}")
    run([env.gridtrain, "export", ckpt, "--format", "hf", "--output", hf_dir, "--max-shard-mb", "0.05"])
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(1))
    check_close(f"export {family} at (dp,tp,pp,zero) = ({dp},{tp},{pp},{zero})", env.logits(ckpt, ids), hf_logits(hf_dir, ids))
    back = os.path.join(env.work, f"back-{family}.h5")
    run([env.gridtrain, "import", hf_dir, "--output", back])
    a, b = model_weights(ckpt), model_weights(back)
    if a.keys() != b.keys() or any(a[k].tobytes() != b[k].tobytes() for k in a):
        sys.exit(f"FAILED: export -> import changed the weights ({sorted(a.keys() ^ b.keys())})")
    print("export -> import: the same weights, bit for bit")


def random_hf_model(family, directory):
    import transformers
    torch.manual_seed(3)
    if family == "llama":
        cfg = transformers.LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
                                       rms_norm_eps=1e-5, rope_theta=20000.0, tie_word_embeddings=False)
        model = transformers.LlamaForCausalLM(cfg)
        keys = FAMILIES["llama"][:6] + [f"--model.block_size={T}", "--model.rope_theta=20000", "--model.norm_eps=1e-5"]
    else:
        cfg = transformers.GPT2Config(vocab_size=256, n_positions=T, n_embd=32, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        model = transformers.GPT2LMHeadModel(cfg)
        keys = FAMILIES["gpt"]
    with torch.no_grad():  # biases and norms away from their initial 0 and 1, so that a dropped one shows
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.save_pretrained(directory, max_shard_size="20KB")
    return keys


def case_import(env, family):
    hf_dir = os.path.join(env.work, f"random-{family}")
    keys = random_hf_model(family, hf_dir)
    ckpt = os.path.join(env.work, f"imported-{family}.h5")
    run([env.gridtrain, "import", hf_dir, "--output", ckpt])
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(2))
    want = hf_logits(hf_dir, ids)
    check_close(f"import {family} at (1,1,1)", env.logits(ckpt, ids), want)
    # bf16 and fp16 files: widened exactly, so gridtrain's fp32 logits are transformers' on the
    # same weights loaded as fp32.
    from transformers import AutoModelForCausalLM
    for dtype in (torch.bfloat16, torch.float16):
        low_dir = f"{hf_dir}-{str(dtype)[6:]}"
        AutoModelForCausalLM.from_pretrained(hf_dir, dtype=dtype).save_pretrained(low_dir)
        low = os.path.join(env.work, f"imported-{family}-{str(dtype)[6:]}.h5")
        run([env.gridtrain, "import", low_dir, "--output", low])
        check_close(f"import {family} from {str(dtype)[6:]} files", env.logits(low, ids), hf_logits(low_dir, ids))
    # Loaded at (1,2,2) and saved after one step of a learning rate too small to move an fp32 weight.
    saved = env.train(f"init-{family}-122", keys + [f"--checkpoint.init_from={ckpt}", "--optim.lr=1e-30",
                                                   "--optim.min_lr=0"], 1, 2, 2, steps=1)
    check_close(f"import {family}, loaded at (1,2,2) and saved", env.logits(saved, ids), want)
    tuned = env.train(f"tune-{family}", keys + [f"--checkpoint.init_from={ckpt}", "--optim.lr=3e-3"], 2, 1, 1, steps=20)
    with open(os.path.join(env.work, f"tune-{family}", "metrics.jsonl")) as f:
        losses = [json.loads(line)["loss"] for line in f if '"loss"' in line]
    print(f"fine-tune 20 steps at dp 2: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if not (os.path.exists(tuned) and losses[-1] < losses[0]):
        sys.exit("FAILED: fine-tuning the imported model did not lower the loss")


def case_generate(env, family):
    # A context that holds the prompt and the new tokens: GPT-2's learned positions end at n_positions.
    keys = [k for k in FAMILIES[family] if not k.startswith("--model.block_size")] + ["--model.block_size=64"]
    # Trained until greedy decoding says something (a little-trained model repeats one byte,
    # which would hide a wrong position).
    ckpt = env.train(f"gen-{family}", keys + ["--optim.lr=1e-2"], steps=300)
    hf_dir = os.path.join(env.work, f"hf-gen-{family}")
    run([env.gridtrain, "export", ckpt, "--format", "hf", "--output", hf_dir])
    prompt = b"And God said"
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    out = model.generate(torch.tensor([list(prompt)]), max_new_tokens=32, do_sample=False, pad_token_id=0)
    theirs = out[0, len(prompt):].tolist()
    print(f"transformers:            {bytes(theirs)!r}")
    for cache in ("true", "false"):
        p = subprocess.run([env.gridtrain, "generate", ckpt, "--prompt", prompt.decode(), "--temperature", "0",
                            "--max-new-tokens", "32", "--kv-cache", cache], capture_output=True)
        if p.returncode != 0:
            sys.exit(f"FAILED: gridtrain generate\n{p.stderr.decode(errors='replace')}")
        ours = list(p.stdout[len(prompt):len(prompt) + 32])
        print(f"gridtrain, KV cache {cache:5}: {bytes(ours)!r}")
        if ours != theirs:
            sys.exit("FAILED: greedy tokens differ")


def write_safetensors(path, header, data):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def case_bad(env):
    good = os.path.join(env.work, "random-llama")
    if not os.path.exists(good):
        random_hf_model("llama", good)
    cfg = json.load(open(os.path.join(good, "config.json")))
    cases = []
    def variant(name, header=None, data=b"", config=None, raw=None):
        d = os.path.join(env.work, "bad-" + name)
        os.makedirs(d, exist_ok=True)
        json.dump(config or cfg, open(os.path.join(d, "config.json"), "w"))
        if raw is not None:
            open(os.path.join(d, "model.safetensors"), "wb").write(raw)
        else:
            write_safetensors(os.path.join(d, "model.safetensors"), header, data)
        return d
    e = {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}
    cases.append((variant("length", raw=struct.pack("<Q", 1 << 40) + b"{}"), "header length .* runs past the end"))
    cases.append((variant("truncated", {"model.norm.weight": {**e, "data_offsets": [0, 16]}}, b"\0" * 8),
                  "truncated: tensor 'model.norm.weight' ends at byte"))
    cases.append((variant("overlap", {"a": e, "b": {**e, "data_offsets": [8, 24]}}, b"\0" * 24), "overlap"))
    cases.append((variant("span", {"a": {**e, "data_offsets": [0, 12]}}, b"\0" * 16), "data_offsets span 12 bytes"))
    cases.append((variant("unknown", {"model.extra.weight": e}, b"\0" * 16),
                  "tensor 'model.extra.weight' is not a parameter"))
    cases.append((variant("shape", {"model.norm.weight": {**e, "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16),
                  "tensor 'model.norm.weight' has shape \\(4,\\), but config.json gives \\(32,\\)"))
    cases.append((variant("dtype", {"model.norm.weight": {"dtype": "I32", "shape": [32], "data_offsets": [0, 128]}},
                          b"\0" * 128), "model.norm.weight' is I32; valid: F32, BF16, F16"))
    cases.append((variant("missing", {"model.norm.weight": {"dtype": "F32", "shape": [32], "data_offsets": [0, 128]}},
                          b"\0" * 128), "is missing"))
    cases.append((variant("rope", config={**cfg, "rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4}},
                          raw=open(os.path.join(good, os.listdir(good)[0]), "rb").read()[:8] + b"{}"),
                  "rope_type = \"llama3\" is not supported"))
    cases.append((variant("bias", config={**cfg, "attention_bias": True}, header={}, data=b""),
                  "attention_bias = true is not supported"))
    cases.append((variant("type", config={**cfg, "model_type": "mistral"}, header={}, data=b""),
                  "model_type = \"mistral\" is not supported"))
    import re
    for directory, message in cases:
        p = run([env.gridtrain, "import", directory, "--output", os.path.join(env.work, "bad.h5")], expect_ok=False)
        text = p.stdout + p.stderr
        if p.returncode == 0 or not re.search(message, text):
            sys.exit(f"FAILED: import {directory}: exit {p.returncode}, expected /{message}/ in:\n{text}")
        if os.path.exists(os.path.join(env.work, "bad.h5")):
            sys.exit("FAILED: a refused import left its output file")
        print(f"refused as expected: {os.path.basename(directory)}")


def main():
    case, *args = sys.argv[1:]
    env = Env(*args[:5])
    rest = args[5:]
    {"export": case_export, "import": case_import, "generate": case_generate, "bad": case_bad}[case](env, *rest)
    print("OK")


if __name__ == "__main__":
    main()
