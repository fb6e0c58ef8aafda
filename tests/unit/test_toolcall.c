/* test_toolcall.c - the answer split into text and tool calls: each answer
 * fed whole, byte by byte and in seeded random pieces gives one transcript
 * of events, and that transcript is the expected one. */
#include <stdint.h>
#include <string.h>

#include "engine/chat.h"
#include "engine/toolcall.h"
#include "engine/utf8.h"
#include "tests/unit/check.h"

typedef struct {
    char out[4096];
    size_t len;
    int stop_after; /* the sink asks to stop at this event (0: never) */
    int n_events, last;
    int split_utf8; /* an INPUT event was not whole UTF-8 */
} transcript;

/* Writes events as T:text| S:name| I:input| E| (consecutive TEXT and INPUT
 * events merged, so that the transcript does not depend on the pieces). */
static int sink(void *ud, toolcall_event ev, const char *s, size_t n) {
    transcript *t = ud;
    static const char tag[] = {'T', 'S', 'I', 'E'};
    if (t->n_events && t->last == (int)ev && (ev == TOOLCALL_TEXT || ev == TOOLCALL_INPUT)) {
        t->len--; /* continue the previous event: drop its '|' */
    } else {
        t->out[t->len++] = tag[ev];
        if (ev != TOOLCALL_END) t->out[t->len++] = ':';
    }
    if (ev == TOOLCALL_INPUT && utf8_valid_prefix(s, n) != n) t->split_utf8 = 1;
    memcpy(t->out + t->len, s, n);
    t->len += n;
    t->out[t->len++] = '|';
    t->out[t->len] = 0;
    t->last = (int)ev;
    t->n_events++;
    return t->stop_after && t->n_events >= t->stop_after;
}

static uint64_t rng = 42;
static size_t rand_below(size_t n) {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return (size_t)(rng >> 33) % n;
}

/* Feeds ANSWER in pieces of MODE (0 whole, 1 bytes, 2 random) through a
 * splitter of FAMILY; returns the transcript. */
static void run(chat_family family, const char *answer, int mode, transcript *tr) {
    toolcall tc;
    memset(tr, 0, sizeof *tr);
    toolcall_init(&tc, chat_tool_syntax_of(family), sink, tr);
    size_t n = strlen(answer);
    for (size_t i = 0; i < n;) {
        size_t k = mode == 0 ? n : mode == 1 ? 1 : 1 + rand_below(6);
        if (k > n - i) k = n - i;
        if (toolcall_push(&tc, answer + i, k)) break;
        i += k;
    }
    toolcall_finish(&tc);
    toolcall_free(&tc);
}

static void expect_split(const char *name, chat_family family, const char *answer, const char *want) {
    transcript tr;
    for (int mode = 0; mode < 3; mode++) {
        run(family, answer, mode, &tr);
        CHECK(!strcmp(tr.out, want) && !tr.split_utf8, "%s (%s pieces): %s", name,
              mode == 0 ? "whole" : mode == 1 ? "byte" : "random", tr.out);
    }
}

int main(void) {
    chat_family h = CHAT_FAMILY_CHATML, l3 = CHAT_FAMILY_LLAMA3;
    expect_split("plain text comes through byte for byte", h, "  Hello <b>world</b>\n\n", "T:  Hello <b>world</b>\n\n|");
    expect_split("a held prefix of the opening that is not one is text", h, "a <tool_ b", "T:a <tool_ b|");
    expect_split("an answer ending in part of an opening keeps it", h, "see <tool_c", "T:see <tool_c|");
    expect_split("one call", h, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
                 "S:get_weather|I:{\"city\": \"Paris\"}|E|");
    expect_split("text, then two calls, whitespace around them dropped", h,
                 "Let me check.\n\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"b\", \"arguments\": {}}\n</tool_call>\n",
                 "T:Let me check.|S:a|I:{\"x\": [1, {\"y\": \"}\"}]}|E|S:b|I:{}|E|");
    expect_split("escapes in the name and braces in strings", h,
                 "<tool_call>{\"name\":\"q\\u0041\",\"arguments\":{\"s\":\"a\\\"}b\"}}</tool_call>",
                 "S:qA|I:{\"s\":\"a\\\"}b\"}|E|");
    expect_split("keys in the other order: the call is handed on whole", h,
                 "<tool_call>\n{\"arguments\": {\"n\": 2}, \"name\": \"f\"}\n</tool_call>", "S:f|I:{\"n\":2}|E|");
    expect_split("a malformed call is text", h, "<tool_call>\n{\"nope\": 1}\n</tool_call>", "T:<tool_call>\n{\"nope\": 1}\n</tool_call>|");
    expect_split("a call cut off in its input ends with what it has", h,
                 "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"x", "S:f|I:{\"a\": \"x|E|");
    expect_split("a call cut off before its name gives nothing", h, "Hi <tool_call>\n{\"na", "T:Hi|");
    expect_split("multi-byte input characters stay whole", h,
                 "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"c\": \"\xC3\xA9t\xC3\xA9 \xE2\x82\xAC\"}}\n</tool_call>",
                 "S:f|I:{\"c\": \"\xC3\xA9t\xC3\xA9 \xE2\x82\xAC\"}|E|");
    expect_split("a next call cut off inside its opening gives nothing", h,
                 "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n<tool_", "S:f|I:{}|E|");
    expect_split("text after a call ending in part of an opening keeps the text", h,
                 "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> Done <tool", "S:f|I:{}|E|T:Done|");
    expect_split("text after a call", h, "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>\n\nDone.  ",
                 "S:f|I:{}|E|T:Done.|");
    expect_split("llama3: a JSON object opening the answer is a call", l3,
                 "\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}",
                 "S:get_weather|I:{\"city\": \"Oslo\"}|E|");
    expect_split("llama3: text first means no call", l3, "Sure: {\"name\": \"x\"}", "T:Sure: {\"name\": \"x\"}|");
    expect_split("llama3: leading whitespace of a text answer is kept", l3, "\n Hello", "T:\n Hello|");

    transcript tr = {0};
    toolcall tc;
    tr.stop_after = 2;
    toolcall_init(&tc, chat_tool_syntax_of(h), sink, &tr);
    const char *a = "Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"k\": 1}}</tool_call>";
    int rc = toolcall_push(&tc, a, strlen(a));
    CHECK(rc == 1 && !strcmp(tr.out, "T:Hi|S:f|"), "a sink's stop ends the push at once: rc %d, %s", rc, tr.out);
    CHECK(toolcall_in_call(&tc), "the splitter is inside the call it stopped in");
    toolcall_free(&tc);
    CHECK_DONE();
}
