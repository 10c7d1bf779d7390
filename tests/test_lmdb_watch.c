/*
** test_lmdb_watch.c -- the LMDB files check with the lock file watched (providers/lmdb/map.c
** "watching the lock file"): a check skips the lock file's lookup only while the kernel
** reported no change to it, so a lost lock file is still reported by the next call, and a
** truncation of data.mdb (checked every time) too, whoever changed the file; another process's
** commits are read, not taken for damage. Every case runs with the watch and without it (the
** fallback when inotify is unavailable).
*/
#include <sys/inotify.h>
#include <sys/wait.h>

#include "providers/lmdb/lmdb_int.h"
#include "testlib.h"

#define T0 INT64_C(1700000000000)
#define M(p) ((p)->methods)

static int watching; /* the mode the current case runs in */

static char *new_store(const char *name) {
  char buf[512];
  snprintf(buf, sizeof buf, "%s/%s-%s", dx_test_tmpdir(), name, watching ? "watch" : "full");
  return strdup(buf);
}

static dx_provider_t *open_ok(const char *store) {
  dx_provider_t *p = NULL;
  dx_error_t err;
  int rc;
  dx__lm_watch_files = watching;
  rc = dx_provider_open(store, NULL, &p, &err);
  if (rc) DX_FAIL_AT("dx_provider_open(%s): %s: %s", store, dx_err_name(rc), err.msg);
  return p;
}

static shared_env_t *env_of(dx_provider_t *p) { return ((lm_t *)p)->se; }

/* Starts of n instances `<tag>-<i>` with a 2 KiB input each: the file grows past its meta
** pages. */
static void fill(dx_provider_t *p, const char *tag, int n) {
  static char data[2050];
  dx_work_item_t w;
  dx_error_t err;
  char id[64];
  int i;
  memset(data, 'x', sizeof data - 3);
  data[0] = '"';
  data[sizeof data - 3] = '"';
  data[sizeof data - 2] = 0;
  for (i = 0; i < n; i++) {
    snprintf(id, sizeof id, "%s-%d", tag, i);
    memset(&w, 0, sizeof w);
    w.kind = DX_WI_START;
    w.instance = id;
    w.name = "Orch";
    w.execution_id = 1;
    w.data = data;
    ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  }
}

/* A read (a top-level read txn): 0 when the files passed the check (the id is unknown). */
static int read_call(dx_provider_t *p, dx_error_t *err) {
  dx_instance_info_t info;
  int rc = M(p)->get_instance_info(p, "nobody", &info, err);
  if (rc == 0) dx_instance_info_clear(&info);
  return rc == DX_ENOTFOUND ? 0 : rc;
}

/* Reads until the check is in its quiet state: with the watch, the last look at the lock file
** passed and no change came since, so the next one skips it. */
static void settle(dx_provider_t *p) {
  dx_error_t err;
  ASSERT_OK(read_call(p, &err));
  ASSERT_OK(read_call(p, &err));
  if (watching) ASSERT_EQ(env_of(p)->lock_clean, 1);
}

static void run_in_child(void (*fn)(const char *), const char *store) {
  int status;
  pid_t pid = fork();
  ASSERT(pid >= 0);
  if (pid == 0) {
    fn(store);
    _exit(0);
  }
  ASSERT(waitpid(pid, &status, 0) == pid);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void data_path(char *out, size_t n, const char *store, const char *file) {
  snprintf(out, n, "%s/%s", store, file);
}


static void truncate_half(const char *store) {
  char path[600];
  data_path(path, sizeof path, store, "data.mdb");
  if (truncate(path, dx_test_lmdb_pages_end(path) / 2) != 0) _exit(3);
}

static void writer_child(const char *store) {
  dx_provider_t *q = NULL;
  dx_error_t err;
  if (dx_provider_open(store, NULL, &q, &err) != 0) _exit(4);
  fill(q, "child", 40);
  M(q)->destroy(q);
}

static void case_watch_is_used(void) {
  char *store = new_store("used");
  dx_provider_t *p = open_ok(store);
  int fd = inotify_init1(IN_CLOEXEC);
  if (fd < 0) {
    /* no inotify here (or the user's instances used up): the fallback is what runs */
    ASSERT_EQ(env_of(p)->watch_fd, -1);
  } else {
    close(fd);
    ASSERT_EQ(env_of(p)->watch_fd >= 0, watching);
  }
  M(p)->destroy(p);
  free(store);
}

static void case_truncation_after_quiet_reads(int by_child) {
  char *store = new_store(by_child ? "trunc-child" : "trunc");
  dx_provider_t *p = open_ok(store);
  dx_error_t err;
  fill(p, "i", 40);
  settle(p);
  if (by_child) run_in_child(truncate_half, store);
  else truncate_half(store);
  ASSERT_EQ(read_call(p, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "truncated");
  ASSERT_EQ(read_call(p, &err), DX_ECORRUPT); /* and every call after it */
  ASSERT_CONTAINS(err.msg, "truncated");
  ASSERT_EQ(M(p)->begin(p, &err), DX_ECORRUPT);
  M(p)->destroy(p);
  free(store);
}

static void case_another_process_commits(void) {
  char *store = new_store("commits");
  dx_provider_t *p = open_ok(store);
  dx_instance_info_t info;
  dx_error_t err;
  fill(p, "i", 2);
  settle(p);
  run_in_child(writer_child, store); /* grows data.mdb and its meta page's last page */
  ASSERT_OK(read_call(p, &err));
  fill(p, "j", 40); /* a write after it: the map and the file are read as they are now */
  settle(p);
  ASSERT_OK(M(p)->get_instance_info(p, "child-39", &info, &err)); /* the child's write */
  dx_instance_info_clear(&info);
  M(p)->destroy(p);
  free(store);
}

enum { LOCK_UNLINK, LOCK_RENAME_AWAY, LOCK_REPLACED };

static void case_lock_file_lost(int how) {
  static const char *names[] = {"lock-unlink", "lock-away", "lock-replaced"};
  char *store = new_store(names[how]);
  dx_provider_t *p = open_ok(store);
  dx_error_t err;
  char lock[600], other[600];
  int fd;
  fill(p, "i", 2);
  settle(p);
  data_path(lock, sizeof lock, store, "lock.mdb");
  data_path(other, sizeof other, store, "other.mdb");
  if (how == LOCK_UNLINK) {
    ASSERT(unlink(lock) == 0);
  } else if (how == LOCK_RENAME_AWAY) {
    ASSERT(rename(lock, other) == 0);
  } else {
    ASSERT((fd = open(other, O_CREAT | O_WRONLY, 0600)) >= 0);
    close(fd);
    ASSERT(rename(other, lock) == 0); /* a new lock.mdb in its place */
  }
  ASSERT_EQ(read_call(p, &err), DX_ECORRUPT);
  ASSERT_CONTAINS(err.msg, "lock.mdb was deleted or replaced");
  ASSERT_EQ(M(p)->begin(p, &err), DX_ECORRUPT); /* sticky */
  M(p)->destroy(p);
  free(store);
}

static void both(void (*fn)(void)) {
  for (watching = 1; watching >= 0; watching--) fn();
  dx__lm_watch_files = 1;
}

static void trunc_here(void) { case_truncation_after_quiet_reads(0); }
static void trunc_child(void) { case_truncation_after_quiet_reads(1); }
static void lock_unlink(void) { case_lock_file_lost(LOCK_UNLINK); }
static void lock_away(void) { case_lock_file_lost(LOCK_RENAME_AWAY); }
static void lock_replaced(void) { case_lock_file_lost(LOCK_REPLACED); }

DX_TEST(lmdb_files_watch_is_used_when_inotify_is_there) { both(case_watch_is_used); }
DX_TEST(lmdb_truncation_after_quiet_reads_is_reported_by_the_next_call) { both(trunc_here); }
DX_TEST(lmdb_truncation_by_another_process_is_reported_by_the_next_call) { both(trunc_child); }
DX_TEST(lmdb_another_process_commits_are_read_not_taken_for_damage) {
  both(case_another_process_commits);
}
DX_TEST(lmdb_unlinked_lock_file_is_reported_by_the_next_call) { both(lock_unlink); }
DX_TEST(lmdb_lock_file_renamed_away_is_reported_by_the_next_call) { both(lock_away); }
DX_TEST(lmdb_lock_file_replaced_is_reported_by_the_next_call) { both(lock_replaced); }
