/*
** provider_validation_atomic.c -- provider contract tests of all-or-nothing batches
** (begin_atomic, version 12; a provider without it serves them with begin, as the client
** does): every enqueue of a committed batch is kept; after a failed call the caller's rollback
** leaves nothing; refusals that come before any write (bad input, DX_EEXIST) still change
** nothing; an ordinary batch still contains a failed call. Linked into every provider's test
** program with provider_validation.c.
*/
#include <string.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E;

/* What the client opens for start_many and raise_many (client.c begin_all_or_nothing). */
static int begin_atomic(dx_provider_t *p) {
  return M(p)->version >= 12 && M(p)->begin_atomic ? M(p)->begin_atomic(p, &E)
                                                     : M(p)->begin(p, &E);
}

/* The suite's START or raise of `inst` (provider_validation.c). */
static dx_work_item_t item(int kind, const char *inst) {
  return kind == DX_WI_START ? dx_pv_start_item(inst) : dx_pv_raise_item(inst);
}

/* A START the provider refuses (DX_EINVAL): its id is over the limit. */
static char long_id[DX_MAX_INSTANCE_ID_BYTES + 2];
static dx_work_item_t bad_item(void) {
  memset(long_id, 'D', sizeof long_id - 1);
  return item(DX_WI_START, long_id);
}

static int enq(dx_provider_t *p, int kind, const char *inst) {
  dx_work_item_t w = item(kind, inst);
  return M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E);
}

/* 1 when `inst` is found (a queued start counts), 0 when not. */
static int exists(dx_provider_t *p, const char *inst) {
  dx_instance_info_t info;
  int rc;
  memset(&info, 0, sizeof info);
  rc = M(p)->get_instance_info(p, inst, &info, &E);
  dx_instance_info_clear(&info);
  if (rc == DX_ENOTFOUND) return 0;
  CHECK(rc);
  return 1;
}

static dx_queue_depths_t depths(dx_provider_t *p) {
  dx_queue_depths_t d;
  CHECK(M(p)->get_queue_depths(p, &d, &E));
  return d;
}

DX_TEST(pv_atomic_batch_commits_every_enqueue) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK(enq(p, DX_WI_START, "B"));
  CHECK(enq(p, DX_WI_START, "C"));
  CHECK(enq(p, DX_WI_EXTERNAL, "B"));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT(exists(p, "A") && exists(p, "B") && exists(p, "C"));
  ASSERT_EQ(depths(p).orchestrator, 4);
  CHECK(M(p)->fetch_orchestration_item(p, T0 + 1, LOCK, &it, &E));
  ASSERT(it && strcmp(it->instance, "A") == 0 && it->messages_len == 1);
  dx_orch_item_free(it);
  CHECK(M(p)->fetch_orchestration_item(p, T0 + 1, LOCK, &it, &E));
  ASSERT(it && strcmp(it->instance, "B") == 0 && it->messages_len == 2);
  ASSERT_EQ(it->messages[0].kind, DX_WI_START);
  ASSERT_EQ(it->messages[1].kind, DX_WI_EXTERNAL);
  dx_orch_item_free(it);
  M(p)->destroy(p);
}

DX_TEST(pv_atomic_batch_rolled_back_after_a_failed_call_leaves_nothing) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t bad = bad_item();
  CHECK(enq(p, DX_WI_START, "X")); /* committed before: a START of it is refused */
  /* a duplicate id within the batch */
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK(enq(p, DX_WI_EXTERNAL, "X"));
  CHECK_ERR(enq(p, DX_WI_START, "A"), DX_EEXIST);
  M(p)->rollback(p);
  /* an id taken before the batch */
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "B"));
  CHECK_ERR(enq(p, DX_WI_START, "X"), DX_EEXIST);
  M(p)->rollback(p);
  /* a bad item */
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "C"));
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &bad, 0, &E), DX_EINVAL);
  M(p)->rollback(p);
  ASSERT(!exists(p, "A") && !exists(p, "B") && !exists(p, "C"));
  ASSERT_EQ(depths(p).orchestrator, 1);
  /* the next batch starts clean */
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT(exists(p, "A"));
  ASSERT_EQ(depths(p).orchestrator, 2);
  M(p)->destroy(p);
}

/* Refusals found before anything is written change nothing, in either kind of batch: what the
** batch holds commits. */
static void refusals_change_nothing(int atomic) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t bad = bad_item();
  CHECK(atomic ? begin_atomic(p) : M(p)->begin(p, &E));
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK_ERR(enq(p, DX_WI_START, "A"), DX_EEXIST);
  CHECK_ERR(M(p)->enqueue_for_orchestrator(p, T0, &bad, 0, &E), DX_EINVAL);
  CHECK(enq(p, DX_WI_START, "B"));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT(exists(p, "A") && exists(p, "B"));
  ASSERT_EQ(depths(p).orchestrator, 2);
  M(p)->destroy(p);
}

DX_TEST(pv_atomic_batch_refusals_before_writing_change_nothing) { refusals_change_nothing(1); }

DX_TEST(pv_batch_contains_a_failed_call) { refusals_change_nothing(0); }

/* A batch whose commit fails keeps nothing, not even in what the provider remembers between
** batches (LMDB: the instance states its enqueues read and wrote): the id is free again. */
DX_TEST(pv_atomic_batch_whose_commit_fails_keeps_nothing) {
  dx_provider_t *p = dx_pv_fresh();
  const dx_provider_test_hooks_t *h = M(p)->test_hooks;
  if (!h || h->version < 2 || !h->fail_next_commit) {
    M(p)->destroy(p);
    return; /* the provider cannot fail a commit on purpose */
  }
  CHECK(enq(p, DX_WI_START, "X"));
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK(enq(p, DX_WI_EXTERNAL, "X"));
  CHECK(h->fail_next_commit(p));
  ASSERT(M(p)->commit(p, 1, &E) != 0);
  ASSERT(!exists(p, "A"));
  ASSERT_EQ(depths(p).orchestrator, 1);
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK_ERR(enq(p, DX_WI_START, "X"), DX_EEXIST);
  M(p)->rollback(p);
  CHECK(begin_atomic(p));
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT(exists(p, "A"));
  ASSERT_EQ(depths(p).orchestrator, 2);
  M(p)->destroy(p);
}

/* An instance whose first turn a batch committed (the store cycle's batches may remember its
** record for the next one) cannot be started again in an all-or-nothing batch. */
DX_TEST(pv_atomic_batch_after_a_turn_refuses_its_id) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev;
  CHECK(enq(p, DX_WI_START, "A"));
  CHECK(M(p)->begin(p, &E));
  CHECK(M(p)->fetch_orchestration_item(p, T0 + 1, LOCK, &it, &E));
  ASSERT(it && strcmp(it->instance, "A") == 0);
  memset(&ev, 0, sizeof ev);
  ev.kind = DX_EV_ORCH_STARTED;
  ev.event_id = 1;
  ev.timestamp_ms = T0 + 1;
  ev.name = "Orch";
  ev.data = "1";
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = "Orch";
  a.delta = &ev;
  a.delta_len = 1;
  a.status = DX_STATUS_RUNNING;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 2, &a, &E));
  dx_orch_item_free(it);
  CHECK(M(p)->commit(p, 1, &E));
  CHECK(begin_atomic(p));
  CHECK_ERR(enq(p, DX_WI_START, "A"), DX_EEXIST);
  CHECK(enq(p, DX_WI_EXTERNAL, "A"));
  CHECK(M(p)->commit(p, 1, &E));
  ASSERT_EQ(depths(p).orchestrator, 1);
  ASSERT_EQ(depths(p).instances, 1);
  M(p)->destroy(p);
}
