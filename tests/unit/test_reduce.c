/* ga_reduce.h: sum, add, scale and sub match the scalar oracle byte for byte for every length,
 * input count, thread cap and alignment tried; the sum is in rank order even where the order
 * changes the result; bad calls return their status and change nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ga_alloc.h"
#include "ga_reduce.h"
#include "oracle_optim.h"

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_COUNT 7 /* the CPU takes inputs four, then three at a time: 5, 6, 7 end each way */

static const size_t lengths[] = {0, 1, 15, 16, 17, 33, 1000003};

typedef struct exec_case {
    int threads;
    size_t offset; /* floats added to every vector's address */
} exec_case;

static const exec_case execs[] = {{1, 0}, {1, 1}, {2, 0}, {2, 3}};

static float *alloc_floats(size_t n, size_t offset)
{
    float *x = ga_malloc((n + offset) * sizeof *x);
    assert_non_null(x);
    return x + offset;
}

static void free_floats(float *x, size_t offset) { ga_free(x - offset); }

static void expect_same(const float *got, const float *want, size_t n, const char *where)
{
    size_t i = oracle_first_mismatch(got, want, n);
    if (i < n) fail_msg("%s: element %zu of %zu is %a, oracle %a", where, i, n, got[i], want[i]);
}

static ga_exec cpu_exec(int threads)
{
    ga_exec ex = GA_EXEC_CPU_INIT;
    ex.max_threads = threads;
    return ex;
}

/* Sums of count = 1..MAX_COUNT inputs, into a separate output and in place into inputs[0]. */
static void sum_matches_oracle(void **state)
{
    (void)state;
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        for (size_t e = 0; e < COUNT(execs); e++) {
            size_t off = execs[e].offset;
            ga_exec ex = cpu_exec(execs[e].threads);
            float *in[MAX_COUNT], *out = alloc_floats(n, off), *want = alloc_floats(n, 0);
            for (int k = 0; k < MAX_COUNT; k++) in[k] = alloc_floats(n, off);
            for (int count = 1; count <= MAX_COUNT; count++) {
                for (int in_place = 0; in_place <= 1; in_place++) {
                    char where[96];
                    snprintf(where, sizeof where, "n=%zu threads=%d offset=%zu count=%d in_place=%d", n,
                             execs[e].threads, off, count, in_place);
                    for (int k = 0; k < count; k++) oracle_fill(in[k], n, 10u * (uint32_t)count + (uint32_t)k, 1.0f);
                    oracle_reduce_sum((const float *const *)in, count, n, want);
                    float *dst = in_place ? in[0] : out;
                    if (!in_place) memset(out, 0xA5, n * sizeof *out);
                    assert_int_equal(ga_reduce_sum(&ex, (const float *const *)in, count, n, dst), GA_OK);
                    expect_same(dst, want, n, where);
                }
            }
            for (int k = 0; k < MAX_COUNT; k++) free_floats(in[k], off);
            free_floats(out, off), free_floats(want, 0);
        }
    }
}

/* The most inputs one call takes, on a short vector. */
static void sum_max_inputs(void **state)
{
    (void)state;
    enum { N = 37 };
    static float data[GA_REDUCE_MAX_INPUTS][N];
    const float *in[GA_REDUCE_MAX_INPUTS];
    float out[N], want[N];
    for (int k = 0; k < GA_REDUCE_MAX_INPUTS; k++) {
        oracle_fill(data[k], N, 1000u + (uint32_t)k, 1.0f);
        in[k] = data[k];
    }
    oracle_reduce_sum(in, GA_REDUCE_MAX_INPUTS, N, want);
    ga_exec ex = cpu_exec(2);
    assert_int_equal(ga_reduce_sum(&ex, in, GA_REDUCE_MAX_INPUTS, N, out), GA_OK);
    expect_same(out, want, N, "256 inputs");
}

/* Data for which the order of the additions shows in the result: 1 + 1 + 2^25 rounds back to
 * 2^25 (the tie goes to even), so rank order gives ((1 + 1) + 2^25) - 2^25 = 0, where reverse
 * order or a pairwise tree (1 + 1) + (2^25 - 2^25) gives 2. */
static void sum_is_in_rank_order(void **state)
{
    (void)state;
    enum { N = 70000 }; /* more than two tiles, so the two-thread run splits the vector */
    float *in[4], *out = alloc_floats(N, 0), *want = alloc_floats(N, 0), *tree = alloc_floats(N, 0);
    for (int k = 0; k < 4; k++) in[k] = alloc_floats(N, 0);
    for (size_t i = 0; i < N; i++) {
        float big = 33554432.0f * (float)(1 + i % 3); /* 2^25, 2^26, 3 * 2^25 */
        in[0][i] = 1.0f, in[1][i] = 1.0f, in[2][i] = big, in[3][i] = -big;
    }
    const float *const *rank = (const float *const *)in;
    const float *reversed[4] = {in[3], in[2], in[1], in[0]};
    oracle_reduce_sum(rank, 4, N, want);
    oracle_reduce_sum(reversed, 4, N, out);
    /* The data must make the order visible, else this test proves nothing. */
    for (size_t i = 0; i < N; i++) {
        tree[i] = (in[0][i] + in[1][i]) + (in[2][i] + in[3][i]);
        assert_true(want[i] == 0.0f && out[i] == 2.0f && tree[i] == 2.0f);
    }
    for (int threads = 1; threads <= 2; threads++) {
        ga_exec ex = cpu_exec(threads);
        memset(out, 0, N * sizeof *out);
        assert_int_equal(ga_reduce_sum(&ex, rank, 4, N, out), GA_OK);
        expect_same(out, want, N, "rank order");
    }
    for (int k = 0; k < 4; k++) free_floats(in[k], 0);
    free_floats(out, 0), free_floats(want, 0), free_floats(tree, 0);
}

static void add_matches_oracle(void **state)
{
    (void)state;
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        for (size_t e = 0; e < COUNT(execs); e++) {
            size_t off = execs[e].offset;
            ga_exec ex = cpu_exec(execs[e].threads);
            float *acc = alloc_floats(n, off), *x = alloc_floats(n, off), *want = alloc_floats(n, 0);
            char where[80];
            snprintf(where, sizeof where, "n=%zu threads=%d offset=%zu", n, execs[e].threads, off);
            oracle_fill(acc, n, 1, 1.0f);
            oracle_fill(x, n, 2, 1.0f);
            memcpy(want, acc, n * sizeof *acc);
            oracle_reduce_add(want, x, n);
            assert_int_equal(ga_reduce_add(&ex, acc, x, n), GA_OK);
            expect_same(acc, want, n, where);
            /* acc may be x: doubling. */
            oracle_reduce_add(want, want, n);
            assert_int_equal(ga_reduce_add(&ex, acc, acc, n), GA_OK);
            expect_same(acc, want, n, where);
            free_floats(acc, off), free_floats(x, off), free_floats(want, 0);
        }
    }
}

static void scale_matches_oracle(void **state)
{
    (void)state;
    const float scales[] = {0.25f, 1.0f / 3.0f, -7.5f, 0.0f, 3e38f};
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        for (size_t e = 0; e < COUNT(execs); e++) {
            size_t off = execs[e].offset;
            ga_exec ex = cpu_exec(execs[e].threads);
            float *x = alloc_floats(n, off), *want = alloc_floats(n, 0);
            for (size_t s = 0; s < COUNT(scales); s++) {
                char where[96];
                snprintf(where, sizeof where, "n=%zu threads=%d offset=%zu s=%a", n, execs[e].threads, off,
                         scales[s]);
                oracle_fill(x, n, 3u + (uint32_t)s, 1.0f);
                memcpy(want, x, n * sizeof *x);
                oracle_reduce_scale(want, n, scales[s]);
                assert_int_equal(ga_reduce_scale(&ex, x, n, scales[s]), GA_OK);
                expect_same(x, want, n, where);
            }
            free_floats(x, off), free_floats(want, 0);
        }
    }
}

/* Into a separate output and in place into either operand. */
static void sub_matches_oracle(void **state)
{
    (void)state;
    for (size_t l = 0; l < COUNT(lengths); l++) {
        size_t n = lengths[l];
        for (size_t e = 0; e < COUNT(execs); e++) {
            size_t off = execs[e].offset;
            ga_exec ex = cpu_exec(execs[e].threads);
            float *a = alloc_floats(n, off), *b = alloc_floats(n, off), *out = alloc_floats(n, off);
            float *want = alloc_floats(n, 0);
            for (int where_out = 0; where_out < 3; where_out++) { /* out, a, b */
                char where[96];
                snprintf(where, sizeof where, "n=%zu threads=%d offset=%zu out=%d", n, execs[e].threads, off,
                         where_out);
                oracle_fill(a, n, 5, 1.0f);
                oracle_fill(b, n, 6, 1.0f);
                /* Equal operands (x - x = +0) and signed zeros ((-0) - (+0) = -0) in the mix. */
                for (size_t i = 0; i < n; i += 7) b[i] = a[i];
                for (size_t i = 3; i < n; i += 11) a[i] = -0.0f, b[i] = 0.0f;
                oracle_reduce_sub(want, a, b, n);
                float *dst = where_out == 0 ? out : (where_out == 1 ? a : b);
                if (where_out == 0) memset(out, 0xA5, n * sizeof *out);
                assert_int_equal(ga_reduce_sub(&ex, dst, a, b, n), GA_OK);
                expect_same(dst, want, n, where);
            }
            free_floats(a, off), free_floats(b, off), free_floats(out, off), free_floats(want, 0);
        }
    }
}

/* ---- errors change nothing ---- */

enum { SMALL = 33 };

static void invalid_arguments(void **state)
{
    (void)state;
    ga_exec ex = cpu_exec(0);
    float a[SMALL], b[SMALL], out[SMALL], saved[3][SMALL];
    oracle_fill(a, SMALL, 1, 1.0f);
    oracle_fill(b, SMALL, 2, 1.0f);
    oracle_fill(out, SMALL, 3, 1.0f);
    memcpy(saved[0], a, sizeof a), memcpy(saved[1], b, sizeof b), memcpy(saved[2], out, sizeof out);
    const float *in[2] = {a, b}, *with_null[2] = {a, NULL}, *out_second[2] = {a, out};

    assert_int_equal(ga_reduce_sum(NULL, in, 2, SMALL, out), GA_E_INVAL);
    assert_int_equal(ga_reduce_sum(&ex, in, 0, SMALL, out), GA_E_INVAL);
    assert_int_equal(ga_reduce_sum(&ex, in, -1, SMALL, out), GA_E_INVAL);
    assert_int_equal(ga_reduce_sum(&ex, in, GA_REDUCE_MAX_INPUTS + 1, SMALL, out), GA_E_INVAL);
    assert_int_equal(ga_reduce_sum(&ex, in, 0, 0, out), GA_E_INVAL); /* count is checked even for n == 0 */
    assert_int_equal(ga_reduce_sum(&ex, NULL, 2, SMALL, out), GA_E_INVAL);
    assert_int_equal(ga_reduce_sum(&ex, with_null, 2, SMALL, out), GA_E_INVAL);
    assert_int_equal(ga_reduce_sum(&ex, in, 2, SMALL, NULL), GA_E_INVAL);
    assert_int_equal(ga_reduce_sum(&ex, out_second, 2, SMALL, out), GA_E_INVAL); /* out is inputs[1] */
    assert_int_equal(ga_reduce_add(NULL, out, a, SMALL), GA_E_INVAL);
    assert_int_equal(ga_reduce_add(&ex, NULL, a, SMALL), GA_E_INVAL);
    assert_int_equal(ga_reduce_add(&ex, out, NULL, SMALL), GA_E_INVAL);
    assert_int_equal(ga_reduce_scale(NULL, out, SMALL, 2.0f), GA_E_INVAL);
    assert_int_equal(ga_reduce_scale(&ex, NULL, SMALL, 2.0f), GA_E_INVAL);
    assert_int_equal(ga_reduce_scale(&ex, out, SMALL, INFINITY), GA_E_NONFINITE);
    assert_int_equal(ga_reduce_scale(&ex, out, SMALL, -INFINITY), GA_E_NONFINITE);
    assert_int_equal(ga_reduce_scale(&ex, out, SMALL, NAN), GA_E_NONFINITE);
    assert_int_equal(ga_reduce_sub(NULL, out, a, b, SMALL), GA_E_INVAL);
    assert_int_equal(ga_reduce_sub(&ex, NULL, a, b, SMALL), GA_E_INVAL);
    assert_int_equal(ga_reduce_sub(&ex, out, NULL, b, SMALL), GA_E_INVAL);
    assert_int_equal(ga_reduce_sub(&ex, out, a, NULL, SMALL), GA_E_INVAL);
    assert_memory_equal(a, saved[0], sizeof a);
    assert_memory_equal(b, saved[1], sizeof b);
    assert_memory_equal(out, saved[2], sizeof out);

    /* n == 0 needs no vectors. */
    assert_int_equal(ga_reduce_sum(&ex, NULL, 3, 0, NULL), GA_OK);
    assert_int_equal(ga_reduce_add(&ex, NULL, NULL, 0), GA_OK);
    assert_int_equal(ga_reduce_scale(&ex, NULL, 0, 0.5f), GA_OK);
    assert_int_equal(ga_reduce_sub(&ex, NULL, NULL, NULL, 0), GA_OK);
}

static void backends(void **state)
{
    (void)state;
    float a[SMALL], b[SMALL], saved[2][SMALL];
    oracle_fill(a, SMALL, 1, 1.0f);
    oracle_fill(b, SMALL, 2, 1.0f);
    memcpy(saved[0], a, sizeof a), memcpy(saved[1], b, sizeof b);
    const float *in[2] = {a, b};
    ga_exec unknown = GA_EXEC_CPU_INIT;
    unknown.backend = (ga_backend)7;
    assert_int_equal(ga_reduce_sum(&unknown, in, 2, SMALL, a), GA_E_BACKEND);
    assert_int_equal(ga_reduce_add(&unknown, a, b, SMALL), GA_E_BACKEND);
    assert_int_equal(ga_reduce_scale(&unknown, a, SMALL, 2.0f), GA_E_BACKEND);
    assert_int_equal(ga_reduce_sub(&unknown, a, a, b, SMALL), GA_E_BACKEND);
    if (ga_cuda_device_count() == 0) {
        ga_status want = !ga_cuda_built() ? GA_E_NO_CUDA : GA_E_NO_DEVICE;
        ga_exec cuda = GA_EXEC_CUDA_INIT;
        assert_int_equal(ga_reduce_sum(&cuda, in, 2, SMALL, a), want);
        assert_int_equal(ga_reduce_add(&cuda, a, b, SMALL), want);
        assert_int_equal(ga_reduce_scale(&cuda, a, SMALL, 2.0f), want);
        assert_int_equal(ga_reduce_sub(&cuda, a, a, b, SMALL), want);
    }
    assert_memory_equal(a, saved[0], sizeof a);
    assert_memory_equal(b, saved[1], sizeof b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sum_matches_oracle),
        cmocka_unit_test(sum_max_inputs),
        cmocka_unit_test(sum_is_in_rank_order),
        cmocka_unit_test(add_matches_oracle),
        cmocka_unit_test(scale_matches_oracle),
        cmocka_unit_test(sub_matches_oracle),
        cmocka_unit_test(invalid_arguments),
        cmocka_unit_test(backends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
