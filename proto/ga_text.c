/* Escaping of client strings for text (ga_text.h). */
#include "ga_text.h"

#include <stdint.h>
#include <string.h>

size_t ga_utf8_len(const unsigned char *s, size_t n)
{
    if (s[0] < 0x80) return 1;
    size_t len;
    uint32_t cp;
    if ((s[0] & 0xE0) == 0xC0) len = 2, cp = s[0] & 0x1F;
    else if ((s[0] & 0xF0) == 0xE0) len = 3, cp = s[0] & 0x0F;
    else if ((s[0] & 0xF8) == 0xF0) len = 4, cp = s[0] & 0x07;
    else return 0;
    if (len > n) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return len;
}

size_t ga_text_escape(char *out, size_t cap, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t w = 0;
    while (n) {
        size_t k = ga_utf8_len(p, n);
        char buf[4];
        const char *piece = (const char *)p;
        size_t len = k;
        if (k == 0 || *p < 0x20 || *p == 0x7F) {
            buf[0] = '\\', buf[1] = 'x', buf[2] = hex[*p >> 4], buf[3] = hex[*p & 15];
            piece = buf, len = 4, k = 1;
        } else if (*p == '\\') {
            piece = "\\\\", len = 2;
        }
        if (w + len >= cap) break;
        memcpy(out + w, piece, len);
        w += len;
        p += k, n -= k;
    }
    out[w] = '\0';
    return w;
}
