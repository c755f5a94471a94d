/*
 * Residency: the model's partitions in the reserved (no-map) DDR regions.
 *
 * The region table (partitions/regions.tab, written by `q25deploy build`) is text, one
 * region per line, '#' starts a comment:
 *
 *     NODE BASE SIZE FILE FILE_SIZE SHA256
 *     q25-region0@13f800000 0x13f800000 0x800000 region_00.bin 5292160 03c1c1af…
 *
 * NODE is a device-tree node name and FILE a plain file name in the table's directory: the
 * build's rules, without '/' (a NODE of ../x would make the device-tree check read a node
 * of the table author's choosing; a FILE of ../x would load a file from anywhere). A region is reachable through /dev/mem with
 * mmap() and O_SYNC (read()/write() of memory without a linear mapping are refused on
 * arm64; a no-map region is not System RAM, so CONFIG_STRICT_DEVMEM allows it). Before a
 * region is written, the running device tree must reserve exactly that range
 * (<dt>/reserved-memory/NODE/reg and no-map): otherwise the range may be RAM the kernel
 * uses, and nothing is written.
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "q25tok.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the region table -------------------------------------------------------------- */

static int is_alnum(char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* a name whose first character passes alnum (or is in first) and the rest alnum or in rest:
 * the build's rules for node and file names (q25deploy/schema.py), which leave out '/' */
static int plain_name(const char *s, const char *first, const char *rest)
{
    if (!*s || !(is_alnum(*s) || strchr(first, *s)))
        return 0;
    for (s++; *s; s++)
        if (!(is_alnum(*s) || strchr(rest, *s)))
            return 0;
    return 1;
}

int q25_region_table_parse(const char *text, size_t len, q25_region *out, size_t cap, size_t *count)
{
    if (!text || !out || !count)
        return Q25_ERR_ARG;
    size_t n = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        char line[512];
        size_t l = (size_t)(eol - p);
        if (l >= sizeof line)
            return Q25_ERR_TABLE;
        memcpy(line, p, l);
        line[l] = 0;
        p = eol + 1;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char *s = line;
        while (*s == ' ' || *s == '\t' || *s == '\r')
            s++;
        if (!*s)
            continue;
        if (n == cap)
            return Q25_ERR_OUT_CAPACITY;
        q25_region *r = &out[n];
        unsigned long long base, size, fsize;
        char extra[2];
        if (sscanf(s, "%127s %llx %llx %255s %llu %64s %1s", r->node, &base, &size, r->file, &fsize, r->sha256,
                   extra) != 6 || strlen(r->sha256) != 64 || fsize > size || size == 0 || base % 16 || size % 16 ||
            !plain_name(r->node, "", ",._+@-") || !plain_name(r->file, "_", "._+-"))
            return Q25_ERR_TABLE;
        r->base = (uint64_t)base;
        r->size = (uint64_t)size;
        r->file_size = (uint64_t)fsize;
        n++;
    }
    *count = n;
    return Q25_OK;
}

/* ---- mapping a region -------------------------------------------------------------- */

void *q25_region_map(const q25_region *r, const char *mem_path, int writable)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!r || page <= 0 || r->base % (uint64_t)page != 0) {
        errno = EINVAL;
        return NULL;
    }
    /* a device, not one of the files cli_open.c reads: its own checks */
    int fd = open(mem_path ? mem_path : "/dev/mem",
                  (writable ? O_RDWR : O_RDONLY) | O_SYNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    struct stat st;
    int e = fstat(fd, &st) != 0 ? errno : !(S_ISCHR(st.st_mode) || S_ISREG(st.st_mode)) ? EINVAL : 0;
    if (e) {
        close(fd);
        errno = e;
        return NULL;
    }
    void *p = mmap(NULL, (size_t)r->size, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd,
                   (off_t)r->base);
    int saved = errno;
    close(fd);
    errno = saved;
    return p == MAP_FAILED ? NULL : p;
}

int q25_region_unmap(const q25_region *r, void *p)
{
    return (r && p) ? munmap(p, (size_t)r->size) : -1;
}

