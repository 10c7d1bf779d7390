/*
** txn.c -- LMDB provider: error mapping, transactions (nested inside a group-commit batch), raw
** DB operations, prefix scans and the sequence counter.
*/
#include "lmdb_int.h"
#include "providers/lmdb/crc32c.h"

const char *const dx__lm_db_names[DB__COUNT] = {
  "meta", "instances", "inst_created", "executions", "history",
  "orch_msgs", "orch_state", "orch_ready", "orch_lock",
  "work", "work_ready", "work_lock", "work_token", "work_ident",
  "sessions", "sess_owner", "sess_items", "sess_queue", "sess_heads", "kv", "kv_delta",
  "sess_events", "workers", "inst_status", "inst_name", "orch_starts",
};

/* {===== errors =====} */

/* LMDB's message without its "MDB_NAME: " prefix: constant names never reach users. */
static const char *plain_error(int mrc) {
  const char *s = mdb_strerror(mrc), *colon;
  if (strncmp(s, "MDB_", 4) == 0 && (colon = strstr(s, ": ")) != NULL) return colon + 2;
  return s;
}

/* LMDB reports a short write as EIO: when the disk holding the store is (nearly) full, that
** is what it was. */
static int disk_full(const shared_env_t *se) {
  struct statvfs vs;
  return se->data_fd >= 0 && fstatvfs(se->data_fd, &vs) == 0 &&
         (uint64_t)vs.f_bavail * vs.f_frsize < (uint64_t)64 * se->psize;
}

int dx__lm_mdb_error(shared_env_t *se, int mrc, const char *what, dx_error_t *err) {
  if (mrc == EIO && disk_full(se)) mrc = ENOSPC;
  switch (mrc) {
    case MDB_MAP_FULL:
      __atomic_store_n(&se->grow_wanted, 1, __ATOMIC_RELAXED);
      if (!dx__lm_can_grow(se))
        return dx_error_set(err, DX_EFULL,
                            "store %s is full: it reached its maximum size of %zu bytes (%s); "
                            "raise store_max_size (--store-max-size)",
                            se->path, se->map_size, what);
      return dx_error_set(err, DX_EFULL,
                          "store %s is full: its map of %zu bytes is used up (%s); it grows "
                          "before the next transaction",
                          se->path, se->map_size, what);
    case ENOSPC:
      return dx_error_set(err, DX_EFULL, "store %s is full: no space left on device (%s)",
                          se->path, what);
    case EDQUOT:
      return dx_error_set(err, DX_EFULL, "store %s is full: disk quota exceeded (%s)", se->path,
                          what);
    case EACCES: case EROFS: case EPERM:
      return dx_error_set(err, DX_ESTORE, "store %s is read-only: cannot %s", se->path, what);
    case MDB_CORRUPTED: case MDB_PAGE_NOTFOUND: case MDB_INVALID: case MDB_VERSION_MISMATCH:
      return dx_error_set(err, DX_ECORRUPT, "store %s is damaged: %s: %s", se->path, what,
                          plain_error(mrc));
    case MDB_NOTFOUND: return dx_error_set(err, DX_ENOTFOUND, "%s: not found", what);
    case MDB_KEYEXIST: return dx_error_set(err, DX_EEXIST, "%s: key exists", what);
    case ENOMEM: return dx_error_set(err, DX_ENOMEM, "%s: out of memory", what);
    default:
      return dx_error_set(err, DX_ESTORE, "store %s: %s: %s", se->path, what, plain_error(mrc));
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

/* A top-level txn: the store's files are checked first, a write grows the map when it must
** (and a durable one data.mdb's written length: its commit then overwrites blocks, map.c),
** and the txn holds the remap lock as a reader until dx__lm_top_finish, so no thread of this
** process resizes the map under it. */
int dx__lm_top_begin(shared_env_t *se, int write, int durable, MDB_txn **txn, dx_error_t *err) {
  int rc, mrc, tries, fill;
  *txn = NULL;
  if ((rc = dx__lm_top_check(se, write, &fill, err))) return rc;
  for (tries = 0;; tries++) {
    pthread_rwlock_rdlock(&se->remap);
    mrc = mdb_txn_begin(se->env, NULL, write ? 0 : MDB_RDONLY, txn);
    if (mrc == 0) {
      if (fill && durable) dx__lm_fill_ahead(se); /* LMDB's write lock is held: no writer */
      return 0;
    }
    pthread_rwlock_unlock(&se->remap);
    *txn = NULL;
    if (mrc != MDB_MAP_RESIZED || tries > 0)
      return dx__lm_mdb_error(se, mrc, write ? "begin a write transaction" : "begin a read", err);
    dx__lm_adopt_size(se); /* another process grew the map */
  }
}

/* Commit (commit=1) or abort a top-level txn and release the remap lock. `flush` (LM_FLUSH_*)
** other than FULL sets MDB_NOSYNC or MDB_NOMETASYNC for this one commit. The flag lives in
** the process's MDB_env, so every top-level commit takes commit_mu: no other thread can
** commit (and so skip its fsync) while the flag is set. Returns LMDB's code for the commit. */
int dx__lm_top_finish(shared_env_t *se, MDB_txn *txn, int commit, int flush, int notify) {
  unsigned flag = flush == LM_FLUSH_NONE   ? MDB_NOSYNC
                  : flush == LM_FLUSH_DATA ? MDB_NOMETASYNC
                                           : 0;
  int rc = 0;
  if (!commit) {
    mdb_txn_abort(txn);
  } else {
    pthread_mutex_lock(&se->commit_mu);
    if (flag) mdb_env_set_flags(se->env, flag, 1);
    rc = mdb_txn_commit(txn);
    if (flag) mdb_env_set_flags(se->env, flag, 0);
    pthread_mutex_unlock(&se->commit_mu);
  }
  pthread_rwlock_unlock(&se->remap);
  /* Wake workers in other processes watching the notify file (inotify sees any write). */
  if (commit && rc == 0 && notify && se->notify_fd >= 0 &&
      pwrite(se->notify_fd, "!", 1, 0) < 0) {
    /* best effort: watchers still poll */
  }
  return rc;
}

int dx__lm_tx_begin(shared_env_t *se, int durable, int write, int direct, tx_t *t,
                    dx_error_t *err) {
  MDB_txn *parent = dx__lm_thread_batch(se);
  int rc;
  memset(t, 0, sizeof *t);
  t->se = se;
  t->write = write;
  t->nested = parent != NULL;
  t->durable = durable;
  t->err = err ? err : &t->scratch;
  if (!parent) return dx__lm_top_begin(se, write, durable, &t->txn, t->err);
  if (direct) {
    t->direct = 1;
    t->txn = parent;
    t->writes0 = se->batch_writes;
    return 0;
  }
  /* worker rows queued in the batch are written before any other method looks (work.c) */
  if (dx__lm_pend_any(se) && (rc = dx__lm_pend_flush(se, parent, t->err))) return rc;
  /* a writer may write or undo instance records, states and rows the batch's direct methods
  ** keep (records.c), those the flush above kept too */
  if (write) {
    dx__lm_inst_keep_drop(se);
    se->ik_nested = 1;
  }
  /* nested even for reads: they must see the batch's own writes */
  if ((rc = mdb_txn_begin(se->env, parent, 0, &t->txn))) {
    t->txn = NULL;
    return dx__lm_tx_err(t, rc, "begin a nested transaction");
  }
  return 0;
}

void dx__lm_batch_tx(tx_t *t, shared_env_t *se, MDB_txn *batch, dx_error_t *err) {
  memset(t, 0, sizeof *t);
  t->se = se;
  t->txn = batch;
  t->write = t->nested = 1;
  t->err = err ? err : &t->scratch;
}

int dx__lm_begin_tx(lm_t *p, int write, tx_t *t, dx_error_t *err) {
  return dx__lm_tx_begin(p->se, !p->no_sync, write, 0, t, err);
}

/* A direct method failed after it wrote (or tried to: LMDB fails the whole txn on a failed
** write): nothing of the batch may be kept. The first such error is the commit's answer. */
static void spoil(tx_t *t, int rc) {
  shared_env_t *se = t->se;
  if (se->batch_spoiled) return;
  se->batch_spoiled = 1;
  dx_error_set(&se->spoil_err, rc, "%s",
               t->err->code == rc && t->err->msg[0] ? t->err->msg
                                                    : "a store operation failed part way");
}

/* Commit when rc == 0 and the txn wrote; abort otherwise. Returns the final code. */
int dx__lm_tx_end(tx_t *t, int rc) {
  int mrc, commit = rc == 0 && t->write;
  if (!t->txn) return rc;
  if (t->direct) {
    if (rc && t->se->batch_writes != t->writes0) spoil(t, rc);
    t->txn = NULL;
    return rc;
  }
  if (t->nested) {
    mrc = 0;
    if (commit) mrc = mdb_txn_commit(t->txn);
    else mdb_txn_abort(t->txn);
    if (mrc || !commit) dx__lm_sess_batch_forget(t->se); /* its writes are undone */
  } else {
    mrc = dx__lm_top_finish(t->se, t->txn, commit, t->durable ? LM_FLUSH_FULL : LM_FLUSH_NONE, 1);
  }
  t->txn = NULL;
  return mrc ? dx__lm_tx_err(t, mrc, "commit") : rc;
}

/* 1 when a top-level write that failed with `rc` should run again: the map was full and
** has room to grow (the next begin grows it). Bounded by `tries`. */
int dx__lm_retry_full(tx_t *t, int rc, int tries) {
  return rc == DX_EFULL && !t->nested && tries < 16 &&
         __atomic_load_n(&t->se->grow_wanted, __ATOMIC_RELAXED) && dx__lm_can_grow(t->se);
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

/* {===== hash index by id (lm_strix_t) =====} */

static const char *strix_id(const void *base, size_t stride, size_t i) {
  return *(char *const *)(const void *)((const char *)base + i * stride);
}

static void strix_put(lm_strix_t *x, const void *base, size_t stride, size_t at) {
  size_t i, mask = x->slots - 1;
  for (i = dx__lm_str_hash(strix_id(base, stride, at)) & mask; x->idx[i]; i = (i + 1) & mask) {}
  x->idx[i] = (uint32_t)(at + 1);
}

int dx__lm_strix_add(lm_strix_t *x, const void *base, size_t stride, size_t at) {
  size_t i;
  if (at + 1 > x->slots / 2) { /* keep the table at most half full */
    size_t slots = x->slots ? x->slots * 2 : 64;
    uint32_t *idx = calloc(slots, sizeof *idx);
    if (!idx) return DX_ENOMEM;
    free(x->idx);
    x->idx = idx;
    x->slots = slots;
    for (i = 0; i < at; i++)
      if (strix_id(base, stride, i)) strix_put(x, base, stride, i);
  }
  strix_put(x, base, stride, at);
  return 0;
}

int dx__lm_strix_push(lm_strix_t *x, void *base, size_t stride, size_t at, const char *id) {
  char *e = (char *)base + at * stride, *copy = dx__strdup(id);
  if (!copy) return DX_ENOMEM;
  memset(e, 0, stride);
  memcpy(e, &copy, sizeof copy); /* the id is the entry's first member */
  if (dx__lm_strix_add(x, base, stride, at)) {
    free(copy);
    return DX_ENOMEM;
  }
  return 0;
}

void dx__lm_strix_clear(lm_strix_t *x) {
  if (x->idx) memset(x->idx, 0, x->slots * sizeof *x->idx);
}

/* {===== checksums =====} */

/* Every value is stored as its bytes followed by a CRC32C (Castagnoli) of key and value, so a
** flipped byte in a key or a value is detected on read instead of changing an answer. */
static uint32_t record_sum(const MDB_val *k, const void *v, size_t n) {
  return ~dx__crc32c(dx__crc32c(~0u, k->mv_data, k->mv_size), v, n);
}

static void put_u32(unsigned char *b, uint32_t v) {
  b[0] = (unsigned char)(v >> 24);
  b[1] = (unsigned char)(v >> 16);
  b[2] = (unsigned char)(v >> 8);
  b[3] = (unsigned char)v;
}

/* Printable form of a key for error messages, following the key layout: NUL-terminated ids
** as text, 8-byte numbers in decimal, parts joined by '/' ("inst-1/1/3"). */
static void key_text(const MDB_val *k, char *out, size_t cap) {
  const unsigned char *b = k->mv_data;
  size_t i = 0, o = 0, j;
  out[0] = 0;
  while (i < k->mv_size && o + 24 < cap) {
    if (o) out[o++] = '/';
    for (j = i; j < k->mv_size && b[j] >= 0x20 && b[j] < 0x7f; j++) {}
    if (j < k->mv_size && b[j] == 0 && (j > i || k->mv_size - i < 8)) { /* an id */
      o += (size_t)snprintf(out + o, cap - o, "%.*s", (int)(j - i < cap - o - 24 ? j - i : 0),
                            (const char *)b + i);
      i = j + 1;
    } else if (k->mv_size - i >= 8) {
      o += (size_t)snprintf(out + o, cap - o, "%llu", (unsigned long long)get_u64(b + i));
      i += 8;
    } else {
      o += (size_t)snprintf(out + o, cap - o, "%u", b[i]);
      i++;
    }
  }
}

int dx__lm_check_sum(tx_t *t, int db, const MDB_val *k, MDB_val *v) {
  unsigned char want[4];
  char key[160];
  if (t->raw) return 0;
  if (v->mv_size >= LM_SUM_BYTES) {
    put_u32(want, record_sum(k, v->mv_data, v->mv_size - LM_SUM_BYTES));
    if (memcmp(want, (const char *)v->mv_data + v->mv_size - LM_SUM_BYTES, LM_SUM_BYTES) == 0) {
      v->mv_size -= LM_SUM_BYTES;
      return 0;
    }
  }
  key_text(k, key, sizeof key);
  return dx_error_set(t->err, DX_ECORRUPT,
                      "store %s is damaged: the record %s in %s fails its checksum",
                      t->se->path, key, dx__lm_db_names[db]);
}

/* {===== basic operations =====} */

/* The batch's kept cursor of `db` (dx__lm_cursor) for one read or write by key in the batch txn
** itself, or NULL: a walk holds it, another txn, or it cannot be opened (mdb_get, mdb_put and
** mdb_del then set up their own). Where it points after the last access to `db` is often the
** leaf the next key belongs to (new rows' seq keys, queue heads, the record just read): then
** mdb_cursor_set compares the key with that leaf's first and last keys and skips the search
** from the root (about 1k instructions of a 2.5k write). Elsewhere it costs those two
** compares. LMDB keeps every cursor of a write txn in step with writes made through others. */
/* The batch's kept cursor of `db`, opened on first use (0, or LMDB's error: none kept). */
static int kept_cursor(tx_t *t, int db) {
  shared_env_t *se = t->se;
  int mrc;
  if (se->curs[db]) return 0;
  if ((mrc = mdb_cursor_open(t->txn, se->dbi[db], &se->curs[db]))) se->curs[db] = NULL;
  return mrc;
}

static MDB_cursor *key_cursor(tx_t *t, int db) {
  shared_env_t *se = t->se;
  if (!(t->direct || (t->nested && t->txn == se->batch)) || (se->curs_busy & (1u << db)))
    return NULL;
  return kept_cursor(t, db) ? NULL : se->curs[db];
}

int dx__lm_db_get(tx_t *t, int db, const dkey_t *k, MDB_val *v) {
  MDB_val key = kval(k);
  MDB_cursor *c = key_cursor(t, db); /* a write of the record read often follows */
  int rc = c ? mdb_cursor_get(c, &key, v, MDB_SET) : mdb_get(t->txn, t->se->dbi[db], &key, v);
  if (rc == MDB_NOTFOUND) return DX_ENOTFOUND; /* callers decide; err untouched */
  if (rc) return dx__lm_tx_err(t, rc, dx__lm_db_names[db]);
  return dx__lm_check_sum(t, db, &key, v);
}

/* Writes the value with its checksum in place (MDB_RESERVE: no copy). */
/* A write in the batch txn itself (a direct method, or the batch's flush of what they kept)
** succeeded: the batch's commit is not empty (records.c "instance records kept by the
** batches"). A nested txn's writes may still be undone: they do not count. */
static void batch_dirty(tx_t *t) {
  if (dx__lm_in_batch_txn(t)) t->se->ik_wrote = 1;
}

int dx__lm_db_put(tx_t *t, int db, const dkey_t *k, const void *data, size_t n, unsigned flags) {
  MDB_val key = kval(k), val;
  MDB_cursor *c;
  size_t extra = t->raw ? 0 : LM_SUM_BYTES;
  int rc;
  val.mv_size = n + extra;
  val.mv_data = NULL;
  t->se->batch_writes++;
  if ((c = key_cursor(t, db))) rc = mdb_cursor_put(c, &key, &val, flags | MDB_RESERVE);
  else rc = mdb_put(t->txn, t->se->dbi[db], &key, &val, flags | MDB_RESERVE);
  if (rc) {
    char what[64];
    snprintf(what, sizeof what, "write to %s", dx__lm_db_names[db]);
    return dx__lm_tx_err(t, rc, what);
  }
  if (n) memcpy(val.mv_data, data, n);
  if (extra) put_u32((unsigned char *)val.mv_data + n, record_sum(&key, data, n));
  batch_dirty(t);
  return 0;
}

static int del_failed(tx_t *t, int db, int rc) {
  char what[64];
  snprintf(what, sizeof what, "delete from %s", dx__lm_db_names[db]);
  return dx__lm_tx_err(t, rc, what);
}

/* Deleting a missing key is fine. */
int dx__lm_db_del(tx_t *t, int db, const dkey_t *k) {
  MDB_val key = kval(k), v;
  MDB_cursor *c;
  int rc;
  t->se->batch_writes++;
  if ((c = key_cursor(t, db))) {
    rc = mdb_cursor_get(c, &key, &v, MDB_SET);
    if (rc == 0) rc = mdb_cursor_del(c, 0);
  } else {
    rc = mdb_del(t->txn, t->se->dbi[db], &key, NULL);
  }
  if (rc && rc != MDB_NOTFOUND) return del_failed(t, db, rc);
  if (rc == 0) batch_dirty(t);
  return 0;
}

int dx__lm_cursor_del(tx_t *t, int db, MDB_cursor *c) {
  int rc;
  t->se->batch_writes++;
  if ((rc = mdb_cursor_del(c, 0))) return del_failed(t, db, rc);
  batch_dirty(t);
  return 0;
}

/* The one place index entries are written or removed. A put into a timed index lowers the
** batch's due floor of that index (dx__lm_floor_after). */
int dx__lm_idx_op(tx_t *t, int db, const dkey_t *k, const void *v, size_t n, int put) {
  shared_env_t *se = t->se;
  if (!put) return dx__lm_db_del(t, db, k);
  if (se->floor_known & (1u << db)) {
    int64_t at = se->floor[db];
    if ((db == DB_ORCH_READY || db == DB_ORCH_LOCK) && k->n >= 8)
      at = (int64_t)get_u64(k->b);
    else if ((db == DB_WORK_READY || db == DB_WORK_LOCK) && k->n >= 9 && k->b[0] == 0)
      at = (int64_t)get_u64(k->b + 1);
    if (at < se->floor[db]) se->floor[db] = at;
  }
  return dx__lm_db_put(t, db, k, v, n, 0);
}

_Static_assert(DB__COUNT <= 32, "curs_busy has one bit per DB");

/* A store cycle walks a few DBs many times per batch (queue heads, an instance's messages,
** history ends): the batch keeps one cursor per DB instead of allocating, setting up and
** freeing one per walk. A walk inside another walk of the same DB gets a cursor of its own. */
int dx__lm_cursor(tx_t *t, int db, MDB_cursor **c) {
  shared_env_t *se = t->se;
  int mrc;
  if (t->direct && !(se->curs_busy & (1u << db))) {
    if ((mrc = kept_cursor(t, db))) return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
    se->curs_busy |= 1u << db;
    *c = se->curs[db];
    return 0;
  }
  if ((mrc = mdb_cursor_open(t->txn, se->dbi[db], c))) return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
  return 0;
}

void dx__lm_cursor_done(tx_t *t, int db, MDB_cursor *c) {
  if (c == t->se->curs[db]) t->se->curs_busy &= ~(1u << db);
  else mdb_cursor_close(c);
}

static int has_prefix(const MDB_val *k, const dkey_t *prefix) {
  return k->mv_size >= prefix->n && memcmp(k->mv_data, prefix->b, prefix->n) == 0;
}

int dx__lm_scan_prefix(tx_t *t, int db, const dkey_t *prefix, scan_fn fn, void *ud) {
  MDB_cursor *c;
  MDB_val k = kval(prefix), v;
  int rc = dx__lm_cursor(t, db, &c), mrc;
  if (rc) return rc;
  mrc = mdb_cursor_get(c, &k, &v, prefix->n ? MDB_SET_RANGE : MDB_FIRST);
  while (mrc == 0 && has_prefix(&k, prefix)) {
    if ((rc = dx__lm_check_sum(t, db, &k, &v)) != 0 || (rc = fn(t, &k, &v, ud)) != 0) break;
    mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
  }
  dx__lm_cursor_done(t, db, c);
  if (rc < 0) return rc;
  if (mrc && mrc != MDB_NOTFOUND) return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
  return 0;
}

static int head_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  *(MDB_val *)ud = *k;
  return 1;
}

/* The batch's kept cursor of `db` often sits on the head already: a fetch deleted the last
** head through it (key_cursor: a delete leaves it on the next entry), or the last seek found
** it and nothing was taken. Its entry is the first under `prefix` when it has the prefix and
** the entry before it does not (keys with a prefix are adjacent): two steps on a leaf instead
** of a seek from the root. 1 with *key set, 0 (seek instead) or an error. Its answer is the
** seek's whatever moved the cursor: it reads the tree, not what the batch remembers. */
static int head_here(tx_t *t, int db, const dkey_t *prefix, MDB_val *key) {
  shared_env_t *se = t->se;
  MDB_cursor *c = se->curs[db];
  MDB_val k, v, pk, pv;
  int mrc, rc, before;
  /* (direct methods only, the fetches that seek heads; key_cursor serves the flushes too) */
  if (!t->direct || !c || (se->curs_busy & (1u << db))) return 0;
  if (mdb_cursor_get(c, &k, &v, MDB_GET_CURRENT) || !has_prefix(&k, prefix)) return 0;
  mrc = mdb_cursor_get(c, &pk, &pv, MDB_PREV);
  if (mrc == 0) { /* back onto k: a delete of the head by key finds it on the cursor's leaf */
    before = has_prefix(&pk, prefix);
    if (mdb_cursor_get(c, &pk, &pv, MDB_NEXT) || before) return 0;
  } else if (mrc != MDB_NOTFOUND) {
    return 0;
  }
  if ((rc = dx__lm_check_sum(t, db, &k, &v))) return rc;
  *key = k;
  return 1;
}

/* First key of `db` under `prefix`: 0, DX_ENOTFOUND (err untouched) or an error. The bytes
** stay valid until the txn writes. */
int dx__lm_head_key(tx_t *t, int db, const dkey_t *prefix, MDB_val *key) {
  int rc;
  key->mv_size = 0;
  key->mv_data = NULL;
  if ((rc = head_here(t, db, prefix, key))) return rc < 0 ? rc : 0;
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
  return dx_error_set(t->err, DX_ECORRUPT, "store %s is damaged: corrupted record in %s (%s)%s%s",
                      t->se->path, dx__lm_db_names[db], key, detail ? ": " : "",
                      detail ? detail : "");
}

static int seq_read(tx_t *t, uint64_t *s) {
  dkey_t k;
  MDB_val v;
  int rc;
  *s = 0;
  key_name(&k, "seq");
  rc = dx__lm_db_get(t, DB_META, &k, &v);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  if (v.mv_size != 8) return dx__lm_corrupt(t, DB_META, "not 8 bytes", "seq");
  *s = get_u64(v.mv_data);
  return 0;
}

static int seq_write(tx_t *t, uint64_t s) {
  dkey_t k;
  unsigned char b[8];
  key_name(&k, "seq");
  put_u64(b, s);
  return dx__lm_db_put(t, DB_META, &k, b, 8, 0);
}

/* Inside a batch the counter lives in the env until the batch commits (dx__lm_seq_flush):
** one write of meta "seq" per batch instead of one per queued row. A call that fails after
** taking numbers leaves a gap, never a duplicate. */
int dx__lm_next_seq(tx_t *t, uint64_t *out) {
  shared_env_t *se = t->se;
  uint64_t s;
  int rc;
  if (t->nested) {
    if (!se->seq_held) {
      if ((rc = seq_read(t, &se->seq))) return rc;
      se->seq_held = 1;
    }
    *out = ++se->seq;
    return 0;
  }
  if ((rc = seq_read(t, &s))) return rc;
  *out = ++s;
  return seq_write(t, s);
}

int dx__lm_seq_flush(shared_env_t *se, MDB_txn *batch, dx_error_t *err) {
  tx_t t;
  int rc;
  if (!se->seq_held) return 0;
  dx__lm_batch_tx(&t, se, batch, err);
  rc = seq_write(&t, se->seq);
  se->seq_held = 0;
  return rc;
}
