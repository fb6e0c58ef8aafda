/* toolcall.h - splits a model's answer into text and tool calls.
 *
 * The answer's bytes arrive token by token. In a family's call syntax
 * (engine/chat.h, chat_tool_syntax) a call is
 *   call_open {"name": "NAME", "<args_key>": INPUT} call_close
 * and the splitter hands on, in order: the text around calls, and for each
 * call its start (the name), its INPUT as it arrives, and its end. When
 * call_open is empty (Llama 3.1), a call is a JSON object that opens the
 * answer (or follows a call). Keys in another order are understood too:
 * the call is then held whole and handed on at its end.
 *
 * Text next to calls is trimmed: whitespace before a call, after a call and
 * at the end of an answer that made calls is dropped (an answer without
 * calls comes through byte for byte). Bytes that may start call_open are
 * held back until they are known not to; when an answer that made calls
 * ends on them (cut off inside the next call's opening), they are dropped.
 * Input text is whole UTF-8 characters (invalid bytes become U+FFFD).
 */
#ifndef ILPD_TOOLCALL_H
#define ILPD_TOOLCALL_H

#include <stddef.h>

#include "engine/chat.h"
#include "engine/textout.h"

typedef enum {
    TOOLCALL_TEXT,  /* S, N: text of the answer */
    TOOLCALL_START, /* S: the tool's name, NUL-terminated (N its length) */
    TOOLCALL_INPUT, /* S, N: more of the call's input, JSON text */
    TOOLCALL_END,   /* the call is complete, or was cut off by the end of the answer */
} toolcall_event;

/* Receives the splitter's output; returns nonzero to stop (the caller cancels). */
typedef int (*toolcall_sink)(void *ud, toolcall_event ev, const char *s, size_t n);

typedef struct {
    const chat_tool_syntax *syn;
    toolcall_sink sink;
    void *ud;
    int state;            /* where the splitter is (toolcall.c) */
    char *buf;            /* bytes received and not yet handed on */
    size_t len, cap;
    int depth, in_str, esc; /* the scan of a call's input value */
    int text_seen;        /* non-space text was handed on since the last call (or the start) */
    int n_calls;          /* calls started */
    char *name;           /* the current call's name */
    textout input;        /* UTF-8 assembly of the input */
} toolcall;

void toolcall_init(toolcall *t, const chat_tool_syntax *syn, toolcall_sink sink, void *ud);
void toolcall_free(toolcall *t);
/* Adds N bytes of the answer. Returns 0, 1 when the sink asked to stop, or
 * -1 when out of memory. */
int toolcall_push(toolcall *t, const char *bytes, size_t n);
/* The answer has ended: hands on what is held (text; a call cut off ends).
 * Same returns. */
int toolcall_finish(toolcall *t);
/* 1 while inside a call (its opening seen, its end not yet). */
int toolcall_in_call(const toolcall *t);

#endif
