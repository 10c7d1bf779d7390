/*
** testlib.h -- a tiny test runner for the C tests.
**
** DX_TEST(name) { ... } defines a test; each test runs in a forked child (so crashes and
** leaks stay contained) with a time limit, and the runner prints TAP for `meson test`.
** Assertions print file:line and both values.
*/
#ifndef DX_TESTLIB_H
#define DX_TESTLIB_H

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*dx_test_fn)(void);
typedef struct { const char *name; dx_test_fn fn; } dx_test_entry;

#define DX_TEST_MAX 512
extern dx_test_entry dx_tests[DX_TEST_MAX];
extern int dx_tests_n;

#define DX_TEST(name)                                                               \
  static void test_##name(void);                                                    \
  __attribute__((constructor)) static void register_##name(void) {                  \
    if (dx_tests_n < DX_TEST_MAX) dx_tests[dx_tests_n++] = (dx_test_entry){#name, test_##name}; \
  }                                                                                 \
  static void test_##name(void)

#define DX_FAIL_AT(...)                                                             \
  do {                                                                              \
    fprintf(stderr, "# %s:%d: ", __FILE__, __LINE__);                              \
    fprintf(stderr, __VA_ARGS__);                                                   \
    fprintf(stderr, "\n");                                                          \
    exit(1);                                                                        \
  } while (0)

#define ASSERT(c) do { if (!(c)) DX_FAIL_AT("assertion failed: %s", #c); } while (0)
#define ASSERT_EQ(a, b)                                                             \
  do {                                                                              \
    long long _a = (long long)(a), _b = (long long)(b);                             \
    if (_a != _b) DX_FAIL_AT("%s == %s: %lld != %lld", #a, #b, _a, _b);             \
  } while (0)
#define ASSERT_NE(a, b)                                                             \
  do {                                                                              \
    long long _a = (long long)(a), _b = (long long)(b);                             \
    if (_a == _b) DX_FAIL_AT("%s != %s: both %lld", #a, #b, _a);                    \
  } while (0)
#define ASSERT_OK(rc)                                                               \
  do {                                                                              \
    int _rc = (rc);                                                                 \
    if (_rc != 0) DX_FAIL_AT("%s returned %d (%s)", #rc, _rc, dx_err_name(_rc));    \
  } while (0)
#define ASSERT_STR_EQ(a, b)                                                         \
  do {                                                                              \
    const char *_a = (a), *_b = (b);                                                \
    if (!_a || !_b || strcmp(_a, _b) != 0)                                          \
      DX_FAIL_AT("%s == %s: \"%s\" != \"%s\"", #a, #b, _a ? _a : "(null)",           \
                 _b ? _b : "(null)");                                               \
  } while (0)
#define ASSERT_CONTAINS(hay, needle)                                                \
  do {                                                                              \
    const char *_h = (hay), *_n = (needle);                                         \
    if (!_h || !strstr(_h, _n)) DX_FAIL_AT("\"%s\" does not contain \"%s\"",        \
                                           _h ? _h : "(null)", _n);                 \
  } while (0)

/* A fresh temporary directory, removed at exit of the test process. Static storage. */
const char *dx_test_tmpdir(void);
/* Directory of the build tree (DX_BUILD_DIR env or "."). */
const char *dx_test_build_dir(void);
/* Bytes of an LMDB data.mdb up to its last page in use (the newer meta page's last page; 4 KiB
** pages): the file may be longer (zeros written ahead of the pages, lmdb/map.c "growing
** data.mdb ahead"), so a cut that damages the store is one below this. */
off_t dx_test_lmdb_pages_end(const char *data_mdb);

#endif
