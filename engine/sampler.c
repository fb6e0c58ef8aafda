/* sampler.c - greedy, temperature, top-k and top-p sampling. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sampler_cand {
    int id;
    float p;
};

int sampler_init(sampler *s, int n_vocab, float temperature, float top_p, int top_k, uint64_t seed) {
    s->temperature = temperature;
    s->top_p = top_p > 0 && top_p < 1 ? top_p : 1;
    s->top_k = top_k > 0 && top_k < n_vocab ? top_k : n_vocab;
    s->n_vocab = n_vocab;
    s->state = seed ^ 0x9E3779B97F4A7C15ull;
    s->cand = NULL;
    if (temperature <= 0) return 0;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    return s->cand ? 0 : -1;
}

void sampler_free(sampler *s) {
    free(s->cand);
    s->cand = NULL;
}

int sampler_argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* splitmix64: a uniform float in [0, 1). */
static float next_uniform(sampler *s) {
    uint64_t z = (s->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) / (float)(1ull << 24);
}

static int by_prob_desc(const void *a, const void *b) {
    const struct sampler_cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id; /* deterministic order on ties */
}

/* Fills s->cand with the top-k tokens by logit, their weights
 * exp((logit - max) / T), and returns how many the nucleus keeps; *SUM gets
 * the total weight of the top k, *KEPT the share of it the nucleus holds. */
static int nucleus(sampler *s, const float *logits, double *sum, double *kept) {
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) s->cand[i] = (struct sampler_cand){i, logits[i]};
    qsort(s->cand, (size_t)n, sizeof *s->cand, by_prob_desc);
    n = s->top_k;
    float mx = s->cand[0].p;
    *sum = 0;
    for (int i = 0; i < n; i++) {
        s->cand[i].p = expf((s->cand[i].p - mx) / s->temperature);
        *sum += s->cand[i].p;
    }
    /* Nucleus: keep the smallest prefix whose mass reaches top_p. */
    *kept = 0;
    int m = 0;
    while (m < n) {
        *kept += s->cand[m].p / *sum;
        m++;
        if (*kept >= s->top_p) break;
    }
    return m;
}

int sampler_sample(sampler *s, const float *logits) {
    if (s->temperature <= 0 || !s->cand) return sampler_argmax(logits, s->n_vocab);
    double sum, kept;
    int m = nucleus(s, logits, &sum, &kept);
    double r = next_uniform(s) * kept * sum, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += s->cand[i].p;
        if (r < acc) return s->cand[i].id;
    }
    return s->cand[m - 1].id;
}

void sampler_probs(sampler *s, const float *logits, float *probs) {
    int n = s->n_vocab;
    memset(probs, 0, (size_t)n * sizeof *probs);
    if (s->temperature <= 0 || !s->cand) {
        probs[sampler_argmax(logits, n)] = 1;
        return;
    }
    double sum, kept;
    int m = nucleus(s, logits, &sum, &kept);
    for (int i = 0; i < m; i++) probs[s->cand[i].id] = (float)(s->cand[i].p / (kept * sum));
}

float sampler_uniform(sampler *s) { return next_uniform(s); }

int sampler_draw(sampler *s, const float *w, int n) {
    double total = 0;
    int last = 0;
    for (int i = 0; i < n; i++)
        if (w[i] > 0) {
            total += w[i];
            last = i;
        }
    double r = next_uniform(s) * total, acc = 0;
    for (int i = 0; i < n; i++) {
        if (w[i] <= 0) continue;
        acc += w[i];
        if (r < acc) return i;
    }
    return last;
}
