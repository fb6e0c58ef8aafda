/* sampler.h - picks the next token from logits.
 * Temperature 0 is greedy (the first maximum). Otherwise top-k, then
 * softmax at the temperature, then top-p (nucleus), then a draw from a
 * seeded generator: the same seed and logits give the same tokens. */
#ifndef ILPD_SAMPLER_H
#define ILPD_SAMPLER_H

#include <stdint.h>

typedef struct {
    float temperature, top_p;
    int top_k, n_vocab;
    uint64_t state;
    struct sampler_cand *cand; /* n_vocab scratch entries */
} sampler;

/* Returns 0, or -1 when out of memory. */
int sampler_init(sampler *s, int n_vocab, float temperature, float top_p, int top_k, uint64_t seed);
void sampler_free(sampler *s);
/* Returns the chosen token id; LOGITS (n_vocab values) is left unchanged. */
int sampler_sample(sampler *s, const float *logits);
/* The index of the largest of N values (the first one on ties). */
int sampler_argmax(const float *v, int n);

#endif
