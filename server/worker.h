/* worker.h - generation jobs, the bounded FIFO queue and the one engine
 * worker that runs them.
 *
 * A job is shared by the HTTP side (its connection, suspended while the job
 * waits) and the worker; both hold a reference and the last release frees
 * it. The worker writes the response into the job (SSE events as they
 * happen, or the whole JSON body at the end, both rendered by
 * server/render.h), then its outcome, and resumes the connection whenever
 * there is something new for it.
 */
#ifndef ILPD_WORKER_H
#define ILPD_WORKER_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "engine/engine.h"
#include "server/messages.h"
#include "server/outcome.h"
#include "server/render.h"

/* One content block of a job's answer: a text, a thought, or a tool call
 * and its input (JSON text). A stream keeps no text: its blocks go out as
 * they come. */
typedef struct {
    render_block_type type;
    char *text;                  /* the text or the input (non-streaming) */
    size_t len, cap;
    char *name;                  /* tool_use: the tool */
    char id[40];                 /* tool_use: toolu_… */
} job_block;

typedef struct job {
    pthread_mutex_t lock;
    int refs;
    struct MHD_Connection *conn; /* NULL once the connection is gone */
    int suspended;               /* the connection waits for worker_wake */
    int fd;                      /* the client socket, to notice a disconnect */
    atomic_int cancel;

    msg_request req;
    int32_t *prompt;
    int n_prompt;
    uint8_t hint[MASK_MAX_LAYERS];
    int has_hint, hint_invalid;
    engine_skip_mode skip_mode;  /* x-layer-mode, or the configured default */
    float gate_margin;           /* approximate mode's gate (skip_gate) */
    uint64_t tenant;             /* the prompt cache's key (http.c) */
    char request_id[40], msg_id[40];

    int started;                 /* the headers may go */
    job_outcome outcome;         /* JOB_OUTCOME_PENDING until nothing more will come */
    engine_result res;           /* written by the engine; read once the outcome is set */
    uint8_t mask[MASK_MAX_LAYERS]; /* the mask used, copied at start */
    engine_layer_status layer_status;
    hint_status hint_outcome;
    char *out;                   /* SSE bytes (stream) or the JSON body (not) */
    size_t out_len, out_cap, out_sent;
    job_block *blocks;           /* the answer's content blocks so far */
    int n_blocks, blocks_cap;
    int block_open;              /* streaming: a started block is not stopped yet (the last one) */
    int oom;                     /* the worker ran out of memory for the response */
    double t_created, t_last_event;
    struct job *next;
} job;

typedef struct worker worker;

/* Starts the worker thread over engine E with a queue of QUEUE_MAX jobs.
 * PING_MS: SSE pings during long prefills; KEEP_WARM_S: after that many idle
 * seconds (and every as many after), one warm-up pass (engine_warm; 0: never).
 * Returns NULL on failure. */
worker *worker_start(engine *e, int queue_max, int ping_ms, int keep_warm_s);
/* Stops the thread after the running job (queued jobs are cancelled). */
void worker_stop(worker *w);
/* Queues J (taking a reference). Returns 0, or -1 when the queue is full. */
int worker_submit(worker *w, job *j);
/* Jobs waiting and running. */
void worker_counts(worker *w, int *waiting, int *running);
/* Cancels every queued and running job (shutdown past its grace period). */
void worker_cancel_all(worker *w);

/* A new job with one reference (the caller's); NULL when out of memory. */
job *job_new(void);
void job_release(job *j);
/* Resumes J's connection if it is suspended (call with j->lock held). */
void job_wake(job *j);

#endif
