/* fuzz.c (messages) - libFuzzer harness for the /v1/messages and count_tokens
 * body parser and validator (server/messages.c): any bytes must give either
 * a request or a 400 error, never a crash or a leak. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "messages.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int count_only = data[0] & 1; /* the first byte picks the shape */
    msg_request req;
    msg_error err;
    memset(&req, 0, sizeof req);
    if (msg_parse((const char *)data + 1, size - 1, count_only, 64, &req, &err) == 0) {
        if (!count_only && req.max_tokens < 1) __builtin_trap(); /* the validator's own promise */
        msg_request_free(&req);
    } else if (err.status != 400 || !err.type || !err.message[0]) {
        __builtin_trap();
    }
    return 0;
}
