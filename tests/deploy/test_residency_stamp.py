"""The board side of residency (``residency.SCRIPT``) under the two shells boards have: the
"loaded" stamp is written through a fresh temporary (root never writes through a link planted
at the old `<stamp>.tmp` name) and makes the next load of the same table in this boot a no-op.
q25tok is a stand-in that reports success: the real load is tests/runtime/test_residency.py's."""

from __future__ import annotations

import subprocess

import pytest
from requirements import need_program

from q25deploy.deploy.residency import SCRIPT

SHELLS = {"dash": ["dash", "-c"], "busybox": ["busybox", "sh", "-c"]}


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_the_loaded_stamp_is_never_written_through_a_planted_link(tmp_path, shell):
    need_program(SHELLS[shell][0], "Debian: dash / busybox-static")
    cur, table = tmp_path / "current", tmp_path / "current" / "regions.tab"
    cur.mkdir()
    table.write_text("region q25-region0@100000000 0x100000000 0x200000 partitions/region_00.bin\n")
    q25tok = tmp_path / "q25tok"
    q25tok.write_text("#!/bin/sh\necho region q25-region0 loaded\n")
    q25tok.chmod(0o755)
    passwd, stamp = tmp_path / "passwd", tmp_path / ".q25deploy-loaded"
    passwd.write_text("root:x:0:0:root:/root:/bin/sh\n")
    (tmp_path / ".q25deploy-loaded.tmp").symlink_to(passwd)

    def load() -> str:
        r = subprocess.run(
            [
                *SHELLS[shell],
                SCRIPT,
                "sh",
                str(cur),
                str(q25tok),
                "load",
                str(table),
                "/dev/null",
                "/nonexistent",
                str(stamp),
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return r.stdout

    assert "loaded" in load()
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/sh\n" and stamp.is_file() and not stamp.is_symlink()
    assert load().strip() == "cached"  # the same table, the same boot
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".q25deploy-loaded",
        ".q25deploy-loaded.tmp",
        "current",
        "passwd",
        "q25tok",
    ]  # no temporary left
