/* credit.h -- how many activities a worker asks the store for (internal; loop thread only).
**
** A worker fetches activities only for slots it can start now (issue 12 item 2). Lua
** activities share the one loop: an activity that computes holds it until it yields or ends,
** so what the loop can start is bounded by CPU time, not by --worker-concurrency alone. The
** credit keeps the unstarted CPU work a worker takes in one fetch near DX__CREDIT_LOOP_NS,
** from a running average of how long one activity's start ran on the loop: activities that
** return at once or wait (I/O, timers, C activities on the thread pool) keep the big batches
** of the group commit; 50 ms of busy Lua takes one at a time, so other workers get the rest.
** Until the first activity is measured a fetch takes at most DX__CREDIT_FIRST. */
#ifndef DX_CREDIT_H
#define DX_CREDIT_H
#include <stdint.h>

#define DX__CREDIT_LOOP_NS 10000000ull /* unstarted CPU work one fetch may bring: 10 ms */
#define DX__CREDIT_FIRST 4             /* fetch size before any activity was measured */

typedef struct {
  int slots;        /* worker_concurrency: activities held at once */
  int asked;        /* credit the store holds and has not used yet */
  int held;         /* fetched and not yet settled */
  uint64_t cost_ns; /* running average of one activity start's loop time; 0: none yet */
} dx__credit_t;

void dx__credit_init(dx__credit_t *c, int slots);
/* The store delivered n activities (they start now). */
void dx__credit_fetched(dx__credit_t *c, int n);
/* One delivered activity's settlement was applied: its slot is free. */
void dx__credit_settled(dx__credit_t *c);
/* One activity's start ran ns on the loop (to its first yield or its end). */
void dx__credit_cost(dx__credit_t *c, uint64_t ns);
/* How many more activities to ask the store for now (counted as asked); 0: none. */
int dx__credit_top_up(dx__credit_t *c);
#endif
