/* ga_client_options_from_env (client/launch_env.c): which variable gives each option, in which
 * order, and that a malformed value changes nothing (docs/launch.md's table). */
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gradagg.h"

static const char *const all_vars[] = {
    "GRADAGG_SERVER", "GRADAGG_JOB", "TORCHELASTIC_RUN_ID", "GRADAGG_RANK", "RANK", "JOB_COMPLETION_INDEX",
    "GRADAGG_WORLD_SIZE", "WORLD_SIZE", "GRADAGG_AUTH_TOKEN", "GRADAGG_TLS_CA_FILE", "GRADAGG_TLS_CERT_FILE",
    "GRADAGG_TLS_KEY_FILE", "GRADAGG_TLS_TARGET_NAME", "GRADAGG_MIN_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT"};

static int clear_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof all_vars / sizeof all_vars[0]; i++) unsetenv(all_vars[i]);
    return 0;
}

static ga_client_options from_env(ga_status want)
{
    ga_client_options o = GA_CLIENT_OPTIONS_INIT;
    char msg[256] = "";
    assert_int_equal(ga_client_options_from_env(&o, msg, sizeof msg), want);
    return o;
}

/* The fields the environment may give are those of d (GA_CLIENT_OPTIONS_INIT). */
static void assert_untouched(const ga_client_options *o)
{
    ga_client_options d = GA_CLIENT_OPTIONS_INIT;
    assert_ptr_equal(o->server, d.server);
    assert_ptr_equal(o->job, d.job);
    assert_int_equal(o->rank, d.rank);
    assert_int_equal(o->world_size, d.world_size);
    assert_ptr_equal(o->auth_token, d.auth_token);
    assert_ptr_equal(o->tls_ca_file, d.tls_ca_file);
    assert_ptr_equal(o->tls_cert_file, d.tls_cert_file);
    assert_ptr_equal(o->tls_key_file, d.tls_key_file);
    assert_ptr_equal(o->tls_target_name, d.tls_target_name);
    assert_int_equal(o->min_world_size, d.min_world_size);
    assert_int_equal(o->resume, d.resume);
}

static void test_nothing_set_keeps_the_defaults(void **state)
{
    (void)state;
    ga_client_options o = from_env(GA_OK);
    assert_untouched(&o);
}

static void test_torchrun(void **state)
{
    (void)state;
    setenv("RANK", "3", 1);
    setenv("WORLD_SIZE", "8", 1);
    setenv("TORCHELASTIC_RUN_ID", "run-7", 1);
    setenv("GRADAGG_SERVER", "a:1,b:2", 1);
    ga_client_options o = from_env(GA_OK);
    assert_int_equal(o.rank, 3);
    assert_int_equal(o.world_size, 8);
    assert_string_equal(o.job, "run-7");
    assert_string_equal(o.server, "a:1,b:2");
    /* torchrun without --rdzv-id runs "none": not a job name */
    setenv("TORCHELASTIC_RUN_ID", "none", 1);
    assert_string_equal(from_env(GA_OK).job, "default");
}

static void test_indexed_job(void **state)
{
    (void)state;
    setenv("JOB_COMPLETION_INDEX", "2", 1);
    setenv("GRADAGG_WORLD_SIZE", "4", 1);
    setenv("GRADAGG_JOB", "train", 1);
    ga_client_options o = from_env(GA_OK);
    assert_int_equal(o.rank, 2);
    assert_int_equal(o.world_size, 4);
    assert_string_equal(o.job, "train");
}

static void test_gradagg_variables_win(void **state)
{
    (void)state;
    setenv("GRADAGG_RANK", "1", 1);
    setenv("RANK", "5", 1);
    setenv("JOB_COMPLETION_INDEX", "6", 1);
    setenv("GRADAGG_WORLD_SIZE", "2", 1);
    setenv("WORLD_SIZE", "9", 1);
    setenv("GRADAGG_JOB", "mine", 1);
    setenv("TORCHELASTIC_RUN_ID", "theirs", 1);
    ga_client_options o = from_env(GA_OK);
    assert_int_equal(o.rank, 1);
    assert_int_equal(o.world_size, 2);
    assert_string_equal(o.job, "mine");
    /* torchrun's RANK before the indexed Job's index */
    unsetenv("GRADAGG_RANK");
    assert_int_equal(from_env(GA_OK).rank, 5);
    /* an empty variable is not set */
    setenv("RANK", "", 1);
    assert_int_equal(from_env(GA_OK).rank, 6);
}

static void test_credentials(void **state)
{
    (void)state;
    setenv("GRADAGG_AUTH_TOKEN", "t0k", 1);
    setenv("GRADAGG_TLS_CA_FILE", "/ca.pem", 1);
    setenv("GRADAGG_TLS_CERT_FILE", "/c.pem", 1);
    setenv("GRADAGG_TLS_KEY_FILE", "/k.pem", 1);
    setenv("GRADAGG_TLS_TARGET_NAME", "gradagg.example", 1);
    ga_client_options o = from_env(GA_OK);
    assert_string_equal(o.auth_token, "t0k");
    assert_string_equal(o.tls_ca_file, "/ca.pem");
    assert_string_equal(o.tls_cert_file, "/c.pem");
    assert_string_equal(o.tls_key_file, "/k.pem");
    assert_string_equal(o.tls_target_name, "gradagg.example");
}

static void test_elastic(void **state)
{
    (void)state;
    setenv("GRADAGG_MIN_WORLD_SIZE", "2", 1);
    setenv("TORCHELASTIC_RESTART_COUNT", "0", 1); /* torchrun's first start: a rerun starts afresh */
    ga_client_options o = from_env(GA_OK);
    assert_int_equal(o.min_world_size, 2);
    assert_false(o.resume);
    setenv("TORCHELASTIC_RESTART_COUNT", "3", 1); /* restarted by torchrun: the job goes on */
    assert_true(from_env(GA_OK).resume);
}

static void test_malformed_values_change_nothing(void **state)
{
    (void)state;
    static const char *const bad[][2] = {{"RANK", "x"},         {"RANK", "-1"},       {"RANK", " 1"},
                                         {"RANK", "1.0"},       {"RANK", "4294967296"}, {"WORLD_SIZE", "0"},
                                         {"GRADAGG_WORLD_SIZE", "4x"}, {"JOB_COMPLETION_INDEX", "+2"},
                                         {"GRADAGG_MIN_WORLD_SIZE", "0"}, {"TORCHELASTIC_RESTART_COUNT", "x"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        clear_env(NULL);
        setenv("GRADAGG_SERVER", "changed:1", 1);
        setenv(bad[i][0], bad[i][1], 1);
        ga_client_options o = GA_CLIENT_OPTIONS_INIT;
        char msg[256] = "";
        assert_int_equal(ga_client_options_from_env(&o, msg, sizeof msg), GA_E_INVAL);
        assert_non_null(strstr(msg, bad[i][0]));
        assert_untouched(&o);
    }
    assert_int_equal(ga_client_options_from_env(NULL, NULL, 0), GA_E_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_nothing_set_keeps_the_defaults, clear_env),
        cmocka_unit_test_setup(test_torchrun, clear_env),
        cmocka_unit_test_setup(test_indexed_job, clear_env),
        cmocka_unit_test_setup(test_gradagg_variables_win, clear_env),
        cmocka_unit_test_setup(test_credentials, clear_env),
        cmocka_unit_test_setup(test_elastic, clear_env),
        cmocka_unit_test_setup(test_malformed_values_change_nothing, clear_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
