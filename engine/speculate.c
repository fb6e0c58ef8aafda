/* speculate.c - draft policy, prompt lookup and speculative sampling. */
#include "engine/speculate.h"

#include <stdlib.h>
#include <string.h>

#define SPEC_WINDOW 24       /* layer-drafted tokens between changes of the mask */
#define SPEC_EMA 0.3

static void mask_build(spec_state *s) {
    if (!s->n_order) return;
    memset(s->mask, 1, (size_t)s->n_layers);
    for (int i = 0; i < s->n_skip; i++) s->mask[s->order[i]] = 0;
}

void spec_init(spec_state *s, int n_layers, const uint8_t *mask, const int *order, int n_order, int n_skip,
               const spec_costs *cost, const spec_memory *mem) {
    memset(s, 0, sizeof *s);
    s->n_layers = n_layers;
    memcpy(s->mask, mask, (size_t)n_layers);
    if (order && n_order > 0) {
        memcpy(s->order, order, (size_t)n_order * sizeof *order);
        s->n_order = n_order;
        s->n_skip = n_skip;
    }
    s->cost = *cost;
    s->mem = *mem;
    static const double prior[SPEC_N_SOURCES] = {[SPEC_NGRAM] = 0.4, [SPEC_LOOKUP] = 0.8, [SPEC_LAYERS] = 0.8};
    if (s->mem.rate_guess <= 0) s->mem.rate_guess = 0.4;
    for (int i = 0; i < SPEC_N_SOURCES; i++) {
        if (s->mem.rate[i] <= 0) s->mem.rate[i] = prior[i];
        if (s->mem.explore_gap[i] <= 0) s->mem.explore_gap[i] = SPEC_EXPLORE;
    }
}

void spec_finish(const spec_state *s, int n_generated, spec_memory *mem) {
    *mem = s->mem;
    mem->clock += n_generated;
}

/* A layer draft step's cost: the head and the layers the mask computes. */
static double draft_step_cost(const spec_state *s) {
    double c = s->cost.head;
    for (int l = 0; l < s->n_layers; l++) c += s->mask[l] ? s->cost.layer[l] : 0;
    return c;
}

double spec_yield(double a, int k, double c, const double *vcost) { return spec_yield2(a, 0, a, k, c, vcost); }

double spec_yield2(double a_sure, int sure, double a, int k, double c, const double *vcost) {
    double tokens = 1, p = 1; /* the verification's own token, then each drafted one kept with all before it */
    for (int j = 0; j < k; j++) {
        p *= j < sure ? a_sure : a;
        tokens += p;
    }
    return tokens / (vcost[k + 1] + k * c);
}

/* The best draft length up to KMAX for SRC (SURE tokens of them agreed on)
 * and its yield (0 when none). */
static double best_k(const spec_state *s, spec_source src, int kmax, int sure, double c, int *k) {
    double best = 0, a = src == SPEC_LOOKUP ? s->mem.rate_guess : s->mem.rate[src];
    *k = 0;
    for (int j = 1; j <= kmax; j++) {
        double y = spec_yield2(s->mem.rate[src], sure, a, j, c, s->cost.vcost);
        if (y > best) {
            best = y;
            *k = j;
        }
    }
    return best;
}

spec_source spec_plan(spec_state *s, int n_generated, spec_source ngram_src, int ngram_len, int ngram_sure, int room,
                      int *k) {
    int kn = 0, kl = 0;
    *k = 0;
    if (room < 1) return SPEC_PLAIN;
    int kmax = room < SPEC_K_MAX ? room : SPEC_K_MAX;
    double yn = ngram_len > 0 ? best_k(s, ngram_src, ngram_len < kmax ? ngram_len : kmax, ngram_sure, 0, &kn) : 0;
    double c = draft_step_cost(s);
    int layers = 0; /* a mask that skips nothing drafts nothing */
    for (int l = 0; l < s->n_layers; l++) layers |= !s->mask[l];
    double yl = layers ? best_k(s, SPEC_LAYERS, kmax, 0, c, &kl) : 0;
    /* a source left unused for a while is tried once more, briefly */
    long long now = s->mem.clock + n_generated;
    int explore_n = ngram_len > 0 && now - s->mem.last_used[ngram_src] >= s->mem.explore_gap[ngram_src];
    int explore_l = layers && now - s->mem.last_used[SPEC_LAYERS] >= s->mem.explore_gap[SPEC_LAYERS];
    if (yn >= SPEC_MARGIN && yn >= yl) {
        *k = kn;
        s->mem.explore_gap[ngram_src] = SPEC_EXPLORE;
        return ngram_src;
    }
    if (yl >= SPEC_MARGIN) {
        *k = kl;
        s->mem.explore_gap[SPEC_LAYERS] = SPEC_EXPLORE;
        return SPEC_LAYERS;
    }
    if (explore_n || explore_l) {
        spec_source src = explore_n ? ngram_src : SPEC_LAYERS;
        s->mem.last_used[src] = now;
        if (s->mem.explore_gap[src] < 16 * SPEC_EXPLORE) s->mem.explore_gap[src] *= 2;
        *k = 2 < kmax ? 2 : kmax;
        if (src != SPEC_LAYERS && *k > ngram_len) *k = ngram_len;
        return src;
    }
    return SPEC_PLAIN;
}

/* Layer drafts: more layers skipped while nearly every token is kept, fewer
 * when under half are. Returns 1 when the mask changed. */
static int adapt_mask(spec_state *s) {
    if (!s->n_order || s->win_drafted < SPEC_WINDOW) return 0;
    double rate = (double)s->win_accepted / s->win_drafted;
    int before = s->n_skip;
    if (rate < 0.5 && s->n_skip > 0) s->n_skip--;
    else if (rate > 0.85 && s->n_skip < s->n_order) s->n_skip++;
    s->win_drafted = s->win_accepted = 0;
    if (s->n_skip == before) return 0;
    mask_build(s);
    return 1;
}

/* Moves the moving average *RATE towards ACCEPTED of the tokens [FROM, TO)
 * of a draft whose first ACCEPTED were kept (a rejection ends the draft: the
 * tokens seen are the kept ones and the rejected one). */
static void rate_update(double *rate, int from, int to, int accepted) {
    int seen_end = accepted < to ? accepted + 1 : to;
    if (seen_end <= from) return;
    int kept = accepted < from ? 0 : (accepted < to ? accepted : to) - from;
    *rate = (1 - SPEC_EMA) * *rate + SPEC_EMA * kept / (seen_end - from);
}

int spec_record(spec_state *s, spec_source src, int drafted, int sure, int accepted, int n_generated) {
    if (src == SPEC_PLAIN || drafted < 1) return 0;
    if (sure > drafted) sure = drafted; /* the draft may stop before the agreed tokens do */
    s->verifications++;
    s->drafted += drafted;
    s->accepted += accepted;
    s->mem.last_used[src] = s->mem.clock + n_generated;
    if (src == SPEC_LOOKUP) { /* the agreed tokens and the rest apart */
        rate_update(&s->mem.rate[src], 0, sure, accepted);
        rate_update(&s->mem.rate_guess, sure, drafted, accepted);
    } else {
        rate_update(&s->mem.rate[src], 0, drafted, accepted);
    }
    if (src != SPEC_LAYERS) return 0;
    s->win_drafted += drafted;
    s->win_accepted += accepted;
    return adapt_mask(s);
}

int spec_ngram(const int32_t *hist, int n, int32_t *out, int max_out, int *gp) {
    for (int g = SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
        if (n <= g) continue;
        const int32_t *tail = hist + n - g;
        /* the latest start i < n - g whose g tokens equal the tail */
        for (int i = n - g - 1; i >= 0; i--) {
            if (memcmp(hist + i, tail, (size_t)g * sizeof *hist)) continue;
            int m = n - (i + g) < max_out ? n - (i + g) : max_out;
            memcpy(out, hist + i + g, (size_t)m * sizeof *out);
            if (gp) *gp = g;
            return m;
        }
    }
    return 0;
}

/* The index slot of OWNER's G tokens T (a hash of all three: tenants do not
 * take each other's slots). */
static int64_t *lookup_slot(const spec_lookup *c, uint64_t owner, const int32_t *t, int g) {
    uint64_t h = (owner + (uint64_t)g) * 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < g; i++) {
        h = (h ^ (uint32_t)t[i]) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 29;
    }
    h = (h ^ (h >> 32)) * 0x94D049BB133111EBull;
    h ^= h >> 31;
    return &c->slot[h & (uint64_t)(c->n_slot - 1)];
}

#define LOOKUP_G (SPEC_NGRAM_MAX - SPEC_NGRAM_MIN + 1) /* gram lengths indexed */

int spec_lookup_init(spec_lookup *c, int cap) {
    memset(c, 0, sizeof *c);
    int n_slot = 1;
    while (n_slot < 8 * cap) n_slot *= 2; /* three grams per token: few overwrite another gram's slot */
    c->tok = malloc((size_t)cap * sizeof *c->tok);
    c->owner = malloc((size_t)cap * sizeof *c->owner);
    c->prev = malloc((size_t)cap * LOOKUP_G * sizeof *c->prev);
    c->slot = calloc((size_t)n_slot, sizeof *c->slot);
    if (!c->tok || !c->owner || !c->prev || !c->slot || cap <= SPEC_NGRAM_MAX) {
        spec_lookup_free(c);
        return -1;
    }
    c->cap = cap;
    c->n_slot = n_slot;
    return 0;
}

void spec_lookup_free(spec_lookup *c) {
    free(c->tok);
    free(c->owner);
    free(c->prev);
    free(c->slot);
    memset(c, 0, sizeof *c);
}

/* Writes one token (-1: the end of an answer) at the next position. A
 * token of the answer (INDEX) becomes the latest continuation of the grams
 * before it in the same answer and its context; the slot's earlier
 * continuation is linked from it. */
static void lookup_push(spec_lookup *c, uint64_t owner, int32_t t, int index) {
    int64_t p = c->n++;
    c->tok[p % c->cap] = t;
    c->owner[p % c->cap] = owner;
    int64_t *prev = c->prev + (size_t)(p % c->cap) * LOOKUP_G;
    for (int i = 0; i < LOOKUP_G; i++) prev[i] = 0;
    if (t < 0 || !index) return;
    int32_t gram[SPEC_NGRAM_MAX];
    for (int g = 1; g <= SPEC_NGRAM_MAX && p - g >= 0; g++) {
        int32_t u = c->tok[(p - g) % c->cap];
        if (u < 0) break; /* a gram never spans two answers */
        gram[SPEC_NGRAM_MAX - g] = u;
        if (g < SPEC_NGRAM_MIN) continue;
        int64_t *slot = lookup_slot(c, owner, gram + SPEC_NGRAM_MAX - g, g);
        prev[g - SPEC_NGRAM_MIN] = *slot;
        *slot = p + 1;
    }
}

void spec_lookup_add(spec_lookup *c, uint64_t owner, const int32_t *ctx, int n_ctx, const int32_t *tok, int n) {
    if (!c->cap || n < 1) return;
    if (n_ctx > SPEC_NGRAM_MAX - 1) {
        ctx += n_ctx - (SPEC_NGRAM_MAX - 1);
        n_ctx = SPEC_NGRAM_MAX - 1;
    }
    for (int i = 0; i < n_ctx; i++) lookup_push(c, owner, ctx[i], 0);
    for (int i = 0; i < n; i++) lookup_push(c, owner, tok[i], 1);
    lookup_push(c, owner, -1, 0);
}

/* 1 when P (1 + the position after a gram, from a slot or a link) is
 * OWNER's continuation of the G tokens T and not yet overwritten. */
static int lookup_valid(const spec_lookup *c, int64_t p1, uint64_t owner, const int32_t *t, int g) {
    int64_t p = p1 - 1;
    if (p < 0 || p - g < c->n - c->cap || c->owner[p % c->cap] != owner) return 0;
    for (int i = 0; i < g; i++)
        if (c->tok[(p - g + i) % c->cap] != t[i]) return 0;
    return 1;
}

int spec_lookup_find(const spec_lookup *c, uint64_t owner, const int32_t *hist, int n, int32_t *out, int max_out,
                     int *gp, int *sure) {
    if (!c->cap) return 0;
    for (int g = SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
        if (n < g) continue;
        const int32_t *t = hist + n - g;
        int64_t p1 = *lookup_slot(c, owner, t, g);
        if (!lookup_valid(c, p1, owner, t, g)) continue; /* empty, overwritten, or another gram's */
        int64_t p = p1 - 1, q1 = c->prev[(size_t)(p % c->cap) * LOOKUP_G + (g - SPEC_NGRAM_MIN)];
        int64_t q = lookup_valid(c, q1, owner, t, g) ? q1 - 1 : -1; /* the occurrence before */
        int m = 0, agree = 0;
        for (; m < max_out && p + m < c->n && c->tok[(p + m) % c->cap] >= 0; m++) {
            out[m] = c->tok[(p + m) % c->cap];
            if (q >= 0 && agree == m && q + m < p && c->tok[(q + m) % c->cap] == out[m]) agree++;
        }
        if (q >= 0 && m > agree + 1) m = agree + 1; /* up to where the two latest differ, and one guess */
        if (m > 0) {
            *gp = g;
            *sure = q >= 0 ? agree : 0;
            return m;
        }
    }
    return 0;
}

int spec_sample_verify(sampler *s, const float *p, const float *q, int32_t d, int n, float *scratch, int32_t *out) {
    float qd = q ? q[d] : 1.0f;
    float u = sampler_uniform(s);
    if (qd > 0 && u * qd < p[d]) return 1; /* u < p/q, i.e. accepted with probability min(1, p/q) */
    double sum = 0;
    for (int i = 0; i < n; i++) {
        float r = p[i] - (q ? q[i] : (i == d ? 1.0f : 0.0f));
        scratch[i] = r > 0 ? r : 0;
        sum += scratch[i];
    }
    /* p == q leaves no residual (and then D was always kept): fall back to p */
    *out = sum > 0 ? sampler_draw(s, scratch, n) : sampler_draw(s, p, n);
    return 0;
}
