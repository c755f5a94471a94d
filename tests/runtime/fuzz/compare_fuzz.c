/*
 * libFuzzer harness for q25_forward_compare (q25tok_compare.c, what `q25tok compare` runs as
 * root over a payload's q25-forward.txt and a generate dump): the first byte picks the prompt,
 * the rest is the forward file up to the first NUL byte and the dump after it, each copied to
 * a buffer of its exact size (ASan: nothing past the text is read, no NUL is relied on).
 * Checks that the status is one of the documented ones and the message one terminated line,
 * empty exactly when the texts agree. Any sanitizer report is a finding.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "q25tok.h"

#define REQUIRE(cond)        \
    do {                     \
        if (!(cond))         \
            abort();         \
    } while (0)

static char *exact(const uint8_t *p, size_t n)
{
    char *b = malloc(n ? n : 1);
    REQUIRE(b);
    if (n)
        memcpy(b, p, n);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint32_t prompt = data[0] & 3u;
    data++, size--;
    const uint8_t *nul = memchr(data, 0, size);
    size_t elen = nul ? (size_t)(nul - data) : size / 2;
    size_t doff = nul ? elen + 1 : elen;
    char *expected = exact(data, elen), *dump = exact(data + doff, size - doff);
    char msg[512];
    int rc = q25_forward_compare(expected, elen, prompt, dump, size - doff, msg, sizeof msg);
    REQUIRE(rc >= Q25_FORWARD_AGREE && rc <= Q25_FORWARD_NO_MEMORY);
    size_t len = strnlen(msg, sizeof msg);
    REQUIRE(len < sizeof msg && !memchr(msg, '\n', len));
    REQUIRE((rc == Q25_FORWARD_AGREE) == (len == 0));
    /* a tiny message buffer is always terminated */
    char tiny[4];
    (void)q25_forward_compare(expected, elen, prompt, dump, size - doff, tiny, sizeof tiny);
    REQUIRE(strnlen(tiny, sizeof tiny) < sizeof tiny);
    free(expected);
    free(dump);
    return 0;
}
