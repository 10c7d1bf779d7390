/*
** provider_validation_hint.c -- provider contract tests of the history hint
** (set_history_hint, version 11): a fetch hands out only the last event of a history the
** caller says it holds, and the whole history whenever the store's differs. Linked into every
** provider's test program with provider_validation.c.
*/
#include <string.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E;

/* What the fake cache holds: one instance, its execution and number of events. */
typedef struct {
  const char *instance;
  uint64_t exec, n;
  int asked;
} held_t;

static int held_cb(void *ud, const char *instance, uint64_t *exec, uint64_t *n) {
  held_t *h = ud;
  h->asked++;
  if (!h->instance || strcmp(h->instance, instance) != 0) return 0;
  *exec = h->exec;
  *n = h->n;
  return 1;
}

/* The same answer as a list (a provider may ask before it knows what it fetches). */
static size_t recent_cb(void *ud, size_t max, char **ids, uint64_t *execs, uint64_t *ns) {
  held_t *h = ud;
  if (!h->instance || max == 0) return 0;
  ids[0] = strdup(h->instance);
  execs[0] = h->exec;
  ns[0] = h->n;
  return ids[0] ? 1 : 0;
}

static void hint(dx_provider_t *p, held_t *h) {
  dx_history_hint_t x = {held_cb, h, recent_cb};
  CHECK(M(p)->set_history_hint(p, h ? &x : NULL, &E));
}

static dx_provider_t *open_fresh(void) {
  dx_provider_t *p = dx_pv_fresh();
  ASSERT(M(p)->version >= 11 && M(p)->set_history_hint);
  return p;
}

static void enqueue(dx_provider_t *p, int64_t now, int kind, const char *inst) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = kind;
  w.instance = (char *)inst;
  w.execution_id = kind == DX_WI_START ? 1 : 0;
  w.name = kind == DX_WI_START ? "Orch" : "go";
  w.version = kind == DX_WI_START ? "1.0.0" : NULL;
  w.data = "1";
  CHECK(M(p)->enqueue_for_orchestrator(p, now, &w, 0, &E));
}

/* Fetch one instance through fetch_orchestration_item, or through run_cycle when the
** provider has one and `cycle` is set (both must honour the hint). */
static dx_orch_item_t *fetch(dx_provider_t *p, int64_t now, int cycle) {
  dx_orch_item_t *it = NULL;
  if (cycle && M(p)->run_cycle) {
    dx_cycle_t c;
    memset(&c, 0, sizeof c);
    c.orch_lock_ms = c.work_lock_ms = LOCK;
    c.max_orch = 1;
    c.orch_out = &it;
    CHECK(M(p)->begin(p, &E));
    CHECK(M(p)->run_cycle(p, now, &c, &E));
    CHECK(c.fetch_rc);
    CHECK(M(p)->commit(p, 1, &E));
    return c.n_orch ? it : NULL;
  }
  CHECK(M(p)->fetch_orchestration_item(p, now, LOCK, &it, &E));
  return it;
}

/* Ack `it` appending events first..first+n-1 (the first one OrchestrationStarted when 1). */
static void ack(dx_provider_t *p, int64_t now, dx_orch_item_t *it, uint64_t first, size_t n) {
  dx_event_t ev[4];
  dx_orch_ack_t a;
  size_t i;
  memset(ev, 0, sizeof ev);
  for (i = 0; i < n; i++) {
    ev[i].event_id = first + i;
    ev[i].timestamp_ms = now + (int64_t)i;
    ev[i].kind = ev[i].event_id == 1 ? DX_EV_ORCH_STARTED : DX_EV_EXT_EVENT;
    ev[i].name = ev[i].event_id == 1 ? "Orch" : "go";
    ev[i].data = "1";
  }
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = it->orchestration_name;
  a.orchestration_version = it->orchestration_version;
  a.status = first == 1 ? DX_STATUS_RUNNING : DX_STATUS_NONE;
  a.delta = ev;
  a.delta_len = n;
  CHECK(M(p)->ack_orchestration_item(p, now, &a, &E));
  dx_orch_item_free(it);
}

/* Instance "A" with a committed history of 3 events and one event raised since. */
static void setup(dx_provider_t *p) {
  enqueue(p, T0, DX_WI_START, "A");
  ack(p, T0, fetch(p, T0, 0), 1, 3);
  enqueue(p, T0 + 10, DX_WI_EXTERNAL, "A");
}

/* Fetch "A" with hint h: the item (caller frees). */
static dx_orch_item_t *fetch_a(dx_provider_t *p, held_t *h, int cycle) {
  dx_orch_item_t *it;
  hint(p, h);
  it = fetch(p, T0 + 20, cycle);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "A");
  ASSERT_EQ(it->messages_len, 1);
  return it;
}

static void hint_sends_only_the_last_event(int cycle) {
  dx_provider_t *p = open_fresh();
  held_t h = {"A", 1, 3, 0};
  dx_orch_item_t *it;
  setup(p);
  it = fetch_a(p, &h, cycle);
  ASSERT_EQ(it->history_held, 3);
  ASSERT_EQ(it->history_len, 1);
  ASSERT_EQ(it->history[0].event_id, 3);
  ASSERT_EQ(it->history[0].kind, DX_EV_EXT_EVENT);
  ASSERT_EQ(it->history[0].timestamp_ms, T0 + 2);
  ASSERT_EQ(it->execution_id, 1);
  ASSERT_STR_EQ(it->orchestration_name, "Orch");
  ack(p, T0 + 21, it, 4, 1); /* the turn commits as usual */
  h.n = 4;
  enqueue(p, T0 + 30, DX_WI_EXTERNAL, "A");
  it = fetch(p, T0 + 40, cycle);
  ASSERT(it);
  ASSERT_EQ(it->history_held, 4);
  ASSERT_EQ(it->history[0].event_id, 4);
  dx_orch_item_free(it);
  M(p)->destroy(p);
}

DX_TEST(pvh_hint_sends_only_the_last_event) { hint_sends_only_the_last_event(0); }
DX_TEST(pvh_hint_sends_only_the_last_event_in_a_cycle) { hint_sends_only_the_last_event(1); }

/* Every answer that is not exactly the store's execution: the whole history, held 0. */
DX_TEST(pvh_whole_history_unless_the_store_holds_exactly_that) {
  static const held_t cases[] = {
    {"A", 1, 2, 0},  /* the store has more: another worker turned the instance */
    {"A", 1, 5, 0},  /* the store has fewer (the caller is ahead: a commit it made failed) */
    {"A", 2, 3, 0},  /* another execution */
    {"A", 1, 0, 0},  /* nothing held */
    {"B", 1, 3, 0},  /* another instance */
  };
  size_t i;
  int cycle;
  for (cycle = 0; cycle < 2; cycle++)
    for (i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      dx_provider_t *p = open_fresh();
      held_t h = cases[i];
      dx_orch_item_t *it;
      setup(p);
      it = fetch_a(p, &h, cycle);
      ASSERT_EQ(it->history_held, 0);
      ASSERT_EQ(it->history_len, 3);
      ASSERT_EQ(it->history[0].kind, DX_EV_ORCH_STARTED);
      ASSERT_EQ(it->history[2].event_id, 3);
      dx_orch_item_free(it);
      M(p)->destroy(p);
    }
}

DX_TEST(pvh_no_hint_after_clearing_it) {
  dx_provider_t *p = open_fresh();
  held_t h = {"A", 1, 3, 0};
  dx_orch_item_t *it;
  setup(p);
  hint(p, &h);
  hint(p, NULL);
  it = fetch(p, T0 + 20, 0);
  ASSERT(it);
  ASSERT_EQ(h.asked, 0);
  ASSERT_EQ(it->history_held, 0);
  ASSERT_EQ(it->history_len, 3);
  dx_orch_item_free(it);
  M(p)->destroy(p);
}

/* held() says nothing now: the cache evicted the instance after the provider asked recent()
** (before the fetch picked it). */
static int held_none_cb(void *ud, const char *instance, uint64_t *exec, uint64_t *n) {
  (void)ud, (void)instance, (void)exec, (void)n;
  return 0;
}

/* held() changed its answer between recent() and the fetch: the item either says what it left
** out (history_held) or is whole -- never a cut history that looks whole. */
DX_TEST(pvh_never_a_cut_history_without_history_held) {
  int cycle;
  for (cycle = 0; cycle < 2; cycle++) {
    dx_provider_t *p = open_fresh();
    held_t h = {"A", 1, 3, 0};
    dx_history_hint_t x = {held_none_cb, &h, recent_cb};
    dx_orch_item_t *it;
    setup(p);
    CHECK(M(p)->set_history_hint(p, &x, &E));
    it = fetch(p, T0 + 20, cycle);
    ASSERT(it);
    if (it->history_held) {
      ASSERT_EQ(it->history_held, 3);
      ASSERT_EQ(it->history_len, 1);
      ASSERT_EQ(it->history[0].event_id, 3);
    } else {
      ASSERT_EQ(it->history_len, 3);
      ASSERT_EQ(it->history[0].event_id, 1);
    }
    dx_orch_item_free(it);
    M(p)->destroy(p);
  }
}
