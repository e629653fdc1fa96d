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
  - tokenizer FLAVOR             a llama on a SentencePiece corpus, exported: transformers' tokenizer
                                (AutoTokenizer, the fast path, and SentencePieceBackend, the slow
                                one) gives gridtrain's ids (its prepare's /train + /val tokens of
                                each text), no BOS/EOS, and decodes them back; FLAVOR is the model:
                                gridtrain (prepare --train-tokenizer; also greedy text against
                                `gridtrain generate`), user-prefix (--sp-model: dummy prefix,
                                user-defined and control symbols), user-nfkc (spm_train's defaults:
                                nmt_nfkc, extra spaces removed, no byte fallback), bpe (refused)
  - bad                         damaged safetensors files and configs are refused by name
  - tied FAMILY                 config.json ties the head but the file holds another lm_head.weight
                                (a fine-tune that untied it): transformers keeps the file's head, and
                                so does import for a llama (untied, with a note: the same logits); a
                                gpt2 is refused by name. Then (llama) a deck that leaves rope_theta
                                and norm_eps at their defaults is refused by checkpoint.init_from
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

    def train(self, name, keys, dp=1, tp=1, pp=1, steps=2, corpus=None):
        out = os.path.join(self.work, name)
        n = dp * tp * pp
        run([self.mpiexec, "-n", n, "--oversubscribe", self.gridtrain, "-i", "/dev/null",
             f"--data.path={corpus or self.corpus}", f"--output.dir={out}", "--output.overwrite=true",
             f"--checkpoint.dir={out}/ckpt", f"--train.steps={steps}", "--train.micro_batch=2",
             f"--train.global_batch={2 * dp * 2}", "--train.eval_interval=0", "--train.eval_samples=4",
             "--optim.warmup_steps=1", f"--grid.dp={dp}", f"--grid.tp={tp}", f"--grid.pp={pp}", *keys])
        return f"{out}/ckpt/step-{steps:08d}.h5"

    def logits(self, ckpt, ids):
        path = os.path.join(self.work, "ids.bin")
        ids.numpy().astype("<i8").tofile(path)
        out = os.path.join(self.work, "logits.bin")
        self.last_logits_run = run([self.lm_logits, ckpt, path, ids.shape[0], ids.shape[1], out]).stdout
        return torch.from_numpy(np.fromfile(out, dtype="<f4")).view(ids.shape[0], ids.shape[1], -1)


FAMILIES = {
    "gpt": ["--model.type=gpt", "--model.n_layer=2", "--model.n_head=4", "--model.n_embd=32", f"--model.block_size={T}"],
    "llama": ["--model.type=llama", "--model.n_layer=2", "--model.n_head=4", "--model.n_kv_head=2", "--model.n_embd=32",
              "--model.ffn_hidden=48", f"--model.block_size={T}", "--model.rope_theta=500000", "--model.norm_eps=1e-6"],
}
FAMILIES["llama-tied"] = FAMILIES["llama"] + ["--model.tie_embeddings=true"]
FAMILIES["llama-v257"] = FAMILIES["llama"] + ["--model.vocab_size=257"]  # not divisible by tp = 2

# Mixtures of experts as transformers' two classes: Mixtral (every layer MoE, renormalized top-k)
# and Qwen2-MoE (a shared expert, the softmax probabilities as chosen, a dense layer 0).
MOE = {
    "mixtral": ["--moe.experts=4", "--moe.top_k=2", "--moe.ffn_hidden=24"],
    "qwen2_moe": ["--moe.experts=4", "--moe.top_k=2", "--moe.ffn_hidden=24", "--moe.shared_ffn_hidden=40",
                  "--moe.norm_topk_prob=false", "--moe.layers=1"],
}


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


def check_round_trip(env, ckpt, hf_dir):
    """gridtrain import of `hf_dir`, the export of `ckpt`, gives ckpt's weights bit for bit."""
    back = hf_dir + "-back.h5"
    run([env.gridtrain, "import", hf_dir, "--output", back])
    a, b = model_weights(ckpt), model_weights(back)
    if a.keys() != b.keys() or any(a[k].tobytes() != b[k].tobytes() for k in a):
        sys.exit(f"FAILED: export -> import changed the weights ({sorted(a.keys() ^ b.keys())})")
    print("export -> import: the same weights, bit for bit")


def case_export(env, family, dp, tp, pp, zero):
    dp, tp, pp, zero = int(dp), int(tp), int(pp), int(zero)
    ckpt = env.train(f"export-{family}-{dp}{tp}{pp}{zero}", FAMILIES[family] + [f"--optim.zero_stage={zero}"], dp, tp, pp)
    hf_dir = os.path.join(env.work, f"hf-{family}-{dp}{tp}{pp}{zero}")
    run([env.gridtrain, "export", ckpt, "--format", "hf", "--output", hf_dir, "--max-shard-mb", "0.05"])
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(1))
    check_close(f"export {family} at (dp,tp,pp,zero) = ({dp},{tp},{pp},{zero})", env.logits(ckpt, ids), hf_logits(hf_dir, ids))
    check_round_trip(env, ckpt, hf_dir)


def random_hf_model(family, directory):
    """A transformers model of `family` with random weights saved to `directory`; the gridtrain keys of its deck."""
    import transformers
    torch.manual_seed(3)
    llama_keys = FAMILIES["llama"][:6] + [f"--model.block_size={T}", "--model.rope_theta=20000", "--model.norm_eps=1e-5"]
    llama_args = dict(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=T, rms_norm_eps=1e-5, rope_theta=20000.0,
                      tie_word_embeddings=False)
    moe_args = dict(num_experts_per_tok=2, router_aux_loss_coef=0.02)
    if family == "llama":
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**llama_args))
        keys = llama_keys
    elif family == "mixtral":  # the experts 24 wide: intermediate_size is theirs
        cfg = transformers.MixtralConfig(**{**llama_args, "intermediate_size": 24}, num_local_experts=4, **moe_args)
        model = transformers.MixtralForCausalLM(cfg)
        keys = [k for k in llama_keys if not k.startswith("--model.ffn_hidden")] + ["--model.ffn_hidden=24"]
        keys += MOE["mixtral"] + ["--moe.aux_loss_coeff=0.02"]
    elif family == "qwen2_moe":  # layer 0 dense (mlp_only_layers), layer 1 MoE with a shared expert
        cfg = transformers.Qwen2MoeConfig(**llama_args, num_experts=4, moe_intermediate_size=24,
                                          shared_expert_intermediate_size=40, norm_topk_prob=False, mlp_only_layers=[0],
                                          qkv_bias=False, **moe_args)
        model = transformers.Qwen2MoeForCausalLM(cfg)
        keys = llama_keys + MOE["qwen2_moe"] + ["--moe.aux_loss_coeff=0.02"]
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
    """Import of a save_pretrained model: logits (and an MoE's balancing losses) at (1,1,1), from bf16
    and fp16 files, loaded at (1,2,2) and saved; then a fine-tune at dp 2 (an MoE's at ep 2) learns."""
    hf_dir = os.path.join(env.work, f"random-{family}")
    keys = random_hf_model(family, hf_dir)
    moe = family in MOE
    ckpt = os.path.join(env.work, f"imported-{family}.h5")
    run([env.gridtrain, "import", hf_dir, "--output", ckpt])
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(2))
    want = hf_logits(hf_dir, ids)
    check_close(f"import {family} at (1,1,1)", env.logits(ckpt, ids), want)
    from transformers import AutoModelForCausalLM
    if moe:
        model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        with torch.no_grad():
            check_router_losses(env, model(ids, output_router_logits=True))
    # bf16 and fp16 files: widened exactly, so gridtrain's fp32 logits are transformers' on the
    # same weights loaded as fp32.
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
    tuned = env.train(f"tune-{family}", keys + [f"--checkpoint.init_from={ckpt}", "--optim.lr=3e-3"] +
                      (["--grid.ep=2"] if moe else []), 2, 1, 1, steps=20)
    with open(os.path.join(env.work, f"tune-{family}", "metrics.jsonl")) as f:
        losses = [json.loads(line)["loss"] for line in f if '"loss"' in line]
    print(f"fine-tune 20 steps at dp 2{', ep 2' if moe else ''}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
    if not (os.path.exists(tuned) and losses[-1] < losses[0]):
        sys.exit("FAILED: fine-tuning the imported model did not lower the loss")


def gridtrain_greedy(env, ckpt, prompt, n, *keys):
    """The n token ids `gridtrain generate --temperature 0` continues the byte-level prompt with."""
    p = subprocess.run([env.gridtrain, "generate", ckpt, "--prompt", prompt.decode(), "--temperature", "0",
                        "--max-new-tokens", str(n), *keys], capture_output=True)  # bytes: the model is byte-level
    if p.returncode != 0:
        sys.exit(f"FAILED: gridtrain generate\n{p.stderr.decode(errors='replace')}")
    return list(p.stdout[len(prompt):len(prompt) + n])


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
        ours = gridtrain_greedy(env, ckpt, prompt, 32, "--kv-cache", cache)
        print(f"gridtrain, KV cache {cache:5}: {bytes(ours)!r}")
        if ours != theirs:
            sys.exit("FAILED: greedy tokens differ")


def check_router_losses(env, out):
    """The last env.logits run's aux and z losses against transformers' `out` (output_router_logits = True):
    transformers' aux_loss, and the z-loss from its router logits (it computes none)."""
    fields = env.last_logits_run.split()
    ours = {"aux": float(fields[fields.index("aux_loss") + 1]), "z": float(fields[fields.index("z_loss") + 1])}
    router_logits = torch.cat([r.reshape(-1, r.shape[-1]).float() for r in out.router_logits])
    theirs = {"aux": float(out.aux_loss), "z": float(torch.logsumexp(router_logits, -1).square().mean())}
    for name in ("aux", "z"):
        err = abs(ours[name] - theirs[name]) / abs(theirs[name])
        print(f"{name} loss: gridtrain {ours[name]:.7f}, transformers {theirs[name]:.7f}, relative difference {err:.1e}")
        if not err <= TOL:
            sys.exit(f"FAILED: the {name} losses differ")


def export_refused(env, ckpt, hf_dir, needle, what):
    """gridtrain export of ckpt to hf_dir fails, naming `needle`, and writes nothing."""
    p = run([env.gridtrain, "export", ckpt, "--format", "hf", "--output", hf_dir], expect_ok=False)
    text = p.stdout + p.stderr
    if p.returncode == 0 or needle not in text or os.path.exists(hf_dir):
        sys.exit(f"FAILED: export of {what}: exit {p.returncode}, exists {os.path.exists(hf_dir)}, "
                 f"expected {needle!r} in:\n{text}")
    print(f"refused as expected, nothing written: {text.strip().splitlines()[-1]}")


def case_moe(env, flavor):
    """Export of an MoE llama trained at dp 2 under ZeRO 3: transformers' own class loads its per-expert
    tensors; the logits, the load-balancing loss (transformers' aux_loss with output_router_logits),
    the router z-loss and greedy generation agree with gridtrain's."""
    keys = [k for k in FAMILIES["llama"] if not k.startswith("--model.block_size")] + ["--model.block_size=64"]
    keys += MOE[flavor] + ["--optim.zero_stage=3", "--moe.z_loss_coeff=1e-3", "--optim.lr=1e-2"]
    ckpt = env.train(f"moe-{flavor}", keys, dp=2, steps=30)
    hf_dir = os.path.join(env.work, f"hf-moe-{flavor}")
    run([env.gridtrain, "export", ckpt, "--format", "hf", "--output", hf_dir])
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    want_class = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM"}[flavor]
    if type(model).__name__ != want_class:
        sys.exit(f"FAILED: transformers loaded {type(model).__name__}, not {want_class}")
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(ids, output_router_logits=True)
    check_close(f"export {flavor}: logits", env.logits(ckpt, ids), out.logits)
    check_router_losses(env, out)
    check_round_trip(env, ckpt, hf_dir)
    prompt = b"And God said"
    theirs = model.generate(torch.tensor([list(prompt)]), max_new_tokens=24, do_sample=False, pad_token_id=0)
    theirs = theirs[0, len(prompt):].tolist()
    ours = gridtrain_greedy(env, ckpt, prompt, 24)
    print(f"greedy, transformers: {bytes(theirs)!r}\ngreedy, gridtrain:    {bytes(ours)!r}")
    if ours != theirs:
        sys.exit("FAILED: greedy tokens differ")
    if flavor == "mixtral":  # a router transformers' classes do not compute is refused, nothing written
        ckpt = env.train("moe-sigmoid", keys + ["--moe.router=sigmoid", "--moe.expert_bias_rate=1e-3"], steps=1)
        export_refused(env, ckpt, os.path.join(env.work, "hf-moe-sigmoid"), "moe.router = sigmoid", "a sigmoid router")


# Text for the tokenizer checks: KJV sentences, then what tokenizers get wrong most often.
TOKENIZER_TEXTS = [
    "In the beginning God created the heaven and the earth.",
    "And God said, Let there be light: and there was light.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day.",
    "Ge1:1 In the beginning God created the heaven and the earth.\nGe1:2 And the earth was without form, and void;\n",
    "And Moses said unto God, Who am I, that I should go unto Pharaoh?",
    "   three leading spaces, two trailing  ",
    "multiple   spaces,\ta tab, and\n\nblank lines\n\n\n",
    "\n\nNewlines first",
    "Non-ASCII: café, naïve, Æsir, Straße — “quoted” ½ ﬁ ｆｕｌｌ 中文 Ελληνικά 😀 ¡sí!",
    "Names of pieces as text: <s> </s> <unk> <pad> <0x41> <0x0A> <ctl> [SEP] <b>bold</b> Lord",
]

SPM_FLAVORS = {  # spm_train options of a user's own model (--sp-model), and whether its round trip is exact
    "user-prefix": (["--normalization_rule_name=identity", "--add_dummy_prefix=true", "--remove_extra_whitespaces=false",
                     "--byte_fallback=true", "--user_defined_symbols=<b>,</b>,Lord", "--control_symbols=<ctl>,[SEP]"], True),
    "user-nfkc": ([], False),  # spm_train's defaults
    "bpe": (["--model_type=bpe", "--normalization_rule_name=identity", "--byte_fallback=true"], True),
}


def gridtrain_ids(env, model, text, tag, lossy):
    """gridtrain's own encoding of `text`: `prepare text` with the model, its train + val tokens."""
    txt, h5 = os.path.join(env.work, f"text-{tag}.txt"), os.path.join(env.work, f"text-{tag}.h5")
    with open(txt, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    run([env.gridtrain, "prepare", "text", "--input", txt, "--output", h5, "--tokenizer", "sentencepiece",
         "--sp-model", model, "--val-fraction", "0.5"] + (["--accept-lossy"] if lossy else []))
    with h5py.File(h5, "r") as f:
        return np.concatenate([f["train/tokens"][()], f["val/tokens"][()]]).astype(np.int64).tolist()


def case_tokenizer(env, flavor):
    import shutil
    import sentencepiece
    from transformers import AutoTokenizer
    from transformers.tokenization_utils_sentencepiece import SentencePieceBackend
    corpus_text = os.path.join(os.path.dirname(env.corpus), "ge-ex.txt")
    data = os.path.join(env.work, f"sp-{flavor}.h5")
    exact = True
    if flavor == "gridtrain":
        run([env.gridtrain, "prepare", "text", "--input", corpus_text, "--output", data, "--train-tokenizer",
             "--vocab-size", "512"])
    else:
        options, exact = SPM_FLAVORS[flavor]
        prefix = os.path.join(env.work, f"spm-{flavor}")
        run([shutil.which("spm_train") or sys.exit("FAILED: spm_train not found (Debian package sentencepiece)"),
             f"--input={corpus_text}", f"--model_prefix={prefix}", "--vocab_size=512", "--minloglevel=1", *options])
        run([env.gridtrain, "prepare", "text", "--input", corpus_text, "--output", data, "--tokenizer", "sentencepiece",
             "--sp-model", prefix + ".model"] + ([] if exact else ["--accept-lossy"]))
    keys = [k for k in FAMILIES["llama"] if not k.startswith("--model.block_size")] + ["--model.block_size=64"]
    generate = flavor == "gridtrain"  # trained until greedy decoding says something, as in case_generate
    steps = 300 if generate else 2
    ckpt = env.train(f"tok-{flavor}", keys + (["--optim.lr=1e-2"] if generate else []), steps=steps, corpus=data)
    hf_dir = os.path.join(env.work, f"hf-tok-{flavor}")
    if os.path.exists(hf_dir):
        shutil.rmtree(hf_dir)
    if flavor == "bpe":
        export_refused(env, ckpt, hf_dir, "model_type = bpe", "a BPE SentencePiece model")
        return
    run([env.gridtrain, "export", ckpt, "--format", "hf", "--output", hf_dir])
    model = os.path.join(hf_dir, "tokenizer.model")
    with h5py.File(data, "r") as f, open(model, "rb") as g:
        if f["tokenizer/model"][()].tobytes() != g.read():
            sys.exit("FAILED: the exported tokenizer.model is not the run's SentencePiece model")
    sp = sentencepiece.SentencePieceProcessor(model_file=model)
    fast = AutoTokenizer.from_pretrained(hf_dir)
    # transformers 5 ignores use_fast=False (AutoTokenizer always builds the tokenizers-library
    # tokenizer); its slow path is SentencePieceBackend, which runs SentencePiece itself.
    also_fast = AutoTokenizer.from_pretrained(hf_dir, use_fast=False)
    slow = SentencePieceBackend.from_pretrained(hf_dir)
    print(f"AutoTokenizer: {type(fast).__name__} (fast {fast.is_fast}); use_fast=False: {type(also_fast).__name__}; "
          f"slow: {type(slow).__name__} (fast {slow.is_fast})")
    if not fast.is_fast or slow.is_fast:
        sys.exit("FAILED: expected a fast AutoTokenizer and a slow SentencePieceBackend")
    failures, slow_decode_differs = [], 0
    for i, text in enumerate(TOKENIZER_TEXTS):
        ours = gridtrain_ids(env, model, text, f"{flavor}-{i}", not exact)
        got = {"sentencepiece": sp.encode(text), "fast": fast(text)["input_ids"],
               "fast, no special tokens": fast.encode(text, add_special_tokens=False),
               "use_fast=False": also_fast(text)["input_ids"], "slow": slow(text)["input_ids"],
               "slow, no special tokens": slow.encode(text, add_special_tokens=False)}
        if i == 0:
            print(f"{text!r}: gridtrain {len(ours)} ids {ours}")
        for name, ids in got.items():
            if ids != ours:
                failures.append(f"{text!r}: {name} gives {len(ids)} ids {ids}, gridtrain {len(ours)} {ours}")
        want = text if exact else sp.decode(ours)  # lossy: SentencePiece's (and gridtrain's) decoding
        back = fast.decode(ours)
        if back != want:
            failures.append(f"{text!r}: fast decode gives {back!r}, expected {want!r}")
        # Control pieces (<s>, </s>) are special tokens: dropped when asked, as SentencePiece does.
        wrapped = fast.decode([sp.bos_id()] + ours + [sp.eos_id()], skip_special_tokens=True)
        if back != wrapped:
            failures.append(f"{text!r}: fast decode with BOS/EOS skipped gives {wrapped!r}")
        if slow.sp_model.decode(ours) != want:
            failures.append(f"{text!r}: the slow tokenizer's SentencePiece decodes {slow.sp_model.decode(ours)!r}")
        slow_decode_differs += slow.decode(ours) != want
    print(f"{len(TOKENIZER_TEXTS)} texts: gridtrain's ids from fast, use_fast=False and slow tokenizers"
          f"{'' if exact else ' (lossy model: decode compared with SentencePiece decode)'}; {len(failures)} failures")
    # SentencePieceBackend.decode joins the pieces itself (byte pieces as their names, ends stripped):
    print(f"(SentencePieceBackend.decode differs from the text on {slow_decode_differs} of {len(TOKENIZER_TEXTS)}; "
          "transformers' generic slow decoding, not the export)")
    # Every line of the corpus against spm_encode: libsentencepiece, the library gridtrain links.
    with open(corpus_text, encoding="utf-8") as f:
        lines = f.read().splitlines()
    encoded = run([shutil.which("spm_encode") or sys.exit("FAILED: spm_encode not found (Debian package sentencepiece)"),
                   f"--model={model}", "--output_format=id", f"--input={corpus_text}"]).stdout.splitlines()
    line_failures = [l for l, e in zip(lines, encoded) if fast.encode(l, add_special_tokens=False) != [int(x) for x in e.split()]]
    print(f"{len(lines)} lines of Genesis-Exodus: fast ids == spm_encode's on {len(lines) - len(line_failures)}")
    if line_failures or len(encoded) != len(lines):
        failures.append(f"{len(line_failures)} corpus lines differ ({len(encoded)} encoded of {len(lines)})")
    if generate:
        from transformers import AutoModelForCausalLM
        prompt = "And God said"
        lm = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
        ids = fast(prompt, return_tensors="pt")["input_ids"]
        out = lm.generate(ids, max_new_tokens=24, do_sample=False, pad_token_id=0)
        theirs = prompt + fast.decode(out[0, ids.shape[1]:].tolist())
        p = subprocess.run([env.gridtrain, "generate", ckpt, "--prompt", prompt, "--temperature", "0",
                            "--max-new-tokens", "24"], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"FAILED: gridtrain generate\n{p.stderr}")
        print(f"greedy, transformers: {theirs!r}\ngreedy, gridtrain:    {p.stdout[:-1]!r}")
        if p.stdout != theirs + "\n":
            failures.append("greedy text differs")
    if failures:
        sys.exit("FAILED:\n  " + "\n  ".join(failures))


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
    # MoE configs: what gridtrain does not compute is refused from config.json, before any tensor.
    qwen = {**cfg, "model_type": "qwen2_moe", "num_experts": 4, "qkv_bias": False}
    mixtral = {**cfg, "model_type": "mixtral", "num_local_experts": 4}
    for name, config, message in [
            ("qkv-bias-default", {k: v for k, v in qwen.items() if k != "qkv_bias"}, "qkv_bias = true is not supported"),
            ("sliding", {**qwen, "use_sliding_window": True, "sliding_window": 8}, "sliding_window = 8 is not supported"),
            ("window", {**cfg, "sliding_window": 8}, "sliding_window = 8 is not supported"),
            ("layer-types", {**cfg, "layer_types": ["full_attention", "sliding_attention"]},
             "layer_types holds \"sliding_attention\", which is not supported"),
            ("sparse-step", {**qwen, "decoder_sparse_step": 0}, "decoder_sparse_step = 0; valid: >= 1"),
            ("jitter", {**mixtral, "router_jitter_noise": 0.1}, "router_jitter_noise = 0.1 is not supported")]:
        cases.append((variant(name, config=config, header={}, data=b""), message))
    import re
    for directory, message in cases:
        p = run([env.gridtrain, "import", directory, "--output", os.path.join(env.work, "bad.h5")], expect_ok=False)
        text = p.stdout + p.stderr
        if p.returncode == 0 or not re.search(message, text):
            sys.exit(f"FAILED: import {directory}: exit {p.returncode}, expected /{message}/ in:\n{text}")
        if os.path.exists(os.path.join(env.work, "bad.h5")):
            sys.exit("FAILED: a refused import left its output file")
        print(f"refused as expected: {os.path.basename(directory)}")


def case_tied(env, family):
    from safetensors.torch import load_file, save_file
    hf_dir = os.path.join(env.work, f"tied-{family}")
    keys = random_hf_model(family, hf_dir)
    config = json.load(open(os.path.join(hf_dir, "config.json")))
    config["tie_word_embeddings"] = True
    embedding = "model.embed_tokens.weight" if family == "llama" else "transformer.wte.weight"
    tensors = {}
    for name in sorted(os.listdir(hf_dir)):
        if name.endswith(".safetensors"):
            tensors.update(load_file(os.path.join(hf_dir, name)))
            os.remove(os.path.join(hf_dir, name))
    if os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")):
        os.remove(os.path.join(hf_dir, "model.safetensors.index.json"))
    torch.manual_seed(5)
    tensors["lm_head.weight"] = tensors[embedding] + 0.05 * torch.randn_like(tensors[embedding])
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(hf_dir, "model.safetensors"),
              metadata={"format": "pt"})
    json.dump(config, open(os.path.join(hf_dir, "config.json"), "w"))
    ckpt = os.path.join(env.work, f"tied-{family}.h5")
    p = run([env.gridtrain, "import", hf_dir, "--output", ckpt], expect_ok=False)
    text = p.stdout + p.stderr
    if family == "gpt2":
        if p.returncode == 0 or "lm_head.weight" not in text or "differs from transformer.wte.weight" not in text:
            sys.exit(f"FAILED: a GPT-2 with a head unlike its embedding was not refused by name:\n{text}")
        if os.path.exists(ckpt):
            sys.exit("FAILED: the refused import left its output file")
        print("gpt2: a head unlike the embedding is refused by name")
        return
    if p.returncode != 0 or "imported untied (model.tie_embeddings = false) with the file's head" not in text:
        sys.exit(f"FAILED: import did not keep the file's head, saying so:\n{text}")
    from transformers import AutoModelForCausalLM
    theirs = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    if not torch.equal(theirs.lm_head.weight.detach(), tensors["lm_head.weight"]):  # the premise: transformers keeps it
        sys.exit("FAILED: transformers no longer keeps the file's head under tie_word_embeddings; revisit import")
    ids = torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(4))
    check_close("import of a tied config with its own head", env.logits(ckpt, ids), hf_logits(hf_dir, ids))
    # The imported file records rope_theta 20000 and norm_eps 1e-5; a deck of the shape keys alone
    # (defaults 10000 and 1e-5) computes another model from these weights and is refused.
    shape_only = [k for k in keys if not k.startswith(("--model.rope_theta", "--model.norm_eps"))]
    p = run([env.mpiexec, "-n", 1, env.gridtrain, "-i", "/dev/null", f"--data.path={env.corpus}",
             f"--output.dir={env.work}/init-defaults", "--output.overwrite=true", "--train.steps=1",
             "--model.tie_embeddings=false", f"--checkpoint.init_from={ckpt}", *shape_only], expect_ok=False)
    text = p.stdout + p.stderr
    want = "model.rope_theta = 20000 in the checkpoint, 10000 in this run"
    if p.returncode == 0 or want not in text or "--model.rope_theta=20000" not in text:
        sys.exit(f"FAILED: init_from with the deck's default rope_theta was not refused naming both values:\n{text}")
    print("init_from: a deck with another rope_theta is refused, naming both values")


def main():
    case, *args = sys.argv[1:]
    env = Env(*args[:5])
    rest = args[5:]
    {"export": case_export, "import": case_import, "generate": case_generate, "tokenizer": case_tokenizer,
     "bad": case_bad, "tied": case_tied, "moe": case_moe}[case](env, *rest)
    print("OK")


if __name__ == "__main__":
    main()
