/*
** provider_validation_commit.c -- provider contract tests of group commit (several turns and
** fetches in one batch), of scale and corruption, and of several processes on one store.
** Linked with provider_validation.c into every provider's test program; uses only the vtable
** and the hooks of provider_validation.h. Virtual time, except the multi-process tests, which
** run on the wall clock with long locks.
*/
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <signal.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E; /* the last call's error detail, printed by CHECK */

/* {===== group commit =====} */

static void *read_info_thread(void *arg) {
  return (void *)(intptr_t)dx_pv_has_record(arg, "A");
}

DX_TEST(pv_group_commit_batches_acks) {
  dx_provider_t *p = dx_pv_fresh();
  const char *names[3] = {"A", "B", "C"};
  dx_orch_item_t *it[3], *bad;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  pthread_t th;
  void *res;
  int i;
  for (i = 0; i < 3; i++) dx_pv_enqueue(p, T0 + i, dx_pv_start_item(names[i]));
  for (i = 0; i < 3; i++) ASSERT((it[i] = dx_pv_fetch(p, T0 + 10)) != NULL);
  CHECK(M(p)->begin(p, &E));
  CHECK_ERR(M(p)->begin(p, &E), DX_ESTATE);
  dx_pv_turn(p, T0 + 20, it[0], 1);
  bad = it[1];
  a = dx_pv_ack_of(bad);
  a.lock_token ^= 1;
  a.delta = dx_pv_delta(ev, 1, bad);
  a.delta_len = 1;
  CHECK_ERR(M(p)->ack_orchestration_item(p, T0 + 20, &a, &E), DX_ETOKEN); /* batch stays usable */
  dx_pv_turn(p, T0 + 20, it[2], 1);
  dx_pv_enqueue(p, T0 + 21, dx_pv_raise_item("A"));
  ASSERT_EQ(dx_pv_depths(p).instances, 2); /* reads in the batch see its writes */
  pthread_create(&th, NULL, read_info_thread, p);
  pthread_join(th, &res);
  ASSERT_EQ((intptr_t)res, 0); /* other threads do not, until commit */
  CHECK(M(p)->commit(p, 1, &E));
  CHECK_ERR(M(p)->commit(p, 1, &E), DX_ESTATE);
  ASSERT_EQ(dx_pv_depths(p).instances, 2);
  ASSERT_EQ(dx_pv_history_len(p, "A", 1), 1);
  ASSERT_EQ(dx_pv_history_len(p, "C", 1), 1);
  pthread_create(&th, NULL, read_info_thread, p);
  pthread_join(th, &res);
  ASSERT_EQ((intptr_t)res, 1); /* committed: visible to everyone */
  CHECK(M(p)->begin(p, &E)); /* sync=0 commit */
  dx_pv_turn(p, T0 + 22, bad, 1);
  CHECK(M(p)->commit(p, 0, &E));
  ASSERT_EQ(dx_pv_depths(p).instances, 3);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1); /* A's raise */
  dx_pv_done(p);
}

/* What falls due while a batch is open is fetched in it: a lapsed lock, a row abandoned in
** the batch, a delayed message whose time came (LMDB remembers for the batch how early the
** next due entry of each queue index can be; it must follow the batch's clock and writes). */
DX_TEST(pv_items_falling_due_within_a_batch_are_fetched_in_it) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t start = dx_pv_start_item("O");
  dx_work_fetch_t f, g;
  dx_orch_item_t *it;
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("A", 1, 1));
  f = dx_pv_wfetch(p, T0); /* locked until T0 + LOCK */
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->enqueue_for_orchestrator(p, T0, &start, 100, &E)); /* due at T0 + 100 */
  CHECK(M(p)->begin(p, &E));
  g = dx_pv_wfetch(p, T0 + 1);
  ASSERT_EQ(g.item.kind, 0);
  it = dx_pv_fetch(p, T0 + 1);
  ASSERT(!it);
  it = dx_pv_fetch(p, T0 + 100);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "O");
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 100, "O", it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  it = dx_pv_fetch(p, T0 + 100); /* released at once: ready again */
  ASSERT(it);
  dx_orch_item_free(it);
  g = dx_pv_wfetch(p, T0 + LOCK); /* the lock lapsed */
  ASSERT_EQ(g.item.id, 1);
  ASSERT_EQ(g.attempt_count, 2);
  CHECK(M(p)->abandon_work_item(p, T0 + LOCK, g.lock_token, 0, 0, &E));
  dx_pv_fclear(&g);
  g = dx_pv_wfetch(p, T0 + LOCK); /* abandoned: ready again at once */
  ASSERT_EQ(g.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + LOCK, g.lock_token, NULL, &E));
  dx_pv_fclear(&g);
  CHECK(M(p)->commit(p, 1, &E));
  g = dx_pv_wfetch(p, T0 + 2 * LOCK);
  ASSERT_EQ(g.item.kind, 0);
  dx_pv_fclear(&f);
  dx_pv_done(p);
}

/* Activities a turn schedules and the same batch fetches (the store cycle: acks, then work
** fetches, one commit): FIFO with rows queued before the batch, acked in the batch by their
** token, the rest fetched after the commit; a later turn of the batch cancels one it has not
** handed out; methods of the batch (depths) see the queued rows. */
DX_TEST(pv_work_scheduled_and_fetched_in_one_batch) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t acts[4], more[1];
  dx_activity_ref_t cancel;
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[2];
  dx_work_fetch_t f[5];
  int i;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  dx_pv_enqueue_work(p, T0, dx_pv_act_item("old", 1, 1));
  it = dx_pv_fetch(p, T0 + 1);
  ASSERT(it);
  dx_pv_enqueue(p, T0 + 1, dx_pv_raise_item("A")); /* waits behind the lock: A's next turn */
  for (i = 0; i < 4; i++) acts[i] = dx_pv_act_item("A", 1, (uint64_t)i + 1);
  CHECK(M(p)->begin(p, &E));
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = acts;
  a.worker_items_len = 4;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 2, &a, &E));
  dx_orch_item_free(it);
  f[0] = dx_pv_wfetch(p, T0 + 3);
  ASSERT_STR_EQ(f[0].item.instance, "old"); /* queued first, taken first */
  f[1] = dx_pv_wfetch(p, T0 + 3);
  ASSERT_STR_EQ(f[1].item.instance, "A");
  ASSERT_EQ(f[1].item.id, 1);
  ASSERT_EQ(f[1].attempt_count, 1);
  ASSERT_STR_EQ(f[1].item.name, "Act");
  CHECK(M(p)->ack_work_item(p, T0 + 4, f[1].lock_token, NULL, &E)); /* acked in the batch */
  CHECK_ERR(M(p)->ack_work_item(p, T0 + 4, f[1].lock_token, NULL, &E), DX_ELOCK);
  f[2] = dx_pv_wfetch(p, T0 + 4);
  ASSERT_EQ(f[2].item.id, 2);
  /* the instance's next turn in the same batch withdraws activity 4 */
  it = dx_pv_fetch(p, T0 + 6);
  ASSERT(it);
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  cancel.instance = "A";
  cancel.execution_id = 1;
  cancel.activity_id = 4;
  a.cancelled = &cancel;
  a.cancelled_len = 1;
  more[0] = dx_pv_act_item("A", 1, 5);
  a.worker_items = more;
  a.worker_items_len = 1;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 7, &a, &E));
  dx_orch_item_free(it);
  ASSERT_EQ(dx_pv_depths(p).worker, 4); /* old, A#2 (locked), A#3, A#5; A#1 acked, A#4 withdrawn */
  CHECK(M(p)->commit(p, 1, &E));
  f[3] = dx_pv_wfetch(p, T0 + 8);
  ASSERT_EQ(f[3].item.id, 3);
  ASSERT_EQ(f[3].attempt_count, 1);
  f[4] = dx_pv_wfetch(p, T0 + 8);
  ASSERT_EQ(f[4].item.id, 5);
  ASSERT(dx_pv_wfetch(p, T0 + 8).item.kind == 0); /* 4 is gone */
  for (i = 0; i < 5; i++) {
    if (i != 1) CHECK(M(p)->ack_work_item(p, T0 + 9, f[i].lock_token, NULL, &E));
    dx_work_item_clear(&f[i].item);
  }
  ASSERT_EQ(dx_pv_depths(p).worker, 0);
  dx_pv_done(p);
}

/* A rolled-back batch takes its queued activities with it, fetched or not. */
DX_TEST(pv_rollback_drops_work_scheduled_in_the_batch) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t acts[2];
  dx_orch_item_t *it;
  dx_orch_ack_t a;
  dx_event_t ev[1];
  dx_work_fetch_t f;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  it = dx_pv_fetch(p, T0 + 1);
  ASSERT(it);
  acts[0] = dx_pv_act_item("A", 1, 1);
  acts[1] = dx_pv_act_item("A", 1, 2);
  CHECK(M(p)->begin(p, &E));
  a = dx_pv_ack_of(it);
  a.delta = dx_pv_delta(ev, 1, it);
  a.delta_len = 1;
  a.worker_items = acts;
  a.worker_items_len = 2;
  CHECK(M(p)->ack_orchestration_item(p, T0 + 2, &a, &E));
  f = dx_pv_wfetch(p, T0 + 3);
  ASSERT_EQ(f.item.id, 1);
  dx_work_item_clear(&f.item);
  M(p)->rollback(p);
  ASSERT(dx_pv_wfetch(p, T0 + 4).item.kind == 0);
  ASSERT_EQ(dx_pv_depths(p).worker, 0);
  CHECK(M(p)->ack_orchestration_item(p, T0 + 5, &a, &E)); /* the lock is still held */
  dx_orch_item_free(it);
  f = dx_pv_wfetch(p, T0 + 6);
  ASSERT_EQ(f.item.id, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 7, f.lock_token, NULL, &E));
  dx_work_item_clear(&f.item);
  dx_pv_done(p);
}

/* An activity's result for an idle instance and the turn it unblocks in one batch (the store
** cycle: acks, then fetches): ready-time order with instances made ready before the batch,
** seen by other methods of the batch, fetched after the commit when the batch did not take
** it, and gone with a rollback. */
DX_TEST(pv_instance_made_ready_and_fetched_in_one_batch) {
  dx_provider_t *p = dx_pv_fresh();
  const char *names[3] = {"A", "C", "D"};
  dx_work_fetch_t f[3];
  dx_work_item_t done_item;
  dx_orch_item_t *it;
  int i;
  dx_pv_create_instance(p, T0, "B");
  for (i = 0; i < 3; i++) {
    dx_pv_create_instance(p, T0, names[i]);
    dx_pv_enqueue_work(p, T0, dx_pv_act_item(names[i], 1, 1));
    f[i] = dx_pv_wfetch(p, T0);
    ASSERT_STR_EQ(f[i].item.instance, names[i]);
  }
  dx_pv_enqueue(p, T0 + 1, dx_pv_raise_item("B"));
  CHECK(M(p)->begin(p, &E));
  done_item = dx_pv_act_done("A", 1, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 2, f[0].lock_token, &done_item, &E));
  done_item = dx_pv_act_done("C", 1, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 3, f[1].lock_token, &done_item, &E));
  it = dx_pv_fetch(p, T0 + 4);
  ASSERT(it && strcmp(it->instance, "B") == 0); /* ready first */
  dx_pv_turn(p, T0 + 4, it, 1);
  it = dx_pv_fetch(p, T0 + 4);
  ASSERT(it && strcmp(it->instance, "A") == 0);
  ASSERT_EQ(it->messages_len, 1);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  ASSERT_EQ(it->attempt_count, 1);
  ASSERT_EQ(it->history_len, 1);
  dx_pv_turn(p, T0 + 5, it, 1); /* unblocked turn acked in the same batch */
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 1); /* C's result, seen by a read in the batch */
  CHECK(M(p)->commit(p, 1, &E));
  it = dx_pv_fetch(p, T0 + 6);
  ASSERT(it && strcmp(it->instance, "C") == 0);
  ASSERT_EQ(it->messages[0].kind, DX_WI_ACT_COMPLETED);
  dx_pv_turn(p, T0 + 6, it, 1);
  ASSERT(dx_pv_fetch(p, T0 + 7) == NULL);
  ASSERT_EQ(dx_pv_history_len(p, "A", 1), 2);
  ASSERT_EQ(dx_pv_history_len(p, "C", 1), 2);
  /* a rolled-back batch takes the result and the readiness with it */
  CHECK(M(p)->begin(p, &E));
  done_item = dx_pv_act_done("D", 1, 1);
  CHECK(M(p)->ack_work_item(p, T0 + 8, f[2].lock_token, &done_item, &E));
  it = dx_pv_fetch(p, T0 + 9);
  ASSERT(it && strcmp(it->instance, "D") == 0);
  dx_orch_item_free(it);
  M(p)->rollback(p);
  ASSERT(dx_pv_fetch(p, T0 + 10) == NULL);
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  CHECK(M(p)->ack_work_item(p, T0 + 11, f[2].lock_token, &done_item, &E)); /* still locked */
  it = dx_pv_fetch(p, T0 + 12);
  ASSERT(it && strcmp(it->instance, "D") == 0);
  ASSERT_EQ(it->attempt_count, 1);
  dx_pv_turn(p, T0 + 12, it, 1);
  for (i = 0; i < 3; i++) dx_work_item_clear(&f[i].item);
  dx_pv_done(p);
}

DX_TEST(pv_group_commit_rollback) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it, *again;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  CHECK(M(p)->begin(p, &E));
  it = dx_pv_fetch(p, T0);
  ASSERT(it);
  dx_pv_turn(p, T0 + 1, it, 1);
  M(p)->rollback(p); /* undoes the fetch's lock and the ack */
  ASSERT(!dx_pv_has_record(p, "A"));
  again = dx_pv_fetch(p, T0 + 2);
  ASSERT(again);
  ASSERT_EQ(again->attempt_count, 1);
  dx_pv_turn(p, T0 + 3, again, 1);
  M(p)->rollback(p); /* no batch: nothing happens */
  ASSERT_EQ(dx_pv_depths(p).instances, 1);
  dx_pv_done(p);
}

/* {===== scale and corruption =====} */

DX_TEST(pv_fetch_skips_thousands_of_locked_and_delayed_rows) {
  dx_provider_t *p = dx_pv_fresh();
  enum { N = 5000 };
  char inst[32];
  dx_orch_item_t *it;
  dx_work_fetch_t f;
  int i;
  CHECK(M(p)->begin(p, &E));
  for (i = 0; i < N; i++) {
    dx_work_item_t t;
    snprintf(inst, sizeof inst, "timer-%d", i);
    t = dx_pv_wi(DX_WI_TIMER_FIRED, inst, 1, 1);
    t.fire_at_ms = T0 + 3600000;
    dx_pv_enqueue(p, T0, t);
    dx_pv_enqueue_work(p, T0, dx_pv_act_item("W", 1, (uint64_t)i + 1));
  }
  for (i = 0; i < N; i++) {
    f = dx_pv_wfetch(p, T0);
    ASSERT_EQ(f.item.id, (uint64_t)i + 1);
    dx_work_item_clear(&f.item);
  }
  CHECK(M(p)->commit(p, 1, &E));
  dx_pv_enqueue_work(p, T0 + 1, dx_pv_act_item("W", 1, 999999));
  dx_pv_enqueue(p, T0 + 1, dx_pv_start_item("visible"));
  f = dx_pv_wfetch(p, T0 + 2);
  ASSERT_EQ(f.item.id, 999999);
  dx_work_item_clear(&f.item);
  f = dx_pv_wfetch(p, T0 + 3);
  ASSERT_EQ(f.item.kind, 0);
  it = dx_pv_fetch(p, T0 + 2);
  ASSERT(it);
  ASSERT_STR_EQ(it->instance, "visible");
  dx_orch_item_free(it);
  ASSERT(dx_pv_fetch(p, T0 + 3) == NULL);
  /* the first worker locks expire first; a provider with liveness may look sooner */
  ASSERT(dx_pv_next_due(p, T0 + 3) > T0 + 3 && dx_pv_next_due(p, T0 + 3) <= T0 + LOCK);
  dx_pv_done(p);
}

DX_TEST(pv_corrupted_history_is_reported) {
  dx_provider_t *p = dx_pv_fresh();
  dx_orch_item_t *it;
  dx_event_t *ev = NULL;
  size_t n = 0;
  dx_pv_enqueue(p, T0, dx_pv_start_item("A"));
  dx_pv_turn(p, T0, dx_pv_fetch(p, T0), 3);
  if (dx_pv_corrupt_history(p, "A", 1, 2) != 0) { /* provider cannot: skip */
    dx_pv_done(p);
    return;
  }
  dx_pv_enqueue(p, T0 + 1, dx_pv_raise_item("A"));
  it = dx_pv_fetch(p, T0 + 2);
  ASSERT(it);
  ASSERT_EQ(it->history_error, DX_ECORRUPT);
  ASSERT_EQ(it->history_len, 0);
  ASSERT_CONTAINS(it->history_error_msg, "'A'");
  ASSERT_CONTAINS(it->history_error_msg, "event 2");
  ASSERT_EQ(it->messages_len, 1);
  ASSERT(dx_pv_fetch(p, T0 + 3) == NULL); /* the lock is held */
  CHECK_ERR(M(p)->read_history(p, "A", 0, &ev, &n, NULL, &E), DX_ECORRUPT);
  ASSERT_CONTAINS(E.msg, "history");
  ASSERT_CONTAINS(E.msg, "event 2");
  ASSERT(ev == NULL);
  CHECK(M(p)->abandon_orchestration_item(p, T0 + 4, "A", it->lock_token, 0, 0, &E));
  dx_orch_item_free(it);
  dx_pv_done(p);
}

/* {===== several processes on one store =====} */

/* Fork `n` children running fn(store, i, fd) (fd: write end of a shared pipe) on their own
** handles; collect their output into buf (malloc'd, NUL-terminated); fail on any bad exit. */
char *dx_pv_run_children(const char *store, int n, void (*fn)(const char *, int, int)) {
  size_t len = 0, cap = 4096;
  char *buf;
  pid_t pids[8];
  int fds[2], i;
  ssize_t got;
  ASSERT(n <= 8 && pipe(fds) == 0);
  fflush(NULL);
  for (i = 0; i < n; i++) {
    ASSERT((pids[i] = fork()) >= 0);
    if (pids[i] == 0) {
      close(fds[0]);
      fn(store, i, fds[1]);
      _exit(0); /* never run the parent's atexit handlers (they remove the store) */
    }
  }
  close(fds[1]);
  ASSERT((buf = malloc(cap)) != NULL); /* after fork: children must not inherit it */
  while ((got = read(fds[0], buf + len, cap - len - 1)) > 0) {
    len += (size_t)got;
    if (cap - len < 256) ASSERT((buf = realloc(buf, cap *= 2)) != NULL);
  }
  close(fds[0]);
  buf[len] = 0;
  for (i = 0; i < n; i++) {
    int status = 0;
    ASSERT(waitpid(pids[i], &status, 0) == pids[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      DX_FAIL_AT("child %d failed (status %d)", i, status);
  }
  return buf;
}

enum { WORK_ROWS = 400 };

static void worker_child(const char *store, int idx, int fd) {
  dx_provider_t *p = dx_pv_open(store);
  for (;;) {
    dx_work_fetch_t f;
    dx_work_item_t reply;
    char line[32];
    int n;
    CHILD_CHECK(M(p)->fetch_work_item(p, dx_pv_wall_ms(), 60000, NULL, &f, &E) == 0);
    if (f.item.kind == 0) break;
    reply = dx_pv_act_done("sink", 1, f.item.id);
    CHILD_CHECK(M(p)->ack_work_item(p, dx_pv_wall_ms(), f.lock_token, &reply, &E) == 0);
    n = snprintf(line, sizeof line, "%llu\n", (unsigned long long)f.item.id);
    CHILD_CHECK(write(fd, line, (size_t)n) == n);
    dx_work_item_clear(&f.item);
  }
  dx_pv_done(p);
}

DX_TEST(pv_multi_process_workers_ack_each_row_once) {
  char *store = dx_pv_new_store(), *out, *s;
  dx_provider_t *p;
  static int seen[WORK_ROWS + 1];
  int i, total = 0;
  dx_queue_depths_t d;
  if (!dx_pv_multi_process()) { free(store); return; }
  p = dx_pv_open(store);
  CHECK(M(p)->begin(p, &E));
  for (i = 1; i <= WORK_ROWS; i++)
    dx_pv_enqueue_work(p, dx_pv_wall_ms(), dx_pv_act_item("W", 1, (uint64_t)i));
  CHECK(M(p)->commit(p, 1, &E));
  dx_pv_done(p); /* children open their own env: never share one across fork */
  out = dx_pv_run_children(store, 4, worker_child);
  for (s = strtok(out, "\n"); s; s = strtok(NULL, "\n")) {
    int id = atoi(s);
    ASSERT(id >= 1 && id <= WORK_ROWS);
    seen[id]++;
    total++;
  }
  free(out);
  ASSERT_EQ(total, WORK_ROWS);
  for (i = 1; i <= WORK_ROWS; i++) ASSERT_EQ(seen[i], 1);
  p = dx_pv_open(store);
  d = dx_pv_depths(p);
  ASSERT_EQ(d.worker, 0);
  ASSERT_EQ(d.orchestrator, WORK_ROWS);
  dx_pv_done(p);
  free(store);
}

enum { ORCH_INSTANCES = 10, ORCH_TURNS = 5 };

typedef struct {
  atomic_int holders[ORCH_INSTANCES];
  atomic_int violations;
  atomic_int turns;
} orch_shared_t;

static orch_shared_t *g_shared; /* MAP_SHARED: visible to every child */

static void orch_child(const char *store, int idx, int fd) {
  dx_provider_t *p = dx_pv_open(store);
  int64_t deadline = dx_pv_wall_ms() + 60000;
  while (atomic_load(&g_shared->turns) < ORCH_INSTANCES * ORCH_TURNS &&
         dx_pv_wall_ms() < deadline) {
    dx_orch_item_t *it = NULL;
    dx_work_item_t next;
    dx_event_t ev[1];
    dx_orch_ack_t a;
    int i;
    CHILD_CHECK(M(p)->fetch_orchestration_item(p, dx_pv_wall_ms(), 60000, &it, &E) == 0);
    if (!it) {
      usleep(500);
      continue;
    }
    i = atoi(it->instance + 5); /* "inst-N" */
    CHILD_CHECK(i >= 0 && i < ORCH_INSTANCES);
    if (atomic_fetch_add(&g_shared->holders[i], 1) != 0) atomic_fetch_add(&g_shared->violations, 1);
    a = dx_pv_ack_of(it);
    a.delta = dx_pv_delta(ev, 1, it);
    a.delta_len = 1;
    next = dx_pv_raise_item(it->instance); /* one more turn for this instance */
    a.orch_items = &next;
    a.orch_items_len = it->history_len + 1 < ORCH_TURNS;
    usleep(200); /* widen the window in which a second holder would show */
    atomic_fetch_sub(&g_shared->holders[i], 1); /* before ack: then the lock can move on */
    CHILD_CHECK(M(p)->ack_orchestration_item(p, dx_pv_wall_ms(), &a, &E) == 0);
    atomic_fetch_add(&g_shared->turns, 1);
    dx_orch_item_free(it);
  }
  dx_pv_done(p);
}

DX_TEST(pv_multi_process_orchestrators_exclusive) {
  char *store = dx_pv_new_store(), inst[32];
  dx_provider_t *p;
  int i;
  if (!dx_pv_multi_process()) { free(store); return; }
  g_shared = mmap(NULL, sizeof *g_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
  ASSERT(g_shared != MAP_FAILED);
  memset(g_shared, 0, sizeof *g_shared);
  p = dx_pv_open(store);
  for (i = 0; i < ORCH_INSTANCES; i++) {
    snprintf(inst, sizeof inst, "inst-%d", i);
    dx_pv_enqueue(p, dx_pv_wall_ms(), dx_pv_start_item(inst));
  }
  dx_pv_done(p);
  free(dx_pv_run_children(store, 2, orch_child));
  ASSERT_EQ(atomic_load(&g_shared->violations), 0);
  ASSERT_EQ(atomic_load(&g_shared->turns), ORCH_INSTANCES * ORCH_TURNS);
  p = dx_pv_open(store);
  for (i = 0; i < ORCH_INSTANCES; i++) {
    snprintf(inst, sizeof inst, "inst-%d", i);
    ASSERT_EQ(dx_pv_history_len(p, inst, 1), ORCH_TURNS);
  }
  ASSERT_EQ(dx_pv_depths(p).orchestrator, 0);
  dx_pv_done(p);
  free(store);
}
