/* textout.c - UTF-8 and stop-string safe incremental text. */
#include "engine/textout.h"
#include "engine/utf8.h"

#include <stdlib.h>
#include <string.h>

static const char replacement[] = "\xEF\xBF\xBD"; /* U+FFFD */

void textout_init(textout *t, const char *const *stop, int n_stop) {
    memset(t, 0, sizeof *t);
    t->stop = stop;
    t->n_stop = n_stop;
    t->stop_index = -1;
}

void textout_free(textout *t) {
    free(t->held);
    free(t->out);
    t->held = t->out = NULL;
}

static int held_append(textout *t, const void *p, size_t n) {
    if (t->held_len + n + 1 > t->held_cap) {
        size_t cap = (t->held_len + n + 1) * 2;
        char *h = realloc(t->held, cap);
        if (!h) return -1;
        t->held = h;
        t->held_cap = cap;
    }
    memcpy(t->held + t->held_len, p, n);
    t->held_len += n;
    return 0;
}

/* Moves complete characters of tail+BYTES into held; keeps an incomplete end. */
static int absorb(textout *t, const unsigned char *bytes, size_t len) {
    for (size_t i = 0; i < len; i++) {
        t->tail[t->tail_len++] = bytes[i];
        for (;;) {
            int n = utf8_seq_len(t->tail[0]);
            if (n && t->tail_len < n && utf8_char_may_grow(t->tail, t->tail_len)) break; /* wait for more */
            if (n && t->tail_len == n && utf8_char_valid(t->tail, n)) {
                if (held_append(t, t->tail, (size_t)n)) return -1;
                t->tail_len = 0;
                break;
            }
            /* Invalid: the first byte becomes U+FFFD, the rest is re-examined. */
            if (held_append(t, replacement, 3)) return -1;
            memmove(t->tail, t->tail + 1, (size_t)--t->tail_len);
            if (!t->tail_len) break;
        }
    }
    return 0;
}

/* Moves the first N held bytes to the emit buffer; returns 0 or -1. */
static int release(textout *t, size_t n, const char **emit, size_t *emit_len) {
    if (n + 1 > t->out_cap) {
        char *o = realloc(t->out, n + 1);
        if (!o) return -1;
        t->out = o;
        t->out_cap = n + 1;
    }
    t->out[n] = 0;
    if (n) {
        memcpy(t->out, t->held, n);
        memmove(t->held, t->held + n, t->held_len - n);
        t->held_len -= n;
    }
    *emit = t->out;
    *emit_len = n;
    return 0;
}

int textout_push(textout *t, const char *bytes, size_t len, const char **emit, size_t *emit_len) {
    *emit = "";
    *emit_len = 0;
    if (t->stop_index >= 0) return 1;
    size_t before = t->held_len;
    if (absorb(t, (const unsigned char *)bytes, len)) return -1;
    /* A complete stop string ends the text. Every possible start of one is
     * held back, so a match lies in held text; search from just before the
     * new bytes, earliest match first. */
    size_t best = (size_t)-1;
    for (int s = 0; s < t->n_stop; s++) {
        size_t sl = strlen(t->stop[s]);
        if (!sl || sl > t->held_len) continue;
        size_t from = before >= sl ? before - sl + 1 : 0;
        for (size_t i = from; i + sl <= t->held_len && i < best; i++)
            if (!memcmp(t->held + i, t->stop[s], sl)) {
                best = i;
                t->stop_index = s;
                break;
            }
    }
    if (t->stop_index >= 0) {
        if (release(t, best, emit, emit_len)) return -1;
        t->held_len = 0;
        return 1;
    }
    /* Hold back the longest tail that is a proper prefix of a stop string. */
    size_t keep = 0;
    for (int s = 0; s < t->n_stop; s++) {
        size_t sl = strlen(t->stop[s]);
        if (!sl) continue;
        for (size_t k = sl - 1 < t->held_len ? sl - 1 : t->held_len; k > keep; k--)
            if (!memcmp(t->held + t->held_len - k, t->stop[s], k)) {
                keep = k;
                break;
            }
    }
    return release(t, t->held_len - keep, emit, emit_len);
}

void textout_flush(textout *t, const char **emit, size_t *emit_len) {
    *emit = "";
    *emit_len = 0;
    if (t->stop_index >= 0) return;
    if (t->tail_len && held_append(t, replacement, 3) == 0) t->tail_len = 0;
    if (release(t, t->held_len, emit, emit_len)) {
        *emit = "";
        *emit_len = 0;
    }
}
