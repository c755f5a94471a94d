"""Fixtures of the emulated-board tests (the boards themselves: tests/board_fixtures.py):
builds of other models and images to update the board with."""

from __future__ import annotations

from pathlib import Path

import pytest

from q25deploy.cli import main
from q25deploy.model.synthetic import write_model

VOCAB = Path(__file__).parents[2] / "data" / "ggml-vocab-qwen2.gguf"


@pytest.fixture(scope="session")
def build_b(tmp_path_factory) -> Path:
    """Another model with the same vocabulary and shapes (same regions), other weights."""
    d = tmp_path_factory.mktemp("build-b")
    write_model(d / "b.gguf", "tiny", str(VOCAB), seed=1)
    assert main(["build", "--target", "qemu", "--model", str(d / "b.gguf"), "--out", str(d / "qemu")]) == 0
    return d / "qemu"
