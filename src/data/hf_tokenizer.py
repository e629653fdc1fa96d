#!/usr/bin/env python3
"""gridtrain's Hugging Face tokenizer process (data/hf_tokenizer.cpp starts one per rank that
encodes or decodes): Hugging Face's own `tokenizers` library, not a re-implementation, spoken to
over stdin/stdout in little-endian frames.

  load    'J' u64 n, n bytes: tokenizer.json's text            -> status
  encode  'E' u32 count, count x (u64 n, n bytes of text)     -> status, count x (u32 k, k x i32)
  decode  'D' u32 k, k x i32                                    -> status, u64 n, n bytes of UTF-8
  status: u8 0 (done) | u8 1, u64 n, n bytes: the error message

Encoding adds no special tokens (BOS/EOS). Text that is not UTF-8 is decoded with U+FFFD for each bad byte (gridtrain refuses such text
unless told to accept it, text_fidelity.hpp). Decoding keeps special tokens and does not clean up
spaces: the text of exactly the ids.
"""
import struct
import sys

stdin, stdout = sys.stdin.buffer, sys.stdout.buffer


def take(n):
    data = stdin.read(n)
    if len(data) != n:
        sys.exit(0)  # gridtrain closed the socket: done
    return data


def number(fmt):
    return struct.unpack("<" + fmt, take(struct.calcsize(fmt)))[0]


def reply(*parts):
    stdout.write(b"\0" + b"".join(parts))
    stdout.flush()


def main():
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        sys.exit(f"gridtrain's Hugging Face tokenizer needs the `tokenizers` module ({e}) in {sys.executable}: "
                 "run scripts/install-deps, or point GRIDTRAIN_PYTHON at a Python that has it")
    tok = None
    while True:
        op = take(1)
        try:
            if op == b"J":
                tok = Tokenizer.from_str(take(number("Q")).decode())
                reply()
            elif op == b"E":
                texts = [take(number("Q")).decode("utf-8", errors="replace") for _ in range(number("I"))]
                out = []
                for e in tok.encode_batch(texts, add_special_tokens=False):
                    out.append(struct.pack(f"<I{len(e.ids)}i", len(e.ids), *e.ids))
                reply(*out)
            elif op == b"D":
                k = number("I")
                ids = list(struct.unpack(f"<{k}i", take(4 * k)))
                text = tok.decode(ids, skip_special_tokens=False).encode()
                reply(struct.pack("<Q", len(text)), text)
            else:
                sys.exit(f"gridtrain's Hugging Face tokenizer: unknown request {op!r}")
        except Exception as e:  # the tokenizer's own error, for gridtrain to report
            message = f"{type(e).__name__}: {e}".encode()
            stdout.write(b"\1" + struct.pack("<Q", len(message)) + message)
            stdout.flush()


main()
