#!/usr/bin/env python3
"""The bring-your-own-corpus workflow end to end, with transformers at both ends (G21 §6).

  hf_workflow.py GRIDTRAIN LM_LOGITS MPIEXEC KJV_TEXT WORKDIR

  1. The `tokenizers` library trains a byte-level BPE on the KJV text, and transformers builds a
     small random Llama for it; both are saved as one model directory.
  2. `gridtrain import` keeps the weights and the tokenizer.
  3. `gridtrain prepare jsonl --tokenizer-json DIR --append-eod --format megatron` at np 2 writes
     two datasets of documents, one per chapter: Genesis and Exodus.
  4. gridtrain fine-tunes at (dp, tp, pp) = (2, 2, 1) from the import (checkpoint.init_from), on
     the blend "0.7 Genesis 0.3 Exodus" with the document mask, then resumes and goes on. The
     Megatron datasets record no tokenizer: the checkpoints carry the import's.
  5. `gridtrain export` writes a transformers directory: the tokenizer files come back byte for byte.
  6. transformers loads it: its logits equal gridtrain's (<= 1e-5 relative), and greedy generation
     gives the text of `gridtrain generate --temperature 0`.
Then the refusal: the import as checkpoint.init_from of a run on byte-level data is refused,
naming both tokenizers.
"""
import filecmp
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch

TOL = 1e-5
VOCAB, BLOCK = 600, 64
LLAMA = ["--model.type=llama", "--model.n_layer=2", "--model.n_head=4", "--model.n_kv_head=2", "--model.n_embd=32",
         "--model.ffn_hidden=48", f"--model.block_size={BLOCK}", "--model.rope_theta=10000", "--model.norm_eps=1e-5",
         f"--model.vocab_size={VOCAB}"]


def run(cmd, ok=True):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"FAILED: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def chapters(kjv):
    """{"Ge": [chapter text, ...], "Exo": [...]}: the verses of each chapter, one per line."""
    books = {}
    for line in open(kjv, encoding="utf-8"):
        ref, _, verse = line.rstrip("\n").partition(" ")
        book_chapter = ref.split(":")[0]
        book = book_chapter.rstrip("0123456789")
        books.setdefault(book, {}).setdefault(book_chapter, []).append(verse)
    return {book: ["\n".join(v) for v in chs.values()] for book, chs in books.items()}


def make_model(kjv, directory):
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([kjv], trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|endoftext|>"],
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(directory)
    torch.manual_seed(5)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=BLOCK,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    transformers.LlamaForCausalLM(cfg).save_pretrained(directory)


def train(env, name, keys, steps, restart=None):
    gridtrain, mpiexec, work = env
    out = os.path.join(work, name)
    p = run([mpiexec, "-n", 4, "--oversubscribe", gridtrain, "-i", "/dev/null", *LLAMA, f"--output.dir={out}",
             "--output.overwrite=true", f"--checkpoint.dir={out}/ckpt", "--checkpoint.interval=50",
             f"--train.steps={steps}", "--train.micro_batch=4", "--train.global_batch=8", "--train.eval_interval=0",
             "--optim.lr=1e-2", "--optim.warmup_steps=10", "--grid.dp=2", "--grid.tp=2", "--grid.pp=1", *keys,
             *(["--restart", restart] if restart else [])], ok=False)
    return p, f"{out}/ckpt/step-{steps:08d}.h5"


def main():
    gridtrain, lm_logits, mpiexec, kjv, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = (gridtrain, mpiexec, work)
    model_dir = os.path.join(work, "hf-model")
    make_model(kjv, model_dir)

    imported = os.path.join(work, "imported.h5")
    p = run([gridtrain, "import", model_dir, "--output", imported])
    print(p.stdout, end="")
    if "kept its tokenizer" not in p.stdout:
        sys.exit("FAILED: import did not say it kept the tokenizer")

    from transformers import AutoModelForCausalLM, AutoTokenizer
    auto = AutoTokenizer.from_pretrained(model_dir)
    eos = auto.eos_token_id
    prefixes = {}
    for book, texts in chapters(kjv).items():
        jsonl = os.path.join(work, f"{book}.jsonl")
        with open(jsonl, "w", encoding="utf-8") as f:
            for t in texts:
                f.write(json.dumps({"text": t}) + "\n")
        prefixes[book] = os.path.join(work, book)
        run([mpiexec, "-n", 2, "--oversubscribe", gridtrain, "prepare", "jsonl", "--input", jsonl, "--output",
             prefixes[book], "--format", "megatron", "--tokenizer-json", model_dir, "--append-eod"])
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        got = [d.tolist() for d in IndexedDataset(prefixes[book])]
        want = [auto(t, add_special_tokens=False).input_ids + [eos] for t in texts]
        if got != want:
            sys.exit(f"FAILED: {book}: the documents megatron-core reads differ from AutoTokenizer's ids")
        print(f"{book}: {len(texts)} chapters, megatron-core's documents == AutoTokenizer's ids + eos")

    keys = [f"--checkpoint.init_from={imported}", f"--data.blend=0.7 {prefixes['Ge']} 0.3 {prefixes['Exo']}",
            "--data.document_mask=true", f"--data.eod_token={eos}"]
    p, first = train(env, "tune", keys, 100)
    if p.returncode != 0 or "its tokenizer, hf" not in p.stdout:
        sys.exit(f"FAILED: the fine-tune from the import did not take its tokenizer\n{p.stdout[-3000:]}\n"
                 f"{p.stderr[-3000:]}")
    p, ckpt = train(env, "tune", keys[1:], 150, restart=first)
    if p.returncode != 0 or "its tokenizer, hf" not in p.stdout:
        sys.exit(f"FAILED: the resume did not keep the tokenizer\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    with open(os.path.join(work, "tune", "metrics.jsonl")) as f:
        losses = [json.loads(line)["loss"] for line in f if '"loss"' in line]
    print(f"fine-tune at (2,2,1), 150 steps on the blend with the document mask: "
          f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    if not losses[-1] < losses[0]:
        sys.exit("FAILED: fine-tuning did not lower the loss")

    hf_dir = os.path.join(work, "exported")
    run([gridtrain, "export", ckpt, "--format", "hf", "--output", hf_dir])
    names = [n for n in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
             if os.path.exists(os.path.join(model_dir, n))]
    changed = [n for n in names if not filecmp.cmp(os.path.join(model_dir, n), os.path.join(hf_dir, n), shallow=False)]
    if changed:
        sys.exit(f"FAILED: export changed the tokenizer files {changed}")
    print(f"export wrote the tokenizer back byte for byte: {', '.join(names)}")

    tok = AutoTokenizer.from_pretrained(hf_dir)
    lm = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32).eval()
    texts = chapters(kjv)["Exo"][:2]
    ids = torch.tensor([tok(t, add_special_tokens=False).input_ids[:BLOCK] for t in texts])
    ids_path, logits_path = os.path.join(work, "ids.bin"), os.path.join(work, "logits.bin")
    ids.numpy().astype("<i8").tofile(ids_path)
    run([lm_logits, ckpt, ids_path, ids.shape[0], ids.shape[1], logits_path])
    ours = torch.from_numpy(np.fromfile(logits_path, dtype="<f4")).view(ids.shape[0], ids.shape[1], -1)
    with torch.no_grad():
        theirs = lm(ids).logits
    err = float((ours - theirs).abs().max() / theirs.abs().max())
    print(f"logits (2, {BLOCK}, {VOCAB}): max |gridtrain - transformers| / max |transformers| = {err:.2e}")
    if not err <= TOL:
        sys.exit(f"FAILED: logits differ: {err:.2e} > {TOL}")

    prompt, n = "And Moses said", 24
    start = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    out = lm.generate(start, max_new_tokens=n, min_new_tokens=0, do_sample=False, pad_token_id=eos)
    new = out[0, start.shape[1]:].tolist()
    if len(new) < n and (not new or new[-1] != eos):
        sys.exit(f"FAILED: transformers stopped after {len(new)} tokens, not at the eos")
    p = run([gridtrain, "generate", ckpt, "--prompt", prompt, "--temperature", "0", "--max-new-tokens", len(new)])
    theirs_text = prompt + tok.decode(new)
    print(f"greedy, transformers: {theirs_text!r}\ngreedy, gridtrain:    {p.stdout[:-1]!r}")
    if p.stdout != theirs_text + "\n" or len(set(new)) < 3:
        sys.exit("FAILED: greedy text differs (or says nothing: fewer than 3 distinct tokens)")

    byte_data = os.path.join(os.path.dirname(kjv), "ge-ex.h5")
    p, _ = train(env, "bytes", [f"--checkpoint.init_from={imported}", f"--data.path={byte_data}"], 1)
    if p.returncode == 0 or not all(s in p.stderr + p.stdout for s in ("tokenizer hf", "prepared with bytes")):
        sys.exit(f"FAILED: init_from across tokenizers was not refused naming both\n{p.stdout[-2000:]}\n"
                 f"{p.stderr[-2000:]}")
    print("init_from of the import on byte-level data: refused, naming both tokenizers")


if __name__ == "__main__":
    main()
