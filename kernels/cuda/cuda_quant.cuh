/* cuda_quant.cuh - the ggml weight formats on the device (and on the host,
 * for the self-test): one element at a time (embedding rows, dequantisation
 * to F16 for cuBLAS, the reference matvec) and the int8 dot products of the
 * decode matvecs.
 *
 * Block layouts (as kernels/cpu/quant.c defines them, little-endian):
 *   Q8_0 34 bytes:  f16 d | int8 qs[32]                      x = d * q
 *   Q4_0 18 bytes:  f16 d | u8 qs[16] (lo nibble: 0..15,     x = d * (q - 8)
 *                                      hi nibble: 16..31)
 *   Q4_K 144 bytes: f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
 *                   256 values, 8 sub-blocks of 32 with 6-bit scale/min;
 *                   chunk c (64 values) = qs[32c..32c+31]: lo nibbles are
 *                   sub-block 2c, hi nibbles 2c+1;   x = d*sc*q - dmin*m
 *   Q6_K 210 bytes: u8 ql[128] | u8 qh[64] | int8 scales[16] | f16 d
 *                   x = d * sc * (q - 32), q 6 bits (ql nibble | qh 2 bits)
 *
 * The quantized activation (for the int8 paths) is ggml-like Q8 in blocks
 * of 32 (exactly the CPU backend's act_q8): q = rint(x / d), d = amax/127,
 * per block d and ds = d * sum(q) (the Q4_K min term uses ds).
 *
 * A decode matvec splits each weight block into PARTS pieces; lane L of the
 * warp that owns a row takes items L, L+32, ... (item = block * PARTS +
 * part) and vdot<T>() returns that piece's contribution to the row's dot.
 */
#ifndef ILPD_CUDA_QUANT_CUH
#define ILPD_CUDA_QUANT_CUH

#include "kernels/cuda/cuda_compat.cuh"

namespace ILPD_NS {

enum { WT_F32 = 0, WT_F16 = 1, WT_Q4_0 = 2, WT_Q8_0 = 8, WT_Q4_K = 12, WT_Q6_K = 14, WT_BF16 = 30 };

#ifdef __CUDA_ARCH__
KHD uint16_t ld_u16(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
KHD uint32_t ld_u32(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }
KHD int ld_i32(const int8_t *p) { return *reinterpret_cast<const int *>(p); }
#else /* host (self-test, emulation): no type punning */
KHD uint16_t ld_u16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
KHD uint32_t ld_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
KHD int ld_i32(const int8_t *p) {
    int v;
    memcpy(&v, p, 4);
    return v;
}
#endif
/* 4 bytes at a 2-byte aligned address. */
KHD uint32_t ld_u32_a2(const uint8_t *p) {
    return (uint32_t)ld_u16(p) | ((uint32_t)ld_u16(p + 2) << 16);
}

/* The 6-bit scale and min of sub-block j of a Q4_K super-block. */
KHD void q4k_sm(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

/* Element k of a weight row of type T (k < cols). Same arithmetic, in the
 * same order, as the CPU dequantisers. */
KHD float dq_elem(int t, const uint8_t *row, int k) {
    switch (t) {
    case WT_F32: return reinterpret_cast<const float *>(row)[k];
    case WT_F16: return h2f(reinterpret_cast<const uint16_t *>(row)[k]);
    case WT_BF16: return bf2f(reinterpret_cast<const uint16_t *>(row)[k]);
    case WT_Q8_0: {
        const uint8_t *b = row + (size_t)(k >> 5) * 34;
        return h2f(ld_u16(b)) * (float)(int8_t)b[2 + (k & 31)];
    }
    case WT_Q4_0: {
        const uint8_t *b = row + (size_t)(k >> 5) * 18;
        int j = k & 31;
        uint8_t v = b[2 + (j & 15)];
        int q = j < 16 ? (v & 0xF) : (v >> 4);
        return h2f(ld_u16(b)) * (float)(q - 8);
    }
    case WT_Q4_K: {
        const uint8_t *b = row + (size_t)(k >> 8) * 144;
        int j = k & 255, c = j >> 6, l = j & 63, sub = 2 * c + (l >> 5);
        int sc, m;
        q4k_sm(b + 4, sub, &sc, &m);
        uint8_t v = b[16 + 32 * c + (l & 31)];
        int q = l < 32 ? (v & 0xF) : (v >> 4);
        float d = h2f(ld_u16(b)), dmin = h2f(ld_u16(b + 2));
        return fsub_rn(fmul_rn(fmul_rn(d, (float)sc), (float)q), fmul_rn(dmin, (float)m));
    }
    case WT_Q6_K: {
        const uint8_t *b = row + (size_t)(k >> 8) * 210;
        int j = k & 255, half = j >> 7, qd = (j & 127) >> 5, l = j & 31;
        const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
        const int8_t *sc = reinterpret_cast<const int8_t *>(b + 192) + 8 * half;
        int lo = (ql[l + 32 * (qd & 1)] >> (4 * (qd >> 1))) & 0xF;
        int hi = (qh[l] >> (2 * qd)) & 3;
        int q = (lo | (hi << 4)) - 32;
        return h2f(ld_u16(b + 208)) * (float)sc[(l >> 4) + 2 * qd] * (float)q;
    }
    default: return 0.0f;
    }
}

/* Per type: values and bytes of a block, pieces per block for the int8 dot. */
template <int T> struct wtraits;
template <> struct wtraits<WT_Q8_0> { enum { QK = 32, BYTES = 34, PARTS = 4 }; };
template <> struct wtraits<WT_Q4_0> { enum { QK = 32, BYTES = 18, PARTS = 4 }; };
template <> struct wtraits<WT_Q4_K> { enum { QK = 256, BYTES = 144, PARTS = 16 }; };
template <> struct wtraits<WT_Q6_K> { enum { QK = 256, BYTES = 210, PARTS = 16 }; };

/* Piece P of weight block B against the activation's quants A (the block's
 * first value), scales AD and sums ADS (the block's first 32-block). */
template <int T> KHD float vdot(const uint8_t *b, const int8_t *a, const float *ad, const float *ads, int p);

template <> KHD float vdot<WT_Q8_0>(const uint8_t *b, const int8_t *a, const float *ad, const float *ads, int p) {
    (void)ads;
    const uint8_t *q = b + 2 + 8 * p;
    int s = dp4a((int)ld_u32_a2(q), ld_i32(a + 8 * p), 0);
    s = dp4a((int)ld_u32_a2(q + 4), ld_i32(a + 8 * p + 4), s);
    return (float)s * (h2f(ld_u16(b)) * ad[0]);
}

template <> KHD float vdot<WT_Q4_0>(const uint8_t *b, const int8_t *a, const float *ad, const float *ads, int p) {
    (void)ads;
    uint32_t v = ld_u32_a2(b + 2 + 4 * p);
    int alo = ld_i32(a + 4 * p), ahi = ld_i32(a + 16 + 4 * p);
    int s = dp4a((int)(v & 0x0F0F0F0Fu), alo, 0);
    s = dp4a((int)((v >> 4) & 0x0F0F0F0Fu), ahi, s);
    int sa = dp4a(0x01010101, alo, dp4a(0x01010101, ahi, 0));
    return (float)(s - 8 * sa) * (h2f(ld_u16(b)) * ad[0]);
}

template <> KHD float vdot<WT_Q4_K>(const uint8_t *b, const int8_t *a, const float *ad, const float *ads, int p) {
    int j = p >> 1, hp = p & 1, c = j >> 1, sh = 4 * (j & 1);
    int sc, m;
    q4k_sm(b + 4, j, &sc, &m);
    const uint8_t *q = b + 16 + 32 * c + 16 * hp;
    const int8_t *ai = a + 32 * j + 16 * hp;
    int s = 0;
KUNROLL
    for (int i = 0; i < 4; i++) s = dp4a((int)((ld_u32(q + 4 * i) >> sh) & 0x0F0F0F0Fu), ld_i32(ai + 4 * i), s);
    float r = h2f(ld_u16(b)) * ((float)s * ((float)sc * ad[j]));
    if (hp == 0) r -= h2f(ld_u16(b + 2)) * ((float)m * ads[j]);
    return r;
}

template <> KHD float vdot<WT_Q6_K>(const uint8_t *b, const int8_t *a, const float *ad, const float *ads, int p) {
    (void)ads;
    int half = p >> 3, qd = (p & 7) >> 1, lh = p & 1;
    const uint8_t *ql = b + 64 * half + 32 * (qd & 1) + 16 * lh;
    const uint8_t *qh = b + 128 + 32 * half + 16 * lh;
    int sc = reinterpret_cast<const int8_t *>(b + 192)[8 * half + lh + 2 * qd];
    int blk = 4 * half + qd;
    const int8_t *ai = a + 32 * blk + 16 * lh;
    int shl = 4 * (qd >> 1), shh = 2 * qd;
    int s = 0, sa = 0;
KUNROLL
    for (int i = 0; i < 4; i++) {
        uint32_t lo = (ld_u32_a2(ql + 4 * i) >> shl) & 0x0F0F0F0Fu;
        uint32_t hi = ((ld_u32_a2(qh + 4 * i) >> shh) & 0x03030303u) << 4;
        int av = ld_i32(ai + 4 * i);
        s = dp4a((int)(lo | hi), av, s);
        sa = dp4a(0x01010101, av, sa);
    }
    return h2f(ld_u16(b + 208)) * ((float)sc * ad[blk]) * (float)(s - 32 * sa);
}

} // namespace ILPD_NS

#endif
