/* fuzz.c (messages) - libFuzzer harness for the /v1/messages and count_tokens
 * body parser and validator (server/messages.c, msg_parse): any bytes must
 * give either a request that keeps every promise the server relies on, or a
 * 400 error with a message, never a crash or a leak (tool_use, tool_result
 * and thinking blocks, tools and tool_choice included). The first byte picks
 * the shape (bit 0: count_tokens) and the nesting limit (the rest), the
 * other bytes are the body, not NUL-terminated, as the server receives it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "server/messages.h"

/* Checks the promises of a parsed request; traps on a broken one. */
static void check_request(const msg_request *req, int count_only) {
    if (!req->model) __builtin_trap();
    if (count_only ? req->max_tokens != 0 : req->max_tokens < 1) __builtin_trap();
    if (req->n_msgs < 1 || !req->msgs) __builtin_trap();
    for (int i = 0; i < req->n_msgs; i++) {
        const engine_message *m = &req->msgs[i];
        if (m->role != ENGINE_ROLE_USER && m->role != ENGINE_ROLE_ASSISTANT) __builtin_trap();
        if (m->n_parts < 0 || (m->n_parts == 0 && !m->text)) __builtin_trap(); /* a text, or some parts */
        if (m->text) (void)strlen(m->text); /* NUL-terminated inside its allocation (ASan) */
        for (int k = 0; k < m->n_parts; k++) {
            const engine_part *p = &m->parts[k];
            if (p->type == CHAT_PART_TOOL_CALL) { /* only in assistant turns, with id, name and an object */
                if (m->role != ENGINE_ROLE_ASSISTANT || !p->id[0] || !p->name[0] || p->input_json[0] != '{') __builtin_trap();
            } else if (p->type == CHAT_PART_TOOL_RESULT) {
                if (m->role != ENGINE_ROLE_USER || !p->id[0]) __builtin_trap();
                (void)strlen(p->text);
            } else if (p->type == CHAT_PART_TEXT) {
                (void)strlen(p->text);
            } else {
                __builtin_trap();
            }
        }
    }
    const engine_tools *t = &req->tools;
    if (t->n_tools < 0 || (t->n_tools && !t->tools)) __builtin_trap();
    for (int i = 0; i < t->n_tools; i++)
        if (!t->tools[i].name[0] || t->tools[i].schema_json[0] != '{' ||
            (t->tools[i].description && strlen(t->tools[i].description) == (size_t)-1))
            __builtin_trap();
    if (t->choice == CHAT_TOOL_CHOICE_TOOL && !t->choice_name) __builtin_trap(); /* names one of the tools */
    if (req->system) (void)strlen(req->system);
    if (!(req->temperature >= 0 && req->temperature <= 1) || !(req->top_p > 0 && req->top_p <= 1) || req->top_k < 0)
        __builtin_trap();
    if (req->n_stop < 0 || req->n_stop > MSG_MAX_STOP) __builtin_trap();
    for (int i = 0; i < req->n_stop; i++)
        if (!req->stop[i] || !req->stop[i][0]) __builtin_trap(); /* the engine matches non-empty stops only */
    if (req->stream != 0 && req->stream != 1) __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int count_only = data[0] & 1;
    int max_depth = 1 + (data[0] >> 1) % 64; /* the server's json_depth (1..1000, default 64) */
    msg_request req;
    msg_error err;
    memset(&err, 0, sizeof err);
    if (msg_parse((const char *)data + 1, size - 1, count_only, max_depth, &req, &err) == 0) {
        check_request(&req, count_only);
        msg_request_free(&req);
    } else {
        if (err.status != 400 || !err.type || !err.message[0]) __builtin_trap();
        if (req.model || req.msgs || req.system || req.n_stop) __builtin_trap(); /* freed on failure */
    }
    return 0;
}
