/* kern_avx512.c - AVX-512 kernels (F, BW, VL, DQ, VNNI; F16C and FMA for the
 * float paths). Built for every x86-64 target through function attributes
 * and used only when the CPU reports the features at run time. */
#include "kernels/cpu/cpu_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(ILPD_NO_SIMD)
#include <immintrin.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#define T512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c,avx2,bmi2")))
#define AI inline __attribute__((always_inline))

/* ---- float weights: register tiles of RT rows x TT tokens ---- */

enum { W_F32, W_F16, W_BF16 };

static AI T512 __m512 loadw(int wt, const uint8_t *p, int k) {
    if (wt == W_F32) return _mm512_loadu_ps((const float *)p + k);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + k));
    if (wt == W_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static AI T512 __m512 loadw_mask(int wt, const uint8_t *p, int k, __mmask16 m) {
    if (wt == W_F32) return _mm512_maskz_loadu_ps(m, (const float *)p + k);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + k);
    if (wt == W_F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static AI T512 void ftile(int wt, int RT, int TT, const uint8_t *w, size_t rb, const float *x, int ldx, int cols,
                          float *out, int ldo) {
    __m512 acc[4][4];
    for (int i = 0; i < RT; i++)
        for (int j = 0; j < TT; j++) acc[i][j] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 16 <= cols; k += 16) {
        __m512 wv[4];
        for (int i = 0; i < RT; i++) wv[i] = loadw(wt, w + (size_t)i * rb, k);
        for (int j = 0; j < TT; j++) {
            __m512 xv = _mm512_loadu_ps(x + (size_t)j * ldx + k);
            for (int i = 0; i < RT; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    if (k < cols) {
        __mmask16 m = (__mmask16)((1u << (cols - k)) - 1);
        __m512 wv[4];
        for (int i = 0; i < RT; i++) wv[i] = loadw_mask(wt, w + (size_t)i * rb, k, m);
        for (int j = 0; j < TT; j++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x + (size_t)j * ldx + k);
            for (int i = 0; i < RT; i++) acc[i][j] = _mm512_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    for (int i = 0; i < RT; i++)
        for (int j = 0; j < TT; j++) out[(size_t)j * ldo + i] = _mm512_reduce_add_ps(acc[i][j]);
}

/* The sum of V's 16 lanes in a fixed order: halves added (256, then 128
 * bits), then lanes 0+2 and 1+3, then those two. hsum16x4 does the same
 * additions for four vectors at once (fewer instructions per sum, the same
 * bits). */
static AI T512 float hsum16(__m512 v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    __m128 p = _mm_add_ps(q, _mm_permute_ps(q, 0x4E));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

static AI T512 void hsum16x4(__m512 a, __m512 b, __m512 c, __m512 d, float *out, int ldo) {
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xEE));
    __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
    __m512 p = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));
    __m512 r = _mm512_add_ps(p, _mm512_movehdup_ps(p)); /* lane 4j: p[4j] + p[4j+1] */
    float t[16];
    _mm512_storeu_ps(t, r);
    for (int j = 0; j < 4; j++) out[(size_t)j * ldo] = t[4 * j];
}

/* One weight row against TT tokens (the row read and converted once): each
 * token's sum runs in 4 chains over k, in the same order whatever TT is, so
 * that a small batch gives every token the bits a one-token call gives it
 * (KB_EXACT_ROWS); decode (one token) is the TT = 1 case. */
static AI T512 void row_dot_tt(int wt, int TT, const uint8_t *w, const float *x, int ldx, int cols, float *out,
                               int ldo) {
    __m512 a[4][4];
    for (int j = 0; j < TT; j++) a[j][0] = a[j][1] = a[j][2] = a[j][3] = _mm512_setzero_ps();
    int k = 0;
    for (; k + 64 <= cols; k += 64) {
        __m512 w0 = loadw(wt, w, k), w1 = loadw(wt, w, k + 16), w2 = loadw(wt, w, k + 32), w3 = loadw(wt, w, k + 48);
        for (int j = 0; j < TT; j++) {
            const float *xj = x + (size_t)j * ldx + k;
            a[j][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xj), a[j][0]);
            a[j][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xj + 16), a[j][1]);
            a[j][2] = _mm512_fmadd_ps(w2, _mm512_loadu_ps(xj + 32), a[j][2]);
            a[j][3] = _mm512_fmadd_ps(w3, _mm512_loadu_ps(xj + 48), a[j][3]);
        }
    }
    for (; k < cols; k += 16) {
        __mmask16 m = (__mmask16)(cols - k >= 16 ? 0xFFFF : (1u << (cols - k)) - 1);
        __m512 wv = loadw_mask(wt, w, k, m);
        for (int j = 0; j < TT; j++)
            a[j][0] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(m, x + (size_t)j * ldx + k), a[j][0]);
    }
    __m512 v[4];
    for (int j = 0; j < TT; j++) v[j] = _mm512_add_ps(_mm512_add_ps(a[j][0], a[j][1]), _mm512_add_ps(a[j][2], a[j][3]));
    if (TT == 4) {
        hsum16x4(v[0], v[1], v[2], v[3], out, ldo);
        return;
    }
    for (int j = 0; j < TT; j++) out[(size_t)j * ldo] = hsum16(v[j]);
}

/* Up to KB_EXACT_ROWS tokens: row by row, tokens 4 at a time through row_dot_tt. */
static AI T512 void mm_float_small(int wt, const uint8_t *w, size_t rb, int rows, const float *x, int ldx, int n,
                                   int cols, float *out, int ldo) {
    for (int r = 0; r < rows; r++) {
        const uint8_t *wr = w + (size_t)r * rb;
        int t = 0;
        for (; t + 4 <= n; t += 4) row_dot_tt(wt, 4, wr, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
        switch (n - t) {
        case 3: row_dot_tt(wt, 3, wr, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo); break;
        case 2: row_dot_tt(wt, 2, wr, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo); break;
        case 1: row_dot_tt(wt, 1, wr, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo); break;
        default: break;
        }
    }
}

/* Prefill (n >= 4) as outer products, 16 tokens per vector: the
 * activations are transposed once per call into XT (k-major, tokens padded
 * to NV vectors with zeros), so that one k step of a tile loads NV vectors of
 * tokens and broadcasts R weights, with no horizontal sums. K runs in blocks
 * of KB: a block of XT (KB x 64 tokens = 32 KiB) stays in L1 while every
 * panel of R weight rows (converted to float once, PANEL) runs over it; each
 * tile's sums live in ACC (rows x padded tokens) between blocks. */
#define KB 128 /* k per block: the XT block must fit in L1 beside the panel */
#define SG 64  /* rows whose sums stay in ACC while one XT block is hot */
_Static_assert(CPU_MM_TMP_FLOATS(0) == (size_t)SG * 64, "the transposed activation and ACC fit the matmul scratch");

static AI T512 void otile(int R, int NV, const float *P, const float *xt, int ldt, int kb, float *acc, int first) {
    __m512 c[8][4];
    for (int i = 0; i < R; i++)
        for (int v = 0; v < NV; v++) c[i][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + i * ldt + v * 16);
    for (int k = 0; k < kb; k++) {
        __m512 xv[4];
        for (int v = 0; v < NV; v++) xv[v] = _mm512_load_ps(xt + (size_t)k * ldt + v * 16);
        for (int i = 0; i < R; i++) {
            __m512 wv = _mm512_set1_ps(P[i * KB + k]);
            for (int v = 0; v < NV; v++) c[i][v] = _mm512_fmadd_ps(wv, xv[v], c[i][v]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int v = 0; v < NV; v++) _mm512_store_ps(acc + i * ldt + v * 16, c[i][v]);
}

/* DST[k*ldd + i] = SRC[i*lds + k] for k < KN (<= 16) and i < 16, rows i >=
 * N read as zeros: a 16 x 16 block transposed in registers (unpack, then
 * shuffles within and across 128-bit lanes). */
static AI T512 void transpose16(const float *src, size_t lds, int n, int kn, float *dst, size_t ldd) {
    __mmask16 km = (__mmask16)(kn >= 16 ? 0xFFFF : (1u << kn) - 1);
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = i < n ? _mm512_maskz_loadu_ps(km, src + (size_t)i * lds) : _mm512_setzero_ps();
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int j = 0; j < 16; j += 4) { /* u[j+m]: rows j..j+3, column m + 4 * lane */
        u[j] = _mm512_shuffle_ps(t[j], t[j + 2], 0x44);
        u[j + 1] = _mm512_shuffle_ps(t[j], t[j + 2], 0xEE);
        u[j + 2] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        u[j + 3] = _mm512_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88), v1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xDD);
        __m512 w0 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88), w1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xDD);
        __m512 col[4] = {_mm512_shuffle_f32x4(v0, w0, 0x88), _mm512_shuffle_f32x4(v1, w1, 0x88),
                         _mm512_shuffle_f32x4(v0, w0, 0xDD), _mm512_shuffle_f32x4(v1, w1, 0xDD)};
        for (int l = 0; l < 4; l++)
            if (m + 4 * l < kn) _mm512_store_ps(dst + (size_t)(m + 4 * l) * ldd, col[l]);
    }
}

/* One tile of R rows (4 or 8) x NV vectors of tokens: the register budget
 * holds 4 x 4 or 8 x 2 accumulators, enough chains to keep both FMA pipes busy. */
static AI T512 void otile_any(int R, int NV, const float *P, const float *xt, int ldt, int kb, float *acc, int first) {
    if (R == 8) {
        if (NV == 1) otile(8, 1, P, xt, ldt, kb, acc, first);
        else otile(8, 2, P, xt, ldt, kb, acc, first);
    } else {
        switch (NV) {
        case 1: otile(4, 1, P, xt, ldt, kb, acc, first); break;
        case 2: otile(4, 2, P, xt, ldt, kb, acc, first); break;
        case 3: otile(4, 3, P, xt, ldt, kb, acc, first); break;
        default: otile(4, 4, P, xt, ldt, kb, acc, first); break;
        }
    }
}

/* Rows [0, rows4) (rows4 % 4 == 0), 1 <= n <= 64 tokens; XT and ACC are scratch of
 * cols x ldt and SG x ldt floats. */
static AI T512 void mm_float_outer(int wt, const uint8_t *w, size_t rb, int rows4, const float *x, int ldx, int n,
                                   int cols, float *out, int ldo, float *xt, float *acc) {
    float P[8 * KB] __attribute__((aligned(64)));
    const size_t esz = wt == W_F32 ? 4 : 2;
    const int nv = (n + 15) / 16, ldt = nv * 16;
    for (int t = 0; t < ldt; t += 16)
        for (int k = 0; k < cols; k += 16)
            transpose16(x + (size_t)t * ldx + k, ldx, n - t < 16 ? n - t : 16, cols - k < 16 ? cols - k : 16,
                        xt + (size_t)k * ldt + t, ldt);
    for (int s0 = 0; s0 < rows4; s0 += SG) {
        int ns = rows4 - s0 < SG ? rows4 - s0 : SG;
        for (int k0 = 0; k0 < cols; k0 += KB) {
            int kb = cols - k0 < KB ? cols - k0 : KB;
            for (int r0 = s0; r0 < s0 + ns;) {
                int R = nv <= 2 && s0 + ns - r0 >= 8 ? 8 : 4;
                for (int i = 0; i < R; i++)
                    for (int k = 0; k < kb; k += 16) {
                        __mmask16 m = (__mmask16)(kb - k >= 16 ? 0xFFFF : (1u << (kb - k)) - 1);
                        _mm512_store_ps(P + i * KB + k, loadw_mask(wt, w + (size_t)(r0 + i) * rb, k0 + k, m));
                    }
                { /* the next panel's weights come from memory while this one computes */
                    int nr0 = r0 + R, nk0 = k0;
                    if (nr0 >= s0 + ns) {
                        nr0 = k0 + KB < cols ? s0 : s0 + SG;
                        nk0 = k0 + KB < cols ? k0 + KB : 0;
                    }
                    int nrr = rows4 - nr0 < 8 ? rows4 - nr0 : 8, nkb = cols - nk0 < KB ? cols - nk0 : KB;
                    for (int i = 0; i < nrr; i++)
                        for (size_t l = 0; l < (size_t)nkb * esz; l += 64)
                            _mm_prefetch((const char *)(w + (size_t)(nr0 + i) * rb + (size_t)nk0 * esz + l), _MM_HINT_T0);
                }
                otile_any(R, nv, P, xt + (size_t)k0 * ldt, ldt, kb, acc + (size_t)(r0 - s0) * ldt, k0 == 0);
                r0 += R;
            }
        }
        for (int t = 0; t < n; t++)
            for (int r = 0; r < ns; r++) out[(size_t)t * ldo + s0 + r] = acc[(size_t)r * ldt + t];
    }
}

/* Rows in tiles of 4 (then 1), tokens in tiles of 4 (then what is left). */
static AI T512 void mm_float(int wt, const void *wv, size_t rb, int rows, const float *x, int ldx, int n, int cols,
                             float *out, int ldo, float *xt) {
    const uint8_t *w = wv;
    int r = 0;
    if (n <= KB_EXACT_ROWS) {
        mm_float_small(wt, w, rb, rows, x, ldx, n, cols, out, ldo);
        return;
    }
    if (n >= 4 && rows >= 4 && xt) { /* xt: CPU_MM_TMP_FLOATS(cols) >= (cols + SG) * ldt floats */
        size_t ldt = (size_t)(n < 64 ? n + 15 : 64) / 16 * 16;
        r = rows / 4 * 4;
        for (int t = 0; t < n; t += 64)
            mm_float_outer(wt, w, rb, r, x + (size_t)t * ldx, ldx, n - t < 64 ? n - t : 64, cols,
                           out + (size_t)t * ldo, ldo, xt, xt + (size_t)cols * ldt);
    }
    for (; r + 4 <= rows; r += 4) {
        const uint8_t *wr = w + (size_t)r * rb;
        int t = 0;
        for (; t + 4 <= n; t += 4) ftile(wt, 4, 4, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
        switch (n - t) {
        case 3: ftile(wt, 4, 3, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo); break;
        case 2: ftile(wt, 4, 2, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo); break;
        case 1: ftile(wt, 4, 1, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo); break;
        default: break;
        }
    }
    for (; r < rows; r++) {
        const uint8_t *wr = w + (size_t)r * rb;
        int t = 0;
        for (; t + 4 <= n; t += 4) ftile(wt, 1, 4, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
        for (; t < n; t++) ftile(wt, 1, 1, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
    }
}

static T512 void mm_f32(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out,
                        int ldo, float *tmp) {
    mm_float(W_F32, w, rb, rows, x, ldx, n, cols, out, ldo, tmp);
}
static T512 void mm_f16(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out,
                        int ldo, float *tmp) {
    mm_float(W_F16, w, rb, rows, x, ldx, n, cols, out, ldo, tmp);
}
/* ---- BF16 weights by vdpbf16ps (AVX512-BF16), prompts ---- */

#define T512BF __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512bf16,fma,f16c,avx2,bmi2")))
static int has_bf16_dot; /* set by cpu_kern_avx512() */

/* R rows (R = 6, 4 or 1) from W (row i at W + i RB) over the column pairs
 * [K2A, K2B) against the pair-transposed activation XP (pairs x ldt
 * tokens, each a dword of two BF16) of NV vectors of 16 tokens, added into
 * ACC (R rows of ldt floats; FIRST: set instead). Each vdpbf16ps adds 16
 * tokens x 2 columns; the weight pair is broadcast as it lies in the row. */
static AI T512BF void bf16_tile(int R, int nv, const uint8_t *w, size_t rb, int cols, int k2a, int k2b,
                                const uint32_t *xp, int ldt, float *acc, int first, int npf) {
    __m512 a[6][4];
    for (int i = 0; i < R; i++)
        for (int v = 0; v < nv; v++) a[i][v] = first ? _mm512_setzero_ps() : _mm512_load_ps(acc + (size_t)i * ldt + 16 * v);
    int full = cols / 2 < k2b ? cols / 2 : k2b; /* whole pairs; an odd last column after them */
    const uint32_t *x = xp + (size_t)k2a * ldt;
    const uint8_t *wk = w + (size_t)k2a * 4;
    for (int k2 = k2a; k2 < full; k2++, x += ldt, wk += 4) {
        if (((k2 - k2a) & 15) == 0) /* the next tile's lines, a tile ahead of their use */
            for (int i = 0; i < npf; i++) _mm_prefetch((const char *)(wk + (size_t)(R + i) * rb), _MM_HINT_T0);
        __m512i xv[4];
        for (int v = 0; v < nv; v++) xv[v] = _mm512_load_si512((const void *)(x + 16 * v));
        for (int i = 0; i < R; i++) {
            int32_t pair;
            memcpy(&pair, wk + (size_t)i * rb, 4);
            __m512bh wb = (__m512bh)_mm512_set1_epi32(pair);
            for (int v = 0; v < nv; v++) a[i][v] = _mm512_dpbf16_ps(a[i][v], wb, (__m512bh)xv[v]);
        }
    }
    if (full < k2b) { /* the odd last column: paired with zero */
        __m512i xv[4];
        for (int v = 0; v < nv; v++) xv[v] = _mm512_load_si512((const void *)(x + 16 * v));
        for (int i = 0; i < R; i++) {
            uint16_t h;
            memcpy(&h, wk + (size_t)i * rb, 2);
            __m512bh wb = (__m512bh)_mm512_set1_epi32((int)h);
            for (int v = 0; v < nv; v++) a[i][v] = _mm512_dpbf16_ps(a[i][v], wb, (__m512bh)xv[v]);
        }
    }
    for (int i = 0; i < R; i++)
        for (int v = 0; v < nv; v++) _mm512_store_ps(acc + (size_t)i * ldt + 16 * v, a[i][v]);
}

static AI __mmask16 mask16(int k) { return (__mmask16)(k >= 16 ? 0xFFFF : k <= 0 ? 0 : (1u << k) - 1); }

/* XP[k2*ldt + t] = the BF16 pair (x[t][2 k2], x[t][2 k2 + 1]) as one dword
 * (an odd last column paired with zero) for t < NT, zeros up to LDT: 32
 * columns of 16 tokens packed (exact: the values are BF16 already), then
 * transposed as a 16 x 16 block of dwords. */
static AI T512BF void bf16_pairs_transposed(const float *x, int ldx, int nt, int cols, uint32_t *xp, int ldt) {
    uint32_t blk[16 * 16] __attribute__((aligned(64)));
    int pairs = (cols + 1) / 2;
    for (int tv = 0; tv < ldt; tv += 16) {
        int nrow = nt - tv < 16 ? nt - tv : 16;
        for (int k2 = 0; k2 < pairs; k2 += 16) {
            int c0 = 2 * k2, cn = cols - c0;
            for (int i = 0; i < nrow; i++) {
                const float *row = x + (size_t)(tv + i) * ldx + c0;
                __m512 lo = _mm512_maskz_loadu_ps(mask16(cn), row), hi = _mm512_maskz_loadu_ps(mask16(cn - 16), row + 16);
                _mm512_store_si512((void *)(blk + 16 * i), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
            }
            transpose16((const float *)blk, 16, nrow, pairs - k2 < 16 ? pairs - k2 : 16, (float *)(xp + (size_t)k2 * ldt + tv),
                        (size_t)ldt);
        }
    }
}

#define BF16_SG 64  /* rows whose sums stay in the accumulator buffer */
#define BF16_KB 64  /* column pairs per block: 16 KB of the activation for 64 tokens, in L1 */

/* BF16 weights against n > KB_EXACT_ROWS tokens whose activations are
 * BF16 values held in floats (the backend rounds them: cpu_backend.c), 64
 * tokens at a time: the activation pair-transposed once, then super-groups
 * of BF16_SG rows over blocks of BF16_KB column pairs. XP:
 * CPU_MM_TMP_FLOATS(cols) floats of scratch (pairs x 64 tokens, then the
 * accumulators, BF16_SG x 64). The products are exact in F32, so this
 * differs from the F32 kernels only in the order of the sums. */
static T512BF void mm_bf16_dot(const uint8_t *w, size_t rb, int rows, const float *x, int ldx, int n, int cols,
                               float *out, int ldo, uint32_t *xp) {
    int pairs = (cols + 1) / 2;
    float *acc = (float *)(xp + (size_t)pairs * 64);
    for (int t0 = 0; t0 < n; t0 += 64) {
        int nt = n - t0 < 64 ? n - t0 : 64, nv = (nt + 15) / 16, ldt = nv * 16;
        bf16_pairs_transposed(x + (size_t)t0 * ldx, ldx, nt, cols, xp, ldt);
        for (int s0 = 0; s0 < rows; s0 += BF16_SG) {
            int ns = rows - s0 < BF16_SG ? rows - s0 : BF16_SG;
            for (int k2 = 0; k2 < pairs; k2 += BF16_KB) {
                int k2b = pairs - k2 < BF16_KB ? pairs : k2 + BF16_KB;
                for (int r = 0; r < ns;) { /* constant tile shapes: the accumulators stay in registers */
                    int R = ns - r >= 6 ? 6 : ns - r >= 4 ? 4 : 1;
                    const uint8_t *wr = w + (size_t)(s0 + r) * rb;
                    float *ac = acc + (size_t)r * ldt;
                    int npf = rows - (s0 + r + R) < 6 ? rows - (s0 + r + R) : 6;
#define BF16_TILE(RR, NV) bf16_tile(RR, NV, wr, rb, cols, k2, k2b, xp, ldt, ac, k2 == 0, npf)
                    if (R == 6) {
                        switch (nv) {
                        case 1: BF16_TILE(6, 1); break;
                        case 2: BF16_TILE(6, 2); break;
                        case 3: BF16_TILE(6, 3); break;
                        default: BF16_TILE(6, 4); break;
                        }
                    } else if (R == 4) {
                        switch (nv) {
                        case 1: BF16_TILE(4, 1); break;
                        case 2: BF16_TILE(4, 2); break;
                        case 3: BF16_TILE(4, 3); break;
                        default: BF16_TILE(4, 4); break;
                        }
                    } else {
                        switch (nv) {
                        case 1: BF16_TILE(1, 1); break;
                        case 2: BF16_TILE(1, 2); break;
                        case 3: BF16_TILE(1, 3); break;
                        default: BF16_TILE(1, 4); break;
                        }
                    }
#undef BF16_TILE
                    r += R;
                }
            }
            for (int t = 0; t < nt; t++)
                for (int r = 0; r < ns; r++) out[(size_t)(t0 + t) * ldo + s0 + r] = acc[(size_t)r * ldt + t];
        }
    }
}

static T512 void mm_bf16(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out,
                         int ldo, float *tmp) {
    if (has_bf16_dot && n > KB_EXACT_ROWS && tmp)
        mm_bf16_dot(w, rb, rows, x, ldx, n, cols, out, ldo, (uint32_t *)tmp);
    else
        mm_float(W_BF16, w, rb, rows, x, ldx, n, cols, out, ldo, tmp);
}

/* ---- quantized weights, repacked in groups of 16 rows ---- */

static AI int32_t ld32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Tokens t0..t0+TT-1 of A: their int8 values AQ and block scales AD. */
static AI void tile_act(const act_q8 *a, int t0, int TT, const int8_t **aq, const float **ad) {
    for (int j = 0; j < TT; j++) {
        aq[j] = a->qs + (size_t)(t0 + j) * a->cols;
        ad[j] = a->d + (size_t)(t0 + j) * a->nb;
    }
}

/* The 16 rows' scales of block J of the IQ4_XS super-block at SB (x16
 * layout, repack.c): d (sc - 32), the 6-bit sc from scales_l and scales_h. */
static AI T512 __m512 iq4xs_scale(const uint8_t *sb, int j) {
    __m512i l = _mm512_and_si512(_mm512_srli_epi32(_mm512_loadu_si512((const void *)(sb + 32)), 4 * j), _mm512_set1_epi32(15));
    __m512i h = _mm512_srli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(sb + 96))), 2 * j);
    __m512i sc = _mm512_or_si512(l, _mm512_slli_epi32(_mm512_and_si512(h, _mm512_set1_epi32(3)), 4));
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sb)),
                         _mm512_cvtepi32_ps(_mm512_sub_epi32(sc, _mm512_set1_epi32(32))));
}

/* A type of the rp32 layout (cpu_internal.h), or IQ4_XS (its blocks of 32
 * in the same chunks, their scales from the super-block): 16 rows x TT
 * tokens starting at token T0. IQ4_NL's and IQ4_XS's nibbles index their
 * table shifted by 128 (unsigned for vpdpbusd), which m128 takes back out,
 * as for Q8_0's sign-flipped bytes;
 * Q5_0/Q5_1 add 16 where their bit masks say; the offsets of Q4_0 (-8) and
 * Q5_0 (-16) come back out through m8; Q4_1/Q5_1 add their min times the
 * activation's block sum (ds). */
static AI T512 void q32_tile(ggml_type T, int TT, const uint8_t *g, const act_q8 *a, int t0, float *out, int ldo) {
    const int nb = a->nb, Q4 = T != GGML_TYPE_Q8_0, XS = T == GGML_TYPE_IQ4_XS, NL = T == GGML_TYPE_IQ4_NL || XS,
              HB = rp32_has_bits(T), MIN = rp32_has_min(T), ch = XS ? 128 : rp32_chunk_off(T), mo = rp32_mask_off(T);
    const size_t bb = 16 * (size_t)(T == GGML_TYPE_Q8_0 ? 34 : 18 + 2 * MIN + 4 * HB);
    const __m512i c16 = _mm512_set1_epi8(16);
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i tbl = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4_values)),
                                         _mm512_set1_epi8((char)0x80));
    const int8_t *aq[8];
    const float *ad[8], *ads[8];
    const int32_t *am[8];
    __m512 accf[8];
    tile_act(a, t0, TT, aq, ad);
    for (int j = 0; j < TT; j++) {
        ads[j] = a->ds + (size_t)(t0 + j) * nb;
        am[j] = (T == GGML_TYPE_Q4_0 || T == GGML_TYPE_Q5_0 ? a->m8 : a->m128) + (size_t)(t0 + j) * nb;
        accf[j] = _mm512_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        /* IQ4_XS: O such that block b's chunks are at O + ch (its super-block's d at SBP) */
        const uint8_t *sbp = g + (size_t)(b / 8) * RP_ROWS * 136;
        const uint8_t *o = XS ? sbp + 256 * (b % 8) : g + (size_t)b * bb;
        /* with few tokens the dot products of a block form one long dependency
         * chain: split it in two (SPLIT) so that vpdpbusd latency hides */
        const int SPLIT = TT <= 2;
        __m512i acc[8], acc2[8];
        for (int j = 0; j < TT; j++) {
            acc[j] = MIN ? _mm512_setzero_si512() : _mm512_set1_epi32(T == GGML_TYPE_Q5_0 ? 2 * am[j][b] : am[j][b]);
            if (SPLIT) acc2[j] = _mm512_setzero_si512();
        }
        if (Q4) {
            for (int k = 0; k < 4; k++) {
                __m512i L = _mm512_loadu_si512((const void *)(o + ch + 64 * k));
                __m512i lo = _mm512_and_si512(L, m4), hi = _mm512_and_si512(_mm512_srli_epi16(L, 4), m4);
                if (HB) {
                    __mmask64 ml, mh;
                    memcpy(&ml, o + mo + 16 * k, 8);
                    memcpy(&mh, o + mo + 8 + 16 * k, 8);
                    lo = _mm512_mask_add_epi8(lo, ml, lo, c16);
                    hi = _mm512_mask_add_epi8(hi, mh, hi, c16);
                }
                if (NL) {
                    lo = _mm512_shuffle_epi8(tbl, lo);
                    hi = _mm512_shuffle_epi8(tbl, hi);
                }
                for (int j = 0; j < TT; j++) {
                    acc[j] = _mm512_dpbusd_epi32(acc[j], lo, _mm512_set1_epi32(ld32(aq[j] + 32 * b + 4 * k)));
                    if (SPLIT)
                        acc2[j] = _mm512_dpbusd_epi32(acc2[j], hi, _mm512_set1_epi32(ld32(aq[j] + 32 * b + 16 + 4 * k)));
                    else
                        acc[j] = _mm512_dpbusd_epi32(acc[j], hi, _mm512_set1_epi32(ld32(aq[j] + 32 * b + 16 + 4 * k)));
                }
            }
        } else {
            for (int k = 0; k < 8; k++) {
                __m512i L = _mm512_loadu_si512((const void *)(o + 32 + 64 * k));
                for (int j = 0; j < TT; j++) {
                    if (SPLIT && (k & 1))
                        acc2[j] = _mm512_dpbusd_epi32(acc2[j], L, _mm512_set1_epi32(ld32(aq[j] + 32 * b + 4 * k)));
                    else
                        acc[j] = _mm512_dpbusd_epi32(acc[j], L, _mm512_set1_epi32(ld32(aq[j] + 32 * b + 4 * k)));
                }
            }
        }
        if (SPLIT)
            for (int j = 0; j < TT; j++) acc[j] = _mm512_add_epi32(acc[j], acc2[j]);
        __m512 ws = XS ? iq4xs_scale(sbp, b % 8) : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
        for (int j = 0; j < TT; j++)
            accf[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[j]), _mm512_mul_ps(ws, _mm512_set1_ps(ad[j][b])), accf[j]);
        if (MIN) {
            __m512 wm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 32)));
            for (int j = 0; j < TT; j++) accf[j] = _mm512_fmadd_ps(wm, _mm512_set1_ps(ads[j][b]), accf[j]);
        }
    }
    for (int j = 0; j < TT; j++) _mm512_storeu_ps(out + (size_t)(t0 + j) * ldo, accf[j]);
}

/* Q4_K or Q5_K in the x16 layout (repack.c), 16 rows x TT tokens from T0:
 * per 64 values (c) of a super-block, 8 steps of 4 bytes a row (low
 * nibbles: sub-block 2c, high: 2c+1; Q5_K's fifth bits from the step's qh
 * bytes, bits 2c and 2c+1) by vpdpbusd, then per sub-block into float: its
 * 6-bit scale times the activation's scale in one fma, its min against the
 * activation's block sum in another; d and dmin once per super-block. */
static AI T512 void kq_tile(ggml_type T, int TT, const uint8_t *g, const act_q8 *a, int t0, float *out, int ldo) {
    const int nb = a->nb, nsb = nb / 8, Q5 = T == GGML_TYPE_Q5_K;
    const size_t sbb = (size_t)RP_ROWS * (Q5 ? 176 : 144), qso = Q5 ? 768 : 256;
    const int pf = Q5 ? 4 : 0; /* software prefetch, super-blocks ahead: Q5_K's two streams read memory at
                                  half speed without it, Q4_K's one is faster with the hardware's alone */
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi32(3), m15 = _mm512_set1_epi32(15);
    const int8_t *aq[4];
    const float *ad[4], *ads[4];
    __m512 accf[4];
    tile_act(a, t0, TT, aq, ad);
    for (int j = 0; j < TT; j++) {
        ads[j] = a->ds + (size_t)(t0 + j) * nb;
        accf[j] = _mm512_setzero_ps();
    }
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *o = g + (size_t)sb * sbb;
        __m512 accsc[4], accm[4];
        for (int j = 0; j < TT; j++) accsc[j] = accm[j] = _mm512_setzero_ps();
        for (int c = 0; c < 4; c++) {
            __m512i accA[4], accB[4];
            for (int j = 0; j < TT; j++) accA[j] = accB[j] = _mm512_setzero_si512();
            const uint8_t *q = o + qso + (size_t)c * 8 * 64;
            for (size_t l = 0; pf && l < sbb / 4; l += 64)
                _mm_prefetch((const char *)o + pf * sbb + sbb / 4 * c + l, _MM_HINT_T0);
            for (int k = 0; k < 8; k++) {
                __m512i L = _mm512_loadu_si512((const void *)(q + 64 * k));
                __m512i lo = _mm512_and_si512(L, m4), hi = _mm512_and_si512(_mm512_srli_epi16(L, 4), m4);
                if (Q5) { /* bit 2c (2c + 1) of the row's qh byte to bit 4 of the low (high) value */
                    __m512i H = _mm512_loadu_si512((const void *)(o + 256 + 64 * k)), b4 = _mm512_set1_epi8(0x10);
                    __m512i hl = 2 * c < 4 ? _mm512_slli_epi16(H, 4 - 2 * c) : _mm512_srli_epi16(H, 2 * c - 4);
                    __m512i hh = 2 * c + 1 < 4 ? _mm512_slli_epi16(H, 3 - 2 * c) : _mm512_srli_epi16(H, 2 * c - 3);
                    lo = _mm512_ternarylogic_epi32(lo, hl, b4, 0xF8); /* lo | (hl & 0x10) */
                    hi = _mm512_ternarylogic_epi32(hi, hh, b4, 0xF8);
                }
                for (int j = 0; j < TT; j++) {
                    const int8_t *ab = aq[j] + 256 * sb + 64 * c + 4 * k;
                    accA[j] = _mm512_dpbusd_epi32(accA[j], lo, _mm512_set1_epi32(ld32(ab)));
                    accB[j] = _mm512_dpbusd_epi32(accB[j], hi, _mm512_set1_epi32(ld32(ab + 32)));
                }
            }
            __m512i hi = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(o + 192 + 16 * c)));
            for (int h = 0; h < 2; h++) {
                int jj = 2 * c + h;
                __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(o + 64 + 16 * jj)));
                __m512i hs = _mm512_srli_epi32(hi, 4 * h);
                __m512i sc = _mm512_or_si512(_mm512_and_si512(lo, m15), _mm512_slli_epi32(_mm512_and_si512(hs, m3), 4));
                __m512i mn = _mm512_or_si512(_mm512_srli_epi32(lo, 4),
                                             _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(hs, 2), m3), 4));
                __m512 scf = _mm512_cvtepi32_ps(sc), mf = _mm512_cvtepi32_ps(mn);
                for (int j = 0; j < TT; j++) {
                    __m512i ai = h ? accB[j] : accA[j];
                    accsc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ai), _mm512_mul_ps(scf, _mm512_set1_ps(ad[j][8 * sb + jj])),
                                               accsc[j]);
                    accm[j] = _mm512_fmadd_ps(mf, _mm512_set1_ps(ads[j][8 * sb + jj]), accm[j]);
                }
            }
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
        __m512 dm = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 32)));
        for (int j = 0; j < TT; j++) {
            accf[j] = _mm512_fmadd_ps(d, accsc[j], accf[j]);
            accf[j] = _mm512_fnmadd_ps(dm, accm[j], accf[j]);
        }
    }
    for (int j = 0; j < TT; j++) _mm512_storeu_ps(out + (size_t)(t0 + j) * ldo, accf[j]);
}

/* NAME: the repacked kernel of type TYPE through TILE(TYPE, TT, ...), in
 * tiles of TMAX tokens, then one tile of what is left (TT a constant in
 * every call, so that each tile's loops unroll). */
#define RP_TILE(TILE, TYPE, TMAX, TT) if ((TT) <= TMAX) TILE(TYPE, (TT) > TMAX ? TMAX : (TT), gp, a, t, og, ldo)
#define RP_DRIVER(NAME, TILE, TYPE, TMAX)                                                                     \
    static T512 void NAME(const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out, int ldo) { \
        for (int g = 0; g < ng; g++) {                                                                        \
            const uint8_t *gp = w + (size_t)g * gbytes;                                                       \
            float *og = out + (size_t)g * RP_ROWS;                                                            \
            int t = 0;                                                                                        \
            for (; t + TMAX <= n; t += TMAX) RP_TILE(TILE, TYPE, TMAX, TMAX);                                 \
            switch (n - t) {                                                                                  \
            case 7: RP_TILE(TILE, TYPE, TMAX, 7); break;                                                      \
            case 6: RP_TILE(TILE, TYPE, TMAX, 6); break;                                                      \
            case 5: RP_TILE(TILE, TYPE, TMAX, 5); break;                                                      \
            case 4: RP_TILE(TILE, TYPE, TMAX, 4); break;                                                      \
            case 3: RP_TILE(TILE, TYPE, TMAX, 3); break;                                                      \
            case 2: RP_TILE(TILE, TYPE, TMAX, 2); break;                                                      \
            case 1: RP_TILE(TILE, TYPE, TMAX, 1); break;                                                      \
            default: break;                                                                                   \
            }                                                                                                 \
        }                                                                                                     \
    }

RP_DRIVER(mm_q4_0, q32_tile, GGML_TYPE_Q4_0, 8)
RP_DRIVER(mm_iq4_nl, q32_tile, GGML_TYPE_IQ4_NL, 8)
RP_DRIVER(mm_iq4_xs, q32_tile, GGML_TYPE_IQ4_XS, 8)
RP_DRIVER(mm_q5_0, q32_tile, GGML_TYPE_Q5_0, 8)
RP_DRIVER(mm_q4_1, q32_tile, GGML_TYPE_Q4_1, 8)
RP_DRIVER(mm_q5_1, q32_tile, GGML_TYPE_Q5_1, 8)
RP_DRIVER(mm_q8_0, q32_tile, GGML_TYPE_Q8_0, 8)
RP_DRIVER(mm_q4_k, kq_tile, GGML_TYPE_Q4_K, 4)
RP_DRIVER(mm_q5_k, kq_tile, GGML_TYPE_Q5_K, 4)

/* Q6_K, Q3_K or Q2_K in the x16 layout (repack.c), TT tokens from T0: per 128
 * values (n) and block of 32 (j), per 16 (h), 4 steps of 4 values a row
 * (k16_values) against the activation by vpdpbusd, times the row's scale
 * of that 16 (vpmulld; a block's int32 sum stays under 2 x 16 x 63 x 127 x
 * 128), per block into float with the activation's scale; times d once
 * per super-block; the rest through the activation's sums per 16 (ds16):
 * the offsets of Q6_K (- 32 d sc_g S_g) and Q3_K (- 4 d sc_g S_g), Q2_K's
 * mins (- dmin m_g S_g). A token's operations do not depend on TT (the
 * exact tile's rule). */
static AI int k16_sbb(ggml_type T) { return RP_ROWS * (T == GGML_TYPE_Q6_K ? 210 : T == GGML_TYPE_Q3_K ? 110 : 84); }
/* The 64 values (16 rows x 4) of block J at step K of half N of
 * super-block O, unsigned. Q6_K: the nibbles of ql part J & 1 (low for
 * J < 2, high for J >= 2) with bits 2J.. of qh; Q2_K: bits 2J.. of its qs
 * bytes; Q3_K: the same with bit 4N + J of its hmask bytes. */
static AI T512 __m512i k16_values(ggml_type T, const uint8_t *o, int n, int k, int j) {
    if (T == GGML_TYPE_Q3_K) { /* 2 bits of qs, bit 4n + j of hmask as 4 (minus 4: the offset) */
        __m512i L = _mm512_srli_epi16(_mm512_loadu_si512((const void *)(o + 736 + 64 * (8 * n + k))), 2 * j);
        __m512i H = _mm512_loadu_si512((const void *)(o + 224 + 64 * k));
        const int b = 4 * n + j;
        H = b < 2 ? _mm512_slli_epi16(H, 2 - b) : b > 2 ? _mm512_srli_epi16(H, b - 2) : H;
        return _mm512_ternarylogic_epi32(L, _mm512_and_si512(H, _mm512_set1_epi8(4)), _mm512_set1_epi8(3), 0xEC);
    }
    if (T == GGML_TYPE_Q2_K)
        return _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512((const void *)(o + 320 + 64 * (8 * n + k))), 2 * j),
                                _mm512_set1_epi8(3));
    const uint8_t *q = o + 288 + (size_t)192 * (8 * n + k);
    __m512i X = _mm512_loadu_si512((const void *)(q + 64 * (j & 1)));
    __m512i H = _mm512_loadu_si512((const void *)(q + 128));
    if (j >= 2) X = _mm512_srli_epi16(X, 4);
    H = 2 * j < 4 ? _mm512_slli_epi16(H, 4 - 2 * j) : 2 * j > 4 ? _mm512_srli_epi16(H, 2 * j - 4) : H;
    /* (X & 0x0F) | (H & 0x30) */
    return _mm512_ternarylogic_epi32(X, _mm512_and_si512(H, _mm512_set1_epi8(0x30)), _mm512_set1_epi8(0x0F), 0xEC);
}
/* The 16 rows' scales (MIN: Q2_K's mins) of the 16s G of super-block O, as int32. */
static AI T512 __m512i k16_scales(ggml_type T, const uint8_t *o, int g, int MIN) {
    if (T == GGML_TYPE_Q6_K) return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(o + 32 + 16 * g)));
    if (T == GGML_TYPE_Q3_K) { /* 6 bits, minus 32: 4 from byte g % 4 of a0 (g < 4, 8-11) or a1, high
                                  nibble for g >= 8; 2 from byte g % 4 of a2, bits 2 (g / 4).. */
        const int i = 8 * (g % 4);
        __m512i A = _mm512_loadu_si512((const void *)(o + (g % 8 < 4 ? 32 : 96)));
        __m512i B = _mm512_loadu_si512((const void *)(o + 160));
        __m512i lo = _mm512_and_si512(_mm512_srli_epi32(A, i + (g >= 8 ? 4 : 0)), _mm512_set1_epi32(15));
        __m512i hi = _mm512_and_si512(_mm512_srli_epi32(B, i + 2 * (g / 4)), _mm512_set1_epi32(3));
        return _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
    }
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(o + 64 + 16 * g)));
    return MIN ? _mm512_srli_epi32(b, 4) : _mm512_and_si512(b, _mm512_set1_epi32(15));
}
/* Block J of half N for TT tokens: S[t][J] = sum over its two 16s of the
 * scale (SCV: the super-block's, k16_scales) times the 16 rows' dot
 * products. */
static AI T512 void k16_steps_one(ggml_type T, int TT, const uint8_t *o, const __m512i *scv, int n, int j,
                                  const int8_t *const *aq, int sb, __m512i s[][4]) {
    for (int t = 0; t < TT; t++) s[t][j] = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        __m512i p[8];
        for (int t = 0; t < TT; t++) p[t] = _mm512_setzero_si512();
        for (int k = 4 * h; k < 4 * h + 4; k++) {
            __m512i v = k16_values(T, o, n, k, j);
            for (int t = 0; t < TT; t++)
                p[t] = _mm512_dpbusd_epi32(p[t], v, _mm512_set1_epi32(ld32(aq[t] + 256 * sb + 128 * n + 32 * j + 4 * k)));
        }
        for (int t = 0; t < TT; t++) s[t][j] = _mm512_add_epi32(s[t][j], _mm512_mullo_epi32(p[t], scv[8 * n + 2 * j + h]));
    }
}
/* The same for the 4 blocks at once (4 independent chains: one or two
 * tokens), the same integers. */
static AI T512 void k16_steps_all(ggml_type T, int TT, const uint8_t *o, const __m512i *scv, int n,
                                  const int8_t *const *aq, int sb, __m512i s[][4]) {
    for (int t = 0; t < TT; t++)
        for (int j = 0; j < 4; j++) s[t][j] = _mm512_setzero_si512();
    for (int h = 0; h < 2; h++) {
        __m512i p[2][4];
        for (int t = 0; t < TT; t++)
            for (int j = 0; j < 4; j++) p[t][j] = _mm512_setzero_si512();
        for (int k = 4 * h; k < 4 * h + 4; k++)
            for (int j = 0; j < 4; j++) {
                __m512i v = k16_values(T, o, n, k, j);
                for (int t = 0; t < TT; t++)
                    p[t][j] = _mm512_dpbusd_epi32(p[t][j], v, _mm512_set1_epi32(ld32(aq[t] + 256 * sb + 128 * n + 32 * j + 4 * k)));
            }
        for (int j = 0; j < 4; j++)
            for (int t = 0; t < TT; t++)
                s[t][j] = _mm512_add_epi32(s[t][j], _mm512_mullo_epi32(p[t][j], scv[8 * n + 2 * j + h]));
    }
}

#define K16_PREFETCH 3 /* super-blocks ahead */
static AI T512 void k16_tile(ggml_type T, int TT, const uint8_t *g, const act_q8 *a, int t0, float *out, int ldo) {
    const int nb = a->nb, nsb = nb / 8, Q6 = T == GGML_TYPE_Q6_K;
    const size_t sbb = (size_t)k16_sbb(T);
    const int8_t *aq[8];
    const float *ad[8], *a16[8];
    __m512 accf[8];
    tile_act(a, t0, TT, aq, ad);
    for (int j = 0; j < TT; j++) {
        a16[j] = a->ds16 + (size_t)(t0 + j) * nb * 2;
        accf[j] = _mm512_setzero_ps();
    }
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *o = g + (size_t)sb * sbb;
        for (size_t l = 0; l < sbb; l += 64) _mm_prefetch((const char *)o + K16_PREFETCH * sbb + l, _MM_HINT_T0);
        __m512 acc[8], accm[8];
        __m512i scv[16];
        for (int gg = 0; gg < 16; gg++) scv[gg] = k16_scales(T, o, gg, 0);
        for (int t = 0; t < TT; t++) acc[t] = accm[t] = _mm512_setzero_ps();
        for (int n = 0; n < 2; n++) {
            __m512i s[8][4];
            if (TT <= 2)
                k16_steps_all(T, TT, o, scv, n, aq, sb, s);
            else
                for (int j = 0; j < 4; j++) k16_steps_one(T, TT, o, scv, n, j, aq, sb, s);
            for (int j = 0; j < 4; j++)
                for (int t = 0; t < TT; t++)
                    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[t][j]), _mm512_set1_ps(ad[t][8 * sb + 4 * n + j]), acc[t]);
        }
        for (int gg = 0; gg < 16; gg++) { /* Q6_K, Q3_K: sc_g S_g; Q2_K: m_g S_g */
            __m512 f = _mm512_cvtepi32_ps(T == GGML_TYPE_Q2_K ? k16_scales(T, o, gg, 1) : scv[gg]);
            for (int t = 0; t < TT; t++) accm[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(a16[t][16 * sb + gg]), accm[t]);
        }
        __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)o));
        __m512 dm = T == GGML_TYPE_Q2_K ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(o + 32)))
                                        : _mm512_mul_ps(d, _mm512_set1_ps(Q6 ? 32.0f : 4.0f));
        for (int t = 0; t < TT; t++) {
            accf[t] = _mm512_fmadd_ps(acc[t], d, accf[t]);
            accf[t] = _mm512_fnmadd_ps(accm[t], dm, accf[t]);
        }
    }
    for (int t = 0; t < TT; t++) _mm512_storeu_ps(out + (size_t)(t0 + t) * ldo, accf[t]);
}
RP_DRIVER(mm_q6_k, k16_tile, GGML_TYPE_Q6_K, 8)
RP_DRIVER(mm_q2_k, k16_tile, GGML_TYPE_Q2_K, 8)
RP_DRIVER(mm_q3_k, k16_tile, GGML_TYPE_Q3_K, 8)

/* Q6_K rows in the file layout: per super-block the 6-bit values are
 * rebuilt in order, 64 at a time (low nibbles from ql, 2 high bits from
 * qh), then dotted with the activation by vpdpbusd; the sub-block scales
 * (one per 16 values) apply per dword lane in integers, the weight and
 * activation scales in float. Up to 32 tokens per pass over a row. */
static T512 void mm_q6_k_rows(const uint8_t *w, size_t rb, int rows, const act_q8 *a, int n, float *out, int ldo) {
    const int nsb = a->cols / 256;
    const __m512i m4 = _mm512_set1_epi8(0x0F), m3 = _mm512_set1_epi8(3), c32 = _mm512_set1_epi8(32);
    const __mmask64 upper = 0xFFFFFFFF00000000ull;
    __m512i sidx[4], aidx[4];
    for (int c = 0; c < 4; c++) {
        int si[16], ai[16];
        for (int k = 0; k < 16; k++) {
            si[k] = 4 * c + k / 4;
            ai[k] = 2 * c + k / 8;
        }
        sidx[c] = _mm512_loadu_si512((const void *)si);
        aidx[c] = _mm512_loadu_si512((const void *)ai);
    }
    for (int t0 = 0; t0 < n; t0 += 32) {
        int nt = n - t0 < 32 ? n - t0 : 32;
        for (int r = 0; r < rows; r++) {
            __m512 acc[32];
            for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
            for (int sb = 0; sb < nsb; sb++) {
                const uint8_t *blk = w + (size_t)r * rb + (size_t)sb * 210;
                uint16_t dh;
                memcpy(&dh, blk + 208, 2);
                __m512 d = _mm512_set1_ps(quant_f16_to_f32(dh));
                __m512i scv = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 192)));
                __m512i q[4];
                for (int h = 0; h < 2; h++) {
                    __m512i L = _mm512_loadu_si512((const void *)(blk + 64 * h));
                    __m512i H = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 128 + 32 * h)));
                    __m512i HA = _mm512_mask_blend_epi8(upper, H, _mm512_srli_epi16(H, 2));
                    __m512i HB = _mm512_mask_blend_epi8(upper, _mm512_srli_epi16(H, 4), _mm512_srli_epi16(H, 6));
                    q[2 * h] = _mm512_or_si512(_mm512_and_si512(L, m4), _mm512_slli_epi16(_mm512_and_si512(HA, m3), 4));
                    q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                                   _mm512_slli_epi16(_mm512_and_si512(HB, m3), 4));
                }
                __m512i scl[4];
                for (int c = 0; c < 4; c++) scl[c] = _mm512_permutexvar_epi32(sidx[c], scv);
                for (int t = 0; t < nt; t++) {
                    const int8_t *aq = a->qs + (size_t)(t0 + t) * a->cols + 256 * sb;
                    __m512 adv = _mm512_mul_ps(_mm512_castps256_ps512(_mm256_loadu_ps(a->d + (size_t)(t0 + t) * a->nb + 8 * sb)), d);
                    for (int c = 0; c < 4; c++) {
                        __m512i av = _mm512_loadu_si512((const void *)(aq + 64 * c));
                        __m512i dot = _mm512_sub_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q[c], av),
                                                       _mm512_dpbusd_epi32(_mm512_setzero_si512(), c32, av));
                        __m512 f = _mm512_cvtepi32_ps(_mm512_mullo_epi32(dot, scl[c]));
                        acc[t] = _mm512_fmadd_ps(f, _mm512_permutexvar_ps(aidx[c], adv), acc[t]);
                    }
                }
            }
            for (int t = 0; t < nt; t++) out[(size_t)(t0 + t) * ldo + r] = _mm512_reduce_add_ps(acc[t]);
        }
    }
}

/* ---- activation quantization ---- */

static T512 void act_absmax(const float *x, int nb, float *amax) {
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int b = 0; b < nb; b++)
        amax[b] = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + CPU_QK * b)),
                                                     _mm512_andnot_ps(sign, _mm512_loadu_ps(x + CPU_QK * b + 16))));
}

static T512 void act_round(const float *x, int nb, const float *id, int8_t *qs, int32_t *sum) {
    for (int b = 0; b < nb; b++) {
        __m512 vid = _mm512_set1_ps(id[b]);
        __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + CPU_QK * b), vid));
        __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + CPU_QK * b + 16), vid));
        _mm_storeu_si128((__m128i *)(qs + CPU_QK * b), _mm512_cvtsepi32_epi8(q0));
        _mm_storeu_si128((__m128i *)(qs + CPU_QK * b + 16), _mm512_cvtsepi32_epi8(q1));
        sum[b] = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
}

/* ---- vector helpers ---- */

static AI __mmask16 tail_mask(int left) { return (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1); }

static T512 float dot_f32(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

static T512 float dot_f16(const float *a, const uint16_t *b, int n) {
    __m512 s0 = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 bv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, b + i));
        s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), bv, s0);
    }
    return _mm512_reduce_add_ps(s0);
}

static T512 void axpy_f32(float *y, float a, const float *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static T512 void axpy_f16(float *y, float a, const uint16_t *x, int n) {
    __m512 va = _mm512_set1_ps(a);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 xv = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i));
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, xv, _mm512_maskz_loadu_ps(m, y + i)));
    }
}

/* exp(x), Cephes-style: 2^n * p(r), r = x - n ln2; about 1 ulp. */
static AI T512 __m512 exp512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.3762626647949f));
    __m512 fx = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(fx, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 y = _mm512_set1_ps(1.9875691500E-4f);
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.3981999507E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(8.3334519073E-3f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(4.1665795894E-2f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(1.6666665459E-1f));
    y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(5.0000001201E-1f));
    y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, fx);
}

static T512 float exp_sum(float *x, int n, float mx) {
    __m512 vm = _mm512_set1_ps(mx), s = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 e = exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), vm));
        _mm512_mask_storeu_ps(x + i, m, e);
        s = _mm512_add_ps(s, _mm512_maskz_mov_ps(m, e));
    }
    return _mm512_reduce_add_ps(s);
}

static T512 void swiglu(float *g, const float *u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f), sign = _mm512_set1_ps(-0.0f);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask((int)(n - i < 16 ? n - i : 16));
        __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
        __m512 e = exp512(_mm512_xor_ps(gv, sign));
        __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, u + i)));
    }
}

static T512 float sumsq(const float *x, int n) {
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        __m512 v = _mm512_maskz_loadu_ps(tail_mask(n - i), x + i);
        s = _mm512_fmadd_ps(v, v, s);
    }
    return _mm512_reduce_add_ps(s);
}

static T512 void scale_mul(float *out, const float *x, float sc, const float *w, int n) {
    __m512 vs = _mm512_set1_ps(sc);
    for (int i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask(n - i);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), vs), _mm512_maskz_loadu_ps(m, w + i));
        _mm512_mask_storeu_ps(out + i, m, v);
    }
}

static T512 void add(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask((int)(n - i < 16 ? n - i : 16));
        _mm512_mask_storeu_ps(x + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static T512 void to_f16(uint16_t *out, const float *x, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = tail_mask((int)(n - i < 16 ? n - i : 16));
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm256_mask_storeu_epi16(out + i, m, h);
    }
}

#define KERN_TARGET T512
#define KERN_ATTN attn_generic
#include "kernels/cpu/kern_attn.h"
#undef KERN_TARGET
#undef KERN_ATTN


static AI T512 __m512 load_kv(int f16, const void *base, size_t idx) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + idx)));
    return _mm512_loadu_ps((const float *)base + idx);
}

/* [sum(a0), sum(a1), sum(a2), sum(a3)] */
static AI T512 __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
    __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
    __m512 t2 = _mm512_add_ps(_mm512_shuffle_ps(t0, t1, 0x44), _mm512_shuffle_ps(t0, t1, 0xEE));
    __m256 t3 = _mm256_add_ps(_mm512_castps512_ps256(t2), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(t2), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(t3), _mm256_extractf128_ps(t3, 1));
}

/* scores of one head: sc[t] = scale * q . k_t, hd = 16 * NC */
static AI T512 void attn_scores(int NC, const float *q, const void *k, int f16, size_t stride, int npos, float scale,
                                float *sc) {
    __m512 qv[8];
    for (int c = 0; c < NC; c++) qv[c] = _mm512_mul_ps(_mm512_loadu_ps(q + 16 * c), _mm512_set1_ps(scale));
    int t = 0;
    for (; t + 4 <= npos; t += 4) {
        __m512 a[4];
        for (int i = 0; i < 4; i++) {
            a[i] = _mm512_setzero_ps();
            for (int c = 0; c < NC; c++) a[i] = _mm512_fmadd_ps(qv[c], load_kv(f16, k, (t + i) * stride + 16 * c), a[i]);
        }
        _mm_storeu_ps(sc + t, hsum4(a[0], a[1], a[2], a[3]));
    }
    for (; t < npos; t++) {
        __m512 a = _mm512_setzero_ps();
        for (int c = 0; c < NC; c++) a = _mm512_fmadd_ps(qv[c], load_kv(f16, k, t * stride + 16 * c), a);
        sc[t] = _mm512_reduce_add_ps(a);
    }
}

/* out[g][c0 .. c0+CW) += sum_t p[g][t] v_t, G heads */
static AI T512 void attn_values(int GG, int CW, const float *score, int npos, const void *v, int f16, size_t stride,
                                int c0, int hd, float *out) {
    __m512 acc[8][4];
    for (int g = 0; g < GG; g++)
        for (int c = 0; c < CW; c++) acc[g][c] = _mm512_setzero_ps();
    for (int t = 0; t < npos; t++) {
        __m512 vv[4];
        for (int c = 0; c < CW; c++) vv[c] = load_kv(f16, v, t * stride + 16 * (c0 + c));
        for (int g = 0; g < GG; g++) {
            __m512 p = _mm512_set1_ps(score[(size_t)g * npos + t]);
            for (int c = 0; c < CW; c++) acc[g][c] = _mm512_fmadd_ps(p, vv[c], acc[g][c]);
        }
    }
    for (int g = 0; g < GG; g++)
        for (int c = 0; c < CW; c++) _mm512_storeu_ps(out + (size_t)g * hd + 16 * (c0 + c), acc[g][c]);
}

static AI T512 void attn_fast(int GG, const float *q, const void *k, const void *v, int f16, size_t stride, int npos,
                              int hd, float scale, float *score, float *out) {
    int nc = hd / 16;
    for (int g = 0; g < GG; g++) {
        float *sc = score + (size_t)g * npos;
        switch (nc) {
        case 1: attn_scores(1, q + (size_t)g * hd, k, f16, stride, npos, scale, sc); break;
        case 2: attn_scores(2, q + (size_t)g * hd, k, f16, stride, npos, scale, sc); break;
        case 4: attn_scores(4, q + (size_t)g * hd, k, f16, stride, npos, scale, sc); break;
        case 6: attn_scores(6, q + (size_t)g * hd, k, f16, stride, npos, scale, sc); break;
        default: attn_scores(8, q + (size_t)g * hd, k, f16, stride, npos, scale, sc); break;
        }
        float mx = -INFINITY;
        for (int t = 0; t < npos; t++) mx = sc[t] > mx ? sc[t] : mx;
        float inv = 1.0f / exp_sum(sc, npos, mx);
        for (int t = 0; t < npos; t++) sc[t] *= inv;
    }
    if (GG <= 4) {
        int c0 = 0;
        for (; c0 + 4 <= nc; c0 += 4) attn_values(GG <= 4 ? GG : 4, 4, score, npos, v, f16, stride, c0, hd, out);
        for (; c0 < nc; c0++) attn_values(GG <= 4 ? GG : 4, 1, score, npos, v, f16, stride, c0, hd, out);
    } else {
        int c0 = 0;
        for (; c0 + 2 <= nc; c0 += 2) attn_values(GG, 2, score, npos, v, f16, stride, c0, hd, out);
        for (; c0 < nc; c0++) attn_values(GG, 1, score, npos, v, f16, stride, c0, hd, out);
    }
}

/* G query heads sharing one KV head (see cpu_internal.h). */
static T512 void attn(const float *q, int G, const void *k, const void *v, int f16, size_t stride, int npos, int hd,
                      float scale, float *score, float *out) {
    int nc = hd / 16;
    if (hd % 16 || !(nc == 1 || nc == 2 || nc == 4 || nc == 6 || nc == 8) || G < 1 || G > 8) {
        attn_generic(q, G, k, v, f16, stride, npos, hd, scale, score, out);
        return;
    }
    switch (G) {
    case 1: attn_fast(1, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    case 2: attn_fast(2, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    case 3: attn_fast(3, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    case 4: attn_fast(4, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    case 5: attn_fast(5, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    case 6: attn_fast(6, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    case 7: attn_fast(7, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    default: attn_fast(8, q, k, v, f16, stride, npos, hd, scale, score, out); break;
    }
}

#define KERN_DPBUSD(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s)) /* AVX512-VNNI + VL */
#define KERN_TARGET T512
#define KERN_ROWS_R 2
#include "kernels/cpu/kern_rows.h"
#undef KERN_TARGET
#undef KERN_ROWS_R

/* Q6_K rows in the file layout (the tail rows of a repacked weight, and
 * weights of fewer than 16 rows): its own kernel (64-byte vpdpbusd) in
 * prefill; generation reads a row at a time through the shared 256-bit
 * one, measured faster there, and so do batches of up to KB_EXACT_ROWS
 * (bit for bit a one-row call) (1B shape: 31.9 tok/s with the 64-byte
 * kernel). */
static T512 void mm_q6_k_any(const uint8_t *w, size_t rb, int rows, const act_q8 *a, int n, float *out, int ldo) {
    if (n <= KB_EXACT_ROWS) mm_row_q6_k(w, rb, rows, a, n, out, ldo); /* small batches: one kernel, the same bits */
    else mm_q6_k_rows(w, rb, rows, a, n, out, ldo);
}

static const cpu_kern kern = {
    .name = "avx512",
    .mm_f32 = mm_f32,
    .mm_f16 = mm_f16,
    .mm_bf16 = mm_bf16,
    .mm_q8_0 = mm_q8_0,
    .mm_q4_0 = mm_q4_0,
    .mm_iq4_nl = mm_iq4_nl,
    .mm_iq4_xs = mm_iq4_xs,
    .mm_q5_0 = mm_q5_0,
    .mm_q4_1 = mm_q4_1,
    .mm_q5_1 = mm_q5_1,
    .mm_q4_k = mm_q4_k,
    .mm_q5_k = mm_q5_k,
    .mm_q6_k = mm_q6_k,
    .mm_q2_k = mm_q2_k,
    .mm_q3_k = mm_q3_k,
    .mm_row = {KERN_ROWS_TABLE, [GGML_TYPE_Q6_K] = mm_q6_k_any},
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

const cpu_kern *cpu_kern_avx512(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2")) {
        has_bf16_dot = __builtin_cpu_supports("avx512bf16") && !getenv("ILPD_CPU_NO_BF16");
        return &kern;
    }
    return NULL;
}

#else
const cpu_kern *cpu_kern_avx512(void) { return NULL; }
#endif
