/* outcome.h - how a generation job ended. The worker (or, for a full queue,
 * the HTTP side) sets it; server/render.h maps it to what the client gets. */
#ifndef ILPD_OUTCOME_H
#define ILPD_OUTCOME_H

typedef enum {
    JOB_OUTCOME_PENDING,      /* queued or running: nothing final yet */
    JOB_OUTCOME_DONE,         /* generated; the engine result says why it stopped */
    JOB_OUTCOME_OVERLOADED,   /* refused: the queue was full */
    JOB_OUTCOME_CANCELLED,    /* the client left, or the server shut down */
    JOB_OUTCOME_ENGINE_ERROR, /* engine_generate failed (res.error, res.retryable) */
    JOB_OUTCOME_OOM,          /* the server ran out of memory for the response */
} job_outcome;

#endif
