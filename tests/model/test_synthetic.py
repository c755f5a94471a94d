"""The synthetic-model command says what it wrote (a newcomer's first command printed nothing)."""

from __future__ import annotations

from pathlib import Path

from q25deploy.model.synthetic import main

VOCAB = Path(__file__).resolve().parent.parent / "data" / "ggml-vocab-qwen2.gguf"


def test_the_command_says_what_it_wrote(tmp_path, capsys):
    out = tmp_path / "tiny.gguf"
    main(["--preset", "tiny", "--vocab", str(VOCAB), str(out)])
    said = capsys.readouterr().out
    assert said == (
        f"wrote {out}: Qwen2.5-shaped tiny model, {out.stat().st_size:,} bytes (seed 0; inspect: q25deploy inspect {out})\n"
    )
