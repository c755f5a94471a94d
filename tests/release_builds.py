"""Builds for the qemu target that deploy and OTA tests share: A, B (other weights, the same
vocabulary) and C (another vocabulary), from tiny Qwen2.5-shaped models, and A2 (A's model with
another image alignment: a new tokenizer image for the same weights)."""

from __future__ import annotations

from pathlib import Path

from q25deploy.cli import main
from q25deploy.model.synthetic import qwen25_tokenizer, write_model
from q25deploy.resources import data_dir

VOCAB = Path(__file__).resolve().parent / "data" / "ggml-vocab-qwen2.gguf"


def shared_qemu_builds(tmp_path_factory) -> dict[str, Path]:
    """:func:`qemu_builds`, made once per test run (tests/shared_builds.py)."""
    from shared_builds import shared_in_place

    d = shared_in_place(tmp_path_factory, "qemu-builds", qemu_builds)
    return {name: d / name for name in "ABC"}


def qemu_builds(d: Path) -> dict[str, Path]:
    """Writes A.gguf, B.gguf, C.gguf into ``d`` and builds each into ``d/A`` ... for qemu, the
    forward record on every smoke prompt."""
    tok = qwen25_tokenizer(str(VOCAB))
    foreign = (list(tok[0]), tok[1], tok[2])
    foreign[0][151664] = b"<|not_qwen|>"
    out = {}
    for name, seed, tokenizer in (("A", 0, tok), ("B", 1, tok), ("C", 0, foreign)):
        gguf = d / f"{name}.gguf"
        write_model(gguf, "tiny", str(VOCAB), seed=seed, tokenizer=tokenizer)
        argv = ["build", "--target", "qemu", "--model", str(gguf), "--out", str(d / name), "--forward", "all"]
        assert main(argv) == 0
        out[name] = d / name
    return out


def shared_a2_build(tmp_path_factory) -> Path:
    """A's model built for a qemu board file whose image alignment is 64 KiB: the tokenizer
    image changes, the partitions do not (made once per test run)."""
    from shared_builds import shared_in_place

    model = shared_qemu_builds(tmp_path_factory)["A"].parent / "A.gguf"

    def a2(d: Path) -> None:
        board = d / "qemu-align.toml"
        board.write_text(
            (data_dir("targets") / "qemu.toml").read_text().replace("image_alignment = 4096", "image_alignment = 65536")
        )
        argv = ["build", "--target", "qemu", "--target-file", str(board), "--model", str(model), "--out", str(d / "A2")]
        argv += ["--forward", "all"]
        assert main(argv) == 0

    return shared_in_place(tmp_path_factory, "qemu-build-a2", a2) / "A2"
