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
} model_arch;

/* The family named NAME, or NULL when unsupported. */
const model_arch *arch_find(const char *name);
/* The supported names, comma-separated ("llama, qwen2, qwen3"): for messages. */
const char *arch_names(void);

#endif
