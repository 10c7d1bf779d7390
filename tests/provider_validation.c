/*
** provider_validation.c -- provider contract tests (duroxide semantics §4, §8.3): the suite's
** shared fixtures (dx_pv_*, declared in provider_validation.h), the orchestrator queue, the
** worker queue, reads and management.
**
** Vtable only: every provider's test program links this file and its siblings
** (provider_validation_*.c: group commit and several processes, sessions, fencing, ...) and
** defines the hooks of provider_validation.h. Time is virtual (now_ms is passed explicitly);
** nothing sleeps except the multi-process tests, which run on the wall clock with long locks.
*/
#include <time.h>
#include <string.h>

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

void dx_pv_done(dx_provider_t *p) { M(p)->destroy(p); }

dx_work_item_t dx_pv_wi(int kind, const char *inst, uint64_t exec, uint64_t id) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = kind;
  w.instance = (char *)inst;
  w.execution_id = exec;
  w.id = id;
  return w;
}

dx_work_item_t dx_pv_start_item(const char *inst) {
  dx_work_item_t w = dx_pv_wi(DX_WI_START, inst, 1, 0);
  w.name = "Orch";
  w.version = "1.0.0";
  w.data = "{\"x\":1}";
  return w;
}

dx_work_item_t dx_pv_raise_item(const char *inst) {
  dx_work_item_t w = dx_pv_wi(DX_WI_EXTERNAL, inst, 0, 0);
  w.name = "go";
  w.data = "true";
  return w;
}

dx_work_item_t dx_pv_act_item(const char *inst, uint64_t exec, uint64_t id) {
  dx_work_item_t w = dx_pv_wi(DX_WI_ACT_EXECUTE, inst, exec, id);
  w.name = "Act";
  w.data = "\"in\"";
  return w;
}

dx_work_item_t dx_pv_act_done(const char *inst, uint64_t exec, uint64_t id) {
  dx_work_item_t w = dx_pv_wi(DX_WI_ACT_COMPLETED, inst, exec, id);
  w.data = "\"out\"";
  return w;
}

void dx_pv_enqueue(dx_provider_t *p, int64_t now, dx_work_item_t w) {
  CHECK(M(p)->enqueue_for_orchestrator(p, now, &w, 0, &E));
}

void dx_pv_enqueue_work(dx_provider_t *p, int64_t now, dx_work_item_t w) {
  CHECK(M(p)->enqueue_for_worker(p, now, &w, &E));
}

dx_orch_item_t *dx_pv_fetch(dx_provider_t *p, int64_t now) {
  dx_orch_item_t *it = (dx_orch_item_t *)1;
  CHECK(M(p)->fetch_orchestration_item(p, now, LOCK, &it, &E));
  return it;
}

dx_work_fetch_t dx_pv_wfetch(dx_provider_t *p, int64_t now) {
  dx_work_fetch_t f;
  CHECK(M(p)->fetch_work_item(p, now, LOCK, NULL, &f, &E));
  return f;
}

/* `n` events continuing the item's history: ORCH_STARTED first for a new execution. */
const dx_event_t *dx_pv_delta(dx_event_t *ev, size_t n, const dx_orch_item_t *it) {
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
dx_orch_ack_t dx_pv_ack_of(const dx_orch_item_t *it) {
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
void dx_pv_turn(dx_provider_t *p, int64_t now, dx_orch_item_t *it, size_t n) {
  dx_event_t ev[8];
  dx_orch_ack_t a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, n, it);
  a.delta_len = n;
  CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  dx_orch_item_free(it);
}

/* Start `inst` and commit its first turn at `now`. */
void dx_pv_create_instance(dx_provider_t *p, int64_t now, const char *inst) {
  dx_orch_item_t *it;
  dx_pv_enqueue(p, now, dx_pv_start_item(inst));
  it = dx_pv_fetch(p, now);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, inst);
  dx_pv_turn(p, now, it, 1);
}

dx_queue_depths_t dx_pv_depths(dx_provider_t *p) {
  dx_queue_depths_t d;
  CHECK(M(p)->get_queue_depths(p, &d, &E));
  return d;
}

size_t dx_pv_history_len(dx_provider_t *p, const char *inst, uint64_t exec) {
  dx_event_t *ev;
  size_t n;
  CHECK(M(p)->read_history(p, inst, exec, &ev, &n, NULL, &E));
  dx_events_free(ev, n);
  return n;
}

int64_t dx_pv_next_due(dx_provider_t *p, int64_t now) {
  int64_t due;
  CHECK(M(p)->next_due_ms(p, now, &due, &E));
  return due;
}

int64_t dx_pv_wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* {===== orchestrator queue =====} */

/* 1 when `id` has an instance record (a first turn was acked); a queued start is found
** with status NONE and has none. */
int dx_pv_has_record(dx_provider_t *p, const char *id) {
  dx_instance_info_t info;
  dx_error_t err;
  int rc = M(p)->get_instance_info(p, id, &info, &err);
  int found = rc == DX_OK && info.status != DX_STATUS_NONE;
  if (rc != DX_OK && rc != DX_ENOTFOUND) DX_FAIL_AT("get_instance_info: %s", err.msg);
  dx_instance_info_clear(&info);
  return found;
}

DX_TEST(pv_start_fetch_ack_creates_instance) {
  dx_provider_t *p = dx_pv_fresh();
  dx_instance_info_t info;
  dx_orch_item_t *it;
  dx_event_t *ev;
  size_t n;
  uint64_t exec = 0;
  dx_pv_enqueue(p, T0, dx_pv_start_item("i1"));
  ASSERT(!dx_pv_has_record(p, "i1")); /* enqueue never creates the record */
  CHECK(M(p)->get_instance_info(p, "i1", &info, &E)); /* but a queued start is found */
  ASSERT_EQ(info.status, DX_STATUS_NONE);
  dx_instance_info_clear(&info);
  it = dx_pv_fetch(p, T0);
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
  dx_pv_turn(p, T0 + 1, it, 2);
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
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  ASSERT_EQ(dx_pv_depths(p).instances, 1);
  ASSERT(dx_pv_fetch(p, T0 + 2) == NULL);
  dx_pv_done(p);
}

DX_TEST(pv_empty_store_has_nothing) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f = dx_pv_wfetch(p, T0);
  dx_queue_depths_t d = dx_pv_depths(p);
  ASSERT(dx_pv_fetch(p, T0) == NULL);
  ASSERT_EQ(f.item.kind, 0);
  ASSERT_EQ(dx_pv_next_due(p, T0), INT64_MAX);
  ASSERT_EQ(d.orchestrator + d.worker + d.instances, 0);
  dx_pv_done(p);
}

DX_TEST(pv_instance_lock_is_exclusive) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *a, *b;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  dx_pv_enqueue(p, T0 + 1, dx_pv_start_item("B"));
  a = dx_pv_fetch(p, T0 + 10);
  ASSERT(a);
  ASSERT_STR_EQ(a->instance, "A"); /* oldest message first */
  dx_pv_enqueue(p, T0 + 11, dx_pv_raise_item("A"));
  b = dx_pv_fetch(p, T0 + 12); /* A is locked although it has a new message */
  ASSERT(b);
  ASSERT_STR_EQ(b->instance, "B");
  ASSERT_NE(a->lock_token, b->lock_token);
  ASSERT(dx_pv_fetch(p, T0 + 13) == NULL);
  dx_pv_turn(p, T0 + 14, a, 1);
  dx_pv_turn(p, T0 + 14, b, 1);
  dx_pv_done(p);
}

DX_TEST(pv_messages_after_fetch_survive_ack) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  dx_pv_enqueue(p, T0 + 1, dx_pv_raise_item("A"));
  dx_pv_turn(p, T0 + 2, it, 1);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1);
  it = dx_pv_fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_EXTERNAL);
  ASSERT_EQ(it->history_len, 1);
  ASSERT_EQ(it->attempt_count, 1);
  dx_pv_turn(p, T0 + 4, it, 1);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  ASSERT_EQ(dx_pv_history_len(p, "A", 0), 2);
  dx_pv_done(p);
}

DX_TEST(pv_lock_expiry_redelivers) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it, *again;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  ASSERT(dx_pv_fetch(p, T0 + LOCK - 1) == NULL);
  again = dx_pv_fetch(p, T0 + LOCK);
  ASSERT(again);
  ASSERT_STR_EQ(again->instance, "A");
  ASSERT_EQ(again->attempt_count, 2);
  ASSERT_EQ(again->messages_len, 1);
  ASSERT_NE(again->lock_token, it->lock_token);
  a = dx_pv_ack_of(it);
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + LOCK + 1, &a, &E), DX_ETOKEN);
  dx_pv_turn(p, T0 + LOCK + 1, again, 1);
  dx_orch_item_free(it);
  dx_pv_done(p);
}

DX_TEST(pv_renew_orchestration_lock) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  CHECK(M(p)->renew_orchestration_item_lock(p, T0 + LOCK - 1, "A", it->lock_token, LOCK, &E));
  ASSERT(dx_pv_fetch(p, T0 + LOCK + 10) == NULL); /* still locked: renewed */
  CHECK_ERR(M(p)->renew_orchestration_item_lock(p, T0, "A", it->lock_token + 1, LOCK, &E),
            DX_ETOKEN);
  CHECK_ERR(M(p)->renew_orchestration_item_lock(p, T0 + 2 * LOCK, "A", it->lock_token, LOCK, &E),
            DX_ELOCK);
  dx_orch_item_free(it);
  dx_pv_done(p);
}

DX_TEST(pv_abandon_delays_and_ignores_attempt) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  CHECK_ERR(M(p)->abandon_orchestration_item(p, T0 + 1, "A", it->lock_token + 1, 0, 0, &E),
            DX_ETOKEN);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 1, "A", it->lock_token, 1000, 0, &E));
  dx_orch_item_free(it);
  ASSERT(dx_pv_fetch(p, T0 + 500) == NULL);
  ASSERT_EQ(dx_pv_next_due(p, T0 + 500), T0 + 1001);
  it = dx_pv_fetch(p, T0 + 1001);
  ASSERT(it);
  ASSERT_EQ(it->attempt_count, 2);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 1002, "A", it->lock_token, 0, 1, &E));
  dx_orch_item_free(it);
  it = dx_pv_fetch(p, T0 + 1003); /* abandon without delay: visible at once */
  ASSERT(it);
  ASSERT_EQ(it->attempt_count, 2); /* 2, undone to 1, fetched to 2 */
  dx_pv_turn(p, T0 + 1004, it, 1);
  dx_pv_done(p);
}

DX_TEST(pv_attempt_count_is_batch_max) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  CHECK(M(p)->abandon_orchestration_item(p, T0, "A", it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  dx_pv_enqueue(p, T0 + 1, dx_pv_raise_item("A"));
  it = dx_pv_fetch(p, T0 + 2);
  ASSERT_EQ(it->messages_len, 2);
  ASSERT_EQ(it->messages[0].kind, DX_WI_START); /* oldest first */
  ASSERT_EQ(it->attempt_count, 2);
  dx_pv_turn(p, T0 + 3, it, 1);
  dx_pv_done(p);
}

DX_TEST(pv_ack_with_wrong_token_changes_nothing) {
  dx_provider_t *p = dx_pv_fresh();
  dx_instance_info_t info;
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  a.lock_token = it->lock_token ^ 0x5555;
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E), DX_ETOKEN);
  a.instance = "nobody";
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 1, &a, &E), DX_ETOKEN);
  ASSERT(!dx_pv_has_record(p, "A"));
  CHECK_ERR(M(p)->get_instance_info(p, "nobody", &info, &E), DX_ENOTFOUND);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1);
  ASSERT(dx_pv_fetch(p, T0 + 2) == NULL); /* the real lock is still held */
  dx_pv_turn(p, T0 + 3, it, 1);
  dx_pv_done(p);
}

DX_TEST(pv_ack_after_lock_expiry_fails) {
  dx_provider_t *p = dx_pv_fresh();
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + LOCK, &a, &E), DX_ELOCK);
  ASSERT_CONTAINS(E.msg, "expired");
  ASSERT(!dx_pv_has_record(p, "A"));
  dx_orch_item_free(it);
  it = dx_pv_fetch(p, T0 + LOCK);
  ASSERT(it);
  ASSERT_EQ(it->attempt_count, 2);
  dx_pv_turn(p, T0 + LOCK, it, 1);
  dx_pv_done(p);
}

DX_TEST(pv_failed_ack_is_atomic) {
  dx_provider_t *p = dx_pv_fresh();
  dx_event_t ev[2];
  dx_work_item_t work = dx_pv_act_item("A", 1, 3), child = dx_pv_start_item("child");
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_queue_depths_t d;
  dx_pv_create_instance(p, T0, "A");
  dx_pv_enqueue(p, T0 + 1, dx_pv_raise_item("A"));
  it = dx_pv_fetch(p, T0 + 2);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 2, it);
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
  ASSERT_EQ(dx_pv_history_len(p, "A", 1), 1);
  d = dx_pv_depths(p);
  ASSERT_EQ(d.worker, 0);
  ASSERT_EQ(d.orchestrator, 1); /* the raise, still locked; no child start */
  ASSERT(dx_pv_fetch(p, T0 + 4) == NULL);
  ev[1].event_id = 3;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 5, &a, &E));
  dx_orch_item_free(it);
  d = dx_pv_depths(p);
  ASSERT_EQ(d.worker, 1);
  ASSERT_EQ(d.orchestrator, 1); /* the child's start */
  ASSERT_EQ(dx_pv_history_len(p, "A", 1), 3);
  dx_pv_done(p);
}

DX_TEST(pv_timer_invisible_until_fire_time) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t timer = dx_pv_wi(DX_WI_TIMER_FIRED, "A", 1, 2);
  dx_event_t ev[2];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 2, it);
  ev[1].kind = DX_EV_TIMER_CREATED;
  ev[1].fire_at_ms = T0 + 60000;
  a.delta_len = 2;
  timer.fire_at_ms = T0 + 60000;
  a.orch_items = &timer;
  a.orch_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  ASSERT(dx_pv_fetch(p, T0 + 59999) == NULL);
  ASSERT_EQ(dx_pv_next_due(p, T0 + 1), T0 + 60000);
  it = dx_pv_fetch(p, T0 + 60000);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_TIMER_FIRED);
  ASSERT_EQ(it->messages[0].fire_at_ms, T0 + 60000);
  ASSERT_EQ(it->messages[0].id, 2);
  ASSERT_EQ(it->history_len, 2);
  dx_pv_turn(p, T0 + 60001, it, 1);
  dx_pv_done(p);
}

DX_TEST(pv_enqueue_delay_and_limits) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w = dx_pv_start_item("A");
  size_t big = DX_MAX_PAYLOAD_BYTES + 1;
  char *data = malloc(big + 3);
  CHECK(M(p)->enqueue_for_orchestrator(p, T0, &w, 5000, &E));
  ASSERT(dx_pv_fetch(p, T0 + 4999) == NULL);
  ASSERT_EQ(dx_pv_next_due(p, T0), T0 + 5000);
  dx_orch_item_free(dx_pv_fetch(p, T0 + 5000));
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
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1);
  dx_pv_done(p);
}

/* The contract's uniqueness rule: a START for an id that is queued or exists is DX_EEXIST,
** writes nothing, and leaves a batch usable (the client relies on it instead of reading). */
DX_TEST(pv_start_of_a_taken_id_is_eexist) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w = dx_pv_start_item("A");
  dx_pv_enqueue(p, T0, w);
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EEXIST); /* start queued */
  ASSERT_CONTAINS(E.msg, "'A'");
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1);
  CHECK(M(p)->begin(p, &E));
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EEXIST);
  dx_pv_enqueue(p, T0, dx_pv_start_item("B"));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 2);
  dx_orch_item_free(dx_pv_fetch(p, T0 + 1)); /* A and B are taken by a worker */
  dx_orch_item_free(dx_pv_fetch(p, T0 + 1));
  dx_pv_create_instance(p, T0 + 2, "C");
  w.instance = "C";
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0 + 3, &w, 0, &E), DX_EEXIST);
  dx_pv_enqueue(p, T0 + 3, dx_pv_raise_item("C")); /* other messages to a taken id are fine */
  dx_pv_done(p);
}

DX_TEST(pv_orphan_messages_do_not_block_the_queue) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_pv_enqueue(p, T0, dx_pv_raise_item("ghost")); /* never started */
  dx_pv_enqueue(p, T0 + 1, dx_pv_start_item("real"));
  it = dx_pv_fetch(p, T0 + 2);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "real");
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1); /* the ghost's raise was dropped */
  ASSERT(dx_pv_fetch(p, T0 + 3) == NULL);
  dx_pv_turn(p, T0 + 4, it, 1);
  dx_pv_done(p);
}

/* A start handed back with a delay (a worker without the orchestration) is not an orphan:
** an event and a cancel sent meanwhile wait for it and come in its first batch (issue 7.1). */
DX_TEST(pv_messages_wait_for_a_start_handed_back) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_work_item_t cancel = dx_pv_wi(DX_WI_CANCEL, "A", 0, 0);
  cancel.data = "stop";
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 1, "A", it->lock_token, 1000, 0, &E));
  dx_orch_item_free(it);
  dx_pv_enqueue(p, T0 + 2, dx_pv_raise_item("A"));
  dx_pv_enqueue(p, T0 + 3, cancel);
  ASSERT(dx_pv_fetch(p, T0 + 4) == NULL); /* nothing to hand out before the start is visible */
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 3); /* ... and nothing was dropped */
  ASSERT_EQ(dx_pv_next_due(p, T0 + 4), T0 + 1001);
  ASSERT(dx_pv_fetch(p, T0 + 500) == NULL);
  it = dx_pv_fetch(p, T0 + 1001);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 3);
  ASSERT_EQ(it->messages[0].kind, DX_WI_START);
  ASSERT_EQ(it->messages[1].kind, DX_WI_EXTERNAL);
  ASSERT_EQ(it->messages[2].kind, DX_WI_CANCEL);
  dx_pv_turn(p, T0 + 1002, it, 1);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  dx_pv_done(p);
}

DX_TEST(pv_sub_orchestration_completion_routes_to_parent) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t start = dx_pv_start_item("P::sub::2"),
                 reply = dx_pv_wi(DX_WI_SUB_COMPLETED, "P", 1, 2);
  dx_instance_info_t info;
  dx_event_t ev[2];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("P"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 2, it);
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

  it = dx_pv_fetch(p, T0 + 2);
  ASSERT_STR_EQ(it->instance, "P::sub::2");
  ASSERT_STR_EQ(it->messages[0].parent_instance, "P");
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 2, it);
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

  it = dx_pv_fetch(p, T0 + 4);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "P");
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_SUB_COMPLETED);
  ASSERT_EQ(it->messages[0].id, 2);
  ASSERT_STR_EQ(it->messages[0].data, "42");
  dx_pv_turn(p, T0 + 5, it, 1);
  CHECK(M(p)->get_instance_info(p, "P::sub::2", &info, &E));
  ASSERT_STR_EQ(info.parent_instance, "P");
  ASSERT_EQ(info.status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "42");
  dx_instance_info_clear(&info);
  dx_pv_done(p);
}

DX_TEST(pv_continue_as_new_starts_execution_2) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t can = dx_pv_wi(DX_WI_CAN, "A", 1, 0);
  dx_instance_info_t info;
  dx_event_t ev[2], *hist;
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  size_t n;
  uint64_t exec;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 2, it);
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

  it = dx_pv_fetch(p, T0 + 2);
  ASSERT_EQ(it->messages[0].kind, DX_WI_CAN);
  ASSERT_EQ(it->execution_id, 1); /* the runtime starts execution 2 in this turn */
  ASSERT_EQ(it->history_len, 2);
  a = dx_pv_ack_of(it);
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
  ASSERT_EQ(dx_pv_history_len(p, "A", 1), 2);
  CHECK(M(p)->get_instance_info(p, "A", &info, &E));
  ASSERT_EQ(info.current_execution_id, 2);
  ASSERT_EQ(info.status, DX_STATUS_RUNNING);
  ASSERT_STR_EQ(info.orchestration_version, "2.0.0");
  dx_instance_info_clear(&info);
  dx_pv_done(p);
}

/* {===== worker queue =====} */

DX_TEST(pv_worker_fetch_and_ack) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t done_item = dx_pv_act_done("A", 1, 5);
  dx_work_fetch_t f, none;
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("A", 1, 5));
  f = dx_pv_wfetch(p, T0);
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  ASSERT_STR_EQ(f.item.instance, "A");
  ASSERT_EQ(f.item.id, 5);
  ASSERT_STR_EQ(f.item.data, "\"in\"");
  ASSERT_EQ(f.attempt_count, 1);
  ASSERT_NE(f.lock_token, 0);
  none = dx_pv_wfetch(p, T0 + 1);
  ASSERT_EQ(none.item.kind, 0);
  ASSERT_EQ(dx_pv_depths(p).worker, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, &done_item, &E));
  ASSERT_EQ(dx_pv_depths(p).worker, 0);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 3, f.lock_token, NULL, &E), DX_ELOCK);
  dx_work_item_clear(&f.item);
  dx_pv_done(p);
}

DX_TEST(pv_worker_ack_enqueues_completion) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t done_item = dx_pv_act_done("A", 1, 2);
  dx_event_t ev[2];
  dx_work_item_t work = dx_pv_act_item("A", 1, 2);
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 2, it);
  ev[1].kind = DX_EV_ACT_SCHEDULED;
  a.delta_len = 2;
  a.worker_items = &work;
  a.worker_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  ASSERT(dx_pv_fetch(p, T0 + 1) == NULL);
  f = dx_pv_wfetch(p, T0 + 1);
  ASSERT_EQ(f.item.id, 2);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, &done_item, &E));
  dx_work_item_clear(&f.item);
  it = dx_pv_fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  ASSERT_STR_EQ(it->messages[0].data, "\"out\"");
  dx_pv_turn(p, T0 + 4, it, 1);
  dx_pv_done(p);
}

DX_TEST(pv_worker_fifo_order) {
  dx_provider_t *p = dx_pv_fresh();
  uint64_t id;
  for (id = 1; id <= 3; id++) dx_pv_enqueue_work(p, T0, dx_pv_act_item("A", 1, id));
  for (id = 1; id <= 3; id++) {
    dx_work_fetch_t f = dx_pv_wfetch(p, T0);
    ASSERT_EQ(f.item.id, id);
    dx_work_item_clear(&f.item);
  }
  dx_pv_done(p);
}

DX_TEST(pv_worker_abandon_and_renew) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f, g;
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("A", 1, 1));
  f = dx_pv_wfetch(p, T0);
  CHECK(M(p)->renew_work_item_lock(p, T0 + LOCK - 1, f.lock_token, LOCK, &E));
  g = dx_pv_wfetch(p, T0 + LOCK + 10); /* renewed: not redelivered */
  ASSERT_EQ(g.item.kind, 0);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0, f.lock_token + 1, LOCK, &E), DX_ELOCK);
  CHECK_ERR(M(p)->abandon_work_item(p, T0, f.lock_token + 1, 0, 0, &E), DX_ELOCK);
  CHECK(M(p)->abandon_work_item(p, T0 + 100, f.lock_token, 1000, 0, &E));
  dx_work_item_clear(&f.item);
  g = dx_pv_wfetch(p, T0 + 1099);
  ASSERT_EQ(g.item.kind, 0);
  f = dx_pv_wfetch(p, T0 + 1100);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(f.attempt_count, 2);
  CHECK(M(p)->abandon_work_item(p, T0 + 1101, f.lock_token, 0, 1, &E));
  dx_work_item_clear(&f.item);
  f = dx_pv_wfetch(p, T0 + 1101);
  ASSERT_EQ(f.attempt_count, 2); /* 2, undone to 1, fetched to 2 */
  CHECK(M(p)->ack_work_item(p, T0 + 1102, f.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  ASSERT_EQ(dx_pv_depths(p).worker, 0);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  dx_pv_done(p);
}

DX_TEST(pv_worker_lock_expiry) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f, g;
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("A", 1, 1));
  f = dx_pv_wfetch(p, T0);
  g = dx_pv_wfetch(p, T0 + LOCK - 1);
  ASSERT_EQ(g.item.kind, 0);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + LOCK, f.lock_token, LOCK, &E), DX_ELOCK);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + LOCK, f.lock_token, NULL, &E), DX_ELOCK);
  g = dx_pv_wfetch(p, T0 + LOCK);
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  ASSERT_NE(g.lock_token, f.lock_token);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + LOCK + 1, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + LOCK + 1, g.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  dx_work_item_clear(&g.item);
  dx_pv_done(p);
}

DX_TEST(pv_lock_stealing_cancels_worker_rows) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t work[2] = {dx_pv_act_item("A", 1, 2), dx_pv_act_item("A", 1, 3)},
                 late = dx_pv_act_item("A", 1, 7);
  dx_activity_ref_t refs[3] = {{"A", 1, 2}, {"A", 1, 99}, {"A", 1, 7}};
  dx_event_t ev[3];
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 3, it);
  a.delta_len = 3;
  a.worker_items = work;
  a.worker_items_len = 2;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  f = dx_pv_wfetch(p, T0 + 1);
  ASSERT_EQ(f.item.id, 2);

  /* next turn cancels activity 2 (locked), 99 (missing) and 7 (inserted by this same ack) */
  dx_pv_enqueue(p, T0 + 2, dx_pv_raise_item("A"));
  it = dx_pv_fetch(p, T0 + 3);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = &late;
  a.worker_items_len = 1;
  a.cancelled = refs;
  a.cancelled_len = 3;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 4, &a, &E));
  dx_orch_item_free(it);
  ASSERT_EQ(dx_pv_depths(p).worker, 1); /* only activity 3 is left */
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + 5, f.lock_token, LOCK, &E), DX_ELOCK);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 5, f.lock_token, NULL, &E), DX_ELOCK);
  dx_work_item_clear(&f.item);
  f = dx_pv_wfetch(p, T0 + 6);
  ASSERT_EQ(f.item.id, 3);
  dx_work_item_clear(&f.item);
  dx_pv_done(p);
}

DX_TEST(pv_session_rows_need_a_session_config) {
  dx_provider_t *p = dx_pv_fresh();
  dx_session_cfg_t cfg = {.worker_id = "worker-1", .session_lock_ms = LOCK, .max_sessions = 10};
  dx_work_item_t s = dx_pv_act_item("A", 1, 1);
  dx_work_fetch_t f;
  s.session_id = "s1";
  dx_pv_enqueue_work(p, T0, s);
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_act_item("A", 1, 2));
  f = dx_pv_wfetch(p, T0 + 2);
  ASSERT_EQ(f.item.id, 2); /* the older session row is skipped */
  dx_work_item_clear(&f.item);
  f = dx_pv_wfetch(p, T0 + 2);
  ASSERT_EQ(f.item.kind, 0);
  /* next_due_ms counts session rows too (a poll may then find nothing it may take) */
  ASSERT_EQ(dx_pv_next_due(p, T0 + 2), T0);
  CHECK(M(p)->fetch_work_item(p, T0 + 2, LOCK, &cfg, &f, &E));
  ASSERT_EQ(f.item.id, 1);
  ASSERT_STR_EQ(f.item.session_id, "s1");
  dx_work_item_clear(&f.item);
  dx_pv_done(p);
}

/* {===== reads and management =====} */

DX_TEST(pv_reads_of_unknown_instances) {
  dx_provider_t *p = dx_pv_fresh();
  dx_instance_info_t info;
  dx_event_t *ev = NULL;
  size_t n = 7;
  CHECK_ERR(M(p)->read_history(p, "nope", 0, &ev, &n, NULL, &E), DX_ENOTFOUND);
  ASSERT_CONTAINS(E.msg, "nope");
  ASSERT(ev == NULL);
  ASSERT_EQ(n, 0);
  CHECK_ERR(M(p)->get_instance_info(p, "nope", &info, &E), DX_ENOTFOUND);
  dx_pv_done(p);
}

DX_TEST(pv_append_with_execution) {
  dx_provider_t *p = dx_pv_fresh();
  dx_event_t ev[2];
  dx_orch_item_t fake;
  memset(&fake, 0, sizeof fake);
  dx_pv_delta(ev, 2, &fake);
  CHECK(M(p)->append_with_execution(p, "X", 1, ev, 2, &E));
  ASSERT_EQ(dx_pv_history_len(p, "X", 0), 2);
  CHECK_ERR(M(p)->append_with_execution(p, "X", 1, ev + 1, 1, &E), DX_EEXIST);
  ev[0].event_id = 0;
  CHECK_ERR(M(p)->append_with_execution(p, "X", 1, ev, 1, &E), DX_EINVAL);
  ASSERT_EQ(dx_pv_history_len(p, "X", 1), 2);
  dx_pv_done(p);
}

DX_TEST(pv_instance_info_status_and_custom_status) {
  dx_provider_t *p = dx_pv_fresh();
  dx_failure_t fail = {DX_CAT_APPLICATION, "OrchestrationFailed", "boom", 0};
  dx_instance_info_t info;
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
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

  dx_pv_enqueue(p, T0 + 2, dx_pv_raise_item("A")); /* a turn that leaves custom status alone */
  dx_pv_turn(p, T0 + 3, dx_pv_fetch(p, T0 + 3), 1);
  CHECK(M(p)->get_instance_info(p, "A", &info, &E));
  ASSERT_STR_EQ(info.custom_status, "\"busy\"");
  ASSERT_EQ(info.custom_status_version, 1);
  ASSERT_EQ(info.updated_at_ms, T0 + 3);
  dx_instance_info_clear(&info);

  dx_pv_enqueue(p, T0 + 4, dx_pv_raise_item("A"));
  it = dx_pv_fetch(p, T0 + 5);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
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
  dx_pv_done(p);
}

/* Free text that is not UTF-8 (a Lua error(string.char(255))) commits on every store: kept
** as given or with each bad byte replaced by U+FFFD (PostgreSQL's text refuses the bytes). */
static int text_kept(const char *got, const char *given, const char *fixed) {
  return got && (strcmp(got, given) == 0 || strcmp(got, fixed) == 0);
}

DX_TEST(pv_text_not_utf8_commits_and_reads_back) {
  dx_provider_t *p = dx_pv_fresh();
  dx_failure_t fail = {DX_CAT_APPLICATION, "Kind\xfe", "bad \xff end", 0};
  dx_instance_info_t info;
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
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
  dx_pv_done(p);
}

/* Identifiers that are not UTF-8 are refused by every store with the same message: replacing
** bytes would make two ids one. Nothing is written. */
DX_TEST(pv_ids_not_utf8_are_refused) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w = dx_pv_start_item("i\xff");
  dx_instance_info_t info;
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EINVAL);
  ASSERT_STR_EQ(E.msg, "instance id is not valid UTF-8 (byte 2 is 0xff)");
  w = dx_pv_start_item("ok");
  w.session_id = "s\xc3";
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E), DX_EINVAL);
  ASSERT_STR_EQ(E.msg, "session id is not valid UTF-8 (byte 2 is 0xc3)");
  CHECK_ERR(M(p)->get_instance_info(p, "ok", &info, &E), DX_ENOTFOUND);
  /* looked up, such an id names no instance (PostgreSQL would refuse the parameter) */
  CHECK_ERR(M(p)->get_instance_info(p, "i\xff", &info, &E), DX_ENOTFOUND);
  dx_pv_done(p);
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
  dx_provider_t *p = dx_pv_fresh();
  list_acc_t l;
  dx_pv_create_instance(p, T0 + 20, "b");
  dx_pv_create_instance(p, T0 + 10, "a"); /* created earlier on the virtual clock */
  dx_pv_create_instance(p, T0 + 30, "c");
  dx_pv_enqueue(p, T0 + 40, dx_pv_start_item("pending")); /* not an instance until acked */
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
  dx_pv_done(p);
}

DX_TEST(pv_queue_depths) {
  dx_provider_t *p = dx_pv_fresh();
  dx_queue_depths_t d;
  dx_orch_item_t *it;
  dx_pv_create_instance(p, T0, "A");
  dx_pv_enqueue(p, T0, dx_pv_raise_item("A"));
  dx_pv_enqueue(p, T0, dx_pv_start_item("B"));
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("A", 1, 1));
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("A", 1, 2));
  it = dx_pv_fetch(p, T0 + 1); /* locked messages still count */
  d = dx_pv_depths(p);
  ASSERT_EQ(d.orchestrator, 2);
  ASSERT_EQ(d.worker, 2);
  ASSERT_EQ(d.instances, 1);
  dx_orch_item_free(it);
  dx_pv_done(p);
}

DX_TEST(pv_next_due_ms) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t t = dx_pv_wi(DX_WI_TIMER_FIRED, "A", 1, 2);
  dx_work_fetch_t f;
  ASSERT_EQ(dx_pv_next_due(p, T0), INT64_MAX);
  dx_pv_create_instance(p, T0, "A");
  t.fire_at_ms = T0 + 5000;
  dx_pv_enqueue(p, T0, t);
  ASSERT_EQ(dx_pv_next_due(p, T0), T0 + 5000);
  dx_pv_enqueue_work(p, T0 + 10, dx_pv_act_item("A", 1, 1));
  ASSERT_EQ(dx_pv_next_due(p, T0 + 10), T0 + 10);
  f = dx_pv_wfetch(p, T0 + 10);
  /* the timer (the worker lock expires later); a provider with liveness may look sooner (the
  ** lock's holder may die) */
  ASSERT(dx_pv_next_due(p, T0 + 10) > T0 + 10 && dx_pv_next_due(p, T0 + 10) <= T0 + 5000);
  CHECK(M(p)->ack_work_item(p, T0 + 11, f.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  dx_orch_item_free(dx_pv_fetch(p, T0 + 5000));
  /* the instance lock; a provider with liveness may look sooner (its holder may die) */
  ASSERT(dx_pv_next_due(p, T0 + 5000) > T0 + 5000 &&
         dx_pv_next_due(p, T0 + 5000) <= T0 + 5000 + LOCK);
  dx_pv_done(p);
}
