/* fuzz.c (chat) - libFuzzer harness for the chat-template renderer
 * (engine/chat.c) and the template-family detector: the input is split at
 * NUL bytes into a template text, a system prompt and messages. As the
 * renderer's contract asks (the engine folds system turns and merges
 * consecutive ones), roles alternate from a user turn; the first byte picks
 * whether a final assistant turn is left open (prefill) and may force a
 * family. The last turn's text, trimmed, must appear in the output. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    /* fields at NUL bytes: template, system, then up to 16 messages */
    const char *field[18];
    int n = 0;
    for (char *p = buf; n < 18 && p <= buf + size - 1;) {
        field[n++] = p;
        p += strlen(p) + 1;
    }
    chat_family fam = chat_family_detect(field[0]);
    if (data[0] & 0x80) fam = (chat_family)(data[0] % CHAT_FAMILY_COUNT);
    chat_message msgs[16];
    int n_msgs = 0;
    for (int i = 2; i < n; i++) {
        msgs[n_msgs].role = n_msgs % 2 ? CHAT_ROLE_ASSISTANT : CHAT_ROLE_USER;
        msgs[n_msgs].text = field[i];
        n_msgs++;
    }
    if (n_msgs && !(data[0] & 1) && msgs[n_msgs - 1].role == CHAT_ROLE_ASSISTANT) n_msgs--; /* no prefill */
    char *out = chat_render(fam, "<s>", "</s>", n > 1 ? field[1] : NULL, msgs, n_msgs);
    if (out && n_msgs) {
        const char *t = msgs[n_msgs - 1].text;
        size_t len = strlen(t);
        while (len && isspace((unsigned char)t[len - 1])) len--;
        while (len && isspace((unsigned char)*t)) t++, len--;
        if (len && !memmem(out, strlen(out), t, len)) __builtin_trap();
    }
    free(out);
    free(buf);
    return 0;
}
