/*
** pg_cycle.c -- run_cycle on PostgreSQL: a store cycle's acks and fetches in a fixed number
** of round trips, however many acks the cycle carries.
**
** Every ack needs a check before it writes (the instance lock and duplicate event ids; the
** worker row behind a token), so that an expected failure writes nothing. Called one by one,
** each ack waits for its own check: one round trip per ack. Here the checks of all acks are
** queued together and read in one round trip; each ack's writes are then only queued and
** travel with the next statement that needs a result (the first fetch) or with the COMMIT.
** Fetches lock up to 16 instances / worker rows per statement (pg_orch.c, pg_work.c).
*/
#include <stdlib.h>
#include <string.h>

#include "providers/checks.h"
#include "providers/pg/pg_internal.h"

/* Inputs are checked before anything is sent, as the single calls do. */
static void check_input(dx_cycle_ack_t *a) {
  const dx_work_item_t *w = a->completion;
  memset(&a->err, 0, sizeof a->err);
  a->rc = 0;
  if (a->orch) a->rc = dx__check_ack(a->orch, &a->err);
  else if (w && (a->rc = dx__check_item(w, &a->err)) == 0) a->rc = dx__check_payload(w, &a->err);
}

/* The acks: every check in one round trip, then the writes queued. Returns the batch's error
** (0 when each ack got its own outcome in acks[i].rc). */
static int acks(tx_t *t, int64_t now, dx_cycle_t *cy) {
  size_t i, n = cy->n_acks;
  PGresult **chk;
  int rc = 0, sent = 0;
  if (!n) return 0;
  if (!(chk = calloc(2 * n, sizeof *chk))) return dx__pg_nomem(t->err);
  for (i = 0; i < n && !rc; i++) {
    dx_cycle_ack_t *a = &cy->acks[i];
    tx_t ta = *t;
    ta.err = &a->err;
    check_input(a);
    if (a->rc) continue;
    rc = a->orch ? dx__pg_ack_orch_send(&ta, a->orch, &chk[2 * i])
                 : dx__pg_ack_work_send(&ta, a->work_token, &chk[2 * i]);
    if (rc) *t->err = a->err;
    sent = 1;
  }
  if (!rc && sent) rc = dx__pg_qwait(t);
  for (i = 0; i < n && !rc; i++) {
    dx_cycle_ack_t *a = &cy->acks[i];
    tx_t ta = *t;
    ta.err = &a->err;
    if (a->rc) continue;
    a->rc = a->orch ? dx__pg_ack_orch_finish(&ta, now, a->orch, &chk[2 * i])
                    : dx__pg_ack_work_finish(&ta, now, a->work_token, a->completion, chk[2 * i]);
    chk[2 * i] = NULL;
    if (a->rc == DX_ERETRY) { /* the batch is lost: every ack runs again */
      *t->err = a->err;
      rc = DX_ERETRY;
    }
  }
  for (i = 0; i < 2 * n; i++) PQclear(chk[i]);
  free(chk);
  return rc;
}

/* The fetches, as the store thread would make them one by one; the first work fetch's picks
** are queued ahead, to travel with the orchestration fetch's round trip. */
static void fetches(tx_t *t, int64_t now, dx_cycle_t *cy) {
  dx_provider_t *pp = &t->p->base;
  dx__pg_wpre_t pre;
  tx_t tf = *t;
  int rc;
  memset(&pre, 0, sizeof pre);
  memset(&cy->fetch_err, 0, sizeof cy->fetch_err);
  tf.err = &cy->fetch_err;
  if (cy->work_out && cy->max_work > 0 && cy->orch_out && cy->max_orch > 0 &&
      (cy->fetch_rc = dx__pg_work_presend(&tf, now, cy->work_lock_ms, cy->sessions, &pre)))
    return;
  while (cy->orch_out && (int)cy->n_orch < cy->max_orch) {
    dx_orch_item_t *it = NULL;
    if ((rc = dx__pg_fetch_orch(pp, now, cy->orch_lock_ms, &it, &cy->fetch_err))) {
      cy->fetch_rc = rc;
      break;
    }
    if (!it) break;
    cy->orch_out[cy->n_orch++] = it;
  }
  while (cy->work_out && (int)cy->n_work < cy->max_work) {
    dx_work_fetch_t *w = &cy->work_out[cy->n_work];
    if ((rc = dx__pg_fetch_work_pre(pp, now, cy->work_lock_ms, cy->sessions, w, &cy->fetch_err,
                                    &pre))) {
      cy->fetch_rc = rc;
      break;
    }
    if (w->item.kind == 0) break;
    cy->n_work++;
  }
  if (pre.sent && !cy->fetch_rc) /* never taken: wait, so nothing points at this frame */
    cy->fetch_rc = dx__pg_qwait(&tf);
  PQclear(pre.plain);
  PQclear(pre.owned);
  PQclear(pre.claim);
}

int dx__pg_run_cycle(dx_provider_t *pp, int64_t now, dx_cycle_t *cy, dx_error_t *err) {
  tx_t t;
  int rc;
  if (!cy) return dx_error_set(err, DX_EINVAL, "run_cycle: cycle is NULL");
  cy->n_orch = cy->n_work = 0;
  cy->fetch_rc = 0;
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  if (t.own) /* the fetches below would each open their own transaction */
    return dx__pg_tx_end(&t, dx_error_set(err, DX_ESTATE, "run_cycle outside a batch (begin)"));
  if ((rc = acks(&t, now, cy))) return dx__pg_tx_poison(&t, rc);
  fetches(&t, now, cy);
  return 0;
}
