"""Deploy, smoke, status, rollback against real OpenSSH sshd instances on loopback, the
board being a --remote-root under tmp_path and q25tok the host build; faults are real: a
TCP proxy that cuts the connection, a board whose `cat` corrupts what it writes, a q25tok
that gives wrong ids, unknown and changed host keys, a board that is down."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_helpers import deploy, older_q25tok, release_bytes
from release_builds import shared_a2_build
from release_modes import wrong_modes
from sshd import USER, CuttingProxy, SSHServer, free_port

from q25deploy.cli import main
from q25deploy.resources import data_dir


def test_deploy_smoke_status_redeploy_rollback(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    code, res, err = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0, err
    (r,) = res
    assert r["ok"] and r["smoke"]["ok"] and r["bytes_sent"] == release_bytes(models["A"], q25tok)
    assert {"host", "ok", "bytes_sent", "files_sent", "release", "smoke"} <= set(r)
    assert any("predates" in w for w in r["smoke"]["warnings"])  # no live device tree under the remote root
    names = [c["name"] for c in r["smoke"]["checks"]]
    assert "q25tok info" in names and sum(n.startswith("encode") for n in names) >= 7
    assert "partition sha256" not in names  # the deploy hashed every file as the board wrote it: not again
    release_a = r["release"]
    base = root / "lib" / "firmware" / "q25"
    assert os.readlink(base / "current") == f"releases/{release_a}"
    state = json.loads((base / ".q25deploy-state.json").read_text())
    assert state["current"] == release_a and state["releases"][release_a]["deployed_at"]

    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="status")
    assert code == 0 and res[0]["current"] == release_a and res[0]["consistent"]

    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)  # unchanged: nothing sent
    assert code == 0 and res[0]["bytes_sent"] == 0 and res[0]["files_sent"] == 0 and res[0]["smoke"]["ok"]

    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=q25tok)
    assert code == 0 and res[0]["ok"] and res[0]["previous"] == release_a
    assert res[0]["files_linked"] >= 1  # q25tok was already on the board
    release_b = res[0]["release"]

    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], action="rollback")
    assert code == 0 and res[0]["release"] == release_a
    assert os.readlink(base / "current") == f"releases/{release_a}"
    assert not (base / "releases" / release_b).exists()
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="smoke")
    assert code == 0 and res[0]["smoke"]["ok"]
    assert "partition sha256" in [c["name"] for c in res[0]["smoke"]["checks"]]  # standalone: the full check
    # nothing was written outside the install path under the remote root
    assert {p.relative_to(root).parts[:3] for p in root.rglob("*") if p.is_file()} == {("lib", "firmware", "q25")}


def test_a_release_has_one_mode_whatever_the_login_umask(tmp_path, capsys, ssh, models, q25tok):
    """Files 0644, q25tok and directories 0755, as the layer's recipe and the OTA engines
    install them (tests/ota/test_ota_real_*.py), even where the board's login umask is 077."""
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    (wrappers / "sh").write_text('#!/bin/sh\numask 077\nexec /bin/sh "$@"\n')
    (wrappers / "sh").chmod(0o755)
    board = SSHServer(tmp_path / "umask077", ssh["key"], env_path=f"{wrappers}:/usr/bin:/bin")
    root = tmp_path / "board"
    try:
        for build in (models["A"], models["B"]):  # B links the q25tok A sent
            code, res, err = deploy(capsys, ssh, board, root, build, runtime=q25tok)
            assert code == 0 and res[0]["ok"], err
            release = root / "lib" / "firmware" / "q25" / "releases" / res[0]["release"]
            assert (release / "q25tok").is_file() and wrong_modes(release) == {}, wrong_modes(release)
            for made in (release.parent, release.parents[1]):  # releases/ and the install dir deploy made
                assert oct(made.stat().st_mode & 0o777) == oct(0o755), made
    finally:
        board.stop()


@pytest.mark.parametrize("transfer", ["paramiko", "openssh"])
def test_cut_connection_leaves_the_current_release_and_a_later_run_completes(
    tmp_path, capsys, ssh, models, q25tok, transfer
):
    """The proxy cuts each connection after 3 MiB: the session's, or ssh's carrying the image."""
    srv, root = ssh["servers"][1], tmp_path / "board"
    assert deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)[0] == 0
    kh = srv.known_hosts(tmp_path / "kh")
    proxy = CuttingProxy(srv.port, limit=3 << 20)
    try:
        kh.write_text(srv.host_line.replace(f"]:{srv.port}", f"]:{proxy.port}") + "\n")
        argv = [
            "deploy",
            "--target",
            "qemu",
            "--host",
            f"{USER}@127.0.0.1:{proxy.port}",
            "--build",
            str(models["B"]),
            "--identity",
            str(ssh["key"]),
            "--known-hosts",
            str(kh),
            "--remote-root",
            str(root),
            "--runtime-bin",
            str(q25tok),
            "--transfer",
            transfer,
            "--json",
            "--allow-unreserved",
        ]
        capsys.readouterr()
        assert main(argv) == 13
        res = json.loads(capsys.readouterr().out)
        assert proxy.cut.is_set() and not res[0]["ok"] and "connection lost while uploading" in res[0]["error"], res
    finally:
        proxy.close()
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="smoke")  # the old release is intact
    assert code == 0 and res[0]["smoke"]["ok"]
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=q25tok)
    assert code == 0 and res[0]["ok"]
    assert not list((root / "lib" / "firmware" / "q25" / "releases").glob(".incoming-*"))


# a board whose RAM (or NIC, below SSH's MAC) flips one bit in any input stream of more than
# 1 MiB: every process of its sessions reads standard input through this read()
FLIP_READS = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>
static unsigned long long seen;
ssize_t read(int fd, void *buf, size_t n)
{
    static ssize_t (*real)(int, void *, size_t);
    if (!real)
        real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    ssize_t r = real(fd, buf, n);
    const unsigned long long at = 1 << 20;
    if (fd == 0 && r > 0 && seen <= at && at < seen + (unsigned long long)r)
        ((unsigned char *)buf)[at - seen] ^= 1;
    if (fd == 0 && r > 0)
        seen += (unsigned long long)r;
    return r;
}
"""


@pytest.mark.parametrize("receiver", ["q25tok receive", "q25tok receive through ssh", "tee into sha256"])
def test_corrupted_upload_is_caught_by_the_board(tmp_path, capsys, ssh, models, q25tok, receiver):
    """The receiver writes and hashes the bytes it got, and the digest gives them away: the
    release's q25tok receiving (from the session, or from OpenSSH's ssh), and the shell's tee
    (the board's q25tok predates receive)."""
    good, root = ssh["servers"][2], tmp_path / "board"
    runtime = q25tok if receiver.startswith("q25tok receive") else older_q25tok(tmp_path, q25tok)
    transfer = ("--transfer", "openssh" if receiver.endswith("ssh") else "paramiko")
    assert deploy(capsys, ssh, good, root, models["A"], runtime=runtime)[0] == 0
    releases = root / "lib/firmware/q25/releases"
    before = sorted(p.name for p in releases.iterdir())
    shim = tmp_path / "flip_reads.so"
    (tmp_path / "flip_reads.c").write_text(FLIP_READS)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "flip_reads.c"), "-ldl"], check=True)
    bad = SSHServer(tmp_path / "bad", ssh["key"], env={"LD_PRELOAD": str(shim)})
    try:
        code, res, _ = deploy(capsys, ssh, bad, root, models["B"], *transfer, runtime=runtime)
        assert code == 13 and "verify failed" in res[0]["error"], res
    finally:
        bad.stop()
    assert sorted(p.name for p in releases.iterdir()) == before  # staging dropped, nothing promoted
    code, res, _ = deploy(capsys, ssh, good, root, models["A"], action="status")
    assert res[0]["current"] == json.loads((root / "lib/firmware/q25/.q25deploy-state.json").read_text())["current"]
    code, res, _ = deploy(capsys, ssh, good, root, models["A"], action="smoke")
    assert code == 0 and res[0]["smoke"]["ok"]


def test_failing_smoke_test_rolls_back(tmp_path, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][0], tmp_path / "board"
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    release_a = res[0]["release"]
    src = tmp_path / "liar.c"  # a q25tok whose ids are wrong
    src.write_text(
        "#include <stdio.h>\n#include <string.h>\nint main(int c, char **v) {\n"
        '  if (c > 1 && !strcmp(v[1], "encode")) { puts("1 2 3"); return 0; }\n'
        '  puts("fingerprint ok"); return 0; }\n'
    )
    liar = tmp_path / "q25tok"
    subprocess.run(["cc", str(src), "-o", str(liar)], check=True)
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=liar)
    assert code == 13 and res[0]["rolled_back"] and not res[0]["smoke"]["ok"], res
    base = root / "lib" / "firmware" / "q25"
    assert os.readlink(base / "current") == f"releases/{release_a}"
    assert json.loads((base / ".q25deploy-state.json").read_text())["current"] == release_a


def liar_q25tok(tmp_path: Path) -> Path:
    """A q25tok whose ids are wrong: every smoke test with it fails."""
    src = tmp_path / "liar.c"
    src.write_text(
        "#include <stdio.h>\n#include <string.h>\nint main(int c, char **v) {\n"
        '  if (c > 1 && !strcmp(v[1], "encode")) { puts("1 2 3"); return 0; }\n'
        '  puts("fingerprint ok"); return 0; }\n'
    )
    liar = tmp_path / "liar" / "q25tok"
    liar.parent.mkdir()
    subprocess.run(["cc", str(src), "-o", str(liar)], check=True)
    return liar


def test_a_failed_first_release_is_removed_and_never_becomes_previous(tmp_path, capsys, ssh, models, q25tok):
    """A first deploy whose smoke test fails has nothing to roll back to (issue 33, item 11):
    the failed release leaves the board (was: it stayed current, the next good deploy recorded
    it as previous, and rollback returned to a release that never passed its smoke test)."""
    srv, root = ssh["servers"][0], tmp_path / "board"
    base = root / "lib" / "firmware" / "q25"
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], runtime=liar_q25tok(tmp_path))
    failed = res[0]["release"]
    assert code == 13 and not res[0]["smoke"]["ok"] and not res[0]["rolled_back"], res
    assert f"removed {failed}" in res[0]["error"], res
    assert not (base / "current").is_symlink() and not (base / "releases" / failed).exists()
    assert json.loads((base / ".q25deploy-state.json").read_text())["current"] is None
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0 and res[0]["previous"] is None, res
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], action="rollback")
    assert code == 13 and "no previous release" in res[0]["error"], res
    assert os.listdir(base / "releases") == [os.readlink(base / "current").split("/")[1]]


def test_the_smoke_test_expects_the_ids_the_build_recorded(tmp_path, capsys, ssh, models, q25tok):
    """The deploy compares the board with the build's smoke_ids.json (no host codec is read):
    a record that disagrees with the board fails the smoke test and rolls back."""
    srv, root = ssh["servers"][0], tmp_path / "board"
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    release_a = res[0]["release"]
    b = tmp_path / "B"
    shutil.copytree(models["B"], b)
    record = json.loads((b / "smoke_ids.json").read_text())
    record["prompts"][3]["ids"][-1] += 1
    (b / "smoke_ids.json").write_text(json.dumps(record))
    code, res, _ = deploy(capsys, ssh, srv, root, b, runtime=q25tok)
    assert code == 13 and res[0]["rolled_back"], res
    assert [c["name"] for c in res[0]["smoke"]["checks"] if not c["ok"]] == ["encode prompt 3"]
    assert os.readlink(root / "lib" / "firmware" / "q25" / "current") == f"releases/{release_a}"


def test_unknown_and_changed_host_keys_are_refused(tmp_path, capsys, ssh, models, q25tok):
    srv, other, root = ssh["servers"][0], ssh["servers"][1], tmp_path / "board"
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], known_hosts=kh, runtime=q25tok)
    assert code == 13 and "unknown host key" in res[0]["error"] and not root.exists()
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], "--trust-new-host", known_hosts=kh, runtime=q25tok)
    assert code == 0 and srv.host_line.split(" ", 1)[1] in kh.read_text()
    changed = tmp_path / "changed"  # another server's key recorded for this port
    changed.write_text(other.host_line.replace(f"]:{other.port}", f"]:{srv.port}") + "\n")
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], "--trust-new-host", known_hosts=changed, runtime=q25tok)
    assert code == 13 and "CHANGED" in res[0]["error"]


def test_tokenizer_only_update(tmp_path, tmp_path_factory, capsys, ssh, models, q25tok):
    srv, root = ssh["servers"][1], tmp_path / "board"
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], runtime=q25tok)
    assert code == 0 and [c["name"] for c in res[0]["smoke"]["checks"] if c["name"].startswith("forward")] == [
        "forward prompt 0"
    ]
    code, res, _ = deploy(capsys, ssh, srv, root, models["C"], "--tokenizer-only", runtime=q25tok)
    assert code == 13 and "vocabulary fingerprint" in res[0]["error"]
    # the same vocabulary laid out with another section alignment: a new image, same model
    a2 = shared_a2_build(tmp_path_factory)
    code, res, _ = deploy(capsys, ssh, srv, root, a2, "--tokenizer-only", runtime=q25tok)
    assert code == 0 and res[0]["ok"]
    # the weights did not change, but an unreserved board's partition files were not hashed
    # again (a quick smoke): the forward pass runs from them (tests/deploy/ops/test_smoke_forward.py:
    # from resident regions it is not run again)
    forward = [c["name"] for c in res[0]["smoke"]["checks"] if c["name"].startswith("forward")]
    assert forward == ["forward prompt 0"] and "release" not in res[0]["smoke"]["forward"], res
    image = a2 / "tokenizer" / "tokenizer.q25tokrt"
    manifest = a2 / "tokenizer" / "tokenizer_runtime_image_manifest.json"
    assert res[0]["bytes_sent"] == image.stat().st_size + manifest.stat().st_size  # a few MB, no partitions
    assert res[0]["files_linked"] >= 2
    # the build of another model with the same vocabulary (issue 11, defect 1): only its image
    # travels, and the smoke test checks the board's partitions against the board's own
    # release, not against the other model's partition map
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], "--tokenizer-only", runtime=q25tok)
    assert code == 0 and res[0]["ok"] and not res[0]["rolled_back"], res[0]
    part = json.loads((models["A"] / "partition_map.json").read_text())["regions"][0]["file"]
    base = root / "lib" / "firmware" / "q25" / "current"
    assert (base / part).read_bytes() == (models["A"] / part).read_bytes() != (models["B"] / part).read_bytes()
    code, res, _ = deploy(capsys, ssh, srv, root, models["B"], action="smoke")
    assert code == 0 and res[0]["ok"], res[0]


def test_fleet_with_one_board_down(tmp_path, capsys, ssh, models, q25tok):
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(s.host_line + "\n" for s in ssh["servers"]))
    down = free_port()
    hosts = tmp_path / "hosts"
    hosts.write_text(
        "# the lab\n"
        + "".join(f"{USER}@127.0.0.1:{s.port}\n" for s in ssh["servers"])
        + f"{USER}@127.0.0.1:{down}  # switched off\n"
    )
    capsys.readouterr()
    code = main(
        [
            "deploy",
            "--target",
            "qemu",
            "--hosts-file",
            str(hosts),
            "--build",
            str(models["A"]),
            "--identity",
            str(ssh["key"]),
            "--known-hosts",
            str(kh),
            "--remote-root",
            str(tmp_path / "fleet" / "{port}"),
            "--runtime-bin",
            str(q25tok),
            "--jobs",
            "2",
            "--json",
            "--allow-unreserved",
        ]
    )
    res = json.loads(capsys.readouterr().out)
    assert code == 13 and len(res) == 4
    ok = [r for r in res if r["ok"]]
    assert len(ok) == 3 and all(r["smoke"]["ok"] for r in ok)
    (failed,) = [r for r in res if not r["ok"]]
    assert failed["host"].endswith(f":{down}") and "cannot connect" in failed["error"]
    assert len({r["release"] for r in ok}) == 1 and all(r["bytes_sent"] > 0 for r in ok)
    for s in ssh["servers"]:  # each board its own root
        assert (tmp_path / "fleet" / str(s.port) / "lib" / "firmware" / "q25" / "current").is_symlink()


def test_live_device_tree_check(tmp_path, capsys, ssh, models, q25tok):
    """The board's device tree and /dev/mem are system paths, not under --remote-root (which
    moves only the install directory): a board file says where this test's stand-ins are."""
    srv, root = ssh["servers"][2], tmp_path / "board"
    live, mem_file = tmp_path / "live-dt", tmp_path / "physmem"
    board = tmp_path / "qemu-here.toml"
    board.write_text(
        (data_dir("targets") / "qemu.toml")
        .read_text()
        .replace('arch = "aarch64"', f'arch = "aarch64"\ndevice_tree = "{live}"\nmemory_device = "{mem_file}"')
    )
    pmap = json.loads((models["A"] / "partition_map.json").read_text())
    for r in pmap["regions"]:  # a running image that has our reserved memory
        node = live / "reserved-memory" / r["node"]
        node.mkdir(parents=True)
        (node / "reg").write_bytes(r["base"].to_bytes(8, "big") + r["size"].to_bytes(8, "big"))
        (node / "no-map").write_bytes(b"")
    with open(mem_file, "wb") as mem:  # its physical memory (sparse), for q25tok load
        mem.truncate(max(r["base"] + r["size"] for r in pmap["regions"]))
    here = ("--target-file", str(board))
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], "--strict", *here, runtime=q25tok)
    assert code == 0 and res[0]["smoke"]["ok"] and not res[0]["smoke"]["warnings"]
    assert res[0]["residency"]["state"] == "resident"  # loaded into the regions after the switch
    assert not (root / "proc").exists() and not (root / "dev").exists()  # system paths, not the remote root's
    r = pmap["regions"][0]
    with open(mem_file, "rb") as mem:
        mem.seek(r["base"])
        assert mem.read(r["used"]) == (models["A"] / r["file"]).read_bytes()
    shutil.rmtree(live)  # an image that predates them: a warning, a failure with --strict
    code, res, _ = deploy(capsys, ssh, srv, root, models["A"], *here, action="smoke")
    assert code == 0 and res[0]["smoke"]["warnings"]
    capsys.readouterr()
    code = main(
        [
            "smoke",
            "--target",
            "qemu",
            *here,
            "--host",
            f"{USER}@127.0.0.1:{srv.port}",
            "--build",
            str(models["A"]),
            "--identity",
            str(ssh["key"]),
            "--known-hosts",
            str(srv.known_hosts(tmp_path / "kh")),
            "--remote-root",
            str(root),
            "--strict",
            "--json",
        ]
    )
    assert code == 13 and not json.loads(capsys.readouterr().out)[0]["smoke"]["ok"]


def test_busybox_mv_without_T_still_switches_and_says_so(tmp_path, capsys, ssh, models, q25tok):
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    (wrappers / "mv").write_text(  # BusyBox mv: no -T option
        '#!/bin/sh\nfor a in "$@"; do case "$a" in -T|-*T*) echo "mv: invalid option -- \'T\'" >&2; exit 1;; esac; done\n'
        'exec /bin/mv "$@"\n'
    )
    (wrappers / "mv").chmod(0o755)
    board = SSHServer(tmp_path / "busybox", ssh["key"], env_path=f"{wrappers}:/usr/bin:/bin")
    root = tmp_path / "board"
    try:
        code, res, _ = deploy(capsys, ssh, board, root, models["A"], runtime=q25tok)
        assert code == 0 and res[0]["ok"] and any("not atomic" in w for w in res[0]["warnings"])
        code, res, _ = deploy(capsys, ssh, board, root, models["B"], runtime=q25tok)
        assert code == 0 and res[0]["ok"]
        base = root / "lib" / "firmware" / "q25"
        assert os.readlink(base / "current") == f"releases/{res[0]['release']}"
        assert not (base / "releases" / res[0]["previous"] / ".current.tmp").exists()  # not moved into the old one
    finally:
        board.stop()


@pytest.mark.parametrize("shell", [["busybox", "sh", "-c"], ["dash", "-c"]], ids=["busybox", "dash"])
def test_promote_chmods_only_a_q25tok_of_its_own(tmp_path, shell):
    """Issue 44: PROMOTE made the staged q25tok 0755 whatever it was: a kept q25tok the staging
    links (PREPARE's `ln`) that is a hard link to another file (`/etc/shadow`, linked by a user
    where fs.protected_hardlinks=0), or a symlink, had that file made 0755. A linked q25tok
    keeps the mode its own release gave it; only the q25tok this deploy sent (one link) is set."""
    from requirements import need_program

    from q25deploy.deploy.ops.deployer import PROMOTE

    need_program(shell[0], "Debian: dash / busybox-static")
    shadow = tmp_path / "shadow"
    shadow.write_text("root:*:19000:0:99999:7:::\n")
    shadow.chmod(0o640)
    for plant in (os.link, os.symlink):
        staging, rdir = tmp_path / f"s-{plant.__name__}", tmp_path / f"r-{plant.__name__}"
        staging.mkdir()
        plant(shadow, staging / "q25tok")
        r = subprocess.run([*shell, PROMOTE, "sh", str(staging), str(rdir), "new"], input=b"{}", capture_output=True)
        assert r.returncode == 0, r.stderr
        assert oct(shadow.stat().st_mode & 0o777) == "0o640", plant.__name__
    staging = tmp_path / "fresh"
    staging.mkdir()
    (staging / "q25tok").write_bytes(b"\x7fELF")
    (staging / "q25tok").chmod(0o600)
    r = subprocess.run(
        [*shell, PROMOTE, "sh", str(staging), str(tmp_path / "r"), "new"], input=b"{}", capture_output=True
    )
    assert r.returncode == 0 and oct((tmp_path / "r" / "q25tok").stat().st_mode & 0o777) == "0o755", r.stderr
