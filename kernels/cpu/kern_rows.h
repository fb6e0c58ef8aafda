/* kern_rows.h - integer matmuls of block-quantized rows in the file layout
 * (no repacking), on 256-bit vectors. Included by kern_avx2.c (AVX2, FMA,
 * F16C) and kern_avx512.c (the same code with 32 registers and EVEX
 * encodings), with KERN_TARGET set to the function attribute of the file
 * and KERN_ROWS_R to the rows of a prefill tile (registers permitting).
 * Defines rows_mm(T, ...) and the row kernels mm_row_<type> of every type.
 *
 * Every type has a decoder that turns one 32-value chunk of a row into 32
 * int8 values (signed, or unsigned for the types with a min) and 16 int16
 * scales, one per maddubs pair lane (lanes 0-7: values 0-15, lanes 8-15:
 * values 16-31), so that the shared tile does, per chunk, row and token:
 * maddubs (u8 x s8; signed values through the sign trick |q| x sign(a, q)),
 * madd with the scales (the K-quants' integer sub-block scales, 1 for the
 * 32-value types), one float fma with the activation block's scale; per
 * super-block the weight's d, and the mins through the activation's block
 * sums (act_q8 ds, and ds16 for Q2_K's per-16 mins and the constant offsets
 * of Q3_K and Q6_K, which are decoded unsigned).
 * Integer sums stay exact: |q| <= 128, |a| <= 127, scales <= 128 in size
 * (times the multipliers, <= 64, in the exact tile: see rows_sb).
 *
 * A tile is R rows x TT tokens: each row's chunk is decoded once and used
 * for TT tokens (prefill). Generation and batches of up to KB_EXACT_ROWS
 * tokens take the exact tile instead (rows_sb's X), one row at a time,
 * prefetching ROWS_PREFETCH bytes ahead: every token there takes the same
 * operations whatever the batch (the speculative decoder's verification
 * relies on it), the 256-value types add a whole super-block in integers
 * (their sub-block scales times the activation's multipliers, act_q8 mul)
 * and the 32-value types alternate their float sums between two chains
 * (more loads in flight: decoding is a memory stream). */
#ifndef KERN_TARGET
#error "define KERN_TARGET before including kern_rows.h"
#endif

#define KT KERN_TARGET
#ifndef KERN_DPBUSD /* the includer may give VNNI's vpdpbusd (the same sums: maddubs never saturates here) */
#define KERN_DPBUSD(acc, u, s) _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#endif

/* Values per block and bytes per block of each type (ggml's layouts). */
static AI int rows_qk(int T) {
    return T == GGML_TYPE_Q2_K || T == GGML_TYPE_Q3_K || T == GGML_TYPE_Q4_K || T == GGML_TYPE_Q5_K ||
                   T == GGML_TYPE_Q6_K || T == GGML_TYPE_IQ4_XS
               ? 256
               : 32;
}
static AI int rows_bb(int T) {
    switch (T) {
    case GGML_TYPE_Q4_0: return 18;
    case GGML_TYPE_Q4_1: return 20;
    case GGML_TYPE_Q5_0: return 22;
    case GGML_TYPE_Q5_1: return 24;
    case GGML_TYPE_Q8_0: return 34;
    case GGML_TYPE_IQ4_NL: return 18;
    case GGML_TYPE_Q2_K: return 84;
    case GGML_TYPE_Q3_K: return 110;
    case GGML_TYPE_Q4_K: return 144;
    case GGML_TYPE_Q5_K: return 176;
    case GGML_TYPE_Q6_K: return 210;
    default: return 136; /* IQ4_XS */
    }
}
/* Unsigned values with a min (w = d * q + min) or a constant offset (Q3_K,
 * Q6_K: decoded without it, applied per 16 through ds16): the others are
 * signed, through the sign trick. */
static AI int rows_unsigned(int T) {
    return T == GGML_TYPE_Q4_1 || T == GGML_TYPE_Q5_1 || T == GGML_TYPE_Q2_K || T == GGML_TYPE_Q4_K ||
           T == GGML_TYPE_Q5_K || T == GGML_TYPE_Q3_K || T == GGML_TYPE_Q6_K;
}
/* The offset subtracted from the decoded values of Q3_K and Q6_K. */
static AI int rows_offset(int T) { return T == GGML_TYPE_Q6_K ? 32 : T == GGML_TYPE_Q3_K ? 4 : 0; }
/* Sub-block scales applied in integers (the 256-value types). */
static AI int rows_scaled(int T) { return rows_qk(T) == 256; }
/* One integer scale per 32 values (Q4_K, Q5_K, IQ4_XS: byte c of sc). */
static AI int rows_scale32(int T) { return T == GGML_TYPE_Q4_K || T == GGML_TYPE_Q5_K || T == GGML_TYPE_IQ4_XS; }

static AI KT float rows_f16(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
static AI uint32_t rows_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* What a decoder keeps per (row, super-block). */
typedef struct {
    float d, dm;  /* the scale; the min's scale (dmin, or Q4_1/Q5_1's m) */
    __m128i sc;   /* 16 int8 scales, one per 16 values (256-value types); 8, one per 32, for rows_scale32's (bytes 0-7) */
    __m128i mn;   /* Q2_K: 16 mins; Q4_K/Q5_K: 8 mins (bytes 0-7) */
    __m256i hi;   /* Q5_0/Q5_1: the 32 fifth bits as 0x10; Q5_K qh; Q3_K hmask */
} rows_prep;

/* The low 4 bits of 16 bytes as values 0-15, then the high 4 bits as 16-31. */
static AI KT __m256i rows_nibbles(const uint8_t *p) {
    __m128i x = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(x, 4), x), _mm256_set1_epi8(0x0F));
}

/* Bit j of the little-endian 32 bits at P as byte j: 0x10 or 0. */
static AI KT __m256i rows_bits32(const uint8_t *p) {
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)rows_u32(p)),
                                    _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                       0x0303030303030303LL));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

/* The scale, the min's scale and the 8 6-bit scales and mins of a Q4_K/Q5_K
 * super-block at B (d, dmin, then 12 bytes q): scales j < 4 in the low 6
 * bits of q[j], mins in those of q[j + 4]; j >= 4 take 4 bits from q[j + 4]
 * (scale low nibble, min high nibble) and 2 from the top of q[j - 4]
 * (scale) and q[j] (min). In one vector: sc gets the scales in bytes 0-7
 * (the mins in 8-15), mn the mins in bytes 0-7. */
static AI KT void rows_k_scales(const uint8_t *b, rows_prep *p) {
    __m128i v = _mm_loadu_si128((const __m128i *)b);
    __m128 f = _mm_cvtph_ps(v);
    p->d = _mm_cvtss_f32(f);
    p->dm = _mm_cvtss_f32(_mm_movehdup_ps(f));
    /* low bits: q0-3 & 63 (s0-3), q8-11 & 15 (s4-7), q4-7 & 63 (m0-3), q8-11 >> 4 (m4-7) */
    __m128i lo = _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15));
    lo = _mm_and_si128(_mm_srlv_epi32(lo, _mm_setr_epi32(0, 0, 0, 4)),
                       _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
    /* high bits of j >= 4: the top 2 of q0-3 (scales) and q4-7 (mins) to bits 4-5 */
    __m128i hi = _mm_shuffle_epi8(v, _mm_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11));
    __m128i s = _mm_or_si128(lo, _mm_and_si128(_mm_srli_epi16(hi, 2), _mm_set1_epi8(0x30)));
    p->sc = s;
    p->mn = _mm_unpackhi_epi64(s, s);
}

static AI KT void rows_prepare(int T, const uint8_t *b, rows_prep *p) {
    switch (T) {
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_IQ4_NL: p->d = rows_f16(b); break;
    case GGML_TYPE_Q4_1:
        p->d = rows_f16(b);
        p->dm = rows_f16(b + 2);
        break;
    case GGML_TYPE_Q5_0:
        p->d = rows_f16(b);
        p->hi = rows_bits32(b + 2);
        break;
    case GGML_TYPE_Q5_1:
        p->d = rows_f16(b);
        p->dm = rows_f16(b + 2);
        p->hi = rows_bits32(b + 4);
        break;
    case GGML_TYPE_Q2_K: {
        __m128i s = _mm_loadu_si128((const __m128i *)b);
        p->sc = _mm_and_si128(s, _mm_set1_epi8(0x0F));
        p->mn = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0F));
        p->d = rows_f16(b + 80);
        p->dm = rows_f16(b + 82);
        break;
    }
    case GGML_TYPE_Q3_K: { /* 16 6-bit scales: low 4 bits in bytes 0-7, high 2 in bytes 8-11; minus 32 */
        uint32_t a0 = rows_u32(b + 96), a1 = rows_u32(b + 100), a2 = rows_u32(b + 104);
        const uint32_t k4 = 0x0f0f0f0f, k2 = 0x03030303;
        __m128i s = _mm_setr_epi32((int)((a0 & k4) | (a2 & k2) << 4), (int)((a1 & k4) | ((a2 >> 2) & k2) << 4),
                                   (int)(((a0 >> 4) & k4) | ((a2 >> 4) & k2) << 4),
                                   (int)(((a1 >> 4) & k4) | ((a2 >> 6) & k2) << 4));
        p->sc = _mm_sub_epi8(s, _mm_set1_epi8(32));
        p->hi = _mm256_loadu_si256((const __m256i *)b);
        p->d = rows_f16(b + 108);
        break;
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
        rows_k_scales(b, p);
        if (T == GGML_TYPE_Q5_K) p->hi = _mm256_loadu_si256((const __m256i *)(b + 16));
        break;
    case GGML_TYPE_Q6_K:
        p->sc = _mm_loadu_si128((const __m128i *)(b + 192));
        p->d = rows_f16(b + 208);
        break;
    default: { /* IQ4_XS: 8 6-bit scales, 4 bits from the nibbles of scales_l, 2 from scales_h; minus 32 */
        uint16_t h;
        memcpy(&h, b + 2, 2);
        __m128i l = _mm_cvtsi32_si128((int)rows_u32(b + 4)), m4 = _mm_set1_epi8(0x0F);
        l = _mm_unpacklo_epi8(_mm_and_si128(l, m4), _mm_and_si128(_mm_srli_epi16(l, 4), m4));
        __m256i hs = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                      _mm256_set1_epi32(3));
        __m128i h16 = _mm_packus_epi32(_mm256_castsi256_si128(hs), _mm256_extracti128_si256(hs, 1));
        __m128i s = _mm_sub_epi8(_mm_or_si128(l, _mm_slli_epi16(_mm_packus_epi16(h16, h16), 4)), _mm_set1_epi8(32));
        p->sc = s;
        p->d = rows_f16(b);
        break;
    }
    }
}

/* Bits FROM.. of every byte of V moved to bits TO.. and kept under MASK
 * (bits TO..): one shift and one and (16-bit shifts: the bits kept never
 * cross a byte). */
static AI KT __m256i rows_bits_to(__m256i v, int from, int to, int mask) {
    if (from < to) v = _mm256_slli_epi16(v, to - from);
    if (from > to) v = _mm256_srli_epi16(v, from - to);
    return _mm256_and_si256(v, _mm256_set1_epi8((char)mask));
}

/* The 32 values of chunk C (values 32c..32c+31 of the block at B). */
static AI KT __m256i rows_chunk(int T, const uint8_t *b, const rows_prep *p, int c) {
    const __m256i m4 = _mm256_set1_epi8(0x0F), m3 = _mm256_set1_epi8(3);
    const __m256i tbl = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4_values));
    switch (T) {
    case GGML_TYPE_Q4_0: return _mm256_sub_epi8(rows_nibbles(b + 2), _mm256_set1_epi8(8));
    case GGML_TYPE_Q4_1: return rows_nibbles(b + 4);
    case GGML_TYPE_Q5_0: return _mm256_sub_epi8(_mm256_or_si256(rows_nibbles(b + 6), p->hi), _mm256_set1_epi8(16));
    case GGML_TYPE_Q5_1: return _mm256_or_si256(rows_nibbles(b + 8), p->hi);
    case GGML_TYPE_Q8_0: return _mm256_loadu_si256((const __m256i *)(b + 2));
    case GGML_TYPE_IQ4_NL: return _mm256_shuffle_epi8(tbl, rows_nibbles(b + 2));
    case GGML_TYPE_IQ4_XS: return _mm256_shuffle_epi8(tbl, rows_nibbles(b + 8 + 16 * c));
    case GGML_TYPE_Q2_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 16 + 32 * (c / 4)));
        return _mm256_and_si256(_mm256_srli_epi16(q, 2 * (c % 4)), m3);
    }
    case GGML_TYPE_Q3_K: { /* 2 low bits; the third bit set means no offset, clear minus 4 (rows_offset) */
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + 32 + 32 * (c / 4)));
        __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q, 2 * (c % 4)), m3);
        return _mm256_or_si256(lo, rows_bits_to(p->hi, c, 2, 4));
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        __m256i q = _mm256_loadu_si256((const __m256i *)(b + (T == GGML_TYPE_Q4_K ? 16 : 48) + 32 * (c / 2)));
        q = _mm256_and_si256(c & 1 ? _mm256_srli_epi16(q, 4) : q, m4);
        if (T == GGML_TYPE_Q4_K) return q;
        return _mm256_or_si256(q, rows_bits_to(p->hi, c, 4, 0x10));
    }
    default: { /* Q6_K: 4 bits from ql, 2 from qh (minus 32: rows_offset) */
        int h = c / 4, k = c % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(b + 64 * h + 32 * (k & 1)));
        l = _mm256_and_si256(k >> 1 ? _mm256_srli_epi16(l, 4) : l, m4);
        __m256i hb = _mm256_loadu_si256((const __m256i *)(b + 128 + 32 * h));
        return _mm256_or_si256(l, rows_bits_to(hb, 2 * k, 4, 0x30));
    }
    }
}

/* The 16 int8 scales V as int16, the even ones in the low 128 bits and the
 * odd ones in the high: once per super-block, so that rows_pick16 is one
 * in-lane shuffle per chunk. */
static AI KT __m256i rows_split16(int T, __m128i v) {
    if (rows_scale32(T)) return _mm256_cvtepi8_epi16(_mm_unpacklo_epi64(v, v)); /* scale c serves groups 2c and 2c+1 */
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(v, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
}
/* Scales 2c (lanes 0-7) and 2c+1 (lanes 8-15) from rows_split16's S. */
static AI KT __m256i rows_pick16(__m256i s, int c) {
    return _mm256_shuffle_epi8(s, _mm256_set1_epi16((short)(2 * c | (2 * c + 1) << 8)));
}

static AI KT float rows_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#define ROWS_RMAX 2

#define ROWS_PREFETCH 4096 /* bytes ahead in each row (Q6_K from memory: 1024 16.0 GB/s, 4096 19.6) */
#define ROWS_TMAX 4
#define ROWS_XMAX 2 /* tokens of an exact tile (registers: two chains each) */

/* Super-block SB of rows R x tokens TT into ACC (chain K of two).
 *
 * X = 0, the prefill tile: per chunk, the integer sums times the sub-block
 * scale (madd), times the activation's scale in one float fma.
 * X = 1, the exact tile (R = 1; decode and batches of up to KB_EXACT_ROWS,
 * whose every token takes the same operations whatever the batch): the
 * 256-value types take the activation's blocks as multiples of its unit
 * (act_q8 u and mul) into their sub-block scales, so that the whole
 * super-block adds up in integers and meets the floats once; the 32-value
 * types alternate their blocks between the two chains K of ACC (rows_tile),
 * so that no token waits on one chain of dependent fmas. */
static AI KT void rows_sb(int T, int R, int TT, int X, int K, const uint8_t *w, size_t rb, const act_q8 *a, int t0, int sb,
                          __m256 acc[ROWS_RMAX][ROWS_TMAX][2], float accm[ROWS_RMAX][ROWS_TMAX]) {
    const int qk = rows_qk(T), nc = qk / 32, nb = a->nb;
    const size_t bb = (size_t)rows_bb(T);
    const int ix = X && rows_scaled(T); /* the integer super-block */
    const __m256i ones16 = _mm256_set1_epi16(1);
    rows_prep p[ROWS_RMAX];
    for (int r = 0; r < R; r++) {
        const char *pf = (const char *)w + (size_t)r * rb + (size_t)sb * bb + ROWS_PREFETCH;
        for (size_t o = 0; o < bb; o += 64) _mm_prefetch(pf + o, _MM_HINT_T0);
        rows_prepare(T, w + (size_t)r * rb + (size_t)sb * bb, &p[r]);
    }
    /* ix: per token, the sub-block scales times the activation's multipliers
     * (|scale x mul| <= 128 x 64, so that a lane's sum over the super-block
     * stays under 2^31: 8 x 2 x 2 x 63 x 127 x 8192 for Q6_K); the
     * one-per-32 scales as int16 pairs read back by broadcast loads */
    int32_t smp[ROWS_TMAX][8] __attribute__((aligned(32)));
    __m256i sm16[ROWS_TMAX];
    float fu[ROWS_TMAX];
    if (ix) {
        for (int t = 0; t < TT; t++) {
            const size_t blk = (size_t)(t0 + t) * nb + (size_t)sb * nc;
            __m128i mv = _mm_loadu_si128((const __m128i *)(a->mul + blk));
            fu[t] = p[0].d * a->u[(size_t)(t0 + t) * CPU_ACT_NSB(nb) + sb];
            if (rows_scale32(T)) {
                __m128i sm = _mm_mullo_epi16(_mm_cvtepi8_epi16(p[0].sc), mv);
                _mm_store_si128((__m128i *)smp[t], _mm_unpacklo_epi16(sm, sm));
                _mm_store_si128((__m128i *)smp[t] + 1, _mm_unpackhi_epi16(sm, sm));
            } else {
                sm16[t] = _mm256_mullo_epi16(rows_split16(T, p[0].sc), _mm256_broadcastsi128_si256(mv));
            }
        }
        __asm__("" : "+m"(smp));
    }
    __m256i sc16[ROWS_RMAX];
    for (int r = 0; r < R; r++) sc16[r] = rows_scaled(T) && !ix ? rows_split16(T, p[r].sc) : ones16;
    __m256 s[ROWS_RMAX][ROWS_TMAX];
    __m256i is[ROWS_TMAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) s[r][t] = _mm256_setzero_ps();
    for (int t = 0; t < TT; t++) is[t] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int c = 0; c < nc; c++) {
        __m256i q[ROWS_RMAX], u[ROWS_RMAX], sc[ROWS_RMAX];
        for (int r = 0; r < R; r++) {
            q[r] = rows_chunk(T, w + (size_t)r * rb + (size_t)sb * bb, &p[r], c);
            u[r] = rows_unsigned(T) ? q[r] : _mm256_abs_epi8(q[r]);
            sc[r] = rows_scaled(T) && !ix ? rows_pick16(sc16[r], c) : ones16;
        }
        for (int t = 0; t < TT; t++) {
            size_t blk = (size_t)(t0 + t) * nb + (size_t)sb * nc + c;
            __m256i av = _mm256_loadu_si256((const __m256i *)(a->qs + blk * 32));
            if (ix) {
                __m256i sv = rows_unsigned(T) ? av : _mm256_sign_epi8(av, q[0]);
                __m256i sm = rows_scale32(T) ? _mm256_set1_epi32(smp[t][c]) : rows_pick16(sm16[t], c);
                is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(_mm256_maddubs_epi16(u[0], sv), sm));
                continue;
            }
            __m256 da = _mm256_set1_ps(a->d[blk]);
            for (int r = 0; r < R; r++) {
                __m256i sv = rows_unsigned(T) ? av : _mm256_sign_epi8(av, q[r]), d32;
                if (rows_scaled(T))
                    d32 = _mm256_madd_epi16(_mm256_maddubs_epi16(u[r], sv), sc[r]);
                else
                    d32 = KERN_DPBUSD(_mm256_setzero_si256(), u[r], sv);
                s[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d32), da, s[r][t]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) {
            size_t blk = (size_t)(t0 + t) * nb + (size_t)sb * nc;
            __m256 *ac = &acc[r][t][K];
            if (ix)
                *ac = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_set1_ps(fu[t]), *ac);
            else
                *ac = _mm256_fmadd_ps(s[r][t], _mm256_set1_ps(p[r].d), *ac);
            if (T == GGML_TYPE_Q2_K || rows_offset(T)) {
                /* Q2_K: - dmin * m_g * S_g; Q3_K, Q6_K: - offset * d * sc_g * S_g, with S_g
                 * the activation's d times the sum of its group g of 16 (ds16) */
                const float *s16 = a->ds16 + 2 * blk;
                __m128i v = T == GGML_TYPE_Q2_K ? p[r].mn : p[r].sc;
                __m256 f = _mm256_set1_ps(T == GGML_TYPE_Q2_K ? p[r].dm : (float)rows_offset(T) * p[r].d);
                __m256 m0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v));
                __m256 m1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)));
                *ac = _mm256_fnmadd_ps(_mm256_mul_ps(m0, f), _mm256_loadu_ps(s16), *ac);
                *ac = _mm256_fnmadd_ps(_mm256_mul_ps(m1, f), _mm256_loadu_ps(s16 + 8), *ac);
            }
            if (T == GGML_TYPE_Q4_K || T == GGML_TYPE_Q5_K) { /* - dmin * m_j * (the sum of block j) */
                __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(p[r].mn));
                *ac = _mm256_fnmadd_ps(_mm256_mul_ps(m, _mm256_set1_ps(p[r].dm)), _mm256_loadu_ps(a->ds + blk), *ac);
            }
            if (T == GGML_TYPE_Q4_1 || T == GGML_TYPE_Q5_1) accm[r][t] += p[r].dm * a->ds[blk];
        }
}

/* Rows R, tokens t0..t0+TT-1 of the R rows at W (RB bytes apart); X: the
 * exact tile (rows_sb), whose 32-value types also alternate blocks between
 * two sums. */
static AI KT void rows_tile(int T, int R, int TT, int X, const uint8_t *w, size_t rb, const act_q8 *a, int t0, float *out,
                            int ldo) {
    const int nsb = a->cols / rows_qk(T), pair = X && rows_qk(T) == 32;
    __m256 acc[ROWS_RMAX][ROWS_TMAX][2];
    float accm[ROWS_RMAX][ROWS_TMAX];
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++) {
            acc[r][t][0] = acc[r][t][1] = _mm256_setzero_ps();
            accm[r][t] = 0;
        }
    int sb = 0;
    for (; pair && sb + 2 <= nsb; sb += 2) {
        rows_sb(T, R, TT, X, 0, w, rb, a, t0, sb, acc, accm);
        rows_sb(T, R, TT, X, 1, w, rb, a, t0, sb + 1, acc, accm);
    }
    for (; sb < nsb; sb++) rows_sb(T, R, TT, X, 0, w, rb, a, t0, sb, acc, accm);
    for (int r = 0; r < R; r++)
        for (int t = 0; t < TT; t++)
            out[(size_t)(t0 + t) * ldo + r] =
                rows_hsum(pair ? _mm256_add_ps(acc[r][t][0], acc[r][t][1]) : acc[r][t][0]) + accm[r][t];
}

/* Rows R0.. of one row tile (R rows) against every token. */
static AI KT void rows_tokens(int T, int R, int X, const uint8_t *w, size_t rb, const act_q8 *a, int n, float *out,
                              int ldo) {
    int t = 0;
    if (X) {
        for (; t + ROWS_XMAX <= n; t += ROWS_XMAX) rows_tile(T, 1, ROWS_XMAX, 1, w, rb, a, t, out, ldo);
        for (; t < n; t++) rows_tile(T, 1, 1, 1, w, rb, a, t, out, ldo);
        return;
    }
    for (; t + ROWS_TMAX <= n; t += ROWS_TMAX) rows_tile(T, R, ROWS_TMAX, 0, w, rb, a, t, out, ldo);
    for (; t < n; t++) rows_tile(T, R, 1, 0, w, rb, a, t, out, ldo);
}

/* Decode and batches of up to KB_EXACT_ROWS tokens take the exact tile, a
 * row at a time (two row streams at once measured half the bandwidth);
 * prompts take R-row prefill tiles. */
static AI KT void rows_mm(int T, const uint8_t *w, size_t rb, int rows, const act_q8 *a, int n, float *out, int ldo) {
    int r = 0, x = n <= KB_EXACT_ROWS;
    if (!x)
        for (; r + KERN_ROWS_R <= rows; r += KERN_ROWS_R)
            rows_tokens(T, KERN_ROWS_R, 0, w + (size_t)r * rb, rb, a, n, out + r, ldo);
    for (; r < rows; r++) rows_tokens(T, 1, x, w + (size_t)r * rb, rb, a, n, out + r, ldo);
}

#define ROWS_FN(name, T)                                                                                             \
    static __attribute__((unused)) KT void name(const uint8_t *w, size_t rb, int rows, const act_q8 *a, int n, float *out, int ldo) {       \
        rows_mm(T, w, rb, rows, a, n, out, ldo);                                                                     \
    }
ROWS_FN(mm_row_q4_0, GGML_TYPE_Q4_0)
ROWS_FN(mm_row_q4_1, GGML_TYPE_Q4_1)
ROWS_FN(mm_row_q5_0, GGML_TYPE_Q5_0)
ROWS_FN(mm_row_q5_1, GGML_TYPE_Q5_1)
ROWS_FN(mm_row_q8_0, GGML_TYPE_Q8_0)
ROWS_FN(mm_row_iq4_nl, GGML_TYPE_IQ4_NL)
ROWS_FN(mm_row_q2_k, GGML_TYPE_Q2_K)
ROWS_FN(mm_row_q3_k, GGML_TYPE_Q3_K)
ROWS_FN(mm_row_q4_k, GGML_TYPE_Q4_K)
ROWS_FN(mm_row_q5_k, GGML_TYPE_Q5_K)
ROWS_FN(mm_row_q6_k, GGML_TYPE_Q6_K)
ROWS_FN(mm_row_iq4_xs, GGML_TYPE_IQ4_XS)
#undef ROWS_FN

/* The row kernels for a cpu_kern initializer; Q6_K (mm_row_q6_k) is left to
 * the including file, which may have its own. */
#define KERN_ROWS_TABLE                                                                                              \
    [GGML_TYPE_Q4_0] = mm_row_q4_0, [GGML_TYPE_Q4_1] = mm_row_q4_1, [GGML_TYPE_Q5_0] = mm_row_q5_0,                  \
    [GGML_TYPE_Q5_1] = mm_row_q5_1, [GGML_TYPE_Q8_0] = mm_row_q8_0, [GGML_TYPE_IQ4_NL] = mm_row_iq4_nl,              \
    [GGML_TYPE_Q2_K] = mm_row_q2_k, [GGML_TYPE_Q3_K] = mm_row_q3_k, [GGML_TYPE_Q4_K] = mm_row_q4_k,                  \
    [GGML_TYPE_Q5_K] = mm_row_q5_k, [GGML_TYPE_IQ4_XS] = mm_row_iq4_xs

#undef KT
