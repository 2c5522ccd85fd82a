/* ga_text.h: client strings rendered for a line of text. Every control byte, every byte outside
 * valid UTF-8 (overlong forms, surrogates, truncated sequences, bytes above U+10FFFF) and the
 * backslash are escaped; valid printable UTF-8 passes unchanged; a cut never splits an escape or
 * a character. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "ga_text.h"

static void expect(const char *in, size_t n, const char *want)
{
    char out[256];
    size_t w = ga_text_escape(out, sizeof out, in, n);
    assert_string_equal(out, want);
    assert_int_equal(w, strlen(want));
}

static void test_escapes(void **state)
{
    (void)state;
    expect("job-1", 5, "job-1");
    expect("a\nb", 3, "a\\x0ab");                      /* a newline cannot start a forged line */
    expect("a\r\tb\x1b[31m", 9, "a\\x0d\\x09b\\x1b[31m"); /* nor a carriage return or a terminal escape */
    expect("\x7f", 1, "\\x7f");
    expect("back\\slash", 10, "back\\\\slash");         /* so "\x0a" written by a client stays text */
    expect("\\x0a", 4, "\\\\x0a");
    expect("quote\"s'", 8, "quote\"s'");
    expect("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    expect("\xff\xfe", 2, "\\xff\\xfe");
    expect("\xc0\xaf", 2, "\\xc0\\xaf");                /* overlong '/' */
    expect("\xed\xa0\x80", 3, "\\xed\\xa0\\x80");       /* a surrogate */
    expect("\xf4\x90\x80\x80", 4, "\\xf4\\x90\\x80\\x80"); /* above U+10FFFF */
    expect("\xe2\x82", 2, "\\xe2\\x82");                /* truncated */
    expect("a\0b", 3, "a\\x00b");                       /* a NUL inside the counted bytes */
}

static void test_cuts_whole(void **state)
{
    (void)state;
    char out[8];
    assert_int_equal(ga_text_escape(out, 7, "abc\ndef", 7), 3); /* "abc" + the 4 of the escape + NUL: 8 */
    assert_string_equal(out, "abc");
    assert_int_equal(ga_text_escape(out, 8, "abc\ndef", 7), 7);
    assert_string_equal(out, "abc\\x0a");
    assert_int_equal(ga_text_escape(out, sizeof out, "abcd\xe2\x82\xac", 7), 7);
    assert_string_equal(out, "abcd\xe2\x82\xac");
    assert_int_equal(ga_text_escape(out, sizeof out, "abcde\xe2\x82\xac", 8), 5); /* the euro sign whole, or not */
    assert_string_equal(out, "abcde");
    assert_int_equal(ga_text_escape(out, 1, "abc", 3), 0);
    assert_string_equal(out, "");
    /* A long name: every byte accounted for, within the bound GA_TEXT_ESCAPED_CAP gives. */
    char name[300], big[GA_TEXT_ESCAPED_CAP(300)];
    for (size_t i = 0; i < sizeof name; i++) name[i] = (char)(i % 3 ? 'x' : 0x01);
    assert_int_equal(ga_text_escape(big, sizeof big, name, sizeof name), 200 + 4 * 100);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_cuts_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
