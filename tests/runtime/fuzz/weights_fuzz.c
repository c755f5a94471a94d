/*
 * libFuzzer harness for the weights API: the input is a tensor table (q25_tensor_table_next,
 * q25_tensor_find, q25_tensor_blocks) and, from byte 0, a ggml type and blocks for
 * q25_dequantize. Checks what the API promises: every accepted line is consistent (name
 * terminated, sizes agree with the type, ranges inside the tensor), and q25_dequantize reads
 * only q25_ggml_bytes(type, n) bytes (ASan: the blocks are copied to an exact-size buffer) and
 * writes only n floats, or nothing for an unsupported type. Any sanitizer report is a finding.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "q25tok.h"

#define REQUIRE(cond)        \
    do {                     \
        if (!(cond))         \
            abort();         \
    } while (0)

static void tables(const char *text, size_t len)
{
    q25_tensor t;
    size_t pos = 0;
    int rc;
    while ((rc = q25_tensor_table_next(text, len, &pos, &t)) == 1) {
        REQUIRE(pos <= len && memchr(t.name, 0, sizeof t.name) && memchr(t.type_name, 0, sizeof t.type_name));
        REQUIRE(t.n_dims >= 1 && t.n_dims <= Q25_TENSOR_MAX_DIMS && t.offset + t.bytes >= t.offset);
        uint64_t bytes, off, n;
        uint32_t be, bb;
        if (q25_ggml_block(t.type, &be, &bb) == Q25_OK) {
            REQUIRE(q25_ggml_bytes(t.type, t.n_elements, &bytes) == Q25_OK && bytes == t.bytes);
            uint64_t blocks = t.bytes / bb;
            REQUIRE(q25_tensor_blocks(&t, 0, blocks, &off, &n) == Q25_OK && off == t.offset && n == t.bytes);
            REQUIRE(q25_tensor_blocks(&t, blocks, 1, &off, &n) == Q25_ERR_ARG);
        } else {
            REQUIRE(q25_tensor_blocks(&t, 0, 1, &off, &n) == Q25_ERR_UNSUPPORTED);
        }
        q25_tensor found;
        int f = q25_tensor_find(text, len, t.name, &found);
        REQUIRE(f == Q25_OK || f == Q25_ERR_TABLE); /* a malformed line before it stops the search */
    }
    REQUIRE(rc == 0 || rc == Q25_ERR_TABLE);
}

static void blocks(const uint8_t *data, size_t size)
{
    static float out[4096 + 1];
    uint32_t type = data[0] & 31u, be, bb;
    if (q25_ggml_block(type, &be, &bb) != Q25_OK) {
        out[0] = 1.0f;
        REQUIRE(q25_dequantize(type, data, 0, out) == Q25_ERR_UNSUPPORTED && out[0] == 1.0f);
        return;
    }
    size_t nblocks = (size - 1) / bb;
    if ((uint64_t)nblocks * be > 4096)
        nblocks = 4096 / be;
    size_t n = nblocks * be, len = nblocks * bb;
    uint8_t *copy = malloc(len ? len : 1);
    REQUIRE(copy);
    memcpy(copy, data + 1, len);
    out[n] = 7.0f;
    REQUIRE(q25_dequantize(type, copy, n, out) == Q25_OK && out[n] == 7.0f);
    free(copy);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    tables((const char *)data, size);
    blocks(data, size);
    return 0;
}
