/* textout.h - turns token pieces into text that is safe to emit.
 *
 * Bytes arrive per token. Emitted text is always valid UTF-8 made of whole
 * characters (an incomplete sequence is held back until it completes;
 * invalid bytes become U+FFFD), and never contains a byte of a stop string:
 * any tail that could be the start of one is held back until it is known
 * not to be.
 */
#ifndef ILPD_TEXTOUT_H
#define ILPD_TEXTOUT_H

#include <stddef.h>

typedef struct {
    const char *const *stop;
    int n_stop;
    char *held;          /* clean text not yet emitted */
    size_t held_len, held_cap;
    char *out;           /* what the last call emitted */
    size_t out_cap;
    unsigned char tail[4]; /* an incomplete UTF-8 sequence */
    int tail_len;
    int stop_index;      /* the stop string matched, or -1 */
} textout;

void textout_init(textout *t, const char *const *stop, int n_stop);
void textout_free(textout *t);
/* Adds LEN bytes; sets *emit / *emit_len to the text that is now final
 * (valid until the next call). Returns 1 when a stop string matched (the
 * text before it is in *emit and t->stop_index says which), 0 otherwise,
 * -1 when out of memory. */
int textout_push(textout *t, const char *bytes, size_t len, const char **emit, size_t *emit_len);
/* At the end of generation: everything held back becomes final (an
 * incomplete UTF-8 tail becomes U+FFFD). */
void textout_flush(textout *t, const char **emit, size_t *emit_len);


#endif
