/*
 * q25tok: encode: special-token partition (llama.cpp's longest-first loop) and the public entry point; see q25tok.h and docs/runtime-image.md.
 * C11, libc only, no allocation, every image read bounds-checked.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok_internal.h"

/* does special token k (bundle order) match at s[p...]? returns its length or 0 */
static uint32_t special_at(const q25_bundle_view *b, uint32_t k, const uint8_t *s, size_t p, size_t len,
                           unsigned flags)
{
    const uint8_t *r = b->specials + (size_t)8 * k;
    uint32_t id = rd32(r), type = rd16(r + 4), slen = rd16(r + 6);
    if (slen == 0 || slen > len - p)
        return 0;
    if (type == Q25_TOKEN_CONTROL || type == Q25_TOKEN_UNKNOWN) {
        if (!(flags & Q25_ENCODE_PARSE_SPECIAL))
            return 0;
    } else if (type != Q25_TOKEN_USER_DEFINED) {
        return 0;
    }
    const uint8_t *text = b->token_bytes + rd32(b->token_index + (size_t)8 * id);
    return memcmp(text, s + p, slen) == 0 ? slen : 0;
}

static void heapsort_u64(uint64_t *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        q25_sift_down(a, n, i);
    /* min-heap: pop into the tail gives descending order; reverse afterwards */
    for (size_t end = n; end > 1; end--) {
        uint64_t top = a[0];
        a[0] = a[end - 1];
        q25_sift_down(a, end - 1, 0);
        a[end - 1] = top;
    }
    for (size_t i = 0, j = n ? n - 1 : 0; i < j; i++, j--) {
        uint64_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

int q25_nl_tokenizer_bundle_encode_bpe_bounded(const q25_encode_view *v, const uint8_t *s, size_t len, unsigned flags,
                                               void *scratch, size_t scratch_size, uint32_t *out_ids, size_t out_cap,
                                               q25_encode_stats *stats)
{
    q25_encode_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    if (!v || !v->bundle || (!s && len) || (!scratch && scratch_size) || (!out_ids && out_cap) ||
        len >= 0xFFFFFFFFu)
        return Q25_ERR_ARG;
    const q25_bundle_view *b = v->bundle;

    /* scratch, 8-byte aligned */
    uint8_t *base = (uint8_t *)scratch;
    size_t avail = scratch_size;
    size_t mis = base ? (size_t)((8 - ((uintptr_t)base & 7)) & 7) : 0;
    if (mis > avail)
        mis = avail;
    base += mis;
    avail -= mis;
    size_t overhead = 8; /* worst-case alignment loss, included in every reported need */

    /* 1. every occurrence of every special token, as (k << 32 | pos) */
    uint64_t *mt = (uint64_t *)(void *)base;
    size_t mcap = avail / 8, nm = 0;
    for (size_t p = 0; p < len; p++) {
        int cand = get_bit(v->special_single, s[p]) ||
                   (p + 1 < len && get_bit(v->special_pair, ((uint32_t)s[p] << 8) | s[p + 1]));
        if (!cand)
            continue;
        for (uint32_t k = 0; k < b->special_count; k++) {
            if (special_at(b, k, s, p, len, flags)) {
                if (nm < mcap)
                    mt[nm] = ((uint64_t)k << 32) | p;
                nm++;
            }
        }
    }
    size_t bitmap_bytes = nm > 1 ? (len + 8) / 8 : 0;
    /* nm * 8 may overflow a 32-bit size_t (nm counts every match of every special): saturate */
    size_t head = q25_add_sat(nm > SIZE_MAX / 8 ? SIZE_MAX : nm * 8, (bitmap_bytes + 7) & ~(size_t)7);
    if (head > avail) {
        /* cannot even hold the matches: report a size that is enough for any piece (SIZE_MAX
         * when none is) */
        size_t any_piece = q25_bpe_piece_need(3 * (uint64_t)len + 4);
        stats->scratch_needed = q25_add_sat(q25_add_sat(overhead, head), any_piece);
        return Q25_ERR_SCRATCH_CAPACITY;
    }
    /* 2. llama.cpp's partition: specials in index order (longest first), each taking its
     *    non-overlapping occurrences left to right in what earlier ones left */
    if (nm > 1) {
        uint8_t *claimed = base + nm * 8;
        memset(claimed, 0, bitmap_bytes);
        heapsort_u64(mt, nm);
        size_t kept = 0;
        for (size_t i = 0; i < nm; i++) {
            uint32_t k = (uint32_t)(mt[i] >> 32), p = (uint32_t)mt[i];
            uint32_t slen = rd16(b->specials + (size_t)8 * k + 6);
            int free = 1;
            for (uint32_t j = 0; j < slen && free; j++)
                free = !get_bit(claimed, p + j);
            if (!free)
                continue;
            for (uint32_t j = 0; j < slen; j++)
                set_bit(claimed, p + j);
            mt[kept++] = ((uint64_t)p << 32) | k;
        }
        nm = kept;
        heapsort_u64(mt, nm);
    } else if (nm == 1) {
        mt[0] = (mt[0] << 32) | (mt[0] >> 32);
    }

    enc c;
    memset(&c, 0, sizeof c);
    c.v = v;
    c.b = b;
    c.out = out_ids;
    c.out_cap = out_cap;
    c.bpe = base + head;
    c.bpe_size = avail - head;
    /* the piece cache takes at most a quarter of the BPE area, from its end */
    size_t slots = CACHE_MAX_SLOTS;
    while (slots >= 64 && (slots * CACHE_SLOT > c.bpe_size / 4 || slots > len / 2))
        slots /= 2;
    if (slots >= 64) {
        c.cache = c.bpe + ((c.bpe_size - slots * CACHE_SLOT) & ~(size_t)7);
        c.cache_mask = slots - 1;
        memset(c.cache, 0, slots * CACHE_SLOT);
    }

    /* 3. raw fragments between special tokens: pre-tokenize and BPE */
    size_t cursor = 0;
    for (size_t i = 0; i < nm && !c.err; i++) {
        uint32_t p = (uint32_t)(mt[i] >> 32), k = (uint32_t)mt[i];
        const uint8_t *r = b->specials + (size_t)8 * k;
        q25_pretokenize(&c, s, cursor, p);
        if (!c.measuring)
            emit(&c, rd32(r));
        cursor = (size_t)p + rd16(r + 6);
    }
    if (!c.err)
        q25_pretokenize(&c, s, cursor, len);

    stats->special_matches = nm;
    stats->pieces = c.pieces;
    stats->scratch_needed = q25_add_sat(overhead + head, c.bpe_need);
    if (c.err)
        return c.err;
    if (c.measuring)
        return Q25_ERR_SCRATCH_CAPACITY;
    stats->ids_needed = c.n_out;
    stats->ids_written = c.n_out < out_cap ? c.n_out : out_cap;
    return c.n_out > out_cap ? Q25_ERR_OUT_CAPACITY : Q25_OK;
}

