/*
 * Integer dot products of a quantised weight row with int8 activations, as llama.cpp's CPU
 * backend computes a product with a quantised matrix (docs/forward.md, "Activations"):
 *
 *   q25_act_quantize   a float32 vector to int8 with one scale per block: Q8_0 (blocks of 32,
 *                      d = amax / 127 kept as float16) for Q5_0 and Q8_0 weights, Q8_K
 *                      (blocks of 256, d = 1 / (-127 / the value of largest magnitude)) for
 *                      Q4_K and Q6_K weights; round half to even, as llama.cpp's NEON/AVX code
 *   q25_qrow_unpack    a row's blocks to its integer quants, integer sub-block scales and mins
 *                      and float block scales (once per row, however many positions)
 *   q25_qrow_dot       the row times one quantised vector: the products of quants summed in
 *                      int32 (exact), a float32 multiply per block or super-block
 *
 * The host reference (q25deploy/model/activations.py) rounds the activations the same way, so
 * both compute the same real-number product and differ only in the float32 rounding of its
 * sums. A block holding an infinity or a NaN quantises to d = NaN (every product with it is
 * NaN, as on the host). On aarch64 (NEON, armv8.0-a: no dotprod) the int8 products are
 * vmull_s8 widened and pairwise added; on x86-64 SSE2 (its baseline) pmaddwd; elsewhere
 * portable C. All give the same bits: the
 * integer sums are exact and the float arithmetic is the same scalar operations in the same
 * order. Reads blocks of any alignment from normal memory (a copy made by q25_region_read);
 * no allocation, no libm; built with -ffp-contract=off.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok_internal.h"

#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__aarch64__) && defined(__ARM_NEON)
#include <arm_neon.h>
#define QROW_NEON 1
#else
#define QROW_NEON 0
#endif
#if !QROW_NEON && defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h> /* x86-64's baseline: no flag, no CPU check */
#define QROW_SSE2 1
#else
#define QROW_SSE2 0
#endif

enum { QB = 32, QK = 256 };

#if QROW_SSE2
/* int8 lanes to int16 (unpacked with themselves, shifted back down: the sign kept), the low
 * eight and the high eight */
static inline __m128i lo16(__m128i v) { return _mm_srai_epi16(_mm_unpacklo_epi8(v, v), 8); }
static inline __m128i hi16(__m128i v) { return _mm_srai_epi16(_mm_unpackhi_epi8(v, v), 8); }

/* 16 int8 activations at x times their 16 widened weights (w16[0..1]) as four int32 partial
 * sums: pairs added by pmaddwd */
static inline __m128i dot16(const __m128i *w16, const int8_t *x)
{
    const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)x);
    return _mm_add_epi32(_mm_madd_epi16(w16[0], lo16(v)), _mm_madd_epi16(w16[1], hi16(v)));
}
#endif

int q25_qrow_act(uint32_t type)
{
    switch (type) {
    case Q25_GGML_Q5_0:
    case Q25_GGML_Q8_0: return Q25_ACT_Q8_0;
    case Q25_GGML_Q4_K:
    case Q25_GGML_Q6_K: return Q25_ACT_Q8_K;
    default: return 0;
    }
}

const char *q25_qrow_impl(void) { return QROW_NEON ? "neon" : QROW_SSE2 ? "sse2" : "generic"; }

/* ---- activations ---------------------------------------------------------------------- */
/* v to the nearest integer, ties to even, for |v| < 2^22 (ggml's nearest_int) */
static inline int32_t nearest(float v)
{
    const float big = 12582912.0f; /* 1.5 * 2^23: the sum's last bit is the rounded integer */
    const float r = (v + big) - big;
    return (int32_t)r;
}

static inline int clamp8(int32_t v) { return v > 127 ? 127 : v < -128 ? -128 : v; }

/* float32 to IEEE half, round to nearest even (numpy's astype(float16)) */
static uint16_t half_from(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    const uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xFFu, m = x & 0x7FFFFFu;
    if (e == 0xFF)
        return (uint16_t)(sign | 0x7C00u | (m ? 0x200u : 0));
    if (e >= 143) /* 2^16 and above */
        return (uint16_t)(sign | 0x7C00u);
    uint32_t h, rem, halfway;
    if (e >= 113) { /* a normal half: 10 bits kept, 13 rounded off (a carry may reach inf) */
        h = ((e - 112) << 10) | (m >> 13);
        rem = m & 0x1FFFu;
        halfway = 0x1000u;
    } else {
        const uint32_t s = 126 - e; /* the half's subnormal unit is 2^-24 */
        if (s > 24)
            return (uint16_t)sign;
        const uint32_t mm = m | 0x800000u;
        h = mm >> s;
        rem = mm & ((1u << s) - 1);
        halfway = 1u << (s - 1);
    }
    if (rem > halfway || (rem == halfway && (h & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* the Q8_0 scale as its block keeps it: float16, read back */
static float as_half(float f) { return q25_half_value(half_from(f)); }

static int finite_block(const float *x, size_t n, float *amax, float *big)
{
    float a = 0.0f, b = 0.0f;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        const float ax = x[i] < 0 ? -x[i] : x[i];
        ok &= ax <= 3.40282347e38f; /* false for an infinity and a NaN */
        if (ax > a) {
            a = ax;
            b = x[i];
        }
    }
    *amax = a;
    *big = b;
    return ok;
}

static void nan_block(int8_t *q, int32_t *s, float *d, size_t blocks)
{
    const uint32_t qnan = 0x7FC00000u;
    float nan;
    memcpy(&nan, &qnan, sizeof nan);
    memset(q, 0, blocks * QB);
    for (size_t b = 0; b < blocks; b++) {
        d[b] = nan;
        s[b] = 0;
    }
}

static void block_sums(const int8_t *q, int32_t *s, size_t blocks)
{
    for (size_t b = 0; b < blocks; b++) {
        int32_t t = 0;
        for (int i = 0; i < QB; i++)
            t += q[b * QB + i];
        s[b] = t;
    }
}

#if QROW_NEON
/* one Q8_0 block with NEON: the same maximum, products and rounding (vcvtnq: ties to even,
 * saturating narrows: the clamp) as the scalar code; 0 when the block is not finite (a NaN
 * or an infinity makes the vector maximum so) */
static int q8_0_block(const float *x, int8_t *q, float *d, int32_t *s)
{
    float32x4_t v[8], mx = vdupq_n_f32(0.0f);
    for (int k = 0; k < 8; k++) {
        v[k] = vld1q_f32(x + 4 * k);
        mx = vmaxq_f32(mx, vabsq_f32(v[k]));
    }
    const float amax = vmaxvq_f32(mx);
    if (!(amax <= 3.40282347e38f))
        return 0;
    const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
    int16x8_t h[4];
    for (int k = 0; k < 4; k++)
        h[k] = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k], id))),
                            vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * k + 1], id))));
    const int8x16_t q0 = vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1]));
    const int8x16_t q1 = vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3]));
    vst1q_s8(q, q0);
    vst1q_s8(q + 16, q1);
    *s = (int32_t)vaddlvq_s8(q0) + (int32_t)vaddlvq_s8(q1);
    *d = as_half(dd);
    return 1;
}
#endif

int q25_act_quantize(int fmt, const float *x, size_t n, int8_t *q, float *d, int32_t *s)
{
    const size_t per = fmt == Q25_ACT_Q8_0 ? QB : fmt == Q25_ACT_Q8_K ? QK : 0;
    if (!per || n % per || (n && (!x || !q || !d || !s)))
        return Q25_ERR_ARG;
    for (size_t i = 0; i < n; i += per) {
#if QROW_NEON
        if (fmt == Q25_ACT_Q8_0) {
            if (!q8_0_block(x + i, q + i, d + i / QB, s + i / QB))
                nan_block(q + i, s + i / QB, d + i / QB, 1);
            continue;
        }
#endif
        float amax, big;
        if (!finite_block(x + i, per, &amax, &big)) {
            nan_block(q + i, s + i / QB, d + i / QB, per / QB);
            continue;
        }
        if (fmt == Q25_ACT_Q8_0) {
            const float dd = amax / 127.0f, id = dd != 0.0f ? 1.0f / dd : 0.0f;
            for (size_t j = 0; j < QB; j++)
                q[i + j] = (int8_t)clamp8(nearest(x[i + j] * id));
            d[i / QB] = as_half(dd);
        } else {
            const float iscale = big != 0.0f ? -127.0f / big : 0.0f, dd = iscale != 0.0f ? 1.0f / iscale : 0.0f;
            for (size_t j = 0; j < QK; j++) {
                const int32_t v = nearest(iscale * x[i + j]);
                q[i + j] = (int8_t)clamp8(v < 127 ? v : 127);
            }
            for (size_t b = 0; b < QK / QB; b++)
                d[i / QB + b] = dd;
        }
        block_sums(q + i, s + i / QB, per / QB);
    }
    return Q25_OK;
}

/* ---- a row unpacked ------------------------------------------------------------------- */
static size_t up16(size_t v) { return (v + 15) & ~(size_t)15; }

size_t q25_qrow_size(size_t n)
{
    return up16(n) + up16(n * sizeof(int16_t)) + up16(n / 16 * sizeof(int16_t)) + up16(n / QB * sizeof(int16_t))
           + 2 * up16(n / QB * sizeof(float)) + 16;
}

static void view(void *buf, size_t n, q25_qrow *r)
{
    uint8_t *b = (uint8_t *)(((uintptr_t)buf + 15) & ~(uintptr_t)15);
    r->w = (int8_t *)b, b += up16(n);
    r->w16 = (int16_t *)b, b += up16(n * sizeof(int16_t));
    r->sc = (int16_t *)b, b += up16(n / 16 * sizeof(int16_t));
    r->mn = (int16_t *)b, b += up16(n / QB * sizeof(int16_t));
    r->d = (float *)b, b += up16(n / QB * sizeof(float));
    r->dmin = (float *)b;
    r->n = n;
}

static void unpack_q8_0(const uint8_t *p, size_t nb, q25_qrow *r)
{
    for (size_t b = 0; b < nb; b++, p += 34) {
        r->d[b] = q25_half(p);
        memcpy(r->w + b * QB, p + 2, QB);
        r->sc[2 * b] = r->sc[2 * b + 1] = 1;
    }
}

static void unpack_q5_0(const uint8_t *p, size_t nb, q25_qrow *r)
{
    for (size_t b = 0; b < nb; b++, p += 22) {
        r->d[b] = q25_half(p);
        const uint8_t *qs = p + 6;
        int8_t *w = r->w + b * QB;
#if QROW_NEON
        static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
        const uint8x16_t bits = vld1q_u8(bit), sixteen = vdupq_n_u8(16), lo4 = vdupq_n_u8(0x0F);
        const uint8x16_t hb0 = vcombine_u8(vdup_n_u8(p[2]), vdup_n_u8(p[3]));
        const uint8x16_t hb1 = vcombine_u8(vdup_n_u8(p[4]), vdup_n_u8(p[5]));
        const uint8x16_t v = vld1q_u8(qs);
        const uint8x16_t lo = vorrq_u8(vandq_u8(v, lo4), vandq_u8(vtstq_u8(hb0, bits), sixteen));
        const uint8x16_t hi = vorrq_u8(vshrq_n_u8(v, 4), vandq_u8(vtstq_u8(hb1, bits), sixteen));
        vst1q_s8(w, vsubq_s8(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(sixteen)));
        vst1q_s8(w + 16, vsubq_s8(vreinterpretq_s8_u8(hi), vreinterpretq_s8_u8(sixteen)));
#elif QROW_SSE2
        /* the same steps: each high bit picked out of its byte repeated eight times */
        const __m128i bits = _mm_set1_epi64x((long long)0x8040201008040201ULL), lo4 = _mm_set1_epi8(0x0F);
        const __m128i sixteen = _mm_set1_epi8(16);
        const __m128i hb0 = _mm_set_epi64x((long long)(p[3] * 0x0101010101010101ULL), (long long)(p[2] * 0x0101010101010101ULL));
        const __m128i hb1 = _mm_set_epi64x((long long)(p[5] * 0x0101010101010101ULL), (long long)(p[4] * 0x0101010101010101ULL));
        const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)qs);
        const __m128i h0 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(hb0, bits), bits), sixteen);
        const __m128i h1 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(hb1, bits), bits), sixteen);
        const __m128i lo = _mm_or_si128(_mm_and_si128(v, lo4), h0);
        const __m128i hi = _mm_or_si128(_mm_and_si128(_mm_srli_epi16(v, 4), lo4), h1);
        _mm_storeu_si128((__m128i *)(void *)w, _mm_sub_epi8(lo, sixteen));
        _mm_storeu_si128((__m128i *)(void *)(w + 16), _mm_sub_epi8(hi, sixteen));
#else
        const uint32_t qh = (uint32_t)p[2] | (uint32_t)p[3] << 8 | (uint32_t)p[4] << 16 | (uint32_t)p[5] << 24;
        for (int j = 0; j < 16; j++) {
            w[j] = (int8_t)(((qs[j] & 0x0F) | ((qh >> j) & 1u) << 4) - 16);
            w[j + 16] = (int8_t)(((qs[j] >> 4) | ((qh >> (j + 16)) & 1u) << 4) - 16);
        }
#endif
        r->sc[2 * b] = r->sc[2 * b + 1] = 1;
    }
}

static void unpack_q4_k(const uint8_t *p, size_t nk, q25_qrow *r)
{
    for (size_t k = 0; k < nk; k++, p += 144) {
        int sc[8], mn[8];
        r->d[k] = q25_half(p);
        r->dmin[k] = q25_half(p + 2);
        q25_k_scale_min(p + 4, sc, mn);
        const uint8_t *qs = p + 16;
        int8_t *w = r->w + k * QK;
        for (int i = 0; i < 4; i++) {
#if QROW_NEON
            for (int h = 0; h < 2; h++) {
                const uint8x16_t v = vld1q_u8(qs + 32 * i + 16 * h);
                vst1q_s8(w + 64 * i + 16 * h, vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0x0F))));
                vst1q_s8(w + 64 * i + 32 + 16 * h, vreinterpretq_s8_u8(vshrq_n_u8(v, 4)));
            }
#else
            for (int l = 0; l < 32; l++) {
                w[64 * i + l] = (int8_t)(qs[32 * i + l] & 0x0F);
                w[64 * i + 32 + l] = (int8_t)(qs[32 * i + l] >> 4);
            }
#endif
        }
        for (int j = 0; j < 8; j++) {
            r->sc[k * 16 + 2 * j] = r->sc[k * 16 + 2 * j + 1] = (int16_t)sc[j];
            r->mn[k * 8 + j] = (int16_t)mn[j];
        }
    }
}

static void unpack_q6_k(const uint8_t *p, size_t nk, q25_qrow *r)
{
    for (size_t k = 0; k < nk; k++, p += 210) {
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t *scales = (const int8_t *)(p + 192);
        r->d[k] = q25_half(p + 208);
        int8_t *w = r->w + k * QK;
        for (int n = 0; n < 2; n++, ql += 64, qh += 32, w += 128) {
#if QROW_NEON
            const uint8x16_t m4 = vdupq_n_u8(0x0F), m3 = vdupq_n_u8(0x03);
            const int8x16_t off = vdupq_n_s8(32);
            for (int h = 0; h < 2; h++) {
                const uint8x16_t a = vld1q_u8(ql + 16 * h), c = vld1q_u8(ql + 32 + 16 * h), hb = vld1q_u8(qh + 16 * h);
                const uint8x16_t q1 = vorrq_u8(vandq_u8(a, m4), vshlq_n_u8(vandq_u8(hb, m3), 4));
                const uint8x16_t q2 = vorrq_u8(vandq_u8(c, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4));
                const uint8x16_t q3 = vorrq_u8(vshrq_n_u8(a, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4));
                const uint8x16_t q4 = vorrq_u8(vshrq_n_u8(c, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
                vst1q_s8(w + 16 * h, vsubq_s8(vreinterpretq_s8_u8(q1), off));
                vst1q_s8(w + 32 + 16 * h, vsubq_s8(vreinterpretq_s8_u8(q2), off));
                vst1q_s8(w + 64 + 16 * h, vsubq_s8(vreinterpretq_s8_u8(q3), off));
                vst1q_s8(w + 96 + 16 * h, vsubq_s8(vreinterpretq_s8_u8(q4), off));
            }
#else
            for (int l = 0; l < 32; l++) {
                w[l] = (int8_t)(((ql[l] & 0x0F) | ((qh[l] >> 0) & 3) << 4) - 32);
                w[l + 32] = (int8_t)(((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4) - 32);
                w[l + 64] = (int8_t)(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
                w[l + 96] = (int8_t)(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
            }
#endif
        }
        for (int j = 0; j < 16; j++)
            r->sc[k * 16 + j] = scales[j];
    }
}

int q25_qrow_unpack(uint32_t type, const void *src, size_t n, void *buf, size_t cap, q25_qrow *r)
{
    const int fmt = q25_qrow_act(type);
    const size_t per = fmt == Q25_ACT_Q8_K ? QK : QB;
    if (!fmt)
        return Q25_ERR_UNSUPPORTED;
    if (!src || !buf || !r || n == 0 || n % per || cap < q25_qrow_size(n))
        return Q25_ERR_ARG;
    view(buf, n, r);
    const uint8_t *p = src;
    switch (type) {
    case Q25_GGML_Q8_0: unpack_q8_0(p, n / QB, r); break;
    case Q25_GGML_Q5_0: unpack_q5_0(p, n / QB, r); break;
    case Q25_GGML_Q4_K: unpack_q4_k(p, n / QK, r); break;
    default: unpack_q6_k(p, n / QK, r); break;
    }
    r->group = fmt == Q25_ACT_Q8_K ? QK / QB : 1;
    r->has_min = type == Q25_GGML_Q4_K;
#if QROW_SSE2
    /* the weights times their sub-block scale, widened once for every position (|w sc| <= 4096);
     * Q5_0 and Q8_0 scales are 1: widened only */
    const int scaled = r->group != 1 || r->has_min;
    for (size_t i = 0; i < n; i += 16) {
        const __m128i w = _mm_loadu_si128((const __m128i *)(const void *)(r->w + i));
        __m128i wl = lo16(w), wh = hi16(w);
        if (scaled) {
            const __m128i sc = _mm_set1_epi16(r->sc[i / 16]);
            wl = _mm_mullo_epi16(wl, sc);
            wh = _mm_mullo_epi16(wh, sc);
        }
        _mm_store_si128((__m128i *)(void *)(r->w16 + i), wl);
        _mm_store_si128((__m128i *)(void *)(r->w16 + i + 8), wh);
    }
#endif
    return Q25_OK;
}

/* ---- the dot product ------------------------------------------------------------------ */
/* the integer sums of `group` blocks from block b: sum of sc * (w . q) and of mn * s */
static inline void group_sums(const q25_qrow *r, size_t b, const int8_t *q, const int32_t *s, int32_t *isum,
                              int32_t *msum)
{
    int32_t m = 0;
#if QROW_NEON
    int32x4_t acc = vdupq_n_s32(0);
    for (size_t e = b; e < b + r->group; e++) {
        const int8x16_t w0 = vld1q_s8(r->w + e * QB), w1 = vld1q_s8(r->w + e * QB + 16);
        const int8x16_t x0 = vld1q_s8(q + e * QB), x1 = vld1q_s8(q + e * QB + 16);
        const int16x8_t p0 = vmull_s8(vget_low_s8(w0), vget_low_s8(x0)), p1 = vmull_high_s8(w0, x0);
        const int16x8_t p2 = vmull_s8(vget_low_s8(w1), vget_low_s8(x1)), p3 = vmull_high_s8(w1, x1);
        acc = vmlaq_n_s32(acc, vpadalq_s16(vpaddlq_s16(p0), p1), r->sc[2 * e]);
        acc = vmlaq_n_s32(acc, vpadalq_s16(vpaddlq_s16(p2), p3), r->sc[2 * e + 1]);
        m += r->mn[e] * s[e];
    }
    *isum = vaddvq_s32(acc);
#elif QROW_SSE2
    /* the activations widened, times the scaled int16 weights (q25_qrow_unpack) */
    __m128i acc = _mm_setzero_si128();
    const __m128i *w16 = (const __m128i *)(const void *)(r->w16 + b * QB);
    for (size_t i = 0; i < r->group * 2; i++)
        acc = _mm_add_epi32(acc, dot16(w16 + 2 * i, q + b * QB + 16 * i));
    for (size_t e = b; e < b + r->group; e++)
        m += r->mn[e] * s[e];
    acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, _MM_SHUFFLE(1, 0, 3, 2)));
    acc = _mm_add_epi32(acc, _mm_shuffle_epi32(acc, _MM_SHUFFLE(2, 3, 0, 1)));
    *isum = _mm_cvtsi128_si32(acc);
#else
    int32_t t = 0;
    for (size_t e = b; e < b + r->group; e++) {
        const int8_t *w = r->w + e * QB, *x = q + e * QB;
        int32_t a0 = 0, a1 = 0;
        for (int i = 0; i < 16; i++) {
            a0 += w[i] * x[i];
            a1 += w[16 + i] * x[16 + i];
        }
        t += r->sc[2 * e] * a0 + r->sc[2 * e + 1] * a1;
        m += r->mn[e] * s[e];
    }
    *isum = t;
#endif
    *msum = m;
}

#if QROW_NEON
/* one block of 32 (scale 1: Q5_0, Q8_0) as four int32 partial sums */
static inline int32x4_t block4(const int8_t *w, const int8_t *x)
{
    const int8x16_t w0 = vld1q_s8(w), w1 = vld1q_s8(w + 16), x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
    int32x4_t t = vpaddlq_s16(vmull_s8(vget_low_s8(w0), vget_low_s8(x0)));
    t = vpadalq_s16(t, vmull_high_s8(w0, x0));
    t = vpadalq_s16(t, vmull_s8(vget_low_s8(w1), vget_low_s8(x1)));
    return vpadalq_s16(t, vmull_high_s8(w1, x1));
}
#elif QROW_SSE2
/* one block of 32 (scale 1: Q5_0, Q8_0; its weights widened by q25_qrow_unpack) as four
 * int32 partial sums */
static inline __m128i block4(const int16_t *w16, const int8_t *x)
{
    const __m128i *w = (const __m128i *)(const void *)w16;
    return _mm_add_epi32(dot16(w, x), dot16(w + 2, x + 16));
}

/* four blocks' partial sums (t0..t3) to one vector of their totals, block k in lane k */
static inline __m128i totals4(__m128i t0, __m128i t1, __m128i t2, __m128i t3)
{
    const __m128i s01 = _mm_add_epi32(_mm_unpacklo_epi32(t0, t1), _mm_unpackhi_epi32(t0, t1));
    const __m128i s23 = _mm_add_epi32(_mm_unpacklo_epi32(t2, t3), _mm_unpackhi_epi32(t2, t3));
    return _mm_add_epi32(_mm_unpacklo_epi64(s01, s23), _mm_unpackhi_epi64(s01, s23));
}
#endif

/* Q5_0 and Q8_0 rows (one scale per block of 32, no min): block b's d[b] * (wd * isum) goes
 * to float lane b % 4, in block order, and the lanes are added (l0 + l1) + (l2 + l3). NEON
 * and SSE2 do four blocks at once in the four lanes of a vector (the same products and sums:
 * integer sums are exact in any order, and each lane's float steps are the scalar ones). */
static float dot_blocks(const q25_qrow *r, size_t nb, const int8_t *q, const float *d, const int32_t *s)
{
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    size_t b = 0;
#if QROW_NEON
    float32x4_t a4 = vdupq_n_f32(0.0f);
    for (; b + 4 <= nb; b += 4) {
        const int8_t *w = r->w + b * QB, *x = q + b * QB;
        const int32x4_t t0 = block4(w, x), t1 = block4(w + QB, x + QB);
        const int32x4_t t2 = block4(w + 2 * QB, x + 2 * QB), t3 = block4(w + 3 * QB, x + 3 * QB);
        const int32x4_t is = vpaddq_s32(vpaddq_s32(t0, t1), vpaddq_s32(t2, t3));
        a4 = vaddq_f32(a4, vmulq_f32(vld1q_f32(d + b), vmulq_f32(vld1q_f32(r->d + b), vcvtq_f32_s32(is))));
    }
    vst1q_f32(acc, a4);
#elif QROW_SSE2
    __m128 a4 = _mm_setzero_ps();
    for (; b + 4 <= nb; b += 4) {
        const int16_t *w = r->w16 + b * QB;
        const int8_t *x = q + b * QB;
        const __m128i is = totals4(block4(w, x), block4(w + QB, x + QB), block4(w + 2 * QB, x + 2 * QB),
                                   block4(w + 3 * QB, x + 3 * QB));
        a4 = _mm_add_ps(a4, _mm_mul_ps(_mm_loadu_ps(d + b), _mm_mul_ps(_mm_loadu_ps(r->d + b), _mm_cvtepi32_ps(is))));
    }
    _mm_storeu_ps(acc, a4);
#endif
    for (; b < nb; b++) {
        int32_t isum, msum;
        group_sums(r, b, q, s, &isum, &msum);
        acc[b % 4] += d[b] * (r->d[b] * (float)isum);
    }
    return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

float q25_qrow_dot(const q25_qrow *r, const int8_t *q, const float *d, const int32_t *s)
{
    const size_t nb = r->n / QB;
    if (r->group == 1 && !r->has_min)
        return dot_blocks(r, nb, q, d, s);
    float acc = 0.0f;
    for (size_t b = 0, g = 0; b < nb; b += r->group, g++) {
        int32_t isum, msum;
        group_sums(r, b, q, s, &isum, &msum);
        const float v = r->has_min ? r->d[g] * (float)isum - r->dmin[g] * (float)msum : r->d[g] * (float)isum;
        acc += d[b] * v;
    }
    return acc;
}
