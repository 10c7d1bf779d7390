/*
** test_store_backoff.c -- the store thread against a provider that fails (issue 7 item 17):
** failing cycles back off 10 ms doubling to 1 s instead of retrying every poll interval, and
** the first good cycle resets the backoff. A fake provider counts the calls; the checks wait
** for conditions, never for durations.
*/
#include <uv.h>

#include "duroxide/provider.h"
#include "store.h"
#include "store_fake.h"
#include "testlib.h"

static volatile int fail_begin = 1, begins;

static int f_begin(dx_provider_t *p, dx_error_t *err) {
  begins++;
  return fail_begin ? dx_error_set(err, DX_ESTORE, "store /fake: begin failed") : 0;
}
static int f_next_due(dx_provider_t *p, int64_t now, int64_t *out, dx_error_t *err) {
  *out = now; /* always something due: the thread keeps cycling */
  return 0;
}

static dx_provider_methods_t fake_methods;
static dx_provider_t fake = {&fake_methods};

static void on_fetch(void *ud, dx_store_fetched_t *f) {}

/* Wait (bounded) until the store's backoff is `ms`. */
static void wait_backoff(dx_store_t *s, int64_t ms) {
  int i;
  for (i = 0; i < 60000 && dx__store_backoff_ms(s) != ms; i++) usleep(1000);
  ASSERT_EQ(dx__store_backoff_ms(s), ms);
}

DX_TEST(failing_store_cycles_back_off_to_one_second) {
  uv_loop_t loop;
  dx_store_cfg_t cfg;
  dx_store_t *s;
  dx_error_t err;
  uint64_t c;
  store_fake_methods(&fake_methods, f_begin, f_next_due);
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &fake;
  cfg.orch_lock_ms = cfg.work_lock_ms = 1000;
  cfg.poll_interval_ms = 10;
  cfg.on_fetch = on_fetch;
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_want(s, 1, 1);
  wait_backoff(s, 10);
  wait_backoff(s, 20);
  wait_backoff(s, 40);
  wait_backoff(s, 1000); /* ... 640, then capped */
  c = dx__store_cycles(s);
  ASSERT(c >= 8);
  ASSERT(begins >= (int)c && begins <= (int)c + 1); /* one begin per cycle, none between */
  fail_begin = 0; /* the store works again: the next cycle clears the backoff */
  wait_backoff(s, 0);
  dx__store_close(s, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_OK(uv_loop_close(&loop));
}
