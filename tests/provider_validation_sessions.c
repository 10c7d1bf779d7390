/*
** provider_validation_sessions.c -- provider contract tests of activity sessions (duroxide v2
** implicit sessions, DESIGN.md §6): claims, leases, capacity, release, orphans, and the
** session history (provider v6). Linked with provider_validation.c into every provider's test
** program; uses only the vtable and the hooks of provider_validation.h.
*/
#include <string.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E; /* the last call's error detail, printed by CHECK */

/* {===== sessions (duroxide v2 implicit sessions, DESIGN.md §6) =====} */

dx_work_item_t dx_pv_sess_item(const char *inst, uint64_t id, const char *sid) {
  dx_work_item_t w = dx_pv_act_item(inst, 1, id);
  w.session_id = (char *)sid;
  return w;
}

dx_work_fetch_t dx_pv_sfetch(dx_provider_t *p, int64_t now, const char *worker, uint32_t max) {
  dx_session_cfg_t cfg;
  dx_work_fetch_t f;
  memset(&cfg, 0, sizeof cfg);
  cfg.worker_id = worker;
  cfg.session_lock_ms = SLOCK;
  cfg.max_sessions = max;
  CHECK(M(p)->fetch_work_item(p, now, LOCK, &cfg, &f, &E));
  return f;
}

void dx_pv_fclear(dx_work_fetch_t *f) {
  dx_work_item_clear(&f->item);
  free(f->previous_owner);
  memset(f, 0, sizeof *f);
}

/* Fetch as `worker` and expect the item with `id` (0: nothing); returns session_claimed. */
int dx_pv_take(dx_provider_t *p, int64_t now, const char *worker, uint32_t max, uint64_t id) {
  dx_work_fetch_t f = dx_pv_sfetch(p, now, worker, max);
  int claimed = f.session_claimed;
  if (id == 0 && f.item.kind != 0)
    DX_FAIL_AT("%s fetched item %llu, expected nothing", worker, (unsigned long long)f.item.id);
  if (id != 0 && (f.item.kind == 0 || f.item.id != id))
    DX_FAIL_AT("%s fetched %s %llu, expected item %llu", worker, f.item.kind ? "item" : "nothing",
               (unsigned long long)f.item.id, (unsigned long long)id);
  dx_pv_fclear(&f);
  return claimed;
}

/* Fetch as `worker`, expect item `id`, ack it at `now`. */
void dx_pv_take_ack(dx_provider_t *p, int64_t now, const char *worker, uint64_t id) {
  dx_work_fetch_t f = dx_pv_sfetch(p, now, worker, 10);
  ASSERT_EQ(f.item.id, id);
  CHECK(M(p)->ack_work_item(p, now, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
}

static int srow_cb(void *ud, const dx_session_info_t *s) {
  dx_pv_srows_t *r = ud;
  dx_pv_srow_t *o;
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

dx_pv_srows_t dx_pv_sessions_of(dx_provider_t *p) {
  dx_pv_srows_t r;
  memset(&r, 0, sizeof r);
  CHECK(M(p)->list_sessions(p, srow_cb, &r, &E));
  return r;
}

/* The listed row of `sid`; fails the test when there is none. */
dx_pv_srow_t dx_pv_srow(dx_provider_t *p, const char *sid) {
  dx_pv_srows_t r = dx_pv_sessions_of(p);
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

uint64_t dx_pv_release_sessions(dx_provider_t *p, int64_t now, const char *worker,
                                const char *sid) {
  uint64_t n = 99;
  CHECK(M(p)->release_session_locks(p, now, worker, sid, &n, &E));
  return n;
}

DX_TEST(pv_session_claimable_by_any_worker_initially) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  /* a queued row alone makes no session row, but the session is listed, unowned */
  ASSERT_EQ(dx_pv_sessions_of(p).n, 1);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "");
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 1);
  f = dx_pv_sfetch(p, T0, "B", 10);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_STR_EQ(f.item.session_id, "s1");
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT(f.previous_owner == NULL);
  ASSERT_EQ(f.attempt_count, 1);
  dx_pv_fclear(&f);
  dx_pv_done(p);
}

DX_TEST(pv_session_pinned_after_claim) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  ASSERT_EQ(dx_pv_take(p, T0, "A", 10, 1), 1);
  dx_pv_take(p, T0 + 1, "B", 10, 0);            /* item 2 is due, but s1 is A's */
  dx_pv_take(p, T0 + SLOCK - 1, "B", 10, 0);    /* still A's until the lease lapses */
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 2);
  dx_pv_done(p);
}

DX_TEST(pv_session_owner_can_fetch_more) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  /* sessions are not scoped to an instance */
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("J", 3, "s1"));
  ASSERT_EQ(dx_pv_take(p, T0, "A", 10, 1), 1);
  ASSERT_EQ(dx_pv_take(p, T0 + 1, "A", 10, 2), 0); /* already A's: no new claim */
  ASSERT_EQ(dx_pv_take(p, T0 + 2, "A", 10, 3), 0);
  dx_pv_take(p, T0 + 3, "A", 10, 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_non_session_items_unaffected) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_act_item("P", 1, 10));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_act_item("P", 1, 11));
  ASSERT_EQ(dx_pv_take(p, T0 + 2, "A", 10, 1), 1);
  ASSERT_EQ(dx_pv_take(p, T0 + 2, "B", 10, 10), 0); /* B skips A's session, takes plain work */
  f = dx_pv_wfetch(p, T0 + 2);                        /* and so does a session-less worker */
  ASSERT_EQ(f.item.id, 11);
  ASSERT_EQ(f.session_claimed, 0);
  dx_pv_fclear(&f);
  dx_pv_take(p, T0 + 2, "B", 10, 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_fifo_across_sessions_and_plain) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_act_item("P", 1, 2));
  dx_pv_enqueue_work(p, T0 + 2, dx_pv_sess_item("I", 3, "s2"));
  dx_pv_enqueue_work(p, T0 + 3, dx_pv_sess_item("I", 4, "s1"));
  dx_pv_enqueue_work(p, T0 + 3, dx_pv_act_item("P", 1, 5));
  dx_pv_take(p, T0 + 10, "A", 10, 1);
  dx_pv_take(p, T0 + 10, "A", 10, 2);
  dx_pv_take(p, T0 + 10, "A", 10, 3);
  dx_pv_take(p, T0 + 10, "A", 10, 4);
  dx_pv_take(p, T0 + 10, "A", 10, 5);
  dx_pv_take(p, T0 + 10, "A", 10, 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_claim_creates_session_row) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_srows_t r;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take(p, T0 + 5, "A", 10, 1);
  r = dx_pv_sessions_of(p);
  ASSERT_EQ(r.n, 1);
  ASSERT_STR_EQ(r.v[0].sid, "s1");
  ASSERT_STR_EQ(r.v[0].owner, "A");
  ASSERT_EQ(r.v[0].locked, T0 + 5 + SLOCK);
  ASSERT_EQ(r.v[0].last, T0 + 5);
  ASSERT_EQ(r.v[0].queued, 1); /* the locked row still counts */
  dx_pv_done(p);
}

DX_TEST(pv_session_lease_expiry_allows_reclaim) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take_ack(p, T0, "A", 1);
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_take(p, T0 + SLOCK - 1, "B", 10, 0);
  f = dx_pv_sfetch(p, T0 + SLOCK, "B", 10); /* locked_until <= now: lapsed */
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner, "A");
  dx_pv_fclear(&f);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "B");
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 2 * SLOCK);
  dx_pv_done(p);
}

DX_TEST(pv_session_idle_expiry_allows_reclaim) {
  dx_provider_t *p = dx_pv_fresh();
  const int64_t idle = 25000;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take_ack(p, T0 + 1, "A", 1); /* last activity T0+1 */
  ASSERT_EQ(renew_sessions(p, T0 + 5000, "A", idle), 1);  /* lease to T0+15000 */
  ASSERT_EQ(renew_sessions(p, T0 + 14000, "A", idle), 1); /* lease to T0+24000 */
  ASSERT_EQ(renew_sessions(p, T0 + 23000, "A", idle), 1); /* lease to T0+33000 */
  ASSERT_EQ(renew_sessions(p, T0 + 30000, "A", idle), 0); /* idle since T0+1: not renewed */
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 33000);
  dx_pv_enqueue_work(p, T0 + 30000, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_take(p, T0 + 32999, "B", 10, 0);
  ASSERT_EQ(dx_pv_take(p, T0 + 33000, "B", 10, 2), 1);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "B");
  dx_pv_done(p);
}

static int count_cb(void *ud, const dx_session_info_t *s) {
  ASSERT_STR_EQ(s->worker_id, "A");
  (*(int *)ud)++;
  return 0;
}

DX_TEST(pv_session_renew_extends_all_owned) {
  dx_provider_t *p = dx_pv_fresh();
  uint64_t n = 0;
  int calls = 0;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_take(p, T0, "A", 10, 1);
  dx_pv_take(p, T0 + 1, "A", 10, 2);
  CHECK(M(p)->renew_session_lock(p, T0 + 100, "A", SLOCK, 0, count_cb, &calls, &n, &E));
  ASSERT_EQ(n, 2);
  ASSERT_EQ(calls, 2);
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 100 + SLOCK);
  ASSERT_EQ(dx_pv_srow(p, "s2").locked, T0 + 100 + SLOCK);
  ASSERT_EQ(dx_pv_srow(p, "s1").last, T0); /* renewal is not activity */
  dx_pv_done(p);
}

DX_TEST(pv_session_renew_skips_idle_sessions) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_take(p, T0, "A", 10, 1);        /* s1: last activity T0 */
  dx_pv_take(p, T0 + 5000, "A", 10, 2); /* s2: last activity T0+5000 */
  ASSERT_EQ(renew_sessions(p, T0 + 9000, "A", 6000), 1);
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + SLOCK); /* idle: left to lapse */
  ASSERT_EQ(dx_pv_srow(p, "s2").locked, T0 + 9000 + SLOCK);
  dx_pv_done(p);
}

DX_TEST(pv_session_renew_skips_other_workers) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_take(p, T0, "A", 10, 1);
  dx_pv_take(p, T0, "B", 10, 2);
  ASSERT_EQ(renew_sessions(p, T0 + 100, "A", 0), 1);
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 100 + SLOCK);
  ASSERT_EQ(dx_pv_srow(p, "s2").locked, T0 + SLOCK);
  ASSERT_EQ(renew_sessions(p, T0 + 100, "C", 0), 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_renew_skips_expired_leases) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take(p, T0, "A", 10, 1);
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK, "A", 0), 0); /* lapsed exactly now */
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK + 1, "A", 0), 0);
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + SLOCK);
  dx_pv_done(p);
}

DX_TEST(pv_session_renew_work_lock_updates_last_activity) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  f = dx_pv_sfetch(p, T0, "A", 10);
  CHECK(M(p)->renew_work_item_lock(p, T0 + 500, f.lock_token, LOCK, &E));
  ASSERT_EQ(dx_pv_srow(p, "s1").last, T0 + 500);
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + SLOCK); /* the lease is the renewal task's job */
  dx_pv_fclear(&f);
  dx_pv_done(p);
}

DX_TEST(pv_session_ack_updates_last_activity) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t reply = dx_pv_act_done("I", 1, 1);
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  f = dx_pv_sfetch(p, T0, "A", 10);
  CHECK(M(p)->ack_work_item(p, T0 + 700, f.lock_token, &reply, &E));
  ASSERT_EQ(dx_pv_srow(p, "s1").last, T0 + 700);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1);
  dx_pv_fclear(&f);
  dx_pv_done(p);
}

DX_TEST(pv_session_fetch_updates_last_activity) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_take(p, T0, "A", 10, 1);
  ASSERT_EQ(dx_pv_srow(p, "s1").last, T0);
  ASSERT_EQ(dx_pv_take(p, T0 + 900, "A", 10, 2), 0);
  ASSERT_EQ(dx_pv_srow(p, "s1").last, T0 + 900);
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 900 + SLOCK); /* the owner's fetch refreshes it */
  dx_pv_done(p);
}

/* A worker restarted with the same id owns its sessions again: its first fetch refreshes the
** dead process's lease at once, so no other worker claims the session under the activity it
** starts (issue 9 item 3a: before, the old lease lapsed mid-activity and B claimed it). */
DX_TEST(pv_session_same_id_restart_refreshes_lease) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("J", 3, "s1"));
  dx_pv_take_ack(p, T0, "A", 1); /* A claims s1, then dies; a new A comes back with the same id */
  ASSERT_EQ(dx_pv_take(p, T0 + SLOCK - 100, "A", 10, 2), 0); /* the restarted A: no new claim */
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 2 * SLOCK - 100);
  ASSERT_EQ(dx_pv_take(p, T0 + SLOCK + 1, "B", 10, 0), 0); /* the old lease would have lapsed */
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "A");
  dx_pv_done(p);
}

DX_TEST(pv_session_max_sessions_capacity_respected) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_create_instance(p, T0, "I"); /* running: its session keeps its slot */
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_take_ack(p, T0, "A", 1); /* A owns s1 (no activity running: it still counts) */
  dx_pv_take(p, T0 + 1, "A", 1, 0);
  ASSERT_EQ(dx_pv_take(p, T0 + 1, "B", 1, 2), 1);
  /* once s1's lease lapses, A has room again */
  dx_pv_enqueue_work(p, T0 + 2, dx_pv_sess_item("I", 3, "s3"));
  dx_pv_take(p, T0 + SLOCK - 1, "A", 1, 0);
  ASSERT_EQ(dx_pv_take(p, T0 + SLOCK, "A", 1, 3), 1);
  dx_pv_done(p);
}

DX_TEST(pv_session_max_sessions_allows_owned_and_plain_items) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take(p, T0, "A", 1, 1);
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 2, "s2")); /* oldest, but A is at capacity */
  dx_pv_enqueue_work(p, T0 + 2, dx_pv_sess_item("I", 3, "s1"));
  dx_pv_enqueue_work(p, T0 + 3, dx_pv_act_item("P", 1, 4));
  ASSERT_EQ(dx_pv_take(p, T0 + 5, "A", 1, 3), 0);
  dx_pv_take(p, T0 + 5, "A", 1, 4);
  dx_pv_take(p, T0 + 5, "A", 1, 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_zero_max_sessions_takes_no_session_work) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_act_item("P", 1, 2));
  dx_pv_take(p, T0 + 2, "A", 0, 2);
  dx_pv_take(p, T0 + 2, "A", 0, 0);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, ""); /* never claimed */
  dx_pv_take(p, T0 + 2, "B", 1, 1);
  dx_pv_done(p);
}

DX_TEST(pv_session_id_stored_on_worker_row) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t work[2] = {dx_pv_sess_item("A", 2, "s1"), dx_pv_sess_item("A", 3, "s1")};
  dx_activity_ref_t cancel = {"A", 1, 3};
  dx_event_t ev[3];
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 3, it);
  ev[1].kind = ev[2].kind = DX_EV_ACT_SCHEDULED;
  ev[1].session_id = ev[2].session_id = "s1";
  a.delta_len = 3;
  a.worker_items = work;
  a.worker_items_len = 2;
  CHECK(M(p)->ack_orchestration_item(p, T0, &a, &E));
  dx_orch_item_free(it);
  f = dx_pv_wfetch(p, T0 + 1); /* no session config: session rows are not handed out */
  ASSERT_EQ(f.item.kind, 0);
  f = dx_pv_sfetch(p, T0 + 1, "W", 10);
  ASSERT_EQ(f.item.id, 2);
  ASSERT_STR_EQ(f.item.session_id, "s1");
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 2);
  /* the next turn cancels activity 3 (lock stealing): it leaves the session's rows too */
  dx_pv_enqueue(p, T0 + 2, dx_pv_raise_item("A"));
  it = dx_pv_fetch(p, T0 + 3);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  a.cancelled = &cancel;
  a.cancelled_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 4, &a, &E));
  dx_orch_item_free(it);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 5, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  dx_pv_take(p, T0 + 6, "W", 10, 0);
  ASSERT_EQ(dx_pv_next_due(p, T0 + 6), INT64_MAX); /* nothing queued anywhere */
  dx_pv_done(p);
}

DX_TEST(pv_session_cleanup_removes_expired_no_work) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take_ack(p, T0, "A", 1);
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK - 1), 0);
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK), 1);
  ASSERT_EQ(dx_pv_sessions_of(p).n, 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_cleanup_removes_idle_and_released_no_work) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_take_ack(p, T0, "A", 1);
  dx_pv_take_ack(p, T0, "A", 2);
  /* s1 idle: the renewal task stops renewing it, its lease lapses */
  ASSERT_EQ(renew_sessions(p, T0 + 5000, "A", 4000), 0);
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 5000, "A", "s2"), 1); /* s2 released (close, shutdown) */
  ASSERT_EQ(cleanup_sessions(p, T0 + 5000), 1);             /* s2 at once */
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK), 1);            /* s1 once lapsed */
  ASSERT_EQ(dx_pv_sessions_of(p).n, 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_cleanup_preserves_sessions_with_work) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 3, "s2"));
  dx_pv_take(p, T0, "A", 10, 1); /* s1: one locked row, one queued */
  dx_pv_take(p, T0, "A", 10, 3); /* s2: one locked row only */
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 1, "A", NULL), 2);
  ASSERT_EQ(cleanup_sessions(p, T0 + 2 * SLOCK), 0);
  ASSERT_EQ(dx_pv_sessions_of(p).n, 2);
  dx_pv_done(p);
}

DX_TEST(pv_session_cleanup_preserves_active_sessions) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take_ack(p, T0, "A", 1);
  ASSERT_EQ(cleanup_sessions(p, T0 + 1), 0); /* live lease, recent activity, no work */
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK - 1, "A", 0), 1);
  ASSERT_EQ(cleanup_sessions(p, T0 + SLOCK + 1), 0);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "A");
  dx_pv_done(p);
}

DX_TEST(pv_session_cleanup_returns_deleted_count) {
  dx_provider_t *p = dx_pv_fresh();
  char sid[8];
  int i;
  for (i = 0; i < 5; i++) {
    snprintf(sid, sizeof sid, "s%d", i);
    dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", (uint64_t)i + 1, sid));
    dx_pv_take_ack(p, T0 + i * 1000, "A", (uint64_t)i + 1); /* s_i lease ends T0+i*1000+SLOCK */
  }
  ASSERT_EQ(cleanup_sessions(p, T0 + 2000 + SLOCK), 3); /* s0, s1, s2 */
  ASSERT_EQ(dx_pv_sessions_of(p).n, 2);
  ASSERT_EQ(cleanup_sessions(p, T0 + 2000 + SLOCK), 0);
  ASSERT_EQ(cleanup_sessions(p, T0 + 9000 + SLOCK), 2);
  dx_pv_done(p);
}

DX_TEST(pv_session_reclaim_after_lock_expiry_updates_in_place) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_srows_t r;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_take_ack(p, T0, "A", 1);
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_take(p, T0 + SLOCK + 5, "B", 10, 2);
  r = dx_pv_sessions_of(p);
  ASSERT_EQ(r.n, 1);
  ASSERT_STR_EQ(r.v[0].owner, "B");
  ASSERT_EQ(r.v[0].locked, T0 + SLOCK + 5 + SLOCK);
  ASSERT_EQ(r.v[0].last, T0 + SLOCK + 5);
  ASSERT_EQ(renew_sessions(p, T0 + SLOCK + 6, "A", 0), 0); /* A no longer owns it */
  dx_pv_done(p);
}

DX_TEST(pv_session_multiple_sessions_per_worker) {
  dx_provider_t *p = dx_pv_fresh();
  dx_pv_srows_t r;
  int i;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 3, "s3"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 4, "s2"));
  ASSERT_EQ(dx_pv_take(p, T0, "A", 3, 1), 1);
  ASSERT_EQ(dx_pv_take(p, T0, "A", 3, 2), 1);
  ASSERT_EQ(dx_pv_take(p, T0, "A", 3, 3), 1);
  ASSERT_EQ(dx_pv_take(p, T0, "A", 3, 4), 0);
  r = dx_pv_sessions_of(p);
  ASSERT_EQ(r.n, 3);
  for (i = 0; i < 3; i++) ASSERT_STR_EQ(r.v[i].owner, "A");
  ASSERT_STR_EQ(r.v[0].sid, "s1"); /* ordered by session id */
  ASSERT_STR_EQ(r.v[2].sid, "s3");
  dx_pv_done(p);
}

DX_TEST(pv_session_release_makes_claimable_at_once) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_take_ack(p, T0, "A", 1);
  dx_pv_take_ack(p, T0, "A", 2);
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 3, "s1"));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 4, "s2"));
  dx_pv_take(p, T0 + 2, "B", 10, 0);
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 2, "B", "s1"), 0); /* only the owner releases */
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 2, "A", "s1"), 1);
  ASSERT_EQ(dx_pv_srow(p, "s1").owner[0], 0);
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 2);
  f = dx_pv_sfetch(p, T0 + 2, "B", 10); /* no waiting for the lease */
  ASSERT_EQ(f.item.id, 3);
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner, "A");
  dx_pv_fclear(&f);
  dx_pv_take(p, T0 + 2, "B", 10, 0); /* s2 is still A's */
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 3, "A", NULL), 1); /* all of A's: s2 */
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 3, "A", NULL), 0);
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "B", 10, 4), 1);
  dx_pv_done(p);
}

/* A claim reports how long its row had been due (the runtime warns when session work waited
** long for a worker to claim its session). */
DX_TEST(pv_session_claim_reports_wait) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  f = dx_pv_sfetch(p, T0 + 700, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_EQ(f.waited_ms, 700);
  dx_pv_fclear(&f);
  f = dx_pv_sfetch(p, T0 + 900, "A", 10); /* its own session: not a claim */
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(f.session_claimed, 0);
  dx_pv_fclear(&f);
  dx_pv_done(p);
}

/* list_sessions counts a session's rows (queued) and those of them locked now (running),
** also for a session that has queued work but no session row yet. */
DX_TEST(pv_session_list_counts_running_rows) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 3, "s2"));
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 2);
  ASSERT_EQ(dx_pv_srow(p, "s1").running, 0);
  dx_pv_take(p, T0, "A", 1, 1);           /* capacity 1: A owns s1 only */
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 2);
  ASSERT_EQ(dx_pv_srow(p, "s1").running, 1);
  f = dx_pv_sfetch(p, T0, "A", 1);
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(dx_pv_srow(p, "s1").running, 2);
  CHECK(M(p)->ack_work_item(p, T0, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 1);
  ASSERT_EQ(dx_pv_srow(p, "s1").running, 1);
  ASSERT_EQ(dx_pv_srow(p, "s2").queued, 1); /* never claimed: no session row */
  ASSERT_EQ(dx_pv_srow(p, "s2").running, 0);
  dx_pv_done(p);
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
  dx_provider_t *p = dx_pv_fresh();
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
  dx_pv_done(p);
}

/* Bounded: the latest DX_SESSION_EVENTS_KEEP per session, and cleanup drops old ones. */
DX_TEST(pv_session_events_bounded_and_pruned) {
  dx_provider_t *p = dx_pv_fresh();
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
  dx_pv_done(p);
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
  dx_pv_fclear(&f);
  return claimed;
}

/* Rolling upgrades (dx_session_cfg_t.declined): a worker that declines a session neither
** claims it nor fetches rows of it that it owns; other sessions and plain rows are unaffected,
** and a worker that does not decline it claims it. */
DX_TEST(pv_session_declined_sessions_are_skipped) {
  dx_provider_t *p = dx_pv_fresh();
  static const char *const s1[] = {"s1", NULL};
  static const char *const odd[] = {"x\"y", "s1", "a,b", NULL}; /* quoting in SQL arrays */
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  ASSERT_EQ(take_declining(p, T0, "A", NULL, 1), 1);   /* A owns s1 */
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 3, "s2"));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_act_item("I", 1, 4));
  /* A declines s1: its own row 2 is skipped; s2 and the plain row come out */
  ASSERT_EQ(take_declining(p, T0 + 2, "A", s1, 3), 1);
  take_declining(p, T0 + 2, "A", odd, 4);
  take_declining(p, T0 + 2, "A", odd, 0);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "A");
  /* released: A still does not claim it, B does */
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 3, "A", "s1"), 1);
  take_declining(p, T0 + 3, "A", s1, 0);
  ASSERT_EQ(take_declining(p, T0 + 3, "B", s1 + 1, 2), 1);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "B");
  dx_pv_done(p);
}
