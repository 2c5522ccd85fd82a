/* base/: what every subsystem may use and which uses nothing of the server's own. Any thread.
 *   log.h     the server's log: one line per event on stderr, with a process-wide level
 *   budget.h  the memory budget (--max-memory-mb) that the core and the streams draw from
 *   blob.h    reference-counted byte blocks, immutable while shared (publications, pull deltas)
 *   host_set.h  client hosts by address or CIDR block (--trusted-client-hosts)
 *   heap.h    the C library heap's policy: arenas, mappings, what a step's frees keep for the next
 * Outside base/, include this header, not its parts.
 * May use: kernels/ (the accounted allocator, statuses), proto/ (ga_tsan.h: sanitizer macros). */
#ifndef GA_BASE_H
#define GA_BASE_H

#include "blob.h"
#include "budget.h"
#include "heap.h"
#include "host_set.h"
#include "log.h"

#endif
