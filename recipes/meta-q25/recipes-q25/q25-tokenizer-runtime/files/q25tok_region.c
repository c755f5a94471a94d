/*
 * Residency: the model's partitions in the reserved (no-map) DDR regions.
 *
 * The region table (partitions/regions.tab, written by `q25deploy build`) is text, one
 * region per line, '#' starts a comment:
 *
 *     NODE BASE SIZE FILE FILE_SIZE SHA256
 *     q25-region0@13f800000 0x13f800000 0x800000 region_00.bin 5292160 03c1c1af…
 *
 * FILE is relative to the table's directory. A region is reachable through /dev/mem with
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

/* ---- SHA-256 (FIPS 180-4) ---------------------------------------------------------- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const uint8_t *p)
{
    uint32_t w[64];
    for (int i = 0; i < 16; i++)
        w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = hh + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
        uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
}

void q25_sha256(const void *data, size_t len, uint8_t out[32])
{
    uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    const uint8_t *p = (const uint8_t *)data;
    size_t n = len;
    for (; n >= 64; n -= 64, p += 64)
        sha256_block(h, p);
    uint8_t tail[128] = {0};
    memcpy(tail, p, n);
    tail[n] = 0x80;
    size_t blocks = n < 56 ? 1 : 2;
    uint64_t bits = (uint64_t)len * 8;
    for (int i = 0; i < 8; i++)
        tail[blocks * 64 - 1 - i] = (uint8_t)(bits >> (8 * i));
    for (size_t i = 0; i < blocks; i++)
        sha256_block(h, tail + 64 * i);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[4 * i + 3] = (uint8_t)h[i];
    }
}

/* ---- the region table -------------------------------------------------------------- */

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
                   extra) != 6 || strlen(r->sha256) != 64 || fsize > size || size == 0)
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
    int fd = open(mem_path ? mem_path : "/dev/mem", (writable ? O_RDWR : O_RDONLY) | O_SYNC);
    if (fd < 0)
        return NULL;
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

