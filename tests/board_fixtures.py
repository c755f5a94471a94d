"""pytest fixtures for the emulated Cortex-A53 board (see emulated_board.py).

- ``board_root``: Debian's arm64 packages, downloaded and extracted once into the board cache
  (``$Q25_BOARD_CACHE`` or ``~/.cache/q25deploy/emulated-board``; kept across runs).
- ``board``: the dropbear board, booted once per test session with QEMU's device tree plus
  the ``qemu`` build's ``reserved-memory.dtsi``; a test marked ``board_checks.both_flavours``
  runs on the openssh board too (pytest groups them, so one board runs at a time).
- ``boot_board``: a factory for extra boards a test needs (without the fragment, with a disk),
  stopped at the end of the test.
- ``q25tok_aarch64``: the runtime cross-built for the board.
- ``devmem_guard``: the /dev/mem guard (emulated_board/devmem_guard.c), preloaded on every
  board through /etc/ld.so.preload: a glibc mem* call on a /dev/mem mapping aborts.

The boards need QEMU >= 10.0 (``eb.FAULTING_QEMU``), the first measured to fault an unaligned
access to Device memory as Cortex-A53 silicon does.

A missing tool or package fails on CI and skips elsewhere (``requirements.py``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from unittest.mock import patch

import emulated_board as eb
import paramiko
import pytest
from emulated_board.write_log import drive_option
from requirements import need, need_program, unavailable

from q25deploy.errors import Q25Error

# read before the session's private XDG_CACHE_HOME replaces it (conftest.private_cache)
BOARD_CACHE = eb.default_cache_dir()


@dataclass
class TestBoard:
    flavour: str
    qemu: eb.QemuBoard
    key: Path  # the client's private key (every user's authorized key on the board)
    known_hosts: Path
    boot_seconds: float
    dtsi: Path | None  # the fragment in its device tree
    user: str = "root"  # who logs in (emulated_board.users: q25 has sudo/doas without a password)

    @property
    def port(self) -> int:
        return self.qemu.port

    @property
    def host(self) -> str:
        return f"{self.user}@127.0.0.1:{self.port}"

    def login(self, user: str) -> TestBoard:
        """The same board, logged in as ``user`` (by ``sh``, ``put`` and ``q25``)."""
        return replace(self, user=user)

    def client(self) -> paramiko.SSHClient:
        c = paramiko.SSHClient()
        c.load_host_keys(str(self.known_hosts))
        c.set_missing_host_key_policy(paramiko.RejectPolicy())
        c.connect(
            "127.0.0.1",
            self.port,
            self.user,
            key_filename=str(self.key),
            look_for_keys=False,
            allow_agent=False,
            timeout=30,
            banner_timeout=60,
            auth_timeout=60,
        )
        return c

    def sh(self, script: str, *, check: bool = True, timeout: float = 120) -> tuple[int, str, str]:
        """Run a shell snippet on the board with our own SSH client (independent of the
        code under test); returns (status, stdout, stderr)."""
        with self.client() as c:
            _, out, err = c.exec_command(script, timeout=timeout)
            o, e = out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace")
            status = out.channel.recv_exit_status()
        if check and status != 0:
            raise AssertionError(f"on the board: {script!r} failed ({status}): {e or o}")
        return status, o, e

    def put(self, path: str, data: bytes, mode: str = "0644") -> None:
        """Write a file on the board (through ``cat``: dropbear has no SFTP server)."""
        with self.client() as c:
            stdin, out, _ = c.exec_command(f"cat > '{path}' && chmod {mode} '{path}'", timeout=120)
            stdin.write(data)
            stdin.channel.shutdown_write()
            assert out.channel.recv_exit_status() == 0, f"writing {path} on the board failed"

    def q25(self, action: str, build: Path, *extra: str) -> list[str]:
        """argv for ``q25deploy ACTION`` against this board."""
        return [
            action,
            "--target",
            "qemu",
            "--host",
            self.host,
            "--build",
            str(build),
            "--identity",
            str(self.key),
            "--known-hosts",
            str(self.known_hosts),
            "--json",
            *extra,
        ]


def _need_board_tools() -> None:
    need_program("qemu-system-aarch64", "Debian: qemu-system-arm")
    version = eb.qemu_version()
    need(
        version[:2] >= eb.FAULTING_QEMU,
        f"qemu-system-aarch64 >= 10.0 (this one is {'.'.join(map(str, version))}, "
        "which forgives unaligned access to Device memory)",
        "Debian: qemu-system-arm from bookworm-backports",
    )
    need_program("dtc", "Debian: device-tree-compiler")
    need_program("apt-get", "a Debian host")
    need_program("dpkg-deb", "a Debian host")
    if not os.environ.get("CI") and os.environ.get("Q25_NO_BOARD"):
        pytest.skip("Q25_NO_BOARD is set: emulated-board tests are off")


@pytest.fixture(scope="session")
def board_root() -> Path:
    _need_board_tools()
    try:
        return eb.fetch_packages(BOARD_CACHE)
    except eb.BoardError as e:
        unavailable("the emulated board's arm64 packages", f"{e}; run: dpkg --add-architecture arm64 && apt-get update")


@pytest.fixture(scope="session")
def board_client_key(tmp_path_factory) -> Path:
    from sshd import keygen

    need_program("ssh-keygen", "Debian: openssh-client")
    return keygen(tmp_path_factory.mktemp("board-key") / "client_ed25519")


@pytest.fixture(scope="session")
def board_machine():
    from q25deploy.board.boardfile import load_board
    from q25deploy.resources import data_dir

    board = load_board(data_dir("targets") / "qemu.toml")
    smp = os.environ.get("Q25_BOARD_SMP")
    if smp:
        return eb.Machine.from_board(board, smp=int(smp))
    machine = eb.Machine.from_board(board)
    # TCG runs a thread per vCPU: on a small host no more vCPUs than cores (the board file's 4
    # on 2 cores boots slower, docs/emulated-board.md)
    cores = os.cpu_count() or 1
    return machine if machine.smp <= cores else eb.Machine.from_board(board, smp=cores)


@pytest.fixture(scope="session")
def devmem_guard(tmp_path_factory) -> Path:
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
    return eb.build_guard(tmp_path_factory.mktemp("guard") / "q25-devmem-guard.so")


@contextmanager
def logged_drive(image: Path, log: Path) -> Iterator[None]:
    """While it is open, the board's first disk goes through blklogwrites into ``log``."""
    from q25deploy_plugins.qemu import vm

    plain = vm.qemu_argv

    def argv(machine, spec, files) -> list[str]:
        out = plain(machine, spec, files)
        i = out.index("-drive") + 1
        assert out[i].startswith(f"file={image},format=raw,"), out[i]
        out[i] = out[i].replace(f"file={image},format=raw", drive_option(image, log), 1)
        return out

    with patch.object(vm, "qemu_argv", argv):
        yield


@pytest.fixture(scope="session")
def _boards(tmp_path_factory, board_root, board_client_key, board_machine, devmem_guard):
    """Starts boards and stops them all at the end (of the test or of the session)."""
    started: list[eb.QemuBoard] = []
    base = tmp_path_factory.mktemp("boards")
    initrds: dict[tuple, Path] = {}

    def start(
        flavour: str,
        dtsi: Path | None,
        *,
        disk: Path | None = None,
        dropbear_args=(),
        extra_files=None,
        wait: bool = True,
        write_log: Path | None = None,
        trees: tuple[Path, ...] = (),
    ) -> TestBoard:
        n = len(started)
        work = base / f"{n}-{flavour}"
        ikey = (flavour, tuple(dropbear_args), tuple(sorted((extra_files or {}).items())), tuple(trees))
        if ikey not in initrds:
            spec = eb.InitramfsSpec(
                flavour,
                Path(str(board_client_key) + ".pub").read_text(),
                dropbear_args=tuple(dropbear_args),
                extra_files=dict(extra_files or {}),
                preload=eb.guard_files(devmem_guard),
                trees=tuple(trees),
            )
            initrds[ikey] = eb.assemble_initramfs(board_root, work / "initramfs.cpio", spec)
        dtb = eb.make_dtb(work / "board.dtb", board_machine, dtsi)
        spec = eb.Boot(
            eb.kernel_image(board_root).absolute(),
            initrds[ikey].absolute(),
            (disk.absolute(),) if disk else (),
            dtb,
            port=eb.free_port(),
        )
        if write_log is not None and disk is not None:  # the disk behind QEMU's write log (write_log.py)
            with logged_drive(disk.absolute(), write_log.absolute()):
                q = eb.boot(work, board_machine, spec)
        else:
            q = eb.boot(work, board_machine, spec)
        started.append(q)
        kh = work / "known_hosts"
        kh.write_text(eb.known_hosts_line(q.port) + "\n")
        if not wait:  # a power cut during the boot (tests/emulated_board/power.py): the caller times it
            return TestBoard(flavour, q, board_client_key, kh, 0.0, dtsi)
        try:
            secs = eb.wait_for_ssh(q, timeout=float(os.environ.get("Q25_BOARD_BOOT_TIMEOUT", "180")))
        except Q25Error as e:
            q.stop()
            pytest.fail(f"the emulated board ({flavour}) did not come up: {e}", pytrace=False)
        return TestBoard(flavour, q, board_client_key, kh, secs, dtsi)

    start.started = started  # type: ignore[attr-defined]
    yield start
    for q in started:
        q.stop()


@pytest.fixture(scope="session", params=["dropbear"])
def board(request, _boards, builds) -> TestBoard:
    """The board of one flavour (dropbear; ``board_checks.both_flavours`` adds openssh), booted
    once per session with the qemu build's regions."""
    b = _boards(request.param, builds["qemu"] / "reserved-memory.dtsi")
    print(f"\nemulated board ({b.flavour}): SSH up {b.boot_seconds:.1f} s after launch")
    yield b
    b.qemu.stop()  # the next flavour boots after this one is gone


@pytest.fixture
def boot_board(_boards):
    """``boot_board(flavour, dtsi_or_None, disk=None, wait=True, trees=())``: an extra board,
    stopped after the test (``wait=False``: returned as soon as QEMU runs, before SSH answers;
    ``trees``: directories laid over its root, e.g. unpacked packages)."""
    mine: list[TestBoard] = []

    def boot(flavour: str, dtsi: Path | None, **kw) -> TestBoard:
        b = _boards(flavour, dtsi, **kw)
        mine.append(b)
        return b

    yield boot
    for b in mine:
        b.qemu.stop()


@pytest.fixture(scope="session")
def q25tok_aarch64(tmp_path_factory) -> Path:
    """``q25deploy runtime build --cross aarch64``: glibc-dynamic, as a Yocto image would have it."""
    from shared_builds import runtime

    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
    return runtime(tmp_path_factory, cross="aarch64") / "q25tok"


@pytest.fixture(scope="session")
def q25tok_aarch64_static(tmp_path_factory) -> Path:
    """``q25deploy runtime build --cross aarch64 --static``."""
    from shared_builds import runtime

    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross")
    return runtime(tmp_path_factory, cross="aarch64", static=True) / "q25tok"


def wait_until(predicate, timeout: float = 30.0, step: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False
