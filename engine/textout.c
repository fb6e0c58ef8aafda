/* textout.c - UTF-8 and stop-string safe incremental text. */
#include "engine/textout.h"

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

/* Length of the UTF-8 sequence starting with byte C (0 if C cannot start one). */
static int seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* 1 if the N bytes at S form one valid (shortest-form, non-surrogate) character. */
static int valid_char(const unsigned char *s, int n) {
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (n == 3 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0))) return 0;
    if (n == 4 && ((s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90))) return 0;
    return 1;
}

/* 1 if the N (< full length) bytes at S can still grow into a valid character. */
static int valid_prefix(const unsigned char *s, int n) {
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (n >= 2 && ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] >= 0xA0) ||
                   (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] >= 0x90)))
        return 0;
    return 1;
}

size_t utf8_valid_prefix(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        int n = seq_len(u[i]);
        if (!n || i + (size_t)n > len || !valid_char(u + i, n)) break;
        i += (size_t)n;
    }
    return i;
}

/* Moves complete characters of tail+BYTES into held; keeps an incomplete end. */
static int absorb(textout *t, const unsigned char *bytes, size_t len) {
    for (size_t i = 0; i < len; i++) {
        t->tail[t->tail_len++] = bytes[i];
        for (;;) {
            int n = seq_len(t->tail[0]);
            if (n && t->tail_len < n && valid_prefix(t->tail, t->tail_len)) break; /* wait for more */
            if (n && t->tail_len == n && valid_char(t->tail, n)) {
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
