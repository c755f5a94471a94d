/*
 * The dot product of one weight row with a float32 vector, straight from the row's blocks
 * (q25_row_dot), and the float32 dot product it is defined against (q25_dot_f32).
 *
 * Both sum into 16 float32 lanes: element i goes to lane i % 16, lanes in order of i, then
 * the lanes are added as ((l0 + l4 + l8 + l12 pairwise) ...) below (fold16), then the tail of
 * n % 16 elements. q25_row_dot(type, blocks, x) is bit for bit q25_dot_f32(w, x) of the row w
 * that q25_dequantize gives: each weight value is computed as q25_dequantize computes it (the
 * same float32 products and differences, each rounded on its own), only where it is kept
 * differs (a register, not a float row). So a row dotted with one vector (fused) and a
 * dequantised row dotted with many give the same bits.
 *
 * On aarch64 with NEON (armv8.0-a: no dotprod, no i8mm, no fp16 arithmetic) the lanes are four
 * float32x4 accumulators updated with fused multiply-adds (vfmaq_f32: one rounding per
 * product and sum). The quants are widened int8 -> int16 -> int32; every scalar dequantiser
 * value is an integer (quant times the F16 scale's 11-bit significand, times the sub-block
 * scale; for Q4_K minus the min term, lined up) times a power of two, rounded once, so it is
 * computed as that integer converted to float32 with the power of two added to the exponent
 * bits (scaled(): the same correctly rounded value, one float operation instead of two or
 * three). A block whose scale is an infinity or NaN, or a Q4_K block whose d and dmin are
 * more than 2^9 apart, takes the float path: the same multiplies and subtracts as the scalar
 * dequantiser. Elsewhere (the host) it is portable C: a multiply and an add each rounded,
 * per lane. model_forward.c uses these on aarch64 only; the host's forward pass is its own
 * dot of q25_dequantize's rows.
 *
 * Built with -ffp-contract=off (the Makefile): the compiler must not fuse the dequantiser's
 * multiply and subtract (GCC's NEON intrinsics are plain vector arithmetic it may contract).
 * Reads blocks of any alignment from normal memory (a copy made by q25_region_read), never a
 * mapping. No allocation, no libm.
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
#define ROWDOT_NEON 1
#else
#define ROWDOT_NEON 0
#endif

static int supported(uint32_t type, uint32_t *be, uint32_t *bb)
{
    switch (type) {
    case Q25_GGML_F32:
    case Q25_GGML_Q4_K:
    case Q25_GGML_Q5_0:
    case Q25_GGML_Q6_K:
    case Q25_GGML_Q8_0: return q25_ggml_block(type, be, bb) == Q25_OK;
    default: return 0;
    }
}

#if ROWDOT_NEON
/* ---- NEON: the block scales as q25tok_dequant.c reads them -------------------------- */
typedef struct acc16 {
    float32x4_t a[4]; /* a[k] lane j: elements i with i % 16 == 4k + j */
} acc16;

static inline void acc_zero(acc16 *s)
{
    for (int k = 0; k < 4; k++)
        s->a[k] = vdupq_n_f32(0.0f);
}

/* 16 weights (w[0..3]) times x[0..16) into the lanes */
static inline void fma16(acc16 *s, const float32x4_t w[4], const float *x)
{
    s->a[0] = vfmaq_f32(s->a[0], w[0], vld1q_f32(x));
    s->a[1] = vfmaq_f32(s->a[1], w[1], vld1q_f32(x + 4));
    s->a[2] = vfmaq_f32(s->a[2], w[2], vld1q_f32(x + 8));
    s->a[3] = vfmaq_f32(s->a[3], w[3], vld1q_f32(x + 12));
}

static inline float fold16(const acc16 *s)
{
    float32x4_t v = vaddq_f32(vaddq_f32(s->a[0], s->a[1]), vaddq_f32(s->a[2], s->a[3]));
    float l0 = vgetq_lane_f32(v, 0), l1 = vgetq_lane_f32(v, 1), l2 = vgetq_lane_f32(v, 2), l3 = vgetq_lane_f32(v, 3);
    return (l0 + l1) + (l2 + l3);
}

/* An F16 scale as m * 2^e with m an integer of at most 11 bits (its sign included): exact.
 * 0 for an infinity or a NaN (the caller falls back to the float arithmetic). */
static inline int fp16_int(const uint8_t *p, int32_t *m, int *e)
{
    const uint32_t h = (uint32_t)(p[0] | (p[1] << 8)), E = (h >> 10) & 0x1Fu, M = h & 0x3FFu;
    if (E == 0x1F)
        return 0;
    const int32_t mag = E ? (int32_t)(M | 0x400u) : (int32_t)M;
    *m = (h & 0x8000u) ? -mag : mag;
    *e = E ? (int)E - 25 : -24;
    return 1;
}

/* v * 2^e as float32 for integers v: the conversion (one rounding, none below 2^24) then the
 * exponent moved by e in the bits (exact: every nonzero v * 2^e here is a normal float32,
 * 2^-24 <= |v * 2^e| < 2^37). This is the correctly rounded v * 2^e, which is what the scalar
 * dequantiser's float32 products (and Q4_K's difference) round to, since they are exact
 * products of such integers and powers of two; a zero comes out +0 (the scalar code can give
 * -0: no sum can tell them apart, as a sum started at +0 never holds -0). */
static inline float32x4_t scaled(int32x4_t v, int32x4_t e23)
{
    const uint32x4_t f = vreinterpretq_u32_f32(vcvtq_f32_s32(v));
    return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_s32(vaddq_s32(vreinterpretq_s32_u32(f), e23)),
                                           vtstq_s32(v, v)));
}

/* 16 int16 products q * m (as int32, exact: |q * m| < 2^31 for the callers) times 2^e */
static inline void scaled16(int16x8_t lo, int16x8_t hi, int16_t m, int32x4_t e23, float32x4_t w[4])
{
    w[0] = scaled(vmull_n_s16(vget_low_s16(lo), m), e23);
    w[1] = scaled(vmull_high_n_s16(lo, m), e23);
    w[2] = scaled(vmull_n_s16(vget_low_s16(hi), m), e23);
    w[3] = scaled(vmull_high_n_s16(hi, m), e23);
}

/* 16 integers to float32, exactly (every int8 and uint8 is a float32) */
static inline void widen_s8(int8x16_t q, float32x4_t f[4])
{
    int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    f[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    f[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    f[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    f[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

static inline void widen_u8(uint8x16_t q, float32x4_t f[4])
{
    uint16x8_t lo = vmovl_u8(vget_low_u8(q)), hi = vmovl_high_u8(q);
    f[0] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo)));
    f[1] = vcvtq_f32_u32(vmovl_high_u16(lo));
    f[2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi)));
    f[3] = vcvtq_f32_u32(vmovl_high_u16(hi));
}

/* y = d * q (q25_dequantize: d * (float)q, or (float)q * d: the same product) */
static inline void scale4(float32x4_t f[4], float d)
{
    const float32x4_t vd = vdupq_n_f32(d);
    for (int k = 0; k < 4; k++)
        f[k] = vmulq_f32(vd, f[k]);
}

/* F32: the stored bits are the weights */
static void dot_f32_lanes(acc16 *s, const uint8_t *a, const float *x, size_t n16)
{
    for (size_t i = 0; i < n16; i += 16) {
        float32x4_t w[4];
        for (int k = 0; k < 4; k++)
            w[k] = vreinterpretq_f32_u8(vld1q_u8(a + 4 * (i + 4 * (size_t)k)));
        fma16(s, w, x + i);
    }
}

/* Q8_0 (34 bytes: d, 32 int8): y = (float)q * d */
static void q8_0_lanes(acc16 *s, const uint8_t *b, const float *x, size_t nb)
{
    for (size_t i = 0; i < nb; i++, b += 34, x += 32) {
        int32_t m;
        int e;
        const int exact = fp16_int(b, &m, &e);
        const float d = q25_half(b);
        const int32x4_t e23 = vdupq_n_s32(exact ? e * (1 << 23) : 0);
        for (int c = 0; c < 2; c++) {
            const int8x16_t q = vreinterpretq_s8_u8(vld1q_u8(b + 2 + 16 * c));
            float32x4_t w[4];
            if (exact) /* |q m| <= 128 * 2047 */
                scaled16(vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q), (int16_t)m, e23, w);
            else {
                widen_s8(q, w);
                scale4(w, d);
            }
            fma16(s, w, x + 16 * c);
        }
    }
}

/* Q5_0 (22 bytes: d, qh (32 bits, little-endian), 16 bytes of nibbles): element l (< 16)
 * is the low nibble of byte l with bit l of qh as bit 4, element l + 16 the high nibble with
 * bit l + 16; y = d * (float)(q - 16) */
static void q5_0_lanes(acc16 *s, const uint8_t *b, const float *x, size_t nb)
{
    static const uint8_t BIT[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t bit = vld1q_u8(BIT), m4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(0x10);
    const int8x16_t sixteen = vdupq_n_s8(16);
    for (size_t i = 0; i < nb; i++, b += 22, x += 32) {
        int32_t m;
        int e;
        const int exact = fp16_int(b, &m, &e);
        const float d = q25_half(b);
        const int32x4_t e23 = vdupq_n_s32(exact ? e * (1 << 23) : 0);
        const uint8x16_t qs = vld1q_u8(b + 6);
        for (int c = 0; c < 2; c++) {
            /* bytes 2c, 2c + 1 of qh: bit j of byte 2c + (l >> 3) is element 16c + l's bit 4 */
            const uint8x16_t hb = vcombine_u8(vdup_n_u8(b[2 + 2 * c]), vdup_n_u8(b[3 + 2 * c]));
            const uint8x16_t hi = vandq_u8(vtstq_u8(hb, bit), b4);
            const uint8x16_t nib = c ? vshrq_n_u8(qs, 4) : vandq_u8(qs, m4);
            const int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(nib, hi)), sixteen);
            float32x4_t w[4];
            if (exact) /* |q m| <= 16 * 2047 */
                scaled16(vmovl_s8(vget_low_s8(q)), vmovl_high_s8(q), (int16_t)m, e23, w);
            else {
                widen_s8(q, w);
                scale4(w, d);
            }
            fma16(s, w, x + 16 * c);
        }
    }
}

/* Q4_K (144 bytes: d, dmin, 12 bytes of scales and mins, 128 of nibbles): sub-block g (32
 * elements) is the low (g even) or high (g odd) nibbles of bytes 32 (g / 2) ..; y = p - ml
 * with p = dl * (float)q, dl = d * (float)sc[g], ml = dmin * (float)mn[g] */
static void q4_k_lanes(acc16 *s, const uint8_t *b, const float *x, size_t nb)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F);
    for (size_t i = 0; i < nb; i++, b += 144, x += 256) {
        const float d = q25_half(b), dmin = q25_half(b + 2);
        int sc[8], mn[8];
        q25_k_scale_min(b + 4, sc, mn);
        /* d = md 2^ed, dmin = mm 2^em: with e0 = min(ed, em), y = (q sc md 2^(ed - e0) - mn mm
         * 2^(em - e0)) 2^e0 exactly, an int32 while |ed - em| <= 9 (15 * 63 * 2047 * 2^9 +
         * 63 * 2047 * 2^9 < 2^31); p = dl * q and ml are exact in float32 (at most 21 and 17
         * bits), so the scalar p - ml is that integer times 2^e0, rounded once, as here */
        int32_t md = 0, mm = 0;
        int ed = 0, em = 0;
        int exact = fp16_int(b, &md, &ed) && fp16_int(b + 2, &mm, &em);
        ed = md ? ed : em; /* a zero scale has no exponent to line up */
        em = mm ? em : ed;
        exact = exact && ed - em <= 9 && em - ed <= 9;
        const int e0 = ed < em ? ed : em;
        const int32x4_t e23 = vdupq_n_s32(exact ? e0 * (1 << 23) : 0);
        for (int g2 = 0; g2 < 4; g2++) {
            const uint8x16_t q0 = vld1q_u8(b + 16 + 32 * g2), q1 = vld1q_u8(b + 32 + 32 * g2);
            for (int odd = 0; odd < 2; odd++) {
                const int g = 2 * g2 + odd;
                const float dl = d * (float)sc[g], ml = dmin * (float)mn[g];
                const float32x4_t vdl = vdupq_n_f32(dl), vml = vdupq_n_f32(ml);
                const int32_t a = exact ? md * sc[g] * (1 << (ed - e0)) : 0, mb = exact ? mm * mn[g] * (1 << (em - e0)) : 0;
                const int32x4_t vmb = vdupq_n_s32(mb);
                for (int c = 0; c < 2; c++) {
                    const uint8x16_t q = c ? q1 : q0, nib = odd ? vshrq_n_u8(q, 4) : vandq_u8(q, m4);
                    float32x4_t w[4];
                    if (exact) {
                        const int16x8_t lo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(nib)));
                        const int16x8_t hi = vreinterpretq_s16_u16(vmovl_high_u8(nib));
                        const int32x4_t v[4] = {vmovl_s16(vget_low_s16(lo)), vmovl_high_s16(lo),
                                                vmovl_s16(vget_low_s16(hi)), vmovl_high_s16(hi)};
                        for (int k = 0; k < 4; k++)
                            w[k] = scaled(vsubq_s32(vmulq_n_s32(v[k], a), vmb), e23);
                    } else {
                        widen_u8(nib, w);
                        for (int k = 0; k < 4; k++)
                            w[k] = vsubq_f32(vmulq_f32(vdl, w[k]), vml);
                    }
                    fma16(s, w, x + 32 * g + 16 * c);
                }
            }
        }
    }
}

/* Q6_K (210 bytes: 128 of low nibbles ql, 64 of 2-bit highs qh, 16 int8 scales, d): in half h
 * (128 elements), element 32k + l (l < 32) is nibble k >= 2 of ql[64h + l + 32 (k & 1)] with
 * bits 2k of qh[32h + l] as bits 4, 5; y = dl[8h + 2k + l / 16] * (float)(q - 32), dl[j] =
 * d * (float)scale[j]: the 16-element chunk c of the block has scale dl[c] */
static void q6_k_lanes(acc16 *s, const uint8_t *b, const float *x, size_t nb)
{
    const uint8x16_t m4 = vdupq_n_u8(0x0F), m2 = vdupq_n_u8(0x03);
    const int8x16_t thirty_two = vdupq_n_s8(32);
    for (size_t i = 0; i < nb; i++, b += 210, x += 256) {
        const float d = q25_half(b + 208);
        float dl[16];
        for (int j = 0; j < 16; j++)
            dl[j] = d * (float)(int8_t)b[192 + j];
        int32_t m;
        int e;
        const int exact = fp16_int(b + 208, &m, &e);
        const int32x4_t e23 = vdupq_n_s32(exact ? e * (1 << 23) : 0);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
            const uint8x16_t l0 = vld1q_u8(ql), l1 = vld1q_u8(ql + 16), l2 = vld1q_u8(ql + 32),
                             l3 = vld1q_u8(ql + 48), h0 = vld1q_u8(qh), h1 = vld1q_u8(qh + 16);
            for (int cc = 0; cc < 8; cc++) { /* chunk cc of the half: k = cc / 2, l from 16 (cc & 1) */
                const int k = cc >> 1, upper = cc & 1;
                const uint8x16_t lq = (k & 1) ? (upper ? l3 : l2) : (upper ? l1 : l0);
                const uint8x16_t hq = upper ? h1 : h0;
                const uint8x16_t nib = k >= 2 ? vshrq_n_u8(lq, 4) : vandq_u8(lq, m4);
                uint8x16_t two;
                switch (k) {
                case 0: two = vandq_u8(hq, m2); break;
                case 1: two = vandq_u8(vshrq_n_u8(hq, 2), m2); break;
                case 2: two = vandq_u8(vshrq_n_u8(hq, 4), m2); break;
                default: two = vshrq_n_u8(hq, 6); break;
                }
                const uint8x16_t q = vorrq_u8(nib, vshlq_n_u8(two, 4));
                const int8x16_t q6 = vsubq_s8(vreinterpretq_s8_u8(q), thirty_two);
                float32x4_t w[4];
                if (exact) { /* (q sc) m: |q sc| <= 32 * 128 is an int16, |q sc m| < 2^24 */
                    const int16_t sc = (int8_t)b[192 + 8 * h + cc];
                    scaled16(vmulq_n_s16(vmovl_s8(vget_low_s8(q6)), sc), vmulq_n_s16(vmovl_high_s8(q6), sc),
                             (int16_t)m, e23, w);
                } else {
                    widen_s8(q6, w);
                    scale4(w, dl[8 * h + cc]);
                }
                fma16(s, w, x + 128 * h + 16 * cc);
            }
        }
    }
}

/* the n % 16 elements past the lanes: one running sum, a multiply and an add each rounded */
static float tail_f32(const uint8_t *a, const float *x, size_t n)
{
    float t = 0.0f;
    for (size_t i = 0; i < n; i++) {
        float w, p;
        memcpy(&w, a + 4 * i, sizeof w);
        p = w * x[i];
        t += p;
    }
    return t;
}

static float dot_f32_bytes(const uint8_t *a, const float *x, size_t n)
{
    acc16 s;
    acc_zero(&s);
    const size_t n16 = n & ~(size_t)15;
    dot_f32_lanes(&s, a, x, n16);
    return fold16(&s) + tail_f32(a + 4 * n16, x + n16, n - n16);
}

float q25_dot_f32(const float *a, const float *x, size_t n)
{
    return n ? dot_f32_bytes((const uint8_t *)a, x, n) : 0.0f;
}

int q25_row_dot(uint32_t type, const void *src, size_t n, const float *x, float *out)
{
    uint32_t be, bb;
    if (!supported(type, &be, &bb))
        return Q25_ERR_UNSUPPORTED;
    if (!out || (n && (!src || !x)) || n % be != 0)
        return Q25_ERR_ARG;
    if (type == Q25_GGML_F32) {
        *out = n ? dot_f32_bytes(src, x, n) : 0.0f;
        return Q25_OK;
    }
    acc16 s;
    acc_zero(&s);
    const size_t nb = n / be;
    switch (type) {
    case Q25_GGML_Q8_0: q8_0_lanes(&s, src, x, nb); break;
    case Q25_GGML_Q5_0: q5_0_lanes(&s, src, x, nb); break;
    case Q25_GGML_Q4_K: q4_k_lanes(&s, src, x, nb); break;
    default: q6_k_lanes(&s, src, x, nb); break;
    }
    *out = fold16(&s); /* no tail: every block is a whole number of 16-element chunks */
    return Q25_OK;
}

const char *q25_row_dot_impl(void) { return "neon"; }

#else
/* ---- portable C: the same lanes, a multiply and an add each rounded ------------------- */
static float fold16(const float s[16])
{
    float l[4];
    for (int j = 0; j < 4; j++)
        l[j] = (s[j] + s[4 + j]) + (s[8 + j] + s[12 + j]);
    return (l[0] + l[1]) + (l[2] + l[3]);
}

static void lanes(float s[16], const float *w, const float *x, size_t n16)
{
    for (size_t i = 0; i < n16; i += 16)
        for (int j = 0; j < 16; j++) {
            float p = w[i + j] * x[i + j];
            s[j] += p;
        }
}

float q25_dot_f32(const float *a, const float *x, size_t n)
{
    float s[16] = {0}, t = 0.0f;
    const size_t n16 = n & ~(size_t)15;
    lanes(s, a, x, n16);
    for (size_t i = n16; i < n; i++) {
        float p = a[i] * x[i];
        t += p;
    }
    return fold16(s) + t;
}

int q25_row_dot(uint32_t type, const void *src, size_t n, const float *x, float *out)
{
    uint32_t be, bb;
    if (!supported(type, &be, &bb))
        return Q25_ERR_UNSUPPORTED;
    if (!out || (n && (!src || !x)) || n % be != 0)
        return Q25_ERR_ARG;
    if (type == Q25_GGML_F32) {
        float s[16] = {0}, t = 0.0f, w[16];
        const uint8_t *a = src;
        const size_t n16 = n & ~(size_t)15;
        for (size_t i = 0; i < n16; i += 16) {
            memcpy(w, a + 4 * i, sizeof w);
            lanes(s, w, x + i, 16);
        }
        for (size_t i = n16; i < n; i++) {
            float v, p;
            memcpy(&v, a + 4 * i, sizeof v);
            p = v * x[i];
            t += p;
        }
        *out = fold16(s) + t;
        return Q25_OK;
    }
    float s[16] = {0}, w[256];
    const uint8_t *b = src;
    for (size_t i = 0, nb = n / be; i < nb; i++) {
        if (q25_dequantize(type, b + i * bb, be, w) != Q25_OK)
            return Q25_ERR_ARG;
        lanes(s, w, x + i * be, be);
    }
    *out = fold16(s);
    return Q25_OK;
}

const char *q25_row_dot_impl(void) { return "generic"; }
#endif
