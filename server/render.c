/* render.c - the Messages API's response shapes, built with cJSON. Every
 * member is checked: a failed allocation makes the whole result NULL, never
 * an object with a member missing. Key order is the wire order. */
#include "server/render.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char render_oom_error_body[] = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"out of memory\"}}";

/* Adds ITEM to OBJ under KEY; takes ITEM (deleted when it cannot be added).
 * Returns 1, or 0 when OBJ or ITEM is NULL or out of memory. */
static int put(cJSON *obj, const char *key, cJSON *item) {
    if (!obj || !item || !cJSON_AddItemToObject(obj, key, item)) {
        cJSON_Delete(item);
        return 0;
    }
    return 1;
}

/* A JSON string of S, or null when S is NULL; NULL when out of memory. */
static cJSON *string_or_null(const char *s) { return s ? cJSON_CreateString(s) : cJSON_CreateNull(); }

/* OBJ when OK, else NULL (OBJ deleted). */
static cJSON *checked(cJSON *obj, int ok) {
    if (ok) return obj;
    cJSON_Delete(obj);
    return NULL;
}

/* {"type": TYPE}, the start of most shapes; NULL when out of memory. */
static cJSON *typed(const char *type) {
    cJSON *o = cJSON_CreateObject();
    return checked(o, put(o, "type", cJSON_CreateString(type)));
}

/* {"type": TYPE, "index": INDEX}; NULL when out of memory. */
static cJSON *typed_index(const char *type, int index) {
    cJSON *o = typed(type);
    return checked(o, put(o, "index", cJSON_CreateNumber(index)));
}

/* OBJ as compact JSON (OBJ deleted); the caller frees it. NULL when OBJ is
 * NULL or out of memory. */
static char *print(cJSON *obj) {
    char *js = obj ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    return js;
}

/* One SSE event: "event: NAME\ndata: JSON\n\n" (DATA deleted); the caller
 * frees it. NULL when DATA is NULL or out of memory. */
static char *sse(const char *name, cJSON *data) {
    char *js = print(data);
    if (!js) return NULL;
    size_t n = strlen(name) + strlen(js) + sizeof "event: \ndata: \n\n";
    char *ev = malloc(n);
    if (ev) snprintf(ev, n, "event: %s\ndata: %s\n\n", name, js);
    free(js);
    return ev;
}

/* The usage object: with M, input_tokens and the prompt cache's counts,
 * then output_tokens. */
static cJSON *usage(const render_message_info *m, int output) {
    cJSON *u = cJSON_CreateObject();
    int ok = u && (!m || (put(u, "input_tokens", cJSON_CreateNumber(m->input_tokens)) &&
                          put(u, "cache_creation_input_tokens", cJSON_CreateNumber(m->cache_creation)) &&
                          put(u, "cache_read_input_tokens", cJSON_CreateNumber(m->cache_read))));
    return checked(u, ok && put(u, "output_tokens", cJSON_CreateNumber(output)));
}

/* {"type": TYPE, KEY: VALUE}: a text block, a delta. */
static cJSON *typed_str(const char *type, const char *key, const char *value) {
    cJSON *o = typed(type);
    return checked(o, put(o, key, cJSON_CreateString(value)));
}

static cJSON *typed_text(const char *type, const char *text) { return typed_str(type, "text", text); }

#define THINKING_SIGNATURE "" /* render.h: nothing is signed */

/* {"type": "thinking", "thinking": TEXT, "signature": ""}. */
static cJSON *thinking_block(const char *text) {
    cJSON *o = typed_str("thinking", "thinking", text);
    return checked(o, put(o, "signature", cJSON_CreateString(THINKING_SIGNATURE)));
}

/* [ITEM]; takes ITEM. NULL when ITEM is NULL or out of memory. */
static cJSON *array_of(cJSON *item) {
    cJSON *a = item ? cJSON_CreateArray() : NULL;
    if (a && cJSON_AddItemToArray(a, item)) return a;
    cJSON_Delete(a);
    cJSON_Delete(item);
    return NULL;
}

/* JSON syntax, checked without allocating (so that running out of memory
 * is never mistaken for a malformed input): each returns the position after
 * the value at S, or NULL. */
static const char *json_skip_value(const char *s, int depth);

static const char *json_skip_space(const char *s) {
    while (*s == ' ' || *s == '\n' || *s == '\t' || *s == '\r') s++;
    return s;
}

static const char *json_skip_string(const char *s) {
    for (s++; *s && *s != '"'; s++) {
        if ((unsigned char)*s < 0x20) return NULL;
        if (*s != '\\') continue;
        if (*++s == 'u') {
            for (int i = 0; i < 4; i++)
                if (!isxdigit((unsigned char)*++s)) return NULL;
        } else if (!*s || !strchr("\"\\/bfnrt", *s)) {
            return NULL;
        }
    }
    return *s ? s + 1 : NULL;
}

static const char *json_skip_digits(const char *s) {
    const char *start = s;
    while (*s >= '0' && *s <= '9') s++;
    return s > start ? s : NULL;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static const char *json_skip_number(const char *s) {
    if (*s == '-') s++;
    if (*s == '0') s++;
    else if (!(s = json_skip_digits(s))) return NULL;
    if (*s == '.' && !(s = json_skip_digits(s + 1))) return NULL;
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '+' || *s == '-') s++;
        s = json_skip_digits(s);
    }
    return s;
}

/* An array or object at S (its opening bracket), members separated by commas. */
static const char *json_skip_members(const char *s, int depth, int object) {
    char close = object ? '}' : ']';
    s = json_skip_space(s + 1);
    if (*s == close) return s + 1;
    for (;;) {
        if (object) {
            s = *s == '"' ? json_skip_string(s) : NULL;
            if (!s || *(s = json_skip_space(s)) != ':') return NULL;
            s = json_skip_space(s + 1);
        }
        if (!(s = json_skip_value(s, depth + 1))) return NULL;
        s = json_skip_space(s);
        if (*s == close) return s + 1;
        if (*s != ',') return NULL;
        s = json_skip_space(s + 1);
    }
}

static const char *json_skip_value(const char *s, int depth) {
    if (depth > 512) return NULL;
    if (*s == '{' || *s == '[') return json_skip_members(s, depth, *s == '{');
    if (*s == '"') return json_skip_string(s);
    for (const char *lit = "true\0false\0null\0"; *lit; lit += strlen(lit) + 1)
        if (!strncmp(s, lit, strlen(lit))) return s + strlen(lit);
    return json_skip_number(s);
}

/* A tool call's input: the object INPUT holds, as the model wrote it (so
 * that numbers keep their digits: cJSON would print a 16-digit integer as
 * 3.02e+15), or {} when INPUT is NULL, cut off or not an object. NULL when
 * out of memory. */
static cJSON *tool_input(const char *input) {
    const char *s = input ? json_skip_space(input) : NULL;
    const char *end = s && *s == '{' ? json_skip_value(s, 0) : NULL;
    if (!end || *json_skip_space(end)) return cJSON_CreateObject();
    char *raw = malloc((size_t)(end - s) + 1), *w = raw;
    if (!raw) return NULL;
    for (int in_string = 0; s < end; s++) {  /* the text less the space between tokens */
        if (in_string || !strchr(" \n\t\r", *s)) *w++ = *s;
        if (*s == '"') in_string = !in_string;
        else if (*s == '\\' && in_string) *w++ = *++s;
    }
    *w = '\0';
    cJSON *o = cJSON_CreateRaw(raw);
    free(raw);
    return o;
}

/* {"type": "tool_use", "id": ID, "name": NAME, "input": INPUT}. */
static cJSON *tool_use(const char *id, const char *name, cJSON *input) {
    cJSON *o = typed("tool_use");
    if (put(o, "id", cJSON_CreateString(id)) && put(o, "name", cJSON_CreateString(name)))
        return checked(o, put(o, "input", input));
    cJSON_Delete(input);
    return checked(o, 0);
}

static cJSON *block_object(const render_block *b) {
    if (b->type == RENDER_BLOCK_TOOL_USE) return tool_use(b->id, b->name, tool_input(b->text));
    if (b->type == RENDER_BLOCK_THINKING) return thinking_block(b->text ? b->text : "");
    return typed_text("text", b->text ? b->text : "");
}

/* The content array of the N BLOCKS (N < 0: empty, for message_start; 0:
 * one empty text block). */
static cJSON *content(const render_block *blocks, int n) {
    static const render_block empty = {RENDER_BLOCK_TEXT, "", NULL, NULL};
    if (n == 0) return content(&empty, 1);
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++) {
        cJSON *b = block_object(&blocks[i]);
        if (!b || !cJSON_AddItemToArray(a, b)) {
            cJSON_Delete(b);
            cJSON_Delete(a);
            return NULL;
        }
    }
    return a;
}

/* The message object: N < 0 and STOP NULL for message_start (no content
 * yet, null stop_reason, output_tokens 0). */
static cJSON *message_object(const render_message_info *m, const render_block *blocks, int n,
                             const render_stop *stop) {
    cJSON *o = typed("message");
    int ok = put(o, "id", cJSON_CreateString(m->id)) && put(o, "role", cJSON_CreateString("assistant")) &&
             put(o, "model", cJSON_CreateString(m->model)) && put(o, "content", content(blocks, n)) &&
             put(o, "stop_reason", string_or_null(stop ? stop->reason : NULL)) &&
             put(o, "stop_sequence", string_or_null(stop ? stop->sequence : NULL)) &&
             put(o, "usage", usage(m, stop ? stop->output_tokens : 0));
    return checked(o, ok);
}

/* {"type": TYPE, "message": MESSAGE}, the error object. */
static cJSON *error_object(const char *type, const char *message) {
    cJSON *e = cJSON_CreateObject();
    int ok = put(e, "type", cJSON_CreateString(type)) && put(e, "message", cJSON_CreateString(message));
    return checked(e, ok);
}

char *render_message(const render_message_info *m, const render_block *blocks, int n, const render_stop *stop) {
    return print(message_object(m, blocks, n < 0 ? 0 : n, stop));
}

char *render_sse_message_start(const render_message_info *m) {
    cJSON *o = typed("message_start");
    return sse("message_start", checked(o, put(o, "message", message_object(m, NULL, -1, NULL))));
}

char *render_sse_block_start(int index) {
    cJSON *o = typed_index("content_block_start", index);
    return sse("content_block_start", checked(o, put(o, "content_block", typed_text("text", ""))));
}

/* A content_block_delta whose delta is {"type": TYPE, KEY: LEN bytes of TEXT}. */
static char *string_delta(int index, const char *type, const char *key, const char *text, size_t len) {
    char *t = strndup(text, len);
    if (!t) return NULL;
    cJSON *o = typed_index("content_block_delta", index);
    int ok = put(o, "delta", typed_str(type, key, t));
    free(t);
    return sse("content_block_delta", checked(o, ok));
}

char *render_sse_text_delta(int index, const char *text, size_t len) {
    return string_delta(index, "text_delta", "text", text, len);
}

char *render_sse_thinking_start(int index) {
    cJSON *o = typed_index("content_block_start", index);
    return sse("content_block_start", checked(o, put(o, "content_block", thinking_block(""))));
}

char *render_sse_thinking_delta(int index, const char *text, size_t len) {
    return string_delta(index, "thinking_delta", "thinking", text, len);
}

char *render_sse_signature_delta(int index) {
    return string_delta(index, "signature_delta", "signature", THINKING_SIGNATURE, strlen(THINKING_SIGNATURE));
}

char *render_sse_tool_use_start(int index, const char *id, const char *name) {
    cJSON *o = typed_index("content_block_start", index);
    return sse("content_block_start", checked(o, put(o, "content_block", tool_use(id, name, cJSON_CreateObject()))));
}

char *render_sse_input_delta(int index, const char *json, size_t len) {
    return string_delta(index, "input_json_delta", "partial_json", json, len);
}

char *render_sse_block_stop(int index) { return sse("content_block_stop", typed_index("content_block_stop", index)); }

/* message_delta's delta: {"stop_reason": …, "stop_sequence": … or null}. */
static cJSON *stop_delta(const render_stop *stop) {
    cJSON *d = cJSON_CreateObject();
    int ok = put(d, "stop_reason", cJSON_CreateString(stop->reason)) && put(d, "stop_sequence", string_or_null(stop->sequence));
    return checked(d, ok);
}

char *render_sse_message_delta(const render_stop *stop) {
    cJSON *o = typed("message_delta");
    int ok = put(o, "delta", stop_delta(stop)) && put(o, "usage", usage(NULL, stop->output_tokens));
    return sse("message_delta", checked(o, ok));
}

char *render_sse_message_stop(void) { return sse("message_stop", typed("message_stop")); }

char *render_sse_ping(void) { return sse("ping", typed("ping")); }

char *render_sse_error(const char *type, const char *message) {
    cJSON *o = typed("error");
    return sse("error", checked(o, put(o, "error", error_object(type, message))));
}

/* The error object comes before "type" here, as the server has always sent it. */
char *render_error_body(const char *type, const char *message, const char *request_id) {
    cJSON *o = cJSON_CreateObject();
    int ok = put(o, "error", error_object(type, message)) && put(o, "type", cJSON_CreateString("error")) &&
             put(o, "request_id", cJSON_CreateString(request_id));
    return print(checked(o, ok));
}

render_error render_outcome(job_outcome outcome, const char *engine_message, int retryable) {
    switch (outcome) {
    case JOB_OUTCOME_DONE:
        return (render_error){200, NULL, NULL, -1};
    case JOB_OUTCOME_OVERLOADED:
        return (render_error){529, "overloaded_error", "the server is overloaded: its queue is full", 1};
    case JOB_OUTCOME_CANCELLED:
        return (render_error){503, "overloaded_error", "the request was cancelled", 1};
    case JOB_OUTCOME_ENGINE_ERROR: /* a retryable failure leaves the retry to the client's own policy */
        return (render_error){500, "api_error", engine_message, retryable ? -1 : 0};
    case JOB_OUTCOME_OOM:
        return (render_error){500, "api_error", "out of memory", 0};
    case JOB_OUTCOME_PENDING:
        break;
    }
    return (render_error){500, "api_error", "the request ended without an outcome", -1};
}

void render_id(char *out, size_t n, const char *prefix) {
    unsigned char b[12];
    if (RAND_bytes(b, sizeof b) != 1) memset(b, 0, sizeof b);
    size_t k = (size_t)snprintf(out, n, "%s", prefix);
    for (size_t i = 0; i < sizeof b && k + 2 < n; i++) k += (size_t)snprintf(out + k, n - k, "%02x", b[i]);
}

/* The model object: type, id, display_name, created_at (RFC 3339, UTC). */
static cJSON *model_object(const char *name, long long created_at) {
    char created[32];
    time_t t = (time_t)created_at;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON *m = typed("model");
    int ok = put(m, "id", cJSON_CreateString(name)) && put(m, "display_name", cJSON_CreateString(name)) &&
             put(m, "created_at", cJSON_CreateString(created));
    return checked(m, ok);
}

char *render_model(const char *name, long long created_at) { return print(model_object(name, created_at)); }

char *render_models(const char *name, long long created_at) {
    cJSON *o = cJSON_CreateObject();
    int ok = put(o, "data", array_of(model_object(name, created_at))) && put(o, "has_more", cJSON_CreateFalse()) &&
             put(o, "first_id", cJSON_CreateString(name)) && put(o, "last_id", cJSON_CreateString(name));
    return print(checked(o, ok));
}

char *render_count_tokens(int input_tokens) {
    cJSON *o = cJSON_CreateObject();
    return print(checked(o, put(o, "input_tokens", cJSON_CreateNumber(input_tokens))));
}
