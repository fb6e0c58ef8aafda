/* speculate.c - draft policy, prompt lookup and speculative sampling. */
#include "engine/speculate.h"

#include <math.h>
#include <string.h>

#define SPEC_WINDOW 24       /* layer-drafted tokens between changes of the mask */
#define SPEC_EMA 0.3

static void mask_build(spec_state *s) {
    if (!s->n_order) return;
    memset(s->mask, 1, (size_t)s->n_layers);
    for (int i = 0; i < s->n_skip; i++) s->mask[s->order[i]] = 0;
}

void spec_init(spec_state *s, int n_layers, const uint8_t *mask, const int *order, int n_order, int n_skip,
               const spec_costs *cost) {
    memset(s, 0, sizeof *s);
    s->n_layers = n_layers;
    memcpy(s->mask, mask, (size_t)n_layers);
    if (order && n_order > 0) {
        memcpy(s->order, order, (size_t)n_order * sizeof *order);
        s->n_order = n_order;
        s->n_skip = n_skip;
    }
    s->cost = *cost;
    s->rate[SPEC_NGRAM] = 0.4; /* priors: an n-gram that matched, a draft the probe chose */
    s->rate[SPEC_LAYERS] = 0.8;
    for (int i = 0; i < SPEC_N_SOURCES; i++) s->explore_gap[i] = SPEC_EXPLORE;
}

/* A layer draft step's cost: the head and the layers the mask computes. */
static double draft_step_cost(const spec_state *s) {
    double c = s->cost.head;
    for (int l = 0; l < s->n_layers; l++) c += s->mask[l] ? s->cost.layer[l] : 0;
    return c;
}

double spec_yield(double a, int k, double c, const double *vcost) {
    double tokens = a >= 1 ? k + 1 : (1 - pow(a, k + 1)) / (1 - a);
    return tokens / (vcost[k + 1] + k * c);
}

/* The best draft length up to KMAX for SRC and its yield (0 when none). */
static double best_k(const spec_state *s, spec_source src, int kmax, double c, int *k) {
    double best = 0;
    *k = 0;
    for (int j = 1; j <= kmax; j++) {
        double y = spec_yield(s->rate[src], j, c, s->cost.vcost);
        if (y > best) {
            best = y;
            *k = j;
        }
    }
    return best;
}

spec_source spec_plan(spec_state *s, int n_generated, int ngram_len, int room, int *k) {
    int kn = 0, kl = 0;
    *k = 0;
    if (room < 1) return SPEC_PLAIN;
    int kmax = room < SPEC_K_MAX ? room : SPEC_K_MAX;
    double yn = ngram_len > 0 ? best_k(s, SPEC_NGRAM, ngram_len < kmax ? ngram_len : kmax, 0, &kn) : 0;
    double c = draft_step_cost(s);
    int layers = 0; /* a mask that skips nothing drafts nothing */
    for (int l = 0; l < s->n_layers; l++) layers |= !s->mask[l];
    double yl = layers ? best_k(s, SPEC_LAYERS, kmax, c, &kl) : 0;
    /* a source left unused for a while is tried once more, briefly */
    int explore_n = ngram_len > 0 && n_generated - s->last_used[SPEC_NGRAM] >= s->explore_gap[SPEC_NGRAM];
    int explore_l = layers && n_generated - s->last_used[SPEC_LAYERS] >= s->explore_gap[SPEC_LAYERS];
    if (yn >= SPEC_MARGIN && yn >= yl) {
        *k = kn;
        s->explore_gap[SPEC_NGRAM] = SPEC_EXPLORE;
        return SPEC_NGRAM;
    }
    if (yl >= SPEC_MARGIN) {
        *k = kl;
        s->explore_gap[SPEC_LAYERS] = SPEC_EXPLORE;
        return SPEC_LAYERS;
    }
    if (explore_n || explore_l) {
        spec_source src = explore_n ? SPEC_NGRAM : SPEC_LAYERS;
        s->last_used[src] = n_generated;
        if (s->explore_gap[src] < 16 * SPEC_EXPLORE) s->explore_gap[src] *= 2;
        *k = 2 < kmax ? 2 : kmax;
        if (src == SPEC_NGRAM && *k > ngram_len) *k = ngram_len;
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

int spec_record(spec_state *s, spec_source src, int drafted, int accepted, int n_generated) {
    if (src == SPEC_PLAIN || drafted < 1) return 0;
    s->verifications++;
    s->drafted += drafted;
    s->accepted += accepted;
    s->last_used[src] = n_generated;
    /* per-token rate: a rejection ends the draft, so the tokens seen are
     * the accepted ones plus the rejected one */
    int seen = accepted < drafted ? accepted + 1 : drafted;
    double r = (double)accepted / seen;
    s->rate[src] = (1 - SPEC_EMA) * s->rate[src] + SPEC_EMA * r;
    if (src != SPEC_LAYERS) return 0;
    s->win_drafted += drafted;
    s->win_accepted += accepted;
    return adapt_mask(s);
}

int spec_ngram(const int32_t *hist, int n, int32_t *out, int max_out) {
    for (int g = SPEC_NGRAM_MAX; g >= SPEC_NGRAM_MIN; g--) {
        if (n <= g) continue;
        const int32_t *tail = hist + n - g;
        /* the latest start i < n - g whose g tokens equal the tail */
        for (int i = n - g - 1; i >= 0; i--) {
            if (memcmp(hist + i, tail, (size_t)g * sizeof *hist)) continue;
            int m = n - (i + g) < max_out ? n - (i + g) : max_out;
            memcpy(out, hist + i + g, (size_t)m * sizeof *out);
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
