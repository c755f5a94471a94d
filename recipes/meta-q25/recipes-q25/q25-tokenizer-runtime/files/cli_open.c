/*
 * Every file q25tok reads (see cli_open.h): the one open, the private read, the map check.
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int q25tok_open_regular(const char *path, struct stat *st, uint64_t max)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int e = fstat(fd, st) != 0 ? errno : !S_ISREG(st->st_mode) ? EINVAL : (uint64_t)st->st_size > max ? EFBIG : 0;
    if (e) {
        close(fd);
        errno = e;
        return -1;
    }
    int flags = fcntl(fd, F_GETFL); /* a regular file: blocking reads from here on */
    if (flags >= 0)
        (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

const char *q25tok_open_why(int e)
{
    switch (e) {
    case EINVAL: return "not a regular file";
    case ELOOP: return "a symlink: not followed";
    case EFBIG: return "larger than any file of its kind: not read";
    case EIO: return "changed while it was read (shorter than it was)";
    case EPERM: return "not root's, or writable by others: root does not map it";
    default: return strerror(e);
    }
}

FILE *q25tok_fopen_regular(const char *path, struct stat *st, uint64_t max)
{
    int fd = q25tok_open_regular(path, st, max);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

/* want bytes of fd into a new buffer: 0, or an errno (EIO: the file ended sooner) */
static int read_fd(int fd, size_t want, uint8_t **data)
{
    size_t got = 0;
    uint8_t *buf = malloc(want ? want : 1);
    int e = buf ? 0 : ENOMEM;
    while (!e && got < want) {
        ssize_t n = read(fd, buf + got, want - got);
        if (n > 0)
            got += (size_t)n;
        else if (n == 0)
            e = EIO; /* shorter than fstat said: truncated meanwhile */
        else if (errno != EINTR)
            e = errno;
    }
    if (e)
        free(buf);
    else
        *data = buf; /* bytes appended after fstat are not read: the size checked is the size used */
    return e;
}

int q25tok_read_private(const char *path, uint64_t max, uint8_t **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    struct stat st;
    int fd = q25tok_open_regular(path, &st, max > SIZE_MAX - 1 ? SIZE_MAX - 1 : max);
    if (fd < 0)
        return -1;
    int e = read_fd(fd, (size_t)st.st_size, data);
    close(fd);
    if (e) {
        errno = e;
        return -1;
    }
    *size = (size_t)st.st_size;
    return 0;
}

/* no one but this user and root can write the file (its owner is one of them, and no group
 * or other write bit: an ACL granting anyone else write shows in the group bits) */
static int only_we_write(const struct stat *st)
{
    return (st->st_uid == geteuid() || st->st_uid == 0) && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

int q25tok_read_whole(const char *path, uint64_t max, q25tok_whole *w)
{
    w->data = NULL;
    w->size = 0;
    w->mapped = 0;
    struct stat st;
    int fd = q25tok_open_regular(path, &st, max > SIZE_MAX - 1 ? SIZE_MAX - 1 : max);
    if (fd < 0)
        return -1;
    size_t n = (size_t)st.st_size;
    void *p = n && only_we_write(&st) ? mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    uint8_t *copy = NULL;
    int e = p != MAP_FAILED ? 0 : read_fd(fd, n, &copy);
    close(fd);
    if (e) {
        errno = e;
        return -1;
    }
    w->mapped = p != MAP_FAILED;
    w->data = w->mapped ? (const uint8_t *)p : copy;
    w->size = n;
    return 0;
}

void q25tok_release_whole(q25tok_whole *w)
{
    if (w->mapped)
        munmap((void *)w->data, w->size);
    else
        free((void *)w->data);
    w->data = NULL;
}

int q25tok_root_may_map(const struct stat *st)
{
    if (geteuid() != 0 || only_we_write(st))
        return 1;
    errno = EPERM;
    return 0;
}
