/* engine.h - the inference engine as the server and the CLI see it.
 *
 * An engine owns one loaded model (weights in memory the kernel cannot
 * silently drop), its tokenizer and chat template, and one compute backend.
 * It runs one generation at a time: engine_generate() is not reentrant, and
 * the caller (the server's single worker) serialises calls. Everything else
 * here (info, prompt building, token counting) is read-only and may be
 * called from any thread while a generation runs.
 *
 * Layer masks inside the engine are per layer: mask[i] = 1 computes layer i,
 * 0 skips it entirely (no kernel, no KV cache, no weight read). The 32-byte
 * wire form of the HTTP headers is converted by probe/mask.h.
 */
#ifndef ILPD_ENGINE_H
#define ILPD_ENGINE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/chat.h"
#include "engine/prefix_cache.h"
#include "probe/hint.h"
#include "probe/mask.h"


typedef struct engine engine;

typedef enum { ENGINE_DEVICE_AUTO, ENGINE_DEVICE_CPU, ENGINE_DEVICE_CUDA } engine_device;

typedef struct {
    const char *model_path;
    int n_ctx;                 /* 0: the model's context length */
    size_t kv_budget;          /* bytes one request's whole KV cache may take: caps n_ctx (0: no cap) */
    int n_threads;             /* 0: the number of online cores */
    engine_device device;
    const char *chat_template; /* family name overriding the model's, or NULL */
    int kv_f16;                /* 1: KV cache in F16, 0: F32 */
    int layer_skip;            /* 1: use a probe when one matches the model; 0: never skip on our own */
    const char *probe_path;    /* a probe file to use, or NULL to search probe_dir */
    const char *probe_dir;     /* folder of probe files (*.json) matched by the model's SHA-256, or NULL */
    float hint_max_deviation;  /* fraction of layers a hint may change (0.15; probe/hint.h) */
    int probe_k;               /* layers before the probe reads its features, when no probe file sets it
                                  (calibration); 0: probe_default_k; above n_layers-2: engine_open fails */
    /* Testing: faults injected into the N-th generation (0: never), so that
     * tests can see a failure reach the client and the next request run. */
    int kv_fail_request;       /* its KV allocation fails */
    int scratch_fail_request;  /* its backend scratch allocation fails (when it allocates) */
    int kernel_fail_request;   /* a backend operation fails, the first one after ... */
    int kernel_fail_token;     /* ... this many tokens were generated (0: in prefill) */
    /* Testing and `eval --draft-always`: lossless mode drafts whenever it
     * can, as if verifying and drafting cost nothing (its cost model would
     * often decline), and the engine measures no costs at open. */
    int spec_always;
    /* The prompt cache (engine/prefix_cache.h): bytes of recent prompts' KV
     * kept for the requests that start with them (0: off). */
    size_t prompt_cache_bytes;
    /* Lossless mode's lookup cache (engine/speculate.h): tokens of recent
     * answers kept as n-gram drafts for later requests of the same tenant
     * (0: off). */
    int draft_cache_tokens;
    /* Testing: the backend to run on instead of the one DEVICE asks for
     * (NULL: that one). engine_open takes it over, even when it fails. */
    struct kb_backend *backend;
} engine_params;

/* What the layer-skipping machinery did for a request (x-layer-status). */
typedef enum {
    ENGINE_LAYERS_OFF,    /* no probe for this model, or skipping disabled */
    ENGINE_LAYERS_FULL,   /* skipping on, but every layer ran */
    ENGINE_LAYERS_ACTIVE, /* at least one layer skipped */
} engine_layer_status;

typedef struct {
    const char *name;          /* general.name, or the file's base name */
    const char *path;
    const char *arch;          /* general.architecture: a family of engine/arch.h */
    const char *template_family;
    const char *device_name;   /* "cpu" | "cuda:0 (NVIDIA ...)" */
    long long created_at;      /* model file's mtime, unix seconds */
    int n_layers, n_ctx, n_ctx_train, n_vocab, dim, n_heads, n_kv_heads, head_dim, ffn_dim;
    size_t weight_bytes;       /* bytes of weights held in memory */
    size_t layer_bytes[MASK_MAX_LAYERS]; /* weight bytes of each layer */
    size_t head_bytes;         /* weight bytes of the output head (read every token) */
    const char *weight_type;   /* the type of the layers' FFN gate weight: "Q4_K", "BF16", ... */
    int thinking_tags;         /* the vocabulary has <think> and </think>: thoughts are split off */
    int probe_k;               /* layers that always run before the probe decides */
    int probe_loaded;          /* 1 when a probe matched the model and skipping is on */
    const char *probe_path;    /* the probe in use, or NULL */
    char model_sha256[65];     /* "" unless computed (probe search or calibration) */
} engine_info;

typedef enum { ENGINE_ROLE_SYSTEM, ENGINE_ROLE_USER, ENGINE_ROLE_ASSISTANT } engine_role;

/* Tool calls, tool results and tools, as engine/chat.h defines them (its
 * CHAT_PART_* and CHAT_TOOL_CHOICE_* values). */
typedef chat_part engine_part;
typedef chat_tool engine_tool;
typedef chat_toolset engine_tools;

typedef struct {
    engine_role role;
    const char *text;         /* used when n_parts is 0 (NULL = "") */
    const engine_part *parts; /* n_parts > 0: the message is these parts, in order */
    int n_parts;
} engine_message;

typedef enum {
    ENGINE_STOP_EOS,        /* end-of-generation token */
    ENGINE_STOP_MAX_TOKENS,
    ENGINE_STOP_SEQUENCE,   /* a stop string matched: result.stop_index says which */
    ENGINE_STOP_CONTEXT,    /* the context is full */
    ENGINE_STOP_TOOL_USE,   /* the answer made tool calls and ended */
    ENGINE_STOP_CANCELLED,
    ENGINE_STOP_ERROR,      /* result.error says why */
} engine_stop_reason;

/* How layer skipping serves a request (x-layer-mode; README, "Lossless
 * mode"). Zero-initialised parameters get APPROXIMATE, the engine's
 * behaviour before lossless mode existed; the server and the CLI default to
 * LOSSLESS. */
typedef enum {
    ENGINE_SKIP_APPROXIMATE, /* the probe's mask holds for the whole request: answers may change */
    ENGINE_SKIP_LOSSLESS,    /* the masked model drafts, the full model verifies: the full model's answer */
    ENGINE_SKIP_OFF,         /* full depth, no drafts */
} engine_skip_mode;

typedef struct {
    int max_tokens;
    float temperature;          /* 0: greedy */
    float top_p;                /* 1: off */
    int top_k;                  /* 0: off */
    uint64_t seed;
    const char *const *stop;    /* stop strings (non-empty) */
    int n_stop;
    const uint8_t *layer_mask;  /* forced mask (n_layers bytes) bypassing probe and hint, or NULL */
    const uint8_t *hint;        /* the client's hint per layer (n_layers bytes), or NULL when absent */
    int hint_invalid;           /* a hint header was sent but could not be decoded */
    const atomic_int *cancel;   /* checked every token (and every layer of prefill); may be NULL */
    int ignore_eos;             /* benchmarks: an end-of-generation token does not stop generation */
    engine_skip_mode skip_mode;
    /* Tools the answer may call (NULL, no tools or choice NONE: none). Calls
     * are parsed from the answer in the family's syntax and handed to the
     * on_tool_* callbacks instead of on_text; with choice ANY or TOOL the
     * answer is made of calls only, and every call's input is constrained
     * to its tool's input_schema. */
    const engine_tools *tools;
    /* A JSON Schema (text) the answer must be a JSON value of (the Messages
     * API's output_config.format), or NULL. */
    const char *format_schema;
    /* The prompt cache: the tenant (a hash of the API key; 0 without keys),
     * how long the prompt is kept at most (0: 300 s), whether the request
     * marked a prefix with cache_control (kept before unmarked ones), and
     * 1 to neither read nor keep. */
    uint64_t cache_key;
    double cache_ttl_s;
    int cache_hint, cache_off;
    /* 1: the answer neither drafts from the lookup cache nor is kept in it
     * (ilpd eval's reference runs, so that a prompt never drafts from its
     * own answer). */
    int lookup_off;
    /* The request enables thinking (the Messages API's thinking field). A
     * model that thinks between <think> and </think> tokens (Qwen3) has its
     * thoughts handed to on_thinking then, and dropped otherwise: they never
     * reach on_text (engine/answer.h). Thinking tokens count in max_tokens;
     * stop strings do not apply to them. */
    int thinking;
    /* Approximate mode's gate: when a token decided with layers skipped has
     * a top-1/top-2 logit margin below gate_margin, the rest of the answer
     * runs at full depth (every skipped layer's KV is computed then, for the
     * prompt and the answer so far) and that token is decided again. 0: no
     * gate, the mask holds for the whole request. */
    float gate_margin;
} engine_gen_params;

/* The gate margin the server and the CLI use unless told otherwise: on the
 * demo model's held-out structured prompts it keeps 99.7 % of approximate
 * answers identical to full depth (97.0 % without) while skipping nearly
 * as much (README, "Approximate mode's gate"). */
#define ENGINE_GATE_MARGIN 1.0f

typedef struct {
    /* Once, after the layer mask is final and before any text: MASK has
     * n_layers bytes. Return nonzero to cancel. */
    int (*on_start)(void *ud, const uint8_t *mask, int n_layers);
    /* Text as it becomes final: whole UTF-8 characters only, never a byte
     * of a stop string. Return nonzero to cancel. */
    int (*on_text)(void *ud, const char *text, size_t len);
    /* Every sampled token id (the end-of-generation token included), before
     * its text. Return nonzero to cancel. */
    int (*on_token)(void *ud, int32_t id);
    /* A tool call, in order: its start (the tool's name), its input (JSON
     * text, in pieces of whole UTF-8 characters), its end. Return nonzero
     * to cancel. */
    int (*on_tool_start)(void *ud, const char *name);
    int (*on_tool_input)(void *ud, const char *json, size_t len);
    int (*on_tool_end)(void *ud);
    /* The model's thoughts as they become final (whole UTF-8 characters),
     * when gp->thinking; before any text. Return nonzero to cancel. */
    int (*on_thinking)(void *ud, const char *text, size_t len);
    /* During prefill, after each layer: N_DONE of N_TOTAL units of work. */
    void (*on_progress)(void *ud, int n_done, int n_total);
    void *ud;
} engine_callbacks;

typedef struct {
    engine_stop_reason reason;
    int stop_index;             /* for ENGINE_STOP_SEQUENCE */
    int n_prompt, n_generated;
    double ttft_ms, total_ms, prefill_ms;
    double last_token_ms;       /* when the last token was handed on: decode takes last_token_ms - ttft_ms */
    size_t kv_bytes;            /* KV cache bytes this request held */
    uint8_t mask[MASK_MAX_LAYERS]; /* the mask used */
    engine_layer_status layer_status;
    hint_status hint_status;
    float probe_confidence;     /* when the probe ran */
    int n_skipped;              /* layers skipped */
    int n_tool_calls;           /* tool calls the answer made */
    int n_forced;               /* tokens the output grammar forced (jump-forward), within n_generated */
    int n_masks;                /* full token masks the output grammar computed */
    double grammar_ms;          /* time spent applying the output grammar */
    engine_skip_mode skip_mode; /* the mode the request ran in */
    int n_drafted, n_accepted;  /* lossless: drafted tokens, and those the full model kept */
    int n_verifications;        /* lossless: batched verification passes */
    int gated_at;               /* approximate mode: the answer token from which the gate ran every layer, or -1 */
    int retryable;              /* for ENGINE_STOP_ERROR: 0 when a retry fails the same way */
    int n_cache_read;           /* prompt tokens whose KV came from the prompt cache */
    int n_cache_created;        /* prompt tokens newly kept in it */
    pcache_stats cache;         /* the prompt cache after this request */
    char error[256];
} engine_result;

/* Loads the model. Returns a new engine (free with engine_close) or NULL with
 * a message naming the file and the problem in err. */
engine *engine_open(const engine_params *p, char *err, size_t errlen);
void engine_close(engine *e);
const engine_info *engine_get_info(const engine *e);

/* Renders SYSTEM (may be NULL), TOOLS (may be NULL) and the messages with
 * the chat template and tokenizes the result (BOS included when the model
 * adds one). THINKING: the request enables thinking (a template with
 * thinking, Qwen3's, opens the answer with an empty thought otherwise). Consecutive messages of the same role are merged into one turn
 * (their parts in order; texts joined with a blank line). A last assistant
 * message is left open for continuation. Returns the token count and a
 * malloc'd array in *tokens (caller frees), or -1 with err set. */
int engine_prompt_build(const engine *e, const char *system, const engine_tools *tools, const engine_message *msgs,
                        int n_msgs, int thinking, int32_t **tokens, char *err, size_t errlen);

/* Checks that the tools' input schemas and FORMAT_SCHEMA (either may be
 * NULL) can constrain the output (engine/constrain.h). Returns 0, or -1
 * with err naming the problem. */
int engine_check_output(const engine *e, const engine_tools *tools, const char *format_schema, char *err,
                        size_t errlen);

/* Tokenizes raw text (BOS included when the model adds one, special token
 * texts recognised when parse_special). Same ownership as above. */
int engine_tokenize(const engine *e, const char *text, int parse_special, int32_t **tokens);

/* 1 when ID is the model's BOS token. */
int engine_token_is_bos(const engine *e, int32_t id);

/* Generates a continuation of PROMPT. Callbacks run on the calling thread.
 * The outcome is in RES, and only there: res->reason says why generation
 * stopped; ENGINE_STOP_ERROR (invalid arguments, out of memory, a failed
 * kernel) comes with res->error and res->retryable. */
void engine_generate(engine *e, const int32_t *prompt, int n_prompt, const engine_gen_params *gp,
                    const engine_callbacks *cb, engine_result *res);

/* Low-level: runs the forward pass over TOKENS (positions 0..n-1) with MASK
 * (NULL = all layers) and writes the logits of every position to LOGITS
 * (n * n_vocab floats). Used by tests and tools. Returns 0 or -1. */
int engine_forward_logits(engine *e, const int32_t *tokens, int n, const uint8_t *mask, float *logits);

/* Runs a short prompt through every layer and the output head, keeping
 * nothing: called by an idle server now and then so that the first request
 * after a quiet spell finds the weights' page mappings and the kernels'
 * buffers as warm as the previous request left them. Returns 0 or -1. */
int engine_warm(engine *e);

/* Benchmarks: the cost of verifying drafted tokens. After a context of POS
 * tokens, runs REPS passes of ROWS rows (1..ENGINE_VERIFY_ROWS) at positions
 * POS.. through every layer and the output head, as a verification does.
 * Returns the milliseconds of one pass (the mean over REPS passes, the best
 * of 5 such rounds: other work on the machine only adds), or -1. */
double engine_bench_rows(engine *e, int pos, int rows, int reps);
#define ENGINE_VERIFY_ROWS 8 /* rows of one verification at most (KB_EXACT_ROWS) */

/* Measures lossless mode's cost model (what verifying 1..8 rows costs against
 * one decode step: a few dozen passes, once per engine; logged as
 * lossless_costs). The first lossless generation does it when nobody did;
 * a server calls it at start so that no request waits for it. */
void engine_measure_costs(engine *e);

/* Runs layers 0..k-1 over the prompt TOKENS and writes the probe's
 * PROBE_N_FEATURES features (probe/probe_features.h) into FEATURES. Returns 0 or -1. */
int engine_probe_features(engine *e, const int32_t *tokens, int n, float *features);
/* The mask the loaded probe picks for a prompt (full depth when no probe is
 * loaded); writes n_layers bytes and returns the number of skipped layers,
 * or -1. *CONFIDENCE gets the probe's confidence (may be NULL). */
int engine_probe_mask(engine *e, const int32_t *tokens, int n, uint8_t *mask, float *confidence);
/* Computes (once) and returns the hex SHA-256 of the model file, or NULL. */
const char *engine_model_sha256(engine *e);

/* Testing: makes the weights of LAYER unreadable (PROTECT=1) or readable
 * again (0) on the CPU backend, so that a test can prove a skipped layer
 * reads none of them. Returns 0 or -1. */
int engine_debug_protect_layer(engine *e, int layer, int protect);
/* Testing: kernels launched so far on the backend. */
uint64_t engine_debug_launches(engine *e);

/* "off", "full", "active". */
const char *engine_layer_status_name(engine_layer_status s);

/* "approximate", "lossless", "off". */
const char *engine_skip_mode_name(engine_skip_mode m);
/* The mode named S (as above), or -1. */
int engine_skip_mode_parse(const char *s);

/* Human-readable name of a stop reason ("end_turn", "max_tokens", ...). */
const char *engine_stop_reason_name(engine_stop_reason r);

#endif
