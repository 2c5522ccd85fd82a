/* Strings that came over the wire (a job's or a tensor's name, a Leave's reason: whatever a
 * client sent) rendered where a person or a parser reads them: the server's log, the CLI's
 * tables and JSON, /metrics. Pure functions, any thread. docs/operations.md, "Client strings". */
#ifndef GA_TEXT_H
#define GA_TEXT_H

#include <stddef.h>

/* Length of the valid UTF-8 sequence at s[0..n), n >= 1, or 0 when it is not one (overlong
 * forms, surrogates and code points above U+10FFFF included). */
size_t ga_utf8_len(const unsigned char *s, size_t n);

/* s[0..n) for a line of text: valid UTF-8 printable characters as they are, a backslash as
 * "\\", and every control byte (below 0x20, and 0x7F) and every byte that is not part of valid
 * UTF-8 as "\xNN" (two lowercase hex digits), so one line can never become two and a reader
 * can tell an escape from the text. Writes at most cap - 1 bytes and a NUL (cap >= 1), never
 * cutting an escape or a character in two, and returns the bytes written. */
size_t ga_text_escape(char *out, size_t cap, const char *s, size_t n);

/* The same for a C string, into a buffer the caller sizes: 4 * strlen(s) + 1 always suffices. */
#define GA_TEXT_ESCAPED_CAP(len) (4 * (len) + 1)

#endif
