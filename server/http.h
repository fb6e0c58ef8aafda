/* http.h - the libmicrohttpd side: routing, auth, responses, SSE. */
#ifndef ILPD_HTTP_H
#define ILPD_HTTP_H

#include <stdatomic.h>

#include "server/config.h"
#include "engine/engine.h"
#include "server/worker.h"

/* What the request handlers need; owned by server.c. */
typedef struct {
    const cfg *cfg;
    engine *engine;          /* NULL while the model loads */
    worker *worker;
    atomic_int ready;        /* /health: 503 until 1 */
    atomic_int draining;     /* shutting down: new generations get 503 */
} http_state;

/* Starts the daemon on cfg->host:cfg->port; returns it or NULL (err set). */
struct MHD_Daemon *http_start(http_state *st, char *err, size_t errlen);
/* Stops the daemon D (may be NULL) and what http_start started beside it. */
void http_stop(struct MHD_Daemon *d);

#endif
