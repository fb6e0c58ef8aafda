/* fuzz.c (hint) - libFuzzer harness for the x-layer-hint header: base64
 * decoding into the 32-byte wire mask and reconciliation with the server's
 * mask (probe/mask.c, probe/hint.c). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "hint.h"
#include "mask.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int n_layers = 1 + data[0] % 32, k = data[1] % 4;
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    uint8_t wire[MASK_WIRE_BYTES], any[MASK_WIRE_BYTES];
    int valid = mask_decode_b64_for(text, len, n_layers, wire) == 0;
    if (mask_decode_b64(text, len, any) == 0) {
        char back[MASK_B64_LEN + 1];
        mask_encode_b64(any, back); /* what decodes must encode again */
    }
    uint8_t server[32], hint[32], final[32];
    for (int i = 0; i < n_layers; i++) server[i] = (uint8_t)(i < k || i == n_layers - 1 || (data[0] >> (i % 8)) & 1);
    if (valid) mask_from_wire(wire, n_layers, hint);
    hint_status st = hint_reconcile(server, valid ? hint : NULL, !valid, n_layers, k, 0.15f, final);
    for (int i = 0; i < n_layers; i++) {
        if (final[i] > 1) __builtin_trap();
        if (server[i] && i < k && !final[i]) __builtin_trap(); /* the first K layers always run */
    }
    if (!valid && st != HINT_INVALID) __builtin_trap();
    return 0;
}
