/*
** store_rounds.c -- held rounds (see store_int.h): a local store's cycle hands the turns and
** activities it fetched to the idle loop before its commit and applies their answers in the
** same transaction.
*/
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "store_int.h"

/* {===== turns and activities answered inside their fetch's transaction =====} */

/* A provider without run_cycle makes its calls without round trips (a local store), so a
** cycle's transaction can stay open a moment for the items it fetched (held rounds): the
** turns go to the loop before the commit and their acks (with whatever else the loop queued
** meanwhile) join the transaction; the activities those turns scheduled then go to the loop
** too, their results join it, the turns they unblock are fetched and handed over, and so on;
** the transaction commits once at the end. A lone orchestration's steps (result, turn, next
** activity) then share one commit, and a start costs none of its own. Bounds: only a few items
** per round (HOLD_MAX_ITEMS), only while the loop holds nothing else unsettled (idle, it answers
** at once: a big batch or a busy loop commits at once as before, because a hold waiting on a
** busy loop would keep other processes' writers out for nothing), each wait at most
** cfg.hold_ms, all of a cycle's waits at most HOLD_BUDGET_HOLDS times that, and a round that
** brought no answer ends them.
**
** Activities thus start before the turn that scheduled them is durable (lead's decision, issue
** 12; local stores only). Activities run at least once anyway: if the transaction is lost (an
** error, a crash), the turn comes back, runs again from the same history and schedules the same
** activity under the same ids (instance, execution, activity id: the idempotency key), which
** runs again. An activity whose fetch claimed its session in this transaction is not handed
** over: the runtime would own a session whose claim may roll back; it starts after the commit.
** The loop keeps a turn in its orchestration cache once its ack was applied in the open
** transaction (op->applied), so the instance's next turn in the same transaction continues it;
** if the transaction is lost the ack is refused and the loop drops the copy (runtime.c). */
/* 1 when token was handed over since the last report (h->mark). */
static int handed_has(const handed_t *h, uint64_t token) {
  size_t i;
  for (i = h ? h->mark : 0; h && i < h->n; i++)
    if (h->tokens[i] == token) return 1;
  return 0;
}

/* Room for k more tokens; 0 when out of memory. */
static int handed_room(handed_t *h, size_t k) {
  size_t cap = h->cap ? h->cap : 2 * HOLD_MAX_ITEMS;
  uint64_t *v;
  if (h->n + k <= h->cap) return 1;
  while (cap < h->n + k) cap *= 2;
  if (!(v = realloc(h->tokens, cap * sizeof *v))) return h->oom = 1, 0;
  h->tokens = v;
  h->cap = cap;
  return 1;
}

/* A turn's ack applied in the open transaction that asks to be reported (op->applied) and
** was not reported yet. */
static int applied_unreported(const dx_store_op_t *op) {
  return op->kind == DX_OP_ACK_ORCH && op->applied && op->hstate == 1 && op->rc == 0;
}

/* An ack the loop may learn of before the commit: of a turn this transaction handed over
** (since the last report), applied in it (op->applied asks for it). */
static int reportable(const dx_store_op_t *op, const handed_t *h) {
  return applied_unreported(op) && handed_has(h, op->token);
}

/* 1 when ops settle a turn of an instance f fetched again and the loop will not learn of that
** settlement before the new turn reaches it: the loop keeps a turn in its cache only then, so
** the new turn would replay the history instead of continuing the kept turn. h NULL (a
** database's held turn): every settlement counts; else an ack the loop is told of before the
** delivery (reportable), one it does not ask about (no cache) or a refused one do not. */
static int refetched_settled(const dx_store_op_t *ops, const dx_store_fetched_t *f,
                             const handed_t *h) {
  const dx_store_op_t *op;
  size_t i;
  for (op = ops; op; op = op->next) {
    const char *inst;
    if (op->kind != DX_OP_ACK_ORCH && op->kind != DX_OP_ABANDON_ORCH) continue;
    /* (a reported ack's memory is the loop's now: not read) */
    if (h && (op->kind != DX_OP_ACK_ORCH || op->hstate == 2 || !op->applied || op->rc != 0 ||
              reportable(op, h)))
      continue;
    inst = op->kind == DX_OP_ACK_ORCH ? op->ack->instance : op->instance;
    for (i = 0; inst && i < f->n_orch; i++)
      if (strcmp(inst, f->orch[i]->instance) == 0) return 1;
  }
  return 0;
}

/* 1 when ops hold an ack of a turn applied in the open transaction that the loop was not told
** of (a turn delivered with an earlier commit): the loop learns of it only with the commit, so
** the instance's next turn, fetched now, could not be handed over in this transaction; fetched
** by the next cycle it can (and the rounds go on there). */
static int unreported_turn_acks(const dx_store_op_t *ops) {
  for (; ops; ops = ops->next)
    if (applied_unreported(ops)) return 1;
  return 0;
}

/* 1 when ops carry this process's own client start (dx__eager_start). */
static int has_eager(const dx_store_op_t *ops) {
  for (; ops; ops = ops->next)
    if (ops->kind == DX_OP_ENQUEUE_ORCH && ops->eager) return 1;
  return 0;
}

/* A database cycle of single calls pays a round trip per op: only for a few results. */
#define PER_CALL_MAX_RESULTS 8

/* 1 when ops are only activity results (at most PER_CALL_MAX_RESULTS) and settle everything
** the loop holds: the loop is idle once they are applied, so it answers the turns they unblock
** at once. */
static int results_of_idle_loop(const dx_store_t *s, const dx_store_op_t *ops) {
  size_t k = 0;
  for (; ops; ops = ops->next, k++)
    if (ops->kind != DX_OP_ACK_WORK || !ops->item || k >= PER_CALL_MAX_RESULTS) return 0;
  return k > 0 && s->n_held == k;
}

/* The cycle makes one call per op and fetch (and so may hold its turns): always on a provider
** without run_cycle. On one with it (a database) only where someone waits for the turn and the
** idle loop answers in microseconds, so the row locks are kept that long only: a cycle
** carrying this process's own start (start, first turn and the activity it schedules cost one
** commit), or an idle loop's activity results (result and the turn it unblocks, one commit).
** Every other cycle stays one round trip. */
int dx__store_per_call(dx_store_t *s, const dx_store_op_t *ops) {
  return !dx__store_has_run_cycle(s->cfg.provider) ||
         (s->cfg.hold_ms > 0 && (has_eager(ops) || results_of_idle_loop(s, ops)));
}

/* Called only in a per_call cycle (one call per op and fetch): f's turns may go to the loop
** now (h: this transaction's handed items; NULL on a database). Everything the store holds is
** still in f: the loop holds nothing unsettled. */
int dx__store_can_hold(dx_store_t *s, const dx_store_op_t *ops, const dx_store_fetched_t *f,
                    const handed_t *h) {
  return s->cfg.hold_ms > 0 && f->n_orch > 0 && f->n_orch <= HOLD_MAX_ITEMS &&
         s->n_held == f->n_orch + f->n_work && !(h && h->oom) && !refetched_settled(ops, f, h);
}

/* f's work items may go to the loop now (a local store): a few activities, no turn waiting in
** f, the loop holding nothing unsettled, and no item whose fetch claimed its session (the
** claim rolls back with a lost transaction: the runtime must not take ownership before the
** commit). */
static int can_hold_work(dx_store_t *s, const dx_store_fetched_t *f, const handed_t *h) {
  size_t i;
  if (s->cfg.hold_ms <= 0 || !f->n_work || f->n_work > HOLD_MAX_ITEMS || f->n_orch ||
      s->n_held != f->n_work || h->oom)
    return 0;
  for (i = 0; i < f->n_work; i++)
    if (f->work[i].item.kind != DX_WI_ACT_EXECUTE || f->work[i].session_claimed) return 0;
  return 1;
}

/* (mu held) Queue fetched items for the loop (on_async takes them). */
void dx__store_push_fetched(dx_store_t *s, fetched_node_t *n) {
  n->next = NULL;
  if (s->fetched_tail) s->fetched_tail->next = n;
  else s->fetched = n;
  s->fetched_tail = n;
  s->n_fetched_items += n->f.n_orch + n->f.n_work;
}

/* (mu held) Tell the loop, before the items handed with this, of the acks in ops it may take
** back now (reportable: op->applied runs first in on_async). */
static void report_applied(dx_store_t *s, dx_store_op_t *ops, handed_t *h) {
  dx_store_op_t *op = h->seen ? h->seen->next : ops;
  for (; op; op = op->next) {
    h->seen = op;
    if (!reportable(op, h)) continue;
    op->hstate = 2;
    op->anext = NULL;
    if (s->applied_tail) s->applied_tail->anext = op;
    else s->applied = op;
    s->applied_tail = op;
  }
  h->mark = h->n; /* (the items handed with this report follow) */
}

/* Hand g's items (moved out of the cycle's fetch: its turns, activities or close items) to
** the loop now, with the acks of ops it may learn of first; g is then empty. 0 when the store
** is closing, or when the loop has not yet taken what it was handed before (it is busy: it
** would not answer in time); g is left as it was, its items are delivered with the commit. */
static int hand_over(dx_store_t *s, dx_store_op_t *ops, dx_store_fetched_t *g, handed_t *h) {
  fetched_node_t *n;
  size_t i;
  if (!handed_room(h, g->n_orch + g->n_work) || !(n = calloc(1, sizeof *n))) return 0;
  uv_mutex_lock(&s->mu);
  if (s->stopping || s->paused || !s->cfg.on_fetch || s->fetched) {
    uv_mutex_unlock(&s->mu);
    free(n);
    return 0;
  }
  report_applied(s, ops, h);
  for (i = 0; i < g->n_orch; i++) h->tokens[h->n++] = g->orch[i]->lock_token;
  for (i = 0; i < g->n_work; i++) h->tokens[h->n++] = g->work[i].lock_token;
  n->f = *g;
  dx__store_push_fetched(s, n);
  s->budget_orch -= (int)g->n_orch;
  s->budget_work -= (int)g->n_work;
  uv_mutex_unlock(&s->mu);
  dx__store_count_fetched(s, g);
  memset(g, 0, sizeof *g);
  uv_async_send(&s->async);
  return 1;
}

/* Move f's orchestration items (turns = 1) or work items (0) into g. */
static void take_items(dx_store_fetched_t *f, dx_store_fetched_t *g, int turns) {
  memset(g, 0, sizeof *g);
  g->at_ms = f->at_ms;
  if (turns) {
    g->orch = f->orch, g->n_orch = f->n_orch, g->cap_orch = f->cap_orch;
    f->orch = NULL, f->n_orch = f->cap_orch = 0;
  } else {
    g->work = f->work, g->n_work = f->n_work, g->cap_work = f->cap_work;
    f->work = NULL, f->n_work = f->cap_work = 0;
  }
}

/* Put back what take_items moved (the hand-over did not happen). */
static void untake_items(dx_store_fetched_t *f, dx_store_fetched_t *g, int turns) {
  if (turns) f->orch = g->orch, f->n_orch = g->n_orch, f->cap_orch = g->cap_orch;
  else f->work = g->work, f->n_work = g->n_work, f->cap_work = g->cap_work;
}

/* How many of the n tokens ops settle (ack or abandon). */
static size_t settled_count(const dx_store_op_t *ops, const uint64_t *tokens, size_t n) {
  size_t i, k = 0;
  for (i = 0; i < n; i++) {
    const dx_store_op_t *op;
    for (op = ops; op; op = op->next)
      if ((op->kind == DX_OP_ACK_ORCH && op->ack->lock_token == tokens[i]) ||
          ((op->kind == DX_OP_ABANDON_ORCH || op->kind == DX_OP_ACK_WORK ||
            op->kind == DX_OP_ABANDON_WORK) && op->token == tokens[i]))
        break;
    k += op != NULL;
  }
  return k;
}

/* Wait (at most cfg.hold_ms, and at most what is *left of the cycle's budget, ns, which the
** wait then uses up; stop and pause end it) until the loop settled the n items handed over
** last (their tokens), then take everything it queued, appended to *opsp (reported with the
** batch). *settled: how many of them it settled. */
static dx_store_op_t *await_answers(dx_store_t *s, dx_store_op_t **opsp, const handed_t *h,
                                    size_t n, uint64_t *left, size_t *settled) {
  const uint64_t *tokens = h->tokens + h->n - n, each = (uint64_t)s->cfg.hold_ms * 1000000u;
  dx_store_op_t *late, **tail = opsp;
  uint64_t t0 = uv_hrtime(), until = t0 + (each < *left ? each : *left), t = t0;
  uv_mutex_lock(&s->mu);
  while (!s->stopping && !s->paused && settled_count(s->pending, tokens, n) < n &&
         (t = uv_hrtime()) < until)
    uv_cond_timedwait(&s->cv, &s->mu, until - t);
  late = s->pending;
  s->pending = s->pending_tail = NULL;
  uv_mutex_unlock(&s->mu);
  t = uv_hrtime() - t0;
  *left = t < *left ? *left - t : 0;
  if (settled) *settled = settled_count(late, tokens, n);
  while (*tail) tail = &(*tail)->next;
  *tail = late;
  return late;
}

/* One held round inside the open transaction: hand f's turns (turns = 1) or its work items
** over, wait for the loop's answers and apply them (a database's held turn: *latep gets them
** for the cycle's closing run_cycle instead). *settled: how many of the handed items the loop
** settled (0 also when nothing was handed over: the items stay in f, for the commit). */
int dx__store_hold_round(dx_store_t *s, dx_store_op_t **opsp, dx_store_fetched_t *f, handed_t *h,
                      int turns, uint64_t *left, dx_store_op_t **latep, size_t *settled,
                      int *failed, int *durable, dx_error_t *err) {
  dx_store_fetched_t g;
  dx_store_op_t *late;
  size_t k;
  int64_t now;
  *settled = 0;
  take_items(f, &g, turns);
  k = g.n_orch + g.n_work;
  if (!hand_over(s, *opsp, &g, h)) {
    untake_items(f, &g, turns);
    return 0;
  }
  late = await_answers(s, opsp, h, k, left, settled);
  now = dx__store_now_ms(s);
  f->at_ms = now; /* (f is empty: what it fetches next is fetched now) */
  if (latep) {
    *latep = late;
    return 0;
  }
  return dx__store_apply_all(s, late, now, failed, durable, err);
}

/* 1 when f holds a close item and another item of the same session (it runs on the loop:
** the close then waits for it there, as usual). */
static int close_shares_session(const dx_store_fetched_t *f) {
  size_t i, j;
  for (i = 0; i < f->n_work; i++) {
    const dx_work_item_t *c = &f->work[i].item;
    if (c->kind != DX_WI_SESSION_CLOSE || !c->session_id) continue;
    for (j = 0; j < f->n_work; j++)
      if (j != i && f->work[j].item.session_id &&
          strcmp(f->work[j].item.session_id, c->session_id) == 0)
        return 1;
  }
  return 0;
}

/* The loop's budgets now (the loop tops them up as it settles what it was handed). */
static void budgets_now(dx_store_t *s, int *bo, int *bw) {
  uv_mutex_lock(&s->mu);
  *bo = s->fetching ? s->budget_orch : 0;
  *bw = s->fetching ? s->budget_work : 0;
  uv_mutex_unlock(&s->mu);
}

/* Close items (ctx:close_session) this cycle fetched go to the loop before the commit, as
** turns do (only while the loop holds nothing but this cycle's items): a loop running none of
** the session's activities releases it at once, and the transaction then fetches again, so a
** worker at its session capacity claims the next session in the same commit instead of a
** cycle later. A close item is no activity. When the transaction is then lost, the release is
** lost with it (the lease lapses or the close comes back). */
static int hold_closes(dx_store_t *s, dx_store_op_t **opsp, dx_store_fetched_t *f, handed_t *h,
                       uint64_t *left, int *failed, int *durable, dx_error_t *err) {
  dx_store_fetched_t g;
  dx_store_op_t *late;
  size_t i, k = 0, nc = 0;
  int64_t now;
  int rc, bo, bw;
  for (i = 0; i < f->n_work; i++) nc += f->work[i].item.kind == DX_WI_SESSION_CLOSE;
  if (!nc || s->cfg.hold_ms <= 0 || nc > HOLD_MAX_ITEMS || h->oom ||
      s->n_held != f->n_orch + f->n_work || close_shares_session(f))
    return 0;
  memset(&g, 0, sizeof g);
  if (!(g.work = calloc(nc, sizeof *g.work))) return 0;
  for (i = 0; i < f->n_work; i++)
    if (f->work[i].item.kind == DX_WI_SESSION_CLOSE) g.work[g.n_work++] = f->work[i];
  g.cap_work = nc;
  g.at_ms = f->at_ms;
  if (!hand_over(s, *opsp, &g, h)) {
    free(g.work);
    return 0;
  }
  for (i = 0; i < f->n_work; i++) /* f keeps the others, in order */
    if (f->work[i].item.kind != DX_WI_SESSION_CLOSE) f->work[k++] = f->work[i];
  memset(f->work + k, 0, (f->n_work - k) * sizeof *f->work);
  f->n_work = k;
  late = await_answers(s, opsp, h, nc, left, NULL);
  now = dx__store_now_ms(s); /* (f->at_ms stays: the earlier of its items' fetch times) */
  rc = dx__store_apply_all(s, late, now, failed, durable, err);
  budgets_now(s, &bo, &bw);
  if (!rc && dx__store_fetch_into(s, now, 0, bw, f)) *failed |= CALL_FETCH;
  return rc;
}

/* Orchestration (turns = 1) or work items into f, up to the loop's budget now (at most
** *cap of them: the cycle's own budget, for its first fetches), and the fetch metric's time
** (*t_fetch, ns). */
static void refetch(dx_store_t *s, dx_store_fetched_t *f, int turns, const int *cap,
                    int *failed, uint64_t *t_fetch) {
  int bo, bw;
  uint64_t t0 = uv_hrtime();
  if (!f->n_orch && !f->n_work) f->at_ms = dx__store_now_ms(s);
  budgets_now(s, &bo, &bw);
  if (cap && bo > cap[0]) bo = cap[0];
  if (cap && bw > cap[1]) bw = cap[1];
  if (dx__store_fetch_into(s, f->at_ms, turns ? bo : 0, turns ? 0 : bw, f)) *failed |= CALL_FETCH;
  *t_fetch += uv_hrtime() - t0;
}

/* A local store's cycle after its ops were applied: fetch, and hold rounds while the loop
** answers (see above). bo/bw: the cycle's budgets (0 and 0: it fetches nothing). */
int dx__store_held_rounds(dx_store_t *s, dx_store_op_t **opsp, int bo, int bw,
                       dx_store_fetched_t *f, handed_t *h, int *failed, int *durable,
                       dx_error_t *err) {
  uint64_t t_fetch = 0, left = HOLD_BUDGET_HOLDS * (uint64_t)s->cfg.hold_ms * 1000000u;
  const int cap[2] = {bo, bw};
  size_t settled;
  int rc = 0, first = 1;
  if (bo <= 0 && bw <= 0) return 0;
  /* Orchestrations first, then activities, after every ack the transaction holds (a provider
  ** may skip work it found none of earlier in the batch: sessions) */
  refetch(s, f, 1, cap, failed, &t_fetch);
  for (;;) {
    /* rounds of turns: each time the turns their acks made ready (other instances') */
    while (left && dx__store_can_hold(s, *opsp, f, h)) {
      rc = dx__store_hold_round(s, opsp, f, h, 1, &left, NULL, &settled, failed, durable, err);
      if (rc || !settled) break;
      refetch(s, f, 1, NULL, failed, &t_fetch);
    }
    if (rc) break;
    refetch(s, f, 0, first ? cap : NULL, failed, &t_fetch);
    first = 0;
    if (left && (rc = hold_closes(s, opsp, f, h, &left, failed, durable, err))) break;
    /* a round of activities, then the turns their results woke */
    if (!s->cfg.hold_work || !left || !can_hold_work(s, f, h)) break;
    rc = dx__store_hold_round(s, opsp, f, h, 0, &left, NULL, &settled, failed, durable, err);
    if (rc || !settled || unreported_turn_acks(*opsp)) break;
    refetch(s, f, 1, NULL, failed, &t_fetch);
  }
  if (!rc) dx__store_observe_fetch(s, uv_hrtime() - t_fetch, bo, bw);
  return rc;
}

/* The op list's applied ops (hstate 1) run again if the transaction is retried; those the loop
** was told of (2) do not (op_apply). */
void dx__store_ops_lost(dx_store_op_t *ops) {
  for (; ops; ops = ops->next)
    if (ops->hstate == 1) ops->hstate = 0;
}

void dx__store_unhold_handed(dx_store_t *s, handed_t *h) {
  size_t i;
  for (i = 0; i < h->n; i++) dx__store_unhold(s, h->tokens[i]);
}

