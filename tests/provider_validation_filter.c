/*
** provider_validation_filter.c -- provider contract tests of the fetch filter
** (set_fetch_filter): activity tags (duroxide §7.1) and orchestration capabilities for
** rolling deployments. Linked into every provider's test program with provider_validation.c.
*/
#include <string.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E;

static dx_provider_t *open_fresh(void) {
  dx_provider_t *p = dx_pv_fresh();
  ASSERT(M(p)->version >= 9 && M(p)->set_fetch_filter);
  return p;
}

/* Activity `id` of instance A, tagged `tag` (NULL: untagged), on session `sid` (NULL: none). */
static void put_activity(dx_provider_t *p, uint64_t id, const char *tag, const char *sid) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_ACT_EXECUTE;
  w.instance = "A";
  w.execution_id = 1;
  w.id = id;
  w.name = "Act";
  w.data = "null";
  w.tag = (char *)tag;
  w.session_id = (char *)sid;
  CHECK(M(p)->enqueue_for_worker(p, T0, &w, &E));
}

/* Set the filter: untagged work or not, and up to two tags (NULL: none). */
static void filter(dx_provider_t *p, int untagged, const char *t1, const char *t2) {
  const char *tags[2];
  dx_fetch_filter_t f;
  memset(&f, 0, sizeof f);
  f.untagged = untagged;
  f.tags = tags;
  if (t1) tags[f.n_tags++] = t1;
  if (t2) tags[f.n_tags++] = t2;
  CHECK(M(p)->set_fetch_filter(p, &f, &E));
}

/* Fetch (and keep locked) one worker item: its id, 0 when nothing is fetchable. `worker`
** non-NULL fetches with a session config for that worker. */
static uint64_t take(dx_provider_t *p, int64_t now, const char *worker) {
  dx_session_cfg_t cfg;
  dx_work_fetch_t f;
  uint64_t id;
  memset(&cfg, 0, sizeof cfg);
  cfg.worker_id = worker;
  cfg.session_lock_ms = LOCK;
  cfg.max_sessions = 4;
  CHECK(M(p)->fetch_work_item(p, now, LOCK, worker ? &cfg : NULL, &f, &E));
  id = f.item.kind ? f.item.id : 0;
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  return id;
}

DX_TEST(pvf_untagged_only_by_default) {
  dx_provider_t *p = open_fresh();
  put_activity(p, 1, "gpu", NULL);
  put_activity(p, 2, NULL, NULL);
  ASSERT_EQ(take(p, T0, NULL), 2); /* no filter: untagged work only (duroxide DefaultOnly) */
  ASSERT_EQ(take(p, T0, NULL), 0);
  M(p)->destroy(p);
}

DX_TEST(pvf_tags_select_rows_in_fifo_order) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store), *q = dx_pv_open(store);
  int64_t due;
  put_activity(p, 1, "gpu", NULL);
  put_activity(p, 2, NULL, NULL);
  put_activity(p, 3, "io", NULL);
  put_activity(p, 4, "gpu", NULL);
  filter(p, 0, "gpu", NULL);       /* Tags{gpu} */
  filter(q, 1, "io", NULL);        /* DefaultAnd{io} */
  CHECK(M(p)->next_due_ms(p, T0, &due, &E));
  ASSERT_EQ(due, T0);
  ASSERT_EQ(take(p, T0, NULL), 1);
  ASSERT_EQ(take(q, T0, NULL), 2);
  ASSERT_EQ(take(q, T0, NULL), 3);
  ASSERT_EQ(take(q, T0, NULL), 0); /* 4 is gpu work */
  ASSERT_EQ(take(p, T0, NULL), 4);
  ASSERT_EQ(take(p, T0, NULL), 0);
  /* a lock that lapsed comes back to a worker with the tag only */
  ASSERT_EQ(take(q, T0 + LOCK + 1, NULL), 2);
  ASSERT_EQ(take(q, T0 + LOCK + 1, NULL), 3);
  ASSERT_EQ(take(q, T0 + LOCK + 1, NULL), 0);
  ASSERT_EQ(take(p, T0 + LOCK + 1, NULL), 1);
  M(p)->destroy(p);
  M(q)->destroy(q);
  free(store);
}

DX_TEST(pvf_no_tags_and_no_untagged_takes_nothing) {
  dx_provider_t *p = open_fresh();
  put_activity(p, 1, "gpu", NULL);
  put_activity(p, 2, NULL, NULL);
  filter(p, 0, NULL, NULL);
  ASSERT_EQ(take(p, T0, NULL), 0);
  filter(p, 1, "gpu", NULL);
  ASSERT_EQ(take(p, T0, NULL), 1);
  CHECK(M(p)->set_fetch_filter(p, NULL, &E)); /* back to the default */
  ASSERT_EQ(take(p, T0, NULL), 2);
  M(p)->destroy(p);
}

DX_TEST(pvf_bad_filters_are_refused) {
  dx_provider_t *p = open_fresh();
  const char *six[6] = {"a", "b", "c", "d", "e", "f"};
  char long_tag[DX_MAX_TAG_BYTES + 2];
  const char *one[1];
  dx_fetch_filter_t f;
  dx_work_item_t w;
  memset(&f, 0, sizeof f);
  f.tags = six;
  f.n_tags = 6;
  ASSERT_EQ(M(p)->set_fetch_filter(p, &f, &E), DX_EINVAL);
  ASSERT(strstr(E.msg, "at most 5 tags"));
  memset(long_tag, 'x', sizeof long_tag - 1);
  long_tag[sizeof long_tag - 1] = 0;
  one[0] = long_tag;
  f.tags = one;
  f.n_tags = 1;
  ASSERT_EQ(M(p)->set_fetch_filter(p, &f, &E), DX_EINVAL);
  /* a row with an over-long tag is refused at the enqueue, changing nothing */
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_ACT_EXECUTE;
  w.instance = "A";
  w.execution_id = 1;
  w.id = 1;
  w.name = "Act";
  w.tag = long_tag;
  ASSERT_EQ(M(p)->enqueue_for_worker(p, T0, &w, &E), DX_EINVAL);
  ASSERT(strstr(E.msg, "tag"));
  filter(p, 1, NULL, NULL);
  ASSERT_EQ(take(p, T0, NULL), 0);
  M(p)->destroy(p);
}

DX_TEST(pvf_tagged_session_rows_go_to_workers_with_the_tag) {
  char *store = dx_pv_new_store();
  dx_provider_t *cpu = dx_pv_open(store), *gpu = dx_pv_open(store);
  put_activity(cpu, 1, "gpu", "s1");
  put_activity(cpu, 2, NULL, "s2");
  filter(cpu, 1, NULL, NULL);
  filter(gpu, 0, "gpu", NULL);
  ASSERT_EQ(take(cpu, T0, "cpu"), 2); /* claims s2; s1's head is gpu work */
  ASSERT_EQ(take(cpu, T0, "cpu"), 0);
  ASSERT_EQ(take(gpu, T0, "gpu"), 1); /* claims s1 */
  M(cpu)->destroy(cpu);
  M(gpu)->destroy(gpu);
  free(store);
}

/* {===== orchestration capabilities =====} */

static void put_start(dx_provider_t *p, const char *inst, const char *name, const char *version) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_START;
  w.instance = (char *)inst;
  w.execution_id = 1;
  w.name = (char *)name;
  w.version = (char *)version;
  w.data = "null";
  CHECK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E));
}

static void can_run(dx_provider_t *p, const dx_orch_capability_t *caps, size_t n) {
  dx_fetch_filter_t f;
  memset(&f, 0, sizeof f);
  f.untagged = 1;
  f.capabilities_set = 1;
  f.capabilities = caps;
  f.n_capabilities = n;
  CHECK(M(p)->set_fetch_filter(p, &f, &E));
}

/* Fetch an orchestration item; returns its instance (static copy) or "" when none, and acks
** it as its first turn (recording the version it ran) when `ack_version` is set. */
static const char *take_orch(dx_provider_t *p, int64_t now, const char *ack_version) {
  static char got[64];
  dx_orch_item_t *it = NULL;
  CHECK(M(p)->fetch_orchestration_item(p, now, LOCK, &it, &E));
  if (!it) return "";
  snprintf(got, sizeof got, "%s", it->instance);
  if (ack_version) {
    dx_event_t ev;
    dx_orch_ack_t a;
    memset(&ev, 0, sizeof ev);
    ev.kind = DX_EV_ORCH_STARTED;
    ev.event_id = 1;
    ev.name = it->orchestration_name;
    ev.version = (char *)ack_version;
    ev.data = "null";
    memset(&a, 0, sizeof a);
    a.instance = it->instance;
    a.lock_token = it->lock_token;
    a.execution_id = it->execution_id;
    a.delta = &ev;
    a.delta_len = 1;
    a.orchestration_name = it->orchestration_name;
    a.orchestration_version = ack_version;
    CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  }
  dx_orch_item_free(it);
  return got;
}

DX_TEST(pvf_capabilities_skip_starts_a_worker_cannot_run) {
  char *store = dx_pv_new_store();
  dx_provider_t *old = dx_pv_open(store), *nw = dx_pv_open(store);
  static const dx_orch_capability_t v1[] = {{"Order", "1.0.0"}};
  static const dx_orch_capability_t v2[] = {{"Order", "1.0.0"}, {"Order", "2.0.0"},
                                            {"Audit", "1.0.0"}};
  put_start(old, "pinned2", "Order", "2.0.0");
  put_start(old, "audit", "Audit", NULL);
  put_start(old, "any", "Order", NULL);
  can_run(old, v1, 1);
  can_run(nw, v2, 3);
  /* the old worker passes over the instances it cannot run to the one it can */
  ASSERT_STR_EQ(take_orch(old, T0, "1.0.0"), "any");
  ASSERT_STR_EQ(take_orch(old, T0, NULL), "");
  ASSERT_STR_EQ(take_orch(nw, T0, "1.0.0"), "audit"); /* same due time: by instance id */
  ASSERT_STR_EQ(take_orch(nw, T0, "2.0.0"), "pinned2");
  M(old)->destroy(old);
  M(nw)->destroy(nw);
  free(store);
}

/* With capabilities set, a start that falls due while a batch is open is fetched in it, and
** one made ready in the batch by a message too (LMDB skips the index walk while it knows
** nothing there is due yet: it must follow the batch's clock and writes). */
DX_TEST(pvf_capabilities_fetch_what_falls_due_within_a_batch) {
  dx_provider_t *p = open_fresh();
  static const dx_orch_capability_t caps[] = {{"Order", "1.0.0"}};
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_START;
  w.instance = "later";
  w.execution_id = 1;
  w.name = "Order";
  w.data = "null";
  CHECK(M(p)->enqueue_for_orchestrator(p, T0, &w, 100, &E)); /* due at T0 + 100 */
  can_run(p, caps, 1);
  CHECK(M(p)->begin(p, &E));
  ASSERT_STR_EQ(take_orch(p, T0 + 1, NULL), "");
  put_start(p, "now", "Order", NULL); /* a nested method of the batch: due at T0 */
  ASSERT_STR_EQ(take_orch(p, T0 + 1, NULL), "now");
  ASSERT_STR_EQ(take_orch(p, T0 + 2, NULL), "");
  ASSERT_STR_EQ(take_orch(p, T0 + 100, NULL), "later");
  CHECK(M(p)->commit(p, 1, &E));
  M(p)->destroy(p);
}

DX_TEST(pvf_capabilities_follow_the_instance_version) {
  char *store = dx_pv_new_store();
  dx_provider_t *old = dx_pv_open(store), *nw = dx_pv_open(store);
  static const dx_orch_capability_t v1[] = {{"Order", "1.0.0"}};
  static const dx_orch_capability_t v2[] = {{"Order", "2.0.0"}};
  dx_work_item_t ev;
  put_start(nw, "o", "Order", NULL);
  can_run(nw, v2, 1);
  ASSERT_STR_EQ(take_orch(nw, T0, "2.0.0"), "o"); /* ran (and pinned) 2.0.0 */
  memset(&ev, 0, sizeof ev);
  ev.kind = DX_WI_EXTERNAL;
  ev.instance = "o";
  ev.name = "go";
  ev.data = "1";
  CHECK(M(old)->enqueue_for_orchestrator(old, T0 + 1, &ev, 0, &E));
  can_run(old, v1, 1);
  ASSERT_STR_EQ(take_orch(old, T0 + 2, NULL), ""); /* its next turn needs 2.0.0 */
  ASSERT_STR_EQ(take_orch(nw, T0 + 2, NULL), "o");
  /* messages for an instance nobody has started yet are anyone's (they are dropped) */
  ev.instance = "ghost";
  CHECK(M(old)->enqueue_for_orchestrator(old, T0 + 3, &ev, 0, &E));
  ASSERT_STR_EQ(take_orch(old, T0 + 4, NULL), "");
  M(old)->destroy(old);
  M(nw)->destroy(nw);
  free(store);
}

/* {===== next_due_ms under the filter =====} */

/* A worker whose only due work belongs to others (another tag, an orchestration version it
** lacks) is told nothing is due (it sleeps instead of polling); work it takes, due later,
** gives that later time. */
DX_TEST(pvf_next_due_honours_the_filter) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store), *q = dx_pv_open(store);
  static const dx_orch_capability_t v1[] = {{"Order", "1.0.0"}};
  dx_fetch_filter_t f;
  const char *gpu[1] = {"gpu"};
  int64_t due;
  dx_work_item_t w;
  put_activity(p, 1, "io", NULL);     /* plain work of another tag */
  put_activity(p, 2, "io", "s1");     /* session work of another tag */
  put_start(p, "pinned2", "Order", "2.0.0"); /* a start this worker cannot run */
  memset(&f, 0, sizeof f);
  f.tags = gpu;
  f.n_tags = 1; /* Tags{gpu}: no untagged work */
  f.capabilities_set = 1;
  f.capabilities = v1;
  f.n_capabilities = 1;
  CHECK(M(p)->set_fetch_filter(p, &f, &E));
  CHECK(M(p)->next_due_ms(p, T0, &due, &E));
  ASSERT_EQ(due, INT64_MAX);
  CHECK(M(q)->next_due_ms(q, T0, &due, &E)); /* no filter: the start is due */
  ASSERT_EQ(due, T0);
  /* work it takes, due later: that time */
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_ACT_EXECUTE;
  w.instance = "B";
  w.execution_id = 1;
  w.id = 3;
  w.name = "Act";
  w.data = "null";
  w.tag = "gpu";
  CHECK(M(p)->enqueue_for_worker(p, T0 + 500, &w, &E));
  CHECK(M(p)->next_due_ms(p, T0, &due, &E));
  ASSERT_EQ(due, T0 + 500);
  w.kind = DX_WI_START;
  w.instance = "runs1";
  w.id = 0;
  w.name = "Order";
  w.version = "1.0.0";
  w.tag = NULL;
  CHECK(M(p)->enqueue_for_orchestrator(p, T0 + 300, &w, 0, &E));
  CHECK(M(p)->next_due_ms(p, T0, &due, &E));
  ASSERT_EQ(due, T0 + 300);
  ASSERT_STR_EQ(take_orch(p, T0 + 300, NULL), "runs1");
  ASSERT_EQ(take(p, T0 + 500, NULL), 3);
  M(p)->destroy(p);
  M(q)->destroy(q);
  free(store);
}
