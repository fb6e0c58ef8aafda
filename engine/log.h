/* log.h - one JSON object per line on stderr (journald keeps them).
 * Shared by every module; safe to call from any thread. */
#ifndef ILPD_LOG_H
#define ILPD_LOG_H

typedef enum { LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR } log_level;

/* Messages below LEVEL are dropped (default LOG_INFO). */
void log_set_level(log_level level);
/* Plain text lines ("level: msg") instead of JSON, for the interactive CLI. */
void log_set_plain(int plain);
/* Writes {"ts":"…","level":"…","event":EVENT,"msg":"…"} with printf-style MSG. */
void log_msg(log_level level, const char *event, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Writes FIELDS, the members of a JSON object without braces (e.g.
 * "\"status\":200,\"tokens\":5"), prefixed with ts, level and event. */
void log_fields(log_level level, const char *event, const char *fields);

#endif
