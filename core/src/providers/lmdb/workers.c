/*
** workers.c -- LMDB provider: the registry of workers behind `duroxide-lua workers` and the
** console's workers page (provider version 10).
**
** worker_register (live.c) writes a record per worker id: host, process id, start time and the
** handle's lock-holder tag; worker_unregister deletes it. A process killed with SIGKILL leaves
** its record behind, but live.c's locks say at once that nobody holds the id any more, so the
** listing leaves it out, and the next registration on the store sweeps such records. The load
** figures are read from the lock indexes: instances and plain worker rows whose lock carries
** the worker's tag and has not expired.
*/
#include <sys/utsname.h>

#include "lmdb_int.h"
#include "log.h"

static void key_worker(dkey_t *k, const char *worker) { key_inst(k, worker); }

/* Registration sweep: records of ids no live process holds. */
typedef struct {
  lm_t *p;
  str_list_t dead;
} sweep_t;

static int dead_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sweep_t *s = ud;
  const char *id = k->mv_data;
  (void)v;
  if (k->mv_size == 0 || id[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_WORKERS, "bad key", "%zu-byte key", k->mv_size);
  if (!dx__lm_live_alive(s->p, id) && dx__lm_strs_push(&s->dead, id)) return dx__lm_nomem(t->err);
  return 0;
}

static int put_tx(tx_t *t, lm_t *p, const char *worker, int64_t now) {
  struct utsname u;
  sweep_t s;
  wreg_rec_t r;
  dkey_t k;
  size_t i;
  int rc;
  memset(&s, 0, sizeof s);
  s.p = p;
  k_init(&k);
  rc = dx__lm_scan_prefix(t, DB_WORKERS, &k, dead_cb, &s);
  for (i = 0; !rc && i < s.dead.n; i++) {
    if (strcmp(s.dead.v[i], worker) == 0) continue; /* overwritten below */
    key_worker(&k, s.dead.v[i]);
    rc = dx__lm_db_del(t, DB_WORKERS, &k);
  }
  dx__lm_strs_free(&s.dead);
  if (rc) return rc;
  r.host = uname(&u) == 0 ? u.nodename : NULL;
  r.pid = (int64_t)getpid();
  r.started_at = now;
  r.locker = p->tag;
  key_worker(&k, worker);
  return dx__lm_rec_put(t, &dx__lm_wreg_schema, &k, &r);
}

int dx__lm_workers_put(lm_t *p, const char *worker, int64_t now, dx_error_t *err) {
  tx_t t;
  int rc;
  if (p->se->read_only) return 0; /* such a store cannot run workers anyway */
  LM_WRITE(p, t, err, rc, put_tx(&t, p, worker, now), (void)0);
  return rc;
}

void dx__lm_workers_del(lm_t *p, const char *worker) {
  dx_error_t err = {0};
  dkey_t k;
  tx_t t;
  int rc;
  if (p->se->read_only || p->se->no_workers) return;
  key_worker(&k, worker);
  LM_WRITE(p, t, &err, rc, dx__lm_db_del(&t, DB_WORKERS, &k), (void)0);
  if (rc && rc != DX_ENOTFOUND) /* the listing leaves the record out once the process ends */
    dx__log(DX_LOG_WARN, "could not remove the worker registration", "worker_id=%s error=\"%s\"",
            worker, err.msg);
}

/* {===== listing =====} */

typedef struct {
  char *id;
  wreg_rec_t r;
  uint64_t turns, acts;
} wrow_t;

typedef struct {
  lm_t *p;
  int64_t now;
  wrow_t *v;
  size_t n, cap;
} wlist_t;

static int list_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  wlist_t *l = ud;
  wrow_t *nv, *w;
  const char *id = k->mv_data;
  int rc;
  if (k->mv_size == 0 || id[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_WORKERS, "bad key", "%zu-byte key", k->mv_size);
  if (!dx__lm_live_alive(l->p, id)) return 0; /* its process is gone */
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
  l->v = nv;
  w = &l->v[l->n];
  memset(w, 0, sizeof *w);
  if ((rc = dx__lm_rec_decode(t, &dx__lm_wreg_schema, v, &w->r, "worker registration")))
    return rc;
  if (!(w->id = dx__strdup(id))) {
    dx__lm_rec_clear(&dx__lm_wreg_schema, &w->r);
    return dx__lm_nomem(t->err);
  }
  l->n++;
  return 0;
}

static wrow_t *by_locker(wlist_t *l, uint64_t locker) {
  size_t i;
  for (i = 0; locker && i < l->n; i++)
    if (l->v[i].r.locker == locker) return &l->v[i];
  return NULL;
}

/* Instances locked now (orch_lock entries not expired), counted per locker. */
static int turn_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  wlist_t *l = ud;
  orch_state_t st;
  wrow_t *w;
  int rc;
  (void)v;
  if (k->mv_size < 10 || (int64_t)get_u64(k->mv_data) <= l->now) return 0;
  if ((rc = dx__lm_state_get(t, (const char *)k->mv_data + 8, &st))) return rc == DX_ENOTFOUND ? 0 : rc;
  if (st.token && st.locked_until > l->now && (w = by_locker(l, st.locker))) w->turns++;
  return 0;
}

/* Plain worker rows locked now (work_lock entries end with the row's seq). */
static int act_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  wlist_t *l = ud;
  work_row_t r;
  wrow_t *w;
  int rc;
  (void)v;
  if (k->mv_size < 17) return 0;
  rc = dx__lm_row_get(t, get_u64((const char *)k->mv_data + k->mv_size - 8), &r);
  if (rc) return rc == DX_ENOTFOUND ? 0 : rc;
  if (r.token && r.locked_until > l->now && (w = by_locker(l, r.locker))) w->acts++;
  dx__lm_row_clear(&r);
  return 0;
}

static int list_tx(tx_t *t, wlist_t *l) {
  dkey_t all;
  int rc;
  k_init(&all);
  if ((rc = dx__lm_scan_prefix(t, DB_WORKERS, &all, list_cb, l)) || l->n == 0) return rc;
  if ((rc = dx__lm_scan_prefix(t, DB_ORCH_LOCK, &all, turn_cb, l))) return rc;
  return dx__lm_scan_prefix(t, DB_WORK_LOCK, &all, act_cb, l);
}

int dx__lm_list_workers(dx_provider_t *pp, int64_t now, dx_worker_cb cb, void *ud,
                        dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  wlist_t l;
  size_t i;
  tx_t t;
  int rc, stop = 0;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if (p->se->no_workers) return 0;
  memset(&l, 0, sizeof l);
  l.p = p;
  l.now = now;
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  rc = dx__lm_tx_end(&t, list_tx(&t, &l));
  /* the callbacks run after the read txn ended: they may call us */
  for (i = 0; i < l.n; i++) {
    if (!rc && !stop) {
      dx_worker_info_t w;
      w.worker_id = l.v[i].id;
      w.host = l.v[i].r.host;
      w.pid = l.v[i].r.pid;
      w.started_at_ms = l.v[i].r.started_at;
      w.running_turns = l.v[i].turns;
      w.running_activities = l.v[i].acts;
      stop = cb(ud, &w);
    }
    free(l.v[i].id);
    dx__lm_rec_clear(&dx__lm_wreg_schema, &l.v[i].r);
  }
  free(l.v);
  return rc;
}
