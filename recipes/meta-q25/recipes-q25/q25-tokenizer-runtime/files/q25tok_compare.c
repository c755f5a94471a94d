/*
 * The forward pass a board computed (`q25tok generate --dump-layers`) against the host's: one
 * prompt of a release's q25-forward.txt (q25deploy/ota/forward_expect.py), compared as
 * q25deploy/model/record_compare.py compares them (docs/forward.md), with the tolerances the
 * file's `tolerances` line carries (written on the host from record_compare.py's constants).
 *
 * Format 3 (`q25-forward 3`, the only one read): a prompt's ids include the forced continuation
 * and its steps are the last positions of one teacher-forced `generate --positions N` pass, so
 * a token the board takes the other way at a near tie (host margin < token_margin, or nan)
 * changes no later context: the comparison goes on (that step's logits, every later step) and
 * ends in a near-tie only when nothing else differs.
 *
 * Both texts are input (root reads them from a payload): every line is split and checked,
 * every number read from a bounded word, every count bounded, before anything is compared.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_WORDS = 160, MAX_WORD = 64, MAX_TOP = 64, MAX_LAYERS = 1024, MAX_STEPS = 4096, N_VALUES = 4 };
enum { QUOTED = 80 }; /* how much of a bad line a message quotes */

#define NORM_FLOOR 1e-30 /* record_compare.py: a state's tolerance is RTOL * max(norm, 1e-30) */

typedef struct fwd_state {
    double norm, v[N_VALUES];
    int have;
} fwd_state;

typedef struct fwd_step {
    uint32_t token;
    double margin;
    unsigned ntop, nlayers, cap;
    uint32_t top_id[MAX_TOP];
    double top_v[MAX_TOP];
    fwd_state embd, output, *layers;
} fwd_step;

typedef struct fwd_steps {
    fwd_step *s;
    unsigned n, cap;
} fwd_steps;

typedef struct words {
    const char *p[MAX_WORDS];
    size_t len[MAX_WORDS];
    unsigned n;
} words;

typedef struct report {
    char *msg;
    size_t len;
} report;

static void say(report *r, const char *fmt, ...)
{
    if (!r->len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg, r->len, fmt, ap);
    va_end(ap);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* the words of one line (no '\n' in it); 0, or -1 when it has more than MAX_WORDS */
static int split(const char *line, size_t n, words *w)
{
    w->n = 0;
    for (size_t i = 0; i < n;) {
        while (i < n && is_space(line[i]))
            i++;
        if (i == n)
            break;
        if (w->n == MAX_WORDS)
            return -1;
        size_t start = i;
        while (i < n && !is_space(line[i]))
            i++;
        w->p[w->n] = line + start;
        w->len[w->n++] = i - start;
    }
    return 0;
}

static int is(const words *w, unsigned i, const char *word)
{
    return i < w->n && w->len[i] == strlen(word) && memcmp(w->p[i], word, w->len[i]) == 0;
}

static int lower_is(const char *s, const char *word)
{
    for (; *s && *word; s++, word++)
        if ((*s >= 'A' && *s <= 'Z' ? *s - 'A' + 'a' : *s) != *word)
            return 0;
    return *s == *word;
}

static size_t digits(const char *s)
{
    size_t n = 0;
    while (s[n] >= '0' && s[n] <= '9')
        n++;
    return n;
}

/* a decimal float, or nan/inf/infinity (any case), with an optional sign: Python's float()
 * of what generate and forward_expect.py print (no hex, no spaces) */
static int number(const words *w, unsigned i, double *out)
{
    char b[MAX_WORD + 1];
    if (i >= w->n || w->len[i] == 0 || w->len[i] > MAX_WORD)
        return -1;
    memcpy(b, w->p[i], w->len[i]);
    b[w->len[i]] = '\0';
    const char *s = b + (b[0] == '+' || b[0] == '-');
    if (!(lower_is(s, "nan") || lower_is(s, "inf") || lower_is(s, "infinity"))) {
        size_t whole = digits(s), frac = 0;
        s += whole;
        if (*s == '.')
            frac = digits(++s), s += frac;
        if (whole + frac == 0)
            return -1;
        if (*s == 'e' || *s == 'E') {
            s += 1 + (s[1] == '+' || s[1] == '-');
            size_t e = digits(s);
            if (e == 0)
                return -1;
            s += e;
        }
        if (*s)
            return -1;
    }
    *out = strtod(b, NULL);
    return 0;
}

/* an unsigned decimal of at most 32 bits, digits only */
static int whole(const words *w, unsigned i, uint32_t *out)
{
    if (i >= w->n || w->len[i] == 0 || w->len[i] > 10)
        return -1;
    uint64_t v = 0;
    for (size_t k = 0; k < w->len[i]; k++) {
        char c = w->p[i][k];
        if (c < '0' || c > '9')
            return -1;
        v = v * 10 + (uint64_t)(c - '0');
    }
    if (v > 0xFFFFFFFFu)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

static void free_steps(fwd_steps *st)
{
    for (unsigned i = 0; i < st->n; i++)
        free(st->s[i].layers);
    free(st->s);
    st->s = NULL;
    st->n = st->cap = 0;
}

static int state(const words *w, unsigned at, fwd_state *x)
{
    if (number(w, at, &x->norm))
        return -1;
    for (unsigned j = 0; j < N_VALUES; j++)
        if (number(w, at + 2 + j, &x->v[j]))
            return -1;
    x->have = 1;
    return 0;
}

/* items (n of them, elem bytes each, room for *cap) with room for one more: the same pointer,
 * or the array reallocated to twice its capacity (first when empty); NULL when out of memory,
 * items and *cap left as they were */
static void *room(void *items, unsigned *cap, unsigned n, size_t elem, unsigned first)
{
    if (n < *cap)
        return items;
    unsigned grown = *cap ? *cap * 2 : first;
    void *p = realloc(items, (size_t)grown * elem);
    if (p)
        *cap = grown;
    return p;
}

/* one line of a dump into st: 0, 1 for a line that is not one (why in *why), -1 out of memory */
static int dump_line(const words *w, fwd_steps *st, const char **why)
{
    if (is(w, 0, "step") && w->n == 8 && is(w, 2, "pos") && is(w, 4, "token") && is(w, 6, "margin")) {
        uint32_t pos, token;
        double margin;
        if (whole(w, 3, &pos) || whole(w, 5, &token) || number(w, 7, &margin))
            return *why = "a bad step line", 1;
        if (st->n == MAX_STEPS)
            return *why = "more steps than q25tok generates", 1;
        fwd_step *grown = room(st->s, &st->cap, st->n, sizeof *st->s, 16);
        if (!grown)
            return -1;
        st->s = grown;
        fwd_step *s = &st->s[st->n++];
        memset(s, 0, sizeof *s);
        s->token = token, s->margin = margin;
        return 0;
    }
    if (st->n == 0)
        return *why = "a line before the first step", 1;
    fwd_step *s = &st->s[st->n - 1];
    if (is(w, 0, "top") && w->n % 2 == 1) {
        if ((w->n - 1) / 2 > MAX_TOP)
            return *why = "more top logits than q25tok prints", 1;
        for (unsigned j = 1; j < w->n; j += 2)
            if (whole(w, j, &s->top_id[j / 2]) || number(w, j + 1, &s->top_v[j / 2]))
                return *why = "a bad top line", 1;
        s->ntop = (w->n - 1) / 2;
        return 0;
    }
    if ((is(w, 0, "embd") || is(w, 0, "output")) && w->n == 8 && is(w, 1, "norm") && is(w, 3, "values"))
        return state(w, 2, is(w, 0, "embd") ? &s->embd : &s->output) ? (*why = "a bad number", 1) : 0;
    uint32_t layer;
    if (is(w, 0, "layer") && w->n == 9 && is(w, 2, "norm") && is(w, 4, "values") && !whole(w, 1, &layer) &&
        layer == s->nlayers) {
        if (s->nlayers == MAX_LAYERS)
            return *why = "more layers than a model has", 1;
        fwd_state *grown = room(s->layers, &s->cap, s->nlayers, sizeof *s->layers, 32);
        if (!grown)
            return -1;
        s->layers = grown;
        return state(w, 3, &s->layers[s->nlayers++]) ? (*why = "a bad number", 1) : 0;
    }
    return *why = "an unexpected line", 1;
}

/* the next line of [*p, end): its start and length, *p past its '\n' */
static const char *next_line(const char **p, const char *end, size_t *n)
{
    const char *line = *p;
    const char *nl = memchr(line, '\n', (size_t)(end - line));
    *n = (size_t)((nl ? nl : end) - line);
    *p = nl ? nl + 1 : end;
    return line;
}

/* the dump lines of [p, end) (lines until a `prompt` line when stop_at_prompt) into st;
 * Q25_FORWARD_AGREE, bad (with why in r, the line numbered from first_line) or NO_MEMORY */
static int parse_dump(const char *p, const char *end, unsigned first_line, int stop_at_prompt, fwd_steps *st,
                      int bad, const char *what, report *r)
{
    words w;
    for (unsigned ln = first_line; p < end; ln++) {
        size_t n;
        const char *line = next_line(&p, end, &n);
        const char *why = "a line of too many words";
        int rc = split(line, n, &w) ? 1 : 0;
        if (!rc && w.n == 0)
            continue;
        if (!rc && stop_at_prompt && is(&w, 0, "prompt"))
            break;
        if (!rc)
            rc = dump_line(&w, st, &why);
        if (rc < 0)
            return Q25_FORWARD_NO_MEMORY;
        if (rc) {
            say(r, "%s line %u: %s: '%.*s'", what, ln, why, (int)(n < QUOTED ? n : QUOTED), line);
            return bad;
        }
    }
    return Q25_FORWARD_AGREE;
}

typedef struct tolerances {
    double state_rtol, logit_atol, token_margin;
} tolerances;

static int tolerance(const words *w, unsigned i, const char *name, double *out)
{
    return is(w, i, name) && !number(w, i + 1, out) && isfinite(*out) && *out > 0 && *out < 1 ? 0 : -1;
}

/* q25-forward.txt: its tolerances and prompt `want`'s steps into st */
static int parse_expected(const char *text, size_t size, uint32_t want, tolerances *tol, fwd_steps *st, report *r)
{
    const char *p = text, *end = text + size;
    words w;
    size_t n;
    const char *line = next_line(&p, end, &n);
    if (split(line, n, &w) || w.n != 2 || !is(&w, 0, "q25-forward") || !is(&w, 1, "3")) {
        say(r, "the forward file's first line is not 'q25-forward 3'");
        return Q25_FORWARD_BAD_EXPECTED;
    }
    int have_tol = 0, found = 0;
    uint32_t steps = 0;
    for (unsigned ln = 2; p < end; ln++) {
        line = next_line(&p, end, &n);
        int too_many = split(line, n, &w);
        if (!too_many && w.n == 0)
            continue;
        const char *why = NULL;
        uint32_t id, s;
        if (!too_many && is(&w, 0, "tolerances")) {
            if (have_tol || found || w.n != 7 || tolerance(&w, 1, "state_rtol", &tol->state_rtol) ||
                tolerance(&w, 3, "logit_atol", &tol->logit_atol) || tolerance(&w, 5, "token_margin", &tol->token_margin))
                why = "a bad tolerances line (once, before the prompts: state_rtol X logit_atol Y token_margin Z)";
            have_tol = 1;
        } else if (!too_many && is(&w, 0, "prompt")) {
            if (!have_tol)
                why = "a prompt before the tolerances line";
            else if (w.n != 6 || whole(&w, 1, &id) || !is(&w, 2, "steps") || whole(&w, 3, &s) || !is(&w, 4, "ids"))
                why = "a bad prompt line";
            else if (id == want && found)
                why = "the prompt a second time";
            else if (id == want) {
                found = 1, steps = s;
                int rc = parse_dump(p, end, ln + 1, 1, st, Q25_FORWARD_BAD_EXPECTED, "the forward file's", r);
                if (rc)
                    return rc;
            }
        } else if (!have_tol)
            why = "a line before the tolerances line";
        /* else a step line of a prompt: the wanted one's were parsed above, the others are not read */
        if (why) {
            say(r, "the forward file's line %u: %s: '%.*s'", ln, why, (int)(n < QUOTED ? n : QUOTED), line);
            return Q25_FORWARD_BAD_EXPECTED;
        }
    }
    if (!found || st->n == 0) {
        say(r, "the forward file has no steps for prompt %u", want);
        return Q25_FORWARD_BAD_EXPECTED;
    }
    if (st->n != steps) {
        say(r, "the forward file has %u steps for prompt %u, its prompt line says %u", st->n, want, steps);
        return Q25_FORWARD_BAD_EXPECTED;
    }
    for (unsigned s = 0; s < st->n; s++)
        if (!st->s[s].embd.have || !st->s[s].output.have) {
            say(r, "the forward file's step %u of prompt %u has no %s line", s, want, st->s[s].embd.have ? "output" : "embd");
            return Q25_FORWARD_BAD_EXPECTED;
        }
    return Q25_FORWARD_AGREE;
}

static double ab(double x)
{
    return x < 0 ? -x : x;
}

/* "%.9g" as Python formats it: nan, inf and -inf for what is not finite */
static const char *g9(char b[32], double x)
{
    if (isnan(x))
        return "nan";
    if (isinf(x))
        return x < 0 ? "-inf" : "inf";
    snprintf(b, 32, "%.9g", x);
    return b;
}

/* what differs in one state (record_compare._state_differs), into r; 0 when nothing does */
static int state_differs(const fwd_state *got, const fwd_state *want, double rtol, report *r)
{
    char a[32], b[32];
    double scale = want->norm;
    if (!isfinite(scale))
        return say(r, "the host reference is not finite here, board norm %s", g9(a, got->norm)), 1;
    if (!isfinite(got->norm))
        return say(r, "the board state is not finite (norm %s), host %s", g9(a, got->norm), g9(b, scale)), 1;
    double tol = rtol * (scale > NORM_FLOOR ? scale : NORM_FLOOR);
    if (!(ab(got->norm - scale) <= tol))
        return say(r, "norm %s, host %s", g9(a, got->norm), g9(b, scale)), 1;
    for (unsigned i = 0; i < N_VALUES; i++) {
        if (!isfinite(want->v[i]))
            return say(r, "value #%u of the host reference is not finite, board %s", i, g9(a, got->v[i])), 1;
        if (!(ab(got->v[i] - want->v[i]) <= tol))
            return say(r, "value #%u %s%s, host %s", i, g9(a, got->v[i]), isfinite(got->v[i]) ? "" : " (not finite)",
                       g9(b, want->v[i])),
                   1;
    }
    return 0;
}

/* record_compare.first_difference over parsed steps. The positions are teacher-forced (every
 * step's context is the host's ids, whatever the board's argmax was), so a token that differs
 * at a near tie does not end the comparison: the first such step is remembered, and that
 * step's logits and every later step are still compared; a real difference anywhere wins. */
static int first_difference(const fwd_steps *want, const fwd_steps *got, const tolerances *t, report *r)
{
    char detail[256], a[32], b[32];
    report d = {detail, sizeof detail};
    int tie = 0;
    unsigned tie_step = 0;
    uint32_t tie_token = 0, tie_host = 0;
    double tie_margin = 0;
    if (got->n < want->n) {
        say(r, "step %u: token: the board printed %u of %u steps", got->n, got->n, want->n);
        return Q25_FORWARD_DIFFERS;
    }
    for (unsigned s = 0; s < want->n; s++) {
        const fwd_step *w = &want->s[s], *g = &got->s[s];
        if (g->nlayers != w->nlayers) {
            say(r, "step %u: layer: %u layers, host %u", s, g->nlayers, w->nlayers);
            return Q25_FORWARD_DIFFERS;
        }
        for (unsigned k = 0; k <= w->nlayers + 1; k++) {
            const fwd_state *gs = k == 0 ? &g->embd : k <= w->nlayers ? &g->layers[k - 1] : &g->output;
            const fwd_state *ws = k == 0 ? &w->embd : k <= w->nlayers ? &w->layers[k - 1] : &w->output;
            char where[32];
            if (k == 0 || k > w->nlayers)
                snprintf(where, sizeof where, "%s", k == 0 ? "embd" : "output");
            else
                snprintf(where, sizeof where, "layer %u", k - 1);
            int differs = !gs->have ? (say(&d, "missing"), 1) : state_differs(gs, ws, t->state_rtol, &d);
            if (differs) {
                say(r, "step %u: %s: %s", s, where, detail);
                return Q25_FORWARD_DIFFERS;
            }
        }
        if (g->token != w->token) {
            if (w->margin >= t->token_margin) { /* false for a nan margin: a near-tie */
                say(r, "step %u: token: %u, host %u (margin %.3g)", s, g->token, w->token, w->margin);
                return Q25_FORWARD_DIFFERS;
            }
            if (!tie)
                tie = 1, tie_step = s, tie_token = g->token, tie_host = w->token, tie_margin = w->margin;
        }
        for (unsigned j = 0; j < g->ntop && j < w->ntop; j++) {
            double gv = g->top_v[j], wv = w->top_v[j];
            if (!isfinite(wv) || !isfinite(gv)) {
                say(r, "step %u: logits: logit of %u %s, host %s: not finite", s, g->top_id[j], g9(a, gv),
                    isfinite(wv) ? g9(b, wv) : "nan");
                return Q25_FORWARD_DIFFERS;
            }
            if (g->top_id[j] != w->top_id[j] && ab(gv - wv) > t->logit_atol) {
                say(r, "step %u: logits: top id %u, host %u", s, g->top_id[j], w->top_id[j]);
                return Q25_FORWARD_DIFFERS;
            }
            if (!(ab(gv - wv) <= t->logit_atol * (ab(wv) > 1 ? ab(wv) : 1))) {
                say(r, "step %u: logits: logit of %u %s, host %s", s, g->top_id[j], g9(a, gv), g9(b, wv));
                return Q25_FORWARD_DIFFERS;
            }
        }
    }
    if (tie) {
        say(r, "near-tie at step %u: token %u, host %u (margin %s)", tie_step, tie_token, tie_host, g9(a, tie_margin));
        return Q25_FORWARD_NEAR_TIE;
    }
    return Q25_FORWARD_AGREE;
}

int q25_forward_compare(const char *expected, size_t expected_size, uint32_t prompt, const char *dump,
                        size_t dump_size, char *msg, size_t msg_size)
{
    report r = {msg, msg_size};
    say(&r, "%s", "");
    if (!expected || !dump) {
        say(&r, "no text to compare");
        return Q25_FORWARD_BAD_EXPECTED;
    }
    fwd_steps want = {0}, got = {0};
    tolerances tol;
    int rc = parse_expected(expected, expected_size, prompt, &tol, &want, &r);
    if (!rc)
        rc = parse_dump(dump, dump + dump_size, 1, 0, &got, Q25_FORWARD_BAD_DUMP, "q25tok generate's", &r);
    if (!rc)
        rc = first_difference(&want, &got, &tol, &r);
    if (rc == Q25_FORWARD_NO_MEMORY)
        say(&r, "out of memory");
    free_steps(&want);
    free_steps(&got);
    return rc;
}
