/* probe_features.c - hidden-state statistics for the probe. */
#include "probe/probe_features.h"

#include <math.h>
#include <stddef.h>

void probe_norm_acc(const float *x, int n, int dim, double *sum) {
    for (int i = 0; i < n; i++) {
        double ss = 0;
        for (int j = 0; j < dim; j++) ss += (double)x[(size_t)i * dim + j] * x[(size_t)i * dim + j];
        *sum += sqrt(ss);
    }
}

double probe_mean_norm(const float *x, int n, int dim) {
    double sum = 0;
    probe_norm_acc(x, n, dim, &sum);
    return n ? sum / n : 0;
}

void probe_cos_acc(const float *prev, const float *x, int n, int dim, double *s, double *s2) {
    for (int i = 0; i < n; i++) {
        const float *a = i ? x + (size_t)(i - 1) * dim : prev, *b = x + (size_t)i * dim;
        if (!a) continue;
        double dot = 0, na = 0, nb = 0;
        for (int j = 0; j < dim; j++) {
            dot += (double)a[j] * b[j];
            na += (double)a[j] * a[j];
            nb += (double)b[j] * b[j];
        }
        double c = na > 0 && nb > 0 ? dot / sqrt(na * nb) : 0;
        *s += c;
        *s2 += c * c;
    }
}

void probe_cos_finish(double s, double s2, int n, double *mean, double *std) {
    int m = n - 1;
    *mean = m > 0 ? s / m : 0;
    double var = m > 0 ? s2 / m - *mean * *mean : 0;
    *std = var > 0 ? sqrt(var) : 0;
}

void probe_cos_stats(const float *x, int n, int dim, double *mean, double *std) {
    double s = 0, s2 = 0;
    probe_cos_acc(NULL, x, n, dim, &s, &s2);
    probe_cos_finish(s, s2, n, mean, std);
}

void probe_sharpness(const float *logits, int n_vocab, double *maxprob, double *entropy) {
    double mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double z = 0, zl = 0;
    for (int i = 0; i < n_vocab; i++) {
        double d = logits[i] - mx, e = exp(d);
        z += e;
        zl += e * d;
    }
    *maxprob = 1.0 / z;
    *entropy = log(z) - zl / z;
}

void probe_features_make(const probe_stats *s, float *out) {
    int k = s->k > 0 ? s->k : 1;
    double n0 = s->norm[0] > 0 ? s->norm[0] : 1e-9, nk = s->norm[k] > 0 ? s->norm[k] : 1e-9;
    double nprev = s->norm[k - 1] > 0 ? s->norm[k - 1] : 1e-9;
    out[PROBE_F_NORM_GROWTH] = (float)(log(nk / n0) / k);
    out[PROBE_F_NORM_STEP] = (float)((nk - nprev) / nprev);
    out[PROBE_F_COS_MEAN] = (float)s->cos_mean;
    out[PROBE_F_COS_STD] = (float)s->cos_std;
    out[PROBE_F_MAXPROB] = (float)s->maxprob;
    out[PROBE_F_ENTROPY] = (float)s->entropy;
    out[PROBE_F_LOG_LEN] = (float)log(s->n_tokens > 0 ? s->n_tokens : 1);
}

const char *probe_feature_name(int f) {
    static const char *names[PROBE_N_FEATURES] = {"norm_growth", "norm_step", "cos_mean", "cos_std",
                                                  "maxprob", "entropy", "log_len"};
    return f >= 0 && f < PROBE_N_FEATURES ? names[f] : "?";
}
