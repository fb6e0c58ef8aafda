/* cpu_internal.h - what the CPU backend's files share: the kernel table
 * chosen at run time (scalar, AVX2+FMA+F16C, AVX-512 with VNNI), the
 * quantized activation format, and the repacked weight layouts.
 *
 * Quantized matmuls never dequantize weights to float:
 * the activation is quantized once per matmul into blocks of 32 int8 with a
 * float scale (act_q8, finer than llama.cpp's per-256 Q8_K for the K-quants)
 * and the kernels use integer dot products (AVX-512 VNNI vpdpbusd, AVX2
 * maddubs), applying the weight and activation scales per block in float.
 *
 * Every block type has a kernel on its file layout (mm_row; kern_rows.h
 * for AVX2 and AVX-512: per-type decoders to int8 and one shared tile).
 *
 * Repacked layout ("x16"): the CPU backend rewrites Q8_0, Q4_0 and Q4_K
 * weights IN PLACE at weight_upload (same bytes, same size; only for the
 * types whose kernel table has an x16 kernel: AVX2 keeps Q4_K in the file
 * layout) so that 16
 * consecutive rows are interleaved 4 bytes at a time: one 64-byte load then
 * holds 4 quants of each of 16 rows, and one vpdpbusd with a broadcast
 * activation dword advances 16 dot products. Groups of 16 rows keep their
 * place in memory (a group spans exactly the bytes of its 16 rows); rows
 * past the last whole group keep the file layout. Per block b of a group
 * (the group's bytes are nb such blocks in a row, nb = blocks per row):
 *
 *   Q4_0 (16 x 18 bytes):  d[16] (f16) | for k 0..3: 16 rows x qs[4k..4k+3]
 *   Q8_0 (16 x 34 bytes):  d[16] (f16) | for k 0..7: 16 rows x (qs[4k..4k+3] ^ 0x80)
 *   Q4_K (16 x 144 bytes): d[16] | dmin[16] | lo[8][16] | hi[4][16] |
 *                          for c 0..3, k 0..7: 16 rows x qs[32c+4k..+3]
 *     lo[j][r] = (sc_j & 15) | (m_j & 15) << 4
 *     hi[p][r] = sc_2p >> 4 | (m_2p >> 4) << 2 | (sc_2p+1 >> 4) << 4 | (m_2p+1 >> 4) << 6
 *
 * Q8_0 quants are stored offset by 128 (as unsigned bytes) so that vpdpbusd
 * (unsigned x signed) applies; the activation's block sums correct it.
 */
#ifndef ILPD_CPU_INTERNAL_H
#define ILPD_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPU_QK 32         /* activation block */
/* A matmul or an attention runs on the calling thread alone when it does
 * fewer multiply-adds than CPU_SERIAL_MACS (about 0.1 ms of arithmetic,
 * what waking the pool and waiting for its slowest thread costs on a busy
 * machine) and reads fewer bytes than CPU_SERIAL_BYTES (about 10 us of one
 * thread's memory stream): small models and short batches. Decoding a
 * larger model reads far more bytes than it does arithmetic, and every
 * thread adds bandwidth. */
#define CPU_SERIAL_MACS (1 << 22)
#define CPU_SERIAL_BYTES (256 << 10)
#define RP_ROWS 16    /* rows per repacked group */

/* The x16 group block of the 32-value types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * IQ4_NL; repack.c), 16 file blocks in the same bytes: d[16] (F16) at 0;
 * Q4_1/Q5_1's m[16] at 32; Q5_0/Q5_1's fifth bits as 8 masks of 64 bits
 * (mask 2k: the low nibbles of chunk k, 2k+1: its high nibbles; bit 4r+i is
 * row r's byte i of the chunk); then 4 chunks (Q8_0: 8) of 16 rows x 4
 * bytes: row r's file bytes 4k..4k+3 at 64k + 4r (Q8_0 with its sign bit
 * flipped, so that the bytes read as unsigned value + 128). */
static inline int rp32_has_min(ggml_type t) { return t == GGML_TYPE_Q4_1 || t == GGML_TYPE_Q5_1; }
static inline int rp32_has_bits(ggml_type t) { return t == GGML_TYPE_Q5_0 || t == GGML_TYPE_Q5_1; }
static inline int rp32_mask_off(ggml_type t) { return rp32_has_min(t) ? 64 : 32; }
static inline int rp32_chunk_off(ggml_type t) { return rp32_mask_off(t) + (rp32_has_bits(t) ? 64 : 0); }

/* A quantized activation: n tokens of COLS values (cols % 32 == 0).
 * Token t's values are qs[t*cols ...] = round(x / d), |q| <= 127, and for
 * each block b of 32: d[t*nb+b], m8 = -8 * sum(q), m128 = -128 * sum(q),
 * ds = d * sum(q); ds16[t*cols/16 + g] = d * sum(q) over the 16 values of
 * group g (filled for the weights that need it: Q2_K, Q3_K and Q6_K).
 * Every 8 blocks (a K-quant super-block) share a unit: d = u * mul with
 * u[t*nsb + b/8] (nsb = CPU_ACT_NSB(nb)) the super-block's largest
 * magnitude / (127 * 64) and mul[t*nb+b] = ceil(the block's / (127 u)) in
 * 1..64, so that the K-quants add a whole super-block in integers, their
 * sub-block scales times mul (cpu_act_quantize). */
typedef struct {
    int8_t *qs;
    float *d;
    int32_t *m8, *m128;
    float *ds, *ds16;
    float *u;
    int16_t *mul;
    int cols, nb;
} act_q8;
#define CPU_ACT_NSB(nb) (((nb) + 7) / 8)
#define CPU_ACT_MUL 64 /* the largest multiplier */

/* Bytes of an activation of n tokens of COLS values, 64-byte aligned parts. */
size_t cpu_act_bytes(size_t n, size_t cols);
/* Points A's arrays at MEM (cpu_act_bytes(n, cols) bytes, 64-byte aligned). */
void cpu_act_place(act_q8 *a, void *mem, size_t n, int cols);

/* out[t*ldo + r] = sum_k W[r][k] * x[t*ldx + k] for r < rows, t < n, with W
 * row-major in its file type (F32, F16 or BF16), ROW_BYTES apart. Any cols.
 * TMP: CPU_MM_TMP_FLOATS(cols) floats of the calling thread's scratch (a
 * prefill kernel may keep the activation transposed there), or NULL. */
typedef void (*mm_float_fn)(const void *w, size_t row_bytes, int rows, const float *x, int ldx, int n, int cols,
                            float *out, int ldo, float *tmp);
#define CPU_MM_TMP_FLOATS(cols) (((size_t)(cols) + 64) * 64)
/* The same for NG repacked groups of 16 rows (GROUP_BYTES apart) against a
 * quantized activation of n tokens: out[t*ldo + 16*g + i]. */
typedef void (*mm_rp_fn)(const uint8_t *w, size_t group_bytes, int ng, const act_q8 *a, int n, float *out,
                         int ldo);

/* ROWS rows of a block type in the file layout (ROW_BYTES apart) against a
 * quantized activation of n tokens: out[t*ldo + r] for r < rows. */
typedef void (*mm_row_fn)(const uint8_t *w, size_t row_bytes, int rows, const act_q8 *a, int n, float *out, int ldo);
#define CPU_ROW_TYPES 24 /* ggml type numbers up to IQ4_XS (23) */

typedef struct {
    const char *name;
    mm_float_fn mm_f32, mm_f16, mm_bf16;
    /* NULL: that type is not repacked (file-layout rows) */
    mm_rp_fn mm_q8_0, mm_q4_0, mm_q2_k, mm_q3_k, mm_q4_k, mm_q5_k, mm_q6_k, mm_iq4_nl, mm_iq4_xs, mm_q5_0, mm_q4_1, mm_q5_1;
    /* Rows of a block type in the file layout (not repacked), indexed by
     * the ggml type: see mm_row_fn; NULL: the rows are dequantized instead. */
    mm_row_fn mm_row[CPU_ROW_TYPES];
    /* The activation's two passes (cpu_act_quantize): AMAX[b] = the largest
     * magnitude of the 32 values of block b < NB at X; then QS = round(X *
     * ID[b]) (to nearest even) with SUM[b] the block's sum of QS. */
    void (*act_absmax)(const float *x, int nb, float *amax);
    void (*act_round)(const float *x, int nb, const float *id, int8_t *qs, int32_t *sum);
    /* Causal attention of G query heads (Q: G rows of HD) sharing one KV
     * head: K and V point at that head's values at position 0, STRIDE
     * elements apart per position, F32 (f16 = 0) or F16; NPOS positions.
     * OUT gets G rows of HD; SCORE is scratch for G * NPOS floats. */
    void (*attn)(const float *q, int g, const void *k, const void *v, int f16, size_t stride, int npos, int hd,
                 float scale, float *score, float *out);
    /* Dot of n floats. */
    float (*dot_f32)(const float *a, const float *b, int n);
    /* Dot of n floats with n F16 values. */
    float (*dot_f16)(const float *a, const uint16_t *b, int n);
    /* y += a * x over n values; x float or F16. */
    void (*axpy_f32)(float *y, float a, const float *x, int n);
    void (*axpy_f16)(float *y, float a, const uint16_t *x, int n);
    /* Sum of x[i] ... in place: x[i] = exp(x[i] - mx); returns the sum. */
    float (*exp_sum)(float *x, int n, float mx);
    /* g = silu(g) * u */
    void (*swiglu)(float *g, const float *u, size_t n);
    /* Sum of squares (double accumulation not needed: float pairs are fine). */
    float (*sumsq)(const float *x, int n);
    /* out = x * s * w */
    void (*scale_mul)(float *out, const float *x, float s, const float *w, int n);
    void (*add)(float *x, const float *y, size_t n);
    /* F32 -> F16 for n values (KV store). */
    void (*to_f16)(uint16_t *out, const float *x, size_t n);
} cpu_kern;

/* The kernel tables: scalar always; the others are NULL when the compiler
 * cannot build them. cpu_kern_best() picks the best the CPU supports
 * (ILPD_CPU_ISA=scalar|avx2|avxvnni|avx512 in the environment caps it). */
extern const cpu_kern cpu_kern_scalar;
const cpu_kern *cpu_kern_avx2(void);   /* NULL when the CPU lacks AVX2/FMA/F16C */
const cpu_kern *cpu_kern_avxvnni(void); /* the AVX2 kernels with AVX-VNNI; NULL without it */
const cpu_kern *cpu_kern_avx512(void); /* NULL when the CPU lacks AVX-512 F/BW/VL/VNNI */
const cpu_kern *cpu_kern_best(void);
/* The file-layout row kernel of type T in K, or NULL. */
mm_row_fn cpu_row_kernel(const cpu_kern *k, ggml_type t);
/* The kernel of repacked groups of type T in K, or NULL (no repacking then). */
mm_rp_fn cpu_rp_kernel(const cpu_kern *k, ggml_type t);
/* Quantizes the row X (A's cols values) into token T of A with K's passes:
 * every array, ds16 too when SUMS16. */
void cpu_act_quantize(const cpu_kern *k, const float *x, const act_q8 *a, int t, int sums16);

/* Repacking (repack.c). */
int repack_supported(ggml_type t);
int rp32_type(ggml_type t); /* 1 for the types of the rp32 layout */
/* Repacks the whole groups of ROWS rows of COLS in place; 0 or -1 (out of memory). */
int repack_weight(ggml_type t, void *data, int rows, int cols);
/* Dequantizes row R of a repacked weight (rows in whole groups repacked, the rest not). */
void repack_dequant_row(ggml_type t, const void *data, int rows, int cols, int r, float *out);
/* Bytes of one group of 16 rows. */
size_t repack_group_bytes(ggml_type t, int cols);


#ifdef __cplusplus
}
#endif

#endif
