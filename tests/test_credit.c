/*
** test_credit.c -- the activity fetch credit (core/src/credit.c): how many activities a worker
** asks the store for, from its free slots and the loop time activity starts took. No clock:
** the costs are given.
*/
#include "credit.h"
#include "testlib.h"

DX_TEST(credit_first_fetch_is_small_until_a_start_is_measured) {
  dx__credit_t c;
  dx__credit_init(&c, 256);
  ASSERT_EQ(dx__credit_top_up(&c), DX__CREDIT_FIRST);
  ASSERT_EQ(dx__credit_top_up(&c), 0); /* the store still holds that credit */
  dx__credit_init(&c, 2);
  ASSERT_EQ(dx__credit_top_up(&c), 2); /* never more than the slots */
}

DX_TEST(credit_cpu_bound_starts_take_one_at_a_time) {
  dx__credit_t c;
  int i;
  dx__credit_init(&c, 256);
  ASSERT_EQ(dx__credit_top_up(&c), DX__CREDIT_FIRST);
  dx__credit_fetched(&c, DX__CREDIT_FIRST);
  for (i = 0; i < DX__CREDIT_FIRST; i++) dx__credit_cost(&c, 50000000ull); /* 50 ms each */
  ASSERT_EQ(dx__credit_top_up(&c), 1);
  ASSERT_EQ(dx__credit_top_up(&c), 0);
  for (i = 0; i < DX__CREDIT_FIRST; i++) dx__credit_settled(&c);
  ASSERT_EQ(dx__credit_top_up(&c), 0); /* one asked already: still one at a time */
}

DX_TEST(credit_quick_starts_keep_big_batches_up_to_the_slots) {
  dx__credit_t c;
  int i;
  dx__credit_init(&c, 256);
  ASSERT_EQ(dx__credit_top_up(&c), DX__CREDIT_FIRST);
  dx__credit_fetched(&c, DX__CREDIT_FIRST);
  for (i = 0; i < DX__CREDIT_FIRST; i++) dx__credit_cost(&c, 20000); /* 20 us each */
  ASSERT_EQ(dx__credit_top_up(&c), 256 - DX__CREDIT_FIRST); /* all free slots */
  dx__credit_fetched(&c, 100);                                /* the store had 100 */
  ASSERT_EQ(dx__credit_top_up(&c), 0);                        /* 152 still asked */
  for (i = 0; i < 10; i++) dx__credit_settled(&c);
  ASSERT_EQ(dx__credit_top_up(&c), 10);
}

DX_TEST(credit_follows_a_change_of_cost) {
  dx__credit_t c;
  int i, more;
  dx__credit_init(&c, 64);
  dx__credit_cost(&c, 50000000ull);
  ASSERT_EQ(dx__credit_top_up(&c), 1);
  dx__credit_fetched(&c, 1);
  for (i = 0; i < 60; i++) dx__credit_cost(&c, 1000); /* the work became quick */
  dx__credit_settled(&c);
  more = dx__credit_top_up(&c);
  ASSERT_EQ(more, 64);
}
