/*
** provider_validation_manage.c -- provider contract tests of the management part (version 6:
** list pages, executions, queue rows, delete, prune, terminate). Vtable only, virtual time;
** linked into every provider's test program with provider_validation.c.
*/
#include <string.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E;

/* {===== building instances through the queue, as the runtime would =====} */

static void start(dx_provider_t *p, int64_t now, const char *id, const char *name,
                  const char *parent, uint64_t parent_id) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_START;
  w.instance = (char *)id;
  w.name = (char *)name;
  w.version = "1.0.0";
  w.data = "null";
  w.execution_id = 1;
  w.parent_instance = (char *)parent;
  w.parent_id = parent_id;
  w.parent_execution_id = parent ? 1 : 0;
  w.fire_at_ms = now;
  CHECK(M(p)->enqueue_for_orchestrator(p, now, &w, 0, &E));
}

/* What one turn adds: events, worker rows, orchestrator items, a status. */
typedef struct {
  dx_event_t ev[4];
  size_t n_ev;
  dx_work_item_t work[2];
  size_t n_work;
  dx_work_item_t orch[2];
  size_t n_orch;
  int status;
  dx_failure_t fail;
} turn_t;

/* Fetch `id` (it must be the one due) and ack it with what `t` holds; the first turn of an
** execution begins with OrchestrationStarted. */
static void run_turn(dx_provider_t *p, int64_t now, const char *id, turn_t *t) {
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t a;
  dx_event_t ev[5];
  size_t n = 0, i, base;
  uint64_t exec;
  int fresh_exec;
  CHECK(M(p)->fetch_orchestration_item(p, now, LOCK, &it, &E));
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, id);
  /* after a continue-as-new the next execution starts empty */
  fresh_exec = it->history_len == 0 || it->history[it->history_len - 1].kind == DX_EV_ORCH_CAN;
  exec = it->history_len == 0 ? it->execution_id : fresh_exec ? it->execution_id + 1
                                                              : it->execution_id;
  base = fresh_exec ? 0 : it->history_len;
  if (fresh_exec) {
    memset(&ev[0], 0, sizeof ev[0]);
    ev[0].kind = DX_EV_ORCH_STARTED;
    ev[0].name = it->orchestration_name;
    ev[0].version = it->orchestration_version;
    ev[0].data = "null";
    ev[0].instance = it->messages_len ? it->messages[0].parent_instance : NULL;
    ev[0].parent_id = it->messages_len ? it->messages[0].parent_id : 0;
    ev[0].parent_execution_id = it->messages_len ? it->messages[0].parent_execution_id : 0;
    n = 1;
  }
  for (i = 0; t && i < t->n_ev; i++) ev[n++] = t->ev[i];
  for (i = 0; i < n; i++) {
    ev[i].event_id = base + i + 1;
    ev[i].timestamp_ms = now;
  }
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = exec;
  a.orchestration_name = it->orchestration_name;
  a.orchestration_version = it->orchestration_version;
  a.parent_instance = it->messages_len ? it->messages[0].parent_instance : NULL;
  a.delta = ev;
  a.delta_len = n;
  if (t) {
    a.worker_items = t->work;
    a.worker_items_len = t->n_work;
    a.orch_items = t->orch;
    a.orch_items_len = t->n_orch;
    a.status = t->status;
    a.failure = t->status == DX_STATUS_FAILED ? &t->fail : NULL;
    a.output = t->status == DX_STATUS_COMPLETED ? "\"done\"" : NULL;
  }
  CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  dx_orch_item_free(it);
}

static void create(dx_provider_t *p, int64_t now, const char *id, const char *name, int status) {
  turn_t t;
  memset(&t, 0, sizeof t);
  t.status = status;
  t.fail.category = DX_CAT_APPLICATION;
  t.fail.message = "boom";
  start(p, now, id, name, NULL, 0);
  run_turn(p, now, id, &t);
}

static dx_work_item_t act(const char *id, uint64_t act_id, const char *session) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_ACT_EXECUTE;
  w.instance = (char *)id;
  w.execution_id = 1;
  w.id = act_id;
  w.name = "Act";
  w.data = "null";
  w.session_id = (char *)session;
  return w;
}

/* {===== list_page =====} */

typedef struct {
  char ids[16][32];
  int status[16];
  size_t n;
  char next[64];
} page_t;

static int list(dx_provider_t *p, int status, const char *name, int64_t created_after,
                const char *after, size_t limit, page_t *out) {
  dx_list_query_t q;
  dx_instance_info_t *rows = NULL;
  char *next = NULL;
  size_t n = 0, i;
  int rc;
  memset(&q, 0, sizeof q);
  memset(out, 0, sizeof *out);
  q.status = status;
  q.name = name;
  q.created_after_ms = created_after;
  q.after = after;
  q.limit = limit;
  rc = M(p)->list_page(p, T0 + 100000, &q, &rows, &n, &next, &E);
  if (rc) return rc;
  ASSERT(n <= 16);
  for (i = 0; i < n; i++) {
    snprintf(out->ids[i], sizeof out->ids[i], "%s", rows[i].instance_id);
    out->status[i] = rows[i].status;
    ASSERT(rows[i].created_at_ms > 0);
    ASSERT(rows[i].orchestration_name);
  }
  out->n = n;
  if (next) snprintf(out->next, sizeof out->next, "%s", next);
  free(next);
  dx_instance_infos_free(rows, n);
  return 0;
}

DX_TEST(pv_manage_list_pages_newest_first_with_queued_starts) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  page_t pg;
  const char *want[] = {"q2", "q1", "f1", "r2", "c2", "r1", "c1"};
  char after[64] = "";
  size_t got = 0, i;
  if (M(p)->version < 6 || !M(p)->list_page) DX_FAIL_AT("provider lacks the management part");
  create(p, T0 + 1, "c1", "A", DX_STATUS_COMPLETED);
  create(p, T0 + 2, "r1", "A", DX_STATUS_NONE);
  create(p, T0 + 3, "c2", "B", DX_STATUS_COMPLETED);
  create(p, T0 + 4, "r2", "B", DX_STATUS_NONE);
  create(p, T0 + 5, "f1", "A", DX_STATUS_FAILED);
  start(p, T0 + 6, "q1", "A", NULL, 0); /* queued, never run */
  start(p, T0 + 7, "q2", "B", NULL, 0);
  /* pages of 3 walk everything once, newest first, queued starts first */
  do {
    CHECK(list(p, DX_LIST_ANY, NULL, 0, after[0] ? after : NULL, 3, &pg));
    for (i = 0; i < pg.n; i++, got++) {
      ASSERT(got < 7);
      ASSERT_STR_EQ(pg.ids[i], want[got]);
    }
    snprintf(after, sizeof after, "%s", pg.next);
  } while (after[0]);
  ASSERT_EQ(got, 7);
  /* filters */
  CHECK(list(p, DX_STATUS_NONE, NULL, 0, NULL, 10, &pg));
  ASSERT_EQ(pg.n, 2);
  ASSERT_STR_EQ(pg.ids[0], "q2");
  CHECK(list(p, DX_STATUS_RUNNING, NULL, 0, NULL, 10, &pg));
  ASSERT_EQ(pg.n, 2);
  ASSERT_STR_EQ(pg.ids[0], "r2");
  ASSERT_STR_EQ(pg.ids[1], "r1");
  CHECK(list(p, DX_LIST_TERMINAL, NULL, 0, NULL, 10, &pg));
  ASSERT_EQ(pg.n, 3);
  ASSERT_EQ(pg.status[0], DX_STATUS_FAILED);
  CHECK(list(p, DX_STATUS_COMPLETED, "B", 0, NULL, 10, &pg));
  ASSERT_EQ(pg.n, 1);
  ASSERT_STR_EQ(pg.ids[0], "c2");
  CHECK(list(p, DX_LIST_ANY, "A", 0, NULL, 10, &pg));
  ASSERT_EQ(pg.n, 4);
  CHECK(list(p, DX_LIST_ANY, NULL, T0 + 3, NULL, 10, &pg)); /* strictly after */
  ASSERT_EQ(pg.n, 4);
  ASSERT_STR_EQ(pg.ids[3], "r2");
  /* a page boundary exactly at the end gives no cursor */
  CHECK(list(p, DX_LIST_ANY, NULL, 0, NULL, 7, &pg));
  ASSERT_EQ(pg.n, 7);
  ASSERT_STR_EQ(pg.next, "");
  /* bad queries change nothing and say what is wrong */
  CHECK_ERR(list(p, DX_LIST_ANY, NULL, 0, "nonsense", 3, &pg), DX_EINVAL);
  ASSERT(strstr(E.msg, "cursor 'nonsense'"));
  CHECK_ERR(list(p, DX_LIST_ANY, NULL, 0, NULL, 0, &pg), DX_EINVAL);
  ASSERT(strstr(E.msg, "limit"));
  CHECK_ERR(list(p, 77, NULL, 0, NULL, 5, &pg), DX_EINVAL);
  M(p)->destroy(p);
  free(store);
}

/* {===== executions and prune =====} */

DX_TEST(pv_manage_executions_and_prune) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_execution_info_t *ex = NULL;
  dx_event_t *ev = NULL;
  size_t n = 0, ne = 0;
  uint64_t pruned = 9;
  int k;
  start(p, T0, "can", "A", NULL, 0);
  for (k = 1; k <= 3; k++) { /* executions 1 and 2 continue as new; 3 keeps running */
    turn_t t;
    memset(&t, 0, sizeof t);
    if (k < 3) {
      t.status = DX_STATUS_CONTINUED_AS_NEW;
      t.ev[0].kind = DX_EV_ORCH_CAN;
      t.ev[0].data = "1";
      t.n_ev = 1;
      t.orch[0].kind = DX_WI_CAN;
      t.orch[0].instance = "can";
      t.orch[0].name = "A";
      t.orch[0].version = "1.0.0";
      t.orch[0].data = "1";
      t.orch[0].execution_id = (uint64_t)k + 1;
      t.n_orch = 1;
    }
    run_turn(p, T0 + k, "can", &t);
  }
  CHECK(M(p)->list_executions(p, "can", &ex, &n, &E));
  ASSERT_EQ(n, 3);
  ASSERT_EQ(ex[0].execution_id, 1);
  ASSERT_EQ(ex[0].status, DX_STATUS_CONTINUED_AS_NEW);
  ASSERT_EQ(ex[0].event_count, 2);
  ASSERT(ex[0].completed_at_ms > 0);
  ASSERT_EQ(ex[2].execution_id, 3);
  ASSERT_EQ(ex[2].status, DX_STATUS_RUNNING);
  ASSERT_EQ(ex[2].completed_at_ms, 0);
  free(ex);
  CHECK_ERR(M(p)->prune_executions(p, "can", 0, &pruned, &E), DX_EINVAL);
  CHECK(M(p)->prune_executions(p, "can", 2, &pruned, &E));
  ASSERT_EQ(pruned, 1);
  CHECK(M(p)->prune_executions(p, "can", 1, &pruned, &E));
  ASSERT_EQ(pruned, 1);
  CHECK(M(p)->prune_executions(p, "can", 1, &pruned, &E)); /* the running current one stays */
  ASSERT_EQ(pruned, 0);
  CHECK(M(p)->list_executions(p, "can", &ex, &n, &E));
  ASSERT_EQ(n, 1);
  ASSERT_EQ(ex[0].execution_id, 3);
  free(ex);
  CHECK(M(p)->read_history(p, "can", 1, &ev, &ne, NULL, &E));
  ASSERT_EQ(ne, 0);
  dx_events_free(ev, ne); /* a provider may return an empty array */
  CHECK(M(p)->read_history(p, "can", 0, &ev, &ne, NULL, &E));
  ASSERT_EQ(ne, 1);
  dx_events_free(ev, ne);
  CHECK_ERR(M(p)->list_executions(p, "nobody", &ex, &n, &E), DX_ENOTFOUND);
  CHECK_ERR(M(p)->prune_executions(p, "nobody", 1, &pruned, &E), DX_ENOTFOUND);
  M(p)->destroy(p);
  free(store);
}

/* {===== instance_queue =====} */

typedef struct {
  int orch, timers, acts, locked, owned_by_w1;
} qcount_t;

static int qcount_cb(void *ud, const dx_queued_t *q) {
  qcount_t *c = ud;
  if (q->queue == DX_QUEUE_ORCHESTRATOR) {
    c->orch++;
    if (q->item->kind == DX_WI_TIMER_FIRED) c->timers++;
  } else {
    c->acts++;
    if (q->locked_until_ms) c->locked++;
    if (q->locked_by && strcmp(q->locked_by, "w1") == 0) c->owned_by_w1++;
  }
  return 0;
}

DX_TEST(pv_manage_instance_queue_shows_messages_timers_and_locks) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_session_cfg_t cfg = {.worker_id = "w1", .session_lock_ms = LOCK, .max_sessions = 5};
  dx_work_fetch_t f;
  qcount_t c;
  turn_t t;
  dx_work_item_t raise;
  memset(&t, 0, sizeof t);
  t.work[0] = act("qi", 2, NULL);
  t.work[1] = act("qi", 3, "qi-sess");
  t.n_work = 2;
  t.orch[0].kind = DX_WI_TIMER_FIRED;
  t.orch[0].instance = "qi";
  t.orch[0].execution_id = 1;
  t.orch[0].id = 4;
  t.orch[0].fire_at_ms = T0 + 3600000;
  t.n_orch = 1;
  start(p, T0, "qi", "A", NULL, 0);
  run_turn(p, T0, "qi", &t);
  memset(&raise, 0, sizeof raise);
  raise.kind = DX_WI_EXTERNAL;
  raise.instance = "qi";
  raise.name = "go";
  raise.data = "1";
  CHECK(M(p)->enqueue_for_orchestrator(p, T0 + 1, &raise, 0, &E));
  CHECK(M(p)->fetch_work_item(p, T0 + 2, LOCK, &cfg, &f, &E)); /* plain row first */
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  CHECK(M(p)->fetch_work_item(p, T0 + 2, LOCK, &cfg, &f, &E)); /* the session row: w1 owns it */
  ASSERT_STR_EQ(f.item.session_id, "qi-sess");
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  memset(&c, 0, sizeof c);
  CHECK(M(p)->instance_queue(p, "qi", qcount_cb, &c, &E));
  ASSERT_EQ(c.orch, 2);
  ASSERT_EQ(c.timers, 1);
  ASSERT_EQ(c.acts, 2);
  ASSERT_EQ(c.locked, 2);
  ASSERT_EQ(c.owned_by_w1, 1);
  memset(&c, 0, sizeof c);
  CHECK(M(p)->instance_queue(p, "nobody", qcount_cb, &c, &E));
  ASSERT_EQ(c.orch + c.acts, 0);
  M(p)->destroy(p);
  free(store);
}

/* {===== delete =====} */

static int status_of(dx_provider_t *p, const char *id) {
  dx_instance_info_t info;
  int rc = M(p)->get_instance_info(p, id, &info, &E), st;
  if (rc == DX_ENOTFOUND) return -1;
  CHECK(rc);
  st = info.status;
  dx_instance_info_clear(&info);
  return st;
}

DX_TEST(pv_manage_delete_leaves_no_rows_anywhere) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_session_cfg_t cfg = {.worker_id = "w1", .session_lock_ms = LOCK, .max_sessions = 5};
  const char *ids[2] = {"victim-7f3a", "victim-7f3a-kid"};
  dx_orch_item_t *it = NULL;
  dx_work_fetch_t f;
  dx_work_item_t raise;
  dx_orch_ack_t a;
  uint64_t deleted = 9, released;
  turn_t t;
  /* a running instance with a plain and a session activity, a timer, a queued event, a
  ** child queued but never run, and a turn in flight */
  memset(&t, 0, sizeof t);
  t.work[0] = act(ids[0], 2, NULL);
  t.work[1] = act(ids[0], 3, "victim-7f3a-sess");
  t.n_work = 2;
  t.orch[0].kind = DX_WI_TIMER_FIRED;
  t.orch[0].instance = (char *)ids[0];
  t.orch[0].execution_id = 1;
  t.orch[0].id = 4;
  t.orch[0].fire_at_ms = T0 + 3600000;
  t.n_orch = 1;
  t.ev[0].kind = DX_EV_KV_SET; /* key-value state of the running execution (kv_delta) */
  t.ev[0].name = "victim-key";
  t.ev[0].data = "1";
  t.n_ev = 1;
  create(p, T0, "keeper", "A", DX_STATUS_COMPLETED);
  start(p, T0 + 1, ids[0], "A", NULL, 0);
  run_turn(p, T0 + 1, ids[0], &t);
  start(p, T0 + 2, ids[1], "A", ids[0], 5);
  CHECK(M(p)->fetch_work_item(p, T0 + 3, LOCK, &cfg, &f, &E));
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  CHECK(M(p)->fetch_work_item(p, T0 + 3, LOCK, &cfg, &f, &E)); /* the session row, in flight */
  ASSERT_STR_EQ(f.item.session_id, "victim-7f3a-sess");
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  /* the owner lets go of the session (a graceful stop) while the row stays locked */
  CHECK(M(p)->release_session_locks(p, T0 + 3, "w1", NULL, &released, &E));
  memset(&raise, 0, sizeof raise);
  raise.kind = DX_WI_EXTERNAL;
  raise.instance = (char *)ids[0];
  raise.name = "go";
  raise.data = "1";
  CHECK(M(p)->enqueue_for_orchestrator(p, T0 + 4, &raise, 0, &E));
  CHECK(M(p)->fetch_orchestration_item(p, T0 + 5, LOCK, &it, &E)); /* the child's first turn */
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, ids[1]);
  dx_orch_item_free(it);
  CHECK(M(p)->fetch_orchestration_item(p, T0 + 5, LOCK, &it, &E)); /* and the victim's */
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, ids[0]);
  /* without force: refused, nothing changes */
  CHECK_ERR(M(p)->delete_instances(p, ids, 2, 0, &deleted, &E), DX_ESTATE);
  ASSERT(strstr(E.msg, "victim-7f3a"));
  ASSERT_EQ(status_of(p, ids[0]), DX_STATUS_RUNNING);
  /* with force: both go at once; the in-flight turn finds its lock gone */
  CHECK(M(p)->delete_instances(p, ids, 2, 1, &deleted, &E));
  ASSERT_EQ(deleted, 2);
  ASSERT_EQ(status_of(p, ids[0]), -1);
  ASSERT_EQ(status_of(p, ids[1]), -1);
  ASSERT_EQ(status_of(p, "keeper"), DX_STATUS_COMPLETED);
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  ASSERT(M(p)->ack_orchestration_item(p, T0 + 6, &a, &E) != 0);
  ASSERT(M(p)->ack_work_item(p, T0 + 6, f.lock_token, NULL, &E) != 0);
  dx_orch_item_free(it);
  /* the ids can be used again; deleting unknown ids is fine */
  CHECK(M(p)->delete_instances(p, ids, 1, 0, &deleted, &E));
  ASSERT_EQ(deleted, 0);
  M(p)->destroy(p);
  ASSERT_EQ(dx_pv_rows_naming(store, "victim-7f3a"), 0);
  ASSERT(dx_pv_rows_naming(store, "keeper") > 0);
  free(store);
}

DX_TEST(pv_manage_delete_without_force_takes_finished_instances) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  const char *ids[3] = {"done-1", "failed-1", "never-was"};
  uint64_t deleted = 0;
  dx_work_item_t w;
  create(p, T0, ids[0], "A", DX_STATUS_COMPLETED);
  create(p, T0 + 1, ids[1], "A", DX_STATUS_FAILED);
  CHECK(M(p)->delete_instances(p, ids, 3, 0, &deleted, &E));
  ASSERT_EQ(deleted, 2);
  ASSERT_EQ(status_of(p, ids[0]), -1);
  /* a new start of a deleted id is a new instance */
  start(p, T0 + 2, ids[0], "A", NULL, 0);
  memset(&w, 0, sizeof w);
  ASSERT_EQ(status_of(p, ids[0]), DX_STATUS_NONE);
  M(p)->destroy(p);
  free(store);
}

/* {===== terminate =====} */

DX_TEST(pv_manage_terminate_fails_the_instance_and_tells_the_parent) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_failure_t why = {DX_CAT_APPLICATION, "Terminated", "terminated: test", 0};
  dx_instance_info_t info;
  dx_orch_item_t *it = NULL;
  dx_event_t *ev = NULL;
  size_t n = 0;
  qcount_t c;
  turn_t t;
  /* parent "tp" schedules child "tc" (event 2); the child runs with an activity queued */
  memset(&t, 0, sizeof t);
  t.ev[0].kind = DX_EV_SUB_SCHEDULED;
  t.ev[0].name = "A";
  t.ev[0].instance = "tc";
  t.n_ev = 1;
  start(p, T0, "tp", "A", NULL, 0);
  run_turn(p, T0, "tp", &t);
  start(p, T0 + 1, "tc", "A", "tp", 2);
  memset(&t, 0, sizeof t);
  t.work[0] = act("tc", 2, NULL);
  t.n_work = 1;
  run_turn(p, T0 + 1, "tc", &t);
  CHECK(M(p)->terminate_instance(p, T0 + 2, "tc", &why, 1, &E));
  CHECK(M(p)->get_instance_info(p, "tc", &info, &E));
  ASSERT_EQ(info.status, DX_STATUS_FAILED);
  ASSERT_STR_EQ(info.failure.kind, "Terminated");
  ASSERT_STR_EQ(info.failure.message, "terminated: test");
  dx_instance_info_clear(&info);
  CHECK(M(p)->read_history(p, "tc", 0, &ev, &n, NULL, &E));
  ASSERT(n >= 2);
  ASSERT_EQ(ev[n - 1].kind, DX_EV_ORCH_FAILED);
  ASSERT_EQ(ev[n - 1].event_id, ev[n - 2].event_id + 1);
  dx_events_free(ev, n);
  memset(&c, 0, sizeof c);
  CHECK(M(p)->instance_queue(p, "tc", qcount_cb, &c, &E));
  ASSERT_EQ(c.acts + c.orch, 0);
  /* the parent received SubOrchestrationFailed for event 2 */
  CHECK(M(p)->fetch_orchestration_item(p, T0 + 3, LOCK, &it, &E));
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "tp");
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_SUB_FAILED);
  ASSERT_EQ(it->messages[0].id, 2);
  ASSERT_STR_EQ(it->messages[0].fail.message, "terminated: test");
  dx_orch_item_free(it);
  /* not running any more; unknown ids; a queued start has no record to fail */
  CHECK_ERR(M(p)->terminate_instance(p, T0 + 4, "tc", &why, 1, &E), DX_ESTATE);
  ASSERT(strstr(E.msg, "not running"));
  CHECK_ERR(M(p)->terminate_instance(p, T0 + 4, "nobody", &why, 1, &E), DX_ENOTFOUND);
  start(p, T0 + 5, "queued-only", "A", NULL, 0);
  CHECK_ERR(M(p)->terminate_instance(p, T0 + 5, "queued-only", &why, 1, &E), DX_ENOTFOUND);
  M(p)->destroy(p);
  free(store);
}

/* {===== list indexes: every change a listing can see =====} */

static void expect_ids(dx_provider_t *p, int status, const char *name, const char *want) {
  char got[256] = "", after[64] = "";
  page_t pg;
  size_t i;
  int pages = 0;
  do { /* pages of two, so the cursor is used on every filter */
    CHECK(list(p, status, name, 0, after[0] ? after : NULL, 2, &pg));
    for (i = 0; i < pg.n; i++) {
      strcat(got, pg.ids[i]);
      strcat(got, " ");
    }
    snprintf(after, sizeof after, "%s", pg.next);
    ASSERT(++pages < 20);
  } while (after[0]);
  ASSERT_STR_EQ(got, want);
}

static void check_clean(dx_provider_t *p) {
  uint64_t records = 0, problems = 0;
  if (!M(p)->check) return; /* the provider offers no check */
  CHECK(M(p)->check(p, NULL, NULL, &records, &problems, &E));
  ASSERT_EQ(problems, 0);
}

DX_TEST(pv_manage_list_filters_follow_runs_ends_terminate_and_delete) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_failure_t why = {DX_CAT_APPLICATION, "Terminated", "terminated: test", 0};
  const char *gone[2] = {"q3", "q2"};
  char id[8];
  turn_t t;
  int i;
  for (i = 1; i <= 8; i++) { /* queued, never run: odd ones run N, even ones M */
    snprintf(id, sizeof id, "q%d", i);
    start(p, T0 + i, id, i % 2 ? "N" : "M", NULL, 0);
  }
  expect_ids(p, DX_STATUS_NONE, "N", "q7 q5 q3 q1 ");
  expect_ids(p, DX_STATUS_NONE, NULL, "q8 q7 q6 q5 q4 q3 q2 q1 ");
  expect_ids(p, DX_STATUS_RUNNING, NULL, "");
  /* q1's first turn: no longer queued, running under its name */
  run_turn(p, T0 + 10, "q1", NULL);
  expect_ids(p, DX_STATUS_NONE, "N", "q7 q5 q3 ");
  expect_ids(p, DX_STATUS_RUNNING, "N", "q1 ");
  expect_ids(p, DX_LIST_ANY, "N", "q7 q5 q3 q1 ");
  /* q2 completes in its first turn */
  memset(&t, 0, sizeof t);
  t.status = DX_STATUS_COMPLETED;
  run_turn(p, T0 + 11, "q2", &t);
  expect_ids(p, DX_STATUS_COMPLETED, NULL, "q2 ");
  expect_ids(p, DX_LIST_TERMINAL, "M", "q2 ");
  expect_ids(p, DX_STATUS_RUNNING, NULL, "q1 ");
  expect_ids(p, DX_STATUS_NONE, "M", "q8 q6 q4 ");
  /* terminate moves q1 from running to failed */
  CHECK(M(p)->terminate_instance(p, T0 + 12, "q1", &why, 0, &E));
  expect_ids(p, DX_STATUS_RUNNING, NULL, "");
  expect_ids(p, DX_STATUS_FAILED, "N", "q1 ");
  expect_ids(p, DX_LIST_TERMINAL, NULL, "q2 q1 "); /* newest record first */
  check_clean(p);
  /* deleting a queued start and a completed instance takes them off every listing */
  CHECK(M(p)->delete_instances(p, gone, 2, 1, NULL, &E));
  expect_ids(p, DX_STATUS_NONE, "N", "q7 q5 ");
  expect_ids(p, DX_STATUS_COMPLETED, NULL, "");
  expect_ids(p, DX_LIST_ANY, NULL, "q8 q7 q6 q5 q4 q1 ");
  check_clean(p);
  M(p)->destroy(p);
  free(store);
}
