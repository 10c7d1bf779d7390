/*
** test_store_cycle.c -- how the store thread (core/src/store.c) handles a batch that fails:
** DX_ERETRY retries the whole batch (bounded), any other batch failure applies each operation
** in a transaction of its own so one bad operation cannot fail its neighbours. Only a store
** that begin or commit itself finds damaged is reported as unusable (cfg.on_fatal), not a
** batch that one operation's damaged record spoiled.
**
** Also the wake-up watch (core/src/wake.c): a provider's wake descriptor wakes the store
** thread and reports a lost connection.
**
** A wrapping provider delegates to a real directory store and injects the failures a
** database provider reports: commits that fail with DX_ERETRY, and an operation that spoils
** the transaction (its commit then fails, nothing of the batch kept). It and the fixtures
** around it are shared (store_cycle.h) with the program's other files: held turns and
** deliveries (test_store_cycle_turns.c), held rounds and the lap (test_store_cycle_rounds.c).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duroxide.h"
#include "store.h"
#include "store_cycle.h"
#include "testlib.h"
#include "util.h"
#include "wake.h"

static int w_begin(dx_provider_t *p, dx_error_t *err) {
  W(p)->begins++;
  W(p)->txn_renews = 0;
  W(p)->txn_fetched = 0;
  W(p)->spoiled = W(p)->spoil_rc = 0;
  return IN(p)->methods->begin(IN(p), err);
}

static int w_commit(dx_provider_t *p, int sync, dx_error_t *err) {
  wrap_t *w = W(p);
  if (w->gate) w->gate(w->gate_ud, w->txn_fetched);
  __atomic_add_fetch(&w->commits, 1, __ATOMIC_SEQ_CST); /* (tests read it from the loop thread) */
  w->last_sync = sync;
  if (w->logging && w->log_n < 64) {
    int n = w->log_n, rc = 0;
    w->log_renews[n] = w->txn_renews;
    if (w->retry_renewing > 0 && w->txn_renews > 0) {
      w->retry_renewing--;
      IN(p)->methods->rollback(IN(p));
      rc = dx_error_set(err, DX_ERETRY, "injected serialization failure");
    } else {
      rc = IN(p)->methods->commit(IN(p), sync, err);
    }
    w->log_rc[n] = rc;
    __atomic_store_n(&w->log_n, n + 1, __ATOMIC_SEQ_CST);
    return rc;
  }
  if (w->corrupt_commits > 0) {
    w->corrupt_commits--;
    IN(p)->methods->rollback(IN(p));
    return dx_error_set(err, DX_ECORRUPT, "injected: store /wrap is damaged");
  }
  if (w->retry_commits != 0) {
    if (w->retry_commits > 0) w->retry_commits--;
    IN(p)->methods->rollback(IN(p));
    return dx_error_set(err, DX_ERETRY, "injected serialization failure");
  }
  if (w->spoiled) {
    IN(p)->methods->rollback(IN(p));
    return dx_error_set(err, w->spoil_rc ? w->spoil_rc : DX_ESTORE,
                        "injected: the transaction was aborted by instance '%s'",
                        w->spoil_rc ? "damaged" : "bad");
  }
  return IN(p)->methods->commit(IN(p), sync, err);
}

static void w_rollback(dx_provider_t *p) { IN(p)->methods->rollback(IN(p)); }

/* An item a fetch returned (rc 0, got 1): counted. */
static int w_count_fetch(dx_provider_t *p, int rc, int got) {
  if (rc == 0 && got) {
    W(p)->txn_fetched++;
    __atomic_add_fetch(&W(p)->fetched, 1, __ATOMIC_SEQ_CST);
  }
  return rc;
}

static int w_fetch_orch(dx_provider_t *p, int64_t now, int64_t lock_ms, dx_orch_item_t **out,
                        dx_error_t *err) {
  int rc = IN(p)->methods->fetch_orchestration_item(IN(p), now, lock_ms, out, err);
  return w_count_fetch(p, rc, rc == 0 && *out != NULL);
}

static int w_next_due_inner(dx_provider_t *p, int64_t now, int64_t *out, dx_error_t *err) {
  return IN(p)->methods->next_due_ms(IN(p), now, out, err);
}

static int w_set_filter(dx_provider_t *p, const dx_fetch_filter_t *f, dx_error_t *err) {
  return IN(p)->methods->set_fetch_filter(IN(p), f, err);
}

static int w_renew_orch(dx_provider_t *p, int64_t now, const char *instance, uint64_t token,
                        int64_t extend_ms, dx_error_t *err) {
  W(p)->txn_renews++;
  return IN(p)->methods->renew_orchestration_item_lock(IN(p), now, instance, token, extend_ms,
                                                        err);
}

/* Instance "bad" fails in a way that spoils the transaction (as a SQL error would). */
static int w_enqueue(dx_provider_t *p, int64_t now, const dx_work_item_t *item, int64_t delay,
                     dx_error_t *err) {
  if (item->instance && strcmp(item->instance, "bad") == 0) {
    W(p)->spoiled = 1;
    return dx_error_set(err, DX_ESTORE, "injected: statement failed for instance 'bad'");
  }
  if (item->instance && strcmp(item->instance, "damaged") == 0) { /* a damaged record */
    W(p)->spoiled = 1;
    W(p)->spoil_rc = DX_ECORRUPT;
    return dx_error_set(err, DX_ECORRUPT, "injected: corrupted record of instance 'damaged'");
  }
  return IN(p)->methods->enqueue_for_orchestrator(IN(p), now, item, delay, err);
}

static int w_ack_work(dx_provider_t *p, int64_t now, uint64_t token,
                      const dx_work_item_t *completion, dx_error_t *err) {
  __atomic_add_fetch(&W(p)->acks_work, 1, __ATOMIC_SEQ_CST);
  return IN(p)->methods->ack_work_item(IN(p), now, token, completion, err);
}

static int w_ack_orch(dx_provider_t *p, int64_t now, const dx_orch_ack_t *ack, dx_error_t *err) {
  __atomic_add_fetch(&W(p)->acks_orch, 1, __ATOMIC_SEQ_CST);
  return IN(p)->methods->ack_orchestration_item(IN(p), now, ack, err);
}

static int w_fetch_work(dx_provider_t *p, int64_t now, int64_t lock_ms,
                        const dx_session_cfg_t *sessions, dx_work_fetch_t *out, dx_error_t *err) {
  int rc;
  __atomic_add_fetch(&W(p)->fetch_works, 1, __ATOMIC_SEQ_CST);
  rc = IN(p)->methods->fetch_work_item(IN(p), now, lock_ms, sessions, out, err);
  return w_count_fetch(p, rc, out->item.kind != 0);
}

void w_destroy(dx_provider_t *p) {
  IN(p)->methods->destroy(IN(p));
  free(p);
}

static int w_run_cycle(dx_provider_t *p, int64_t now, dx_cycle_t *cy, dx_error_t *err) {
  return IN(p)->methods->run_cycle(IN(p), now, cy, err);
}

/* url NULL: a fresh directory store */
wrap_t *wrap_open_at(const char *url) {
  char path[512];
  static int n;
  dx_error_t err;
  wrap_t *w = calloc(1, sizeof *w);
  ASSERT(w);
  snprintf(path, sizeof path, "%s/store-%d", dx_test_tmpdir(), ++n);
  ASSERT_OK(dx_provider_open(url ? url : path, NULL, &w->inner, &err));
  w->m = *w->inner->methods; /* the store thread calls only the members replaced below */
  w->m.name = "wrap";
  w->m.begin = w_begin;
  w->m.commit = w_commit;
  w->m.rollback = w_rollback;
  w->m.enqueue_for_orchestrator = w_enqueue;
  w->m.destroy = w_destroy;
  w->m.renew_orchestration_item_lock = w_renew_orch;
  w->m.fetch_orchestration_item = w_fetch_orch;
  w->m.next_due_ms = w_next_due_inner;
  w->m.set_fetch_filter = w_set_filter;
  w->m.ack_work_item = w_ack_work;
  w->m.ack_orchestration_item = w_ack_orch;
  w->m.fetch_work_item = w_fetch_work;
  if (w->m.version >= 5 && w->m.run_cycle) w->m.run_cycle = w_run_cycle;
  w->base.methods = &w->m;
  return w;
}

wrap_t *wrap_open(void) { return wrap_open_at(NULL); }

typedef struct {
  dx_store_op_t op;
  dx_work_item_t item;
  int *done;
} op_t;

static void op_done(dx_store_op_t *op) { (*((op_t *)op->ud)->done)++; }

static void closed(void *ud) { *(int *)ud = 1; }

/* Close s (its queued ops are flushed first) and then its loop. */
void close_store(dx_store_t *s, uv_loop_t *loop) {
  int is_closed = 0;
  dx__store_close(s, closed, &is_closed);
  uv_run(loop, UV_RUN_DEFAULT);
  ASSERT(is_closed);
  ASSERT_OK(uv_loop_close(loop));
}

static int fatals; /* on_fatal calls in the last run_batch */
static void on_fatal(void *ud, const dx_error_t *err) {
  (void)ud;
  (void)err;
  fatals++;
}

/* Submit a start of each id as one batch and run the loop until every op reported back. */
static void run_batch(wrap_t *w, const char *const *ids, size_t n, op_t *ops) {
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_error_t err;
  int done = 0;
  size_t i;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.orch_lock_ms = cfg.work_lock_ms = 1000;
  cfg.on_fatal = on_fatal;
  fatals = 0;
  for (i = 0; i < n; i++) {
    memset(&ops[i], 0, sizeof ops[i]);
    ops[i].item.kind = DX_WI_START;
    ops[i].item.instance = (char *)ids[i];
    ops[i].item.name = "Orch";
    ops[i].item.execution_id = 1;
    ops[i].op.kind = DX_OP_ENQUEUE_ORCH;
    ops[i].op.item = &ops[i].item;
    ops[i].op.done = op_done;
    ops[i].op.ud = &ops[i];
    ops[i].done = &done;
  }
  /* queue everything while the thread is held, so it is one batch (the thread runs from
  ** dx__store_new on: a cycle between two submits split the batch on a busy machine) */
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_pause(s, 1);
  dx__store_stop_fetching(s);
  for (i = 0; i < n; i++) dx__store_submit(s, &ops[i].op);
  dx__store_pause(s, 0);
  while (done < (int)n) uv_run(&loop, UV_RUN_ONCE);
  close_store(s, &loop);
}

/* Run one op through the store thread (fetching off) and return it when it reported back. */
static void run_op(wrap_t *w, dx_store_op_t *op) {
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_error_t err;
  int done = 0;
  op_t holder;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.orch_lock_ms = cfg.work_lock_ms = 1000;
  memset(&holder, 0, sizeof holder);
  holder.done = &done;
  op->done = op_done;
  op->ud = &holder;
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_stop_fetching(s);
  dx__store_submit(s, op);
  while (!done) uv_run(&loop, UV_RUN_ONCE);
  close_store(s, &loop);
}

/* An activity's result may be lost to a power cut (the activity runs again: at least once),
** so its batch is committed with sync=0 (the provider skips what it safely can); a start (and
** a turn) is committed with sync=1. */
DX_TEST(store_syncs_starts_but_not_activity_results) {
  wrap_t *w = wrap_open();
  dx_provider_t *in = w->inner;
  dx_work_item_t act, done_msg;
  dx_work_fetch_t f;
  dx_store_op_t op;
  dx_error_t err;
  int64_t now = dx__now_ms();
  memset(&op, 0, sizeof op);
  memset(&act, 0, sizeof act);
  act.kind = DX_WI_START;
  act.instance = "i1";
  act.name = "Orch";
  act.execution_id = 1;
  op.kind = DX_OP_ENQUEUE_ORCH;
  op.item = &act;
  run_op(w, &op);
  ASSERT_OK(op.rc);
  ASSERT_EQ(w->last_sync, 1);
  act.kind = DX_WI_ACT_EXECUTE;
  act.id = 2;
  act.name = "Act";
  act.data = "null";
  ASSERT_OK(in->methods->enqueue_for_worker(in, now, &act, &err));
  ASSERT_OK(in->methods->fetch_work_item(in, now, 60000, NULL, &f, &err));
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  memset(&done_msg, 0, sizeof done_msg);
  done_msg.kind = DX_WI_ACT_COMPLETED;
  done_msg.instance = "i1";
  done_msg.execution_id = 1;
  done_msg.id = 2;
  done_msg.data = "1";
  memset(&op, 0, sizeof op);
  op.kind = DX_OP_ACK_WORK;
  op.token = f.lock_token;
  op.item = &done_msg;
  run_op(w, &op);
  ASSERT_OK(op.rc);
  ASSERT_EQ(w->last_sync, 0);
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  w->base.methods->destroy(&w->base);
}

int queued(wrap_t *w, const char *id) {
  dx_instance_info_t info;
  int rc;
  memset(&info, 0, sizeof info);
  rc = w->inner->methods->get_instance_info(w->inner, id, &info, NULL);
  dx_instance_info_clear(&info);
  return rc == 0;
}

DX_TEST(store_retries_the_whole_batch_on_eretry) {
  static const char *const ids[] = {"a", "b", "c"};
  wrap_t *w = wrap_open();
  op_t ops[3];
  size_t i;
  w->retry_commits = 2;
  run_batch(w, ids, 3, ops);
  for (i = 0; i < 3; i++) {
    ASSERT_EQ(ops[i].op.rc, 0);
    ASSERT(queued(w, ids[i]));
  }
  ASSERT_EQ(w->commits, 3); /* two failed attempts, then the batch as one commit */
  w_destroy(&w->base);
}

DX_TEST(store_gives_up_retrying_after_a_bound) {
  static const char *const ids[] = {"a", "b"};
  wrap_t *w = wrap_open();
  op_t ops[2];
  w->retry_commits = -1; /* never succeeds: the ops fail with DX_ERETRY, the thread goes on */
  run_batch(w, ids, 2, ops);
  ASSERT_EQ(ops[0].op.rc, DX_ERETRY);
  ASSERT_EQ(ops[1].op.rc, DX_ERETRY);
  ASSERT_CONTAINS(ops[1].op.err.msg, "serialization");
  ASSERT(w->commits >= 2 && w->commits <= 30); /* bounded */
  ASSERT(!queued(w, "a"));
  w_destroy(&w->base);
}

DX_TEST(store_isolates_an_op_that_spoils_the_batch) {
  static const char *const ids[] = {"a", "bad", "c"};
  wrap_t *w = wrap_open();
  op_t ops[3];
  run_batch(w, ids, 3, ops);
  ASSERT_EQ(ops[0].op.rc, 0);
  ASSERT_EQ(ops[2].op.rc, 0);
  ASSERT(queued(w, "a"));
  ASSERT(queued(w, "c"));
  ASSERT_EQ(ops[1].op.rc, DX_ESTORE); /* the bad one fails alone, naming itself */
  ASSERT_CONTAINS(ops[1].op.err.msg, "'bad'");
  ASSERT(!queued(w, "bad"));
  w_destroy(&w->base);
}

DX_TEST(store_expected_failures_do_not_fail_the_batch) {
  /* DX_EEXIST for a taken id is an expected outcome: its neighbours commit in the same batch */
  static const char *const ids[] = {"x", "x", "y"};
  wrap_t *w = wrap_open();
  op_t ops[3];
  run_batch(w, ids, 3, ops);
  ASSERT_EQ(ops[0].op.rc, 0);
  ASSERT_EQ(ops[1].op.rc, DX_EEXIST);
  ASSERT_EQ(ops[2].op.rc, 0);
  ASSERT_EQ(w->commits, 1);
  w_destroy(&w->base);
}

DX_TEST(store_damaged_record_spoiling_a_batch_is_not_a_damaged_store) {
  /* a database provider fails the whole commit with the code of the op that spoiled it: a
  ** damaged record fails its own op, and the worker keeps going */
  static const char *const ids[] = {"a", "damaged", "c"};
  wrap_t *w = wrap_open();
  op_t ops[3];
  run_batch(w, ids, 3, ops);
  ASSERT_EQ(ops[0].op.rc, 0);
  ASSERT_EQ(ops[1].op.rc, DX_ECORRUPT);
  ASSERT_EQ(ops[2].op.rc, 0);
  ASSERT_EQ(fatals, 0);
  w_destroy(&w->base);
}

DX_TEST(store_damaged_at_commit_is_reported_once) {
  /* commit itself finds the store damaged (no op failed): reported to the loop */
  static const char *const ids[] = {"a", "b"};
  wrap_t *w = wrap_open();
  op_t ops[2];
  w->corrupt_commits = 1;
  run_batch(w, ids, 2, ops);
  ASSERT_EQ(fatals, 1);
  w_destroy(&w->base);
}

static void keep_fetched(void *ud, dx_store_fetched_t *f) {} /* never settled: stays held */

DX_TEST(store_renewal_lost_to_a_retried_batch_is_made_again) {
  /* the store thread renews the lock of a turn the loop has not settled; when the batch that
  ** renewed it is rolled back for DX_ERETRY, the retry renews it again instead of leaving it
  ** for the next interval (by when the lock would lapse) */
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_work_item_t start;
  dx_error_t err;
  int i, n, failed_at = -1;
  memset(&start, 0, sizeof start);
  start.kind = DX_WI_START;
  start.instance = "held";
  start.name = "Orch";
  start.execution_id = 1;
  ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms(), &start, 0,
                                                        &err));
  w->logging = 1;
  w->retry_renewing = 1;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.orch_lock_ms = 200; /* renewed every 100 ms while held */
  cfg.work_lock_ms = 1000;
  cfg.poll_interval_ms = 10;
  cfg.on_fetch = keep_fetched;
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_want(s, 1, 0);
  /* wait (bounded) for a failed renewing commit and the commit after it */
  for (i = 0; i < 20000; i++) {
    n = __atomic_load_n(&w->log_n, __ATOMIC_SEQ_CST);
    for (failed_at = 0; failed_at < n && w->log_rc[failed_at] != DX_ERETRY; failed_at++) {}
    if (failed_at + 1 < n) break;
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  ASSERT(failed_at + 1 < n);
  ASSERT(w->log_renews[failed_at] > 0);
  ASSERT_EQ(w->log_rc[failed_at + 1], 0);
  ASSERT(w->log_renews[failed_at + 1] > 0); /* the retry renewed the lock again */
  close_store(s, &loop);
  w_destroy(&w->base);
}

/* Session renewal whose first attempt renews "s1" and whose later attempts find it gone (in
** between, its lease lapsed and another worker claimed it). */
static int w_renew_sessions(dx_provider_t *p, int64_t now, const char *worker, int64_t extend_ms,
                            int64_t idle_ms, dx_session_cb cb, void *ud, uint64_t *renewed,
                            dx_error_t *err) {
  static int calls;
  dx_session_info_t si;
  (void)p;
  (void)now;
  (void)worker;
  (void)extend_ms;
  (void)idle_ms;
  (void)err;
  if (renewed) *renewed = 0;
  if (calls++ > 0) return 0;
  memset(&si, 0, sizeof si);
  si.session_id = "s1";
  si.worker_id = "w1";
  if (renewed) *renewed = 1;
  (void)cb(ud, &si);
  return 0;
}

DX_TEST(store_session_renewal_reports_only_what_the_kept_attempt_renewed) {
  /* the loop sets its local lease from the ids a renewal reports: an id renewed by an attempt
  ** that was rolled back (DX_ERETRY) must not be reported, or the loop believes it still holds
  ** a session another worker claimed meanwhile (two workers in one session) */
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_error_t err;
  op_t op;
  int done = 0;
  size_t i;
  w->retry_commits = 1;
  w->m.renew_session_lock = w_renew_sessions;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.orch_lock_ms = cfg.work_lock_ms = 1000;
  memset(&op, 0, sizeof op);
  op.op.kind = DX_OP_RENEW_SESSIONS;
  op.op.worker_id = "w1";
  op.op.delay_ms = 1000;
  op.op.done = op_done;
  op.op.ud = &op;
  op.done = &done;
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_stop_fetching(s);
  dx__store_submit(s, &op.op);
  while (done < 1) uv_run(&loop, UV_RUN_ONCE);
  ASSERT_EQ(op.op.rc, 0);
  ASSERT_EQ(w->commits, 2); /* the rolled-back attempt, then the kept one */
  ASSERT_EQ(op.op.n_ids, 0);
  for (i = 0; i < op.op.n_ids; i++) free(op.op.ids[i]);
  free(op.op.ids);
  free(op.op.ended);
  close_store(s, &loop);
  w_destroy(&w->base);
}

/* {===== wake-ups =====} */

static int w_wake_fd(dx_provider_t *p) { return W(p)->wake_pipe[0]; }

static int w_wake_drain(dx_provider_t *p, int *lost) {
  char buf[64];
  W(p)->drains++;
  if (read(W(p)->wake_pipe[0], buf, sizeof buf) <= 0) return DX_EIO;
  *lost = W(p)->lost_next;
  W(p)->lost_next = 0;
  return 0;
}

int w_next_due(dx_provider_t *p, int64_t now, int64_t *out, dx_error_t *err) {
  __atomic_add_fetch(&W(p)->next_dues, 1, __ATOMIC_SEQ_CST);
  *out = INT64_MAX; /* nothing due: the thread sleeps a poll interval unless woken */
  return 0;
}

static const char *w_notify_path(dx_provider_t *p) {
  return IN(p)->methods->notify_path(IN(p));
}

static void count_lost(void *ud) { (*(int *)ud)++; }

void spin(uv_loop_t *loop, int ms) {
  int i;
  for (i = 0; i < ms; i++) {
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
}

int dues(wrap_t *w) { return __atomic_load_n(&w->next_dues, __ATOMIC_SEQ_CST); }

DX_TEST(wake_fd_wakes_the_store_thread_and_reports_lost_connections) {
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_wake_t *wk;
  dx_error_t err;
  int lost = 0, before, i;
  ASSERT_OK(pipe(w->wake_pipe));
  w->m.version = 4;
  w->m.wake_fd = w_wake_fd;
  w->m.wake_drain = w_wake_drain;
  w->m.next_due_ms = w_next_due;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.poll_interval_ms = 600000; /* only a wake-up can make the thread look again */
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_want(s, 1, 0);
  wk = dx__wake_start(&loop, &w->base, s, count_lost, &lost);
  ASSERT(wk != NULL);
  for (i = 0; i < 5000 && dues(w) == 0; i++) spin(&loop, 1); /* the thread went to sleep */
  ASSERT(dues(w) >= 1);
  spin(&loop, 20);
  before = dues(w);
  ASSERT_EQ(write(w->wake_pipe[1], "x", 1), 1);
  for (i = 0; i < 5000 && dues(w) == before; i++) spin(&loop, 1);
  ASSERT(dues(w) > before); /* woken at once, not after the 10-minute poll */
  ASSERT_EQ(w->drains, 1);
  ASSERT_EQ(lost, 0);
  w->lost_next = 1;
  ASSERT_EQ(write(w->wake_pipe[1], "y", 1), 1);
  for (i = 0; i < 5000 && lost == 0; i++) spin(&loop, 1);
  ASSERT_EQ(lost, 1);
  dx__wake_stop(wk);
  close_store(s, &loop);
  close(w->wake_pipe[0]);
  close(w->wake_pipe[1]);
  w_destroy(&w->base);
}

DX_TEST(wake_without_a_source_is_null_and_the_notify_file_still_works) {
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_wake_t *wk;
  dx_error_t err;
  int lost = 0;
  const dx_provider_methods_t *inner = w->inner->methods;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_stop_fetching(s);
  /* the directory store offers its notify file (no wake_fd) */
  ASSERT(inner->notify_path && inner->notify_path(w->inner));
  ASSERT(inner->version < 4 || !inner->wake_fd);
  w->m.notify_path = w_notify_path;
  wk = dx__wake_start(&loop, &w->base, s, count_lost, &lost);
  ASSERT(wk != NULL);
  dx__wake_stop(wk);
  w->m.notify_path = NULL; /* no source at all: polling */
  ASSERT(dx__wake_start(&loop, &w->base, s, count_lost, &lost) == NULL);
  close_store(s, &loop);
  w_destroy(&w->base);
}
