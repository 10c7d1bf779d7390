/*
** lmdb_int.h -- private declarations shared by the LMDB provider's files (the files in this
** directory are the only ones that include lmdb.h).
**
** Layout: one MDB_env per store directory, named DBs below. Numbers in keys are big-endian
** u64 so byte order is numeric order; strings are bytes + NUL, so the prefix "inst\0"
** selects exactly one instance. Values are MessagePack arrays [format, fields...] described by
** field tables (records.c); events and work items inside them are the codec's records
** (codec.h). Since format 3 every value, index entries included, ends with a 4-byte CRC32C
** of key and value (txn.c), written by db_put and checked by every read.
**
**   meta          "format" -> be32 4 (3 while opened beside another process: env.c
**                 check_format)   "seq" -> be64 last sequence number
**                 "max_size" -> be64 the store's size limit (absent: none)
**   instances     inst\0 -> name, version, current_exec, custom_status, cs_version,
**                           created_at, updated_at, parent, created_seq
**   inst_created  be64 created_at be64 created_seq -> inst   (list_instances)
**   executions    inst\0 be64 exec -> status, output, failure, started_at, completed_at
**   history       inst\0 be64 exec be64 event_id -> event record, or (format 4) the run of
**                 events a turn (or a batch's turns) appended with consecutive ids from
**                 event_id: a MessagePack array of >= 2 bins, each an event record (history.c)
**   orch_msgs     inst\0 be64 seq -> visible_at, token, attempt, item
**   orch_state    inst\0 -> ready_at, locked_until, token   (absent: unlocked, no messages)
**   orch_ready    be64 ready_at inst\0 -> ""       unlocked instances with messages
**   orch_lock     be64 locked_until inst\0 -> ""   locked instances
**   work          be64 seq -> visible_at, locked_until, token, attempt, session_id, inst,
**                             exec, activity_id, item, sess_epoch (optional)
**   work_ready    u8 0 be64 visible_at be64 seq -> ""     unlocked plain rows
**   work_lock     u8 0 be64 locked_until be64 seq -> ""   locked plain rows
**   work_token    be64 token -> be64 seq    locks whose token does not name its row: a lock
**                                           token is seq << 20 | 20 counter bits (work.c)
**   work_ident    inst\0 be64 exec be64 activity_id be64 seq -> ""   (lock stealing)
**   sessions      sid\0 -> owner ("" = unowned), previous_owner, locked_until, last_activity,
**                           epoch, users (optional: added for fencing and ended sessions)
**   sess_owner    owner\0 sid\0 -> be64 locked_until      sessions by owner (the lease when
**                                                          the owner took the session; the
**                                                          session row holds the current one)
**   sess_items    sid\0 be64 due be64 seq -> ""            rows of a session; due is
**                                                          visible_at, or locked_until if locked
**   sess_queue    sid\0 -> be64 head_due be64 head_seq be64 rows   (sessions with rows)
**   sess_heads    be64 head_due be64 head_seq sid\0 -> ""  one entry per sessions_queue row
**   kv            inst\0 key\0 -> value, updated_at   committed key-value state (kv.c)
**   kv_delta      inst\0 key\0 -> value|nil, updated_at   the running execution's changes
**                                                     (nil = cleared)
**   sess_events   sid\0 be64 seq -> at, event, worker, detail, previous_owner   (the session's
**                 history for `sessions --history`; latest DX_SESSION_EVENTS_KEEP per session)
**   workers       worker\0 -> host, pid, started_at, locker   registered workers (workers.c);
**                 live.c's locks say which of them still live
**   inst_status, inst_name, orch_starts   the list page indexes (listidx.c)
**
** Fetches read the head of the ready and lock indexes (an expired lock is as fetchable as a
** ready message), so they stay O(log n) however many rows are locked or delayed. Rows with a
** session id live only in the session indexes: a session fetch walks sess_heads in time order
** (a sess_owner lookup tells its own sessions' heads) past sessions other workers hold, or, at
** capacity, looks at the heads of its own sessions only; so its cost is bounded by the due
** heads ahead of the row it takes, or by max_sessions, never by queued rows.
** The worker-index class byte (0) is kept from format 1, where session rows used class 1.
**
** Transactions: outside a batch each method is one txn (read-only for pure reads). begin()
** opens a batch for the calling thread on this env; until commit() every method on that
** thread runs in a nested txn, so a failing method undoes only its own changes -- except the
** store cycle's hot methods (LM_WRITE_DIRECT), which run in the batch txn itself: their
** expected refusals come before any write, and a later failure spoils the batch. So do the
** client's enqueues in a batch opened with begin_atomic (its caller rolls it back whole). Commits
** fsync unless the handle has no_sync or commit(sync=0) is used (see dx__lm_top_finish and
** lm_commit: a sync=0 batch that wrote more than locks still flushes its data).
** Every top-level txn first checks the files and, for writes, grows the map (map.c).
** Inside a batch the direct methods keep some writes in memory until the batch's own
** fetches take them or something else could look: plain worker rows an ack queues
** (shared_env_t.pend, work.c), idle instances a message makes ready and the locks fetches take
** on them or on stored ready ones (rpend, orch.c), instance records acks write and the events
** they append (the instance table ik: records.c, history.c), the
** session queue summaries and session records they change (sq, squeue.c: written once with
** the net change), session rows they queue (srow, srows.c: locked and deleted in memory when
** the batch's fetch and ack take them) and orchestration messages they queue (kmsg, kmsgs.c:
** read by the batch's fetch, deleted in memory by its turn's ack). They are written by dx__lm_pend_flush before any nested method of the
** batch begins and at commit, and dropped with a batch that does not commit. The batch also
** keeps one cursor per DB for its direct methods' walks (curs, txn.c dx__lm_cursor) and for
** the reads and writes by key in its txn (txn.c key_cursor: the next key is often on the leaf
** the cursor is on, and LMDB then skips the search from the root).
*/
#ifndef DX_LMDB_INT_H
#define DX_LMDB_INT_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <unistd.h>

#include <lmdb.h>
#include <msgpack.h>

#include "codec.h"
#include "duroxide/provider.h"
#include "providers/checks.h"
#include "providers/listing.h"
#include "providers/providers.h"
#include "util.h"

#define LM_STORE_FORMAT 4u   /* layout version in meta "format" (1 to 3 are upgraded on open;
                                4 = history runs: builds reading only 3 refuse the store) */
#define LM_RECORD_FORMAT 1u  /* first element of every wrapper record */
#define LM_DEFAULT_MAP ((size_t)64 << 20) /* first map size; it doubles as the store fills */
#define LM_SUM_BYTES 4       /* CRC32C after every value (format 3) */
#define LM_KEY_MAX 511       /* LMDB's default MDB_MAXKEYSIZE */
#define LM_INSTANCE_MAX DX_MAX_INSTANCE_ID_BYTES /* room left for the numbers in keys */
#define LM_SESSION_MAX DX_MAX_SESSION_ID_BYTES /* owner\0sid\0 must fit a key */
#define LM_NEVER INT64_MAX

enum {
  DB_META, DB_INSTANCES, DB_INST_CREATED, DB_EXECUTIONS, DB_HISTORY,
  DB_ORCH_MSGS, DB_ORCH_STATE, DB_ORCH_READY, DB_ORCH_LOCK,
  DB_WORK, DB_WORK_READY, DB_WORK_LOCK, DB_WORK_TOKEN, DB_WORK_IDENT,
  DB_SESSIONS, DB_SESS_OWNER, DB_SESS_ITEMS, DB_SESS_QUEUE, DB_SESS_HEADS,
  DB_KV, DB_KV_DELTA, DB_SESS_EVENTS, DB_WORKERS, DB_INST_STATUS, DB_INST_NAME, DB_ORCH_STARTS,
  DB__COUNT
};
/* Exactly the named DBs above: every nested transaction (one per operation of a group commit)
** allocates and copies per-DB state for this many. */
#define LM_MAXDBS DB__COUNT

/* Names of the named DBs, indexed by DB_*. */
extern const char *const dx__lm_db_names[DB__COUNT];

/* A hash index by id over an array of entries whose first member is the id (char *; NULL: a
** taken entry, found by nobody): slots hold entry index + 1 (0: empty), a power of 2 of them,
** at most half full. The batch's kept tables (rpend in orch.c, sq in squeue.c, kinst in kmsgs.c)
** use it. */
typedef struct lm_strix_s {
  uint32_t *idx;
  size_t slots;
} lm_strix_t;
/* Index entry `at` (set already) of `base`, growing (and rebuilding over entries 0..at) when the
** table would be more than half full. 0 or DX_ENOMEM (nothing indexed: the caller drops it). */
int dx__lm_strix_add(lm_strix_t *x, const void *base, size_t stride, size_t at);
/* Entry `at` of `base` (room for it already made) becomes a zeroed entry whose id is an owned
** copy of id, indexed: 0, or DX_ENOMEM with nothing kept (the caller does not count it). */
int dx__lm_strix_push(lm_strix_t *x, void *base, size_t stride, size_t at, const char *id);
void dx__lm_strix_clear(lm_strix_t *x);

/* LMDB forbids opening one env twice in a process, so handles on the same directory share
** one of these, keyed by realpath. */
typedef struct shared_env_s {
  struct shared_env_s *next;
  char *path;
  pid_t pid;                 /* an env never crosses fork(): a child opens its own */
  int refs;
  MDB_env *env;
  MDB_dbi dbi[DB__COUNT];
  size_t map_size;           /* current map size (guarded by remap) */
  size_t max_size;           /* growth limit; 0 = none but the disk */
  int grow_wanted;           /* a write found the map full (atomic) */
  int read_only;             /* opened MDB_RDONLY: the directory is not writable */
  int no_sess_events;        /* read-only store written before sess_events existed */
  int no_workers;            /* read-only store written before workers existed */
  int no_list_idx;           /* read-only store written before the list indexes: list by scan */
  int fmt3;                  /* the store stays format 3: another process (maybe an older build,
                                which checks the format only at open) had it open when this one
                                opened it, so history is written one event per record and an
                                orchestration lock tags its messages (env.c check_format) */
  int probe_fd;              /* lock.mdb, open while the env is, for asking whether another
                                process has the store open (closing any fd of lock.mdb would
                                drop LMDB's own lock on it) */
  size_t psize;              /* LMDB page size */
  int data_fd;               /* data.mdb, for the truncation check */
  char *lock_path;           /* lock.mdb and its identity when opened (ino 0: no lock file) */
  dev_t lock_dev;
  ino_t lock_ino;
  int lost;                  /* the lock file vanished: refuse every further txn (atomic) */
  int fill_off;              /* a fill failed: data.mdb is no longer grown ahead (atomic) */
  /* The lock file is looked up again only after it changed (map.c "watching the lock file"):
  ** watch_fd is an inotify fd watching lock.mdb (-1: none, every check looks); lock_clean
  ** says the last look passed and no event came since (both under files_mu). */
  int watch_fd;
  int lock_clean;
  pthread_mutex_t files_mu;
  pthread_rwlock_t remap;    /* read-held by every top-level txn; write-held to resize */
  pthread_mutex_t commit_mu; /* serializes top-level commits with the NOSYNC toggle */
  pthread_mutex_t batch_mu;  /* guards batch / batch_thread */
  MDB_txn *batch;            /* open group-commit txn, owned by batch_thread */
  pthread_t batch_thread;
  int batch_wrote;           /* the open batch wrote more than locks: queued work or recorded
                                an activity's result (its commit flushes, wakes workers) */
  uint64_t batch_writes;     /* puts and deletes tried in the open batch (direct methods) */
  int batch_spoiled;         /* a direct method failed after writing: the batch is lost, its
                                commit fails with spoil_err (env.c lm_commit) */
  dx_error_t spoil_err;
  int seq_held;              /* the open batch holds the sequence counter in `seq` (txn.c) */
  uint64_t seq;
  /* The open batch's count of cap_worker's sessions with a lease past cap_now (work.c
  ** claim_room asks it once per batch): dx__lm_sess_put and the kept record's in-place fetch
  ** (dx__lm_sess_kept_fetch) keep it and cap_until exact (sessions.c cap_note); cleared when
  ** the batch ends or a nested method fails (its writes are undone, its count changes are
  ** not). */
  int cap_valid;
  int64_t cap_now;
  uint32_t cap_live;
  char cap_worker[DX_MAX_SESSION_ID_BYTES + 1];
  /* No lease counted in cap_live ends before this (nor did one left out end after cap_now):
  ** the count holds for any time in [cap_now, cap_until), so a fetch a millisecond later does
  ** not count again. */
  int64_t cap_until;
  /* Plain worker rows direct methods queued in the open batch and not written yet (work.c
  ** "rows queued in the batch"): pend[pend_first..pend_n) minus taken ones (seq 0). */
  struct work_row_s *pend;
  /* Session rows direct methods queued in the open batch, kept in memory while they live
  ** (srows.c): srow[0..srow_n) in seq order, srow_live of them still there. */
  struct lm_srow_s *srow;
  size_t srow_n, srow_cap, srow_live;
  /* Orchestration messages direct methods queued in the open batch, kept in memory while they
  ** live (kmsgs.c): instances (hash index by id) with their messages' lists. */
  struct lm_kinst_s *kinst;
  size_t kinst_n, kinst_cap;
  struct lm_strix_s kinst_ix;
  struct lm_kmsg_s *kmsg;
  size_t kmsg_n, kmsg_cap, kmsg_live;
  size_t pend_n, pend_cap, pend_first;
  int pend_unsorted;         /* a row was queued due before one queued ahead of it */
  int64_t pend_last_due;     /* the latest due time queued so far */
  /* Instances a direct method made ready or locked in the open batch that have no stored lock
  ** state, not written yet (orch.c "instances made ready or locked in the batch"), with a hash
  ** index by id. */
  struct rpend_s *rpend;
  size_t rpend_n, rpend_cap, rpend_live, rpend_first; /* [0, rpend_first) all taken */
  int rpend_unsorted;        /* the ready entries are not in ready-time order */
  int64_t rpend_last_at;     /* the latest ready time added so far (INT64_MIN: none) */
  struct lm_strix_s rpend_ix;
  size_t rpend_locks;        /* live entries holding a lock */
  size_t rpend_ready_first;  /* [0, rpend_ready_first) none ready (orch.c rpend_pick) */
  int64_t rpend_lock_min;    /* a lower bound on their expiries (LM_NEVER: none) */
  /* The open batch's copy of own_worker's sess_owner entries with their sess_queue heads, in
  ** session id order (work.c's pick at capacity asks it for every fetch instead of reading
  ** each owned session's queue again). dx__lm_squeue_refresh keeps the heads exact; an owner
  ** change of one of them (dx__lm_sess_put) drops it; dropped with cap_valid (batch end, a
  ** failed nested method: dx__lm_sess_batch_forget). */
  int own_valid;
  char own_worker[DX_MAX_SESSION_ID_BYTES + 1];
  struct lm_own_s *own;
  size_t own_n, own_cap;
  /* Session queue summaries the open batch's direct methods changed and did not write yet
  ** (squeue.c), with a hash index by session id. */
  struct lm_sq_s *sq;
  size_t sq_n, sq_cap;
  struct lm_strix_s sq_ix;
  /* Their heads (kept summaries with a row) in sess_heads key order, kept sorted as the
  ** summaries change (squeue.c): the heads walk merges them in without sorting. */
  struct lm_kh_s *kh;
  size_t kh_n, kh_cap;
  size_t sq_last; /* the entry found last: a step asks for its session several times in a row */
  /* Cursors of the open batch txn, one per DB, for the direct methods' walks (txn.c
  ** dx__lm_cursor; curs_busy: bit db set while a walk uses it) and, when no walk holds them,
  ** the batch txn's reads and writes by key (txn.c key_cursor). LMDB frees a write txn's
  ** cursors when the txn ends: the batch's end only forgets them. */
  MDB_cursor *curs[DB__COUNT];
  uint32_t curs_busy;
  /* The open batch's lower bounds on the due times in the timed indexes (orch_ready,
  ** orch_lock: every entry; work_ready, work_lock: untagged entries), bit db of floor_known set
  ** when known: a fetch at a time before the bound finds nothing due there without a seek.
  ** Learnt from a seek of the head, lowered by every put (dx__lm_idx_op), so it stays a lower
  ** bound whatever the batch writes (deletes only raise the true head); forgotten when the
  ** batch ends (txn.c dx__lm_floor_*). */
  int64_t floor[DB__COUNT];
  uint32_t floor_known;
  /* Instance records the batches' direct methods read or wrote (records.c "instance records
  ** kept by the batches"): a table by id hash (an id may take either slot of a pair),
  ** LM_IK_SLOTS entries once used; ik_live entries filled; ik_last: the slot found last (a
  ** method asks for one instance many times). Kept past a commit (ik_txn: the txn id the next
  ** write txn has when nobody else committed since) while the next batch has it. */
  struct lm_ik_s *ik;
  size_t ik_live;
  size_t ik_txn;
  size_t ik_last;
  /* The open batch's direct methods' instance record writes are kept there too, written once
  ** with the batch's other kept writes (dx__lm_inst_keep_write): slots of the entries to
  ** write (some may have been written or dropped since: their flag says). */
  uint32_t *ik_dirty;
  size_t ik_dirty_n, ik_dirty_cap;
  /* Worker rows the batch thread wrote (records.c "worker rows kept by the batches"): direct
  ** mapped by seq, LM_RK_SLOTS entries once used (seq 0: empty), rk_live filled; kept and
  ** dropped with ik. */
  struct work_row_s *rk;
  size_t rk_live, rk_bytes;  /* entries filled, their items' bytes */
  int ik_wrote;              /* a write in the open batch's own txn succeeded */
  int ik_nested;             /* a nested writer ran in the open batch */
  /* ik_txn was set for a commit whose outcome its thread has not seen yet (env.c lm_commit):
  ** a batch beginning before then drops the table (a failed commit leaves its id to the
  ** next writer, whose commit would make the table look current) */
  int ik_committing;
  char *notify_path;         /* <store>/notify: written after commits that carry work */
  int notify_fd;
} shared_env_t;

typedef struct {
  dx_provider_t base;
  shared_env_t *se;
  int no_sync;
  int in_batch; /* this handle opened the env's batch (begin) */
  int atomic;   /* ... with begin_atomic: its caller rolls it back whole when a call fails, so
                   calls need no nested txn to contain them (dx__lm_enqueue_orch runs direct) */
  /* In this batch the session claims of this worker id are over (at capacity, or nothing
  ** claimable): its later fetches skip them. Capacity only grows within a batch and its
  ** operations come before its fetches; LMDB has one writer, so nothing else changes the
  ** answer before the next batch asks again. "" = none. */
  char claims_over[DX_MAX_SESSION_ID_BYTES + 1];
  struct lm_live_s *live; /* worker liveness of this handle (live.c) */
  dx_fetch_filter_t *filter; /* set_fetch_filter (NULL: untagged rows, every instance) */
  dx_history_hint_t hint;    /* set_history_hint (held NULL: none) */
  uint64_t tag;           /* this handle as a lock holder: recorded on the locks it takes */
  char tag_name[32];      /* its liveness name, "@handle:<tag>" (live.c) */
  int fail_commit;        /* test hook (testhooks.c): the next commit aborts and fails */
} lm_t;
static inline int64_t sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
  if (b < 0 && a < INT64_MIN - b) return INT64_MIN;
  return a + b;
}
/* One method's transaction. Inside a batch it is nested in the batch txn (even for reads,
** which must see the batch's own writes), so a failing method undoes only its changes. */
typedef struct {
  shared_env_t *se;
  MDB_txn *txn;
  int write, nested, durable;
  int direct;          /* nested in name only: runs in the batch txn itself (LM_WRITE_DIRECT) */
  uint64_t writes0;    /* direct: se->batch_writes when the method began */
  int raw;         /* values without checksums (reading and upgrading format 1 and 2) */
  struct work_row_s *memo; /* a fetch's last session head row read (work.c sess_tag_ok) */
  dx_error_t *err; /* never NULL: points at scratch when the caller passed NULL */
  dx_error_t scratch;
} tx_t;
/* 1 when t writes in the open batch's txn itself (a direct method, or a flush of what the
** batch kept): what the batch's kept tables may learn from; a nested txn may still be undone. */
static inline int dx__lm_in_batch_txn(const tx_t *t) {
  return t->direct || (t->txn && t->txn == t->se->batch);
}
typedef struct {
  size_t n;
  int over; /* too long: becomes an empty key, which LMDB rejects */
  unsigned char b[LM_KEY_MAX];
} dkey_t;
static inline void k_init(dkey_t *k) { k->n = 0; k->over = 0; }

static inline void k_bytes(dkey_t *k, const void *p, size_t n) {
  if (k->n + n > sizeof k->b) { k->over = 1; return; }
  memcpy(k->b + k->n, p, n);
  k->n += n;
}

static inline void put_u64(unsigned char *b, uint64_t v) {
  int i;
  for (i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (56 - 8 * i));
}

static inline uint64_t get_u64(const void *p) {
  const unsigned char *b = p;
  uint64_t v = 0;
  int i;
  for (i = 0; i < 8; i++) v = (v << 8) | b[i];
  return v;
}

static inline void k_u64(dkey_t *k, uint64_t v) {
  unsigned char b[8];
  put_u64(b, v);
  k_bytes(k, b, 8);
}

/* Times before the epoch sort as 0: they are all "due". */
static inline void k_time(dkey_t *k, int64_t t) { k_u64(k, t < 0 ? 0 : (uint64_t)t); }
static inline void k_str(dkey_t *k, const char *s) { k_bytes(k, s, strlen(s) + 1); }
static inline void k_u8(dkey_t *k, unsigned v) {
  unsigned char c = (unsigned char)v;
  k_bytes(k, &c, 1);
}

static inline MDB_val kval(const dkey_t *k) {
  MDB_val v;
  v.mv_size = k->over ? 0 : k->n;
  v.mv_data = (void *)k->b;
  return v;
}

static inline void key_inst(dkey_t *k, const char *inst) { k_init(k); k_str(k, inst); }
static inline void key_exec(dkey_t *k, const char *inst, uint64_t exec) {
  key_inst(k, inst);
  k_u64(k, exec);
}
static inline void key_hist(dkey_t *k, const char *inst, uint64_t exec, uint64_t ev) {
  key_exec(k, inst, exec);
  k_u64(k, ev);
}
static inline void key_seq(dkey_t *k, uint64_t seq) { k_init(k); k_u64(k, seq); }
static inline void key_timed(dkey_t *k, int64_t at, const char *inst) {
  k_init(k);
  k_time(k, at);
  k_str(k, inst);
}
static inline void key_work_idx(dkey_t *k, unsigned cls, int64_t at, uint64_t seq) {
  k_init(k);
  k_u8(k, cls);
  k_time(k, at);
  k_u64(k, seq);
}
/* Plain worker rows are indexed under class 0 (untagged) or class 2 + tag (tagged), then
** due time and seq, so a fetch seeks the head of each tag it takes. */
static inline void key_work_prefix(dkey_t *k, const char *tag) {
  k_init(k);
  k_u8(k, tag ? 2 : 0);
  if (tag) k_str(k, tag);
}
static inline void key_ident(dkey_t *k, const char *inst, uint64_t exec, uint64_t act) {
  key_exec(k, inst, exec);
  k_u64(k, act);
}
static inline void key_name(dkey_t *k, const char *name) {
  k_init(k);
  k_bytes(k, name, strlen(name));
}
/* Calls fn for every key of `db` starting with `prefix`, in order; fn returns 0 to go on,
** > 0 to stop, < 0 (an error code) to fail. fn must not write to `db`. */
typedef int (*scan_fn)(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud);
static inline uint64_t time_u64(int64_t t) { return t < 0 ? 0 : (uint64_t)t; }

static inline void key_sess_owner(dkey_t *k, const char *owner, const char *sid) {
  k_init(k);
  k_str(k, owner);
  k_str(k, sid);
}

static inline void key_sess_item(dkey_t *k, const char *sid, int64_t due, uint64_t seq) {
  key_inst(k, sid);
  k_time(k, due);
  k_u64(k, seq);
}

static inline void key_sess_head(dkey_t *k, uint64_t due, uint64_t seq, const char *sid) {
  k_init(k);
  k_u64(k, due);
  k_u64(k, seq);
  k_str(k, sid);
}
typedef struct {
  char *name, *version, *custom_status, *parent;
  uint64_t current_exec, cs_version, created_seq;
  int64_t created_at, updated_at;
} inst_rec_t;

typedef struct {
  int status;
  char *output;
  dx_failure_t fail;
  int64_t started_at, completed_at;
} exec_rec_t;

/* A key-value record (kv and kv_delta); value NULL = cleared (kv_delta only). */
typedef struct {
  char *value;
  int64_t updated_at;
} kv_rec_t;

/* {===== orchestrator queue: messages =====} */

typedef struct {
  uint64_t seq;
  int64_t visible_at;
  uint64_t token;    /* the fetch batch this message belongs to; 0 = none */
  uint64_t attempt;
  char *item;        /* owned copy of the item record */
  size_t item_len;
} orch_msg_t;

typedef struct {
  const char *inst;
  size_t prefix_n;
  orch_msg_t *v;
  size_t n, cap;
  int heads;         /* read without their items (item NULL) */
} msg_list_t;
/* {===== orchestrator queue: per-instance state and indexes =====} */

typedef struct {
  int64_t ready_at;     /* unlocked: min visible_at of the messages; LM_NEVER when none */
  int64_t locked_until; /* locked: lock expiry */
  uint64_t token;       /* 0 = unlocked */
  uint64_t locker;      /* locked: the tag of the handle that locked it (0: unknown) */
  /* locked (format 4): the batch is the messages up to seq batch_seq visible at batch_at; they
  ** are not rewritten by the fetch (0: a lock taken before, which tagged its messages) */
  uint64_t batch_seq;
  int64_t batch_at;
} orch_state_t;

static const orch_state_t STATE_EMPTY = {LM_NEVER, 0, 0, 0, 0, 0};

/* Is message m in the batch that lock st holds? A lock taken since format 4 names its batch in
** the state and leaves its messages as they were; an older one tagged each with its token. */
static inline int dx__lm_msg_in_lock(const orch_state_t *st, const orch_msg_t *m) {
  if (!st->token) return 0;
  if (m->token) return m->token == st->token;
  return st->batch_seq && m->seq <= st->batch_seq && m->visible_at <= st->batch_at;
}

/* m's attempts, the lock it is in counted (a format 4 lock stores its count in the message
** only when it ends without an ack: abandon, or another fetch after it lapsed). */
static inline uint64_t dx__lm_msg_attempt(const orch_state_t *st, const orch_msg_t *m) {
  return m->attempt + (!m->token && dx__lm_msg_in_lock(st, m));
}

/* A session row. Owned <=> owner is non-empty; the lease is live while locked_until > now. */
typedef struct {
  char *owner;        /* NULL or "" = unowned (released) */
  char *prev;         /* owner before the current one (or before a release); NULL if none */
  int64_t locked_until, last_activity;
  uint64_t epoch;     /* ownership epoch: +1 on every claim (fencing: locks taken under an
                         older epoch cannot ack or renew) */
  char *users;        /* instances that ran activities of the session: entries of be64 exec,
                         be16 length, instance bytes (NULL: none) */
  size_t users_len;
} sess_rec_t;

/* A session event (sess_events). */
typedef struct {
  int64_t at;
  char *event, *worker, *detail, *prev;
} sev_rec_t;

/* A worker registration (workers). */
typedef struct {
  char *host;
  int64_t pid, started_at;
  uint64_t locker;    /* the registering handle's lock-holder tag (lm_t.tag) */
} wreg_rec_t;

/* A session's queue summary: its earliest row (due time, seq) and how many rows it has. */
typedef struct {
  int found;
  uint64_t due, seq, rows;
} sess_queue_t;
typedef struct lm_sq_s lm_sq_t;
/* The in-memory batch tables' hash of a NUL-terminated id (util.h's FNV-1a; they use its low
** bits). */
static inline uint32_t dx__lm_str_hash(const char *s) {
  return (uint32_t)dx__fnv1a64(DX_FNV1A64_BASIS, s);
}
/* Entry index + 1 of `id` in the array `base` of `stride`-byte entries, or 0 (lm_strix_t;
** inline: every lookup of the batch's kept tables asks it). */
static inline size_t dx__lm_strix_find(const lm_strix_t *x, const void *base, size_t stride,
                                       const char *id) {
  size_t i, mask = x->slots - 1;
  if (!x->slots) return 0;
  for (i = dx__lm_str_hash(id) & mask; x->idx[i]; i = (i + 1) & mask) {
    const char *e = *(char *const *)(const void *)((const char *)base + (x->idx[i] - 1) * stride);
    if (e && strcmp(e, id) == 0) return x->idx[i];
  }
  return 0;
}
/* One owned session in shared_env_t.own: its id and queue head (found 0: no rows). */
typedef struct lm_own_s {
  char *sid;
  int found;
  uint64_t due, seq;
} lm_own_t;
/* {===== worker queue =====} */

typedef struct work_row_s {
  uint64_t seq;
  int64_t visible_at, locked_until;
  uint64_t token;   /* 0 = unlocked */
  uint64_t attempt;
  char *session_id; /* NULL: a plain row; else indexed in sess_items, not work_ready/lock */
  char *instance;
  uint64_t exec, act_id;
  char *item;
  size_t item_len;
  uint64_t locker;  /* locked: the tag of the handle that locked it (0: unknown) */
  uint64_t sess_epoch; /* session rows: the session's epoch when this lock was taken */
  char *tag;        /* plain rows: indexed under the tag (NULL: untagged); session rows: kept */
} work_row_t;
/* A row's place in its queue index: visible_at, or locked_until while locked. */
static inline int64_t dx__lm_row_due(const work_row_t *r) {
  return r->token ? r->locked_until : r->visible_at;
}

/* One stored field of a wrapper record: its type and where it lives in the C struct. */
/* RF_SKIP: a str, nil or bin the reader checks and does not keep (schemas only read with, for
** readers that need the other fields: never written with). */
typedef enum { RF_I64, RF_U64, RF_INT, RF_STR, RF_BIN, RF_SKIP } lm_field_type_t;

typedef struct {
  lm_field_type_t type;
  size_t off;
  size_t len_off; /* RF_BIN: offset of its size_t length */
  int required;   /* RF_STR / RF_BIN: nil is corruption */
} lm_field_t;

typedef struct {
  int db;                 /* the DB holding these records */
  const lm_field_t *f;    /* stored fields, in record order */
  size_t n;
  size_t n_min;           /* fields every stored record has (0: all n); later ones were
                             appended since and read as 0 / NULL when absent */
  uint32_t strs;          /* bit i: field i (< n) owns memory (RF_STR, RF_BIN): what
                             dx__lm_rec_clear frees (test lmdb_records_schema_masks) */
} lm_schema_t;
typedef struct {
  int db;       /* index the candidate came from */
  int64_t at;   /* ready_at or locked_until */
  dkey_t key;
  char *inst;   /* NULL: no candidate */
  /* what the capabilities check read for this candidate, so locking it does not read it
  ** again (same txn, no write in between): its messages (msgs_held) and its instance record
  ** (ir_held 1: read, -1: none stored, 0: not read) */
  int msgs_held, ir_held;
  msg_list_t msgs;
  inst_rec_t ir;
} orch_cand_t;
/* A fetch candidate: a plain row (head of work_ready or work_lock) or the earliest row of a
** session, either one this worker owns or one it may claim. */
enum { WC_PLAIN, WC_OWNED, WC_CLAIM, WC_PENDING /* a row queued in the batch (work.c) */ };

typedef struct {
  int found, db, kind;
  int64_t at;            /* visible_at, or locked_until of an expired lock */
  uint64_t seq;
  dkey_t key;            /* the index entry it came from */
  char sid[LM_SESSION_MAX + 1];
  size_t pend_at;        /* WC_PENDING: its place in shared_env_t.pend */
} work_cand_t;
typedef struct {
  uint64_t *v;
  size_t n, cap;
} seq_list_t;
typedef struct {
  char **v;
  size_t n, cap;
} str_list_t;

/* txn.c */
/* Run `body` (an int expression using the tx `t`) in a write txn of handle p, leaving the
** result in rc. A top-level write that failed only because the map was full runs again once
** the map has grown; `reset` (a statement) undoes the body's outputs before each rerun and
** after a failure. */
#define LM_WRITE_MODE(p, t, err, rc, body, reset, direct)                      \
  do {                                                                         \
    int lm_tries_ = 0;                                                         \
    for (;;) {                                                                 \
      if (((rc) = dx__lm_tx_begin((p)->se, !(p)->no_sync, 1, (direct), &(t), (err))) != 0) \
        break;                                                                 \
      (rc) = dx__lm_tx_end(&(t), (body));                                      \
      if ((rc) == 0) break;                                                    \
      reset;                                                                   \
      if (!dx__lm_retry_full(&(t), (rc), ++lm_tries_)) break;                  \
    }                                                                          \
  } while (0)
#define LM_WRITE(p, t, err, rc, body, reset) LM_WRITE_MODE(p, t, err, rc, body, reset, 0)
/* For the store cycle's hot methods, whose expected refusals (lost lock, stale token) come
** before their first write: inside a batch they run in the batch txn itself instead of a
** nested one (LMDB's nested txn allocates megabytes of bookkeeping and copies every page it
** touches). One that fails after writing spoils the batch (provider.h: commit then fails and
** the store thread applies each op alone, where such a method runs in a batch of one). */
#define LM_WRITE_DIRECT(p, t, err, rc, body, reset) LM_WRITE_MODE(p, t, err, rc, body, reset, 1)

int dx__lm_mdb_error(shared_env_t *se, int mrc, const char *what, dx_error_t *err);
int dx__lm_nomem(dx_error_t *err);
int dx__lm_tx_err(tx_t *t, int mrc, const char *what);
MDB_txn *dx__lm_thread_batch(shared_env_t *se);
int dx__lm_tx_begin(shared_env_t *se, int durable, int write, int direct, tx_t *t,
                    dx_error_t *err);
int dx__lm_begin_tx(lm_t *p, int write, tx_t *t, dx_error_t *err);
/* A txn handle on the batch txn itself, for writing what the batch kept in memory (the
** flushes: dx__lm_pend_flush, dx__lm_seq_flush). */
void dx__lm_batch_tx(tx_t *t, shared_env_t *se, MDB_txn *batch, dx_error_t *err);
int dx__lm_top_begin(shared_env_t *se, int write, int durable, MDB_txn **txn, dx_error_t *err);
/* How a commit reaches the disk: not flushed (MDB_NOSYNC: only for batches that take locks),
** fully (data, then the meta page), or data only (MDB_NOMETASYNC: the store stays intact and
** only this last commit may be lost to a power cut; the next flush carries its meta page). */
enum { LM_FLUSH_NONE = 0, LM_FLUSH_FULL = 1, LM_FLUSH_DATA = 2 };
int dx__lm_top_finish(shared_env_t *se, MDB_txn *txn, int commit, int flush, int notify);
int dx__lm_retry_full(tx_t *t, int rc, int tries);
/* Verify and strip the checksum of a value read from `db` (no-op for raw txns). */
int dx__lm_check_sum(tx_t *t, int db, const MDB_val *k, MDB_val *v);
int dx__lm_tx_end(tx_t *t, int rc);
void *dx__lm_grow(void *v, size_t *cap, size_t n, size_t elem);
int dx__lm_db_get(tx_t *t, int db, const dkey_t *k, MDB_val *v);
int dx__lm_db_put(tx_t *t, int db, const dkey_t *k, const void *data, size_t n, unsigned flags);
int dx__lm_db_del(tx_t *t, int db, const dkey_t *k);
/* Delete the record cursor c (on `db`, from dx__lm_cursor) is on, counted and reported as
** dx__lm_db_del does; MDB_NEXT then gives the record after it. */
int dx__lm_cursor_del(tx_t *t, int db, MDB_cursor *c);
int dx__lm_idx_op(tx_t *t, int db, const dkey_t *k, const void *v, size_t n, int put);
int dx__lm_scan_prefix(tx_t *t, int db, const dkey_t *prefix, scan_fn fn, void *ud);
/* A cursor on `db` for one walk, released by dx__lm_cursor_done: in the batch txn itself (a
** direct method) the batch's own, repositioned by the walk; else a new one. */
int dx__lm_cursor(tx_t *t, int db, MDB_cursor **c);
void dx__lm_cursor_done(tx_t *t, int db, MDB_cursor *c);
/* The batch ended: its cursors went with its txn, its due floors with its writes. */
static inline void dx__lm_curs_forget(shared_env_t *se) {
  memset(se->curs, 0, sizeof se->curs);
  se->curs_busy = 0;
  se->floor_known = 0;
}
/* 1 when the batch knows nothing in timed index `db` (untagged part for the work indexes) is
** due at `now` (direct methods only). */
static inline int dx__lm_floor_after(const tx_t *t, int db, int64_t now) {
  return t->direct && (t->se->floor_known & (1u << db)) && now < t->se->floor[db];
}
/* A direct method's seek found the head of `db` due at `at` (LM_NEVER: no entry). */
static inline void dx__lm_floor_learn(const tx_t *t, int db, int64_t at) {
  if (!t->direct) return;
  t->se->floor[db] = at;
  t->se->floor_known |= 1u << db;
}
int dx__lm_head_key(tx_t *t, int db, const dkey_t *prefix, MDB_val *key);
/* Formats "corrupted record in <db> (<key>): detail" as DX_ECORRUPT in t->err. */
int dx__lm_corrupt(tx_t *t, int db, const char *detail, const char *keyfmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* Write the batch's sequence counter before it commits (txn.c dx__lm_next_seq). */
int dx__lm_seq_flush(shared_env_t *se, MDB_txn *batch, dx_error_t *err);
int dx__lm_next_seq(tx_t *t, uint64_t *out);

/* map.c */
/* Start watching lock.mdb (se->watch_fd) once the env opened and its identity is known;
** without it (no inotify, or dx__lm_watch_files is 0) every files check looks it up. */
void dx__lm_watch_open(shared_env_t *se, const char *lock_path);
extern int dx__lm_watch_files; /* 1 (default): watch; tests set 0 to check the fallback */
/* The files check with a fresh look at the lock file, whatever the watch says (open). */
int dx__lm_files_ok(shared_env_t *se, dx_error_t *err);
/* Before a top-level txn: the files check, and for a write the map grown when it must;
** *fill: data.mdb should be grown ahead (dx__lm_fill_ahead) once a durable write txn began. */
int dx__lm_top_check(shared_env_t *se, int write, int *fill, dx_error_t *err);
/* Inside a top-level write txn (LMDB's write lock held): write zeros past the end of data.mdb
** so commits overwrite blocks instead of growing the file (map.c "growing data.mdb ahead").
** Errors only stop the env's fills. Tests lower dx__lm_fill_from (bytes in use before the
** first fill) and set dx__lm_fill_fault (an errno every fill's write fails with). */
void dx__lm_fill_ahead(shared_env_t *se);
extern size_t dx__lm_fill_from;
extern int dx__lm_fill_fault;
/* Before LMDB maps data.mdb: its meta pages must not send LMDB outside the file. */
int dx__lm_check_meta(const char *data_path, dx_error_t *err);
/* freelist.c: 1 when every page from the end of data.mdb (file_size bytes) to page `last` is on
** the freelist whose B-tree root is free_root (read with pread from fd). */
int dx__lm_tail_is_free(int fd, uint64_t psize, uint64_t file_size, uint64_t free_root,
                        uint64_t last);
void dx__lm_adopt_size(shared_env_t *se);
int dx__lm_can_grow(shared_env_t *se);

/* records.c */
extern const lm_schema_t dx__lm_msg_head_schema; /* a message read without its item */
extern const lm_schema_t dx__lm_sess_time_schema; /* a session without owner, prev, users */
extern const lm_schema_t dx__lm_inst_schema, dx__lm_exec_schema, dx__lm_msg_schema,
    dx__lm_state_schema, dx__lm_state3_schema, dx__lm_sess_schema, dx__lm_row_schema,
    dx__lm_kv_schema, dx__lm_kv_delta_schema, dx__lm_sev_schema, dx__lm_wreg_schema;
/* The record as MessagePack into out (NULL: only its length); returns its length. */
size_t dx__lm_rec_pack(const lm_schema_t *s, const void *rec, unsigned char *out);
/* An upper bound of dx__lm_rec_pack's size (cheaper than its sizing pass). */
size_t dx__lm_rec_bound(const lm_schema_t *s, const void *rec);
int dx__lm_rec_put(tx_t *t, const lm_schema_t *s, const dkey_t *k, const void *rec);
int dx__lm_rec_decode(tx_t *t, const lm_schema_t *s, const MDB_val *v, void *rec,
                      const char *what);
/* The two halves of dx__lm_rec_decode (tests compare them): the direct reader takes records
** as dx__lm_rec_put writes them (0; DX_ENOMEM; 1 = anything else, rec untouched), the general
** one (msgpack-c) every valid record, with the corruption messages. */
int dx__lm_rec_decode_direct(const lm_schema_t *s, const MDB_val *v, void *rec);
int dx__lm_rec_decode_general(tx_t *t, const lm_schema_t *s, const MDB_val *v, void *rec,
                              const char *what);
/* A message record (dx__lm_msg_schema; heads: dx__lm_msg_head_schema, item NULL) as the writer
** stores it, without the table walk: as dx__lm_rec_decode_direct answers (m's fields). */
int dx__lm_msg_decode_direct(const MDB_val *v, orch_msg_t *m, int heads);
/* A record's name for error messages, formatted only on failure: fmt takes s then n (or n
** alone when s is NULL). */
typedef struct {
  const char *fmt;
  const char *s;
  unsigned long long n;
} lm_what_t;
int dx__lm_rec_get_as(tx_t *t, const lm_schema_t *s, const dkey_t *k, void *rec,
                      const lm_what_t *w);
int dx__lm_rec_decode_as(tx_t *t, const lm_schema_t *s, const MDB_val *v, void *rec,
                         const lm_what_t *w);
int dx__lm_rec_get(tx_t *t, const lm_schema_t *s, const dkey_t *k, void *rec, const char *what);
void dx__lm_rec_clear(const lm_schema_t *s, void *rec);
void dx__lm_inst_clear(inst_rec_t *r);
int dx__lm_inst_get(tx_t *t, const char *inst, inst_rec_t *r);
int dx__lm_inst_put(tx_t *t, const char *inst, const inst_rec_t *r);
void dx__lm_inst_keep_drop(shared_env_t *se);
void dx__lm_inst_keep_commit(shared_env_t *se, size_t txn_id);
void dx__lm_inst_keep_begin(shared_env_t *se, size_t txn_id);
/* An ack's usual change of inst's record (no name, no custom status): current_exec raised to
** exec, updated_at now, in the batch's kept copy (written later, as dx__lm_inst_put does in a
** direct method). 1 with the current execution before in *was and the record's creation
** time and sequence; 0 when the record is not kept (read it and put it). */
int dx__lm_inst_touch(tx_t *t, const char *inst, uint64_t exec, int64_t now, uint64_t *was,
                      int64_t *created_at, uint64_t *created_seq);
/* Write the instance records and history runs the batch keeps unwritten (t: the batch txn;
** dx__lm_pend_flush). */
int dx__lm_inst_keep_write(tx_t *t);
/* Events a batch's direct methods appended to one execution of an instance and did not write
** yet (history.c "runs kept by the batch"): the bins of a run of consecutive ids from `first`,
** after LM_HRUN_ROOM bytes kept free for the record's array header. */
#define LM_HRUN_ROOM 5
typedef struct {
  unsigned char *b;
  size_t len, cap;          /* len counts the room */
  uint64_t exec, first, n;  /* n 0: none */
} lm_hrun_t;
/* records.c: inst's kept run in the batches' instance table (make: an entry made when missing),
** NULL outside a direct method or when none can be kept; dx__lm_hrun_mark: inst's run now
** holds events to write (a failure after it spoils the batch). */
lm_hrun_t *dx__lm_hrun_of(tx_t *t, const char *inst, int make);
int dx__lm_hrun_mark(tx_t *t, const char *inst);
/* history.c: write h as one record of inst's history and empty it. */
int dx__lm_hrun_write(tx_t *t, const char *inst, lm_hrun_t *h);
int dx__lm_tail_get(tx_t *t, const char *inst, uint64_t exec, uint64_t *n,
                    const dx_event_t **last);
void dx__lm_tail_keep(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *last);
void dx__lm_tail_forget(tx_t *t, const char *inst);
int dx__lm_tail_take(tx_t *t, const char *inst, dx_event_t *out);
/* The instance's stored lock state kept by the batches (records.c; orch.c reads and writes
** it through dx__lm_state_get / state_set_db): 1 with *s when kept; keep s (NULL: forget). */
int dx__lm_state_kept(tx_t *t, const char *inst, orch_state_t *s);
int dx__lm_inst_kept(tx_t *t, const char *inst); /* kept as present (stored or unwritten) */
/* Worker rows kept by the batches (records.c): the batch thread keeps a row it wrote in the
** batch txn (taking r's strings, *r zeroed); a direct method's read takes it back (1 with *r,
** owned: dx__lm_row_get); every row write forgets its seq first. */
void dx__lm_row_keep(tx_t *t, work_row_t *r);
int dx__lm_row_kept_take(tx_t *t, uint64_t seq, work_row_t *r);
void dx__lm_row_kept_forget(tx_t *t, uint64_t seq);
void dx__lm_state_keep(tx_t *t, const char *inst, const orch_state_t *s);
void dx__lm_exec_clear(exec_rec_t *r);
int dx__lm_exec_get(tx_t *t, const char *inst, uint64_t exec, exec_rec_t *r);
int dx__lm_exec_put(tx_t *t, const char *inst, uint64_t exec, const exec_rec_t *r);

/* history.c */
/* A history value's events (one, or a turn's run: see history.c): fn gets each event record's
** bytes with its index in the run, or b NULL when the framing is bad (then the walk ends with
** fn's answer); fn returns non-zero to stop. dx__lm_hist_count: how many (-1: bad framing). */
typedef int (*dx__lm_hist_fn)(void *ud, size_t i, const void *b, size_t len);
int dx__lm_hist_walk(const MDB_val *v, dx__lm_hist_fn fn, void *ud);
int dx__lm_hist_count(const MDB_val *v, size_t *count);
int dx__lm_history_unused(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n);
int dx__lm_history_append(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n);
int dx__lm_history_load(tx_t *t, const char *inst, uint64_t exec, dx_event_t **out, size_t *n);
int dx__lm_history_holds(tx_t *t, const char *inst, uint64_t exec, uint64_t n, dx_event_t *last);
int dx__lm_resolve_exec(tx_t *t, const char *inst, uint64_t want, uint64_t *exec);

/* orch.c */
int dx__lm_state_get(tx_t *t, const char *inst, orch_state_t *s);
/* The instance a fetch with filter f (NULL: none) would lock at `now`: c->inst NULL when none
** (caller frees c->inst). */
int dx__lm_orch_pick(tx_t *t, const dx_fetch_filter_t *f, int64_t now, orch_cand_t *c);
void dx__lm_cand_clear(orch_cand_t *c);
/* The index entry a lock state implies: DB_ORCH_LOCK, DB_ORCH_READY or -1 (none). */
int dx__lm_state_index(const char *inst, const orch_state_t *s, dkey_t *k);
int dx__lm_orch_enqueue(tx_t *t, const dx_work_item_t *w, int64_t visible_at);
int dx__lm_orch_head(tx_t *t, int db, int64_t now, orch_cand_t *c);
int dx__lm_fetch_orch(dx_provider_t *pp, int64_t now, int64_t lock_ms, dx_orch_item_t **out,
                      dx_error_t *err);
int dx__lm_ack_orch(dx_provider_t *pp, int64_t now, const dx_orch_ack_t *ack, dx_error_t *err);
int dx__lm_abandon_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                        int64_t delay_ms, int ignore_attempt, dx_error_t *err);
int dx__lm_renew_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                      int64_t extend_ms, dx_error_t *err);
int dx__lm_enqueue_orch(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                        int64_t delay_ms, dx_error_t *err);
/* Every message of one instance, oldest first (free with dx__lm_msgs_free). */
int dx__lm_msgs_load(tx_t *t, const char *inst, msg_list_t *l);
void dx__lm_msgs_free(msg_list_t *l);
int dx__lm_msg_decode(tx_t *t, const msg_list_t *l, size_t i, dx_work_item_t *w);
/* Replace lock state `old` by `nw` (STATE_EMPTY: drop it), moving the index entries. */
int dx__lm_state_set(tx_t *t, const char *inst, const orch_state_t *old,
                     const orch_state_t *nw);

/* sessions.c */
int dx__lm_sess_owned(const sess_rec_t *r);
int dx__lm_sess_owner_is(const sess_rec_t *r, const char *worker);
void dx__lm_sess_clear(sess_rec_t *r);
int dx__lm_sess_get(tx_t *t, const char *sid, sess_rec_t *r);
/* The same without owner, prev and users (NULL): times and epoch only, no allocation. */
int dx__lm_sess_times(tx_t *t, const char *sid, sess_rec_t *r);
int dx__lm_sess_put(tx_t *t, const char *sid, const sess_rec_t *old, const sess_rec_t *nw);
/* Point nw->users at a new blob (caller frees *blob) that lists (inst, exec) once. */
int dx__lm_sess_add_user(tx_t *t, sess_rec_t *nw, const char *inst, uint64_t exec, char **blob);
/* What reading a record the open batch keeps (kr: dx__lm_kept_sess_rec), changing it and
** dx__lm_sess_put would do, done in place; the owner stays. _touch: last_activity = now (an
** ack that passed fencing). _fetch: its owner fetched a row of instance inst (NULL: none) of
** execution exec: last_activity = now, the lease runs at least until `until`, inst joins the
** users. */
void dx__lm_sess_kept_touch(tx_t *t, sess_rec_t *kr, int64_t now);
int dx__lm_sess_kept_fetch(tx_t *t, sess_rec_t *kr, int64_t now, int64_t until,
                           const char *inst, uint64_t exec);
/* 1 in *ended when the session has no worker rows and every instance that used it has ended
** (its execution is no longer running). *alive (may be NULL) receives a blob of the users
** still running (caller frees; NULL when none). */
int dx__lm_sess_ended(tx_t *t, const char *sid, const sess_rec_t *r, int *ended, char **alive,
                      size_t *alive_len);
void dx__lm_own_moved(shared_env_t *se, const char *sid, int found, uint64_t due, uint64_t seq);

/* squeue.c: session queue summaries (sess_queue, sess_heads); in a batch the direct methods'
** changes are kept in memory (shared_env_t.sq) until dx__lm_sq_write. */
int dx__lm_squeue_get(tx_t *t, const char *sid, sess_queue_t *q);
int dx__lm_squeue_refresh(tx_t *t, const char *sid, int delta);
/* The same, told which row left its place (gone) and where one arrived (came), as
** (due, seq) pairs, NULL when none/unknown: spares the seek for the new head when it follows. */
int dx__lm_squeue_update(tx_t *t, const char *sid, int delta, const uint64_t *gone,
                         const uint64_t *came);
/* Every sess_heads entry in key order, the batch's kept heads merged in (scan_prefix's fn). */
int dx__lm_sess_heads_walk(tx_t *t, scan_fn fn, void *ud);
/* Session records the same way: dx__lm_kept_sess gives `sid`'s kept record (1, *rec set: the
** batch's own, decoded), DX_ENOTFOUND when the batch deleted it, 0 when none is kept (read the
** store); dx__lm_kept_sess_rec the same, NULL unless kept: a direct method may change its
** times and users in place (sessions.c), counting that as a write (se->batch_writes);
** dx__lm_keep_sess keeps `row` (NULL: deleted) and returns 1, or 0 outside a batch's direct
** method (write it), or an error. */
int dx__lm_kept_sess(tx_t *t, const char *sid, sess_rec_t **rec);
sess_rec_t *dx__lm_kept_sess_rec(tx_t *t, const char *sid);
int dx__lm_keep_sess(tx_t *t, const char *sid, const sess_rec_t *row);
/* Write the kept summaries and records in t's txn (dx__lm_pend_flush; it drops them). */
int dx__lm_sq_write(tx_t *t);
void dx__lm_sq_drop(shared_env_t *se);
/* The sessions `worker` owns (sess_owner, any lease state) with their queue heads, from the
** open batch's copy (built on first use in the batch): 0 with *own and *n set, 0 with *own NULL
** outside a batch of this thread (read sess_owner instead), or an error. Valid until the txn
** writes a session row or the batch ends. */
int dx__lm_sess_owned_heads(tx_t *t, const char *worker, const lm_own_t **own, size_t *n);
/* The batch ended or a nested method's writes were undone: drop what the batch counted or
** copied (cap_valid, own). Called with batch_mu held or by the batch's thread. */
void dx__lm_sess_batch_forget(shared_env_t *se);
int dx__lm_renew_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                          int64_t extend_ms, int64_t idle_ms, dx_session_cb cb, void *ud,
                          uint64_t *renewed, dx_error_t *err);
int dx__lm_release_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                            const char *session_id, uint64_t *released, dx_error_t *err);
int dx__lm_cleanup_sessions(dx_provider_t *pp, int64_t now, uint64_t *deleted,
                            dx_error_t *err);
int dx__lm_list_sessions(dx_provider_t *pp, dx_session_cb cb, void *ud, dx_error_t *err);

/* sess_events.c */
int dx__lm_append_session_event(dx_provider_t *pp, const dx_session_event_t *ev,
                                dx_error_t *err);
int dx__lm_list_session_events(dx_provider_t *pp, const char *sid, dx_session_event_cb cb,
                               void *ud, dx_error_t *err);
/* Delete session events older than DX_SESSION_EVENTS_MAX_AGE_MS (cleanup's txn). */
int dx__lm_prune_session_events(tx_t *t, int64_t now);

/* work.c */
void dx__lm_row_clear(work_row_t *r);
int dx__lm_row_get(tx_t *t, uint64_t seq, work_row_t *r);
/* The queue index entry of a row: work_ready / work_lock (plain rows) or sess_items. */
int dx__lm_row_queue_key(const work_row_t *r, dkey_t *k);
/* Worker lock tokens carry their row's seq above this many generation bits (work.c). */
#define LM_TOKEN_GEN_BITS 20
/* 1 when the row's lock token is kept in the work_token index: a token that does not name its
** row (written before tokens did, or a row whose seq is too large to fit in one). */
static inline int dx__lm_token_indexed(const work_row_t *r) {
  return r->token && r->token >> LM_TOKEN_GEN_BITS != r->seq;
}
int dx__lm_row_index(tx_t *t, const work_row_t *r, int put);
int dx__lm_work_insert(tx_t *t, const dx_work_item_t *w, int64_t visible_at);
/* Write the rows queued in the open batch (txn: the batch) as dx__lm_work_insert would have;
** a failure spoils the batch. Then / or drop them (the batch ended). */
int dx__lm_pend_flush(shared_env_t *se, MDB_txn *txn, dx_error_t *err);
void dx__lm_pend_drop(shared_env_t *se);
static inline int dx__lm_pend_any(const shared_env_t *se) {
  return se->pend_n || se->rpend_live || se->sq_n || se->srow_live || se->kmsg_live ||
         se->ik_dirty_n;
}
/* kmsgs.c: orchestration messages kept in the open batch. dx__lm_kmsg_add: keep a new message
** (1: its item taken; 0: not kept, write it) or an error; _put/_del: a rewrite or delete of a
** kept one done in memory (1) or not kept (0); _list: append inst's kept messages to l (with
** items unless l->heads); _write: write them all (t: the batch txn) and drop them; _drop:
** forget them (the batch ended). */
typedef struct lm_kinst_s lm_kinst_t;
typedef struct lm_kmsg_s lm_kmsg_t;
int dx__lm_kmsg_add(tx_t *t, const char *inst, orch_msg_t *m);
int dx__lm_kmsg_put(tx_t *t, const char *inst, const orch_msg_t *m);
int dx__lm_kmsg_del(tx_t *t, const char *inst, uint64_t seq);
int dx__lm_kmsg_list(tx_t *t, msg_list_t *l);
int dx__lm_kmsg_write(tx_t *t);
void dx__lm_kmsg_drop(shared_env_t *se);
/* Write a new row with its index entries (not its session's summary). */
int dx__lm_row_store(tx_t *t, const work_row_t *r);
/* srows.c: session rows kept in the open batch. dx__lm_srow_set: row_set's change kept in
** memory (1), not (0: write it) or an error; an insert with `taken` set moves nw's strings into
** the kept row instead of copying them (*taken = 1: the caller forgets them); _get: 1 with an
** owned copy of a kept row, 0 or an error; _peek: 1 with the kept row as it is, its strings
** borrowed (else 0, *r zeroed): a delete of that row through it (srow_set with old borrowing)
** hands them to the borrower instead of freeing them, and _borrows tells whether r still
** borrows a kept row's strings (then forget them, never free them); _release: clear r, which
** may borrow; _head: lower q to the earliest kept row of sid; _seqs: append the kept rows of sid
** to l; _held: seq is a kept row; _write:
** write them all (t: the batch txn) and drop them; _flush: the same from a direct method that
** walks sess_items or work_ident; _drop: forget them (the batch ended). */
typedef struct lm_srow_s lm_srow_t;
int dx__lm_srow_set(tx_t *t, const work_row_t *old, const work_row_t *nw, int *taken);
int dx__lm_srow_get(tx_t *t, uint64_t seq, work_row_t *r);
int dx__lm_srow_peek(tx_t *t, uint64_t seq, work_row_t *r);
int dx__lm_srow_borrows(shared_env_t *se, const work_row_t *r);
void dx__lm_srow_release(shared_env_t *se, work_row_t *r);
void dx__lm_srow_head(shared_env_t *se, const char *sid, sess_queue_t *q);
int dx__lm_srow_seqs(tx_t *t, const char *sid, seq_list_t *l);
int dx__lm_srow_held(shared_env_t *se, uint64_t seq);
int dx__lm_srow_write(tx_t *t);
int dx__lm_srow_flush(tx_t *t);
void dx__lm_srow_drop(shared_env_t *se);
/* orch.c: the same for instances made ready in the batch and the locks its fetches took
** (rpend; dx__lm_pend_flush/drop call them). */
int dx__lm_rpend_write(tx_t *t);
void dx__lm_rpend_drop(shared_env_t *se);
/* Consider the head of every plain-row index this filter takes (NULL: untagged only). */
int dx__lm_work_heads(tx_t *t, const dx_fetch_filter_t *f, int64_t now, work_cand_t *c);
/* The same for one index (DB_WORK_READY or DB_WORK_LOCK). */
int dx__lm_work_db_heads(tx_t *t, int db, const dx_fetch_filter_t *f, int64_t now,
                         work_cand_t *c);
/* When the earliest session head whose row has a tag `f` takes is due (LM_NEVER: none). */
int dx__lm_sess_heads_due(tx_t *t, const dx_fetch_filter_t *f, int64_t *out);
int dx__lm_ident_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud);
int dx__lm_work_cancel(tx_t *t, const dx_activity_ref_t *ref);
int dx__lm_row_set(tx_t *t, const work_row_t *old, const work_row_t *nw);
int dx__lm_fetch_work(dx_provider_t *pp, int64_t now, int64_t lock_ms,
                      const dx_session_cfg_t *sessions, dx_work_fetch_t *out,
                      dx_error_t *err);
int dx__lm_ack_work(dx_provider_t *pp, int64_t now, uint64_t token,
                    const dx_work_item_t *completion, dx_error_t *err);
int dx__lm_abandon_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t delay_ms,
                        int ignore_attempt, dx_error_t *err);
int dx__lm_renew_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t extend_ms,
                      dx_error_t *err);
int dx__lm_enqueue_work(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                        dx_error_t *err);

/* live.c */
int dx__lm_live_open(lm_t *p, const char *dir);
void dx__lm_live_close(lm_t *p);
/* This handle acts as `worker`: peers see the id alive while the handle is open. */
void dx__lm_live_hold(lm_t *p, const char *worker);
/* 0 only when the kernel says no process holds `owner` (1 without liveness: lease decides). */
int dx__lm_live_alive(lm_t *p, const char *owner);
/* 1 when a session fetch should first sweep dead owners' locked rows (throttled). */
int dx__lm_live_sweep_due(lm_t *p, int64_t now);
/* When (caller's clock) the next sweep is worth a fetch; LM_NEVER without liveness. */
int64_t dx__lm_live_next_sweep(lm_t *p);
/* The locks of dead handles (plain rows, instances): this handle's tag held alive, and 1 when
** a sweep of others' locks is due (at most every sweep period). */
/* The liveness name of lock holder `tag` ("@handle:<hex>"). */
void dx__lm_tag_name(uint64_t tag, char *buf, size_t n);
int dx__lm_live_locks_due(lm_t *p, int64_t now);
/* 0 only when the kernel says the handle that recorded `locker` on a lock is gone. */
int dx__lm_live_locker_alive(lm_t *p, uint64_t locker);
/* Sweeps (orch.c, work.c): locks taken by dead handles become due now. The fetch that finds
** the sweep due runs both (one stamp for both, so neither is starved by the other). */
int dx__lm_orch_reap_dead(tx_t *t, lm_t *p, int64_t now);
int dx__lm_work_reap_dead(tx_t *t, lm_t *p, int64_t now);
int dx__lm_reap_dead_locks(tx_t *t, lm_t *p, int64_t now);
int dx__lm_worker_register(dx_provider_t *pp, const char *worker, int64_t now,
                           dx_error_t *err);
void dx__lm_worker_unregister(dx_provider_t *pp, const char *worker);
/* workers.c: the registration record of `worker` (written at registration, removed when it
** ends; a record whose process died stays until the id registers again or a registration
** sweeps it) and the listing. */
int dx__lm_workers_put(lm_t *p, const char *worker, int64_t now, dx_error_t *err);
void dx__lm_workers_del(lm_t *p, const char *worker);
int dx__lm_list_workers(dx_provider_t *pp, int64_t now, dx_worker_cb cb, void *ud,
                        dx_error_t *err);
/* work.c: the locked session rows of `worker`'s sessions are due now (at registration). */
int dx__lm_reap_own(lm_t *p, const char *worker, int64_t now, dx_error_t *err);

/* manage.c */
int dx__lm_nothing_due(lm_t *p, int64_t now, int orch, int work, int sess, dx_error_t *err);
int dx__lm_read_history(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                        dx_event_t **events, size_t *n, uint64_t *exec_out, dx_error_t *err);
int dx__lm_append(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                  const dx_event_t *events, size_t n, dx_error_t *err);
int dx__lm_get_info(dx_provider_t *pp, const char *instance, dx_instance_info_t *out,
                    dx_error_t *err);
int dx__lm_start_unique(tx_t *t, const dx_work_item_t *w);
void dx__lm_strs_free(str_list_t *l);
int dx__lm_strs_push(str_list_t *l, const char *s);
int dx__lm_list(dx_provider_t *pp, dx_instance_cb cb, void *ud, dx_error_t *err);
int dx__lm_depths(dx_provider_t *pp, dx_queue_depths_t *out, dx_error_t *err);
int dx__lm_next_due(dx_provider_t *pp, int64_t now, int64_t *out, dx_error_t *err);

/* listidx.c: the list page indexes. Status and name entries of a recorded instance (created
** at `at`, sequence `seq`): old -> new (0 / NULL: none); start entries of a queued START. */
int dx__lm_lidx_status(tx_t *t, const char *inst, int64_t at, uint64_t seq, int old_st,
                       int new_st);
int dx__lm_lidx_name(tx_t *t, const char *inst, int64_t at, uint64_t seq, const char *old_name,
                     const char *new_name);
int dx__lm_lidx_start(tx_t *t, uint64_t seq, const char *inst, const char *name, int put);
/* Drop the start entries of the START messages in `l` (st not NULL: those in its lock). */
int dx__lm_lidx_forget_starts(tx_t *t, const msg_list_t *l, const orch_state_t *st);
/* At open: build the indexes of a store written before them (once; meta "list_idx"). */
int dx__lm_lidx_build(tx_t *t);
/* manage.c: every queued-never-run start (a scan of the orchestrator queue state). */
int dx__lm_queued_scan(tx_t *t, dx__list_cand_t **out, size_t *n);

/* manage.c: management reads */
int dx__lm_instance_info(tx_t *t, const char *inst, dx_instance_info_t *out);
int dx__lm_list_page(dx_provider_t *pp, int64_t now, const dx_list_query_t *q,
                     dx_instance_info_t **rows, size_t *n, char **next, dx_error_t *err);
int dx__lm_list_executions(dx_provider_t *pp, const char *instance, dx_execution_info_t **out,
                           size_t *n, dx_error_t *err);
int dx__lm_instance_queue(dx_provider_t *pp, const char *instance, dx_queued_cb cb, void *ud,
                          dx_error_t *err);

/* admin.c: management writes */
int dx__lm_delete_instances(dx_provider_t *pp, const char *const *ids, size_t n, int force,
                            uint64_t *deleted, dx_error_t *err);
int dx__lm_prune_executions(dx_provider_t *pp, const char *instance, uint64_t keep,
                            uint64_t *pruned, dx_error_t *err);
int dx__lm_terminate(dx_provider_t *pp, int64_t now, const char *instance,
                     const dx_failure_t *why, int notify_parent, dx_error_t *err);
/* kv.c */
/* The committed state of `inst` (fetch), ascending key; *out owned by the caller. */
int dx__lm_kv_snapshot(tx_t *t, const char *inst, dx_kv_entry_t **out, size_t *n);
/* Apply an ack's key-value events; fold the changes into the committed state when `status`
** ends the execution. */
int dx__lm_kv_ack(tx_t *t, const char *inst, const dx_event_t *delta, size_t n, int status);
/* Delete every key-value record of `inst` (both tables). */
int dx__lm_kv_delete(tx_t *t, const char *inst);
int dx__lm_get_kv(dx_provider_t *pp, const char *instance, const char *key, char **value,
                  int64_t *updated_ms, dx_error_t *err);
int dx__lm_list_kv(dx_provider_t *pp, const char *instance, dx_kv_cb cb, void *ud,
                   dx_error_t *err);

/* testhooks.c */
extern const dx_provider_test_hooks_t dx__lm_test_hooks;

/* check.c */
int dx__lm_check(dx_provider_t *pp, dx_check_cb cb, void *ud, uint64_t *records,
                 uint64_t *problems, dx_error_t *err);

#endif
