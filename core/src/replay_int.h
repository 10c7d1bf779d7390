/*
** replay_int.h -- private to the replay engine's files: replay.c (events, emission matching,
** key-value state, event queues, cancellation, batch conversion, the walk) and replay_turn.c
** (finishing a turn, turn entry, kept turns). The turn structure, its vectors, small inline
** event helpers and the calls between the two files (dx__rp_*).
*/
#ifndef DX_REPLAY_INT_H
#define DX_REPLAY_INT_H

#include <stdint.h>
#include <string.h>

#include "replay.h"

#define VEC(T) struct { T *v; size_t n, cap; }
#define VEC_PUSH(vec, x)                                                         \
  (((vec).n == (vec).cap && dx__rp_grow((void **)&(vec).v, &(vec).cap, sizeof *(vec).v)) \
       ? -1                                                                      \
       : ((vec).v[(vec).n++] = (x), 0))


/* Per event id: the state of the future bound to a schedule event. */
typedef struct {
  uint8_t state;        /* DX_FUT_* */
  uint8_t emitted;      /* the code has emitted the action matched to this event */
  uint8_t cancelled;    /* cancelled this turn or earlier */
  uint8_t has_crumb;    /* a cancel breadcrumb for it exists in history */
  uint8_t dropped_crumb; /* persisted history cancelled it (a dropped_future breadcrumb) */
  uint8_t code_cancelled; /* the code cancelled it while it was pending, in this run */
  uint8_t hist_completed; /* a completion for it exists in persisted history */
  uint8_t delivered;    /* (waits) an event was delivered */
  uint8_t completed;    /* a completion for it exists in history or this batch */
  uint64_t order;       /* history position of the completion */
  uint64_t fail_id;     /* failed: the event holding the failure (pointers would move) */
  const char *data;
  const char *expect_owner; /* new session activity with on_moved = "fail": the worker that
                               ran the previous one (owned by an event's heap string) */
} slot_t;

struct dx_turn_s {
  const dx_orch_item_t *item;
  const dx_turn_cfg_t *cfg;
  const dx_host_methods_t *host;
  void *host_ud;
  void *inst;

  int action;
  int64_t abandon_delay_ms;

  char *instance;
  char *name;
  char *version;
  uint64_t exec;
  const dx_event_t *hist;   /* persisted history of `exec` (empty for a new execution) */
  size_t n_hist;
  dx_event_t *own_hist;     /* a kept turn: the history it owns (hist points here) */
  size_t own_cap;
  size_t ev_bytes;          /* a kept turn: bytes of its events' strings */
  uint64_t indexed;         /* events below this id are indexed (slots, sched): a kept turn */
  VEC(dx_event_t) delta;
  VEC(slot_t) slots;        /* index = event id */
  size_t n_dropped_crumbs;  /* slots with dropped_crumb set: none, nothing for the check */
  VEC(uint64_t) sched;      /* schedule event ids in order; ordinal = index */
  size_t n_sched_known;     /* schedule events present before the code ran */
  size_t emitted;
  size_t cursor;            /* next working-history index being applied (for is_replaying) */
  VEC(dx_work_item_t) worker_items;
  VEC(dx_work_item_t) orch_items;
  VEC(dx_activity_ref_t) cancelled;
  VEC(uint64_t) new_sched;  /* schedule events created this turn */
  dx_turn_spares_t *spares; /* where delta, worker_items and new_sched take their first block */

  int oom;                  /* an allocation failed: never ack a partial turn */
  int run_state;            /* DX_RUN_* of the code */
  int fatal;                /* nondeterminism or other turn-level failure recorded */
  int parent_cancelled;     /* the instance itself was cancelled: children hear why */
  dx_failure_t failure;     /* terminal failure */
  char *output;
  char *can_input;
  char *can_version;
  int custom_status_set;    /* a new status event this turn: the ack stores custom_status */
  char *custom_status;
  char *status_now;         /* the custom status as the code sees it (get_custom_status) */
  VEC(dx_kv_entry_t) kv;    /* key-value state as the code sees it, ascending key */
  VEC(uint64_t) arrivals;   /* queue events applied and not dequeued yet, oldest first */
  /* The code's last suspension waits for every one of these futures (dx__turn_park): an
  ** event that leaves one of them pending does not resume it. None: any event does. */
  VEC(uint64_t) park;
  dx_orch_ack_t ack;
};

int dx__rp_grow(void **v, size_t *cap, size_t elem);

static inline dx_event_t *ev_at(dx_turn_t *t, uint64_t id) {
  if (id == 0) return NULL;
  if (id <= t->n_hist) return (dx_event_t *)&t->hist[id - 1];
  if (id - t->n_hist <= t->delta.n) return &t->delta.v[id - t->n_hist - 1];
  return NULL;
}

static inline uint64_t next_id(const dx_turn_t *t) { return t->n_hist + t->delta.n + 1; }

static inline slot_t *slot(dx_turn_t *t, uint64_t id) {
  while (t->slots.n <= id) {
    slot_t z;
    memset(&z, 0, sizeof z);
    if (VEC_PUSH(t->slots, z)) return NULL;
  }
  return &t->slots.v[id];
}

static inline int is_schedule_kind(int k) {
  return k == DX_EV_ACT_SCHEDULED || k == DX_EV_TIMER_CREATED || k == DX_EV_EXT_SUBSCRIBED ||
         k == DX_EV_SUB_SCHEDULED || k == DX_EV_ORCH_CHAINED || k == DX_EV_CUSTOM_STATUS ||
         k == DX_EV_SYSCALL || k == DX_EV_SESSION_CLOSED || k == DX_EV_KV_SET ||
         k == DX_EV_KV_CLEARED || k == DX_EV_KV_CLEARED_ALL || k == DX_EV_QUEUE_SUBSCRIBED;
}

/* Breadcrumbs: a cancelled schedule, pointing back at it. */
static inline int is_crumb_kind(int k) {
  return k == DX_EV_ACT_CANCEL_REQ || k == DX_EV_SUB_CANCEL_REQ || k == DX_EV_EXT_SUB_CANCELLED ||
         k == DX_EV_QUEUE_SUB_CANCELLED;
}

static inline int is_terminal_kind(int k) {
  return k == DX_EV_ORCH_COMPLETED || k == DX_EV_ORCH_FAILED || k == DX_EV_ORCH_CAN;
}

static inline int same_str(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

/* replay.c */
const char *dx__rp_kind_word(int k);
dx_event_t *dx__rp_append(dx_turn_t *t, int kind);
void dx__rp_set_failure(dx_turn_t *t, int category, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define NONDET(t, ...) \
  dx__rp_set_failure((t), DX_CAT_CONFIGURATION, "Nondeterminism", __VA_ARGS__)
int dx__rp_check_size(dx_turn_t *t, const char *what, const char *s);
void dx__rp_kv_put(dx_turn_t *t, const char *key, const char *value, int64_t ts);
void dx__rp_cancel_outstanding(dx_turn_t *t, uint64_t id, const char *reason);
void dx__rp_check_cancels_replayed(dx_turn_t *t);
int dx__rp_schedule_kind_for(int completion_kind);
const dx_event_t *dx__rp_cancel_request(dx_turn_t *t, uint64_t from);
void dx__rp_convert_batch(dx_turn_t *t);
void dx__rp_resume(dx_turn_t *t);
void dx__rp_apply(dx_turn_t *t, uint64_t id);

#endif
