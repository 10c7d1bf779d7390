/*
** store.h -- the store thread: every provider call of a runtime, with group commit (internal).
**
** The loop thread queues operations (acks, abandons, renewals) and states how many new items
** it can take. Until an item's settlement is applied, the store thread also keeps its lock
** alive when the loop cannot (see store.c). The store thread runs cycles: one transaction
** applies every queued operation, fetches up to the wanted number of orchestration and work
** items, and commits with a single fsync (none when the cycle only took locks). On a local
** store a cycle that fetched a few turns waits a moment for their acks before it commits, so
** they share its commit (cfg.hold_ms). Results go back to the loop through a
** uv_async; callbacks run on the loop thread.
*/
#ifndef DX_STORE_H
#define DX_STORE_H

#include <uv.h>

#include "duroxide/executor.h"
#include "duroxide/provider.h"

typedef struct dx_store_s dx_store_t;
typedef struct dx_store_op_s dx_store_op_t;

enum {
  DX_OP_ACK_ORCH = 1,
  DX_OP_ABANDON_ORCH,
  DX_OP_ACK_WORK,
  DX_OP_ABANDON_WORK,
  DX_OP_RENEW_WORK,
  DX_OP_ENQUEUE_ORCH,
  DX_OP_RENEW_SESSIONS,   /* worker_id, delay_ms = extension, idle_ms; fills ids/n_ids */
  DX_OP_RELEASE_SESSIONS, /* worker_id, session_id (NULL = all); fills count */
  DX_OP_CLEANUP_SESSIONS, /* fills count */
  DX_OP_DECLINE_SESSION,  /* session_id, delay_ms: this worker's fetches skip the session for
                             delay_ms (a rolling upgrade: it lacks one of its activities) */
  DX_OP_SESSION_EVENT     /* sev: append to the session's history (no-op without provider v6) */
};

typedef void (*dx_store_op_cb)(dx_store_op_t *op);

/* One queued operation. The caller allocates it (it may be embedded in a larger struct),
** keeps every pointer valid until `done` runs on the loop thread, and owns it afterwards. */
struct dx_store_op_s {
  int kind;
  const dx_orch_ack_t *ack;          /* ACK_ORCH */
  const char *instance;              /* ABANDON_ORCH */
  uint64_t token;                    /* all but ACK_ORCH/ENQUEUE */
  const dx_work_item_t *item;        /* ACK_WORK completion (may be NULL), ENQUEUE_ORCH */
  int64_t delay_ms;                  /* ABANDON_*, ENQUEUE_ORCH; RENEW_WORK: extension */
  int ignore_attempt;
  int eager;                         /* ENQUEUE_ORCH: this process's client start, which the
                                        cycle commits with its first turn (cycle_once) */
  const char *worker_id;             /* session ops */
  const char *session_id;
  int64_t idle_ms;
  char **ids;                        /* RENEW_SESSIONS: renewed ids (owned by the op's owner) */
  size_t n_ids;
  char **ended;                      /* RENEW_SESSIONS: those of them that ended (owned) */
  size_t n_ended;
  uint64_t count;                    /* RELEASE/CLEANUP_SESSIONS */
  const dx_session_event_t *sev;     /* SESSION_EVENT */
  int64_t at_ms;                     /* out: the store's clock when the op ran */
  int rc;                            /* result */
  dx_error_t err;
  dx_store_op_cb done;
  /* ACK_ORCH, optional (loop thread): the ack was applied (rc 0) inside a transaction that then
  ** hands the loop more items before it commits (a local store's held rounds,
  ** store_rounds.c). It runs before those items are delivered; `done` follows with the final
  ** outcome (non-zero when the transaction was lost). From this call on the store thread no
  ** longer reads op->ack: the loop may take the ack's memory back (the orchestration cache
  ** keeps the turn). */
  dx_store_op_cb applied;
  void *ud;
  dx_store_op_t *next;
  /* store thread: 1 applied in the open transaction, 2 reported through `applied` (it is not
  ** applied again if that transaction is lost: it is refused) */
  int hstate;
  int handed;           /* store thread: it settled an item handed over in the open
                           transaction (store_rounds.c; set when applied) */
  dx_store_op_t *anext; /* the store's list of applied ops the loop is told about */
};

/* Items fetched by a cycle, handed to the loop. */
typedef struct dx_store_fetched_s {
  dx_orch_item_t **orch;    /* owned by the receiver: dx_orch_item_free each */
  size_t n_orch;
  dx_work_fetch_t *work;    /* owned by the receiver: dx_work_item_clear each .item */
  size_t n_work;
  int64_t at_ms;            /* the store's clock when they were fetched */
  size_t cap_orch, cap_work; /* store thread: room in orch / work */
} dx_store_fetched_t;

typedef void (*dx_store_fetch_cb)(void *ud, dx_store_fetched_t *f);
typedef int64_t (*dx_clock_fn)(void *ud);

typedef struct dx_store_cfg_s {
  dx_provider_t *provider;
  int64_t orch_lock_ms;
  int64_t work_lock_ms;
  int64_t work_renew_ms;             /* how often the loop renews activity locks */
  int64_t session_renew_ms;          /* how often the loop renews session leases */
  int64_t session_idle_ms;           /* session_idle_timeout (renewals skip idle sessions) */
  int64_t poll_interval_ms;
  /* A cycle on a local store (provider without run_cycle) that fetched a few orchestration
  ** items (and then the activities they schedule, for several rounds) hands them to the loop
  ** before committing and waits up to hold_ms each time for their answers, which then commit
  ** in the same transaction (store_rounds.c). 0 = never. */
  int64_t hold_ms;
  size_t heap_prefault;              /* bytes of this thread's heap touched at its start (heap.c) */
  /* With hold_ms: the held rounds also hand the loop the activities the turns scheduled (and
  ** then the turns their results wake), not only turns and close items. All waits of a cycle
  ** together last at most 2 * hold_ms. */
  int hold_work;
  int64_t turn_time_limit_ms;        /* turns end by then: orchestration locks renewed past it */
  const dx_session_cfg_t *sessions;  /* NULL = no session work */
  dx_store_fetch_cb on_fetch;        /* loop thread */
  void *ud;
  /* loop thread, once: the store cannot be used any more (damaged, lock file gone) */
  void (*on_fatal)(void *ud, const dx_error_t *err);
  /* What this worker fetches (provider set_fetch_filter): tag_filter's tags (borrowed, NULL =
  ** untagged only) and the orchestrations host->orch_capabilities names (re-read whenever
  ** the host's registrations change). host NULL: every orchestration. */
  const dx_fetch_filter_t *tag_filter;
  const dx_host_methods_t *host;
  void *host_ud;
  dx_clock_fn clock;                 /* NULL = wall clock */
  void *clock_ud;
  struct dx_metrics_s *metrics;      /* NULL = none; the thread records cycles, commits,
                                        operations and polls queue depths (metrics.h) */
  const char *worker_id;             /* for the JSON logs of both threads (may be NULL) */
} dx_store_cfg_t;

int dx__store_new(dx_store_t **out, uv_loop_t *loop, const dx_store_cfg_t *cfg, dx_error_t *err);
/* Queue an operation (loop thread). */
void dx__store_submit(dx_store_t *s, dx_store_op_t *op);
/* (loop thread) A fetched item the loop is done with: freed on the store thread, which
** allocated it (store_mem.c). give_work takes *w's fields and zeroes it. s NULL (the store
** is gone): freed at once. */
void dx__store_give_orch(dx_store_t *s, dx_orch_item_t *it);
void dx__store_give_work(dx_store_t *s, dx_work_item_t *w);
/* How many more items the loop can take now (loop thread); wakes the store thread. */
void dx__store_want(dx_store_t *s, int orch, int work);
/* Wake the store thread (any thread). */
void dx__store_poke(dx_store_t *s);
/* Ask the store thread to look for due work now (a cheap read first, unlike poke). */
void dx__store_wake(dx_store_t *s);
/* Stop fetching; queued operations are still applied. */
void dx__store_stop_fetching(dx_store_t *s);
/* Stop the thread after flushing queued operations, close handles, then call cb (loop). */
void dx__store_close(dx_store_t *s, void (*cb)(void *ud), void *ud);
/* Tests (a simulated stall, duroxide.testing stall_worker): on = 1 the thread runs no cycle
** (no fetch, ack or renewal) until called again with 0; it returns once the thread has halted
** (a cycle under way is finished first), as a SIGSTOP'd process runs nothing at all. */
void dx__store_pause(dx_store_t *s, int on);
/* Tests: the next n commits of cycles are lost: rolled back and reported as DX_ERETRY (the
** batch is then retried whole), as a database's serialization failure would be (any thread). */
void dx__store_lose_commits(dx_store_t *s, int n);
/* 1 when nothing is queued, in flight, or applied/fetched but not yet delivered to the loop. */
int dx__store_quiet(dx_store_t *s);
/* Close abruptly (a simulated crash): queued operations are not applied (their callbacks run
** with DX_ESTATE) and fetched items are dropped undelivered; then as dx__store_close. */
void dx__store_crash(dx_store_t *s, void (*cb)(void *ud), void *ud);
/* Until when (store clock) the store thread's last fallback renewal extended session `sid`'s
** lease; 0 when it did not (loop thread; the loop's own renewals it knows itself). */
int64_t dx__store_session_confirmed(dx_store_t *s, const char *sid);
/* Tests: how many items (orchestration and work items) the loop gave back (dx__store_give_*)
** the store thread has taken to free (any thread). */
uint64_t dx__store_items_given_back(dx_store_t *s);
uint64_t dx__store_commits(const dx_store_t *s);
uint64_t dx__store_cycles(const dx_store_t *s);
/* The wait before the next cycle after failed ones (0 after a good cycle); any thread. */
int64_t dx__store_backoff_ms(dx_store_t *s);

#endif
