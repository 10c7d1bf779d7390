/*
** provider_validation.h -- the provider contract tests, shared by every provider.
**
** provider_validation*.c hold DX_TEST functions that only use the vtable. A provider's test
** program links them and defines the hooks below (see test_provider_lmdb.c).
*/
#ifndef DX_PROVIDER_VALIDATION_H
#define DX_PROVIDER_VALIDATION_H

#include <stdint.h>
#include <sys/types.h>

#include "duroxide/provider.h"

/* A location for a new, empty store (malloc'd); every call returns a different one. */
char *dx_pv_new_store(void);
/* Open a handle on `store`; fails the test when the provider cannot. */
dx_provider_t *dx_pv_open(const char *store);
/* Overwrite one history event with bytes that do not decode. 0, or -1 when the provider
** cannot (the corruption test is then skipped). */
int dx_pv_corrupt_history(dx_provider_t *p, const char *instance, uint64_t execution_id,
                          uint64_t event_id);
/* 1 when separate processes may use one store at the same time (fork tests run). */
int dx_pv_multi_process(void);

/* Rows (keys or values, in any table of the store) whose bytes contain `text`; called with
** no handle open on `store`. The management tests use it to prove a deletion left nothing. */
uint64_t dx_pv_rows_naming(const char *store, const char *text);

/* {===== shared by the suite's files =====}
** Each file that uses CHECK / CHECK_ERR defines `static dx_error_t E;` (the last call's error
** detail, printed on failure) and includes testlib.h. */
#define T0 INT64_C(1700000000000)
#define LOCK 30000
#define M(p) ((p)->methods)

#define CHECK(call)                                                                 \
  do {                                                                              \
    int rc_ = (call);                                                               \
    if (rc_ != 0) DX_FAIL_AT("%s -> %s: %s", #call, dx_err_name(rc_), E.msg);      \
  } while (0)
#define CHECK_ERR(call, code)                                                       \
  do {                                                                              \
    int rc_ = (call);                                                               \
    if (rc_ != (code))                                                              \
      DX_FAIL_AT("%s -> %s, expected %s (%s)", #call, dx_err_name(rc_),            \
                 dx_err_name(code), rc_ ? E.msg : "");                              \
  } while (0)

/* A child process that registers `worker` on `store` (claim 0: and nothing else; 1: claims
** session s1; 2: locks the due plain row and instance), then waits to be killed; returns its
** pid once it holds that (provider_validation.c). dx_pv_kill_holder: SIGKILL and reap. */
pid_t dx_pv_spawn_holder(const char *store, const char *worker, int claim);
void dx_pv_kill_holder(pid_t pid);

/* A handle on a new, empty store (dx_pv_new_store + dx_pv_open). */
dx_provider_t *dx_pv_fresh(void);

/* {===== fixtures of the suite's files (provider_validation*.c) =====}
** Work items, queue calls and turns in virtual time (provider_validation.c); each fails the
** test on an error. dx_pv_fetch: the next orchestration item or NULL; dx_pv_delta: `n` events
** continuing it->history (ORCH_STARTED first); dx_pv_ack_of: an ack of `it` releasing its lock
** only; dx_pv_turn: ack `it` with `n` new events, then free it; dx_pv_create_instance: start
** `inst` and commit its first turn; dx_pv_has_record: 1 when `id` has an instance record. */
void dx_pv_done(dx_provider_t *p);
dx_work_item_t dx_pv_wi(int kind, const char *inst, uint64_t exec, uint64_t id);
dx_work_item_t dx_pv_start_item(const char *inst);
dx_work_item_t dx_pv_raise_item(const char *inst);
dx_work_item_t dx_pv_act_item(const char *inst, uint64_t exec, uint64_t id);
dx_work_item_t dx_pv_act_done(const char *inst, uint64_t exec, uint64_t id);
void dx_pv_enqueue(dx_provider_t *p, int64_t now, dx_work_item_t w);
void dx_pv_enqueue_work(dx_provider_t *p, int64_t now, dx_work_item_t w);
dx_orch_item_t *dx_pv_fetch(dx_provider_t *p, int64_t now);
dx_work_fetch_t dx_pv_wfetch(dx_provider_t *p, int64_t now);
const dx_event_t *dx_pv_delta(dx_event_t *ev, size_t n, const dx_orch_item_t *it);
dx_orch_ack_t dx_pv_ack_of(const dx_orch_item_t *it);
void dx_pv_turn(dx_provider_t *p, int64_t now, dx_orch_item_t *it, size_t n);
void dx_pv_create_instance(dx_provider_t *p, int64_t now, const char *inst);
dx_queue_depths_t dx_pv_depths(dx_provider_t *p);
size_t dx_pv_history_len(dx_provider_t *p, const char *inst, uint64_t exec);
int64_t dx_pv_next_due(dx_provider_t *p, int64_t now);
int64_t dx_pv_wall_ms(void);
int dx_pv_has_record(dx_provider_t *p, const char *id);

/* Fork `n` (<= 8) children running fn(store, i, fd) (fd: write end of a shared pipe); their
** output, malloc'd (provider_validation_commit.c). In a child, CHILD_CHECK reports and exits 3. */
char *dx_pv_run_children(const char *store, int n, void (*fn)(const char *, int, int));
#define CHILD_CHECK(c)                                                              \
  do {                                                                              \
    if (!(c)) {                                                                     \
      fprintf(stderr, "# child %d: %s failed at line %d: %s\n", (int)getpid(), #c,  \
              __LINE__, E.msg);                                                     \
      _exit(3);                                                                     \
    }                                                                               \
  } while (0)

/* Sessions (provider_validation_sessions.c): an activity of session `sid`; a fetch as
** `worker` with room for `max` sessions; dx_pv_take: fetch and expect item `id` (0: nothing),
** returns session_claimed; dx_pv_take_ack: take item `id` and ack it; the listed rows. */
#define SLOCK 10000 /* session lease; the item lock is LOCK (longer) */
typedef struct {
  char sid[32], owner[32];
  int64_t locked, last;
  uint64_t queued, running;
} dx_pv_srow_t;
typedef struct {
  dx_pv_srow_t v[16];
  int n;
} dx_pv_srows_t;
dx_work_item_t dx_pv_sess_item(const char *inst, uint64_t id, const char *sid);
dx_work_fetch_t dx_pv_sfetch(dx_provider_t *p, int64_t now, const char *worker, uint32_t max);
void dx_pv_fclear(dx_work_fetch_t *f);
int dx_pv_take(dx_provider_t *p, int64_t now, const char *worker, uint32_t max, uint64_t id);
void dx_pv_take_ack(dx_provider_t *p, int64_t now, const char *worker, uint64_t id);
dx_pv_srows_t dx_pv_sessions_of(dx_provider_t *p);
dx_pv_srow_t dx_pv_srow(dx_provider_t *p, const char *sid); /* fails when there is none */
uint64_t dx_pv_release_sessions(dx_provider_t *p, int64_t now, const char *worker,
                                const char *sid);

#endif
