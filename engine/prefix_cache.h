/* prefix_cache.h - the KV of recent requests, kept for the next ones.
 *
 * An entry is the KV cache of the first n positions of a token sequence (a
 * prompt and the tokens generated after it), for the layers that request
 * computed, copied to host memory. A later request whose prompt starts with
 * the same tokens copies those rows back into its own KV cache and
 * prefills only the rest: the rows are what its own prefill would have
 * computed (the CPU matmul gives each row the same bits in any batch), so
 * the answer is the same.
 *
 * Entries are keyed by their tokens, the layers they were computed with and an owner (a
 * hash of the API key, 0 when keys are off): a lookup only sees its
 * owner's entries. The bytes held never exceed the budget: the least
 * recently used entry goes first (entries stored with a keep hint, the API's
 * cache_control, after the others), and an entry with a keep hint is gone
 * once its TTL passed without a hit.
 *
 * The engine calls everything but prefix_cache_stats_get from the thread
 * that runs its generations; prefix_cache_stats_get may be called from any
 * thread.
 */
#ifndef ILPD_PREFIX_CACHE_H
#define ILPD_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "kernels/backend.h"
#include "probe/mask.h"

typedef struct prefix_cache prefix_cache;
typedef struct prefix_entry prefix_entry;

typedef struct {
    uint64_t hits, misses;   /* lookups that found a prefix, and those that did not */
    uint64_t tokens_reused;  /* positions copied back instead of prefilled */
    uint64_t evictions;      /* entries dropped for room or past their TTL */
    size_t bytes;            /* bytes held by entries */
    size_t budget;
    int entries;
} prefix_cache_stats;

/* A cache of BUDGET bytes for a model of N_LAYERS layers whose KV rows
 * are KV_DIM values (heads of HEAD_DIM) of type KV_TYPE. Returns NULL when
 * out of memory or when BUDGET is 0 (no cache: every call below accepts a
 * NULL cache and does nothing). */
prefix_cache *prefix_cache_new(size_t budget, int n_layers, int kv_dim, int head_dim, kb_kv_type kv_type);
/* Frees every entry and the cache. */
void prefix_cache_free(prefix_cache *pc);

/* Finds OWNER's entry sharing the longest prefix with TOKENS (n of them)
 * among those computed with exactly the layers LAYERS (n_layers bytes, 1 =
 * computed: a layer's KV depends on every layer below it, so an entry of
 * another mask is of no use), counting at most MAX positions. Counts a hit
 * or a miss. Returns the number of positions to reuse (0: none; *OUT NULL)
 * and the entry in *OUT (owned by the cache, valid until the next store or
 * free). */
int prefix_cache_lookup(prefix_cache *pc, uint64_t owner, const int32_t *tokens, int n, int max, const uint8_t *layers,
                        prefix_entry **out);

/* Copies positions 0..n-1 of entry E into the KV cache of ST (of the
 * lookup's LAYERS) for the layers from L0 on, and counts them as reused. */
void prefix_cache_restore(prefix_cache *pc, prefix_entry *e, kb_backend *kb, model_state *st, int n, int l0);

/* Stores the KV of positions 0..n-1 of ST (their tokens TOKENS) for OWNER,
 * replacing OWNER's entries that this one extends. TTL_S > 0: a keep hint
 * that lasts TTL_S seconds from the last use; 0: plain LRU. Returns the
 * positions stored (fewer than n when the budget holds fewer; 0 when
 * nothing was stored: out of memory, or an entry already holds them). */
int prefix_cache_store(prefix_cache *pc, uint64_t owner, const int32_t *tokens, int n, kb_backend *kb,
                       const model_state *st, int ttl_s);

/* Copies the counters into *S (zeros for a NULL cache). */
void prefix_cache_stats_get(prefix_cache *pc, prefix_cache_stats *s);

#endif
