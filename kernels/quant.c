/* quant.c - scalar reference implementations of the weight formats. */
#include "kernels/quant.h"

#include <math.h>
#include <string.h>

float quant_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            do {
                e++;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((mant & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

uint16_t quant_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffff;
    if (((x >> 23) & 0xff) == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
    if (exp >= 31) return (uint16_t)(sign | 0x7c00);
    if (exp <= 0) {
        if (exp < -10) return (uint16_t)sign;
        mant |= 0x800000;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift, rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13), rem = mant & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++; /* may carry into the exponent: correct */
    return (uint16_t)half;
}

float quant_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void q4k_scale_min(const uint8_t *q, int j, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

static void dequant_q8_0(const block_q8_0 *b, float *out, int n) {
    for (int i = 0; i < n / 32; i++) {
        float d = quant_f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) out[i * 32 + j] = d * b[i].qs[j];
    }
}

static void dequant_q4_0(const block_q4_0 *b, float *out, int n) {
    for (int i = 0; i < n / 32; i++) {
        float d = quant_f16_to_f32(b[i].d);
        for (int j = 0; j < 16; j++) {
            out[i * 32 + j] = d * ((b[i].qs[j] & 0xF) - 8);
            out[i * 32 + j + 16] = d * ((b[i].qs[j] >> 4) - 8);
        }
    }
}

static void dequant_q4_k(const block_q4_k *b, float *out, int n) {
    for (int i = 0; i < n / 256; i++) {
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        const uint8_t *q = b[i].qs;
        float *y = out + i * 256;
        for (int c = 0; c < 4; c++) {
            uint8_t sc, m;
            q4k_scale_min(b[i].scales, 2 * c, &sc, &m);
            float d1 = d * sc, m1 = dmin * m;
            q4k_scale_min(b[i].scales, 2 * c + 1, &sc, &m);
            float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) y[l] = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) y[32 + l] = d2 * (q[l] >> 4) - m2;
            q += 32;
            y += 64;
        }
    }
}

const int8_t quant_iq4_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The 4-bit index of element j (0..31) of a 32-value block whose 16 bytes
 * hold elements j in the low nibbles and 16 + j in the high ones. */
static int nibble32(const uint8_t *qs, int j) { return j < 16 ? qs[j] & 0xF : qs[j - 16] >> 4; }

static uint32_t load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void dequant_q4_1(const block_q4_1 *b, float *out, int n) {
    for (int i = 0; i < n / 32; i++) {
        float d = quant_f16_to_f32(b[i].d), m = quant_f16_to_f32(b[i].m);
        for (int j = 0; j < 32; j++) out[i * 32 + j] = d * (float)nibble32(b[i].qs, j) + m;
    }
}

static void dequant_q5_0(const block_q5_0 *b, float *out, int n) {
    for (int i = 0; i < n / 32; i++) {
        float d = quant_f16_to_f32(b[i].d);
        uint32_t qh = load_u32le(b[i].qh);
        for (int j = 0; j < 32; j++) {
            int q = nibble32(b[i].qs, j) | (int)((qh >> j) & 1) << 4;
            out[i * 32 + j] = d * (float)(q - 16);
        }
    }
}

static void dequant_q5_1(const block_q5_1 *b, float *out, int n) {
    for (int i = 0; i < n / 32; i++) {
        float d = quant_f16_to_f32(b[i].d), m = quant_f16_to_f32(b[i].m);
        uint32_t qh = load_u32le(b[i].qh);
        for (int j = 0; j < 32; j++) {
            int q = nibble32(b[i].qs, j) | (int)((qh >> j) & 1) << 4;
            out[i * 32 + j] = d * (float)q + m;
        }
    }
}

/* Q2_K and Q3_K share the 2-bit layout: element e of a super-block is in
 * byte 32 * (e / 128) + e % 32 of qs, at bits 2 * ((e / 32) % 4). */
static int crumb(const uint8_t *qs, int e) { return (qs[32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3))) & 3; }

static void dequant_q2_k(const block_q2_k *b, float *out, int n) {
    for (int i = 0; i < n / 256; i++) {
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        float *y = out + i * 256;
        for (int g = 0; g < 16; g++) {
            float dl = d * (float)(b[i].scales[g] & 0xF), ml = dmin * (float)(b[i].scales[g] >> 4);
            for (int l = 0; l < 16; l++) y[16 * g + l] = dl * (float)crumb(b[i].qs, 16 * g + l) - ml;
        }
    }
}

/* The signed 6-bit scale of group g (0..15) of a Q3_K super-block: the low 4
 * bits are nibble g / 8 of byte g % 8, the high 2 bits are bits 2 * (g / 4)
 * of byte 8 + g % 4. */
static int q3k_scale(const uint8_t *s, int g) {
    int lo = (s[g & 7] >> (4 * (g >> 3))) & 0xF, hi = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
    return (lo | hi << 4) - 32;
}

static void dequant_q3_k(const block_q3_k *b, float *out, int n) {
    for (int i = 0; i < n / 256; i++) {
        float d = quant_f16_to_f32(b[i].d);
        float *y = out + i * 256;
        for (int g = 0; g < 16; g++) {
            float dl = d * (float)q3k_scale(b[i].scales, g);
            for (int l = 0; l < 16; l++) {
                int e = 16 * g + l;
                int high = (b[i].hmask[e & 31] >> (e >> 5)) & 1;
                y[e] = dl * (float)(crumb(b[i].qs, e) - (high ? 0 : 4));
            }
        }
    }
}

static void dequant_q5_k(const block_q5_k *b, float *out, int n) {
    for (int i = 0; i < n / 256; i++) {
        float d = quant_f16_to_f32(b[i].d), dmin = quant_f16_to_f32(b[i].dmin);
        float *y = out + i * 256;
        for (int g = 0; g < 8; g++) { /* groups of 32: nibble g % 2 of bytes 32 * (g / 2) .. + 31 */
            uint8_t sc, m;
            q4k_scale_min(b[i].scales, g, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            const uint8_t *q = b[i].qs + 32 * (g >> 1);
            for (int l = 0; l < 32; l++) {
                int v = ((q[l] >> (4 * (g & 1))) & 0xF) | ((b[i].qh[l] >> g) & 1) << 4;
                y[32 * g + l] = dl * (float)v - ml;
            }
        }
    }
}

static void dequant_iq4_nl(const block_iq4_nl *b, float *out, int n) {
    for (int i = 0; i < n / 32; i++) {
        float d = quant_f16_to_f32(b[i].d);
        for (int j = 0; j < 32; j++) out[i * 32 + j] = d * (float)quant_iq4_values[nibble32(b[i].qs, j)];
    }
}

static void dequant_iq4_xs(const block_iq4_xs *b, float *out, int n) {
    for (int i = 0; i < n / 256; i++) {
        float d = quant_f16_to_f32(b[i].d);
        float *y = out + i * 256;
        for (int g = 0; g < 8; g++) { /* each group of 32 is a 16-byte IQ4_NL-style block */
            int sc = ((b[i].scales_l[g >> 1] >> (4 * (g & 1))) & 0xF) | ((b[i].scales_h >> (2 * g)) & 3) << 4;
            float dl = d * (float)(sc - 32);
            for (int j = 0; j < 32; j++) y[32 * g + j] = dl * (float)quant_iq4_values[nibble32(b[i].qs + 16 * g, j)];
        }
    }
}

static void dequant_q6_k(const block_q6_k *b, float *out, int n) {
    for (int i = 0; i < n / 256; i++) {
        float d = quant_f16_to_f32(b[i].d);
        const uint8_t *ql = b[i].ql, *qh = b[i].qh;
        const int8_t *sc = b[i].scales;
        float *y = out + i * 256;
        for (int half = 0; half < 2; half++) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = (int)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void quant_dequantize_row(ggml_type t, const void *row, float *out, int n) {
    switch (t) {
    case GGML_TYPE_F32: memcpy(out, row, (size_t)n * 4); break;
    case GGML_TYPE_F16: {
        const uint16_t *h = row;
        for (int i = 0; i < n; i++) out[i] = quant_f16_to_f32(h[i]);
        break;
    }
    case GGML_TYPE_BF16: {
        const uint16_t *h = row;
        for (int i = 0; i < n; i++) out[i] = quant_bf16_to_f32(h[i]);
        break;
    }
    case GGML_TYPE_Q8_0: dequant_q8_0(row, out, n); break;
    case GGML_TYPE_Q4_0: dequant_q4_0(row, out, n); break;
    case GGML_TYPE_Q4_K: dequant_q4_k(row, out, n); break;
    case GGML_TYPE_Q6_K: dequant_q6_k(row, out, n); break;
    case GGML_TYPE_Q4_1: dequant_q4_1(row, out, n); break;
    case GGML_TYPE_Q5_0: dequant_q5_0(row, out, n); break;
    case GGML_TYPE_Q5_1: dequant_q5_1(row, out, n); break;
    case GGML_TYPE_Q2_K: dequant_q2_k(row, out, n); break;
    case GGML_TYPE_Q3_K: dequant_q3_k(row, out, n); break;
    case GGML_TYPE_Q5_K: dequant_q5_k(row, out, n); break;
    case GGML_TYPE_IQ4_NL: dequant_iq4_nl(row, out, n); break;
    case GGML_TYPE_IQ4_XS: dequant_iq4_xs(row, out, n); break;
    default: memset(out, 0, (size_t)n * 4); break;
    }
}

float quant_dot_row(ggml_type t, const void *row, const float *x, int n) {
    if (t == GGML_TYPE_F32) {
        const float *w = row;
        float s = 0;
        for (int i = 0; i < n; i++) s += w[i] * x[i];
        return s;
    }
    /* Block formats: dequantise one block at a time into a small buffer. */
    float buf[256];
    int bs = t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 ? 256 : ggml_type_block_size(t);
    size_t bb = t == GGML_TYPE_F16 || t == GGML_TYPE_BF16 ? 512 : ggml_type_block_bytes(t);
    const uint8_t *p = row;
    float s = 0;
    int i = 0;
    for (; i + bs <= n; i += bs, p += bb) {
        quant_dequantize_row(t, p, buf, bs);
        for (int j = 0; j < bs; j++) s += buf[j] * x[i + j];
    }
    if (i < n) { /* the tail of a float row whose width is not a multiple of 256 */
        quant_dequantize_row(t, p, buf, n - i);
        for (int j = 0; j < n - i; j++) s += buf[j] * x[i + j];
    }
    return s;
}

int ggml_type_block_size(ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: case GGML_TYPE_F16: case GGML_TYPE_BF16: return 1;
    case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1: case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q8_0: case GGML_TYPE_IQ4_NL: return 32;
    case GGML_TYPE_Q2_K: case GGML_TYPE_Q3_K: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K: case GGML_TYPE_IQ4_XS: return 256;
    default: return 0;
    }
}

size_t ggml_type_block_bytes(ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: return 4;
    case GGML_TYPE_F16: case GGML_TYPE_BF16: return 2;
    case GGML_TYPE_Q4_0: return sizeof(block_q4_0);
    case GGML_TYPE_Q4_1: return sizeof(block_q4_1);
    case GGML_TYPE_Q5_0: return sizeof(block_q5_0);
    case GGML_TYPE_Q5_1: return sizeof(block_q5_1);
    case GGML_TYPE_Q8_0: return sizeof(block_q8_0);
    case GGML_TYPE_Q2_K: return sizeof(block_q2_k);
    case GGML_TYPE_Q3_K: return sizeof(block_q3_k);
    case GGML_TYPE_Q4_K: return sizeof(block_q4_k);
    case GGML_TYPE_Q5_K: return sizeof(block_q5_k);
    case GGML_TYPE_Q6_K: return sizeof(block_q6_k);
    case GGML_TYPE_IQ4_NL: return sizeof(block_iq4_nl);
    case GGML_TYPE_IQ4_XS: return sizeof(block_iq4_xs);
    default: return 0;
    }
}

const char *ggml_type_name(ggml_type t) {
    switch (t) {
    case GGML_TYPE_F32: return "F32";
    case GGML_TYPE_F16: return "F16";
    case GGML_TYPE_BF16: return "BF16";
    case GGML_TYPE_Q4_0: return "Q4_0";
    case GGML_TYPE_Q8_0: return "Q8_0";
    case GGML_TYPE_Q4_K: return "Q4_K";
    case GGML_TYPE_Q6_K: return "Q6_K";
    case GGML_TYPE_Q4_1: return "Q4_1";
    case GGML_TYPE_Q5_0: return "Q5_0";
    case GGML_TYPE_Q5_1: return "Q5_1";
    case GGML_TYPE_Q2_K: return "Q2_K";
    case GGML_TYPE_Q3_K: return "Q3_K";
    case GGML_TYPE_Q5_K: return "Q5_K";
    case GGML_TYPE_IQ4_NL: return "IQ4_NL";
    case GGML_TYPE_IQ4_XS: return "IQ4_XS";
    default: return "unknown";
    }
}

size_t ggml_row_bytes(ggml_type t, uint64_t n) {
    int bs = ggml_type_block_size(t);
    if (!bs || n % (uint64_t)bs) return 0;
    return (size_t)(n / (uint64_t)bs) * ggml_type_block_bytes(t);
}
