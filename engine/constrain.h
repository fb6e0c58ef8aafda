/* constrain.h - what an answer may be, applied token by token.
 *
 * A request's constraint is a grammar (engine/grammar.h) built from its
 * tools and its output format:
 *   - tool_choice any / tool: the answer is one or more calls (one with
 *     disable_parallel_tool_use) in the family's call syntax, each call's
 *     input valid for its tool's input_schema; then the end;
 *   - output format: the answer is a JSON value valid for its schema (or,
 *     with tools under auto, that or calls);
 *   - tools under auto: the answer is free until a call opens (the family's
 *     call_open, or for Llama 3.1 a '{' opening the answer); that call is
 *     then constrained to its end.
 * Sampling draws first and masks only when the drawn token is not allowed
 * (then draws again from the allowed tokens alone, which is the masked
 * distribution exactly). Where the grammar leaves one way on (e.g. the
 * '{"name": "' of a call), those bytes are tokenized and handed back as
 * forced tokens, to be run as one batch (jump-forward).
 */
#ifndef ILPD_CONSTRAIN_H
#define ILPD_CONSTRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "engine/chat.h"
#include "engine/grammar.h"
#include "engine/sampler.h"
#include "engine/tokenizer.h"

typedef struct constrain constrain;

/* The GBNF text of the constraint of TOOLS (may be NULL) and FORMAT_SCHEMA
 * (may be NULL) in FAMILY's call syntax. Returns a malloc'd string, or NULL
 * with err set (a schema that cannot be converted), or NULL with err empty
 * when there is nothing to constrain. *LAZY tells whether it applies from
 * an opening call on (auto) rather than from the start. */
char *constrain_gbnf(const chat_toolset *tools, const char *format_schema, chat_family family, int *lazy, char *err,
                     size_t errlen);

/* The pieces of TV's tokens for grammar_token_mask (control tokens have
 * none). Returns a new vocabulary (grammar_vocab_free), or NULL when out of
 * memory. */
grammar_vocab *constrain_vocab_new(const tok_vocab *tv);

/* The constraint of a request, or NULL: with err empty when it has none,
 * else with err set (a bad schema, out of memory). GV and TV are the
 * engine's (borrowed; they outlive it). */
constrain *constrain_new(const chat_toolset *tools, const char *format_schema, chat_family family,
                         const grammar_vocab *gv, const tok_vocab *tv, char *err, size_t errlen);
void constrain_free(constrain *c);

/* The next token from LOGITS (n_vocab values, left unchanged) under the
 * constraint (C NULL: plain sampling). Returns the id, or -1 when out of
 * memory. */
int32_t constrain_sample(constrain *c, sampler *s, const float *logits);
/* constrain_sample when the first draw, PICKED, was made elsewhere (the
 * backend's pick) with the sampler's next uniform (sampler_peek): uses that
 * uniform up as constrain_sample would and returns PICKED when the
 * constraint allows it (or C is NULL), the end token when the grammar has
 * ended (no uniform used), or CONSTRAIN_REDRAW: the caller hands the
 * logits to constrain_redraw, which draws from the allowed tokens. */
#define CONSTRAIN_REDRAW (-2)
int32_t constrain_picked(constrain *c, sampler *s, int32_t picked);
/* The draw from the allowed tokens of LOGITS after constrain_picked said
 * CONSTRAIN_REDRAW; the id, or -1 when out of memory. */
int32_t constrain_redraw(constrain *c, sampler *s, const float *logits);
/* The answer grew by token TOK whose bytes are PIECE[0..N). Returns 0, or
 * -1 (a token the grammar refuses, out of memory). */
int constrain_accept(constrain *c, int32_t tok, const char *piece, size_t n);
/* Up to CAP tokens the grammar forces next, already accepted; 0 when none. */
int constrain_forced(constrain *c, int32_t *out, int cap);

/* Time spent in the three calls above (ms) and full masks computed. */
void constrain_stats(const constrain *c, double *ms, int *n_masks);

#endif
