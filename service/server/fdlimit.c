/* The file descriptor budget (fdlimit.h). */
#include "fdlimit.h"

#include <sys/resource.h>

#define MOST ((uint64_t)1 << 20)
#define LEAST_RESERVE 256u

ga_fd_budget ga_fd_budget_take(void)
{
    ga_fd_budget b = {MOST, MOST, 0, 0};
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0) {
        b.before = r.rlim_cur == RLIM_INFINITY || r.rlim_cur > MOST ? MOST : (uint64_t)r.rlim_cur;
        uint64_t hard = r.rlim_max == RLIM_INFINITY || r.rlim_max > MOST ? MOST : (uint64_t)r.rlim_max;
        b.limit = b.before;
        if (hard > b.before) {
            r.rlim_cur = (rlim_t)hard;
            if (setrlimit(RLIMIT_NOFILE, &r) == 0) b.limit = hard;
        }
    }
    b.reserve = b.limit / 4 > LEAST_RESERVE ? b.limit / 4 : LEAST_RESERVE;
    b.journals = b.limit > b.reserve ? b.limit - b.reserve : 0;
    return b;
}
