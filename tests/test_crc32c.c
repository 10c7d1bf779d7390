/*
** test_crc32c.c -- the LMDB record checksum (core/src/providers/lmdb/crc32c.c): the CPU
** instruction and the table versions give the byte-wise reference's sums, at every length and
** alignment, so stores written by any version read back with any other.
*/
#include "providers/lmdb/crc32c.h"
#include "testlib.h"

static uint32_t sum(uint32_t (*f)(uint32_t, const void *, size_t), const void *p, size_t n) {
  return ~f(~0u, p, n);
}

DX_TEST(crc32c_known_values) {
  ASSERT_EQ(sum(dx__crc32c_bytewise, "123456789", 9), 0xE3069283u); /* the standard check */
  ASSERT_EQ(sum(dx__crc32c_sw, "123456789", 9), 0xE3069283u);
  ASSERT_EQ(sum(dx__crc32c_hw, "123456789", 9), 0xE3069283u);
  ASSERT_EQ(sum(dx__crc32c, "123456789", 9), 0xE3069283u);
  ASSERT_EQ(sum(dx__crc32c, "", 0), 0u);
}

DX_TEST(crc32c_rfc3720_vectors) {
  /* iSCSI's CRC32C examples (RFC 3720 B.4): 32 zero bytes, 32 0xff bytes, 0..31 ascending */
  unsigned char zeros[32], ones[32], inc[32];
  size_t i;
  memset(zeros, 0, sizeof zeros);
  memset(ones, 0xff, sizeof ones);
  for (i = 0; i < 32; i++) inc[i] = (unsigned char)i;
  ASSERT_EQ(sum(dx__crc32c, zeros, 32), 0x8A9136AAu);
  ASSERT_EQ(sum(dx__crc32c, ones, 32), 0x62A8AB43u);
  ASSERT_EQ(sum(dx__crc32c, inc, 32), 0x46DD794Eu);
  ASSERT_EQ(sum(dx__crc32c_sw, inc, 32), 0x46DD794Eu);
}

DX_TEST(crc32c_every_length_and_alignment_matches_the_reference) {
  unsigned char buf[600];
  size_t off, n, i;
  uint32_t seed = 12345;
  for (i = 0; i < sizeof buf; i++) {
    seed = seed * 1103515245u + 12345u;
    buf[i] = (unsigned char)(seed >> 16);
  }
  for (off = 0; off < 16; off++)
    for (n = 0; n + off <= 530; n++) {
      uint32_t want = sum(dx__crc32c_bytewise, buf + off, n);
      if (sum(dx__crc32c_sw, buf + off, n) != want || sum(dx__crc32c_hw, buf + off, n) != want ||
          sum(dx__crc32c, buf + off, n) != want)
        DX_FAIL_AT("offset %zu length %zu: sums differ", off, n);
    }
}

DX_TEST(crc32c_continues_across_pieces) {
  const char *a = "instance-1", *b = "a value of some length, more than eight bytes";
  uint32_t whole, parts;
  char cat[128];
  snprintf(cat, sizeof cat, "%s%s", a, b);
  whole = ~dx__crc32c(~0u, cat, strlen(cat));
  parts = ~dx__crc32c(dx__crc32c(~0u, a, strlen(a)), b, strlen(b));
  ASSERT_EQ(whole, parts);
  ASSERT_EQ(parts, ~dx__crc32c_bytewise(dx__crc32c_bytewise(~0u, a, strlen(a)), b, strlen(b)));
}
