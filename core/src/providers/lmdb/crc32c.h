/*
** crc32c.h -- CRC32C (Castagnoli) of a byte range, continuing from `crc` (start with ~0u and
** invert the result for the standard sum). All functions give the same sums.
*/
#ifndef DX_LMDB_CRC32C_H
#define DX_LMDB_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The fastest way this CPU has (the SSE4.2 instruction, else dx__crc32c_sw). */
uint32_t dx__crc32c(uint32_t crc, const void *p, size_t n);

/* Eight bytes per step from tables (any CPU). */
uint32_t dx__crc32c_sw(uint32_t crc, const void *p, size_t n);

/* One byte per step: the reference (tests). */
uint32_t dx__crc32c_bytewise(uint32_t crc, const void *p, size_t n);

/* 1 when dx__crc32c_hw uses the CPU instruction; elsewhere dx__crc32c_hw is dx__crc32c_sw. */
int dx__crc32c_hw_available(void);
uint32_t dx__crc32c_hw(uint32_t crc, const void *p, size_t n);

#endif
