/*
 * ggml's block formats to float32, bit for bit as gguf-py's gguf.quants.dequantize (numpy).
 *
 * Every value is computed in float32 with the operations in numpy's order: for Q4_K
 * y = (d * sc) * q - (dmin * m), each product and the difference rounded to float32 on its
 * own. A fused multiply-add would round once and give other bits, so this file is built with
 * -ffp-contract=off (the Makefile says so; GCC's default for -std=c11, clang's is "on") and
 * the pragma below asks the same of compilers that honour it. F16 scales are widened by bit
 * manipulation (exact, NaN payloads kept, as numpy's half->float). Never -ffast-math here.
 *
 * src is normal memory of any alignment (bytes copied from a region with q25_region_read,
 * not the Device mapping itself); dst is float-aligned. No allocation.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok_internal.h"

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define QK_K 256

static const struct q25_type_traits {
    uint32_t type;
    const char *name;
    uint32_t block_elems, block_bytes;
} TYPES[] = {
    {Q25_GGML_F32, "F32", 1, 4},       {Q25_GGML_F16, "F16", 1, 2},       {Q25_GGML_BF16, "BF16", 1, 2},
    {Q25_GGML_Q4_0, "Q4_0", 32, 18},   {Q25_GGML_Q4_1, "Q4_1", 32, 20},   {Q25_GGML_Q5_0, "Q5_0", 32, 22},
    {Q25_GGML_Q5_1, "Q5_1", 32, 24},   {Q25_GGML_Q8_0, "Q8_0", 32, 34},   {Q25_GGML_Q2_K, "Q2_K", QK_K, 84},
    {Q25_GGML_Q3_K, "Q3_K", QK_K, 110}, {Q25_GGML_Q4_K, "Q4_K", QK_K, 144}, {Q25_GGML_Q5_K, "Q5_K", QK_K, 176},
    {Q25_GGML_Q6_K, "Q6_K", QK_K, 210},
};

static const struct q25_type_traits *traits(uint32_t type)
{
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (TYPES[i].type == type)
            return &TYPES[i];
    return NULL;
}

const char *q25_ggml_type_name(uint32_t type)
{
    const struct q25_type_traits *t = traits(type);
    return t ? t->name : NULL;
}

int q25_ggml_type_from_name(const char *name, uint32_t *type)
{
    if (!name || !type)
        return Q25_ERR_ARG;
    for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
        if (strcmp(TYPES[i].name, name) == 0) {
            *type = TYPES[i].type;
            return Q25_OK;
        }
    return Q25_ERR_UNSUPPORTED;
}

int q25_ggml_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes)
{
    const struct q25_type_traits *t = traits(type);
    if (!t)
        return Q25_ERR_UNSUPPORTED;
    if (block_elems)
        *block_elems = t->block_elems;
    if (block_bytes)
        *block_bytes = t->block_bytes;
    return Q25_OK;
}

int q25_ggml_bytes(uint32_t type, uint64_t n, uint64_t *bytes)
{
    const struct q25_type_traits *t = traits(type);
    if (!t)
        return Q25_ERR_UNSUPPORTED;
    if (!bytes || n % t->block_elems != 0 || n / t->block_elems > UINT64_MAX / t->block_bytes)
        return Q25_ERR_ARG;
    *bytes = n / t->block_elems * t->block_bytes;
    return Q25_OK;
}

/* ---- scalars ------------------------------------------------------------------------- */
static inline uint32_t rd32le(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}


static inline void put_bits(float *dst, uint32_t u) { memcpy(dst, &u, sizeof u); }

/* ---- 32-element blocks --------------------------------------------------------------- */
static void q4_0(const uint8_t *restrict b, float *restrict y)
{
    const float d = q25_half(b);
    for (int l = 0; l < 16; l++) {
        y[l] = d * (float)((b[2 + l] & 0x0F) - 8);
        y[l + 16] = d * (float)((b[2 + l] >> 4) - 8);
    }
}

static void q4_1(const uint8_t *restrict b, float *restrict y)
{
    const float d = q25_half(b), m = q25_half(b + 2);
    for (int l = 0; l < 16; l++) {
        float lo = d * (float)(b[4 + l] & 0x0F), hi = d * (float)(b[4 + l] >> 4);
        y[l] = lo + m;
        y[l + 16] = hi + m;
    }
}

static void q5_0(const uint8_t *restrict b, float *restrict y)
{
    const float d = q25_half(b);
    const uint32_t qh = rd32le(b + 2);
    for (int l = 0; l < 16; l++) {
        int lo = (b[6 + l] & 0x0F) | (int)(((qh >> l) & 1u) << 4);
        int hi = (b[6 + l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
        y[l] = d * (float)(lo - 16);
        y[l + 16] = d * (float)(hi - 16);
    }
}

static void q5_1(const uint8_t *restrict b, float *restrict y)
{
    const float d = q25_half(b), m = q25_half(b + 2);
    const uint32_t qh = rd32le(b + 4);
    for (int l = 0; l < 16; l++) {
        int lo = (b[8 + l] & 0x0F) | (int)(((qh >> l) & 1u) << 4);
        int hi = (b[8 + l] >> 4) | (int)(((qh >> (l + 16)) & 1u) << 4);
        float plo = d * (float)lo, phi = d * (float)hi;
        y[l] = plo + m;
        y[l + 16] = phi + m;
    }
}

static void q8_0(const uint8_t *restrict b, float *restrict y)
{
    const float d = q25_half(b);
    for (int l = 0; l < 32; l++)
        y[l] = (float)(int8_t)b[2 + l] * d;
}

/* ---- 256-element super-blocks -------------------------------------------------------- */
static void q2_k(const uint8_t *restrict b, float *restrict y)
{
    const uint8_t *scales = b, *qs = b + 16;
    const float d = q25_half(b + 80), dmin = q25_half(b + 82);
    /* element 128h + 32s + l: bits 2s of qs[32h + l]; scale and min (j / 16) */
    for (int g = 0; g < 8; g++) {
        const int h = g >> 2, shift = 2 * (g & 3);
        for (int half = 0; half < 2; half++) {
            const int sb = 2 * g + half;
            const float dl = d * (float)(scales[sb] & 0x0F), ml = dmin * (float)(scales[sb] >> 4);
            for (int l = 16 * half; l < 16 * half + 16; l++) {
                float p = dl * (float)((qs[32 * h + l] >> shift) & 3);
                y[32 * g + l] = p - ml;
            }
        }
    }
}

static void q3_k(const uint8_t *restrict b, float *restrict y)
{
    const uint8_t *hmask = b, *qs = b + 32, *sc = b + 96;
    const float d = q25_half(b + 108);
    float dl[16];
    for (int i = 0; i < 16; i++) {
        int lo = (i < 8 ? sc[i] : sc[i - 8] >> 4) & 0x0F;
        int hi = (sc[8 + (i & 3)] >> (2 * (i >> 2))) & 3;
        dl[i] = d * (float)((lo | (hi << 4)) - 32);
    }
    /* element 32g + l (g = 4h + s): bits 2s of qs[32h + l], minus 4 unless bit g of hmask[l] */
    for (int g = 0; g < 8; g++) {
        const int h = g >> 2, shift = 2 * (g & 3);
        for (int l = 0; l < 32; l++) {
            int q = ((qs[32 * h + l] >> shift) & 3) - ((((hmask[l] >> g) & 1) ^ 1) << 2);
            y[32 * g + l] = dl[2 * g + (l >> 4)] * (float)q;
        }
    }
}

static void q45_k(const uint8_t *restrict b, const uint8_t *restrict qh, const uint8_t *restrict qs,
                  float *restrict y)
{
    const float d = q25_half(b), dmin = q25_half(b + 2);
    int sc[8], mn[8];
    q25_k_scale_min(b + 4, sc, mn);
    for (int g = 0; g < 8; g++) {
        const float dl = d * (float)sc[g], ml = dmin * (float)mn[g];
        const uint8_t *q = qs + 32 * (g >> 1);
        const int shift = 4 * (g & 1);
        if (qh)
            for (int l = 0; l < 32; l++) {
                float p = dl * (float)(((q[l] >> shift) & 0x0F) | (((qh[l] >> g) & 1) << 4));
                y[32 * g + l] = p - ml;
            }
        else
            for (int l = 0; l < 32; l++) {
                float p = dl * (float)((q[l] >> shift) & 0x0F);
                y[32 * g + l] = p - ml;
            }
    }
}

static void q4_k(const uint8_t *restrict b, float *restrict y) { q45_k(b, NULL, b + 16, y); }
static void q5_k(const uint8_t *restrict b, float *restrict y) { q45_k(b, b + 16, b + 48, y); }

static void q6_k(const uint8_t *restrict b, float *restrict y)
{
    const float d = q25_half(b + 208);
    float dl[16];
    for (int i = 0; i < 16; i++)
        dl[i] = d * (float)(int8_t)b[192 + i];
    for (int h = 0; h < 2; h++) {
        const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
        const float *s = dl + 8 * h;
        float *o = y + 128 * h;
        /* element 32k + l of the half: low nibble of ql[l + 32 (k & 1)] (high for k >= 2), bits 2k of qh[l] */
        for (int l = 0; l < 32; l++) {
            int is = l >> 4;
            o[l] = s[is] * (float)(((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) - 32);
            o[l + 32] = s[is + 2] * (float)(((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32);
            o[l + 64] = s[is + 4] * (float)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            o[l + 96] = s[is + 6] * (float)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

/* ---- entry point --------------------------------------------------------------------- */
int q25_dequantize(uint32_t type, const void *src, size_t n, float *dst)
{
    const struct q25_type_traits *t = traits(type);
    if (!t)
        return Q25_ERR_UNSUPPORTED;
    if ((n && (!src || !dst)) || n % t->block_elems != 0)
        return Q25_ERR_ARG;
    const uint8_t *s = src;
    void (*block)(const uint8_t *, float *) = NULL;
    switch (type) {
    case Q25_GGML_F32:
        if (n)
            memcpy(dst, s, n * 4); /* the bits as stored: no float load, a NaN keeps its payload */
        return Q25_OK;
    case Q25_GGML_F16:
        for (size_t i = 0; i < n; i++)
            put_bits(dst + i, q25_half_bits(rd16(s + 2 * i)));
        return Q25_OK;
    case Q25_GGML_BF16:
        for (size_t i = 0; i < n; i++)
            put_bits(dst + i, (uint32_t)rd16(s + 2 * i) << 16);
        return Q25_OK;
    case Q25_GGML_Q4_0: block = q4_0; break;
    case Q25_GGML_Q4_1: block = q4_1; break;
    case Q25_GGML_Q5_0: block = q5_0; break;
    case Q25_GGML_Q5_1: block = q5_1; break;
    case Q25_GGML_Q8_0: block = q8_0; break;
    case Q25_GGML_Q2_K: block = q2_k; break;
    case Q25_GGML_Q3_K: block = q3_k; break;
    case Q25_GGML_Q4_K: block = q4_k; break;
    case Q25_GGML_Q5_K: block = q5_k; break;
    case Q25_GGML_Q6_K: block = q6_k; break;
    default: return Q25_ERR_UNSUPPORTED;
    }
    for (size_t i = 0, nb = n / t->block_elems; i < nb; i++)
        block(s + i * t->block_bytes, dst + i * t->block_elems);
    return Q25_OK;
}
