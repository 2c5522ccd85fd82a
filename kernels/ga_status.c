/* Names and messages for ga_status, generated from GA_STATUS_MAP. */
#include "ga_status.h"

#include <stdarg.h>
#include <stdio.h>

const char *ga_status_name(int status)
{
    switch (status) {
#define GA_STATUS_NAME(name, value, msg) \
    case value:                          \
        return "GA_" #name;
        GA_STATUS_MAP(GA_STATUS_NAME)
#undef GA_STATUS_NAME
    }
    return "GA_UNKNOWN";
}

const char *ga_strerror(int status)
{
    switch (status) {
#define GA_STATUS_MSG(name, value, msg) \
    case value:                         \
        return msg;
        GA_STATUS_MAP(GA_STATUS_MSG)
#undef GA_STATUS_MSG
    }
    return "unknown status";
}

ga_status ga_status_fail(ga_status st, char *why, size_t cap, const char *fmt, ...)
{
    if (why && cap > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return st;
}
