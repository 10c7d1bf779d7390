/*
** heap.h -- small blocks for the Lua state (heap.c): the pool's layout and its per-block
** operations, inline because the state's allocator (budget.c guard_alloc) runs them a few
** hundred times per orchestration and a call each was a measurable part of that cost.
*/
#ifndef DXL_HEAP_H
#define DXL_HEAP_H

#include <stddef.h>
#include <string.h>

#define DXL_HEAP_MAX 1024 /* larger blocks come from the state's original allocator */
#define DXL_HEAP_STEP 16  /* size classes: 1..16, 17..32, ... bytes */

typedef struct dxl_heap_s {
  char *lo, *hi;  /* the region */
  char *bump;     /* never handed out from here up */
  void *free_list[DXL_HEAP_MAX / DXL_HEAP_STEP];
  size_t live;    /* blocks handed out and not freed */
} dxl_heap_t;

/* A new pool, or NULL when pooling is off (ASan, valgrind memcheck, DUROXIDE_LUA_HEAP=malloc,
** no address space): the caller then uses its allocator for everything. */
dxl_heap_t *dxl_heap_new(void);
void dxl_heap_free_all(dxl_heap_t *H);

static inline int dxl_heap_owns(const dxl_heap_t *H, const void *p) {
  return (const char *)p >= H->lo && (const char *)p < H->hi;
}

static inline size_t dxl_heap_live(const dxl_heap_t *H) { return H->live; }

/* The class of a block of n bytes, 1 <= n <= DXL_HEAP_MAX. */
static inline size_t dxl_heap_class(size_t n) { return (n - 1) / DXL_HEAP_STEP; }

static inline int dxl_heap_same_class(size_t a, size_t b) {
  return dxl_heap_class(a) == dxl_heap_class(b);
}

/* A block of 1..DXL_HEAP_MAX bytes, NULL when the pool is used up; freed with its size. */
static inline void *dxl_heap_alloc(dxl_heap_t *H, size_t n) {
  size_t c = dxl_heap_class(n);
  void *p = H->free_list[c];
  if (p) {
    memcpy(&H->free_list[c], p, sizeof p); /* the next free block, kept in the block itself */
  } else {
    size_t size = (c + 1) * DXL_HEAP_STEP;
    if ((size_t)(H->hi - H->bump) < size) return NULL;
    p = H->bump;
    H->bump += size;
  }
  H->live++;
  return p;
}

static inline void dxl_heap_free(dxl_heap_t *H, void *p, size_t n) {
  size_t c = dxl_heap_class(n);
  memcpy(p, &H->free_list[c], sizeof p);
  H->free_list[c] = p;
  H->live--;
}

#endif
