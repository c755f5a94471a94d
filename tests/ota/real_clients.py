"""The real OTA clients on this machine: Debian's ``mender`` (3.4, standalone mode) and
``swupdate`` (2022.12), each run in a private mount namespace that gives it a board's files
without touching this machine's.

Inside the namespace (``unshare --mount``, propagation private), as a board image has them:
- ``/etc`` is an overlay whose upper directory holds ``mender/mender.conf``,
  ``mender/artifact_info`` and ``hwrevision``;
- ``/var/lib`` is an overlay whose upper directory holds ``mender/device_type`` and the
  client's database (``/var/lib/mender`` is a link to ``/data/mender`` on Debian: the upper
  directory replaces it);
- ``/usr/share/mender/modules/v3`` is our update module only (``q25-release``);
- ``/lib/firmware`` is the board's (the install dir ``/lib/firmware/q25`` is under it).
The clients' PATH holds BusyBox applets (the board's userland); the image's ``q25tok``, the
only one the update module runs, is at ``/lib/firmware/q25-test-board/usr/bin/q25tok`` (the
board file's runtime path, outside the install dir). The update module and SWUpdate's script
run under ``/bin/sh``. Every directory lives under
``root``, so :func:`ota_helpers.layout` reads the board's install dir as with the file trees.
The board's running device tree and physical memory are a directory and a sparse file under
``/lib/firmware/q25-test-board`` (so under ``root``): the artifacts are packaged with a board
file that names them (``device_tree``, ``memory_device``, as deploy's tests do), so `q25tok
load` in the clients' script writes that file, never this machine's ``/dev/mem``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ota_helpers import stand_in
from requirements import need, need_program

from q25deploy.resources import OTA_SCRIPT as SCRIPT

STAND_IN = "/lib/firmware/q25-test-board"  # the device tree and memory in the namespace
RUNTIME = f"{STAND_IN}/usr/bin/q25tok"  # the image's q25tok (the plan's)

QEMU_TOML = Path(__file__).resolve().parents[2] / "targets" / "qemu.toml"
MODULES = "/usr/share/mender/modules/v3"
# $1 the scratch board; the rest: the client's command line. The mounts with util-linux's mount
# (PATH is the board's BusyBox from the start: the clients inherit it)
NAMESPACE = (
    "set -e; b=$1; shift; m=/bin/mount; $m --make-rprivate /; "
    '$m -t overlay overlay -o "lowerdir=/etc,upperdir=$b/etc,workdir=$b/.work-etc" /etc; '
    '$m -t overlay overlay -o "lowerdir=/var/lib,upperdir=$b/var/lib,workdir=$b/.work-var-lib" /var/lib; '
    f'$m --bind "$b/modules" {MODULES}; $m --bind "$b/lib/firmware" /lib/firmware; exec "$@"'
)


def need_clients() -> tuple[str, str]:
    """The two clients, root and a mount namespace of our own (skip, or fail on CI)."""
    mender = need_program("mender", "Debian: mender-client")
    swupdate = need_program("swupdate", "Debian: swupdate")
    need(
        os.geteuid() == 0,
        "root (the clients write /etc, /var/lib and /lib/firmware in a mount namespace)",
        "run the tests as root, as .ci/run does",
    )
    need(
        Path(MODULES).is_dir() and Path("/lib/firmware").is_dir(),
        f"{MODULES} and /lib/firmware (the bind mounts' targets)",
        "Debian: mender-client",
    )
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True, timeout=30)
    need(probe.returncode == 0, "a private mount namespace (unshare --mount)", "CAP_SYS_ADMIN")
    return mender, swupdate


class ClientBoard:
    """A board's files under ``root`` and the real clients run against them."""

    def __init__(
        self,
        root: Path,
        *,
        busybox_path: str,
        q25tok: Path,
        device_type: str = "qemuarm64",
        hw_revision: str = "qemu 1.0",
        artifact_verify_key: Path | None = None,
        reserving: tuple[Path, ...] = (),
    ):
        """``reserving``: builds whose regions the board's running device tree reserves."""
        self.root = root
        for d in (
            "etc/mender",
            "var/lib/mender",
            ".work-etc",
            ".work-var-lib",
            "modules",
            "lib/firmware",
            "bin",
            "tmp",
        ):
            (root / d).mkdir(parents=True, exist_ok=True)
        conf = {"DeviceTypeFile": "/var/lib/mender/device_type"}
        if artifact_verify_key is not None:
            conf["ArtifactVerifyKey"] = str(artifact_verify_key)
        (root / "etc/mender/mender.conf").write_text(json.dumps(conf) + "\n")
        (root / "etc/mender/artifact_info").write_text("artifact_name=q25-test-image\n")
        (root / "var/lib/mender/device_type").write_text(f"device_type={device_type}\n")
        (root / "etc/hwrevision").write_text(hw_revision + "\n")
        module = root / "modules" / "q25-release"
        shutil.copyfile(SCRIPT, module)
        module.chmod(0o755)
        for applet in Path(busybox_path).iterdir():
            (root / "bin" / applet.name).symlink_to(os.readlink(applet))
        (root / RUNTIME.lstrip("/")).parent.mkdir(parents=True)
        shutil.copy2(q25tok, root / RUNTIME.lstrip("/"))
        self.memory = root / STAND_IN.lstrip("/") / "mem"
        self.reboot_mark = root / "reboot-requested"
        stand_in(self.memory.parent / "device-tree", self.memory, reserving)
        self.board_file = root.parent / f"{root.name}-qemu.toml"
        self.board_file.write_text(
            QEMU_TOML.read_text()
            .replace(
                'arch = "aarch64"',
                f'arch = "aarch64"\ndevice_tree = "{STAND_IN}/device-tree"\nmemory_device = "{STAND_IN}/mem"',
            )
            .replace('path = "/lib/firmware/q25"', f'path = "/lib/firmware/q25"\nruntime = "{RUNTIME}"')
        )

    def _argv(self, *argv: str, net: str = "") -> tuple[list[str], dict[str, str]]:
        env = {"PATH": str(self.root / "bin"), "TMPDIR": str(self.root / "tmp"), "LC_ALL": "C"}
        # always a network namespace of its own: swupdate binds the abstract socket @NotifyServer,
        # one per network namespace, and a second swupdate beside it (another test) hangs
        ns = ["unshare", "--mount", "--net"]
        return [*ns, "/bin/sh", "-c", net + NAMESPACE, "sh", str(self.root), *argv], env

    def run(self, *argv: str) -> subprocess.CompletedProcess:
        args, env = self._argv(*argv)
        return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)

    def suricatta(
        self, server: tuple[int, Path], device_id: str, cert: Path, log: Path, sw_version: str | None = None
    ) -> subprocess.Popen:
        """``swupdate -u``: the suricatta daemon polling ``server`` (hawkBit's device API) as
        ``device_id``, with the board's ``/etc/swupdate.cfg``: its ``suricatta`` section (tenant,
        id, url, poll delay), ``identify`` (the board name and revision of /etc/hwrevision, which
        the server matches images by) and the post-update command, the board's reboot: here it
        leaves :attr:`reboot_mark`, and the test starts the daemon again as the board's boot
        would, with ``sw_version``, the version of the image it now runs: in ``identify`` (the
        configData SWUpdate sends at start: goosebit records it as the board's version, and
        without it would hand the image again) and ``-c 2`` (SWUpdate without a bootloader's
        persistent update state is told on the command line that the installed update is good,
        and reports its success). Its own session: stop it with :func:`stop`.

        ``server``: the port the board reaches the server at on its loopback, and the Unix socket
        that carries it there. Each board has a network namespace of its own (SWUpdate binds
        abstract Unix sockets, ``NotifyServer`` to ``NotifyServer10``: at most 11 instances share
        one), where socat forwards 127.0.0.1:PORT to the socket."""
        port, sock = server
        net = (
            f"/sbin/ip link set lo up; /usr/bin/socat TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr "
            f"UNIX-CONNECT:{sock} & "
        )
        board, revision = (self.root / "etc/hwrevision").read_text().split()
        (self.root / "etc/swupdate.cfg").write_text(
            "globals:\n{\n"
            "\tverbose = true;\n\tloglevel = 6;\n"
            f'\tpublic-key-file = "{cert}";\n'
            f'\tpostupdatecmd = "{self.root}/bin/touch {self.reboot_mark}";\n'
            "};\n"
            "suricatta:\n{\n"
            '\ttenant = "DEFAULT";\n'
            f'\tid = "{device_id}";\n'
            f'\turl = "http://127.0.0.1:{port}";\n'
            "\tpolldelay = 1;\n\tretry = 2;\n\tretrywait = 1;\n"
            "};\n"
            "identify: (\n"
            f'\t{{ name = "hw_boardname"; value = "{board}"; }},\n'
            f'\t{{ name = "hw_revision"; value = "{revision}"; }}'
            + (f',\n\t{{ name = "sw_version"; value = "{sw_version}"; }}\n' if sw_version else "\n")
            + ");\n"
        )
        swupdate = shutil.which("swupdate") or "swupdate"
        args, env = self._argv(
            swupdate, "-f", "/etc/swupdate.cfg", "-u", f"-i {device_id}" + (" -c 2" if sw_version else ""), net=net
        )
        with open(log, "ab") as out:
            # SIGPIPE ignored, as systemd starts a service (IgnoreSIGPIPE=yes) and as Python has
            # it: SWUpdate 2022.12 dies of it when its peer hangs up mid-update
            return subprocess.Popen(
                args, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, restore_signals=False
            )

    def mender(self, *args: str) -> subprocess.CompletedProcess:
        return self.run(shutil.which("mender") or "mender", "--no-syslog", *args)

    def swupdate(self, swu: Path, cert: Path) -> subprocess.CompletedProcess:
        """``swupdate -i`` with the hardware revision of /etc/hwrevision (as a board's)."""
        return self.run(shutil.which("swupdate") or "swupdate", "-v", "-k", str(cert), "-i", str(swu))

    def provides(self) -> dict[str, str]:
        r = self.mender("show-provides")
        assert r.returncode == 0, r.stderr
        return dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)


def stop(proc: subprocess.Popen) -> None:
    """Stop a daemon started in its own session, and its children."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)  # the session's group: swupdate's own children too
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=10)
            if sig == signal.SIGTERM:
                time.sleep(0.2)  # its children's exit
        except subprocess.TimeoutExpired:
            pass


def current_release(root: Path) -> Path:
    base = root / "lib" / "firmware" / "q25"
    return base / os.readlink(base / "current")


def break_q25tok(root: Path) -> None:
    """The board's q25tok answers ``info`` but gives wrong ids: the smoke test fails."""
    q25tok = root / RUNTIME.lstrip("/")
    real = q25tok.with_name("q25tok.real")
    q25tok.rename(real)
    q25tok.write_text(f'#!/bin/sh\nif [ "$1" = encode ]; then echo 1 2 3; exit 0; fi\nexec {real} "$@"\n')
    q25tok.chmod(0o755)


def said(r: subprocess.CompletedProcess) -> str:
    """What a client printed, its log's escaped quotes as plain ones (Mender logs msg="...")."""
    return (r.stdout + r.stderr).replace('\\"', '"')
