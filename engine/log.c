/* log.c - JSON-lines logger on stderr. */
#include "engine/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static log_level min_level = LOG_INFO;
static int plain_output;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(log_level level) { min_level = level; }
void log_set_plain(int plain) { plain_output = plain; }

/* Writes an RFC 3339 UTC timestamp with milliseconds into BUF. */
static void timestamp(char *buf, size_t n) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    size_t k = strftime(buf, n, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + k, n - k, ".%03ldZ", ts.tv_nsec / 1000000);
}

/* Appends S to OUT as the body of a JSON string (escaped). */
static void json_escape(FILE *out, const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(out, "\\%c", *p);
        else if (*p == '\n') fputs("\\n", out);
        else if (*p < 0x20) fprintf(out, "\\u%04x", *p);
        else fputc(*p, out);
    }
}

/* Each line is formatted in memory and written with one write, so that no
 * other writer to stderr (a library's own message) can land inside it. */
void log_fields(log_level level, const char *event, const char *fields) {
    if (level < min_level) return;
    char ts[40];
    timestamp(ts, sizeof ts);
    char *line = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&line, &len);
    if (!out) return;
    if (plain_output) {
        fprintf(out, "%s: %s %s\n", level_names[level], event, fields);
    } else {
        fprintf(out, "{\"ts\":\"%s\",\"level\":\"%s\",\"event\":\"", ts, level_names[level]);
        json_escape(out, event);
        fprintf(out, "\"%s%s}\n", fields && *fields ? "," : "", fields ? fields : "");
    }
    if (fclose(out) == 0) {
        pthread_mutex_lock(&log_lock);
        fwrite(line, 1, len, stderr);
        fflush(stderr);
        pthread_mutex_unlock(&log_lock);
    }
    free(line);
}

void log_msg(log_level level, const char *event, const char *fmt, ...) {
    if (level < min_level) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (plain_output) {
        log_fields(level, event, msg);
        return;
    }
    char fields[4200];
    size_t k = (size_t)snprintf(fields, sizeof fields, "\"msg\":\"");
    for (const unsigned char *p = (const unsigned char *)msg; *p && k + 8 < sizeof fields; p++) {
        if (*p == '"' || *p == '\\') k += (size_t)snprintf(fields + k, sizeof fields - k, "\\%c", *p);
        else if (*p < 0x20) k += (size_t)snprintf(fields + k, sizeof fields - k, "\\u%04x", *p);
        else fields[k++] = (char)*p;
    }
    snprintf(fields + k, sizeof fields - k, "\"");
    log_fields(level, event, fields);
}
