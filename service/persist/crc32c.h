/* CRC-32C (Castagnoli), the checksum of checkpoint files and journal records: the SSE4.2
 * instruction where the CPU has it, a table otherwise (same values). Any thread. */
#ifndef GA_CRC32C_H
#define GA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over buf[0..len). crc32c("123456789") = 0xE3069283. */
uint32_t ga_crc32c(uint32_t crc, const void *buf, size_t len);

#endif
