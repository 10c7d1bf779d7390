/*
** test_store_cycle_rounds.c -- the store thread's held rounds (core/src/store.c): a session's
** close and the next session's claim share one commit (hold_closes), activities answered
** inside their fetch's transaction, fetched memory given back (store_mem.c), and the lap
** (fetched items go to the loop while their transaction commits). Part of the
** test_store_cycle program (fixtures declared in store_cycle.h).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duroxide.h"
#include "store.h"
#include "store_cycle.h"
#include "testlib.h"
#include "util.h"

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
