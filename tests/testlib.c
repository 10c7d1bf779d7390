/* testlib.c -- runner for DX_TEST tests: fork per test, time limit, TAP output. */
#include "testlib.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <time.h>

dx_test_entry dx_tests[DX_TEST_MAX];
int dx_tests_n;

static char tmpdir[256];

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb; (void)flag; (void)ftw;
  return remove(p);
}

static void rm_tmpdir(void) {
  if (tmpdir[0]) nftw(tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

const char *dx_test_tmpdir(void) {
  if (!tmpdir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof tmpdir, "%s/dxtest-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); exit(2); }
    atexit(rm_tmpdir);
  }
  return tmpdir;
}

const char *dx_test_build_dir(void) {
  const char *d = getenv("DX_BUILD_DIR");
  return d ? d : ".";
}

int main(int argc, char **argv) {
  int failed = 0, i;
  const char *only = argc > 1 ? argv[1] : NULL;
  int limit = getenv("DX_TEST_TIMEOUT") ? atoi(getenv("DX_TEST_TIMEOUT")) : 120;
  int planned = 0;
  for (i = 0; i < dx_tests_n; i++)
    if (!only || strcmp(only, dx_tests[i].name) == 0) planned++;
  printf("1..%d\n", planned);
  fflush(stdout);
  planned = 0;
  for (i = 0; i < dx_tests_n; i++) {
    pid_t pid;
    int status = 0;
    if (only && strcmp(only, dx_tests[i].name) != 0) continue;
    planned++;
    pid = fork();
    if (pid == 0) {
      alarm((unsigned)limit);
      dx_tests[i].fn();
      exit(0); /* runs atexit: removes the test's temp dir */
    }
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      printf("ok %d - %s\n", planned, dx_tests[i].name);
    } else {
      failed++;
      if (WIFSIGNALED(status))
        printf("not ok %d - %s (signal %d%s)\n", planned, dx_tests[i].name, WTERMSIG(status),
               WTERMSIG(status) == SIGALRM ? ": time limit" : "");
      else
        printf("not ok %d - %s\n", planned, dx_tests[i].name);
    }
    fflush(stdout);
  }
  return failed ? 1 : 0;
}

off_t dx_test_lmdb_pages_end(const char *data_mdb) {
  unsigned char m[2][136];
  uint64_t last[2] = {0, 0}, txn[2] = {0, 0};
  int fd = open(data_mdb, O_RDONLY), i, j;
  ASSERT(fd >= 0);
  for (i = 0; i < 2; i++) { /* meta pages 0 and 1: last page at 120, txn id at 128 (+16) */
    ASSERT(pread(fd, m[i], sizeof m[i], (off_t)i * 4096 + 16) == (ssize_t)sizeof m[i]);
    for (j = 7; j >= 0; j--) {
      last[i] = last[i] << 8 | m[i][120 + j];
      txn[i] = txn[i] << 8 | m[i][128 + j];
    }
  }
  close(fd);
  return (off_t)(last[txn[1] > txn[0]] + 1) * 4096;
}
