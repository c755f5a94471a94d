/*
 * libFuzzer harness for the q25tok runtime: drives image open, encode and detokenize with
 * mutated images and arbitrary bytes (invalid UTF-8 included).
 *
 * Input: byte 0 selects the mode, the rest is the payload.
 *   mode bit 0 = 0: the payload is an image. Bit 4: recompute every section CRC the table
 *                   can locate; bit 3: then recompute the header CRC — so mutations get past
 *                   the checksums to the section-table and content checks (3-21 of
 *                   docs/runtime-image.md); with both bits clear most stop at check 5.
 *                   Open it (bit 1: with the CRC pass); if it opens, encode sample texts
 *                   (bit 2: parse_special) with small and large buffers, and detokenize
 *                   ids, including out-of-range ones.
 *   mode bit 0 = 1: the payload is text, encoded with the reference image named by
 *                   $Q25_FUZZ_IMAGE (bit 2: parse_special) with buffers sized from bits 3-7;
 *                   the ids are decoded again and checked to be in range.
 * Any sanitizer report, crash or failed check is a finding.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "q25tok.h"

static uint8_t *ref_image;
static size_t ref_size;
static q25_bundle_view ref_bundle;
static q25_encode_view ref_view;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    const char *path = getenv("Q25_FUZZ_IMAGE");
    if (!path) {
        fprintf(stderr, "set Q25_FUZZ_IMAGE to a Q25TOKRT image\n");
        abort();
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        abort();
    fseek(f, 0, SEEK_END);
    ref_size = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    ref_image = malloc(ref_size);
    if (!ref_image || fread(ref_image, 1, ref_size, f) != ref_size)
        abort();
    fclose(f);
    q25_image_info info;
    if (q25_nl_tokenizer_runtime_image_open(ref_image, ref_size, &ref_bundle, &ref_view, &info, Q25_OPEN_VERIFY_CRC))
        abort();
    return 0;
}

static uint32_t get32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t get64(const uint8_t *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* recompute section CRCs (sections) and then the header CRC (header) of a mutated image,
 * as far as its header and table can be read: tests/hostile_images.py does the same */
static void fix_crcs(uint8_t *img, size_t n, int sections, int header)
{
    if (n < 64)
        return;
    uint32_t header_size = get32(img + 12), count = get32(img + 16);
    if (header_size < 64 || header_size > n)
        return;
    if (sections) {
        for (uint32_t k = 0; k < count && k < (header_size - 64) / 48; k++) {
            uint8_t *ent = img + 64 + (size_t)48 * k;
            uint64_t off = get64(ent + 8), size = get64(ent + 16);
            if (off <= n && size <= n - off)
                put32(ent + 40, q25_crc32(0, img + off, (size_t)size));
        }
    }
    if (header) {
        put32(img + 36, 0);
        put32(img + 36, q25_crc32(0, img, header_size));
    }
}

static uint8_t scratch[1 << 16];
static uint32_t ids[4096];
static uint8_t text_out[1 << 15];

static void exercise(const q25_encode_view *v, const q25_bundle_view *b, const uint8_t *text, size_t len,
                     unsigned flags, size_t scratch_size, size_t out_cap)
{
    q25_encode_stats st;
    if (scratch_size > sizeof scratch)
        scratch_size = sizeof scratch;
    if (out_cap > sizeof ids / sizeof ids[0])
        out_cap = sizeof ids / sizeof ids[0];
    int rc = q25_nl_tokenizer_bundle_encode_bpe_bounded(v, text, len, flags, scratch, scratch_size, ids, out_cap, &st);
    if (rc == Q25_OK || rc == Q25_ERR_OUT_CAPACITY) {
        if (st.ids_written > out_cap)
            abort();
        for (size_t i = 0; i < st.ids_written; i++)
            if (ids[i] >= b->vocab_size)
                abort();
        size_t written;
        q25_nl_tokenizer_bundle_detokenize(b, ids, st.ids_written, flags, text_out, sizeof text_out, &written);
    }
    if (rc == Q25_ERR_SCRATCH_CAPACITY && st.scratch_needed <= scratch_size)
        abort(); /* a reported need must be more than what was given */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned mode = data[0];
    const uint8_t *payload = data + 1;
    size_t n = size - 1;
    unsigned flags = (mode & 4) ? Q25_ENCODE_PARSE_SPECIAL : 0;
    if (mode & 1) {
        size_t scratch_size = (size_t)64 << ((mode >> 3) & 0xF);
        exercise(&ref_view, &ref_bundle, payload, n, flags, scratch_size, 1 + (mode >> 4) * 64);
        uint32_t bytes_ids[256];
        size_t m = n < 256 ? n : 256;
        if (q25_tokenize_utf8_bytes(payload, m, bytes_ids, 256) != (int)m)
            abort();
        size_t written;
        uint8_t back[256];
        if (q25_detokenize_utf8_bytes(bytes_ids, m, back, sizeof back, &written) || written != m ||
            memcmp(back, payload, m))
            abort();
        return 0;
    }
    /* mutated image: copy to a buffer of its own so reads past it are caught */
    uint8_t *img = malloc(n ? n : 1);
    if (!img)
        return 0;
    memcpy(img, payload, n);
    fix_crcs(img, n, (mode & 16) != 0, (mode & 8) != 0);
    q25_bundle_view b;
    q25_encode_view *v = malloc(sizeof *v);
    q25_image_info info;
    if (v && q25_nl_tokenizer_runtime_image_open(img, n, &b, v, &info, (mode & 2) ? Q25_OPEN_VERIFY_CRC : 0) ==
                 Q25_OK) {
        static const char *samples[] = {
            "Hello world, 123 don't <|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd<|im_end|>",
            "  \t\n\r\n x\xff\xc1\x81\xed\xa0\x80 [PAD151650] <tool_call>\xf0\x9f\xa4\x97",
        };
        for (int i = 0; i < 2; i++) {
            exercise(v, &b, (const uint8_t *)samples[i], strlen(samples[i]), flags, sizeof scratch, 4096);
            exercise(v, &b, (const uint8_t *)samples[i], strlen(samples[i]), flags, 40, 3);
        }
        uint32_t probe[6] = {0, 1, b.vocab_size - 1, b.vocab_size, 0xFFFFFFFFu, info.eos};
        size_t written;
        for (int i = 0; i < 6; i++)
            q25_nl_tokenizer_bundle_detokenize(&b, probe + i, 1, Q25_DECODE_SPECIAL, text_out, sizeof text_out,
                                               &written);
    }
    free(v);
    free(img);
    return 0;
}
