from __future__ import annotations

import pinned_numerics  # noqa: F401  (first: OpenBLAS pinned before numpy loads)

# isort: split
from pathlib import Path

import pytest
from board_fixtures import (  # noqa: F401  (the emulated A53 board)
    _boards,
    board,
    board_client_key,
    board_machine,
    board_root,
    boot_board,
    devmem_guard,
    q25tok_aarch64,
    q25tok_aarch64_static,
)
from llama_reference.client import LlamaReference
from requirements import need_module_file

from q25deploy.model.gguf import GGUFFile
from q25deploy.model.synthetic import write_model
from q25deploy.tokenizer.codec import Codec
from q25deploy.tokenizer.image.format import build_image
from q25deploy.tokenizer.image.reader import open_image
from q25deploy.tokenizer.vocab import vocab_from_gguf

# tiers: the markers, time limits and tier times (tests/tiers.py); pytester: a pytest run inside a test
pytest_plugins = ["tiers", "pytester"]

DATA = Path(__file__).parent / "data"
VOCAB_GGUF = DATA / "ggml-vocab-qwen2.gguf"


def pytest_configure(config):
    """A run started in the background of a shell without job control (``cmd &``, nohup)
    inherits SIGINT ignored, and so would every child the Ctrl-C tests interrupt (Python installs
    no KeyboardInterrupt handler where SIGINT is ignored at its start): Python's handler here
    makes every child start with SIGINT's default."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def private_cache(tmp_path_factory):
    """Digest and tokenizer caches of the test run, never the user's ~/.cache."""
    import os

    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))


@pytest.fixture(scope="session")
def campaign() -> None:
    """A campaign's test (power cuts, crash boots, fuzzing, yocto-check-layer): in the
    ``campaign`` tier, at its CI size unless its own variable asks for more (docs/contributing.md)."""


@pytest.fixture(scope="module")
def llama_reference():
    """llama.cpp (llama-cpp-python) in a child process of this module's tests: a crash or hang
    there fails the test that called it and the next call starts a new child."""
    need_module_file("llama_cpp", "pip install '.[reference]' builds llama-cpp-python")
    ref = LlamaReference()
    yield ref
    ref.close()


@pytest.fixture(scope="session")
def vocab_gguf() -> Path:
    return VOCAB_GGUF


@pytest.fixture(scope="session")
def qwen2_vocab():
    with GGUFFile(VOCAB_GGUF) as f:
        return vocab_from_gguf(f)


@pytest.fixture(scope="session")
def qwen25_tiny(tmp_path_factory) -> Path:
    """A tiny Qwen2.5-shaped model with the real Qwen2.5 tokenizer (written once per run)."""
    from shared_builds import shared_in_place

    d = shared_in_place(
        tmp_path_factory, "qwen25-tiny", lambda d: write_model(d / "qwen25-tiny.gguf", "tiny", str(VOCAB_GGUF))
    )
    return d / "qwen25-tiny.gguf"


@pytest.fixture(scope="session")
def qwen25_vocab(qwen25_tiny):
    with GGUFFile(qwen25_tiny) as f:
        return vocab_from_gguf(f)


@pytest.fixture(scope="session")
def qwen2_image(qwen2_vocab):
    return build_image(qwen2_vocab)


@pytest.fixture(scope="session")
def qwen25_image(qwen25_vocab):
    return build_image(qwen25_vocab)


@pytest.fixture(scope="session")
def qwen2_codec(qwen2_image) -> Codec:
    return Codec(open_image(qwen2_image.data))


@pytest.fixture(scope="session")
def qwen25_codec(qwen25_image) -> Codec:
    return Codec(open_image(qwen25_image.data))


@pytest.fixture(scope="session")
def builds(tmp_path_factory, qwen25_tiny) -> dict[str, Path]:
    """`q25deploy build` of the tiny Qwen2.5 model for each built-in target (read-only), its
    forward record on every smoke prompt (`--forward all`)."""
    from shared_builds import shared_in_place

    from q25deploy.cli.app import main

    targets = ("kv260", "zcu104", "qemu")

    def make(d: Path) -> None:
        for t in targets:
            argv = ["build", "--target", t, "--model", str(qwen25_tiny), "--out", str(d / t), "--forward", "all"]
            assert main(argv) == 0

    d = shared_in_place(tmp_path_factory, "tiny-builds", make)
    return {t: d / t for t in targets}


@pytest.fixture(scope="session")
def content_caches(tmp_path_factory, qwen25_tiny) -> Path:
    """The caches of content (tokenizer assets, forward record, smoke ids) that a first build of
    the tiny model fills, for a test that wants a cold plan, stamp or digest cache without paying
    for the tokenizer's export and the reference pass again: see :func:`seed_content_caches`."""
    import os

    from shared_builds import shared_in_place

    from q25deploy.cli.app import main

    def make(d: Path) -> None:
        before = os.environ["XDG_CACHE_HOME"]
        os.environ["XDG_CACHE_HOME"] = str(d)
        try:
            argv = ["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(d / "out"), "--quiet"]
            assert main(argv) == 0
        finally:
            os.environ["XDG_CACHE_HOME"] = before

    return shared_in_place(tmp_path_factory, "content-caches", make) / "q25deploy"


@pytest.fixture
def seed_content_caches(content_caches):
    """``seed(xdg_cache_home)``: copies the tiny model's content caches there (only those: the
    plan, payload and digest caches stay empty)."""
    import shutil

    def seed(xdg: Path) -> None:
        for name in ("tokenizer", "forward", "smoke"):
            shutil.copytree(content_caches / name, xdg / "q25deploy" / name)

    return seed


@pytest.fixture(scope="session")
def q25tok(tmp_path_factory) -> Path:
    """The C runtime's q25tok built for this machine (once per run, shared by the workers)."""
    from requirements import need_program
    from shared_builds import runtime

    need_program("cc", "Debian: gcc")
    return runtime(tmp_path_factory) / "q25tok"
