/* model.h - a Llama-block transformer (the families of engine/arch.h): weights, hyper-parameters and the
 * forward pass over a per-request layer mask.
 *
 * The forward pass is layer-major: model_forward_layers() runs a range of
 * layers over every row of the residual stream, so that the generate loop
 * can stop after the first K layers of the prompt (for the probe) and go on
 * with the mask it decides. A masked layer is never touched: no kernel, no
 * KV cache (model_state_init allocates none for it), no weight read.
 */
#ifndef ILPD_MODEL_H
#define ILPD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"
#include "engine/arch.h"
#include "engine/gguf.h"

typedef struct {
    kb_weight attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
    kb_weight bq, bk, bv; /* q/k/v biases (qwen2; has_bias) */
    kb_weight q_norm, k_norm; /* per-head Q/K RMSNorm, head_dim values (qwen3; has_qk_norm) */
    kb_weight post_attn_norm, post_ffn_norm; /* norms of each half's output, dim values (gemma3; has_post_norm) */
    int has_bias, has_qk_norm, has_post_norm;
    int swa;              /* 1: a sliding-window layer (attends with model.attn_swa) */
    size_t bytes;         /* weight bytes of this layer */
} model_layer;

typedef struct {
    char arch[16];
    const model_arch *family; /* what differs from the Llama block (engine/arch.h) */
    int n_layers, dim, n_heads, n_kv_heads, head_dim, ffn_dim, n_vocab, n_ctx_train;
    int q_dim, kv_dim;
    int n_rot;            /* rotated dimensions of a head (rope.dimension_count; head_dim unless partial) */
    float eps;
    kb_attn_shape attn;   /* heads, rope mode and inverse frequencies */
    float *inv_freq;      /* n_rot/2 values, owned (LongRoPE: with the short factors) */
    float *inv_freq_long; /* LongRoPE: with the long factors, owned (NULL otherwise) */
    int rope_orig_ctx;    /* the context the rope was trained for (LongRoPE: long factors beyond it) */
    kb_attn_shape attn_swa; /* the sliding-window layers' (window > 0 when there are any) */
    float *inv_freq_swa;  /* their head_dim/2 values, owned (NULL without such layers) */
    float embed_scale;    /* the embedding is multiplied by this (1: not scaled) */
    float logit_softcap;  /* > 0: logits become c tanh(logit / c) */
    kb_weight tok_embd, output_norm, output;
    model_layer *layers;
    void *weights_mem;    /* every weight, in anonymous memory */
    size_t weights_bytes;
} model;

/* Reads hyper-parameters and weights of F into M (weights are copied into
 * anonymous memory and handed to the backend). Returns 0, or -1 with
 * "FILE: problem" in err. */
int model_load(model *m, const gguf_file *f, kb_backend *kb, char *err, size_t errlen);
void model_free(model *m, kb_backend *kb);
/* Testing: makes the host copy of layer L's weights unreadable (PROTECT=1)
 * or readable again (0); any read of a protected layer crashes. 0 or -1. */
int model_layer_protect(model *m, int l, int protect);

/* Per-request state: residual stream, scratch and the KV cache of the
 * computed layers. */
typedef struct {
    int n_layers, n_ctx, max_rows;
    int chunk, logit_rows;  /* rows per operation (the backend's prompt_rows), rows of logits at once */
    kb_kv_type kv_type;
    uint8_t *mask;          /* n_layers bytes */
    kb_kv *kv;              /* per layer; k and v NULL for a skipped layer */
    size_t kv_bytes;
    float *x;               /* [max_rows][dim] residual stream */
    float *xb, *q, *k, *v, *att, *hb, *hb2; /* [chunk][...] scratch */
    float *logits;          /* [logit_rows][n_vocab] */
} model_state;

/* Allocates the state for up to N_CTX positions, MAX_ROWS rows processed at
 * once, and MASK (NULL = every layer; copied). Returns 0 or -1 (out of
 * memory, with err set). */
int model_state_init(model_state *s, const model *m, kb_backend *kb, int n_ctx, int max_rows, const uint8_t *mask,
                     kb_kv_type kv_type, char *err, size_t errlen);
void model_state_free(model_state *s, kb_backend *kb);
/* The backend bytes model_state_init takes for N_CTX positions, MAX_ROWS
 * rows and MASK (NULL: every layer): KV cache, activations and the
 * backend's scratch (kb->scratch_bytes, counted whole). */
size_t model_state_bytes(const model *m, kb_backend *kb, int n_ctx, int max_rows, const uint8_t *mask,
                         kb_kv_type kv_type);
/* The longest context up to N_CTX whose fullest request (a prompt of the
 * whole context, every layer) takes at most ROOM bytes; 0 when not even 2
 * positions fit. */
int model_context_fit(const model *m, kb_backend *kb, int n_ctx, kb_kv_type kv_type, size_t room);
/* Changes the mask for the layers that have not run yet (the probe's
 * decision): frees the KV cache of skipped layers and allocates it for
 * layers turned on. Returns 0, or -1 (out of memory, err set). */
int model_state_set_mask(model_state *s, const model *m, kb_backend *kb, const uint8_t *mask, char *err,
                         size_t errlen);

/* Tells M the context it serves: LongRoPE models rotate with their long
 * factors when N_CTX exceeds rope.scaling.original_context_length (as
 * llama.cpp decides from its context), else with the short ones. */
void model_set_context(model *m, int n_ctx);
/* Embeds TOKENS into rows 0..n-1 of the residual stream. */
void model_embed(const model *m, kb_backend *kb, model_state *s, const int32_t *tokens, int n);
/* Runs layers [l0, l1) (those the mask computes) over rows 0..n-1, which
 * are positions pos0..pos0+n-1. */
void model_forward_layers(const model *m, kb_backend *kb, model_state *s, int n, int pos0, int l0, int l1);
/* Final norm and output head for rows [r0, r0+n) of the residual stream;
 * writes n * n_vocab logits into HOST_OUT (host memory). */
void model_logits(const model *m, kb_backend *kb, model_state *s, int r0, int n, float *host_out);
/* A decode step: TOKENS (n of them) at positions pos0.. through every
 * layer the mask computes (and, when DRAFT (n_layers bytes) is not NULL,
 * only those it computes too: the draft model of lossless decoding, which
 * writes the KV of those layers only; the verification that follows
 * rewrites every layer's KV at those positions), then the logits of
 * rows [r0, r0+nl) into HOST_OUT, as model_embed, model_forward_layers and
 * model_logits would; the backend gets it as one step (kb_step_begin: a
 * recording it may replay) when n and nl fit one. */
void model_decode(const model *m, kb_backend *kb, model_state *s, const int32_t *tokens, int n, int pos0,
                  const uint8_t *draft, int r0, int nl, float *host_out);
/* 1 when the backend can pick tokens itself (model_decode_pick): it has
 * kb->pick and the family's logits are not soft-capped. */
int model_can_pick(const model *m, const kb_backend *kb);
/* model_decode, but the backend picks each of the NL rows' next token as
 * PP says (kb->pick, with the uniforms U when sampling) into OUT, and only
 * the picks cross to the host; the logits stay for model_logits_fetch
 * until the next operation. Only when model_can_pick, and NL at most
 * s->logit_rows (else a recorded failure). */
void model_decode_pick(const model *m, kb_backend *kb, model_state *s, const int32_t *tokens, int n, int pos0,
                       const uint8_t *draft, int r0, int nl, const kb_pick_params *pp, const float *u, kb_pick *out);
/* model_logits of row R0 alone, but the backend picks its next token
 * (as model_decode_pick does) and the logits stay there. */
void model_logits_pick(const model *m, kb_backend *kb, model_state *s, int r0, const kb_pick_params *pp,
                       const float *u, kb_pick *out);
/* Row R of the logits the last model_decode_pick (model_logits_pick) left, to HOST_OUT
 * (n_vocab floats, soft-capped as model_logits's). */
void model_logits_fetch(const model *m, kb_backend *kb, model_state *s, int r, float *host_out);

#endif
