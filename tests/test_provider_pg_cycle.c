/*
** test_provider_pg_cycle.c -- PostgreSQL-only behaviour of a store cycle: the round trips
** run_cycle takes, reads outside a batch as one snapshot, and a fetch that never hands out a
** history older than its lock. Part of the test_provider_pg program (its schemas and helpers:
** test_provider_pg.c, declared in test_provider_pg.h); needs $DX_TEST_PG as it does.
*/
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "providers/pg/pg.h"
#include "providers/pg/pg_sql.h"
#include "test_provider_pg.h"
#include "testlib.h"

/* {===== run_cycle: round trips per store cycle =====} */

#define RC_N 6

/* One store cycle through run_cycle as the runtime makes it (a worker that takes session
** work, none of which is due): begin, the acks, fetch up to RC_N of each, commit. Returns the
** round trips it took; the fetched items land in orch/work. */
static uint64_t rc_cycle(dx_provider_t *p, int64_t now, dx_cycle_ack_t *acks, size_t n,
                         dx_orch_item_t **orch, size_t *n_orch, dx_work_fetch_t *work,
                         size_t *n_work) {
  dx_session_cfg_t sc = {.worker_id = "rc-worker", .session_lock_ms = 600000, .max_sessions = 10};
  dx_cycle_t cy;
  dx_error_t err;
  uint64_t before = dx__pg_round_trips(p);
  memset(&cy, 0, sizeof cy);
  cy.sessions = &sc;
  cy.sync = n > 0;
  cy.acks = acks;
  cy.n_acks = n;
  cy.orch_lock_ms = cy.work_lock_ms = 600000;
  cy.max_orch = cy.max_work = RC_N;
  cy.orch_out = orch;
  cy.work_out = work;
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->run_cycle(p, now, &cy, &err));
  ASSERT_EQ(cy.fetch_rc, 0);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  *n_orch = cy.n_orch;
  *n_work = cy.n_work;
  return dx__pg_round_trips(p) - before;
}

static size_t history_len_of(dx_provider_t *p, const char *inst) {
  dx_event_t *ev;
  dx_error_t err;
  size_t n;
  ASSERT_OK(M(p)->read_history(p, inst, 0, &ev, &n, NULL, &err));
  dx_events_free(ev, n);
  return n;
}

/* A turn of `it` that appends one event. */
static const dx_orch_ack_t *rc_ack(dx_orch_ack_t *a, dx_event_t *ev, const dx_orch_item_t *it) {
  memset(a, 0, sizeof *a);
  memset(ev, 0, sizeof *ev);
  ev->event_id = it->history_len + 1;
  ev->kind = it->history_len ? DX_EV_EXT_EVENT : DX_EV_ORCH_STARTED;
  ev->name = it->history_len ? "go" : "Orch";
  ev->data = "1";
  a->instance = it->instance;
  a->lock_token = it->lock_token;
  a->execution_id = it->execution_id;
  a->orchestration_name = "Orch";
  a->delta = ev;
  a->delta_len = 1;
  a->status = DX_STATUS_RUNNING;
  return a;
}

/* Queue RC_N starts (instances <prefix>0..) and RC_N worker rows. */
static void rc_fill(dx_provider_t *p, int64_t now, const char *prefix) {
  dx_error_t err;
  char inst[32];
  int i;
  for (i = 0; i < RC_N; i++) {
    dx_work_item_t s, w;
    snprintf(inst, sizeof inst, "%s%d", prefix, i);
    s = item(DX_WI_START, inst, 0);
    w = item(DX_WI_ACT_EXECUTE, inst, 1 + (uint64_t)i);
    ASSERT_OK(M(p)->enqueue_for_orchestrator(p, now, &s, 0, &err));
    w.name = "Act";
    ASSERT_OK(M(p)->enqueue_for_worker(p, now, &w, &err));
  }
}

/* A session row due between two plain rows: the cycle hands out the older plain row, then the
** session row (claimed, in a second transaction), then the younger plain row, as fetches one
** by one would; nothing is left locked that was not handed out. */
DX_TEST(pg_run_cycle_keeps_due_order_with_session_rows) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t work[RC_N];
  dx_orch_item_t *orch[RC_N];
  dx_work_item_t w;
  dx_error_t err;
  size_t no, nw, i;
  int64_t now = dx_pv_wall_ms();
  w = item(DX_WI_ACT_EXECUTE, "P", 1);
  ASSERT_OK(M(p)->enqueue_for_worker(p, now - 30, &w, &err));
  w = item(DX_WI_ACT_EXECUTE, "S", 2);
  w.session_id = "sess-1";
  ASSERT_OK(M(p)->enqueue_for_worker(p, now - 20, &w, &err));
  w = item(DX_WI_ACT_EXECUTE, "P", 3);
  ASSERT_OK(M(p)->enqueue_for_worker(p, now - 10, &w, &err));
  rc_cycle(p, now, NULL, 0, orch, &no, work, &nw);
  ASSERT_EQ(no, 0);
  ASSERT_EQ(nw, 3);
  ASSERT_EQ(work[0].item.id, 1);
  ASSERT_EQ(work[1].item.id, 2);
  ASSERT_EQ(work[1].session_claimed, 1);
  ASSERT_EQ(work[2].item.id, 3);
  for (i = 0; i < nw; i++) {
    ASSERT_OK(M(p)->ack_work_item(p, now, work[i].lock_token, NULL, &err));
    dx_work_item_clear(&work[i].item);
    free(work[i].previous_owner);
  }
  M(p)->destroy(p);
  free(store);
}

/* A store cycle is one round trip (one pipeline sync, COMMIT included), however many acks it
** carries: RC_N turn acks + RC_N work acks (with completions) + full fetches, and one ack of
** each; a stale token is that ack's own outcome, not the cycle's. */
/* A cycle's acks go as one call per kind (dx_ack_orchs / dx_ack_works) and still each is
** whole or nothing: a refused ack (duplicate event, an instance acked twice, a worker token
** acked twice) writes nothing, its neighbours all of theirs, each instance its own key-value
** events (the second's also folded: its execution ends). */
static void acks_each_whole(void) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_orch_item_t *orch[RC_N], *orch2[RC_N];
  dx_work_fetch_t work[RC_N], work2[RC_N];
  dx_work_item_t done;
  dx_orch_ack_t oa[5];
  dx_event_t ev[5][2];
  dx_cycle_ack_t acks[7];
  dx_error_t err;
  size_t no, nw, no2, nw2, i;
  char *val = NULL;
  int64_t at, now = dx_pv_wall_ms();
  rc_fill(p, now, "w");
  rc_cycle(p, now, NULL, 0, orch, &no, work, &nw);
  ASSERT_EQ(no, RC_N);
  ASSERT_EQ(nw, RC_N);
  ASSERT_EQ(orch_depth(p), RC_N);
  memset(acks, 0, sizeof acks);
  for (i = 0; i < 5; i++) { /* started, then a second event (a key set for the first two) */
    const dx_orch_item_t *it = orch[i < 4 ? i : 3];
    acks[i].orch = rc_ack(&oa[i], &ev[i][0], it);
    ev[i][1] = ev[i][0];
    ev[i][1].event_id = 2;
    oa[i].delta = ev[i];
    oa[i].delta_len = 2;
  }
  for (i = 0; i < 2; i++) {
    ev[i][1].kind = DX_EV_KV_SET;
    ev[i][1].name = "k";
    ev[i][1].data = i ? "v1" : "v0";
    ev[i][1].timestamp_ms = now;
  }
  oa[1].status = DX_STATUS_COMPLETED; /* its changes fold into the committed state */
  oa[1].output = "\"out\"";
  ev[2][1].event_id = 1; /* a repeated event id: refused */
  ev[4][1].name = "again"; /* orch[3] a second time, same token: refused */
  done = item(DX_WI_ACT_COMPLETED, work[0].item.instance, work[0].item.id);
  acks[5].work_token = acks[6].work_token = work[0].lock_token;
  acks[5].completion = acks[6].completion = &done;
  ASSERT_EQ(rc_cycle(p, now, acks, 7, orch2, &no2, work2, &nw2), 1); /* one round trip */
  ASSERT_EQ(acks[0].rc, 0);
  ASSERT_EQ(acks[1].rc, 0);
  ASSERT_EQ(acks[2].rc, DX_EEXIST);
  ASSERT_EQ(acks[3].rc, 0);
  ASSERT_EQ(acks[4].rc, DX_ETOKEN);
  ASSERT_EQ(acks[5].rc, 0);
  ASSERT_EQ(acks[6].rc, DX_ELOCK);
  ASSERT_EQ(history_len_of(p, orch[0]->instance), 2);
  ASSERT_EQ(history_len_of(p, orch[1]->instance), 2);
  { /* never acked: no record */
    dx_event_t *none = NULL;
    size_t nn = 0;
    ASSERT_EQ(M(p)->read_history(p, orch[2]->instance, 0, &none, &nn, NULL, &err), DX_ENOTFOUND);
  }
  ASSERT_EQ(history_len_of(p, orch[3]->instance), 2);
  /* the three acked starts are gone; one completion queued (not two) */
  ASSERT_EQ(orch_depth(p), RC_N - 3 + 1);
  for (i = 0; i < 2; i++) {
    ASSERT_OK(M(p)->get_kv(p, orch[i]->instance, "k", &val, &at, &err));
    ASSERT_STR_EQ(val, i ? "v1" : "v0");
    free(val);
  }
  ASSERT_EQ(M(p)->get_kv(p, orch[3]->instance, "k", &val, &at, &err), DX_ENOTFOUND);
  for (i = 0; i < no2; i++) dx_orch_item_free(orch2[i]);
  for (i = 0; i < nw2; i++) dx_work_item_clear(&work2[i].item);
  for (i = 0; i < RC_N; i++) {
    dx_orch_item_free(orch[i]);
    dx_work_item_clear(&work[i].item);
  }
  M(p)->destroy(p);
  free(store);
}

DX_TEST(pg_run_cycle_acks_are_each_whole) { acks_each_whole(); }

/* The same with every ack a call of its own (a cycle whose arrays pass the size bound is
** split into several calls; here the bound is 1 byte): same outcomes, one round trip. */
DX_TEST(pg_run_cycle_splits_big_ack_calls) {
  size_t was = dx__pg_set_ack_call_bytes(1);
  acks_each_whole();
  dx__pg_set_ack_call_bytes(was);
}

/* Fetch one worker item as `worker` (sessions: lease `slock_ms`, up to 10 owned). */
static dx_work_fetch_t fence_fetch(dx_provider_t *p, int64_t now, const char *worker,
                                   int64_t lock_ms, int64_t slock_ms) {
  dx_session_cfg_t sc = {.worker_id = worker, .session_lock_ms = slock_ms, .max_sessions = 10};
  dx_work_fetch_t f;
  dx_error_t err;
  ASSERT_OK(M(p)->fetch_work_item(p, now, lock_ms, &sc, &f, &err));
  ASSERT(f.item.kind != 0);
  return f;
}

static void fence_enqueue(dx_provider_t *p, int64_t at, uint64_t id, const char *sid) {
  dx_work_item_t w = item(DX_WI_ACT_EXECUTE, "F", id);
  dx_error_t err;
  w.name = "Act";
  w.session_id = (char *)sid;
  ASSERT_OK(M(p)->enqueue_for_worker(p, at, &w, &err));
}

/* The worker-item acks of one cycle are decided in one dx_ack_works call, each on its own
** (migration 11: set-based): a row locked under an earlier epoch of its session (another
** worker claimed it) is refused and names the new owner, whatever the acker's clock says; a
** row of another session of that owner; a plain row; an expired lock; the same token twice (the second finds
** it acked); an unknown token; the new owner's own row. Only the accepted acks queue their
** completions, and the new owner then runs the fenced row. */
DX_TEST(pg_run_cycle_fences_stale_session_acks_in_one_call) {
  enum { SL = 2000, LK = 600000 };
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t a1, a3, a4, a5, b2, again[2];
  dx_work_item_t c[7];
  dx_cycle_ack_t acks[7];
  dx_cycle_t cy;
  dx_error_t err;
  uint64_t before;
  int64_t now = dx_pv_wall_ms(), later = now + SL - 1; /* A's clock: its item locks still live */
  int i, got1 = 0, got5 = 0;
  fence_enqueue(p, now - 50, 1, "s1");
  a1 = fence_fetch(p, now, "A", LK, SL); /* A claims s1 (epoch 1) */
  fence_enqueue(p, now - 40, 3, "s2");
  a3 = fence_fetch(p, now, "A", LK, SL); /* and s2 */
  fence_enqueue(p, now - 30, 4, NULL);
  a4 = fence_fetch(p, now, "A", LK, SL);
  fence_enqueue(p, now - 20, 5, NULL);
  a5 = fence_fetch(p, now, "A", 10, SL); /* its lock ends at now + 10 */
  ASSERT_EQ(a1.item.id, 1);
  ASSERT_EQ(a3.item.id, 3);
  ASSERT_EQ(a4.item.id, 4);
  ASSERT_EQ(a5.item.id, 5);
  fence_enqueue(p, now - 10, 2, "s1");
  b2 = fence_fetch(p, now + SL, "B", LK, SL); /* A's leases lapsed: B claims s1 (epoch 2) */
  ASSERT_EQ(b2.item.id, 2);
  ASSERT_EQ(b2.session_claimed, 1);
  const char *inst[7] = {"c-fenced", "c-s2", "c-plain", "c-expired", "c-again", "c-none", "c-b"};
  uint64_t tok[7] = {a1.lock_token, a3.lock_token, a4.lock_token, a5.lock_token, a3.lock_token,
                     UINT64_C(0xdeadbeef), b2.lock_token};
  memset(acks, 0, sizeof acks);
  for (i = 0; i < 7; i++) {
    c[i] = item(DX_WI_ACT_COMPLETED, inst[i], 1);
    acks[i].work_token = tok[i];
    acks[i].completion = &c[i];
  }
  before = orch_depth(p);
  memset(&cy, 0, sizeof cy);
  cy.acks = acks;
  cy.n_acks = 7;
  cy.sync = 1;
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->run_cycle(p, later, &cy, &err));
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(acks[0].rc, DX_ELOCK);
  if (!strstr(acks[0].err.msg, "moved to worker 'B'")) DX_FAIL_AT("ack 0: %s", acks[0].err.msg);
  ASSERT_EQ(acks[1].rc, 0);
  ASSERT_EQ(acks[2].rc, 0);
  ASSERT_EQ(acks[3].rc, DX_ELOCK);
  ASSERT(strstr(acks[3].err.msg, "expired") != NULL);
  ASSERT_EQ(acks[4].rc, DX_ELOCK);
  ASSERT(strstr(acks[4].err.msg, "no worker item is locked") != NULL);
  ASSERT_EQ(acks[5].rc, DX_ELOCK);
  ASSERT_EQ(acks[6].rc, 0);
  ASSERT_EQ(orch_depth(p), before + 3); /* c-s2, c-plain, c-b */
  /* B runs what A was refused: the fenced session row (attempt 2) and the expired plain row */
  for (i = 0; i < 2; i++) {
    again[i] = fence_fetch(p, now + SL, "B", LK, SL);
    got1 |= again[i].item.id == 1 && again[i].attempt_count == 2;
    got5 |= again[i].item.id == 5;
    ASSERT_OK(M(p)->ack_work_item(p, now + SL, again[i].lock_token, NULL, &err));
  }
  ASSERT(got1 && got5);
  dx_work_fetch_t *all[] = {&a1, &a3, &a4, &a5, &b2, &again[0], &again[1]};
  for (i = 0; i < 7; i++) {
    dx_work_item_clear(&all[i]->item);
    free(all[i]->previous_owner);
  }
  M(p)->destroy(p);
  free(store);
}

DX_TEST(pg_run_cycle_is_one_round_trip) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_orch_item_t *orch[RC_N], *orch2[RC_N];
  dx_work_fetch_t work[RC_N], work2[RC_N];
  dx_work_item_t done[RC_N];
  dx_orch_ack_t oa[RC_N];
  dx_event_t ev[RC_N];
  dx_cycle_ack_t acks[2 * RC_N + 1];
  size_t no, nw, no2, nw2, i;
  uint64_t rt_many, rt_one;
  int64_t now = dx_pv_wall_ms();
  ASSERT(M(p)->version >= 5); /* run_cycle is a version 4 member */
  rc_fill(p, now, "a");
  rc_cycle(p, now, NULL, 0, orch, &no, work, &nw);
  ASSERT_EQ(no, RC_N);
  ASSERT_EQ(nw, RC_N);
  rc_fill(p, now, "b");
  memset(acks, 0, sizeof acks);
  for (i = 0; i < RC_N; i++) {
    acks[i].orch = rc_ack(&oa[i], &ev[i], orch[i]);
    done[i] = item(DX_WI_ACT_COMPLETED, work[i].item.instance, work[i].item.id);
    acks[RC_N + i].work_token = work[i].lock_token;
    acks[RC_N + i].completion = &done[i];
  }
  acks[2 * RC_N].work_token = 0xdeadbeef; /* no row has it */
  rt_many = rc_cycle(p, now, acks, 2 * RC_N + 1, orch2, &no2, work2, &nw2);
  for (i = 0; i < 2 * RC_N; i++) ASSERT_EQ(acks[i].rc, 0);
  ASSERT_EQ(acks[2 * RC_N].rc, DX_ELOCK);
  ASSERT_EQ(no2, RC_N);
  ASSERT_EQ(nw2, RC_N);
  ASSERT_EQ(history_len_of(p, "a0"), 1);
  for (i = 0; i < RC_N; i++) {
    dx_orch_item_free(orch[i]);
    dx_work_item_clear(&work[i].item);
  }
  /* one ack of each kind, same fetches */
  rc_fill(p, now, "c");
  memset(acks, 0, sizeof acks);
  acks[0].orch = rc_ack(&oa[0], &ev[0], orch2[0]);
  acks[1].work_token = work2[0].lock_token;
  rt_one = rc_cycle(p, now, acks, 2, orch, &no, work, &nw);
  ASSERT_EQ(acks[0].rc, 0);
  ASSERT_EQ(acks[1].rc, 0);
  ASSERT_EQ(nw, RC_N);
  printf("# round trips per cycle: %llu with %d acks, %llu with 2 acks\n",
         (unsigned long long)rt_many, 2 * RC_N + 1, (unsigned long long)rt_one);
  ASSERT_EQ(rt_many, 1);
  ASSERT_EQ(rt_one, 1);
  for (i = 0; i < no; i++) dx_orch_item_free(orch[i]);
  for (i = 0; i < nw; i++) dx_work_item_clear(&work[i].item);
  for (i = 0; i < RC_N; i++) {
    dx_orch_item_free(orch2[i]);
    dx_work_item_clear(&work2[i].item);
  }
  M(p)->destroy(p);
  free(store);
}

/* A batch whose first fetch was a single call (an eager start's cycle, store.c) closes with
** run_cycle: the instances that call locked ahead and did not hand out are neither stranded
** (locked until their lock lapsed) nor lost: the cycle's own fetch can hand them out, and what
** it leaves is due again after the commit. */
DX_TEST(pg_run_cycle_after_a_single_fetch_strands_nothing) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_orch_item_t *first = NULL, *orch[RC_N], *rest[RC_N];
  dx_work_fetch_t work[RC_N];
  size_t no, nw, i;
  dx_cycle_t cy;
  dx_error_t err;
  int64_t now = dx_pv_wall_ms();
  rc_fill(p, now, "e"); /* RC_N starts due */
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, now, 600000, &first, &err));
  ASSERT(first != NULL);
  memset(&cy, 0, sizeof cy);
  cy.orch_lock_ms = cy.work_lock_ms = 600000;
  cy.max_orch = 2;
  cy.orch_out = orch;
  ASSERT_OK(M(p)->run_cycle(p, now, &cy, &err));
  ASSERT_EQ(cy.fetch_rc, 0);
  ASSERT_OK(M(p)->commit(p, 0, &err));
  ASSERT_EQ(cy.n_orch, 2);
  /* the other RC_N - 3 are due at once, not after their lock */
  rc_cycle(p, now, NULL, 0, rest, &no, work, &nw);
  ASSERT_EQ(no, RC_N - 3);
  dx_orch_item_free(first);
  for (i = 0; i < cy.n_orch; i++) dx_orch_item_free(orch[i]);
  for (i = 0; i < no; i++) dx_orch_item_free(rest[i]);
  for (i = 0; i < nw; i++) dx_work_item_clear(&work[i].item);
  M(p)->destroy(p);
  free(store);
}

/* A row of session `sid` (NULL: plain) due at `at`. */
static void rc_enqueue(dx_provider_t *p, int64_t at, int kind, const char *sid, uint64_t id) {
  dx_work_item_t w = item(kind, "S", id);
  dx_error_t err;
  w.session_id = (char *)sid;
  ASSERT_OK(M(p)->enqueue_for_worker(p, at, &w, &err));
}

/* Fetch (as worker `worker`, session lease `lease_ms` from `now`) and ack the one row due. */
static void rc_run_one(dx_provider_t *p, int64_t now, const char *worker, int64_t lease_ms) {
  dx_session_cfg_t sc = {.worker_id = worker, .session_lock_ms = lease_ms, .max_sessions = 10};
  dx_work_fetch_t f;
  dx_error_t err;
  ASSERT_OK(M(p)->fetch_work_item(p, now, 600000, &sc, &f, &err));
  ASSERT(f.item.kind != 0);
  ASSERT_OK(M(p)->ack_work_item(p, now, f.lock_token, NULL, &err));
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
}

/* A cycle with session work due is still one round trip (the claim is decided in the
** database, migration 10) and hands out what fetches one by one would, in due order: a plain
** row, the next row of a session the worker owns (no claim), a close marker at the head of a
** session nobody holds (dropped, not handed out), a new session's row (claimed, waited since
** it was due), a row of a session whose owner's lease lapsed (claimed from that owner), a
** younger plain row. */
DX_TEST(pg_run_cycle_with_session_claim_is_one_round_trip) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t work[RC_N];
  dx_orch_item_t *orch[RC_N];
  dx_queue_depths_t d;
  dx_error_t err;
  size_t no, nw, i;
  uint64_t rt;
  int64_t now = dx_pv_wall_ms();
  rc_enqueue(p, now - 1000, DX_WI_ACT_EXECUTE, "own", 100);
  rc_run_one(p, now - 1000, "rc-worker", 600000); /* rc-worker owns "own" */
  rc_enqueue(p, now - 1000, DX_WI_ACT_EXECUTE, "moved", 101);
  rc_run_one(p, now - 1000, "other-worker", 10); /* its lease lapsed long ago */
  rc_enqueue(p, now - 60, DX_WI_ACT_EXECUTE, NULL, 1);
  rc_enqueue(p, now - 50, DX_WI_ACT_EXECUTE, "own", 2);
  rc_enqueue(p, now - 45, DX_WI_SESSION_CLOSE, "gone", 3);
  rc_enqueue(p, now - 40, DX_WI_ACT_EXECUTE, "new", 4);
  rc_enqueue(p, now - 30, DX_WI_ACT_EXECUTE, "moved", 5);
  rc_enqueue(p, now - 20, DX_WI_ACT_EXECUTE, NULL, 6);
  rt = rc_cycle(p, now, NULL, 0, orch, &no, work, &nw);
  printf("# round trips of a cycle with session rows due: %llu\n", (unsigned long long)rt);
  ASSERT_EQ(no, 0);
  ASSERT_EQ(nw, 5);
  ASSERT_EQ(work[0].item.id, 1);
  ASSERT_EQ(work[0].session_claimed, 0);
  ASSERT_EQ(work[1].item.id, 2);
  ASSERT_EQ(work[1].session_claimed, 0);
  ASSERT_EQ(work[2].item.id, 4);
  ASSERT_EQ(work[2].session_claimed, 1);
  ASSERT(work[2].previous_owner == NULL);
  ASSERT_EQ(work[2].waited_ms, 40);
  ASSERT_EQ(work[3].item.id, 5);
  ASSERT_EQ(work[3].session_claimed, 1);
  ASSERT_STR_EQ(work[3].previous_owner, "other-worker");
  ASSERT_EQ(work[3].waited_ms, 30);
  ASSERT_EQ(work[4].item.id, 6);
  ASSERT_EQ(work[4].session_claimed, 0);
  ASSERT_EQ(rt, 1);
  for (i = 0; i < nw; i++) {
    ASSERT_OK(M(p)->ack_work_item(p, now, work[i].lock_token, NULL, &err));
    dx_work_item_clear(&work[i].item);
    free(work[i].previous_owner);
  }
  ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
  ASSERT_EQ(d.worker, 0); /* the close marker went */
  M(p)->destroy(p);
  free(store);
}

/* One cycle claims no more sessions than the worker may hold: with room for one more, of two
** new sessions due only the older is claimed; the other's row stays queued. */
DX_TEST(pg_run_cycle_claims_within_capacity) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_session_cfg_t sc = {.worker_id = "cap-worker", .session_lock_ms = 600000, .max_sessions = 2};
  dx_work_fetch_t work[RC_N];
  dx_queue_depths_t d;
  dx_cycle_t cy;
  dx_error_t err;
  size_t i;
  int64_t now = dx_pv_wall_ms();
  running_instance(p, "S"); /* its sessions keep their slot */
  rc_enqueue(p, now - 1000, DX_WI_ACT_EXECUTE, "held", 100);
  rc_run_one(p, now - 1000, "cap-worker", 600000);
  rc_enqueue(p, now - 50, DX_WI_ACT_EXECUTE, "s1", 1);
  rc_enqueue(p, now - 40, DX_WI_ACT_EXECUTE, "s2", 2);
  rc_enqueue(p, now - 30, DX_WI_ACT_EXECUTE, "s1", 3);
  memset(&cy, 0, sizeof cy);
  cy.sessions = &sc;
  cy.work_lock_ms = 600000;
  cy.max_work = RC_N;
  cy.work_out = work;
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->run_cycle(p, now, &cy, &err));
  ASSERT_EQ(cy.fetch_rc, 0);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(cy.n_work, 2);
  ASSERT_EQ(work[0].item.id, 1);
  ASSERT_EQ(work[0].session_claimed, 1);
  ASSERT_EQ(work[1].item.id, 3); /* s1 is ours now: its next row, no claim */
  ASSERT_EQ(work[1].session_claimed, 0);
  ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
  ASSERT_EQ(d.worker, 3); /* s2's row waits (and the two locked ones) */
  for (i = 0; i < cy.n_work; i++) {
    dx_work_item_clear(&work[i].item);
    free(work[i].previous_owner);
  }
  M(p)->destroy(p);
  free(store);
}

/* Once a claim pick of a batch found nothing for a worker (dx_fetch_work's NULL-token row),
** the batch's later fetches skip it (pg_conn_t.claim_none): a session row another connection
** commits meanwhile is claimed by the next batch, not this one. */
DX_TEST(pg_batch_skips_the_claim_pick_once_it_found_nothing) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store), *other = dx_pv_open(store);
  dx_session_cfg_t sc = {.worker_id = "W", .session_lock_ms = 600000, .max_sessions = 10};
  dx_work_fetch_t f;
  dx_error_t err;
  int64_t now = dx_pv_wall_ms();
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, now, 600000, &sc, &f, &err));
  ASSERT_EQ(f.item.kind, 0); /* nothing at all: the claim pick found nothing */
  rc_enqueue(other, now, DX_WI_ACT_EXECUTE, "late", 1); /* committed on its own connection */
  ASSERT_OK(M(p)->fetch_work_item(p, now, 600000, &sc, &f, &err));
  ASSERT_EQ(f.item.kind, 0); /* not asked again in this batch */
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, now, 600000, &sc, &f, &err));
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(f.session_claimed, 1);
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  M(other)->destroy(other);
  M(p)->destroy(p);
  free(store);
}

/* {===== reads outside a batch are one snapshot =====} */

/* A read of instance `id` (NULL: a warm-up read of an unknown id, its results dropped) whose
** results go to ud; returns the read's code. */
typedef int (*snap_read_fn)(dx_provider_t *p, const char *id, void *ud);

typedef struct {
  dx_provider_t *p;
  snap_read_fn fn;
  const char *id;
  void *ud;
  atomic_int ready, go;
  int rc;
} snap_reader_t;

static void *snap_reader(void *arg) {
  snap_reader_t *r = arg;
  /* first a read of an unknown id: this thread's connection is made (and its statements
  ** prepared) before the table is locked */
  r->fn(r->p, NULL, r->ud);
  atomic_store(&r->ready, 1);
  while (!atomic_load(&r->go)) usleep(1000);
  r->rc = r->fn(r->p, r->id, r->ud);
  return NULL;
}

/* Read `id` with fn on another thread while a transaction on another connection, holding
** `table` locked (ACCESS EXCLUSIVE), has run `play` (in the store's schema) and commits once
** the reader waits for that table: a read made of several statements is caught between them
** (the first ones read before the commit, the one reading `table` after it). Returns the read's
** code; its results are in ud. */
static int read_while_committing(dx_provider_t *p, const char *schema, const char *table,
                                 const char *play, snap_read_fn fn, const char *id, void *ud) {
  snap_reader_t r;
  pthread_t th;
  PGconn *c = admin();
  char q[1536];
  int waiting = 0, tries;
  memset(&r, 0, sizeof r);
  r.p = p;
  r.fn = fn;
  r.id = id;
  r.ud = ud;
  ASSERT_EQ(pthread_create(&th, NULL, snap_reader, &r), 0);
  while (!atomic_load(&r.ready)) usleep(1000);
  snprintf(q, sizeof q, "SET search_path TO %s; BEGIN; LOCK TABLE %s IN ACCESS EXCLUSIVE MODE; %s",
           schema, table, play);
  sql(c, q);
  atomic_store(&r.go, 1);
  snprintf(q, sizeof q, "SELECT count(*) FROM pg_locks WHERE NOT granted"
                        " AND relation = '%s.%s'::regclass", schema, table);
  for (tries = 0; tries < 2000 && !waiting; tries++) {
    PGresult *res = PQexec(c, q);
    waiting = PQresultStatus(res) == PGRES_TUPLES_OK && atoi(PQgetvalue(res, 0, 0)) > 0;
    PQclear(res);
    if (!waiting) usleep(5000);
  }
  ASSERT(waiting);
  sql(c, "COMMIT");
  ASSERT_EQ(pthread_join(th, NULL), 0);
  PQfinish(c);
  return r.rc;
}

/* An instance `inst` that has had one turn (record, execution 1, event 1). */
static void one_turn(dx_provider_t *p, const char *inst) {
  dx_work_item_t w = item(DX_WI_START, inst, 0);
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t a;
  dx_event_t ev;
  dx_error_t err;
  int64_t now = dx_pv_wall_ms();
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, now, &w, 0, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, now, 30000, &it, &err));
  ASSERT(it && strcmp(it->instance, inst) == 0);
  ASSERT_OK(M(p)->ack_orchestration_item(p, now, rc_ack(&a, &ev, it), &err));
  dx_orch_item_free(it);
}

/* The statements that delete instance 'gone' whole, as delete_instances does. */
#define DELETE_GONE                                                                          \
  " DELETE FROM history WHERE instance_id = 'gone'; DELETE FROM executions WHERE"           \
  " instance_id = 'gone'; DELETE FROM instances WHERE instance_id = 'gone'"

static int info_read(dx_provider_t *p, const char *id, void *ud) {
  dx_instance_info_t info;
  dx_error_t err;
  int rc = M(p)->get_instance_info(p, id ? id : "nobody", &info, &err);
  (void)ud;
  if (!rc) dx_instance_info_clear(&info);
  return rc;
}

/* A client reading a just-started instance while its first turn commits (the record made, the
** start consumed, in one transaction) finds it. Read as two statements (the record, then the
** queue), the queue was read after the commit and the instance looked unknown (a CLI `enqueue`
** right after `start` failed "unknown instance"). */
DX_TEST(pg_get_info_is_one_snapshot_while_the_first_turn_commits) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t w = item(DX_WI_START, "race1", 0);
  dx_orch_item_t *it = NULL;
  dx_error_t err;
  w.name = "Orch";
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, dx_pv_wall_ms(), &w, 0, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, dx_pv_wall_ms(), 30000, &it, &err));
  ASSERT(it);
  ASSERT_EQ(read_while_committing(p, g_schemas[g_nschemas - 1], "orch_queue",
                                  " INSERT INTO instances (instance_id, name, current_exec,"
                                  " created_at, updated_at, created_seq) VALUES ('race1', 'Orch',"
                                  " 1, 1, 1, 1); UPDATE orch_queue SET lock_token = NULL,"
                                  " locked_until = NULL, ready_at = NULL, locked_by = NULL"
                                  " WHERE instance_id = 'race1'", info_read, "race1", NULL), 0);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

static int history_read(dx_provider_t *p, const char *id, void *ud) {
  dx_event_t *ev = NULL;
  dx_error_t err;
  size_t n = 0;
  int rc = M(p)->read_history(p, id ? id : "nobody", 0, &ev, &n, NULL, &err);
  if (id) *(size_t *)ud = n;
  dx_events_free(ev, n);
  return rc;
}

/* The latest history of an instance deleted meanwhile: the whole history, or unknown. Read as
** the record and then the events, it was found with no events at all. */
DX_TEST(pg_read_history_is_one_snapshot_while_the_instance_is_deleted) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  size_t n = 99;
  one_turn(p, "gone");
  ASSERT_EQ(read_while_committing(p, g_schemas[g_nschemas - 1], "history", DELETE_GONE,
                                  history_read, "gone", &n), DX_ENOTFOUND);
  M(p)->destroy(p);
  free(store);
}

static int executions_read(dx_provider_t *p, const char *id, void *ud) {
  dx_execution_info_t *ex = NULL;
  dx_error_t err;
  size_t n = 0;
  int rc = M(p)->list_executions(p, id ? id : "nobody", &ex, &n, &err);
  if (id) *(size_t *)ud = n;
  free(ex);
  return rc;
}

/* The executions of an instance deleted meanwhile: all of them, or unknown. Read as the record
** and then the executions, it was found with none. */
DX_TEST(pg_list_executions_is_one_snapshot_while_the_instance_is_deleted) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  size_t n = 99;
  one_turn(p, "gone");
  ASSERT_EQ(read_while_committing(p, g_schemas[g_nschemas - 1], "executions", DELETE_GONE,
                                  executions_read, "gone", &n), DX_ENOTFOUND);
  M(p)->destroy(p);
  free(store);
}

static int count_queued(void *ud, const dx_queued_t *q) {
  (void)q;
  (*(int *)ud)++;
  return 0;
}

static int queue_read(dx_provider_t *p, const char *id, void *ud) {
  dx_error_t err;
  int n = 0, rc = M(p)->instance_queue(p, id ? id : "nobody", count_queued, &n, &err);
  if (id) *(int *)ud = n;
  return rc;
}

/* An instance's queue rows while a transaction drops both its message and its worker row: both
** or neither. Read as two statements, the message was listed without the worker row. */
DX_TEST(pg_instance_queue_is_one_snapshot_while_its_rows_go) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t m = item(DX_WI_EXTERNAL, "q1", 0), w = item(DX_WI_ACT_EXECUTE, "q1", 1);
  dx_error_t err;
  int n = -1;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, dx_pv_wall_ms(), &m, 0, &err));
  ASSERT_OK(M(p)->enqueue_for_worker(p, dx_pv_wall_ms(), &w, &err));
  ASSERT_OK(queue_read(p, "q1", &n));
  ASSERT_EQ(n, 2);
  ASSERT_OK(read_while_committing(p, g_schemas[g_nschemas - 1], "work",
                                  " DELETE FROM orch_msgs WHERE instance_id = 'q1';"
                                  " DELETE FROM orch_queue WHERE instance_id = 'q1';"
                                  " DELETE FROM work WHERE instance_id = 'q1'",
                                  queue_read, "q1", &n));
  ASSERT_EQ(n, 0);
  M(p)->destroy(p);
  free(store);
}

typedef struct {
  const char *id;
  int seen;
} page_find_t;

static int page_read(dx_provider_t *p, const char *id, void *ud) {
  page_find_t *f = ud;
  dx_list_query_t q;
  dx_instance_info_t *rows = NULL;
  dx_error_t err;
  char *next = NULL;
  size_t n = 0, i;
  int rc;
  memset(&q, 0, sizeof q);
  q.status = DX_LIST_ANY;
  q.limit = 100;
  rc = M(p)->list_page(p, dx_pv_wall_ms(), &q, &rows, &n, &next, &err);
  for (i = 0; id && i < n; i++) f->seen += strcmp(rows[i].instance_id, f->id) == 0;
  dx_instance_infos_free(rows, n);
  free(next);
  return rc;
}

/* A page listed while an instance's first turn commits (record made, start consumed) shows it
** once. Read as queued starts and then recorded instances, it was listed twice: as queued,
** and again with its record. */
DX_TEST(pg_list_page_is_one_snapshot_while_a_first_turn_commits) {
  char *store = store_url(NULL);
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t w = item(DX_WI_START, "lp1", 0);
  page_find_t f = {"lp1", 0};
  dx_error_t err;
  one_turn(p, "older"); /* a recorded instance: the page reads both parts */
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, dx_pv_wall_ms(), &w, 0, &err));
  ASSERT_OK(read_while_committing(p, g_schemas[g_nschemas - 1], "executions",
                                  " INSERT INTO instances (instance_id, name, current_exec,"
                                  " created_at, updated_at, created_seq) VALUES ('lp1', 'Orch',"
                                  " 1, 1, 1, 1); DELETE FROM orch_msgs WHERE instance_id = 'lp1'",
                                  page_read, "lp1", &f));
  ASSERT_EQ(f.seen, 1);
  M(p)->destroy(p);
  free(store);
}

/* {===== a fetch never hands out a history older than its lock =====} */

/* A gate inside ORCH_FETCH: connections of role `role` evaluate dx_gate() on every queue row
** they read (a restrictive row-level security policy; the owner, a superuser, bypasses it),
** and dx_gate() waits while the test holds advisory lock GATE_KEY. So a fetch of that role can
** be held between its statement's snapshot and its row locks. */
#define GATE_KEY 7730041

static void gate_install(PGconn *c, const char *schema, const char *role) {
  char q[2048], db[128];
  PGresult *r = PQexec(c, "SELECT current_database()");
  ASSERT(PQresultStatus(r) == PGRES_TUPLES_OK);
  snprintf(db, sizeof db, "%s", PQgetvalue(r, 0, 0));
  PQclear(r);
  snprintf(g_role, sizeof g_role, "%s", role); /* dropped at exit if the test fails */
  snprintf(q, sizeof q,
           "SET search_path TO %s; SET client_min_messages TO warning;"
           " DROP ROLE IF EXISTS %s; CREATE ROLE %s LOGIN;"
           " GRANT CREATE ON DATABASE %s TO %s;" /* an open's CREATE SCHEMA IF NOT EXISTS */
           " GRANT USAGE, CREATE ON SCHEMA %s TO %s;"
           " GRANT ALL ON ALL TABLES IN SCHEMA %s TO %s;"
           " GRANT ALL ON ALL SEQUENCES IN SCHEMA %s TO %s;"
           " CREATE FUNCTION dx_gate() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $g$ BEGIN"
           " PERFORM pg_advisory_lock_shared(%d); PERFORM pg_advisory_unlock_shared(%d);"
           " RETURN true; END $g$;"
           " ALTER TABLE orch_queue ENABLE ROW LEVEL SECURITY;"
           " CREATE POLICY everyone ON orch_queue USING (true) WITH CHECK (true);"
           " CREATE POLICY gate ON orch_queue AS RESTRICTIVE TO %s USING (dx_gate())",
           schema, role, role, db, role, schema, role, schema, role, schema, role, GATE_KEY,
           GATE_KEY, role);
  sql(c, q);
}

static void gate_remove(PGconn *c, const char *role) {
  char q[256];
  snprintf(q, sizeof q, "DROP OWNED BY %s; DROP ROLE %s", role, role);
  sql(c, q);
  g_role[0] = 0;
}

/* Block until a backend of `role` waits for the gate. */
static void gate_wait_for(PGconn *c, const char *role) {
  char q[512];
  int waiting = 0, tries;
  snprintf(q, sizeof q, "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                        " WHERE l.locktype = 'advisory' AND NOT l.granted AND a.usename = '%s'",
           role);
  for (tries = 0; tries < 2000 && !waiting; tries++) {
    PGresult *res = PQexec(c, q);
    waiting = PQresultStatus(res) == PGRES_TUPLES_OK && atoi(PQgetvalue(res, 0, 0)) > 0;
    PQclear(res);
    if (!waiting) usleep(5000);
  }
  ASSERT(waiting);
}

typedef struct {
  dx_provider_t *p;
  int64_t now;
  int cycle; /* fetch by run_cycle (else one fetch_orchestration_item) */
  atomic_int ready, go;
  int rc;
  dx_error_t err;
  dx_orch_item_t *it;
} gated_fetch_t;

static void *gated_fetch(void *arg) {
  gated_fetch_t *g = arg;
  dx_orch_item_t *none = NULL;
  memset(&g->err, 0, sizeof g->err);
  /* first a fetch with nothing due: the connection and its statements exist before the gate
  ** closes */
  g->rc = M(g->p)->fetch_orchestration_item(g->p, T0, 30000, &none, &g->err);
  atomic_store(&g->ready, 1);
  if (g->rc || none) return NULL;
  while (!atomic_load(&g->go)) usleep(1000);
  if (g->cycle) {
    dx_cycle_t cy;
    memset(&cy, 0, sizeof cy);
    cy.orch_lock_ms = 30000;
    cy.max_orch = 1;
    cy.orch_out = &g->it;
    if ((g->rc = M(g->p)->begin(g->p, &g->err))) return NULL;
    if ((g->rc = M(g->p)->run_cycle(g->p, g->now, &cy, &g->err)) == 0) {
      g->rc = cy.fetch_rc;
      if (cy.fetch_rc) g->err = cy.fetch_err;
      M(g->p)->commit(g->p, 1, &g->err);
    }
    return NULL;
  }
  g->rc = M(g->p)->fetch_orchestration_item(g->p, g->now, 30000, &g->it, &g->err);
  return NULL;
}

/* Instance `st` has had its first turn (event 1); message M is due at t+1, message M2 at
** t+50. Fetch B (now t+100) is held by the gate after its statement's snapshot, before its
** row lock; meanwhile another process (A, now t+10) locks the instance, takes M and commits a
** turn (event 2) that releases it, due again at M2. B then locks the instance's newest row
** version, whose history has 2 events: B must not hand it out with the history of its
** snapshot (1 event; its turn's event 2 would be refused as a duplicate, the turn wasted:
** pg_processes_running_workflows_lose_nothing saw that now and then). */
static void fetch_after_a_turn_committed_meanwhile(int cycle) {
  char *store = store_url(NULL), burl[1200], role[48];
  const char *schema = g_schemas[g_nschemas - 1];
  dx_provider_t *a = dx_pv_open(store), *b;
  dx_work_item_t w = item(DX_WI_START, "st", 0), m1 = item(DX_WI_EXTERNAL, "st", 0);
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t ack;
  dx_event_t ev;
  dx_error_t err;
  gated_fetch_t g;
  pthread_t th;
  PGconn *c = admin();
  char q[128];
  int64_t t = dx_pv_wall_ms();
  snprintf(role, sizeof role, "dx_gate_%d", (int)getpid());
  ASSERT_OK(M(a)->enqueue_for_orchestrator(a, t - 10, &w, 0, &err));
  ASSERT_OK(M(a)->fetch_orchestration_item(a, t - 10, 30000, &it, &err));
  ASSERT(it);
  ASSERT_OK(M(a)->ack_orchestration_item(a, t - 10, rc_ack(&ack, &ev, it), &err));
  dx_orch_item_free(it);
  ASSERT_OK(M(a)->enqueue_for_orchestrator(a, t + 1, &m1, 0, &err));
  m1.data = "2";
  ASSERT_OK(M(a)->enqueue_for_orchestrator(a, t, &m1, 50, &err));
  gate_install(c, schema, role);
  snprintf(burl, sizeof burl, "%s&user=%s", store, role);
  {
    /* the base URL names its user: B's role replaces it */
    char *u = strstr(burl, "user="), *amp = u ? strchr(u, '&') : NULL;
    ASSERT(u && amp);
    memmove(u, amp + 1, strlen(amp + 1) + 1);
  }
  b = dx_pv_open(burl);
  memset(&g, 0, sizeof g);
  g.p = b;
  g.now = t + 100;
  g.cycle = cycle;
  ASSERT_EQ(pthread_create(&th, NULL, gated_fetch, &g), 0);
  while (!atomic_load(&g.ready)) usleep(1000);
  snprintf(q, sizeof q, "SELECT pg_advisory_lock(%d)", GATE_KEY);
  sql(c, q);
  atomic_store(&g.go, 1);
  gate_wait_for(c, role);
  /* process A's turn, committed while B waits */
  ASSERT_OK(M(a)->fetch_orchestration_item(a, t + 10, 30000, &it, &err));
  ASSERT(it && it->history_len == 1 && it->messages_len == 1);
  ASSERT_OK(M(a)->ack_orchestration_item(a, t + 10, rc_ack(&ack, &ev, it), &err));
  dx_orch_item_free(it);
  snprintf(q, sizeof q, "SELECT pg_advisory_unlock(%d)", GATE_KEY);
  sql(c, q);
  ASSERT_EQ(pthread_join(th, NULL), 0);
  if (g.rc) DX_FAIL_AT("gated fetch: %s: %s", dx_err_name(g.rc), g.err.msg);
  /* a single fetch reads the instance again in its transaction and hands it out whole; a
  ** cycle (one round trip) puts it back, due still, for the next cycle */
  if (!cycle) {
    ASSERT(g.it);
    it = g.it;
  } else {
    ASSERT(g.it == NULL);
    ASSERT_OK(M(b)->fetch_orchestration_item(b, t + 100, 30000, &it, &err));
    ASSERT(it);
  }
  ASSERT_EQ(it->history_len, 2);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_STR_EQ(it->messages[0].data, "2");
  ASSERT_OK(M(b)->ack_orchestration_item(b, t + 100, rc_ack(&ack, &ev, it), &err));
  dx_orch_item_free(it);
  ASSERT_EQ(history_len_of(a, "st"), 3);
  M(b)->destroy(b);
  gate_remove(c, role);
  PQfinish(c);
  M(a)->destroy(a);
  free(store);
}

DX_TEST(pg_fetch_never_hands_out_a_history_older_than_its_lock) {
  fetch_after_a_turn_committed_meanwhile(0);
}

DX_TEST(pg_run_cycle_never_hands_out_a_history_older_than_its_lock) {
  fetch_after_a_turn_committed_meanwhile(1);
}
