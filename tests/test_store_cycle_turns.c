/*
** test_store_cycle_turns.c -- the store thread's held turns and deliveries (core/src/store.c):
** a fetched turn's ack joins its fetch's transaction (hold_turns), and a delivery's answers
** share one cycle (delivering, await_delivery), with rounds of instances stepping together.
** Part of the test_store_cycle program (the wrapping provider: test_store_cycle.c, declared
** in store_cycle.h).
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

/* {===== a fetched turn's ack joins its fetch's transaction (store.c hold_turns) =====} */

/* The loop side of these tests: each fetched turn is answered with an ack that starts the
** orchestration and schedules activity 2 (at once, or late_ms later from a timer); fetched
** activities are counted, with the commits the store had made when the first arrived. */
typedef struct turn_s {
  dx_store_op_t op;
  dx_orch_ack_t ack;
  dx_event_t ev[2];
  dx_work_item_t act;
  char instance[32];
  uv_timer_t timer;
  struct turns_s *t;
} turn_t;

typedef struct turns_s {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  int late_ms;
  int keep_first; /* the first turn fetched is never answered; one more is then wanted */
  int self_event; /* the first turn's ack also queues an event for its own instance, and
                     only that turn is answered; the run ends at the second delivery */
  int cache;      /* acks ask to be told when applied before the commit (op->applied), as
                     the runtime's do with its orchestration cache on */
  int hold_work;  /* cfg.hold_work */
  int acked_at_second; /* n_acked when the second turn was delivered */
  int eager;           /* the start is this process's own (dx__eager_start), queued as an op */
  dx_store_fetch_cb on_fetch; /* NULL: answer_turns */
  int (*until)(struct turns_s *t); /* NULL: until the activity was fetched */
  dx_store_op_t start_op;
  int n_turns, n_acked, n_refused, n_work, commits_at_work, n_reported;
  turn_t turns[4];
  dx_work_item_t event;
} turns_t;

static void turn_acked(dx_store_op_t *op) {
  turns_t *t = ((turn_t *)op->ud)->t;
  if (op->rc == 0) t->n_acked++;
  else t->n_refused++;
}

static void turn_reported(dx_store_op_t *op) { ((turn_t *)op->ud)->t->n_reported++; }

static void on_late(uv_timer_t *h) {
  turn_t *tn = h->data;
  dx__store_submit(tn->t->s, &tn->op);
  uv_close((uv_handle_t *)h, NULL);
}

static void answer_turns(void *ud, dx_store_fetched_t *f) {
  turns_t *t = ud;
  size_t i;
  for (i = 0; i < f->n_orch && t->n_turns < 4; i++) {
    turn_t *tn = &t->turns[t->n_turns++];
    const dx_orch_item_t *it = f->orch[i];
    if (t->keep_first && t->n_turns == 1) { /* held unsettled, as a busy loop's item is */
      dx__store_want(t->s, 1, 0);
      continue;
    }
    if (t->self_event && t->n_turns > 1) {
      t->acked_at_second = t->n_acked;
      continue;
    }
    memset(&tn->op, 0, sizeof tn->op);
    memset(&tn->ack, 0, sizeof tn->ack);
    memset(tn->ev, 0, sizeof tn->ev);
    memset(&tn->act, 0, sizeof tn->act);
    tn->t = t;
    snprintf(tn->instance, sizeof tn->instance, "%s", it->instance);
    tn->ev[0].event_id = 1;
    tn->ev[0].kind = DX_EV_ORCH_STARTED;
    tn->ev[0].name = "Orch";
    tn->ev[0].data = "1";
    tn->ev[1].event_id = 2;
    tn->ev[1].kind = DX_EV_ACT_SCHEDULED;
    tn->ev[1].name = "Act";
    tn->ev[1].data = "null";
    tn->act.kind = DX_WI_ACT_EXECUTE;
    tn->act.instance = tn->instance;
    tn->act.execution_id = 1;
    tn->act.id = 2;
    tn->act.name = "Act";
    tn->act.data = "null";
    tn->ack.instance = tn->instance;
    tn->ack.lock_token = it->lock_token;
    tn->ack.execution_id = it->execution_id;
    tn->ack.orchestration_name = "Orch";
    tn->ack.status = DX_STATUS_RUNNING;
    tn->ack.delta = tn->ev;
    tn->ack.delta_len = 2;
    tn->ack.worker_items = &tn->act;
    tn->ack.worker_items_len = 1;
    if (t->self_event) {
      memset(&t->event, 0, sizeof t->event);
      t->event.kind = DX_WI_EXTERNAL;
      t->event.instance = tn->instance;
      t->event.execution_id = 1;
      t->event.name = "go";
      t->event.data = "1";
      tn->ack.orch_items = &t->event;
      tn->ack.orch_items_len = 1;
    }
    tn->op.kind = DX_OP_ACK_ORCH;
    tn->op.ack = &tn->ack;
    tn->op.done = turn_acked;
    tn->op.applied = t->cache ? turn_reported : NULL;
    tn->op.ud = tn;
    if (t->late_ms > 0) {
      uv_timer_init(&t->loop, &tn->timer);
      tn->timer.data = tn;
      uv_timer_start(&tn->timer, on_late, (uint64_t)t->late_ms, 0);
    } else {
      dx__store_submit(t->s, &tn->op);
    }
  }
  if (f->n_work && !t->n_work)
    t->commits_at_work = __atomic_load_n(&t->w->commits, __ATOMIC_SEQ_CST);
  t->n_work += (int)f->n_work;
}

void start_applied(dx_store_op_t *op) { ASSERT_EQ(op->rc, 0); }

/* Start instance "i1", run a store (hold_ms) answering its turns until the activity the
** turn scheduled was fetched. */
static void run_turns(turns_t *t, wrap_t *w, int64_t hold_ms) {
  dx_store_cfg_t cfg;
  dx_work_item_t start;
  dx_error_t err;
  int i;
  memset(&start, 0, sizeof start);
  start.kind = DX_WI_START;
  start.instance = "i1";
  start.name = "Orch";
  start.execution_id = 1;
  if (!t->eager)
    ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms(), &start, 0,
                                                          &err));
  t->w = w;
  ASSERT_OK(uv_loop_init(&t->loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.orch_lock_ms = cfg.work_lock_ms = 60000;
  cfg.poll_interval_ms = 10;
  cfg.hold_ms = hold_ms;
  cfg.hold_work = t->hold_work;
  cfg.on_fetch = t->on_fetch ? t->on_fetch : answer_turns;
  cfg.ud = t;
  ASSERT_OK(dx__store_new(&t->s, &t->loop, &cfg, &err));
  if (t->eager) {
    memset(&t->start_op, 0, sizeof t->start_op);
    t->start_op.kind = DX_OP_ENQUEUE_ORCH;
    t->start_op.eager = 1;
    t->start_op.item = &start;
    t->start_op.done = start_applied;
    dx__store_submit(t->s, &t->start_op);
  }
  dx__store_want(t->s, t->keep_first ? 1 : 4, 4);
  for (i = 0; i < 20000 && !(t->until          ? t->until(t)
                              : t->self_event ? t->n_turns >= 2
                                              : t->n_work > 0);
       i++) {
    uv_run(&t->loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(t->s, &t->loop);
}

/* The history the store holds for i1 has exactly its one turn's two events. */
static void assert_one_turn(wrap_t *w) {
  dx_event_t *ev = NULL;
  size_t n = 0;
  dx_error_t err;
  ASSERT_OK(w->inner->methods->read_history(w->inner, "i1", 0, &ev, &n, NULL, &err));
  ASSERT_EQ((int)n, 2);
  ASSERT_EQ(ev[0].kind, DX_EV_ORCH_STARTED);
  ASSERT_EQ(ev[1].kind, DX_EV_ACT_SCHEDULED);
  dx_events_free(ev, n);
}

DX_TEST(store_turn_ack_commits_with_its_fetch_and_the_activity_it_scheduled) {
  /* the start is fetched, the turn answered while the transaction is open, and the activity
  ** it scheduled fetched by the same transaction: one commit (there were two: the fetch's,
  ** then the ack's) */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  run_turns(&t, w, 60000);
  ASSERT_EQ(t.n_turns, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 1);
  ASSERT_EQ(w->last_sync, 1); /* the turn's ack is durable */
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_eager_start_on_a_database_commits_with_its_first_turn) {
  /* a provider with run_cycle ($DX_TEST_PG): this process's own start is applied and its turn
  ** fetched by single calls, the turn answered while the transaction is open, and the
  ** run_cycle closing it acks the turn and fetches the activity: one commit (there were two:
  ** the start's cycle, then the ack's; and three with the client's own commit of the start) */
  static turns_t t;
  const char *pg = getenv("DX_TEST_PG");
  char url[1024];
  wrap_t *w;
  if (!pg || !*pg) {
    printf("# no $DX_TEST_PG: the database case is not run here (scripts/test runs it)\n");
    return;
  }
  snprintf(url, sizeof url, "%s%sschema=sc_%d_%lld", pg, strchr(pg, '?') ? "&" : "?",
           (int)getpid(), (long long)dx_clock_now_ms());
  w = wrap_open_at(url);
  ASSERT(w->m.version >= 5 && w->m.run_cycle);
  memset(&t, 0, sizeof t);
  t.eager = 1;
  run_turns(&t, w, 60000);
  ASSERT_EQ(t.n_turns, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 1);
  ASSERT_EQ(w->last_sync, 1); /* start and turn are durable */
  assert_one_turn(w);
  w_destroy(&w->base);
}

/* The activity's result and the turn it unblocks: the loop answers the activity run_turns
** fetched with its result, then the turn that result wakes with a completing ack. */
typedef struct {
  turns_t t; /* first: answer_turns gets it for the first turn */
  dx_store_op_t res_op, fin_op;
  dx_work_item_t res;
  dx_orch_ack_t fin;
  dx_event_t fin_ev[2];
  int commits_at_result, commits_at_turn, commits_at_done, fin_rc, fin_done;
} steps_t;

static void fin_acked(dx_store_op_t *op) {
  steps_t *st = op->ud;
  st->fin_rc = op->rc;
  st->commits_at_done = __atomic_load_n(&st->t.w->commits, __ATOMIC_SEQ_CST);
  st->fin_done = 1;
}

static void result_applied(dx_store_op_t *op) { ASSERT_EQ(op->rc, 0); }

static void answer_steps(void *ud, dx_store_fetched_t *f) {
  steps_t *st = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    const dx_orch_item_t *it = f->orch[i];
    dx_store_fetched_t one = {0};
    if (it->history_len == 0) { /* the first turn */
      one.orch = f->orch + i;
      one.n_orch = 1;
      answer_turns(&st->t, &one);
      continue;
    }
    st->commits_at_turn = __atomic_load_n(&st->t.w->commits, __ATOMIC_SEQ_CST);
    st->fin_ev[0] = (dx_event_t){.event_id = 3, .kind = DX_EV_ACT_COMPLETED, .source_id = 2,
                                 .data = "1"};
    st->fin_ev[1] = (dx_event_t){.event_id = 4, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    st->fin = (dx_orch_ack_t){.instance = "i1", .lock_token = it->lock_token,
                              .execution_id = it->execution_id, .orchestration_name = "Orch",
                              .status = DX_STATUS_COMPLETED, .output = "1",
                              .delta = st->fin_ev, .delta_len = 2};
    st->fin_op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = &st->fin, .done = fin_acked,
                                 .ud = st};
    dx__store_submit(st->t.s, &st->fin_op);
  }
  if (f->n_work && !st->t.n_work) { /* the activity: its result */
    st->t.n_work = (int)f->n_work;
    st->res = (dx_work_item_t){.kind = DX_WI_ACT_COMPLETED, .instance = "i1",
                               .execution_id = 1, .id = 2, .data = "1"};
    st->res_op = (dx_store_op_t){.kind = DX_OP_ACK_WORK, .token = f->work[0].lock_token,
                                 .item = &st->res, .done = result_applied, .ud = st};
    st->commits_at_result = __atomic_load_n(&st->t.w->commits, __ATOMIC_SEQ_CST);
    dx__store_submit(st->t.s, &st->res_op);
  }
}

static int steps_done(turns_t *t) { return ((steps_t *)t)->fin_done; }

/* Each of w's instances <id> (one "r<k>" for k < n, or the one `only`) ended after four
** events: started, scheduled, completed activity, completed orchestration. */
void assert_four_events_completed(wrap_t *w, const char *only, int n) {
  dx_error_t err;
  int i;
  for (i = 0; i < n; i++) {
    char id[16];
    dx_event_t *ev = NULL;
    size_t ne = 0;
    if (only) snprintf(id, sizeof id, "%s", only);
    else snprintf(id, sizeof id, "r%d", i);
    ASSERT_OK(w->inner->methods->read_history(w->inner, id, 0, &ev, &ne, NULL, &err));
    ASSERT_EQ((int)ne, 4);
    ASSERT_EQ(ev[3].kind, DX_EV_ORCH_COMPLETED);
    dx_events_free(ev, ne);
  }
}

DX_TEST(store_result_of_an_idle_loop_on_a_database_commits_with_the_turn_it_unblocks) {
  /* a provider with run_cycle ($DX_TEST_PG), the loop holding nothing but the activity: its
  ** result is applied and the woken turn fetched by single calls, the turn answered while the
  ** transaction is open and acked by the run_cycle closing it: one commit (there were two) */
  static steps_t st;
  const char *pg = getenv("DX_TEST_PG");
  char url[1024];
  wrap_t *w;
  if (!pg || !*pg) {
    printf("# no $DX_TEST_PG: the database case is not run here (scripts/test runs it)\n");
    return;
  }
  snprintf(url, sizeof url, "%s%sschema=sr_%d_%lld", pg, strchr(pg, '?') ? "&" : "?",
           (int)getpid(), (long long)dx_clock_now_ms());
  w = wrap_open_at(url);
  memset(&st, 0, sizeof st);
  st.t.on_fetch = answer_steps;
  st.t.until = steps_done;
  run_turns(&st.t, w, 60000);
  ASSERT_EQ(st.fin_rc, 0);
  ASSERT_EQ(st.commits_at_turn, st.commits_at_result); /* handed over before any commit */
  ASSERT_EQ(st.commits_at_done - st.commits_at_result, 1);
  ASSERT_EQ(w->last_sync, 1);
  assert_four_events_completed(w, "i1", 1);
  w_destroy(&w->base);
}

DX_TEST(store_turn_answered_after_the_hold_commits_in_the_next_cycle) {
  /* a loop slower than hold_ms: the fetch commits alone, the ack follows as before */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  t.late_ms = 50;
  run_turns(&t, w, 1);
  ASSERT_EQ(t.n_turns, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 2);
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_turn_handed_over_from_a_lost_transaction_is_refused_and_comes_back) {
  /* the transaction that handed the turn over is rolled back (DX_ERETRY at commit): the ack
  ** given for that delivery is refused, the retried batch fetches the start again, and only
  ** the second delivery's turn is kept */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  w->retry_commits = 1;
  run_turns(&t, w, 60000);
  ASSERT_EQ(t.n_turns, 2);
  ASSERT_EQ(t.n_refused, 1);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_turn_fetched_while_the_loop_holds_other_items_commits_at_once) {
  /* the loop still holds an earlier item unsettled (busy): the cycle that fetches i1 commits
  ** without waiting for its turn, the ack follows in the next cycle (waiting would keep other
  ** writers out of the store while the loop works through its backlog) */
  static turns_t t;
  wrap_t *w = wrap_open();
  dx_work_item_t start;
  dx_error_t err;
  memset(&t, 0, sizeof t);
  memset(&start, 0, sizeof start);
  start.kind = DX_WI_START;
  start.instance = "i0";
  start.name = "Orch";
  start.execution_id = 1;
  ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms() - 1, &start,
                                                        0, &err));
  t.keep_first = 1;
  run_turns(&t, w, 50); /* i0's cycle waits 50 ms for it in vain, commits; then i1 */
  ASSERT_EQ(t.n_turns, 2);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.n_work, 1);
  ASSERT_EQ(t.commits_at_work, 3); /* i0's fetch, i1's fetch, i1's ack with its activity */
  assert_one_turn(w);
  w_destroy(&w->base);
}

DX_TEST(store_turn_refetched_in_the_cycle_of_its_previous_ack_waits_for_the_commit) {
  /* the ack of i1's first turn (answered after the hold) queues an event for i1; the cycle
  ** that applies it fetches i1 again: that turn goes to the loop only with the commit, after
  ** the first turn's settlement (the worker's cache keeps a turn once its ack is known to be
  ** committed: handed over earlier, the new turn found no kept turn and replayed) */
  static turns_t t;
  wrap_t *w = wrap_open();
  memset(&t, 0, sizeof t);
  t.late_ms = 20;
  t.self_event = 1;
  t.cache = 1;
  run_turns(&t, w, 1);
  ASSERT_EQ(t.n_turns, 2);
  ASSERT_EQ(t.n_acked, 1);
  ASSERT_EQ(t.acked_at_second, 1);
  ASSERT_EQ(t.n_reported, 0); /* its turn came with an earlier commit: never reported early */
  w_destroy(&w->base);
}

/* {===== a delivery's answers share one cycle (store.c delivering, await_delivery) =====} */

/* Ten instances step together as ten sessions at a worker's capacity do: their activities
** arrive in one delivery, the loop answers each with its result (a little work between two
** answers, as running an activity takes), the store fetches the ten turns those results wake
** and the loop completes each. */
static void round_fin_acked(dx_store_op_t *op) {
  round_t *r = op->ud;
  if (op->rc != 0) r->fin_failed++;
  if (++r->fin_done == (r->n ? r->n : ROUND_N))
    r->commits_at_done = __atomic_load_n(&r->w->commits, __ATOMIC_SEQ_CST);
}

/* n starts of "Orch", instances <prefix>0 .. <prefix>n-1, queued straight in the store. */
void enqueue_starts(wrap_t *w, const char *prefix, int n) {
  dx_error_t err;
  int i;
  for (i = 0; i < n; i++) {
    char id[16];
    dx_work_item_t start = {.kind = DX_WI_START, .instance = id, .name = "Orch",
                            .execution_id = 1};
    snprintf(id, sizeof id, "%s%d", prefix, i);
    ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms(), &start,
                                                          0, &err));
  }
}

/* A store on w with long locks and a hold the loop's answers always make in time. */
void held_cfg(dx_store_cfg_t *cfg, wrap_t *w) {
  memset(cfg, 0, sizeof *cfg);
  cfg->provider = &w->base;
  cfg->orch_lock_ms = cfg->work_lock_ms = 60000;
  cfg->poll_interval_ms = 10;
  cfg->hold_ms = 60000;
}

static void round_applied(dx_store_op_t *op) { ASSERT_EQ(op->rc, 0); }

void answer_round(void *ud, dx_store_fetched_t *f) {
  round_t *r = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    const dx_orch_item_t *it = f->orch[i];
    round_inst_t *x = &r->in[atoi(it->instance + 1)];
    int first = it->history_len == 0;
    dx_event_t *ev = first ? x->ev : x->fin_ev;
    dx_orch_ack_t *ack = first ? &x->ack : &x->fin_ack;
    dx_store_op_t *op = first ? &x->op : &x->fin_op;
    snprintf(x->instance, sizeof x->instance, "%s", it->instance);
    if (first) {
      ev[0] = (dx_event_t){.event_id = 1, .kind = DX_EV_ORCH_STARTED, .name = "Orch",
                           .data = "1"};
      ev[1] = (dx_event_t){.event_id = 2, .kind = DX_EV_ACT_SCHEDULED, .name = "Act",
                           .data = "null"};
      x->act = (dx_work_item_t){.kind = DX_WI_ACT_EXECUTE, .instance = x->instance,
                                .execution_id = 1, .id = 2, .name = "Act", .data = "null"};
    } else {
      ev[0] = (dx_event_t){.event_id = 3, .kind = DX_EV_ACT_COMPLETED, .source_id = 2,
                           .data = "1"};
      ev[1] = (dx_event_t){.event_id = 4, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    }
    *ack = (dx_orch_ack_t){.instance = x->instance, .lock_token = it->lock_token,
                           .execution_id = it->execution_id, .orchestration_name = "Orch",
                           .status = first ? DX_STATUS_RUNNING : DX_STATUS_COMPLETED,
                           .output = first ? NULL : "1", .delta = ev, .delta_len = 2,
                           .worker_items = first ? &x->act : NULL,
                           .worker_items_len = first ? 1 : 0};
    *op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = ack,
                          .done = first ? round_applied : round_fin_acked, .ud = r};
    dx__store_submit(r->s, op);
  }
  for (i = 0; i < f->n_work; i++) {
    round_inst_t *x = &r->in[atoi(f->work[i].item.instance + 1)];
    if (r->n_work++ == 0)
      r->commits_at_result = __atomic_load_n(&r->w->commits, __ATOMIC_SEQ_CST);
    if (!r->answer_first) usleep(300); /* the activity runs */
    x->res = (dx_work_item_t){.kind = DX_WI_ACT_COMPLETED, .instance = x->instance,
                              .execution_id = 1, .id = 2, .data = "1"};
    x->res_op = (dx_store_op_t){.kind = DX_OP_ACK_WORK, .token = f->work[i].lock_token,
                                .item = &x->res, .done = round_applied, .ud = r};
    dx__store_submit(r->s, &x->res_op);
    if (r->answer_first) usleep(300);
  }
}

DX_TEST(store_round_of_ten_steps_answered_in_one_delivery_commits_once) {
  /* the ten results, the ten turns they wake and those turns' acks: one commit (the thread
  ** woke at the first result and took part of the burst; and ten turns were more than a hold
  ** took, so their fetch committed alone: five commits here before) */
  static round_t r;
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(&r, 0, sizeof r);
  r.w = w;
  enqueue_starts(w, "r", ROUND_N);
  ASSERT_OK(uv_loop_init(&r.loop));
  held_cfg(&cfg, w);
  cfg.on_fetch = answer_round;
  cfg.ud = &r;
  ASSERT_OK(dx__store_new(&r.s, &r.loop, &cfg, &err));
  dx__store_want(r.s, 64, 64); /* one cycle takes all ten starts */
  for (i = 0; i < 20000 && r.fin_done < ROUND_N; i++) {
    uv_run(&r.loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(r.s, &r.loop);
  ASSERT_EQ(r.fin_done, ROUND_N);
  ASSERT_EQ(r.fin_failed, 0);
  ASSERT_EQ(r.n_work, ROUND_N);
  ASSERT_EQ(r.commits_at_result, 1); /* starts, first turns and the ten activities */
  ASSERT_EQ(r.commits_at_done - r.commits_at_result, 1);
  ASSERT_EQ(w->last_sync, 1);
  assert_four_events_completed(w, NULL, ROUND_N);
  w_destroy(&w->base);
}

/* The held rounds as a pipeline (store_rounds.c hand_over): the ten first turns go to the loop
** as two nodes of five; while the loop runs the second, the store thread applies the first's
** acks (and hands over the activities they scheduled). */
typedef struct {
  round_t r;        /* (first: answer_round's ud) */
  int turn_nodes[4], n_turn_nodes, acks_meanwhile, work_nodes, partial;
  int iter, second_turns_iter, first_work_iter; /* the driver's uv_run calls */
} pipe_t;

/* Wait (bounded) until the store applied at least n calls counted by *counter. */
static int await_count(int *counter, int n) {
  int k;
  for (k = 0; k < 4000 && __atomic_load_n(counter, __ATOMIC_SEQ_CST) < n; k++) usleep(500);
  return __atomic_load_n(counter, __ATOMIC_SEQ_CST);
}

static void answer_pipe(void *ud, dx_store_fetched_t *f) {
  pipe_t *p = ud;
  size_t i;
  if (f->n_orch && f->orch[0]->history_len == 0 && p->n_turn_nodes < 4) {
    p->turn_nodes[p->n_turn_nodes++] = (int)f->n_orch;
    if (p->n_turn_nodes == 2) { /* the first node's acks are applied meanwhile */
      p->acks_meanwhile = await_count(&p->r.w->acks_orch, p->turn_nodes[0]);
      /* and the activities they scheduled fetched (five and a sixth fetch finding none) and
      ** handed over while this loop still runs */
      await_count(&p->r.w->fetch_works, ROUND_N / 2 + 1);
      usleep(20000);
      p->second_turns_iter = p->iter;
    }
  }
  if (f->n_work && !p->work_nodes) p->first_work_iter = p->iter;
  if (!f->n_work || p->work_nodes++ != 1) {
    answer_round(ud, f);
    return;
  }
  /* the second node of activities: its first answer stays queued until the node is run, even
  ** when the store thread takes the first node's answers meanwhile */
  for (i = 0; i < f->n_work; i++) {
    dx_store_fetched_t one = {.work = f->work + i, .n_work = 1, .at_ms = f->at_ms};
    answer_round(ud, &one);
    if (i == 0) {
      await_count(&p->r.w->acks_work, ROUND_N / 2); /* the first node's results */
      usleep(20000); /* (a take of this first answer would be applied by now) */
      p->partial = __atomic_load_n(&p->r.w->acks_work, __ATOMIC_SEQ_CST) - ROUND_N / 2;
    }
  }
}

DX_TEST(store_held_round_applies_one_half_while_the_loop_runs_the_other) {
  /* before: the ten turns went over as one delivery and the store thread slept until all ten
  ** acks were in (the loop and the thread worked in turn, never at once) */
  static pipe_t p;
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  memset(&p, 0, sizeof p);
  p.r.w = w;
  p.r.answer_first = 1;
  enqueue_starts(w, "r", ROUND_N);
  ASSERT_OK(uv_loop_init(&p.r.loop));
  held_cfg(&cfg, w);
  cfg.hold_work = 1;
  cfg.on_fetch = answer_pipe;
  cfg.ud = &p;
  ASSERT_OK(dx__store_new(&p.r.s, &p.r.loop, &cfg, &err));
  dx__store_want(p.r.s, 64, 64);
  for (i = 0; i < 20000 && p.r.fin_done < ROUND_N; i++) {
    p.iter = i;
    uv_run(&p.r.loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(p.r.s, &p.r.loop);
  ASSERT_EQ(p.r.fin_done, ROUND_N);
  /* the activities handed over while the loop ran the second turns ran in the same wake-up
  ** (on_async looks for held nodes before it returns; before: a trip through the poll) */
  ASSERT_EQ(p.first_work_iter, p.second_turns_iter);
  ASSERT_EQ(p.r.fin_failed, 0);
  ASSERT_EQ(p.n_turn_nodes, 2);
  ASSERT_EQ(p.turn_nodes[0], ROUND_N / 2);
  ASSERT_EQ(p.turn_nodes[1], ROUND_N / 2);
  ASSERT_EQ(p.acks_meanwhile, ROUND_N / 2); /* the first five, before the second five's */
  ASSERT_EQ(p.work_nodes, 2);  /* the activities follow each half on their own */
  /* the store takes the answers of the nodes the loop has run, not the first of those to the
  ** one it runs now (taken in part, their items went over in pieces) */
  ASSERT_EQ(p.partial, 0);
  ASSERT_EQ(p.r.commits_at_result, 0); /* activities ran inside the transaction */
  ASSERT_EQ(w->commits, 1);   /* starts, turns, activities, results, last turns: one commit */
  w_destroy(&w->base);
}

/* The loop holds a turn it never settles ("busy"), so a later turn cannot go round; the
** activity ready beside it is still fetched in that batch (delivered with it), not left for a
** later cycle (another worker process could take it meanwhile). */
typedef struct {
  int deliveries, together;
} beside_t;

static void note_beside(void *ud, dx_store_fetched_t *f) {
  beside_t *b = ud;
  b->deliveries++;
  if (f->n_orch == 1 && f->n_work == 1 && strcmp(f->orch[0]->instance, "t1") == 0) b->together++;
} /* (nothing is settled: every item stays held) */

DX_TEST(store_activity_ready_beside_a_turn_that_cannot_go_round_is_fetched_in_its_batch) {
  static beside_t b;
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_error_t err;
  dx_work_item_t act = {.kind = DX_WI_ACT_EXECUTE, .instance = "x", .execution_id = 1, .id = 2,
                        .name = "Act", .data = "null"};
  dx_work_item_t t1 = {.kind = DX_WI_START, .instance = "t1", .name = "Orch", .execution_id = 1};
  int i;
  memset(&b, 0, sizeof b);
  enqueue_starts(w, "busy", 1);
  ASSERT_OK(uv_loop_init(&loop));
  held_cfg(&cfg, w);
  cfg.hold_ms = 5; /* the unanswered turn's hold ends */
  cfg.hold_work = 1;
  cfg.on_fetch = note_beside;
  cfg.ud = &b;
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  dx__store_want(s, 8, 8);
  for (i = 0; i < 20000 && b.deliveries < 1; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  ASSERT_EQ(b.deliveries, 1); /* busy0's turn, never answered */
  dx__store_pause(s, 1);      /* (both become ready between two batches) */
  ASSERT_OK(w->inner->methods->enqueue_for_orchestrator(w->inner, dx_clock_now_ms(), &t1, 0,
                                                        &err));
  ASSERT_OK(w->inner->methods->enqueue_for_worker(w->inner, dx_clock_now_ms(), &act, &err));
  dx__store_pause(s, 0);
  dx__store_poke(s);
  for (i = 0; i < 20000 && b.deliveries < 2; i++) {
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(s, &loop);
  ASSERT_EQ(b.deliveries, 2);
  ASSERT_EQ(b.together, 1);
  w_destroy(&w->base);
}

DX_TEST(store_want_of_more_budget_in_hand_does_not_wake_the_thread) {
  /* the loop tops up its budget after every settlement; while the thread still has budget
  ** it finds nothing new by looking again (each look is a read of what is due) */
  wrap_t *w = wrap_open();
  uv_loop_t loop;
  dx_store_t *s;
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i, before;
  w->m.next_due_ms = w_next_due;
  ASSERT_OK(uv_loop_init(&loop));
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = &w->base;
  cfg.poll_interval_ms = 600000; /* only a wake-up can make the thread look again */
  ASSERT_OK(dx__store_new(&s, &loop, &cfg, &err));
  spin(&loop, 20);
  ASSERT_EQ(dues(w), 0); /* no budget: nothing to look for */
  dx__store_want(s, 1, 0);
  for (i = 0; i < 5000 && dues(w) == 0; i++) spin(&loop, 1);
  ASSERT_EQ(dues(w), 1); /* a budget from none: it looks */
  spin(&loop, 20);
  before = dues(w);
  for (i = 0; i < 5; i++) {
    dx__store_want(s, 1, 0);
    spin(&loop, 5);
  }
  ASSERT_EQ(dues(w), before);
  dx__store_want(s, 0, 1); /* the work budget was none */
  for (i = 0; i < 5000 && dues(w) == before; i++) spin(&loop, 1);
  ASSERT_EQ(dues(w), before + 1);
  close_store(s, &loop);
  w_destroy(&w->base);
}

/* A big delivery (more items than a burst, BURST_MAX_ITEMS): the store thread applies its
** answers as they come in one open transaction and commits them together once the loop has
** taken the whole delivery (store_rounds.c absorb_delivery); a loop that stops answering for
** longer than a hold (a long turn) does not keep the transaction open: what it answered so far
** commits meanwhile. */
#define BIG_N 40

typedef struct {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  round_inst_t in[BIG_N];
  int n_turns, acked, committed_meanwhile;
  int slow_us;        /* > 0: the loop takes this long per turn (and never blocks for long) */
  int commits_at_first; /* commits when the first turn was answered */
} big_t;

static void big_acked(dx_store_op_t *op) {
  big_t *b = op->ud;
  ASSERT_EQ(op->rc, 0);
  b->acked++;
}

static void answer_big(void *ud, dx_store_fetched_t *f) {
  big_t *b = ud;
  size_t i;
  for (i = 0; i < f->n_orch && b->n_turns < BIG_N; i++) {
    const dx_orch_item_t *it = f->orch[i];
    round_inst_t *x = &b->in[b->n_turns++];
    snprintf(x->instance, sizeof x->instance, "%s", it->instance);
    x->ev[0] = (dx_event_t){.event_id = 1, .kind = DX_EV_ORCH_STARTED, .name = "Orch",
                            .data = "1"};
    x->ev[1] = (dx_event_t){.event_id = 2, .kind = DX_EV_ORCH_COMPLETED, .data = "1"};
    x->ack = (dx_orch_ack_t){.instance = x->instance, .lock_token = it->lock_token,
                             .execution_id = it->execution_id, .orchestration_name = "Orch",
                             .status = DX_STATUS_COMPLETED, .output = "1", .delta = x->ev,
                             .delta_len = 2};
    x->op = (dx_store_op_t){.kind = DX_OP_ACK_ORCH, .ack = &x->ack, .done = big_acked, .ud = b};
    if (b->n_turns == 1)
      b->commits_at_first = __atomic_load_n(&b->w->commits, __ATOMIC_SEQ_CST);
    dx__store_submit(b->s, &x->op);
    if (b->slow_us) {
      usleep((useconds_t)b->slow_us);
    } else if (b->n_turns == 1) { /* the loop works on: the first ack commits meanwhile */
      int before = __atomic_load_n(&b->w->commits, __ATOMIC_SEQ_CST), k;
      for (k = 0; k < 10000 && __atomic_load_n(&b->w->commits, __ATOMIC_SEQ_CST) == before; k++)
        usleep(1000);
      b->committed_meanwhile = __atomic_load_n(&b->w->commits, __ATOMIC_SEQ_CST) > before;
    }
  }
}

/* Run BIG_N starts fetched at once through a loop answering with answer_big. */
static void run_big(big_t *b, int hold_ms) {
  wrap_t *w = wrap_open();
  dx_store_cfg_t cfg;
  dx_error_t err;
  int i;
  b->w = w;
  enqueue_starts(w, "b", BIG_N);
  ASSERT_OK(uv_loop_init(&b->loop));
  held_cfg(&cfg, w);
  cfg.hold_ms = hold_ms;
  cfg.on_fetch = answer_big;
  cfg.ud = b;
  ASSERT_OK(dx__store_new(&b->s, &b->loop, &cfg, &err));
  dx__store_want(b->s, 64, 0); /* one cycle takes all forty starts */
  for (i = 0; i < 20000 && b->acked < BIG_N; i++) {
    uv_run(&b->loop, UV_RUN_NOWAIT);
    usleep(500);
  }
  close_store(b->s, &b->loop);
  ASSERT_EQ(b->n_turns, BIG_N);
  ASSERT_EQ(b->acked, BIG_N);
}

DX_TEST(store_answers_to_a_big_delivery_share_one_commit) {
  /* 40 starts fetched at once (more than a hold or a burst takes), answered one by one a
  ** little apart: the forty acks join one transaction, which commits once the loop has run
  ** the fortieth (before: the thread woke at the first ack and committed it alone, then the
  ** next few, and so on: fanout paid ~10 commits for a delivery of 200 turns) */
  static big_t b;
  memset(&b, 0, sizeof b);
  b.slow_us = 300;
  run_big(&b, 60000);
  ASSERT_EQ(b.w->commits - b.commits_at_first, 1);
  w_destroy(&b.w->base);
}

DX_TEST(store_answers_to_a_big_delivery_commit_while_the_loop_is_blocked) {
  /* 40 starts fetched at once: the first turn's ack is applied, then the loop does not
  ** answer for longer than a hold (20 ms here; it waits up to 10 s for a commit): the
  ** transaction does not wait for the other 39, the first ack commits meanwhile */
  static big_t b;
  memset(&b, 0, sizeof b);
  run_big(&b, 20);
  ASSERT(b.committed_meanwhile);
  w_destroy(&b.w->base);
}
