/* probe.c - probe files and the skip decision. */
#include "probe/probe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STRINGIFY_(x) #x
#define STRINGIFY(x) STRINGIFY_(x) /* a number macro as a string literal */

int probe_default_k(int n_layers) {
    int k = (n_layers - 1) / 2;
    if (k > 3) k = 3;
    return k < 1 ? 1 : k;
}

/* Reads the whole file at PATH; returns a malloc'd NUL-terminated buffer or NULL. */
static char *read_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    if (fseek(f, 0, SEEK_END) || ftell(f) < 0 || ftell(f) > (1 << 24)) {
        snprintf(err, errlen, "%s: not a readable probe file (larger than 16 MiB?)", path);
        goto done;
    }
    long n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n + 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        snprintf(err, errlen, "%s: cannot read", path);
        free(buf);
        buf = NULL;
        goto done;
    }
    buf[n] = 0;
done:
    fclose(f);
    return buf;
}

/* Copies the numeric array ITEM of exactly N values into OUT; 0 or -1. */
static int read_floats(const cJSON *item, float *out, int n) {
    if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) != n) return -1;
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, item) {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return -1;
        out[i++] = (float)v->valuedouble;
    }
    return 0;
}

static int number(const cJSON *obj, const char *key, double lo, double hi, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi)) return -1;
    *out = v->valuedouble;
    return 0;
}

int probe_load(probe *p, const char *path, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    char *text = read_file(path, err, errlen);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const char *why = NULL;
    double v;
    if (!root || !cJSON_IsObject(root)) {
        why = "not valid JSON";
        goto fail;
    }
    const cJSON *sha = cJSON_GetObjectItemCaseSensitive(root, "model_sha256");
    if (!cJSON_IsString(sha) || strlen(sha->valuestring) != 64 || strspn(sha->valuestring, "0123456789abcdef") != 64) {
        why = "model_sha256 must be 64 lowercase hex digits";
        goto fail;
    }
    memcpy(p->model_sha256, sha->valuestring, 65);
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, PROBE_FORMAT)) {
        why = "format must be \"" PROBE_FORMAT "\" (a probe from an older build: calibrate it again)";
        goto fail;
    }
    if (number(root, "n_layers", 2, MASK_MAX_LAYERS, &v)) { why = "n_layers must be in 2.." STRINGIFY(MASK_MAX_LAYERS); goto fail; }
    p->n_layers = (int)v;
    if (number(root, "k", 1, PROBE_MAX_K, &v) || (int)v >= p->n_layers - 1) { why = "k must be in 1..min(8, n_layers-2)"; goto fail; }
    p->k = (int)v;
    const cJSON *feats = cJSON_GetObjectItemCaseSensitive(root, "features");
    if (!cJSON_IsArray(feats) || cJSON_GetArraySize(feats) != PROBE_N_FEATURES) { why = "features must list the 7 feature names"; goto fail; }
    for (int f = 0; f < PROBE_N_FEATURES; f++) {
        const cJSON *name = cJSON_GetArrayItem(feats, f);
        if (!cJSON_IsString(name) || strcmp(name->valuestring, probe_feature_name(f))) { why = "features are not the ones this build computes"; goto fail; }
    }
    if (read_floats(cJSON_GetObjectItemCaseSensitive(root, "feature_mean"), p->mean, PROBE_N_FEATURES) ||
        read_floats(cJSON_GetObjectItemCaseSensitive(root, "feature_std"), p->std, PROBE_N_FEATURES)) {
        why = "feature_mean and feature_std must hold one finite number per feature";
        goto fail;
    }
    for (int f = 0; f < PROBE_N_FEATURES; f++)
        if (!(p->std[f] > 0)) { why = "feature_std must be positive"; goto fail; }
    if (number(root, "threshold", 0, 1, &v)) { why = "threshold must be in [0, 1]"; goto fail; }
    p->threshold = (float)v;
    if (number(root, "confidence_floor", 0, 1, &v)) { why = "confidence_floor must be in [0, 1]"; goto fail; }
    p->floor = (float)v;
    if (number(root, "z_max", 0.1, 1000, &v)) { why = "z_max must be in [0.1, 1000]"; goto fail; }
    p->z_max = (float)v;
    if (number(root, "distance_max", 0.1, 1000, &v)) { why = "distance_max must be in [0.1, 1000]"; goto fail; }
    p->d_max = (float)v;
    const cJSON *prec = cJSON_GetObjectItemCaseSensitive(root, "feature_precision");
    int rows_ok = cJSON_IsArray(prec) && cJSON_GetArraySize(prec) == PROBE_N_FEATURES;
    for (int f = 0; rows_ok && f < PROBE_N_FEATURES; f++)
        rows_ok = !read_floats(cJSON_GetArrayItem(prec, f), p->precision[f], PROBE_N_FEATURES) && p->precision[f][f] > 0;
    if (!rows_ok) { why = "feature_precision must be 7 rows of 7 finite numbers with a positive diagonal"; goto fail; }
    const cJSON *cands = cJSON_GetObjectItemCaseSensitive(root, "candidates");
    int n = cJSON_IsArray(cands) ? cJSON_GetArraySize(cands) : -1;
    if (n < 0 || n > PROBE_MAX_CANDIDATES || n > p->n_layers - p->k - 1) { why = "candidates must be an array of at most 32 entries (k..n_layers-2)"; goto fail; }
    p->n_cand = n;
    uint8_t seen[MASK_MAX_LAYERS] = {0};
    for (int j = 0; j < n; j++) {
        const cJSON *c = cJSON_GetArrayItem(cands, j);
        if (number(c, "layer", p->k, p->n_layers - 2, &v) || seen[(int)v]) { why = "each candidate needs a distinct layer in k..n_layers-2"; goto fail; }
        p->cand[j] = (int)v;
        seen[(int)v] = 1;
        if (read_floats(cJSON_GetObjectItemCaseSensitive(c, "w"), p->w[j], PROBE_N_FEATURES) || number(c, "b", -1e6, 1e6, &v)) {
            why = "each candidate needs w (one weight per feature) and b";
            goto fail;
        }
        p->b[j] = (float)v;
    }
    const cJSON *metrics = cJSON_GetObjectItemCaseSensitive(root, "calibration");
    if (metrics) {
        p->metrics_json = cJSON_PrintUnformatted(metrics);
        if (!p->metrics_json) { why = "out of memory"; goto fail; }
    }
    cJSON_Delete(root);
    return 0;
fail:
    snprintf(err, errlen, "%s: invalid probe file: %s", path, why);
    cJSON_Delete(root);
    probe_free(p);
    return -1;
}

int probe_save(const probe *p, const char *path, char *err, size_t errlen) {
    cJSON *root = cJSON_CreateObject(), *feats = cJSON_AddArrayToObject(root, "features");
    cJSON *cands = NULL;
    char *text = NULL;
    int rc = -1;
    if (!root || !feats) goto oom;
    cJSON_AddStringToObject(root, "format", PROBE_FORMAT);
    cJSON_AddStringToObject(root, "model_sha256", p->model_sha256);
    cJSON_AddNumberToObject(root, "n_layers", p->n_layers);
    cJSON_AddNumberToObject(root, "k", p->k);
    for (int f = 0; f < PROBE_N_FEATURES; f++) cJSON_AddItemToArray(feats, cJSON_CreateString(probe_feature_name(f)));
    cJSON_AddItemToObject(root, "feature_mean", cJSON_CreateFloatArray(p->mean, PROBE_N_FEATURES));
    cJSON_AddItemToObject(root, "feature_std", cJSON_CreateFloatArray(p->std, PROBE_N_FEATURES));
    cJSON_AddNumberToObject(root, "threshold", p->threshold);
    cJSON_AddNumberToObject(root, "confidence_floor", p->floor);
    cJSON_AddNumberToObject(root, "z_max", p->z_max);
    cJSON_AddNumberToObject(root, "distance_max", p->d_max);
    cJSON *prec = cJSON_AddArrayToObject(root, "feature_precision");
    if (!prec) goto oom;
    for (int f = 0; f < PROBE_N_FEATURES; f++) cJSON_AddItemToArray(prec, cJSON_CreateFloatArray(p->precision[f], PROBE_N_FEATURES));
    cJSON_AddNumberToObject(root, "parameters", p->n_cand * (PROBE_N_FEATURES + 1));
    cands = cJSON_AddArrayToObject(root, "candidates");
    if (!cands) goto oom;
    for (int j = 0; j < p->n_cand; j++) {
        cJSON *c = cJSON_CreateObject();
        if (!c) goto oom;
        cJSON_AddItemToArray(cands, c);
        cJSON_AddNumberToObject(c, "layer", p->cand[j]);
        cJSON_AddItemToObject(c, "w", cJSON_CreateFloatArray(p->w[j], PROBE_N_FEATURES));
        cJSON_AddNumberToObject(c, "b", p->b[j]);
    }
    if (p->metrics_json) {
        cJSON *m = cJSON_Parse(p->metrics_json);
        if (m) cJSON_AddItemToObject(root, "calibration", m);
    }
    text = cJSON_Print(root);
    if (!text) goto oom;
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write: %s", path, strerror(errno));
        goto done;
    }
    int ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    if (fclose(f) || !ok) {
        snprintf(err, errlen, "%s: write failed", path);
        goto done;
    }
    rc = 0;
    goto done;
oom:
    snprintf(err, errlen, "%s: out of memory", path);
done:
    free(text);
    cJSON_Delete(root);
    return rc;
}

void probe_free(probe *p) {
    free(p->metrics_json);
    p->metrics_json = NULL;
}

double probe_distance(const probe *p, const float *z) {
    double d2 = 0;
    for (int f = 0; f < PROBE_N_FEATURES; f++)
        for (int g = 0; g < PROBE_N_FEATURES; g++) d2 += (double)z[f] * p->precision[f][g] * z[g];
    return sqrt(d2 > 0 ? d2 : 0);
}

void probe_decide(const probe *p, const float *features, uint8_t *mask, probe_decision *d) {
    float z[PROBE_N_FEATURES];
    memset(d, 0, sizeof *d);
    memset(mask, 1, (size_t)p->n_layers);
    d->outcome = PROBE_DECIDED_FULL;
    d->in_range = 1;
    for (int f = 0; f < PROBE_N_FEATURES; f++) {
        z[f] = (features[f] - p->mean[f]) / p->std[f];
        if (!(fabsf(z[f]) <= p->z_max)) d->in_range = 0; /* also catches NaN */
    }
    d->distance = (float)probe_distance(p, z);
    if (!(d->distance <= p->d_max)) d->in_range = 0;
    if (!d->in_range || p->n_cand == 0) return;
    double conf = 0;
    for (int j = 0; j < p->n_cand; j++) {
        double a = p->b[j];
        for (int f = 0; f < PROBE_N_FEATURES; f++) a += p->w[j][f] * z[f];
        double s = 1 / (1 + exp(-a));
        d->needed[j] = (float)(1 - s);
        conf += fabs(2 * s - 1);
    }
    d->confidence = (float)(conf / p->n_cand);
    if (d->confidence < p->floor) return;
    for (int j = 0; j < p->n_cand; j++)
        if (d->needed[j] < p->threshold) {
            mask[p->cand[j]] = 0;
            d->n_skipped++;
        }
    if (d->n_skipped) d->outcome = PROBE_DECIDED_SKIP;
}

int probe_file_sha256(const char *path, char *out, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    unsigned char buf[1 << 16], md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    int ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    size_t n;
    while (ok && (n = fread(buf, 1, sizeof buf, f)) > 0) ok = EVP_DigestUpdate(ctx, buf, n);
    ok = ok && !ferror(f) && EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    fclose(f);
    if (!ok) {
        snprintf(err, errlen, "%s: cannot hash", path);
        return -1;
    }
    for (unsigned i = 0; i < mdlen; i++) sprintf(out + 2 * i, "%02x", md[i]);
    out[2 * mdlen] = 0;
    return 0;
}
