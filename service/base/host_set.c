/* Client hosts by address or CIDR block (host_set.h). Addresses are kept as 16 bytes (IPv4 as
 * IPv4-mapped IPv6), so one comparison serves both families. */
#include "host_set.h"

#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ga_alloc.h"

typedef struct {
    uint8_t addr[16];
    unsigned bits; /* prefix length over the 16 bytes (an IPv4 /n is 96 + n) */
} block;

struct ga_host_set {
    block *blocks;
    size_t n;
};

/* text[0..len) as an address into a[16]: IPv4 (mapped) or IPv6. */
static bool parse_addr(const char *text, size_t len, uint8_t a[16], bool *v4)
{
    char buf[INET6_ADDRSTRLEN + 1];
    if (len == 0 || len >= sizeof buf) return false;
    memcpy(buf, text, len);
    buf[len] = '\0';
    struct in_addr in4;
    if (inet_pton(AF_INET, buf, &in4) == 1) {
        static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        memcpy(a, mapped, 12);
        memcpy(a + 12, &in4, 4);
        *v4 = true;
        return true;
    }
    *v4 = false;
    return inet_pton(AF_INET6, buf, a) == 1;
}

static bool in_block(const block *b, const uint8_t a[16])
{
    unsigned whole = b->bits / 8, rest = b->bits % 8;
    if (memcmp(a, b->addr, whole) != 0) return false;
    if (rest == 0) return true;
    uint8_t mask = (uint8_t)(0xff00u >> rest);
    return (a[whole] & mask) == (b->addr[whole] & mask);
}

/* One entry, text[0..len) trimmed: "addr" or "addr/bits". */
static ga_status parse_entry(const char *text, size_t len, block *b, char *why, size_t cap)
{
    const char *slash = memchr(text, '/', len);
    size_t alen = slash ? (size_t)(slash - text) : len;
    bool v4;
    if (!parse_addr(text, alen, b->addr, &v4))
        return ga_status_fail(GA_E_CONFIG, why, cap, "--trusted-client-hosts entry '%.*s': not an IPv4 or IPv6 "
                              "address, nor a CIDR block (address/bits)", (int)(len > 80 ? 80 : len), text);
    unsigned most = v4 ? 32 : 128, bits = most;
    if (slash) {
        const char *d = slash + 1, *end = text + len;
        if (d == end || end - d > 3) goto bad_bits;
        bits = 0;
        for (; d < end; d++) {
            if (*d < '0' || *d > '9') goto bad_bits;
            bits = bits * 10 + (unsigned)(*d - '0');
        }
        if (bits > most) goto bad_bits;
    }
    b->bits = bits + (v4 ? 96 : 0);
    for (unsigned i = b->bits; i < 128; i++) /* host bits must be zero: "10.0.0.1/8" is a typo */
        if (b->addr[i / 8] & (0x80u >> (i % 8)))
            return ga_status_fail(GA_E_CONFIG, why, cap, "--trusted-client-hosts entry '%.*s': bits set after the "
                                  "/%u prefix", (int)(len > 80 ? 80 : len), text, bits);
    return GA_OK;
bad_bits:
    return ga_status_fail(GA_E_CONFIG, why, cap, "--trusted-client-hosts entry '%.*s': the prefix length must be a "
                          "number in [0, %u]", (int)(len > 80 ? 80 : len), text, most);
}

static bool blank(char c)
{
    return c == ' ' || c == '\t';
}

ga_status ga_host_set_parse(const char *text, ga_host_set **out, char *why, size_t cap)
{
    *out = NULL;
    if (!text || !*text) return GA_OK;
    size_t n = 1;
    for (const char *p = text; *p; p++) n += *p == ',';
    if (n > GA_HOST_SET_MAX)
        return ga_status_fail(GA_E_CONFIG, why, cap, "--trusted-client-hosts: %zu entries, at most %u", n,
                              GA_HOST_SET_MAX);
    ga_host_set *s = ga_calloc(1, sizeof *s);
    if (!s || !(s->blocks = ga_calloc(n, sizeof *s->blocks))) {
        ga_free(s);
        return GA_E_NOMEM;
    }
    for (const char *p = text;; p++) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *a = p, *b = end;
        while (a < b && blank(*a)) a++;
        while (b > a && blank(b[-1])) b--;
        ga_status st = a == b ? ga_status_fail(GA_E_CONFIG, why, cap, "--trusted-client-hosts: an empty entry")
                              : parse_entry(a, (size_t)(b - a), &s->blocks[s->n], why, cap);
        if (st != GA_OK) {
            ga_host_set_destroy(s);
            return st;
        }
        s->n++;
        if (!*end) break;
        p = end;
    }
    *out = s;
    return GA_OK;
}

bool ga_host_set_has(const ga_host_set *s, const char *host)
{
    if (!s || !host) return false;
    if (strncmp(host, "ipv4:", 5) == 0) host += 5;
    else if (strncmp(host, "ipv6:", 5) == 0) host += 5;
    size_t len = strlen(host);
    if (len >= 2 && host[0] == '[' && host[len - 1] == ']') host++, len -= 2;
    uint8_t a[16];
    bool v4;
    if (!parse_addr(host, len, a, &v4)) return false;
    for (size_t i = 0; i < s->n; i++)
        if (in_block(&s->blocks[i], a)) return true;
    return false;
}

size_t ga_host_set_size(const ga_host_set *s)
{
    return s ? s->n : 0;
}

void ga_host_set_destroy(ga_host_set *s)
{
    if (!s) return;
    ga_free(s->blocks);
    ga_free(s);
}
