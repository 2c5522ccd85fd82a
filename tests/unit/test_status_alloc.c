/* The status table, the accounted host allocator, and the codec name/property table. */
#define _DEFAULT_SOURCE /* mincore */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif
/* The calloc of valgrind and of TSan writes every byte. */
#if defined(__SANITIZE_THREAD__)
#define CALLOC_WRITES_EVERY_BYTE 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CALLOC_WRITES_EVERY_BYTE 1
#endif
#endif
#ifndef CALLOC_WRITES_EVERY_BYTE
#define CALLOC_WRITES_EVERY_BYTE RUNNING_ON_VALGRIND
#endif

#include "test_memory.h"

#include "ga_alloc.h"
#include "ga_codec.h"
#include "ga_status.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

/* ---- status ---- */

typedef struct status_row {
    int value;
    const char *name;
    const char *msg;
} status_row;

#define ROW(name, value, msg) {value, "GA_" #name, msg},
static const status_row status_rows[] = {GA_STATUS_MAP(ROW)};
#undef ROW

static void test_status_table(void **state)
{
    (void)state;
    assert_true(COUNT(status_rows) >= 19);
    for (size_t i = 0; i < COUNT(status_rows); i++) {
        const status_row *r = &status_rows[i];
        if (i == 0) assert_int_equal(r->value, GA_OK);
        else assert_true(r->value < 0);
        assert_string_equal(ga_status_name(r->value), r->name);
        assert_string_equal(ga_strerror(r->value), r->msg);
        assert_true(strlen(r->msg) > 0);
        for (size_t j = 0; j < i; j++) {
            assert_int_not_equal(r->value, status_rows[j].value);
            assert_string_not_equal(ga_status_name(r->value), ga_status_name(status_rows[j].value));
            assert_string_not_equal(ga_strerror(r->value), ga_strerror(status_rows[j].value));
        }
    }
    assert_string_equal(ga_status_name(GA_E_LENGTH), "GA_E_LENGTH");
    assert_string_equal(ga_status_name(GA_OK), "GA_OK");
    const int unknown[] = {1, 42, -1000, INT_MIN, INT_MAX, -9999};
    for (size_t k = 0; k < COUNT(unknown); k++) {
        assert_string_equal(ga_status_name(unknown[k]), "GA_UNKNOWN");
        const char *msg = ga_strerror(unknown[k]);
        assert_non_null(msg);
        for (size_t i = 0; i < COUNT(status_rows); i++) assert_string_not_equal(msg, status_rows[i].msg);
    }
}

static ga_status check_twice(ga_status first, ga_status second, int *reached)
{
    GA_CHECK(first);
    *reached = 1;
    ga_status rc;
    GA_CHECK_GOTO(second, rc, fail);
    return GA_OK;
fail:
    return rc;
}

static void test_check_macros(void **state)
{
    (void)state;
    int reached = 0;
    assert_int_equal(check_twice(GA_E_NOMEM, GA_OK, &reached), GA_E_NOMEM);
    assert_int_equal(reached, 0);
    assert_int_equal(check_twice(GA_OK, GA_E_RANGE, &reached), GA_E_RANGE);
    assert_int_equal(reached, 1);
    assert_int_equal(check_twice(GA_OK, GA_OK, &reached), GA_OK);
}

/* ---- allocator ---- */

/* Pages of [p, p + bytes) that are in memory. */
static size_t resident_pages(const void *p, size_t bytes, long page)
{
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)(page - 1), hi = ((uintptr_t)p + bytes + page - 1) & ~(uintptr_t)(page - 1);
    size_t n = (hi - lo) / (size_t)page, resident = 0;
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)lo, hi - lo, vec), 0);
    for (size_t i = 0; i < n; i++) resident += vec[i] & 1;
    free(vec);
    return resident;
}

static void test_alloc(void **state)
{
    (void)state;
    uint64_t start = ga_mem_in_use(GA_MEM_HOST);
    const size_t sizes[] = {0, 1, 3, 63, 64, 65, 1000, 4096, (size_t)1 << 20};
    void *blocks[COUNT(sizes)];
    uint64_t expect = start;
    for (size_t k = 0; k < COUNT(sizes); k++) {
        blocks[k] = ga_malloc(sizes[k]);
        assert_non_null(blocks[k]);
        assert_int_equal((uintptr_t)blocks[k] % 64, 0);
        assert_int_equal(GA_ALLOC_ALIGN, 64);
        memset(blocks[k], 0x5A, sizes[k]); /* the whole block is usable (ASan checks the end) */
        expect += sizes[k];
        assert_int_equal(ga_mem_in_use(GA_MEM_HOST), expect);
        assert_true(ga_mem_peak(GA_MEM_HOST) >= expect);
        for (size_t j = 0; j < k; j++) assert_ptr_not_equal(blocks[k], blocks[j]); /* 0 bytes: unique too */
    }
    for (size_t k = 0; k < COUNT(sizes); k++) ga_free(blocks[k]);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), start);

    /* calloc zero-fills and counts; overflowing requests fail without counting. */
    uint8_t *z = ga_calloc(1000, 3);
    assert_non_null(z);
    assert_int_equal((uintptr_t)z % 64, 0);
    for (size_t i = 0; i < 3000; i++) assert_int_equal(z[i], 0);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), start + 3000);
    ga_free(z);
    assert_null(ga_calloc(SIZE_MAX / 2, 4));

    /* A large zeroed block takes no memory until written (a fresh optimizer state): of its 16384
     * pages only the one with the header is resident, then the page written. (The calloc of
     * valgrind and of TSan writes every byte: there only the contents are checked.) */
    enum { BIG = 64 << 20 };
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *big = ga_calloc(BIG, 1);
    assert_non_null(big);
    assert_int_equal((uintptr_t)big % 64, 0);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), start + BIG);
    if (!CALLOC_WRITES_EVERY_BYTE) assert_true(resident_pages(big, BIG, page) <= 1);
    big[BIG / 2] = 1;
    if (!CALLOC_WRITES_EVERY_BYTE) assert_true(resident_pages(big, BIG, page) <= 2);
    assert_int_equal(big[BIG / 2 + 1], 0);
    assert_int_equal(big[BIG - 1], 0);
    ga_free(big);
    assert_null(ga_malloc(SIZE_MAX));
    assert_null(ga_malloc(SIZE_MAX - 64));
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), start);

    /* ga_free(NULL) is a no-op. */
    ga_free(NULL);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), start);

    /* Out-of-range domains read as 0. */
    assert_int_equal(ga_mem_in_use(GA_MEM_DOMAINS), 0);
    assert_int_equal(ga_mem_peak((ga_mem_domain)99), 0);
}

static void test_alloc_threads(void **state)
{
    (void)state;
    uint64_t start = ga_mem_in_use(GA_MEM_HOST);
    int bad = 0;
#pragma omp parallel for num_threads(2) schedule(static) reduction(| : bad)
    for (int i = 0; i < 20000; i++) {
        void *p = ga_malloc((size_t)(i % 257));
        bad |= p == NULL || (uintptr_t)p % 64 != 0;
        ga_free(p);
    }
    assert_int_equal(bad, 0);
    assert_int_equal(ga_mem_in_use(GA_MEM_HOST), start);
}

/* ga_host_copy: every byte copied, none written outside dst, for sizes around the thread split
 * and the 64-byte pieces, on 1 to 4 threads and unaligned ends. */
static void test_host_copy(void **state)
{
    (void)state;
    const size_t most = ((size_t)4 << 20) + 131;
    uint8_t *src = ga_malloc(most + 1), *dst = ga_malloc(most + 2);
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i <= most; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
    const size_t sizes[] = {0, 1, 63, 64, 65, 1000, ((size_t)1 << 20) + 1, most};
    for (int threads = 1; threads <= 4; threads++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            ga_exec ex = {GA_BACKEND_CUDA, threads, GA_SIMD_AUTO, NULL}; /* the backend is not read */
            memset(dst, 0xA5, most + 2);
            ga_host_copy(&ex, dst + 1, src + 1, n);
            assert_int_equal(dst[0], 0xA5);
            assert_memory_equal(dst + 1, src + 1, n);
            assert_int_equal(dst[n + 1], 0xA5);
        }
    ga_free(src);
    ga_free(dst);
}

static void test_device_alloc_without_cuda(void **state)
{
    (void)state;
    if (ga_cuda_built()) skip(); /* the CUDA allocator has its own tests */
    void *out = (void *)0x1234;
    assert_int_equal(ga_device_malloc(16, &out), GA_E_NO_CUDA);
    assert_ptr_equal(out, (void *)0x1234);
    assert_int_equal(ga_pinned_malloc(16, &out), GA_E_NO_CUDA);
    assert_ptr_equal(out, (void *)0x1234);
    ga_device_free(NULL);
    ga_pinned_free(NULL);
    assert_int_equal(ga_mem_in_use(GA_MEM_DEVICE), 0);
    assert_int_equal(ga_mem_in_use(GA_MEM_PINNED), 0);
    assert_int_equal(ga_cuda_device_count(), 0);
}

/* ---- codec table ---- */

static void test_codec_names(void **state)
{
    (void)state;
    static const char *const names[GA_CODEC_COUNT] = {"none", "fp16", "bf16", "2bit", "1bit", "1bit_scaled", "topk",
                                                      "int8", "int4"};
    static const bool residual[GA_CODEC_COUNT] = {false, false, false, true, true, true, true, true, true};
    for (int c = 0; c < GA_CODEC_COUNT; c++) {
        assert_string_equal(ga_codec_name((ga_codec_id)c), names[c]);
        ga_codec_id back = GA_CODEC_COUNT;
        assert_int_equal(ga_codec_from_name(names[c], &back), GA_OK);
        assert_int_equal(back, c);
        assert_int_equal(ga_codec_has_residual((ga_codec_id)c), residual[c]);
        assert_int_equal(ga_codec_fixed_size((ga_codec_id)c), c != GA_CODEC_TOPK);
        ga_codec_params p = ga_codec_params_default((ga_codec_id)c);
        assert_int_equal(ga_codec_params_validate((ga_codec_id)c, &p), GA_OK);
    }
    const char *unknown[] = {"", "NONE", "2bit ", "1bit_", "1bit_scaled_", "top-k", "fp32"};
    for (size_t k = 0; k < COUNT(unknown); k++) {
        ga_codec_id out = (ga_codec_id)77;
        assert_int_equal(ga_codec_from_name(unknown[k], &out), GA_E_CODEC);
        assert_int_equal(out, 77);
    }
    ga_codec_id out = (ga_codec_id)77;
    assert_int_equal(ga_codec_from_name(NULL, &out), GA_E_INVAL);
    assert_int_equal(out, 77);
    assert_int_equal(ga_codec_from_name("none", NULL), GA_E_INVAL);
}

static void test_codec_defaults(void **state)
{
    (void)state;
    ga_codec_params p = ga_codec_params_default(GA_CODEC_2BIT);
    assert_true(p.threshold == 0.5f);
    p = ga_codec_params_default(GA_CODEC_1BIT);
    assert_true(p.threshold == 0.0f);
    p = ga_codec_params_default(GA_CODEC_TOPK);
    assert_true(p.ratio == 0.001f);
    assert_true(p.sample_fraction == 0.01f);
    assert_int_equal(p.adapt_rounds, 10);
    assert_int_equal(p.seed, 0);
    assert_int_equal(p.topk_values, GA_TOPK_VALUES_FP32);
    assert_int_equal(p.topk_indices, GA_TOPK_INDICES_INT32);
}

static void test_simd_cap(void **state)
{
    (void)state;
    ga_simd best = ga_cpu_simd();
    assert_true(best >= GA_SIMD_SCALAR && best <= GA_SIMD_AVX512);
    for (int s = GA_SIMD_AUTO; s <= GA_SIMD_AVX512; s++) {
        ga_exec ex = {GA_BACKEND_CPU, 0, (ga_simd)s, NULL};
        ga_simd got = ga_exec_simd(&ex);
        assert_int_equal(got, s == GA_SIMD_AUTO || s > (int)best ? best : (ga_simd)s);
    }
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status_table), cmocka_unit_test(test_check_macros),
        cmocka_unit_test(test_alloc),        cmocka_unit_test(test_alloc_threads),
        cmocka_unit_test(test_host_copy),
        cmocka_unit_test(test_device_alloc_without_cuda), cmocka_unit_test(test_codec_names),
        cmocka_unit_test(test_codec_defaults), cmocka_unit_test(test_simd_cap),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
