"""``qemu up`` prints next steps that run as printed on the image it booted: it reads the
initramfs (a real cpio archive, made by the ``cpio`` tool) for the board's ``q25tok`` and the
key root accepts, and each printed command parses with q25deploy's own parser, with
``--runtime-bin`` exactly when the image has no q25tok and ``--identity`` when one of the
user's keys is the authorized one."""

from __future__ import annotations

import gzip
import shlex
import subprocess

import pytest
from requirements import need_program

from q25deploy.cli.app import build_parser
from q25deploy_plugins.qemu.commands import RUNTIME_OUT, image_needs, up_text
from q25deploy_plugins.qemu.image import read_initramfs
from q25deploy_plugins.qemu.state import state_home

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHq25deployTestKeyOnlyForTheImageCheck0000 me@host"


def initramfs(tmp_path, name: str, with_q25tok: bool, compress: bool = False):
    need_program("cpio", "Debian: cpio")
    root = tmp_path / f"root-{name}"
    (root / "root/.ssh").mkdir(parents=True)
    (root / "usr/bin").mkdir(parents=True)
    (root / "root/.ssh/authorized_keys").write_text(f'command="x" {KEY}\n')
    (root / "usr/bin/busybox").write_bytes(b"\x7fELF")
    if with_q25tok:
        (root / "usr/bin/q25tok").write_bytes(b"\x7fELF")
    names = "\n".join(str(p.relative_to(root)) for p in sorted(root.rglob("*"))) + "\n"
    data = subprocess.run(
        ["cpio", "-o", "-H", "newc", "--quiet"], cwd=root, input=names.encode(), capture_output=True, check=True
    ).stdout
    out = tmp_path / f"{name}.cpio"
    out.write_bytes(gzip.compress(data) if compress else data)
    return out


@pytest.fixture
def ssh_dir(tmp_path):
    d = tmp_path / "dot-ssh"
    d.mkdir()
    (d / "id_rsa.pub").write_text("ssh-rsa AAAAB3NzaOther other@host\n")
    (d / "id_rsa").write_text("private")
    (d / "id_ed25519.pub").write_text(KEY + "\n")
    (d / "id_ed25519").write_text("private")
    return d


def printed(has_runtime, identity, state_dir) -> dict[str, list[str]]:
    r = {
        "pid": 1234,
        "port": 2222,
        "host": "root@127.0.0.1:2222",
        "state_dir": str(state_dir),
        "serial_log": f"{state_dir}/serial.log",
        "monitor": f"{state_dir}/monitor.sock",
        "known_hosts": f"{state_dir}/known_hosts",
        "has_runtime": has_runtime,
        "identity": identity,
    }
    lines = up_text(r, "qemu", None).splitlines()
    return {line.split()[0]: shlex.split(line.split(None, 1)[1]) for line in lines if "q25deploy " in line}


@pytest.mark.parametrize("compress", [False, True], ids=["cpio", "cpio.gz"])
def test_the_image_is_read_for_q25tok_and_the_authorized_key(tmp_path, ssh_dir, compress):
    without = initramfs(tmp_path, "plain", False, compress)
    contents = read_initramfs(without)
    assert contents is not None and contents.has("/usr/bin/busybox") and not contents.has("/usr/bin/q25tok")
    assert image_needs(without, "/usr/bin/q25tok", ssh_dir) == {
        "has_runtime": False,
        "identity": str(ssh_dir / "id_ed25519"),
    }
    with_it = initramfs(tmp_path, "full", True, compress)
    assert image_needs(with_it, "/usr/bin/q25tok", tmp_path / "no-keys")["has_runtime"] is True
    junk = tmp_path / "junk"
    junk.write_bytes(b"not an archive")
    assert image_needs(junk, "/usr/bin/q25tok", ssh_dir) == {"has_runtime": None, "identity": None}


def test_every_printed_command_parses_and_carries_what_the_image_needs(tmp_path, ssh_dir, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    parser = build_parser(plugin_commands=True)
    state_dir = state_home() / "qemu"
    needs = image_needs(initramfs(tmp_path, "plain", False), "/usr/bin/q25tok", ssh_dir)
    steps = printed(needs["has_runtime"], needs["identity"], state_dir)
    assert list(steps) == ["runtime", "deploy", "smoke", "stop"]
    for words in steps.values():
        assert words[0] == "q25deploy"
        parser.parse_args(words[1:])  # an unknown option or a bad value exits 2
    runtime = parser.parse_args(steps["runtime"][1:])
    deploy = parser.parse_args(steps["deploy"][1:])
    assert deploy.runtime_bin == f"{runtime.out}/q25tok" == f"{RUNTIME_OUT}/q25tok"
    assert deploy.identity == str(ssh_dir / "id_ed25519") and deploy.trust_new_host
    assert deploy.known_hosts == str(state_dir / "known_hosts")
    assert steps["stop"] == ["q25deploy", "qemu", "down"]  # the default state directory: nothing to add
    (tmp_path / RUNTIME_OUT).mkdir(parents=True)
    (tmp_path / RUNTIME_OUT / "q25tok").write_bytes(b"\x7fELF")
    assert "runtime" not in printed(False, None, state_dir)  # built already: only the deploy's option
    full = printed(True, None, tmp_path / "elsewhere")
    assert list(full) == ["deploy", "smoke", "stop"] and "--runtime-bin" not in full["deploy"]
    assert "--identity" not in full["deploy"]
    assert full["stop"] == ["q25deploy", "qemu", "down", "--state-dir", str(tmp_path / "elsewhere")]
