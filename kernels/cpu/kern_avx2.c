/* kern_avx2.c - AVX2 + FMA + F16C kernels, for x86-64 CPUs without
 * AVX-512. Integer dot products use maddubs (u8 x s8 -> s16 pairs) and
 * madd against ones, or AVX-VNNI's vpdpbusd where kern_avxvnni.c builds this
 * file again (KERN_AVX2_VNNI; the same sums, bit for bit: maddubs never
 * saturates here); the x16 groups of Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q8_0,
 * IQ4_XS, Q4_K and Q5_K are read as two halves of 8 rows (Q4_K/Q5_K with software
 * prefetch: without it their x16 layout read memory slower than the file
 * layout); every other block type runs in the file layout (kern_rows.h). Float
 * weights (F32, F16, BF16) decode row by row and run prompts as outer
 * products over a transposed activation, as kern_avx512.c does. */
#include "kernels/cpu/cpu_internal.h"

#ifndef KERN_AVX2_VNNI
#define KERN_AVX2_VNNI 0
#define KERN_AVX2_NAME "avx2"
#define KERN_AVX2_FEATURES "avx2,fma,f16c,bmi2"
#define KERN_AVX2_GET cpu_kern_avx2
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(ILPD_NO_SIMD)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#define T256 __attribute__((target(KERN_AVX2_FEATURES)))
#define AI inline __attribute__((always_inline))
#if KERN_AVX2_VNNI
#define KERN_DPBUSD(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#endif

enum { W_F32, W_F16, W_BF16 };

static AI T256 __m256 loadw(int wt, const uint8_t *p, int k) {
    if (wt == W_F32) return _mm256_loadu_ps((const float *)p + k);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + k));
    if (wt == W_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static AI T256 float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static AI T256 int32_t hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

static AI float wscalar(int wt, const uint8_t *p, int k) {
    uint16_t h;
    if (wt == W_F32) return ((const float *)p)[k];
    memcpy(&h, p + 2 * (size_t)k, 2);
    if (wt == W_F16) return quant_f16_to_f32(h);
    uint32_t b = (uint32_t)h << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static AI T256 void ftile(int wt, int RT, int TT, const uint8_t *w, size_t rb, const float *x, int ldx, int cols,
                          float *out, int ldo) {
    __m256 acc[4][3];
    for (int i = 0; i < RT; i++)
        for (int j = 0; j < TT; j++) acc[i][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= cols; k += 8) {
        __m256 wv[4];
        for (int i = 0; i < RT; i++) wv[i] = loadw(wt, w + (size_t)i * rb, k);
        for (int j = 0; j < TT; j++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)j * ldx + k);
            for (int i = 0; i < RT; i++) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
        }
    }
    for (int i = 0; i < RT; i++)
        for (int j = 0; j < TT; j++) {
            float s = hsum(acc[i][j]);
            for (int kk = k; kk < cols; kk++) s += wscalar(wt, w + (size_t)i * rb, kk) * x[(size_t)j * ldx + kk];
            out[(size_t)j * ldo + i] = s;
        }
}

/* One weight row against TT tokens (the row read and converted once): each
 * token's sum runs in 4 chains over k, in the same order whatever TT is, so
 * that a small batch gives every token the bits a one-token call gives it
 * (KB_EXACT_ROWS); decode (one token) is the TT = 1 case. */
static AI T256 void row_dot_tt(int wt, int TT, const uint8_t *w, const float *x, int ldx, int cols, float *out,
                               int ldo) {
    __m256 a[2][4];
    for (int j = 0; j < TT; j++) a[j][0] = a[j][1] = a[j][2] = a[j][3] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 32 <= cols; k += 32) {
        __m256 w0 = loadw(wt, w, k), w1 = loadw(wt, w, k + 8), w2 = loadw(wt, w, k + 16), w3 = loadw(wt, w, k + 24);
        for (int j = 0; j < TT; j++) {
            const float *xj = x + (size_t)j * ldx + k;
            a[j][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xj), a[j][0]);
            a[j][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(xj + 8), a[j][1]);
            a[j][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(xj + 16), a[j][2]);
            a[j][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(xj + 24), a[j][3]);
        }
    }
    int k8 = k;
    for (; k8 + 8 <= cols; k8 += 8) {
        __m256 wv = loadw(wt, w, k8);
        for (int j = 0; j < TT; j++) a[j][0] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + (size_t)j * ldx + k8), a[j][0]);
    }
    for (int j = 0; j < TT; j++) {
        const float *xj = x + (size_t)j * ldx;
        float s = hsum(_mm256_add_ps(_mm256_add_ps(a[j][0], a[j][1]), _mm256_add_ps(a[j][2], a[j][3])));
        for (int kk = k8; kk < cols; kk++) s += wscalar(wt, w, kk) * xj[kk];
        out[(size_t)j * ldo] = s;
    }
}

/* Prefill (more than KB_EXACT_ROWS tokens) as outer products, 8 tokens per
 * vector, as kern_avx512.c does with 16: the activation is transposed once
 * per call into XT (k-major, tokens padded with zeros to whole vectors);
 * panels of 4 weight rows x KB columns are converted to float once (P) and
 * run over a block of XT (KB x 64 tokens = 32 KiB) that stays in cache, the
 * next panel prefetched meanwhile; each tile's sums live in ACC between
 * blocks. 4 rows x 3 vectors of accumulators, the 4 weights and a vector of
 * tokens fill the 16 registers. */
#define KB 128
#define SG 64 /* rows whose sums stay in ACC while one XT block is hot */
_Static_assert(CPU_MM_TMP_FLOATS(0) == (size_t)SG * 64, "the transposed activation and ACC fit the matmul scratch");

static AI T256 void otile(int NV, const float *P, const float *xt, int ldt, int kb, float *acc, int first) {
    __m256 c[4][3];
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < NV; v++) c[i][v] = first ? _mm256_setzero_ps() : _mm256_load_ps(acc + i * ldt + v * 8);
    for (int k = 0; k < kb; k++) {
        __m256 xv[3];
        for (int v = 0; v < NV; v++) xv[v] = _mm256_load_ps(xt + (size_t)k * ldt + v * 8);
        for (int i = 0; i < 4; i++) {
            __m256 wv = _mm256_broadcast_ss(P + i * KB + k);
            for (int v = 0; v < NV; v++) c[i][v] = _mm256_fmadd_ps(wv, xv[v], c[i][v]);
        }
    }
    for (int i = 0; i < 4; i++)
        for (int v = 0; v < NV; v++) _mm256_store_ps(acc + i * ldt + v * 8, c[i][v]);
}

/* DST[k*ldd + i] = SRC[i*lds + k] for k < KN (<= 8) and i < 8, rows i >= N
 * read as zeros: in registers when the block is whole. */
static AI T256 void transpose8(const float *src, size_t lds, int n, int kn, float *dst, size_t ldd) {
    if (n < 8 || kn < 8) {
        for (int k = 0; k < kn; k++)
            for (int i = 0; i < 8; i++) dst[(size_t)k * ldd + i] = i < n ? src[(size_t)i * lds + k] : 0.0f;
        return;
    }
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + (size_t)i * lds);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int j = 0; j < 8; j += 4) { /* u[j+m]: rows j..j+3, columns m and m + 4 (one per lane) */
        u[j] = _mm256_shuffle_ps(t[j], t[j + 2], 0x44);
        u[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], 0xEE);
        u[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0x44);
        u[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], 0xEE);
    }
    for (int m = 0; m < 4; m++) {
        _mm256_store_ps(dst + (size_t)m * ldd, _mm256_permute2f128_ps(u[m], u[4 + m], 0x20));
        _mm256_store_ps(dst + (size_t)(m + 4) * ldd, _mm256_permute2f128_ps(u[m], u[4 + m], 0x31));
    }
}

/* Rows [0, rows4) (rows4 % 4 == 0), 1 <= n <= 64 tokens; XT and ACC are
 * scratch of cols x ldt and SG x ldt floats (32-byte aligned). */
static AI T256 void mm_float_outer(int wt, const uint8_t *w, size_t rb, int rows4, const float *x, int ldx, int n,
                                   int cols, float *out, int ldo, float *xt, float *acc) {
    float P[4 * KB] __attribute__((aligned(32)));
    const size_t esz = wt == W_F32 ? 4 : 2;
    const int nv = (n + 7) / 8, ldt = nv * 8;
    for (int t = 0; t < ldt; t += 8)
        for (int k = 0; k < cols; k += 8)
            transpose8(x + (size_t)t * ldx + k, ldx, n - t < 8 ? n - t : 8, cols - k < 8 ? cols - k : 8,
                       xt + (size_t)k * ldt + t, ldt);
    for (int s0 = 0; s0 < rows4; s0 += SG) {
        int ns = rows4 - s0 < SG ? rows4 - s0 : SG;
        for (int k0 = 0; k0 < cols; k0 += KB) {
            int kb = cols - k0 < KB ? cols - k0 : KB;
            for (int r0 = s0; r0 < s0 + ns; r0 += 4) {
                for (int i = 0; i < 4; i++) {
                    const uint8_t *wr = w + (size_t)(r0 + i) * rb;
                    int k = 0;
                    for (; k + 8 <= kb; k += 8) _mm256_store_ps(P + i * KB + k, loadw(wt, wr, k0 + k));
                    for (; k < kb; k++) P[i * KB + k] = wscalar(wt, wr, k0 + k);
                }
                { /* the next panel's weights come from memory while this one computes */
                    int nr0 = r0 + 4, nk0 = k0;
                    if (nr0 >= s0 + ns) {
                        nr0 = k0 + KB < cols ? s0 : s0 + SG;
                        nk0 = k0 + KB < cols ? k0 + KB : 0;
                    }
                    int nrr = rows4 - nr0 < 4 ? rows4 - nr0 : 4, nkb = cols - nk0 < KB ? cols - nk0 : KB;
                    for (int i = 0; i < nrr; i++)
                        for (size_t l = 0; l < (size_t)nkb * esz; l += 64)
                            _mm_prefetch((const char *)(w + (size_t)(nr0 + i) * rb + (size_t)nk0 * esz + l), _MM_HINT_T0);
                }
                float *ac = acc + (size_t)(r0 - s0) * ldt;
                const float *xb = xt + (size_t)k0 * ldt;
                int v = 0;
                for (; v + 3 <= nv; v += 3) otile(3, P, xb + 8 * v, ldt, kb, ac + 8 * v, k0 == 0);
                if (nv - v == 2) otile(2, P, xb + 8 * v, ldt, kb, ac + 8 * v, k0 == 0);
                else if (nv - v == 1) otile(1, P, xb + 8 * v, ldt, kb, ac + 8 * v, k0 == 0);
            }
        }
        for (int t = 0; t < n; t++)
            for (int r = 0; r < ns; r++) out[(size_t)t * ldo + s0 + r] = acc[(size_t)r * ldt + t];
    }
}

static AI T256 void mm_float(int wt, const void *wv, size_t rb, int rows, const float *x, int ldx, int n, int cols,
                             float *out, int ldo, float *xt) {
    const uint8_t *w = wv;
    int r = 0;
    if (n <= KB_EXACT_ROWS) { /* decode and small batches: one order for every token count */
        for (; r < rows; r++) {
            const uint8_t *wr = w + (size_t)r * rb;
            int t = 0;
            for (; t + 2 <= n; t += 2) row_dot_tt(wt, 2, wr, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
            if (t < n) row_dot_tt(wt, 1, wr, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
        }
        return;
    }
    if (rows >= 4 && xt) { /* xt: CPU_MM_TMP_FLOATS(cols) >= (cols + SG) * ldt floats */
        size_t ldt = (size_t)(n < 64 ? n + 7 : 64) / 8 * 8;
        r = rows / 4 * 4;
        for (int t = 0; t < n; t += 64)
            mm_float_outer(wt, w, rb, r, x + (size_t)t * ldx, ldx, n - t < 64 ? n - t : 64, cols,
                           out + (size_t)t * ldo, ldo, xt, xt + (size_t)cols * ldt);
    }
    for (; r + 4 <= rows; r += 4) {
        const uint8_t *wr = w + (size_t)r * rb;
        int t = 0;
        for (; t + 2 <= n; t += 2) ftile(wt, 4, 2, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
        if (t < n) ftile(wt, 4, 1, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
    }
    for (; r < rows; r++) {
        const uint8_t *wr = w + (size_t)r * rb;
        int t = 0;
        for (; t + 3 <= n; t += 3) ftile(wt, 1, 3, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
        for (; t < n; t++) ftile(wt, 1, 1, wr, rb, x + (size_t)t * ldx, ldx, cols, out + (size_t)t * ldo + r, ldo);
    }
}

static T256 void mm_f32(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out,
                        int ldo, float *tmp) {
    mm_float(W_F32, w, rb, rows, x, ldx, n, cols, out, ldo, tmp);
}
static T256 void mm_f16(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out,
                        int ldo, float *tmp) {
    mm_float(W_F16, w, rb, rows, x, ldx, n, cols, out, ldo, tmp);
}
static T256 void mm_bf16(const void *w, size_t rb, int rows, const float *x, int ldx, int n, int cols, float *out,
                         int ldo, float *tmp) {
    mm_float(W_BF16, w, rb, rows, x, ldx, n, cols, out, ldo, tmp);
}

static AI int32_t ld32(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#ifndef KERN_DPBUSD
/* ACC plus the dword lanes of u8 U times s8 S (4 products each): maddubs
 * then madd by 1 (vpdpbusd with AVX-VNNI). */
#define KERN_DPBUSD(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#endif

#define KERN_TARGET T256
#define KERN_ROWS_R 2
#include "kernels/cpu/kern_rows.h"
#undef KERN_TARGET
#undef KERN_ROWS_R

/* The scales of rows 8h..8h+7 for block J of the IQ4_XS super-block at SB
 * (x16 layout, repack.c): d (sc - 32), the 6-bit sc from scales_l and
 * scales_h. */
static AI T256 __m256 iq4xs_scale(const uint8_t *sb, int h, int j) {
    __m256i l = _mm256_srli_epi32(_mm256_loadu_si256((const __m256i *)(sb + 32 + 32 * h)), 4 * j);
    __m256i hi = _mm256_srli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(sb + 96 + 16 * h))), 2 * j);
    __m256i sc = _mm256_or_si256(_mm256_and_si256(l, _mm256_set1_epi32(15)),
                                 _mm256_slli_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(3)), 4));
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(sb + 16 * h))),
                         _mm256_cvtepi32_ps(_mm256_sub_epi32(sc, _mm256_set1_epi32(32))));
}

/* A type of the rp32 layout (cpu_internal.h), or IQ4_XS (its blocks of 32
 * in the same chunks, their scales from the super-block), NH halves of a
 * group from half H0 (rows 8h..8h+7 each), TT tokens (TT x NH <= 4). Q4_0,
 * Q4_1, Q5_0, Q5_1: unsigned nibbles (the fifth bits of Q5_0/Q5_1 from
 * their masks, 32 bits a half-chunk, as 0x10 bytes), the offsets of Q4_0
 * (-8) and Q5_0 (-16) back out through m8, the mins of Q4_1/Q5_1 through
 * the activation's block sums (ds); IQ4_NL, IQ4_XS and Q8_0 signed,
 * through the sign trick. Both halves in one pass (one token) read each
 * line of the group once, so that memory streams while the halves
 * compute; a token's operations do not depend on TT or NH. */
#define Q32_PREFETCH 8192 /* bytes ahead (4096 to 12288 measured alike; none: 20% slower from memory) */
static AI T256 void q32_tile(ggml_type T, int TT, int NH, const uint8_t *g, int h0, const act_q8 *a, int t0,
                             float *out, int ldo) {
    const int nb = a->nb, XS = T == GGML_TYPE_IQ4_XS, NL = T == GGML_TYPE_IQ4_NL || XS, Q4 = T != GGML_TYPE_Q8_0 && !NL,
              HB = rp32_has_bits(T), MIN = rp32_has_min(T), ch = XS ? 128 : rp32_chunk_off(T), mo = rp32_mask_off(T);
    const size_t bb = 16 * (size_t)(T == GGML_TYPE_Q8_0 ? 34 : 18 + 2 * MIN + 4 * HB), bpb = XS ? RP_ROWS * 136 / 8 : bb;
    const __m256i m4 = _mm256_set1_epi8(0x0F), x80 = _mm256_set1_epi8((char)0x80);
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4_values));
    const int8_t *aq[4];
    const float *ad[4], *ads[4];
    const int32_t *am[4];
    __m256 accf[4][2];
    for (int j = 0; j < TT; j++) {
        aq[j] = a->qs + (size_t)(t0 + j) * a->cols;
        ad[j] = a->d + (size_t)(t0 + j) * nb;
        ads[j] = a->ds + (size_t)(t0 + j) * nb;
        am[j] = a->m8 + (size_t)(t0 + j) * nb;
        for (int v = 0; v < NH; v++) accf[j][v] = _mm256_setzero_ps();
    }
    for (int b = 0; b < nb; b++) {
        /* IQ4_XS: O such that block b's chunks are at O + ch (its super-block's d at SBP) */
        const uint8_t *sbp = g + (size_t)(b / 8) * RP_ROWS * 136;
        const uint8_t *o = XS ? sbp + 256 * (b % 8) : g + (size_t)b * bb;
        if (h0 == 0) /* the group's bytes run in block order: Q32_PREFETCH bytes ahead */
            for (size_t l = 0; l < bpb; l += 64)
                _mm_prefetch((const char *)g + (size_t)b * bpb + Q32_PREFETCH + l, _MM_HINT_T0);
        /* two accumulators per token and half: shorter dependency chains */
        __m256i acc[4][2], acc2[4][2];
        for (int j = 0; j < TT; j++)
            for (int v = 0; v < NH; v++) {
                acc[j][v] = T == GGML_TYPE_Q4_0 || T == GGML_TYPE_Q5_0
                                ? _mm256_set1_epi32(T == GGML_TYPE_Q5_0 ? 2 * am[j][b] : am[j][b])
                                : _mm256_setzero_si256();
                acc2[j][v] = _mm256_setzero_si256();
            }
        if (Q4) {
            for (int k = 0; k < 4; k++)
                for (int v = 0; v < NH; v++) {
                    const int h = h0 + v;
                    __m256i L = _mm256_loadu_si256((const __m256i *)(o + ch + 64 * k + 32 * h));
                    __m256i lo = _mm256_and_si256(L, m4), hi = _mm256_and_si256(_mm256_srli_epi16(L, 4), m4);
                    if (HB) { /* mask 2k, 2k+1: bit 4r+i is row r's byte i; this half's rows are bits 32h.. */
                        lo = _mm256_or_si256(lo, rows_bits32(o + mo + 16 * k + 4 * h));
                        hi = _mm256_or_si256(hi, rows_bits32(o + mo + 8 + 16 * k + 4 * h));
                    }
                    for (int j = 0; j < TT; j++) {
                        __m256i alo = _mm256_set1_epi32(ld32(aq[j] + 32 * b + 4 * k));
                        __m256i ahi = _mm256_set1_epi32(ld32(aq[j] + 32 * b + 16 + 4 * k));
#if KERN_AVX2_VNNI
                        acc[j][v] = KERN_DPBUSD(acc[j][v], lo, alo);
                        acc2[j][v] = KERN_DPBUSD(acc2[j][v], hi, ahi);
#else /* values 0-31: the two halves' int16 sums add without overflow, one madd */
                        __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(lo, alo), _mm256_maddubs_epi16(hi, ahi));
                        p = _mm256_madd_epi16(p, _mm256_set1_epi16(1));
                        if (k & 1)
                            acc2[j][v] = _mm256_add_epi32(acc2[j][v], p);
                        else
                            acc[j][v] = _mm256_add_epi32(acc[j][v], p);
#endif
                    }
                }
        } else if (NL) { /* table values, signed: the sign trick, one madd per half */
            for (int k = 0; k < 4; k++)
                for (int v = 0; v < NH; v++) {
                    __m256i L = _mm256_loadu_si256((const __m256i *)(o + ch + 64 * k + 32 * (h0 + v)));
                    __m256i lo = _mm256_shuffle_epi8(tbl, _mm256_and_si256(L, m4));
                    __m256i hi = _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(L, 4), m4));
                    __m256i ulo = _mm256_abs_epi8(lo), uhi = _mm256_abs_epi8(hi);
                    for (int j = 0; j < TT; j++) {
                        __m256i alo = _mm256_sign_epi8(_mm256_set1_epi32(ld32(aq[j] + 32 * b + 4 * k)), lo);
                        __m256i ahi = _mm256_sign_epi8(_mm256_set1_epi32(ld32(aq[j] + 32 * b + 16 + 4 * k)), hi);
                        acc[j][v] = KERN_DPBUSD(acc[j][v], ulo, alo);
                        acc2[j][v] = KERN_DPBUSD(acc2[j][v], uhi, ahi);
                    }
                }
        } else {
            for (int k = 0; k < 8; k++)
                for (int v = 0; v < NH; v++) {
                    __m256i s = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(o + 32 + 64 * k + 32 * (h0 + v))), x80);
                    __m256i u = _mm256_sign_epi8(s, s);
                    for (int j = 0; j < TT; j++) {
                        __m256i av = _mm256_sign_epi8(_mm256_set1_epi32(ld32(aq[j] + 32 * b + 4 * k)), s);
                        if (k & 1)
                            acc2[j][v] = KERN_DPBUSD(acc2[j][v], u, av);
                        else
                            acc[j][v] = KERN_DPBUSD(acc[j][v], u, av);
                    }
                }
        }
        for (int v = 0; v < NH; v++) {
            const int h = h0 + v;
            __m256 ws = XS ? iq4xs_scale(sbp, h, b % 8) : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 16 * h)));
            for (int j = 0; j < TT; j++)
                accf[j][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc[j][v], acc2[j][v])),
                                             _mm256_mul_ps(ws, _mm256_set1_ps(ad[j][b])), accf[j][v]);
            if (MIN) {
                __m256 wm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 32 + 16 * h)));
                for (int j = 0; j < TT; j++) accf[j][v] = _mm256_fmadd_ps(wm, _mm256_set1_ps(ads[j][b]), accf[j][v]);
            }
        }
    }
    for (int j = 0; j < TT; j++)
        for (int v = 0; v < NH; v++) _mm256_storeu_ps(out + (size_t)(t0 + j) * ldo + 8 * (h0 + v), accf[j][v]);
}

/* Tiles of 4 tokens a half, then single tokens over both halves. */
static AI T256 void mm_q32(ggml_type T, const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out,
                           int ldo) {
    const int n4 = n / 4 * 4;
    for (int g = 0; g < ng; g++) {
        const uint8_t *gp = w + (size_t)g * gbytes;
        float *og = out + (size_t)g * RP_ROWS;
        for (int h = 0; h < 2 && n4; h++)
            for (int t = 0; t < n4; t += 4) q32_tile(T, 4, 1, gp, h, a, t, og, ldo);
        for (int t = n4; t < n; t++) q32_tile(T, 1, 2, gp, 0, a, t, og, ldo);
    }
}
/* Q4_K or Q5_K in the x16 layout (repack.c), NH halves of a group from
 * half H0 (rows 8h..8h+7 each), TT tokens (TT x NH <= 3): per 64 values
 * (c) of a super-block, 8 steps of 4 bytes a row (the low nibbles are
 * sub-block 2c, the high ones 2c+1; Q5_K's fifth bits from its qh bytes of
 * the step) summed in int16 by maddubs (8 x 2 x 15 x 127 < 2^15; Q5_K's
 * values to 31 flush to int32 after 4 steps; dword lanes with VNNI), then
 * per sub-block into float: its 6-bit scale times d and the activation's
 * scale in one fma, its min times dmin against the activation's block sum
 * in another. A token's operations do not depend on TT or NH (the exact
 * tile's rule). The pass over half 0 prefetches the group KQ_PREFETCH
 * super-blocks ahead (the half after it reads the same lines from cache). */
#define KQ_PREFETCH 4
static AI T256 void kq_tile(ggml_type T, int TT, int NH, const uint8_t *g, int h0, const act_q8 *a, int t0, float *out,
                            int ldo) {
    const int nb = a->nb, nsb = nb / 8, Q5 = T == GGML_TYPE_Q5_K;
    const size_t sbb = (size_t)RP_ROWS * (Q5 ? 176 : 144), qso = Q5 ? 768 : 256;
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi32(3), m15 = _mm256_set1_epi32(15);
    const int8_t *aq[3];
    const float *ad[3], *ads[3];
    __m256 accf[3][2];
    for (int j = 0; j < TT; j++) {
        aq[j] = a->qs + (size_t)(t0 + j) * a->cols;
        ad[j] = a->d + (size_t)(t0 + j) * nb;
        ads[j] = a->ds + (size_t)(t0 + j) * nb;
        for (int v = 0; v < NH; v++) accf[j][v] = _mm256_setzero_ps();
    }
    for (int sb = 0; sb < nsb; sb++) {
        const uint8_t *o = g + (size_t)sb * sbb;
        for (int c = 0; c < 4; c++) {
            __m256i s[3][2][2], s32[3][2][2];
            for (int j = 0; j < TT; j++)
                for (int v = 0; v < NH; v++)
                    s[j][v][0] = s[j][v][1] = s32[j][v][0] = s32[j][v][1] = _mm256_setzero_si256();
            const uint8_t *q = o + qso + (size_t)c * 512 + 32 * h0;
            if (h0 == 0)
                for (size_t l = 0; l < sbb / 4; l += 64)
                    _mm_prefetch((const char *)o + KQ_PREFETCH * sbb + sbb / 4 * c + l, _MM_HINT_T0);
            for (int k = 0; k < 8; k++) {
                __m256i lo[2], hi[2];
                for (int v = 0; v < NH; v++) {
                    __m256i L = _mm256_loadu_si256((const __m256i *)(q + 64 * k + 32 * v));
                    lo[v] = _mm256_and_si256(L, m4);
                    hi[v] = _mm256_and_si256(_mm256_srli_epi16(L, 4), m4);
                    if (Q5) {
                        __m256i H = _mm256_loadu_si256((const __m256i *)(o + 256 + 64 * k + 32 * (h0 + v)));
                        lo[v] = _mm256_or_si256(lo[v], rows_bits_to(H, 2 * c, 4, 0x10));
                        hi[v] = _mm256_or_si256(hi[v], rows_bits_to(H, 2 * c + 1, 4, 0x10));
                    }
                }
                for (int j = 0; j < TT; j++) {
                    const int8_t *ab = aq[j] + 256 * sb + 64 * c + 4 * k;
                    __m256i alo = _mm256_set1_epi32(ld32(ab)), ahi = _mm256_set1_epi32(ld32(ab + 32));
                    for (int v = 0; v < NH; v++) {
#if KERN_AVX2_VNNI
                        s32[j][v][0] = KERN_DPBUSD(s32[j][v][0], lo[v], alo);
                        s32[j][v][1] = KERN_DPBUSD(s32[j][v][1], hi[v], ahi);
#else
                        s[j][v][0] = _mm256_add_epi16(s[j][v][0], _mm256_maddubs_epi16(lo[v], alo));
                        s[j][v][1] = _mm256_add_epi16(s[j][v][1], _mm256_maddubs_epi16(hi[v], ahi));
                        if ((Q5 && k == 3) || k == 7)
                            for (int hh = 0; hh < 2; hh++) {
                                s32[j][v][hh] = _mm256_add_epi32(s32[j][v][hh], _mm256_madd_epi16(s[j][v][hh], _mm256_set1_epi16(1)));
                                s[j][v][hh] = _mm256_setzero_si256();
                            }
#endif
                    }
                }
            }
            for (int v = 0; v < NH; v++) {
                const int h = h0 + v;
                __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 16 * h)));
                __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(o + 32 + 16 * h)));
                __m256i hb = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(o + 192 + 16 * c + 8 * h)));
                for (int hh = 0; hh < 2; hh++) {
                    const int jj = 2 * c + hh;
                    __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(o + 64 + 16 * jj + 8 * h)));
                    __m256i hs = _mm256_srli_epi32(hb, 4 * hh);
                    __m256i sc = _mm256_or_si256(_mm256_and_si256(lo, m15), _mm256_slli_epi32(_mm256_and_si256(hs, m3), 4));
                    __m256i mn = _mm256_or_si256(_mm256_srli_epi32(lo, 4),
                                                 _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hs, 2), m3), 4));
                    __m256 scd = _mm256_mul_ps(_mm256_cvtepi32_ps(sc), d), mnd = _mm256_mul_ps(_mm256_cvtepi32_ps(mn), dm);
                    for (int j = 0; j < TT; j++) {
                        accf[j][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[j][v][hh]),
                                                     _mm256_mul_ps(scd, _mm256_set1_ps(ad[j][8 * sb + jj])), accf[j][v]);
                        accf[j][v] = _mm256_fnmadd_ps(mnd, _mm256_set1_ps(ads[j][8 * sb + jj]), accf[j][v]);
                    }
                }
            }
        }
    }
    for (int j = 0; j < TT; j++)
        for (int v = 0; v < NH; v++) _mm256_storeu_ps(out + (size_t)(t0 + j) * ldo + 8 * (h0 + v), accf[j][v]);
}

/* Tiles of 3 tokens a half (Q5_K's extra sums spill a few registers
 * there, still faster than 2), then what is left; a last single token
 * takes both halves in one pass. */
static AI T256 void mm_kq(ggml_type T, const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out,
                          int ldo) {
    const int nt = n / 3 * 3;
    for (int g = 0; g < ng; g++) {
        const uint8_t *gp = w + (size_t)g * gbytes;
        float *og = out + (size_t)g * RP_ROWS;
        for (int h = 0; h < 2 && n > 1; h++) {
            for (int t = 0; t < nt; t += 3) kq_tile(T, 3, 1, gp, h, a, t, og, ldo);
            if (n - nt == 2) kq_tile(T, 2, 1, gp, h, a, nt, og, ldo);
        }
        if (n - nt == 1) kq_tile(T, 1, 2, gp, 0, a, nt, og, ldo);
    }
}
static T256 void mm_q4_k(const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_kq(GGML_TYPE_Q4_K, w, gbytes, ng, a, n, out, ldo);
}
static T256 void mm_q5_k(const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out, int ldo) {
    mm_kq(GGML_TYPE_Q5_K, w, gbytes, ng, a, n, out, ldo);
}

#define Q32_FN(name, T)                                                                                        \
    static T256 void name(const uint8_t *w, size_t gbytes, int ng, const act_q8 *a, int n, float *out, int ldo) { \
        mm_q32(T, w, gbytes, ng, a, n, out, ldo);                                                              \
    }
Q32_FN(mm_q4_0, GGML_TYPE_Q4_0)
Q32_FN(mm_iq4_nl, GGML_TYPE_IQ4_NL)
Q32_FN(mm_iq4_xs, GGML_TYPE_IQ4_XS)
Q32_FN(mm_q8_0, GGML_TYPE_Q8_0)
Q32_FN(mm_q5_0, GGML_TYPE_Q5_0)
Q32_FN(mm_q4_1, GGML_TYPE_Q4_1)
Q32_FN(mm_q5_1, GGML_TYPE_Q5_1)
#undef Q32_FN

static T256 void act_absmax(const float *x, int nb, float *amax) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < nb; b++) {
        __m256 mx = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + CPU_QK * b));
        for (int i = 1; i < 4; i++) mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + CPU_QK * b + 8 * i)));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        amax[b] = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    }
}

static T256 void act_round(const float *x, int nb, const float *id, int8_t *qs, int32_t *sum) {
    for (int b = 0; b < nb; b++) {
        __m256 vid = _mm256_set1_ps(id[b]);
        __m256i q[4];
        for (int i = 0; i < 4; i++) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + CPU_QK * b + 8 * i), vid));
        sum[b] = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
        /* 32 int32 -> 32 int8 in order */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256((__m256i *)(qs + CPU_QK * b),
                            _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

static T256 float dot_f32(const float *a, const float *b, int n) {
    __m256 s = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s);
    float r = hsum(s);
    for (; i < n; i++) r += a[i] * b[i];
    return r;
}

static T256 float dot_f16(const float *a, const uint16_t *b, int n) {
    __m256 s = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8)
        s = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i))), s);
    float r = hsum(s);
    for (; i < n; i++) r += a[i] * quant_f16_to_f32(b[i]);
    return r;
}

static T256 void axpy_f32(float *y, float a, const float *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

static T256 void axpy_f16(float *y, float a, const uint16_t *x, int n) {
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))),
                                                _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * quant_f16_to_f32(x[i]);
}

static AI T256 __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.3762626647949f));
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500E-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073E-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894E-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459E-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201E-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

static T256 float exp_sum(float *x, int n, float mx) {
    __m256 vm = _mm256_set1_ps(mx), s = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        _mm256_storeu_ps(x + i, e);
        s = _mm256_add_ps(s, e);
    }
    float r = hsum(s);
    if (i < n) {
        float buf[8] = {0};
        int left = n - i;
        for (int k = 0; k < left; k++) buf[k] = x[i + k] - mx;
        __m256 e = exp256(_mm256_loadu_ps(buf));
        _mm256_storeu_ps(buf, e);
        for (int k = 0; k < left; k++) {
            x[i + k] = buf[k];
            r += buf[k];
        }
    }
    return r;
}

static T256 void swiglu(float *g, const float *u, size_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, exp256(_mm256_xor_ps(gv, sign))));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    if (i < n) {
        float gb[8] = {0}, ub[8] = {0};
        size_t left = n - i;
        memcpy(gb, g + i, left * 4);
        memcpy(ub, u + i, left * 4);
        __m256 gv = _mm256_loadu_ps(gb);
        __m256 s = _mm256_div_ps(gv, _mm256_add_ps(one, exp256(_mm256_xor_ps(gv, sign))));
        _mm256_storeu_ps(gb, _mm256_mul_ps(s, _mm256_loadu_ps(ub)));
        memcpy(g + i, gb, left * 4);
    }
}

static T256 float sumsq(const float *x, int n) {
    __m256 s = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        s = _mm256_fmadd_ps(v, v, s);
    }
    float r = hsum(s);
    for (; i < n; i++) r += x[i] * x[i];
    return r;
}

static T256 void scale_mul(float *out, const float *x, float sc, const float *w, int n) {
    __m256 vs = _mm256_set1_ps(sc);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), _mm256_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = x[i] * sc * w[i];
}

static T256 void add(float *x, const float *y, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) x[i] += y[i];
}


static T256 void to_f16(uint16_t *out, const float *x, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) out[i] = quant_f32_to_f16(x[i]);
}

#define KERN_TARGET T256
#define KERN_ATTN attn_generic
#include "kernels/cpu/kern_attn.h"
#undef KERN_TARGET
#undef KERN_ATTN

/* Attention of G heads over one KV head as kern_avx512.c does it, 8 wide:
 * scores four positions at a time (the query pre-scaled, one horizontal
 * sum for four), the values summed in registers over every position. Each
 * (token, KV head) is computed the same way whatever the batch, so a small
 * batch keeps one-token decoding's bits. */
static AI T256 __m256 load_kv8(int f16, const void *base, size_t idx) {
    if (f16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + idx)));
    return _mm256_loadu_ps((const float *)base + idx);
}

/* [sum(a0), sum(a1), sum(a2), sum(a3)] */
static AI T256 __m128 hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    __m256 t0 = _mm256_add_ps(_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
    __m256 t1 = _mm256_add_ps(_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
    __m256 t2 = _mm256_add_ps(_mm256_shuffle_ps(t0, t1, 0x44), _mm256_shuffle_ps(t0, t1, 0xEE));
    return _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1));
}

/* Scores of GS heads (1 or 2) of a group, which share K: sc[g npos + t] =
 * (scale q_g) . k_t over hd = 8 * nc values; each head's sums in the same
 * order whatever GS (4 positions at a time, one horizontal sum for four). */
static AI T256 void attn_scores(int GS, const float *q, int hd, const void *k, int f16, size_t stride, int npos,
                                float scale, float *qs, float *sc) {
    const int nc = hd / 8;
    __m256 vs = _mm256_set1_ps(scale);
    for (int g = 0; g < GS; g++)
        for (int c = 0; c < nc; c++)
            _mm256_storeu_ps(qs + g * 256 + 8 * c, _mm256_mul_ps(_mm256_loadu_ps(q + (size_t)g * hd + 8 * c), vs));
    int t = 0;
    for (; t + 4 <= npos; t += 4) {
        __m256 a[2][4];
        for (int g = 0; g < GS; g++)
            for (int i = 0; i < 4; i++) a[g][i] = _mm256_setzero_ps();
        for (int c = 0; c < nc; c++) {
            __m256 kv[4];
            for (int i = 0; i < 4; i++) kv[i] = load_kv8(f16, k, (t + i) * stride + 8 * c);
            for (int g = 0; g < GS; g++) {
                __m256 qc = _mm256_loadu_ps(qs + g * 256 + 8 * c);
                for (int i = 0; i < 4; i++) a[g][i] = _mm256_fmadd_ps(qc, kv[i], a[g][i]);
            }
        }
        for (int g = 0; g < GS; g++) _mm_storeu_ps(sc + (size_t)g * npos + t, hsum4(a[g][0], a[g][1], a[g][2], a[g][3]));
    }
    for (; t < npos; t++)
        for (int g = 0; g < GS; g++) {
            __m256 a = _mm256_setzero_ps();
            for (int c = 0; c < nc; c++)
                a = _mm256_fmadd_ps(_mm256_loadu_ps(qs + g * 256 + 8 * c), load_kv8(f16, k, t * stride + 8 * c), a);
            sc[(size_t)g * npos + t] = hsum(a);
        }
}

/* out[g][8 c0 .. 8 (c0 + CW)) = sum_t p[g][t] v_t for GG heads */
static AI T256 void attn_values(int GG, int CW, const float *score, int npos, const void *v, int f16, size_t stride,
                                int c0, int hd, float *out) {
    __m256 acc[8][4];
    for (int g = 0; g < GG; g++)
        for (int c = 0; c < CW; c++) acc[g][c] = _mm256_setzero_ps();
    for (int t = 0; t < npos; t++) {
        __m256 vv[4];
        for (int c = 0; c < CW; c++) vv[c] = load_kv8(f16, v, t * stride + 8 * (c0 + c));
        for (int g = 0; g < GG; g++) {
            __m256 p = _mm256_broadcast_ss(score + (size_t)g * npos + t);
            for (int c = 0; c < CW; c++) acc[g][c] = _mm256_fmadd_ps(p, vv[c], acc[g][c]);
        }
    }
    for (int g = 0; g < GG; g++)
        for (int c = 0; c < CW; c++) _mm256_storeu_ps(out + (size_t)g * hd + 8 * (c0 + c), acc[g][c]);
}

/* The values of G heads, in as few passes over V as the 16 registers allow
 * (G x CW accumulators, CW vectors of V and the broadcast weight). */
static AI T256 void attn_values_all(int G, const float *score, int npos, const void *v, int f16, size_t stride, int hd,
                                    float *out) {
    int nc = hd / 8, c0 = 0;
#define VALUES(GG, CW)                                                                                          \
    do {                                                                                                        \
        for (; c0 + CW <= nc; c0 += CW) attn_values(GG, CW, score, npos, v, f16, stride, c0, hd, out);          \
        for (; c0 < nc; c0++) attn_values(GG, 1, score, npos, v, f16, stride, c0, hd, out);                     \
    } while (0)
    switch (G) {
    case 1: VALUES(1, 4); break;
    case 2: VALUES(2, 4); break;
    case 3: VALUES(3, 2); break;
    case 4: VALUES(4, 2); break;
    case 5: VALUES(5, 1); break;
    case 6: VALUES(6, 1); break;
    case 7: VALUES(7, 1); break;
    default: VALUES(8, 1); break;
    }
#undef VALUES
}

/* G query heads sharing one KV head (see cpu_internal.h). */
static T256 void attn(const float *q, int G, const void *k, const void *v, int f16, size_t stride, int npos, int hd,
                      float scale, float *score, float *out) {
    if (hd % 8 || hd > 256 || G < 1 || G > 8) {
        attn_generic(q, G, k, v, f16, stride, npos, hd, scale, score, out);
        return;
    }
    float qs[2 * 256];
    int g = 0;
    for (; g + 2 <= G; g += 2) /* two heads per pass over K: each K vector converted once for both */
        attn_scores(2, q + (size_t)g * hd, hd, k, f16, stride, npos, scale, qs, score + (size_t)g * npos);
    if (g < G) attn_scores(1, q + (size_t)g * hd, hd, k, f16, stride, npos, scale, qs, score + (size_t)g * npos);
    for (g = 0; g < G; g++) {
        float *sc = score + (size_t)g * npos;
        float mx = -INFINITY;
        for (int t = 0; t < npos; t++) mx = sc[t] > mx ? sc[t] : mx;
        float inv = 1.0f / exp_sum(sc, npos, mx);
        for (int t = 0; t < npos; t++) sc[t] *= inv;
    }
    attn_values_all(G, score, npos, v, f16, stride, hd, out);
}

static const cpu_kern kern = {
    .name = KERN_AVX2_NAME,
    .mm_f32 = mm_f32,
    .mm_f16 = mm_f16,
    .mm_bf16 = mm_bf16,
    .mm_q8_0 = mm_q8_0,
    .mm_q4_0 = mm_q4_0,
    .mm_q4_k = mm_q4_k,
    .mm_q5_k = mm_q5_k,
    .mm_iq4_nl = mm_iq4_nl,
    .mm_iq4_xs = mm_iq4_xs,
    .mm_q5_0 = mm_q5_0,
    .mm_q4_1 = mm_q4_1,
    .mm_q5_1 = mm_q5_1,
    .mm_row = {KERN_ROWS_TABLE, [GGML_TYPE_Q6_K] = mm_row_q6_k},
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

const cpu_kern *KERN_AVX2_GET(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
        (!KERN_AVX2_VNNI || __builtin_cpu_supports("avxvnni")))
        return &kern;
    return NULL;
}

#else
const cpu_kern *KERN_AVX2_GET(void) { return NULL; }
#endif
