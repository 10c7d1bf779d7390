/*
** test_provider_lmdb.c -- the provider validation suite on LMDB, plus LMDB-only behaviour:
** shared envs, reopening, map full, open errors.
*/
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <lmdb.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

#define T0 INT64_C(1700000000000)
#define M(p) ((p)->methods)

/* {===== validation hooks =====} */

char *dx_pv_new_store(void) {
  static int n;
  char buf[512];
  char *s;
  snprintf(buf, sizeof buf, "%s/store-%d", dx_test_tmpdir(), ++n);
  s = strdup(buf);
  ASSERT(s);
  return s;
}

static dx_provider_t *open_with(const char *store, const dx_provider_opts_t *opts) {
  dx_provider_t *p = NULL;
  dx_error_t err;
  int rc = dx_provider_open(store, opts, &p, &err);
  if (rc) DX_FAIL_AT("dx_provider_open(%s): %s: %s", store, dx_err_name(rc), err.msg);
  return p;
}

dx_provider_t *dx_pv_open(const char *store) { return open_with(store, NULL); }

int dx_pv_corrupt_history(dx_provider_t *p, const char *instance, uint64_t execution_id,
                          uint64_t event_id) {
  return M(p)->test_hooks->corrupt_history(p, instance, execution_id, event_id);
}

int dx_pv_multi_process(void) { return 1; }

static int has_bytes(const MDB_val *v, const char *text) {
  return memmem(v->mv_data, v->mv_size, text, strlen(text)) != NULL;
}

/* Every named DB of the environment, read with LMDB itself (not the provider's code). */
uint64_t dx_pv_rows_naming(const char *store, const char *text) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi main_db;
  MDB_cursor *names;
  MDB_val k, v;
  uint64_t hits = 0;
  ASSERT_OK(mdb_env_create(&env));
  ASSERT_OK(mdb_env_set_maxdbs(env, 64));
  ASSERT_OK(mdb_env_open(env, store, MDB_RDONLY, 0600));
  ASSERT_OK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
  ASSERT_OK(mdb_dbi_open(txn, NULL, 0, &main_db));
  ASSERT_OK(mdb_cursor_open(txn, main_db, &names));
  while (mdb_cursor_get(names, &k, &v, MDB_NEXT) == 0) {
    char name[128];
    MDB_dbi db;
    MDB_cursor *c;
    MDB_val rk, rv;
    snprintf(name, sizeof name, "%.*s", (int)k.mv_size, (const char *)k.mv_data);
    if (mdb_dbi_open(txn, name, 0, &db) != 0) continue; /* a plain key of the main DB */
    ASSERT_OK(mdb_cursor_open(txn, db, &c));
    while (mdb_cursor_get(c, &rk, &rv, MDB_NEXT) == 0)
      if (has_bytes(&rk, text) || has_bytes(&rv, text)) {
        fprintf(stderr, "# %s names '%s'\n", name, text);
        hits++;
      }
    mdb_cursor_close(c);
  }
  mdb_cursor_close(names);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return hits;
}

/* {===== LMDB-only tests =====} */

static dx_work_item_t start_item(const char *inst, const char *data) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_START;
  w.instance = (char *)inst;
  w.name = "Orch";
  w.execution_id = 1;
  w.data = (char *)data;
  return w;
}

/* An activity to run (instance inst, execution 1, activity id, name "Act", input data). */
static dx_work_item_t act_item(const char *inst, uint64_t id, const char *data) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_ACT_EXECUTE;
  w.instance = (char *)inst;
  w.execution_id = 1;
  w.id = id;
  w.name = "Act";
  w.data = (char *)data;
  return w;
}

static uint64_t orch_depth(dx_provider_t *p) {
  dx_queue_depths_t d;
  dx_error_t err;
  ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
  return d.orchestrator;
}

/* meta "seq" as stored (read with LMDB itself): the last sequence number handed out. */
static uint64_t stored_seq(const char *store) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi db;
  MDB_val k = {3, "seq"}, v;
  uint64_t s = 0;
  size_t i;
  ASSERT_OK(mdb_env_create(&env));
  ASSERT_OK(mdb_env_set_maxdbs(env, 64));
  ASSERT_OK(mdb_env_open(env, store, MDB_RDONLY, 0600));
  ASSERT_OK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
  ASSERT_OK(mdb_dbi_open(txn, "meta", 0, &db));
  ASSERT_OK(mdb_get(txn, db, &k, &v));
  ASSERT(v.mv_size == 8 + 4); /* be64 and its checksum */
  for (i = 0; i < 8; i++) s = (s << 8) | ((const unsigned char *)v.mv_data)[i];
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return s;
}

/* Inside a batch the sequence counter is kept in memory and stored once, at commit: a
** committed batch leaves it at the last number it used, a rolled-back one leaves it as it
** was, and numbers are never handed out twice. */
DX_TEST(lmdb_batch_stores_the_sequence_counter_at_commit) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t w = start_item("s1", "1");
  dx_error_t err;
  uint64_t before;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  before = stored_seq(store);
  ASSERT(before >= 1);
  ASSERT_OK(M(p)->begin(p, &err));
  w.kind = DX_WI_EXTERNAL;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_EQ(stored_seq(store), before); /* not yet */
  M(p)->rollback(p);
  ASSERT_EQ(stored_seq(store), before);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(stored_seq(store), before + 3);
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err)); /* outside a batch */
  ASSERT_EQ(stored_seq(store), before + 4);
  ASSERT_EQ(orch_depth(p), 5); /* distinct keys: none overwrote another */
  M(p)->destroy(p);
  free(store);
}

/* A worker lock token names its row; a row re-locked after its lock lapsed never gets the
** token it had, so the lapsed holder's ack is refused (ELOCK) every time. */
DX_TEST(lmdb_relocked_row_never_reuses_its_previous_token) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t act;
  dx_work_fetch_t f;
  dx_error_t err;
  uint64_t prev = 0;
  int i;
  memset(&act, 0, sizeof act);
  act.kind = DX_WI_ACT_EXECUTE;
  act.instance = "r";
  act.execution_id = 1;
  act.id = 1;
  act.name = "Act";
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0, &act, &err));
  for (i = 0; i < 300; i++) {
    memset(&f, 0, sizeof f);
    ASSERT_OK(M(p)->fetch_work_item(p, T0 + 10 * i, 5, NULL, &f, &err)); /* lapses in 5 ms */
    ASSERT(f.item.kind == DX_WI_ACT_EXECUTE);
    ASSERT(f.lock_token != prev);
    if (prev) ASSERT_EQ(M(p)->ack_work_item(p, T0 + 10 * i, prev, NULL, &err), DX_ELOCK);
    prev = f.lock_token;
    dx_work_item_clear(&f.item);
  }
  ASSERT_OK(M(p)->ack_work_item(p, T0 + 10 * i - 8, prev, NULL, &err));
  M(p)->destroy(p);
}

DX_TEST(lmdb_handles_share_one_env) {
  char *store = dx_pv_new_store();
  dx_provider_t *a = dx_pv_open(store), *b = dx_pv_open(store), *c;
  dx_work_item_t w = start_item("A", "1");
  dx_error_t err;
  ASSERT_OK(M(a)->enqueue_for_orchestrator(a, T0, &w, 0, &err));
  ASSERT_EQ(orch_depth(b), 1);
  M(a)->destroy(a); /* b keeps the env open */
  w.kind = DX_WI_EXTERNAL; /* a second START of "A" would be refused (DX_EEXIST) */
  ASSERT_OK(M(b)->enqueue_for_orchestrator(b, T0, &w, 0, &err));
  c = dx_pv_open(store);
  ASSERT_EQ(orch_depth(c), 2);
  M(b)->destroy(b);
  M(c)->destroy(c);
  free(store);
}

/* The notify file's size: 1 once a commit woke the other processes (truncated to 0 here). */
static off_t notify_size(dx_provider_t *p, int reset) {
  struct stat st;
  const char *path = M(p)->notify_path(p);
  ASSERT(path);
  if (reset) ASSERT_OK(truncate(path, 0));
  ASSERT_OK(stat(path, &st));
  return st.st_size;
}

/* A batch committed without a flush (an activity's result) still wakes workers in other
** processes when it queued work; one that only took locks does not. */
DX_TEST(lmdb_unflushed_batch_that_queued_work_notifies) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t w = start_item("A", "1");
  dx_orch_item_t *it = NULL;
  dx_error_t err;
  notify_size(p, 1);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->commit(p, 0, &err));
  ASSERT_EQ(notify_size(p, 0), 1);
  notify_size(p, 1);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  ASSERT(it);
  ASSERT_OK(M(p)->commit(p, 0, &err));
  ASSERT_EQ(notify_size(p, 0), 0);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

/* LMDB's data flushes, counted: this definition takes the place of libc's for liblmdb. */
static int fdatasyncs;
int fdatasync(int fd) {
  __atomic_add_fetch(&fdatasyncs, 1, __ATOMIC_SEQ_CST);
  return (int)syscall(SYS_fdatasync, fd);
}

/* Flushes made by committing the open batch with `sync`. */
static int commit_flushes(dx_provider_t *p, int sync) {
  int before = __atomic_load_n(&fdatasyncs, __ATOMIC_SEQ_CST);
  dx_error_t err;
  ASSERT_OK(M(p)->commit(p, sync, &err));
  return __atomic_load_n(&fdatasyncs, __ATOMIC_SEQ_CST) - before;
}

/* commit(sync=0) of a batch that recorded an activity's result still flushes its data (an
** unflushed LMDB commit may damage the store on a power cut); one that only took locks does
** not flush. */
DX_TEST(lmdb_unsynced_result_batch_is_flushed_lock_only_batch_is_not) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t w = act_item("A", 2, "null"), done;
  dx_work_fetch_t f;
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0, &w, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0, 60000, NULL, &f, &err));
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  ASSERT_EQ(commit_flushes(p, 0), 0); /* locks only */
  memset(&done, 0, sizeof done);
  done.kind = DX_WI_ACT_COMPLETED;
  done.instance = "A";
  done.execution_id = 1;
  done.id = 2;
  done.data = "1";
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->ack_work_item(p, T0 + 1, f.lock_token, &done, &err));
  ASSERT(commit_flushes(p, 0) >= 1);
  ASSERT_EQ(orch_depth(p), 1); /* the result is there */
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_reopen_keeps_data) {
  char *store = dx_pv_new_store();
  dx_provider_opts_t opts = {1, 1, 0, 0}; /* no_sync: a clean close still persists everything */
  dx_provider_t *p = open_with(store, &opts);
  dx_work_item_t w = start_item("A", "1");
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  M(p)->destroy(p);
  p = dx_pv_open(store);
  ASSERT_EQ(orch_depth(p), 1);
  M(p)->destroy(p);
  free(store);
}

/* Fill the store with 200 KiB events until it refuses one: returns how many were accepted. */
static int fill(dx_provider_t *p, dx_error_t *err, int *rc) {
  size_t len = 200 * 1024;
  char *data = malloc(len + 3);
  dx_work_item_t w = start_item("A", NULL);
  int i;
  data[0] = '"';
  memset(data + 1, 'x', len);
  strcpy(data + 1 + len, "\"");
  w.data = data;
  w.kind = DX_WI_EXTERNAL; /* events: repeated STARTs of "A" would be refused (DX_EEXIST) */
  for (i = 0, *rc = 0; i < 200 && *rc == 0; i++)
    *rc = M(p)->enqueue_for_orchestrator(p, T0, &w, 0, err);
  free(data);
  return i - 1;
}

/* In a begin_atomic batch, STARTs of new ids (each writes its start entries) until a call
** fails: its error; then commit (commit 1) or roll back. */
static int fill_starts(dx_provider_t *p, int commit, dx_error_t *err) {
  char id[DX_MAX_INSTANCE_ID_BYTES + 1] = ""; /* (the item points at it; filled per call) */
  dx_work_item_t w = start_item(id, "1");
  int i, rc = 0;
  ASSERT_OK(M(p)->begin_atomic(p, err));
  for (i = 0; i < 20000 && rc == 0; i++) {
    snprintf(id, sizeof id, "%0390d", i);
    rc = M(p)->enqueue_for_orchestrator(p, T0, &w, 0, err);
  }
  if (commit) return rc;
  M(p)->rollback(p);
  return rc;
}

DX_TEST(lmdb_map_grows_up_to_max_size) {
  /* issue 7 item 14: the map starts at 1 MiB and grows; the limit is the store's maximum */
  char *store = dx_pv_new_store();
  dx_provider_opts_t opts = {1, 1, 1 << 20, 4 << 20};
  dx_provider_t *p = open_with(store, &opts), *q;
  dx_error_t err;
  int n, more, rc;
  n = fill(p, &err, &rc);
  ASSERT_EQ(rc, DX_EFULL);
  ASSERT(n * 200 > 2 * 1024); /* well past the first map of 1 MiB */
  ASSERT_CONTAINS(err.msg, store);
  ASSERT_CONTAINS(err.msg, "maximum size of 4194304 bytes");
  ASSERT_EQ(orch_depth(p), (uint64_t)n); /* the refused write left nothing behind */
  ASSERT_OK(M(p)->begin(p, &err)); /* inside a batch the failure is contained too */
  ASSERT_EQ(fill(p, &err, &rc), 0);
  ASSERT_EQ(rc, DX_EFULL);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  /* an all-or-nothing batch writes in the batch txn: a call failing part way spoils it (the
  ** commit refuses), and its rollback leaves nothing */
  ASSERT_EQ(fill_starts(p, 1, &err), DX_EFULL);
  ASSERT_EQ(M(p)->commit(p, 1, &err), DX_EFULL);
  ASSERT_EQ(fill_starts(p, 0, &err), DX_EFULL);
  ASSERT_EQ(orch_depth(p), (uint64_t)n);
  M(p)->destroy(p);
  /* a larger maximum lifts the wedge; a later open without one keeps the stored limit */
  opts.max_size = 8 << 20;
  p = open_with(store, &opts);
  more = fill(p, &err, &rc);
  ASSERT(more > 0);
  ASSERT_CONTAINS(err.msg, "maximum size of 8388608 bytes");
  M(p)->destroy(p);
  p = dx_pv_open(store);
  ASSERT_EQ(fill(p, &err, &rc), 0);
  ASSERT_EQ(rc, DX_EFULL);
  ASSERT_CONTAINS(err.msg, "maximum size of 8388608 bytes");
  ASSERT_EQ(orch_depth(p), (uint64_t)(n + more));
  /* a second handle in this process with a larger limit raises it for the first one too */
  opts.max_size = 12 << 20;
  q = open_with(store, &opts);
  ASSERT(fill(p, &err, &rc) > 0);
  ASSERT_CONTAINS(err.msg, "maximum size of 12582912 bytes");
  M(q)->destroy(q);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_map_grows_without_limit) {
  /* no maximum: a store opened with a 1 MiB map takes far more than 1 MiB */
  char *store = dx_pv_new_store();
  dx_provider_opts_t opts = {1, 1, 1 << 20, 0};
  dx_provider_t *p = open_with(store, &opts);
  size_t len = 200 * 1024;
  char *data = malloc(len + 3);
  dx_work_item_t w = start_item("A", NULL);
  dx_error_t err;
  int i;
  data[0] = '"';
  memset(data + 1, 'x', len);
  strcpy(data + 1 + len, "\"");
  w.data = data;
  w.kind = DX_WI_EXTERNAL; /* events: repeated STARTs of "A" would be refused (DX_EEXIST) */
  for (i = 0; i < 40; i++) ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_EQ(orch_depth(p), 40);
  free(data);
  M(p)->destroy(p);
  free(store);
}

/* ev: a first turn's OrchestrationStarted (name Orch, input `data`) at T0. */
static void started_ev(dx_event_t *ev, char *data) {
  memset(ev, 0, sizeof *ev);
  ev->event_id = 1;
  ev->timestamp_ms = T0;
  ev->kind = DX_EV_ORCH_STARTED;
  ev->name = "Orch";
  ev->data = data;
}

/* Ack the turn of `it` (its lock) appending delta ev[0..n) with status `status`: the answer. */
static int ack_delta_rc(dx_provider_t *p, int64_t now, const dx_orch_item_t *it, dx_event_t *ev,
                        size_t n, dx_status_t status) {
  dx_orch_ack_t a;
  dx_error_t err;
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = it->orchestration_name;
  a.status = status;
  a.delta = ev;
  a.delta_len = n;
  return M(p)->ack_orchestration_item(p, now, &a, &err);
}

/* How many entries the named DB `name` holds (read with LMDB itself). */
static size_t db_entries(const char *store, const char *name) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi db;
  MDB_stat st;
  ASSERT_OK(mdb_env_create(&env));
  ASSERT_OK(mdb_env_set_maxdbs(env, 64));
  ASSERT_OK(mdb_env_open(env, store, MDB_RDONLY, 0600));
  ASSERT_OK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
  ASSERT_OK(mdb_dbi_open(txn, name, 0, &db));
  ASSERT_OK(mdb_stat(txn, db, &st));
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return st.ms_entries;
}

/* A fetch that locks a stored ready instance keeps the lock in memory and leaves the state
** record for the batch to write the lock over (orch.c state_set). A turn acked in the same
** batch that leaves nothing queued ends without a state record; one handed back by a method
** that is not the batch's own (abandon) finds the lock written first and leaves the instance
** ready; a rolled back batch leaves it as it was. */
DX_TEST(lmdb_locked_in_batch_state_record_written_once) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = start_item("K", "1");
  dx_orch_item_t *it = NULL;
  dx_event_t ev;
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  w = start_item("L", "1");
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_EQ(db_entries(store, "orch_state"), 2);
  ASSERT_OK(M(p)->begin(p, &err)); /* rolled back: as it was */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 60000, &it, &err));
  ASSERT(it);
  dx_orch_item_free(it);
  M(p)->rollback(p);
  ASSERT_EQ(db_entries(store, "orch_state"), 2);
  ASSERT_EQ(db_entries(store, "orch_ready"), 2);
  ASSERT_OK(M(p)->begin(p, &err)); /* K: fetched and acked, nothing left */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 60000, &it, &err));
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "K");
  started_ev(&ev, "{}");
  ASSERT_OK(ack_delta_rc(p, T0, it, &ev, 1, DX_STATUS_NONE));
  dx_orch_item_free(it);
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 60000, &it, &err)); /* L: handed back */
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "L");
  ASSERT_OK(M(p)->abandon_orchestration_item(p, T0, "L", it->lock_token, 0, 0, &err));
  dx_orch_item_free(it);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(db_entries(store, "orch_state"), 1);
  ASSERT_EQ(db_entries(store, "orch_ready"), 1);
  ASSERT_EQ(db_entries(store, "orch_lock"), 0);
  ASSERT_OK(M(p)->begin(p, &err)); /* L again, locked at commit */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 1, 60000, &it, &err));
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "L");
  ASSERT_EQ(it->attempt_count, 2); /* the abandoned one counted */
  dx_orch_item_free(it);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(db_entries(store, "orch_state"), 1);
  ASSERT_EQ(db_entries(store, "orch_ready"), 0);
  ASSERT_EQ(db_entries(store, "orch_lock"), 1);
  M(p)->destroy(p);
  free(store);
}

/* The ack deletes its turn's messages in the walk that reads them (a cursor delete each). A
** turn of hundreds of messages spans many B-tree pages: every one of them goes, a message
** queued after the fetch stays (the instance is ready with it), and the next instance's
** messages, which follow them in the DB, are untouched. */
DX_TEST(lmdb_ack_deletes_a_turn_of_many_messages) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = start_item("K", "1"), m;
  dx_orch_item_t *it = NULL;
  dx_event_t ev;
  dx_error_t err;
  char data[256];
  int i, round, seen_k = 0, seen_l = 0;
  memset(data, 'x', sizeof data - 3);
  data[0] = '"';
  strcpy(data + sizeof data - 3, "\"");
  memset(&m, 0, sizeof m);
  m.kind = DX_WI_EXTERNAL;
  m.name = "go";
  m.data = data;
  m.execution_id = 1;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  w = start_item("L", "1");
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  for (i = 0; i < 400; i++) {
    m.instance = i % 8 == 7 ? "L" : "K";
    ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &m, 0, &err));
  }
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 60000, &it, &err));
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "K");
  ASSERT_EQ(it->messages_len, 351);
  m.instance = "K";
  m.data = "\"late\"";
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &m, 0, &err)); /* not in the lock */
  started_ev(&ev, "{}");
  ASSERT_OK(ack_delta_rc(p, T0, it, &ev, 1, DX_STATUS_NONE));
  dx_orch_item_free(it);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(orch_depth(p), 1 + 51);
  ASSERT_OK(M(p)->begin(p, &err));
  for (round = 0; round < 2; round++) { /* both, in one batch */
    ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 1, 60000, &it, &err));
    ASSERT(it);
    if (strcmp(it->instance, "K") == 0) {
      seen_k++;
      ASSERT_EQ(it->messages_len, 1);
      ASSERT_STR_EQ(it->messages[0].data, "\"late\"");
    } else {
      seen_l++;
      ASSERT_STR_EQ(it->instance, "L");
      ASSERT_EQ(it->messages_len, 51);
    }
    dx_orch_item_free(it);
  }
  M(p)->rollback(p);
  ASSERT_EQ(seen_k, 1);
  ASSERT_EQ(seen_l, 1);
  M(p)->destroy(p);
  free(store);
}

/* The batches keep the instance records they read and wrote (records.c) past their commits
** while no other writer commits in between. Another process that deletes the instance and
** starts it again under another name between two batches of this handle must be seen: the
** next batch's fetch names the new orchestration (a kept record would name the old one and
** its execution). */
DX_TEST(lmdb_instance_record_kept_by_batches_yields_to_another_process) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = start_item("K", "1");
  dx_orch_item_t *it = NULL;
  dx_event_t ev;
  dx_error_t err;
  pid_t pid;
  int st, round;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  for (round = 0; round < 2; round++) { /* 2: a batch after one that kept the record */
    ASSERT_OK(M(p)->begin(p, &err));
    ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + round, 1000, &it, &err));
    ASSERT(it);
    ASSERT_STR_EQ(it->orchestration_name, "Orch");
    memset(&ev, 0, sizeof ev);
    ev.event_id = it->history_len + 1;
    ev.timestamp_ms = T0;
    ev.kind = round == 0 ? DX_EV_ORCH_STARTED : DX_EV_EXT_EVENT;
    ev.name = round == 0 ? "Orch" : "go";
    ev.data = "{}";
    ASSERT_OK(ack_delta_rc(p, T0 + round, it, &ev, 1, DX_STATUS_NONE));
    dx_orch_item_free(it);
    if (round == 0) { /* a message for the next batch's fetch */
      dx_work_item_t m;
      memset(&m, 0, sizeof m);
      m.kind = DX_WI_EXTERNAL;
      m.instance = "K";
      m.name = "go";
      m.data = "{}";
      m.execution_id = 1;
      ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &m, 0, &err));
    }
    ASSERT_OK(M(p)->commit(p, 1, &err));
  }
  fflush(NULL);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dx_provider_t *c = open_with(store, NULL);
    const char *ids[1] = {"K"};
    size_t n = 0;
    dx_work_item_t again = start_item("K", "2");
    int rc = M(c)->delete_instances(c, ids, 1, 1, &n, &err);
    again.name = "Other";
    if (!rc) rc = M(c)->enqueue_for_orchestrator(c, T0, &again, 0, &err);
    M(c)->destroy(c);
    _exit(rc == 0 && n == 1 ? 0 : 1);
  }
  ASSERT(waitpid(pid, &st, 0) == pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 5, 1000, &it, &err));
  ASSERT(it);
  ASSERT_STR_EQ(it->orchestration_name, "Other");
  ASSERT_EQ(it->history_len, 0);
  dx_orch_item_free(it);
  M(p)->rollback(p);
  M(p)->destroy(p);
  free(store);
}

/* Run fn(store) in a child process (its own handle); it must exit 0. */
static void in_child(const char *store, int (*fn)(dx_provider_t *c)) {
  pid_t pid;
  int st;
  fflush(NULL);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dx_provider_t *c = open_with(store, NULL);
    int rc = fn(c);
    M(c)->destroy(c);
    _exit(rc);
  }
  ASSERT(waitpid(pid, &st, 0) == pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* The child takes over instance K's lapsed lock (1 s after T0). */
static int take_over_orch(dx_provider_t *c) {
  dx_orch_item_t *it = NULL;
  dx_error_t err;
  int rc = M(c)->fetch_orchestration_item(c, T0 + 5000, 1000, &it, &err);
  int ok = rc == 0 && it && strcmp(it->instance, "K") == 0 && it->attempt_count == 2;
  dx_orch_item_free(it);
  return ok ? 0 : 1;
}

/* The batches keep the lock states their fetches and acks wrote (records.c) past their
** commits while no other writer commits in between. Another process that takes a lapsed lock
** over between two batches must be seen: the next batch's ack with the old token is refused
** (a kept state would still name it and the ack would go through). */
DX_TEST(lmdb_lock_state_kept_by_batches_yields_to_another_process) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = start_item("K", "1");
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t a;
  dx_event_t ev;
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  ASSERT(it);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  in_child(store, take_over_orch);
  memset(&a, 0, sizeof a);
  started_ev(&ev, "1");
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = it->orchestration_name;
  a.delta = &ev;
  a.delta_len = 1;
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_EQ(M(p)->ack_orchestration_item(p, T0 + 1, &a, &err), DX_ETOKEN);
  M(p)->rollback(p);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

/* The child takes over the lapsed lock of the only worker row. */
static int take_over_row(dx_provider_t *c) {
  dx_work_fetch_t f;
  dx_error_t err;
  int rc = M(c)->fetch_work_item(c, T0 + 5000, 1000, NULL, &f, &err);
  int ok = rc == 0 && f.item.kind == DX_WI_ACT_EXECUTE && f.attempt_count == 2;
  if (rc == 0) dx_work_item_clear(&f.item);
  return ok ? 0 : 1;
}

/* Likewise the worker rows the batches' fetches locked (records.c): another process that
** takes a lapsed row over between two batches must be seen: the next batch's ack with the old
** token is refused and leaves the row to its new holder (a kept row would be deleted). */
DX_TEST(lmdb_locked_row_kept_by_batches_yields_to_another_process) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = act_item("K", 2, "1");
  dx_work_fetch_t f;
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0, &w, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0, 1000, NULL, &f, &err));
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  in_child(store, take_over_row);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_EQ(M(p)->ack_work_item(p, T0 + 1, f.lock_token, NULL, &err), DX_ELOCK);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  { /* the row is still there, locked by the child */
    dx_queue_depths_t d;
    ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
    ASSERT_EQ(d.worker, 1);
  }
  dx_work_item_clear(&f.item);
  M(p)->destroy(p);
  free(store);
}

/* The child runs the only worker row and hands it back (abandon: due now, attempt 1 spent). */
static int run_and_abandon_row(dx_provider_t *c) {
  dx_work_fetch_t f;
  dx_error_t err;
  int rc = M(c)->fetch_work_item(c, T0 + 1, 1000, NULL, &f, &err);
  int ok = rc == 0 && f.item.kind == DX_WI_ACT_EXECUTE && f.attempt_count == 1 &&
           M(c)->abandon_work_item(c, T0 + 1, f.lock_token, 0, 0, &err) == 0;
  if (rc == 0) dx_work_item_clear(&f.item);
  return ok ? 0 : 1;
}

/* A batch's commit writes the worker rows its acks queued and the batches keep them for the
** fetch that locks them (records.c). Another process that runs one and hands it back between
** two batches must be seen: the next batch's fetch counts its second attempt (a kept row
** would say the first). */
DX_TEST(lmdb_queued_row_kept_by_batches_yields_to_another_process) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = start_item("K", "1"), act;
  dx_orch_item_t *it = NULL;
  dx_work_fetch_t f;
  dx_orch_ack_t a;
  dx_event_t ev;
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  ASSERT(it);
  memset(&a, 0, sizeof a);
  memset(&ev, 0, sizeof ev);
  memset(&act, 0, sizeof act);
  started_ev(&ev, "1");
  act.kind = DX_WI_ACT_EXECUTE;
  act.instance = "K";
  act.execution_id = 1;
  act.id = 2;
  act.name = "Act";
  act.data = "1";
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = it->orchestration_name;
  a.status = DX_STATUS_RUNNING;
  a.delta = &ev;
  a.delta_len = 1;
  a.worker_items = &act;
  a.worker_items_len = 1;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0, &a, &err)); /* queues the row in the batch */
  dx_orch_item_free(it);
  ASSERT_OK(M(p)->commit(p, 1, &err)); /* writes it (and keeps it) */
  in_child(store, run_and_abandon_row);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 2, 1000, NULL, &f, &err));
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  ASSERT_EQ(f.attempt_count, 2);
  ASSERT_OK(M(p)->ack_work_item(p, T0 + 2, f.lock_token, NULL, &err));
  ASSERT_OK(M(p)->commit(p, 1, &err));
  dx_work_item_clear(&f.item);
  M(p)->destroy(p);
  free(store);
}

static void act_row(dx_provider_t *p, const char *inst, uint64_t id) {
  dx_work_item_t w = act_item(inst, id, "1");
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0, &w, &err));
}

static uint64_t work_depth(dx_provider_t *p) {
  dx_queue_depths_t d;
  dx_error_t err;
  ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
  return d.worker;
}

/* Inside one batch a locked row kept for its ack follows every later write of the row: a
** renewal (direct), an abandon and a re-fetch (a nested writer), a cancel by an orchestration
** ack (direct, lock stealing). The ack of a lock that no longer holds is refused. */
DX_TEST(lmdb_locked_row_kept_in_a_batch_follows_its_writes) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_fetch_t f1, f2;
  dx_work_item_t w = start_item("K", "1");
  dx_orch_item_t *it = NULL;
  dx_activity_ref_t ref = {"K", 1, 7};
  dx_orch_ack_t a;
  dx_error_t err;
  /* renewed, then acked */
  act_row(p, "R", 1);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0, 1000, NULL, &f1, &err));
  ASSERT_OK(M(p)->renew_work_item_lock(p, T0 + 1, f1.lock_token, 5000, &err));
  ASSERT_OK(M(p)->ack_work_item(p, T0 + 2000, f1.lock_token, NULL, &err)); /* renewed: live */
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(work_depth(p), 0);
  dx_work_item_clear(&f1.item);
  /* abandoned and fetched again: the first token is refused, the second acks */
  act_row(p, "A", 1);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0, 1000, NULL, &f1, &err));
  ASSERT_OK(M(p)->abandon_work_item(p, T0, f1.lock_token, 0, 0, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0, 1000, NULL, &f2, &err));
  ASSERT_EQ(f2.attempt_count, 2);
  ASSERT_EQ(M(p)->ack_work_item(p, T0, f1.lock_token, NULL, &err), DX_ELOCK);
  ASSERT_OK(M(p)->ack_work_item(p, T0, f2.lock_token, NULL, &err));
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(work_depth(p), 0);
  dx_work_item_clear(&f1.item);
  dx_work_item_clear(&f2.item);
  /* cancelled by the orchestration's ack while locked: its ack is refused */
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  act_row(p, "K", 7);
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  ASSERT(it);
  ASSERT_OK(M(p)->fetch_work_item(p, T0, 1000, NULL, &f1, &err));
  ASSERT_STR_EQ(f1.item.instance, "K");
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = it->orchestration_name;
  a.cancelled = &ref;
  a.cancelled_len = 1;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0, &a, &err));
  ASSERT_EQ(M(p)->ack_work_item(p, T0, f1.lock_token, NULL, &err), DX_ELOCK);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(work_depth(p), 0);
  dx_work_item_clear(&f1.item);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

/* A batch's fetches and acks write through its kept cursors and look for the queue's head
** where the last fetch left the cursor (txn.c key_cursor, head_here): a row queued in the
** batch before that place (due earlier) is still the next one fetched, and hundreds of rows
** queued, fetched and acked in one batch (leaves split and merged under the cursors) come out
** in FIFO order, each once. */
DX_TEST(lmdb_batch_fetch_keeps_fifo_through_its_kept_cursors) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_fetch_t f;
  dx_work_item_t w;
  dx_error_t err;
  uint64_t i, n = 300;
  w = act_item("F", 1, "1");
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0 + 10, &w, &err));
  w = act_item("F", 2, "1");
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0 + 20, &w, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 100, 60000, NULL, &f, &err));
  ASSERT_EQ(f.item.id, 1);
  ASSERT_OK(M(p)->ack_work_item(p, T0 + 100, f.lock_token, NULL, &err));
  dx_work_item_clear(&f.item);
  w = act_item("E", 3, "1"); /* due before row 2, where the fetch left the cursor */
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0 + 5, &w, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 100, 60000, NULL, &f, &err));
  ASSERT_EQ(f.item.id, 3);
  ASSERT_OK(M(p)->ack_work_item(p, T0 + 100, f.lock_token, NULL, &err));
  dx_work_item_clear(&f.item);
  for (i = 0; i < n; i++) {
    w = act_item(i % 2 ? "G" : "H", 100 + i, "\"a payload that fills the leaves sooner\"");
    ASSERT_OK(M(p)->enqueue_for_worker(p, T0 + 30 + (int64_t)i, &w, &err));
  }
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 1000, 60000, NULL, &f, &err));
  ASSERT_EQ(f.item.id, 2);
  ASSERT_OK(M(p)->ack_work_item(p, T0 + 1000, f.lock_token, NULL, &err));
  dx_work_item_clear(&f.item);
  for (i = 0; i < n; i++) {
    ASSERT_OK(M(p)->fetch_work_item(p, T0 + 1000, 60000, NULL, &f, &err));
    ASSERT_EQ(f.item.id, 100 + i);
    if (i % 3) ASSERT_OK(M(p)->ack_work_item(p, T0 + 1000, f.lock_token, NULL, &err));
    dx_work_item_clear(&f.item);
  }
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 1000, 60000, NULL, &f, &err));
  ASSERT_EQ(f.item.kind, 0); /* the rest are locked */
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(work_depth(p), n / 3);
  M(p)->destroy(p);
  free(store);
}

static uint64_t held_n; /* the fake cache of instance K holds execution 1's first held_n */

static int held_k(void *ud, const char *instance, uint64_t *exec, uint64_t *n) {
  (void)ud;
  if (strcmp(instance, "K") != 0) return 0;
  *exec = 1;
  *n = held_n;
  return 1;
}

/* Ack K's turn (lock of `it`) appending event `id` (OrchestrationStarted when 1): the ack's
** answer. */
static int ack_k_rc(dx_provider_t *p, int64_t now, dx_orch_item_t *it, uint64_t id) {
  dx_event_t ev;
  memset(&ev, 0, sizeof ev);
  ev.event_id = id;
  ev.timestamp_ms = now;
  ev.kind = id == 1 ? DX_EV_ORCH_STARTED : DX_EV_ACT_COMPLETED;
  ev.name = id == 1 ? "Orch" : NULL;
  ev.data = id == 1 ? "1" : "\"result\"";
  ev.source_id = id == 1 ? 0 : 2;
  return ack_delta_rc(p, now, it, &ev, 1, id == 1 ? DX_STATUS_RUNNING : DX_STATUS_NONE);
}

static void ack_k(dx_provider_t *p, int64_t now, dx_orch_item_t *it, uint64_t id) {
  ASSERT_OK(ack_k_rc(p, now, it, id));
}

/* The batches keep an execution's last event and hand it to the next cached fetch (moved, not
** copied): a second fetch before the next ack (a lapsed lock taken over in the same batch)
** still gets the event, read from the store. */
DX_TEST(lmdb_kept_last_event_is_handed_out_once_then_read) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_history_hint_t hint = {held_k, NULL, NULL};
  dx_work_item_t w = start_item("K", "1"), done;
  dx_orch_item_t *it = NULL;
  dx_work_fetch_t f;
  dx_error_t err;
  int round;
  ASSERT_OK(M(p)->set_history_hint(p, &hint, &err));
  act_row(p, "K", 2);
  act_row(p, "K", 3);
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  memset(&done, 0, sizeof done);
  done.kind = DX_WI_ACT_COMPLETED;
  done.instance = "K";
  done.execution_id = 1;
  done.data = "\"result\"";
  /* one batch of direct methods only (a nested writer would drop what the batches keep) */
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  ack_k(p, T0, it, 1);
  dx_orch_item_free(it);
  for (round = 0; round < 2; round++) { /* results of activities 2 and 3: each wakes K */
    ASSERT_OK(M(p)->fetch_work_item(p, T0, 1000, NULL, &f, &err));
    done.id = f.item.id;
    ASSERT_OK(M(p)->ack_work_item(p, T0, f.lock_token, &done, &err));
    dx_work_item_clear(&f.item);
    if (round == 0) { /* its turn: the batches now know K ends at event 2 */
      ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 1, 1000, &it, &err));
      ack_k(p, T0 + 1, it, 2);
      dx_orch_item_free(it);
    }
  }
  held_n = 2;
  for (round = 0; round < 2; round++) { /* handed out, then read (the lock lapsed) */
    it = NULL;
    ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 3 + round * 5000, 1000, &it, &err));
    ASSERT(it);
    ASSERT_EQ(it->history_held, 2);
    ASSERT_EQ(it->history_len, 1);
    ASSERT_EQ(it->history[0].event_id, 2);
    ASSERT_EQ(it->history[0].kind, DX_EV_ACT_COMPLETED);
    ASSERT_STR_EQ(it->history[0].data, "\"result\"");
    ASSERT_EQ(it->attempt_count, (uint32_t)(round + 1));
    dx_orch_item_free(it);
  }
  ASSERT_OK(M(p)->commit(p, 1, &err));
  M(p)->destroy(p);
  free(store);
}

/* A lock a batch's fetch takes stays in memory while the batch lasts (orch.c): a renewal
** moves it, a fetch after it lapsed takes it over (the old token is refused), a nested method
** sees it (written first), and the commit stores the lock still held. */
DX_TEST(lmdb_lock_kept_in_a_batch_follows_its_changes) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = start_item("K", "1"), v = start_item("N", "1");
  dx_orch_item_t *it = NULL, *it2 = NULL;
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  ASSERT(it);
  ASSERT_OK(M(p)->renew_orchestration_item_lock(p, T0 + 1, "K", it->lock_token, 5000, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 2000, 1000, &it2, &err));
  ASSERT(it2 == NULL); /* renewed: still held */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 6000, 1000, &it2, &err));
  ASSERT(it2);
  ASSERT_EQ(it2->attempt_count, 2);
  ASSERT_EQ(M(p)->renew_orchestration_item_lock(p, T0 + 6000, "K", it->lock_token, 5000, &err),
            DX_ETOKEN);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  dx_orch_item_free(it);
  it = NULL;
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 6500, 1000, &it, &err));
  ASSERT(it == NULL); /* the lock the commit stored holds until T0 + 7000 */
  ASSERT_OK(M(p)->begin(p, &err));
  ack_k(p, T0 + 6600, it2, 1);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  dx_orch_item_free(it2);
  it2 = NULL;
  /* a nested method in between: the lock is written before it looks, the ack releases it */
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &v, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 7000, 1000, &it, &err));
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "N");
  ASSERT_EQ(orch_depth(p), 1);
  ack_k(p, T0 + 7001, it, 1);
  ASSERT_EQ(orch_depth(p), 0);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  dx_orch_item_free(it);
  it = NULL;
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 100000, 1000, &it, &err));
  ASSERT(it == NULL);
  ASSERT_EQ(orch_depth(p), 0);
  M(p)->destroy(p);
  free(store);
}

/* K's turn for the result of activity `id` (a worker row of K): the row fetched and acked with
** its result, the turn fetched and acked appending event `id` (direct methods only); dup: an
** ack appending event id - 1 again is refused first. */
static void result_turn(dx_provider_t *p, int64_t now, uint64_t id, int dup) {
  dx_work_item_t done;
  dx_work_fetch_t f;
  dx_orch_item_t *it = NULL;
  dx_error_t err;
  memset(&done, 0, sizeof done);
  done.kind = DX_WI_ACT_COMPLETED;
  done.instance = "K";
  done.execution_id = 1;
  done.data = "\"result\"";
  ASSERT_OK(M(p)->fetch_work_item(p, now, 1000, NULL, &f, &err));
  ASSERT_EQ(f.item.id, id);
  done.id = id;
  ASSERT_OK(M(p)->ack_work_item(p, now, f.lock_token, &done, &err));
  dx_work_item_clear(&f.item);
  held_n = id - 1; /* the cache holds the rest: the fetch reads no history */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, now, 1000, &it, &err));
  ASSERT(it);
  ASSERT_EQ(it->history_held, id - 1);
  if (dup) ASSERT_EQ(ack_k_rc(p, now, it, id - 1), DX_EEXIST);
  ack_k(p, now, it, id);
  dx_orch_item_free(it);
}

/* K's history holds events 1..n (OrchestrationStarted, then results), read through a method
** outside the store cycle; and the store checks clean. */
static void assert_k_history(dx_provider_t *p, uint64_t n) {
  dx_event_t *ev = NULL;
  size_t got = 0, i;
  uint64_t records = 0, problems = 0;
  dx_error_t err;
  ASSERT_OK(M(p)->read_history(p, "K", 1, &ev, &got, NULL, &err));
  ASSERT_EQ(got, n);
  for (i = 0; i < got; i++) {
    ASSERT_EQ(ev[i].event_id, i + 1);
    ASSERT_EQ(ev[i].kind, i == 0 ? DX_EV_ORCH_STARTED : DX_EV_ACT_COMPLETED);
  }
  dx_events_free(ev, got);
  ASSERT_OK(M(p)->check(p, NULL, NULL, &records, &problems, &err));
  ASSERT_EQ(problems, 0);
}

/* A batch's turns append to the instance's run kept in memory (history.c), written as one
** record when something else looks and at commit; an ack of an event the run holds is
** refused; a rolled-back batch's events are gone. The fetches read no history (a cache holds
** it), so only the batch's writes store the run. */
DX_TEST(lmdb_history_kept_in_a_batch_is_written_once) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_history_hint_t hint = {held_k, NULL, NULL};
  dx_work_item_t w = start_item("K", "1");
  dx_orch_item_t *it = NULL;
  dx_error_t err;
  uint64_t id;
  ASSERT_OK(M(p)->set_history_hint(p, &hint, &err));
  for (id = 2; id <= 6; id++) act_row(p, "K", id);
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  ack_k(p, T0, it, 1);
  dx_orch_item_free(it);
  result_turn(p, T0 + 1, 2, 0);
  result_turn(p, T0 + 2, 3, 1); /* event 2 is in the kept run */
  assert_k_history(p, 3); /* a nested read: the run is written first */
  result_turn(p, T0 + 3, 4, 1); /* event 3 is stored */
  result_turn(p, T0 + 4, 5, 0);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  assert_k_history(p, 5);
  ASSERT_OK(M(p)->begin(p, &err));
  result_turn(p, T0 + 5, 6, 0);
  M(p)->rollback(p);
  assert_k_history(p, 5);
  M(p)->destroy(p);
  free(store);
}

/* An ack whose delta repeats an event id is refused by the ack itself, as when each ack wrote
** its events at once (the batch's kept history run took both copies and only its write at the
** commit failed). */
DX_TEST(lmdb_ack_repeating_an_event_id_in_a_batch_is_refused) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = open_with(store, NULL);
  dx_work_item_t w = start_item("K", "1");
  dx_orch_item_t *it = NULL;
  dx_event_t ev[2];
  dx_error_t err;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 1000, &it, &err));
  memset(ev, 0, sizeof ev);
  ev[0].event_id = 1;
  ev[0].timestamp_ms = T0;
  ev[0].kind = DX_EV_ORCH_STARTED;
  ev[0].name = "Orch";
  ev[0].data = "1";
  ev[1] = ev[0];
  ASSERT_EQ(ack_delta_rc(p, T0, it, ev, 2, DX_STATUS_RUNNING), DX_EEXIST);
  dx_orch_item_free(it);
  M(p)->rollback(p);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_map_growth_reaches_other_processes) {
  /* a child process grows the map; the parent, still on its first map, adopts the new size
  ** (MDB_MAP_RESIZED) and keeps reading and writing */
  char *store = dx_pv_new_store();
  dx_provider_opts_t opts = {1, 1, 1 << 20, 0};
  dx_provider_t *p = open_with(store, &opts);
  dx_work_item_t w = start_item("P", "1");
  dx_error_t err;
  pid_t pid;
  int st, rc, n;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  fflush(NULL);
  pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    dx_provider_t *c = open_with(store, &opts);
    dx_provider_opts_t capped = {1, 1, 0, 6 << 20};
    M(c)->destroy(c);
    c = open_with(store, &capped); /* cap at 6 MiB: fill() stops there */
    n = fill(c, &err, &rc);
    M(c)->destroy(c);
    _exit(rc == DX_EFULL && n * 200 > 3 * 1024 ? 0 : 1);
  }
  ASSERT(waitpid(pid, &st, 0) == pid);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ASSERT(orch_depth(p) > 15);
  w.instance = "P2";
  rc = M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err);
  ASSERT(rc == 0 || (rc == DX_EFULL && strstr(err.msg, "maximum size")));
  M(p)->destroy(p);
  free(store);
}

typedef struct {
  dx_provider_t *p;
  volatile int stop;
  int bad;
  char msg[512];
} reader_t;

static void *read_loop(void *ud) {
  reader_t *r = ud;
  while (!r->stop) {
    dx_queue_depths_t d;
    dx_error_t err;
    if (M(r->p)->get_queue_depths(r->p, &d, &err) != 0 && !r->bad++)
      snprintf(r->msg, sizeof r->msg, "%s", err.msg);
  }
  return NULL;
}

DX_TEST(lmdb_reads_during_commits_see_no_damage) {
  /* the per-transaction file checks read LMDB's meta page while other threads commit: they
  ** must never mistake a commit in progress for a truncated store */
  char *store = dx_pv_new_store();
  dx_provider_opts_t opts = {1, 1, 1 << 20, 0};
  dx_provider_t *p = open_with(store, &opts);
  dx_work_item_t w = start_item("A", "\"payload payload payload payload payload\"");
  reader_t r[2];
  pthread_t th[2];
  dx_error_t err;
  int i;
  for (i = 0; i < 2; i++) {
    memset(&r[i], 0, sizeof r[i]);
    r[i].p = p;
    ASSERT(pthread_create(&th[i], NULL, read_loop, &r[i]) == 0);
  }
  for (i = 0; i < 3000; i++) {
    char id[32];
    snprintf(id, sizeof id, "i%d", i);
    w.instance = id;
    ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  }
  for (i = 0; i < 2; i++) {
    r[i].stop = 1;
    pthread_join(th[i], NULL);
    if (r[i].bad) DX_FAIL_AT("%d failed reads, first: %s", r[i].bad, r[i].msg);
  }
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_open_errors) {
  char path[512];
  dx_provider_t *p = (dx_provider_t *)1;
  dx_provider_opts_t bad = {0, 0, 0, 0};
  dx_error_t err;
  int fd;
  snprintf(path, sizeof path, "%s/plain-file", dx_test_tmpdir());
  fd = open(path, O_CREAT | O_WRONLY, 0644);
  ASSERT(fd >= 0);
  close(fd);
  ASSERT_EQ(dx_provider_open(path, NULL, &p, &err), DX_EIO);
  ASSERT(p == NULL);
  ASSERT_CONTAINS(err.msg, "plain-file");
  ASSERT_EQ(dx_provider_open(NULL, NULL, &p, &err), DX_EINVAL);
  ASSERT_EQ(dx_provider_open(dx_test_tmpdir(), &bad, &p, &err), DX_EINVAL);
  ASSERT_EQ(dx_provider_open(dx_test_tmpdir(), NULL, NULL, &err), DX_EINVAL);
}

DX_TEST(lmdb_creates_missing_directories) {
  char path[512];
  struct stat sb;
  dx_provider_t *p;
  snprintf(path, sizeof path, "%s/a/b/store", dx_test_tmpdir());
  p = dx_pv_open(path);
  ASSERT(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
  ASSERT_EQ(sb.st_mode & 0777, 0700); /* the store holds every payload: owner only */
  M(p)->destroy(p);
  strcat(path, "/data.mdb");
  ASSERT(stat(path, &sb) == 0);
  ASSERT_EQ(sb.st_mode & 0777, 0600);
}

DX_TEST(lmdb_batch_is_per_thread_and_env) {
  /* two handles on one store, same thread: the second joins the first's batch instead of
  ** deadlocking on LMDB's writer lock */
  char *store = dx_pv_new_store();
  dx_provider_t *a = dx_pv_open(store), *b = dx_pv_open(store);
  dx_work_item_t w = start_item("A", "1");
  dx_error_t err;
  ASSERT_OK(M(a)->begin(a, &err));
  ASSERT_EQ(M(b)->begin(b, &err), DX_ESTATE);
  ASSERT_OK(M(b)->enqueue_for_orchestrator(b, T0, &w, 0, &err));
  ASSERT_EQ(M(b)->commit(b, 1, &err), DX_ESTATE);
  M(a)->rollback(a);
  ASSERT_EQ(orch_depth(b), 0);
  M(a)->destroy(a);
  M(b)->destroy(b);
  free(store);
}
