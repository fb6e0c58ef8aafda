/* test_cuda.c - the CUDA backend against the CPU backend.
 *
 * Built twice:
 *   test_cuda      (this file) the real backend. Without a GPU (or built
 *                  without CUDA) it checks that kb_cuda_create fails cleanly
 *                  (NULL and a message, no crash) and runs the host
 *                  self-test of the kernels' weight decoding and int8 dots;
 *                  with a GPU it also runs every check below on the device.
 *   test_cuda_emu  (test_cuda_emu.c includes this file with CUDA_EMU) the
 *                  same kernels on the emulated GPU (cuda_emu.cuh): every
 *                  check below, on any machine.
 *
 * The checks: each backend operation against the CPU backend (and matmul
 * against a double-precision reference) for every weight type, both matmul
 * paths (own kernels for n <= 8 rows, cuBLAS above), attention with F32 and
 * F16 KV caches through prefill chunks and decode steps, up to 580
 * positions whose decode attention is split over the positions and merged
 * (the decode kernel for head sizes 32 to 256 and 1 to 8 query heads a KV
 * head, the general kernel for the rest);
 * then whole forward passes on stories260K (F32 and F16) and on the models
 * named on the command line (`--models A.gguf,B.gguf`, as tests/t_cuda.sh
 * does with synthetic models of every weight type): logits of a prompt and
 * decode steps, an F16 KV cache, a run with layer 1 skipped against the CPU
 * with the same mask, that a skipped layer launches no kernel and gets no
 * KV cache (the emulation also counts the device bytes exactly), and on
 * stories260K (F32 and F16; without ../shared, the synthetic 5-layer models
 * $UNIT_MODEL and $UNIT_MODEL_F16 that tests/t_unit.sh writes) greedy answers
 * of 40 tokens identical to the CPU's (with and without the mask), and
 * (emulation) that running out of device memory fails model_load and
 * model_state_init cleanly and frees what they took; the token picks
 * (kb_backend.pick: greedy bit for bit, draws where sampler.c's
 * distribution and walking order put the uniform), and the demo model's
 * requests through two engines on the GPU, one picking there and one
 * picking from copied logits, giving the same tokens (greedy and seeded
 * sampling; plain, lossless, gated approximate; free and under a schema).
 * `test_cuda --bench MODEL ...` measures speed on a real GPU
 * (scripts/make/gpu-check.sh; see main()).
 *
 * Tolerances (relative to the largest magnitude of the reference):
 *   float weights, own kernels      1e-4  (float sums in another order)
 *   F32 weights, cuBLAS             1e-4  (SGEMM in FP32, no TF32)
 *   F16/BF16, cuBLAS                4e-3  (activation rounded to F16: 2^-11)
 *   quantised weights               2e-2  (the activation rounded to int8,
 *                                          1/254 of its block's max, as the
 *                                          CPU's own int8 paths do)
 *   logits                          2e-3 x max|logit| for float models,
 *                                   5e-2 for quantised and BF16 ones (model_check())
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "tests/unit/check.h"
#include "kernels/quant.h"
#include "kernels/cuda/cuda_backend.h"
#include "engine/gguf.h"
#include "probe/mask.h"
#include "engine/model.h"
#include "engine/engine.h"
#include "engine/sampler.h"

#ifdef CUDA_EMU
#define TAG "cuda-emu"
#define EXACT_MEM 1 /* the emulation counts device bytes exactly */
#define GPU_CREATE kb_cuda_emu_create
#else
#define TAG "cuda"
#define EXACT_MEM 0
#define GPU_CREATE kb_cuda_create
#endif

static uint32_t rng = 2463534242u;
static uint32_t next_u32(void) {
    rng ^= rng << 13;
    rng ^= rng >> 17;
    rng ^= rng << 5;
    return rng;
}
static float unif(void) { return (float)(next_u32() >> 8) / 16777216.0f * 2.0f - 1.0f; }

static void put16(uint8_t *p, uint16_t h) { memcpy(p, &h, 2); }

/* Random weight bytes of type T with sane scales. */
static void fill_weight(ggml_type t, uint8_t *buf, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) buf[i] = (uint8_t)next_u32();
    switch (t) {
    case GGML_TYPE_F32:
        for (size_t i = 0; i + 4 <= bytes; i += 4) {
            float f = unif();
            memcpy(buf + i, &f, 4);
        }
        break;
    case GGML_TYPE_F16:
        for (size_t i = 0; i + 2 <= bytes; i += 2) put16(buf + i, quant_f32_to_f16(unif()));
        break;
    case GGML_TYPE_BF16:
        for (size_t i = 0; i + 2 <= bytes; i += 2) {
            float f = unif();
            uint32_t u;
            memcpy(&u, &f, 4);
            put16(buf + i, (uint16_t)(u >> 16));
        }
        break;
    case GGML_TYPE_Q8_0:
        for (size_t i = 0; i + 34 <= bytes; i += 34) put16(buf + i, quant_f32_to_f16(0.002f + 0.01f * (unif() + 1)));
        break;
    case GGML_TYPE_Q4_0:
        for (size_t i = 0; i + 18 <= bytes; i += 18) put16(buf + i, quant_f32_to_f16(0.02f + 0.1f * (unif() + 1)));
        break;
    case GGML_TYPE_Q4_K:
        for (size_t i = 0; i + 144 <= bytes; i += 144) {
            put16(buf + i, quant_f32_to_f16(0.001f + 0.005f * (unif() + 1)));
            put16(buf + i + 2, quant_f32_to_f16(0.001f + 0.005f * (unif() + 1)));
        }
        break;
    case GGML_TYPE_Q6_K:
        for (size_t i = 0; i + 210 <= bytes; i += 210) put16(buf + i + 208, quant_f32_to_f16(0.0005f + 0.002f * (unif() + 1)));
        break;
    default: { /* the types dequantised at upload: d (and the min's scale) at their offsets */
        size_t bb = ggml_type_block_bytes(t);
        int od = t == GGML_TYPE_Q3_K ? 108 : t == GGML_TYPE_Q2_K ? 80 : 0;
        int om = t == GGML_TYPE_Q2_K ? 82 : t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q5_K ? 2 : -1;
        for (size_t i = 0; bb && i + bb <= bytes; i += bb) {
            put16(buf + i + od, quant_f32_to_f16(0.001f + 0.005f * (unif() + 1)));
            if (om >= 0) put16(buf + i + om, quant_f32_to_f16(0.001f + 0.005f * (unif() + 1)));
        }
        break;
    }
    }
}

/* The types the CUDA backend stores as F16 (dequantised at upload). */
static int f16_on_device(ggml_type t) {
    return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1 || t == GGML_TYPE_Q2_K ||
           t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_IQ4_NL || t == GGML_TYPE_IQ4_XS;
}

static float *dev_from(kb_backend *kb, const float *h, size_t n) {
    float *d = kb->alloc(kb, n * sizeof(float));
    if (d) kb->to_backend(kb, d, h, n * sizeof(float));
    return d;
}

static void host_from(kb_backend *kb, float *h, const float *d, size_t n) { kb->to_host(kb, h, d, n * sizeof(float)); }

static float maxabs(const float *a, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fabsf(a[i]) > m ? fabsf(a[i]) : m;
    return m;
}

/* max |a - b| / max |ref|; NaN anywhere gives infinity. */
/* F rounded to BF16 (to nearest, ties to even), as a float. */
static float bf16_rounded(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1)) & 0xFFFF0000u;
    memcpy(&f, &u, 4);
    return f;
}

static double rel_err(const float *a, const float *b, const float *ref, size_t n) {
    double d = 0, m = maxabs(ref, n);
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) return INFINITY;
        double e = fabs((double)a[i] - b[i]);
        d = e > d ? e : d;
    }
    return d / (m > 1e-30 ? m : 1e-30);
}

/* Both backends' copies of one op's buffers. */
typedef struct {
    kb_backend *g, *c;
} pair;

/* ---- operations ---- */

static void check_matmul(pair p, ggml_type t, int rows, int cols) {
    size_t rb = ggml_row_bytes(t, (uint64_t)cols), bytes = rb * rows;
    uint8_t *hw = malloc(bytes), *hc = malloc(bytes), *hg = malloc(bytes);
    float *deq = malloc((size_t)rows * cols * sizeof(float));
    const int ns[] = {1, 3, 8, 12, 40};
    int nmax = 40;
    float *x = malloc((size_t)nmax * cols * sizeof(float)), *ref = malloc((size_t)nmax * rows * sizeof(float));
    size_t outn = (size_t)nmax * rows > 4 * (size_t)cols ? (size_t)nmax * rows : 4 * (size_t)cols;
    float *og = malloc(outn * sizeof(float)), *oc = malloc(outn * sizeof(float));
    if (!hw || !hc || !hg || !deq || !x || !ref || !og || !oc) {
        CHECK(0, TAG ": matmul %s: out of host memory", ggml_type_name(t));
        goto done;
    }
    fill_weight(t, hw, bytes);
    memcpy(hc, hw, bytes);
    memcpy(hg, hw, bytes);
    for (int r = 0; r < rows; r++) quant_dequantize_row(t, hw + rb * r, deq + (size_t)r * cols, cols);
    for (size_t i = 0; i < (size_t)nmax * cols; i++) x[i] = unif() * (i % 13 == 0 ? 4.0f : 1.0f);
    kb_weight wc = {t, rows, cols, hc, NULL, bytes}, wg = {t, rows, cols, hg, NULL, bytes};
    CHECK(p.c->weight_upload(p.c, &wc) == 0 && p.g->weight_upload(p.g, &wg) == 0 && wg.dev,
          TAG ": upload a %s weight [%d x %d]", ggml_type_name(t), rows, cols);
    int quant = t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16;
    for (size_t ni = 0; ni < sizeof ns / sizeof *ns; ni++) {
        int n = ns[ni];
        for (int tk = 0; tk < n; tk++)
            for (int r = 0; r < rows; r++) {
                double s = 0;
                for (int k = 0; k < cols; k++) /* a BF16 weight multiplies its input rounded to BF16 */
                    s += (double)deq[(size_t)r * cols + k] *
                         (t == GGML_TYPE_BF16 ? bf16_rounded(x[(size_t)tk * cols + k]) : x[(size_t)tk * cols + k]);
                ref[(size_t)tk * rows + r] = (float)s;
            }
        float *xg = dev_from(p.g, x, (size_t)n * cols), *xc = dev_from(p.c, x, (size_t)n * cols);
        float *dg = p.g->alloc(p.g, (size_t)n * rows * sizeof(float)), *dc = p.c->alloc(p.c, (size_t)n * rows * sizeof(float));
        if (!xg || !xc || !dg || !dc) {
            CHECK(0, TAG ": matmul: out of memory");
        } else {
            p.g->matmul(p.g, dg, &wg, xg, n);
            p.c->matmul(p.c, dc, &wc, xc, n);
            host_from(p.g, og, dg, (size_t)n * rows);
            host_from(p.c, oc, dc, (size_t)n * rows);
            int gemm = n >= 9;
            double tol = quant ? 2e-2 : !gemm ? 1e-4 : t == GGML_TYPE_F32 ? 1e-4 : 4e-3;
            double e_ref = rel_err(og, ref, ref, (size_t)n * rows), e_cpu = rel_err(og, oc, ref, (size_t)n * rows);
            CHECK(e_ref <= tol && e_cpu <= tol + 2e-2 * quant,
                  TAG ": matmul %s [%d x %d] n=%d (%s): error %.2g vs exact, %.2g vs the CPU (tolerance %.0e)",
                  ggml_type_name(t), rows, cols, n, gemm ? "cuBLAS path" : "own kernels", e_ref, e_cpu, tol);
        }
        p.g->free(p.g, xg);
        p.c->free(p.c, xc);
        p.g->free(p.g, dg);
        p.c->free(p.c, dc);
    }
    /* batch invariance (KB_EXACT_ROWS): each of 8 rows bit for bit its one-row result (lossless decoding) */
    {
        int n = KB_EXACT_ROWS, bad = 0;
        float *xg = dev_from(p.g, x, (size_t)n * cols), *dg = p.g->alloc(p.g, (size_t)n * rows * sizeof(float));
        if (xg && dg) {
            p.g->matmul(p.g, dg, &wg, xg, n);
            host_from(p.g, og, dg, (size_t)n * rows);
            for (int tk = 0; tk < n; tk++) {
                p.g->matmul(p.g, dg, &wg, xg + (size_t)tk * cols, 1);
                host_from(p.g, oc, dg, (size_t)rows);
                bad += memcmp(og + (size_t)tk * rows, oc, (size_t)rows * sizeof(float)) != 0;
            }
        }
        CHECK(xg && dg && !bad, TAG ": matmul %s [%d x %d]: each of %d rows bit for bit its one-row result (%d differ)",
              ggml_type_name(t), rows, cols, n, bad);
        p.g->free(p.g, xg);
        p.g->free(p.g, dg);
    }
    /* the embedding: rows of any type, exactly the CPU's dequantisation (to
     * F16 rounding for the types stored as F16) */
    {
        int32_t ids[4] = {0, rows - 1, 7, 7};
        float *eg = p.g->alloc(p.g, 4 * (size_t)cols * sizeof(float));
        if (eg) {
            p.g->embed(p.g, eg, &wg, ids, 4);
            host_from(p.g, og, eg, 4 * (size_t)cols);
            double e = 0;
            for (int i = 0; i < 4; i++)
                for (int k = 0; k < cols; k++) {
                    double d = fabs((double)og[(size_t)i * cols + k] - deq[(size_t)ids[i] * cols + k]);
                    e = d > e ? d : e;
                }
            double tol = (f16_on_device(t) ? 1.0 / 2048 : 1e-6) * maxabs(deq, (size_t)rows * cols);
            CHECK(e <= tol, TAG ": embed %s rows: max error %.2g", ggml_type_name(t), e);
        }
        p.g->free(p.g, eg);
    }
    p.g->weight_release(p.g, &wg);
    p.c->weight_release(p.c, &wc);
    CHECK(wg.dev == NULL, TAG ": weight_release %s", ggml_type_name(t));
done:
    free(hw);
    free(hc);
    free(hg);
    free(deq);
    free(x);
    free(ref);
    free(og);
    free(oc);
}

/* Runs OP on both backends over buffers made from the host arrays, compares OUT. */
static void check_elementwise(pair p) {
    enum { N = 3, DIM = 100 };
    float x[N * DIM], y[N * DIM], g[DIM], rg[N * DIM], rc[N * DIM];
    for (int i = 0; i < N * DIM; i++) {
        x[i] = unif() * 3;
        y[i] = unif() * 3;
    }
    for (int i = 0; i < DIM; i++) g[i] = 1 + 0.3f * unif();
    kb_weight wgc = {GGML_TYPE_F32, 1, DIM, g, NULL, sizeof g}, wgg = wgc;
    p.c->weight_upload(p.c, &wgc);
    CHECK(p.g->weight_upload(p.g, &wgg) == 0, TAG ": upload an F32 vector");
    float *xg = dev_from(p.g, x, N * DIM), *yg = dev_from(p.g, y, N * DIM), *og = p.g->alloc(p.g, sizeof x);
    float *xc = dev_from(p.c, x, N * DIM), *yc = dev_from(p.c, y, N * DIM), *oc = p.c->alloc(p.c, sizeof x);
    p.g->rmsnorm(p.g, og, xg, &wgg, N, DIM, 1e-5f);
    p.c->rmsnorm(p.c, oc, xc, &wgc, N, DIM, 1e-5f);
    host_from(p.g, rg, og, N * DIM);
    host_from(p.c, rc, oc, N * DIM);
    CHECK(rel_err(rg, rc, rc, N * DIM) <= 1e-6, TAG ": rmsnorm (error %.2g)", rel_err(rg, rc, rc, N * DIM));
    p.g->add_bias(p.g, xg, &wgg, N);
    p.c->add_bias(p.c, xc, &wgc, N);
    p.g->swiglu(p.g, xg, yg, N * DIM);
    p.c->swiglu(p.c, xc, yc, N * DIM);
    p.g->add(p.g, xg, yg, N * DIM);
    p.c->add(p.c, xc, yc, N * DIM);
    host_from(p.g, rg, xg, N * DIM);
    host_from(p.c, rc, xc, N * DIM);
    CHECK(rel_err(rg, rc, rc, N * DIM) <= 1e-6, TAG ": add_bias, swiglu, add (error %.2g)", rel_err(rg, rc, rc, N * DIM));
    { /* add_rmsnorm: bit for bit add then rmsnorm, its output over y */
        float *x2 = dev_from(p.g, rg, N * DIM), *y2 = dev_from(p.g, y, N * DIM), *o2 = p.g->alloc(p.g, sizeof x);
        float fused[N * DIM], fx[N * DIM], sx[N * DIM];
        int ok = x2 && y2 && o2;
        uint64_t launches = 0;
        if (ok) {
            uint64_t l0 = p.g->launches(p.g);
            kb_add_rmsnorm(p.g, x2, y2, y2, &wgg, N, DIM, 1e-5f);
            launches = p.g->launches(p.g) - l0;
            host_from(p.g, fused, y2, N * DIM);
            host_from(p.g, fx, x2, N * DIM);
            p.g->to_backend(p.g, x2, rg, sizeof x);
            p.g->to_backend(p.g, y2, y, sizeof y);
            p.g->add(p.g, x2, y2, N * DIM);
            p.g->rmsnorm(p.g, o2, x2, &wgg, N, DIM, 1e-5f);
            host_from(p.g, rc, o2, N * DIM);
            host_from(p.g, sx, x2, N * DIM);
            ok = !memcmp(fused, rc, sizeof fused) && !memcmp(fx, sx, sizeof fx);
        }
        CHECK(ok && launches == 1, TAG ": add_rmsnorm in one launch (%llu), its output over y: bit for bit add then rmsnorm",
              (unsigned long long)launches);
        p.g->free(p.g, x2);
        p.g->free(p.g, y2);
        p.g->free(p.g, o2);
    }
    p.g->scale(p.g, xg, 0.37f, N * DIM);
    p.c->scale(p.c, xc, 0.37f, N * DIM);
    p.g->geglu(p.g, xg, yg, N * DIM);
    p.c->geglu(p.c, xc, yc, N * DIM);
    host_from(p.g, rg, xg, N * DIM);
    host_from(p.c, rc, xc, N * DIM);
    CHECK(rel_err(rg, rc, rc, N * DIM) <= 1e-6, TAG ": scale, geglu (error %.2g)", rel_err(rg, rc, rc, N * DIM));
    p.g->weight_release(p.g, &wgg);
    p.c->weight_release(p.c, &wgc);
    p.g->free(p.g, xg);
    p.g->free(p.g, yg);
    p.g->free(p.g, og);
    p.c->free(p.c, xc);
    p.c->free(p.c, yc);
    p.c->free(p.c, oc);
}

/* matmul_many: three weights of type T (40, 24 and 24 rows of COLS) times
 * the same input, bit for bit the three matmul calls, in fewer launches
 * (one quantisation, one matvec for all three) for the own kernels (up to
 * 8 rows; 12 go through cuBLAS, or with ILPD_CUDA_GEMM_MIN_N=0 through the
 * own kernels in two launches); the same with weights of two types (one
 * call each). */
static void check_matmul_many(pair p, ggml_type t, ggml_type other, int cols) {
    enum { N_MAX = 12 };
    const int rows[3] = {40, 24, 24};
    kb_weight w[3];
    uint8_t *host[3] = {NULL, NULL, NULL};
    float *x = malloc((size_t)N_MAX * cols * sizeof(float)), *a = malloc((size_t)N_MAX * 40 * sizeof(float)),
          *b = malloc((size_t)N_MAX * 40 * sizeof(float));
    float *xg = NULL, *one[3] = {NULL, NULL, NULL}, *many[3] = {NULL, NULL, NULL};
    int ok = x && a && b, bad = 0, fewer = 1;
    for (int i = 0; i < 3; i++) {
        ggml_type ti = i == 2 ? other : t;
        size_t rb = ggml_row_bytes(ti, (uint64_t)cols), bytes = rb * rows[i];
        host[i] = malloc(bytes);
        w[i] = (kb_weight){ti, rows[i], cols, host[i], NULL, bytes};
        if (!host[i]) {
            ok = 0;
            continue;
        }
        fill_weight(ti, host[i], bytes);
        ok = ok && p.g->weight_upload(p.g, &w[i]) == 0;
        one[i] = p.g->alloc(p.g, (size_t)N_MAX * rows[i] * sizeof(float));
        many[i] = p.g->alloc(p.g, (size_t)N_MAX * rows[i] * sizeof(float));
        ok = ok && one[i] && many[i];
    }
    if (ok) {
        for (size_t i = 0; i < (size_t)N_MAX * cols; i++) x[i] = unif();
        xg = dev_from(p.g, x, (size_t)N_MAX * cols);
        ok = xg != NULL;
    }
    const int ns[] = {1, 3, 8, N_MAX};
    for (size_t ni = 0; ok && ni < sizeof ns / sizeof *ns; ni++) {
        int n = ns[ni];
        uint64_t l0 = p.g->launches(p.g);
        for (int i = 0; i < 3; i++) p.g->matmul(p.g, one[i], &w[i], xg, n);
        uint64_t l1 = p.g->launches(p.g);
        const kb_weight *ws[3] = {&w[0], &w[1], &w[2]};
        kb_matmul_many(p.g, many, ws, 3, xg, n);
        uint64_t l2 = p.g->launches(p.g);
        fewer = fewer && (t != other || n > KB_EXACT_ROWS || l2 - l1 < l1 - l0);
        for (int i = 0; i < 3; i++) {
            host_from(p.g, a, one[i], (size_t)n * rows[i]);
            host_from(p.g, b, many[i], (size_t)n * rows[i]);
            bad += memcmp(a, b, (size_t)n * rows[i] * sizeof(float)) != 0;
        }
    }
    CHECK(ok && !bad && fewer && !kb_error(p.g),
          TAG ": matmul_many %s, %s and %s [40/24/24 x %d] n=1,3,8,12: bit for bit three matmul calls (%d differ)%s",
          ggml_type_name(t), ggml_type_name(t), ggml_type_name(other), cols, bad,
          t == other ? ", in fewer launches" : "");
    p.g->free(p.g, xg);
    for (int i = 0; i < 3; i++) {
        if (host[i]) p.g->weight_release(p.g, &w[i]);
        p.g->free(p.g, one[i]);
        p.g->free(p.g, many[i]);
        free(host[i]);
    }
    free(x);
    free(a);
    free(b);
}

/* swiglu_matmul: a weight of type T (40 rows of COLS) times silu(gate) *
 * up, bit for bit swiglu then matmul, for 1, 3, 8 and 12 rows; for the
 * quantised types up to 8 rows in a launch fewer (SwiGLU applied as the
 * input is quantised). */
/* Right after the launch that wrote X (N rows of W's width, device memory),
 * W's matmul into OUT, then again after one more launch (an addition of
 * ZERO, device zeros): the matmul quantises X itself then. HA and HB get
 * the two results (host). Returns 1 when they differ, or when the first
 * did not take one launch fewer although FEWER says it should. */
static int matmul_after(kb_backend *g, const kb_weight *w, float *x, int n, const float *zero, float *out, float *ha,
                        float *hb, int fewer) {
    uint64_t l0 = g->launches(g);
    g->matmul(g, out, w, x, n);
    uint64_t l1 = g->launches(g);
    host_from(g, ha, out, (size_t)n * w->rows);
    g->add(g, x, zero, (size_t)n * w->cols);
    uint64_t l2 = g->launches(g);
    g->matmul(g, out, w, x, n);
    uint64_t l3 = g->launches(g);
    host_from(g, hb, out, (size_t)n * w->rows);
    return memcmp(ha, hb, (size_t)n * w->rows * sizeof(float)) != 0 || (fewer && l1 - l0 + 1 != l3 - l2);
}

/* rmsnorm (and add_rmsnorm) then matmul: the norm quantises its output for
 * a quantised matmul right after, which skips its own quantisation (a
 * launch fewer), bit for bit the same as when another launch comes between
 * them (an addition of zeros: the matmul quantises again). */
static void check_norm_matmul(pair p, ggml_type t, int cols) {
    enum { ROWS = 40, N_MAX = 8 };
    size_t rb = ggml_row_bytes(t, (uint64_t)cols), nx = (size_t)N_MAX * cols;
    uint8_t *host = malloc(rb * ROWS);
    float *x = malloc(nx * sizeof(float)), *y = malloc(nx * sizeof(float)), *gv = malloc((size_t)cols * sizeof(float));
    float *zero = calloc(nx, sizeof(float)), *a = malloc((size_t)N_MAX * ROWS * 4), *b = malloc((size_t)N_MAX * ROWS * 4);
    kb_weight w = {t, ROWS, cols, host, NULL, rb * ROWS}, g = {GGML_TYPE_F32, 1, cols, gv, NULL, (size_t)cols * 4};
    int ok = host && x && y && gv && zero && a && b, bad = 0;
    if (ok) {
        fill_weight(t, host, rb * ROWS);
        for (size_t i = 0; i < nx; i++) {
            x[i] = unif() * 3;
            y[i] = unif();
        }
        for (int i = 0; i < cols; i++) gv[i] = 1 + 0.3f * unif();
        ok = p.g->weight_upload(p.g, &w) == 0 && p.g->weight_upload(p.g, &g) == 0;
    }
    float *xg = ok ? p.g->alloc(p.g, nx * 4) : NULL, *yg = ok ? dev_from(p.g, y, nx) : NULL;
    float *zg = ok ? dev_from(p.g, zero, nx) : NULL, *xb = ok ? p.g->alloc(p.g, nx * 4) : NULL;
    float *o = ok ? p.g->alloc(p.g, (size_t)N_MAX * ROWS * 4) : NULL;
    ok = ok && xg && yg && zg && xb && o;
    const int ns[] = {1, 3, N_MAX};
    for (int v = 0; ok && v < 6; v++) {
        int n = ns[v % 3];
        p.g->to_backend(p.g, xg, x, nx * 4);
        if (v >= 3)
            p.g->add_rmsnorm(p.g, xg, yg, xb, &g, n, cols, 1e-5f);
        else
            p.g->rmsnorm(p.g, xb, xg, &g, n, cols, 1e-5f);
        bad += matmul_after(p.g, &w, xb, n, zg, o, a, b, 1);
    }
    CHECK(ok && !bad && !kb_error(p.g),
          TAG ": rmsnorm and add_rmsnorm then matmul %s [40 x %d] n=1,3,8: the norm quantises for the matmul, a launch "
              "fewer, bit for bit (%d differ or not fewer)",
          ggml_type_name(t), cols, bad);
    if (host && w.dev) p.g->weight_release(p.g, &w);
    if (gv && g.dev) p.g->weight_release(p.g, &g);
    float *bufs[] = {xg, yg, zg, xb, o};
    for (int i = 0; i < 5; i++) p.g->free(p.g, bufs[i]);
    free(host);
    free(x);
    free(y);
    free(gv);
    free(zero);
    free(a);
    free(b);
}

static void check_swiglu_matmul(pair p, ggml_type t, int cols) {
    enum { ROWS = 40, N_MAX = 12 };
    size_t rb = ggml_row_bytes(t, (uint64_t)cols), nx = (size_t)N_MAX * cols;
    uint8_t *host = malloc(rb * ROWS);
    float *g = malloc(nx * sizeof(float)), *u = malloc(nx * sizeof(float)), *a = malloc((size_t)N_MAX * ROWS * 4),
          *b = malloc((size_t)N_MAX * ROWS * 4);
    kb_weight w = {t, ROWS, cols, host, NULL, rb * ROWS};
    int ok = host && g && u && a && b, bad = 0, fewer = 1;
    if (ok) {
        fill_weight(t, host, rb * ROWS);
        for (size_t i = 0; i < nx; i++) {
            g[i] = unif() * 4;
            u[i] = unif() * 2;
        }
        ok = p.g->weight_upload(p.g, &w) == 0;
    }
    float *gg = ok ? p.g->alloc(p.g, nx * 4) : NULL, *ug = ok ? dev_from(p.g, u, nx) : NULL;
    float *o = ok ? p.g->alloc(p.g, (size_t)N_MAX * ROWS * 4) : NULL;
    ok = ok && gg && ug && o;
    int quant = t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16;
    const int ns[] = {1, 3, 8, N_MAX};
    for (size_t ni = 0; ok && ni < sizeof ns / sizeof *ns; ni++) {
        int n = ns[ni];
        p.g->to_backend(p.g, gg, g, nx * 4);
        uint64_t l0 = p.g->launches(p.g);
        kb_swiglu_matmul(p.g, o, &w, gg, ug, n);
        uint64_t l1 = p.g->launches(p.g);
        host_from(p.g, a, o, (size_t)n * ROWS);
        p.g->to_backend(p.g, gg, g, nx * 4);
        uint64_t l2 = p.g->launches(p.g);
        p.g->swiglu(p.g, gg, ug, (size_t)n * cols);
        p.g->matmul(p.g, o, &w, gg, n);
        uint64_t l3 = p.g->launches(p.g);
        host_from(p.g, b, o, (size_t)n * ROWS);
        bad += memcmp(a, b, (size_t)n * ROWS * sizeof(float)) != 0;
        fewer = fewer && (!quant || n > KB_EXACT_ROWS || l1 - l0 < l3 - l2);
    }
    CHECK(ok && !bad && fewer && !kb_error(p.g),
          TAG ": swiglu_matmul %s [40 x %d] n=1,3,8,12: bit for bit swiglu then matmul (%d differ)%s", ggml_type_name(t),
          cols, bad, quant ? ", a launch fewer up to 8 rows" : "");
    if (host && w.dev) p.g->weight_release(p.g, &w);
    p.g->free(p.g, gg);
    p.g->free(p.g, ug);
    p.g->free(p.g, o);
    free(host);
    free(g);
    free(u);
    free(a);
    free(b);
}

/* A kernel that fails (a test's injected fault, taken where a failed launch
 * is reported) is recorded in the backend's error state, which sticks until
 * cleared; the same operation then runs as on the CPU. */
static void check_fault(pair p) {
    enum { ROWS = 48, COLS = 64, N = 3 };
    static float w[ROWS * COLS], x[N * COLS], rg[N * ROWS], rc[N * ROWS];
    for (int i = 0; i < ROWS * COLS; i++) w[i] = unif();
    for (int i = 0; i < N * COLS; i++) x[i] = unif();
    kb_weight wg = {GGML_TYPE_F32, ROWS, COLS, w, NULL, sizeof w}, wc = wg;
    float *xg = dev_from(p.g, x, N * COLS), *og = p.g->alloc(p.g, sizeof rg);
    float *xc = dev_from(p.c, x, N * COLS), *oc = p.c->alloc(p.c, sizeof rc);
    if (!xg || !og || !xc || !oc || p.g->weight_upload(p.g, &wg) || p.c->weight_upload(p.c, &wc)) {
        CHECK(0, TAG ": fault injection: out of memory");
        goto done;
    }
    kb_error_clear(p.g);
    p.g->fail_at = p.g->launches(p.g) + 1;
    p.g->matmul(p.g, og, &wg, xg, N);
    p.g->add(p.g, og, og, N * ROWS); /* runs, but the first failure stays the one reported */
    p.g->sync(p.g);
    const char *why = kb_error(p.g);
    CHECK(why && strstr(why, "injected fault") && strstr(why, "mat"),
          TAG ": a failed kernel is recorded and sticks (\"%s\")", why ? why : "no error");
    kb_error_clear(p.g);
    p.g->matmul(p.g, og, &wg, xg, N);
    p.c->matmul(p.c, oc, &wc, xc, N);
    host_from(p.g, rg, og, N * ROWS);
    host_from(p.c, rc, oc, N * ROWS);
    CHECK(!kb_error(p.g) && rel_err(rg, rc, rc, N * ROWS) <= 1e-4,
          TAG ": after kb_error_clear the same matmul runs as on the CPU (error %.2g)", rel_err(rg, rc, rc, N * ROWS));
done:
    p.g->weight_release(p.g, &wg);
    p.c->weight_release(p.c, &wc);
    p.g->free(p.g, xg);
    p.g->free(p.g, og);
    p.c->free(p.c, xc);
    p.c->free(p.c, oc);
}

/* ---- pick: the next token chosen on the device ---- */

static const float *pick_sort_logits; /* qsort's context: the row being ordered */

/* sampler.c's order: the larger logit first, the lower id on ties */
static int pick_cmp(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    float x = pick_sort_logits[i], y = pick_sort_logits[j];
    if (x != y) return x > y ? -1 : 1;
    return i - j;
}

/* The order the device (and sampler.c) walks a row in when it draws: the
 * whole row in id order, else best first. */
static void pick_walk_order(const float *row, int width, int whole, int *order) {
    for (int i = 0; i < width; i++) order[i] = i;
    if (whole) return;
    pick_sort_logits = row;
    qsort(order, (size_t)width, sizeof *order, pick_cmp);
}

/* ROWS rows of WIDTH logits (LOGITS, host) picked on the device as P says,
 * each with uniforms U[j]: every pick must be one sampler.c's
 * distribution gives weight and whose share of it, in the device's walking
 * order, holds U (within 1e-5), and top/second must be sampler.c's bit for
 * bit; greedy picks must be sampler_argmax's. WANT_NONE: every row is one
 * the device leaves to the host (id -1). Returns the picks made. */
static int pick_rows(pair p, const float *logits, int rows, int width, kb_pick_params pp, const float *u, int n_u,
                     int want_none, const char *what) {
    float *d = dev_from(p.g, logits, (size_t)rows * width), *probs = malloc(sizeof(float) * (size_t)width);
    int *order = malloc(sizeof(int) * (size_t)width), bad = 0, made = 0, none = 0;
    kb_pick *out = malloc(sizeof(kb_pick) * (size_t)rows);
    float *us = malloc(sizeof(float) * (size_t)rows);
    sampler sm;
    if (!d || !probs || !order || !out || !us || sampler_init(&sm, width, pp.temperature, pp.top_p, pp.top_k, 1)) {
        CHECK(0, TAG ": pick %s: out of memory", what);
        goto done;
    }
    for (int j = 0; j < n_u; j++) {
        for (int r = 0; r < rows; r++) us[r] = u[(j + r) % n_u];
        p.g->pick(p.g, out, d, rows, width, &pp, us);
        if (kb_error(p.g)) {
            CHECK(0, TAG ": pick %s: %s", what, kb_error(p.g));
            kb_error_clear(p.g);
            goto done;
        }
        for (int r = 0; r < rows; r++) {
            const float *row = logits + (size_t)r * width;
            int am = sampler_argmax(row, width);
            float margin = sampler_margin(row, width);
            if (out[r].top != row[am] || out[r].top - out[r].second != margin) bad++;
            if (out[r].id < 0) {
                none++;
                continue;
            }
            made++;
            if (pp.temperature <= 0) {
                bad += out[r].id != am;
                continue;
            }
            sampler_probs(&sm, row, probs);
            pick_walk_order(row, width, pp.top_k >= width && pp.top_p >= 1, order);
            double before = 0;
            int k = 0;
            while (k < width && order[k] != out[r].id) before += probs[order[k++]];
            if (k == width || probs[out[r].id] <= 0 || us[r] < before - 1e-5 || us[r] > before + probs[out[r].id] + 1e-5)
                bad++;
        }
    }
    if (want_none)
        CHECK(none == rows * n_u && !bad, TAG ": pick %s: every row left to the host (%d of %d), top and second exact",
              what, none, rows * n_u);
    else
        CHECK(!bad && !none, TAG ": pick %s: %d picks where sampler.c's distribution puts them, top and second exact "
              "(%d wrong, %d left to the host)", what, made, bad, none);
done:
    if (pp.temperature > 0) sampler_free(&sm);
    p.g->free(p.g, d);
    free(probs);
    free(order);
    free(out);
    free(us);
    return made;
}

static void check_pick(pair p) {
    if (!p.g->pick) {
        SKIP(TAG ": pick: the backend has none");
        return;
    }
    enum { ROWS = 20, W_SMALL = 320, W_WIDE = 5000 };
    float *small = malloc(sizeof(float) * ROWS * W_SMALL), *wide = malloc(sizeof(float) * ROWS * W_WIDE);
    float *flat = malloc(sizeof(float) * 2 * W_WIDE);
    float u[32];
    if (!small || !wide || !flat) {
        CHECK(0, TAG ": pick: out of memory");
        goto done;
    }
    for (int i = 0; i < 32; i++) u[i] = (i + 0.37f) / 32;
    u[31] = 0.99999994f; /* the largest float below 1 */
    for (int i = 0; i < ROWS * W_SMALL; i++) small[i] = 3 * unif();
    /* wide rows: a quarter within reach, the rest far below (candidates < 2048) */
    for (int i = 0; i < ROWS * W_WIDE; i++) wide[i] = 3 * unif() - (i % 4 ? 40 : 0);
    for (int i = 0; i < 2 * W_WIDE; i++) flat[i] = 3 * unif();
    /* ties: the largest twice (the lower id wins, the margin is 0), and a row of equal logits */
    small[7] = small[300] = 9;
    wide[W_WIDE + 4100] = wide[W_WIDE + 1100] = 20;
    for (int i = 0; i < W_SMALL; i++) small[2 * W_SMALL + i] = -1.5f;
    kb_pick_params greedy = {0, W_SMALL, 1}, whole = {1, 1 << 30, 1}, top_k = {0.7f, 40, 1}, top_p = {1.3f, 1 << 30, 0.9f},
                   both = {1, 50, 0.8f}, cold = {0.05f, 1 << 30, 0.95f};
    pick_rows(p, small, 9, W_SMALL, greedy, u, 1, 0, "greedy, 9 rows of 320 (ties)");
    pick_rows(p, wide, ROWS, W_WIDE, greedy, u, 1, 0, "greedy, 20 rows of 5000 (two launches)");
    pick_rows(p, small, ROWS, W_SMALL, whole, u, 32, 0, "temperature 1 over the whole row, 320");
    pick_rows(p, wide, 3, W_WIDE, whole, u, 32, 0, "temperature 1 over the whole row, 5000");
    pick_rows(p, small, 4, W_SMALL, top_k, u, 32, 0, "top-k 40 at temperature 0.7");
    pick_rows(p, wide, 3, W_WIDE, top_p, u, 32, 0, "top-p 0.9 at temperature 1.3, 5000");
    pick_rows(p, small, 4, W_SMALL, both, u, 32, 0, "top-k 50 and top-p 0.8");
    pick_rows(p, wide, 2, W_WIDE, cold, u, 32, 0, "top-p 0.95 at temperature 0.05");
    /* left to the host: 5000 logits within reach of the largest, or a top k past the candidates */
    pick_rows(p, flat, 2, W_WIDE, top_k, u, 2, 1, "top-k over more than 2048 candidates");
    kb_pick_params past = {1, 3000, 1};
    pick_rows(p, wide, 2, W_WIDE, past, u, 2, 1, "top-k 3000 past 1250 candidates");
done:
    free(small);
    free(wide);
    free(flat);
}

/* ---- the engine with the backend picking, against the engine without ---- */

/* the backend's own pick, which counting_pick counts the rows of */
static void (*real_pick)(kb_backend *, kb_pick *, const float *, int, int, const kb_pick_params *, const float *);
static int picks_made;

static void counting_pick(kb_backend *kb, kb_pick *out, const float *logits, int n, int width,
                          const kb_pick_params *pp, const float *u) {
    picks_made += n;
    real_pick(kb, out, logits, n, width, pp, u);
}

typedef struct {
    char text[2048];
    size_t len;
    int32_t ids[256];
    int n_ids;
    engine_result res;
} pick_out;

static int pick_on_text(void *ud, const char *text, size_t len) {
    pick_out *o = ud;
    if (o->len + len < sizeof o->text) {
        memcpy(o->text + o->len, text, len);
        o->len += len;
        o->text[o->len] = 0;
    }
    return 0;
}

static int pick_on_token(void *ud, int32_t id) {
    pick_out *o = ud;
    if (o->n_ids < 256) o->ids[o->n_ids++] = id;
    return 0;
}

/* An engine on a new emulated (or real) GPU; PICK 0: its backend without pick. */
static engine *pick_engine(const char *model, const char *probe, int pick) {
    char err[512];
    kb_backend *kb = GPU_CREATE(0, err, sizeof err);
    if (!kb) return NULL;
    if (!pick) kb->pick = NULL;
    else if (kb->pick) {
        real_pick = kb->pick;
        kb->pick = counting_pick;
    }
    engine_params p = {.model_path = model, .n_threads = 1, .device = ENGINE_DEVICE_CUDA, .backend = kb,
                       .layer_skip = 1, .probe_path = probe, .spec_always = 1};
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) printf("# %s\n", err);
    return e;
}

/* The demo model's requests through two engines on the GPU, one whose
 * backend picks the tokens (kb->pick) and one whose logits go to the host:
 * greedy and sampled (same seed), plain, lossless and approximate (its
 * gate), free and under a JSON schema, must give the same tokens, and the
 * first must have picked. */
static void check_engine_pick(const char *model, const char *probe) {
    engine *a = pick_engine(model, probe, 1), *b = pick_engine(model, probe, 0);
    CHECK(a && b, TAG ": pick: open the demo model twice");
    if (!a || !b || !real_pick) {
        if (a && b) SKIP(TAG ": pick in the engine: the backend has none");
        engine_close(a);
        engine_close(b);
        return;
    }
    static const char *prompts[] = {
        "<s><|im_start|>system\nYou are a customer support assistant. Classify the message. Reply only with "
        "JSON.<|im_end|>\n<|im_start|>user\nClassify this customer message as shipping, returns, product or "
        "payment.\nMessage: The tracking number you sent me for the cat tree does not work.<|im_end|>\n"
        "<|im_start|>assistant\n",
        "<s><|im_start|>system\nYou are a storyteller for young children.<|im_end|>\n<|im_start|>user\nTell me a "
        "story about a boat.<|im_end|>\n<|im_start|>assistant\n"};
    static const char schema[] = "{\"type\":\"object\",\"properties\":{\"mood\":{\"type\":\"string\",\"enum\":"
                                 "[\"happy\",\"sad\"]},\"count\":{\"type\":\"integer\"}},\"required\":[\"mood\","
                                 "\"count\"]}";
    static const struct {
        const char *what;
        int prompt;
        engine_skip_mode mode;
        float temp, top_p;
        int top_k;
        float gate;
        const char *schema;
        int picks; /* 1: the device must pick; 0: it may */
    } runs[] = {
        {"greedy, full depth", 0, ENGINE_SKIP_OFF, 0, 1, 0, 0, NULL, 1},
        {"greedy, lossless (drafts and verifications picked)", 0, ENGINE_SKIP_LOSSLESS, 0, 1, 0, 0, NULL, 1},
        {"greedy, approximate, gated", 0, ENGINE_SKIP_APPROXIMATE, 0, 1, 0, 4.0f, NULL, 1},
        {"temperature 0.8", 1, ENGINE_SKIP_OFF, 0.8f, 1, 0, 0, NULL, 1},
        {"temperature 1, top-k 20", 1, ENGINE_SKIP_OFF, 1, 1, 20, 0, NULL, 1},
        {"temperature 1, top-k 40, top-p 0.9", 1, ENGINE_SKIP_OFF, 1, 0.9f, 40, 0, NULL, 1},
        {"temperature 0.7, lossless (drafts and verifications drawn on the host)", 0, ENGINE_SKIP_LOSSLESS, 0.7f, 1,
         0, 0, NULL, 0},
        {"greedy under a JSON schema", 0, ENGINE_SKIP_OFF, 0, 1, 0, 0, schema, 1},
        {"temperature 1 under a JSON schema", 1, ENGINE_SKIP_OFF, 1, 1, 0, 0, schema, 1},
    };
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        int32_t *tokens = NULL;
        int n = engine_tokenize(a, prompts[runs[r].prompt], 1, &tokens);
        pick_out o[2];
        int before = picks_made, masks = 0;
        for (int i = 0; i < 2 && n > 0; i++) {
            memset(&o[i], 0, sizeof o[i]);
            engine_gen_params gp = {.max_tokens = 12, .temperature = runs[r].temp, .top_p = runs[r].top_p,
                                    .top_k = runs[r].top_k, .seed = 11 + r, .skip_mode = runs[r].mode,
                                    .gate_margin = runs[r].gate, .format_schema = runs[r].schema, .cache_off = 1,
                                    .lookup_off = 1};
            engine_callbacks cb = {.on_text = pick_on_text, .on_token = pick_on_token, .ud = &o[i]};
            engine_generate(i ? b : a, tokens, n, &gp, &cb, &o[i].res);
            masks += o[i].res.n_masks;
        }
        int same = n > 0 && o[0].n_ids == o[1].n_ids && !memcmp(o[0].ids, o[1].ids, sizeof(int32_t) * o[0].n_ids) &&
                   o[0].res.reason == o[1].res.reason && o[0].res.reason != ENGINE_STOP_ERROR;
        int picked = picks_made - before;
        CHECK(same && (picked > 0 || !runs[r].picks),
              TAG ": pick in the engine, %s: the same %d tokens as from host logits (%d picked on the device; %d "
              "drafted, %d layers skipped, gated at %d, %d grammar masks; \"%.30s\")",
              runs[r].what, o[0].n_ids, picked, o[0].res.n_drafted, o[0].res.n_skipped, o[0].res.gated_at, masks,
              o[0].text);
        free(tokens);
    }
    engine_close(a);
    engine_close(b);
    real_pick = NULL;
}

static void check_rope(pair p, int neox, float mscale) {
    enum { N = 4, H = 4, HD = 16 };
    float x[N * H * HD], rg[N * H * HD], rc[N * H * HD], inv[HD / 2];
    for (int i = 0; i < N * H * HD; i++) x[i] = unif();
    for (int k = 0; k < HD / 2; k++) inv[k] = (float)pow(10000.0, -2.0 * k / HD);
    kb_attn_shape s = {H, H, HD, neox, inv, mscale, 0, 0, 0};
    float *xg = dev_from(p.g, x, N * H * HD), *xc = dev_from(p.c, x, N * H * HD);
    p.g->rope(p.g, xg, N, H, &s, 1000);
    p.c->rope(p.c, xc, N, H, &s, 1000);
    host_from(p.g, rg, xg, N * H * HD);
    host_from(p.c, rc, xc, N * H * HD);
    CHECK(rel_err(rg, rc, rc, N * H * HD) <= 1e-6, TAG ": rope (%s, mscale %g) at positions 1000.. (error %.2g)",
          neox ? "neox" : "normal", mscale, rel_err(rg, rc, rc, N * H * HD));
    /* rope_qk: the queries' H heads and keys' H/2, bit for bit the two calls, in one launch */
    enum { KH = H / 2 };
    float k[N * KH * HD], qa[N * H * HD], ka[N * KH * HD], qb[N * H * HD], kbuf[N * KH * HD];
    for (int i = 0; i < N * KH * HD; i++) k[i] = unif();
    float *qg = dev_from(p.g, x, N * H * HD), *kg = dev_from(p.g, k, N * KH * HD);
    int ok = qg && kg;
    uint64_t launches = 0;
    if (ok) {
        uint64_t l0 = p.g->launches(p.g);
        kb_rope_qk(p.g, qg, kg, N, H, KH, &s, 1000);
        launches = p.g->launches(p.g) - l0;
        host_from(p.g, qa, qg, N * H * HD);
        host_from(p.g, ka, kg, N * KH * HD);
        p.g->to_backend(p.g, qg, x, sizeof x);
        p.g->to_backend(p.g, kg, k, sizeof k);
        p.g->rope(p.g, qg, N, H, &s, 1000);
        p.g->rope(p.g, kg, N, KH, &s, 1000);
        host_from(p.g, qb, qg, N * H * HD);
        host_from(p.g, kbuf, kg, N * KH * HD);
        ok = !memcmp(qa, qb, sizeof qa) && !memcmp(ka, kbuf, sizeof ka);
    }
    CHECK(ok && launches == 1, TAG ": rope_qk (%s) in one launch (%llu): bit for bit rope of q, then of k",
          neox ? "neox" : "normal", (unsigned long long)launches);
    p.g->free(p.g, qg);
    p.g->free(p.g, kg);
    p.g->free(p.g, xg);
    p.c->free(p.c, xc);
}

/* Prefill chunks and decode steps through both backends' KV caches: a
 * short context (a 70-row prompt, then 1-, 3- and 16-row steps), or with
 * LONG a 576-position prompt in chunks of 64 (as the engine sends it) and
 * decode steps, whose attention is split over the positions
 * (flash-decoding) and merged. WINDOW > 0: a sliding window of that many
 * positions and a score scale of its own (Gemma's local layers). */
/* ROPE: 0, or the queries and keys rotated by attention_rope (1: adjacent
 * pairs; 2: NeoX pairs, cos and sin scaled by 1.25) on both backends (the
 * GPU's decode kernel rotates them itself). */
static void check_attention(pair p, kb_kv_type kt, int hd, int long_ctx, int window, int H, int KVH, int rope) {
    int kvd = KVH * hd, ctx = long_ctx ? 640 : 96;
    int steps[32][2], n_steps = 0;
    if (long_ctx) {
        for (int pos = 0; pos < 576; pos += 64) steps[n_steps][0] = pos, steps[n_steps++][1] = 64;
        for (int pos = 576; pos < 580; pos++) steps[n_steps][0] = pos, steps[n_steps++][1] = 1;
    } else {
        const int s0[][2] = {{0, 1}, {1, 2}, {3, 67}, {70, 1}, {71, 1}, {72, 3}, {75, 16}, {91, 1}};
        for (size_t i = 0; i < sizeof s0 / sizeof *s0; i++) steps[n_steps][0] = s0[i][0], steps[n_steps++][1] = s0[i][1];
    }
    float inv[512];
    for (int k = 0; k < hd / 2; k++) inv[k] = (float)pow(10000.0, -2.0 * k / hd);
    kb_attn_shape s = {H, KVH, hd, rope == 2, inv, rope == 2 ? 1.25f : 0, window ? 0.2f : 0, window, 0};
    size_t kvb = kb_kv_bytes(kt, ctx, kvd);
    kb_kv cg = {p.g->alloc(p.g, kvb), p.g->alloc(p.g, kvb), kt, ctx, kvd, hd};
    kb_kv cc = {p.c->alloc(p.c, kvb), p.c->alloc(p.c, kvb), kt, ctx, kvd, hd};
    kb_scratch_shape sh = {64, 64, ctx, &s};
    int ok = cg.k && cg.v && cc.k && cc.v && p.g->reserve(p.g, &sh) == 0 && p.c->reserve(p.c, &sh) == 0;
    if (!ok) CHECK(0, TAG ": attention: out of memory for the KV caches");
    /* decode steps' output goes to a Q8_0 projection right after (quantised by attention) */
    enum { PROJ = 16 };
    int qd = H * hd, proj_bad = 0, proj_n = 0;
    size_t prb = ggml_row_bytes(GGML_TYPE_Q8_0, (uint64_t)qd);
    uint8_t *ph = malloc(prb * PROJ);
    float *zh = calloc((size_t)8 * qd, sizeof(float)), *pa = malloc(8 * PROJ * 4), *pb = malloc(8 * PROJ * 4);
    kb_weight pw = {GGML_TYPE_Q8_0, PROJ, qd, ph, NULL, prb * PROJ};
    if (ph) fill_weight(GGML_TYPE_Q8_0, ph, prb * PROJ);
    int proj = ok && ph && zh && pa && pb && p.g->weight_upload(p.g, &pw) == 0;
    float *zg = proj ? dev_from(p.g, zh, (size_t)8 * qd) : NULL, *po = proj ? p.g->alloc(p.g, 8 * PROJ * 4) : NULL;
    proj = proj && zg && po;
    double worst = 0;
    for (int si = 0; ok && si < n_steps; si++) {
        int pos0 = steps[si][0], n = steps[si][1];
        size_t nq = (size_t)n * H * hd, nk = (size_t)n * kvd;
        float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *rg = malloc(nq * 4), *rc = malloc(nq * 4);
        float *qg = NULL, *kg = NULL, *vg = NULL, *og = NULL, *qc = NULL, *kc = NULL, *vc = NULL, *oc = NULL;
        if (!q || !k || !v || !rg || !rc) {
            CHECK(0, TAG ": attention: out of host memory");
            ok = 0;
            goto next;
        }
        for (size_t i = 0; i < nq; i++) q[i] = unif() * 2;
        for (size_t i = 0; i < nk; i++) {
            k[i] = unif() * 2;
            v[i] = unif();
        }
        qg = dev_from(p.g, q, nq), kg = dev_from(p.g, k, nk), vg = dev_from(p.g, v, nk), og = p.g->alloc(p.g, nq * 4);
        qc = dev_from(p.c, q, nq), kc = dev_from(p.c, k, nk), vc = dev_from(p.c, v, nk), oc = p.c->alloc(p.c, nq * 4);
        if (!qg || !kg || !vg || !og || !qc || !kc || !vc || !oc) {
            CHECK(0, TAG ": attention: out of backend memory");
            ok = 0;
            goto next;
        }
        if (rope)
            kb_attention_rope(p.g, og, qg, kg, vg, &cg, n, pos0, &s);
        else
            p.g->attention(p.g, og, qg, kg, vg, &cg, n, pos0, &s);
        if (proj && n <= 8) {
            /* the decode kernel (n x H/KVH rows <= 8) quantises its output, always */
            proj_bad += matmul_after(p.g, &pw, og, n, zg, po, pa, pb, hd % 32 == 0 && n * (H / KVH) <= 8);
            proj_n++;
        }
        if (rope)
            kb_attention_rope(p.c, oc, qc, kc, vc, &cc, n, pos0, &s);
        else
            p.c->attention(p.c, oc, qc, kc, vc, &cc, n, pos0, &s);
        host_from(p.g, rg, og, nq);
        host_from(p.c, rc, oc, nq);
        double e = rel_err(rg, rc, rc, nq);
        if (!long_ctx || e > 1e-5)
            CHECK(e <= 1e-5, TAG ": attention%s (KV %s, head size %d, %d/%d heads, window %d) %d queries at %d (error %.2g)",
                  rope ? " with RoPE" : "", kt == KB_KV_F16 ? "F16" : "F32", hd, H, KVH, window, n, pos0, e);
        worst = e > worst ? e : worst;
        ok = e <= 1e-5;
    next:
        p.g->free(p.g, qg);
        p.g->free(p.g, kg);
        p.g->free(p.g, vg);
        p.g->free(p.g, og);
        p.c->free(p.c, qc);
        p.c->free(p.c, kc);
        p.c->free(p.c, vc);
        p.c->free(p.c, oc);
        free(q);
        free(k);
        free(v);
        free(rg);
        free(rc);
    }
    if (long_ctx && ok)
        CHECK(1, TAG ": attention%s (KV %s, head size %d, %d/%d heads, window %d) over 580 positions: 9 prompt chunks "
                     "of 64, 4 split decode steps (worst error %.2g)",
              rope ? " with RoPE" : "", kt == KB_KV_F16 ? "F16" : "F32", hd, H, KVH, window, worst);
    CHECK(proj && proj_n > 0 && !proj_bad,
          TAG ": attention (head size %d, %d/%d heads) then a Q8_0 projection, %d decode steps: %s, bit for bit (%d differ)",
          hd, H, KVH, proj_n, hd % 32 == 0 ? "the decode kernel quantises its output for it, a launch fewer" : "no fusion",
          proj_bad);
    if (pw.dev) p.g->weight_release(p.g, &pw);
    p.g->free(p.g, zg);
    p.g->free(p.g, po);
    free(ph);
    free(zh);
    free(pa);
    free(pb);
    p.g->free(p.g, cg.k);
    p.g->free(p.g, cg.v);
    p.c->free(p.c, cc.k);
    p.c->free(p.c, cc.v);
}

/* ---- whole models ---- */

typedef struct {
    gguf_file *f;
    model m;
    int loaded;
} loaded_model;

static int load(loaded_model *lm, const char *path, kb_backend *kb) {
    char err[512];
    memset(lm, 0, sizeof *lm);
    lm->f = gguf_open(path, err, sizeof err);
    if (!lm->f || model_load(&lm->m, lm->f, kb, err, sizeof err)) {
        CHECK(0, TAG ": load %s on %s: %s", path, kb->name, err);
        if (lm->f) gguf_close(lm->f);
        lm->f = NULL;
        return -1;
    }
    lm->loaded = 1;
    return 0;
}

static void unload(loaded_model *lm, kb_backend *kb) {
    if (lm->loaded) model_free(&lm->m, kb);
    if (lm->f) gguf_close(lm->f);
    memset(lm, 0, sizeof *lm);
}

/* Device bytes in use (exact for the emulation: what the backend holds). */
static size_t gpu_mem_used(kb_backend *kb) {
#if defined(CUDA_EMU)
    return kb_cuda_emu_mem_used(kb);
#elif defined(ILPD_CUDA)
    return kb_cuda_mem_used(kb);
#else
    (void)kb;
    return 0;
#endif
}

static int argmax(const float *x, int n) { return sampler_argmax(x, n); }

/* Logits of the prompt, then of DECODE single-token steps (fed the CPU's
 * greedy choice), under MASK (NULL: every layer). Fills *LAUNCHES with the
 * GPU's kernel count for the prompt, and *ARGMAX_SAME with whether both
 * backends pick the same greedy token at every decode step where the CPU's
 * best two logits are more than TOL x max|logit| apart (closer, the
 * tolerance allows either). Returns the worst relative error (infinity
 * when something could not be allocated). */
static double run_model(pair p, loaded_model *mg, loaded_model *mc, const uint8_t *mask, kb_kv_type kt, int n_prompt,
                        int decode, double tol, uint64_t *launches, int *argmax_same) {
    const model *m = &mc->m;
    char err[256];
    int n_ctx = n_prompt + decode + 1;
    double worst = INFINITY;
    model_state sg, sc;
    int have_g = 0, have_c = 0;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_prompt);
    float *lg = malloc(sizeof(float) * (size_t)n_prompt * m->n_vocab), *lc = malloc(sizeof(float) * (size_t)n_prompt * m->n_vocab);
    *argmax_same = 0;
    if (!tok || !lg || !lc) {
        CHECK(0, TAG ": run_model: out of host memory");
        goto done;
    }
    if (model_state_init(&sg, &mg->m, p.g, n_ctx, n_prompt, mask, kt, err, sizeof err)) {
        CHECK(0, TAG ": model_state_init on the GPU: %s", err);
        goto done;
    }
    have_g = 1;
    if (model_state_init(&sc, m, p.c, n_ctx, n_prompt, mask, kt, err, sizeof err)) {
        CHECK(0, TAG ": model_state_init on the CPU: %s", err);
        goto done;
    }
    have_c = 1;
    for (int i = 0; i < n_prompt; i++) tok[i] = (int32_t)(3 + next_u32() % (uint32_t)(m->n_vocab - 3));
    uint64_t l0 = p.g->launches(p.g);
    model_embed(&mg->m, p.g, &sg, tok, n_prompt);
    model_forward_layers(&mg->m, p.g, &sg, n_prompt, 0, 0, m->n_layers);
    model_logits(&mg->m, p.g, &sg, 0, n_prompt, lg);
    *launches = p.g->launches(p.g) - l0;
    model_embed(m, p.c, &sc, tok, n_prompt);
    model_forward_layers(m, p.c, &sc, n_prompt, 0, 0, m->n_layers);
    model_logits(m, p.c, &sc, 0, n_prompt, lc);
    worst = rel_err(lg, lc, lc, (size_t)n_prompt * m->n_vocab);
    *argmax_same = 1;
    for (int step = 0; step < decode; step++) {
        int32_t t = argmax(lc + (size_t)(step ? 0 : n_prompt - 1) * m->n_vocab, m->n_vocab);
        int pos = n_prompt + step;
        model_decode(&mg->m, p.g, &sg, &t, 1, pos, NULL, 0, 1, lg);
        model_decode(m, p.c, &sc, &t, 1, pos, NULL, 0, 1, lc);
        double e = rel_err(lg, lc, lc, (size_t)m->n_vocab);
        worst = e > worst ? e : worst;
        int ag = argmax(lg, m->n_vocab), ac = argmax(lc, m->n_vocab);
        if (ag != ac && lc[ac] - lc[ag] > tol * maxabs(lc, (size_t)m->n_vocab)) *argmax_same = 0;
    }
done:
    if (have_g) model_state_free(&sg, p.g);
    if (have_c) model_state_free(&sc, p.c);
    free(tok);
    free(lg);
    free(lc);
    return worst;
}

/* Greedy decoding of N_GEN tokens after PROMPT on backend KB alone, under
 * MASK (NULL: every layer); the tokens go to OUT. Returns 0 or -1. */
static int greedy(kb_backend *kb, const model *m, const uint8_t *mask, const int32_t *prompt, int n_prompt, int n_gen,
                  int32_t *out) {
    model_state st;
    char err[256];
    float *logits = malloc(sizeof(float) * (size_t)m->n_vocab);
    if (!logits) return -1;
    if (model_state_init(&st, m, kb, n_prompt + n_gen, n_prompt, mask, KB_KV_F32, err, sizeof err)) {
        free(logits);
        return -1;
    }
    model_embed(m, kb, &st, prompt, n_prompt);
    model_forward_layers(m, kb, &st, n_prompt, 0, 0, m->n_layers);
    model_logits(m, kb, &st, n_prompt - 1, 1, logits);
    for (int i = 0; i < n_gen; i++) {
        out[i] = argmax(logits, m->n_vocab);
        if (i + 1 == n_gen) break;
        model_decode(m, kb, &st, &out[i], 1, n_prompt + i, NULL, 0, 1, logits);
    }
    model_state_free(&st, kb);
    free(logits);
    return 0;
}

/* Greedy answers of both backends, each on its own, must be the same
 * tokens: a 5-token prompt (the own matvec kernels) and a 12-token one
 * (the cuBLAS prompt path), at full depth and with MASK. */
static void greedy_check(pair p, loaded_model *mg, loaded_model *mc, const uint8_t *mask, const char *base) {
    enum { N_GEN = 40 };
    static const int32_t prompt[12] = {1, 403, 407, 261, 378, 300, 260, 270, 280, 290, 310, 320};
    const model *m = &mc->m;
    int32_t pr[12];
    for (int i = 0; i < 12; i++) pr[i] = prompt[i] % m->n_vocab;
    for (int v = 0; v < 4; v++) {
        int n_prompt = v & 1 ? 12 : 5;
        const uint8_t *mk = v & 2 ? mask : NULL;
        if (v & 2 && !mask) continue;
        int32_t tg[N_GEN], tc[N_GEN];
        int rg = greedy(p.g, &mg->m, mk, pr, n_prompt, N_GEN, tg), rc = greedy(p.c, m, mk, pr, n_prompt, N_GEN, tc);
        int same = 0;
        while (same < N_GEN && tg[same] == tc[same]) same++;
        CHECK(rg == 0 && rc == 0 && same == N_GEN,
              TAG ": %s: greedy answer of %d tokens after a %d-token prompt%s identical to the CPU's (%d agree)", base,
              N_GEN, n_prompt, mk ? ", layer 1 skipped," : "", same);
    }
}

/* A skipped layer gets no KV cache: no allocation for it at all (the
 * emulation counts device bytes exactly), and no kernel (counted). */
static void kv_check(pair p, loaded_model *mg, const uint8_t *mask, const char *base) {
    const model *m = &mg->m;
    model_state full, masked;
    char err[256];
    size_t m0 = gpu_mem_used(p.g);
    if (model_state_init(&full, m, p.g, 64, 8, NULL, KB_KV_F32, err, sizeof err)) {
        CHECK(0, TAG ": %s: model_state_init: %s", base, err);
        return;
    }
    size_t m_full = gpu_mem_used(p.g) - m0;
    size_t kv_full = full.kv_bytes;
    model_state_free(&full, p.g);
    if (model_state_init(&masked, m, p.g, 64, 8, mask, KB_KV_F32, err, sizeof err)) {
        CHECK(0, TAG ": %s: model_state_init with a mask: %s", base, err);
        return;
    }
    size_t m_masked = gpu_mem_used(p.g) - m0;
    size_t layer = 2 * kb_kv_bytes(KB_KV_F32, 64, m->kv_dim), layer_dev = 2 * ((layer / 2 + 255) / 256 * 256);
    CHECK(masked.kv[1].k == NULL && masked.kv[1].v == NULL && masked.kv[0].k != NULL && masked.kv_bytes == kv_full - layer,
          TAG ": %s: the skipped layer has no KV cache (%zu KV bytes at full depth, %zu with layer 1 skipped)", base,
          kv_full, masked.kv_bytes);
#ifdef CUDA_EMU
    CHECK(m_full - m_masked == layer_dev,
          TAG ": %s: device memory of the request state: %zu bytes at full depth, %zu with one layer skipped (its KV: %zu)",
          base, m_full, m_masked, layer_dev);
#else
    (void)m_full;
    (void)m_masked;
    (void)layer_dev;
#endif
    model_state_free(&masked, p.g);
    CHECK(gpu_mem_used(p.g) == m0 || !EXACT_MEM, TAG ": %s: the request state's device memory is all freed", base);
}

/* Decode steps (kb->step_begin) so far, graphs captured and replays. */
static void graph_stats(kb_backend *kb, unsigned long long *steps, unsigned long long *captured,
                        unsigned long long *replayed) {
#if defined(CUDA_EMU)
    kb_cuda_emu_graph_stats(kb, steps, captured, replayed);
#elif defined(ILPD_CUDA)
    kb_cuda_graph_stats(kb, steps, captured, replayed);
#else
    (void)kb;
    *steps = *captured = *replayed = 0;
#endif
}

enum { SCRIPT_PROMPT = 250, SCRIPT_STEPS = 24, SCRIPT_ROWS = 3 };

/* Lossless decoding's steps on KB alone, F16 KV cache: a prompt of
 * SCRIPT_PROMPT tokens, then SCRIPT_STEPS decode steps cycling through a
 * one-token step at full depth, a draft step under DRAFT and a verification
 * of 3 rows at the draft's position, each fed the argmax of the step
 * before; positions cross 256, where attention's split changes. Step i's
 * logits go to OUT + i * SCRIPT_ROWS * n_vocab. Then the step after, once
 * with a fault injected into its fifth launch, then again: its logits go
 * after the others. Sets *FAULT to whether the faulted step failed as
 * armed. 0, or -1 (allocation). */
static int step_script(kb_backend *kb, const model *m, const uint8_t *draft, float *out, int *fault) {
    model_state st;
    char err[256];
    size_t V = (size_t)m->n_vocab;
    int32_t tok[SCRIPT_PROMPT];
    if (model_state_init(&st, m, kb, SCRIPT_PROMPT + SCRIPT_STEPS * SCRIPT_ROWS + 8, SCRIPT_PROMPT, NULL, KB_KV_F16,
                         err, sizeof err))
        return -1;
    for (int i = 0; i < SCRIPT_PROMPT; i++) tok[i] = (int32_t)(3 + (i * 7919u) % (uint32_t)(m->n_vocab - 3));
    model_embed(m, kb, &st, tok, SCRIPT_PROMPT);
    model_forward_layers(m, kb, &st, SCRIPT_PROMPT, 0, 0, m->n_layers);
    model_logits(m, kb, &st, SCRIPT_PROMPT - 1, 1, out);
    int pos = SCRIPT_PROMPT;
    int32_t t = argmax(out, m->n_vocab);
    for (int i = 0; i <= SCRIPT_STEPS; i++) {
        float *o = out + (size_t)i * SCRIPT_ROWS * V;
        int32_t rows[SCRIPT_ROWS] = {t, (int32_t)((t + 1) % m->n_vocab), (int32_t)((t + 2) % m->n_vocab)};
        if (i == SCRIPT_STEPS) { /* the faulted step, then the same again */
            kb->fail_at = kb->launches(kb) + 5;
            model_decode(m, kb, &st, rows, 1, pos, NULL, 0, 1, o);
            *fault = kb_error(kb) && strstr(kb_error(kb), "injected fault");
            kb_error_clear(kb);
            model_decode(m, kb, &st, rows, 1, pos, NULL, 0, 1, o);
        } else if (i % 3 == 0) {
            model_decode(m, kb, &st, rows, 1, pos++, NULL, 0, 1, o);
        } else if (i % 3 == 1) {
            model_decode(m, kb, &st, rows, 1, pos, draft, 0, 1, o);
        } else {
            model_decode(m, kb, &st, rows, SCRIPT_ROWS, pos, NULL, 0, SCRIPT_ROWS, o);
            pos += SCRIPT_ROWS;
        }
        t = argmax(o, m->n_vocab);
    }
    model_state_free(&st, kb);
    return kb_error(kb) ? -1 : 0;
}

/* Decode steps replayed as graphs compute bit for bit what the same steps
 * launched kernel by kernel (a backend with ILPD_CUDA_GRAPHS=0) compute,
 * through full, draft and verification steps, a change of attention's
 * split and a failed step; graphs were captured and replayed; a copy
 * inside a step is refused. (A step plans attention's split for a power
 * of two of positions, the eager backend for the positions themselves:
 * at the script's positions, 250 to 283, both make every split 64
 * positions long, so the sums run in the same order.) */
static void graph_check(pair p, const char *path) {
    char err[256] = "";
    setenv("ILPD_CUDA_GRAPHS", "0", 1);
    kb_backend *eager = GPU_CREATE(0, err, sizeof err);
    unsetenv("ILPD_CUDA_GRAPHS");
    loaded_model mg, me;
    if (!eager) {
        CHECK(0, TAG ": a backend without graphs: %s", err);
        return;
    }
    if (load(&mg, path, p.g)) goto out;
    if (load(&me, path, eager)) goto out_g;
    const model *m = &mg.m;
    size_t n = (size_t)(SCRIPT_STEPS + 1) * SCRIPT_ROWS * m->n_vocab;
    float *lg = calloc(n, sizeof *lg), *le = calloc(n, sizeof *le);
    uint8_t draft[256];
    memset(draft, 1, sizeof draft);
    draft[1] = 0;
    unsigned long long s0, c0, r0, s1, c1, r1, es, ec, er;
    int fg = 0, fe = 0;
    graph_stats(p.g, &s0, &c0, &r0);
    int rg = lg && le ? step_script(p.g, m, draft, lg, &fg) : -1, re = lg && le ? step_script(eager, &me.m, draft, le, &fe) : -1;
    graph_stats(p.g, &s1, &c1, &r1);
    graph_stats(eager, &es, &ec, &er);
    size_t same = 0;
    while (rg == 0 && re == 0 && same < n && !memcmp(&lg[same], &le[same], sizeof *lg)) same++;
    CHECK(rg == 0 && re == 0 && same == n && fg && fe,
          TAG ": %d decode steps (full, draft, 3-row verification) replayed as graphs equal bit for bit those launched "
              "kernel by kernel (%zu of %zu logits agree; a fault in a step %s)",
          SCRIPT_STEPS + 2, same, n, fg && fe ? "fails it" : "went unnoticed");
    CHECK(s1 - s0 == SCRIPT_STEPS + 2 && c1 - c0 >= 3 && r1 - r0 >= SCRIPT_STEPS / 2 && es == 0,
          TAG ": graphs: %llu steps, %llu captured, %llu replays (none without graphs: %llu steps)", s1 - s0, c1 - c0,
          r1 - r0, es);
    float *x = p.g->alloc(p.g, 64);
    float h[16];
    kb_step_begin(p.g, 0);
    p.g->to_host(p.g, h, x, sizeof h);
    kb_step_end(p.g);
    CHECK(kb_error(p.g) && strstr(kb_error(p.g), "inside a decode step"), TAG ": a copy inside a decode step is refused (%s)",
          kb_error(p.g) ? kb_error(p.g) : "no error");
    kb_error_clear(p.g);
    p.g->free(p.g, x);
    free(lg);
    free(le);
    unload(&me, eager);
out_g:
    unload(&mg, p.g);
out:
    eager->destroy(eager);
}

/* Logits on both backends: tolerance 2e-3 x max|logit| for float models
 * (F16 activations in the cuBLAS prompt path; float everywhere else), 5e-2
 * for quantised ones and BF16 (whose input is rounded to BF16) (int8 activations on both sides in decode, but F16
 * dequantised weights in the cuBLAS prompt path against the CPU's int8
 * products, through every layer). Greedy choices must agree during decode. */
static void model_check(pair p, const char *path, int greedy_too) {
    loaded_model mg, mc;
    if (load(&mg, path, p.g)) return;
    if (load(&mc, path, p.c)) {
        unload(&mg, p.g);
        return;
    }
    const model *m = &mc.m;
    int quant = 0;
    for (int l = 0; l < m->n_layers; l++) {
        ggml_type t = m->layers[l].w_up.type;
        if (t != GGML_TYPE_F32 && t != GGML_TYPE_F16) quant = 1; /* BF16: its rounded input has ties like int8's */
    }
    double tol = quant ? 5e-2 : 2e-3;
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    uint64_t full = 0, masked = 0;
    int same = 0;
    double e = run_model(p, &mg, &mc, NULL, KB_KV_F32, 12, 3, tol, &full, &same);
    CHECK(e <= tol && same, TAG ": %s: logits of a 12-token prompt (cuBLAS path) and 3 decode steps (error %.2g x max|logit|, tolerance %.0e)%s",
          base, e, tol, same ? "" : ", greedy choices differ");
    int rows = p.g->prompt_rows; /* the prompt in two passes, of 9 rows (cuBLAS) and 3 (own kernels) */
    p.g->prompt_rows = 9;
    e = run_model(p, &mg, &mc, NULL, KB_KV_F32, 12, 2, tol, &masked, &same);
    p.g->prompt_rows = rows;
    CHECK(e <= tol && same && masked > full,
          TAG ": %s: the 12-token prompt in passes of 9 and 3 rows (error %.2g x max|logit|; %llu launches, %llu in "
              "one pass)",
          base, e, (unsigned long long)masked, (unsigned long long)full);
    masked = 0;
    e = run_model(p, &mg, &mc, NULL, KB_KV_F16, 5, 2, tol, &full, &same);
    CHECK(e <= tol && same, TAG ": %s: F16 KV cache, own kernels for the prompt (error %.2g, tolerance %.0e)", base, e, tol);
    uint8_t mask[256];
    memset(mask, 1, sizeof mask);
    mask[1] = 0;
    if (m->n_layers >= 3) {
        e = run_model(p, &mg, &mc, mask, KB_KV_F32, 12, 2, tol, &masked, &same);
        CHECK(e <= tol && same, TAG ": %s: layer 1 skipped, equal to the CPU with the same mask (error %.2g, tolerance %.0e)",
              base, e, tol);
        uint8_t none[256], two[256];
        memset(none, 0, sizeof none);
        memcpy(two, mask, sizeof two);
        two[2] = 0;
        uint64_t l_none = 0, full5 = 0, masked5 = 0, two5 = 0;
        run_model(p, &mg, &mc, none, KB_KV_F32, 5, 0, tol, &l_none, &same);
        run_model(p, &mg, &mc, NULL, KB_KV_F32, 5, 0, tol, &full5, &same);
        run_model(p, &mg, &mc, mask, KB_KV_F32, 5, 0, tol, &masked5, &same);
        run_model(p, &mg, &mc, two, KB_KV_F32, 5, 0, tol, &two5, &same);
        CHECK(full5 > masked5 && full5 - masked5 == masked5 - two5 && two5 > l_none,
              TAG ": %s: a skipped layer launches nothing: each saves the same launches (%llu launches with no layer, "
                  "%llu at full depth, %llu with one layer skipped, %llu with two)",
              base, (unsigned long long)l_none, (unsigned long long)full5, (unsigned long long)masked5,
              (unsigned long long)two5);
        kv_check(p, &mg, mask, base);
    }
    if (greedy_too) greedy_check(p, &mg, &mc, m->n_layers >= 3 ? mask : NULL, base);
    unload(&mg, p.g);
    unload(&mc, p.c);
}

#ifdef CUDA_EMU
/* An emulated backend with BYTES of device memory and, with M, F's model
 * loaded on it; NULL with ERR set (nothing left allocated) when either
 * fails. */
static kb_backend *emu_budget(size_t bytes, gguf_file *f, model *m, char *err, size_t errlen) {
    char budget[32];
    snprintf(budget, sizeof budget, "%zu", bytes);
    setenv("ILPD_CUDA_EMU_MEM", budget, 1);
    kb_backend *g = kb_cuda_emu_create(0, err, errlen);
    unsetenv("ILPD_CUDA_EMU_MEM");
    if (g && m && model_load(m, f, g, err, errlen)) {
        g->destroy(g);
        return NULL;
    }
    return g;
}

/* The context fitted to the free device memory (engine_open's cap): on a
 * fresh backend with a 64 MiB budget, model_state_bytes is what
 * model_state_init takes (to the backend's 256-byte rounding of each
 * allocation), model_context_fit's context is the longest whose whole
 * request fits, and that request runs. Emulation only. */
static void fit_check(const char *path) {
    char err[512] = "";
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f) {
        CHECK(0, TAG ": memory fit checks: %s", err);
        return;
    }
    model m;
    kb_backend *g = emu_budget((size_t)64 << 20, f, &m, err, sizeof err);
    if (!g) {
        CHECK(0, TAG ": load %s within a 64 MiB budget: %s", path, err);
        gguf_close(f);
        return;
    }
    size_t free0 = g->mem_free(g), slack = 256 * (size_t)(9 + 2 * m.n_layers);
    int n = model_context_fit(&m, g, 1 << 22, KB_KV_F32, free0 - slack);
    size_t need = n ? model_state_bytes(&m, g, n, n, NULL, KB_KV_F32) : 0;
    size_t more = model_state_bytes(&m, g, n + 1, n + 1, NULL, KB_KV_F32);
    CHECK(n >= 2 && n < (1 << 22) && need <= free0 - slack && more > free0 - slack,
          TAG ": %s: the longest context whose whole request fits %zu free bytes: %d positions (%zu bytes; one more "
              "needs %zu)",
          path, free0 - slack, n, need, more);
    model_state st;
    size_t base = gpu_mem_used(g);
    int rc = model_state_init(&st, &m, g, n, n, NULL, KB_KV_F32, err, sizeof err);
    size_t took = gpu_mem_used(g) - base;
    CHECK(rc == 0 && took >= need && took <= need + slack,
          TAG ": that request runs, taking %zu bytes against %zu counted (%s)", took, need, rc ? err : "ok");
    if (rc == 0) model_state_free(&st, g);
    CHECK(model_context_fit(&m, g, 1 << 22, KB_KV_F32, 1000) == 0, TAG ": no context fits 1000 bytes");
    model_free(&m, g);
    g->destroy(g);
    gguf_close(f);
}

/* Device out-of-memory is an error return, never a crash: a backend with
 * a budget under the model's weights refuses the model (model_load fails
 * with a message and frees what it uploaded), one with room for the weights
 * but not for a huge context refuses the request state (and frees the
 * layers it had). Emulation only: the budget is ILPD_CUDA_EMU_MEM. */
static void oom_check(const char *path) {
    char err[512] = "";
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f) {
        CHECK(0, TAG ": out of memory checks: %s", err);
        return;
    }
    model m;
    kb_backend *g = emu_budget(300 * 1024, f, NULL, err, sizeof err);
    if (!g) {
        CHECK(0, TAG ": create a backend with a 300 KiB budget: %s", err);
        gguf_close(f);
        return;
    }
    size_t base = gpu_mem_used(g);
    int rc = model_load(&m, f, g, err, sizeof err);
    CHECK(rc == -1 && strstr(err, "cannot upload") && gpu_mem_used(g) == base,
          TAG ": a model over the device memory is refused cleanly (\"%s\"), nothing left allocated", err);
    if (rc == 0) model_free(&m, g);
    g->destroy(g);

    g = emu_budget((size_t)4 << 20, f, &m, err, sizeof err);
    if (!g) {
        CHECK(0, TAG ": load %s within a 4 MiB budget: %s", path, err);
        gguf_close(f);
        return;
    }
    model_state st;
    /* a first request sizes the backend's own scratch, which it keeps */
    rc = model_state_init(&st, &m, g, 64, 16, NULL, KB_KV_F32, err, sizeof err);
    CHECK(rc == 0, TAG ": a request of 64 positions runs within 4 MiB (%s)", rc ? err : "ok");
    if (rc == 0) model_state_free(&st, g);
    base = gpu_mem_used(g);
    err[0] = 0;
    rc = model_state_init(&st, &m, g, 1 << 20, 16, NULL, KB_KV_F32, err, sizeof err);
    CHECK(rc == -1 && err[0] && gpu_mem_used(g) == base,
          TAG ": a context over the device memory fails the request cleanly (\"%s\"), nothing left allocated", err);
    if (rc == 0) model_state_free(&st, g);
    rc = model_state_init(&st, &m, g, 64, 16, NULL, KB_KV_F32, err, sizeof err);
    CHECK(rc == 0, TAG ": the next request of 64 positions runs (%s)", rc ? err : "ok");
    if (rc == 0) model_state_free(&st, g);
    model_free(&m, g);
    g->destroy(g);
    gguf_close(f);
}
#endif

/* A type the backend does not know is refused at upload, with an error
 * that names the type, and the backend stays usable. */
static void check_unsupported_types(kb_backend *g) {
    static const ggml_type types[] = {(ggml_type)16 /* IQ2_XXS */, (ggml_type)29 /* IQ1_M */};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        ggml_type t = types[i];
        size_t bytes = 4 * 256;
        uint8_t *h = calloc(1, bytes);
        if (!h) {
            CHECK(0, TAG ": out of host memory");
            return;
        }
        kb_weight w = {t, 4, 256, h, NULL, bytes};
        kb_error_clear(g);
        int rc = g->weight_upload(g, &w);
        const char *why = kb_error(g) ? kb_error(g) : "";
        char num[16];
        snprintf(num, sizeof num, "type %d", (int)t);
        CHECK(rc == -1 && w.dev == NULL && strstr(why, num),
              TAG ": a %s weight is refused at upload (\"%s\")", ggml_type_name(t), why);
        kb_error_clear(g);
        free(h);
    }
}

static void run_all(kb_backend *g, const char *models) {
    kb_backend *c = kb_cpu_create(1);
    if (!c) {
        CHECK(0, TAG ": create the CPU backend");
        return;
    }
    pair p = {g, c};
    char path[1024];
    if (!models) {
        static const ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                                          GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_1,
                                          GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                          GGML_TYPE_Q5_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
        /* rows and widths of the operation checks below (up to 8192), heads up to 128 wide */
        kb_attn_shape heads = {16, 16, 128, 0, NULL, 0, 0, 0, 0};
        kb_scratch_shape sh = {64, 8192, 128, &heads};
        if (g->reserve(g, &sh) || c->reserve(c, &sh)) CHECK(0, TAG ": reserve");
        for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
            ggml_type t = types[i];
            int quant = t != GGML_TYPE_F32 && t != GGML_TYPE_F16 && t != GGML_TYPE_BF16;
            check_matmul(p, t, 40, quant ? 512 : 128);
            if (!quant) check_matmul(p, t, 37, 100);
            if (i < 7) { /* the types with own kernels: wide rows, 2 and 4 warps a row; weight sets */
                for (int wide = 2048; wide <= 8192; wide *= 2) check_matmul(p, t, 9, wide);
                check_matmul_many(p, t, t, quant ? 512 : 128);
                check_matmul_many(p, t, t, 4096);
                check_swiglu_matmul(p, t, quant ? 512 : 128);
                if (quant) check_norm_matmul(p, t, i == 3 ? 4096 : 512);
            }
        }
        check_matmul_many(p, GGML_TYPE_Q8_0, GGML_TYPE_F16, 512);
        check_unsupported_types(g);
        check_elementwise(p);
        check_fault(p);
        check_pick(p);
        check_rope(p, 0, 0);
        check_rope(p, 1, 0);
        check_rope(p, 1, 1.25f); /* YaRN: cos and sin scaled */
        /* head size, long context, window, query and KV heads: the general kernel (16), the
         * decode kernel's shapes (every head size it takes, 1 to 8 query heads a KV head: up to
         * 8 rows a block, 4 for 256) and the tiled prompt kernel's (64, 128) */
        static const struct {
            kb_kv_type kt;
            int hd, long_ctx, window, h, kvh, rope;
        } att[] = {{KB_KV_F32, 16, 0, 0, 4, 2, 0},   {KB_KV_F16, 16, 0, 0, 4, 2, 0},    {KB_KV_F32, 64, 0, 0, 4, 2, 0},
                   {KB_KV_F16, 128, 0, 0, 4, 2, 0},  {KB_KV_F32, 64, 1, 0, 4, 2, 0},    {KB_KV_F16, 128, 1, 0, 4, 2, 0},
                   {KB_KV_F32, 64, 0, 24, 4, 2, 0},  {KB_KV_F16, 128, 1, 100, 4, 2, 0}, {KB_KV_F32, 32, 1, 0, 8, 1, 0},
                   {KB_KV_F16, 64, 0, 0, 2, 2, 0},   {KB_KV_F16, 128, 1, 0, 16, 2, 0},  {KB_KV_F16, 256, 1, 0, 8, 2, 0},
                   {KB_KV_F32, 256, 0, 40, 4, 2, 0},  {KB_KV_F16, 128, 1, 0, 16, 2, 1}, {KB_KV_F32, 64, 0, 24, 4, 2, 2},
                   {KB_KV_F16, 32, 0, 0, 8, 1, 1}, {KB_KV_F16, 256, 1, 0, 8, 2, 2}};
        for (size_t i = 0; i < sizeof att / sizeof *att; i++)
            check_attention(p, att[i].kt, att[i].hd, att[i].long_ctx, att[i].window, att[i].h, att[i].kvh, att[i].rope);
        void *big = g->alloc(g, (size_t)1 << 62);
        CHECK(big == NULL, TAG ": alloc of 4 EiB returns NULL");
        g->free(g, NULL);
        /* stories260K, or else the synthetic models of the same shape */
        char path16[1024];
        const char *unit = getenv("UNIT_MODEL"), *unit16 = getenv("UNIT_MODEL_F16");
        snprintf(path, sizeof path, "%s/models/stories260K/stories260K.gguf", check_shared_dir());
        snprintf(path16, sizeof path16, "%s/models/stories260K/stories260K-F16.gguf", check_shared_dir());
        if (access(path, R_OK) && unit && *unit && unit16 && *unit16) {
            snprintf(path, sizeof path, "%s", unit);
            snprintf(path16, sizeof path16, "%s", unit16);
        }
        if (!access(path, R_OK)) {
            model_check(p, path, 1);
            graph_check(p, path);
#ifdef CUDA_EMU
            oom_check(path);
            fit_check(path);
#endif
            model_check(p, path16, 1);
        } else {
            SKIP(TAG ": stories260K (logits, greedy answers, masks, out of memory): %s absent and no $UNIT_MODEL", path);
        }
        check_engine_pick("models/ilpd-demo-F16.gguf", "config/probes/ilpd-demo-F16.json");
    } else {
        const char *s = models;
        while (*s) {
            const char *e = strchr(s, ',');
            size_t len = e ? (size_t)(e - s) : strlen(s);
            if (len && len < sizeof path) {
                memcpy(path, s, len);
                path[len] = 0;
                model_check(p, path, 0);
            }
            s += len + (e ? 1 : 0);
        }
    }
    c->destroy(c);
}

#if defined(ILPD_CUDA) && !defined(CUDA_EMU)
/* ---- `test_cuda --bench MODEL ...` (scripts/make/gpu-check.sh) ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* One request on the GPU: N_PROMPT random tokens, then N_GEN greedy tokens
 * (end-of-text does not stop it; picked on the GPU unless ILPD_CUDA_PICK=0), under MASK; prints one JSON line with the
 * time to first token, the generation speed, the bytes a generated token
 * reads (computed layers' weights, the head, the KV cache at the mean
 * position) and that speed's roofline at READ_GBS. 0 or -1. */
static int bench_run(kb_backend *g, const model *m, const char *label, const uint8_t *mask, int n_prompt, int n_gen,
                     kb_kv_type kt, double read_gbs) {
    model_state st;
    char err[256];
    int rc = -1, layers = 0;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_prompt);
    float *logits = malloc(sizeof(float) * (size_t)m->n_vocab);
    if (!tok || !logits) {
        fprintf(stderr, "test_cuda --bench: out of host memory\n");
        goto done;
    }
    if (model_state_init(&st, m, g, n_prompt + n_gen, n_prompt, mask, kt, err, sizeof err)) {
        fprintf(stderr, "test_cuda --bench: %s\n", err);
        goto done;
    }
    for (int i = 0; i < n_prompt; i++) tok[i] = (int32_t)(3 + next_u32() % (uint32_t)(m->n_vocab - 3));
    size_t mem = kb_cuda_mem_used(g);
    double t0 = now_s();
    model_embed(m, g, &st, tok, n_prompt);
    model_forward_layers(m, g, &st, n_prompt, 0, 0, m->n_layers);
    model_logits(m, g, &st, n_prompt - 1, 1, logits);
    int32_t t = argmax(logits, m->n_vocab);
    double t1 = now_s();
    unsigned long long s0, c0, r0, s1, c1, r1;
    graph_stats(g, &s0, &c0, &r0);
    const kb_pick_params greedy = {0, m->n_vocab, 1};
    for (int i = 0; i < n_gen; i++) { /* as the engine decodes: the GPU picks the token when it can */
        kb_pick pk;
        if (model_can_pick(m, g)) {
            model_decode_pick(m, g, &st, &t, 1, n_prompt + i, NULL, 0, 1, &greedy, NULL, &pk);
            t = pk.id;
        } else {
            model_decode(m, g, &st, &t, 1, n_prompt + i, NULL, 0, 1, logits);
            t = argmax(logits, m->n_vocab);
        }
        if (kb_error(g)) {
            fprintf(stderr, "test_cuda --bench: %s\n", kb_error(g));
            model_state_free(&st, g);
            goto done;
        }
    }
    double t2 = now_s();
    graph_stats(g, &s1, &c1, &r1);
    double bytes = (double)m->output.nbytes + (double)m->output_norm.nbytes;
    for (int l = 0; l < m->n_layers; l++) {
        if (mask && !mask[l]) continue;
        layers++;
        bytes += (double)m->layers[l].bytes +
                 2.0 * (double)kb_kv_bytes(kt, 1, m->kv_dim) * ((double)n_prompt + n_gen / 2.0);
    }
    double tg = n_gen / (t2 - t1), roof = read_gbs * 1e9 / bytes;
    printf("{\"what\":\"run\",\"mask\":\"%s\",\"layers\":%d,\"n_layers\":%d,\"prompt_tokens\":%d,\"ttft_ms\":%.1f,"
           "\"prefill_tok_s\":%.1f,\"gen_tokens\":%d,\"gen_tok_s\":%.2f,\"bytes_per_token\":%.0f,\"roofline_tok_s\":%.2f,"
           "\"roofline_ratio\":%.3f,\"kv_bytes\":%zu,\"mem_used_bytes\":%zu,\"graphs_captured\":%llu,"
           "\"graph_replays\":%llu}\n",
           label, layers, m->n_layers, n_prompt, (t1 - t0) * 1e3, n_prompt / (t1 - t0), n_gen, tg, bytes, roof,
           tg / roof, st.kv_bytes, mem, c1 - c0, r1 - r0);
    fflush(stdout);
    model_state_free(&st, g);
    rc = 0;
done:
    free(tok);
    free(logits);
    return rc;
}

/* Measures the device bandwidth, loads MODEL on the GPU, warms up, then
 * runs full depth and each of the N_MASKS base64 masks. Exit status. */
static int bench(const char *path, int n_prompt, int n_gen, int kv_f16, char **masks, int n_masks) {
    char err[512];
    double rd = 0, cp = 0;
    size_t used = 0, total = 0;
    if (kb_cuda_bandwidth(0, (size_t)4 << 30, &rd, &cp, &used, &total, err, sizeof err)) {
        fprintf(stderr, "test_cuda --bench: %s\n", err);
        return 1;
    }
    printf("{\"what\":\"bandwidth\",\"read_gbs\":%.1f,\"copy_gbs\":%.1f,\"mem_total_bytes\":%zu}\n", rd, cp, total);
    kb_backend *g = kb_cuda_create(0, err, sizeof err);
    if (!g) {
        fprintf(stderr, "test_cuda --bench: %s\n", err);
        return 1;
    }
    loaded_model lm;
    int status = 1;
    double t0 = now_s();
    if (load(&lm, path, g)) goto out;
    double load_s = now_s() - t0;
    const model *m = &lm.m;
    printf("{\"what\":\"load\",\"model\":\"%s\",\"device\":\"%s\",\"n_layers\":%d,\"weight_bytes\":%zu,\"load_s\":%.1f,"
           "\"mem_used_bytes\":%zu}\n",
           path, g->name, m->n_layers, m->weights_bytes, load_s, kb_cuda_mem_used(g));
    kb_kv_type kt = kv_f16 ? KB_KV_F16 : KB_KV_F32;
    if (bench_run(g, m, "warm-up", NULL, 64 < n_prompt ? 64 : n_prompt, 8, kt, rd)) goto out;
    if (bench_run(g, m, "full", NULL, n_prompt, n_gen, kt, rd)) goto out;
    for (int i = 0; i < n_masks; i++) {
        uint8_t wire[MASK_WIRE_BYTES], mask[256];
        if (mask_decode_b64_for(masks[i], strlen(masks[i]), m->n_layers, wire)) {
            fprintf(stderr, "test_cuda --bench: --mask %s is not the base64 of 32 bytes of 0/1\n", masks[i]);
            goto out;
        }
        mask_from_wire(wire, m->n_layers, mask);
        if (bench_run(g, m, masks[i], mask, n_prompt, n_gen, kt, rd)) goto out;
    }
    status = 0;
out:
    unload(&lm, g);
    g->destroy(g);
    return status;
}
#endif

/* test_cuda [--models A.gguf,B.gguf]: the checks (synthetic models with
 * --models, as tests/t_cuda.sh runs them).
 * test_cuda --bench MODEL [--prompt 2048] [--gen 128] [--kv-f16] [--mask B64]...:
 * speed on a real GPU, JSON lines (scripts/make/gpu-check.sh). */
int main(int argc, char **argv) {
    const char *models = NULL;
    const char *bench_model = NULL;
    char *masks[8];
    int n_masks = 0, n_prompt = 2048, n_gen = 128, kv_f16 = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--models") && v) models = argv[++i];
        else if (!strcmp(argv[i], "--bench") && v) bench_model = argv[++i];
        else if (!strcmp(argv[i], "--prompt") && v) n_prompt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gen") && v) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mask") && v && n_masks < 8) masks[n_masks++] = argv[++i];
        else if (!strcmp(argv[i], "--kv-f16")) kv_f16 = 1;
        else {
            fprintf(stderr, "usage: %s [--models A.gguf,B.gguf] | --bench MODEL [--prompt N] [--gen N] [--kv-f16] "
                            "[--mask B64]...\n", argv[0]);
            return 2;
        }
    }
    if (bench_model) {
#if defined(ILPD_CUDA) && !defined(CUDA_EMU)
        if (n_prompt < 1 || n_gen < 1) {
            fprintf(stderr, "test_cuda --bench: --prompt and --gen must be positive\n");
            return 2;
        }
        return bench(bench_model, n_prompt, n_gen, kv_f16, masks, n_masks);
#else
        (void)n_masks;
        (void)kv_f16;
        (void)masks;
        (void)n_prompt;
        (void)n_gen;
        fprintf(stderr, "test_cuda --bench: needs the real CUDA backend (built with nvcc, not the emulation)\n");
        return 1;
#endif
    }
    char err[512] = "";
#ifdef CUDA_EMU
    setenv("ILPD_CUDA_EMU_SMS", "16", 0); /* enough "SMs" that decode attention splits its positions */
    setenv("ILPD_CUDA_EMU_SMEM", "232448", 0); /* an H100's or H200's shared memory a block (the 256-wide tiles) */
    CHECK(kb_cuda_emu_selftest(err, sizeof err) == 0, TAG ": host self-test of weight decoding and int8 dots %s", err);
    kb_backend *g = kb_cuda_emu_create(0, err, sizeof err);
    CHECK(g != NULL, TAG ": create the emulated backend %s", err);
    if (g) {
        run_all(g, models);
        g->destroy(g);
    }
    if (!models) { /* the own kernels past 8 rows: cuBLAS off */
        setenv("ILPD_CUDA_GEMM_MIN_N", "0", 1);
        kb_backend *own = kb_cuda_emu_create(0, err, sizeof err);
        unsetenv("ILPD_CUDA_GEMM_MIN_N");
        kb_scratch_shape sh = {16, 4096, 16, NULL};
        CHECK(own && own->reserve(own, &sh) == 0, TAG ": an emulated backend without cuBLAS %s", err);
        if (own) {
            pair q = {own, NULL};
            check_matmul_many(q, GGML_TYPE_Q8_0, GGML_TYPE_Q8_0, 512);
            check_matmul_many(q, GGML_TYPE_F16, GGML_TYPE_F16, 4096);
            own->destroy(own);
        }
    }
#else
#ifdef ILPD_CUDA
    if (!models)
        CHECK(kb_cuda_selftest(err, sizeof err) == 0, TAG ": host self-test of weight decoding and int8 dots %s", err);
#else
    SKIP(TAG ": host self-test: built without CUDA (CUDA=0 or no nvcc)");
#endif
    err[0] = 0;
    kb_backend *g = kb_cuda_create(0, err, sizeof err);
    if (!g) {
        CHECK(err[0] != 0, TAG ": kb_cuda_create fails cleanly without a usable GPU (\"%s\")", err);
        SKIP(TAG ": no usable GPU on this machine (%s): device checks not run", err);
    } else {
        char e2[256] = "";
        kb_backend *none = kb_cuda_create(999, e2, sizeof e2);
        CHECK(none == NULL && e2[0], TAG ": device 999 is refused (\"%s\")", e2);
        if (none) none->destroy(none);
        printf("# %s\n", g->name);
        run_all(g, models);
        g->destroy(g);
    }
#endif
    CHECK_DONE();
}
