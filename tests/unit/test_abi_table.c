/* ga_client_abi_layout: every field of every public struct, parsed from the headers
 * themselves (so a field added without a table row fails here), answers its offsetof; sizes;
 * unknown names answer (size_t)-1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gradagg.h"

#define NONE ((size_t)-1)

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    /* Comments out, so the parser sees declarations only. */
    for (char *p = s; *p; p++) {
        if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            memset(p, ' ', (size_t)(end - p));
        }
    }
    return s;
}

/* Calls check(type, field) for each field of `typedef struct type { ... } type;` in text;
 * returns the number of fields. */
static int for_each_field(const char *text, const char *type, void (*check)(const char *, const char *))
{
    char head[128];
    snprintf(head, sizeof head, "typedef struct %s {", type);
    const char *b = strstr(text, head);
    if (!b) fail_msg("no '%s' in the headers", head);
    b += strlen(head);
    const char *e = strchr(b, '}');
    assert_non_null(e);
    int count = 0;
    char decl[4096]; /* comments blanked out count too */
    while (b < e) {
        const char *semi = memchr(b, ';', (size_t)(e - b));
        if (!semi) break;
        size_t len = (size_t)(semi - b);
        assert_true(len < sizeof decl);
        memcpy(decl, b, len);
        decl[len] = '\0';
        b = semi + 1;
        /* "double a, b" / "const char *x": the last identifier of each comma-separated piece. */
        for (char *piece = strtok(decl, ","); piece; piece = strtok(NULL, ",")) {
            char *end = piece + strlen(piece);
            while (end > piece && !isalnum((unsigned char)end[-1]) && end[-1] != '_') end--;
            char *start = end;
            while (start > piece && (isalnum((unsigned char)start[-1]) || start[-1] == '_')) start--;
            if (start == end) continue;
            char name[64];
            assert_true((size_t)(end - start) < sizeof name);
            memcpy(name, start, (size_t)(end - start));
            name[end - start] = '\0';
            check(type, name);
            count++;
        }
    }
    return count;
}

static void field_known(const char *type, const char *field)
{
    size_t off = ga_client_abi_layout(type, field);
    if (off == NONE) fail_msg("%s.%s: no row in client/abi.c", type, field);
    assert_true(off < ga_client_abi_layout(type, NULL));
}

static const char *const types[] = {"ga_client_options", "ga_tensor_options", "ga_codec_params",
                                    "ga_sgd_params",     "ga_adam_params",    "ga_dgc_options",
                                    "ga_auto_threshold", "ga_client_stats"};

static void every_header_field_listed(void **state)
{
    (void)state;
    char *text = NULL;
    const char *files[] = {GA_SOURCE_DIR "/client/gradagg.h", GA_SOURCE_DIR "/kernels/ga_codec.h",
                           GA_SOURCE_DIR "/kernels/ga_optim.h"};
    size_t total = 0;
    for (size_t i = 0; i < 3; i++) {
        char *t = read_text(files[i]);
        size_t n = strlen(t);
        text = realloc(text, total + n + 1);
        assert_non_null(text);
        memcpy(text + total, t, n + 1);
        total += n;
        free(t);
    }
    int fields = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        assert_true(ga_client_abi_layout(types[i], NULL) != NONE);
        fields += for_each_field(text, types[i], field_known);
    }
    /* 32 + 6 + 8 + 4 + 6 + 6 + 5 + 11: a parser that found nothing would pass vacuously. */
    assert_int_equal(fields, 80);
    free(text);
}

static void matches_offsetof(void **state)
{
    (void)state;
    assert_int_equal(ga_client_abi_layout("ga_client_options", NULL), sizeof(ga_client_options));
    assert_int_equal(ga_client_abi_layout("ga_tensor_options", NULL), sizeof(ga_tensor_options));
    assert_int_equal(ga_client_abi_layout("ga_codec_params", NULL), sizeof(ga_codec_params));
    assert_int_equal(ga_client_abi_layout("ga_sgd_params", NULL), sizeof(ga_sgd_params));
    assert_int_equal(ga_client_abi_layout("ga_adam_params", NULL), sizeof(ga_adam_params));
    assert_int_equal(ga_client_abi_layout("ga_dgc_options", NULL), sizeof(ga_dgc_options));
    assert_int_equal(ga_client_abi_layout("ga_auto_threshold", NULL), sizeof(ga_auto_threshold));
    assert_int_equal(ga_client_abi_layout("ga_client_stats", NULL), sizeof(ga_client_stats));
    assert_int_equal(ga_client_abi_layout("ga_client_options", "auth_token"),
                     offsetof(ga_client_options, auth_token));
    assert_int_equal(ga_client_abi_layout("ga_client_options", "pull_params"),
                     offsetof(ga_client_options, pull_params));
    assert_int_equal(ga_client_abi_layout("ga_client_options", "adam"), offsetof(ga_client_options, adam));
    assert_int_equal(ga_client_abi_layout("ga_tensor_options", "device"), offsetof(ga_tensor_options, device));
    assert_int_equal(ga_client_abi_layout("ga_tensor_options", "auto_threshold"),
                     offsetof(ga_tensor_options, auto_threshold));
    assert_int_equal(ga_client_abi_layout("ga_codec_params", "seed"), offsetof(ga_codec_params, seed));
    assert_int_equal(ga_client_abi_layout("ga_codec_params", "topk_indices"),
                     offsetof(ga_codec_params, topk_indices));
    assert_int_equal(ga_client_abi_layout("ga_codec_params", "select"), offsetof(ga_codec_params, select));
    assert_int_equal(ga_client_abi_layout("ga_auto_threshold", "level"), offsetof(ga_auto_threshold, level));
    assert_int_equal(ga_client_abi_layout("ga_adam_params", "decoupled"), offsetof(ga_adam_params, decoupled));
    assert_int_equal(ga_client_abi_layout("ga_auto_threshold", "sample_fraction"),
                     offsetof(ga_auto_threshold, sample_fraction));
    assert_int_equal(ga_client_abi_layout("ga_client_stats", "rejoins"), offsetof(ga_client_stats, rejoins));
    assert_int_equal(ga_client_abi_layout("ga_dgc_options", "warmup_epochs"),
                     offsetof(ga_dgc_options, warmup_epochs));
    assert_int_equal(ga_client_abi_layout("ga_sgd_params", "nesterov"), offsetof(ga_sgd_params, nesterov));
}

static void unknown_names(void **state)
{
    (void)state;
    assert_int_equal(ga_client_abi_layout(NULL, NULL), NONE);
    assert_int_equal(ga_client_abi_layout(NULL, "lr"), NONE);
    assert_int_equal(ga_client_abi_layout("ga_client", NULL), NONE);
    assert_int_equal(ga_client_abi_layout("ga_client_options", "nope"), NONE);
    assert_int_equal(ga_client_abi_layout("ga_client_options", ""), NONE);
    assert_int_equal(ga_client_abi_layout("ga_sgd_params", "beta1"), NONE); /* a field of another type */
    assert_int_equal(ga_client_abi_layout("GA_SGD_PARAMS", NULL), NONE);  /* exact names */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_header_field_listed),
        cmocka_unit_test(matches_offsetof),
        cmocka_unit_test(unknown_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
