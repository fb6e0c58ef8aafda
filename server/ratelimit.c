/* ratelimit.c - token buckets: each request takes one token; tokens refill
 * continuously up to the burst size. */
#include "server/ratelimit.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

typedef struct {
    double tokens, t_last;
} bucket;

struct ratelimit {
    pthread_mutex_t lock;
    double rate, burst; /* tokens per second, capacity */
    int n;
    bucket b[];
};

ratelimit *ratelimit_create(int n_buckets, double per_minute, double burst) {
    if (n_buckets < 1 || !(per_minute > 0) || !(burst >= 1)) return NULL;
    ratelimit *rl = calloc(1, sizeof *rl + (size_t)n_buckets * sizeof(bucket));
    if (!rl) return NULL;
    if (pthread_mutex_init(&rl->lock, NULL)) {
        free(rl);
        return NULL;
    }
    rl->rate = per_minute / 60.0;
    rl->burst = burst;
    rl->n = n_buckets;
    for (int i = 0; i < n_buckets; i++) rl->b[i].tokens = burst, rl->b[i].t_last = -1;
    return rl;
}

void ratelimit_free(ratelimit *rl) {
    if (!rl) return;
    pthread_mutex_destroy(&rl->lock);
    free(rl);
}

int ratelimit_take(ratelimit *rl, int i, double now) {
    if (i < 0 || i >= rl->n) i = 0;
    pthread_mutex_lock(&rl->lock);
    bucket *b = &rl->b[i];
    if (b->t_last >= 0 && now > b->t_last) b->tokens = fmin(rl->burst, b->tokens + (now - b->t_last) * rl->rate);
    if (b->t_last < 0 || now > b->t_last) b->t_last = now;
    int wait = 0;
    if (b->tokens >= 1) {
        b->tokens -= 1;
    } else {
        wait = (int)ceil((1 - b->tokens) / rl->rate);
        if (wait < 1) wait = 1;
    }
    pthread_mutex_unlock(&rl->lock);
    return wait;
}
