/*
** test_lmdb_damage.c -- damaged, truncated, read-only and old LMDB stores (issue 7 items 15
** and 17): every damage is a clear error naming the store and the record, never a crash and
** never a silently changed answer; `check` finds it; format 1 and 2 stores are upgraded on
** open (fixtures written by those builds).
** The files are damaged for real (bytes flipped in data.mdb, truncation, lock.mdb removed).
*/
#include <errno.h>
#include <fcntl.h>
#include <lmdb.h>
#include <sys/wait.h>

#include "duroxide/provider.h"
#include "testlib.h"

#define T0 INT64_C(1700000000000)
#define M(p) ((p)->methods)

static char *new_store(const char *name) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", dx_test_tmpdir(), name);
  return strdup(buf);
}

static dx_provider_t *open_ok(const char *store) {
  dx_provider_t *p = NULL;
  dx_error_t err;
  int rc = dx_provider_open(store, NULL, &p, &err);
  if (rc) DX_FAIL_AT("dx_provider_open(%s): %s: %s", store, dx_err_name(rc), err.msg);
  return p;
}

/* *w becomes the start of instance `inst` (orchestration "Orch", input 1, execution 1). */
static void start_item(dx_work_item_t *w, const char *inst) {
  memset(w, 0, sizeof *w);
  w->kind = DX_WI_START;
  w->instance = (char *)inst;
  w->name = "Orch";
  w->execution_id = 1;
  w->data = "1";
}

/* An instance `inst` run to completion with output `output` (one turn). */
static void completed_instance(dx_provider_t *p, const char *inst, const char *output) {
  dx_work_item_t w;
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_error_t err;
  start_item(&w, inst);
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 5000, &it, &err));
  ASSERT(it);
  memset(ev, 0, sizeof ev);
  ev[0].event_id = 1;
  ev[0].kind = DX_EV_ORCH_STARTED;
  ev[0].name = "Orch";
  ev[0].data = "1";
  memset(&a, 0, sizeof a);
  a.instance = inst;
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.orchestration_name = "Orch";
  a.orchestration_version = "1.0.0";
  a.delta = ev;
  a.delta_len = 1;
  a.status = DX_STATUS_COMPLETED;
  a.output = output;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0, &a, &err));
  dx_orch_item_free(it);
}

static char *data_path(const char *store) {
  static char buf[600];
  snprintf(buf, sizeof buf, "%s/data.mdb", store);
  return buf;
}

/* Flip one bit of the first occurrence of `marker` in data.mdb. */
static void flip_in_file(const char *store, const char *marker) {
  FILE *f = fopen(data_path(store), "r+b");
  size_t n, m = strlen(marker), i;
  char *buf;
  ASSERT(f);
  fseek(f, 0, SEEK_END);
  n = (size_t)ftell(f);
  buf = malloc(n);
  fseek(f, 0, SEEK_SET);
  ASSERT(fread(buf, 1, n, f) == n);
  for (i = 0; i + m <= n; i++)
    if (memcmp(buf + i, marker, m) == 0) break;
  if (i + m > n) DX_FAIL_AT("marker %s not found in data.mdb", marker);
  buf[i + m - 1] ^= 0x01;
  fseek(f, (long)(i + m - 1), SEEK_SET);
  ASSERT(fwrite(buf + i + m - 1, 1, 1, f) == 1);
  fclose(f);
  free(buf);
}

typedef struct {
  int n;
  char first[600];
} problems_t;

static void on_problem(void *ud, const char *msg) {
  problems_t *pr = ud;
  if (pr->n++ == 0) snprintf(pr->first, sizeof pr->first, "%s", msg);
}

static uint64_t check_store(dx_provider_t *p, problems_t *pr) {
  uint64_t records = 0, problems = 0;
  dx_error_t err;
  memset(pr, 0, sizeof *pr);
  ASSERT(M(p)->version >= 4 && M(p)->check);
  ASSERT_OK(M(p)->check(p, on_problem, pr, &records, &problems, &err));
  ASSERT(records > 0);
  ASSERT_EQ(problems, (uint64_t)pr->n);
  return problems;
}

DX_TEST(lmdb_flipped_byte_never_changes_an_answer) {
  char *store = new_store("flip");
  dx_provider_t *p = open_ok(store);
  dx_instance_info_t info;
  problems_t pr;
  dx_error_t err;
  completed_instance(p, "i1", "\"OUTPUT-MARKER\"");
  ASSERT_EQ(check_store(p, &pr), 0);
  M(p)->destroy(p);
  flip_in_file(store, "OUTPUT-MARKER");
  p = open_ok(store);
  ASSERT_EQ(M(p)->get_instance_info(p, "i1", &info, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, store);
  ASSERT_CONTAINS(err.msg, "executions");
  ASSERT_CONTAINS(err.msg, "i1");
  ASSERT_CONTAINS(err.msg, "checksum");
  ASSERT(check_store(p, &pr) >= 1);
  ASSERT_CONTAINS(pr.first, store);
  ASSERT_CONTAINS(pr.first, "executions");
  M(p)->destroy(p);
  free(store);
}

/* An ack runs in the batch's own transaction (no nested one per call): when it fails after
** it wrote (here: the activity it cancels has a damaged row), nothing of the batch is kept and
** commit reports that error; an expected refusal (a stale token, an event stored already)
** comes before any write and leaves the batch usable. */
DX_TEST(lmdb_ack_failing_part_way_spoils_its_batch_a_refusal_does_not) {
  char *store = new_store("spoil");
  dx_provider_t *p = open_ok(store);
  dx_work_item_t w, act;
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t a;
  dx_event_t ev[2];
  dx_activity_ref_t ref = {"sp", 1, 2};
  dx_error_t err;
  start_item(&w, "sp");
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 5000, &it, &err));
  ASSERT(it);
  memset(ev, 0, sizeof ev);
  ev[0].event_id = 1;
  ev[0].kind = DX_EV_ORCH_STARTED;
  ev[0].name = "Orch";
  ev[0].data = "1";
  ev[1].event_id = 2;
  ev[1].kind = DX_EV_ACT_SCHEDULED;
  ev[1].name = "Act";
  ev[1].data = "null";
  memset(&act, 0, sizeof act);
  act.kind = DX_WI_ACT_EXECUTE;
  act.instance = "sp";
  act.execution_id = 1;
  act.id = 2;
  act.name = "Act";
  act.data = "\"ROW-MARKER\"";
  memset(&a, 0, sizeof a);
  a.instance = "sp";
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.orchestration_name = "Orch";
  a.delta = ev;
  a.delta_len = 2;
  a.worker_items = &act;
  a.worker_items_len = 1;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0, &a, &err));
  dx_orch_item_free(it);
  M(p)->destroy(p);
  flip_in_file(store, "ROW-MARKER"); /* the activity's work row */
  p = open_ok(store);
  w.kind = DX_WI_EXTERNAL;
  w.name = "go";
  w.data = "null";
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));

  /* refusals before any write: the batch stays usable and its other calls are kept */
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 1, 5000, &it, &err));
  ASSERT(it && strcmp(it->instance, "sp") == 0);
  memset(&a, 0, sizeof a);
  a.instance = "sp";
  a.lock_token = it->lock_token + 1;
  a.execution_id = 1;
  ev[0].event_id = 3;
  ev[0].kind = DX_EV_EXT_EVENT;
  ev[0].name = "go";
  ev[0].data = "null";
  a.delta = ev;
  a.delta_len = 1;
  ASSERT_EQ(M(p)->ack_orchestration_item(p, T0 + 1, &a, &err), DX_ETOKEN);
  a.lock_token = it->lock_token;
  ev[0].event_id = 2; /* stored already */
  ASSERT_EQ(M(p)->ack_orchestration_item(p, T0 + 1, &a, &err), DX_EEXIST);
  ASSERT_CONTAINS(err.msg, "event 2 already exists");
  ASSERT_OK(M(p)->commit(p, 1, &err));
  dx_orch_item_free(it);

  /* failing part way: the fetch's lock and the ack's writes are all undone */
  ASSERT_OK(M(p)->begin(p, &err));
  it = NULL;
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 6000, 5000, &it, &err)); /* lock lapsed */
  ASSERT(it && strcmp(it->instance, "sp") == 0);
  a.lock_token = it->lock_token;
  ev[0].event_id = 3;
  a.cancelled = &ref;
  a.cancelled_len = 1;
  a.status = DX_STATUS_COMPLETED;
  a.output = "1";
  ASSERT_EQ(M(p)->ack_orchestration_item(p, T0 + 6000, &a, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "work");
  ASSERT_EQ(M(p)->commit(p, 1, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, store);
  M(p)->rollback(p); /* a no-op: the failed commit ended the batch */
  dx_orch_item_free(it);
  it = NULL;
  /* nothing was kept: not the ack (no event 3, still running), not the fetch's lock */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 6001, 5000, &it, &err));
  ASSERT(it && strcmp(it->instance, "sp") == 0 && it->history_len == 2);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_zero_length_data_is_damaged_not_empty) {
  char *store = new_store("zero");
  dx_provider_t *p = NULL;
  dx_error_t err;
  int fd;
  ASSERT(mkdir(store, 0700) == 0);
  fd = open(data_path(store), O_CREAT | O_WRONLY, 0600);
  ASSERT(fd >= 0);
  close(fd);
  ASSERT_EQ(dx_provider_open(store, NULL, &p, &err), DX_ECORRUPT);
  ASSERT(p == NULL);
  ASSERT_CONTAINS(err.msg, "data.mdb is empty");
  ASSERT(strstr(err.msg, "cannot open store") == NULL); /* callers add that prefix */
  free(store);
}


DX_TEST(lmdb_truncated_data_is_an_error_not_sigbus) {
  char *store = new_store("trunc");
  dx_provider_t *p = open_ok(store), *q;
  dx_instance_info_t info;
  dx_error_t err;
  char id[32];
  int i;
  for (i = 0; i < 60; i++) {
    snprintf(id, sizeof id, "inst-%d", i);
    completed_instance(p, id, "\"some output that takes a little room in the store\"");
  }
  /* truncated while open: the next call reports it */
  ASSERT(truncate(data_path(store), dx_test_lmdb_pages_end(data_path(store)) / 2) == 0);
  ASSERT_EQ(M(p)->get_instance_info(p, "inst-59", &info, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, store);
  ASSERT_CONTAINS(err.msg, "truncated");
  M(p)->destroy(p);
  /* and when opened again */
  q = NULL;
  ASSERT_EQ(dx_provider_open(store, NULL, &q, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "truncated");
  /* below the two meta pages */
  ASSERT(truncate(data_path(store), 100) == 0);
  ASSERT_NE(dx_provider_open(store, NULL, &q, &err), 0);
  ASSERT_CONTAINS(err.msg, "damaged");
  ASSERT(strstr(err.msg, "MDB_") == NULL);
  free(store);
}

/* In another process (the store stays open here): raw LMDB commits that put and delete keys
** of a scratch DB in one transaction, until a commit leaves data.mdb ending before the meta
** page's last page (LMDB does not write pages it freed in the same transaction). Exits 0 then,
** 1 when no commit did. */
static void make_unwritten_tail(const char *store) {
  MDB_env *env;
  MDB_txn *t;
  MDB_dbi dbi;
  MDB_envinfo info;
  struct stat st;
  char kb[32], vb[600], path[600];
  int round, i, n, status;
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid > 0) {
    ASSERT(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      DX_FAIL_AT("no commit left data.mdb short of its last page (status %d)", status);
    return;
  }
  snprintf(path, sizeof path, "%s/data.mdb", store);
  memset(vb, 'v', sizeof vb);
  srand(7);
  if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 64) ||
      mdb_env_open(env, store, MDB_NOSYNC, 0600))
    _exit(2);
  for (round = 0; round < 20000; round++) {
    if (mdb_txn_begin(env, NULL, 0, &t) || mdb_dbi_open(t, "scratch", MDB_CREATE, &dbi)) _exit(3);
    n = 20 + rand() % 200;
    for (i = 0; i < n; i++) {
      MDB_val k = {(size_t)snprintf(kb, sizeof kb, "k%06d-%06d", round, i), kb};
      MDB_val v = {(size_t)(100 + rand() % 500), vb};
      if (mdb_put(t, dbi, &k, &v, 0)) _exit(4);
    }
    for (i = 0; i < n; i++)
      if (rand() % 4) {
        MDB_val k = {(size_t)snprintf(kb, sizeof kb, "k%06d-%06d", round, i), kb};
        mdb_del(t, dbi, &k, NULL);
      }
    if (mdb_txn_commit(t) || mdb_env_info(env, &info) || stat(path, &st)) _exit(5);
    if ((uint64_t)st.st_size < ((uint64_t)info.me_last_pgno + 1) * 4096) {
      mdb_env_close(env);
      _exit(0);
    }
  }
  _exit(1);
}

DX_TEST(lmdb_unwritten_free_pages_are_not_a_truncation) {
  /* A store whose data.mdb ends before the meta page's last page only because LMDB left pages
  ** it freed unwritten is sound: it opens and answers, in the process that had it open and in
  ** a new one. A real truncation of it is still reported. */
  char *store = new_store("unwritten");
  dx_provider_t *p = open_ok(store), *q = NULL;
  dx_instance_info_t info;
  struct stat st;
  dx_error_t err;
  completed_instance(p, "inst-1", "\"out\"");
  make_unwritten_tail(store);
  ASSERT_OK(M(p)->get_instance_info(p, "inst-1", &info, &err)); /* the per-transaction check */
  dx_instance_info_clear(&info);
  M(p)->destroy(p);
  p = open_ok(store); /* the check before LMDB maps the file */
  ASSERT_OK(M(p)->get_instance_info(p, "inst-1", &info, &err));
  dx_instance_info_clear(&info);
  M(p)->destroy(p);
  ASSERT(stat(data_path(store), &st) == 0);
  ASSERT(truncate(data_path(store), st.st_size / 2) == 0); /* (never filled: a small store) */
  ASSERT_EQ(dx_provider_open(store, NULL, &q, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "truncated");
  free(store);
}

DX_TEST(lmdb_damaged_meta_page_is_an_error_not_sigbus) {
  /* LMDB trusts its meta pages: a flipped page size made every command die with SIGBUS */
  char *store = new_store("meta");
  dx_provider_t *p = open_ok(store);
  dx_error_t err;
  int fd, i;
  completed_instance(p, "i1", "1");
  M(p)->destroy(p);
  fd = open(data_path(store), O_RDWR);
  ASSERT(fd >= 0);
  for (i = 0; i < 2; i++) /* byte 1 of the page size (4096 = 0x1000) in both meta pages */
    ASSERT(pwrite(fd, "\x30", 1, (off_t)i * 4096 + 16 + 24 + 1) == 1);
  close(fd);
  p = NULL;
  ASSERT_EQ(dx_provider_open(store, NULL, &p, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "meta page");
  ASSERT_CONTAINS(err.msg, "page size");
  free(store);
}

DX_TEST(lmdb_deleted_lock_file_stops_the_store) {
  char *store = new_store("lock");
  dx_provider_t *p = open_ok(store);
  dx_instance_info_t info;
  dx_error_t err;
  char path[600];
  completed_instance(p, "i1", "1");
  snprintf(path, sizeof path, "%s/lock.mdb", store);
  ASSERT(unlink(path) == 0);
  ASSERT_EQ(M(p)->get_instance_info(p, "i1", &info, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "lock.mdb was deleted");
  /* sticky: a writer never goes on without its lock file */
  ASSERT_OK(creat(path, 0600) >= 0 ? 0 : -1);
  ASSERT_EQ(M(p)->begin(p, &err), DX_ECORRUPT);
  M(p)->destroy(p);
  free(store);
}

/* Ids of the first page of instances with `status`, named `name` (NULL: any). */
static const char *listed(dx_provider_t *p, int status, const char *name) {
  static char out[256];
  dx_list_query_t q;
  dx_instance_info_t *rows = NULL;
  dx_error_t err;
  char *next = NULL;
  size_t n = 0, i;
  memset(&q, 0, sizeof q);
  q.status = status;
  q.name = name;
  q.limit = 10;
  ASSERT_OK(M(p)->list_page(p, T0, &q, &rows, &n, &next, &err));
  out[0] = 0;
  for (i = 0; i < n; i++) {
    strcat(out, rows[i].instance_id);
    strcat(out, " ");
  }
  dx_instance_infos_free(rows, n);
  free(next);
  return out;
}

DX_TEST(lmdb_format2_store_is_upgraded_on_open) {
  char *store = new_store("fmt2"), cmd[1400];
  dx_provider_t *p;
  dx_instance_info_t info;
  dx_event_t *ev;
  problems_t pr;
  dx_error_t err;
  size_t n;
  ASSERT(mkdir(store, 0700) == 0);
  snprintf(cmd, sizeof cmd, "tar xzf '%s/store-format2.tar.gz' -C '%s'", DX_FIXTURES, store);
  ASSERT_EQ(system(cmd), 0);
  p = open_ok(store); /* written by the format 2 build; upgraded here */
  ASSERT_OK(M(p)->get_instance_info(p, "hello-2", &info, &err));
  ASSERT_EQ(info.status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "\"Hello, Fmt2!\"");
  dx_instance_info_clear(&info);
  ASSERT_OK(M(p)->read_history(p, "hello-1", 0, &ev, &n, NULL, &err));
  ASSERT(n >= 4);
  ASSERT_EQ(ev[0].kind, DX_EV_ORCH_STARTED);
  dx_events_free(ev, n);
  ASSERT_EQ(check_store(p, &pr), 0); /* every value carries its checksum now */
  completed_instance(p, "after", "2");
  M(p)->destroy(p);
  p = open_ok(store); /* opened again: already format 3 */
  ASSERT_EQ(check_store(p, &pr), 0);
  ASSERT_OK(M(p)->get_instance_info(p, "hello-1", &info, &err));
  ASSERT_STR_EQ(info.output, "\"Hello, Lua!\"");
  dx_instance_info_clear(&info);
  M(p)->destroy(p);
  free(store);
}

/* Work lock tokens now name their row (no work_token entry, two writes less per activity); a
** lock taken by the build before (fixture: an activity locked under such a token, kept in
** work_token) is still acked and renewed by its token. */
DX_TEST(lmdb_work_tokens_name_their_row_old_tokens_still_work) {
  char *store = new_store("oldtok"), cmd[1400];
  dx_provider_t *p;
  dx_work_item_t act, done;
  dx_work_fetch_t f;
  problems_t pr;
  dx_error_t err;
  uint64_t old = UINT64_C(0x2c2ee91c00000001); /* the token the old build printed */
  ASSERT(mkdir(store, 0700) == 0);
  snprintf(cmd, sizeof cmd, "tar xzf '%s/store-oldtoken.tar.gz' -C '%s'", DX_FIXTURES, store);
  ASSERT_EQ(system(cmd), 0);
  p = open_ok(store);
  ASSERT_EQ(check_store(p, &pr), 0);
  ASSERT_EQ(M(p)->ack_work_item(p, T0, old + 1, NULL, &err), DX_ELOCK);
  ASSERT_OK(M(p)->renew_work_item_lock(p, T0, old, 60000, &err));
  memset(&done, 0, sizeof done);
  done.kind = DX_WI_ACT_COMPLETED;
  done.instance = "old-1";
  done.execution_id = 1;
  done.id = 2;
  done.data = "1";
  ASSERT_OK(M(p)->ack_work_item(p, T0, old, &done, &err));
  ASSERT_EQ(M(p)->ack_work_item(p, T0, old, &done, &err), DX_ELOCK); /* once */
  ASSERT_EQ(check_store(p, &pr), 0);
  /* a new lock: its token names the row (seq << 20), no index entry, and it acks once */
  memset(&act, 0, sizeof act);
  act.kind = DX_WI_ACT_EXECUTE;
  act.instance = "new-1";
  act.execution_id = 1;
  act.id = 3;
  act.name = "Act";
  act.data = "null";
  ASSERT_OK(M(p)->enqueue_for_worker(p, T0, &act, &err));
  memset(&f, 0, sizeof f);
  ASSERT_OK(M(p)->fetch_work_item(p, T0, 60000, NULL, &f, &err));
  ASSERT_STR_EQ(f.item.instance, "new-1");
  ASSERT(f.lock_token >> 20 != 0 && (f.lock_token >> 20) < 100); /* a small seq */
  ASSERT_EQ(check_store(p, &pr), 0);
  ASSERT_EQ(M(p)->ack_work_item(p, T0, f.lock_token ^ 1, NULL, &err), DX_ELOCK);
  ASSERT_OK(M(p)->ack_work_item(p, T0, f.lock_token, NULL, &err));
  ASSERT_EQ(M(p)->ack_work_item(p, T0, f.lock_token, NULL, &err), DX_ELOCK);
  dx_work_item_clear(&f.item);
  ASSERT_EQ(check_store(p, &pr), 0);
  M(p)->destroy(p);
  free(store);
}

/* Entries of DB `db` whose key starts with `prefix` (read with LMDB itself), and meta
** "format" (be32) in *format when format is not NULL. */
static int raw_entries(const char *store, const char *db, const char *prefix, unsigned *format) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi d;
  MDB_cursor *c;
  MDB_val k, v;
  int n = 0;
  ASSERT_OK(mdb_env_create(&env));
  ASSERT_OK(mdb_env_set_maxdbs(env, 64));
  ASSERT_OK(mdb_env_open(env, store, MDB_RDONLY, 0600));
  ASSERT_OK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
  ASSERT_OK(mdb_dbi_open(txn, db, 0, &d));
  ASSERT_OK(mdb_cursor_open(txn, d, &c));
  while (mdb_cursor_get(c, &k, &v, MDB_NEXT) == 0)
    if (k.mv_size >= strlen(prefix) && memcmp(k.mv_data, prefix, strlen(prefix)) == 0) n++;
  mdb_cursor_close(c);
  if (format) {
    MDB_val fk = {6, "format"};
    const unsigned char *b;
    ASSERT_OK(mdb_dbi_open(txn, "meta", 0, &d));
    ASSERT_OK(mdb_get(txn, d, &fk, &v));
    b = v.mv_data;
    *format = (unsigned)b[0] << 24 | (unsigned)b[1] << 16 | (unsigned)b[2] << 8 | b[3];
  }
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return n;
}

static int first_queued(void *ud, const dx_queued_t *q) {
  dx_queued_t *out = ud;
  if (out->attempt == 0) *out = *q;
  return 0;
}

static dx_orch_item_t *fetch_at(dx_provider_t *p, int64_t now) {
  dx_orch_item_t *it = NULL;
  dx_error_t err;
  ASSERT_OK(M(p)->fetch_orchestration_item(p, now, 5000, &it, &err));
  return it;
}

/* Format 4 writes the events one turn appends as one history record (a run). A store written
** by the format 3 build (fixture: f3-done completed in one turn of 3 events, f3-run after a
** turn of 2 events with a raised event queued; one record per event) opens, is stamped
** format 4 (a build that reads only format 3 refuses it by that number), reads as before,
** and an execution continues with runs after its single-event records. */
DX_TEST(lmdb_format3_store_opens_and_continues_with_turn_runs) {
  char *store = new_store("fmt3"), cmd[1400];
  dx_provider_t *p;
  dx_instance_info_t info;
  dx_execution_info_t *ex = NULL;
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t a;
  dx_event_t *ev = NULL, add[3];
  dx_queued_t q1;
  problems_t pr;
  dx_error_t err;
  unsigned fmt = 0;
  size_t n = 0, i;
  ASSERT(mkdir(store, 0700) == 0);
  snprintf(cmd, sizeof cmd, "tar xzf '%s/store-format3.tar.gz' -C '%s'", DX_FIXTURES, store);
  ASSERT_EQ(system(cmd), 0);
  ASSERT_EQ(raw_entries(store, "history", "f3-", &fmt), 5);
  ASSERT_EQ(fmt, 3);
  p = open_ok(store);
  ASSERT_EQ(check_store(p, &pr), 0);
  ASSERT_OK(M(p)->get_instance_info(p, "f3-done", &info, &err));
  ASSERT_EQ(info.status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "\"done\"");
  dx_instance_info_clear(&info);
  ASSERT_OK(M(p)->read_history(p, "f3-done", 0, &ev, &n, NULL, &err));
  ASSERT_EQ(n, 3);
  ASSERT_EQ(ev[2].kind, DX_EV_ORCH_COMPLETED);
  dx_events_free(ev, n);
  /* the running one takes its next turn: 3 events after its 2 single ones */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 10, 5000, &it, &err));
  ASSERT(it && strcmp(it->instance, "f3-run") == 0);
  ASSERT_EQ(it->history_len, 2);
  ASSERT_EQ(it->history[1].kind, DX_EV_TIMER_CREATED);
  ASSERT_EQ(it->messages_len, 1);
  memset(add, 0, sizeof add);
  for (i = 0; i < 3; i++) {
    add[i].event_id = 3 + i;
    add[i].timestamp_ms = T0 + 10;
    add[i].kind = DX_EV_TIMER_CREATED;
    add[i].fire_at_ms = T0 + 100 + (int64_t)i;
  }
  add[0].kind = DX_EV_EXT_EVENT;
  add[0].name = "Go";
  add[0].data = "7";
  add[2].kind = DX_EV_ORCH_COMPLETED;
  add[2].data = "\"ran\"";
  memset(&a, 0, sizeof a);
  a.instance = "f3-run";
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.delta = add;
  a.delta_len = 3;
  a.status = DX_STATUS_COMPLETED;
  a.output = "\"ran\"";
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0 + 10, &a, &err));
  dx_orch_item_free(it);
  ASSERT_OK(M(p)->read_history(p, "f3-run", 0, &ev, &n, NULL, &err));
  ASSERT_EQ(n, 5);
  for (i = 0; i < n; i++) ASSERT_EQ(ev[i].event_id, i + 1);
  ASSERT_EQ(ev[2].kind, DX_EV_EXT_EVENT);
  ASSERT_STR_EQ(ev[2].data, "7");
  ASSERT_EQ(ev[4].kind, DX_EV_ORCH_COMPLETED);
  dx_events_free(ev, n);
  ASSERT_OK(M(p)->list_executions(p, "f3-run", &ex, &n, &err));
  ASSERT_EQ(n, 1);
  ASSERT_EQ(ex[0].event_count, 5);
  free(ex);
  ASSERT_EQ(check_store(p, &pr), 0);
  /* f3-locked: a lock the format 3 build took (its message tagged): shown locked, taken over
  ** when it lapses with the attempt counted, then locked the format 4 way (the message is not
  ** rewritten) and abandoned and acked */
  memset(&q1, 0, sizeof q1);
  ASSERT_OK(M(p)->instance_queue(p, "f3-locked", first_queued, &q1, &err));
  ASSERT_EQ(q1.attempt, 1);
  ASSERT(q1.locked_until_ms != 0); /* (lapsed: its process is gone, the first sweep saw it) */
  it = fetch_at(p, T0 + 6000);
  ASSERT(it && strcmp(it->instance, "f3-locked") == 0);
  ASSERT_EQ(it->attempt_count, 2);
  ASSERT_EQ(it->messages_len, 1);
  memset(&q1, 0, sizeof q1);
  ASSERT_OK(M(p)->instance_queue(p, "f3-locked", first_queued, &q1, &err));
  ASSERT_EQ(q1.attempt, 2);
  ASSERT_EQ(q1.locked_until_ms, T0 + 11000);
  ASSERT_OK(M(p)->abandon_orchestration_item(p, T0 + 6001, "f3-locked", it->lock_token, 0, 0, &err));
  dx_orch_item_free(it);
  it = fetch_at(p, T0 + 6002);
  ASSERT(it && strcmp(it->instance, "f3-locked") == 0);
  ASSERT_EQ(it->attempt_count, 3);
  memset(&a, 0, sizeof a);
  add[0] = add[2];
  add[0].event_id = 1;
  add[0].kind = DX_EV_ORCH_STARTED;
  add[0].name = "Orch";
  add[0].data = "2";
  a.instance = "f3-locked";
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.orchestration_name = "Orch";
  a.delta = add;
  a.delta_len = 1;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0 + 6003, &a, &err));
  dx_orch_item_free(it);
  memset(&q1, 0, sizeof q1);
  ASSERT_OK(M(p)->instance_queue(p, "f3-locked", first_queued, &q1, &err));
  ASSERT_EQ(q1.attempt, 0); /* nothing queued */
  ASSERT_EQ(check_store(p, &pr), 0);
  M(p)->destroy(p);
  ASSERT_EQ(raw_entries(store, "history", "f3-run", &fmt), 3); /* 2 single + 1 run */
  ASSERT_EQ(fmt, 4);
  p = open_ok(store);
  ASSERT_OK(M(p)->read_history(p, "f3-run", 0, &ev, &n, NULL, &err));
  ASSERT_EQ(n, 5);
  dx_events_free(ev, n);
  M(p)->destroy(p);
  free(store);
}

static dx_event_t timer_event(uint64_t id) {
  dx_event_t e;
  memset(&e, 0, sizeof e);
  e.event_id = id;
  e.kind = DX_EV_TIMER_CREATED;
  e.timestamp_ms = T0;
  e.fire_at_ms = T0 + (int64_t)id;
  return e;
}

/* A turn's events are one record; ids inside a run count as stored (a duplicate is refused,
** naming the id), runs and single events read back in id order, executions count every
** event, and a damaged event inside a run is named by its id (read and check). */
/* A damaged message queued after the fetch (not in the turn's lock) refuses that ack before it
** writes anything: the batch's other calls commit (review probe on the ack's message walk). */
DX_TEST(lmdb_damaged_late_message_refuses_only_its_ack) {
  char *store = new_store("late");
  dx_provider_t *p = open_ok(store);
  dx_work_item_t w;
  dx_orch_item_t *k = NULL, *l = NULL;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_error_t err;
  start_item(&w, "K");
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 600000, &k, &err));
  ASSERT(k && strcmp(k->instance, "K") == 0);
  w.kind = DX_WI_EXTERNAL;
  w.name = "go";
  w.data = "\"LATE-MARKER\"";
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  start_item(&w, "L");
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  flip_in_file(store, "LATE-MARKER"); /* p stays open: LMDB reads the page from the file */

  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 1, 5000, &l, &err));
  ASSERT(l && strcmp(l->instance, "L") == 0);
  memset(ev, 0, sizeof ev);
  ev[0].event_id = 1;
  ev[0].kind = DX_EV_ORCH_STARTED;
  ev[0].name = "Orch";
  ev[0].data = "1";
  memset(&a, 0, sizeof a);
  a.instance = "K";
  a.lock_token = k->lock_token;
  a.execution_id = 1;
  a.orchestration_name = "Orch";
  a.orchestration_version = "1.0.0";
  a.delta = ev;
  a.delta_len = 1;
  ASSERT_EQ(M(p)->ack_orchestration_item(p, T0 + 1, &a, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "K");
  ASSERT_OK(M(p)->commit(p, 1, &err));
  /* L's fetch was kept: its lock holds, its token acks */
  a.instance = "L";
  a.lock_token = l->lock_token;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0 + 2, &a, &err));
  dx_orch_item_free(k);
  dx_orch_item_free(l);
  M(p)->destroy(p);
  free(store);
}

/* A batch whose commit fails (a write or fsync error: the test hook) leaves its txn id to the
** next writer. Once another writer committed with it, the next batch has the id the lost one
** would have had: it must not take what the lost batch kept (here its lock on K) as current. */
DX_TEST(lmdb_failed_commit_leaves_nothing_kept_to_the_next_batch) {
  char *store = new_store("lostcommit");
  dx_provider_t *p = open_ok(store);
  dx_work_item_t w;
  dx_orch_item_t *lost = NULL, *it = NULL;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_error_t err;
  ASSERT(M(p)->test_hooks && M(p)->test_hooks->version >= 2);
  start_item(&w, "K");
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0, 600000, &lost, &err));
  ASSERT(lost && strcmp(lost->instance, "K") == 0);
  ASSERT_OK(M(p)->test_hooks->fail_next_commit(p));
  ASSERT(M(p)->commit(p, 1, &err) != 0);
  start_item(&w, "X"); /* another writer commits with the lost batch's id */
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));

  ASSERT_OK(M(p)->begin(p, &err));
  memset(ev, 0, sizeof ev);
  ev[0].event_id = 1;
  ev[0].kind = DX_EV_ORCH_STARTED;
  ev[0].name = "Orch";
  ev[0].data = "1";
  memset(&a, 0, sizeof a);
  a.instance = "K";
  a.lock_token = lost->lock_token; /* the lock was never stored */
  a.execution_id = 1;
  a.orchestration_name = "Orch";
  a.orchestration_version = "1.0.0";
  a.delta = ev;
  a.delta_len = 1;
  ASSERT(M(p)->ack_orchestration_item(p, T0 + 1, &a, &err) != 0);
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 1, 5000, &it, &err));
  ASSERT(it && strcmp(it->instance, "K") == 0); /* K is not locked: first in line */
  ASSERT_EQ(it->attempt_count, 1);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  dx_orch_item_free(lost);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_turn_runs_are_one_record_and_every_id_in_them_counts) {
  char *store = new_store("runs");
  dx_provider_t *p = open_ok(store);
  dx_execution_info_t *ex = NULL;
  dx_event_t ev[4], *got = NULL;
  problems_t pr;
  dx_error_t err;
  size_t n = 0, i;
  completed_instance(p, "warm", "1");
  for (i = 0; i < 4; i++) ev[i] = timer_event(i + 1);
  ASSERT_OK(M(p)->append_with_execution(p, "runs", 1, ev, 4, &err));
  M(p)->destroy(p);
  ASSERT_EQ(raw_entries(store, "history", "runs", NULL), 1);
  p = open_ok(store);
  ev[0] = timer_event(3);
  ASSERT_EQ(M(p)->append_with_execution(p, "runs", 1, ev, 1, &err), DX_EEXIST);
  ASSERT_CONTAINS(err.msg, "event 3 already exists");
  ev[0] = timer_event(5);
  ASSERT_OK(M(p)->append_with_execution(p, "runs", 1, ev, 1, &err));
  ev[0] = timer_event(6);
  ev[1] = timer_event(7);
  ev[2] = timer_event(9);
  ASSERT_OK(M(p)->append_with_execution(p, "runs", 1, ev, 3, &err)); /* runs 6-7 and 9 */
  ev[0] = timer_event(8);
  ev[1] = timer_event(7);
  ASSERT_EQ(M(p)->append_with_execution(p, "runs", 1, ev, 2, &err), DX_EEXIST);
  ASSERT_CONTAINS(err.msg, "event 7 already exists");
  ASSERT_OK(M(p)->append_with_execution(p, "runs", 1, ev, 1, &err)); /* 8 fills the gap */
  ASSERT_OK(M(p)->read_history(p, "runs", 1, &got, &n, NULL, &err));
  ASSERT_EQ(n, 9);
  for (i = 0; i < n; i++) {
    ASSERT_EQ(got[i].event_id, i + 1);
    ASSERT_EQ(got[i].fire_at_ms, T0 + (int64_t)i + 1);
  }
  dx_events_free(got, n);
  ASSERT_EQ(check_store(p, &pr), 0);
  M(p)->destroy(p);
  ASSERT_EQ(raw_entries(store, "history", "runs", NULL), 5); /* 1-4, 5, 6-7, 8, 9 */
  p = open_ok(store);
  ASSERT_OK(M(p)->test_hooks->corrupt_history(p, "runs", 1, 7));
  ASSERT_EQ(check_store(p, &pr), 1);
  ASSERT_CONTAINS(pr.first, "'runs' event 7");
  got = NULL;
  ASSERT_EQ(M(p)->read_history(p, "runs", 1, &got, &n, NULL, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "event 7");
  ASSERT(got == NULL);
  ASSERT_OK(M(p)->list_executions(p, "warm", &ex, &n, &err));
  ASSERT_EQ(n, 1);
  ASSERT_EQ(ex[0].event_count, 1);
  free(ex);
  M(p)->destroy(p);
  free(store);
}

/* Every key and value of DB `db` (read with LMDB itself), concatenated; *n its length. */
static char *raw_dump(const char *store, const char *db, size_t *n) {
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi d;
  MDB_cursor *c;
  MDB_val k, v;
  char *out = NULL;
  *n = 0;
  ASSERT_OK(mdb_env_create(&env));
  ASSERT_OK(mdb_env_set_maxdbs(env, 64));
  ASSERT_OK(mdb_env_open(env, store, MDB_RDONLY, 0600));
  ASSERT_OK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
  ASSERT_OK(mdb_dbi_open(txn, db, 0, &d));
  ASSERT_OK(mdb_cursor_open(txn, d, &c));
  while (mdb_cursor_get(c, &k, &v, MDB_NEXT) == 0) {
    out = realloc(out, *n + k.mv_size + v.mv_size);
    memcpy(out + *n, k.mv_data, k.mv_size);
    memcpy(out + *n + k.mv_size, v.mv_data, v.mv_size);
    *n += k.mv_size + v.mv_size;
  }
  mdb_cursor_close(c);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return out;
}

/* Format 4: an orchestration fetch names its batch in the instance's lock state and leaves the
** messages as they are (it used to rewrite each one with the lock token and attempt); attempts
** still count every fetch, a message queued during the lock stays out of the batch. */
DX_TEST(lmdb_orch_fetch_leaves_its_messages_unwritten) {
  char *store = new_store("msglock"), *before, *after;
  dx_provider_t *p = open_ok(store);
  dx_work_item_t w;
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev;
  dx_queued_t q1;
  problems_t pr;
  dx_error_t err;
  size_t nb, na;
  completed_instance(p, "warm", "1");
  start_item(&w, "m1");
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  M(p)->destroy(p);
  before = raw_dump(store, "orch_msgs", &nb);
  p = open_ok(store);
  it = fetch_at(p, T0 + 1);
  ASSERT(it && strcmp(it->instance, "m1") == 0);
  ASSERT_EQ(it->attempt_count, 1);
  M(p)->destroy(p);
  after = raw_dump(store, "orch_msgs", &na);
  ASSERT(nb == na && memcmp(before, after, nb) == 0); /* not rewritten */
  free(before);
  free(after);
  p = open_ok(store);
  memset(&q1, 0, sizeof q1);
  ASSERT_OK(M(p)->instance_queue(p, "m1", first_queued, &q1, &err));
  ASSERT_EQ(q1.attempt, 1);
  ASSERT_EQ(q1.locked_until_ms, T0 + 5001);
  /* the lock lapses: the next fetch counts the attempt of the first */
  dx_orch_item_free(it);
  it = fetch_at(p, T0 + 6000);
  ASSERT(it && strcmp(it->instance, "m1") == 0);
  ASSERT_EQ(it->attempt_count, 2);
  w.kind = DX_WI_EXTERNAL;
  w.name = "Go";
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0 + 6001, &w, 0, &err)); /* during the lock */
  memset(&ev, 0, sizeof ev);
  ev.event_id = 1;
  ev.kind = DX_EV_ORCH_STARTED;
  ev.name = "Orch";
  ev.data = "1";
  memset(&a, 0, sizeof a);
  a.instance = "m1";
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.orchestration_name = "Orch";
  a.delta = &ev;
  a.delta_len = 1;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0 + 6002, &a, &err));
  dx_orch_item_free(it);
  it = fetch_at(p, T0 + 6003); /* the raise came after the batch: still queued, now its own */
  ASSERT(it && strcmp(it->instance, "m1") == 0);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_EXTERNAL);
  ASSERT_EQ(it->attempt_count, 1);
  dx_orch_item_free(it);
  ASSERT_EQ(check_store(p, &pr), 0);
  M(p)->destroy(p);
  free(store);
}

/* A process that holds `store` open until *release is closed: a plain LMDB env, as a worker of
** an older build holds it (it checked the format when it opened the store, not since). */
static pid_t hold_open(const char *store, int *release) {
  int ready[2], go[2];
  char c;
  pid_t pid;
  ASSERT_OK(pipe(ready));
  ASSERT_OK(pipe(go));
  if ((pid = fork()) == 0) {
    MDB_env *env;
    close(ready[0]);
    close(go[1]);
    if (mdb_env_create(&env) || mdb_env_set_maxdbs(env, 64) || mdb_env_open(env, store, 0, 0600))
      _exit(1);
    if (write(ready[1], "r", 1) != 1) _exit(1);
    while (read(go[0], &c, 1) > 0) {}
    mdb_env_close(env);
    _exit(0);
  }
  ASSERT(pid > 0);
  close(ready[1]);
  close(go[0]);
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  *release = go[1];
  return pid;
}

/* The value of the first entry of DB `db` whose key starts with the n bytes of `prefix`. */
static char *raw_first(const char *store, const char *db, const char *prefix, size_t n,
                       size_t *len) {
  char *out = NULL;
  MDB_env *env;
  MDB_txn *txn;
  MDB_dbi d;
  MDB_cursor *c;
  MDB_val k, v;
  ASSERT_OK(mdb_env_create(&env));
  ASSERT_OK(mdb_env_set_maxdbs(env, 64));
  ASSERT_OK(mdb_env_open(env, store, MDB_RDONLY, 0600));
  ASSERT_OK(mdb_txn_begin(env, NULL, MDB_RDONLY, &txn));
  ASSERT_OK(mdb_dbi_open(txn, db, 0, &d));
  ASSERT_OK(mdb_cursor_open(txn, d, &c));
  k.mv_size = n;
  k.mv_data = (void *)prefix;
  if (mdb_cursor_get(c, &k, &v, MDB_SET_RANGE) == 0 && k.mv_size >= n &&
      memcmp(k.mv_data, prefix, n) == 0 && (out = malloc(v.mv_size))) {
    memcpy(out, v.mv_data, v.mv_size);
    *len = v.mv_size;
  }
  mdb_cursor_close(c);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  ASSERT(out != NULL);
  return out;
}

/* A MessagePack unsigned or signed integer at *p (the record layouts' integers). */
static uint64_t mp_int(const unsigned char **p) {
  const unsigned char *b = *p;
  uint64_t v = 0;
  size_t w = 0, i;
  if (b[0] <= 0x7f) { *p = b + 1; return b[0]; }
  if (b[0] >= 0xcc && b[0] <= 0xcf) w = (size_t)1 << (b[0] - 0xcc);
  else if (b[0] >= 0xd0 && b[0] <= 0xd3) w = (size_t)1 << (b[0] - 0xd0);
  else DX_FAIL_AT("not an integer: 0x%02x", b[0]);
  for (i = 0; i < w; i++) v = v << 8 | b[1 + i];
  *p = b + 1 + w;
  return v;
}

/* While another process has the store open (maybe a worker of an older build: it checked the
** format only when it opened the store) this build keeps a format 3 store at format 3 and
** writes what format 3 reads: one history record per event, the orchestration lock's token
** and attempt in its messages, the lock state in its 4 fields. Opened alone later, the store
** becomes format 4 and everything reads on. */
DX_TEST(lmdb_format3_store_stays_format3_while_another_process_has_it_open) {
  char *store = new_store("fmt3held"), cmd[1400], *v;
  dx_provider_t *p;
  dx_orch_item_t *it = NULL;
  dx_orch_ack_t a;
  dx_event_t *ev = NULL, add[3];
  problems_t pr;
  dx_error_t err;
  const unsigned char *b;
  unsigned fmt = 0;
  uint64_t token;
  size_t n = 0, len = 0, i;
  int release, st;
  pid_t holder;
  ASSERT(mkdir(store, 0700) == 0);
  snprintf(cmd, sizeof cmd, "tar xzf '%s/store-format3.tar.gz' -C '%s'", DX_FIXTURES, store);
  ASSERT_EQ(system(cmd), 0);
  holder = hold_open(store, &release);
  p = open_ok(store);
  /* a turn of 3 events on f3-run (after its 2 single ones) */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 10, 5000, &it, &err));
  ASSERT(it && strcmp(it->instance, "f3-run") == 0);
  memset(add, 0, sizeof add);
  for (i = 0; i < 3; i++) {
    add[i].event_id = 3 + i;
    add[i].timestamp_ms = T0 + 10;
    add[i].kind = DX_EV_TIMER_CREATED;
    add[i].fire_at_ms = T0 + 100 + (int64_t)i;
  }
  memset(&a, 0, sizeof a);
  a.instance = "f3-run";
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.delta = add;
  a.delta_len = 3;
  ASSERT_OK(M(p)->ack_orchestration_item(p, T0 + 10, &a, &err));
  dx_orch_item_free(it);
  /* f3-locked's lapsed format 3 lock taken over: locked again, left locked */
  it = fetch_at(p, T0 + 6000);
  ASSERT(it && strcmp(it->instance, "f3-locked") == 0);
  ASSERT_EQ(it->attempt_count, 2);
  token = it->lock_token;
  dx_orch_item_free(it);
  ASSERT_EQ(check_store(p, &pr), 0);
  M(p)->destroy(p);
  ASSERT_EQ(raw_entries(store, "history", "f3-run", &fmt), 5); /* one record per event */
  ASSERT_EQ(fmt, 3);
  v = raw_first(store, "orch_state", "f3-locked", 10, &len);
  ASSERT_EQ((unsigned char)v[0], 0x95); /* [record format, ready_at, locked_until, token, locker] */
  free(v);
  v = raw_first(store, "orch_msgs", "f3-locked", 10, &len);
  b = (const unsigned char *)v;
  ASSERT_EQ(b[0], 0x95); /* [record format, visible_at, token, attempt, item] */
  b++;
  ASSERT_EQ(mp_int(&b), 1);
  (void)mp_int(&b);
  ASSERT(mp_int(&b) == token); /* tagged with the lock, as format 3 reads it */
  ASSERT_EQ(mp_int(&b), 2);
  free(v);
  /* the other process leaves; this build's next open finds the store alone */
  close(release);
  ASSERT_EQ(waitpid(holder, &st, 0), holder);
  ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  p = open_ok(store);
  ASSERT_OK(M(p)->read_history(p, "f3-run", 0, &ev, &n, NULL, &err));
  ASSERT_EQ(n, 5);
  for (i = 0; i < n; i++) ASSERT_EQ(ev[i].event_id, i + 1);
  dx_events_free(ev, n);
  it = fetch_at(p, T0 + 12000); /* the tagged lock lapsed: its attempt counted */
  ASSERT(it && strcmp(it->instance, "f3-locked") == 0);
  ASSERT_EQ(it->attempt_count, 3);
  dx_orch_item_free(it);
  ASSERT_EQ(check_store(p, &pr), 0);
  M(p)->destroy(p);
  ASSERT_EQ(raw_entries(store, "history", "f3-run", &fmt), 5);
  ASSERT_EQ(fmt, 4);
  free(store);
}

DX_TEST(lmdb_format1_store_is_upgraded_on_open) {
  char *store = new_store("fmt1"), cmd[1400];
  dx_provider_t *p;
  dx_instance_info_t info;
  dx_queue_depths_t d;
  problems_t pr;
  dx_error_t err;
  ASSERT(mkdir(store, 0700) == 0);
  snprintf(cmd, sizeof cmd, "tar xzf '%s/store-format1.tar.gz' -C '%s'", DX_FIXTURES, store);
  ASSERT_EQ(system(cmd), 0);
  p = open_ok(store); /* written by the format 1 build: a finished instance, a queued start */
  ASSERT_OK(M(p)->get_instance_info(p, "hello-1", &info, &err));
  ASSERT_EQ(info.status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "\"Hello, One!\"");
  dx_instance_info_clear(&info);
  ASSERT_OK(M(p)->get_instance_info(p, "pending-1", &info, &err));
  dx_instance_info_clear(&info);
  ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
  ASSERT_EQ(d.orchestrator, 1);
  ASSERT_EQ(check_store(p, &pr), 0); /* the list indexes were built at the upgrade */
  ASSERT_STR_EQ(listed(p, DX_STATUS_COMPLETED, NULL), "hello-1 ");
  ASSERT_STR_EQ(listed(p, DX_STATUS_NONE, NULL), "pending-1 ");
  ASSERT_STR_EQ(listed(p, DX_LIST_ANY, "Nope"), "");
  M(p)->destroy(p);
  free(store);
}

/* A read-only mount: reads work, writes fail saying so. Needs root (mount); skipped without. */
DX_TEST(lmdb_read_only_store_can_be_read) {
  char *dir = new_store("ro"), store[600], cmd[1400];
  dx_provider_t *p;
  dx_instance_info_t info;
  dx_work_item_t w;
  dx_error_t err;
  int rc;
  ASSERT(mkdir(dir, 0700) == 0);
  snprintf(cmd, sizeof cmd, "mount -t tmpfs -o size=8m tmpfs '%s' 2>/dev/null", dir);
  if (geteuid() != 0 || system(cmd) != 0) {
    printf("# skipped: needs root to mount a read-only tmpfs\n");
    free(dir);
    return;
  }
  snprintf(store, sizeof store, "%s/store", dir);
  p = open_ok(store);
  completed_instance(p, "i1", "\"kept\"");
  M(p)->destroy(p);
  snprintf(cmd, sizeof cmd, "mount -o remount,ro '%s'", dir);
  rc = system(cmd);
  if (rc == 0) {
    p = NULL;
    rc = dx_provider_open(store, NULL, &p, &err);
    if (rc == 0) {
      rc = M(p)->get_instance_info(p, "i1", &info, &err);
      if (rc == 0 && strcmp(info.output, "\"kept\"") != 0) rc = -1;
      if (rc == 0) dx_instance_info_clear(&info);
      memset(&w, 0, sizeof w);
      w.kind = DX_WI_START;
      w.instance = "i2";
      w.name = "Orch";
      w.execution_id = 1;
      if (rc == 0 && M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err) == 0) rc = -2;
      M(p)->destroy(p);
    }
  }
  snprintf(cmd, sizeof cmd, "umount '%s'", dir);
  ASSERT_EQ(system(cmd), 0);
  if (rc == -2) DX_FAIL_AT("a write to a read-only store succeeded");
  ASSERT_OK(rc);
  ASSERT_CONTAINS(err.msg, "read-only");
  free(dir);
}
