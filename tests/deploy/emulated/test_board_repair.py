"""Issue 11, defect 3 on the emulated board: a partition file of a kept release rots on the
board's disk. The next deploy that links it loads it into reserved DDR, reads the region back,
finds it differs from the partition map, rolls back, hashes the kept files it links, sends the
damaged one again and deploys: the board repairs itself, and the result counts the bytes."""

from __future__ import annotations

import json

from board_checks import INSTALL, fresh, q25, resident


def test_a_rotten_kept_partition_is_found_by_the_load_and_sent_again(
    board, builds, build_b, q25tok_aarch64, capsys, tmp_path
):
    fresh(board)
    a = builds["qemu"]
    rt = ("--runtime-bin", str(q25tok_aarch64))
    code, res = q25(capsys, board.q25("deploy", a, *rt))
    assert code == 0, res
    release_a = res[0]["release"]
    assert q25(capsys, board.q25("deploy", build_b, *rt))[0] == 0  # A is kept as the rollback point
    part = json.loads((a / "partition_map.json").read_text())["regions"][0]["file"]
    kept = f"{INSTALL}/releases/{release_a}/{part}"
    board.sh(f"printf rot | dd of={kept} bs=1 seek=64 conv=notrunc 2>/dev/null")

    code, res = q25(capsys, board.q25("deploy", a, *rt))
    assert code == 0 and res[0]["ok"] and res[0]["release"] == release_a, res
    assert any("retried" in w for w in res[0]["warnings"]) and any(part in w for w in res[0]["warnings"])
    assert res[0]["bytes_sent"] >= (a / part).stat().st_size  # what went is said
    assert resident(board, a, tmp_path)
    sha = board.sh(f"sha256sum {kept}")[1].split()[0]
    assert sha == json.loads((a / "partition_map.json").read_text())["regions"][0]["sha256"]
