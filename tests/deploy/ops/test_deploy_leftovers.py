"""What a power cut leaves in the install dir that no state file records: a release directory
half removed (a cut during the ``rm -rf`` of a rollback or a prune). Found by the emulated
board's power-cut campaign (tests/deploy/emulated/test_board_power_cuts.py)."""

from __future__ import annotations

import hashlib
import json
import shutil

from deploy_helpers import INSTALL, deploy


def test_a_half_removed_release_is_not_taken_for_the_release(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    base = root / INSTALL
    assert deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)[0] == 0
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=q25tok)
    assert code == 0, res
    b = res[0]["release"]
    kept = tmp_path / "b-copy"
    shutil.copytree(base / "releases" / b, kept, symlinks=True)
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], action="rollback")
    assert code == 0 and not (base / "releases" / b).exists(), res
    # the power went while rm -rf removed B: some of its files are gone, its release.json is not
    shutil.copytree(kept, base / "releases" / b, symlinks=True)
    (base / "releases" / b / "tokenizer.q25tokrt").unlink()
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=q25tok)
    assert code == 0 and res[0]["ok"] and res[0]["release"] == b, res
    release = base / "releases" / b
    for f in json.loads((release / "release.json").read_text())["files"]:
        assert hashlib.sha256((release / f["path"]).read_bytes()).hexdigest() == f["sha256"], f["path"]
