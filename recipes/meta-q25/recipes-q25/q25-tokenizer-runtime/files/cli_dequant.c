/*
 * q25tok dequant TYPE FILE   FILE's ggml blocks as float32 (little-endian) on stdout
 * q25tok tensor TABLE NAME   NAME's line of a tensor table (partitions/tensors.tab), parsed
 *
 * TYPE is a ggml type name (Q4_K) or number (12). Exit codes: 0 ok, 1 I/O error, 2 usage,
 * 3 FILE is not a whole number of blocks or TABLE is malformed, 7 a type q25_dequantize does
 * not know, 8 no tensor NAME in TABLE. Used by the tests and by people checking a build.
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_open.h"
#include "q25tok.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { EXIT_IO = 1, EXIT_USAGE = 2, EXIT_INPUT = 3, EXIT_UNSUPPORTED = 7, EXIT_NOT_FOUND = 8 };

static int parse_type(const char *s, uint32_t *type)
{
    char *end;
    if (q25_ggml_type_from_name(s, type) == Q25_OK)
        return 1;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno || v > UINT32_MAX)
        return 0;
    *type = (uint32_t)v;
    return 1;
}

static int cmd_dequant(int argc, char **argv)
{
    uint32_t type, block_elems, block_bytes;
    if (argc != 2)
        return EXIT_USAGE;
    if (!parse_type(argv[0], &type)) {
        fprintf(stderr, "q25tok: dequant: unknown type %s\n", argv[0]);
        return EXIT_USAGE;
    }
    if (q25_ggml_block(type, &block_elems, &block_bytes) != Q25_OK) {
        fprintf(stderr, "q25tok: dequant: type %s: %s\n", argv[0], q25_strerror(Q25_ERR_UNSUPPORTED));
        return EXIT_UNSUPPORTED;
    }
    struct stat st;
    FILE *f = q25tok_fopen_regular(argv[1], &st, Q25TOK_ANY_SIZE); /* streamed: at most its size at open */
    if (!f) {
        fprintf(stderr, "q25tok: %s: %s\n", argv[1], q25tok_open_why(errno));
        return EXIT_IO;
    }
    static uint8_t in[1 << 18];
    static float out[1 << 20]; /* at most 4 floats per byte (Q2_K: 256 per 84) */
    size_t want = (sizeof in / block_bytes) * block_bytes, got;
    uint64_t left = (uint64_t)st.st_size;
    int rc = 0;
    while (left && (got = fread(in, 1, want < left ? want : (size_t)left, f)) > 0) {
        left -= got;
        size_t n = got / block_bytes * block_elems;
        if (got % block_bytes) {
            fprintf(stderr, "q25tok: %s: not a whole number of %u-byte blocks\n", argv[1], block_bytes);
            rc = EXIT_INPUT;
            break;
        }
        q25_dequantize(type, in, n, out);
        if (fwrite(out, sizeof(float), n, stdout) != n) {
            rc = EXIT_IO;
            break;
        }
    }
    if (!rc && ferror(f)) {
        fprintf(stderr, "q25tok: %s: read error\n", argv[1]);
        rc = EXIT_IO;
    }
    fclose(f);
    if (fflush(stdout) != 0 && !rc)
        rc = EXIT_IO;
    return rc;
}

static int cmd_tensor(int argc, char **argv)
{
    if (argc != 2)
        return EXIT_USAGE;
    uint8_t *text;
    size_t len;
    if (q25tok_read_private(argv[0], Q25TOK_MAX_TEXT, &text, &len) != 0) { /* a 7B model's is ~40 KB */
        fprintf(stderr, "q25tok: %s: %s\n", argv[0], q25tok_open_why(errno));
        return EXIT_IO;
    }
    q25_tensor t;
    int st = q25_tensor_find((const char *)text, len, argv[1], &t);
    free(text);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: %s: %s: %s\n", argv[0], argv[1], q25_strerror(st));
        return st == Q25_ERR_NOT_FOUND ? EXIT_NOT_FOUND : EXIT_INPUT;
    }
    printf("%s type %u %s region %u offset 0x%llx bytes %llu elements %llu shape", t.name, t.type, t.type_name,
           t.region, (unsigned long long)t.offset, (unsigned long long)t.bytes, (unsigned long long)t.n_elements);
    for (uint32_t i = 0; i < t.n_dims; i++)
        printf("%c%llu", i ? ',' : ' ', (unsigned long long)t.ne[i]);
    printf(" dequantize %s\n", q25_ggml_type_name(t.type) ? "yes" : "unsupported");
    return 0;
}

int q25tok_weights_command(int argc, char **argv)
{
    int rc = strcmp(argv[1], "dequant") == 0 ? cmd_dequant(argc - 2, argv + 2) : cmd_tensor(argc - 2, argv + 2);
    if (rc == EXIT_USAGE)
        fputs("usage: q25tok dequant TYPE FILE | q25tok tensor TABLE NAME\n", stderr);
    return rc;
}
