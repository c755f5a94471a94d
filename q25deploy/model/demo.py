"""The model `q25deploy build` uses without ``--model``: Ollama's ``qwen2.5:0.5b`` when it
is in the local store, otherwise the built-in demo model — the real Qwen2.5 tokenizer with
small synthetic weights in Qwen2.5's tensor layout, written deterministically (so builds
stay reproducible) from the vocabulary that ships with the package, once, into the cache."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..common import cache_dir as default_cache_dir
from ..errors import ModelSourceError, OutputError
from .source import ModelSource, resolve

DEFAULT_OLLAMA_MODEL = "qwen2.5:0.5b"
DEMO_VERSION = 2  # 2: finite block scales (a forward pass that computes)
DEMO_LICENSE = "apache-2.0"


def vocab_path() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "ggml-vocab-qwen2.gguf"


def demo_model_path(cache_dir: Path | None = None) -> Path:
    """The demo GGUF, written on first use (atomically) into the cache."""
    from .synthetic import write_model

    path = (cache_dir or default_cache_dir()) / "demo" / f"qwen2.5-demo-v{DEMO_VERSION}.gguf"
    if path.is_file():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".demo-", suffix=".gguf", dir=path.parent)
        os.close(fd)
        write_model(
            tmp,
            "tiny",
            str(vocab_path()),
            seed=DEMO_VERSION,
            license=DEMO_LICENSE,
            name="Qwen2.5 demo (q25deploy built-in, synthetic weights)",
        )
        os.replace(tmp, path)
    except OSError as e:
        raise OutputError(f"cannot write the demo model into {path.parent}: {e.strerror}") from None
    return path


def default_model() -> tuple[ModelSource, str]:
    """(source, a sentence saying which model was chosen and why)."""
    try:
        src = resolve(DEFAULT_OLLAMA_MODEL)
        return src, f"no --model given: using Ollama's {DEFAULT_OLLAMA_MODEL}"
    except ModelSourceError as e:
        why = str(e).split(" (")[0]
    path = demo_model_path()
    src = resolve(str(path))
    return src, (
        f"no --model given and Ollama's {DEFAULT_OLLAMA_MODEL} is not available ({why}): using the "
        "built-in demo model (real Qwen2.5 tokenizer, small synthetic weights)"
    )
