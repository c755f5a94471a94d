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
    case Q25_ERR_CORRUPT: return "corrupt image: an id, offset, count or table order is out of range";
    case Q25_ERR_TOKEN_ID: return "token id out of range";
    case Q25_ERR_OUT_CAPACITY: return "output buffer too small";
    case Q25_ERR_SCRATCH_CAPACITY: return "scratch buffer too small";
    case Q25_ERR_TABLE: return "malformed region or tensor table line";
    case Q25_ERR_NOT_FOUND: return "no such tensor in the tensor table";
    case Q25_ERR_UNSUPPORTED: return "ggml type not supported by q25_dequantize";
    case Q25_ERR_MODEL: return "model parameters malformed, out of bounds, or not the tensors' shapes";
    case Q25_ERR_THREADS: return "cannot start the worker threads";
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
        if (rd32(classes + (size_t)8 * mid) <= cp)
            lo = mid;
        else
            hi = mid;
    }
    return rd32(classes + (size_t)8 * lo + 4);
}


/* check 13: the pre-tokenizer field is exactly "qwen2", NUL-padded to 32 bytes */
static const uint8_t PRE_QWEN2[32] = {'q', 'w', 'e', 'n', '2'};

/* The checks of docs/runtime-image.md "Validation a reader performs", numbered as there
 * (q25deploy/tokenizer/image/reader.py implements the same list). All of them run at every
 * open: checks 16-21 are one pass over the vocabulary sections (~150k tokens and merges:
 * about a millisecond), and after them nothing the encoder or decoder follows can point
 * outside the image. */
int q25_nl_tokenizer_runtime_image_open(const void *image, size_t size, q25_bundle_view *b, q25_encode_view *e,
                                        q25_image_info *info, unsigned flags)
{
    if (!image || !b || !e || !info)
        return Q25_ERR_ARG;
    memset(info, 0, sizeof *info);
    memset(b, 0, sizeof *b);
    memset(e, 0, sizeof *e);
    const uint8_t *p = (const uint8_t *)image;
    /* 1. magic */
    if (size < HEADER_SIZE || memcmp(p, "Q25TOKRT", 8) != 0)
        return Q25_ERR_MAGIC;
    /* 2. major version */
    info->version_major = rd16(p + 8);
    info->version_minor = rd16(p + 10);
    if (info->version_major != Q25TOK_FORMAT_MAJOR)
        return Q25_ERR_VERSION;
    uint32_t header_size = rd32(p + 12), count = rd32(p + 16), alignment = rd32(p + 20);
    uint64_t file_size = rd64(p + 24);
    /* 3. file size; 4. section count and header size */
    if (file_size != (uint64_t)size || count < 1 || count > Q25_MAX_SECTIONS ||
        header_size != HEADER_SIZE + ENTRY_SIZE * count || header_size > size)
        return Q25_ERR_HEADER;
    /* 5. header checksum */
    static const uint8_t zero4[4] = {0, 0, 0, 0};
    uint32_t crc = q25_crc32(0, p, 36);
    crc = q25_crc32(crc, zero4, 4);
    crc = q25_crc32(crc, p + 40, header_size - 40);
    if (crc != rd32(p + 36))
        return Q25_ERR_HEADER;
    /* 6. alignment */
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
        /* 7. aligned, in table order after the previous section (the first after the
         *    header), inside the file */
        if (s->offset % alignment || s->offset < prev_end || s->offset > size || s->size > size - s->offset)
            return Q25_ERR_SECTION;
        /* 8. records fill the section exactly */
        if (s->record_size == 0 || s->record_count > s->size / s->record_size ||
            s->record_count * s->record_size != s->size)
            return Q25_ERR_SECTION;
        prev_end = s->offset + s->size;
        /* 9. (Q25_OPEN_VERIFY_CRC) the section's CRC32 */
        if ((flags & Q25_OPEN_VERIFY_CRC) && q25_crc32(0, p + s->offset, (size_t)s->size) != s->crc32)
            return Q25_ERR_CRC;
        /* 10. known types once each, with their record size; unknown types are skipped */
        if (s->type < 1 || s->type > N_KNOWN)
            continue;
        if (sec[s->type])
            return Q25_ERR_MISSING;
        if (s->record_size != record_sizes[s->type])
            return Q25_ERR_SECTION;
        sec[s->type] = p + s->offset;
        sec_size[s->type] = s->size;
        sec_count[s->type] = s->record_count;
    }
    /* 11. all known types present */
    for (int t = 1; t <= N_KNOWN; t++)
        if (!sec[t])
            return Q25_ERR_MISSING;
    info->crc_checked = (flags & Q25_OPEN_VERIFY_CRC) ? 1 : 0;

    /* 12. one metadata record */
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
    /* 13. pre-tokenizer */
    if (memcmp(m + 96, PRE_QWEN2, 32) != 0)
        return Q25_ERR_VERSION;

    /* 14. counts agree with the sections */
    uint32_t nv = info->vocab_size, nm = info->merge_count, ns = info->special_count;
    if (nv == 0 || nv >= 0x7FFFFFFFu || sec_count[SEC_TOKEN_INDEX] != nv || sec_count[SEC_MERGES] != nm ||
        sec_count[SEC_SPECIALS] != ns)
        return Q25_ERR_CORRUPT;
    /* 15. bos, eos, pad */
    for (int k = 0; k < 3; k++) {
        uint32_t id = rd32(m + 8 + 4 * k);
        if (id != NO_TOKEN && id >= nv)
            return Q25_ERR_CORRUPT;
    }
    /* 16. byte_to_token: 256 ids in range */
    const uint8_t *b2t = sec[SEC_BYTE_TO_TOKEN];
    if (sec_count[SEC_BYTE_TO_TOKEN] != 256)
        return Q25_ERR_CORRUPT;
    for (int i = 0; i < 256; i++)
        if (rd32(b2t + 4 * i) >= nv)
            return Q25_ERR_CORRUPT;
    /* 17. class table: from code point 0, strictly ascending, within U+10FFFF */
    const uint8_t *cls = sec[SEC_CLASSES];
    if (sec_count[SEC_CLASSES] == 0 || sec_count[SEC_CLASSES] > 0x110000u || rd32(cls) != 0)
        return Q25_ERR_CORRUPT;
    uint32_t ncls = (uint32_t)sec_count[SEC_CLASSES];
    for (uint32_t i = 1; i < ncls; i++)
        if (rd32(cls + (size_t)8 * i) <= rd32(cls + (size_t)8 * (i - 1)) || rd32(cls + (size_t)8 * i) > 0x10FFFFu)
            return Q25_ERR_CORRUPT;
    /* 18. merge-pair index: the capacity the spec fixes (load <= 1/2, so probes end at an
     *     empty slot), every slot 0..merge_count, exactly merge_count of them used */
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)nm)
        cap <<= 1;
    if (cap > 0x80000000u || sec_count[SEC_PAIR_INDEX] != cap)
        return Q25_ERR_CORRUPT;
    /* (the loops of 18-20 accumulate instead of branching, so that they vectorize) */
    const uint8_t *pairs = sec[SEC_PAIR_INDEX];
    uint32_t used = 0, bad = 0;
    for (uint32_t i = 0; i < (uint32_t)cap; i++) {
        uint32_t slot = rd32(pairs + (size_t)4 * i);
        bad |= slot > nm;
        used += slot != 0;
    }
    if (bad || used != nm)
        return Q25_ERR_CORRUPT;
    /* 19. every token's bytes inside token_bytes; count the special-typed tokens for 21 */
    const uint8_t *ti = sec[SEC_TOKEN_INDEX];
    uint64_t tb_size = sec_size[SEC_TOKEN_BYTES];
    uint32_t n_special_typed = 0;
    for (uint32_t i = 0; i < nv; i++) {
        const uint8_t *r = ti + (size_t)8 * i;
        uint32_t type = rd16(r + 6);
        bad |= (uint64_t)rd32(r) + rd16(r + 4) > tb_size;
        n_special_typed += type - 2u <= 2u; /* UNKNOWN, CONTROL, USER_DEFINED */
    }
    if (bad)
        return Q25_ERR_CORRUPT;
    /* 20. merges: ids in range, record i has rank i */
    const uint8_t *mt = sec[SEC_MERGES];
    for (uint32_t i = 0; i < nm; i++) {
        const uint8_t *r = mt + (size_t)16 * i;
        bad |= rd32(r) >= nv;
        bad |= rd32(r + 4) >= nv;
        bad |= rd32(r + 8) >= nv;
        bad |= rd32(r + 12) != i;
    }
    if (bad)
        return Q25_ERR_CORRUPT;
    /* 21. special index: ids in range with the token index's type (2, 3 or 4) and length,
     *     longest first then by id (no id twice), and every such token listed */
    const uint8_t *sp = sec[SEC_SPECIALS];
    if (n_special_typed != ns)
        return Q25_ERR_CORRUPT;
    for (uint32_t k = 0; k < ns; k++) {
        const uint8_t *r = sp + (size_t)8 * k;
        uint32_t id = rd32(r), type = rd16(r + 4), len = rd16(r + 6);
        if (id >= nv)
            return Q25_ERR_CORRUPT;
        const uint8_t *t = ti + (size_t)8 * id;
        if (rd16(t + 6) != type || rd16(t + 4) != len ||
            !(type == Q25_TOKEN_CONTROL || type == Q25_TOKEN_USER_DEFINED || type == Q25_TOKEN_UNKNOWN))
            return Q25_ERR_CORRUPT;
        if (k > 0) {
            uint32_t pid = rd32(r - 8), plen = rd16(r - 2);
            if (plen < len || (plen == len && pid >= id))
                return Q25_ERR_CORRUPT;
        }
    }

    b->token_index = ti;
    b->token_bytes = sec[SEC_TOKEN_BYTES];
    b->token_bytes_size = tb_size;
    b->merges = mt;
    b->specials = sp;
    b->vocab_size = nv;
    b->merge_count = nm;
    b->special_count = ns;

    /* the encoder's small tables (every offset below was bounded by checks 19 and 21) */
    for (uint32_t k = 0; k < ns; k++) {
        const uint8_t *r = sp + (size_t)8 * k;
        uint32_t id = rd32(r), len = rd16(r + 6);
        if (len == 0)
            continue;
        const uint8_t *text = b->token_bytes + rd32(ti + (size_t)8 * id);
        if (len == 1)
            set_bit(e->special_single, text[0]);
        else
            set_bit(e->special_pair, ((uint32_t)text[0] << 8) | text[1]);
        if (len > e->max_special_len)
            e->max_special_len = len;
    }

    e->bundle = b;
    e->byte_to_token = b2t;
    e->pair_index = pairs;
    e->pair_capacity = (uint32_t)cap;
    e->classes = cls;
    e->class_count = ncls;
    for (uint32_t c = 0; c < 128; c++)
        e->ascii_flags[c] = (uint16_t)q25_class_lookup(cls, ncls, c);
    return Q25_OK;
}
