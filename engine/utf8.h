/* utf8.h - UTF-8 validity, defined once for the tokenizer, the streamed
 * text and the request parser: RFC 3629 (shortest form, no surrogates,
 * nothing above U+10FFFF). */
#ifndef ILPD_UTF8_H
#define ILPD_UTF8_H

#include <stddef.h>

/* Length of the sequence that byte C starts (1..4), 0 when C cannot start one. */
int utf8_seq_len(unsigned char c);
/* 1 when the N bytes at S (N = utf8_seq_len(S[0])) are one valid character. */
int utf8_char_valid(const unsigned char *s, int n);
/* 1 when the N bytes at S, fewer than their sequence's length, can still
 * grow into a valid character. */
int utf8_char_may_grow(const unsigned char *s, int n);
/* Length of the longest valid UTF-8 prefix of the LEN bytes at S. */
size_t utf8_valid_prefix(const char *s, size_t len);

#endif
