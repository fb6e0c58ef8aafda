/* test_sampler.c - greedy, seeded sampling, top-k and top-p. */
#include <math.h>

#include "tests/unit/check.h"
#include "engine/sampler.h"

int main(void) {
    float logits[6] = {0.1f, 2.0f, 1.9f, -1.0f, 2.0f, 0.0f};
    sampler s;
    CHECK(sampler_init(&s, 6, 0, 1, 0, 1) == 0 && sampler_sample(&s, logits) == 1, "greedy picks the first maximum");
    sampler_free(&s);

    int a[64], b[64], same = 1, varied = 0;
    sampler s1, s2;
    sampler_init(&s1, 6, 1.0f, 1, 0, 1234);
    sampler_init(&s2, 6, 1.0f, 1, 0, 1234);
    for (int i = 0; i < 64; i++) {
        a[i] = sampler_sample(&s1, logits);
        b[i] = sampler_sample(&s2, logits);
        same &= a[i] == b[i];
        varied |= a[i] != a[0];
    }
    CHECK(same, "the same seed gives the same tokens");
    CHECK(varied, "temperature 1 samples more than one token");
    sampler_free(&s1);
    sampler_free(&s2);

    int only_top = 1;
    sampler_init(&s, 6, 1.0f, 1, 2, 7);
    for (int i = 0; i < 200; i++) {
        int t = sampler_sample(&s, logits);
        only_top &= t == 1 || t == 4;
    }
    CHECK(only_top, "top_k 2 keeps the two largest");
    sampler_free(&s);

    float peaked[4] = {10.0f, 0.0f, 0.0f, 0.0f};
    int only_first = 1;
    sampler_init(&s, 4, 1.0f, 0.5f, 0, 9);
    for (int i = 0; i < 200; i++) only_first &= sampler_sample(&s, peaked) == 0;
    CHECK(only_first, "top_p 0.5 keeps only the dominant token");
    sampler_free(&s);

    /* Frequencies follow the softmax at temperature 1. */
    float two[2] = {0.0f, (float)log(3.0)};
    int count1 = 0;
    sampler_init(&s, 2, 1.0f, 1, 0, 99);
    for (int i = 0; i < 4000; i++) count1 += sampler_sample(&s, two) == 1;
    CHECK(count1 > 2800 && count1 < 3200, "sampling frequencies follow the softmax (%d of 4000, expect ~3000)", count1);
    sampler_free(&s);
    CHECK_DONE();
}
