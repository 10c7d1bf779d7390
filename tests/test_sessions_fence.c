/*
** test_sessions_fence.c -- the session manager's local fence (core/src/sessions.c) around a
** release this worker made: items of the session fetched before the release reached the store
** (in the close's own batch, or in a batch delivered after the release) were fetched as ours,
** yet the store has the session unowned by the time they start, so another worker may claim
** it and run them. They must be fenced (handed back), not start a new hold ("reclaim").
**
** A real directory store behind a real store thread; the runtime's calls into the manager
** (on_fetch, on_done, close) are made directly, as start_activity makes them.
*/
#include <stdlib.h>
#include <string.h>

#include "duroxide.h"
#include "sessions.h"
#include "store.h"
#include "testlib.h"

typedef struct {
  uv_loop_t loop;
  dx_provider_t *p;
  dx_store_t *store;
  dx_options_t opts;
  dx_host_methods_t host;
  dx_sessions_t *s;
} fx_t;

static void fx_open(fx_t *f) {
  char path[512];
  dx_store_cfg_t cfg;
  dx_error_t err;
  memset(f, 0, sizeof *f);
  snprintf(path, sizeof path, "%s/store", dx_test_tmpdir());
  ASSERT_OK(dx_provider_open(path, NULL, &f->p, &err));
  ASSERT_OK(uv_loop_init(&f->loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = f->p;
  cfg.orch_lock_ms = cfg.work_lock_ms = 30000;
  ASSERT_OK(dx__store_new(&f->store, &f->loop, &cfg, &err));
  dx__store_stop_fetching(f->store);
  dx_options_init(&f->opts);
  f->host.version = 1; /* no hooks */
  f->s = dx__sessions_new(&f->loop, f->store, &f->opts, "w1", &f->host, NULL);
  ASSERT(f->s != NULL);
}

static void flag(void *ud) { *(int *)ud = 1; }

static void fx_close(fx_t *f) {
  int stopped = 0, closed = 0;
  dx__sessions_shutdown(f->s, flag, &stopped);
  while (!stopped) uv_run(&f->loop, UV_RUN_ONCE);
  dx__store_close(f->store, flag, &closed);
  uv_run(&f->loop, UV_RUN_DEFAULT);
  ASSERT(closed);
  ASSERT_OK(uv_loop_close(&f->loop));
  f->p->methods->destroy(f->p);
}

static void op_done(dx_store_op_t *op) { *(int *)op->ud = 1; }

/* Every op submitted so far has reported back: ops run and report in submission order. */
static void fx_sync(fx_t *f) {
  dx_store_op_t op;
  int done = 0;
  memset(&op, 0, sizeof op);
  op.kind = DX_OP_CLEANUP_SESSIONS;
  op.done = op_done;
  op.ud = &done;
  dx__store_submit(f->store, &op);
  while (!done) uv_run(&f->loop, UV_RUN_ONCE);
}

DX_TEST(sessions_item_fetched_with_the_close_is_fenced_not_a_new_hold) {
  fx_t f;
  int64_t at;
  uint64_t g1, g2;
  fx_open(&f);
  at = dx_clock_now_ms();
  g1 = dx__sessions_on_fetch(f.s, "S", 1, NULL, at); /* an activity: claimed */
  ASSERT(g1 != 0);
  ASSERT(!dx__sessions_fenced(f.s, "S", g1));
  dx__sessions_on_done(f.s, "S", g1);
  /* a later batch: the close item, then another instance's activity of the session */
  at = dx_clock_now_ms();
  dx__sessions_close(f.s, "S"); /* nothing runs: released at once */
  ASSERT_EQ(dx__sessions_count(f.s), 0);
  g2 = dx__sessions_on_fetch(f.s, "S", 0, NULL, at);
  ASSERT(dx__sessions_fenced(f.s, "S", g2)); /* not run: the store has the session unowned */
  ASSERT_EQ(dx__sessions_count(f.s), 0);
  dx__sessions_on_done(f.s, "S", g2); /* settled (handed back): changes nothing */
  ASSERT_EQ(dx__sessions_count(f.s), 0);
  fx_close(&f);
}

DX_TEST(sessions_item_fetched_before_the_release_and_delivered_after_it_is_fenced) {
  fx_t f;
  int64_t before;
  uint64_t g1, g2, g3;
  fx_open(&f);
  before = dx_clock_now_ms() - 1; /* a batch fetched before the release was applied */
  g1 = dx__sessions_on_fetch(f.s, "S", 1, NULL, before);
  dx__sessions_on_done(f.s, "S", g1);
  dx__sessions_close(f.s, "S");
  fx_sync(&f); /* the release was applied and reported */
  g2 = dx__sessions_on_fetch(f.s, "S", 0, NULL, before);
  ASSERT(dx__sessions_fenced(f.s, "S", g2));
  ASSERT_EQ(dx__sessions_count(f.s), 0);
  /* after the release the store hands the session out by a claim: a new hold, not fenced */
  g3 = dx__sessions_on_fetch(f.s, "S", 1, "w1", dx_clock_now_ms() + 1);
  ASSERT(g3 != 0);
  ASSERT(!dx__sessions_fenced(f.s, "S", g3));
  ASSERT_EQ(dx__sessions_count(f.s), 1);
  fx_close(&f);
}

DX_TEST(sessions_same_id_restart_still_reclaims_what_the_store_says_it_owns) {
  /* no release by this process: an item fetched as ours (claimed 0) starts a hold */
  fx_t f;
  uint64_t g;
  fx_open(&f);
  g = dx__sessions_on_fetch(f.s, "S", 0, NULL, dx_clock_now_ms());
  ASSERT(g != 0);
  ASSERT(!dx__sessions_fenced(f.s, "S", g));
  ASSERT_EQ(dx__sessions_count(f.s), 1);
  fx_close(&f);
}


DX_TEST(sessions_many_holds_each_keep_their_own_generation) {
  /* hundreds of holds at once (the manager's index grows several times), every other one
  ** closed: each session still answers for its own hold only */
  enum { N = 300 };
  static uint64_t gen[N];
  fx_t f;
  char sid[16];
  int i;
  int64_t at;
  fx_open(&f);
  at = dx_clock_now_ms();
  for (i = 0; i < N; i++) {
    snprintf(sid, sizeof sid, "s%d", i);
    gen[i] = dx__sessions_on_fetch(f.s, sid, 1, NULL, at);
    ASSERT(gen[i] != 0);
  }
  ASSERT_EQ(dx__sessions_count(f.s), N);
  for (i = 0; i < N; i++) {
    snprintf(sid, sizeof sid, "s%d", i);
    ASSERT(!dx__sessions_fenced(f.s, sid, gen[i]));
    ASSERT(dx__sessions_fenced(f.s, sid, gen[(i + 1) % N])); /* another session's hold */
    dx__sessions_on_done(f.s, sid, gen[i]);
    if (i % 2) dx__sessions_close(f.s, sid); /* nothing runs: released at once */
  }
  ASSERT_EQ(dx__sessions_count(f.s), N / 2);
  for (i = 0; i < N; i++) {
    snprintf(sid, sizeof sid, "s%d", i);
    ASSERT_EQ(dx__sessions_fenced(f.s, sid, gen[i]), i % 2);
  }
  ASSERT(dx__sessions_fenced(f.s, "never-held", 1));
  fx_close(&f);
}
