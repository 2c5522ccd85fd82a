/* The command line tool's JSON writer (json.h). */
#include "json.h"

#include <math.h>
#include <string.h>

#include "ga_text.h"

/* Strings are client data (job names, reasons): control characters as escapes, and every byte
 * that is not part of valid UTF-8 as U+FFFD, so the output always parses as JSON. */
static void put_string(FILE *out, const char *s)
{
    fputc('"', out);
    const unsigned char *p = (const unsigned char *)s;
    for (size_t n = strlen(s), k; n; p += k, n -= k) {
        k = ga_utf8_len(p, n);
        if (k == 0) {
            fputs("\\ufffd", out);
            k = 1;
            continue;
        }
        if (k > 1) {
            fwrite(p, 1, k, out);
            continue;
        }
        switch (*p) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (*p < 0x20 || *p == 0x7F) fprintf(out, "\\u%04x", *p);
            else fputc(*p, out);
        }
    }
    fputc('"', out);
}

static void separate(json *j, const char *key)
{
    if (j->depth > 0) {
        if (!j->first[j->depth - 1]) fputc(',', j->out);
        j->first[j->depth - 1] = false;
    }
    if (key) {
        put_string(j->out, key);
        fputc(':', j->out);
    }
}

static void begin(json *j, const char *key, char ch)
{
    separate(j, key);
    fputc(ch, j->out);
    j->first[j->depth++] = true;
}

void json_begin_object(json *j, const char *key) { begin(j, key, '{'); }
void json_begin_array(json *j, const char *key) { begin(j, key, '['); }

void json_end_object(json *j)
{
    j->depth--;
    fputc('}', j->out);
}

void json_end_array(json *j)
{
    j->depth--;
    fputc(']', j->out);
}

void json_string(json *j, const char *key, const char *value)
{
    separate(j, key);
    if (value) put_string(j->out, value);
    else fputs("null", j->out);
}

void json_uint(json *j, const char *key, uint64_t value)
{
    separate(j, key);
    fprintf(j->out, "%llu", (unsigned long long)value);
}

void json_double(json *j, const char *key, double value)
{
    separate(j, key);
    if (isfinite(value)) fprintf(j->out, "%.17g", value);
    else fputs("null", j->out);
}

void json_bool(json *j, const char *key, bool value)
{
    separate(j, key);
    fputs(value ? "true" : "false", j->out);
}

void json_finish(json *j) { fputc('\n', j->out); }
