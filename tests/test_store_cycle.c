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
** the transaction (its commit then fails, nothing of the batch kept).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duroxide.h"
#include "store.h"
#include "testlib.h"
#include "util.h"
#include "wake.h"

typedef struct {
  dx_provider_t base;
  dx_provider_methods_t m;
  dx_provider_t *inner;
  int retry_commits;   /* this many commits fail with DX_ERETRY (-1: all) */
  int spoiled;         /* an op in the open batch spoiled it: its commit fails */
  int spoil_rc;        /* ... with this code (0: DX_ESTORE) */
  int corrupt_commits; /* this many commits fail with DX_ECORRUPT (the store is damaged) */
  int retry_renewing;  /* this many commits that renewed a lock fail with DX_ERETRY */
  int txn_renews;      /* lock renewals in the open transaction */
  int logging;         /* log each commit's renewals and outcome (and nothing else injected) */
  int log_n;           /* commits logged below (atomic: the test thread reads it) */
  int log_renews[64], log_rc[64];
  int commits, begins; /* calls seen */
  int last_sync;       /* `sync` of the last commit */
  int wake_pipe[2];    /* wake_fd: the read end */
  int drains, lost_next, next_dues;
  int acks_orch;       /* ack_orchestration_item calls (atomic: the test thread reads it) */
  int acks_work;       /* ack_work_item calls (atomic) */
  int fetch_works;     /* fetch_work_item calls (atomic) */
  int fetched;         /* items the fetches returned (atomic) */
  int txn_fetched;     /* of them, in the open transaction */
  void (*gate)(void *ud, int txn_fetched); /* called before each commit (tests of the lap) */
  void *gate_ud;
} wrap_t;

#define W(p) ((wrap_t *)(p))
#define IN(p) (W(p)->inner)

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
  w->commits++;
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

static void w_destroy(dx_provider_t *p) {
  IN(p)->methods->destroy(IN(p));
  free(p);
}

static int w_run_cycle(dx_provider_t *p, int64_t now, dx_cycle_t *cy, dx_error_t *err) {
  return IN(p)->methods->run_cycle(IN(p), now, cy, err);
}

/* url NULL: a fresh directory store */
static wrap_t *wrap_open_at(const char *url) {
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

static wrap_t *wrap_open(void) { return wrap_open_at(NULL); }

typedef struct {
  dx_store_op_t op;
  dx_work_item_t item;
  int *done;
} op_t;

static void op_done(dx_store_op_t *op) { (*((op_t *)op->ud)->done)++; }

static void closed(void *ud) { *(int *)ud = 1; }

/* Close s (its queued ops are flushed first) and then its loop. */
static void close_store(dx_store_t *s, uv_loop_t *loop) {
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

static int queued(wrap_t *w, const char *id) {
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

static int w_next_due(dx_provider_t *p, int64_t now, int64_t *out, dx_error_t *err) {
  __atomic_add_fetch(&W(p)->next_dues, 1, __ATOMIC_SEQ_CST);
  *out = INT64_MAX; /* nothing due: the thread sleeps a poll interval unless woken */
  return 0;
}

static const char *w_notify_path(dx_provider_t *p) {
  return IN(p)->methods->notify_path(IN(p));
}

static void count_lost(void *ud) { (*(int *)ud)++; }

static void spin(uv_loop_t *loop, int ms) {
  int i;
  for (i = 0; i < ms; i++) {
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
}

static int dues(wrap_t *w) { return __atomic_load_n(&w->next_dues, __ATOMIC_SEQ_CST); }

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

/* {===== a fetched turn's ack joins its fetch's transaction (store.c hold_turns) =====} */

/* The loop side of these tests: each fetched turn is answered with an ack that starts the
** orchestration and schedules activity 2 (at once, or late_ms later from a timer); fetched
** activities are counted, with the commits the store had made when the first arrived. */
typedef struct turn_s {
  dx_store_op_t op;
  dx_orch_ack_t ack;
  dx_event_t ev[2];
  dx_work_item_t act;
  char instance[32];
  uv_timer_t timer;
  struct turns_s *t;
} turn_t;

typedef struct turns_s {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  int late_ms;
  int keep_first; /* the first turn fetched is never answered; one more is then wanted */
  int self_event; /* the first turn's ack also queues an event for its own instance, and
                     only that turn is answered; the run ends at the second delivery */
  int cache;      /* acks ask to be told when applied before the commit (op->applied), as
                     the runtime's do with its orchestration cache on */
  int hold_work;  /* cfg.hold_work */
  int acked_at_second; /* n_acked when the second turn was delivered */
  int eager;           /* the start is this process's own (dx__eager_start), queued as an op */
  dx_store_fetch_cb on_fetch; /* NULL: answer_turns */
  int (*until)(struct turns_s *t); /* NULL: until the activity was fetched */
  dx_store_op_t start_op;
  int n_turns, n_acked, n_refused, n_work, commits_at_work, n_reported;
  turn_t turns[4];
  dx_work_item_t event;
} turns_t;

static void turn_acked(dx_store_op_t *op) {
  turns_t *t = ((turn_t *)op->ud)->t;
  if (op->rc == 0) t->n_acked++;
  else t->n_refused++;
}

static void turn_reported(dx_store_op_t *op) { ((turn_t *)op->ud)->t->n_reported++; }

static void on_late(uv_timer_t *h) {
  turn_t *tn = h->data;
  dx__store_submit(tn->t->s, &tn->op);
  uv_close((uv_handle_t *)h, NULL);
}

static void answer_turns(void *ud, dx_store_fetched_t *f) {
  turns_t *t = ud;
  size_t i;
  for (i = 0; i < f->n_orch && t->n_turns < 4; i++) {
    turn_t *tn = &t->turns[t->n_turns++];
    const dx_orch_item_t *it = f->orch[i];
    if (t->keep_first && t->n_turns == 1) { /* held unsettled, as a busy loop's item is */
      dx__store_want(t->s, 1, 0);
      continue;
    }
    if (t->self_event && t->n_turns > 1) {
      t->acked_at_second = t->n_acked;
      continue;
    }
    memset(&tn->op, 0, sizeof tn->op);
    memset(&tn->ack, 0, sizeof tn->ack);
    memset(tn->ev, 0, sizeof tn->ev);
    memset(&tn->act, 0, sizeof tn->act);
    tn->t = t;
    snprintf(tn->instance, sizeof tn->instance, "%s", it->instance);
    tn->ev[0].event_id = 1;
    tn->ev[0].kind = DX_EV_ORCH_STARTED;
    tn->ev[0].name = "Orch";
    tn->ev[0].data = "1";
    tn->ev[1].event_id = 2;
    tn->ev[1].kind = DX_EV_ACT_SCHEDULED;
    tn->ev[1].name = "Act";
    tn->ev[1].data = "null";
    tn->act.kind = DX_WI_ACT_EXECUTE;
    tn->act.instance = tn->instance;
    tn->act.execution_id = 1;
    tn->act.id = 2;
    tn->act.name = "Act";
    tn->act.data = "null";
    tn->ack.instance = tn->instance;
    tn->ack.lock_token = it->lock_token;
    tn->ack.execution_id = it->execution_id;
    tn->ack.orchestration_name = "Orch";
    tn->ack.status = DX_STATUS_RUNNING;
    tn->ack.delta = tn->ev;
    tn->ack.delta_len = 2;
    tn->ack.worker_items = &tn->act;
    tn->ack.worker_items_len = 1;
    if (t->self_event) {
      memset(&t->event, 0, sizeof t->event);
      t->event.kind = DX_WI_EXTERNAL;
      t->event.instance = tn->instance;
      t->event.execution_id = 1;
      t->event.name = "go";
      t->event.data = "1";
      tn->ack.orch_items = &t->event;
      tn->ack.orch_items_len = 1;
    }
    tn->op.kind = DX_OP_ACK_ORCH;
    tn->op.ack = &tn->ack;
    tn->op.done = turn_acked;
    tn->op.applied = t->cache ? turn_reported : NULL;
    tn->op.ud = tn;
    if (t->late_ms > 0) {
      uv_timer_init(&t->loop, &tn->timer);
      tn->timer.data = tn;
      uv_timer_start(&tn->timer, on_late, (uint64_t)t->late_ms, 0);
    } else {
      dx__store_submit(t->s, &tn->op);
    }
  }
  if (f->n_work && !t->n_work)
    t->commits_at_work = __atomic_load_n(&t->w->commits, __ATOMIC_SEQ_CST);
  t->n_work += (int)f->n_work;
}

static void start_applied(dx_store_op_t *op) { ASSERT_EQ(op->rc, 0); }

/* Start instance "i1", run a store (hold_ms) answering its turns until the activity the
** turn scheduled was fetched. */
static void run_turns(turns_t *t, wrap_t *w, int64_t hold_ms) {
  dx_store_cfg_t cfg;
  dx_work_item_t start;
  dx_error_t err;
  int i;
  memset(&start, 0, sizeof start);
  start.kind = DX_WI_START;
  start.instance = "i1";
  start.name = "Orch";
  start.execution_id = 1;
  if (!t->eager)
    ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms(), &start, 0,
                                                          &err));
  t->w = w;
  ASSERT_OK(uv_loop_init(&t->loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.orch_lock_ms = cfg.work_lock_ms = 60000;
  cfg.poll_interval_ms = 10;
  cfg.hold_ms = hold_ms;
  cfg.hold_work = t->hold_work;
  cfg.on_fetch = t->on_fetch ? t->on_fetch : answer_turns;
  cfg.ud = t;
  ASSERT_OK(dx__store_new(&t->s, &t->loop, &cfg, &err));
  if (t->eager) {
    memset(&t->start_op, 0, sizeof t->start_op);
    t->start_op.kind = DX_OP_ENQUEUE_ORCH;
    t->start_op.eager = 1;
    t->start_op.item = &start;
    t->start_op.done = start_applied;
    dx__store_submit(t->s, &t->start_op);
  }
  dx__store_want(t->s, t->keep_first ? 1 : 4, 4);
  for (i = 0; i < 20000 && !(t->until          ? t->until(t)
                              : t->self_event ? t->n_turns >= 2
                                              : t->n_work > 0);
       i++) {
    uv_run(&t->loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(t->s, &t->loop);
}

/* The history the store holds for i1 has exactly its one turn's two events. */
static void assert_one_turn(wrap_t *w) {
  dx_event_t *ev = NULL;
  size_t n = 0;
  dx_error_t err;
  ASSERT_OK(w->inner->methods->read_history(w->inner, "i1", 0, &ev, &n, NULL, &err));
  ASSERT_EQ((int)n, 2);
  ASSERT_EQ(ev[0].kind, DX_EV_ORCH_STARTED);
  ASSERT_EQ(ev[1].kind, DX_EV_ACT_SCHEDULED);
  dx_events_free(ev, n);
}

DX_TEST(store_turn_ack_commits_with_its_fetch_and_the_activity_it_scheduled) {
  /* the start is fetched, the turn answered while the transaction is open, and the activity
  ** it scheduled fetched by the same transaction: one commit (there were two: the fetch's,
  ** then the ack's) */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  run_turns(&t, w, 60000);
  ASSERT_EQ(t.n_turns, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 1);
  ASSERT_EQ(w->last_sync, 1); /* the turn's ack is durable */
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_eager_start_on_a_database_commits_with_its_first_turn) {
  /* a provider with run_cycle ($DX_TEST_PG): this process's own start is applied and its turn
  ** fetched by single calls, the turn answered while the transaction is open, and the
  ** run_cycle closing it acks the turn and fetches the activity: one commit (there were two:
  ** the start's cycle, then the ack's; and three with the client's own commit of the start) */
  static turns_t t;
  const char *pg = getenv("DX_TEST_PG");
  char url[1024];
  wrap_t *w;
  if (!pg || !*pg) {
    printf("# no $DX_TEST_PG: the database case is not run here (scripts/test runs it)\n");
    return;
  }
  snprintf(url, sizeof url, "%s%sschema=sc_%d_%lld", pg, strchr(pg, '?') ? "&" : "?",
           (int)getpid(), (long long)dx_clock_now_ms());
  w = wrap_open_at(url);
  ASSERT(w->m.version >= 5 && w->m.run_cycle);
  memset(&t, 0, sizeof t);
  t.eager = 1;
  run_turns(&t, w, 60000);
  ASSERT_EQ(t.n_turns, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 1);
  ASSERT_EQ(w->last_sync, 1); /* start and turn are durable */
  assert_one_turn(w);
  w_destroy(&w->base);
}

/* The activity's result and the turn it unblocks: the loop answers the activity run_turns
** fetched with its result, then the turn that result wakes with a completing ack. */
typedef struct {
  turns_t t; /* first: answer_turns gets it for the first turn */
  dx_store_op_t res_op, fin_op;
  dx_work_item_t res;
  dx_orch_ack_t fin;
  dx_event_t fin_ev[2];
  int commits_at_result, commits_at_turn, commits_at_done, fin_rc, fin_done;
} steps_t;

static void fin_acked(dx_store_op_t *op) {
  steps_t *st = op->ud;
  st->fin_rc = op->rc;
  st->commits_at_done = __atomic_load_n(&st->t.w->commits, __ATOMIC_SEQ_CST);
  st->fin_done = 1;
}

static void result_applied(dx_store_op_t *op) { ASSERT_EQ(op->rc, 0); }

static void answer_steps(void *ud, dx_store_fetched_t *f) {
  steps_t *st = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    const dx_orch_item_t *it = f->orch[i];
    dx_store_fetched_t one = {0};
    if (it->history_len == 0) { /* the first turn */
      one.orch = f->orch + i;
      one.n_orch = 1;
      answer_turns(&st->t, &one);
      continue;
    }
    st->commits_at_turn = __atomic_load_n(&st->t.w->commits, __ATOMIC_SEQ_CST);
    st->fin_ev[0] = (dx_event_t){.event_id = 3, .kind = DX_EV_ACT_COMPLETED, .source_id = 2,
                                 .data = "1"};
    st->fin_ev[1] = (dx_event_t){.event_id = 4, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    st->fin = (dx_orch_ack_t){.instance = "i1", .lock_token = it->lock_token,
                              .execution_id = it->execution_id, .orchestration_name = "Orch",
                              .status = DX_STATUS_COMPLETED, .output = "1",
                              .delta = st->fin_ev, .delta_len = 2};
    st->fin_op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = &st->fin, .done = fin_acked,
                                 .ud = st};
    dx__store_submit(st->t.s, &st->fin_op);
  }
  if (f->n_work && !st->t.n_work) { /* the activity: its result */
    st->t.n_work = (int)f->n_work;
    st->res = (dx_work_item_t){.kind = DX_WI_ACT_COMPLETED, .instance = "i1",
                               .execution_id = 1, .id = 2, .data = "1"};
    st->res_op = (dx_store_op_t){.kind = DX_OP_ACK_WORK, .token = f->work[0].lock_token,
                                 .item = &st->res, .done = result_applied, .ud = st};
    st->commits_at_result = __atomic_load_n(&st->t.w->commits, __ATOMIC_SEQ_CST);
    dx__store_submit(st->t.s, &st->res_op);
  }
}

static int steps_done(turns_t *t) { return ((steps_t *)t)->fin_done; }

/* Each of w's instances <id> (one "r<k>" for k < n, or the one `only`) ended after four
** events: started, scheduled, completed activity, completed orchestration. */
static void assert_four_events_completed(wrap_t *w, const char *only, int n) {
  dx_error_t err;
  int i;
  for (i = 0; i < n; i++) {
    char id[16];
    dx_event_t *ev = NULL;
    size_t ne = 0;
    if (only) snprintf(id, sizeof id, "%s", only);
    else snprintf(id, sizeof id, "r%d", i);
    ASSERT_OK(w->inner->methods->read_history(w->inner, id, 0, &ev, &ne, NULL, &err));
    ASSERT_EQ((int)ne, 4);
    ASSERT_EQ(ev[3].kind, DX_EV_ORCH_COMPLETED);
    dx_events_free(ev, ne);
  }
}

DX_TEST(store_result_of_an_idle_loop_on_a_database_commits_with_the_turn_it_unblocks) {
  /* a provider with run_cycle ($DX_TEST_PG), the loop holding nothing but the activity: its
  ** result is applied and the woken turn fetched by single calls, the turn answered while the
  ** transaction is open and acked by the run_cycle closing it: one commit (there were two) */
  static steps_t st;
  const char *pg = getenv("DX_TEST_PG");
  char url[1024];
  wrap_t *w;
  if (!pg || !*pg) {
    printf("# no $DX_TEST_PG: the database case is not run here (scripts/test runs it)\n");
    return;
  }
  snprintf(url, sizeof url, "%s%sschema=sr_%d_%lld", pg, strchr(pg, '?') ? "&" : "?",
           (int)getpid(), (long long)dx_clock_now_ms());
  w = wrap_open_at(url);
  memset(&st, 0, sizeof st);
  st.t.on_fetch = answer_steps;
  st.t.until = steps_done;
  run_turns(&st.t, w, 60000);
  ASSERT_EQ(st.fin_rc, 0);
  ASSERT_EQ(st.commits_at_turn, st.commits_at_result); /* handed over before any commit */
  ASSERT_EQ(st.commits_at_done - st.commits_at_result, 1);
  ASSERT_EQ(w->last_sync, 1);
  assert_four_events_completed(w, "i1", 1);
  w_destroy(&w->base);
}

DX_TEST(store_turn_answered_after_the_hold_commits_in_the_next_cycle) {
  /* a loop slower than hold_ms: the fetch commits alone, the ack follows as before */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  t.late_ms = 50;
  run_turns(&t, w, 1);
  ASSERT_EQ(t.n_turns, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 2);
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_turn_handed_over_from_a_lost_transaction_is_refused_and_comes_back) {
  /* the transaction that handed the turn over is rolled back (DX_ERETRY at commit): the ack
  ** given for that delivery is refused, the retried batch fetches the start again, and only
  ** the second delivery's turn is kept */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  w->retry_commits = 1;
  run_turns(&t, w, 60000);
  ASSERT_EQ(t.n_turns, 2);
  ASSERT_EQ(t.n_refused, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_turn_fetched_while_the_loop_holds_other_items_commits_at_once) {
  /* the loop still holds an earlier item unsettled (busy): the cycle that fetches i1 commits
  ** without waiting for its turn, the ack follows in the next cycle (waiting would keep other
  ** writers out of the store while the loop works through its backlog) */
  static turns_t t;
  wrap_t *w = wrap_open();
  dx_work_item_t start;
  dx_error_t err;
  memset(&t, 0, sizeof t);
  memset(&start, 0, sizeof start);
  start.kind = DX_WI_START;
  start.instance = "i0";
  start.name = "Orch";
  start.execution_id = 1;
  ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms() - 1, &start,
                                                        0, &err));
  t.keep_first = 1;
  run_turns(&t, w, 50); /* i0's cycle waits 50 ms for it in vain, commits; then i1 */
  ASSERT_EQ(t.n_turns, 2);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 3); /* i0's fetch, i1's fetch, i1's ack with its activity */
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_turn_refetched_in_the_cycle_of_its_previous_ack_waits_for_the_commit) {
  /* the ack of i1's first turn (answered after the hold) queues an event for i1; the cycle
  ** that applies it fetches i1 again: that turn goes to the loop only with the commit, after
  ** the first turn's settlement (the worker's cache keeps a turn once its ack is known to be
  ** committed: handed over earlier, the new turn found no kept turn and replayed) */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  t.late_ms = 20;
  t.self_event = 1;
  t.cache = 1;
  run_turns(&t, w, 1);
  ASSERT_EQ(t.n_turns, 2);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.acked_at_second, 1);
  ASSERT_EQ(t.n_reported, 0); /* its turn came with an earlier commit: never reported early */
  w_destroy(&w->base);
}

/* {===== a delivery's answers share one cycle (store.c delivering, await_delivery) =====} */

/* Ten instances step together as ten sessions at a worker's capacity do: their activities
** arrive in one delivery, the loop answers each with its result (a little work between two
** answers, as running an activity takes), the store fetches the ten turns those results wake
** and the loop completes each. */
#define ROUND_N 10
#define LAP_N 24 /* more than a held round takes (HOLD_MAX_ITEMS) */

typedef struct {
  dx_store_op_t op, res_op, fin_op; /* (the last turn's own: both turns may share a batch) */
  dx_orch_ack_t ack, fin_ack;
  dx_event_t ev[2], fin_ev[2];
  dx_work_item_t act, res;
  char instance[16];
} round_inst_t;

typedef struct {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  round_inst_t in[LAP_N];
  int n; /* instances (0: ROUND_N) */
  int n_work, fin_done, fin_failed, commits_at_result, commits_at_done;
  int answer_first; /* the loop answers each activity before its work between two answers */
} round_t;

static void round_fin_acked(dx_store_op_t *op) {
  round_t *r = op->ud;
  if (op->rc != 0) r->fin_failed++;
  if (++r->fin_done == (r->n ? r->n : ROUND_N))
    r->commits_at_done = __atomic_load_n(&r->w->commits, __ATOMIC_SEQ_CST);
}

/* n starts of "Orch", instances <prefix>0 .. <prefix>n-1, queued straight in the store. */
static void enqueue_starts(wrap_t *w, const char *prefix, int n) {
  dx_error_t err;
  int i;
  for (i = 0; i < n; i++) {
    char id[16];
    dx_work_item_t start = {.kind = DX_WI_START, .instance = id, .name = "Orch",
                            .execution_id = 1};
    snprintf(id, sizeof id, "%s%d", prefix, i);
    ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms(), &start,
                                                          0, &err));
  }
}

/* A store on w with long locks and a hold the loop's answers always make in time. */
static void held_cfg(dx_store_cfg_t *cfg, wrap_t *w) {
  memset(cfg, 0, sizeof *cfg);
  cfg->provider = &w->base;
  cfg->orch_lock_ms = cfg->work_lock_ms = 60000;
  cfg->poll_interval_ms = 10;
  cfg->hold_ms = 60000;
}

static void round_applied(dx_store_op_t *op) { ASSERT_EQ(op->rc, 0); }

static void answer_round(void *ud, dx_store_fetched_t *f) {
  round_t *r = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    const dx_orch_item_t *it = f->orch[i];
    round_inst_t *x = &r->in[atoi(it->instance + 1)];
    int first = it->history_len == 0;
    dx_event_t *ev = first ? x->ev : x->fin_ev;
    dx_orch_ack_t *ack = first ? &x->ack : &x->fin_ack;
    dx_store_op_t *op = first ? &x->op : &x->fin_op;
    snprintf(x->instance, sizeof x->instance, "%s", it->instance);
    if (first) {
      ev[0] = (dx_event_t){.event_id = 1, .kind = DX_EV_ORCH_STARTED, .name = "Orch",
                           .data = "1"};
      ev[1] = (dx_event_t){.event_id = 2, .kind = DX_EV_ACT_SCHEDULED, .name = "Act",
                           .data = "null"};
      x->act = (dx_work_item_t){.kind = DX_WI_ACT_EXECUTE, .instance = x->instance,
                                .execution_id = 1, .id = 2, .name = "Act", .data = "null"};
    } else {
      ev[0] = (dx_event_t){.event_id = 3, .kind = DX_EV_ACT_COMPLETED, .source_id = 2,
                           .data = "1"};
      ev[1] = (dx_event_t){.event_id = 4, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    }
    *ack = (dx_orch_ack_t){.instance = x->instance, .lock_token = it->lock_token,
                           .execution_id = it->execution_id, .orchestration_name = "Orch",
                           .status = first ? DX_STATUS_RUNNING : DX_STATUS_COMPLETED,
                           .output = first ? NULL : "1", .delta = ev, .delta_len = 2,
                           .worker_items = first ? &x->act : NULL,
                           .worker_items_len = first ? 1 : 0};
    *op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = ack,
                          .done = first ? round_applied : round_fin_acked, .ud = r};
    dx__store_submit(r->s, op);
  }
  for (i = 0; i < f->n_work; i++) {
    round_inst_t *x = &r->in[atoi(f->work[i].item.instance + 1)];
    if (r->n_work++ == 0)
      r->commits_at_result = __atomic_load_n(&r->w->commits, __ATOMIC_SEQ_CST);
    if (!r->answer_first) usleep(300); /* the activity runs */
    x->res = (dx_work_item_t){.kind = DX_WI_ACT_COMPLETED, .instance = x->instance,
                              .execution_id = 1, .id = 2, .data = "1"};
    x->res_op = (dx_store_op_t){.kind = DX_OP_ACK_WORK, .token = f->work[i].lock_token,
                                .item = &x->res, .done = round_applied, .ud = r};
    dx__store_submit(r->s, &x->res_op);
    if (r->answer_first) usleep(300);
  }
}

DX_TEST(store_round_of_ten_steps_answered_in_one_delivery_commits_once) {
  /* the ten results, the ten turns they wake and those turns' acks: one commit (the thread
  ** woke at the first result and took part of the burst; and ten turns were more than a hold
  ** took, so their fetch committed alone: five commits here before) */
  static round_t r;
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(&r, 0, sizeof r);
  r.w = w;
  enqueue_starts(w, "r", ROUND_N);
  ASSERT_OK(uv_loop_init(&r.loop));
  held_cfg(&cfg, w);
  cfg.on_fetch = answer_round;
  cfg.ud = &r;
  ASSERT_OK(dx__store_new(&r.s, &r.loop, &cfg, &err));
  dx__store_want(r.s, 64, 64); /* one cycle takes all ten starts */
  for (i = 0; i < 20000 && r.fin_done < ROUND_N; i++) {
    uv_run(&r.loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(r.s, &r.loop);
  ASSERT_EQ(r.fin_done, ROUND_N);
  ASSERT_EQ(r.fin_failed, 0);
  ASSERT_EQ(r.n_work, ROUND_N);
  ASSERT_EQ(r.commits_at_result, 1); /* starts, first turns and the ten activities */
  ASSERT_EQ(r.commits_at_done - r.commits_at_result, 1);
  ASSERT_EQ(w->last_sync, 1);
  assert_four_events_completed(w, NULL, ROUND_N);
  w_destroy(&w->base);
}

/* The held rounds as a pipeline (store_rounds.c hand_over): the ten first turns go to the loop
** as two nodes of five; while the loop runs the second, the store thread applies the first's
** acks (and hands over the activities they scheduled). */
typedef struct {
  round_t r;        /* (first: answer_round's ud) */
  int turn_nodes[4], n_turn_nodes, acks_meanwhile, work_nodes, partial;
  int iter, second_turns_iter, first_work_iter; /* the driver's uv_run calls */
} pipe_t;

/* Wait (bounded) until the store applied at least n calls counted by *counter. */
static int await_count(int *counter, int n) {
  int k;
  for (k = 0; k < 4000 && __atomic_load_n(counter, __ATOMIC_SEQ_CST) < n; k++) usleep(500);
  return __atomic_load_n(counter, __ATOMIC_SEQ_CST);
}

static void answer_pipe(void *ud, dx_store_fetched_t *f) {
  pipe_t *p = ud;
  size_t i;
  if (f->n_orch && f->orch[0]->history_len == 0 && p->n_turn_nodes < 4) {
    p->turn_nodes[p->n_turn_nodes++] = (int)f->n_orch;
    if (p->n_turn_nodes == 2) { /* the first node's acks are applied meanwhile */
      p->acks_meanwhile = await_count(&p->r.w->acks_orch, p->turn_nodes[0]);
      /* and the activities they scheduled fetched (five and a sixth fetch finding none) and
      ** handed over while this loop still runs */
      await_count(&p->r.w->fetch_works, ROUND_N / 2 + 1);
      usleep(20000);
      p->second_turns_iter = p->iter;
    }
  }
  if (f->n_work && !p->work_nodes) p->first_work_iter = p->iter;
  if (!f->n_work || p->work_nodes++ != 1) {
    answer_round(ud, f);
    return;
  }
  /* the second node of activities: its first answer stays queued until the node is run, even
  ** when the store thread takes the first node's answers meanwhile */
  for (i = 0; i < f->n_work; i++) {
    dx_store_fetched_t one = {.work = f->work + i, .n_work = 1, .at_ms = f->at_ms};
    answer_round(ud, &one);
    if (i == 0) {
      await_count(&p->r.w->acks_work, ROUND_N / 2); /* the first node's results */
      usleep(20000); /* (a take of this first answer would be applied by now) */
      p->partial = __atomic_load_n(&p->r.w->acks_work, __ATOMIC_SEQ_CST) - ROUND_N / 2;
    }
  }
}

DX_TEST(store_held_round_applies_one_half_while_the_loop_runs_the_other) {
  /* before: the ten turns went over as one delivery and the store thread slept until all ten
  ** acks were in (the loop and the thread worked in turn, never at once) */
  static pipe_t p;
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(&p, 0, sizeof p);
  p.r.w = w;
  p.r.answer_first = 1;
  enqueue_starts(w, "r", ROUND_N);
  ASSERT_OK(uv_loop_init(&p.r.loop));
  held_cfg(&cfg, w);
  cfg.hold_work = 1;
  cfg.on_fetch = answer_pipe;
  cfg.ud = &p;
  ASSERT_OK(dx__store_new(&p.r.s, &p.r.loop, &cfg, &err));
  dx__store_want(p.r.s, 64, 64);
  for (i = 0; i < 20000 && p.r.fin_done < ROUND_N; i++) {
    p.iter = i;
    uv_run(&p.r.loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(p.r.s, &p.r.loop);
  ASSERT_EQ(p.r.fin_done, ROUND_N);
  /* the activities handed over while the loop ran the second turns ran in the same wake-up
  ** (on_async looks for held nodes before it returns; before: a trip through the poll) */
  ASSERT_EQ(p.first_work_iter, p.second_turns_iter);
  ASSERT_EQ(p.r.fin_failed, 0);
  ASSERT_EQ(p.n_turn_nodes, 2);
  ASSERT_EQ(p.turn_nodes[0], ROUND_N / 2);
  ASSERT_EQ(p.turn_nodes[1], ROUND_N / 2);
  ASSERT_EQ(p.acks_meanwhile, ROUND_N / 2); /* the first five, before the second five's */
  ASSERT_EQ(p.work_nodes, 2);  /* the activities follow each half on their own */
  /* the store takes the answers of the nodes the loop has run, not the first of those to the
  ** one it runs now (taken in part, their items went over in pieces) */
  ASSERT_EQ(p.partial, 0);
  ASSERT_EQ(p.r.commits_at_result, 0); /* activities ran inside the transaction */
  ASSERT_EQ(w->commits, 1);   /* starts, turns, activities, results, last turns: one commit */
  w_destroy(&w->base);
}

/* The loop holds a turn it never settles ("busy"), so a later turn cannot go round; the
** activity ready beside it is still fetched in that batch (delivered with it), not left for a
** later cycle (another worker process could take it meanwhile). */
typedef struct {
  int deliveries, together;
} beside_t;

static void note_beside(void *ud, dx_store_fetched_t *f) {
  beside_t *b = ud;
  b->deliveries++;
  if (f->n_orch == 1 && f->n_work == 1 && strcmp(f->orch[0]->instance, "t1") == 0) b->together++;
} /* (nothing is settled: every item stays held) */

DX_TEST(store_activity_ready_beside_a_turn_that_cannot_go_round_is_fetched_in_its_batch) {
  static beside_t b;
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_error_t err;
  dx_work_item_t act = {.kind = DX_WI_ACT_EXECUTE, .instance = "x", .execution_id = 1, .id = 2,
                        .name = "Act", .data = "null"};
  dx_work_item_t t1 = {.kind = DX_WI_START, .instance = "t1", .name = "Orch", .execution_id = 1};
  int i;
  memset(&b, 0, sizeof b);
  enqueue_starts(w, "busy", 1);
  ASSERT_OK(uv_loop_init(&loop));
  held_cfg(&cfg, w);
  cfg.hold_ms = 5; /* the unanswered turn's hold ends */
  cfg.hold_work = 1;
  cfg.on_fetch = note_beside;
  cfg.ud = &b;
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_want(s, 8, 8);
  for (i = 0; i < 20000 && b.deliveries < 1; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  ASSERT_EQ(b.deliveries, 1); /* busy0's turn, never answered */
  dx__store_pause(s, 1);      /* (both become ready between two batches) */
  ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms(), &t1, 0,
                                                        &err));
  ASSERT_OK(w->inner->methods->enqueue_for_worker(w->inner, dx_clock_now_ms(), &act, &err));
  dx__store_pause(s, 0);
  dx__store_poke(s);
  for (i = 0; i < 20000 && b.deliveries < 2; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(s, &loop);
  ASSERT_EQ(b.deliveries, 2);
  ASSERT_EQ(b.together, 1);
  w_destroy(&w->base);
}

DX_TEST(store_want_of_more_budget_in_hand_does_not_wake_the_thread) {
  /* the loop tops up its budget after every settlement; while the thread still has budget
  ** it finds nothing new by looking again (each look is a read of what is due) */
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i, before;
  w->m.next_due_ms = w_next_due;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.poll_interval_ms = 600000; /* only a wake-up can make the thread look again */
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  spin(&loop, 20);
  ASSERT_EQ(dues(w), 0); /* no budget: nothing to look for */
  dx__store_want(s, 1, 0);
  for (i = 0; i < 5000 && dues(w) == 0; i++) spin(&loop, 1);
  ASSERT_EQ(dues(w), 1); /* a budget from none: it looks */
  spin(&loop, 20);
  before = dues(w);
  for (i = 0; i < 5; i++) {
    dx__store_want(s, 1, 0);
    spin(&loop, 5);
  }
  ASSERT_EQ(dues(w), before);
  dx__store_want(s, 0, 1); /* the work budget was none */
  for (i = 0; i < 5000 && dues(w) == before; i++) spin(&loop, 1);
  ASSERT_EQ(dues(w), before + 1);
  close_store(s, &loop);
  w_destroy(&w->base);
}

/* A big delivery (more items than a burst, BURST_MAX_ITEMS): the store thread takes its first
** answers while the loop still works on the rest, and commits them meanwhile (the loop's work
** and the commits overlap, as throughput workloads want). */
#define BIG_N 40

typedef struct {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  round_inst_t in[BIG_N];
  int n_turns, acked, committed_meanwhile;
} big_t;

static void big_acked(dx_store_op_t *op) {
  big_t *b = op->ud;
  ASSERT_EQ(op->rc, 0);
  b->acked++;
}

static void answer_big(void *ud, dx_store_fetched_t *f) {
  big_t *b = ud;
  size_t i;
  for (i = 0; i < f->n_orch && b->n_turns < BIG_N; i++) {
    const dx_orch_item_t *it = f->orch[i];
    round_inst_t *x = &b->in[b->n_turns++];
    snprintf(x->instance, sizeof x->instance, "%s", it->instance);
    x->ev[0] = (dx_event_t){.event_id = 1, .kind = DX_EV_ORCH_STARTED, .name = "Orch",
                            .data = "1"};
    x->ev[1] = (dx_event_t){.event_id = 2, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    x->ack = (dx_orch_ack_t){.instance = x->instance, .lock_token = it->lock_token,
                             .execution_id = it->execution_id, .orchestration_name = "Orch",
                             .status = DX_STATUS_COMPLETED, .output = "1", .delta = x->ev,
                             .delta_len = 2};
    x->op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = &x->ack, .done = big_acked, .ud = b};
    dx__store_submit(b->s, &x->op);
    if (b->n_turns == 1) { /* the loop works on: the first ack commits meanwhile */
      int before = __atomic_load_n(&b->w->commits, __ATOMIC_SEQ_CST), k;
      for (k = 0; k < 10000 && __atomic_load_n(&b->w->commits, __ATOMIC_SEQ_CST) == before; k++)
        usleep(1000);
      b->committed_meanwhile = __atomic_load_n(&b->w->commits, __ATOMIC_SEQ_CST) > before;
    }
  }
}

DX_TEST(store_answers_to_a_big_delivery_commit_while_the_loop_still_works) {
  /* 40 starts fetched at once (more than a hold or a burst takes): the first turn's ack is
  ** applied and committed while the loop has 39 turns still to run (with every answer of a
  ** delivery held back to its end, the thread waited for the loop for hold_ms, here a
  ** minute) */
  static big_t b;
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(&b, 0, sizeof b);
  b.w = w;
  enqueue_starts(w, "b", BIG_N);
  ASSERT_OK(uv_loop_init(&b.loop));
  held_cfg(&cfg, w);
  cfg.on_fetch = answer_big;
  cfg.ud = &b;
  ASSERT_OK(dx__store_new(&b.s, &b.loop, &cfg, &err));
  dx__store_want(b.s, 64, 0); /* one cycle takes all forty starts */
  for (i = 0; i < 20000 && b.acked < BIG_N; i++) {
    uv_run(&b.loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(b.s, &b.loop);
  ASSERT_EQ(b.n_turns, BIG_N);
  ASSERT_EQ(b.acked, BIG_N);
  ASSERT(b.committed_meanwhile);
  w_destroy(&w->base);
}

/* {===== a session's close and the next session's claim share one commit (hold_closes) =====} */

/* A worker at its session capacity (one session here): instance c0 runs an activity on
** session s0, then closes it and completes; c1's activity on session s1 waits for a free slot.
** The loop answers a close item as the runtime does when nothing of the session runs here: its
** ack and the session's release. */
typedef struct {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  round_inst_t in[2];
  dx_store_op_t close_op, release_op;
  dx_session_cfg_t sess;
  uv_timer_t late;  /* late_ms > 0: the close is answered that much later (a busy loop) */
  int late_ms;
  int closes, fin_done, fin_failed, c1_work_at, c0_result_at;
} closes_t;

static void closes_applied(dx_store_op_t *op) { ASSERT_EQ(op->rc, 0); }

static int w_release(dx_provider_t *p, int64_t now, const char *worker, const char *sid,
                     uint64_t *released, dx_error_t *err) {
  return IN(p)->methods->release_session_locks(IN(p), now, worker, sid, released, err);
}

static void closes_fin_acked(dx_store_op_t *op) {
  closes_t *c = op->ud;
  if (op->rc != 0) c->fin_failed++;
  c->fin_done++;
}

static void answer_close_late(uv_timer_t *h) {
  closes_t *c = h->data;
  dx__store_submit(c->s, &c->close_op);
  dx__store_submit(c->s, &c->release_op);
}

static void answer_closes(void *ud, dx_store_fetched_t *f) {
  closes_t *c = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    const dx_orch_item_t *it = f->orch[i];
    int k = atoi(it->instance + 1), first = it->history_len == 0;
    round_inst_t *x = &c->in[k];
    char sid[8];
    snprintf(sid, sizeof sid, "s%d", k);
    snprintf(x->instance, sizeof x->instance, "%s", it->instance);
    if (first) {
      x->ev[0] = (dx_event_t){.event_id = 1, .kind = DX_EV_ORCH_STARTED, .name = "Orch",
                              .data = "1"};
      x->ev[1] = (dx_event_t){.event_id = 2, .kind = DX_EV_ACT_SCHEDULED, .name = "Act",
                              .data = "null", .session_id = k ? "s1" : "s0"};
      x->act = (dx_work_item_t){.kind = DX_WI_ACT_EXECUTE, .instance = x->instance,
                                .execution_id = 1, .id = 2, .name = "Act", .data = "null",
                                .session_id = k ? "s1" : "s0"};
    } else { /* c0's result: close the session and complete */
      x->ev[0] = (dx_event_t){.event_id = 3, .kind = DX_EV_ACT_COMPLETED, .source_id = 2,
                              .data = "1"};
      x->ev[1] = (dx_event_t){.event_id = 4, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
      x->act = (dx_work_item_t){.kind = DX_WI_SESSION_CLOSE, .instance = x->instance,
                                .execution_id = 1, .id = 5, .session_id = "s0"};
    }
    x->ack = (dx_orch_ack_t){.instance = x->instance, .lock_token = it->lock_token,
                             .execution_id = it->execution_id, .orchestration_name = "Orch",
                             .status = first ? DX_STATUS_RUNNING : DX_STATUS_COMPLETED,
                             .output = first ? NULL : "1", .delta = x->ev, .delta_len = 2,
                             .worker_items = &x->act, .worker_items_len = 1};
    x->op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = &x->ack,
                            .done = first ? closes_applied : closes_fin_acked, .ud = c};
    dx__store_submit(c->s, &x->op);
  }
  for (i = 0; i < f->n_work; i++) {
    const dx_work_fetch_t *wf = &f->work[i];
    round_inst_t *x = &c->in[atoi(wf->item.instance + 1)];
    if (wf->item.kind == DX_WI_SESSION_CLOSE) {
      c->closes++;
      c->close_op = (dx_store_op_t){.kind = DX_OP_ACK_WORK, .token = wf->lock_token,
                                    .done = closes_applied, .ud = c};
      c->release_op = (dx_store_op_t){.kind = DX_OP_RELEASE_SESSIONS, .worker_id = "w1",
                                      .session_id = "s0", .done = closes_applied, .ud = c};
      if (c->late_ms > 0) uv_timer_start(&c->late, answer_close_late, (uint64_t)c->late_ms, 0);
      else answer_close_late(&c->late);
      continue;
    }
    if (x == &c->in[1]) c->c1_work_at = __atomic_load_n(&c->w->commits, __ATOMIC_SEQ_CST);
    else { /* c0's activity: its result (c1's stays unanswered: the test ends there) */
      c->c0_result_at = __atomic_load_n(&c->w->commits, __ATOMIC_SEQ_CST);
      x->res = (dx_work_item_t){.kind = DX_WI_ACT_COMPLETED, .instance = x->instance,
                                .execution_id = 1, .id = 2, .data = "1"};
      x->res_op = (dx_store_op_t){.kind = DX_OP_ACK_WORK, .token = wf->lock_token,
                                  .item = &x->res, .done = closes_applied, .ud = c};
      dx__store_submit(c->s, &x->res_op);
    }
  }
}

/* Runs c0 and c1 (see closes_t) until c1's activity reached the loop. */
static void run_closes(closes_t *c, int64_t hold_ms, int late_ms) {
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(c, 0, sizeof *c);
  c->w = w;
  c->late_ms = late_ms;
  w->m.release_session_locks = w_release;
  c->sess = (dx_session_cfg_t){.worker_id = "w1", .session_lock_ms = 60000, .max_sessions = 1};
  enqueue_starts(w, "c", 2);
  ASSERT_OK(uv_loop_init(&c->loop));
  uv_timer_init(&c->loop, &c->late);
  c->late.data = c;
  held_cfg(&cfg, w);
  cfg.hold_ms = hold_ms;
  cfg.on_fetch = answer_closes;
  cfg.ud = c;
  cfg.sessions = &c->sess;
  cfg.worker_id = "w1";
  ASSERT_OK(dx__store_new(&c->s, &c->loop, &cfg, &err));
  dx__store_want(c->s, 64, 64);
  for (i = 0; i < 20000 && !(c->fin_done && c->c1_work_at); i++) {
    uv_run(&c->loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  uv_close((uv_handle_t *)&c->late, NULL);
  close_store(c->s, &c->loop);
  ASSERT_EQ(c->fin_done, 1);
  ASSERT_EQ(c->fin_failed, 0);
  ASSERT_EQ(c->closes, 1);
  ASSERT(c->c0_result_at > 0);
  w_destroy(&w->base);
}

DX_TEST(store_session_close_and_the_next_claim_share_one_commit) {
  /* the close reached the idle loop inside the transaction of c0's last turn: released there,
  ** the slot took s1 in the same commit (one commit later before: the close was delivered
  ** with the commit, its release and the claim committed in a cycle of their own; and a
  ** batch that had found the worker at capacity claimed nothing more after a release) */
  static closes_t c;
  run_closes(&c, 60000, 0);
  /* c0's result, its last turn, the close, the release and the claim of s1: one commit */
  ASSERT_EQ(c.c1_work_at - c.c0_result_at, 1);
}

DX_TEST(store_session_close_answered_after_the_hold_is_applied_in_the_next_cycle) {
  /* a loop too busy to answer the close within the hold: the transaction commits without it
  ** (no wait past hold_ms), and its answer releases the session in the next cycle, which
  ** claims s1 */
  static closes_t c;
  run_closes(&c, 5, 100);
  ASSERT(c.c1_work_at - c.c0_result_at >= 2); /* (the look for due work may commit meanwhile) */
}

/* {===== activities answered inside their fetch's transaction (store.c held rounds) =====} */

/* The loop side: instance "h1" runs `steps` activities one after another, then completes.
** Its first turn schedules activity 2 (in session sid when set); each result's turn records
** the completion and schedules the next activity (or completes). Every delivery is answered
** at once; ops are malloc'd and freed when done. */
typedef struct {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  dx_session_cfg_t sess;
  const char *sid;   /* the activities' session (NULL: none) */
  int steps;
  int cache;         /* acks ask for op->applied, which wipes the ack (as the runtime's cache
                        takes the turn's memory back: the store must not read it again) */
  int n_turns, n_runs, n_res_ok, n_res_refused, n_acks_ok, n_acks_refused, n_reported;
  int fin_ok, reported_at_turn[8], commits_at_run[8];
  int defer_first;              /* answer the first turn only after a commit (its hold ended) */
  int second;                   /* with defer_first: h1 starts with that answer (same batch) */
  int late_result_ms;           /* the activity's result comes that much later (a timer) */
  uv_timer_t late_timer;
  struct hello_op_s *late_x;
  dx_store_op_t start_op;
  dx_work_item_t start;
  struct hello_op_s *deferred;
  int commits_at_first_answer;
} hello_t;

typedef struct hello_op_s {
  dx_store_op_t op;
  dx_orch_ack_t *ack; /* its own allocation: freed when reported (ASan sees a later read) */
  dx_event_t ev[2];
  dx_work_item_t act, res;
  char instance[16];
  int fin;
  hello_t *h;
} hello_op_t;

static void hello_acked(dx_store_op_t *op) {
  hello_op_t *x = op->ud;
  if (op->rc == 0) x->h->n_acks_ok++, x->h->fin_ok += x->fin;
  else x->h->n_acks_refused++;
  free(x->ack);
  free(x);
}

static void hello_reported(dx_store_op_t *op) {
  hello_op_t *x = op->ud;
  x->h->n_reported++;
  memset(x->ack, 0xEE, sizeof *x->ack); /* taken back: the store must not read it again */
  free(x->ack);
  x->ack = NULL;
}

static void hello_result(dx_store_op_t *op) {
  hello_op_t *x = op->ud;
  if (op->rc == 0) x->h->n_res_ok++;
  else x->h->n_res_refused++;
  free(x);
}

static void hello_late_result(uv_timer_t *t) {
  hello_t *h = t->data;
  dx__store_submit(h->s, &h->late_x->op);
  uv_close((uv_handle_t *)t, NULL);
}

static void answer_hello(void *ud, dx_store_fetched_t *f) {
  hello_t *h = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    const dx_orch_item_t *it = f->orch[i];
    hello_op_t *x = calloc(1, sizeof *x);
    uint64_t n = it->history_len, done = n / 2; /* Started, Scheduled, then Completed+1 */
    ASSERT(x != NULL);
    if (h->n_turns < 8) h->reported_at_turn[h->n_turns] = h->n_reported;
    h->n_turns++;
    x->h = h;
    snprintf(x->instance, sizeof x->instance, "%s", it->instance);
    if (n == 0) {
      x->ev[0] = (dx_event_t){.event_id = 1, .kind = DX_EV_ORCH_STARTED, .name = "Orch",
                              .data = "1"};
    } else {
      x->ev[0] = (dx_event_t){.event_id = n + 1, .kind = DX_EV_ACT_COMPLETED,
                              .source_id = n, .data = "1"};
    }
    x->fin = n > 0 && (int)done >= h->steps;
    if (x->fin) {
      x->ev[1] = (dx_event_t){.event_id = n + 2, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    } else {
      x->ev[1] = (dx_event_t){.event_id = n + 2, .kind = DX_EV_ACT_SCHEDULED, .name = "Act",
                              .data = "null", .session_id = (char *)h->sid};
      x->act = (dx_work_item_t){.kind = DX_WI_ACT_EXECUTE, .instance = x->instance,
                                .execution_id = 1, .id = n + 2, .name = "Act", .data = "null",
                                .session_id = (char *)h->sid};
    }
    x->ack = malloc(sizeof *x->ack);
    ASSERT(x->ack != NULL);
    *x->ack = (dx_orch_ack_t){.instance = x->instance, .lock_token = it->lock_token,
                             .execution_id = it->execution_id, .orchestration_name = "Orch",
                             .status = x->fin ? DX_STATUS_COMPLETED : DX_STATUS_RUNNING,
                             .output = x->fin ? "1" : NULL, .delta = x->ev, .delta_len = 2,
                             .worker_items = x->fin ? NULL : &x->act,
                             .worker_items_len = x->fin ? 0 : 1};
    x->op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = x->ack, .done = hello_acked,
                            .applied = h->cache ? hello_reported : NULL, .ud = x};
    if (h->defer_first && h->n_turns == 1) h->deferred = x; /* run_hello answers it */
    else dx__store_submit(h->s, &x->op);
  }
  for (i = 0; i < f->n_work; i++) {
    hello_op_t *x = calloc(1, sizeof *x);
    ASSERT(x != NULL);
    if (h->n_runs < 8)
      h->commits_at_run[h->n_runs] = __atomic_load_n(&h->w->commits, __ATOMIC_SEQ_CST);
    h->n_runs++;
    x->h = h;
    snprintf(x->instance, sizeof x->instance, "%s", f->work[i].item.instance);
    x->res = (dx_work_item_t){.kind = DX_WI_ACT_COMPLETED, .instance = x->instance,
                              .execution_id = 1, .id = f->work[i].item.id, .data = "1"};
    x->op = (dx_store_op_t){.kind = DX_OP_ACK_WORK, .token = f->work[i].lock_token,
                            .item = &x->res, .done = hello_result, .ud = x};
    if (h->late_result_ms > 0) { /* the activity awaits something: it completes on its own */
      h->late_x = x;
      uv_timer_init(&h->loop, &h->late_timer);
      h->late_timer.data = h;
      uv_timer_start(&h->late_timer, hello_late_result, (uint64_t)h->late_result_ms, 0);
    } else {
      dx__store_submit(h->s, &x->op);
    }
  }
}

/* Start h1 and run a store with held work (hold_ms long: the idle loop always answers within
** it, however loaded the machine) until h1 completed; h's options set before. */
static void run_hello(hello_t *h, wrap_t *w) {
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  h->w = w;
  if (!h->steps) h->steps = 1;
  enqueue_starts(w, "h", 1); /* h0 */
  ASSERT_OK(uv_loop_init(&h->loop));
  held_cfg(&cfg, w);
  if (h->defer_first) cfg.hold_ms = 200; /* the unanswered first turn's hold ends */
  cfg.hold_work = 1;
  cfg.on_fetch = answer_hello;
  cfg.ud = h;
  if (h->sid) {
    h->sess = (dx_session_cfg_t){.worker_id = "w1", .session_lock_ms = 60000, .max_sessions = 4};
    cfg.sessions = &h->sess;
    cfg.worker_id = "w1";
  }
  ASSERT_OK(dx__store_new(&h->s, &h->loop, &cfg, &err));
  dx__store_want(h->s, 8, 8);
  for (i = 0; i < 20000 && h->fin_ok < 1 + h->second; i++) {
    uv_run(&h->loop, UV_RUN_NOWAIT);
    if (h->deferred && __atomic_load_n(&w->commits, __ATOMIC_SEQ_CST) >= 1) {
      h->commits_at_first_answer = __atomic_load_n(&w->commits, __ATOMIC_SEQ_CST);
      dx__store_pause(h->s, 1); /* (both ops in one batch) */
      if (h->second) {
        h->start = (dx_work_item_t){.kind = DX_WI_START, .instance = "h1", .name = "Orch",
                                    .execution_id = 1};
        h->start_op = (dx_store_op_t){.kind = DX_OP_ENQUEUE_ORCH, .item = &h->start,
                                      .done = start_applied};
        dx__store_submit(h->s, &h->start_op);
      }
      dx__store_submit(h->s, &h->deferred->op);
      dx__store_pause(h->s, 0);
      h->deferred = NULL;
    }
    usleep(500);
  }
  close_store(h->s, &h->loop);
  ASSERT_EQ(h->fin_ok, 1 + h->second);
}

/* h0's history: its start, then per step scheduled + completed, then its completion; the
** number of ActivityCompleted events it holds. */
static int hello_history(wrap_t *w, int steps) {
  dx_event_t *ev = NULL;
  size_t n = 0, i;
  dx_error_t err;
  int completed = 0;
  ASSERT_OK(w->inner->methods->read_history(w->inner, "h0", 0, &ev, &n, NULL, &err));
  ASSERT_EQ((int)n, 2 * steps + 2);
  ASSERT_EQ(ev[n - 1].kind, DX_EV_ORCH_COMPLETED);
  for (i = 0; i < n; i++) completed += ev[i].kind == DX_EV_ACT_COMPLETED;
  dx_events_free(ev, n);
  return completed;
}

/* {===== fetched memory given back (store_mem.c) =====} */

typedef struct {
  dx_store_t *s;
  int fetched;
  dx_work_item_t kept; /* given back only after the store's last cycle */
} giver_t;

static void give_back(void *ud, dx_store_fetched_t *f) {
  giver_t *g = ud;
  size_t i;
  for (i = 0; i < f->n_work; i++, g->fetched++) {
    if (!g->kept.kind) { /* as activity_release does once an activity is settled */
      g->kept = f->work[i].item;
      memset(&f->work[i].item, 0, sizeof f->work[i].item);
    } else {
      dx__store_give_work(g->s, &f->work[i].item);
      ASSERT_EQ(f->work[i].item.kind, 0); /* taken */
    }
  }
}

DX_TEST(store_frees_the_items_the_loop_gives_back_on_its_own_thread) {
  /* the provider allocated the items on the store thread: the loop only collects them, and
  ** the store thread takes the collection at its next cycle; one still held by the loop when
  ** the store closes is freed with it (ASan: no leak, no double free) */
  wrap_t *w = wrap_open();
  dx_provider_t *in = w->inner;
  uv_loop_t loop;
  dx_store_cfg_t cfg;
  dx_work_item_t act;
  dx_error_t err;
  giver_t g;
  int i;
  memset(&act, 0, sizeof act);
  act.kind = DX_WI_ACT_EXECUTE;
  act.instance = "i1";
  act.execution_id = 1;
  act.name = "Act";
  act.data = "null";
  for (i = 0; i < 3; i++) {
    act.id = (uint64_t)(i + 2);
    ASSERT_OK(in->methods->enqueue_for_worker(in, dx_clock_now_ms(), &act, &err));
  }
  memset(&g, 0, sizeof g);
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.orch_lock_ms = cfg.work_lock_ms = 60000;
  cfg.poll_interval_ms = 10;
  cfg.on_fetch = give_back;
  cfg.ud = &g;
  ASSERT_OK(dx__store_new(&g.s, &loop, &cfg, &err));
  dx__store_want(g.s, 0, 3);
  for (i = 0; i < 20000 && g.fetched < 3; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  ASSERT_EQ(g.fetched, 3);
  ASSERT_EQ(dx__store_items_given_back(g.s), 0); /* none taken before a cycle */
  dx__store_want(g.s, 1, 0); /* (a store with no budget and no op makes no cycle) */
  for (i = 0; i < 20000 && dx__store_items_given_back(g.s) < 2; i++) {
    dx__store_poke(g.s); /* a cycle: the store thread takes the collection first */
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  ASSERT_EQ(dx__store_items_given_back(g.s), 2);
  dx__store_give_work(g.s, &g.kept); /* the store closes before its next cycle */
  close_store(g.s, &loop);
  w_destroy(&w->base);
}

DX_TEST(store_held_hello_takes_one_commit_after_its_start) {
  /* start fetched, first turn answered, its activity handed to the loop before the commit, the
  ** result applied, the turn it woke answered: all in one durable commit (two before: the
  ** activity waited for the commit of the turn that scheduled it) */
  static hello_t h;
  wrap_t *w = wrap_open();
  memset(&h, 0, sizeof h);
  run_hello(&h, w);
  ASSERT_EQ(h.n_runs, 1);
  ASSERT_EQ(h.commits_at_run[0], 0); /* the activity ran before any commit */
  ASSERT_EQ(w->commits, 1);
  ASSERT_EQ(w->last_sync, 1);
  ASSERT_EQ(hello_history(w, 1), 1);
  w_destroy(&w->base);
}

DX_TEST(store_held_steps_of_a_lone_orchestration_share_one_commit) {
  /* five activities in a row: each result, the turn it wakes and the next activity go round
  ** inside the open transaction; each ack is reported to the loop (op->applied) before the
  ** instance's next turn reaches it, so its cache can continue that turn (six commits before) */
  static hello_t h;
  wrap_t *w = wrap_open();
  int i;
  memset(&h, 0, sizeof h);
  h.steps = 5;
  h.cache = 1;
  run_hello(&h, w);
  ASSERT_EQ(h.n_runs, 5);
  ASSERT_EQ(h.n_turns, 6);
  ASSERT_EQ(w->commits, 1);
  for (i = 1; i < 6; i++) ASSERT_EQ(h.reported_at_turn[i], i); /* the previous ack first */
  ASSERT_EQ(h.n_reported, 5); /* (the last ack had no hand-over after it) */
  ASSERT_EQ(h.n_acks_ok, 6);
  ASSERT_EQ(hello_history(w, 5), 5);
  w_destroy(&w->base);
}

DX_TEST(store_held_turn_woken_after_an_unreported_ack_goes_round_in_the_next_transaction) {
  /* the first turn is answered only after its hold ended (delivered with commit 1): its ack is
  ** applied in the next transaction, which the loop is not told of (not handed over there),
  ** so the turn the activity's result wakes could not be handed over in it. It is fetched by
  ** the next transaction instead, which hands it over and runs the remaining steps in rounds:
  ** three commits (before: fetched at once and delivered with the commit, each later step
  ** paid a commit of its own, as a long orchestration's steps read the whole history) */
  static hello_t h;
  wrap_t *w = wrap_open();
  memset(&h, 0, sizeof h);
  h.steps = 4;
  h.cache = 1;
  h.defer_first = 1;
  run_hello(&h, w);
  ASSERT_EQ(h.commits_at_first_answer, 1); /* (the scenario: the first ack came in late) */
  ASSERT_EQ(h.n_runs, 4);
  ASSERT_EQ(h.n_turns, 5);
  ASSERT_EQ(w->commits, 3);
  ASSERT_EQ(hello_history(w, 4), 4);
  w_destroy(&w->base);
}

DX_TEST(store_held_turn_ack_fetches_the_activities_of_an_unreported_ack_in_its_commit) {
  /* h0's first turn is answered after its hold ended (its ack, applied in the next
  ** transaction, is not reported); h1's first turn, fetched there, is handed over. The
  ** activities both turns schedule are fetched in that transaction and go round in it (the
  ** unreported ack keeps only turns for the next cycle; a version of the pipeline stopped the
  ** rounds before that work fetch, and both activities ran a commit later) */
  static hello_t h;
  wrap_t *w = wrap_open();
  memset(&h, 0, sizeof h);
  h.cache = 1;
  h.defer_first = 1;
  h.second = 1;
  run_hello(&h, w);
  ASSERT_EQ(h.commits_at_first_answer, 1);
  ASSERT_EQ(h.n_runs, 2);
  ASSERT_EQ(h.commits_at_run[0], 1); /* inside the second transaction, with h1's first turn */
  ASSERT_EQ(h.commits_at_run[1], 1);
  w_destroy(&w->base);
}

DX_TEST(store_held_activity_that_completes_later_joins_its_transaction) {
  /* the loop runs the handed activity's node without an answer (the activity awaits a timer);
  ** the store thread waits on for it (within hold_ms, here a minute) instead of ending the
  ** rounds at the node's end: start, turns, activity and result in one commit (a version of
  ** the pipeline committed without the result, then took two more commits) */
  static hello_t h;
  wrap_t *w = wrap_open();
  memset(&h, 0, sizeof h);
  h.cache = 1;
  h.late_result_ms = 20;
  run_hello(&h, w);
  ASSERT_EQ(h.n_runs, 1);
  ASSERT_EQ(h.n_res_ok, 1);
  ASSERT_EQ(w->commits, 1);
  ASSERT_EQ(hello_history(w, 1), 1);
  w_destroy(&w->base);
}

DX_TEST(store_held_activity_of_a_lost_transaction_runs_again_and_history_holds_one_result) {
  /* the transaction that ran the whole hello is lost (DX_ERETRY at commit): its acks are
  ** refused, those the loop was told of without being applied again (their memory is the
  ** loop's: wiped here), and the retried batch runs the turn and the activity again: the
  ** activity ran twice (at least once), the history holds one result */
  static hello_t h;
  wrap_t *w = wrap_open();
  memset(&h, 0, sizeof h);
  h.cache = 1;
  w->retry_commits = 1;
  run_hello(&h, w);
  ASSERT_EQ(h.n_runs, 2);
  ASSERT_EQ(h.n_acks_refused, 2);
  ASSERT_EQ(h.n_res_refused, 1);
  ASSERT_EQ(h.n_acks_ok, 2);
  ASSERT_EQ(h.n_res_ok, 1);
  ASSERT_EQ(w->commits, 2); /* (commit calls: the lost one, then the retried batch's) */
  ASSERT_EQ(hello_history(w, 1), 1);
  w_destroy(&w->base);
}

DX_TEST(store_held_activity_whose_fetch_claimed_its_session_goes_round) {
  /* the first activity of session s1 claims it in the open transaction and goes round in it
  ** like any other (it used to wait for the claim's commit: a wave of sessions paid a commit
  ** nothing overlapped); the second, of the owned session, too: one commit in all */
  static hello_t h;
  wrap_t *w = wrap_open();
  memset(&h, 0, sizeof h);
  h.steps = 2;
  h.sid = "s1";
  run_hello(&h, w);
  ASSERT_EQ(h.n_runs, 2);
  ASSERT_EQ(h.commits_at_run[0], 0); /* inside the claim's transaction */
  ASSERT_EQ(h.commits_at_run[1], 0);
  ASSERT_EQ(w->commits, 1);
  ASSERT_EQ(hello_history(w, 2), 2);
  w_destroy(&w->base);
}

static int owner_of_s1(void *ud, const dx_session_info_t *si) {
  if (strcmp(si->session_id, "s1") == 0 && si->worker_id)
    snprintf(ud, 32, "%s", si->worker_id);
  return 0;
}

DX_TEST(store_held_claim_of_a_lost_transaction_is_claimed_again_and_history_holds_one_result) {
  /* the transaction whose fetch claimed session s1 and ran its activity is lost: the claim
  ** rolls back with everything else, the retried batch claims the session again and runs
  ** the activity again (at least once); the history holds one result and s1 is this
  ** worker's */
  static hello_t h;
  char owner[32];
  dx_error_t err;
  wrap_t *w = wrap_open();
  memset(&h, 0, sizeof h);
  h.cache = 1;
  h.sid = "s1";
  w->retry_commits = 1;
  run_hello(&h, w);
  ASSERT_EQ(h.n_runs, 2);
  ASSERT_EQ(h.n_res_refused, 1);
  ASSERT_EQ(h.n_res_ok, 1);
  ASSERT_EQ(w->commits, 2); /* (commit calls: the lost one, then the retried batch's) */
  ASSERT_EQ(hello_history(w, 1), 1);
  owner[0] = 0;
  ASSERT_OK(w->inner->methods->list_sessions(w->inner, owner_of_s1, owner, &err));
  ASSERT_STR_EQ(owner, h.sess.worker_id);
  w_destroy(&w->base);
}

/* {===== the lap: fetched items go to the loop while their transaction commits =====} */

/* The store thread's commit waits (bounded) until the loop has taken every item fetched so
** far and answered it: with the lap it has (the items were handed over before the commit),
** without it they only reach the loop after the commit, and the wait runs out. */
typedef struct {
  round_t r;    /* (first: answer_round's ud) */
  int got;      /* items the loop took and answered (atomic) */
  int gated, early; /* commits that fetched items; of them, those whose items the loop had */
} lap_t;

static void lap_gate(void *ud, int txn_fetched) {
  lap_t *l = ud;
  int k, want = __atomic_load_n(&l->r.w->fetched, __ATOMIC_SEQ_CST);
  if (!txn_fetched) return;
  l->gated++;
  for (k = 0; k < 4000 && __atomic_load_n(&l->got, __ATOMIC_SEQ_CST) < want; k++) usleep(500);
  l->early += __atomic_load_n(&l->got, __ATOMIC_SEQ_CST) >= want;
}

static void answer_lap(void *ud, dx_store_fetched_t *f) {
  lap_t *l = ud;
  answer_round(ud, f);
  __atomic_add_fetch(&l->got, (int)(f->n_orch + f->n_work), __ATOMIC_SEQ_CST);
}

DX_TEST(store_lap_hands_fetched_items_to_the_loop_before_their_commit) {
  /* 24 instances, more than a held round takes: their first turns, then the activities those
  ** schedule, then the turns the results wake are each fetched in one transaction and handed
  ** to the loop before its commit, which they no longer wait for; each batch of answers joins
  ** the next transaction (before: each was delivered with the commit, the loop idle during
  ** it) */
  static lap_t l;
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(&l, 0, sizeof l);
  l.r.w = w;
  l.r.n = LAP_N;
  l.r.answer_first = 1;
  enqueue_starts(w, "r", LAP_N);
  ASSERT_OK(uv_loop_init(&l.r.loop));
  held_cfg(&cfg, w);
  cfg.hold_work = 1;
  cfg.on_fetch = answer_lap;
  cfg.ud = &l;
  w->gate = lap_gate;
  w->gate_ud = &l;
  ASSERT_OK(dx__store_new(&l.r.s, &l.r.loop, &cfg, &err));
  dx__store_want(l.r.s, 64, 64); /* one cycle takes all 24 starts */
  for (i = 0; i < 40000 && l.r.fin_done < LAP_N; i++) {
    uv_run(&l.r.loop, UV_RUN_NOWAIT);
    usleep(250);
  }
  close_store(l.r.s, &l.r.loop);
  ASSERT_EQ(l.r.fin_done, LAP_N);
  ASSERT_EQ(l.r.fin_failed, 0);
  ASSERT_EQ(l.r.n_work, LAP_N);
  ASSERT_EQ(l.gated, 3);                /* first turns, activities, second turns */
  ASSERT_EQ(l.early, 3);                /* each at the loop before its commit */
  ASSERT_EQ(l.r.commits_at_result, 1);  /* the activities ran during the second commit */
  ASSERT_EQ(w->commits, 4);             /* and the last acks in a fourth */
  assert_four_events_completed(w, NULL, LAP_N);
  w_destroy(&w->base);
}

/* A lap whose transaction is lost: each turn completes its instance in one ack; the loop got
** the turns before the commit that was lost, ran them and answered; those acks are refused
** and the retried batch hands the turns over again. */
typedef struct {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  int got, turns, ok, refused;
} lost_lap_t;

typedef struct {
  dx_store_op_t op;
  dx_orch_ack_t ack;
  dx_event_t ev[2];
  char instance[16];
} lap_ack_t;

static void lost_lap_acked(dx_store_op_t *op) {
  lost_lap_t *l = op->ud;
  if (op->rc == 0) l->ok++;
  else l->refused++;
  free(op); /* (first member) */
}

static void lost_lap_gate(void *ud, int txn_fetched) {
  lost_lap_t *l = ud;
  int k, want = __atomic_load_n(&l->w->fetched, __ATOMIC_SEQ_CST);
  if (!txn_fetched) return;
  for (k = 0; k < 4000 && __atomic_load_n(&l->got, __ATOMIC_SEQ_CST) < want; k++) usleep(500);
}

static void answer_lost_lap(void *ud, dx_store_fetched_t *f) {
  lost_lap_t *l = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    const dx_orch_item_t *it = f->orch[i];
    lap_ack_t *a = calloc(1, sizeof *a);
    ASSERT(a);
    snprintf(a->instance, sizeof a->instance, "%s", it->instance);
    a->ev[0] = (dx_event_t){.event_id = 1, .kind = DX_EV_ORCH_STARTED, .name = "Orch",
                            .data = "1"};
    a->ev[1] = (dx_event_t){.event_id = 2, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    a->ack = (dx_orch_ack_t){.instance = a->instance, .lock_token = it->lock_token,
                             .execution_id = it->execution_id, .orchestration_name = "Orch",
                             .status = DX_STATUS_COMPLETED, .output = "1", .delta = a->ev,
                             .delta_len = 2};
    a->op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = &a->ack, .done = lost_lap_acked,
                            .ud = l};
    l->turns++;
    dx__store_submit(l->s, &a->op);
  }
  __atomic_add_fetch(&l->got, (int)f->n_orch, __ATOMIC_SEQ_CST);
}

DX_TEST(store_lap_of_a_lost_transaction_completes_each_instance_once) {
  static lost_lap_t l;
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(&l, 0, sizeof l);
  l.w = w;
  enqueue_starts(w, "q", LAP_N);
  ASSERT_OK(uv_loop_init(&l.loop));
  held_cfg(&cfg, w);
  cfg.hold_work = 1;
  cfg.on_fetch = answer_lost_lap;
  cfg.ud = &l;
  w->gate = lost_lap_gate;
  w->gate_ud = &l;
  w->retry_commits = 1; /* the first commit is lost (after the gate: the loop ran the turns) */
  ASSERT_OK(dx__store_new(&l.s, &l.loop, &cfg, &err));
  dx__store_want(l.s, 64, 0);
  for (i = 0; i < 40000 && l.ok < LAP_N; i++) {
    uv_run(&l.loop, UV_RUN_NOWAIT);
    usleep(250);
  }
  close_store(l.s, &l.loop);
  ASSERT_EQ(l.turns, 2 * LAP_N);   /* each turn ran twice: lost, then retried */
  ASSERT_EQ(l.refused, LAP_N);     /* the lost transaction's acks */
  ASSERT_EQ(l.ok, LAP_N);
  for (i = 0; i < LAP_N; i++) {
    char id[16];
    dx_event_t *ev = NULL;
    size_t n = 0;
    snprintf(id, sizeof id, "q%d", i);
    ASSERT_OK(w->inner->methods->read_history(w->inner, id, 0, &ev, &n, NULL, &err));
    ASSERT_EQ((int)n, 2); /* completed once */
    ASSERT_EQ(ev[1].kind, DX_EV_ORCH_COMPLETED);
    dx_events_free(ev, n);
  }
  w_destroy(&w->base);
}
