/*
 * q25_region_read / q25_region_write at every offset and length around a word: the result
 * against a plain byte model of the region, the bytes around the range untouched, and
 * ranges outside the region refused. The "region" is an anonymous mapping (normal memory):
 * what this checks is the arithmetic; that only aligned words touch a real mapping is
 * checked on the emulated board and in the disassembly (tests/runtime/test_region_access.py).
 *
 * usage: region_test   (prints "N passed, 0 failed"; exit 1 on a failure)
 */
#define _DEFAULT_SOURCE
#include "q25tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static int passed, failed;
#define CHECK(c) ((c) ? (void)passed++ : (void)(failed++, fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #c)))

enum { SIZE = 4096 };

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)((i * 131u + seed * 17u + 7u) ^ (i >> 5));
}

int main(void)
{
    q25_region r;
    memset(&r, 0, sizeof r);
    r.size = SIZE;
    uint8_t *map = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return 2;
    static uint8_t model[SIZE], src[200], got[200 + 16];
    unsigned seed = 0;
    for (uint64_t off = 0; off < 40; off++) {
        for (size_t len = 0; len <= 70; len++) {
            uint64_t where = off + (off & 1 ? 1000 : 2048);  /* odd and even bases into the page */
            fill(map, SIZE, ++seed);
            memcpy(model, map, SIZE);
            fill(src, sizeof src, seed * 3u);
            CHECK(q25_region_write(&r, map, where, src, len) == Q25_OK);
            memcpy(model + where, src, len);
            CHECK(memcmp(map, model, SIZE) == 0);
            memset(got, 0xEE, sizeof got);
            CHECK(q25_region_read(&r, map, where, got, len) == Q25_OK);
            CHECK(memcmp(got, src, len) == 0 && got[len] == 0xEE);
            CHECK(q25_region_write(&r, map, where, NULL, len) == Q25_OK);  /* zeros */
            memset(model + where, 0, len);
            CHECK(memcmp(map, model, SIZE) == 0);
        }
    }
    /* a long odd copy from an odd source address, and an odd tail up to the region's end */
    static uint8_t big[3002];
    fill(big, sizeof big, 99);
    CHECK(q25_region_write(&r, map, 5, big + 1, 3000) == Q25_OK);
    CHECK(memcmp(map + 5, big + 1, 3000) == 0);
    CHECK(q25_region_write(&r, map, 3005, NULL, SIZE - 3005) == Q25_OK);
    int zero = 1;
    for (size_t i = 3005; i < SIZE; i++)
        zero &= map[i] == 0;
    CHECK(zero);
    memset(big, 0, sizeof big);
    CHECK(q25_region_read(&r, map, 3, big + 3, 2999) == Q25_OK);
    CHECK(memcmp(big + 3, map + 3, 2999) == 0);
    /* outside the region, or a misaligned mapping: refused, nothing written */
    memcpy(model, map, SIZE);
    CHECK(q25_region_write(&r, map, SIZE - 3, src, 4) == Q25_ERR_ARG);
    CHECK(q25_region_write(&r, map, SIZE + 1, src, 0) == Q25_ERR_ARG);
    CHECK(q25_region_write(&r, map, UINT64_MAX, src, 2) == Q25_ERR_ARG);
    CHECK(q25_region_read(&r, map, SIZE, got, 1) == Q25_ERR_ARG);
    CHECK(q25_region_read(&r, map + 8, 0, got, 1) == Q25_ERR_ARG);
    CHECK(q25_region_write(NULL, map, 0, src, 1) == Q25_ERR_ARG);
    CHECK(q25_region_read(&r, map, 0, NULL, 1) == Q25_ERR_ARG);
    CHECK(q25_region_write(&r, map, SIZE, src, 0) == Q25_OK);
    CHECK(memcmp(map, model, SIZE) == 0);
    r.size = SIZE - 8;  /* a region the loader could not end with a whole 16-byte word */
    CHECK(q25_region_write(&r, map, 0, src, 1) == Q25_ERR_ARG);
    munmap(map, SIZE);
    printf("%s access: %d passed, %d failed\n", q25_region_access(), passed, failed);
    return failed ? 1 : 0;
}
