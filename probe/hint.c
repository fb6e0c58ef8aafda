/* hint.c - the hint policy (hint.h). */
#include "probe/hint.h"
#include "probe/mask.h"

#include <string.h>

const char *hint_status_name(hint_status s) {
    switch (s) {
    case HINT_APPLIED: return "applied";
    case HINT_OVERRIDDEN: return "overridden";
    case HINT_INVALID: return "invalid";
    case HINT_ABSENT: break;
    }
    return "absent";
}

hint_status hint_reconcile(const uint8_t *server, const uint8_t *hint, int invalid, int n_layers, int k,
                           float max_deviation, uint8_t *final) {
    memcpy(final, server, (size_t)n_layers);
    if (invalid) return HINT_INVALID;
    if (!hint) return HINT_ABSENT;
    int any = 0, superset = 1, differ = 0;
    for (int l = 0; l < n_layers; l++) any |= hint[l];
    if (!any) return HINT_APPLIED;
    uint8_t wanted[MASK_MAX_LAYERS];
    for (int l = 0; l < n_layers; l++) {
        wanted[l] = hint[l] || l < k || l == n_layers - 1;
        if (server[l] && !wanted[l]) superset = 0;
        differ += (server[l] != 0) != wanted[l];
    }
    if (!superset && differ > (int)(max_deviation * n_layers + 1e-6)) return HINT_OVERRIDDEN;
    memcpy(final, wanted, (size_t)n_layers);
    return HINT_APPLIED;
}
