/*
 * The tensor table (partitions/tensors.tab, written by `q25deploy build`): where each tensor
 * of the model lies in the reserved regions. Text, one tensor per line, '#' starts a comment:
 *
 *     NAME TYPE TYPE_NAME REGION OFFSET BYTES SHAPE
 *     blk.0.attn_q.weight 12 Q4_K 0 0x3a2000 451584 896,896
 *
 * TYPE is ggml's type number and TYPE_NAME its name; REGION the index of the region's line in
 * regions.tab (from 0); OFFSET (hex) the tensor's first byte in that region; BYTES decimal;
 * SHAPE ggml's ne[0],ne[1],... (ne[0] is the row length, contiguous in memory). For the types
 * q25_dequantize knows, the name must be ggml's for the number and BYTES must equal the shape's
 * size in blocks; other types are listed as they are (q25_dequantize reports them unsupported).
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok.h"

#include <string.h>

/* the next space-separated field of [*p, end): its start and length (0 at the end of the line) */
static size_t field(const char **p, const char *end, const char **start)
{
    while (*p < end && **p == ' ')
        (*p)++;
    *start = *p;
    while (*p < end && **p != ' ')
        (*p)++;
    return (size_t)(*p - *start);
}

static int parse_u64(const char *s, size_t len, int base, uint64_t *out)
{
    uint64_t v = 0;
    if (base == 16) {
        if (len < 3 || s[0] != '0' || s[1] != 'x')
            return 0;
        s += 2;
        len -= 2;
    }
    if (len == 0 || len > (base == 16 ? 16u : 20u))
        return 0;
    for (size_t i = 0; i < len; i++) {
        int d = s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : base == 16 && s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10 : -1;
        if (d < 0 || v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return 0;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return 1;
}

static int plain_name(const char *s, size_t len)
{
    if (len == 0 || len >= Q25_TENSOR_NAME_MAX)
        return 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_'
              || c == '-'))
            return 0;
    }
    return 1;
}

/* one non-comment line [s, end) into t */
static int parse_line(const char *s, const char *end, q25_tensor *t)
{
    const char *f;
    size_t n = field(&s, end, &f);
    if (!plain_name(f, n))
        return Q25_ERR_TABLE;
    memcpy(t->name, f, n);
    t->name[n] = 0;
    uint64_t type, region;
    n = field(&s, end, &f);
    if (!parse_u64(f, n, 10, &type) || type > UINT32_MAX)
        return Q25_ERR_TABLE;
    t->type = (uint32_t)type;
    n = field(&s, end, &f);
    if (!plain_name(f, n) || n >= sizeof t->type_name)
        return Q25_ERR_TABLE;
    memcpy(t->type_name, f, n);
    t->type_name[n] = 0;
    const char *known = q25_ggml_type_name(t->type);
    if (known && strcmp(known, t->type_name) != 0)
        return Q25_ERR_TABLE;
    n = field(&s, end, &f);
    if (!parse_u64(f, n, 10, &region) || region > UINT32_MAX)
        return Q25_ERR_TABLE;
    t->region = (uint32_t)region;
    n = field(&s, end, &f);
    if (!parse_u64(f, n, 16, &t->offset))
        return Q25_ERR_TABLE;
    n = field(&s, end, &f);
    if (!parse_u64(f, n, 10, &t->bytes) || t->offset > UINT64_MAX - t->bytes)
        return Q25_ERR_TABLE;
    n = field(&s, end, &f);
    const char *shape_end = f + n;
    t->n_dims = 0;
    t->n_elements = 1;
    while (f < shape_end) {
        const char *comma = memchr(f, ',', (size_t)(shape_end - f));
        const char *e = comma ? comma : shape_end;
        uint64_t ne;
        if (t->n_dims == Q25_TENSOR_MAX_DIMS || !parse_u64(f, (size_t)(e - f), 10, &ne) || ne == 0
            || t->n_elements > UINT64_MAX / ne || (comma && comma + 1 == shape_end))
            return Q25_ERR_TABLE;
        t->ne[t->n_dims++] = ne;
        t->n_elements *= ne;
        f = comma ? comma + 1 : shape_end;
    }
    if (t->n_dims == 0 || field(&s, end, &f) != 0)
        return Q25_ERR_TABLE;
    for (uint32_t i = t->n_dims; i < Q25_TENSOR_MAX_DIMS; i++)
        t->ne[i] = 1;
    uint32_t block_elems;
    uint64_t bytes;
    if (known && (q25_ggml_block(t->type, &block_elems, NULL) != Q25_OK || t->ne[0] % block_elems != 0
                  || q25_ggml_bytes(t->type, t->n_elements, &bytes) != Q25_OK || bytes != t->bytes))
        return Q25_ERR_TABLE;
    return Q25_OK;
}

int q25_tensor_table_next(const char *text, size_t len, size_t *pos, q25_tensor *out)
{
    if (!text || !pos || !out || *pos > len)
        return Q25_ERR_ARG;
    while (*pos < len) {
        const char *p = text + *pos, *end = text + len;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (!eol)
            eol = end;
        *pos = (size_t)(eol - text) + (eol < end);
        const char *hash = memchr(p, '#', (size_t)(eol - p));
        const char *stop = hash ? hash : eol;
        while (stop > p && (stop[-1] == ' ' || stop[-1] == '\r'))
            stop--;
        while (p < stop && *p == ' ')
            p++;
        if (p == stop)
            continue;
        return parse_line(p, stop, out) == Q25_OK ? 1 : Q25_ERR_TABLE;
    }
    return 0;
}

int q25_tensor_find(const char *text, size_t len, const char *name, q25_tensor *out)
{
    if (!text || !name || !out)
        return Q25_ERR_ARG;
    size_t pos = 0;
    int rc;
    while ((rc = q25_tensor_table_next(text, len, &pos, out)) == 1)
        if (strcmp(out->name, name) == 0)
            return Q25_OK;
    return rc == 0 ? Q25_ERR_NOT_FOUND : rc;
}

int q25_tensor_blocks(const q25_tensor *t, uint64_t first, uint64_t count, uint64_t *offset, uint64_t *bytes)
{
    uint32_t block_bytes;
    if (!t || !offset || !bytes)
        return Q25_ERR_ARG;
    int rc = q25_ggml_block(t->type, NULL, &block_bytes);
    if (rc != Q25_OK)
        return rc;
    uint64_t blocks = t->bytes / block_bytes;
    if (first > blocks || count > blocks - first)
        return Q25_ERR_ARG;
    *offset = t->offset + first * block_bytes;
    *bytes = count * block_bytes;
    return Q25_OK;
}
