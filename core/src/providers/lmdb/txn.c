/*
** txn.c -- LMDB provider: error mapping, transactions (nested inside a group-commit batch), raw
** DB operations, prefix scans and the sequence counter.
*/
#include "lmdb_int.h"

const char *const dx__lm_db_names[DB__COUNT] = {
  "meta", "instances", "inst_created", "executions", "history",
  "orch_msgs", "orch_state", "orch_ready", "orch_lock",
  "work", "work_ready", "work_lock", "work_token", "work_ident",
  "sessions", "sess_owner", "sess_items", "sess_queue", "sess_heads",
};

/* {===== errors =====} */

int dx__lm_mdb_error(const shared_env_t *se, int mrc, const char *what, dx_error_t *err) {
  switch (mrc) {
    case MDB_MAP_FULL:
      return dx_error_set(err, DX_EFULL,
                          "store is full: %s needs more than the map size of %zu bytes "
                          "(reopen the store with a larger map_size)",
                          what, se->map_size);
    case MDB_NOTFOUND: return dx_error_set(err, DX_ENOTFOUND, "%s: not found", what);
    case MDB_KEYEXIST: return dx_error_set(err, DX_EEXIST, "%s: key exists", what);
    case ENOMEM: return dx_error_set(err, DX_ENOMEM, "%s: out of memory", what);
    default: return dx_error_set(err, DX_ESTORE, "%s: %s", what, mdb_strerror(mrc));
  }
}

int dx__lm_nomem(dx_error_t *err) { return dx_error_set(err, DX_ENOMEM, "out of memory"); }


/* {===== transactions =====} */


int dx__lm_tx_err(tx_t *t, int mrc, const char *what) {
  return dx__lm_mdb_error(t->se, mrc, what, t->err);
}

MDB_txn *dx__lm_thread_batch(shared_env_t *se) {
  MDB_txn *b = NULL;
  pthread_mutex_lock(&se->batch_mu);
  if (se->batch && pthread_equal(se->batch_thread, pthread_self())) b = se->batch;
  pthread_mutex_unlock(&se->batch_mu);
  return b;
}

int dx__lm_tx_begin(shared_env_t *se, int durable, int write, tx_t *t, dx_error_t *err) {
  MDB_txn *parent = dx__lm_thread_batch(se);
  unsigned flags = (!write && !parent) ? MDB_RDONLY : 0;
  int rc;
  t->se = se;
  t->txn = NULL;
  t->write = write;
  t->nested = parent != NULL;
  t->durable = durable;
  t->err = err ? err : &t->scratch;
  rc = mdb_txn_begin(se->env, parent, flags, &t->txn);
  if (rc == MDB_MAP_RESIZED && !parent) {
    /* another process grew the map: adopt its size and retry once */
    mdb_env_set_mapsize(se->env, 0);
    rc = mdb_txn_begin(se->env, NULL, flags, &t->txn);
  }
  if (rc) {
    t->txn = NULL;
    return dx__lm_tx_err(t, rc, "begin transaction");
  }
  return 0;
}

int dx__lm_begin_tx(lm_t *p, int write, tx_t *t, dx_error_t *err) {
  return dx__lm_tx_begin(p->se, !p->no_sync, write, t, err);
}

/* Commit a top-level write txn. sync=0 sets MDB_NOSYNC for this one commit. The flag lives
** in the process's MDB_env, so every top-level commit takes commit_mu: no other thread can
** commit (and so skip its fsync) while the flag is set. The writer lock is held by whoever
** commits, so commit_mu is never contended by two live write txns. */
int dx__lm_commit_top(shared_env_t *se, MDB_txn *txn, int durable, int notify) {
  int rc;
  pthread_mutex_lock(&se->commit_mu);
  if (!durable) mdb_env_set_flags(se->env, MDB_NOSYNC, 1);
  rc = mdb_txn_commit(txn);
  if (!durable) mdb_env_set_flags(se->env, MDB_NOSYNC, 0);
  pthread_mutex_unlock(&se->commit_mu);
  /* Wake workers in other processes watching the notify file (inotify sees any write). */
  if (rc == 0 && notify && se->notify_fd >= 0 && pwrite(se->notify_fd, "!", 1, 0) < 0) {
    /* best effort: watchers still poll */
  }
  return rc;
}

/* Commit when rc == 0 and the txn wrote; abort otherwise. Returns the final code. */
int dx__lm_tx_end(tx_t *t, int rc) {
  int mrc;
  if (!t->txn) return rc;
  if (rc != 0 || !t->write) {
    mdb_txn_abort(t->txn);
    t->txn = NULL;
    return rc;
  }
  mrc = t->nested ? mdb_txn_commit(t->txn) : dx__lm_commit_top(t->se, t->txn, t->durable, 1);
  t->txn = NULL;
  return mrc ? dx__lm_tx_err(t, mrc, "commit") : 0;
}

/* Room for element n of a growable array: the (maybe moved) array, or NULL when out of
** memory (the old array stays valid). */
void *dx__lm_grow(void *v, size_t *cap, size_t n, size_t elem) {
  size_t ncap;
  if (n < *cap) return v;
  ncap = *cap ? *cap * 2 : 16;
  if (!(v = realloc(v, ncap * elem))) return NULL;
  *cap = ncap;
  return v;
}

/* {===== keys =====} */


/* {===== basic operations =====} */

int dx__lm_db_get(tx_t *t, int db, const dkey_t *k, MDB_val *v) {
  MDB_val key = kval(k);
  int rc = mdb_get(t->txn, t->se->dbi[db], &key, v);
  if (rc == MDB_NOTFOUND) return DX_ENOTFOUND; /* callers decide; err untouched */
  return rc ? dx__lm_tx_err(t, rc, dx__lm_db_names[db]) : 0;
}

int dx__lm_db_put(tx_t *t, int db, const dkey_t *k, const void *data, size_t n, unsigned flags) {
  MDB_val key = kval(k), val;
  int rc;
  val.mv_size = n;
  val.mv_data = (void *)data;
  rc = mdb_put(t->txn, t->se->dbi[db], &key, &val, flags);
  if (rc) {
    char what[64];
    snprintf(what, sizeof what, "writing %s", dx__lm_db_names[db]);
    return dx__lm_tx_err(t, rc, what);
  }
  return 0;
}

/* Deleting a missing key is fine. */
int dx__lm_db_del(tx_t *t, int db, const dkey_t *k) {
  MDB_val key = kval(k);
  int rc = mdb_del(t->txn, t->se->dbi[db], &key, NULL);
  if (rc && rc != MDB_NOTFOUND) {
    char what[64];
    snprintf(what, sizeof what, "deleting from %s", dx__lm_db_names[db]);
    return dx__lm_tx_err(t, rc, what);
  }
  return 0;
}

/* The one place index entries are written or removed. */
int dx__lm_idx_op(tx_t *t, int db, const dkey_t *k, const void *v, size_t n, int put) {
  return put ? dx__lm_db_put(t, db, k, v, n, 0) : dx__lm_db_del(t, db, k);
}


int dx__lm_scan_prefix(tx_t *t, int db, const dkey_t *prefix, scan_fn fn, void *ud) {
  MDB_cursor *c;
  MDB_val k = kval(prefix), v;
  int rc = 0, mrc = mdb_cursor_open(t->txn, t->se->dbi[db], &c);
  if (mrc) return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
  mrc = mdb_cursor_get(c, &k, &v, prefix->n ? MDB_SET_RANGE : MDB_FIRST);
  while (mrc == 0 && k.mv_size >= prefix->n && memcmp(k.mv_data, prefix->b, prefix->n) == 0) {
    if ((rc = fn(t, &k, &v, ud)) != 0) break;
    mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
  }
  mdb_cursor_close(c);
  if (rc < 0) return rc;
  if (mrc && mrc != MDB_NOTFOUND) return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
  return 0;
}

static int head_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  *(MDB_val *)ud = *k;
  return 1;
}

/* First key of `db` under `prefix`: 0, DX_ENOTFOUND (err untouched) or an error. The bytes
** stay valid until the txn writes. */
int dx__lm_head_key(tx_t *t, int db, const dkey_t *prefix, MDB_val *key) {
  int rc;
  key->mv_size = 0;
  key->mv_data = NULL;
  rc = dx__lm_scan_prefix(t, db, prefix, head_cb, key);
  if (rc) return rc;
  return key->mv_data ? 0 : DX_ENOTFOUND;
}

int dx__lm_corrupt(tx_t *t, int db, const char *detail, const char *keyfmt, ...) {
  char key[256];
  va_list ap;
  va_start(ap, keyfmt);
  vsnprintf(key, sizeof key, keyfmt, ap);
  va_end(ap);
  return dx_error_set(t->err, DX_ECORRUPT, "corrupted record in %s (%s)%s%s", dx__lm_db_names[db], key,
                      detail ? ": " : "", detail ? detail : "");
}

int dx__lm_next_seq(tx_t *t, uint64_t *out) {
  dkey_t k;
  MDB_val v;
  unsigned char b[8];
  uint64_t s = 0;
  int rc;
  key_name(&k, "seq");
  rc = dx__lm_db_get(t, DB_META, &k, &v);
  if (rc == 0) {
    if (v.mv_size != 8) return dx__lm_corrupt(t, DB_META, "not 8 bytes", "seq");
    s = get_u64(v.mv_data);
  } else if (rc != DX_ENOTFOUND) {
    return rc;
  }
  put_u64(b, ++s);
  *out = s;
  return dx__lm_db_put(t, DB_META, &k, b, 8, 0);
}

