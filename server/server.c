/* server.c - `ilpd serve`: settings, model loading behind a live /health,
 * the worker, and a graceful SIGTERM. */
#include "server/server.h"

#include <microhttpd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/config.h"
#include "engine/engine.h"
#include "server/http.h"
#include "engine/log.h"
#include "server/metrics.h"
#include "server/worker.h"

static int parse_level(const char *s) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

static engine_device parse_device(const char *s) {
    return !strcmp(s, "cpu") ? ENGINE_DEVICE_CPU : !strcmp(s, "cuda") ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_AUTO;
}

/* Waits until no job is queued or running, or until GRACE seconds passed;
 * returns 1 when idle. */
static int drain(worker *w, int grace) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int waiting, running;
        worker_counts(w, &waiting, &running);
        if (!waiting && !running) return 1;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= grace) return 0;
        usleep(20000);
    }
}

int server_main(int argc, char **argv) {
    cfg c;
    char err[1024];
    cfg_defaults(&c);
    int rc = cfg_parse_args(&c, argc, argv, err, sizeof err);
    if (rc) {
        if (rc < 0) {
            fprintf(stderr, "ilpd serve: %s\n", err);
            cfg_usage();
        }
        cfg_free(&c);
        return rc > 0 ? 0 : 2;
    }
    int level = parse_level(c.log_level);
    if (level < 0 || (strcmp(c.device, "auto") && strcmp(c.device, "cpu") && strcmp(c.device, "cuda"))) {
        fprintf(stderr, "ilpd serve: log_level must be debug|info|warn|error and device auto|cpu|cuda\n");
        cfg_free(&c);
        return 2;
    }
    log_set_level((log_level)level);
    metrics_init();

    /* Signals are taken by sigwait on this thread only. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    http_state st = {.cfg = &c};
    struct MHD_Daemon *d = http_start(&st, err, sizeof err);
    if (!d) {
        log_msg(LOG_ERROR, "listen", "%s", err);
        cfg_free(&c);
        return 1;
    }
    log_msg(LOG_INFO, "listening", "http://%s:%d (model loading: /health answers 503 until ready)", c.host, c.port);
    engine_params p = {.model_path = c.model, .n_ctx = c.ctx, .kv_budget = (size_t)c.kv_budget_mb << 20,
                       .prompt_cache_bytes = (size_t)c.prompt_cache_mb << 20, .draft_cache_tokens = c.draft_cache_tokens, .n_threads = c.threads, .device = parse_device(c.device),
                       .chat_template = c.chat_template, .kv_f16 = c.kv_f16, .layer_skip = c.layer_skip,
                       .probe_path = c.probe, .probe_dir = c.probe_dir, .hint_max_deviation = c.hint_max_deviation,
                       .kv_fail_request = c.test_kv_fail_request,
                       .scratch_fail_request = c.test_scratch_fail_request,
                       .kernel_fail_request = c.test_kernel_fail_request,
                       .kernel_fail_token = c.test_kernel_fail_token, .spec_always = c.test_draft_always};
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) {
        log_msg(LOG_ERROR, "model", "%s", err);
        fprintf(stderr, "ilpd serve: %s\n", err);
        http_stop(d);
        cfg_free(&c);
        return 1;
    }
    const engine_info *in = engine_get_info(e);
    st.engine = e;
    engine_measure_costs(e); /* lossless mode's cost model, before /health says ready */
    st.worker = worker_start(e, c.queue, c.ping_interval_ms, c.keep_warm_s);
    if (!st.worker) {
        log_msg(LOG_ERROR, "worker", "cannot start the engine worker");
        http_stop(d);
        engine_close(e);
        cfg_free(&c);
        return 1;
    }
    atomic_store(&st.ready, 1);
    log_msg(LOG_INFO, "ready", "serving %s (%s, %d layers, context %d, %s, template %s, layer skipping %s%s%s) with %d API key(s)",
            in->name, in->arch, in->n_layers, in->n_ctx, in->device_name, in->template_family,
            in->probe_loaded ? "on: " : "off", in->probe_loaded ? "probe " : "", in->probe_loaded ? in->probe_path : "",
            c.n_keys);

    int sig;
    sigwait(&sigs, &sig);
    log_msg(LOG_INFO, "shutdown", "%s: no new connections; finishing in-flight work (up to %d s)", strsignal(sig),
            c.shutdown_grace_s);
    atomic_store(&st.draining, 1);
    /* ours to close, but only after MHD_stop_daemon: MHD's polling thread
     * may still use it until then (MHD's documentation) */
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (!drain(st.worker, c.shutdown_grace_s)) {
        log_msg(LOG_WARN, "shutdown", "grace period over: cancelling the remaining requests");
        worker_cancel_all(st.worker);
        drain(st.worker, 5);
    }
    worker_stop(st.worker);
    usleep(100000); /* let the last responses leave */
    http_stop(d);
    if (lfd != MHD_INVALID_SOCKET) close(lfd);
    engine_close(e);
    cfg_free(&c);
    log_msg(LOG_INFO, "shutdown", "done");
    return 0;
}
