/* config.h - the server's settings: defaults, config file, command line.
 *
 * The config file holds `key = value` lines; `#` starts a comment. Every key
 * and its default is listed in config/ilpd.conf. Command-line flags are read
 * after the file, so they win. `api_key` may repeat; `api_key_sha256` takes
 * the hex SHA-256 of a key, so that the plain key never sits on disk.
 */
#ifndef ILPD_CONFIG_H
#define ILPD_CONFIG_H

#include <stddef.h>

#define CFG_MAX_KEYS 32

typedef struct {
    char *model, *host, *device, *chat_template, *probe, *probe_dir, *log_level;
    int port, ctx, kv_budget_mb, prompt_cache_mb, draft_cache_tokens, threads, queue, strict_model, layer_skip, kv_f16, json_depth;
    int skip_mode;           /* engine_skip_mode of requests without x-layer-mode (lossless) */
    size_t max_body_bytes;
    float hint_max_deviation;
    float skip_gate;         /* approximate mode's gate margin (engine_gen_params.gate_margin; 0: none) */
    int shutdown_grace_s, ping_interval_ms, connection_timeout_s, request_timeout_s, keep_warm_s;
    /* testing: faults injected into the N-th generation (engine_params) */
    int test_kv_fail_request, test_scratch_fail_request, test_kernel_fail_request, test_kernel_fail_token;
    int test_draft_always; /* lossless mode drafts whenever it can (engine_params.spec_always) */
    int rate_limit_rpm, rate_limit_burst; /* requests per minute per key (0: no limit); bucket size */
    unsigned char key_sha256[CFG_MAX_KEYS][32]; /* accepted API keys, hashed */
    int n_keys;
} cfg;

/* Fills C with the defaults. */
void cfg_defaults(cfg *c);
/* Reads the config file PATH into C; returns 0, or -1 with "PATH:LINE: problem" in err. */
int cfg_load_file(cfg *c, const char *path, char *err, size_t errlen);
/* Applies `ilpd serve` flags (ARGV[0] = "serve"). A --config FILE is read
 * first wherever it appears. Returns 0, 1 after printing usage for --help,
 * or -1 with err set. */
int cfg_parse_args(cfg *c, int argc, char **argv, char *err, size_t errlen);
void cfg_free(cfg *c);
/* Prints the serve usage on stderr. */
void cfg_usage(void);

#endif
