/* threadpool.h - a fixed pool of worker threads for data-parallel kernels.
 *
 * tp_run() splits [0, n) into one contiguous range per thread (the calling
 * thread takes a share too) and returns when every range is done. Workers
 * spin (pause) for a few milliseconds after each job, since decode launches
 * many short jobs per token, and then sleep on a condition variable.
 */
#ifndef ILPD_THREADPOOL_H
#define ILPD_THREADPOOL_H

#include <stddef.h>

typedef struct tp_pool tp_pool;

/* FN processes items [begin, end) of a job; ith is the thread's index. */
typedef void (*tp_fn)(void *ctx, size_t begin, size_t end, int ith);

/* Creates a pool of N threads in all (N-1 workers plus the caller); returns
 * NULL when out of memory or when threads cannot be created. */
tp_pool *tp_create(int n);
void tp_destroy(tp_pool *p);
int tp_size(const tp_pool *p);
/* Runs FN over [0, n) in parallel, ranges aligned to GRAIN items. */
void tp_run(tp_pool *p, tp_fn fn, void *ctx, size_t n, size_t grain);
/* The same, balanced: each thread works through its own contiguous range
 * CHUNK items at a time (one memory stream per thread), then takes chunks
 * from the back of the other threads' ranges until none are left (balances
 * threads slowed by other work on the machine). n < 2^32. */
void tp_run_dynamic(tp_pool *p, tp_fn fn, void *ctx, size_t n, size_t chunk);

#endif
