/* backend.h - the one interface every compute backend (cpu/, cuda/) implements.
 *
 * The engine's forward pass is written once against these operations. All
 * activation pointers (float *) and KV pointers live in backend memory
 * (host memory for the CPU, device memory for CUDA) and come from
 * kb->alloc; the engine never dereferences them itself and copies data
 * across with to_host / to_backend. Weights stay in their file format
 * (any type of kernels/quant.h; a backend without kernels for a type refuses
 * it at weight_upload, with kb_error naming the type); a backend may keep a private
 * copy (e.g. on the GPU) made by weight_upload, or rewrite the host bytes in
 * place into its own layout of the same size (the CPU backend interleaves
 * Q8_0/Q4_0/Q4_K rows in groups of 16; it then sets dev = host): the host
 * memory handed to weight_upload must be writable and belong to that weight
 * (one upload per tensor; copies of an uploaded kb_weight share its layout).
 *
 * Shapes: activations are row-major [n tokens][width]. A weight has ROWS
 * output features, each a row of COLS input features (ggml's ne[0] = cols).
 *
 * Failures: the compute operations return nothing. An operation that fails
 * (a kernel launch, a copy, a shape the reserved scratch cannot hold)
 * records why with kb_fail and does no more; the first failure sticks until
 * kb_error_clear. The engine reads kb_error at least once per layer batch
 * and once per token, and turns a failure into an error for the request.
 * Scratch memory is allocated by reserve() only: no operation allocates.
 *
 * Kernels write no log lines themselves: a failure goes into the error
 * state, a warning (a slower path taken) to the logger the program installs
 * with kb_set_logger (debugging aids such as ILPD_CPU_PROFILE print to
 * stderr).
 */
#ifndef ILPD_BACKEND_H
#define ILPD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/quant.h"

typedef struct {
    ggml_type type;
    int rows, cols;
    const void *host;   /* the weights in host memory (always present) */
    void *dev;          /* the backend's copy, or NULL when it uses host (== host: rewritten in place) */
    size_t nbytes;
} kb_weight;

typedef enum { KB_KV_F32, KB_KV_F16 } kb_kv_type;

/* Batches of up to this many rows are batch-invariant in matmul (below). */
#define KB_EXACT_ROWS 8
/* The most weights one matmul_many call takes. */
#define KB_MATMUL_MANY 3
/* The most rows (and tokens) one decode step takes (step_begin). */
#define KB_STEP_ROWS 64

/* One layer's KV cache: n_ctx positions of kv_dim values each for K and V. */
typedef struct {
    void *k, *v;        /* backend memory */
    kb_kv_type type;
    int n_ctx, kv_dim, head_dim;
} kb_kv;

typedef struct {
    int n_heads, n_kv_heads, head_dim;
    int neox;           /* 1: rotate (x[i], x[i+d/2]) pairs; 0: adjacent (x[2i], x[2i+1]) */
    const float *inv_freq; /* n_rot/2 inverse frequencies (host memory) */
    float mscale;       /* YaRN: the rotation's cos and sin are multiplied by this (0: by 1) */
    float scale;        /* of the scores q.k (0: 1/sqrt(head_dim)) */
    int window;         /* sliding window: a query sees the last WINDOW positions, its own included (0: all) */
    int n_rot;          /* the first n_rot dimensions of a head rotate, the rest pass through (0: head_dim) */
} kb_attn_shape;

/* How pick draws a row's next token: as engine/sampler.c does. */
typedef struct {
    float temperature;  /* <= 0: the largest logit, the lowest id on ties (greedy) */
    int top_k;          /* the K largest logits only (>= the row's width: all) */
    float top_p;        /* the smallest best-first set whose weight reaches P only (>= 1: all) */
} kb_pick_params;

/* The next token pick chose from one row of logits. */
typedef struct {
    int32_t id;         /* the token, or -1: the backend does not draw from this row (too many candidates) */
    float top, second;  /* the row's largest logit and the next largest (TOP again when it is there twice) */
} kb_pick;

/* What the scratch of one request must hold (reserve). */
typedef struct {
    int max_rows;       /* rows of one operation (embed may take more: it goes in pieces) */
    int max_width;      /* widest activation row (dim, q_dim, ffn_dim) */
    int n_ctx;          /* KV positions attention runs over */
    const kb_attn_shape *attn;
} kb_scratch_shape;

typedef struct kb_backend kb_backend;

struct kb_backend {
    const char *name;
    void *impl;
    char error[256];    /* the first failure since kb_error_clear, "" when none */
    uint64_t fail_at;   /* testing: the operation that starts when launches() equals this fails (0: never) */
    int fail_scratch;   /* testing: the next reserve() that allocates fails as out of memory (then 0) */
    int prompt_rows;    /* rows a prompt goes through per operation, as this backend prefers (0: 64) */

    /* Memory. alloc returns NULL on failure; free accepts NULL. */
    void *(*alloc)(kb_backend *kb, size_t bytes);
    void (*free)(kb_backend *kb, void *p);
    void (*to_host)(kb_backend *kb, void *dst, const void *src, size_t bytes);
    void (*to_backend)(kb_backend *kb, void *dst, const void *src, size_t bytes);
    /* Copies positions 0..n-1 of both sides of cache C to host memory K and
     * V (kb_kv_bytes(type, n, kv_dim) bytes each, in the backend's own
     * layout), and back into a cache of the same type and width whatever
     * its n_ctx (the prompt cache). */
    void (*kv_save)(kb_backend *kb, const kb_kv *c, int n, void *k, void *v);
    void (*kv_load)(kb_backend *kb, kb_kv *c, int n, const void *k, const void *v);
    /* Allocates the scratch the operations need for requests of shape S
     * (grown, never shrunk); 0, or -1 when out of memory (kb_error says so). */
    int (*reserve)(kb_backend *kb, const kb_scratch_shape *s);
    /* Bytes reserve() holds in all for requests of shape S (NULL: none worth
     * counting), and bytes this backend can still allocate ((size_t)-1 or
     * NULL: no limit it knows of). The engine fits the context to them. */
    size_t (*scratch_bytes)(kb_backend *kb, const kb_scratch_shape *s);
    size_t (*mem_free)(kb_backend *kb);
    /* Makes W usable by this backend (uploads it); 0 or -1. */
    int (*weight_upload)(kb_backend *kb, kb_weight *w);
    void (*weight_release)(kb_backend *kb, kb_weight *w);

    /* out[i] = row tokens[i] of EMB (any weight type), for n tokens (host ids). */
    void (*embed)(kb_backend *kb, float *out, const kb_weight *emb, const int32_t *tokens, int n);
    /* out = x / rms(x) * w, row by row; w is an F32 weight of DIM values.
     * OUT may be X (normed in place: Qwen3's per-head Q/K norms). */
    void (*rmsnorm)(kb_backend *kb, float *out, const float *x, const kb_weight *w, int n, int dim, float eps);
    /* out[n][w->rows] = x[n][w->cols] times W transposed. For n <= KB_EXACT_ROWS
     * (CPU backend) every row of out is bit for bit what a call with that one
     * row gives: verifying drafted tokens in one batch reproduces one-token
     * decoding exactly (engine/speculate.h). */
    void (*matmul)(kb_backend *kb, float *out, const kb_weight *w, const float *x, int n);
    /* outs[i] = x times ws[i] transposed for i < count <= KB_MATMUL_MANY
     * (Q, K and V; gate and up): bit for bit what count matmul calls give,
     * but a backend may quantise x once and multiply all of them in one
     * launch. NULL: the caller makes the matmul calls (kb_matmul_many). */
    void (*matmul_many)(kb_backend *kb, float *const *outs, const kb_weight *const *ws, int count, const float *x,
                        int n);
    /* x[n][b->cols] += b (an F32 bias of b->cols values). */
    void (*add_bias)(kb_backend *kb, float *x, const kb_weight *b, int n);
    /* Rotates the N_HEADS heads of each of n rows of X; row i is at position pos0 + i. */
    void (*rope)(kb_backend *kb, float *x, int n, int n_heads, const kb_attn_shape *s, int pos0);
    /* rope of Q's N_HEADS and K's N_KV_HEADS, bit for bit the two calls, in one
     * pass where the backend can. NULL: the caller makes them (kb_rope_qk). */
    void (*rope_qk)(kb_backend *kb, float *q, float *k, int n, int n_heads, int n_kv_heads, const kb_attn_shape *s,
                    int pos0);
    /* Stores the n rows of K and V at positions pos0.. of CACHE, then writes
     * causal attention for the n queries Q (positions pos0..) into OUT, over
     * S's window when it has one. */
    void (*attention)(kb_backend *kb, float *out, const float *q, const float *k, const float *v, kb_kv *cache,
                      int n, int pos0, const kb_attn_shape *s);
    /* rope_qk (of S's heads) then attention, in one pass where the backend
     * can; Q and K may be left rotated or not. NULL: the caller makes the
     * two calls (kb_attention_rope). */
    void (*attention_rope)(kb_backend *kb, float *out, float *q, float *k, const float *v, kb_kv *cache, int n,
                           int pos0, const kb_attn_shape *s);
    /* gate = silu(gate) * up, elementwise over N values. */
    void (*swiglu)(kb_backend *kb, float *gate, const float *up, size_t n);
    /* out = (silu(gate) * up) times W transposed, n rows of w->cols: bit for
     * bit swiglu then matmul, but GATE may keep its values (a backend may
     * apply SwiGLU as it quantises the input). NULL: the caller makes the
     * two calls (kb_swiglu_matmul). */
    void (*swiglu_matmul)(kb_backend *kb, float *out, const kb_weight *w, float *gate, const float *up, int n);
    /* gate = gelu(gate) * up over N values, GELU in its tanh form (Gemma's GeGLU). */
    void (*geglu)(kb_backend *kb, float *gate, const float *up, size_t n);
    /* x *= by over N values. */
    void (*scale)(kb_backend *kb, float *x, float by, size_t n);
    /* x += y over N values. */
    void (*add)(kb_backend *kb, float *x, const float *y, size_t n);
    /* x += y, then out = rmsnorm(x) * w, over n rows of DIM: bit for bit add
     * then rmsnorm (OUT may be Y), in one pass where the backend can. NULL:
     * the caller makes the two calls (kb_add_rmsnorm). */
    void (*add_rmsnorm)(kb_backend *kb, float *x, const float *y, float *out, const kb_weight *w, int n, int dim,
                        float eps);
    /* A decode step as one unit the backend may record and replay (CUDA
     * graphs). Between step_begin(kb, POS0) and step_end(kb) come at most
     * KB_STEP_ROWS rows' operations: embed (at most KB_STEP_ROWS tokens in
     * all), the layers, the logits' matmul; no copies (to_host,
     * to_backend, kv_*), reserve, alloc, free or sync; every position they
     * pass (rope, rope_qk, attention) is POS0 or after. The backend may
     * defer the operations to step_end and there replay the recording of an
     * earlier step that made the same calls with the same arguments, the
     * positions apart (it reads them as offsets from POS0, which it keeps in
     * its own memory). step_end runs or launches the step; failures are
     * recorded as anywhere else. NULL: every operation runs as it comes
     * (kb_step_begin/kb_step_end do nothing). */
    void (*step_begin)(kb_backend *kb, int pos0);
    void (*step_end)(kb_backend *kb);
    /* Picks the next token from each of N rows of LOGITS ([n][width]) as P
     * says, so that only OUT[0..n-1] crosses to the host: greedy picks bit
     * for bit as sampler.c's, draws (temperature > 0) with U[i] in [0, 1)
     * as row i's uniform, from the same distribution as sampler.c's but
     * not always the same token (float sums in another order). Not inside
     * a step. NULL: the caller copies the logits (to_host) and picks. */
    void (*pick)(kb_backend *kb, kb_pick *out, const float *logits, int n, int width, const kb_pick_params *p,
                 const float *u);
    /* Waits for queued work (no-op on the CPU). */
    void (*sync)(kb_backend *kb);
    /* Number of kernels launched so far (tests count them). */
    uint64_t (*launches)(kb_backend *kb);
    void (*destroy)(kb_backend *kb);
};

/* Creates the CPU backend with N_THREADS workers (0: online cores).
 * Returns NULL when out of memory. */
kb_backend *kb_cpu_create(int n_threads);
/* Creates the CUDA backend on device DEV, or NULL with err set (no device,
 * no driver, or built without CUDA). */
kb_backend *kb_cuda_create(int dev, char *err, size_t errlen);

/* Bytes of one KV cache layer of this shape and type. */
size_t kb_kv_bytes(kb_kv_type t, int n_ctx, int kv_dim);

/* kb->matmul_many, or COUNT matmul calls when the backend has none. */
void kb_matmul_many(kb_backend *kb, float *const *outs, const kb_weight *const *ws, int count, const float *x, int n);
/* kb->rope_qk, or the two rope calls when the backend has none. */
void kb_rope_qk(kb_backend *kb, float *q, float *k, int n, int n_heads, int n_kv_heads, const kb_attn_shape *s, int pos0);
/* kb->attention_rope, or rope_qk then attention when the backend has none. */
void kb_attention_rope(kb_backend *kb, float *out, float *q, float *k, const float *v, kb_kv *cache, int n, int pos0,
                       const kb_attn_shape *s);
/* kb->swiglu_matmul, or swiglu then matmul when the backend has none. */
void kb_swiglu_matmul(kb_backend *kb, float *out, const kb_weight *w, float *gate, const float *up, int n);
/* kb->add_rmsnorm, or add then rmsnorm when the backend has none. */
void kb_add_rmsnorm(kb_backend *kb, float *x, const float *y, float *out, const kb_weight *w, int n, int dim, float eps);

/* kb->step_begin and kb->step_end, when the backend has them. */
void kb_step_begin(kb_backend *kb, int pos0);
void kb_step_end(kb_backend *kb);

/* Installs FN as the receiver of the backends' warnings (EVENT: a short
 * name, MSG: one line); NULL (the default) drops them. */
void kb_set_logger(void (*fn)(const char *event, const char *msg));
/* Sends a warning to the installed logger. */
void kb_warn(const char *event, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Records a failure of KB ("what: why"), unless one is already recorded. */
void kb_fail(kb_backend *kb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The recorded failure, or NULL when there is none. */
const char *kb_error(const kb_backend *kb);
void kb_error_clear(kb_backend *kb);
/* For the backends, as an operation starts: 1 when a test armed a failure
 * for this operation (recorded as "OP: injected fault"), else 0. LAUNCHES
 * is the backend's count of operations before this one. */
int kb_fault_due(kb_backend *kb, uint64_t launches, const char *op);

#endif
