/* test_render.c - the Messages API response shapes of server/render.h
 * against the Messages API as the SDKs read it: field names and order, null
 * stop_sequence, usage, SSE framing, error bodies, and each job outcome's
 * status, error type and retry headers. Then every shape with each of its
 * allocations failing: NULL or the whole text, never a part of it. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"
#include "server/render.h"

/* 1 when OBJ's members are named, in order, as the comma-separated KEYS. */
static int keys_are(const cJSON *obj, const char *keys) {
    char buf[256] = "";
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next) {
        if (buf[0]) strncat(buf, ",", sizeof buf - strlen(buf) - 1);
        strncat(buf, c->string ? c->string : "?", sizeof buf - strlen(buf) - 1);
    }
    return obj && !strcmp(buf, keys);
}

/* The JSON of SSE event TEXT when it is framed as event NAME, else NULL;
 * frees TEXT. The caller deletes the result. */
static cJSON *sse_data(char *text, const char *name) {
    char head[64];
    snprintf(head, sizeof head, "event: %s\ndata: ", name);
    size_t n = text ? strlen(text) : 0, h = strlen(head);
    cJSON *data = NULL;
    if (text && n > h + 2 && !strncmp(text, head, h) && !strcmp(text + n - 2, "\n\n") && !memchr(text + h, '\n', n - h - 2))
        data = cJSON_Parse(text + h);
    free(text);
    return data;
}

/* 1 when TEXT (freed) equals WANT. */
static int text_is(char *text, const char *want) {
    int ok = text && !strcmp(text, want);
    if (!ok) printf("# got %s\n# want %s\n", text ? text : "(null)", want);
    free(text);
    return ok;
}

static const char *str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : -999;
}

static const render_message_info INFO = {.id = "msg_0123", .model = "claude-x", .input_tokens = 11};

/* One text block holding T. */
#define TEXT_BLOCK(t) (&(render_block){RENDER_BLOCK_TEXT, (t), NULL, NULL}), 1

/* A text block, then calls of get_weather (its input: a city) and of nothing (an input cut off). */
static const render_block CALLS[] = {
    {RENDER_BLOCK_TEXT, "Checking.", NULL, NULL},
    {RENDER_BLOCK_TOOL_USE, "{\"city\": \"Paris\"}", "toolu_01", "get_weather"},
    {RENDER_BLOCK_TOOL_USE, "{\"a\": ", "toolu_02", "noop"},
};

static void message_shapes(void) {
    render_stop stop = {.reason = "end_turn", .sequence = NULL, .output_tokens = 6};
    char *body = render_message(&INFO, TEXT_BLOCK("Hi \"there\"\n"), &stop);
    cJSON *m = body ? cJSON_Parse(body) : NULL;
    CHECK(keys_are(m, "type,id,role,model,content,stop_reason,stop_sequence,usage"),
          "message: the members of the message object, in the server's order");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content"), *block = cJSON_GetArrayItem(content, 0);
    CHECK(str(m, "type") && !strcmp(str(m, "type"), "message") && !strcmp(str(m, "id"), "msg_0123") &&
              !strcmp(str(m, "role"), "assistant") && !strcmp(str(m, "model"), "claude-x"),
          "message: type message, the id, role assistant, the model as requested");
    CHECK(cJSON_GetArraySize(content) == 1 && keys_are(block, "type,text") && !strcmp(str(block, "type"), "text") &&
              !strcmp(str(block, "text"), "Hi \"there\"\n"),
          "message: one text block holding the text (escaped on the wire)");
    CHECK(str(m, "stop_reason") && !strcmp(str(m, "stop_reason"), "end_turn") &&
              cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "stop_sequence")),
          "message: stop_reason, and stop_sequence null when no stop string matched");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(m, "usage");
    CHECK(keys_are(usage, "input_tokens,cache_creation_input_tokens,cache_read_input_tokens,output_tokens") &&
              num(usage, "input_tokens") == 11 && num(usage, "cache_creation_input_tokens") == 0 &&
              num(usage, "cache_read_input_tokens") == 0 && num(usage, "output_tokens") == 6,
          "message: usage has input_tokens, the prompt cache's two counts (0) and output_tokens");
    cJSON_Delete(m);
    free(body);

    stop = (render_stop){.reason = "stop_sequence", .sequence = "END", .output_tokens = 3};
    CHECK(text_is(render_message(&INFO, TEXT_BLOCK("abc"), &stop),
                  "{\"type\":\"message\",\"id\":\"msg_0123\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[{\"type\":"
                  "\"text\",\"text\":\"abc\"}],\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\",\"usage\":{\"input_tokens\":"
                  "11,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":3}}"),
          "message: the exact bytes, with the matched stop_sequence");
    CHECK(text_is(render_message(&INFO, NULL, 0, &stop),
                  "{\"type\":\"message\",\"id\":\"msg_0123\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[{\"type\":"
                  "\"text\",\"text\":\"\"}],\"stop_reason\":\"stop_sequence\",\"stop_sequence\":\"END\",\"usage\":{\"input_tokens\":"
                  "11,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":3}}"),
          "message: no text is one empty text block");
    stop = (render_stop){.reason = "tool_use", .sequence = NULL, .output_tokens = 9};
    CHECK(text_is(render_message(&INFO, CALLS, 3, &stop),
                  "{\"type\":\"message\",\"id\":\"msg_0123\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[{\"type\":"
                  "\"text\",\"text\":\"Checking.\"},{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"get_weather\",\"input\":{"
                  "\"city\":\"Paris\"}},{\"type\":\"tool_use\",\"id\":\"toolu_02\",\"name\":\"noop\",\"input\":{}}],\"stop_reason\":"
                  "\"tool_use\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":11,\"cache_creation_input_tokens\":0,"
                  "\"cache_read_input_tokens\":0,\"output_tokens\":9}}"),
          "message: text and tool_use blocks in order, each input an object (a cut-off input is {})");
    static const render_block numbers[] = {
        {RENDER_BLOCK_TOOL_USE, "{ \"qty\" : 3024499413350250, \"s\": \"a \\\" b\", \"x\": [1e5, -0.5] }", "toolu_03", "n"},
        {RENDER_BLOCK_TOOL_USE, "{\"qty\": 1.}", "toolu_04", "n"},
        {RENDER_BLOCK_TOOL_USE, "{\"s\": \"\\q\"}", "toolu_05", "n"},
        {RENDER_BLOCK_TOOL_USE, "{\"n\": -inf}", "toolu_06", "n"}};
    body = render_message(&INFO, numbers, 4, &stop);
    CHECK(body && strstr(body, "\"input\":{\"qty\":3024499413350250,\"s\":\"a \\\" b\",\"x\":[1e5,-0.5]}}") &&
              strstr(body, "\"toolu_04\",\"name\":\"n\",\"input\":{}}") &&
              strstr(body, "\"toolu_05\",\"name\":\"n\",\"input\":{}}") &&
              strstr(body, "\"toolu_06\",\"name\":\"n\",\"input\":{}}"),
          "message: an input keeps the model's digits (no 3.02e+15), less the space between tokens; not JSON "
          "(1., \\q, -inf) is {}");
    free(body);
    static const render_block thought[] = {{RENDER_BLOCK_THINKING, "Two \"and\" two.", NULL, NULL},
                                           {RENDER_BLOCK_TEXT, "4", NULL, NULL}};
    stop = (render_stop){.reason = "end_turn", .sequence = NULL, .output_tokens = 7};
    CHECK(text_is(render_message(&INFO, thought, 2, &stop),
                  "{\"type\":\"message\",\"id\":\"msg_0123\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[{\"type\":"
                  "\"thinking\",\"thinking\":\"Two \\\"and\\\" two.\",\"signature\":\"\"},{\"type\":\"text\",\"text\":\"4\"}],"
                  "\"stop_reason\":\"end_turn\",\"stop_sequence\":null,\"usage\":{\"input_tokens\":11,"
                  "\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":7}}"),
          "message: a thinking block (its thought and an empty signature) before the text");
    char id[40];
    render_id(id, sizeof id, "toolu_");
    CHECK(strlen(id) == 30 && !strncmp(id, "toolu_", 6) && strspn(id + 6, "0123456789abcdef") == 24,
          "render_id: the prefix and 24 hex digits: %s", id);
}

static void stream_shapes(void) {
    cJSON *start = sse_data(render_sse_message_start(&INFO), "message_start");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(start, "message");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(m, "usage");
    CHECK(keys_are(start, "type,message") && !strcmp(str(start, "type"), "message_start") &&
              keys_are(m, "type,id,role,model,content,stop_reason,stop_sequence,usage"),
          "message_start: framed as an event with one data line, holding the message object");
    CHECK(cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(m, "content")) &&
              cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "content")) == 0 &&
              cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "stop_reason")) &&
              cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "stop_sequence")),
          "message_start: empty content, null stop_reason and stop_sequence");
    CHECK(keys_are(usage, "input_tokens,cache_creation_input_tokens,cache_read_input_tokens,output_tokens") &&
              num(usage, "input_tokens") == 11 && num(usage, "output_tokens") == 0,
          "message_start: usage has the real input_tokens, the cache counts and output_tokens 0");
    cJSON_Delete(start);

    CHECK(text_is(render_sse_block_start(0), "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
                                             "\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n"),
          "content_block_start: an empty text block at index 0");
    CHECK(text_is(render_sse_text_delta(0, "h\xc3\xa9llo\" world", 7), "event: content_block_delta\ndata: {\"type\":"
                                                                     "\"content_block_delta\",\"index\":0,\"delta\":{"
                                                                     "\"type\":\"text_delta\",\"text\":\"h\xc3\xa9llo\\\"\"}}\n\n"),
          "content_block_delta: a text_delta of exactly LEN bytes (UTF-8 kept, quotes escaped)");
    CHECK(text_is(render_sse_tool_use_start(1, "toolu_01", "get_weather"),
                  "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{"
                  "\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":\"get_weather\",\"input\":{}}}\n\n"),
          "content_block_start: a tool_use block with its id, name and an empty input");
    CHECK(text_is(render_sse_input_delta(1, "{\"city\": \"Pa", 11),
                  "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":"
                  "\"input_json_delta\",\"partial_json\":\"{\\\"city\\\": \\\"P\"}}\n\n"),
          "content_block_delta: an input_json_delta of exactly LEN bytes of the input's JSON text");
    CHECK(text_is(render_sse_text_delta(0, "a\nb", 3),
                  "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":"
                  "\"text_delta\",\"text\":\"a\\nb\"}}\n\n"),
          "content_block_delta: a newline in the text stays inside the one data line");
    CHECK(text_is(render_sse_block_stop(0), "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"),
          "content_block_stop");
    CHECK(text_is(render_sse_thinking_start(0), "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,"
                                                "\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"),
          "content_block_start: an empty thinking block");
    CHECK(text_is(render_sse_thinking_delta(0, "So x\ny", 5), "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                                                              "\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":"
                                                              "\"So x\\n\"}}\n\n"),
          "content_block_delta: a thinking_delta of exactly LEN bytes");
    CHECK(text_is(render_sse_signature_delta(0), "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                                                 "\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"\"}}\n\n"),
          "content_block_delta: the signature_delta that ends a thinking block (empty: nothing is signed)");
    render_stop stop = {.reason = "max_tokens", .sequence = NULL, .output_tokens = 20};
    CHECK(text_is(render_sse_message_delta(&stop), "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{"
                                                   "\"stop_reason\":\"max_tokens\",\"stop_sequence\":null},\"usage\":{"
                                                   "\"output_tokens\":20}}\n\n"),
          "message_delta: stop_reason, null stop_sequence, usage with output_tokens only");
    stop = (render_stop){.reason = "stop_sequence", .sequence = "\n\nHuman:", .output_tokens = 4};
    cJSON *md = sse_data(render_sse_message_delta(&stop), "message_delta");
    const cJSON *delta = cJSON_GetObjectItemCaseSensitive(md, "delta");
    CHECK(keys_are(delta, "stop_reason,stop_sequence") && !strcmp(str(delta, "stop_sequence"), "\n\nHuman:"),
          "message_delta: the matched stop_sequence");
    cJSON_Delete(md);
    CHECK(text_is(render_sse_message_stop(), "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), "message_stop");
    CHECK(text_is(render_sse_ping(), "event: ping\ndata: {\"type\":\"ping\"}\n\n"), "ping");
    CHECK(text_is(render_sse_error("api_error", "kernel failed"),
                  "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"kernel failed\"}}\n\n"),
          "error event: {\"type\":\"error\",\"error\":{type, message}}");
}

static void error_shapes(void) {
    char *body = render_error_body("invalid_request_error", "max_tokens: \"x\" is not an integer", "req_42");
    cJSON *o = body ? cJSON_Parse(body) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    CHECK(keys_are(o, "error,type,request_id") && !strcmp(str(o, "type"), "error") && !strcmp(str(o, "request_id"), "req_42"),
          "error body: type error and the request_id (error first, as the server has always sent it)");
    CHECK(keys_are(e, "type,message") && !strcmp(str(e, "type"), "invalid_request_error") &&
              !strcmp(str(e, "message"), "max_tokens: \"x\" is not an integer"),
          "error body: error.type and error.message");
    cJSON_Delete(o);
    free(body);
    cJSON *oom = cJSON_Parse(render_oom_error_body);
    CHECK(oom && !strcmp(str(oom, "type"), "error") &&
              !strcmp(str(cJSON_GetObjectItemCaseSensitive(oom, "error"), "type"), "api_error"),
          "the out-of-memory fallback body is an api_error");
    cJSON_Delete(oom);
}

static void outcomes(void) {
    render_error e = render_outcome(JOB_OUTCOME_DONE, NULL, 0);
    CHECK(e.status == 200 && !e.type, "outcome done: 200, no error");
    e = render_outcome(JOB_OUTCOME_OVERLOADED, NULL, 0);
    CHECK(e.status == 529 && !strcmp(e.type, "overloaded_error") && e.retry == 1,
          "outcome overloaded (queue full): 529 overloaded_error, retry-after 1 and x-should-retry true");
    e = render_outcome(JOB_OUTCOME_CANCELLED, NULL, 0);
    CHECK(e.status == 503 && !strcmp(e.type, "overloaded_error") && !strcmp(e.message, "the request was cancelled") && e.retry == 1,
          "outcome cancelled: 503 overloaded_error, retryable");
    e = render_outcome(JOB_OUTCOME_ENGINE_ERROR, "kernel rms_norm failed", 0);
    CHECK(e.status == 500 && !strcmp(e.type, "api_error") && !strcmp(e.message, "kernel rms_norm failed") && e.retry == 0,
          "outcome engine error: 500 api_error with the engine's message, x-should-retry false when a retry fails the same way");
    e = render_outcome(JOB_OUTCOME_ENGINE_ERROR, "transient", 1);
    CHECK(e.status == 500 && e.retry == -1, "outcome engine error, retryable: no retry header (the client's policy retries a 500)");
    e = render_outcome(JOB_OUTCOME_OOM, NULL, 1);
    CHECK(e.status == 500 && !strcmp(e.type, "api_error") && !strcmp(e.message, "out of memory") && e.retry == 0,
          "outcome out of memory: 500 api_error, x-should-retry false");
    e = render_outcome(JOB_OUTCOME_PENDING, NULL, 0);
    CHECK(e.status == 500 && !strcmp(e.type, "api_error"), "a job without an outcome answers 500 api_error, never 200");
}

static void other_endpoints(void) {
    CHECK(text_is(render_model("tiny", 86400), "{\"type\":\"model\",\"id\":\"tiny\",\"display_name\":\"tiny\",\"created_at\":"
                                               "\"1970-01-02T00:00:00Z\"}"),
          "model object: type, id, display_name, created_at in RFC 3339");
    CHECK(text_is(render_models("tiny", 0), "{\"data\":[{\"type\":\"model\",\"id\":\"tiny\",\"display_name\":\"tiny\",\"created_at\":"
                                            "\"1970-01-01T00:00:00Z\"}],\"has_more\":false,\"first_id\":\"tiny\",\"last_id\":"
                                            "\"tiny\"}"),
          "models list: data, has_more false, first_id, last_id");
    CHECK(text_is(render_count_tokens(42), "{\"input_tokens\":42}"), "count_tokens: {\"input_tokens\": N}");
}

/* cJSON's allocator, counting allocations and failing the one numbered
 * fail_at (from 0; -1: none). */
static long fail_at = -1, allocations;
static void *test_malloc(size_t n) { return allocations++ == fail_at ? NULL : malloc(n); }

/* Renders shape K (0.. SHAPES-1) once; the caller frees the result. */
enum { SHAPES = 20 };
static char *render_shape(int k) {
    render_stop stop = {.reason = "stop_sequence", .sequence = "END", .output_tokens = 3};
    switch (k) {
    case 0: return render_message(&INFO, TEXT_BLOCK("abc"), &stop);
    case 1: return render_sse_message_start(&INFO);
    case 2: return render_sse_block_start(0);
    case 3: return render_sse_text_delta(0, "abc", 3);
    case 4: return render_sse_block_stop(0);
    case 5: return render_sse_message_delta(&stop);
    case 6: return render_sse_message_stop();
    case 7: return render_sse_ping();
    case 8: return render_sse_error("api_error", "boom");
    case 9: return render_error_body("api_error", "boom", "req_1");
    case 10: return render_model("tiny", 0);
    case 11: return render_models("tiny", 0);
    case 12: return render_count_tokens(7);
    case 13: return render_message(&INFO, CALLS, 3, &stop);
    case 14: return render_sse_tool_use_start(1, "toolu_01", "get_weather");
    case 15: return render_sse_input_delta(1, "{}", 2);
    case 16: return render_sse_thinking_start(0);
    case 17: return render_sse_thinking_delta(0, "hm", 2);
    case 18: return render_sse_signature_delta(0);
    default: return render_message(&INFO, NULL, 0, &stop);
    }
}

static void failing_allocations(void) {
    cJSON_Hooks hooks = {.malloc_fn = test_malloc, .free_fn = free};
    cJSON_InitHooks(&hooks);
    int bad = 0, tries = 0;
    for (int k = 0; k < SHAPES; k++) {
        fail_at = -1;
        allocations = 0;
        char *want = render_shape(k);
        long needed = allocations;
        for (long n = 0; want && n < needed; n++) {
            fail_at = n;
            allocations = 0;
            char *got = render_shape(k);
            tries++;
            if (got && strcmp(got, want)) {
                printf("# shape %d, allocation %ld failed: %s\n", k, n, got);
                bad++;
            }
            free(got);
        }
        bad += !want;
        free(want);
    }
    fail_at = -1;
    cJSON_InitHooks(NULL);
    CHECK(!bad && tries > SHAPES, "every shape with each of its allocations failing in turn: NULL or the whole text (%d tries)", tries);
}

int main(void) {
    message_shapes();
    stream_shapes();
    error_shapes();
    outcomes();
    other_endpoints();
    failing_allocations();
    CHECK_DONE();
}
