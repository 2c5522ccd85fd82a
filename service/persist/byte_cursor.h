/* Reading a little-endian byte record field by field (checkpoint meta, journal bodies): a
 * cursor that never reads past its end. */
#ifndef GA_BYTE_CURSOR_H
#define GA_BYTE_CURSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct ga_cursor {
    const uint8_t *p;
    size_t left;
} ga_cursor;

/* Copies the next n bytes to dst and moves on; false (nothing moved) when fewer are left. */
static inline bool ga_cursor_take(ga_cursor *c, void *dst, size_t n)
{
    if (c->left < n) return false;
    memcpy(dst, c->p, n);
    c->p += n, c->left -= n;
    return true;
}

#endif
