/* grammar.h - constrained decoding: GBNF grammars, JSON Schema -> GBNF, a
 * byte-level pushdown matcher and token masks over a vocabulary trie.
 *
 * All matching is on BYTES (UTF-8 is just bytes here). Character classes are
 * byte classes (`[^"\\\x00-\x1f]`, ranges `a-z`, escapes `\n \t \r \\ \" \]
 * \xNN`); non-ASCII literals are byte sequences.
 *
 * GBNF subset: rules `name ::= alternatives` (names [A-Za-z0-9_-]; a rule may
 * span lines, it ends where the next `name ::=` begins), literals "..",
 * byte classes [..] and [^..], `.` (any byte), grouping (..), alternatives |,
 * postfix * + ? {m} {m,} {m,n}; comments # to the end of the line. An empty
 * alternative matches the empty string. Repetitions become right-recursive
 * helper rules, so `x{0,16}` is a chain of 16 rules (bounded counts keep a
 * model from looping in a number).
 *
 * A grammar is immutable after grammar_parse and can be shared by threads;
 * a grammar_state belongs to one thread at a time and must not outlive its
 * grammar; a grammar_vocab is immutable and shareable.
 */
#ifndef ILPD_GRAMMAR_H
#define ILPD_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

typedef struct grammar grammar;             /* compiled rules: immutable after parse, shareable */
typedef struct grammar_state grammar_state; /* a position of the matcher (set of pushdown stacks) */
typedef struct grammar_vocab grammar_vocab; /* a model's token pieces in a byte trie, built once */

/* Parses GBNF text. The start rule is ROOT (e.g. "root"). Returns a new
 * grammar (free with grammar_free) or NULL with err naming the line and the
 * problem ("line 3: undefined rule 'foo'", "line 1: expected '::='",
 * "line 2: left recursion in rule 'x'", "out of memory"). */
grammar *grammar_parse(const char *gbnf, const char *root, char *err, size_t errlen);
void grammar_free(grammar *g);

/* JSON Schema (the text of a schema object) -> GBNF rules appended to GBNF
 * (a malloc'd string, or NULL to start a new one). The value rule is named
 * NAME; helper rules are named NAME-... so that several conversions can be
 * concatenated with hand-written rules into one grammar. Returns the new text
 * (GBNF was reallocated: do not use it any more), or NULL with err set, in
 * which case GBNF is left as it was and still belongs to the caller.
 * Keywords that only restrict further (format, pattern, minimum, ...) are
 * ignored; an error is given only for what cannot be honoured sensibly (a
 * $ref that does not resolve, an unknown type, allOf with several members
 * that are not all objects, the schema `false`). Output JSON has Python
 * json.dumps spacing: `{"a": 1, "b": [1, 2]}`, `{}`, `[]`. */
char *grammar_json_schema_to_gbnf(char *gbnf, const char *schema_json, const char *name, char *err,
                                  size_t errlen);

/* Matcher. grammar_state_new returns the state at the start of root (free
 * with grammar_state_free), or NULL when out of memory; so does clone. */
grammar_state *grammar_state_new(const grammar *g);
grammar_state *grammar_state_clone(const grammar_state *s);
void grammar_state_free(grammar_state *s);
/* Advances over N bytes. Returns 0, or -1 when the bytes cannot continue the
 * grammar (S unchanged), or -2 out of memory (S unchanged). */
int grammar_state_accept(grammar_state *s, const char *bytes, size_t n);
int grammar_state_done(const grammar_state *s); /* 1 when root can end here */
int grammar_state_more(const grammar_state *s); /* 1 when some byte can follow */
/* The bytes every continuation must start with (jump-forward): writes up to
 * CAP bytes to BUF, returns the count (0 when the next byte is not forced or
 * when the state is done and may end). */
size_t grammar_state_forced(const grammar_state *s, char *buf, size_t cap);

/* Vocabulary: PIECES[i] (LENS[i] bytes) is the exact byte string token i
 * decodes to; NULL / 0 for tokens that never match (control tokens, EOS,
 * empty). The pieces are copied. Returns NULL on OOM. */
grammar_vocab *grammar_vocab_new(int n_vocab, const char *const *pieces, const size_t *lens);
void grammar_vocab_free(grammar_vocab *v);
/* 1 when token ID's bytes can all be accepted from S (0 for an id out of
 * range, an empty piece, or when out of memory). */
int grammar_token_ok(const grammar_state *s, const grammar_vocab *v, int id);
/* ALLOWED[id] = 1 for every token whose bytes can all be accepted from S,
 * else 0 (n_vocab bytes). Returns the number allowed, or -1 on OOM.
 * End-of-generation tokens have no piece: allowing them is the caller's
 * business (when grammar_state_done). Cost: a walk of the trie pruned where
 * bytes are rejected; subtrees that cannot leave the current set (the
 * inside of a string) are accepted whole. Sample first and check the token
 * with grammar_token_ok; compute the mask only when it is rejected. */
int grammar_token_mask(const grammar_state *s, const grammar_vocab *v, uint8_t *allowed);

#endif
