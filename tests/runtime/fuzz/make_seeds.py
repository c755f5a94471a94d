#!/usr/bin/env python3
"""Regenerate the committed fuzz inputs: tests/runtime/fuzz/mini.q25tokrt (the reference image
for text mode) and the seed corpus tests/runtime/fuzz/corpus/ (mode byte + payload, see
q25tok_fuzz.c).

    python3 tests/runtime/fuzz/make_seeds.py
"""

import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[2]), str(HERE.parents[1])]  # the repository, tests/

from corpus import CORPUS  # noqa: E402
from minivocab import mini_vocab  # noqa: E402

from q25deploy.tokenizer.image.format import build_image  # noqa: E402


def main() -> None:
    image = build_image(mini_vocab(HERE.parents[1] / "data" / "ggml-vocab-qwen2.gguf"), alignment=64).data
    (HERE / "mini.q25tokrt").write_bytes(image)
    out = HERE / "corpus"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    # image modes: plain, CRC pass, parse_special; and with the CRC fix-ups (8: header, 16:
    # sections) so that mutations reach the section-table and content checks
    seeds = [bytes([m]) + image for m in (0, 2, 4, 8, 8 | 16, 2 | 8 | 16, 4 | 8 | 16)]
    texts = CORPUS[:12] + [
        b"<|im_start|>user\nHi<|im_end|>",
        b"a\xffb\xc1\x81\xed\xa0\x80\xe4\xb8",
        b"[PAD] <tool_call>",
    ]
    for i, t in enumerate(texts):
        seeds.append(bytes([1 | (4 if i % 2 else 0) | ((i % 8) << 4)]) + t)
    for s in seeds:
        (out / hashlib.sha1(s).hexdigest()).write_bytes(s)
    print(f"image {len(image)} bytes, {len(seeds)} seeds")


if __name__ == "__main__":
    main()
