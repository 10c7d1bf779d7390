/*
** store_rounds.c -- held rounds (see store_int.h): a local store's cycle hands the turns and
** activities it fetched to the idle loop before its commit and applies their answers in the
** same transaction; what is left goes to the loop while the transaction commits (the lap).
*/
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "util.h"
#include "store_int.h"

/* {===== turns and activities answered inside their fetch's transaction =====} */

/* A provider without run_cycle makes its calls without round trips (a local store), so a
** cycle's transaction can stay open a moment for the items it fetched (held rounds): the
** turns go to the loop before the commit and their acks (with whatever else the loop queued
** meanwhile) join the transaction; the activities those turns scheduled then go to the loop
** too, their results join it, the turns they unblock are fetched and handed over, and so on;
** the transaction commits once at the end. A lone orchestration's steps (result, turn, next
** activity) then share one commit, and a start costs none of its own. Bounds: only a few items
** out at once (HOLD_MAX_ITEMS), only while the loop holds nothing but the rounds' items (it
** answers at once: a big batch or a busy loop commits at once as before, because a hold
** waiting on a busy loop would keep other processes' writers out for nothing), each wait at
** most cfg.hold_ms, all of a cycle's waits at most HOLD_BUDGET_HOLDS times that, hand-overs
** for at most HOLD_SPAN_HOLDS times that, and a wait that brought no answer ends them. The
** loop and this thread work at the same time (hand_over: the pipeline). A big delivery's
** answers are not held items: a cycle absorbs them (absorb_delivery, under the same bounds)
** and commits them together.
**
** Activities thus start before the turn that scheduled them is durable (lead's decision, issue
** 12; local stores only). Activities run at least once anyway: if the transaction is lost (an
** error, a crash), the turn comes back, runs again from the same history and schedules the same
** activity under the same ids (instance, execution, activity id: the idempotency key), which
** runs again. So does an activity whose fetch claimed its session in this transaction (it used
** to wait for the commit: at capacity a worker's sessions end and the next ones are claimed
** together, so each such wave paid a commit nothing overlapped). If the transaction is lost,
** the claim rolls back with it and the runtime holds a session the store does not give it: no
** other activity of the session comes to it (the store routes by owner), the one it runs is
** refused at its settlement (its lock rolled back), and its hold ends as a lapsed lease's does,
** as "lost": when the store claims the session for it again (sessions.c on_fetch: a claim of a
** session held already begins a new hold), or at the next renewal, which does not list it.
** The loop keeps a turn in its orchestration cache once its ack was applied in the open
** transaction (op->applied), so the instance's next turn in the same transaction continues it;
** if the transaction is lost the ack is refused and the loop drops the copy (runtime.c). */
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

/* An ack the loop may learn of before the commit: of a turn this transaction handed over,
** applied in it (op->applied asks for it). */
static int reportable(const dx_store_op_t *op) {
  return applied_unreported(op) && op->handed;
}

/* The instance whose turn op settles when the loop will not learn of that settlement before
** a turn of the instance fetched now reaches it, else NULL: the loop keeps a turn in its cache
** only then, so the new turn would replay the history instead of continuing the kept turn. h
** NULL (a database's held turn): every settlement counts; else an ack the loop is told of
** before the delivery (reportable), one it does not ask about (no cache) or a refused one do
** not. */
static const char *unseen_settlement(const dx_store_op_t *op, const handed_t *h) {
  if (op->kind != DX_OP_ACK_ORCH && op->kind != DX_OP_ABANDON_ORCH) return NULL;
  /* (a reported ack's memory is the loop's now: not read) */
  if (h && (op->kind != DX_OP_ACK_ORCH || op->hstate == 2 || !op->applied || op->rc != 0 ||
            reportable(op)))
    return NULL;
  return op->kind == DX_OP_ACK_ORCH ? op->ack->instance : op->instance;
}

/* 1 when ops hold an unseen settlement of a turn of inst. */
static int settled_unseen(const dx_store_op_t *ops, const char *inst, const handed_t *h) {
  for (; ops; ops = ops->next) {
    const char *oi = unseen_settlement(ops, h);
    if (oi && strcmp(oi, inst) == 0) return 1;
  }
  return 0;
}

/* 1 when a turn f fetched is one settled_unseen says must wait for the commit. */
static int refetched_settled(const dx_store_op_t *ops, const dx_store_fetched_t *f,
                             const handed_t *h) {
  size_t i;
  for (i = 0; i < f->n_orch; i++)
    if (settled_unseen(ops, f->orch[i]->instance, h)) return 1;
  return 0;
}

/* 1 when ops hold an ack of a turn applied in the open transaction that the loop was not told
** of (a turn delivered with an earlier commit): the loop learns of it only with the commit, so
** the instance's next turn, fetched now, could not be handed over in this transaction; fetched
** by the next cycle it can (and the rounds go on there). (Acks of turns handed over in this
** transaction are reported with the next hand-over.) */
static int unreported_turn_acks(const dx_store_op_t *ops) {
  for (; ops; ops = ops->next)
    if (applied_unreported(ops) && !ops->handed) return 1;
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

/* The loop holds nothing but f's items and those this transaction handed over that are not
** settled yet (it runs only the rounds' items: it answers at once). */
static int loop_holds_ours(const dx_store_t *s, const dx_store_fetched_t *f) {
  return s->n_held == f->n_orch + f->n_work + s->n_handed;
}

/* Called only in a per_call cycle (one call per op and fetch): f's turns may go to the loop
** now (h: this transaction's handed items; NULL on a database). */
int dx__store_can_hold(dx_store_t *s, const dx_store_op_t *ops, const dx_store_fetched_t *f,
                    const handed_t *h) {
  return s->cfg.hold_ms > 0 && f->n_orch > 0 && f->n_orch + s->n_handed <= HOLD_MAX_ITEMS &&
         loop_holds_ours(s, f) && !(h && h->oom) && !refetched_settled(ops, f, h);
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

/* Which of f's work items a round hands over: close items (closes = 1), or activities (0),
** also one whose fetch claimed its session in this transaction (see above: a lost
** transaction's claim ends the runtime's hold as a lapsed lease does). */
static int pick_work(const dx_store_fetched_t *f, size_t i, int closes) {
  const dx_work_fetch_t *w = &f->work[i];
  if (closes) return w->item.kind == DX_WI_SESSION_CLOSE;
  return w->item.kind == DX_WI_ACT_EXECUTE;
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
    if (!reportable(op)) continue;
    op->hstate = 2;
    op->anext = NULL;
    if (s->applied_tail) s->applied_tail->anext = op;
    else s->applied = op;
    s->applied_tail = op;
  }
}

/* (mu held) Every node the loop has not taken yet is a held round's (the loop is not busy
** with a delivery of its own: it takes them together and answers at once). */
int dx__store_held_only(const dx_store_t *s) {
  const fetched_node_t *n;
  for (n = s->fetched; n; n = n->next)
    if (!n->held) return 0;
  return 1;
}

/* A hand-over of at least this many items, with nothing else out, goes as two nodes (below). */
#define SPLIT_MIN_ITEMS 4

/* Move the second half of g's items (it holds one kind) into a new node; NULL when out of
** memory (g is then left whole). */
static fetched_node_t *split_off(dx_store_fetched_t *g) {
  fetched_node_t *n = calloc(1, sizeof *n);
  size_t k;
  if (!n) return NULL;
  n->f.at_ms = g->at_ms;
  if (g->n_orch) {
    k = g->n_orch / 2;
    if (!(n->f.orch = malloc((g->n_orch - k) * sizeof *n->f.orch))) return free(n), NULL;
    memcpy(n->f.orch, g->orch + k, (g->n_orch - k) * sizeof *n->f.orch);
    n->f.n_orch = n->f.cap_orch = g->n_orch - k;
    g->n_orch = k;
  } else {
    k = g->n_work / 2;
    if (!(n->f.work = malloc((g->n_work - k) * sizeof *n->f.work))) return free(n), NULL;
    memcpy(n->f.work, g->work + k, (g->n_work - k) * sizeof *n->f.work);
    n->f.n_work = n->f.cap_work = g->n_work - k;
    g->n_work = k;
  }
  return n;
}

/* Hand g's items (moved out of the cycle's fetch: its turns, activities or close items) to
** the loop now, with the acks of ops it may learn of first; g is then empty. 0 when the store
** is closing, or when the loop has not yet taken a delivery of its own (it is busy: it would
** not answer in time); g is left as it was, its items are delivered with the commit.
**
** The pipeline: the loop and this thread work at the same time. A hand-over of several items
** while nothing else is out goes as two nodes; the loop runs them one after the other in one
** wake-up and says when it has run each (held_done), so this thread applies the first node's
** answers, fetches what they made ready and hands it over while the loop runs the second;
** then it applies the second's while the loop runs that, and so on. */
static int hand_over(dx_store_t *s, dx_store_op_t *ops, dx_store_fetched_t *g, handed_t *h,
                     int split) {
  dx_store_fetched_t all = *g;
  fetched_node_t *n, *n2 = NULL;
  size_t i, k = g->n_orch + g->n_work;
  int wake;
  if (!handed_room(h, k) || !(n = calloc(1, sizeof *n))) return 0;
  for (i = 0; i < g->n_orch; i++) h->tokens[h->n + i] = g->orch[i]->lock_token;
  for (i = 0; i < g->n_work; i++) h->tokens[h->n + g->n_orch + i] = g->work[i].lock_token;
  /* (outside mu: the loop queues its answers under it) */
  if (split && k >= SPLIT_MIN_ITEMS && !s->n_handed) n2 = split_off(g);
  uv_mutex_lock(&s->mu);
  if (s->stopping || s->paused || !s->cfg.on_fetch || !dx__store_held_only(s)) {
    uv_mutex_unlock(&s->mu);
    free(n);
    if (n2) { /* g's arrays still hold the second half */
      g->n_orch += n2->f.n_orch;
      g->n_work += n2->f.n_work;
      free(n2->f.orch);
      free(n2->f.work);
      free(n2);
    }
    return 0;
  }
  report_applied(s, ops, h);
  if (!h->n) h->done_seen = s->held_done; /* (the transaction's first hand-over) */
  h->n += k;
  n->f = *g;
  n->held = 1;
  dx__store_push_fetched(s, n);
  if (n2) {
    n2->held = 1;
    dx__store_push_fetched(s, n2);
  }
  s->budget_orch -= (int)all.n_orch;
  s->budget_work -= (int)all.n_work;
  wake = !s->in_async; /* (else the loop takes it before it returns: on_async) */
  uv_mutex_unlock(&s->mu);
  for (i = h->n - k; i < h->n; i++) dx__store_mark_handed(s, h->tokens[i]);
  dx__store_count_fetched(s, &all);
  memset(g, 0, sizeof *g);
  if (wake) uv_async_send(&s->async);
  return 1;
}

/* Hand f's turns over (all of them). */
static int hand_turns(dx_store_t *s, dx_store_op_t *ops, dx_store_fetched_t *f, handed_t *h) {
  dx_store_fetched_t g;
  memset(&g, 0, sizeof g);
  g.at_ms = f->at_ms;
  g.orch = f->orch, g.n_orch = f->n_orch, g.cap_orch = f->cap_orch;
  if (!hand_over(s, ops, &g, h, 1)) return 0;
  f->orch = NULL, f->n_orch = f->cap_orch = 0;
  return 1;
}

/* Hand f's close items (closes = 1) or the activities pick_work allows over; f keeps the
** others, in order. Only while the loop holds nothing but the rounds' items, at most
** HOLD_MAX_ITEMS out at once. */
static int hand_work(dx_store_t *s, dx_store_op_t *ops, dx_store_fetched_t *f, handed_t *h,
                     int closes) {
  dx_store_fetched_t g;
  size_t i, k = 0, n = 0;
  if (s->cfg.hold_ms <= 0 || !f->n_work || (!closes && f->n_orch) || h->oom ||
      !loop_holds_ours(s, f))
    return 0;
  /* (pick_work may scan f: stop counting past the limit) */
  for (i = 0; i < f->n_work && n + s->n_handed <= HOLD_MAX_ITEMS; i++)
    n += pick_work(f, i, closes);
  if (!n || n + s->n_handed > HOLD_MAX_ITEMS || (closes && close_shares_session(f))) return 0;
  memset(&g, 0, sizeof g);
  if (!(g.work = malloc(n * sizeof *g.work))) return 0;
  for (i = 0; i < f->n_work; i++)
    if (pick_work(f, i, closes)) g.work[g.n_work++] = f->work[i];
  g.cap_work = n;
  g.at_ms = f->at_ms;
  if (!hand_over(s, ops, &g, h, 1)) {
    free(g.work);
    return 0;
  }
  for (i = 0; i < f->n_work; i++)
    if (!pick_work(f, i, closes)) f->work[k++] = f->work[i];
  memset(f->work + k, 0, (f->n_work - k) * sizeof *f->work);
  f->n_work = k;
  return 1;
}

/* {===== the lap: what the loop runs while the transaction commits =====} */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* The hashes of the instances with an unseen settlement in ops (settled_unseen), sorted, in
** *out (NULL when there is none); -1 when out of memory. */
static long unseen_hashes(const dx_store_op_t *ops, const handed_t *h, uint64_t **out) {
  const dx_store_op_t *op;
  size_t n = 0;
  *out = NULL;
  for (op = ops; op; op = op->next) n += unseen_settlement(op, h) != NULL;
  if (!n) return 0;
  if (!(*out = malloc(n * sizeof **out))) return -1;
  n = 0;
  for (op = ops; op; op = op->next) {
    const char *inst = unseen_settlement(op, h);
    if (inst) (*out)[n++] = dx__fnv1a64(DX_FNV1A64_BASIS, inst);
  }
  qsort(*out, n, sizeof **out, cmp_u64);
  return (long)n;
}

/* 1 when the lap may hand turn `it` over: no unseen settlement of its instance in ops (the
** hash table v of n first, then the ops themselves on a match). */
static int lap_turn(const dx_store_op_t *ops, const handed_t *h, const uint64_t *v, long n,
                    const dx_orch_item_t *it) {
  uint64_t k;
  if (!n) return 1;
  k = dx__fnv1a64(DX_FNV1A64_BASIS, it->instance);
  return !bsearch(&k, v, (size_t)n, sizeof *v, cmp_u64) || !settled_unseen(ops, it->instance, h);
}

/* 1 when the lap may hand f's work item i over: an activity pick_work allows (with hold_work),
** or a close item whose session has no other item in f (closes_ok). */
static int lap_work(const dx_store_t *s, const dx_store_fetched_t *f, size_t i, int closes_ok) {
  return pick_work(f, i, 1) ? closes_ok : s->cfg.hold_work && pick_work(f, i, 0);
}

/* The rounds ended and the transaction is about to commit (~1 ms: page writes and a sync):
** hand the loop what f still holds that the rounds' own rules would hand over, now, and wait
** for none of it: the loop runs it while this thread commits, and its answers join the next
** transaction, as the late answers of held items do. No bound on the count nor on what else
** the loop holds (nothing waits for the answers). Left in f for the commit, as in the rounds:
** a close beside another item of its session, a turn of an instance whose earlier turn's settlement the loop
** learns of only with the commit (unseen_settlement: its cache could not continue it), and
** everything when the loop has not taken a delivery of its own. If the transaction is lost,
** the items' settlements are refused (their locks rolled back) and the retried batch fetches
** them again, as for any handed item. */
static void hand_lap(dx_store_t *s, dx_store_op_t *ops, dx_store_fetched_t *f, handed_t *h) {
  dx_store_fetched_t g;
  uint64_t *v = NULL;
  char *go = NULL; /* per item of f (turns, then work items): 1 = it goes */
  long nv;
  size_t i, k, no = f->n_orch, n = f->n_orch + f->n_work;
  int closes_ok;
  if (s->cfg.hold_ms <= 0 || h->oom || !n) return;
  memset(&g, 0, sizeof g);
  if ((nv = unseen_hashes(ops, h, &v)) < 0 || !(go = malloc(n))) goto done;
  /* (decided once, before the loop owns the items that go) */
  closes_ok = !close_shares_session(f);
  for (i = 0; i < no; i++) g.n_orch += go[i] = (char)lap_turn(ops, h, v, nv, f->orch[i]);
  for (i = 0; i < f->n_work; i++)
    g.n_work += go[no + i] = (char)lap_work(s, f, i, closes_ok);
  if ((!g.n_orch && !g.n_work) ||
      (g.n_orch && !(g.orch = malloc(g.n_orch * sizeof *g.orch))) ||
      (g.n_work && !(g.work = malloc(g.n_work * sizeof *g.work))))
    goto done;
  g.cap_orch = g.n_orch;
  g.cap_work = g.n_work;
  g.at_ms = f->at_ms;
  for (i = k = 0; i < no; i++)
    if (go[i]) g.orch[k++] = f->orch[i];
  for (i = k = 0; i < f->n_work; i++)
    if (go[no + i]) g.work[k++] = f->work[i];
  if (!hand_over(s, ops, &g, h, 0)) goto done;
  /* f keeps the others, in order */
  for (i = k = 0; i < no; i++)
    if (!go[i]) f->orch[k++] = f->orch[i];
  f->n_orch = k;
  for (i = k = 0; i < f->n_work; i++)
    if (!go[no + i]) f->work[k++] = f->work[i];
  if (k < f->n_work) memset(f->work + k, 0, (f->n_work - k) * sizeof *f->work);
  f->n_work = k;
  g.orch = NULL, g.work = NULL; /* (the node's now) */
done:
  free(g.orch);
  free(g.work);
  free(go);
  free(v);
}

/* The lock token of the item op settles (0: it settles none; before op_apply ran). */
static uint64_t settled_token(const dx_store_op_t *op) {
  if (!dx__store_settles(op)) return 0;
  return op->kind == DX_OP_ACK_ORCH ? op->ack->lock_token : op->token;
}

/* How many of the ops settle an item handed over in this transaction. */
static size_t handed_settled(dx_store_t *s, const dx_store_op_t *ops) {
  size_t k = 0;
  for (; ops; ops = ops->next)
    k += dx__store_settles(ops) && dx__store_is_handed(s, settled_token(ops));
  return k;
}

/* Wait (at most cfg.hold_ms, and at most what is *left of the cycle's budget, ns, which the
** wait then uses up; stop and pause end it) until the loop has run a node handed over (or
** settled a handed item later, as an activity that completes on its own), then take
** everything it queued, appended to *opsp (reported with the batch). *settled: how many
** handed items those ops settle. */
static dx_store_op_t *await_answers(dx_store_t *s, dx_store_op_t **opsp, handed_t *h,
                                    uint64_t *left, size_t *settled) {
  const uint64_t each = (uint64_t)s->cfg.hold_ms * 1000000u;
  dx_store_op_t *late = NULL, **ltail = &late, **tail = opsp;
  uint64_t t0 = uv_hrtime(), until = t0 + (each < *left ? each : *left), t = t0;
  uv_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stopping && !s->paused && s->held_done == h->done_seen &&
           (s->delivering || !handed_settled(s, s->pending)) && (t = uv_hrtime()) < until)
      uv_cond_timedwait(&s->cv, &s->mu, until - t);
    *ltail = s->pending;
    if (s->held_done != h->done_seen && s->node_end) {
      /* the answers of the nodes the loop has run; those of the one it runs now follow with
      ** it (taken with a part of them, the items they make ready would go over in pieces) */
      s->pending = s->node_end->next;
      s->node_end->next = NULL;
      if (!s->pending) s->pending_tail = NULL;
    } else {
      s->pending = s->pending_tail = NULL;
    }
    s->node_end = NULL;
    h->done_seen = s->held_done;
    while (*ltail) ltail = &(*ltail)->next;
    *settled = handed_settled(s, late);
    /* a node the loop ran without an answer (its activities complete later, on their own):
    ** wait on for them, as long as a wait may last */
    if (*settled || s->stopping || s->paused || uv_hrtime() >= until) break;
  }
  uv_mutex_unlock(&s->mu);
  t = uv_hrtime() - t0;
  *left = t < *left ? *left - t : 0;
  while (*tail) tail = &(*tail)->next;
  *tail = late;
  return late;
}

/* A database's held turn inside the open transaction: hand f's turns over, wait for the
** loop's answers and give them in *latep, for the cycle's closing run_cycle. 0 when nothing
** was handed over (the items stay in f, for the commit). */
int dx__store_hold_round(dx_store_t *s, dx_store_op_t **opsp, dx_store_fetched_t *f, handed_t *h,
                         uint64_t *left, dx_store_op_t **latep) {
  size_t settled;
  if (!hand_turns(s, *opsp, f, h)) return 0;
  *latep = await_answers(s, opsp, h, left, &settled);
  f->at_ms = dx__store_now_ms(s); /* (f is empty: what it fetches next is fetched now) */
  return 1;
}

/* The loop's budgets now (the loop tops them up as it settles what it was handed). */
static void budgets_now(dx_store_t *s, int *bo, int *bw) {
  uv_mutex_lock(&s->mu);
  *bo = s->fetching ? s->budget_orch : 0;
  *bw = s->fetching ? s->budget_work : 0;
  uv_mutex_unlock(&s->mu);
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

/* 1 when applying ops may make work ready: anything but activity results (a turn's ack
** schedules activities, a release lets this worker claim again, an abandon hands one back). */
static int readies_work(const dx_store_op_t *ops) {
  for (; ops; ops = ops->next)
    if (ops->kind != DX_OP_ACK_WORK) return 1;
  return 0;
}

/* A big delivery's answers in one transaction (absorb). While the loop takes a delivery of
** more than BURST_MAX_ITEMS items (s->big: 200 turns of a fanout, the activities they
** schedule), a cycle that began with its first answers used to commit them at once (~1 ms for
** 5-7 acks), then the next ones, and so on: ~10 commits for what the loop answers in a few
** milliseconds. Now the cycle keeps its transaction open and applies the answers as they come
** (the loop wakes it every ABSORB_WAKE_EVERY of them) until the loop has taken the whole
** delivery; then it fetches what they made ready and hands it to the loop before the commit
** (the lap), so the loop runs that while this thread commits: the pipeline stays, with one
** commit per delivery instead of one per handful of answers. Bounds as for the rounds, and
** shared with them: each wait at most hold_ms, a wait that brought no answer ends it (a loop
** busy with a long turn), all waits at most *left, and nothing past `until` (the span). No
** answer is reported before the commit (they are ordinary ops: done after it). Returns the
** apply's code; *took: 1 when it applied anything. */
static int absorb_delivery(dx_store_t *s, dx_store_op_t **opsp, uint64_t *left, uint64_t until,
                           int *took, int *failed, int *durable, dx_error_t *err) {
  const uint64_t each = (uint64_t)s->cfg.hold_ms * 1000000u;
  dx_store_op_t **tail = opsp;
  int rc = 0;
  *took = 0;
  while (*tail) tail = &(*tail)->next;
  while (!rc && *left) {
    dx_store_op_t *late;
    uint64_t t0 = uv_hrtime(), t = t0, end = t0 + (each < *left ? each : *left);
    int big;
    if (end > until) end = until;
    uv_mutex_lock(&s->mu);
    if (!s->big) { /* (looked at under mu: only while the loop takes a big delivery) */
      uv_mutex_unlock(&s->mu);
      break;
    }
    s->absorbing = 1; /* (the loop now wakes this thread after ABSORB_WAKE_EVERY answers) */
    s->big_ops = 0;
    while (s->big && !s->stopping && !s->paused && s->big_ops < ABSORB_WAKE_EVERY &&
           (t = uv_hrtime()) < end)
      uv_cond_timedwait(&s->cv, &s->mu, end - t);
    big = s->big && !s->stopping && !s->paused;
    s->absorbing = 0;
    late = s->pending;
    s->pending = s->pending_tail = s->node_end = NULL;
    uv_mutex_unlock(&s->mu);
    t = uv_hrtime() - t0;
    *left = t < *left ? *left - t : 0;
    if (late) {
      *took = 1;
      *tail = late;
      while (*tail) tail = &(*tail)->next;
      rc = dx__store_apply_all(s, late, dx__store_now_ms(s), failed, durable, err);
    }
    if (!big || !late || uv_hrtime() >= until) break;
  }
  return rc;
}

/* A local store's cycle after its ops were applied: fetch, and hand over while the loop
** answers (see above). Each pass hands over what is ready (turns first; then, once f holds no
** turn, close items and activities), waits for the answers to one node, applies them and
** fetches what they made ready (turns; activities after anything but activity results),
** until nothing is out, the budget is spent or a wait brought no answer. Close items: a loop
** running none of the session's activities releases it at once, and the work fetch that
** follows claims the next session in the same commit (a worker at its session capacity);
** if the transaction is lost the release is lost with it (the lease lapses or the close comes
** back). bo/bw: the cycle's budgets (0 and 0: it fetches nothing). */
int dx__store_held_rounds(dx_store_t *s, dx_store_op_t **opsp, int bo, int bw,
                       dx_store_fetched_t *f, handed_t *h, int *failed, int *durable,
                       dx_error_t *err) {
  uint64_t t_fetch = 0, left = HOLD_BUDGET_HOLDS * (uint64_t)s->cfg.hold_ms * 1000000u,
           until = uv_hrtime() + HOLD_SPAN_HOLDS * (uint64_t)s->cfg.hold_ms * 1000000u;
  int cap[2] = {bo, bw};
  int rc = 0, first = 1, want_work = 1, answered = 0, wait_turns = 0, took = 0;
  if (s->cfg.hold_ms > 0) {
    rc = absorb_delivery(s, opsp, &left, until, &took, failed, durable, err);
    if (rc) return rc;
    if (took) budgets_now(s, &cap[0], &cap[1]); /* (the answers topped the budgets up) */
    bo = cap[0], bw = cap[1];
  }
  if (bo <= 0 && bw <= 0) return 0;
  /* Orchestrations first, then activities, after every ack the transaction holds (a provider
  ** may skip work it found none of earlier in the batch: sessions) */
  refetch(s, f, 1, cap, failed, &t_fetch);
  for (;;) {
    dx_store_op_t *late;
    size_t settled;
    if (left && dx__store_can_hold(s, *opsp, f, h)) hand_turns(s, *opsp, f, h);
    /* Work is fetched even while f holds turns it cannot hand over (they wait for the commit;
    ** the activities ready now are this worker's if it fetches them in this batch). The first
    ** work fetch waits for the first turns' answers, as the turns' acks may schedule it: a
    ** fetch finding no work may keep a provider from claiming sessions for the rest of the
    ** batch. */
    if (want_work && !(s->n_handed && !answered)) {
      refetch(s, f, 0, first ? cap : NULL, failed, &t_fetch);
      first = 0;
    }
    if (left) {
      hand_work(s, *opsp, f, h, 1);
      if (s->cfg.hold_work) hand_work(s, *opsp, f, h, 0);
    }
    if (!left || !s->n_handed) break; /* nothing out: the rounds end */
    late = await_answers(s, opsp, h, &left, &settled);
    answered = 1;
    want_work = readies_work(late);
    rc = dx__store_apply_all(s, late, dx__store_now_ms(s), failed, durable, err);
    if (rc || !settled) break;
    if (uv_hrtime() >= until) left = 0; /* hands nothing more over: the answers out come later */
    /* (once an unreported turn ack is applied, turns wait for the next cycle; activities
    ** go on: their fetch still joins this commit) */
    if (!wait_turns && !(wait_turns = unreported_turn_acks(*opsp)))
      refetch(s, f, 1, NULL, failed, &t_fetch);
  }
  if (!rc) {
    dx__store_observe_fetch(s, uv_hrtime() - t_fetch, bo, bw);
    hand_lap(s, *opsp, f, h);
  }
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

