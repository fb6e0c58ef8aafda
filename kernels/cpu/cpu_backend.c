/* cpu_backend.c - the CPU implementation of backend.h: SIMD kernels chosen
 * at run time (cpu_internal.h: AVX-512+VNNI, AVX2+FMA+F16C or scalar; the
 * environment variable ILPD_CPU_ISA=avx512|avx2|scalar caps the choice) run over a
 * thread pool. Activations and the KV cache live in host memory.
 *
 * Weights: weight_upload repacks the types of repack.c in place into their
 * x16 layouts when the kernel table has a kernel for that type (AVX2 has
 * none for Q2_K, Q3_K and Q6_K), and marks them with dev == host
 * (ILPD_CPU_NO_REPACK keeps the file layout); everything that reads a weight (matmul, embed)
 * understands both layouts.
 *
 * matmul: quantized weights get the activation quantized once per call
 * (int8 blocks of 32) and integer kernels: repacked groups of 16 rows, and
 * rows in the file layout (every block type on AVX2 and AVX-512,
 * kern_rows.h; the tail rows of a repacked weight too); the scalar table
 * dequantizes the rows of the types it has no kernel for; float weights run
 * register tiles of 4 rows x 4 tokens (prefill: panels of weights converted
 * to float once and reused from L1 across every token). Rows are split in
 * one contiguous range per thread, the last chunks balanced by stealing.
 *
 * KV cache: head-major inside each side ([kv head][position][head_dim], F32
 * or F16), so that attention, parallel over (token, KV head) with the query
 * heads of a group together, reads one stream per KV head.
 *
 * ILPD_CPU_PROFILE=1 prints the time spent in each kind of op when the
 * backend is destroyed; =2 adds each matmul shape with its bandwidth. */
#include <math.h>
#include <stdio.h>
#include <time.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/quant.h"
#include "kernels/cpu/threadpool.h"

#define ROPE_ROWS KB_EXACT_ROWS /* positions whose RoPE angles are kept between calls */

typedef struct {
    tp_pool *pool;
    int n_threads;
    const cpu_kern *k;
    float **scratch;      /* one buffer per thread: a dequantized row, a prefill matmul's transposed
                             activation (CPU_MM_TMP_FLOATS), or attention scores */
    size_t scratch_len;   /* floats in each */
    void *act_mem;        /* the quantized activation of the current matmul */
    size_t act_bytes;
    float *rope_cs;       /* [ROPE_ROWS][2][rope_half]: cos and sin of up to ROPE_ROWS positions */
    int rope_half;
    int rope_pos0, rope_n; /* the positions rope_cs holds (rope_n 0: none) for ... */
    const float *rope_freq; /* ... these inverse frequencies */
    float rope_mscale;      /* ... and this scale */
    atomic_ullong launches;
    int profile;          /* ILPD_CPU_PROFILE=1: time each kind of op, printed at destroy; 2: and each matmul shape */
    double prof_s[16];
    uint64_t prof_n[16];
    struct { int rows, cols, type, n1; double s; uint64_t calls; size_t bytes; } prof_mm[32]; /* ILPD_CPU_PROFILE=2 */
} cpu_impl;

enum { P_EMBED, P_RMSNORM, P_MATMUL1, P_MATMULN, P_QUANT, P_ROPE, P_ATTN, P_EW, P_BIAS, P_COUNT };
static const char *prof_names[P_COUNT] = {"embed", "rmsnorm", "matmul n=1", "matmul n>1", "act quant", "rope",
                                          "attention", "elementwise", "bias"};

static double prof_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
#define PROF_BEGIN(c) double prof_t0_ = (c)->profile ? prof_now() : 0
#define PROF_END(c, what)                                    \
    do {                                                     \
        if ((c)->profile) {                                  \
            (c)->prof_s[what] += prof_now() - prof_t0_;      \
            (c)->prof_n[what]++;                             \
        }                                                    \
    } while (0)

static cpu_impl *impl_of(kb_backend *kb) { return kb->impl; }

/* Counts an operation as it starts; 1 when it must not run (a test's
 * injected fault, recorded as the backend's error). */
static int op_begin(kb_backend *kb, const char *op) {
    uint64_t n = atomic_fetch_add_explicit(&impl_of(kb)->launches, 1, memory_order_relaxed);
    return kb_fault_due(kb, n, op);
}

static void *cpu_alloc(kb_backend *kb, size_t bytes) {
    (void)kb;
    size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

static void cpu_free(kb_backend *kb, void *p) {
    (void)kb;
    free(p);
}

static void cpu_copy(kb_backend *kb, void *dst, const void *src, size_t bytes) {
    (void)kb;
    memcpy(dst, src, bytes);
}

/* Allocates BYTES for the scratch, unless a test armed a failure: NULL. */
static void *scratch_alloc(kb_backend *kb, size_t bytes) {
    if (kb->fail_scratch) {
        kb->fail_scratch = 0;
        return NULL;
    }
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* Replaces *P by a new block of BYTES (contents not kept); 0 or -1. */
static int scratch_replace(kb_backend *kb, void **p, size_t bytes) {
    void *n = scratch_alloc(kb, bytes);
    if (!n) return -1;
    free(*p);
    *p = n;
    return 0;
}

/* Grows every scratch buffer to what requests of shape S need: per thread a
 * dequantized row (max_width), a float prefill matmul's transposed
 * activation (more than 4 rows), or the attention scores of one KV head's
 * query group (n_ctx * group); the quantized (or, for BF16 weights,
 * rounded) activation of max_rows rows;
 * RoPE's cos/sin of one position. */
static int cpu_reserve(kb_backend *kb, const kb_scratch_shape *s) {
    cpu_impl *c = impl_of(kb);
    int group = s->attn ? s->attn->n_heads / s->attn->n_kv_heads : 1;
    size_t need = (size_t)s->n_ctx * (size_t)group;
    if (need < (size_t)s->max_width) need = (size_t)s->max_width;
    if (s->max_rows >= 4 && need < CPU_MM_TMP_FLOATS(s->max_width)) need = CPU_MM_TMP_FLOATS(s->max_width);
    for (int i = 0; need > c->scratch_len && i < c->n_threads; i++)
        if (scratch_replace(kb, (void **)&c->scratch[i], need * sizeof(float))) goto oom;
    if (need > c->scratch_len) c->scratch_len = need;
    size_t act = cpu_act_bytes((size_t)s->max_rows, ((size_t)s->max_width + CPU_QK - 1) / CPU_QK * CPU_QK);
    if (act < (size_t)s->max_rows * (size_t)s->max_width * sizeof(float)) /* a BF16 weight's rounded input */
        act = (size_t)s->max_rows * (size_t)s->max_width * sizeof(float);
    if (act > c->act_bytes) {
        if (scratch_replace(kb, &c->act_mem, act)) goto oom;
        c->act_bytes = act;
    }
    int half = s->attn ? s->attn->head_dim / 2 : 0;
    if (half > c->rope_half) {
        if (scratch_replace(kb, (void **)&c->rope_cs, ROPE_ROWS * 2 * (size_t)half * sizeof(float))) goto oom;
        c->rope_half = half;
        c->rope_n = 0;
    }
    return 0;
oom:
    /* a thread's scratch may be new and longer: scratch_len still holds for all */
    kb_fail(kb, "reserve: out of memory for the scratch of %d rows of %d and %d positions", s->max_rows, s->max_width,
            s->n_ctx);
    return -1;
}

static int is_repacked(const kb_weight *w) { return w->dev && w->dev == w->host && repack_supported(w->type); }

static int cpu_weight_upload(kb_backend *kb, kb_weight *w) {
    if (is_repacked(w)) return 0; /* already done (a copy of an uploaded weight) */
    w->dev = NULL;
    if (!repack_supported(w->type) || !cpu_rp_kernel(impl_of(kb)->k, w->type) || w->rows < RP_ROWS ||
        getenv("ILPD_CPU_NO_REPACK"))
        return 0;
    if (repack_weight(w->type, (void *)w->host, w->rows, w->cols)) return -1;
    w->dev = (void *)w->host;
    return 0;
}

static void cpu_weight_release(kb_backend *kb, kb_weight *w) {
    (void)kb;
    (void)w; /* repacked in place: nothing of ours to free */
}

static const void *weight_row(const kb_weight *w, int r) {
    return (const uint8_t *)w->host + (size_t)r * ggml_row_bytes(w->type, (uint64_t)w->cols);
}

static void cpu_embed(kb_backend *kb, float *out, const kb_weight *emb, const int32_t *tokens, int n) {
    if (op_begin(kb, "embed")) return;
    PROF_BEGIN(impl_of(kb));
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * emb->cols;
        if (is_repacked(emb))
            repack_dequant_row(emb->type, emb->host, emb->rows, emb->cols, tokens[i], o);
        else
            quant_dequantize_row(emb->type, weight_row(emb, tokens[i]), o, emb->cols);
    }
    PROF_END(impl_of(kb), P_EMBED);
}

typedef struct {
    cpu_impl *c;
    float *out;
    const float *x;
    const kb_weight *w;
    int n, dim;
    float eps;
} rows_job;

static void rmsnorm_rows(void *ctx, size_t b, size_t e, int ith) {
    (void)ith;
    rows_job *j = ctx;
    const float *g = j->w->host;
    for (size_t i = b; i < e; i++) {
        const float *xi = j->x + i * j->dim;
        float ss = j->c->k->sumsq(xi, j->dim);
        float scale = (float)(1.0 / sqrt((double)ss / j->dim + j->eps));
        j->c->k->scale_mul(j->out + i * j->dim, xi, scale, g, j->dim);
    }
}

static void cpu_rmsnorm(kb_backend *kb, float *out, const float *x, const kb_weight *w, int n, int dim, float eps) {
    if (op_begin(kb, "rmsnorm")) return;
    PROF_BEGIN(impl_of(kb));
    rows_job j = {impl_of(kb), out, x, w, n, dim, eps};
    if ((double)n * dim * 64 >= CPU_SERIAL_MACS) /* a few operations per value */
        tp_run(impl_of(kb)->pool, rmsnorm_rows, &j, (size_t)n, 1);
    else
        rmsnorm_rows(&j, 0, (size_t)n, 0);
    PROF_END(impl_of(kb), P_RMSNORM);
}

/* ---- matmul ---- */

typedef struct {
    cpu_impl *c;
    float *out;
    const kb_weight *w;
    const float *x;
    act_q8 a;
    int n, ng;            /* tokens; repacked groups (items [0, ng)), then single rows */
    size_t row_bytes, group_bytes;
    mm_float_fn fmm;      /* float weights */
    mm_rp_fn qmm;         /* repacked groups */
    mm_row_fn rowk;       /* file-layout rows by an integer kernel, or NULL */
} matmul_job;

static mm_float_fn float_kernel(const cpu_kern *k, ggml_type t) {
    return t == GGML_TYPE_F32 ? k->mm_f32 : t == GGML_TYPE_F16 ? k->mm_f16 : t == GGML_TYPE_BF16 ? k->mm_bf16 : NULL;
}

/* Returns sum_k ROW[k] * (token T's activation as quantized in A). */
static float dot_row_act(const float *row, const act_q8 *a, int t) {
    const int8_t *q = a->qs + (size_t)t * a->cols;
    const float *d = a->d + (size_t)t * a->nb;
    float acc = 0;
    for (int b = 0; b < a->nb; b++) {
        float s = 0;
        for (int i = 0; i < CPU_QK; i++) s += row[CPU_QK * b + i] * (float)q[CPU_QK * b + i];
        acc += s * d[b];
    }
    return acc;
}

/* Items [b, e): groups first, then rows (each item of a float weight is a tile of 4 rows). */
static void matmul_items(void *ctx, size_t b, size_t e, int ith) {
    matmul_job *j = ctx;
    const kb_weight *w = j->w;
    int rows = w->rows, cols = w->cols;
    if (j->fmm) {
        int r0 = (int)b * 4, r1 = (int)e * 4 < rows ? (int)e * 4 : rows;
        float *tmp = j->c->scratch_len >= CPU_MM_TMP_FLOATS(cols) ? j->c->scratch[ith] : NULL;
        j->fmm((const uint8_t *)w->host + (size_t)r0 * j->row_bytes, j->row_bytes, r1 - r0, j->x, cols, j->n, cols,
               j->out + r0, rows, tmp);
        return;
    }
    if ((int)b < j->ng) {
        int g1 = (int)e < j->ng ? (int)e : j->ng;
        j->qmm((const uint8_t *)w->host + (size_t)b * j->group_bytes, j->group_bytes, g1 - (int)b, &j->a, j->n,
               j->out + (size_t)b * RP_ROWS, rows);
        b = (size_t)g1;
    }
    if (b < e && j->rowk) { /* item it >= ng is row it - ng + 16 ng */
        size_t r0 = b - (size_t)j->ng + (size_t)j->ng * RP_ROWS;
        j->rowk((const uint8_t *)w->host + r0 * j->row_bytes, j->row_bytes, (int)(e - b), &j->a, j->n, j->out + r0,
                rows);
        return;
    }
    /* rows in the file layout of a type without a row kernel on this CPU
     * (the scalar table): dequantized, then dotted with
     * the same quantized activation the integer kernels use, so that every
     * row of a quantized weight has one arithmetic whatever the CPU */
    float *row = j->c->scratch[ith];
    for (size_t it = b; it < e; it++) {
        int r = (int)(it - (size_t)j->ng) + j->ng * RP_ROWS;
        quant_dequantize_row(w->type, weight_row(w, r), row, cols);
        if (!j->a.qs) {
            j->c->k->mm_f32(row, 0, 1, j->x, cols, j->n, cols, j->out + r, rows, NULL);
            continue;
        }
        for (int t = 0; t < j->n; t++)
            j->out[(size_t)t * rows + r] = dot_row_act(row, &j->a, t);
    }
}

typedef struct {
    cpu_impl *c;
    const float *x;
    act_q8 *a;
    int sums16; /* fill a->ds16 too */
} quant_job;

static void quant_rows(void *ctx, size_t b, size_t e, int ith) {
    (void)ith;
    quant_job *q = ctx;
    act_q8 *a = q->a;
    for (size_t t = b; t < e; t++) cpu_act_quantize(q->c->k, q->x + t * a->cols, a, (int)t, q->sums16);
}

/* Rows [b, e) of a BF16 rounding job: each value of x rounded to BF16 (to
 * nearest, ties to even; a NaN stays a NaN), written to out as a float. */
typedef struct {
    const float *x;
    float *out;
    size_t cols;
} bf16_job;

static void bf16_rows(void *ctx, size_t b, size_t e, int ith) {
    (void)ith;
    bf16_job *j = ctx;
    for (size_t i = b * j->cols; i < e * j->cols; i++) {
        uint32_t u;
        memcpy(&u, &j->x[i], 4);
        u = (u & 0x7FFFFFFFu) > 0x7F800000u ? (u | 0x00400000u) & 0xFFFF0000u
                                            : (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
        memcpy(&j->out[i], &u, 4);
    }
}

/* Points A at room for n tokens of COLS in c->act_mem; 0, or -1 when the
 * reserved room is too small. */
static int act_prepare(cpu_impl *c, act_q8 *a, int n, int cols) {
    if (cpu_act_bytes((size_t)n, (size_t)cols) > c->act_bytes) return -1;
    cpu_act_place(a, c->act_mem, (size_t)n, cols);
    return 0;
}

static void cpu_matmul(kb_backend *kb, float *out, const kb_weight *w, const float *x, int n) {
    if (op_begin(kb, "matmul")) return;
    cpu_impl *c = impl_of(kb);
    PROF_BEGIN(c);
    matmul_job j;
    memset(&j, 0, sizeof j);
    j.c = c;
    j.out = out;
    j.w = w;
    j.x = x;
    j.n = n;
    j.row_bytes = ggml_row_bytes(w->type, (uint64_t)w->cols);
    size_t items;
    j.fmm = float_kernel(c->k, w->type);
    if (j.fmm && w->type == GGML_TYPE_BF16) { /* the input rounded to BF16, as llama.cpp multiplies BF16 weights */
        if ((size_t)n * w->cols * sizeof(float) > c->act_bytes) {
            kb_fail(kb, "matmul: %d rows of %d are more than the scratch reserved", n, w->cols);
            return;
        }
        bf16_job r = {x, (float *)c->act_mem, (size_t)w->cols};
        if ((double)n * w->cols * 64 >= CPU_SERIAL_MACS)
            tp_run(c->pool, bf16_rows, &r, (size_t)n, 1);
        else
            bf16_rows(&r, 0, (size_t)n, 0);
        j.x = r.out;
    }
    if (j.fmm) {
        items = ((size_t)w->rows + 3) / 4;
    } else {
        if (w->cols % CPU_QK == 0) { /* always so for the quantized types */
            j.rowk = cpu_row_kernel(c->k, w->type);
            if (is_repacked(w)) {
                j.qmm = cpu_rp_kernel(c->k, w->type);
                j.ng = w->rows / RP_ROWS;
                j.group_bytes = RP_ROWS * j.row_bytes;
            }
            if (act_prepare(c, &j.a, n, w->cols)) {
                kb_fail(kb, "matmul: %d rows of %d are more than the scratch reserved", n, w->cols);
                return;
            }
            quant_job q = {c, x, &j.a, w->type == GGML_TYPE_Q2_K || w->type == GGML_TYPE_Q3_K || w->type == GGML_TYPE_Q6_K};
            PROF_BEGIN(c);
            if ((double)n * w->cols * 64 >= CPU_SERIAL_MACS)
                tp_run(c->pool, quant_rows, &q, (size_t)n, 1);
            else
                quant_rows(&q, 0, (size_t)n, 0);
            PROF_END(c, P_QUANT);
        }
        if (c->scratch_len < (size_t)w->cols) {
            kb_fail(kb, "matmul: rows of %d are wider than the scratch reserved", w->cols);
            return;
        }
        items = (size_t)j.ng + (size_t)(w->rows - j.ng * RP_ROWS);
    }
    /* Each thread streams its own contiguous share in chunks of about a
     * quarter of it (a quantized prompt: a sixteenth); the last chunks go
     * to whichever thread is free. The finer chunks of prompts let a
     * faster core take over more of a slower one's share (a VM's vCPUs, or
     * hybrid cores, differ by up to 25%): 64-token matmuls of 1-16M
     * weights, 2 threads, +1-10% on AVX2 and AVX-512 (Q8_0, Q4_K, Q6_K);
     * generation measured no gain. A float prompt takes its share as one
     * chunk: each call of its kernel transposes the whole activation first.
     * A small product runs on the calling thread: waking and waiting for
     * the workers costs more than it (CPU_SERIAL_MACS, CPU_SERIAL_BYTES). */
    const int prompt = n > KB_EXACT_ROWS;
    size_t chunk = items / ((size_t)c->n_threads * (prompt ? (j.fmm ? 1 : 16) : 4));
    if (chunk < 1) chunk = 1;
    if ((double)w->rows * w->cols * n < CPU_SERIAL_MACS && (size_t)w->rows * j.row_bytes < CPU_SERIAL_BYTES)
        matmul_items(&j, 0, items, 0);
    else
        tp_run_dynamic(c->pool, matmul_items, &j, items, chunk);
    PROF_END(c, n == 1 ? P_MATMUL1 : P_MATMULN);
    if (c->profile > 1) { /* per weight shape */
        double dt = prof_now() - prof_t0_;
        for (int i = 0; i < 32; i++) {
            if (c->prof_mm[i].calls && (c->prof_mm[i].rows != w->rows || c->prof_mm[i].cols != w->cols ||
                                        c->prof_mm[i].type != (int)w->type || c->prof_mm[i].n1 != (n == 1)))
                continue;
            c->prof_mm[i].rows = w->rows;
            c->prof_mm[i].cols = w->cols;
            c->prof_mm[i].type = (int)w->type;
            c->prof_mm[i].n1 = n == 1;
            c->prof_mm[i].s += dt;
            c->prof_mm[i].calls++;
            c->prof_mm[i].bytes += w->nbytes;
            break;
        }
    }
}

static void cpu_add_bias(kb_backend *kb, float *x, const kb_weight *b, int n) {
    if (op_begin(kb, "add_bias")) return;
    PROF_BEGIN(impl_of(kb));
    const float *bv = b->host;
    for (int i = 0; i < n; i++) impl_of(kb)->k->add(x + (size_t)i * b->cols, bv, (size_t)b->cols);
    PROF_END(impl_of(kb), P_BIAS);
}

/* Fills c->rope_cs with the cos and sin of position POS in slot I. */
static void rope_angles(cpu_impl *c, const kb_attn_shape *s, int half, int i, int pos) {
    float *cs = c->rope_cs + (size_t)i * 2 * half, *sn = cs + half;
    float m = s->mscale != 0 ? s->mscale : 1.0f;
    for (int k = 0; k < half; k++) {
        double theta = (double)pos * s->inv_freq[k];
        cs[k] = (float)cos(theta) * m;
        sn[k] = (float)sin(theta) * m;
    }
}

/* Rotates X. Up to ROPE_ROWS rows (decode, verification) keep their angles
 * for the next call at the same positions: every layer's q and k of one
 * step share them, so cos and sin run once per step, not twice per layer. */
static void cpu_rope(kb_backend *kb, float *x, int n, int n_heads, const kb_attn_shape *s, int pos0) {
    if (op_begin(kb, "rope")) return;
    cpu_impl *c = impl_of(kb);
    int hd = s->head_dim, half = (s->n_rot ? s->n_rot : hd) / 2; /* partial rotary: dimensions past 2 half stay */
    if (half > c->rope_half) {
        kb_fail(kb, "rope: head size %d is more than the scratch reserved", hd);
        return;
    }
    PROF_BEGIN(c);
    int cached = n <= ROPE_ROWS;
    if (cached &&
        (c->rope_n != n || c->rope_pos0 != pos0 || c->rope_freq != s->inv_freq || c->rope_mscale != s->mscale)) {
        for (int i = 0; i < n; i++) rope_angles(c, s, half, i, pos0 + i);
        c->rope_n = n;
        c->rope_pos0 = pos0;
        c->rope_freq = s->inv_freq;
        c->rope_mscale = s->mscale;
    }
    if (!cached) c->rope_n = 0;
    for (int i = 0; i < n; i++) {
        if (!cached) rope_angles(c, s, half, 0, pos0 + i);
        const float *cs = c->rope_cs + (cached ? (size_t)i * 2 * half : 0), *sn = cs + half;
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)i * n_heads + h) * hd;
            if (s->neox) {
                for (int k = 0; k < half; k++) {
                    float x0 = v[k], x1 = v[k + half];
                    v[k] = x0 * cs[k] - x1 * sn[k];
                    v[k + half] = x0 * sn[k] + x1 * cs[k];
                }
            } else {
                for (int k = 0; k < half; k++) {
                    float x0 = v[2 * k], x1 = v[2 * k + 1];
                    v[2 * k] = x0 * cs[k] - x1 * sn[k];
                    v[2 * k + 1] = x0 * sn[k] + x1 * cs[k];
                }
            }
        }
    }
    PROF_END(c, P_ROPE);
}

/* The CPU backend keeps each side of a layer's KV cache head-major:
 * [kv head][position][head_dim], so that the attention of one KV head reads
 * one contiguous stream. Stores the n rows of SRC (kv_dim wide) at
 * positions pos0.. of the cache side DST. */
static void kv_store(const cpu_kern *k, void *dst, const kb_kv *c, const float *src, int n, int pos0, int hd) {
    int nh = c->kv_dim / hd;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < nh; g++) {
            size_t off = ((size_t)g * c->n_ctx + (size_t)(pos0 + i)) * hd;
            const float *from = src + (size_t)i * c->kv_dim + (size_t)g * hd;
            if (c->type == KB_KV_F32)
                memcpy((float *)dst + off, from, (size_t)hd * sizeof(float));
            else
                k->to_f16((uint16_t *)dst + off, from, (size_t)hd);
        }
}

/* The first N positions of each KV head of the cache side SIDE, packed head
 * after head in HOST (TO_CACHE: from HOST back into the cache). */
static void kv_copy(const kb_kv *c, void *side, void *host, int n, int to_cache) {
    size_t esz = c->type == KB_KV_F16 ? 2 : 4, run = (size_t)n * (size_t)c->head_dim * esz;
    for (int g = 0; g < c->kv_dim / c->head_dim; g++) {
        uint8_t *cache = (uint8_t *)side + (size_t)g * (size_t)c->n_ctx * (size_t)c->head_dim * esz;
        uint8_t *h = (uint8_t *)host + (size_t)g * run;
        memcpy(to_cache ? cache : h, to_cache ? h : cache, run);
    }
}

static void cpu_kv_save(kb_backend *kb, const kb_kv *c, int n, void *k, void *v) {
    (void)kb;
    kv_copy(c, c->k, k, n, 0);
    kv_copy(c, c->v, v, n, 0);
}

static void cpu_kv_load(kb_backend *kb, kb_kv *c, int n, const void *k, const void *v) {
    (void)kb;
    kv_copy(c, c->k, (void *)k, n, 1);
    kv_copy(c, c->v, (void *)v, n, 1);
}

typedef struct {
    cpu_impl *c;
    float *out;
    const float *q;
    const kb_kv *cache;
    int pos0;
    const kb_attn_shape *s;
} attn_job;

/* Items are (query token, KV head) pairs: the query heads sharing that KV
 * head attend together over the causal window of that token. */
static void attn_items(void *ctx, size_t b, size_t e, int ith) {
    attn_job *j = ctx;
    const kb_attn_shape *s = j->s;
    const kb_kv *c = j->cache;
    int hd = s->head_dim, group = s->n_heads / s->n_kv_heads;
    int f16 = c->type == KB_KV_F16;
    size_t esz = f16 ? 2 : 4;
    float scale = s->scale != 0 ? s->scale : 1.0f / sqrtf((float)hd);
    for (size_t it = b; it < e; it++) {
        int i = (int)(it / (size_t)s->n_kv_heads), g = (int)(it % (size_t)s->n_kv_heads);
        int seen = j->pos0 + i + 1, first = s->window > 0 && seen > s->window ? seen - s->window : 0;
        size_t qoff = ((size_t)i * s->n_heads + (size_t)g * group) * hd;
        size_t hoff = ((size_t)g * c->n_ctx + (size_t)first) * hd * esz;
        j->c->k->attn(j->q + qoff, group, (const uint8_t *)c->k + hoff, (const uint8_t *)c->v + hoff, f16, (size_t)hd,
                      seen - first, hd, scale, j->c->scratch[ith], j->out + qoff);
    }
}

static void cpu_attention(kb_backend *kb, float *out, const float *q, const float *k, const float *v, kb_kv *cache,
                          int n, int pos0, const kb_attn_shape *s) {
    if (op_begin(kb, "attention")) return;
    cpu_impl *c = impl_of(kb);
    if (((size_t)pos0 + (size_t)n) * (size_t)(s->n_heads / s->n_kv_heads) > c->scratch_len) {
        kb_fail(kb, "attention: %d positions are more than the scratch reserved", pos0 + n);
        return;
    }
    PROF_BEGIN(c);
    kv_store(c->k, cache->k, cache, k, n, pos0, s->head_dim);
    kv_store(c->k, cache->v, cache, v, n, pos0, s->head_dim);
    attn_job j = {c, out, q, cache, pos0, s};
    size_t kv_bytes = ((size_t)pos0 + (size_t)n) * (size_t)s->n_kv_heads * (size_t)s->head_dim * 2 *
                      (cache->type == KB_KV_F16 ? 2 : 4);
    if (2.0 * n * s->n_heads * s->head_dim * (pos0 + n) < CPU_SERIAL_MACS && kv_bytes < CPU_SERIAL_BYTES)
        attn_items(&j, 0, (size_t)n * s->n_kv_heads, 0);
    else
        tp_run_dynamic(c->pool, attn_items, &j, (size_t)n * s->n_kv_heads, 1);
    PROF_END(c, P_ATTN);
}

typedef enum { EW_SWIGLU, EW_GEGLU, EW_ADD, EW_SCALE } ew_op;
static const char *const EW_NAMES[] = {"swiglu", "geglu", "add", "scale"};

typedef struct {
    cpu_impl *c;
    float *x;
    const float *y;
    float by;
    ew_op op;
} ew_job;

/* GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
static void geglu_rows(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = g[i];
        g[i] = 0.5f * x * (1.0f + tanhf(0.7978845608f * x * (1.0f + 0.044715f * x * x))) * u[i];
    }
}

static void ew_items(void *ctx, size_t b, size_t e, int ith) {
    (void)ith;
    ew_job *j = ctx;
    switch (j->op) {
    case EW_SWIGLU: j->c->k->swiglu(j->x + b, j->y + b, e - b); break;
    case EW_GEGLU: geglu_rows(j->x + b, j->y + b, e - b); break;
    case EW_ADD: j->c->k->add(j->x + b, j->y + b, e - b); break;
    case EW_SCALE:
        for (size_t i = b; i < e; i++) j->x[i] *= j->by;
        break;
    }
}

static void elementwise(kb_backend *kb, float *x, const float *y, float by, size_t n, ew_op op) {
    if (op_begin(kb, EW_NAMES[op])) return;
    PROF_BEGIN(impl_of(kb));
    ew_job j = {impl_of(kb), x, y, by, op};
    if (n >= 65536)
        tp_run(impl_of(kb)->pool, ew_items, &j, n, 64);
    else
        ew_items(&j, 0, n, 0);
    PROF_END(impl_of(kb), P_EW);
}

static void cpu_swiglu(kb_backend *kb, float *gate, const float *up, size_t n) {
    elementwise(kb, gate, up, 0, n, EW_SWIGLU);
}

static void cpu_geglu(kb_backend *kb, float *gate, const float *up, size_t n) {
    elementwise(kb, gate, up, 0, n, EW_GEGLU);
}

static void cpu_add(kb_backend *kb, float *x, const float *y, size_t n) { elementwise(kb, x, y, 0, n, EW_ADD); }

static void cpu_scale(kb_backend *kb, float *x, float by, size_t n) { elementwise(kb, x, NULL, by, n, EW_SCALE); }

static void cpu_sync(kb_backend *kb) { (void)kb; }

static uint64_t cpu_launches(kb_backend *kb) { return atomic_load(&impl_of(kb)->launches); }

static void cpu_destroy(kb_backend *kb) {
    if (!kb) return;
    cpu_impl *c = kb->impl;
    if (c) {
        if (c->profile) {
            double tot = 0;
            for (int i = 0; i < P_COUNT; i++) tot += c->prof_s[i];
            fprintf(stderr, "cpu profile (%s kernels, %d threads): %.3f s in ops\n", c->k->name, c->n_threads, tot);
            for (int i = 0; i < P_COUNT; i++)
                if (c->prof_n[i])
                    fprintf(stderr, "  %-12s %10.3f ms %8llu calls %8.2f us/call %5.1f%%\n", prof_names[i], c->prof_s[i] * 1e3,
                            (unsigned long long)c->prof_n[i], c->prof_s[i] * 1e6 / c->prof_n[i],
                            tot > 0 ? 100 * c->prof_s[i] / tot : 0);
        }
        for (int i = 0; c->profile > 1 && i < 32 && c->prof_mm[i].calls; i++)
            fprintf(stderr, "  matmul %-5s %6d x %-6d %s %8.3f ms %7llu calls %8.2f us/call %6.1f GB/s\n",
                    ggml_type_name((ggml_type)c->prof_mm[i].type), c->prof_mm[i].rows, c->prof_mm[i].cols,
                    c->prof_mm[i].n1 ? "n=1" : "n>1", c->prof_mm[i].s * 1e3, (unsigned long long)c->prof_mm[i].calls,
                    c->prof_mm[i].s * 1e6 / c->prof_mm[i].calls, c->prof_mm[i].bytes / c->prof_mm[i].s / 1e9);
        tp_destroy(c->pool);
        for (int i = 0; c->scratch && i < c->n_threads; i++) free(c->scratch[i]);
        free(c->scratch);
        free(c->act_mem);
        free(c->rope_cs);
        free(c);
    }
    free(kb);
}

kb_backend *kb_cpu_create(int n_threads) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    kb_backend *kb = calloc(1, sizeof *kb);
    cpu_impl *c = calloc(1, sizeof *c);
    if (!kb || !c) goto fail;
    kb->impl = c;
    c->n_threads = n_threads;
    c->k = cpu_kern_best();
    c->profile = getenv("ILPD_CPU_PROFILE") ? atoi(getenv("ILPD_CPU_PROFILE")) : 0;
    c->scratch = calloc((size_t)n_threads, sizeof *c->scratch);
    c->pool = tp_create(n_threads);
    if (!c->scratch || !c->pool) goto fail;
    kb->name = "cpu";
    kb->alloc = cpu_alloc;
    kb->free = cpu_free;
    kb->to_host = cpu_copy;
    kb->to_backend = cpu_copy;
    kb->kv_save = cpu_kv_save;
    kb->kv_load = cpu_kv_load;
    kb->reserve = cpu_reserve;
    kb->weight_upload = cpu_weight_upload;
    kb->weight_release = cpu_weight_release;
    kb->embed = cpu_embed;
    kb->rmsnorm = cpu_rmsnorm;
    kb->matmul = cpu_matmul;
    kb->add_bias = cpu_add_bias;
    kb->rope = cpu_rope;
    kb->attention = cpu_attention;
    kb->swiglu = cpu_swiglu;
    kb->geglu = cpu_geglu;
    kb->scale = cpu_scale;
    kb->add = cpu_add;
    kb->sync = cpu_sync;
    kb->launches = cpu_launches;
    kb->destroy = cpu_destroy;
    return kb;
fail:
    if (kb) {
        kb->impl = c;
        cpu_destroy(kb);
    } else {
        free(c);
    }
    return NULL;
}
