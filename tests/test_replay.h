/*
** test_replay.h -- what the test_replay program's files share (defined in test_replay.c).
*/
#ifndef DX_TEST_REPLAY_H
#define DX_TEST_REPLAY_H

#include "replay_sim.h"

/* "Hello": greet with an activity, await it, return its result. */
extern const step_t P_GREET[];
/* Commit turn 1 with `before`, then replay with `after` on an ActivityCompleted for event 2:
** the turn fails with a nondeterminism error containing `needle`. */
void nondet_case(const step_t *before, const step_t *after, const char *needle);

#endif
