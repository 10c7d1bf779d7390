/*
** store.c -- the store thread (see store.h).
**
** Why a thread: a durable commit waits for fsync, which must not stall Lua work on the loop.
** Why one transaction per cycle: a durable commit costs a flush (and a round trip on a
** database); batching every ack and fetch of a cycle into one commit turns N flushes into one
** (group commit), which is where throughput comes from.
** When a batch fails: DX_ERETRY (deadlock, serialization failure, lost connection) retries it
** whole, a bounded number of times with backoff; any other failure of the whole batch applies
** each operation in a transaction of its own, so one bad operation fails alone
** (cycle_retrying, cycle_isolate; the contract is in duroxide/provider.h). Cycles that still
** fail back off (10 ms doubling to 1 s); a store that begin or commit finds damaged is
** reported once to the loop (cfg.on_fatal).
** Why this thread renews locks: turns and activity code run on the loop one after another,
** so a long turn (or an activity that computes without yielding) blocks the loop and every
** timer on it, while the other items of its batch wait their turn. The store thread holds
** every fetched item until its settlement is applied and renews its lock on the monotonic
** clock: orchestration locks always, activity locks only when the loop's own renewal (which
** also detects cancellation) is late. So neither the long item nor the innocent ones queued
** behind it lose their lock.
*/
#include <stdlib.h>
#include <string.h>

#include "heap.h"
#include "log.h"
#include "metrics.h"
#include "store.h"
#include "store_int.h"
#include "util.h"

int64_t dx__store_now_ms(dx_store_t *s) {
  return s->cfg.clock ? s->cfg.clock(s->cfg.clock_ud) : dx__now_ms();
}

/* {===== store thread =====} */

/* renew_session_lock callback: remember each renewed session id on the op. */
static int collect_id(void *ud, const dx_session_info_t *si) {
  dx_store_op_t *op = ud;
  if (dx__store_push_id(&op->ids, &op->n_ids, si->session_id)) return 1;
  /* its instances all ended: the owner releases it */
  return si->ended && dx__store_push_id(&op->ended, &op->n_ended, si->session_id);
}

static int run_op(dx_store_t *s, dx_store_op_t *op, int64_t now) {
  dx_provider_t *p = s->cfg.provider;
  const dx_provider_methods_t *m = p->methods;
  memset(&op->err, 0, sizeof op->err);
  op->at_ms = now;
  switch (op->kind) {
    case DX_OP_ACK_ORCH:
      return m->ack_orchestration_item(p, now, op->ack, &op->err);
    case DX_OP_ABANDON_ORCH:
      return m->abandon_orchestration_item(p, now, op->instance, op->token, op->delay_ms,
                                           op->ignore_attempt, &op->err);
    case DX_OP_ACK_WORK:
      return m->ack_work_item(p, now, op->token, op->item, &op->err);
    case DX_OP_ABANDON_WORK:
      return m->abandon_work_item(p, now, op->token, op->delay_ms, op->ignore_attempt,
                                  &op->err);
    case DX_OP_RENEW_WORK:
      return m->renew_work_item_lock(p, now, op->token, op->delay_ms, &op->err);
    case DX_OP_ENQUEUE_ORCH:
      return m->enqueue_for_orchestrator(p, now, op->item, op->delay_ms, &op->err);
    case DX_OP_RENEW_SESSIONS:
      /* a retried or isolated batch runs the renewal again: an id an earlier attempt renewed
      ** was rolled back with it, and must not make the loop believe its lease was extended */
      dx__store_free_ids(op->ids, op->n_ids);
      dx__store_free_ids(op->ended, op->n_ended);
      op->ids = op->ended = NULL;
      op->n_ids = op->n_ended = 0;
      return m->renew_session_lock(p, now, op->worker_id, op->delay_ms, op->idle_ms, collect_id,
                                   op, NULL, &op->err);
    case DX_OP_RELEASE_SESSIONS:
      return m->release_session_locks(p, now, op->worker_id, op->session_id, &op->count,
                                      &op->err);
    case DX_OP_CLEANUP_SESSIONS:
      return m->cleanup_orphaned_sessions(p, now, &op->count, &op->err);
    case DX_OP_DECLINE_SESSION:
      return dx__store_decline(s, op->session_id, now + op->delay_ms, &op->err);
    case DX_OP_SESSION_EVENT:
      if (m->version < 7 || !m->append_session_event) return 0;
      return m->append_session_event(p, op->sev, &op->err);
    default:
      return dx_error_set(&op->err, DX_EINVAL, "unknown store operation %d", op->kind);
  }
}

static void free_fetched(dx_store_fetched_t *f) {
  size_t i;
  for (i = 0; i < f->n_orch; i++) dx_orch_item_free(f->orch[i]);
  for (i = 0; i < f->n_work; i++) {
    dx_work_item_clear(&f->work[i].item);
    free(f->work[i].previous_owner);
  }
  free(f->orch);
  free(f->work);
  memset(f, 0, sizeof *f);
}

/* What a cycle fetched, for the metrics: delivered with its commit, or handed over before. */
void dx__store_count_fetched(dx_store_t *s, const dx_store_fetched_t *f) {
  if (f->n_orch)
    dx__metric_add(s->cfg.metrics, DXM_STORE_FETCHED, DXM_LABELS("orchestrator"),
                   (double)f->n_orch);
  if (f->n_work)
    dx__metric_add(s->cfg.metrics, DXM_STORE_FETCHED, DXM_LABELS("worker"), (double)f->n_work);
}

/* Room in f for bo orchestration and bw work items in all (an array it cannot grow, out of
** memory, keeps its size: the fetch then takes fewer). */
static void fetched_room(dx_store_fetched_t *f, int bo, int bw) {
  if (bo > 0 && (size_t)bo > f->cap_orch) {
    dx_orch_item_t **v = realloc(f->orch, (size_t)bo * sizeof *v);
    if (v) f->orch = v, f->cap_orch = (size_t)bo;
  }
  if (bw > 0 && (size_t)bw > f->cap_work) {
    dx_work_fetch_t *v = realloc(f->work, (size_t)bw * sizeof *v);
    if (v) {
      memset(v + f->cap_work, 0, ((size_t)bw - f->cap_work) * sizeof *v);
      f->work = v;
      f->cap_work = (size_t)bw;
    }
  }
}

/* The next size of an array of cap items that must hold up to b: doubling from 8, so a
** cycle that finds a few items does not allocate (and zero) room for its whole budget. */
static int grown(int b, size_t cap) {
  size_t c = cap ? cap * 2 : 8;
  return b > 0 && (size_t)b < c ? b : (int)c;
}

/* How many more items a fetch may add to n of them (budget b in all, room for cap). */
static int room_left(int b, size_t n, size_t cap) {
  size_t want = b > 0 && (size_t)b > n ? (size_t)b - n : 0;
  return (int)(want < cap - n ? want : cap - n);
}

/* Before fetching: the provider takes only this worker's tags and the orchestrations its host
** can run, re-read whenever the host's registrations changed (rolling deployments). A failure
** is retried at the next cycle; meanwhile the previous filter stays. */
static void refresh_filter(dx_store_t *s) {
  dx_provider_t *p = s->cfg.provider;
  const dx_host_methods_t *h = s->cfg.host;
  dx_orch_capability_t *caps = NULL;
  size_t n = 0;
  uint64_t gen = s->cap_gen;
  int changed = 0;
  dx_fetch_filter_t f;
  dx_error_t err;
  if (p->methods->version < 9 || !p->methods->set_fetch_filter) return;
  if (h && h->version >= 4 && h->orch_capabilities) {
    changed = h->orch_capabilities(s->cfg.host_ud, s->cap_gen, &gen, &caps, &n);
    if (changed < 0) return;
  }
  if (s->filter_set && !changed) return;
  memset(&f, 0, sizeof f);
  if (s->cfg.tag_filter) f = *s->cfg.tag_filter;
  else f.untagged = 1;
  f.capabilities_set = changed;
  f.capabilities = caps;
  f.n_capabilities = n;
  if (p->methods->set_fetch_filter(p, &f, &err) == 0) {
    s->filter_set = 1;
    s->cap_gen = gen;
  } else {
    dx__log(DX_LOG_WARN, "setting the fetch filter failed", "error=\"%s\"", err.msg);
  }
  dx_orch_capabilities_free(caps, n);
}

/* Returns 1 when a fetch failed (the cycle then counts as failed, for the backoff). */
int dx__store_fetch_into(dx_store_t *s, int64_t now, int bo, int bw, dx_store_fetched_t *f) {
  dx_provider_t *p = s->cfg.provider;
  dx_error_t err;
  int failed = 0;
  const dx_session_cfg_t *sessions = dx__store_fetch_sessions(s, now);
  /* f holds up to bo / bw items in all: a later fetch of the same cycle (its held rounds)
  ** adds to what it holds; its arrays grow as items come (out of memory: it takes fewer) */
  while ((int)f->n_orch < bo) {
    dx_orch_item_t *it = NULL;
    if (f->n_orch == f->cap_orch) fetched_room(f, grown(bo, f->cap_orch), 0);
    if (f->n_orch == f->cap_orch) break;
    if (p->methods->fetch_orchestration_item(p, now, s->cfg.orch_lock_ms, &it, &err) != 0) {
      dx__log(DX_LOG_WARN, "orchestration fetch failed", "error=\"%s\"", err.msg);
      failed = 1;
      break;
    }
    if (!it) break;
    f->orch[f->n_orch++] = it;
    dx__store_hold(s, it->instance, it->lock_token);
  }
  while ((int)f->n_work < bw) {
    dx_work_fetch_t *w;
    if (f->n_work == f->cap_work) fetched_room(f, 0, grown(bw, f->cap_work));
    if (f->n_work == f->cap_work) break;
    w = &f->work[f->n_work];
    if (p->methods->fetch_work_item(p, now, s->cfg.work_lock_ms, sessions, w, &err) != 0) {
      dx__log(DX_LOG_WARN, "work fetch failed", "error=\"%s\"", err.msg);
      failed = 1;
      break;
    }
    if (w->item.kind == 0) {
      free(w->previous_owner);
      memset(w, 0, sizeof *w);
      break;
    }
    dx__store_hold(s, NULL, w->lock_token);
    f->n_work++;
  }
  return failed;
}

/* After an op ran: settled items are no longer held (whatever the outcome: the loop does not
** settle them again); a renewal by the loop postpones this thread's fallback renewal. */
static void settle_held(dx_store_t *s, const dx_store_op_t *op) {
  if (op->kind == DX_OP_ACK_ORCH) /* (once reported applied, its ack is not read: op_done) */
    dx__store_unhold(s, op->hstate == 2 ? op->token : op->ack->lock_token);
  else if (op->kind == DX_OP_ABANDON_ORCH || op->kind == DX_OP_ACK_WORK ||
           op->kind == DX_OP_ABANDON_WORK)
    dx__store_unhold(s, op->token);
  else if (op->kind == DX_OP_RENEW_WORK) {
    if (op->rc == 0) dx__store_touch_held(s, op->token);
    else dx__store_unhold(s, op->token);
  } else if (op->kind == DX_OP_RENEW_SESSIONS && op->rc == 0) {
    s->sess_due = dx__store_mono_ms() + (uint64_t)s->sess_every_ms; /* the loop is on time */
  }
}

/* What a power cut may lose without breaking a promise needs no sync of its own (it reaches
** the disk with the next synced commit, in order; the provider decides how much of the flush
** it may skip without risking the store: provider.h commit). Renewals only move lock
** expiries: losing one merely shortens a lease. An activity's result: losing it runs the
** activity again when its lock lapses, which activities allow anyway (at least once, as after
** any crash), and the turn that records the result in history is synced. */
static int op_needs_sync(const dx_store_op_t *op) {
  return op->kind != DX_OP_RENEW_WORK && op->kind != DX_OP_RENEW_SESSIONS &&
         op->kind != DX_OP_ACK_WORK && op->rc == 0;
}

/* Run one op inside the cycle's batch and note its outcome. DX_ERETRY (the batch is lost)
** is returned, in *err; any other failure is the op's own answer. */
static int op_done(dx_store_t *s, dx_store_op_t *op, int *failed, int *durable,
                   dx_error_t *err) {
  if (op->kind == DX_OP_ACK_ORCH && op->hstate != 2) op->token = op->ack->lock_token;
  /* (before settle_held forgets it) it answers an item of a held round: store_rounds.c */
  op->handed = dx__store_settles(op) && dx__store_is_handed(s, op->token);
  if (op->rc == DX_ERETRY) {
    *err = op->err;
    *failed = CALL_OP;
    return DX_ERETRY;
  }
  settle_held(s, op);
  if (op->rc != 0) *failed |= CALL_OP;
  *durable |= op_needs_sync(op);
  return 0;
}

static int op_apply(dx_store_t *s, dx_store_op_t *op, int64_t now, int *failed, int *durable,
                    dx_error_t *err) {
  if (op->hstate == 2) {
    /* the loop was told it was applied, and may have taken its ack's memory back: the
    ** transaction it was applied in was lost, so it stays refused, as the provider would
    ** refuse it (its lock was taken in that transaction) */
    op->rc = dx_error_set(&op->err, DX_ELOCK, "turn lost with the transaction it was "
                          "applied in (lock token %016llx)", (unsigned long long)op->token);
    return op_done(s, op, failed, durable, err);
  }
  op->rc = run_op(s, op, now);
  op->hstate = 1;
  return op_done(s, op, failed, durable, err);
}

/* op_apply on every op of the list, in order, up to the first failure (its code). */
int dx__store_apply_all(dx_store_t *s, dx_store_op_t *ops, int64_t now, int *failed, int *durable,
                     dx_error_t *err) {
  int rc = 0;
  for (; ops && !rc; ops = ops->next) rc = op_apply(s, ops, now, failed, durable, err);
  return rc;
}

static int is_ack(const dx_store_op_t *op) {
  return op->kind == DX_OP_ACK_ORCH || op->kind == DX_OP_ACK_WORK;
}

/* The fetch of a cycle that wanted items took since t0 (uv_hrtime). */
void dx__store_observe_fetch(dx_store_t *s, uint64_t t0, int bo, int bw) {
  if (bo > 0 || bw > 0)
    dx__metric_observe(s->cfg.metrics, DXM_STORE_FETCH_DURATION, DXM_NOLABELS,
                       dx__seconds_since(t0));
}

/* The provider takes the cycle's acks and fetches in one call (run_cycle, provider.h v5), so
** a database provider can send them in a few round trips; other ops run one by one first. */
static int run_cycle(dx_store_t *s, dx_store_op_t *ops, int bo, int bw, int64_t now,
                     dx_store_fetched_t *f, int *failed, int *durable, dx_error_t *err) {
  dx_provider_t *p = s->cfg.provider;
  dx_cycle_ack_t *acks = NULL;
  dx_store_op_t *op;
  dx_cycle_t cy;
  size_t n = 0, i;
  int rc = 0, sync = 0;
  uint64_t t0;
  for (op = ops; op && !rc; op = op->next)
    if (is_ack(op)) n++, sync |= op->kind == DX_OP_ACK_ORCH;
    else rc = op_apply(s, op, now, failed, durable, err);
  if (rc) return rc;
  if (n && !(acks = calloc(n, sizeof *acks)))
    return dx_error_set(err, DX_ERETRY, "out of memory for the cycle's acks");
  for (op = ops, i = 0; op; op = op->next) {
    if (!is_ack(op)) continue;
    if (op->kind == DX_OP_ACK_ORCH) acks[i].orch = op->ack;
    else {
      acks[i].work_token = op->token;
      acks[i].completion = op->item;
    }
    i++;
  }
  memset(&cy, 0, sizeof cy);
  cy.acks = acks;
  cy.n_acks = n;
  cy.orch_lock_ms = s->cfg.orch_lock_ms;
  cy.work_lock_ms = s->cfg.work_lock_ms;
  cy.sessions = dx__store_fetch_sessions(s, now);
  /* a provider may commit inside run_cycle: decide now (turn acks sync, op_needs_sync) */
  cy.sync = *durable || sync;
  /* (after an eager cycle's calls f may hold items already: add to them) */
  fetched_room(f, bo, bw);
  cy.orch_out = f->orch ? f->orch + f->n_orch : NULL;
  cy.work_out = f->work ? f->work + f->n_work : NULL;
  cy.max_orch = room_left(bo, f->n_orch, f->cap_orch);
  cy.max_work = room_left(bw, f->n_work, f->cap_work);
  t0 = uv_hrtime();
  rc = p->methods->run_cycle(p, now, &cy, err);
  dx__store_observe_fetch(s, t0, bo, bw); /* the acks ride along: one call does both */
  for (i = 0; i < cy.n_orch; i++) dx__store_hold(s, cy.orch_out[i]->instance, cy.orch_out[i]->lock_token);
  for (i = 0; i < cy.n_work; i++) dx__store_hold(s, NULL, cy.work_out[i].lock_token);
  f->n_orch += cy.n_orch;
  f->n_work += cy.n_work;
  if (cy.fetch_rc) {
    dx__log(DX_LOG_WARN, "fetch failed", "error=\"%s\"", cy.fetch_err.msg);
    *failed |= CALL_FETCH;
  }
  for (op = ops, i = 0; op; op = op->next) {
    if (!is_ack(op)) continue;
    if (rc == 0) {
      op->rc = acks[i].rc;
      op->err = acks[i].err;
      if (op_done(s, op, failed, durable, err)) rc = DX_ERETRY;
    } else {
      *failed |= CALL_OP;
    }
    i++;
  }
  free(acks);
  return rc;
}

/* Tests (dx__store_lose_commits): 1 when this commit is to be lost (*err says so). */
static int lost_commit(dx_store_t *s, dx_error_t *err) {
  int lose;
  uv_mutex_lock(&s->mu);
  if ((lose = s->lose_commits > 0)) s->lose_commits--;
  uv_mutex_unlock(&s->mu);
  if (lose) dx_error_set(err, DX_ERETRY, "injected: the transaction was lost (tests)");
  return lose;
}

/* One transaction: apply `ops`, fetch, commit. 0, or the error that lost the whole batch
** (in *err; nothing of it was kept and nothing is left in f). DX_ERETRY from any call ends the
** batch at once: the provider says it cannot go on, and the same calls may succeed again.
** *failed gets CALL_OP / CALL_FETCH when an op / a fetch failed (a failed commit is then
** their consequence, not the store's own failure). Ops the loop queued while the transaction
** waited for it (held rounds, store_rounds.c) are appended to *opsp; turns a database's cycle
** handed over then reduce *bo (a local store's rounds read the loop's budget anew). */
static int cycle_once(dx_store_t *s, dx_store_op_t **opsp, int *bo, int bw, int64_t now,
                      dx_store_fetched_t *f, int *failed, dx_error_t *err) {
  dx_provider_t *p = s->cfg.provider;
  handed_t handed;
  int durable = 0, rc;
  uint64_t t0;
  memset(f, 0, sizeof *f);
  memset(err, 0, sizeof *err);
  memset(&handed, 0, sizeof handed);
  *failed = 0;
  f->at_ms = now;
  if ((rc = p->methods->begin(p, err)) != 0) return rc;
  dx__store_renew_held(s, now);
  if (*bo > 0 || bw > 0) refresh_filter(s);
  if (!dx__store_per_call(s, *opsp)) {
    rc = run_cycle(s, *opsp, *bo, bw, now, f, failed, &durable, err);
  } else if (!dx__store_has_run_cycle(p)) {
    rc = dx__store_apply_all(s, *opsp, now, failed, &durable, err);
    if (!rc) rc = dx__store_held_rounds(s, opsp, *bo, bw, f, &handed, failed, &durable, err);
  } else {
    /* a database: one call, one round trip, for the start's turn, held; then run_cycle closes
    ** the cycle as usual: the turn's ack, the fetches and the commit in one round trip */
    dx_store_op_t *late = NULL;
    rc = dx__store_apply_all(s, *opsp, now, failed, &durable, err);
    if (!rc && dx__store_fetch_into(s, now, *bo > 1 ? 1 : *bo, 0, f)) *failed |= CALL_FETCH;
    if (!rc && dx__store_can_hold(s, *opsp, f, NULL)) {
      int k = (int)f->n_orch;
      uint64_t left = (uint64_t)s->cfg.hold_ms * 1000000u;
      if (dx__store_hold_round(s, opsp, f, &handed, &left, &late))
        *bo -= k; /* handed over */
    }
    if (!rc) rc = run_cycle(s, late, *bo, bw, f->at_ms, f, failed, &durable, err);
  }
  if (rc) { /* DX_ERETRY from an op: it runs again, its outcome is not known yet */
    p->methods->rollback(p);
    dx__store_ops_lost(*opsp);
    dx__store_unhold_fetched(s, f);
    dx__store_unhold_handed(s, &handed);
    dx__store_handed_end(s, handed.tokens, handed.n);
    free(handed.tokens);
    free_fetched(f);
    dx__store_renewals_end(s, 0);
    return rc;
  }
  /* A cycle that only took locks need not reach the disk: a lost lock only delays. */
  t0 = uv_hrtime();
  rc = lost_commit(s, err) ? DX_ERETRY : p->methods->commit(p, durable, err);
  dx__metric_observe(s->cfg.metrics, DXM_STORE_COMMIT_DURATION,
                     DXM_LABELS(durable ? "true" : "false"), dx__seconds_since(t0));
  if (rc != 0) {
    p->methods->rollback(p); /* a no-op when the failed commit already ended the batch */
    dx__store_ops_lost(*opsp);
    dx__store_unhold_fetched(s, f);
    dx__store_unhold_handed(s, &handed);
    free_fetched(f);
  }
  dx__store_handed_end(s, handed.tokens, handed.n);
  free(handed.tokens);
  dx__store_renewals_end(s, rc == 0);
  return rc;
}

#define RETRY_ATTEMPTS 8      /* whole-batch attempts on DX_ERETRY before giving up */
#define RETRY_FIRST_MS 2      /* backoff doubles from here: 2, 4, ... 256 ms (~0.5 s in all) */

/* cycle_once, repeated while it fails with DX_ERETRY (deadlock, serialization failure, lost
** connection), with a doubling backoff; each attempt takes the clock anew. */
static int cycle_retrying(dx_store_t *s, dx_store_op_t **opsp, int bo, int bw,
                          dx_store_fetched_t *f, int *failed, dx_error_t *err) {
  int attempt, rc = 0;
  for (attempt = 1; attempt <= RETRY_ATTEMPTS; attempt++) {
    rc = cycle_once(s, opsp, &bo, bw, dx__store_now_ms(s), f, failed, err);
    if (rc != DX_ERETRY) break;
    dx__metric_add(s->cfg.metrics, DXM_STORE_RETRIES, DXM_NOLABELS, 1);
    dx__log(DX_LOG_WARN, "store transaction failed; retrying it whole", "attempt=%d error=\"%s\"",
            attempt, err->msg);
    if (attempt < RETRY_ATTEMPTS) uv_sleep(RETRY_FIRST_MS << (attempt - 1));
  }
  return rc;
}

/* One cycle ended with rc: the counters (dx__store_commits, metrics). */
static void count_cycle(dx_store_t *s, int rc) {
  s->cycles++;
  if (rc == 0) s->commits++;
  dx__metric_add(s->cfg.metrics, DXM_STORE_CYCLES, DXM_LABELS(rc ? "failed" : "ok"), 1);
}

/* Each op's outcome and what the cycle fetched, for the metrics. */
static void count_ops(dx_store_t *s, const dx_store_op_t *ops, const dx_store_fetched_t *f) {
  static const char *const names[] = {
    [DX_OP_ACK_ORCH] = "ack_orchestration", [DX_OP_ABANDON_ORCH] = "abandon_orchestration",
    [DX_OP_ACK_WORK] = "ack_work", [DX_OP_ABANDON_WORK] = "abandon_work",
    [DX_OP_RENEW_WORK] = "renew_work", [DX_OP_ENQUEUE_ORCH] = "enqueue",
    [DX_OP_RENEW_SESSIONS] = "renew_sessions", [DX_OP_RELEASE_SESSIONS] = "release_sessions",
    [DX_OP_CLEANUP_SESSIONS] = "cleanup_sessions"};
  enum { N_NAMES = sizeof names / sizeof *names };
  static const char *const outcome[2] = {"ok", "refused"};
  unsigned n[N_NAMES + 1][2] = {{0}}; /* by kind (N_NAMES: other), by outcome */
  const dx_store_op_t *op;
  size_t k, j;
  if (!s->cfg.metrics) return;
  /* counted here first: one update per series instead of one per op (each takes the
  ** registry's lock, which the loop's metrics share) */
  for (op = ops; op; op = op->next)
    n[op->kind > 0 && op->kind < N_NAMES && names[op->kind] ? op->kind : N_NAMES][op->rc != 0]++;
  for (k = 0; k <= N_NAMES; k++)
    for (j = 0; j < 2; j++)
      if (n[k][j])
        dx__metric_add(s->cfg.metrics, DXM_STORE_OPERATIONS,
                       DXM_LABELS(k < N_NAMES ? names[k] : "other", outcome[j]), n[k][j]);
  dx__store_count_fetched(s, f);
}

/* The batch failed as a whole (not by DX_ERETRY, or by DX_ERETRY too often): apply each op in
** a transaction of its own, so one bad op fails alone instead of failing its neighbours.
** Nothing is fetched; the next cycle does that. */
static void cycle_isolate(dx_store_t *s, dx_store_op_t *ops) {
  dx_store_fetched_t none;
  dx_store_op_t *op;
  dx_error_t err;
  int rc = 0, failed;
  for (op = ops; op; op = op->next) {
    dx_store_op_t *next = op->next;
    if (rc != DX_ERETRY) { /* once the store stays unavailable, the rest fail alike at once */
      op->next = NULL; /* a batch of one */
      dx_store_op_t *one = op;
      rc = cycle_retrying(s, &one, 0, 0, &none, &failed, &err);
      op->next = next;
      count_cycle(s, rc);
    }
    if (rc != 0) {
      op->rc = rc;
      op->err = err;
    }
  }
}

/* One cycle: apply *opsp, fetch, commit (ops the loop queued while it held its transaction
** open are appended to *opsp). Returns 1 when anything was fetched. */
static int cycle(dx_store_t *s, dx_store_op_t **opsp, int bo, int bw, dx_store_fetched_t *f) {
  dx_store_op_t *op, *ops;
  dx_error_t err;
  uint64_t t0 = uv_hrtime();
  int failed, rc = cycle_retrying(s, opsp, bo, bw, f, &failed, &err);
  ops = *opsp;
  dx__metric_observe(s->cfg.metrics, DXM_STORE_CYCLE_DURATION, DXM_NOLABELS,
                     dx__seconds_since(t0));
  count_cycle(s, rc);
  if (rc != 0) {
    dx__log(DX_LOG_ERROR, "store commit failed", "error=\"%s\"", err.msg);
    /* A damaged store (or one whose lock file vanished) cannot be used safely any more. Only
    ** when begin or commit found it so: a damaged record read by one call fails that call. */
    if (rc == DX_ECORRUPT && !failed && !s->fatal_seen) {
      s->fatal_err = err;
      s->fatal_seen = 1;
    }
    if (ops && ops->next) {
      cycle_isolate(s, ops);
    } else if (ops) {
      ops->rc = rc;
      ops->err = err;
    }
    for (op = ops; op; op = op->next) settle_held(s, op); /* ops that failed by DX_ERETRY */
  }
  count_ops(s, ops, f);
  /* a failed op (a lost lock, bad input) is an answer, not a failing store: no backoff */
  s->cycle_failed = rc != 0 || (failed & CALL_FETCH);
  return f->n_orch + f->n_work > 0;
}

#define DEPTHS_EVERY_MS 10000

/* Refresh the queue depth gauges every DEPTHS_EVERY_MS (mu not held; outside a batch, like
** next_due). A failed read keeps the last values. */
static void poll_depths(dx_store_t *s) {
  dx_provider_t *p = s->cfg.provider;
  dx_queue_depths_t d;
  dx_error_t err;
  if (!s->cfg.metrics || dx__store_mono_ms() < s->depths_due || !p->methods->get_queue_depths) return;
  s->depths_due = dx__store_mono_ms() + DEPTHS_EVERY_MS;
  if (p->methods->get_queue_depths(p, &d, &err) != 0) return;
  dx__metric_set(s->cfg.metrics, DXM_QUEUE_ORCH, DXM_NOLABELS, (double)d.orchestrator);
  dx__metric_set(s->cfg.metrics, DXM_QUEUE_WORK, DXM_NOLABELS, (double)d.worker);
  dx__metric_set(s->cfg.metrics, DXM_INSTANCES, DXM_NOLABELS, (double)d.instances);
}

static int64_t next_due(dx_store_t *s, int64_t now) {
  dx_provider_t *p = s->cfg.provider;
  int64_t due = INT64_MAX;
  dx_error_t err;
  refresh_filter(s); /* what is due depends on what this worker takes */
  if (p->methods->next_due_ms(p, now, &due, &err) != 0) return now; /* let fetch report it */
  return due;
}

/* Sleep (mu held) at most ms, and never past the next lock renewal. */
static void timed_wait(dx_store_t *s, int64_t ms) {
  uint64_t rdue = dx__store_next_renewal(s), mono = dx__store_mono_ms();
  if (rdue != UINT64_MAX && (int64_t)(rdue > mono ? rdue - mono : 0) < ms)
    ms = (int64_t)(rdue > mono ? rdue - mono : 0);
  if (ms < 1) ms = 1;
  uv_cond_timedwait(&s->cv, &s->mu, (uint64_t)ms * 1000000ull);
}

/* (mu held) The loop has not finished taking the few items this thread fetched for it: its
** answers (acks, results, budget) come as one burst at the end (dx__store_submit). Wait for
** the burst, so one cycle carries it instead of a cycle for its first answer and another for
** the rest. At most cfg.hold_ms, as for a hold's turns (the loop answers in microseconds): a
** loop busy for long (a long turn, or not run at all) only delays the next cycle a little.
** Not for ops that only report back (done: no burst follows), nor for a big delivery (a cycle
** begins with its first answers and applies the rest as they come: store_rounds.c
** absorb_delivery). */
static void await_delivery(dx_store_t *s) {
  uint64_t until = uv_hrtime() + (uint64_t)s->cfg.hold_ms * 1000000u, t;
  while (((s->fetched && s->n_fetched_items <= BURST_MAX_ITEMS) || s->delivering) &&
         !s->stopping && !s->paused &&
         (t = uv_hrtime()) < until)
    uv_cond_timedwait(&s->cv, &s->mu, until - t);
}

static void store_main(void *arg) {
  dx_store_t *s = arg;
  dx__log_set_worker(s->cfg.worker_id);
  dx__heap_prefault(s->cfg.heap_prefault);
  uv_mutex_lock(&s->mu);
  for (;;) {
    dx_store_op_t *ops;
    dx_store_fetched_t f;
    int bo, bw, got, can_fetch;
    uint64_t rdue;
    int renew_now;
    if (s->paused && !s->stopping) { /* a simulated stall: nothing runs until it ends */
      s->halted = 1;
      uv_cond_broadcast(&s->halt_cv); /* dx__store_pause waits for this */
      uv_cond_wait(&s->cv, &s->mu);
      s->halted = 0;
      continue;
    }
    await_delivery(s);
    can_fetch = s->fetching && (s->budget_orch > 0 || s->budget_work > 0);
    rdue = dx__store_next_renewal(s);
    renew_now = rdue <= dx__store_mono_ms();
    if (!s->pending && !can_fetch && !renew_now) {
      if (s->stopping) break;
      if (rdue == UINT64_MAX) uv_cond_wait(&s->cv, &s->mu);
      else timed_wait(s, INT64_MAX / 2);
      continue;
    }
    if (!s->pending && !s->poked && !renew_now) {
      int64_t now = dx__store_now_ms(s), due;
      s->woken = 0; /* this check covers every wake so far */
      uv_mutex_unlock(&s->mu);
      poll_depths(s);
      due = next_due(s, now);
      uv_mutex_lock(&s->mu);
      if (due > now && !s->pending && !s->poked && !s->woken) {
        if (s->stopping) break;
        s->looking = 1;
        timed_wait(s, due - now < s->cfg.poll_interval_ms ? due - now : s->cfg.poll_interval_ms);
        s->looking = 0;
        continue;
      }
    }
    /* mu was let go on the way here (await_delivery, the look for due work): a pause asked
    ** for meanwhile holds this cycle back too, as SIGSTOP would */
    if (s->paused && !s->stopping) continue;
    s->poked = 0;
    ops = s->pending;
    s->pending = s->pending_tail = s->node_end = NULL;
    bo = s->fetching ? s->budget_orch : 0;
    bw = s->fetching ? s->budget_work : 0;
    s->busy = 1;
    dx__store_trash_take(s);
    uv_mutex_unlock(&s->mu);

    got = cycle(s, &ops, bo, bw, &f);
    poll_depths(s);

    uv_mutex_lock(&s->mu);
    s->busy = 0;
    s->budget_orch -= (int)f.n_orch;
    s->budget_work -= (int)f.n_work;
    if (ops) {
      dx_store_op_t *last = ops;
      while (last->next) last = last->next;
      if (s->done_tail) s->done_tail->next = ops;
      else s->done = ops;
      s->done_tail = last;
    }
    if (got) {
      fetched_node_t *n = malloc(sizeof *n);
      if (n) {
        n->f = f;
        n->held = 0; /* (a commit's delivery: the loop signals nothing per node) */
        dx__store_push_fetched(s, n);
      } else {
        dx__store_unhold_fetched(s, &f);
        free_fetched(&f); /* locks expire and the items come back */
      }
    } else {
      free_fetched(&f);
    }
    /* A failing store is retried with backoff, not every poll interval. */
    if (s->cycle_failed)
      s->backoff_ms = s->backoff_ms ? (s->backoff_ms * 2 > 1000 ? 1000 : s->backoff_ms * 2) : 10;
    else
      s->backoff_ms = 0;
    if (s->fatal_seen == 1) {
      s->fatal_seen = 2;
      s->fatal = 1;
    }
    if (ops || got || s->fatal == 1) { /* (not under mu: the loop wakes and takes it) */
      uv_mutex_unlock(&s->mu);
      uv_async_send(&s->async);
      /* what the loop gave back (store_mem.c), freed while it takes this delivery rather
      ** than before the cycle it waits for; the next cycle's fetches reuse the memory */
      dx__store_trash_drop(s);
      uv_mutex_lock(&s->mu);
    } else {
      uv_mutex_unlock(&s->mu);
      dx__store_trash_drop(s);
      uv_mutex_lock(&s->mu);
    }
    if (s->backoff_ms) { /* sleep it out: only stopping cuts it short */
      int64_t until = dx__now_ms() + s->backoff_ms;
      while (!s->stopping && !s->paused && dx__now_ms() < until)
        timed_wait(s, until - dx__now_ms());
      continue;
    }
    /* Found nothing although something looked due (locked elsewhere, not eligible): wait
    ** a poll interval instead of spinning. */
    if (!ops && !got && !s->pending && !s->poked && !s->woken && !s->stopping) {
      s->looking = 1;
      timed_wait(s, s->cfg.poll_interval_ms);
      s->looking = 0;
    }
  }
  s->halted = 1; /* ended: runs nothing more */
  uv_cond_broadcast(&s->halt_cv);
  uv_mutex_unlock(&s->mu);
  uv_async_send(&s->async);
}

/* {===== loop side =====} */

/* A wake-up runs at most this many batches of held nodes the store thread handed over while
** it ran (then other events on the loop get their turn). */
#define ASYNC_MAX_PASSES 64

static void on_async(uv_async_t *h) {
  dx_store_t *s = h->data;
  dx_store_op_t *ops, *applied;
  fetched_node_t *fl;
  int fatal = 0, held_last, more, passes = 0, wake = 0, sig = 0;
  dx__log_set_worker(s->cfg.worker_id); /* the loop may serve several runtimes (tests) */
  /* uv_async_send coalesces: drain everything on each wakeup. */
  uv_mutex_lock(&s->mu);
  do {
    applied = s->applied;
    s->applied = s->applied_tail = NULL;
    ops = s->done;
    fl = s->fetched;
    if (s->fatal == 1) fatal = 1, s->fatal = 2;
    s->done = s->done_tail = NULL;
    s->fetched = s->fetched_tail = NULL;
    /* a few fetched items: their answers come as one burst (await_delivery) */
    s->delivering = fl && s->n_fetched_items <= BURST_MAX_ITEMS;
    /* a big one: a cycle absorbs its answers in batches (store_rounds.c absorb_delivery) */
    s->big = fl && s->n_fetched_items > BURST_MAX_ITEMS ? s->n_fetched_items : 0;
    s->big_ops = 0;
    s->n_fetched_items = 0;
    s->in_async = 1;
    uv_mutex_unlock(&s->mu);
    if (sig) uv_cond_signal(&s->cv), sig = 0;
    /* first: an op applied in a transaction still open may be done too (that transaction was
    ** lost or committed since), and the items handed over with it follow */
    while (applied) {
      dx_store_op_t *next = applied->anext;
      applied->anext = NULL;
      applied->applied(applied);
      applied = next;
    }
    while (ops) {
      dx_store_op_t *next = ops->next;
      ops->next = NULL;
      if (ops->done) ops->done(ops);
      ops = next;
    }
    held_last = 0;
    while (fl) {
      fetched_node_t *next = fl->next;
      int held = fl->held;
      if (s->cfg.on_fetch) s->cfg.on_fetch(s->cfg.ud, &fl->f);
      dx__store_give_fetched(s, &fl->f);
      dx__store_give_block(s, fl);
      fl = next;
      if (held && fl) {
        /* a held round's node is answered: the store thread applies its answers (and hands
        ** over what they make ready) while this loop runs the next node (store_rounds.c) */
        uv_mutex_lock(&s->mu);
        s->held_done++;
        s->node_end = s->pending_tail;
        uv_mutex_unlock(&s->mu);
        uv_cond_signal(&s->cv); /* (mu let go first: see dx__store_submit) */
      } else if (held) {
        held_last = 1;
      }
    }
    uv_mutex_lock(&s->mu);
    dx__store_trash_hand(s); /* what this pass is done with (store_mem.c) */
    if (held_last) {
      s->held_done++;
      s->node_end = s->pending_tail;
    }
    sig = 1; /* the answers queued meanwhile, and await_delivery (once mu is let go) */
    /* held nodes the store thread handed over while this ran (it did not wake the loop for
    ** them, hand_over): run them now, without a trip through the loop's poll */
    more = s->fetched && dx__store_held_only(s) && ++passes < ASYNC_MAX_PASSES;
  } while (more);
  s->in_async = 0;
  s->delivering = 0;
  s->big = 0; /* (sig wakes a cycle absorbing its answers: it takes the last of them) */
  wake = s->fetched != NULL; /* (left for the next wake-up: make sure there is one) */
  uv_mutex_unlock(&s->mu);
  if (sig) uv_cond_signal(&s->cv);
  if (wake) uv_async_send(&s->async);
  if (fatal && s->cfg.on_fatal) s->cfg.on_fatal(s->cfg.ud, &s->fatal_err);
}

static void on_closed(uv_handle_t *h);

/* When the store thread renews a lock the loop renews every `every` ms: only once the loop is
** late, halfway between when its renewal was due and when the lock lapses. */
static int64_t late_after(int64_t every, int64_t lock) {
  int64_t at = every > 0 && every < lock ? every + (lock - every) / 2 : lock / 2;
  return at < 1 ? 1 : at;
}

int dx__store_new(dx_store_t **out, uv_loop_t *loop, const dx_store_cfg_t *cfg,
                  dx_error_t *err) {
  dx_store_t *s = calloc(1, sizeof *s);
  if (!s) return dx_error_set(err, DX_ENOMEM, "out of memory");
  s->loop = loop;
  s->cfg = *cfg;
  if (s->cfg.poll_interval_ms <= 0) s->cfg.poll_interval_ms = 10;
  s->renew_every_ms = dx__renewal_interval(s->cfg.orch_lock_ms, 5000);
  /* The time limit, not a lapsed lock, ends a runaway turn: renew well past the limit. */
  s->orch_hold_ms = s->cfg.turn_time_limit_ms > HOLD_MAX_MS / 2 ? 2 * s->cfg.turn_time_limit_ms
                                                                 : HOLD_MAX_MS;
  if (s->renew_every_ms < 1) s->renew_every_ms = 1;
  s->work_renew_every_ms = late_after(s->cfg.work_renew_ms, s->cfg.work_lock_ms);
  if (s->cfg.sessions) {
    s->sess_every_ms = late_after(s->cfg.session_renew_ms, s->cfg.sessions->session_lock_ms);
    s->sess_due = dx__store_mono_ms() + (uint64_t)s->sess_every_ms;
  }
  s->fetching = 1;
  uv_mutex_init(&s->mu);
  uv_cond_init(&s->cv);
  uv_cond_init(&s->halt_cv);
  uv_async_init(loop, &s->async, on_async);
  s->async.data = s;
  if (uv_thread_create(&s->thread, store_main, s) != 0) {
    /* on_closed frees the struct and its mutex once the loop has closed the handle */
    uv_close((uv_handle_t *)&s->async, on_closed);
    return dx_error_set(err, DX_ENOMEM, "cannot start the store thread");
  }
  s->thread_started = 1;
  *out = s;
  return DX_OK;
}

void dx__store_submit(dx_store_t *s, dx_store_op_t *op) {
  int wake;
  op->next = NULL;
  op->hstate = 0;
  op->handed = 0;
  uv_mutex_lock(&s->mu);
  if (s->pending_tail) s->pending_tail->next = op;
  else s->pending = op;
  s->pending_tail = op;
  /* while the loop takes a delivery of a few items, its answers queue up and wake the thread
  ** once, at the end (on_async): one cycle then carries them all; while it takes a big one
  ** and a cycle absorbs its answers, once per ABSORB_WAKE_EVERY of them (store_rounds.c) */
  wake = !s->delivering && (!s->absorbing || ++s->big_ops == ABSORB_WAKE_EVERY);
  uv_mutex_unlock(&s->mu);
  /* Signalled once mu is let go: woken while this thread still held it, the store thread
  ** (often on the same core) ran at once only to sleep again on the mutex, two more context
  ** switches per answer (the loop signals once per answer and per held node). The waits
  ** re-check their conditions under mu, so nothing is missed. */
  if (wake) uv_cond_signal(&s->cv);
}

void dx__store_want(dx_store_t *s, int orch, int work) {
  int wake;
  uv_mutex_lock(&s->mu);
  /* Only a budget that was used up changes what the thread may do: more of a budget it has
  ** already finds nothing new (each wake-up costs it a due-work read) */
  wake = (orch > 0 && s->budget_orch <= 0) || (work > 0 && s->budget_work <= 0);
  s->budget_orch += orch;
  s->budget_work += work;
  if (wake) uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_poke(dx_store_t *s) {
  uv_mutex_lock(&s->mu);
  s->poked = 1;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_wake(dx_store_t *s) {
  uv_mutex_lock(&s->mu);
  s->woken = 1;
  /* Only a thread asleep between looks for due work needs waking: a busy one looks again
  ** before it sleeps (woken). This process's own commits wake it too (the notify file): they
  ** come while it waits for the loop, which such a wake-up would only interrupt. */
  if (s->looking) uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_pause(dx_store_t *s, int on) {
  uv_mutex_lock(&s->mu);
  s->paused = on;
  uv_cond_signal(&s->cv);
  /* As SIGSTOP: once this returns the thread runs nothing, not even the end of a cycle it was
  ** in (its fetch would read a clock the tests move on meanwhile, past this worker's locks).
  ** A cycle waiting for the loop (await_turns) ends at the pause, so this waits for no loop. */
  while (on && s->thread_started && !s->halted) uv_cond_wait(&s->halt_cv, &s->mu);
  uv_mutex_unlock(&s->mu);
}

void dx__store_stop_fetching(dx_store_t *s) {
  uv_mutex_lock(&s->mu);
  s->fetching = 0;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

static void on_closed(uv_handle_t *h) {
  dx_store_t *s = h->data;
  void (*cb)(void *) = s->close_cb;
  void *ud = s->close_ud;
  dx__store_free_held(s); /* the thread has been joined */
  dx__store_trash_free(s);
  dx__store_free_declined(s);
  dx__store_free_ids(s->sess_new, s->n_sess_new);
  dx__store_free_ids(s->sess_conf, s->n_sess_conf);
  uv_mutex_destroy(&s->mu);
  uv_cond_destroy(&s->cv);
  uv_cond_destroy(&s->halt_cv);
  free(s);
  if (cb) cb(ud);
}

void dx__store_close(dx_store_t *s, void (*cb)(void *ud), void *ud) {
  uv_mutex_lock(&s->mu);
  s->stopping = 1;
  s->fetching = 0;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
  if (s->thread_started) uv_thread_join(&s->thread);
  on_async(&s->async); /* deliver what the last cycles produced */
  s->close_cb = cb;
  s->close_ud = ud;
  uv_close((uv_handle_t *)&s->async, on_closed);
}

uint64_t dx__store_commits(const dx_store_t *s) { return s->commits; }
uint64_t dx__store_cycles(const dx_store_t *s) { return s->cycles; }

int64_t dx__store_backoff_ms(dx_store_t *s) {
  int64_t ms;
  uv_mutex_lock(&s->mu);
  ms = s->backoff_ms;
  uv_mutex_unlock(&s->mu);
  return ms;
}

/* {===== test support =====} */

void dx__store_lose_commits(dx_store_t *s, int n) {
  uv_mutex_lock(&s->mu);
  s->lose_commits = n;
  uv_mutex_unlock(&s->mu);
}

int dx__store_quiet(dx_store_t *s) {
  int quiet;
  uv_mutex_lock(&s->mu);
  quiet = !s->pending && !s->busy && !s->done && !s->fetched;
  uv_mutex_unlock(&s->mu);
  return quiet;
}

void dx__store_crash(dx_store_t *s, void (*cb)(void *ud), void *ud) {
  dx_store_op_t *op;
  uv_mutex_lock(&s->mu);
  s->cfg.on_fetch = NULL; /* items fetched but not delivered stay locked until they lapse */
  for (op = s->pending; op; op = op->next) {
    op->rc = dx_error_set(&op->err, DX_ESTATE, "the runtime crashed before this operation "
                          "was applied");
  }
  if (s->pending) {
    if (s->done_tail) s->done_tail->next = s->pending;
    else s->done = s->pending;
    s->done_tail = s->pending_tail;
    s->pending = s->pending_tail = s->node_end = NULL;
  }
  uv_mutex_unlock(&s->mu);
  dx__store_close(s, cb, ud);
}
