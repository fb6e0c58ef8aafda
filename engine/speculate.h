/* speculate.h - the policy of lossless decoding (x-layer-mode: lossless).
 *
 * A draft proposes the next few tokens; the full-depth model scores them
 * all in one batched pass (the prefill path, KB_EXACT_ROWS rows at most, so
 * that every row's numbers are those of one-token decoding), and the
 * longest prefix it agrees with plus one token of its own is kept. Three
 * drafts:
 *  - the same weights with a skip mask (self-speculation): the probe's
 *    ranking of the candidate layers says which go first; how many are
 *    skipped follows the acceptance rate;
 *  - n-grams (prompt lookup): the tokens that followed the latest earlier
 *    occurrence of the text's last 2..4 tokens, in the prompt or the answer;
 *  - n-grams of earlier answers (the lookup cache, spec_lookup: llama.cpp's
 *    lookup decoding keeps such a cache), which is where structured answers
 *    find their repeated skeleton ({"category": "...", "confidence": ...}).
 * Greedy decoding keeps a drafted token when it is the full model's argmax;
 * sampling keeps it with probability min(1, p/q) and otherwise draws from
 * the normalised residual max(0, p - q), so that every token has exactly
 * the full model's distribution (spec_sample_verify).
 *
 * Each draft source is used only when it is expected to pay, by a cost
 * model in units of one decode step: a verification of r rows costs
 * vcost[r] (measured once per engine: ilpd bench --verify prints the same
 * table), a layer draft step the share of the weights its mask computes.
 * With a per-token acceptance rate a (a moving average per source; the
 * lookup cache has two, for the tokens its two latest occurrences agree on
 * and for the guesses past them), k drafted tokens yield 1 + a + a^2 + ...
 * + a^k tokens for vcost[k+1] + k draft steps; the source and k with the
 * best yield per cost are chosen, and plain decoding (yield 1 per 1) when
 * none beats it by SPEC_MARGIN. A source left unused is tried again now
 * and then (its rate may have changed), so a request whose drafts are
 * rejected decodes plainly, less a short probe after SPEC_EXPLORE tokens,
 * then 2, 4, ... times as many. The rates and those clocks pass from
 * request to request (spec_memory).
 *
 * This module is bookkeeping and arithmetic only; the generate loop
 * (engine/engine.c) runs the model.
 */
#ifndef ILPD_SPECULATE_H
#define ILPD_SPECULATE_H

#include <stdint.h>

#include "kernels/backend.h"
#include "probe/mask.h"
#include "engine/sampler.h"

#define SPEC_K_MAX (KB_EXACT_ROWS - 1) /* drafted tokens per verification (+1 row: the last kept token) */
#define SPEC_NGRAM_MIN 2
#define SPEC_NGRAM_MAX 4
#define SPEC_SKIP_THRESHOLD 0.75f /* a layer the probe rates below this need is skipped by the first draft */
#define SPEC_MARGIN 1.10          /* expected speed-up a draft must promise over plain decoding */
#define SPEC_EXPLORE 24           /* tokens after which an unused source is tried again */

typedef enum { SPEC_PLAIN, SPEC_NGRAM, SPEC_LOOKUP, SPEC_LAYERS, SPEC_N_SOURCES } spec_source;

/* What drafting costs on this engine, in decode steps. */
typedef struct {
    double vcost[SPEC_K_MAX + 2];  /* vcost[r]: a verification of r rows (vcost[1] = 1) */
    double layer[MASK_MAX_LAYERS]; /* one layer's share of a decode step */
    double head;                   /* the output head's share */
} spec_costs;

/* What the drafts of each source earned, kept from request to request (so
 * that a short answer starts from what earlier ones learnt). Times are on a
 * clock of the tokens that lossless requests generated. */
typedef struct {
    double rate[SPEC_N_SOURCES];           /* moving average of the per-token acceptance (0: the built-in prior);
                                              for SPEC_LOOKUP, of the tokens both latest occurrences agree on */
    double rate_guess;                     /* the same for the lookup's other tokens */
    long long last_used[SPEC_N_SOURCES];   /* clock when the source last drafted */
    int explore_gap[SPEC_N_SOURCES];       /* tokens before an unused source is tried again (0: SPEC_EXPLORE;
                                              doubles while it does not pay) */
    long long clock;
} spec_memory;

typedef struct {
    int n_layers;
    uint8_t mask[MASK_MAX_LAYERS]; /* the draft mask (layer drafts) */
    int order[MASK_MAX_LAYERS];    /* candidate layers, the most skippable first */
    int n_order, n_skip;           /* the first n_skip of ORDER are skipped; n_order 0: the mask is fixed */
    spec_costs cost;
    spec_memory mem;               /* rates and exploration, from and back to the engine's */
    int win_drafted, win_accepted; /* layer drafts since the mask last changed */
    int drafted, accepted, verifications; /* totals (drafts of both sources) */
} spec_state;

/* Starts the policy for a request. MASK (n_layers bytes) is the first draft
 * mask; ORDER/N_ORDER the candidate layers the most skippable first and
 * N_SKIP of them skipped in MASK, or N_ORDER 0 when the mask may not change
 * (forced, or a client's hint applied). A mask that skips nothing means no
 * layer drafts. COST: the engine's costs (copied). MEM: what earlier
 * requests learnt (zeros: nothing yet). */
void spec_init(spec_state *s, int n_layers, const uint8_t *mask, const int *order, int n_order, int n_skip,
               const spec_costs *cost, const spec_memory *mem);

/* At the end of a request that generated N_GENERATED tokens: what it
 * learnt goes back to MEM. */
void spec_finish(const spec_state *s, int n_generated, spec_memory *mem);

/* What to do next, after N_GENERATED tokens: NGRAM_SRC (SPEC_NGRAM or
 * SPEC_LOOKUP: an n-gram draft of NGRAM_LEN tokens is at hand, the first
 * NGRAM_SURE of them agreed on), SPEC_LAYERS (the draft mask skips layers)
 * or SPEC_PLAIN, whichever the cost model expects to be fastest. *K gets
 * the number of tokens to draft (at most ROOM, the tokens that may still be
 * generated minus one). */
spec_source spec_plan(spec_state *s, int n_generated, spec_source ngram_src, int ngram_len, int ngram_sure, int room,
                      int *k);

/* Records a verification from SRC (not SPEC_PLAIN) after N_GENERATED
 * tokens: DRAFTED tokens proposed (the first SURE agreed on, for
 * SPEC_LOOKUP), ACCEPTED of them kept. Adapts the acceptance rates and the
 * draft mask. Returns 1 when the mask changed. */
int spec_record(spec_state *s, spec_source src, int drafted, int sure, int accepted, int n_generated);

/* The expected tokens per decode step's cost of drafting K tokens at
 * acceptance rate A when a draft step costs C and a verification of r
 * rows VCOST[r]. spec_yield2: the first SURE tokens kept at rate A_SURE,
 * the others at A. */
double spec_yield(double a, int k, double c, const double *vcost);
double spec_yield2(double a_sure, int sure, double a, int k, double c, const double *vcost);

/* Prompt lookup: finds the latest earlier occurrence of the last g tokens
 * of HIST (g from SPEC_NGRAM_MAX down to SPEC_NGRAM_MIN) and copies the
 * tokens that followed it (at most MAX_OUT) into OUT. Returns how many;
 * *G (may be NULL) gets g. */
int spec_ngram(const int32_t *hist, int n, int32_t *out, int max_out, int *g);

/* The lookup cache: the latest answers, each after the last tokens of its
 * prompt, cap tokens in a ring (-1 between answers), each token with its
 * tenant, and an index from every g-gram (SPEC_NGRAM_MIN <= g <=
 * SPEC_NGRAM_MAX) to the position after its latest occurrence, which links
 * to the occurrence before. A draft runs to where those two continuations
 * part, and one token further (a label that varies from answer to answer
 * ends the draft). A request only drafts from its own tenant's answers (a
 * draft's speed must not tell one API key what another was answered). */
typedef struct {
    int32_t *tok;    /* cap: the ring */
    uint64_t *owner; /* cap: the tenant of each token */
    int64_t *prev;   /* cap x 3: per gram length, the slot's value before this position took it */
    int64_t *slot;   /* n_slot: 1 + the absolute position after a g-gram; 0: empty */
    int64_t n;       /* tokens written in all (absolute position of the next) */
    int cap, n_slot;
} spec_lookup;

/* Room for CAP tokens (CAP > SPEC_NGRAM_MAX). Returns 0, or -1 when out of memory. */
int spec_lookup_init(spec_lookup *c, int cap);
void spec_lookup_free(spec_lookup *c);

/* Keeps the answer TOK (N tokens) of tenant OWNER after the end of its
 * prompt CTX (N_CTX tokens, of which the last SPEC_NGRAM_MAX - 1 are kept:
 * the grams that start an answer); the oldest tokens make room. */
void spec_lookup_add(spec_lookup *c, uint64_t owner, const int32_t *ctx, int n_ctx, const int32_t *tok, int n);

/* Like spec_ngram over the cache: the tokens that followed the latest kept
 * occurrence (OWNER's) of HIST's last g tokens, g as long as one matches,
 * up to one past where the occurrence before that one differs. Returns how
 * many (at most MAX_OUT) went to OUT; *G gets g and *SURE how many of
 * them the two latest occurrences agree on (0 when there is one). */
int spec_lookup_find(const spec_lookup *c, uint64_t owner, const int32_t *hist, int n, int32_t *out, int max_out,
                     int *g, int *sure);

/* Speculative sampling of one drafted token D. P: the full model's
 * distribution (n values, summing to 1); Q: the draft's, or NULL when the
 * draft was certain (an n-gram: q is one-hot at D). Keeps D with
 * probability min(1, p(D)/q(D)) and returns 1; otherwise writes to *OUT a
 * token drawn from max(0, p - q) normalised (SCRATCH: n floats) and returns
 * 0. Draws from S's generator. */
int spec_sample_verify(sampler *s, const float *p, const float *q, int32_t d, int n, float *scratch, int32_t *out);

#endif
