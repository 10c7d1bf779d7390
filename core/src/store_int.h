/*
** store_int.h -- the store thread's state, shared by store.c (cycles, the loop side) and
** store_held.c (items held for the loop, lock and lease renewals, declined sessions). Store
** thread only unless a field says otherwise.
*/
#ifndef DX_STORE_INT_H
#define DX_STORE_INT_H

#include "store.h"

#define HOLD_MAX_MS (10 * 60 * 1000)

/* A session this worker's fetches skip until `until` (DX_OP_DECLINE_SESSION). */
typedef struct declined_s {
  char *sid;
  int64_t until;
  struct declined_s *next;
} declined_t;

/* An item handed to the loop whose settlement (ack/abandon) is not applied yet. */
typedef struct held_s {
  char *instance;      /* orchestration items (in the entry's block); NULL for work items */
  uint64_t token;
  uint64_t renew_at;   /* monotonic ms */
  uint64_t give_up_at; /* monotonic ms: a turn never takes this long (the turn time limit and
                          the budget stop code), nor does the loop go this long without
                          renewing an activity */
  int renewing;        /* renewed in the open transaction (undone if it is not kept) */
  int handed;          /* handed to the loop in the open transaction (store_rounds.c) */
  struct held_s *next, *prev; /* s->held, in both directions */
  struct held_s *hnext;       /* s->hidx bucket chain */
} held_t;

/* Store-allocated memory the loop is done with (store_mem.c), freed on the store thread. */
typedef struct {
  dx_orch_item_t **orch;
  size_t n_orch, cap_orch;
  dx_work_item_t *work; /* the items' fields, taken */
  size_t n_work, cap_work;
  void **ptrs;          /* plain blocks */
  size_t n_ptrs, cap_ptrs;
} dx__store_trash_t;

typedef struct fetched_node_s {
  dx_store_fetched_t f;
  int held;            /* handed over in an open transaction: the loop says when it has run
                          it (held_done), and the store applies its answers meanwhile */
  struct fetched_node_s *next;
} fetched_node_t;

struct dx_store_s {
  uv_loop_t *loop;
  dx_store_cfg_t cfg;
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cv;
  uv_cond_t halt_cv;  /* the thread halted for a pause (dx__store_pause waits on it) */
  uv_async_t async;
  int thread_started;
  /* guarded by mu */
  dx_store_op_t *pending, *pending_tail;
  dx_store_op_t *done, *done_tail;
  dx_store_op_t *applied, *applied_tail; /* ops applied in the open transaction, for the loop
                                            (op->applied, before the items handed with them) */
  fetched_node_t *fetched, *fetched_tail;
  size_t n_fetched_items; /* orchestration and work items in fetched */
  int budget_orch, budget_work;
  int fetching;
  int stopping;
  int paused;         /* a simulated stall: no cycles */
  int halted;         /* the thread waits out the pause (or has ended): dx__store_pause */
  int poked;
  int woken;          /* another process may have committed work: check before sleeping */
  int looking;        /* the thread sleeps between two looks for due work (dx__store_wake) */
  int busy;           /* the thread holds ops not yet on the done list */
  int delivering;     /* the loop is taking a few fetched items (on_async): answers wait */
  int in_async;       /* the loop is in on_async: it looks for held nodes before it returns */
  size_t big;         /* items of the delivery the loop takes now when more than
                         BURST_MAX_ITEMS (else 0): a cycle absorbs its answers (store_rounds.c) */
  unsigned big_ops;   /* ops queued since the absorbing thread began its wait (it is woken
                         at ABSORB_WAKE_EVERY) */
  int absorbing;      /* the thread's cycle absorbs the big delivery's answers */
  uint64_t commits, cycles;
  held_t *held;       /* store thread only */
  held_t **hidx;      /* store thread only: held by token (each settled op looks one up) */
  size_t hcap;
  size_t n_held;      /* store thread only: entries in held */
  size_t n_handed;    /* store thread only: of them, handed over in the open transaction */
  uint64_t held_done; /* guarded by mu: held nodes (fetched_node_t.held) the loop has run */
  dx_store_op_t *node_end; /* guarded by mu: the last op in pending the loop queued before it
                              finished its last held node (NULL: none since pending was
                              taken); the ops after it answer the node it runs now */
  int64_t renew_every_ms, work_renew_every_ms;
  int64_t orch_hold_ms; /* renew a turn's lock this long at most: past the turn time limit */
  uint64_t sess_due;  /* monotonic ms of the fallback session lease renewal (sessions only) */
  int64_t sess_every_ms;
  int sess_renewing;  /* the open transaction renewed the session leases */
  char **sess_new;    /* store thread: the ids it renewed in the open transaction */
  size_t n_sess_new;
  int64_t sess_new_until;
  char **sess_conf;   /* guarded by mu: the ids the last kept fallback renewal extended, */
  size_t n_sess_conf; /* to sess_conf_until (so the loop can tell a stall from a busy loop) */
  int64_t sess_conf_until;
  uint64_t depths_due; /* monotonic ms of the next queue depth poll (with metrics) */
  int64_t backoff_ms;  /* guarded by mu: after a failed cycle 10 ms doubling to 1 s, else 0 */
  int cycle_failed;    /* store thread only: the last cycle failed */
  int fatal;           /* guarded by mu: 1 = fatal_err is set, 2 = reported to the loop */
  int fatal_seen;      /* store thread only: a cycle found the store unusable */
  dx_error_t fatal_err;
  declined_t *declined;       /* store thread only */
  dx_session_cfg_t sess_cfg;  /* store thread only: cfg.sessions plus the declined ids */
  const char **declined_v;
  size_t declined_cap;
  void (*close_cb)(void *);
  void *close_ud;
  uint64_t cap_gen;    /* store thread only: the host capabilities generation applied */
  int filter_set;      /* store thread only: the provider has this worker's filter */
  int lose_commits;    /* guarded by mu: tests (dx__store_lose_commits) */
  dx__store_trash_t tr_loop;  /* loop only: what the loop collects (store_mem.c) */
  dx__store_trash_t tr_given; /* guarded by mu: handed to the store thread */
  dx__store_trash_t tr_store; /* store thread only: being freed */
  uint64_t given_back;        /* guarded by mu: items taken from tr_given (tests) */
};

/* {===== store.c, for store_rounds.c =====} */

enum { CALL_OP = 1, CALL_FETCH = 2 }; /* *failed bits: an op failed, a fetch failed */

int64_t dx__store_now_ms(dx_store_t *s);
/* Fetch into f until it holds bo orchestration and bw work items in all (or none are left);
** 1 when a fetch failed. */
int dx__store_fetch_into(dx_store_t *s, int64_t now, int bo, int bw, dx_store_fetched_t *f);
/* Apply every op of the list in order inside the open transaction, up to the first that
** lost the batch (DX_ERETRY: its code, in *err); *failed / *durable as for a cycle. */
int dx__store_apply_all(dx_store_t *s, dx_store_op_t *ops, int64_t now, int *failed,
                        int *durable, dx_error_t *err);
void dx__store_observe_fetch(dx_store_t *s, uint64_t t0, int bo, int bw);
void dx__store_count_fetched(dx_store_t *s, const dx_store_fetched_t *f);

/* The op settles a fetched item (its lock token: op->token, once applied). */
static inline int dx__store_settles(const dx_store_op_t *op) {
  return op->kind == DX_OP_ACK_ORCH || op->kind == DX_OP_ABANDON_ORCH ||
         op->kind == DX_OP_ACK_WORK || op->kind == DX_OP_ABANDON_WORK;
}

static inline int dx__store_has_run_cycle(dx_provider_t *p) {
  return p->methods->version >= 5 && p->methods->run_cycle != NULL;
}

/* {===== store_rounds.c: turns and activities answered inside their fetch's transaction =====} */

#define HOLD_MAX_ITEMS 16
/* All waits of one cycle for the loop together last at most this many hold_ms (4 ms by
** default): other worker processes on the store wait that much longer at most for its write
** lock than for the provider calls the rounds make (which would otherwise be made in cycles of
** their own). A round of a worker's ten sessions (ten activities, then the ten turns they wake)
** takes the idle loop about 0.2-0.3 ms, so that is about ten rounds. */
#define HOLD_BUDGET_HOLDS 2
/* The rounds of one cycle hand items over for at most this many hold_ms (8 ms by default)
** from its first fetch: when the loop and the store thread work at the same time (the
** pipeline) a wait may be short or none, so the waits alone no longer bound how long the
** transaction (and the write lock, and the visibility of what it did) is held. */
#define HOLD_SPAN_HOLDS 4
/* A delivery of at most this many items is answered as one burst (await_delivery): about a
** hold's worth, so a worker's sessions step together with one commit per round. */
#define BURST_MAX_ITEMS HOLD_MAX_ITEMS
/* While the loop takes a bigger delivery and a cycle absorbs its answers, dx__store_submit
** wakes the store thread once per this many answers (applied in batches, not one wake-up
** each); until that cycle begins, each answer wakes it, as any op does (a slow delivery's first
** answer must not wait for fifteen more). */
#define ABSORB_WAKE_EVERY 16

typedef struct {
  uint64_t *tokens; /* lock tokens of the items handed to the loop in this transaction */
  size_t n, cap;
  int oom;          /* a token could not be noted: hand nothing more over */
  /* The last hand-over's report (store_rounds.c report_applied): the last op it looked at. */
  struct dx_store_op_s *seen;
  uint64_t done_seen; /* s->held_done when the answers were last taken */
} handed_t;

/* (mu held) Queue fetched items for the loop (on_async takes them). */
void dx__store_push_fetched(dx_store_t *s, fetched_node_t *n);
/* (mu held) 1 when every node waiting for the loop is a held round's (store_rounds.c). */
int dx__store_held_only(const dx_store_t *s);
/* The cycle makes one call per op and fetch (and so may hold): see store_rounds.c. */
int dx__store_per_call(dx_store_t *s, const dx_store_op_t *ops);
/* f's turns may go to the loop now (h NULL: a database's held turn). */
int dx__store_can_hold(dx_store_t *s, const dx_store_op_t *ops, const dx_store_fetched_t *f,
                       const handed_t *h);
/* A database's held turn: hand f's turns over and wait for the loop's answers (*latep, for
** the closing run_cycle); 1 when handed over. */
int dx__store_hold_round(dx_store_t *s, dx_store_op_t **opsp, dx_store_fetched_t *f,
                         handed_t *h, uint64_t *left, dx_store_op_t **latep);
/* A local store's cycle after its ops were applied: its fetches and held rounds. */
int dx__store_held_rounds(dx_store_t *s, dx_store_op_t **opsp, int bo, int bw,
                          dx_store_fetched_t *f, handed_t *h, int *failed, int *durable,
                          dx_error_t *err);
/* The transaction was lost: applied ops run again when it is retried (not reported ones). */
void dx__store_ops_lost(dx_store_op_t *ops);
void dx__store_unhold_handed(dx_store_t *s, handed_t *h);

/* {===== store_mem.c =====} */

/* (loop, mu held) Hand what the loop collected to the store thread, unless the thread has
** not taken the previous collection yet. */
void dx__store_trash_hand(dx_store_t *s);
/* (store thread, mu held) Take the handed collection; dx__store_trash_drop (mu not held)
** frees it. */
void dx__store_trash_take(dx_store_t *s);
void dx__store_trash_drop(dx_store_t *s);
/* (the thread joined) Free every collection. */
void dx__store_trash_free(dx_store_t *s);
/* (loop) f's arrays, its items not taken and their strings go back to the store thread. */
void dx__store_give_fetched(dx_store_t *s, dx_store_fetched_t *f);
void dx__store_give_block(dx_store_t *s, void *p);

/* {===== store_held.c =====} */

uint64_t dx__store_mono_ms(void);
void dx__store_hold(dx_store_t *s, const char *instance, uint64_t token);
void dx__store_touch_held(dx_store_t *s, uint64_t token);
void dx__store_unhold(dx_store_t *s, uint64_t token);
/* The item of token, held, was handed to the loop in the open transaction (n_handed counts
** it until it is settled or the transaction ends: dx__store_handed_end). */
void dx__store_mark_handed(dx_store_t *s, uint64_t token);
int dx__store_is_handed(dx_store_t *s, uint64_t token);
void dx__store_handed_end(dx_store_t *s, const uint64_t *tokens, size_t n);
void dx__store_free_held(dx_store_t *s);
void dx__store_free_ids(char **v, size_t n);
/* Append a copy of id to the array *v of *n (a failed copy is skipped); 1 when out of memory
** for the array. */
int dx__store_push_id(char ***v, size_t *n, const char *id);
void dx__store_unhold_fetched(dx_store_t *s, const dx_store_fetched_t *f);
uint64_t dx__store_next_renewal(dx_store_t *s);
void dx__store_renew_held(dx_store_t *s, int64_t now);
void dx__store_renewals_end(dx_store_t *s, int kept);
int dx__store_decline(dx_store_t *s, const char *sid, int64_t until, dx_error_t *err);
void dx__store_free_declined(dx_store_t *s);
const dx_session_cfg_t *dx__store_fetch_sessions(dx_store_t *s, int64_t now);

#endif
