/* sampler.c - greedy, temperature, top-k and top-p sampling. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>

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

int sampler_sample(sampler *s, const float *logits) {
    if (s->temperature <= 0 || !s->cand) return sampler_argmax(logits, s->n_vocab);
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) s->cand[i] = (struct sampler_cand){i, logits[i]};
    qsort(s->cand, (size_t)n, sizeof *s->cand, by_prob_desc);
    n = s->top_k;
    float mx = s->cand[0].p;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        s->cand[i].p = expf((s->cand[i].p - mx) / s->temperature);
        sum += s->cand[i].p;
    }
    /* Nucleus: keep the smallest prefix whose mass reaches top_p. */
    double kept = 0;
    int m = 0;
    while (m < n) {
        kept += s->cand[m].p / sum;
        m++;
        if (kept >= s->top_p) break;
    }
    double r = next_uniform(s) * kept * sum, acc = 0;
    for (int i = 0; i < m; i++) {
        acc += s->cand[i].p;
        if (r < acc) return s->cand[i].id;
    }
    return s->cand[m - 1].id;
}
