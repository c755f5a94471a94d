/*
 * q25tok: Q25TOKRT runtime image reader and Qwen2 BPE codec (see q25tok.h and
 * docs/runtime-image.md). C11, libc only, no allocation, every image read bounds-checked.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok.h"

#include <string.h>

/* ---- little-endian reads, safe for any alignment ------------------------------------ */
static inline uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static inline uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | ((uint64_t)rd32(p + 4) << 32); }

static const uint32_t crc_table[256] = {
#include "crc_table.inc"
};

uint32_t q25_crc32(uint32_t crc, const uint8_t *data, size_t len)
{
    crc = ~crc;
    for (size_t i = 0; i < len; i++)
        crc = crc_table[(crc ^ data[i]) & 0xFFu] ^ (crc >> 8);
    return ~crc;
}

/* ---- format constants ---------------------------------------------------------------- */
enum {
    HEADER_SIZE = 64,
    ENTRY_SIZE = 48,
    SEC_TOKEN_INDEX = 1,
    SEC_TOKEN_BYTES = 2,
    SEC_MERGES = 3,
    SEC_BYTE_TO_TOKEN = 4,
    SEC_PAIR_INDEX = 5,
    SEC_SPECIALS = 6,
    SEC_CLASSES = 7,
    SEC_METADATA = 8,
    N_KNOWN = 8
};
static const uint32_t record_sizes[N_KNOWN + 1] = {0, 8, 1, 16, 4, 4, 8, 8, 256};

#define NO_TOKEN 0xFFFFFFFFu
#define F_NUMBER 0x002u
#define F_LETTER 0x004u
#define F_WHITESPACE 0x100u
#define F_WLN (F_WHITESPACE | F_LETTER | F_NUMBER)
#define OOR 0xFFFFFFFFu

const char *q25_strerror(int status)
{
    switch (status) {
    case Q25_OK: return "success";
    case Q25_ERR_ARG: return "invalid argument";
    case Q25_ERR_MAGIC: return "not a Q25TOKRT runtime image (bad magic)";
    case Q25_ERR_VERSION: return "unsupported image format version or pre-tokenizer";
    case Q25_ERR_HEADER: return "bad image header (size, section count or header checksum)";
    case Q25_ERR_SECTION: return "bad section (out of bounds, misaligned, overlapping or wrong record size)";
    case Q25_ERR_MISSING: return "a required section is missing or duplicated";
    case Q25_ERR_CRC: return "section CRC32 mismatch";
    case Q25_ERR_CORRUPT: return "corrupt image: an id or offset is out of range";
    case Q25_ERR_TOKEN_ID: return "token id out of range";
    case Q25_ERR_OUT_CAPACITY: return "output buffer too small";
    case Q25_ERR_SCRATCH_CAPACITY: return "scratch buffer too small";
    default: return "unknown error";
    }
}

/* ---- image open ---------------------------------------------------------------------- */
static uint32_t class_lookup(const uint8_t *classes, uint32_t n, uint32_t cp)
{
    /* last record whose first code point <= cp; records ascend from 0 (checked at open) */
    uint32_t lo = 0, hi = n;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (rd32(classes + 8u * mid) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return rd32(classes + 8u * lo + 4);
}

static void set_bit(uint8_t *bm, uint32_t i) { bm[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static int get_bit(const uint8_t *bm, uint32_t i) { return (bm[i >> 3] >> (i & 7)) & 1; }

int q25_nl_tokenizer_runtime_image_open(const void *image, size_t size, q25_bundle_view *b, q25_encode_view *e,
                                        q25_image_info *info, unsigned flags)
{
    if (!image || !b || !e || !info)
        return Q25_ERR_ARG;
    memset(info, 0, sizeof *info);
    memset(b, 0, sizeof *b);
    memset(e, 0, sizeof *e);
    const uint8_t *p = (const uint8_t *)image;
    if (size < HEADER_SIZE || memcmp(p, "Q25TOKRT", 8) != 0)
        return Q25_ERR_MAGIC;
    info->version_major = rd16(p + 8);
    info->version_minor = rd16(p + 10);
    if (info->version_major != Q25TOK_FORMAT_MAJOR)
        return Q25_ERR_VERSION;
    uint32_t header_size = rd32(p + 12), count = rd32(p + 16), alignment = rd32(p + 20);
    uint64_t file_size = rd64(p + 24);
    if (file_size != (uint64_t)size || count < 1 || count > Q25_MAX_SECTIONS ||
        header_size != HEADER_SIZE + ENTRY_SIZE * count || header_size > size)
        return Q25_ERR_HEADER;
    static const uint8_t zero4[4] = {0, 0, 0, 0};
    uint32_t crc = q25_crc32(0, p, 36);
    crc = q25_crc32(crc, zero4, 4);
    crc = q25_crc32(crc, p + 40, header_size - 40);
    if (crc != rd32(p + 36))
        return Q25_ERR_HEADER;
    if (alignment < 8 || (alignment & (alignment - 1)))
        return Q25_ERR_HEADER;
    info->alignment = alignment;
    info->file_size = file_size;
    info->section_count = count;

    const uint8_t *sec[N_KNOWN + 1] = {0};
    uint64_t sec_size[N_KNOWN + 1] = {0}, sec_count[N_KNOWN + 1] = {0};
    uint64_t prev_end = header_size;
    for (uint32_t k = 0; k < count; k++) {
        const uint8_t *ent = p + HEADER_SIZE + (size_t)ENTRY_SIZE * k;
        q25_section_info *s = &info->sections[k];
        s->type = rd32(ent);
        s->offset = rd64(ent + 8);
        s->size = rd64(ent + 16);
        s->record_size = rd32(ent + 24);
        s->record_count = rd64(ent + 32);
        s->crc32 = rd32(ent + 40);
        if (s->offset % alignment || s->offset < prev_end || s->offset > size || s->size > size - s->offset)
            return Q25_ERR_SECTION;
        if (s->record_size == 0 || s->record_count > s->size / s->record_size ||
            s->record_count * s->record_size != s->size)
            return Q25_ERR_SECTION;
        prev_end = s->offset + s->size;
        if ((flags & Q25_OPEN_VERIFY_CRC) && q25_crc32(0, p + s->offset, (size_t)s->size) != s->crc32)
            return Q25_ERR_CRC;
        if (s->type < 1 || s->type > N_KNOWN)
            continue; /* unknown section types are skipped */
        if (sec[s->type])
            return Q25_ERR_MISSING;
        if (s->record_size != record_sizes[s->type])
            return Q25_ERR_SECTION;
        sec[s->type] = p + s->offset;
        sec_size[s->type] = s->size;
        sec_count[s->type] = s->record_count;
    }
    for (int t = 1; t <= N_KNOWN; t++)
        if (!sec[t])
            return Q25_ERR_MISSING;
    info->crc_checked = (flags & Q25_OPEN_VERIFY_CRC) ? 1 : 0;

    const uint8_t *m = sec[SEC_METADATA];
    if (sec_count[SEC_METADATA] != 1)
        return Q25_ERR_SECTION;
    info->vocab_size = rd32(m);
    info->merge_count = rd32(m + 4);
    info->bos = rd32(m + 8);
    info->eos = rd32(m + 12);
    info->pad = rd32(m + 16);
    info->flags = rd32(m + 20);
    info->unicode_version = rd32(m + 24);
    info->max_token_bytes = rd32(m + 28);
    memcpy(info->vocab_fingerprint, m + 32, 32);
    memcpy(info->source_sha256, m + 64, 32);
    memcpy(info->pre_tokenizer, m + 96, 32);
    memcpy(info->model_name, m + 128, 64);
    info->special_count = rd32(m + 192);
    if (strcmp(info->pre_tokenizer, "qwen2") != 0)
        return Q25_ERR_VERSION;

    uint32_t nv = info->vocab_size;
    if (nv == 0 || nv >= 0x7FFFFFFFu || sec_count[SEC_TOKEN_INDEX] != nv ||
        sec_count[SEC_MERGES] != info->merge_count || sec_count[SEC_SPECIALS] != info->special_count ||
        sec_count[SEC_BYTE_TO_TOKEN] != 256 || sec_count[SEC_CLASSES] == 0 ||
        sec_count[SEC_CLASSES] > 0x110000u)
        return Q25_ERR_CORRUPT;
    for (int k = 0; k < 3; k++) {
        uint32_t id = rd32(m + 8 + 4 * k);
        if (id != NO_TOKEN && id >= nv)
            return Q25_ERR_CORRUPT;
    }
    const uint8_t *b2t = sec[SEC_BYTE_TO_TOKEN];
    for (int i = 0; i < 256; i++)
        if (rd32(b2t + 4 * i) >= nv)
            return Q25_ERR_CORRUPT;
    uint64_t cap = sec_count[SEC_PAIR_INDEX];
    if (cap < 16 || (cap & (cap - 1)) || cap > 0x80000000u || cap < info->merge_count)
        return Q25_ERR_CORRUPT;
    /* the class table is independent of the vocabulary (a few thousand ranges) */
    const uint8_t *cls = sec[SEC_CLASSES];
    uint32_t ncls = (uint32_t)sec_count[SEC_CLASSES];
    if (rd32(cls) != 0)
        return Q25_ERR_CORRUPT;
    for (uint32_t i = 1; i < ncls; i++)
        if (rd32(cls + 8u * i) <= rd32(cls + 8u * (i - 1)) || rd32(cls + 8u * i) > 0x10FFFFu)
            return Q25_ERR_CORRUPT;

    b->token_index = sec[SEC_TOKEN_INDEX];
    b->token_bytes = sec[SEC_TOKEN_BYTES];
    b->token_bytes_size = sec_size[SEC_TOKEN_BYTES];
    b->merges = sec[SEC_MERGES];
    b->specials = sec[SEC_SPECIALS];
    b->vocab_size = nv;
    b->merge_count = info->merge_count;
    b->special_count = info->special_count;

    /* special tokens: checked once here (they are followed without per-access checks) */
    for (uint32_t k = 0; k < b->special_count; k++) {
        const uint8_t *r = b->specials + 8u * k;
        uint32_t id = rd32(r), len = rd16(r + 6);
        if (id >= nv)
            return Q25_ERR_CORRUPT;
        const uint8_t *ti = b->token_index + 8u * id;
        uint64_t off = rd32(ti);
        if (rd16(ti + 4) != len || off + len > b->token_bytes_size)
            return Q25_ERR_CORRUPT;
        if (len == 0)
            continue;
        const uint8_t *text = b->token_bytes + off;
        if (len == 1)
            set_bit(e->special_single, text[0]);
        else
            set_bit(e->special_pair, ((uint32_t)text[0] << 8) | text[1]);
        if (len > e->max_special_len)
            e->max_special_len = len;
    }

    e->bundle = b;
    e->byte_to_token = b2t;
    e->pair_index = sec[SEC_PAIR_INDEX];
    e->pair_capacity = (uint32_t)cap;
    e->classes = cls;
    e->class_count = ncls;
    for (uint32_t c = 0; c < 128; c++)
        e->ascii_flags[c] = (uint16_t)class_lookup(cls, ncls, c);
    return Q25_OK;
}

/* ---- encoding ------------------------------------------------------------------------ */
typedef struct enc {
    const q25_encode_view *v;
    const q25_bundle_view *b;
    uint32_t *out;
    size_t out_cap, n_out;
    uint8_t *bpe;        /* BPE work area */
    size_t bpe_size;
    size_t bpe_need;     /* largest BPE area a piece needed */
    int measuring;       /* scratch ran out: only measure from here on */
    uint8_t *cache;      /* piece cache at the end of the BPE area (NULL when off) */
    size_t cache_mask;   /* slots - 1 */
    int err;
    size_t pieces;
} enc;

static void emit(enc *c, uint32_t id)
{
    if (c->n_out < c->out_cap)
        c->out[c->n_out] = id;
    c->n_out++;
}

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
    r.flags = class_lookup(c->v->classes, c->v->class_count, r.cp);
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
        uint32_t slot = rd32(c->v->pair_index + 4u * h);
        if (slot == 0)
            return -1;
        if (slot > c->b->merge_count) {
            c->err = Q25_ERR_CORRUPT;
            return -1;
        }
        const uint8_t *mr = c->b->merges + 16u * (slot - 1);
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

static void sift_down(uint64_t *hp, size_t n, size_t i)
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
        sift_down(hp, *n, 0);
    return top;
}

#define DEAD 0xFFFFFFFFu

/* pieces up to this many symbols merge with a rank array (fewer cache misses than a heap) */
#define SMALL_PIECE 48

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
#define CACHE_BYTES 24
#define CACHE_IDS 8
#define CACHE_SLOT (8 + CACHE_BYTES + 4 * CACHE_IDS)
#define CACHE_MAX_SLOTS 4096

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
     * the piece holds invalid or overlong sequences) */
    size_t n = len;
    int all_clean = 1;
    if (!ascii) {
        n = 0;
        for (size_t i = a; i < b;) {
            uint32_t cp;
            int clean;
            uint8_t tmp[4];
            size_t l = decode_cp(s, i, b, &cp, &clean);
            n += clean ? l : utf8_put(cp, tmp);
            all_clean &= clean;
            i += l;
        }
    }
    uint32_t small_ids[SMALL_PIECE];
    size_t need = n <= SMALL_PIECE ? 0 : n * (3 * sizeof(uint32_t) + 3 * sizeof(uint64_t)) + 16;
    if (need > c->bpe_need)
        c->bpe_need = need;
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
        const uint8_t *mr = c->b->merges + 16u * r;
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
static void pretokenize(enc *c, const uint8_t *s, size_t a, size_t end)
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

/* does special token k (bundle order) match at s[p...]? returns its length or 0 */
static uint32_t special_at(const q25_bundle_view *b, uint32_t k, const uint8_t *s, size_t p, size_t len,
                           unsigned flags)
{
    const uint8_t *r = b->specials + 8u * k;
    uint32_t id = rd32(r), type = rd16(r + 4), slen = rd16(r + 6);
    if (slen == 0 || slen > len - p)
        return 0;
    if (type == Q25_TOKEN_CONTROL || type == Q25_TOKEN_UNKNOWN) {
        if (!(flags & Q25_ENCODE_PARSE_SPECIAL))
            return 0;
    } else if (type != Q25_TOKEN_USER_DEFINED) {
        return 0;
    }
    const uint8_t *text = b->token_bytes + rd32(b->token_index + 8u * id);
    return memcmp(text, s + p, slen) == 0 ? slen : 0;
}

static void heapsort_u64(uint64_t *a, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(a, n, i);
    /* min-heap: pop into the tail gives descending order; reverse afterwards */
    for (size_t end = n; end > 1; end--) {
        uint64_t top = a[0];
        a[0] = a[end - 1];
        sift_down(a, end - 1, 0);
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
    size_t head = nm * 8 + ((bitmap_bytes + 7) & ~(size_t)7);
    if (head > avail) {
        /* cannot even hold the matches: report a size that is enough for any piece */
        stats->scratch_needed = overhead + head + (3 * len + 4) * (3 * sizeof(uint32_t) + 3 * sizeof(uint64_t)) + 16;
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
            uint32_t slen = rd16(b->specials + 8u * k + 6);
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
        const uint8_t *r = b->specials + 8u * k;
        pretokenize(&c, s, cursor, p);
        if (!c.measuring)
            emit(&c, rd32(r));
        cursor = (size_t)p + rd16(r + 6);
    }
    if (!c.err)
        pretokenize(&c, s, cursor, len);

    stats->special_matches = nm;
    stats->pieces = c.pieces;
    stats->scratch_needed = overhead + head + c.bpe_need;
    if (c.err)
        return c.err;
    if (c.measuring)
        return Q25_ERR_SCRATCH_CAPACITY;
    stats->ids_needed = c.n_out;
    stats->ids_written = c.n_out < out_cap ? c.n_out : out_cap;
    return c.n_out > out_cap ? Q25_ERR_OUT_CAPACITY : Q25_OK;
}

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
        const uint8_t *ti = b->token_index + 8u * ids[i];
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
