/*
 * q25tok: the board command for the Q25TOKRT tokenizer runtime.
 *
 *   q25tok info IMAGE                      header, sections, fingerprint, CRC check
 *   q25tok encode [--special] IMAGE [FILE...]  ids of stdin, or one line per FILE
 *   q25tok decode [--special] IMAGE ID...  the ids' bytes on stdout
 *   q25tok load / verify ... REGION_TABLE  the partitions into their regions, read back (cli_load.c)
 *   q25tok receive FILE                    stdin into FILE, hashed as written (cli_receive.c)
 *   q25tok dequant TYPE FILE / tensor TABLE NAME   weights (cli_dequant.c)
 *   q25tok probe REGION_TABLE TENSOR_TABLE [ID...]  the weights as the board reads them (cli_probe.c)
 *   q25tok generate REGION_TABLE TENSOR_TABLE ID...  the model's forward pass, greedy, or
 *                                          teacher-forced with --positions N (cli_generate.c)
 *   q25tok compare EXPECTED PROMPT DUMP     a generate --dump-layers against the host's (cli_compare.c)
 *   q25tok ota STEP PAYLOAD                a release's steps for Mender and SWUpdate, as root (cli_ota.c)
 *
 * Exit codes (as usage_text lists them; docs/runtime.md too):
 *   0 ok, 1 I/O error, 2 usage, 3 bad image or input, 4 bad token id, 5 capacity,
 *   6 region not reserved in the running device tree, or its bytes differ, or a bad region table,
 *   7 ggml type not supported, 8 no such tensor, 9 bad model hyperparameters,
 *   10 a file to create refused (it exists, or a link or another user's directory is in its way),
 *   11 the forward pass differs from the host's (compare)
 *
 * The image is checked once at open (docs/runtime-image.md) and then its offsets and ids are
 * followed unchecked, so the bytes used must be the bytes checked whoever can write the file
 * (root runs this over a release directory): it is mapped only when no one but this user and
 * root can write it, else read into this process's memory (q25tok_read_whole, cli_open.c).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "q25tok.h"

#include "cli_open.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_IO = 1, EXIT_USAGE = 2, EXIT_IMAGE = 3, EXIT_ID = 4, EXIT_CAPACITY = 5 };

static const char *usage_text =
    "usage: q25tok info IMAGE\n"
    "       q25tok encode [--special] IMAGE [FILE...]\n"
    "       q25tok decode [--special] IMAGE ID...\n"
    "       q25tok load [--mem PATH] [--dt DIR] [--compare] REGION_TABLE\n"
    "       q25tok verify [--mem PATH] [--dt DIR] [--diff] REGION_TABLE\n"
    "       q25tok receive FILE   (standard input into FILE, a new file; prints its sha256)\n"
    "       q25tok dequant TYPE FILE   (ggml blocks to float32 on stdout)\n"
    "       q25tok tensor TENSOR_TABLE NAME\n"
    "       q25tok probe [--mem PATH] [--dt DIR | --files] REGION_TABLE TENSOR_TABLE [ID...]\n"
    "       q25tok generate [--mem PATH] [--dt DIR | --files] [--hparams FILE] [--steps N | --positions N]\n"
    "                       [--threads N] [--dump-layers] [--logits FILE] REGION_TABLE TENSOR_TABLE ID...\n"
    "       q25tok compare EXPECTED PROMPT DUMP   (a generate --dump-layers against q25-forward.txt)\n"
    "       q25tok ota install|smoke|rollback|cleanup|prepare|postinst [--root DIR] [--stdout] PAYLOAD\n"
    "                       (a release from a Mender or SWUpdate payload, as root: docs/ota.md)\n"
    "exit codes: 0 ok, 1 I/O error, 2 usage, 3 bad image or input, 4 bad token id, 5 capacity,\n"
    "            6 region not reserved in the running device tree, or its bytes differ, or a bad region table,\n"
    "            7 ggml type not supported, 8 no such tensor, 9 bad model hyperparameters,\n"
    "            10 a file to create refused (it exists, or a link or another user's directory is in its way),\n"
    "            11 the forward pass differs from the host's (compare)\n";

static int usage(void)
{
    fputs(usage_text, stderr);
    return EXIT_USAGE;
}

static int read_image(const char *path, q25tok_whole *m)
{
    if (q25tok_read_whole(path, Q25TOK_MAX_IMAGE, m) != 0) {
        fprintf(stderr, "q25tok: %s: %s\n", path, q25tok_open_why(errno));
        return errno == ENOMEM ? EXIT_CAPACITY : EXIT_IO;
    }
    return 0;
}

/* a read, opened image (the encode view is ~8.5 KB: on the heap) */
typedef struct loaded {
    q25tok_whole m;
    q25_bundle_view b;
    q25_image_info info;
    q25_encode_view *e;
} loaded;

static int load(const char *path, unsigned flags, loaded *l)
{
    l->m.data = NULL;
    l->e = malloc(sizeof *l->e);
    if (!l->e)
        return EXIT_CAPACITY;
    int rc = read_image(path, &l->m);
    if (rc)
        return rc;
    int st = q25_nl_tokenizer_runtime_image_open(l->m.data, l->m.size, &l->b, l->e, &l->info, flags);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: %s: %s\n", path, q25_strerror(st));
        return EXIT_IMAGE;
    }
    return 0;
}

static void unload(loaded *l)
{
    free(l->e);
    if (l->m.data)
        q25tok_release_whole(&l->m);
}

/* consumes a leading --special; returns the flag to use */
static unsigned take_special(int *argc, char ***argv, unsigned flag)
{
    if (*argc > 0 && strcmp((*argv)[0], "--special") == 0) {
        (*argc)--, (*argv)++;
        return flag;
    }
    return 0;
}

static void hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
}

static int cmd_info(int argc, char **argv)
{
    if (argc != 1)
        return usage();
    loaded l;
    int rc = load(argv[0], Q25_OPEN_VERIFY_CRC, &l);
    unload(&l);
    if (rc)
        return rc;
    const q25_image_info info = l.info;
    static const char *names[] = {"?", "token_index", "token_bytes", "merge_table", "byte_to_token",
                                  "merge_pair_index", "special_index", "unicode_classes", "metadata"};
    printf("format      Q25TOKRT %u.%u\n", info.version_major, info.version_minor);
    printf("size        %llu bytes, alignment %u, %u sections\n", (unsigned long long)info.file_size,
           info.alignment, info.section_count);
    printf("model       %s\n", info.model_name[0] ? info.model_name : "(unnamed)");
    printf("tokenizer   %s, %u tokens, %u merges, %u special\n", info.pre_tokenizer, info.vocab_size,
           info.merge_count, info.special_count);
    printf("special ids bos %d eos %d pad %d, add_bos %u\n", info.bos == 0xFFFFFFFFu ? -1 : (int)info.bos,
           info.eos == 0xFFFFFFFFu ? -1 : (int)info.eos, info.pad == 0xFFFFFFFFu ? -1 : (int)info.pad,
           info.flags & 1u);
    printf("unicode     %u.%u.%u\n", info.unicode_version >> 16, (info.unicode_version >> 8) & 0xFF,
           info.unicode_version & 0xFF);
    printf("fingerprint ");
    hex(info.vocab_fingerprint, 32);
    printf("\nsource      ");
    hex(info.source_sha256, 32);
    printf("\n");
    for (uint32_t k = 0; k < info.section_count; k++) {
        const q25_section_info *s = &info.sections[k];
        printf("section %-2u  %-16s offset %10llu size %10llu records %9llu x %-3u crc32 %08x\n", s->type,
               s->type <= 8 ? names[s->type] : "(unknown)", (unsigned long long)s->offset,
               (unsigned long long)s->size, (unsigned long long)s->record_count, s->record_size, s->crc32);
    }
    printf("crc         ok\n");
    return 0;
}

static int read_all(FILE *f, uint8_t **buf, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    uint8_t *p = malloc(cap);
    if (!p)
        return EXIT_CAPACITY;
    for (;;) {
        if (n == cap) {
            uint8_t *q = realloc(p, cap * 2);
            if (!q) {
                free(p);
                return EXIT_CAPACITY;
            }
            p = q;
            cap *= 2;
        }
        size_t got = fread(p + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                free(p);
                return EXIT_IO;
            }
            break;
        }
    }
    *buf = p;
    *len = n;
    return 0;
}

typedef struct workspace {
    void *scratch;
    size_t scratch_size;
    uint32_t *ids;
    size_t ids_cap;
} workspace;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    void *q = realloc(*p, need * elem);
    if (!q)
        return EXIT_CAPACITY;
    *p = q;
    *cap = need;
    return 0;
}

/* ids as decimal text, space separated, one line; formatted by hand (printf per id is
 * a sizeable part of the time for large inputs) */
static int write_ids(const uint32_t *ids, size_t n)
{
    char buf[1 << 16];
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > sizeof buf - 16) {
            if (fwrite(buf, 1, k, stdout) != k)
                return EXIT_IO;
            k = 0;
        }
        if (i)
            buf[k++] = ' ';
        char digits[10];
        int d = 0;
        uint32_t v = ids[i];
        do {
            digits[d++] = (char)('0' + v % 10);
            v /= 10;
        } while (v);
        while (d)
            buf[k++] = digits[--d];
    }
    buf[k++] = '\n';
    return fwrite(buf, 1, k, stdout) == k ? 0 : EXIT_IO;
}

static int encode_one(const q25_encode_view *e, const uint8_t *text, size_t len, unsigned flags, workspace *w)
{
    for (int attempt = 0; attempt < 4; attempt++) {
        q25_encode_stats st;
        int rc = q25_nl_tokenizer_bundle_encode_bpe_bounded(e, text, len, flags, w->scratch, w->scratch_size, w->ids,
                                                            w->ids_cap, &st);
        if (rc == Q25_OK)
            return write_ids(w->ids, st.ids_written);
        if (rc == Q25_ERR_SCRATCH_CAPACITY) {
            if (grow(&w->scratch, &w->scratch_size, st.scratch_needed, 1))
                return EXIT_CAPACITY;
        } else if (rc == Q25_ERR_OUT_CAPACITY) {
            void *p = w->ids;
            if (grow(&p, &w->ids_cap, st.ids_needed, sizeof(uint32_t)))
                return EXIT_CAPACITY;
            w->ids = p;
        } else {
            fprintf(stderr, "q25tok: encode: %s\n", q25_strerror(rc));
            return rc == Q25_ERR_CORRUPT ? EXIT_IMAGE : EXIT_CAPACITY;
        }
    }
    fprintf(stderr, "q25tok: encode: capacity retries exhausted\n");
    return EXIT_CAPACITY;
}

static int cmd_encode(int argc, char **argv)
{
    unsigned flags = take_special(&argc, &argv, Q25_ENCODE_PARSE_SPECIAL);
    if (argc < 1)
        return usage();
    loaded l;
    int rc = load(argv[0], 0, &l);
    workspace w = {0};
    if (!rc) {
        w.scratch_size = 1 << 20;
        w.scratch = malloc(w.scratch_size);
        w.ids_cap = 1 << 16;
        w.ids = malloc(w.ids_cap * sizeof(uint32_t));
        if (!w.scratch || !w.ids)
            rc = EXIT_CAPACITY;
    }
    for (int i = 1; !rc && i < (argc > 1 ? argc : 2); i++) {
        uint8_t *text;
        size_t len;
        if (argc > 1 && q25tok_read_private(argv[i], Q25TOK_MAX_PROMPT, &text, &len) != 0) {
            fprintf(stderr, "q25tok: %s: %s\n", argv[i], q25tok_open_why(errno));
            rc = errno == ENOMEM ? EXIT_CAPACITY : EXIT_IO;
            break;
        }
        if (argc == 1 && (rc = read_all(stdin, &text, &len)) != 0) {
            fprintf(stderr, "q25tok: cannot read stdin\n");
            break;
        }
        rc = encode_one(l.e, text, len, flags, &w);
        free(text);
    }
    free(w.scratch);
    free(w.ids);
    unload(&l);
    if (fflush(stdout) != 0 && !rc)
        rc = EXIT_IO;
    return rc;
}

static int cmd_decode(int argc, char **argv)
{
    unsigned flags = take_special(&argc, &argv, Q25_DECODE_SPECIAL);
    if (argc < 2)
        return usage();
    size_t n = (size_t)argc - 1;
    uint32_t *ids = malloc(n * sizeof *ids);
    if (!ids)
        return EXIT_CAPACITY;
    for (size_t i = 0; i < n; i++) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(argv[i + 1], &end, 10);
        if (errno || *end || end == argv[i + 1] || argv[i + 1][0] == '-' || v > 0xFFFFFFFFull) {
            fprintf(stderr, "q25tok: '%s' is not a token id\n", argv[i + 1]);
            free(ids);
            return EXIT_USAGE;
        }
        ids[i] = (uint32_t)v;
    }
    loaded l;
    int rc = load(argv[0], 0, &l);
    if (rc) {
        unload(&l);
        free(ids);
        return rc;
    }
    size_t written = 0;
    int st = q25_nl_tokenizer_bundle_detokenize(&l.b, ids, n, flags, NULL, 0, &written);
    uint8_t *out = NULL;
    if (st == Q25_OK || st == Q25_ERR_OUT_CAPACITY) {
        out = malloc(written ? written : 1);
        st = out ? q25_nl_tokenizer_bundle_detokenize(&l.b, ids, n, flags, out, written, &written) : Q25_ERR_OUT_CAPACITY;
    }
    free(ids);
    unload(&l);
    if (st == Q25_OK) {
        fwrite(out, 1, written, stdout);
        rc = fflush(stdout) ? EXIT_IO : 0;
    } else {
        fprintf(stderr, "q25tok: decode: %s\n", q25_strerror(st));
        rc = st == Q25_ERR_TOKEN_ID ? EXIT_ID : st == Q25_ERR_CORRUPT ? EXIT_IMAGE : EXIT_CAPACITY;
    }
    free(out);
    return rc;
}

int q25tok_region_command(int argc, char **argv); /* cli_load.c */
int q25tok_receive_command(int argc, char **argv); /* cli_receive.c */
int q25tok_weights_command(int argc, char **argv); /* cli_dequant.c */
int q25tok_probe_command(int argc, char **argv);   /* cli_probe.c */
int q25tok_generate_command(int argc, char **argv); /* cli_generate.c */
int q25tok_compare_command(int argc, char **argv);  /* cli_compare.c */
int q25tok_ota_command(int argc, char **argv);      /* cli_ota.c */

int q25tok_command(int argc, char **argv)
{
    if (argc < 2)
        return usage();
    if (strcmp(argv[1], "info") == 0)
        return cmd_info(argc - 2, argv + 2);
    if (strcmp(argv[1], "encode") == 0)
        return cmd_encode(argc - 2, argv + 2);
    if (strcmp(argv[1], "decode") == 0)
        return cmd_decode(argc - 2, argv + 2);
    if (strcmp(argv[1], "load") == 0 || strcmp(argv[1], "verify") == 0)
        return q25tok_region_command(argc, argv);
    if (strcmp(argv[1], "receive") == 0)
        return q25tok_receive_command(argc - 2, argv + 2);
    if (strcmp(argv[1], "probe") == 0)
        return q25tok_probe_command(argc - 2, argv + 2);
    if (strcmp(argv[1], "generate") == 0)
        return q25tok_generate_command(argc - 2, argv + 2);
    if (strcmp(argv[1], "compare") == 0)
        return q25tok_compare_command(argc - 2, argv + 2);
    if (strcmp(argv[1], "dequant") == 0 || strcmp(argv[1], "tensor") == 0)
        return q25tok_weights_command(argc, argv);
    if (strcmp(argv[1], "ota") == 0)
        return q25tok_ota_command(argc - 2, argv + 2);
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    return usage();
}

int main(int argc, char **argv)
{
    return q25tok_command(argc, argv);
}
