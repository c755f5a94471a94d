/*
 * q25tok load / verify: the model's partitions into their reserved regions, and back.
 * (the command; the library part is q25tok_region.c)
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "q25tok.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int q25tok_region_command(int argc, char **argv);

static void hex32(const uint8_t d[32], char out[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[d[i] >> 4];
        out[2 * i + 1] = digits[d[i] & 15];
    }
    out[64] = 0;
}

/* the running device tree reserves exactly [base, base+size) as no-map under NODE */
static int reserved_in_dt(const char *dt, const q25_region *r, char *why, size_t whylen)
{
    char path[1024];
    uint8_t reg[16];
    snprintf(path, sizeof path, "%.800s/reserved-memory/%.127s/reg", dt, r->node);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, whylen, "the running device tree has no %.127s (boot with the build's reserved-memory.dtsi)",
                 r->node);
        return 0;
    }
    size_t got = fread(reg, 1, sizeof reg, f);
    fclose(f);
    uint64_t base = 0, size = 0;
    for (int i = 0; i < 8; i++) {
        base = base << 8 | reg[i];
        size = size << 8 | reg[8 + i];
    }
    if (got != 16 || base != r->base || size != r->size) {
        snprintf(why, whylen, "the running device tree reserves another range for %.127s", r->node);
        return 0;
    }
    snprintf(path, sizeof path, "%.800s/reserved-memory/%.127s/no-map", dt, r->node);
    if (access(path, F_OK) != 0) {
        snprintf(why, whylen, "%.127s is not no-map in the running device tree", r->node);
        return 0;
    }
    return 1;
}

/* ---- q25tok load / verify ------------------------------------------------------------ */

enum { EXIT_OK = 0, EXIT_IO = 1, EXIT_USAGE = 2, EXIT_REGION = 6 };

static int read_file(const char *path, uint8_t **data, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return -1;
    }
    *size = (size_t)st.st_size;
    *data = malloc(*size ? *size : 1);
    size_t got = *data ? fread(*data, 1, *size, f) : 0;
    fclose(f);
    if (!*data || got != *size) {
        free(*data);
        return -1;
    }
    return 0;
}

/* q25tok load|verify [--mem PATH] [--dt DIR] TABLE */
int q25tok_region_command(int argc, char **argv)
{
    int load = strcmp(argv[1], "load") == 0;
    const char *mem = "/dev/mem", *dt = "/sys/firmware/devicetree/base", *table = NULL;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--mem") == 0 && i + 1 < argc)
            mem = argv[++i];
        else if (strcmp(argv[i], "--dt") == 0 && i + 1 < argc)
            dt = argv[++i];
        else if (!table && argv[i][0] != '-')
            table = argv[i];
        else {
            fprintf(stderr, "usage: q25tok %s [--mem PATH] [--dt DIR] TABLE\n", argv[1]);
            return EXIT_USAGE;
        }
    }
    if (!table) {
        fprintf(stderr, "usage: q25tok %s [--mem PATH] [--dt DIR] TABLE\n", argv[1]);
        return EXIT_USAGE;
    }
    uint8_t *text;
    size_t len;
    if (read_file(table, &text, &len) != 0) {
        fprintf(stderr, "q25tok: %s: %s\n", table, strerror(errno));
        return EXIT_IO;
    }
    q25_region regions[64];
    size_t n = 0;
    int st = q25_region_table_parse((const char *)text, len, regions, 64, &n);
    free(text);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: %s: not a region table\n", table);
        return EXIT_REGION;
    }
    char dir[1024];
    snprintf(dir, sizeof dir, "%.1000s", table);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        strcpy(dir, "./");
    int worst = EXIT_OK;
    for (size_t i = 0; i < n; i++) {
        q25_region *r = &regions[i];
        char why[256] = "";
        if (!reserved_in_dt(dt, r, why, sizeof why)) {
            printf("region %s base 0x%llx size 0x%llx REFUSED %s\n", r->node, (unsigned long long)r->base,
                   (unsigned long long)r->size, why);
            worst = EXIT_REGION;
            continue;
        }
        uint8_t *mapped = q25_region_map(r, mem, load);
        if (!mapped) {
            printf("region %s base 0x%llx size 0x%llx FAILED cannot map %s: %s\n", r->node,
                   (unsigned long long)r->base, (unsigned long long)r->size, mem, strerror(errno));
            worst = EXIT_IO;
            continue;
        }
        if (load) {
            char path[1400];
            uint8_t *data;
            size_t size;
            snprintf(path, sizeof path, "%.1023s%.255s", dir, r->file);
            if (read_file(path, &data, &size) != 0 || size != r->file_size) {
                printf("region %s FAILED %s: %s\n", r->node, path, size != r->file_size ? "wrong size" : strerror(errno));
                q25_region_unmap(r, mapped);
                worst = EXIT_IO;
                continue;
            }
            memcpy(mapped, data, size);
            memset(mapped + size, 0, (size_t)(r->size - size));  /* the whole region is defined */
            free(data);
            msync(mapped, (size_t)r->size, MS_SYNC);
        }
        /* read back: the partition's digest, and zeros after it */
        uint8_t d[32];
        char hex[65];
        q25_sha256(mapped, (size_t)r->file_size, d);
        hex32(d, hex);
        size_t nonzero = 0;
        for (uint64_t k = r->file_size; k < r->size; k++)
            nonzero += mapped[k] != 0;
        q25_region_unmap(r, mapped);
        int ok = strcmp(hex, r->sha256) == 0 && nonzero == 0;
        printf("region %s base 0x%llx size 0x%llx bytes %llu sha256 %s %s\n", r->node, (unsigned long long)r->base,
               (unsigned long long)r->size, (unsigned long long)r->file_size, hex,
               ok ? (load ? "loaded" : "resident") : "MISMATCH");
        if (!ok && worst == EXIT_OK)
            worst = EXIT_REGION;
    }
    fflush(stdout);
    return worst;
}
