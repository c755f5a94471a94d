/*
 * How q25tok opens files (docs/runtime.md, "Opening files"). q25tok runs as root on the board
 * (the OTA module, the boot service, a deploy with --become) over files a less privileged user
 * may be able to change, so:
 *
 * - every file it reads is opened by q25tok_open_regular: O_RDONLY|O_NOFOLLOW|O_NONBLOCK|
 *   O_CLOEXEC (no last-component link followed; a FIFO or device planted where a file should
 *   be never holds open(2)), then fstat: a regular file of at most MAX bytes;
 * - what it checks and then uses is the bytes it checked: read into its own memory
 *   (q25tok_read_private), or, for the image (q25tok_read_whole), mapped only when no one but
 *   this user and root can write the file (nobody else can change it under the mapping; a
 *   Qwen2 image costs ~5 ms more per process to read than to map: docs/runtime.md); the
 *   partitions, mapped read-only for `probe`/`generate --files`, are data, not indices, and as
 *   root they must be root's and writable by no one else (q25tok_root_may_map);
 * - every file it writes is a new one (q25tok_create_new, cli_create.c): created exclusively,
 *   in a directory opened without following another user's link, which as root is root's.
 *
 * /dev/mem is a device, opened by q25_region_map with its own checks (q25tok_region.c).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef CLI_OPEN_H
#define CLI_OPEN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct stat;

/* the bounds (bytes) of what q25tok reads whole: a Qwen2 image is 6.8 MB, a region table a
 * few lines, a 7B model's tensor table ~40 KB, a device-tree property a few cells */
#define Q25TOK_MAX_IMAGE ((uint64_t)256 << 20)
#define Q25TOK_MAX_PROMPT ((uint64_t)1 << 30)
#define Q25TOK_MAX_TABLE ((uint64_t)1 << 20)
#define Q25TOK_MAX_TEXT ((uint64_t)64 << 20)
#define Q25TOK_MAX_PROPERTY ((uint64_t)4096)
#define Q25TOK_ANY_SIZE UINT64_MAX

/* the exit status of a refused file to create (q25tok receive, generate --logits) */
enum { Q25TOK_EXIT_REFUSED = 10 };

/* a file to read: fd (blocking from here on), its stat in *st; -1 with errno: ELOOP a link,
 * EINVAL not a regular file, EFBIG more than max bytes */
int q25tok_open_regular(const char *path, struct stat *st, uint64_t max);
FILE *q25tok_fopen_regular(const char *path, struct stat *st, uint64_t max);
/* what q25tok_open_regular's (and q25tok_read_private's) errno means, worded */
const char *q25tok_open_why(int e);
/* The whole file, opened as above, into malloc'd memory (*data, *size; free it): read(2) until
 * the size fstat gave, so the bytes are this process's whatever is written to the file
 * afterwards. 0, or -1 with errno (EIO: the file shrank while it was read). */
int q25tok_read_private(const char *path, uint64_t max, uint8_t **data, size_t *size);
/* The whole file as above, for reading: mapped (MAP_PRIVATE) when only this user or root can
 * write it, else read into private memory; -1 with errno. Release it with q25tok_release_whole. */
typedef struct q25tok_whole {
    const uint8_t *data;
    size_t size;
    int mapped;
} q25tok_whole;
int q25tok_read_whole(const char *path, uint64_t max, q25tok_whole *w);
void q25tok_release_whole(q25tok_whole *w);
/* whether this process may map the file of st (a mapping shows later writes to the file): not
 * as root unless root owns it and no one else can write it; 0 with errno EPERM */
int q25tok_root_may_map(const struct stat *st);
/* PATH as a new file for writing (cli_create.c): fd, or -1 with why worded (one line, naming
 * the path) and errno: EPERM refused (it exists, a link or another user's directory is in its
 * way: exit Q25TOK_EXIT_REFUSED), else the system's (ENOENT, EACCES...: an I/O error) */
int q25tok_create_new(const char *path, char *why, size_t whylen);

#endif
