/* ratelimit.h - per-key token buckets for the optional request rate limit. */
#ifndef ILPD_RATELIMIT_H
#define ILPD_RATELIMIT_H

typedef struct ratelimit ratelimit;

/* N_BUCKETS buckets (one per API key, or one for everyone when no keys are
 * configured), each holding up to BURST requests and refilled at
 * PER_MINUTE / 60 requests a second. Returns NULL when out of memory. */
ratelimit *ratelimit_create(int n_buckets, double per_minute, double burst);
void ratelimit_free(ratelimit *rl);

/* Takes one request from bucket I at monotonic time NOW (seconds). Returns 0
 * when allowed, else the whole seconds until a request will be (>= 1).
 * Thread-safe. */
int ratelimit_take(ratelimit *rl, int i, double now);

#endif
