/* ota_fs.c's checks (tests/runtime/test_ota_fs.py builds and runs this):
 *
 *   ota_fs_test WORK [FOREIGN]   every case in the empty directory WORK, as whoever runs it;
 *                                FOREIGN (made by the test) holds what another user owns:
 *                                tree/sub/theirs, above/, sticky/mine/, theirlink -> sticky
 *   ota_fs_test cli FUNC A1 A2   one ota_fs call, for comparing its message with q25-ota.sh's
 *
 * A call that is to fail runs in a child: its exit status and its one stderr line are checked.
 * Prints "N passed, M failed" (check.h). */
#define _XOPEN_SOURCE 700
#include "ota.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

/* what cli_ota.c defines in q25tok */
int ota_say_fd = 2;
uid_t ota_me;
char ota_who[32];
char ota_own[48];

void ota_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("q25-ota: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    _exit(1); /* a child of EXPECT: no leak report for what the dying call held */
}

void ota_say(const char *fmt, ...)
{
    (void)fmt;
}

/* a formatted string in one of 16 rotating buffers */
static const char *F(const char *fmt, ...)
{
    static char bufs[16][2 * OTA_PATH];
    static int next;
    char *b = bufs[next++ % 16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof bufs[0], fmt, ap);
    va_end(ap);
    return b;
}

static const char *W; /* WORK */
#define P(rel) F("%s/%s", W, rel)

/* the child's exit status and stderr are STATUS and "q25-ota: WANT\n" ("" for status 0) */
static int outcome(pid_t pid, int fd, int status, const char *want, int line)
{
    char got[4 * OTA_PATH] = "";
    size_t n = 0;
    for (ssize_t r; n < sizeof got - 1 && (r = read(fd, got + n, sizeof got - 1 - n)) != 0;)
        if (r > 0)
            n += (size_t)r;
        else if (errno != EINTR)
            break;
    got[n] = 0;
    close(fd);
    int st = 0;
    waitpid(pid, &st, 0);
    const char *expect = want ? F("q25-ota: %s\n", want) : "";
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == status && strcmp(got, expect) == 0;
    if (!ok)
        fprintf(stderr, "line %d: status %d (want %d)\n  got:  %s  want: %s\n", line,
                WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st), status, got, expect);
    return ok;
}

#define EXPECT(status, want, ...)                                                                                      \
    do {                                                                                                              \
        int pfd[2];                                                                                                   \
        if (pipe(pfd) != 0)                                                                                           \
            abort();                                                                                                  \
        fflush(NULL);                                                                                                 \
        pid_t pid = fork();                                                                                           \
        if (pid == 0) {                                                                                               \
            close(pfd[0]);                                                                                            \
            dup2(pfd[1], 2);                                                                                          \
            alarm(20); /* a call that blocks (a FIFO's open) fails the check */                                       \
            __VA_ARGS__;                                                                                              \
            _exit(0);                                                                                                 \
        }                                                                                                             \
        close(pfd[1]);                                                                                                \
        CHECK(outcome(pid, pfd[0], status, want, __LINE__));                                                          \
    } while (0)
#define OK(...) EXPECT(0, NULL, __VA_ARGS__)
#define DIES(want, ...) EXPECT(1, want, __VA_ARGS__)

static void make_file(const char *path, const char *text, mode_t mode)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || fchmod(fd, mode) != 0 || close(fd) != 0)
        fprintf(stderr, "cannot make %s\n", path), exit(2);
}

static void make_dir(const char *path, mode_t mode)
{
    if (mkdir(path, mode) != 0 || chmod(path, mode) != 0)
        fprintf(stderr, "cannot make %s\n", path), exit(2);
}

static const char *file_text(const char *path)
{
    static char buf[256];
    int fd = open(path, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    buf[n < 0 ? 0 : n] = 0;
    return n < 0 ? "(none)" : buf;
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? st.st_mode & 07777 : (mode_t)-1;
}

static int temporaries_beside(const char *dir, const char *name) /* NAME.XXXXXX left in DIR */
{
    char cmd[2 * OTA_PATH];
    snprintf(cmd, sizeof cmd, "ls -a '%s' | grep -c '^%s\\.'", dir, name);
    FILE *p = popen(cmd, "r");
    int n = -1;
    if (!p || fscanf(p, "%d", &n) != 1)
        n = -1;
    if (p)
        pclose(p);
    return n;
}

static const char *install_fix(const char *tree) { return F("chown -R %s %s && chmod -R go-w %s", ota_own, tree, tree); }
static const char *in_tree(const char *bad, const char *what, const char *tree, int theirs)
{
    return F("%s %s: root installs only into a tree that is its own alone (one owner per tree): %s%s", bad, what,
             theirs ? "this install dir is another user's (a deploy --become none install?): use a separate install "
                      "dir for OTA; if no one else ever wrote there: " : "",
             install_fix(tree));
}
static const char *in_payload(const char *bad, const char *what, const char *tree)
{
    return F("%s %s: root installs only a payload no one else can change: let the update engine write it, or %s", bad,
             what, install_fix(tree));
}
static const char *above(const char *dir, const char *tree, unsigned uid, const char *mode)
{
    return F("%s, above %s, is owned by uid %u (mode %s): whoever owns or can write a directory above the tree root "
             "installs into can swap that tree: make it %s's alone (chown %s %s && chmod go-w %s) or choose a "
             "directory below %s's own ones",
             dir, tree, uid, mode, ota_who, ota_own, dir, dir, ota_who);
}
static const char *record(const char *file, const char *mode, int names, unsigned uid)
{
    return F("%s is not a record q25-ota wrote (mode %s, %d name(s), uid %u): root trusts as its own only a regular "
             "file it alone owns and can write, with no other name (no hard link); remove it if it is not q25-ota's",
             file, mode, names, uid);
}
#define LINK_MSG(p) F("%s is a symlink: refusing to follow it", p)
#define FIFO_MSG(p) F("%s is not a regular file: refusing to read it", p)

static void test_meta(void)
{
    static const struct {
        mode_t mode;
        const char *text;
    } modes[] = {{S_IFDIR | 0755, "drwxr-xr-x"}, {S_IFDIR | 01777, "drwxrwxrwt"}, {S_IFDIR | 01770, "drwxrwx--T"},
                 {S_IFDIR | 02755, "drwxr-sr-x"}, {S_IFDIR | 02745, "drwxr-Sr-x"}, {S_IFREG | 04755, "-rwsr-xr-x"},
                 {S_IFREG | 04644, "-rwSr--r--"}, {S_IFREG | 0644, "-rw-r--r--"}, {S_IFLNK | 0777, "lrwxrwxrwx"},
                 {S_IFIFO | 0644, "prw-r--r--"}, {S_IFCHR | 0600, "crw-------"}, {S_IFBLK | 0660, "brw-rw----"}};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) {
        char out[11];
        ota_mode_string(modes[i].mode, out);
        CHECK(strcmp(out, modes[i].text) == 0);
    }
    ota_meta m;
    CHECK(ota_lmeta(P("absent"), &m) == 0);
    CHECK(ota_lmeta(P("absent/below"), &m) == 0);
    make_file(P("m"), "12345", 0640);
    CHECK(link(P("m"), P("m2")) == 0);
    CHECK(ota_lmeta(P("m"), &m) == 1 && m.nlink == 2 && m.uid == ota_me && m.size == 5 && (m.mode & 07777) == 0640);
    CHECK(symlink("m", P("ml")) == 0);
    CHECK(ota_lmeta(P("ml"), &m) == 1 && S_ISLNK(m.mode));
    OK(ota_no_link(P("m")); ota_no_link(P("absent")); ota_no_fifo(P("ml")); ota_no_fifo(P("absent")));
    DIES(LINK_MSG(P("ml")), ota_no_link(P("ml")));
    CHECK(mkfifo(P("fifo"), 0644) == 0);
    DIES(FIFO_MSG(P("fifo")), ota_no_fifo(P("fifo")));
    make_dir(P("nl"), 0755);
    make_dir(P("nl/d"), 0755);
    CHECK(symlink("d", P("nl/l")) == 0);
    make_file(P("nl/d/f"), "", 0644);
    OK(ota_no_link_in(P("nl"), "d/f"));
    DIES(LINK_MSG(P("nl/l")), ota_no_link_in(P("nl"), "l/f"));
}

static void test_own_tree(void)
{
    /* ours alone: directories, files, a link (its mode is no one's to use), a FIFO */
    make_dir(P("ok"), 0755);
    make_dir(P("ok/releases"), 0700);
    make_dir(P("ok/releases/a"), 0755);
    make_file(P("ok/releases/a/f"), "x", 0600);
    make_file(P("ok/.q25deploy-state.json"), "{}", 0644);
    CHECK(symlink("releases/a", P("ok/current")) == 0);
    CHECK(symlink("/nonexistent", P("ok/dangling")) == 0);
    CHECK(mkfifo(P("ok/releases/fifo"), 0600) == 0);
    OK(ota_own_tree(P("ok"), "install"); ota_own_tree(P("ok"), "payload"));
    OK(ota_own_tree(P("ok/absent"), "install"); ota_own_tree(P("ok/absent/deeper"), "install"));
    DIES(F("%s is not a directory", P("ok/.q25deploy-state.json")), ota_own_tree(P("ok/.q25deploy-state.json"), "install"));
    DIES(LINK_MSG(P("ok/current")), ota_own_tree(P("ok/current"), "install"));
    DIES(F("%s, above %s, is not a directory", P("ok/.q25deploy-state.json"), P("ok/.q25deploy-state.json/x")),
         ota_own_tree(P("ok/.q25deploy-state.json/x"), "install"));

    /* a group-writable directory (the first in walking order: a directory before what it holds) */
    make_dir(P("gw"), 0755);
    make_dir(P("gw/a"), 0775);
    make_file(P("gw/a/b"), "", 0666);
    const char *what = F("can be written by others than %s (mode drwxrwxr-x)", ota_who);
    DIES(in_tree(P("gw/a"), what, P("gw"), 0), ota_own_tree(P("gw"), "install"));
    DIES(in_payload(P("gw/a"), what, P("gw")), ota_own_tree(P("gw"), "payload"));
    CHECK(chmod(P("gw/a"), 0755) == 0);
    DIES(in_tree(P("gw/a/b"), F("can be written by others than %s (mode -rw-rw-rw-)", ota_who), P("gw"), 0),
         ota_own_tree(P("gw"), "install"));
    make_dir(P("gw2"), 0757); /* the tree itself, other-writable */
    DIES(in_tree(P("gw2"), F("can be written by others than %s (mode drwxr-xrwx)", ota_who), P("gw2"), 0),
         ota_own_tree(P("gw2"), "install"));

    /* above the tree: ours but group-writable; a root-owned sticky one is fine (ours when root) */
    make_dir(P("wide"), 0775);
    DIES(above(P("wide"), P("wide/tree"), (unsigned)ota_me, "drwxrwxr-x"), ota_own_tree(P("wide/tree"), "install"));
    make_dir(P("wide/deeper"), 0755); /* the named and the resolved walks both pass it */
    DIES(above(P("wide"), P("wide/deeper/tree"), (unsigned)ota_me, "drwxrwxr-x"),
         ota_own_tree(P("wide/deeper/tree"), "payload"));
    if (ota_me == 0) {
        make_dir(P("sticky"), 01777);
        make_dir(P("sticky/t"), 0755);
        OK(ota_own_tree(P("sticky/t"), "install"));
    } else {
        make_dir(P("sticky"), 01777); /* ours, not root's: as any directory of ours, no one else's to write */
        DIES(above(P("sticky"), P("sticky/t"), (unsigned)ota_me, "drwxrwxrwt"), ota_own_tree(P("sticky/t"), "install"));
    }
    /* a link of ours above: accepted as named, where it leads is checked */
    CHECK(symlink("wide/deeper", P("via")) == 0);
    char *real = realpath(P("wide"), NULL);
    DIES(above(real, P("via/tree"), (unsigned)ota_me, "drwxrwxr-x"), ota_own_tree(P("via/tree"), "install"));
    free(real);
    CHECK(symlink("ok", P("okvia")) == 0);
    OK(ota_own_tree(P("okvia/releases"), "install"));
}

static void test_foreign(const char *fo)
{
    struct stat st;
    if (lstat(F("%s/tree/sub/theirs", fo), &st) != 0) {
        fprintf(stderr, "%s: no tree/sub/theirs\n", fo);
        failed++;
        return;
    }
    unsigned other = (unsigned)st.st_uid;
    CHECK(other != (unsigned)ota_me);
    char tree[OTA_PATH], bad[OTA_PATH];
    snprintf(tree, sizeof tree, "%s/tree", fo);
    snprintf(bad, sizeof bad, "%s/tree/sub/theirs", fo);
    const char *what = F("is owned by uid %u (mode -rw-r--r--), not by %s who runs this", other, ota_who);
    DIES(in_tree(bad, what, tree, 1), ota_own_tree(tree, "install"));
    DIES(in_payload(bad, what, tree), ota_own_tree(tree, "payload"));
    DIES(above(F("%s/above", fo), F("%s/above/tree", fo), other, "drwxr-xr-x"),
         ota_own_tree(F("%s/above/tree", fo), "install"));
    OK(ota_own_tree(F("%s/sticky/mine", fo), "install"));
    DIES(above(F("%s/theirlink", fo), F("%s/theirlink/mine", fo), other, "lrwxrwxrwx"),
         ota_own_tree(F("%s/theirlink/mine", fo), "install"));
    /* a link of ours above, to their directory: refused as resolved */
    CHECK(symlink(F("%s/above", fo), P("tothem")) == 0);
    char *real = realpath(F("%s/above", fo), NULL);
    DIES(above(real, P("tothem/tree"), other, "drwxr-xr-x"), ota_own_tree(P("tothem/tree"), "install"));
    free(real);
    DIES(record(bad, "-rw-r--r--", 1, other), ota_own_record(bad));
}

static void test_records(void)
{
    make_dir(P("rec"), 0755);
    OK(ota_own_record(P("rec/absent")));
    make_file(P("rec/state"), "{}\n", 0644);
    OK(ota_own_record(P("rec/state")); ota_own_file(P("rec/state"), "-rw-r--r--"));
    CHECK(link(P("rec/state"), P("rec/state2")) == 0);
    DIES(record(P("rec/state"), "-rw-r--r--", 2, (unsigned)ota_me), ota_own_record(P("rec/state")));
    OK(ota_own_file(P("rec/state"), "-rw-r--r--")); /* a kept release shares its files */
    make_file(P("rec/gw"), "", 0664);
    DIES(record(P("rec/gw"), "-rw-rw-r--", 1, (unsigned)ota_me), ota_own_record(P("rec/gw")));
    CHECK(mkfifo(P("rec/fifo"), 0600) == 0);
    DIES(FIFO_MSG(P("rec/fifo")), ota_own_record(P("rec/fifo")));
    CHECK(symlink("state2", P("rec/link")) == 0);
    DIES(LINK_MSG(P("rec/link")), ota_own_record(P("rec/link")));
    make_dir(P("rec/dir"), 0755);
    DIES(FIFO_MSG(P("rec/dir")), ota_own_record(P("rec/dir")));
    const char *tail = "root changes no mode of a file it did not place (it may have another name): install a full release";
    DIES(F("%s is not a release file as q25-ota installs it (-rwxr-xr-x, %s's; it is -rw-r--r-- 2 %u): %s",
           P("rec/state"), ota_who, (unsigned)ota_me, tail),
         ota_own_file(P("rec/state"), "-rwxr-xr-x"));
    DIES(F("%s is not a release file as q25-ota installs it (-rw-r--r--, %s's; it is missing): %s", P("rec/none"),
           ota_who, tail),
         ota_own_file(P("rec/none"), "-rw-r--r--"));
    DIES(LINK_MSG(P("rec/link")), ota_own_file(P("rec/link"), "-rw-r--r--"));
}

static void test_read(void)
{
    size_t len = 99;
    CHECK(ota_read(P("rd-absent"), 100, &len) == NULL);
    make_file(P("rd"), "hello\n", 0600);
    char *t = ota_read(P("rd"), 100, &len);
    CHECK(t && len == 6 && strcmp(t, "hello\n") == 0);
    free(t);
    make_file(P("rd0"), "", 0600);
    t = ota_read(P("rd0"), 0, &len);
    CHECK(t && len == 0 && t[0] == 0);
    free(t);
    DIES(F("cannot read %s: larger than any file of its kind: not read", P("rd")), ota_read(P("rd"), 5, &len));
    CHECK(mkfifo(P("rd-fifo"), 0600) == 0); /* no writer: an open without O_NONBLOCK would wait for one */
    DIES(FIFO_MSG(P("rd-fifo")), ota_read(P("rd-fifo"), 100, &len));
    CHECK(symlink("rd", P("rd-link")) == 0);
    DIES(LINK_MSG(P("rd-link")), ota_read(P("rd-link"), 100, &len));
    DIES(FIFO_MSG(W), ota_read(W, 100, &len));
    char hex[65];
    make_file(P("abc"), "abc", 0644);
    CHECK(ota_sha256_file(P("abc"), hex) == 0 &&
          strcmp(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0);
    EXPECT(1, F("%s: not a regular file", P("rd-fifo")), _exit(ota_sha256_file(P("rd-fifo"), hex)));
    EXPECT(1, F("%s: not a regular file", P("rd-absent")), _exit(ota_sha256_file(P("rd-absent"), hex)));
    DIES(LINK_MSG(P("rd-link")), ota_sha256_file(P("rd-link"), hex));
}

static void test_put(void)
{
    make_dir(P("put"), 0755);
    mode_t old = umask(077);
    OK(ota_put(P("put/f"), "one\n", 4));
    CHECK(mode_of(P("put/f")) == 0644 && strcmp(file_text(P("put/f")), "one\n") == 0);
    OK(ota_put(P("put/f"), "two\n", 4)); /* over it */
    CHECK(mode_of(P("put/f")) == 0644 && strcmp(file_text(P("put/f")), "two\n") == 0);
    make_file(P("put/src"), "copied\n", 0600);
    OK(ota_put_copy(P("put/g"), P("put/src")));
    CHECK(mode_of(P("put/g")) == 0644 && strcmp(file_text(P("put/g")), "copied\n") == 0);
    umask(old);
    DIES(F("cannot read %s: %s", P("put/none"), strerror(ENOENT)), ota_put_copy(P("put/g"), P("put/none")));
    CHECK(mkfifo(P("put/fifo"), 0600) == 0);
    DIES(FIFO_MSG(P("put/fifo")), ota_put_copy(P("put/g"), P("put/fifo")));
    /* a write that fails (a file size limit: root too) leaves the file as it was and no temporary */
    DIES(F("cannot write %s", P("put/f")), {
        struct rlimit rl = {10, 10};
        signal(SIGXFSZ, SIG_IGN);
        setrlimit(RLIMIT_FSIZE, &rl);
        ota_put(P("put/f"), "more than ten bytes\n", 20);
    });
    CHECK(strcmp(file_text(P("put/f")), "two\n") == 0 && temporaries_beside(P("put"), "f") == 0);
    make_file(P("put/outside"), "theirs\n", 0644);
    CHECK(symlink("outside", P("put/link")) == 0);
    DIES(LINK_MSG(P("put/link")), ota_put(P("put/link"), "x", 1));
    CHECK(strcmp(file_text(P("put/outside")), "theirs\n") == 0);
    make_dir(P("put/d"), 0755);
    DIES(F("%s is a directory", P("put/d")), ota_put(P("put/d"), "x", 1));
    DIES(F("cannot create a temporary beside %s", P("put/no/f")), ota_put(P("put/no/f"), "x", 1));
    CHECK(temporaries_beside(P("put"), "link") == 0 && temporaries_beside(P("put"), "d") == 0);
}

static void test_place(void)
{
    make_dir(P("pl"), 0755);
    make_file(P("pl/one"), "one name\n", 0600);
    OK(ota_place(P("pl/one"), P("pl/linked")));
    struct stat a, b;
    CHECK(stat(P("pl/one"), &a) == 0 && stat(P("pl/linked"), &b) == 0 && a.st_ino == b.st_ino && a.st_nlink == 2);
    /* now two names: a copy (a name elsewhere must not be chmodded through ours) */
    OK(ota_place(P("pl/one"), P("pl/copied")));
    CHECK(stat(P("pl/copied"), &b) == 0 && a.st_ino != b.st_ino && b.st_nlink == 1 && (b.st_mode & 07777) == 0600);
    CHECK(strcmp(file_text(P("pl/copied")), "one name\n") == 0);
    DIES(F("%s exists already: refusing to write onto it", P("pl/copied")), ota_place(P("pl/one"), P("pl/copied")));
    CHECK(symlink("nowhere", P("pl/dangling")) == 0);
    DIES(F("%s exists already: refusing to write onto it", P("pl/dangling")), ota_place(P("pl/one"), P("pl/dangling")));
    CHECK(mkfifo(P("pl/fifo"), 0600) == 0);
    DIES(F("%s: not a regular file", P("pl/fifo")), ota_place(P("pl/fifo"), P("pl/x")));
    DIES(F("%s: not a regular file", P("pl/absent")), ota_place(P("pl/absent"), P("pl/x")));
    CHECK(symlink("one", P("pl/link")) == 0);
    DIES(LINK_MSG(P("pl/link")), ota_place(P("pl/link"), P("pl/x")));
    make_file(P("pl/exe"), "#!\n", 0775);
    OK(ota_copy_new(P("pl/exe"), P("pl/exe2")));
    CHECK(mode_of(P("pl/exe2")) == 0755 && strcmp(file_text(P("pl/exe2")), "#!\n") == 0);
    DIES(F("%s exists already: refusing to write onto it", P("pl/exe2")), ota_copy_new(P("pl/one"), P("pl/exe2")));
    DIES(FIFO_MSG(P("pl/fifo")), ota_copy_new(P("pl/fifo"), P("pl/y")));
    CHECK(mode_of(P("pl/x")) == (mode_t)-1 && mode_of(P("pl/y")) == (mode_t)-1);
}

static void test_dirs(void)
{
    mode_t old = umask(077);
    OK(ota_mkdir_p(P("mk/a/b/c"), 0755); ota_mkdir_p(P("mk/a/b/c"), 0755); ota_mkdir_p(P("mk//a/b/d/"), 0755));
    umask(old);
    CHECK(mode_of(P("mk")) == 0755 && mode_of(P("mk/a/b/c")) == 0755 && mode_of(P("mk/a/b/d")) == 0755);
    CHECK(symlink("mk/a", P("mkl")) == 0); /* a link of ours */
    OK(ota_mkdir_p(P("mkl/e"), 0755));
    CHECK(mode_of(P("mk/a/e")) == 0755);
    make_file(P("mk/file"), "", 0644);
    DIES(F("cannot create %s: %s is not a directory", P("mk/file/x"), P("mk/file")), ota_mkdir_p(P("mk/file/x"), 0755));

    /* rm -rf: a link in the tree goes, never what it leads to */
    make_dir(P("out"), 0755);
    make_file(P("out/keep"), "kept\n", 0644);
    make_dir(P("rm"), 0755);
    make_dir(P("rm/a"), 0700);
    make_dir(P("rm/a/b"), 0755);
    make_file(P("rm/a/b/f"), "", 0644);
    CHECK(symlink(P("out"), P("rm/a/todir")) == 0);
    CHECK(symlink(P("out/keep"), P("rm/a/b/tofile")) == 0);
    CHECK(mkfifo(P("rm/a/fifo"), 0600) == 0);
    CHECK(ota_rm_rf(P("rm")) == 0 && mode_of(P("rm")) == (mode_t)-1);
    CHECK(strcmp(file_text(P("out/keep")), "kept\n") == 0 && mode_of(P("out")) == 0755);
    CHECK(symlink("out", P("rmlink")) == 0);
    CHECK(ota_rm_rf(P("rmlink")) == 0 && mode_of(P("rmlink")) == (mode_t)-1 && mode_of(P("out/keep")) == 0644);
    CHECK(ota_rm_rf(P("rm-absent")) == 0);
    make_file(P("rmf"), "", 0644);
    CHECK(ota_rm_rf(P("rmf")) == 0 && mode_of(P("rmf")) == (mode_t)-1);

    make_file(P("rmf"), "", 0644);
    OK(ota_rm_f(P("rmf")); ota_rm_f(P("rmf")));
    CHECK(mode_of(P("rmf")) == (mode_t)-1);
    DIES(F("cannot remove %s", P("out")), ota_rm_f(P("out")));
    OK(ota_sync());
}

static void set_user(void)
{
    ota_me = geteuid();
    if (ota_me == 0) {
        snprintf(ota_who, sizeof ota_who, "root");
        snprintf(ota_own, sizeof ota_own, "root:root");
    } else {
        snprintf(ota_who, sizeof ota_who, "uid %u", (unsigned)ota_me);
        snprintf(ota_own, sizeof ota_own, "%u:%u", (unsigned)ota_me, (unsigned)getegid());
    }
}

static int cli(int argc, char **argv)
{
    if (argc != 5)
        return 2;
    const char *f = argv[2], *a = argv[3], *b = argv[4];
    if (strcmp(f, "own_tree") == 0)
        ota_own_tree(a, b);
    else if (strcmp(f, "own_record") == 0)
        ota_own_record(a);
    else if (strcmp(f, "own_file") == 0)
        ota_own_file(a, b);
    else if (strcmp(f, "place") == 0)
        ota_place(a, b);
    else if (strcmp(f, "no_fifo") == 0)
        ota_no_fifo(a);
    else if (strcmp(f, "put") == 0)
        ota_put(a, b, strlen(b));
    else
        return 2;
    return 0;
}

int main(int argc, char **argv)
{
    set_user();
    if (argc > 1 && strcmp(argv[1], "cli") == 0)
        return cli(argc, argv);
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: ota_fs_test WORK [FOREIGN] | cli FUNC A1 A2\n");
        return 2;
    }
    W = argv[1];
    umask(022);
    test_meta();
    test_own_tree();
    test_records();
    test_read();
    test_put();
    test_place();
    test_dirs();
    if (argc == 3)
        test_foreign(argv[2]);
    else
        printf("skipped: files of another user (FOREIGN not given)\n");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
