/* cpu_backend.c - the CPU implementation of backend.h: plain C kernels run
 * over a thread pool. Activations and the KV cache live in host memory. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "quant.h"
#include "threadpool.h"

typedef struct {
    tp_pool *pool;
    int n_threads;
    float **scratch;      /* one buffer per thread */
    size_t scratch_len;   /* floats in each */
    atomic_ullong launches;
} cpu_impl;

static cpu_impl *impl_of(kb_backend *kb) { return kb->impl; }

static void count_launch(kb_backend *kb) { atomic_fetch_add_explicit(&impl_of(kb)->launches, 1, memory_order_relaxed); }

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

static int cpu_reserve(kb_backend *kb, int max_width, int n_ctx) {
    cpu_impl *c = impl_of(kb);
    size_t need = (size_t)(max_width > n_ctx ? max_width : n_ctx);
    if (need <= c->scratch_len) return 0;
    for (int i = 0; i < c->n_threads; i++) {
        float *p = realloc(c->scratch[i], need * sizeof(float));
        if (!p) return -1;
        c->scratch[i] = p;
    }
    c->scratch_len = need;
    return 0;
}

static int cpu_weight_upload(kb_backend *kb, kb_weight *w) {
    (void)kb;
    w->dev = NULL;
    return 0;
}

static void cpu_weight_release(kb_backend *kb, kb_weight *w) {
    (void)kb;
    (void)w;
}

static const void *weight_row(const kb_weight *w, int r) {
    return (const uint8_t *)w->host + (size_t)r * ggml_row_bytes(w->type, (uint64_t)w->cols);
}

static void cpu_embed(kb_backend *kb, float *out, const kb_weight *emb, const int32_t *tokens, int n) {
    count_launch(kb);
    for (int i = 0; i < n; i++) quant_dequantize_row(emb->type, weight_row(emb, tokens[i]), out + (size_t)i * emb->cols, emb->cols);
}

static void cpu_rmsnorm(kb_backend *kb, float *out, const float *x, const kb_weight *w, int n, int dim, float eps) {
    count_launch(kb);
    const float *g = w->host;
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * dim;
        float *oi = out + (size_t)i * dim;
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)xi[j] * xi[j];
        float scale = (float)(1.0 / sqrt(ss / dim + eps));
        for (int j = 0; j < dim; j++) oi[j] = xi[j] * scale * g[j];
    }
}

typedef struct {
    cpu_impl *c;
    float *out;
    const kb_weight *w;
    const float *x;
    int n;
} matmul_job;

/* Rows [r0, r1) of W against every token of X. With one token the row is
 * dotted in place; with more it is dequantised once and reused. */
static void matmul_rows(void *ctx, size_t r0, size_t r1, int ith) {
    matmul_job *j = ctx;
    const kb_weight *w = j->w;
    int cols = w->cols;
    float *row = j->n > 1 && j->c->scratch_len >= (size_t)cols ? j->c->scratch[ith] : NULL;
    for (size_t r = r0; r < r1; r++) {
        const void *wr = weight_row(w, (int)r);
        if (row) {
            quant_dequantize_row(w->type, wr, row, cols);
            for (int t = 0; t < j->n; t++) {
                const float *xt = j->x + (size_t)t * cols;
                float s = 0;
                for (int k = 0; k < cols; k++) s += row[k] * xt[k];
                j->out[(size_t)t * w->rows + r] = s;
            }
        } else {
            for (int t = 0; t < j->n; t++)
                j->out[(size_t)t * w->rows + r] = quant_dot_row(w->type, wr, j->x + (size_t)t * cols, cols);
        }
    }
}

static void cpu_matmul(kb_backend *kb, float *out, const kb_weight *w, const float *x, int n) {
    count_launch(kb);
    matmul_job j = {impl_of(kb), out, w, x, n};
    tp_run(impl_of(kb)->pool, matmul_rows, &j, (size_t)w->rows, 16);
}

static void cpu_add_bias(kb_backend *kb, float *x, const kb_weight *b, int n) {
    count_launch(kb);
    const float *bv = b->host;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < b->cols; j++) x[(size_t)i * b->cols + j] += bv[j];
}

static void cpu_rope(kb_backend *kb, float *x, int n, int n_heads, const kb_attn_shape *s, int pos0) {
    count_launch(kb);
    int hd = s->head_dim, half = hd / 2;
    float cs[512], sn[512];
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < half && k < 512; k++) {
            double theta = (double)(pos0 + i) * s->inv_freq[k];
            cs[k] = (float)cos(theta);
            sn[k] = (float)sin(theta);
        }
        for (int h = 0; h < n_heads; h++) {
            float *v = x + ((size_t)i * n_heads + h) * hd;
            for (int k = 0; k < half; k++) {
                int a = s->neox ? k : 2 * k, b = s->neox ? k + half : 2 * k + 1;
                float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[k] - x1 * sn[k];
                v[b] = x0 * sn[k] + x1 * cs[k];
            }
        }
    }
}

/* Stores n rows of SRC (kv_dim wide) at positions pos0.. of the cache side DST. */
static void kv_store(void *dst, kb_kv_type t, const float *src, int n, int pos0, int kv_dim) {
    size_t off = (size_t)pos0 * kv_dim, cnt = (size_t)n * kv_dim;
    if (t == KB_KV_F32) {
        memcpy((float *)dst + off, src, cnt * sizeof(float));
    } else {
        uint16_t *h = (uint16_t *)dst + off;
        for (size_t i = 0; i < cnt; i++) h[i] = quant_f32_to_f16(src[i]);
    }
}

static float kv_dot(const kb_kv *c, const void *base, int pos, int off, const float *q, int hd) {
    float s = 0;
    if (c->type == KB_KV_F32) {
        const float *k = (const float *)base + (size_t)pos * c->kv_dim + off;
        for (int i = 0; i < hd; i++) s += q[i] * k[i];
    } else {
        const uint16_t *k = (const uint16_t *)base + (size_t)pos * c->kv_dim + off;
        for (int i = 0; i < hd; i++) s += q[i] * quant_f16_to_f32(k[i]);
    }
    return s;
}

static void kv_axpy(const kb_kv *c, const void *base, int pos, int off, float a, float *out, int hd) {
    if (c->type == KB_KV_F32) {
        const float *v = (const float *)base + (size_t)pos * c->kv_dim + off;
        for (int i = 0; i < hd; i++) out[i] += a * v[i];
    } else {
        const uint16_t *v = (const uint16_t *)base + (size_t)pos * c->kv_dim + off;
        for (int i = 0; i < hd; i++) out[i] += a * quant_f16_to_f32(v[i]);
    }
}

typedef struct {
    cpu_impl *c;
    float *out;
    const float *q;
    const kb_kv *cache;
    int pos0;
    const kb_attn_shape *s;
} attn_job;

/* Items are (query token, head) pairs: softmax(q.K / sqrt(d)) V over the
 * causal window of that token. */
static void attn_items(void *ctx, size_t b, size_t e, int ith) {
    attn_job *j = ctx;
    const kb_attn_shape *s = j->s;
    int hd = s->head_dim, group = s->n_heads / s->n_kv_heads;
    float *score = j->c->scratch[ith];
    float scale = 1.0f / sqrtf((float)hd);
    for (size_t it = b; it < e; it++) {
        int i = (int)(it / (size_t)s->n_heads), h = (int)(it % (size_t)s->n_heads);
        int pos = j->pos0 + i, off = (h / group) * hd;
        const float *q = j->q + ((size_t)i * s->n_heads + h) * hd;
        float *o = j->out + ((size_t)i * s->n_heads + h) * hd;
        float mx = -INFINITY;
        for (int t = 0; t <= pos; t++) {
            score[t] = kv_dot(j->cache, j->cache->k, t, off, q, hd) * scale;
            if (score[t] > mx) mx = score[t];
        }
        double sum = 0;
        for (int t = 0; t <= pos; t++) {
            score[t] = expf(score[t] - mx);
            sum += score[t];
        }
        float inv = (float)(1.0 / sum);
        memset(o, 0, (size_t)hd * sizeof(float));
        for (int t = 0; t <= pos; t++) kv_axpy(j->cache, j->cache->v, t, off, score[t] * inv, o, hd);
    }
}

static void cpu_attention(kb_backend *kb, float *out, const float *q, const float *k, const float *v, kb_kv *cache,
                          int n, int pos0, const kb_attn_shape *s) {
    count_launch(kb);
    kv_store(cache->k, cache->type, k, n, pos0, cache->kv_dim);
    kv_store(cache->v, cache->type, v, n, pos0, cache->kv_dim);
    attn_job j = {impl_of(kb), out, q, cache, pos0, s};
    tp_run(impl_of(kb)->pool, attn_items, &j, (size_t)n * s->n_heads, 1);
}

static void cpu_swiglu(kb_backend *kb, float *gate, const float *up, size_t n) {
    count_launch(kb);
    for (size_t i = 0; i < n; i++) gate[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static void cpu_add(kb_backend *kb, float *x, const float *y, size_t n) {
    count_launch(kb);
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void cpu_sync(kb_backend *kb) { (void)kb; }

static uint64_t cpu_launches(kb_backend *kb) { return atomic_load(&impl_of(kb)->launches); }

static void cpu_destroy(kb_backend *kb) {
    if (!kb) return;
    cpu_impl *c = kb->impl;
    if (c) {
        tp_destroy(c->pool);
        for (int i = 0; c->scratch && i < c->n_threads; i++) free(c->scratch[i]);
        free(c->scratch);
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
    c->scratch = calloc((size_t)n_threads, sizeof *c->scratch);
    c->pool = tp_create(n_threads);
    if (!c->scratch || !c->pool) goto fail;
    kb->name = "cpu";
    kb->alloc = cpu_alloc;
    kb->free = cpu_free;
    kb->to_host = cpu_copy;
    kb->to_backend = cpu_copy;
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
