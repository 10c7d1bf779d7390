/*
** crc32c.c -- CRC32C (Castagnoli), the checksum behind every LMDB record (txn.c).
**
** Three ways to the same sum: the SSE4.2 crc32 instruction when the CPU has it (x86-64), else
** eight bytes per step with eight tables ("slicing by 8"). The byte-wise table of the first
** version is kept as the reference the tests compare both with: stores written by any of them
** read back with any other.
*/
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "providers/lmdb/crc32c.h"

#define POLY 0x82F63B78u /* CRC32C, reflected */

static uint32_t tab[8][256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void) {
  uint32_t i, j, c;
  for (i = 0; i < 256; i++) {
    for (c = i, j = 0; j < 8; j++) c = (c >> 1) ^ (c & 1 ? POLY : 0);
    tab[0][i] = c;
  }
  for (i = 0; i < 256; i++)
    for (j = 1; j < 8; j++) tab[j][i] = (tab[j - 1][i] >> 8) ^ tab[0][tab[j - 1][i] & 0xff];
}

uint32_t dx__crc32c_bytewise(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  pthread_once(&tab_once, tab_init);
  while (n--) crc = tab[0][(crc ^ *b++) & 0xff] ^ (crc >> 8);
  return crc;
}

uint32_t dx__crc32c_sw(uint32_t crc, const void *p, size_t n) {
  const unsigned char *b = p;
  pthread_once(&tab_once, tab_init);
  for (; n && ((uintptr_t)b & 7); n--) crc = tab[0][(crc ^ *b++) & 0xff] ^ (crc >> 8);
  for (; n >= 8; n -= 8, b += 8) {
    uint32_t lo = crc ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                         (uint32_t)b[3] << 24);
    crc = tab[7][lo & 0xff] ^ tab[6][(lo >> 8) & 0xff] ^ tab[5][(lo >> 16) & 0xff] ^
          tab[4][lo >> 24] ^ tab[3][b[4]] ^ tab[2][b[5]] ^ tab[1][b[6]] ^ tab[0][b[7]];
  }
  while (n--) crc = tab[0][(crc ^ *b++) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_HW 1
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const void *p,
                                                         size_t n) {
  /* x86 loads unaligned words at full speed: no byte-wise lead-in (keys and values are
  ** short, and the lead-in and tail were most of their steps); the tail goes 4, 2, 1 bytes */
  const unsigned char *b = p;
  uint64_t c = crc;
  uint32_t c32;
  for (; n >= 8; n -= 8, b += 8) {
    uint64_t w;
    memcpy(&w, b, 8);
    c = __builtin_ia32_crc32di(c, w);
  }
  c32 = (uint32_t)c;
  if (n & 4) {
    uint32_t w;
    memcpy(&w, b, 4);
    c32 = __builtin_ia32_crc32si(c32, w);
    b += 4;
  }
  if (n & 2) {
    uint16_t w;
    memcpy(&w, b, 2);
    c32 = __builtin_ia32_crc32hi(c32, w);
    b += 2;
  }
  if (n & 1) c32 = __builtin_ia32_crc32qi(c32, *b);
  return c32;
}

static int hw_ok;
static pthread_once_t hw_once = PTHREAD_ONCE_INIT;

static void hw_init(void) {
  __builtin_cpu_init();
  hw_ok = __builtin_cpu_supports("sse4.2") ? 1 : 0;
}

static int hw_known; /* 1 once hw_ok is set: the hot path skips pthread_once */

int dx__crc32c_hw_available(void) {
  if (!__atomic_load_n(&hw_known, __ATOMIC_ACQUIRE)) {
    pthread_once(&hw_once, hw_init);
    __atomic_store_n(&hw_known, 1, __ATOMIC_RELEASE);
  }
  return hw_ok;
}

uint32_t dx__crc32c_hw(uint32_t crc, const void *p, size_t n) { return crc_hw(crc, p, n); }
#else
#define HAVE_HW 0
int dx__crc32c_hw_available(void) { return 0; }
uint32_t dx__crc32c_hw(uint32_t crc, const void *p, size_t n) { return dx__crc32c_sw(crc, p, n); }
#endif

uint32_t dx__crc32c(uint32_t crc, const void *p, size_t n) {
#if HAVE_HW
  if (dx__crc32c_hw_available()) return crc_hw(crc, p, n);
#endif
  return dx__crc32c_sw(crc, p, n);
}
