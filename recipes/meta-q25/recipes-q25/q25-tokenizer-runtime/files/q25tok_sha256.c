/*
 * SHA-256 (FIPS 180-4), one-shot and streaming.
 *
 * The compression function uses the CPU's SHA-256 instructions where it has them and
 * portable C otherwise, chosen once at run time:
 *   - aarch64: the ARMv8 Cryptography Extensions (an A53 with crypto, as on the Zynq
 *     UltraScale+), found through getauxval(AT_HWCAP) & HWCAP_SHA2;
 *   - x86-64: the SHA extensions (SHA-NI), found through CPUID leaf 7;
 * so `q25tok receive` hashes what it writes at several times the speed of BusyBox's
 * sha256sum. Q25TOK_SHA256=generic in the environment forces the portable code (tests
 * compare both).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "q25tok.h"

#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define Q25_SHA_X86 1
#include <cpuid.h>
#include <immintrin.h>
#elif defined(__GNUC__) && !defined(__clang__) && defined(__aarch64__) && defined(__linux__)
#define Q25_SHA_ARM 1
#include <arm_neon.h>
#include <sys/auxv.h>
#ifndef HWCAP_SHA2
#define HWCAP_SHA2 (1 << 6) /* the arm64 kernel's bit (asm/hwcap.h) */
#endif
#endif

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

typedef void (*blocks_fn)(uint32_t h[8], const uint8_t *p, size_t blocks);

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void blocks_generic(uint32_t h[8], const uint8_t *p, size_t blocks)
{
    for (; blocks; blocks--, p += 64) {
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
}

#ifdef Q25_SHA_X86
/* The SHA extensions keep the state as two vectors, ABEF and CDGH; sha256rnds2 does two
 * rounds, so each group of four message words (plus their constants) takes two calls. */
__attribute__((target("sha,sse4.1,ssse3"))) static void blocks_x86(uint32_t h[8], const uint8_t *p, size_t blocks)
{
    const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    for (; blocks; blocks--, p += 64) {
        __m128i abef0 = abef, cdgh0 = cdgh, w[4];
        for (int i = 0; i < 16; i++) {
            if (i < 4) {
                w[i] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(p + 16 * i)), bswap);
            } else {
                __m128i t = _mm_add_epi32(_mm_sha256msg1_epu32(w[i & 3], w[(i + 1) & 3]),
                                          _mm_alignr_epi8(w[(i + 3) & 3], w[(i + 2) & 3], 4));
                w[i & 3] = _mm_sha256msg2_epu32(t, w[(i + 3) & 3]);
            }
            __m128i wk = _mm_add_epi32(w[i & 3], _mm_loadu_si128((const __m128i *)&K256[4 * i]));
            cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
            abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
        }
        abef = _mm_add_epi32(abef, abef0);
        cdgh = _mm_add_epi32(cdgh, cdgh0);
    }
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}

static blocks_fn accelerated(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3))
        return NULL;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 29))) /* SHA */
        return NULL;
    return blocks_x86;
}
#elif defined(Q25_SHA_ARM)
__attribute__((target("+crypto"))) static void blocks_arm(uint32_t h[8], const uint8_t *p, size_t blocks)
{
    uint32x4_t abcd = vld1q_u32(&h[0]), efgh = vld1q_u32(&h[4]);
    for (; blocks; blocks--, p += 64) {
        uint32x4_t abcd0 = abcd, efgh0 = efgh, w[4];
        for (int i = 0; i < 16; i++) {
            if (i < 4)
                w[i] = vreinterpretq_u32_u8(vrev32q_u8(vld1q_u8(p + 16 * i)));
            else
                w[i & 3] = vsha256su1q_u32(vsha256su0q_u32(w[i & 3], w[(i + 1) & 3]), w[(i + 2) & 3], w[(i + 3) & 3]);
            uint32x4_t wk = vaddq_u32(w[i & 3], vld1q_u32(&K256[4 * i]));
            uint32x4_t before = abcd;
            abcd = vsha256hq_u32(abcd, efgh, wk);
            efgh = vsha256h2q_u32(efgh, before, wk);
        }
        abcd = vaddq_u32(abcd, abcd0);
        efgh = vaddq_u32(efgh, efgh0);
    }
    vst1q_u32(&h[0], abcd);
    vst1q_u32(&h[4], efgh);
}

static blocks_fn accelerated(void)
{
    return (getauxval(AT_HWCAP) & HWCAP_SHA2) ? blocks_arm : NULL;
}
#else
static blocks_fn accelerated(void)
{
    return NULL;
}
#endif

static blocks_fn pick(void)
{
    const char *force = getenv("Q25TOK_SHA256");
    blocks_fn fast = (force && strcmp(force, "generic") == 0) ? NULL : accelerated();
    return fast ? fast : blocks_generic;
}

const char *q25_sha256_impl(void)
{
    return pick() == blocks_generic ? "generic" : "cpu";
}

void q25_sha256_init(q25_sha256_ctx *ctx)
{
    static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(ctx->h, iv, sizeof iv);
    ctx->total = 0;
    ctx->fill = 0;
    ctx->blocks = (void (*)(void))pick();
}

void q25_sha256_update(q25_sha256_ctx *ctx, const void *data, size_t len)
{
    blocks_fn blocks = (blocks_fn)ctx->blocks;
    const uint8_t *p = (const uint8_t *)data;
    ctx->total += len;
    if (ctx->fill) {
        size_t take = 64 - ctx->fill < len ? 64 - ctx->fill : len;
        memcpy(ctx->buf + ctx->fill, p, take);
        ctx->fill += take;
        p += take;
        len -= take;
        if (ctx->fill < 64)
            return;
        blocks(ctx->h, ctx->buf, 1);
        ctx->fill = 0;
    }
    blocks(ctx->h, p, len / 64);
    p += len / 64 * 64;
    ctx->fill = len % 64;
    memcpy(ctx->buf, p, ctx->fill);
}

void q25_sha256_final(q25_sha256_ctx *ctx, uint8_t out[32])
{
    uint8_t tail[128] = {0};
    uint64_t bits = ctx->total * 8;
    memcpy(tail, ctx->buf, ctx->fill);
    tail[ctx->fill] = 0x80;
    size_t n = ctx->fill < 56 ? 1 : 2;
    for (int i = 0; i < 8; i++)
        tail[n * 64 - 1 - i] = (uint8_t)(bits >> (8 * i));
    ((blocks_fn)ctx->blocks)(ctx->h, tail, n);
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(ctx->h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(ctx->h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(ctx->h[i] >> 8);
        out[4 * i + 3] = (uint8_t)ctx->h[i];
    }
}

void q25_sha256(const void *data, size_t len, uint8_t out[32])
{
    q25_sha256_ctx ctx;
    q25_sha256_init(&ctx);
    q25_sha256_update(&ctx, data, len);
    q25_sha256_final(&ctx, out);
}
