"""``inspect`` shows a model's metadata; nothing from the model reaches the terminal raw."""

from __future__ import annotations

from q25deploy.cli import main
from q25deploy.model.synthetic import write_model


def test_control_characters_in_metadata_are_escaped(tmp_path, capsys, vocab_gguf):
    hostile = tmp_path / "hostile.gguf"
    write_model(hostile, "tiny", str(vocab_gguf), name="evil\x1b[2J\x1b]0;pwned\x07\nfake line\x9b31m")
    assert main(["inspect", str(hostile)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "evil\\x1b[2J\\x1b]0;pwned\\x07\\x0afake line\\x9b31m" in out
    assert not any(line.startswith("fake line") for line in out.splitlines())
