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
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q6_K = 14,
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

static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
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

#endif
