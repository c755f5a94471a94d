"""The last build in DIR is input (q25deploy/packer/previous.py): a file in it is reused (hard
-linked into the new build, its digest taken from the last manifest) only when it is this
user's regular file; in a shared folder, one another user owns is theirs to change after we
linked it (issue 44, item 5)."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from q25deploy.cli import main
from q25deploy.resources import data_dir


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a file to another user (chown)")
def test_a_file_another_user_owns_is_not_linked_into_the_new_build(
    tmp_path, qwen25_tiny, monkeypatch, seed_content_caches
):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    seed_content_caches(tmp_path / "cache")  # the content caches warm: not what is tested
    out = tmp_path / "b"
    argv = ["build", "--target", "kv260", "--model", str(qwen25_tiny), "--out", str(out), "--quiet"]
    assert main(argv) == 0
    theirs = out / "partitions" / "region_00.bin"
    os.chown(theirs, 65534, 65534)  # as if another user who can write DIR had put it there
    inode = theirs.stat().st_ino
    board = tmp_path / "kv260.toml"  # a changed input: a rebuild that reuses what it may
    board.write_text((data_dir("targets") / "kv260.toml").read_text().replace("port = 22", "port = 2200"))
    assert main([*argv, "--target-file", str(board)]) == 0
    new = (out / "partitions" / "region_00.bin").stat()
    assert new.st_ino != inode and new.st_uid == os.geteuid()  # written anew, not linked
    assert all(p.stat().st_uid == os.geteuid() for p in out.rglob("*"))
    for a in json.loads((out / "manifest.json").read_text())["artifacts"]:
        assert hashlib.sha256((out / a["path"]).read_bytes()).hexdigest() == a["sha256"], a["path"]
