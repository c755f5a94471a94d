/*
 * The regions of a region table, mapped for reading: the reserved DDR through /dev/mem, or
 * the partition files (--files). See cli_weights.h.
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_weights.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

enum { EXIT_IO = 1, EXIT_REGION = 6 };

#if defined(__GNUC__)
#define HOLDS_A_MAPPING __attribute__((noinline))
#else
#define HOLDS_A_MAPPING
#endif

char *q25tok_slurp(const char *path, size_t *len)
{
    uint8_t *data;
    return q25tok_read_private(path, Q25TOK_MAX_TEXT, &data, len) == 0 ? (char *)data : NULL;
}

/* Only these two touch a mapping: neither calls a mem* or str* function (test_region_access.py) */
HOLDS_A_MAPPING static void *map_region(const q25_region *r, const char *mem)
{
    return q25_region_map(r, mem, 0);
}

/* a partition file mapped read-only, as a region of file_size bytes at offset 0: weights are
 * values, never indices, but a mapping shows whatever is written to the file later (and one
 * cut short faults), so as root only a file no one else can write (cli_open.h) */
static void *map_file(q25_region *r, const char *dir)
{
    char path[1400];
    snprintf(path, sizeof path, "%.1023s%.255s", dir, r->file);
    struct stat st;
    int fd = q25tok_open_regular(path, &st, Q25TOK_ANY_SIZE);
    if (fd >= 0 && !q25tok_root_may_map(&st)) {
        fprintf(stderr, "q25tok: %s: %s (uid %lu, mode %03o)\n", path, q25tok_open_why(EPERM),
                (unsigned long)st.st_uid, (unsigned)(st.st_mode & 0777));
        close(fd);
        return NULL;
    }
    if (fd < 0 || (uint64_t)st.st_size != r->file_size || r->file_size == 0) {
        if (fd >= 0)
            close(fd);
        fprintf(stderr, "q25tok: %s: missing, not a regular file, or not the table's %llu bytes\n", path,
                (unsigned long long)r->file_size);
        return NULL;
    }
    void *p = mmap(NULL, (size_t)r->file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    r->size = r->file_size; /* q25_region_read's bound: the file */
    return p == MAP_FAILED ? NULL : p;
}

int q25tok_open_regions(q25tok_regions *p, const char *table, const char *mem, const char *dt)
{
    size_t len;
    char *text = q25tok_slurp(table, &len);
    if (!text) {
        fprintf(stderr, "q25tok: %s: %s\n", table, q25tok_open_why(errno));
        return EXIT_IO;
    }
    int st = q25_region_table_parse(text, len, p->regions, Q25TOK_MAX_REGIONS, &p->n);
    free(text);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: %s: not a region table (%s)\n", table, q25_strerror(st));
        return EXIT_REGION;
    }
    char dir[1024];
    q25tok_table_dir(table, dir);
    for (size_t i = 0; i < p->n; i++) {
        q25_region *r = &p->regions[i];
        char why[1600];
        if (!q25tok_region_ours(r)) {
            fprintf(stderr, "q25tok: region %s: not a q25deploy region (q25-region<N>@<base>): not ours to read\n",
                    r->node);
            return EXIT_REGION;
        }
        if (!p->files && !q25tok_reserved_in_dt(dt, r, why, sizeof why)) {
            fprintf(stderr, "q25tok: region %s: %s\n", r->node, why);
            return EXIT_REGION;
        }
        p->mapped[i] = p->files ? map_file(r, dir) : map_region(r, mem);
        if (!p->mapped[i]) {
            if (!p->files)
                fprintf(stderr, "q25tok: region %s: cannot map %s: %s\n", r->node, mem, strerror(errno));
            return EXIT_IO;
        }
    }
    return 0;
}

void q25tok_close_regions(q25tok_regions *p)
{
    for (size_t i = 0; i < p->n; i++) {
        if (!p->mapped[i])
            continue;
        if (p->files)
            munmap(p->mapped[i], (size_t)p->regions[i].file_size);
        else
            q25_region_unmap(&p->regions[i], p->mapped[i]);
    }
}
