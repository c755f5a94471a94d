#!/usr/bin/env python3
"""C runtime benchmark, side by side in one run on the same ≥ 1 MB mixed multilingual/code
corpus and the same Qwen2 vocabulary:

- `q25tok encode` (host build, -O2; whole command: map image, read, encode, print) MB/s,
  against tiktoken built from the same vocabulary (single thread, encode_ordinary on the
  already-decoded str) and the Python host codec; the aarch64 build under qemu-aarch64 is
  shown for reference (emulated, not a Cortex-A53's speed);
- image open time without and with the CRC pass, for the full Qwen2 image and a 1.4k-token
  image (open validates every id and offset at every open: linear in the vocabulary size),
  and the image loaded whole: mapped, as q25tok does when only it or root can write the file,
  and read into private memory, as it does otherwise (issue 44).

    python3 bench/bench_runtime.py [--mb 1.5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import tiktoken  # noqa: E402
from corpus import CORPUS  # noqa: E402
from minivocab import mini_vocab  # noqa: E402

from q25deploy.model.gguf import GGUFFile  # noqa: E402
from q25deploy.packer.runtime import build_runtime  # noqa: E402
from q25deploy.resources import runtime_library_sources, runtime_sources  # noqa: E402
from q25deploy.tokenizer.codec import Codec  # noqa: E402
from q25deploy.tokenizer.image.format import build_image  # noqa: E402
from q25deploy.tokenizer.image.reader import open_image  # noqa: E402
from q25deploy.tokenizer.vocab import vocab_from_gguf  # noqa: E402

VOCAB = ROOT / "tests" / "data" / "ggml-vocab-qwen2.gguf"
PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def mixed_corpus(target: int) -> bytes:
    """Python and C source (code) interleaved with CJK samples and the multilingual test
    corpus, in a fixed order, until `target` bytes."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [p.read_bytes() for p in sorted(stdlib.glob("*.py"))[:120]]
    code += [p.read_bytes() for p in sorted(Path("/usr/include").glob("*.h"))[:60]]
    code += [p.read_bytes() for p in sorted(runtime_sources().glob("*.c"))]
    text = [p.read_bytes() for p in sorted((stdlib / "test" / "cjkencodings").glob("*-utf8.txt"))]
    text += CORPUS
    out, i = [], 0
    size = 0
    while size < target:
        chunk = code[i % len(code)] + b"\n" + b"\n".join(text) + b"\n"
        out.append(chunk)
        size += len(chunk)
        i += 1
    return b"".join(out)[:target].decode("utf-8", "ignore").encode("utf-8")


def best_of(fn, n=3) -> float:
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=1.5, help="corpus size in MB (default 1.5)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = mixed_corpus(int(a.mb * 1e6))
        (tmp / "corpus.txt").write_bytes(corpus)
        with GGUFFile(VOCAB) as f:
            vocab = vocab_from_gguf(f)
        image = build_image(vocab)
        (tmp / "qwen2.q25tokrt").write_bytes(image.data)
        (tmp / "mini.q25tokrt").write_bytes(build_image(mini_vocab(VOCAB), alignment=64).data)
        build_runtime(tmp / "host")
        q25tok = tmp / "host" / "q25tok"
        mb = len(corpus) / 1e6

        def run_c(cmd):
            r = subprocess.run(
                [*cmd, "encode", str(tmp / "qwen2.q25tokrt"), str(tmp / "corpus.txt")], capture_output=True, check=True
            )
            return r.stdout

        c_ids = [int(x) for x in run_c([str(q25tok)]).split()]
        t_c = best_of(lambda: run_c([str(q25tok)]))
        enc = tiktoken.Encoding(
            "qwen2",
            pat_str=PATTERN,
            mergeable_ranks={vocab.raw[i]: i for i in range(len(vocab.raw)) if vocab.types[i] == 1},
            special_tokens={},
        )
        text = corpus.decode("utf-8")
        tk_ids = enc.encode_ordinary(text)
        t_tk = best_of(lambda: enc.encode_ordinary(text))
        codec = Codec(open_image(image.data))
        t0 = time.perf_counter()
        py_ids = codec.encode(corpus)
        t_py = time.perf_counter() - t0
        same = "yes" if c_ids == tk_ids == py_ids else "NO"
        rows = [
            ("q25tok encode (host, -O2)", f"{mb / t_c:8.1f} MB/s", f"{t_c * 1000:8.0f} ms"),
            ("tiktoken, same vocabulary, 1 thread", f"{mb / t_tk:8.1f} MB/s", f"{t_tk * 1000:8.0f} ms"),
            ("Python host codec (q25deploy)", f"{mb / t_py:8.2f} MB/s", f"{t_py * 1000:8.0f} ms"),
        ]
        if shutil.which("aarch64-linux-gnu-gcc") and shutil.which("qemu-aarch64"):
            build_runtime(tmp / "arm", cross="aarch64")
            qemu = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", "/usr/aarch64-linux-gnu", str(tmp / "arm" / "q25tok")]
            t_q = best_of(lambda: run_c(qemu), 1)
            rows.append(
                ("q25tok encode, aarch64 under qemu (emulated)", f"{mb / t_q:8.1f} MB/s", f"{t_q * 1000:8.0f} ms")
            )
        print(
            f"corpus: {len(corpus):,} bytes (code + CJK + multilingual), {len(c_ids):,} tokens; "
            f"ids identical C / tiktoken / Python: {same}"
        )
        w = max(len(r[0]) for r in rows)
        for name, speed, ms in rows:
            print(f"  {name:<{w}}  {speed}  {ms}")
        print(f"  q25tok vs tiktoken: {t_tk / t_c:.2f}x (goal >= 1x)")

        cc = shutil.which("cc")
        exe = tmp / "open_bench"
        src = runtime_sources()
        subprocess.run(
            [
                cc,
                "-std=c11",
                "-O2",
                "-I",
                str(src),
                str(ROOT / "bench" / "open_bench.c"),
                *map(str, runtime_library_sources()),
                "-o",
                str(exe),
            ],
            check=True,
        )
        print("image open (goal about 1 ms without CRC for Qwen2: checks 1-21 of docs/runtime-image.md):")
        for name, n_tokens in (("qwen2.q25tokrt", len(vocab.raw)), ("mini.q25tokrt", 1222)):
            out = subprocess.run([str(exe), str(tmp / name)], capture_output=True, text=True, check=True).stdout.split()
            size = (tmp / name).stat().st_size
            print(
                f"  {name:<15} {n_tokens:>7,} tokens {size / 1e6:6.2f} MB   open {float(out[1]) / 1000:7.2f} us"
                f"   with CRC pass {float(out[2]) / 1e6:7.2f} ms"
            )
            print(
                f"  {'':<15} open(2) + into memory + checks: mapped {float(out[4]) / 1e6:6.2f} ms"
                f"   read(2) into private memory {float(out[5]) / 1e6:6.2f} ms"
            )


if __name__ == "__main__":
    main()
