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
/* Writes the distribution sampler_sample draws from (temperature, top-k,
 * top-p; one-hot at the argmax when greedy) into PROBS (n_vocab values). */
void sampler_probs(sampler *s, const float *logits, float *probs);
/* A uniform number in [0, 1) from the generator. */
float sampler_uniform(sampler *s);
/* The uniform the next draw will use (sampler_sample's, sampler_draw's),
 * without using it up: for a draw made elsewhere (the backend's pick). */
float sampler_peek(const sampler *s);
/* Uses up the uniform sampler_peek gave, as sampler_sample would have
 * (nothing when greedy: greedy draws use none). */
void sampler_took(sampler *s);
/* Draws an index with probability proportional to the weights W (n values,
 * those <= 0 never drawn; at least one positive). */
int sampler_draw(sampler *s, const float *w, int n);
/* The index of the largest of N values (the first one on ties). */
int sampler_argmax(const float *v, int n);
/* The largest of N values (n >= 2) minus the second largest: how sure a
 * greedy choice is (approximate mode's gate). */
float sampler_margin(const float *v, int n);

#endif
