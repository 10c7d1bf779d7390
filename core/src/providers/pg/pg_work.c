/*
** pg_work.c -- the worker queue and sessions on PostgreSQL.
**
** A work fetch is one call of dx_fetch_work (pg_sql.c, migration 10): the session picks, the
** claim, the row locks and the session's users are decided in the database, in the fetch's own
** transaction, under a transaction-scoped advisory lock on the worker id, so every claim made
** under one worker id (several processes with the same id, or a store thread and a client
** thread) is serialized and capacity is never overshot. Claims of one session by different
** workers are serialized by the session row (INSERT ... ON CONFLICT re-checks ownership on
** the latest row version).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "providers/checks.h"
#include "providers/pg/pg_internal.h"
#include "util.h"

/* {===== rows =====} */

int dx__pg_work_insert(tx_t *t, const dx_work_item_t *w, int64_t visible_at) {
  char *buf;
  size_t len;
  qp_t q;
  int rc;
  if (dx__work_item_encode(w, &buf, &len)) return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  dx__qp_init(&q);
  dx__qp_i64(&q, visible_at);
  dx__qp_str(&q, w->session_id);
  dx__qp_str(&q, w->instance);
  dx__qp_i64(&q, (int64_t)w->execution_id);
  dx__qp_i64(&q, (int64_t)w->id);
  dx__qp_bin(&q, buf, len);
  dx__qp_i64(&q, w->kind);
  dx__qp_str(&q, w->tag);
  rc = dx__pg_q(t, PQ_WORK_INSERT, &q, NULL);
  free(buf);
  if (!rc) dx__pg_tx_notify(t);
  return rc;
}

int dx__pg_enqueue_work(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                        dx_error_t *err) {
  tx_t t;
  int rc;
  if ((rc = dx__check_item(item, err)) || (rc = dx__check_payload(item, err)) ||
      (rc = dx__pg_tx_begin((pg_t *)pp, &t, err)))
    return rc;
  return dx__pg_tx_end(&t, dx__pg_work_insert(&t, item, now));
}

/* {===== fetch =====} */

/* Liveness on: hold this handle's lock (its plain rows' locks are its), and at most every
** sweep period make the rows dead lockers left locked due now: plain rows of dead handles,
** and (with sessions) in-flight rows of sessions whose owner is dead. */
static int reap_send(tx_t *t, int64_t now, const dx_session_cfg_t *cfg) {
  qp_t q;
  int rc;
  if (!t->p->liveness) return 0;
  if ((rc = dx__pg_live_hold(t->p, t->p->proc_tag, t->err))) return rc;
  if (!dx__pg_live_sweep_due(t->p, &t->p->reaped_at, now)) return 0;
  dx__qp_init(&q);
  dx__qp_i64(&q, now);
  dx__qp_str(&q, t->p->proc_tag);
  dx__qp_str(&q, t->p->live_prefix);
  if ((rc = dx__pg_qsend(t, PQ_WORK_REAP_PLAIN, &q, NULL)) || !cfg) return rc;
  q.v[1] = cfg->worker_id;
  return dx__pg_qsend(t, PQ_WORK_REAP, &q, NULL);
}

/* 1 when an earlier claim pick of this batch found nothing for this worker (claim_none). */
static int claims_over(const tx_t *t, const dx_session_cfg_t *cfg) {
  return t->c->in_batch && cfg && strcmp(t->c->claim_none, cfg->worker_id) == 0;
}

int dx__pg_work_fetch_send(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                           int k, PGresult **res) {
  char *declined = NULL;
  qp_t q;
  int rc;
  *res = NULL;
  if (cfg && cfg->max_sessions == 0) cfg = NULL; /* takes no session work */
  if (cfg && ((rc = dx__check_worker_id(cfg->worker_id, t->err)) ||
              (rc = dx__pg_live_hold(t->p, cfg->worker_id, t->err))))
    return rc;
  if ((rc = reap_send(t, now, cfg))) return rc;
  /* sessions this worker declines (a rolling upgrade): neither picked nor claimed */
  if (cfg && !(declined = dx__pg_text_array(cfg->declined, cfg->n_declined, sizeof(char *))))
    return dx__pg_nomem(t->err);
  dx__qp_init(&q);
  dx__qp_i64(&q, now);
  dx__qp_i64(&q, dx__sat_add(now, lock_ms));
  dx__qp_i64(&q, k);
  dx__qp_str(&q, t->p->liveness ? t->p->proc_tag : NULL); /* plain rows' locker */
  dx__qp_i64(&q, dx_fetch_filter_accepts_tag(t->p->filter, NULL)); /* the tags it takes */
  dx__qp_str(&q, t->p->tags_param);
  if (!cfg) return dx__pg_qsend(t, PQ_WORK_FETCH_PLAIN, &q, res);
  dx__qp_str(&q, cfg->worker_id);
  /* the advisory lock that serializes every claim made under this worker id */
  dx__qp_i64(&q, (int64_t)dx__pg_hash(t->p->schema, cfg->worker_id));
  dx__qp_i64(&q, dx__sat_add(now, cfg->session_lock_ms));
  dx__qp_i64(&q, (int64_t)cfg->max_sessions);
  dx__qp_i64(&q, !claims_over(t, cfg));
  dx__qp_str(&q, declined);
  dx__qp_str(&q, t->p->live_prefix); /* a live lease of a dead owner is claimable */
  dx__qp_i64(&q, t->p->liveness);
  rc = dx__pg_qsend(t, PQ_WORK_FETCH, &q, res);
  free(declined); /* the send copied it */
  return rc;
}

static void fetch_reset(dx_work_fetch_t *out) {
  dx_work_item_clear(&out->item);
  free(out->previous_owner);
  memset(out, 0, sizeof *out);
}

/* Row `row` of dx_fetch_work's result (token, attempt, item, due, claimed, previous owner). */
static int fetched_row(tx_t *t, int64_t now, PGresult *res, int row, dx_work_fetch_t *out) {
  dx_error_t derr = {0};
  int64_t due;
  int rc, oom = 0;
  memset(out, 0, sizeof *out);
  out->lock_token = (uint64_t)dx__col_i64(res, row, 0);
  out->attempt_count = (uint32_t)dx__col_i64(res, row, 1);
  rc = dx__work_item_decode(PQgetvalue(res, row, 2), (size_t)PQgetlength(res, row, 2),
                            &out->item, &derr);
  if (rc == DX_ENOMEM) return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  if (rc)
    return dx__pg_tx_poison(t, dx_error_set(t->err, DX_ECORRUPT,
                                            "corrupted record in work (row %lld): %s",
                                            (long long)out->lock_token, derr.msg));
  if (dx__col_i64(res, row, 4)) { /* binary bool: one byte */
    due = dx__col_i64(res, row, 3);
    out->session_claimed = 1;
    out->waited_ms = now > due ? now - due : 0;
    if (!dx__col_null(res, row, 5) && *PQgetvalue(res, row, 5))
      out->previous_owner = dx__col_str(res, row, 5, &oom);
  }
  if (oom) {
    fetch_reset(out);
    return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  }
  return 0;
}

int dx__pg_work_fetch_take(tx_t *t, int64_t now, const dx_session_cfg_t *cfg, PGresult *res,
                           dx_work_fetch_t *out, int max, size_t *n) {
  int i, rc = 0;
  *n = 0;
  if (!res || PQnfields(res) < 6) {
    PQclear(res);
    return dx__pg_tx_poison(t, dx_error_set(t->err, DX_ESTORE,
                                            "work fetch: no result from dx_fetch_work"));
  }
  for (i = 0; i < PQntuples(res) && !rc; i++) {
    if (dx__col_null(res, i, 0)) { /* the claim pick found nothing: not again this batch */
      if (t->c->in_batch && cfg)
        snprintf(t->c->claim_none, sizeof t->c->claim_none, "%s", cfg->worker_id);
    } else if ((int)*n >= max) {
      rc = dx__pg_tx_poison(t, dx_error_set(t->err, DX_ESTORE, "work fetch: dx_fetch_work "
                                            "locked more than %d rows", max));
    } else if (!(rc = fetched_row(t, now, res, i, &out[*n]))) {
      (*n)++;
    }
  }
  PQclear(res);
  return rc;
}

int dx__pg_fetch_work(dx_provider_t *pp, int64_t now, int64_t lock_ms,
                      const dx_session_cfg_t *sessions, dx_work_fetch_t *out, dx_error_t *err) {
  PGresult *res = NULL;
  size_t n = 0;
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if (sessions && sessions->max_sessions > 0 &&
      (rc = dx__check_worker_id(sessions->worker_id, err)))
    return rc;
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  if (!(rc = dx__pg_work_fetch_send(&t, now, lock_ms, sessions, 1, &res)) &&
      !(rc = dx__pg_qwait(&t))) {
    rc = dx__pg_work_fetch_take(&t, now, sessions, res, out, 1, &n);
    res = NULL;
  }
  PQclear(res);
  rc = dx__pg_tx_end(&t, rc);
  if (rc) fetch_reset(out);
  return rc;
}


/* {===== ack, renew, abandon =====} */

typedef struct {
  int64_t seq, locked_until;
  char *sid;
  int64_t sess_epoch;   /* the epoch the row was locked under */
  int has_session;      /* the session row exists: epoch and owner are its */
  int64_t epoch;
  char *owner;
} row_t;

static void row_clear(row_t *r) {
  free(r->sid);
  free(r->owner);
  memset(r, 0, sizeof *r);
}

/* Queue the lookup of the row locked with `token` (row-locked); *res at the next wait. */
static int row_send(tx_t *t, uint64_t token, PGresult **res) {
  qp_t q;
  *res = NULL;
  if (token == 0) return 0; /* row_read refuses it */
  dx__qp_init(&q);
  dx__qp_i64(&q, (int64_t)token);
  return dx__pg_qsend(t, PQ_WORK_BY_TOKEN, &q, res);
}

/* The looked-up row (res taken). DX_ELOCK when none is locked with `token`. */
static int row_read(tx_t *t, uint64_t token, PGresult *res, row_t *r) {
  int oom = 0;
  memset(r, 0, sizeof *r);
  if (token == 0) return dx_error_set(t->err, DX_ETOKEN, "lock token 0 is never valid");
  if (!res || PQntuples(res) == 0) {
    PQclear(res);
    return dx_error_set(t->err, DX_ELOCK,
                        "no worker item is locked with token %llx (acked, cancelled, or "
                        "re-delivered after its lock expired)",
                        (unsigned long long)token);
  }
  r->seq = dx__col_i64(res, 0, 0);
  r->locked_until = dx__col_i64(res, 0, 1);
  r->sid = dx__col_str(res, 0, 2, &oom);
  r->sess_epoch = dx__col_i64(res, 0, 3);
  if ((r->has_session = !dx__col_null(res, 0, 4))) {
    r->epoch = dx__col_i64(res, 0, 4);
    r->owner = dx__col_str(res, 0, 5, &oom);
  }
  PQclear(res);
  if (oom) {
    row_clear(r);
    return dx__pg_nomem(t->err);
  }
  return 0;
}

/* The row locked with `token` (row-locked). DX_ELOCK when none is. */
static int row_by_token(tx_t *t, uint64_t token, row_t *r) {
  PGresult *res = NULL;
  int rc;
  memset(r, 0, sizeof *r);
  if ((rc = row_send(t, token, &res)) || (token && (rc = dx__pg_qwait(t)))) return rc;
  return row_read(t, token, res, r);
}

static int row_check_live(tx_t *t, const row_t *r, int64_t now) {
  if (r->locked_until > now) return 0;
  return dx_error_set(t->err, DX_ELOCK, "the lock on worker item %lld expired at %lld (now %lld)",
                      (long long)r->seq, (long long)r->locked_until, (long long)now);
}

/* Fencing (issue 9 item 3): a session row locked under an earlier ownership epoch belongs to
** an owner that lost the session (stalled past its lease, another worker claimed it): its
** ack and renewal are refused in their own transaction; the new owner runs the row. */
static int row_check_epoch(tx_t *t, const row_t *r) {
  if (!r->sid) return 0;
  if (!r->has_session)
    return dx_error_set(t->err, DX_ELOCK, "session '%s' of worker item %lld no longer exists",
                        r->sid, (long long)r->seq);
  if (r->epoch == r->sess_epoch) return 0;
  return dx_error_set(t->err, DX_ELOCK,
                      "session '%s' moved to worker '%s' (ownership epoch %lld; worker item "
                      "%lld was locked under epoch %lld): a result from an earlier owner is "
                      "refused",
                      r->sid, r->owner && *r->owner ? r->owner : "(none)", (long long)r->epoch,
                      (long long)r->seq, (long long)r->sess_epoch);
}

/* Work flowed through the session: last_activity = now (no row: nothing to do). */
static int sess_touch(tx_t *t, const char *sid, int64_t now) {
  qp_t q;
  if (!sid) return 0;
  dx__qp_init(&q);
  dx__qp_str(&q, sid);
  dx__qp_i64(&q, now);
  return dx__pg_q(t, PQ_SESS_TOUCH, &q, NULL);
}

/* The worker-item acks among acks[0..n) that are sent: those with no input error. */
static int work_sent(const dx_cycle_ack_t *a) { return !a->orch && a->rc == 0; }

/* Queue the worker-item acks as one call of dx_ack_works (each row must be locked with its
** token and live; its completion, which may be NULL, is queued with the delete). */
int dx__pg_ack_works_send(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n,
                          PGresult **res, size_t *used) {
  pg_arr_t tok, inst, item;
  size_t i, k = 0;
  int rc = 0, notify = 0;
  qp_t q;
  *res = NULL;
  *used = n;
  for (i = 0; i < n; i++) k += work_sent(&acks[i]);
  if (k == 0) return 0;
  dx__arr_init(&tok, PG_OID_INT8);
  dx__arr_init(&inst, PG_OID_TEXT);
  dx__arr_init(&item, PG_OID_BYTEA);
  for (i = 0, k = 0; i < n; i++) {
    const dx_work_item_t *c = acks[i].completion;
    char *buf = NULL;
    size_t len = 0;
    if (!work_sent(&acks[i])) continue;
    if (k++ && tok.len + inst.len + item.len >= dx__pg_ack_call_bytes) break; /* another call */
    dx__arr_i64(&tok, (int64_t)acks[i].work_token);
    dx__arr_str(&inst, c ? c->instance : NULL);
    if (c && dx__work_item_encode(c, &buf, &len)) item.oom = 1;
    dx__arr_bytes(&item, c ? buf : NULL, len);
    free(buf);
    notify |= c != NULL;
  }
  *used = i;
  if ((rc = dx__arr_done(&tok, t->err)) || (rc = dx__arr_done(&inst, t->err)) ||
      (rc = dx__arr_done(&item, t->err))) {
    rc = dx__pg_tx_poison(t, rc);
  } else {
    dx__qp_init(&q);
    dx__qp_i64(&q, now);
    dx__qp_arr(&q, &tok);
    dx__qp_arr(&q, &inst);
    dx__qp_arr(&q, &item);
    rc = dx__pg_qsend(t, PQ_ACK_WORK, &q, res);
    if (!rc && notify) dx__pg_tx_notify(t);
  }
  dx__arr_free(&tok);
  dx__arr_free(&inst);
  dx__arr_free(&item);
  return rc;
}

/* One ack's outcome: row `row` of dx_ack_works (k, code, seq, until, sid, owner, epoch). */
static int work_outcome(tx_t *t, int64_t now, uint64_t token, PGresult *res, int row) {
  int64_t code = dx__col_i64(res, row, 1), seq = dx__col_i64(res, row, 2);
  int64_t until = dx__col_i64(res, row, 3);
  int rc;
  if (code == 4) { /* fenced: the session moved since the lock */
    row_t r = {0};
    int oom = 0;
    r.seq = seq;
    r.sid = dx__col_str(res, row, 4, &oom);
    r.has_session = until >= 0;
    r.epoch = until;
    r.sess_epoch = dx__col_i64(res, row, 6);
    if (r.has_session) r.owner = dx__col_str(res, row, 5, &oom);
    rc = oom ? dx__pg_nomem(t->err) : row_check_epoch(t, &r);
    row_clear(&r);
    return rc;
  }
  if (code == 1) return row_read(t, token, NULL, &(row_t){0});
  if (code == 2)
    return row_check_live(t, &(row_t){.seq = seq, .locked_until = until}, now);
  return 0;
}

void dx__pg_ack_works_take(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n, PGresult *res) {
  size_t i;
  int row = 0, sent = 0, bad;
  for (i = 0; i < n; i++) sent += work_sent(&acks[i]);
  bad = sent && (!res || PQntuples(res) != sent || PQnfields(res) < 7);
  for (i = 0; i < n; i++) {
    dx_cycle_ack_t *a = &acks[i];
    tx_t ta = *t;
    if (!work_sent(a)) continue;
    ta.err = &a->err;
    if (bad)
      a->rc = dx__pg_tx_poison(&ta, dx_error_set(&a->err, DX_ESTORE, "ack of worker item %llx: "
                                                 "no outcome from dx_ack_works",
                                                 (unsigned long long)a->work_token));
    else a->rc = work_outcome(&ta, now, a->work_token, res, row++);
  }
  PQclear(res);
}

static int work_ack(tx_t *t, int64_t now, uint64_t token, const dx_work_item_t *completion) {
  dx_cycle_ack_t one;
  PGresult *res = NULL;
  size_t used;
  int rc;
  if (token == 0) return row_read(t, token, NULL, &(row_t){0});
  memset(&one, 0, sizeof one);
  one.work_token = token;
  one.completion = completion;
  if ((rc = dx__pg_ack_works_send(t, now, &one, 1, &res, &used)) || (rc = dx__pg_qwait(t))) {
    PQclear(res);
    return rc;
  }
  dx__pg_ack_works_take(t, now, &one, 1, res);
  if (one.rc && t->err) *t->err = one.err;
  return one.rc;
}

int dx__pg_ack_work(dx_provider_t *pp, int64_t now, uint64_t token,
                    const dx_work_item_t *completion, dx_error_t *err) {
  tx_t t;
  int rc;
  if ((completion && ((rc = dx__check_item(completion, err)) ||
                      (rc = dx__check_payload(completion, err)))) ||
      (rc = dx__pg_tx_begin((pg_t *)pp, &t, err)))
    return rc;
  return dx__pg_tx_end(&t, work_ack(&t, now, token, completion));
}

int dx__pg_renew_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t extend_ms,
                      dx_error_t *err) {
  tx_t t;
  row_t r;
  qp_t q;
  int rc;
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = row_by_token(&t, token, &r);
  if (!rc) rc = row_check_live(&t, &r, now);
  if (!rc) rc = row_check_epoch(&t, &r);
  if (!rc) {
    dx__qp_init(&q);
    dx__qp_i64(&q, r.seq);
    dx__qp_i64(&q, dx__sat_add(now, extend_ms));
    rc = dx__pg_q(&t, PQ_WORK_RENEW, &q, NULL);
  }
  if (!rc) rc = sess_touch(&t, r.sid, now);
  row_clear(&r);
  return dx__pg_tx_end(&t, rc);
}

int dx__pg_abandon_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t delay_ms,
                        int ignore_attempt, dx_error_t *err) {
  tx_t t;
  row_t r;
  qp_t q;
  int rc;
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = row_by_token(&t, token, &r);
  if (!rc) {
    dx__qp_init(&q);
    dx__qp_i64(&q, r.seq);
    dx__qp_i64(&q, dx__sat_add(now, delay_ms > 0 ? delay_ms : 0));
    dx__qp_i64(&q, ignore_attempt ? 1 : 0);
    rc = dx__pg_q(&t, PQ_WORK_ABANDON, &q, NULL);
    if (!rc) dx__pg_tx_notify(&t);
  }
  row_clear(&r);
  return dx__pg_tx_end(&t, rc);
}

/* {===== session management =====} */

/* Report the rows of a session listing (sid, owner, locked_until, last_activity, queued) to
** cb after the statement finished; stops when cb returns non-zero. */
static void report(PGresult *res, dx_session_cb cb, void *ud) {
  int i, n = PQntuples(res);
  for (i = 0; cb && i < n; i++) {
    dx_session_info_t s;
    s.session_id = PQgetvalue(res, i, 0);
    s.worker_id = dx__col_null(res, i, 1) ? NULL : PQgetvalue(res, i, 1);
    s.locked_until_ms = dx__col_i64(res, i, 2);
    s.last_activity_ms = dx__col_i64(res, i, 3);
    s.queued = (uint64_t)dx__col_i64(res, i, 4);
    s.running = PQnfields(res) > 5 ? (uint64_t)dx__col_i64(res, i, 5) : 0;
    s.ended = PQnfields(res) > 5 && dx__col_i64(res, i, 5) != 0; /* renewals report it */
    if (cb(ud, &s)) break;
  }
}

int dx__pg_renew_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                          int64_t extend_ms, int64_t idle_ms, dx_session_cb cb, void *ud,
                          uint64_t *renewed, dx_error_t *err) {
  PGresult *res = NULL;
  qp_t q;
  int rc;
  if (renewed) *renewed = 0;
  if ((rc = dx__check_worker_id(worker_id, err))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, worker_id);
  dx__qp_i64(&q, now);
  dx__qp_i64(&q, dx__sat_add(now, extend_ms));
  dx__qp_i64(&q, idle_ms);
  rc = dx__pg_one((pg_t *)pp, 1, PQ_SESS_RENEW, &q, &res, err);
  if (!rc) {
    if (renewed) *renewed = (uint64_t)PQntuples(res);
    report(res, cb, ud); /* after the commit: callbacks may call the provider */
  }
  PQclear(res);
  return rc;
}

int dx__pg_release_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                            const char *session_id, uint64_t *released, dx_error_t *err) {
  PGresult *res = NULL;
  tx_t t;
  qp_t q;
  int rc;
  if (released) *released = 0;
  if ((rc = dx__check_worker_id(worker_id, err)) || (rc = dx__pg_tx_begin((pg_t *)pp, &t, err)))
    return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, worker_id);
  dx__qp_i64(&q, now);
  dx__qp_str(&q, session_id);
  rc = dx__pg_q(&t, PQ_SESS_RELEASE, &q, &res);
  if (!rc) dx__pg_tx_notify(&t); /* released sessions are claimable at once */
  rc = dx__pg_tx_end(&t, rc);
  if (!rc && released) *released = (uint64_t)strtoull(PQcmdTuples(res), NULL, 10);
  PQclear(res);
  return rc;
}

int dx__pg_cleanup_sessions(dx_provider_t *pp, int64_t now, uint64_t *deleted, dx_error_t *err) {
  PGresult *res = NULL;
  qp_t q;
  int rc;
  qp_t qe;
  tx_t t;
  if (deleted) *deleted = 0;
  dx__qp_init(&q);
  dx__qp_i64(&q, now);
  dx__qp_init(&qe);
  dx__qp_i64(&qe, now - DX_SESSION_EVENTS_MAX_AGE_MS);
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = dx__pg_q(&t, PQ_SESS_CLEANUP, &q, &res);
  if (!rc) rc = dx__pg_q(&t, PQ_SEV_PRUNE, &qe, NULL); /* old session history too */
  rc = dx__pg_tx_end(&t, rc);
  if (!rc && deleted && PQntuples(res) == 1) *deleted = (uint64_t)dx__col_i64(res, 0, 0);
  PQclear(res);
  return rc;
}

int dx__pg_list_sessions(dx_provider_t *pp, dx_session_cb cb, void *ud, dx_error_t *err) {
  PGresult *res = NULL;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  rc = dx__pg_one((pg_t *)pp, 0, PQ_SESS_LIST, NULL, &res, err);
  if (!rc) report(res, cb, ud);
  PQclear(res);
  return rc;
}
