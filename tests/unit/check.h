/* check.h - the tiny assertion helpers of the C unit tests.
 * Each CHECK prints "ok - NAME" or "not ok - NAME: detail" (the format
 * tests/run.sh counts) and the program exits 1 when anything failed. */
#ifndef ILPD_CHECK_H
#define ILPD_CHECK_H
#include <stdio.h>
#include <stdlib.h>

static int check_failures;

#define CHECK(cond, ...)                                        \
    do {                                                        \
        int check_ok_ = !!(cond); /* evaluated once */          \
        printf(check_ok_ ? "ok - " : "not ok - ");              \
        if (!check_ok_) check_failures++;                       \
        printf(__VA_ARGS__);                                    \
        if (!check_ok_) printf(" (%s:%d: %s)", __FILE__, __LINE__, #cond); \
        printf("\n");                                           \
        fflush(stdout);                                         \
    } while (0)

#define SKIP(...)                     \
    do {                              \
        printf("skip - ");            \
        printf(__VA_ARGS__);          \
        printf("\n");                 \
    } while (0)

#define CHECK_DONE() return check_failures ? 1 : 0

/* The shared test data folder ($SHARED, default ../shared), or NULL. */
static inline const char *check_shared_dir(void) {
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}
#endif
