/* measure.c - the options, prompt file and engine-dependent measuring that
 * `ilpd calibrate` and `ilpd eval` share (see measure.h). */
#include "server/cli/measure.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/cli/cli.h"

void measure_prompts_free(prompt_spec *p, int n) {
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

int measure_prompts_load(const char *path, prompt_spec **out) {
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
    if (rc < 0) measure_prompts_free(p, n);
    else *out = p;
    return rc;
}

int measure_prompt_tokens(engine *e, const prompt_spec *s, int32_t **tok) {
    char err[256];
    if (s->raw) return engine_tokenize(e, s->raw, 1, tok);
    engine_message msg = {.role = ENGINE_ROLE_USER, .text = s->user};
    return engine_prompt_build(e, s->system, NULL, &msg, 1, 0, tok, err, sizeof err);
}

int measure_id_collect(void *ud, int32_t id) {
    id_list *l = ud;
    if (l->n < l->cap) l->ids[l->n++] = id;
    return 0;
}

int measure_sample_take(engine *e, const prompt_spec *spec, int n_gen, sample *sm) {
    const engine_info *in = engine_get_info(e);
    int32_t *prompt = NULL;
    float *logits = NULL;
    memset(sm, 0, sizeof *sm);
    sm->spec = spec;
    int n = measure_prompt_tokens(e, spec, &prompt);
    if (n < 1 || n + n_gen >= in->n_ctx) goto fail;
    sm->seq = malloc((size_t)(n + n_gen) * sizeof *sm->seq);
    if (!sm->seq) goto fail;
    memcpy(sm->seq, prompt, (size_t)n * sizeof *prompt);
    id_list ids = {sm->seq + n, 0, n_gen};
    uint8_t full[MASK_MAX_LAYERS];
    memset(full, 1, sizeof full);
    engine_gen_params gp = {.max_tokens = n_gen, .temperature = 0, .top_p = 1, .layer_mask = full};
    engine_callbacks cb = {.on_token = measure_id_collect, .ud = &ids};
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

void measure_sample_free(sample *sm) {
    free(sm->seq);
    free(sm->full_top1);
}

int measure_agreement(engine *e, const sample *sm, const uint8_t *mask, float *logits, int *agree) {
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

void measure_mask_full(const engine_info *in, uint8_t *mask) {
    memset(mask, 0, MASK_MAX_LAYERS);
    memset(mask, 1, (size_t)in->n_layers);
}

int measure_opts_parse(int argc, char **argv, probe_opts *o) {
    memset(o, 0, sizeof *o);
    o->target = 0.99f;
    o->floor = 0.4f;
    o->n_gen = 32;
    o->holdout = 0.25;
    o->seed = 1;
    o->beam = 8;
    o->gate = ENGINE_GATE_MARGIN;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (cli_is_help(a)) return 1;
        int takes = strcmp(a, "--json") != 0 && strcmp(a, "--draft-always") != 0 && strcmp(a, "--no-draft-cache") != 0;
        if (takes && !v) {
            fprintf(stderr, "ilpd: %s needs a value\n", a);
            return -1;
        }
        if (!strcmp(a, "-m")) o->model = v;
        else if (!strcmp(a, "--data")) o->data = v;
        else if (!strcmp(a, "-o")) o->out = v;
        else if (!strcmp(a, "--probe")) o->probe_path = v;
        else if (!strcmp(a, "--ppl-text")) o->ppl_text = v;
        else if (!strcmp(a, "--target-agreement")) o->target = strtof(v, NULL);
        else if (!strcmp(a, "--confidence-floor")) o->floor = strtof(v, NULL);
        else if (!strcmp(a, "--exact-share")) o->exact_share = strtof(v, NULL);
        else if (!strcmp(a, "--gate")) o->gate = strtof(v, NULL);
        else if (!strcmp(a, "-n")) o->n_gen = atoi(v);
        else if (!strcmp(a, "-t")) o->n_threads = atoi(v);
        else if (!strcmp(a, "-c")) o->ctx = atoi(v);
        else if (!strcmp(a, "--max-prompts")) o->max_prompts = atoi(v);
        else if (!strcmp(a, "--beam")) o->beam = atoi(v);
        else if (!strcmp(a, "-k")) o->k = atoi(v);
        else if (!strcmp(a, "--holdout")) o->holdout = strtod(v, NULL);
        else if (!strcmp(a, "--seed")) o->seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--draft-always")) o->draft_always = 1;
        else if (!strcmp(a, "--no-draft-cache")) o->no_draft_cache = 1;
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

engine *measure_engine_open(const probe_opts *o, int with_probe) {
    engine_params p = {.model_path = o->model, .n_threads = o->n_threads, .n_ctx = o->ctx,
                       .device = ENGINE_DEVICE_CPU, .layer_skip = with_probe, .probe_path = with_probe ? o->probe_path : NULL,
                       .probe_k = o->k, .spec_always = o->draft_always,
                       .draft_cache_tokens = o->no_draft_cache ? 0 : 65536};
    char err[512];
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) fprintf(stderr, "ilpd: %s\n", err);
    return e;
}
