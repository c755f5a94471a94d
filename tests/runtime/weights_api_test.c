/*
 * The weights API's contract (q25tok_dequant.c, q25tok_tensor.c): argument and type checks
 * that leave dst untouched, sizes without overflow on 32- and 64-bit size_t, any source
 * alignment, hand-computed values of a few blocks, and the tensor table reader's edge cases;
 * q25_row_dot (q25tok_rowdot.c, NEON on aarch64) against q25_dequantize: every weight value
 * bit for bit, the sum within 1e-5 of sum |w x| of a float64 dot, and bit for bit
 * q25_dot_f32 of the dequantised row; q25_qrow_dot (q25tok_qrow.c, int8 activations) against a
 * float64 dot of the dequantised row and the activations as q25_act_quantize rounds them
 * (within 1e-5 of the sum of |w x|), a NaN for a block holding an infinity. Bit-exactness against gguf-py is
 * tests/runtime/test_dequant.py's job. Prints "N passed, M failed" (and the row dot's impl).
 */
#include "q25tok.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

static const uint32_t KNOWN[] = {0, 1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 30};

static int known(uint32_t t)
{
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (KNOWN[i] == t)
            return 1;
    return 0;
}

static void types_and_sizes(void)
{
    static uint8_t src[4096];
    static float dst[2048];
    for (uint32_t t = 0; t < 64; t++) {
        uint32_t be = 0, bb = 0;
        for (size_t i = 0; i < 2048; i++)
            dst[i] = -7.0f;
        if (!known(t)) {
            CHECK(q25_dequantize(t, src, 256, dst) == Q25_ERR_UNSUPPORTED);
            CHECK(q25_ggml_block(t, &be, &bb) == Q25_ERR_UNSUPPORTED && q25_ggml_type_name(t) == NULL);
            CHECK(dst[0] == -7.0f && dst[255] == -7.0f);
            continue;
        }
        uint32_t back;
        CHECK(q25_ggml_block(t, &be, &bb) == Q25_OK && be > 0 && bb > 0);
        CHECK(q25_ggml_type_from_name(q25_ggml_type_name(t), &back) == Q25_OK && back == t);
        uint64_t bytes;
        CHECK(q25_ggml_bytes(t, 256, &bytes) == Q25_OK && bytes == 256 / be * bb);
        CHECK(q25_ggml_bytes(t, UINT64_MAX / be * be, &bytes) == (bb > be ? Q25_ERR_ARG : Q25_OK));
        if (be > 1) {
            CHECK(q25_dequantize(t, src, be + 1, dst) == Q25_ERR_ARG && dst[0] == -7.0f);
            CHECK(q25_ggml_bytes(t, be - 1, &bytes) == Q25_ERR_ARG);
        }
        CHECK(q25_dequantize(t, NULL, 256, dst) == Q25_ERR_ARG && q25_dequantize(t, src, 256, NULL) == Q25_ERR_ARG);
        CHECK(q25_dequantize(t, NULL, 0, NULL) == Q25_OK);
        /* any source alignment gives the same values */
        for (size_t i = 0; i < sizeof src; i++)
            src[i] = (uint8_t)(i * 37u + 11u);
        static float a[512], b[512];
        static uint8_t shifted[4096 + 1];
        memcpy(shifted + 1, src, 4096);
        CHECK(q25_dequantize(t, src, 512, a) == Q25_OK && q25_dequantize(t, shifted + 1, 512, b) == Q25_OK);
        CHECK(memcmp(a, b, sizeof a) == 0);
    }
    uint32_t t;
    CHECK(q25_ggml_type_from_name("IQ4_NL", &t) == Q25_ERR_UNSUPPORTED);
    CHECK(q25_ggml_type_from_name(NULL, &t) == Q25_ERR_ARG);
}

static void hand_computed_blocks(void)
{
    float y[256];
    /* Q8_0: d = 0.5 (0x3800), q = -128..-97 */
    uint8_t q8[34] = {0x00, 0x38};
    for (int i = 0; i < 32; i++)
        q8[2 + i] = (uint8_t)(int8_t)(-128 + i);
    CHECK(q25_dequantize(Q25_GGML_Q8_0, q8, 32, y) == Q25_OK && y[0] == -64.0f && y[31] == -48.5f);
    /* Q4_0: d = 2 (0x4000); byte 0x9F: element 0 = (15 - 8) * 2, element 16 = (9 - 8) * 2 */
    uint8_t q4[18] = {0x00, 0x40, 0x9F};
    CHECK(q25_dequantize(Q25_GGML_Q4_0, q4, 32, y) == Q25_OK && y[0] == 14.0f && y[16] == 2.0f && y[1] == -16.0f);
    /* Q4_K: d = 1, dmin = 0.5; sub-block 0 scale 3 min 2; qs[0] = 0x5A: element 0 = 3*10 - 1, element 32
     * (sub-block 1, scale 0 min 0) = 0 */
    uint8_t q4k[144] = {0x00, 0x3C, 0x00, 0x38, 3, 0, 0, 0, 2, 0, 0, 0};
    q4k[16] = 0x5A;
    CHECK(q25_dequantize(Q25_GGML_Q4_K, q4k, 256, y) == Q25_OK && y[0] == 29.0f && y[32] == 0.0f);
    /* F16: the smallest subnormal, -0, a signalling NaN keeps its payload; BF16: 1.0 */
    uint8_t f16[8] = {0x01, 0x00, 0x00, 0x80, 0x01, 0x7C, 0x80, 0x3F};
    uint32_t bits[4];
    CHECK(q25_dequantize(Q25_GGML_F16, f16, 3, y) == Q25_OK);
    memcpy(bits, y, 12);
    CHECK(y[0] == ldexpf(1.0f, -24) && bits[1] == 0x80000000u && bits[2] == 0x7F802000u);
    CHECK(q25_dequantize(Q25_GGML_BF16, f16 + 6, 1, y) == Q25_OK && y[0] == 1.0f);
}

static void tensor_table(void)
{
    const char table[] = "# q25deploy tensor table 1\n"
                         "token_embd.weight 14 Q6_K 0 0x0 420 256,2\r\n"
                         "\n"
                         "  blk.0.attn_norm.weight 0 F32 1 0x2000 1024 256   # a comment\n"
                         "blk.0.odd 16 IQ2_XXS 1 0x3000 66 256\n"
                         "last 8 Q8_0 2 0xabc 34 32";
    q25_tensor t;
    size_t pos = 0;
    int n = 0;
    while (q25_tensor_table_next(table, sizeof table - 1, &pos, &t) == 1)
        n++;
    CHECK(n == 4 && pos == sizeof table - 1);
    CHECK(q25_tensor_find(table, sizeof table - 1, "token_embd.weight", &t) == Q25_OK);
    CHECK(t.type == 14 && t.ne[0] == 256 && t.ne[1] == 2 && t.ne[2] == 1 && t.n_dims == 2 && t.n_elements == 512);
    CHECK(q25_tensor_find(table, sizeof table - 1, "blk.0.attn_norm.weight", &t) == Q25_OK && t.region == 1
          && t.offset == 0x2000 && t.bytes == 1024);
    CHECK(q25_tensor_find(table, sizeof table - 1, "blk.0.odd", &t) == Q25_OK && t.type == 16
          && strcmp(t.type_name, "IQ2_XXS") == 0 && q25_ggml_type_name(t.type) == NULL);
    CHECK(q25_tensor_find(table, sizeof table - 1, "last", &t) == Q25_OK && t.offset == 0xabc);
    uint64_t off, bytes;
    CHECK(q25_tensor_blocks(&t, 0, 1, &off, &bytes) == Q25_OK && off == 0xabc && bytes == 34);
    CHECK(q25_tensor_blocks(&t, 1, 0, &off, &bytes) == Q25_OK && off == 0xabc + 34 && bytes == 0);
    CHECK(q25_tensor_blocks(&t, 1, 1, &off, &bytes) == Q25_ERR_ARG && q25_tensor_blocks(&t, 0, 2, &off, &bytes)
          == Q25_ERR_ARG && q25_tensor_blocks(&t, 0, UINT64_MAX, &off, &bytes) == Q25_ERR_ARG);
    CHECK(q25_tensor_find(table, sizeof table - 1, "token_embd.weight", &t) == Q25_OK
          && q25_tensor_blocks(&t, 1, 1, &off, &bytes) == Q25_OK && off == 210 && bytes == 210);
    CHECK(q25_tensor_find(table, sizeof table - 1, "blk.0.odd", &t) == Q25_OK
          && q25_tensor_blocks(&t, 0, 1, &off, &bytes) == Q25_ERR_UNSUPPORTED);
    CHECK(q25_tensor_find(table, sizeof table - 1, "token_embd", &t) == Q25_ERR_NOT_FOUND);
    CHECK(q25_tensor_find(table, 0, "last", &t) == Q25_ERR_NOT_FOUND);
    CHECK(q25_tensor_find(NULL, 0, "last", &t) == Q25_ERR_ARG);

    char name[200];
    memset(name, 'a', sizeof name);
    for (int len = 126; len <= 128; len++) {
        char line[300];
        int l = snprintf(line, sizeof line, "%.*s 0 F32 0 0x0 4 1\n", len, name);
        CHECK(q25_tensor_find(line, (size_t)l, "x", &t) == (len < Q25_TENSOR_NAME_MAX ? Q25_ERR_NOT_FOUND
                                                                                         : Q25_ERR_TABLE));
    }
    static const char *bad[] = {
        "x 0 F32 0 0x0 4 1 1", "x 0 F32 0 0X0 4 1", "x 0 F32 0 0xA 4 1", "x 0 F32 0 0x0 +4 1",
        "x 0 F32 0 0x0 4 1,", "x 0 F32 0 0x0 4 ,1", "x 0 F32 0 0x0 4", "x 4294967296 F32 0 0x0 4 1",
        "x 0 F32 0 0x0 18446744073709551616 1", "x 0 F32 0 0x1 18446744073709551615 1",
        "x 0 F32 0 0x0 8 1", "x 0 F16 0 0x0 4 1", "x 0 F32 0 0x0 4 4294967296,4294967296,2",
        "x\t0 F32 0 0x0 4 1", "x 0 F32 0 0x00000000000000000 4 1", "x 0 F32 4294967296 0x0 4 1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = q25_tensor_find(bad[i], strlen(bad[i]), "x", &t);
        CHECK(rc == Q25_ERR_TABLE);
        if (rc != Q25_ERR_TABLE)
            fprintf(stderr, "  accepted: %s\n", bad[i]);
    }
}

/* ---- q25_row_dot ------------------------------------------------------------------------ */
static uint32_t rng_state = 12345u;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* a float in [-1, 1) */
static float rnd_unit(void) { return (float)(rnd() >> 8) / 8388608.0f - 1.0f; }

/* an F16 scale: mostly ordinary, sometimes an edge (zero, either sign; the smallest
 * subnormal; the largest subnormal; the smallest normal; the largest finite; one) */
static uint16_t rnd_scale(void)
{
    static const uint16_t EDGE[] = {0x0000, 0x8000, 0x0001, 0x83FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00};
    uint32_t r = rnd();
    if (r % 4 == 0)
        return EDGE[(r >> 8) % (sizeof EDGE / sizeof EDGE[0])];
    return (uint16_t)(((r >> 8) & 0x8000u) | (0x1000u + (r >> 16) % 0x2C00u)); /* 2^-10 .. 2^1 */
}

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* nb random blocks of type t at b (random bytes, then each block's F16 scales set) */
static void random_blocks(uint32_t t, uint8_t *b, size_t nb, uint32_t bb)
{
    for (size_t i = 0; i < nb * bb; i++)
        b[i] = (uint8_t)rnd();
    for (size_t i = 0; i < nb; i++) {
        uint8_t *k = b + i * bb;
        switch (t) {
        case Q25_GGML_Q8_0:
        case Q25_GGML_Q5_0: put16(k, rnd_scale()); break;
        case Q25_GGML_Q4_K:
            put16(k, rnd_scale());
            put16(k + 2, rnd_scale());
            break;
        case Q25_GGML_Q6_K: put16(k + 208, rnd_scale()); break;
        case Q25_GGML_F32: { /* a finite float: random sign, mantissa, exponent in 2^-40..2^40 */
            uint32_t u = (rnd() & 0x807FFFFFu) | ((uint32_t)(127 - 40 + rnd() % 81) << 23);
            if (rnd() % 16 == 0)
                u &= 0x807FFFFFu; /* zero or a subnormal */
            memcpy(k, &u, 4);
            break;
        }
        default: break;
        }
    }
}

static void row_dots(void)
{
    static const uint32_t TYPES[] = {Q25_GGML_F32, Q25_GGML_Q4_K, Q25_GGML_Q5_0, Q25_GGML_Q6_K, Q25_GGML_Q8_0};
    enum { N = 1024 };
    static uint8_t blocks[N * 4 + 1];
    static float w[N], x[N], one[N];
    printf("row dot: %s\n", q25_row_dot_impl());
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const uint32_t t = TYPES[ti];
        uint32_t be, bb;
        CHECK(q25_ggml_block(t, &be, &bb) == Q25_OK);
        int values_ok = 1, sums_ok = 1, same_as_dot = 1;
        for (int trial = 0; trial < 40; trial++) {
            /* F32 rows of any length (a tail past the 16 lanes), others whole blocks */
            const size_t n = t == Q25_GGML_F32 ? 1 + rnd() % N : be * (1 + rnd() % (N / be));
            uint8_t *src = blocks + (trial & 1); /* odd addresses too */
            random_blocks(t, src, n / be, bb);
            if (q25_dequantize(t, src, n, w) != Q25_OK) {
                CHECK(0);
                continue;
            }
            for (size_t i = 0; i < n; i++) {
                float m = trial % 5 == 4 ? 1e6f : 1.0f; /* sometimes large activations */
                x[i] = rnd_unit() * m;
            }
            float got = 0.0f;
            if (q25_row_dot(t, src, n, x, &got) != Q25_OK) {
                CHECK(0);
                continue;
            }
            double ref = 0.0, mag = 0.0;
            for (size_t i = 0; i < n; i++) {
                ref += (double)w[i] * (double)x[i];
                mag += fabs((double)w[i] * (double)x[i]);
            }
            if (!(fabs((double)got - ref) <= 1e-5 * mag)) {
                sums_ok = 0;
                fprintf(stderr, "%s n=%zu: %.9g, float64 %.9g (sum |w x| %.9g)\n", q25_ggml_type_name(t), n,
                        (double)got, ref, mag);
            }
            const float via = q25_dot_f32(w, x, n);
            if (memcmp(&via, &got, sizeof got) != 0) {
                same_as_dot = 0;
                fprintf(stderr, "%s n=%zu: row dot %.9g, q25_dot_f32 %.9g\n", q25_ggml_type_name(t), n, (double)got,
                        (double)via);
            }
            /* every value, bit for bit: the row against one-hot vectors (a few rows per type) */
            if (trial < 4)
                for (size_t i = 0; i < n; i++) {
                    memset(one, 0, n * sizeof one[0]);
                    one[i] = 1.0f;
                    float v = 0.0f;
                    if (q25_row_dot(t, src, n, one, &v) != Q25_OK || !(v == w[i])) {
                        if (values_ok)
                            fprintf(stderr, "%s n=%zu: value %zu is %.9g, dequantised %.9g\n", q25_ggml_type_name(t),
                                    n, i, (double)v, (double)w[i]);
                        values_ok = 0;
                    }
                }
        }
        CHECK(values_ok);
        CHECK(sums_ok);
        CHECK(same_as_dot);
        float v = -7.0f;
        CHECK(q25_row_dot(t, blocks, 0, NULL, &v) == Q25_OK && v == 0.0f);
        if (be > 1)
            CHECK(q25_row_dot(t, blocks, be + 1, x, &v) == Q25_ERR_ARG);
        CHECK(q25_row_dot(t, NULL, be, x, &v) == Q25_ERR_ARG && q25_row_dot(t, blocks, be, NULL, &v) == Q25_ERR_ARG);
        CHECK(q25_row_dot(t, blocks, be, x, NULL) == Q25_ERR_ARG);
    }
    float v = -7.0f;
    CHECK(q25_row_dot(Q25_GGML_Q4_0, blocks, 32, x, &v) == Q25_ERR_UNSUPPORTED && v == -7.0f);
    CHECK(q25_row_dot(99, blocks, 32, x, &v) == Q25_ERR_UNSUPPORTED && v == -7.0f);
    CHECK(q25_dot_f32(w, x, 0) == 0.0f);
}

static void qrow_dots(void)
{
    static const uint32_t TYPES[] = {Q25_GGML_Q4_K, Q25_GGML_Q5_0, Q25_GGML_Q6_K, Q25_GGML_Q8_0};
    enum { N = 1024 };
    static uint8_t blocks[N * 4 + 1], buf[N * 4 + 256];
    static float w[N], x[N], d[N / 32];
    static int8_t q[N];
    static int32_t s[N / 32];
    printf("qrow dot: %s\n", q25_qrow_impl());
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const uint32_t t = TYPES[ti];
        const int fmt = q25_qrow_act(t);
        uint32_t be, bb;
        CHECK(fmt != 0 && q25_ggml_block(t, &be, &bb) == Q25_OK);
        int sums_ok = 1, rounding_ok = 1;
        for (int trial = 0; trial < 40; trial++) {
            const size_t m = 256 * (1 + rnd() % (N / 256)); /* Q8_K takes whole 256s */
            uint8_t *src = blocks + (trial & 1);
            random_blocks(t, src, m / be, bb);
            for (size_t i = 0; i < m; i++)
                x[i] = rnd_unit() * (trial % 5 == 4 ? 1e6f : 1.0f);
            q25_qrow r;
            if (q25_dequantize(t, src, m, w) != Q25_OK || q25_act_quantize(fmt, x, m, q, d, s) != Q25_OK
                || q25_qrow_unpack(t, src, m, buf, sizeof buf, &r) != Q25_OK) {
                CHECK(0);
                continue;
            }
            const float got = q25_qrow_dot(&r, q, d, s);
            double ref = 0.0, mag = 0.0;
            for (size_t i = 0; i < m; i++) {
                const double xa = (double)q[i] * (double)d[i / 32];
                ref += (double)w[i] * xa;
                mag += fabs((double)w[i] * xa);
                if (!(fabs(xa - (double)x[i]) <= 0.6 * fabs((double)d[i / 32])))
                    rounding_ok = 0; /* half a step, and a float16 d's rounding times |q| <= 127 */
            }
            if (!(fabs((double)got - ref) <= 1e-5 * mag)) {
                sums_ok = 0;
                fprintf(stderr, "%s n=%zu: %.9g, float64 %.9g (sum |w x| %.9g)\n", q25_ggml_type_name(t), m,
                        (double)got, ref, mag);
            }
        }
        CHECK(sums_ok);
        CHECK(rounding_ok);
        /* a block holding an infinity: its scale and the product are NaN */
        random_blocks(t, blocks, 256 / be, bb);
        for (size_t i = 0; i < 256; i++)
            x[i] = rnd_unit();
        x[40] = INFINITY;
        q25_qrow r;
        CHECK(q25_act_quantize(fmt, x, 256, q, d, s) == Q25_OK && isnan(d[1]) && q[40] == 0);
        CHECK(q25_qrow_unpack(t, blocks, 256, buf, sizeof buf, &r) == Q25_OK && isnan(q25_qrow_dot(&r, q, d, s)));
        CHECK(q25_qrow_unpack(t, blocks, 256, buf, q25_qrow_size(256) - 1, &r) == Q25_ERR_ARG);
        CHECK(q25_act_quantize(fmt, x, 16, q, d, s) == Q25_ERR_ARG);
    }
    CHECK(q25_qrow_act(Q25_GGML_F32) == 0 && q25_qrow_act(Q25_GGML_Q4_0) == 0);
    q25_qrow r;
    CHECK(q25_qrow_unpack(Q25_GGML_Q4_0, blocks, 32, buf, sizeof buf, &r) == Q25_ERR_UNSUPPORTED);
}

int main(void)
{
    types_and_sizes();
    hand_computed_blocks();
    tensor_table();
    row_dots();
    qrow_dots();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
