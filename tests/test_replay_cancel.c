/*
** test_replay_cancel.c -- replay checks of cancelled futures (issue 11): a future persisted
** history cancelled (its dropped_future breadcrumb) must be cancelled again by the code on
** replay, and a future history did not cancel must not be, or the turn fails with a
** nondeterminism error naming the future (reference §3.3; driven by replay_sim.h).
*/
#include "replay_sim.h"

/* Turn 1 schedules; turn 2 (the timer at event 3 fires) may cancel future 0. */
static void play_two_turns(sim_t *s, const step_t *prog) {
  sim_init(s, "i1", "Orch", prog);
  sim_begin(s, NULL);
  msg_timer(s, 3, T0 + 10);
  sim_run(s);
  ASSERT_EQ(sim_action(s), DX_TURN_ACK);
  sim_next(s);
}

/* Play `before` for two turns, then replay with `after` on the event "go". */
static void replay_with(const step_t *before, const step_t *after, const char *needle) {
  sim_t s;
  play_two_turns(&s, before);
  s.host.prog = after;
  msg_ext(&s, "go", "\"g\"");
  sim_run(&s);
  assert_nondet(&s, needle);
  sim_free(&s);
}

DX_TEST(replay_of_an_unchanged_cancel_passes) {
  static const step_t p[] = {ACT("A", "1"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                             AWAIT(2), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  play_two_turns(&s, p);
  msg_ext(&s, "go", "\"g\"");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "7:ExtEvent 8:Completed");
  ASSERT_EQ(a->status, DX_STATUS_COMPLETED);
  sim_free(&s);
}

DX_TEST(replay_fails_when_the_code_no_longer_cancels_an_activity) {
  static const step_t v1[] = {ACT("A", "1"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                              AWAIT(2), RETURN_LAST};
  static const step_t v2[] = {ACT("A", "1"), TIMER(10), AWAIT(1), WAIT("go"), AWAIT(2),
                              END};
  replay_with(v1, v2, "activity A at event 2 was cancelled in history but the code no "
                      "longer cancels it");
}

DX_TEST(replay_fails_when_the_code_now_cancels_an_activity) {
  static const step_t v1[] = {ACT("A", "1"), TIMER(10), AWAIT(1), WAIT("go"), AWAIT(2),
                              RETURN_LAST};
  static const step_t v2[] = {ACT("A", "1"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                              AWAIT(2), RETURN_LAST};
  replay_with(v1, v2, "activity A at event 2 was not cancelled in history but the code now "
                      "cancels it");
}

DX_TEST(replay_fails_when_a_cancelled_wait_is_no_longer_cancelled) {
  static const step_t v1[] = {WAIT("stop"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                              AWAIT(2), RETURN_LAST};
  static const step_t v2[] = {WAIT("stop"), TIMER(10), AWAIT(1), WAIT("go"), AWAIT(2),
                              END};
  replay_with(v1, v2, "event wait stop at event 2 was cancelled in history");
}

DX_TEST(replay_fails_when_a_cancelled_sub_orchestration_is_no_longer_cancelled) {
  static const step_t v1[] = {SUB("Kid", "1"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                              AWAIT(2), RETURN_LAST};
  static const step_t v2[] = {SUB("Kid", "1"), TIMER(10), AWAIT(1), WAIT("go"), AWAIT(2),
                              END};
  replay_with(v1, v2, "sub-orchestration Kid at event 2 was cancelled in history");
}

DX_TEST(replay_fails_when_a_dequeue_is_newly_cancelled) {
  static const step_t v1[] = {DEQUEUE("jobs"), TIMER(10), AWAIT(1), WAIT("go"), AWAIT(2),
                              RETURN_LAST};
  static const step_t v2[] = {DEQUEUE("jobs"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                              AWAIT(2), RETURN_LAST};
  replay_with(v1, v2, "at event 2 was not cancelled in history but the code now cancels it");
}

/* A select loser whose result was in the same batch: the cancel changed nothing then (no
** breadcrumb), and replaying it passes. */
DX_TEST(replay_of_a_cancel_that_changed_nothing_passes) {
  static const step_t p[] = {ACT("A", "1"), ACT("B", "2"), SELECT(0, 1), WAIT("go"),
                             AWAIT(2), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  msg_act_done(&s, 3, "\"b\"");
  msg_act_done(&s, 2, "\"a\"");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "4:ActDone<3 5:ActDone<2 6:ExtSub");
  ASSERT_EQ(a->cancelled_len, 0);
  sim_next(&s);
  msg_ext(&s, "go", "\"g\"");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "7:ExtEvent 8:Completed");
  ASSERT_STR_EQ(s.host.log, "start(null) sel1(\"b\") ok(\"g\")");
  sim_free(&s);
}

/* A late result of the cancelled activity is in history; replay cancels it again. */
DX_TEST(replay_of_a_cancel_with_a_late_result_passes) {
  static const step_t p[] = {ACT("A", "1"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                             AWAIT(2), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  play_two_turns(&s, p);
  msg_act_done(&s, 2, "\"late\"");
  sim_run(&s);
  ASSERT_KINDS(&s, "7:ActDone<2");
  sim_next(&s);
  msg_ext(&s, "go", "\"g\"");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "8:ExtEvent 9:Completed");
  ASSERT_STR_EQ(a->output, "\"g\"");
  sim_free(&s);
}

/* Code that now returns while still holding the future drops it (as the reference's
** drop-on-return): the breadcrumb is satisfied. */
DX_TEST(replay_of_a_return_that_drops_the_future_passes) {
  static const step_t v1[] = {ACT("A", "1"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                              AWAIT(2), RETURN_LAST};
  static const step_t v2[] = {ACT("A", "1"), TIMER(10), AWAIT(1), WAIT("go"), AWAIT(2),
                              RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  play_two_turns(&s, v1);
  s.host.prog = v2;
  msg_ext(&s, "go", "\"g\"");
  a = sim_run(&s);
  ASSERT_EQ(a->status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(a->output, "\"g\"");
  sim_free(&s);
}

/* Timers leave no breadcrumb (as the reference), so a changed timer cancel is not seen. */
DX_TEST(timer_cancels_are_not_checked) {
  static const step_t v1[] = {TIMER(50000), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                              AWAIT(2), RETURN_LAST};
  static const step_t v2[] = {TIMER(50000), TIMER(10), AWAIT(1), WAIT("go"), AWAIT(2),
                              RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  play_two_turns(&s, v1);
  s.host.prog = v2;
  msg_ext(&s, "go", "\"g\"");
  a = sim_run(&s);
  ASSERT_EQ(a->status, DX_STATUS_COMPLETED);
  sim_free(&s);
}
