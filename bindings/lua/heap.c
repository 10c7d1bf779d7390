/*
** heap.c -- small blocks for the Lua state: per-size-class free lists in one reserved region.
**
** Lua allocates and frees tiny blocks all the time (tables, strings, closures, coroutines and
** their call frames; a few hundred per orchestration on the worker's loop). Going to malloc
** and free for each was about a fifth of the loop thread's CPU. Lua tells the allocator the
** size of every block it frees, so a block needs no header: a free list per 16-byte class,
** filled by bumping through one region reserved at install (pages are only backed by memory
** once touched). Blocks above DXL_HEAP_MAX, and any once the region is used up, stay with the
** state's original allocator; whether a block is ours is one range check of its address.
** Freed blocks are kept for reuse by their class (the region is given back when the state
** closes). The per-block operations are inline in heap.h.
*/
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dxlua.h"

#define RESERVE ((size_t)1 << 30) /* address space, not memory: untouched pages cost nothing */

/* ASan and memcheck see use-after-free and leaks only in blocks that come from malloc. */
static int pooling_allowed(void) {
  const char *pre = getenv("LD_PRELOAD");
  const char *env = getenv("DUROXIDE_LUA_HEAP");
#if defined(__SANITIZE_ADDRESS__)
  return 0;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return 0;
#endif
#endif
  if (env && strcmp(env, "malloc") == 0) return 0;
  return !(pre && strstr(pre, "vgpreload_memcheck"));
}

dxl_heap_t *dxl_heap_new(void) {
  dxl_heap_t *H;
  void *p;
  if (!pooling_allowed() || !(H = calloc(1, sizeof *H))) return NULL;
  p = mmap(NULL, RESERVE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
           -1, 0);
  if (p == MAP_FAILED) { /* strict overcommit, a small address space: malloc does it all */
    free(H);
    return NULL;
  }
  H->lo = H->bump = p;
  H->hi = H->lo + RESERVE;
  return H;
}

void dxl_heap_free_all(dxl_heap_t *H) {
  if (!H) return;
  munmap(H->lo, RESERVE);
  free(H);
}
