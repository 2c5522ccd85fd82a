/* File descriptors: every job keeps its journal segment open (one file, two with
 * --journal-copies 2), and connections, checkpoints and the restore need more. The server
 * raises its soft RLIMIT_NOFILE to the hard limit at start, keeps a reserve for everything but
 * the journals, and creates no job whose journal would eat into that reserve (core.h,
 * journal_fds), so running out of descriptors never stops it accepting connections or probes. */
#ifndef GA_FDLIMIT_H
#define GA_FDLIMIT_H

#include <stdint.h>

typedef struct ga_fd_budget {
    uint64_t before, limit; /* the soft RLIMIT_NOFILE at start, and after the raise */
    uint64_t reserve;       /* kept for connections, checkpoints, the restore: max(256, limit / 4) */
    uint64_t journals;      /* what journals may hold: limit - reserve (0 when the limit is below it) */
} ga_fd_budget;

/* Raises the soft RLIMIT_NOFILE to the hard one (at most 2^20) and splits it. An unlimited or
 * unreadable limit is taken as 2^20. */
ga_fd_budget ga_fd_budget_take(void);

#endif
