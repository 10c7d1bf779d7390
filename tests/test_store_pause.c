/*
** test_store_pause.c -- the store thread's simulated stall (dx__store_pause, behind
** duroxide.testing's stall_worker): like SIGSTOP, once the pause is asked for the thread runs
** no cycle (no fetch, ack or renewal) until it is lifted, even when the pause comes while the
** thread is between its paused check and its cycle (looking for due work, or waiting for the
** loop to take a delivery). A cycle it ran anyway fetched at a clock the test harness had
** already moved past the stalled worker's locks: it took back the activity it was running.
** A fake provider counts the calls; the checks wait for conditions, never for durations.
*/
#include <uv.h>

#include "duroxide/provider.h"
#include "store.h"
#include "store_fake.h"
#include "store_int.h"
#include "testlib.h"

static dx_store_t *store;
static int begins, dues, armed, in_look; /* atomics: the store thread writes them */

static int f_begin(dx_provider_t *p, dx_error_t *err) {
  __atomic_add_fetch(&begins, 1, __ATOMIC_SEQ_CST);
  return 0;
}

/* The thread looks for due work (mu not held). Armed: the pause is asked for right now, and
** this look finds work due. */
static int f_next_due(dx_provider_t *p, int64_t now, int64_t *out, dx_error_t *err) {
  int i;
  __atomic_add_fetch(&dues, 1, __ATOMIC_SEQ_CST);
  if (__atomic_exchange_n(&armed, 0, __ATOMIC_SEQ_CST)) {
    __atomic_store_n(&in_look, 1, __ATOMIC_SEQ_CST);
    for (i = 0; i < 60000 && !__atomic_load_n(&store->paused, __ATOMIC_SEQ_CST); i++)
      usleep(1000);
    *out = now;
    return 0;
  }
  *out = INT64_MAX; /* nothing due */
  return 0;
}

static dx_provider_methods_t fake_methods;
static dx_provider_t fake = {&fake_methods};

static void on_fetch(void *ud, dx_store_fetched_t *f) {}

static void spin_until(uv_loop_t *loop, int *flag, int want) {
  int i;
  for (i = 0; i < 60000 && __atomic_load_n(flag, __ATOMIC_SEQ_CST) < want; i++) {
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  ASSERT(__atomic_load_n(flag, __ATOMIC_SEQ_CST) >= want);
}

DX_TEST(a_pause_asked_for_while_the_store_thread_looks_for_work_runs_no_cycle) {
  uv_loop_t loop;
  dx_store_cfg_t cfg;
  dx_error_t err;
  int before, i, halted;
  store_fake_methods(&fake_methods, f_begin, f_next_due);
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &fake;
  cfg.orch_lock_ms = cfg.work_lock_ms = 60000;
  cfg.poll_interval_ms = 600000; /* only a wake-up makes the thread look again */
  cfg.on_fetch = on_fetch;
  ASSERT_OK(dx__store_new(&store, &loop, &cfg, &err));
  __atomic_store_n(&armed, 1, __ATOMIC_SEQ_CST);
  dx__store_want(store, 1, 1); /* a budget: the thread looks for due work */
  spin_until(&loop, &in_look, 1);
  before = __atomic_load_n(&begins, __ATOMIC_SEQ_CST);
  dx__store_pause(store, 1); /* comes while the look is under way; it then finds work due */
  /* the thread either halts or runs the cycle the pause forbids: wait for one of them */
  for (i = 0; i < 60000; i++) {
    uv_mutex_lock(&store->mu);
    halted = store->halted;
    uv_mutex_unlock(&store->mu);
    if (halted || __atomic_load_n(&begins, __ATOMIC_SEQ_CST) > before) break;
    usleep(1000);
  }
  ASSERT_EQ(__atomic_load_n(&begins, __ATOMIC_SEQ_CST), before); /* no cycle while paused */
  ASSERT(halted);
  dx__store_pause(store, 0); /* lifted: it looks again, and what is due runs */
  dx__store_poke(store);
  spin_until(&loop, &begins, before + 1);
  dx__store_close(store, NULL, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  ASSERT_OK(uv_loop_close(&loop));
}

