/* test_sampler.c - greedy, seeded sampling, top-k and top-p; the
 * candidates picked by partial selection (no sort of the whole vocabulary)
 * give the distribution a full sort gives. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/unit/check.h"
#include "engine/sampler.h"

typedef struct {
    int id;
    float logit;
} ref_cand;

static int ref_desc(const void *a, const void *b) {
    const ref_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* The distribution after temperature T, top-k K (0: off) and top-p P by a
 * full sort, into PROBS. */
static void ref_probs(const float *logits, int n, float t, int k, float p, float *probs) {
    ref_cand *c = malloc((size_t)n * sizeof *c);
    for (int i = 0; i < n; i++) c[i] = (ref_cand){i, logits[i]};
    qsort(c, (size_t)n, sizeof *c, ref_desc);
    if (k <= 0 || k > n) k = n;
    double sum = 0, kept = 0;
    for (int i = 0; i < k; i++) sum += exp((c[i].logit - c[0].logit) / t);
    int m = 0;
    while (m < k && (p >= 1 || kept < p)) kept += exp((c[m++].logit - c[0].logit) / t) / sum;
    if (p >= 1) kept = 1;
    memset(probs, 0, (size_t)n * sizeof *probs);
    for (int i = 0; i < m; i++) probs[c[i].id] = (float)(exp((c[i].logit - c[0].logit) / t) / sum / kept);
    free(c);
}

static void test_selection(void) {
    enum { N = 5000 };
    static float logits[N], got[N], want[N];
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < N; i++) { /* xorshift; many ties (rounded to 1/8) */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        logits[i] = (float)((int)(x % 160) - 80) / 8.0f;
    }
    const struct { float t; int k; float p; } cases[] = {{1, 0, 1}, {0.7f, 40, 1}, {1, 0, 0.9f}, {1.3f, 300, 0.5f}, {1, 0, 0.999f}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        sampler s;
        sampler_init(&s, N, cases[c].t, cases[c].p, cases[c].k, 1);
        sampler_probs(&s, logits, got);
        ref_probs(logits, N, cases[c].t, cases[c].k, cases[c].p, want);
        double err = 0;
        int support = 0, same_support = 1;
        for (int i = 0; i < N; i++) {
            err = fmax(err, fabs(got[i] - want[i]));
            support += want[i] > 0;
            same_support &= (got[i] > 0) == (want[i] > 0);
        }
        CHECK(err < 1e-6 && same_support, "partial selection: T %.1f, top_k %d, top_p %.3f: the full sort's distribution "
              "(%d tokens, max error %.1e)", cases[c].t, cases[c].k, cases[c].p, support, err);
        int in = 1;
        for (int i = 0; i < 300; i++) in &= want[sampler_sample(&s, logits)] > 0;
        CHECK(in, "partial selection: every sampled token is in that distribution's support");
        sampler_free(&s);
    }
}

int main(void) {
    test_selection();
    float logits[6] = {0.1f, 2.0f, 1.9f, -1.0f, 2.0f, 0.0f};
    sampler s;
    CHECK(sampler_init(&s, 6, 0, 1, 0, 1) == 0 && sampler_sample(&s, logits) == 1, "greedy picks the first maximum");
    sampler_free(&s);

    int a[64], b[64], same = 1, varied = 0;
    sampler s1, s2;
    sampler_init(&s1, 6, 1.0f, 1, 0, 1234);
    sampler_init(&s2, 6, 1.0f, 1, 0, 1234);
    for (int i = 0; i < 64; i++) {
        a[i] = sampler_sample(&s1, logits);
        b[i] = sampler_sample(&s2, logits);
        same &= a[i] == b[i];
        varied |= a[i] != a[0];
    }
    CHECK(same, "the same seed gives the same tokens");
    /* a draw made elsewhere (a backend's pick): peek gives the uniform the next draw uses, took uses it up */
    float u0 = sampler_peek(&s1), u1 = sampler_peek(&s1);
    sampler_took(&s1);
    float want = sampler_uniform(&s2);
    int after = 1;
    for (int i = 0; i < 16; i++) after &= sampler_sample(&s1, logits) == sampler_sample(&s2, logits);
    CHECK(u0 == u1 && u0 == want && after, "sampler_peek gives the next draw's uniform without using it, "
          "sampler_took uses it up (%g, %g, %g)", u0, u1, want);
    sampler_init(&s, 6, 0, 1, 0, 1);
    float g0 = sampler_peek(&s);
    sampler_took(&s);
    CHECK(g0 == sampler_peek(&s), "greedy: sampler_took uses nothing up");
    CHECK(varied, "temperature 1 samples more than one token");
    sampler_free(&s1);
    sampler_free(&s2);

    int only_top = 1;
    sampler_init(&s, 6, 1.0f, 1, 2, 7);
    for (int i = 0; i < 200; i++) {
        int t = sampler_sample(&s, logits);
        only_top &= t == 1 || t == 4;
    }
    CHECK(only_top, "top_k 2 keeps the two largest");
    sampler_free(&s);

    float peaked[4] = {10.0f, 0.0f, 0.0f, 0.0f};
    int only_first = 1;
    sampler_init(&s, 4, 1.0f, 0.5f, 0, 9);
    for (int i = 0; i < 200; i++) only_first &= sampler_sample(&s, peaked) == 0;
    CHECK(only_first, "top_p 0.5 keeps only the dominant token");
    sampler_free(&s);

    /* Frequencies follow the softmax at temperature 1. */
    float two[2] = {0.0f, (float)log(3.0)};
    int count1 = 0;
    sampler_init(&s, 2, 1.0f, 1, 0, 99);
    for (int i = 0; i < 4000; i++) count1 += sampler_sample(&s, two) == 1;
    CHECK(count1 > 2800 && count1 < 3200, "sampling frequencies follow the softmax (%d of 4000, expect ~3000)", count1);
    sampler_free(&s);
    CHECK_DONE();
}
