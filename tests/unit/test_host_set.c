/* host_set.h: --trusted-client-hosts. Addresses and CIDR blocks of both families parse; typos
 * (host bits after the prefix, a prefix too long, an empty entry, a name) are refused naming the
 * entry; membership reads hosts as gRPC peers write them, IPv4-mapped IPv6 as IPv4. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/host_set.h"

static ga_host_set *parse_ok(const char *text)
{
    ga_host_set *s = NULL;
    char why[256] = "";
    assert_int_equal(ga_host_set_parse(text, &s, why, sizeof why), GA_OK);
    return s;
}

static void refused(const char *text, const char *names)
{
    ga_host_set *s = (ga_host_set *)1;
    char why[256] = "";
    assert_int_equal(ga_host_set_parse(text, &s, why, sizeof why), GA_E_CONFIG);
    assert_null(s);
    if (!strstr(why, names)) fail_msg("'%s': message '%s' does not name '%s'", text, why, names);
}

static void test_addresses_and_blocks(void **state)
{
    (void)state;
    ga_host_set *s = parse_ok(" 10.1.2.3 , 192.168.0.0/16,fd00::/64,\t::1 ");
    assert_int_equal(ga_host_set_size(s), 4);
    assert_true(ga_host_set_has(s, "ipv4:10.1.2.3"));
    assert_true(ga_host_set_has(s, "10.1.2.3"));
    assert_false(ga_host_set_has(s, "ipv4:10.1.2.4"));
    assert_true(ga_host_set_has(s, "ipv4:192.168.200.7"));
    assert_false(ga_host_set_has(s, "ipv4:192.169.0.1"));
    assert_true(ga_host_set_has(s, "ipv6:[::ffff:192.168.1.1]")); /* IPv4-mapped: an IPv4 host */
    assert_true(ga_host_set_has(s, "ipv6:[fd00::1234]"));
    assert_false(ga_host_set_has(s, "ipv6:[fd00:0:0:1::1]")); /* outside the /64 */
    assert_true(ga_host_set_has(s, "ipv6:[::1]"));
    assert_false(ga_host_set_has(s, "ipv4:127.0.0.1"));
    assert_false(ga_host_set_has(s, "unix:/tmp/gradagg.sock"));
    assert_false(ga_host_set_has(s, ""));
    ga_host_set_destroy(s);

    s = parse_ok("0.0.0.0/0");
    assert_true(ga_host_set_has(s, "ipv4:203.0.113.9"));
    assert_false(ga_host_set_has(s, "ipv6:[2001:db8::1]")); /* an IPv4 block holds IPv4 hosts only */
    ga_host_set_destroy(s);
    s = parse_ok("10.0.0.0/9");
    assert_true(ga_host_set_has(s, "ipv4:10.127.255.255"));
    assert_false(ga_host_set_has(s, "ipv4:10.128.0.0")); /* a prefix that ends inside a byte */
    ga_host_set_destroy(s);

    assert_null(parse_ok(""));
    assert_false(ga_host_set_has(NULL, "ipv4:10.1.2.3"));
}

static void test_typos_are_refused(void **state)
{
    (void)state;
    refused("10.0.0.1/8", "'10.0.0.1/8'");   /* host bits after the prefix */
    refused("10.0.0.0/33", "'10.0.0.0/33'"); /* longer than the family */
    refused("fd00::/129", "'fd00::/129'");
    refused("10.0.0.0/", "'10.0.0.0/'");
    refused("10.0.0.0/8x", "'10.0.0.0/8x'");
    refused("relay.example", "'relay.example'"); /* names are not resolved */
    refused("10.0.0.1,,10.0.0.2", "empty entry");
    refused("10.0.0.1,", "empty entry");
    refused("10.0.0.300", "'10.0.0.300'");
}

static void test_too_many_entries(void **state)
{
    (void)state;
    static char text[(GA_HOST_SET_MAX + 1) * 4];
    size_t at = 0;
    for (unsigned i = 0; i <= GA_HOST_SET_MAX; i++)
        at += (size_t)snprintf(text + at, sizeof text - at, "%s::1", i ? "," : "");
    refused(text, "at most");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addresses_and_blocks),
        cmocka_unit_test(test_typos_are_refused),
        cmocka_unit_test(test_too_many_entries),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
