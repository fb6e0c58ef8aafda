/* quant.h - weight formats on the CPU: half floats and ggml block formats.
 *
 * Each format has a row dequantiser (exactly as the format defines) and a
 * dot product of one weight row with a float vector. Rows are n elements;
 * for block formats n is a multiple of the block size (checked at load).
 */
#ifndef ILPD_QUANT_H
#define ILPD_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);

/* Writes the n values of ROW (of type T) as floats into OUT. */
void quant_dequantize_row(ggml_type t, const void *row, float *out, int n);
/* Returns the dot product of ROW (n values of type T) with X. */
float quant_dot_row(ggml_type t, const void *row, const float *x, int n);

#endif
