/*
** orch_cache.h -- the orchestration cache: kept turns (replay.h) of a worker, by instance,
** bounded by a memory budget with least-recently-used eviction (internal).
**
** The loop thread takes a kept turn out for the instance's next turn and puts it back once
** that turn's commit was applied; a turn out of the cache (running, or its commit in flight)
** is not in it, so what the cache holds always matches a committed history. The store thread
** asks dx__ocache_holds and dx__ocache_recent while fetching (the provider's history hint):
** those are the calls from another thread, under the cache's mutex (which also guards every
** change to the table and the recency list).
*/
#ifndef DX_ORCH_CACHE_H
#define DX_ORCH_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "replay.h"

typedef struct dx_ocache_s dx_ocache_t;

/* A cache of at most `budget` bytes (> 0); metrics may be NULL. NULL on ENOMEM. */
dx_ocache_t *dx__ocache_new(int64_t budget, dx_metrics_t *metrics);
/* Free every kept turn (their code goes: loop thread, host alive) and the cache. */
void dx__ocache_free(dx_ocache_t *c);
/* The kept turn of `instance`, taken out of the cache (the caller owns it), or NULL. */
dx_turn_t *dx__ocache_take(dx_ocache_t *c, const char *instance);
/* Keep t (dx__turn_keep done) as the most recently used; evicts the least recently used
** turns past the budget (a turn larger than the whole budget is freed at once). */
void dx__ocache_put(dx_ocache_t *c, dx_turn_t *t);
/* Free the kept turn of `instance`, if any (c may be NULL). */
void dx__ocache_drop(dx_ocache_t *c, const char *instance);
/* Loop thread: the turn of `instance` is out of the cache and its ack (leaving the execution
** with n_events events) is on its way to the store; the turn is kept once that ack is applied.
** Until dx__ocache_expect_end, holds answers as if it were kept already: a fetch of the
** instance's next turn in the meantime (the same transaction, or one the store starts before
** the loop learnt of the commit) then reads only the last event, which the loop receives after
** the turn is kept (or, if keeping failed, fetches again whole: runtime.c). The provider checks
** that the history holds exactly n_events, so a lost or refused ack is read whole. 0 when out
** of memory (nothing expected). `instance` is borrowed, not copied: it must stay valid until
** the caller's dx__ocache_expect_end (the fetched item's id, freed after it). */
int dx__ocache_expect(dx_ocache_t *c, const char *instance, uint64_t execution_id,
                      uint64_t n_events);
/* Loop thread: the expectation of `instance` ends (the turn was kept, or not). */
void dx__ocache_expect_end(dx_ocache_t *c, const char *instance);
/* Any thread: 1 when the cache holds `instance` (or expects it), with the execution and the
** number of its events held; 0 otherwise. */
int dx__ocache_holds(dx_ocache_t *c, const char *instance, uint64_t *execution_id,
                     uint64_t *n_events);
/* Any thread: up to max held instances, most recently used first (ids malloc'd copies);
** returns how many (fewer when out of memory). */
size_t dx__ocache_recent(dx_ocache_t *c, size_t max, char **ids, uint64_t *execution_ids,
                         uint64_t *n_events);
/* Kept turns and their bytes (as charged against the budget). */
size_t dx__ocache_count(const dx_ocache_t *c);
int64_t dx__ocache_bytes(const dx_ocache_t *c);

#endif
