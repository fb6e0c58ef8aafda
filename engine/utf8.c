/* utf8.c - UTF-8 validity (utf8.h). */
#include "engine/utf8.h"

int utf8_seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* 1 when the second byte B1 is allowed after the lead byte B0: no overlong
 * 3- and 4-byte forms, no surrogates, nothing past U+10FFFF. */
static int second_ok(unsigned char b0, unsigned char b1) {
    return !((b0 == 0xE0 && b1 < 0xA0) || (b0 == 0xED && b1 >= 0xA0) || (b0 == 0xF0 && b1 < 0x90) ||
             (b0 == 0xF4 && b1 >= 0x90));
}

int utf8_char_may_grow(const unsigned char *s, int n) {
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return n < 2 || second_ok(s[0], s[1]);
}

int utf8_char_valid(const unsigned char *s, int n) { return n == utf8_seq_len(s[0]) && utf8_char_may_grow(s, n); }

size_t utf8_valid_prefix(const char *s, size_t len) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        int n = utf8_seq_len(u[i]);
        if (!n || i + (size_t)n > len || !utf8_char_valid(u + i, n)) break;
        i += (size_t)n;
    }
    return i;
}
