/* Shared by the cmocka suites: a last test that checks every test gave back what it took from
 * the accounted host allocator. (cmocka 1.1 ignores a failing group teardown, hence a test.)
 * Use: call test_memory_baseline() first in main, list test_host_memory_returned last. */
#ifndef GA_TEST_MEMORY_H
#define GA_TEST_MEMORY_H

#include <stdint.h>

#include "ga_alloc.h"

static uint64_t test_memory_at_start;

static void test_memory_baseline(void) { test_memory_at_start = ga_mem_in_use(GA_MEM_HOST); }

static void test_host_memory_returned(void **state)
{
    (void)state;
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), test_memory_at_start);
}

#endif
