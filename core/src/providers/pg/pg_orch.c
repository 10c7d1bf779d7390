/*
** pg_orch.c -- the orchestrator queue on PostgreSQL: enqueue, fetch (lock an instance and its
** visible messages), ack (commit a turn), abandon, renew; argument checks; history rows.
**
** Expected failures (wrong token, expired lock, duplicate event) are found before anything
** is written, so they leave a batch usable without savepoints.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "providers/checks.h"
#include "providers/pg/pg_internal.h"
#include "util.h"

/* {===== history =====} */

/* The first event id repeated within `ev`, else 0. */
static uint64_t repeated_id(const dx_event_t *ev, size_t n) {
  size_t i, j;
  for (i = 0; i < n; i++)
    for (j = i + 1; j < n; j++)
      if (ev[i].event_id == ev[j].event_id) return ev[i].event_id;
  return 0;
}

/* Queue the look-up of stored ids among `ev` (*res: min stored id, or NULL row). */
static int dups_send(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev, size_t n,
                     PGresult **res) {
  char *arr, *o;
  qp_t q;
  size_t i;
  int rc;
  *res = NULL;
  if (!n) return 0;
  if (!(arr = malloc(n * 22 + 3))) return dx__pg_nomem(t->err);
  o = arr;
  *o++ = '{';
  for (i = 0; i < n; i++)
    o += sprintf(o, "%s%llu", i ? "," : "", (unsigned long long)ev[i].event_id);
  *o++ = '}';
  *o = 0;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, (int64_t)exec);
  dx__qp_str(&q, arr);
  rc = dx__pg_qsend(t, PQ_HIST_DUPS, &q, res);
  free(arr);
  return rc;
}

/* DX_EEXIST naming the first duplicate (repeated in `ev`, else stored per `res`); takes res. */
static int dups_check(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev, size_t n,
                      PGresult *res) {
  uint64_t dup = repeated_id(ev, n);
  if (!dup && res) dup = (uint64_t)dx__col_i64(res, 0, 0);
  PQclear(res);
  if (dup)
    return dx_error_set(t->err, DX_EEXIST,
                        "event %llu already exists in instance '%s' execution %llu",
                        (unsigned long long)dup, inst, (unsigned long long)exec);
  return 0;
}

int dx__pg_history_dups(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                        size_t n) {
  PGresult *res = NULL;
  int rc = dups_send(t, inst, exec, ev, n, &res);
  if (!rc && n) rc = dx__pg_qwait(t);
  return rc ? rc : dups_check(t, inst, exec, ev, n, res);
}

int dx__pg_history_append(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n) {
  size_t i;
  int rc = 0;
  for (i = 0; i < n && !rc; i++) {
    char *buf;
    size_t len;
    qp_t q;
    if (dx__event_encode(&ev[i], &buf, &len)) return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
    dx__qp_init(&q);
    dx__qp_str(&q, inst);
    dx__qp_i64(&q, (int64_t)exec);
    dx__qp_i64(&q, (int64_t)ev[i].event_id);
    dx__qp_bin(&q, buf, len);
    rc = dx__pg_q(t, PQ_HIST_INSERT, &q, NULL);
    free(buf);
  }
  return rc;
}

/* Decode history rows (event_id, rec) of `inst`/`exec`; takes `res`. DX_ECORRUPT names the
** undecodable event. */
static int history_decode(tx_t *t, PGresult *res, const char *inst, uint64_t exec,
                          dx_event_t **out, size_t *n) {
  dx_event_t *v;
  int rc, i, rows = PQntuples(res);
  *out = NULL;
  *n = 0;
  if (!(v = calloc(rows ? (size_t)rows : 1, sizeof *v))) {
    PQclear(res);
    return dx__pg_nomem(t->err);
  }
  for (i = 0; i < rows; i++) {
    dx_error_t derr = {0};
    rc = dx__event_decode(PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1), &v[i], &derr);
    if (rc) {
      uint64_t id = (uint64_t)dx__col_i64(res, i, 0);
      dx_events_free(v, (size_t)i);
      PQclear(res);
      if (rc == DX_ENOMEM) return dx__pg_nomem(t->err);
      return dx_error_set(t->err, DX_ECORRUPT,
                          "corrupted record in history (instance '%s' execution %llu event "
                          "%llu): %s", inst, (unsigned long long)exec, (unsigned long long)id,
                          derr.msg);
    }
  }
  PQclear(res);
  *out = v;
  *n = (size_t)rows;
  return 0;
}

/* Events of one execution, ascending event_id. */
int dx__pg_history_load(tx_t *t, const char *inst, uint64_t exec, dx_event_t **out, size_t *n) {
  PGresult *res;
  qp_t q;
  int rc;
  *out = NULL;
  *n = 0;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, (int64_t)exec);
  if ((rc = dx__pg_q(t, PQ_HIST_LOAD, &q, &res))) return rc;
  return history_decode(t, res, inst, exec, out, n);
}

/* {===== enqueue =====} */

/* Store a message and fold its visibility into the instance's queue row (always: a release
** running concurrently re-reads that row, so the message is never stranded). */
int dx__pg_orch_enqueue(tx_t *t, const dx_work_item_t *w, int64_t visible_at) {
  char *buf;
  size_t len;
  qp_t q;
  int rc;
  if (dx__work_item_encode(w, &buf, &len)) return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  dx__qp_init(&q);
  dx__qp_str(&q, w->instance);
  dx__qp_i64(&q, visible_at);
  dx__qp_bin(&q, buf, len);
  rc = dx__pg_q(t, PQ_ORCH_ENQ_MSG, &q, NULL);
  free(buf);
  if (rc) return rc;
  dx__pg_tx_notify(t);
  q.n = 2;
  return dx__pg_q(t, PQ_ORCH_ENQ_QUEUE, &q, NULL);
}

/* A client START takes the id in `started` first: DX_EEXIST (nothing written) when the id was
** started before or has an instance record. Two racing clients serialize on the key. */
static int start_unique(tx_t *t, const dx_work_item_t *w) {
  PGresult *res;
  qp_t q;
  int rc, taken;
  if (w->kind != DX_WI_START) return 0;
  dx__qp_init(&q);
  dx__qp_str(&q, w->instance);
  if ((rc = dx__pg_q(t, PQ_START_CLAIM, &q, &res))) return rc;
  taken = PQntuples(res) == 0;
  PQclear(res);
  return taken ? dx_error_set(t->err, DX_EEXIST, "instance '%s' already exists", w->instance)
               : 0;
}

int dx__pg_enqueue_orch(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                        int64_t delay_ms, dx_error_t *err) {
  tx_t t;
  int rc;
  if ((rc = dx__check_item(item, err)) || (rc = dx__check_payload(item, err)) ||
      (rc = dx__pg_tx_begin((pg_t *)pp, &t, err)))
    return rc;
  rc = start_unique(&t, item);
  if (!rc) rc = dx__pg_orch_enqueue(&t, item, dx__visible_at(item, now, delay_ms));
  return dx__pg_tx_end(&t, rc);
}

/* {===== lock checks and release =====} */

/* Queue the lock check of `inst` (locks its queue row). */
static int lock_send(tx_t *t, const char *inst, PGresult **res) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  return dx__pg_qsend(t, PQ_ORCH_CHECK, &q, res);
}

/* Unknown or other token -> DX_ETOKEN; expired (when need_live) -> DX_ELOCK. Takes res. */
static int lock_check(tx_t *t, PGresult *res, const char *inst, uint64_t token, int64_t now,
                      int need_live) {
  int found = PQntuples(res) == 1;
  uint64_t have = found ? (uint64_t)dx__col_i64(res, 0, 0) : 0;
  int64_t until = found ? dx__col_i64(res, 0, 1) : 0;
  PQclear(res);
  if (!found || token == 0 || have != token)
    return dx_error_set(t->err, DX_ETOKEN, "instance '%s' is not locked with token %llx", inst,
                        (unsigned long long)token);
  if (need_live && until <= now)
    return dx_error_set(t->err, DX_ELOCK, "the lock on instance '%s' expired at %lld (now %lld)",
                        inst, (long long)until, (long long)now);
  return 0;
}

static int orch_check_lock(tx_t *t, const char *inst, uint64_t token, int64_t now,
                           int need_live) {
  PGresult *res;
  int rc = lock_send(t, inst, &res);
  if (!rc) rc = dx__pg_qwait(t);
  return rc ? rc : lock_check(t, res, inst, token, now, need_live);
}

/* Unlock the instance: ready at its earliest remaining message (or at what concurrent
** enqueuers folded in); the row goes when nothing is left. */
static int orch_release(tx_t *t, const char *inst) {
  qp_t q;
  int rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  if ((rc = dx__pg_q(t, PQ_ORCH_RELEASE, &q, NULL))) return rc;
  dx__pg_tx_notify(t); /* messages that came in meanwhile are fetchable now */
  return dx__pg_q(t, PQ_ORCH_DROP_EMPTY, &q, NULL);
}

/* {===== fetch =====} */

typedef struct {
  int64_t seq;
  int64_t attempt;
  int row;
} mark_t;

static int mark_cmp(const void *a, const void *b) {
  int64_t x = ((const mark_t *)a)->seq, y = ((const mark_t *)b)->seq;
  return x < y ? -1 : x > y;
}

static int starts_instance(const dx_work_item_t *w) {
  return w->kind == DX_WI_START || w->kind == DX_WI_CAN;
}

/* Decode the marked messages oldest first into it->messages; max attempt. */
static int decode_batch(tx_t *t, PGresult *res, dx_orch_item_t *it) {
  int n = PQntuples(res), i, rc;
  mark_t *m = calloc(n ? (size_t)n : 1, sizeof *m);
  if (!m || !(it->messages = calloc(n ? (size_t)n : 1, sizeof *it->messages))) {
    free(m);
    return dx__pg_nomem(t->err);
  }
  for (i = 0; i < n; i++) {
    m[i].seq = dx__col_i64(res, i, 0);
    m[i].attempt = dx__col_i64(res, i, 1);
    m[i].row = i;
  }
  qsort(m, (size_t)n, sizeof *m, mark_cmp);
  for (i = 0; i < n; i++) {
    dx_error_t derr = {0};
    int r = m[i].row;
    if (m[i].attempt > (int64_t)it->attempt_count) it->attempt_count = (uint32_t)m[i].attempt;
    rc = dx__work_item_decode(PQgetvalue(res, r, 2), (size_t)PQgetlength(res, r, 2),
                              &it->messages[i], &derr);
    if (rc) {
      long long seq = (long long)m[i].seq;
      free(m);
      if (rc == DX_ENOMEM) return dx__pg_nomem(t->err);
      return dx_error_set(t->err, DX_ECORRUPT,
                          "corrupted record in orch_msgs (instance '%s' message %lld): %s",
                          it->instance, seq, derr.msg);
    }
    it->messages_len++;
  }
  free(m);
  return 0;
}

/* Name/version (instance record, else the starting message), execution and history (rows of
** `hist`, which it takes). A history that cannot be decoded is reported in the item with the
** lock kept. */
static int item_fill(tx_t *t, dx_orch_item_t *it, PGresult *inst, PGresult *hist) {
  const char *name = NULL, *version = NULL;
  dx_error_t herr = {0}, *saved = t->err;
  size_t i;
  int rc;
  if (inst) {
    name = dx__col_null(inst, 0, 0) ? NULL : PQgetvalue(inst, 0, 0);
    version = dx__col_null(inst, 0, 1) ? NULL : PQgetvalue(inst, 0, 1);
    it->execution_id = (uint64_t)dx__col_i64(inst, 0, 2);
  } else {
    for (i = 0; i < it->messages_len && !name; i++)
      if (starts_instance(&it->messages[i])) {
        name = it->messages[i].name;
        version = it->messages[i].version;
      }
    it->execution_id = 1;
  }
  if ((name && !(it->orchestration_name = dx__strdup(name))) ||
      (version && !(it->orchestration_version = dx__strdup(version)))) {
    PQclear(hist);
    return dx__pg_nomem(t->err);
  }
  t->err = &herr;
  rc = history_decode(t, hist, it->instance, it->execution_id, &it->history, &it->history_len);
  t->err = saved;
  if (rc == DX_ECORRUPT) {
    it->history_error = DX_ECORRUPT;
    return (it->history_error_msg = dx__strdup(herr.msg)) ? 0 : dx__pg_nomem(t->err);
  }
  if (rc) dx_error_set(t->err, rc, "%s", herr.msg);
  return rc;
}

/* The earliest visible_at of a start (START or CAN) of `inst` queued for later than `now`, or
** -1 when there is none. */
static int queued_start_at(tx_t *t, const char *inst, int64_t now, int64_t *at) {
  PGresult *res;
  qp_t q;
  int rc, i, n;
  *at = -1;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, now);
  if ((rc = dx__pg_q(t, PQ_ORCH_LATER_MSGS, &q, &res))) return rc;
  n = PQntuples(res);
  for (i = 0; i < n && *at < 0; i++) { /* oldest first: the first start is the earliest */
    dx_work_item_t w;
    dx_error_t derr = {0};
    rc = dx__work_item_decode(PQgetvalue(res, i, 1), (size_t)PQgetlength(res, i, 1), &w, &derr);
    if (rc == DX_ENOMEM) rc = dx__pg_nomem(t->err);
    else if (rc)
      rc = dx_error_set(t->err, DX_ECORRUPT, "corrupted record in orch_msgs (instance '%s'): %s",
                        inst, derr.msg);
    if (rc) break;
    if (starts_instance(&w)) *at = dx__col_i64(res, i, 0);
    dx_work_item_clear(&w);
  }
  PQclear(res);
  return rc;
}

/* Messages of an instance with no record and no visible start: when a start handed back with
** a delay is queued they wait for it, unmarked (issue 7.1); otherwise they are orphans and are
** dropped instead of sitting at the head of the queue (the reference's starvation quirk). */
static int orch_park_or_drop(tx_t *t, const char *inst, uint64_t token, int64_t now) {
  qp_t q;
  int64_t start_at;
  int rc = queued_start_at(t, inst, now, &start_at);
  if (rc) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, (int64_t)token);
  if (start_at < 0) {
    rc = dx__pg_q(t, PQ_ORCH_DEL_BATCH, &q, NULL);
    return rc ? rc : orch_release(t, inst);
  }
  dx__qp_str(&q, NULL);
  dx__qp_i64(&q, 1); /* as if never fetched: undo the attempt */
  if ((rc = dx__pg_q(t, PQ_ORCH_ABANDON_MSGS, &q, NULL))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, start_at);
  dx__pg_tx_notify(t); /* sleepers recompute their next due time */
  return dx__pg_q(t, PQ_ORCH_WAIT, &q, NULL);
}

/* Instance `inst` was just locked with `token`; res, ir, hist and kv (taken) are its tagged
** messages, record, history and committed key-value state. *out stays NULL when it had
** nothing to hand out (no visible message, or messages of an instance that has not started:
** see orch_park_or_drop). */
static int orch_take(tx_t *t, const char *inst, uint64_t token, int64_t now, PGresult *res,
                     PGresult *ir, PGresult *hist, PGresult *kv, dx_orch_item_t **out) {
  dx_orch_item_t *it;
  size_t i;
  int rc, starts = 0;
  if (!(it = calloc(1, sizeof *it)) || !(it->instance = dx__strdup(inst))) {
    free(it);
    rc = dx__pg_tx_poison(t, dx__pg_nomem(t->err));
    goto done;
  }
  it->lock_token = token;
  if ((rc = decode_batch(t, res, it))) goto fail;
  for (i = 0; i < it->messages_len; i++) starts |= starts_instance(&it->messages[i]);
  if (it->messages_len == 0 || (PQntuples(ir) == 0 && !starts)) {
    dx_orch_item_free(it);
    rc = orch_park_or_drop(t, inst, token, now);
    goto done;
  }
  rc = item_fill(t, it, PQntuples(ir) ? ir : NULL, hist);
  hist = NULL;
  if (!rc) rc = dx__pg_kv_take(t, kv, it);
  kv = NULL;
  if (rc) goto fail;
  *out = it;
  goto done;
fail:
  dx_orch_item_free(it);
  dx__pg_tx_poison(t, rc);
done:
  PQclear(res);
  PQclear(ir);
  PQclear(hist);
  PQclear(kv);
  return rc;
}

#define ORCH_PREFETCH 16 /* instances locked per round trip inside a batch */

typedef struct {
  char *inst;
  uint64_t token;
  int64_t due;
} picked_t;

static int picked_cmp(const void *a, const void *b) {
  const picked_t *x = a, *y = b;
  if (x->due != y->due) return x->due < y->due ? -1 : 1;
  return strcmp(x->inst, y->inst);
}

/* Lock up to `k` due instances and read them all in one round trip; the items that have
** something to hand out go, oldest due first, into the connection's buffer. */
static int orch_fill(tx_t *t, int64_t now, int64_t lock_ms, int k, int *picked_n) {
  PGresult *res, **r = NULL;
  picked_t *v = NULL;
  pg_conn_t *c = t->c;
  qp_t q;
  int rc, n, i, oom = 0;
  *picked_n = 0;
  if (t->p->liveness) { /* hold this handle's lock; sweep instances of dead lockers */
    if ((rc = dx__pg_live_hold(t->p, t->p->proc_tag, t->err))) return rc;
    if (dx__pg_live_sweep_due(t->p, &t->p->reaped_orch_at, now)) {
      dx__qp_init(&q);
      dx__qp_i64(&q, now);
      dx__qp_str(&q, t->p->proc_tag);
      dx__qp_str(&q, t->p->live_prefix);
      if ((rc = dx__pg_qsend(t, PQ_ORCH_REAP, &q, NULL))) return rc;
    }
  }
  dx__qp_init(&q);
  dx__qp_i64(&q, now);
  dx__qp_i64(&q, dx__sat_add(now, lock_ms));
  dx__qp_i64(&q, k);
  dx__qp_str(&q, t->p->liveness ? t->p->proc_tag : NULL);
  if ((rc = dx__pg_q(t, PQ_ORCH_PICK, &q, &res))) return rc;
  n = PQntuples(res);
  if (n && !(v = calloc((size_t)n, sizeof *v))) oom = 1;
  for (i = 0; i < n && !oom; i++) {
    v[i].inst = dx__col_str(res, i, 0, &oom);
    v[i].token = (uint64_t)dx__col_i64(res, i, 1);
    v[i].due = dx__col_i64(res, i, 2);
  }
  PQclear(res);
  if (!oom && n) qsort(v, (size_t)n, sizeof *v, picked_cmp);
  if (!oom && n && !(c->obuf = calloc((size_t)n, sizeof *c->obuf))) oom = 1;
  if (!oom && n && !(r = calloc((size_t)n * 4, sizeof *r))) oom = 1;
  if (oom) {
    for (i = 0; v && i < n; i++) free(v[i].inst);
    free(v);
    free(c->obuf);
    c->obuf = NULL;
    return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  }
  *picked_n = n;
  c->obuf_n = c->obuf_next = 0;
  c->obuf_now = now;
  c->obuf_lock = lock_ms;
  for (i = 0; i < n && !rc; i++) { /* one pipeline: every instance's messages, record, history,
                                    ** key-value state */
    qp_t qm, qi;
    dx__qp_init(&qm);
    dx__qp_str(&qm, v[i].inst);
    dx__qp_i64(&qm, (int64_t)v[i].token);
    dx__qp_i64(&qm, now);
    dx__qp_init(&qi);
    dx__qp_str(&qi, v[i].inst);
    if (!(rc = dx__pg_qsend(t, PQ_ORCH_MARK, &qm, &r[4 * i])) &&
        !(rc = dx__pg_qsend(t, PQ_INST_GET, &qi, &r[4 * i + 1])) &&
        !(rc = dx__pg_qsend(t, PQ_HIST_LOAD_CUR, &qi, &r[4 * i + 2])))
      rc = dx__pg_qsend(t, PQ_KV_SNAPSHOT, &qi, &r[4 * i + 3]);
  }
  if (!rc && n) rc = dx__pg_qwait(t);
  for (i = 0; i < n; i++) {
    dx_orch_item_t *it = NULL;
    if (!rc) {
      rc = orch_take(t, v[i].inst, v[i].token, now, r[4 * i], r[4 * i + 1], r[4 * i + 2],
                     r[4 * i + 3], &it);
    } else {
      int j;
      for (j = 0; j < 4; j++) PQclear(r[4 * i + j]);
    }
    if (it) c->obuf[c->obuf_n++] = it;
    free(v[i].inst);
  }
  free(r);
  free(v);
  return rc;
}

void dx__pg_orch_unbuffer_drop(pg_conn_t *c) {
  tx_t t;
  memset(&t, 0, sizeof t);
  t.c = c;
  dx__pg_orch_unbuffer(&t, 0);
}

int dx__pg_orch_unbuffer(tx_t *t, int release) {
  pg_conn_t *c = t->c;
  int rc = 0, i;
  for (i = c->obuf_next; i < c->obuf_n; i++) {
    dx_orch_item_t *it = c->obuf[i];
    if (release && !rc) { /* as if never fetched: unmark, undo the attempt, unlock */
      qp_t q;
      dx__qp_init(&q);
      dx__qp_str(&q, it->instance);
      dx__qp_i64(&q, (int64_t)it->lock_token);
      dx__qp_str(&q, NULL);
      dx__qp_i64(&q, 1);
      rc = dx__pg_q(t, PQ_ORCH_ABANDON_MSGS, &q, NULL);
      if (!rc) rc = orch_release(t, it->instance);
    }
    dx_orch_item_free(it);
  }
  free(c->obuf);
  c->obuf = NULL;
  c->obuf_n = c->obuf_next = 0;
  return rc;
}

int dx__pg_fetch_orch(dx_provider_t *pp, int64_t now, int64_t lock_ms, dx_orch_item_t **out,
                      dx_error_t *err) {
  tx_t t;
  pg_conn_t *c;
  int rc, picked;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = NULL;
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  c = t.c;
  if (c->obuf_next < c->obuf_n && (c->obuf_now != now || c->obuf_lock != lock_ms))
    rc = dx__pg_orch_unbuffer(&t, 1); /* locked for another clock: give them back */
  /* a batch locks several instances per round trip and hands them out one per call; a
  ** round that locked some but kept none (all cleaned up) picks again */
  while (!rc && c->obuf_next >= c->obuf_n) {
    dx__pg_orch_unbuffer(&t, 0);
    if ((rc = orch_fill(&t, now, lock_ms, t.own ? 1 : ORCH_PREFETCH, &picked)) || !picked) break;
  }
  if (!rc && c->obuf_next < c->obuf_n) *out = c->obuf[c->obuf_next++];
  if (t.own) dx__pg_orch_unbuffer(&t, 0); /* own transaction: at most one was locked */
  rc = dx__pg_tx_end(&t, rc);
  if (rc && *out) {
    dx_orch_item_free(*out);
    *out = NULL;
  }
  return rc;
}

/* {===== ack =====} */

static int ack_instance(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, a->instance);
  dx__qp_str(&q, a->orchestration_name);
  dx__qp_str(&q, a->orchestration_name ? a->orchestration_version : NULL);
  dx__qp_i64(&q, (int64_t)a->execution_id);
  dx__qp_i64(&q, a->custom_status_set ? 1 : 0);
  dx__qp_str(&q, a->custom_status_set ? a->custom_status : NULL);
  dx__qp_i64(&q, now);
  dx__qp_str(&q, a->parent_instance);
  return dx__pg_q(t, PQ_INST_UPSERT, &q, NULL);
}

static int ack_execution(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  const dx_failure_t *f = a->status != DX_STATUS_NONE ? a->failure : NULL;
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, a->instance);
  dx__qp_i64(&q, (int64_t)a->execution_id);
  dx__qp_i64(&q, a->status);
  dx__qp_str(&q, a->status != DX_STATUS_NONE ? a->output : NULL);
  dx__qp_i64(&q, f ? f->category : 0);
  dx__qp_str(&q, f ? f->kind : NULL);
  dx__qp_str(&q, f ? f->message : NULL);
  dx__qp_i64(&q, f ? f->retryable : 0);
  dx__qp_i64(&q, now);
  return dx__pg_q(t, PQ_EXEC_UPSERT, &q, NULL);
}

static int work_cancel(tx_t *t, const dx_activity_ref_t *ref) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, ref->instance);
  dx__qp_i64(&q, (int64_t)ref->execution_id);
  dx__qp_i64(&q, (int64_t)ref->activity_id);
  return dx__pg_q(t, PQ_WORK_CANCEL, &q, NULL);
}

/* Queue an ack's checks (lock, duplicate events); their results land in chk[0..1] at the
** next wait. run_cycle queues the checks of every ack of a cycle before one wait. */
int dx__pg_ack_orch_send(tx_t *t, const dx_orch_ack_t *a, PGresult **chk) {
  int rc = lock_send(t, a->instance, &chk[0]);
  return rc ? rc : dups_send(t, a->instance, a->execution_id, a->delta, a->delta_len, &chk[1]);
}

/* The ack, given its checks' results (taken): an expected failure writes nothing; the writes
** are only queued (they travel with the transaction's next round trip). */
int dx__pg_ack_orch_finish(tx_t *t, int64_t now, const dx_orch_ack_t *a, PGresult **chk) {
  qp_t q;
  size_t i;
  int rc = lock_check(t, chk[0], a->instance, a->lock_token, now, 1);
  chk[0] = NULL;
  if (rc) {
    PQclear(chk[1]);
    chk[1] = NULL;
    return rc;
  }
  rc = dups_check(t, a->instance, a->execution_id, a->delta, a->delta_len, chk[1]);
  chk[1] = NULL;
  if (rc) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, a->instance);
  dx__qp_i64(&q, (int64_t)a->lock_token);
  if ((rc = dx__pg_q(t, PQ_ORCH_DEL_BATCH, &q, NULL)) || (rc = ack_instance(t, now, a)) ||
      (rc = ack_execution(t, now, a)) ||
      (rc = dx__pg_history_append(t, a->instance, a->execution_id, a->delta, a->delta_len)) ||
      (rc = dx__pg_kv_ack(t, a->instance, a->delta, a->delta_len, a->status)))
    return rc;
  for (i = 0; i < a->worker_items_len && !rc; i++)
    rc = dx__pg_work_insert(t, &a->worker_items[i], now);
  for (i = 0; i < a->cancelled_len && !rc; i++) rc = work_cancel(t, &a->cancelled[i]);
  for (i = 0; i < a->orch_items_len && !rc; i++) {
    const dx_work_item_t *w = &a->orch_items[i];
    rc = dx__pg_orch_enqueue(t, w, dx__visible_at(w, now, 0));
    if (!rc && w->kind == DX_WI_START) { /* a child's id is taken too */
      dx__qp_init(&q);
      dx__qp_str(&q, w->instance);
      rc = dx__pg_q(t, PQ_START_NOTE, &q, NULL);
    }
  }
  return rc ? rc : orch_release(t, a->instance);
}

static int orch_ack(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  PGresult *chk[2] = {NULL, NULL};
  int rc;
  if ((rc = dx__pg_ack_orch_send(t, a, chk)) || (rc = dx__pg_qwait(t))) return rc;
  return dx__pg_ack_orch_finish(t, now, a, chk);
}

int dx__pg_ack_orch(dx_provider_t *pp, int64_t now, const dx_orch_ack_t *ack, dx_error_t *err) {
  tx_t t;
  int rc;
  if ((rc = dx__check_ack(ack, err)) || (rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  return dx__pg_tx_end(&t, orch_ack(&t, now, ack));
}

/* {===== abandon and renew =====} */

static int orch_abandon(tx_t *t, int64_t now, const char *inst, uint64_t token, int64_t delay_ms,
                        int ignore_attempt) {
  qp_t q;
  int rc = orch_check_lock(t, inst, token, now, 0);
  if (rc) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, (int64_t)token);
  if (delay_ms > 0) dx__qp_i64(&q, dx__sat_add(now, delay_ms));
  else dx__qp_str(&q, NULL);
  dx__qp_i64(&q, ignore_attempt ? 1 : 0);
  if ((rc = dx__pg_q(t, PQ_ORCH_ABANDON_MSGS, &q, NULL))) return rc;
  return orch_release(t, inst);
}

int dx__pg_abandon_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                        int64_t delay_ms, int ignore_attempt, dx_error_t *err) {
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__pg_tx_begin((pg_t *)pp, &t, err)))
    return rc;
  return dx__pg_tx_end(&t, orch_abandon(&t, now, instance, token, delay_ms, ignore_attempt));
}

int dx__pg_renew_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                      int64_t extend_ms, dx_error_t *err) {
  tx_t t;
  qp_t q;
  int rc;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__pg_tx_begin((pg_t *)pp, &t, err)))
    return rc;
  rc = orch_check_lock(&t, instance, token, now, 1);
  if (!rc) {
    dx__qp_init(&q);
    dx__qp_str(&q, instance);
    dx__qp_i64(&q, dx__sat_add(now, extend_ms));
    rc = dx__pg_q(&t, PQ_ORCH_RENEW, &q, NULL);
  }
  return dx__pg_tx_end(&t, rc);
}
