/*
 * q25tok probe [--mem PATH] [--dt DIR | --files] REGION_TABLE TENSOR_TABLE [ID...]
 *
 * Reads back what the board can use of the weights: for every tensor of TENSOR_TABLE
 * (partitions/tensors.tab) its first and last block, and for token_embd.weight the rows of
 * the token ids ID..., through q25_region_read from the reserved regions (or, with --files,
 * from the partition files next to REGION_TABLE), dequantizes them with q25_dequantize and
 * prints one line per tensor:
 *
 *     NAME TYPE_NAME SHA256        sha256 of the float32 values (little-endian bits, every NaN
 *                                  as 0x7fc00000: x86 and ARMv8 make different NaNs of inf*0),
 *                                  in the order first block, last block (when not the first),
 *                                  the rows of ID... in the order given
 *     NAME TYPE_NAME unsupported   a type q25_dequantize does not know (nothing is guessed)
 *
 * The host computes the same digests with gguf-py (q25deploy/packer/probe.py) and deploy's
 * smoke test compares. Before a region is read, the running device tree must reserve it
 * (as for verify). Exit codes: 0 ok, 1 I/O error, 2 usage, 4 an ID past the embedding's
 * rows, 6 a region not reserved or a table that does not fit its regions.
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

int q25tok_probe_command(int argc, char **argv);
/* cli_load.c */
int q25tok_reserved_in_dt(const char *dt, const q25_region *r, char *why, size_t whylen);
void q25tok_table_dir(const char *table, char dir[1024]);
int q25tok_open_regular(const char *path, struct stat *st);
FILE *q25tok_fopen_regular(const char *path, struct stat *st);
int q25tok_region_ours(const q25_region *r);
const char *q25tok_open_why(int e);

enum { EXIT_IO = 1, EXIT_USAGE = 2, EXIT_ID = 4, EXIT_REGION = 6 };
enum { MAX_REGIONS = 64, MAX_IDS = 4096 };
#define EMBEDDING "token_embd.weight"

#if defined(__GNUC__)
#define HOLDS_A_MAPPING __attribute__((noinline))
#else
#define HOLDS_A_MAPPING
#endif

typedef struct probe {
    q25_region regions[MAX_REGIONS];
    void *mapped[MAX_REGIONS];
    size_t n_regions;
    int files;              /* mapped[i] is the partition file's (size file_size), not /dev/mem's */
    uint8_t *raw;           /* one row of blocks (normal memory) */
    float *values;          /* and its float32 values */
    size_t cap_bytes, cap_values;
} probe;

static char *slurp(const char *path, size_t *len)
{
    struct stat st;
    FILE *f = q25tok_fopen_regular(path, &st);
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap || cap >= (64u << 20))
            break;
        char *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int bad = ferror(f) || (buf && n == cap);
    fclose(f);
    if (bad) {
        free(buf);
        errno = errno ? errno : EFBIG;
        return NULL;
    }
    *len = n;
    return buf;
}

/* Only these two touch a mapping: neither calls a mem* or str* function (test_region_access.py) */
HOLDS_A_MAPPING static void *map_region(const q25_region *r, const char *mem)
{
    return q25_region_map(r, mem, 0);
}

HOLDS_A_MAPPING static int read_blocks(const q25_region *r, const void *mapped, uint64_t off, void *dst, size_t len)
{
    return q25_region_read(r, mapped, off, dst, len);
}

/* a partition file mapped read-only, as a region of file_size bytes at offset 0 */
static void *map_file(q25_region *r, const char *dir)
{
    char path[1400];
    snprintf(path, sizeof path, "%.1023s%.255s", dir, r->file);
    struct stat st;
    int fd = q25tok_open_regular(path, &st);
    if (fd < 0 || (uint64_t)st.st_size != r->file_size
        || r->file_size == 0) {
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

static int open_regions(probe *p, const char *table, const char *mem, const char *dt)
{
    size_t len;
    char *text = slurp(table, &len);
    if (!text) {
        fprintf(stderr, "q25tok: %s: %s\n", table, q25tok_open_why(errno));
        return EXIT_IO;
    }
    int st = q25_region_table_parse(text, len, p->regions, MAX_REGIONS, &p->n_regions);
    free(text);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: %s: not a region table (%s)\n", table, q25_strerror(st));
        return EXIT_REGION;
    }
    char dir[1024];
    q25tok_table_dir(table, dir);
    for (size_t i = 0; i < p->n_regions; i++) {
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

static void close_regions(probe *p)
{
    for (size_t i = 0; i < p->n_regions; i++) {
        if (!p->mapped[i])
            continue;
        if (p->files)
            munmap(p->mapped[i], (size_t)p->regions[i].file_size);
        else
            q25_region_unmap(&p->regions[i], p->mapped[i]);
    }
}

/* blocks [first, first+count) of t, dequantized, into the digest */
static int hash_blocks(probe *p, const q25_tensor *t, uint64_t first, uint64_t count, q25_sha256_ctx *ctx)
{
    uint64_t off, bytes;
    uint32_t block_elems, block_bytes;
    if (q25_tensor_blocks(t, first, count, &off, &bytes) != Q25_OK
        || q25_ggml_block(t->type, &block_elems, &block_bytes) != Q25_OK)
        return EXIT_REGION;
    size_t n = (size_t)(bytes / block_bytes * block_elems);
    if (bytes > p->cap_bytes || n > p->cap_values) {
        free(p->raw);
        free(p->values);
        p->cap_bytes = (size_t)bytes;
        p->cap_values = n;
        p->raw = malloc(p->cap_bytes);
        p->values = malloc(n * sizeof(float));
        if (!p->raw || !p->values) {
            p->cap_bytes = p->cap_values = 0;
            return EXIT_IO;
        }
    }
    if (read_blocks(&p->regions[t->region], p->mapped[t->region], off, p->raw, (size_t)bytes) != Q25_OK
        || q25_dequantize(t->type, p->raw, n, p->values) != Q25_OK)
        return EXIT_REGION;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &p->values[i], sizeof bits);
        if ((bits & 0x7fffffffu) > 0x7f800000u) { /* which NaN inf*0 gives is the CPU's choice */
            bits = 0x7fc00000u;
            memcpy(&p->values[i], &bits, sizeof bits);
        }
    }
    q25_sha256_update(ctx, p->values, n * sizeof(float)); /* little-endian on both machines */
    return 0;
}

/* one tensor's line; 0 or an exit code */
static int probe_tensor(probe *p, const q25_tensor *t, const uint32_t *ids, size_t n_ids)
{
    uint32_t block_elems, block_bytes;
    if (q25_ggml_block(t->type, &block_elems, &block_bytes) != Q25_OK) {
        printf("%s %s unsupported\n", t->name, t->type_name);
        return 0;
    }
    if (t->region >= p->n_regions || t->offset + t->bytes > p->regions[t->region].file_size
        || t->bytes < block_bytes) {
        fprintf(stderr, "q25tok: %s lies outside its region's partition\n", t->name);
        return EXIT_REGION;
    }
    q25_sha256_ctx ctx;
    q25_sha256_init(&ctx);
    uint64_t last = t->bytes / block_bytes - 1;
    int rc = hash_blocks(p, t, 0, 1, &ctx);
    if (!rc && last > 0)
        rc = hash_blocks(p, t, last, 1, &ctx);
    if (!rc && strcmp(t->name, EMBEDDING) == 0) {
        uint64_t row_blocks = t->ne[0] / block_elems, rows = t->n_elements / t->ne[0];
        for (size_t i = 0; i < n_ids && !rc; i++) {
            if (ids[i] >= rows) {
                fprintf(stderr, "q25tok: token id %u: %s has %llu rows\n", ids[i], t->name, (unsigned long long)rows);
                return EXIT_ID;
            }
            rc = hash_blocks(p, t, ids[i] * row_blocks, row_blocks, &ctx);
        }
    }
    if (rc)
        return rc;
    uint8_t d[32];
    q25_sha256_final(&ctx, d);
    printf("%s %s ", t->name, t->type_name);
    for (int i = 0; i < 32; i++)
        printf("%02x", d[i]);
    putchar('\n');
    return 0;
}

static int usage(void)
{
    fputs("usage: q25tok probe [--mem PATH] [--dt DIR | --files] REGION_TABLE TENSOR_TABLE [ID...]\n", stderr);
    return EXIT_USAGE;
}

int q25tok_probe_command(int argc, char **argv)
{
    const char *mem = "/dev/mem", *dt = "/sys/firmware/devicetree/base", *tables[2] = {NULL, NULL};
    static uint32_t ids[MAX_IDS];
    static probe p;
    size_t n_ids = 0, n_tables = 0;
    for (int i = 0; i < argc; i++) {
        char *end;
        if (strcmp(argv[i], "--mem") == 0 && i + 1 < argc)
            mem = argv[++i];
        else if (strcmp(argv[i], "--dt") == 0 && i + 1 < argc)
            dt = argv[++i];
        else if (strcmp(argv[i], "--files") == 0)
            p.files = 1;
        else if (n_tables < 2 && argv[i][0] != '-')
            tables[n_tables++] = argv[i];
        else if (n_tables == 2 && n_ids < MAX_IDS && argv[i][0] >= '0' && argv[i][0] <= '9') {
            errno = 0;
            unsigned long v = strtoul(argv[i], &end, 10);
            if (*end || errno || v > UINT32_MAX)
                return usage();
            ids[n_ids++] = (uint32_t)v;
        } else
            return usage();
    }
    if (n_tables != 2)
        return usage();
    int rc = open_regions(&p, tables[0], mem, dt);
    size_t len = 0;
    char *text = rc ? NULL : slurp(tables[1], &len);
    if (!rc && !text) {
        fprintf(stderr, "q25tok: %s: %s\n", tables[1], strerror(errno));
        rc = EXIT_IO;
    }
    size_t pos = 0;
    q25_tensor t;
    int more;
    while (!rc && (more = q25_tensor_table_next(text, len, &pos, &t)) != 0) {
        if (more < 0) {
            fprintf(stderr, "q25tok: %s: not a tensor table (%s)\n", tables[1], q25_strerror(more));
            rc = EXIT_REGION;
        } else
            rc = probe_tensor(&p, &t, ids, n_ids);
    }
    free(text);
    free(p.raw);
    free(p.values);
    close_regions(&p);
    if (fflush(stdout) != 0 && !rc)
        rc = EXIT_IO;
    return rc;
}
