/*
** provider_validation_kv.c -- provider contract tests for key-value state and event-queue
** messages (issue 11; duroxide §4.2 step 8, §7.7, §8.3 kv_store). Linked with
** provider_validation.c into every provider's test program; uses only the vtable and the
** hooks of provider_validation.h.
*/
#include <string.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E;

static dx_provider_t *open_fresh(void) {
  dx_provider_t *p = dx_pv_fresh();
  ASSERT(M(p)->version >= 7 && M(p)->get_kv && M(p)->list_kv);
  return p;
}

static dx_orch_item_t *fetch_one(dx_provider_t *p, int64_t now) {
  dx_orch_item_t *it = NULL;
  CHECK(M(p)->fetch_orchestration_item(p, now, LOCK, &it, &E));
  ASSERT(it);
  return it;
}

static void put(dx_provider_t *p, int64_t now, dx_work_item_t w) {
  CHECK(M(p)->enqueue_for_orchestrator(p, now, &w, 0, &E));
}

static dx_work_item_t item_of(int kind, const char *inst, const char *name, const char *data) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = kind;
  w.instance = (char *)inst;
  w.name = (char *)name;
  w.data = (char *)data;
  if (kind == DX_WI_START) w.execution_id = 1, w.version = "1.0.0";
  return w;
}

static dx_event_t kv_ev(int kind, const char *key, const char *value, int64_t at) {
  dx_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.name = (char *)key;
  e.data = (char *)value;
  e.timestamp_ms = at;
  return e;
}

#define KSET(k, v, at) kv_ev(DX_EV_KV_SET, (k), (v), (at))
#define KCLR(k) kv_ev(DX_EV_KV_CLEARED, (k), NULL, T0)
#define KALL kv_ev(DX_EV_KV_CLEARED_ALL, NULL, NULL, T0)

/* Commit a turn of `it` in execution `exec` (a new one starts with OrchestrationStarted) with
** `ev` appended, status `status`, and `can` (may be NULL) as its one orchestrator item.
** Returns the ack's code; frees `it`. */
static int commit(dx_provider_t *p, dx_orch_item_t *it, uint64_t exec, dx_event_t *ev, size_t n,
                  int status, const dx_work_item_t *can) {
  dx_event_t all[16];
  dx_orch_ack_t a;
  size_t i, k = 0;
  uint64_t next = exec == it->execution_id ? it->history_len + 1 : 1;
  int rc;
  ASSERT(n < 15);
  memset(&a, 0, sizeof a);
  if (next == 1) {
    all[k] = kv_ev(DX_EV_ORCH_STARTED, NULL, "null", T0);
    all[k].name = "Orch";
    all[k].version = "1.0.0";
    all[k++].event_id = next++;
    a.orchestration_name = "Orch";
    a.orchestration_version = "1.0.0";
  }
  for (i = 0; i < n; i++) {
    all[k] = ev[i];
    all[k++].event_id = next++;
  }
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = exec;
  a.delta = all;
  a.delta_len = k;
  a.status = status;
  a.output = status == DX_STATUS_CONTINUED_AS_NEW || status == DX_STATUS_COMPLETED ? "1" : NULL;
  a.orch_items = can;
  a.orch_items_len = can ? 1 : 0;
  rc = M(p)->ack_orchestration_item(p, T0, &a, &E);
  dx_orch_item_free(it);
  return rc;
}

/* Live value of key (NULL when absent), as a static copy for comparisons. */
static const char *live(dx_provider_t *p, const char *inst, const char *key) {
  static char buf[256];
  char *v = NULL;
  int rc = M(p)->get_kv(p, inst, key, &v, NULL, &E);
  if (rc == DX_ENOTFOUND) {
    ASSERT(v == NULL);
    return NULL;
  }
  if (rc) DX_FAIL_AT("get_kv(%s, %s) -> %s: %s", inst, key, dx_err_name(rc), E.msg);
  snprintf(buf, sizeof buf, "%s", v);
  free(v);
  return buf;
}

static int list_cb(void *ud, const char *key, const char *value, int64_t at) {
  char *out = ud;
  size_t n = strlen(out);
  snprintf(out + n, 512 - n, "%s%s=%s@%lld", n ? " " : "", key, value, (long long)(at - T0));
  return 0;
}

/* Every live entry as "k=v@t k=v@t" (t relative to T0). */
static const char *listing(dx_provider_t *p, const char *inst) {
  static char buf[512];
  buf[0] = 0;
  CHECK(M(p)->list_kv(p, inst, list_cb, buf, &E));
  return buf;
}

/* The committed state an item carries, as listing() prints it. */
static const char *snapshot(const dx_orch_item_t *it) {
  static char buf[512];
  size_t i;
  buf[0] = 0;
  for (i = 0; i < it->kv_len; i++)
    list_cb(buf, it->kv[i].key, it->kv[i].value, it->kv[i].updated_ms);
  return buf;
}

/* Start `inst`: its first turn sets `ev`. */
static void start_with(dx_provider_t *p, const char *inst, dx_event_t *ev, size_t n) {
  dx_orch_item_t *it;
  put(p, T0, item_of(DX_WI_START, inst, "Orch", "null"));
  it = fetch_one(p, T0);
  ASSERT_STR_EQ(snapshot(it), "");
  CHECK(commit(p, it, 1, ev, n, DX_STATUS_NONE, NULL));
}

/* A turn of a running instance, woken by a raised event. */
static dx_orch_item_t *wake(dx_provider_t *p, const char *inst) {
  put(p, T0, item_of(DX_WI_EXTERNAL, inst, "go", "1"));
  return fetch_one(p, T0);
}

DX_TEST(pv_kv_set_overwrite_and_read) {
  dx_provider_t *p = open_fresh();
  dx_event_t ev[] = {KSET("a", "1", T0 + 1), KSET("b", "{\"x\":\"y\"}", T0 + 2),
                     KSET("a", "2", T0 + 3)};
  dx_orch_item_t *it;
  int64_t at = 0;
  char *v = NULL;
  start_with(p, "i1", ev, 3);
  ASSERT_STR_EQ(live(p, "i1", "a"), "2");
  ASSERT_STR_EQ(live(p, "i1", "b"), "{\"x\":\"y\"}");
  CHECK(M(p)->get_kv(p, "i1", "a", &v, &at, &E));
  ASSERT_EQ(at, T0 + 3);
  free(v);
  ASSERT_STR_EQ(listing(p, "i1"), "a=2@3 b={\"x\":\"y\"}@2");
  /* the running execution's writes are not part of the committed state a fetch hands out */
  it = wake(p, "i1");
  ASSERT_STR_EQ(snapshot(it), "");
  CHECK(commit(p, it, 1, NULL, 0, DX_STATUS_NONE, NULL));
  M(p)->destroy(p);
}

DX_TEST(pv_kv_unknown_instance_and_key) {
  dx_provider_t *p = open_fresh();
  dx_event_t ev[] = {KSET("a", "1", T0)};
  start_with(p, "i1", ev, 1);
  ASSERT(live(p, "nope", "a") == NULL);
  ASSERT(live(p, "i1", "zzz") == NULL);
  ASSERT_STR_EQ(listing(p, "nope"), "");
  M(p)->destroy(p);
}

DX_TEST(pv_kv_instance_isolation) {
  dx_provider_t *p = open_fresh();
  dx_event_t e1[] = {KSET("k", "1", T0)}, e2[] = {KSET("k", "2", T0), KSET("k2", "3", T0)};
  dx_orch_item_t *it;
  start_with(p, "i1", e1, 1);
  start_with(p, "i10", e2, 2); /* a prefix of another id must not leak */
  ASSERT_STR_EQ(listing(p, "i1"), "k=1@0");
  ASSERT_STR_EQ(listing(p, "i10"), "k=2@0 k2=3@0");
  it = wake(p, "i1");
  {
    dx_event_t c[] = {KALL};
    CHECK(commit(p, it, 1, c, 1, DX_STATUS_NONE, NULL));
  }
  ASSERT_STR_EQ(listing(p, "i1"), "");
  ASSERT_STR_EQ(listing(p, "i10"), "k=2@0 k2=3@0");
  M(p)->destroy(p);
}

/* Clears are tombstones over the committed state until the execution ends; continue-as-new
** folds the changes in, and the next execution's fetch carries them. */
DX_TEST(pv_kv_tombstones_fold_at_continue_as_new_and_completion) {
  dx_provider_t *p = open_fresh();
  dx_event_t e1[] = {KSET("a", "1", T0), KSET("b", "2", T0), KSET("c", "3", T0)};
  dx_work_item_t can = item_of(DX_WI_CAN, "i1", "Orch", "null");
  dx_orch_item_t *it;
  can.execution_id = 2;
  start_with(p, "i1", e1, 3);
  it = wake(p, "i1");
  {
    dx_event_t c[] = {KCLR("c")};
    CHECK(commit(p, it, 1, c, 1, DX_STATUS_CONTINUED_AS_NEW, &can));
  }
  ASSERT_STR_EQ(listing(p, "i1"), "a=1@0 b=2@0");
  it = fetch_one(p, T0); /* the CAN message: execution 2 starts from the folded state */
  ASSERT_STR_EQ(snapshot(it), "a=1@0 b=2@0");
  {
    dx_event_t c[] = {KCLR("a")};
    CHECK(commit(p, it, 2, c, 1, DX_STATUS_NONE, NULL));
  }
  ASSERT(live(p, "i1", "a") == NULL); /* the tombstone hides the committed value */
  ASSERT_STR_EQ(listing(p, "i1"), "b=2@0");
  it = wake(p, "i1");
  ASSERT_STR_EQ(snapshot(it), "a=1@0 b=2@0"); /* still the committed state */
  {
    dx_event_t c[] = {KALL, KSET("d", "4", T0 + 9)}; /* clear-all, then a set in one ack */
    CHECK(commit(p, it, 2, c, 2, DX_STATUS_NONE, NULL));
  }
  ASSERT_STR_EQ(listing(p, "i1"), "d=4@9");
  it = wake(p, "i1");
  CHECK(commit(p, it, 2, NULL, 0, DX_STATUS_COMPLETED, NULL));
  ASSERT_STR_EQ(listing(p, "i1"), "d=4@9");
  ASSERT(live(p, "i1", "b") == NULL);
  M(p)->destroy(p);
}

DX_TEST(pv_kv_failed_execution_folds) {
  dx_provider_t *p = open_fresh();
  dx_event_t e1[] = {KSET("a", "1", T0)};
  dx_failure_t f = {DX_CAT_APPLICATION, "OrchestrationFailed", "boom", 0};
  dx_orch_item_t *it;
  dx_event_t ev[2];
  dx_orch_ack_t a;
  start_with(p, "i1", e1, 1);
  it = wake(p, "i1");
  memset(&a, 0, sizeof a);
  ev[0] = KSET("b", "2", T0);
  ev[0].event_id = it->history_len + 1;
  memset(&ev[1], 0, sizeof ev[1]);
  ev[1].kind = DX_EV_ORCH_FAILED;
  ev[1].event_id = it->history_len + 2;
  ev[1].fail = f;
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.delta = ev;
  a.delta_len = 2;
  a.status = DX_STATUS_FAILED;
  a.failure = &f;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  ASSERT_STR_EQ(listing(p, "i1"), "a=1@0 b=2@0");
  M(p)->destroy(p);
}

/* Bad keys are refused by the ack before anything is written; reads refuse them too. */
DX_TEST(pv_kv_bad_keys_refused) {
  dx_provider_t *p = open_fresh();
  char longkey[DX_MAX_KV_KEY_BYTES + 2];
  char *v = NULL;
  dx_orch_item_t *it;
  dx_event_t empty[] = {KSET("", "1", T0)}, none[] = {KSET(NULL, "1", T0)},
             toolong[] = {KSET(longkey, "1", T0)}, novalue[] = {KSET("k", NULL, T0)},
             notutf8[] = {KSET("k\xff", "1", T0)};
  dx_event_t *bad[] = {empty, none, toolong, novalue, notutf8};
  size_t i;
  memset(longkey, 'k', sizeof longkey - 1);
  longkey[sizeof longkey - 1] = 0;
  start_with(p, "i1", NULL, 0);
  for (i = 0; i < 5; i++) {
    uint64_t token;
    it = wake(p, "i1");
    token = it->lock_token;
    ASSERT_EQ(commit(p, it, 1, bad[i], 1, DX_STATUS_NONE, NULL), DX_EINVAL);
    ASSERT(strstr(E.msg, "key") || strstr(E.msg, "value"));
    /* nothing was written, and the lock is still held: hand the batch back */
    CHECK(M(p)->abandon_orchestration_item(p, T0, "i1", token, 0, 1, &E));
  }
  ASSERT_STR_EQ(listing(p, "i1"), "");
  ASSERT_EQ(M(p)->get_kv(p, "i1", longkey, &v, NULL, &E), DX_EINVAL);
  ASSERT_EQ(M(p)->get_kv(p, "i1", "", &v, NULL, &E), DX_EINVAL);
  M(p)->destroy(p);
}

DX_TEST(pv_kv_special_keys_and_large_values) {
  dx_provider_t *p = open_fresh();
  static char big[DX_MAX_KV_VALUE_BYTES + 1];
  dx_event_t ev[] = {KSET("a b/c:d", "1", T0), KSET("ключ", "2", T0), KSET("big", big, T0)};
  char *v = NULL;
  memset(big, '7', sizeof big - 1);
  start_with(p, "i1", ev, 3);
  ASSERT_STR_EQ(live(p, "i1", "a b/c:d"), "1");
  ASSERT_STR_EQ(live(p, "i1", "ключ"), "2");
  CHECK(M(p)->get_kv(p, "i1", "big", &v, NULL, &E));
  ASSERT_EQ(strlen(v), DX_MAX_KV_VALUE_BYTES);
  free(v);
  M(p)->destroy(p);
}

/* Queue messages keep their name, data and (for carried ones) execution id, in order. */
DX_TEST(pv_queue_messages_round_trip_in_order) {
  dx_provider_t *p = open_fresh();
  dx_work_item_t q1 = item_of(DX_WI_QUEUE_MESSAGE, "i1", "items", "1");
  dx_work_item_t q2 = item_of(DX_WI_QUEUE_MESSAGE, "i1", "items", "{\"n\":2}");
  dx_orch_item_t *it;
  start_with(p, "i1", NULL, 0);
  q2.execution_id = 2;
  put(p, T0, q1);
  put(p, T0, item_of(DX_WI_EXTERNAL, "i1", "go", "1"));
  put(p, T0, q2);
  it = fetch_one(p, T0);
  ASSERT_EQ(it->messages_len, 3);
  ASSERT_EQ(it->messages[0].kind, DX_WI_QUEUE_MESSAGE);
  ASSERT_STR_EQ(it->messages[0].name, "items");
  ASSERT_STR_EQ(it->messages[0].data, "1");
  ASSERT_EQ(it->messages[0].execution_id, 0);
  ASSERT_EQ(it->messages[1].kind, DX_WI_EXTERNAL);
  ASSERT_EQ(it->messages[2].kind, DX_WI_QUEUE_MESSAGE);
  ASSERT_STR_EQ(it->messages[2].data, "{\"n\":2}");
  ASSERT_EQ(it->messages[2].execution_id, 2);
  CHECK(commit(p, it, 1, NULL, 0, DX_STATUS_NONE, NULL));
  M(p)->destroy(p);
}

/* A continue-as-new item carries the custom status into the next execution's start event. */
DX_TEST(pv_custom_status_carried_by_continue_as_new_item) {
  dx_provider_t *p = open_fresh();
  dx_work_item_t can = item_of(DX_WI_CAN, "i1", "Orch", "null");
  dx_orch_item_t *it;
  start_with(p, "i1", NULL, 0);
  can.execution_id = 2;
  can.custom_status = "{\"phase\":2}";
  it = wake(p, "i1");
  CHECK(commit(p, it, 1, NULL, 0, DX_STATUS_CONTINUED_AS_NEW, &can));
  it = fetch_one(p, T0);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_CAN);
  ASSERT_STR_EQ(it->messages[0].custom_status, "{\"phase\":2}");
  {
    dx_event_t st = kv_ev(DX_EV_ORCH_STARTED, NULL, "null", T0);
    dx_event_t *h;
    size_t n;
    dx_orch_ack_t a;
    memset(&a, 0, sizeof a);
    st.event_id = 1;
    st.name = "Orch";
    st.custom_status = "{\"phase\":2}";
    a.instance = "i1";
    a.lock_token = it->lock_token;
    a.execution_id = 2;
    a.delta = &st;
    a.delta_len = 1;
    a.orchestration_name = "Orch";
    CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
    dx_orch_item_free(it);
    CHECK(M(p)->read_history(p, "i1", 2, &h, &n, NULL, &E));
    ASSERT_EQ(n, 1);
    ASSERT_STR_EQ(h[0].custom_status, "{\"phase\":2}");
    dx_events_free(h, n);
  }
  M(p)->destroy(p);
}

/* Deleting an instance deletes its key-value state: committed and the running execution's. */
DX_TEST(pv_kv_deleted_with_the_instance) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_event_t e1[] = {KSET("kept-key", "1", T0)};
  dx_work_item_t can = item_of(DX_WI_CAN, "kv-victim", "Orch", "null");
  const char *ids[1] = {"kv-victim"};
  dx_orch_item_t *it;
  uint64_t deleted = 0;
  ASSERT(M(p)->delete_instances);
  can.execution_id = 2;
  start_with(p, "kv-victim", e1, 1);
  it = wake(p, "kv-victim");
  CHECK(commit(p, it, 1, NULL, 0, DX_STATUS_CONTINUED_AS_NEW, &can)); /* kv-victim's kv */
  it = fetch_one(p, T0);
  {
    dx_event_t c[] = {KSET("delta-key", "2", T0)}; /* and its kv_delta */
    CHECK(commit(p, it, 2, c, 1, DX_STATUS_NONE, NULL));
  }
  start_with(p, "kv-keeper", e1, 1);
  ASSERT_STR_EQ(listing(p, "kv-victim"), "delta-key=2@0 kept-key=1@0");
  CHECK(M(p)->delete_instances(p, ids, 1, 1, &deleted, &E));
  ASSERT_EQ(deleted, 1);
  ASSERT_STR_EQ(listing(p, "kv-victim"), "");
  ASSERT(live(p, "kv-victim", "kept-key") == NULL);
  ASSERT_STR_EQ(listing(p, "kv-keeper"), "kept-key=1@0");
  M(p)->destroy(p);
  ASSERT_EQ(dx_pv_rows_naming(store, "kv-victim"), 0);
  free(store);
}

/* Terminating a running instance ends its execution: its key-value changes are committed. */
DX_TEST(pv_kv_terminate_commits_the_changes) {
  dx_provider_t *p = open_fresh();
  dx_event_t e1[] = {KSET("a", "1", T0), KSET("b", "2", T0)};
  dx_failure_t why = {DX_CAT_APPLICATION, "Terminated", "stop", 0};
  dx_orch_item_t *it;
  ASSERT(M(p)->terminate_instance);
  start_with(p, "t1", e1, 2);
  it = wake(p, "t1");
  {
    dx_event_t c[] = {KCLR("a")};
    CHECK(commit(p, it, 1, c, 1, DX_STATUS_NONE, NULL));
  }
  CHECK(M(p)->terminate_instance(p, T0, "t1", &why, 0, &E));
  ASSERT_STR_EQ(listing(p, "t1"), "b=2@0");
  /* what a later fetch hands out is the committed state: the changes were folded in */
  put(p, T0, item_of(DX_WI_EXTERNAL, "t1", "late", "1"));
  it = fetch_one(p, T0);
  ASSERT_STR_EQ(snapshot(it), "b=2@0");
  CHECK(commit(p, it, 1, NULL, 0, DX_STATUS_NONE, NULL));
  M(p)->destroy(p);
}
