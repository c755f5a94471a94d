/*
 * The command's view of the weights (cli_weights.c): a region table's regions mapped for
 * reading, from the reserved DDR through /dev/mem (after the running device tree is checked
 * to reserve each) or, with --files, the partition files next to the table, mapped read-only.
 * Used by `q25tok probe` and `q25tok generate`.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef CLI_WEIGHTS_H
#define CLI_WEIGHTS_H

#include "cli_open.h"
#include "q25tok.h"

#include <stdio.h>

enum { Q25TOK_MAX_REGIONS = 64 };

typedef struct q25tok_regions {
    q25_region regions[Q25TOK_MAX_REGIONS];
    void *mapped[Q25TOK_MAX_REGIONS];
    size_t n;
    int files; /* mapped[i] is the partition file's (size = file_size), not /dev/mem's */
} q25tok_regions;

/* a whole (small) file into a heap buffer (not NUL-terminated), at most 64 MiB, read as
 * q25tok_read_private reads (cli_open.h); NULL with errno */
char *q25tok_slurp(const char *path, size_t *len);
/* 0, or an exit code (1 I/O, 6 a region not reserved or a malformed table) after a message */
int q25tok_open_regions(q25tok_regions *p, const char *table, const char *mem, const char *dt);
void q25tok_close_regions(q25tok_regions *p);
/* cli_load.c: the directory of a region table, with its '/'; whether the running device tree
 * reserves the region exactly, as no-map (else why, worded) */
void q25tok_table_dir(const char *table, char dir[1024]);
int q25tok_reserved_in_dt(const char *dt, const q25_region *r, char *why, size_t whylen);
/* cli_load.c: whether a region is ours by name (q25-region<N>@<base>) */
int q25tok_region_ours(const q25_region *r);

#endif
