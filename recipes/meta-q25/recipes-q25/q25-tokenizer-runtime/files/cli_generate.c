/*
 * q25tok generate [--mem PATH] [--dt DIR | --files] [--hparams FILE] [--steps N | --positions N]
 *                 [--threads N] [--dump-layers] [--logits FILE] REGION_TABLE TENSOR_TABLE ID...
 *
 * Runs Qwen2.5's forward pass (model_forward.c) on the prompt ID... from the weights in the
 * reserved regions (through /dev/mem, Device memory: q25_region_read only) or, with --files,
 * from the partition files next to REGION_TABLE, and decodes greedily for N steps (8). Per
 * step it prints (docs/forward.md; floats %.9g, the float32 values exactly):
 *
 *     step S pos P token ID margin M       P: the position whose state is reported
 *     top ID LOGIT ID LOGIT ...            the five largest logits, descending, lower id first
 *     embd norm N values V V V V           with --dump-layers: the token embedding,
 *     layer L norm N values V V V V        the residual stream after each layer,
 *     output norm N values V V V V         and the output head's input (norm: float64 sum of
 *                                          squares; values at k * n_embd / 4, k = 0..3)
 *
 * --positions N (1..64, at most the number of IDs; not with --steps) is teacher forcing: no
 * token is chosen and fed back; every ID is evaluated in one q25_model_eval_last (batches of
 * up to 64 positions, the last batch holding the N reported, the output head read once for
 * them) and the last N positions are printed as steps 0..N-1, P their absolute positions
 * (0-based index of the ID), ID the argmax there: byte for byte what --steps prints for a
 * position whose fed token was the argmax (--positions 1 prints what --steps 1 prints), the
 * logits file holding those N positions' logits in order. The context is the IDs alone.
 * Out of range, more than the IDs, or with --steps: one line on stderr, exit 2.
 * --threads N (1..64; default the online CPUs, at most 8) splits each matrix's rows among N
 * threads (model_forward.c): the output is byte for byte the same for any N. 0 or not a
 * number: one line on stderr, exit 2.
 * --logits FILE writes every step's logits (n_vocab float32, little-endian) for tests, into
 * a new file (q25tok_create_new: never through a link, never over a file).
 * --hparams defaults to model_hparams.txt in the directory above REGION_TABLE's (a build's or
 * release's top). Exit codes: 0 ok, 1 I/O error, 2 usage, 4 an ID >= n_vocab, 5 out of
 * memory, past the context or the threads not started, 6 a region not reserved or a malformed table, 7 a weight type
 * q25_dequantize does not know, 8 a tensor missing, 9 hyperparameters malformed or not the
 * tensors', 10 the --logits FILE refused (it exists, or a link or another user's directory is in
 * its way).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_weights.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int q25tok_generate_command(int argc, char **argv);

enum {
    EXIT_IO = 1, EXIT_USAGE = 2, EXIT_ID = 4, EXIT_CAPACITY = 5, EXIT_REGION = 6, EXIT_UNSUPPORTED = 7,
    EXIT_NOT_FOUND = 8, EXIT_MODEL = 9
};
enum { MAX_IDS = 4096, MAX_STEPS = 4096, MAX_BATCH = 64, TOP = 5, DEFAULT_MAX_THREADS = 8 };

typedef struct summary {
    double norm;
    float values[4];
} summary;

/* the states of the positions reported, kept by the rows callback until their lines are printed */
typedef struct states {
    summary *s; /* per position n_layer + 2: the embedding, each layer, the output head's input */
    uint32_t n_layer;
} states;

static void keep(void *arg, int layer, const float *rows, uint32_t n_rows, uint32_t n)
{
    states *st = arg;
    for (uint32_t j = 0; j < n_rows; j++) {
        const float *h = rows + (size_t)j * n;
        summary *s = &st->s[(size_t)j * (st->n_layer + 2) + (size_t)(layer + 1)];
        double sum = 0.0;
        for (uint32_t i = 0; i < n; i++)
            sum += (double)h[i] * (double)h[i];
        s->norm = sqrt(sum);
        for (uint32_t k = 0; k < 4; k++)
            s->values[k] = h[k * n / 4];
    }
}

static void print_summary(const char *what, const summary *s)
{
    printf("%s norm %.17g values %.9g %.9g %.9g %.9g\n", what, s->norm, (double)s->values[0], (double)s->values[1],
           (double)s->values[2], (double)s->values[3]);
}

/* the TOP largest logits, descending, lower id first on a tie (NaN never wins) */
static void top_k(const float *logits, uint32_t n, uint32_t *ids, float *vals)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        float v = logits[i];
        if (v != v)
            continue;
        if (k == TOP && !(v > vals[TOP - 1]))
            continue;
        uint32_t j = k < TOP ? k++ : TOP - 1;
        while (j > 0 && v > vals[j - 1]) {
            vals[j] = vals[j - 1];
            ids[j] = ids[j - 1];
            j--;
        }
        vals[j] = v;
        ids[j] = i;
    }
    for (; k < TOP; k++) { /* fewer than TOP finite logits */
        ids[k] = 0;
        vals[k] = NAN;
    }
}

static int usage(void)
{
    fputs("usage: q25tok generate [--mem PATH] [--dt DIR | --files] [--hparams FILE] [--steps N | --positions N]\n"
          "                       [--threads N] [--dump-layers] [--logits FILE] REGION_TABLE TENSOR_TABLE ID...\n",
          stderr);
    return EXIT_USAGE;
}

static int parse_count(const char *s, unsigned long max, unsigned long *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (s[0] < '0' || s[0] > '9' || *end || errno || v > max)
        return 0;
    *out = v;
    return 1;
}

/* the online CPUs, at most DEFAULT_MAX_THREADS (the board's A53 has 4) */
static unsigned long default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > DEFAULT_MAX_THREADS ? DEFAULT_MAX_THREADS : (unsigned long)n;
}

static int exit_code(int st)
{
    switch (st) {
    case Q25_ERR_THREADS: return EXIT_CAPACITY;
    case Q25_ERR_MODEL: return EXIT_MODEL;
    case Q25_ERR_NOT_FOUND: return EXIT_NOT_FOUND;
    case Q25_ERR_UNSUPPORTED: return EXIT_UNSUPPORTED;
    case Q25_ERR_TOKEN_ID: return EXIT_ID;
    case Q25_ERR_OUT_CAPACITY: return EXIT_CAPACITY;
    default: return EXIT_REGION;
    }
}

typedef struct run {
    q25_model m;
    float *logits;
    states st;
    FILE *logits_out;
    int dump;
} run;

/* one step's lines for position pos (its logits, its states s[0 .. n_layer + 1]) and its
 * logits appended to --logits FILE; the argmax in *token */
static int report(run *r, unsigned long step, uint32_t pos, const float *logits, const summary *s, uint32_t *token)
{
    const uint32_t n_vocab = r->m.hp.n_vocab;
    uint32_t top[TOP];
    float val[TOP];
    top_k(logits, n_vocab, top, val);
    *token = top[0];
    printf("step %lu pos %u token %u margin %.9g\ntop", step, pos, top[0], (double)(val[0] - val[1]));
    for (int k = 0; k < TOP; k++)
        printf(" %u %.9g", top[k], (double)val[k]);
    putchar('\n');
    if (r->dump) {
        print_summary("embd", &s[0]);
        for (uint32_t l = 0; l < r->st.n_layer; l++) {
            char what[32];
            snprintf(what, sizeof what, "layer %u", l);
            print_summary(what, &s[l + 1]);
        }
        print_summary("output", &s[r->st.n_layer + 1]);
    }
    if (r->logits_out && fwrite(logits, sizeof(float), n_vocab, r->logits_out) != n_vocab) {
        fprintf(stderr, "q25tok: generate: cannot write the logits\n");
        return EXIT_IO;
    }
    return 0;
}

/* greedy: the prompt, then each step's argmax fed back, one q25_model_eval per step */
static int generate(run *r, const uint32_t *ids, size_t n_ids, unsigned long steps)
{
    uint32_t next = 0;
    for (unsigned long s = 0; s < steps; s++) {
        int st = s == 0 ? q25_model_eval_last(&r->m, ids, n_ids, 1, r->logits, keep, &r->st)
                        : q25_model_eval_last(&r->m, &next, 1, 1, r->logits, keep, &r->st);
        if (st != Q25_OK) {
            fprintf(stderr, "q25tok: generate: step %lu: %s\n", s, q25_strerror(st));
            return exit_code(st);
        }
        int rc = report(r, s, r->m.n_past - 1, r->logits, r->st.s, &next);
        if (rc)
            return rc;
    }
    return 0;
}

/* teacher-forced: every id in one q25_model_eval_last, the last `positions` reported as steps */
static int forced(run *r, const uint32_t *ids, size_t n_ids, uint32_t positions)
{
    int st = q25_model_eval_last(&r->m, ids, n_ids, positions, r->logits, keep, &r->st);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: generate: %s\n", q25_strerror(st));
        return exit_code(st);
    }
    for (uint32_t j = 0; j < positions; j++) {
        uint32_t token;
        int rc = report(r, j, (uint32_t)(n_ids - positions + j), r->logits + (size_t)j * r->m.hp.n_vocab,
                        r->st.s + (size_t)j * (r->st.n_layer + 2), &token);
        if (rc)
            return rc;
    }
    return 0;
}

static int load_hparams(const char *path, q25_model_params *hp)
{
    size_t len;
    char *text = q25tok_slurp(path, &len);
    if (!text) {
        fprintf(stderr, "q25tok: %s: %s\n", path, q25tok_open_why(errno));
        return EXIT_IO;
    }
    int st = q25_model_params_parse(text, len, hp);
    free(text);
    if (st != Q25_OK) {
        fprintf(stderr, "q25tok: %s: %s\n", path, q25_strerror(st));
        return EXIT_MODEL;
    }
    return 0;
}

int q25tok_generate_command(int argc, char **argv)
{
    const char *mem = "/dev/mem", *dt = "/sys/firmware/devicetree/base", *tables[2] = {NULL, NULL};
    const char *hparams = NULL, *logits_path = NULL;
    static uint32_t ids[MAX_IDS];
    static q25tok_regions rg;
    static run r;
    size_t n_ids = 0, n_tables = 0;
    unsigned long steps = 8, threads = default_threads(), positions = 0, v;
    const char *positions_arg = NULL;
    int steps_given = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--mem") == 0 && i + 1 < argc)
            mem = argv[++i];
        else if (strcmp(argv[i], "--dt") == 0 && i + 1 < argc)
            dt = argv[++i];
        else if (strcmp(argv[i], "--hparams") == 0 && i + 1 < argc)
            hparams = argv[++i];
        else if (strcmp(argv[i], "--logits") == 0 && i + 1 < argc)
            logits_path = argv[++i];
        else if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc) {
            if (!parse_count(argv[++i], MAX_STEPS, &steps) || steps == 0)
                return usage();
            steps_given = 1;
        } else if (strcmp(argv[i], "--positions") == 0 && i + 1 < argc) {
            positions_arg = argv[++i];
            if (!parse_count(positions_arg, MAX_BATCH, &positions) || positions == 0) {
                fprintf(stderr, "q25tok: generate: --positions %s: not a number from 1 to %d\n", positions_arg,
                        MAX_BATCH);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (!parse_count(argv[++i], Q25_MAX_THREADS, &threads) || threads == 0) {
                fprintf(stderr, "q25tok: generate: --threads %s: not a number from 1 to %d\n", argv[i],
                        Q25_MAX_THREADS);
                return EXIT_USAGE;
            }
        } else if (strcmp(argv[i], "--files") == 0)
            rg.files = 1;
        else if (strcmp(argv[i], "--dump-layers") == 0)
            r.dump = 1;
        else if (n_tables < 2 && argv[i][0] != '-')
            tables[n_tables++] = argv[i];
        else if (n_tables == 2 && n_ids < MAX_IDS && parse_count(argv[i], UINT32_MAX, &v))
            ids[n_ids++] = (uint32_t)v;
        else
            return usage();
    }
    if (n_tables != 2 || n_ids == 0)
        return usage();
    if (positions_arg && steps_given) {
        fprintf(stderr, "q25tok: generate: --positions %s: not with --steps (one or the other)\n", positions_arg);
        return EXIT_USAGE;
    }
    if (positions_arg && positions > n_ids) {
        fprintf(stderr, "q25tok: generate: --positions %s: more than the %zu ids given\n", positions_arg, n_ids);
        return EXIT_USAGE;
    }
    const uint32_t n_out = positions_arg ? (uint32_t)positions : 1;
    char dir[1024], path[1100];
    q25tok_table_dir(tables[0], dir);
    snprintf(path, sizeof path, "%s../model_hparams.txt", dir);
    q25_model_params hp;
    int rc = load_hparams(hparams ? hparams : path, &hp);
    if (rc)
        return rc;
    const uint64_t n_ctx = positions_arg ? n_ids : n_ids + steps - 1; /* forced: the ids are all there is */
    if (n_ctx > hp.n_ctx_train) {
        if (positions_arg)
            fprintf(stderr, "q25tok: generate: %zu ids exceed the model's context (%u)\n", n_ids, hp.n_ctx_train);
        else
            fprintf(stderr, "q25tok: generate: %zu ids and %lu steps exceed the model's context (%u)\n", n_ids, steps,
                    hp.n_ctx_train);
        return EXIT_CAPACITY;
    }
    const uint32_t n_batch = n_ids < MAX_BATCH ? (uint32_t)n_ids : MAX_BATCH;
    size_t size = q25_model_workspace(&hp, (uint32_t)n_ctx, n_batch, (uint32_t)threads);
    void *ws = size ? malloc(size) : NULL;
    r.logits = malloc((size_t)n_out * hp.n_vocab * sizeof(float));
    r.st.s = calloc((size_t)n_out * (hp.n_layer + 2), sizeof(summary));
    r.st.n_layer = hp.n_layer;
    if (!ws || !r.logits || !r.st.s) {
        fprintf(stderr, "q25tok: generate: out of memory (%zu bytes of workspace)\n", size);
        rc = EXIT_CAPACITY;
    }
    if (!rc)
        rc = q25tok_open_regions(&rg, tables[0], mem, dt);
    size_t len = 0;
    char *text = rc ? NULL : q25tok_slurp(tables[1], &len);
    if (!rc && !text) {
        fprintf(stderr, "q25tok: %s: %s\n", tables[1], q25tok_open_why(errno));
        rc = EXIT_IO;
    }
    if (!rc) {
        q25_weights w = {rg.regions, (const void *const *)rg.mapped, rg.n, text, len};
        char missing[Q25_TENSOR_NAME_MAX] = "";
        int st = q25_model_open(&r.m, &hp, &w, (uint32_t)n_ctx, n_batch, (uint32_t)threads, ws, size, missing);
        if (st != Q25_OK) {
            fprintf(stderr, "q25tok: generate: %s%s%s\n", q25_strerror(st), missing[0] ? ": " : "", missing);
            rc = exit_code(st);
        }
    }
    if (!rc && logits_path) {
        char why[1200];
        int fd = q25tok_create_new(logits_path, why, sizeof why), refused = fd < 0 && errno == EPERM;
        if (fd < 0) {
            fprintf(stderr, "q25tok: --logits %s%s\n", refused ? "refused: " : "", why);
            rc = refused ? Q25TOK_EXIT_REFUSED : EXIT_IO;
        } else if (!(r.logits_out = fdopen(fd, "wb"))) {
            fprintf(stderr, "q25tok: %s: %s\n", logits_path, strerror(errno));
            close(fd);
            rc = EXIT_IO;
        }
    }
    if (!rc)
        rc = positions_arg ? forced(&r, ids, n_ids, n_out) : generate(&r, ids, n_ids, steps);
    if (r.logits_out && fclose(r.logits_out) != 0 && !rc)
        rc = EXIT_IO;
    q25_model_close(&r.m); /* joins the workers before their workspace goes */
    free(text);
    free(ws);
    free(r.logits);
    free(r.st.s);
    q25tok_close_regions(&rg);
    if (fflush(stdout) != 0 && !rc)
        rc = EXIT_IO;
    return rc;
}
