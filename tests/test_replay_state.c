/*
** test_replay_state.c -- the replay engine (core/src/replay.c) on the scripted fake host of
** replay_sim.h: key-value state, event queues and custom status (issue 11), activity tags,
** pinned versions and future:cancel() (issue 11 items 3, 4, 6). Part of the test_replay
** program (test_replay.h).
*/
#include "replay_sim.h"
#include "test_replay.h"

static int kv_entry_cmp(const void *a, const void *b) {
  return strcmp(((const dx_kv_entry_t *)a)->key, ((const dx_kv_entry_t *)b)->key);
}

/* {===== key-value state, event queues, custom status (issue 11) =====} */

DX_TEST(kv_writes_are_recorded_and_read_back_in_order) {
  static const step_t p[] = {KV_GET("a"), KV_SET("a", "1"), KV_GET("a"), KV_SET("b", "{\"x\":2}"),
                             KV_SET("a", "3"), KV_GET("a"), KV_CLEAR("a"), KV_GET("a"),
                             KV_GET("b"), KV_CLEAR_ALL, KV_GET("b"), RETURN("1")};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:KvSet 3:KvSet 4:KvSet 5:KvClear 6:KvClearAll 7:Completed");
  ASSERT_STR_EQ(s.host.log, "start(null) kv(a=nil) kv(a=1) kv(a=3) kv(a=nil) kv(b={\"x\":2}) "
                            "kv(b=nil)");
  ASSERT_STR_EQ(dev(&s, 1)->name, "a");
  ASSERT_STR_EQ(dev(&s, 1)->data, "1");
  ASSERT_EQ(dev(&s, 1)->timestamp_ms, T0);
  ASSERT_STR_EQ(dev(&s, 4)->name, "a");
  ASSERT_EQ(a->worker_items_len + a->orch_items_len, 0);
  sim_free(&s);
}

/* duroxide 0.1.26's read-modify-write fix: the code starts from the committed state (the
** previous executions'), never the store's live view, and replays its own writes. */
DX_TEST(kv_reads_start_from_the_committed_state_and_replay_identically) {
  static const step_t p[] = {KV_GET("n"), KV_SET("n", "2"), KV_GET("n"), ACT("A", "1"),
                             AWAIT(0), KV_GET("n"), RETURN_LAST};
  dx_kv_entry_t committed[] = {{"n", "1", 5}};
  sim_t s;
  sim_init(&s, "i1", "Orch", p);
  s.kv = committed;
  s.kv_len = 1;
  msg_start(&s, "Orch", NULL);
  sim_run(&s);
  ASSERT_STR_EQ(s.host.log, "start(null) kv(n=1) kv(n=2)");
  sim_next(&s);
  msg_act_done(&s, 3, "\"done\"");
  sim_run(&s);
  ASSERT_STR_EQ(s.host.log, "start(null) kv(n=1) kv(n=2) ok(\"done\") kv(n=2)");
  ASSERT_KINDS(&s, "4:ActDone<3 5:Completed");
  sim_free(&s);
}

DX_TEST(kv_limits_refuse_the_write_and_record_nothing) {
  static char big[DX_MAX_KV_VALUE_BYTES + 8];
  static char longkey[DX_MAX_KV_KEY_BYTES + 2];
  static step_t too_big[] = {KV_SET("k", NULL), RETURN("1")};
  static step_t key_too_long[] = {KV_SET(NULL, "1"), RETURN("1")};
  static const step_t new_key[] = {KV_SET("new", "1"), RETURN("1")};
  static const step_t old_key[] = {KV_SET("k0", "2"), KV_GET("k0"), RETURN("1")};
  static dx_kv_entry_t full[DX_MAX_KV_KEYS];
  static char names[DX_MAX_KV_KEYS][8];
  const step_t *refused[] = {too_big, key_too_long, new_key};
  const char *rcs[] = {"DX_ETOOBIG", "DX_EINVAL", "DX_ETOOBIG"};
  sim_t s;
  size_t i;
  memset(big, '1', sizeof big - 1);
  too_big[0].input = big;
  memset(longkey, 'k', sizeof longkey - 1);
  key_too_long[0].name = longkey;
  for (i = 0; i < DX_MAX_KV_KEYS; i++) {
    snprintf(names[i], sizeof names[i], "k%zu", i);
    full[i].key = names[i];
    full[i].value = "1";
  }
  qsort(full, DX_MAX_KV_KEYS, sizeof full[0], kv_entry_cmp);
  for (i = 0; i < 3; i++) {
    sim_init(&s, "i1", "Orch", refused[i]);
    if (i == 2) s.kv = full, s.kv_len = DX_MAX_KV_KEYS;
    msg_start(&s, "Orch", NULL);
    sim_run(&s);
    ASSERT_CONTAINS(s.host.log, rcs[i]);
    ASSERT_KINDS(&s, "1:Started 2:Failed"); /* nothing recorded for the refused write */
    sim_free(&s);
  }
  /* a full instance may still overwrite a key it has */
  sim_init(&s, "i1", "Orch", old_key);
  s.kv = full;
  s.kv_len = DX_MAX_KV_KEYS;
  msg_start(&s, "Orch", NULL);
  sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:KvSet 3:Completed");
  ASSERT_STR_EQ(s.host.log, "start(null) kv(k0=2)");
  sim_free(&s);
}

static void kv_nondet_case(const step_t *v1, const step_t *v2, const char *needle) {
  sim_t s;
  sim_init(&s, "i1", "Orch", v1);
  sim_begin(&s, NULL);
  s.host.prog = v2;
  msg_act_done(&s, 3, "1");
  sim_run(&s);
  assert_nondet(&s, needle);
  sim_free(&s);
}

DX_TEST(kv_nondeterminism_key_value_and_kind) {
  static const step_t v1[] = {KV_SET("a", "1"), ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const step_t other_value[] = {KV_SET("a", "2"), ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const step_t other_key[] = {KV_SET("b", "1"), ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const step_t clear[] = {KV_CLEAR("a"), ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const step_t c1[] = {KV_CLEAR("a"), ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const step_t c2[] = {KV_CLEAR("b"), ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const step_t all[] = {KV_CLEAR_ALL, ACT("A", "1"), AWAIT(0), RETURN_LAST};
  kv_nondet_case(v1, other_value, "key-value set at event 2 was 'a' = 1");
  kv_nondet_case(v1, other_key, "'b' = 1");
  kv_nondet_case(v1, clear, "schedule mismatch");
  kv_nondet_case(c1, c2, "key-value clear at event 2 was 'a'");
  kv_nondet_case(c1, all, "schedule mismatch");
}

DX_TEST(queue_messages_sent_early_are_kept_and_dequeued_fifo) {
  static const step_t p[] = {DEQUEUE("items"), AWAIT(0), DEQUEUE("items"), AWAIT(1),
                             DEQUEUE("items"), AWAIT(2), RETURN_LAST};
  sim_t s;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  msg_queue(&s, "items", "1");
  msg_queue(&s, "other", "\"x\"");
  msg_queue(&s, "items", "2");
  sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:QueueEvent 3:QueueEvent 4:QueueEvent 5:QueueSub 6:QueueSub "
                   "7:QueueSub");
  ASSERT_STR_EQ(s.host.log, "start(null) ok(1) ok(2)");
  ASSERT_EQ(sim_ack(&s)->status, DX_STATUS_RUNNING);
  sim_next(&s);
  msg_queue(&s, "items", "3");
  sim_run(&s);
  ASSERT_KINDS(&s, "8:QueueEvent 9:Completed");
  ASSERT_STR_EQ(s.host.log, "start(null) ok(1) ok(2) ok(3)");
  ASSERT_STR_EQ(dlast(&s)->data, "3");
  sim_free(&s);
}

DX_TEST(queue_nondeterminism_queue_name) {
  static const step_t v1[] = {DEQUEUE("a"), AWAIT(0), RETURN_LAST};
  static const step_t v2[] = {DEQUEUE("b"), AWAIT(0), RETURN_LAST};
  static const step_t v3[] = {WAIT("a"), AWAIT(0), RETURN_LAST};
  sim_t s;
  int i;
  for (i = 0; i < 2; i++) {
    sim_init(&s, "i1", "Orch", v1);
    sim_begin(&s, NULL);
    s.host.prog = i ? v3 : v2;
    msg_queue(&s, "a", "1");
    sim_run(&s);
    assert_nondet(&s, i ? "schedule mismatch" : "event queue wait at event 2 was 'a'");
    sim_free(&s);
  }
}

/* A dequeue that loses a select is withdrawn (breadcrumb); the message goes to the next one. */
DX_TEST(queue_select_loser_is_withdrawn_and_the_message_kept) {
  static const step_t p[] = {DEQUEUE("q"), TIMER(100), SELECT(0, 1), DEQUEUE("q"), AWAIT(2),
                             RETURN_LAST};
  sim_t s;
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  msg_timer(&s, 3, T0 + 100);
  msg_queue(&s, "q", "\"m\"");
  sim_run(&s);
  ASSERT_KINDS(&s, "4:TimerFired<3 5:QueueEvent 6:QueueSubCancel<2 7:QueueSub 8:Completed");
  ASSERT_STR_EQ(s.host.log, "start(null) sel1(nil) ok(\"m\")");
  sim_free(&s);
}

/* continue_as_new carries messages nobody dequeued (before newer ones) and the custom status. */
DX_TEST(continue_as_new_carries_queue_messages_and_custom_status) {
  static const step_t p[] = {STATUS_GET, DEQUEUE("q"), AWAIT(0), STATUS("\"s1\""),
                             CAN("\"next\""), DEQUEUE("q"), AWAIT(1), DEQUEUE("q"), AWAIT(2),
                             RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  dx_work_item_t carried[3];
  size_t i;
  sim_init(&s, "i1", "Loop", p);
  msg_start(&s, "Loop", "\"first\"");
  msg_queue(&s, "q", "1");
  msg_queue(&s, "q", "2");
  msg_queue(&s, "q", "3");
  a = sim_run(&s);
  ASSERT_STR_EQ(s.host.log, "start(\"first\") cs(nil) ok(1)");
  ASSERT_EQ(a->status, DX_STATUS_CONTINUED_AS_NEW);
  ASSERT_EQ(a->orch_items_len, 3);
  ASSERT_EQ(a->orch_items[0].kind, DX_WI_CAN);
  ASSERT_STR_EQ(a->orch_items[0].custom_status, "\"s1\"");
  for (i = 0; i < 3; i++) ASSERT_OK(dx_work_item_copy(&carried[i], &a->orch_items[i]));
  ASSERT_EQ(carried[1].kind, DX_WI_QUEUE_MESSAGE);
  ASSERT_EQ(carried[1].execution_id, 2);
  ASSERT_STR_EQ(carried[1].data, "2");
  ASSERT_STR_EQ(carried[2].data, "3");
  sim_next(&s);
  /* a client message that reached the queue before the CAN commit is still younger */
  msg_queue(&s, "q", "4");
  for (i = 0; i < 3; i++) {
    msg_copy(&s, &carried[i]);
    dx_work_item_clear(&carried[i]);
  }
  a = sim_run(&s);
  ASSERT_EQ(a->execution_id, 2);
  ASSERT_STR_EQ(dev(&s, 0)->custom_status, "\"s1\"");
  ASSERT_STR_EQ(s.host.log, "start(\"next\") cs(\"s1\") ok(2) ok(3) ok(4)");
  ASSERT_KINDS(&s, "1:Started 2:QueueEvent 3:QueueEvent 4:QueueEvent 5:QueueSub 6:Status "
                   "7:QueueSub 8:QueueSub 9:Completed");
  ASSERT_STR_EQ(dev(&s, 1)->data, "2");
  ASSERT_STR_EQ(dev(&s, 3)->data, "4");
  sim_free(&s);
}

/* The custom status is stored (and its version bumped) only when the turn sets a new one. */
DX_TEST(custom_status_is_stored_only_when_set_this_turn) {
  static const step_t p[] = {STATUS("\"a\""), ACT("A", "1"), AWAIT(0), STATUS_GET, RETURN("1")};
  sim_t s;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  sim_run(&s);
  ASSERT_EQ(sim_ack(&s)->custom_status_set, 1);
  ASSERT_STR_EQ(sim_ack(&s)->custom_status, "\"a\"");
  sim_next(&s);
  msg_act_done(&s, 3, "1");
  sim_run(&s);
  ASSERT_EQ(sim_ack(&s)->custom_status_set, 0); /* replayed, not set again */
  ASSERT_CONTAINS(s.host.log, "cs(\"a\")");
  sim_free(&s);
}

/* {===== activity tags, pinned versions, future:cancel() (issue 11 items 3, 4, 6) =====} */

DX_TEST(activity_tag_is_recorded_and_routed) {
  static const step_t p[] = {ACT_T("Render", "1", "gpu"), ACT_T("Log", "2", "default"),
                             AWAIT(0), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:ActSched 3:ActSched");
  ASSERT_STR_EQ(dev(&s, 1)->tag, "gpu");
  ASSERT_NULL(dev(&s, 2)->tag); /* "default" is the name of untagged work */
  ASSERT_EQ(a->worker_items_len, 2);
  ASSERT_STR_EQ(a->worker_items[0].tag, "gpu");
  ASSERT_NULL(a->worker_items[1].tag);
  sim_next(&s);
  msg_act_done(&s, 2, "\"png\"");
  a = sim_run(&s); /* replays with the same tags: no nondeterminism */
  ASSERT_KINDS(&s, "4:ActDone<2 5:ActCancel<3 6:Completed");
  ASSERT_STR_EQ(a->output, "\"png\"");
  sim_free(&s);
}

DX_TEST(nondeterminism_activity_tag) {
  static const step_t gpu[] = {ACT_T("A", "1", "gpu"), AWAIT(0), RETURN_LAST};
  static const step_t io[] = {ACT_T("A", "1", "io"), AWAIT(0), RETURN_LAST};
  static const step_t none[] = {ACT("A", "1"), AWAIT(0), RETURN_LAST};
  static const step_t dflt[] = {ACT_T("A", "1", "default"), AWAIT(0), RETURN_LAST};
  sim_t s;
  nondet_case(gpu, io, "tag 'gpu' in history but the code now schedules it with tag 'io'");
  nondet_case(gpu, none, "with tag 'default'");
  nondet_case(none, gpu, "had tag 'default' in history");
  /* "default" and no tag are the same */
  sim_init(&s, "i1", "Orch", none);
  sim_begin(&s, NULL);
  s.host.prog = dflt;
  msg_act_done(&s, 2, "1");
  sim_run(&s);
  ASSERT_KINDS(&s, "3:ActDone<2 4:Completed");
  sim_free(&s);
}

DX_TEST(invalid_tags_are_refused) {
  static char long_tag[DX_MAX_TAG_BYTES + 2];
  static const step_t p[] = {ACT_T("A", "1", ""), RETURN("1")};
  step_t q[] = {ACT_T("A", "1", long_tag), RETURN("1")};
  sim_t s;
  memset(long_tag, 't', DX_MAX_TAG_BYTES + 1);
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  ASSERT_CONTAINS(s.host.log, "emit_rc=DX_EINVAL");
  sim_free(&s);
  sim_init(&s, "i1", "Orch", q);
  sim_begin(&s, NULL);
  ASSERT_CONTAINS(s.host.log, "emit_rc=DX_EINVAL");
  sim_free(&s);
}

DX_TEST(sub_orchestration_version_is_pinned_and_checked) {
  static const step_t v1[] = {SUB_V("Kid", "1", "1.0.0"), AWAIT(0), RETURN_LAST};
  static const step_t v2[] = {SUB_V("Kid", "1", "2.0.0"), AWAIT(0), RETURN_LAST};
  static const step_t any[] = {SUB("Kid", "1"), AWAIT(0), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "p1", "Orch", v1);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_STR_EQ(dev(&s, 1)->version, "1.0.0");
  ASSERT_EQ(a->orch_items[0].kind, DX_WI_START);
  ASSERT_STR_EQ(a->orch_items[0].version, "1.0.0");
  sim_next(&s);
  s.host.prog = v2;
  msg_sub_done(&s, 2, "\"k\"");
  sim_run(&s);
  assert_nondet(&s, "asked for version 1.0.0 in history but the code now asks for version 2.0.0");
  sim_free(&s);
  sim_init(&s, "p1", "Orch", v1);
  sim_begin(&s, NULL);
  s.host.prog = any;
  msg_sub_done(&s, 2, "\"k\"");
  sim_run(&s);
  assert_nondet(&s, "now asks for version (by policy)");
  sim_free(&s);
}

DX_TEST(continue_as_new_carries_the_version) {
  static const step_t p[] = {CAN_V("\"next\"", "2.0.0"), RETURN("1")};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Loop", p);
  msg_start(&s, "Loop", "\"first\"");
  a = sim_run(&s);
  ASSERT_EQ(a->status, DX_STATUS_CONTINUED_AS_NEW);
  ASSERT_EQ(a->orch_items[0].kind, DX_WI_CAN);
  ASSERT_STR_EQ(a->orch_items[0].version, "2.0.0");
  sim_free(&s);
}

DX_TEST(cancel_withdraws_an_activity) {
  static const step_t p[] = {ACT("Slow", "1"), TIMER(10), AWAIT(1), CANCEL(0), WAIT("go"),
                             AWAIT(2), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  msg_timer(&s, 3, T0 + 10);
  a = sim_run(&s);
  /* recorded as a breadcrumb; the worker row is deleted (the running worker sees it as a
  ** lost lock: actx:is_cancelled()) */
  ASSERT_KINDS(&s, "4:TimerFired<3 5:ActCancel<2 6:ExtSub");
  ASSERT_STR_EQ(dev(&s, 1)->reason, "dropped_future");
  ASSERT_EQ(a->cancelled_len, 1);
  ASSERT_EQ(a->cancelled[0].activity_id, 2);
  sim_next(&s);
  /* a late result is recorded and ignored; replay cancels again without a second crumb */
  msg_act_done(&s, 2, "\"late\"");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "7:ActDone<2");
  ASSERT_STR_EQ(s.host.log, "start(null) ok(nil)"); /* never its result */
  sim_free(&s);
}

DX_TEST(cancel_of_a_new_activity_or_timer_never_enqueues_it) {
  static const step_t p[] = {ACT("A", "1"), TIMER(1000), CANCEL(0), CANCEL(1), WAIT("go"),
                             AWAIT(2), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:ActSched 3:TimerCreated 4:ActCancel<2 5:ExtSub");
  ASSERT_EQ(a->worker_items_len, 0);
  ASSERT_EQ(a->orch_items_len, 0); /* no TimerFired either */
  sim_free(&s);
}

DX_TEST(cancel_unsubscribes_a_wait) {
  static const step_t p[] = {WAIT("go"), CANCEL(0), WAIT("go"), AWAIT(1), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  msg_start(&s, "Orch", NULL);
  sim_run(&s);
  ASSERT_KINDS(&s, "1:Started 2:ExtSub 3:ExtSubCancel<2 4:ExtSub");
  sim_next(&s);
  msg_ext(&s, "go", "\"second\""); /* goes to the live wait */
  a = sim_run(&s);
  ASSERT_KINDS(&s, "5:ExtEvent 6:Completed");
  ASSERT_STR_EQ(a->output, "\"second\"");
  sim_free(&s);
}

DX_TEST(cancel_cancels_a_started_sub_orchestration) {
  static const step_t p[] = {SUB("Kid", "1"), TIMER(10), AWAIT(1), CANCEL(0), RETURN("1")};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "p1", "Orch", p);
  sim_begin(&s, NULL);
  msg_timer(&s, 3, T0 + 10);
  a = sim_run(&s);
  ASSERT_KINDS(&s, "4:TimerFired<3 5:SubCancel<2 6:Completed");
  ASSERT_EQ(a->orch_items_len, 1);
  ASSERT_EQ(a->orch_items[0].kind, DX_WI_CANCEL);
  ASSERT_STR_EQ(a->orch_items[0].instance, "p1::sub::2");
  sim_free(&s);
}

DX_TEST(cancel_after_completion_changes_nothing) {
  static const step_t p[] = {ACT("A", "1"), AWAIT(0), CANCEL(0), RETURN_LAST};
  sim_t s;
  const dx_orch_ack_t *a;
  sim_init(&s, "i1", "Orch", p);
  sim_begin(&s, NULL);
  msg_act_done(&s, 2, "\"a\"");
  a = sim_run(&s);
  ASSERT_KINDS(&s, "3:ActDone<2 4:Completed");
  ASSERT_EQ(a->cancelled_len, 0);
  sim_free(&s);
}
