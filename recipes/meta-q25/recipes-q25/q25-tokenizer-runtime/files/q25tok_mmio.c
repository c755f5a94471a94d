/*
 * Reading and writing a reserved region through its /dev/mem mapping, as Device memory
 * allows: naturally aligned 8- or 16-byte loads and stores through volatile pointers, and
 * nothing else.
 *
 * A no-map region mapped through /dev/mem is Device-nGnRnE on arm64 (the kernel's
 * phys_mem_access_prot() gives pages outside the linear map pgprot_noncached). On a
 * Cortex-A53 an unaligned access to Device memory, and DC ZVA on it, is an alignment fault:
 * SIGBUS. glibc's memset zeroes with DC ZVA, its memcpy ends a copy with overlapping
 * unaligned stores and memcmp reads unaligned, so none of them may touch a mapping. Every
 * access here is a whole aligned word; the ends of a range that is not word-aligned are a
 * read-modify-write of the word that holds them. The caller's buffer is normal (cached)
 * memory: it is read and written with __builtin_memcpy of a constant 8 bytes, which the
 * compiler turns into one load or store, never a call.
 *
 * GCC turns a loop that copies or clears into a memcpy/memset call at -O2
 * (-ftree-loop-distribute-patterns); the accesses to the mapping are volatile, which it
 * never merges, and the pragma below keeps the other loops loops. tests/runtime's
 * disassembly check holds the built code to this: no call to mem* or str* and no DC ZVA.
 *
 * Q25TOK_MMIO_WIDTH=8 in the environment limits the accesses to 8 bytes (bench/).
 *
 * SPDX-License-Identifier: MIT
 */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif
#define _POSIX_C_SOURCE 200809L
#include "q25tok.h"

#include <stdlib.h>

typedef volatile uint8_t dev8;

static unsigned mmio_width(void)
{
    static unsigned width;
    if (!width) {
        const char *e = getenv("Q25TOK_MMIO_WIDTH");
        width = (e && e[0] == '8' && e[1] == 0) ? 8 : 16;
    }
    return width;
}

const char *q25_region_access(void)
{
    return mmio_width() == 8 ? "8-byte" : "16-byte";
}

static inline uint64_t ld8(const dev8 *p)
{
    return *(const volatile uint64_t *)p;
}

static inline void st8(dev8 *p, uint64_t v)
{
    *(volatile uint64_t *)p = v;
}

/* one 16-byte access: a load/store pair (LDP/STP of two X registers) on aarch64 */
static inline void ld16(const dev8 *p, uint64_t v[2])
{
#if defined(__aarch64__)
    __asm__ volatile("ldp %0, %1, [%2]" : "=r"(v[0]), "=r"(v[1]) : "r"(p) : "memory");
#else
    v[0] = ld8(p);
    v[1] = ld8(p + 8);
#endif
}

static inline void st16(dev8 *p, uint64_t a, uint64_t b)
{
#if defined(__aarch64__)
    __asm__ volatile("stp %0, %1, [%2]" : : "r"(a), "r"(b), "r"(p) : "memory");
#else
    st8(p, a);
    st8(p + 8, b);
#endif
}

/* the bit position of byte i of a word in memory order */
static inline unsigned shift_of(unsigned i)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return 8u * (7u - i);
#else
    return 8u * i;
#endif
}

/* bytes [k, k+n) of the word at p (8-aligned) become src's, or zeros (src NULL) */
static void merge_word(dev8 *p, unsigned k, const uint8_t *src, unsigned n)
{
    uint64_t mask = 0, v = 0;
    for (unsigned i = 0; i < n; i++) {
        mask |= (uint64_t)0xFF << shift_of(k + i);
        if (src)
            v |= (uint64_t)src[i] << shift_of(k + i);
    }
    st8(p, (ld8(p) & ~mask) | v);
}

static void extract_word(const dev8 *p, unsigned k, uint8_t *dst, unsigned n)
{
    uint64_t w = ld8(p);
    for (unsigned i = 0; i < n; i++)
        dst[i] = (uint8_t)(w >> shift_of(k + i));
}

static inline uint64_t src_word(const uint8_t *src)
{
    uint64_t v = 0;
    if (src)
        __builtin_memcpy(&v, src, 8);
    return v;
}

/* write len bytes of src (NULL: zeros) at map + off; map is 16-byte aligned */
static void mmio_write(dev8 *map, uint64_t off, const uint8_t *src, size_t len)
{
    unsigned k = (unsigned)(off & 7);
    if (k && len) {
        unsigned n = len < 8u - k ? (unsigned)len : 8u - k;
        merge_word(map + (off - k), k, src, n);
        off += n, len -= n;
        if (src)
            src += n;
    }
    if (mmio_width() == 16) {
        if ((off & 15) && len >= 8) {
            st8(map + off, src_word(src));
            off += 8, len -= 8;
            if (src)
                src += 8;
        }
        for (; len >= 16; off += 16, len -= 16) {
            st16(map + off, src_word(src), src_word(src ? src + 8 : NULL));
            if (src)
                src += 16;
        }
    }
    for (; len >= 8; off += 8, len -= 8) {
        st8(map + off, src_word(src));
        if (src)
            src += 8;
    }
    if (len)
        merge_word(map + off, 0, src, (unsigned)len);
}

static void mmio_read(const dev8 *map, uint64_t off, uint8_t *dst, size_t len)
{
    unsigned k = (unsigned)(off & 7);
    if (k && len) {
        unsigned n = len < 8u - k ? (unsigned)len : 8u - k;
        extract_word(map + (off - k), k, dst, n);
        off += n, len -= n, dst += n;
    }
    if (mmio_width() == 16) {
        if ((off & 15) && len >= 8) {
            uint64_t w = ld8(map + off);
            __builtin_memcpy(dst, &w, 8);
            off += 8, len -= 8, dst += 8;
        }
        for (; len >= 16; off += 16, len -= 16, dst += 16) {
            uint64_t w[2];
            ld16(map + off, w);
            __builtin_memcpy(dst, &w[0], 8);
            __builtin_memcpy(dst + 8, &w[1], 8);
        }
    }
    for (; len >= 8; off += 8, len -= 8, dst += 8) {
        uint64_t w = ld8(map + off);
        __builtin_memcpy(dst, &w, 8);
    }
    if (len)
        extract_word(map + off, 0, dst, (unsigned)len);
}

static int in_region(const q25_region *r, const void *mapped, uint64_t offset, size_t len)
{
    return r && mapped && ((uintptr_t)mapped & 15) == 0 && r->size % 16 == 0 && offset <= r->size &&
           len <= r->size - offset;
}

int q25_region_read(const q25_region *r, const void *mapped, uint64_t offset, void *dst, size_t len)
{
    if (!in_region(r, mapped, offset, len) || (!dst && len))
        return Q25_ERR_ARG;
    mmio_read((const dev8 *)mapped, offset, dst, len);
    return Q25_OK;
}

int q25_region_write(const q25_region *r, void *mapped, uint64_t offset, const void *src, size_t len)
{
    if (!in_region(r, mapped, offset, len))
        return Q25_ERR_ARG;
    mmio_write((dev8 *)mapped, offset, src, len);
    return Q25_OK;
}
