/* test_answer.c - the answer's thoughts (engine/answer.h): between
 * answer_think(a, 1) and answer_think(a, 0) text goes to on_thinking when
 * the request enabled thinking and nowhere otherwise, without the newlines
 * that open and close the thought or open the text after it, never through
 * the stop strings; the text around it is unchanged. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/answer.h"
#include "tests/unit/check.h"

typedef struct {
    char text[256], thought[256], calls[256];
    int order_ok; /* no thought after text */
} sink;

static void append(char *dst, const char *s, size_t n) {
    size_t have = strlen(dst);
    if (have + n < 256) {
        memcpy(dst + have, s, n);
        dst[have + n] = 0;
    }
}

static int on_text(void *ud, const char *s, size_t n) {
    append(((sink *)ud)->text, s, n);
    return 0;
}

static int on_tool_start(void *ud, const char *name) {
    append(((sink *)ud)->calls, name, strlen(name));
    append(((sink *)ud)->calls, "(", 1);
    return 0;
}

static int on_tool_input(void *ud, const char *s, size_t n) {
    append(((sink *)ud)->calls, s, n);
    return 0;
}

static int on_tool_end(void *ud) {
    append(((sink *)ud)->calls, ")", 1);
    return 0;
}

static int on_thinking(void *ud, const char *s, size_t n) {
    sink *k = ud;
    if (k->text[0]) k->order_ok = 0;
    append(k->thought, s, n);
    return 0;
}

/* Feeds PIECES (NULL-terminated; "<think>" and "</think>" stand for the
 * tokens) through an answer with THINKING, STOP (may be NULL) and TOOLS
 * (may be NULL); fills K. Returns the last status. */
static answer_status run_with(sink *k, int thinking, const char *stop, const engine_tools *tools,
                              const char *const *pieces) {
    memset(k, 0, sizeof *k);
    k->order_ok = 1;
    const char *stops[1] = {stop};
    engine_gen_params gp = {.thinking = thinking, .stop = stops, .n_stop = stop ? 1 : 0, .tools = tools};
    engine_callbacks cb = {.on_text = on_text, .on_thinking = on_thinking, .on_tool_start = on_tool_start,
                           .on_tool_input = on_tool_input, .on_tool_end = on_tool_end, .ud = k};
    answer a;
    answer_init(&a, &gp, chat_tool_syntax_of(CHAT_FAMILY_QWEN3), &cb);
    answer_status st = ANSWER_MORE;
    for (int i = 0; pieces[i] && st == ANSWER_MORE; i++) {
        if (!strcmp(pieces[i], "<think>")) st = answer_think(&a, 1);
        else if (!strcmp(pieces[i], "</think>")) st = answer_think(&a, 0);
        else st = answer_push(&a, pieces[i], strlen(pieces[i]));
    }
    if (st == ANSWER_MORE) st = answer_finish(&a);
    answer_free(&a);
    return st;
}

static answer_status run(sink *k, int thinking, const char *stop, const char *const *pieces) {
    return run_with(k, thinking, stop, NULL, pieces);
}

int main(void) {
    sink k;
    static const char *const qwen[] = {"<think>", "\n", "Two", " and\n\ntwo", ".\n", "</think>", "\n\n", "Four", ".", NULL};
    run(&k, 1, NULL, qwen);
    CHECK(!strcmp(k.thought, "Two and\n\ntwo.") && !strcmp(k.text, "Four.") && k.order_ok,
          "thinking on: the thought without its opening and closing newlines, then the text without its leading "
          "ones [%s] [%s]",
          k.thought, k.text);
    run(&k, 0, NULL, qwen);
    CHECK(!k.thought[0] && !strcmp(k.text, "Four."), "thinking off: the thought is dropped, the text is the same [%s]",
          k.text);

    static const char *const stop_inside[] = {"<think>", "say END now", "</think>", "ok END more", NULL};
    answer_status st = run(&k, 1, "END", stop_inside);
    CHECK(st == ANSWER_STOP_SEQUENCE && !strcmp(k.thought, "say END now") && !strcmp(k.text, "ok "),
          "stop strings do not apply to the thought, only to the text [%s] [%s]", k.thought, k.text);

    static const char *const utf8[] = {"<think>", "caf\xc3", "\xa9\n", "\n", "x", NULL};
    run(&k, 1, NULL, utf8);
    CHECK(!strcmp(k.thought, "caf\xc3\xa9\n\nx") && !k.text[0],
          "a thought cut short by the end: whole characters, newlines inside kept [%s]", k.thought);

    static const char *const plain[] = {"\n", "Hi", "\n", NULL};
    run(&k, 1, NULL, plain);
    CHECK(!strcmp(k.text, "\nHi\n") && !k.thought[0], "no thought: the text as it came, newlines and all");

    static const char *const stray[] = {"a", "</think>", "b", "<think>", "c", "<think>", "</think>", "d", NULL};
    run(&k, 1, NULL, stray);
    CHECK(!strcmp(k.text, "abd") && !strcmp(k.thought, "c"),
          "a close without an open changes nothing; an open inside a thought neither [%s] [%s]", k.text, k.thought);

    static const chat_tool f = {.name = "get_weather", .schema_json = "{}"};
    static const engine_tools tools = {.tools = &f, .n_tools = 1};
    static const char *const call[] = {"<think>", "\nThey want Paris.\n", "</think>", "\n\n", "<tool_call>",
                                       "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n",
                                       "</tool_call>", NULL};
    run_with(&k, 1, NULL, &tools, call);
    CHECK(!strcmp(k.thought, "They want Paris.") && !k.text[0] &&
              !strcmp(k.calls, "get_weather({\"city\": \"Paris\"})"),
          "with tools: the thought, then the call parsed from the text after it [%s] [%s] [%s]", k.thought, k.text,
          k.calls);
    CHECK_DONE();
}
