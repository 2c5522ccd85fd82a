/* CRC-32C (crc32c.h): reflected polynomial 0x82F63B78, initial and final XOR 0xFFFFFFFF. */
#include "crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#define POLY 0x82F63B78u

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        table[i] = c;
    }
}

static uint32_t crc_table(uint32_t c, const unsigned char *p, size_t len)
{
    pthread_once(&table_once, table_init);
    while (len--) c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *p, size_t len)
{
    uint64_t c64 = c;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
    }
    c = (uint32_t)c64;
    for (; len; p++, len--) c = __builtin_ia32_crc32qi(c, *p);
    return c;
}

static bool have_hw(void)
{
    __builtin_cpu_init(); /* cheap after the first call */
    return __builtin_cpu_supports("sse4.2");
}
#endif

uint32_t ga_crc32c(uint32_t crc, const void *buf, size_t len)
{
    uint32_t c = ~crc;
#if defined(__x86_64__)
    if (have_hw()) return ~crc_hw(c, buf, len);
#endif
    return ~crc_table(c, buf, len);
}
