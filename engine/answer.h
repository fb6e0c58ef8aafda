/* answer.h - where the text of the sampled tokens goes: through the stop
 * strings and the UTF-8 assembly (engine/textout.h) to on_text and, when
 * the request has tools, first through the split into text and tool calls
 * (engine/toolcall.h), the calls going to the on_tool_* callbacks. */
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
} answer;

/* Tools are parsed when GP has tools and a choice other than NONE, in the
 * call syntax SYN. */
void answer_init(answer *a, const engine_gen_params *gp, const chat_tool_syntax *syn, const engine_callbacks *cb);
void answer_free(answer *a);
/* N more bytes of the answer (a token's piece). */
answer_status answer_push(answer *a, const char *bytes, size_t n);
/* The answer has ended (not after a stop string): what is held is handed on. */
answer_status answer_finish(answer *a);
/* Tool calls the answer has started. */
int answer_tool_calls(const answer *a);

#endif
