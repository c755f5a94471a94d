/*
 * The model's hyperparameters (model_hparams.txt of a build and a release; docs/forward.md):
 * one `key=value` per line, no spaces, at most 128 bytes, `#` comments; each key once; keys
 * this reader does not know are skipped (a later writer may add some). Integers are
 * decimal, the two floats decimal text that strtof turns into the GGUF's float32. Every value
 * is bounded here, before a size is computed from it; q25_model_open then checks them against
 * the tensors' shapes.
 *
 * SPDX-License-Identifier: MIT
 */
#include "q25tok.h"

#include <stdlib.h>
#include <string.h>

enum {
    K_FORMAT, K_ARCH, K_VOCAB, K_LAYER, K_EMBD, K_FF, K_HEAD, K_HEAD_KV, K_HEAD_DIM, K_ROT, K_ROPE, K_EPS,
    K_TIED, K_CTX, N_KEYS
};

static const char *const KEYS[N_KEYS] = {
    "format", "arch",   "n_vocab",  "n_layer",        "n_embd",  "n_ff",        "n_head",
    "n_head_kv", "head_dim", "n_rot", "rope_freq_base", "rms_eps", "tied_output", "n_ctx_train",
};

#define FORMAT "q25deploy-hparams/1"
#define ARCH "qwen2"

static int parse_u32(const char *s, size_t n, uint32_t *out)
{
    uint64_t v = 0;
    if (n == 0 || n > 10)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > UINT32_MAX)
        return 0;
    *out = (uint32_t)v;
    return 1;
}

static int parse_float(const char *s, size_t n, float *out)
{
    char buf[48];
    if (n == 0 || n >= sizeof buf)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
            return 0;
        buf[i] = c;
    }
    buf[n] = 0;
    char *end;
    float v = strtof(buf, &end);
    if (end != buf + n || !(v > -3.4e38f && v < 3.4e38f)) /* NaN and inf fail both */
        return 0;
    *out = v;
    return 1;
}

static int is_text(const char *s, size_t n, const char *want)
{
    return strlen(want) == n && memcmp(s, want, n) == 0;
}

/* the bounds every consumer of the parameters relies on (sizes computed from them fit) */
static int in_bounds(const q25_model_params *p)
{
    return p->n_layer >= 1 && p->n_layer <= Q25_MAX_LAYERS && p->n_head >= 1 && p->n_head <= 1024
           && p->n_head_kv >= 1 && p->n_head_kv <= p->n_head && p->n_head % p->n_head_kv == 0
           && p->n_embd >= 2 && p->n_embd <= 65536 && p->head_dim >= 2 && p->head_dim % 2 == 0
           && (uint64_t)p->head_dim * p->n_head == p->n_embd && p->n_rot >= 2 && p->n_rot % 2 == 0
           && p->n_rot <= p->head_dim && p->n_ff >= 1 && p->n_ff <= (1u << 18) && p->n_vocab >= 1
           && p->n_vocab <= (1u << 24) && p->n_ctx_train >= 1 && p->n_ctx_train <= (1u << 24)
           && p->rope_freq_base > 1.0f && p->rope_freq_base <= 1e12f && p->rms_eps > 0.0f && p->rms_eps < 1.0f
           && p->tied_output <= 1;
}

int q25_model_params_check(const q25_model_params *p);
int q25_model_params_check(const q25_model_params *p)
{
    return p && in_bounds(p) ? Q25_OK : Q25_ERR_MODEL;
}

static int valid_key(const char *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_'))
            return 0;
    return 1;
}

int q25_model_params_parse(const char *text, size_t len, q25_model_params *out)
{
    if ((!text && len) || !out)
        return Q25_ERR_ARG;
    q25_model_params p = {0};
    unsigned seen = 0;
    size_t pos = 0;
    while (pos < len) {
        size_t end = pos;
        while (end < len && text[end] != '\n')
            end++;
        const char *line = text + pos;
        size_t n = end - pos;
        pos = end + 1;
        if (n > 128)
            return Q25_ERR_MODEL;
        if (n == 0 || line[0] == '#')
            continue;
        const char *eq = memchr(line, '=', n);
        size_t klen = eq ? (size_t)(eq - line) : 0, vlen = n - klen - 1;
        if (!eq || !valid_key(line, klen) || vlen == 0 || memchr(eq + 1, ' ', vlen) || memchr(eq + 1, '\r', vlen))
            return Q25_ERR_MODEL;
        int k = 0;
        while (k < N_KEYS && !is_text(line, klen, KEYS[k]))
            k++;
        if (k == N_KEYS)
            continue; /* a key a later writer added */
        if ((seen >> k) & 1u)
            return Q25_ERR_MODEL; /* given twice */
        seen |= 1u << k;
        const char *v = eq + 1;
        uint32_t *ints[N_KEYS] = {[K_VOCAB] = &p.n_vocab,   [K_LAYER] = &p.n_layer, [K_EMBD] = &p.n_embd,
                                  [K_FF] = &p.n_ff,         [K_HEAD] = &p.n_head,   [K_HEAD_KV] = &p.n_head_kv,
                                  [K_HEAD_DIM] = &p.head_dim, [K_ROT] = &p.n_rot,   [K_TIED] = &p.tied_output,
                                  [K_CTX] = &p.n_ctx_train};
        int ok = k == K_FORMAT ? is_text(v, vlen, FORMAT)
                 : k == K_ARCH ? is_text(v, vlen, ARCH)
                 : k == K_ROPE ? parse_float(v, vlen, &p.rope_freq_base)
                 : k == K_EPS  ? parse_float(v, vlen, &p.rms_eps)
                               : parse_u32(v, vlen, ints[k]);
        if (!ok)
            return Q25_ERR_MODEL;
    }
    if (seen != (1u << N_KEYS) - 1 || !in_bounds(&p))
        return Q25_ERR_MODEL;
    *out = p;
    return Q25_OK;
}
