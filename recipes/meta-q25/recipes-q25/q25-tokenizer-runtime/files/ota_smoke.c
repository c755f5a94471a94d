/*
 * The smoke test of the current release and its reserved regions (ota.h): every file's sha256,
 * `q25tok info`, every smoke prompt's ids, the regions read back (`q25tok verify`), and the
 * forward pass against the host's (`q25tok generate --positions` compared by `q25tok compare`:
 * the one comparison `q25deploy smoke` over SSH runs too). Before a full release is staged, the
 * running device tree must reserve its regions; after the switch `q25tok load` copies its
 * partitions into them.
 *
 * Each q25tok command is the plan's q25tok (the image's: ota_pick_q25tok checks it as the
 * dispatcher did), run in a child with its output captured in an unnamed temporary.
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "ota.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct ran {
    int status;      /* the command's exit status */
    char *out, *err; /* its standard output and error */
    size_t len;
} ran;

static char *slurp(FILE *f, size_t *len)
{
    long n = (fflush(f), ftell(f));
    char *buf = malloc(n > 0 ? (size_t)n + 1 : 1);
    if (!buf || n < 0 || fseek(f, 0, SEEK_SET) != 0 || fread(buf, 1, (size_t)n, f) != (size_t)n)
        ota_die("cannot read a q25tok command's output");
    buf[n] = 0;
    *len = (size_t)n;
    fclose(f);
    return buf;
}

/* the plan's q25tok with ARGV, standard input from IN (a checked payload file, or NULL) */
static ran run(const ota_plan *p, char **argv, const char *in)
{
    FILE *out = tmpfile(), *err = tmpfile();
    if (!out || !err)
        ota_die("cannot create a temporary file");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        ota_die("cannot fork");
    if (pid == 0) {
        int fd = in ? open(in, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : open("/dev/null", O_RDONLY);
        if (fd < 0 || dup2(fd, 0) < 0 || dup2(fileno(out), 1) < 0 || dup2(fileno(err), 2) < 0)
            _exit(1);
        if (in)
            fcntl(0, F_SETFL, 0); /* blocking from here */
        execv(p->q25tok_live, argv);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        ;
    ran r = {WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st), NULL, NULL, 0};
    size_t elen;
    r.out = slurp(out, &r.len);
    r.err = slurp(err, &elen);
    return r;
}

static void done(ran *r)
{
    free(r->out);
    free(r->err);
}

/* the first two lines of TEXT joined by a space (or WHAT when empty) */
static const char *two_lines(char *text, const char *what)
{
    char *nl = strchr(text, '\n');
    if (nl && (nl = strchr(nl + 1, '\n')) != NULL)
        *nl = 0;
    for (char *c = text; *c; c++)
        if (*c == '\n')
            *c = ' ';
    size_t n = strlen(text);
    while (n && text[n - 1] == ' ')
        text[--n] = 0;
    return *text ? text : what;
}

void ota_pick_q25tok(const ota_plan *p)
{
    ota_no_link(p->q25tok_live);
    struct stat st;
    if (stat(p->q25tok_live, &st) != 0 || !S_ISREG(st.st_mode) || access(p->q25tok_live, X_OK) != 0)
        ota_die("no q25tok at %s (the image's q25-tokenizer-runtime package installs it): root runs no other",
                p->q25tok_live);
    if (st.st_uid != ota_me)
        ota_die("%s is not owned by the user running q25-ota: refusing to run it", p->q25tok_live);
}

/* the regions of the plan the running device tree does not hold as <BASE SIZE>, no-map: a list
 * "NODE [0xBASE, 0xEND) WHY, ..." and its count */
static size_t unheld(const ota_plan *p, char *list, size_t n)
{
    size_t count = 0, k = 0;
    list[0] = 0;
    for (size_t i = 0; i < p->nregions; i++) {
        const ota_region_line *r = &p->regions[i];
        char path[OTA_PATH], want[16];
        for (int b = 0; b < 16; b++) {
            char two[3] = {(b < 8 ? r->base : r->size)[2 * (b % 8)], (b < 8 ? r->base : r->size)[2 * (b % 8) + 1], 0};
            want[b] = (char)strtoul(two, NULL, 16);
        }
        ota_path(path, OTA_PATH, "%s/reserved-memory/%s/reg", p->dt_live, r->node);
        size_t len = 0;
        char *reg = ota_is_file(path) ? ota_read(path, 4096, &len) : NULL;
        const char *why = !reg ? "absent" : len != 16 || memcmp(reg, want, 16) ? "reserves another range" : NULL;
        free(reg);
        ota_path(path, OTA_PATH, "%s/reserved-memory/%s/no-map", p->dt_live, r->node);
        if (!why && access(path, F_OK) != 0)
            why = "not no-map";
        if (!why)
            continue;
        unsigned long long base = strtoull(r->base, NULL, 16), size = strtoull(r->size, NULL, 16);
        int w = snprintf(list + k, n - k, "%s%s [0x%llx, 0x%llx) %s", count ? ", " : "", r->node, base, base + size, why);
        if (w > 0 && (size_t)w < n - k)
            k += (size_t)w;
        count++;
    }
    return count;
}

void ota_check_reserved(const ota_plan *p)
{
    if (!p->full) /* tokenizer-only: the current release's region table stays */
        return;
    char list[4096], why[OTA_PATH + sizeof list + 128];
    size_t n = unheld(p, list, sizeof list);
    if (!n)
        return;
    snprintf(why, sizeof why, "the board's %s/reserved-memory does not reserve %zu of the release's %zu region(s) (%s)",
             p->dt, n, p->nregions, list);
    if (p->allow_unreserved) {
        ota_say("warning: %s; installing anyway (the plan allows it): its partitions will not be in reserved memory", why);
        return;
    }
    ota_die("refusing release %s: %s: boot an image whose device tree includes the build's reserved-memory.dtsi, or "
            "package with --allow-unreserved; nothing was staged", p->release, why);
}

static int ends_with(const char *line, const char *tail)
{
    size_t a = strlen(line), b = strlen(tail);
    return a >= b && !strcmp(line + a - b, tail);
}

void ota_regions(const ota_plan *p, const char *what, const char *dir, int allow_unreserved)
{
    const char *rid = strrchr(dir, '/') + 1;
    char parts[OTA_PATH], tab[OTA_PATH], want[128] = "";
    ota_path(parts, OTA_PATH, "%s/partitions", dir);
    ota_path(tab, OTA_PATH, "%s/regions.tab", parts);
    ota_no_link(parts);
    ota_no_link(tab);
    ota_no_fifo(tab); /* a FIFO there is refused, not "no table" */
    if (!ota_is_file(tab)) {
        ota_say("releases/%s has no region table: nothing to %s", rid, what);
        return;
    }
    ota_pick_q25tok(p);
    int load = !strcmp(what, "load");
    if (load) { /* loaded this boot with this table (a tokenizer-only update): kept */
        char sha[65], boot[40] = ""; /* a UUID */
        size_t n = 0;
        int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC); /* a proc file: fstat says 0 bytes */
        ssize_t got = fd >= 0 ? read(fd, boot, sizeof boot - 1) : 0;
        if (fd >= 0)
            close(fd);
        boot[got > 0 ? got : 0] = 0;
        boot[strcspn(boot, "\n")] = 0; /* want: 36 + 1 + 64 + 1 characters */
        if (ota_sha256_file(tab, sha) != 0)
            ota_die("cannot read %s", tab);
        snprintf(want, sizeof want, "%s %s\n", boot, sha);
        ota_own_record(p->loaded);
        char *had = ota_read(p->loaded, 4096, &n);
        int same = had && !strcmp(had, want);
        free(had);
        if (same) {
            ota_say("the reserved regions already hold the partitions of releases/%s's region table", rid);
            return;
        }
        /* a load cut half-way leaves no stamp: the next load copies again */
        ota_meta m;
        if (ota_lmeta(p->loaded, &m) && unlink(p->loaded) != 0)
            ota_die("cannot remove %s", p->loaded);
    }
    char *argv[] = {"q25tok", (char *)what, "--mem", (char *)p->mem_live, "--dt", (char *)p->dt_live, tab, NULL};
    ran r = run(p, argv, NULL);
    fputs(r.err, stderr);
    char bad[2048] = "";
    size_t k = 0;
    int refused_only = 1;
    for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
        if (strncmp(line, "region ", 7))
            continue;
        dprintf(ota_say_fd, "q25-ota: %s\n", line);
        if (ends_with(line, " loaded") || ends_with(line, " resident"))
            continue;
        refused_only &= strstr(line, " REFUSED ") != NULL;
        int w = snprintf(bad + k, sizeof bad - k, "%s%s", k ? "\n" : "", line);
        if (w > 0 && (size_t)w < sizeof bad - k)
            k += (size_t)w;
    }
    if (r.status == 0) {
        if (load)
            ota_put(p->loaded, want, strlen(want));
        ota_say("%s: the reserved regions hold the partitions of releases/%s", what, rid);
    } else if (r.status == 6 && k && refused_only && allow_unreserved) {
        ota_say("warning: the running device tree does not reserve releases/%s's regions (the plan allows it): its "
                "partitions are not in reserved memory", rid);
    } else {
        ota_die("q25tok %s failed on releases/%s (exit %d): %s", what, rid, r.status,
                two_lines(k ? bad : r.out, "no report"));
    }
    done(&r);
}

/* every prompt of the plan's forward file through generate --positions, compared */
static void forward_smoke(const ota_plan *p, const char *dir, const char *rid)
{
    if (!p->forward[0])
        return; /* a tokenizer-only plan, or a build without a forward record */
    char parts[OTA_PATH], tab[OTA_PATH], tt[OTA_PATH], hp[OTA_PATH], exp[OTA_PATH], out[OTA_PATH];
    ota_path(parts, OTA_PATH, "%s/partitions", dir);
    ota_path(tab, OTA_PATH, "%s/regions.tab", parts);
    ota_path(tt, OTA_PATH, "%s/tensors.tab", parts);
    ota_path(hp, OTA_PATH, "%s/model_hparams.txt", dir);
    const char *paths[] = {parts, tab, tt, hp};
    for (int i = 0; i < 4; i++)
        ota_no_link(paths[i]);
    for (int i = 1; i < 4; i++)
        ota_no_fifo(paths[i]);
    if (strcmp(rid, p->release) || !ota_is_file(tab) || !ota_is_file(tt) || !ota_is_file(hp)) {
        ota_say("smoke: releases/%s is not the plan's release with its tensor table and hyperparameters: forward "
                "pass not checked", rid);
        return;
    }
    ota_payload(p, p->forward, exp);
    ota_no_fifo(exp);
    size_t len;
    char *text = ota_read(exp, OTA_MAX_RECORD, &len);
    if (!text || strncmp(text, "q25-forward 3\n", 14))
        ota_die("smoke: %s: not a forward file this script reads", exp);
    int prompts = 0;
    for (char *line = text, *next; *line; line = next) {
        next = strchr(line, '\n');
        next = next ? (*next = 0, next + 1) : line + strlen(line);
        if (strncmp(line, "prompt ", 7))
            continue;
        char n[24], steps[24], ids[65536], extra[2];
        int ok = sscanf(line, "prompt %23s steps %23s ids %65535s %1s", n, steps, ids, extra) == 3 &&
                 ota_is_digits(n) && ota_is_digits(steps) && strspn(ids, "0123456789,") == strlen(ids) &&
                 strlen(line) < sizeof ids;
        if (!ok)
            ota_die("smoke: %s: bad prompt line '%.*s'", exp, (int)strcspn(line + 7, " "), line + 7);
        char *argv[16 + 65536 / 2] = {"q25tok", "generate", "--files", "--dump-layers", "--positions", steps, tab, tt};
        int argc = 8;
        for (char *id = strtok(ids, ","); id; id = strtok(NULL, ","))
            argv[argc++] = id;
        argv[argc] = NULL;
        ran g = run(p, argv, NULL);
        if (g.status != 0)
            ota_die("smoke: forward prompt %s: q25tok generate failed (exit %d): %s", n, g.status, two_lines(g.err, ""));
        const char *tmp = getenv("TMPDIR");
        ota_path(out, OTA_PATH, "%s/q25-ota-dump.XXXXXX", tmp && *tmp == '/' ? tmp : "/tmp");
        int fd = mkstemp(out); /* O_EXCL: a new file of ours */
        if (fd < 0 || write(fd, g.out, g.len) != (ssize_t)g.len || close(fd) != 0)
            ota_die("smoke: cannot create a temporary file");
        char *cargv[] = {"q25tok", "compare", exp, n, out, NULL};
        ran c = run(p, cargv, NULL);
        unlink(out);
        done(&g);
        size_t cl = strlen(c.out);
        c.out = realloc(c.out, cl + strlen(c.err) + 1); /* its report, as 2>&1 gave it */
        if (!c.out)
            ota_die("out of memory");
        strcpy(c.out + cl, c.err);
        c.len = strlen(c.out);
        if (c.status == 0 && c.len)
            ota_say("smoke: forward prompt %s: %s", n, two_lines(c.out, ""));
        else if (c.status == 11)
            ota_die("smoke: forward prompt %s %s", n, two_lines(c.out, ""));
        else if (c.status)
            ota_die("smoke: forward prompt %s: %s", n, two_lines(c.out, "no report"));
        done(&c);
        prompts++;
    }
    free(text);
    if (!prompts)
        ota_die("smoke: %s: no prompt in the forward file", exp);
    ota_say("smoke: the forward pass agrees with the host's on %d prompt(s) (q25tok generate --files)", prompts);
}

void ota_smoke(const char *payload)
{
    ota_plan p;
    ota_load_plan(payload, &p);
    char rid[17], dir[OTA_PATH], image[OTA_PATH], src[OTA_PATH];
    ota_current(&p, rid);
    ota_path(dir, OTA_PATH, "%s/releases/%s", p.base, rid);
    if (ota_verify_release(dir, 0) != 0)
        ota_die("smoke: a file of the current release fails its sha256");
    ota_pick_q25tok(&p); /* the image's (never the release's: the install dir is not root's alone) */
    ota_path(image, OTA_PATH, "%s/%s", dir, p.image);
    ota_no_link(image);
    ota_no_fifo(image);
    char *info[] = {"q25tok", "info", image, NULL};
    ran r = run(&p, info, NULL);
    fputs(r.err, stderr);
    done(&r);
    if (r.status)
        ota_die("smoke: q25tok info failed on %s", image);
    for (size_t i = 0; i < p.nsmokes; i++) {
        ota_payload(&p, p.smokes[i].name, src);
        char *enc[] = {"q25tok", "encode", p.smokes[i].special ? "--special" : image, p.smokes[i].special ? image : NULL,
                       NULL};
        ran e = run(&p, enc, src);
        char *got = e.out, *w = e.out; /* runs of blanks and newlines as one comma, none at the ends */
        for (char *c = e.out; *c; c++)
            if (*c == ' ' || *c == '\n') {
                if (w != got && w[-1] != ',')
                    *w++ = ',';
            } else {
                *w++ = *c;
            }
        if (w != got && w[-1] == ',')
            w--;
        *w = 0;
        fputs(e.err, stderr);
        if (e.status || strcmp(got, p.smokes[i].ids))
            ota_die("smoke: %s: board ids differ from the host's", p.smokes[i].name);
        done(&e);
    }
    ota_regions(&p, "verify", dir, p.allow_unreserved); /* the reserved regions hold its partitions */
    forward_smoke(&p, dir, rid); /* and they compute what the host computed */
    ota_say("smoke test passed on releases/%s", rid);
}
