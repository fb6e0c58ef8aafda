/* threadpool.c - spinning-then-sleeping worker pool. */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#define TP_SPIN_ROUNDS 20000

struct tp_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_uint generation;   /* bumped once per job */
    atomic_int pending;       /* workers still busy with the current job */
    atomic_int stop;
    tp_fn fn;
    void *ctx;
    size_t n_items, grain;
};

typedef struct {
    tp_pool *pool;
    int ith;
} tp_worker;

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

static void *worker_main(void *arg) {
    tp_worker *w = arg;
    tp_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->generation, memory_order_acquire) == seen && !atomic_load(&p->stop)) {
            if (++spins < TP_SPIN_ROUNDS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->lock);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->wake, &p->lock);
            pthread_mutex_unlock(&p->lock);
        }
        if (atomic_load(&p->stop)) break;
        seen = atomic_load(&p->generation);
        size_t b, e;
        share(p, w->ith, &b, &e);
        if (b < e) p->fn(p->ctx, b, e, w->ith);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
    free(w);
    return NULL;
}

tp_pool *tp_create(int n) {
    if (n < 1) n = 1;
    tp_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->threads = calloc((size_t)n, sizeof *p->threads);
    if (!p->threads) {
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
    free(p);
}

int tp_size(const tp_pool *p) { return p->n; }

void tp_run(tp_pool *p, tp_fn fn, void *ctx, size_t n, size_t grain) {
    if (grain == 0) grain = 1;
    if (p->n == 1 || n <= grain) {
        fn(ctx, 0, n, 0);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_items = n;
    p->grain = grain;
    atomic_store(&p->pending, p->n - 1);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->generation, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    size_t b, e;
    share(p, 0, &b, &e);
    if (b < e) fn(ctx, b, e, 0);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) sched_yield();
}
