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

/* The text of a content value that holds only text (system, a tool_result's
 * content): a string, or an array of text blocks joined with a blank line;
 * images and documents are refused. WHERE names the value. Returns a
 * malloc'd string (the caller frees it) or NULL with E set. */
static char *content_text(const cJSON *content, const char *where, msg_error *e) {
    char *out = NULL;
    if (cJSON_IsString(content)) {
        out = strdup(content->valuestring);
        if (!out) bad(e, "out of memory");
        return out;
    }
    if (!cJSON_IsArray(content)) {
        bad(e, "%s: must be a string or an array of text blocks", where);
        return NULL;
    }
    out = strdup("");
    const cJSON *block;
    int i = 0;
    cJSON_ArrayForEach(block, content) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(block, "type");
        if (!cJSON_IsObject(block) || !cJSON_IsString(type)) {
            bad(e, "%s.%d: each content block needs a string \"type\"", where, i);
            goto fail;
        }
        const char *t = type->valuestring;
        if (!strcmp(t, "text")) {
            const cJSON *text = cJSON_GetObjectItemCaseSensitive(block, "text");
            if (!cJSON_IsString(text)) {
                bad(e, "%s.%d.text: field required (a string)", where, i);
                goto fail;
            }
            if (!out || append(&out, text->valuestring, "\n\n")) goto oom;
        } else if (!strcmp(t, "image") || !strcmp(t, "document")) {
            bad(e, "%s.%d: content blocks of type '%s' are not supported: this server is text-only", where, i, t);
            goto fail;
        } else {
            bad(e, "%s.%d: content block type '%s' is not supported here (text blocks only)", where, i, t);
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

/* Returns the string value of KEY in O, or NULL when absent or not a string. */
static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Returns 1 when KEY is absent from O or null. */
static int absent(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return !v || cJSON_IsNull(v);
}

/* Returns 1 when S matches the API's tool names, ^[a-zA-Z0-9_-]{1,64}$. */
static int tool_name_ok(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') || (s[n] >= '0' && s[n] <= '9') ||
              s[n] == '_' || s[n] == '-'))
            return 0;
    return n >= 1 && n <= 64;
}

/* Returns 1 when the messages M[0..N) hold a tool_use part with id ID. */
static int has_call(const engine_message *m, int n, const char *id) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < m[i].n_parts; k++)
            if (m[i].parts[k].type == CHAT_PART_TOOL_CALL && !strcmp(m[i].parts[k].id, id)) return 1;
    return 0;
}

/* Parses the content block BLOCK (named WHERE) of a message of role ROLE
 * into *P. PREV/N_PREV: the previous assistant turn, whose tool_use blocks a
 * tool_result must answer. Returns 1 (a part, its strings now owned by *P),
 * 0 (a block dropped: thinking), or -1 with E set. */
static int parse_block(const cJSON *block, const char *where, engine_role role, const engine_message *prev, int n_prev,
                       engine_part *p, msg_error *e) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(block, "type");
    if (!cJSON_IsObject(block) || !cJSON_IsString(type)) return bad(e, "%s: each content block needs a string \"type\"", where);
    const char *t = type->valuestring;
    int assistant_only = !strcmp(t, "tool_use") || !strcmp(t, "thinking") || !strcmp(t, "redacted_thinking");
    memset(p, 0, sizeof *p);
    if (assistant_only && role != ENGINE_ROLE_ASSISTANT)
        return bad(e, "%s: '%s' blocks are only allowed in assistant messages", where, t);
    if (!strcmp(t, "tool_result") && role != ENGINE_ROLE_USER)
        return bad(e, "%s: 'tool_result' blocks are only allowed in user messages", where);
    if (!strcmp(t, "text")) {
        const char *text = str_of(block, "text");
        if (!text) return bad(e, "%s.text: field required (a string)", where);
        p->type = CHAT_PART_TEXT;
        if (!(p->text = strdup(text))) return bad(e, "out of memory");
        return 1;
    }
    if (!strcmp(t, "tool_use")) {
        const char *id = str_of(block, "id"), *name = str_of(block, "name");
        const cJSON *input = cJSON_GetObjectItemCaseSensitive(block, "input");
        if (!id || !*id) return bad(e, "%s.id: field required (a non-empty string)", where);
        if (!name || !*name) return bad(e, "%s.name: field required (a non-empty string)", where);
        if (!cJSON_IsObject(input)) return bad(e, "%s.input: field required (an object)", where);
        p->type = CHAT_PART_TOOL_CALL;
        p->id = strdup(id);
        p->name = strdup(name);
        p->input_json = cJSON_PrintUnformatted(input); /* freed with cJSON_free */
        if (!p->id || !p->name || !p->input_json) return bad(e, "out of memory");
        return 1;
    }
    if (!strcmp(t, "tool_result")) {
        const char *id = str_of(block, "tool_use_id");
        const cJSON *is_error = cJSON_GetObjectItemCaseSensitive(block, "is_error");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(block, "content");
        char inner[96];
        if (!id || !*id) return bad(e, "%s.tool_use_id: field required (a non-empty string)", where);
        if (!has_call(prev, n_prev, id))
            return bad(e, "%s.tool_use_id: no tool_use block with id '%.100s' in the previous assistant message", where,
                       id);
        if (!absent(block, "is_error") && !cJSON_IsBool(is_error)) return bad(e, "%s.is_error: must be a boolean", where);
        snprintf(inner, sizeof inner, "%s.content", where);
        p->type = CHAT_PART_TOOL_RESULT;
        p->is_error = cJSON_IsTrue(is_error);
        p->text = absent(block, "content") ? strdup("") : content_text(content, inner, e);
        if (!p->text) return absent(block, "content") ? bad(e, "out of memory") : -1;
        if (!(p->id = strdup(id))) return bad(e, "out of memory");
        return 1;
    }
    if (!strcmp(t, "thinking")) { /* not put back into the prompt, as the API does */
        if (!str_of(block, "thinking")) return bad(e, "%s.thinking: field required (a string)", where);
        if (!str_of(block, "signature")) return bad(e, "%s.signature: field required (a string)", where);
        return 0;
    }
    if (!strcmp(t, "redacted_thinking")) {
        if (!str_of(block, "data")) return bad(e, "%s.data: field required (a string)", where);
        return 0;
    }
    if (!strcmp(t, "image") || !strcmp(t, "document"))
        return bad(e, "%s: content blocks of type '%s' are not supported: this server is text-only", where, t);
    return bad(e, "%s: content block type '%s' is not supported", where, t);
}

/* Frees the strings of part P. */
static void part_free(engine_part *p) {
    free((char *)p->text);
    free((char *)p->id);
    free((char *)p->name);
    cJSON_free((char *)p->input_json);
}

/* Parses the content of message WHERE (role ROLE) into M: a string is
 * M->text, an array of blocks M->parts (M owns both). PREV/N_PREV as in
 * parse_block. Returns 0 or -1 with E set (M then owns what was made). */
static int parse_content(const cJSON *content, const char *where, engine_role role, const engine_message *prev,
                         int n_prev, engine_message *m, msg_error *e) {
    char at[80];
    if (cJSON_IsString(content)) {
        if (!(m->text = strdup(content->valuestring))) return bad(e, "out of memory");
        return 0;
    }
    if (!cJSON_IsArray(content)) return bad(e, "%s.content: must be a string or an array of content blocks", where);
    int n = cJSON_GetArraySize(content), k = 0;
    engine_part *parts = calloc((size_t)(n ? n : 1), sizeof *parts);
    if (!parts) return bad(e, "out of memory");
    m->parts = parts;
    const cJSON *block;
    cJSON_ArrayForEach(block, content) {
        snprintf(at, sizeof at, "%s.content.%d", where, k++);
        int rc = parse_block(block, at, role, prev, n_prev, &parts[m->n_parts], e);
        if (rc < 0) {
            part_free(&parts[m->n_parts]);
            return -1;
        }
        m->n_parts += rc;
    }
    /* Only thinking blocks: an empty text, as an empty content would be. */
    if (!m->n_parts && !(m->text = strdup(""))) return bad(e, "out of memory");
    return 0;
}

/* Parses "tools" and "tool_choice" of ROOT into REQ->tools (owned by REQ).
 * Returns 0 or -1 with E set. */
static int parse_tools(const cJSON *root, msg_request *req, msg_error *e) {
    engine_tools *ts = &req->tools;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(root, "tools");
    const cJSON *choice = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (!absent(root, "tools")) {
        if (!cJSON_IsArray(tools)) return bad(e, "tools: must be an array of tools");
        int n = cJSON_GetArraySize(tools);
        engine_tool *t = calloc((size_t)(n ? n : 1), sizeof *t);
        if (!t) return bad(e, "out of memory");
        ts->tools = t;
        const cJSON *tool;
        cJSON_ArrayForEach(tool, tools) {
            int i = ts->n_tools;
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(tool, "type");
            const cJSON *schema = cJSON_GetObjectItemCaseSensitive(tool, "input_schema");
            const char *name = str_of(tool, "name"), *desc = str_of(tool, "description");
            if (!cJSON_IsObject(tool)) return bad(e, "tools.%d: must be an object", i);
            if (!absent(tool, "type") && !cJSON_IsString(type)) return bad(e, "tools.%d.type: must be a string", i);
            if (cJSON_IsString(type) && strcmp(type->valuestring, "custom"))
                return bad(e,
                           "tools.%d.type: '%.64s' is one of the API's server tools, which this server does not run; "
                           "only custom tools (name, description, input_schema) are supported",
                           i, type->valuestring);
            if (!name || !tool_name_ok(name)) return bad(e, "tools.%d.name: field required (matching ^[a-zA-Z0-9_-]{1,64}$)", i);
            for (int k = 0; k < i; k++)
                if (!strcmp(t[k].name, name)) return bad(e, "tools.%d.name: tool names must be unique ('%s' repeats)", i, name);
            if (!absent(tool, "description") && !desc) return bad(e, "tools.%d.description: must be a string", i);
            const char *st = str_of(schema, "type");
            if (!cJSON_IsObject(schema) || !st || strcmp(st, "object"))
                return bad(e, "tools.%d.input_schema: field required (a JSON Schema object with \"type\": \"object\")", i);
            ts->n_tools++;
            t[i].name = strdup(name);
            t[i].description = desc ? strdup(desc) : NULL;
            t[i].schema_json = cJSON_PrintUnformatted(schema); /* freed with cJSON_free */
            if (!t[i].name || (desc && !t[i].description) || !t[i].schema_json) return bad(e, "out of memory");
        }
    }
    if (absent(root, "tool_choice")) return 0;
    const char *type = str_of(choice, "type"), *name = str_of(choice, "name");
    const cJSON *dp = cJSON_GetObjectItemCaseSensitive(choice, "disable_parallel_tool_use");
    if (!cJSON_IsObject(choice) || !type) return bad(e, "tool_choice.type: field required (auto, any, tool or none)");
    if (!strcmp(type, "auto")) ts->choice = CHAT_TOOL_CHOICE_AUTO;
    else if (!strcmp(type, "any")) ts->choice = CHAT_TOOL_CHOICE_ANY;
    else if (!strcmp(type, "tool")) ts->choice = CHAT_TOOL_CHOICE_TOOL;
    else if (!strcmp(type, "none")) ts->choice = CHAT_TOOL_CHOICE_NONE;
    else return bad(e, "tool_choice.type: must be auto, any, tool or none, got '%.64s'", type);
    if (!absent(choice, "disable_parallel_tool_use") && !cJSON_IsBool(dp))
        return bad(e, "tool_choice.disable_parallel_tool_use: must be a boolean");
    ts->single_call = cJSON_IsTrue(dp);
    if (ts->choice != CHAT_TOOL_CHOICE_TOOL) return 0;
    if (!name) return bad(e, "tool_choice.name: field required (a string) for type tool");
    int k = 0;
    while (k < ts->n_tools && strcmp(ts->tools[k].name, name)) k++;
    if (k == ts->n_tools) return bad(e, "tool_choice.name: no tool named '%.64s' in tools", name);
    ts->choice_name = ts->tools[k].name;
    return 0;
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

/* 1 when message M holds a tool_result answering the call ID. */
static int answers(const engine_message *m, const char *id) {
    for (int i = 0; i < m->n_parts; i++)
        if (m->parts[i].type == CHAT_PART_TOOL_RESULT && m->parts[i].id && !strcmp(m->parts[i].id, id)) return 1;
    return 0;
}

/* The API's rule: each tool_use of the assistant turn PREV[0..N) is answered
 * by a tool_result in NEXT, the message right after it (at WHERE). 0 or -1. */
static int check_answered(const engine_message *prev, int n, const engine_message *next, const char *where,
                          msg_error *e) {
    for (int k = 0; k < n; k++)
        for (int i = 0; i < prev[k].n_parts; i++) {
            const engine_part *p = &prev[k].parts[i];
            if (p->type == CHAT_PART_TOOL_CALL && !answers(next, p->id))
                return bad(e, "%s: tool_use ids were found without tool_result blocks immediately after: %.100s. Each "
                              "tool_use block must have a corresponding tool_result block in the next message.",
                           where, p->id);
        }
    return 0;
}

/* The messages array into REQ->msgs: system messages folded into the
 * system prompt, each turn's content checked and converted. 0 or -1 (E set). */
static int parse_messages(const cJSON *root, msg_request *req, msg_error *e) {
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        bad(e, "messages: field required (a non-empty array)");
        return -1;
    }
    int n = cJSON_GetArraySize(msgs);
    req->msgs = calloc((size_t)n, sizeof *req->msgs);
    if (!req->msgs) {
        bad(e, "out of memory");
        return -1;
    }
    const cJSON *m;
    int i = 0, asst_from = 0, asst_to = 0;
    cJSON_ArrayForEach(m, msgs) {
        char where[32];
        snprintf(where, sizeof where, "messages.%d", i++);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            bad(e, "%s.role: field required", where);
            return -1;
        }
        if (!content) {
            bad(e, "%s.content: field required", where);
            return -1;
        }
        const char *r = role->valuestring;
        if (strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "system")) {
            bad(e, "%s.role: must be 'user' or 'assistant', got '%s'", where, r);
            return -1;
        }
        if (!strcmp(r, "system")) { /* folded into the system prompt */
            char at[48];
            snprintf(at, sizeof at, "%s.content", where);
            char *text = content_text(content, at, e);
            if (!text) return -1;
            int rc = append(&req->system, text, "\n\n");
            free(text);
            if (rc) {
                bad(e, "out of memory");
                return -1;
            }
            continue;
        }
        engine_message *cur = &req->msgs[req->n_msgs++];
        cur->role = !strcmp(r, "user") ? ENGINE_ROLE_USER : ENGINE_ROLE_ASSISTANT;
        /* The previous assistant turn: the run of assistant messages before this user run. */
        if (cur->role == ENGINE_ROLE_ASSISTANT) {
            if (req->n_msgs < 2 || cur[-1].role != ENGINE_ROLE_ASSISTANT) asst_from = req->n_msgs - 1;
            asst_to = req->n_msgs;
        }
        if (parse_content(content, where, cur->role, req->msgs + asst_from, asst_to - asst_from, cur, e)) return -1;
        if (cur->role == ENGINE_ROLE_USER && req->n_msgs >= 2 && cur[-1].role == ENGINE_ROLE_ASSISTANT &&
            check_answered(req->msgs + asst_from, asst_to - asst_from, cur, where, e))
            return -1;
    }
    if (req->n_msgs == 0) {
        bad(e, "messages: at least one user or assistant message is required");
        return -1;
    }
    return 0;
}

/* temperature, top_p and top_k into REQ (defaults kept when absent). 0 or -1. */
static int parse_sampling(const cJSON *root, msg_request *req, msg_error *e) {
    double d = 0;
    int rc = number_field(root, "temperature", 0, 1, 0, &d, e);
    if (rc < 0) return -1;
    if (rc) req->temperature = (float)d;
    rc = number_field(root, "top_p", 0, 1, 1, &d, e);
    if (rc < 0) return -1;
    if (rc) req->top_p = (float)d;
    rc = number_field(root, "top_k", 0, 1e9, 0, &d, e);
    if (rc < 0) return -1;
    if (rc) {
        if (d != floor(d)) {
            bad(e, "top_k: must be an integer >= 0");
            return -1;
        }
        req->top_k = (int)d;
    }
    return 0;
}

/* output_config.format (or the beta's output_format): a json_schema format
 * whose schema is kept as text in REQ. 0 or -1. */
static int parse_format(const cJSON *root, msg_request *req, msg_error *e) {
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "output_config");
    const char *where = "output_config.format";
    if (cfg && !cJSON_IsNull(cfg) && !cJSON_IsObject(cfg)) return bad(e, "output_config: must be an object");
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(cfg, "format");
    if (!fmt || cJSON_IsNull(fmt)) {
        fmt = cJSON_GetObjectItemCaseSensitive(root, "output_format");
        where = "output_format";
    }
    if (!fmt || cJSON_IsNull(fmt)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(fmt, "type");
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(fmt, "schema");
    if (!cJSON_IsObject(fmt) || !cJSON_IsString(type) || strcmp(type->valuestring, "json_schema"))
        return bad(e, "%s.type: must be 'json_schema'", where);
    if (!cJSON_IsObject(schema)) return bad(e, "%s.schema: field required (a JSON Schema object)", where);
    if (!(req->format_schema = cJSON_PrintUnformatted(schema))) return bad(e, "out of memory");
    return 0;
}

/* thinking: {"type": "enabled", "budget_tokens": N} (1024 <= N, and N <
 * max_tokens outside count_tokens), {"type": "adaptive"} or {"type":
 * "disabled"}, into REQ->thinking. 0 or -1. */
static int parse_thinking(const cJSON *root, int count_only, msg_request *req, msg_error *e) {
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "thinking");
    if (!th || cJSON_IsNull(th)) return 0;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(th, "type");
    const char *t = cJSON_IsObject(th) && cJSON_IsString(type) ? type->valuestring : NULL;
    if (!t) return bad(e, "thinking.type: field required (enabled, adaptive or disabled)");
    if (!strcmp(t, "disabled")) return 0;
    if (strcmp(t, "enabled") && strcmp(t, "adaptive"))
        return bad(e, "thinking.type: must be enabled, adaptive or disabled, got '%.64s'", t);
    req->thinking = 1;
    if (!strcmp(t, "adaptive")) return 0;
    const cJSON *budget = cJSON_GetObjectItemCaseSensitive(th, "budget_tokens");
    if (!cJSON_IsNumber(budget) || budget->valuedouble != floor(budget->valuedouble))
        return bad(e, "thinking.budget_tokens: field required (an integer) for type enabled");
    if (budget->valuedouble < 1024) return bad(e, "thinking.budget_tokens: must be >= 1024");
    if (!count_only && budget->valuedouble >= req->max_tokens)
        return bad(e, "thinking.budget_tokens: must be less than max_tokens (%d)", req->max_tokens);
    return 0;
}

/* stop_sequences, stream and metadata into REQ. 0 or -1. */
static int parse_options(const cJSON *root, msg_request *req, msg_error *e) {
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop_sequences");
    if (stop && !cJSON_IsNull(stop)) {
        if (!cJSON_IsArray(stop) || cJSON_GetArraySize(stop) > MSG_MAX_STOP) {
            bad(e, "stop_sequences: must be an array of at most %d strings", MSG_MAX_STOP);
            return -1;
        }
        const cJSON *s;
        cJSON_ArrayForEach(s, stop) {
            if (!cJSON_IsString(s) || !*s->valuestring) {
                bad(e, "stop_sequences: each stop sequence must be a non-empty string");
                return -1;
            }
            if (!(req->stop[req->n_stop++] = strdup(s->valuestring))) {
                bad(e, "out of memory");
                return -1;
            }
        }
    }
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsNull(stream)) {
        if (!cJSON_IsBool(stream)) {
            bad(e, "stream: must be a boolean");
            return -1;
        }
        req->stream = cJSON_IsTrue(stream);
    }
    const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
    if (meta && !cJSON_IsNull(meta)) {
        const cJSON *uid = cJSON_GetObjectItemCaseSensitive(meta, "user_id");
        if (!cJSON_IsObject(meta) || (uid && !cJSON_IsNull(uid) && !cJSON_IsString(uid))) {
            bad(e, "metadata: must be an object whose user_id is a string or null");
            return -1;
        }
    }
    return 0;
}

/* Finds the cache_control breakpoints below J (any depth; J is already
 * depth-checked): sets REQ's hint and the longest TTL. */
static void scan_cache_control(const cJSON *j, msg_request *req) {
    for (const cJSON *c = j ? j->child : NULL; c; c = c->next) {
        if (c->string && !strcmp(c->string, "cache_control") && cJSON_IsObject(c)) {
            const cJSON *ttl = cJSON_GetObjectItemCaseSensitive(c, "ttl");
            double s = cJSON_IsString(ttl) && !strcmp(ttl->valuestring, "1h") ? 3600 : 300;
            req->cache_hint = 1;
            if (s > req->cache_ttl_s) req->cache_ttl_s = s;
        } else if (cJSON_IsObject(c) || cJSON_IsArray(c)) {
            scan_cache_control(c, req);
        }
    }
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
    if (parse_messages(root, req, e) || parse_tools(root, req, e) || parse_sampling(root, req, e) ||
        parse_options(root, req, e) || parse_format(root, req, e) || parse_thinking(root, count_only, req, e))
        goto fail;
    if (!req->model) {
        bad(e, "out of memory");
        goto fail;
    }
    scan_cache_control(root, req);
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
    for (int i = 0; i < req->n_msgs; i++) {
        free((char *)req->msgs[i].text);
        for (int k = 0; k < req->msgs[i].n_parts; k++) part_free((engine_part *)&req->msgs[i].parts[k]);
        free((engine_part *)req->msgs[i].parts);
    }
    free(req->msgs);
    for (int i = 0; i < req->tools.n_tools; i++) {
        free((char *)req->tools.tools[i].name);
        free((char *)req->tools.tools[i].description);
        cJSON_free((char *)req->tools.tools[i].schema_json);
    }
    free((engine_tool *)req->tools.tools);
    for (int i = 0; i < req->n_stop; i++) free(req->stop[i]);
    cJSON_free(req->format_schema);
    memset(req, 0, sizeof *req);
}
