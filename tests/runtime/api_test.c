/*
 * C API checks of the q25tok runtime, compiled with ASan+UBSan by tests/test_runtime.py:
 *   api_test IMAGE
 * Prints "N passed, N failed" and exits non-zero on any failure. Also built for armhf and
 * run under qemu-arm (size_t of 32 bits, as on an armv7 board).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "q25tok.h"
#include "q25tok_internal.h" /* q25_bpe_piece_need, q25_add_sat: the piece-length bound */

#include "check.h"

static uint8_t *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n + 1);
    if (p && fread(p + 1, 1, *n, f) != *n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    return p; /* the image starts at p + 1: deliberately unaligned */
}

static const char *TEXT = "Hello <|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd, world 12345 don't\t\t  x<|im_end|> "
                          "<tool_call>\xff\xc1\x81 tail";

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    size_t size;
    uint8_t *buf = read_file(argv[1], &size);
    if (!buf)
        return 2;
    const uint8_t *img = buf + 1;
    q25_bundle_view b;
    q25_encode_view *v = malloc(sizeof *v);
    q25_image_info info;
    CHECK(q25_nl_tokenizer_runtime_image_open(img, size, &b, v, &info, Q25_OPEN_VERIFY_CRC) == Q25_OK);
    CHECK(info.crc_checked == 1 && info.vocab_size == b.vocab_size);

    /* reference encode with ample buffers */
    static uint8_t scratch[1 << 20];
    uint32_t ref[512];
    q25_encode_stats st;
    size_t len = strlen(TEXT);
    CHECK(q25_nl_tokenizer_bundle_encode_bpe_bounded(v, (const uint8_t *)TEXT, len, Q25_ENCODE_PARSE_SPECIAL, scratch,
                                                     sizeof scratch, ref, 512, &st) == Q25_OK);
    size_t nref = st.ids_written;
    CHECK(nref > 10 && st.ids_needed == nref && st.special_matches >= 2);

    /* out_cap too small: distinct error, exact count needed, nothing written past out_cap */
    uint32_t small[4] = {7, 7, 7, 7};
    CHECK(q25_nl_tokenizer_bundle_encode_bpe_bounded(v, (const uint8_t *)TEXT, len, Q25_ENCODE_PARSE_SPECIAL, scratch,
                                                     sizeof scratch, small, 2, &st) == Q25_ERR_OUT_CAPACITY);
    CHECK(st.ids_needed == nref && st.ids_written == 2 && small[0] == ref[0] && small[1] == ref[1]);
    CHECK(small[2] == 7 && small[3] == 7);

    /* scratch too small: distinct error; retrying with scratch_needed succeeds; no write past it */
    for (size_t given = 0; given < 4096; given = given * 2 + 1) {
        uint8_t *s = malloc(given + 64);
        memset(s, 0xA5, given + 64);
        uint32_t out[512];
        int rc = q25_nl_tokenizer_bundle_encode_bpe_bounded(v, (const uint8_t *)TEXT, len, Q25_ENCODE_PARSE_SPECIAL,
                                                            given ? s : NULL, given, out, 512, &st);
        int untouched = 1;
        for (size_t i = given; i < given + 64; i++)
            untouched &= s[i] == 0xA5;
        CHECK(untouched);
        if (rc == Q25_ERR_SCRATCH_CAPACITY) {
            size_t need = st.scratch_needed;
            CHECK(need > given);
            uint8_t *s2 = malloc(need);
            CHECK(q25_nl_tokenizer_bundle_encode_bpe_bounded(v, (const uint8_t *)TEXT, len, Q25_ENCODE_PARSE_SPECIAL,
                                                             s2, need, out, 512, &st) == Q25_OK);
            CHECK(st.ids_written == nref && memcmp(out, ref, nref * 4) == 0);
            free(s2);
        } else {
            CHECK(rc == Q25_OK && st.ids_written == nref && memcmp(out, ref, nref * 4) == 0);
        }
        free(s);
    }

    /* the same image at an aligned address gives the same ids */
    uint8_t *aligned = malloc(size);
    memcpy(aligned, img, size);
    q25_bundle_view b2;
    q25_encode_view *v2 = malloc(sizeof *v2);
    CHECK(q25_nl_tokenizer_runtime_image_open(aligned, size, &b2, v2, &info, 0) == Q25_OK);
    uint32_t out2[512];
    CHECK(q25_nl_tokenizer_bundle_encode_bpe_bounded(v2, (const uint8_t *)TEXT, len, Q25_ENCODE_PARSE_SPECIAL, scratch,
                                                     sizeof scratch, out2, 512, &st) == Q25_OK);
    CHECK(st.ids_written == nref && memcmp(out2, ref, nref * 4) == 0);

    /* detokenize: capacity reported exactly, out-of-range ids refused */
    size_t written;
    uint8_t text[1024];
    CHECK(q25_nl_tokenizer_bundle_detokenize(&b, ref, nref, Q25_DECODE_SPECIAL, text, sizeof text, &written) == Q25_OK);
    size_t full = written;
    uint8_t tiny[5] = {1, 1, 1, 1, 1};
    CHECK(q25_nl_tokenizer_bundle_detokenize(&b, ref, nref, Q25_DECODE_SPECIAL, tiny, 4, &written) ==
          Q25_ERR_OUT_CAPACITY);
    CHECK(written == full && memcmp(tiny, text, 4) == 0 && tiny[4] == 1);
    uint32_t bad = b.vocab_size;
    CHECK(q25_nl_tokenizer_bundle_detokenize(&b, &bad, 1, 0, text, sizeof text, &written) == Q25_ERR_TOKEN_ID);

    /* byte fallback: the built-in GPT-2 byte order equals the image's byte->token map */
    uint8_t all[256];
    uint32_t ids[256];
    for (int i = 0; i < 256; i++)
        all[i] = (uint8_t)i;
    CHECK(q25_tokenize_utf8_bytes(all, 256, ids, 256) == 256);
    int same = 1;
    for (int i = 0; i < 256; i++) {
        const uint8_t *p = v->byte_to_token + 4 * i;
        uint32_t id = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        same &= id == ids[i];
    }
    CHECK(same);
    CHECK(ids[' '] == 220 && ids['\n'] == 198 && ids['!'] == 0);
    uint8_t back[256];
    CHECK(q25_detokenize_utf8_bytes(ids, 256, back, 256, &written) == Q25_OK && memcmp(back, all, 256) == 0);
    uint32_t big = 256;
    CHECK(q25_detokenize_utf8_bytes(&big, 1, back, 256, &written) == Q25_ERR_TOKEN_ID);
    CHECK(q25_tokenize_utf8_bytes(all, 10, ids, 5) == Q25_ERR_OUT_CAPACITY);

    /* a piece so long that the BPE work area (36 bytes per symbol) or the int32 links would
     * overflow is refused with SCRATCH_CAPACITY and scratch_needed = SIZE_MAX, on 64-bit and
     * 32-bit builds alike */
    CHECK(q25_bpe_piece_need(48) == 0);
    CHECK(q25_bpe_piece_need(49) == 49 * 36 + 16);
    CHECK(q25_bpe_piece_need(0x80000000u) == SIZE_MAX);              /* int32 links */
    CHECK(q25_bpe_piece_need((uint64_t)1 << 40) == SIZE_MAX);
    CHECK(q25_bpe_piece_need(120000000u) ==                           /* 4.32e9: > 32-bit size_t */
          (sizeof(size_t) == 4 ? SIZE_MAX : (size_t)120000000u * 36 + 16));
    CHECK(q25_bpe_piece_need(119304646u) == (size_t)119304646u * 36 + 16); /* the largest on 32-bit */
    CHECK(q25_bpe_piece_need(119304647u) == (sizeof(size_t) == 4 ? SIZE_MAX : (size_t)119304647u * 36 + 16));
    CHECK(q25_add_sat(SIZE_MAX - 1, 2) == SIZE_MAX && q25_add_sat(1, 2) == 3);
    {
        /* one pre-token of invalid bytes: each becomes U+FFFD, 3 symbols. 32-bit: 40M bytes =
         * 120M symbols, whose work area (4.32e9 bytes) wrapped to ~25 MB before the bound, and
         * the scratch below was then written far past its end. 64-bit: 2M bytes, an exact need. */
        size_t n = sizeof(size_t) == 4 ? 40000000u : 2000000u;
        size_t given = 32u << 20;
        uint8_t *in = malloc(n), *sc = malloc(given + 64);
        CHECK(in && sc);
        if (in && sc) {
            memset(in, 0x80, n);
            memset(sc + given, 0xA5, 64);
            uint32_t out[4];
            int rc = q25_nl_tokenizer_bundle_encode_bpe_bounded(v, in, n, 0, sc, given, out, 4, &st);
            CHECK(rc == Q25_ERR_SCRATCH_CAPACITY);
            CHECK(st.scratch_needed == (sizeof(size_t) == 4 ? SIZE_MAX : 3 * n * 36 + 16 + 8));
            int untouched = 1;
            for (size_t i = given; i < given + 64; i++)
                untouched &= sc[i] == 0xA5;
            CHECK(untouched);
        }
        free(in);
        free(sc);
    }

    /* arguments and error strings */
    CHECK(q25_nl_tokenizer_runtime_image_open(NULL, size, &b2, v2, &info, 0) == Q25_ERR_ARG);
    CHECK(q25_nl_tokenizer_runtime_image_open(img, 10, &b2, v2, &info, 0) == Q25_ERR_MAGIC);
    CHECK(q25_nl_tokenizer_runtime_image_open(img, size - 1, &b2, v2, &info, 0) == Q25_ERR_HEADER);
    CHECK(q25_nl_tokenizer_bundle_encode_bpe_bounded(v, NULL, 5, 0, scratch, 1, out2, 1, &st) == Q25_ERR_ARG);
    for (int code = 0; code >= Q25_ERR_THREADS; code--)
        CHECK(strcmp(q25_strerror(code), "unknown error") != 0);
    CHECK(strcmp(q25_strerror(-99), "unknown error") == 0);

    free(v);
    free(v2);
    free(aligned);
    free(buf);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
