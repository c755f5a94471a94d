"""The runtime's open rule (cli_open.c, cli_create.c): every file q25tok reads is opened
O_RDONLY|O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC and checked by fstat (a regular file, at most so
many bytes), and what it validates is what it uses; every file it writes is a new one.

Run as reproduced: root's q25tok, a file the deploy user (uid 65534) owns and changes while
q25tok runs. The receiver (``q25tok receive``) has its own cases in test_receive.py."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from deploy_user import USER, user_dir_fixture  # noqa: F401 (a fixture)
from requirements import need_program

REGIONS, TENSORS = "partitions/regions.tab", "partitions/tensors.tab"


# LD_PRELOAD into root's q25tok: when it opens Q25_REWRITE_AT (the prompt file: the image was
# opened and validated before), a child running as Q25_REWRITE_UID writes Q25_REWRITE_HEX at
# Q25_REWRITE_OFFSET of Q25_REWRITE_FILE in place (or truncates it to Q25_REWRITE_TRUNCATE
# bytes), as the deploy user can at any moment; the open goes on when the file is rewritten
REWRITE_SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void rewrite(const char *path)
{
    static int done;
    const char *at = getenv("Q25_REWRITE_AT");
    if (done || !at || strcmp(path, at) != 0)
        return;
    done = 1;
    pid_t pid = fork();
    if (pid == 0) {
        uid_t uid = (uid_t)atoi(getenv("Q25_REWRITE_UID"));
        if (setgroups(0, NULL) || setgid(uid) || setuid(uid))
            _exit(3);
        int fd = open(getenv("Q25_REWRITE_FILE"), O_WRONLY);
        const char *hex = getenv("Q25_REWRITE_HEX");
        unsigned char bytes[64];
        size_t n = strlen(hex) / 2;
        for (size_t i = 0; i < n && i < sizeof bytes; i++) {
            char two[3] = {hex[2 * i], hex[2 * i + 1], 0};
            bytes[i] = (unsigned char)strtoul(two, NULL, 16);
        }
        if (getenv("Q25_REWRITE_TRUNCATE")) /* or cut the file short */
            _exit(fd >= 0 && ftruncate(fd, atol(getenv("Q25_REWRITE_TRUNCATE"))) == 0 ? 0 : 4);
        _exit(fd >= 0 && pwrite(fd, bytes, n, atol(getenv("Q25_REWRITE_OFFSET"))) == (ssize_t)n ? 0 : 4);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        abort();
}

#define HOOK(name, proto, call)                                            \
    int name proto                                                         \
    {                                                                      \
        static int(*real) proto;                                           \
        if (!real)                                                         \
            real = (int(*) proto)dlsym(RTLD_NEXT, #name);                  \
        rewrite(path);                                                     \
        return call;                                                       \
    }
#define MODE                                                               \
    mode_t mode = 0;                                                       \
    if (flags & (O_CREAT | O_TMPFILE)) {                                   \
        va_list ap;                                                        \
        va_start(ap, flags);                                               \
        mode = va_arg(ap, mode_t);                                         \
        va_end(ap);                                                        \
    }

#define OPEN_HOOK(name)                                                    \
    int name(const char *path, int flags, ...)                             \
    {                                                                      \
        MODE                                                               \
        static int (*real)(const char *, int, ...);                        \
        if (!real)                                                         \
            real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        rewrite(path);                                                     \
        return real(path, flags, mode);                                    \
    }
OPEN_HOOK(open)
OPEN_HOOK(open64)
int openat(int dir, const char *path, int flags, ...)
{
    MODE
    static int (*real)(int, const char *, int, ...);
    if (!real)
        real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, "openat");
    rewrite(path);
    return real(dir, path, flags, mode);
}
HOOK(__open_2, (const char *path, int flags), real(path, flags))
HOOK(__open64_2, (const char *path, int flags), real(path, flags))
"""


@pytest.fixture(scope="module")
def rewrite_shim(tmp_path_factory) -> Path:
    cc = need_program("cc", "Debian: gcc")
    d = tmp_path_factory.mktemp("shim")
    (d / "shim.c").write_text(REWRITE_SHIM)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "shim.so"), str(d / "shim.c"), "-ldl"], check=True)
    return d / "shim.so"


def users_file(path: Path, data: bytes) -> Path:
    """``data`` at ``path``, the deploy user's file."""
    path.write_bytes(data)
    os.chown(path, USER, USER)
    return path


def run(q25tok: Path, *args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run([str(q25tok), *map(str, args)], capture_output=True, timeout=120, env=env, check=False)


def section(q25tok: Path, image: Path, name: str) -> int:
    """The offset of an image's section, as `q25tok info` prints it."""
    out = run(q25tok, "info", image).stdout.decode()
    m = re.search(rf"^section \d+\s+{name}\s+offset\s+(\d+)", out, re.M)
    assert m, out
    return int(m.group(1))


@pytest.mark.parametrize("owner,mode", [(USER, 0o644), (0, 0o666)], ids=["the users", "roots, writable by all"])
def test_an_image_changed_after_its_validation_is_not_what_encode_uses(
    tmp_path, user_dir, q25tok, qwen2_image, rewrite_shim, owner, mode
):
    """Issue 44 (4): the image was validated through a MAP_PRIVATE mapping, then used through
    it: a page the process never wrote shows the file's bytes as they are now, so the deploy
    user rewrote the first special record's token id (checked at open, against the vocabulary)
    after the open, and root's encode took it as an index: 32 GiB past the token index,
    SIGSEGV. Read into private memory, the image encode uses is the one it checked (an image
    only root can write is still mapped: nobody else can change it)."""
    image = users_file(user_dir / "tokenizer.q25tokrt", qwen2_image.data)
    os.chown(image, owner, owner)
    image.chmod(mode)
    specials = section(q25tok, image, "special_index")
    first_id = int.from_bytes(qwen2_image.data[specials : specials + 4], "little")
    text = run(q25tok, "decode", "--special", image, first_id).stdout  # the longest special token
    prompt = tmp_path / "prompt.txt"
    prompt.write_bytes(text)
    expect = run(q25tok, "encode", "--special", image, prompt)
    assert expect.returncode == 0 and expect.stdout.split() == [str(first_id).encode()], expect

    bad_id = (0xFFFFFFF0).to_bytes(4, "little")
    env = {
        **os.environ,
        "LD_PRELOAD": str(rewrite_shim),
        "Q25_REWRITE_AT": str(prompt),
        "Q25_REWRITE_FILE": str(image),
        "Q25_REWRITE_OFFSET": str(specials),
        "Q25_REWRITE_HEX": bad_id.hex(),
        "Q25_REWRITE_UID": str(USER),
    }
    r = run(q25tok, "encode", "--special", image, prompt, env=env)
    assert image.read_bytes()[specials : specials + 4] == bad_id  # the deploy user did rewrite it, mid-run
    assert r.returncode == 0 and r.stdout == expect.stdout, (r.returncode, r.stderr)
    # and the next open sees the change, and refuses it
    r = run(q25tok, "encode", "--special", image, prompt)
    assert r.returncode == 3 and b"corrupt image" in r.stderr, r


def users_build(build: Path, user_dir: Path) -> Path:
    """A copy of a build, every file and directory the deploy user's."""
    b = user_dir / "b"
    shutil.copytree(build, b)
    for p in [b, *b.rglob("*")]:
        os.chown(p, USER, USER, follow_symlinks=False)
    return b


@pytest.fixture(scope="module")
def hparams(qwen25_tiny) -> str:
    from test_generate import hparams_text

    return hparams_text(qwen25_tiny)


def test_root_writes_logits_only_into_a_new_file(tmp_path, user_dir, q25tok, builds, hparams):
    """Issue 44 (every file root opens): `generate --logits FILE` opened FILE with fopen("wb"):
    a link the deploy user left there made root overwrite the file it points to. Now it is
    refused (exit 10) and the file is untouched; a new FILE in a directory of root's is written."""
    b = tmp_path / "b"
    shutil.copytree(builds["qemu"], b)
    (b / "model_hparams.txt").write_text(hparams)
    victim = tmp_path / "roots.bin"
    victim.write_bytes(b"root's bytes")
    (user_dir / "logits.f32").symlink_to(victim)
    os.lchown(user_dir / "logits.f32", USER, USER)
    args = ["generate", "--files", "--steps", "1", "--logits"]
    tables = [b / REGIONS, b / TENSORS, "9707", "11"]
    for logits in (user_dir / "logits.f32", b / "logits.f32"):
        if logits.parent == b:
            logits.symlink_to(victim)  # root's own directory: a link is still not written through
        r = run(q25tok, *args, logits, *tables)
        assert victim.read_bytes() == b"root's bytes"
        assert (
            r.returncode == 10 and r.stderr.startswith(b"q25tok: --logits refused: ") and r.stderr.count(b"\n") == 1
        ), r
    r = run(q25tok, *args, tmp_path / "new.f32", *tables)
    assert r.returncode == 0 and (tmp_path / "new.f32").stat().st_size > 0, r


def test_root_maps_no_partition_another_user_can_write(tmp_path, user_dir, q25tok, builds, hparams, rewrite_shim):
    """Issue 44 (what it validated is what it uses): `generate --files` maps the partitions; a
    mapping shows what is written to the file later, and the deploy user cut a partition short
    once root had checked its size: SIGBUS in root's forward pass. As root the partitions it
    maps must be root's and writable by no one else (the deploy user's are refused, one line);
    root's own map and run."""
    b = users_build(builds["qemu"], user_dir)
    users_file(b / "model_hparams.txt", hparams.encode())
    part = next((b / "partitions").glob("region_*.bin"))
    env = {
        **os.environ,
        "LD_PRELOAD": str(rewrite_shim),
        "Q25_REWRITE_AT": str(b / TENSORS),  # read after the partitions are mapped
        "Q25_REWRITE_FILE": str(part),
        "Q25_REWRITE_TRUNCATE": "0",
        "Q25_REWRITE_HEX": "",
        "Q25_REWRITE_OFFSET": "0",
        "Q25_REWRITE_UID": str(USER),
    }
    size = part.stat().st_size
    r = run(q25tok, "generate", "--files", "--steps", "1", b / REGIONS, b / TENSORS, "9707", "11", env=env)
    assert r.returncode == 1 and r.stdout == b"", r
    assert r.stderr.decode().splitlines() == [
        f"q25tok: {part}: not root's, or writable by others: root does not map it (uid {USER}, mode 644)"
    ], r.stderr
    assert part.stat().st_size == size  # refused before anything was mapped (the tensor table never opened)
    for p in [b, *b.rglob("*")]:
        os.chown(p, 0, 0, follow_symlinks=False)
    r = run(q25tok, "generate", "--files", "--steps", "1", b / REGIONS, b / TENSORS, "9707", "11")
    assert r.returncode == 0 and r.stdout.startswith(b"step 0 "), r


def test_an_image_larger_than_any_is_not_read(tmp_path, q25tok):
    """Files read whole are bounded by fstat before a byte is read (an image: 256 MiB)."""
    big = tmp_path / "big.q25tokrt"
    with open(big, "wb") as f:
        f.truncate((256 << 20) + 1)  # sparse
    r = run(q25tok, "info", big)
    assert r.returncode == 1 and r.stderr == f"q25tok: {big}: larger than any file of its kind: not read\n".encode()
