/*
** test_store_backoff.c -- the store thread against a provider that fails (issue 7 item 17):
** failing cycles back off 10 ms doubling to 1 s instead of retrying every poll interval, and
** the first good cycle resets the backoff. A fake provider counts the calls; the checks wait
** for conditions, never for durations.
*/
#include <uv.h>

#include "duroxide/provider.h"
#include "store.h"
#include "testlib.h"

static volatile int fail_begin = 1, begins;

static int f_begin(dx_provider_t *p, dx_error_t *err) {
  begins++;
  return fail_begin ? dx_error_set(err, DX_ESTORE, "store /fake: begin failed") : 0;
}
static int f_commit(dx_provider_t *p, int sync, dx_error_t *err) { return 0; }
static void f_rollback(dx_provider_t *p) {}
static int f_fetch_orch(dx_provider_t *p, int64_t now, int64_t lock_ms, dx_orch_item_t **out,
                        dx_error_t *err) {
  *out = NULL;
  return 0;
}
static int f_fetch_work(dx_provider_t *p, int64_t now, int64_t lock_ms,
                        const dx_session_cfg_t *s, dx_work_fetch_t *out, dx_error_t *err) {
  memset(out, 0, sizeof *out);
  return 0;
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
  fake_methods.version = 1;
  fake_methods.name = "fake";
  fake_methods.begin = f_begin;
  fake_methods.commit = f_commit;
  fake_methods.rollback = f_rollback;
  fake_methods.fetch_orchestration_item = f_fetch_orch;
  fake_methods.fetch_work_item = f_fetch_work;
  fake_methods.next_due_ms = f_next_due;
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
