/*
 * q25tok: Qwen2 pre-tokenizer and byte-level BPE (llama.cpp's rules; see q25tok.h and docs/runtime-image.md).
 * C11, libc only, no allocation, every image read bounds-checked.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok_internal.h"

/* llama.cpp's unicode_cpt_from_utf8, lenient: returns bytes consumed; *cp is U+FFFD for an
 * invalid sequence (consuming one byte); *clean is 0 when re-encoding changes the bytes. */
static size_t decode_cp(const uint8_t *s, size_t i, size_t end, uint32_t *cp, int *clean)
{
    uint8_t b0 = s[i];
    *clean = 1;
    if (b0 < 0x80) {
        *cp = b0;
        return 1;
    }
    size_t need;
    uint32_t v, min;
    if (!(b0 & 0x40)) {
        need = 0, v = 0, min = 0;
    } else if (!(b0 & 0x20)) {
        need = 1, v = b0 & 0x1Fu, min = 0x80;
    } else if (!(b0 & 0x10)) {
        need = 2, v = b0 & 0x0Fu, min = 0x800;
    } else if (!(b0 & 0x08)) {
        need = 3, v = b0 & 0x07u, min = 0x10000;
    } else {
        need = 0, v = 0, min = 0;
    }
    if (need && i + need < end) {
        size_t k;
        for (k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                break;
            v = (v << 6) | (s[i + k] & 0x3Fu);
        }
        if (k > need && v <= 0x10FFFFu) {
            *cp = v;
            *clean = v >= min;
            return need + 1;
        }
    }
    *cp = 0xFFFD;
    *clean = 0;
    return 1;
}

static size_t utf8_put(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

typedef struct cpt {
    uint32_t cp;
    uint32_t flags;
    size_t len; /* bytes; 0 past the end */
} cpt;

static inline cpt peek(const enc *c, const uint8_t *s, size_t i, size_t end)
{
    cpt r;
    if (i >= end) {
        r.cp = OOR, r.flags = 0, r.len = 0;
        return r;
    }
    if (s[i] < 0x80) {
        r.cp = s[i], r.flags = c->v->ascii_flags[s[i]], r.len = 1;
        return r;
    }
    int clean;
    r.len = decode_cp(s, i, end, &r.cp, &clean);
    r.flags = q25_class_lookup(c->v->classes, c->v->class_count, r.cp);
    return r;
}

/* merge index of the pair (left, right), or -1 */
static int64_t find_merge(enc *c, uint32_t left, uint32_t right)
{
    uint32_t h = left * 0x9E3779B1u + right * 0x85EBCA77u;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    uint32_t mask = c->v->pair_capacity - 1;
    h &= mask;
    for (uint32_t probe = 0; probe <= mask; probe++) {
        uint32_t slot = rd32(c->v->pair_index + (size_t)4 * h);
        if (slot == 0)
            return -1;
        if (slot > c->b->merge_count) {
            c->err = Q25_ERR_CORRUPT;
            return -1;
        }
        const uint8_t *mr = c->b->merges + (size_t)16 * (slot - 1);
        if (rd32(mr) == left && rd32(mr + 4) == right)
            return (int64_t)(slot - 1);
        h = (h + 1) & mask;
    }
    return -1;
}

static void heap_push(uint64_t *hp, size_t *n, uint64_t key)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (hp[parent] <= key)
            break;
        hp[i] = hp[parent];
        i = parent;
    }
    hp[i] = key;
}

void q25_sift_down(uint64_t *hp, size_t n, size_t i)
{
    uint64_t key = hp[i];
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n)
            break;
        size_t r = l + 1, small = (r < n && hp[r] < hp[l]) ? r : l;
        if (hp[small] >= key)
            break;
        hp[i] = hp[small];
        i = small;
    }
    hp[i] = key;
}

static uint64_t heap_pop(uint64_t *hp, size_t *n)
{
    uint64_t top = hp[0];
    hp[0] = hp[--(*n)];
    if (*n)
        q25_sift_down(hp, *n, 0);
    return top;
}

#define DEAD 0xFFFFFFFFu

/* pieces up to this many symbols merge with a rank array (fewer cache misses than a heap) */
#define SMALL_PIECE 48

size_t q25_bpe_piece_need(uint64_t n)
{
    if (n <= SMALL_PIECE)
        return 0;
    if (n > BPE_MAX_SYMBOLS || n > (SIZE_MAX - 16) / BPE_BYTES_PER_SYMBOL)
        return SIZE_MAX;
    return (size_t)n * BPE_BYTES_PER_SYMBOL + 16;
}

/* BPE of a short piece in place: repeatedly merge the lowest-rank (leftmost) adjacent
 * pair; returns the number of ids left */
static size_t bpe_small(enc *c, uint32_t *ids, size_t n)
{
    int64_t rank[SMALL_PIECE];
    for (size_t i = 0; i + 1 < n; i++)
        rank[i] = find_merge(c, ids[i], ids[i + 1]);
    while (n > 1 && !c->err) {
        size_t best = n;
        for (size_t i = 0; i + 1 < n; i++)
            if (rank[i] >= 0 && (best == n || rank[i] < rank[best]))
                best = i;
        if (best == n)
            break;
        uint32_t out = rd32(c->b->merges + 16u * (uint64_t)rank[best] + 8);
        if (out >= c->b->vocab_size) {
            c->err = Q25_ERR_CORRUPT;
            return 0;
        }
        ids[best] = out;
        for (size_t i = best + 1; i + 1 < n; i++) {
            ids[i] = ids[i + 1];
            rank[i] = rank[i + 1];
        }
        n--;
        if (best > 0)
            rank[best - 1] = find_merge(c, ids[best - 1], ids[best]);
        if (best + 1 < n)
            rank[best] = find_merge(c, ids[best], ids[best + 1]);
    }
    return n;
}

/* piece cache: direct-mapped slots of {u32 hash; u8 len; u8 n_ids; u16 pad;
 * u8 bytes[CACHE_BYTES]; u32 ids[CACHE_IDS]} for clean pieces of up to CACHE_BYTES bytes */

static uint32_t piece_hash(const uint8_t *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h ^ (uint32_t)n;
}

static int cache_get(enc *c, const uint8_t *p, size_t n, uint32_t h)
{
    uint8_t *e = c->cache + CACHE_SLOT * (h & c->cache_mask);
    uint32_t eh;
    memcpy(&eh, e, 4);
    if (eh != h || e[4] != n || e[5] == 0 || memcmp(e + 8, p, n) != 0)
        return 0;
    uint32_t ids[CACHE_IDS];
    memcpy(ids, e + 8 + CACHE_BYTES, 4u * e[5]);
    for (size_t i = 0; i < e[5]; i++)
        emit(c, ids[i]);
    return 1;
}

static void cache_put(enc *c, const uint8_t *p, size_t n, uint32_t h, const uint32_t *ids, size_t n_ids)
{
    if (n_ids > CACHE_IDS)
        return;
    uint8_t *e = c->cache + CACHE_SLOT * (h & c->cache_mask);
    memcpy(e, &h, 4);
    e[4] = (uint8_t)n;
    e[5] = (uint8_t)n_ids;
    memcpy(e + 8, p, n);
    memcpy(e + 8 + CACHE_BYTES, ids, 4 * n_ids);
}

/* byte-level BPE of one pre-token piece s[a, b) */
static void bpe_piece(enc *c, const uint8_t *s, size_t a, size_t b)
{
    c->pieces++;
    const uint8_t *b2t = c->v->byte_to_token;
    size_t len = b - a;
    int ascii = 1;
    for (size_t i = a; i < b; i++)
        ascii &= s[i] < 0x80;
    if (len == 1 && ascii) { /* a lone byte >= 0x80 is invalid UTF-8: U+FFFD, below */
        if (!c->measuring)
            emit(c, rd32(b2t + 4u * s[a]));
        return;
    }
    /* symbols = re-encoded UTF-8 bytes of the piece's code points (the same bytes unless
     * the piece holds invalid or overlong sequences: up to 3 per input byte, so counted in
     * 64 bits) */
    uint64_t n64 = len;
    int all_clean = 1;
    if (!ascii) {
        n64 = 0;
        for (size_t i = a; i < b;) {
            uint32_t cp;
            int clean;
            uint8_t tmp[4];
            size_t l = decode_cp(s, i, b, &cp, &clean);
            n64 += clean ? l : utf8_put(cp, tmp);
            all_clean &= clean;
            i += l;
        }
    }
    uint32_t small_ids[SMALL_PIECE];
    size_t need = q25_bpe_piece_need(n64);
    if (need > c->bpe_need)
        c->bpe_need = need;
    if (need == SIZE_MAX) {
        /* too long for the work area's arithmetic (or the int32 links): no scratch size
         * makes this piece encodable; reported as scratch_needed = SIZE_MAX */
        c->err = Q25_ERR_SCRATCH_CAPACITY;
        return;
    }
    size_t n = (size_t)n64; /* <= BPE_MAX_SYMBOLS, and n * BPE_BYTES_PER_SYMBOL fits size_t */
    if (c->measuring || need > c->bpe_size) {
        c->measuring = 1;
        return;
    }
    if (c->cache && need > (size_t)(c->cache - c->bpe))
        c->cache = NULL; /* a long piece needs the cache's memory: encode without it */
    int cacheable = c->cache && all_clean && len <= CACHE_BYTES;
    uint32_t h = 0;
    if (cacheable) {
        h = piece_hash(s + a, len);
        if (cache_get(c, s + a, len, h))
            return;
    }
    uint64_t *hp = (uint64_t *)(void *)c->bpe;
    uint32_t *ids = n <= SMALL_PIECE ? small_ids : (uint32_t *)(void *)(hp + 3 * n);
    size_t k = 0;
    if (all_clean) {
        for (size_t i = a; i < b; i++)
            ids[k++] = rd32(b2t + 4u * s[i]);
    } else {
        for (size_t i = a; i < b;) {
            uint32_t cp;
            int clean;
            uint8_t tmp[4];
            size_t l = decode_cp(s, i, b, &cp, &clean);
            size_t m = clean ? l : utf8_put(cp, tmp);
            const uint8_t *src = clean ? s + i : tmp;
            for (size_t j = 0; j < m; j++)
                ids[k++] = rd32(b2t + 4u * src[j]);
            i += l;
        }
    }
    if (n <= SMALL_PIECE) {
        size_t m = bpe_small(c, ids, n);
        for (size_t i = 0; i < m; i++)
            emit(c, ids[i]);
        if (cacheable && !c->err)
            cache_put(c, s + a, len, h, ids, m);
        return;
    }
    /* long pieces: heap of (rank, position) with lazy invalidation, O(n log n) */
    int32_t *prev = (int32_t *)(void *)(ids + n);
    int32_t *next = prev + n;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = (i + 1 < n) ? (int32_t)(i + 1) : -1;
        if (i + 1 < n) {
            int64_t r = find_merge(c, ids[i], ids[i + 1]);
            if (r >= 0)
                heap_push(hp, &hn, ((uint64_t)r << 32) | i);
        }
    }
    while (hn && !c->err) {
        uint64_t key = heap_pop(hp, &hn);
        uint32_t r = (uint32_t)(key >> 32), i = (uint32_t)key;
        if (ids[i] == DEAD || next[i] < 0)
            continue;
        uint32_t j = (uint32_t)next[i];
        const uint8_t *mr = c->b->merges + (size_t)16 * r;
        if (rd32(mr) != ids[i] || rd32(mr + 4) != ids[j])
            continue; /* stale entry */
        uint32_t out = rd32(mr + 8);
        if (out >= c->b->vocab_size) {
            c->err = Q25_ERR_CORRUPT;
            return;
        }
        ids[i] = out;
        ids[j] = DEAD;
        next[i] = next[j];
        if (next[j] >= 0)
            prev[next[j]] = (int32_t)i;
        if (prev[i] >= 0) {
            int64_t r2 = find_merge(c, ids[prev[i]], ids[i]);
            if (r2 >= 0)
                heap_push(hp, &hn, ((uint64_t)r2 << 32) | (uint32_t)prev[i]);
        }
        if (next[i] >= 0) {
            int64_t r2 = find_merge(c, ids[i], ids[next[i]]);
            if (r2 >= 0)
                heap_push(hp, &hn, ((uint64_t)r2 << 32) | i);
        }
    }
    for (int32_t i = 0; i >= 0; i = next[i])
        emit(c, ids[i]);
}

/* llama.cpp's Qwen2 pre-tokenizer (unicode_regex_split_custom_qwen2) over s[a, end) */
void q25_pretokenize(enc *c, const uint8_t *s, size_t a, size_t end)
{
    size_t pos = a;
    while (pos < end && !c->err) {
        cpt c0 = peek(c, s, pos, end);
        size_t q;
        /* (?i:'s|'t|'re|'ve|'m|'ll|'d), ASCII case only */
        if (c0.cp == '\'' && pos + 1 < end) {
            uint8_t x1 = s[pos + 1];
            if (x1 == 's' || x1 == 'S' || x1 == 't' || x1 == 'T' || x1 == 'm' || x1 == 'M' || x1 == 'd' ||
                x1 == 'D') {
                bpe_piece(c, s, pos, pos + 2);
                pos += 2;
                continue;
            }
            if (pos + 2 < end && s[pos + 1] < 0x80 && s[pos + 2] < 0x80) {
                uint8_t x = s[pos + 1], y = s[pos + 2];
                int xl = (x >= 'A' && x <= 'Z') || (x >= 'a' && x <= 'z');
                int yl = (y >= 'A' && y <= 'Z') || (y >= 'a' && y <= 'z');
                x |= 0x20, y |= 0x20;
                if (xl && yl && ((x == 'r' && y == 'e') || (x == 'v' && y == 'e') || (x == 'l' && y == 'l'))) {
                    bpe_piece(c, s, pos, pos + 3);
                    pos += 3;
                    continue;
                }
            }
        }
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (!(c0.cp == '\r' || c0.cp == '\n' || (c0.flags & F_NUMBER))) {
            if ((c0.flags & F_LETTER) || (peek(c, s, pos + c0.len, end).flags & F_LETTER)) {
                q = pos + c0.len;
                for (;;) {
                    cpt x = peek(c, s, q, end);
                    if (!(x.flags & F_LETTER))
                        break;
                    q += x.len;
                }
                bpe_piece(c, s, pos, q);
                pos = q;
                continue;
            }
        }
        /* \p{N} */
        if (c0.flags & F_NUMBER) {
            bpe_piece(c, s, pos, pos + c0.len);
            pos += c0.len;
            continue;
        }
        /* <space>?[^\s\p{L}\p{N}]+[\r\n]* */
        {
            q = pos;
            uint32_t f2 = c0.flags;
            if (c0.cp == ' ') {
                q = pos + 1;
                f2 = peek(c, s, q, end).flags;
            }
            if (!(f2 & F_WLN) && c0.flags) {
                while (!(f2 & F_WLN) && f2) {
                    q += peek(c, s, q, end).len;
                    f2 = peek(c, s, q, end).flags;
                }
                while (q < end && (s[q] == '\r' || s[q] == '\n'))
                    q++;
                bpe_piece(c, s, pos, q);
                pos = q;
                continue;
            }
        }
        /* whitespace: \s*[\r\n]+ | \s+(?!\S) | \s+ */
        {
            size_t nws = 0, last_rn = 0, last_start = pos;
            q = pos;
            for (;;) {
                cpt x = peek(c, s, q, end);
                if (!(x.flags & F_WHITESPACE))
                    break;
                last_start = q;
                q += x.len;
                nws++;
                if (x.cp == '\r' || x.cp == '\n')
                    last_rn = q;
            }
            size_t stop;
            if (last_rn)
                stop = last_rn;
            else if (nws > 1 && q < end)
                stop = last_start;
            else if (nws > 0)
                stop = q;
            else
                stop = pos + c0.len;
            bpe_piece(c, s, pos, stop);
            pos = stop;
        }
    }
}

