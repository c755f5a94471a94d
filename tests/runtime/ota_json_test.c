/* ota_json.c's checks (tests/runtime/test_ota_json.py builds it with ota_json.c and
 * q25tok_sha256.c under ASan+UBSan):
 *   ota_json_test                        its own checks: "N passed, M failed"
 *   ota_json_test release FILE           stdout: ota_release_render of what ota_release_parse read
 *                                        (exit 0), or "refused: WHY" (exit 1)
 *   ota_json_test state FILE             stdout: "current C", "previous P", then per record
 *                                        "ID DEPLOYED_AT IMAGE VOCAB" ("-" for ""), or exit 1
 *   ota_json_test check-releases|check-states FILE...
 *                                        a line a file: "ok" or "refused[: WHY]"
 *   ota_json_test render NEW NOW IMAGE [PREV PREV_AT PREV_IMAGE]
 *                                        stdout: ota_state_render of those release.json files
 * SPDX-License-Identifier: MIT */
#include "ota.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0, got;
    char *p = malloc(cap + 1);
    while (p && (got = fread(p + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap)
            p = realloc(p, (cap *= 2) + 1);
    fclose(f);
    if (p)
        p[n] = 0, *len = n;
    return p;
}

static int load_release(const char *path, ota_release *r) {
    size_t n;
    char why[256], *t = slurp(path, &n);
    int rc = t ? ota_release_parse(t, n, r, why, sizeof why) : -1;
    if (rc)
        printf("refused: %s\n", t ? why : "unreadable");
    free(t);
    return rc;
}

static const char *dash(const char *s) { return *s ? s : "-"; }

static ota_release make(const char *const *paths, size_t n, const char *model, const char *target) {
    ota_release r;
    memset(&r, 0, sizeof r);
    r.files = n ? calloc(n, sizeof *r.files) : NULL;
    r.nfiles = n;
    for (size_t i = 0; i < n; i++) {
        snprintf(r.files[i].path, sizeof r.files[i].path, "%s", paths[i]);
        memset(r.files[i].sha256, "0123456789abcdef"[i % 16], 64);
        r.files[i].size = 1000 * i + 7;
    }
    snprintf(r.model_sha256, sizeof r.model_sha256, "%s", model);
    snprintf(r.target, sizeof r.target, "%s", target);
    memset(r.vocab_fingerprint, 'e', 64);
    return r;
}

static int round_trip(ota_release *r) { /* render, parse, render again: the same text and id */
    size_t n, m;
    char *t = ota_release_render(r, &n), why[128];
    ota_release back;
    if (!t)
        return 0;
    int ok = ota_release_parse(t, n, &back, why, sizeof why) == 0 && !strcmp(back.id, r->id) &&
             back.nfiles == r->nfiles;
    char *u = ok ? ota_release_render(&back, &m) : NULL;
    ok = ok && u && m == n && !memcmp(t, u, n);
    free(t), free(u);
    ota_release_free(&back);
    return ok;
}

static int parses(const char *text, size_t n) {
    ota_release r;
    char why[128];
    int ok = ota_release_parse(text, n, &r, why, sizeof why) == 0;
    ota_release_free(&r);
    return ok;
}

static void checks(void) {
    static const char *const paths[] = {"tokenizer.q25tokrt", "partitions/region_00.bin", "manifest.json",
                                        "partitions/regions.tab", "q25tok"};
    ota_release r = make(paths, 5, "", "zcu102");
    size_t n;
    char *t = ota_release_render(&r, &n), why[128];
    CHECK(t && !strcmp(r.files[0].path, "manifest.json") && !strcmp(r.files[4].path, "tokenizer.q25tokrt"));
    CHECK(strlen(r.id) == 16 && round_trip(&r));
    CHECK(t && parses(t, n));
    if (t) { /* a changed size with the old id: read as it is (the steps compare ids with names) */
        char *p = strstr(t, "\"size\": 7\n");
        ota_release x;
        CHECK(p != NULL);
        p[8] = '8';
        CHECK(ota_release_parse(t, n, &x, why, sizeof why) == 0);
        ota_release_free(&x);
        CHECK(ota_release_parse(t, n - 1, &x, why, sizeof why) == -1); /* no final newline */
    }
    free(t);

    ota_release e = make(NULL, 0, "", ""); /* no file: "files": [] as json_bytes writes it */
    t = ota_release_render(&e, &n);
    CHECK(t && strstr(t, "{\n  \"files\": [],\n  \"format\"") == t && round_trip(&e));
    free(t);

    static const char *const bad[][2] = {{"a", "a"}, {"release.json", "b"}, {"a/../b", "c"}, {"a/", "c"},
                                         {"/a", "c"},  {".hidden", "c"},    {"a//b", "c"},   {"a b", "c"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ota_release x = make(bad[i], 2, "", "");
        CHECK(ota_release_render(&x, &n) == NULL);
        ota_release_free(&x);
    }
    static const char *const ok_paths[] = {"_a", "a/_b", "a.b+c-d_e/f"};
    ota_release y = make(ok_paths, 3, "", "");
    CHECK(round_trip(&y));
    memcpy(y.vocab_fingerprint, "E", 1); /* upper-case hex */
    CHECK(ota_release_render(&y, &n) == NULL);
    memcpy(y.vocab_fingerprint, "e", 1);
    snprintf(y.target, sizeof y.target, "_zcu");
    CHECK(ota_release_render(&y, &n) == NULL);
    memset(y.target, 'z', 128), y.target[128] = 0;
    CHECK(round_trip(&y));
    memset(y.target, 'z', 129), y.target[129] = 0;
    CHECK(ota_release_render(&y, &n) == NULL);
    y.target[0] = 0;

    /* sizes: all of 64 bits, no more */
    y.files[0].size = UINT64_MAX;
    CHECK(round_trip(&y));
    t = ota_release_render(&y, &n);
    char *big = t ? malloc(n + 1) : NULL;
    char *at = t ? strstr(t, "18446744073709551615") : NULL;
    CHECK(at != NULL);
    if (at && big) { /* ...615 -> ...616 and the id that content would have: still refused */
        at[19] = '6';
        CHECK(!parses(t, n));
        memcpy(big, t, n);
        char *z = strstr(big, "18446744073709551616");
        memmove(z + 1, z, (size_t)(big + n - z)), z[0] = '0'; /* a leading zero */
        CHECK(!parses(big, n + 1));
    }
    free(t), free(big);

    /* many files: OTA_MAX_FILES is the most */
    ota_release m;
    memset(&m, 0, sizeof m);
    m.nfiles = OTA_MAX_FILES;
    m.files = calloc(OTA_MAX_FILES + 1, sizeof *m.files);
    for (size_t i = 0; i <= OTA_MAX_FILES; i++) {
        snprintf(m.files[i].path, sizeof m.files[i].path, "f%06zu", i);
        memset(m.files[i].sha256, 'a', 64);
    }
    memset(m.vocab_fingerprint, 'b', 64);
    CHECK(round_trip(&m));
    m.nfiles++;
    CHECK(ota_release_render(&m, &n) == NULL);
    ota_release_free(&m);

    /* the state: NEW alone, NEW and an older or newer PREV, PREV the same release */
    ota_release a = make(paths, 5, "", ""), b = make(paths + 1, 2, "", "t1");
    memset(b.model_sha256, 'c', 64);
    free(ota_release_render(&a, &n)), free(ota_release_render(&b, &n));
    ota_release *lo = strcmp(a.id, b.id) < 0 ? &a : &b, *hi = lo == &a ? &b : &a;
    const ota_release *prevs[] = {NULL, lo, hi, hi};
    const ota_release *news[] = {lo, hi, lo, hi};
    for (int k = 0; k < 4; k++) {
        ota_state s;
        t = ota_state_render(news[k], "2024-01-02T03:04:05Z", "tokenizer.q25tokrt", prevs[k], "", "", &n);
        CHECK(t && t[n - 1] == '\n' && ota_state_parse(t, n, &s) == 0);
        CHECK(!strcmp(s.current, news[k]->id) && !strcmp(s.previous, prevs[k] ? prevs[k]->id : ""));
        CHECK(s.nrecs == (size_t)(prevs[k] && prevs[k] != news[k] ? 2 : 1));
        const ota_state_rec *rec = ota_state_find(&s, news[k]->id);
        CHECK(rec && !strcmp(rec->deployed_at, "2024-01-02T03:04:05Z") && !strcmp(rec->image, "tokenizer.q25tokrt"));
        CHECK(rec && !strcmp(rec->vocab_fingerprint, news[k]->vocab_fingerprint));
        CHECK(ota_state_find(&s, "0000000000000000") == NULL);
        ota_state_free(&s);
        CHECK(t && ota_state_parse(t, n - 1, &s) == -1 && s.recs == NULL); /* no final newline */
        if (t)
            t[n / 2] = 0;
        CHECK(t && ota_state_parse(t, n, &s) == -1); /* a NUL */
        free(t);
    }
    ota_state s;
    t = ota_state_render(hi, "1", "a/tok.q25tokrt", lo, "2", "b", &n);
    CHECK(t && ota_state_parse(t, n, &s) == 0);
    const ota_state_rec *plo = ota_state_find(&s, lo->id), *phi = ota_state_find(&s, hi->id);
    CHECK(s.nrecs == 2 && plo && phi && !strcmp(plo->deployed_at, "2") && !strcmp(plo->image, "b"));
    CHECK(phi && !strcmp(phi->deployed_at, "1") && !strcmp(phi->image, "a/tok.q25tokrt"));
    ota_state_free(&s), free(t);
    CHECK(ota_state_render(hi, "1", "", lo, "", "", &n) == NULL);         /* no image */
    CHECK(ota_state_render(hi, "1", "../x", lo, "", "", &n) == NULL);     /* not a plain path */
    CHECK(ota_state_render(hi, "1", "release.json", lo, "", "", &n) == NULL);
    CHECK(ota_state_render(hi, "now", "x", lo, "", "", &n) == NULL);      /* not a time */
    CHECK(ota_state_render(hi, "1", "x", lo, "1 2", "", &n) == NULL);
    CHECK(ota_state_render(hi, "1", "x", lo, "", "a//b", &n) == NULL);
    const char *empty = "{\n  \"current\": null,\n  \"format\": \"q25deploy-board-state/1\",\n"
                        "  \"previous\": null,\n  \"releases\": {}\n}\n";
    CHECK(ota_state_parse(empty, strlen(empty), &s) == 0 && s.nrecs == 0 && !*s.current && !*s.previous);
    ota_state_free(&s);
    CHECK(ota_state_parse(empty, strlen(empty) - 1, &s) == -1);
    CHECK(ota_state_parse("", 0, &s) == -1);

    ota_release_free(&r), ota_release_free(&e), ota_release_free(&y), ota_release_free(&a), ota_release_free(&b);
}

int main(int argc, char **argv) {
    if (argc == 1) {
        checks();
        printf("%d passed, %d failed\n", passed, failed);
        return failed != 0;
    }
    size_t n;
    char *t;
    if (argc == 3 && !strcmp(argv[1], "release")) {
        ota_release r;
        if (load_release(argv[2], &r))
            return 1;
        t = ota_release_render(&r, &n);
        fwrite(t, 1, n, stdout);
        free(t), ota_release_free(&r);
        return 0;
    }
    if (argc >= 2 && (!strcmp(argv[1], "check-releases") || !strcmp(argv[1], "check-states"))) {
        for (int i = 2; i < argc; i++) { /* a line a file: "ok", or "refused" and ota_release_parse's why */
            char why[256] = "";
            int rc = -1;
            if ((t = slurp(argv[i], &n)) != NULL && argv[1][6] == 'r') {
                ota_release r;
                rc = ota_release_parse(t, n, &r, why, sizeof why);
                ota_release_free(&r);
            } else if (t) {
                ota_state s;
                rc = ota_state_parse(t, n, &s);
                ota_state_free(&s);
            }
            printf(rc ? "refused%s%s\n" : "ok\n", *why ? ": " : "", why);
            free(t);
        }
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "state")) {
        ota_state s;
        t = slurp(argv[2], &n);
        int rc = t ? ota_state_parse(t, n, &s) : -1;
        free(t);
        if (rc)
            return puts("refused"), 1;
        printf("current %s\nprevious %s\n", dash(s.current), dash(s.previous));
        for (size_t i = 0; i < s.nrecs; i++)
            printf("%s %s %s %s\n", s.recs[i].id, dash(s.recs[i].deployed_at), dash(s.recs[i].image),
                   s.recs[i].vocab_fingerprint);
        ota_state_free(&s);
        return 0;
    }
    if ((argc == 5 || argc == 8) && !strcmp(argv[1], "render")) {
        ota_release nr, pr;
        if (load_release(argv[2], &nr))
            return 1;
        if (argc == 8 && load_release(argv[5], &pr))
            return ota_release_free(&nr), 1;
        t = ota_state_render(&nr, argv[3], argv[4], argc == 8 ? &pr : NULL, argc == 8 ? argv[6] : "",
                             argc == 8 ? argv[7] : "", &n);
        if (t)
            fwrite(t, 1, n, stdout);
        else
            puts("refused");
        free(t), ota_release_free(&nr);
        if (argc == 8)
            ota_release_free(&pr);
        return t ? 0 : 1;
    }
    fprintf(stderr, "usage: ota_json_test [release FILE | state FILE | render NEW NOW IMAGE [PREV AT IMAGE]]\n");
    return 2;
}
