/* cli_probe.c - `ilpd calibrate` and `ilpd eval`: fitting the layer-skip
 * probe on prompts, and measuring what it costs and saves.
 *
 * Prompts are JSON lines: {"system": "...", "user": "...", "class": "..."}
 * (rendered with the chat template) or {"prompt": "raw text", "class": ...}.
 * Agreement is measured teacher-forced on the full-depth greedy answer: the
 * fraction of its positions where the masked model's top-1 token equals the
 * full model's.
 */
#include "server/cli_probe.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/log.h"
#include "probe/probe.h"
#include "probe/probe_features.h"

typedef struct {
    char *system, *user, *raw, *cls;
} prompt_spec;

typedef struct {
    const char *model, *data, *out, *probe_path, *json_out, *plot, *ppl_text;
    float target, floor, exact_share; /* exact_share > 0: that share of answers must stay identical (see cli_calibrate) */
    int n_gen, n_threads, json, max_prompts, ctx, beam, k; /* k: 0 = the model's default */
    double holdout;
    unsigned long long seed;
} probe_opts;

/* One prompt's measurements. */
typedef struct {
    const prompt_spec *spec;
    int32_t *seq;          /* prompt + full-depth answer */
    int n_prompt, n_seq;
    int32_t *full_top1;    /* full-depth argmax at each answer position */
    float features[PROBE_N_FEATURES];
} sample;

static void specs_free(prompt_spec *p, int n) {
    for (int i = 0; i < n; i++) {
        free(p[i].system);
        free(p[i].user);
        free(p[i].raw);
        free(p[i].cls);
    }
    free(p);
}

static char *json_strdup(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) ? strdup(v->valuestring) : NULL;
}

/* Reads the JSONL prompt file; returns the count (and *out, owned) or -1. */
static int specs_load(const char *path, prompt_spec **out) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ilpd: %s: cannot open: %s\n", path, strerror(errno));
        return -1;
    }
    prompt_spec *p = NULL;
    int n = 0, cap = 0, lineno = 0, rc = -1;
    char *line = NULL;
    size_t lcap = 0;
    while (getline(&line, &lcap, f) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        cJSON *j = cJSON_Parse(line);
        if (!cJSON_IsObject(j)) {
            fprintf(stderr, "ilpd: %s:%d: not a JSON object\n", path, lineno);
            cJSON_Delete(j);
            goto done;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            prompt_spec *np = realloc(p, (size_t)cap * sizeof *p);
            if (!np) {
                cJSON_Delete(j);
                goto done;
            }
            p = np;
        }
        prompt_spec *s = &p[n++];
        s->system = json_strdup(j, "system");
        s->user = json_strdup(j, "user");
        s->raw = json_strdup(j, "prompt");
        s->cls = json_strdup(j, "class");
        if (!s->cls) s->cls = json_strdup(j, "task");
        if (!s->cls) s->cls = strdup("all");
        cJSON_Delete(j);
        if ((!s->user && !s->raw) || !s->cls) {
            fprintf(stderr, "ilpd: %s:%d: needs \"user\" or \"prompt\"\n", path, lineno);
            goto done;
        }
    }
    rc = n;
done:
    free(line);
    fclose(f);
    if (rc < 0) specs_free(p, n);
    else *out = p;
    return rc;
}

/* Tokens of a prompt (chat-rendered or raw); count or -1. */
static int spec_tokens(engine *e, const prompt_spec *s, int32_t **tok) {
    char err[256];
    if (s->raw) return engine_tokenize(e, s->raw, 1, tok);
    engine_message msg = {ENGINE_ROLE_USER, s->user};
    return engine_prompt_build(e, s->system, &msg, 1, tok, err, sizeof err);
}

typedef struct {
    int32_t *ids;
    int n, cap;
} id_list;

static int collect_id(void *ud, int32_t id) {
    id_list *l = ud;
    if (l->n < l->cap) l->ids[l->n++] = id;
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Fills SM: prompt tokens, the full-depth greedy answer (N_GEN tokens at
 * most, its end token included), the full-depth argmax at each answer
 * position, and the probe features. Returns 0 or -1. */
static int sample_measure(engine *e, const prompt_spec *spec, int n_gen, sample *sm) {
    const engine_info *in = engine_get_info(e);
    int32_t *prompt = NULL;
    float *logits = NULL;
    memset(sm, 0, sizeof *sm);
    sm->spec = spec;
    int n = spec_tokens(e, spec, &prompt);
    if (n < 1 || n + n_gen >= in->n_ctx) goto fail;
    sm->seq = malloc((size_t)(n + n_gen) * sizeof *sm->seq);
    if (!sm->seq) goto fail;
    memcpy(sm->seq, prompt, (size_t)n * sizeof *prompt);
    id_list ids = {sm->seq + n, 0, n_gen};
    uint8_t full[ENGINE_MAX_LAYERS];
    memset(full, 1, sizeof full);
    engine_gen_params gp = {.max_tokens = n_gen, .temperature = 0, .top_p = 1, .layer_mask = full};
    engine_callbacks cb = {.on_token = collect_id, .ud = &ids};
    engine_result res;
    engine_generate(e, prompt, n, &gp, &cb, &res);
    if (res.reason == ENGINE_STOP_ERROR || ids.n < 1) goto fail;
    sm->n_prompt = n;
    sm->n_seq = n + ids.n;
    sm->full_top1 = malloc((size_t)ids.n * sizeof *sm->full_top1);
    logits = malloc((size_t)sm->n_seq * in->n_vocab * sizeof *logits);
    if (!sm->full_top1 || !logits) goto fail;
    /* The answer is the full model's greedy output, so its argmax at each
     * answer position is the answer token itself. */
    memcpy(sm->full_top1, sm->seq + n, (size_t)ids.n * sizeof *sm->full_top1);
    if (engine_probe_features(e, prompt, n, sm->features)) goto fail;
    free(prompt);
    free(logits);
    return 0;
fail:
    free(prompt);
    free(logits);
    free(sm->seq);
    free(sm->full_top1);
    memset(sm, 0, sizeof *sm);
    return -1;
}

static void sample_free(sample *sm) {
    free(sm->seq);
    free(sm->full_top1);
}

/* Teacher-forced agreement of MASK with the full model over the answer of
 * SM: the count of answer positions whose argmax equals the full model's
 * (in *agree, out of sm->n_seq - sm->n_prompt). LOGITS is scratch room for
 * the logits of every position. Returns 0 or -1. */
static int masked_agreement(engine *e, const sample *sm, const uint8_t *mask, float *logits, int *agree) {
    const engine_info *in = engine_get_info(e);
    int n_ans = sm->n_seq - sm->n_prompt;
    if (engine_forward_logits(e, sm->seq, sm->n_seq - 1, mask, logits)) return -1;
    *agree = 0;
    for (int i = 0; i < n_ans; i++) {
        const float *row = logits + (size_t)(sm->n_prompt - 1 + i) * in->n_vocab;
        int best = 0;
        for (int v = 1; v < in->n_vocab; v++)
            if (row[v] > row[best]) best = v;
        *agree += best == sm->full_top1[i];
    }
    return 0;
}

static void full_mask(const engine_info *in, uint8_t *mask) {
    memset(mask, 0, ENGINE_MAX_LAYERS);
    memset(mask, 1, (size_t)in->n_layers);
}

/* Fits a logistic regression of Y (n values 0/1) on the standardised
 * features Z (n x PROBE_N_FEATURES) by full-batch gradient descent with
 * L2 regularisation; deterministic. */
static void fit_logistic(const float *z, const float *y, int n, float *w, float *b) {
    const double lr = 0.5, l2 = 1e-2;
    double wd[PROBE_N_FEATURES] = {0}, bd = 0;
    for (int it = 0; it < 3000; it++) {
        double gw[PROBE_N_FEATURES] = {0}, gb = 0;
        for (int i = 0; i < n; i++) {
            double a = bd;
            for (int f = 0; f < PROBE_N_FEATURES; f++) a += wd[f] * z[i * PROBE_N_FEATURES + f];
            double err = 1 / (1 + exp(-a)) - y[i];
            for (int f = 0; f < PROBE_N_FEATURES; f++) gw[f] += err * z[i * PROBE_N_FEATURES + f];
            gb += err;
        }
        for (int f = 0; f < PROBE_N_FEATURES; f++) wd[f] -= lr * (gw[f] / n + l2 * wd[f]);
        bd -= lr * gb / n;
    }
    for (int f = 0; f < PROBE_N_FEATURES; f++) w[f] = (float)wd[f];
    *b = (float)bd;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sets P->precision to the inverse covariance of the standardised features
 * Z (n x PROBE_N_FEATURES), with a small ridge so that a constant feature
 * or few prompts still give an inverse (Gauss-Jordan elimination with
 * partial pivoting), and P->d_max to the Mahalanobis distance that holds
 * 99% of them: the calibration range taken jointly, its outermost 1% of
 * prompts included in what runs at full depth. 0 or -1 (out of memory). */
static int fit_range(const float *z, int n, probe *p) {
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

/* xorshift shuffle of N indices with SEED. */
static void shuffle(int *idx, int n, unsigned long long seed) {
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

typedef struct {
    double agree_tokens, total_tokens, skipped, decided;
    int n, exact; /* prompts; of them with every answer token unchanged */
} split_score;

/* Runs the probe P on the samples IDX[0..n) and measures the skip rate and
 * teacher-forced agreement of its masks. Returns 0 or -1. */
static int score_probe(engine *e, const probe *p, sample *s, const int *idx, int n, float *logits, split_score *sc) {
    memset(sc, 0, sizeof *sc);
    for (int i = 0; i < n; i++) {
        sample *sm = &s[idx[i]];
        uint8_t mask[ENGINE_MAX_LAYERS] = {0};
        probe_decision d;
        probe_decide(p, sm->features, mask, &d);
        int n_ans = sm->n_seq - sm->n_prompt, agree = n_ans;
        if (d.n_skipped && masked_agreement(e, sm, mask, logits, &agree)) return -1;
        sc->agree_tokens += agree;
        sc->total_tokens += n_ans;
        sc->skipped += d.n_skipped;
        sc->decided += d.n_skipped > 0;
        sc->exact += agree == n_ans;
        sc->n++;
    }
    return 0;
}

/* A partial ranking in the beam search of rank_candidates. */
typedef struct {
    int order[ENGINE_MAX_LAYERS];  /* the candidates, the first `depth` of them ranked */
    int n_alive[ENGINE_MAX_LAYERS]; /* prompts within the target after each rank */
    long mass;                      /* sum over prompts of the ranks they survived */
    int usable;                     /* ranks at which SHARE of the prompts kept their answers */
    uint64_t removed;               /* bit c: candidate c is ranked */
    uint8_t *alive;                 /* per prompt: within the target so far */
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

/* Orders CAND[0..n_cand) from the first to the last layer to remove for
 * the prompts S[0..n) of one class: each prompt keeps its answer
 * (agreement >= TARGET of its answer tokens) for some prefix of the
 * ranking. Prompts of a class are alike to the probe, so what it can use
 * is the depth to which SHARE of the class keeps its answers: a beam
 * search (width BEAM) maximises that depth, then the total of all prompts'
 * prefixes (with SHARE 0 only the latter counts). Each removal set is
 * measured as a whole mask: layers harmless alone can be harmful together,
 * and the layer that keeps most answers at the first step may cost the
 * prompts that could have gone much further. A prompt that lost its answer
 * is not measured again. STEP_ALIVE[r] gets the share of prompts still
 * within the target with ranks 0..r removed. Deterministic; 0 or -1. */
static int rank_candidates(engine *e, sample *const *s, int n, double target, double share, int beam_width, int *cand,
                           int n_cand, float *logits, double *step_alive) {
    const engine_info *in = engine_get_info(e);
    int n_states = beam_width * (n_cand + 1), rc = -1, n_beam = 1;
    rank_state *beam = calloc((size_t)n_states, sizeof *beam), *next = beam + beam_width;
    int *by_score = malloc((size_t)n_states * sizeof *by_score);
    uint8_t *pool = malloc((size_t)n_states * (size_t)(n ? n : 1));
    if (!beam || !by_score || !pool) goto done;
    for (int i = 0; i < n_states; i++) beam[i].alive = pool + (size_t)i * n;
    memcpy(beam[0].order, cand, (size_t)n_cand * sizeof *cand);
    memset(beam[0].alive, 1, (size_t)n);
    for (int depth = 0; depth < n_cand; depth++) {
        int n_next = 0;
        for (int b = 0; b < n_beam; b++)
            for (int c = depth; c < n_cand; c++) {
                rank_state *t = &next[n_next];
                rank_state_copy(t, &beam[b], n);
                t->order[depth] = beam[b].order[c];
                t->order[c] = beam[b].order[depth];
                t->removed |= 1ull << (t->order[depth] - cand[0]);
                uint8_t mask[ENGINE_MAX_LAYERS];
                full_mask(in, mask);
                for (int r = 0; r <= depth; r++) mask[t->order[r]] = 0;
                t->n_alive[depth] = 0;
                for (int i = 0; i < n; i++) {
                    int agree, n_ans = s[i]->n_seq - s[i]->n_prompt;
                    if (!t->alive[i]) continue;
                    if (masked_agreement(e, s[i], mask, logits, &agree)) goto done;
                    t->alive[i] = agree >= target * n_ans - 1e-9;
                    t->n_alive[depth] += t->alive[i];
                }
                t->mass += t->n_alive[depth];
                t->usable += t->n_alive[depth] >= share * n - 1e-9;
                /* The same set reached in another order: keep the better. */
                int dup = -1;
                for (int j = 0; j < n_next && dup < 0; j++)
                    if (next[j].removed == t->removed) dup = j;
                if (dup < 0) n_next++;
                else if (rank_state_better(t, &next[dup])) rank_state_copy(&next[dup], t, n);
            }
        for (int a = 0; a < n_next; a++) { /* insertion sort, stable: deterministic */
            by_score[a] = a;
            for (int b = a; b > 0 && rank_state_better(&next[by_score[b]], &next[by_score[b - 1]]); b--) {
                int t = by_score[b];
                by_score[b] = by_score[b - 1];
                by_score[b - 1] = t;
            }
        }
        n_beam = n_next < beam_width ? n_next : beam_width;
        for (int b = 0; b < n_beam; b++) rank_state_copy(&beam[b], &next[by_score[b]], n);
    }
    memcpy(cand, beam[0].order, (size_t)n_cand * sizeof *cand);
    for (int r = 0; r < n_cand; r++) step_alive[r] = n ? (double)beam[0].n_alive[r] / n : 0;
    rc = 0;
done:
    free(beam);
    free(by_score);
    free(pool);
    return rc;
}

/* Scores the probe P on the calibration samples S[0..n_cal) class by class
 * (CLS[i] in 0..n_cls): the first class that misses TARGET agreement or
 * SHARE of its answers identical, n_cls when none does, -1 on error. *ALL
 * gets the totals. */
static int probe_missing_class(engine *e, const probe *p, sample *s, const int *cls, int n_cls, int n_cal,
                               double target, double share, float *logits, split_score *all) {
    int *idx = malloc((size_t)n_cal * sizeof *idx), missing = n_cls;
    if (!idx) return -1;
    memset(all, 0, sizeof *all);
    for (int j = 0; j < n_cls; j++) {
        int m = 0;
        split_score sc;
        for (int i = 0; i < n_cal; i++)
            if (cls[i] == j) idx[m++] = i;
        if (!m) continue;
        if (score_probe(e, p, s, idx, m, logits, &sc)) {
            free(idx);
            return -1;
        }
        if (missing == n_cls && !(sc.agree_tokens >= target * sc.total_tokens - 1e-9 && sc.exact >= share * sc.n - 1e-9))
            missing = j;
        all->agree_tokens += sc.agree_tokens;
        all->total_tokens += sc.total_tokens;
        all->skipped += sc.skipped;
        all->decided += sc.decided;
        all->n += sc.n;
        all->exact += sc.exact;
    }
    free(idx);
    return missing;
}

/* The name of class C among S[0..n) numbered by classes_number. */
static const char *class_name(const sample *s, const int *cls, int n, int c) {
    for (int i = 0; i < n; i++)
        if (cls[i] == c) return s[i].spec->cls;
    return "?";
}

/* Numbers the classes of S[0..n) in order of appearance into CLS; returns how many. */
static int classes_number(const sample *s, int n, int *cls) {
    int n_cls = 0;
    for (int i = 0; i < n; i++) {
        cls[i] = -1;
        for (int j = 0; j < i && cls[i] < 0; j++)
            if (!strcmp(s[j].spec->cls, s[i].spec->cls)) cls[i] = cls[j];
        if (cls[i] < 0) cls[i] = n_cls++;
    }
    return n_cls;
}

/* Ranks the candidates CAND[0..n_cand) for each of the N_CLS classes (CLS[i]
 * is the class of sample i) on its calibration samples S[0..n_cal) with
 * rank_candidates (each prompt within PROMPT_TARGET) into ORDERS and
 * STEP_ALIVE (each n_cls x n_cand); a class without calibration samples
 * keeps the layer order. DEPTH[c] gets the longest prefix of class c's
 * order that the class can drop as a whole: its answer tokens keep TARGET
 * agreement and SHARE of its answers stay identical. Prompts of a class
 * look alike to the probe, so the class, not the prompt, is the unit its
 * labels can follow. 0 or -1. */
static int rank_classes(engine *e, sample *s, const int *cls, int n_cls, int n_cal, double prompt_target, double target,
                        double share, int beam, const int *cand, int n_cand, float *logits, int *orders, double *step_alive,
                        int *depth) {
    const engine_info *in = engine_get_info(e);
    sample **sub = malloc((size_t)n_cal * sizeof *sub);
    if (!sub) return -1;
    for (int c = 0; c < n_cls; c++) {
        int m = 0, *ord = orders + c * n_cand;
        for (int i = 0; i < n_cal; i++)
            if (cls[i] == c) sub[m++] = &s[i];
        memcpy(ord, cand, (size_t)n_cand * sizeof *cand);
        depth[c] = 0;
        if (m && rank_candidates(e, sub, m, prompt_target, share, beam, ord, n_cand, logits, step_alive + c * n_cand))
            goto fail;
        for (int d = 1; m && d <= n_cand; d++) {
            uint8_t mask[ENGINE_MAX_LAYERS];
            long agree_sum = 0, tokens = 0;
            int exact = 0;
            full_mask(in, mask);
            for (int r = 0; r < d; r++) mask[ord[r]] = 0;
            for (int i = 0; i < m; i++) {
                int agree, n_ans = sub[i]->n_seq - sub[i]->n_prompt;
                if (masked_agreement(e, sub[i], mask, logits, &agree)) goto fail;
                agree_sum += agree;
                tokens += n_ans;
                exact += agree == n_ans;
            }
            if (agree_sum < target * tokens - 1e-9 || exact < share * m - 1e-9) break;
            depth[c] = d;
        }
    }
    free(sub);
    return 0;
fail:
    free(sub);
    return -1;
}

static int parse_probe_args(int argc, char **argv, probe_opts *o) {
    memset(o, 0, sizeof *o);
    o->target = 0.99f;
    o->floor = 0.4f;
    o->n_gen = 32;
    o->holdout = 0.25;
    o->seed = 1;
    o->beam = 8;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = strcmp(a, "--json") && strcmp(a, "-h");
        if (takes && !v) {
            fprintf(stderr, "ilpd: %s needs a value\n", a);
            return -1;
        }
        if (!strcmp(a, "-m")) o->model = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "-o")) o->out = v;
        else if (!strcmp(a, "--probe")) o->probe_path = v;
        else if (!strcmp(a, "--plot")) o->plot = v;
        else if (!strcmp(a, "--ppl-text")) o->ppl_text = v;
        else if (!strcmp(a, "--target-agreement")) o->target = strtof(v, NULL);
        else if (!strcmp(a, "--confidence-floor")) o->floor = strtof(v, NULL);
        else if (!strcmp(a, "--exact-share")) o->exact_share = strtof(v, NULL);
        else if (!strcmp(a, "-n")) o->n_gen = atoi(v);
        else if (!strcmp(a, "-t")) o->n_threads = atoi(v);
        else if (!strcmp(a, "-c")) o->ctx = atoi(v);
        else if (!strcmp(a, "--max-prompts")) o->max_prompts = atoi(v);
        else if (!strcmp(a, "--beam")) o->beam = atoi(v);
        else if (!strcmp(a, "-k")) o->k = atoi(v);
        else if (!strcmp(a, "--holdout")) o->holdout = strtod(v, NULL);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--json")) o->json = 1;
        else {
            fprintf(stderr, "ilpd: unknown option '%s'\n", a);
            return -1;
        }
        if (takes) i++;
    }
    if (!o->model || !o->data) {
        fprintf(stderr, "ilpd: -m MODEL and --data PROMPTS.jsonl are required\n");
        return -1;
    }
    if (!(o->target > 0 && o->target <= 1) || o->n_gen < 1 || !(o->holdout > 0 && o->holdout < 1) ||
        !(o->exact_share >= 0 && o->exact_share <= 1) || o->beam < 1 || o->beam > 64 || o->k < 0) {
        fprintf(stderr, "ilpd: --target-agreement in (0,1], --exact-share in [0,1], -n >= 1, --holdout in (0,1), --beam in 1..64, -k >= 1\n");
        return -1;
    }
    return 0;
}

static engine *probe_engine(const probe_opts *o, int with_probe) {
    engine_params p = {.model_path = o->model, .n_threads = o->n_threads, .n_ctx = o->ctx,
                       .device = ENGINE_DEVICE_CPU, .layer_skip = with_probe, .probe_path = with_probe ? o->probe_path : NULL,
                       .probe_k = o->k};
    char err[512];
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) fprintf(stderr, "ilpd: %s\n", err);
    return e;
}

int cli_calibrate(int argc, char **argv) {
    probe_opts o;
    if (parse_probe_args(argc, argv, &o)) return 2;
    if (!o.out) {
        fprintf(stderr, "ilpd: calibrate needs -o PROBE.json\n");
        return 2;
    }
    log_set_plain(1);
    prompt_spec *specs = NULL;
    int n_specs = specs_load(o.data, &specs), rc = 1, n = 0;
    if (n_specs < 4) {
        if (n_specs >= 0) fprintf(stderr, "ilpd: %s: calibration needs at least 4 prompts\n", o.data);
        specs_free(specs, n_specs > 0 ? n_specs : 0);
        return 1;
    }
    engine *e = probe_engine(&o, 0);
    sample *s = calloc((size_t)n_specs, sizeof *s);
    int *order = malloc((size_t)n_specs * sizeof *order);
    float *logits = NULL, *z = NULL, *y = NULL;
    double *step_alive = NULL;
    int *cls = NULL, *idx = NULL, *orders = NULL, *depth = NULL;
    probe pr;
    memset(&pr, 0, sizeof pr);
    if (!e || !s || !order) goto done;
    const engine_info *in = engine_get_info(e);
    int L = in->n_layers, k = in->probe_k;
    logits = malloc((size_t)in->n_ctx * in->n_vocab * sizeof *logits);
    if (!logits) goto done;
    shuffle(order, n_specs, o.seed);
    int n_use = o.max_prompts > 0 && o.max_prompts < n_specs ? o.max_prompts : n_specs;
    double t0 = now_s();
    for (int i = 0; i < n_use; i++)
        if (sample_measure(e, &specs[order[i]], o.n_gen, &s[n]) == 0) n++;
    if (n < 4) {
        fprintf(stderr, "ilpd: only %d prompts could be measured (too long for the context?)\n", n);
        goto done;
    }
    int n_hold = (int)(n * o.holdout + 0.5), n_cal = n - n_hold;
    if (n_hold < 1 || n_cal < 2) {
        fprintf(stderr, "ilpd: too few prompts for a calibration/holdout split\n");
        goto done;
    }
    fprintf(stderr, "calibrate: %d prompts (%d calibration, %d held out), %d layers, k=%d, %.1f s\n", n, n_cal, n_hold, L, k,
            now_s() - t0);

    /* Rank the candidates and find the depth of each class (see rank_classes). */
    int cand[ENGINE_MAX_LAYERS], n_cand = 0;
    for (int l = k; l < L - 1; l++) cand[n_cand++] = l;
    if (n_cand > PROBE_MAX_CANDIDATES) n_cand = PROBE_MAX_CANDIDATES;
    cls = malloc((size_t)n * sizeof *cls);
    if (!cls) goto done;
    int n_cls = classes_number(s, n, cls);
    orders = malloc((size_t)n_cls * (n_cand ? n_cand : 1) * sizeof *orders);
    step_alive = calloc((size_t)n_cls * (n_cand ? n_cand : 1), sizeof *step_alive);
    depth = calloc((size_t)n_cls, sizeof *depth);
    if (!orders || !step_alive || !depth) goto done;
    if (rank_classes(e, s, cls, n_cls, n_cal, o.exact_share > 0 ? 1.0 : o.target, o.target, o.exact_share, o.beam, cand,
                     n_cand, logits, orders, step_alive, depth))
        goto done;
    for (int c = 0; c < n_cls; c++) {
        fprintf(stderr, "calibrate: class %s: ranking (layer: share of calibration answers within the target with it and "
                        "all before it removed):", class_name(s, cls, n, c));
        for (int r = 0; r < n_cand; r++) fprintf(stderr, " %d:%.3f", orders[c * n_cand + r], step_alive[c * n_cand + r]);
        fprintf(stderr, "; the class keeps the target with the first %d of %d removed  (%.1f s)\n", depth[c], n_cand,
                now_s() - t0);
    }

    /* Standardise the features on the calibration split and fit one
     * logistic regression per candidate: P(the layer is among those the
     * prompt's class drops). */
    snprintf(pr.model_sha256, sizeof pr.model_sha256, "%s", engine_model_sha256(e) ? engine_model_sha256(e) : "");
    pr.n_layers = L;
    pr.k = k;
    pr.n_cand = n_cand;
    pr.floor = o.floor;
    pr.z_max = 4;
    for (int f = 0; f < PROBE_N_FEATURES; f++) {
        double m = 0, v = 0;
        for (int i = 0; i < n_cal; i++) m += s[i].features[f];
        m /= n_cal;
        for (int i = 0; i < n_cal; i++) v += (s[i].features[f] - m) * (s[i].features[f] - m);
        pr.mean[f] = (float)m;
        pr.std[f] = (float)(sqrt(v / n_cal) > 1e-6 ? sqrt(v / n_cal) : 1e-6);
    }
    z = malloc((size_t)n_cal * PROBE_N_FEATURES * sizeof *z);
    y = malloc((size_t)n_cal * sizeof *y);
    if (!z || !y) goto done;
    for (int i = 0; i < n_cal; i++)
        for (int f = 0; f < PROBE_N_FEATURES; f++) z[i * PROBE_N_FEATURES + f] = (s[i].features[f] - pr.mean[f]) / pr.std[f];
    if (fit_range(z, n_cal, &pr)) goto done;
    for (int c = 0; c < n_cand; c++) {
        pr.cand[c] = cand[c];
        for (int i = 0; i < n_cal; i++) {
            const int *ord = orders + cls[i] * n_cand;
            y[i] = 0;
            for (int r = 0; r < depth[cls[i]]; r++) y[i] += ord[r] == cand[c];
        }
        fit_logistic(z, y, n_cal, pr.w[c], &pr.b[c]);
    }

    /* Pick the threshold that skips most while every class of the
     * calibration split keeps the target agreement (and, with
     * --exact-share, that share of its answers identical); none at all
     * (threshold 0) when none does. */
    static const float thresholds[] = {0.9f, 0.8f, 0.7f, 0.6f, 0.5f, 0.45f, 0.4f, 0.35f, 0.3f, 0.25f,
                                       0.2f, 0.175f, 0.15f, 0.125f, 0.1f, 0.075f, 0.05f, 0.02f};
    idx = malloc((size_t)n * sizeof *idx);
    if (!idx) goto done;
    for (int i = 0; i < n; i++) idx[i] = i;
    split_score cal = {0}, hold = {0};
    pr.threshold = 0;
    for (size_t t = 0; t < sizeof thresholds / sizeof *thresholds; t++) {
        pr.threshold = thresholds[t];
        int missing = probe_missing_class(e, &pr, s, cls, n_cls, n_cal, o.target, o.exact_share, logits, &cal);
        if (missing < 0) goto done;
        fprintf(stderr,
                "calibrate: threshold %.2f: calibration agreement %.4f, %.1f%% answers identical, %.2f layers skipped per prompt%s%s\n",
                pr.threshold, cal.agree_tokens / cal.total_tokens, 100.0 * cal.exact / cal.n, cal.skipped / cal.n,
                missing < n_cls ? "; misses the target on class " : "", missing < n_cls ? class_name(s, cls, n, missing) : "");
        if (missing == n_cls) break;
        pr.threshold = 0;
    }
    if (pr.threshold == 0 && score_probe(e, &pr, s, idx, n_cal, logits, &cal)) goto done;
    if (score_probe(e, &pr, s, idx + n_cal, n_hold, logits, &hold)) goto done;
    double cal_skip = n_cand ? cal.skipped / cal.n / n_cand : 0, hold_skip = n_cand ? hold.skipped / hold.n / n_cand : 0;
    printf("skip rate (of %d candidate layers): calibration %.1f%%, held out %.1f%%\n", n_cand, 100 * cal_skip,
           100 * hold_skip);
    printf("greedy agreement with full depth:   calibration %.2f%%, held out %.2f%%\n",
           100 * cal.agree_tokens / cal.total_tokens, 100 * hold.agree_tokens / hold.total_tokens);
    printf("answers identical to full depth:    calibration %.1f%%, held out %.1f%%\n", 100.0 * cal.exact / cal.n,
           100.0 * hold.exact / hold.n);
    printf("threshold %.2f, confidence floor %.2f, k=%d, %d parameters\n", pr.threshold, pr.floor, k,
           n_cand * (PROBE_N_FEATURES + 1));

    cJSON *m = cJSON_CreateObject();
    if (!m) goto done;
    cJSON_AddStringToObject(m, "data", o.data);
    cJSON_AddNumberToObject(m, "seed", (double)o.seed);
    cJSON_AddNumberToObject(m, "target_agreement", o.target);
    cJSON_AddNumberToObject(m, "exact_share", o.exact_share);
    cJSON_AddNumberToObject(m, "identical_answers_calibration", (double)cal.exact / cal.n);
    cJSON_AddNumberToObject(m, "identical_answers_held_out", (double)hold.exact / hold.n);
    cJSON_AddNumberToObject(m, "answer_tokens", o.n_gen);
    cJSON_AddNumberToObject(m, "prompts_calibration", n_cal);
    cJSON_AddNumberToObject(m, "prompts_held_out", n_hold);
    cJSON_AddNumberToObject(m, "skip_rate_calibration", cal_skip);
    cJSON_AddNumberToObject(m, "skip_rate_held_out", hold_skip);
    cJSON_AddNumberToObject(m, "agreement_calibration", cal.agree_tokens / cal.total_tokens);
    cJSON_AddNumberToObject(m, "agreement_held_out", hold.agree_tokens / hold.total_tokens);
    cJSON *ranks = cJSON_AddArrayToObject(m, "rankings");
    for (int c = 0; ranks && c < n_cls; c++) {
        cJSON *r = cJSON_CreateObject();
        if (!r) break;
        cJSON_AddItemToArray(ranks, r);
        cJSON_AddStringToObject(r, "class", class_name(s, cls, n, c));
        cJSON_AddNumberToObject(r, "removed_within_target", depth[c]);
        cJSON *layers = cJSON_AddArrayToObject(r, "layers"),
              *alive = cJSON_AddArrayToObject(r, "within_target_removed_with_previous");
        for (int j = 0; layers && alive && j < n_cand; j++) {
            cJSON_AddItemToArray(layers, cJSON_CreateNumber(orders[c * n_cand + j]));
            cJSON_AddItemToArray(alive, cJSON_CreateNumber(step_alive[c * n_cand + j]));
        }
    }
    pr.metrics_json = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    char err[512];
    if (!pr.metrics_json || probe_save(&pr, o.out, err, sizeof err)) {
        fprintf(stderr, "ilpd: %s\n", pr.metrics_json ? err : "out of memory");
        goto done;
    }
    fprintf(stderr, "calibrate: wrote %s (%.1f s)\n", o.out, now_s() - t0);
    rc = 0;
done:
    for (int i = 0; i < n; i++) sample_free(&s[i]);
    free(s);
    free(order);
    free(logits);
    free(z);
    free(y);
    free(step_alive);
    free(orders);
    free(depth);
    free(cls);
    free(idx);
    probe_free(&pr);
    engine_close(e);
    specs_free(specs, n_specs);
    return rc;
}

typedef struct {
    char *text;
    size_t len, cap;
} text_buf;

static int collect_text(void *ud, const char *t, size_t n) {
    text_buf *b = ud;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->text, cap);
        if (!p) return 1;
        b->text = p;
        b->cap = cap;
    }
    memcpy(b->text + b->len, t, n);
    b->len += n;
    b->text[b->len] = 0;
    return 0;
}

typedef struct {
    id_list ids;
    text_buf text;
} answer;

static int answer_token(void *ud, int32_t id) { return collect_id(&((answer *)ud)->ids, id); }
static int answer_text(void *ud, const char *t, size_t n) { return collect_text(&((answer *)ud)->text, t, n); }

/* One greedy generation; FORCED: a mask, or NULL to let the probe decide. */
static int run_answer(engine *e, const int32_t *prompt, int n, int n_gen, const uint8_t *forced, answer *a,
                      engine_result *res) {
    memset(a, 0, sizeof *a);
    a->ids.ids = malloc((size_t)n_gen * sizeof *a->ids.ids);
    if (!a->ids.ids) return -1;
    a->ids.cap = n_gen;
    engine_gen_params gp = {.max_tokens = n_gen, .temperature = 0, .top_p = 1, .layer_mask = forced};
    engine_callbacks cb = {.on_token = answer_token, .on_text = answer_text, .ud = a};
    engine_generate(e, prompt, n, &gp, &cb, res);
    if (res->reason == ENGINE_STOP_ERROR) return -1;
    return 0;
}

static double gen_tok_s(const engine_result *r) {
    double ms = r->total_ms - r->ttft_ms;
    return r->n_generated > 1 && ms > 0 ? (r->n_generated - 1) / (ms / 1e3) : 0;
}

typedef struct {
    char cls[64];
    int n, exact;
    double agree, total, skipped, tok_s_full, tok_s_probe, ttft_full, ttft_probe, kv_full, kv_probe;
} class_sum;

static class_sum *class_get(class_sum *c, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (!strcmp(c[i].cls, name)) return &c[i];
    if (*n == 64) return &c[63];
    memset(&c[*n], 0, sizeof *c);
    snprintf(c[*n].cls, sizeof c[*n].cls, "%s", name);
    return &c[(*n)++];
}

/* Mean negative log-likelihood of TOKENS[from..n) under MASK. */
static int nll(engine *e, const int32_t *tok, int n, int from, const uint8_t *mask, float *logits, double *out) {
    const engine_info *in = engine_get_info(e);
    if (engine_forward_logits(e, tok, n, mask, logits)) return -1;
    double sum = 0;
    for (int i = from; i < n; i++) {
        const float *row = logits + (size_t)(i - 1) * in->n_vocab;
        double mx = row[0], z = 0;
        for (int v = 1; v < in->n_vocab; v++)
            if (row[v] > mx) mx = row[v];
        for (int v = 0; v < in->n_vocab; v++) z += exp(row[v] - mx);
        sum += -(row[tok[i]] - mx - log(z));
    }
    *out = sum / (n - from);
    return 0;
}

/* Perplexity of the text file at full depth and under the probe's masks:
 * 128-token chunks, the probe deciding on each chunk's first 32 tokens. */
static int perplexity(engine *e, const char *path, double *ppl_full, double *ppl_probe, int *chunks) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *text = malloc(1 << 20);
    size_t len = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    if (!text) return -1;
    text[len] = 0;
    int32_t *tok = NULL;
    int n = engine_tokenize(e, text, 0, &tok), rc = -1;
    free(text);
    const engine_info *in = engine_get_info(e);
    float *logits = malloc((size_t)128 * in->n_vocab * sizeof *logits);
    double sf = 0, sp = 0;
    *chunks = 0;
    if (n < 0 || !logits) goto done;
    for (int at = 0; at + 128 <= n && *chunks < 64; at += 128) {
        uint8_t full[ENGINE_MAX_LAYERS], mask[ENGINE_MAX_LAYERS];
        double a, b;
        full_mask(in, full);
        if (engine_probe_mask(e, tok + at, 32, mask, NULL) < 0 || nll(e, tok + at, 128, 32, full, logits, &a) ||
            nll(e, tok + at, 128, 32, mask, logits, &b))
            goto done;
        sf += a;
        sp += b;
        (*chunks)++;
    }
    *ppl_full = *chunks ? exp(sf / *chunks) : 0;
    *ppl_probe = *chunks ? exp(sp / *chunks) : 0;
    rc = 0;
done:
    free(tok);
    free(logits);
    return rc;
}

static void mask_string(const uint8_t *mask, int n, char *out) {
    for (int i = 0; i < n; i++) out[i] = mask[i] ? '1' : '0';
    out[n] = 0;
}

int cli_eval(int argc, char **argv) {
    probe_opts o;
    if (parse_probe_args(argc, argv, &o)) return 2;
    log_set_plain(1);
    prompt_spec *specs = NULL;
    int n_specs = specs_load(o.data, &specs), rc = 1;
    if (n_specs < 1) {
        specs_free(specs, n_specs > 0 ? n_specs : 0);
        return 1;
    }
    int n_use = o.max_prompts > 0 && o.max_prompts < n_specs ? o.max_prompts : n_specs; /* the first ones */
    engine *e = probe_engine(&o, 1);
    cJSON *root = cJSON_CreateObject(), *rows = root ? cJSON_AddArrayToObject(root, "prompts") : NULL;
    float *logits = NULL;
    class_sum classes[64];
    int n_classes = 0;
    if (!e || !rows) goto done;
    const engine_info *in = engine_get_info(e);
    if (!in->probe_loaded) fprintf(stderr, "eval: no probe matches this model: the probe runs are at full depth\n");
    logits = malloc((size_t)in->n_ctx * in->n_vocab * sizeof *logits);
    if (!logits) goto done;
    if (!o.json)
        printf("%-4s %-10s %8s %8s %6s %9s %9s %8s %8s\n", "#", "class", "skipped", "agree", "exact", "tok/s full",
               "tok/s probe", "kv full", "kv probe");
    for (int i = 0; i < n_use; i++) {
        int32_t *prompt = NULL;
        int n = spec_tokens(e, &specs[i], &prompt);
        answer full, pa;
        engine_result rf, rp;
        uint8_t fm[ENGINE_MAX_LAYERS];
        full_mask(in, fm);
        memset(&full, 0, sizeof full);
        memset(&pa, 0, sizeof pa);
        if (n < 1 || n + o.n_gen >= in->n_ctx || run_answer(e, prompt, n, o.n_gen, fm, &full, &rf) ||
            run_answer(e, prompt, n, o.n_gen, NULL, &pa, &rp)) {
            fprintf(stderr, "eval: prompt %d skipped (too long or failed)\n", i);
            goto next;
        }
        sample sm = {.seq = NULL, .n_prompt = n, .n_seq = n + full.ids.n, .full_top1 = full.ids.ids};
        sm.seq = malloc((size_t)sm.n_seq * sizeof *sm.seq);
        int agree = full.ids.n;
        if (!sm.seq) goto next;
        memcpy(sm.seq, prompt, (size_t)n * sizeof *prompt);
        memcpy(sm.seq + n, full.ids.ids, (size_t)full.ids.n * sizeof *full.ids.ids);
        if (rp.n_skipped && masked_agreement(e, &sm, rp.mask, logits, &agree)) agree = -1;
        free(sm.seq);
        if (agree < 0) goto next;
        int exact = (full.text.len == pa.text.len) && (!full.text.len || !memcmp(full.text.text, pa.text.text, full.text.len));
        class_sum *c = class_get(classes, &n_classes, specs[i].cls);
        c->n++;
        c->exact += exact;
        c->agree += agree;
        c->total += full.ids.n;
        c->skipped += rp.n_skipped;
        c->tok_s_full += gen_tok_s(&rf);
        c->tok_s_probe += gen_tok_s(&rp);
        c->ttft_full += rf.ttft_ms;
        c->ttft_probe += rp.ttft_ms;
        c->kv_full += (double)rf.kv_bytes;
        c->kv_probe += (double)rp.kv_bytes;
        char ms[ENGINE_MAX_LAYERS + 1];
        mask_string(rp.mask, in->n_layers, ms);
        cJSON *r = cJSON_CreateObject();
        if (r) {
            cJSON_AddNumberToObject(r, "index", i);
            cJSON_AddStringToObject(r, "class", specs[i].cls);
            cJSON_AddStringToObject(r, "layer_status", engine_layer_status_name(rp.layer_status));
            cJSON_AddStringToObject(r, "mask", ms);
            cJSON_AddNumberToObject(r, "layers_skipped", rp.n_skipped);
            cJSON_AddNumberToObject(r, "confidence", rp.probe_confidence);
            cJSON_AddNumberToObject(r, "agreement", full.ids.n ? (double)agree / full.ids.n : 1);
            cJSON_AddBoolToObject(r, "exact_match", exact);
            cJSON_AddNumberToObject(r, "tok_s_full", gen_tok_s(&rf));
            cJSON_AddNumberToObject(r, "tok_s_probe", gen_tok_s(&rp));
            cJSON_AddNumberToObject(r, "ttft_ms_full", rf.ttft_ms);
            cJSON_AddNumberToObject(r, "ttft_ms_probe", rp.ttft_ms);
            cJSON_AddNumberToObject(r, "kv_bytes_full", (double)rf.kv_bytes);
            cJSON_AddNumberToObject(r, "kv_bytes_probe", (double)rp.kv_bytes);
            cJSON_AddStringToObject(r, "answer_full", full.text.text ? full.text.text : "");
            cJSON_AddStringToObject(r, "answer_probe", pa.text.text ? pa.text.text : "");
            cJSON_AddItemToArray(rows, r);
        }
        if (!o.json)
            printf("%-4d %-10.10s %8d %7.2f%% %6s %9.1f %9.1f %8zu %8zu\n", i, specs[i].cls, rp.n_skipped,
                   full.ids.n ? 100.0 * agree / full.ids.n : 100.0, exact ? "yes" : "no", gen_tok_s(&rf), gen_tok_s(&rp),
                   rf.kv_bytes, rp.kv_bytes);
    next:
        free(prompt);
        free(full.ids.ids);
        free(full.text.text);
        free(pa.ids.ids);
        free(pa.text.text);
    }
    cJSON *cls = cJSON_AddObjectToObject(root, "classes");
    class_sum tot = {.cls = "total"};
    for (int c = 0; c <= n_classes; c++) {
        class_sum *x = c < n_classes ? &classes[c] : &tot;
        if (c < n_classes) {
            tot.n += x->n;
            tot.exact += x->exact;
            tot.agree += x->agree;
            tot.total += x->total;
            tot.skipped += x->skipped;
            tot.tok_s_full += x->tok_s_full;
            tot.tok_s_probe += x->tok_s_probe;
            tot.ttft_full += x->ttft_full;
            tot.ttft_probe += x->ttft_probe;
            tot.kv_full += x->kv_full;
            tot.kv_probe += x->kv_probe;
        }
        if (!x->n) continue;
        int cand = in->n_layers - in->probe_k - 1;
        cJSON *j = cJSON_CreateObject();
        if (!j) continue;
        cJSON_AddNumberToObject(j, "prompts", x->n);
        cJSON_AddNumberToObject(j, "skip_rate", cand > 0 ? x->skipped / x->n / cand : 0);
        cJSON_AddNumberToObject(j, "layers_skipped_mean", x->skipped / x->n);
        cJSON_AddNumberToObject(j, "agreement", x->total ? x->agree / x->total : 1);
        cJSON_AddNumberToObject(j, "exact_match", (double)x->exact / x->n);
        cJSON_AddNumberToObject(j, "tok_s_full", x->tok_s_full / x->n);
        cJSON_AddNumberToObject(j, "tok_s_probe", x->tok_s_probe / x->n);
        cJSON_AddNumberToObject(j, "ttft_ms_full", x->ttft_full / x->n);
        cJSON_AddNumberToObject(j, "ttft_ms_probe", x->ttft_probe / x->n);
        cJSON_AddNumberToObject(j, "kv_bytes_full", x->kv_full / x->n);
        cJSON_AddNumberToObject(j, "kv_bytes_probe", x->kv_probe / x->n);
        cJSON_AddItemToObject(cls, x->cls, j);
        if (!o.json)
            printf("%-10s prompts %3d  skip rate %5.1f%% (%.2f layers)  agreement %6.2f%%  exact %5.1f%%  tok/s %.1f -> %.1f  "
                   "ttft %.1f -> %.1f ms  KV %.0f -> %.0f bytes\n",
                   x->cls, x->n, cand > 0 ? 100 * x->skipped / x->n / cand : 0, x->skipped / x->n,
                   x->total ? 100 * x->agree / x->total : 100, 100.0 * x->exact / x->n, x->tok_s_full / x->n,
                   x->tok_s_probe / x->n, x->ttft_full / x->n, x->ttft_probe / x->n, x->kv_full / x->n, x->kv_probe / x->n);
    }
    if (o.ppl_text) {
        double pf, pp;
        int chunks;
        if (perplexity(e, o.ppl_text, &pf, &pp, &chunks)) {
            fprintf(stderr, "ilpd: %s: cannot compute perplexity\n", o.ppl_text);
            goto done;
        }
        cJSON *p = cJSON_AddObjectToObject(root, "perplexity");
        if (p) {
            cJSON_AddStringToObject(p, "text", o.ppl_text);
            cJSON_AddNumberToObject(p, "chunks", chunks);
            cJSON_AddNumberToObject(p, "full", pf);
            cJSON_AddNumberToObject(p, "probe", pp);
        }
        if (!o.json) printf("perplexity of %s (%d chunks of 128 tokens): full %.3f, probe %.3f\n", o.ppl_text, chunks, pf, pp);
    }
    char *js = cJSON_Print(root);
    if (!js) goto done;
    if (o.json) printf("%s\n", js);
    if (o.plot) {
        char tmp[] = "/tmp/ilpd-eval-XXXXXX";
        int fd = mkstemp(tmp);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        int ok = f && fputs(js, f) >= 0;
        if (f) fclose(f);
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "/usr/bin/python3 scripts/plot_eval.py '%s' '%s'", tmp, o.plot);
        if (!ok || system(cmd) != 0) fprintf(stderr, "ilpd: plotting to %s failed (python3-matplotlib?)\n", o.plot);
        unlink(tmp);
    }
    free(js);
    rc = 0;
done:
    cJSON_Delete(root);
    free(logits);
    engine_close(e);
    specs_free(specs, n_specs);
    return rc;
}
