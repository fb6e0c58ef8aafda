/* prefix_cache.c - the KV of recent requests (prefix_cache.h). */
#include "engine/prefix_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct prefix_entry {
    uint64_t owner;
    int32_t *tokens;
    int n;
    uint8_t mask[MASK_MAX_LAYERS]; /* layers whose KV the entry holds */
    void **k, **v;                 /* per layer: n rows laid out as a backend cache of n positions, or NULL */
    size_t bytes;
    uint64_t used;                 /* the cache's tick at the last use */
    int ttl_s;                     /* keep hint (0: none) */
    double expires;                /* monotonic seconds, with a keep hint */
};

struct prefix_cache {
    size_t budget;
    int n_layers, kv_dim, head_dim;
    kb_kv_type kv_type;
    prefix_entry **e;
    int n, cap;
    uint64_t tick;
    pthread_mutex_t lock; /* the counters below */
    prefix_cache_stats st;
};

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static size_t row_bytes(const prefix_cache *pc) { return kb_kv_bytes(pc->kv_type, 1, pc->kv_dim); }

prefix_cache *prefix_cache_new(size_t budget, int n_layers, int kv_dim, int head_dim, kb_kv_type kv_type) {
    if (!budget || n_layers < 1 || n_layers > MASK_MAX_LAYERS) return NULL;
    prefix_cache *pc = calloc(1, sizeof *pc);
    if (!pc) return NULL;
    pc->budget = pc->st.budget = budget;
    pc->n_layers = n_layers;
    pc->kv_dim = kv_dim;
    pc->head_dim = head_dim;
    pc->kv_type = kv_type;
    if (pthread_mutex_init(&pc->lock, NULL)) {
        free(pc);
        return NULL;
    }
    return pc;
}

static void entry_free(prefix_cache *pc, prefix_entry *e) {
    if (!e) return;
    for (int l = 0; e->k && l < pc->n_layers; l++) {
        free(e->k[l]);
        free(e->v[l]);
    }
    free(e->k);
    free(e->v);
    free(e->tokens);
    free(e);
}

/* Drops entry I (EVICTED: counted as an eviction). */
static void entry_drop(prefix_cache *pc, int i, int evicted) {
    prefix_entry *e = pc->e[i];
    pthread_mutex_lock(&pc->lock);
    pc->st.bytes -= e->bytes;
    pc->st.entries--;
    pc->st.evictions += evicted != 0;
    pthread_mutex_unlock(&pc->lock);
    entry_free(pc, e);
    pc->e[i] = pc->e[--pc->n];
}

void prefix_cache_free(prefix_cache *pc) {
    if (!pc) return;
    for (int i = 0; i < pc->n; i++) entry_free(pc, pc->e[i]);
    free(pc->e);
    pthread_mutex_destroy(&pc->lock);
    free(pc);
}

/* Drops the entries whose keep hint ran out. */
static void expire(prefix_cache *pc) {
    double now = mono_s();
    for (int i = pc->n - 1; i >= 0; i--)
        if (pc->e[i]->ttl_s && pc->e[i]->expires < now) entry_drop(pc, i, 1);
}

static void touch(prefix_cache *pc, prefix_entry *e) {
    e->used = ++pc->tick;
    if (e->ttl_s) e->expires = mono_s() + e->ttl_s;
}

static int common_prefix(const int32_t *a, int na, const int32_t *b, int nb) {
    int i = 0;
    while (i < na && i < nb && a[i] == b[i]) i++;
    return i;
}

int prefix_cache_lookup(prefix_cache *pc, uint64_t owner, const int32_t *tokens, int n, int max, const uint8_t *layers,
                        prefix_entry **out) {
    *out = NULL;
    if (!pc) return 0;
    expire(pc);
    int best = 0;
    for (int i = 0; i < pc->n; i++) {
        prefix_entry *e = pc->e[i];
        if (e->owner != owner || memcmp(e->mask, layers, (size_t)pc->n_layers)) continue;
        int c = common_prefix(e->tokens, e->n, tokens, n);
        if (c > max) c = max;
        if (c > best) best = c, *out = e;
    }
    if (*out) touch(pc, *out);
    pthread_mutex_lock(&pc->lock);
    if (best) pc->st.hits++;
    else pc->st.misses++;
    pthread_mutex_unlock(&pc->lock);
    return best;
}

void prefix_cache_restore(prefix_cache *pc, prefix_entry *e, kb_backend *kb, model_state *st, int n, int l0) {
    if (!pc || !e || n < 1) return;
    for (int l = l0; l < pc->n_layers; l++)
        if (st->kv[l].k) kb_kv_rows_put(kb, &st->kv[l], pc->head_dim, n, e->k[l], e->v[l], e->n);
    pthread_mutex_lock(&pc->lock);
    pc->st.tokens_reused += (uint64_t)n;
    pthread_mutex_unlock(&pc->lock);
}

/* Makes room for NEED bytes: entries without a keep hint first, the least
 * recently used first. Returns 0, or -1 when NEED is more than the budget. */
static int make_room(prefix_cache *pc, size_t need) {
    if (need > pc->budget) return -1;
    while (pc->n && pc->st.bytes + need > pc->budget) {
        int v = 0;
        for (int i = 1; i < pc->n; i++) {
            const prefix_entry *a = pc->e[i], *b = pc->e[v];
            if ((a->ttl_s != 0) < (b->ttl_s != 0) || ((a->ttl_s != 0) == (b->ttl_s != 0) && a->used < b->used)) v = i;
        }
        entry_drop(pc, v, 1);
    }
    return 0;
}

/* A new entry of ST's computed layers, positions 0..n-1; NULL when out of memory. */
static prefix_entry *entry_new(prefix_cache *pc, uint64_t owner, const int32_t *tokens, int n, kb_backend *kb,
                               const model_state *st) {
    prefix_entry *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->owner = owner;
    e->n = n;
    e->tokens = malloc((size_t)n * sizeof *e->tokens);
    e->k = calloc((size_t)pc->n_layers, sizeof *e->k);
    e->v = calloc((size_t)pc->n_layers, sizeof *e->v);
    if (!e->tokens || !e->k || !e->v) goto oom;
    memcpy(e->tokens, tokens, (size_t)n * sizeof *tokens);
    e->bytes = sizeof *e + (size_t)n * sizeof *tokens;
    size_t side = (size_t)n * row_bytes(pc);
    for (int l = 0; l < pc->n_layers; l++) {
        if (!st->kv[l].k) continue;
        e->k[l] = malloc(side);
        e->v[l] = malloc(side);
        if (!e->k[l] || !e->v[l]) goto oom;
        kb_kv_rows_get(kb, &st->kv[l], pc->head_dim, n, e->k[l], e->v[l], n);
        e->mask[l] = 1;
        e->bytes += 2 * side;
    }
    return e;
oom:
    entry_free(pc, e);
    return NULL;
}

/* Bytes of one position of ST's computed layers with its token. */
static size_t position_bytes(const prefix_cache *pc, const model_state *st) {
    size_t per = sizeof(int32_t);
    for (int l = 0; l < pc->n_layers; l++)
        if (st->kv[l].k) per += 2 * row_bytes(pc);
    return per;
}

int prefix_cache_store(prefix_cache *pc, uint64_t owner, const int32_t *tokens, int n, kb_backend *kb,
                       const model_state *st, int ttl_s) {
    if (!pc || n < 1) return 0;
    size_t per = position_bytes(pc, st), room = pc->budget > sizeof(prefix_entry) ? pc->budget - sizeof(prefix_entry) : 0;
    if ((size_t)n > room / per) n = (int)(room / per);
    if (n < 1) return 0;
    uint8_t mask[MASK_MAX_LAYERS] = {0};
    for (int l = 0; l < pc->n_layers; l++) mask[l] = st->kv[l].k != NULL;
    for (int i = pc->n - 1; i >= 0; i--) {
        prefix_entry *e = pc->e[i];
        if (e->owner != owner || memcmp(e->mask, mask, (size_t)pc->n_layers)) continue;
        int c = common_prefix(e->tokens, e->n, tokens, n);
        if (c == n) { /* it holds them already */
            if (ttl_s > e->ttl_s) e->ttl_s = ttl_s;
            touch(pc, e);
            return 0;
        }
        if (c == e->n) entry_drop(pc, i, 0); /* this one extends it */
    }
    if (pc->n == pc->cap) {
        int cap = pc->cap ? 2 * pc->cap : 8;
        prefix_entry **ne = realloc(pc->e, (size_t)cap * sizeof *ne);
        if (!ne) return 0;
        pc->e = ne;
        pc->cap = cap;
    }
    if (make_room(pc, sizeof(prefix_entry) + (size_t)n * per)) return 0;
    prefix_entry *e = entry_new(pc, owner, tokens, n, kb, st);
    if (!e) return 0;
    e->ttl_s = ttl_s;
    touch(pc, e);
    pc->e[pc->n++] = e;
    pthread_mutex_lock(&pc->lock);
    pc->st.bytes += e->bytes;
    pc->st.entries++;
    pthread_mutex_unlock(&pc->lock);
    return n;
}

void prefix_cache_stats_get(prefix_cache *pc, prefix_cache_stats *s) {
    memset(s, 0, sizeof *s);
    if (!pc) return;
    pthread_mutex_lock(&pc->lock);
    *s = pc->st;
    pthread_mutex_unlock(&pc->lock);
}
