/*
 * q25tok: the Q25TOKRT tokenizer runtime (board side).
 *
 * Opens a Q25TOKRT runtime image in place (see docs/runtime-image.md), and encodes UTF-8
 * text to Qwen2 token ids exactly as llama.cpp's llama_tokenize(add_special=false) does,
 * and decodes ids back to bytes. C11, libc only (and POSIX threads for the forward pass's
 * workers). The library never allocates: views live in caller-provided structs, encoding
 * works in a caller-provided scratch buffer, and every read of the image is bounds-checked,
 * whatever the image contains.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef Q25TOK_H
#define Q25TOK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define Q25TOK_FORMAT_MAJOR 1
#define Q25TOK_FORMAT_MINOR 0

/* error codes (negative); q25_strerror() describes each */
enum q25_status {
    Q25_OK = 0,
    Q25_ERR_ARG = -1,          /* a NULL pointer or bad argument */
    Q25_ERR_MAGIC = -2,        /* not a Q25TOKRT image */
    Q25_ERR_VERSION = -3,      /* another major format version */
    Q25_ERR_HEADER = -4,       /* header size, count, file size or header checksum wrong */
    Q25_ERR_SECTION = -5,      /* a section out of bounds, misaligned, overlapping, bad record size */
    Q25_ERR_MISSING = -6,      /* a required section is missing or duplicated */
    Q25_ERR_CRC = -7,          /* a section's CRC32 does not match (Q25_OPEN_VERIFY_CRC) */
    Q25_ERR_CORRUPT = -8,      /* an id, offset, count or table order in the image is wrong (checks 14-21) */
    Q25_ERR_TOKEN_ID = -9,     /* an id passed to decode is out of range */
    Q25_ERR_OUT_CAPACITY = -10,   /* out_ids / out buffer too small: see stats / written */
    Q25_ERR_SCRATCH_CAPACITY = -11, /* scratch too small: see stats->scratch_needed */
    Q25_ERR_TABLE = -12,       /* a region or tensor table line is malformed */
    Q25_ERR_NOT_FOUND = -13,   /* no tensor of that name in the tensor table */
    Q25_ERR_UNSUPPORTED = -14, /* a ggml type q25_dequantize does not know */
    Q25_ERR_MODEL = -15,       /* model parameters malformed, out of bounds, or not the tensors' shapes */
    Q25_ERR_THREADS = -16      /* q25_model_open could not start its worker threads */
};

/* flags */
#define Q25_OPEN_VERIFY_CRC   0x1u  /* image_open: also check every section's CRC32 */
#define Q25_ENCODE_PARSE_SPECIAL 0x1u  /* encode: match CONTROL tokens such as <|im_start|> */
#define Q25_DECODE_SPECIAL    0x1u  /* detokenize: write CONTROL tokens' text too */

/* token types (runtime types, as in the image's token index) */
#define Q25_TOKEN_NORMAL 1
#define Q25_TOKEN_UNKNOWN 2
#define Q25_TOKEN_CONTROL 3
#define Q25_TOKEN_USER_DEFINED 4
#define Q25_TOKEN_UNUSED 5
#define Q25_TOKEN_BYTE 6

#define Q25_MAX_SECTIONS 64

typedef struct q25_section_info {
    uint32_t type;
    uint32_t record_size;
    uint64_t offset;
    uint64_t size;
    uint64_t record_count;
    uint32_t crc32;
} q25_section_info;

typedef struct q25_image_info {
    uint16_t version_major, version_minor;
    uint32_t alignment;
    uint64_t file_size;
    uint32_t section_count;
    q25_section_info sections[Q25_MAX_SECTIONS];
    uint32_t vocab_size, merge_count, special_count;
    uint32_t bos, eos, pad; /* 0xFFFFFFFF = none */
    uint32_t flags;         /* bit 0: add_bos */
    uint32_t unicode_version;
    uint32_t max_token_bytes;
    uint8_t vocab_fingerprint[32];
    uint8_t source_sha256[32];
    char pre_tokenizer[33];
    char model_name[65];
    int crc_checked; /* 1 when Q25_OPEN_VERIFY_CRC was given and passed */
} q25_image_info;

/* Read-only views of the image's vocabulary sections (pointers into the image). */
typedef struct q25_bundle_view {
    const uint8_t *token_index; /* vocab_size records of 8 bytes */
    const uint8_t *token_bytes;
    uint64_t token_bytes_size;
    const uint8_t *merges;      /* merge_count records of 16 bytes */
    const uint8_t *specials;    /* special_count records of 8 bytes */
    uint32_t vocab_size, merge_count, special_count;
} q25_bundle_view;

/* What the encoder needs besides the bundle. Filled by image_open; small tables
 * (ASCII classes, special-token prefixes) are computed into the struct itself. */
typedef struct q25_encode_view {
    const q25_bundle_view *bundle;
    const uint8_t *byte_to_token;  /* 256 u32 */
    const uint8_t *pair_index;     /* pair_capacity u32 */
    uint32_t pair_capacity;
    const uint8_t *classes;        /* class_count records of 8 bytes */
    uint32_t class_count;
    uint16_t ascii_flags[128];
    uint8_t special_single[32];    /* bitmap of one-byte special tokens */
    uint8_t special_pair[8192];    /* bitmap over the first two bytes of specials */
    uint32_t max_special_len;
} q25_encode_view;

typedef struct q25_encode_stats {
    size_t ids_written;     /* ids stored in out_ids */
    size_t ids_needed;      /* ids the whole input gives (valid unless scratch ran out) */
    size_t scratch_needed;  /* scratch bytes this input needs */
    size_t special_matches; /* special tokens in the output */
    size_t pieces;          /* pre-tokenizer pieces */
} q25_encode_stats;

/* Opens an image of `size` bytes at `image` (any alignment). Performs the numbered checks of
 * docs/runtime-image.md ("Validation a reader performs"; the Python reader performs the same
 * list): magic, version, header checksum, every section's bounds, alignment, record size and
 * count, and then every id, offset, count and table order in the vocabulary sections, so that
 * nothing the encoder or decoder follows can lie outside the image. Those content checks run
 * at every open: one linear pass over the token index, merge table and pair index (~1 ms for
 * Qwen2's 152k tokens on a desktop CPU). Q25_OPEN_VERIFY_CRC adds the CRC pass (check 9),
 * which is not needed for memory safety. `bundle` must outlive `encode`. */
int q25_nl_tokenizer_runtime_image_open(const void *image, size_t size, q25_bundle_view *bundle,
                                        q25_encode_view *encode, q25_image_info *info, unsigned flags);

/* Encodes `len` bytes of UTF-8 (invalid sequences are handled like llama.cpp: U+FFFD).
 * Never writes past out_cap ids or scratch_size bytes. On Q25_ERR_OUT_CAPACITY,
 * stats->ids_needed is the number of ids the input gives; on Q25_ERR_SCRATCH_CAPACITY,
 * stats->scratch_needed is a scratch size with which the same call succeeds (typical text
 * needs a few KiB plus 36 bytes per symbol of its longest pre-token, a symbol being a byte,
 * or 3 for an invalid byte; special tokens in the input add 8 bytes per match and len/8
 * bytes). stats->scratch_needed == SIZE_MAX means no scratch can do: a pre-token has more
 * than INT32_MAX symbols or its work area would overflow size_t (on 32-bit targets, above
 * ~119M symbols); split such input. scratch may be NULL if scratch_size is 0. */
int q25_nl_tokenizer_bundle_encode_bpe_bounded(const q25_encode_view *view, const uint8_t *utf8, size_t len,
                                               unsigned flags, void *scratch, size_t scratch_size,
                                               uint32_t *out_ids, size_t out_cap, q25_encode_stats *stats);

/* Writes the bytes of `n` ids (CONTROL/UNKNOWN only with Q25_DECODE_SPECIAL). On
 * Q25_ERR_OUT_CAPACITY, *written is the size needed. Out-of-range ids: Q25_ERR_TOKEN_ID. */
int q25_nl_tokenizer_bundle_detokenize(const q25_bundle_view *bundle, const uint32_t *ids, size_t n, unsigned flags,
                                       uint8_t *out, size_t out_cap, size_t *written);

/* Byte-by-byte fallback with no image: ids of the 256 single-byte tokens (GPT-2 byte order,
 * built in). tokenize returns the number of ids (= len) or Q25_ERR_OUT_CAPACITY. */
int q25_tokenize_utf8_bytes(const uint8_t *utf8, size_t len, uint32_t *out_ids, size_t out_cap);
int q25_detokenize_utf8_bytes(const uint32_t *ids, size_t n, uint8_t *out, size_t out_cap, size_t *written);

const char *q25_strerror(int status);

/* CRC-32 (IEEE 802.3, as zlib) — exported for tools and tests. */
uint32_t q25_crc32(uint32_t crc, const uint8_t *data, size_t len);

/* ---- residency: the model's partitions in the reserved (no-map) DDR regions ----------
 * A region table (partitions/regions.tab of a build) has one region per line:
 *   NODE BASE SIZE FILE FILE_SIZE SHA256      (hex BASE/SIZE, FILE relative to the table)
 * `q25tok load TABLE` copies each partition into its region through /dev/mem, after
 * checking the running device tree reserves exactly that range as no-map; `q25tok verify
 * TABLE` reads the regions back and compares their sha256 with the table. */
typedef struct q25_region {
    char node[128];      /* device-tree node under /reserved-memory, e.g. q25-region0@13f800000 */
    uint64_t base;       /* physical address */
    uint64_t size;       /* bytes reserved */
    char file[256];      /* the partition file, relative to the table */
    uint64_t file_size;  /* bytes of the partition (the rest of the region is zero) */
    char sha256[65];     /* the partition's sha256, lowercase hex */
} q25_region;

/* Parse a region table (not NUL-terminated: len bytes) into out[0..cap); no allocation.
 * NODE is a device-tree node name ([A-Za-z0-9][A-Za-z0-9,._+@-]*) and FILE a plain file
 * name ([A-Za-z0-9_][A-Za-z0-9._+-]*), as the build writes them: no '/', so neither climbs
 * out of /reserved-memory or the table's directory. BASE and SIZE are multiples of 16. A
 * line that breaks a rule: Q25_ERR_TABLE. */
int q25_region_table_parse(const char *text, size_t len, q25_region *out, size_t cap, size_t *count);

/* Map a region through mem_path (NULL: /dev/mem) with O_SYNC, read-only unless writable;
 * NULL with errno on failure. mem_path is opened without following a link and without
 * blocking (O_NOFOLLOW|O_NONBLOCK|O_CLOEXEC) and must be a character device (the memory
 * device) or a regular file standing in for it (tests); anything else: EINVAL.
 *
 * The mapping is Device memory, not RAM. A no-map region is outside the kernel's linear
 * map, so arm64 maps it Device-nGnRnE whatever O_SYNC says. On Cortex-A53 silicon:
 *   - an unaligned load or store to it is an alignment fault (SIGBUS);
 *   - DC ZVA on it is an alignment fault, and glibc's memset uses DC ZVA for long ranges;
 *   - glibc's memcpy/memmove end most copies with overlapping unaligned stores, and
 *     memcmp/strlen/... read unaligned: none of the mem and str functions may touch it;
 *   - exclusives and atomics are not guaranteed on Device memory.
 * What a program may do with the raw pointer: naturally aligned loads and stores of 1, 2,
 * 4, 8 (or an LDP/STP pair of 8) bytes through a volatile pointer, or hand its physical
 * address to the programmable logic. Simpler and safe: q25_region_read/q25_region_write.
 * (QEMU before 10.0 forgives all of the above, and even 10.0 forgives DC ZVA.)
 *
 * Reading Device memory is slow for a CPU: nothing is cached and nothing is prefetched, so
 * every load is its own bus transaction. The no-map regions are for the programmable logic
 * (AXI masters read DDR directly, with nothing cached on the CPU side to go stale) and for
 * loading. A CPU program that computes from the weights wants cached memory: map the
 * release's partition files (read-only, from the page cache), or reserve a region without
 * no-map and reach it through a driver (u-dma-buf, or CMA as a shared-dma-pool). */
void *q25_region_map(const q25_region *region, const char *mem_path, int writable);
int q25_region_unmap(const q25_region *region, void *mapped);

/* Copy len bytes at offset in the region (mapped by q25_region_map) to dst, or from src
 * (src NULL: zeros) into it, for any offset and length: only naturally aligned 8- or
 * 16-byte accesses touch the mapping, the words at unaligned ends read-modify-written.
 * dst and src are normal memory. Q25_ERR_ARG when [offset, offset+len) leaves the region
 * or mapped is not 16-byte aligned. Not atomic: one writer at a time per region. */
int q25_region_read(const q25_region *region, const void *mapped, uint64_t offset, void *dst, size_t len);
int q25_region_write(const q25_region *region, void *mapped, uint64_t offset, const void *src, size_t len);
/* "16-byte" (LDP/STP pairs, the default) or "8-byte" (Q25TOK_MMIO_WIDTH=8 in the environment) */
const char *q25_region_access(void);

/* SHA-256 of len bytes, at once or streamed (init, update..., final). The compression
 * function is the CPU's SHA-256 instructions where it has them (ARMv8 crypto extensions,
 * x86 SHA extensions), portable C otherwise; Q25TOK_SHA256=generic forces the latter. */
void q25_sha256(const void *data, size_t len, uint8_t out[32]);
typedef struct q25_sha256_ctx {
    uint32_t h[8];
    uint64_t total;      /* bytes hashed so far */
    uint8_t buf[64];     /* a partial block */
    size_t fill;
    void (*blocks)(void); /* the compression function picked at init */
} q25_sha256_ctx;
void q25_sha256_init(q25_sha256_ctx *ctx);
void q25_sha256_update(q25_sha256_ctx *ctx, const void *data, size_t len);
void q25_sha256_final(q25_sha256_ctx *ctx, uint8_t out[32]);
/* "cpu" when the SHA-256 instructions are used, "generic" otherwise */
const char *q25_sha256_impl(void);

/* ---- weights: the tensor table and ggml's block formats (q25tok_tensor.c, q25tok_dequant.c)
 * A tensor table (partitions/tensors.tab of a build) has one tensor per line:
 *   NAME TYPE TYPE_NAME REGION OFFSET BYTES SHAPE
 * TYPE is ggml's type number, REGION the index of the region's line in regions.tab, OFFSET
 * (hex) the tensor's first byte in that region, SHAPE ne[0],ne[1],... (ne[0] = row length).
 * To read weights on the board: q25_tensor_find, then copy whole blocks from the region into
 * normal memory (q25_region_read: aligned volatile reads of the Device mapping), then
 * q25_dequantize them. Block k of a tensor starts at OFFSET + k * block_bytes. */
enum q25_ggml_type {
    Q25_GGML_F32 = 0, Q25_GGML_F16 = 1, Q25_GGML_Q4_0 = 2, Q25_GGML_Q4_1 = 3, Q25_GGML_Q5_0 = 6,
    Q25_GGML_Q5_1 = 7, Q25_GGML_Q8_0 = 8, Q25_GGML_Q2_K = 10, Q25_GGML_Q3_K = 11, Q25_GGML_Q4_K = 12,
    Q25_GGML_Q5_K = 13, Q25_GGML_Q6_K = 14, Q25_GGML_BF16 = 30
};

#define Q25_TENSOR_NAME_MAX 128
#define Q25_TENSOR_MAX_DIMS 4

typedef struct q25_tensor {
    char name[Q25_TENSOR_NAME_MAX];
    uint32_t type;           /* ggml type number (may be one q25_dequantize does not know) */
    char type_name[16];
    uint32_t region;         /* index of the region in regions.tab */
    uint64_t offset;         /* first byte in the region */
    uint64_t bytes;
    uint32_t n_dims;
    uint64_t ne[Q25_TENSOR_MAX_DIMS]; /* ne[0] = row length; unused dimensions are 1 */
    uint64_t n_elements;
} q25_tensor;

/* Reads the tensor line after *pos (0 for the first) of a table of len bytes into *out and
 * advances *pos: 1 = a tensor, 0 = no more, Q25_ERR_TABLE = a malformed line. */
int q25_tensor_table_next(const char *text, size_t len, size_t *pos, q25_tensor *out);
/* The tensor called name: Q25_OK, Q25_ERR_NOT_FOUND, or Q25_ERR_TABLE for a malformed line
 * before it. Linear in the table (a 0.5B model has 290 lines). */
int q25_tensor_find(const char *text, size_t len, const char *name, q25_tensor *out);

/* Where blocks [first, first + count) of t lie in its region: *offset (from the region's
 * start) and *bytes, for q25_region_read. The last block is t->bytes / block_bytes - 1; row r
 * starts at block r * (ne[0] / block_elems). Q25_ERR_UNSUPPORTED for a type q25_dequantize
 * does not know, Q25_ERR_ARG for a range outside the tensor. */
int q25_tensor_blocks(const q25_tensor *t, uint64_t first, uint64_t count, uint64_t *offset, uint64_t *bytes);

/* "Q4_K" etc., NULL for a type q25_dequantize does not know; and back (Q25_ERR_UNSUPPORTED) */
const char *q25_ggml_type_name(uint32_t type);
int q25_ggml_type_from_name(const char *name, uint32_t *type);
/* elements and bytes of one block (1 element for F32/F16/BF16); Q25_ERR_UNSUPPORTED */
int q25_ggml_block(uint32_t type, uint32_t *block_elems, uint32_t *block_bytes);
/* bytes of n elements (n a multiple of the block: else Q25_ERR_ARG) */
int q25_ggml_bytes(uint32_t type, uint64_t n, uint64_t *bytes);
/* n elements (a multiple of the block) of ggml type `type` at src (any alignment, normal
 * memory, q25_ggml_bytes(type, n) bytes) to float32, bit for bit as gguf-py's
 * gguf.quants.dequantize (numpy) and ggml's reference dequantization. Types: F32, F16, BF16,
 * Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K; any other is
 * Q25_ERR_UNSUPPORTED and dst is not written. */
int q25_dequantize(uint32_t type, const void *src, size_t n, float *dst);

/* One row's dot product with a float32 vector, straight from its blocks (q25tok_rowdot.c):
 * *out = q25_dot_f32(w, x, n) bit for bit, w being q25_dequantize's n values of the row at
 * src (any alignment, normal memory). Types F32, Q4_K, Q5_0, Q6_K, Q8_0; any other is
 * Q25_ERR_UNSUPPORTED (dequantise, then q25_dot_f32). q25_dot_f32 sums into 16 lanes
 * (element i into lane i % 16), then the lanes pairwise, then the n % 16 left over: on
 * aarch64 with NEON by fused multiply-adds ("neon"), elsewhere a multiply and an add each
 * rounded ("generic", q25_row_dot_impl). The forward pass uses them on aarch64 only. */
int q25_row_dot(uint32_t type, const void *src, size_t n, const float *x, float *out);
float q25_dot_f32(const float *a, const float *x, size_t n);
const char *q25_row_dot_impl(void);

/* Integer row products (q25tok_qrow.c; docs/forward.md, "Activations"): what llama.cpp's CPU
 * backend computes for a quantised matrix. q25_qrow_act(type): the activation format a row of
 * `type` is multiplied with (Q25_ACT_Q8_0 for Q5_0 and Q8_0, Q25_ACT_Q8_K for Q4_K and Q6_K),
 * 0 for a float32 product. q25_act_quantize: n values (a multiple of 32, of 256 for Q8_K) to
 * int8 q[n], one float scale per 32 values d[n/32] (a Q8_K block's scale repeated eight
 * times) and the sums of q per 32 s[n/32]; a block holding an infinity or NaN gets d = NaN.
 * q25_qrow_unpack: a row's n values (src: any alignment, normal memory) into buf (cap bytes,
 * at least q25_qrow_size(n)), viewed by *r; Q25_ERR_UNSUPPORTED for a type without a format.
 * q25_qrow_dot: the row times a vector quantised with the row's format (float32). */
enum { Q25_ACT_Q8_0 = 1, Q25_ACT_Q8_K = 2 };
typedef struct q25_qrow {
    int8_t *w;        /* n quants */
    int16_t *w16;     /* x86-64: the quants times their scale, for pmaddwd */
    int16_t *sc, *mn; /* integer scales per 16 values, integer mins per 32 */
    float *d, *dmin;  /* float scales per 32 values, or per 256 (group 8) */
    size_t n;
    uint32_t group, has_min;
} q25_qrow;
int q25_qrow_act(uint32_t type);
int q25_act_quantize(int fmt, const float *x, size_t n, int8_t *q, float *d, int32_t *s);
size_t q25_qrow_size(size_t n);
int q25_qrow_unpack(uint32_t type, const void *src, size_t n, void *buf, size_t cap, q25_qrow *r);
float q25_qrow_dot(const q25_qrow *r, const int8_t *q, const float *d, const int32_t *s);
const char *q25_qrow_impl(void);

/* ---- the forward pass: Qwen2.5 (llama.cpp's `qwen2` graph) in float32 (model_forward.c) ----
 * The model's hyperparameters travel in the release as model_hparams.txt, key=value lines
 * (docs/forward.md): format=q25deploy-hparams/1, arch=qwen2, n_vocab, n_layer, n_embd, n_ff,
 * n_head, n_head_kv, head_dim, n_rot, rope_freq_base, rms_eps, tied_output, n_ctx_train.
 * q25_model_params_parse reads and bounds them (no allocation); q25_model_open checks them
 * against every tensor's type, shape and place in its region before any weight is read.
 * model_forward.c calls libm (expf, sinf, cosf, powf, sqrtf) and POSIX threads: link with
 * -lm -pthread. */
#define Q25_MAX_LAYERS 512
#define Q25_MAX_THREADS 64 /* n_threads of q25_model_workspace / q25_model_open: 1..64 */

typedef struct q25_model_params {
    uint32_t n_layer, n_embd, n_head, n_head_kv, head_dim, n_rot, n_ff, n_vocab, n_ctx_train;
    float rope_freq_base, rms_eps;
    uint32_t tied_output;  /* 1: token_embd.weight is also the output matrix (no output.weight) */
} q25_model_params;

int q25_model_params_parse(const char *text, size_t len, q25_model_params *out);

/* Where the weights are: the regions (q25_region_table_parse), each mapped (q25_region_map:
 * Device memory; or a partition file mapped read-only, with size set to its file_size), and
 * the tensor table's text. Every weight is read with q25_region_read into the workspace. */
typedef struct q25_weights {
    const q25_region *regions;
    const void *const *mapped;
    size_t n_regions;
    const char *table;
    size_t table_len;
} q25_weights;

typedef struct q25_layer_weights q25_layer_weights; /* model_forward.c */
typedef struct q25_pool q25_pool;                   /* model_forward.c: the worker threads */

/* A model opened on a caller's workspace: the library allocates nothing (but the stacks of
 * its worker threads, which pthread_create allocates). The workspace holds the KV cache
 * (2 x n_layer x n_ctx x n_kv floats), one batch of activations, one row of dequantised
 * weights per thread, a bounded chunk of raw blocks (never a whole weight matrix; two with
 * n_threads > 1, the next fetched while the pool computes this one) and, with
 * n_threads > 1, the pool's state. The struct and the workspace must stay where they are
 * from q25_model_open to q25_model_close. */
typedef struct q25_model {
    q25_model_params hp;
    q25_weights w;
    uint32_t n_ctx, n_batch, n_past, n_threads;
    q25_tensor embd, out_norm, output; /* output: token_embd's copy when tied */
    q25_layer_weights *layers;
    float *k_cache, *v_cache, *x, *xn, *q, *att, *gate, *up, *scores, *row, *vec;
    uint8_t *raw, *raw_next; /* raw_next: the second chunk (n_threads > 1), else NULL */
    size_t raw_cap, row_cap;
    int8_t *aq;       /* a matmul's input quantised (q25_act_quantize), n_batch rows */
    int aq_fmt;       /* aq's format, while it is of the current input; else 0 */
    float *ad;
    int32_t *as;
    q25_pool *pool; /* NULL with one thread */
} q25_model;

/* Workspace bytes for n_ctx positions, batches of n_batch tokens and n_threads threads
 * (1..Q25_MAX_THREADS; each further thread adds one row of floats of the widest matrix and,
 * from 2, the pool's state: a few KiB); 0 when the parameters are out of bounds or the size
 * does not fit size_t. */
size_t q25_model_workspace(const q25_model_params *p, uint32_t n_ctx, uint32_t n_batch, uint32_t n_threads);
/* Opens the model for n_threads threads (the workspace sized for as many): with n_threads > 1
 * it starts n_threads - 1 workers (signals blocked) that q25_model_eval hands the rows of each
 * fetched chunk to; the calling thread fetches every chunk itself (the region is read as with
 * one thread) and takes its share of the rows. Results are bit for bit the same for any
 * n_threads. n_threads = 1 starts no thread. Every successful open wants a q25_model_close.
 * Q25_OK; Q25_ERR_MODEL: parameters out of bounds or not a tensor's shape (or tied_output=1
 * with an output.weight); Q25_ERR_NOT_FOUND: a tensor missing (its name in `missing`, if
 * given); Q25_ERR_TABLE: a malformed table line, or a tensor outside its region's partition;
 * Q25_ERR_UNSUPPORTED: a type q25_dequantize does not know; Q25_ERR_ARG: a workspace too
 * small or n_threads out of range; Q25_ERR_THREADS: a worker could not be started (none is
 * left running). On any error nothing is left to close. */
int q25_model_open(q25_model *m, const q25_model_params *p, const q25_weights *w, uint32_t n_ctx,
                   uint32_t n_batch, uint32_t n_threads, void *workspace, size_t size,
                   char missing[Q25_TENSOR_NAME_MAX]);
/* Stops and joins the workers (none with one thread); the model is closed: q25_model_eval
 * refuses it (Q25_ERR_ARG) and the workspace may be freed. NULL or a closed model: nothing. */
void q25_model_close(q25_model *m);

/* Called with the hidden state (n_embd floats) of the last position of the ids evaluated:
 * layer -1 is the token embedding (layer 0's input), 0..n_layer-1 the residual stream after
 * that layer, n_layer the output head's input (rms_norm(x) * output_norm). */
typedef void (*q25_layer_fn)(void *arg, int layer, const float *hidden, uint32_t n_embd);

/* Appends n ids at positions n_past.. (the KV cache keeps them) and writes the logits of the
 * last one (n_vocab floats). One caller at a time per model (fn runs on the calling thread). Q25_ERR_TOKEN_ID for an id >= n_vocab, Q25_ERR_OUT_CAPACITY past
 * n_ctx, Q25_ERR_ARG for a read outside a region. */
int q25_model_eval(q25_model *m, const uint32_t *ids, size_t n, float *logits, q25_layer_fn fn, void *arg);

/* Called with n_rows contiguous hidden states (n_rows x n_embd floats) of the last n_rows
 * positions of the ids evaluated, once per layer: -1 the token embeddings, 0..n_layer-1 the
 * residual stream after that layer, n_layer the output head's inputs (rms_norm(x) * output_norm). */
typedef void (*q25_rows_fn)(void *arg, int layer, const float *rows, uint32_t n_rows, uint32_t n_embd);

/* Teacher forcing: appends n ids at positions n_past.. as q25_model_eval does, and writes the
 * logits of the LAST n_out of them: logits holds n_out x n_vocab floats, row j that of position
 * (n_past before the call) + n - n_out + j. 1 <= n_out <= n and n_out <= the model's n_batch,
 * else Q25_ERR_ARG. The ids are split into batches (each one pass over every weight matrix) so
 * that the last batch holds all n_out positions, and the output head is read once for them. A
 * position's arithmetic depends neither on the split nor on n_out: its logits and states are
 * bit for bit those q25_model_eval gives when that position is the last evaluated. The
 * workspace of q25_model_workspace covers it (no further memory). q25_model_eval is
 * q25_model_eval_last with n_out = 1. Errors as q25_model_eval's. */
int q25_model_eval_last(q25_model *m, const uint32_t *ids, size_t n, uint32_t n_out, float *logits, q25_rows_fn fn,
                        void *arg);

/* The forward pass a board printed (`q25tok generate --dump-layers`: dump, dump_size bytes)
 * against prompt `prompt` of a q25-forward.txt (expected), compared as record_compare.py
 * compares them (q25tok_compare.c, docs/forward.md) with the file's tolerances. Writes one
 * line (no newline) into msg: where they first differ ("step S: WHERE: DETAIL"), else the
 * first near-tie ("near-tie at step S: token T, host H (margin M)": a token that differs where
 * the host's margin is below the tolerance; the steps are teacher-forced, so every step is
 * still compared after it), or why a text is malformed; "" when they agree. The file's first
 * line must be "q25-forward 3". */
enum {
    Q25_FORWARD_AGREE = 0,
    Q25_FORWARD_NEAR_TIE = 1,     /* agree but for tokens the host's margin lets differ */
    Q25_FORWARD_DIFFERS = 2,
    Q25_FORWARD_BAD_EXPECTED = 3, /* the forward file is malformed or lacks the prompt */
    Q25_FORWARD_BAD_DUMP = 4,     /* the dump is malformed */
    Q25_FORWARD_NO_MEMORY = 5
};
int q25_forward_compare(const char *expected, size_t expected_size, uint32_t prompt, const char *dump,
                        size_t dump_size, char *msg, size_t msg_size);

#ifdef __cplusplus
}
#endif
#endif
