"""Fixtures of the emulated-board tests (the boards themselves: tests/board_fixtures.py):
builds of other models and images to update the board with."""

from __future__ import annotations

from pathlib import Path

import pytest

from q25deploy.cli import main
from q25deploy.model.synthetic import qwen25_tokenizer, write_model
from q25deploy.resources import data_dir

VOCAB = Path(__file__).parents[2] / "data" / "ggml-vocab-qwen2.gguf"


@pytest.fixture(scope="session")
def build_b(tmp_path_factory) -> Path:
    """Another model with the same vocabulary and shapes (same regions), other weights."""
    d = tmp_path_factory.mktemp("build-b")
    write_model(d / "b.gguf", "tiny", str(VOCAB), seed=1)
    assert main(["build", "--target", "qemu", "--model", str(d / "b.gguf"), "--out", str(d / "qemu")]) == 0
    return d / "qemu"


@pytest.fixture(scope="session")
def build_a2(tmp_path_factory, qwen25_tiny) -> Path:
    """The qemu build's own model again, its tokenizer image laid out with another section
    alignment (a board-file override): a new image of the same vocabulary."""
    d = tmp_path_factory.mktemp("build-a2")
    target = d / "qemu.toml"
    target.write_text(
        (data_dir("targets") / "qemu.toml").read_text().replace("image_alignment = 4096", "image_alignment = 65536")
    )
    assert (
        main(
            [
                "build",
                "--target",
                "qemu",
                "--target-file",
                str(target),
                "--model",
                str(qwen25_tiny),
                "--out",
                str(d / "qemu"),
            ]
        )
        == 0
    )
    return d / "qemu"


@pytest.fixture(scope="session")
def build_c(tmp_path_factory) -> Path:
    """A model whose vocabulary differs from Qwen2.5's in one token."""
    d = tmp_path_factory.mktemp("build-c")
    tokens, types, merges = qwen25_tokenizer(str(VOCAB))
    tokens[151664] = b"<|not_qwen|>"
    write_model(d / "c.gguf", "tiny", str(VOCAB), tokenizer=(tokens, types, merges))
    assert main(["build", "--target", "qemu", "--model", str(d / "c.gguf"), "--out", str(d / "qemu")]) == 0
    return d / "qemu"
