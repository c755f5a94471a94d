/*
 * q25tok ota: release.json and the board's state file (ota.h), read strictly and written byte
 * for byte as q25deploy writes them: json_bytes (json.dumps indent=2, sort_keys, a final
 * newline) and, for a release's id, json_digest (json.dumps sort_keys, ", " and ": ").
 *
 * Every value is a lower-case hex digest, a plain relative path, a plain name, digits or null,
 * so no JSON string ever needs an escape: anything else is refused, never unescaped.
 *
 * The state is read as q25-ota.sh's state_valid (its awk program) read it, line by line, and
 * refused where it refused. Stricter than that awk where it let through what q25deploy never
 * writes: a missing final newline, "files"/"forward": "{," (a comma after an opening brace), a
 * size or prompts count with leading zeros or beyond 64 bits, a deployed_at longer than 39
 * characters or an image longer than OTA_REL - 1 (what ota_state_rec holds).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include "ota.h"
#include "q25tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -- plain values ------------------------------------------------------------------------------ */
static int hexn(const char *s, size_t n, size_t want) { /* exactly WANT lower-case hex digits */
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return n == want && n > 0;
}
static int alnum(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
static int namech(char c) { return alnum(c) || c == '.' || c == '_' || c == '+' || c == '-'; }
/* [A-Za-z0-9][A-Za-z0-9._+-]*, at most 128 (q25-ota.sh's is_name, the awk's plain) */
static int plain(const char *s, size_t n) {
    if (n == 0 || n > 128 || !alnum(s[0]))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!namech(s[i]))
            return 0;
    return 1;
}
/* parts [A-Za-z0-9_][A-Za-z0-9._+-]* joined by '/', never "release.json" (is_rel, the awk's rel) */
static int relpath(const char *s, size_t n) {
    if (n == 0 || (n == 12 && !memcmp(s, "release.json", 12)))
        return 0;
    for (size_t i = 0; i < n; i++) /* a part's first character, or one after it ('/' not last) */
        if (i == 0 || s[i - 1] == '/' ? !(alnum(s[i]) || s[i] == '_') : !(namech(s[i]) || (s[i] == '/' && i + 1 < n)))
            return 0;
    return 1;
}
static int stamp(const char *s, size_t n) { /* deployed_at: [0-9TZ:.+-]* */
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || strchr("TZ:.+-", s[i])) || !s[i])
            return 0;
    return 1;
}
/* a JSON number as json.dumps writes an int >= 0 that fits in 64 bits */
static int uint64_of(const char *s, size_t n, uint64_t *v) {
    uint64_t x = 0;
    if (n == 0 || (n > 1 && s[0] == '0'))
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9' || x > (UINT64_MAX - (uint64_t)(s[i] - '0')) / 10)
            return 0;
        x = x * 10 + (uint64_t)(s[i] - '0');
    }
    *v = x;
    return 1;
}

/* -- a growing text ---------------------------------------------------------------------------- */
typedef struct buf {
    char *p;
    size_t n, cap;
    int oom;
} buf;
static void put(buf *b, const char *s, size_t n) {
    if (!b->oom && n + 1 > b->cap - b->n) {
        size_t cap = n < SIZE_MAX / 4 - b->n ? 2 * (b->n + n + 1) : 0;
        char *p = cap ? realloc(b->p, cap) : NULL;
        if (p)
            b->p = p, b->cap = cap;
        else
            b->oom = 1;
    }
    if (b->oom)
        return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
static void puts_(buf *b, const char *s) { put(b, s, strlen(s)); }
static void putq(buf *b, const char *pre, const char *s, const char *post) { /* PRE"S"POST */
    puts_(b, pre), put(b, "\"", 1), puts_(b, s), put(b, "\"", 1), puts_(b, post);
}
static void putnq(buf *b, const char *pre, const char *s, const char *post) { /* null for "" */
    if (*s)
        putq(b, pre, s, post);
    else
        puts_(b, pre), puts_(b, "null"), puts_(b, post);
}
static void putu(buf *b, uint64_t v) {
    char d[24], *p = d + sizeof d;
    do
        *--p = (char)('0' + v % 10);
    while (v /= 10);
    put(b, p, (size_t)(d + sizeof d - p));
}
static char *done(buf *b, size_t *len) { /* the text, or NULL when out of memory */
    if (b->oom)
        free(b->p);
    else
        *len = b->n;
    return b->oom ? NULL : b->p;
}

/* -- release.json ------------------------------------------------------------------------------ */
/* every value of r as q25-ota.sh's release_files and json_checked take it, its paths in order
 * (none twice): 0, or 1 with why */
static int release_bad(const ota_release *r, char *why, size_t whylen) {
    char none[1];
    if (!why || !whylen)
        why = none, whylen = sizeof none;
    if (r->nfiles > OTA_MAX_FILES)
        return snprintf(why, whylen, "too many files"), 1;
    for (size_t i = 0; i < r->nfiles; i++) {
        const ota_file *f = &r->files[i];
        size_t n = strnlen(f->path, OTA_REL);
        if (!hexn(f->sha256, strnlen(f->sha256, 65), 64) || n == OTA_REL || !relpath(f->path, n))
            return snprintf(why, whylen, "bad file entry '%.*s'", (int)(n < 200 ? n : 200), f->path), 1;
        if (i && strcmp(r->files[i - 1].path, f->path) >= 0)
            return snprintf(why, whylen, "'%.200s' twice or out of order", f->path), 1;
    }
    const char *bad = NULL;
    if (*r->model_sha256 && !hexn(r->model_sha256, strnlen(r->model_sha256, 65), 64))
        bad = "model_sha256";
    else if (*r->target && !plain(r->target, strnlen(r->target, sizeof r->target)))
        bad = "target";
    else if (!hexn(r->vocab_fingerprint, strnlen(r->vocab_fingerprint, 65), 64))
        bad = "vocab_fingerprint";
    return bad ? snprintf(why, whylen, "bad %s", bad), 1 : 0;
}

/* json_digest of the body without "id", its first 16 hex digits; -1 when out of memory */
static int release_id(const ota_release *r, char id[17]) {
    buf b = {0};
    puts_(&b, "{\"files\": [");
    for (size_t i = 0; i < r->nfiles; i++) {
        putq(&b, i ? ", {\"path\": " : "{\"path\": ", r->files[i].path, ", \"sha256\": ");
        putq(&b, "", r->files[i].sha256, ", \"size\": ");
        putu(&b, r->files[i].size), puts_(&b, "}");
    }
    puts_(&b, "], \"format\": \"q25deploy-release/1\", ");
    putnq(&b, "\"model_sha256\": ", r->model_sha256, ", ");
    putnq(&b, "\"target\": ", r->target, ", ");
    putq(&b, "\"vocab_fingerprint\": ", r->vocab_fingerprint, "}");
    if (b.oom)
        return free(b.p), -1;
    uint8_t d[32];
    q25_sha256(b.p, b.n, d);
    free(b.p);
    for (int i = 0; i < 8; i++)
        id[2 * i] = "0123456789abcdef"[d[i] >> 4], id[2 * i + 1] = "0123456789abcdef"[d[i] & 15];
    id[16] = 0;
    return 0;
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const ota_file *)a)->path, ((const ota_file *)b)->path);
}

char *ota_release_render(ota_release *r, size_t *len) {
    if (r->nfiles)
        qsort(r->files, r->nfiles, sizeof *r->files, by_path);
    if (release_bad(r, NULL, 0) || release_id(r, r->id))
        return NULL;
    buf b = {0};
    puts_(&b, r->nfiles ? "{\n  \"files\": [\n" : "{\n  \"files\": [],\n");
    for (size_t i = 0; i < r->nfiles; i++) {
        putq(&b, "    {\n      \"path\": ", r->files[i].path, ",\n");
        putq(&b, "      \"sha256\": ", r->files[i].sha256, ",\n      \"size\": ");
        putu(&b, r->files[i].size), puts_(&b, i + 1 < r->nfiles ? "\n    },\n" : "\n    }\n  ],\n");
    }
    puts_(&b, "  \"format\": \"q25deploy-release/1\",\n");
    putq(&b, "  \"id\": ", r->id, ",\n");
    putnq(&b, "  \"model_sha256\": ", r->model_sha256, ",\n");
    putnq(&b, "  \"target\": ", r->target, ",\n");
    putq(&b, "  \"vocab_fingerprint\": ", r->vocab_fingerprint, "\n}\n");
    return done(&b, len);
}

/* reading: a cursor through the exact text, one literal or one value at a time */
typedef struct cur {
    const char *p, *e;
    unsigned line;
} cur;
static int lit(cur *c, const char *s) {
    size_t n = strlen(s);
    if ((size_t)(c->e - c->p) < n || memcmp(c->p, s, n))
        return 0;
    for (size_t i = 0; i < n; i++)
        c->line += s[i] == '\n';
    c->p += n;
    return 1;
}
static int qstr(cur *c, char *out, size_t cap) { /* "..." of printable ASCII, no '"' or '\\' */
    const char *p = c->p;
    if (p == c->e || *p++ != '"')
        return 0;
    size_t n = 0;
    for (; p < c->e && *p != '"'; p++, n++)
        if (*p < 0x21 || *p > 0x7e || *p == '\\' || n + 1 >= cap)
            return 0;
    if (p == c->e)
        return 0;
    memcpy(out, c->p + 1, n);
    out[n] = 0;
    c->p = p + 1;
    return 1;
}
static int nqstr(cur *c, char *out, size_t cap) { return lit(c, "null") ? (*out = 0, 1) : qstr(c, out, cap); }
static int num(cur *c, uint64_t *v) {
    const char *p = c->p;
    while (p < c->e && *p >= '0' && *p <= '9')
        p++;
    if (!uint64_of(c->p, (size_t)(p - c->p), v))
        return 0;
    c->p = p;
    return 1;
}

int ota_release_parse(const char *text, size_t len, ota_release *r, char *why, size_t whylen) {
    cur c = {text, text + len, 1};
    char msg[256] = "";
    size_t cap = 0;
    memset(r, 0, sizeof *r);
    int ok = len <= OTA_MAX_RECORD && lit(&c, "{\n  \"files\": [");
    if (ok && !lit(&c, "],\n")) { /* (json_bytes writes no file as "[]") */
        ok = lit(&c, "\n");
        for (int more = ok; more; more = lit(&c, ",\n")) {
            if (r->nfiles == cap) {
                ota_file *f = cap < OTA_MAX_FILES ? realloc(r->files, (cap ? 2 * cap : 64) * sizeof *f) : NULL;
                if (!f) {
                    snprintf(msg, sizeof msg, "%s", cap < OTA_MAX_FILES ? "out of memory" : "too many files");
                    ok = 0;
                    break;
                }
                r->files = f, cap = cap ? 2 * cap : 64;
            }
            ota_file *f = &r->files[r->nfiles++];
            if (!(ok = lit(&c, "    {\n      \"path\": ") && qstr(&c, f->path, sizeof f->path) &&
                       lit(&c, ",\n      \"sha256\": ") && qstr(&c, f->sha256, sizeof f->sha256) &&
                       lit(&c, ",\n      \"size\": ") && num(&c, &f->size) && lit(&c, "\n    }")))
                break;
        }
        ok = ok && lit(&c, "\n  ],\n");
    }
    ok = ok && lit(&c, "  \"format\": \"q25deploy-release/1\",\n  \"id\": ") && qstr(&c, r->id, sizeof r->id) &&
         lit(&c, ",\n  \"model_sha256\": ") && nqstr(&c, r->model_sha256, sizeof r->model_sha256) &&
         lit(&c, ",\n  \"target\": ") && nqstr(&c, r->target, sizeof r->target) &&
         lit(&c, ",\n  \"vocab_fingerprint\": ") && qstr(&c, r->vocab_fingerprint, sizeof r->vocab_fingerprint) &&
         lit(&c, "\n}\n") && c.p == c.e;
    if (!ok && !*msg)
        snprintf(msg, sizeof msg, "line %u is not release.json as q25deploy writes it", c.line);
    else if (ok && !release_bad(r, msg, sizeof msg)) {
        /* the id is not recomputed here: where it matters it is compared with the plan's or the
         * directory's name (ota_steps.c), as q25-ota.sh did */
        if (!hexn(r->id, strlen(r->id), 16))
            snprintf(msg, sizeof msg, "bad id");
        else
            return 0;
    }
    if (why && whylen)
        snprintf(why, whylen, "%s", msg);
    ota_release_free(r);
    return -1;
}

void ota_release_free(ota_release *r) {
    free(r->files);
    memset(r, 0, sizeof *r);
}

/* -- the state file ---------------------------------------------------------------------------- */
/* q25-ota.sh's state_valid, line by line: L[i] beyond the last line is "", as in awk */
typedef struct sv {
    const char *p;
    size_t n;
} sv;
typedef struct rd {
    sv *L;
    size_t nl, i;
    int comma;
    sv *keys; /* one record's file paths, or the release ids: none twice */
    size_t nkeys, kcap;
} rd;
static int key(rd *d, sv k) {
    if (d->nkeys == d->kcap) {
        sv *p = realloc(d->keys, (d->kcap ? 2 * d->kcap : 64) * sizeof *p);
        if (!p)
            return 0;
        d->keys = p, d->kcap = d->kcap ? 2 * d->kcap : 64;
    }
    d->keys[d->nkeys++] = k;
    return 1;
}
static int svcmp(const void *a, const void *b) {
    const sv *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->n < y->n ? x->n : y->n);
    return c ? c : (x->n > y->n) - (x->n < y->n);
}
static int distinct(rd *d) { /* the keys taken since the last call, none twice */
    qsort(d->keys, d->nkeys, sizeof *d->keys, svcmp);
    for (size_t i = 1; i < d->nkeys; i++)
        if (!svcmp(&d->keys[i - 1], &d->keys[i]))
            return 0;
    d->nkeys = 0;
    return 1;
}
static sv L(const rd *d, size_t i) { return i < d->nl ? d->L[i] : (sv){"", 0}; }
static int eq(sv v, const char *s) { return v.n == strlen(s) && !memcmp(v.p, s, v.n); }
static int quoted(sv v) { return v.n >= 2 && v.p[0] == '"' && v.p[v.n - 1] == '"'; }
static sv inner(sv v) { return (sv){v.p + 1, v.n - 2}; }
static int hexq(sv v, size_t n) { return quoted(v) && hexn(v.p + 1, v.n - 2, n); }
static int relq(sv v) { return quoted(v) && relpath(v.p + 1, v.n - 2); }
static int at(const rd *d, const char *ind, const char *key) { /* line i is IND"KEY": ... */
    sv l = L(d, d->i);
    size_t a = strlen(ind), k = strlen(key);
    return l.n >= a + k + 4 && !memcmp(l.p, ind, a) && l.p[a] == '"' && !memcmp(l.p + a + 1, key, k) &&
           !memcmp(l.p + a + 1 + k, "\": ", 3);
}
static int take(rd *d, const char *ind, const char *key, sv *v) { /* its value (d->comma: it had one) */
    if (!at(d, ind, key))
        return 0;
    sv l = L(d, d->i++);
    size_t skip = strlen(ind) + strlen(key) + 4;
    *v = (sv){l.p + skip, l.n - skip};
    d->comma = v->n && v->p[v->n - 1] == ',';
    v->n -= (size_t)d->comma;
    return 1;
}
static int copy(sv v, char *out, size_t cap) {
    if (v.n >= cap)
        return 0;
    memcpy(out, v.p, v.n);
    out[v.n] = 0;
    return 1;
}
/* "KEY": [ "SHA256", SIZE ] lines of one record, at least one; no path twice */
static int state_files(rd *d) {
    sv k;
    do {
        k = L(d, d->i++);
        if (k.n < 12 || memcmp(k.p, "        \"", 9) || memcmp(k.p + k.n - 4, "\": [", 4))
            return 0;
        if (!relq(k = (sv){k.p + 8, k.n - 11}) || !key(d, k))
            return 0;
        sv s = L(d, d->i++), z = L(d, d->i++);
        uint64_t size;
        if (s.n != 77 || memcmp(s.p, "          ", 10) || s.p[76] != ',' || !hexq((sv){s.p + 10, 66}, 64) ||
            z.n < 11 || memcmp(z.p, "          ", 10) || !uint64_of(z.p + 10, z.n - 10, &size))
            return 0;
        k = L(d, d->i++);
        if (!eq(k, "        ],") && !eq(k, "        ]"))
            return 0;
    } while (eq(k, "        ],"));
    return distinct(d) && eq(L(d, d->i++), "      },");
}
static int state_forward(rd *d) { /* key, prompts, optional release */
    sv v;
    uint64_t n;
    if (!take(d, "        ", "key", &v) || !hexq(v, 64) || !d->comma || !take(d, "        ", "prompts", &v) ||
        !uint64_of(v.p, v.n, &n) || (d->comma && (!take(d, "        ", "release", &v) || !hexq(v, 16) || d->comma)))
        return 0;
    return eq(L(d, d->i++), "      },");
}
/* one release's record into rec: 1 and *more (another follows), or 0 */
static int state_record(rd *d, ota_state_rec *rec, int *more) {
    const char *I = "      ";
    sv v;
    if (at(d, I, "deployed_at") && (!take(d, I, "deployed_at", &v) || !quoted(v) || !stamp(v.p + 1, v.n - 2) ||
                                    !d->comma || !copy(inner(v), rec->deployed_at, sizeof rec->deployed_at)))
        return 0;
    if (!take(d, I, "files", &v) || (eq(v, "{") && !d->comma ? !state_files(d) : !eq(v, "{}") || !d->comma))
        return 0;
    if (at(d, I, "forward") && (!take(d, I, "forward", &v) || !eq(v, "{") || d->comma || !state_forward(d)))
        return 0;
    if (at(d, I, "image") && (!take(d, I, "image", &v) || !(eq(v, "null") || relq(v)) || !d->comma ||
                              (!eq(v, "null") && !copy(inner(v), rec->image, sizeof rec->image))))
        return 0;
    if (at(d, I, "model_sha256") && (!take(d, I, "model_sha256", &v) || !(eq(v, "null") || hexq(v, 64)) || !d->comma))
        return 0;
    if (at(d, I, "target") &&
        (!take(d, I, "target", &v) || !(eq(v, "null") || (quoted(v) && plain(v.p + 1, v.n - 2))) || !d->comma))
        return 0;
    if (!take(d, I, "vocab_fingerprint", &v) || !hexq(v, 64) || d->comma)
        return 0;
    copy(inner(v), rec->vocab_fingerprint, sizeof rec->vocab_fingerprint);
    v = L(d, d->i++);
    *more = eq(v, "    },");
    return *more || eq(v, "    }");
}
static int top_id(sv v, char out[17]) { /* current, previous: null or a release id */
    *out = 0;
    return eq(v, "null") || (hexq(v, 16) && copy(inner(v), out, 17));
}

int ota_state_parse(const char *text, size_t len, ota_state *s) {
    rd d = {0};
    sv v;
    size_t cap = 0;
    int more = 0;
    memset(s, 0, sizeof *s);
    if (len == 0 || len > OTA_MAX_RECORD || text[len - 1] != '\n' || memchr(text, 0, len))
        return -1;
    for (size_t i = 0; i < len; i++)
        d.nl += text[i] == '\n';
    if (!(d.L = malloc(d.nl * sizeof *d.L)))
        return -1;
    for (const char *p = text, *e; p < text + len; p = e + 1)
        e = memchr(p, '\n', (size_t)(text + len - p)), d.L[d.i++] = (sv){p, (size_t)(e - p)};
    d.i = 0;
    if (!eq(L(&d, d.i++), "{") || !take(&d, "  ", "current", &v) || !top_id(v, s->current) || !d.comma ||
        !take(&d, "  ", "format", &v) || !eq(v, "\"q25deploy-board-state/1\"") || !d.comma ||
        !take(&d, "  ", "previous", &v) || !top_id(v, s->previous) || !d.comma || !take(&d, "  ", "releases", &v) ||
        d.comma)
        goto bad;
    if (eq(v, "{")) {
        do {
            v = L(&d, d.i++);
            if (v.n < 8 || memcmp(v.p, "    ", 4) || memcmp(v.p + v.n - 3, ": {", 3) ||
                !hexq(v = (sv){v.p + 4, v.n - 7}, 16))
                goto bad;
            if (s->nrecs == cap) {
                ota_state_rec *r = realloc(s->recs, (cap = cap ? 2 * cap : 4) * sizeof *r);
                if (!r)
                    goto bad;
                s->recs = r;
            }
            ota_state_rec *rec = memset(&s->recs[s->nrecs++], 0, sizeof *rec);
            if (!copy(inner(v), rec->id, sizeof rec->id) || !state_record(&d, rec, &more))
                goto bad;
        } while (more);
        for (size_t j = 0; j < s->nrecs; j++) /* (state_files has done with the keys) */
            if (!key(&d, (sv){s->recs[j].id, 16}))
                goto bad;
        if (!distinct(&d) || !eq(L(&d, d.i++), "  }"))
            goto bad;
    } else if (!eq(v, "{}"))
        goto bad;
    if (!eq(L(&d, d.i++), "}") || d.i < d.nl || (*s->current && !ota_state_find(s, s->current)) ||
        (*s->previous && !ota_state_find(s, s->previous)))
        goto bad;
    free(d.L), free(d.keys);
    return 0;
bad:
    free(d.L), free(d.keys);
    ota_state_free(s);
    return -1;
}

const ota_state_rec *ota_state_find(const ota_state *s, const char *id) {
    for (size_t i = 0; i < s->nrecs; i++)
        if (!strcmp(s->recs[i].id, id))
            return &s->recs[i];
    return NULL;
}

void ota_state_free(ota_state *s) {
    free(s->recs);
    memset(s, 0, sizeof *s);
}

/* what state_valid (and so ota_state_parse) would refuse is never written */
static int record_ok(const ota_release *r, const char *at, const char *image) {
    size_t a = strlen(at), i = strlen(image);
    return !release_bad(r, NULL, 0) && hexn(r->id, strnlen(r->id, 17), 16) && stamp(at, a) &&
           a < sizeof ((ota_state_rec *)0)->deployed_at && relpath(image, i) && i < OTA_REL;
}
/* one record of q25-ota.sh's state_record (json_bytes of deployer.py's _record) */
static void put_record(buf *b, const ota_release *r, const char *at, const char *image, int last) {
    putq(b, "    ", r->id, ": {\n");
    putq(b, "      \"deployed_at\": ", at, ",\n");
    puts_(b, r->nfiles ? "      \"files\": {\n" : "      \"files\": {},\n");
    for (size_t i = 0; i < r->nfiles; i++) {
        putq(b, "        ", r->files[i].path, ": [\n");
        putq(b, "          ", r->files[i].sha256, ",\n          ");
        putu(b, r->files[i].size), puts_(b, i + 1 < r->nfiles ? "\n        ],\n" : "\n        ]\n      },\n");
    }
    putq(b, "      \"image\": ", image, ",\n");
    putnq(b, "      \"model_sha256\": ", r->model_sha256, ",\n");
    putnq(b, "      \"target\": ", r->target, ",\n");
    putq(b, "      \"vocab_fingerprint\": ", r->vocab_fingerprint, last ? "\n    }\n" : "\n    },\n");
}

char *ota_state_render(const ota_release *nr, const char *now, const char *image, const ota_release *pr,
                       const char *prev_at, const char *prev_image, size_t *len) {
    if (!*prev_at)
        prev_at = now;
    if (!*prev_image)
        prev_image = "tokenizer.q25tokrt";
    if (!record_ok(nr, now, image) || (pr && !record_ok(pr, prev_at, prev_image)))
        return NULL;
    buf b = {0};
    putq(&b, "{\n  \"current\": ", nr->id, ",\n  \"format\": \"q25deploy-board-state/1\",\n");
    putnq(&b, "  \"previous\": ", pr ? pr->id : "", ",\n  \"releases\": {\n");
    int cmp = pr ? strcmp(pr->id, nr->id) : 0; /* the records in id order, one when both are one */
    if (pr && cmp < 0)
        put_record(&b, pr, prev_at, prev_image, 0);
    put_record(&b, nr, now, image, !(pr && cmp > 0));
    if (pr && cmp > 0)
        put_record(&b, pr, prev_at, prev_image, 1);
    puts_(&b, "  }\n}\n");
    return done(&b, len);
}
