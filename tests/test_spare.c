/*
** test_spare.c -- recycled blocks (core/src/spare.c): a freed block comes back zeroed, at most
** `max` are kept, draining frees them. Under ASan the list keeps nothing (every block goes
** to malloc), which the tests accept.
*/
#include <stdint.h>
#include <string.h>

#include "spare.h"
#include "testlib.h"

DX_TEST(spare_block_comes_back_zeroed) {
  dx__spare_t s;
  unsigned char *a, *b;
  size_t i;
  dx__spare_init(&s, 100, 4);
  a = dx__spare_calloc(&s);
  ASSERT_NE(a, NULL);
  for (i = 0; i < 100; i++) ASSERT_EQ(a[i], 0);
  memset(a, 0xab, 100);
  dx__spare_free(&s, a);
  b = dx__spare_calloc(&s);
  ASSERT_NE(b, NULL);
  for (i = 0; i < 100; i++) ASSERT_EQ(b[i], 0); /* the reused block (or a new one) is zeroed */
  ASSERT_EQ(s.n, 0);
  dx__spare_free(&s, b);
  dx__spare_drain(&s);
  ASSERT_EQ(s.n, 0);
  ASSERT_EQ(s.head, NULL);
}

DX_TEST(spare_keeps_at_most_max_blocks) {
  dx__spare_t s;
  void *p[10];
  int i;
  dx__spare_init(&s, 32, 3);
  for (i = 0; i < 10; i++) ASSERT_NE(p[i] = dx__spare_calloc(&s), NULL);
  for (i = 0; i < 10; i++) dx__spare_free(&s, p[i]);
  ASSERT_EQ(s.n <= 3, 1);
  for (i = 0; i < 10; i++) ASSERT_NE(p[i] = dx__spare_calloc(&s), NULL);
  ASSERT_EQ(s.n, 0);
  for (i = 0; i < 10; i++) dx__spare_free(&s, p[i]);
  dx__spare_free(&s, NULL); /* allowed, like free(NULL) */
  dx__spare_drain(&s);
  ASSERT_EQ(s.n, 0);
}

DX_TEST(spare_tiny_blocks_still_hold_the_link) {
  dx__spare_t s;
  void *a, *b;
  dx__spare_init(&s, 1, 2); /* a block is at least a pointer: the free list lives in it */
  a = dx__spare_calloc(&s);
  b = dx__spare_calloc(&s);
  ASSERT_NE(a, NULL);
  ASSERT_NE(b, NULL);
  dx__spare_free(&s, a);
  dx__spare_free(&s, b);
  ASSERT_NE(a = dx__spare_calloc(&s), NULL);
  ASSERT_EQ(*(unsigned char *)a, 0);
  dx__spare_free(&s, a);
  dx__spare_drain(&s);
}

