/*
** heap.h -- prefault the allocator's heap at a worker's start (heap.c).
*/
#ifndef DX_HEAP_H
#define DX_HEAP_H

#include <stddef.h>

/* Touch `bytes` of the calling thread's malloc heap and leave them to the allocator, so later
** allocations of this thread reuse touched pages instead of taking a page fault each. The first
** call with bytes > 0 also fixes glibc's mmap and trim thresholds (process-wide) so freed
** memory stays in the heap. At most once per `role` (a small index: each worker thread kind
** once per process; later runtimes' threads reuse the same arenas). 0: nothing, no settings
** changed. No-op where the C library is not glibc. Thread-safe. */
void dx__heap_prefault(int role, size_t bytes);

enum { DX_HEAP_LOOP = 0, DX_HEAP_STORE = 1 };

#endif
