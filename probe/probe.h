/* probe.h - the Layer Confidence Probe: a calibrated predictor of which
 * later layers a request can skip.
 *
 * Candidates are the layers K..n-2 (at most PROBE_MAX_CANDIDATES of them).
 * For each, a logistic regression over the standardised features gives
 * s_j, the probability that this request can do without layer cand[j];
 * 1 - s_j is the probability that it is needed, and the layer is skipped
 * when that is below the threshold. The regressions are independent: which
 * layers a prompt can lose differs between kinds of prompts (a JSON
 * classifier and a yes/no question lean on different layers), and
 * calibration measures the sets it labels with as whole masks. Parameters:
 * n_cand * (features+1) <= 256. Confidence is the mean of |2 s_j - 1|: how
 * far from a coin flip the predictor is. Below the floor, or with features
 * outside the calibration range, the request runs at full depth: a feature
 * more than z_max standard deviations from its calibration mean, or a
 * feature vector farther than d_max from the calibration data's centre in
 * Mahalanobis distance (features each in range can still form a
 * combination calibration never saw: raw text without the chat template
 * does, on the demo model).
 */
#ifndef ILPD_PROBE_H
#define ILPD_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "probe/mask.h"
#include "probe/probe_features.h"

#define PROBE_MAX_PARAMS 256
#define PROBE_MAX_CANDIDATES (PROBE_MAX_PARAMS / (PROBE_N_FEATURES + 1))
#define PROBE_FORMAT "ilpd-probe-2" /* 2: independent per-layer regressions (1 had nested ranks) */

typedef struct {
    char model_sha256[65];
    int n_layers, k, n_cand;
    float mean[PROBE_N_FEATURES], std[PROBE_N_FEATURES];
    int cand[PROBE_MAX_CANDIDATES];                 /* layer of each regression */
    float w[PROBE_MAX_CANDIDATES][PROBE_N_FEATURES];
    float b[PROBE_MAX_CANDIDATES];
    float precision[PROBE_N_FEATURES][PROBE_N_FEATURES]; /* inverse covariance of the standardised features */
    float threshold, floor, z_max, d_max;
    char *metrics_json;                             /* calibration metrics, kept verbatim (owned) */
} probe;

typedef enum { PROBE_DECIDED_FULL, PROBE_DECIDED_SKIP } probe_outcome;

typedef struct {
    probe_outcome outcome;
    float confidence;
    int in_range;
    float distance;                                 /* Mahalanobis distance of the features */
    int n_skipped;
    float needed[PROBE_MAX_CANDIDATES];             /* 1 - s_j per candidate */
} probe_decision;

/* The default K for a model of N_LAYERS: 3, fewer for shallow models. */
int probe_default_k(int n_layers);

/* Loads a probe file. Returns 0, or -1 with "PATH: problem" in err. */
int probe_load(probe *p, const char *path, char *err, size_t errlen);
/* Writes P as JSON to PATH; returns 0 or -1 with err set. */
int probe_save(const probe *p, const char *path, char *err, size_t errlen);
void probe_free(probe *p);

/* The Mahalanobis distance of the standardised features Z
 * (PROBE_N_FEATURES of them) from the calibration centre, under P->precision. */
double probe_distance(const probe *p, const float *z);

/* Decides the mask for FEATURES: MASK (n_layers bytes) gets 1 for every
 * computed layer. Never skips layers 0..k-1 or the last layer. */
void probe_decide(const probe *p, const float *features, uint8_t *mask, probe_decision *d);

/* Hex SHA-256 of the file at PATH into OUT (65 bytes); 0 or -1. */
int probe_file_sha256(const char *path, char *out, char *err, size_t errlen);

#endif
