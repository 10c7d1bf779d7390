/*
** test_watchdog.c -- the watchdog's alarms (core/src/watchdog.c): an early call armed with
** dx__watch_arm_early comes even while the thread naps for a long period (the arm wakes it),
** comes once, never after the disarm, and an arm with no time limit still makes it.
*/
#include <stdatomic.h>
#include <uv.h>

#include "testlib.h"
#include "watchdog.h"

static atomic_int early_calls, alarm_calls;
static int on_early(void *arg) {
  (void)arg;
  atomic_fetch_add(&early_calls, 1);
  return 0;
}
/* Asks to be called again once (the first call returns 1). */
static int on_early_twice(void *arg) {
  (void)arg;
  return atomic_fetch_add(&early_calls, 1) == 0;
}
static void on_alarm(void *arg) {
  (void)arg;
  atomic_fetch_add(&alarm_calls, 1);
}

/* Wait (at most ~15 s: the test times out at 30) until `n` early calls came. */
static int wait_early(int n) {
  int i;
  for (i = 0; i < 15000 && atomic_load(&early_calls) < n; i++) uv_sleep(1);
  return atomic_load(&early_calls) >= n;
}

static void detach(uv_loop_t *loop) {
  dx__watchdog_detach(loop);
  uv_run(loop, UV_RUN_NOWAIT); /* the heartbeat timer's close */
  uv_loop_close(loop);
}

DX_TEST(watch_early_call_comes_while_the_thread_naps) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  atomic_store(&early_calls, 0);
  atomic_store(&alarm_calls, 0);
  /* no blocked-loop warning and a 10-minute turn limit: the thread's period is 150 s */
  ASSERT_EQ(dx__watchdog_attach(&loop, 0, 600000), 0);
  uv_sleep(50); /* the thread's first look found no arm: it naps */
  ASSERT_EQ(dx__watch_arm_early(&loop, 600000, on_alarm, 2, on_early, NULL), 1);
  ASSERT_EQ(wait_early(1), 1); /* long before the period ends */
  uv_sleep(20);
  ASSERT_EQ(atomic_load(&early_calls), 1); /* once per arm */
  ASSERT_EQ(atomic_load(&alarm_calls), 0);
  /* one arm at a time: a nested arm is refused and the outer one stays */
  ASSERT_EQ(dx__watch_arm_early(&loop, 600000, on_alarm, 2, on_early, NULL), 0);
  dx__watch_disarm(&loop);
  detach(&loop);
}

DX_TEST(watch_early_call_that_asks_again_comes_again) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  atomic_store(&early_calls, 0);
  ASSERT_EQ(dx__watchdog_attach(&loop, 0, 600000), 0);
  ASSERT_EQ(dx__watch_arm_early(&loop, 600000, on_alarm, 2, on_early_twice, NULL), 1);
  ASSERT_EQ(wait_early(2), 1);
  uv_sleep(40);
  ASSERT_EQ(atomic_load(&early_calls), 2); /* the second call returned 0: no third */
  dx__watch_disarm(&loop);
  detach(&loop);
}

DX_TEST(watch_early_call_without_a_time_limit_and_not_after_disarm) {
  uv_loop_t loop;
  int i;
  uv_loop_init(&loop);
  atomic_store(&early_calls, 0);
  atomic_store(&alarm_calls, 0);
  ASSERT_EQ(dx__watchdog_attach(&loop, 0, 600000), 0);
  /* a turn with no time limit: only the early call */
  ASSERT_EQ(dx__watch_arm_early(&loop, 0, on_alarm, 2, on_early, NULL), 1);
  ASSERT_EQ(wait_early(1), 1);
  dx__watch_disarm(&loop);
  /* arms disarmed at once never call: many short arms (the thread looks every 10 ms meanwhile) */
  for (i = 0; i < 200; i++) {
    ASSERT_EQ(dx__watch_arm_early(&loop, 0, on_alarm, 60000, on_early, NULL), 1);
    dx__watch_disarm(&loop);
    uv_sleep(0);
  }
  uv_sleep(20);
  ASSERT_EQ(atomic_load(&early_calls), 1);
  /* without a limit and without an early call there is nothing to arm */
  ASSERT_EQ(dx__watch_arm_early(&loop, 0, on_alarm, 0, NULL, NULL), 0);
  ASSERT_EQ(atomic_load(&alarm_calls), 0);
  detach(&loop);
}

