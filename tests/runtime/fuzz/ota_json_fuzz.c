/*
 * libFuzzer harness for ota_json.c (what `q25tok ota` reads as root: a release.json and the
 * board's state file). Byte 0 bit 0 picks the parser, the rest is the file, copied to a buffer
 * of its exact size (ASan: nothing past it is read). Checks: a release.json that parses renders
 * back byte for byte when its id is its content's (else the render differs in the id alone) and
 * the render parses again; a state that parses has its current and previous among its records.
 * Any sanitizer report or failed check is a finding.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ota.h"

#define REQUIRE(cond)        \
    do {                     \
        if (!(cond))         \
            abort();         \
    } while (0)

/* ota_json.c's callers' error paths; it calls none of them */
int ota_say_fd = 2;
uid_t ota_me;
char ota_who[32], ota_own[48];
void ota_die(const char *fmt, ...)
{
    (void)fmt;
    abort();
}

/* the first `pat` in text[0, n) (text has no NUL: strstr would read past its end) */
static const char *find(const char *text, size_t n, const char *pat)
{
    const size_t m = strlen(pat);
    for (size_t i = 0; i + m <= n; i++)
        if (!memcmp(text + i, pat, m))
            return text + i;
    return NULL;
}

static void release(const char *text, size_t n)
{
    ota_release r, again;
    char why[256];
    if (ota_release_parse(text, n, &r, why, sizeof why) != 0) {
        REQUIRE(why[0] && r.files == NULL);
        return;
    }
    char id[17];
    memcpy(id, r.id, sizeof id);
    size_t len;
    char *out = ota_release_render(&r, &len);
    REQUIRE(out && len == n);
    const char *at = find(text, n, "\n  \"id\": \"");
    REQUIRE(at);
    size_t off = (size_t)(at - text) + 10;
    REQUIRE(!memcmp(out, text, off) && !memcmp(out + off + 16, text + off + 16, n - off - 16));
    REQUIRE(strcmp(id, r.id) != 0 || !memcmp(out, text, n));
    REQUIRE(ota_release_parse(out, len, &again, why, sizeof why) == 0 && again.nfiles == r.nfiles);
    ota_release_free(&again);
    ota_release_free(&r);
    free(out);
}

static void state(const char *text, size_t n)
{
    ota_state s;
    memset(&s, 0, sizeof s);
    if (ota_state_parse(text, n, &s) != 0)
        return;
    REQUIRE(!s.current[0] || ota_state_find(&s, s.current));
    REQUIRE(!s.previous[0] || ota_state_find(&s, s.previous));
    for (size_t i = 0; i < s.nrecs; i++)
        REQUIRE(strlen(s.recs[i].id) == 16 && strlen(s.recs[i].vocab_fingerprint) == 64);
    ota_state_free(&s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char *text = malloc(size - 1 ? size - 1 : 1);
    REQUIRE(text);
    memcpy(text, data + 1, size - 1);
    if (data[0] & 1)
        state(text, size - 1);
    else
        release(text, size - 1);
    free(text);
    return 0;
}
