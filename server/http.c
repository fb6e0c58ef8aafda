/* http.c - routes, auth, limits and headers over libmicrohttpd (internal
 * polling thread with poll(); connections suspended while their job waits).
 * Response bodies come from server/render.h. */
#include "server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/conntrack.h"
#include "engine/log.h"
#include "probe/mask.h"
#include "server/messages.h"
#include "server/metrics.h"
#include "server/ratelimit.h"
#include "server/render.h"

typedef enum { ROUTE_NONE, ROUTE_MESSAGES, ROUTE_COUNT, ROUTE_MODELS, ROUTE_MODEL, ROUTE_HEALTH, ROUTE_METRICS } route_id;

static const char *route_names[] = {"other", "messages", "count_tokens", "models", "models", "health", "metrics"};

/* Per-request state (MHD's con_cls). */
typedef struct {
    route_id route;
    int method_ok;
    char *body;
    size_t len, cap;
    int too_large;
    job *job;
    int status;
    double t0;
    char request_id[40];
    uint64_t tenant;    /* the prompt cache's key: 1 + the API key's index, 0 without keys */
} req_ctx;

static http_state *S;
static ratelimit *RL; /* NULL: no rate limit */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static route_id route_of(const char *url, const char *method, int *method_ok) {
    int get = !strcmp(method, "GET") || !strcmp(method, "HEAD"), post = !strcmp(method, "POST");
    route_id r = ROUTE_NONE;
    if (!strcmp(url, "/v1/messages")) r = ROUTE_MESSAGES;
    else if (!strcmp(url, "/v1/messages/count_tokens")) r = ROUTE_COUNT;
    else if (!strcmp(url, "/v1/models")) r = ROUTE_MODELS;
    else if (!strncmp(url, "/v1/models/", 11) && url[11]) r = ROUTE_MODEL;
    else if (!strcmp(url, "/health")) r = ROUTE_HEALTH;
    else if (!strcmp(url, "/metrics")) r = ROUTE_METRICS;
    *method_ok = r == ROUTE_MESSAGES || r == ROUTE_COUNT ? post : get;
    return r;
}

/* Adds the layer headers (x-layer-status, x-layer-mask, x-layer-hint-status; README, "The server"). */
static void layer_headers(struct MHD_Response *resp, const uint8_t *mask, const char *status, const char *hint) {
    const engine_info *in = engine_get_info(S->engine);
    uint8_t wire[MASK_WIRE_BYTES];
    char b64[MASK_B64_LEN + 1];
    mask_to_wire(mask, in->n_layers, wire);
    mask_encode_b64(wire, b64);
    MHD_add_response_header(resp, "x-layer-status", status);
    MHD_add_response_header(resp, "x-layer-mask", b64);
    MHD_add_response_header(resp, "x-layer-hint-status", hint);
}

/* The mode a request asks for in x-layer-mode (lossless, approximate, off);
 * the configured default when the header is absent or names no mode (like
 * a hint, the header is a wish that never fails a request). */
static engine_skip_mode request_mode(struct MHD_Connection *c) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-layer-mode");
    int m = v ? engine_skip_mode_parse(v) : -1;
    return m < 0 ? (engine_skip_mode)S->cfg->skip_mode : (engine_skip_mode)m;
}

/* x-layer-mode (the mode the request ran in) and, once the generation is
 * over (a whole answer, not a stream's first bytes): Server-Timing (ttft:
 * the prompt and the first token; decode: the tokens after it, in ms),
 * in lossless mode x-layer-draft: ACCEPTED/DRAFTED tokens, and in
 * approximate mode, when the gate ran every layer from an answer token on,
 * x-layer-gated: that token's index. */
static void mode_headers(struct MHD_Response *resp, engine_skip_mode mode, const engine_result *done) {
    MHD_add_response_header(resp, "x-layer-mode", engine_skip_mode_name(mode));
    if (!done) return;
    char v[96];
    double decode = done->n_generated > 0 ? done->last_token_ms - done->ttft_ms : 0;
    snprintf(v, sizeof v, "ttft;dur=%.3f, decode;dur=%.3f", done->n_generated > 0 ? done->ttft_ms : done->total_ms,
             decode > 0 ? decode : 0);
    MHD_add_response_header(resp, "server-timing", v);
    if (mode == ENGINE_SKIP_APPROXIMATE && done->gated_at >= 0) {
        snprintf(v, sizeof v, "%d", done->gated_at);
        MHD_add_response_header(resp, "x-layer-gated", v);
    }
    if (mode != ENGINE_SKIP_LOSSLESS) return;
    snprintf(v, sizeof v, "%d/%d", done->n_accepted, done->n_drafted);
    MHD_add_response_header(resp, "x-layer-draft", v);
}

/* Layer headers for a /v1/messages answer that ran no generation. */
static void default_layer_headers(struct MHD_Response *resp, struct MHD_Connection *c) {
    if (!S->engine) return;
    const engine_info *in = engine_get_info(S->engine);
    uint8_t full[MASK_MAX_LAYERS], wire[MASK_WIRE_BYTES];
    memset(full, 1, sizeof full);
    const char *hint = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-layer-hint");
    const char *hs = !hint ? "absent" : mask_decode_b64_for(hint, strlen(hint), in->n_layers, wire) ? "invalid" : "overridden";
    layer_headers(resp, full, in->probe_loaded ? "full" : "off", hs);
    mode_headers(resp, request_mode(c), NULL);
}

/* A response with BODY (copied), its content type and request-id; records
 * STATUS for the log. Returns NULL when out of memory. */
static struct MHD_Response *body_response(req_ctx *r, int status, const char *ctype, const char *body, size_t len) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return NULL;
    MHD_add_response_header(resp, "content-type", ctype);
    MHD_add_response_header(resp, "request-id", r->request_id);
    r->status = status;
    return resp;
}

static enum MHD_Result queue(struct MHD_Connection *c, int status, struct MHD_Response *resp) {
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return rc;
}

/* Anthropic-shaped error. RETRY: -1 no header, 0 "x-should-retry: false",
 * N > 0 "true" plus "retry-after: N". */
static enum MHD_Result send_error(struct MHD_Connection *c, req_ctx *r, int status, const char *type, const char *msg,
                                  int retry) {
    char *js = render_error_body(type, msg, r->request_id);
    const char *body = js ? js : render_oom_error_body;
    struct MHD_Response *resp = body_response(r, status, "application/json", body, strlen(body));
    free(js);
    if (!resp) return MHD_NO;
    if (retry > 0) {
        char secs[16];
        snprintf(secs, sizeof secs, "%d", retry);
        MHD_add_response_header(resp, "retry-after", secs);
        MHD_add_response_header(resp, "x-should-retry", "true");
    } else if (retry == 0) {
        MHD_add_response_header(resp, "x-should-retry", "false");
    }
    if (status == 405) MHD_add_response_header(resp, "allow", r->route == ROUTE_MESSAGES || r->route == ROUTE_COUNT ? "POST" : "GET, HEAD");
    if (r->route == ROUTE_MESSAGES) default_layer_headers(resp, c);
    return queue(c, status, resp);
}

/* A 200 JSON answer of JS, a rendered body (taken); NULL: out of memory,
 * answered with a 500. */
static enum MHD_Result send_json(struct MHD_Connection *c, req_ctx *r, char *js) {
    if (!js) return send_error(c, r, 500, "api_error", "out of memory", -1);
    struct MHD_Response *resp = body_response(r, 200, "application/json", js, strlen(js));
    free(js);
    return resp ? queue(c, 200, resp) : MHD_NO;
}

/* The index of the presented key among the configured ones (0 when no keys
 * are configured), or -1: not authorized. The presented key is hashed and
 * compared in constant time with every digest. */
static int authorized(struct MHD_Connection *c) {
    if (!S->cfg->n_keys) return 0;
    const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    const char *auth = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "authorization");
    if (!key && auth && !strncasecmp(auth, "Bearer ", 7)) key = auth + 7;
    if (!key) return -1;
    unsigned char d[32];
    SHA256((const unsigned char *)key, strlen(key), d);
    int found = -1;
    for (int i = 0; i < S->cfg->n_keys; i++)
        if (CRYPTO_memcmp(d, S->cfg->key_sha256[i], 32) == 0) found = i;
    return found;
}

static enum MHD_Result handle_models(struct MHD_Connection *c, req_ctx *r, const char *url) {
    const engine_info *in = engine_get_info(S->engine);
    if (r->route == ROUTE_MODEL) {
        if (strcmp(url + 11, in->name)) {
            char msg[300];
            snprintf(msg, sizeof msg, "model: %.200s not found (this server serves %s)", url + 11, in->name);
            return send_error(c, r, 404, "not_found_error", msg, -1);
        }
        return send_json(c, r, render_model(in->name, in->created_at));
    }
    return send_json(c, r, render_models(in->name, in->created_at));
}

/* Parses the body, renders and tokenizes the prompt. Returns the token
 * count and *tokens, or -1 after queueing an error response (*rc). */
static int prepare(struct MHD_Connection *c, req_ctx *r, msg_request *req, int32_t **tokens, enum MHD_Result *rc) {
    msg_error e;
    char err[256];
    *tokens = NULL;
    if (msg_parse(r->body ? r->body : "", r->len, r->route == ROUTE_COUNT, S->cfg->json_depth, req, &e)) {
        *rc = send_error(c, r, e.status, e.type, e.message, -1);
        return -1;
    }
    const engine_info *in = engine_get_info(S->engine);
    if (S->cfg->strict_model && strcmp(req->model, in->name)) {
        char msg[300];
        snprintf(msg, sizeof msg, "model: %.200s not found (this server serves %s)", req->model, in->name);
        *rc = send_error(c, r, 404, "not_found_error", msg, -1);
        msg_request_free(req);
        return -1;
    }
    if (r->route != ROUTE_COUNT && engine_check_output(S->engine, &req->tools, req->format_schema, err, sizeof err)) {
        *rc = send_error(c, r, 400, "invalid_request_error", err, -1);
        msg_request_free(req);
        return -1;
    }
    int n = engine_prompt_build(S->engine, req->system, &req->tools, req->msgs, req->n_msgs, req->thinking,
                                tokens, err, sizeof err);
    if (n < 0) {
        *rc = send_error(c, r, 500, "api_error", err, 0);
        msg_request_free(req);
        return -1;
    }
    return n;
}

static enum MHD_Result handle_count(struct MHD_Connection *c, req_ctx *r) {
    msg_request req;
    int32_t *tokens;
    enum MHD_Result rc;
    int n = prepare(c, r, &req, &tokens, &rc);
    if (n < 0) return rc;
    free(tokens);
    msg_request_free(&req);
    return send_json(c, r, render_count_tokens(n));
}

static enum MHD_Result handle_messages(struct MHD_Connection *c, req_ctx *r) {
    if (atomic_load(&S->draining)) return send_error(c, r, 503, "overloaded_error", "the server is shutting down", 1);
    job *j = job_new();
    if (!j) return send_error(c, r, 500, "api_error", "out of memory", -1);
    enum MHD_Result rc;
    int n = prepare(c, r, &j->req, &j->prompt, &rc);
    if (n < 0) {
        job_release(j);
        return rc;
    }
    const engine_info *in = engine_get_info(S->engine);
    j->n_prompt = n;
    /* max_tokens is a ceiling, not a reservation: generation stops where the
     * context ends (stop_reason model_context_window_exceeded), so only a
     * prompt that leaves no room for one token is refused. */
    if (n >= in->n_ctx) {
        char msg[300];
        snprintf(msg, sizeof msg, "prompt is too long: %d tokens > %d maximum (the context is %d tokens)", n,
                 in->n_ctx - 1, in->n_ctx);
        job_release(j);
        return send_error(c, r, 400, "invalid_request_error", msg, -1);
    }
    j->skip_mode = request_mode(c);
    j->gate_margin = S->cfg->skip_gate;
    j->tenant = r->tenant;
    const char *hint = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-layer-hint");
    if (hint) {
        uint8_t wire[MASK_WIRE_BYTES];
        if (mask_decode_b64_for(hint, strlen(hint), in->n_layers, wire)) {
            j->hint_invalid = 1;
        } else {
            mask_from_wire(wire, in->n_layers, j->hint);
            j->has_hint = 1;
        }
    }
    snprintf(j->request_id, sizeof j->request_id, "%s", r->request_id);
    render_id(j->msg_id, sizeof j->msg_id, "msg_");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->fd = ci ? ci->connect_fd : -1;
    j->conn = c;
    r->job = j;
    pthread_mutex_lock(&j->lock);
    j->suspended = 1;
    MHD_suspend_connection(c);
    pthread_mutex_unlock(&j->lock);
    if (worker_submit(S->worker, j)) {
        pthread_mutex_lock(&j->lock);
        job_wake(j); /* resumed: the handler answers 529 on its next call */
        j->outcome = JOB_OUTCOME_OVERLOADED;
        pthread_mutex_unlock(&j->lock);
    }
    return MHD_YES;
}

/* SSE body: hands out what the worker wrote; suspends the connection when
 * there is nothing yet (the worker resumes it). */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    job *j = cls;
    (void)pos;
    pthread_mutex_lock(&j->lock);
    ssize_t n = 0;
    if (j->out_sent < j->out_len) {
        n = (ssize_t)(j->out_len - j->out_sent < max ? j->out_len - j->out_sent : max);
        memcpy(buf, j->out + j->out_sent, (size_t)n);
        j->out_sent += (size_t)n;
    } else if (j->outcome != JOB_OUTCOME_PENDING) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (j->conn) {
        j->suspended = 1;
        MHD_suspend_connection(j->conn);
    }
    pthread_mutex_unlock(&j->lock);
    return n;
}

static void sse_free(void *cls) { job_release(cls); }

/* Called again after the worker resumed the connection. */
static enum MHD_Result handle_resumed(struct MHD_Connection *c, req_ctx *r) {
    job *j = r->job;
    pthread_mutex_lock(&j->lock);
    int started = j->started, done = j->outcome != JOB_OUTCOME_PENDING;
    pthread_mutex_unlock(&j->lock);
    if (j->req.stream && started) {
        struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, sse_reader, j, sse_free);
        if (!resp) return MHD_NO;
        pthread_mutex_lock(&j->lock);
        j->refs++;
        pthread_mutex_unlock(&j->lock);
        MHD_add_response_header(resp, "content-type", "text/event-stream");
        MHD_add_response_header(resp, "cache-control", "no-cache");
        MHD_add_response_header(resp, "request-id", r->request_id);
        layer_headers(resp, j->mask, engine_layer_status_name(j->layer_status), hint_status_name(j->hint_outcome));
        mode_headers(resp, j->skip_mode, NULL);
        r->status = 200;
        return queue(c, 200, resp);
    }
    if (!done) { /* woken early: wait again */
        pthread_mutex_lock(&j->lock);
        j->suspended = 1;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&j->lock);
        return MHD_YES;
    }
    render_error e = render_outcome(j->outcome, j->res.error, j->res.retryable);
    if (e.type) return send_error(c, r, e.status, e.type, e.message, e.retry);
    struct MHD_Response *resp = body_response(r, 200, "application/json", j->out ? j->out : "", j->out_len);
    if (!resp) return MHD_NO;
    layer_headers(resp, j->mask, engine_layer_status_name(j->layer_status), hint_status_name(j->hint_outcome));
    mode_headers(resp, j->skip_mode, &j->res);
    return queue(c, 200, resp);
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)cls;
    (void)version;
    req_ctx *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        *con_cls = r;
        r->t0 = now_s();
        render_id(r->request_id, sizeof r->request_id, "req_");
        r->route = route_of(url, method, &r->method_ok);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "content-length");
        if (cl && strtoull(cl, NULL, 10) > S->cfg->max_body_bytes) r->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!r->too_large && r->len + *upload_size > S->cfg->max_body_bytes) r->too_large = 1;
        if (!r->too_large) {
            if (r->len + *upload_size + 1 > r->cap) {
                size_t cap = (r->len + *upload_size + 1) * 2;
                char *p = realloc(r->body, cap);
                if (!p) return MHD_NO;
                r->body = p;
                r->cap = cap;
            }
            memcpy(r->body + r->len, upload, *upload_size);
            r->len += *upload_size;
            r->body[r->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (r->job) return handle_resumed(c, r);
    conntrack_set_received(c, 1);
    if (r->route == ROUTE_NONE) return send_error(c, r, 404, "not_found_error", "no such endpoint", -1);
    if (!r->method_ok) return send_error(c, r, 405, "invalid_request_error", "method not allowed on this endpoint", -1);
    if (r->route == ROUTE_HEALTH) {
        int ready = atomic_load(&S->ready);
        const char *body = ready ? "{\"status\":\"ok\"}" : "{\"status\":\"loading\"}";
        struct MHD_Response *resp = body_response(r, ready ? 200 : 503, "application/json", body, strlen(body));
        return resp ? queue(c, ready ? 200 : 503, resp) : MHD_NO;
    }
    if (r->route == ROUTE_METRICS) {
        const engine_info *in = S->engine && atomic_load(&S->ready) ? engine_get_info(S->engine) : NULL;
        char *text = metrics_render(in ? in->name : "", in ? in->device_name : "");
        if (!text) return send_error(c, r, 500, "api_error", "out of memory", -1);
        struct MHD_Response *resp = body_response(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text));
        free(text);
        return resp ? queue(c, 200, resp) : MHD_NO;
    }
    int key = authorized(c);
    if (key < 0) return send_error(c, r, 401, "authentication_error", "invalid x-api-key", -1);
    r->tenant = S->cfg->n_keys ? (uint64_t)key + 1 : 0;
    if (RL && (r->route == ROUTE_MESSAGES || r->route == ROUTE_COUNT)) {
        int wait = ratelimit_take(RL, key, now_s());
        if (wait) {
            char msg[128];
            snprintf(msg, sizeof msg, "rate limit of %d requests per minute exceeded; retry in %d s", S->cfg->rate_limit_rpm,
                     wait);
            return send_error(c, r, 429, "rate_limit_error", msg, wait);
        }
    }
    if (!atomic_load(&S->ready)) return send_error(c, r, 503, "overloaded_error", "the model is still loading", 1);
    if (r->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the request body is larger than %zu bytes", S->cfg->max_body_bytes);
        return send_error(c, r, 413, "request_too_large", msg, -1);
    }
    if (r->route == ROUTE_MODELS || r->route == ROUTE_MODEL) return handle_models(c, r, url);
    if (r->route == ROUTE_COUNT) return handle_count(c, r);
    return handle_messages(c, r);
}

/* Logs the request, counts it, and lets go of its job. */
static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    conntrack_set_received(c, 0); /* the next request on this connection has its own deadline */
    req_ctx *r = *con_cls;
    if (!r) return;
    double dur = now_s() - r->t0;
    char fields[1024];
    int k = snprintf(fields, sizeof fields, "\"request_id\":\"%s\",\"route\":\"%s\",\"status\":%d,\"duration_ms\":%.1f%s",
                     r->request_id, route_names[r->route], r->status, dur * 1e3,
                     toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : ",\"client_aborted\":true");
    job *j = r->job;
    if (j) {
        pthread_mutex_lock(&j->lock);
        j->conn = NULL;
        int done = j->outcome != JOB_OUTCOME_PENDING, ran = done && j->outcome != JOB_OUTCOME_OVERLOADED;
        if (!done) atomic_store(&j->cancel, 1);
        if (ran && k > 0 && (size_t)k < sizeof fields) {
            uint8_t wire[MASK_WIRE_BYTES];
            char b64[MASK_B64_LEN + 1];
            mask_to_wire(j->mask, engine_get_info(S->engine)->n_layers, wire);
            mask_encode_b64(wire, b64);
            snprintf(fields + k, sizeof fields - (size_t)k,
                     ",\"input_tokens\":%d,\"output_tokens\":%d,\"ttft_ms\":%.1f,\"engine_ms\":%.2f,\"stream\":%s,\"stop_reason\":\"%s\","
                     "\"layer_status\":\"%s\",\"layer_mask\":\"%s\",\"layers_skipped\":%d,\"hint_status\":\"%s\","
                     "\"layer_mode\":\"%s\",\"draft_accepted\":%d,\"draft_drafted\":%d,\"gated_at\":%d",
                     j->n_prompt, j->res.n_generated, j->res.ttft_ms, j->res.total_ms, j->req.stream ? "true" : "false",
                     engine_stop_reason_name(j->res.reason), engine_layer_status_name(j->layer_status), b64,
                     j->res.n_skipped, hint_status_name(j->hint_outcome), engine_skip_mode_name(j->skip_mode),
                     j->res.n_accepted, j->res.n_drafted, j->res.gated_at);
        }
        pthread_mutex_unlock(&j->lock);
        job_release(j);
    }
    log_fields(LOG_INFO, "request", fields);
    metrics_request(route_names[r->route], r->status, dur);
    free(r->body);
    free(r);
    *con_cls = NULL;
}

/* libmicrohttpd's own messages (a client gone mid-request, say) become log
 * lines like ours, so that stderr stays one JSON object per line. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r')) msg[--n] = 0;
    log_msg(LOG_INFO, "http", "%s", msg);
}

struct MHD_Daemon *http_start(http_state *st, char *err, size_t errlen) {
    S = st;
    char port[16];
    snprintf(port, sizeof port, "%d", st->cfg->port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai;
    int gai = getaddrinfo(st->cfg->host, port, &hints, &ai);
    if (gai) {
        snprintf(err, errlen, "cannot resolve host '%s': %s", st->cfg->host, gai_strerror(gai));
        return NULL;
    }
    if (st->cfg->rate_limit_rpm > 0) {
        RL = ratelimit_create(st->cfg->n_keys ? st->cfg->n_keys : 1, st->cfg->rate_limit_rpm,
                              st->cfg->rate_limit_burst > 0 ? st->cfg->rate_limit_burst : st->cfg->rate_limit_rpm);
        if (!RL) {
            freeaddrinfo(ai);
            snprintf(err, errlen, "out of memory");
            return NULL;
        }
    }
    if (conntrack_start(st->cfg->request_timeout_s)) {
        freeaddrinfo(ai);
        ratelimit_free(RL);
        RL = NULL;
        snprintf(err, errlen, "cannot start the request-deadline thread");
        return NULL;
    }
    /* poll(), not epoll (MHD_USE_AUTO's choice here): MHD_quiesce_daemon
     * (graceful shutdown) races with an epoll daemon's own thread over
     * removing the listening socket, and MHD aborts the process when it
     * loses (MHD_PANIC "Failed to remove listen FD from epoll set"; a
     * SIGTERM exited with SIGABRT once in make test) */
    unsigned flags = MHD_USE_POLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, 0, NULL, NULL, handler, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
                                            NULL, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                            MHD_OPTION_NOTIFY_COMPLETED, completed, NULL, MHD_OPTION_NOTIFY_CONNECTION,
                                            conntrack_notify, NULL, MHD_OPTION_CONNECTION_TIMEOUT,
                                            (unsigned)st->cfg->connection_timeout_s, MHD_OPTION_CONNECTION_LIMIT, 512u,
                                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        snprintf(err, errlen, "cannot listen on %s:%d (in use, or no permission)", st->cfg->host, st->cfg->port);
        http_stop(NULL);
    }
    return d;
}

void http_stop(struct MHD_Daemon *d) {
    if (d) MHD_stop_daemon(d);
    conntrack_stop();
    ratelimit_free(RL);
    RL = NULL;
}
