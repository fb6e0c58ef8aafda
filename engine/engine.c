/* engine.c - model + tokenizer + template + backend, and the generate loop. */
#include "engine/engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <dirent.h>

#include "kernels/backend.h"
#include "engine/answer.h"
#include "engine/chat.h"
#include "engine/constrain.h"
#include "probe/probe_features.h"
#include "engine/gguf.h"
#include "engine/log.h"
#include "engine/model.h"
#include "probe/probe.h"
#include "engine/sampler.h"
#include "engine/speculate.h"
#include "engine/textout.h"
#include "engine/tokenizer.h"

#define PIECE_MAX 1024 /* bytes of one token's text; longer pieces are cut */
#define ENGINE_FORCED_MAX 32 /* tokens the output grammar may force in one step */

struct engine {
    gguf_file *gguf;
    tok_vocab *vocab;
    kb_backend *kb;
    model model;
    chat_family family;
    kb_kv_type kv_type;
    engine_info info;
    char *name;
    char bos_text[64], eos_text[64];
    int32_t think_open, think_close; /* the tokens <think> and </think> (answer.h), or -1 when not both exist */
    probe probe;
    int probe_loaded, layer_skip;
    char *probe_path;
    float hint_max_deviation;
    int kv_fail_request, scratch_fail_request, kernel_fail_request, kernel_fail_token, n_requests;
    grammar_vocab *gvocab;  /* the token pieces for constrained decoding, built at the first use */
    spec_costs spec_cost;   /* lossless mode's cost model, measured at its first request */
    int spec_cost_ready;
    spec_memory spec_mem;   /* what lossless requests learnt of their drafts */
    spec_lookup lookup;     /* earlier answers, for drafts (cap 0: off) */
    pcache *pcache;         /* the prompt cache, or NULL (off) */
};

/* The probe's running sums over a prompt's first N tokens (kept with a
 * prompt cache entry, followed by the layer-k row of its last token), so
 * that a prompt measured in two parts gives the same features, bit for bit. */
typedef struct {
    int valid, k, n;
    double norm[PROBE_MAX_K + 1];
    double cos_s, cos_s2;
} probe_sums;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Copies the text of token ID (or "") into BUF of N bytes. */
static void token_text_copy(const tok_vocab *v, int32_t id, char *buf, size_t n) {
    size_t len = 0;
    const char *t = id >= 0 ? tok_text(v, id, &len) : NULL;
    if (!t || len >= n) len = 0;
    memcpy(buf, t ? t : "", len);
    buf[len] = 0;
}

/* The backends' warnings, as log lines. */
static void backend_warning(const char *event, const char *msg) { log_msg(LOG_WARN, event, "%s", msg); }

static kb_backend *backend_create(const engine_params *p, char *err, size_t errlen) {
    char cuda_err[256] = "";
    if (p->device != ENGINE_DEVICE_CPU) {
        kb_backend *kb = kb_cuda_create(0, cuda_err, sizeof cuda_err);
        if (kb) {
            log_msg(LOG_INFO, "backend", "using %s", kb->name);
            return kb;
        }
        if (p->device == ENGINE_DEVICE_CUDA) {
            snprintf(err, errlen, "--device cuda: %s", cuda_err);
            return NULL;
        }
        log_msg(LOG_INFO, "backend", "no usable GPU (%s); using the CPU", cuda_err);
    }
    kb_backend *kb = kb_cpu_create(p->n_threads);
    if (!kb) snprintf(err, errlen, "cannot create the CPU backend (out of memory or threads)");
    return kb;
}

const char *engine_model_sha256(engine *e) {
    char err[256];
    if (!e->info.model_sha256[0] && probe_file_sha256(e->info.path, e->info.model_sha256, err, sizeof err)) {
        log_msg(LOG_WARN, "model_hash", "%s", err);
        e->info.model_sha256[0] = 0;
        return NULL;
    }
    return e->info.model_sha256;
}

/* Tries the probe file PATH; EXPLICIT makes a mismatch a warning rather than
 * a debug line. Returns 1 when it was loaded. */
static int probe_try(engine *e, const char *path, int explicit) {
    char err[512];
    probe p;
    if (probe_load(&p, path, err, sizeof err)) {
        log_msg(LOG_WARN, "probe_refused", "%s", err);
        return 0;
    }
    const char *sha = engine_model_sha256(e);
    if (!sha || strcmp(sha, p.model_sha256) || p.n_layers != e->info.n_layers) {
        log_msg(explicit ? LOG_WARN : LOG_DEBUG, "probe_refused",
                "%s: probe is for model sha256 %.12s… (%d layers), not this model (%.12s…, %d layers): layer skipping off",
                path, p.model_sha256, p.n_layers, sha ? sha : "?", e->info.n_layers);
        probe_free(&p);
        return 0;
    }
    e->probe = p;
    e->probe_loaded = 1;
    e->probe_path = strdup(path);
    e->info.probe_loaded = e->probe_path != NULL;
    e->info.probe_path = e->probe_path;
    e->info.probe_k = p.k;
    log_msg(LOG_INFO, "probe_loaded", "%s: k=%d, %d candidate layers, threshold %.2f, confidence floor %.2f", path,
            p.k, p.n_cand, p.threshold, p.floor);
    return e->info.probe_loaded;
}

/* Finds the probe for the loaded model: the explicit file, or the first
 * file in the folder whose model hash matches. */
static void probe_find(engine *e, const engine_params *p) {
    if (!p->layer_skip) return;
    if (p->probe_path) {
        probe_try(e, p->probe_path, 1);
        return;
    }
    if (!p->probe_dir) return;
    DIR *d = opendir(p->probe_dir);
    if (!d) return;
    struct dirent *de;
    char path[4096];
    while (!e->probe_loaded && (de = readdir(d))) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".json")) continue;
        snprintf(path, sizeof path, "%s/%s", p->probe_dir, de->d_name);
        probe_try(e, path, 0);
    }
    closedir(d);
    if (!e->probe_loaded) log_msg(LOG_INFO, "probe_none", "no probe in %s matches this model: layer skipping off", p->probe_dir);
}

/* The context: the one asked for, else the model's trained one, capped so
 * that a request's KV cache over all layers fits the budget. */
static int context_size(const engine_params *p, const model *m, kb_kv_type kv_type) {
    int n = p->n_ctx > 0 ? p->n_ctx : m->n_ctx_train;
    size_t per_position = (size_t)m->n_layers * 2 * kb_kv_bytes(kv_type, 1, m->kv_dim);
    if (p->kv_budget && per_position && p->kv_budget / per_position < (size_t)n) {
        int cap = (int)(p->kv_budget / per_position);
        log_msg(LOG_INFO, "context", "context of %d tokens capped to %d by the KV budget of %zu MiB", n, cap < 2 ? 2 : cap,
                p->kv_budget >> 20);
        n = cap < 2 ? 2 : cap;
    }
    return n;
}

/* Caps *N_CTX so that the fullest request (a prompt of the whole context,
 * every layer) fits the memory the backend has left after the weights,
 * less a margin (allocation granularity, cuBLAS's workspace), and logs what
 * the weights and a request take. 0, or -1 with err set when not even two
 * positions fit. */
static int memory_fit(engine *e, int *n_ctx, const char *path, char *err, size_t errlen) {
    const model *m = &e->model;
    kb_backend *kb = e->kb;
    size_t avail = kb->mem_free ? kb->mem_free(kb) : (size_t)-1;
    if (avail != (size_t)-1) {
        size_t margin = avail / 20 + ((size_t)256 << 20);
        int fit = model_context_fit(m, kb, *n_ctx, e->kv_type, avail > margin ? avail - margin : 0);
        if (fit < 2) {
            snprintf(err, errlen, "%s: %zu MiB are left on %s after the weights: no room for a request's KV cache and "
                     "scratch", path, avail >> 20, kb->name);
            return -1;
        }
        if (fit < *n_ctx)
            log_msg(LOG_INFO, "context", "context of %d tokens capped to %d by the %zu MiB free on %s", *n_ctx, fit,
                    avail >> 20, kb->name);
        *n_ctx = fit;
    }
    size_t per_pos = (size_t)m->n_layers * 2 * kb_kv_bytes(e->kv_type, 1, m->kv_dim);
    size_t full = model_state_bytes(m, kb, *n_ctx, *n_ctx, NULL, e->kv_type);
    char left[64] = "";
    if (avail != (size_t)-1) snprintf(left, sizeof left, "; %zu MiB free", avail >> 20);
    log_msg(LOG_INFO, "memory", "%s: weights %.1f MiB; KV cache %.1f KiB a position (all layers); a request of the whole "
            "context %.1f MiB (KV cache %.1f MiB, scratch %.1f MiB)%s", kb->name, m->weights_bytes / 1048576.0,
            per_pos / 1024.0, full / 1048576.0, per_pos * (double)*n_ctx / 1048576.0,
            (full - per_pos * (double)*n_ctx) / 1048576.0, left);
    return 0;
}

/* --device auto: gives the GPU up for the CPU, logging why (ERR: the
 * model, or a request of any context, does not fit the GPU) and loading
 * the model again. 0, or -1 with err set (also when the device was not
 * chosen automatically or is the CPU already: ERR stays). */
static int use_cpu(engine *e, const engine_params *p, char *err, size_t errlen) {
    if (p->device != ENGINE_DEVICE_AUTO || !strncmp(e->kb->name, "cpu", 3)) return -1;
    log_msg(LOG_WARN, "backend", "%s; using the CPU", err);
    model_free(&e->model, e->kb);
    e->kb->destroy(e->kb);
    e->kb = kb_cpu_create(p->n_threads);
    if (!e->kb) {
        snprintf(err, errlen, "cannot create the CPU backend (out of memory or threads)");
        return -1;
    }
    return model_load(&e->model, e->gguf, e->kb, err, errlen);
}

engine *engine_open(const engine_params *p, char *err, size_t errlen) {
    engine *e = calloc(1, sizeof *e);
    if (!e) {
        if (p->backend) p->backend->destroy(p->backend);
        snprintf(err, errlen, "%s: out of memory", p->model_path);
        return NULL;
    }
    kb_set_logger(backend_warning);
    e->kb = p->backend;
    e->gguf = gguf_open(p->model_path, err, errlen);
    if (!e->gguf) goto fail;
    if (!e->kb) e->kb = backend_create(p, err, errlen);
    if (!e->kb) goto fail;
    if (model_load(&e->model, e->gguf, e->kb, err, errlen)) { /* --device auto: a model that does not fit the GPU */
        if (use_cpu(e, p, err, errlen)) goto fail;
    }
    e->vocab = tok_vocab_load(e->gguf, err, errlen);
    if (!e->vocab) goto fail;
    if (tok_n_vocab(e->vocab) > e->model.n_vocab) {
        snprintf(err, errlen, "%s: the tokenizer has %d tokens but the embedding only %d rows", p->model_path,
                 tok_n_vocab(e->vocab), e->model.n_vocab);
        goto fail;
    }
    char *tmpl = gguf_kv_get_str(e->gguf, "tokenizer.chat_template");
    e->family = chat_family_detect(tmpl);
    free(tmpl);
    if (p->chat_template && *p->chat_template) {
        int f = chat_family_parse(p->chat_template);
        if (f < 0) {
            snprintf(err, errlen, "unknown chat template '%s' (llama2, llama3, chatml, qwen3, zephyr, gemma, phi3, phi4, plain)",
                     p->chat_template);
            goto fail;
        }
        e->family = (chat_family)f;
    }
    token_text_copy(e->vocab, tok_bos(e->vocab), e->bos_text, sizeof e->bos_text);
    token_text_copy(e->vocab, tok_eos(e->vocab), e->eos_text, sizeof e->eos_text);
    e->think_open = tok_find(e->vocab, "<think>");
    e->think_close = tok_find(e->vocab, "</think>");
    if (e->think_open < 0 || e->think_close < 0) e->think_open = e->think_close = -1;
    e->kv_type = p->kv_f16 ? KB_KV_F16 : KB_KV_F32;

    engine_info *in = &e->info;
    e->name = gguf_kv_get_str(e->gguf, "general.name");
    if (!e->name || !*e->name) {
        free(e->name);
        const char *base = strrchr(p->model_path, '/');
        e->name = strdup(base ? base + 1 : p->model_path);
        if (!e->name) goto oom;
        char *dot = strrchr(e->name, '.');
        if (dot && !strcmp(dot, ".gguf")) *dot = 0;
    }
    const model *m = &e->model;
    in->name = e->name;
    in->path = e->gguf->path;
    in->arch = m->arch;
    in->template_family = chat_family_name(e->family);
    in->thinking_tags = e->think_open >= 0;
    in->device_name = e->kb->name;
    struct stat st;
    in->created_at = stat(p->model_path, &st) == 0 ? (long long)st.st_mtime : 0;
    in->n_layers = m->n_layers;
    in->n_ctx_train = m->n_ctx_train;
    in->n_ctx = context_size(p, m, e->kv_type);
    if (memory_fit(e, &in->n_ctx, p->model_path, err, errlen)) { /* --device auto: no room left on the GPU */
        if (use_cpu(e, p, err, errlen) || memory_fit(e, &in->n_ctx, p->model_path, err, errlen)) goto fail;
        in->device_name = e->kb->name;
    }
    model_set_context(&e->model, in->n_ctx); /* LongRoPE picks its factors by the context served */
    in->n_vocab = m->n_vocab;
    in->dim = m->dim;
    in->n_heads = m->n_heads;
    in->n_kv_heads = m->n_kv_heads;
    in->head_dim = m->head_dim;
    in->ffn_dim = m->ffn_dim;
    in->weight_bytes = m->weights_bytes;
    for (int l = 0; l < m->n_layers; l++) in->layer_bytes[l] = m->layers[l].bytes;
    in->head_bytes = m->output.nbytes + m->output_norm.nbytes;
    in->weight_type = ggml_type_name(m->layers[0].w_gate.type);
    if (p->probe_k > 0 && p->probe_k > m->n_layers - 2) {
        snprintf(err, errlen, "%s: probe K %d: this model has %d layers, so K must be in 1..%d", p->model_path,
                 p->probe_k, m->n_layers, m->n_layers - 2);
        goto fail;
    }
    in->probe_k = p->probe_k > 0 ? p->probe_k : probe_default_k(m->n_layers);
    e->hint_max_deviation = p->hint_max_deviation > 0 ? p->hint_max_deviation : 0.15f;
    e->kv_fail_request = p->kv_fail_request;
    e->scratch_fail_request = p->scratch_fail_request;
    e->kernel_fail_request = p->kernel_fail_request;
    e->kernel_fail_token = p->kernel_fail_token;
    e->layer_skip = p->layer_skip;
    if (p->spec_always) { /* verifications and drafts free: every draft pays */
        for (int r = 0; r <= SPEC_K_MAX + 1; r++) e->spec_cost.vcost[r] = 1;
        e->spec_cost_ready = 1;
    }
    probe_find(e, p);
    if (p->prompt_cache_bytes && !(e->pcache = pcache_new(p->prompt_cache_bytes))) goto oom;
    if (p->draft_cache_tokens > 0 && spec_lookup_init(&e->lookup, p->draft_cache_tokens < 64 ? 64 : p->draft_cache_tokens))
        goto oom;
    return e;
oom:
    snprintf(err, errlen, "%s: out of memory", p->model_path);
fail:
    engine_close(e);
    return NULL;
}

void engine_close(engine *e) {
    if (!e) return;
    if (e->kb) {
        model_free(&e->model, e->kb);
        e->kb->destroy(e->kb);
    }
    grammar_vocab_free(e->gvocab);
    pcache_free(e->pcache);
    spec_lookup_free(&e->lookup);
    tok_vocab_free(e->vocab);
    gguf_close(e->gguf);
    probe_free(&e->probe);
    free(e->probe_path);
    free(e->name);
    free(e);
}

const engine_info *engine_get_info(const engine *e) { return &e->info; }

int engine_debug_protect_layer(engine *e, int layer, int protect) {
    return model_layer_protect(&e->model, layer, protect);
}

uint64_t engine_debug_launches(engine *e) { return e->kb->launches(e->kb); }

int engine_tokenize(const engine *e, const char *text, int parse_special, int32_t **tokens) {
    size_t len = strlen(text);
    int cap = (int)(len < 1000000 ? len : 1000000) + 8;
    *tokens = NULL;
    for (int tries = 0; tries < 2; tries++) {
        int32_t *buf = malloc((size_t)cap * sizeof *buf);
        if (!buf) return -1;
        int n = tok_encode(e->vocab, text, len, 1, parse_special, buf, cap);
        if (n >= 0 && n <= cap) {
            *tokens = buf;
            return n;
        }
        free(buf);
        if (n < 0) return -1;
        cap = n;
    }
    return -1;
}

int engine_token_is_bos(const engine *e, int32_t id) { return id >= 0 && id == tok_bos(e->vocab); }

/* Returns the token count (the caller frees *tokens), or -1 with ERR set. */
int engine_prompt_build(const engine *e, const char *system, const engine_tools *tools, const engine_message *msgs,
                        int n_msgs, int thinking, int32_t **tokens, char *err, size_t errlen) {
    size_t n_parts = 1;
    for (int i = 0; i < n_msgs; i++) n_parts += msgs[i].n_parts > 0 && msgs[i].parts ? (size_t)msgs[i].n_parts : 1;
    chat_message *cm = calloc((size_t)(n_msgs ? n_msgs : 1), sizeof *cm);
    chat_part *parts = calloc(n_parts, sizeof *parts);
    char *rendered = NULL;
    int n_cm = 0, n = -1;
    size_t used = 0;
    *tokens = NULL;
    if (!cm || !parts) goto oom;
    /* Merge consecutive turns of one role: their parts are contiguous in PARTS. */
    for (int i = 0; i < n_msgs; i++) {
        chat_role role = msgs[i].role == ENGINE_ROLE_ASSISTANT ? CHAT_ROLE_ASSISTANT
                         : msgs[i].role == ENGINE_ROLE_SYSTEM  ? CHAT_ROLE_SYSTEM
                                                               : CHAT_ROLE_USER;
        if (!n_cm || cm[n_cm - 1].role != role) cm[n_cm++] = (chat_message){.role = role, .parts = parts + used};
        if (msgs[i].n_parts > 0 && msgs[i].parts) {
            memcpy(parts + used, msgs[i].parts, (size_t)msgs[i].n_parts * sizeof *parts);
            used += (size_t)msgs[i].n_parts;
            cm[n_cm - 1].n_parts += msgs[i].n_parts;
        } else {
            parts[used++] = (chat_part){.type = CHAT_PART_TEXT, .text = msgs[i].text ? msgs[i].text : ""};
            cm[n_cm - 1].n_parts++;
        }
    }
    rendered = chat_render(e->family, e->bos_text, e->eos_text, system, tools, cm, n_cm, thinking);
    if (!rendered) goto oom;
    n = engine_tokenize(e, rendered, 1, tokens);
    if (n < 0) snprintf(err, errlen, "the prompt could not be tokenized");
    goto done;
oom:
    snprintf(err, errlen, "out of memory building the prompt");
done:
    free(parts);
    free(cm);
    free(rendered);
    return n;
}

const char *engine_layer_status_name(engine_layer_status s) {
    switch (s) {
    case ENGINE_LAYERS_FULL: return "full";
    case ENGINE_LAYERS_ACTIVE: return "active";
    case ENGINE_LAYERS_OFF: break;
    }
    return "off";
}

const char *engine_stop_reason_name(engine_stop_reason r) {
    switch (r) {
    case ENGINE_STOP_EOS: return "end_turn";
    case ENGINE_STOP_MAX_TOKENS: return "max_tokens";
    case ENGINE_STOP_SEQUENCE: return "stop_sequence";
    case ENGINE_STOP_CONTEXT: return "model_context_window_exceeded";
    case ENGINE_STOP_TOOL_USE: return "tool_use";
    case ENGINE_STOP_CANCELLED: return "cancelled";
    case ENGINE_STOP_ERROR: return "error";
    }
    return "error";
}

int engine_forward_logits(engine *e, const int32_t *tokens, int n, const uint8_t *mask, float *logits) {
    model_state st;
    char err[256];
    const model *m = &e->model;
    if (n < 1 || n > e->info.n_ctx) return -1;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m->n_vocab) return -1;
    kb_error_clear(e->kb);
    if (model_state_init(&st, m, e->kb, n, n, mask, e->kv_type, err, sizeof err)) return -1;
    model_embed(m, e->kb, &st, tokens, n);
    model_forward_layers(m, e->kb, &st, n, 0, 0, m->n_layers);
    model_logits(m, e->kb, &st, 0, n, logits);
    model_state_free(&st, e->kb);
    return kb_error(e->kb) ? -1 : 0;
}

int engine_warm(engine *e) {
    enum { WARM_TOKENS = 8 }; /* a prefill, so the multi-token kernels run too */
    int n = e->info.n_ctx < WARM_TOKENS ? e->info.n_ctx : WARM_TOKENS;
    int32_t tokens[WARM_TOKENS] = {0};
    float *logits = malloc((size_t)n * e->model.n_vocab * sizeof *logits);
    int rc = logits ? engine_forward_logits(e, tokens, n, NULL, logits) : -1;
    free(logits);
    return rc;
}

_Static_assert(ENGINE_VERIFY_ROWS == KB_EXACT_ROWS, "a verification is one batch-invariant matmul");

/* Times passes of SIZES[i] rows (each 1..KB_EXACT_ROWS) through every layer
 * and the head after a context of POS tokens: ROUNDS rounds, each timing
 * REPS passes of every size in turn (so that other work on the machine
 * falls on all sizes alike); BEST[i] gets the best round's ms per pass.
 * Returns 0 or -1. */
static int time_rows(engine *e, int pos, const int *sizes, int n_sizes, int reps, int rounds, double *best) {
    const model *m = &e->model;
    int32_t tokens[KB_EXACT_ROWS] = {0};
    model_state st;
    char err[256];
    int max = 0, rc = -1;
    for (int i = 0; i < n_sizes; i++) {
        if (sizes[i] < 1 || sizes[i] > KB_EXACT_ROWS) return -1;
        max = sizes[i] > max ? sizes[i] : max;
        best[i] = -1;
    }
    if (pos < 1 || pos + max > e->info.n_ctx || reps < 1) return -1;
    int32_t *ctx = calloc((size_t)pos, sizeof *ctx);
    float *logits = malloc((size_t)KB_EXACT_ROWS * m->n_vocab * sizeof *logits);
    kb_pick picks[KB_EXACT_ROWS];
    const kb_pick_params greedy = {0, m->n_vocab, 1};
    kb_error_clear(e->kb);
    if (!ctx || !logits || model_state_init(&st, m, e->kb, pos + max, pos, NULL, e->kv_type, err, sizeof err)) goto done;
    int pick = model_can_pick(m, e->kb) && max <= st.logit_rows; /* as greedy decoding runs: the backend picks */
    model_embed(m, e->kb, &st, ctx, pos);
    model_forward_layers(m, e->kb, &st, pos, 0, 0, m->n_layers);
    for (int r = 0; r < rounds; r++)
        for (int i = 0; i < n_sizes; i++) {
            double t = now_ms();
            for (int j = 0; j < reps; j++) {
                if (pick) model_decode_pick(m, e->kb, &st, tokens, sizes[i], pos, NULL, 0, sizes[i], &greedy, NULL, picks);
                else model_decode(m, e->kb, &st, tokens, sizes[i], pos, NULL, 0, sizes[i], logits);
            }
            double ms = (now_ms() - t) / reps;
            if (best[i] < 0 || ms < best[i]) best[i] = ms;
        }
    rc = kb_error(e->kb) ? -1 : 0;
    model_state_free(&st, e->kb);
done:
    free(ctx);
    free(logits);
    return rc;
}

double engine_bench_rows(engine *e, int pos, int rows, int reps) {
    double ms;
    return time_rows(e, pos, &rows, 1, reps, 5, &ms) ? -1 : ms;
}

/* Lossless mode's cost model (speculate.h), once per engine: each layer's
 * and the head's share of the weights a decode step reads, and the cost of
 * verifying 1, 2, 4 and 8 rows against one (measured on a short context,
 * the best of 7 interleaved rounds; the sizes between interpolated). A failed
 * measurement leaves r rows costing r: no draft ever pays. */
void engine_measure_costs(engine *e) {
    if (e->spec_cost_ready) return;
    spec_costs *c = &e->spec_cost;
    double total = (double)e->info.head_bytes, t[ENGINE_VERIFY_ROWS + 1];
    for (int l = 0; l < e->info.n_layers; l++) total += (double)e->info.layer_bytes[l];
    for (int l = 0; l < e->info.n_layers; l++) c->layer[l] = total > 0 ? e->info.layer_bytes[l] / total : 0;
    c->head = total > 0 ? e->info.head_bytes / total : 0;
    static const int sizes[4] = {1, 2, 4, 8};
    double best[4];
    int ok = e->info.n_ctx > 2 * ENGINE_VERIFY_ROWS && time_rows(e, ENGINE_VERIFY_ROWS, sizes, 4, 1, 7, best) == 0;
    for (int i = 0; i < 4; i++) t[sizes[i]] = ok ? best[i] : -1;
    ok = ok && t[1] > 0;
    for (int r = 1; r <= SPEC_K_MAX + 1; r++) {
        int lo = r >= 4 ? 4 : r >= 2 ? 2 : 1, hi = lo * 2 > ENGINE_VERIFY_ROWS ? lo : lo * 2;
        double ms = hi == lo ? t[lo] : t[lo] + (t[hi] - t[lo]) * (r - lo) / (hi - lo);
        c->vcost[r] = ok ? (ms / t[1] > 1 || r == 1 ? ms / t[1] : 1) : r;
    }
    e->spec_cost_ready = 1;
    if (ok)
        log_msg(LOG_INFO, "lossless_costs", "verifying 2, 4, 8 rows costs %.2f, %.2f, %.2f decode steps", c->vcost[2],
                c->vcost[4], c->vcost[SPEC_K_MAX + 1]);
}

static int cancelled(const engine_gen_params *gp) { return gp->cancel && atomic_load(gp->cancel); }

/* Runs layers [l0, l1) over the N prompt rows, one layer at a time,
 * reporting progress and checking the cancel flag and the backend's error
 * state between layers. Returns 0, 1 when cancelled, or -1 when the
 * backend failed (kb_error says why). */
static int prefill_layers(engine *e, model_state *st, int n, int pos0, int l0, int l1, const engine_gen_params *gp,
                          const engine_callbacks *cb) {
    const model *m = &e->model;
    for (int l = l0; l < l1; l++) {
        if (cancelled(gp)) return 1;
        model_forward_layers(m, e->kb, st, n, pos0, l, l + 1);
        if (kb_error(e->kb)) return -1;
        if (cb && cb->on_progress) cb->on_progress(cb->ud, (l + 1) * n, m->n_layers * n);
    }
    return 0;
}

/* Runs layers 0..k-1 over the N embedded rows (positions pos0..), adding
 * to SUMS the norms before each layer and after the last, and the cosines
 * of consecutive rows there (the first row paired with KROW, the layer-k
 * row of position pos0 - 1, when pos0 > 0); then fills PS for the whole
 * prompt (pos0 + n tokens) and leaves in KROW the last row's. Uses LOGITS
 * as scratch. Returns 0, 1 when cancelled, or -1 (out of memory, or the
 * backend failed). */
static int probe_prefill(engine *e, model_state *st, int n, int pos0, int k, probe_sums *sums, float *krow,
                         probe_stats *ps, float *logits, const engine_gen_params *gp, const engine_callbacks *cb) {
    const model *m = &e->model;
    float *host = malloc((size_t)n * m->dim * sizeof *host);
    if (!host) return -1;
    for (int l = 0; l <= k; l++) {
        e->kb->to_host(e->kb, host, st->x, (size_t)n * m->dim * sizeof *host);
        probe_norm_acc(host, n, m->dim, &sums->norm[l]);
        if (l == k) break;
        int rc = prefill_layers(e, st, n, pos0, l, l + 1, gp, cb);
        if (rc) {
            free(host);
            return rc;
        }
    }
    probe_cos_acc(pos0 ? krow : NULL, host, n, m->dim, &sums->cos_s, &sums->cos_s2);
    memcpy(krow, host + (size_t)(n - 1) * m->dim, (size_t)m->dim * sizeof *krow);
    free(host);
    sums->valid = 1;
    sums->k = k;
    sums->n = pos0 + n;
    memset(ps, 0, sizeof *ps);
    ps->k = k;
    ps->n_tokens = sums->n;
    for (int l = 0; l <= k; l++) ps->norm[l] = sums->norm[l] / sums->n;
    probe_cos_finish(sums->cos_s, sums->cos_s2, sums->n, &ps->cos_mean, &ps->cos_std);
    model_logits(m, e->kb, st, n - 1, 1, logits);
    probe_sharpness(logits, m->n_vocab, &ps->maxprob, &ps->entropy);
    return kb_error(e->kb) ? -1 : 0;
}

int engine_probe_features(engine *e, const int32_t *tokens, int n, float *features) {
    const model *m = &e->model;
    int k = e->info.probe_k;
    model_state st;
    probe_stats ps;
    char err[256];
    uint8_t mask[MASK_MAX_LAYERS] = {0};
    if (n < 1 || n > e->info.n_ctx) return -1;
    kb_error_clear(e->kb);
    for (int l = 0; l < k; l++) mask[l] = 1;
    probe_sums sums = {0};
    float *logits = malloc((size_t)m->n_vocab * sizeof *logits), *krow = malloc((size_t)m->dim * sizeof *krow);
    int rc = logits && krow ? model_state_init(&st, m, e->kb, n, n, mask, e->kv_type, err, sizeof err) : -1;
    if (rc == 0) {
        model_embed(m, e->kb, &st, tokens, n);
        rc = probe_prefill(e, &st, n, 0, k, &sums, krow, &ps, logits, &(engine_gen_params){0}, NULL) ? -1 : 0;
        if (rc == 0) probe_features_make(&ps, features);
        model_state_free(&st, e->kb);
    }
    free(logits);
    free(krow);
    return rc;
}

int engine_probe_mask(engine *e, const int32_t *tokens, int n, uint8_t *mask, float *confidence) {
    float features[PROBE_N_FEATURES];
    probe_decision d = {0};
    memset(mask, 1, (size_t)e->info.n_layers);
    if (e->probe_loaded) {
        if (engine_probe_features(e, tokens, n, features)) return -1;
        probe_decide(&e->probe, features, mask, &d);
    }
    if (confidence) *confidence = d.confidence;
    return d.n_skipped;
}

/* Lossless mode's first draft mask from the probe's view of the request:
 * the candidate layers ordered from the least needed (the probe's per-layer
 * estimate; its calibration prior, the regressions' intercepts, when the
 * features fall outside the calibration range), and skipped while their
 * need is below SPEC_SKIP_THRESHOLD, whatever the confidence floor says (a
 * draft only has to be mostly right). Writes MASK, ORDER, and returns the
 * number skipped. */
static int draft_mask(const probe *p, const probe_decision *d, uint8_t *mask, int *order) {
    float need[PROBE_MAX_CANDIDATES];
    for (int j = 0; j < p->n_cand; j++) {
        need[j] = d->in_range ? d->needed[j] : (float)(1 - 1 / (1 + exp(-p->b[j])));
        order[j] = j;
    }
    for (int i = 1; i < p->n_cand; i++) /* insertion sort by need, stable */
        for (int j = i; j > 0 && need[order[j]] < need[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int n_skip = 0;
    memset(mask, 1, (size_t)p->n_layers);
    for (int i = 0; i < p->n_cand; i++) {
        if (need[order[i]] < SPEC_SKIP_THRESHOLD) n_skip = i + 1;
        order[i] = p->cand[order[i]];
    }
    for (int i = 0; i < n_skip; i++) mask[order[i]] = 0;
    return n_skip;
}

/* Decides the request's mask before its prompt runs past layer k: a forced
 * mask as given; otherwise the probe's (after layers 0..k-1 ran over the N
 * rows from position POS0, SUMS and KROW carrying the earlier positions'
 * part, when a probe is loaded) or full depth, reconciled with the client's
 * hint. In lossless mode that mask is the draft's (SP is set up with it)
 * and every layer gets a KV cache; in off mode it is full depth. */
static int decide_mask(engine *e, model_state *st, int n, int pos0, probe_sums *sums, float *krow,
                       const engine_gen_params *gp, const engine_callbacks *cb, float *logits, spec_state *sp,
                       engine_result *res) {
    const model *m = &e->model;
    int L = m->n_layers, k = e->info.probe_k, lossless = gp->skip_mode == ENGINE_SKIP_LOSSLESS;
    int order[MASK_MAX_LAYERS], n_order = 0, n_skip = 0;
    uint8_t server[MASK_MAX_LAYERS], final[MASK_MAX_LAYERS], full[MASK_MAX_LAYERS];
    memset(server, 1, (size_t)L);
    memset(full, 1, (size_t)L);
    res->hint_status = HINT_ABSENT;
    if (gp->skip_mode == ENGINE_SKIP_OFF) {
        memcpy(final, full, (size_t)L);
    } else if (gp->layer_mask) {
        memcpy(final, gp->layer_mask, (size_t)L);
    } else {
        if (e->probe_loaded) {
            probe_stats ps;
            float features[PROBE_N_FEATURES];
            probe_decision d;
            int rc = probe_prefill(e, st, n, pos0, k, sums, krow, &ps, logits, gp, cb);
            if (rc) return rc;
            probe_features_make(&ps, features);
            probe_decide(&e->probe, features, server, &d);
            res->probe_confidence = d.confidence;
            if (lossless) n_skip = draft_mask(&e->probe, &d, server, order), n_order = e->probe.n_cand;
        }
        res->hint_status = hint_reconcile(server, gp->hint, gp->hint_invalid, L, k, e->hint_max_deviation, final);
        if (res->hint_status == HINT_OVERRIDDEN)
            log_msg(LOG_INFO, "hint_overridden", "a layer hint differing from the server's mask in more than %.0f%% of the layers was overridden",
                    e->hint_max_deviation * 100);
        if (memcmp(final, server, (size_t)L)) n_order = 0; /* a client's mask is not adapted */
    }
    for (int l = 0; l < L; l++) res->n_skipped += !final[l];
    res->layer_status = !e->probe_loaded || gp->skip_mode == ENGINE_SKIP_OFF ? ENGINE_LAYERS_OFF
                        : res->n_skipped                                     ? ENGINE_LAYERS_ACTIVE
                                                                             : ENGINE_LAYERS_FULL;
    memcpy(res->mask, final, (size_t)L);
    if (lossless) spec_init(sp, L, final, order, n_order, n_skip, &e->spec_cost, &e->spec_mem);
    char err[256];
    if (model_state_set_mask(st, m, e->kb, lossless ? full : final, err, sizeof err)) {
        snprintf(res->error, sizeof res->error, "%s", err);
        return -1;
    }
    return 0;
}

/* Testing (kernel_fail_request): in that generation, once TOKENS tokens are
 * generated, the backend's third operation from here fails: the first
 * matmul of layer 0 (after embed and rmsnorm). */
/* The token pieces for constrained decoding, built once. NULL when out of memory. */
static const grammar_vocab *grammar_vocab_of(engine *e) {
    if (!e->gvocab) e->gvocab = constrain_vocab_new(e->vocab);
    return e->gvocab;
}

int engine_check_output(const engine *e, const engine_tools *tools, const char *format_schema, char *err,
                        size_t errlen) {
    int lazy;
    char *gbnf = constrain_gbnf(tools, format_schema, e->family, &lazy, err, errlen);
    if (!gbnf) return err[0] ? -1 : 0;
    grammar *g = grammar_parse(gbnf, "root", err, errlen);
    free(gbnf);
    grammar_free(g);
    return g ? 0 : -1;
}

static void arm_kernel_fault(engine *e, int tokens) {
    if (e->n_requests == e->kernel_fail_request && tokens == e->kernel_fail_token)
        e->kb->fail_at = e->kb->launches(e->kb) + 3;
}

/* Ends a request that cannot run as asked: a retry fails the same way. */
static void invalid(engine_result *res) {
    res->reason = ENGINE_STOP_ERROR;
    res->retryable = 0;
}

/* One generation's decoding, shared by plain and speculative decoding: what
 * picks the next tokens (pick_plain, pick_speculative) is apart from what
 * hands an accepted token on (emit_token). */
typedef struct {
    engine *e;
    const engine_gen_params *gp;
    const engine_callbacks *cb;
    engine_result *res;
    model_state *st;
    sampler *sm;
    answer *ans;
    spec_state *spec;  /* NULL: plain decoding */
    constrain *con;    /* the output grammar, or NULL (then spec may be set) */
    char *piece;
    float *logits;     /* n_vocab: one row of logits (plain steps, draft steps) */
    float *vlogits;    /* lossless: (SPEC_K_MAX + 1) rows of verification logits */
    float *q;          /* lossless, sampling: SPEC_K_MAX rows of draft distributions */
    float *p, *resid;  /* lossless, sampling: n_vocab each */
    int32_t *hist;     /* the prompt and the emitted tokens (prompt lookup) */
    int n_hist, n_ctx;
    int pos;           /* positions whose KV every computed layer holds */
    int dev_pick;      /* the backend picks the tokens (model_can_pick): the logits stay there */
    kb_pick_params pp; /* the sampler's temperature, top-k and top-p, for the backend */
    double t0;
} gen;

typedef enum { EMIT_MORE, EMIT_STOP, EMIT_CANCEL, EMIT_OOM, EMIT_REFUSED } emit_status;

/* Hands on one token of the answer, which takes position POS: on_token,
 * the end-of-generation token, its text (stop strings, tool calls; the
 * output grammar takes it unless it was FORCED, already taken), max_tokens
 * and the context. EMIT_STOP comes with res->reason set. */
static emit_status emit_token(gen *g, int32_t tok, int pos, int forced) {
    engine_result *res = g->res;
    const engine_callbacks *cb = g->cb;
    res->last_token_ms = now_ms() - g->t0;
    if (res->n_generated == 0) res->ttft_ms = res->last_token_ms;
    res->n_generated++;
    g->hist[g->n_hist++] = tok;
    if (cb->on_token && cb->on_token(cb->ud, tok)) return EMIT_CANCEL;
    if (tok_is_eog(g->e->vocab, tok) && !g->gp->ignore_eos) {
        res->reason = ENGINE_STOP_EOS;
        return EMIT_STOP;
    }
    int len = tok_piece(g->e->vocab, tok, g->piece, PIECE_MAX);
    size_t n = len > PIECE_MAX ? PIECE_MAX : (len > 0 ? (size_t)len : 0);
    if (!forced && constrain_accept(g->con, tok, g->piece, n)) return EMIT_REFUSED;
    int think = tok == g->e->think_open ? 1 : tok == g->e->think_close ? 0 : -1;
    answer_status as = think >= 0 ? answer_think(g->ans, think) : answer_push(g->ans, g->piece, n);
    if (as == ANSWER_OOM) return EMIT_OOM;
    if (as == ANSWER_CANCEL) return EMIT_CANCEL;
    if (as == ANSWER_STOP_SEQUENCE) {
        res->reason = ENGINE_STOP_SEQUENCE;
        res->stop_index = g->ans->text.stop_index;
        return EMIT_STOP;
    }
    if (res->n_generated >= g->gp->max_tokens) {
        res->reason = ENGINE_STOP_MAX_TOKENS;
        return EMIT_STOP;
    }
    if (pos >= g->n_ctx) { /* n_ctx < n_prompt + max_tokens only when the context is full */
        res->reason = ENGINE_STOP_CONTEXT;
        return EMIT_STOP;
    }
    return EMIT_MORE;
}

/* Approximate mode's gate (gp->gate_margin): when the token PK (the
 * backend's pick; NULL: g->logits) decides was decided with layers skipped
 * and its margin is below the gate, every layer gets a KV cache and
 * positions 0..g->pos-1 (the prompt, the answer so far, then the g->pos - g->n_hist tokens EXTRA that follow
 * it) run again at full depth, leaving the last one's logits in g->logits;
 * the request runs at full depth from then on. The prompt runs as one batch
 * and the answer in batches of at most KB_EXACT_ROWS rows, as full depth
 * runs them, so that what follows is what full depth answers after the same
 * tokens (bit for bit on the CPU backend). Returns 0 (not gated), 1 (gated:
 * g->logits holds the full depth's), -1 when the backend failed, -2 when
 * out of memory. */
static int gate(gen *g, const int32_t *extra, const kb_pick *pk) {
    engine_result *res = g->res;
    const model *m = &g->e->model;
    kb_backend *kb = g->e->kb;
    model_state *st = g->st;
    if (g->gp->skip_mode != ENGINE_SKIP_APPROXIMATE || g->gp->gate_margin <= 0 || res->gated_at >= 0 ||
        !res->n_skipped || (pk ? pk->top - pk->second : sampler_margin(g->logits, m->n_vocab)) >= g->gp->gate_margin)
        return 0;
    uint8_t full[MASK_MAX_LAYERS];
    memset(full, 1, sizeof full);
    if (model_state_set_mask(st, m, kb, full, res->error, sizeof res->error)) return -2;
    res->gated_at = res->n_generated;
    res->kv_bytes = st->kv_bytes;
    int step = st->max_rows < KB_EXACT_ROWS ? st->max_rows : KB_EXACT_ROWS, n = 0;
    for (int at = 0; at < g->pos; at += n) {
        int32_t rows[KB_EXACT_ROWS];
        const int32_t *tok = g->hist + at;
        n = at ? (g->pos - at < step ? g->pos - at : step) : res->n_prompt;
        if (at + n > g->n_hist) { /* the answer's end and the extra tokens */
            for (int i = 0; i < n; i++) rows[i] = at + i < g->n_hist ? g->hist[at + i] : extra[at + i - g->n_hist];
            tok = rows;
        }
        model_embed(m, kb, st, tok, n);
        model_forward_layers(m, kb, st, n, at, 0, m->n_layers);
        if (kb_error(kb)) return -1;
    }
    model_logits(m, kb, st, n - 1, 1, g->logits);
    return kb_error(kb) ? -1 : 1;
}

/* The token after a step, under the output grammar: from PK, the
 * backend's pick, when not NULL (the logits come to the host only when the
 * backend left the row to it or the grammar refuses its pick), else from
 * g->logits. Returns the id, or -1 (out of memory, or the backend failed:
 * kb_error says so). */
static int32_t take_pick(gen *g, const kb_pick *pk) {
    if (!pk) return constrain_sample(g->con, g->sm, g->logits);
    int32_t tok = pk->id >= 0 ? constrain_picked(g->con, g->sm, pk->id) : CONSTRAIN_REDRAW;
    if (tok != CONSTRAIN_REDRAW) return tok;
    model_logits_fetch(&g->e->model, g->e->kb, g->st, 0, g->logits);
    if (kb_error(g->e->kb)) return -1;
    return pk->id >= 0 ? constrain_redraw(g->con, g->sm, g->logits) : constrain_sample(g->con, g->sm, g->logits);
}

/* One decode step: TOK (the last emitted token), then the tokens the output
 * grammar forces after it (jump-forward), go through the model as one batch
 * at g->pos; OUT gets those forced tokens, then the next sampled one (the
 * caller emits OUT[0..n_out-2] as forced). Returns 0, -1 when the backend
 * failed, -2 when out of memory. */
static int pick_plain(gen *g, int32_t tok, int32_t *out, int *n_out) {
    const model *m = &g->e->model;
    kb_backend *kb = g->e->kb;
    int32_t batch[ENGINE_FORCED_MAX + 1];
    int room = g->gp->max_tokens - g->res->n_generated;
    if (room > g->n_ctx - g->pos - 1) room = g->n_ctx - g->pos - 1;
    int n_forced = constrain_forced(g->con, batch + 1, room < ENGINE_FORCED_MAX ? room : ENGINE_FORCED_MAX);
    batch[0] = tok;
    g->res->n_forced += n_forced;
    arm_kernel_fault(g->e, g->res->n_generated);
    kb_pick pk, *picked = g->dev_pick ? &pk : NULL;
    if (picked) {
        float u = sampler_peek(g->sm);
        model_decode_pick(m, kb, g->st, batch, 1 + n_forced, g->pos, NULL, n_forced, 1, &g->pp, &u, picked);
    } else {
        model_decode(m, kb, g->st, batch, 1 + n_forced, g->pos, NULL, n_forced, 1, g->logits);
    }
    if (kb_error(kb)) return -1;
    g->pos += 1 + n_forced;
    int rc = gate(g, batch + 1, picked);
    if (rc < 0) return rc;
    memcpy(out, batch + 1, (size_t)n_forced * sizeof *out);
    int32_t next = take_pick(g, rc ? NULL : picked); /* gated: g->logits holds full depth's */
    if (kb_error(kb)) return -1;
    out[n_forced] = next;
    *n_out = n_forced + 1;
    return next < 0 ? -2 : 0;
}

/* The draft model (the skip mask) proposes up to K tokens after TOK, one
 * decode step each, stopping after an end-of-generation token; when
 * sampling, their distributions go to g->q. Returns how many, or -1. */
static int draft_layers(gen *g, int32_t tok, int32_t *draft, int k) {
    const model *m = &g->e->model;
    kb_backend *kb = g->e->kb;
    int greedy = g->gp->temperature <= 0, n = 0;
    for (int32_t cur = tok; n < k;) {
        kb_pick pk;
        if (greedy && g->dev_pick)
            model_decode_pick(m, kb, g->st, &cur, 1, g->pos + n, g->spec->mask, 0, 1, &g->pp, NULL, &pk);
        else
            model_decode(m, kb, g->st, &cur, 1, g->pos + n, g->spec->mask, 0, 1, g->logits);
        if (kb_error(kb)) return -1;
        if (greedy) {
            cur = g->dev_pick ? pk.id : sampler_argmax(g->logits, m->n_vocab);
        } else {
            float *q = g->q + (size_t)n * m->n_vocab;
            sampler_probs(g->sm, g->logits, q);
            cur = sampler_draw(g->sm, q, m->n_vocab);
        }
        draft[n++] = cur;
        if (tok_is_eog(g->e->vocab, cur)) break;
    }
    return n;
}

/* The full model scores TOK and the K drafted tokens in one pass (every
 * layer's KV written at g->pos .. g->pos + k); OUT gets the drafted tokens
 * it keeps (*ACCEPTED of them) and one of its own, unless the draft ends
 * with an end-of-generation token that is kept: nothing follows it, so its
 * row is not even computed. Q: the draft's distributions (sampling), or
 * NULL for a certain draft. KV past the kept tokens is left to be
 * overwritten: attention never reads past its own position. Returns 0 or -1. */
static int verify(gen *g, int32_t tok, const int32_t *draft, int k, const float *q, int32_t *out, int *n_out,
                  int *accepted) {
    const model *m = &g->e->model;
    kb_backend *kb = g->e->kb;
    int V = m->n_vocab, a = 0, last_eog = k > 0 && !g->gp->ignore_eos && tok_is_eog(g->e->vocab, draft[k - 1]);
    int n_rows = last_eog ? k : k + 1;
    int32_t rows[SPEC_K_MAX + 1], c = -1;
    kb_pick pk[SPEC_K_MAX + 1]; /* greedy, g->dev_pick: the full model's picks */
    int picked = g->gp->temperature <= 0 && g->dev_pick;
    rows[0] = tok;
    memcpy(rows + 1, draft, (size_t)(n_rows - 1) * sizeof *rows);
    arm_kernel_fault(g->e, g->res->n_generated);
    if (picked) model_decode_pick(m, kb, g->st, rows, n_rows, g->pos, NULL, 0, n_rows, &g->pp, NULL, pk);
    else model_decode(m, kb, g->st, rows, n_rows, g->pos, NULL, 0, n_rows, g->vlogits);
    if (kb_error(kb)) return -1;
    for (; a < k; a++) {
        const float *lg = g->vlogits + (size_t)a * V;
        if (g->gp->temperature <= 0) {
            c = picked ? pk[a].id : sampler_argmax(lg, V);
            if (c != draft[a]) break;
        } else {
            sampler_probs(g->sm, lg, g->p);
            if (!spec_sample_verify(g->sm, g->p, q ? q + (size_t)a * V : NULL, draft[a], V, g->resid, &c)) break;
        }
        out[a] = draft[a];
    }
    *accepted = a;
    if (a == k && last_eog) { /* the answer ends with the draft */
        *n_out = k;
        g->pos += k;
        return 0;
    }
    if (a == k) c = picked ? pk[k].id : sampler_sample(g->sm, g->vlogits + (size_t)k * V);
    out[a] = c;
    *n_out = a + 1;
    g->pos += a + 1;
    return 0;
}

/* Lossless decoding: a draft (n-gram or layers, as the policy says) and its
 * verification, or a plain step. Returns 0 or -1 (backend failure). */
static int pick_speculative(gen *g, int32_t tok, int32_t *out, int *n_out) {
    engine_result *res = g->res;
    int32_t draft[SPEC_K_MAX];
    int room = g->gp->max_tokens - res->n_generated - 1, k;
    if (g->n_ctx - 1 - g->pos < room) room = g->n_ctx - 1 - g->pos;
    /* an n-gram draft: from this request's text or, when that matches
     * fewer tokens, from earlier answers */
    int32_t cached[SPEC_K_MAX];
    int g_own = 0, g_cache = 0, sure = 0;
    int ng = room > 0 ? spec_ngram(g->hist, g->n_hist, draft, SPEC_K_MAX, &g_own) : 0;
    int nc = room > 0 && !g->gp->lookup_off ? spec_lookup_find(&g->e->lookup, g->gp->cache_key, g->hist, g->n_hist,
                                                               cached, SPEC_K_MAX, &g_cache, &sure)
                                            : 0;
    spec_source nsrc = SPEC_NGRAM;
    if (nc > 0 && (g_cache > g_own || (g_cache == g_own && nc > ng))) {
        memcpy(draft, cached, (size_t)nc * sizeof *draft);
        ng = nc;
        nsrc = SPEC_LOOKUP;
    } else {
        sure = 0;
    }
    spec_source src = spec_plan(g->spec, res->n_generated, nsrc, ng, sure, room, &k);
    int rc, accepted = 0;
    if (src == SPEC_PLAIN) {
        rc = pick_plain(g, tok, out, n_out);
        k = 0;
    } else {
        if (src == SPEC_LAYERS) k = draft_layers(g, tok, draft, k);
        rc = k < 0 ? -1 : verify(g, tok, draft, k, src == SPEC_LAYERS ? g->q : NULL, out, n_out, &accepted);
    }
    if (rc) return rc;
    if (src != SPEC_PLAIN) {
        res->n_verifications++;
        res->n_drafted += k;
        res->n_accepted += accepted;
    }
    spec_record(g->spec, src, k, sure, accepted, res->n_generated + *n_out);
    return 0;
}

/* Room for lossless decoding's buffers; 0 or -1. */
static int gen_spec_alloc(gen *g, int V) {
    g->vlogits = malloc((size_t)(SPEC_K_MAX + 1) * V * sizeof *g->vlogits);
    if (!g->vlogits) return -1;
    if (g->gp->temperature <= 0) return 0;
    g->q = malloc((size_t)SPEC_K_MAX * V * sizeof *g->q);
    g->p = malloc((size_t)V * sizeof *g->p);
    g->resid = malloc((size_t)V * sizeof *g->resid);
    return g->q && g->p && g->resid ? 0 : -1;
}

/* Checks the request; 0, or -1 with res->error set (a retry fails the same way). */
static int check_request(const engine *e, const int32_t *prompt, int n_prompt, const engine_gen_params *gp,
                         engine_result *res) {
    if (n_prompt < 1 || gp->max_tokens < 1) {
        snprintf(res->error, sizeof res->error, "empty prompt or max_tokens < 1");
        return -1;
    }
    if (n_prompt >= e->info.n_ctx) {
        snprintf(res->error, sizeof res->error, "prompt of %d tokens does not fit the context of %d tokens", n_prompt,
                 e->info.n_ctx);
        return -1;
    }
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= e->model.n_vocab) {
            snprintf(res->error, sizeof res->error, "token id %d at position %d is out of range", prompt[i], i);
            return -1;
        }
    if (gp->skip_mode < ENGINE_SKIP_APPROXIMATE || gp->skip_mode > ENGINE_SKIP_OFF) {
        snprintf(res->error, sizeof res->error, "unknown layer mode %d", (int)gp->skip_mode);
        return -1;
    }
    return 0;
}

/* ---- the prompt cache (engine/prefix_cache.h) ---- */

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct {
    const engine *e;
    int n_prompt, probing, k;
} cache_want;

/* Accepts an entry a request can start from: KV rows of this engine's
 * shape, at least KB_EXACT_ROWS + 1 prompt rows after it (those rows then
 * take the kernels a whole prompt takes: smaller batches take the
 * batch-invariant path, whose sums may differ in the last bit), and the
 * probe's sums when the request probes. */
static int cache_ok(const pcache_entry *en, void *ud) {
    const cache_want *w = ud;
    const model *m = &w->e->model;
    const probe_sums *s = en->extra;
    if (en->n_layers != m->n_layers || en->row_bytes != kb_kv_bytes(w->e->kv_type, 1, m->kv_dim)) return 0;
    if (w->n_prompt - en->n <= KB_EXACT_ROWS) return 0;
    return !w->probing || (s->valid && s->k == w->k);
}

/* Copies HIT's rows into the layers of ST that have a KV cache and are not
 * LOADED yet. FINAL: ST's layers are the request's final ones, and HIT must
 * have been computed with exactly those (a layer's KV depends on every
 * layer below it: an entry that computed a layer the request skips holds
 * other values for the layers above). Returns 0, or -1 when HIT lacks one
 * of those layers or, when FINAL, holds one more. */
static int cache_load(engine *e, model_state *st, const pcache_entry *hit, uint8_t *loaded, int final) {
    for (int l = 0; final && l < st->n_layers; l++)
        if (hit->has[l] != (st->kv[l].k != NULL)) return -1;
    for (int l = 0; l < st->n_layers; l++) {
        if (!st->kv[l].k || loaded[l]) continue;
        if (!hit->has[l]) return -1;
        e->kb->kv_load(e->kb, &st->kv[l], hit->n, hit->k[l], hit->v[l]);
        loaded[l] = 1;
    }
    return 0;
}

/* Keeps the N-token PROMPT's KV (rows 0..n-1 of every layer ST holds) with
 * the probe's SUMS and KROW. Returns 0, or -1 when nothing was kept (out
 * of memory, or larger than the whole budget). */
static int cache_store(engine *e, const model_state *st, const int32_t *prompt, int n, const engine_gen_params *gp,
                       const probe_sums *sums, const float *krow) {
    const model *m = &e->model;
    uint8_t has[MASK_MAX_LAYERS];
    size_t row = kb_kv_bytes(e->kv_type, 1, m->kv_dim), dim_bytes = (size_t)m->dim * sizeof *krow;
    for (int l = 0; l < m->n_layers; l++) has[l] = st->kv[l].k != NULL;
    pcache_entry *en = pcache_entry_new(gp->cache_key, prompt, n, m->n_layers, has, row, sizeof *sums + dim_bytes);
    if (!en) return -1;
    for (int l = 0; l < m->n_layers; l++) {
        if (!has[l]) continue;
        e->kb->kv_save(e->kb, &st->kv[l], n, en->k[l], en->v[l]);
    }
    memcpy(en->extra, sums, sizeof *sums);
    memcpy((char *)en->extra + sizeof *sums, krow, dim_bytes);
    double now = wall_s();
    en->hinted = gp->cache_hint;
    en->expires = now + (gp->cache_ttl_s > 0 ? gp->cache_ttl_s : 300);
    return pcache_put(e->pcache, en, now);
}

void engine_generate(engine *e, const int32_t *prompt, int n_prompt, const engine_gen_params *gp,
                    const engine_callbacks *cb, engine_result *res) {
    const model *m = &e->model;
    if (gp->skip_mode == ENGINE_SKIP_LOSSLESS) engine_measure_costs(e); /* once: not this request's time */
    double t0 = now_ms();
    memset(res, 0, sizeof *res);
    res->stop_index = -1;
    res->gated_at = -1;
    res->retryable = 1;
    res->n_prompt = n_prompt;
    res->skip_mode = gp->skip_mode;
    if (check_request(e, prompt, n_prompt, gp, res)) {
        invalid(res);
        return;
    }
    /* The KV cache holds the prompt and the answer, never more than the context. */
    long long need = (long long)n_prompt + gp->max_tokens;
    int n_ctx = need < e->info.n_ctx ? (int)need : e->info.n_ctx;
    int k = e->info.probe_k, probing = !gp->layer_mask && e->probe_loaded && gp->skip_mode != ENGINE_SKIP_OFF;
    int lossless = gp->skip_mode == ENGINE_SKIP_LOSSLESS, use_cache = e->pcache && !gp->cache_off;
    const pcache_entry *hit = NULL; /* the kept prompt this one starts with */
    probe_sums sums = {0};
    uint8_t loaded[MASK_MAX_LAYERS] = {0};
    if (use_cache) {
        cache_want w = {e, n_prompt, probing, k};
        hit = pcache_find(e->pcache, gp->cache_key, prompt, n_prompt, wall_s(), cache_ok, &w);
    }

    model_state st;
    sampler sm;
    answer ans;
    spec_state spec;
    constrain *con = NULL;
    gen g = {.e = e, .gp = gp, .cb = cb, .res = res, .st = &st, .sm = &sm, .ans = &ans, .n_ctx = n_ctx, .t0 = t0};
    int have_state = 0, have_sampler = 0, rc;
    g.logits = malloc((size_t)m->n_vocab * sizeof *g.logits);
    g.piece = malloc(PIECE_MAX);
    g.hist = malloc(((size_t)n_ctx + 1) * sizeof *g.hist);
    float *krow = calloc((size_t)m->dim, sizeof *krow); /* the probe's layer-k row of the last prompt token so far */
    answer_init(&ans, gp, chat_tool_syntax_of(e->family), cb);
    if (!g.logits || !g.piece || !g.hist || !krow || (lossless && gen_spec_alloc(&g, m->n_vocab))) goto oom;
    memcpy(g.hist, prompt, (size_t)n_prompt * sizeof *g.hist);
    g.n_hist = n_prompt;
    /* While the probe has not decided, only layers 0..k-1 get a KV cache. */
    uint8_t first[MASK_MAX_LAYERS];
    for (int l = 0; l < m->n_layers; l++) first[l] = probing ? l < k : 1;
    if (gp->layer_mask && gp->skip_mode == ENGINE_SKIP_APPROXIMATE) memcpy(first, gp->layer_mask, (size_t)m->n_layers);
    e->n_requests++;
    kb_error_clear(e->kb);
    if (e->n_requests == e->scratch_fail_request) e->kb->fail_scratch = 1;
    if (e->kv_fail_request && e->n_requests == e->kv_fail_request) {
        snprintf(res->error, sizeof res->error, "out of memory for the KV cache (simulated for testing)");
        res->retryable = 0;
        goto error;
    }
    if (gp->tools || gp->format_schema) {
        const grammar_vocab *gv = grammar_vocab_of(e);
        con = gv ? constrain_new(gp->tools, gp->format_schema, e->family, gv, e->vocab, res->error, sizeof res->error)
                 : NULL;
        if (!gv) snprintf(res->error, sizeof res->error, "out of memory for the output grammar");
        if (!con && res->error[0]) {
            res->retryable = !gv;
            goto error;
        }
        g.con = con;
    }
    /* rows at once: the prompt, a verification (lossless) or a jump-forward batch (a grammar) */
    int max_rows = n_prompt;
    if (lossless && max_rows < SPEC_K_MAX + 1) max_rows = SPEC_K_MAX + 1;
    if (con && max_rows < ENGINE_FORCED_MAX + 1) max_rows = ENGINE_FORCED_MAX + 1;
    if (sampler_init(&sm, m->n_vocab, gp->temperature, gp->top_p, gp->top_k, gp->seed)) goto oom;
    have_sampler = 1;
    g.dev_pick = model_can_pick(m, e->kb);
    g.pp = (kb_pick_params){sm.temperature, sm.top_k, sm.top_p};
restart: /* without the cache, when its entry lacks a layer this request computes */
    if (model_state_init(&st, m, e->kb, n_ctx, max_rows, first, e->kv_type, res->error, sizeof res->error)) {
        res->retryable = 0;
        goto error;
    }
    have_state = 1;
    if (hit && cache_load(e, &st, hit, loaded, !probing)) hit = NULL; /* probing: layers 0..k-1 so far */
    if (hit) {
        memcpy(&sums, hit->extra, sizeof sums);
        memcpy(krow, (const char *)hit->extra + sizeof sums, (size_t)m->dim * sizeof *krow);
    }
    int p = hit ? hit->n : 0, rows = n_prompt - p; /* prompt positions from the cache; rows to prefill */
    res->n_cache_read = p;
    res->n_cache_created = use_cache ? n_prompt - p : 0;
    arm_kernel_fault(e, 0);
    model_embed(m, e->kb, &st, prompt + p, rows);
    rc = decide_mask(e, &st, rows, p, &sums, krow, gp, cb, g.logits, &spec, res);
    if (rc == 0 && hit && cache_load(e, &st, hit, loaded, 1)) {
        model_state_free(&st, e->kb);
        have_state = 0;
        hit = NULL;
        memset(&sums, 0, sizeof sums);
        memset(loaded, 0, sizeof loaded);
        res->n_skipped = 0;
        goto restart;
    }
    if (rc > 0) goto cancel;
    if (rc < 0 && kb_error(e->kb)) goto backend_error;
    if (rc < 0) {
        if (!res->error[0]) snprintf(res->error, sizeof res->error, "out of memory for the layer probe");
        res->retryable = 0;
        goto error;
    }
    /* a grammar's masks and forced tokens apply to plain decoding only: a
     * constrained request decodes plainly in every mode (in lossless mode
     * its output is the full model's all the same) */
    if (lossless && !con) g.spec = &spec;
    res->kv_bytes = st.kv_bytes;
    if (cb->on_start && cb->on_start(cb->ud, res->mask, m->n_layers)) goto cancel;
    rc = prefill_layers(e, &st, rows, p, probing ? k : 0, m->n_layers, gp, cb);
    if (rc > 0) goto cancel;
    if (rc < 0) goto backend_error;
    kb_pick pk, *picked = g.dev_pick ? &pk : NULL;
    if (picked) {
        float u = sampler_peek(&sm);
        model_logits_pick(m, e->kb, &st, rows - 1, &g.pp, &u, picked);
    } else {
        model_logits(m, e->kb, &st, rows - 1, 1, g.logits);
    }
    if (kb_error(e->kb)) goto backend_error;
    g.pos = n_prompt;
    rc = gate(&g, NULL, picked);
    if (rc == -2) goto oom;
    if (rc < 0) goto backend_error;
    res->prefill_ms = now_ms() - t0;

    int32_t tok = take_pick(&g, rc ? NULL : picked);
    if (kb_error(e->kb)) goto backend_error;
    if (tok < 0) goto oom;
    emit_status es = cancelled(gp) ? EMIT_CANCEL : emit_token(&g, tok, g.pos, 0);
    while (es == EMIT_MORE) {
        int32_t out[(SPEC_K_MAX > ENGINE_FORCED_MAX ? SPEC_K_MAX : ENGINE_FORCED_MAX) + 1];
        int n_out;
        if (cancelled(gp)) goto cancel;
        rc = g.spec ? pick_speculative(&g, tok, out, &n_out) : pick_plain(&g, tok, out, &n_out);
        if (rc == -2) goto oom;
        if (rc < 0) goto backend_error;
        for (int i = 0; i < n_out && es == EMIT_MORE; i++)
            es = emit_token(&g, out[i], g.pos - (n_out - 1) + i, g.con && i < n_out - 1);
        tok = out[n_out - 1];
    }
    constrain_stats(con, &res->grammar_ms, &res->n_masks);
    if (es == EMIT_CANCEL) goto cancel;
    if (es == EMIT_OOM) goto oom;
    if (es == EMIT_REFUSED) {
        snprintf(res->error, sizeof res->error, "the output grammar refused a sampled token");
        goto error;
    }
    if (res->reason != ENGINE_STOP_SEQUENCE) {
        answer_status as = answer_finish(&ans);
        if (as == ANSWER_OOM) goto oom;
        if (as == ANSWER_CANCEL) goto cancel;
    }
    res->n_tool_calls = answer_tool_calls(&ans);
    if (res->reason == ENGINE_STOP_EOS && res->n_tool_calls) res->reason = ENGINE_STOP_TOOL_USE;
    if (use_cache && cache_store(e, &st, prompt, n_prompt, gp, &sums, krow)) res->n_cache_created = 0;
    if (!gp->lookup_off) spec_lookup_add(&e->lookup, gp->cache_key, prompt, n_prompt, g.hist + n_prompt, g.n_hist - n_prompt);
    if (g.spec) spec_finish(&spec, res->n_generated, &e->spec_mem);
    goto done;
oom:
    snprintf(res->error, sizeof res->error, "out of memory");
    goto error;
cancel:
    res->reason = ENGINE_STOP_CANCELLED;
    goto done;
backend_error: /* a failed kernel: this request's output is lost, the next one may run */
    snprintf(res->error, sizeof res->error, "the %s backend failed: %s", e->kb->name, kb_error(e->kb));
error:
    res->reason = ENGINE_STOP_ERROR;
done:
    e->kb->fail_at = 0; /* testing faults that did not fire end with their request */
    e->kb->fail_scratch = 0;
    res->total_ms = now_ms() - t0;
    pcache_get_stats(e->pcache, &res->cache);
    if (have_sampler) sampler_free(&sm);
    if (have_state) model_state_free(&st, e->kb);
    answer_free(&ans);
    constrain_free(con);
    free(g.logits);
    free(g.piece);
    free(g.hist);
    free(krow);
    free(g.vlogits);
    free(g.q);
    free(g.p);
    free(g.resid);
}

const char *engine_skip_mode_name(engine_skip_mode m) {
    switch (m) {
    case ENGINE_SKIP_LOSSLESS: return "lossless";
    case ENGINE_SKIP_OFF: return "off";
    case ENGINE_SKIP_APPROXIMATE: break;
    }
    return "approximate";
}

int engine_skip_mode_parse(const char *s) {
    for (int m = ENGINE_SKIP_APPROXIMATE; m <= ENGINE_SKIP_OFF; m++)
        if (s && !strcmp(s, engine_skip_mode_name((engine_skip_mode)m))) return m;
    return -1;
}
