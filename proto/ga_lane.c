/* Lane job names (ga_lane.h). */
#include "ga_lane.h"

#include <stdio.h>
#include <string.h>

int ga_lane_job_name(const char *job, uint32_t lane, char *buf, size_t cap)
{
    if (lane == 0) return snprintf(buf, cap, "%s", job);
    return snprintf(buf, cap, "%s" GA_LANE_SUFFIX "%u", job, lane);
}

size_t ga_lane_base_len(const char *name, size_t len)
{
    size_t digits = 0;
    while (digits < len && name[len - 1 - digits] >= '0' && name[len - 1 - digits] <= '9') digits++;
    if (digits == 0 || digits > 2) return len; /* GA_LANE_MAX - 1 has at most two digits */
    const char *num = name + len - digits;
    if (num[0] == '0') return len; /* lane 0 has no suffix; no leading zeros */
    unsigned k = 0;
    for (size_t i = 0; i < digits; i++) k = 10 * k + (unsigned)(num[i] - '0');
    if (k >= GA_LANE_MAX) return len;
    size_t slen = sizeof GA_LANE_SUFFIX - 1, rest = len - digits;
    if (rest <= slen || memcmp(name + rest - slen, GA_LANE_SUFFIX, slen) != 0) return len;
    return rest - slen;
}
