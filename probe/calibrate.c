/* calibrate.c - the mathematics of probe calibration (see calibrate.h). */
#include "probe/calibrate.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(PROBE_MAX_CANDIDATES <= 64, "a removal set is a 64-bit set of candidates");

void calib_score_add(calib_score *sum, const calib_score *x) {
    sum->agree_tokens += x->agree_tokens;
    sum->total_tokens += x->total_tokens;
    sum->skipped += x->skipped;
    sum->decided += x->decided;
    sum->n += x->n;
    sum->exact += x->exact;
}

int calib_score_meets(const calib_score *sc, double target, double share) {
    return sc->agree_tokens >= target * sc->total_tokens - 1e-9 && sc->exact >= share * sc->n - 1e-9;
}

void calib_shuffle(int *idx, int n, unsigned long long seed) {
    unsigned long long s = seed * 2862933555777941757ull + 3037000493ull;
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = n - 1; i > 0; i--) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        int j = (int)(s % (unsigned long long)(i + 1));
        int t = idx[i];
        idx[i] = idx[j];
        idx[j] = t;
    }
}

int calib_classes_number(const char *const *names, int n, int *cls) {
    int n_cls = 0;
    for (int i = 0; i < n; i++) {
        cls[i] = -1;
        for (int j = 0; j < i && cls[i] < 0; j++)
            if (!strcmp(names[j], names[i])) cls[i] = cls[j];
        if (cls[i] < 0) cls[i] = n_cls++;
    }
    return n_cls;
}

int calib_class_first(const int *cls, int n, int c) {
    for (int i = 0; i < n; i++)
        if (cls[i] == c) return i;
    return -1;
}

void calib_features_standardise(const float *x, int n, float *mean, float *std, float *z) {
    enum { F = PROBE_N_FEATURES };
    for (int f = 0; f < F; f++) {
        double m = 0, v = 0;
        for (int i = 0; i < n; i++) m += x[i * F + f];
        m /= n;
        for (int i = 0; i < n; i++) v += (x[i * F + f] - m) * (x[i * F + f] - m);
        mean[f] = (float)m;
        std[f] = (float)(sqrt(v / n) > 1e-6 ? sqrt(v / n) : 1e-6);
    }
    for (int i = 0; i < n; i++)
        for (int f = 0; f < F; f++) z[i * F + f] = (x[i * F + f] - mean[f]) / std[f];
}

void calib_logistic_fit(const float *z, const float *y, int n, float *w, float *b) {
    enum { F = PROBE_N_FEATURES };
    const double lr = 0.5, l2 = 1e-2;
    double wd[F] = {0}, bd = 0;
    for (int it = 0; it < 3000; it++) {
        double gw[F] = {0}, gb = 0;
        for (int i = 0; i < n; i++) {
            double a = bd;
            for (int f = 0; f < F; f++) a += wd[f] * z[i * F + f];
            double err = 1 / (1 + exp(-a)) - y[i];
            for (int f = 0; f < F; f++) gw[f] += err * z[i * F + f];
            gb += err;
        }
        for (int f = 0; f < F; f++) wd[f] -= lr * (gw[f] / n + l2 * wd[f]);
        bd -= lr * gb / n;
    }
    for (int f = 0; f < F; f++) w[f] = (float)wd[f];
    *b = (float)bd;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Inverts the symmetric positive definite F x F matrix in the left half of
 * A by Gauss-Jordan elimination with partial pivoting; the right half,
 * the identity on entry, gets the inverse. */
static void invert_spd(double a[PROBE_N_FEATURES][2 * PROBE_N_FEATURES]) {
    enum { F = PROBE_N_FEATURES };
    for (int c = 0; c < F; c++) {
        int piv = c;
        for (int r = c + 1; r < F; r++)
            if (fabs(a[r][c]) > fabs(a[piv][c])) piv = r;
        for (int j = 0; j < 2 * F; j++) {
            double t = a[c][j];
            a[c][j] = a[piv][j];
            a[piv][j] = t;
        }
        double d = a[c][c]; /* >= the ridge: the matrix is positive definite */
        for (int j = 0; j < 2 * F; j++) a[c][j] /= d;
        for (int r = 0; r < F; r++) {
            double m = a[r][c];
            if (r == c || m == 0) continue;
            for (int j = 0; j < 2 * F; j++) a[r][j] -= m * a[c][j];
        }
    }
}

int calib_range_fit(const float *z, int n, probe *p) {
    enum { F = PROBE_N_FEATURES };
    double a[F][2 * F] = {{0}};
    for (int f = 0; f < F; f++) {
        for (int g = 0; g < F; g++) {
            for (int i = 0; i < n; i++) a[f][g] += (double)z[i * F + f] * z[i * F + g];
            a[f][g] /= n;
        }
        a[f][f] += 1e-2;
        a[f][F + f] = 1;
    }
    invert_spd(a);
    for (int f = 0; f < F; f++)
        for (int g = 0; g < F; g++) p->precision[f][g] = (float)(0.5 * (a[f][F + g] + a[g][F + f]));
    double *dist = malloc((size_t)n * sizeof *dist);
    if (!dist) return -1;
    for (int i = 0; i < n; i++) dist[i] = probe_distance(p, z + (size_t)i * F);
    qsort(dist, (size_t)n, sizeof *dist, cmp_double);
    double d_max = dist[(int)ceil(0.99 * n) - 1];
    p->d_max = (float)(d_max > 0.1 ? d_max : 0.1);
    free(dist);
    return 0;
}

void calib_labels_make(const int *orders, const int *depth, const int *cls, int n, int n_cand, int layer, float *y) {
    for (int i = 0; i < n; i++) {
        const int *ord = orders + cls[i] * n_cand;
        y[i] = 0;
        for (int r = 0; r < depth[cls[i]]; r++) y[i] += ord[r] == layer;
    }
}

/* A partial ranking in the beam search of calib_candidates_rank. */
typedef struct {
    int order[PROBE_MAX_CANDIDATES];   /* positions in the input order, the first `depth` of them ranked */
    int n_alive[PROBE_MAX_CANDIDATES]; /* samples within the target after each rank */
    long mass;                         /* sum over samples of the ranks they survived */
    int usable;                        /* ranks at which SHARE of the samples kept their answers */
    uint64_t removed;                  /* bit j: the candidate at input position j is ranked */
    uint8_t *alive;                    /* per sample: within the target so far */
} rank_state;

static int rank_state_better(const rank_state *a, const rank_state *b) {
    return a->usable > b->usable || (a->usable == b->usable && a->mass > b->mass);
}

/* Copies A's ranking and survivors into B (B keeps its own alive buffer). */
static void rank_state_copy(rank_state *b, const rank_state *a, int n) {
    uint8_t *keep = b->alive;
    *b = *a;
    b->alive = keep;
    memcpy(b->alive, a->alive, (size_t)n);
}

/* Measures T, whose ranks 0..depth are set, on its surviving samples:
 * updates its survivors, n_alive[depth], mass and usable. 0 or -1. */
static int rank_state_measure(rank_state *t, int depth, calib_measure_fn measure, void *ud, const int *samples, int n,
                              const calib_rank_params *pr, const int *layers) {
    int removed[PROBE_MAX_CANDIDATES];
    for (int r = 0; r <= depth; r++) removed[r] = layers[t->order[r]];
    t->n_alive[depth] = 0;
    for (int i = 0; i < n; i++) {
        int agree, n_tokens;
        if (!t->alive[i]) continue;
        if (measure(ud, samples[i], removed, depth + 1, &agree, &n_tokens)) return -1;
        t->alive[i] = agree >= pr->prompt_target * n_tokens - 1e-9;
        t->n_alive[depth] += t->alive[i];
    }
    t->mass += t->n_alive[depth];
    t->usable += t->n_alive[depth] >= pr->share * n - 1e-9;
    return 0;
}

/* Sorts BY_SCORE[0..n) to list the states NEXT from the best (insertion
 * sort, stable: deterministic). */
static void rank_states_sort(const rank_state *next, int n, int *by_score) {
    for (int a = 0; a < n; a++) {
        by_score[a] = a;
        for (int b = a; b > 0 && rank_state_better(&next[by_score[b]], &next[by_score[b - 1]]); b--) {
            int t = by_score[b];
            by_score[b] = by_score[b - 1];
            by_score[b - 1] = t;
        }
    }
}

int calib_candidates_rank(calib_measure_fn measure, void *ud, const int *samples, int n, const calib_rank_params *pr,
                          int *order, int n_cand, double *step_alive) {
    int n_states = pr->beam * (n_cand + 1), rc = -1, n_beam = 1;
    int layers[PROBE_MAX_CANDIDATES];
    rank_state *beam = calloc((size_t)n_states, sizeof *beam), *next = beam + pr->beam;
    int *by_score = malloc((size_t)n_states * sizeof *by_score);
    uint8_t *pool = malloc((size_t)n_states * (size_t)(n ? n : 1));
    if (!beam || !by_score || !pool || n_cand > PROBE_MAX_CANDIDATES) goto done;
    memcpy(layers, order, (size_t)n_cand * sizeof *order);
    for (int i = 0; i < n_states; i++) beam[i].alive = pool + (size_t)i * n;
    for (int j = 0; j < n_cand; j++) beam[0].order[j] = j;
    memset(beam[0].alive, 1, (size_t)n);
    for (int depth = 0; depth < n_cand; depth++) {
        int n_next = 0;
        for (int b = 0; b < n_beam; b++)
            for (int c = depth; c < n_cand; c++) {
                rank_state *t = &next[n_next];
                rank_state_copy(t, &beam[b], n);
                t->order[depth] = beam[b].order[c];
                t->order[c] = beam[b].order[depth];
                t->removed |= 1ull << t->order[depth];
                if (rank_state_measure(t, depth, measure, ud, samples, n, pr, layers)) goto done;
                /* The same set reached in another order: keep the better. */
                int dup = -1;
                for (int j = 0; j < n_next && dup < 0; j++)
                    if (next[j].removed == t->removed) dup = j;
                if (dup < 0) n_next++;
                else if (rank_state_better(t, &next[dup])) rank_state_copy(&next[dup], t, n);
            }
        rank_states_sort(next, n_next, by_score);
        n_beam = n_next < pr->beam ? n_next : pr->beam;
        for (int b = 0; b < n_beam; b++) rank_state_copy(&beam[b], &next[by_score[b]], n);
    }
    for (int r = 0; r < n_cand; r++) {
        order[r] = layers[beam[0].order[r]];
        step_alive[r] = n ? (double)beam[0].n_alive[r] / n : 0;
    }
    rc = 0;
done:
    free(beam);
    free(by_score);
    free(pool);
    return rc;
}

/* The longest prefix of ORDER[0..n_cand) that the samples SAMPLES[0..n)
 * can drop as a whole (see calib_classes_rank) into *DEPTH. 0 or -1. */
static int class_depth(calib_measure_fn measure, void *ud, const int *samples, int n, const calib_rank_params *pr,
                       const int *order, int n_cand, int *depth) {
    *depth = 0;
    for (int d = 1; n && d <= n_cand; d++) {
        long agree_sum = 0, tokens = 0;
        int exact = 0;
        for (int i = 0; i < n; i++) {
            int agree, n_tokens;
            if (measure(ud, samples[i], order, d, &agree, &n_tokens)) return -1;
            agree_sum += agree;
            tokens += n_tokens;
            exact += agree == n_tokens;
        }
        if (agree_sum < pr->target * tokens - 1e-9 || exact < pr->share * n - 1e-9) break;
        *depth = d;
    }
    return 0;
}

int calib_classes_rank(calib_measure_fn measure, void *ud, const int *cls, int n_cls, int n_cal,
                       const calib_rank_params *pr, const int *cand, int n_cand, int *orders, double *step_alive,
                       int *depth) {
    int *sub = malloc((size_t)(n_cal ? n_cal : 1) * sizeof *sub);
    if (!sub) return -1;
    for (int c = 0; c < n_cls; c++) {
        int m = 0, *ord = orders + c * n_cand;
        for (int i = 0; i < n_cal; i++)
            if (cls[i] == c) sub[m++] = i;
        memcpy(ord, cand, (size_t)n_cand * sizeof *cand);
        depth[c] = 0;
        if (m && (calib_candidates_rank(measure, ud, sub, m, pr, ord, n_cand, step_alive + c * n_cand) ||
                  class_depth(measure, ud, sub, m, pr, ord, n_cand, &depth[c]))) {
            free(sub);
            return -1;
        }
    }
    free(sub);
    return 0;
}

int calib_classes_check(calib_score_fn score, void *ud, const int *cls, int n_cls, int n, double target, double share,
                        calib_score *all) {
    int *idx = malloc((size_t)(n ? n : 1) * sizeof *idx), missing = n_cls;
    if (!idx) return -1;
    memset(all, 0, sizeof *all);
    for (int j = 0; j < n_cls; j++) {
        int m = 0;
        calib_score sc;
        for (int i = 0; i < n; i++)
            if (cls[i] == j) idx[m++] = i;
        if (!m) continue;
        if (score(ud, idx, m, &sc)) {
            free(idx);
            return -1;
        }
        if (missing == n_cls && !calib_score_meets(&sc, target, share)) missing = j;
        calib_score_add(all, &sc);
    }
    free(idx);
    return missing;
}

int calib_threshold_search(calib_try_fn try_threshold, void *ud, float *threshold) {
    static const float ladder[] = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f, 0.45f, 0.4f, 0.35f, 0.3f, 0.25f,
                                   0.2f, 0.175f, 0.15f, 0.125f, 0.1f, 0.075f, 0.05f, 0.02f};
    for (size_t t = 0; t < sizeof ladder / sizeof *ladder; t++) {
        int pass = try_threshold(ud, ladder[t]);
        if (pass < 0) return -1;
        if (pass) {
            *threshold = ladder[t];
            return 0;
        }
    }
    *threshold = 0;
    return 0;
}
