"""One image, models of two sizes (issue 28): a board booted once with a fixed reservation
(``build --reserve``) takes tiny and tiny-untied by deploy, each resident afterwards (read back
by QEMU from outside the guest), and a plan its device tree cannot hold is refused with 0 bytes
sent."""

from __future__ import annotations

from pathlib import Path

import pytest
from board_checks import q25, resident

from q25deploy.cli import main
from q25deploy.model.synthetic import write_model

pytestmark = pytest.mark.board
VOCAB = Path(__file__).parents[2] / "data" / "ggml-vocab-qwen2.gguf"


@pytest.fixture(scope="module")
def sized(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("sized")
    out = {}
    for preset, name, extra in (
        ("tiny", "small", ["--reserve", "256MiB"]),
        ("tiny-untied", "large", ["--reserve", "256MiB"]),
        ("tiny-untied", "own", []),
    ):
        if not (d / f"{preset}.gguf").exists():
            write_model(d / f"{preset}.gguf", preset, str(VOCAB))
        assert (
            main(["build", "--target", "qemu", "--model", str(d / f"{preset}.gguf"), "--out", str(d / name), *extra])
            == 0
        )
        out[name] = d / name
    return out


def test_one_fixed_reservation_takes_two_model_sizes(boot_board, sized, q25tok_aarch64, capsys, tmp_path):
    board = boot_board("dropbear", sized["small"] / "reserved-memory.dtsi")
    for build in (sized["small"], sized["large"]):
        code, res = q25(capsys, board.q25("deploy", build, "--strict", "--runtime-bin", str(q25tok_aarch64)))
        assert code == 0 and res[0]["ok"] and res[0]["residency"]["state"] == "resident", res
        assert not res[0]["smoke"]["warnings"], res
        assert resident(board, build, tmp_path)  # read back by QEMU, outside the guest
        code, res = q25(capsys, board.q25("status", build))
        assert code == 0 and res[0]["reserved"] is True and res[0]["residency"] == "resident", res
    # tiny-untied sized to itself needs another region than the image reserves: refused, nothing sent
    code, res = q25(capsys, board.q25("deploy", sized["own"], "--runtime-bin", str(q25tok_aarch64)))
    assert code == 13 and not res[0]["ok"] and res[0]["bytes_sent"] == 0 and res[0]["files_sent"] == 0, res
    assert "does not reserve 1 of the build's 1 region(s)" in res[0]["error"]
    assert "reserved-memory.dtsi" in res[0]["error"]
    assert resident(board, sized["large"], tmp_path)  # what was loaded stays
