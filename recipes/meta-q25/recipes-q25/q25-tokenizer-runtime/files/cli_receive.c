/*
 * q25tok receive FILE: standard input into FILE, hashed as it is written.
 *
 * The deploy's receiver on the board: one process reads the upload in large blocks,
 * writes each block to FILE (a new file: see below) and feeds it to SHA-256, so
 * every byte is read once and hashed once, and nothing reads the file back. While the file
 * grows, the written ranges are handed to the kernel's writeback (sync_file_range), and every
 * FLUSH_EVERY bytes a child process flushes what was written so far (fdatasync) while this
 * one goes on receiving. At the end of input the file is flushed once more, so the sync before
 * a release switch finds little left to write. Then the digest is printed as 64 lowercase hex
 * digits and a newline: what it names is on the disk.
 *
 * Why the flushes along the way: writeback puts the data on the device, but only a flush
 * (fdatasync) makes the device persist it, and a device with a write cache (eMMC, an SSD, a
 * virtual disk) then writes everything it holds. Left to the end, that took 0.1-0.6 s after a
 * 392 MB upload on this workstation's virtual disk; flushed every 32 MiB, 0.03-0.08 s. A
 * child rather than a thread: no threads library to link, and its exit status carries the
 * flush's error, which the file's error state reports only once (to whichever call saw it).
 *
 * FILE is created, never written through (cli_create.c): it must not exist (a file, a link or
 * a FIFO there is refused, not truncated, followed or waited on), no link another user could
 * have planted is followed on the way to its directory, and as root that directory is root's
 * and writable by no one else. The deploy runs this as root into releases/.incoming-<id>/, and
 * whoever owns releases/ could swap that directory for one of links between PREPARE and the
 * upload (issue 44). A refused FILE exits 10, a failed write 1, each with one line on stderr
 * after the rest of the input was read and dropped, so the sender sees a clean error rather
 * than a broken channel.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include "cli_open.h"
#include "q25tok.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int q25tok_receive_command(int argc, char **argv);

/* BLOCK: small enough to be hashed while still in the cache it was read into, large enough for
 * few system calls; the pipe from sshd is widened to PIPE_BYTES so that sshd goes on decrypting
 * into it while a block is written and hashed (with the default 64 KiB pipe the two took turns:
 * 392 MB took 0.3-0.5 s longer on loopback) */
enum { BLOCK = 256 << 10, PIPE_BYTES = 1 << 20, WRITEBACK_EVERY = 8 << 20, FLUSH_EVERY = 32 << 20 };

/* fill buf from fd until it is full or the input ends; -1 on a read error */
static ssize_t read_block(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0;
    while (got < cap) {
        ssize_t n = read(fd, buf + got, cap - got);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void widen_pipe(int fd)
{
#ifdef F_SETPIPE_SZ
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode))
        (void)fcntl(fd, F_SETPIPE_SZ, PIPE_BYTES); /* a hint: above fs.pipe-max-size it stays as it was */
#else
    (void)fd;
#endif
}

static void start_writeback(int fd, off_t from, off_t to)
{
#ifdef SYNC_FILE_RANGE_WRITE
    (void)sync_file_range(fd, from, to - from, SYNC_FILE_RANGE_WRITE); /* a hint: errors do not matter */
#else
    (void)fd, (void)from, (void)to;
#endif
}

/* fdatasync: 0, or its errno (EINVAL, EROFS: not a file that syncs, which is not an error) */
static int flush_file(int fd)
{
    return fdatasync(fd) == 0 || errno == EINVAL || errno == EROFS ? 0 : errno;
}

/* A flush of fd in a child, at most one at a time. */
struct flusher {
    pid_t pid;   /* the running flush, or 0 */
    int err;     /* the first failed flush's errno, or 0 */
};

/* Reap the running flush (waiting for it with block); 1 when none is running afterwards. */
static int flusher_reap(struct flusher *f, int block)
{
    if (f->pid <= 0)
        return 1;
    int status;
    pid_t got = waitpid(f->pid, &status, block ? 0 : WNOHANG);
    if (got == 0)
        return 0;
    if (got == f->pid && !f->err && (!WIFEXITED(status) || WEXITSTATUS(status) != 0))
        f->err = WIFEXITED(status) ? WEXITSTATUS(status) : EIO; /* the child exits with fdatasync's errno */
    f->pid = 0;
    return 1;
}

/* Start a flush unless one is running; 1 when one was started. */
static int flusher_start(struct flusher *f, int fd)
{
    if (!flusher_reap(f, 0))
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        int e = flush_file(fd);
        _exit(e >= 0 && e < 256 ? e : EIO);
    }
    f->pid = pid > 0 ? pid : 0; /* no fork: the flush at the end does it all */
    return pid > 0;
}

int q25tok_receive_command(int argc, char **argv)
{
    if (argc != 1 || argv[0][0] == '-') {
        fputs("usage: q25tok receive FILE   (standard input into FILE, a new file; prints its sha256)\n", stderr);
        return 2;
    }
    const char *path = argv[0];
    widen_pipe(0);
    signal(SIGCHLD, SIG_DFL); /* inherited as ignored, the flushes' statuses would be lost */
    uint8_t *buf = malloc(BLOCK);
    if (!buf) {
        fputs("q25tok: receive: out of memory\n", stderr);
        return 5;
    }
    char why[1200] = "";
    int fd = q25tok_create_new(path, why, sizeof why);
    int err = fd < 0 ? errno : 0;
    q25_sha256_ctx sha;
    q25_sha256_init(&sha);
    off_t written = 0, handed = 0, flushed = 0;
    struct flusher flusher = {0, 0};
    for (;;) {
        ssize_t n = read_block(0, buf, BLOCK);
        if (n < 0) {
            fprintf(stderr, "q25tok: receive: reading standard input: %s\n", strerror(errno));
            flusher_reap(&flusher, 1);
            free(buf);
            if (fd >= 0)
                close(fd);
            return 1;
        }
        if (n == 0)
            break;
        if (err)
            continue; /* drain: the sender gets the error when its input is all sent */
        if (write_all(fd, buf, (size_t)n) != 0) {
            err = errno ? errno : EIO;
            continue;
        }
        q25_sha256_update(&sha, buf, (size_t)n);
        written += n;
        if (written - handed >= WRITEBACK_EVERY) {
            start_writeback(fd, handed, written);
            handed = written;
        }
        if (written - flushed >= FLUSH_EVERY && flusher_start(&flusher, fd))
            flushed = written;
    }
    free(buf);
    flusher_reap(&flusher, 1);
    if (!err)
        err = flusher.err;
    if (fd >= 0 && !err)
        err = flush_file(fd); /* on the disk before the digest says it arrived */
    if (fd >= 0 && close(fd) != 0 && !err)
        err = errno;
    if (fd < 0) {
        fprintf(stderr, "q25tok: receive: %s%s\n", err == EPERM ? "refused: " : "", why);
        return err == EPERM ? Q25TOK_EXIT_REFUSED : 1;
    }
    if (err) {
        fprintf(stderr, "q25tok: receive: writing %s: %s\n", path, strerror(err));
        return 1;
    }
    uint8_t d[32];
    q25_sha256_final(&sha, d);
    for (int i = 0; i < 32; i++)
        printf("%02x", d[i]);
    putchar('\n');
    return fflush(stdout) == 0 ? 0 : 1;
}
