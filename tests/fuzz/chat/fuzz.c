/* fuzz.c (chat) - libFuzzer harness for the chat-template renderer
 * (engine/chat.c) and the template-family detector. Byte 0: bit 7 forces the
 * family (byte 0 % the family count) instead of detecting it; bits 0-1 pick the BOS/EOS
 * texts (none, "<s>"/"</s>", "<|begin_of_text|>"/"<|eot_id|>"). The rest is
 * split at NUL bytes into a template text, a system prompt and up to 16
 * messages, each message's first byte giving its role (% 3: system, user,
 * assistant), as the engine would pass them or not (the renderer must take
 * any order). Bit 6 adds a tool (its schema the template text) and makes
 * role bytes % 5 == 3 / 4 an assistant tool call / a user tool result.
 * Bit 4 renders with thinking on.
 * Checks: a string always comes back, and it holds the last user or
 * assistant message's text (trimmed, as the templates trim). */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/chat.h"

#define MAX_MSGS 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const bos_texts[] = {NULL, "<s>", "<|begin_of_text|>", ""};
    static const char *const eos_texts[] = {NULL, "</s>", "<|eot_id|>", ""};
    if (size < 2) return 0;
    char *buf = malloc(size);
    if (!buf) return 0;
    memcpy(buf, data + 1, size - 1);
    buf[size - 1] = 0;
    /* fields at NUL bytes: template, system, then the messages */
    const char *field[MAX_MSGS + 2];
    int n = 0;
    for (char *p = buf; n < MAX_MSGS + 2 && p <= buf + size - 1;) {
        field[n++] = p;
        p += strlen(p) + 1;
    }
    chat_family fam = chat_family_detect(field[0]);
    if (data[0] & 0x80) fam = (chat_family)(data[0] % CHAT_FAMILY_COUNT);
    if (chat_family_parse(chat_family_name(fam)) != (int)fam) __builtin_trap();
    chat_message msgs[MAX_MSGS];
    chat_part parts[MAX_MSGS];
    int n_msgs = 0, tools_on = data[0] & 0x40;
    for (int i = 2; i < n; i++) {
        static const chat_role roles[3] = {CHAT_ROLE_SYSTEM, CHAT_ROLE_USER, CHAT_ROLE_ASSISTANT};
        const char *f = field[i], *text = f[0] ? f + 1 : f;
        int kind = (unsigned char)f[0] % (tools_on ? 5 : 3);
        msgs[n_msgs] = (chat_message){.role = roles[kind % 3], .text = text};
        if (kind >= 3) { /* 3: an assistant tool call whose name and input are TEXT; 4: a user's tool result */
            parts[n_msgs] = kind == 3 ? (chat_part){.type = CHAT_PART_TOOL_CALL, .id = "c", .name = text, .input_json = text}
                                      : (chat_part){.type = CHAT_PART_TOOL_RESULT, .id = "c", .text = text,
                                                    .is_error = (unsigned char)f[0] & 1};
            msgs[n_msgs] = (chat_message){.role = kind == 3 ? CHAT_ROLE_ASSISTANT : CHAT_ROLE_USER,
                                          .parts = &parts[n_msgs], .n_parts = 1};
        }
        n_msgs++;
    }
    const char *system = n > 1 ? field[1] : NULL;
    /* Bit 6: one tool, its schema the template text (any bytes reach the JSON re-spacing), tool_choice from bits 2-3. */
    chat_tool tool = {.name = "f", .description = system, .schema_json = field[0]};
    chat_toolset ts = {.tools = &tool, .n_tools = 1, .choice = (chat_tool_choice)((data[0] >> 2) & 3),
                       .choice_name = "f", .single_call = data[0] & 0x20};
    char *out = chat_render(fam, bos_texts[data[0] & 3], eos_texts[data[0] & 3], system, tools_on ? &ts : NULL, msgs,
                            n_msgs, (data[0] >> 4) & 1);
    if (!out) __builtin_trap(); /* only out of memory gives NULL */
    /* The last message's text is in the prompt (a call's input is re-spaced: not checked). */
    if (n_msgs && msgs[n_msgs - 1].role != CHAT_ROLE_SYSTEM &&
        !(msgs[n_msgs - 1].n_parts && msgs[n_msgs - 1].parts[0].type == CHAT_PART_TOOL_CALL)) {
        const char *t = msgs[n_msgs - 1].n_parts ? msgs[n_msgs - 1].parts[0].text : msgs[n_msgs - 1].text;
        size_t len = strlen(t);
        while (len && isspace((unsigned char)t[len - 1])) len--;
        while (len && isspace((unsigned char)*t)) t++, len--;
        if (len && !memmem(out, strlen(out), t, len)) __builtin_trap();
    }
    free(out);
    free(buf);
    return 0;
}
