/*
** heap.c -- prefault the allocator's heap (issue 12): a fresh worker's first burst took ~1600
** first-touch page faults (fanout N=200), each a trip through the kernel (and on a VM the
** host); touched once at start, a burst's allocations reuse those pages (the JVM's
** AlwaysPreTouch idea). Costs `bytes` of resident memory per thread from the start.
*/
#include <string.h>
#include <stdlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "heap.h"

#define PIECE ((size_t)1 << 20) /* below the mmap threshold set here: from the heap */
#define MAX_PIECES 256
#define MMAP_AT ((size_t)32 << 20)

#ifdef __GLIBC__
/* The operator set malloc's thresholds (environment or tunables): theirs stand. */
static int malloc_tuned_by_operator(void) {
  const char *t = getenv("GLIBC_TUNABLES");
  return getenv("MALLOC_MMAP_THRESHOLD_") || getenv("MALLOC_TRIM_THRESHOLD_") ||
         getenv("MALLOC_TOP_PAD_") || (t && strstr(t, "glibc.malloc."));
}

/* One write a page, through a volatile pointer: a memset of 0 after malloc becomes calloc (or
** is dropped with the free) under the optimizer, and calloc skips fresh pages. */
static void touch(void *block) {
  volatile char *c = block;
  size_t i;
  for (i = 0; i < PIECE; i += 4096) c[i] = 1;
}
#endif

void dx__heap_prefault(size_t bytes) {
#ifdef __GLIBC__
  static int tuned;
  void *p[MAX_PIECES];
  size_t n = 0, i;
  if (bytes == 0) return;
  if (!__atomic_exchange_n(&tuned, 1, __ATOMIC_ACQ_REL) && !malloc_tuned_by_operator()) {
    /* Fixed thresholds (setting one turns glibc's sliding ones off): blocks under 32 MiB (the
    ** sliding threshold's own ceiling) come from the heap, and a free keeps what was touched
    ** unless twice the prefault lies unused at the top. */
    size_t trim = 2 * bytes < 2 * MMAP_AT ? 2 * MMAP_AT : 2 * bytes;
    mallopt(M_MMAP_THRESHOLD, (int)MMAP_AT);
    mallopt(M_TRIM_THRESHOLD, trim > (size_t)1 << 30 ? 1 << 30 : (int)trim);
  }
  /* Pages the heap holds already (an earlier runtime's, freed and kept) are only written
  ** again: a start after the first costs microseconds. */
  for (; n < MAX_PIECES && n * PIECE < bytes && (p[n] = malloc(PIECE)) != NULL; n++) touch(p[n]);
  for (i = n; i-- > 0;) free(p[i]);
#else
  (void)bytes;
#endif
}
