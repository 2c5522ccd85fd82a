/* The server's log: one line per event on stderr, "2026-11-21T10:50:13.123Z WARN message", with
 * a process-wide level. Any thread: each line is written with one call, so lines never mix. */
#ifndef GA_LOG_H
#define GA_LOG_H

typedef enum ga_log_level {
    GA_LOG_ERROR = 0,
    GA_LOG_WARN = 1,
    GA_LOG_INFO = 2,
    GA_LOG_DEBUG = 3,
} ga_log_level;

/* Lines above `level` are dropped. Default GA_LOG_INFO. Any thread. */
void ga_log_set_level(ga_log_level level);
ga_log_level ga_log_get_level(void);
/* "error", "warn", "info", "debug"; "?" for a value outside the enum. Static string. */
const char *ga_log_level_name(ga_log_level level);

/* Writes one line (a trailing newline in fmt is not needed; a long line is cut at 4 KiB). */
void ga_log(ga_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
