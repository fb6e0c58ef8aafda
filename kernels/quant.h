/* quant.h - the tensor types every backend reads: the ggml type numbers (as
 * GGUF stores them), their block layouts and sizes, half-float conversions,
 * and the scalar reference of each format.
 *
 * Each format has a row dequantiser (exactly as the format defines) and a
 * dot product of one weight row with a float vector. Rows are n elements;
 * for block formats n is a multiple of the block size (checked at load).
 * The engine's GGUF reader uses the type table; the CPU kernels and the CUDA
 * self-test use the reference as their ground truth.
 */
#ifndef ILPD_QUANT_H
#define ILPD_QUANT_H

#include <assert.h> /* static_assert, in C11 and C++ */
#include <stddef.h>
#include <stdint.h>

/* ggml tensor types (values as stored in GGUF). */
typedef enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_BF16 = 30,
} ggml_type;

/* Block layouts (ggml's, byte for byte). */
typedef struct {
    uint16_t d;
    int8_t qs[32];
} block_q8_0;

typedef struct {
    uint16_t d;
    uint8_t qs[16];
} block_q4_0;

typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[128];
} block_q4_k;

typedef struct {
    uint8_t ql[128];
    uint8_t qh[64];
    int8_t scales[16];
    uint16_t d;
} block_q6_k;

/* Q4_1: 32 values, y = d * q + m, q in [0, 15]: element j < 16 is the low
 * nibble of qs[j], element 16 + j its high nibble. */
typedef struct {
    uint16_t d, m;
    uint8_t qs[16];
} block_q4_1;

/* Q5_0 / Q5_1: as Q4_0 / Q4_1 with a fifth bit: bit j of qh (little-endian
 * 32 bits) is the high bit of element j. Q5_0: y = d * (q - 16). */
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_0;

typedef struct {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
} block_q5_1;

/* Q2_K: 256 values in 16 groups of 16; scales[g] holds group g's 4-bit scale
 * (low nibble) and 4-bit min (high nibble); y = d * sc * q - dmin * m. */
typedef struct {
    uint8_t scales[16];
    uint8_t qs[64];
    uint16_t d, dmin;
} block_q2_k;

/* Q3_K: 256 values in 16 groups of 16 with signed 6-bit scales (packed in
 * 12 bytes); 2 low bits in qs, the third bit in hmask (set: no offset;
 * clear: minus 4); y = d * (sc - 32) * q. */
typedef struct {
    uint8_t hmask[32];
    uint8_t qs[64];
    uint8_t scales[12];
    uint16_t d;
} block_q3_k;

/* Q5_K: Q4_K's scales and mins with a fifth bit per value in qh. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[32];
    uint8_t qs[128];
} block_q5_k;

/* IQ4_NL: 32 values, y = d * kvalues[q] (the non-linear table below). */
typedef struct {
    uint16_t d;
    uint8_t qs[16];
} block_iq4_nl;

/* IQ4_XS: 256 values in 8 groups of 32, each with a signed 6-bit scale
 * (low 4 bits in scales_l, high 2 in scales_h); y = d * (sc - 32) * kvalues[q]. */
typedef struct {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[4];
    uint8_t qs[128];
} block_iq4_xs;

/* The 16 values of a 4-bit index of IQ4_NL and IQ4_XS (the format's constant). */
extern const int8_t quant_iq4_values[16];

static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
static_assert(sizeof(block_q4_1) == 20, "q4_1 layout");
static_assert(sizeof(block_q5_0) == 22, "q5_0 layout");
static_assert(sizeof(block_q5_1) == 24, "q5_1 layout");
static_assert(sizeof(block_q2_k) == 84, "q2_k layout");
static_assert(sizeof(block_q3_k) == 110, "q3_k layout");
static_assert(sizeof(block_q5_k) == 176, "q5_k layout");
static_assert(sizeof(block_iq4_nl) == 18, "iq4_nl layout");
static_assert(sizeof(block_iq4_xs) == 136, "iq4_xs layout");
static_assert(offsetof(block_q5_1, qs) == 8 && offsetof(block_q2_k, d) == 80 && offsetof(block_q3_k, d) == 108 &&
                  offsetof(block_q5_k, qs) == 48 && offsetof(block_iq4_xs, qs) == 8,
              "field offsets");
static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
static_assert(sizeof(block_q4_k) == 144, "q4_k layout");
static_assert(sizeof(block_q6_k) == 210, "q6_k layout");

/* Type information: block size in elements and bytes per block; 0 if unknown. */
int ggml_type_block_size(ggml_type t);
size_t ggml_type_block_bytes(ggml_type t);
const char *ggml_type_name(ggml_type t);
/* Bytes of a row of n elements, or 0 when n is not a multiple of the block. */
size_t ggml_row_bytes(ggml_type t, uint64_t n);

float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);

/* Writes the n values of ROW (of type T) as floats into OUT. */
void quant_dequantize_row(ggml_type t, const void *row, float *out, int n);
/* Returns the dot product of ROW (n values of type T) with X. */
float quant_dot_row(ggml_type t, const void *row, const float *x, int n);
/* The 6-bit scale and min of sub-block J of the 12 packed scale bytes Q of a
 * Q4_K or Q5_K super-block. */
void q4k_scale_min(const uint8_t *q, int j, uint8_t *sc, uint8_t *m);

#endif
