/* calibrate.h - the mathematics of probe calibration, on arrays: the
 * prompt split, class numbering, feature standardisation, the logistic
 * regressions, the joint calibration range, the ranking of candidate layers
 * (a beam search over nested removal sets), the depth each class can drop,
 * and the threshold search.
 *
 * Nothing here runs a model: what a removal set or a threshold costs is
 * measured by the caller (`ilpd calibrate` runs the engine) through the
 * callbacks below, so that the same code runs on hand-made tables in the
 * tests. Samples are named by their index 0..n; "class" numbers are 0..n_cls.
 * Every function is deterministic.
 */
#ifndef ILPD_CALIBRATE_H
#define ILPD_CALIBRATE_H

#include "probe/probe.h"

/* What a set of prompts kept under some masks. */
typedef struct {
    double agree_tokens, total_tokens; /* answer tokens unchanged; answer tokens */
    double skipped, decided;           /* layers skipped in all; prompts with any skipped */
    int n, exact;                      /* prompts; of them with every answer token unchanged */
} calib_score;

/* Adds X's counts to SUM. */
void calib_score_add(calib_score *sum, const calib_score *x);

/* 1 when SC keeps TARGET of its answer tokens and SHARE of its answers
 * whole, else 0. */
int calib_score_meets(const calib_score *sc, double target, double share);

/* Fills IDX[0..n) with a permutation of 0..n-1 drawn from SEED (xorshift);
 * the same seed gives the same permutation. */
void calib_shuffle(int *idx, int n, unsigned long long seed);

/* Numbers the distinct strings of NAMES[0..n) in order of first appearance:
 * CLS[i] (caller's, n ints) gets the number of NAMES[i]. Returns how many
 * there are. */
int calib_classes_number(const char *const *names, int n, int *cls);

/* The index of the first sample of class C in CLS[0..n), or -1. */
int calib_class_first(const int *cls, int n, int c);

/* Standardises the features X (n rows of PROBE_N_FEATURES, n >= 1): MEAN
 * and STD (PROBE_N_FEATURES each) get each feature's mean and standard
 * deviation (at least 1e-6), Z (n rows, caller's) the standardised rows. */
void calib_features_standardise(const float *x, int n, float *mean, float *std, float *z);

/* Fits a logistic regression of Y (n values in [0,1]) on the standardised
 * features Z (n rows of PROBE_N_FEATURES) by full-batch gradient descent
 * (3000 steps, rate 0.5) with L2 regularisation 1e-2 on the weights: W
 * (PROBE_N_FEATURES) and *B get the fit. */
void calib_logistic_fit(const float *z, const float *y, int n, float *w, float *b);

/* Sets P->precision to the inverse covariance of the standardised features
 * Z (n rows of PROBE_N_FEATURES, n >= 1), with a ridge of 1e-2 so that a
 * constant feature or few prompts still give an inverse, and P->d_max to
 * the Mahalanobis distance (probe_distance) that holds 99% of the rows, at
 * least 0.1: the calibration range taken jointly. Returns 0 or -1 (out of
 * memory; P unchanged but for precision). */
int calib_range_fit(const float *z, int n, probe *p);

/* Labels of candidate layer LAYER for the samples 0..n: Y[i] is 1 when
 * LAYER is among the first DEPTH[c] layers of ORDERS[c * n_cand ..] for
 * c = CLS[i] (the class of sample i drops it), else 0. */
void calib_labels_make(const int *orders, const int *depth, const int *cls, int n, int n_cand, int layer, float *y);

/* Measures sample SAMPLE with the layers REMOVED[0..n_removed) skipped:
 * *AGREE gets its answer tokens kept, *N_TOKENS its answer tokens. Returns
 * 0, or -1 to stop the search (the caller's error). */
typedef int (*calib_measure_fn)(void *ud, int sample, const int *removed, int n_removed, int *agree, int *n_tokens);

typedef struct {
    double prompt_target; /* agreement a prompt must keep to stay in the ranking */
    double target;        /* agreement a class's answer tokens must keep together */
    double share;         /* share of a class's answers that must stay whole (0: no such rule) */
    int beam;             /* width of the beam search, >= 1 */
} calib_rank_params;

/* Orders ORDER[0..n_cand) (candidate layers, at most PROBE_MAX_CANDIDATES;
 * rewritten in place) from the first to the last layer to remove for the
 * samples SAMPLES[0..n) of one class: each sample keeps its answer
 * (agreement >= PR->prompt_target of its tokens) for some prefix of the
 * ranking. What a probe can use is the depth to which PR->share of the
 * class keeps its answers: a beam search (width PR->beam) maximises that
 * depth, then the total of all samples' prefixes. Each removal set is
 * measured as a whole through MEASURE (layers harmless alone can be harmful
 * together); a sample that lost its answer is not measured again.
 * STEP_ALIVE[r] (n_cand) gets the share of samples still within the target
 * with ranks 0..r removed. Returns 0 or -1 (out of memory, or MEASURE
 * failed). */
int calib_candidates_rank(calib_measure_fn measure, void *ud, const int *samples, int n, const calib_rank_params *pr,
                          int *order, int n_cand, double *step_alive);

/* For each of the N_CLS classes (CLS[i] is the class of sample i) ranks
 * the candidates CAND[0..n_cand) on its samples among 0..n_cal with
 * calib_candidates_rank into ORDERS and STEP_ALIVE (caller's, n_cls x
 * n_cand each; a class without samples keeps CAND's order), and sets
 * DEPTH[c] (n_cls) to the longest prefix of class c's order that the class
 * can drop as a whole: its answer tokens keep PR->target agreement and
 * PR->share of its answers stay whole. Returns 0 or -1. */
int calib_classes_rank(calib_measure_fn measure, void *ud, const int *cls, int n_cls, int n_cal,
                       const calib_rank_params *pr, const int *cand, int n_cand, int *orders, double *step_alive,
                       int *depth);

/* Scores the samples SAMPLES[0..n) under the probe being calibrated into
 * *SC. Returns 0 or -1 (the caller's error). */
typedef int (*calib_score_fn)(void *ud, const int *samples, int n, calib_score *sc);

/* Scores the samples 0..n class by class (CLS[i] in 0..n_cls) through
 * SCORE; *ALL gets the totals. Returns the first class that misses TARGET
 * agreement or SHARE of its answers whole, n_cls when none does, -1 when
 * out of memory or SCORE failed. */
int calib_classes_check(calib_score_fn score, void *ud, const int *cls, int n_cls, int n, double target, double share,
                        calib_score *all);

/* Tries threshold T: returns 1 when it keeps every class within the
 * target, 0 when not, -1 on the caller's error. */
typedef int (*calib_try_fn)(void *ud, float t);

/* Tries the thresholds from 0.9 down to 0.02 (a fixed ladder) through TRY
 * and sets *THRESHOLD to the first that passes (the one that skips most),
 * 0 (skip nothing) when none does. Returns 0 or -1 (TRY failed). */
int calib_threshold_search(calib_try_fn try_threshold, void *ud, float *threshold);

#endif
