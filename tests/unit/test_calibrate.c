/* test_calibrate.c - the calibration mathematics of probe/calibrate.h on
 * small hand-made data whose answers are known. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "tests/unit/check.h"
#include "probe/calibrate.h"

enum { F = PROBE_N_FEATURES };

static void scores(void) {
    calib_score a = {.agree_tokens = 99, .total_tokens = 100, .n = 10, .exact = 9};
    CHECK(calib_score_meets(&a, 0.99, 0.9) && !calib_score_meets(&a, 0.995, 0.9) && !calib_score_meets(&a, 0.99, 0.95),
          "a score meets a target exactly at its agreement and share, not above");
    calib_score b = {.agree_tokens = 1, .total_tokens = 2, .skipped = 3, .decided = 1, .n = 1, .exact = 0};
    calib_score_add(&a, &b);
    CHECK(a.agree_tokens == 100 && a.total_tokens == 102 && a.skipped == 3 && a.decided == 1 && a.n == 11 && a.exact == 9,
          "scores add field by field");
}

static void shuffles(void) {
    int a[50], b[50], c[50], seen[50] = {0}, perm = 1;
    calib_shuffle(a, 50, 1);
    calib_shuffle(b, 50, 1);
    calib_shuffle(c, 50, 2);
    for (int i = 0; i < 50; i++) {
        if (a[i] < 0 || a[i] >= 50 || seen[a[i]]++) perm = 0;
    }
    CHECK(perm, "shuffle gives a permutation of 0..n-1");
    CHECK(!memcmp(a, b, sizeof a) && memcmp(a, c, sizeof a), "shuffle is the same for a seed and differs across seeds");
    int one = 7;
    calib_shuffle(&one, 1, 3);
    CHECK(one == 0, "shuffle of one index is the identity");
}

static void classes(void) {
    const char *names[] = {"yesno", "story", "yesno", "json", "story"};
    int cls[5];
    int n = calib_classes_number(names, 5, cls);
    CHECK(n == 3 && cls[0] == 0 && cls[1] == 1 && cls[2] == 0 && cls[3] == 2 && cls[4] == 1,
          "classes are numbered in order of first appearance (%d: %d %d %d %d %d)", n, cls[0], cls[1], cls[2], cls[3],
          cls[4]);
    CHECK(calib_class_first(cls, 5, 2) == 3 && calib_class_first(cls, 5, 1) == 1 && calib_class_first(cls, 5, 3) == -1,
          "the first sample of a class, -1 for none");
}

static void standardise(void) {
    float x[4 * F], mean[F], std[F], z[4 * F];
    const float col0[4] = {1, 3, 5, 7}; /* mean 4, std sqrt(5) */
    for (int i = 0; i < 4; i++)
        for (int f = 0; f < F; f++) x[i * F + f] = f == 0 ? col0[i] : 2.5f; /* the others constant */
    calib_features_standardise(x, 4, mean, std, z);
    CHECK(fabsf(mean[0] - 4) < 1e-6f && fabsf(std[0] - sqrtf(5)) < 1e-6f && fabsf(z[0] + 3 / sqrtf(5)) < 1e-6f &&
              fabsf(z[3 * F] - 3 / sqrtf(5)) < 1e-6f,
          "standardise: mean 4, std sqrt(5), z = (x - mean) / std (%g %g %g)", mean[0], std[0], z[0]);
    CHECK(mean[1] == 2.5f && std[1] == 1e-6f && z[1] == 0 && z[3 * F + 1] == 0,
          "a constant feature gets std 1e-6 and z 0 (%g)", std[1]);
}

/* The weight w of the regularised fit on {x=+1: y=1, x=-1: y=0}:
 * gradient sigmoid(w) - 1 + 0.01 w = 0, solved by bisection. */
static double logistic_symmetric_solution(void) {
    double lo = 0, hi = 20;
    for (int i = 0; i < 200; i++) {
        double m = (lo + hi) / 2;
        if (1 / (1 + exp(-m)) - 1 + 1e-2 * m < 0) lo = m;
        else hi = m;
    }
    return (lo + hi) / 2;
}

static void logistic(void) {
    float z[8 * F] = {0}, y[8], w[F], b;
    for (int i = 0; i < 8; i++) {
        z[i * F] = i % 2 ? 1.0f : -1.0f;
        y[i] = i % 2 ? 1.0f : 0.0f;
    }
    calib_logistic_fit(z, y, 8, w, &b);
    double ws = logistic_symmetric_solution();
    int others_zero = 1;
    for (int f = 1; f < F; f++) others_zero &= w[f] == 0;
    CHECK(fabs(w[0] - ws) < 1e-3 && fabs(b) < 1e-6 && others_zero,
          "logistic fit on a symmetric separable set matches the known optimum w = %.4f, b = 0 (got %.4f, %.2g)", ws, w[0],
          b);

    /* An asymmetric separable set in feature 3: the fit separates it. */
    const float xs[6] = {-2, -1.5f, -0.5f, 0.5f, 1, 2.5f};
    const float ys[6] = {0, 0, 0, 1, 1, 1};
    float z2[6 * F] = {0};
    for (int i = 0; i < 6; i++) z2[i * F + 3] = xs[i];
    calib_logistic_fit(z2, ys, 6, w, &b);
    int separated = 1;
    for (int i = 0; i < 6; i++) {
        double p = 1 / (1 + exp(-(w[3] * xs[i] + b)));
        separated &= (p > 0.5) == (ys[i] > 0.5);
    }
    CHECK(separated && w[3] > 1, "logistic fit separates a separable set (w = %.3f, b = %.3f)", w[3], b);
}

static void range(void) {
    /* Features 0 and 1 correlated, the others 0: covariance
     * [[1, .5], [.5, .5]] plus the ridge 0.01 on the diagonal. */
    const float pts[4][2] = {{1, 1}, {-1, -1}, {1, 0}, {-1, 0}};
    float z[4 * F] = {0};
    for (int i = 0; i < 4; i++) {
        z[i * F] = pts[i][0];
        z[i * F + 1] = pts[i][1];
    }
    probe p;
    memset(&p, 0, sizeof p);
    CHECK(calib_range_fit(z, 4, &p) == 0, "range fit succeeds");
    double a = 1.01, bb = 0.5, c = 0.51, det = a * c - bb * bb;
    CHECK(fabs(p.precision[0][0] - c / det) < 1e-4 && fabs(p.precision[0][1] + bb / det) < 1e-4 &&
              fabs(p.precision[1][0] + bb / det) < 1e-4 && fabs(p.precision[1][1] - a / det) < 1e-4 &&
              fabs(p.precision[2][2] - 100) < 1e-3 && p.precision[0][2] == 0,
          "range fit: the precision is the inverse of the ridged covariance (%.5f %.5f %.5f, expected %.5f %.5f %.5f)",
          p.precision[0][0], p.precision[0][1], p.precision[1][1], c / det, -bb / det, a / det);
    double dmax = 0;
    for (int i = 0; i < 4; i++) {
        double d = probe_distance(&p, z + i * F);
        if (d > dmax) dmax = d;
    }
    CHECK(fabs(p.d_max - dmax) < 1e-5, "range fit: with 4 rows d_max is the largest distance (%.5f, %.5f)", p.d_max, dmax);

    /* 200 rows, 2 of them far out: 99% of them hold d_max, the outliers lie beyond. */
    static float big[200 * F];
    memset(big, 0, sizeof big);
    for (int i = 0; i < 198; i++) big[i * F + 2] = (float)((i % 11) - 5) / 5;
    big[198 * F + 2] = 40;
    big[199 * F + 2] = -40;
    CHECK(calib_range_fit(big, 200, &p) == 0, "range fit on 200 rows succeeds");
    double in_max = 0;
    for (int i = 0; i < 198; i++) {
        double d = probe_distance(&p, big + i * F);
        if (d > in_max) in_max = d;
    }
    CHECK(fabs(p.d_max - in_max) < 1e-5 && probe_distance(&p, big + 198 * F) > p.d_max,
          "range fit: d_max holds 99%% of the rows and leaves the 1%% outliers out (%.4f, inliers up to %.4f)", p.d_max,
          in_max);

    float same[3 * F] = {0};
    CHECK(calib_range_fit(same, 3, &p) == 0 && p.d_max == 0.1f, "range fit: d_max is at least 0.1 (%g)", p.d_max);
}

static void labels(void) {
    const int orders[2 * 3] = {6, 4, 5, /* class 0 drops 6 and 4 */ 5, 6, 4 /* class 1 drops none */};
    const int depth[2] = {2, 0}, cls[4] = {0, 1, 0, 1};
    float y4[4], y5[4];
    calib_labels_make(orders, depth, cls, 4, 3, 4, y4);
    calib_labels_make(orders, depth, cls, 4, 3, 5, y5);
    CHECK(y4[0] == 1 && y4[1] == 0 && y4[2] == 1 && y4[3] == 0 && y5[0] == 0 && y5[2] == 0,
          "labels: a layer is 1 for the samples whose class drops it");
}

/* A hand-made model of answers: SURVIVES says whether sample i keeps its
 * answer with the layers of REMOVED (bit l: layer l) gone. */
typedef struct {
    int (*survives)(int i, uint64_t removed);
    int calls, max_sample; /* measurements made; the highest sample measured */
} table;

static int table_measure(void *ud, int i, const int *removed, int n_removed, int *agree, int *n_tokens) {
    table *t = ud;
    uint64_t set = 0;
    for (int r = 0; r < n_removed; r++) set |= 1ull << removed[r];
    t->calls++;
    if (i > t->max_sample) t->max_sample = i;
    *n_tokens = 10;
    *agree = t->survives(i, set) ? 10 : 0;
    return 0;
}

#define L(l) (1ull << (l))

/* Layer 6 costs nothing, layer 4 costs sample 3, layer 5 costs everyone. */
static int survives_obvious(int i, uint64_t set) {
    if (set & L(5)) return 0;
    return !(i == 3 && (set & L(4)));
}

/* Layer 4 is harmless alone but kills every answer with anything else;
 * 5 and 6 each cost sample 3 and nothing more together. */
static int survives_interaction(int i, uint64_t set) {
    if ((set & L(4)) && (set & ~L(4))) return 0;
    return !(i == 3 && (set & (L(5) | L(6))));
}

static int fail_measure(void *ud, int i, const int *removed, int n_removed, int *agree, int *n_tokens) {
    (void)ud, (void)i, (void)removed, (void)n_removed, (void)agree, (void)n_tokens;
    return -1;
}

static void ranking(void) {
    const int samples[4] = {0, 1, 2, 3};
    calib_rank_params pr = {.prompt_target = 0.99, .target = 0.99, .share = 0, .beam = 1};
    int order[3] = {4, 5, 6};
    double alive[3];
    table t = {survives_obvious, 0, 0};
    CHECK(calib_candidates_rank(table_measure, &t, samples, 4, &pr, order, 3, alive) == 0 && order[0] == 6 &&
              order[1] == 4 && order[2] == 5 && alive[0] == 1 && alive[1] == 0.75 && alive[2] == 0,
          "ranking: the obvious order 6, 4, 5 with 100%%, 75%%, 0%% kept (got %d %d %d, %.2f %.2f %.2f)", order[0],
          order[1], order[2], alive[0], alive[1], alive[2]);

    int greedy[3] = {4, 5, 6}, beam[3] = {4, 5, 6};
    double ga[3], ba[3];
    t = (table){survives_interaction, 0, 0};
    CHECK(calib_candidates_rank(table_measure, &t, samples, 4, &pr, greedy, 3, ga) == 0 && greedy[0] == 4 && ga[0] == 1 &&
              ga[1] == 0,
          "ranking with beam 1 is greedy: layer 4 first, then nothing survives (got %d %d %d)", greedy[0], greedy[1],
          greedy[2]);
    pr.beam = 2;
    CHECK(calib_candidates_rank(table_measure, &t, samples, 4, &pr, beam, 3, ba) == 0 && beam[0] == 5 && beam[1] == 6 &&
              beam[2] == 4 && ba[0] == 0.75 && ba[1] == 0.75 && ba[2] == 0,
          "ranking with beam 2 finds the set that goes further together: 5, 6, then 4 (got %d %d %d)", beam[0], beam[1],
          beam[2]);
    CHECK(calib_candidates_rank(fail_measure, NULL, samples, 4, &pr, beam, 3, ba) == -1,
          "ranking stops with -1 when a measurement fails");
}

/* Class 0 (samples 0, 1) can lose 4 and 6 but not 5; class 1 (2, 3)
 * nothing. */
static int survives_by_class(int i, uint64_t set) { return i < 2 ? !(set & L(5)) : !set; }

static void class_ranking(void) {
    const int cls[5] = {0, 0, 1, 1, 1}, cand[3] = {4, 5, 6};
    calib_rank_params pr = {.prompt_target = 0.99, .target = 0.99, .share = 1, .beam = 2};
    int orders[2 * 3], depth[2];
    double alive[2 * 3];
    table t = {survives_by_class, 0, 0};
    /* Sample 4 is held out (n_cal 4): it must not be measured. */
    int rc = calib_classes_rank(table_measure, &t, cls, 2, 4, &pr, cand, 3, orders, alive, depth);
    CHECK(rc == 0 && orders[0] == 4 && orders[1] == 6 && orders[2] == 5 && depth[0] == 2,
          "class ranking: class 0 drops 4 and 6, not 5 (got %d %d %d, depth %d)", orders[0], orders[1], orders[2],
          depth[0]);
    CHECK(rc == 0 && depth[1] == 0 && alive[3] == 0, "class ranking: a class that loses its answers at once drops nothing");
    CHECK(t.max_sample == 3, "class ranking measures the calibration split only (up to sample %d)", t.max_sample);
}

/* Per sample: agreeing tokens out of 10, and whether the answer is whole. */
static const int sample_agree[5] = {10, 9, 10, 10, 10};

static int table_score(void *ud, const int *idx, int n, calib_score *sc) {
    (void)ud;
    memset(sc, 0, sizeof *sc);
    for (int i = 0; i < n; i++) {
        sc->agree_tokens += sample_agree[idx[i]];
        sc->total_tokens += 10;
        sc->exact += sample_agree[idx[i]] == 10;
        sc->n++;
    }
    return 0;
}

static void class_checks(void) {
    const int cls[5] = {0, 1, 0, 2, 1};
    calib_score all;
    int missing = calib_classes_check(table_score, NULL, cls, 3, 5, 0.99, 0, &all);
    CHECK(missing == 1 && all.n == 5 && all.agree_tokens == 49 && all.total_tokens == 50 && all.exact == 4,
          "class check: class 1 (19 of 20 tokens) misses 99%%, the totals cover every class (missing %d)", missing);
    CHECK(calib_classes_check(table_score, NULL, cls, 3, 5, 0.95, 0, &all) == 3,
          "class check: n_cls when every class keeps the target");
    CHECK(calib_classes_check(table_score, NULL, cls, 3, 5, 0.95, 1, &all) == 1,
          "class check: a class with an answer changed misses an exact share of 1");
}

typedef struct {
    float pass_at_most; /* thresholds up to this pass */
    int tries, fail;
    float tried[32];
} ladder;

static int ladder_try(void *ud, float t) {
    ladder *l = ud;
    if (l->fail) return -1;
    l->tried[l->tries++] = t;
    return t <= l->pass_at_most;
}

static void thresholds(void) {
    ladder l = {.pass_at_most = 0.3f};
    float t = -1;
    int descending = 1;
    CHECK(calib_threshold_search(ladder_try, &l, &t) == 0 && t == 0.3f,
          "threshold search picks the largest threshold that passes (0.3, got %g)", t);
    for (int i = 1; i < l.tries; i++) descending &= l.tried[i] < l.tried[i - 1];
    CHECK(descending && l.tried[0] == 0.9f && l.tried[l.tries - 1] == 0.3f,
          "threshold search tries from 0.9 down and stops at the first pass (%d tries)", l.tries);
    l = (ladder){.pass_at_most = -1};
    CHECK(calib_threshold_search(ladder_try, &l, &t) == 0 && t == 0 && l.tries == 18 && l.tried[17] == 0.02f,
          "threshold search gives 0 when no threshold passes (got %g after %d tries)", t, l.tries);
    l = (ladder){.fail = 1};
    CHECK(calib_threshold_search(ladder_try, &l, &t) == -1, "threshold search fails when a try fails");
}

int main(void) {
    scores();
    shuffles();
    classes();
    standardise();
    logistic();
    range();
    labels();
    ranking();
    class_ranking();
    class_checks();
    thresholds();
    CHECK_DONE();
}
