/*
 * q25tok: Q25TOKRT image open and validation, CRC-32, error strings (see q25tok.h and docs/runtime-image.md).
 * C11, libc only, no allocation, every image read bounds-checked.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok_internal.h"

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
    case Q25_ERR_TABLE: return "malformed region table line";
    default: return "unknown error";
    }
}


/* ---- image open ---------------------------------------------------------------------- */
uint32_t q25_class_lookup(const uint8_t *classes, uint32_t n, uint32_t cp)
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
        e->ascii_flags[c] = (uint16_t)q25_class_lookup(cls, ncls, c);
    return Q25_OK;
}

