/*
** crc32c.c -- LMDB provider: the CRC32C (Castagnoli) that checksums every stored value. Every
** read of a record checks it, so with large values (payloads of 100 KiB) it is a large share
** of a worker's CPU: on x86-64 with SSE 4.2 the CPU's crc32 instruction computes it 8 bytes at
** a time; elsewhere a table does it a byte at a time. Both give the same value.
*/
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "lmdb_int.h"

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static int crc_hw;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define DX_CRC_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw8(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t c = crc, w;
  for (; n && ((uintptr_t)b & 7); n--) c = _mm_crc32_u8((uint32_t)c, *b++);
  for (; n >= 8; n -= 8, b += 8) {
    memcpy(&w, b, 8);
    c = _mm_crc32_u64(c, w);
  }
  for (; n; n--) c = _mm_crc32_u8((uint32_t)c, *b++);
  return (uint32_t)c;
}
#endif

static void crc_init(void) {
  uint32_t i, j, c;
  for (i = 0; i < 256; i++) {
    for (c = i, j = 0; j < 8; j++) c = (c >> 1) ^ (c & 1 ? 0x82F63B78u : 0);
    crc_table[i] = c;
  }
#ifdef DX_CRC_HW
  crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t dx__lm_crc32c_table(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  pthread_once(&crc_once, crc_init);
  while (n--) crc = crc_table[(crc ^ *b++) & 0xff] ^ (crc >> 8);
  return crc;
}

uint32_t dx__lm_crc32c(uint32_t crc, const void *p, size_t n) {
  pthread_once(&crc_once, crc_init);
#ifdef DX_CRC_HW
  if (crc_hw) return crc_hw8(crc, p, n);
#endif
  return dx__lm_crc32c_table(crc, p, n);
}
