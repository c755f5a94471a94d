/*
 * q25tok internal: little-endian readers, format constants and helpers shared by the
 * library's translation units. Not installed.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef Q25TOK_INTERNAL_H
#define Q25TOK_INTERNAL_H

#include "q25tok.h"

#include <stdint.h>
#include <string.h>

/* ---- little-endian reads, safe for any alignment ------------------------------------ */
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

/* ---- format constants ---------------------------------------------------------------- */
enum {
    HEADER_SIZE = 64,
    ENTRY_SIZE = 48,
    SEC_TOKEN_INDEX = 1,
    SEC_TOKEN_BYTES = 2,
    SEC_MERGES = 3,
    SEC_BYTE_TO_TOKEN = 4,
    SEC_PAIR_INDEX = 5,
    SEC_SPECIALS = 6,
    SEC_CLASSES = 7,
    SEC_METADATA = 8,
    N_KNOWN = 8
};
static const uint32_t record_sizes[N_KNOWN + 1] = {0, 8, 1, 16, 4, 4, 8, 8, 256};

#define NO_TOKEN 0xFFFFFFFFu
#define F_NUMBER 0x002u
#define F_LETTER 0x004u
#define F_WHITESPACE 0x100u
#define F_WLN (F_WHITESPACE | F_LETTER | F_NUMBER)
#define OOR 0xFFFFFFFFu

static inline void set_bit(uint8_t *bm, uint32_t i) { bm[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static inline int get_bit(const uint8_t *bm, uint32_t i) { return (bm[i >> 3] >> (i & 7)) & 1; }

/* the encoder's working state for one call (q25tok_encode.c, q25tok_bpe.c) */
typedef struct enc {
    const q25_encode_view *v;
    const q25_bundle_view *b;
    uint32_t *out;
    size_t out_cap, n_out;
    uint8_t *bpe;        /* BPE work area */
    size_t bpe_size;
    size_t bpe_need;     /* largest BPE area a piece needed */
    int measuring;       /* scratch ran out: only measure from here on */
    uint8_t *cache;      /* piece cache at the end of the BPE area (NULL when off) */
    size_t cache_mask;   /* slots - 1 */
    int err;
    size_t pieces;
} enc;

static inline void emit(enc *c, uint32_t id)
{
    if (c->n_out < c->out_cap)
        c->out[c->n_out] = id;
    c->n_out++;
}

/* piece cache slots in spare scratch: {u32 hash; u8 len; u8 n_ids; u16 pad; bytes; ids} */
#define CACHE_BYTES 24
#define CACHE_IDS 8
#define CACHE_SLOT (8 + CACHE_BYTES + 4 * CACHE_IDS)
#define CACHE_MAX_SLOTS 4096

/* BPE work area of a long piece: per symbol a u32 id, two int32 links and three u64 heap
 * slots, plus 16 bytes */
#define BPE_BYTES_PER_SYMBOL (3 * sizeof(uint32_t) + 3 * sizeof(uint64_t))
/* the links are int32 and positions u32: a piece may have at most INT32_MAX symbols */
#define BPE_MAX_SYMBOLS 0x7FFFFFFFu
/* scratch bytes the BPE of a piece of n symbols needs: 0 up to SMALL_PIECE symbols (done on
 * the stack), n * BPE_BYTES_PER_SYMBOL + 16 otherwise, and SIZE_MAX when that would overflow
 * size_t (32-bit targets: above ~119M symbols) or n exceeds BPE_MAX_SYMBOLS */
size_t q25_bpe_piece_need(uint64_t n);
/* a + b, or SIZE_MAX when that overflows */
static inline size_t q25_add_sat(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

/* llama.cpp's Qwen2 pre-tokenizer over s[a, end), each piece through byte-level BPE */
void q25_pretokenize(enc *c, const uint8_t *s, size_t a, size_t end);
/* min-heap of u64 keys: restore order below i */
void q25_sift_down(uint64_t *hp, size_t n, size_t i);

/* flags of a code point from the image's class table (records ascend from 0) */
uint32_t q25_class_lookup(const uint8_t *classes, uint32_t n, uint32_t cp);

/* ---- ggml's block scales (q25tok_dequant.c, q25tok_rowdot.c) ------------------------ */
/* IEEE half -> float bits, exact (subnormals normalised; Inf/NaN keep sign and payload) */
static inline uint32_t q25_half_bits(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    if (exp == 0x1F)
        return sign | 0x7F800000u | (man << 13);
    if (exp == 0) {
        if (man == 0)
            return sign;
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        return sign | (exp << 23) | ((man & 0x3FFu) << 13);
    }
    return sign | ((exp + 112) << 23) | (man << 13);
}

/* an IEEE half as float */
static inline float q25_half_value(uint16_t h)
{
    uint32_t u = q25_half_bits(h);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* a little-endian IEEE half at p as float */
static inline float q25_half(const uint8_t *p) { return q25_half_value((uint16_t)(p[0] | (p[1] << 8))); }

/* the 6-bit scales and mins of Q4_K / Q5_K: sc[8], mn[8] */
static inline void q25_k_scale_min(const uint8_t *s, int *sc, int *mn)
{
    for (int i = 0; i < 4; i++) {
        sc[i] = s[i] & 0x3F;
        mn[i] = s[4 + i] & 0x3F;
        sc[4 + i] = (s[8 + i] & 0x0F) | ((s[i] >> 2) & 0x30);
        mn[4 + i] = (s[8 + i] >> 4) | ((s[4 + i] >> 2) & 0x30);
    }
}

#endif
