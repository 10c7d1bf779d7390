/*
** spare.h -- recycled blocks of one size, for one thread.
**
** The loop thread makes and frees an activity record (2 KB), a turn job and a cache entry for
** every activity and turn; with dozens in flight malloc's per-thread cache runs dry and each
** one took its slow path (calloc ~900 instructions for the activity record, free ~200).
** A spare list keeps up to `max` freed blocks for the next calloc (a list must cover the
** blocks in flight: activities of a delivery wait for their acks; 256 activity records are
** 512 KB kept after a burst). Not thread-safe: one list
** per owner, used from one thread. Under ASan every block goes to malloc (use-after-free
** stays visible).
*/
#ifndef DX_SPARE_H
#define DX_SPARE_H

#include <stddef.h>

typedef struct {
  void *head;  /* freed blocks, linked through their first word */
  size_t n;    /* blocks on the list */
  size_t max;  /* at most this many kept */
  size_t size; /* bytes per block */
} dx__spare_t;

void dx__spare_init(dx__spare_t *s, size_t size, size_t max);
/* A zeroed block of s->size bytes (a kept one, else calloc's); NULL when out of memory. */
void *dx__spare_calloc(dx__spare_t *s);
/* The same, with only the first `zeroed` bytes cleared (the rest is garbage, in a kept block
** and in a new one alike): for records whose tail is cleared when it is used. */
void *dx__spare_calloc_head(dx__spare_t *s, size_t zeroed);
/* p (from dx__spare_calloc of s, or NULL) is kept for reuse, or freed when the list is full. */
void dx__spare_free(dx__spare_t *s, void *p);
/* Free every kept block (the owner goes away). */
void dx__spare_drain(dx__spare_t *s);

#endif
