/* arch.h - the transformer families the engine runs, as one table.
 *
 * Every supported `general.architecture` is the Llama block (pre-norm
 * attention and SwiGLU FFN around a residual stream) with a few precise
 * differences, and each difference is a field here, so that the loader
 * (engine/model.c) and the forward pass read them instead of comparing
 * names. Adding a family of the same block is one row in arch.c; a family
 * with another block shape (Gemma's post-norms, Phi's fused tensors) needs
 * its own fields first.
 *
 *   llama  Llama 2/3, TinyLlama, Mistral: "normal" rope (adjacent pairs),
 *          q/k/v biases allowed (llama.cpp loads them when present)
 *   qwen2  NEOX rope, q/k/v biases required
 *   qwen3  NEOX rope, no biases, per-head RMSNorm of Q and K before rope
 *          (blk.N.attn_q_norm / attn_k_norm, head_dim values each); the
 *          head size comes from qwen3.attention.key_length and may differ
 *          from embedding_length / head_count
 *   gemma3 Gemma 3 (text): the embedding times sqrt(embedding_length);
 *          RMSNorms around both halves of the block (post_attention_norm
 *          and post_ffw_norm norm each half's output before the residual
 *          add; GGUF norm weights already hold Gemma's 1 + w); Q/K norms;
 *          GeGLU (tanh GELU) FFN; NEOX rope; scores scaled by
 *          1/sqrt(head size), but 1/sqrt(embedding_length / head_count) for
 *          the 62-layer 27B (Gemma's query_pre_attn_scalar, as llama.cpp
 *          decides it); with attention.sliding_window, every layer but each
 *          SWA_PERIOD-th (attention.sliding_window_pattern, default 6) sees
 *          only that many positions and uses rope.freq_base_swa (10000)
 *          without the rope scaling the global layers have; an optional
 *          final_logit_softcapping caps the logits (c tanh(x / c))
 *   phi3   Phi-3, Phi-3.5 mini: the Llama block with fused tensors
 *          (blk.N.attn_qkv: Q, K and V rows; ffn_up: gate rows, then up rows,
 *          no ffn_gate), split into row ranges at load; NEOX rope; LongRoPE
 *          (rope_factors_short/long.weight divide the frequencies, long when
 *          the served context exceeds rope.scaling.original_context_length,
 *          rope.scaling.attn_factor scales the rotation); Phi-4-mini is
 *          this family too (partial rotary: rope.dimension_count below the
 *          head size, which every family accepts; its gpt-4o tokenizer and
 *          template belong to the tokenizer and chat modules)
 */
#ifndef ILPD_ARCH_H
#define ILPD_ARCH_H

typedef enum {
    ARCH_ABSENT,   /* the tensors must not be there (ignored if they are) */
    ARCH_OPTIONAL, /* used when the file has them */
    ARCH_REQUIRED, /* a file without them is refused */
} arch_need;

typedef struct {
    const char *name;      /* general.architecture */
    int neox;              /* rope pairs (x[i], x[i+d/2]) rather than (x[2i], x[2i+1]) */
    arch_need qkv_bias;    /* blk.N.attn_{q,k,v}.bias */
    arch_need qk_norm;     /* blk.N.attn_{q,k}_norm.weight, RMSNorm per head before rope */
    arch_need post_norm;   /* blk.N.post_attention_norm / post_ffw_norm.weight (gemma3) */
    int gelu;              /* FFN gate activation: 1 GELU (tanh form; GeGLU), 0 SiLU (SwiGLU) */
    int embed_scale;       /* 1: the embedding is multiplied by sqrt(embedding_length) */
    int swa_period;        /* > 0: the family may have sliding-window layers, all but every this-many-th */
    int fused;             /* 1: attn_qkv and a gate-up ffn_up may stand for the separate tensors (phi3) */
} model_arch;

/* The family named NAME, or NULL when unsupported. */
const model_arch *arch_find(const char *name);
/* The supported names, comma-separated ("llama, qwen2, qwen3"): for messages. */
const char *arch_names(void);

#endif
