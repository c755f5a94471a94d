"""`q25tok receive` (the deploy's board-side receiver) and the runtime's SHA-256: what is
written is exactly the input, the digest is hashlib's, with the CPU's SHA-256 instructions
(x86 SHA extensions here, the A53's crypto extensions under qemu-aarch64) and with the
portable code, at every block boundary; a write that fails is reported after the input was
drained; a large file is flushed along the way, and a flush that fails fails the receive.
The file is a new one (cli_create.c): nothing that exists is written through, and as root no
link the deploy user planted is followed (issue 44, item 2)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import pytest
from deploy_user import SWAPS, as_user, install_fixture  # noqa: F401 (a fixture)
from requirements import need_program
from shared_builds import runtime

from q25deploy.resources import runtime_library_sources, runtime_sources

QEMU = ["qemu-aarch64", "-cpu", "cortex-a53", "-L", "/usr/aarch64-linux-gnu"]
SIZES = [
    0,
    1,
    55,
    56,
    63,
    64,
    65,
    119,
    120,
    128,
    (256 << 10) - 1,
    256 << 10,
    (256 << 10) + 1,
    (1 << 20) + 1,
    9_000_001,
]  # around SHA-256's blocks and padding, and receive's 256 KiB reads
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
IMPL_C = '#include <stdio.h>\n#include "q25tok.h"\nint main(void) { puts(q25_sha256_impl()); return 0; }\n'


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, Path]:
    need_program("cc", "Debian: gcc")
    need_program("aarch64-linux-gnu-gcc", "Debian: gcc-aarch64-linux-gnu")
    need_program("qemu-aarch64", "Debian: qemu-user")
    host, arm = runtime(tmp_path_factory), runtime(tmp_path_factory, cross="aarch64")
    return {"host": host / "q25tok", "arm": arm / "q25tok"}


def receiver(builds, where: str, impl: str) -> tuple[list[str], dict]:
    env = {**os.environ, "Q25TOK_SHA256": impl}
    return ([*QEMU, str(builds["arm"])] if where == "arm" else [str(builds["host"])]), env


def impl_in_use(tmp_path: Path, where: str, env: dict) -> str:
    src, exe = tmp_path / "impl.c", tmp_path / f"impl-{where}"
    src.write_text(IMPL_C)
    cc = "aarch64-linux-gnu-gcc" if where == "arm" else "cc"
    subprocess.run(
        [
            cc,
            "-std=c11",
            "-O2",
            "-I",
            str(runtime_sources()),
            str(src),
            *map(str, runtime_library_sources()),
            "-o",
            str(exe),
        ],
        check=True,
    )
    cmd = [*QEMU, str(exe)] if where == "arm" else [str(exe)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout.strip()


def cpu_has_sha_extensions() -> bool:
    return "sha_ni" in Path("/proc/cpuinfo").read_text()


@pytest.mark.parametrize("where", ["host", "arm"])
@pytest.mark.parametrize("impl", ["cpu", "generic"])
def test_receive_writes_the_input_and_prints_its_sha256(builds, tmp_path, where, impl):
    cmd, env = receiver(builds, where, impl)
    expect = "generic" if impl == "generic" or (where == "host" and not cpu_has_sha_extensions()) else "cpu"
    assert impl_in_use(tmp_path, where, env) == expect  # the path this test means to cover is the one taken
    data = os.urandom(max(SIZES))
    for n in SIZES:
        out = tmp_path / f"f{n}"
        r = subprocess.run([*cmd, "receive", str(out)], input=data[:n], capture_output=True, env=env, check=False)
        assert r.returncode == 0 and r.stderr == b"", r.stderr
        assert r.stdout.decode() == hashlib.sha256(data[:n]).hexdigest() + "\n", n
        assert out.read_bytes() == data[:n]


@pytest.mark.parametrize("what", ["file", "hard link", "symlink", "dangling symlink", "fifo"])
def test_receive_writes_only_a_new_file(builds, tmp_path, what):
    """Whatever is at FILE already is refused, not truncated (a kept release's hard-linked
    copy), followed (a link) or waited on (a FIFO, which held open(2) until the upload timed
    out): exit 10, one line, the input drained, nothing written."""
    kept, dest = tmp_path / "kept", tmp_path / "dest"
    kept.write_bytes(b"kept bytes")
    if what == "file":
        dest.write_bytes(b"old bytes")
    elif what == "hard link":
        os.link(kept, dest)
    elif what == "symlink":
        dest.symlink_to(kept)
    elif what == "dangling symlink":
        dest.symlink_to(tmp_path / "made-through-the-link")
    else:
        os.mkfifo(dest)
    before = {p.name: (p.is_symlink(), p.is_fifo() or p.is_symlink() or p.read_bytes()) for p in tmp_path.iterdir()}
    r = subprocess.run(
        [str(builds["host"]), "receive", str(dest)], input=os.urandom(3 << 20), capture_output=True, timeout=20
    )
    assert r.returncode == 10 and r.stdout == b"", r
    assert (
        r.stderr.decode()
        == f"q25tok: receive: refused: {dest}: exists (a file, a link or a FIFO): only a new file is written\n"
    )
    assert {
        p.name: (p.is_symlink(), p.is_fifo() or p.is_symlink() or p.read_bytes()) for p in tmp_path.iterdir()
    } == before


def test_a_failed_write_is_reported_after_the_input_is_drained(builds, tmp_path):
    data = os.urandom(3 << 20)

    def small_files() -> None:  # writes past 1 MiB fail with EFBIG (the signal ignored)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    for dest, why, limit in (
        (tmp_path / "big", "File too large", small_files),
        (tmp_path / "missing" / "f", "No such file or directory", None),
    ):
        # the whole input is taken (no broken pipe for the sender), then the error and exit 1
        r = subprocess.run(
            [str(builds["host"]), "receive", str(dest)], input=data, capture_output=True, preexec_fn=limit, check=False
        )
        assert r.returncode == 1 and r.stdout == b"" and why in r.stderr.decode(), r.stderr


def test_receive_widens_the_pipe_it_reads(builds, tmp_path):
    """A 1 MiB pipe from sshd, so sshd goes on writing while a block is written and hashed."""
    r, w = os.pipe()
    try:
        assert fcntl.fcntl(w, F_GETPIPE_SZ) == 65536
        proc = subprocess.Popen([str(builds["host"]), "receive", str(tmp_path / "f")], stdin=r, stdout=subprocess.PIPE)
        os.close(r)
        deadline = time.monotonic() + 10
        while fcntl.fcntl(w, F_GETPIPE_SZ) != 1 << 20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert fcntl.fcntl(w, F_GETPIPE_SZ) == 1 << 20
        os.write(w, b"abc")
    finally:
        os.close(w)
    assert proc.communicate(timeout=10)[0].decode() == hashlib.sha256(b"abc").hexdigest() + "\n"


# every fdatasync is logged (pid and what it returned); Q25_FAIL_CHILD_SYNC makes a child's fail with EIO
FSYNC_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static pid_t first;
__attribute__((constructor)) static void init(void) { first = getpid(); }
int fdatasync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    int child = getpid() != first, fail = child && getenv("Q25_FAIL_CHILD_SYNC");
    int r = fail ? (errno = EIO, -1) : real(fd);
    char line[64];
    int n = snprintf(line, sizeof line, "%s %d\n", child ? "child" : "main", r);
    int log = open(getenv("Q25_SYNC_LOG"), O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (log >= 0) {
        (void)write(log, line, (size_t)n);
        close(log);
    }
    if (fail)
        errno = EIO;
    return r;
}
"""


@pytest.fixture(scope="module")
def fsync_shim(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.c").write_text(FSYNC_SHIM)
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(d / "shim.so"), str(d / "shim.c"), "-ldl"], check=True)
    return d / "shim.so"


def test_a_large_file_is_flushed_while_it_arrives(builds, tmp_path, fsync_shim):
    """Every 32 MiB a child flushes what was written (the device persists it while the rest
    arrives), then the file is flushed once more at the end; a small file only at the end."""
    data = os.urandom(1 << 20) * 100
    for size, children in ((100 << 20, 1), (3 << 20, 0)):
        log = tmp_path / f"sync-{size}.log"
        env = {**os.environ, "LD_PRELOAD": str(fsync_shim), "Q25_SYNC_LOG": str(log)}
        r = subprocess.run(
            [str(builds["host"]), "receive", str(tmp_path / f"f{size}")],
            input=data[:size],
            capture_output=True,
            env=env,
            check=True,
        )
        assert r.stdout.decode() == hashlib.sha256(data[:size]).hexdigest() + "\n"
        calls = log.read_text().splitlines()
        assert calls[-1] == "main 0" and calls.count("main 0") == 1, calls
        assert (calls.count("child 0") >= children) and (children or len(calls) == 1), calls


def test_a_failed_flush_along_the_way_fails_the_receive(builds, tmp_path, fsync_shim):
    """A flush error seen by the child is not seen again by the file's next fdatasync (Linux
    reports it once): the child's exit status carries it."""
    env = {
        **os.environ,
        "LD_PRELOAD": str(fsync_shim),
        "Q25_SYNC_LOG": str(tmp_path / "log"),
        "Q25_FAIL_CHILD_SYNC": "1",
    }
    r = subprocess.run(
        [str(builds["host"]), "receive", str(tmp_path / "f")],
        input=os.urandom(1 << 20) * 40,
        capture_output=True,
        env=env,
        check=False,
    )
    assert r.returncode == 1 and r.stdout == b"" and b"Input/output error" in r.stderr, r.stderr
    assert "child -1" in (tmp_path / "log").read_text()


def test_receive_usage(builds):
    for argv in ([], ["a", "b"], ["--x"]):
        r = subprocess.run([str(builds["host"]), "receive", *argv], capture_output=True, check=False)
        assert r.returncode == 2 and b"usage: q25tok receive" in r.stderr


@pytest.mark.parametrize("swap", list(SWAPS))
def test_root_receives_nothing_through_the_deploy_users_links(builds, install, swap):
    """Issue 44 (2): `q25tok receive` as root opened its target O_WRONLY|O_CREAT|O_TRUNC, so
    the deploy user, who owns releases/, swapped releases/.incoming-<id> between root's PREPARE
    and the upload and root overwrote a file of root's outside the install dir with the upload
    (a FIFO instead held the receiver until the upload timed out). Now nothing outside is
    written, nothing blocks, and one line says why (exit 10)."""
    releases, outside = install["releases"], install["outside"]
    as_user(SWAPS[swap], releases, outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    data = os.urandom(3 << 20)
    r = subprocess.run(
        [str(builds["host"]), "receive", str(releases / ".incoming-1" / "q25tok")],
        input=data,
        capture_output=True,
        timeout=20,  # the FIFO: a hang fails here
    )
    assert {p.name: p.read_bytes() for p in outside.iterdir()} == before  # root's file, and no new one
    assert r.returncode == 10 and r.stdout == b"", r
    lines = r.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("q25tok: receive: refused: "), lines
    assert not [p for p in releases.rglob("*") if p.is_file() and not p.is_symlink() and p.stat().st_uid == 0]


def test_root_receives_into_roots_own_staging_dir(builds, install):
    """The same upload, nothing swapped: written (0644, root's) into PREPARE's directory."""
    staging = install["releases"] / ".incoming-1"
    data = os.urandom(1 << 20)
    r = subprocess.run(
        [str(builds["host"]), "receive", str(staging / "q25tok")], input=data, capture_output=True, check=True
    )
    assert r.stdout.decode() == hashlib.sha256(data).hexdigest() + "\n"
    st = (staging / "q25tok").stat()
    assert (staging / "q25tok").read_bytes() == data and st.st_uid == 0 and st.st_mode & 0o777 == 0o644
