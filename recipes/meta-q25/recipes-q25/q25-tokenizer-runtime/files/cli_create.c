/*
 * Every file q25tok writes is a new one (see cli_open.h): `q25tok receive FILE`, the deploy's
 * receiver, run as root into releases/.incoming-<id>/ of an install directory whose releases/
 * another user may own, and `generate --logits FILE`.
 *
 * The directory is opened one component at a time, each with O_DIRECTORY|O_NOFOLLOW: a link
 * is followed only where it lies in a directory no other user can write (its owner is this
 * user or root, and it is not group- or other-writable): a link someone else planted, or
 * swapped in between the deploy's PREPARE and the upload, is never followed. As root, the
 * directory reached must be root's and writable by no one else (nobody can plant anything in
 * it afterwards). The file is created in that open directory (openat) with O_CREAT|O_EXCL|
 * O_NOFOLLOW|O_NONBLOCK (nothing that exists is written through, truncated or waited on:
 * a file, a link, a FIFO), mode 0644, then fstat: a regular file with one link, this user's.
 * A '..' component is refused (the deploy's paths have none).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "cli_open.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC };

/* a directory whose entries only this user or root can have made */
static int nobody_else_writes(const struct stat *st)
{
    return (st->st_uid == geteuid() || st->st_uid == 0) && !(st->st_mode & (S_IWGRP | S_IWOTH));
}

/* the directory DIR (len bytes of a path), opened as above: fd and its stat, or -1 and why */
static int open_dir(const char *dir, size_t len, struct stat *st, char *why, size_t whylen)
{
    char path[4096];
    if (len >= sizeof path) {
        snprintf(why, whylen, "the path is too long");
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(path, dir, len);
    path[len] = 0;
    int fd = open(path[0] == '/' ? "/" : ".", DIR_FLAGS & ~O_NOFOLLOW);
    if (fd < 0 || fstat(fd, st) != 0) {
        int e = errno;
        snprintf(why, whylen, "%s: %s", path[0] == '/' ? "/" : ".", strerror(e));
        if (fd >= 0)
            close(fd);
        errno = e;
        return -1;
    }
    /* the first step of an absolute path is "/name", not openat(fd of "/", name): the same
     * directory, but qemu-user (-L SYSROOT) maps "/" itself to the sysroot */
    int top = path[0] == '/';
    char *save = NULL;
    for (char *name = strtok_r(path, "/", &save); name; name = strtok_r(NULL, "/", &save)) {
        if (strcmp(name, ".") == 0)
            continue;
        char abs[NAME_MAX + 2];
        int at = top ? AT_FDCWD : fd;
        const char *step = top ? (snprintf(abs, sizeof abs, "/%s", name), abs) : name;
        top = 0;
        const char *problem = NULL;
        int next = -1, e = EPERM;
        if (strcmp(name, "..") == 0)
            problem = "a '..' in the path: not followed";
        else if (strlen(name) > NAME_MAX)
            problem = strerror(e = ENAMETOOLONG);
        else if ((next = openat(at, step, DIR_FLAGS)) < 0 && (errno == ELOOP || errno == ENOTDIR)) {
            struct stat link;
            if (fstatat(at, step, &link, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(link.st_mode)) {
                if (nobody_else_writes(st))
                    next = openat(at, step, DIR_FLAGS & ~O_NOFOLLOW); /* its directory's owner's link */
                else
                    problem = "a symlink in a directory another user can write: not followed";
            } else {
                errno = ENOTDIR;
            }
        }
        if (!problem && (next < 0 || fstat(next, st) != 0))
            problem = strerror(e = errno);
        close(fd);
        if (problem) {
            if (next >= 0)
                close(next);
            snprintf(why, whylen, "%.*s: %s", (int)(name + strlen(name) - path), dir, problem);
            errno = e;
            return -1;
        }
        fd = next;
    }
    return fd;
}

int q25tok_create_new(const char *path, char *why, size_t whylen)
{
    const char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    size_t dir_len = slash ? (size_t)(slash - path) + (slash == path) : 0;
    if (!*name || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
        snprintf(why, whylen, "%s: not a file name", path);
        errno = EINVAL;
        return -1;
    }
    struct stat st;
    int dir = open_dir(slash ? path : ".", slash ? dir_len : 1, &st, why, whylen);
    if (dir < 0)
        return -1;
    if (geteuid() == 0 && (st.st_uid != 0 || (st.st_mode & (S_IWGRP | S_IWOTH)))) {
        snprintf(why, whylen,
                 "%.*s is %s: root writes only in a directory of its own (chown root, chmod go-w it)",
                 (int)(slash ? dir_len : 1), slash ? path : ".",
                 st.st_uid != 0 ? "another user's" : "writable by group or others");
        close(dir);
        errno = EPERM;
        return -1;
    }
    int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    int e = errno;
    close(dir);
    if (fd < 0) {
        snprintf(why, whylen, "%s: %s", path,
                 e == EEXIST ? "exists (a file, a link or a FIFO): only a new file is written" : strerror(e));
        errno = e == EEXIST ? EPERM : e;
        return -1;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid()) {
        snprintf(why, whylen, "%s: not the new regular file just created (linked or replaced meanwhile)", path);
        close(fd);
        errno = EPERM;
        return -1;
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}
