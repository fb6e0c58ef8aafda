/* worker.c - the engine worker: one job at a time from a bounded FIFO. The
 * engine's callbacks append what server/render.c renders to the job. */
#include "server/worker.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "engine/log.h"
#include "server/metrics.h"
#include "server/render.h"

struct worker {
    engine *e;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    job *head, *tail, *running;
    int n_waiting, max, stop, ping_ms;
    int keep_warm_s; /* idle seconds between warm-up passes; 0: none */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

job *job_new(void) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->lock, NULL);
    j->refs = 1;
    j->fd = -1;
    j->t_created = now_s();
    return j;
}

void job_release(job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->lock);
    int last = --j->refs == 0;
    pthread_mutex_unlock(&j->lock);
    if (!last) return;
    msg_request_free(&j->req);
    free(j->prompt);
    free(j->out);
    for (int i = 0; i < j->n_blocks; i++) {
        free(j->blocks[i].text);
        free(j->blocks[i].name);
    }
    free(j->blocks);
    pthread_mutex_destroy(&j->lock);
    free(j);
}

void job_wake(job *j) {
    if (j->suspended && j->conn) {
        j->suspended = 0;
        MHD_resume_connection(j->conn);
    }
}

/* Appends N bytes to a growing buffer; sets j->oom on failure. */
static void buf_add(job *j, char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *p = realloc(*buf, c);
        if (!p) {
            j->oom = 1;
            return;
        }
        *buf = p;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}

/* Appends RENDERED (taken; NULL: the rendering ran out of memory, which
 * sets j->oom) to J's output. A stream's connection is woken to send it at
 * once; a JSON body waits for the outcome. */
static void job_append(job *j, char *rendered) {
    pthread_mutex_lock(&j->lock);
    if (rendered) buf_add(j, &j->out, &j->out_len, &j->out_cap, rendered, strlen(rendered));
    else j->oom = 1;
    if (j->req.stream) {
        j->t_last_event = now_s();
        job_wake(j);
    }
    pthread_mutex_unlock(&j->lock);
    free(rendered);
}

/* What J's message object says about its request (borrows from J). */
static render_message_info message_info(const job *j) {
    return (render_message_info){.id = j->msg_id, .model = j->req.model, .input_tokens = j->n_prompt - j->res.n_cache_read,
                                 .cache_read = j->res.n_cache_read, .cache_creation = j->res.n_cache_created};
}

/* How J's generation stopped (borrows from J). */
static render_stop stop_of(const job *j) {
    const engine_result *res = &j->res;
    const char *seq = res->reason == ENGINE_STOP_SEQUENCE && res->stop_index >= 0 ? j->req.stop[res->stop_index] : NULL;
    return (render_stop){.reason = engine_stop_reason_name(res->reason), .sequence = seq, .output_tokens = res->n_generated};
}

/* 1 when the client has closed its connection. */
static int client_gone(job *j) {
    pthread_mutex_lock(&j->lock);
    int gone = !j->conn;
    if (!gone && j->fd >= 0) {
        char c;
        ssize_t n = recv(j->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
    pthread_mutex_unlock(&j->lock);
    if (gone) atomic_store(&j->cancel, 1);
    return gone;
}

typedef struct {
    worker *w;
    job *j;
} run_ctx;

/* 1 when J's request lets the answer call tools (its blocks then start as they come). */
static int tools_on(const job *j) { return j->req.tools.n_tools > 0 && j->req.tools.choice != CHAT_TOOL_CHOICE_NONE; }

/* A stream stops its open block (a thought's with its signature first). */
static void block_end(job *j) {
    int index = j->n_blocks - 1;
    if (!j->req.stream || !j->block_open) return;
    if (j->blocks[index].type == RENDER_BLOCK_THINKING) job_append(j, render_sse_signature_delta(index));
    job_append(j, render_sse_block_stop(index));
    j->block_open = 0;
}

/* Starts a new content block of TYPE in J (TOOL_USE: a call of NAME); a
 * stream stops the open block and starts this one. Returns the block, or
 * NULL (j->oom set). */
static job_block *block_begin(job *j, render_block_type type, const char *name) {
    if (j->n_blocks == j->blocks_cap) {
        int cap = j->blocks_cap ? 2 * j->blocks_cap : 4;
        job_block *b = realloc(j->blocks, (size_t)cap * sizeof *b);
        if (!b) {
            j->oom = 1;
            return NULL;
        }
        j->blocks = b;
        j->blocks_cap = cap;
    }
    block_end(j);
    job_block *b = &j->blocks[j->n_blocks];
    memset(b, 0, sizeof *b);
    b->type = type;
    if (type == RENDER_BLOCK_TOOL_USE) {
        render_id(b->id, sizeof b->id, "toolu_");
        if (!(b->name = strdup(name))) {
            j->oom = 1;
            return NULL;
        }
    }
    int index = j->n_blocks++;
    if (j->req.stream) {
        job_append(j, type == RENDER_BLOCK_TOOL_USE ? render_sse_tool_use_start(index, b->id, b->name)
                      : type == RENDER_BLOCK_THINKING ? render_sse_thinking_start(index)
                                                      : render_sse_block_start(index));
        j->block_open = 1;
    }
    return b;
}

/* Adds LEN bytes to the last block: a stream sends them as a delta, else they are kept. */
static int block_add(job *j, const char *s, size_t len) {
    job_block *b = &j->blocks[j->n_blocks - 1];
    int index = j->n_blocks - 1;
    if (j->req.stream) {
        job_append(j, b->type == RENDER_BLOCK_TOOL_USE ? render_sse_input_delta(index, s, len)
                      : b->type == RENDER_BLOCK_THINKING ? render_sse_thinking_delta(index, s, len)
                                                         : render_sse_text_delta(index, s, len));
    } else {
        pthread_mutex_lock(&j->lock);
        buf_add(j, &b->text, &b->len, &b->cap, s, len);
        pthread_mutex_unlock(&j->lock);
    }
    return j->oom;
}

static int on_start(void *ud, const uint8_t *mask, int n_layers) {
    run_ctx *r = ud;
    job *j = r->j;
    pthread_mutex_lock(&j->lock);
    memcpy(j->mask, mask, (size_t)n_layers);
    j->layer_status = j->res.layer_status;
    j->hint_outcome = j->res.hint_status;
    j->started = 1;
    pthread_mutex_unlock(&j->lock);
    metrics_kv_bytes(j->res.kv_bytes);
    if (j->req.stream) {
        render_message_info m = message_info(j);
        job_append(j, render_sse_message_start(&m));
        /* as the API: the text block starts before the ping (unless a thought or a call may come first) */
        if (!tools_on(j) && !j->req.thinking) block_begin(j, RENDER_BLOCK_TEXT, NULL);
        job_append(j, render_sse_ping());
    }
    return client_gone(j);
}

static int on_token(void *ud, int32_t id) {
    (void)id;
    return client_gone(((run_ctx *)ud)->j);
}

/* Adds LEN bytes of TEXT to the last block when it is an open block of
 * TYPE, else to a new one. Returns nonzero to cancel. */
static int add_to(job *j, render_block_type type, const char *text, size_t len) {
    int in = j->n_blocks && j->blocks[j->n_blocks - 1].type == type && (j->block_open || !j->req.stream);
    if (!in && !block_begin(j, type, NULL)) return 1;
    return block_add(j, text, len);
}

static int on_text(void *ud, const char *text, size_t len) {
    return add_to(((run_ctx *)ud)->j, RENDER_BLOCK_TEXT, text, len);
}

static int on_thinking(void *ud, const char *text, size_t len) {
    return add_to(((run_ctx *)ud)->j, RENDER_BLOCK_THINKING, text, len);
}

static int on_tool_start(void *ud, const char *name) {
    job *j = ((run_ctx *)ud)->j;
    return !block_begin(j, RENDER_BLOCK_TOOL_USE, name) || client_gone(j);
}

static int on_tool_input(void *ud, const char *json, size_t len) { return block_add(((run_ctx *)ud)->j, json, len); }

static int on_tool_end(void *ud) {
    job *j = ((run_ctx *)ud)->j;
    block_end(j);
    return j->oom;
}

static void on_progress(void *ud, int done, int total) {
    run_ctx *r = ud;
    job *j = r->j;
    (void)done;
    (void)total;
    client_gone(j);
    if (j->req.stream && j->started && (now_s() - j->t_last_event) * 1000 >= r->w->ping_ms)
        job_append(j, render_sse_ping());
}

/* How J's run ended (j->oom, written only by this thread, first). */
static job_outcome outcome_of(const job *j) {
    if (j->oom) return JOB_OUTCOME_OOM;
    if (j->res.reason == ENGINE_STOP_ERROR) return JOB_OUTCOME_ENGINE_ERROR;
    if (j->res.reason == ENGINE_STOP_CANCELLED) return JOB_OUTCOME_CANCELLED;
    return JOB_OUTCOME_DONE;
}

/* Logs a job that failed on the server's side (OUTCOME: an engine error or
 * out of memory) as one error line with its request id and the reason. */
static void log_failure(const job *j, job_outcome outcome) {
    const char *event = outcome == JOB_OUTCOME_OOM ? "out_of_memory" : "engine_error";
    const char *msg = outcome == JOB_OUTCOME_OOM ? "out of memory for the response" : j->res.error;
    cJSON *f = cJSON_CreateObject();
    char *js = f && cJSON_AddStringToObject(f, "request_id", j->request_id) && cJSON_AddStringToObject(f, "msg", msg)
                   ? cJSON_PrintUnformatted(f)
                   : NULL;
    cJSON_Delete(f);
    if (js) { /* the members without their braces */
        js[strlen(js) - 1] = 0;
        log_fields(LOG_ERROR, event, js + 1);
    } else {
        log_msg(LOG_ERROR, event, "request %s: %s", j->request_id, msg);
    }
    free(js);
}

/* Writes the end of J's response (the closing SSE events or an SSE error
 * event, or the JSON body), then its outcome, and wakes the connection. */
static void finish(job *j) {
    job_outcome outcome = outcome_of(j);
    render_stop stop = stop_of(j);
    if (j->req.stream && j->started && outcome == JOB_OUTCOME_DONE) {
        if (!j->n_blocks) block_begin(j, RENDER_BLOCK_TEXT, NULL); /* an empty answer is one empty text block */
        block_end(j);
        job_append(j, render_sse_message_delta(&stop));
        job_append(j, render_sse_message_stop());
    } else if (j->req.stream && j->started) {
        render_error e = render_outcome(outcome, j->res.error, j->res.retryable);
        job_append(j, render_sse_error(e.type, e.message));
    } else if (!j->req.stream && outcome == JOB_OUTCOME_DONE) {
        render_message_info m = message_info(j);
        render_block *blocks = calloc((size_t)j->n_blocks + 1, sizeof *blocks);
        for (int i = 0; blocks && i < j->n_blocks; i++) {
            const job_block *b = &j->blocks[i];
            blocks[i] = (render_block){b->type, b->text ? b->text : "", b->id, b->name};
        }
        job_append(j, blocks ? render_message(&m, blocks, j->n_blocks, &stop) : NULL);
        free(blocks);
    }
    if (j->oom && outcome == JOB_OUTCOME_DONE) outcome = JOB_OUTCOME_OOM; /* the end could not be written */
    if (outcome == JOB_OUTCOME_ENGINE_ERROR || outcome == JOB_OUTCOME_OOM) log_failure(j, outcome);
    pthread_mutex_lock(&j->lock);
    j->outcome = outcome;
    job_wake(j);
    pthread_mutex_unlock(&j->lock);
}

static void run_job(worker *w, job *j) {
    run_ctx r = {w, j};
    engine_gen_params gp = {.max_tokens = j->req.max_tokens, .temperature = j->req.temperature, .top_p = j->req.top_p,
                            .top_k = j->req.top_k, .stop = (const char *const *)j->req.stop, .n_stop = j->req.n_stop,
                            .hint = j->has_hint ? j->hint : NULL, .hint_invalid = j->hint_invalid, .cancel = &j->cancel,
                            .tools = &j->req.tools, .format_schema = j->req.format_schema, .skip_mode = j->skip_mode,
                            .gate_margin = j->gate_margin, .cache_key = j->tenant, .cache_ttl_s = j->req.cache_ttl_s,
                            .cache_hint = j->req.cache_hint, .thinking = j->req.thinking};
    gp.seed = (uint64_t)(now_s() * 1e6);
    engine_callbacks cb = {.on_start = on_start, .on_token = on_token, .on_text = on_text, .on_thinking = on_thinking,
                           .on_tool_start = on_tool_start, .on_tool_input = on_tool_input, .on_tool_end = on_tool_end,
                           .on_progress = on_progress, .ud = &r};
    if (client_gone(j)) {
        j->res.reason = ENGINE_STOP_CANCELLED;
        j->res.gated_at = -1;
    } else {
        engine_generate(w->e, j->prompt, j->n_prompt, &gp, &cb, &j->res);
    }
    metrics_kv_bytes(0);
    if (j->res.cache.hits || j->res.cache.misses || j->res.cache.entries) metrics_prompt_cache(&j->res.cache);
    if (j->res.reason != ENGINE_STOP_CANCELLED && j->res.reason != ENGINE_STOP_ERROR)
        metrics_generation(j->n_prompt, j->res.n_generated, j->res.ttft_ms / 1e3, (j->res.last_token_ms - j->res.ttft_ms) / 1e3,
                           engine_layer_status_name(j->res.layer_status), j->res.n_skipped, hint_status_name(j->res.hint_status));
    if (j->res.reason != ENGINE_STOP_ERROR)
        metrics_draft(engine_skip_mode_name(j->res.skip_mode), j->res.n_drafted, j->res.n_accepted, j->res.n_verifications,
                      j->res.gated_at >= 0);
    finish(j);
}

static void *worker_main(void *arg) {
    worker *w = arg;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->head && !w->stop) {
            if (w->keep_warm_s <= 0) {
                pthread_cond_wait(&w->wake, &w->lock);
                continue;
            }
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += w->keep_warm_s;
            if (pthread_cond_timedwait(&w->wake, &w->lock, &until) == ETIMEDOUT && !w->head && !w->stop) {
                /* Quiet for keep_warm_s: run what a request runs, so that the
                 * next one finds it warm. A job submitted meanwhile waits for
                 * this one short pass. */
                pthread_mutex_unlock(&w->lock);
                double t0 = now_s();
                if (engine_warm(w->e)) log_msg(LOG_WARN, "keep_warm", "the idle warm-up pass failed (out of memory)");
                else log_msg(LOG_DEBUG, "keep_warm", "idle warm-up pass: %.1f ms", (now_s() - t0) * 1e3);
                pthread_mutex_lock(&w->lock);
            }
        }
        if (w->stop && !w->head) break;
        job *j = w->head;
        w->head = j->next;
        if (!w->head) w->tail = NULL;
        w->n_waiting--;
        w->running = j;
        if (w->stop) atomic_store(&j->cancel, 1);
        metrics_queue(w->n_waiting, 1);
        pthread_mutex_unlock(&w->lock);
        run_job(w, j);
        pthread_mutex_lock(&w->lock);
        w->running = NULL;
        metrics_queue(w->n_waiting, 0);
        pthread_mutex_unlock(&w->lock);
        job_release(j);
        pthread_mutex_lock(&w->lock);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

worker *worker_start(engine *e, int queue_max, int ping_ms, int keep_warm_s) {
    worker *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->e = e;
    w->max = queue_max;
    w->ping_ms = ping_ms;
    w->keep_warm_s = keep_warm_s;
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->wake, NULL);
    if (pthread_create(&w->thread, NULL, worker_main, w)) {
        free(w);
        return NULL;
    }
    return w;
}

void worker_stop(worker *w) {
    if (!w) return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    for (job *j = w->head; j; j = j->next) atomic_store(&j->cancel, 1);
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->wake);
    free(w);
}

int worker_submit(worker *w, job *j) {
    pthread_mutex_lock(&w->lock);
    if (w->n_waiting >= w->max || w->stop) {
        pthread_mutex_unlock(&w->lock);
        return -1;
    }
    pthread_mutex_lock(&j->lock);
    j->refs++;
    pthread_mutex_unlock(&j->lock);
    j->next = NULL;
    if (w->tail) w->tail->next = j;
    else w->head = j;
    w->tail = j;
    w->n_waiting++;
    metrics_queue(w->n_waiting, w->running != NULL);
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    return 0;
}

void worker_counts(worker *w, int *waiting, int *running) {
    pthread_mutex_lock(&w->lock);
    *waiting = w->n_waiting;
    *running = w->running != NULL;
    pthread_mutex_unlock(&w->lock);
}

void worker_cancel_all(worker *w) {
    pthread_mutex_lock(&w->lock);
    for (job *j = w->head; j; j = j->next) atomic_store(&j->cancel, 1);
    if (w->running) atomic_store(&w->running->cancel, 1);
    pthread_mutex_unlock(&w->lock);
}
