/* A small JSON writer for the command line tool's --json output: objects, arrays, strings
 * (escaped per RFC 8259), integers, numbers and booleans, written to a FILE as they come, with
 * the commas placed by the writer. Nesting deeper than JSON_DEPTH is a programming error. */
#ifndef GA_CLI_JSON_H
#define GA_CLI_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_DEPTH 8

typedef struct json {
    FILE *out;
    int depth;
    bool first[JSON_DEPTH]; /* no member written yet at this depth */
} json;

void json_begin_object(json *j, const char *key); /* key: the member name inside an object, else NULL */
void json_end_object(json *j);
void json_begin_array(json *j, const char *key);
void json_end_array(json *j);
void json_string(json *j, const char *key, const char *value); /* NULL value: null */
void json_uint(json *j, const char *key, uint64_t value);
void json_double(json *j, const char *key, double value); /* a non-finite value: null */
void json_bool(json *j, const char *key, bool value);
/* Ends the document with a newline. */
void json_finish(json *j);

#endif
