/* metrics.h - Prometheus metrics (prefix ilpd_, base units, _total counters).
 * Every function is thread-safe. */
#ifndef ILPD_METRICS_H
#define ILPD_METRICS_H

#include <stddef.h>

#include "engine/prefix_cache.h"

void metrics_init(void);
/* A finished HTTP request: its route ("messages", "count_tokens", ...),
 * status and duration. */
void metrics_request(const char *route, int status, double seconds);
/* A finished generation. */
void metrics_generation(int prompt_tokens, int output_tokens, double ttft_s, double decode_s, const char *layer_status,
                        int layers_skipped, const char *hint_status);
/* A finished generation's layer mode ("lossless", "approximate", "off");
 * in lossless mode, its drafted and accepted tokens and verification passes;
 * in approximate mode, GATED: 1 when the gate sent it to full depth. */
void metrics_draft(const char *mode, int drafted, int accepted, int verifications, int gated);
void metrics_queue(int waiting, int running);
void metrics_kv_bytes(size_t bytes);
/* The prompt cache's counts after a request (engine/prefix_cache.h). */
void metrics_prompt_cache(const pcache_stats *s);
/* Writes the exposition text into a malloc'd string (caller frees), or NULL. */
char *metrics_render(const char *model_name, const char *device);

#endif
