/* sampler.c - greedy, temperature, top-k and top-p sampling. */
#include "engine/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct sampler_cand {
    int id;
    float logit, p; /* p: the weight exp((logit - max) / T) */
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

float sampler_margin(const float *v, int n) {
    float a = v[0], b = -INFINITY;
    for (int i = 1; i < n; i++) {
        if (v[i] > a) b = a, a = v[i];
        else if (v[i] > b) b = v[i];
    }
    return a - b;
}

/* splitmix64: a uniform float in [0, 1). */
static float next_uniform(sampler *s) {
    uint64_t z = (s->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)(z >> 40) / (float)(1ull << 24);
}

/* The candidates' order: the higher logit first, the lower id on ties. */
static int by_logit_desc(const void *a, const void *b) {
    const struct sampler_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

static void cand_swap(struct sampler_cand *c, int i, int j) {
    struct sampler_cand t = c[i];
    c[i] = c[j];
    c[j] = t;
}

/* Moves the K first of C[0, N) in by_logit_desc's order to C[0, K), in any
 * order (quickselect: linear time on average, where sorting all N was not). */
static void cand_select(struct sampler_cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi && k > lo && k <= hi) {
        int mid = lo + (hi - lo) / 2; /* median of three as the pivot, put at hi */
        if (by_logit_desc(&c[mid], &c[lo]) < 0) cand_swap(c, mid, lo);
        if (by_logit_desc(&c[hi], &c[lo]) < 0) cand_swap(c, hi, lo);
        if (by_logit_desc(&c[mid], &c[hi]) < 0) cand_swap(c, mid, hi);
        int store = lo;
        for (int i = lo; i < hi; i++)
            if (by_logit_desc(&c[i], &c[hi]) < 0) cand_swap(c, i, store++);
        cand_swap(c, store, hi); /* c[store] is in its sorted place */
        if (store == k || store == k - 1) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

/* Candidates in order, sorted only as far as a walk needs: the first
 * SORTED of s->cand[0, k) are in walking order (the best first, or as they
 * lie when the whole top k is drawn from), the rest unordered. */
typedef struct {
    sampler *s;
    int k, sorted;
} cand_walk;

/* The I-th best candidate (i < k): sorts the next block (64, doubling) when needed. */
static const struct sampler_cand *cand_at(cand_walk *w, int i) {
    if (i >= w->sorted) {
        int want = w->sorted < 64 ? 64 : 2 * w->sorted;
        if (want > w->k) want = w->k;
        struct sampler_cand *rest = w->s->cand + w->sorted;
        cand_select(rest, w->k - w->sorted, want - w->sorted);
        qsort(rest, (size_t)(want - w->sorted), sizeof *rest, by_logit_desc);
        w->sorted = want;
    }
    return &w->s->cand[i];
}

/* Fills s->cand[0, k) with the top-k tokens (unordered) and their weights
 * exp((logit - max) / T), and returns how many the nucleus keeps (the
 * smallest best-first prefix whose mass reaches top_p; all k when top_p is
 * 1); *SUM gets the total weight of the top k, *KEPT the share of it the
 * nucleus holds. W walks the candidates best first. */
static int nucleus(sampler *s, const float *logits, cand_walk *w, double *sum, double *kept) {
    int n = s->n_vocab, k = s->top_k;
    for (int i = 0; i < n; i++) s->cand[i] = (struct sampler_cand){i, logits[i], 0};
    if (k < n) cand_select(s->cand, n, k);
    float mx = s->cand[0].logit;
    for (int i = 1; i < k; i++) mx = s->cand[i].logit > mx ? s->cand[i].logit : mx;
    *sum = 0;
    for (int i = 0; i < k; i++) {
        s->cand[i].p = expf((s->cand[i].logit - mx) / s->temperature);
        *sum += s->cand[i].p;
    }
    *w = (cand_walk){s, k, 0};
    *kept = 1;
    if (s->top_p >= 1) {
        /* the whole top k: walked best first, as a backend's pick walks it
         * (sorted as far as the walk goes); the whole vocabulary in id
         * order (sorting it would cost most of the step) */
        w->sorted = k < n ? 0 : k;
        return k;
    }
    *kept = 0;
    int m = 0;
    while (m < k) {
        *kept += cand_at(w, m)->p / *sum;
        m++;
        if (*kept >= s->top_p) break;
    }
    return m;
}

int sampler_sample(sampler *s, const float *logits) {
    if (s->temperature <= 0 || !s->cand) return sampler_argmax(logits, s->n_vocab);
    double sum, kept;
    cand_walk w;
    int m = nucleus(s, logits, &w, &sum, &kept);
    double r = next_uniform(s) * kept * sum, acc = 0;
    for (int i = 0; i < m; i++) {
        const struct sampler_cand *c = cand_at(&w, i);
        acc += c->p;
        if (r < acc) return c->id;
    }
    return cand_at(&w, m - 1)->id;
}

void sampler_probs(sampler *s, const float *logits, float *probs) {
    int n = s->n_vocab;
    memset(probs, 0, (size_t)n * sizeof *probs);
    if (s->temperature <= 0 || !s->cand) {
        probs[sampler_argmax(logits, n)] = 1;
        return;
    }
    double sum, kept;
    cand_walk w;
    int m = nucleus(s, logits, &w, &sum, &kept);
    for (int i = 0; i < m; i++) probs[cand_at(&w, i)->id] = (float)(cand_at(&w, i)->p / (kept * sum));
}

float sampler_uniform(sampler *s) { return next_uniform(s); }

float sampler_peek(const sampler *s) {
    sampler t = *s;
    return next_uniform(&t);
}

void sampler_took(sampler *s) {
    if (s->temperature > 0 && s->cand) next_uniform(s);
}

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
