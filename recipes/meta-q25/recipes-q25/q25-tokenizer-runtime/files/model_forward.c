/*
 * Qwen2.5's forward pass in float32, as llama.cpp's `qwen2` graph computes it (docs/forward.md):
 *
 *   x = token_embd[id]
 *   per layer:  h = rms_norm(x) * attn_norm
 *               q, k, v = Wq h + bq, Wk h + bk, Wv h + bv; RoPE (NEOX: pairs i, i + d/2) on q, k
 *               x = x + Wo softmax(q k^T / sqrt(d)) v     (causal, grouped-query: n_head / n_head_kv)
 *               h = rms_norm(x) * ffn_norm
 *               x = x + W_down (silu(W_gate h) * W_up h)
 *   logits = output (rms_norm(x) * output_norm)           (output = token_embd when tied)
 *
 * Weights are read as the board must read Device memory: whole blocks of a few rows at a time
 * copied by q25_region_read (aligned volatile loads) into a cached buffer, dequantised one row
 * at a time by q25_dequantize, and multiplied with every position of the batch while the row is
 * in the cache (on aarch64, a row times a single position is q25_row_dot straight from the
 * cached blocks: chunk_rows). A Q4_K, Q5_0, Q6_K or Q8_0 matrix is llama.cpp's integer product
 * instead (q25tok_qrow.c): the batch's vectors quantised to int8 once per matmul, each row
 * unpacked once into its quants and scales, then summed in int32 per position. Memory is the caller's workspace, bounded by q25_model_workspace:
 * no weight matrix is ever dequantised whole. Built with -ffp-contract=off (no fused
 * multiply-add here; the aarch64 build's NEON row dots in q25tok_rowdot.c use them, and so
 * differ from the host's by summation order only). It calls libm (-lm) and POSIX threads (-pthread), so it is not one
 * of the q25tok_*.c files that tools and tests link without them.
 *
 * Threads (n_threads > 1 at q25_model_open): the chunks are still fetched by the calling thread
 * alone (Device-memory rules, one reader), into two buffers in turn: a chunk's rows are split
 * into n_threads contiguous ranges, the pool's n_threads - 1 workers start on theirs, and the
 * caller fetches the next chunk before it takes the first range; each with
 * its own dequantised-row buffer, writing disjoint outputs. A row's arithmetic (q25_dequantize,
 * then dot, in the same order; or q25_row_dot) does not depend on who computes it: the results are bit for bit
 * those of one thread. The workers are started at open and joined at q25_model_close; one
 * mutex and two condition variables hand each chunk over (no thread is spawned per matmul).
 *
 * SPDX-License-Identifier: MIT
 */
#define _POSIX_C_SOURCE 200809L
#include "q25tok.h"

#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#if defined(__GNUC__)
#define HOLDS_A_MAPPING __attribute__((noinline))
#else
#define HOLDS_A_MAPPING
#endif

/* bytes of blocks copied out of a region at once: each chunk is one hand-over to the pool, so
 * few enough of them (docs/runtime.md), and two still fit an A53 cluster's L2 */
enum { RAW_CHUNK = 256 << 10 };

struct q25_layer_weights {
    q25_tensor attn_norm, wq, bq, wk, bk, wv, bv, wo, ffn_norm, gate, up, down;
};

int q25_model_params_check(const q25_model_params *p); /* q25tok_params.c */

/* ---- the thread pool (in the workspace when n_threads > 1) ----------------------------- */
/* one chunk of one matmul: rows [0, nr) of raw, row r being output r0 + r */
typedef struct job {
    uint32_t type, n;
    const uint8_t *raw;
    uint64_t row_bytes, in, out, r0, nr;
    const float *x, *bias;
    float *y;
    const int8_t *aq; /* x quantised (the row's activation format), or NULL: float32 products */
    const float *ad;
    const int32_t *as;
    size_t row_cap;
} job;

struct q25_pool {
    pthread_mutex_t mu;
    pthread_cond_t go, done;  /* go: a new job (or stop) for the workers; done: pending hit 0 */
    uint64_t gen;             /* bumped for every job handed over */
    uint32_t n_threads, pending, stop, started;
    job j;
    atomic_uint_fast64_t next; /* the job's next row not yet taken (share_rows) */
    int status[Q25_MAX_THREADS];
    float *rows[Q25_MAX_THREADS]; /* rows[0] = m->row, the caller's */
    pthread_t tid[Q25_MAX_THREADS];
    struct worker {
        struct q25_pool *pool;
        uint32_t index;
    } workers[Q25_MAX_THREADS];
};

/* ---- sizes --------------------------------------------------------------------------- */
typedef struct layout {
    uint64_t layers, kv, x, gate, scores, row, raw, raw_next, pool, rows, aq, ad, total;
} layout;

static uint64_t align64(uint64_t n) { return (n + 63) & ~(uint64_t)63; }

/* every count is bounded by q25_model_params_check, n_ctx and n_batch by 2^24: no product
 * below overflows 64 bits (the largest is 2 * 512 * 2^24 * 65536 * 4 < 2^63) */
static int plan(const q25_model_params *p, uint32_t n_ctx, uint32_t n_batch, uint32_t n_threads, layout *l)
{
    if (q25_model_params_check(p) != Q25_OK || n_ctx < 1 || n_ctx > p->n_ctx_train || n_batch < 1
        || n_batch > n_ctx || n_threads < 1 || n_threads > Q25_MAX_THREADS)
        return 0;
    uint64_t kv_dim = (uint64_t)p->head_dim * p->n_head_kv, wide = p->n_ff > p->n_embd ? p->n_ff : p->n_embd;
    l->layers = align64((uint64_t)p->n_layer * sizeof(q25_layer_weights));
    l->kv = align64((uint64_t)p->n_layer * n_ctx * kv_dim * sizeof(float));
    l->x = align64((uint64_t)n_batch * p->n_embd * sizeof(float));
    l->gate = align64((uint64_t)n_batch * p->n_ff * sizeof(float));
    l->scores = align64((uint64_t)n_ctx * sizeof(float));
    l->row = align64(wide * sizeof(float) > q25_qrow_size(wide) ? wide * sizeof(float) : q25_qrow_size(wide));
    l->raw = align64(wide * 4 > RAW_CHUNK ? wide * 4 : RAW_CHUNK); /* one F32 row at least */
    l->raw_next = n_threads > 1 ? l->raw : 0;
    l->pool = n_threads > 1 ? align64(sizeof(struct q25_pool)) : 0;
    l->rows = (uint64_t)(n_threads - 1) * l->row; /* the workers' dequantised rows */
    l->aq = align64((uint64_t)n_batch * wide);          /* int8 activations */
    l->ad = align64((uint64_t)n_batch * (wide / 32) * 4); /* their scales, and their sums */
    l->total = l->layers + 2 * l->kv + 4 * l->x + 2 * l->gate + l->scores + 2 * l->row + l->raw + l->raw_next + l->pool
               + l->rows + l->aq + 2 * l->ad + 64;
    return l->total <= SIZE_MAX;
}

size_t q25_model_workspace(const q25_model_params *p, uint32_t n_ctx, uint32_t n_batch, uint32_t n_threads)
{
    layout l;
    return plan(p, n_ctx, n_batch, n_threads, &l) ? (size_t)l.total : 0;
}

/* ---- opening: every tensor found and checked against the parameters ------------------ */
static int find(const q25_model *m, const char *name, uint64_t ne0, uint64_t ne1, q25_tensor *t,
                char missing[Q25_TENSOR_NAME_MAX])
{
    int st = q25_tensor_find(m->w.table, m->w.table_len, name, t);
    if (st == Q25_ERR_NOT_FOUND && missing) {
        size_t n = strlen(name);
        memcpy(missing, name, n < Q25_TENSOR_NAME_MAX ? n + 1 : Q25_TENSOR_NAME_MAX);
        missing[Q25_TENSOR_NAME_MAX - 1] = 0;
    }
    if (st != Q25_OK)
        return st;
    uint32_t block_elems;
    if (q25_ggml_block(t->type, &block_elems, NULL) != Q25_OK)
        return Q25_ERR_UNSUPPORTED;
    const q25_region *r = t->region < m->w.n_regions ? &m->w.regions[t->region] : NULL;
    uint64_t want;
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1
        || q25_ggml_bytes(t->type, ne0 * ne1, &want) != Q25_OK || t->bytes != want)
        return Q25_ERR_MODEL; /* not the shape the parameters give */
    if (!r || t->offset > r->file_size || t->bytes > r->file_size - t->offset || r->file_size > r->size
        || !m->w.mapped[t->region])
        return Q25_ERR_TABLE; /* outside its region's partition */
    return Q25_OK;
}

static int pool_start(q25_model *m, struct q25_pool *p, uint32_t n_threads, float *rows, uint64_t row_stride);

int q25_model_open(q25_model *m, const q25_model_params *p, const q25_weights *w, uint32_t n_ctx,
                   uint32_t n_batch, uint32_t n_threads, void *workspace, size_t size,
                   char missing[Q25_TENSOR_NAME_MAX])
{
    layout l;
    if (!m || !p || !w || !w->regions || !w->mapped || (!w->table && w->table_len) || !workspace || n_threads < 1
        || n_threads > Q25_MAX_THREADS)
        return Q25_ERR_ARG;
    if (!plan(p, n_ctx, n_batch, n_threads, &l))
        return Q25_ERR_MODEL;
    if (size < l.total)
        return Q25_ERR_ARG;
    memset(m, 0, sizeof *m);
    m->hp = *p;
    m->w = *w;
    m->n_ctx = n_ctx;
    m->n_batch = n_batch;
    uint8_t *b = (uint8_t *)(((uintptr_t)workspace + 63) & ~(uintptr_t)63);
    m->layers = (q25_layer_weights *)b, b += l.layers;
    m->k_cache = (float *)b, b += l.kv;
    m->v_cache = (float *)b, b += l.kv;
    m->x = (float *)b, b += l.x;
    m->xn = (float *)b, b += l.x;
    m->q = (float *)b, b += l.x;
    m->att = (float *)b, b += l.x;
    m->gate = (float *)b, b += l.gate;
    m->up = (float *)b, b += l.gate;
    m->scores = (float *)b, b += l.scores;
    m->row = (float *)b, b += l.row;
    m->vec = (float *)b, b += l.row;
    m->raw = b, b += l.raw;
    m->raw_next = l.raw_next ? b : NULL, b += l.raw_next;
    m->raw_cap = (size_t)l.raw;
    m->row_cap = (size_t)l.row;
    m->aq = (int8_t *)b, b += l.aq;
    m->ad = (float *)b, b += l.ad;
    m->as = (int32_t *)b, b += l.ad;
    m->n_threads = n_threads;
    struct q25_pool *pool = n_threads > 1 ? (struct q25_pool *)b : NULL;
    b += l.pool;
    float *rows = (float *)b; /* n_threads - 1 rows of l.row bytes */

    const uint64_t e = p->n_embd, kv = (uint64_t)p->head_dim * p->n_head_kv, ff = p->n_ff;
    int st = find(m, "token_embd.weight", e, p->n_vocab, &m->embd, missing);
    if (st == Q25_OK)
        st = find(m, "output_norm.weight", e, 1, &m->out_norm, missing);
    if (st == Q25_OK) {
        st = find(m, "output.weight", e, p->n_vocab, &m->output, p->tied_output ? NULL : missing);
        if (p->tied_output && st == Q25_ERR_NOT_FOUND) {
            m->output = m->embd;
            st = Q25_OK;
        } else if (p->tied_output && st == Q25_OK)
            st = Q25_ERR_MODEL; /* tied, yet a separate output matrix: the parameters are not this model's */
    }
    for (uint32_t i = 0; st == Q25_OK && i < p->n_layer; i++) {
        q25_layer_weights *L = &m->layers[i];
        struct {
            const char *suffix;
            uint64_t ne0, ne1;
            q25_tensor *t;
        } want[] = {
            {"attn_norm.weight", e, 1, &L->attn_norm}, {"attn_q.weight", e, e, &L->wq},
            {"attn_q.bias", e, 1, &L->bq},             {"attn_k.weight", e, kv, &L->wk},
            {"attn_k.bias", kv, 1, &L->bk},            {"attn_v.weight", e, kv, &L->wv},
            {"attn_v.bias", kv, 1, &L->bv},            {"attn_output.weight", e, e, &L->wo},
            {"ffn_norm.weight", e, 1, &L->ffn_norm},   {"ffn_gate.weight", e, ff, &L->gate},
            {"ffn_up.weight", e, ff, &L->up},          {"ffn_down.weight", ff, e, &L->down},
        };
        for (size_t k = 0; st == Q25_OK && k < sizeof want / sizeof want[0]; k++) {
            char name[Q25_TENSOR_NAME_MAX];
            snprintf(name, sizeof name, "blk.%u.%s", (unsigned)i, want[k].suffix);
            st = find(m, name, want[k].ne0, want[k].ne1, want[k].t, missing);
        }
    }
    if (st == Q25_OK && pool)
        st = pool_start(m, pool, n_threads, rows, l.row / sizeof(float));
    if (st != Q25_OK)
        m->layers = NULL; /* not open: q25_model_eval refuses it, q25_model_close has nothing to do */
    return st;
}

/* ---- reading weights ----------------------------------------------------------------- */
/* The one function that touches a mapping: blocks [first, first + count) of t into dst (one
 * of the raw chunks) through q25_region_read (no mem* or str* call here:
 * tests/runtime/test_region_access.py) */
HOLDS_A_MAPPING static int fetch_into(const q25_model *m, const q25_tensor *t, uint64_t first, uint64_t count,
                                      uint8_t *dst)
{
    uint64_t off, bytes;
    if (q25_tensor_blocks(t, first, count, &off, &bytes) != Q25_OK || bytes > m->raw_cap)
        return Q25_ERR_ARG;
    return q25_region_read(&m->w.regions[t->region], m->w.mapped[t->region], off, dst, (size_t)bytes);
}

static int fetch(const q25_model *m, const q25_tensor *t, uint64_t first, uint64_t count)
{
    return fetch_into(m, t, first, count, m->raw);
}

/* a whole (small) tensor, dequantised: norms and biases, at most n_embd values */
static int load_vec(q25_model *m, const q25_tensor *t, float *dst)
{
    uint32_t be, bb;
    if (q25_ggml_block(t->type, &be, &bb) != Q25_OK || fetch(m, t, 0, t->bytes / bb) != Q25_OK)
        return Q25_ERR_ARG;
    return q25_dequantize(t->type, m->raw, (size_t)t->n_elements, dst);
}

/* eight partial sums: the compiler may keep them in vector registers without reassociating */
static float dot(const float *restrict a, const float *restrict b, size_t n)
{
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, tail = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++)
            s[k] += a[i + k] * b[i + k];
    for (; i < n; i++)
        tail += a[i] * b[i];
    return (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) + tail;
}

/* rows [a, b) of a fetched chunk: each dequantised into row, then dotted with every vector.
 * On aarch64 (NEON) the dot is q25_dot_f32, and a row dotted with a single vector is
 * q25_row_dot straight from its blocks (no float row) where the type allows: the same bits as
 * q25_dot_f32 of the dequantised row, so a batch of one and a batch of many agree. */
#if defined(__aarch64__) && defined(__ARM_NEON)
#define ROW_DOT 1
#define ROW_DOT_F32 q25_dot_f32
#else
#define ROW_DOT 0
#define ROW_DOT_F32 dot
#endif
static int chunk_rows(const job *c, uint64_t a, uint64_t b, float *row)
{
    const size_t nb = (size_t)c->in / 32;
    for (uint64_t r = a; r < b; r++) {
        const uint8_t *src = c->raw + r * c->row_bytes;
        const float bias = c->bias ? c->bias[c->r0 + r] : 0.0f;
        if (c->aq) { /* integer products: the row unpacked once, times every quantised vector */
            q25_qrow qr;
            if (q25_qrow_unpack(c->type, src, (size_t)c->in, row, c->row_cap, &qr) != Q25_OK)
                return Q25_ERR_ARG;
            for (uint32_t j = 0; j < c->n; j++) {
                const float v = q25_qrow_dot(&qr, c->aq + (size_t)j * c->in, c->ad + (size_t)j * nb, c->as + (size_t)j * nb);
                c->y[(size_t)j * c->out + c->r0 + r] = c->bias ? v + bias : v;
            }
            continue;
        }
        if (ROW_DOT && c->n == 1) {
            float v;
            const int st = q25_row_dot(c->type, src, (size_t)c->in, c->x, &v);
            if (st == Q25_OK) {
                c->y[c->r0 + r] = c->bias ? v + bias : v;
                continue;
            }
            if (st != Q25_ERR_UNSUPPORTED)
                return Q25_ERR_ARG;
        }
        if (q25_dequantize(c->type, src, (size_t)c->in, row) != Q25_OK)
            return Q25_ERR_ARG;
        for (uint32_t j = 0; j < c->n; j++) {
            float v = ROW_DOT_F32(row, c->x + (size_t)j * c->in, (size_t)c->in);
            c->y[(size_t)j * c->out + c->r0 + r] = c->bias ? v + bias : v;
        }
    }
    return Q25_OK;
}

/* the chunk's rows, GRAIN at a time, to whichever thread is free: the caller joins once it has
 * fetched the next chunk, so no thread waits for another's fixed share. Each row's outputs
 * are the same whoever computes them. */
enum { GRAIN = 16 };
static int share_rows(struct q25_pool *p, const job *c, float *row)
{
    for (;;) {
        const uint64_t a = atomic_fetch_add_explicit(&p->next, GRAIN, memory_order_relaxed);
        if (a >= c->nr)
            return Q25_OK;
        const int st = chunk_rows(c, a, c->nr - a < GRAIN ? c->nr : a + GRAIN, row);
        if (st != Q25_OK)
            return st;
    }
}

static void *pool_worker(void *arg)
{
    struct worker *wk = arg;
    struct q25_pool *p = wk->pool;
    const uint32_t i = wk->index;
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->stop)
            break;
        seen = p->gen;
        const job c = p->j;
        pthread_mutex_unlock(&p->mu);
        const int st = share_rows(p, &c, p->rows[i]);
        pthread_mutex_lock(&p->mu);
        p->status[i] = st;
        if (--p->pending == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* stops and joins the workers started so far, and frees the pool's primitives */
static void pool_stop(struct q25_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (uint32_t i = 1; i <= p->started; i++)
        pthread_join(p->tid[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->go);
    pthread_mutex_destroy(&p->mu);
}

/* n_threads - 1 workers, with every signal blocked (signals go to the caller's thread) */
static int pool_start(q25_model *m, struct q25_pool *p, uint32_t n_threads, float *rows, uint64_t row_stride)
{
    p->n_threads = n_threads;
    p->gen = 0;
    p->pending = p->stop = p->started = 0;
    atomic_init(&p->next, 0);
    p->rows[0] = m->row;
    for (uint32_t i = 1; i < n_threads; i++) {
        p->rows[i] = rows + (size_t)(i - 1) * row_stride;
        p->workers[i].pool = p;
        p->workers[i].index = i;
    }
    if (pthread_mutex_init(&p->mu, NULL) != 0)
        return Q25_ERR_THREADS;
    if (pthread_cond_init(&p->go, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        return Q25_ERR_THREADS;
    }
    if (pthread_cond_init(&p->done, NULL) != 0) {
        pthread_cond_destroy(&p->go);
        pthread_mutex_destroy(&p->mu);
        return Q25_ERR_THREADS;
    }
    sigset_t all, old;
    sigfillset(&all);
    const int masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    int st = Q25_OK;
    for (uint32_t i = 1; st == Q25_OK && i < n_threads; i++) {
        if (pthread_create(&p->tid[i], NULL, pool_worker, &p->workers[i]) != 0)
            st = Q25_ERR_THREADS;
        else
            p->started = i;
    }
    if (masked)
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (st != Q25_OK)
        pool_stop(p);
    else
        m->pool = p;
    return st;
}

void q25_model_close(q25_model *m)
{
    if (!m)
        return;
    if (m->pool)
        pool_stop(m->pool);
    m->pool = NULL;
    m->layers = NULL;
}

/* the chunk a matmul fetches after the current one */
typedef struct {
    const q25_tensor *t;
    uint64_t first, count; /* blocks; count 0: none (the last chunk) */
    uint8_t *dst;
} prefetch;

/* 0, or Q25_ERR_ARG (what a failed fetch is everywhere here) */
static int fetch_next(const q25_model *m, const prefetch *next)
{
    return !next->count || fetch_into(m, next->t, next->first, next->count, next->dst) == Q25_OK ? Q25_OK
                                                                                             : Q25_ERR_ARG;
}

/* one fetched chunk, then the next one fetched: by the caller alone (the chunk computed first:
 * `next` may be the same buffer), or shared among the pool's threads while the caller fetches
 * `next` (into the other buffer) before it takes rows too */
static int run_chunk(q25_model *m, const job *c, const prefetch *next)
{
    struct q25_pool *p = m->pool;
    if (!p) {
        const int st = chunk_rows(c, 0, c->nr, m->row);
        return st == Q25_OK ? fetch_next(m, next) : st;
    }
    pthread_mutex_lock(&p->mu);
    p->j = *c;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed); /* published by the mutex */
    p->pending = p->n_threads - 1;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    int st = fetch_next(m, next); /* on failure the workers are still waited for */
    if (st == Q25_OK)
        st = share_rows(p, c, m->row);
    pthread_mutex_lock(&p->mu);
    while (p->pending)
        pthread_cond_wait(&p->done, &p->mu);
    for (uint32_t i = 1; i < p->n_threads; i++)
        st = st == Q25_OK ? p->status[i] : st;
    pthread_mutex_unlock(&p->mu);
    return st;
}

/* y[j][r] = row r of t . x[j] (+ bias[r]) for the n vectors of x (t->ne[0] each): the
 * rows come out of the region a chunk at a time (by this thread: fetch) and are dequantised
 * one at a time, by this thread or split among the pool's. same_x: x has not changed since the
 * previous matmul (q, k, v; gate, up), whose int8 copy of x is used again where it has the
 * format this matrix wants. */
static int matmul(q25_model *m, const q25_tensor *t, const float *x, uint32_t n, float *y, const float *bias,
                  int same_x)
{
    uint32_t be, bb;
    if (q25_ggml_block(t->type, &be, &bb) != Q25_OK)
        return Q25_ERR_ARG;
    const uint64_t in = t->ne[0], out = t->ne[1], row_blocks = in / be, row_bytes = row_blocks * bb;
    const uint64_t per = m->raw_cap / row_bytes; /* >= 1: raw_cap holds a float32 row of the widest */
    job c = {t->type, n, m->raw, row_bytes, in, out, 0, 0, x, bias, y, NULL, NULL, NULL, m->row_cap};
    const int fmt = q25_qrow_act(t->type);
    if (!same_x)
        m->aq_fmt = 0; /* the int8 copy is of another x */
    if (fmt) {         /* llama.cpp's: the vectors quantised once, each row's products in integers */
        if (m->aq_fmt != fmt) {
            m->aq_fmt = 0;
            for (uint32_t j = 0; j < n; j++)
                if (q25_act_quantize(fmt, x + (size_t)j * in, (size_t)in, m->aq + (size_t)j * in,
                                     m->ad + (size_t)j * (in / 32), m->as + (size_t)j * (in / 32)) != Q25_OK)
                    return Q25_ERR_ARG;
            m->aq_fmt = fmt;
        }
        c.aq = m->aq;
        c.ad = m->ad;
        c.as = m->as;
    }
    /* chunk k + 1 goes into the other buffer (with a pool: raw_next, fetched while the workers
     * compute k), or into the same one once k is computed (one thread: raw_next is NULL) */
    uint8_t *cur = m->raw, *other = m->raw_next ? m->raw_next : m->raw;
    if (fetch_into(m, t, 0, (out < per ? out : per) * row_blocks, cur) != Q25_OK)
        return Q25_ERR_ARG;
    for (uint64_t r0 = 0; r0 < out; r0 += per) {
        const uint64_t nr = out - r0 < per ? out - r0 : per, r1 = r0 + nr;
        const prefetch next = {t, r1 * row_blocks, (out - r1 < per ? out - r1 : per) * row_blocks, other};
        c.raw = cur;
        c.r0 = r0;
        c.nr = nr;
        int st = run_chunk(m, &c, &next);
        if (st != Q25_OK)
            return st;
        other = cur;
        cur = next.dst;
    }
    return Q25_OK;
}

/* ---- the layers' arithmetic (ggml's order of operations) -------------------------------- */
static void rms_norm(const float *x, const float *w, float *y, uint32_t n, float eps)
{
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n), scale = 1.0f / sqrtf(mean + eps);
    for (uint32_t i = 0; i < n; i++) {
        float v = x[i] * scale;
        y[i] = v * w[i];
    }
}

/* NEOX rotation (llama.cpp's rope type for qwen2) of the first n_rot values of n_heads heads
 * of d at position pos: element i pairs with i + n_rot/2, at the angle pos * base^(-2i/n_rot),
 * built up by products as ggml's rope cache does */
static void rope(float *v, uint32_t n_heads, uint32_t d, uint32_t n_rot, uint32_t pos, float base, float *cs)
{
    const float theta_scale = powf(base, -2.0f / (float)n_rot);
    const uint32_t half = n_rot / 2;
    float theta = (float)pos;
    for (uint32_t i = 0; i < n_rot; i += 2) {
        cs[i] = cosf(theta);
        cs[i + 1] = sinf(theta);
        theta *= theta_scale;
    }
    for (uint32_t h = 0; h < n_heads; h++) {
        float *p = v + (size_t)h * d;
        for (uint32_t i = 0; i < half; i++) {
            const float x0 = p[i], x1 = p[i + half], c = cs[2 * i], s = cs[2 * i + 1];
            const float a = x0 * c, b = x1 * s, e = x0 * s, f = x1 * c;
            p[i] = a - b;
            p[i + half] = e + f;
        }
    }
}

/* causal attention of the token at pos (its q: n_head x d) over the cache's positions 0..pos */
static void attend(const q25_model *m, uint32_t layer, uint32_t pos, const float *q, float *out)
{
    const uint32_t d = m->hp.head_dim, group = m->hp.n_head / m->hp.n_head_kv;
    const size_t kv_dim = (size_t)d * m->hp.n_head_kv, base = (size_t)layer * m->n_ctx * kv_dim;
    const float scale = 1.0f / sqrtf((float)d);
    float *s = m->scores;
    for (uint32_t h = 0; h < m->hp.n_head; h++) {
        const size_t g = (size_t)(h / group) * d;
        const float *qh = q + (size_t)h * d;
        float max = -INFINITY;
        for (uint32_t p = 0; p <= pos; p++) {
            s[p] = dot(qh, m->k_cache + base + p * kv_dim + g, d) * scale;
            max = s[p] > max ? s[p] : max;
        }
        double sum = 0.0;
        for (uint32_t p = 0; p <= pos; p++) {
            s[p] = expf(s[p] - max);
            sum += (double)s[p];
        }
        const float inv = (float)(1.0 / sum);
        float *o = out + (size_t)h * d;
        for (uint32_t i = 0; i < d; i++)
            o[i] = 0.0f;
        for (uint32_t p = 0; p <= pos; p++) {
            const float w = s[p] * inv, *v = m->v_cache + base + p * kv_dim + g;
            for (uint32_t i = 0; i < d; i++)
                o[i] += w * v[i];
        }
    }
}

static void add(float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

/* one layer over the batch of n tokens at positions n_past.. */
static int layer(q25_model *m, uint32_t il, uint32_t n)
{
    const q25_layer_weights *L = &m->layers[il];
    const uint32_t e = m->hp.n_embd, d = m->hp.head_dim, kv = d * m->hp.n_head_kv, ff = m->hp.n_ff, rot = m->hp.n_rot;
    float *kc = m->k_cache + ((size_t)il * m->n_ctx + m->n_past) * kv;
    float *vc = m->v_cache + ((size_t)il * m->n_ctx + m->n_past) * kv;
    int st = load_vec(m, &L->attn_norm, m->vec);
    for (uint32_t j = 0; st == Q25_OK && j < n; j++)
        rms_norm(m->x + (size_t)j * e, m->vec, m->xn + (size_t)j * e, e, m->hp.rms_eps);
    if (st == Q25_OK && (st = load_vec(m, &L->bq, m->vec)) == Q25_OK)
        st = matmul(m, &L->wq, m->xn, n, m->q, m->vec, 0);
    if (st == Q25_OK && (st = load_vec(m, &L->bk, m->vec)) == Q25_OK)
        st = matmul(m, &L->wk, m->xn, n, kc, m->vec, 1);
    if (st == Q25_OK && (st = load_vec(m, &L->bv, m->vec)) == Q25_OK)
        st = matmul(m, &L->wv, m->xn, n, vc, m->vec, 1);
    if (st != Q25_OK)
        return st;
    for (uint32_t j = 0; j < n; j++) {
        rope(m->q + (size_t)j * e, m->hp.n_head, d, rot, m->n_past + j, m->hp.rope_freq_base, m->row);
        rope(kc + (size_t)j * kv, m->hp.n_head_kv, d, rot, m->n_past + j, m->hp.rope_freq_base, m->row);
    }
    for (uint32_t j = 0; j < n; j++)
        attend(m, il, m->n_past + j, m->q + (size_t)j * e, m->att + (size_t)j * e);
    if ((st = matmul(m, &L->wo, m->att, n, m->xn, NULL, 0)) != Q25_OK)
        return st;
    add(m->x, m->xn, (size_t)n * e);
    if ((st = load_vec(m, &L->ffn_norm, m->vec)) != Q25_OK)
        return st;
    for (uint32_t j = 0; j < n; j++)
        rms_norm(m->x + (size_t)j * e, m->vec, m->xn + (size_t)j * e, e, m->hp.rms_eps);
    if ((st = matmul(m, &L->gate, m->xn, n, m->gate, NULL, 0)) != Q25_OK
        || (st = matmul(m, &L->up, m->xn, n, m->up, NULL, 1)) != Q25_OK)
        return st;
    for (size_t i = 0; i < (size_t)n * ff; i++) {
        const float g = m->gate[i], silu = g / (1.0f + expf(-g));
        m->gate[i] = silu * m->up[i];
    }
    if ((st = matmul(m, &L->down, m->gate, n, m->q, NULL, 0)) != Q25_OK)
        return st;
    add(m->x, m->q, (size_t)n * e);
    return Q25_OK;
}

/* the embeddings of ids[0..n) into m->x */
static int embed(q25_model *m, const uint32_t *ids, uint32_t n)
{
    uint32_t be, bb;
    if (q25_ggml_block(m->embd.type, &be, &bb) != Q25_OK)
        return Q25_ERR_ARG;
    const uint64_t e = m->hp.n_embd, row_blocks = e / be;
    for (uint32_t j = 0; j < n; j++) {
        if (fetch(m, &m->embd, ids[j] * row_blocks, row_blocks) != Q25_OK
            || q25_dequantize(m->embd.type, m->raw, (size_t)e, m->x + j * e) != Q25_OK)
            return Q25_ERR_ARG;
    }
    return Q25_OK;
}

/* the size of the next batch of the rem ids still to evaluate: as full as n_batch allows,
 * except that the one before the last is cut short so the last holds at least n_out (with
 * n_out = 1 that is full batches and then the remainder, as q25_model_eval always split) */
static uint32_t next_batch(size_t rem, uint32_t n_batch, uint32_t n_out)
{
    if (rem <= n_batch)
        return (uint32_t)rem;
    return rem - n_batch >= n_out ? n_batch : (uint32_t)(rem - n_out); /* rem - n_out < n_batch here */
}

int q25_model_eval_last(q25_model *m, const uint32_t *ids, size_t n, uint32_t n_out, float *logits, q25_rows_fn fn,
                        void *arg)
{
    if (!m || !m->layers || !logits || !ids || n == 0 || n_out < 1 || n_out > n || n_out > m->n_batch)
        return Q25_ERR_ARG;
    if (n > m->n_ctx - m->n_past)
        return Q25_ERR_OUT_CAPACITY;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= m->hp.n_vocab)
            return Q25_ERR_TOKEN_ID;
    const uint32_t e = m->hp.n_embd;
    int st = Q25_OK;
    for (size_t done = 0; st == Q25_OK && done < n;) {
        const uint32_t nb = next_batch(n - done, m->n_batch, n_out);
        const int last_batch = done + nb == n;
        const float *last = m->x + (size_t)(nb - (last_batch ? n_out : 1)) * e; /* the n_out rows reported */
        st = embed(m, ids + done, nb);
        if (st == Q25_OK && last_batch && fn)
            fn(arg, -1, last, n_out, e);
        for (uint32_t il = 0; st == Q25_OK && il < m->hp.n_layer; il++) {
            st = layer(m, il, nb);
            if (st == Q25_OK && last_batch && fn)
                fn(arg, (int)il, last, n_out, e);
        }
        if (st == Q25_OK && last_batch && (st = load_vec(m, &m->out_norm, m->vec)) == Q25_OK) {
            for (uint32_t j = 0; j < n_out; j++) /* xn holds n_batch >= n_out rows */
                rms_norm(last + (size_t)j * e, m->vec, m->xn + (size_t)j * e, e, m->hp.rms_eps);
            if (fn)
                fn(arg, (int)m->hp.n_layer, m->xn, n_out, e);
            st = matmul(m, &m->output, m->xn, n_out, logits, NULL, 0); /* one pass over the head */
        }
        if (st == Q25_OK) {
            m->n_past += nb;
            done += nb;
        }
    }
    return st;
}

/* q25_model_eval's callback, seen through q25_model_eval_last's (one row each time) */
typedef struct one_row {
    q25_layer_fn fn;
    void *arg;
} one_row;

static void call_one_row(void *arg, int layer, const float *rows, uint32_t n_rows, uint32_t n_embd)
{
    const one_row *o = arg;
    (void)n_rows;
    o->fn(o->arg, layer, rows, n_embd);
}

int q25_model_eval(q25_model *m, const uint32_t *ids, size_t n, float *logits, q25_layer_fn fn, void *arg)
{
    one_row o = {fn, arg};
    return q25_model_eval_last(m, ids, n, 1, logits, fn ? call_one_row : NULL, &o);
}
