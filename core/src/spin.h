/*
** spin.h -- a lock for short critical sections taken very often on the loop thread (a metric
** record: ~70 per session orchestration). Uncontended it costs one atomic exchange and one
** release store, where a mutex costs two library calls (uv_mutex_lock -> pthread, ~50
** instructions a pair). A waiter spins a little, then yields its CPU, so a long holder (a
** /metrics rendering) or a holder that lost its CPU does not make the waiter burn a core.
** Not for waits on a condition (no condition variable goes with it), not recursive.
*/
#ifndef DX_SPIN_H
#define DX_SPIN_H

#include <sched.h>
#include <stdatomic.h>

typedef struct {
  atomic_int held; /* 0 = free; zero-filled memory is an unlocked spin lock */
} dx__spin_t;

#define DX__SPIN_TRIES 100 /* spins before yielding: a record holds the lock for ~100 ns */

static inline void dx__spin_lock(dx__spin_t *s) {
  while (atomic_exchange_explicit(&s->held, 1, memory_order_acquire)) {
    int n = 0;
    /* wait on a plain load (no cache-line ping-pong with the holder) */
    while (atomic_load_explicit(&s->held, memory_order_relaxed))
      if (++n >= DX__SPIN_TRIES) {
        sched_yield();
        n = 0;
      }
  }
}

static inline void dx__spin_unlock(dx__spin_t *s) {
  atomic_store_explicit(&s->held, 0, memory_order_release);
}

#endif
