/* eval.c - `ilpd eval`: runs every prompt at full depth (mode off), with the
 * probe (approximate mode) and in lossless mode, and reports, per prompt and
 * per prompt class, the layers skipped, greedy token agreement, whole answers
 * kept, tok/s, time to first token, KV bytes, for lossless mode the answers
 * identical to full depth (all of them, or it is a bug), the share of
 * drafted tokens kept, tokens per verification and its speed against off,
 * and perplexity on a text. `--json` writes the numbers for
 * scripts/model/plot_eval.py. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/log.h"
#include "server/cli/cli.h"
#include "server/cli/measure.h"

const char cli_eval_usage[] =
    "  ilpd eval     -m MODEL --data PROMPTS.jsonl [--probe PROBE.json] [-n N] [--json] [--ppl-text FILE]\n"
    "                [-t THREADS] [-c CTX] [--max-prompts N] [--draft-always] [--no-draft-cache] [--gate 1.0]\n"
    "                (--gate: approximate mode's gate margin, 0 for none;\n"
    "                 --draft-always: lossless mode drafts whenever it can, not only when its cost model expects a gain;\n"
    "                 --no-draft-cache: no drafts from the answers to earlier prompts, which lossless mode keeps\n"
    "                 otherwise, as the server does; the full-depth and approximate answers are never kept)\n";

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

static int answer_token(void *ud, int32_t id) { return measure_id_collect(&((answer *)ud)->ids, id); }
static int answer_text(void *ud, const char *t, size_t n) { return collect_text(&((answer *)ud)->text, t, n); }

/* One greedy generation in MODE (approximate mode with the gate margin
 * GATE); FORCED: a mask, or NULL to let the probe decide. */
static int run_answer(engine *e, const int32_t *prompt, int n, int n_gen, const uint8_t *forced, engine_skip_mode mode,
                      float gate, answer *a, engine_result *res) {
    memset(a, 0, sizeof *a);
    a->ids.ids = malloc((size_t)n_gen * sizeof *a->ids.ids);
    if (!a->ids.ids) return -1;
    a->ids.cap = n_gen;
    engine_gen_params gp = {.max_tokens = n_gen, .temperature = 0, .top_p = 1, .layer_mask = forced, .skip_mode = mode,
                            .lookup_off = mode != ENGINE_SKIP_LOSSLESS, .gate_margin = gate};
    engine_callbacks cb = {.on_token = answer_token, .on_text = answer_text, .ud = a};
    engine_generate(e, prompt, n, &gp, &cb, res);
    if (res->reason == ENGINE_STOP_ERROR) return -1;
    return 0;
}

static double gen_tok_s(const engine_result *r) {
    double ms = r->last_token_ms - r->ttft_ms;
    return r->n_generated > 1 && ms > 0 ? (r->n_generated - 1) / (ms / 1e3) : 0;
}

typedef struct {
    char cls[64];
    int n, exact, gated;                   /* gated: approximate answers the gate sent to full depth */
    double agree, total, skipped, tok_s_full, tok_s_probe, ttft_full, ttft_probe, kv_full, kv_probe;
    int ll_exact;                          /* lossless answers identical to full depth */
    double ll_tok_s, ll_drafted, ll_accepted, ll_verifications;
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
    char *text = cli_read_file(path, (1 << 20) - 1);
    if (!text) return -1;
    int32_t *tok = NULL;
    int n = engine_tokenize(e, text, 0, &tok), rc = -1;
    free(text);
    const engine_info *in = engine_get_info(e);
    float *logits = malloc((size_t)128 * in->n_vocab * sizeof *logits);
    double sf = 0, sp = 0;
    *chunks = 0;
    if (n < 0 || !logits) goto done;
    for (int at = 0; at + 128 <= n && *chunks < 64; at += 128) {
        uint8_t full[MASK_MAX_LAYERS], mask[MASK_MAX_LAYERS];
        double a, b;
        measure_mask_full(in, full);
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

/* Runs prompt I (SPEC) at full depth and with the probe: adds it to its
 * class in CLASSES (*N_CLASSES of them), a row to ROWS and, without --json,
 * a line on stdout. A prompt too long for the context, or that fails, is
 * left out with a message. LOGITS: n_ctx x n_vocab scratch. */
static void eval_prompt(engine *e, const probe_opts *o, const prompt_spec *spec, int i, float *logits, class_sum *classes,
                        int *n_classes, cJSON *rows) {
    const engine_info *in = engine_get_info(e);
    int32_t *prompt = NULL;
    int n = measure_prompt_tokens(e, spec, &prompt);
    answer full, pa, la;
    engine_result rf, rp, rl;
    memset(&full, 0, sizeof full);
    memset(&pa, 0, sizeof pa);
    memset(&la, 0, sizeof la);
    /* the first run of a prompt is a little slower than the next ones (fresh
     * pages for its buffers): odd prompts run lossless first, even ones off */
    int ll_first = i % 2;
    if (n < 1 || n + o->n_gen >= in->n_ctx ||
        (ll_first && run_answer(e, prompt, n, o->n_gen, NULL, ENGINE_SKIP_LOSSLESS, 0, &la, &rl)) ||
        run_answer(e, prompt, n, o->n_gen, NULL, ENGINE_SKIP_OFF, 0, &full, &rf) ||
        run_answer(e, prompt, n, o->n_gen, NULL, ENGINE_SKIP_APPROXIMATE, o->gate, &pa, &rp) ||
        (!ll_first && run_answer(e, prompt, n, o->n_gen, NULL, ENGINE_SKIP_LOSSLESS, 0, &la, &rl))) {
        fprintf(stderr, "eval: prompt %d skipped (too long or failed)\n", i);
        goto done;
    }
    sample sm = {.seq = NULL, .n_prompt = n, .n_seq = n + full.ids.n, .full_top1 = full.ids.ids};
    sm.seq = malloc((size_t)sm.n_seq * sizeof *sm.seq);
    int agree = full.ids.n;
    if (!sm.seq) goto done;
    memcpy(sm.seq, prompt, (size_t)n * sizeof *prompt);
    memcpy(sm.seq + n, full.ids.ids, (size_t)full.ids.n * sizeof *full.ids.ids);
    if (rp.n_skipped && measure_agreement(e, &sm, rp.mask, logits, &agree)) agree = -1;
    free(sm.seq);
    if (agree < 0) goto done;
    int exact = (full.text.len == pa.text.len) && (!full.text.len || !memcmp(full.text.text, pa.text.text, full.text.len));
    int ll_exact = full.text.len == la.text.len && (!full.text.len || !memcmp(full.text.text, la.text.text, full.text.len)) &&
                   full.ids.n == la.ids.n && !memcmp(full.ids.ids, la.ids.ids, (size_t)full.ids.n * sizeof *full.ids.ids);
    class_sum *c = class_get(classes, n_classes, spec->cls);
    c->n++;
    c->exact += exact;
    c->ll_exact += ll_exact;
    c->ll_tok_s += gen_tok_s(&rl);
    c->ll_drafted += rl.n_drafted;
    c->ll_accepted += rl.n_accepted;
    c->ll_verifications += rl.n_verifications;
    c->agree += agree;
    c->total += full.ids.n;
    /* a gated answer skipped its layers for the tokens before the gate only */
    c->skipped += rp.gated_at >= 0 && rp.n_generated ? rp.n_skipped * (double)rp.gated_at / rp.n_generated : rp.n_skipped;
    c->gated += rp.gated_at >= 0;
    c->tok_s_full += gen_tok_s(&rf);
    c->tok_s_probe += gen_tok_s(&rp);
    c->ttft_full += rf.ttft_ms;
    c->ttft_probe += rp.ttft_ms;
    c->kv_full += (double)rf.kv_bytes;
    c->kv_probe += (double)rp.kv_bytes;
    char ms[MASK_MAX_LAYERS + 1];
    mask_string(rp.mask, in->n_layers, ms);
    cJSON *r = cJSON_CreateObject();
    if (r) {
        cJSON_AddNumberToObject(r, "index", i);
        cJSON_AddStringToObject(r, "class", spec->cls);
        cJSON_AddStringToObject(r, "layer_status", engine_layer_status_name(rp.layer_status));
        cJSON_AddStringToObject(r, "mask", ms);
        cJSON_AddNumberToObject(r, "layers_skipped", rp.n_skipped);
        cJSON_AddNumberToObject(r, "confidence", rp.probe_confidence);
        cJSON_AddNumberToObject(r, "gated_at", rp.gated_at);
        cJSON_AddNumberToObject(r, "agreement", full.ids.n ? (double)agree / full.ids.n : 1);
        cJSON_AddBoolToObject(r, "exact_match", exact);
        cJSON_AddNumberToObject(r, "tok_s_full", gen_tok_s(&rf));
        cJSON_AddNumberToObject(r, "tok_s_probe", gen_tok_s(&rp));
        cJSON_AddNumberToObject(r, "ttft_ms_full", rf.ttft_ms);
        cJSON_AddNumberToObject(r, "ttft_ms_probe", rp.ttft_ms);
        cJSON_AddNumberToObject(r, "kv_bytes_full", (double)rf.kv_bytes);
        cJSON_AddNumberToObject(r, "kv_bytes_probe", (double)rp.kv_bytes);
        cJSON_AddBoolToObject(r, "lossless_identical", ll_exact);
        cJSON_AddNumberToObject(r, "tok_s_lossless", gen_tok_s(&rl));
        cJSON_AddNumberToObject(r, "draft_drafted", rl.n_drafted);
        cJSON_AddNumberToObject(r, "draft_accepted", rl.n_accepted);
        cJSON_AddNumberToObject(r, "verifications", rl.n_verifications);
        cJSON_AddStringToObject(r, "answer_full", full.text.text ? full.text.text : "");
        cJSON_AddStringToObject(r, "answer_probe", pa.text.text ? pa.text.text : "");
        cJSON_AddItemToArray(rows, r);
    }
    if (!o->json)
        printf("%-4d %-10.10s %8d %7.2f%% %6s %9.1f %9.1f %8zu %8zu %5s %6d/%-4d %9.1f\n", i, spec->cls, rp.n_skipped,
               full.ids.n ? 100.0 * agree / full.ids.n : 100.0, exact ? "yes" : "no", gen_tok_s(&rf), gen_tok_s(&rp),
               rf.kv_bytes, rp.kv_bytes, ll_exact ? "yes" : "NO", rl.n_accepted, rl.n_drafted, gen_tok_s(&rl));
done:
    free(prompt);
    free(full.ids.ids);
    free(full.text.text);
    free(pa.ids.ids);
    free(pa.text.text);
    free(la.ids.ids);
    free(la.text.text);
}

static void class_sum_add(class_sum *dst, const class_sum *x) {
    dst->n += x->n;
    dst->exact += x->exact;
    dst->gated += x->gated;
    dst->agree += x->agree;
    dst->total += x->total;
    dst->skipped += x->skipped;
    dst->tok_s_full += x->tok_s_full;
    dst->tok_s_probe += x->tok_s_probe;
    dst->ttft_full += x->ttft_full;
    dst->ttft_probe += x->ttft_probe;
    dst->kv_full += x->kv_full;
    dst->kv_probe += x->kv_probe;
    dst->ll_exact += x->ll_exact;
    dst->ll_tok_s += x->ll_tok_s;
    dst->ll_drafted += x->ll_drafted;
    dst->ll_accepted += x->ll_accepted;
    dst->ll_verifications += x->ll_verifications;
}

/* One summary row, X, into CLS (JSON) and, without --json (JSON 0), on stdout. */
static void class_report(const engine_info *in, const class_sum *x, int json, cJSON *cls) {
    int cand = in->n_layers - in->probe_k - 1;
    cJSON *j = cJSON_CreateObject();
    if (!j) return;
    cJSON_AddNumberToObject(j, "prompts", x->n);
    cJSON_AddNumberToObject(j, "skip_rate", cand > 0 ? x->skipped / x->n / cand : 0);
    cJSON_AddNumberToObject(j, "layers_skipped_mean", x->skipped / x->n);
    cJSON_AddNumberToObject(j, "agreement", x->total ? x->agree / x->total : 1);
    cJSON_AddNumberToObject(j, "exact_match", (double)x->exact / x->n);
    cJSON_AddNumberToObject(j, "gated", (double)x->gated / x->n);
    cJSON_AddNumberToObject(j, "tok_s_full", x->tok_s_full / x->n);
    cJSON_AddNumberToObject(j, "tok_s_probe", x->tok_s_probe / x->n);
    cJSON_AddNumberToObject(j, "ttft_ms_full", x->ttft_full / x->n);
    cJSON_AddNumberToObject(j, "ttft_ms_probe", x->ttft_probe / x->n);
    cJSON_AddNumberToObject(j, "kv_bytes_full", x->kv_full / x->n);
    cJSON_AddNumberToObject(j, "kv_bytes_probe", x->kv_probe / x->n);
    double acc = x->ll_drafted ? x->ll_accepted / x->ll_drafted : 0;
    double per_verif = x->ll_verifications ? (x->ll_accepted + x->ll_verifications) / x->ll_verifications : 0;
    double speedup = x->tok_s_full > 0 ? x->ll_tok_s / x->tok_s_full : 0;
    cJSON_AddNumberToObject(j, "lossless_identical", (double)x->ll_exact / x->n);
    cJSON_AddNumberToObject(j, "lossless_acceptance", acc);
    cJSON_AddNumberToObject(j, "lossless_tokens_per_verification", per_verif);
    cJSON_AddNumberToObject(j, "tok_s_lossless", x->ll_tok_s / x->n);
    cJSON_AddNumberToObject(j, "lossless_speedup", speedup);
    cJSON_AddItemToObject(cls, x->cls, j);
    if (json) return;
    printf("%-10s prompts %3d  skip rate %5.1f%% (%.2f layers)  agreement %6.2f%%  exact %5.1f%%  gated %d  "
           "tok/s %.1f -> %.1f  ttft %.1f -> %.1f ms  KV %.0f -> %.0f bytes\n",
           x->cls, x->n, cand > 0 ? 100 * x->skipped / x->n / cand : 0, x->skipped / x->n,
           x->total ? 100 * x->agree / x->total : 100, 100.0 * x->exact / x->n, x->gated, x->tok_s_full / x->n,
           x->tok_s_probe / x->n, x->ttft_full / x->n, x->ttft_probe / x->n, x->kv_full / x->n, x->kv_probe / x->n);
    printf("%-10s lossless: identical %5.1f%%  drafts kept %5.1f%% (%.0f/%.0f)  tokens/verification %.2f  "
           "tok/s %.1f -> %.1f (%.2fx off)\n",
           x->cls, 100.0 * x->ll_exact / x->n, 100 * acc, x->ll_accepted, x->ll_drafted, per_verif,
           x->tok_s_full / x->n, x->ll_tok_s / x->n, speedup);
}

/* The summary of CLASSES[0..n_classes) into ROOT's "classes" and, without
 * --json (JSON 0), on stdout: a row a class, then "structured" (the classes
 * with short structured answers, classify, extract and yesno, whose figures
 * the skipping bars are set on) where any ran, then "total". */
static void classes_report(const engine_info *in, const class_sum *classes, int n_classes, int json, cJSON *root) {
    cJSON *cls = cJSON_AddObjectToObject(root, "classes");
    if (!cls) return;
    class_sum st = {.cls = "structured"}, tot = {.cls = "total"};
    for (int c = 0; c < n_classes; c++) {
        const class_sum *x = &classes[c];
        class_sum_add(&tot, x);
        if (!strcmp(x->cls, "classify") || !strcmp(x->cls, "extract") || !strcmp(x->cls, "yesno")) class_sum_add(&st, x);
        if (x->n) class_report(in, x, json, cls);
    }
    if (st.n) class_report(in, &st, json, cls);
    if (tot.n) class_report(in, &tot, json, cls);
}

int cli_eval(int argc, char **argv) {
    probe_opts o;
    int parsed = measure_opts_parse(argc, argv, &o);
    if (parsed) return parsed > 0 ? cli_usage_print(cli_eval_usage, 1) : 2;
    log_set_plain(1);
    prompt_spec *specs = NULL;
    int n_specs = measure_prompts_load(o.data, &specs), rc = 1;
    if (n_specs < 1) {
        measure_prompts_free(specs, n_specs > 0 ? n_specs : 0);
        return 1;
    }
    int n_use = o.max_prompts > 0 && o.max_prompts < n_specs ? o.max_prompts : n_specs; /* the first ones */
    engine *e = measure_engine_open(&o, 1);
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
        printf("%-4s %-10s %8s %8s %6s %9s %9s %8s %8s %5s %11s %9s\n", "#", "class", "skipped", "agree", "exact", "tok/s full",
               "tok/s probe", "kv full", "kv probe", "LL=", "kept/draft", "tok/s LL");
    for (int i = 0; i < n_use; i++) eval_prompt(e, &o, &specs[i], i, logits, classes, &n_classes, rows);
    classes_report(in, classes, n_classes, o.json, root);
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
    free(js);
    rc = 0;
done:
    cJSON_Delete(root);
    free(logits);
    engine_close(e);
    measure_prompts_free(specs, n_specs);
    return rc;
}
