/* calibrate.c - `ilpd calibrate`: fits the layer-skip probe on prompts.
 *
 * Measures each prompt's full-depth answer, then (probe/calibrate.h, with
 * the engine measuring each removal set and threshold) ranks the candidate
 * layers per prompt class, finds how deep each class can go, fits one
 * logistic regression per candidate and the joint calibration range, picks
 * the threshold, scores the held-out split and writes the probe file.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/log.h"
#include "probe/calibrate.h"
#include "probe/probe.h"
#include "server/cli/cli.h"
#include "server/cli/measure.h"

const char cli_calibrate_usage[] =
    "  ilpd calibrate -m MODEL --data PROMPTS.jsonl -o PROBE.json [--target-agreement 0.99] [--seed S]\n"
    "                 [-n ANSWER_TOKENS] [--holdout 0.25] [--max-prompts N] [--confidence-floor 0.4]\n"
    "                 [--exact-share S]   (labels keep answers identical; S of each class must stay so)\n"
    "                 [--beam 8]          (width of the search that orders the candidate layers)\n"
    "                 [-k K]              (layers before the probe reads its features; default 3)\n"
    "                 [-t THREADS] [-c CTX]\n";

/* One calibration: the measured prompts (calibration split first, then
 * the held-out one) and the probe being fitted; the callbacks of
 * probe/calibrate.h measure through it. */
typedef struct {
    const probe_opts *o;
    engine *e;
    const engine_info *in;
    sample *s;
    int n, n_cal;
    const char **names; /* class name of each sample */
    int *cls, n_cls;    /* class number of each sample; how many */
    int cand[PROBE_MAX_CANDIDATES], n_cand;
    int *orders, *depth; /* per class: its ranking of the candidates (n_cand), how many it drops */
    double *step_alive;  /* per class and rank: share of its prompts within the target */
    float *logits;       /* n_ctx x n_vocab scratch */
    probe pr;
    calib_score cal;     /* the calibration split under the last threshold tried */
    double t0;
} calib_run;

static const char *class_name(const calib_run *r, int c) {
    int i = calib_class_first(r->cls, r->n, c);
    return i < 0 ? "?" : r->names[i];
}

/* calib_measure_fn: sample I with the layers REMOVED skipped. */
static int measure_removed(void *ud, int i, const int *removed, int n_removed, int *agree, int *n_tokens) {
    calib_run *r = ud;
    uint8_t mask[MASK_MAX_LAYERS];
    measure_mask_full(r->in, mask);
    for (int j = 0; j < n_removed; j++) mask[removed[j]] = 0;
    *n_tokens = r->s[i].n_seq - r->s[i].n_prompt;
    return measure_agreement(r->e, &r->s[i], mask, r->logits, agree);
}

/* calib_score_fn: runs the probe on the samples IDX[0..n) and measures the
 * skip rate and teacher-forced agreement of its masks. */
static int score_probe(void *ud, const int *idx, int n, calib_score *sc) {
    calib_run *r = ud;
    memset(sc, 0, sizeof *sc);
    for (int i = 0; i < n; i++) {
        sample *sm = &r->s[idx[i]];
        uint8_t mask[MASK_MAX_LAYERS] = {0};
        probe_decision d;
        probe_decide(&r->pr, sm->features, mask, &d);
        int n_ans = sm->n_seq - sm->n_prompt, agree = n_ans;
        if (d.n_skipped && measure_agreement(r->e, sm, mask, r->logits, &agree)) return -1;
        sc->agree_tokens += agree;
        sc->total_tokens += n_ans;
        sc->skipped += d.n_skipped;
        sc->decided += d.n_skipped > 0;
        sc->exact += agree == n_ans;
        sc->n++;
    }
    return 0;
}

/* calib_try_fn: threshold T on the calibration split, class by class. */
static int try_threshold(void *ud, float t) {
    calib_run *r = ud;
    r->pr.threshold = t;
    int missing = calib_classes_check(score_probe, r, r->cls, r->n_cls, r->n_cal, r->o->target, r->o->exact_share, &r->cal);
    if (missing < 0) return -1;
    fprintf(stderr,
            "calibrate: threshold %.2f: calibration agreement %.4f, %.1f%% answers identical, %.2f layers skipped per prompt%s%s\n",
            r->pr.threshold, r->cal.agree_tokens / r->cal.total_tokens, 100.0 * r->cal.exact / r->cal.n,
            r->cal.skipped / r->cal.n, missing < r->n_cls ? "; misses the target on class " : "",
            missing < r->n_cls ? class_name(r, missing) : "");
    return missing == r->n_cls;
}

/* Measures the first prompts of SPECS in the seed's order into r->s and
 * splits them. 0, or -1 (message printed). */
static int samples_take(calib_run *r, const prompt_spec *specs, int n_specs) {
    const probe_opts *o = r->o;
    int *order = malloc((size_t)n_specs * sizeof *order);
    if (!order) return -1;
    calib_shuffle(order, n_specs, o->seed);
    int n_use = o->max_prompts > 0 && o->max_prompts < n_specs ? o->max_prompts : n_specs;
    for (int i = 0; i < n_use; i++)
        if (measure_sample_take(r->e, &specs[order[i]], o->n_gen, &r->s[r->n]) == 0) r->n++;
    free(order);
    if (r->n < 4) {
        fprintf(stderr, "ilpd: only %d prompts could be measured (too long for the context?)\n", r->n);
        return -1;
    }
    int n_hold = (int)(r->n * o->holdout + 0.5);
    r->n_cal = r->n - n_hold;
    if (n_hold < 1 || r->n_cal < 2) {
        fprintf(stderr, "ilpd: too few prompts for a calibration/holdout split\n");
        return -1;
    }
    fprintf(stderr, "calibrate: %d prompts (%d calibration, %d held out), %d layers, k=%d, %.1f s\n", r->n, r->n_cal,
            n_hold, r->in->n_layers, r->in->probe_k, cli_now_s() - r->t0);
    return 0;
}

/* Numbers the classes, ranks the candidates and finds the depth of each
 * class (calib_classes_rank), and logs the rankings. 0 or -1. */
static int classes_rank(calib_run *r) {
    const probe_opts *o = r->o;
    int L = r->in->n_layers, n_cand = 0;
    for (int l = r->in->probe_k; l < L - 1 && n_cand < PROBE_MAX_CANDIDATES; l++) r->cand[n_cand++] = l;
    r->n_cand = n_cand;
    r->names = malloc((size_t)r->n * sizeof *r->names);
    r->cls = malloc((size_t)r->n * sizeof *r->cls);
    if (!r->names || !r->cls) return -1;
    for (int i = 0; i < r->n; i++) r->names[i] = r->s[i].spec->cls;
    r->n_cls = calib_classes_number(r->names, r->n, r->cls);
    r->orders = malloc((size_t)r->n_cls * (n_cand ? n_cand : 1) * sizeof *r->orders);
    r->step_alive = calloc((size_t)r->n_cls * (n_cand ? n_cand : 1), sizeof *r->step_alive);
    r->depth = calloc((size_t)r->n_cls, sizeof *r->depth);
    if (!r->orders || !r->step_alive || !r->depth) return -1;
    calib_rank_params rp = {.prompt_target = o->exact_share > 0 ? 1.0 : o->target, .target = o->target,
                            .share = o->exact_share, .beam = o->beam};
    if (calib_classes_rank(measure_removed, r, r->cls, r->n_cls, r->n_cal, &rp, r->cand, n_cand, r->orders,
                           r->step_alive, r->depth))
        return -1;
    for (int c = 0; c < r->n_cls; c++) {
        fprintf(stderr, "calibrate: class %s: ranking (layer: share of calibration answers within the target with it and "
                        "all before it removed):", class_name(r, c));
        for (int k = 0; k < n_cand; k++) fprintf(stderr, " %d:%.3f", r->orders[c * n_cand + k], r->step_alive[c * n_cand + k]);
        fprintf(stderr, "; the class keeps the target with the first %d of %d removed  (%.1f s)\n", r->depth[c], n_cand,
                cli_now_s() - r->t0);
    }
    return 0;
}

/* Standardises the features on the calibration split, fits the joint range
 * and one logistic regression per candidate: P(the layer is among those
 * the prompt's class drops). 0 or -1. */
static int probe_fit(calib_run *r) {
    enum { F = PROBE_N_FEATURES };
    probe *pr = &r->pr;
    int n_cal = r->n_cal, rc = -1;
    const char *sha = engine_model_sha256(r->e);
    snprintf(pr->model_sha256, sizeof pr->model_sha256, "%s", sha ? sha : "");
    pr->n_layers = r->in->n_layers;
    pr->k = r->in->probe_k;
    pr->n_cand = r->n_cand;
    pr->floor = r->o->floor;
    pr->z_max = 4;
    float *x = malloc((size_t)n_cal * F * sizeof *x), *z = malloc((size_t)n_cal * F * sizeof *z),
          *y = malloc((size_t)n_cal * sizeof *y);
    if (!x || !z || !y) goto done;
    for (int i = 0; i < n_cal; i++) memcpy(x + (size_t)i * F, r->s[i].features, sizeof r->s[i].features);
    calib_features_standardise(x, n_cal, pr->mean, pr->std, z);
    if (calib_range_fit(z, n_cal, pr)) goto done;
    for (int c = 0; c < r->n_cand; c++) {
        pr->cand[c] = r->cand[c];
        calib_labels_make(r->orders, r->depth, r->cls, n_cal, r->n_cand, r->cand[c], y);
        calib_logistic_fit(z, y, n_cal, pr->w[c], &pr->b[c]);
    }
    rc = 0;
done:
    free(x);
    free(z);
    free(y);
    return rc;
}

/* The calibration metrics kept in the probe file (owned JSON text), or NULL. */
static char *metrics_json(const calib_run *r, const calib_score *hold, double cal_skip, double hold_skip) {
    const probe_opts *o = r->o;
    const calib_score *cal = &r->cal;
    cJSON *m = cJSON_CreateObject();
    if (!m) return NULL;
    cJSON_AddStringToObject(m, "data", o->data);
    cJSON_AddNumberToObject(m, "seed", (double)o->seed);
    cJSON_AddNumberToObject(m, "target_agreement", o->target);
    cJSON_AddNumberToObject(m, "exact_share", o->exact_share);
    cJSON_AddNumberToObject(m, "identical_answers_calibration", (double)cal->exact / cal->n);
    cJSON_AddNumberToObject(m, "identical_answers_held_out", (double)hold->exact / hold->n);
    cJSON_AddNumberToObject(m, "answer_tokens", o->n_gen);
    cJSON_AddNumberToObject(m, "prompts_calibration", r->n_cal);
    cJSON_AddNumberToObject(m, "prompts_held_out", r->n - r->n_cal);
    cJSON_AddNumberToObject(m, "skip_rate_calibration", cal_skip);
    cJSON_AddNumberToObject(m, "skip_rate_held_out", hold_skip);
    cJSON_AddNumberToObject(m, "agreement_calibration", cal->agree_tokens / cal->total_tokens);
    cJSON_AddNumberToObject(m, "agreement_held_out", hold->agree_tokens / hold->total_tokens);
    cJSON *ranks = cJSON_AddArrayToObject(m, "rankings");
    for (int c = 0; ranks && c < r->n_cls; c++) {
        cJSON *j = cJSON_CreateObject();
        if (!j) break;
        cJSON_AddItemToArray(ranks, j);
        cJSON_AddStringToObject(j, "class", class_name(r, c));
        cJSON_AddNumberToObject(j, "removed_within_target", r->depth[c]);
        cJSON *layers = cJSON_AddArrayToObject(j, "layers"),
              *alive = cJSON_AddArrayToObject(j, "within_target_removed_with_previous");
        for (int k = 0; layers && alive && k < r->n_cand; k++) {
            cJSON_AddItemToArray(layers, cJSON_CreateNumber(r->orders[c * r->n_cand + k]));
            cJSON_AddItemToArray(alive, cJSON_CreateNumber(r->step_alive[c * r->n_cand + k]));
        }
    }
    char *text = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return text;
}

/* Picks the threshold that skips most while every class of the calibration
 * split keeps the target agreement (and, with --exact-share, that share of
 * its answers identical), none at all (threshold 0) when none does; scores
 * both splits, prints the summary and writes the probe file. 0 or -1. */
static int threshold_pick_and_save(calib_run *r) {
    probe *pr = &r->pr;
    int n_cand = r->n_cand, n_hold = r->n - r->n_cal, rc = -1;
    int *idx = malloc((size_t)r->n * sizeof *idx);
    if (!idx) return -1;
    for (int i = 0; i < r->n; i++) idx[i] = i;
    calib_score hold = {0};
    float threshold;
    if (calib_threshold_search(try_threshold, r, &threshold)) goto done;
    pr->threshold = threshold;
    if (pr->threshold == 0 && score_probe(r, idx, r->n_cal, &r->cal)) goto done;
    if (score_probe(r, idx + r->n_cal, n_hold, &hold)) goto done;
    const calib_score *cal = &r->cal;
    double cal_skip = n_cand ? cal->skipped / cal->n / n_cand : 0, hold_skip = n_cand ? hold.skipped / hold.n / n_cand : 0;
    printf("skip rate (of %d candidate layers): calibration %.1f%%, held out %.1f%%\n", n_cand, 100 * cal_skip,
           100 * hold_skip);
    printf("greedy agreement with full depth:   calibration %.2f%%, held out %.2f%%\n",
           100 * cal->agree_tokens / cal->total_tokens, 100 * hold.agree_tokens / hold.total_tokens);
    printf("answers identical to full depth:    calibration %.1f%%, held out %.1f%%\n", 100.0 * cal->exact / cal->n,
           100.0 * hold.exact / hold.n);
    printf("threshold %.2f, confidence floor %.2f, k=%d, %d parameters\n", pr->threshold, pr->floor, pr->k,
           n_cand * (PROBE_N_FEATURES + 1));
    pr->metrics_json = metrics_json(r, &hold, cal_skip, hold_skip);
    char err[512];
    if (!pr->metrics_json || probe_save(pr, r->o->out, err, sizeof err)) {
        fprintf(stderr, "ilpd: %s\n", pr->metrics_json ? err : "out of memory");
        goto done;
    }
    fprintf(stderr, "calibrate: wrote %s (%.1f s)\n", r->o->out, cli_now_s() - r->t0);
    rc = 0;
done:
    free(idx);
    return rc;
}

int cli_calibrate(int argc, char **argv) {
    probe_opts o;
    int parsed = measure_opts_parse(argc, argv, &o);
    if (parsed) return parsed > 0 ? cli_usage_print(cli_calibrate_usage, 1) : 2;
    if (!o.out) {
        fprintf(stderr, "ilpd: calibrate needs -o PROBE.json\n");
        return 2;
    }
    log_set_plain(1);
    prompt_spec *specs = NULL;
    int n_specs = measure_prompts_load(o.data, &specs), rc = 1;
    if (n_specs < 4) {
        if (n_specs >= 0) fprintf(stderr, "ilpd: %s: calibration needs at least 4 prompts\n", o.data);
        measure_prompts_free(specs, n_specs > 0 ? n_specs : 0);
        return 1;
    }
    calib_run r;
    memset(&r, 0, sizeof r);
    r.o = &o;
    r.e = measure_engine_open(&o, 0);
    r.s = calloc((size_t)n_specs, sizeof *r.s);
    if (!r.e || !r.s) goto done;
    r.in = engine_get_info(r.e);
    r.logits = malloc((size_t)r.in->n_ctx * r.in->n_vocab * sizeof *r.logits);
    if (!r.logits) goto done;
    r.t0 = cli_now_s();
    if (samples_take(&r, specs, n_specs) || classes_rank(&r) || probe_fit(&r) || threshold_pick_and_save(&r)) goto done;
    rc = 0;
done:
    for (int i = 0; i < r.n; i++) measure_sample_free(&r.s[i]);
    free(r.s);
    free(r.logits);
    free(r.names);
    free(r.cls);
    free(r.orders);
    free(r.depth);
    free(r.step_alive);
    probe_free(&r.pr);
    engine_close(r.e);
    measure_prompts_free(specs, n_specs);
    return rc;
}
