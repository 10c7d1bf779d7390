/*
** pg_cycle.c -- run_cycle on PostgreSQL: a store cycle's acks and fetches, and its COMMIT, in
** one round trip (one pipeline sync), however many acks the cycle carries.
**
** Nothing in the pipeline waits for an earlier result: the cycle's orchestration acks are one
** call of a server-side function (dx_ack_orchs), its worker-item acks another (dx_ack_works);
** each checks every lock itself and then writes each ack whole or not at all, returning one
** outcome row per ack (pg_sql.c, migration 9); an orchestration fetch is
** one statement that locks the instances and returns their messages, records and histories
** with them (ORCH_FETCH); a work fetch is one call of dx_fetch_work (migration 10), which locks
** plain rows and decides session claims in the database, so session work due costs no round
** trip of its own (pg_work.c). The COMMIT is queued behind them: expected per-ack failures
** write nothing, so the batch can commit whatever they turn out to be. A real error fails the
** whole cycle (DX_ERETRY: the store thread retries it).
**
** A rare case needs a second transaction after the commit: an instance locked with nothing to
** hand out (parked or dropped, dx__pg_orch_park).
*/
#include <stdlib.h>
#include <string.h>

#include "providers/checks.h"
#include "providers/pg/pg.h"
#include "providers/pg/pg_internal.h"

/* Inputs are checked before anything is sent, as the single calls do. */
static void check_input(dx_cycle_ack_t *a) {
  const dx_work_item_t *w = a->completion;
  memset(&a->err, 0, sizeof a->err);
  a->rc = 0;
  if (a->orch) a->rc = dx__check_ack(a->orch, &a->err);
  else if (w && (a->rc = dx__check_item(w, &a->err)) == 0) a->rc = dx__check_payload(w, &a->err);
}

size_t dx__pg_ack_call_bytes = (size_t)64 << 20;

size_t dx__pg_set_ack_call_bytes(size_t n) {
  size_t was = dx__pg_ack_call_bytes;
  dx__pg_ack_call_bytes = n;
  return was;
}

/* One call of dx_ack_orchs or dx_ack_works: the acks it covers (acks[from, from + n)). */
typedef struct {
  PGresult *res;
  size_t from, n;
  int work;
} call_t;

/* Queue every ack: the orchestration acks as one call of dx_ack_orchs, the worker-item acks
** as one of dx_ack_works (more calls only when a cycle's arrays pass dx__pg_ack_call_bytes);
** calls[] (room for 2 * n_acks) gets them. */
static int acks_send(tx_t *t, int64_t now, dx_cycle_t *cy, call_t *calls, size_t *n_calls) {
  size_t i, from, used;
  int rc = 0, work;
  *n_calls = 0;
  for (i = 0; i < cy->n_acks; i++) check_input(&cy->acks[i]);
  for (work = 0; work < 2 && !rc; work++)
    for (from = 0; from < cy->n_acks && !rc; from += used) {
      call_t *c = &calls[(*n_calls)++];
      c->work = work;
      c->from = from;
      rc = work ? dx__pg_ack_works_send(t, now, cy->acks + from, cy->n_acks - from, &c->res, &used)
                : dx__pg_ack_orchs_send(t, now, cy->acks + from, cy->n_acks - from, &c->res, &used);
      c->n = used;
    }
  return rc;
}

/* Each ack's outcome from its call's result (all results taken). */
static void acks_take(tx_t *t, int64_t now, dx_cycle_t *cy, call_t *calls, size_t n_calls) {
  size_t i;
  for (i = 0; i < n_calls; i++) {
    call_t *c = &calls[i];
    if (c->work) dx__pg_ack_works_take(t, now, cy->acks + c->from, c->n, c->res);
    else dx__pg_ack_orchs_take(t, now, cy->acks + c->from, c->n, c->res);
    c->res = NULL;
  }
}

/* Queue the fetches (a failure to queue one is the fetch's, in fetch_rc). */
static void fetches_send(tx_t *tf, int64_t now, dx_cycle_t *cy, PGresult **ores,
                         PGresult **wres) {
  int rc = 0;
  if (cy->orch_out && cy->max_orch > 0)
    rc = dx__pg_orch_fetch_send(tf, now, cy->orch_lock_ms, cy->max_orch, ores);
  if (!rc && cy->work_out && cy->max_work > 0)
    rc = dx__pg_work_fetch_send(tf, now, cy->work_lock_ms, cy->sessions, cy->max_work, wres);
  cy->fetch_rc = rc;
}

/* After the commit: instances locked with nothing to hand out are parked in a transaction of
** their own. A failure is the fetches'. */
static void follow_up(pg_t *p, int64_t now, dx_cycle_t *cy, dx__pg_park_t *parks, int n_parks) {
  dx_provider_t *pp = &p->base;
  dx_error_t *err = &cy->fetch_err;
  tx_t t;
  int rc, k;
  if ((rc = dx__pg_begin(pp, err)) == 0 && (rc = dx__pg_tx_begin(p, &t, err)) == 0) {
    for (k = 0; k < n_parks && !rc; k++) rc = dx__pg_orch_park(&t, parks[k].inst, parks[k].token, now);
    if (rc) dx__pg_rollback(pp);
    else rc = dx__pg_commit(pp, 0, err);
  }
  if (rc) cy->fetch_rc = rc;
}

/* Hand the instances ORCH_FETCH locked (all of them: it locked at most max_orch) to the cycle. */
static void orch_take(tx_t *tf, int64_t now, dx_cycle_t *cy, PGresult *res, dx__pg_park_t *parks,
                      int *n_parks) {
  pg_conn_t *c = tf->c;
  int picked, back, i;
  /* instances put back (their row changed after the statement's snapshot) stay due: the next
  ** cycle reads them whole */
  cy->fetch_rc =
      dx__pg_orch_fetch_take(tf, res, now, cy->orch_lock_ms, parks, n_parks, &picked, &back);
  for (i = 0; i < c->obuf_n; i++) cy->orch_out[cy->n_orch++] = c->obuf[i];
  free(c->obuf);
  c->obuf = NULL;
  c->obuf_n = c->obuf_next = 0;
}

int dx__pg_run_cycle(dx_provider_t *pp, int64_t now, dx_cycle_t *cy, dx_error_t *err) {
  dx__pg_park_t *parks = NULL;
  PGresult *ores = NULL, *wres = NULL;
  call_t *calls = NULL;
  tx_t t, tf;
  size_t i, n_calls = 0;
  int rc, n_parks = 0;
  if (!cy) return dx_error_set(err, DX_EINVAL, "run_cycle: cycle is NULL");
  cy->n_orch = cy->n_work = 0;
  cy->fetch_rc = 0;
  memset(&cy->fetch_err, 0, sizeof cy->fetch_err);
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  if (t.own) /* the calls below would each open their own transaction */
    return dx__pg_tx_end(&t, dx_error_set(err, DX_ESTATE, "run_cycle outside a batch (begin)"));
  /* instances a single fetch of this batch locked ahead and did not hand out (an eager
  ** start's cycle, store.c) go back first, queued: the fetch below may pick them again */
  if ((rc = dx__pg_orch_unbuffer(&t, 1))) return dx__pg_tx_poison(&t, rc);
  if ((cy->n_acks && !(calls = calloc(2 * cy->n_acks, sizeof *calls))) ||
      (cy->max_orch > 0 && !(parks = calloc((size_t)cy->max_orch, sizeof *parks)))) {
    free(calls);
    return dx__pg_tx_poison(&t, dx__pg_nomem(err));
  }
  tf = t;
  tf.err = &cy->fetch_err;
  if (!(rc = acks_send(&t, now, cy, calls, &n_calls))) fetches_send(&tf, now, cy, &ores, &wres);
  if (rc) dx__pg_tx_poison(&t, rc);
  /* one round trip: everything queued since begin(), then COMMIT */
  if ((rc = dx__pg_batch_commit_wait(&t, cy->sync)) == 0) {
    acks_take(&t, now, cy, calls, n_calls);
    if (ores && !cy->fetch_rc) orch_take(&tf, now, cy, ores, parks, &n_parks);
    else PQclear(ores);
    if (wres && !cy->fetch_rc)
      cy->fetch_rc = dx__pg_work_fetch_take(&tf, now, cy->sessions, wres, cy->work_out,
                                            cy->max_work, &cy->n_work);
    else PQclear(wres);
    wres = NULL;
    if (n_parks) follow_up((pg_t *)pp, now, cy, parks, n_parks);
    t.c->cycle_done = 1; /* after follow_up's own batch: the caller's commit() is a no-op */
  }
  for (i = 0; i < n_calls; i++) PQclear(calls[i].res);
  free(calls);
  for (i = 0; i < (size_t)n_parks; i++) free(parks[i].inst);
  PQclear(wres);
  free(parks);
  return rc;
}
