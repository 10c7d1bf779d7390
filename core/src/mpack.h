/*
** mpack.h -- the MessagePack writer shared by the record codec (codec.c) and the LMDB
** provider's wrapper records (providers/lmdb/records.c).
**
** Each dx__mp_* writes one element at b and returns its length; with b NULL it only
** counts, so a caller sizes its buffer with the same calls it then writes with. The forms are
** the smallest ones, as msgpack-c chooses them (str8 for 32-255 byte strings), so records keep
** their bytes (tests records_encode_as_msgpack_c_would, lmdb_records_writer_matches_msgpack_c).
*/
#ifndef DX_MPACK_H
#define DX_MPACK_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A tag byte, then the low w bytes of v big-endian. */
static inline size_t dx__mp_head(unsigned char *b, unsigned tag, uint64_t v, size_t w) {
  size_t i;
  if (b) {
    b[0] = (unsigned char)tag;
    for (i = 0; i < w; i++) b[1 + i] = (unsigned char)(v >> (8 * (w - 1 - i)));
  }
  return 1 + w;
}

static inline size_t dx__mp_nil(unsigned char *b) { return dx__mp_head(b, 0xc0, 0, 0); }

static inline size_t dx__mp_uint(unsigned char *b, uint64_t v) {
  if (v < 128) return dx__mp_head(b, (unsigned)v, 0, 0);
  if (v < 256) return dx__mp_head(b, 0xcc, v, 1);
  if (v < 65536) return dx__mp_head(b, 0xcd, v, 2);
  if (v <= UINT32_MAX) return dx__mp_head(b, 0xce, v, 4);
  return dx__mp_head(b, 0xcf, v, 8);
}

static inline size_t dx__mp_int(unsigned char *b, int64_t v) {
  if (v >= 0) return dx__mp_uint(b, (uint64_t)v);
  if (v >= -32) return dx__mp_head(b, (unsigned)(v & 0xff), 0, 0);
  if (v >= -128) return dx__mp_head(b, 0xd0, (uint64_t)v, 1);
  if (v >= -32768) return dx__mp_head(b, 0xd1, (uint64_t)v, 2);
  if (v >= INT32_MIN) return dx__mp_head(b, 0xd2, (uint64_t)v, 4);
  return dx__mp_head(b, 0xd3, (uint64_t)v, 8);
}

/* A str (bin = 0) or bin (bin = 1) of the n bytes at p (p is not read when b is NULL). */
static inline size_t dx__mp_bytes(unsigned char *b, int bin, const char *p, size_t n) {
  size_t h;
  if (!bin && n < 32) h = dx__mp_head(b, 0xa0 | (unsigned)n, 0, 0);
  else if (n < 256) h = dx__mp_head(b, bin ? 0xc4 : 0xd9, n, 1);
  else if (n < 65536) h = dx__mp_head(b, bin ? 0xc5 : 0xda, n, 2);
  else h = dx__mp_head(b, bin ? 0xc6 : 0xdb, n, 4);
  if (b && n) memcpy(b + h, p, n);
  return h + n;
}

/* The header of a map of n entries (map = 1) or an array of n elements (map = 0). */
static inline size_t dx__mp_container(unsigned char *b, int map, size_t n) {
  if (n < 16) return dx__mp_head(b, (map ? 0x80 : 0x90) | (unsigned)n, 0, 0);
  if (n < 65536) return dx__mp_head(b, map ? 0xde : 0xdc, n, 2);
  return dx__mp_head(b, map ? 0xdf : 0xdd, n, 4);
}

#endif
