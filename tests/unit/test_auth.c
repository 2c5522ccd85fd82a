/* The bearer-token file's parser and the per-call check (service/api/auth.h), without a network: a
 * good file with comments, blanks and CRLF; every malformed case refused with its line number
 * and without the token in the message; and each answer of the check (absent, repeated,
 * malformed, unknown token, another job's token, an unknown job, the right token). */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "test_memory.h"

#include "api/auth.h"

#define TOK_A "alpha-token-0123456789"
#define TOK_B "beta-token-9876543210x"
#define TOK_C "alpha-token-rotated-00"

static ga_auth *parse_ok(const char *text)
{
    ga_auth *a = NULL;
    char why[256] = "";
    ga_status st = ga_auth_parse(text, strlen(text), "tokens.txt", &a, why, sizeof why);
    if (st != GA_OK) fail_msg("parse failed: %s", why);
    return a;
}

static ga_status check(const ga_auth *a, const char *job, const char *value, char *why, size_t cap)
{
    return ga_auth_check(a, job, value, value ? strlen(value) : 0, value ? 1 : 0, why, cap);
}

static void test_good_file(void **state)
{
    (void)state;
    const char *text = "# tokens for the cluster\n"
                       "\n"
                       "alpha " TOK_A "\n"
                       "   # an indented comment\n"
                       "\tbeta\t\t" TOK_B "  \r\n"
                       "   \n"
                       "gamma-ünicode 0123456789abcdefXYZ"; /* no newline at the end */
    ga_auth *a = parse_ok(text);
    assert_int_equal(ga_auth_jobs(a), 3);
    char why[256];
    assert_int_equal(check(a, "alpha", "Bearer " TOK_A, why, sizeof why), GA_OK);
    assert_int_equal(check(a, "beta", "Bearer " TOK_B, why, sizeof why), GA_OK);
    assert_int_equal(check(a, "gamma-ünicode", "Bearer 0123456789abcdefXYZ", why, sizeof why), GA_OK);
    /* The scheme is case-insensitive and may be followed by several spaces. */
    assert_int_equal(check(a, "alpha", "bearer " TOK_A, why, sizeof why), GA_OK);
    assert_int_equal(check(a, "alpha", "BEARER   " TOK_A, why, sizeof why), GA_OK);
    ga_auth_destroy(a);
}

typedef struct bad_file {
    const char *what;
    const char *text;
    const char *want; /* in the message, with the line number */
} bad_file;

static void test_malformed_files(void **state)
{
    (void)state;
    static const bad_file rows[] = {
        {"one field", "alpha " TOK_A "\nbeta\n", "tokens.txt:2: expected 'job token' (two fields), found one"},
        {"three fields", "# c\nalpha " TOK_A " extra\n", "tokens.txt:2: expected 'job token' (two fields), found more"},
        {"short token", "\n\nalpha short-token-15c\n", "tokens.txt:3: token of job 'alpha' has 15 characters"},
        {"control byte in the token", "alpha " TOK_A "\x01zz\n", "tokens.txt:1: token of job 'alpha' holds byte 0x01"},
        {"non-ASCII token", "alpha " TOK_A "\xc3\xa9\n", "tokens.txt:1: token of job 'alpha' holds byte 0xc3"},
        {"control byte in the job", "al\x7fpha " TOK_A "\n", "tokens.txt:1: job name holds control byte 0x7f"},
        {"NUL byte", "alpha " TOK_A "\nbe\0ta " TOK_B "\n", "tokens.txt:2: NUL byte"},
        {"job name too long",
         "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj"
         "jjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjjj"
         "jjjjjjjjjjjjjjjjjj " TOK_A "\n",
         "tokens.txt:1: job name longer than 255 bytes"},
        {"no tokens at all", "# nothing here\n\n   \n", "tokens.txt: no 'job token' line"},
        {"empty file", "", "tokens.txt: no 'job token' line"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        /* The NUL row's length is its literal's, not strlen's. */
        size_t len = strcmp(rows[i].what, "NUL byte") == 0 ? sizeof("alpha " TOK_A "\nbe\0ta " TOK_B "\n") - 1
                                                            : strlen(rows[i].text);
        ga_auth *a = (ga_auth *)(uintptr_t)1;
        char why[512] = "";
        ga_status st = ga_auth_parse(rows[i].text, len, "tokens.txt", &a, why, sizeof why);
        if (st != GA_E_CONFIG) fail_msg("%s: got %s (%s), want GA_E_CONFIG", rows[i].what, ga_status_name(st), why);
        if (!strstr(why, rows[i].want)) fail_msg("%s: message '%s' lacks '%s'", rows[i].what, why, rows[i].want);
        /* A message never quotes a token. */
        if (strstr(why, TOK_A) || strstr(why, TOK_B)) fail_msg("%s: message quotes a token: %s", rows[i].what, why);
        assert_ptr_equal(a, (ga_auth *)(uintptr_t)1); /* *out untouched on error */
    }
}

static void test_load_from_a_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/gradagg-auth-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/tokens", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "alpha %s\n", TOK_A);
    fclose(f);
    ga_auth *a = NULL;
    char why[512] = "";
    assert_int_equal(ga_auth_load(path, &a, why, sizeof why), GA_OK);
    assert_int_equal(ga_auth_jobs(a), 1);
    ga_auth_destroy(a);

    /* A bad line names the flag, the file and the line. */
    f = fopen(path, "w");
    fprintf(f, "alpha %s\nbeta tooshort\n", TOK_A);
    fclose(f);
    assert_int_equal(ga_auth_load(path, &a, why, sizeof why), GA_E_CONFIG);
    char want[256];
    snprintf(want, sizeof want, "--auth-tokens %s:2:", path);
    assert_non_null(strstr(why, want));
    assert_null(strstr(why, "tooshort"));

    unlink(path);
    assert_int_equal(ga_auth_load(path, &a, why, sizeof why), GA_E_IO);
    assert_non_null(strstr(why, path));
    assert_non_null(strstr(why, "--auth-tokens"));
    rmdir(dir);
}

typedef struct check_row {
    const char *what;
    const char *job;
    const char *value; /* NULL = absent */
    size_t entries;
    ga_status want;
} check_row;

/* A job named on two lines (a rotation): both of its tokens grant it, and only it. */
static void test_two_tokens_for_one_job(void **state)
{
    (void)state;
    ga_auth *a = parse_ok("alpha " TOK_A "\nbeta " TOK_B "\nalpha " TOK_C "\n");
    char why[256];
    const char *const grants[] = {"Bearer " TOK_A, "Bearer " TOK_C};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(ga_auth_check(a, "alpha", grants[i], strlen(grants[i]), 1, why, sizeof why), GA_OK);
        assert_int_equal(ga_auth_check(a, "beta", grants[i], strlen(grants[i]), 1, why, sizeof why),
                         GA_E_PERMISSION_DENIED);
    }
    ga_auth_destroy(a);
}

static void test_check(void **state)
{
    (void)state;
    ga_auth *a = parse_ok("alpha " TOK_A "\nbeta " TOK_B "\n");
    static const check_row rows[] = {
        {"the job's own token", "alpha", "Bearer " TOK_A, 1, GA_OK},
        {"absent", "alpha", NULL, 0, GA_E_UNAUTHENTICATED},
        {"repeated", "alpha", "Bearer " TOK_A, 2, GA_E_UNAUTHENTICATED},
        {"another scheme", "alpha", "Basic " TOK_A, 1, GA_E_UNAUTHENTICATED},
        {"no space after the scheme", "alpha", "Bearer" TOK_A, 1, GA_E_UNAUTHENTICATED},
        {"scheme without a token", "alpha", "Bearer ", 1, GA_E_UNAUTHENTICATED},
        {"bare token", "alpha", TOK_A, 1, GA_E_UNAUTHENTICATED},
        {"token with a space inside", "alpha", "Bearer alpha token-0123456789", 1, GA_E_UNAUTHENTICATED},
        {"a token no job has", "alpha", "Bearer not-a-token-of-anyone", 1, GA_E_UNAUTHENTICATED},
        {"a prefix of the token", "alpha", "Bearer alpha-token-012345678", 1, GA_E_UNAUTHENTICATED},
        {"another job's token", "alpha", "Bearer " TOK_B, 1, GA_E_PERMISSION_DENIED},
        {"an unknown job", "gamma", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"an empty job name", "", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"a lane of the job", "alpha/lane3", "Bearer " TOK_A, 1, GA_OK},
        {"the last lane of the job", "alpha/lane15", "Bearer " TOK_A, 1, GA_OK},
        {"a lane of another job", "beta/lane3", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"lane 0 is the job itself", "alpha/lane0", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"a lane with a leading zero", "alpha/lane03", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"a lane past the last", "alpha/lane16", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"a lane suffix without a number", "alpha/lane", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"a name that only ends like a lane", "alphax/lane3", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"a lane of a lane", "alpha/lane1/lane2", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
        {"a prefix of the job with a lane", "alph/lane1", "Bearer " TOK_A, 1, GA_E_PERMISSION_DENIED},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        char why[256] = "";
        const check_row *r = &rows[i];
        ga_status st = ga_auth_check(a, r->job, r->value, r->value ? strlen(r->value) : 0, r->entries, why, sizeof why);
        if (st != r->want) fail_msg("%s: got %s (%s), want %s", r->what, ga_status_name(st), why, ga_status_name(r->want));
        if (strstr(why, TOK_A) || strstr(why, TOK_B)) fail_msg("%s: message quotes a token: %s", r->what, why);
    }
    /* An unknown job and another job's: the same words, so the answer tells nothing about
     * which jobs exist. */
    char w1[256], w2[256];
    check(a, "beta", "Bearer " TOK_A, w1, sizeof w1);
    check(a, "nosuch", "Bearer " TOK_A, w2, sizeof w2);
    assert_string_equal(strchr(w1, ':'), strchr(w2, ':'));
    /* No tokens configured: every call passes. */
    assert_int_equal(ga_auth_check(NULL, "alpha", NULL, 0, 0, w1, sizeof w1), GA_OK);
    ga_auth_destroy(a);
}

int main(void)
{
    test_memory_baseline();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good_file),
        cmocka_unit_test(test_malformed_files),
        cmocka_unit_test(test_load_from_a_file),
        cmocka_unit_test(test_check), cmocka_unit_test(test_two_tokens_for_one_job),
        cmocka_unit_test(test_host_memory_returned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
