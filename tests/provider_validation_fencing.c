/*
** provider_validation_fencing.c -- provider contract tests of worker liveness (provider v5:
** registration, refusal, dead owners) and of fencing and ended sessions (issue 9 items 3 and
** 4). Linked with provider_validation.c into every provider's test program; uses only the
** vtable and the hooks of provider_validation.h; the holder processes run on the wall clock.
*/
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <signal.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E; /* the last call's error detail, printed by CHECK */

/* {===== worker liveness (provider v5): registration, refusal, dead owners =====} */

/* Providers without registration (LMDB, for now) skip these tests, saying so. */
/* {===== fencing and ended sessions (issue 9 items 3 and 4) =====} */

/* End `inst`'s current execution with `status` (COMPLETED, FAILED or CONTINUED_AS_NEW). */
static void end_instance(dx_provider_t *p, int64_t now, const char *inst, int status) {
  dx_failure_t fail = {DX_CAT_APPLICATION, "OrchestrationFailed", "boom", 0};
  dx_event_t ev[1];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_pv_enqueue(p, now, dx_pv_raise_item(inst));
  it = dx_pv_fetch(p, now);
  ASSERT(it);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
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
  dx_pv_enqueue(p, now, dx_pv_raise_item(inst));
  it = dx_pv_fetch(p, now);
  ASSERT(it);
  a = dx_pv_ack_of(it);
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
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t done1 = dx_pv_act_done("I", 1, 1);
  dx_work_fetch_t f, g, h;
  uint64_t before;
  dx_pv_create_instance(p, T0, "I");
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  f = dx_pv_sfetch(p, T0, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  g = dx_pv_sfetch(p, T0 + SLOCK, "B", 10); /* A's lease lapsed; its item lock (LOCK) has not */
  ASSERT_EQ(g.item.id, 2);
  ASSERT_EQ(g.session_claimed, 1);
  ASSERT_STR_EQ(g.previous_owner, "A");
  h = dx_pv_sfetch(p, T0 + SLOCK, "B", 10); /* the claim made A's row due: B runs it */
  ASSERT_EQ(h.item.id, 1);
  ASSERT_EQ(h.attempt_count, 2);
  before = dx_pv_depths(p).orchestrator;
  CHECK_ERR(M(p)->ack_work_item(p, T0 + SLOCK + 1, f.lock_token, &done1, &E), DX_ELOCK);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + SLOCK + 1, f.lock_token, LOCK, &E), DX_ELOCK);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, before);
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 1, h.lock_token, &done1, &E));
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 1, g.lock_token, NULL, &E));
  ASSERT_EQ(dx_pv_depths(p).orchestrator, before + 1);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  dx_pv_fclear(&f);
  dx_pv_fclear(&g);
  dx_pv_fclear(&h);
  dx_pv_done(p);
}

/* The ownership epoch itself is checked in the ack's transaction: a stalled owner whose clock
** says its item lock is still live (its ack carries an earlier time) is refused all the same,
** and its message names the new owner. */
DX_TEST(pv_session_fence_checks_the_epoch_not_only_the_lock) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t done1 = dx_pv_act_done("I", 1, 1);
  dx_work_fetch_t f, g;
  uint64_t before;
  dx_pv_create_instance(p, T0, "I");
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  f = dx_pv_sfetch(p, T0, "A", 10);
  g = dx_pv_sfetch(p, T0 + SLOCK, "B", 10);
  ASSERT_EQ(g.session_claimed, 1);
  before = dx_pv_depths(p).orchestrator;
  CHECK_ERR(M(p)->ack_work_item(p, T0 + SLOCK - 1, f.lock_token, &done1, &E), DX_ELOCK);
  ASSERT(strstr(E.msg, "moved to worker 'B'") != NULL);
  CHECK_ERR(M(p)->renew_work_item_lock(p, T0 + SLOCK - 1, f.lock_token, LOCK, &E), DX_ELOCK);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, before);
  /* the owner's own later fetch and ack of the session are fine (same epoch) */
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 1, g.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  dx_pv_fclear(&g);
  dx_pv_done(p);
}

/* A lease that lapsed without another claim fences nothing: the owner's ack still counts. */
DX_TEST(pv_session_lapsed_lease_without_a_claim_keeps_the_ack) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_create_instance(p, T0, "I");
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  f = dx_pv_sfetch(p, T0, "A", 10);
  CHECK(M(p)->ack_work_item(p, T0 + SLOCK + 5, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  dx_pv_done(p);
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
  dx_provider_t *p = dx_pv_fresh();
  char ended[128];
  dx_pv_create_instance(p, T0, "X");
  dx_pv_create_instance(p, T0, "Y");
  dx_pv_create_instance(p, T0, "Z");
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("X", 1, "s1"));
  dx_pv_take_ack(p, T0, "A", 1);
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("Y", 2, "s2"));
  dx_pv_take(p, T0 + 1, "A", 1, 0); /* capacity 1: s1 still serves X */
  renew_ended(p, T0 + 1, "A", ended);
  ASSERT_STR_EQ(ended, "");
  end_instance(p, T0 + 2, "X", DX_STATUS_FAILED);
  renew_ended(p, T0 + 2, "A", ended);
  ASSERT_STR_EQ(ended, "s1 ");
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "A", 1, 2), 1); /* the capacity-1 worker serves s2 */
  /* s2 is used by Y (running) and by Z once Z's row is queued */
  dx_pv_enqueue_work(p, T0 + 4, dx_pv_sess_item("Z", 3, "s2"));
  renew_ended(p, T0 + 4, "A", ended);
  ASSERT_STR_EQ(ended, "s1 ");
  dx_pv_done(p);
}

DX_TEST(pv_session_ended_after_completion_and_continue_as_new) {
  dx_provider_t *p = dx_pv_fresh();
  char ended[128];
  dx_pv_create_instance(p, T0, "X");
  dx_pv_create_instance(p, T0, "Y");
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("X", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("Y", 2, "s1"));
  dx_pv_take_ack(p, T0, "A", 1);
  dx_pv_take_ack(p, T0, "A", 2);
  end_instance(p, T0 + 1, "X", DX_STATUS_COMPLETED);
  renew_ended(p, T0 + 1, "A", ended);
  ASSERT_STR_EQ(ended, ""); /* Y still runs */
  end_instance(p, T0 + 2, "Y", DX_STATUS_CONTINUED_AS_NEW);
  renew_ended(p, T0 + 2, "A", ended);
  ASSERT_STR_EQ(ended, ""); /* Y's next execution has not run yet: it may use s1 again */
  new_execution_turn(p, T0 + 3, "Y", 2); /* it runs without scheduling on s1 */
  renew_ended(p, T0 + 3, "A", ended);
  ASSERT_STR_EQ(ended, "s1 ");
  dx_pv_done(p);
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
      dx_work_fetch_t f = dx_pv_sfetch(p, T0, worker, 10);
      if (f.item.id != 1 || !f.session_claimed) ok = 'F';
      dx_pv_fclear(&f);
    } else if (ok == 'R' && claim == 2) {
      dx_work_fetch_t f;
      dx_orch_item_t *it = NULL;
      if (M(p)->fetch_work_item(p, T0, LOCK_LONG, NULL, &f, &e) || f.item.id != 7 ||
          M(p)->fetch_orchestration_item(p, T0, LOCK_LONG, &it, &e) || !it)
        ok = 'F';
      dx_pv_fclear(&f);
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
  int64_t until = dx_pv_wall_ms() + 10000;
  int rc;
  while ((rc = M(p)->worker_register(p, worker, T0 + 1, &E)) == DX_EEXIST &&
         dx_pv_wall_ms() < until)
    usleep(20000);
  return rc;
}

DX_TEST(pv_worker_register_refuses_a_live_duplicate) {
  char *store = dx_pv_new_store();
  dx_provider_t *p;
  pid_t pid;
  if (!dx_pv_multi_process()) { free(store); return; }
  p = dx_pv_open(store);
  if (!has_liveness(p)) { dx_pv_done(p); free(store); return; }
  pid = dx_pv_spawn_holder(store, "W", 0);
  memset(&E, 0, sizeof E);
  ASSERT_EQ(M(p)->worker_register(p, "W", T0, &E), DX_EEXIST);
  ASSERT(strstr(E.msg, "'W'") != NULL); /* the message names the id */
  CHECK(M(p)->worker_register(p, "V", T0, &E)); /* another id is free */
  dx_pv_kill_holder(pid);
  ASSERT_EQ(register_when_free(p, "W"), 0); /* the dead holder's id is free again */
  M(p)->worker_unregister(p, "W");
  M(p)->worker_unregister(p, "V");
  dx_pv_done(p);
  free(store);
}

DX_TEST(pv_worker_dead_owner_sessions_move_at_once) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t f;
  int64_t until;
  int k;
  pid_t pid;
  if (!dx_pv_multi_process()) { dx_pv_done(p); free(store); return; }
  if (!has_liveness(p)) { dx_pv_done(p); free(store); return; }
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  pid = dx_pv_spawn_holder(store, "A", 1);
  CHECK(M(p)->worker_register(p, "B", T0, &E));
  ASSERT_EQ(dx_pv_take(p, T0 + 1, "B", 10, 0), 0); /* A lives: its session is pinned */
  dx_pv_kill_holder(pid);
  /* long before A's lease or item lock lapse, B claims s1 and reruns A's locked item. Up to
  ** 10 s of real time for the store to see A gone (a database server just started grants
  ** a grace period); the caller's clock stays far inside A's lease. */
  until = dx_pv_wall_ms() + 10000;
  for (k = 0;; k++) {
    f = dx_pv_sfetch(p, T0 + 300 * (1 + k % 20), "B", 10);
    if (f.item.kind || dx_pv_wall_ms() >= until) break;
    usleep(50000);
  }
  ASSERT(f.item.id == 1 || f.item.id == 2); /* A's rerun item is due from the takeover on */
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner ? f.previous_owner : "", "A");
  k = (int)f.item.id;
  dx_pv_fclear(&f);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "B");
  f = dx_pv_sfetch(p, T0 + 6500, "B", 10); /* the other one too, inside A's item lock */
  ASSERT_EQ(f.item.id, (uint64_t)(3 - k));
  ASSERT_EQ(f.session_claimed, 0);
  dx_pv_fclear(&f);
  M(p)->worker_unregister(p, "B");
  dx_pv_done(p);
  free(store);
}

/* A dead owner's session whose only row it had locked (so no head is due and nothing claims
** it) is swept: the row is due at once and a peer claims the session; a live owner's locked
** row beside it stays put. */
DX_TEST(pv_worker_dead_owners_locked_session_is_swept) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_fetch_t f, before, after;
  dx_pv_srow_t s2;
  int64_t until;
  int k;
  pid_t a, c;
  if (!dx_pv_multi_process()) { dx_pv_done(p); free(store); return; }
  if (!has_liveness(p)) { dx_pv_done(p); free(store); return; }
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  a = dx_pv_spawn_holder(store, "A", 1); /* A claims s1 and locks its only row */
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("J", 1, "s2"));
  c = dx_pv_spawn_holder(store, "C", 1); /* C claims s2 and locks its only row */
  CHECK(M(p)->worker_register(p, "B", T0, &E));
  before = dx_pv_sfetch(p, T0 + 1, "B", 10); /* both live: nothing for B */
  dx_pv_kill_holder(a);
  until = dx_pv_wall_ms() + 10000;
  for (k = 0;; k++) {
    f = dx_pv_sfetch(p, T0 + 300 * (1 + k % 20), "B", 10);
    if (f.item.kind || dx_pv_wall_ms() >= until) break;
    usleep(50000);
  }
  after = dx_pv_sfetch(p, T0 + 6500, "B", 10); /* C lives: s2's row stays locked */
  s2 = dx_pv_srow(p, "s2");
  dx_pv_kill_holder(c); /* before any assertion: a failure leaves no process behind */
  ASSERT_EQ(before.item.kind, 0);
  ASSERT_STR_EQ(f.item.instance ? f.item.instance : "", "I");
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner ? f.previous_owner : "", "A");
  ASSERT_EQ(f.attempt_count, 2);
  ASSERT_EQ(after.item.kind, 0);
  ASSERT_STR_EQ(s2.owner, "C");
  dx_pv_fclear(&before);
  dx_pv_fclear(&f);
  dx_pv_fclear(&after);
  M(p)->worker_unregister(p, "B");
  dx_pv_done(p);
  free(store);
}

/* What a killed worker had locked outside sessions moves at once too: its plain activity row
** and its dx_pv_turn (instance lock) are fetched by a peer long before their locks would lapse, as
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
  if (!dx_pv_multi_process()) { dx_pv_done(p); free(store); return; }
  if (!has_liveness(p)) { dx_pv_done(p); free(store); return; }
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("I", 1, 7));
  dx_pv_enqueue(p, T0, dx_pv_start_item("O"));
  pid = dx_pv_spawn_holder(store, "A", 2);
  CHECK(M(p)->worker_register(p, "B", T0, &E));
  f = dx_pv_wfetch(p, now);
  ASSERT_EQ(f.item.kind, 0); /* A lives: its locks hold */
  ASSERT(dx_pv_fetch(p, now) == NULL);
  dx_pv_kill_holder(pid);
  /* up to 10 s of real time for the store to see A gone (a database server just started
  ** grants a grace period); the caller's clock stays far inside A's locks */
  until = dx_pv_wall_ms() + 10000;
  for (k = 0; (!f.item.kind || !it) && dx_pv_wall_ms() < until; k++) {
    now = T0 + 300 * (1 + k % 20);
    if (!f.item.kind) f = dx_pv_wfetch(p, now);
    if (!it) it = dx_pv_fetch(p, now);
    if (!f.item.kind || !it) usleep(50000);
  }
  ASSERT(now < T0 + LOCK_LONG);
  ASSERT_EQ(f.item.id, 7);
  ASSERT_EQ(f.attempt_count, 2);
  ASSERT(it != NULL);
  ASSERT_STR_EQ(it->instance, "O");
  ASSERT_EQ(it->attempt_count, 2);
  dx_orch_item_free(it);
  dx_pv_fclear(&f);
  M(p)->worker_unregister(p, "B");
  dx_pv_done(p);
  free(store);
}

DX_TEST(pv_session_same_worker_id_restart_owns_at_once) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store), *q;
  dx_work_fetch_t f;
  int k, seen = 0;
  pid_t pid;
  if (!dx_pv_multi_process()) { dx_pv_done(p); free(store); return; }
  if (!has_liveness(p)) { dx_pv_done(p); free(store); return; }
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 3, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 4, "s1"));
  dx_pv_enqueue_work(p, T0 + 2, dx_pv_sess_item("I", 5, "s1"));
  dx_pv_done(p);
  pid = dx_pv_spawn_holder(store, "A", 1); /* A claims s1, locks item 1, then is killed */
  dx_pv_kill_holder(pid);
  q = dx_pv_open(store);
  ASSERT_EQ(register_when_free(q, "A"), 0); /* A restarts with the same id */
  CHECK(M(q)->worker_register(q, "B", T0 + 1, &E));
  dx_pv_take(q, T0 + 1, "B", 10, 0); /* A is live again: s1 stays A's */
  /* the restarted A owns s1 at once and gets the item its predecessor had locked */
  for (k = 0; k < 4; k++) {
    f = dx_pv_sfetch(q, T0 + 1, "A", 10);
    ASSERT(f.item.id >= 1 && f.item.id <= 4);
    ASSERT_EQ(f.session_claimed, 0);
    seen |= 1 << f.item.id;
    dx_pv_fclear(&f);
  }
  ASSERT_EQ(seen, 30); /* items 2..4 and 1 (the predecessor's, due again) */
  /* its lease runs from its own fetch, not from the dead process's claim */
  ASSERT_EQ(dx_pv_srow(q, "s1").locked, T0 + 1 + SLOCK);
  f = dx_pv_sfetch(q, T0 + SLOCK + 5, "A", 10);
  ASSERT_EQ(f.item.id, 5);
  ASSERT_EQ(f.session_claimed, 0);
  dx_pv_fclear(&f);
  ASSERT_EQ(dx_pv_srow(q, "s1").locked, T0 + SLOCK + 5 + SLOCK);
  M(q)->worker_unregister(q, "A");
  M(q)->worker_unregister(q, "B");
  dx_pv_done(q);
  free(store);
}

DX_TEST(pv_session_close_item_on_unowned_session_is_deleted) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t c1 = dx_pv_sess_item("I", 1, "s1"), c2 = dx_pv_sess_item("I", 3, "s2"), c3;
  dx_work_fetch_t f;
  c1.kind = c2.kind = DX_WI_SESSION_CLOSE;
  c1.name = c2.name = NULL;
  c3 = c2;
  c3.id = 6;
  /* no session row */
  dx_pv_enqueue_work(p, T0, c1);
  dx_pv_take(p, T0, "A", 10, 0);
  ASSERT_EQ(dx_pv_depths(p).worker, 0);
  ASSERT_EQ(dx_pv_sessions_of(p).n, 0);
  /* released session: the close item goes, and the row with it */
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  dx_pv_take_ack(p, T0, "A", 2);
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 1, "A", NULL), 1);
  dx_pv_enqueue_work(p, T0 + 1, c2);
  dx_pv_enqueue_work(p, T0 + 2, dx_pv_sess_item("I", 4, "s3"));
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "B", 10, 4), 1); /* the close item is skipped, not claimed */
  ASSERT_EQ(dx_pv_sessions_of(p).n, 1);
  ASSERT_STR_EQ(dx_pv_sessions_of(p).v[0].sid, "s3");
  /* the owner gets its close item like any other */
  dx_pv_enqueue_work(p, T0 + 4, c3);
  dx_pv_take(p, T0 + 5, "A", 10, 0);
  f = dx_pv_sfetch(p, T0 + 5, "B", 10);
  ASSERT_EQ(f.item.kind, 0);
  dx_pv_enqueue_work(p, T0 + 6, dx_pv_sess_item("I", 7, "s4"));
  dx_pv_enqueue_work(p, T0 + 6, (c3.session_id = "s4", c3.id = 8, c3));
  ASSERT_EQ(dx_pv_take(p, T0 + 7, "A", 10, 7), 1);
  f = dx_pv_sfetch(p, T0 + 8, "A", 10);
  ASSERT_EQ(f.item.id, 8);
  ASSERT_EQ(f.item.kind, DX_WI_SESSION_CLOSE);
  ASSERT_EQ(f.session_claimed, 0);
  dx_pv_fclear(&f);
  dx_pv_done(p);
}

/* The same inside one batch (LMDB reads a session row queued in the batch in place, and the
** close of an unowned session deletes it through that borrowed row): the close item goes, the
** other session's activity is fetched, nothing is left queued. */
DX_TEST(pv_session_close_item_queued_in_a_batch_on_unowned_session_is_deleted_in_it) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t c1 = dx_pv_sess_item("O", 1, "s1");
  dx_work_fetch_t f;
  c1.kind = DX_WI_SESSION_CLOSE;
  c1.name = NULL;
  CHECK(M(p)->begin(p, &E));
  dx_pv_enqueue_work(p, T0, c1);
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("O", 2, "s2"));
  f = dx_pv_sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_depths(p).worker, 0);
  ASSERT_STR_EQ(dx_pv_srow(p, "s2").owner, "A");
  ASSERT_EQ(dx_pv_sessions_of(p).n, 1); /* no row for s1 */
  dx_pv_done(p);
}

DX_TEST(pv_session_expired_item_lock_refetched_by_other_worker) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f, g;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  f = dx_pv_sfetch(p, T0, "A", 10); /* A "crashes": no ack, no renewals */
  dx_pv_take(p, T0 + SLOCK, "B", 10, 0);    /* the lease lapsed, the item lock has not */
  dx_pv_take(p, T0 + LOCK - 1, "B", 10, 0);
  g = dx_pv_sfetch(p, T0 + LOCK, "B", 10);
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  ASSERT_EQ(g.session_claimed, 1);
  ASSERT_STR_EQ(g.previous_owner, "A");
  CHECK_ERR(M(p)->ack_work_item(p, T0 + LOCK + 1, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + LOCK + 1, g.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  dx_pv_fclear(&g);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  dx_pv_done(p);
}

/* Capacity holds for claims made inside one batch: a worker's session count is asked once
** per batch and must follow the claims made since. */
DX_TEST(pv_session_capacity_holds_for_claims_in_one_batch) {
  dx_provider_t *p = dx_pv_fresh();
  char sid[8];
  int i, got = 0;
  for (i = 0; i < 6; i++) {
    snprintf(sid, sizeof sid, "s%d", i);
    dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", (uint64_t)i + 1, sid));
  }
  ASSERT_EQ(dx_pv_take(p, T0 + 1, "A", 3, 1), 1); /* outside a batch: A owns s0 */
  CHECK(M(p)->begin(p, &E));
  for (i = 0; i < 6; i++) {
    dx_work_fetch_t f = dx_pv_sfetch(p, T0 + 2, "A", 3);
    if (f.item.kind) got++;
    dx_pv_fclear(&f);
  }
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(got, 2); /* s1 and s2: three sessions in all */
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "A", 3, 0), 0);
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "B", 10, 4), 1); /* the rest is left to others */
  dx_pv_done(p);
}

/* A lease that lapses between two fetches of one batch frees its slot for the later fetch,
** and one that has not lapsed still counts (LMDB keeps the batch's session count while no
** counted lease has ended: each fetch brings its own now). */
DX_TEST(pv_session_capacity_in_one_batch_follows_lapsed_leases) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s0"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 3, "s2"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 4, "s3"));
  f = dx_pv_sfetch(p, T0, "A", 2); /* A owns s0 until T0 + SLOCK; its item stays locked */
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->begin(p, &E));
  ASSERT_EQ(dx_pv_take(p, T0 + 1, "A", 2, 2), 1);     /* s1: lease until T0 + 1 + SLOCK */
  ASSERT_EQ(dx_pv_take(p, T0 + SLOCK, "A", 2, 3), 1); /* s0's lease lapsed: room for s2 */
  ASSERT_EQ(dx_pv_take(p, T0 + SLOCK, "A", 2, 0), 0); /* s1 and s2 live: at capacity */
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_take(p, T0 + SLOCK, "B", 2, 4), 1); /* s3 was left to others */
  dx_pv_fclear(&f);
  dx_pv_done(p);
}

/* An owner's fetches and acks inside one batch renew its session's lease and note its activity
** each time, as they do in batches of their own (LMDB changes the batch's kept copy of the
** session record in place from the second one on). */
DX_TEST(pv_session_owner_steps_in_one_batch_renew_and_note_activity) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("J", 3, "s1")); /* another user of the session */
  dx_pv_take_ack(p, T0, "A", 1); /* A claims s1 */
  CHECK(M(p)->begin(p, &E));
  f = dx_pv_sfetch(p, T0 + 20, "A", 10);
  ASSERT_EQ(f.item.id, 2);
  CHECK(M(p)->ack_work_item(p, T0 + 30, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  f = dx_pv_sfetch(p, T0 + 40, "A", 10);
  ASSERT_EQ(f.item.id, 3);
  ASSERT_EQ(f.session_claimed, 0);
  CHECK(M(p)->ack_work_item(p, T0 + 50, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "A");
  ASSERT_EQ(dx_pv_srow(p, "s1").locked, T0 + 40 + SLOCK);
  ASSERT_EQ(dx_pv_srow(p, "s1").last, T0 + 50);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  ASSERT_EQ(dx_pv_take(p, T0 + 60, "B", 10, 0), 0); /* still A's */
  dx_pv_done(p);
}

/* At capacity a batch's fetches keep seeing its own queue changes: rows queued for, and
** acked from, owned sessions inside the batch (LMDB keeps a copy of the owned sessions' queue
** heads for the batch; it must follow the batch's writes). */
DX_TEST(pv_session_rows_queued_in_a_batch_at_capacity_are_fetched_in_it) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s0"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s1"));
  dx_pv_take_ack(p, T0 + 1, "A", 1);
  dx_pv_take_ack(p, T0 + 1, "A", 2); /* A owns s0 and s1: its capacity of 2 */
  /* s0 and s1 get rows not due yet: not idle either */
  dx_pv_enqueue_work(p, T0 + 100000, dx_pv_sess_item("I", 3, "s0"));
  dx_pv_enqueue_work(p, T0 + 100000, dx_pv_sess_item("I", 4, "s1"));
  /* waits for a worker with room */
  dx_pv_enqueue_work(p, T0 + 2, dx_pv_sess_item("I", 5, "s2"));
  CHECK(M(p)->begin(p, &E));
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "A", 2, 0), 0);
  dx_pv_enqueue_work(p, T0 + 3, dx_pv_sess_item("I", 6, "s1"));
  f = dx_pv_sfetch(p, T0 + 4, "A", 2);
  ASSERT_EQ(f.item.id, 6);
  ASSERT_EQ(f.session_claimed, 0);
  CHECK(M(p)->ack_work_item(p, T0 + 4, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  dx_pv_enqueue_work(p, T0 + 4, dx_pv_sess_item("I", 7, "s0"));
  ASSERT_EQ(dx_pv_take(p, T0 + 5, "A", 2, 7), 0);
  ASSERT_EQ(dx_pv_take(p, T0 + 5, "A", 2, 0), 0);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_take(p, T0 + 6, "B", 2, 5), 1); /* s2 was left to others */
  dx_pv_done(p);
}

/* A batch renews a session row's lock and then fetches: the renewed lock holds for the
** batch's own fetches (LMDB keeps the session's moved queue head in memory until the commit;
** the fetch must go by it, not by the head stored before the batch). */
DX_TEST(pv_session_lock_renewed_in_a_batch_holds_for_its_fetches) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f, g;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  f = dx_pv_sfetch(p, T0, "A", 10); /* locked until T0 + LOCK */
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->begin(p, &E));
  CHECK(M(p)->renew_work_item_lock(p, T0 + LOCK - 1, f.lock_token, LOCK, &E));
  ASSERT_EQ(dx_pv_take(p, T0 + LOCK + 1, "A", 10, 0), 0); /* locked until T0 + 2 LOCK - 1 */
  ASSERT_EQ(dx_pv_take(p, T0 + LOCK + 1, "B", 10, 0), 0);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_take(p, T0 + LOCK + 1, "A", 10, 0), 0);
  g = dx_pv_sfetch(p, T0 + 2 * LOCK, "A", 10); /* the renewed lock lapsed: delivered again */
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 2 * LOCK, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + 2 * LOCK, g.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  dx_pv_fclear(&g);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  dx_pv_done(p);
}

/* Session rows a turn queues inside a batch and rows stored before it are fetched in due
** order by the batch (LMDB merges the queue heads the batch changed into its walk of the
** stored ones); a session whose only row the batch acked offers nothing more. */
DX_TEST(pv_session_rows_queued_in_a_batch_are_fetched_in_due_order) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w = dx_pv_sess_item("O", 1, "early");
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_work_fetch_t f;
  dx_pv_enqueue(p, T0, dx_pv_start_item("O"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 7, "done"));
  dx_pv_enqueue_work(p, T0 + 50, dx_pv_sess_item("I", 8, "late"));
  it = dx_pv_fetch(p, T0 + 1);
  ASSERT(it);
  CHECK(M(p)->begin(p, &E));
  f = dx_pv_sfetch(p, T0 + 2, "A", 10);
  ASSERT_EQ(f.item.id, 7);
  CHECK(M(p)->ack_work_item(p, T0 + 3, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = &w;
  a.worker_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 10, &a, &E)); /* "early" is due at T0 + 10 */
  dx_orch_item_free(it);
  ASSERT_EQ(dx_pv_take(p, T0 + 60, "A", 10, 1), 1); /* before "late" (T0 + 50) */
  ASSERT_EQ(dx_pv_take(p, T0 + 60, "A", 10, 8), 1);
  ASSERT_EQ(dx_pv_take(p, T0 + 60, "A", 10, 0), 0);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_srow(p, "early").queued, 1);
  ASSERT_STR_EQ(dx_pv_srow(p, "early").owner, "A");
  ASSERT_EQ(dx_pv_srow(p, "late").queued, 1);
  ASSERT_EQ(dx_pv_take(p, T0 + 61, "B", 10, 0), 0);
  dx_pv_done(p);
}

/* What a rolled-back batch did to sessions (claims, locks, acks) is gone, and nothing of it
** reaches the store with the next batch's commit. */
DX_TEST(pv_session_changes_of_a_rolled_back_batch_are_gone) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_fetch_t f;
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "s1"));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 2, "s2"));
  CHECK(M(p)->begin(p, &E));
  f = dx_pv_sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, NULL, &E));
  dx_pv_fclear(&f);
  ASSERT_EQ(dx_pv_take(p, T0 + 2, "A", 10, 2), 1);
  M(p)->rollback(p);
  CHECK(M(p)->begin(p, &E));
  dx_pv_enqueue_work(p, T0 + 3, dx_pv_act_item("P", 1, 3));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 1);
  ASSERT_STR_EQ(dx_pv_srow(p, "s1").owner, "");
  ASSERT_STR_EQ(dx_pv_srow(p, "s2").owner, "");
  ASSERT_EQ(dx_pv_take(p, T0 + 4, "B", 10, 1), 1); /* B claims s1: its row was never acked */
  ASSERT_EQ(dx_pv_take(p, T0 + 4, "B", 10, 2), 1);
  dx_pv_done(p);
}

/* In one batch: a turn's ack queues session rows (for the "I" instance's sessions), then the
** batch fetches and acks. Returns after the orchestration ack; the caller goes on in the batch. */
static void queue_in_batch(dx_provider_t *p, int64_t now, dx_work_item_t *w, size_t n) {
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_pv_enqueue(p, now, dx_pv_start_item("O"));
  it = dx_pv_fetch(p, now);
  ASSERT(it);
  CHECK(M(p)->begin(p, &E));
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
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
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w[3] = {dx_pv_sess_item("O", 1, "s1"), dx_pv_sess_item("O", 2, "s2"),
                        dx_pv_sess_item("O", 3, "s3")};
  dx_work_fetch_t f, g;
  queue_in_batch(p, T0, w, 3);
  f = dx_pv_sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 1, f.lock_token, NULL, &E));
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 1, f.lock_token, NULL, &E), DX_ELOCK); /* gone */
  dx_pv_fclear(&f);
  g = dx_pv_sfetch(p, T0 + 2, "A", 10); /* s2's row: locked when the batch commits */
  ASSERT_EQ(g.item.id, 2);
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  ASSERT_EQ(dx_pv_srow(p, "s2").queued, 1);
  ASSERT_EQ(dx_pv_srow(p, "s2").running, 1);
  ASSERT_EQ(dx_pv_srow(p, "s3").queued, 1);
  ASSERT_EQ(dx_pv_srow(p, "s3").running, 0);
  dx_pv_take_ack(p, T0 + 3, "B", 3); /* s3's row, stored unlocked */
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "B", 10, 0), 0); /* s2's row is locked by A */
  CHECK(M(p)->ack_work_item(p, T0 + 4, g.lock_token, NULL, &E)); /* its lock was stored */
  dx_pv_fclear(&g);
  ASSERT_EQ(dx_pv_srow(p, "s2").queued, 0);
  ASSERT_EQ(dx_pv_take(p, T0 + LOCK + 10, "A", 10, 0), 0); /* nothing came back */
  dx_pv_done(p);
}

/* A method of the batch that is not one of the store cycle's (abandon) sees a session row
** the batch queued and locked, and the batch's next fetch sees what it did. */
DX_TEST(pv_session_row_of_a_batch_is_seen_by_its_other_methods) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w[1] = {dx_pv_sess_item("O", 1, "s1")};
  dx_work_fetch_t f, g;
  queue_in_batch(p, T0, w, 1);
  f = dx_pv_sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->abandon_work_item(p, T0 + 2, f.lock_token, 0, 0, &E));
  g = dx_pv_sfetch(p, T0 + 3, "A", 10);
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 3, f.lock_token, NULL, &E), DX_ELOCK);
  CHECK(M(p)->ack_work_item(p, T0 + 3, g.lock_token, NULL, &E));
  CHECK(M(p)->commit(p, 1, &E));
  dx_pv_fclear(&f);
  dx_pv_fclear(&g);
  ASSERT_EQ(dx_pv_srow(p, "s1").queued, 0);
  ASSERT_EQ(dx_pv_take(p, T0 + LOCK + 10, "A", 10, 0), 0);
  dx_pv_done(p);
}

/* A claim starts a new ownership epoch: the session's rows an earlier owner locked are due at
** once, also when they were queued and locked inside the same batch. */
DX_TEST(pv_session_claim_in_a_batch_frees_rows_locked_earlier_in_it) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w[2] = {dx_pv_sess_item("O", 1, "s1"), dx_pv_sess_item("O", 2, "s1")};
  dx_work_fetch_t f, g;
  queue_in_batch(p, T0, w, 2);
  f = dx_pv_sfetch(p, T0 + 1, "A", 10);
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(dx_pv_release_sessions(p, T0 + 2, "A", "s1"), 1);
  g = dx_pv_sfetch(p, T0 + 3, "B", 10); /* claims s1: row 2 */
  ASSERT_EQ(g.item.id, 2);
  ASSERT_EQ(g.session_claimed, 1);
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "B", 10, 1), 0); /* row 1: A's lock ended with the claim */
  CHECK(M(p)->commit(p, 1, &E));
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 4, f.lock_token, NULL, &E), DX_ELOCK);
  dx_pv_fclear(&f);
  dx_pv_fclear(&g);
  dx_pv_done(p);
}

/* Activity results acked inside a batch: the batch's own fetch delivers them (LMDB keeps such
** messages in memory for the batch), its turn's ack consumes them there, and what the batch
** left queued is stored by its commit; a method outside the store cycle (the queue depths)
** sees them inside the batch too. */
DX_TEST(pv_results_of_a_batch_are_stored_as_the_batch_left_them) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t d1 = dx_pv_act_done("I1", 1, 1), d2 = dx_pv_act_done("I2", 1, 1);
  dx_work_fetch_t f1, f2;
  dx_orch_item_t *it;
  char first[8];
  dx_pv_create_instance(p, T0, "I1");
  dx_pv_create_instance(p, T0, "I2");
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("I1", 1, 1));
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("I2", 1, 1));
  f1 = dx_pv_wfetch(p, T0 + 1);
  f2 = dx_pv_wfetch(p, T0 + 1);
  ASSERT(f1.item.kind && f2.item.kind);
  CHECK(M(p)->begin(p, &E));
  CHECK(M(p)->ack_work_item(p, T0 + 2, f1.item.instance[1] == '1' ? f1.lock_token : f2.lock_token,
                            &d1, &E));
  CHECK(M(p)->ack_work_item(p, T0 + 2, f1.item.instance[1] == '2' ? f1.lock_token : f2.lock_token,
                            &d2, &E));
  it = dx_pv_fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  ASSERT_STR_EQ(it->messages[0].data, "\"out\"");
  snprintf(first, sizeof first, "%s", it->instance);
  dx_pv_turn(p, T0 + 4, it, 1); /* consumes it */
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1); /* the other result, seen by a nested method */
  CHECK(M(p)->commit(p, 1, &E));
  dx_pv_fclear(&f1);
  dx_pv_fclear(&f2);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1);
  it = dx_pv_fetch(p, T0 + 5);
  ASSERT(it);
  ASSERT(strcmp(it->instance, first) != 0);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  dx_pv_turn(p, T0 + 6, it, 1);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  ASSERT(dx_pv_fetch(p, T0 + LOCK + 10) == NULL);
  dx_pv_done(p);
}

/* A result acked in a batch whose fetch then abandons the instance (a failed turn) is
** delivered again, and a rolled-back batch's results are gone with it. */
DX_TEST(pv_results_of_a_batch_follow_abandon_and_rollback) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t d = dx_pv_act_done("I1", 1, 1);
  dx_work_fetch_t f;
  dx_orch_item_t *it;
  dx_pv_create_instance(p, T0, "I1");
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("I1", 1, 1));
  f = dx_pv_wfetch(p, T0 + 1);
  ASSERT(f.item.kind);
  CHECK(M(p)->begin(p, &E));
  CHECK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, &d, &E));
  it = dx_pv_fetch(p, T0 + 3);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 3, it->instance, it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  it = dx_pv_fetch(p, T0 + 4);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  M(p)->rollback(p);
  dx_orch_item_free(it);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0); /* the ack was rolled back: its result is gone */
  CHECK(M(p)->ack_work_item(p, T0 + 5, f.lock_token, &d, &E)); /* still locked: ack again */
  dx_pv_fclear(&f);
  it = dx_pv_fetch(p, T0 + 6);
  ASSERT(it);
  ASSERT_EQ(it->messages_len, 1);
  dx_pv_turn(p, T0 + 7, it, 1);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  dx_pv_done(p);
}

DX_TEST(pv_session_fetch_skips_many_rows_of_sessions_held_elsewhere) {
  dx_provider_t *p = dx_pv_fresh();
  enum { N = 3000 };
  int i;
  CHECK(M(p)->begin(p, &E));
  dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", 1, "big"));
  dx_pv_take(p, T0, "B", 10, 1);
  for (i = 0; i < N; i++) dx_pv_enqueue_work(p, T0, dx_pv_sess_item("I", (uint64_t)i + 10, "big"));
  CHECK(M(p)->commit(p, 1, &E));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_sess_item("I", 2, "other"));
  dx_pv_enqueue_work(p, T0 + 2, dx_pv_act_item("P", 1, 3));
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "A", 10, 2), 1);
  dx_pv_take(p, T0 + 3, "A", 10, 3);
  dx_pv_take(p, T0 + 3, "A", 10, 0);
  ASSERT_EQ(dx_pv_srow(p, "big").queued, N + 1);
  ASSERT_EQ(dx_pv_take(p, T0 + 3, "B", 10, 10), 0);
  dx_pv_done(p);
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
    CHILD_CHECK(M(p)->fetch_work_item(p, dx_pv_wall_ms(), 600000, &cfg, &f, &E) == 0);
    if (f.item.kind == 0) {
      empty++;
      usleep(500);
      continue;
    }
    empty = 0;
    CHILD_CHECK(M(p)->ack_work_item(p, dx_pv_wall_ms(), f.lock_token, NULL, &E) == 0);
    n = snprintf(line, sizeof line, "%d %llu\n", idx, (unsigned long long)f.item.id);
    CHILD_CHECK(write(fd, line, (size_t)n) == n);
    dx_work_item_clear(&f.item);
    free(f.previous_owner);
  }
  dx_pv_done(p);
}

DX_TEST(pv_session_multi_process_claim_race) {
  char *store = dx_pv_new_store(), *out, *s;
  dx_provider_t *p;
  static int seen[RACE_ITEMS + 1];
  int i, owner = -1, total = 0;
  dx_pv_srows_t r;
  if (!dx_pv_multi_process()) { free(store); return; }
  p = dx_pv_open(store);
  CHECK(M(p)->begin(p, &E));
  for (i = 1; i <= RACE_ITEMS; i++)
    dx_pv_enqueue_work(p, dx_pv_wall_ms(), dx_pv_sess_item("I", (uint64_t)i, "race"));
  CHECK(M(p)->commit(p, 1, &E));
  dx_pv_done(p);
  out = dx_pv_run_children(store, 2, session_race_child);
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
  r = dx_pv_sessions_of(p);
  ASSERT_EQ(r.n, 1);
  ASSERT_EQ(r.v[0].owner[0], 'W');
  ASSERT_EQ(r.v[0].owner[1] - '0', owner);
  ASSERT_EQ(r.v[0].queued, 0);
  dx_pv_done(p);
  free(store);
}
