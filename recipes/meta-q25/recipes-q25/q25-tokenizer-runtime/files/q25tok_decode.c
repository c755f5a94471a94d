/*
 * q25tok: the decoder and the byte-by-byte fallback (see q25tok.h and docs/runtime-image.md).
 * C11, libc only, no allocation, every image read bounds-checked.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok_internal.h"

/* ---- decoding ------------------------------------------------------------------------ */
int q25_nl_tokenizer_bundle_detokenize(const q25_bundle_view *b, const uint32_t *ids, size_t n, unsigned flags,
                                       uint8_t *out, size_t out_cap, size_t *written)
{
    if (!b || (!ids && n) || (!out && out_cap) || !written)
        return Q25_ERR_ARG;
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] >= b->vocab_size) {
            *written = w;
            return Q25_ERR_TOKEN_ID;
        }
        const uint8_t *ti = b->token_index + (size_t)8 * ids[i];
        uint64_t off = rd32(ti);
        uint32_t len = rd16(ti + 4), type = rd16(ti + 6);
        int show = type == Q25_TOKEN_NORMAL || type == Q25_TOKEN_BYTE || type == Q25_TOKEN_USER_DEFINED ||
                   ((type == Q25_TOKEN_CONTROL || type == Q25_TOKEN_UNKNOWN) && (flags & Q25_DECODE_SPECIAL));
        if (!show)
            continue;
        if (off + len > b->token_bytes_size) {
            *written = w;
            return Q25_ERR_CORRUPT;
        }
        if (w + len <= out_cap)
            memcpy(out + w, b->token_bytes + off, len);
        else if (w < out_cap)
            memcpy(out + w, b->token_bytes + off, out_cap - w);
        w += len;
    }
    *written = w;
    return w > out_cap ? Q25_ERR_OUT_CAPACITY : Q25_OK;
}

/* ---- byte fallback (GPT-2 bytes_to_unicode order) ------------------------------------ */
static uint32_t byte_id(uint8_t c)
{
    if (c >= 0x21 && c <= 0x7E)
        return c - 0x21u;
    if (c >= 0xA1 && c <= 0xAC)
        return 94u + (c - 0xA1u);
    if (c >= 0xAE)
        return 106u + (c - 0xAEu);
    if (c <= 0x20)
        return 188u + c;
    if (c >= 0x7F && c <= 0xA0)
        return 221u + (c - 0x7Fu);
    return 255u; /* 0xAD */
}

int q25_tokenize_utf8_bytes(const uint8_t *utf8, size_t len, uint32_t *out_ids, size_t out_cap)
{
    if ((!utf8 && len) || (!out_ids && out_cap) || len > 0x7FFFFFFF)
        return Q25_ERR_ARG;
    if (len > out_cap)
        return Q25_ERR_OUT_CAPACITY;
    for (size_t i = 0; i < len; i++)
        out_ids[i] = byte_id(utf8[i]);
    return (int)len;
}

int q25_detokenize_utf8_bytes(const uint32_t *ids, size_t n, uint8_t *out, size_t out_cap, size_t *written)
{
    if ((!ids && n) || (!out && out_cap) || !written)
        return Q25_ERR_ARG;
    *written = 0;
    for (size_t i = 0; i < n; i++)
        if (ids[i] > 255)
            return Q25_ERR_TOKEN_ID;
    *written = n;
    if (n > out_cap)
        return Q25_ERR_OUT_CAPACITY;
    for (size_t i = 0; i < n; i++) {
        for (unsigned c = 0; c < 256; c++) {
            if (byte_id((uint8_t)c) == ids[i]) {
                out[i] = (uint8_t)c;
                break;
            }
        }
    }
    return Q25_OK;
}
