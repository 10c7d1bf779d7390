/*
** pg_work.c -- the worker queue and sessions on PostgreSQL.
**
** A session fetch runs under a transaction-scoped advisory lock on the worker id, so every
** claim made under one worker id (several processes with the same id, or a store thread and
** a client thread) is serialized: the live-session count and the claim happen in the fetch's
** own transaction and capacity is never overshot. Claims of one session by different
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

enum { WC_PLAIN, WC_OWNED, WC_CLAIM };

typedef struct {
  int found, kind;
  int64_t seq, due;
  char *sid;
  PGresult *res; /* the claim pick (carries the item kind) */
} cand_t;

static void cand_clear(cand_t *c) {
  free(c->sid);
  PQclear(c->res);
  memset(c, 0, sizeof *c);
}

/* Keep the row of pick result `res` when it is due earlier (then older) than *best; `cols`
** are the seq and due columns. Takes res unless it is the plain pick (the caller's). */
static int consider(tx_t *t, PGresult *res, int kind, int seq_col, cand_t *best) {
  int64_t due, seq;
  int oom = 0;
  if (!res || PQntuples(res) == 0) {
    if (kind != WC_PLAIN) PQclear(res);
    return 0;
  }
  seq = dx__col_i64(res, 0, seq_col);
  due = dx__col_i64(res, 0, seq_col + 1);
  if (best->found && (best->due < due || (best->due == due && best->seq < seq))) {
    if (kind != WC_PLAIN) PQclear(res);
    return 0;
  }
  cand_clear(best);
  best->found = 1;
  best->kind = kind;
  best->seq = seq;
  best->due = due;
  if (kind != WC_PLAIN) best->sid = dx__col_str(res, 0, 2, &oom);
  if (kind == WC_CLAIM) best->res = res;
  else if (kind != WC_PLAIN) PQclear(res);
  return oom ? dx__pg_tx_poison(t, dx__pg_nomem(t->err)) : 0;
}

static int q_seq(tx_t *t, pg_stmt_t id, int64_t seq) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_i64(&q, seq);
  return dx__pg_q(t, id, &q, NULL);
}

static int q_sid(tx_t *t, pg_stmt_t id, const char *sid) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, sid);
  return dx__pg_q(t, id, &q, NULL);
}

static void fetch_reset(dx_work_fetch_t *out) {
  dx_work_item_clear(&out->item);
  free(out->previous_owner);
  memset(out, 0, sizeof *out);
}

/* Hand out row `row` of a lock result (lock_token, attempt, item). */
static int hand_out_row(tx_t *t, PGresult *res, int row, dx_work_fetch_t *out) {
  dx_error_t derr = {0};
  int rc;
  out->lock_token = (uint64_t)dx__col_i64(res, row, 0);
  out->attempt_count = (uint32_t)dx__col_i64(res, row, 1);
  rc = dx__work_item_decode(PQgetvalue(res, row, 2), (size_t)PQgetlength(res, row, 2),
                            &out->item, &derr);
  if (rc == DX_ENOMEM) return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  if (rc)
    return dx__pg_tx_poison(t, dx_error_set(t->err, DX_ECORRUPT,
                                            "corrupted record in work (row %lld): %s",
                                            (long long)out->lock_token, derr.msg));
  return 0;
}

/* Hand out the row locked by `res` (one row or none); takes res. 0 rows: *got 0. */
static int hand_out(tx_t *t, PGresult *res, dx_work_fetch_t *out, int *got) {
  int rc = 0;
  *got = PQntuples(res) == 1;
  if (*got) rc = hand_out_row(t, res, 0, out);
  PQclear(res);
  return rc;
}

/* {===== plain rows locked ahead (inside a batch) =====} */

#define WORK_PREFETCH 16 /* plain rows locked per round trip inside a batch */

static _Thread_local PGresult *g_sort_res; /* qsort's context */

static int row_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  int64_t dx = dx__col_i64(g_sort_res, x, 4), dy = dx__col_i64(g_sort_res, y, 4);
  int64_t sx = dx__col_i64(g_sort_res, x, 3), sy = dx__col_i64(g_sort_res, y, 3);
  if (dx != dy) return dx < dy ? -1 : 1;
  return sx < sy ? -1 : sx > sy;
}

void dx__pg_work_unbuffer_drop(pg_conn_t *c) {
  PQclear(c->wbuf);
  free(c->wrow);
  free(c->wbuf_worker);
  c->wbuf = NULL;
  c->wrow = NULL;
  c->wbuf_worker = NULL;
  c->wbuf_n = c->wbuf_next = 0;
}

int dx__pg_work_unbuffer(tx_t *t, int release) {
  pg_conn_t *c = t->c;
  int rc = 0, i;
  for (i = c->wbuf_next; release && !rc && i < c->wbuf_n; i++)
    rc = q_seq(t, PQ_WORK_UNLOCK, dx__col_i64(c->wbuf, c->wrow[i], 3));
  dx__pg_work_unbuffer_drop(c);
  return rc;
}

/* Keep the rows of lock result `res` (taken), oldest due first, to hand out one per call;
** the first `skip` of them in that order are handed out or unlocked by the caller. */
static int buffer_rows(tx_t *t, PGresult *res, int64_t now, int64_t lock_ms,
                       const dx_session_cfg_t *cfg) {
  pg_conn_t *c = t->c;
  int i, n = PQntuples(res);
  dx__pg_work_unbuffer_drop(c);
  if (!(c->wrow = malloc((n ? (size_t)n : 1) * sizeof *c->wrow)) ||
      !(c->wbuf_worker = dx__strdup(cfg ? cfg->worker_id : ""))) {
    PQclear(res);
    dx__pg_work_unbuffer_drop(c);
    return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  }
  for (i = 0; i < n; i++) c->wrow[i] = i;
  g_sort_res = res;
  qsort(c->wrow, (size_t)n, sizeof *c->wrow, row_cmp);
  g_sort_res = NULL;
  c->wbuf = res;
  c->wbuf_n = n;
  c->wbuf_next = 0;
  c->wbuf_now = now;
  c->wbuf_lock = lock_ms;
  return 0;
}

/* 1 when the buffer holds rows for a fetch with these parameters. */
static int buffered_for(const pg_conn_t *c, int64_t now, int64_t lock_ms,
                        const dx_session_cfg_t *cfg) {
  return c->wbuf_next < c->wbuf_n && c->wbuf_now == now && c->wbuf_lock == lock_ms &&
         strcmp(c->wbuf_worker, cfg ? cfg->worker_id : "") == 0;
}

/* Take session candidate c: the session side (claim, or record activity on an owned session) and the
** row lock in one round trip; the lock only applies while the session is ours, so a claim
** lost to another worker meanwhile locks nothing (*got 0: pick again). A close marker at the
** head of a session nobody holds has nothing to close: it is dropped, with the session row
** once the session has no rows. */
static int take(tx_t *t, const cand_t *c, int64_t now, int64_t lock_ms,
                const dx_session_cfg_t *cfg, dx_work_fetch_t *out, int *got) {
  PGresult *sess = NULL, *row = NULL;
  qp_t qs, ql;
  int rc, oom = 0;
  *got = 0;
  dx__qp_init(&ql);
  dx__qp_i64(&ql, c->seq);
  dx__qp_i64(&ql, dx__sat_add(now, lock_ms));
  if (c->kind == WC_CLAIM && dx__col_i64(c->res, 0, 3) == DX_WI_SESSION_CLOSE) {
    if ((rc = q_seq(t, PQ_WORK_DEL_ROW, c->seq))) return rc;
    return q_sid(t, PQ_SESS_DROP_IF_EMPTY, c->sid);
  }
  dx__qp_init(&qs);
  dx__qp_str(&qs, c->sid);
  dx__qp_str(&qs, cfg->worker_id);
  dx__qp_i64(&qs, now);
  dx__qp_i64(&qs, dx__sat_add(now, cfg->session_lock_ms));
  dx__qp_str(&ql, c->sid);
  dx__qp_str(&ql, cfg->worker_id);
  if (c->kind == WC_CLAIM) { /* a live lease of a dead owner is claimable (liveness on) */
    dx__qp_str(&qs, t->p->live_prefix);
    dx__qp_i64(&qs, t->p->liveness);
  }
  if ((rc = dx__pg_qsend(t, c->kind == WC_CLAIM ? PQ_SESS_CLAIM : PQ_SESS_OWNED, &qs, &sess)))
    return rc;
  if (c->kind == WC_CLAIM) { /* before our own row lock below: earlier owners' rows */
    qp_t qr;
    dx__qp_init(&qr);
    dx__qp_i64(&qr, now);
    dx__qp_str(&qr, cfg->worker_id);
    dx__qp_str(&qr, c->sid);
    if ((rc = dx__pg_qsend(t, PQ_WORK_REAP_CLAIMED, &qr, NULL))) return rc;
  }
  if ((rc = dx__pg_qsend(t, PQ_WORK_SET_LOCK_OWNED, &ql, &row))) return rc;
  { /* the row's instance joins the session's users (ended sessions, issue 9 item 4) */
    qp_t qu;
    dx__qp_init(&qu);
    dx__qp_str(&qu, c->sid);
    dx__qp_i64(&qu, c->seq);
    if ((rc = dx__pg_qsend(t, PQ_SESS_USER_ADD, &qu, NULL))) return rc;
  }
  if ((rc = dx__pg_qwait(t))) return rc;
  if (c->kind == WC_CLAIM && PQntuples(sess) == 1) {
    out->session_claimed = 1;
    out->waited_ms = now > c->due ? now - c->due : 0;
    out->previous_owner = dx__col_str(sess, 0, 0, &oom);
    if (out->previous_owner && !*out->previous_owner) {
      free(out->previous_owner);
      out->previous_owner = NULL;
    }
  }
  PQclear(sess);
  if (oom) {
    PQclear(row);
    return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  }
  rc = hand_out(t, row, out, got);
  if (!*got) fetch_reset(out);
  return rc;
}

/* Send WORK_FETCH_PLAIN for up to k rows, locked under this handle's liveness tag (liveness
** on); *res receives the lock result at the next wait. */
static int plain_send(tx_t *t, int64_t now, int64_t lock_ms, int k, PGresult **res) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_i64(&q, now);
  dx__qp_i64(&q, dx__sat_add(now, lock_ms));
  dx__qp_i64(&q, k);
  dx__qp_str(&q, t->p->liveness ? t->p->proc_tag : NULL);
  dx__qp_i64(&q, dx_fetch_filter_accepts_tag(t->p->filter, NULL)); /* the tags it takes */
  dx__qp_str(&q, t->p->tags_param);
  return dx__pg_qsend(t, PQ_WORK_FETCH_PLAIN, &q, res);
}

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

/* Queue one round's picks: plain rows (locked at once, speculatively) and, with sessions,
** the oldest owned and claimable session rows (r->claim stays NULL when claims are over for
** this batch); results in r at the next wait. */
static int round_send(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                      int round, int k, dx__pg_wpre_t *r) {
  int rc;
  qp_t qo, qc, qk;
  char *declined;
  if (round == 0 && (rc = reap_send(t, now, cfg))) return rc;
  if (!cfg) return plain_send(t, now, lock_ms, k, &r->plain);
  /* sessions this worker declines (a rolling upgrade): neither picked nor claimed */
  declined = dx__pg_text_array(cfg->declined, cfg->n_declined, sizeof(char *));
  if (!declined) return dx__pg_nomem(t->err);
  dx__qp_init(&qo);
  dx__qp_i64(&qo, now);
  dx__qp_str(&qo, cfg->worker_id);
  dx__qp_str(&qo, declined);
  dx__qp_i64(&qo, dx_fetch_filter_accepts_tag(t->p->filter, NULL));
  dx__qp_str(&qo, t->p->tags_param);
  dx__qp_init(&qc);
  dx__qp_i64(&qc, now);
  dx__qp_str(&qc, cfg->worker_id);
  dx__qp_i64(&qc, (int64_t)cfg->max_sessions);
  dx__qp_str(&qc, t->p->live_prefix);
  dx__qp_i64(&qc, t->p->liveness);
  dx__qp_str(&qc, declined);
  dx__qp_i64(&qc, dx_fetch_filter_accepts_tag(t->p->filter, NULL));
  dx__qp_str(&qc, t->p->tags_param);
  dx__qp_init(&qk);
  dx__qp_i64(&qk, (int64_t)dx__pg_hash(t->p->schema, cfg->worker_id));
  /* the advisory lock serializes every claim made under this worker id (held to the end of
  ** the transaction), so the capacity count and the claim cannot interleave */
  if (!(round == 0 && (rc = dx__pg_qsend(t, PQ_LOCK_KEY, &qk, NULL))) &&
      !(rc = plain_send(t, now, lock_ms, k, &r->plain)) &&
      !(rc = dx__pg_qsend(t, PQ_WORK_PICK_OWNED, &qo, &r->owned)) && !claims_over(t, cfg))
    rc = dx__pg_qsend(t, PQ_WORK_PICK_CLAIM, &qc, &r->claim);
  free(declined); /* the sends copied it */
  return rc;
}

/* Round `round`'s picks, sent and waited for; their results in r. */
static int round_get(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                     int round, dx__pg_wpre_t *r) {
  int rc;
  memset(r, 0, sizeof *r);
  if (!(rc = round_send(t, now, lock_ms, cfg, round, t->c->in_batch ? WORK_PREFETCH : 1, r)))
    rc = dx__pg_qwait(t);
  if (rc) {
    PQclear(r->plain);
    PQclear(r->owned);
    PQclear(r->claim);
    memset(r, 0, sizeof *r);
  }
  return rc;
}

int dx__pg_work_presend(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                        int k, dx__pg_wpre_t *pre) {
  int rc;
  memset(pre, 0, sizeof *pre);
  if (cfg && cfg->max_sessions == 0) cfg = NULL;
  if (cfg && ((rc = dx__check_worker_id(cfg->worker_id, t->err)) ||
              (rc = dx__pg_live_hold(t->p, cfg->worker_id, t->err))))
    return rc;
  if ((rc = round_send(t, now, lock_ms, cfg, 0, k, pre))) return rc;
  pre->sent = 1;
  return 0;
}

/* The oldest session candidate of a round's picks (owned and claim results taken), else
** cd->found = 0. */
static int session_best(tx_t *t, const dx_session_cfg_t *cfg, PGresult *owned,
                        PGresult *claim, cand_t *cd) {
  int rc;
  memset(cd, 0, sizeof *cd);
  if (t->c->in_batch && PQntuples(claim) == 0)
    snprintf(t->c->claim_none, sizeof t->c->claim_none, "%s", cfg->worker_id);
  rc = consider(t, owned, WC_OWNED, 0, cd);
  if (rc) PQclear(claim);
  else rc = consider(t, claim, WC_CLAIM, 0, cd);
  return rc;
}

/* 1 when plain row `row` of the buffer is due before candidate cd (none: always). */
static int plain_first(const pg_conn_t *c, int row, const cand_t *cd) {
  int64_t due = dx__col_i64(c->wbuf, row, 4), seq = dx__col_i64(c->wbuf, row, 3);
  return !cd->found || due < cd->due || (due == cd->due && seq < cd->seq);
}

int dx__pg_work_take_pre(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                         dx__pg_wpre_t *pre, dx_work_fetch_t *out, int max, size_t *n,
                         int *more) {
  pg_conn_t *c = t->c;
  cand_t cd;
  int rc;
  *more = 0;
  memset(&cd, 0, sizeof cd);
  if (cfg && cfg->max_sessions == 0) cfg = NULL;
  if (!pre->plain || (cfg && (!pre->owned || (!pre->claim && !claims_over(t, cfg))))) {
    PQclear(pre->plain);
    PQclear(pre->owned);
    PQclear(pre->claim);
    memset(pre, 0, sizeof *pre);
    return dx_error_set(t->err, DX_ESTORE, "work fetch: results missing");
  }
  rc = buffer_rows(t, pre->plain, now, lock_ms, cfg);
  if (!rc && cfg) rc = session_best(t, cfg, pre->owned, pre->claim, &cd);
  else if (cfg) {
    PQclear(pre->owned);
    PQclear(pre->claim);
  }
  memset(pre, 0, sizeof *pre);
  while (!rc && (int)*n < max && c->wbuf_next < c->wbuf_n &&
         plain_first(c, c->wrow[c->wbuf_next], &cd)) {
    memset(&out[*n], 0, sizeof out[*n]);
    if (!(rc = hand_out_row(t, c->wbuf, c->wrow[c->wbuf_next++], &out[*n]))) (*n)++;
  }
  *more = cd.found;
  cand_clear(&cd);
  return rc;
}

static int work_fetch(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                      dx_work_fetch_t *out) {
  pg_conn_t *c = t->c;
  cand_t cd;
  int rc = 0, round, got = 0;
  memset(&cd, 0, sizeof cd);
  if (cfg && (rc = dx__pg_live_hold(t->p, cfg->worker_id, t->err))) return rc;
  if (c->wbuf_next < c->wbuf_n && !buffered_for(c, now, lock_ms, cfg) &&
      (rc = dx__pg_work_unbuffer(t, 1))) /* locked for another fetch: give them back */
    return rc;
  if (c->wbuf_next < c->wbuf_n) /* locked ahead by an earlier fetch of this batch */
    return hand_out_row(t, c->wbuf, c->wrow[c->wbuf_next++], out);
  dx__pg_work_unbuffer_drop(c);
  if (!cfg) { /* plain rows only: pick and lock in one statement */
    dx__pg_wpre_t r;
    if ((rc = round_get(t, now, lock_ms, cfg, 0, &r))) return rc;
    if (PQntuples(r.plain) == 0) {
      PQclear(r.plain);
      return 0;
    }
    if ((rc = buffer_rows(t, r.plain, now, lock_ms, cfg))) return rc;
    return hand_out_row(t, c->wbuf, c->wrow[c->wbuf_next++], out);
  }
  /* Plain rows are locked speculatively in the same round trip as the session picks (plain
  ** work is the common case). Rows that lose to an older session row, or that might (when
  ** there is session work at all), are unlocked again (queued, no round trip). A round
  ** repeats only after a close marker was dropped or a session was lost meanwhile. */
  for (round = 0; round < 64 && !got; round++) {
    PGresult *plain, *owned, *claim;
    dx__pg_wpre_t r;
    int sessions_due, i;
    cand_clear(&cd);
    if ((rc = round_get(t, now, lock_ms, cfg, round, &r))) break;
    plain = r.plain;
    owned = r.owned;
    claim = r.claim;
    sessions_due = PQntuples(owned) + PQntuples(claim) > 0;
    if ((rc = buffer_rows(t, plain, now, lock_ms, cfg))) {
      PQclear(owned);
      PQclear(claim);
      break;
    }
    /* the oldest plain row competes with the session candidates */
    if (!(rc = session_best(t, cfg, owned, claim, &cd)) && c->wbuf_n &&
        plain_first(c, c->wrow[0], &cd)) {
      rc = hand_out_row(t, c->wbuf, c->wrow[c->wbuf_next++], out);
      got = 1;
    }
    /* keep the rest only when no session row is due: else they may be younger than one */
    for (i = c->wbuf_next; !rc && sessions_due && i < c->wbuf_n; i++)
      rc = q_seq(t, PQ_WORK_UNLOCK, dx__col_i64(c->wbuf, c->wrow[i], 3));
    if (sessions_due) dx__pg_work_unbuffer_drop(c);
    if (rc || !cd.found || got) break;
    if ((rc = take(t, &cd, now, lock_ms, cfg, out, &got))) break;
  }
  cand_clear(&cd);
  if (rc) fetch_reset(out);
  return rc;
}

int dx__pg_fetch_work(dx_provider_t *pp, int64_t now, int64_t lock_ms,
                      const dx_session_cfg_t *sessions, dx_work_fetch_t *out, dx_error_t *err) {
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if (sessions && sessions->max_sessions == 0) sessions = NULL; /* takes no session work */
  if (sessions && (rc = dx__check_worker_id(sessions->worker_id, err))) return rc;
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = work_fetch(&t, now, lock_ms, sessions, out);
  if (t.own) dx__pg_work_unbuffer_drop(t.c); /* own transaction: at most one was locked */
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
