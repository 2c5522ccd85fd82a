/* The control loop: posted callbacks run on the loop thread in posting order (per poster), from
 * any number of threads; ga_loop_stop lets what was posted before it run, refuses later posts
 * and closes what was left open. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "test_memory.h"

#include "transport/loop.h"

#define POSTERS 4
#define PER_POSTER 20000

typedef struct record {
    ga_loop *loop;
    uv_thread_t loop_thread;
    uint32_t next[POSTERS]; /* loop thread only: the next index expected from each poster */
    uint32_t seen;
    bool out_of_order;
    bool wrong_thread;
    uint32_t stop_at;       /* the callback that calls ga_loop_stop */
    uint32_t after_stop_ok; /* posts made by callbacks after stop that were accepted */
} record;

typedef struct item {
    record *r;
    uint32_t poster, index;
} item;

static item items[POSTERS][PER_POSTER];

static void on_item(void *arg)
{
    item *it = arg;
    record *r = it->r;
    uv_thread_t self = uv_thread_self();
    if (!uv_thread_equal(&self, &r->loop_thread)) r->wrong_thread = true;
    if (it->index != r->next[it->poster]) r->out_of_order = true;
    r->next[it->poster] = it->index + 1;
    if (++r->seen == r->stop_at) {
        ga_loop_stop(r->loop);
        ga_loop_stop(r->loop); /* a second stop is harmless */
        if (ga_loop_post(r->loop, on_item, it) == GA_OK) r->after_stop_ok++;
    }
}

typedef struct poster_arg {
    item *row;
    uint32_t from; /* the first index this thread posts */
} poster_arg;

static void poster(void *arg)
{
    poster_arg *a = arg;
    for (uint32_t i = a->from; i < PER_POSTER; i++)
        assert_int_equal(ga_loop_post(a->row[i].r->loop, on_item, &a->row[i]), GA_OK);
}

static void loop_thread(void *arg)
{
    record *r = arg;
    ga_loop_run(r->loop);
}

static void test_posts_run_in_order_on_the_loop(void **state)
{
    (void)state;
    record r;
    memset(&r, 0, sizeof r);
    assert_int_equal(ga_loop_create(&r.loop), GA_OK);
    for (uint32_t p = 0; p < POSTERS; p++)
        for (uint32_t i = 0; i < PER_POSTER; i++) items[p][i] = (item){&r, p, i};
    r.stop_at = POSTERS * PER_POSTER;

    /* Posted before the loop runs: it still runs, first. */
    uv_thread_t threads[POSTERS];
    assert_int_equal(ga_loop_post(r.loop, on_item, &items[0][0]), GA_OK);
    assert_int_equal(uv_thread_create(&r.loop_thread, loop_thread, &r), 0);
    /* Poster 0 continues from index 1. */
    poster_arg args[POSTERS];
    for (uint32_t p = 0; p < POSTERS; p++) {
        args[p] = (poster_arg){items[p], p == 0 ? 1 : 0};
        assert_int_equal(uv_thread_create(&threads[p], poster, &args[p]), 0);
    }
    for (uint32_t p = 0; p < POSTERS; p++) uv_thread_join(&threads[p]);
    uv_thread_join(&r.loop_thread);

    assert_false(r.wrong_thread);
    assert_false(r.out_of_order);
    assert_int_equal(r.seen, r.stop_at);
    assert_int_equal(r.after_stop_ok, 0);
    for (uint32_t p = 0; p < POSTERS; p++) assert_int_equal(r.next[p], PER_POSTER);
    assert_int_equal(ga_loop_post(r.loop, on_item, &items[0][0]), GA_E_DRAINING);
    ga_loop_destroy(r.loop);
}

/* ---- stop with work still queued, and handles left open ---- */

typedef struct stop_case {
    ga_loop *loop;
    int ran;
    uv_timer_t *leak; /* a timer its owner forgot to close */
} stop_case;

static void count(void *arg)
{
    ((stop_case *)arg)->ran++;
}

static void stop_now(void *arg)
{
    stop_case *c = arg;
    c->ran++;
    ga_loop_stop(c->loop);
    /* Posted after the stop: refused, never runs. */
    assert_int_equal(ga_loop_post(c->loop, count, c), GA_E_DRAINING);
}

static void never(uv_timer_t *t)
{
    (void)t;
    fail_msg("a timer of a stopped loop fired");
}

static void test_stop_runs_what_was_posted_before(void **state)
{
    (void)state;
    stop_case c = {0};
    assert_int_equal(ga_loop_create(&c.loop), GA_OK);
    uv_timer_t timer;
    uv_timer_init(ga_loop_uv(c.loop), &timer);
    uv_timer_start(&timer, never, 60000, 0);
    assert_int_equal(ga_loop_post(c.loop, count, &c), GA_OK);
    assert_int_equal(ga_loop_post(c.loop, stop_now, &c), GA_OK);
    assert_int_equal(ga_loop_post(c.loop, count, &c), GA_OK); /* before the stop: runs */
    assert_int_equal(ga_loop_post(c.loop, count, &c), GA_OK);
    ga_loop_run(c.loop); /* returns although the timer was left active */
    assert_int_equal(c.ran, 4);
    assert_true(uv_is_closing((uv_handle_t *)&timer));
    ga_loop_destroy(c.loop);
}

static void test_destroy_of_a_loop_never_run(void **state)
{
    (void)state;
    stop_case c = {0};
    assert_int_equal(ga_loop_create(&c.loop), GA_OK);
    assert_int_equal(ga_loop_post(c.loop, count, &c), GA_OK);
    ga_loop_destroy(c.loop); /* frees the queued item without running it */
    assert_int_equal(c.ran, 0);
    ga_loop_destroy(NULL);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_posts_run_in_order_on_the_loop),
        cmocka_unit_test(test_stop_runs_what_was_posted_before),
        cmocka_unit_test(test_destroy_of_a_loop_never_run),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
