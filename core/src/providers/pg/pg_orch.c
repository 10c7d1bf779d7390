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

int dx__pg_history_decode(tx_t *t, const PGresult *res, int r0, int n, int idc, int recc,
                          const char *inst, uint64_t exec, dx_event_t **out, size_t *nout) {
  dx_event_t *v;
  int rc, i;
  *out = NULL;
  *nout = 0;
  if (!(v = calloc(n ? (size_t)n : 1, sizeof *v))) return dx__pg_nomem(t->err);
  for (i = 0; i < n; i++) {
    dx_error_t derr = {0};
    int r = r0 + i;
    rc = dx__event_decode(PQgetvalue(res, r, recc), (size_t)PQgetlength(res, r, recc), &v[i],
                          &derr);
    if (rc) {
      uint64_t id = (uint64_t)dx__col_i64(res, r, idc);
      dx_events_free(v, (size_t)i);
      if (rc == DX_ENOMEM) return dx__pg_nomem(t->err);
      return dx_error_set(t->err, DX_ECORRUPT,
                          "corrupted record in history (instance '%s' execution %llu event "
                          "%llu): %s", inst, (unsigned long long)exec, (unsigned long long)id,
                          derr.msg);
    }
  }
  *out = v;
  *nout = (size_t)n;
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
  rc = dx__pg_history_decode(t, res, 0, PQntuples(res), 0, 1, inst, exec, out, n);
  PQclear(res);
  return rc;
}

/* {===== enqueue =====} */

/* A START or continue-as-new message: it names the orchestration it runs. */
static int starts_orch(const dx_work_item_t *w) {
  return w->kind == DX_WI_START || w->kind == DX_WI_CAN;
}

/* Store a message and fold its visibility into the instance's queue row (dx_orch_push). */
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
  /* a start names what it runs: fetches skip it on workers without that orchestration */
  dx__qp_str(&q, starts_orch(w) ? w->name : NULL);
  dx__qp_str(&q, starts_orch(w) ? w->version : NULL);
  rc = dx__pg_q(t, PQ_ORCH_PUSH, &q, NULL);
  free(buf);
  if (!rc) dx__pg_tx_notify(t);
  return rc;
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

/* Unlock the instance (dx_orch_release: ready at its earliest remaining message). */
static int orch_release(tx_t *t, const char *inst) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__pg_tx_notify(t); /* messages that came in meanwhile are fetchable now */
  return dx__pg_q(t, PQ_ORCH_RELEASE, &q, NULL);
}

/* {===== fetch =====} */

/* Columns of ORCH_FETCH; row kinds (column F_T). */
enum { F_DUE, F_INST, F_T, F_ID, F_ATT, F_NAME, F_VER, F_BYTES };
enum { T_LOCK, T_MSG, T_INST, T_HIST, T_KV, T_BACK };

static int starts_instance(const dx_work_item_t *w) {
  return w->kind == DX_WI_START || w->kind == DX_WI_CAN;
}

/* Decode the n tagged messages at rows r0.. (oldest first) into it->messages; max attempt. */
static int decode_msgs(tx_t *t, const PGresult *res, int r0, int n, dx_orch_item_t *it) {
  int i, rc;
  if (!(it->messages = calloc(n ? (size_t)n : 1, sizeof *it->messages)))
    return dx__pg_nomem(t->err);
  for (i = 0; i < n; i++) {
    dx_error_t derr = {0};
    int r = r0 + i;
    int64_t attempt = dx__col_i64(res, r, F_ATT);
    if (attempt > (int64_t)it->attempt_count) it->attempt_count = (uint32_t)attempt;
    rc = dx__work_item_decode(PQgetvalue(res, r, F_BYTES), (size_t)PQgetlength(res, r, F_BYTES),
                              &it->messages[i], &derr);
    if (rc == DX_ENOMEM) return dx__pg_nomem(t->err);
    if (rc)
      return dx_error_set(t->err, DX_ECORRUPT,
                          "corrupted record in orch_msgs (instance '%s' message %lld): %s",
                          it->instance, (long long)dx__col_i64(res, r, F_ID), derr.msg);
    it->messages_len++;
  }
  return 0;
}

/* The caller holds exactly the history at rows h0.. (set_history_hint): the statement sent
** only its last event (the history of rows does not start at event 1), or held() says so now
** of the whole history sent (then only the last is decoded). */
static int held_whole(tx_t *t, const dx_orch_item_t *it, const PGresult *res, int h0, int hn) {
  const dx_history_hint_t *h = &t->p->hint;
  uint64_t exec, n;
  if (hn > 0 && dx__col_i64(res, h0, F_ID) > 1) return 1; /* cut by the statement: $7..$9 */
  return h->held && hn > 0 && h->held(h->ud, it->instance, &exec, &n) &&
         exec == it->execution_id && n == (uint64_t)hn &&
         (uint64_t)dx__col_i64(res, h0 + hn - 1, F_ID) == n;
}

/* Name/version (instance record at row irow, else the starting message), execution and
** history (rows h0..h0+hn-1). A history that cannot be decoded is reported in the item with
** the lock kept. */
static int item_fill(tx_t *t, dx_orch_item_t *it, const PGresult *res, int irow, int h0,
                     int hn) {
  const char *name = NULL, *version = NULL;
  dx_error_t herr = {0}, *saved = t->err;
  size_t i;
  int rc;
  if (irow >= 0) {
    name = dx__col_null(res, irow, F_NAME) ? NULL : PQgetvalue(res, irow, F_NAME);
    version = dx__col_null(res, irow, F_VER) ? NULL : PQgetvalue(res, irow, F_VER);
    it->execution_id = (uint64_t)dx__col_i64(res, irow, F_ID);
  } else {
    for (i = 0; i < it->messages_len && !name; i++)
      if (starts_instance(&it->messages[i])) {
        name = it->messages[i].name;
        version = it->messages[i].version;
      }
    it->execution_id = 1;
  }
  if ((name && !(it->orchestration_name = dx__strdup(name))) ||
      (version && !(it->orchestration_version = dx__strdup(version))))
    return dx__pg_nomem(t->err);
  t->err = &herr;
  if (held_whole(t, it, res, h0, hn)) { /* set_history_hint: only the last event */
    h0 += hn - 1;
    hn = 1;
    it->history_held = (uint64_t)dx__col_i64(res, h0, F_ID);
  }
  rc = dx__pg_history_decode(t, res, h0, hn, F_ID, F_BYTES, it->instance, it->execution_id,
                      &it->history, &it->history_len);
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
int dx__pg_orch_park(tx_t *t, const char *inst, uint64_t token, int64_t now) {
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

/* The instance locked at row r0 of `res`, whose rows end before r1. *out stays NULL (and
** *park = 1) when it has nothing to hand out: no visible message, or messages of an instance
** that has not started; the caller then parks or drops them (dx__pg_orch_park). */
static int kv_cmp(const void *a, const void *b) {
  return strcmp(((const dx_kv_entry_t *)a)->key, ((const dx_kv_entry_t *)b)->key);
}

/* The committed key-value entries at rows k0..k0+kn-1 into it->kv, ascending key. */
static int kv_rows(tx_t *t, const PGresult *res, int k0, int kn, dx_orch_item_t *it) {
  int i, oom = 0;
  if (!kn) return 0;
  if (!(it->kv = calloc((size_t)kn, sizeof *it->kv))) return dx__pg_nomem(t->err);
  for (i = 0; i < kn && !oom; i++, it->kv_len++) {
    it->kv[i].key = dx__col_str(res, k0 + i, F_NAME, &oom);
    it->kv[i].value = dx__col_str(res, k0 + i, F_VER, &oom);
    it->kv[i].updated_ms = dx__col_i64(res, k0 + i, F_ID);
  }
  if (oom) return dx__pg_nomem(t->err);
  qsort(it->kv, it->kv_len, sizeof *it->kv, kv_cmp);
  return 0;
}

static int orch_take(tx_t *t, const PGresult *res, int r0, int r1, dx_orch_item_t **out,
                     int *park) {
  dx_orch_item_t *it;
  int rc, r, m0 = r0 + 1, mn = 0, irow = -1, h0 = r1, hn = 0, k0 = r1, kn = 0;
  size_t i;
  int starts = 0, oom = 0;
  *out = NULL;
  *park = 0;
  for (r = r0 + 1; r < r1; r++) {
    int64_t kind = dx__col_i64(res, r, F_T);
    if (kind == T_MSG) mn++;
    else if (kind == T_INST) irow = r;
    else if (kind == T_HIST && hn++ == 0) h0 = r;
    else if (kind == T_KV && kn++ == 0) k0 = r;
  }
  if (!(it = calloc(1, sizeof *it)) || !(it->instance = dx__col_str(res, r0, F_INST, &oom))) {
    free(it);
    return dx__pg_nomem(t->err);
  }
  it->lock_token = (uint64_t)dx__col_i64(res, r0, F_ID);
  if ((rc = decode_msgs(t, res, m0, mn, it))) goto fail;
  for (i = 0; i < it->messages_len; i++) starts |= starts_instance(&it->messages[i]);
  if (it->messages_len == 0 || (irow < 0 && !starts)) {
    dx_orch_item_free(it);
    *park = 1;
    return 0;
  }
  if ((rc = item_fill(t, it, res, irow, h0, hn)) || (rc = kv_rows(t, res, k0, kn, it)))
    goto fail;
  *out = it;
  return 0;
fail:
  dx_orch_item_free(it);
  return rc;
}

/* ORCH_FETCH with its last three parameters: the histories the caller holds ($7 instance
** ids, $8 executions, $9 numbers of events; NULL without a hint), so the statement sends only
** the last event of a held history that the store holds exactly. libpq copies the parameters
** when it queues the statement: the arrays go right after. */
#define HINT_MAX 128
static int send_with_hint(tx_t *t, qp_t *q, PGresult **res) {
  const dx_history_hint_t *h = &t->p->hint;
  char *ids[HINT_MAX];
  uint64_t execs[HINT_MAX], ns[HINT_MAX];
  pg_arr_t a_ids, a_execs, a_ns;
  size_t n = h->recent ? h->recent(h->ud, HINT_MAX, ids, execs, ns) : 0, i;
  int rc;
  dx__arr_init(&a_ids, PG_OID_TEXT);
  dx__arr_init(&a_execs, PG_OID_INT8);
  dx__arr_init(&a_ns, PG_OID_INT8);
  for (i = 0; i < n; i++) {
    dx__arr_str(&a_ids, ids[i]);
    dx__arr_i64(&a_execs, (int64_t)execs[i]);
    dx__arr_i64(&a_ns, (int64_t)ns[i]);
    free(ids[i]);
  }
  if (n && !dx__arr_done(&a_ids, t->err) && !dx__arr_done(&a_execs, t->err) &&
      !dx__arr_done(&a_ns, t->err)) {
    dx__qp_arr(q, &a_ids);
    dx__qp_arr(q, &a_execs);
    dx__qp_arr(q, &a_ns);
  } else { /* no hint (or no memory for it: the whole histories come) */
    dx__qp_str(q, NULL);
    dx__qp_str(q, NULL);
    dx__qp_str(q, NULL);
  }
  rc = dx__pg_qsend(t, PQ_ORCH_FETCH, q, res);
  dx__arr_free(&a_ids);
  dx__arr_free(&a_execs);
  dx__arr_free(&a_ns);
  return rc;
}

/* Queue ORCH_FETCH for up to k due instances (with liveness: this handle's lock held, and
** instances of dead lockers swept first); *res is filled at the next wait. */
int dx__pg_orch_fetch_send(tx_t *t, int64_t now, int64_t lock_ms, int k, PGresult **res) {
  qp_t q;
  int rc;
  if (t->p->liveness) {
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
  dx__qp_str(&q, t->p->cap_names); /* NULL: every instance */
  dx__qp_str(&q, t->p->cap_versions);
  return send_with_hint(t, &q, res);
}

/* The instances ORCH_FETCH locked (res taken), oldest due first, into the connection's buffer
** (c->obuf). Those with nothing to hand out go to parks[] (*n_parks; room for every instance
** the statement could lock) for the caller to park or drop. *picked: instances locked;
** *back: instances put back because their row changed after the statement's snapshot (a
** statement in this transaction later reads them whole). */
int dx__pg_orch_fetch_take(tx_t *t, PGresult *res, int64_t now, int64_t lock_ms,
                           dx__pg_park_t *parks, int *n_parks, int *picked, int *back) {
  pg_conn_t *c = t->c;
  int rc = 0, r, r1, rows = PQntuples(res), n = 0, oom = 0;
  *n_parks = *back = 0;
  for (r = 0; r < rows; r++) {
    int64_t kind = dx__col_i64(res, r, F_T);
    n += kind == T_LOCK;
    *back += kind == T_BACK;
  }
  *picked = n;
  dx__pg_orch_unbuffer_drop(c);
  if (n && !(c->obuf = calloc((size_t)n, sizeof *c->obuf))) {
    PQclear(res);
    return dx__pg_tx_poison(t, dx__pg_nomem(t->err));
  }
  c->obuf_now = now;
  c->obuf_lock = lock_ms;
  for (r = 0; r < rows && !rc; r = r1) { /* one instance: its lock row, then its other rows */
    dx_orch_item_t *it = NULL;
    int park;
    if (dx__col_i64(res, r, F_T) == T_BACK) { /* a put-back instance has this row only */
      r1 = r + 1;
      continue;
    }
    for (r1 = r + 1; r1 < rows && (dx__col_i64(res, r1, F_T) != T_LOCK &&
                                   dx__col_i64(res, r1, F_T) != T_BACK); r1++)
      continue;
    if ((rc = orch_take(t, res, r, r1, &it, &park))) break;
    if (it) c->obuf[c->obuf_n++] = it;
    if (park) {
      parks[*n_parks].token = (uint64_t)dx__col_i64(res, r, F_ID);
      if (!(parks[*n_parks].inst = dx__col_str(res, r, F_INST, &oom))) rc = dx__pg_nomem(t->err);
      else (*n_parks)++;
    }
  }
  PQclear(res);
  return rc ? dx__pg_tx_poison(t, rc) : 0;
}

#define ORCH_PREFETCH 16 /* instances locked per round trip inside a batch */

/* Lock up to `k` due instances and read them in one round trip into the connection's buffer;
** those with nothing to hand out are parked or dropped in the same transaction. *picked
** counts the instances put back too (another statement reads them afresh). */
static int orch_fill(tx_t *t, int64_t now, int64_t lock_ms, int k, int *picked) {
  dx__pg_park_t parks[ORCH_PREFETCH];
  PGresult *res = NULL;
  int rc, i, n_parks = 0, back = 0;
  *picked = 0;
  if ((rc = dx__pg_orch_fetch_send(t, now, lock_ms, k, &res)) || (rc = dx__pg_qwait(t)))
    return rc;
  rc = dx__pg_orch_fetch_take(t, res, now, lock_ms, parks, &n_parks, picked, &back);
  *picked += back;
  for (i = 0; i < n_parks; i++) {
    if (!rc) rc = dx__pg_orch_park(t, parks[i].inst, parks[i].token, now);
    free(parks[i].inst);
  }
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
  ** round that locked some but kept none (all cleaned up, or put back: then this
  ** transaction holds their rows, so the next round's snapshot sees them whole) picks again */
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

/* The array parameters of dx_ack_orchs after p_now, in call order (see PQ_ACK_ORCH): per ack
** (B_INST .. B_FOLD, element k for the k-th ack sent), then the acks' events, worker rows,
** cancelled rows, messages, started ids and key-value events, each element with its ack's k. */
enum { B_INST, B_TOKEN, B_EXEC, B_DUP, B_NAME, B_VERSION, B_CSSET, B_CS, B_PARENT, B_STATUS,
       B_OUTPUT, B_FCAT, B_FKIND, B_FMSG, B_FRETRY, B_FOLD,
       B_EK, B_EID, B_EREC,
       B_WK, B_WSID, B_WINST, B_WEXEC, B_WACT, B_WKIND, B_WITEM, B_WTAG,
       B_CK, B_CINST, B_CEXEC, B_CACT,
       B_OK, B_OINST, B_OVIS, B_OITEM, B_OSNAME, B_OSVER,
       B_SK, B_SINST,
       B_KK, B_KOP, B_KKEY, B_KVAL, B_KAT,
       B__N };
#define I8 PG_OID_INT8
#define TX PG_OID_TEXT
#define BY PG_OID_BYTEA
static const int ack_arr_oid[B__N] = {
  TX, I8, I8, I8, TX, TX, I8, TX, TX, I8, TX, I8, TX, TX, I8, I8,
  I8, I8, BY,
  I8, TX, TX, I8, I8, I8, BY, TX,
  I8, TX, I8, I8,
  I8, TX, I8, BY, TX, TX,
  I8, TX,
  I8, I8, TX, TX, I8};
#undef I8
#undef TX
#undef BY

/* Append the encoding of event or item `v` to a bytea array (enc: the codec's encoder). */
#define ARR_ENCODED(arr, enc, v)                                                           \
  do {                                                                                     \
    char *buf_;                                                                            \
    size_t len_;                                                                           \
    if (enc((v), &buf_, &len_)) (arr)->oom = 1;                                             \
    else {                                                                                 \
      dx__arr_bytes((arr), buf_, len_);                                                    \
      free(buf_);                                                                          \
    }                                                                                      \
  } while (0)

/* Append ack `a` as the k-th of the call: its scalars, delta events, worker rows, cancelled
** rows, orchestrator messages and key-value events (op 0 set or clear (value NULL), 1 clear
** all). Free text goes as PostgreSQL takes it (dx__arr_str: pg_internal.h dx__pg_text). */
static void ack_append(int64_t now, const dx_orch_ack_t *a, int64_t k, pg_arr_t *v) {
  const dx_failure_t *f = a->status != DX_STATUS_NONE ? a->failure : NULL;
  size_t i;
  dx__arr_str(&v[B_INST], a->instance);
  dx__arr_i64(&v[B_TOKEN], (int64_t)a->lock_token);
  dx__arr_i64(&v[B_EXEC], (int64_t)a->execution_id);
  dx__arr_i64(&v[B_DUP], (int64_t)repeated_id(a->delta, a->delta_len));
  dx__arr_str(&v[B_NAME], a->orchestration_name);
  dx__arr_str(&v[B_VERSION], a->orchestration_name ? a->orchestration_version : NULL);
  dx__arr_i64(&v[B_CSSET], a->custom_status_set ? 1 : 0);
  dx__arr_str(&v[B_CS], a->custom_status_set ? a->custom_status : NULL);
  dx__arr_str(&v[B_PARENT], a->parent_instance);
  dx__arr_i64(&v[B_STATUS], a->status);
  dx__arr_str(&v[B_OUTPUT], a->status != DX_STATUS_NONE ? a->output : NULL);
  dx__arr_i64(&v[B_FCAT], f ? f->category : 0);
  dx__arr_str(&v[B_FKIND], f ? f->kind : NULL);
  dx__arr_str(&v[B_FMSG], f ? f->message : NULL);
  dx__arr_i64(&v[B_FRETRY], f ? f->retryable : 0);
  dx__arr_i64(&v[B_FOLD], dx__kv_folds(a->status)); /* the execution's KV changes fold in */
  for (i = 0; i < a->delta_len; i++) {
    const dx_event_t *e = &a->delta[i];
    dx__arr_i64(&v[B_EK], k);
    dx__arr_i64(&v[B_EID], (int64_t)e->event_id);
    ARR_ENCODED(&v[B_EREC], dx__event_encode, e);
    if (e->kind != DX_EV_KV_SET && e->kind != DX_EV_KV_CLEARED && e->kind != DX_EV_KV_CLEARED_ALL)
      continue;
    dx__arr_i64(&v[B_KK], k);
    dx__arr_i64(&v[B_KOP], e->kind == DX_EV_KV_CLEARED_ALL);
    dx__arr_str(&v[B_KKEY], e->name);
    dx__arr_str(&v[B_KVAL], e->kind == DX_EV_KV_SET ? e->data : NULL);
    dx__arr_i64(&v[B_KAT], e->timestamp_ms);
  }
  for (i = 0; i < a->worker_items_len; i++) {
    const dx_work_item_t *w = &a->worker_items[i];
    dx__arr_i64(&v[B_WK], k);
    dx__arr_str(&v[B_WSID], w->session_id);
    dx__arr_str(&v[B_WINST], w->instance);
    dx__arr_i64(&v[B_WEXEC], (int64_t)w->execution_id);
    dx__arr_i64(&v[B_WACT], (int64_t)w->id);
    dx__arr_i64(&v[B_WKIND], w->kind);
    ARR_ENCODED(&v[B_WITEM], dx__work_item_encode, w);
    dx__arr_str(&v[B_WTAG], w->tag);
  }
  for (i = 0; i < a->cancelled_len; i++) {
    dx__arr_i64(&v[B_CK], k);
    dx__arr_str(&v[B_CINST], a->cancelled[i].instance);
    dx__arr_i64(&v[B_CEXEC], (int64_t)a->cancelled[i].execution_id);
    dx__arr_i64(&v[B_CACT], (int64_t)a->cancelled[i].activity_id);
  }
  for (i = 0; i < a->orch_items_len; i++) {
    const dx_work_item_t *w = &a->orch_items[i];
    dx__arr_i64(&v[B_OK], k);
    dx__arr_str(&v[B_OINST], w->instance);
    dx__arr_i64(&v[B_OVIS], dx__visible_at(w, now, 0));
    ARR_ENCODED(&v[B_OITEM], dx__work_item_encode, w);
    dx__arr_str(&v[B_OSNAME], starts_orch(w) ? w->name : NULL);
    dx__arr_str(&v[B_OSVER], starts_orch(w) ? w->version : NULL);
    if (w->kind != DX_WI_START) continue;
    dx__arr_i64(&v[B_SK], k); /* a child's id is taken too */
    dx__arr_str(&v[B_SINST], w->instance);
  }
}

/* The orchestration acks among acks[0..n) that are sent: those with no input error. */
static int orch_sent(const dx_cycle_ack_t *a) { return a->orch && a->rc == 0; }

int dx__pg_ack_orchs_send(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n,
                          PGresult **res, size_t *used) {
  pg_arr_t v[B__N];
  qp_t q;
  size_t i, bytes = 0;
  int64_t k = 0;
  int rc = 0, j;
  *res = NULL;
  *used = n;
  for (i = 0; i < n; i++) k += orch_sent(&acks[i]);
  if (k == 0) return 0;
  for (j = 0; j < B__N; j++) dx__arr_init(&v[j], ack_arr_oid[j]);
  for (i = 0, k = 0; i < n; i++) {
    if (!orch_sent(&acks[i])) continue;
    if (k && bytes >= dx__pg_ack_call_bytes) break; /* the rest: another call */
    ack_append(now, acks[i].orch, ++k, v);
    for (j = 0, bytes = 0; j < B__N; j++) bytes += v[j].len;
  }
  *used = i;
  for (j = 0; j < B__N && !rc; j++) rc = dx__arr_done(&v[j], t->err);
  if (!rc) {
    dx__qp_init(&q);
    dx__qp_i64(&q, now);
    for (j = 0; j < B__N; j++) dx__qp_arr(&q, &v[j]);
    rc = dx__pg_qsend(t, PQ_ACK_ORCH, &q, res);
    if (!rc) dx__pg_tx_notify(t); /* instances released, messages and rows queued */
  } else {
    rc = dx__pg_tx_poison(t, rc);
  }
  for (j = 0; j < B__N; j++) dx__arr_free(&v[j]);
  return rc;
}

/* Ack a's outcome (row `row` of dx_ack_orchs: k, code, detail, detail): 0, or the expected
** failure, which wrote nothing. */
static int orch_outcome(tx_t *t, int64_t now, const dx_orch_ack_t *a, PGresult *res, int row) {
  int64_t code = dx__col_i64(res, row, 1), x = dx__col_i64(res, row, 2);
  int64_t y = dx__col_i64(res, row, 3);
  if (code == 1)
    return dx_error_set(t->err, DX_ETOKEN, "instance '%s' is not locked with token %llx",
                        a->instance, (unsigned long long)a->lock_token);
  if (code == 2)
    return dx_error_set(t->err, DX_ELOCK, "the lock on instance '%s' expired at %lld (now %lld)",
                        a->instance, (long long)y, (long long)now);
  if (code == 3)
    return dx_error_set(t->err, DX_EEXIST,
                        "event %llu already exists in instance '%s' execution %llu",
                        (unsigned long long)x, a->instance, (unsigned long long)a->execution_id);
  return 0;
}

void dx__pg_ack_orchs_take(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n, PGresult *res) {
  size_t i;
  int row = 0, sent = 0, bad;
  for (i = 0; i < n; i++) sent += orch_sent(&acks[i]);
  bad = sent && (!res || PQntuples(res) != sent);
  for (i = 0; i < n; i++) {
    dx_cycle_ack_t *a = &acks[i];
    tx_t ta = *t;
    if (!orch_sent(a)) continue;
    ta.err = &a->err;
    if (bad)
      a->rc = dx__pg_tx_poison(&ta, dx_error_set(&a->err, DX_ESTORE, "ack of instance '%s': no "
                                                 "outcome from dx_ack_orchs", a->orch->instance));
    else a->rc = orch_outcome(&ta, now, a->orch, res, row++);
  }
  PQclear(res);
}

static int orch_ack(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  dx_cycle_ack_t one;
  PGresult *res = NULL;
  int rc;
  size_t used;
  memset(&one, 0, sizeof one);
  one.orch = a;
  if ((rc = dx__pg_ack_orchs_send(t, now, &one, 1, &res, &used)) || (rc = dx__pg_qwait(t))) {
    PQclear(res);
    return rc;
  }
  dx__pg_ack_orchs_take(t, now, &one, 1, res);
  if (one.rc && t->err) *t->err = one.err;
  return one.rc;
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
