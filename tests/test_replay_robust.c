/*
** test_replay_robust.c -- the replay engine (core/src/replay.c) on the scripted fake host of
** replay_sim.h: cancellation, poison messages, unreadable history, custom status, system
** calls, limits, is_replaying, and robustness against bad input. Part of the test_replay
** program (test_replay.h).
*/
#include "replay_sim.h"
#include "test_replay.h"

#include <fcntl.h>
#include <unistd.h>

/* {===== cancellation, poison, unreadable history =====} */

DX_TEST(cancel_request_fails_and_withdraws_outstanding_work) {
  static const step_t p[] = {ACT("A", "1"), ACT("B", "2"), SUB("Kid", "3"), WAIT("go"),
                             TIMER(5000), AWAIT(0), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  msg_cancel(&s, "user asked");
  msg_cancel(&s, "twice");
  a = sim_run(&s);
  ASSERT_EQ(sim_action(&s), DX_TURN_ACK);
  ASSERT_KINDS(&s, "7:CancelReq 8:ActCancel<2 9:ActCancel<3 10:SubCancel<4 11:ExtSubCancel<5 "
                   "12:Failed");
  ASSERT_STR_EQ(dev(&s, 0)->reason, "user asked");
  ASSERT_EQ(a->status, DX_STATUS_FAILED);
  ASSERT_EQ(a->failure->category, DX_CAT_APPLICATION);
  ASSERT_STR_EQ(a->failure->kind, "Cancelled");
  ASSERT_STR_EQ(a->failure->message, "canceled: user asked");
  ASSERT_STR_EQ(dlast(&s)->fail.message, "canceled: user asked");
  ASSERT_EQ(a->cancelled_len, 2);
  ASSERT_EQ(a->cancelled[0].activity_id, 2);
  ASSERT_EQ(a->cancelled[1].activity_id, 3);
  ASSERT_EQ(a->worker_items_len, 0);
  ASSERT_EQ(a->orch_items_len, 1);
  ASSERT_EQ(a->orch_items[0].kind, DX_WI_CANCEL);
  ASSERT_STR_EQ(a->orch_items[0].instance, "i1::sub::4");
  /* the code replays its history (what it left outstanding is what gets cancelled) but never
  ** sees the batch */
  ASSERT_EQ(s.host.starts, 1);
  sim_free(&s);
}

/* A wait the code already got its event for is not outstanding: a cancel leaves it alone
** (it used to get a breadcrumb, as the cancel turn did not replay what the code had seen; the
** orchestration cache's comparison spec found it: a cached turn wrote one breadcrumb fewer). */
DX_TEST(cancel_skips_waits_already_delivered) {
  static const step_t p[] = {WAIT("go"), AWAIT(0), WAIT("go"), AWAIT(1), RETURN_LAST};
  sim_t s;
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  msg_ext(&s, "go", "1");
  sim_run(&s);
  ASSERT_KINDS(&s, "3:ExtEvent 4:ExtSub");
  sim_next(&s);
  msg_cancel(&s, "stop");
  sim_run(&s);
  ASSERT_KINDS(&s, "5:CancelReq 6:ExtSubCancel<4 7:Failed");
  sim_free(&s);
}

/* Issue 7 item 4: a poisoned-before-first-commit instance still records the version it
** would have run; an unregistered version is named in the failure; the "orchestration started"
** log line prints the version (it used to read the freed version string). */
static char *capture_turn_log(sim_t *s) {
  char path[512], *buf = calloc(1, 4096);
  int saved = dup(2), fd;
  FILE *f;
  snprintf(path, sizeof path, "%s/turn.log", dx_test_tmpdir());
  fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ASSERT(fd >= 0 && saved >= 0 && buf);
  fflush(stderr);
  dup2(fd, 2);
  close(fd);
  dx__log_configure(DX_LOG_INFO, DX_LOGFMT_TEXT);
  sim_run(s);
  dx__log_configure(-1, DX_LOGFMT_TEXT);
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  f = fopen(path, "r");
  ASSERT(f);
  buf[fread(buf, 1, 4095, f)] = 0;
  fclose(f);
  return buf;
}

DX_TEST(poisoned_first_turn_records_version) {
  sim_t s;
  const dx_orch_ack_t *a;
  char *log;
  sim_init(&s, "i1", "Hello", P_GREET);
  msg_start(&s, "Hello", "1"); /* no version asked: the registry resolves it */
  s.attempt = 6;
  log = capture_turn_log(&s);
  a = sim_ack(&s);
  ASSERT_KINDS(&s, "1:Started 2:Failed");
  ASSERT_EQ(a->failure->category, DX_CAT_POISON);
  ASSERT_STR_EQ(dev(&s, 0)->version, "1.0.0");
  ASSERT_STR_EQ(a->orchestration_version, "1.0.0");
  ASSERT_CONTAINS(log, "orchestration started instance=i1 execution=1 orchestration=Hello "
                       "version=1.0.0\n");
  free(log);
  sim_free(&s);
}

DX_TEST(unregistered_version_is_named_and_logged_cleanly) {
  sim_t s;
  const dx_orch_ack_t *a;
  dx_work_item_t *m;
  char *log;
  sim_init(&s, "i1", "Other", P_GREET);
  m = msg_start(&s, "Hello", "1");
  m->version = strdup("2.0.0");
  s.attempt = 5; /* the last attempt gives up */
  log = capture_turn_log(&s);
  a = sim_ack(&s);
  ASSERT_KINDS(&s, "1:Started 2:Failed");
  ASSERT_STR_EQ(a->failure->kind, "Unregistered");
  ASSERT_CONTAINS(a->failure->message, "orchestration 'Hello' version 2.0.0 is not registered");
  ASSERT_STR_EQ(dev(&s, 0)->version, "2.0.0");
  ASSERT_CONTAINS(log, "orchestration=Hello version=2.0.0\n");
  free(log);
  sim_free(&s);
}

DX_TEST(poison_when_attempts_exceeded) {
  sim_t s;
  const dx_orch_ack_t *a;
  /* a brand-new instance: OrchestrationStarted is synthesised so the failure has a home */
  sim_init(&s, "i1", "Hello", P_GREET);
  msg_start(&s, "Hello", "1");
  s.attempt = 6;
  a = sim_run(&s);
  ASSERT_EQ(sim_action(&s), DX_TURN_ACK);
  ASSERT_KINDS(&s, "1:Started 2:Failed");
  ASSERT_EQ(a->status, DX_STATUS_FAILED);
  ASSERT_EQ(a->failure->category, DX_CAT_POISON);
  ASSERT_CONTAINS(a->failure->message, "poison");
  ASSERT_EQ(dlast(&s)->fail.category, DX_CAT_POISON);
  ASSERT_EQ(s.host.starts, 0);
  sim_free(&s);
  /* a running instance */
  sim_init(&s, "i1", "Hello", P_GREET);
  sim_begin(&s, NULL);
  msg_act_done(&s, 2, "1");
  s.attempt = 6;
  a = sim_run(&s);
  ASSERT_KINDS(&s, "3:Failed");
  ASSERT_EQ(a->failure->category, DX_CAT_POISON);
  ASSERT_CONTAINS(a->failure->message, "exceeded 6 attempts");
  ASSERT_EQ(a->worker_items_len, 0);
  sim_free(&s);
}

DX_TEST(unreadable_history_abandons_then_fails) {
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Hello", P_GREET);
  sim_begin(&s, NULL);
  msg_act_done(&s, 2, "1");
  s.history_error = DX_ECORRUPT;
  s.attempt = 5;
  sim_run(&s);
  ASSERT_EQ(sim_action(&s), DX_TURN_ABANDON);
  ASSERT_EQ(dx__turn_abandon_delay(s.turn), 1000);
  sim_drop(&s);
  s.attempt = 6;
  a = sim_run(&s);
  ASSERT_EQ(sim_action(&s), DX_TURN_ACK);
  ASSERT_EQ(a->status, DX_STATUS_FAILED);
  ASSERT_EQ(a->delta_len, 0); /* never append to a history that cannot be read */
  ASSERT_EQ(a->worker_items_len + a->orch_items_len, 0);
  ASSERT_EQ(a->execution_id, 1);
  ASSERT_EQ(a->failure->category, DX_CAT_POISON);
  ASSERT_CONTAINS(a->failure->message, "bad record at 7");
  ASSERT_EQ(s.host.starts, 0);
  sim_free(&s);
}

/* {===== custom status, system calls, limits, is_replaying =====} */

DX_TEST(custom_status_set_and_cleared) {
  static const step_t p[] = {STATUS("{\"step\":1}"), ACT("A", "1"), AWAIT(0), STATUS(NULL),
                             RETURN("1")};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:Status 3:ActSched");
  ASSERT_STR_EQ(dev(&s, 1)->data, "{\"step\":1}");
  ASSERT_EQ(a->custom_status_set, 1);
  ASSERT_STR_EQ(a->custom_status, "{\"step\":1}");
  ASSERT_EQ(a->worker_items[0].id, 3);
  sim_next(&s);
  msg_act_done(&s, 3, "1");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "4:ActDone<3 5:Status 6:Completed");
  ASSERT_NULL(dev(&s, 1)->data);
  ASSERT_EQ(a->custom_status_set, 1);
  ASSERT_NULL(a->custom_status);
  sim_free(&s);
}

DX_TEST(syscall_value_recorded_then_replayed) {
  static const step_t p[] = {SYSCALL("new_guid"), SYSCALL("utc_now"), SYSCALL("random"),
                             ACT("A", "1"), AWAIT(3), RETURN_LAST};
  static const step_t other[] = {SYSCALL("random"), END};
  sim_t s;
  char first[512];
  const dx_event_t *g, *r;
  double d;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:Syscall 3:Syscall 4:Syscall 5:ActSched");
  g = dev(&s, 1);
  ASSERT_STR_EQ(g->name, "new_guid");
  ASSERT_EQ(strlen(g->data), 38); /* "8-4-4-4-12" plus quotes */
  ASSERT(g->data[0] == '"' && g->data[9] == '-' && g->data[15] == '4');
  ASSERT_STR_EQ(dev(&s, 2)->name, "utc_now");
  ASSERT_STR_EQ(dev(&s, 2)->data, "1000000");
  r = dev(&s, 3);
  d = strtod(r->data, NULL);
  ASSERT(d >= 0.0 && d < 1.0);
  ASSERT(strpbrk(r->data, ".e"));
  snprintf(first, sizeof first, "start(null) sys(%s) sys(1000000) sys(%s)", g->data, r->data);
  ASSERT_STR_EQ(s.host.log, first);
  sim_next(&s);
  s.cfg.now_ms = T0 + 777; /* replay must not re-read the clock */
  msg_act_done(&s, 5, "2");
  sim_run(&s);
  ASSERT_KINDS(&s, "6:ActDone<5 7:Completed");
  ASSERT(strncmp(s.host.log, first, strlen(first)) == 0);
  ASSERT_STR_EQ(s.host.log + strlen(first), " ok(2)");
  sim_drop(&s);
  /* a different operation at the same position is nondeterministic */
  s.host.prog = other;
  sim_run(&s);
  assert_nondet(&s, "'new_guid'");
  sim_free(&s);
}

DX_TEST(payload_over_limit_fails) {
  char *big = malloc(DX_MAX_PAYLOAD_BYTES + 16);
  step_t out[] = {RETURN(big)};
  step_t in[] = {ACT("A", big), AWAIT(0), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  ASSERT(big);
  memset(big, 'x', DX_MAX_PAYLOAD_BYTES + 8);
  big[0] = '"';
  big[DX_MAX_PAYLOAD_BYTES + 8] = '"';
  big[DX_MAX_PAYLOAD_BYTES + 9] = 0;
  sim_init(&s, "i1", "Orch", out);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:Failed");
  ASSERT_EQ(a->status, DX_STATUS_FAILED);
  ASSERT_NULL(a->output);
  ASSERT_CONTAINS(a->failure->message, "limit");
  ASSERT_CONTAINS(a->failure->message, "output");
  sim_free(&s);
  /* an oversized activity input is refused at emit time */
  sim_init(&s, "i1", "Orch", in);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:Failed");
  ASSERT_CONTAINS(s.host.log, "emit_rc=DX_ETOOBIG");
  ASSERT_CONTAINS(a->failure->message, "limit");
  ASSERT_EQ(a->worker_items_len, 0);
  sim_free(&s);
  free(big);
}

DX_TEST(is_replaying_only_for_persisted_actions) {
  static const step_t p[] = {MARK, ACT("A", "1"), MARK, AWAIT(0), MARK, ACT("B", "2"), MARK,
                             AWAIT(1), RETURN_LAST};
  sim_t s;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  sim_run(&s);
  ASSERT_STR_EQ(s.host.log, "start(null) r0 r0");
  sim_next(&s);
  msg_act_done(&s, 2, "\"a\"");
  sim_run(&s);
  ASSERT_STR_EQ(s.host.log, "start(null) r1 r0 ok(\"a\") r0 r0");
  sim_next(&s);
  msg_act_done(&s, 4, "\"b\"");
  sim_run(&s);
  ASSERT_KINDS(&s, "5:ActDone<4 6:Completed");
  ASSERT_STR_EQ(s.host.log, "start(null) r1 r1 ok(\"a\") r1 r0 ok(\"b\")");
  sim_free(&s);
}

/* {===== robustness =====} */

/* Issue 7 item 1: messages that reach an instance before its first turn (its start was handed
** back with a delay by a worker lacking the orchestration) wait for that turn; the first turn
** delivers the event, and a cancel queued before it fails the instance. Only messages that
** outlive every attempt a start gets are dropped. */
DX_TEST(messages_before_the_first_turn_wait_for_it) {
  static const step_t p[] = {WAIT("go"), AWAIT(0), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  msg_ext(&s, "go", "\"now\"");
  msg_cancel(&s, "stop");
  s.attempt = 2;
  a = sim_run(&s);
  ASSERT_EQ(sim_action(&s), DX_TURN_ABANDON); /* not acked: nothing is deleted */
  ASSERT_EQ(dx__turn_abandon_delay(s.turn), 2000);
  ASSERT_EQ(s.host.starts, 0);
  sim_free(&s);
  /* the start comes back with the waiting event: the first turn delivers it */
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  msg_ext(&s, "go", "\"now\"");
  a = sim_run(&s);
  ASSERT_EQ(sim_action(&s), DX_TURN_ACK);
  ASSERT_EQ(a->status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(a->output, "\"now\"");
  sim_free(&s);
  /* ... and a waiting cancel fails the instance in its first turn, before the code runs */
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  msg_cancel(&s, "stop");
  a = sim_run(&s);
  ASSERT_EQ(a->status, DX_STATUS_FAILED);
  ASSERT_STR_EQ(a->failure->message, "canceled: stop");
  ASSERT_EQ(s.host.starts, 0);
  sim_free(&s);
  /* messages for an instance that never starts are dropped once past every attempt */
  sim_init(&s, "ghost", "Orch", p);
  msg_act_done(&s, 2, "1");
  msg_ext(&s, "go", "1");
  s.attempt = 6;
  a = sim_run(&s);
  ASSERT_EQ(sim_action(&s), DX_TURN_ACK);
  ASSERT_EQ(a->delta_len, 0);
  ASSERT_EQ(a->status, DX_STATUS_NONE);
  ASSERT_NULL(a->orchestration_name);
  ASSERT_EQ(s.host.starts, 0);
  sim_free(&s);
}

DX_TEST(cancelled_child_reports_failure_to_parent) {
  static const step_t p[] = {TIMER(1000), AWAIT(0), RETURN("1")};
  sim_t s;
  const dx_orch_ack_t *a;
  dx_work_item_t *m;
  sim_init(&s, "parent::sub::4", "Child", p);
  m = msg_start(&s, "Child", NULL);
  m->parent_instance = strdup("parent");
  m->parent_id = 4;
  m->parent_execution_id = 2;
  sim_run(&s);
  sim_next(&s);
  msg_cancel(&s, "parent dropped sub-orchestration future");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "3:CancelReq 4:Failed"); /* timers need no breadcrumb */
  ASSERT_EQ(a->orch_items_len, 1);
  ASSERT_EQ(a->orch_items[0].kind, DX_WI_SUB_FAILED);
  ASSERT_STR_EQ(a->orch_items[0].instance, "parent");
  ASSERT_EQ(a->orch_items[0].execution_id, 2);
  ASSERT_EQ(a->orch_items[0].id, 4);
  ASSERT_STR_EQ(a->orch_items[0].fail.kind, "Cancelled");
  ASSERT_CONTAINS(a->orch_items[0].fail.message, "canceled: parent dropped");
  sim_free(&s);
}

/* Many turns: the history, slot table and delta all grow well past their first allocation. */
DX_TEST(long_sequential_run_replays_every_turn) {
  enum { N = 40 };
  step_t p[2 * N + 1];
  char inputs[N][8];
  sim_t s;
  int i;
  for (i = 0; i < N; i++) {
    snprintf(inputs[i], sizeof inputs[i], "%d", i);
    p[2 * i] = (step_t)ACT("Step", inputs[i]);
    p[2 * i + 1] = (step_t)AWAIT(i);
  }
  p[2 * N] = (step_t)RETURN_LAST;
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  for (i = 0; i < N; i++) {
    char want[64], out[16];
    uint64_t sched = 2 + 2 * (uint64_t)i;
    snprintf(out, sizeof out, "%d", i * 10);
    msg_act_done(&s, sched, out);
    sim_run(&s);
    if (i < N - 1)
      snprintf(want, sizeof want, "%" PRIu64 ":ActDone<%" PRIu64 " %" PRIu64 ":ActSched",
               sched + 1, sched, sched + 2);
    else
      snprintf(want, sizeof want, "%" PRIu64 ":ActDone<%" PRIu64 " %" PRIu64 ":Completed",
               sched + 1, sched, sched + 2);
    ASSERT_KINDS(&s, want);
    ASSERT_EQ(s.host.starts, 1);
    if (i < N - 1) ASSERT_STR_EQ(dev(&s, 1)->data, inputs[i + 1]);
    sim_next(&s);
  }
  ASSERT_EQ(s.n_hist, 2 + 2 * N);
  ASSERT_STR_EQ(s.hist[s.n_hist - 1].data, "390");
  sim_free(&s);
}

DX_TEST(fan_out_in_one_turn_and_fan_in_in_one_batch) {
  enum { N = 40 };
  step_t p[2 * N + 1];
  char inputs[N][8];
  sim_t s;
  const dx_orch_ack_t *a;
  int i;
  for (i = 0; i < N; i++) {
    snprintf(inputs[i], sizeof inputs[i], "%d", i);
    p[i] = (step_t)ACT("Work", inputs[i]);
    p[N + i] = (step_t)AWAIT(i);
  }
  p[2 * N] = (step_t)RETURN_LAST;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_EQ(a->delta_len, N + 1);
  ASSERT_EQ(a->worker_items_len, N);
  ASSERT_EQ(a->worker_items[N - 1].id, N + 1);
  sim_next(&s);
  for (i = N - 1; i >= 0; i--) { /* reverse order; one of them fails */
    if (i == 7) msg_act_fail(&s, 2 + (uint64_t)i, DX_CAT_APPLICATION, "ActivityFailed", "seven");
    else msg_act_done(&s, 2 + (uint64_t)i, inputs[i]);
    if (s.n_msgs == 16) { /* a batch holds 16 here: commit and keep going */
      sim_run(&s);
      sim_next(&s);
    }
  }
  a = sim_run(&s);
  ASSERT_EQ(a->status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(a->output, "39");
  ASSERT_CONTAINS(s.host.log, "ok(6) err(seven) ok(8)");
  ASSERT_EQ(dlast(&s)->event_id, 2 * N + 2);
  sim_free(&s);
}

DX_TEST(invalid_actions_are_refused) {
  static const step_t bad_op[] = {SYSCALL("bogus"), RETURN("1")};
  static const step_t no_sys[] = {SYSCALL(NULL), RETURN("1")};
  static const step_t no_act[] = {ACT(NULL, "1"), RETURN("1")};
  static const step_t no_wait[] = {WAIT(NULL), RETURN("1")};
  const step_t *progs[] = {bad_op, no_sys, no_act, no_wait};
  size_t i;
  for (i = 0; i < sizeof progs / sizeof progs[0]; i++) {
    sim_t s;
    const dx_orch_ack_t *a;
    sim_init(&s, "i1", "Orch", progs[i]);
    msg_start(&s, "Orch", NULL);
    a = sim_run(&s);
    ASSERT_CONTAINS(s.host.log, "emit_rc=DX_EINVAL");
    ASSERT_KINDS(&s, "1:Started 2:Failed"); /* nothing was recorded for the refused action */
    ASSERT_EQ(a->failure->category, DX_CAT_APPLICATION);
    sim_free(&s);
  }
}

DX_TEST(cancel_of_unknown_token_is_a_no_op) {
  static const step_t p[] = {ACT("A", "1"), CANCEL_RAW(-1), CANCEL_RAW(0), CANCEL_RAW(99),
                             CANCEL_RAW(1), AWAIT(0), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:ActSched");
  ASSERT_EQ(a->worker_items_len, 1);
  ASSERT_EQ(a->cancelled_len, 0);
  sim_free(&s);
}

/* History the engine did not write: completions and breadcrumbs must point back at an
** earlier event. Such a turn fails as corrupted history instead of crashing. */
DX_TEST(corrupt_history_source_ids_fail_cleanly) {
  static const step_t p[] = {ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const uint64_t bad[] = {99, 3, 0, UINT64_MAX / 2};
  static const int kinds_[] = {DX_EV_ACT_COMPLETED, DX_EV_ACT_CANCEL_REQ};
  size_t i, k;
  for (k = 0; k < 2; k++) {
    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      sim_t s;
      dx_event_t *e;
      sim_init(&s, "i1", "Orch", p);
      sim_begin(&s, NULL);
      s.hist = realloc(s.hist, 3 * sizeof *s.hist);
      ASSERT(s.hist);
      e = &s.hist[s.n_hist++];
      memset(e, 0, sizeof *e);
      e->kind = kinds_[k];
      e->event_id = 3;
      e->source_id = bad[i];
      e->data = strdup("1");
      msg_ext(&s, "poke", NULL);
      sim_run(&s);
      assert_nondet(&s, "corrupted history");
      sim_free(&s);
    }
  }
}
