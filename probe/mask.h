/* mask.h - the wire form of layer masks (README, "The server").
 *
 * On the wire a mask is 32 bytes, byte i for layer i (1 = computed), sent as
 * standard base64 (RFC 4648, 44 characters with padding; 43 without padding
 * is accepted too). For a model with n > 32 layers byte i covers layers
 * [i*g, (i+1)*g), g = ceil(n/32). Bytes past the last layer (or group) are
 * 0 in what we send and ignored in what we receive.
 */
#ifndef ILPD_MASK_H
#define ILPD_MASK_H

#include <stddef.h>
#include <stdint.h>

/* The most layers a model may have: masks hold one byte per layer. The one
 * definition of that limit (the model loader, the engine, the probe file and
 * the server use it). */
#define MASK_MAX_LAYERS 256
#define MASK_WIRE_BYTES 32
#define MASK_B64_LEN 44

/* Decodes LEN characters of base64 into WIRE. Returns 0, or -1 when the
 * text is not base64 of exactly 32 bytes or a byte in use is not 0/1. */
int mask_decode_b64(const char *text, size_t len, uint8_t *wire);
/* Validates only the bytes that cover N_LAYERS layers (0/1), as received. */
int mask_decode_b64_for(const char *text, size_t len, int n_layers, uint8_t *wire);
/* Encodes WIRE as 44 characters plus a NUL into OUT (45 bytes). */
void mask_encode_b64(const uint8_t *wire, char *out);
/* Per-layer mask (N_LAYERS bytes) -> wire bytes. A group is computed when
 * any of its layers is. */
void mask_to_wire(const uint8_t *mask, int n_layers, uint8_t *wire);
/* Wire bytes -> per-layer mask (N_LAYERS bytes). */
void mask_from_wire(const uint8_t *wire, int n_layers, uint8_t *mask);

#endif
