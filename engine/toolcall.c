/* toolcall.c - the answer split into text and tool calls (toolcall.h).
 *
 * States: TEXT (looking for a call's opening), HEAD (the call's JSON up to
 * its input: {"name": "N", "arguments": ), INPUT (the input value, handed
 * on as it comes), TAIL (the rest up to call_close) and WHOLE (a call whose
 * keys came in another order: held until its end, then parsed). call_open
 * and call_close are matched without their surrounding whitespace. */
#include "engine/toolcall.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

enum { TC_TEXT, TC_HEAD, TC_INPUT, TC_TAIL, TC_WHOLE };

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* S without leading and trailing whitespace: *N gets its length. */
static const char *trimmed(const char *s, size_t *n) {
    size_t e = strlen(s);
    while (*s && is_space(*s)) s++, e--;
    while (e && is_space(s[e - 1])) e--;
    *n = e;
    return s;
}

void toolcall_init(toolcall *t, const chat_tool_syntax *syn, toolcall_sink sink, void *ud) {
    memset(t, 0, sizeof *t);
    t->syn = syn;
    t->sink = sink;
    t->ud = ud;
    t->state = TC_TEXT;
    textout_init(&t->input, NULL, 0);
}

void toolcall_free(toolcall *t) {
    free(t->buf);
    free(t->name);
    textout_free(&t->input);
    t->buf = t->name = NULL;
}

int toolcall_in_call(const toolcall *t) { return t->state != TC_TEXT; }

static void consume(toolcall *t, size_t n) {
    memmove(t->buf, t->buf + n, t->len - n);
    t->len -= n;
}

/* Hands on text S[0..N) (nothing when empty). Returns 0 or 1 (stop). */
static int put_text(toolcall *t, const char *s, size_t n) {
    if (!n) return 0;
    t->text_seen = 1;
    return t->sink(t->ud, TOOLCALL_TEXT, s, n) ? 1 : 0;
}

/* Hands on the text before index END of the buffer: leading whitespace
 * dropped after a call, trailing whitespace dropped when KEEP_TAIL is 0 and
 * otherwise held back. Returns 0 or 1. */
static int text_until(toolcall *t, size_t end, int drop_tail) {
    size_t s = 0, e = end;
    if (!t->text_seen && t->n_calls)
        while (s < e && is_space(t->buf[s])) s++;
    while (e > s && is_space(t->buf[e - 1])) e--;
    int rc = put_text(t, t->buf + s, e - s);
    consume(t, drop_tail ? end : e);
    return rc;
}

/* Input bytes through the UTF-8 assembly; FLUSH at the call's end. */
static int put_input(toolcall *t, const char *s, size_t n, int flush) {
    const char *out;
    size_t out_len;
    if (textout_push(&t->input, s, n, &out, &out_len) < 0) return -1;
    if (out_len && t->sink(t->ud, TOOLCALL_INPUT, out, out_len)) return 1;
    if (!flush) return 0;
    textout_flush(&t->input, &out, &out_len);
    return out_len && t->sink(t->ud, TOOLCALL_INPUT, out, out_len) ? 1 : 0;
}

static int start_call(toolcall *t, const char *name) {
    free(t->name);
    t->name = strdup(name);
    if (!t->name) return -1;
    t->n_calls++;
    t->depth = t->in_str = t->esc = 0;
    return t->sink(t->ud, TOOLCALL_START, t->name, strlen(t->name)) ? 1 : 0;
}

static int end_call(toolcall *t) {
    t->state = TC_TEXT;
    t->text_seen = 0;
    return t->sink(t->ud, TOOLCALL_END, "", 0) ? 1 : 0;
}

/* Scans byte C of a JSON value (t->depth, in_str, esc). Returns 1 when the
 * value has ended BEFORE C (a scalar followed by ',' or '}'), 2 when it ends
 * WITH C (its closing bracket), 0 otherwise. */
static int scan(toolcall *t, char c) {
    if (t->in_str) {
        if (t->esc) t->esc = 0;
        else if (c == '\\') t->esc = 1;
        else if (c == '"') t->in_str = 0;
        return 0;
    }
    if (c == '"') t->in_str = 1;
    else if (c == '{' || c == '[') t->depth++;
    else if ((c == '}' || c == ']') && t->depth == 0) return 1;
    else if (c == '}' || c == ']') return --t->depth == 0 ? 2 : 0;
    else if (c == ',' && t->depth == 0) return 1;
    return 0;
}

/* Matches LIT at *POS of the buffer after optional whitespace: 1 matched
 * (POS moved past it), 0 more bytes needed, -1 something else is there. */
static int expect(const toolcall *t, size_t *pos, const char *lit) {
    while (*pos < t->len && is_space(t->buf[*pos])) (*pos)++;
    size_t n = strlen(lit), have = t->len - *pos < n ? t->len - *pos : n;
    if (memcmp(t->buf + *pos, lit, have)) return -1;
    if (have < n) return 0;
    *pos += n;
    return 1;
}

/* The JSON string at *POS (after whitespace), unescaped into a malloc'd
 * *OUT: 1, 0 (incomplete), -1 (not a string, or out of memory). */
static int json_string_at(const toolcall *t, size_t *pos, char **out) {
    while (*pos < t->len && is_space(t->buf[*pos])) (*pos)++;
    if (*pos >= t->len) return 0;
    if (t->buf[*pos] != '"') return -1;
    size_t i = *pos + 1;
    for (int esc = 0; i < t->len; i++) {
        if (esc) esc = 0;
        else if (t->buf[i] == '\\') esc = 1;
        else if (t->buf[i] == '"') break;
    }
    if (i >= t->len) return 0;
    char *quoted = strndup(t->buf + *pos, i + 1 - *pos);
    cJSON *s = quoted ? cJSON_Parse(quoted) : NULL;
    free(quoted);
    *out = cJSON_IsString(s) ? strdup(s->valuestring) : NULL;
    cJSON_Delete(s);
    if (!*out) return -1;
    *pos = i + 1;
    return 1;
}

/* HEAD: {"name": "N", "<args>": — then the input starts. */
static int step_head(toolcall *t, int *progress) {
    size_t pos = 0;
    char *name = NULL;
    int r = expect(t, &pos, "{");
    if (r > 0) r = expect(t, &pos, "\"name\"");
    if (r > 0) r = expect(t, &pos, ":");
    if (r > 0) r = json_string_at(t, &pos, &name);
    if (r > 0) r = expect(t, &pos, ",");
    if (r > 0) {
        size_t at = pos;
        r = expect(t, &pos, "\"arguments\"");
        if (r < 0) {
            pos = at;
            r = expect(t, &pos, "\"parameters\"");
        }
    }
    if (r > 0) r = expect(t, &pos, ":");
    if (r > 0) {
        while (pos < t->len && is_space(t->buf[pos])) pos++;
        if (pos == t->len) r = 0;
    }
    if (r < 0) {
        free(name);
        t->state = TC_WHOLE; /* another key order: wait for the whole call */
        t->depth = t->in_str = t->esc = 0;
        *progress = 1;
        return 0;
    }
    if (r == 0) {
        free(name);
        return 0;
    }
    consume(t, pos);
    t->state = TC_INPUT;
    *progress = 1;
    int rc = start_call(t, name);
    free(name);
    return rc;
}

static int step_input(toolcall *t, int *progress) {
    size_t i = 0;
    int end = 0;
    while (i < t->len && !(end = scan(t, t->buf[i]))) i++;
    size_t n = end == 2 ? i + 1 : i;
    int rc = put_input(t, t->buf, n, end != 0);
    consume(t, n);
    if (end) {
        t->state = TC_TAIL;
        *progress = 1;
    }
    return rc;
}

/* TAIL: whatever follows the input up to call_close (the object's '}' when
 * the family has no call_close). */
static int step_tail(toolcall *t, int *progress) {
    size_t n;
    const char *close = trimmed(t->syn->call_close, &n);
    if (!n) close = "}", n = 1;
    char *at = memmem(t->buf, t->len, close, n);
    if (!at) return 0;
    consume(t, (size_t)(at - t->buf) + n);
    *progress = 1;
    return end_call(t);
}

/* A whole call held in the buffer's first N bytes, its keys in any order:
 * handed on as START, INPUT, END when it parses, as text otherwise. */
static int whole_call(toolcall *t, size_t n, size_t text_n) {
    char *js = strndup(t->buf, n);
    cJSON *o = js ? cJSON_Parse(js) : NULL;
    free(js);
    cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    cJSON *args = cJSON_GetObjectItemCaseSensitive(o, t->syn->args_key);
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    char *input = cJSON_IsString(name) && cJSON_IsObject(args) ? cJSON_PrintUnformatted(args) : NULL;
    int rc;
    if (input) {
        rc = start_call(t, name->valuestring);
        if (!rc) rc = put_input(t, input, strlen(input), 1);
        if (!rc) rc = end_call(t);
    } else { /* not a call after all: its opening and body are text */
        size_t open_n;
        const char *open = trimmed(t->syn->call_open, &open_n);
        t->state = TC_TEXT;
        rc = put_text(t, open, open_n);
        if (!rc) rc = put_text(t, t->buf, text_n);
    }
    free(input);
    cJSON_Delete(o);
    consume(t, text_n);
    return rc;
}

static int step_whole(toolcall *t, int *progress) {
    size_t n;
    const char *close = trimmed(t->syn->call_close, &n);
    if (n) {
        char *at = memmem(t->buf, t->len, close, n);
        if (!at) return 0;
        *progress = 1;
        return whole_call(t, (size_t)(at - t->buf), (size_t)(at - t->buf) + n);
    }
    for (size_t i = 0; i < t->len; i++)
        if (scan(t, t->buf[i]) == 2) {
            *progress = 1;
            return whole_call(t, i + 1, i + 1);
        }
    return 0;
}

/* The length of the longest tail of the buffer that is a proper prefix of
 * call_open (0 when the family has none): bytes that may still open a call. */
static size_t open_prefix_tail(const toolcall *t) {
    size_t n;
    const char *open = trimmed(t->syn->call_open, &n);
    if (!n) return 0;
    for (size_t k = n - 1 < t->len ? n - 1 : t->len; k > 0; k--)
        if (!memcmp(t->buf + t->len - k, open, k)) return k;
    return 0;
}

/* TEXT: hands on text up to a call's opening, or up to a tail that could
 * still become one. */
static int step_text(toolcall *t, int *progress) {
    size_t n;
    const char *open = trimmed(t->syn->call_open, &n);
    if (!n) { /* a call is a JSON object opening the answer (or following a call) */
        size_t i = 0;
        if (t->text_seen) return text_until(t, t->len, 0);
        while (i < t->len && is_space(t->buf[i])) i++;
        if (i == t->len) return 0;
        if (t->buf[i] != '{') return text_until(t, t->len, 0);
        consume(t, i);
        t->state = TC_HEAD;
        *progress = 1;
        return 0;
    }
    char *at = memmem(t->buf, t->len, open, n);
    if (at) {
        size_t i = (size_t)(at - t->buf);
        int rc = text_until(t, i, 1);
        consume(t, n);
        t->state = TC_HEAD;
        *progress = 1;
        return rc;
    }
    return text_until(t, t->len - open_prefix_tail(t), 0);
}

static int step(toolcall *t, int *progress) {
    switch (t->state) {
    case TC_TEXT: return step_text(t, progress);
    case TC_HEAD: return step_head(t, progress);
    case TC_INPUT: return step_input(t, progress);
    case TC_TAIL: return step_tail(t, progress);
    default: return step_whole(t, progress);
    }
}

int toolcall_push(toolcall *t, const char *bytes, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t cap = (t->len + n + 1) * 2;
        char *b = realloc(t->buf, cap);
        if (!b) return -1;
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, bytes, n);
    t->len += n;
    for (int progress = 1, rc; progress;) {
        progress = 0;
        if ((rc = step(t, &progress))) return rc;
    }
    return 0;
}

int toolcall_finish(toolcall *t) {
    int rc = 0;
    switch (t->state) {
    case TC_TEXT: /* an answer without calls keeps its text whole; after a
                   * call, a held opening cut off by the end is a call that
                   * never got its name: nothing to hand on */
        if (!t->n_calls) rc = put_text(t, t->buf, t->len);
        else rc = text_until(t, t->len - open_prefix_tail(t), 1);
        break;
    case TC_INPUT:
    case TC_TAIL: /* cut off: the call ends with the input it has */
        rc = put_input(t, "", 0, 1);
        if (!rc) rc = end_call(t);
        break;
    default: /* a call without a name yet: nothing to hand on */
        break;
    }
    t->len = 0;
    return rc;
}
