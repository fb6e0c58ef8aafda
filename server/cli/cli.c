/* cli.c - the command-line tools generate, tokenize, inspect and logits,
 * and the dispatch of every command but serve (see cli.h). */
#include "server/cli/cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/arch.h"
#include "engine/engine.h"
#include "engine/gguf.h"
#include "engine/log.h"
#include "probe/mask.h"

typedef struct {
    const char *model, *prompt, *system, *mask_b64, *mask_list, *tokens, *out, *chat_template, *probe;
    engine_skip_mode skip_mode;
    float gate;          /* approximate mode's gate margin */
    int n_predict, n_ctx, n_threads, chat, no_bos, kv_f16, top_k;
    float temp, top_p;
    unsigned long long seed;
    const char *stop[16];
    int n_stop;
    const char *text;
    engine_device device;
} cli_opts;

static const char generate_usage[] =
    "  ilpd generate -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K] [--top-p P] [--seed S]\n"
    "                [--layer-mask BASE64 | --mask 1,0,...] [--chat] [--system TEXT] [--stop STR]...\n"
    "                [-c CTX] [-t THREADS] [--skip-mode lossless|approximate|off] [--skip-gate 1.0] [--probe PROBE.json]\n";
static const char tokenize_usage[] = "  ilpd tokenize -m MODEL [--no-bos] TEXT\n";
static const char inspect_usage[] = "  ilpd inspect  -m MODEL\n";
static const char logits_usage[] =
    "  ilpd logits   -m MODEL --tokens ID,ID,... [--layer-mask BASE64 | --mask 1,0,...] -o FILE\n";
static const char serve_usage[] = "  ilpd serve    -m MODEL [options]   (ilpd serve --help; see README)\n";

int cli_is_help(const char *arg) { return !strcmp(arg, "-h") || !strcmp(arg, "--help"); }

int cli_device_parse(const char *v, engine_device *d) {
    if (v && !strcmp(v, "cpu")) *d = ENGINE_DEVICE_CPU;
    else if (v && !strcmp(v, "cuda")) *d = ENGINE_DEVICE_CUDA;
    else if (v && !strcmp(v, "auto")) *d = ENGINE_DEVICE_AUTO;
    else {
        fprintf(stderr, "ilpd: --device expects auto, cpu or cuda\n");
        return -1;
    }
    return 0;
}

int cli_usage_print(const char *usage, int help) {
    FILE *out = help ? stdout : stderr;
    fprintf(out, "usage:\n%s", usage);
    return help ? 0 : 2;
}

char *cli_read_file(const char *path, size_t max) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char *text = malloc(max + 1);
    size_t len = text ? fread(text, 1, max, f) : 0;
    int bad = ferror(f);
    fclose(f);
    if (!text || bad) {
        free(text);
        return NULL;
    }
    text[len] = 0;
    return text;
}

double cli_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Every command's usage: on stdout when HELP (returns 0), else on stderr (returns 2). */
static int usage_all(int help) {
    FILE *out = help ? stdout : stderr;
    fprintf(out, "usage:\n%s%s%s%s%s%s%s%s", generate_usage, tokenize_usage, inspect_usage, logits_usage,
            cli_calibrate_usage, cli_eval_usage, cli_bench_usage, serve_usage);
    return help ? 0 : 2;
}

/* Parses a number option; returns 0 or -1 (message printed). */
static int parse_num(const char *opt, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || v < lo || v > hi) {
        fprintf(stderr, "ilpd: %s expects a number in [%g, %g], got '%s'\n", opt, lo, hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Parses the options of generate, tokenize, inspect and logits into O:
 * 0, 1 when help was asked for, -1 on a usage error (message printed). */
static int parse_args(int argc, char **argv, cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->temp = 0.8f;
    o->top_p = 1.0f;
    o->seed = 42;
    o->device = ENGINE_DEVICE_CPU;
    o->skip_mode = ENGINE_SKIP_LOSSLESS;
    o->gate = ENGINE_GATE_MARGIN;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
#define NEED_VALUE()                                                   \
    do {                                                               \
        if (!v) {                                                      \
            fprintf(stderr, "ilpd: %s needs a value\n", a);            \
            return -1;                                                 \
        }                                                              \
        i++;                                                           \
    } while (0)
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) { NEED_VALUE(); o->model = v; }
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) { NEED_VALUE(); o->prompt = v; }
        else if (!strcmp(a, "--system")) { NEED_VALUE(); o->system = v; }
        else if (!strcmp(a, "--layer-mask")) { NEED_VALUE(); o->mask_b64 = v; }
        else if (!strcmp(a, "--mask")) { NEED_VALUE(); o->mask_list = v; }
        else if (!strcmp(a, "--probe")) { NEED_VALUE(); o->probe = v; }
        else if (!strcmp(a, "--skip-mode")) {
            NEED_VALUE();
            int m = engine_skip_mode_parse(v);
            if (m < 0) { fprintf(stderr, "ilpd: --skip-mode expects lossless, approximate or off\n"); return -1; }
            o->skip_mode = (engine_skip_mode)m;
        }
        else if (!strcmp(a, "--skip-gate")) { NEED_VALUE(); if (parse_num(a, v, 0, 100, &d)) return -1; o->gate = (float)d; }
        else if (!strcmp(a, "--tokens")) { NEED_VALUE(); o->tokens = v; }
        else if (!strcmp(a, "-o")) { NEED_VALUE(); o->out = v; }
        else if (!strcmp(a, "--chat-template")) { NEED_VALUE(); o->chat_template = v; }
        else if (!strcmp(a, "--chat")) o->chat = 1;
        else if (!strcmp(a, "--no-bos")) o->no_bos = 1;
        else if (!strcmp(a, "--kv-f16")) o->kv_f16 = 1;
        else if (!strcmp(a, "--device")) {
            NEED_VALUE();
            if (cli_device_parse(v, &o->device)) return -1;
        }
        else if (!strcmp(a, "--stop")) {
            NEED_VALUE();
            if (o->n_stop == 16 || !*v) { fprintf(stderr, "ilpd: up to 16 non-empty --stop strings\n"); return -1; }
            o->stop[o->n_stop++] = v;
        }
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) { NEED_VALUE(); if (parse_num(a, v, 1, 1 << 24, &d)) return -1; o->n_predict = (int)d; }
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) { NEED_VALUE(); if (parse_num(a, v, 0, 1 << 24, &d)) return -1; o->n_ctx = (int)d; }
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) { NEED_VALUE(); if (parse_num(a, v, 0, 1024, &d)) return -1; o->n_threads = (int)d; }
        else if (!strcmp(a, "--temp")) { NEED_VALUE(); if (parse_num(a, v, 0, 100, &d)) return -1; o->temp = (float)d; }
        else if (!strcmp(a, "--top-p")) { NEED_VALUE(); if (parse_num(a, v, 0, 1, &d)) return -1; o->top_p = (float)d; }
        else if (!strcmp(a, "--top-k")) { NEED_VALUE(); if (parse_num(a, v, 0, 1 << 24, &d)) return -1; o->top_k = (int)d; }
        else if (!strcmp(a, "--seed")) { NEED_VALUE(); if (parse_num(a, v, 0, 1.8e19, &d)) return -1; o->seed = (unsigned long long)d; }
        else if (cli_is_help(a)) return 1;
        else if (a[0] == '-' && a[1]) { fprintf(stderr, "ilpd: unknown option '%s'\n", a); return -1; }
        else if (!o->text) o->text = a;
        else { fprintf(stderr, "ilpd: unexpected argument '%s'\n", a); return -1; }
#undef NEED_VALUE
    }
    if (!o->model) {
        fprintf(stderr, "ilpd: -m MODEL is required\n");
        return -1;
    }
    return 0;
}

static engine *open_engine(const cli_opts *o) {
    engine_params p = {.model_path = o->model, .n_ctx = o->n_ctx, .n_threads = o->n_threads, .device = o->device,
                       .chat_template = o->chat_template, .kv_f16 = o->kv_f16, .layer_skip = o->probe != NULL,
                       .probe_path = o->probe};
    char err[512];
    engine *e = engine_open(&p, err, sizeof err);
    if (!e) fprintf(stderr, "ilpd: %s\n", err);
    return e;
}

/* Fills MASK (n_layers bytes) from --layer-mask or --mask; returns 1 when
 * one was given, 0 when not, -1 when invalid (message printed). */
static int cli_mask(const cli_opts *o, int n_layers, uint8_t *mask) {
    if (o->mask_b64) {
        uint8_t wire[MASK_WIRE_BYTES];
        if (mask_decode_b64_for(o->mask_b64, strlen(o->mask_b64), n_layers, wire) != 0) {
            fprintf(stderr, "ilpd: --layer-mask must be the base64 of %d bytes of 0/1\n", MASK_WIRE_BYTES);
            return -1;
        }
        mask_from_wire(wire, n_layers, mask);
        return 1;
    }
    if (o->mask_list) {
        int l = 0;
        for (const char *s = o->mask_list; *s; s++) {
            if (*s == ',') continue;
            if ((*s != '0' && *s != '1') || l >= n_layers) {
                fprintf(stderr, "ilpd: --mask expects %d comma-separated 0/1 values\n", n_layers);
                return -1;
            }
            mask[l++] = (uint8_t)(*s - '0');
        }
        if (l != n_layers) {
            fprintf(stderr, "ilpd: --mask has %d values, the model has %d layers\n", l, n_layers);
            return -1;
        }
        return 1;
    }
    return 0;
}

static int print_text(void *ud, const char *text, size_t len) {
    (void)ud;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;
}

static int cmd_generate(const cli_opts *o) {
    if (!o->prompt) {
        fprintf(stderr, "ilpd: -p PROMPT is required\n");
        return 2;
    }
    engine *e = open_engine(o);
    if (!e) return 1;
    const engine_info *in = engine_get_info(e);
    int rc = 1;
    int32_t *tokens = NULL;
    char err[256];
    uint8_t mask[MASK_MAX_LAYERS];
    int has_mask = cli_mask(o, in->n_layers, mask);
    if (has_mask < 0) goto done;
    int n;
    if (o->chat) {
        engine_message msg = {.role = ENGINE_ROLE_USER, .text = o->prompt};
        n = engine_prompt_build(e, o->system, NULL, &msg, 1, 0, &tokens, err, sizeof err);
    } else {
        n = engine_tokenize(e, o->prompt, 1, &tokens);
        snprintf(err, sizeof err, "the prompt could not be tokenized");
    }
    if (n < 0) {
        fprintf(stderr, "ilpd: %s\n", err);
        goto done;
    }
    if (n >= in->n_ctx) {
        fprintf(stderr, "ilpd: the prompt has %d tokens, which does not fit the context of %d tokens\n", n, in->n_ctx);
        goto done;
    }
    engine_gen_params gp = {.max_tokens = o->n_predict, .temperature = o->temp, .top_p = o->top_p,
                            .top_k = o->top_k, .seed = o->seed, .stop = o->stop, .n_stop = o->n_stop,
                            .layer_mask = has_mask ? mask : NULL, .skip_mode = o->skip_mode,
                            .gate_margin = o->gate};
    engine_callbacks cb = {.on_text = print_text};
    engine_result res;
    engine_generate(e, tokens, n, &gp, &cb, &res);
    if (res.reason == ENGINE_STOP_ERROR) {
        fprintf(stderr, "\nilpd: %s\n", res.error);
        goto done;
    }
    log_msg(LOG_INFO, "generated",
            "%d prompt tokens, %d generated (%s), prefill %.1f ms, %.2f tok/s, KV %zu bytes, mode %s, draft %d/%d in %d verifications, gated at %d",
            n, res.n_generated, engine_stop_reason_name(res.reason), res.prefill_ms,
            res.n_generated > 1 ? (res.n_generated - 1) / ((res.last_token_ms - res.ttft_ms) / 1e3) : 0.0, res.kv_bytes,
            engine_skip_mode_name(res.skip_mode), res.n_accepted, res.n_drafted, res.n_verifications, res.gated_at);
    rc = 0;
done:
    free(tokens);
    engine_close(e);
    return rc;
}

static int cmd_tokenize(const cli_opts *o) {
    if (!o->text) {
        fprintf(stderr, "ilpd: tokenize needs the TEXT argument\n");
        return 2;
    }
    engine *e = open_engine(o);
    if (!e) return 1;
    int32_t *tokens = NULL;
    int n = engine_tokenize(e, o->text, 1, &tokens);
    if (n < 0) {
        fprintf(stderr, "ilpd: the text could not be tokenized\n");
        engine_close(e);
        return 1;
    }
    const engine_info *in = engine_get_info(e);
    (void)in;
    int first = 1;
    for (int i = 0; i < n; i++) {
        if (o->no_bos && i == 0 && engine_token_is_bos(e, tokens[i])) continue;
        printf(first ? "%d" : " %d", tokens[i]);
        first = 0;
    }
    printf("\n");
    free(tokens);
    engine_close(e);
    return 0;
}

/* The rope of the model in F (architecture ARCH): its pairing, base and
 * scaling, as engine/model.c reads them. */
static void print_rope(const gguf_file *f, const char *arch) {
    const model_arch *fam = arch_find(arch);
    char key[96];
    float base = 10000.0f, factor = 1.0f;
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    gguf_kv_get_f32(f, key, &base);
    snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
    gguf_kv_get_f32(f, key, &factor);
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    char *type = gguf_kv_get_str(f, key);
    printf("rope:          %s pairs, base %g", fam && fam->neox ? "neox (i, i+d/2)" : "adjacent (2i, 2i+1)", base);
    if (gguf_tensor_find(f, "rope_factors_long.weight")) {
        float attn = 1.0f;
        int64_t orig = 0;
        snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", arch);
        gguf_kv_get_f32(f, key, &attn);
        snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
        gguf_kv_get_i64(f, key, &orig);
        printf(", LongRoPE (short factors up to %lld positions of context, long beyond; attention factor %g)",
               (long long)orig, attn);
    } else if (gguf_tensor_find(f, "rope_freqs.weight")) printf(", scaled by rope_freqs.weight (Llama 3.1)");
    else if (type && strcmp(type, "none")) printf(", %s scaling x%g", type, factor);
    printf("\n");
    free(type);
}

/* What the family of F (architecture ARCH) does besides the Llama block:
 * Gemma's block shape and its sliding-window layers, as engine/model.c
 * reads them. Prints nothing for the Llama-block families. */
static void print_block(const gguf_file *f, const char *arch, int n_layers) {
    const model_arch *fam = arch_find(arch);
    if (!fam || (!fam->post_norm && !fam->gelu && !fam->embed_scale)) return;
    printf("block:         %s%s%s\n", fam->embed_scale ? "embedding x sqrt(dim), " : "",
           fam->post_norm ? "norms after attention and FFN, " : "", fam->gelu ? "GeGLU (tanh GELU)" : "SwiGLU");
    char key[96];
    int64_t window = 0, period = fam->swa_period;
    float base = 10000.0f;
    snprintf(key, sizeof key, "%s.attention.sliding_window", arch);
    if (!fam->swa_period || gguf_kv_get_i64(f, key, &window) != 1 || window <= 0) return;
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    gguf_kv_get_i64(f, key, &period);
    snprintf(key, sizeof key, "%s.rope.freq_base_swa", arch);
    gguf_kv_get_f32(f, key, &base);
    int local = 0;
    for (int l = 0; l < n_layers; l++) local += period == 0 || l % period < period - 1;
    printf("window:        %lld positions on %d of %d layers (rope base %g there, no scaling)\n", (long long)window,
           local, n_layers, base);
}

static int cmd_inspect(const cli_opts *o) {
    char err[512];
    gguf_file *f = gguf_open(o->model, err, sizeof err);
    if (!f) {
        fprintf(stderr, "ilpd: %s\n", err);
        return 1;
    }
    engine *e = open_engine(o);
    if (!e) {
        gguf_close(f);
        return 1;
    }
    const engine_info *in = engine_get_info(e);
    printf("file:          %s (GGUF v%u, %llu tensors, %llu metadata keys)\n", o->model, f->version,
           (unsigned long long)f->n_tensors, (unsigned long long)f->n_kv);
    printf("name:          %s\n", in->name);
    printf("architecture:  %s\n", in->arch);
    printf("layers:        %d\n", in->n_layers);
    printf("embedding:     %d\n", in->dim);
    printf("heads:         %d (kv %d, head size %d)\n", in->n_heads, in->n_kv_heads, in->head_dim);
    printf("ffn:           %d\n", in->ffn_dim);
    printf("attention:     %s%s%s\n", gguf_tensor_find(f, "blk.0.attn_q.bias") ? "q/k/v biases" : "no q/k/v biases",
           gguf_tensor_find(f, "blk.0.attn_q_norm.weight") ? ", q/k RMSNorm per head before rope" : "",
           gguf_tensor_find(f, "blk.0.attn_qkv.weight") ? ", q/k/v fused (attn_qkv, split at load)" : "");
    if (gguf_tensor_find(f, "blk.0.ffn_up.weight") && !gguf_tensor_find(f, "blk.0.ffn_gate.weight"))
        printf("ffn weights:   gate and up fused in ffn_up (split at load)\n");
    print_rope(f, in->arch);
    print_block(f, in->arch, in->n_layers);
    printf("vocab:         %d\n", in->n_vocab);
    printf("context:       %d (trained %d)\n", in->n_ctx, in->n_ctx_train);
    printf("weights:       %zu bytes in memory\n", in->weight_bytes);
    char *tm = gguf_kv_get_str(f, "tokenizer.ggml.model");
    char *pre = gguf_kv_get_str(f, "tokenizer.ggml.pre");
    printf("tokenizer:     %s%s%s%s\n", tm ? tm : "?", pre ? " (pre: " : "", pre ? pre : "", pre ? ")" : "");
    free(tm);
    free(pre);
    printf("chat template: %s%s\n", in->template_family,
           in->thinking_tags ? " (thinking: <think>...</think> become thinking blocks)" : "");
    /* Tensor types, counted. */
    unsigned long long counts[64] = {0};
    for (uint64_t i = 0; i < f->n_tensors; i++)
        if ((unsigned)f->tensors[i].type < 64) counts[f->tensors[i].type]++;
    printf("tensor types: ");
    for (int t = 0; t < 64; t++)
        if (counts[t]) printf(" %s x%llu", ggml_type_name((ggml_type)t), counts[t]);
    printf("\n");
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        printf("  %-32.*s %-5s [%llu", (int)t->name.len, t->name.ptr, ggml_type_name(t->type),
               (unsigned long long)t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++) printf(", %llu", (unsigned long long)t->ne[d]);
        printf("]\n");
    }
    engine_close(e);
    gguf_close(f);
    return 0;
}

static int cmd_logits(const cli_opts *o) {
    if (!o->tokens || !o->out) {
        fprintf(stderr, "ilpd: logits needs --tokens and -o\n");
        return 2;
    }
    engine *e = open_engine(o);
    if (!e) return 1;
    const engine_info *in = engine_get_info(e);
    int rc = 1, n = 0;
    int32_t *ids = malloc((strlen(o->tokens) / 2 + 2) * sizeof *ids);
    float *logits = NULL;
    FILE *fp = NULL;
    uint8_t mask[MASK_MAX_LAYERS];
    int has_mask = cli_mask(o, in->n_layers, mask);
    if (!ids || has_mask < 0) goto done;
    for (const char *s = o->tokens; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || v < 0 || v >= in->n_vocab) {
            fprintf(stderr, "ilpd: --tokens expects ids in [0, %d)\n", in->n_vocab);
            goto done;
        }
        ids[n++] = (int32_t)v;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',') {
            fprintf(stderr, "ilpd: --tokens expects comma-separated ids\n");
            goto done;
        }
    }
    logits = malloc((size_t)n * in->n_vocab * sizeof *logits);
    if (!logits) {
        fprintf(stderr, "ilpd: out of memory\n");
        goto done;
    }
    if (engine_forward_logits(e, ids, n, has_mask ? mask : NULL, logits)) {
        fprintf(stderr, "ilpd: forward pass failed (%d tokens, context %d)\n", n, in->n_ctx);
        goto done;
    }
    fp = fopen(o->out, "wb");
    if (!fp || fwrite(logits, sizeof *logits, (size_t)n * in->n_vocab, fp) != (size_t)n * in->n_vocab) {
        fprintf(stderr, "ilpd: cannot write %s: %s\n", o->out, strerror(errno));
        goto done;
    }
    rc = 0;
done:
    if (fp && fclose(fp)) rc = 1;
    free(ids);
    free(logits);
    engine_close(e);
    return rc;
}

typedef struct {
    const char *name, *usage;
    int (*run)(int argc, char **argv); /* the commands with their own options */
    int (*run_opts)(const cli_opts *o); /* the commands of parse_args */
} cli_command;

static const cli_command commands[] = {
    {"generate", generate_usage, NULL, cmd_generate},
    {"tokenize", tokenize_usage, NULL, cmd_tokenize},
    {"inspect", inspect_usage, NULL, cmd_inspect},
    {"logits", logits_usage, NULL, cmd_logits},
    {"calibrate", cli_calibrate_usage, cli_calibrate, NULL},
    {"eval", cli_eval_usage, cli_eval, NULL},
    {"bench", cli_bench_usage, cli_bench, NULL},
};

int cli_main(int argc, char **argv) {
    if (argc < 2) return usage_all(0);
    const char *cmd = argv[1];
    if (cli_is_help(cmd) || !strcmp(cmd, "help")) return usage_all(1);
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        const cli_command *c = &commands[i];
        if (strcmp(cmd, c->name)) continue;
        if (c->run) return c->run(argc, argv);
        cli_opts o;
        log_set_plain(1);
        int rc = parse_args(argc, argv, &o);
        if (rc) return rc > 0 ? cli_usage_print(c->usage, 1) : 2;
        return c->run_opts(&o);
    }
    fprintf(stderr, "ilpd: unknown command '%s'\n", cmd);
    return usage_all(0);
}
