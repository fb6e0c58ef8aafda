/* messages.h - parsing and validating Messages API request bodies
 * (Anthropic's Messages API; README, "The server") into what the engine needs. */
#ifndef ILPD_MESSAGES_H
#define ILPD_MESSAGES_H

#include <stddef.h>

#include "engine/engine.h"

#define MSG_MAX_STOP 64

typedef struct {
    char *model;
    int max_tokens;          /* 0 for count_tokens */
    char *system;            /* NULL when none */
    engine_message *msgs;    /* texts and parts owned by the request; a content given as blocks is
                                parts (thinking blocks dropped), a string content is text */
    int n_msgs;
    engine_tools tools;      /* tools and tool_choice; arrays and strings owned by the request */
    float temperature, top_p;
    int top_k;
    char *stop[MSG_MAX_STOP];
    int n_stop;
    int stream;
    char *format_schema;     /* output_config.format's JSON schema as text (freed with cJSON_free), or NULL */
    int cache_hint;          /* a cache_control breakpoint in system, tools or messages */
    double cache_ttl_s;      /* the longest of their TTLs: 300 ("5m", the default) or 3600 ("1h"); 0 without */
    int thinking;            /* thinking.type enabled or adaptive (budget_tokens is checked, not enforced) */
} msg_request;

/* An error for the client: HTTP status, Anthropic error type, message. */
typedef struct {
    int status;
    const char *type;
    char message[512];
} msg_error;

/* Parses BODY (LEN bytes). COUNT_ONLY: the count_tokens shape (no
 * max_tokens). Returns 0 with REQ filled (free it with msg_request_free), or
 * -1 with ERR filled (400 invalid_request_error for every problem with the
 * body, naming the field) and nothing left to free. */
int msg_parse(const char *body, size_t len, int count_only, int max_depth, msg_request *req, msg_error *err);
/* Frees what REQ owns and zeroes it. */
void msg_request_free(msg_request *req);

#endif
