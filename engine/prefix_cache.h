/* prefix_cache.h - the KV of recent prompts, kept in host memory within a
 * byte budget, so that a request whose prompt starts with a kept prompt
 * prefills only the rest (usage: cache_read_input_tokens).
 *
 * An entry is a whole prompt: its token ids, the key of the tenant that sent
 * it (a hash of the API key; entries never serve another key), the layers
 * whose KV it holds (a skipped layer has none) with rows 0..n-1 of each, and
 * an opaque blob the engine keeps beside it (the probe's running sums, so
 * that a request served from the cache decides the same mask). Keys are
 * token ids, never text. Eviction: expired entries first, then the least
 * recently used, entries without a cache_control hint before hinted ones.
 * Not thread-safe: one engine, one request at a time. */
#ifndef ENGINE_PREFIX_CACHE_H
#define ENGINE_PREFIX_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "probe/mask.h"

typedef struct {
    uint64_t key;            /* the tenant (0: no API keys configured) */
    int32_t *tokens;         /* [n] */
    int n, n_layers;
    uint8_t has[MASK_MAX_LAYERS]; /* 1: the entry holds that layer's KV */
    void **k, **v;           /* [n_layers]: [n][row_bytes] host copies, NULL where has[l] is 0 */
    size_t row_bytes;        /* one position of one layer's K (or V) */
    void *extra;             /* the engine's blob (extra_bytes), owned */
    size_t extra_bytes;
    size_t bytes;            /* everything the entry holds */
    uint64_t used;           /* LRU clock */
    double expires;          /* unix seconds */
    int hinted;              /* the request marked a prefix with cache_control */
} pcache_entry;

typedef struct {
    uint64_t hits, misses, tokens_reused, evictions;
    size_t bytes;            /* held now */
    int entries;
} pcache_stats;

typedef struct pcache pcache;

/* A cache of at most BUDGET bytes (free with pcache_free), or NULL when out of memory. */
pcache *pcache_new(size_t budget);
void pcache_free(pcache *c);
size_t pcache_budget(const pcache *c);

/* A new entry for the N tokens TOKENS with room for the KV rows of the
 * layers HAS marks (n_layers bytes) and EXTRA_BYTES of blob; the caller
 * fills k, v and extra. NULL when out of memory. */
pcache_entry *pcache_entry_new(uint64_t key, const int32_t *tokens, int n, int n_layers, const uint8_t *has,
                               size_t row_bytes, size_t extra_bytes);
void pcache_entry_free(pcache_entry *e);

/* The longest live entry of KEY whose tokens are a proper prefix of TOKENS
 * (N of them) and that OK accepts (OK may be NULL), or NULL; counts a hit
 * (and its tokens) or a miss, and marks the entry used. Borrowed: valid
 * until the next pcache_put. */
const pcache_entry *pcache_find(pcache *c, uint64_t key, const int32_t *tokens, int n, double now,
                                int (*ok)(const pcache_entry *e, void *ud), void *ud);

/* Keeps E (taking it), replacing an entry of the same key and tokens, and
 * evicting until the cache fits its budget. Returns 0, or -1 when E alone
 * is larger than the budget (E is freed). */
int pcache_put(pcache *c, pcache_entry *e, double now);

void pcache_get_stats(const pcache *c, pcache_stats *s);

#endif
