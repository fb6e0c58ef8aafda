/* kern_scalar.c - portable C versions of every kernel: the fallback on CPUs
 * without AVX2, and the reference the SIMD paths are tested against. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/quant.h"

static float w_at(const void *w, ggml_type t, int k) {
    if (t == GGML_TYPE_F32) return ((const float *)w)[k];
    if (t == GGML_TYPE_F16) return quant_f16_to_f32(((const uint16_t *)w)[k]);
    return quant_bf16_to_f32(((const uint16_t *)w)[k]);
}

static void mm_float(ggml_type t, const void *w, size_t row_bytes, int rows, const float *x, int ldx, int n, int cols,
                     float *out, int ldo) {
    for (int r = 0; r < rows; r++) {
        const void *wr = (const uint8_t *)w + (size_t)r * row_bytes;
        for (int tk = 0; tk < n; tk++) {
            const float *xt = x + (size_t)tk * ldx;
            float s = 0;
            for (int k = 0; k < cols; k++) s += w_at(wr, t, k) * xt[k];
            out[(size_t)tk * ldo + r] = s;
        }
    }
}

static void mm_f32(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out, int ldo,
                   float *tmp) {
    (void)tmp;
    mm_float(GGML_TYPE_F32, w, rb, rows, x, ldx, n, cols, out, ldo);
}
static void mm_f16(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out, int ldo,
                   float *tmp) {
    (void)tmp;
    mm_float(GGML_TYPE_F16, w, rb, rows, x, ldx, n, cols, out, ldo);
}
static void mm_bf16(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out, int ldo,
                   float *tmp) {
    (void)tmp;
    mm_float(GGML_TYPE_BF16, w, rb, rows, x, ldx, n, cols, out, ldo);
}

/* The value of byte I of chunk K for row R of rp32 group block O (T with
 * nibbles: the low one when HI is 0), before the type's offset. */
static int rp32_value(ggml_type t, const uint8_t *o, int r, int k, int i, int hi) {
    int bit = 4 * r + i;
    uint8_t q = o[rp32_chunk_off(t) + k * 64 + bit];
    int v = hi ? q >> 4 : q & 15;
    if (t == GGML_TYPE_IQ4_NL) return quant_iq4_values[v];
    if (rp32_has_bits(t)) v |= ((o[rp32_mask_off(t) + 16 * k + 8 * hi + bit / 8] >> (bit % 8)) & 1) << 4;
    return v;
}

/* The rp32 types (cpu_internal.h): per block the integer sum of values x
 * activation, with the offsets of Q4_0 (-8), Q5_0 (-16) and Q8_0's flipped
 * sign bit (-128) through the activation's m8 / m128, then the scales, and
 * Q4_1/Q5_1's min times the activation's block sum. */
static void mm_q_32(ggml_type t, const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out, int ldo) {
    int nb = a->nb;
    size_t bb = 16 * ggml_type_block_bytes(t);
    for (int g = 0; g < ng; g++)
        for (int tok = 0; tok < n; tok++) {
            const int8_t *aq = a->qs + (size_t)tok * a->cols;
            for (int r = 0; r < RP_ROWS; r++) {
                float acc = 0;
                for (int b = 0; b < nb; b++) {
                    const uint8_t *o = w + (size_t)g * gbytes + (size_t)b * bb;
                    const int8_t *ab = aq + 32 * b;
                    size_t ab_i = (size_t)tok * nb + b;
                    int32_t isum = t == GGML_TYPE_Q4_0 ? a->m8[ab_i] : t == GGML_TYPE_Q5_0 ? 2 * a->m8[ab_i] : 0;
                    if (t == GGML_TYPE_Q8_0) {
                        isum = a->m128[ab_i];
                        for (int k = 0; k < 8; k++)
                            for (int i = 0; i < 4; i++) isum += o[rp32_chunk_off(t) + k * 64 + r * 4 + i] * ab[4 * k + i];
                    } else {
                        for (int k = 0; k < 4; k++)
                            for (int i = 0; i < 4; i++)
                                isum += rp32_value(t, o, r, k, i, 0) * ab[4 * k + i] +
                                        rp32_value(t, o, r, k, i, 1) * ab[16 + 4 * k + i];
                    }
                    uint16_t dh;
                    memcpy(&dh, o + 2 * r, 2);
                    acc += (float)isum * (quant_f16_to_f32(dh) * a->d[ab_i]);
                    if (rp32_has_min(t)) {
                        memcpy(&dh, o + 32 + 2 * r, 2);
                        acc += quant_f16_to_f32(dh) * a->ds[ab_i];
                    }
                }
                out[(size_t)tok * ldo + g * RP_ROWS + r] = acc;
            }
        }
}

static void mm_q4_0(const uint8_t *w, size_t gb, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_q_32(GGML_TYPE_Q4_0, w, gb, ng, a, n, out, ldo);
}
static void mm_q4_1(const uint8_t *w, size_t gb, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_q_32(GGML_TYPE_Q4_1, w, gb, ng, a, n, out, ldo);
}
static void mm_iq4_nl(const uint8_t *w, size_t gb, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_q_32(GGML_TYPE_IQ4_NL, w, gb, ng, a, n, out, ldo);
}
static void mm_q5_0(const uint8_t *w, size_t gb, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_q_32(GGML_TYPE_Q5_0, w, gb, ng, a, n, out, ldo);
}
static void mm_q5_1(const uint8_t *w, size_t gb, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_q_32(GGML_TYPE_Q5_1, w, gb, ng, a, n, out, ldo);
}
static void mm_q8_0(const uint8_t *w, size_t gb, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_q_32(GGML_TYPE_Q8_0, w, gb, ng, a, n, out, ldo);
}

static void mm_q4_k(const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out, int ldo) {
    int nb = a->nb, nsb = nb / 8;
    for (int g = 0; g < ng; g++)
        for (int t = 0; t < n; t++) {
            const int8_t *aq = a->qs + (size_t)t * a->cols;
            const float *ad = a->d + (size_t)t * nb, *ads = a->ds + (size_t)t * nb;
            for (int r = 0; r < RP_ROWS; r++) {
                float acc = 0;
                for (int sb = 0; sb < nsb; sb++) {
                    const uint8_t *o = w + (size_t)g * gbytes + (size_t)sb * 16 * 144;
                    float accsc = 0, accm = 0;
                    for (int j = 0; j < 8; j++) {
                        uint8_t lo = o[64 + j * 16 + r], hi = (uint8_t)(o[192 + (j / 2) * 16 + r] >> (4 * (j & 1)));
                        int sc = (lo & 15) | (hi & 3) << 4, m = (lo >> 4) | ((hi >> 2) & 3) << 4;
                        int c = j / 2, sh = 4 * (j & 1);
                        const int8_t *ab = aq + 256 * sb + 32 * j;
                        int32_t isum = 0;
                        for (int k = 0; k < 8; k++)
                            for (int i = 0; i < 4; i++)
                                isum += ((o[256 + (c * 8 + k) * 64 + r * 4 + i] >> sh) & 15) * ab[4 * k + i];
                        accsc += (float)isum * ((float)sc * ad[8 * sb + j]);
                        accm += (float)m * ads[8 * sb + j];
                    }
                    uint16_t dh, mh;
                    memcpy(&dh, o + 2 * r, 2);
                    memcpy(&mh, o + 32 + 2 * r, 2);
                    acc += quant_f16_to_f32(dh) * accsc - quant_f16_to_f32(mh) * accm;
                }
                out[(size_t)t * ldo + g * RP_ROWS + r] = acc;
            }
        }
}

/* Q6_K super-block: ql[128], qh[64], scales[16] (int8, one per 16 values), d. */
static void mm_q6_k(const uint8_t *w, size_t row_bytes, int rows, const act_q8 *a, int n, float *out, int ldo) {
    int nsb = a->cols / 256;
    for (int r = 0; r < rows; r++)
        for (int t = 0; t < n; t++) {
            const int8_t *aq = a->qs + (size_t)t * a->cols;
            const float *ad = a->d + (size_t)t * a->nb;
            float acc = 0;
            for (int sb = 0; sb < nsb; sb++) {
                const uint8_t *blk = w + (size_t)r * row_bytes + (size_t)sb * 210;
                const uint8_t *ql = blk, *qh = blk + 128;
                const int8_t *sc = (const int8_t *)(blk + 192);
                uint16_t dh;
                memcpy(&dh, blk + 208, 2);
                float d = quant_f16_to_f32(dh);
                for (int j = 0; j < 16; j++) { /* values 16j .. 16j+15 */
                    int32_t isum = 0;
                    for (int e = 16 * j; e < 16 * j + 16; e++) {
                        int h = e / 128, l = e % 32, i = (e % 128) / 32;
                        int lo = (ql[64 * h + l + 32 * (i & 1)] >> (4 * (i >> 1))) & 15;
                        int hi = (qh[32 * h + l] >> (2 * i)) & 3;
                        isum += ((lo | hi << 4) - 32) * aq[256 * sb + e];
                    }
                    acc += (float)(isum * sc[j]) * (d * ad[8 * sb + j / 2]);
                }
            }
            out[(size_t)t * ldo + r] = acc;
        }
}

static void act_absmax(const float *x, int nb, float *amax) {
    for (int b = 0; b < nb; b++) {
        float m = 0;
        for (int i = 0; i < CPU_QK; i++) m = fmaxf(m, fabsf(x[CPU_QK * b + i]));
        amax[b] = m;
    }
}

static void act_round(const float *x, int nb, const float *id, int8_t *qs, int32_t *sum) {
    for (int b = 0; b < nb; b++) {
        int32_t s = 0;
        for (int i = 0; i < CPU_QK; i++) {
            int q = (int)nearbyintf(x[CPU_QK * b + i] * id[b]);
            qs[CPU_QK * b + i] = (int8_t)q;
            s += q;
        }
        sum[b] = s;
    }
}

static float dot_f32(const float *a, const float *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static float dot_f16(const float *a, const uint16_t *b, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += a[i] * quant_f16_to_f32(b[i]);
    return s;
}

static void axpy_f32(float *y, float a, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

static void axpy_f16(float *y, float a, const uint16_t *x, int n) {
    for (int i = 0; i < n; i++) y[i] += a * quant_f16_to_f32(x[i]);
}

static float exp_sum(float *x, int n, float mx) {
    float s = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        s += x[i];
    }
    return s;
}

static void swiglu(float *g, const float *u, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static float sumsq(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

static void scale_mul(float *out, const float *x, float s, const float *w, int n) {
    for (int i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

static void add(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static void to_f16(uint16_t *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = quant_f32_to_f16(x[i]);
}

#define KERN_TARGET
#define KERN_ATTN attn
#include "kernels/cpu/kern_attn.h"
#undef KERN_TARGET
#undef KERN_ATTN

const cpu_kern cpu_kern_scalar = {
    .name = "scalar",
    .mm_f32 = mm_f32,
    .mm_f16 = mm_f16,
    .mm_bf16 = mm_bf16,
    .mm_q8_0 = mm_q8_0,
    .mm_q4_0 = mm_q4_0,
    .mm_iq4_nl = mm_iq4_nl,
    .mm_q5_0 = mm_q5_0,
    .mm_q4_1 = mm_q4_1,
    .mm_q5_1 = mm_q5_1,
    .mm_q4_k = mm_q4_k,
    .mm_row = {[GGML_TYPE_Q6_K] = mm_q6_k},
    .act_absmax = act_absmax,
    .act_round = act_round,
    .attn = attn,
    .dot_f32 = dot_f32,
    .dot_f16 = dot_f16,
    .axpy_f32 = axpy_f32,
    .axpy_f16 = axpy_f16,
    .exp_sum = exp_sum,
    .swiglu = swiglu,
    .sumsq = sumsq,
    .scale_mul = scale_mul,
    .add = add,
    .to_f16 = to_f16,
};

/* The activation's layout for N tokens of COLS: the int8 values (QS bytes),
 * then parts of FL bytes: d, m8, m128, ds, the per-16 sums (two parts), u
 * and mul (at most one part each). Returns the bytes of it all. */
static size_t act_layout(size_t n, size_t cols, size_t *qs, size_t *fl) {
    *qs = (n * cols + 63) / 64 * 64;
    *fl = (n * (cols / CPU_QK) * 4 + 63) / 64 * 64;
    return *qs + 8 * *fl;
}

size_t cpu_act_bytes(size_t n, size_t cols) {
    size_t qs, fl;
    return act_layout(n, cols, &qs, &fl);
}

void cpu_act_place(act_q8 *a, void *mem, size_t n, int cols) {
    size_t qs, fl;
    act_layout(n, (size_t)cols, &qs, &fl);
    uint8_t *p = mem;
    a->qs = (int8_t *)p;
    a->d = (float *)(p + qs);
    a->m8 = (int32_t *)(p + qs + fl);
    a->m128 = (int32_t *)(p + qs + 2 * fl);
    a->ds = (float *)(p + qs + 3 * fl);
    a->ds16 = (float *)(p + qs + 4 * fl);
    a->u = (float *)(p + qs + 6 * fl);
    a->mul = (int16_t *)(p + qs + 7 * fl);
    a->cols = cols;
    a->nb = cols / CPU_QK;
}

/* Per super-block (8 blocks): the unit u from the largest magnitudes, each
 * block's multiplier and scale d = u * mul, then the rounding. The same
 * float operations on every ISA, so that every ISA gets the same bits. */
void cpu_act_quantize(const cpu_kern *k, const float *x, const act_q8 *a, int t, int sums16) {
    const int nb = a->nb, nsb = CPU_ACT_NSB(nb);
    int8_t *qs = a->qs + (size_t)t * a->cols;
    float *d = a->d + (size_t)t * nb, *ds = a->ds + (size_t)t * nb;
    int32_t *m8 = a->m8 + (size_t)t * nb, *m128 = a->m128 + (size_t)t * nb;
    int16_t *mul = a->mul + (size_t)t * nb;
    for (int sb = 0; sb < nsb; sb++) {
        int b0 = 8 * sb, n = nb - b0 < 8 ? nb - b0 : 8;
        float amax[8], id[8], top = 0;
        int32_t sum[8];
        k->act_absmax(x + CPU_QK * b0, n, amax);
        for (int b = 0; b < n; b++) top = fmaxf(top, amax[b]);
        float u = top / (127.0f * CPU_ACT_MUL), step = 127.0f * u;
        a->u[(size_t)t * nsb + sb] = u;
        for (int b = 0; b < n; b++) {
            float r = step > 0 ? ceilf(amax[b] / step) : 1;
            int m = r < 1 ? 1 : r > CPU_ACT_MUL ? CPU_ACT_MUL : (int)r;
            mul[b0 + b] = (int16_t)m;
            d[b0 + b] = u * (float)m;
            id[b] = d[b0 + b] != 0.0f ? 1.0f / d[b0 + b] : 0.0f;
        }
        k->act_round(x + CPU_QK * b0, n, id, qs + CPU_QK * b0, sum);
        for (int b = 0; b < n; b++) {
            m8[b0 + b] = -8 * sum[b];
            m128[b0 + b] = -128 * sum[b];
            ds[b0 + b] = d[b0 + b] * (float)sum[b];
        }
    }
    if (sums16) {
        float *ds16 = a->ds16 + (size_t)t * 2 * nb;
        for (int g = 0; g < a->cols / 16; g++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += qs[16 * g + i];
            ds16[g] = d[g / 2] * (float)s;
        }
    }
}

mm_row_fn cpu_row_kernel(const cpu_kern *k, ggml_type t) {
    return (unsigned)t < CPU_ROW_TYPES ? k->mm_row[t] : NULL;
}

mm_rp_fn cpu_rp_kernel(const cpu_kern *k, ggml_type t) {
    switch (t) {
    case GGML_TYPE_Q8_0: return k->mm_q8_0;
    case GGML_TYPE_Q4_0: return k->mm_q4_0;
    case GGML_TYPE_Q2_K: return k->mm_q2_k;
    case GGML_TYPE_Q3_K: return k->mm_q3_k;
    case GGML_TYPE_Q4_K: return k->mm_q4_k;
    case GGML_TYPE_Q5_K: return k->mm_q5_k;
    case GGML_TYPE_Q6_K: return k->mm_q6_k;
    case GGML_TYPE_IQ4_NL: return k->mm_iq4_nl;
    case GGML_TYPE_IQ4_XS: return k->mm_iq4_xs;
    case GGML_TYPE_Q5_0: return k->mm_q5_0;
    case GGML_TYPE_Q4_1: return k->mm_q4_1;
    case GGML_TYPE_Q5_1: return k->mm_q5_1;
    default: return NULL;
    }
}

const cpu_kern *cpu_kern_best(void) {
    static const cpu_kern *best;
    if (best) return best;
    const char *cap = getenv("ILPD_CPU_ISA");
    const cpu_kern *k = NULL;
    if (!cap || strcmp(cap, "scalar")) {
        if (!cap || (strcmp(cap, "avx2") && strcmp(cap, "avxvnni"))) k = cpu_kern_avx512();
        if (!k && (!cap || strcmp(cap, "avx2"))) k = cpu_kern_avxvnni();
        if (!k) k = cpu_kern_avx2();
    }
    best = k ? k : &cpu_kern_scalar;
    return best;
}
