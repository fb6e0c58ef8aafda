/* threadpool.c - spinning-then-sleeping worker pool.
 *
 * Handoff: the caller publishes the job and bumps a generation counter;
 * workers spin on it (with the pause instruction) for about TP_SPIN_NS after
 * their last job, then sleep on a condition variable. The caller takes the
 * lock and signals only when some worker is asleep, so a job handed to
 * spinning workers costs two cache-line transfers (well under 1 us), and
 * completion is a counter the caller spins on. */
#include "kernels/cpu/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#define TP_SPIN_NS 3000000LL /* 3 ms: covers the gaps between a token's kernels and between tokens */

/* A thread's share of a balanced job: [front, back) packed as front << 32 | back. */
typedef struct {
    _Alignas(64) _Atomic uint64_t fb;
} tp_range;

struct tp_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    tp_range *ranges;                    /* one per thread */
    /* the job, written before generation is bumped (one cache line with it) */
    _Alignas(64) atomic_uint generation; /* bumped once per job */
    tp_fn fn;
    void *ctx;
    size_t n_items, grain;
    int dynamic;
    _Alignas(64) atomic_int pending;     /* workers still busy with the current job */
    _Alignas(64) atomic_int sleepers;    /* workers waiting on the condition variable */
    atomic_int stop;
};

typedef struct {
    tp_pool *pool;
    int ith;
} tp_worker;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The [begin, end) share of thread ITH. */
static void share(const tp_pool *p, int ith, size_t *begin, size_t *end) {
    size_t blocks = (p->n_items + p->grain - 1) / p->grain;
    size_t per = blocks / (size_t)p->n, extra = blocks % (size_t)p->n;
    size_t b = (size_t)ith * per + ((size_t)ith < extra ? (size_t)ith : extra);
    size_t e = b + per + ((size_t)ith < extra ? 1 : 0);
    *begin = b * p->grain;
    *end = e * p->grain < p->n_items ? e * p->grain : p->n_items;
    if (*begin > *end) *begin = *end;
}

/* Claims up to CHUNK items of range R, from the front (the owner) or the
 * back (a thief); returns 0 when the range is empty. */
static int claim(tp_range *r, size_t chunk, int from_back, size_t *b, size_t *e) {
    uint64_t v = atomic_load_explicit(&r->fb, memory_order_relaxed);
    for (;;) {
        uint64_t f = v >> 32, k = v & 0xffffffffu, nv;
        if (f >= k) return 0;
        if (from_back) {
            uint64_t nk = k - f > chunk ? k - chunk : f;
            nv = f << 32 | nk;
            *b = nk;
            *e = k;
        } else {
            uint64_t nf = k - f > chunk ? f + chunk : k;
            nv = nf << 32 | k;
            *b = f;
            *e = nf;
        }
        if (atomic_compare_exchange_weak_explicit(&r->fb, &v, nv, memory_order_relaxed, memory_order_relaxed)) return 1;
    }
}

static void do_share(tp_pool *p, int ith) {
    if (p->dynamic) {
        /* own contiguous range first (one memory stream per thread), then steal from the others' backs */
        size_t b, e;
        while (claim(&p->ranges[ith], p->grain, 0, &b, &e)) p->fn(p->ctx, b, e, ith);
        for (int k = 1; k < p->n; k++) {
            tp_range *r = &p->ranges[(ith + k) % p->n];
            while (claim(r, p->grain, 1, &b, &e)) p->fn(p->ctx, b, e, ith);
        }
    } else {
        size_t b, e;
        share(p, ith, &b, &e);
        if (b < e) p->fn(p->ctx, b, e, ith);
    }
}

static void *worker_main(void *arg) {
    tp_worker *w = arg;
    tp_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        long long t0 = 0;
        int spins = 0;
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_relaxed)) goto out;
            cpu_relax();
            if (++spins < 256) continue;
            spins = 0;
            sched_yield(); /* lets a thread of ours (or anyone) run when the cores are oversubscribed */
            long long t = now_ns();
            if (!t0) t0 = t;
            if (t - t0 < TP_SPIN_NS) continue;
            pthread_mutex_lock(&p->lock);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop)) pthread_cond_wait(&p->wake, &p->lock);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->lock);
            t0 = 0;
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load_explicit(&p->generation, memory_order_acquire);
        do_share(p, w->ith);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
out:
    free(w);
    return NULL;
}

tp_pool *tp_create(int n) {
    if (n < 1) n = 1;
    tp_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->threads = calloc((size_t)n, sizeof *p->threads);
    p->ranges = aligned_alloc(64, (size_t)n * sizeof *p->ranges);
    if (!p->threads || !p->ranges) {
        free(p->threads);
        free(p->ranges);
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    p->n = 1; /* counts the threads that exist, so tp_destroy joins only those */
    for (int i = 1; i < n; i++) {
        tp_worker *w = malloc(sizeof *w);
        if (!w) goto fail;
        w->pool = p;
        w->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker_main, w)) {
            free(w);
            goto fail;
        }
        p->n = i + 1;
    }
    return p;
fail:
    tp_destroy(p);
    return NULL;
}

void tp_destroy(tp_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    free(p->threads);
    free(p->ranges);
    free(p);
}

int tp_size(const tp_pool *p) { return p->n; }

static void run(tp_pool *p, tp_fn fn, void *ctx, size_t n, size_t grain, int dynamic) {
    if (grain == 0) grain = 1;
    if (p->n == 1 || n <= grain) {
        if (n) fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->grain = grain;
    p->dynamic = dynamic;
    if (dynamic) {
        size_t per = (n + (size_t)p->n - 1) / (size_t)p->n;
        for (int i = 0; i < p->n; i++) {
            uint64_t b = (uint64_t)i * per < n ? (uint64_t)i * per : n, e = b + per < n ? b + per : n;
            atomic_store_explicit(&p->ranges[i].fb, b << 32 | e, memory_order_relaxed);
        }
    }
    atomic_store_explicit(&p->pending, p->n - 1, memory_order_relaxed);
    atomic_fetch_add(&p->generation, 1); /* seq_cst: ordered before the sleepers load */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    do_share(p, 0);
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0;) {
        cpu_relax();
        if (++spins == 256) {
            spins = 0;
            sched_yield(); /* a worker may be waiting for this core */
        }
    }
}

void tp_run(tp_pool *p, tp_fn fn, void *ctx, size_t n, size_t grain) { run(p, fn, ctx, n, grain, 0); }

void tp_run_dynamic(tp_pool *p, tp_fn fn, void *ctx, size_t n, size_t chunk) { run(p, fn, ctx, n, chunk, 1); }
