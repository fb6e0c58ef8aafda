/* mask.c - layer masks on the wire: base64 (libb64) and layer groups. */
#include "probe/mask.h"

#include <b64/cdecode.h>
#include <b64/cencode.h>
#include <string.h>

/* Layers per wire byte. */
static int group_size(int n_layers) { return n_layers > MASK_WIRE_BYTES ? (n_layers + MASK_WIRE_BYTES - 1) / MASK_WIRE_BYTES : 1; }

static int decode(const char *text, size_t len, uint8_t *wire) {
    /* libb64 skips characters outside the alphabet, so check them first. */
    size_t body = len;
    while (body > 0 && text[body - 1] == '=') body--;
    if (len - body > 2 || body != 43 || (len != 43 && len != 44)) return -1;
    for (size_t i = 0; i < body; i++) {
        char c = text[i];
        if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/')) return -1;
    }
    char buf[48];
    base64_decodestate st;
    base64_init_decodestate(&st);
    int n = base64_decode_block(text, (int)body, buf, &st);
    if (n != MASK_WIRE_BYTES) return -1;
    memcpy(wire, buf, MASK_WIRE_BYTES);
    return 0;
}

int mask_decode_b64(const char *text, size_t len, uint8_t *wire) {
    if (decode(text, len, wire)) return -1;
    for (int i = 0; i < MASK_WIRE_BYTES; i++)
        if (wire[i] > 1) return -1;
    return 0;
}

int mask_decode_b64_for(const char *text, size_t len, int n_layers, uint8_t *wire) {
    if (decode(text, len, wire)) return -1;
    int g = group_size(n_layers), used = (n_layers + g - 1) / g;
    for (int i = 0; i < used; i++)
        if (wire[i] > 1) return -1;
    return 0;
}

void mask_encode_b64(const uint8_t *wire, char *out) {
    char buf[64];
    base64_encodestate st;
    base64_init_encodestate(&st);
    int n = base64_encode_block((const char *)wire, MASK_WIRE_BYTES, buf, &st);
    n += base64_encode_blockend(buf + n, &st);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) n--; /* libb64 ends with a newline */
    memcpy(out, buf, (size_t)n);
    out[n] = 0;
}

void mask_to_wire(const uint8_t *mask, int n_layers, uint8_t *wire) {
    int g = group_size(n_layers);
    memset(wire, 0, MASK_WIRE_BYTES);
    for (int l = 0; l < n_layers; l++)
        if (mask[l]) wire[l / g] = 1;
}

void mask_from_wire(const uint8_t *wire, int n_layers, uint8_t *mask) {
    int g = group_size(n_layers);
    for (int l = 0; l < n_layers; l++) mask[l] = wire[l / g] != 0;
}
