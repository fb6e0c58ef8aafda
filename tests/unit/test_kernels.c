/* test_kernels.c - every CPU kernel path (scalar, AVX2, AVX-512) against a
 * double-precision reference on random data: odd row widths for the float
 * types, every weight type, 1..9 tokens, the in-place repacking (rows not a
 * multiple of 16 included), activation quantization (SIMD = scalar bit for
 * bit), attention over F32 and F16 caches, the element-wise kernels, the
 * balanced thread pool and the backend's matmul end to end. Paths the CPU
 * lacks are skipped. */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/check.h"
#include "kernels/cpu/cpu_internal.h"
#include "kernels/quant.h"
#include "kernels/cpu/threadpool.h"

static uint64_t rng_state = 12345;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float frand(void) { return (float)rnd() / 2147483648.0f - 1.0f; } /* [-1, 1) */

static uint16_t to_bf16(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

/* F rounded to BF16 and back: how the backend hands activations to BF16 kernels. */
static float bf16_round(float f) {
    uint32_t b = (uint32_t)to_bf16(f) << 16;
    memcpy(&f, &b, 4);
    return f;
}

/* Random weight of ROWS x COLS in type T (valid blocks, scales ~ 1/64). */
static uint8_t *make_weight(ggml_type t, int rows, int cols) {
    size_t rb = ggml_row_bytes(t, (uint64_t)cols), n = rb * rows;
    uint8_t *w = malloc(n + 64);
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)rnd();
    size_t bb = ggml_type_block_bytes(t);
    for (int r = 0; r < rows; r++) {
        uint8_t *row = w + (size_t)r * rb;
        if (t == GGML_TYPE_F32) {
            for (int k = 0; k < cols; k++) ((float *)row)[k] = frand();
        } else if (t == GGML_TYPE_F16) {
            for (int k = 0; k < cols; k++) ((uint16_t *)row)[k] = quant_f32_to_f16(frand());
        } else if (t == GGML_TYPE_BF16) {
            for (int k = 0; k < cols; k++) ((uint16_t *)row)[k] = to_bf16(frand());
        } else {
            for (size_t o = 0; o < rb; o += bb) {
                /* the offsets of the scale d and of the min's scale (none: -1) */
                int od = t == GGML_TYPE_Q6_K ? 208 : t == GGML_TYPE_Q3_K ? 108 : t == GGML_TYPE_Q2_K ? 80 : 0;
                int om = t == GGML_TYPE_Q2_K ? 82
                         : t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1 ? 2
                                                                                                                   : -1;
                uint16_t d = quant_f32_to_f16(0.5f / 64 + (float)(rnd() % 100) / 6400);
                memcpy(row + o + od, &d, 2);
                if (om >= 0) {
                    uint16_t dm = quant_f32_to_f16((float)(rnd() % 100) / 6400);
                    memcpy(row + o + om, &dm, 2);
                }
            }
        }
    }
    return w;
}

/* sum |w| |x| over a row: the scale of float rounding errors. */
static double ref_dot(const float *w, const float *x, int n, double *mag) {
    double s = 0, m = 0;
    for (int i = 0; i < n; i++) {
        s += (double)w[i] * x[i];
        m += fabs((double)w[i] * x[i]);
    }
    *mag = m;
    return s;
}

typedef struct {
    const char *name;
    const cpu_kern *k;
} isa;

static void test_float_mm(const isa *I) {
    static const int widths[] = {1, 5, 16, 17, 33, 64, 172, 255, 1100}; /* 1100: several k-blocks and a tail */
    static const int tokens[] = {1, 2, 3, 4, 5, 9, 16, 17, 40, 64, 100}; /* prefill tiles of 16 tokens, 64 per pass */
    ggml_type types[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16};
    float *tmp = aligned_alloc(64, CPU_MM_TMP_FLOATS(1100) * sizeof(float));
    CHECK(tmp != NULL, "%s: the matmul scratch", I->name);
    for (int ti = 0; tmp && ti < 3; ti++) {
        ggml_type t = types[ti];
        mm_float_fn fn = t == GGML_TYPE_F32 ? I->k->mm_f32 : t == GGML_TYPE_F16 ? I->k->mm_f16 : I->k->mm_bf16;
        double worst = 0;
        for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++)
            for (size_t ni = 0; ni < sizeof tokens / sizeof *tokens; ni++) {
                int cols = widths[wi], n = tokens[ni], rows = cols == 1100 && n == 9 ? 150 : n >= 9 ? 21 : 7; /* 150: several row super-groups; 21: 8-row tiles and tails */
                uint8_t *w = make_weight(t, rows, cols);
                float *x = malloc(sizeof(float) * cols * n), *out = malloc(sizeof(float) * rows * n);
                float *row = malloc(sizeof(float) * cols);
                for (int i = 0; i < cols * n; i++) x[i] = t == GGML_TYPE_BF16 ? bf16_round(frand()) : frand();
                size_t rb = ggml_row_bytes(t, (uint64_t)cols);
                /* with the prefill scratch (the transposed-activation kernel) and without (register tiles) */
                for (int with_tmp = 0; with_tmp < 2; with_tmp++) {
                    fn(w, rb, rows, x, cols, n, cols, out, rows, with_tmp ? tmp : NULL);
                    for (int r = 0; r < rows; r++) {
                        quant_dequantize_row(t, w + r * rb, row, cols);
                        for (int j = 0; j < n; j++) {
                            double mag, want = ref_dot(row, x + (size_t)j * cols, cols, &mag);
                            double err = fabs(out[j * rows + r] - want) / (mag + 1e-30);
                            if (err > worst) worst = err;
                        }
                    }
                }
                free(w);
                free(x);
                free(out);
                free(row);
            }
        CHECK(worst < 1e-5, "%s: %s matmul, widths 1..1100, 1..100 tokens (worst relative error %.2g)", I->name,
              ggml_type_name(t), worst);
    }
    free(tmp);
}

/* The activation as the quantized kernels see it: q * d. */
static void act_dequant(const act_q8 *a, int t, float *out) {
    for (int i = 0; i < a->cols; i++) out[i] = a->qs[(size_t)t * a->cols + i] * a->d[(size_t)t * a->nb + i / CPU_QK];
}

static void act_alloc(act_q8 *a, int n, int cols) {
    void *mem = aligned_alloc(64, cpu_act_bytes((size_t)n, (size_t)cols));
    if (!mem) abort();
    cpu_act_place(a, mem, (size_t)n, cols);
}

static void act_free(act_q8 *a) { free(a->qs); }

/* N random values whose 32-value blocks differ in size (down to 1/64 of
 * the largest: the multipliers of cpu_act_quantize take every value). */
static void act_input(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t b = i / CPU_QK;
        x[i] = frand() * 3 * (b % 7 == 3 ? 0.01f : b % 5 == 1 ? 0.3f : b % 3 == 2 ? 0.05f : 1.0f);
    }
}

/* Quantizes N tokens of COLS at X into A with I's passes (ds16 too). */
static void act_fill(const cpu_kern *k, const float *x, act_q8 *a, int n) {
    for (int j = 0; j < n; j++) cpu_act_quantize(k, x + (size_t)j * a->cols, a, j, 1);
}

static void test_quant_act(const isa *I) {
    int cols = 32 * 37, bad = 0;
    float *x = malloc(sizeof(float) * cols);
    act_q8 a, b;
    act_alloc(&a, 1, cols);
    act_alloc(&b, 1, cols);
    for (int rep = 0; rep < 4; rep++) {
        act_input(x, (size_t)cols);
        for (int i = 0; i < cols; i++) x[i] *= rep == 3 ? 1e-3f : rep == 2 ? 3.0f : 1.0f;
        for (int i = 0; i < 32; i++) x[i] = 0; /* an all-zero block */
        if (rep == 1)
            for (int i = 8 * 32; i < 16 * 32; i++) x[i] = 0; /* an all-zero super-block */
        x[40] = 127.5f;                        /* a block dominated by one value */
        act_fill(I->k, x, &a, 1);
        act_fill(&cpu_kern_scalar, x, &b, 1);
        bad += memcmp(a.qs, b.qs, (size_t)cols) != 0 || memcmp(a.d, b.d, sizeof(float) * a.nb) != 0 ||
               memcmp(a.m8, b.m8, sizeof(int32_t) * a.nb) != 0 || memcmp(a.m128, b.m128, sizeof(int32_t) * a.nb) != 0 ||
               memcmp(a.mul, b.mul, sizeof(int16_t) * a.nb) != 0 || memcmp(a.u, b.u, sizeof(float) * CPU_ACT_NSB(a.nb)) != 0 ||
               memcmp(a.ds16, b.ds16, sizeof(float) * 2 * a.nb) != 0;
        for (int i = 0; i < cols; i++)
            if (fabsf(a.qs[i] * a.d[i / CPU_QK] - x[i]) > a.d[i / CPU_QK] * 0.5f * 1.0001f) bad++;
        for (int bl = 0; bl < a.nb; bl++) { /* d = u * mul exactly, mul in 1..64, 64 where the super-block peaks */
            float amax = 0, top = 0;
            for (int i = 0; i < CPU_QK; i++) amax = fmaxf(amax, fabsf(x[CPU_QK * bl + i]));
            for (int i = CPU_QK * (bl / 8 * 8); i < CPU_QK * (bl / 8 * 8 + 8) && i < cols; i++) top = fmaxf(top, fabsf(x[i]));
            int m = a.mul[bl];
            if (m < 1 || m > CPU_ACT_MUL || a.d[bl] != a.u[bl / 8] * (float)m || (amax == top && top > 0 && m != CPU_ACT_MUL) ||
                (m > 1 && amax <= a.u[bl / 8] * 127.0f * (float)(m - 1))) /* not one step coarser than needed */
                bad++;
        }
    }
    CHECK(!bad, "%s: activation quantization matches the scalar reference bit for bit, error <= d/2, d = u * mul", I->name);
    act_free(&a);
    act_free(&b);
    free(x);
}

static void test_quant_mm(const isa *I) {
    ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q5_0,
                         GGML_TYPE_Q4_1, GGML_TYPE_Q5_1, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K};
    static const int tokens[] = {1, 2, 3, 4, 5, 8, 9, 13};
    for (int ti = 0; ti < (int)(sizeof types / sizeof *types); ti++) {
        ggml_type t = types[ti];
        mm_rp_fn fn = cpu_rp_kernel(I->k, t);
        if (!fn) {
            SKIP("%s: %s is not repacked on this path (file-layout rows)", I->name, ggml_type_name(t));
            continue;
        }
        int colsv[] = {256, 512, 768};
        double worst = 0;
        int bad_repack = 0;
        for (int ci = 0; ci < 3; ci++)
            for (size_t ni = 0; ni < sizeof tokens / sizeof *tokens; ni++) {
                int cols = ggml_type_block_size(t) == 256 ? colsv[ci] : colsv[ci] / 8 * (ci + 1) + 32, n = tokens[ni], rows = 48 + 5;
                size_t rb = ggml_row_bytes(t, (uint64_t)cols);
                uint8_t *w = make_weight(t, rows, cols);
                uint8_t *orig = malloc(rb * rows);
                memcpy(orig, w, rb * rows);
                if (repack_weight(t, w, rows, cols)) bad_repack++;
                float *x = malloc(sizeof(float) * cols * n), *out = malloc(sizeof(float) * rows * n);
                float *row = malloc(sizeof(float) * cols), *row2 = malloc(sizeof(float) * cols), *xa = malloc(sizeof(float) * cols);
                act_input(x, (size_t)cols * n);
                act_q8 a;
                act_alloc(&a, n, cols);
                act_fill(I->k, x, &a, n);
                int ng = rows / RP_ROWS;
                fn(w, RP_ROWS * rb, ng, &a, n, out, rows);
                for (int r = 0; r < rows; r++) {
                    quant_dequantize_row(t, orig + r * rb, row, cols);
                    repack_dequant_row(t, w, rows, cols, r, row2);
                    if (memcmp(row, row2, sizeof(float) * cols)) bad_repack++;
                    if (r >= ng * RP_ROWS) continue;
                    for (int j = 0; j < n; j++) {
                        act_dequant(&a, j, xa);
                        double mag, want = ref_dot(row, xa, cols, &mag);
                        double err = fabs(out[j * rows + r] - want) / (mag + 1e-30);
                        if (err > worst) worst = err;
                    }
                }
                act_free(&a);
                free(w);
                free(orig);
                free(x);
                free(out);
                free(row);
                free(row2);
                free(xa);
            }
        CHECK(worst < 2e-6, "%s: %s repacked matmul vs dequantized weights x quantized activation, 1..13 tokens "
                            "(worst relative error %.2g)", I->name, ggml_type_name(t), worst);
        CHECK(!bad_repack, "%s: %s repacking in place: every row (tail rows included) reads back exactly", I->name,
              ggml_type_name(t));
    }
}

/* The file-layout row kernels of every block type: 1 token (generation)
 * and prefill tiles with tails, rows not a multiple of the tiles, widths of
 * several blocks; against F32 sums of the dequantized weights times the
 * activation as quantized. Tolerance: 2e-6 of sum |w x| (the kernels sum
 * exactly in integers and scale in float). */
static void test_row_mm(const isa *I) {
    static const ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                      GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                      GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K};
    static const int tokens[] = {1, 2, 5, 9, 37};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        ggml_type t = types[ti];
        mm_row_fn fn = cpu_row_kernel(I->k, t);
        if (!fn) {
            SKIP("%s: %s has no row kernel on this path (rows are dequantized)", I->name, ggml_type_name(t));
            continue;
        }
        double worst = 0;
        for (int cols = 256; cols <= 768; cols += 512)
            for (size_t ni = 0; ni < sizeof tokens / sizeof *tokens; ni++) {
                int n = tokens[ni], rows = 19;
                size_t rb = ggml_row_bytes(t, (uint64_t)cols);
                uint8_t *w = make_weight(t, rows, cols);
                float *x = malloc(sizeof(float) * cols * n), *out = malloc(sizeof(float) * rows * n);
                float *row = malloc(sizeof(float) * cols), *xa = malloc(sizeof(float) * cols);
                act_input(x, (size_t)cols * n);
                act_q8 a;
                act_alloc(&a, n, cols);
                act_fill(I->k, x, &a, n);
                fn(w, rb, rows, &a, n, out, rows);
                for (int r = 0; r < rows; r++) {
                    quant_dequantize_row(t, w + r * rb, row, cols);
                    for (int j = 0; j < n; j++) {
                        act_dequant(&a, j, xa);
                        double mag, want = ref_dot(row, xa, cols, &mag);
                        worst = fmax(worst, fabs(out[j * rows + r] - want) / (mag + 1e-30));
                    }
                }
                act_free(&a);
                free(w);
                free(x);
                free(out);
                free(row);
                free(xa);
            }
        CHECK(worst < 2e-6, "%s: %s file-layout matmul vs dequantized weights x quantized activation, 1..37 tokens, "
                            "19 rows (worst relative error %.2g)", I->name, ggml_type_name(t), worst);
    }
}

/* AVX-VNNI's vpdpbusd gives the AVX2 kernels' sums exactly (maddubs never
 * saturates on these operands): every integer kernel of the two tables,
 * file-layout rows and repacked groups, returns the same bits. */
static void test_vnni_same(const isa *A, const isa *V) {
    static const ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1,
                                      GGML_TYPE_Q8_0, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                                      GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_XS};
    int cols = 512, rows = 35, n = 6, differ = 0, kernels = 0;
    float *x = malloc(sizeof(float) * cols * n), *o1 = malloc(sizeof(float) * rows * n),
          *o2 = malloc(sizeof(float) * rows * n);
    act_q8 a;
    act_alloc(&a, n, cols);
    act_input(x, (size_t)cols * n);
    act_fill(A->k, x, &a, n);
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        ggml_type t = types[ti];
        size_t rb = ggml_row_bytes(t, (uint64_t)cols);
        uint8_t *w = make_weight(t, rows, cols);
        mm_row_fn r1 = cpu_row_kernel(A->k, t), r2 = cpu_row_kernel(V->k, t);
        for (int nn = 1; r1 && r2 && nn <= n; nn += n - 1) {
            r1(w, rb, rows, &a, nn, o1, rows);
            r2(w, rb, rows, &a, nn, o2, rows);
            differ += memcmp(o1, o2, sizeof(float) * rows * nn) != 0;
            kernels++;
        }
        mm_rp_fn p1 = cpu_rp_kernel(A->k, t), p2 = cpu_rp_kernel(V->k, t);
        if (p1 && p2 && !repack_weight(t, w, rows, cols))
            for (int nn = 1; nn <= n; nn += n - 1) {
                p1(w, RP_ROWS * rb, rows / RP_ROWS, &a, nn, o1, rows);
                p2(w, RP_ROWS * rb, rows / RP_ROWS, &a, nn, o2, rows);
                for (int j = 0; j < nn; j++)
                    differ += memcmp(o1 + (size_t)j * rows, o2 + (size_t)j * rows,
                                     sizeof(float) * (rows / RP_ROWS) * RP_ROWS) != 0;
                kernels++;
            }
        free(w);
    }
    CHECK(!differ && kernels >= 24, "%s and %s: every integer kernel gives the same bits (%d kernel runs, %d differ)",
          A->name, V->name, kernels, differ);
    act_free(&a);
    free(x);
    free(o1);
    free(o2);
}

static void test_attention(const isa *I) {
    static const int nposv[] = {1, 2, 7, 33, 130};
    static const int hdv[] = {64, 24, 128};
    double worst = 0;
    for (int f16 = 0; f16 < 2; f16++)
        for (size_t pi = 0; pi < sizeof nposv / sizeof *nposv; pi++)
            for (size_t hi = 0; hi < sizeof hdv / sizeof *hdv; hi++)
            for (int G = 1; G <= 8; G += G == 1 ? 2 : 5) {
                int npos = nposv[pi], hd = hdv[hi], kvh = 2;
                size_t stride = (size_t)kvh * hd;
                float *q = malloc(sizeof(float) * G * hd), *kf = malloc(sizeof(float) * npos * stride),
                      *vf = malloc(sizeof(float) * npos * stride), *out = malloc(sizeof(float) * G * hd),
                      *score = malloc(sizeof(float) * G * npos);
                uint16_t *kh = malloc(2 * npos * stride), *vh = malloc(2 * npos * stride);
                for (int i = 0; i < G * hd; i++) q[i] = frand() * 2;
                for (size_t i = 0; i < npos * stride; i++) {
                    kh[i] = quant_f32_to_f16(frand() * 2);
                    vh[i] = quant_f32_to_f16(frand());
                    kf[i] = quant_f16_to_f32(kh[i]);
                    vf[i] = quant_f16_to_f32(vh[i]);
                }
                int head = 1; /* the second KV head: exercises the offset */
                const void *kp = f16 ? (const void *)(kh + head * hd) : (const void *)(kf + head * hd);
                const void *vp = f16 ? (const void *)(vh + head * hd) : (const void *)(vf + head * hd);
                float scale = 1.0f / sqrtf((float)hd);
                I->k->attn(q, G, kp, vp, f16, stride, npos, hd, scale, score, out);
                for (int g = 0; g < G; g++) {
                    double *p = malloc(sizeof(double) * npos), mx = -1e300, sum = 0;
                    for (int t = 0; t < npos; t++) {
                        double s = 0;
                        for (int d = 0; d < hd; d++) s += (double)q[g * hd + d] * kf[t * stride + head * hd + d];
                        p[t] = s * scale;
                        if (p[t] > mx) mx = p[t];
                    }
                    for (int t = 0; t < npos; t++) sum += p[t] = exp(p[t] - mx);
                    for (int d = 0; d < hd; d++) {
                        double o = 0;
                        for (int t = 0; t < npos; t++) o += p[t] / sum * vf[t * stride + head * hd + d];
                        double err = fabs(out[g * hd + d] - o);
                        if (err > worst) worst = err;
                    }
                    free(p);
                }
                free(q);
                free(kf);
                free(vf);
                free(out);
                free(score);
                free(kh);
                free(vh);
            }
    CHECK(worst < 2e-6, "%s: attention over F32 and F16 caches, 1..130 positions, head sizes 24/64/128, 1, 3 and 8 heads "
                        "per KV head (worst error %.2g)", I->name, worst);
}

static void test_elementwise(const isa *I) {
    int n = 1000 + 7;
    float *a = malloc(sizeof(float) * n), *b = malloc(sizeof(float) * n), *c = malloc(sizeof(float) * n),
          *w = malloc(sizeof(float) * n);
    double worst_exp = 0, worst_silu = 0, worst = 0;
    for (int i = 0; i < n; i++) {
        a[i] = frand() * 30 + 9;
        b[i] = frand();
        w[i] = frand();
    }
    a[0] = -200; /* underflows, must not produce NaN */
    a[1] = 39.5f; /* the largest: exp_sum gets x - max <= 0 in attention */
    memcpy(c, a, sizeof(float) * n);
    float mx = 40;
    float s = I->k->exp_sum(c, n, mx);
    double sref = 0;
    for (int i = 0; i < n; i++) {
        double e = exp((double)a[i] - mx);
        sref += e;
        double err = fabs(c[i] - e) / (e + 1e-37);
        if (e > 1e-30 && err > worst_exp) worst_exp = err;
    }
    CHECK(worst_exp < 1e-5 && fabs(s - sref) / sref < 1e-5, "%s: exp_sum (worst relative error %.2g)", I->name, worst_exp);
    memcpy(c, a, sizeof(float) * n);
    I->k->swiglu(c, b, (size_t)n);
    for (int i = 0; i < n; i++) {
        double g = a[i], want = g / (1 + exp(-g)) * b[i];
        double err = fabs(c[i] - want) / (fabs(g * b[i]) + 1e-30);
        if (!(err <= worst_silu)) worst_silu = err;
    }
    CHECK(worst_silu < 1e-6, "%s: swiglu (worst relative error %.2g)", I->name, worst_silu);
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (double)b[i] * b[i];
    CHECK(fabs(I->k->sumsq(b, n) - ss) / ss < 1e-5, "%s: sum of squares", I->name);
    I->k->scale_mul(c, b, 0.5f, w, n);
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(c[i] - b[i] * 0.5 * w[i]));
    memcpy(c, b, sizeof(float) * n);
    I->k->add(c, w, (size_t)n);
    for (int i = 0; i < n; i++) worst = fmax(worst, fabs(c[i] - (b[i] + w[i])));
    CHECK(worst < 1e-6, "%s: scale-multiply and add", I->name);
    uint16_t *h = malloc(2 * n), *h2 = malloc(2 * n);
    for (int i = 0; i < n; i++) a[i] = frand() * (i % 3 == 0 ? 1e-6f : i % 3 == 1 ? 1.0f : 7e4f);
    I->k->to_f16(h, a, (size_t)n);
    cpu_kern_scalar.to_f16(h2, a, (size_t)n);
    CHECK(!memcmp(h, h2, 2 * (size_t)n), "%s: F32 -> F16 (subnormals, overflow) matches the scalar conversion", I->name);
    free(h);
    free(h2);
    free(a);
    free(b);
    free(c);
    free(w);
}

typedef struct {
    atomic_int *hits;
} pool_ctx;

static void pool_fn(void *ctx, size_t b, size_t e, int ith) {
    (void)ith;
    pool_ctx *p = ctx;
    for (size_t i = b; i < e; i++) atomic_fetch_add(&p->hits[i], 1);
}

static void test_pool(void) {
    int bad = 0;
    for (int nt = 1; nt <= 4; nt++) {
        tp_pool *pool = tp_create(nt);
        for (size_t n = 0; n < 300; n += 37)
            for (size_t chunk = 1; chunk < 40; chunk += 13) {
                atomic_int *hits = calloc(n + 1, sizeof *hits);
                pool_ctx c = {hits};
                tp_run_dynamic(pool, pool_fn, &c, n, chunk);
                for (size_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
                memset(hits, 0, (n + 1) * sizeof *hits);
                tp_run(pool, pool_fn, &c, n, chunk);
                for (size_t i = 0; i < n; i++) bad += atomic_load(&hits[i]) != 1;
                free(hits);
            }
        tp_destroy(pool);
    }
    CHECK(!bad, "thread pool: static and balanced runs cover every item exactly once (1-4 threads)");
}

/* The backend end to end: repacked weights with tail rows, embed of a repacked row. */
static void test_backend(void) {
    kb_backend *kb = kb_cpu_create(3);
    ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,  GGML_TYPE_Q4_0,
                         GGML_TYPE_Q4_K, GGML_TYPE_Q6_K, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0,  GGML_TYPE_Q5_1,
                         GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q5_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
    for (int ti = 0; ti < (int)(sizeof types / sizeof *types); ti++) {
        ggml_type t = types[ti];
        int quant = ti >= 3, cols = quant ? 512 : 172, rows = 40, n = 6;
        size_t rb = ggml_row_bytes(t, (uint64_t)cols);
        uint8_t *w = make_weight(t, rows, cols);
        float *deq = malloc(sizeof(float) * rows * cols);
        for (int r = 0; r < rows; r++) quant_dequantize_row(t, w + r * rb, deq + (size_t)r * cols, cols);
        kb_weight kw = {t, rows, cols, w, NULL, rb * rows};
        kb_scratch_shape sh = {n, cols, 64, NULL};
        CHECK(kb->reserve(kb, &sh) == 0, "reserve the scratch of %d rows of %d", n, cols);
        int up = kb->weight_upload(kb, &kw);
        float *x = malloc(sizeof(float) * n * cols), *out = malloc(sizeof(float) * n * rows), *emb = malloc(sizeof(float) * cols);
        float *xr = malloc(sizeof(float) * n * cols); /* what a BF16 weight multiplies: x rounded to BF16 */
        for (int i = 0; i < n * cols; i++) {
            x[i] = frand();
            xr[i] = t == GGML_TYPE_BF16 ? bf16_round(x[i]) : x[i];
        }
        double worst = 0, embed_err = 0;
        for (int nn = 1; nn <= n; nn += n - 1) {
            kb->matmul(kb, out, &kw, x, nn);
            for (int j = 0; j < nn; j++)
                for (int r = 0; r < rows; r++) {
                    double mag, want = ref_dot(deq + (size_t)r * cols, xr + (size_t)j * cols, cols, &mag);
                    worst = fmax(worst, fabs(out[j * rows + r] - want) / mag);
                }
        }
        for (int r = 0; r < rows; r += 13) {
            int32_t tok = r;
            kb->embed(kb, emb, &kw, &tok, 1);
            for (int i = 0; i < cols; i++) embed_err = fmax(embed_err, fabs(emb[i] - deq[(size_t)r * cols + i]));
        }
        /* activation quantization: error <= 1/254 of each block's max, relative to sum |w x| well under 1% */
        double tol = quant ? 1e-2 : 1e-5;
        CHECK(up == 0 && worst < tol && embed_err == 0,
              "backend (%s) %s matmul (40 rows, 1 and 6 tokens, %s; BF16: of the input rounded to BF16) and embed (worst "
              "relative error %.2g, embed %.2g)",
              cpu_kern_best()->name, ggml_type_name(t), kw.dev ? "repacked, 8 tail rows" : "file layout", worst, embed_err);
        free(w);
        free(deq);
        free(x);
        free(xr);
        free(out);
        free(emb);
    }
    kb->destroy(kb);
}

/* Batch invariance (KB_EXACT_ROWS): through the backend, a matmul of n <=
 * KB_EXACT_ROWS rows gives each row bit for bit what a one-row call gives,
 * for every weight type (the speculative decoder's verification relies on
 * it). Widths with tails (172, 200) and rows not a multiple of 16. */
static void test_batch_invariance(void) {
    kb_backend *kb = kb_cpu_create(2);
    ggml_type types[] = {GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0,   GGML_TYPE_Q4_0,
                         GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_IQ4_NL, GGML_TYPE_Q2_K,
                         GGML_TYPE_Q3_K, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,   GGML_TYPE_IQ4_XS};
    for (int ti = 0; ti < (int)(sizeof types / sizeof types[0]); ti++) {
        ggml_type t = types[ti];
        int quant = ti >= 3;
        for (int cols = quant ? 256 : 172; cols <= (quant ? 512 : 200); cols += quant ? 256 : 28) {
            int rows = 37, bad = 0;
            size_t rb = ggml_row_bytes(t, (uint64_t)cols);
            uint8_t *w = make_weight(t, rows, cols);
            kb_weight kw = {t, rows, cols, w, NULL, rb * rows};
            kb_scratch_shape sh = {KB_EXACT_ROWS, cols, 64, NULL};
            int up = kb->reserve(kb, &sh) == 0 && kb->weight_upload(kb, &kw) == 0;
            float *x = malloc(sizeof(float) * KB_EXACT_ROWS * cols), *one = malloc(sizeof(float) * KB_EXACT_ROWS * rows),
                  *out = malloc(sizeof(float) * KB_EXACT_ROWS * rows);
            for (int i = 0; i < KB_EXACT_ROWS * cols; i++) x[i] = frand();
            for (int j = 0; j < KB_EXACT_ROWS; j++) kb->matmul(kb, one + (size_t)j * rows, &kw, x + (size_t)j * cols, 1);
            for (int n = 2; n <= KB_EXACT_ROWS; n++) {
                kb->matmul(kb, out, &kw, x, n);
                bad += memcmp(out, one, sizeof(float) * n * rows) != 0;
            }
            CHECK(up && !bad && !kb_error(kb), "backend (%s) %s matmul of 2..%d rows of %d: each row bit for bit the one-row result",
                  cpu_kern_best()->name, ggml_type_name(t), KB_EXACT_ROWS, cols);
            if (kw.dev && kw.dev != kw.host) kb->weight_release(kb, &kw);
            free(w);
            free(x);
            free(one);
            free(out);
        }
    }
    kb->destroy(kb);
}

/* With --backend only the backend's tests run, on the kernels that
 * cpu_kern_best() picks (t_unit.sh runs them again under ILPD_CPU_ISA caps). */
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--backend")) {
        test_backend();
        test_batch_invariance();
        CHECK_DONE();
    }
    isa isas[4] = {{"scalar", &cpu_kern_scalar},
                   {"avx2", cpu_kern_avx2()},
                   {"avxvnni", cpu_kern_avxvnni()},
                   {"avx512", cpu_kern_avx512()}};
    for (int i = 0; i < 4; i++) {
        if (!isas[i].k) {
            SKIP("%s kernels: this CPU (or compiler) lacks the instructions", isas[i].name);
            continue;
        }
        test_float_mm(&isas[i]);
        test_quant_act(&isas[i]);
        test_quant_mm(&isas[i]);
        test_row_mm(&isas[i]);
        test_attention(&isas[i]);
        test_elementwise(&isas[i]);
    }
    if (isas[1].k && isas[2].k)
        test_vnni_same(&isas[1], &isas[2]);
    else
        SKIP("avx2 against avxvnni: this CPU lacks one of them");
    test_pool();
    test_backend();
    test_batch_invariance();
    printf("# best kernels on this CPU: %s\n", cpu_kern_best()->name);
    CHECK_DONE();
}
