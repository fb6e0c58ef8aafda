/* prefix_cache.c - see prefix_cache.h. Entries live in a small array,
 * searched linearly: a few hundred prompts at most fit any sane budget. */
#include "engine/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

struct pcache {
    size_t budget;
    pcache_entry **e;
    int n, cap;
    uint64_t clock;
    pcache_stats st;
};

pcache *pcache_new(size_t budget) {
    pcache *c = calloc(1, sizeof *c);
    if (c) c->budget = budget;
    return c;
}

void pcache_free(pcache *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) pcache_entry_free(c->e[i]);
    free(c->e);
    free(c);
}

size_t pcache_budget(const pcache *c) { return c ? c->budget : 0; }

pcache_entry *pcache_entry_new(uint64_t key, const int32_t *tokens, int n, int n_layers, const uint8_t *has,
                               size_t row_bytes, size_t extra_bytes) {
    pcache_entry *e = calloc(1, sizeof *e);
    if (!e || n_layers > MASK_MAX_LAYERS) goto fail;
    e->key = key;
    e->n = n;
    e->n_layers = n_layers;
    e->row_bytes = row_bytes;
    e->extra_bytes = extra_bytes;
    e->tokens = malloc((size_t)n * sizeof *e->tokens);
    e->k = calloc((size_t)n_layers, sizeof *e->k);
    e->v = calloc((size_t)n_layers, sizeof *e->v);
    e->extra = extra_bytes ? malloc(extra_bytes) : NULL;
    if (!e->tokens || !e->k || !e->v || (extra_bytes && !e->extra)) goto fail;
    memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
    e->bytes = sizeof *e + (size_t)n * sizeof *tokens + extra_bytes;
    for (int l = 0; l < n_layers; l++) {
        e->has[l] = has[l] != 0;
        if (!e->has[l]) continue;
        e->k[l] = malloc((size_t)n * row_bytes);
        e->v[l] = malloc((size_t)n * row_bytes);
        if (!e->k[l] || !e->v[l]) goto fail;
        e->bytes += 2 * (size_t)n * row_bytes;
    }
    return e;
fail:
    pcache_entry_free(e);
    return NULL;
}

void pcache_entry_free(pcache_entry *e) {
    if (!e) return;
    for (int l = 0; e->k && e->v && l < e->n_layers; l++) {
        free(e->k[l]);
        free(e->v[l]);
    }
    free(e->k);
    free(e->v);
    free(e->tokens);
    free(e->extra);
    free(e);
}

/* Removes entry I (freeing it). */
static void drop(pcache *c, int i, int evicted) {
    c->st.bytes -= c->e[i]->bytes;
    c->st.evictions += (uint64_t)evicted;
    pcache_entry_free(c->e[i]);
    c->e[i] = c->e[--c->n];
}

const pcache_entry *pcache_find(pcache *c, uint64_t key, const int32_t *tokens, int n, double now,
                                int (*ok)(const pcache_entry *e, void *ud), void *ud) {
    pcache_entry *best = NULL;
    for (int i = 0; c && i < c->n; i++) {
        pcache_entry *e = c->e[i];
        if (e->key != key || e->n >= n || e->expires < now || (best && e->n <= best->n)) continue;
        if (!memcmp(e->tokens, tokens, (size_t)e->n * sizeof *tokens) && (!ok || ok(e, ud))) best = e;
    }
    if (!c) return NULL;
    if (!best) {
        c->st.misses++;
        return NULL;
    }
    c->st.hits++;
    c->st.tokens_reused += (uint64_t)best->n;
    best->used = ++c->clock;
    return best;
}

/* The entry to evict next: an expired one, else the least recently used
 * unhinted one, else the least recently used. -1 when empty. */
static int victim(const pcache *c, double now) {
    int v = -1;
    for (int i = 0; i < c->n; i++) {
        const pcache_entry *e = c->e[i];
        if (e->expires < now) return i;
        if (v < 0 || (e->hinted < c->e[v]->hinted) || (e->hinted == c->e[v]->hinted && e->used < c->e[v]->used)) v = i;
    }
    return v;
}

int pcache_put(pcache *c, pcache_entry *e, double now) {
    if (!c || e->bytes > c->budget) {
        pcache_entry_free(e);
        return -1;
    }
    for (int i = 0; i < c->n; i++)
        if (c->e[i]->key == e->key && c->e[i]->n == e->n &&
            !memcmp(c->e[i]->tokens, e->tokens, (size_t)e->n * sizeof *e->tokens)) {
            drop(c, i, 0);
            break;
        }
    while (c->n && c->st.bytes + e->bytes > c->budget) drop(c, victim(c, now), 1);
    if (c->n == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        pcache_entry **ne = realloc(c->e, (size_t)cap * sizeof *ne);
        if (!ne) {
            pcache_entry_free(e);
            return -1;
        }
        c->e = ne;
        c->cap = cap;
    }
    e->used = ++c->clock;
    c->e[c->n++] = e;
    c->st.bytes += e->bytes;
    return 0;
}

void pcache_get_stats(const pcache *c, pcache_stats *s) {
    memset(s, 0, sizeof *s);
    if (!c) return;
    *s = c->st;
    s->entries = c->n;
}
