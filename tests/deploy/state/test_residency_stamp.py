"""The board side of residency (``residency.SCRIPT``) under the two shells boards have: the
"loaded" stamp is written through a fresh temporary (root never writes through a link planted
at the old `<stamp>.tmp` name) and makes the next load of the same table in this boot a no-op.
q25tok is a stand-in that reports success: the real load is tests/runtime/test_residency.py's."""

from __future__ import annotations

import subprocess

import pytest
from requirements import need_program

from q25deploy.deploy.state.residency import SCRIPT

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


def residency(shell: str, tmp_path, command: str = "load", stamp: str | None = None) -> subprocess.CompletedProcess:
    """SCRIPT on `tmp_path/current` with the image's q25tok (`tmp_path/image-q25tok`, a stand-in
    that reports success); a q25tok planted in `current/` writes `tmp_path/pwned` if run."""
    need_program(SHELLS[shell][0], "Debian: dash / busybox-static")
    cur = tmp_path / "current"
    cur.mkdir(exist_ok=True)
    (cur / "regions.tab").write_text("q25-region0@100000000 0x100000000 0x200000 region_00.bin 1 " + "0" * 64 + "\n")
    image = tmp_path / "image-q25tok"
    image.write_text("#!/bin/sh\necho region q25-region0@100000000 base 0x100000000 size 0x200000 loaded\n")
    planted = cur / "q25tok"
    planted.write_text(f'#!/bin/sh\ntouch {tmp_path}/pwned\nexec {image} "$@"\n')
    for q in (image, planted):
        q.chmod(0o755)
    argv = [str(cur), str(image), command, str(cur / "regions.tab"), "/dev/null", "/nonexistent", stamp or "-"]
    return subprocess.run([*SHELLS[shell], SCRIPT, "sh", *argv], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("shell", sorted(SHELLS))
@pytest.mark.parametrize("command", ["load", "verify"])
def test_the_q25tok_run_is_the_callers_never_one_found_in_current(tmp_path, shell, command):
    """Issue 33 (3): `status` and `smoke` ran `<current>/q25tok verify` (and a deploy's load
    `<current>/q25tok load`) whenever one was there, as root under --become: a file whoever can
    write the install dir controls. The script runs the q25tok it is given (the image's, or a
    private copy of the release's own whose digest the workstation checked: trusted_q25tok)."""
    r = residency(shell, tmp_path, command, str(tmp_path / ".q25deploy-loaded") if command == "load" else None)
    assert r.returncode == 0 and " loaded" in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "pwned").exists(), "ran the q25tok found in current/"


@pytest.mark.parametrize("shell", sorted(SHELLS))
def test_a_stamp_that_cannot_be_written_fails_the_load(tmp_path, shell):
    """Issue 33 (10): a directory planted at .q25deploy-loaded made the stamp write fail and the
    load still succeed (exit 0): the step fails, saying why."""
    stamp = tmp_path / ".q25deploy-loaded"
    stamp.mkdir()
    r = residency(shell, tmp_path, "load", str(stamp))
    assert r.returncode != 0, r.stdout + r.stderr
    assert stamp.is_dir()
