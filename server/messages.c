/* messages.c - the request side of the Messages API contract. */
#include "server/messages.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/utf8.h"

__attribute__((format(printf, 2, 3))) static int bad(msg_error *e, const char *fmt, ...) {
    va_list ap;
    e->status = 400;
    e->type = "invalid_request_error";
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* Deepest nesting of arrays/objects in the JSON text (strings skipped). */
static int json_depth(const char *s, size_t n) {
    int depth = 0, max = 0, in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > max) max = depth;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return max;
}

/* Appends TEXT to the malloc'd string *dst, separated by SEP when both are
 * non-empty. Returns 0 or -1. */
static int append(char **dst, const char *text, const char *sep) {
    size_t a = *dst ? strlen(*dst) : 0, b = strlen(text), s = a && b ? strlen(sep) : 0;
    char *p = realloc(*dst, a + s + b + 1);
    if (!p) return -1;
    memcpy(p + a, sep, s);
    memcpy(p + a + s, text, b + 1);
    *dst = p;
    return 0;
}

/* The text of a content value: a string, or an array of blocks. Text blocks
 * and the text of tool_result blocks are joined; images and documents are
 * refused. Returns a malloc'd string or NULL with E set. */
static char *content_text(const cJSON *content, const char *where, msg_error *e) {
    char *out = NULL;
    if (cJSON_IsString(content)) {
        out = strdup(content->valuestring);
        if (!out) bad(e, "out of memory");
        return out;
    }
    if (!cJSON_IsArray(content)) {
        bad(e, "%s: content must be a string or an array of content blocks", where);
        return NULL;
    }
    out = strdup("");
    const cJSON *block;
    int i = 0;
    cJSON_ArrayForEach(block, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(block, "type");
        if (!cJSON_IsObject(block) || !cJSON_IsString(type)) {
            bad(e, "%s.content.%d: each content block needs a string \"type\"", where, i);
            goto fail;
        }
        const char *t = type->valuestring;
        if (!strcmp(t, "text")) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(block, "text");
            if (!cJSON_IsString(text)) {
                bad(e, "%s.content.%d.text: field required (a string)", where, i);
                goto fail;
            }
            if (!out || append(&out, text->valuestring, "\n\n")) goto oom;
        } else if (!strcmp(t, "tool_result")) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(block, "content");
            char *inner = c ? content_text(c, where, e) : strdup("");
            if (!inner) goto fail;
            int rc = out ? append(&out, inner, "\n\n") : -1;
            free(inner);
            if (rc) goto oom;
        } else if (!strcmp(t, "image") || !strcmp(t, "document")) {
            bad(e, "%s.content.%d: content blocks of type '%s' are not supported: this server is text-only", where, i, t);
            goto fail;
        } else {
            bad(e, "%s.content.%d: content block type '%s' is not supported", where, i, t);
            goto fail;
        }
        i++;
    }
    if (!out) goto oom;
    return out;
oom:
    bad(e, "out of memory");
fail:
    free(out);
    return NULL;
}

static int number_field(const cJSON *root, const char *key, double lo, double hi, int lo_open, double *out, msg_error *e) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble > hi || v->valuedouble < lo ||
        (lo_open && v->valuedouble <= lo))
        return bad(e, "%s: must be a number in %s%g, %g]", key, lo_open ? "(" : "[", lo, hi);
    *out = v->valuedouble;
    return 1;
}

int msg_parse(const char *body, size_t len, int count_only, int max_depth, msg_request *req, msg_error *e) {
    memset(req, 0, sizeof *req);
    req->temperature = 1.0f;
    req->top_p = 1.0f;
    cJSON *root = NULL;
    if (utf8_valid_prefix(body, len) != len) return bad(e, "the request body is not valid UTF-8");
    if (json_depth(body, len) > max_depth) return bad(e, "the request body nests JSON deeper than %d levels", max_depth);
    root = cJSON_ParseWithLength(body, len);
    if (!root) return bad(e, "the request body is not valid JSON");
    if (!cJSON_IsObject(root)) {
        bad(e, "the request body must be a JSON object");
        goto fail;
    }
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsString(model)) {
        bad(e, "model: field required (a string)");
        goto fail;
    }
    req->model = strdup(model->valuestring);
    if (!count_only) {
        const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
        if (!mt) {
            bad(e, "max_tokens: field required");
            goto fail;
        }
        if (!cJSON_IsNumber(mt) || mt->valuedouble < 1 || mt->valuedouble > 1e9 || mt->valuedouble != floor(mt->valuedouble)) {
            bad(e, "max_tokens: must be an integer >= 1");
            goto fail;
        }
        req->max_tokens = (int)mt->valuedouble;
    }
    const cJSON *sys = cJSON_GetObjectItemCaseSensitive(root, "system");
    if (sys && !cJSON_IsNull(sys)) {
        if (cJSON_IsArray(sys) || cJSON_IsString(sys)) req->system = content_text(sys, "system", e);
        else bad(e, "system: must be a string or an array of text blocks");
        if (!req->system) goto fail;
    }
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        bad(e, "messages: field required (a non-empty array)");
        goto fail;
    }
    int n = cJSON_GetArraySize(msgs);
    req->msgs = calloc((size_t)n, sizeof *req->msgs);
    if (!req->msgs) {
        bad(e, "out of memory");
        goto fail;
    }
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, msgs) {
        char where[32];
        snprintf(where, sizeof where, "messages.%d", i++);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            bad(e, "%s.role: field required", where);
            goto fail;
        }
        if (!content) {
            bad(e, "%s.content: field required", where);
            goto fail;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system")) {
            bad(e, "%s.role: must be 'user' or 'assistant', got '%s'", where, r);
            goto fail;
        }
        char *text = content_text(content, where, e);
        if (!text) goto fail;
        if (!strcmp(r, "system")) { /* folded into the system prompt */
            int rc = append(&req->system, text, "\n\n");
            free(text);
            if (rc) {
                bad(e, "out of memory");
                goto fail;
            }
            continue;
        }
        req->msgs[req->n_msgs].role = !strcmp(r, "user") ? ENGINE_ROLE_USER : ENGINE_ROLE_ASSISTANT;
        req->msgs[req->n_msgs++].text = text;
    }
    if (req->n_msgs == 0) {
        bad(e, "messages: at least one user or assistant message is required");
        goto fail;
    }
    double d = 0;
    int rc = number_field(root, "temperature", 0, 1, 0, &d, e);
    if (rc < 0) goto fail;
    if (rc) req->temperature = (float)d;
    rc = number_field(root, "top_p", 0, 1, 1, &d, e);
    if (rc < 0) goto fail;
    if (rc) req->top_p = (float)d;
    rc = number_field(root, "top_k", 0, 1e9, 0, &d, e);
    if (rc < 0) goto fail;
    if (rc) {
        if (d != floor(d)) {
            bad(e, "top_k: must be an integer >= 0");
            goto fail;
        }
        req->top_k = (int)d;
    }
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop_sequences");
    if (stop && !cJSON_IsNull(stop)) {
        if (!cJSON_IsArray(stop) || cJSON_GetArraySize(stop) > MSG_MAX_STOP) {
            bad(e, "stop_sequences: must be an array of at most %d strings", MSG_MAX_STOP);
            goto fail;
        }
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) {
            if (!cJSON_IsString(s) || !*s->valuestring) {
                bad(e, "stop_sequences: each stop sequence must be a non-empty string");
                goto fail;
            }
            if (!(req->stop[req->n_stop++] = strdup(s->valuestring))) {
                bad(e, "out of memory");
                goto fail;
            }
        }
    }
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsNull(stream)) {
        if (!cJSON_IsBool(stream)) {
            bad(e, "stream: must be a boolean");
            goto fail;
        }
        req->stream = cJSON_IsTrue(stream);
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (meta && !cJSON_IsNull(meta)) {
        const cJSON *uid = cJSON_GetObjectItemCaseSensitive(meta, "user_id");
        if (!cJSON_IsObject(meta) || (uid && !cJSON_IsNull(uid) && !cJSON_IsString(uid))) {
            bad(e, "metadata: must be an object whose user_id is a string or null");
            goto fail;
        }
    }
    if (!req->model) {
        bad(e, "out of memory");
        goto fail;
    }
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    msg_request_free(req);
    return -1;
}

void msg_request_free(msg_request *req) {
    free(req->model);
    free(req->system);
    for (int i = 0; i < req->n_msgs; i++) free((char *)req->msgs[i].text);
    free(req->msgs);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    memset(req, 0, sizeof *req);
}
