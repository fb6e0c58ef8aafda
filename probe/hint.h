/* hint.h - reconciling a client's x-layer-hint with the server's own mask
 * (README, "Layer skipping: the probe"). The server always has the final word:
 *  - no hint: ABSENT; an undecodable one: INVALID (ignored, never an error);
 *  - all zeros: no preference, APPLIED, the server's mask stands;
 *  - a hint computing every layer the server would compute (a superset):
 *    APPLIED, it can only cost speed;
 *  - otherwise APPLIED when it differs from the server's mask in at most
 *    max_deviation * n_layers layers, else OVERRIDDEN.
 * The always-computed layers (0..k-1 and the last) are added to any hint
 * that is applied.
 */
#ifndef ILPD_HINT_H
#define ILPD_HINT_H

#include <stdint.h>

typedef enum { HINT_ABSENT, HINT_APPLIED, HINT_OVERRIDDEN, HINT_INVALID } hint_status;

/* "absent", "applied", "overridden", "invalid". */
const char *hint_status_name(hint_status s);

/* Writes the mask to use into FINAL (n_layers bytes) and returns the hint's
 * status. SERVER: the server's mask; HINT: per-layer 0/1 or NULL when absent;
 * INVALID: the header was present but not a valid mask; K: the number of
 * leading layers that always run. */
hint_status hint_reconcile(const uint8_t *server, const uint8_t *hint, int invalid, int n_layers, int k,
                           float max_deviation, uint8_t *final);

#endif
