/*
 * q25tok load / verify: the model's partitions into their reserved regions, and back.
 * (the command; the library part is q25tok_region.c)
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_open.h"
#include "q25tok.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int q25tok_region_command(int argc, char **argv);
int q25tok_reserved_in_dt(const char *dt, const q25_region *r, char *why, size_t whylen);
void q25tok_table_dir(const char *table, char dir[1024]);
int q25tok_region_ours(const q25_region *r);

/* A region is ours by name and place: its node is q25-region<N>@<base in lower-case hex>, the
 * name q25deploy's plan gives every region it reserves (q25deploy/board/plan.py), at the very
 * base the table gives. Another no-map reservation (a remoteproc carve-out, a PL DMA buffer) is
 * someone else's memory, however it is reserved: never written, never read. */
int q25tok_region_ours(const q25_region *r)
{
    static const char prefix[] = "q25-region";
    const char *p = r->node;
    if (strncmp(p, prefix, sizeof prefix - 1) != 0)
        return 0;
    p += sizeof prefix - 1;
    const char *digits = p;
    while (*p >= '0' && *p <= '9')
        p++;
    if (p == digits || p - digits > 4 || (*digits == '0' && p - digits > 1) || *p++ != '@')
        return 0;
    char want[24];
    snprintf(want, sizeof want, "%llx", (unsigned long long)r->base);
    return strcmp(p, want) == 0;
}

static void hex32(const uint8_t d[32], char out[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[64] = 0;
}

/* the directory of a region table, with its '/': where its partition files are */
void q25tok_table_dir(const char *table, char dir[1024])
{
    snprintf(dir, 1024, "%.1000s", table);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        strcpy(dir, "./");
}

/* the running device tree reserves exactly [base, base+size) as no-map under NODE (also probe's) */
int q25tok_reserved_in_dt(const char *dt, const q25_region *r, char *why, size_t whylen)
{
    char path[1024];
    uint8_t *reg;
    size_t got;
    snprintf(path, sizeof path, "%.800s/reserved-memory/%.127s/reg", dt, r->node);
    if (q25tok_read_private(path, Q25TOK_MAX_PROPERTY, &reg, &got) != 0) {
        snprintf(why, whylen, "the running device tree has no %.127s (boot with the build's reserved-memory.dtsi)",
                 r->node);
        return 0;
    }
    uint64_t base = 0, size = 0;
    for (int i = 0; i < 8 && got >= 16; i++) {
        base = base << 8 | reg[i];
        size = size << 8 | reg[8 + i];
    }
    free(reg);
    if (got != 16 || base != r->base || size != r->size) {
        snprintf(why, whylen, "the running device tree reserves another range for %.127s", r->node);
        return 0;
    }
    snprintf(path, sizeof path, "%.800s/reserved-memory/%.127s/no-map", dt, r->node);
    struct stat st;
    int fd = q25tok_open_regular(path, &st, Q25TOK_MAX_PROPERTY); /* an empty property */
    if (fd >= 0)
        close(fd);
    if (fd < 0) {
        snprintf(why, whylen, "%.127s is not no-map in the running device tree", r->node);
        return 0;
    }
    return 1;
}

/* ---- q25tok load / verify ------------------------------------------------------------ */

enum { EXIT_OK = 0, EXIT_IO = 1, EXIT_USAGE = 2, EXIT_REGION = 6 };
enum { CHUNK = 1 << 20 };  /* file -> bounce buffer -> region, a MiB at a time */

/* Only q25_region_write/q25_region_read touch a mapping: the three functions below hold one
 * and call neither a mem* nor a str* function (tests/runtime/test_region_access.py reads the
 * disassembly, so they stay functions of their own). Errors come back as errno values,
 * worded by the caller. */
#if defined(__GNUC__)
#define HOLDS_A_MAPPING __attribute__((noinline))
#else
#define HOLDS_A_MAPPING
#endif

/* whether n bytes of a and b (both normal memory) differ: a function of its own, called
 * with no mapping in reach */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int chunk_differs(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint64_t any = 0;
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t x, y;
        memcpy(&x, a + k, 8);
        memcpy(&y, b + k, 8);
        any |= x ^ y;
    }
    for (; k < n; k++)
        any |= (uint64_t)(a[k] ^ b[k]);
    return any != 0;
}

/* the partition (f, r->file_size bytes) into the region through buf, then zeros to its end;
 * with back (load --compare), each chunk read back into it at once and compared with the bytes
 * just written (*differ: some did not read back as written) */
HOLDS_A_MAPPING static int copy_in(const q25_region *r, void *mapped, FILE *f, uint8_t *buf, uint8_t *back, int *differ)
{
    for (uint64_t off = 0; off < r->file_size;) {
        size_t want = r->file_size - off < CHUNK ? (size_t)(r->file_size - off) : CHUNK;
        size_t got = fread(buf, 1, want, f);
        if (got != want)
            return ferror(f) ? errno : EIO;
        if (q25_region_write(r, mapped, off, buf, got) != Q25_OK)
            return EINVAL;
        if (back) {
            if (q25_region_read(r, mapped, off, back, got) != Q25_OK)
                return EINVAL;
            *differ |= chunk_differs(buf, back, got);
        }
        off += got;
    }
    if (q25_region_write(r, mapped, r->file_size, NULL, (size_t)(r->size - r->file_size)) != Q25_OK)
        return EINVAL;
    /* for a file standing in for memory (--mem); /dev/mem has no fsync and answers EINVAL,
     * and its stores are uncached (Device memory) anyway */
    (void)msync(mapped, (size_t)r->size, MS_SYNC);
    return 0;
}

/* verify --diff: where a region's bytes differ from its partition file, as byte ranges of
 * the partition (the first MAX_RANGES runs; runs closer than RANGE_GAP bytes are one) */
enum { MAX_RANGES = 8, RANGE_GAP = 64 };
typedef struct {
    FILE *f;             /* the partition file (NULL: no comparison) */
    uint8_t *fbuf;       /* CHUNK bytes of it at a time (normal memory) */
    uint64_t start[MAX_RANGES], end[MAX_RANGES];
    size_t n;            /* ranges kept */
    int more;            /* a run past the MAX_RANGES-th */
    int err;             /* the file could not be read (errno value) */
} q25_diff;

/* the differing bytes of buf and d->fbuf (n bytes at partition offset off) into d's ranges;
 * both buffers are normal memory, compared byte by byte (no mem* call next to a mapping) */
static void diff_chunk(q25_diff *d, uint64_t off, const uint8_t *buf, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (buf[k] == d->fbuf[k])
            continue;
        uint64_t at = off + k;
        if (d->n && at < d->end[d->n - 1] + RANGE_GAP)
            d->end[d->n - 1] = at + 1;
        else if (d->n < MAX_RANGES) {
            d->start[d->n] = at;
            d->end[d->n++] = at + 1;
        } else {
            d->more = 1;
            return;
        }
    }
}

/* the region read back through buf from offset from (0, or the partition's end when copy_in
 * compared it): the digest of the partition's bytes read, and whether the rest is zero (and,
 * with d, where the partition's bytes differ from d->f's) */
HOLDS_A_MAPPING static int read_back(const q25_region *r, const void *mapped, uint64_t from, uint8_t *buf,
                                     uint8_t digest[32], int *zero_tail, q25_diff *d)
{
    q25_sha256_ctx ctx;
    q25_sha256_init(&ctx);
    uint8_t any = 0;
    for (uint64_t off = from; off < r->size;) {
        size_t n = r->size - off < CHUNK ? (size_t)(r->size - off) : CHUNK;
        if (q25_region_read(r, mapped, off, buf, n) != Q25_OK)
            return EINVAL;
        size_t part = off >= r->file_size ? 0 : (r->file_size - off < n ? (size_t)(r->file_size - off) : n);
        q25_sha256_update(&ctx, buf, part);
        if (d && d->f && !d->err && !d->more && part) {
            if (fread(d->fbuf, 1, part, d->f) != part)
                d->err = ferror(d->f) ? errno : EIO;
            else
                diff_chunk(d, off, buf, part);
        }
        for (size_t k = part; k < n; k++)
            any |= buf[k];
        off += n;
    }
    q25_sha256_final(&ctx, digest);
    *zero_tail = any == 0;
    return 0;
}

/* map, load (when f), read back (compared with d's file when d), unmap; 0 or an errno value
 * (*mapped_ok: the map worked). With back (load --compare): each chunk read back as it is
 * written and compared (*same), then only the rest of the region read back (no digest) */
HOLDS_A_MAPPING static int region_pass(const q25_region *r, const char *mem, FILE *f, uint8_t *buf, uint8_t *back,
                                       uint8_t digest[32], int *same, int *zero_tail, int *mapped_ok, q25_diff *d)
{
    void *mapped = q25_region_map(r, mem, f != NULL);
    *mapped_ok = mapped != NULL;
    if (!mapped)
        return errno;
    int differ = 0;
    int e = f ? copy_in(r, mapped, f, buf, back, &differ) : 0;
    if (!e)
        e = read_back(r, mapped, f && back ? r->file_size : 0, buf, digest, zero_tail, d);
    *same = !differ;
    q25_region_unmap(r, mapped);
    return e;
}

/* the partition file, checked against the table's size before anything is written */
static FILE *open_partition(const char *path, uint64_t want, char *why, size_t whylen)
{
    struct stat st;
    FILE *f = q25tok_fopen_regular(path, &st, Q25TOK_ANY_SIZE); /* bounded below: the table's size */
    if (!f) {
        snprintf(why, whylen, "%s: %s", path, q25tok_open_why(errno));
        return NULL;
    }
    if ((uint64_t)st.st_size != want) {
        snprintf(why, whylen, "%s: wrong size: %llu bytes, the table says %llu", path, (unsigned long long)st.st_size,
                 (unsigned long long)want);
        fclose(f);
        return NULL;
    }
    return f;
}

/* verify --diff: each differing range of a region that does not hold its partition, as
 * "differs NODE 0xOFFSET LENGTH" (offsets in the partition: the host maps them to tensors) */
static void print_diff(const q25_region *r, const q25_diff *d, int zero_tail)
{
    if (d->err)
        printf("differs %s unknown %s: %s\n", r->node, r->file, strerror(d->err));
    for (size_t k = 0; k < d->n; k++)
        printf("differs %s 0x%llx %llu\n", r->node, (unsigned long long)d->start[k],
               (unsigned long long)(d->end[k] - d->start[k]));
    if (d->more)
        printf("differs %s more\n", r->node);
    if (!zero_tail)
        printf("differs %s tail not zero after the partition\n", r->node);
    if (!d->err && !d->n && zero_tail)
        printf("differs %s none: the partition file %s is not the table's either\n", r->node, r->file);
}

/* q25tok load|verify [--mem PATH] [--dt DIR] [--compare (load) | --diff (verify)] TABLE */
int q25tok_region_command(int argc, char **argv)
{
    int load = strcmp(argv[1], "load") == 0, want_diff = 0, compare = 0;
    const char *mem = "/dev/mem", *dt = "/sys/firmware/devicetree/base", *table = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--mem") == 0 && i + 1 < argc)
            mem = argv[++i];
        else if (strcmp(argv[i], "--dt") == 0 && i + 1 < argc)
            dt = argv[++i];
        else if (!load && strcmp(argv[i], "--diff") == 0)
            want_diff = 1;
        else if (load && strcmp(argv[i], "--compare") == 0)
            compare = 1;
        else if (!table && argv[i][0] != '-')
            table = argv[i];
        else {
            fprintf(stderr, "usage: q25tok %s [--mem PATH] [--dt DIR]%s TABLE\n", argv[1], load ? " [--compare]" : " [--diff]");
            return EXIT_USAGE;
        }
    }
    if (!table) {
        fprintf(stderr, "usage: q25tok %s [--mem PATH] [--dt DIR]%s TABLE\n", argv[1], load ? " [--compare]" : " [--diff]");
        return EXIT_USAGE;
    }
    uint8_t *text;
    size_t len;
    if (q25tok_read_private(table, Q25TOK_MAX_TABLE, &text, &len) != 0) {
        fprintf(stderr, "q25tok: %s: %s\n", table, q25tok_open_why(errno));
        return EXIT_IO;
    }
    q25_region regions[64];
    size_t n = 0;
    int st = q25_region_table_parse((const char *)text, len, regions, 64, &n);
    free(text);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: %s: not a region table (%s)\n", table, q25_strerror(st));
        return EXIT_REGION;
    }
    uint8_t *buf = malloc(CHUNK), *fbuf = want_diff || compare ? malloc(CHUNK) : NULL;
    if (!buf || ((want_diff || compare) && !fbuf)) {
        free(buf);
        free(fbuf);
        fprintf(stderr, "q25tok: out of memory\n");
        return EXIT_IO;
    }
    char dir[1024];
    q25tok_table_dir(table, dir);
    int worst = EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        q25_region *r = &regions[i];
        char why[1600] = "";
        if (!q25tok_region_ours(r)) {
            printf("region %s base 0x%llx size 0x%llx FOREIGN not a q25deploy region (q25-region<N>@<base>): "
                   "not ours to %s\n", r->node, (unsigned long long)r->base, (unsigned long long)r->size,
                   load ? "write" : "read");
            worst = EXIT_REGION;
            continue;
        }
        if (!q25tok_reserved_in_dt(dt, r, why, sizeof why)) {
            printf("region %s base 0x%llx size 0x%llx REFUSED %s\n", r->node, (unsigned long long)r->base,
                   (unsigned long long)r->size, why);
            worst = EXIT_REGION;
            continue;
        }
        FILE *f = NULL;
        if (load) {
            char path[1400];
            snprintf(path, sizeof path, "%.1023s%.255s", dir, r->file);
            if (!(f = open_partition(path, r->file_size, why, sizeof why))) {
                printf("region %s FAILED %s\n", r->node, why);
                worst = EXIT_IO;
                continue;
            }
        }
        q25_diff diff = {.fbuf = fbuf};
        if (want_diff) {
            char path[1400];
            snprintf(path, sizeof path, "%.1023s%.255s", dir, r->file);
            if (!(diff.f = open_partition(path, r->file_size, why, sizeof why)))
                diff.err = errno ? errno : EIO;
        }
        uint8_t d[32];
        int zero_tail = 0, mapped_ok = 0, same = 0;
        int e = region_pass(r, mem, f, buf, compare ? fbuf : NULL, d, &same, &zero_tail, &mapped_ok,
                            want_diff ? &diff : NULL);
        if (f)
            fclose(f);
        if (diff.f)
            fclose(diff.f);
        if (e) {
            printf("region %s base 0x%llx size 0x%llx FAILED %s %s: %s\n", r->node, (unsigned long long)r->base,
                   (unsigned long long)r->size, mapped_ok ? "loading" : "cannot map", mapped_ok ? r->file : mem,
                   strerror(e));
            worst = EXIT_IO;
            continue;
        }
        char hex[65];
        hex32(d, hex);
        int ok = (compare ? same : strcmp(hex, r->sha256) == 0) && zero_tail;
        printf("region %s base 0x%llx size 0x%llx bytes %llu %s%s %s\n", r->node, (unsigned long long)r->base,
               (unsigned long long)r->size, (unsigned long long)r->file_size, compare ? "compared" : "sha256 ",
               compare ? "" : hex, ok ? (load ? "loaded" : "resident") : "MISMATCH");
        if (!ok && want_diff)
            print_diff(r, &diff, zero_tail);
        if (!ok && worst == EXIT_OK)
            worst = EXIT_REGION;
    }
    free(fbuf);
    free(buf);
    fflush(stdout);
    return worst;
}
