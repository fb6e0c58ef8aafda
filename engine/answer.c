/* answer.c - the answer's text and tool calls to the callbacks (answer.h). */
#include "engine/answer.h"

#include <string.h>

/* Text to on_text through the stop strings: 1 stops (a.status says why). */
static int text_out(answer *a, const char *s, size_t n) {
    const char *emit;
    size_t len;
    int rc = textout_push(&a->text, s, n, &emit, &len);
    if (rc < 0) a->status = ANSWER_OOM;
    else if (len && a->cb->on_text && a->cb->on_text(a->cb->ud, emit, len)) a->status = ANSWER_CANCEL;
    else if (rc == 1) a->status = ANSWER_STOP_SEQUENCE;
    return a->status != ANSWER_MORE;
}

/* What the text holds back goes out before a call starts, and at the end. */
static int text_flush(answer *a) {
    const char *emit;
    size_t len;
    textout_flush(&a->text, &emit, &len);
    if (len && a->cb->on_text && a->cb->on_text(a->cb->ud, emit, len)) a->status = ANSWER_CANCEL;
    return a->status != ANSWER_MORE;
}

static int call_part(void *ud, toolcall_event ev, const char *s, size_t n) {
    answer *a = ud;
    const engine_callbacks *cb = a->cb;
    int stop = 0;
    switch (ev) {
    case TOOLCALL_TEXT: return text_out(a, s, n);
    case TOOLCALL_START:
        if (text_flush(a)) return 1;
        stop = cb->on_tool_start && cb->on_tool_start(cb->ud, s);
        break;
    case TOOLCALL_INPUT: stop = cb->on_tool_input && cb->on_tool_input(cb->ud, s, n); break;
    case TOOLCALL_END: stop = cb->on_tool_end && cb->on_tool_end(cb->ud); break;
    }
    if (stop) a->status = ANSWER_CANCEL;
    return stop;
}

void answer_init(answer *a, const engine_gen_params *gp, const chat_tool_syntax *syn, const engine_callbacks *cb) {
    memset(a, 0, sizeof *a);
    a->cb = cb;
    a->status = ANSWER_MORE;
    a->show_thoughts = gp->thinking && cb->on_thinking;
    textout_init(&a->thought, NULL, 0);
    a->use_calls = gp->tools && gp->tools->n_tools > 0 && gp->tools->choice != CHAT_TOOL_CHOICE_NONE;
    textout_init(&a->text, gp->stop, gp->n_stop);
    toolcall_init(&a->calls, syn, call_part, a);
}

void answer_free(answer *a) {
    textout_free(&a->thought);
    textout_free(&a->text);
    toolcall_free(&a->calls);
}

/* Whole characters of a thought to on_thinking (when shown). 1 stops. */
static int thought_emit(answer *a, const char *s, size_t n, int flush) {
    const char *emit = NULL;
    size_t len = 0;
    if (flush) textout_flush(&a->thought, &emit, &len);
    else if (textout_push(&a->thought, s, n, &emit, &len) < 0) a->status = ANSWER_OOM;
    if (len && a->status == ANSWER_MORE && a->cb->on_thinking(a->cb->ud, emit, len)) a->status = ANSWER_CANCEL;
    return a->status != ANSWER_MORE;
}

/* N bytes of a thought: newlines at its start dropped, newlines at the end
 * of what came so far held back. */
static answer_status thought_push(answer *a, const char *s, size_t n) {
    if (!a->show_thoughts) return a->status;
    if (a->lead)
        for (; n && *s == '\n'; s++, n--) {}
    if (!n) return a->status;
    a->lead = 0;
    size_t body = n;
    while (body && s[body - 1] == '\n') body--;
    if (body) {
        for (; a->held_newlines > 0; a->held_newlines--)
            if (thought_emit(a, "\n", 1, 0)) return a->status;
        thought_emit(a, s, body, 0);
    }
    a->held_newlines += (int)(n - body);
    return a->status;
}

answer_status answer_think(answer *a, int open) {
    if (a->status != ANSWER_MORE || a->thinking == open) return a->status;
    a->thinking = open;
    a->lead = 1;
    a->held_newlines = 0; /* the newlines that close a thought are not part of it */
    if (!open && a->show_thoughts) thought_emit(a, NULL, 0, 1);
    return a->status;
}

/* The status after a splitter call that returned RC. */
static answer_status after(answer *a, int rc) {
    if (rc < 0) a->status = ANSWER_OOM;
    return a->status;
}

answer_status answer_push(answer *a, const char *bytes, size_t n) {
    if (a->status != ANSWER_MORE) return a->status;
    if (a->thinking) return thought_push(a, bytes, n);
    if (a->lead) /* the text after a thought */
        for (; n && *bytes == '\n'; bytes++, n--) {}
    if (!n) return a->status;
    a->lead = 0;
    if (!a->use_calls) {
        text_out(a, bytes, n);
        return a->status;
    }
    return after(a, toolcall_push(&a->calls, bytes, n));
}

answer_status answer_finish(answer *a) {
    if (a->status != ANSWER_MORE) return a->status;
    if (a->thinking && answer_think(a, 0) != ANSWER_MORE) return a->status; /* a thought cut short */
    if (a->use_calls && after(a, toolcall_finish(&a->calls)) != ANSWER_MORE) return a->status;
    text_flush(a);
    return a->status;
}

int answer_tool_calls(const answer *a) { return a->calls.n_calls; }
