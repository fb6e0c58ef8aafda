/* measure.h - what `ilpd calibrate` and `ilpd eval` share: their options,
 * the prompt file, and the engine-dependent measuring of prompts (the
 * full-depth reference answer, teacher-forced agreement under a mask).
 *
 * Prompts are JSON lines: {"system": "...", "user": "...", "class": "..."}
 * (rendered with the chat template) or {"prompt": "raw text", "class": ...}.
 * Agreement is measured teacher-forced on the full-depth greedy answer: the
 * fraction of its positions where the masked model's top-1 token equals the
 * full model's.
 */
#ifndef ILPD_CLI_MEASURE_H
#define ILPD_CLI_MEASURE_H

#include <stdint.h>

#include "engine/engine.h"
#include "probe/probe_features.h"

typedef struct {
    char *system, *user, *raw, *cls;
} prompt_spec;

typedef struct {
    const char *model, *data, *out, *probe_path, *ppl_text;
    float target, floor, exact_share; /* exact_share > 0: that share of answers must stay identical (see cli_calibrate) */
    int n_gen, n_threads, json, max_prompts, ctx, beam, k; /* k: 0 = the model's default */
    int no_draft_cache;    /* eval: lossless mode without the lookup cache of earlier answers */
    int draft_always;      /* eval: lossless mode drafts whenever it can (acceptance rates; engine_params.spec_always) */
    float gate;            /* eval: approximate mode's gate margin (engine_gen_params.gate_margin; 0: none) */
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

/* Token ids collected from a generation (on_token), up to CAP. */
typedef struct {
    int32_t *ids;
    int n, cap;
} id_list;

/* Parses the options of `ilpd calibrate` and `ilpd eval` (ARGV[1] is the
 * command) into O. Returns 0, 1 when help was asked for (nothing else
 * checked), -1 on a usage error (message printed). */
int measure_opts_parse(int argc, char **argv, probe_opts *o);

/* Opens O's model on the CPU, with the layer-skip probe (O->probe_path, or
 * the one matching the model) when WITH_PROBE. NULL on error (printed). */
engine *measure_engine_open(const probe_opts *o, int with_probe);

/* Reads the JSONL prompt file at PATH: returns the count, *OUT (owned,
 * measure_prompts_free) holding them, or -1 (message printed; *OUT
 * untouched). */
int measure_prompts_load(const char *path, prompt_spec **out);
void measure_prompts_free(prompt_spec *p, int n);

/* Tokens of a prompt (chat-rendered or raw) into *TOK (owned); count or -1. */
int measure_prompt_tokens(engine *e, const prompt_spec *s, int32_t **tok);

/* An engine on_token callback appending to the id_list UD. */
int measure_id_collect(void *ud, int32_t id);

/* Fills SM: prompt tokens, the full-depth greedy answer (N_GEN tokens at
 * most, its end token included), the full-depth argmax at each answer
 * position, and the probe features. Returns 0 (SM owns its arrays:
 * measure_sample_free) or -1 (SM zeroed). */
int measure_sample_take(engine *e, const prompt_spec *spec, int n_gen, sample *sm);
void measure_sample_free(sample *sm);

/* Teacher-forced agreement of MASK with the full model over the answer of
 * SM: the count of answer positions whose argmax equals the full model's
 * (in *agree, out of sm->n_seq - sm->n_prompt). LOGITS is scratch room for
 * the logits of every position (n_ctx x n_vocab). Returns 0 or -1. */
int measure_agreement(engine *e, const sample *sm, const uint8_t *mask, float *logits, int *agree);

/* MASK (MASK_MAX_LAYERS bytes) gets 1 for every layer of the model. */
void measure_mask_full(const engine_info *in, uint8_t *mask);

#endif
