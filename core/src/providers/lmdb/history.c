/*
** history.c -- LMDB provider: history events: append, load, and which execution to read.
*/
#include "lmdb_int.h"

/* {===== history =====} */

static int event_exists(tx_t *t, const char *inst, uint64_t exec, uint64_t id) {
  return dx_error_set(t->err, DX_EEXIST,
                      "event %llu already exists in instance '%s' execution %llu",
                      (unsigned long long)id, inst, (unsigned long long)exec);
}

/* DX_EEXIST when one of the events is stored already: an ack checks before it writes
** anything (it runs in the batch's own txn: LM_WRITE_DIRECT). One cursor seek to the delta's
** lowest id instead of a lookup per event: a delta follows the stored history, so the seek
** normally lands past the delta's highest id (or on another execution) at once. */
int dx__lm_history_unused(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n) {
  uint64_t lo = UINT64_MAX, hi = 0, id;
  MDB_cursor *c;
  MDB_val key, v;
  dkey_t k;
  size_t i, pn;
  int mrc, rc = 0;
  if (n == 0) return 0;
  for (i = 0; i < n; i++) {
    if (ev[i].event_id < lo) lo = ev[i].event_id;
    if (ev[i].event_id > hi) hi = ev[i].event_id;
  }
  key_hist(&k, inst, exec, lo);
  pn = k.n - 8;
  key = kval(&k);
  if ((mrc = mdb_cursor_open(t->txn, t->se->dbi[DB_HISTORY], &c)))
    return dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_HISTORY]);
  for (mrc = mdb_cursor_get(c, &key, &v, MDB_SET_RANGE); mrc == 0 && !rc;
       mrc = mdb_cursor_get(c, &key, &v, MDB_NEXT)) {
    if (key.mv_size < pn || memcmp(key.mv_data, k.b, pn) != 0) break; /* past the exec */
    if (key.mv_size != pn + 8) continue; /* not an event key (`check` reports it) */
    if ((id = get_u64((const char *)key.mv_data + pn)) > hi) break;
    for (i = 0; i < n; i++)
      if (ev[i].event_id == id) rc = event_exists(t, inst, exec, id);
  }
  mdb_cursor_close(c);
  if (rc) return rc;
  if (mrc && mrc != MDB_NOTFOUND) return dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_HISTORY]);
  return 0;
}

int dx__lm_history_append(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    dkey_t k;
    char *buf;
    size_t len;
    int rc;
    if (dx__event_encode(&ev[i], &buf, &len)) return dx__lm_nomem(t->err);
    key_hist(&k, inst, exec, ev[i].event_id);
    rc = dx__lm_db_put(t, DB_HISTORY, &k, buf, len, MDB_NOOVERWRITE);
    free(buf);
    if (rc == DX_EEXIST) return event_exists(t, inst, exec, ev[i].event_id);
    if (rc) return rc;
  }
  return 0;
}

typedef struct {
  const char *inst;
  size_t prefix_n;
  dx_event_t *v;
  size_t n, cap;
} hist_acc_t;

static int history_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  hist_acc_t *h = ud;
  const unsigned char *kb = k->mv_data;
  uint64_t exec = get_u64(kb + h->prefix_n - 8);
  uint64_t id = k->mv_size == h->prefix_n + 8 ? get_u64(kb + h->prefix_n) : 0;
  dx_error_t derr = {0};
  dx_event_t *nv;
  int rc = 0;
  if (!(nv = dx__lm_grow(h->v, &h->cap, h->n, sizeof *h->v))) return dx__lm_nomem(t->err);
  h->v = nv;
  memset(&h->v[h->n], 0, sizeof h->v[h->n]);
  if (k->mv_size == h->prefix_n + 8 &&
      (rc = dx__event_decode(v->mv_data, v->mv_size, &h->v[h->n], &derr)) == DX_ENOMEM)
    return dx__lm_nomem(t->err);
  if (k->mv_size != h->prefix_n + 8 || rc)
    return dx__lm_corrupt(t, DB_HISTORY, k->mv_size != h->prefix_n + 8 ? "bad key" : derr.msg,
                   "instance '%s' execution %llu event %llu", h->inst,
                   (unsigned long long)exec, (unsigned long long)id);
  h->n++;
  return 0;
}

/* Events of one execution, ascending event_id. DX_ECORRUPT names the undecodable event. */
int dx__lm_history_load(tx_t *t, const char *inst, uint64_t exec, dx_event_t **out, size_t *n) {
  hist_acc_t h;
  dkey_t k;
  int rc;
  memset(&h, 0, sizeof h);
  h.inst = inst;
  key_exec(&k, inst, exec);
  h.prefix_n = k.n;
  rc = dx__lm_scan_prefix(t, DB_HISTORY, &k, history_cb, &h);
  if (rc) {
    dx_events_free(h.v, h.n);
    return rc;
  }
  *out = h.v;
  *n = h.n;
  return 0;
}

/* Does execution `exec` hold exactly `n` (> 0) events? Then 1 with the last one decoded into
** *last (caller-owned); 0 when it holds fewer or more (or event n does not decode: the whole
** history is read and reports it). */
int dx__lm_history_holds(tx_t *t, const char *inst, uint64_t exec, uint64_t n, dx_event_t *last) {
  dkey_t k;
  MDB_val v;
  dx_error_t derr = {0};
  int rc;
  key_hist(&k, inst, exec, n + 1);
  if ((rc = dx__lm_db_get(t, DB_HISTORY, &k, &v)) != DX_ENOTFOUND) return rc ? rc : 0;
  key_hist(&k, inst, exec, n);
  if ((rc = dx__lm_db_get(t, DB_HISTORY, &k, &v)) != 0) return rc == DX_ENOTFOUND ? 0 : rc;
  memset(last, 0, sizeof *last);
  rc = dx__event_decode(v.mv_data, v.mv_size, last, &derr);
  if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
  if (rc) {
    dx_event_clear(last);
    return 0;
  }
  return 1;
}

static int max_exec_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  size_t pn = ((size_t *)ud)[0];
  uint64_t exec;
  if (k->mv_size < pn + 8) return 0;
  exec = get_u64((const unsigned char *)k->mv_data + pn);
  if (exec > ((uint64_t *)ud)[1]) ((uint64_t *)ud)[1] = exec;
  return 0;
}

/* The execution to read: `want`, or the latest. Instances written only through
** append_with_execution (tests) have history but no record: use the history's keys. */
int dx__lm_resolve_exec(tx_t *t, const char *inst, uint64_t want, uint64_t *exec) {
  inst_rec_t r;
  dkey_t k;
  uint64_t acc[2];
  int rc = dx__lm_inst_get(t, inst, &r);
  if (rc == 0) {
    *exec = want ? want : r.current_exec;
    dx__lm_inst_clear(&r);
    return 0;
  }
  if (rc != DX_ENOTFOUND) return rc;
  key_inst(&k, inst);
  acc[0] = k.n;
  acc[1] = 0;
  if ((rc = dx__lm_scan_prefix(t, DB_HISTORY, &k, max_exec_cb, acc))) return rc;
  if (acc[1] == 0) return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  *exec = want ? want : acc[1];
  return 0;
}

