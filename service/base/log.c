/* The server's log: ISO-8601 UTC timestamp, level, message; one write per line (see log.h). The
 * message is escaped whole (ga_text_escape): client strings in it cannot split or forge a line. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, gmtime_r */
#include "log.h"

#include "ga_text.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static atomic_int log_level = GA_LOG_INFO;

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const char *const level_tags[] = {"ERROR", "WARN", "INFO", "DEBUG"};

void ga_log_set_level(ga_log_level level)
{
    atomic_store_explicit(&log_level, (int)level, memory_order_relaxed);
}

ga_log_level ga_log_get_level(void)
{
    return (ga_log_level)atomic_load_explicit(&log_level, memory_order_relaxed);
}

const char *ga_log_level_name(ga_log_level level)
{
    return (unsigned)level <= GA_LOG_DEBUG ? level_names[level] : "?";
}

void ga_log(ga_log_level level, const char *fmt, ...)
{
    if ((unsigned)level > GA_LOG_DEBUG || (int)level > atomic_load_explicit(&log_level, memory_order_relaxed))
        return;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);

    /* The whole line is formatted first and written with one fputs: stdio locks the stream per
     * call, so concurrent lines never interleave. One byte stays free for the newline. */
    char msg[4096], line[4096];
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t len = m < 0 ? 0 : (size_t)m < sizeof msg ? (size_t)m : sizeof msg - 1; /* cut at the buffer's end */
    if (len > 0 && msg[len - 1] == '\n') len--; /* a caller's own newline is not doubled */
    const size_t cap = sizeof line - 1;
    size_t n = strftime(line, cap, "%Y-%m-%dT%H:%M:%S", &tm);
    n += (size_t)snprintf(line + n, cap - n, ".%03ldZ %-5s ", ts.tv_nsec / 1000000L, level_tags[level]);
    n += ga_text_escape(line + n, cap - n, msg, len);
    line[n++] = '\n';
    line[n] = '\0';
    fputs(line, stderr);
}
