"""DDR with a stuck address line, for the load's read-back: an ``LD_PRELOAD`` library that
aliases one page of every writable shared mapping of 2 pages or more (q25tok's map of a region
for writing) onto the page before it, so that what is written at page K + 1 lands on page K
(K: ``Q25_STUCK_PAGE``, default 0). Reads through another mapping (q25tok verify, generate
--mem) then see page K + 1's bytes at page K."""

from __future__ import annotations

import subprocess
from pathlib import Path

from requirements import need_program

SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    mmap_fn real = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
    void *p = real(addr, len, prot, flags, fd, off);
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const char *k = getenv("Q25_STUCK_PAGE");
    const size_t at = k ? (size_t)strtoull(k, NULL, 0) : 0;
    if (p != MAP_FAILED && fd >= 0 && (prot & PROT_WRITE) && (flags & MAP_SHARED) && len >= (at + 2) * page)
        real((char *)p + (at + 1) * page, page, prot, flags | MAP_FIXED, fd, off + (off_t)(at * page));
    return p;
}
void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) { return mmap(addr, len, prot, flags, fd, off); }
"""


def stuck_library(tmp_path: Path) -> Path:
    """The library, built with this machine's cc."""
    cc = need_program("cc", "Debian: gcc")
    src, lib = tmp_path / "stuck.c", tmp_path / "stuck.so"
    src.write_text(SOURCE)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], check=True)
    return lib


def stuck_q25tok(tmp_path: Path, q25tok: Path, page: int) -> Path:
    """A q25tok whose ``load`` runs on that memory (page ``page`` aliased by the next one);
    every other command is the real one's."""
    lib = stuck_library(tmp_path)
    src, exe = tmp_path / "stuck_q25tok.c", tmp_path / "stuck" / "q25tok"
    exe.parent.mkdir()
    src.write_text(
        "#include <stdlib.h>\n#include <string.h>\n#include <unistd.h>\nint main(int c, char **v) {\n"
        f'  if (c > 1 && !strcmp(v[1], "load")) {{ setenv("LD_PRELOAD", "{lib}", 1); setenv("Q25_STUCK_PAGE", "{page}", 1); }}\n'
        f'  execv("{q25tok}", v); return 127; }}\n'
    )
    subprocess.run(["cc", str(src), "-o", str(exe)], check=True)
    return exe
