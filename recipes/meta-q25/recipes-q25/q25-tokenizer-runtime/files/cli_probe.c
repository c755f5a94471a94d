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
#include "cli_weights.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int q25tok_probe_command(int argc, char **argv);

enum { EXIT_IO = 1, EXIT_USAGE = 2, EXIT_ID = 4, EXIT_REGION = 6 };
enum { MAX_IDS = 4096 };
#define EMBEDDING "token_embd.weight"

#if defined(__GNUC__)
#define HOLDS_A_MAPPING __attribute__((noinline))
#else
#define HOLDS_A_MAPPING
#endif

typedef struct probe {
    q25tok_regions rg;
    uint8_t *raw;           /* one row of blocks (normal memory) */
    float *values;          /* and its float32 values */
    size_t cap_bytes, cap_values;
} probe;

/* Only this touches a mapping: it calls no mem* or str* function (test_region_access.py) */
HOLDS_A_MAPPING static int read_blocks(const q25_region *r, const void *mapped, uint64_t off, void *dst, size_t len)
{
    return q25_region_read(r, mapped, off, dst, len);
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
    if (read_blocks(&p->rg.regions[t->region], p->rg.mapped[t->region], off, p->raw, (size_t)bytes) != Q25_OK
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
    if (t->region >= p->rg.n || t->offset + t->bytes > p->rg.regions[t->region].file_size
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
            p.rg.files = 1;
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
    int rc = q25tok_open_regions(&p.rg, tables[0], mem, dt);
    size_t len = 0;
    char *text = rc ? NULL : q25tok_slurp(tables[1], &len);
    if (!rc && !text) {
        fprintf(stderr, "q25tok: %s: %s\n", tables[1], q25tok_open_why(errno));
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
    q25tok_close_regions(&p.rg);
    if (fflush(stdout) != 0 && !rc)
        rc = EXIT_IO;
    return rc;
}
