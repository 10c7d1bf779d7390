/*
** test_lmdb_grow.c -- data.mdb grown ahead of the pages in use (providers/lmdb/map.c "growing
** data.mdb ahead"): durable writes keep the file longer than the pages LMDB uses, rarely, never
** past the store's maximum size nor the process's file size limit; a failed fill leaves commits
** working; a file cut below its pages in use is still reported as truncated; `check` passes.
** The tests lower dx__lm_fill_from so that small stores fill too.
*/
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "providers/lmdb/lmdb_int.h"
#include "testlib.h"

#define T0 INT64_C(1700000000000)
#define M(p) ((p)->methods)
#define MIB ((size_t)1 << 20)

static char *new_store(const char *name) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", dx_test_tmpdir(), name);
  return strdup(buf);
}

static dx_provider_t *open_with(const char *store, int no_sync, size_t max_size) {
  dx_provider_opts_t o;
  dx_provider_t *p = NULL;
  dx_error_t err;
  int rc;
  memset(&o, 0, sizeof o);
  o.version = 1;
  o.no_sync = no_sync;
  o.max_size = max_size;
  rc = dx_provider_open(store, &o, &p, &err);
  if (rc) DX_FAIL_AT("dx_provider_open(%s): %s: %s", store, dx_err_name(rc), err.msg);
  return p;
}

static shared_env_t *env_of(dx_provider_t *p) { return ((lm_t *)p)->se; }

static size_t file_size(dx_provider_t *p) {
  struct stat st;
  ASSERT(fstat(env_of(p)->data_fd, &st) == 0);
  return (size_t)st.st_size;
}

/* Bytes up to the last page in use. */
static size_t used_size(dx_provider_t *p) {
  MDB_envinfo info;
  ASSERT(mdb_env_info(env_of(p)->env, &info) == 0);
  return ((size_t)info.me_last_pgno + 1) * env_of(p)->psize;
}

/* One start of instance <tag>-<i> with a 2 KiB input: a top-level write txn of its own. */
static int start_one(dx_provider_t *p, const char *tag, int i, dx_error_t *err) {
  static char data[2050];
  dx_work_item_t w;
  char id[64];
  memset(data, 'x', sizeof data - 3);
  data[0] = '"';
  data[sizeof data - 3] = '"';
  data[sizeof data - 2] = 0;
  snprintf(id, sizeof id, "%s-%d", tag, i);
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_START;
  w.instance = id;
  w.name = "Orch";
  w.execution_id = 1;
  w.data = data;
  return M(p)->enqueue_for_orchestrator(p, T0, &w, 0, err);
}

typedef struct {
  int n;
  char first[600];
} problems_t;

static void on_problem(void *ud, const char *msg) {
  problems_t *pr = ud;
  if (pr->n++ == 0) snprintf(pr->first, sizeof pr->first, "%s", msg);
}

static void check_clean(dx_provider_t *p) {
  uint64_t records = 0, problems = 0;
  problems_t pr;
  dx_error_t err;
  memset(&pr, 0, sizeof pr);
  ASSERT_OK(M(p)->check(p, on_problem, &pr, &records, &problems, &err));
  ASSERT(records > 0);
  if (problems) DX_FAIL_AT("check found %d problems: %s", pr.n, pr.first);
}

DX_TEST(lmdb_grow_file_stays_ahead_of_the_pages_in_use) {
  char *store = new_store("ahead");
  dx_provider_t *p;
  dx_error_t err;
  size_t size, last = 0;
  int i, grew = 0;
  dx__lm_fill_from = 0;
  p = open_with(store, 0, 0);
  for (i = 0; i < 1500; i++) {
    ASSERT_OK(start_one(p, "i", i, &err));
    size = file_size(p);
    /* a commit appends a few pages at most: it lands in the zeros a fill wrote ahead of it */
    if (size <= used_size(p))
      DX_FAIL_AT("after start %d: data.mdb is %zu bytes, its pages reach %zu", i, size,
                 used_size(p));
    /* each fill writes at least 1 MiB: the file grows in a few steps, not in every commit */
    if (size != last && last && size < last + MIB)
      DX_FAIL_AT("after start %d: data.mdb grew from %zu to %zu bytes", i, last, size);
    if (size != last) grew++;
    last = size;
  }
  ASSERT(used_size(p) > 3 * MIB);
  ASSERT(grew >= 3);
  ASSERT_EQ(env_of(p)->fill_off, 0);
  check_clean(p);
  M(p)->destroy(p);
  /* reopened: the zeros past the last page are no damage */
  p = open_with(store, 0, 0);
  check_clean(p);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_grow_small_and_unsynced_stores_never_fill) {
  char *store = new_store("small"), *fast = new_store("nosync");
  dx_provider_t *p = open_with(store, 0, 0), *q;
  dx_error_t err;
  int i;
  /* the default threshold: a store using little never writes zeros ahead */
  for (i = 0; i < 5; i++) ASSERT_OK(start_one(p, "i", i, &err));
  ASSERT(file_size(p) < dx__lm_fill_from);
  M(p)->destroy(p);
  /* a no_sync handle's commits do not flush: nothing to save them (the store's creation is
  ** durable, whatever the handle) */
  q = open_with(fast, 1, 0);
  dx__lm_fill_from = 0;
  for (i = 0; i < 20; i++) ASSERT_OK(start_one(q, "i", i, &err));
  ASSERT(file_size(q) < used_size(q) + 64 * 1024);
  M(q)->destroy(q);
  free(store);
  free(fast);
}

DX_TEST(lmdb_grow_never_past_the_maximum_size) {
  char *store = new_store("max");
  dx_provider_t *p;
  dx_error_t err;
  int i, rc = 0;
  dx__lm_fill_from = 0;
  p = open_with(store, 0, 2 * MIB);
  for (i = 0; i < 5000 && rc == 0; i++) {
    rc = start_one(p, "i", i, &err);
    ASSERT(file_size(p) <= 2 * MIB);
  }
  ASSERT_EQ(rc, DX_EFULL); /* full at its limit, as before */
  ASSERT_CONTAINS(err.msg, "maximum size");
  ASSERT(file_size(p) <= 2 * MIB);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_grow_failed_fill_leaves_commits_working) {
  char *store = new_store("fault");
  dx_provider_t *p;
  dx_instance_info_t info;
  dx_error_t err;
  int i;
  dx__lm_fill_from = 0;
  dx__lm_fill_fault = ENOSPC;
  p = open_with(store, 0, 0);
  for (i = 0; i < 200; i++) ASSERT_OK(start_one(p, "i", i, &err));
  ASSERT_EQ(env_of(p)->fill_off, 1); /* stopped after the first failure */
  ASSERT(file_size(p) < used_size(p) + 64 * 1024);
  ASSERT_OK(M(p)->get_instance_info(p, "i-199", &info, &err));
  dx_instance_info_clear(&info);
  check_clean(p);
  M(p)->destroy(p);
  free(store);
}

/* The process may not write files past a limit (RLIMIT_FSIZE): past it, a write raises
** SIGXFSZ, which kills (this child: the test fails). Fills stop at the limit. */
DX_TEST(lmdb_grow_stops_at_the_file_size_limit) {
  char *store = new_store("rlimit");
  dx_provider_t *p;
  struct rlimit lim;
  dx_error_t err;
  size_t limit;
  int i;
  dx__lm_fill_from = SIZE_MAX; /* none yet */
  p = open_with(store, 0, 0);
  for (i = 0; i < 10; i++) ASSERT_OK(start_one(p, "i", i, &err));
  /* the next fill (1 MiB) would pass the limit */
  limit = (file_size(p) + 256 * 1024) & ~(size_t)4095;
  lim.rlim_cur = lim.rlim_max = limit;
  ASSERT(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  signal(SIGXFSZ, SIG_DFL);
  dx__lm_fill_from = 0;
  for (i = 10; i < 40; i++) ASSERT_OK(start_one(p, "i", i, &err));
  ASSERT_EQ(file_size(p), limit); /* filled up to it */
  ASSERT_EQ(env_of(p)->fill_off, 0);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(lmdb_grow_file_cut_below_its_pages_is_still_truncated) {
  char *store = new_store("trunc");
  dx_provider_t *p;
  dx_instance_info_t info;
  dx_error_t err;
  char path[600];
  size_t used;
  int i;
  dx__lm_fill_from = 0;
  p = open_with(store, 0, 0);
  for (i = 0; i < 200; i++) ASSERT_OK(start_one(p, "i", i, &err));
  used = used_size(p);
  ASSERT(file_size(p) > used + env_of(p)->psize);
  snprintf(path, sizeof path, "%s/data.mdb", store);
  /* cut in the zeros: no page in use is lost */
  ASSERT(truncate(path, (off_t)(used + env_of(p)->psize)) == 0);
  ASSERT_OK(M(p)->get_instance_info(p, "i-199", &info, &err));
  dx_instance_info_clear(&info);
  /* cut below the pages in use: damage, reported */
  ASSERT(truncate(path, (off_t)(used / 2)) == 0);
  ASSERT_EQ(M(p)->get_instance_info(p, "i-199", &info, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "truncated");
  M(p)->destroy(p);
  free(store);
}
