/* A set of client hosts named by address or CIDR block (--trusted-client-hosts: the hosts the
 * per-host caps do not apply to, e.g. a relay or a NAT). Read-only once parsed: any thread. */
#ifndef GA_HOST_SET_H
#define GA_HOST_SET_H

#include <stdbool.h>
#include <stddef.h>

#include "ga_status.h"

typedef struct ga_host_set ga_host_set;

/* Most entries in one set. */
#define GA_HOST_SET_MAX 1024u

/* Parses text: entries separated by commas (blanks around them ignored), each an IPv4 or IPv6
 * address ("10.0.0.7", "fd00::7") or a CIDR block ("10.0.0.0/8", "fd00::/64"; host bits must be
 * zero). "" gives *out = NULL: the empty set. Refused with GA_E_CONFIG and the entry named in
 * why[0..cap): anything else, an empty entry, more than GA_HOST_SET_MAX entries. GA_E_NOMEM. */
ga_status ga_host_set_parse(const char *text, ga_host_set **out, char *why, size_t cap);

/* Whether host is in s: host as a gRPC peer's host reads (ga_peer_host: "ipv4:10.0.0.7",
 * "ipv6:[fd00::7]"), or a bare address. An IPv4-mapped IPv6 address ("::ffff:10.0.0.7") is its
 * IPv4 address. Any other host (a Unix socket) is in no set; NULL s is the empty set. */
bool ga_host_set_has(const ga_host_set *s, const char *host);

/* Entries in s (0 for NULL). */
size_t ga_host_set_size(const ga_host_set *s);

void ga_host_set_destroy(ga_host_set *s);

#endif
