/* speculate.c - draft policy, prompt lookup and speculative sampling. */
#include "engine/speculate.h"

#include <string.h>

#define SPEC_WARMUP 2        /* plain steps before any draft: they time plain decoding */
#define SPEC_JUDGE_AFTER 3   /* verifications before a source's speed is judged */
#define SPEC_BACKOFF_FIRST 16
#define SPEC_BACKOFF_MAX 512
#define SPEC_WINDOW 24       /* layer-drafted tokens between changes of the mask */
#define SPEC_EMA 0.25

static void mask_build(spec_state *s) {
    if (!s->n_order) return;
    memset(s->mask, 1, (size_t)s->n_layers);
    for (int i = 0; i < s->n_skip; i++) s->mask[s->order[i]] = 0;
}

void spec_init(spec_state *s, int n_layers, const uint8_t *mask, const int *order, int n_order, int n_skip) {
    memset(s, 0, sizeof *s);
    s->n_layers = n_layers;
    memcpy(s->mask, mask, (size_t)n_layers);
    if (order && n_order > 0) {
        memcpy(s->order, order, (size_t)n_order * sizeof *order);
        s->n_order = n_order;
        s->n_skip = n_skip;
    }
    for (int i = 0; i < SPEC_N_SOURCES; i++) {
        s->k[i] = i == SPEC_LAYERS ? 4 : SPEC_K_MAX;
        s->backoff_len[i] = SPEC_BACKOFF_FIRST;
    }
}

static int mask_skips(const spec_state *s) {
    for (int l = 0; l < s->n_layers; l++)
        if (!s->mask[l]) return 1;
    return 0;
}

spec_source spec_plan(spec_state *s, int n_generated, int ngram_len, int room, int *k) {
    *k = 0;
    if (room < 1 || s->cycles[SPEC_PLAIN] < SPEC_WARMUP) return SPEC_PLAIN;
    spec_source src = SPEC_PLAIN;
    if (ngram_len > 0 && n_generated >= s->backoff_until[SPEC_NGRAM]) {
        src = SPEC_NGRAM;
        *k = ngram_len < s->k[SPEC_NGRAM] ? ngram_len : s->k[SPEC_NGRAM];
    } else if (mask_skips(s) && n_generated >= s->backoff_until[SPEC_LAYERS]) {
        src = SPEC_LAYERS;
        *k = s->k[SPEC_LAYERS];
    }
    if (*k > room) *k = room;
    return *k > 0 ? src : SPEC_PLAIN;
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
    s->cycles[SPEC_LAYERS] = 0; /* a new draft model: judge its speed afresh */
    return 1;
}

int spec_record(spec_state *s, spec_source src, int drafted, int accepted, int emitted, double ms, int n_generated) {
    double per = emitted > 0 ? ms / emitted : ms;
    s->ms_tok[src] = s->cycles[src] ? (1 - SPEC_EMA) * s->ms_tok[src] + SPEC_EMA * per : per;
    s->cycles[src]++;
    if (src == SPEC_PLAIN) return 0;
    s->verifications++;
    s->drafted += drafted;
    s->accepted += accepted;
    /* draft length: one longer after a fully kept draft, one shorter after a miss at its start */
    if (accepted == drafted && s->k[src] < SPEC_K_MAX) s->k[src]++;
    else if (accepted == 0 && s->k[src] > 1) s->k[src]--;
    int changed = 0;
    if (src == SPEC_LAYERS) {
        s->win_drafted += drafted;
        s->win_accepted += accepted;
        changed = adapt_mask(s);
    }
    /* slower per token than plain decoding: back off, twice as long each time */
    if (!changed && s->cycles[src] >= SPEC_JUDGE_AFTER && s->ms_tok[src] > s->ms_tok[SPEC_PLAIN]) {
        s->backoff_until[src] = n_generated + s->backoff_len[src];
        if (s->backoff_len[src] < SPEC_BACKOFF_MAX) s->backoff_len[src] *= 2;
        s->cycles[src] = 0;
        s->k[src] = src == SPEC_LAYERS ? 4 : SPEC_K_MAX;
    }
    return changed;
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
