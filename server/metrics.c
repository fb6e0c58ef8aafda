/* metrics.c - counters, gauges, histograms and sliding windows. */
#include "server/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_ROUTES 8
#define N_STATUS 12
#define WINDOW 100 /* requests in the sliding-window gauges */

typedef struct {
    const double *bounds;
    int n;
    unsigned long long counts[16]; /* per bucket (cumulative when rendered) */
    unsigned long long total;
    double sum;
} histogram;

static const double latency_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double token_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
static const double layer_bounds[] = {0, 1, 2, 4, 8, 16, 32, 64, 128};

static const char *routes[N_ROUTES] = {"messages", "count_tokens", "models", "health", "metrics", "other"};
static const int statuses[N_STATUS] = {200, 400, 401, 403, 404, 405, 413, 429, 500, 503, 529, 0};

static struct {
    pthread_mutex_t lock;
    unsigned long long requests[N_ROUTES][N_STATUS];
    histogram duration, ttft, itl, skipped;
    unsigned long long prompt_tokens, output_tokens;
    unsigned long long layer_status[3], hints[4];
    unsigned long long modes[3], drafted, accepted, verifications, gated;
    int waiting, running;
    size_t kv_bytes;
    pcache_stats cache;
    unsigned char win_active[WINDOW];
    int win_skipped[WINDOW];
    int win_n, win_at;
} M = {.lock = PTHREAD_MUTEX_INITIALIZER};

void metrics_init(void) {
    M.duration.bounds = latency_bounds;
    M.duration.n = sizeof latency_bounds / sizeof *latency_bounds;
    M.ttft.bounds = latency_bounds;
    M.ttft.n = M.duration.n;
    M.itl.bounds = token_bounds;
    M.itl.n = sizeof token_bounds / sizeof *token_bounds;
    M.skipped.bounds = layer_bounds;
    M.skipped.n = sizeof layer_bounds / sizeof *layer_bounds;
}

static void observe(histogram *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->total++;
    h->sum += v;
}

static int index_of(const char *s, const char *const *list, int n) {
    for (int i = 0; i < n; i++)
        if (list[i] && !strcmp(s, list[i])) return i;
    return -1;
}

void metrics_request(const char *route, int status, double seconds) {
    int r = index_of(route, routes, N_ROUTES), s = N_STATUS - 1;
    if (r < 0) r = 5;
    for (int i = 0; i < N_STATUS - 1; i++)
        if (statuses[i] == status) s = i;
    pthread_mutex_lock(&M.lock);
    M.requests[r][s]++;
    if (r == 0) observe(&M.duration, seconds);
    pthread_mutex_unlock(&M.lock);
}

static const char *layer_names[3] = {"off", "full", "active"};
static const char *hint_names[4] = {"absent", "applied", "overridden", "invalid"};

void metrics_generation(int prompt_tokens, int output_tokens, double ttft_s, double decode_s, const char *layer_status,
                        int layers_skipped, const char *hint_status) {
    int ls = index_of(layer_status, layer_names, 3), hs = index_of(hint_status, hint_names, 4);
    pthread_mutex_lock(&M.lock);
    M.prompt_tokens += (unsigned long long)prompt_tokens;
    M.output_tokens += (unsigned long long)output_tokens;
    if (output_tokens > 0) observe(&M.ttft, ttft_s);
    if (output_tokens > 1) observe(&M.itl, decode_s / (output_tokens - 1));
    if (ls >= 0) M.layer_status[ls]++;
    if (hs >= 0) M.hints[hs]++;
    observe(&M.skipped, layers_skipped);
    M.win_active[M.win_at] = layers_skipped > 0;
    M.win_skipped[M.win_at] = layers_skipped;
    M.win_at = (M.win_at + 1) % WINDOW;
    if (M.win_n < WINDOW) M.win_n++;
    pthread_mutex_unlock(&M.lock);
}

static const char *mode_names[3] = {"lossless", "approximate", "off"};

void metrics_draft(const char *mode, int drafted, int accepted, int verifications, int gated) {
    int m = index_of(mode, mode_names, 3);
    pthread_mutex_lock(&M.lock);
    if (m >= 0) M.modes[m]++;
    M.drafted += (unsigned long long)drafted;
    M.accepted += (unsigned long long)accepted;
    M.verifications += (unsigned long long)verifications;
    M.gated += gated != 0;
    pthread_mutex_unlock(&M.lock);
}

void metrics_queue(int waiting, int running) {
    pthread_mutex_lock(&M.lock);
    M.waiting = waiting;
    M.running = running;
    pthread_mutex_unlock(&M.lock);
}

void metrics_kv_bytes(size_t bytes) {
    pthread_mutex_lock(&M.lock);
    M.kv_bytes = bytes;
    pthread_mutex_unlock(&M.lock);
}

void metrics_prompt_cache(const pcache_stats *s) {
    pthread_mutex_lock(&M.lock);
    M.cache = *s;
    pthread_mutex_unlock(&M.lock);
}

typedef struct {
    char *s;
    size_t len, cap;
    int failed;
} out_buf;

__attribute__((format(printf, 2, 3))) static void out(out_buf *b, const char *fmt, ...) {
    va_list ap;
    if (b->failed) return;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (n > 0 ? (size_t)n : 0) + 256;
        char *p = realloc(b->s, cap);
        if (!p || n < 0) {
            b->failed = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
}

static void render_histogram(out_buf *b, const char *name, const char *help, const char *unit_suffix, const histogram *h) {
    out(b, "# HELP %s%s %s\n# TYPE %s%s histogram\n", name, unit_suffix, help, name, unit_suffix);
    unsigned long long cum = 0;
    for (int i = 0; i < h->n; i++) {
        cum += h->counts[i];
        out(b, "%s%s_bucket{le=\"%g\"} %llu\n", name, unit_suffix, h->bounds[i], cum);
    }
    out(b, "%s%s_bucket{le=\"+Inf\"} %llu\n%s%s_sum %.6f\n%s%s_count %llu\n", name, unit_suffix, h->total, name, unit_suffix,
        h->sum, name, unit_suffix, h->total);
}

char *metrics_render(const char *model_name, const char *device) {
    out_buf b = {0};
    out(&b, "%s", "");
    pthread_mutex_lock(&M.lock);
    out(&b, "# HELP ilpd_info The loaded model and device.\n# TYPE ilpd_info gauge\nilpd_info{model=\"%s\",device=\"%s\"} 1\n",
        model_name, device);
    out(&b, "# HELP ilpd_requests_total HTTP requests by route and status.\n# TYPE ilpd_requests_total counter\n");
    for (int r = 0; r < N_ROUTES; r++)
        for (int s = 0; s < N_STATUS; s++)
            if (routes[r] && M.requests[r][s])
                out(&b, "ilpd_requests_total{route=\"%s\",status=\"%d\"} %llu\n", routes[r], statuses[s], M.requests[r][s]);
    render_histogram(&b, "ilpd_request_duration", "Duration of /v1/messages requests.", "_seconds", &M.duration);
    render_histogram(&b, "ilpd_time_to_first_token", "Time from the start of a generation to its first token.", "_seconds", &M.ttft);
    render_histogram(&b, "ilpd_inter_token_latency", "Mean time between generated tokens of a request.", "_seconds", &M.itl);
    out(&b, "# HELP ilpd_prompt_tokens_total Prompt tokens processed.\n# TYPE ilpd_prompt_tokens_total counter\n"
            "ilpd_prompt_tokens_total %llu\n", M.prompt_tokens);
    out(&b, "# HELP ilpd_generation_tokens_total Tokens generated.\n# TYPE ilpd_generation_tokens_total counter\n"
            "ilpd_generation_tokens_total %llu\n", M.output_tokens);
    out(&b, "# HELP ilpd_requests_running Generations running.\n# TYPE ilpd_requests_running gauge\nilpd_requests_running %d\n",
        M.running);
    out(&b, "# HELP ilpd_requests_waiting Generations queued.\n# TYPE ilpd_requests_waiting gauge\nilpd_requests_waiting %d\n",
        M.waiting);
    out(&b, "# HELP ilpd_layer_status_total Generations by x-layer-status.\n# TYPE ilpd_layer_status_total counter\n");
    for (int i = 0; i < 3; i++) out(&b, "ilpd_layer_status_total{status=\"%s\"} %llu\n", layer_names[i], M.layer_status[i]);
    render_histogram(&b, "ilpd_layers_skipped", "Layers skipped per generation.", "", &M.skipped);
    out(&b, "# HELP ilpd_layer_hints_total Layer hints by outcome.\n# TYPE ilpd_layer_hints_total counter\n");
    for (int i = 0; i < 4; i++) out(&b, "ilpd_layer_hints_total{outcome=\"%s\"} %llu\n", hint_names[i], M.hints[i]);
    out(&b, "# HELP ilpd_layer_mode_total Generations by x-layer-mode.\n# TYPE ilpd_layer_mode_total counter\n");
    for (int i = 0; i < 3; i++) out(&b, "ilpd_layer_mode_total{mode=\"%s\"} %llu\n", mode_names[i], M.modes[i]);
    out(&b, "# HELP ilpd_draft_tokens_total Tokens drafted in lossless mode (layer-skip and n-gram drafts).\n"
            "# TYPE ilpd_draft_tokens_total counter\nilpd_draft_tokens_total %llu\n", M.drafted);
    out(&b, "# HELP ilpd_draft_accepted_tokens_total Drafted tokens the full model kept.\n"
            "# TYPE ilpd_draft_accepted_tokens_total counter\nilpd_draft_accepted_tokens_total %llu\n", M.accepted);
    out(&b, "# HELP ilpd_draft_verifications_total Batched verification passes of the full model.\n"
            "# TYPE ilpd_draft_verifications_total counter\nilpd_draft_verifications_total %llu\n", M.verifications);
    out(&b, "# HELP ilpd_layer_gated_total Approximate-mode generations the gate sent to full depth (an unsure token).\n"
            "# TYPE ilpd_layer_gated_total counter\nilpd_layer_gated_total %llu\n", M.gated);
    out(&b, "# HELP ilpd_kv_cache_bytes KV cache bytes held by the running generation.\n# TYPE ilpd_kv_cache_bytes gauge\n"
            "ilpd_kv_cache_bytes %zu\n", M.kv_bytes);
    out(&b, "# HELP ilpd_prompt_cache_hits_total Requests that started from a kept prompt.\n"
            "# TYPE ilpd_prompt_cache_hits_total counter\nilpd_prompt_cache_hits_total %llu\n"
            "# HELP ilpd_prompt_cache_misses_total Requests that found no kept prompt to start from.\n"
            "# TYPE ilpd_prompt_cache_misses_total counter\nilpd_prompt_cache_misses_total %llu\n"
            "# HELP ilpd_prompt_cache_tokens_reused_total Prompt tokens read from the prompt cache.\n"
            "# TYPE ilpd_prompt_cache_tokens_reused_total counter\nilpd_prompt_cache_tokens_reused_total %llu\n"
            "# HELP ilpd_prompt_cache_evictions_total Kept prompts evicted for room.\n"
            "# TYPE ilpd_prompt_cache_evictions_total counter\nilpd_prompt_cache_evictions_total %llu\n"
            "# HELP ilpd_prompt_cache_bytes Bytes the prompt cache holds.\n"
            "# TYPE ilpd_prompt_cache_bytes gauge\nilpd_prompt_cache_bytes %zu\n"
            "# HELP ilpd_prompt_cache_entries Prompts the prompt cache holds.\n"
            "# TYPE ilpd_prompt_cache_entries gauge\nilpd_prompt_cache_entries %d\n",
        (unsigned long long)M.cache.hits, (unsigned long long)M.cache.misses, (unsigned long long)M.cache.tokens_reused,
        (unsigned long long)M.cache.evictions, M.cache.bytes, M.cache.entries);
    int active = 0, skipped = 0;
    for (int i = 0; i < M.win_n; i++) {
        active += M.win_active[i];
        skipped += M.win_skipped[i];
    }
    out(&b, "# HELP ilpd_skip_activation_ratio Share of the last %d generations that skipped a layer.\n"
            "# TYPE ilpd_skip_activation_ratio gauge\nilpd_skip_activation_ratio %.4f\n", WINDOW,
        M.win_n ? (double)active / M.win_n : 0.0);
    out(&b, "# HELP ilpd_skipped_layers_mean Mean layers skipped over the last %d generations.\n"
            "# TYPE ilpd_skipped_layers_mean gauge\nilpd_skipped_layers_mean %.4f\n", WINDOW,
        M.win_n ? (double)skipped / M.win_n : 0.0);
    pthread_mutex_unlock(&M.lock);
    if (b.failed) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
