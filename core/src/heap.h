/*
** heap.h -- prefault the allocator's heap at a worker's start (heap.c).
*/
#ifndef DX_HEAP_H
#define DX_HEAP_H

#include <stddef.h>

/* Touch `bytes` of the calling thread's malloc heap and leave them to the allocator, so later
** allocations of this thread reuse touched pages instead of taking a page fault each. Called
** at every runtime start, by its loop thread and by its store thread (pages the heap kept
** from an earlier call are only written again). The first call with bytes > 0 also fixes
** glibc's mmap and trim thresholds (process-wide) so freed memory stays in the heap. 0:
** nothing, no settings changed. No-op where the C library is not glibc. Thread-safe. */
void dx__heap_prefault(size_t bytes);

#endif
