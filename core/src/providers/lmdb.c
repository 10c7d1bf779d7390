/*
** lmdb.c -- the LMDB provider; the only file that includes lmdb.h.
**
** Layout: one MDB_env per store directory, named DBs below. Numbers in keys are big-endian
** u64 so byte order is numeric order; strings are bytes + NUL, so the prefix "inst\0"
** selects exactly one instance. Values are MessagePack arrays [format, fields...]; events
** and work items inside them are the codec's records (codec.h).
**
**   meta          "format" -> be32 1          "seq" -> be64 last sequence number
**   instances     inst\0 -> name, version, current_exec, custom_status, cs_version,
**                           created_at, updated_at, parent, created_seq
**   inst_created  be64 created_at be64 created_seq -> inst   (list_instances)
**   executions    inst\0 be64 exec -> status, output, failure, started_at, completed_at
**   history       inst\0 be64 exec be64 event_id -> event record
**   orch_msgs     inst\0 be64 seq -> visible_at, token, attempt, item
**   orch_state    inst\0 -> ready_at, locked_until, token   (absent: unlocked, no messages)
**   orch_ready    be64 ready_at inst\0 -> ""       unlocked instances with messages
**   orch_lock     be64 locked_until inst\0 -> ""   locked instances
**   work          be64 seq -> visible_at, locked_until, token, attempt, session_id, inst,
**                             exec, activity_id, item
**   work_ready    u8 0 be64 visible_at be64 seq -> ""     unlocked plain rows
**   work_lock     u8 0 be64 locked_until be64 seq -> ""   locked plain rows
**   work_token    be64 token -> be64 seq                   (plain and session rows)
**   work_ident    inst\0 be64 exec be64 activity_id be64 seq -> ""   (lock stealing)
**   sessions      sid\0 -> owner ("" = unowned), previous_owner, locked_until, last_activity
**   sess_owner    owner\0 sid\0 -> be64 locked_until      sessions by owner
**   sess_items    sid\0 be64 due be64 seq -> ""            rows of a session; due is
**                                                          visible_at, or locked_until if locked
**   sess_queue    sid\0 -> be64 head_due be64 head_seq be64 rows   (sessions with rows)
**   sess_heads    be64 head_due be64 head_seq sid\0 -> ""  one entry per sessions_queue row
**
** Fetches read the head of the ready and lock indexes (an expired lock is as fetchable as a
** ready message), so they stay O(log n) however many rows are locked or delayed. Rows with a
** session id live only in the session indexes: a session fetch looks at the heads of the
** worker's own sessions (sess_owner) and walks sess_heads in time order past sessions other
** workers own, so its cost is bounded by the number of live sessions, never by queued rows.
** The worker-index class byte (0) is kept from format 1, where session rows used class 1.
**
** Transactions: outside a batch each method is one txn (read-only for pure reads). begin()
** opens a batch for the calling thread on this env; until commit() every method on that
** thread runs in a nested txn, so a failing method undoes only its own changes. Commits
** fsync unless the handle has no_sync or commit(sync=0) is used (see commit_top).
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <lmdb.h>
#include <msgpack.h>

#include "codec.h"
#include "duroxide/provider.h"
#include "providers/providers.h"
#include "util.h"

#define LM_STORE_FORMAT 2u   /* layout version in meta "format" (1 is upgraded on open) */
#define LM_RECORD_FORMAT 1u  /* first element of every wrapper record */
#define LM_DEFAULT_MAP ((size_t)1 << 30)
#define LM_MAXDBS 24
#define LM_KEY_MAX 511       /* LMDB's default MDB_MAXKEYSIZE */
#define LM_INSTANCE_MAX 400  /* leaves room for the numbers appended to instance keys */
#define LM_SESSION_MAX 200   /* session ids and worker ids: owner\0sid\0 must fit a key */
#define LM_NEVER INT64_MAX

enum {
  DB_META, DB_INSTANCES, DB_INST_CREATED, DB_EXECUTIONS, DB_HISTORY,
  DB_ORCH_MSGS, DB_ORCH_STATE, DB_ORCH_READY, DB_ORCH_LOCK,
  DB_WORK, DB_WORK_READY, DB_WORK_LOCK, DB_WORK_TOKEN, DB_WORK_IDENT,
  DB_SESSIONS, DB_SESS_OWNER, DB_SESS_ITEMS, DB_SESS_QUEUE, DB_SESS_HEADS, DB__COUNT
};

static const char *const db_names[DB__COUNT] = {
  "meta", "instances", "inst_created", "executions", "history",
  "orch_msgs", "orch_state", "orch_ready", "orch_lock",
  "work", "work_ready", "work_lock", "work_token", "work_ident",
  "sessions", "sess_owner", "sess_items", "sess_queue", "sess_heads",
};

/* {===== environment registry =====} */

/* LMDB forbids opening one env twice in a process, so handles on the same directory share
** one of these, keyed by realpath. */
typedef struct shared_env_s {
  struct shared_env_s *next;
  char *path;
  pid_t pid;                 /* an env never crosses fork(): a child opens its own */
  int refs;
  MDB_env *env;
  MDB_dbi dbi[DB__COUNT];
  size_t map_size;
  pthread_mutex_t commit_mu; /* serializes top-level commits with the NOSYNC toggle */
  pthread_mutex_t batch_mu;  /* guards batch / batch_thread */
  MDB_txn *batch;            /* open group-commit txn, owned by batch_thread */
  pthread_t batch_thread;
  char *notify_path;         /* <store>/notify: written after commits that carry work */
  int notify_fd;
} shared_env_t;

static pthread_mutex_t g_reg_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_env_t *g_reg;

typedef struct {
  dx_provider_t base;
  shared_env_t *se;
  int no_sync;
  int in_batch; /* this handle opened the env's batch (begin) */
} lm_t;

/* {===== errors =====} */

static int mdb_error(const shared_env_t *se, int mrc, const char *what, dx_error_t *err) {
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

static int nomem(dx_error_t *err) { return dx_error_set(err, DX_ENOMEM, "out of memory"); }

static int64_t sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
  if (b < 0 && a < INT64_MIN - b) return INT64_MIN;
  return a + b;
}

/* {===== transactions =====} */

/* One method's transaction. Inside a batch it is nested in the batch txn (even for reads,
** which must see the batch's own writes), so a failing method undoes only its changes. */
typedef struct {
  shared_env_t *se;
  MDB_txn *txn;
  int write, nested, durable;
  dx_error_t *err; /* never NULL: points at scratch when the caller passed NULL */
  dx_error_t scratch;
} tx_t;

static int tx_err(tx_t *t, int mrc, const char *what) {
  return mdb_error(t->se, mrc, what, t->err);
}

static MDB_txn *thread_batch(shared_env_t *se) {
  MDB_txn *b = NULL;
  pthread_mutex_lock(&se->batch_mu);
  if (se->batch && pthread_equal(se->batch_thread, pthread_self())) b = se->batch;
  pthread_mutex_unlock(&se->batch_mu);
  return b;
}

static int tx_begin(shared_env_t *se, int durable, int write, tx_t *t, dx_error_t *err) {
  MDB_txn *parent = thread_batch(se);
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
    return tx_err(t, rc, "begin transaction");
  }
  return 0;
}

static int lm_begin_tx(lm_t *p, int write, tx_t *t, dx_error_t *err) {
  return tx_begin(p->se, !p->no_sync, write, t, err);
}

/* Commit a top-level write txn. sync=0 sets MDB_NOSYNC for this one commit. The flag lives
** in the process's MDB_env, so every top-level commit takes commit_mu: no other thread can
** commit (and so skip its fsync) while the flag is set. The writer lock is held by whoever
** commits, so commit_mu is never contended by two live write txns. */
static int commit_top(shared_env_t *se, MDB_txn *txn, int durable, int notify) {
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
static int tx_end(tx_t *t, int rc) {
  int mrc;
  if (!t->txn) return rc;
  if (rc != 0 || !t->write) {
    mdb_txn_abort(t->txn);
    t->txn = NULL;
    return rc;
  }
  mrc = t->nested ? mdb_txn_commit(t->txn) : commit_top(t->se, t->txn, t->durable, 1);
  t->txn = NULL;
  return mrc ? tx_err(t, mrc, "commit") : 0;
}

/* Room for element n of a growable array: the (maybe moved) array, or NULL when out of
** memory (the old array stays valid). */
static void *grow(void *v, size_t *cap, size_t n, size_t elem) {
  size_t ncap;
  if (n < *cap) return v;
  ncap = *cap ? *cap * 2 : 16;
  if (!(v = realloc(v, ncap * elem))) return NULL;
  *cap = ncap;
  return v;
}

/* {===== keys =====} */

typedef struct {
  size_t n;
  int over; /* too long: becomes an empty key, which LMDB rejects */
  unsigned char b[LM_KEY_MAX];
} dkey_t;

static void k_init(dkey_t *k) { k->n = 0; k->over = 0; }

static void k_bytes(dkey_t *k, const void *p, size_t n) {
  if (k->n + n > sizeof k->b) { k->over = 1; return; }
  memcpy(k->b + k->n, p, n);
  k->n += n;
}

static void put_u64(unsigned char *b, uint64_t v) {
  int i;
  for (i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (56 - 8 * i));
}

static uint64_t get_u64(const void *p) {
  const unsigned char *b = p;
  uint64_t v = 0;
  int i;
  for (i = 0; i < 8; i++) v = (v << 8) | b[i];
  return v;
}

static void k_u64(dkey_t *k, uint64_t v) {
  unsigned char b[8];
  put_u64(b, v);
  k_bytes(k, b, 8);
}

/* Times before the epoch sort as 0: they are all "due". */
static void k_time(dkey_t *k, int64_t t) { k_u64(k, t < 0 ? 0 : (uint64_t)t); }
static void k_str(dkey_t *k, const char *s) { k_bytes(k, s, strlen(s) + 1); }
static void k_u8(dkey_t *k, unsigned v) { unsigned char c = (unsigned char)v; k_bytes(k, &c, 1); }

static MDB_val kval(const dkey_t *k) {
  MDB_val v;
  v.mv_size = k->over ? 0 : k->n;
  v.mv_data = (void *)k->b;
  return v;
}

static void key_inst(dkey_t *k, const char *inst) { k_init(k); k_str(k, inst); }
static void key_exec(dkey_t *k, const char *inst, uint64_t exec) {
  key_inst(k, inst);
  k_u64(k, exec);
}
static void key_hist(dkey_t *k, const char *inst, uint64_t exec, uint64_t ev) {
  key_exec(k, inst, exec);
  k_u64(k, ev);
}
static void key_seq(dkey_t *k, uint64_t seq) { k_init(k); k_u64(k, seq); }
static void key_timed(dkey_t *k, int64_t at, const char *inst) {
  k_init(k);
  k_time(k, at);
  k_str(k, inst);
}
static void key_work_idx(dkey_t *k, unsigned cls, int64_t at, uint64_t seq) {
  k_init(k);
  k_u8(k, cls);
  k_time(k, at);
  k_u64(k, seq);
}
static void key_ident(dkey_t *k, const char *inst, uint64_t exec, uint64_t act) {
  key_exec(k, inst, exec);
  k_u64(k, act);
}
static void key_name(dkey_t *k, const char *name) { k_init(k); k_bytes(k, name, strlen(name)); }

/* {===== basic operations =====} */

static int db_get(tx_t *t, int db, const dkey_t *k, MDB_val *v) {
  MDB_val key = kval(k);
  int rc = mdb_get(t->txn, t->se->dbi[db], &key, v);
  if (rc == MDB_NOTFOUND) return DX_ENOTFOUND; /* callers decide; err untouched */
  return rc ? tx_err(t, rc, db_names[db]) : 0;
}

static int db_put(tx_t *t, int db, const dkey_t *k, const void *data, size_t n, unsigned flags) {
  MDB_val key = kval(k), val;
  int rc;
  val.mv_size = n;
  val.mv_data = (void *)data;
  rc = mdb_put(t->txn, t->se->dbi[db], &key, &val, flags);
  if (rc) {
    char what[64];
    snprintf(what, sizeof what, "writing %s", db_names[db]);
    return tx_err(t, rc, what);
  }
  return 0;
}

/* Deleting a missing key is fine. */
static int db_del(tx_t *t, int db, const dkey_t *k) {
  MDB_val key = kval(k);
  int rc = mdb_del(t->txn, t->se->dbi[db], &key, NULL);
  if (rc && rc != MDB_NOTFOUND) {
    char what[64];
    snprintf(what, sizeof what, "deleting from %s", db_names[db]);
    return tx_err(t, rc, what);
  }
  return 0;
}

/* The one place index entries are written or removed. */
static int idx_op(tx_t *t, int db, const dkey_t *k, const void *v, size_t n, int put) {
  return put ? db_put(t, db, k, v, n, 0) : db_del(t, db, k);
}

/* Calls fn for every key of `db` starting with `prefix`, in order; fn returns 0 to go on,
** > 0 to stop, < 0 (an error code) to fail. fn must not write to `db`. */
typedef int (*scan_fn)(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud);

static int scan_prefix(tx_t *t, int db, const dkey_t *prefix, scan_fn fn, void *ud) {
  MDB_cursor *c;
  MDB_val k = kval(prefix), v;
  int rc = 0, mrc = mdb_cursor_open(t->txn, t->se->dbi[db], &c);
  if (mrc) return tx_err(t, mrc, db_names[db]);
  mrc = mdb_cursor_get(c, &k, &v, prefix->n ? MDB_SET_RANGE : MDB_FIRST);
  while (mrc == 0 && k.mv_size >= prefix->n && memcmp(k.mv_data, prefix->b, prefix->n) == 0) {
    if ((rc = fn(t, &k, &v, ud)) != 0) break;
    mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT);
  }
  mdb_cursor_close(c);
  if (rc < 0) return rc;
  if (mrc && mrc != MDB_NOTFOUND) return tx_err(t, mrc, db_names[db]);
  return 0;
}

static int head_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  *(MDB_val *)ud = *k;
  return 1;
}

/* First key of `db` under `prefix`: 0, DX_ENOTFOUND (err untouched) or an error. The bytes
** stay valid until the txn writes. */
static int head_key(tx_t *t, int db, const dkey_t *prefix, MDB_val *key) {
  int rc;
  key->mv_size = 0;
  key->mv_data = NULL;
  rc = scan_prefix(t, db, prefix, head_cb, key);
  if (rc) return rc;
  return key->mv_data ? 0 : DX_ENOTFOUND;
}

/* Formats "corrupted record in <db> (<key>): detail". */
static int corrupt(tx_t *t, int db, const char *detail, const char *keyfmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
static int corrupt(tx_t *t, int db, const char *detail, const char *keyfmt, ...) {
  char key[256];
  va_list ap;
  va_start(ap, keyfmt);
  vsnprintf(key, sizeof key, keyfmt, ap);
  va_end(ap);
  return dx_error_set(t->err, DX_ECORRUPT, "corrupted record in %s (%s)%s%s", db_names[db], key,
                      detail ? ": " : "", detail ? detail : "");
}

static int next_seq(tx_t *t, uint64_t *out) {
  dkey_t k;
  MDB_val v;
  unsigned char b[8];
  uint64_t s = 0;
  int rc;
  key_name(&k, "seq");
  rc = db_get(t, DB_META, &k, &v);
  if (rc == 0) {
    if (v.mv_size != 8) return corrupt(t, DB_META, "not 8 bytes", "seq");
    s = get_u64(v.mv_data);
  } else if (rc != DX_ENOTFOUND) {
    return rc;
  }
  put_u64(b, ++s);
  *out = s;
  return db_put(t, DB_META, &k, b, 8, 0);
}

/* {===== wrapper records (MessagePack arrays [format, fields...]) =====} */

typedef struct {
  msgpack_sbuffer sb;
  msgpack_packer pk;
  int bad;
} wr_t;

static void wr_begin(wr_t *w, uint32_t nfields) {
  msgpack_sbuffer_init(&w->sb);
  msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
  w->bad = msgpack_pack_array(&w->pk, nfields + 1);
  w->bad |= msgpack_pack_uint32(&w->pk, LM_RECORD_FORMAT);
}

static void wr_int(wr_t *w, int64_t v) { w->bad |= msgpack_pack_int64(&w->pk, v); }
static void wr_uint(wr_t *w, uint64_t v) { w->bad |= msgpack_pack_uint64(&w->pk, v); }

static void wr_str(wr_t *w, const char *s) {
  size_t n;
  if (!s) { w->bad |= msgpack_pack_nil(&w->pk); return; }
  n = strlen(s);
  w->bad |= msgpack_pack_str(&w->pk, n);
  w->bad |= msgpack_pack_str_body(&w->pk, s, n);
}

static void wr_bin(wr_t *w, const void *p, size_t n) {
  w->bad |= msgpack_pack_bin(&w->pk, n);
  w->bad |= msgpack_pack_bin_body(&w->pk, p, n);
}

/* Store the record under k and release the writer. */
static int wr_put(tx_t *t, wr_t *w, int db, const dkey_t *k) {
  int rc = w->bad ? nomem(t->err) : db_put(t, db, k, w->sb.data, w->sb.size, 0);
  msgpack_sbuffer_destroy(&w->sb);
  return rc;
}

typedef struct {
  msgpack_unpacked up;
  const msgpack_object *f;
  int rc; /* 0, DX_ECORRUPT or DX_ENOMEM: the first problem met */
} rd_t;

static void rd_open(rd_t *r, const MDB_val *v, uint32_t nfields) {
  size_t off = 0;
  const msgpack_object *o;
  msgpack_unpacked_init(&r->up);
  r->f = NULL;
  r->rc = DX_ECORRUPT;
  if (msgpack_unpack_next(&r->up, v->mv_data, v->mv_size, &off) != MSGPACK_UNPACK_SUCCESS) return;
  o = &r->up.data;
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < nfields + 1) return;
  o = o->via.array.ptr;
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 != LM_RECORD_FORMAT) return;
  r->f = o;
  r->rc = 0;
}

static int64_t rd_int(rd_t *r, uint32_t i) {
  const msgpack_object *o;
  if (r->rc) return 0;
  o = &r->f[i];
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
    return (int64_t)o->via.u64;
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return o->via.i64;
  r->rc = DX_ECORRUPT;
  return 0;
}

static uint64_t rd_uint(rd_t *r, uint32_t i) {
  if (r->rc) return 0;
  if (r->f[i].type == MSGPACK_OBJECT_POSITIVE_INTEGER) return r->f[i].via.u64;
  r->rc = DX_ECORRUPT;
  return 0;
}

/* Owned copy of a str or bin field (NUL-terminated); NULL for nil. */
static char *rd_bytes(rd_t *r, uint32_t i, size_t *len) {
  const msgpack_object *o;
  const char *p;
  size_t n;
  char *s;
  if (len) *len = 0;
  if (r->rc) return NULL;
  o = &r->f[i];
  if (o->type == MSGPACK_OBJECT_NIL) return NULL;
  if (o->type == MSGPACK_OBJECT_STR) { p = o->via.str.ptr; n = o->via.str.size; }
  else if (o->type == MSGPACK_OBJECT_BIN) { p = o->via.bin.ptr; n = o->via.bin.size; }
  else { r->rc = DX_ECORRUPT; return NULL; }
  if (!(s = malloc(n + 1))) { r->rc = DX_ENOMEM; return NULL; }
  if (n) memcpy(s, p, n);
  s[n] = 0;
  if (len) *len = n;
  return s;
}

static char *rd_str(rd_t *r, uint32_t i) { return rd_bytes(r, i, NULL); }

static int rd_close(rd_t *r) {
  msgpack_unpacked_destroy(&r->up);
  return r->rc;
}

/* Turn a decode result into the error reported to the caller. */
static int decoded(tx_t *t, int rc, int db, const char *what) {
  if (rc == 0) return 0;
  if (rc == DX_ENOMEM) return nomem(t->err);
  return corrupt(t, db, "not a valid record", "%s", what);
}

/* {===== instance and execution records =====} */

typedef struct {
  char *name, *version, *custom_status, *parent;
  uint64_t current_exec, cs_version, created_seq;
  int64_t created_at, updated_at;
} inst_rec_t;

enum { IR_NAME = 1, IR_VERSION, IR_EXEC, IR_CS, IR_CS_VER, IR_CREATED, IR_UPDATED, IR_PARENT,
       IR_SEQ, IR__END };

static void inst_clear(inst_rec_t *r) {
  free(r->name);
  free(r->version);
  free(r->custom_status);
  free(r->parent);
  memset(r, 0, sizeof *r);
}

/* 0, DX_ENOTFOUND (err untouched, *r zeroed) or an error. */
static int inst_get(tx_t *t, const char *inst, inst_rec_t *r) {
  dkey_t k;
  MDB_val v;
  rd_t rd;
  char what[LM_INSTANCE_MAX + 16];
  int rc;
  memset(r, 0, sizeof *r);
  key_inst(&k, inst);
  if ((rc = db_get(t, DB_INSTANCES, &k, &v))) return rc;
  rd_open(&rd, &v, IR__END - 1);
  r->name = rd_str(&rd, IR_NAME);
  r->version = rd_str(&rd, IR_VERSION);
  r->current_exec = rd_uint(&rd, IR_EXEC);
  r->custom_status = rd_str(&rd, IR_CS);
  r->cs_version = rd_uint(&rd, IR_CS_VER);
  r->created_at = rd_int(&rd, IR_CREATED);
  r->updated_at = rd_int(&rd, IR_UPDATED);
  r->parent = rd_str(&rd, IR_PARENT);
  r->created_seq = rd_uint(&rd, IR_SEQ);
  if ((rc = rd_close(&rd))) inst_clear(r);
  snprintf(what, sizeof what, "instance '%s'", inst);
  return decoded(t, rc, DB_INSTANCES, what);
}

static int inst_put(tx_t *t, const char *inst, const inst_rec_t *r) {
  dkey_t k;
  wr_t w;
  wr_begin(&w, IR__END - 1);
  wr_str(&w, r->name);
  wr_str(&w, r->version);
  wr_uint(&w, r->current_exec);
  wr_str(&w, r->custom_status);
  wr_uint(&w, r->cs_version);
  wr_int(&w, r->created_at);
  wr_int(&w, r->updated_at);
  wr_str(&w, r->parent);
  wr_uint(&w, r->created_seq);
  key_inst(&k, inst);
  return wr_put(t, &w, DB_INSTANCES, &k);
}

typedef struct {
  int status;
  char *output;
  dx_failure_t fail;
  int64_t started_at, completed_at;
} exec_rec_t;

enum { ER_STATUS = 1, ER_OUTPUT, ER_FCAT, ER_FKIND, ER_FMSG, ER_FRETRY, ER_STARTED, ER_COMPLETED,
       ER__END };

static void exec_clear(exec_rec_t *r) {
  free(r->output);
  dx_failure_clear(&r->fail);
  memset(r, 0, sizeof *r);
}

static int exec_get(tx_t *t, const char *inst, uint64_t exec, exec_rec_t *r) {
  dkey_t k;
  MDB_val v;
  rd_t rd;
  char what[LM_INSTANCE_MAX + 64];
  int rc;
  memset(r, 0, sizeof *r);
  key_exec(&k, inst, exec);
  if ((rc = db_get(t, DB_EXECUTIONS, &k, &v))) return rc;
  rd_open(&rd, &v, ER__END - 1);
  r->status = (int)rd_int(&rd, ER_STATUS);
  r->output = rd_str(&rd, ER_OUTPUT);
  r->fail.category = (int)rd_int(&rd, ER_FCAT);
  r->fail.kind = rd_str(&rd, ER_FKIND);
  r->fail.message = rd_str(&rd, ER_FMSG);
  r->fail.retryable = (int)rd_int(&rd, ER_FRETRY);
  r->started_at = rd_int(&rd, ER_STARTED);
  r->completed_at = rd_int(&rd, ER_COMPLETED);
  if ((rc = rd_close(&rd))) exec_clear(r);
  snprintf(what, sizeof what, "instance '%s' execution %llu", inst, (unsigned long long)exec);
  return decoded(t, rc, DB_EXECUTIONS, what);
}

static int exec_put(tx_t *t, const char *inst, uint64_t exec, const exec_rec_t *r) {
  dkey_t k;
  wr_t w;
  wr_begin(&w, ER__END - 1);
  wr_int(&w, r->status);
  wr_str(&w, r->output);
  wr_int(&w, r->fail.category);
  wr_str(&w, r->fail.kind);
  wr_str(&w, r->fail.message);
  wr_int(&w, r->fail.retryable);
  wr_int(&w, r->started_at);
  wr_int(&w, r->completed_at);
  key_exec(&k, inst, exec);
  return wr_put(t, &w, DB_EXECUTIONS, &k);
}

/* {===== history =====} */

static int history_append(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    dkey_t k;
    char *buf;
    size_t len;
    int rc;
    if (dx__event_encode(&ev[i], &buf, &len)) return nomem(t->err);
    key_hist(&k, inst, exec, ev[i].event_id);
    rc = db_put(t, DB_HISTORY, &k, buf, len, MDB_NOOVERWRITE);
    free(buf);
    if (rc == DX_EEXIST)
      return dx_error_set(t->err, DX_EEXIST,
                          "event %llu already exists in instance '%s' execution %llu",
                          (unsigned long long)ev[i].event_id, inst, (unsigned long long)exec);
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
  if (!(nv = grow(h->v, &h->cap, h->n, sizeof *h->v))) return nomem(t->err);
  h->v = nv;
  memset(&h->v[h->n], 0, sizeof h->v[h->n]);
  if (k->mv_size == h->prefix_n + 8 &&
      (rc = dx__event_decode(v->mv_data, v->mv_size, &h->v[h->n], &derr)) == DX_ENOMEM)
    return nomem(t->err);
  if (k->mv_size != h->prefix_n + 8 || rc)
    return corrupt(t, DB_HISTORY, k->mv_size != h->prefix_n + 8 ? "bad key" : derr.msg,
                   "instance '%s' execution %llu event %llu", h->inst,
                   (unsigned long long)exec, (unsigned long long)id);
  h->n++;
  return 0;
}

/* Events of one execution, ascending event_id. DX_ECORRUPT names the undecodable event. */
static int history_load(tx_t *t, const char *inst, uint64_t exec, dx_event_t **out, size_t *n) {
  hist_acc_t h;
  dkey_t k;
  int rc;
  memset(&h, 0, sizeof h);
  h.inst = inst;
  key_exec(&k, inst, exec);
  h.prefix_n = k.n;
  rc = scan_prefix(t, DB_HISTORY, &k, history_cb, &h);
  if (rc) {
    dx_events_free(h.v, h.n);
    return rc;
  }
  *out = h.v;
  *n = h.n;
  return 0;
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
static int resolve_exec(tx_t *t, const char *inst, uint64_t want, uint64_t *exec) {
  inst_rec_t r;
  dkey_t k;
  uint64_t acc[2];
  int rc = inst_get(t, inst, &r);
  if (rc == 0) {
    *exec = want ? want : r.current_exec;
    inst_clear(&r);
    return 0;
  }
  if (rc != DX_ENOTFOUND) return rc;
  key_inst(&k, inst);
  acc[0] = k.n;
  acc[1] = 0;
  if ((rc = scan_prefix(t, DB_HISTORY, &k, max_exec_cb, acc))) return rc;
  if (acc[1] == 0) return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  *exec = want ? want : acc[1];
  return 0;
}

/* {===== orchestrator queue: messages =====} */

typedef struct {
  uint64_t seq;
  int64_t visible_at;
  uint64_t token;    /* the fetch batch this message belongs to; 0 = none */
  uint64_t attempt;
  char *item;        /* owned copy of the item record */
  size_t item_len;
} orch_msg_t;

enum { OM_VISIBLE = 1, OM_TOKEN, OM_ATTEMPT, OM_ITEM, OM__END };

typedef struct {
  const char *inst;
  size_t prefix_n;
  orch_msg_t *v;
  size_t n, cap;
} msg_list_t;

static void msgs_free(msg_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) free(l->v[i].item);
  free(l->v);
  l->v = NULL;
  l->n = l->cap = 0;
}

static int msgs_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  msg_list_t *l = ud;
  orch_msg_t *m;
  rd_t rd;
  int rc;
  char what[LM_INSTANCE_MAX + 64];
  orch_msg_t *nv;
  if (!(nv = grow(l->v, &l->cap, l->n, sizeof *l->v))) return nomem(t->err);
  l->v = nv;
  m = &l->v[l->n];
  memset(m, 0, sizeof *m);
  m->seq = k->mv_size == l->prefix_n + 8 ? get_u64((const char *)k->mv_data + l->prefix_n) : 0;
  rd_open(&rd, v, OM__END - 1);
  m->visible_at = rd_int(&rd, OM_VISIBLE);
  m->token = rd_uint(&rd, OM_TOKEN);
  m->attempt = rd_uint(&rd, OM_ATTEMPT);
  m->item = rd_bytes(&rd, OM_ITEM, &m->item_len);
  rc = rd_close(&rd);
  if (!rc && (!m->item || m->seq == 0)) rc = DX_ECORRUPT;
  if (rc) {
    free(m->item);
    snprintf(what, sizeof what, "instance '%s' message %llu", l->inst, (unsigned long long)m->seq);
    return decoded(t, rc, DB_ORCH_MSGS, what);
  }
  l->n++;
  return 0;
}

/* Every message of one instance, oldest first. */
static int msgs_load(tx_t *t, const char *inst, msg_list_t *l) {
  dkey_t k;
  int rc;
  memset(l, 0, sizeof *l);
  l->inst = inst;
  key_inst(&k, inst);
  l->prefix_n = k.n;
  rc = scan_prefix(t, DB_ORCH_MSGS, &k, msgs_cb, l);
  if (rc) msgs_free(l);
  return rc;
}

static int msg_put(tx_t *t, const char *inst, const orch_msg_t *m) {
  dkey_t k;
  wr_t w;
  wr_begin(&w, OM__END - 1);
  wr_int(&w, m->visible_at);
  wr_uint(&w, m->token);
  wr_uint(&w, m->attempt);
  wr_bin(&w, m->item, m->item_len);
  key_inst(&k, inst);
  k_u64(&k, m->seq);
  return wr_put(t, &w, DB_ORCH_MSGS, &k);
}

static int msg_del(tx_t *t, const char *inst, uint64_t seq) {
  dkey_t k;
  key_inst(&k, inst);
  k_u64(&k, seq);
  return db_del(t, DB_ORCH_MSGS, &k);
}

/* Delete the messages of `l` tagged with `token` (token 0: those visible at `now`). */
static int msgs_delete(tx_t *t, const msg_list_t *l, uint64_t token, int64_t now) {
  size_t i;
  int rc;
  for (i = 0; i < l->n; i++) {
    int hit = token ? l->v[i].token == token : l->v[i].visible_at <= now;
    if (hit && (rc = msg_del(t, l->inst, l->v[i].seq))) return rc;
  }
  return 0;
}

/* {===== orchestrator queue: per-instance state and indexes =====} */

typedef struct {
  int64_t ready_at;     /* unlocked: min visible_at of the messages; LM_NEVER when none */
  int64_t locked_until; /* locked: lock expiry */
  uint64_t token;       /* 0 = unlocked */
} orch_state_t;

static const orch_state_t STATE_EMPTY = {LM_NEVER, 0, 0};

enum { OS_READY = 1, OS_LOCKED, OS_TOKEN, OS__END };

/* The index entry a state implies: DB_ORCH_LOCK, DB_ORCH_READY or -1 (none). */
static int state_index(const char *inst, const orch_state_t *s, dkey_t *k) {
  if (s->token) { key_timed(k, s->locked_until, inst); return DB_ORCH_LOCK; }
  if (s->ready_at != LM_NEVER) { key_timed(k, s->ready_at, inst); return DB_ORCH_READY; }
  return -1;
}

/* 0 or an error; a missing record reads as STATE_EMPTY. */
static int state_get(tx_t *t, const char *inst, orch_state_t *s) {
  dkey_t k;
  MDB_val v;
  rd_t rd;
  char what[LM_INSTANCE_MAX + 16];
  int rc;
  *s = STATE_EMPTY;
  key_inst(&k, inst);
  rc = db_get(t, DB_ORCH_STATE, &k, &v);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  rd_open(&rd, &v, OS__END - 1);
  s->ready_at = rd_int(&rd, OS_READY);
  s->locked_until = rd_int(&rd, OS_LOCKED);
  s->token = rd_uint(&rd, OS_TOKEN);
  snprintf(what, sizeof what, "instance '%s'", inst);
  return decoded(t, rd_close(&rd), DB_ORCH_STATE, what);
}

/* Replace state `old` by `nw`, moving the instance between the ready and lock indexes. */
static int state_set(tx_t *t, const char *inst, const orch_state_t *old, const orch_state_t *nw) {
  dkey_t k;
  wr_t w;
  int db, rc;
  if ((db = state_index(inst, old, &k)) >= 0 && (rc = idx_op(t, db, &k, NULL, 0, 0))) return rc;
  db = state_index(inst, nw, &k);
  if (db >= 0 && (rc = idx_op(t, db, &k, "", 0, 1))) return rc;
  key_inst(&k, inst);
  if (db < 0) return db_del(t, DB_ORCH_STATE, &k);
  wr_begin(&w, OS__END - 1);
  wr_int(&w, nw->ready_at);
  wr_int(&w, nw->locked_until);
  wr_uint(&w, nw->token);
  return wr_put(t, &w, DB_ORCH_STATE, &k);
}

/* Unlock the instance; it becomes ready at its earliest remaining message, if any. */
static int orch_release(tx_t *t, const char *inst, const orch_state_t *old) {
  msg_list_t l;
  orch_state_t nw = STATE_EMPTY;
  size_t i;
  int rc = msgs_load(t, inst, &l);
  if (rc) return rc;
  for (i = 0; i < l.n; i++)
    if (l.v[i].visible_at < nw.ready_at) nw.ready_at = l.v[i].visible_at;
  msgs_free(&l);
  return state_set(t, inst, old, &nw);
}

/* Timers become visible when they fire; everything else after the delay. */
static int64_t orch_visible_at(const dx_work_item_t *w, int64_t now, int64_t delay_ms) {
  int64_t at = sat_add(now, delay_ms > 0 ? delay_ms : 0);
  if (w->kind == DX_WI_TIMER_FIRED && w->fire_at_ms > at) at = w->fire_at_ms;
  return at;
}

/* Store a message for item->instance. A locked instance is re-indexed by ack or abandon. */
static int orch_enqueue(tx_t *t, const dx_work_item_t *w, int64_t visible_at) {
  orch_msg_t m;
  orch_state_t old, nw;
  int rc;
  memset(&m, 0, sizeof m);
  m.visible_at = visible_at;
  if (dx__work_item_encode(w, &m.item, &m.item_len)) return nomem(t->err);
  rc = next_seq(t, &m.seq);
  if (!rc) rc = msg_put(t, w->instance, &m);
  free(m.item);
  if (!rc) rc = state_get(t, w->instance, &old);
  if (rc || old.token || old.ready_at <= visible_at) return rc;
  nw = old;
  nw.ready_at = visible_at;
  return state_set(t, w->instance, &old, &nw);
}

/* Validate a lock: unknown or other token -> DX_ETOKEN; expired (when need_live) -> DX_ELOCK. */
static int orch_check_lock(tx_t *t, const char *inst, uint64_t token, int64_t now, int need_live,
                           orch_state_t *s) {
  int rc = state_get(t, inst, s);
  if (rc) return rc;
  if (token == 0 || s->token != token)
    return dx_error_set(t->err, DX_ETOKEN, "instance '%s' is not locked with token %llx", inst,
                        (unsigned long long)token);
  if (need_live && s->locked_until <= now)
    return dx_error_set(t->err, DX_ELOCK, "the lock on instance '%s' expired at %lld (now %lld)",
                        inst, (long long)s->locked_until, (long long)now);
  return 0;
}

/* {===== orchestrator fetch =====} */

typedef struct {
  int db;       /* index the candidate came from */
  int64_t at;   /* ready_at or locked_until */
  dkey_t key;
  char *inst;   /* NULL: no candidate */
} orch_cand_t;

/* Consider the head of a timed index (be64 time + inst\0); keep the older candidate. */
static int orch_head(tx_t *t, int db, int64_t now, orch_cand_t *c) {
  dkey_t none;
  MDB_val k;
  int64_t at;
  char *inst;
  int rc;
  k_init(&none);
  rc = head_key(t, db, &none, &k);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  if (k.mv_size < 10 || ((const char *)k.mv_data)[k.mv_size - 1] != 0)
    return corrupt(t, db, "bad key", "%zu-byte key", k.mv_size);
  at = (int64_t)get_u64(k.mv_data);
  if (at > now || (c->inst && c->at <= at)) return 0;
  if (!(inst = dx__strdup((const char *)k.mv_data + 8))) return nomem(t->err);
  free(c->inst);
  c->inst = inst;
  c->db = db;
  c->at = at;
  k_init(&c->key);
  k_bytes(&c->key, k.mv_data, k.mv_size);
  return 0;
}

/* The instance to lock: the older of the ready head (due) and the lock head (expired). */
static int orch_pick(tx_t *t, int64_t now, orch_cand_t *c) {
  int rc;
  memset(c, 0, sizeof *c);
  rc = orch_head(t, DB_ORCH_READY, now, c);
  if (!rc) rc = orch_head(t, DB_ORCH_LOCK, now, c);
  return rc;
}

static int starts_instance(const dx_work_item_t *w) {
  return w->kind == DX_WI_START || w->kind == DX_WI_CAN;
}

/* Decode the messages visible at `now` (the batch). */
static int batch_decode(tx_t *t, const msg_list_t *l, int64_t now, dx_work_item_t **out,
                        size_t *n) {
  dx_work_item_t *v = calloc(l->n ? l->n : 1, sizeof *v);
  size_t i, k = 0;
  dx_error_t derr = {0};
  int rc;
  if (!v) return nomem(t->err);
  for (i = 0; i < l->n; i++) {
    if (l->v[i].visible_at > now) continue;
    if ((rc = dx__work_item_decode(l->v[i].item, l->v[i].item_len, &v[k], &derr))) {
      size_t j;
      for (j = 0; j < k; j++) dx_work_item_clear(&v[j]);
      free(v);
      if (rc == DX_ENOMEM) return nomem(t->err);
      return corrupt(t, DB_ORCH_MSGS, derr.msg, "instance '%s' message %llu", l->inst,
                     (unsigned long long)l->v[i].seq);
    }
    k++;
  }
  *out = v;
  *n = k;
  return 0;
}

/* Tag the batch with the token and bump attempts; returns the batch's max attempt. */
static int batch_lock(tx_t *t, msg_list_t *l, int64_t now, uint64_t token, uint32_t *max_attempt) {
  size_t i;
  int rc;
  *max_attempt = 0;
  for (i = 0; i < l->n; i++) {
    orch_msg_t *m = &l->v[i];
    if (m->visible_at > now) continue;
    m->token = token;
    m->attempt++;
    if (m->attempt > *max_attempt) *max_attempt = (uint32_t)m->attempt;
    if ((rc = msg_put(t, l->inst, m))) return rc;
  }
  return 0;
}

/* Fill the locked item's name/version and history. A history that cannot be decoded is
** reported through history_error with the lock kept, as the runtime expects. */
static int orch_item_fill(tx_t *t, dx_orch_item_t *it, const inst_rec_t *ir) {
  const char *name = NULL, *version = NULL;
  dx_error_t herr = {0}, *saved = t->err;
  size_t i;
  int rc;
  if (ir) {
    name = ir->name;
    version = ir->version;
  } else {
    for (i = 0; i < it->messages_len && !name; i++)
      if (starts_instance(&it->messages[i])) {
        name = it->messages[i].name;
        version = it->messages[i].version;
      }
  }
  it->execution_id = ir ? ir->current_exec : 1;
  if ((name && !(it->orchestration_name = dx__strdup(name))) ||
      (version && !(it->orchestration_version = dx__strdup(version))))
    return nomem(t->err);
  t->err = &herr; /* a corrupt history is reported in the item, not as the call's error */
  rc = history_load(t, it->instance, it->execution_id, &it->history, &it->history_len);
  t->err = saved;
  if (rc == DX_ECORRUPT) {
    it->history_error = DX_ECORRUPT;
    if (!(it->history_error_msg = dx__strdup(herr.msg))) return nomem(t->err);
    return 0;
  }
  if (rc) dx_error_set(t->err, rc, "%s", herr.msg);
  return rc;
}

/* Try to lock candidate `c`. *out stays NULL when the candidate was cleaned up instead (no
** visible message, orphan messages, stray index entry); the caller then picks again. */
static int orch_try_lock(tx_t *t, const orch_cand_t *c, int64_t now, int64_t lock_ms,
                         dx_orch_item_t **out) {
  orch_state_t st, nw;
  msg_list_t l;
  dkey_t k;
  inst_rec_t ir;
  dx_orch_item_t *it = NULL;
  dx_work_item_t *items = NULL;
  size_t n = 0, i;
  int rc, has_ir, starts = 0;
  if ((rc = state_get(t, c->inst, &st))) return rc;
  if (state_index(c->inst, &st, &k) != c->db || k.n != c->key.n || memcmp(k.b, c->key.b, k.n))
    return db_del(t, c->db, &c->key); /* stray index entry: drop it */
  if ((rc = msgs_load(t, c->inst, &l))) return rc;
  if ((rc = batch_decode(t, &l, now, &items, &n))) goto done;
  if (n == 0) { rc = orch_release(t, c->inst, &st); goto done; }
  if ((rc = inst_get(t, c->inst, &ir)) && rc != DX_ENOTFOUND) goto done;
  has_ir = rc == 0;
  for (i = 0; i < n; i++) starts |= starts_instance(&items[i]);
  if (!has_ir && !starts) {
    /* messages for an instance that never started: drop them instead of letting them sit at
    ** the head of the queue (the reference's starvation quirk) */
    rc = msgs_delete(t, &l, 0, now);
    if (!rc) rc = orch_release(t, c->inst, &st);
    goto done;
  }
  nw.ready_at = LM_NEVER;
  nw.locked_until = sat_add(now, lock_ms);
  nw.token = dx__new_token();
  if (!(it = calloc(1, sizeof *it)) || !(it->instance = dx__strdup(c->inst))) {
    rc = nomem(t->err);
    goto done_ir;
  }
  it->lock_token = nw.token;
  it->messages = items;
  it->messages_len = n;
  items = NULL;
  if ((rc = batch_lock(t, &l, now, nw.token, &it->attempt_count))) goto done_ir;
  if ((rc = state_set(t, c->inst, &st, &nw))) goto done_ir;
  rc = orch_item_fill(t, it, has_ir ? &ir : NULL);
done_ir:
  inst_clear(&ir);
done:
  msgs_free(&l);
  if (items) {
    for (i = 0; i < n; i++) dx_work_item_clear(&items[i]);
    free(items);
  }
  if (rc == 0 && it) *out = it;
  else if (it) dx_orch_item_free(it);
  return rc;
}

static int orch_fetch(tx_t *t, int64_t now, int64_t lock_ms, dx_orch_item_t **out) {
  orch_cand_t c;
  int rc;
  for (;;) { /* each round locks an instance or removes the candidate from the indexes */
    if ((rc = orch_pick(t, now, &c)) || !c.inst) break;
    rc = orch_try_lock(t, &c, now, lock_ms, out);
    free(c.inst);
    if (rc || *out) return rc;
  }
  free(c.inst);
  return rc;
}

/* {===== sessions: records and queues =====} */

/* A session row. Owned <=> owner is non-empty; the lease is live while locked_until > now. */
typedef struct {
  char *owner;        /* NULL or "" = unowned (released) */
  char *prev;         /* owner before the current one (or before a release); NULL if none */
  int64_t locked_until, last_activity;
} sess_rec_t;

enum { SR_OWNER = 1, SR_PREV, SR_LOCKED, SR_LAST, SR__END };

static int sess_owned(const sess_rec_t *r) { return r->owner && *r->owner; }

static int sess_owner_is(const sess_rec_t *r, const char *worker) {
  return sess_owned(r) && strcmp(r->owner, worker) == 0;
}

static void sess_clear(sess_rec_t *r) {
  free(r->owner);
  free(r->prev);
  memset(r, 0, sizeof *r);
}

static uint64_t time_u64(int64_t t) { return t < 0 ? 0 : (uint64_t)t; }

static void key_sess_owner(dkey_t *k, const char *owner, const char *sid) {
  k_init(k);
  k_str(k, owner);
  k_str(k, sid);
}

static void key_sess_item(dkey_t *k, const char *sid, int64_t due, uint64_t seq) {
  key_inst(k, sid);
  k_time(k, due);
  k_u64(k, seq);
}

static void key_sess_head(dkey_t *k, uint64_t due, uint64_t seq, const char *sid) {
  k_init(k);
  k_u64(k, due);
  k_u64(k, seq);
  k_str(k, sid);
}

static int sess_decode(tx_t *t, const char *sid, const MDB_val *v, sess_rec_t *r) {
  char what[LM_SESSION_MAX + 16];
  rd_t rd;
  int rc;
  memset(r, 0, sizeof *r);
  rd_open(&rd, v, SR__END - 1);
  r->owner = rd_str(&rd, SR_OWNER);
  r->prev = rd_str(&rd, SR_PREV);
  r->locked_until = rd_int(&rd, SR_LOCKED);
  r->last_activity = rd_int(&rd, SR_LAST);
  if ((rc = rd_close(&rd))) sess_clear(r);
  snprintf(what, sizeof what, "session '%s'", sid);
  return decoded(t, rc, DB_SESSIONS, what);
}

/* 0, DX_ENOTFOUND (err untouched, *r zeroed) or an error. */
static int sess_get(tx_t *t, const char *sid, sess_rec_t *r) {
  dkey_t k;
  MDB_val v;
  int rc;
  memset(r, 0, sizeof *r);
  key_inst(&k, sid);
  if ((rc = db_get(t, DB_SESSIONS, &k, &v))) return rc;
  return sess_decode(t, sid, &v, r);
}

/* Replace session row `old` (NULL: none) by `nw` (NULL: delete), keeping sess_owner in step. */
static int sess_put(tx_t *t, const char *sid, const sess_rec_t *old, const sess_rec_t *nw) {
  int same = old && nw && sess_owned(old) && sess_owned(nw) &&
             strcmp(old->owner, nw->owner) == 0 &&
             time_u64(old->locked_until) == time_u64(nw->locked_until);
  unsigned char b[8];
  dkey_t k;
  wr_t w;
  int rc;
  if (!same && old && sess_owned(old)) {
    key_sess_owner(&k, old->owner, sid);
    if ((rc = db_del(t, DB_SESS_OWNER, &k))) return rc;
  }
  if (!same && nw && sess_owned(nw)) {
    key_sess_owner(&k, nw->owner, sid);
    put_u64(b, time_u64(nw->locked_until));
    if ((rc = db_put(t, DB_SESS_OWNER, &k, b, 8, 0))) return rc;
  }
  key_inst(&k, sid);
  if (!nw) return db_del(t, DB_SESSIONS, &k);
  wr_begin(&w, SR__END - 1);
  wr_str(&w, sess_owned(nw) ? nw->owner : "");
  wr_str(&w, nw->prev);
  wr_int(&w, nw->locked_until);
  wr_int(&w, nw->last_activity);
  return wr_put(t, &w, DB_SESSIONS, &k);
}

/* Work flowed through the session (ack, lock renewal): last_activity = now. No row: no-op. */
static int sess_touch(tx_t *t, const char *sid, int64_t now) {
  sess_rec_t r, nw;
  int rc;
  if (!sid) return 0;
  rc = sess_get(t, sid, &r);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  nw = r;
  nw.last_activity = now;
  rc = sess_put(t, sid, &r, &nw);
  sess_clear(&r);
  return rc;
}

/* A session's queue summary: its earliest row (due time, seq) and how many rows it has. */
typedef struct {
  int found;
  uint64_t due, seq, rows;
} sess_queue_t;

static int squeue_get(tx_t *t, const char *sid, sess_queue_t *q) {
  dkey_t k;
  MDB_val v;
  int rc;
  memset(q, 0, sizeof *q);
  key_inst(&k, sid);
  rc = db_get(t, DB_SESS_QUEUE, &k, &v);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  if (v.mv_size != 24) return corrupt(t, DB_SESS_QUEUE, "not 24 bytes", "session '%s'", sid);
  q->found = 1;
  q->due = get_u64(v.mv_data);
  q->seq = get_u64((const char *)v.mv_data + 8);
  q->rows = get_u64((const char *)v.mv_data + 16);
  return 0;
}

/* After rows of `sid` were added, removed or re-timed (delta: change in their number), point
** the session's sess_queue record and sess_heads entry at its earliest row again. */
static int squeue_refresh(tx_t *t, const char *sid, int delta) {
  sess_queue_t q;
  dkey_t k, pre;
  MDB_val head;
  unsigned char b[24];
  uint64_t due = 0, seq = 0, rows;
  int rc, has;
  if ((rc = squeue_get(t, sid, &q))) return rc;
  key_inst(&pre, sid);
  rc = head_key(t, DB_SESS_ITEMS, &pre, &head);
  if (rc && rc != DX_ENOTFOUND) return rc;
  if ((has = rc == 0)) {
    if (head.mv_size != pre.n + 16)
      return corrupt(t, DB_SESS_ITEMS, "bad key", "session '%s'", sid);
    due = get_u64((const char *)head.mv_data + pre.n);
    seq = get_u64((const char *)head.mv_data + pre.n + 8);
  }
  rows = delta < 0 && q.rows < (uint64_t)-delta ? 0 : q.rows + (uint64_t)(int64_t)delta;
  if (has && rows == 0) rows = 1;
  if (q.found && has && q.due == due && q.seq == seq && q.rows == rows) return 0;
  if (q.found) {
    key_sess_head(&k, q.due, q.seq, sid);
    if ((rc = db_del(t, DB_SESS_HEADS, &k))) return rc;
  }
  key_inst(&k, sid);
  if (!has) return db_del(t, DB_SESS_QUEUE, &k);
  put_u64(b, due);
  put_u64(b + 8, seq);
  put_u64(b + 16, rows);
  if ((rc = db_put(t, DB_SESS_QUEUE, &k, b, 24, 0))) return rc;
  key_sess_head(&k, due, seq, sid);
  return db_put(t, DB_SESS_HEADS, &k, "", 0, 0);
}

/* {===== worker queue =====} */

typedef struct {
  uint64_t seq;
  int64_t visible_at, locked_until;
  uint64_t token;   /* 0 = unlocked */
  uint64_t attempt;
  char *session_id; /* NULL: a plain row; else indexed in sess_items, not work_ready/lock */
  char *instance;
  uint64_t exec, act_id;
  char *item;
  size_t item_len;
} work_row_t;

enum { WR_VISIBLE = 1, WR_LOCKED, WR_TOKEN, WR_ATTEMPT, WR_SESSION, WR_INST, WR_EXEC, WR_ACT,
       WR_ITEM, WR__END };

static void row_clear(work_row_t *r) {
  free(r->session_id);
  free(r->instance);
  free(r->item);
  memset(r, 0, sizeof *r);
}

static int row_get(tx_t *t, uint64_t seq, work_row_t *r) {
  dkey_t k;
  MDB_val v;
  rd_t rd;
  char what[64];
  int rc;
  memset(r, 0, sizeof *r);
  key_seq(&k, seq);
  if ((rc = db_get(t, DB_WORK, &k, &v))) return rc;
  rd_open(&rd, &v, WR__END - 1);
  r->seq = seq;
  r->visible_at = rd_int(&rd, WR_VISIBLE);
  r->locked_until = rd_int(&rd, WR_LOCKED);
  r->token = rd_uint(&rd, WR_TOKEN);
  r->attempt = rd_uint(&rd, WR_ATTEMPT);
  r->session_id = rd_str(&rd, WR_SESSION);
  r->instance = rd_str(&rd, WR_INST);
  r->exec = rd_uint(&rd, WR_EXEC);
  r->act_id = rd_uint(&rd, WR_ACT);
  r->item = rd_bytes(&rd, WR_ITEM, &r->item_len);
  rc = rd_close(&rd);
  if (!rc && (!r->instance || !r->item)) rc = DX_ECORRUPT;
  if (rc) row_clear(r);
  snprintf(what, sizeof what, "row %llu", (unsigned long long)seq);
  return decoded(t, rc, DB_WORK, what);
}

static int row_write(tx_t *t, const work_row_t *r) {
  dkey_t k;
  wr_t w;
  wr_begin(&w, WR__END - 1);
  wr_int(&w, r->visible_at);
  wr_int(&w, r->locked_until);
  wr_uint(&w, r->token);
  wr_uint(&w, r->attempt);
  wr_str(&w, r->session_id);
  wr_str(&w, r->instance);
  wr_uint(&w, r->exec);
  wr_uint(&w, r->act_id);
  wr_bin(&w, r->item, r->item_len);
  key_seq(&k, r->seq);
  return wr_put(t, &w, DB_WORK, &k);
}

/* Add (put=1) or remove the row's queue index entry (ready or lock for plain rows, the
** session's sess_items for session rows) and, when locked, its token entry. */
static int row_index(tx_t *t, const work_row_t *r, int put) {
  int64_t due = r->token ? r->locked_until : r->visible_at;
  unsigned char seq[8];
  dkey_t k;
  int rc;
  if (r->session_id) {
    key_sess_item(&k, r->session_id, due, r->seq);
    rc = idx_op(t, DB_SESS_ITEMS, &k, "", 0, put);
  } else {
    key_work_idx(&k, 0, due, r->seq);
    rc = idx_op(t, r->token ? DB_WORK_LOCK : DB_WORK_READY, &k, "", 0, put);
  }
  if (rc || !r->token) return rc;
  key_seq(&k, r->token);
  put_u64(seq, r->seq);
  return idx_op(t, DB_WORK_TOKEN, &k, seq, 8, put);
}

static int row_ident(tx_t *t, const work_row_t *r, int put) {
  dkey_t k;
  key_ident(&k, r->instance, r->exec, r->act_id);
  k_u64(&k, r->seq);
  return idx_op(t, DB_WORK_IDENT, &k, "", 0, put);
}

/* Replace row `old` (NULL: insert) by `nw` (NULL: delete), keeping every index in step. */
static int row_set(tx_t *t, const work_row_t *old, const work_row_t *nw) {
  const char *sid = old ? old->session_id : nw->session_id;
  dkey_t k;
  int rc = 0;
  if (old && (rc = row_index(t, old, 0))) return rc;
  if (nw) {
    if ((rc = row_write(t, nw)) || (rc = row_index(t, nw, 1))) return rc;
    if (!old && (rc = row_ident(t, nw, 1))) return rc;
  } else {
    key_seq(&k, old->seq);
    if ((rc = db_del(t, DB_WORK, &k)) || (rc = row_ident(t, old, 0))) return rc;
  }
  return sid ? squeue_refresh(t, sid, (nw != NULL) - (old != NULL)) : 0;
}

static int work_insert(tx_t *t, const dx_work_item_t *w, int64_t visible_at) {
  work_row_t r;
  int rc;
  memset(&r, 0, sizeof r);
  r.visible_at = visible_at;
  r.exec = w->execution_id;
  r.act_id = w->id;
  if (dx__work_item_encode(w, &r.item, &r.item_len) || !(r.instance = dx__strdup(w->instance)) ||
      (w->session_id && !(r.session_id = dx__strdup(w->session_id)))) {
    row_clear(&r);
    return nomem(t->err);
  }
  rc = next_seq(t, &r.seq);
  if (!rc) rc = row_set(t, NULL, &r);
  row_clear(&r);
  return rc;
}

/* The row locked with `token`. DX_ELOCK when none is: acked, cancelled (lock stolen), or
** re-locked by another worker after the lock expired. */
static int row_by_token(tx_t *t, uint64_t token, work_row_t *r) {
  dkey_t k;
  MDB_val v;
  int rc;
  memset(r, 0, sizeof *r);
  if (token == 0) return dx_error_set(t->err, DX_ETOKEN, "lock token 0 is never valid");
  key_seq(&k, token);
  rc = db_get(t, DB_WORK_TOKEN, &k, &v);
  if (rc == DX_ENOTFOUND)
    return dx_error_set(t->err, DX_ELOCK,
                        "no worker item is locked with token %llx (acked, cancelled, or "
                        "re-delivered after its lock expired)",
                        (unsigned long long)token);
  if (rc) return rc;
  if (v.mv_size != 8)
    return corrupt(t, DB_WORK_TOKEN, "not 8 bytes", "token %llx", (unsigned long long)token);
  return row_get(t, get_u64(v.mv_data), r);
}

static int row_check_live(tx_t *t, const work_row_t *r, int64_t now) {
  if (r->locked_until > now) return 0;
  return dx_error_set(t->err, DX_ELOCK, "the lock on worker item %llu expired at %lld (now %lld)",
                      (unsigned long long)r->seq, (long long)r->locked_until, (long long)now);
}

/* A fetch candidate: a plain row (head of work_ready or work_lock) or the earliest row of a
** session, either one this worker owns or one it may claim. */
enum { WC_PLAIN, WC_OWNED, WC_CLAIM };

typedef struct {
  int found, db, kind;
  int64_t at;            /* visible_at, or locked_until of an expired lock */
  uint64_t seq;
  dkey_t key;            /* the index entry it came from */
  char sid[LM_SESSION_MAX + 1];
} work_cand_t;

/* FIFO: earlier due time first, then older row. */
static int cand_better(const work_cand_t *c, int64_t at, uint64_t seq) {
  return !c->found || at < c->at || (at == c->at && seq < c->seq);
}

static int work_head(tx_t *t, int db, int64_t now, work_cand_t *c) {
  dkey_t pre;
  MDB_val k;
  int64_t at;
  uint64_t seq;
  int rc;
  k_init(&pre);
  k_u8(&pre, 0);
  rc = head_key(t, db, &pre, &k);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  if (k.mv_size != 17) return corrupt(t, db, "bad key", "%zu-byte key", k.mv_size);
  at = (int64_t)get_u64((const char *)k.mv_data + 1);
  seq = get_u64((const char *)k.mv_data + 9);
  if (at > now || !cand_better(c, at, seq)) return 0;
  c->found = 1;
  c->db = db;
  c->kind = WC_PLAIN;
  c->at = at;
  c->seq = seq;
  k_init(&c->key);
  k_bytes(&c->key, k.mv_data, k.mv_size);
  return 0;
}

/* Consider the earliest row of session `sid` (due at `due`). */
static void sess_cand(const char *sid, uint64_t due, uint64_t seq, int kind, int64_t now,
                      work_cand_t *c) {
  size_t n = strlen(sid);
  if ((int64_t)due > now || !cand_better(c, (int64_t)due, seq) || n > LM_SESSION_MAX) return;
  c->found = 1;
  c->db = DB_SESS_ITEMS;
  c->kind = kind;
  c->at = (int64_t)due;
  c->seq = seq;
  memcpy(c->sid, sid, n + 1);
  key_sess_item(&c->key, sid, (int64_t)due, seq);
}

typedef struct {
  const char *worker;
  size_t prefix_n;
  int64_t now;
  uint32_t live;   /* owned sessions with a live lease */
  work_cand_t *c;
} owned_scan_t;

/* sess_owner entry of this worker: count it, consider its session's earliest row. A session
** whose lease lapsed is still ours until someone else claims it (same-id restart). */
static int owned_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  owned_scan_t *o = ud;
  const char *sid = (const char *)k->mv_data + o->prefix_n;
  sess_queue_t q;
  int rc;
  if (k->mv_size <= o->prefix_n || ((const char *)k->mv_data)[k->mv_size - 1] != 0 ||
      v->mv_size != 8)
    return corrupt(t, DB_SESS_OWNER, "bad entry", "worker '%s'", o->worker);
  if ((int64_t)get_u64(v->mv_data) > o->now) o->live++;
  if ((rc = squeue_get(t, sid, &q))) return rc;
  if (q.found) sess_cand(sid, q.due, q.seq, WC_OWNED, o->now, o->c);
  return 0;
}

typedef struct {
  const char *worker;
  int64_t now;
  work_cand_t *c;
} claim_scan_t;

/* sess_heads in time order: the first due session nobody holds (no row, released, or lease
** lapsed) is the claim candidate. Sessions held by other workers are skipped; the walk ends
** at the first head that is not due or not older than the best candidate so far. */
static int claim_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  claim_scan_t *s = ud;
  const char *kb = k->mv_data;
  uint64_t due, seq;
  sess_rec_t r;
  int rc, held;
  if (k->mv_size < 18 || kb[k->mv_size - 1] != 0)
    return corrupt(t, DB_SESS_HEADS, "bad key", "%zu-byte key", k->mv_size);
  due = get_u64(kb);
  seq = get_u64(kb + 8);
  if ((int64_t)due > s->now || !cand_better(s->c, (int64_t)due, seq)) return 1;
  rc = sess_get(t, kb + 16, &r);
  if (rc && rc != DX_ENOTFOUND) return rc;
  /* our own sessions were considered by owned_cb */
  held = rc == 0 && sess_owned(&r) &&
         (strcmp(r.owner, s->worker) == 0 || r.locked_until > s->now);
  sess_clear(&r);
  if (held) return 0;
  sess_cand(kb + 16, due, seq, WC_CLAIM, s->now, s->c);
  return 1;
}

/* Oldest due row this worker may take: plain rows (ready, or lock expired), rows of sessions
** it owns, and, while it owns fewer than max_sessions live sessions, rows of sessions it may
** claim. cfg NULL: plain rows only. */
static int work_pick(tx_t *t, int64_t now, const dx_session_cfg_t *cfg, work_cand_t *c) {
  owned_scan_t o;
  claim_scan_t cs;
  dkey_t pre;
  int rc;
  memset(c, 0, sizeof *c);
  if ((rc = work_head(t, DB_WORK_READY, now, c)) || (rc = work_head(t, DB_WORK_LOCK, now, c)))
    return rc;
  if (!cfg) return 0;
  memset(&o, 0, sizeof o);
  o.worker = cfg->worker_id;
  o.now = now;
  o.c = c;
  key_inst(&pre, cfg->worker_id);
  o.prefix_n = pre.n;
  if ((rc = scan_prefix(t, DB_SESS_OWNER, &pre, owned_cb, &o))) return rc;
  if (o.live >= cfg->max_sessions) return 0; /* at capacity: no new claims */
  cs.worker = cfg->worker_id;
  cs.now = now;
  cs.c = c;
  k_init(&pre);
  return scan_prefix(t, DB_SESS_HEADS, &pre, claim_cb, &cs);
}

/* A token no live worker lock uses: tokens key the work_token index, so a repeat (say, a
** process forked after drawing tokens) must not overwrite another row's entry. */
static int fresh_work_token(tx_t *t, uint64_t *token) {
  for (;;) {
    dkey_t k;
    MDB_val v;
    int rc;
    *token = dx__new_token();
    key_seq(&k, *token);
    rc = db_get(t, DB_WORK_TOKEN, &k, &v);
    if (rc == DX_ENOTFOUND) return 0;
    if (rc) return rc;
  }
}

/* A close-session item at the head of a session nobody holds has nothing to close: delete
** it, and the session row once the session has no rows left. */
static int close_unheld(tx_t *t, const work_row_t *r) {
  sess_queue_t q;
  sess_rec_t s;
  int rc;
  if ((rc = row_set(t, r, NULL)) || (rc = squeue_get(t, r->session_id, &q)) || q.found)
    return rc;
  rc = sess_get(t, r->session_id, &s);
  if (rc == DX_ENOTFOUND) return 0;
  if (!rc) rc = sess_put(t, r->session_id, &s, NULL);
  sess_clear(&s);
  return rc;
}

/* The session side of fetching a row of c->sid: claim it (owner = us, fresh lease) or, when
** we own it, record the activity (and renew a lease that lapsed while we still owned it). */
static int sess_take(tx_t *t, const work_cand_t *c, int64_t now, const dx_session_cfg_t *cfg,
                     dx_work_fetch_t *out) {
  sess_rec_t old, nw;
  int rc = sess_get(t, c->sid, &old), found = rc == 0;
  if (rc && rc != DX_ENOTFOUND) return rc;
  rc = 0;
  nw = old; /* shares old's strings */
  nw.owner = (char *)cfg->worker_id;
  nw.last_activity = now;
  if (c->kind == WC_CLAIM || !sess_owner_is(&old, cfg->worker_id)) {
    const char *prev = sess_owned(&old) ? old.owner : old.prev;
    nw.prev = (char *)prev;
    nw.locked_until = sat_add(now, cfg->session_lock_ms);
    out->session_claimed = 1;
    if (prev && *prev && !(out->previous_owner = dx__strdup(prev))) rc = nomem(t->err);
  } else if (old.locked_until <= now) {
    nw.locked_until = sat_add(now, cfg->session_lock_ms);
  }
  if (!rc) rc = sess_put(t, c->sid, found ? &old : NULL, &nw);
  sess_clear(&old);
  return rc;
}

static void fetch_reset(dx_work_fetch_t *out) {
  dx_work_item_clear(&out->item);
  free(out->previous_owner);
  memset(out, 0, sizeof *out);
}

/* Lock candidate `c`. out->item.kind stays 0 when the candidate was cleaned up instead (a
** stray index entry, a close item of a session nobody holds); the caller picks again. */
static int work_lock(tx_t *t, const work_cand_t *c, int64_t now, int64_t lock_ms,
                     const dx_session_cfg_t *cfg, dx_work_fetch_t *out) {
  work_row_t old, nw;
  dx_error_t derr = {0};
  int rc = row_get(t, c->seq, &old);
  if (rc == DX_ENOTFOUND) { /* stray index entry */
    if ((rc = db_del(t, c->db, &c->key))) return rc;
    return c->kind == WC_PLAIN ? 0 : squeue_refresh(t, c->sid, -1);
  }
  if (rc) return rc;
  rc = dx__work_item_decode(old.item, old.item_len, &out->item, &derr);
  if (rc == DX_ENOMEM) rc = nomem(t->err);
  else if (rc) rc = corrupt(t, DB_WORK, derr.msg, "row %llu", (unsigned long long)c->seq);
  if (!rc && c->kind == WC_CLAIM && out->item.kind == DX_WI_SESSION_CLOSE) {
    rc = close_unheld(t, &old);
    fetch_reset(out);
    row_clear(&old);
    return rc;
  }
  nw = old;
  if (!rc) rc = fresh_work_token(t, &nw.token);
  if (!rc) {
    nw.locked_until = sat_add(now, lock_ms);
    nw.attempt++;
    rc = row_set(t, &old, &nw);
  }
  if (!rc && c->kind != WC_PLAIN) rc = sess_take(t, c, now, cfg, out);
  if (rc) {
    fetch_reset(out);
  } else {
    out->lock_token = nw.token;
    out->attempt_count = (uint32_t)nw.attempt;
  }
  row_clear(&old); /* nw shares old's strings */
  return rc;
}

static int work_fetch(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                      dx_work_fetch_t *out) {
  work_cand_t c;
  int rc;
  for (;;) { /* a round only repeats after removing a stray index entry or a close item */
    if ((rc = work_pick(t, now, cfg, &c)) || !c.found) return rc;
    if ((rc = work_lock(t, &c, now, lock_ms, cfg, out)) || out->item.kind) return rc;
  }
}

typedef struct {
  uint64_t *v;
  size_t n, cap;
} seq_list_t;

static int ident_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  seq_list_t *l = ud;
  uint64_t *nv;
  if (!(nv = grow(l->v, &l->cap, l->n, sizeof *l->v))) return nomem(t->err);
  l->v = nv;
  l->v[l->n++] = get_u64((const char *)k->mv_data + k->mv_size - 8);
  return 0;
}

/* Lock stealing: delete every row with this identity; none is fine. */
static int work_cancel(tx_t *t, const dx_activity_ref_t *ref) {
  seq_list_t l = {NULL, 0, 0};
  dkey_t k;
  size_t i;
  int rc;
  key_ident(&k, ref->instance, ref->execution_id, ref->activity_id);
  rc = scan_prefix(t, DB_WORK_IDENT, &k, ident_cb, &l);
  for (i = 0; i < l.n && !rc; i++) {
    work_row_t r;
    rc = row_get(t, l.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc) rc = row_set(t, &r, NULL);
    row_clear(&r);
  }
  free(l.v);
  return rc;
}

/* {===== due times =====} */

/* Earliest due time over the orchestrator indexes (orch), the plain worker indexes (work)
** and the session heads (sess). A due session head may belong to a session another worker
** holds: the fetch then finds nothing and the runtime waits a poll interval. */
static int due_time(tx_t *t, int orch, int work, int sess, int64_t *out) {
  static const int orch_dbs[] = {DB_ORCH_READY, DB_ORCH_LOCK};
  static const int work_dbs[] = {DB_WORK_READY, DB_WORK_LOCK};
  size_t i;
  int rc;
  *out = LM_NEVER;
  for (i = 0; orch && i < 2; i++) {
    orch_cand_t c;
    memset(&c, 0, sizeof c);
    if ((rc = orch_head(t, orch_dbs[i], LM_NEVER, &c))) return rc;
    if (c.inst && c.at < *out) *out = c.at;
    free(c.inst);
  }
  for (i = 0; work && i < 2; i++) {
    work_cand_t c;
    memset(&c, 0, sizeof c);
    if ((rc = work_head(t, work_dbs[i], LM_NEVER, &c))) return rc;
    if (c.found && c.at < *out) *out = c.at;
  }
  if (sess) {
    dkey_t none;
    MDB_val k;
    k_init(&none);
    rc = head_key(t, DB_SESS_HEADS, &none, &k);
    if (rc && rc != DX_ENOTFOUND) return rc;
    if (rc == 0 && k.mv_size >= 8 && (int64_t)get_u64(k.mv_data) < *out)
      *out = (int64_t)get_u64(k.mv_data);
  }
  return 0;
}

/* Read-only look before a fetch takes the writer lock: idle polling from several processes
** then never contends with writers. Inside a batch the write txn is already held. */
static int nothing_due(lm_t *p, int64_t now, int orch, int work, int sess, dx_error_t *err) {
  tx_t t;
  int64_t due;
  int rc;
  if (thread_batch(p->se)) return 0;
  if ((rc = lm_begin_tx(p, 0, &t, err))) return rc;
  rc = tx_end(&t, due_time(&t, orch, work, sess, &due));
  if (rc) return rc;
  return due > now;
}

/* {===== argument checks =====} */

static int check_instance(const char *inst, dx_error_t *err) {
  size_t n;
  if (!inst || !*inst) return dx_error_set(err, DX_EINVAL, "instance id is missing or empty");
  n = strlen(inst);
  if (n > LM_INSTANCE_MAX)
    return dx_error_set(err, DX_EINVAL, "instance id is %zu bytes; the limit is %d bytes", n,
                        LM_INSTANCE_MAX);
  return 0;
}

static int check_item(const dx_work_item_t *w, dx_error_t *err) {
  size_t n;
  if (!w) return dx_error_set(err, DX_EINVAL, "work item is NULL");
  if (w->kind <= 0 || w->kind >= DX_WI__COUNT)
    return dx_error_set(err, DX_EINVAL, "unknown work item kind %d", w->kind);
  if (w->session_id && (n = strlen(w->session_id)) > LM_SESSION_MAX)
    return dx_error_set(err, DX_EINVAL, "session id is %zu bytes; the limit is %d bytes", n,
                        LM_SESSION_MAX);
  return check_instance(w->instance, err);
}

static int check_worker_id(const char *id, dx_error_t *err) {
  size_t n;
  if (!id || !*id) return dx_error_set(err, DX_EINVAL, "session worker id is missing or empty");
  if ((n = strlen(id)) > LM_SESSION_MAX)
    return dx_error_set(err, DX_EINVAL, "worker id is %zu bytes; the limit is %d bytes", n,
                        LM_SESSION_MAX);
  return 0;
}

static int check_items(const dx_work_item_t *w, size_t n, dx_error_t *err) {
  size_t i;
  int rc;
  for (i = 0; i < n; i++)
    if ((rc = check_item(&w[i], err))) return rc;
  return 0;
}

static int check_payload(const dx_work_item_t *w, dx_error_t *err) {
  size_t n = w->data ? strlen(w->data) : 0;
  if (n > DX_MAX_PAYLOAD_BYTES)
    return dx_error_set(err, DX_ETOOBIG, "work item data is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_PAYLOAD_BYTES);
  return 0;
}

static int check_events(const dx_event_t *ev, size_t n, dx_error_t *err) {
  size_t i;
  if (n && !ev) return dx_error_set(err, DX_EINVAL, "events are NULL");
  for (i = 0; i < n; i++)
    if (ev[i].event_id == 0)
      return dx_error_set(err, DX_EINVAL, "event %zu has event_id 0 (ids start at 1)", i);
  return 0;
}

static int check_ack(const dx_orch_ack_t *a, dx_error_t *err) {
  size_t i;
  int rc;
  if (!a) return dx_error_set(err, DX_EINVAL, "ack is NULL");
  if ((rc = check_instance(a->instance, err))) return rc;
  if (a->execution_id == 0) return dx_error_set(err, DX_EINVAL, "execution_id 0 (ids start at 1)");
  if ((rc = check_events(a->delta, a->delta_len, err)) ||
      (rc = check_items(a->worker_items, a->worker_items_len, err)) ||
      (rc = check_items(a->orch_items, a->orch_items_len, err)))
    return rc;
  for (i = 0; i < a->cancelled_len; i++)
    if ((rc = check_instance(a->cancelled[i].instance, err))) return rc;
  return 0;
}

/* {===== orchestrator ack =====} */

static int set_str(char **dst, const char *src) {
  char *s = dx__strdup(src);
  if (src && !s) return DX_ENOMEM;
  free(*dst);
  *dst = s;
  return 0;
}

/* A new instance record: parent is immutable, the creation index orders list_instances. */
static int inst_create(tx_t *t, int64_t now, const dx_orch_ack_t *a, inst_rec_t *r) {
  dkey_t k;
  int rc;
  r->created_at = now;
  if (set_str(&r->parent, a->parent_instance)) return nomem(t->err);
  if ((rc = next_seq(t, &r->created_seq))) return rc;
  k_init(&k);
  k_time(&k, r->created_at);
  k_u64(&k, r->created_seq);
  return db_put(t, DB_INST_CREATED, &k, a->instance, strlen(a->instance) + 1, 0);
}

/* Steps 3 and 7: create or update the instance record. */
static int ack_instance(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  inst_rec_t r;
  int rc = inst_get(t, a->instance, &r);
  if (rc == DX_ENOTFOUND) rc = inst_create(t, now, a, &r);
  if (!rc && ((a->orchestration_name && (set_str(&r.name, a->orchestration_name) ||
                                         set_str(&r.version, a->orchestration_version))) ||
              (a->custom_status_set && set_str(&r.custom_status, a->custom_status))))
    rc = nomem(t->err);
  if (!rc) {
    if (a->custom_status_set) r.cs_version++;
    if (a->execution_id > r.current_exec) r.current_exec = a->execution_id;
    r.updated_at = now;
    rc = inst_put(t, a->instance, &r);
  }
  inst_clear(&r);
  return rc;
}

/* Steps 4 and 6: create the execution record if missing; apply the status. */
static int ack_execution(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  exec_rec_t r;
  int rc = exec_get(t, a->instance, a->execution_id, &r);
  if (rc && rc != DX_ENOTFOUND) return rc;
  if (rc == DX_ENOTFOUND) {
    r.status = DX_STATUS_RUNNING;
    r.started_at = now;
  }
  rc = 0;
  if (a->status != DX_STATUS_NONE) {
    r.status = a->status;
    r.completed_at = now;
    dx_failure_clear(&r.fail);
    if (set_str(&r.output, a->output) || (a->failure && dx_failure_copy(&r.fail, a->failure)))
      rc = nomem(t->err);
  }
  if (!rc) rc = exec_put(t, a->instance, a->execution_id, &r);
  exec_clear(&r);
  return rc;
}

static int orch_ack(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  orch_state_t st;
  msg_list_t l;
  size_t i;
  int rc;
  if ((rc = orch_check_lock(t, a->instance, a->lock_token, now, 1, &st))) return rc;
  if ((rc = msgs_load(t, a->instance, &l))) return rc;
  rc = msgs_delete(t, &l, a->lock_token, now);
  msgs_free(&l);
  if (rc || (rc = ack_instance(t, now, a)) || (rc = ack_execution(t, now, a)) ||
      (rc = history_append(t, a->instance, a->execution_id, a->delta, a->delta_len)))
    return rc;
  for (i = 0; i < a->worker_items_len && !rc; i++) rc = work_insert(t, &a->worker_items[i], now);
  for (i = 0; i < a->cancelled_len && !rc; i++) rc = work_cancel(t, &a->cancelled[i]);
  for (i = 0; i < a->orch_items_len && !rc; i++)
    rc = orch_enqueue(t, &a->orch_items[i], orch_visible_at(&a->orch_items[i], now, 0));
  return rc ? rc : orch_release(t, a->instance, &st);
}

/* {===== methods: group commit =====} */

static int lm_begin(dx_provider_t *pp, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (thread_batch(p->se))
    return dx_error_set(err, DX_ESTATE, "a batch is already open on this thread");
  if ((rc = lm_begin_tx(p, 1, &t, err))) return rc;
  pthread_mutex_lock(&p->se->batch_mu);
  p->se->batch = t.txn;
  p->se->batch_thread = pthread_self();
  pthread_mutex_unlock(&p->se->batch_mu);
  p->in_batch = 1;
  return 0;
}

static MDB_txn *take_batch(lm_t *p) {
  MDB_txn *txn;
  pthread_mutex_lock(&p->se->batch_mu);
  txn = p->se->batch;
  p->se->batch = NULL;
  pthread_mutex_unlock(&p->se->batch_mu);
  p->in_batch = 0;
  return txn;
}

static int lm_commit(dx_provider_t *pp, int sync, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  int rc;
  if (!p->in_batch) return dx_error_set(err, DX_ESTATE, "commit without begin");
  /* sync=0 marks a lock-only batch: nothing for other workers to pick up. */
  rc = commit_top(p->se, take_batch(p), sync && !p->no_sync, sync);
  return rc ? mdb_error(p->se, rc, "commit", err) : 0;
}

static void lm_rollback(dx_provider_t *pp) {
  lm_t *p = (lm_t *)pp;
  if (p->in_batch) mdb_txn_abort(take_batch(p));
}

/* {===== methods: orchestrator queue =====} */

static int lm_fetch_orch(dx_provider_t *pp, int64_t now, int64_t lock_ms, dx_orch_item_t **out,
                         dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = NULL;
  if ((rc = nothing_due(p, now, 1, 0, 0, err))) return rc < 0 ? rc : 0;
  if ((rc = lm_begin_tx(p, 1, &t, err))) return rc;
  rc = tx_end(&t, orch_fetch(&t, now, lock_ms, out));
  if (rc && *out) {
    dx_orch_item_free(*out);
    *out = NULL;
  }
  return rc;
}

static int lm_ack_orch(dx_provider_t *pp, int64_t now, const dx_orch_ack_t *ack, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = check_ack(ack, err)) || (rc = lm_begin_tx(p, 1, &t, err))) return rc;
  return tx_end(&t, orch_ack(&t, now, ack));
}

static int orch_abandon(tx_t *t, int64_t now, const char *inst, uint64_t token, int64_t delay_ms,
                        int ignore_attempt) {
  orch_state_t st;
  msg_list_t l;
  size_t i;
  int rc;
  if ((rc = orch_check_lock(t, inst, token, now, 0, &st))) return rc;
  if ((rc = msgs_load(t, inst, &l))) return rc;
  for (i = 0; i < l.n && !rc; i++) {
    orch_msg_t *m = &l.v[i];
    if (m->token != token) continue;
    m->token = 0;
    if (delay_ms > 0) m->visible_at = sat_add(now, delay_ms);
    if (ignore_attempt && m->attempt > 0) m->attempt--;
    rc = msg_put(t, inst, m);
  }
  msgs_free(&l);
  return rc ? rc : orch_release(t, inst, &st);
}

static int lm_abandon_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                           int64_t delay_ms, int ignore_attempt, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = check_instance(instance, err)) || (rc = lm_begin_tx(p, 1, &t, err))) return rc;
  return tx_end(&t, orch_abandon(&t, now, instance, token, delay_ms, ignore_attempt));
}

static int orch_renew(tx_t *t, int64_t now, const char *inst, uint64_t token, int64_t extend_ms) {
  orch_state_t st, nw;
  int rc = orch_check_lock(t, inst, token, now, 1, &st);
  if (rc) return rc;
  nw = st;
  nw.locked_until = sat_add(now, extend_ms);
  return state_set(t, inst, &st, &nw);
}

static int lm_renew_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                         int64_t extend_ms, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = check_instance(instance, err)) || (rc = lm_begin_tx(p, 1, &t, err))) return rc;
  return tx_end(&t, orch_renew(&t, now, instance, token, extend_ms));
}

/* The contract's uniqueness rule: a START for an id that exists or whose start is queued
** fails with DX_EEXIST (checked in the writing transaction; LMDB has one writer). */
static int instance_info(tx_t *t, const char *inst, dx_instance_info_t *out);

static int start_unique(tx_t *t, const dx_work_item_t *w) {
  dx_instance_info_t info;
  dx_error_t *saved = t->err, probe = {0};
  int rc;
  if (w->kind != DX_WI_START) return 0;
  memset(&info, 0, sizeof info);
  t->err = &probe;
  rc = instance_info(t, w->instance, &info);
  t->err = saved;
  dx_instance_info_clear(&info);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return dx_error_set(t->err, rc, "%s", probe.msg);
  return dx_error_set(t->err, DX_EEXIST, "instance '%s' already exists", w->instance);
}

static int lm_enqueue_orch(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                           int64_t delay_ms, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = check_item(item, err)) || (rc = check_payload(item, err)) ||
      (rc = lm_begin_tx(p, 1, &t, err)))
    return rc;
  rc = start_unique(&t, item);
  return tx_end(&t, rc ? rc : orch_enqueue(&t, item, orch_visible_at(item, now, delay_ms)));
}

/* {===== methods: worker queue =====} */

static int lm_fetch_work(dx_provider_t *pp, int64_t now, int64_t lock_ms,
                         const dx_session_cfg_t *sessions, dx_work_fetch_t *out,
                         dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if (sessions && sessions->max_sessions == 0) sessions = NULL; /* takes no session work */
  if (sessions && (rc = check_worker_id(sessions->worker_id, err))) return rc;
  if ((rc = nothing_due(p, now, 0, 1, sessions != NULL, err))) return rc < 0 ? rc : 0;
  if ((rc = lm_begin_tx(p, 1, &t, err))) return rc;
  rc = tx_end(&t, work_fetch(&t, now, lock_ms, sessions, out));
  if (rc) fetch_reset(out);
  return rc;
}

static int work_ack(tx_t *t, int64_t now, uint64_t token, const dx_work_item_t *completion) {
  work_row_t r;
  int rc = row_by_token(t, token, &r);
  if (!rc) rc = row_check_live(t, &r, now);
  if (!rc) rc = row_set(t, &r, NULL);
  if (!rc) rc = sess_touch(t, r.session_id, now);
  row_clear(&r);
  if (!rc && completion) rc = orch_enqueue(t, completion, now);
  return rc;
}

static int lm_ack_work(dx_provider_t *pp, int64_t now, uint64_t token,
                       const dx_work_item_t *completion, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((completion && (rc = check_item(completion, err))) || (rc = lm_begin_tx(p, 1, &t, err)))
    return rc;
  return tx_end(&t, work_ack(&t, now, token, completion));
}

/* Abandon (release, visible after `ms`) or renew (extend by `ms`) a worker lock. */
static int work_relock(tx_t *t, int64_t now, uint64_t token, int abandon, int64_t ms,
                       int ignore_attempt) {
  work_row_t r, nw;
  int rc = row_by_token(t, token, &r);
  if (!rc && !abandon) rc = row_check_live(t, &r, now);
  if (rc) { row_clear(&r); return rc; }
  nw = r;
  if (abandon) {
    nw.token = 0;
    nw.locked_until = 0;
    nw.visible_at = sat_add(now, ms > 0 ? ms : 0);
    if (ignore_attempt && nw.attempt > 0) nw.attempt--;
  } else {
    nw.locked_until = sat_add(now, ms);
  }
  rc = row_set(t, &r, &nw);
  if (!rc && !abandon) rc = sess_touch(t, r.session_id, now);
  row_clear(&r); /* nw shares r's strings */
  return rc;
}

static int lm_abandon_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t delay_ms,
                           int ignore_attempt, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc = lm_begin_tx(p, 1, &t, err);
  if (rc) return rc;
  return tx_end(&t, work_relock(&t, now, token, 1, delay_ms, ignore_attempt));
}

static int lm_renew_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t extend_ms,
                         dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc = lm_begin_tx(p, 1, &t, err);
  if (rc) return rc;
  return tx_end(&t, work_relock(&t, now, token, 0, extend_ms, 0));
}

static int lm_enqueue_work(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                           dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = check_item(item, err)) || (rc = check_payload(item, err)) ||
      (rc = lm_begin_tx(p, 1, &t, err)))
    return rc;
  return tx_end(&t, work_insert(&t, item, now));
}

/* {===== methods: history and management =====} */

static int lm_read_history(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                           dx_event_t **events, size_t *n, uint64_t *exec_out, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t exec = 0;
  tx_t t;
  int rc;
  if (!events || !n) return dx_error_set(err, DX_EINVAL, "events/n is NULL");
  *events = NULL;
  *n = 0;
  if ((rc = check_instance(instance, err)) || (rc = lm_begin_tx(p, 0, &t, err))) return rc;
  rc = resolve_exec(&t, instance, execution_id, &exec);
  if (!rc) rc = history_load(&t, instance, exec, events, n);
  rc = tx_end(&t, rc);
  if (!rc && exec_out) *exec_out = exec;
  return rc;
}

static int lm_append(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                     const dx_event_t *events, size_t n, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = check_instance(instance, err)) || (rc = check_events(events, n, err))) return rc;
  if (execution_id == 0) return dx_error_set(err, DX_EINVAL, "execution_id 0 (ids start at 1)");
  if ((rc = lm_begin_tx(p, 1, &t, err))) return rc;
  return tx_end(&t, history_append(&t, instance, execution_id, events, n));
}

static int instance_info(tx_t *t, const char *inst, dx_instance_info_t *out) {
  inst_rec_t ir;
  exec_rec_t er;
  orch_state_t st;
  int rc = inst_get(t, inst, &ir);
  if (rc == DX_ENOTFOUND && state_get(t, inst, &st) == 0 &&
      (st.token || st.ready_at != LM_NEVER)) {
    /* Started but not yet run: messages are queued, no record yet. Status NONE, found. */
    out->instance_id = dx__strdup(inst);
    return out->instance_id ? 0 : nomem(t->err);
  }
  if (rc == DX_ENOTFOUND)
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  if (rc) return rc;
  rc = exec_get(t, inst, ir.current_exec, &er);
  if (rc == DX_ENOTFOUND) rc = 0; /* status stays NONE */
  if (!rc) {
    /* hand the decoded strings over instead of copying them */
    out->orchestration_name = ir.name;
    out->orchestration_version = ir.version;
    out->custom_status = ir.custom_status;
    out->parent_instance = ir.parent;
    out->output = er.output;
    out->failure = er.fail;
    out->current_execution_id = ir.current_exec;
    out->status = er.status;
    out->custom_status_version = ir.cs_version;
    out->created_at_ms = ir.created_at;
    out->updated_at_ms = ir.updated_at;
    memset(&ir, 0, sizeof ir);
    memset(&er, 0, sizeof er);
    if (!(out->instance_id = dx__strdup(inst))) rc = nomem(t->err);
  }
  inst_clear(&ir);
  exec_clear(&er);
  return rc;
}

static int lm_get_info(dx_provider_t *pp, const char *instance, dx_instance_info_t *out,
                       dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if ((rc = check_instance(instance, err)) || (rc = lm_begin_tx(p, 0, &t, err))) return rc;
  rc = tx_end(&t, instance_info(&t, instance, out));
  if (rc) dx_instance_info_clear(out);
  return rc;
}

typedef struct {
  char **v;
  size_t n, cap;
} str_list_t;

static void strs_free(str_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

static int strs_push(str_list_t *l, const char *s) {
  char **nv;
  if (!(nv = grow(l->v, &l->cap, l->n, sizeof *l->v))) return DX_ENOMEM;
  l->v = nv;
  if (!(l->v[l->n] = dx__strdup(s))) return DX_ENOMEM;
  l->n++;
  return 0;
}

/* Instance ids newest first, walking the creation index backwards. */
static int collect_instances(tx_t *t, str_list_t *l) {
  MDB_cursor *c;
  MDB_val k, v;
  int rc = 0, mrc = mdb_cursor_open(t->txn, t->se->dbi[DB_INST_CREATED], &c);
  if (mrc) return tx_err(t, mrc, db_names[DB_INST_CREATED]);
  for (mrc = mdb_cursor_get(c, &k, &v, MDB_LAST); mrc == 0 && !rc;
       mrc = mdb_cursor_get(c, &k, &v, MDB_PREV)) {
    if (v.mv_size == 0 || ((const char *)v.mv_data)[v.mv_size - 1] != 0)
      rc = corrupt(t, DB_INST_CREATED, "value is not a string", "%zu-byte key", k.mv_size);
    else if (strs_push(l, v.mv_data))
      rc = nomem(t->err);
  }
  mdb_cursor_close(c);
  if (!rc && mrc != MDB_NOTFOUND) rc = tx_err(t, mrc, db_names[DB_INST_CREATED]);
  return rc;
}

static int lm_list(dx_provider_t *pp, dx_instance_cb cb, void *ud, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  str_list_t l = {NULL, 0, 0};
  size_t i;
  tx_t t;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = lm_begin_tx(p, 0, &t, err))) return rc;
  /* the callbacks run after the read txn ends: they may take their time or call us */
  rc = tx_end(&t, collect_instances(&t, &l));
  for (i = 0; i < l.n && !rc; i++)
    if (cb(ud, l.v[i])) break;
  strs_free(&l);
  return rc;
}

static int lm_depths(dx_provider_t *pp, dx_queue_depths_t *out, dx_error_t *err) {
  static const int dbs[3] = {DB_ORCH_MSGS, DB_WORK, DB_INSTANCES};
  lm_t *p = (lm_t *)pp;
  uint64_t *dst[3];
  MDB_stat st;
  tx_t t;
  int i, rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  dst[0] = &out->orchestrator;
  dst[1] = &out->worker;
  dst[2] = &out->instances;
  if ((rc = lm_begin_tx(p, 0, &t, err))) return rc;
  for (i = 0; i < 3 && !rc; i++) {
    int mrc = mdb_stat(t.txn, p->se->dbi[dbs[i]], &st);
    if (mrc) rc = tx_err(&t, mrc, db_names[dbs[i]]);
    else *dst[i] = st.ms_entries;
  }
  return tx_end(&t, rc);
}

static int lm_next_due(dx_provider_t *pp, int64_t now, int64_t *out, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = LM_NEVER;
  if ((rc = lm_begin_tx(p, 0, &t, err))) return rc;
  return tx_end(&t, due_time(&t, 1, 1, 1, out));
}

/* {===== methods: sessions =====} */

/* Session rows handed to callbacks after the read or write txn ended. */
typedef struct {
  char *sid, *owner;
  int64_t locked_until, last_activity;
  uint64_t queued;
} sess_out_t;

typedef struct {
  sess_out_t *v;
  size_t n, cap;
} sess_list_t;

static void slist_free(sess_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) {
    free(l->v[i].sid);
    free(l->v[i].owner);
  }
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int slist_push(tx_t *t, sess_list_t *l, const char *sid, const sess_rec_t *r) {
  sess_queue_t q;
  sess_out_t *o, *nv;
  int rc;
  if ((rc = squeue_get(t, sid, &q))) return rc;
  if (!(nv = grow(l->v, &l->cap, l->n, sizeof *l->v))) return nomem(t->err);
  l->v = nv;
  o = &l->v[l->n];
  memset(o, 0, sizeof *o);
  if (!(o->sid = dx__strdup(sid)) || (r->owner && !(o->owner = dx__strdup(r->owner)))) {
    free(o->sid);
    return nomem(t->err);
  }
  o->locked_until = r->locked_until;
  o->last_activity = r->last_activity;
  o->queued = q.rows;
  l->n++;
  return 0;
}

/* Call cb for each collected row until it returns non-zero. */
static void slist_report(const sess_list_t *l, dx_session_cb cb, void *ud) {
  size_t i;
  for (i = 0; cb && i < l->n; i++) {
    dx_session_info_t s;
    s.session_id = l->v[i].sid;
    s.worker_id = l->v[i].owner;
    s.locked_until_ms = l->v[i].locked_until;
    s.last_activity_ms = l->v[i].last_activity;
    s.queued = l->v[i].queued;
    if (cb(ud, &s)) break;
  }
}

typedef struct {
  str_list_t l;
  size_t prefix_n;
} owned_ids_t;

static int owned_ids_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  owned_ids_t *o = ud;
  if (k->mv_size <= o->prefix_n || ((const char *)k->mv_data)[k->mv_size - 1] != 0)
    return corrupt(t, DB_SESS_OWNER, "bad key", "%zu-byte key", k->mv_size);
  return strs_push(&o->l, (const char *)k->mv_data + o->prefix_n) ? nomem(t->err) : 0;
}

/* Ids of the sessions `worker` owns (any lease state), in session id order. */
static int owned_ids(tx_t *t, const char *worker, str_list_t *out) {
  owned_ids_t o;
  dkey_t pre;
  int rc;
  memset(&o, 0, sizeof o);
  key_inst(&pre, worker);
  o.prefix_n = pre.n;
  rc = scan_prefix(t, DB_SESS_OWNER, &pre, owned_ids_cb, &o);
  if (rc) strs_free(&o.l);
  else *out = o.l;
  return rc;
}

static int sess_renew(tx_t *t, int64_t now, const char *worker, int64_t extend_ms,
                      int64_t idle_ms, sess_list_t *out) {
  str_list_t ids = {NULL, 0, 0};
  size_t i;
  int rc = owned_ids(t, worker, &ids);
  for (i = 0; i < ids.n && !rc; i++) {
    sess_rec_t r, nw;
    rc = sess_get(t, ids.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc && sess_owner_is(&r, worker) && r.locked_until > now &&
        (idle_ms <= 0 || sat_add(r.last_activity, idle_ms) > now)) {
      nw = r;
      nw.locked_until = sat_add(now, extend_ms);
      rc = sess_put(t, ids.v[i], &r, &nw);
      if (!rc) rc = slist_push(t, out, ids.v[i], &nw);
    }
    sess_clear(&r);
  }
  strs_free(&ids);
  return rc;
}

static int lm_renew_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                             int64_t extend_ms, int64_t idle_ms, dx_session_cb cb, void *ud,
                             uint64_t *renewed, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  sess_list_t l = {NULL, 0, 0};
  tx_t t;
  int rc;
  if (renewed) *renewed = 0;
  if ((rc = check_worker_id(worker_id, err)) || (rc = lm_begin_tx(p, 1, &t, err))) return rc;
  rc = tx_end(&t, sess_renew(&t, now, worker_id, extend_ms, idle_ms, &l));
  if (!rc) {
    if (renewed) *renewed = l.n;
    slist_report(&l, cb, ud); /* after the commit: callbacks may call the provider */
  }
  slist_free(&l);
  return rc;
}

/* Give up ownership: owner "" (previous owner = worker), lease ends now. */
static int sess_release(tx_t *t, int64_t now, const char *worker, const char *sid,
                        uint64_t *count) {
  str_list_t ids = {NULL, 0, 0};
  size_t i;
  int rc = sid ? (strs_push(&ids, sid) ? nomem(t->err) : 0) : owned_ids(t, worker, &ids);
  for (i = 0; i < ids.n && !rc; i++) {
    sess_rec_t r, nw;
    rc = sess_get(t, ids.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc && sess_owner_is(&r, worker)) {
      nw = r;
      nw.owner = "";
      nw.prev = (char *)worker;
      nw.locked_until = now;
      rc = sess_put(t, ids.v[i], &r, &nw);
      if (!rc) (*count)++;
    }
    sess_clear(&r);
  }
  strs_free(&ids);
  return rc;
}

static int lm_release_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                               const char *session_id, uint64_t *released, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t n = 0;
  tx_t t;
  int rc;
  if (released) *released = 0;
  if ((rc = check_worker_id(worker_id, err)) || (rc = lm_begin_tx(p, 1, &t, err))) return rc;
  rc = tx_end(&t, sess_release(&t, now, worker_id, session_id, &n));
  if (!rc && released) *released = n;
  return rc;
}

typedef struct {
  int64_t now;
  int orphans_only;   /* 1: collect only rows cleanup deletes; 0: every row */
  str_list_t ids;     /* orphans_only */
  sess_list_t rows;   /* !orphans_only */
} sess_scan_t;

static int sess_scan_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sess_scan_t *s = ud;
  const char *sid = k->mv_data;
  sess_rec_t r;
  sess_queue_t q;
  int rc;
  if (k->mv_size == 0 || sid[k->mv_size - 1] != 0)
    return corrupt(t, DB_SESSIONS, "bad key", "%zu-byte key", k->mv_size);
  if ((rc = sess_decode(t, sid, v, &r))) return rc;
  if (!s->orphans_only) {
    rc = slist_push(t, &s->rows, sid, &r);
  } else if (!sess_owned(&r) || r.locked_until <= s->now) {
    if (!(rc = squeue_get(t, sid, &q)) && !q.found && strs_push(&s->ids, sid)) rc = nomem(t->err);
  }
  sess_clear(&r);
  return rc;
}

static int sess_cleanup(tx_t *t, int64_t now, uint64_t *count) {
  sess_scan_t s;
  dkey_t none;
  size_t i;
  int rc;
  memset(&s, 0, sizeof s);
  s.now = now;
  s.orphans_only = 1;
  k_init(&none);
  rc = scan_prefix(t, DB_SESSIONS, &none, sess_scan_cb, &s);
  for (i = 0; i < s.ids.n && !rc; i++) {
    sess_rec_t r;
    rc = sess_get(t, s.ids.v[i], &r);
    if (!rc) rc = sess_put(t, s.ids.v[i], &r, NULL);
    if (!rc) (*count)++;
    sess_clear(&r);
  }
  strs_free(&s.ids);
  return rc;
}

static int lm_cleanup_sessions(dx_provider_t *pp, int64_t now, uint64_t *deleted,
                               dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t n = 0;
  tx_t t;
  int rc;
  if (deleted) *deleted = 0;
  if ((rc = lm_begin_tx(p, 1, &t, err))) return rc;
  rc = tx_end(&t, sess_cleanup(&t, now, &n));
  if (!rc && deleted) *deleted = n;
  return rc;
}

/* Sessions with queued work but no row yet (never claimed: held back by capacity, or no
** worker takes session work) are listed too, unowned: their queue is what an operator needs. */
static int unclaimed_scan_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sess_scan_t *s = ud;
  const char *sid = k->mv_data;
  sess_rec_t r;
  int rc;
  (void)v;
  if (k->mv_size == 0 || sid[k->mv_size - 1] != 0)
    return corrupt(t, DB_SESS_QUEUE, "bad key", "%zu-byte key", k->mv_size);
  rc = sess_get(t, sid, &r);
  if (rc == DX_ENOTFOUND) {
    memset(&r, 0, sizeof r);
    rc = slist_push(t, &s->rows, sid, &r);
  }
  sess_clear(&r);
  return rc;
}

static int lm_list_sessions(dx_provider_t *pp, dx_session_cb cb, void *ud, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  sess_scan_t s;
  dkey_t none;
  tx_t t;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = lm_begin_tx(p, 0, &t, err))) return rc;
  memset(&s, 0, sizeof s);
  k_init(&none);
  rc = scan_prefix(&t, DB_SESSIONS, &none, sess_scan_cb, &s);
  if (!rc) rc = scan_prefix(&t, DB_SESS_QUEUE, &none, unclaimed_scan_cb, &s);
  rc = tx_end(&t, rc);
  if (!rc) slist_report(&s.rows, cb, ud);
  slist_free(&s.rows);
  return rc;
}

/* {===== store format upgrade =====} */

/* Format 1 indexed session rows in work_ready / work_lock under class byte 1; move them to the
** session indexes. */
static int upgrade_from_1(tx_t *t) {
  static const int dbs[2] = {DB_WORK_READY, DB_WORK_LOCK};
  seq_list_t l = {NULL, 0, 0};
  dkey_t pre, k;
  size_t i;
  int d, rc = 0;
  k_init(&pre);
  k_u8(&pre, 1);
  for (d = 0; d < 2 && !rc; d++) rc = scan_prefix(t, dbs[d], &pre, ident_cb, &l);
  for (i = 0; i < l.n && !rc; i++) {
    work_row_t r;
    rc = row_get(t, l.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc) {
      key_work_idx(&k, 1, r.token ? r.locked_until : r.visible_at, r.seq);
      rc = db_del(t, r.token ? DB_WORK_LOCK : DB_WORK_READY, &k);
    }
    if (!rc && r.session_id && !(rc = row_index(t, &r, 1)))
      rc = squeue_refresh(t, r.session_id, 1);
    row_clear(&r);
  }
  free(l.v);
  return rc;
}

/* {===== open / close =====} */

static void env_free(shared_env_t *se) {
  if (se->env) mdb_env_close(se->env);
  if (se->notify_fd >= 0) close(se->notify_fd);
  free(se->notify_path);
  pthread_mutex_destroy(&se->commit_mu);
  pthread_mutex_destroy(&se->batch_mu);
  free(se->path);
  free(se);
}

/* Open every named DB and check (or stamp) the store format, in one durable txn. */
static int env_init_dbs(shared_env_t *se, dx_error_t *err) {
  tx_t t;
  dkey_t k;
  MDB_val v;
  unsigned char fmt[4] = {0, 0, 0, LM_STORE_FORMAT};
  static const unsigned char fmt1[4] = {0, 0, 0, 1};
  int i, rc = tx_begin(se, 1, 1, &t, err);
  for (i = 0; i < DB__COUNT && !rc; i++) {
    int mrc = mdb_dbi_open(t.txn, db_names[i], MDB_CREATE, &se->dbi[i]);
    if (mrc) rc = tx_err(&t, mrc, db_names[i]);
  }
  if (rc) return tx_end(&t, rc);
  key_name(&k, "format");
  rc = db_get(&t, DB_META, &k, &v);
  if (rc == DX_ENOTFOUND) rc = db_put(&t, DB_META, &k, fmt, 4, 0);
  else if (!rc && v.mv_size == 4 && memcmp(v.mv_data, fmt1, 4) == 0) {
    if (!(rc = upgrade_from_1(&t))) rc = db_put(&t, DB_META, &k, fmt, 4, 0);
  } else if (!rc && (v.mv_size != 4 || memcmp(v.mv_data, fmt, 4) != 0))
    rc = dx_error_set(t.err, DX_ESTORE,
                      "store %s has an unknown format (this build reads format %u)", se->path,
                      LM_STORE_FORMAT);
  return tx_end(&t, rc);
}

static int env_open(char *path, size_t map_size, shared_env_t **out, dx_error_t *err) {
  shared_env_t *se = calloc(1, sizeof *se);
  MDB_envinfo info;
  int dead, mrc;
  if (!se) { free(path); return nomem(err); }
  se->path = path;
  se->pid = getpid();
  se->refs = 1;
  se->map_size = map_size;
  se->notify_fd = -1;
  if ((se->notify_path = malloc(strlen(path) + 8)) != NULL) {
    sprintf(se->notify_path, "%s/notify", path);
    se->notify_fd = open(se->notify_path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  }
  pthread_mutex_init(&se->commit_mu, NULL);
  pthread_mutex_init(&se->batch_mu, NULL);
  if ((mrc = mdb_env_create(&se->env)) == 0 &&
      (mrc = mdb_env_set_maxdbs(se->env, LM_MAXDBS)) == 0 &&
      (mrc = mdb_env_set_mapsize(se->env, map_size)) == 0)
    mrc = mdb_env_open(se->env, path, MDB_NOTLS, 0644);
  if (mrc) {
    int code = mrc == MDB_INVALID || mrc == MDB_VERSION_MISMATCH ? DX_ECORRUPT : DX_ESTORE;
    int rc = dx_error_set(err, code, "cannot open store %s: %s", path, mdb_strerror(mrc));
    env_free(se);
    return rc;
  }
  mdb_reader_check(se->env, &dead); /* free reader slots left by killed processes */
  if (mdb_env_info(se->env, &info) == 0) se->map_size = info.me_mapsize;
  if ((mrc = env_init_dbs(se, err))) {
    env_free(se);
    return mrc;
  }
  *out = se;
  return 0;
}

/* Find or open the env for `path` (realpath, owned by this call). */
static int registry_acquire(char *path, size_t map_size, shared_env_t **out, dx_error_t *err) {
  shared_env_t *se;
  int rc = 0;
  pthread_mutex_lock(&g_reg_mu);
  for (se = g_reg; se; se = se->next)
    if (se->pid == getpid() && strcmp(se->path, path) == 0) break;
  if (se) {
    se->refs++;
    free(path);
  } else if ((rc = env_open(path, map_size, &se, err)) == 0) {
    se->next = g_reg;
    g_reg = se;
  }
  pthread_mutex_unlock(&g_reg_mu);
  *out = se;
  return rc;
}

static void registry_release(shared_env_t *se) {
  shared_env_t **pp;
  pthread_mutex_lock(&g_reg_mu);
  if (--se->refs == 0) {
    for (pp = &g_reg; *pp; pp = &(*pp)->next)
      if (*pp == se) { *pp = se->next; break; }
    env_free(se);
  }
  pthread_mutex_unlock(&g_reg_mu);
}

static int mkdir_p(const char *path, dx_error_t *err) {
  char *buf = dx__strdup(path), *s;
  struct stat sb;
  int rc = 0;
  if (!buf) return nomem(err);
  for (s = buf + 1; ; s++) {
    if (*s != '/' && *s != 0) continue;
    char c = *s;
    *s = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
      rc = dx_error_set(err, DX_EIO, "cannot create directory %s: %s", buf, strerror(errno));
      break;
    }
    *s = c;
    if (!c) break;
  }
  free(buf);
  if (!rc && (stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode)))
    rc = dx_error_set(err, DX_EIO, "store path %s is not a directory", path);
  return rc;
}

static void lm_destroy(dx_provider_t *pp) {
  lm_t *p = (lm_t *)pp;
  if (!p) return;
  lm_rollback(pp);
  registry_release(p->se);
  free(p);
}

static const char *lm_notify_path(dx_provider_t *pp) { return ((lm_t *)pp)->se->notify_path; }

static const dx_provider_test_hooks_t lm_test_hooks; /* defined with the hooks below */

static const dx_provider_methods_t lm_methods = {
  4,
  "lmdb",
  lm_destroy,
  lm_begin,
  lm_commit,
  lm_rollback,
  lm_fetch_orch,
  lm_ack_orch,
  lm_abandon_orch,
  lm_renew_orch,
  lm_fetch_work,
  lm_ack_work,
  lm_abandon_work,
  lm_renew_work,
  lm_enqueue_orch,
  lm_enqueue_work,
  lm_read_history,
  lm_append,
  lm_get_info,
  lm_list,
  lm_depths,
  lm_next_due,
  lm_renew_sessions,
  lm_release_sessions,
  lm_cleanup_sessions,
  lm_list_sessions,
  lm_notify_path,
  NULL, /* wake_fd: the notify file serves */
  NULL, /* wake_drain */
  &lm_test_hooks,
};

int dx__lmdb_open(const char *path, const dx_provider_opts_t *opts, dx_provider_t **out,
                  dx_error_t *err) {
  lm_t *p;
  char *real;
  size_t map_size;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = NULL;
  if (!path || !*path) return dx_error_set(err, DX_EINVAL, "store path is empty");
  if (opts && opts->version < 1)
    return dx_error_set(err, DX_EINVAL, "dx_provider_opts_t.version must be 1");
  if ((rc = mkdir_p(path, err))) return rc;
  if (!(real = realpath(path, NULL)))
    return dx_error_set(err, DX_EIO, "cannot resolve store path %s: %s", path, strerror(errno));
  if (!(p = calloc(1, sizeof *p))) { free(real); return nomem(err); }
  map_size = opts && opts->map_size ? opts->map_size : LM_DEFAULT_MAP;
  rc = registry_acquire(real, map_size, &p->se, err);
  if (rc) { free(p); return rc; }
  p->base.methods = &lm_methods;
  p->no_sync = opts && opts->no_sync;
  *out = &p->base;
  return 0;
}

/* {===== test hooks =====} */

static int lm_test_corrupt_history(dx_provider_t *pp, const char *instance,
                                   uint64_t execution_id, uint64_t event_id) {
  static const unsigned char garbage[] = {0xc1, 0xc1, 0xc1, 0xc1}; /* 0xc1: never valid */
  lm_t *p = (lm_t *)pp;
  dkey_t k;
  tx_t t;
  int rc = lm_begin_tx(p, 1, &t, NULL);
  if (rc) return rc;
  key_hist(&k, instance, execution_id, event_id);
  return tx_end(&t, db_put(&t, DB_HISTORY, &k, garbage, sizeof garbage, 0));
}

/* The session's lease ends at now_ms; the owner stays recorded (a lapse, not a release). */
static int lm_test_expire_session(dx_provider_t *pp, const char *session_id, int64_t now_ms) {
  lm_t *p = (lm_t *)pp;
  sess_rec_t r, nw;
  tx_t t;
  int rc = lm_begin_tx(p, 1, &t, NULL);
  if (rc) return rc;
  rc = sess_get(&t, session_id, &r);
  if (rc == 0) {
    nw = r; /* shares r's strings */
    if (nw.locked_until > now_ms) nw.locked_until = now_ms;
    rc = sess_put(&t, session_id, &r, &nw);
    sess_clear(&r);
  }
  return tx_end(&t, rc);
}

static const dx_provider_test_hooks_t lm_test_hooks = {1, lm_test_corrupt_history,
                                                       lm_test_expire_session};
