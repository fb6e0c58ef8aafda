/* test_constrain.c - constrained decoding end to end.
 *
 * On the unit tests' synthetic model (random weights: it never writes JSON
 * or tool calls of its own accord; the demo model when UNIT_MODEL is not
 * set), greedy and sampled generations under an output format, and under
 * tool_choice any / tool, must give JSON valid for the schema and calls of
 * the allowed tools with valid inputs, with the fixed parts forced
 * (jump-forward). The lazy constraint of tool_choice auto starts when the
 * answer opens a call, and forces what the grammar leaves no choice about.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "engine/constrain.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "tests/unit/check.h"

/* Every string is an enum, numbers are bounded by the grammar: a random
 * model cannot wander forever inside this schema. */
#define FORMAT                                                                                                  \
    "{\"type\":\"object\",\"properties\":{\"category\":{\"enum\":[\"billing\",\"shipping\",\"other\"]},"        \
    "\"count\":{\"type\":\"integer\"},\"score\":{\"type\":\"number\"},\"urgent\":{\"type\":\"boolean\"},"       \
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\"]},\"maxItems\":3},"                          \
    "\"note\":{\"anyOf\":[{\"type\":\"null\"},{\"const\":\"n/a\"}]}},"                                           \
    "\"required\":[\"category\",\"count\",\"score\",\"urgent\",\"tags\",\"note\"],\"additionalProperties\":false}"

typedef struct {
    char text[8192], input[4096], names[256];
    size_t len, input_len;
    int starts, ends;
} out;

static void add(char *buf, size_t *len, size_t cap, const char *s, size_t n) {
    if (*len + n + 1 > cap) n = cap - *len - 1;
    memcpy(buf + *len, s, n);
    *len += n;
    buf[*len] = 0;
}

static int on_text(void *ud, const char *s, size_t n) {
    out *o = ud;
    add(o->text, &o->len, sizeof o->text, s, n);
    return 0;
}

static int on_tool_start(void *ud, const char *name) {
    out *o = ud;
    o->starts++;
    size_t len = strlen(o->names);
    add(o->names, &len, sizeof o->names, name, strlen(name));
    add(o->names, &len, sizeof o->names, ",", 1);
    o->input_len = 0;
    o->input[0] = 0;
    return 0;
}

static int on_tool_input(void *ud, const char *s, size_t n) {
    out *o = ud;
    add(o->input, &o->input_len, sizeof o->input, s, n);
    return 0;
}

static int on_tool_end(void *ud) {
    ((out *)ud)->ends++;
    return 0;
}

static void generate(engine *e, const int32_t *prompt, int n, float temperature, uint64_t seed,
                     const engine_tools *tools, const char *format, out *o, engine_result *res) {
    memset(o, 0, sizeof *o);
    engine_gen_params gp = {.max_tokens = 300, .temperature = temperature, .top_p = 1, .seed = seed,
                            .tools = tools, .format_schema = format};
    engine_callbacks cb = {.on_text = on_text, .on_tool_start = on_tool_start, .on_tool_input = on_tool_input,
                           .on_tool_end = on_tool_end, .ud = o};
    engine_generate(e, prompt, n, &gp, &cb, res);
}

static int is_enum(const cJSON *v, const char *const *allowed, int n) {
    for (int i = 0; cJSON_IsString(v) && i < n; i++)
        if (!strcmp(v->valuestring, allowed[i])) return 1;
    return 0;
}

/* The text is one JSON object valid for FORMAT. */
static int format_valid(const char *text) {
    static const char *const cats[] = {"billing", "shipping", "other"}, *const tags[] = {"a", "b"};
    cJSON *o = cJSON_Parse(text);
    const cJSON *count = cJSON_GetObjectItemCaseSensitive(o, "count");
    const cJSON *tag_list = cJSON_GetObjectItemCaseSensitive(o, "tags"), *t;
    const cJSON *note = cJSON_GetObjectItemCaseSensitive(o, "note");
    int ok = cJSON_IsObject(o) && cJSON_GetArraySize(o) == 6 &&
             is_enum(cJSON_GetObjectItemCaseSensitive(o, "category"), cats, 3) && cJSON_IsNumber(count) &&
             count->valuedouble == (double)(long long)count->valuedouble &&
             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(o, "score")) &&
             cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(o, "urgent")) && cJSON_IsArray(tag_list) &&
             cJSON_GetArraySize(tag_list) <= 3 &&
             (cJSON_IsNull(note) || (cJSON_IsString(note) && !strcmp(note->valuestring, "n/a")));
    cJSON_ArrayForEach(t, tag_list) ok = ok && is_enum(t, tags, 2);
    cJSON_Delete(o);
    return ok;
}

static const engine_tool TOOLS[] = {
    {"get_weather", "Weather of a city.",
     "{\"type\":\"object\",\"properties\":{\"unit\":{\"enum\":[\"celsius\",\"fahrenheit\"]},\"days\":{\"type\":\"integer\"}},"
     "\"required\":[\"unit\",\"days\"]}"},
    {"ping", NULL, "{\"type\":\"object\",\"properties\":{},\"additionalProperties\":false}"},
};

/* The calls made are of NAME (or of any tool when NULL), the last input valid for its tool. */
static int calls_valid(const out *o, const char *name) {
    static const char *const units[] = {"celsius", "fahrenheit"};
    if (!o->starts || o->starts != o->ends) return 0;
    cJSON *in = cJSON_Parse(o->input);
    int ok = cJSON_IsObject(in);
    const char *last = o->names + strlen(o->names) - 1;
    while (last > o->names && last[-1] != ',') last--;
    if (!strncmp(last, "get_weather,", 12))
        ok = ok && cJSON_GetArraySize(in) == 2 && is_enum(cJSON_GetObjectItemCaseSensitive(in, "unit"), units, 2) &&
             cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(in, "days"));
    else ok = ok && !strncmp(last, "ping,", 5) && cJSON_GetArraySize(in) == 0;
    if (name) ok = ok && strncmp(last, name, strlen(name)) == 0;
    cJSON_Delete(in);
    return ok;
}

static void generation(engine *e) {
    int32_t *prompt = NULL;
    int n = engine_tokenize(e, "Once upon a time", 0, &prompt);
    out o;
    engine_result res;
    for (int run = 0; run < 4; run++) {
        float temp = run ? 1.0f : 0.0f;
        generate(e, prompt, n, temp, 7 + run, NULL, FORMAT, &o, &res);
        CHECK(res.reason == ENGINE_STOP_EOS && format_valid(o.text) && res.n_forced > 0 && !o.starts,
              "output format, temperature %.0f seed %d: valid JSON (%d tokens, %d forced, %d masks, %.2f ms): %s", temp,
              7 + run, res.n_generated, res.n_forced, res.n_masks, res.grammar_ms, o.text);
    }
    engine_tools any = {.tools = TOOLS, .n_tools = 2, .choice = CHAT_TOOL_CHOICE_ANY};
    for (int run = 0; run < 3; run++) {
        float temp = run ? 1.0f : 0.0f;
        generate(e, prompt, n, temp, 11 + run, &any, NULL, &o, &res);
        /* a model that keeps calling may run into max_tokens; its calls are still whole and valid */
        int ended = res.reason == ENGINE_STOP_TOOL_USE || (res.reason == ENGINE_STOP_MAX_TOKENS && o.starts > 1);
        CHECK(ended && res.n_tool_calls == o.starts && calls_valid(&o, NULL) && !o.len,
              "tool_choice any, temperature %.0f: only calls, of the tools, inputs valid (%d calls: %s %s; %d forced)",
              temp, o.starts, o.names, o.input, res.n_forced);
    }
    engine_tools one = {.tools = TOOLS, .n_tools = 2, .choice = CHAT_TOOL_CHOICE_TOOL, .choice_name = "get_weather",
                        .single_call = 1};
    generate(e, prompt, n, 1.0f, 5, &one, NULL, &o, &res);
    CHECK(res.reason == ENGINE_STOP_TOOL_USE && o.starts == 1 && calls_valid(&o, "get_weather"),
          "tool_choice tool + disable_parallel_tool_use: one call of that tool, input valid: %s %s", o.names, o.input);
    free(prompt);

    char err[256];
    engine_tools bad = {.tools = &(engine_tool){"t", NULL, "{\"$ref\":\"#/$defs/nowhere\"}"}, .n_tools = 1};
    CHECK(engine_check_output(e, &bad, NULL, err, sizeof err) == -1 && err[0],
          "a schema whose $ref does not resolve is refused: %s", err);
    CHECK(engine_check_output(e, &any, FORMAT, err, sizeof err) == 0, "the tools and the format above are accepted");
}

/* tool_choice auto: free until the answer opens a call, then forced where the grammar leaves no choice. */
static void lazy(const char *path) {
    char err[256];
    gguf_file *f = gguf_open(path, err, sizeof err);
    tok_vocab *tv = f ? tok_vocab_load(f, err, sizeof err) : NULL;
    grammar_vocab *gv = tv ? constrain_vocab_new(tv) : NULL;
    engine_tools weather = {.tools = TOOLS, .n_tools = 1, .choice = CHAT_TOOL_CHOICE_AUTO};
    constrain *c = gv ? constrain_new(&weather, NULL, CHAT_FAMILY_CHATML, gv, tv, err, sizeof err) : NULL;
    CHECK(c != NULL, "a lazy constraint for tool_choice auto: %s", c ? "" : err);
    if (!c) goto done;
    int32_t forced[64];
    char text[512] = "";
    CHECK(constrain_forced(c, forced, 64) == 0, "auto: nothing forced before a call opens");
    CHECK(constrain_accept(c, 100, "Let me <tool", 12) == 0 && constrain_forced(c, forced, 64) == 0,
          "auto: free text, and part of an opening, force nothing");
    CHECK(constrain_accept(c, 101, "_call>", 6) == 0, "auto: the opening completed");
    int k = constrain_forced(c, forced, 64);
    for (int i = 0; i < k; i++) {
        char piece[64];
        int len = tok_piece(tv, forced[i], piece, sizeof piece);
        size_t at = strlen(text);
        if (len > 0 && (size_t)len < sizeof piece && at + (size_t)len < sizeof text) {
            memcpy(text + at, piece, (size_t)len);
            text[at + (size_t)len] = 0;
        }
    }
    CHECK(!strcmp(text, "\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \""),
          "auto: once a call opens, its fixed text is forced (one tool): %s", text);
done:
    constrain_free(c);
    grammar_vocab_free(gv);
    tok_vocab_free(tv);
    gguf_close(f);
}

int main(void) {
    const char *path = getenv("UNIT_MODEL");
    if (!path || !*path) path = "models/ilpd-demo-F16.gguf";
    char err[512];
    engine_params p = {.model_path = path, .n_threads = 2, .device = ENGINE_DEVICE_CPU};
    engine *e = engine_open(&p, err, sizeof err);
    CHECK(e != NULL, "open %s: %s", path, e ? "" : err);
    if (e) generation(e);
    engine_close(e);
    lazy(path);
    CHECK_DONE();
}
