/* probe_features.h - the probe's input: cheap statistics of the first K layers'
 * hidden states of a prompt.
 *
 *   PROBE_F_NORM_GROWTH  log(mean |h_K| / mean |h_0|) / K   (h_0: embeddings)
 *   PROBE_F_NORM_STEP    relative change of the mean norm over layer K-1
 *   PROBE_F_COS_MEAN     mean cosine similarity of consecutive tokens at layer K
 *   PROBE_F_COS_STD      its standard deviation
 *   PROBE_F_MAXPROB      max probability of the next token read from layer K
 *                        through the final norm and the output head
 *   PROBE_F_ENTROPY      entropy (nats) of that distribution
 *   PROBE_F_LOG_LEN      log(prompt tokens)
 */
#ifndef ILPD_FEATURES_H
#define ILPD_FEATURES_H

#define PROBE_MAX_K 8

typedef enum {
    PROBE_F_NORM_GROWTH,
    PROBE_F_NORM_STEP,
    PROBE_F_COS_MEAN,
    PROBE_F_COS_STD,
    PROBE_F_MAXPROB,
    PROBE_F_ENTROPY,
    PROBE_F_LOG_LEN,
    PROBE_N_FEATURES
} probe_feature;

/* Accumulated by the engine while it runs layers 0..K-1 of a prompt. */
typedef struct {
    int k, n_tokens;
    double norm[PROBE_MAX_K + 1]; /* mean L2 norm of the rows after layer i-1 (0: embeddings) */
    double cos_mean, cos_std;
    double maxprob, entropy;
} probe_stats;

/* Mean L2 norm of the N rows of X (DIM wide, host memory). */
double probe_mean_norm(const float *x, int n, int dim);
/* Adds the L2 norms of the N rows of X to *SUM, in order (probe_mean_norm's
 * sum: a prompt measured in two parts gets the same bits). */
void probe_norm_acc(const float *x, int n, int dim, double *sum);
/* Adds to *S and *S2 the cosine similarities (and squares) of consecutive
 * rows of X, the first row paired with PREV (the row before X) unless PREV
 * is NULL. probe_cos_finish makes the mean and deviation over N rows. */
void probe_cos_acc(const float *prev, const float *x, int n, int dim, double *s, double *s2);
void probe_cos_finish(double s, double s2, int n, double *mean, double *std);
/* Mean and standard deviation of the cosine similarity of consecutive rows
 * (0 and 0 for a single row). */
void probe_cos_stats(const float *x, int n, int dim, double *mean, double *std);
/* Max probability and entropy of softmax(LOGITS). */
void probe_sharpness(const float *logits, int n_vocab, double *maxprob, double *entropy);
/* Writes the PROBE_N_FEATURES features of S into OUT. */
void probe_features_make(const probe_stats *s, float *out);
/* The feature's name as saved in probe files ("norm_growth", ...). */
const char *probe_feature_name(int f);

#endif
