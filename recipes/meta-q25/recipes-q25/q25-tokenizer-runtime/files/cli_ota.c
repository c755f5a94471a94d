/*
 * q25tok ota STEP [--root DIR] [--stdout] PAYLOAD: one step of a release for the update engines
 * (ota.h; docs/ota.md), called by q25-ota.sh, their dispatcher:
 *
 *   install   stage, verify, switch current, record, load the regions (Mender ArtifactInstall)
 *   smoke     the current release's smoke test (Mender ArtifactCommit)
 *   rollback  back to the release current before this update (Mender ArtifactRollback)
 *   cleanup   the rollback data and the staging go (Mender Cleanup)
 *   prepare   PAYLOAD, SWUpdate's drop directory, created afresh in an install dir of ours (preinst)
 *   postinst  install then smoke from the drop directory, rolled back when either fails (SWUpdate)
 *
 * --root DIR prefixes every board path (tests, chroots), like deploy's --remote-root; --stdout:
 * progress on standard output (SWUpdate logs a script's stderr as errors), else on stderr (Mender
 * reads a module's stdout as answers). Exit 0, or 1 with one line "q25-ota: WHY" on stderr.
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "ota.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

int ota_say_fd = 2;
uid_t ota_me;
char ota_who[32];
char ota_own[48];

void ota_die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fflush(NULL);
    fputs("q25-ota: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

void ota_say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char line[8192];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fflush(NULL);
    dprintf(ota_say_fd, "q25-ota: %s\n", line);
}

/* STEP in a child: whether it succeeded (its messages are its own) */
static int child(void (*step)(const char *), const char *dir)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        ota_die("cannot fork");
    if (pid == 0) {
        step(dir);
        fflush(NULL);
        _exit(0);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        ;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static void prepare(const char *dir)
{
    char base[OTA_PATH], releases[OTA_PATH];
    ota_path(base, OTA_PATH, "%s", dir);
    char *slash = strrchr(base, '/');
    if (!slash || slash == base || !slash[1] || !strcmp(slash + 1, ".") || !strcmp(slash + 1, ".."))
        ota_die("bad payload directory %s", dir);
    *slash = 0;
    ota_path(releases, OTA_PATH, "%s/releases", base);
    ota_no_link(base);
    ota_no_link(dir);
    ota_no_link(releases);
    ota_own_tree(base, "install"); /* the install dir the drop directory is in */
    ota_mkdir_p(base, 0755);
    if (ota_rm_rf(dir) != 0 || mkdir(dir, 0700) != 0)
        ota_die("cannot create %s", dir);
    ota_own_tree(base, "install");
}

static void postinst(const char *dir)
{
    const char *why = !child(ota_install, dir) ? "install failed: nothing was changed"
                      : !child(ota_smoke, dir) ? "smoke test failed: rolled back"
                                                 : NULL;
    if (why)
        ota_rollback(dir);
    ota_cleanup(dir);
    ota_rm_rf(dir);
    if (why)
        ota_die("%s", why);
}

int q25tok_ota_command(int argc, char **argv)
{
    static const struct { const char *name; void (*step)(const char *); } steps[] = {
        {"install", ota_install}, {"smoke", ota_smoke},   {"rollback", ota_rollback},
        {"cleanup", ota_cleanup}, {"prepare", prepare}, {"postinst", postinst},
    };
    const char *dir = NULL;
    void (*step)(const char *) = NULL;
    for (size_t k = 0; argc > 0 && k < sizeof steps / sizeof *steps; k++)
        if (!strcmp(argv[0], steps[k].name))
            step = steps[k].step;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--root") && i + 1 < argc)
            ota_root = argv[++i];
        else if (!strcmp(argv[i], "--stdout"))
            ota_say_fd = 1;
        else if (!dir && argv[i][0])
            dir = argv[i];
        else
            step = NULL;
    }
    if (!step || !dir || (ota_root[0] && ota_root[0] != '/')) {
        fputs("usage: q25tok ota install|smoke|rollback|cleanup|prepare|postinst [--root DIR] [--stdout] PAYLOAD\n"
              "       (q25-ota.sh, the Mender update module and SWUpdate script, calls it)\n",
              stderr);
        return 2;
    }
    umask(022); /* what it creates is the same whatever the engine's umask */
    ota_me = geteuid();
    if (ota_me == 0) {
        strcpy(ota_who, "root");
        strcpy(ota_own, "root:root");
    } else {
        snprintf(ota_who, sizeof ota_who, "uid %u", (unsigned)ota_me);
        snprintf(ota_own, sizeof ota_own, "%u:%u", (unsigned)ota_me, (unsigned)getegid());
    }
    step(dir);
    fflush(NULL);
    return 0;
}
