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
** closes).
*/
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "dxlua.h"

#define STEP 16
#define N_CLASSES (DXL_HEAP_MAX / STEP)
#define RESERVE ((size_t)1 << 30) /* address space, not memory: untouched pages cost nothing */

struct dxl_heap_s {
  char *lo, *hi;  /* the region */
  char *bump;     /* never handed out from here up */
  void *free_list[N_CLASSES];
  size_t live;    /* blocks handed out and not freed */
};

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

int dxl_heap_owns(const dxl_heap_t *H, const void *p) {
  return (const char *)p >= H->lo && (const char *)p < H->hi;
}

size_t dxl_heap_live(const dxl_heap_t *H) { return H->live; }

/* The class of a block of n bytes, 1 <= n <= DXL_HEAP_MAX. */
static size_t class_of(size_t n) { return (n - 1) / STEP; }

int dxl_heap_same_class(size_t a, size_t b) { return class_of(a) == class_of(b); }

void *dxl_heap_alloc(dxl_heap_t *H, size_t n) {
  size_t c = class_of(n);
  void *p = H->free_list[c];
  if (p) {
    memcpy(&H->free_list[c], p, sizeof p); /* the next free block, kept in the block itself */
  } else {
    size_t size = (c + 1) * STEP;
    if ((size_t)(H->hi - H->bump) < size) return NULL;
    p = H->bump;
    H->bump += size;
  }
  H->live++;
  return p;
}

void dxl_heap_free(dxl_heap_t *H, void *p, size_t n) {
  size_t c = class_of(n);
  memcpy(p, &H->free_list[c], sizeof p);
  H->free_list[c] = p;
  H->live--;
}
