/*
** test_ocache.c -- the orchestration cache's expectations (core/src/orch_cache.c): turns whose
** ack is in flight, found by instance id through a hash index; ending one (in any order) moves
** another in the table, and every other is still found with its own answers. The cache
** borrows each id until its expectation ends: they live in ids[].
*/
#include <stdint.h>
#include <stdio.h>

#include "orch_cache.h"
#include "testlib.h"

#define N 1000

static char ids[N][32];

static const char *id_of(int i) {
  snprintf(ids[i], sizeof ids[i], "inst-%d", i);
  return ids[i];
}

/* Every instance in [0, N) answers as expected (live[i]: expected, with exec i + 1 and
** n_events 2 * i + 3), or not at all. */
static int all_answer(dx_ocache_t *c, const unsigned char *live) {
  char id[32];
  int i;
  for (i = 0; i < N; i++) {
    uint64_t ex = 0, n = 0;
    int held;
    snprintf(id, sizeof id, "inst-%d", i); /* another copy: found by content */
    held = dx__ocache_holds(c, id, &ex, &n);
    if (held != live[i]) return 0;
    if (held && (ex != (uint64_t)i + 1 || n != 2 * (uint64_t)i + 3)) return 0;
  }
  return 1;
}

DX_TEST(ocache_expectations_found_and_ended_in_any_order) {
  dx_ocache_t *c = dx__ocache_new(1 << 20, NULL);
  unsigned char live[N] = {0};
  const char *id;
  int i, k;
  ASSERT_NE(c, NULL);
  for (i = 0; i < N; i++) {
    id = id_of(i);
    ASSERT_EQ(dx__ocache_expect(c, id, 1, 1), 1);
    ASSERT_EQ(dx__ocache_expect(c, id, (uint64_t)i + 1, 2 * (uint64_t)i + 3), 1); /* updated */
    live[i] = 1;
  }
  ASSERT_EQ(all_answer(c, live), 1);
  dx__ocache_expect_end(c, "inst-none"); /* not expected: nothing changes */
  ASSERT_EQ(all_answer(c, live), 1);
  for (k = 0; k < N; k++) {
    i = (int)(((long)k * 7919) % N); /* a permutation of [0, N) */
    dx__ocache_expect_end(c, ids[i]);
    live[i] = 0;
    if (k % 97 == 0 || k > N - 5) ASSERT_EQ(all_answer(c, live), 1);
  }
  ASSERT_EQ(all_answer(c, live), 1);
  /* expected again after ending: found again */
  id = id_of(5);
  ASSERT_EQ(dx__ocache_expect(c, id, 6, 13), 1);
  live[5] = 1;
  ASSERT_EQ(all_answer(c, live), 1);
  dx__ocache_free(c);
}
