/* backend_common.c - what every backend shares: KV sizes, the fused operations' fallbacks, the error state. */
#include "kernels/backend.h"

#include <stdarg.h>
#include <stdio.h>

size_t kb_kv_bytes(kb_kv_type t, int n_ctx, int kv_dim) {
    return (size_t)n_ctx * (size_t)kv_dim * (t == KB_KV_F16 ? 2 : 4);
}

void kb_matmul_many(kb_backend *kb, float *const *outs, const kb_weight *const *ws, int count, const float *x, int n) {
    if (kb->matmul_many)
        kb->matmul_many(kb, outs, ws, count, x, n);
    else
        for (int i = 0; i < count; i++) kb->matmul(kb, outs[i], ws[i], x, n);
}

void kb_rope_qk(kb_backend *kb, float *q, float *k, int n, int n_heads, int n_kv_heads, const kb_attn_shape *s, int pos0) {
    if (kb->rope_qk) {
        kb->rope_qk(kb, q, k, n, n_heads, n_kv_heads, s, pos0);
    } else {
        kb->rope(kb, q, n, n_heads, s, pos0);
        kb->rope(kb, k, n, n_kv_heads, s, pos0);
    }
}

void kb_attention_rope(kb_backend *kb, float *out, float *q, float *k, const float *v, kb_kv *cache, int n, int pos0,
                       const kb_attn_shape *s) {
    if (kb->attention_rope) {
        kb->attention_rope(kb, out, q, k, v, cache, n, pos0, s);
    } else {
        kb_rope_qk(kb, q, k, n, s->n_heads, s->n_kv_heads, s, pos0);
        kb->attention(kb, out, q, k, v, cache, n, pos0, s);
    }
}

void kb_swiglu_matmul(kb_backend *kb, float *out, const kb_weight *w, float *gate, const float *up, int n) {
    if (kb->swiglu_matmul) {
        kb->swiglu_matmul(kb, out, w, gate, up, n);
    } else {
        kb->swiglu(kb, gate, up, (size_t)n * w->cols);
        kb->matmul(kb, out, w, gate, n);
    }
}

void kb_add_rmsnorm(kb_backend *kb, float *x, const float *y, float *out, const kb_weight *w, int n, int dim, float eps) {
    if (kb->add_rmsnorm) {
        kb->add_rmsnorm(kb, x, y, out, w, n, dim, eps);
    } else {
        kb->add(kb, x, y, (size_t)n * dim);
        kb->rmsnorm(kb, out, x, w, n, dim, eps);
    }
}

void kb_step_begin(kb_backend *kb, int pos0) {
    if (kb->step_begin) kb->step_begin(kb, pos0);
}

void kb_step_end(kb_backend *kb) {
    if (kb->step_end) kb->step_end(kb);
}

static void (*logger)(const char *event, const char *msg);

void kb_set_logger(void (*fn)(const char *event, const char *msg)) { logger = fn; }

void kb_warn(const char *event, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    if (!logger) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    logger(event, msg);
}

void kb_fail(kb_backend *kb, const char *fmt, ...) {
    if (kb->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kb->error, sizeof kb->error, fmt, ap);
    va_end(ap);
    if (!kb->error[0]) snprintf(kb->error, sizeof kb->error, "unknown failure");
}

const char *kb_error(const kb_backend *kb) { return kb->error[0] ? kb->error : NULL; }

void kb_error_clear(kb_backend *kb) { kb->error[0] = 0; }

int kb_fault_due(kb_backend *kb, uint64_t launches, const char *op) {
    if (!kb->fail_at || launches + 1 != kb->fail_at) return 0;
    kb->fail_at = 0;
    kb_fail(kb, "%s: injected fault", op);
    return 1;
}

#ifndef ILPD_CUDA
kb_backend *kb_cuda_create(int dev, char *err, size_t errlen) {
    (void)dev;
    snprintf(err, errlen, "this build has no CUDA backend (built with CUDA=0 or without nvcc)");
    return NULL;
}
#endif
