/* test_textout.c - UTF-8 holdback and stop strings of the text output. */
#include <string.h>

#include "tests/unit/check.h"
#include "engine/textout.h"
#include "engine/utf8.h"

/* Feeds the pieces one by one; returns the concatenated output and whether a stop matched. */
static int feed(const char *const *stop, int n_stop, const char *const *pieces, int n, char *out, size_t cap,
                int *stop_index, int *split_utf8) {
    textout t;
    textout_init(&t, stop, n_stop);
    size_t len = 0;
    int stopped = 0;
    *split_utf8 = 0;
    for (int i = 0; i < n && !stopped; i++) {
        const char *e;
        size_t el;
        int rc = textout_push(&t, pieces[i], strlen(pieces[i]), &e, &el);
        if (el && utf8_valid_prefix(e, el) != el) *split_utf8 = 1;
        memcpy(out + len, e, el);
        len += el;
        stopped = rc == 1;
    }
    if (!stopped) {
        const char *e;
        size_t el;
        textout_flush(&t, &e, &el);
        memcpy(out + len, e, el);
        len += el;
    }
    out[len] = 0;
    (void)cap;
    *stop_index = t.stop_index;
    textout_free(&t);
    return stopped;
}

int main(void) {
    char out[256];
    int si, split;

    const char *p1[] = {"Hello", " wor", "ld"};
    CHECK(!feed(NULL, 0, p1, 3, out, sizeof out, &si, &split) && !strcmp(out, "Hello world"), "plain text passes");

    /* "é" = C3 A9 and "😀" = F0 9F 98 80 split across pieces. */
    const char *p2[] = {"caf\xC3", "\xA9 ", "\xF0\x9F", "\x98", "\x80!"};
    CHECK(!feed(NULL, 0, p2, 5, out, sizeof out, &si, &split) && !strcmp(out, "caf\xC3\xA9 \xF0\x9F\x98\x80!") && !split,
          "multi-byte characters split across tokens are emitted whole");

    const char *p3[] = {"a\xFF", "b\xC3"};
    CHECK(!feed(NULL, 0, p3, 2, out, sizeof out, &si, &split) && !strcmp(out, "a\xEF\xBF\xBD" "b\xEF\xBF\xBD"),
          "invalid and truncated bytes become U+FFFD");

    const char *stop1[] = {"END"};
    const char *p4[] = {"one E", "N", "D two"};
    CHECK(feed(stop1, 1, p4, 3, out, sizeof out, &si, &split) && !strcmp(out, "one ") && si == 0,
          "a stop string spanning three tokens never reaches the output");

    const char *p5[] = {"one E", "NX", " two"};
    CHECK(!feed(stop1, 1, p5, 3, out, sizeof out, &si, &split) && !strcmp(out, "one ENX two"),
          "a false start of a stop string is released");

    const char *stop2[] = {"xyz", "\n\n"};
    const char *p6[] = {"line\n", "\nnext"};
    CHECK(feed(stop2, 2, p6, 2, out, sizeof out, &si, &split) && !strcmp(out, "line") && si == 1,
          "the second stop string matches and is reported");

    const char *stop3[] = {"bc", "abcd"};
    const char *p7[] = {"xab", "cd"};
    CHECK(feed(stop3, 2, p7, 2, out, sizeof out, &si, &split) && !strcmp(out, "x") && si == 1,
          "the earliest match wins");

    const char *p8[] = {"ab"};
    const char *stop4[] = {"abc"};
    CHECK(!feed(stop4, 1, p8, 1, out, sizeof out, &si, &split) && !strcmp(out, "ab"),
          "a held-back prefix is flushed at the end");

    const char *stop5[] = {"\xC3\xA9"};
    const char *p9[] = {"x\xC3", "\xA9y"};
    CHECK(feed(stop5, 1, p9, 2, out, sizeof out, &si, &split) && !strcmp(out, "x"), "a multi-byte stop string");
    CHECK_DONE();
}
