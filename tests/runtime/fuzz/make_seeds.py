#!/usr/bin/env python3
"""Regenerate the committed fuzz inputs: tests/fuzz/mini.q25tokrt (the reference image for
text mode) and the seed corpus tests/fuzz/corpus/ (mode byte + payload, see q25tok_fuzz.c).

    python3 tests/fuzz/make_seeds.py
"""

import hashlib
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent.parent), str(HERE.parent)]

from corpus import CORPUS  # noqa: E402
from minivocab import mini_vocab  # noqa: E402

from q25deploy.tokenizer.image.format import build_image  # noqa: E402


def main() -> None:
    image = build_image(mini_vocab(HERE.parent / "data" / "ggml-vocab-qwen2.gguf"), alignment=64).data
    (HERE / "mini.q25tokrt").write_bytes(image)
    out = HERE / "corpus"
    out.mkdir(exist_ok=True)
    for old in out.iterdir():
        old.unlink()
    seeds = [bytes([0]) + image, bytes([2]) + image, bytes([4]) + image]
    texts = CORPUS[:12] + [b"<|im_start|>user\nHi<|im_end|>", b"a\xffb\xc1\x81\xed\xa0\x80\xe4\xb8", b"[PAD] <tool_call>"]
    for i, t in enumerate(texts):
        seeds.append(bytes([1 | (4 if i % 2 else 0) | ((i % 8) << 4)]) + t)
    for s in seeds:
        (out / hashlib.sha1(s).hexdigest()).write_bytes(s)
    print(f"image {len(image)} bytes, {len(seeds)} seeds")


if __name__ == "__main__":
    main()
