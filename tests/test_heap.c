/*
** test_heap.c -- the heap prefault (core/src/heap.c): a prefault touches the pages it asks
** for (again: the pages kept, no new ones), and the thread's later allocations reuse them instead of faulting; 0
** touches nothing (the control: the same allocations then fault). Fault counts come from
** getrusage (each test runs in a fresh forked child). The reuse checks are skipped under
** AddressSanitizer, whose allocator keeps freed memory in quarantine.
*/
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "duroxide.h"
#include "heap.h"
#include "testlib.h"

#if defined(__SANITIZE_ADDRESS__)
#define REUSE_CHECKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REUSE_CHECKS 0
#endif
#endif
#ifndef REUSE_CHECKS
#define REUSE_CHECKS 1
#endif
#ifndef __GLIBC__ /* the prefault does nothing there */
#undef REUSE_CHECKS
#define REUSE_CHECKS 0
#endif

#define MIB ((size_t)1 << 20)

/* Fault counts measure pages only with 4 KiB pages and no huge pages mapped at a fault
** (transparent huge pages, or one of the multi-size ones, set to "always": one fault may then
** map 64 KiB or 2 MiB), and only where the prefault runs (glibc). The reuse checks still hold. */
static int counts_pages(void) {
  static const char *const knobs[] = {
      "/sys/kernel/mm/transparent_hugepage/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-16kB/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-32kB/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-128kB/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-256kB/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-512kB/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-1024kB/enabled",
      "/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"};
  size_t i;
#ifndef __GLIBC__
  return 0;
#endif
  if (sysconf(_SC_PAGESIZE) != 4096) return 0;
  for (i = 0; i < sizeof knobs / sizeof knobs[0]; i++) {
    char buf[128] = "";
    FILE *f = fopen(knobs[i], "r");
    if (!f) continue;
    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
    fclose(f);
    if (strstr(buf, "[always]")) return 0;
  }
  return 1;
}

static long faults(void) {
  struct rusage r;
  getrusage(RUSAGE_THREAD, &r);
  return r.ru_minflt;
}

/* Allocate and write `bytes` in 1 KiB blocks (a burst's small allocations); the faults taken. */
static long burst(size_t bytes, void ***out, size_t *n) {
  size_t k = bytes / 1024, i;
  long f0 = faults();
  void **v = malloc(k * sizeof *v);
  for (i = 0; v && i < k; i++) {
    volatile char *c = malloc(1024);
    if (!c) break;
    c[0] = 1;
    c[1023] = 1;
    v[i] = (void *)c;
  }
  *out = v;
  *n = v ? i : 0;
  return faults() - f0;
}

static void burst_free(void **v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) free(v[i]);
  free(v);
}

DX_TEST(heap_prefault_touches_its_pages_once_and_a_burst_reuses_them) {
  void **v;
  size_t n;
  long f0 = faults(), touched, again, later;
  dx__heap_prefault(8 * MIB);
  touched = faults() - f0;
  if (counts_pages()) ASSERT(touched >= 1500); /* 8 MiB are 2048 pages; a fresh child had few */
  f0 = faults();
  dx__heap_prefault(8 * MIB); /* again (a later runtime): the kept pages, written again */
  again = faults() - f0;
  if (REUSE_CHECKS) ASSERT(again < 50); /* (under ASan the freed pieces sit in quarantine) */
  later = burst(6 * MIB, &v, &n);
  ASSERT_EQ(n, (size_t)6 * 1024);
  if (REUSE_CHECKS) ASSERT(later < 300);
  burst_free(v, n);
}

DX_TEST(heap_prefault_of_zero_touches_nothing_and_a_burst_faults) {
  void **v;
  size_t n;
  long f0 = faults(), later;
  dx__heap_prefault(0);
  ASSERT(faults() - f0 < 10);
  later = burst(6 * MIB, &v, &n);
  ASSERT_EQ(n, (size_t)6 * 1024);
  if (REUSE_CHECKS && counts_pages()) ASSERT(later >= 1000); /* the control: fresh pages fault */
  burst_free(v, n);
}

static void *store_role(void *arg) {
  long *out = arg, f0 = faults();
  void **v;
  size_t n;
  dx__heap_prefault(8 * MIB); /* this thread's own arena */
  out[0] = faults() - f0;
  out[1] = burst(6 * MIB, &v, &n);
  burst_free(v, n);
  return NULL;
}

DX_TEST(heap_prefault_on_another_thread_touches_that_threads_heap) {
  pthread_t t;
  long got[2] = {0, 0};
  ASSERT_EQ(pthread_create(&t, NULL, store_role, got), 0);
  ASSERT_EQ(pthread_join(t, NULL), 0);
  if (counts_pages()) ASSERT(got[0] >= 1500);
  if (REUSE_CHECKS) ASSERT(got[1] < 300);
}

DX_TEST(heap_prefault_option_parses_and_is_bounded) {
  dx_options_t o;
  dx_error_t err = {0};
  dx_options_init(&o);
  ASSERT_EQ(o.heap_prefault, (int64_t)DX_HEAP_PREFAULT_DEFAULT);
  ASSERT_OK(dx_options_set(&o, "heap_prefault", "16m", &err));
  ASSERT_EQ(o.heap_prefault, (int64_t)16 << 20);
  ASSERT_OK(dx_options_validate(&o, &err));
  ASSERT_OK(dx_options_set(&o, "heap-prefault", "0", &err));
  ASSERT_OK(dx_options_validate(&o, &err));
  ASSERT_EQ(dx_options_set(&o, "heap_prefault", "lots", &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "--heap-prefault");
  ASSERT_OK(dx_options_set(&o, "heap_prefault", "300m", &err));
  ASSERT_EQ(dx_options_validate(&o, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "heap_prefault must be 0 (off) to 256m");
}

