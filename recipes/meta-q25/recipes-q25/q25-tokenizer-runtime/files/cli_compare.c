/*
 * q25tok compare EXPECTED PROMPT DUMP
 *
 * Where DUMP (the output of `q25tok generate --dump-layers --positions S` on prompt PROMPT's
 * ids, its forced continuation included) first differs from PROMPT's lines in EXPECTED (a
 * release's q25-forward.txt, first line `q25-forward 3`), compared as
 * record_compare.py compares them (q25tok_compare.c): the smoke test's comparison, over SSH
 * (forward_check.py) and in the OTA commit (ota_smoke.c). Both files are read whole, through
 * q25tok_read_private (no link followed, no FIFO, at most Q25TOK_MAX_TEXT bytes). Prints "step S: WHERE: DETAIL" on stdout and exits 11
 * when they differ; exits 0 when they agree, printing the "near-tie at step S: ..." line (the
 * first) when they agree but for tokens the host's margin lets differ (the steps are
 * teacher-forced: a near tie ends nothing, the later steps are compared); 3 a malformed file or a prompt
 * EXPECTED lacks (why on stderr), 1 a file not read, 2 usage, 5 out of memory.
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

int q25tok_compare_command(int argc, char **argv);

enum { EXIT_IO = 1, EXIT_USAGE = 2, EXIT_INPUT = 3, EXIT_CAPACITY = 5, EXIT_DIFFERS = 11 };

static int read_text(const char *path, uint8_t **data, size_t *size)
{
    if (q25tok_read_private(path, Q25TOK_MAX_TEXT, data, size) != 0) {
        fprintf(stderr, "q25tok: compare: %s: %s\n", path, q25tok_open_why(errno));
        return errno == ENOMEM ? EXIT_CAPACITY : EXIT_IO;
    }
    return 0;
}

int q25tok_compare_command(int argc, char **argv)
{
    if (argc != 3 || !argv[1][0] || strspn(argv[1], "0123456789") != strlen(argv[1]) || strlen(argv[1]) > 9) {
        fputs("usage: q25tok compare EXPECTED PROMPT DUMP   (PROMPT: a number)\n", stderr);
        return EXIT_USAGE;
    }
    uint32_t prompt = (uint32_t)strtoul(argv[1], NULL, 10);
    uint8_t *expected = NULL, *dump = NULL;
    size_t expected_size = 0, dump_size = 0;
    int rc = read_text(argv[0], &expected, &expected_size);
    if (!rc)
        rc = read_text(argv[2], &dump, &dump_size);
    if (rc) {
        free(expected);
        return rc;
    }
    char msg[512];
    int st = q25_forward_compare((const char *)expected, expected_size, prompt, (const char *)dump, dump_size, msg,
                                 sizeof msg);
    free(expected);
    free(dump);
    switch (st) {
    case Q25_FORWARD_AGREE: return 0;
    case Q25_FORWARD_NEAR_TIE: printf("%s\n", msg); return fflush(stdout) ? EXIT_IO : 0;
    case Q25_FORWARD_DIFFERS: printf("%s\n", msg); return fflush(stdout) ? EXIT_IO : EXIT_DIFFERS;
    case Q25_FORWARD_NO_MEMORY: fprintf(stderr, "q25tok: compare: out of memory\n"); return EXIT_CAPACITY;
    default:
        fprintf(stderr, "q25tok: compare: %s: %s\n", st == Q25_FORWARD_BAD_DUMP ? argv[2] : argv[0], msg);
        return EXIT_INPUT;
    }
}
