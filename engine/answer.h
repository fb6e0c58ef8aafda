/* answer.h - where the text of the sampled tokens goes: through the stop
 * strings and the UTF-8 assembly (engine/textout.h) to on_text and, when
 * the request has tools, first through the split into text and tool calls
 * (engine/toolcall.h), the calls going to the on_tool_* callbacks.
 *
 * Thinking: between answer_think(a, 1) and answer_think(a, 0) (the model's
 * <think> and </think> tokens) the text is a thought: it goes, as whole
 * UTF-8 characters and without stop strings, to on_thinking when the
 * request enabled thinking, and nowhere otherwise. As Qwen3's template
 * reads a thought back, the newlines that open and close it are not part of
 * it, nor are those that open the text after it. */
#ifndef ILPD_ANSWER_H
#define ILPD_ANSWER_H

#include <stddef.h>

#include "engine/engine.h"
#include "engine/textout.h"
#include "engine/toolcall.h"

typedef enum {
    ANSWER_MORE,          /* go on */
    ANSWER_STOP_SEQUENCE, /* a stop string matched (text.stop_index says which) */
    ANSWER_CANCEL,        /* a callback asked to stop */
    ANSWER_OOM,
} answer_status;

typedef struct {
    const engine_callbacks *cb;
    textout text;
    toolcall calls;
    int use_calls;        /* the request has tools: calls are parsed */
    answer_status status;
    textout thought;      /* the thought's UTF-8 assembly */
    int thinking;         /* inside <think> ... </think> */
    int show_thoughts;    /* the request enabled thinking: thoughts go to on_thinking */
    int lead;             /* newlines here are dropped (the start of a thought, or of the text after one) */
    int held_newlines;    /* newlines of a thought held back: its end, unless more follows */
} answer;

/* Tools are parsed when GP has tools and a choice other than NONE, in the
 * call syntax SYN. */
void answer_init(answer *a, const engine_gen_params *gp, const chat_tool_syntax *syn, const engine_callbacks *cb);
void answer_free(answer *a);
/* N more bytes of the answer (a token's piece). */
answer_status answer_push(answer *a, const char *bytes, size_t n);
/* The answer has ended (not after a stop string): what is held is handed on. */
answer_status answer_finish(answer *a);
/* The model opened (OPEN 1) or closed (0) a thought; a close without an
 * open (or an open inside one) changes nothing. */
answer_status answer_think(answer *a, int open);
/* Tool calls the answer has started. */
int answer_tool_calls(const answer *a);

#endif
