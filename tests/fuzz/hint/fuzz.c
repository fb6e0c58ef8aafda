/* fuzz.c (hint) - libFuzzer harness for the x-layer-hint header: base64
 * decoding into the 32-byte wire mask, layer groups (models of more than 32
 * layers) and reconciliation with the server's mask (probe/mask.c,
 * probe/hint.c). Input: byte 0 picks the layer count (1..256, the engine's
 * limit), byte 1 the always-run prefix K and max_deviation, byte 2 the
 * server's mask pattern; the rest is the header value, not NUL-terminated. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "probe/hint.h"
#include "probe/mask.h"


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    int n_layers = 1 + data[0], k = data[1] % 4;
    float max_dev = (float)(data[1] >> 2) / 63.0f;
    const char *text = (const char *)data + 3;
    size_t len = size - 3;
    uint8_t wire[MASK_WIRE_BYTES], any[MASK_WIRE_BYTES];
    int valid = mask_decode_b64_for(text, len, n_layers, wire) == 0;
    if (mask_decode_b64(text, len, any) == 0) {
        /* what decodes encodes to the same 32 bytes again */
        char back[MASK_B64_LEN + 1];
        uint8_t again[MASK_WIRE_BYTES];
        mask_encode_b64(any, back);
        if (strlen(back) != MASK_B64_LEN || mask_decode_b64(back, MASK_B64_LEN, again) || memcmp(any, again, sizeof again))
            __builtin_trap();
        if (!valid) __builtin_trap(); /* all 32 bytes 0/1 implies the used ones are */
    }
    uint8_t server[MASK_MAX_LAYERS], hint[MASK_MAX_LAYERS], final[MASK_MAX_LAYERS], rewire[MASK_WIRE_BYTES];
    for (int i = 0; i < n_layers; i++) server[i] = (uint8_t)(i < k || i == n_layers - 1 || (data[2] >> (i % 8)) & 1);
    if (valid) {
        mask_from_wire(wire, n_layers, hint);
        /* per-layer -> wire -> per-layer is the identity on what the wire says */
        uint8_t hint2[MASK_MAX_LAYERS];
        mask_to_wire(hint, n_layers, rewire);
        mask_from_wire(rewire, n_layers, hint2);
        if (memcmp(hint, hint2, (size_t)n_layers)) __builtin_trap();
    }
    hint_status st = hint_reconcile(server, valid ? hint : NULL, !valid, n_layers, k, max_dev, final);
    for (int i = 0; i < n_layers; i++) {
        if (final[i] > 1) __builtin_trap();
        if (server[i] && i < k && !final[i]) __builtin_trap(); /* the first K layers always run */
        if (server[i] && i == n_layers - 1 && !final[i]) __builtin_trap(); /* and the last */
    }
    if (!valid && st != HINT_INVALID) __builtin_trap();
    if (valid && st != HINT_APPLIED && st != HINT_OVERRIDDEN) __builtin_trap();
    if (st == HINT_OVERRIDDEN && memcmp(final, server, (size_t)n_layers)) __builtin_trap(); /* the server's stands */
    return 0;
}
