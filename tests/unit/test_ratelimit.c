/* test_ratelimit.c - the token buckets of the optional rate limit, on a
 * clock the test controls. (CHECK evaluates its condition twice, so every
 * ratelimit_take happens before it.) */
#include "tests/unit/check.h"
#include "server/ratelimit.h"

int main(void) {
    ratelimit *r1 = ratelimit_create(1, 0, 5), *r2 = ratelimit_create(0, 60, 5), *r3 = ratelimit_create(1, 60, 0.5);
    CHECK(!r1 && !r2 && !r3, "no rate, no bucket or a burst under one request is refused");
    ratelimit *rl = ratelimit_create(2, 60, 3); /* one request a second, bursts of 3 */
    CHECK(rl != NULL, "two buckets of 3 at 60 per minute");
    if (!rl) return 1;
    int a = ratelimit_take(rl, 0, 100.0), b = ratelimit_take(rl, 0, 100.0), c = ratelimit_take(rl, 0, 100.0);
    CHECK(!a && !b && !c, "a full bucket lets a burst of 3 through");
    a = ratelimit_take(rl, 0, 100.0);
    CHECK(a == 1, "the 4th request at once waits 1 s (got %d)", a);
    a = ratelimit_take(rl, 1, 100.0);
    CHECK(a == 0, "the other key's bucket is untouched");
    a = ratelimit_take(rl, 0, 100.5);
    b = ratelimit_take(rl, 0, 101.01);
    CHECK(a == 1 && b == 0, "half a second refills half a request, a second a whole one (%d, %d)", a, b);
    a = ratelimit_take(rl, 0, 1000.0), b = ratelimit_take(rl, 0, 1000.0), c = ratelimit_take(rl, 0, 1000.0);
    int d = ratelimit_take(rl, 0, 1000.0);
    CHECK(!a && !b && !c && d == 1, "a long pause refills no more than the burst");
    a = ratelimit_take(rl, 0, 999.0);
    CHECK(a == 1, "a clock going backwards refills nothing");
    a = ratelimit_take(rl, 7, 1000.0);
    CHECK(a == 1, "an out-of-range key falls back to bucket 0");
    ratelimit_free(rl);
    ratelimit *slow = ratelimit_create(1, 6, 1); /* one request per 10 s */
    if (!slow) return 1;
    a = ratelimit_take(slow, 0, 5.0), b = ratelimit_take(slow, 0, 5.0), c = ratelimit_take(slow, 0, 12.0);
    CHECK(!a && b == 10 && c == 3, "retry-after counts the whole seconds until the next token (%d, %d)", b, c);
    ratelimit_free(slow);
    CHECK_DONE();
}
