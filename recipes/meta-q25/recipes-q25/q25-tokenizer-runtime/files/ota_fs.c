/*
 * q25tok ota's file system (ota.h): one owner per tree (q25-ota.sh's own_above, own_ancestors,
 * own_tree, own_record, own_file, with its messages word for word), root's records read whole
 * (a regular file opened O_NOFOLLOW|O_NONBLOCK, then fstat: cli_open.h), a file written through
 * a fresh temporary beside it, placing, copying and removing without following a link.
 *
 * What `ls -ln` told the sh (mode string, link count, uid) is ota_lmeta + ota_mode_string; the
 * tree is walked with openat/fdopendir/fstatat(AT_SYMLINK_NOFOLLOW), never through a link, in
 * readdir order, a directory before its entries (BusyBox find's order: the first offending
 * path is the one the sh named). put's two `sync`s are the fsync of the temporary before its
 * rename and of its directory after it (the emulated board's power-cut tests read them).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE /* mkostemp */
#include "ota.h"

#include "cli_open.h"
#include "q25tok.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC };

int ota_lmeta(const char *path, ota_meta *m)
{
    struct stat st;
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        ota_die("%s: %s", path, strerror(errno));
    }
    *m = (ota_meta){st.st_mode, st.st_nlink, st.st_uid, st.st_size};
    return 1;
}

void ota_mode_string(mode_t mode, char out[11])
{
    out[0] = S_ISDIR(mode) ? 'd' : S_ISLNK(mode) ? 'l' : S_ISFIFO(mode) ? 'p' : S_ISCHR(mode) ? 'c'
           : S_ISBLK(mode) ? 'b' : S_ISSOCK(mode) ? 's' : '-';
    static const char rwx[] = "rwxrwxrwx";
    for (int i = 0; i < 9; i++)
        out[1 + i] = mode & (0400 >> i) ? rwx[i] : '-';
    if (mode & S_ISUID)
        out[3] = out[3] == 'x' ? 's' : 'S';
    if (mode & S_ISGID)
        out[6] = out[6] == 'x' ? 's' : 'S';
    if (mode & S_ISVTX)
        out[9] = out[9] == 'x' ? 't' : 'T';
    out[10] = 0;
}

void ota_no_link(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
        ota_die("%s is a symlink: refusing to follow it", path);
}

/* as the sh's [ ! -e P ] || [ -f P ]: what is there (a link's target) is a regular file */
void ota_no_fifo(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
        ota_die("%s is not a regular file: refusing to read it", path);
}

void ota_no_link_in(const char *dir, const char *rel)
{
    char p[OTA_PATH];
    if (snprintf(p, sizeof p, "%s/%s", dir, rel) >= (int)sizeof p)
        ota_die("%s/%s: path too long", dir, rel);
    char *cut = p + strlen(dir) + 1 + strlen(rel); /* REL, then each of its parents */
    for (;;) {
        *cut = 0;
        ota_no_link(p);
        cut = strrchr(p + strlen(dir) + 1, '/');
        if (!cut)
            return;
    }
}

/* -- one owner per tree ------------------------------------------------------------------------ */
static void own_above(const char *tree, const char *dir)
{
    ota_meta m;
    if (!ota_lmeta(dir, &m))
        return; /* not there yet: mkdir -p makes it ours */
    char ms[11];
    ota_mode_string(m.mode, ms);
    if (!S_ISDIR(m.mode) && !S_ISLNK(m.mode))
        ota_die("%s, above %s, is not a directory", dir, tree);
    int ours = m.uid == 0 || m.uid == ota_me;
    if (ours && S_ISLNK(m.mode))
        return; /* where it leads is checked as resolved (own_ancestors) */
    if (ours && !(m.mode & (S_IWGRP | S_IWOTH)))
        return;
    if (m.uid == 0 && S_ISDIR(m.mode) && (m.mode & S_ISVTX))
        return;
    ota_die("%s, above %s, is owned by uid %u (mode %s): whoever owns or can write a directory above the tree "
            "root installs into can swap that tree: make it %s's alone (chown %s %s && chmod go-w %s) or choose "
            "a directory below %s's own ones",
            dir, tree, (unsigned)m.uid, ms, ota_who, ota_own, dir, dir, ota_who);
}

/* PATH := its parent, as the sh strips the last part ("" -> "/"): 0 when PATH has no slash */
static int parent(char *path)
{
    char *s = strrchr(path, '/');
    if (!s)
        return 0;
    if (s == path)
        s[1] = 0;
    else
        *s = 0;
    return 1;
}

static void own_ancestors(const char *tree)
{
    char a[OTA_PATH], deep[OTA_PATH] = "";
    if (snprintf(a, sizeof a, "%s", tree) >= (int)sizeof a)
        ota_die("%s: path too long", tree);
    struct stat st;
    while (strcmp(a, "/") != 0 && parent(a)) {
        own_above(tree, a);
        if (!*deep && stat(a, &st) == 0 && S_ISDIR(st.st_mode))
            snprintf(deep, sizeof deep, "%s", a);
    }
    char *real = realpath(*deep ? deep : ".", NULL);
    if (!real || strlen(real) >= sizeof a)
        ota_die("cannot resolve the directories above %s", tree);
    snprintf(a, sizeof a, "%s", real);
    free(real);
    do
        own_above(tree, a);
    while (strcmp(a, "/") != 0 && parent(a));
}

typedef struct walk {
    char path[OTA_PATH];  /* where the walk is */
    char first[OTA_PATH]; /* the first offending path ("" none) */
    ota_meta bad;
    int failed; /* something could not be read: find's error */
} walk;

static int offends(const struct stat *st)
{
    return st->st_uid != ota_me || (!S_ISLNK(st->st_mode) && (st->st_mode & (S_IWGRP | S_IWOTH)));
}

static void note(walk *w, const char *path, const struct stat *st)
{
    if (*w->first || !offends(st))
        return;
    if (snprintf(w->first, sizeof w->first, "%s", path) >= (int)sizeof w->first)
        w->failed = 1;
    w->bad = (ota_meta){st->st_mode, st->st_nlink, st->st_uid, st->st_size};
}

/* VISIT(ctx, fd, name, its lstat) for every entry of the open directory FD (closed here), never
 * following a link, in readdir order; the first error (errno) of VISIT or of reading, or 0 */
static int each_entry(int fd, int (*visit)(void *, int, const char *, const struct stat *), void *ctx)
{
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return e;
    }
    int err = 0;
    struct dirent *e;
    for (errno = 0; (e = readdir(d)) != NULL; errno = 0) {
        struct stat st;
        int r = 0;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            r = errno;
        else
            r = visit(ctx, dirfd(d), e->d_name, &st);
        err = err ? err : r;
    }
    err = err ? err : errno;
    closedir(d);
    return err;
}

/* own_tree's find: NAME in the directory FD, at w->path; then what it holds */
static int walk_entry(void *ctx, int fd, const char *name, const struct stat *st)
{
    walk *w = ctx;
    size_t len = strlen(w->path);
    if (len + 1 + strlen(name) >= sizeof w->path)
        return ENAMETOOLONG;
    snprintf(w->path + len, sizeof w->path - len, "/%s", name);
    note(w, w->path, st);
    int sub = S_ISDIR(st->st_mode) ? openat(fd, name, DIR_FLAGS) : -2;
    int r = sub == -1 ? errno : sub >= 0 ? each_entry(sub, walk_entry, w) : 0;
    w->path[len] = 0;
    return r;
}

void ota_own_tree(const char *tree, const char *kind)
{
    own_ancestors(tree);
    ota_no_link(tree);
    struct stat st;
    if (stat(tree, &st) != 0)
        return;
    if (!S_ISDIR(st.st_mode))
        ota_die("%s is not a directory", tree);
    static walk w;
    w.first[0] = 0;
    w.failed = snprintf(w.path, sizeof w.path, "%s", tree) >= (int)sizeof w.path;
    int fd = open(tree, DIR_FLAGS);
    if (fd >= 0 && fstat(fd, &st) == 0) {
        note(&w, tree, &st);
        w.failed |= each_entry(fd, walk_entry, &w) != 0;
    } else {
        w.failed = 1;
        if (fd >= 0)
            close(fd);
    }
    if (w.failed)
        ota_die("cannot check who owns what is in %s", tree);
    if (!*w.first)
        return;
    char ms[11], what[160], fix[OTA_PATH * 2 + 64];
    ota_mode_string(w.bad.mode, ms);
    if (w.bad.uid != ota_me)
        snprintf(what, sizeof what, "is owned by uid %u (mode %s), not by %s who runs this", (unsigned)w.bad.uid, ms,
                 ota_who);
    else
        snprintf(what, sizeof what, "can be written by others than %s (mode %s)", ota_who, ms);
    snprintf(fix, sizeof fix, "chown -R %s %s && chmod -R go-w %s", ota_own, tree, tree);
    if (strcmp(kind, "payload") == 0)
        ota_die("%s %s: root installs only a payload no one else can change: let the update engine write it, or %s",
                w.first, what, fix);
    ota_die("%s %s: root installs only into a tree that is its own alone (one owner per tree): %s%s", w.first, what,
            w.bad.uid == ota_me ? "" : "this install dir is another user's (a deploy --become none install?): use a "
                                       "separate install dir for OTA; if no one else ever wrote there: ",
            fix);
}

void ota_own_record(const char *file)
{
    ota_no_link(file);
    ota_no_fifo(file);
    ota_meta m;
    if (!ota_lmeta(file, &m))
        return;
    if (S_ISREG(m.mode) && m.nlink == 1 && m.uid == ota_me && !(m.mode & (S_IWGRP | S_IWOTH)))
        return;
    char ms[11];
    ota_mode_string(m.mode, ms);
    ota_die("%s is not a record q25-ota wrote (mode %s, %lu name(s), uid %u): root trusts as its own only a regular "
            "file it alone owns and can write, with no other name (no hard link); remove it if it is not q25-ota's",
            file, ms, (unsigned long)m.nlink, (unsigned)m.uid);
}

void ota_own_file(const char *file, const char *mode_str)
{
    ota_no_link(file);
    ota_meta m;
    char text[64] = "missing", ms[11];
    if (ota_lmeta(file, &m)) {
        ota_mode_string(m.mode, ms);
        if (strcmp(ms, mode_str) == 0 && m.uid == ota_me)
            return;
        snprintf(text, sizeof text, "%s %lu %u", ms, (unsigned long)m.nlink, (unsigned)m.uid); /* ls_meta's */
    }
    ota_die("%s is not a release file as q25-ota installs it (%s, %s's; it is %s): root changes no mode of a file it "
            "did not place (it may have another name): install a full release",
            file, mode_str, ota_who, text);
}

/* -- reading ----------------------------------------------------------------------------------- */
static int write_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* what q25tok_open_regular's errno E says of PATH, said as the sh said it: die */
__attribute__((noreturn)) static void refuse_read(const char *path, int e)
{
    if (e == ELOOP)
        ota_die("%s is a symlink: refusing to follow it", path);
    if (e == EINVAL)
        ota_die("%s is not a regular file: refusing to read it", path);
    ota_die("cannot read %s: %s", path, q25tok_open_why(e));
}

char *ota_read(const char *path, uint64_t max, size_t *len)
{
    uint8_t *data;
    size_t n;
    if (q25tok_read_private(path, max, &data, &n) != 0) {
        if (errno == ENOENT)
            return NULL;
        refuse_read(path, errno);
    }
    char *text = realloc(data, n + 1);
    if (!text)
        ota_die("cannot read %s: out of memory", path);
    text[n] = 0;
    *len = n;
    return text;
}

/* IN to its end, into OUT (if >= 0) and CTX (if set): 0, or an errno */
static int stream(int in, int out, q25_sha256_ctx *ctx)
{
    static unsigned char buf[1 << 16];
    for (ssize_t n; (n = read(in, buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || (out >= 0 && write_all(out, buf, (size_t)n) != 0))
            return errno ? errno : EIO;
        if (ctx)
            q25_sha256_update(ctx, buf, (size_t)n);
    }
    return 0;
}

/* -- writing ----------------------------------------------------------------------------------- */
/* fsync of the directory FILE is in (put's second `sync`) */
static int sync_dir_of(const char *file)
{
    char dir[OTA_PATH];
    snprintf(dir, sizeof dir, "%s", file);
    if (!parent(dir))
        snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = fsync(fd) == 0 || errno == EINVAL ? 0 : -1; /* EINVAL: a file system that syncs no directory */
    close(fd);
    return r;
}

void ota_put(const char *file, const void *data, size_t len)
{
    ota_no_link(file);
    struct stat st;
    if (stat(file, &st) == 0 && S_ISDIR(st.st_mode))
        ota_die("%s is a directory", file);
    char tmp[OTA_PATH];
    int fd = -1; /* mktemp FILE.XXXXXX: O_CREAT|O_EXCL */
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", file) < (int)sizeof tmp)
        fd = mkostemp(tmp, O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        ota_die("cannot create a temporary beside %s", file);
    /* synced before the rename (no empty file) and after it (the engine reports success next:
     * a power cut after that must find the file) */
    int ok = write_all(fd, data, len) == 0 && fchmod(fd, 0644) == 0 && fsync(fd) == 0;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp, file) != 0) {
        unlink(tmp);
        ota_die("cannot write %s", file);
    }
    if (sync_dir_of(file) != 0)
        ota_die("cannot write %s", file);
}

void ota_put_copy(const char *file, const char *src)
{
    size_t len;
    char *data = ota_read(src, OTA_MAX_RECORD, &len);
    if (!data)
        ota_die("cannot read %s: %s", src, strerror(ENOENT));
    ota_put(file, data, len);
    free(data);
}

static void refuse_existing(const char *dst)
{
    struct stat st;
    if (lstat(dst, &st) == 0)
        ota_die("%s exists already: refusing to write onto it", dst);
}

void ota_copy_new(const char *src, const char *dst)
{
    struct stat st;
    int in = q25tok_open_regular(src, &st, Q25TOK_ANY_SIZE);
    if (in < 0)
        refuse_read(src, errno);
    refuse_existing(dst);
    mode_t mode = st.st_mode & 0755; /* cp's: the source's, under q25-ota's umask 022 */
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
    if (out < 0) {
        if (errno == EEXIST)
            ota_die("%s exists already: refusing to write onto it", dst);
        ota_die("cannot copy %s", src);
    }
    int ok = fchmod(out, mode) == 0 && stream(in, out, NULL) == 0;
    close(in);
    ok = close(out) == 0 && ok;
    if (!ok) {
        unlink(dst);
        ota_die("cannot copy %s", src);
    }
}

void ota_place(const char *src, const char *dst)
{
    ota_no_link(src);
    struct stat st;
    if (stat(src, &st) != 0 || !S_ISREG(st.st_mode))
        ota_die("%s: not a regular file", src);
    refuse_existing(dst);
    if (st.st_nlink == 1 && link(src, dst) == 0)
        return;
    ota_copy_new(src, dst);
}

/* mkdir -p: what is missing is made (MODE whatever the umask); an existing link on the way is
 * followed only when it is root's or ours (own_tree's rule above a tree; in a tree of ours
 * alone, only we made it), else refused as no_link refuses it */
void ota_mkdir_p(const char *path, mode_t mode)
{
    char p[OTA_PATH];
    if (!*path || snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        ota_die("cannot create '%s'", path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s)
            continue;
        char c = *s;
        *s = 0;
        struct stat st;
        if (lstat(p, &st) != 0) {
            int fd = -1;
            if (mkdir(p, mode) != 0 || (fd = open(p, DIR_FLAGS)) < 0 || fchmod(fd, mode) != 0)
                ota_die("cannot create %s: %s", p, strerror(errno));
            close(fd);
        } else if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != ota_me) {
            ota_die("%s is a symlink: refusing to follow it", p);
        } else if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            ota_die("cannot create %s: %s is not a directory", path, p);
        }
        *s = c;
        if (!c)
            return;
        while (s[1] == '/')
            s++;
        if (!s[1])
            return;
    }
}

/* -- removing ---------------------------------------------------------------------------------- */
/* rm -rf's: NAME in the directory FD, a directory emptied first; a link is removed, never followed */
static int remove_entry(void *ctx, int fd, const char *name, const struct stat *st)
{
    if (!S_ISDIR(st->st_mode))
        return unlinkat(fd, name, 0) != 0 ? errno : 0;
    int sub = openat(fd, name, DIR_FLAGS);
    int r = sub < 0 ? errno : each_entry(sub, remove_entry, ctx);
    return r ? r : unlinkat(fd, name, AT_REMOVEDIR) != 0 ? errno : 0;
}

int ota_rm_rf(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? 0 : -1;
    int e = 0;
    if (!S_ISDIR(st.st_mode))
        e = unlink(path) != 0 ? errno : 0;
    else {
        int fd = open(path, DIR_FLAGS);
        e = fd < 0 ? errno : each_entry(fd, remove_entry, NULL);
        if (!e && rmdir(path) != 0)
            e = errno;
    }
    errno = e;
    return e ? -1 : 0;
}

void ota_rm_f(const char *path)
{
    if (unlink(path) != 0 && errno != ENOENT)
        ota_die("cannot remove %s", path);
}

void ota_sync(void)
{
    sync();
}

int ota_sha256_file(const char *path, char hex[65])
{
    struct stat st;
    int fd = q25tok_open_regular(path, &st, Q25TOK_ANY_SIZE);
    if (fd < 0 && errno == ELOOP)
        ota_no_link(path);
    if (fd < 0) {
        fprintf(stderr, "q25-ota: %s: not a regular file\n", path);
        return 1;
    }
    q25_sha256_ctx ctx;
    q25_sha256_init(&ctx);
    int e = stream(fd, -1, &ctx);
    close(fd);
    if (e) {
        fprintf(stderr, "q25-ota: cannot read %s: %s\n", path, strerror(e));
        return 1;
    }
    uint8_t out[32];
    q25_sha256_final(&ctx, out);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", out[i]);
    return 0;
}
