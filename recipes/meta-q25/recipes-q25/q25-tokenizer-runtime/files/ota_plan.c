/*
 * The payload's plan, q25-plan: a line-based file q25deploy package writes (q25deploy/ota/plan.py)
 * with every value already validated there, checked again here before anything is derived from
 * it (ota.h). Lines: "q25-ota-plan 1", then KEY VALUE (mode, release, fingerprint, install,
 * q25tok, image, device_tree, memory, unreserved; the first of a key counts) and the list lines
 * file SHA256 SIZE NAME REL, smoke NAME SPECIAL IDS, region NODE BASE SIZE, forward NAME.
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

const char *ota_root = "";

void ota_path(char *out, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(out, n, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= n)
        ota_die("a path is too long (%.60s...)", out);
}

static int in(char c, const char *set)
{
    return c && strchr(set, c) != NULL;
}

#define ALNUM "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"

int ota_is_hex(const char *s, size_t n)
{
    size_t i = 0;
    for (; s[i]; i++)
        if (!in(s[i], "0123456789abcdef"))
            return 0;
    return i == n;
}

int ota_is_rid(const char *s)
{
    return ota_is_hex(s, 16);
}

int ota_is_digits(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return 0;
    return 1;
}

/* [FIRST][REST]* of at most max characters, the whole of s or up to a '/' (*end) */
static int part(const char *s, const char *first, const char *rest, size_t max, const char **end)
{
    size_t i = 0;
    if (!in(s[0], first))
        return 0;
    for (i = 1; s[i] && s[i] != '/'; i++)
        if (!in(s[i], rest))
            return 0;
    *end = s + i;
    return i <= max;
}

int ota_is_name(const char *s)
{
    const char *end;
    return part(s, ALNUM, ALNUM "._+-", 128, &end) && !*end;
}

static int is_node(const char *s)
{
    const char *end;
    return part(s, ALNUM, ALNUM ",._+@-", 127, &end) && !*end;
}

int ota_is_rel(const char *s)
{
    const char *end;
    for (;;) {
        if (!part(s, ALNUM "_", ALNUM "._+-", OTA_REL, &end))
            return 0;
        if (!*end)
            return 1;
        s = end + 1;
    }
}

/* NODE BASE: ours by name and place, q25-region<N>@<BASE without leading zeros> (board/plan.py) */
static int is_region_node(const char *node, const char *base)
{
    if (strncmp(node, "q25-region", 10) != 0)
        return 0;
    const char *i = node + 10, *at = strchr(i, '@');
    if (!at || at == i || at - i > 4 || (i[0] == '0' && at - i > 1))
        return 0;
    for (const char *c = i; c < at; c++)
        if (*c < '0' || *c > '9')
            return 0;
    while (*base == '0' && base[1])
        base++;
    return strcmp(at + 1, base) == 0;
}

/* an absolute plain path outside the install dir */
static void board_path(const char *v, const char *what, const char *install)
{
    if (v[0] != '/' || !ota_is_rel(v + 1))
        ota_die("bad %s '%s' in the plan", what, v);
    size_t n = strlen(install);
    if (strncmp(v, install, n) == 0 && (v[n] == '/' || !v[n]))
        ota_die("the plan's %s is inside the install dir", v);
}

/* the fields of LINE split on blanks into f[max]; the count (max + 1 when there are more) */
static size_t fields(char *line, char **f, size_t max)
{
    size_t n = 0;
    for (char *t = strtok(line, " \t"); t; t = strtok(NULL, " \t"))
        if (n++ < max)
            f[n - 1] = t;
    return n;
}

static void *grow(void *p, size_t n, size_t elem)
{
    if ((n & (n - 1)) == 0) { /* at 0, 1, 2, 4 ...: double */
        p = realloc(p, (n ? 2 * n : 1) * elem);
        if (!p)
            ota_die("out of memory reading the plan");
    }
    return p;
}

static void copy(char *dst, size_t n, const char *src, const char *what)
{
    if (strlen(src) >= n)
        ota_die("bad %s in the plan", what);
    strcpy(dst, src);
}

static void list_line(ota_plan *p, char *key, char **f, size_t n)
{
    if (strcmp(key, "file") == 0) {
        const char *rel = n >= 5 ? f[4] : "";
        if (n != 5 || !ota_is_hex(f[1], 64) || !ota_is_digits(f[2]) || strlen(f[2]) > 19)
            ota_die("bad file line for '%s' in the plan", rel);
        if (!ota_is_rel(rel))
            ota_die("unsafe path '%s' in the plan", rel);
        if (strcmp(rel, "release.json") == 0)
            ota_die("release.json as a release file in the plan");
        if (!ota_is_name(f[3]))
            ota_die("unsafe payload name '%s' in the plan", f[3]);
        if (strcmp(f[3], "q25-plan") == 0 || strcmp(f[3], "release.json") == 0)
            ota_die("payload name '%s' in a file line", f[3]);
        if (ota_plan_has_rel(p, rel))
            ota_die("the plan lists a release path twice");
        p->files = grow(p->files, p->nfiles, sizeof *p->files);
        ota_plan_file *pf = &p->files[p->nfiles++];
        strcpy(pf->sha256, f[1]);
        pf->size = strtoull(f[2], NULL, 10);
        strcpy(pf->name, f[3]);
        strcpy(pf->rel, rel);
    } else if (strcmp(key, "smoke") == 0) {
        int ok = n == 4 && ota_is_name(f[1]) && (!strcmp(f[2], "0") || !strcmp(f[2], "1"));
        for (const char *c = ok ? f[3] : ""; *c; c++)
            ok &= (*c >= '0' && *c <= '9') || *c == ',';
        if (!ok)
            ota_die("bad smoke line '%s' in the plan", n > 1 ? f[1] : "");
        p->smokes = grow(p->smokes, p->nsmokes, sizeof *p->smokes);
        ota_smoke_line *s = &p->smokes[p->nsmokes++];
        strcpy(s->name, f[1]);
        s->special = f[2][0] == '1';
        s->ids = strdup(f[3]);
        if (!s->ids)
            ota_die("out of memory reading the plan");
    } else if (strcmp(key, "region") == 0) {
        if (n != 4 || !is_node(f[1]) || !ota_is_hex(f[2], 16) || !ota_is_hex(f[3], 16))
            ota_die("bad region line '%s' in the plan", n > 1 ? f[1] : "");
        if (!is_region_node(f[1], f[2]))
            ota_die("refusing region '%s' in the plan: not a q25deploy region (q25-region<N>@<its base>), not ours "
                    "to write", f[1]);
        p->regions = grow(p->regions, p->nregions, sizeof *p->regions);
        ota_region_line *r = &p->regions[p->nregions++];
        strcpy(r->node, f[1]);
        strcpy(r->base, f[2]);
        strcpy(r->size, f[3]);
    } else if (strcmp(key, "forward") == 0) {
        if (n != 2 || !ota_is_name(f[1]) || !strcmp(f[1], "q25-plan") || !strcmp(f[1], "release.json"))
            ota_die("bad forward line '%s' in the plan", n > 1 ? f[1] : "");
        if (p->forward[0])
            ota_die("more than one forward line in the plan");
        strcpy(p->forward, f[1]);
    }
}

void ota_load_plan(const char *dir, ota_plan *p)
{
    memset(p, 0, sizeof *p);
    copy(p->dir, sizeof p->dir, dir, "payload directory");
    ota_path(p->path, sizeof p->path, "%s/q25-plan", dir);
    ota_no_link(dir);
    ota_no_link(p->path);
    ota_own_tree(dir, "payload"); /* what root installs from: no one else's to change */
    size_t len;
    char *text = ota_read(p->path, OTA_MAX_RECORD, &len);
    if (!text)
        ota_die("%s: no plan in the payload", p->path);
    if (strlen(text) != len || strncmp(text, "q25-ota-plan 1\n", 15) != 0)
        ota_die("%s: not a plan this script reads", p->path);
    char mode[16] = "", unreserved[16] = "";
    struct { const char *key; char *dst; size_t n; } scalars[] = {
        {"mode", mode, sizeof mode}, {"release", p->release, sizeof p->release},
        {"fingerprint", p->fingerprint, sizeof p->fingerprint}, {"install", p->install, sizeof p->install},
        {"q25tok", p->q25tok, sizeof p->q25tok}, {"image", p->image, sizeof p->image},
        {"device_tree", p->dt, sizeof p->dt}, {"memory", p->mem, sizeof p->mem},
        {"unreserved", unreserved, sizeof unreserved},
    };
    for (char *line = text + 15, *next; *line; line = next) {
        next = strchr(line, '\n');
        next = next ? (*next = 0, next + 1) : line + strlen(line);
        char *sp = strchr(line, ' ');
        if (!sp)
            continue;
        for (size_t k = 0; k < sizeof scalars / sizeof *scalars; k++)
            if ((size_t)(sp - line) == strlen(scalars[k].key) && !strncmp(line, scalars[k].key, sp - line) &&
                !scalars[k].dst[0])
                snprintf(scalars[k].dst, scalars[k].n, "%s", sp + 1);
        char *f[6] = {NULL};
        size_t n = fields(line, f, 6);
        if (n)
            list_line(p, f[0], f, n);
    }
    free(text);
    if (strcmp(mode, "full") && strcmp(mode, "tokenizer"))
        ota_die("bad mode '%s' in the plan", mode);
    p->full = mode[0] == 'f';
    if (p->install[0] != '/')
        ota_die("bad install dir in the plan");
    if (!ota_is_rid(p->release))
        ota_die("bad release id in the plan");
    if (!ota_is_hex(p->fingerprint, 64))
        ota_die("bad vocabulary fingerprint in the plan");
    if (!ota_is_rel(p->install + 1))
        ota_die("unsafe path '%s' in the plan", p->install + 1);
    if (!ota_is_rel(p->image))
        ota_die("unsafe path '%s' in the plan", p->image);
    /* q25tok: the image's, a plain absolute path outside the install dir, named q25tok (a plain
     * path to /bin/rm would still run `rm ota ...` as root) */
    if (p->q25tok[0] != '/' || !ota_is_rel(p->q25tok + 1))
        ota_die("bad q25tok path '%s' in the plan", p->q25tok);
    board_path(p->q25tok, "q25tok", p->install);
    size_t qn = strlen(p->q25tok);
    if (qn < 7 || strcmp(p->q25tok + qn - 7, "/q25tok"))
        ota_die("the plan's q25tok %s is not a file named q25tok", p->q25tok);
    if (!p->dt[0])
        strcpy(p->dt, "/proc/device-tree");
    if (!p->mem[0])
        strcpy(p->mem, "/dev/mem");
    board_path(p->dt, "board path", p->install);
    board_path(p->mem, "board path", p->install);
    if (!unreserved[0])
        strcpy(unreserved, "refuse");
    if (strcmp(unreserved, "allow") && strcmp(unreserved, "refuse"))
        ota_die("bad unreserved '%s' in the plan", unreserved);
    p->allow_unreserved = unreserved[0] == 'a';
    if (!p->full && p->nregions)
        ota_die("region lines in a tokenizer-only plan");
    if (!p->full && p->forward[0])
        ota_die("a forward line in a tokenizer-only plan");
    ota_path(p->q25tok_live, OTA_PATH, "%s%s", ota_root, p->q25tok);
    ota_path(p->dt_live, OTA_PATH, "%s%s", ota_root, p->dt);
    ota_path(p->mem_live, OTA_PATH, "%s%s", ota_root, p->mem);
    ota_path(p->base, OTA_PATH, "%s%s", ota_root, p->install);
    ota_path(p->ota, OTA_PATH, "%s/.q25-ota", p->base);
    ota_path(p->state, OTA_PATH, "%s/.q25deploy-state.json", p->base);
    ota_path(p->loaded, OTA_PATH, "%s/.q25deploy-loaded", p->base);
    char releases[OTA_PATH];
    ota_path(releases, OTA_PATH, "%s/releases", p->base);
    ota_no_link(releases);
    ota_no_link(p->ota);
    ota_no_link(p->state);
    ota_no_link(p->loaded);
    ota_own_tree(p->base, "install"); /* every step's first check: the tree is root's alone */
}

void ota_payload(const ota_plan *p, const char *name, char out[OTA_PATH])
{
    ota_path(out, OTA_PATH, "%s/%s", p->dir, name);
    ota_no_link(out);
    ota_meta m;
    if (!ota_lmeta(out, &m) || !S_ISREG(m.mode))
        ota_die("%s: missing from the payload", out);
}

int ota_plan_has_rel(const ota_plan *p, const char *rel)
{
    for (size_t i = 0; i < p->nfiles; i++)
        if (!strcmp(p->files[i].rel, rel))
            return 1;
    return 0;
}
