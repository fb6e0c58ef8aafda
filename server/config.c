/* config.c - defaults, the key = value config file and `ilpd serve` flags. */
#include "server/config.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"

void cfg_defaults(cfg *c) {
    memset(c, 0, sizeof *c);
    c->host = strdup("127.0.0.1");
    c->device = strdup("auto");
    c->probe_dir = strdup("config/probes");
    c->log_level = strdup("info");
    c->port = 8080;
    c->queue = 32;
    c->kv_budget_mb = 4096;
    c->prompt_cache_mb = 512;
    c->draft_cache_tokens = 65536;
    c->layer_skip = 1;
    c->skip_mode = ENGINE_SKIP_LOSSLESS;
    c->json_depth = 64;
    c->max_body_bytes = 32u << 20;
    c->hint_max_deviation = 0.15f;
    c->skip_gate = ENGINE_GATE_MARGIN;
    c->shutdown_grace_s = 30;
    c->ping_interval_ms = 1000;
    c->connection_timeout_s = 30;
    c->request_timeout_s = 60;
    c->keep_warm_s = 20;
}

void cfg_free(cfg *c) {
    free(c->model);
    free(c->host);
    free(c->device);
    free(c->chat_template);
    free(c->probe);
    free(c->probe_dir);
    free(c->log_level);
    memset(c, 0, sizeof *c);
}

void cfg_usage(void) {
    fprintf(stderr,
            "usage: ilpd serve -m MODEL [--host 127.0.0.1] [--port 8080] [-c CTX] [-t THREADS] [--config FILE]\n"
            "                  [--api-key KEY]... [--api-key-sha256 HEX]... [--device auto|cpu|cuda] [--queue 32]\n"
            "                  [--strict-model] [--chat-template NAME] [--max-body-bytes N] [--layer-skip on|off]\n"
            "                  [--probe FILE] [--probe-dir DIR] [--hint-max-deviation 0.15] [--kv-f16]\n"
            "                  [--skip-mode lossless|approximate|off] [--skip-gate 1.0]\n"
            "                  [--log-level debug|info|warn|error] [--shutdown-grace S] [--request-timeout S]\n"
            "                  [--rate-limit-rpm N] [--rate-limit-burst N] [--keep-warm S] [--kv-budget-mb 4096]\n"
            "                  [--prompt-cache-mb 512] [--draft-cache-tokens 65536]\n"
            "Every option has a config-file key of the same name (dashes become underscores): see config/ilpd.conf.\n");
}

static int set_str(char **dst, const char *v) {
    char *s = strdup(v);
    if (!s) return -1;
    free(*dst);
    *dst = s;
    return 0;
}

/* V as a number in [LO, HI] into *OUT; 0, or -1 (OUT untouched). */
static int parse_float(const char *v, double lo, double hi, float *out) {
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || !(d >= lo && d <= hi)) return -1;
    *out = (float)d;
    return 0;
}

static int parse_long(const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) return -1;
    *out = x;
    return 0;
}

static int parse_bool(const char *v, int *out) {
    if (!strcmp(v, "on") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1")) *out = 1;
    else if (!strcmp(v, "off") || !strcmp(v, "false") || !strcmp(v, "no") || !strcmp(v, "0")) *out = 0;
    else return -1;
    return 0;
}

static int add_key_hash(cfg *c, const unsigned char *digest) {
    if (c->n_keys == CFG_MAX_KEYS) return -1;
    memcpy(c->key_sha256[c->n_keys++], digest, 32);
    return 0;
}

/* Applies one setting; returns 0, or -1 with a reason in WHY. */
static int cfg_set(cfg *c, const char *key, const char *v, const char **why) {
    long x;
    *why = "invalid value";
#define INT_KEY(name, field, lo, hi)                     \
    if (!strcmp(key, name)) {                            \
        if (parse_long(v, lo, hi, &x)) return -1;        \
        c->field = (int)x;                               \
        return 0;                                        \
    }
#define STR_KEY(name, field) \
    if (!strcmp(key, name)) return set_str(&c->field, v);
    STR_KEY("model", model)
    STR_KEY("host", host)
    STR_KEY("device", device)
    STR_KEY("chat_template", chat_template)
    STR_KEY("probe", probe)
    STR_KEY("probe_dir", probe_dir)
    STR_KEY("log_level", log_level)
    INT_KEY("port", port, 0, 65535)
    INT_KEY("ctx", ctx, 0, 1 << 24)
    INT_KEY("kv_budget_mb", kv_budget_mb, 0, 1 << 30)
    INT_KEY("prompt_cache_mb", prompt_cache_mb, 0, 1 << 30)
    INT_KEY("draft_cache_tokens", draft_cache_tokens, 0, 1 << 26)
    INT_KEY("threads", threads, 0, 1024)
    INT_KEY("queue", queue, 1, 100000)
    INT_KEY("json_depth", json_depth, 1, 1000)
    INT_KEY("shutdown_grace", shutdown_grace_s, 0, 3600)
    INT_KEY("ping_interval_ms", ping_interval_ms, 50, 600000)
    INT_KEY("connection_timeout", connection_timeout_s, 1, 3600)
    INT_KEY("request_timeout", request_timeout_s, 1, 3600)
    INT_KEY("keep_warm", keep_warm_s, 0, 86400)
    INT_KEY("rate_limit_rpm", rate_limit_rpm, 0, 1000000)
    INT_KEY("rate_limit_burst", rate_limit_burst, 0, 1000000)
    INT_KEY("test_kv_fail_request", test_kv_fail_request, 0, 1 << 30)
    INT_KEY("test_scratch_fail_request", test_scratch_fail_request, 0, 1 << 30)
    INT_KEY("test_kernel_fail_request", test_kernel_fail_request, 0, 1 << 30)
    INT_KEY("test_kernel_fail_token", test_kernel_fail_token, 0, 1 << 30)
    INT_KEY("test_draft_always", test_draft_always, 0, 1)
#undef INT_KEY
#undef STR_KEY
    if (!strcmp(key, "max_body_bytes")) {
        if (parse_long(v, 1024, 1L << 34, &x)) return -1;
        c->max_body_bytes = (size_t)x;
        return 0;
    }
    if (!strcmp(key, "hint_max_deviation")) return parse_float(v, 0, 1, &c->hint_max_deviation);
    if (!strcmp(key, "skip_gate")) {
        *why = "expected a logit margin from 0 to 100";
        return parse_float(v, 0, 100, &c->skip_gate);
    }
    if (!strcmp(key, "strict_model")) return parse_bool(v, &c->strict_model);
    if (!strcmp(key, "layer_skip")) return parse_bool(v, &c->layer_skip);
    if (!strcmp(key, "skip_mode")) {
        *why = "expected lossless, approximate or off";
        return (c->skip_mode = engine_skip_mode_parse(v)) < 0 ? -1 : 0;
    }
    if (!strcmp(key, "kv_f16")) return parse_bool(v, &c->kv_f16);
    if (!strcmp(key, "api_key")) {
        unsigned char d[32];
        if (!*v) return -1;
        SHA256((const unsigned char *)v, strlen(v), d);
        *why = "too many keys";
        return add_key_hash(c, d);
    }
    if (!strcmp(key, "api_key_sha256")) {
        unsigned char d[32];
        *why = "expects 64 hex digits";
        if (strlen(v) != 64) return -1;
        for (int i = 0; i < 32; i++) {
            unsigned int b;
            if (!isxdigit((unsigned char)v[2 * i]) || !isxdigit((unsigned char)v[2 * i + 1]) || sscanf(v + 2 * i, "%2x", &b) != 1)
                return -1;
            d[i] = (unsigned char)b;
        }
        *why = "too many keys";
        return add_key_hash(c, d);
    }
    *why = "unknown key";
    return -1;
}

static char *trim(char *s) {
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = 0;
    return s;
}

int cfg_load_file(cfg *c, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    char line[4096];
    int lineno = 0, rc = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        char *s = trim(line);
        if (!*s) continue;
        char *eq = strchr(s, '=');
        const char *why = "expected 'key = value'";
        if (eq) {
            *eq = 0;
            if (cfg_set(c, trim(s), trim(eq + 1), &why) == 0) continue;
        }
        snprintf(err, errlen, "%s:%d: %s (%s)", path, lineno, why, eq ? trim(s) : s);
        rc = -1;
        break;
    }
    fclose(f);
    return rc;
}

int cfg_parse_args(cfg *c, int argc, char **argv, char *err, size_t errlen) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--config")) {
            if (i + 1 >= argc) {
                snprintf(err, errlen, "--config needs a file");
                return -1;
            }
            if (cfg_load_file(c, argv[i + 1], err, errlen)) return -1;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cfg_usage();
            return 1;
        }
        const char *key = NULL;
        char name[64];
        if (!strcmp(a, "-m")) key = "model";
        else if (!strcmp(a, "-c")) key = "ctx";
        else if (!strcmp(a, "-t")) key = "threads";
        else if (!strcmp(a, "--strict-model")) {
            c->strict_model = 1;
            continue;
        } else if (!strcmp(a, "--kv-f16")) {
            c->kv_f16 = 1;
            continue;
        } else if (!strncmp(a, "--", 2) && strlen(a) < sizeof name + 2) {
            snprintf(name, sizeof name, "%s", a + 2);
            for (char *p = name; *p; p++)
                if (*p == '-') *p = '_';
            key = name;
        }
        if (!key) {
            snprintf(err, errlen, "unexpected argument '%s'", a);
            return -1;
        }
        if (i + 1 >= argc) {
            snprintf(err, errlen, "%s needs a value", a);
            return -1;
        }
        const char *v = argv[++i], *why;
        if (!strcmp(key, "config")) continue;
        if (cfg_set(c, key, v, &why)) {
            snprintf(err, errlen, "%s %s: %s", a, strcmp(key, "api_key") ? v : "(hidden)", why);
            return -1;
        }
    }
    if (!c->model) {
        snprintf(err, errlen, "a model is required (-m MODEL or 'model = ...' in the config file)");
        return -1;
    }
    return 0;
}
