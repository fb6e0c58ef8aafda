/* render.h - every response shape of the Messages API
 * (Anthropic's, as its SDKs read them): the message object, each SSE event, the
 * error body, the models and count_tokens bodies, and the mapping from a
 * job's outcome to HTTP status, error type and retry headers.
 *
 * Plain data in, text out: no connection, no job, no locking. Every
 * function returning char * returns a NUL-terminated string that the caller
 * owns and frees, or NULL when out of memory. */
#ifndef ILPD_RENDER_H
#define ILPD_RENDER_H

#include <stddef.h>

#include "server/outcome.h"

/* What a message object says about the request it answers. */
typedef struct {
    const char *id;    /* msg_… */
    const char *model; /* echoed as requested */
    int input_tokens;      /* prompt tokens not read from the prompt cache */
    int cache_read;        /* cache_read_input_tokens */
    int cache_creation;    /* cache_creation_input_tokens */
} render_message_info;

/* How a generation stopped. */
typedef struct {
    const char *reason;   /* stop_reason: "end_turn", "max_tokens", … */
    const char *sequence; /* the stop string that matched, or NULL (null on the wire) */
    int output_tokens;
} render_stop;

/* An error answer. MESSAGE is borrowed. */
typedef struct {
    int status;          /* HTTP status (200 and no TYPE: not an error) */
    const char *type;    /* error.type, e.g. "api_error" */
    const char *message; /* error.message */
    int retry;           /* -1: no retry header; 0: x-should-retry: false;
                            N > 0: x-should-retry: true and retry-after: N */
} render_error;

/* One content block of an answer. A thinking block's signature is always
 * "": this server signs nothing (thinking blocks sent back are not put into
 * the prompt anyway, so nothing needs verifying). */
typedef enum { RENDER_BLOCK_TEXT, RENDER_BLOCK_TOOL_USE, RENDER_BLOCK_THINKING } render_block_type;

typedef struct {
    render_block_type type;
    const char *text; /* TEXT, THINKING: the text; TOOL_USE: the input as JSON text (not an object: {} is sent) */
    const char *id;   /* TOOL_USE: toolu_… */
    const char *name; /* TOOL_USE: the tool */
} render_block;

/* The non-streaming answer: the message object with the N BLOCKS (none:
 * one empty text block). */
char *render_message(const render_message_info *m, const render_block *blocks, int n, const render_stop *stop);

/* One SSE event each, framed as "event: NAME\ndata: JSON\n\n". */
char *render_sse_message_start(const render_message_info *m);
char *render_sse_block_start(int index);                              /* a text block */
char *render_sse_text_delta(int index, const char *text, size_t len); /* LEN bytes of TEXT */
char *render_sse_tool_use_start(int index, const char *id, const char *name); /* a tool_use block */
char *render_sse_input_delta(int index, const char *json, size_t len); /* LEN bytes of its input */
char *render_sse_thinking_start(int index);                              /* a thinking block */
char *render_sse_thinking_delta(int index, const char *text, size_t len); /* LEN bytes of the thought */
char *render_sse_signature_delta(int index); /* the thinking block's signature, before its stop */
char *render_sse_block_stop(int index);
char *render_sse_message_delta(const render_stop *stop);
char *render_sse_message_stop(void);
char *render_sse_ping(void);
char *render_sse_error(const char *type, const char *message);

/* The error body {"type":"error","error":{…},"request_id":…} of an HTTP
 * error answer. */
char *render_error_body(const char *type, const char *message, const char *request_id);
/* The body to send when render_error_body itself runs out of memory. */
extern const char render_oom_error_body[];

/* What a job that ended with OUTCOME answers. ENGINE_MESSAGE and RETRYABLE
 * are the engine's, for JOB_OUTCOME_ENGINE_ERROR. JOB_OUTCOME_DONE gives
 * status 200 and no type. The message is static or ENGINE_MESSAGE. */
render_error render_outcome(job_outcome outcome, const char *engine_message, int retryable);

/* Writes PREFIX and 24 random hex digits into OUT (N bytes): the ids of
 * messages (msg_), requests (req_) and tool calls (toolu_). */
void render_id(char *out, size_t n, const char *prefix);

/* GET /v1/models/{id}: the one model NAME, created at CREATED_AT (unix s). */
char *render_model(const char *name, long long created_at);
/* GET /v1/models: the list holding that one model. */
char *render_models(const char *name, long long created_at);
/* POST /v1/messages/count_tokens: {"input_tokens": N}. */
char *render_count_tokens(int input_tokens);

#endif
