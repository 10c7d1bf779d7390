/*
** provider_validation.c -- provider contract tests (duroxide semantics §4, §8.3).
**
** Vtable only: every provider's test program links this file and defines the hooks of
** provider_validation.h. Time is virtual (now_ms is passed explicitly); nothing sleeps
** except the multi-process tests, which run on the wall clock with long locks.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <signal.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E; /* the last call's error detail, printed by CHECK */

/* {===== fixtures =====} */

dx_provider_t *dx_pv_fresh(void) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  free(store);
  return p;
}

static dx_provider_t *fresh(void) { return dx_pv_fresh(); }

static void done(dx_provider_t *p) { M(p)->destroy(p); }

static dx_work_item_t wi(int kind, const char *inst, uint64_t exec, uint64_t id) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = kind;
  w.instance = (char *)inst;
  w.execution_id = exec;
  w.id = id;
  return w;
}

static dx_work_item_t start_item(const char *inst) {
  dx_work_item_t w = wi(DX_WI_START, inst, 1, 0);
  w.name = "Orch";
  w.version = "1.0.0";
  w.data = "{\"x\":1}";
  return w;
}

static dx_work_item_t raise_item(const char *inst) {
  dx_work_item_t w = wi(DX_WI_EXTERNAL, inst, 0, 0);
  w.name = "go";
  w.data = "true";
  return w;
}

static dx_work_item_t act_item(const char *inst, uint64_t exec, uint64_t id) {
  dx_work_item_t w = wi(DX_WI_ACT_EXECUTE, inst, exec, id);
  w.name = "Act";
  w.data = "\"in\"";
  return w;
}

static dx_work_item_t act_done(const char *inst, uint64_t exec, uint64_t id) {
  dx_work_item_t w = wi(DX_WI_ACT_COMPLETED, inst, exec, id);
  w.data = "\"out\"";
  return w;
}

static void enqueue(dx_provider_t *p, int64_t now, dx_work_item_t w) {
  CHECK(M(p)->enqueue_for_orchestrator(p, now, &w, 0, &E));
}

static void enqueue_work(dx_provider_t *p, int64_t now, dx_work_item_t w) {
  CHECK(M(p)->enqueue_for_worker(p, now, &w, &E));
}

static dx_orch_item_t *fetch(dx_provider_t *p, int64_t now) {
  dx_orch_item_t *it = (dx_orch_item_t *)1;
  CHECK(M(p)->fetch_orchestration_item(p, now, LOCK, &it, &E));
  return it;
}

static dx_work_fetch_t wfetch(dx_provider_t *p, int64_t now) {
  dx_work_fetch_t f;
  CHECK(M(p)->fetch_work_item(p, now, LOCK, NULL, &f, &E));
  return f;
}

/* `n` events continuing the item's history: ORCH_STARTED first for a new execution. */
static const dx_event_t *delta(dx_event_t *ev, size_t n, const dx_orch_item_t *it) {
  size_t i;
  for (i = 0; i < n; i++) {
    memset(&ev[i], 0, sizeof ev[i]);
    ev[i].event_id = it->history_len + i + 1;
    ev[i].timestamp_ms = T0;
    ev[i].kind = ev[i].event_id == 1 ? DX_EV_ORCH_STARTED : DX_EV_EXT_EVENT;
    ev[i].name = ev[i].event_id == 1 ? "Orch" : "go";
    ev[i].data = "{}";
  }
  return ev;
}

/* The ack of one turn of `it` with no changes beyond the lock release. */
static dx_orch_ack_t ack_of(const dx_orch_item_t *it) {
  dx_orch_ack_t a;
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = it->orchestration_name;
  a.orchestration_version = it->orchestration_version;
  return a;
}

/* Ack `it` with `n` new events, then free it. */
static void turn(dx_provider_t *p, int64_t now, dx_orch_item_t *it, size_t n) {
  dx_event_t ev[8];
  dx_orch_ack_t a = ack_of(it);
  a.delta = delta(ev, n, it);
  a.delta_len = n;
  CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  dx_orch_item_free(it);
}

/* Start `inst` and commit its first turn at `now`. */
static void create_instance(dx_provider_t *p, int64_t now, const char *inst) {
  dx_orch_item_t *it;
  enqueue(p, now, start_item(inst));
  it = fetch(p, now);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, inst);
  turn(p, now, it, 1);
}

static dx_queue_depths_t depths(dx_provider_t *p) {
  dx_queue_depths_t d;
  CHECK(M(p)->get_queue_depths(p, &d, &E));
  return d;
}

static size_t history_len(dx_provider_t *p, const char *inst, uint64_t exec) {
  dx_event_t *ev;
  size_t n;
  CHECK(M(p)->read_history(p, inst, exec, &ev, &n, NULL, &E));
  dx_events_free(ev, n);
  return n;
}

static int64_t next_due(dx_provider_t *p, int64_t now) {
  int64_t due;
  CHECK(M(p)->next_due_ms(p, now, &due, &E));
  return due;
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* {===== orchestrator queue =====} */

/* 1 when `id` has an instance record (a first turn was acked); a queued start is found
** with status NONE and has none. */
static int has_record(dx_provider_t *p, const char *id) {
  dx_instance_info_t info;
  dx_error_t err;
  int rc = M(p)->get_instance_info(p, id, &info, &err);
  int found = rc == DX_OK && info.status != DX_STATUS_NONE;
  if (rc != DX_OK && rc != DX_ENOTFOUND) DX_FAIL_AT("get_instance_info: %s", err.msg);
  dx_instance_info_clear(&info);
  return found;
}

DX_TEST(pv_start_fetch_ack_creates_instance) {
  dx_provider_t *p = fresh();
  dx_instance_info_t info;
  dx_orch_item_t *it;
  dx_event_t *ev;
  size_t n;
  uint64_t exec = 0;
  enqueue(p, T0, start_item("i1"));
  ASSERT(!has_record(p, "i1")); /* enqueue never creates the record */
  CHECK(M(p)->get_instance_info(p, "i1", &info, &E)); /* but a queued start is found */
  ASSERT_EQ(info.status, DX_STATUS_NONE);
  dx_instance_info_clear(&info);
  it = fetch(p, T0);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "i1");
  ASSERT_STR_EQ(it->orchestration_name, "Orch");
  ASSERT_STR_EQ(it->orchestration_version, "1.0.0");
  ASSERT_EQ(it->execution_id, 1);
  ASSERT_EQ(it->history_len, 0);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_START);
  ASSERT_STR_EQ(it->messages[0].data, "{\"x\":1}");
  ASSERT_EQ(it->attempt_count, 1);
  ASSERT_NE(it->lock_token, 0);
  ASSERT_EQ(it->history_error, 0);
  turn(p, T0 + 1, it, 2);
  CHECK(M(p)->get_instance_info(p, "i1", &info, &E));
  ASSERT_STR_EQ(info.instance_id, "i1");
  ASSERT_STR_EQ(info.orchestration_name, "Orch");
  ASSERT_STR_EQ(info.orchestration_version, "1.0.0");
  ASSERT_EQ(info.current_execution_id, 1);
  ASSERT_EQ(info.status, DX_STATUS_RUNNING);
  ASSERT_EQ(info.created_at_ms, T0 + 1);
  ASSERT(info.parent_instance == NULL);
  dx_instance_info_clear(&info);
  CHECK(M(p)->read_history(p, "i1", 0, &ev, &n, &exec, &E));
  ASSERT_EQ(n, 2);
  ASSERT_EQ(exec, 1);
  ASSERT_EQ(ev[0].kind, DX_EV_ORCH_STARTED);
  ASSERT_EQ(ev[0].event_id, 1);
  ASSERT_EQ(ev[1].event_id, 2);
  ASSERT_STR_EQ(ev[1].data, "{}");
  dx_events_free(ev, n);
  ASSERT_EQ(depths(p).orchestrator, 0);
  ASSERT_EQ(depths(p).instances, 1);
  ASSERT(fetch(p, T0 + 2) == NULL);
  done(p);
}

DX_TEST(pv_empty_store_has_nothing) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f = wfetch(p, T0);
  dx_queue_depths_t d = depths(p);
  ASSERT(fetch(p, T0) == NULL);
  ASSERT_EQ(f.item.kind, 0);
  ASSERT_EQ(next_due(p, T0), INT64_MAX);
  ASSERT_EQ(d.orchestrator + d.worker + d.instances, 0);
  done(p);
}

DX_TEST(pv_instance_lock_is_exclusive) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *a, *b;
  enqueue(p, T0, start_item("A"));
  enqueue(p, T0 + 1, start_item("B"));
  a = fetch(p, T0 + 10);
  ASSERT(a);
  ASSERT_STR_EQ(a->instance, "A"); /* oldest message first */
  enqueue(p, T0 + 11, raise_item("A"));
  b = fetch(p, T0 + 12); /* A is locked although it has a new message */
  ASSERT(b);
  ASSERT_STR_EQ(b->instance, "B");
  ASSERT_NE(a->lock_token, b->lock_token);
  ASSERT(fetch(p, T0 + 13) == NULL);
  turn(p, T0 + 14, a, 1);
  turn(p, T0 + 14, b, 1);
  done(p);
}

DX_TEST(pv_messages_after_fetch_survive_ack) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  enqueue(p, T0 + 1, raise_item("A"));
  turn(p, T0 + 2, it, 1);
  ASSERT_EQ(depths(p).orchestrator, 1);
  it = fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_EXTERNAL);
  ASSERT_EQ(it->history_len, 1);
  ASSERT_EQ(it->attempt_count, 1);
  turn(p, T0 + 4, it, 1);
  ASSERT_EQ(depths(p).orchestrator, 0);
  ASSERT_EQ(history_len(p, "A", 0), 2);
  done(p);
}

DX_TEST(pv_lock_expiry_redelivers) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it, *again;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  ASSERT(fetch(p, T0 + LOCK - 1) == NULL);
  again = fetch(p, T0 + LOCK);
  ASSERT(again);
  ASSERT_STR_EQ(again->instance, "A");
  ASSERT_EQ(again->attempt_count, 2);
  ASSERT_EQ(again->messages_len, 1);
  ASSERT_NE(again->lock_token, it->lock_token);
  a = ack_of(it);
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + LOCK + 1, &a, &E), DX_ETOKEN);
  turn(p, T0 + LOCK + 1, again, 1);
  dx_orch_item_free(it);
  done(p);
}

DX_TEST(pv_renew_orchestration_lock) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  CHECK(M(p)->renew_orchestration_item_lock(p, T0 + LOCK - 1, "A", it->lock_token, LOCK, &E));
  ASSERT(fetch(p, T0 + LOCK + 10) == NULL); /* still locked: renewed */
  CHECK_ERR(M(p)->renew_orchestration_item_lock(p, T0, "A", it->lock_token + 1, LOCK, &E),
            DX_ETOKEN);
  CHECK_ERR(M(p)->renew_orchestration_item_lock(p, T0 + 2 * LOCK, "A", it->lock_token, LOCK, &E),
            DX_ELOCK);
  dx_orch_item_free(it);
  done(p);
}

DX_TEST(pv_abandon_delays_and_ignores_attempt) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  CHECK_ERR(M(p)->abandon_orchestration_item(p, T0 + 1, "A", it->lock_token + 1, 0, 0, &E),
            DX_ETOKEN);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 1, "A", it->lock_token, 1000, 0, &E));
  dx_orch_item_free(it);
  ASSERT(fetch(p, T0 + 500) == NULL);
  ASSERT_EQ(next_due(p, T0 + 500), T0 + 1001);
  it = fetch(p, T0 + 1001);
  ASSERT(it);
  ASSERT_EQ(it->attempt_count, 2);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 1002, "A", it->lock_token, 0, 1, &E));
  dx_orch_item_free(it);
  it = fetch(p, T0 + 1003); /* abandon without delay: visible at once */
  ASSERT(it);
  ASSERT_EQ(it->attempt_count, 2); /* 2, undone to 1, fetched to 2 */
  turn(p, T0 + 1004, it, 1);
  done(p);
}

DX_TEST(pv_attempt_count_is_batch_max) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  CHECK(M(p)->abandon_orchestration_item(p, T0, "A", it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  enqueue(p, T0 + 1, raise_item("A"));
  it = fetch(p, T0 + 2);
  ASSERT_EQ(it->messages_len, 2);
  ASSERT_EQ(it->messages[0].kind, DX_WI_START); /* oldest first */
  ASSERT_EQ(it->attempt_count, 2);
  turn(p, T0 + 3, it, 1);
  done(p);
}

DX_TEST(pv_ack_with_wrong_token_changes_nothing) {
  dx_provider_t *p = fresh();
  dx_instance_info_t info;
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.lock_token = it->lock_token ^ 0x5555;
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E), DX_ETOKEN);
  a.instance = "nobody";
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E), DX_ETOKEN);
  ASSERT(!has_record(p, "A"));
  CHECK_ERR(M(p)->get_instance_info(p, "nobody", &info, &E), DX_ENOTFOUND);
  ASSERT_EQ(depths(p).orchestrator, 1);
  ASSERT(fetch(p, T0 + 2) == NULL); /* the real lock is still held */
  turn(p, T0 + 3, it, 1);
  done(p);
}

DX_TEST(pv_ack_after_lock_expiry_fails) {
  dx_provider_t *p = fresh();
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + LOCK, &a, &E), DX_ELOCK);
  ASSERT_CONTAINS(E.msg, "expired");
  ASSERT(!has_record(p, "A"));
  dx_orch_item_free(it);
  it = fetch(p, T0 + LOCK);
  ASSERT(it);
  ASSERT_EQ(it->attempt_count, 2);
  turn(p, T0 + LOCK, it, 1);
  done(p);
}

DX_TEST(pv_failed_ack_is_atomic) {
  dx_provider_t *p = fresh();
  dx_event_t ev[2];
  dx_work_item_t work = act_item("A", 1, 3), child = start_item("child");
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_queue_depths_t d;
  create_instance(p, T0, "A");
  enqueue(p, T0 + 1, raise_item("A"));
  it = fetch(p, T0 + 2);
  a = ack_of(it);
  a.delta = delta(ev, 2, it);
  ev[1].event_id = 1; /* already stored: the whole ack must roll back */
  a.delta_len = 2;
  a.worker_items = &work;
  a.worker_items_len = 1;
  a.orch_items = &child;
  a.orch_items_len = 1;
  a.status = DX_STATUS_COMPLETED;
  a.output = "1";
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 3, &a, &E), DX_EEXIST);
  ASSERT_CONTAINS(E.msg, "event 1");
  ev[1].event_id = 0;
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 3, &a, &E), DX_EINVAL);
  ASSERT_EQ(history_len(p, "A", 1), 1);
  d = depths(p);
  ASSERT_EQ(d.worker, 0);
  ASSERT_EQ(d.orchestrator, 1); /* the raise, still locked; no child start */
  ASSERT(fetch(p, T0 + 4) == NULL);
  ev[1].event_id = 3;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 5, &a, &E));
  dx_orch_item_free(it);
  d = depths(p);
  ASSERT_EQ(d.worker, 1);
  ASSERT_EQ(d.orchestrator, 1); /* the child's start */
  ASSERT_EQ(history_len(p, "A", 1), 3);
  done(p);
}

DX_TEST(pv_timer_invisible_until_fire_time) {
  dx_provider_t *p = fresh();
  dx_work_item_t timer = wi(DX_WI_TIMER_FIRED, "A", 1, 2);
  dx_event_t ev[2];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 2, it);
  ev[1].kind = DX_EV_TIMER_CREATED;
  ev[1].fire_at_ms = T0 + 60000;
  a.delta_len = 2;
  timer.fire_at_ms = T0 + 60000;
  a.orch_items = &timer;
  a.orch_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  ASSERT(fetch(p, T0 + 59999) == NULL);
  ASSERT_EQ(next_due(p, T0 + 1), T0 + 60000);
  it = fetch(p, T0 + 60000);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_TIMER_FIRED);
  ASSERT_EQ(it->messages[0].fire_at_ms, T0 + 60000);
  ASSERT_EQ(it->messages[0].id, 2);
  ASSERT_EQ(it->history_len, 2);
  turn(p, T0 + 60001, it, 1);
  done(p);
}

DX_TEST(pv_enqueue_delay_and_limits) {
  dx_provider_t *p = fresh();
  dx_work_item_t w = start_item("A");
  size_t big = DX_MAX_PAYLOAD_BYTES + 1;
  char *data = malloc(big + 3);
  CHECK(M(p)->enqueue_for_orchestrator(p, T0, &w, 5000, &E));
  ASSERT(fetch(p, T0 + 4999) == NULL);
  ASSERT_EQ(next_due(p, T0), T0 + 5000);
  dx_orch_item_free(fetch(p, T0 + 5000));
  data[0] = '"';
  memset(data + 1, 'a', big);
  strcpy(data + 1 + big, "\"");
  w.data = data;
  w.instance = "B";
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_ETOOBIG);
  ASSERT_CONTAINS(E.msg, "limit");
  w.data = NULL;
  w.instance = "";
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EINVAL);
  w.instance = "B";
  w.kind = 0;
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EINVAL);
  free(data);
  ASSERT_EQ(depths(p).orchestrator, 1);
  done(p);
}

/* The contract's uniqueness rule: a START for an id that is queued or exists is DX_EEXIST,
** writes nothing, and leaves a batch usable (the client relies on it instead of reading). */
DX_TEST(pv_start_of_a_taken_id_is_eexist) {
  dx_provider_t *p = fresh();
  dx_work_item_t w = start_item("A");
  enqueue(p, T0, w);
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EEXIST); /* start queued */
  ASSERT_CONTAINS(E.msg, "'A'");
  ASSERT_EQ(depths(p).orchestrator, 1);
  CHECK(M(p)->begin(p, &E));
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EEXIST);
  enqueue(p, T0, start_item("B"));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(depths(p).orchestrator, 2);
  dx_orch_item_free(fetch(p, T0 + 1)); /* A and B are taken by a worker */
  dx_orch_item_free(fetch(p, T0 + 1));
  create_instance(p, T0 + 2, "C");
  w.instance = "C";
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0 + 3, &w, 0, &E), DX_EEXIST);
  enqueue(p, T0 + 3, raise_item("C")); /* other messages to a taken id are fine */
  done(p);
}

DX_TEST(pv_orphan_messages_do_not_block_the_queue) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it;
  enqueue(p, T0, raise_item("ghost")); /* never started */
  enqueue(p, T0 + 1, start_item("real"));
  it = fetch(p, T0 + 2);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "real");
  ASSERT_EQ(depths(p).orchestrator, 1); /* the ghost's raise was dropped */
  ASSERT(fetch(p, T0 + 3) == NULL);
  turn(p, T0 + 4, it, 1);
  done(p);
}

/* A start handed back with a delay (a worker without the orchestration) is not an orphan:
** an event and a cancel sent meanwhile wait for it and come in its first batch (issue 7.1). */
DX_TEST(pv_messages_wait_for_a_start_handed_back) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it;
  dx_work_item_t cancel = wi(DX_WI_CANCEL, "A", 0, 0);
  cancel.data = "stop";
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 1, "A", it->lock_token, 1000, 0, &E));
  dx_orch_item_free(it);
  enqueue(p, T0 + 2, raise_item("A"));
  enqueue(p, T0 + 3, cancel);
  ASSERT(fetch(p, T0 + 4) == NULL); /* nothing to hand out before the start is visible */
  ASSERT_EQ(depths(p).orchestrator, 3); /* ... and nothing was dropped */
  ASSERT_EQ(next_due(p, T0 + 4), T0 + 1001);
  ASSERT(fetch(p, T0 + 500) == NULL);
  it = fetch(p, T0 + 1001);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 3);
  ASSERT_EQ(it->messages[0].kind, DX_WI_START);
  ASSERT_EQ(it->messages[1].kind, DX_WI_EXTERNAL);
  ASSERT_EQ(it->messages[2].kind, DX_WI_CANCEL);
  turn(p, T0 + 1002, it, 1);
  ASSERT_EQ(depths(p).orchestrator, 0);
  done(p);
}

DX_TEST(pv_sub_orchestration_completion_routes_to_parent) {
  dx_provider_t *p = fresh();
  dx_work_item_t start = start_item("P::sub::2"), reply = wi(DX_WI_SUB_COMPLETED, "P", 1, 2);
  dx_instance_info_t info;
  dx_event_t ev[2];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("P"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 2, it);
  ev[1].kind = DX_EV_SUB_SCHEDULED;
  ev[1].instance = "P::sub::2";
  a.delta_len = 2;
  start.parent_instance = "P";
  start.parent_id = 2;
  start.parent_execution_id = 1;
  a.orch_items = &start;
  a.orch_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E));
  dx_orch_item_free(it);

  it = fetch(p, T0 + 2);
  ASSERT_STR_EQ(it->instance, "P::sub::2");
  ASSERT_STR_EQ(it->messages[0].parent_instance, "P");
  a = ack_of(it);
  a.delta = delta(ev, 2, it);
  ev[1].kind = DX_EV_ORCH_COMPLETED;
  ev[1].data = "42";
  a.delta_len = 2;
  a.status = DX_STATUS_COMPLETED;
  a.output = "42";
  a.parent_instance = "P";
  reply.data = "42";
  a.orch_items = &reply;
  a.orch_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 3, &a, &E));
  dx_orch_item_free(it);

  it = fetch(p, T0 + 4);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "P");
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_SUB_COMPLETED);
  ASSERT_EQ(it->messages[0].id, 2);
  ASSERT_STR_EQ(it->messages[0].data, "42");
  turn(p, T0 + 5, it, 1);
  CHECK(M(p)->get_instance_info(p, "P::sub::2", &info, &E));
  ASSERT_STR_EQ(info.parent_instance, "P");
  ASSERT_EQ(info.status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "42");
  dx_instance_info_clear(&info);
  done(p);
}

DX_TEST(pv_continue_as_new_starts_execution_2) {
  dx_provider_t *p = fresh();
  dx_work_item_t can = wi(DX_WI_CAN, "A", 1, 0);
  dx_instance_info_t info;
  dx_event_t ev[2], *hist;
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  size_t n;
  uint64_t exec;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 2, it);
  ev[1].kind = DX_EV_ORCH_CAN;
  a.delta_len = 2;
  a.status = DX_STATUS_CONTINUED_AS_NEW;
  a.output = "{\"n\":2}";
  can.name = "Orch";
  can.version = "2.0.0";
  can.data = "{\"n\":2}";
  a.orch_items = &can;
  a.orch_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E));
  dx_orch_item_free(it);

  it = fetch(p, T0 + 2);
  ASSERT_EQ(it->messages[0].kind, DX_WI_CAN);
  ASSERT_EQ(it->execution_id, 1); /* the runtime starts execution 2 in this turn */
  ASSERT_EQ(it->history_len, 2);
  a = ack_of(it);
  a.execution_id = 2;
  a.orchestration_version = "2.0.0";
  memset(ev, 0, sizeof ev);
  ev[0].kind = DX_EV_ORCH_STARTED;
  ev[0].event_id = 1;
  a.delta = ev;
  a.delta_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 3, &a, &E));
  dx_orch_item_free(it);

  CHECK(M(p)->read_history(p, "A", 0, &hist, &n, &exec, &E));
  ASSERT_EQ(exec, 2);
  ASSERT_EQ(n, 1);
  dx_events_free(hist, n);
  ASSERT_EQ(history_len(p, "A", 1), 2);
  CHECK(M(p)->get_instance_info(p, "A", &info, &E));
  ASSERT_EQ(info.current_execution_id, 2);
  ASSERT_EQ(info.status, DX_STATUS_RUNNING);
  ASSERT_STR_EQ(info.orchestration_version, "2.0.0");
  dx_instance_info_clear(&info);
  done(p);
}

/* {===== worker queue =====} */

DX_TEST(pv_worker_fetch_and_ack) {
  dx_provider_t *p = fresh();
  dx_work_item_t done_item = act_done("A", 1, 5);
  dx_work_fetch_t f, none;
  enqueue_work(p, T0, act_item("A", 1, 5));
  f = wfetch(p, T0);
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  ASSERT_STR_EQ(f.item.instance, "A");
  ASSERT_EQ(f.item.id, 5);
  ASSERT_STR_EQ(f.item.data, "\"in\"");
  ASSERT_EQ(f.attempt_count, 1);
  ASSERT_NE(f.lock_token, 0);
  none = wfetch(p, T0 + 1);
  ASSERT_EQ(none.item.kind, 0);
  ASSERT_EQ(depths(p).worker, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, &done_item, &E));
  ASSERT_EQ(depths(p).worker, 0);
  ASSERT_EQ(depths(p).orchestrator, 1);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 3, f.lock_token, NULL, &E), DX_ELOCK);
  dx_work_item_clear(&f.item);
  done(p);
}

DX_TEST(pv_worker_ack_enqueues_completion) {
  dx_provider_t *p = fresh();
  dx_work_item_t done_item = act_done("A", 1, 2);
  dx_event_t ev[2];
  dx_work_item_t work = act_item("A", 1, 2);
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 2, it);
  ev[1].kind = DX_EV_ACT_SCHEDULED;
  a.delta_len = 2;
  a.worker_items = &work;
  a.worker_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  ASSERT(fetch(p, T0 + 1) == NULL);
  f = wfetch(p, T0 + 1);
  ASSERT_EQ(f.item.id, 2);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, &done_item, &E));
  dx_work_item_clear(&f.item);
  it = fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  ASSERT_STR_EQ(it->messages[0].data, "\"out\"");
  turn(p, T0 + 4, it, 1);
  done(p);
}

DX_TEST(pv_worker_fifo_order) {
  dx_provider_t *p = fresh();
  uint64_t id;
  for (id = 1; id <= 3; id++) enqueue_work(p, T0, act_item("A", 1, id));
  for (id = 1; id <= 3; id++) {
    dx_work_fetch_t f = wfetch(p, T0);
    ASSERT_EQ(f.item.id, id);
    dx_work_item_clear(&f.item);
  }
  done(p);
}

DX_TEST(pv_worker_abandon_and_renew) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f, g;
  enqueue_work(p, T0, act_item("A", 1, 1));
  f = wfetch(p, T0);
  CHECK(M(p)->renew_work_item_lock(p, T0 + LOCK - 1, f.lock_token, LOCK, &E));
  g = wfetch(p, T0 + LOCK + 10); /* renewed: not redelivered */
  ASSERT_EQ(g.item.kind, 0);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0, f.lock_token + 1, LOCK, &E), DX_ELOCK);
  CHECK_ERR(M(p)->abandon_work_item(p, T0, f.lock_token + 1, 0, 0, &E), DX_ELOCK);
  CHECK(M(p)->abandon_work_item(p, T0 + 100, f.lock_token, 1000, 0, &E));
  dx_work_item_clear(&f.item);
  g = wfetch(p, T0 + 1099);
  ASSERT_EQ(g.item.kind, 0);
  f = wfetch(p, T0 + 1100);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(f.attempt_count, 2);
  CHECK(M(p)->abandon_work_item(p, T0 + 1101, f.lock_token, 0, 1, &E));
  dx_work_item_clear(&f.item);
  f = wfetch(p, T0 + 1101);
  ASSERT_EQ(f.attempt_count, 2); /* 2, undone to 1, fetched to 2 */
  CHECK(M(p)->ack_work_item(p, T0 + 1102, f.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  ASSERT_EQ(depths(p).worker, 0);
  ASSERT_EQ(depths(p).orchestrator, 0);
  done(p);
}

DX_TEST(pv_worker_lock_expiry) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f, g;
  enqueue_work(p, T0, act_item("A", 1, 1));
  f = wfetch(p, T0);
  g = wfetch(p, T0 + LOCK - 1);
  ASSERT_EQ(g.item.kind, 0);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + LOCK, f.lock_token, LOCK, &E), DX_ELOCK);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + LOCK, f.lock_token, NULL, &E), DX_ELOCK);
  g = wfetch(p, T0 + LOCK);
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  ASSERT_NE(g.lock_token, f.lock_token);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + LOCK + 1, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + LOCK + 1, g.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  dx_work_item_clear(&g.item);
  done(p);
}

DX_TEST(pv_lock_stealing_cancels_worker_rows) {
  dx_provider_t *p = fresh();
  dx_work_item_t work[2] = {act_item("A", 1, 2), act_item("A", 1, 3)}, late = act_item("A", 1, 7);
  dx_activity_ref_t refs[3] = {{"A", 1, 2}, {"A", 1, 99}, {"A", 1, 7}};
  dx_event_t ev[3];
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 3, it);
  a.delta_len = 3;
  a.worker_items = work;
  a.worker_items_len = 2;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  f = wfetch(p, T0 + 1);
  ASSERT_EQ(f.item.id, 2);

  /* next turn cancels activity 2 (locked), 99 (missing) and 7 (inserted by this same ack) */
  enqueue(p, T0 + 2, raise_item("A"));
  it = fetch(p, T0 + 3);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = &late;
  a.worker_items_len = 1;
  a.cancelled = refs;
  a.cancelled_len = 3;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 4, &a, &E));
  dx_orch_item_free(it);
  ASSERT_EQ(depths(p).worker, 1); /* only activity 3 is left */
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + 5, f.lock_token, LOCK, &E), DX_ELOCK);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 5, f.lock_token, NULL, &E), DX_ELOCK);
  dx_work_item_clear(&f.item);
  f = wfetch(p, T0 + 6);
  ASSERT_EQ(f.item.id, 3);
  dx_work_item_clear(&f.item);
  done(p);
}

DX_TEST(pv_session_rows_need_a_session_config) {
  dx_provider_t *p = fresh();
  dx_session_cfg_t cfg = {.worker_id = "worker-1", .session_lock_ms = LOCK, .max_sessions = 10};
  dx_work_item_t s = act_item("A", 1, 1);
  dx_work_fetch_t f;
  s.session_id = "s1";
  enqueue_work(p, T0, s);
  enqueue_work(p, T0 + 1, act_item("A", 1, 2));
  f = wfetch(p, T0 + 2);
  ASSERT_EQ(f.item.id, 2); /* the older session row is skipped */
  dx_work_item_clear(&f.item);
  f = wfetch(p, T0 + 2);
  ASSERT_EQ(f.item.kind, 0);
  /* next_due_ms counts session rows too (a poll may then find nothing it may take) */
  ASSERT_EQ(next_due(p, T0 + 2), T0);
  CHECK(M(p)->fetch_work_item(p, T0 + 2, LOCK, &cfg, &f, &E));
  ASSERT_EQ(f.item.id, 1);
  ASSERT_STR_EQ(f.item.session_id, "s1");
  dx_work_item_clear(&f.item);
  done(p);
}

/* {===== reads and management =====} */

DX_TEST(pv_reads_of_unknown_instances) {
  dx_provider_t *p = fresh();
  dx_instance_info_t info;
  dx_event_t *ev = NULL;
  size_t n = 7;
  CHECK_ERR(M(p)->read_history(p, "nope", 0, &ev, &n, NULL, &E), DX_ENOTFOUND);
  ASSERT_CONTAINS(E.msg, "nope");
  ASSERT(ev == NULL);
  ASSERT_EQ(n, 0);
  CHECK_ERR(M(p)->get_instance_info(p, "nope", &info, &E), DX_ENOTFOUND);
  done(p);
}

DX_TEST(pv_append_with_execution) {
  dx_provider_t *p = fresh();
  dx_event_t ev[2];
  dx_orch_item_t fake;
  memset(&fake, 0, sizeof fake);
  delta(ev, 2, &fake);
  CHECK(M(p)->append_with_execution(p, "X", 1, ev, 2, &E));
  ASSERT_EQ(history_len(p, "X", 0), 2);
  CHECK_ERR(M(p)->append_with_execution(p, "X", 1, ev + 1, 1, &E), DX_EEXIST);
  ev[0].event_id = 0;
  CHECK_ERR(M(p)->append_with_execution(p, "X", 1, ev, 1, &E), DX_EINVAL);
  ASSERT_EQ(history_len(p, "X", 1), 2);
  done(p);
}

DX_TEST(pv_instance_info_status_and_custom_status) {
  dx_provider_t *p = fresh();
  dx_failure_t fail = {DX_CAT_APPLICATION, "OrchestrationFailed", "boom", 0};
  dx_instance_info_t info;
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.custom_status_set = 1;
  a.custom_status = "\"busy\"";
  CHECK(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E));
  dx_orch_item_free(it);
  CHECK(M(p)->get_instance_info(p, "A", &info, &E));
  ASSERT_STR_EQ(info.custom_status, "\"busy\"");
  ASSERT_EQ(info.custom_status_version, 1);
  ASSERT_EQ(info.status, DX_STATUS_RUNNING);
  dx_instance_info_clear(&info);

  enqueue(p, T0 + 2, raise_item("A")); /* a turn that leaves custom status alone */
  turn(p, T0 + 3, fetch(p, T0 + 3), 1);
  CHECK(M(p)->get_instance_info(p, "A", &info, &E));
  ASSERT_STR_EQ(info.custom_status, "\"busy\"");
  ASSERT_EQ(info.custom_status_version, 1);
  ASSERT_EQ(info.updated_at_ms, T0 + 3);
  dx_instance_info_clear(&info);

  enqueue(p, T0 + 4, raise_item("A"));
  it = fetch(p, T0 + 5);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.status = DX_STATUS_FAILED;
  a.failure = &fail;
  a.custom_status_set = 1;
  a.custom_status = NULL;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 6, &a, &E));
  dx_orch_item_free(it);
  CHECK(M(p)->get_instance_info(p, "A", &info, &E));
  ASSERT_EQ(info.status, DX_STATUS_FAILED);
  ASSERT_EQ(info.failure.category, DX_CAT_APPLICATION);
  ASSERT_STR_EQ(info.failure.kind, "OrchestrationFailed");
  ASSERT_STR_EQ(info.failure.message, "boom");
  ASSERT(info.custom_status == NULL);
  ASSERT_EQ(info.custom_status_version, 2);
  ASSERT_EQ(info.created_at_ms, T0 + 1);
  dx_instance_info_clear(&info);
  done(p);
}

/* Free text that is not UTF-8 (a Lua error(string.char(255))) commits on every store: kept
** as given or with each bad byte replaced by U+FFFD (PostgreSQL's text refuses the bytes). */
static int text_kept(const char *got, const char *given, const char *fixed) {
  return got && (strcmp(got, given) == 0 || strcmp(got, fixed) == 0);
}

DX_TEST(pv_text_not_utf8_commits_and_reads_back) {
  dx_provider_t *p = fresh();
  dx_failure_t fail = {DX_CAT_APPLICATION, "Kind\xfe", "bad \xff end", 0};
  dx_instance_info_t info;
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.status = DX_STATUS_FAILED;
  a.failure = &fail;
  a.custom_status_set = 1;
  a.custom_status = "\"s\xff\"";
  CHECK(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E));
  dx_orch_item_free(it);
  CHECK(M(p)->get_instance_info(p, "A", &info, &E));
  ASSERT_EQ(info.status, DX_STATUS_FAILED);
  ASSERT(text_kept(info.failure.message, "bad \xff end", "bad \xef\xbf\xbd end"));
  ASSERT(text_kept(info.failure.kind, "Kind\xfe", "Kind\xef\xbf\xbd"));
  ASSERT(text_kept(info.custom_status, "\"s\xff\"", "\"s\xef\xbf\xbd\""));
  dx_instance_info_clear(&info);
  done(p);
}

/* Identifiers that are not UTF-8 are refused by every store with the same message: replacing
** bytes would make two ids one. Nothing is written. */
DX_TEST(pv_ids_not_utf8_are_refused) {
  dx_provider_t *p = fresh();
  dx_work_item_t w = start_item("i\xff");
  dx_instance_info_t info;
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EINVAL);
  ASSERT_STR_EQ(E.msg, "instance id is not valid UTF-8 (byte 2 is 0xff)");
  w = start_item("ok");
  w.session_id = "s\xc3";
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EINVAL);
  ASSERT_STR_EQ(E.msg, "session id is not valid UTF-8 (byte 2 is 0xc3)");
  CHECK_ERR(M(p)->get_instance_info(p, "ok", &info, &E), DX_ENOTFOUND);
  /* looked up, such an id names no instance (PostgreSQL would refuse the parameter) */
  CHECK_ERR(M(p)->get_instance_info(p, "i\xff", &info, &E), DX_ENOTFOUND);
  done(p);
}

typedef struct {
  char ids[8][16];
  int n, stop_after;
} list_acc_t;

static int list_cb(void *ud, const char *id) {
  list_acc_t *l = ud;
  snprintf(l->ids[l->n++], sizeof l->ids[0], "%s", id);
  return l->n == l->stop_after;
}

DX_TEST(pv_list_instances_newest_first) {
  dx_provider_t *p = fresh();
  list_acc_t l;
  create_instance(p, T0 + 20, "b");
  create_instance(p, T0 + 10, "a"); /* created earlier on the virtual clock */
  create_instance(p, T0 + 30, "c");
  enqueue(p, T0 + 40, start_item("pending")); /* not an instance until acked */
  memset(&l, 0, sizeof l);
  CHECK(M(p)->list_instances(p, list_cb, &l, &E));
  ASSERT_EQ(l.n, 3);
  ASSERT_STR_EQ(l.ids[0], "c");
  ASSERT_STR_EQ(l.ids[1], "b");
  ASSERT_STR_EQ(l.ids[2], "a");
  memset(&l, 0, sizeof l);
  l.stop_after = 1;
  CHECK(M(p)->list_instances(p, list_cb, &l, &E));
  ASSERT_EQ(l.n, 1);
  done(p);
}

DX_TEST(pv_queue_depths) {
  dx_provider_t *p = fresh();
  dx_queue_depths_t d;
  dx_orch_item_t *it;
  create_instance(p, T0, "A");
  enqueue(p, T0, raise_item("A"));
  enqueue(p, T0, start_item("B"));
  enqueue_work(p, T0, act_item("A", 1, 1));
  enqueue_work(p, T0, act_item("A", 1, 2));
  it = fetch(p, T0 + 1); /* locked messages still count */
  d = depths(p);
  ASSERT_EQ(d.orchestrator, 2);
  ASSERT_EQ(d.worker, 2);
  ASSERT_EQ(d.instances, 1);
  dx_orch_item_free(it);
  done(p);
}

DX_TEST(pv_next_due_ms) {
  dx_provider_t *p = fresh();
  dx_work_item_t t = wi(DX_WI_TIMER_FIRED, "A", 1, 2);
  dx_work_fetch_t f;
  ASSERT_EQ(next_due(p, T0), INT64_MAX);
  create_instance(p, T0, "A");
  t.fire_at_ms = T0 + 5000;
  enqueue(p, T0, t);
  ASSERT_EQ(next_due(p, T0), T0 + 5000);
  enqueue_work(p, T0 + 10, act_item("A", 1, 1));
  ASSERT_EQ(next_due(p, T0 + 10), T0 + 10);
  f = wfetch(p, T0 + 10);
  /* the timer (the worker lock expires later); a provider with liveness may look sooner (the
  ** lock's holder may die) */
  ASSERT(next_due(p, T0 + 10) > T0 + 10 && next_due(p, T0 + 10) <= T0 + 5000);
  CHECK(M(p)->ack_work_item(p, T0 + 11, f.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  dx_orch_item_free(fetch(p, T0 + 5000));
  /* the instance lock; a provider with liveness may look sooner (its holder may die) */
  ASSERT(next_due(p, T0 + 5000) > T0 + 5000 && next_due(p, T0 + 5000) <= T0 + 5000 + LOCK);
  done(p);
}

/* {===== group commit =====} */

static void *read_info_thread(void *arg) {
  return (void *)(intptr_t)has_record(arg, "A");
}

DX_TEST(pv_group_commit_batches_acks) {
  dx_provider_t *p = fresh();
  const char *names[3] = {"A", "B", "C"};
  dx_orch_item_t *it[3], *bad;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  pthread_t th;
  void *res;
  int i;
  for (i = 0; i < 3; i++) enqueue(p, T0 + i, start_item(names[i]));
  for (i = 0; i < 3; i++) ASSERT((it[i] = fetch(p, T0 + 10)) != NULL);
  CHECK(M(p)->begin(p, &E));
  CHECK_ERR(M(p)->begin(p, &E), DX_ESTATE);
  turn(p, T0 + 20, it[0], 1);
  bad = it[1];
  a = ack_of(bad);
  a.lock_token ^= 1;
  a.delta = delta(ev, 1, bad);
  a.delta_len = 1;
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 20, &a, &E), DX_ETOKEN); /* batch stays usable */
  turn(p, T0 + 20, it[2], 1);
  enqueue(p, T0 + 21, raise_item("A"));
  ASSERT_EQ(depths(p).instances, 2); /* reads in the batch see its writes */
  pthread_create(&th, NULL, read_info_thread, p);
  pthread_join(th, &res);
  ASSERT_EQ((intptr_t)res, 0); /* other threads do not, until commit */
  CHECK(M(p)->commit(p, 1, &E));
  CHECK_ERR(M(p)->commit(p, 1, &E), DX_ESTATE);
  ASSERT_EQ(depths(p).instances, 2);
  ASSERT_EQ(history_len(p, "A", 1), 1);
  ASSERT_EQ(history_len(p, "C", 1), 1);
  pthread_create(&th, NULL, read_info_thread, p);
  pthread_join(th, &res);
  ASSERT_EQ((intptr_t)res, 1); /* committed: visible to everyone */
  CHECK(M(p)->begin(p, &E)); /* sync=0 commit */
  turn(p, T0 + 22, bad, 1);
  CHECK(M(p)->commit(p, 0, &E));
  ASSERT_EQ(depths(p).instances, 3);
  ASSERT_EQ(depths(p).orchestrator, 1); /* A's raise */
  done(p);
}

/* What falls due while a batch is open is fetched in it: a lapsed lock, a row abandoned in
** the batch, a delayed message whose time came (LMDB remembers for the batch how early the
** next due entry of each queue index can be; it must follow the batch's clock and writes). */
static void fclear(dx_work_fetch_t *f);

DX_TEST(pv_items_falling_due_within_a_batch_are_fetched_in_it) {
  dx_provider_t *p = fresh();
  dx_work_item_t start = start_item("O");
  dx_work_fetch_t f, g;
  dx_orch_item_t *it;
  enqueue_work(p, T0, act_item("A", 1, 1));
  f = wfetch(p, T0); /* locked until T0 + LOCK */
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->enqueue_for_orchestrator(p, T0, &start, 100, &E)); /* due at T0 + 100 */
  CHECK(M(p)->begin(p, &E));
  g = wfetch(p, T0 + 1);
  ASSERT_EQ(g.item.kind, 0);
  it = fetch(p, T0 + 1);
  ASSERT(!it);
  it = fetch(p, T0 + 100);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "O");
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 100, "O", it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  it = fetch(p, T0 + 100); /* released at once: ready again */
  ASSERT(it);
  dx_orch_item_free(it);
  g = wfetch(p, T0 + LOCK); /* the lock lapsed */
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  CHECK(M(p)->abandon_work_item(p, T0 + LOCK, g.lock_token, 0, 0, &E));
  fclear(&g);
  g = wfetch(p, T0 + LOCK); /* abandoned: ready again at once */
  ASSERT_EQ(g.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + LOCK, g.lock_token, NULL, &E));
  fclear(&g);
  CHECK(M(p)->commit(p, 1, &E));
  g = wfetch(p, T0 + 2 * LOCK);
  ASSERT_EQ(g.item.kind, 0);
  fclear(&f);
  done(p);
}

/* Activities a turn schedules and the same batch fetches (the store cycle: acks, then work
** fetches, one commit): FIFO with rows queued before the batch, acked in the batch by their
** token, the rest fetched after the commit; a later turn of the batch cancels one it has not
** handed out; methods of the batch (depths) see the queued rows. */
DX_TEST(pv_work_scheduled_and_fetched_in_one_batch) {
  dx_provider_t *p = fresh();
  dx_work_item_t acts[4], more[1];
  dx_activity_ref_t cancel;
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[2];
  dx_work_fetch_t f[5];
  int i;
  enqueue(p, T0, start_item("A"));
  enqueue_work(p, T0, act_item("old", 1, 1));
  it = fetch(p, T0 + 1);
  ASSERT(it);
  enqueue(p, T0 + 1, raise_item("A")); /* waits behind the lock: A's next turn */
  for (i = 0; i < 4; i++) acts[i] = act_item("A", 1, (uint64_t)i + 1);
  CHECK(M(p)->begin(p, &E));
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = acts;
  a.worker_items_len = 4;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 2, &a, &E));
  dx_orch_item_free(it);
  f[0] = wfetch(p, T0 + 3);
  ASSERT_STR_EQ(f[0].item.instance, "old"); /* queued first, taken first */
  f[1] = wfetch(p, T0 + 3);
  ASSERT_STR_EQ(f[1].item.instance, "A");
  ASSERT_EQ(f[1].item.id, 1);
  ASSERT_EQ(f[1].attempt_count, 1);
  ASSERT_STR_EQ(f[1].item.name, "Act");
  CHECK(M(p)->ack_work_item(p, T0 + 4, f[1].lock_token, NULL, &E)); /* acked in the batch */
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 4, f[1].lock_token, NULL, &E), DX_ELOCK);
  f[2] = wfetch(p, T0 + 4);
  ASSERT_EQ(f[2].item.id, 2);
  /* the instance's next turn in the same batch withdraws activity 4 */
  it = fetch(p, T0 + 6);
  ASSERT(it);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  cancel.instance = "A";
  cancel.execution_id = 1;
  cancel.activity_id = 4;
  a.cancelled = &cancel;
  a.cancelled_len = 1;
  more[0] = act_item("A", 1, 5);
  a.worker_items = more;
  a.worker_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 7, &a, &E));
  dx_orch_item_free(it);
  ASSERT_EQ(depths(p).worker, 4); /* old, A#2 (locked), A#3, A#5; A#1 acked, A#4 withdrawn */
  CHECK(M(p)->commit(p, 1, &E));
  f[3] = wfetch(p, T0 + 8);
  ASSERT_EQ(f[3].item.id, 3);
  ASSERT_EQ(f[3].attempt_count, 1);
  f[4] = wfetch(p, T0 + 8);
  ASSERT_EQ(f[4].item.id, 5);
  ASSERT(wfetch(p, T0 + 8).item.kind == 0); /* 4 is gone */
  for (i = 0; i < 5; i++) {
    if (i != 1) CHECK(M(p)->ack_work_item(p, T0 + 9, f[i].lock_token, NULL, &E));
    dx_work_item_clear(&f[i].item);
  }
  ASSERT_EQ(depths(p).worker, 0);
  done(p);
}

/* A rolled-back batch takes its queued activities with it, fetched or not. */
DX_TEST(pv_rollback_drops_work_scheduled_in_the_batch) {
  dx_provider_t *p = fresh();
  dx_work_item_t acts[2];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_work_fetch_t f;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0 + 1);
  ASSERT(it);
  acts[0] = act_item("A", 1, 1);
  acts[1] = act_item("A", 1, 2);
  CHECK(M(p)->begin(p, &E));
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = acts;
  a.worker_items_len = 2;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 2, &a, &E));
  f = wfetch(p, T0 + 3);
  ASSERT_EQ(f.item.id, 1);
  dx_work_item_clear(&f.item);
  M(p)->rollback(p);
  ASSERT(wfetch(p, T0 + 4).item.kind == 0);
  ASSERT_EQ(depths(p).worker, 0);
  CHECK(M(p)->ack_orchestration_item(p, T0 + 5, &a, &E)); /* the lock is still held */
  dx_orch_item_free(it);
  f = wfetch(p, T0 + 6);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 7, f.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  done(p);
}

/* An activity's result for an idle instance and the turn it unblocks in one batch (the store
** cycle: acks, then fetches): ready-time order with instances made ready before the batch,
** seen by other methods of the batch, fetched after the commit when the batch did not take
** it, and gone with a rollback. */
DX_TEST(pv_instance_made_ready_and_fetched_in_one_batch) {
  dx_provider_t *p = fresh();
  const char *names[3] = {"A", "C", "D"};
  dx_work_fetch_t f[3];
  dx_work_item_t done_item;
  dx_orch_item_t *it;
  int i;
  create_instance(p, T0, "B");
  for (i = 0; i < 3; i++) {
    create_instance(p, T0, names[i]);
    enqueue_work(p, T0, act_item(names[i], 1, 1));
    f[i] = wfetch(p, T0);
    ASSERT_STR_EQ(f[i].item.instance, names[i]);
  }
  enqueue(p, T0 + 1, raise_item("B"));
  CHECK(M(p)->begin(p, &E));
  done_item = act_done("A", 1, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f[0].lock_token, &done_item, &E));
  done_item = act_done("C", 1, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 3, f[1].lock_token, &done_item, &E));
  it = fetch(p, T0 + 4);
  ASSERT(it && strcmp(it->instance, "B") == 0); /* ready first */
  turn(p, T0 + 4, it, 1);
  it = fetch(p, T0 + 4);
  ASSERT(it && strcmp(it->instance, "A") == 0);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  ASSERT_EQ(it->attempt_count, 1);
  ASSERT_EQ(it->history_len, 1);
  turn(p, T0 + 5, it, 1); /* unblocked turn acked in the same batch */
  ASSERT_EQ(depths(p).orchestrator, 1); /* C's result, seen by a read in the batch */
  CHECK(M(p)->commit(p, 1, &E));
  it = fetch(p, T0 + 6);
  ASSERT(it && strcmp(it->instance, "C") == 0);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  turn(p, T0 + 6, it, 1);
  ASSERT(fetch(p, T0 + 7) == NULL);
  ASSERT_EQ(history_len(p, "A", 1), 2);
  ASSERT_EQ(history_len(p, "C", 1), 2);
  /* a rolled-back batch takes the result and the readiness with it */
  CHECK(M(p)->begin(p, &E));
  done_item = act_done("D", 1, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 8, f[2].lock_token, &done_item, &E));
  it = fetch(p, T0 + 9);
  ASSERT(it && strcmp(it->instance, "D") == 0);
  dx_orch_item_free(it);
  M(p)->rollback(p);
  ASSERT(fetch(p, T0 + 10) == NULL);
  ASSERT_EQ(depths(p).orchestrator, 0);
  CHECK(M(p)->ack_work_item(p, T0 + 11, f[2].lock_token, &done_item, &E)); /* still locked */
  it = fetch(p, T0 + 12);
  ASSERT(it && strcmp(it->instance, "D") == 0);
  ASSERT_EQ(it->attempt_count, 1);
  turn(p, T0 + 12, it, 1);
  for (i = 0; i < 3; i++) dx_work_item_clear(&f[i].item);
  done(p);
}

DX_TEST(pv_group_commit_rollback) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it, *again;
  enqueue(p, T0, start_item("A"));
  CHECK(M(p)->begin(p, &E));
  it = fetch(p, T0);
  ASSERT(it);
  turn(p, T0 + 1, it, 1);
  M(p)->rollback(p); /* undoes the fetch's lock and the ack */
  ASSERT(!has_record(p, "A"));
  again = fetch(p, T0 + 2);
  ASSERT(again);
  ASSERT_EQ(again->attempt_count, 1);
  turn(p, T0 + 3, again, 1);
  M(p)->rollback(p); /* no batch: nothing happens */
  ASSERT_EQ(depths(p).instances, 1);
  done(p);
}

/* {===== scale and corruption =====} */

DX_TEST(pv_fetch_skips_thousands_of_locked_and_delayed_rows) {
  dx_provider_t *p = fresh();
  enum { N = 5000 };
  char inst[32];
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  int i;
  CHECK(M(p)->begin(p, &E));
  for (i = 0; i < N; i++) {
    dx_work_item_t t;
    snprintf(inst, sizeof inst, "timer-%d", i);
    t = wi(DX_WI_TIMER_FIRED, inst, 1, 1);
    t.fire_at_ms = T0 + 3600000;
    enqueue(p, T0, t);
    enqueue_work(p, T0, act_item("W", 1, (uint64_t)i + 1));
  }
  for (i = 0; i < N; i++) {
    f = wfetch(p, T0);
    ASSERT_EQ(f.item.id, (uint64_t)i + 1);
    dx_work_item_clear(&f.item);
  }
  CHECK(M(p)->commit(p, 1, &E));
  enqueue_work(p, T0 + 1, act_item("W", 1, 999999));
  enqueue(p, T0 + 1, start_item("visible"));
  f = wfetch(p, T0 + 2);
  ASSERT_EQ(f.item.id, 999999);
  dx_work_item_clear(&f.item);
  f = wfetch(p, T0 + 3);
  ASSERT_EQ(f.item.kind, 0);
  it = fetch(p, T0 + 2);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "visible");
  dx_orch_item_free(it);
  ASSERT(fetch(p, T0 + 3) == NULL);
  /* the first worker locks expire first; a provider with liveness may look sooner */
  ASSERT(next_due(p, T0 + 3) > T0 + 3 && next_due(p, T0 + 3) <= T0 + LOCK);
  done(p);
}

DX_TEST(pv_corrupted_history_is_reported) {
  dx_provider_t *p = fresh();
  dx_orch_item_t *it;
  dx_event_t *ev = NULL;
  size_t n = 0;
  enqueue(p, T0, start_item("A"));
  turn(p, T0, fetch(p, T0), 3);
  if (dx_pv_corrupt_history(p, "A", 1, 2) != 0) { /* provider cannot: skip */
    done(p);
    return;
  }
  enqueue(p, T0 + 1, raise_item("A"));
  it = fetch(p, T0 + 2);
  ASSERT(it);
  ASSERT_EQ(it->history_error, DX_ECORRUPT);
  ASSERT_EQ(it->history_len, 0);
  ASSERT_CONTAINS(it->history_error_msg, "'A'");
  ASSERT_CONTAINS(it->history_error_msg, "event 2");
  ASSERT_EQ(it->messages_len, 1);
  ASSERT(fetch(p, T0 + 3) == NULL); /* the lock is held */
  CHECK_ERR(M(p)->read_history(p, "A", 0, &ev, &n, NULL, &E), DX_ECORRUPT);
  ASSERT_CONTAINS(E.msg, "history");
  ASSERT_CONTAINS(E.msg, "event 2");
  ASSERT(ev == NULL);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 4, "A", it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  done(p);
}

/* {===== several processes on one store =====} */

#define CHILD_CHECK(c)                                                              \
  do {                                                                              \
    if (!(c)) {                                                                     \
      fprintf(stderr, "# child %d: %s failed at line %d: %s\n", (int)getpid(), #c,  \
              __LINE__, E.msg);                                                     \
      _exit(3);                                                                     \
    }                                                                               \
  } while (0)

/* Fork `n` children running fn(store, i, fd) (fd: write end of a shared pipe) on their own
** handles; collect their output into buf (malloc'd, NUL-terminated); fail on any bad exit. */
static char *run_children(const char *store, int n, void (*fn)(const char *, int, int)) {
  size_t len = 0, cap = 4096;
  char *buf;
  pid_t pids[8];
  int fds[2], i;
  ssize_t got;
  ASSERT(n <= 8 && pipe(fds) == 0);
  fflush(NULL);
  for (i = 0; i < n; i++) {
    ASSERT((pids[i] = fork()) >= 0);
    if (pids[i] == 0) {
      close(fds[0]);
      fn(store, i, fds[1]);
      _exit(0); /* never run the parent's atexit handlers (they remove the store) */
    }
  }
  close(fds[1]);
  ASSERT((buf = malloc(cap)) != NULL); /* after fork: children must not inherit it */
  while ((got = read(fds[0], buf + len, cap - len - 1)) > 0) {
    len += (size_t)got;
    if (cap - len < 256) ASSERT((buf = realloc(buf, cap *= 2)) != NULL);
  }
  close(fds[0]);
  buf[len] = 0;
  for (i = 0; i < n; i++) {
    int status = 0;
    ASSERT(waitpid(pids[i], &status, 0) == pids[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      DX_FAIL_AT("child %d failed (status %d)", i, status);
  }
  return buf;
}

enum { WORK_ROWS = 400 };

static void worker_child(const char *store, int idx, int fd) {
  dx_provider_t *p = dx_pv_open(store);
  for (;;) {
    dx_work_fetch_t f;
    dx_work_item_t reply;
    char line[32];
    int n;
    CHILD_CHECK(M(p)->fetch_work_item(p, wall_ms(), 60000, NULL, &f, &E) == 0);
    if (f.item.kind == 0) break;
    reply = act_done("sink", 1, f.item.id);
    CHILD_CHECK(M(p)->ack_work_item(p, wall_ms(), f.lock_token, &reply, &E) == 0);
    n = snprintf(line, sizeof line, "%llu\n", (unsigned long long)f.item.id);
    CHILD_CHECK(write(fd, line, (size_t)n) == n);
    dx_work_item_clear(&f.item);
  }
  done(p);
}

DX_TEST(pv_multi_process_workers_ack_each_row_once) {
  char *store = dx_pv_new_store(), *out, *s;
  dx_provider_t *p;
  static int seen[WORK_ROWS + 1];
  int i, total = 0;
  dx_queue_depths_t d;
  if (!dx_pv_multi_process()) { free(store); return; }
  p = dx_pv_open(store);
  CHECK(M(p)->begin(p, &E));
  for (i = 1; i <= WORK_ROWS; i++) enqueue_work(p, wall_ms(), act_item("W", 1, (uint64_t)i));
  CHECK(M(p)->commit(p, 1, &E));
  done(p); /* children open their own env: never share one across fork */
  out = run_children(store, 4, worker_child);
  for (s = strtok(out, "\n"); s; s = strtok(NULL, "\n")) {
    int id = atoi(s);
    ASSERT(id >= 1 && id <= WORK_ROWS);
    seen[id]++;
    total++;
  }
  free(out);
  ASSERT_EQ(total, WORK_ROWS);
  for (i = 1; i <= WORK_ROWS; i++) ASSERT_EQ(seen[i], 1);
  p = dx_pv_open(store);
  d = depths(p);
  ASSERT_EQ(d.worker, 0);
  ASSERT_EQ(d.orchestrator, WORK_ROWS);
  done(p);
  free(store);
}

enum { ORCH_INSTANCES = 10, ORCH_TURNS = 5 };

typedef struct {
  atomic_int holders[ORCH_INSTANCES];
  atomic_int violations;
  atomic_int turns;
} orch_shared_t;

static orch_shared_t *g_shared; /* MAP_SHARED: visible to every child */

static void orch_child(const char *store, int idx, int fd) {
  dx_provider_t *p = dx_pv_open(store);
  int64_t deadline = wall_ms() + 60000;
  while (atomic_load(&g_shared->turns) < ORCH_INSTANCES * ORCH_TURNS && wall_ms() < deadline) {
    dx_orch_item_t *it = NULL;
    dx_work_item_t next;
    dx_event_t ev[1];
    dx_orch_ack_t a;
    int i;
    CHILD_CHECK(M(p)->fetch_orchestration_item(p, wall_ms(), 60000, &it, &E) == 0);
    if (!it) {
      usleep(500);
      continue;
    }
    i = atoi(it->instance + 5); /* "inst-N" */
    CHILD_CHECK(i >= 0 && i < ORCH_INSTANCES);
    if (atomic_fetch_add(&g_shared->holders[i], 1) != 0) atomic_fetch_add(&g_shared->violations, 1);
    a = ack_of(it);
    a.delta = delta(ev, 1, it);
    a.delta_len = 1;
    next = raise_item(it->instance); /* one more turn for this instance */
    a.orch_items = &next;
    a.orch_items_len = it->history_len + 1 < ORCH_TURNS;
    usleep(200); /* widen the window in which a second holder would show */
    atomic_fetch_sub(&g_shared->holders[i], 1); /* before ack: then the lock can move on */
    CHILD_CHECK(M(p)->ack_orchestration_item(p, wall_ms(), &a, &E) == 0);
    atomic_fetch_add(&g_shared->turns, 1);
    dx_orch_item_free(it);
  }
  done(p);
}

DX_TEST(pv_multi_process_orchestrators_exclusive) {
  char *store = dx_pv_new_store(), inst[32];
  dx_provider_t *p;
  int i;
  if (!dx_pv_multi_process()) { free(store); return; }
  g_shared = mmap(NULL, sizeof *g_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
  ASSERT(g_shared != MAP_FAILED);
  memset(g_shared, 0, sizeof *g_shared);
  p = dx_pv_open(store);
  for (i = 0; i < ORCH_INSTANCES; i++) {
    snprintf(inst, sizeof inst, "inst-%d", i);
    enqueue(p, wall_ms(), start_item(inst));
  }
  done(p);
  free(run_children(store, 2, orch_child));
  ASSERT_EQ(atomic_load(&g_shared->violations), 0);
  ASSERT_EQ(atomic_load(&g_shared->turns), ORCH_INSTANCES * ORCH_TURNS);
  p = dx_pv_open(store);
  for (i = 0; i < ORCH_INSTANCES; i++) {
    snprintf(inst, sizeof inst, "inst-%d", i);
    ASSERT_EQ(history_len(p, inst, 1), ORCH_TURNS);
  }
  ASSERT_EQ(depths(p).orchestrator, 0);
  done(p);
  free(store);
}

/* {===== sessions (duroxide v2 implicit sessions, DESIGN.md §6) =====} */

#define SLOCK 10000 /* session lease; the item lock is LOCK (longer) */

static dx_work_item_t sess_item(const char *inst, uint64_t id, const char *sid) {
  dx_work_item_t w = act_item(inst, 1, id);
  w.session_id = (char *)sid;
  return w;
}

static dx_work_fetch_t sfetch(dx_provider_t *p, int64_t now, const char *worker, uint32_t max) {
  dx_session_cfg_t cfg;
  dx_work_fetch_t f;
  memset(&cfg, 0, sizeof cfg);
  cfg.worker_id = worker;
  cfg.session_lock_ms = SLOCK;
  cfg.max_sessions = max;
  CHECK(M(p)->fetch_work_item(p, now, LOCK, &cfg, &f, &E));
  return f;
}

static void fclear(dx_work_fetch_t *f) {
  dx_work_item_clear(&f->item);
  free(f->previous_owner);
  memset(f, 0, sizeof *f);
}

/* Fetch as `worker` and expect the item with `id` (0: nothing); returns session_claimed. */
static int take(dx_provider_t *p, int64_t now, const char *worker, uint32_t max, uint64_t id) {
  dx_work_fetch_t f = sfetch(p, now, worker, max);
  int claimed = f.session_claimed;
  if (id == 0 && f.item.kind != 0)
    DX_FAIL_AT("%s fetched item %llu, expected nothing", worker, (unsigned long long)f.item.id);
  if (id != 0 && (f.item.kind == 0 || f.item.id != id))
    DX_FAIL_AT("%s fetched %s %llu, expected item %llu", worker, f.item.kind ? "item" : "nothing",
               (unsigned long long)f.item.id, (unsigned long long)id);
  fclear(&f);
  return claimed;
}

/* Fetch as `worker`, expect item `id`, ack it at `now`. */
static void take_ack(dx_provider_t *p, int64_t now, const char *worker, uint64_t id) {
  dx_work_fetch_t f = sfetch(p, now, worker, 10);
  ASSERT_EQ(f.item.id, id);
  CHECK(M(p)->ack_work_item(p, now, f.lock_token, NULL, &E));
  fclear(&f);
}

typedef struct {
  char sid[32], owner[32];
  int64_t locked, last;
  uint64_t queued, running;
} srow_t;

typedef struct {
  srow_t v[16];
  int n;
} srows_t;

static int srow_cb(void *ud, const dx_session_info_t *s) {
  srows_t *r = ud;
  srow_t *o;
  ASSERT(r->n < 16);
  o = &r->v[r->n++];
  snprintf(o->sid, sizeof o->sid, "%s", s->session_id);
  snprintf(o->owner, sizeof o->owner, "%s", s->worker_id ? s->worker_id : "");
  o->locked = s->locked_until_ms;
  o->last = s->last_activity_ms;
  o->queued = s->queued;
  o->running = s->running;
  return 0;
}

static srows_t sessions_of(dx_provider_t *p) {
  srows_t r;
  memset(&r, 0, sizeof r);
  CHECK(M(p)->list_sessions(p, srow_cb, &r, &E));
  return r;
}

/* The listed row of `sid`; fails the test when there is none. */
static srow_t srow(dx_provider_t *p, const char *sid) {
  srows_t r = sessions_of(p);
  int i;
  for (i = 0; i < r.n; i++)
    if (strcmp(r.v[i].sid, sid) == 0) return r.v[i];
  DX_FAIL_AT("no session row '%s'", sid);
}

static uint64_t renew_sessions(dx_provider_t *p, int64_t now, const char *worker, int64_t idle) {
  uint64_t n = 99;
  CHECK(M(p)->renew_session_lock(p, now, worker, SLOCK, idle, NULL, NULL, &n, &E));
  return n;
}

static uint64_t cleanup_sessions(dx_provider_t *p, int64_t now) {
  uint64_t n = 99;
  CHECK(M(p)->cleanup_orphaned_sessions(p, now, &n, &E));
  return n;
}

static uint64_t release_sessions(dx_provider_t *p, int64_t now, const char *worker,
                                 const char *sid) {
  uint64_t n = 99;
  CHECK(M(p)->release_session_locks(p, now, worker, sid, &n, &E));
  return n;
}

DX_TEST(pv_session_claimable_by_any_worker_initially) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  /* a queued row alone makes no session row, but the session is listed, unowned */
  ASSERT_EQ(sessions_of(p).n, 1);
  ASSERT_STR_EQ(srow(p, "s1").owner, "");
  ASSERT_EQ(srow(p, "s1").queued, 1);
  f = sfetch(p, T0, "B", 10);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_STR_EQ(f.item.session_id, "s1");
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT(f.previous_owner == NULL);
  ASSERT_EQ(f.attempt_count, 1);
  fclear(&f);
  done(p);
}

DX_TEST(pv_session_pinned_after_claim) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  ASSERT_EQ(take(p, T0, "A", 10, 1), 1);
  take(p, T0 + 1, "B", 10, 0);            /* item 2 is due, but s1 is A's */
  take(p, T0 + SLOCK - 1, "B", 10, 0);    /* still A's until the lease lapses */
  ASSERT_EQ(srow(p, "s1").queued, 2);
  done(p);
}

DX_TEST(pv_session_owner_can_fetch_more) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  enqueue_work(p, T0, sess_item("J", 3, "s1")); /* sessions are not scoped to an instance */
  ASSERT_EQ(take(p, T0, "A", 10, 1), 1);
  ASSERT_EQ(take(p, T0 + 1, "A", 10, 2), 0); /* already A's: no new claim */
  ASSERT_EQ(take(p, T0 + 2, "A", 10, 3), 0);
  take(p, T0 + 3, "A", 10, 0);
  done(p);
}

DX_TEST(pv_session_non_session_items_unaffected) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  enqueue_work(p, T0 + 1, act_item("P", 1, 10));
  enqueue_work(p, T0 + 1, act_item("P", 1, 11));
  ASSERT_EQ(take(p, T0 + 2, "A", 10, 1), 1);
  ASSERT_EQ(take(p, T0 + 2, "B", 10, 10), 0); /* B skips A's session, takes plain work */
  f = wfetch(p, T0 + 2);                        /* and so does a session-less worker */
  ASSERT_EQ(f.item.id, 11);
  ASSERT_EQ(f.session_claimed, 0);
  fclear(&f);
  take(p, T0 + 2, "B", 10, 0);
  done(p);
}

DX_TEST(pv_session_fifo_across_sessions_and_plain) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0 + 1, act_item("P", 1, 2));
  enqueue_work(p, T0 + 2, sess_item("I", 3, "s2"));
  enqueue_work(p, T0 + 3, sess_item("I", 4, "s1"));
  enqueue_work(p, T0 + 3, act_item("P", 1, 5));
  take(p, T0 + 10, "A", 10, 1);
  take(p, T0 + 10, "A", 10, 2);
  take(p, T0 + 10, "A", 10, 3);
  take(p, T0 + 10, "A", 10, 4);
  take(p, T0 + 10, "A", 10, 5);
  take(p, T0 + 10, "A", 10, 0);
  done(p);
}

DX_TEST(pv_session_claim_creates_session_row) {
  dx_provider_t *p = fresh();
  srows_t r;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take(p, T0 + 5, "A", 10, 1);
  r = sessions_of(p);
  ASSERT_EQ(r.n, 1);
  ASSERT_STR_EQ(r.v[0].sid, "s1");
  ASSERT_STR_EQ(r.v[0].owner, "A");
  ASSERT_EQ(r.v[0].locked, T0 + 5 + SLOCK);
  ASSERT_EQ(r.v[0].last, T0 + 5);
  ASSERT_EQ(r.v[0].queued, 1); /* the locked row still counts */
  done(p);
}

DX_TEST(pv_session_lease_expiry_allows_reclaim) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take_ack(p, T0, "A", 1);
  enqueue_work(p, T0 + 1, sess_item("I", 2, "s1"));
  take(p, T0 + SLOCK - 1, "B", 10, 0);
  f = sfetch(p, T0 + SLOCK, "B", 10); /* locked_until <= now: lapsed */
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner, "A");
  fclear(&f);
  ASSERT_STR_EQ(srow(p, "s1").owner, "B");
  ASSERT_EQ(srow(p, "s1").locked, T0 + 2 * SLOCK);
  done(p);
}

DX_TEST(pv_session_idle_expiry_allows_reclaim) {
  dx_provider_t *p = fresh();
  const int64_t idle = 25000;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take_ack(p, T0 + 1, "A", 1); /* last activity T0+1 */
  ASSERT_EQ(renew_sessions(p, T0 + 5000, "A", idle), 1);  /* lease to T0+15000 */
  ASSERT_EQ(renew_sessions(p, T0 + 14000, "A", idle), 1); /* lease to T0+24000 */
  ASSERT_EQ(renew_sessions(p, T0 + 23000, "A", idle), 1); /* lease to T0+33000 */
  ASSERT_EQ(renew_sessions(p, T0 + 30000, "A", idle), 0); /* idle since T0+1: not renewed */
  ASSERT_EQ(srow(p, "s1").locked, T0 + 33000);
  enqueue_work(p, T0 + 30000, sess_item("I", 2, "s1"));
  take(p, T0 + 32999, "B", 10, 0);
  ASSERT_EQ(take(p, T0 + 33000, "B", 10, 2), 1);
  ASSERT_STR_EQ(srow(p, "s1").owner, "B");
  done(p);
}

static int count_cb(void *ud, const dx_session_info_t *s) {
  ASSERT_STR_EQ(s->worker_id, "A");
  (*(int *)ud)++;
  return 0;
}

DX_TEST(pv_session_renew_extends_all_owned) {
  dx_provider_t *p = fresh();
  uint64_t n = 0;
  int calls = 0;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  take(p, T0, "A", 10, 1);
  take(p, T0 + 1, "A", 10, 2);
  CHECK(M(p)->renew_session_lock(p, T0 + 100, "A", SLOCK, 0, count_cb, &calls, &n, &E));
  ASSERT_EQ(n, 2);
  ASSERT_EQ(calls, 2);
  ASSERT_EQ(srow(p, "s1").locked, T0 + 100 + SLOCK);
  ASSERT_EQ(srow(p, "s2").locked, T0 + 100 + SLOCK);
  ASSERT_EQ(srow(p, "s1").last, T0); /* renewal is not activity */
  done(p);
}

DX_TEST(pv_session_renew_skips_idle_sessions) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  take(p, T0, "A", 10, 1);        /* s1: last activity T0 */
  take(p, T0 + 5000, "A", 10, 2); /* s2: last activity T0+5000 */
  ASSERT_EQ(renew_sessions(p, T0 + 9000, "A", 6000), 1);
  ASSERT_EQ(srow(p, "s1").locked, T0 + SLOCK); /* idle: left to lapse */
  ASSERT_EQ(srow(p, "s2").locked, T0 + 9000 + SLOCK);
  done(p);
}

DX_TEST(pv_session_renew_skips_other_workers) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  take(p, T0, "A", 10, 1);
  take(p, T0, "B", 10, 2);
  ASSERT_EQ(renew_sessions(p, T0 + 100, "A", 0), 1);
  ASSERT_EQ(srow(p, "s1").locked, T0 + 100 + SLOCK);
  ASSERT_EQ(srow(p, "s2").locked, T0 + SLOCK);
  ASSERT_EQ(renew_sessions(p, T0 + 100, "C", 0), 0);
  done(p);
}

DX_TEST(pv_session_renew_skips_expired_leases) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take(p, T0, "A", 10, 1);
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK, "A", 0), 0); /* lapsed exactly now */
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK + 1, "A", 0), 0);
  ASSERT_EQ(srow(p, "s1").locked, T0 + SLOCK);
  done(p);
}

DX_TEST(pv_session_renew_work_lock_updates_last_activity) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  f = sfetch(p, T0, "A", 10);
  CHECK(M(p)->renew_work_item_lock(p, T0 + 500, f.lock_token, LOCK, &E));
  ASSERT_EQ(srow(p, "s1").last, T0 + 500);
  ASSERT_EQ(srow(p, "s1").locked, T0 + SLOCK); /* the lease is the renewal task's job */
  fclear(&f);
  done(p);
}

DX_TEST(pv_session_ack_updates_last_activity) {
  dx_provider_t *p = fresh();
  dx_work_item_t reply = act_done("I", 1, 1);
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  f = sfetch(p, T0, "A", 10);
  CHECK(M(p)->ack_work_item(p, T0 + 700, f.lock_token, &reply, &E));
  ASSERT_EQ(srow(p, "s1").last, T0 + 700);
  ASSERT_EQ(srow(p, "s1").queued, 0);
  ASSERT_EQ(depths(p).orchestrator, 1);
  fclear(&f);
  done(p);
}

DX_TEST(pv_session_fetch_updates_last_activity) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  take(p, T0, "A", 10, 1);
  ASSERT_EQ(srow(p, "s1").last, T0);
  ASSERT_EQ(take(p, T0 + 900, "A", 10, 2), 0);
  ASSERT_EQ(srow(p, "s1").last, T0 + 900);
  ASSERT_EQ(srow(p, "s1").locked, T0 + 900 + SLOCK); /* the owner's fetch refreshes it */
  done(p);
}

/* A worker restarted with the same id owns its sessions again: its first fetch refreshes the
** dead process's lease at once, so no other worker claims the session under the activity it
** starts (issue 9 item 3a: before, the old lease lapsed mid-activity and B claimed it). */
DX_TEST(pv_session_same_id_restart_refreshes_lease) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  enqueue_work(p, T0, sess_item("J", 3, "s1"));
  take_ack(p, T0, "A", 1); /* A claims s1, then dies; a new A comes back with the same id */
  ASSERT_EQ(take(p, T0 + SLOCK - 100, "A", 10, 2), 0); /* the restarted A: no new claim */
  ASSERT_EQ(srow(p, "s1").locked, T0 + 2 * SLOCK - 100);
  ASSERT_EQ(take(p, T0 + SLOCK + 1, "B", 10, 0), 0); /* the old lease would have lapsed */
  ASSERT_STR_EQ(srow(p, "s1").owner, "A");
  done(p);
}

DX_TEST(pv_session_max_sessions_capacity_respected) {
  dx_provider_t *p = fresh();
  create_instance(p, T0, "I"); /* running: its session keeps its slot */
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  take_ack(p, T0, "A", 1); /* A owns s1 (no activity running: it still counts) */
  take(p, T0 + 1, "A", 1, 0);
  ASSERT_EQ(take(p, T0 + 1, "B", 1, 2), 1);
  /* once s1's lease lapses, A has room again */
  enqueue_work(p, T0 + 2, sess_item("I", 3, "s3"));
  take(p, T0 + SLOCK - 1, "A", 1, 0);
  ASSERT_EQ(take(p, T0 + SLOCK, "A", 1, 3), 1);
  done(p);
}

DX_TEST(pv_session_max_sessions_allows_owned_and_plain_items) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take(p, T0, "A", 1, 1);
  enqueue_work(p, T0 + 1, sess_item("I", 2, "s2")); /* oldest, but A is at capacity */
  enqueue_work(p, T0 + 2, sess_item("I", 3, "s1"));
  enqueue_work(p, T0 + 3, act_item("P", 1, 4));
  ASSERT_EQ(take(p, T0 + 5, "A", 1, 3), 0);
  take(p, T0 + 5, "A", 1, 4);
  take(p, T0 + 5, "A", 1, 0);
  done(p);
}

DX_TEST(pv_session_zero_max_sessions_takes_no_session_work) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0 + 1, act_item("P", 1, 2));
  take(p, T0 + 2, "A", 0, 2);
  take(p, T0 + 2, "A", 0, 0);
  ASSERT_STR_EQ(srow(p, "s1").owner, ""); /* never claimed */
  take(p, T0 + 2, "B", 1, 1);
  done(p);
}

DX_TEST(pv_session_id_stored_on_worker_row) {
  dx_provider_t *p = fresh();
  dx_work_item_t work[2] = {sess_item("A", 2, "s1"), sess_item("A", 3, "s1")};
  dx_activity_ref_t cancel = {"A", 1, 3};
  dx_event_t ev[3];
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  dx_orch_ack_t a;
  enqueue(p, T0, start_item("A"));
  it = fetch(p, T0);
  a = ack_of(it);
  a.delta = delta(ev, 3, it);
  ev[1].kind = ev[2].kind = DX_EV_ACT_SCHEDULED;
  ev[1].session_id = ev[2].session_id = "s1";
  a.delta_len = 3;
  a.worker_items = work;
  a.worker_items_len = 2;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  f = wfetch(p, T0 + 1); /* no session config: session rows are not handed out */
  ASSERT_EQ(f.item.kind, 0);
  f = sfetch(p, T0 + 1, "W", 10);
  ASSERT_EQ(f.item.id, 2);
  ASSERT_STR_EQ(f.item.session_id, "s1");
  ASSERT_EQ(srow(p, "s1").queued, 2);
  /* the next turn cancels activity 3 (lock stealing): it leaves the session's rows too */
  enqueue(p, T0 + 2, raise_item("A"));
  it = fetch(p, T0 + 3);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.cancelled = &cancel;
  a.cancelled_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 4, &a, &E));
  dx_orch_item_free(it);
  ASSERT_EQ(srow(p, "s1").queued, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 5, f.lock_token, NULL, &E));
  fclear(&f);
  ASSERT_EQ(srow(p, "s1").queued, 0);
  take(p, T0 + 6, "W", 10, 0);
  ASSERT_EQ(next_due(p, T0 + 6), INT64_MAX); /* nothing queued anywhere */
  done(p);
}

DX_TEST(pv_session_cleanup_removes_expired_no_work) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take_ack(p, T0, "A", 1);
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK - 1), 0);
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK), 1);
  ASSERT_EQ(sessions_of(p).n, 0);
  done(p);
}

DX_TEST(pv_session_cleanup_removes_idle_and_released_no_work) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  take_ack(p, T0, "A", 1);
  take_ack(p, T0, "A", 2);
  /* s1 idle: the renewal task stops renewing it, its lease lapses */
  ASSERT_EQ(renew_sessions(p, T0 + 5000, "A", 4000), 0);
  ASSERT_EQ(release_sessions(p, T0 + 5000, "A", "s2"), 1); /* s2 released (close, shutdown) */
  ASSERT_EQ(cleanup_sessions(p, T0 + 5000), 1);             /* s2 at once */
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK), 1);            /* s1 once lapsed */
  ASSERT_EQ(sessions_of(p).n, 0);
  done(p);
}

DX_TEST(pv_session_cleanup_preserves_sessions_with_work) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 3, "s2"));
  take(p, T0, "A", 10, 1); /* s1: one locked row, one queued */
  take(p, T0, "A", 10, 3); /* s2: one locked row only */
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  ASSERT_EQ(release_sessions(p, T0 + 1, "A", NULL), 2);
  ASSERT_EQ(cleanup_sessions(p, T0 + 2 * SLOCK), 0);
  ASSERT_EQ(sessions_of(p).n, 2);
  done(p);
}

DX_TEST(pv_session_cleanup_preserves_active_sessions) {
  dx_provider_t *p = fresh();
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take_ack(p, T0, "A", 1);
  ASSERT_EQ(cleanup_sessions(p, T0 + 1), 0); /* live lease, recent activity, no work */
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK - 1, "A", 0), 1);
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK + 1), 0);
  ASSERT_STR_EQ(srow(p, "s1").owner, "A");
  done(p);
}

DX_TEST(pv_session_cleanup_returns_deleted_count) {
  dx_provider_t *p = fresh();
  char sid[8];
  int i;
  for (i = 0; i < 5; i++) {
    snprintf(sid, sizeof sid, "s%d", i);
    enqueue_work(p, T0, sess_item("I", (uint64_t)i + 1, sid));
    take_ack(p, T0 + i * 1000, "A", (uint64_t)i + 1); /* s_i lease ends T0+i*1000+SLOCK */
  }
  ASSERT_EQ(cleanup_sessions(p, T0 + 2000 + SLOCK), 3); /* s0, s1, s2 */
  ASSERT_EQ(sessions_of(p).n, 2);
  ASSERT_EQ(cleanup_sessions(p, T0 + 2000 + SLOCK), 0);
  ASSERT_EQ(cleanup_sessions(p, T0 + 9000 + SLOCK), 2);
  done(p);
}

DX_TEST(pv_session_reclaim_after_lock_expiry_updates_in_place) {
  dx_provider_t *p = fresh();
  srows_t r;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  take_ack(p, T0, "A", 1);
  enqueue_work(p, T0 + 1, sess_item("I", 2, "s1"));
  take(p, T0 + SLOCK + 5, "B", 10, 2);
  r = sessions_of(p);
  ASSERT_EQ(r.n, 1);
  ASSERT_STR_EQ(r.v[0].owner, "B");
  ASSERT_EQ(r.v[0].locked, T0 + SLOCK + 5 + SLOCK);
  ASSERT_EQ(r.v[0].last, T0 + SLOCK + 5);
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK + 6, "A", 0), 0); /* A no longer owns it */
  done(p);
}

DX_TEST(pv_session_multiple_sessions_per_worker) {
  dx_provider_t *p = fresh();
  srows_t r;
  int i;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  enqueue_work(p, T0, sess_item("I", 3, "s3"));
  enqueue_work(p, T0, sess_item("I", 4, "s2"));
  ASSERT_EQ(take(p, T0, "A", 3, 1), 1);
  ASSERT_EQ(take(p, T0, "A", 3, 2), 1);
  ASSERT_EQ(take(p, T0, "A", 3, 3), 1);
  ASSERT_EQ(take(p, T0, "A", 3, 4), 0);
  r = sessions_of(p);
  ASSERT_EQ(r.n, 3);
  for (i = 0; i < 3; i++) ASSERT_STR_EQ(r.v[i].owner, "A");
  ASSERT_STR_EQ(r.v[0].sid, "s1"); /* ordered by session id */
  ASSERT_STR_EQ(r.v[2].sid, "s3");
  done(p);
}

DX_TEST(pv_session_release_makes_claimable_at_once) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  take_ack(p, T0, "A", 1);
  take_ack(p, T0, "A", 2);
  enqueue_work(p, T0 + 1, sess_item("I", 3, "s1"));
  enqueue_work(p, T0 + 1, sess_item("I", 4, "s2"));
  take(p, T0 + 2, "B", 10, 0);
  ASSERT_EQ(release_sessions(p, T0 + 2, "B", "s1"), 0); /* only the owner releases */
  ASSERT_EQ(release_sessions(p, T0 + 2, "A", "s1"), 1);
  ASSERT_EQ(srow(p, "s1").owner[0], 0);
  ASSERT_EQ(srow(p, "s1").locked, T0 + 2);
  f = sfetch(p, T0 + 2, "B", 10); /* no waiting for the lease */
  ASSERT_EQ(f.item.id, 3);
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner, "A");
  fclear(&f);
  take(p, T0 + 2, "B", 10, 0); /* s2 is still A's */
  ASSERT_EQ(release_sessions(p, T0 + 3, "A", NULL), 1); /* all of A's: s2 */
  ASSERT_EQ(release_sessions(p, T0 + 3, "A", NULL), 0);
  ASSERT_EQ(take(p, T0 + 3, "B", 10, 4), 1);
  done(p);
}

/* A claim reports how long its row had been due (the runtime warns when session work waited
** long for a worker to claim its session). */
DX_TEST(pv_session_claim_reports_wait) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  f = sfetch(p, T0 + 700, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_EQ(f.waited_ms, 700);
  fclear(&f);
  f = sfetch(p, T0 + 900, "A", 10); /* its own session: not a claim */
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(f.session_claimed, 0);
  fclear(&f);
  done(p);
}

/* list_sessions counts a session's rows (queued) and those of them locked now (running),
** also for a session that has queued work but no session row yet. */
DX_TEST(pv_session_list_counts_running_rows) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  enqueue_work(p, T0, sess_item("I", 3, "s2"));
  ASSERT_EQ(srow(p, "s1").queued, 2);
  ASSERT_EQ(srow(p, "s1").running, 0);
  take(p, T0, "A", 1, 1);           /* capacity 1: A owns s1 only */
  ASSERT_EQ(srow(p, "s1").queued, 2);
  ASSERT_EQ(srow(p, "s1").running, 1);
  f = sfetch(p, T0, "A", 1);
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(srow(p, "s1").running, 2);
  CHECK(M(p)->ack_work_item(p, T0, f.lock_token, NULL, &E));
  fclear(&f);
  ASSERT_EQ(srow(p, "s1").queued, 1);
  ASSERT_EQ(srow(p, "s1").running, 1);
  ASSERT_EQ(srow(p, "s2").queued, 1); /* never claimed: no session row */
  ASSERT_EQ(srow(p, "s2").running, 0);
  done(p);
}

/* {===== session history (provider v6) =====} */

typedef struct {
  int n;
  char line[8][96];
  int64_t first_at, last_at;
} sevs_t;

static int sev_cb(void *ud, const dx_session_event_t *e) {
  sevs_t *s = ud;
  if (s->n == 0) s->first_at = e->at_ms;
  s->last_at = e->at_ms;
  if (s->n < 8)
    snprintf(s->line[s->n], sizeof s->line[0], "%s %s %s %s", e->event, e->worker_id,
             e->detail ? e->detail : "-", e->previous_owner ? e->previous_owner : "-");
  s->n++;
  return 0;
}

static sevs_t sevs(dx_provider_t *p, const char *sid) {
  sevs_t s;
  memset(&s, 0, sizeof s);
  CHECK(M(p)->list_session_events(p, sid, sev_cb, &s, &E));
  return s;
}

static void sev_add(dx_provider_t *p, const char *sid, int64_t at, const char *event,
                    const char *worker, const char *detail, const char *prev) {
  dx_session_event_t e = {sid, at, event, worker, detail, prev};
  CHECK(M(p)->append_session_event(p, &e, &E));
}

/* Claims, moves and releases are kept per session in order, with their details. */
DX_TEST(pv_session_events_append_and_list) {
  dx_provider_t *p = fresh();
  sevs_t s;
  dx_session_event_t bad = {"s1", T0, "", "A", NULL, NULL};
  ASSERT(M(p)->version >= 8 && M(p)->append_session_event && M(p)->list_session_events);
  sev_add(p, "s1", T0, "claimed", "A", "new", NULL);
  sev_add(p, "s2", T0 + 1, "claimed", "B", "new", NULL);
  sev_add(p, "s1", T0 + 2, "released", "A", "upgrade", NULL);
  sev_add(p, "s1", T0 + 3, "moved", "B", "new", "A");
  s = sevs(p, "s1");
  ASSERT_EQ(s.n, 3);
  ASSERT_STR_EQ(s.line[0], "claimed A new -");
  ASSERT_STR_EQ(s.line[1], "released A upgrade -");
  ASSERT_STR_EQ(s.line[2], "moved B new A");
  ASSERT_EQ(s.first_at, T0);
  ASSERT_EQ(s.last_at, T0 + 3);
  ASSERT_EQ(sevs(p, "s2").n, 1);
  ASSERT_EQ(sevs(p, "nope").n, 0);
  /* bad input: refused, nothing written */
  ASSERT_EQ(M(p)->append_session_event(p, &bad, &E), DX_EINVAL);
  bad.event = "claimed";
  bad.worker_id = NULL;
  ASSERT_EQ(M(p)->append_session_event(p, &bad, &E), DX_EINVAL);
  bad.worker_id = "A";
  bad.session_id = NULL;
  ASSERT_EQ(M(p)->append_session_event(p, &bad, &E), DX_EINVAL);
  ASSERT_EQ(M(p)->list_session_events(p, "", sev_cb, &s, &E), DX_EINVAL);
  ASSERT_EQ(sevs(p, "s1").n, 3);
  done(p);
}

/* Bounded: the latest DX_SESSION_EVENTS_KEEP per session, and cleanup drops old ones. */
DX_TEST(pv_session_events_bounded_and_pruned) {
  dx_provider_t *p = fresh();
  sevs_t s;
  int i;
  ASSERT(M(p)->version >= 8 && M(p)->append_session_event && M(p)->list_session_events);
  for (i = 0; i < DX_SESSION_EVENTS_KEEP + 5; i++)
    sev_add(p, "s1", T0 + i, i % 2 ? "released" : "claimed", "A", "idle", NULL);
  sev_add(p, "s2", T0 + DX_SESSION_EVENTS_MAX_AGE_MS, "claimed", "B", "new", NULL);
  s = sevs(p, "s1");
  ASSERT_EQ(s.n, DX_SESSION_EVENTS_KEEP);
  ASSERT_EQ(s.first_at, T0 + 5); /* the oldest five went */
  ASSERT_EQ(s.last_at, T0 + DX_SESSION_EVENTS_KEEP + 4);
  /* a week after T0 + 50: s1's events up to T0 + 50 are older than the limit */
  cleanup_sessions(p, T0 + 50 + DX_SESSION_EVENTS_MAX_AGE_MS + 1);
  s = sevs(p, "s1");
  ASSERT_EQ(s.first_at, T0 + 51);
  ASSERT_EQ(s.n, DX_SESSION_EVENTS_KEEP + 5 - 51);
  ASSERT_EQ(sevs(p, "s2").n, 1);
  done(p);
}

/* Fetch as `worker` declining the sessions in `declined` (NULL-terminated); expect item `id`
** (0: nothing). Returns session_claimed. */
static int take_declining(dx_provider_t *p, int64_t now, const char *worker,
                          const char *const *declined, uint64_t id) {
  dx_session_cfg_t cfg;
  dx_work_fetch_t f;
  int claimed;
  memset(&cfg, 0, sizeof cfg);
  cfg.worker_id = worker;
  cfg.session_lock_ms = SLOCK;
  cfg.max_sessions = 10;
  cfg.declined = declined;
  while (declined && declined[cfg.n_declined]) cfg.n_declined++;
  CHECK(M(p)->fetch_work_item(p, now, LOCK, &cfg, &f, &E));
  claimed = f.session_claimed;
  if (id == 0 && f.item.kind != 0)
    DX_FAIL_AT("%s fetched item %llu, expected nothing", worker, (unsigned long long)f.item.id);
  if (id != 0 && (f.item.kind == 0 || f.item.id != id))
    DX_FAIL_AT("%s fetched %s %llu, expected item %llu", worker, f.item.kind ? "item" : "nothing",
               (unsigned long long)f.item.id, (unsigned long long)id);
  fclear(&f);
  return claimed;
}

/* Rolling upgrades (dx_session_cfg_t.declined): a worker that declines a session neither
** claims it nor fetches rows of it that it owns; other sessions and plain rows are unaffected,
** and a worker that does not decline it claims it. */
DX_TEST(pv_session_declined_sessions_are_skipped) {
  dx_provider_t *p = fresh();
  static const char *const s1[] = {"s1", NULL};
  static const char *const odd[] = {"x\"y", "s1", "a,b", NULL}; /* quoting in SQL arrays */
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  ASSERT_EQ(take_declining(p, T0, "A", NULL, 1), 1);   /* A owns s1 */
  enqueue_work(p, T0 + 1, sess_item("I", 2, "s1"));
  enqueue_work(p, T0 + 1, sess_item("I", 3, "s2"));
  enqueue_work(p, T0 + 1, act_item("I", 1, 4));
  /* A declines s1: its own row 2 is skipped; s2 and the plain row come out */
  ASSERT_EQ(take_declining(p, T0 + 2, "A", s1, 3), 1);
  take_declining(p, T0 + 2, "A", odd, 4);
  take_declining(p, T0 + 2, "A", odd, 0);
  ASSERT_STR_EQ(srow(p, "s1").owner, "A");
  /* released: A still does not claim it, B does */
  ASSERT_EQ(release_sessions(p, T0 + 3, "A", "s1"), 1);
  take_declining(p, T0 + 3, "A", s1, 0);
  ASSERT_EQ(take_declining(p, T0 + 3, "B", s1 + 1, 2), 1);
  ASSERT_STR_EQ(srow(p, "s1").owner, "B");
  done(p);
}

/* {===== worker liveness (provider v5): registration, refusal, dead owners =====} */

/* Providers without registration (LMDB, for now) skip these tests, saying so. */
/* {===== fencing and ended sessions (issue 9 items 3 and 4) =====} */

/* End `inst`'s current execution with `status` (COMPLETED, FAILED or CONTINUED_AS_NEW). */
static void end_instance(dx_provider_t *p, int64_t now, const char *inst, int status) {
  dx_failure_t fail = {DX_CAT_APPLICATION, "OrchestrationFailed", "boom", 0};
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, now, raise_item(inst));
  it = fetch(p, now);
  ASSERT(it);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.status = status;
  if (status == DX_STATUS_FAILED) a.failure = &fail;
  else a.output = "1";
  CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  dx_orch_item_free(it);
}

/* The first turn of execution `exec` of `inst` (after a continue-as-new), scheduling nothing. */
static void new_execution_turn(dx_provider_t *p, int64_t now, const char *inst, uint64_t exec) {
  dx_event_t ev;
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  enqueue(p, now, raise_item(inst));
  it = fetch(p, now);
  ASSERT(it);
  a = ack_of(it);
  a.execution_id = exec;
  memset(&ev, 0, sizeof ev);
  ev.kind = DX_EV_ORCH_STARTED;
  ev.event_id = 1;
  ev.timestamp_ms = now;
  ev.name = "Orch";
  ev.data = "{}";
  a.delta = &ev;
  a.delta_len = 1;
  a.orchestration_name = "Orch";
  CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  dx_orch_item_free(it);
}

/* A stalls past its lease while running item 1; B claims the session for item 2 and, the
** claim making A's locked row due, runs item 1 too. A's late ack and renewal are refused; the
** orchestrator queue gets B's completions only. */
DX_TEST(pv_session_fence_refuses_a_stalled_owners_ack) {
  dx_provider_t *p = fresh();
  dx_work_item_t done1 = act_done("I", 1, 1);
  dx_work_fetch_t f, g, h;
  uint64_t before;
  create_instance(p, T0, "I");
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  f = sfetch(p, T0, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  g = sfetch(p, T0 + SLOCK, "B", 10); /* A's lease lapsed; its item lock (LOCK) has not */
  ASSERT_EQ(g.item.id, 2);
  ASSERT_EQ(g.session_claimed, 1);
  ASSERT_STR_EQ(g.previous_owner, "A");
  h = sfetch(p, T0 + SLOCK, "B", 10); /* the claim made A's row due: B runs it */
  ASSERT_EQ(h.item.id, 1);
  ASSERT_EQ(h.attempt_count, 2);
  before = depths(p).orchestrator;
  CHECK_ERR(M(p)->ack_work_item(p, T0 + SLOCK + 1, f.lock_token, &done1, &E), DX_ELOCK);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + SLOCK + 1, f.lock_token, LOCK, &E), DX_ELOCK);
  ASSERT_EQ(depths(p).orchestrator, before);
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 1, h.lock_token, &done1, &E));
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 1, g.lock_token, NULL, &E));
  ASSERT_EQ(depths(p).orchestrator, before + 1);
  ASSERT_EQ(srow(p, "s1").queued, 0);
  fclear(&f);
  fclear(&g);
  fclear(&h);
  done(p);
}

/* The ownership epoch itself is checked in the ack's transaction: a stalled owner whose clock
** says its item lock is still live (its ack carries an earlier time) is refused all the same,
** and its message names the new owner. */
DX_TEST(pv_session_fence_checks_the_epoch_not_only_the_lock) {
  dx_provider_t *p = fresh();
  dx_work_item_t done1 = act_done("I", 1, 1);
  dx_work_fetch_t f, g;
  uint64_t before;
  create_instance(p, T0, "I");
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  f = sfetch(p, T0, "A", 10);
  g = sfetch(p, T0 + SLOCK, "B", 10);
  ASSERT_EQ(g.session_claimed, 1);
  before = depths(p).orchestrator;
  CHECK_ERR(M(p)->ack_work_item(p, T0 + SLOCK - 1, f.lock_token, &done1, &E), DX_ELOCK);
  ASSERT(strstr(E.msg, "moved to worker 'B'") != NULL);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + SLOCK - 1, f.lock_token, LOCK, &E), DX_ELOCK);
  ASSERT_EQ(depths(p).orchestrator, before);
  /* the owner's own later fetch and ack of the session are fine (same epoch) */
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 1, g.lock_token, NULL, &E));
  fclear(&f);
  fclear(&g);
  done(p);
}

/* A lease that lapsed without another claim fences nothing: the owner's ack still counts. */
DX_TEST(pv_session_lapsed_lease_without_a_claim_keeps_the_ack) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  create_instance(p, T0, "I");
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  f = sfetch(p, T0, "A", 10);
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 5, f.lock_token, NULL, &E));
  fclear(&f);
  done(p);
}

static int ended_cb(void *ud, const dx_session_info_t *s) {
  char *out = ud;
  if (s->ended) strcat(out, s->session_id), strcat(out, " ");
  return 0;
}

static void renew_ended(dx_provider_t *p, int64_t now, const char *worker, char *out) {
  out[0] = 0;
  CHECK(M(p)->renew_session_lock(p, now, worker, SLOCK, 0, ended_cb, out, NULL, &E));
}

/* A session whose instances all ended (failed without closing it, completed, continued as
** new) stops counting against max_sessions at once, and renewals report it ended; a session
** with a running instance or with rows does not. */
DX_TEST(pv_session_of_ended_instances_frees_its_slot) {
  dx_provider_t *p = fresh();
  char ended[128];
  create_instance(p, T0, "X");
  create_instance(p, T0, "Y");
  create_instance(p, T0, "Z");
  enqueue_work(p, T0, sess_item("X", 1, "s1"));
  take_ack(p, T0, "A", 1);
  enqueue_work(p, T0 + 1, sess_item("Y", 2, "s2"));
  take(p, T0 + 1, "A", 1, 0); /* capacity 1: s1 still serves X */
  renew_ended(p, T0 + 1, "A", ended);
  ASSERT_STR_EQ(ended, "");
  end_instance(p, T0 + 2, "X", DX_STATUS_FAILED);
  renew_ended(p, T0 + 2, "A", ended);
  ASSERT_STR_EQ(ended, "s1 ");
  ASSERT_EQ(take(p, T0 + 3, "A", 1, 2), 1); /* the capacity-1 worker serves s2 */
  /* s2 is used by Y (running) and by Z once Z's row is queued */
  enqueue_work(p, T0 + 4, sess_item("Z", 3, "s2"));
  renew_ended(p, T0 + 4, "A", ended);
  ASSERT_STR_EQ(ended, "s1 ");
  done(p);
}

DX_TEST(pv_session_ended_after_completion_and_continue_as_new) {
  dx_provider_t *p = fresh();
  char ended[128];
  create_instance(p, T0, "X");
  create_instance(p, T0, "Y");
  enqueue_work(p, T0, sess_item("X", 1, "s1"));
  enqueue_work(p, T0, sess_item("Y", 2, "s1"));
  take_ack(p, T0, "A", 1);
  take_ack(p, T0, "A", 2);
  end_instance(p, T0 + 1, "X", DX_STATUS_COMPLETED);
  renew_ended(p, T0 + 1, "A", ended);
  ASSERT_STR_EQ(ended, ""); /* Y still runs */
  end_instance(p, T0 + 2, "Y", DX_STATUS_CONTINUED_AS_NEW);
  renew_ended(p, T0 + 2, "A", ended);
  ASSERT_STR_EQ(ended, ""); /* Y's next execution has not run yet: it may use s1 again */
  new_execution_turn(p, T0 + 3, "Y", 2); /* it runs without scheduling on s1 */
  renew_ended(p, T0 + 3, "A", ended);
  ASSERT_STR_EQ(ended, "s1 ");
  done(p);
}

static int has_liveness(dx_provider_t *p) {
  if (M(p)->version >= 5 && M(p)->worker_register && M(p)->worker_unregister) return 1;
  fprintf(stderr, "# SKIP: provider %s has no worker registration\n", M(p)->name);
  return 0;
}

/* A child process that registers `worker` on `store`, then (claim 1) fetches session work at
** T0 as that worker (it claims s1 and locks item 1), or (claim 2) locks the plain worker row
** and the instance that are due (locks of LOCK_LONG), tells the parent, and waits to be
** killed. Returns its pid once it holds all that. */
#define LOCK_LONG 600000
pid_t dx_pv_spawn_holder(const char *store, const char *worker, int claim) {
  int fds[2];
  char c = 0;
  pid_t pid;
  ASSERT(pipe(fds) == 0);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dx_provider_t *p = dx_pv_open(store);
    dx_error_t e;
    char ok = 'R';
    memset(&e, 0, sizeof e);
    close(fds[0]);
    if (M(p)->worker_register(p, worker, T0, &e) != 0) ok = 'E';
    if (ok == 'R' && claim == 1) {
      dx_work_fetch_t f = sfetch(p, T0, worker, 10);
      if (f.item.id != 1 || !f.session_claimed) ok = 'F';
      fclear(&f);
    } else if (ok == 'R' && claim == 2) {
      dx_work_fetch_t f;
      dx_orch_item_t *it = NULL;
      if (M(p)->fetch_work_item(p, T0, LOCK_LONG, NULL, &f, &e) || f.item.id != 7 ||
          M(p)->fetch_orchestration_item(p, T0, LOCK_LONG, &it, &e) || !it)
        ok = 'F';
      fclear(&f);
      dx_orch_item_free(it);
    }
    if (write(fds[1], &ok, 1) != 1) _exit(1);
    for (;;) pause();
  }
  close(fds[1]);
  ASSERT(read(fds[0], &c, 1) == 1);
  close(fds[0]);
  ASSERT_EQ(c, 'R');
  return pid;
}

void dx_pv_kill_holder(pid_t pid) {
  int st;
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
}

/* Register, retrying for up to 10 s of real time while the store still reports the killed
** holder live (the database server notices a closed connection a moment later). */
static int register_when_free(dx_provider_t *p, const char *worker) {
  int64_t until = wall_ms() + 10000;
  int rc;
  while ((rc = M(p)->worker_register(p, worker, T0 + 1, &E)) == DX_EEXIST && wall_ms() < until)
    usleep(20000);
  return rc;
}

DX_TEST(pv_worker_register_refuses_a_live_duplicate) {
  char *store = dx_pv_new_store();
  dx_provider_t *p;
  pid_t pid;
  if (!dx_pv_multi_process()) { free(store); return; }
  p = dx_pv_open(store);
  if (!has_liveness(p)) { done(p); free(store); return; }
  pid = dx_pv_spawn_holder(store, "W", 0);
  memset(&E, 0, sizeof E);
  ASSERT_EQ(M(p)->worker_register(p, "W", T0, &E), DX_EEXIST);
  ASSERT(strstr(E.msg, "'W'") != NULL); /* the message names the id */
  CHECK(M(p)->worker_register(p, "V", T0, &E)); /* another id is free */
  dx_pv_kill_holder(pid);
  ASSERT_EQ(register_when_free(p, "W"), 0); /* the dead holder's id is free again */
  M(p)->worker_unregister(p, "W");
  M(p)->worker_unregister(p, "V");
  done(p);
  free(store);
}

DX_TEST(pv_worker_dead_owner_sessions_move_at_once) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t f;
  int64_t until;
  int k;
  pid_t pid;
  if (!dx_pv_multi_process()) { done(p); free(store); return; }
  if (!has_liveness(p)) { done(p); free(store); return; }
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  pid = dx_pv_spawn_holder(store, "A", 1);
  CHECK(M(p)->worker_register(p, "B", T0, &E));
  ASSERT_EQ(take(p, T0 + 1, "B", 10, 0), 0); /* A lives: its session is pinned */
  dx_pv_kill_holder(pid);
  /* long before A's lease or item lock lapse, B claims s1 and reruns A's locked item. Up to
  ** 10 s of real time for the store to see A gone (a database server just started grants
  ** a grace period); the caller's clock stays far inside A's lease. */
  until = wall_ms() + 10000;
  for (k = 0;; k++) {
    f = sfetch(p, T0 + 300 * (1 + k % 20), "B", 10);
    if (f.item.kind || wall_ms() >= until) break;
    usleep(50000);
  }
  ASSERT(f.item.id == 1 || f.item.id == 2); /* A's rerun item is due from the takeover on */
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner ? f.previous_owner : "", "A");
  k = (int)f.item.id;
  fclear(&f);
  ASSERT_STR_EQ(srow(p, "s1").owner, "B");
  f = sfetch(p, T0 + 6500, "B", 10); /* the other one too, inside A's item lock */
  ASSERT_EQ(f.item.id, (uint64_t)(3 - k));
  ASSERT_EQ(f.session_claimed, 0);
  fclear(&f);
  M(p)->worker_unregister(p, "B");
  done(p);
  free(store);
}

/* A dead owner's session whose only row it had locked (so no head is due and nothing claims
** it) is swept: the row is due at once and a peer claims the session; a live owner's locked
** row beside it stays put. */
DX_TEST(pv_worker_dead_owners_locked_session_is_swept) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t f, before, after;
  srow_t s2;
  int64_t until;
  int k;
  pid_t a, c;
  if (!dx_pv_multi_process()) { done(p); free(store); return; }
  if (!has_liveness(p)) { done(p); free(store); return; }
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  a = dx_pv_spawn_holder(store, "A", 1); /* A claims s1 and locks its only row */
  enqueue_work(p, T0, sess_item("J", 1, "s2"));
  c = dx_pv_spawn_holder(store, "C", 1); /* C claims s2 and locks its only row */
  CHECK(M(p)->worker_register(p, "B", T0, &E));
  before = sfetch(p, T0 + 1, "B", 10); /* both live: nothing for B */
  dx_pv_kill_holder(a);
  until = wall_ms() + 10000;
  for (k = 0;; k++) {
    f = sfetch(p, T0 + 300 * (1 + k % 20), "B", 10);
    if (f.item.kind || wall_ms() >= until) break;
    usleep(50000);
  }
  after = sfetch(p, T0 + 6500, "B", 10); /* C lives: s2's row stays locked */
  s2 = srow(p, "s2");
  dx_pv_kill_holder(c); /* before any assertion: a failure leaves no process behind */
  ASSERT_EQ(before.item.kind, 0);
  ASSERT_STR_EQ(f.item.instance ? f.item.instance : "", "I");
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner ? f.previous_owner : "", "A");
  ASSERT_EQ(f.attempt_count, 2);
  ASSERT_EQ(after.item.kind, 0);
  ASSERT_STR_EQ(s2.owner, "C");
  fclear(&before);
  fclear(&f);
  fclear(&after);
  M(p)->worker_unregister(p, "B");
  done(p);
  free(store);
}

/* What a killed worker had locked outside sessions moves at once too: its plain activity row
** and its turn (instance lock) are fetched by a peer long before their locks would lapse, as
** second attempts. */
DX_TEST(pv_worker_dead_lockers_items_move_at_once) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t f;
  dx_orch_item_t *it = NULL;
  int64_t until, now = T0 + 1;
  int k;
  pid_t pid;
  memset(&f, 0, sizeof f);
  if (!dx_pv_multi_process()) { done(p); free(store); return; }
  if (!has_liveness(p)) { done(p); free(store); return; }
  enqueue_work(p, T0, act_item("I", 1, 7));
  enqueue(p, T0, start_item("O"));
  pid = dx_pv_spawn_holder(store, "A", 2);
  CHECK(M(p)->worker_register(p, "B", T0, &E));
  f = wfetch(p, now);
  ASSERT_EQ(f.item.kind, 0); /* A lives: its locks hold */
  ASSERT(fetch(p, now) == NULL);
  dx_pv_kill_holder(pid);
  /* up to 10 s of real time for the store to see A gone (a database server just started
  ** grants a grace period); the caller's clock stays far inside A's locks */
  until = wall_ms() + 10000;
  for (k = 0; (!f.item.kind || !it) && wall_ms() < until; k++) {
    now = T0 + 300 * (1 + k % 20);
    if (!f.item.kind) f = wfetch(p, now);
    if (!it) it = fetch(p, now);
    if (!f.item.kind || !it) usleep(50000);
  }
  ASSERT(now < T0 + LOCK_LONG);
  ASSERT_EQ(f.item.id, 7);
  ASSERT_EQ(f.attempt_count, 2);
  ASSERT(it != NULL);
  ASSERT_STR_EQ(it->instance, "O");
  ASSERT_EQ(it->attempt_count, 2);
  dx_orch_item_free(it);
  fclear(&f);
  M(p)->worker_unregister(p, "B");
  done(p);
  free(store);
}

DX_TEST(pv_session_same_worker_id_restart_owns_at_once) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store), *q;
  dx_work_fetch_t f;
  int k, seen = 0;
  pid_t pid;
  if (!dx_pv_multi_process()) { done(p); free(store); return; }
  if (!has_liveness(p)) { done(p); free(store); return; }
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  enqueue_work(p, T0, sess_item("I", 3, "s1"));
  enqueue_work(p, T0, sess_item("I", 4, "s1"));
  enqueue_work(p, T0 + 2, sess_item("I", 5, "s1"));
  done(p);
  pid = dx_pv_spawn_holder(store, "A", 1); /* A claims s1, locks item 1, then is killed */
  dx_pv_kill_holder(pid);
  q = dx_pv_open(store);
  ASSERT_EQ(register_when_free(q, "A"), 0); /* A restarts with the same id */
  CHECK(M(q)->worker_register(q, "B", T0 + 1, &E));
  take(q, T0 + 1, "B", 10, 0); /* A is live again: s1 stays A's */
  /* the restarted A owns s1 at once and gets the item its predecessor had locked */
  for (k = 0; k < 4; k++) {
    f = sfetch(q, T0 + 1, "A", 10);
    ASSERT(f.item.id >= 1 && f.item.id <= 4);
    ASSERT_EQ(f.session_claimed, 0);
    seen |= 1 << f.item.id;
    fclear(&f);
  }
  ASSERT_EQ(seen, 30); /* items 2..4 and 1 (the predecessor's, due again) */
  /* its lease runs from its own fetch, not from the dead process's claim */
  ASSERT_EQ(srow(q, "s1").locked, T0 + 1 + SLOCK);
  f = sfetch(q, T0 + SLOCK + 5, "A", 10);
  ASSERT_EQ(f.item.id, 5);
  ASSERT_EQ(f.session_claimed, 0);
  fclear(&f);
  ASSERT_EQ(srow(q, "s1").locked, T0 + SLOCK + 5 + SLOCK);
  M(q)->worker_unregister(q, "A");
  M(q)->worker_unregister(q, "B");
  done(q);
  free(store);
}

DX_TEST(pv_session_close_item_on_unowned_session_is_deleted) {
  dx_provider_t *p = fresh();
  dx_work_item_t c1 = sess_item("I", 1, "s1"), c2 = sess_item("I", 3, "s2"), c3;
  dx_work_fetch_t f;
  c1.kind = c2.kind = DX_WI_SESSION_CLOSE;
  c1.name = c2.name = NULL;
  c3 = c2;
  c3.id = 6;
  /* no session row */
  enqueue_work(p, T0, c1);
  take(p, T0, "A", 10, 0);
  ASSERT_EQ(depths(p).worker, 0);
  ASSERT_EQ(sessions_of(p).n, 0);
  /* released session: the close item goes, and the row with it */
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  take_ack(p, T0, "A", 2);
  ASSERT_EQ(release_sessions(p, T0 + 1, "A", NULL), 1);
  enqueue_work(p, T0 + 1, c2);
  enqueue_work(p, T0 + 2, sess_item("I", 4, "s3"));
  ASSERT_EQ(take(p, T0 + 3, "B", 10, 4), 1); /* the close item is skipped, not claimed */
  ASSERT_EQ(sessions_of(p).n, 1);
  ASSERT_STR_EQ(sessions_of(p).v[0].sid, "s3");
  /* the owner gets its close item like any other */
  enqueue_work(p, T0 + 4, c3);
  take(p, T0 + 5, "A", 10, 0);
  f = sfetch(p, T0 + 5, "B", 10);
  ASSERT_EQ(f.item.kind, 0);
  enqueue_work(p, T0 + 6, sess_item("I", 7, "s4"));
  enqueue_work(p, T0 + 6, (c3.session_id = "s4", c3.id = 8, c3));
  ASSERT_EQ(take(p, T0 + 7, "A", 10, 7), 1);
  f = sfetch(p, T0 + 8, "A", 10);
  ASSERT_EQ(f.item.id, 8);
  ASSERT_EQ(f.item.kind, DX_WI_SESSION_CLOSE);
  ASSERT_EQ(f.session_claimed, 0);
  fclear(&f);
  done(p);
}

/* The same inside one batch (LMDB reads a session row queued in the batch in place, and the
** close of an unowned session deletes it through that borrowed row): the close item goes, the
** other session's activity is fetched, nothing is left queued. */
DX_TEST(pv_session_close_item_queued_in_a_batch_on_unowned_session_is_deleted_in_it) {
  dx_provider_t *p = fresh();
  dx_work_item_t c1 = sess_item("O", 1, "s1");
  dx_work_fetch_t f;
  c1.kind = DX_WI_SESSION_CLOSE;
  c1.name = NULL;
  CHECK(M(p)->begin(p, &E));
  enqueue_work(p, T0, c1);
  enqueue_work(p, T0, sess_item("O", 2, "s2"));
  f = sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, NULL, &E));
  fclear(&f);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(depths(p).worker, 0);
  ASSERT_STR_EQ(srow(p, "s2").owner, "A");
  ASSERT_EQ(sessions_of(p).n, 1); /* no row for s1 */
  done(p);
}

DX_TEST(pv_session_expired_item_lock_refetched_by_other_worker) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f, g;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  f = sfetch(p, T0, "A", 10); /* A "crashes": no ack, no renewals */
  take(p, T0 + SLOCK, "B", 10, 0);    /* the lease lapsed, the item lock has not */
  take(p, T0 + LOCK - 1, "B", 10, 0);
  g = sfetch(p, T0 + LOCK, "B", 10);
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  ASSERT_EQ(g.session_claimed, 1);
  ASSERT_STR_EQ(g.previous_owner, "A");
  CHECK_ERR(M(p)->ack_work_item(p, T0 + LOCK + 1, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + LOCK + 1, g.lock_token, NULL, &E));
  fclear(&f);
  fclear(&g);
  ASSERT_EQ(srow(p, "s1").queued, 0);
  done(p);
}

/* Capacity holds for claims made inside one batch: a worker's session count is asked once
** per batch and must follow the claims made since. */
DX_TEST(pv_session_capacity_holds_for_claims_in_one_batch) {
  dx_provider_t *p = fresh();
  char sid[8];
  int i, got = 0;
  for (i = 0; i < 6; i++) {
    snprintf(sid, sizeof sid, "s%d", i);
    enqueue_work(p, T0, sess_item("I", (uint64_t)i + 1, sid));
  }
  ASSERT_EQ(take(p, T0 + 1, "A", 3, 1), 1); /* outside a batch: A owns s0 */
  CHECK(M(p)->begin(p, &E));
  for (i = 0; i < 6; i++) {
    dx_work_fetch_t f = sfetch(p, T0 + 2, "A", 3);
    if (f.item.kind) got++;
    fclear(&f);
  }
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(got, 2); /* s1 and s2: three sessions in all */
  ASSERT_EQ(take(p, T0 + 3, "A", 3, 0), 0);
  ASSERT_EQ(take(p, T0 + 3, "B", 10, 4), 1); /* the rest is left to others */
  done(p);
}

/* A lease that lapses between two fetches of one batch frees its slot for the later fetch,
** and one that has not lapsed still counts (LMDB keeps the batch's session count while no
** counted lease has ended: each fetch brings its own now). */
DX_TEST(pv_session_capacity_in_one_batch_follows_lapsed_leases) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s0"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  enqueue_work(p, T0, sess_item("I", 3, "s2"));
  enqueue_work(p, T0, sess_item("I", 4, "s3"));
  f = sfetch(p, T0, "A", 2); /* A owns s0 until T0 + SLOCK; its item stays locked */
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->begin(p, &E));
  ASSERT_EQ(take(p, T0 + 1, "A", 2, 2), 1);     /* s1: lease until T0 + 1 + SLOCK */
  ASSERT_EQ(take(p, T0 + SLOCK, "A", 2, 3), 1); /* s0's lease lapsed: room for s2 */
  ASSERT_EQ(take(p, T0 + SLOCK, "A", 2, 0), 0); /* s1 and s2 live: at capacity */
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(take(p, T0 + SLOCK, "B", 2, 4), 1); /* s3 was left to others */
  fclear(&f);
  done(p);
}

/* An owner's fetches and acks inside one batch renew its session's lease and note its activity
** each time, as they do in batches of their own (LMDB changes the batch's kept copy of the
** session record in place from the second one on). */
DX_TEST(pv_session_owner_steps_in_one_batch_renew_and_note_activity) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  enqueue_work(p, T0, sess_item("J", 3, "s1")); /* another user of the session */
  take_ack(p, T0, "A", 1); /* A claims s1 */
  CHECK(M(p)->begin(p, &E));
  f = sfetch(p, T0 + 20, "A", 10);
  ASSERT_EQ(f.item.id, 2);
  CHECK(M(p)->ack_work_item(p, T0 + 30, f.lock_token, NULL, &E));
  fclear(&f);
  f = sfetch(p, T0 + 40, "A", 10);
  ASSERT_EQ(f.item.id, 3);
  ASSERT_EQ(f.session_claimed, 0);
  CHECK(M(p)->ack_work_item(p, T0 + 50, f.lock_token, NULL, &E));
  fclear(&f);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_STR_EQ(srow(p, "s1").owner, "A");
  ASSERT_EQ(srow(p, "s1").locked, T0 + 40 + SLOCK);
  ASSERT_EQ(srow(p, "s1").last, T0 + 50);
  ASSERT_EQ(srow(p, "s1").queued, 0);
  ASSERT_EQ(take(p, T0 + 60, "B", 10, 0), 0); /* still A's */
  done(p);
}

/* At capacity a batch's fetches keep seeing its own queue changes: rows queued for, and
** acked from, owned sessions inside the batch (LMDB keeps a copy of the owned sessions' queue
** heads for the batch; it must follow the batch's writes). */
DX_TEST(pv_session_rows_queued_in_a_batch_at_capacity_are_fetched_in_it) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s0"));
  enqueue_work(p, T0, sess_item("I", 2, "s1"));
  take_ack(p, T0 + 1, "A", 1);
  take_ack(p, T0 + 1, "A", 2); /* A owns s0 and s1: its capacity of 2 */
  enqueue_work(p, T0 + 100000, sess_item("I", 3, "s0")); /* not due yet: not idle either */
  enqueue_work(p, T0 + 100000, sess_item("I", 4, "s1"));
  enqueue_work(p, T0 + 2, sess_item("I", 5, "s2"));      /* waits for a worker with room */
  CHECK(M(p)->begin(p, &E));
  ASSERT_EQ(take(p, T0 + 3, "A", 2, 0), 0);
  enqueue_work(p, T0 + 3, sess_item("I", 6, "s1"));
  f = sfetch(p, T0 + 4, "A", 2);
  ASSERT_EQ(f.item.id, 6);
  ASSERT_EQ(f.session_claimed, 0);
  CHECK(M(p)->ack_work_item(p, T0 + 4, f.lock_token, NULL, &E));
  fclear(&f);
  enqueue_work(p, T0 + 4, sess_item("I", 7, "s0"));
  ASSERT_EQ(take(p, T0 + 5, "A", 2, 7), 0);
  ASSERT_EQ(take(p, T0 + 5, "A", 2, 0), 0);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(take(p, T0 + 6, "B", 2, 5), 1); /* s2 was left to others */
  done(p);
}

/* A batch renews a session row's lock and then fetches: the renewed lock holds for the
** batch's own fetches (LMDB keeps the session's moved queue head in memory until the commit;
** the fetch must go by it, not by the head stored before the batch). */
DX_TEST(pv_session_lock_renewed_in_a_batch_holds_for_its_fetches) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f, g;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  f = sfetch(p, T0, "A", 10); /* locked until T0 + LOCK */
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->begin(p, &E));
  CHECK(M(p)->renew_work_item_lock(p, T0 + LOCK - 1, f.lock_token, LOCK, &E));
  ASSERT_EQ(take(p, T0 + LOCK + 1, "A", 10, 0), 0); /* locked until T0 + 2 LOCK - 1 */
  ASSERT_EQ(take(p, T0 + LOCK + 1, "B", 10, 0), 0);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(take(p, T0 + LOCK + 1, "A", 10, 0), 0);
  g = sfetch(p, T0 + 2 * LOCK, "A", 10); /* the renewed lock lapsed: delivered again */
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 2 * LOCK, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + 2 * LOCK, g.lock_token, NULL, &E));
  fclear(&f);
  fclear(&g);
  ASSERT_EQ(srow(p, "s1").queued, 0);
  done(p);
}

/* Session rows a turn queues inside a batch and rows stored before it are fetched in due
** order by the batch (LMDB merges the queue heads the batch changed into its walk of the
** stored ones); a session whose only row the batch acked offers nothing more. */
DX_TEST(pv_session_rows_queued_in_a_batch_are_fetched_in_due_order) {
  dx_provider_t *p = fresh();
  dx_work_item_t w = sess_item("O", 1, "early");
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_work_fetch_t f;
  enqueue(p, T0, start_item("O"));
  enqueue_work(p, T0, sess_item("I", 7, "done"));
  enqueue_work(p, T0 + 50, sess_item("I", 8, "late"));
  it = fetch(p, T0 + 1);
  ASSERT(it);
  CHECK(M(p)->begin(p, &E));
  f = sfetch(p, T0 + 2, "A", 10);
  ASSERT_EQ(f.item.id, 7);
  CHECK(M(p)->ack_work_item(p, T0 + 3, f.lock_token, NULL, &E));
  fclear(&f);
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = &w;
  a.worker_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 10, &a, &E)); /* "early" is due at T0 + 10 */
  dx_orch_item_free(it);
  ASSERT_EQ(take(p, T0 + 60, "A", 10, 1), 1); /* before "late" (T0 + 50) */
  ASSERT_EQ(take(p, T0 + 60, "A", 10, 8), 1);
  ASSERT_EQ(take(p, T0 + 60, "A", 10, 0), 0);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(srow(p, "early").queued, 1);
  ASSERT_STR_EQ(srow(p, "early").owner, "A");
  ASSERT_EQ(srow(p, "late").queued, 1);
  ASSERT_EQ(take(p, T0 + 61, "B", 10, 0), 0);
  done(p);
}

/* What a rolled-back batch did to sessions (claims, locks, acks) is gone, and nothing of it
** reaches the store with the next batch's commit. */
DX_TEST(pv_session_changes_of_a_rolled_back_batch_are_gone) {
  dx_provider_t *p = fresh();
  dx_work_fetch_t f;
  enqueue_work(p, T0, sess_item("I", 1, "s1"));
  enqueue_work(p, T0, sess_item("I", 2, "s2"));
  CHECK(M(p)->begin(p, &E));
  f = sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, NULL, &E));
  fclear(&f);
  ASSERT_EQ(take(p, T0 + 2, "A", 10, 2), 1);
  M(p)->rollback(p);
  CHECK(M(p)->begin(p, &E));
  enqueue_work(p, T0 + 3, act_item("P", 1, 3));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(srow(p, "s1").queued, 1);
  ASSERT_STR_EQ(srow(p, "s1").owner, "");
  ASSERT_STR_EQ(srow(p, "s2").owner, "");
  ASSERT_EQ(take(p, T0 + 4, "B", 10, 1), 1); /* B claims s1: its row was never acked */
  ASSERT_EQ(take(p, T0 + 4, "B", 10, 2), 1);
  done(p);
}

/* In one batch: a turn's ack queues session rows (for the "I" instance's sessions), then the
** batch fetches and acks. Returns after the orchestration ack; the caller goes on in the batch. */
static void queue_in_batch(dx_provider_t *p, int64_t now, dx_work_item_t *w, size_t n) {
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  enqueue(p, now, start_item("O"));
  it = fetch(p, now);
  ASSERT(it);
  CHECK(M(p)->begin(p, &E));
  a = ack_of(it);
  a.delta = delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = w;
  a.worker_items_len = n;
  CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  dx_orch_item_free(it);
}

/* A session row queued, fetched and acked inside one batch leaves nothing behind (LMDB keeps
** such rows in memory for the batch: its ack must drop it there, and the commit must not
** store it); rows of the batch left queued or locked are stored by the commit as they are. */
DX_TEST(pv_session_rows_of_a_batch_are_stored_as_the_batch_left_them) {
  dx_provider_t *p = fresh();
  dx_work_item_t w[3] = {sess_item("O", 1, "s1"), sess_item("O", 2, "s2"), sess_item("O", 3, "s3")};
  dx_work_fetch_t f, g;
  queue_in_batch(p, T0, w, 3);
  f = sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 1, f.lock_token, NULL, &E));
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 1, f.lock_token, NULL, &E), DX_ELOCK); /* gone */
  fclear(&f);
  g = sfetch(p, T0 + 2, "A", 10); /* s2's row: locked when the batch commits */
  ASSERT_EQ(g.item.id, 2);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(srow(p, "s1").queued, 0);
  ASSERT_EQ(srow(p, "s2").queued, 1);
  ASSERT_EQ(srow(p, "s2").running, 1);
  ASSERT_EQ(srow(p, "s3").queued, 1);
  ASSERT_EQ(srow(p, "s3").running, 0);
  take_ack(p, T0 + 3, "B", 3); /* s3's row, stored unlocked */
  ASSERT_EQ(take(p, T0 + 3, "B", 10, 0), 0); /* s2's row is locked by A */
  CHECK(M(p)->ack_work_item(p, T0 + 4, g.lock_token, NULL, &E)); /* its lock was stored */
  fclear(&g);
  ASSERT_EQ(srow(p, "s2").queued, 0);
  ASSERT_EQ(take(p, T0 + LOCK + 10, "A", 10, 0), 0); /* nothing came back */
  done(p);
}

/* A method of the batch that is not one of the store cycle's (abandon) sees a session row
** the batch queued and locked, and the batch's next fetch sees what it did. */
DX_TEST(pv_session_row_of_a_batch_is_seen_by_its_other_methods) {
  dx_provider_t *p = fresh();
  dx_work_item_t w[1] = {sess_item("O", 1, "s1")};
  dx_work_fetch_t f, g;
  queue_in_batch(p, T0, w, 1);
  f = sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->abandon_work_item(p, T0 + 2, f.lock_token, 0, 0, &E));
  g = sfetch(p, T0 + 3, "A", 10);
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 3, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + 3, g.lock_token, NULL, &E));
  CHECK(M(p)->commit(p, 1, &E));
  fclear(&f);
  fclear(&g);
  ASSERT_EQ(srow(p, "s1").queued, 0);
  ASSERT_EQ(take(p, T0 + LOCK + 10, "A", 10, 0), 0);
  done(p);
}

/* A claim starts a new ownership epoch: the session's rows an earlier owner locked are due at
** once, also when they were queued and locked inside the same batch. */
DX_TEST(pv_session_claim_in_a_batch_frees_rows_locked_earlier_in_it) {
  dx_provider_t *p = fresh();
  dx_work_item_t w[2] = {sess_item("O", 1, "s1"), sess_item("O", 2, "s1")};
  dx_work_fetch_t f, g;
  queue_in_batch(p, T0, w, 2);
  f = sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(release_sessions(p, T0 + 2, "A", "s1"), 1);
  g = sfetch(p, T0 + 3, "B", 10); /* claims s1: row 2 */
  ASSERT_EQ(g.item.id, 2);
  ASSERT_EQ(g.session_claimed, 1);
  ASSERT_EQ(take(p, T0 + 3, "B", 10, 1), 0); /* row 1: A's lock ended with the claim */
  CHECK(M(p)->commit(p, 1, &E));
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 4, f.lock_token, NULL, &E), DX_ELOCK);
  fclear(&f);
  fclear(&g);
  done(p);
}

/* Activity results acked inside a batch: the batch's own fetch delivers them (LMDB keeps such
** messages in memory for the batch), its turn's ack consumes them there, and what the batch
** left queued is stored by its commit; a method outside the store cycle (the queue depths)
** sees them inside the batch too. */
DX_TEST(pv_results_of_a_batch_are_stored_as_the_batch_left_them) {
  dx_provider_t *p = fresh();
  dx_work_item_t d1 = act_done("I1", 1, 1), d2 = act_done("I2", 1, 1);
  dx_work_fetch_t f1, f2;
  dx_orch_item_t *it;
  char first[8];
  create_instance(p, T0, "I1");
  create_instance(p, T0, "I2");
  enqueue_work(p, T0, act_item("I1", 1, 1));
  enqueue_work(p, T0, act_item("I2", 1, 1));
  f1 = wfetch(p, T0 + 1);
  f2 = wfetch(p, T0 + 1);
  ASSERT(f1.item.kind && f2.item.kind);
  CHECK(M(p)->begin(p, &E));
  CHECK(M(p)->ack_work_item(p, T0 + 2, f1.item.instance[1] == '1' ? f1.lock_token : f2.lock_token,
                            &d1, &E));
  CHECK(M(p)->ack_work_item(p, T0 + 2, f1.item.instance[1] == '2' ? f1.lock_token : f2.lock_token,
                            &d2, &E));
  it = fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  ASSERT_STR_EQ(it->messages[0].data, "\"out\"");
  snprintf(first, sizeof first, "%s", it->instance);
  turn(p, T0 + 4, it, 1); /* consumes it */
  ASSERT_EQ(depths(p).orchestrator, 1); /* the other result, seen by a nested method */
  CHECK(M(p)->commit(p, 1, &E));
  fclear(&f1);
  fclear(&f2);
  ASSERT_EQ(depths(p).orchestrator, 1);
  it = fetch(p, T0 + 5);
  ASSERT(it);
  ASSERT(strcmp(it->instance, first) != 0);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  turn(p, T0 + 6, it, 1);
  ASSERT_EQ(depths(p).orchestrator, 0);
  ASSERT(fetch(p, T0 + LOCK + 10) == NULL);
  done(p);
}

/* A result acked in a batch whose fetch then abandons the instance (a failed turn) is
** delivered again, and a rolled-back batch's results are gone with it. */
DX_TEST(pv_results_of_a_batch_follow_abandon_and_rollback) {
  dx_provider_t *p = fresh();
  dx_work_item_t d = act_done("I1", 1, 1);
  dx_work_fetch_t f;
  dx_orch_item_t *it;
  create_instance(p, T0, "I1");
  enqueue_work(p, T0, act_item("I1", 1, 1));
  f = wfetch(p, T0 + 1);
  ASSERT(f.item.kind);
  CHECK(M(p)->begin(p, &E));
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, &d, &E));
  it = fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 3, it->instance, it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  it = fetch(p, T0 + 4);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  M(p)->rollback(p);
  dx_orch_item_free(it);
  ASSERT_EQ(depths(p).orchestrator, 0); /* the ack was rolled back: its result is gone */
  CHECK(M(p)->ack_work_item(p, T0 + 5, f.lock_token, &d, &E)); /* still locked: ack again */
  fclear(&f);
  it = fetch(p, T0 + 6);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  turn(p, T0 + 7, it, 1);
  ASSERT_EQ(depths(p).orchestrator, 0);
  done(p);
}

DX_TEST(pv_session_fetch_skips_many_rows_of_sessions_held_elsewhere) {
  dx_provider_t *p = fresh();
  enum { N = 3000 };
  int i;
  CHECK(M(p)->begin(p, &E));
  enqueue_work(p, T0, sess_item("I", 1, "big"));
  take(p, T0, "B", 10, 1);
  for (i = 0; i < N; i++) enqueue_work(p, T0, sess_item("I", (uint64_t)i + 10, "big"));
  CHECK(M(p)->commit(p, 1, &E));
  enqueue_work(p, T0 + 1, sess_item("I", 2, "other"));
  enqueue_work(p, T0 + 2, act_item("P", 1, 3));
  ASSERT_EQ(take(p, T0 + 3, "A", 10, 2), 1);
  take(p, T0 + 3, "A", 10, 3);
  take(p, T0 + 3, "A", 10, 0);
  ASSERT_EQ(srow(p, "big").queued, N + 1);
  ASSERT_EQ(take(p, T0 + 3, "B", 10, 10), 0);
  done(p);
}

enum { RACE_ITEMS = 20 };

static void session_race_child(const char *store, int idx, int fd) {
  dx_provider_t *p = dx_pv_open(store);
  dx_session_cfg_t cfg;
  char worker[16];
  int empty = 0;
  snprintf(worker, sizeof worker, "W%d", idx);
  memset(&cfg, 0, sizeof cfg);
  cfg.worker_id = worker;
  cfg.session_lock_ms = 600000;
  cfg.max_sessions = 1000;
  while (empty < 40) {
    dx_work_fetch_t f;
    char line[48];
    int n;
    CHILD_CHECK(M(p)->fetch_work_item(p, wall_ms(), 600000, &cfg, &f, &E) == 0);
    if (f.item.kind == 0) {
      empty++;
      usleep(500);
      continue;
    }
    empty = 0;
    CHILD_CHECK(M(p)->ack_work_item(p, wall_ms(), f.lock_token, NULL, &E) == 0);
    n = snprintf(line, sizeof line, "%d %llu\n", idx, (unsigned long long)f.item.id);
    CHILD_CHECK(write(fd, line, (size_t)n) == n);
    dx_work_item_clear(&f.item);
    free(f.previous_owner);
  }
  done(p);
}

DX_TEST(pv_session_multi_process_claim_race) {
  char *store = dx_pv_new_store(), *out, *s;
  dx_provider_t *p;
  static int seen[RACE_ITEMS + 1];
  int i, owner = -1, total = 0;
  srows_t r;
  if (!dx_pv_multi_process()) { free(store); return; }
  p = dx_pv_open(store);
  CHECK(M(p)->begin(p, &E));
  for (i = 1; i <= RACE_ITEMS; i++) enqueue_work(p, wall_ms(), sess_item("I", (uint64_t)i, "race"));
  CHECK(M(p)->commit(p, 1, &E));
  done(p);
  out = run_children(store, 2, session_race_child);
  for (s = strtok(out, "\n"); s; s = strtok(NULL, "\n")) {
    int who, id;
    ASSERT(sscanf(s, "%d %d", &who, &id) == 2);
    ASSERT(id >= 1 && id <= RACE_ITEMS);
    if (owner < 0) owner = who;
    ASSERT_EQ(who, owner); /* one process got every item of the session */
    seen[id]++;
    total++;
  }
  free(out);
  ASSERT_EQ(total, RACE_ITEMS);
  for (i = 1; i <= RACE_ITEMS; i++) ASSERT_EQ(seen[i], 1);
  p = dx_pv_open(store);
  r = sessions_of(p);
  ASSERT_EQ(r.n, 1);
  ASSERT_EQ(r.v[0].owner[0], 'W');
  ASSERT_EQ(r.v[0].owner[1] - '0', owner);
  ASSERT_EQ(r.v[0].queued, 0);
  done(p);
  free(store);
}
