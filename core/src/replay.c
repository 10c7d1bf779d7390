/*
** replay.c -- one orchestration turn.
**
** A turn replays the latest execution's history against the orchestration code and turns
** what is new into one commit (dx_orch_ack_t). Matching is by emission order: the n-th
** action the code emits corresponds to the n-th schedule event of the history, and is checked
** against it when emitted (kind, name, canonical input bytes, session id). Completions are
** delivered in history order; the code is resumed after each delivery, so it observes the
** same sequence of resolved futures on every replay.
**
** Event ids within a turn: completions converted from the batch first, then new schedule
** events and breadcrumbs in the order the code produced them, the terminal event last.
*/
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "log.h"
#include "replay.h"
#include "util.h"

#define VEC(T) struct { T *v; size_t n, cap; }
#define VEC_PUSH(vec, x)                                                         \
  (((vec).n == (vec).cap && grow((void **)&(vec).v, &(vec).cap, sizeof *(vec).v)) \
       ? -1                                                                      \
       : ((vec).v[(vec).n++] = (x), 0))

static int grow(void **v, size_t *cap, size_t elem) {
  size_t ncap = *cap ? *cap * 2 : 16;
  void *nv = realloc(*v, ncap * elem);
  if (!nv) return 1;
  *v = nv;
  *cap = ncap;
  return 0;
}

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
  VEC(uint64_t) sched;      /* schedule event ids in order; ordinal = index */
  size_t n_sched_known;     /* schedule events present before the code ran */
  size_t emitted;
  size_t cursor;            /* next working-history index being applied (for is_replaying) */
  VEC(dx_work_item_t) worker_items;
  VEC(dx_work_item_t) orch_items;
  VEC(dx_activity_ref_t) cancelled;
  VEC(uint64_t) new_sched;  /* schedule events created this turn */

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
  dx_orch_ack_t ack;
};

/* {===== event access =====} */

static dx_event_t *ev_at(dx_turn_t *t, uint64_t id) {
  if (id == 0) return NULL;
  if (id <= t->n_hist) return (dx_event_t *)&t->hist[id - 1];
  if (id - t->n_hist <= t->delta.n) return &t->delta.v[id - t->n_hist - 1];
  return NULL;
}

static uint64_t next_id(const dx_turn_t *t) { return t->n_hist + t->delta.n + 1; }

static slot_t *slot(dx_turn_t *t, uint64_t id) {
  while (t->slots.n <= id) {
    slot_t z;
    memset(&z, 0, sizeof z);
    if (VEC_PUSH(t->slots, z)) return NULL;
  }
  return &t->slots.v[id];
}

static int is_schedule_kind(int k) {
  return k == DX_EV_ACT_SCHEDULED || k == DX_EV_TIMER_CREATED || k == DX_EV_EXT_SUBSCRIBED ||
         k == DX_EV_SUB_SCHEDULED || k == DX_EV_ORCH_CHAINED || k == DX_EV_CUSTOM_STATUS ||
         k == DX_EV_SYSCALL || k == DX_EV_SESSION_CLOSED || k == DX_EV_KV_SET ||
         k == DX_EV_KV_CLEARED || k == DX_EV_KV_CLEARED_ALL || k == DX_EV_QUEUE_SUBSCRIBED;
}

/* Breadcrumbs: a cancelled schedule, pointing back at it. */
static int is_crumb_kind(int k) {
  return k == DX_EV_ACT_CANCEL_REQ || k == DX_EV_SUB_CANCEL_REQ || k == DX_EV_EXT_SUB_CANCELLED ||
         k == DX_EV_QUEUE_SUB_CANCELLED;
}

static int is_terminal_kind(int k) {
  return k == DX_EV_ORCH_COMPLETED || k == DX_EV_ORCH_FAILED || k == DX_EV_ORCH_CAN;
}

static const char *kind_word(int k) {
  switch (k) {
    case DX_EV_ACT_SCHEDULED: return "activity";
    case DX_EV_TIMER_CREATED: return "timer";
    case DX_EV_EXT_SUBSCRIBED: return "event wait";
    case DX_EV_SUB_SCHEDULED: return "sub-orchestration";
    case DX_EV_ORCH_CHAINED: return "orchestration start";
    case DX_EV_CUSTOM_STATUS: return "custom status";
    case DX_EV_SYSCALL: return "system call";
    case DX_EV_SESSION_CLOSED: return "session close";
    case DX_EV_KV_SET: return "key-value set";
    case DX_EV_KV_CLEARED: return "key-value clear";
    case DX_EV_KV_CLEARED_ALL: return "key-value clear-all";
    case DX_EV_QUEUE_SUBSCRIBED: return "event queue wait";
    default: return "event";
  }
}

static int action_event_kind(int a) {
  static const int map[] = {0, DX_EV_ACT_SCHEDULED, DX_EV_TIMER_CREATED, DX_EV_EXT_SUBSCRIBED,
                            DX_EV_SUB_SCHEDULED, DX_EV_ORCH_CHAINED, DX_EV_CUSTOM_STATUS,
                            DX_EV_SYSCALL, 0, DX_EV_SESSION_CLOSED, DX_EV_KV_SET,
                            DX_EV_KV_CLEARED, DX_EV_KV_CLEARED_ALL, DX_EV_QUEUE_SUBSCRIBED};
  return (a > 0 && a < (int)(sizeof map / sizeof map[0])) ? map[a] : 0;
}

/* Append a new event to the delta; returns it with its id set, or NULL on ENOMEM. */
static dx_event_t *append(dx_turn_t *t, int kind) {
  dx_event_t e;
  memset(&e, 0, sizeof e);
  e.kind = kind;
  e.event_id = next_id(t);
  e.timestamp_ms = t->cfg->now_ms;
  if (VEC_PUSH(t->delta, e)) {
    t->oom = 1;
    return NULL;
  }
  return &t->delta.v[t->delta.n - 1];
}

/* {===== failures =====} */

static void set_failure(dx_turn_t *t, int category, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void set_failure(dx_turn_t *t, int category, const char *kind, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  if (t->fatal) return; /* the first failure is the cause; later ones are consequences */
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  dx_failure_clear(&t->failure);
  t->failure.category = category;
  t->failure.kind = dx__strdup(kind);
  t->failure.message = dx__strdup(buf);
  t->fatal = 1;
}

#define NONDET(t, ...) set_failure((t), DX_CAT_CONFIGURATION, "Nondeterminism", __VA_ARGS__)

/* {===== emission (called by the binding while code runs) =====} */

static int same_str(const char *a, const char *b) {
  if (!a || !b) return a == b;
  return strcmp(a, b) == 0;
}

/* A pinned child version is part of a start: the child would run different code. */
static int same_version(dx_turn_t *t, const dx_action_t *a, const dx_event_t *e) {
  if (same_str(a->version, e->version)) return 1;
  NONDET(t, "nondeterministic: %s %s at event %" PRIu64 " asked for version %s in history but "
            "the code now asks for version %s",
         kind_word(e->kind), e->name, e->event_id, e->version ? e->version : "(by policy)",
         a->version ? a->version : "(by policy)");
  return 0;
}

/* Compare an emitted action with the history schedule event at the same ordinal. */
static int matches_history(dx_turn_t *t, const dx_action_t *a, const dx_event_t *e) {
  int want = action_event_kind(a->kind);
  if (e->kind != want) {
    /* "schedule mismatch" is the reference's wording for this check (spec §3.3). */
    NONDET(t, "nondeterministic: schedule mismatch: history has a %s at event %" PRIu64
              " (%s) but the code now schedules a %s%s%s",
           kind_word(e->kind), e->event_id, e->name ? e->name : "-", kind_word(want),
           a->name ? " " : "", a->name ? a->name : "");
    return 0;
  }
  switch (a->kind) {
    case DX_ACT_ACTIVITY:
      if (!same_str(a->tag, e->tag)) {
        NONDET(t, "nondeterministic: activity %s at event %" PRIu64 " had tag '%s' in history "
                  "but the code now schedules it with tag '%s'",
               e->name, e->event_id, e->tag ? e->tag : "default", a->tag ? a->tag : "default");
        return 0;
      }
      if (!same_str(a->name, e->name) || !same_str(a->input, e->data) ||
          !same_str(a->session_id, e->session_id)) {
        NONDET(t, "nondeterministic: activity at event %" PRIu64 " was %s(%s%s%s) in history "
                  "but the code now schedules %s(%s%s%s)",
               e->event_id, e->name, e->data ? e->data : "null",
               e->session_id ? ", session " : "", e->session_id ? e->session_id : "", a->name,
               a->input ? a->input : "null", a->session_id ? ", session " : "",
               a->session_id ? a->session_id : "");
        return 0;
      }
      return 1;
    case DX_ACT_CLOSE_SESSION:
      if (!same_str(a->session_id, e->session_id)) {
        NONDET(t, "nondeterministic: session close at event %" PRIu64 " was for '%s' in history "
                  "but the code now closes '%s'",
               e->event_id, e->session_id, a->session_id ? a->session_id : "");
        return 0;
      }
      return 1;
    case DX_ACT_WAIT:
    case DX_ACT_DEQUEUE:
    case DX_ACT_KV_CLEAR:
    case DX_ACT_SYSCALL:
      if (!same_str(a->name, e->name)) {
        NONDET(t, "nondeterministic: %s at event %" PRIu64 " was '%s' in history but the code "
                  "now uses '%s'",
               kind_word(e->kind), e->event_id, e->name, a->name);
        return 0;
      }
      return 1;
    case DX_ACT_SUB:
      if (!same_version(t, a, e)) return 0;
      if (!same_str(a->name, e->name) || !same_str(a->input, e->data)) {
        NONDET(t, "nondeterministic: sub-orchestration at event %" PRIu64 " was %s(%s) in "
                  "history but the code now starts %s(%s)",
               e->event_id, e->name, e->data ? e->data : "null", a->name,
               a->input ? a->input : "null");
        return 0;
      }
      return 1;
    case DX_ACT_CHAINED:
      if (!same_version(t, a, e)) return 0;
      if (!same_str(a->name, e->name) || !same_str(a->input, e->data) ||
          !same_str(a->instance, e->instance)) {
        NONDET(t, "nondeterministic: orchestration start at event %" PRIu64 " was %s(%s) as "
                  "'%s' in history but the code now starts %s(%s) as '%s'",
               e->event_id, e->name, e->data ? e->data : "null", e->instance, a->name,
               a->input ? a->input : "null", a->instance ? a->instance : "");
        return 0;
      }
      return 1;
    case DX_ACT_KV_SET:
      if (!same_str(a->name, e->name) || !same_str(a->input, e->data)) {
        NONDET(t, "nondeterministic: key-value set at event %" PRIu64 " was '%s' = %s in "
                  "history but the code now sets '%s' = %s",
               e->event_id, e->name, e->data ? e->data : "null", a->name,
               a->input ? a->input : "null");
        return 0;
      }
      return 1;
    default:
      return 1; /* timers, custom status and clear-all compare by kind only */
  }
}

static char *syscall_value(dx_turn_t *t, const char *op) {
  char buf[64];
  if (strcmp(op, "utc_now") == 0) {
    snprintf(buf, sizeof buf, "%" PRId64, t->cfg->now_ms);
  } else if (strcmp(op, "new_guid") == 0) {
    uint64_t a = dx__random_u64(), b = dx__random_u64();
    snprintf(buf, sizeof buf, "\"%08x-%04x-4%03x-%04x-%012" PRIx64 "\"", (unsigned)(a >> 32),
             (unsigned)(a >> 16) & 0xffff, (unsigned)a & 0xfff,
             (unsigned)(0x8000 | ((b >> 48) & 0x3fff)), (uint64_t)(b & 0xffffffffffffull));
  } else if (strcmp(op, "random") == 0) {
    /* 53 random bits -> [0,1); %.17g keeps the exact double. */
    double d = (double)(dx__random_u64() >> 11) / 9007199254740992.0;
    snprintf(buf, sizeof buf, "%.17g", d);
    if (!strpbrk(buf, ".e")) strcat(buf, ".0");
  } else {
    return NULL;
  }
  return dx__strdup(buf);
}

/* Fill a new schedule event from the action. */
static int fill_new_event(dx_turn_t *t, dx_event_t *e, const dx_action_t *a) {
  int ok = 1;
  switch (a->kind) {
    case DX_ACT_ACTIVITY: /* borrowed, then copied into the event's own arena */
      e->name = (char *)a->name;
      e->data = (char *)(a->input ? a->input : "null");
      e->session_id = (char *)a->session_id;
      e->tag = (char *)a->tag;
      ok = dx__event_own(e) == DX_OK && e->name && e->data;
      break;
    case DX_ACT_TIMER:
      {
        /* Saturate: a "never" timer (math.maxinteger ms) must not wrap into the past. */
        int64_t d = a->delay_ms > 0 ? a->delay_ms : 0;
        e->fire_at_ms = d > INT64_MAX - t->cfg->now_ms ? INT64_MAX : t->cfg->now_ms + d;
      }
      break;
    case DX_ACT_WAIT:
    case DX_ACT_DEQUEUE:
    case DX_ACT_KV_CLEAR:
      e->name = dx__strdup(a->name);
      ok = e->name != NULL;
      break;
    case DX_ACT_KV_SET:
      e->name = dx__strdup(a->name);
      e->data = dx__strdup(a->input);
      ok = e->name && e->data;
      break;
    case DX_ACT_SUB:
    case DX_ACT_CHAINED: {
      char idbuf[64];
      const char *child = a->instance;
      if (!child) {
        /* Generated child ids are stable: parent id and the scheduling event id. */
        snprintf(idbuf, sizeof idbuf, "::sub::%" PRIu64, e->event_id);
        e->instance = malloc(strlen(t->instance) + strlen(idbuf) + 1);
        if (e->instance) sprintf(e->instance, "%s%s", t->instance, idbuf);
      } else {
        e->instance = dx__strdup(child);
      }
      e->name = dx__strdup(a->name);
      e->version = dx__strdup(a->version);
      e->data = dx__strdup(a->input ? a->input : "null");
      ok = e->instance && e->name && e->data;
      break;
    }
    case DX_ACT_STATUS:
      e->data = dx__strdup(a->input);
      break;
    case DX_ACT_CLOSE_SESSION:
      e->session_id = dx__strdup(a->session_id);
      ok = e->session_id != NULL;
      break;
    case DX_ACT_SYSCALL:
      e->name = dx__strdup(a->name);
      e->data = syscall_value(t, a->name);
      ok = e->name && e->data;
      break;
    default:
      break;
  }
  return ok;
}

static int check_size(dx_turn_t *t, const char *what, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > DX_MAX_PAYLOAD_BYTES) {
    set_failure(t, DX_CAT_APPLICATION, "OrchestrationFailed",
                "%s is %zu bytes; the limit is %d bytes", what, n, DX_MAX_PAYLOAD_BYTES);
    return 0;
  }
  return 1;
}

/* A status set by the code: what it now reads; a new event also goes to the store. */
static void note_custom_status(dx_turn_t *t, const char *json, int is_new) {
  free(t->status_now);
  t->status_now = dx__strdup(json);
  if (json && !t->status_now) t->oom = 1;
  if (!is_new) return;
  free(t->custom_status);
  t->custom_status = dx__strdup(json);
  if (json && !t->custom_status) t->oom = 1;
  t->custom_status_set = 1;
}

/* {===== key-value state =====} */

/* Index of `key` in the sorted map, or where it would go (*found = 0). */
static size_t kv_find(const dx_turn_t *t, const char *key, int *found) {
  size_t lo = 0, hi = t->kv.n;
  *found = 0;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(t->kv.v[mid].key, key);
    if (c == 0) {
      *found = 1;
      return mid;
    }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

static void kv_put(dx_turn_t *t, const char *key, const char *value, int64_t ts) {
  int found;
  size_t i = kv_find(t, key, &found);
  char *v = dx__strdup(value);
  dx_kv_entry_t e;
  if (!v) { t->oom = 1; return; }
  if (found) {
    free(t->kv.v[i].value);
    t->kv.v[i].value = v;
    t->kv.v[i].updated_ms = ts;
    return;
  }
  e.key = dx__strdup(key);
  e.value = v;
  e.updated_ms = ts;
  if (!e.key || VEC_PUSH(t->kv, e)) {
    free(e.key);
    free(v);
    t->oom = 1;
    return;
  }
  memmove(&t->kv.v[i + 1], &t->kv.v[i], (t->kv.n - 1 - i) * sizeof e);
  t->kv.v[i] = e;
}

static void kv_remove(dx_turn_t *t, const char *key) {
  int found;
  size_t i = kv_find(t, key, &found);
  if (!found) return;
  free(t->kv.v[i].key);
  free(t->kv.v[i].value);
  memmove(&t->kv.v[i], &t->kv.v[i + 1], (t->kv.n - 1 - i) * sizeof t->kv.v[0]);
  t->kv.n--;
}

static void kv_clear_all(dx_turn_t *t) {
  while (t->kv.n) kv_remove(t, t->kv.v[t->kv.n - 1].key);
}

/* The limits duroxide enforces on key-value writes, checked before the action is recorded
** (the binding raises with the same words). */
static int kv_check(dx_turn_t *t, const dx_action_t *a) {
  int found;
  if (!a->name || !*a->name || strlen(a->name) > DX_MAX_KV_KEY_BYTES || !dx__utf8_valid(a->name))
    return DX_EINVAL;
  if (a->kind != DX_ACT_KV_SET) return DX_OK;
  if (!a->input) return DX_EINVAL;
  if (strlen(a->input) > DX_MAX_KV_VALUE_BYTES) return DX_ETOOBIG;
  kv_find(t, a->name, &found);
  return found || t->kv.n < DX_MAX_KV_KEYS ? DX_OK : DX_ETOOBIG;
}

static void kv_apply(dx_turn_t *t, const dx_event_t *e) {
  if (e->kind == DX_EV_KV_SET) kv_put(t, e->name, e->data, e->timestamp_ms);
  else if (e->kind == DX_EV_KV_CLEARED) kv_remove(t, e->name);
  else if (e->kind == DX_EV_KV_CLEARED_ALL) kv_clear_all(t);
}

const char *dx_turn_kv_get(const dx_turn_t *t, const char *key) {
  int found;
  size_t i = key ? kv_find(t, key, &found) : 0;
  return key && found ? t->kv.v[i].value : NULL;
}

size_t dx_turn_kv_count(const dx_turn_t *t) { return t->kv.n; }

const dx_kv_entry_t *dx_turn_kv_at(const dx_turn_t *t, size_t i) {
  return i < t->kv.n ? &t->kv.v[i] : NULL;
}

const char *dx_turn_custom_status(const dx_turn_t *t) { return t->status_now; }

/* {===== event queues =====} */

static void deliver_to(slot_t *s, const dx_event_t *arrival) {
  s->delivered = 1;
  s->state = DX_FUT_OK;
  s->data = arrival->data;
  s->order = arrival->event_id;
}

/* A new dequeue takes the oldest message of its queue that is already here. */
static void dequeue_waiting(dx_turn_t *t, slot_t *s, const char *queue) {
  size_t i;
  for (i = 0; i < t->arrivals.n; i++) {
    const dx_event_t *m = ev_at(t, t->arrivals.v[i]);
    if (!same_str(m->name, queue)) continue;
    deliver_to(s, m);
    memmove(&t->arrivals.v[i], &t->arrivals.v[i + 1], (t->arrivals.n - 1 - i) * sizeof(uint64_t));
    t->arrivals.n--;
    return;
  }
}

int dx_turn_emit(dx_turn_t *t, const dx_action_t *a, uint64_t *token, const char **value) {
  dx_action_t norm;
  size_t ordinal;
  dx_event_t *e;
  slot_t *s;
  if (token) *token = 0;
  if (value) *value = NULL;
  if (t->fatal) return DX_ENONDET;
  if (a->kind == DX_ACT_CAN) {
    if (!check_size(t, "continue_as_new input", a->input)) return DX_ETOOBIG;
    free(t->can_input);
    free(t->can_version);
    t->can_input = dx__strdup(a->input ? a->input : "null");
    t->can_version = dx__strdup(a->version);
    t->run_state = DX_RUN_CAN;
    return DX_OK;
  }
  if (!action_event_kind(a->kind)) return DX_EINVAL;
  if (a->kind == DX_ACT_CHAINED && !a->instance) return DX_EINVAL; /* ids are generated only
                                                                   ** for sub-orchestrations */
  /* Refuse malformed actions before they take an ordinal: a missing name used to be recorded
  ** as "out of memory" (infrastructure), and a NULL or unknown system call crashed or did. */
  if (!a->name && (a->kind == DX_ACT_ACTIVITY || a->kind == DX_ACT_WAIT ||
                   a->kind == DX_ACT_SUB || a->kind == DX_ACT_CHAINED ||
                   a->kind == DX_ACT_SYSCALL || a->kind == DX_ACT_DEQUEUE))
    return DX_EINVAL;
  if (a->kind == DX_ACT_KV_SET || a->kind == DX_ACT_KV_CLEAR) {
    int rc = kv_check(t, a);
    if (rc) return rc;
  }
  if (a->kind == DX_ACT_SYSCALL && strcmp(a->name, "utc_now") != 0 &&
      strcmp(a->name, "new_guid") != 0 && strcmp(a->name, "random") != 0)
    return DX_EINVAL;
  if (!check_size(t, "input", a->input)) return DX_ETOOBIG;
  if (a->tag && (a->kind != DX_ACT_ACTIVITY || !*a->tag || strlen(a->tag) > DX_MAX_TAG_BYTES))
    return DX_EINVAL;
  if (a->tag && strcmp(a->tag, "default") == 0) { /* the name of untagged work */
    norm = *a;
    norm.tag = NULL;
    a = &norm;
  }
  ordinal = t->emitted++;
  if (ordinal < t->sched.n) {
    e = ev_at(t, t->sched.v[ordinal]);
    if (!matches_history(t, a, e)) return DX_ENONDET;
  } else {
    e = append(t, action_event_kind(a->kind));
    if (!e || VEC_PUSH(t->sched, e->event_id) || VEC_PUSH(t->new_sched, e->event_id) ||
        !fill_new_event(t, e, a)) {
      set_failure(t, DX_CAT_INFRASTRUCTURE, "OutOfMemory", "out of memory in turn");
      return DX_ENOMEM;
    }
  }
  s = slot(t, e->event_id);
  if (!s) return DX_ENOMEM;
  s->emitted = 1;
  if (a->kind == DX_ACT_ACTIVITY && a->on_moved_fail && a->session_id &&
      e->event_id > t->n_hist)
    s->expect_owner = dx_turn_session_worker(t, a->session_id);
  if (e->kind == DX_EV_SYSCALL) {
    s->state = DX_FUT_OK;
    s->data = e->data;
    if (value) *value = e->data;
  } else if (e->kind == DX_EV_CUSTOM_STATUS) {
    note_custom_status(t, e->event_id > t->n_hist ? e->data : a->input, e->event_id > t->n_hist);
  } else if (e->kind == DX_EV_QUEUE_SUBSCRIBED) {
    dequeue_waiting(t, s, e->name);
  } else {
    kv_apply(t, e); /* history's timestamp on replay: prune decisions stay the same */
  }
  if (token && (e->kind == DX_EV_CUSTOM_STATUS || e->kind == DX_EV_KV_SET ||
                e->kind == DX_EV_KV_CLEARED || e->kind == DX_EV_KV_CLEARED_ALL))
    return DX_OK; /* nothing to wait for */
  if (token) *token = e->event_id;
  return DX_OK;
}

int dx_turn_poll(dx_turn_t *t, uint64_t token, const char **data, const dx_failure_t **fail,
                 uint64_t *order) {
  slot_t *s = token < t->slots.n ? &t->slots.v[token] : NULL;
  if (!s || s->state == DX_FUT_PENDING) return DX_FUT_PENDING;
  if (data) *data = s->data;
  if (fail) *fail = s->fail_id ? &ev_at(t, s->fail_id)->fail : NULL;
  if (order) *order = s->order;
  return s->state;
}

/* Breadcrumb + side effect for an outstanding future, at most once per schedule. */
static void cancel_outstanding(dx_turn_t *t, uint64_t id, const char *reason) {
  dx_event_t *sched = ev_at(t, id), *crumb = NULL;
  /* Look the event up first: slot() grows the table up to `id`, so a bogus token from the
  ** binding (e.g. -1 from Lua) used to allocate without bound. */
  slot_t *s = sched ? slot(t, id) : NULL;
  int crumb_kind = 0;
  if (!s || !sched || s->state != DX_FUT_PENDING || s->cancelled || s->completed) return;
  s->cancelled = 1;
  switch (sched->kind) {
    case DX_EV_ACT_SCHEDULED: crumb_kind = DX_EV_ACT_CANCEL_REQ; break;
    case DX_EV_SUB_SCHEDULED: crumb_kind = DX_EV_SUB_CANCEL_REQ; break;
    case DX_EV_EXT_SUBSCRIBED: crumb_kind = DX_EV_EXT_SUB_CANCELLED; break;
    case DX_EV_QUEUE_SUBSCRIBED: crumb_kind = DX_EV_QUEUE_SUB_CANCELLED; break;
    default: return; /* timers need nothing: a late TimerFired is simply ignored */
  }
  if (!s->has_crumb) {
    crumb = append(t, crumb_kind);
    if (!crumb) return;
    crumb->source_id = id;
    crumb->reason = dx__strdup(reason);
    sched = ev_at(t, id); /* append may have moved the delta */
  }
  if (sched->kind == DX_EV_ACT_SCHEDULED) {
    dx_activity_ref_t r = {t->instance, t->exec, id};
    VEC_PUSH(t->cancelled, r);
  } else if (sched->kind == DX_EV_SUB_SCHEDULED && !s->has_crumb && sched->event_id <= t->n_hist) {
    /* Only a child started in an earlier turn exists; a new one is simply not started. */
    dx_work_item_t w;
    memset(&w, 0, sizeof w);
    w.kind = DX_WI_CANCEL;
    w.instance = dx__strdup(sched->instance);
    /* A child cancelled with its parent says so (as the reference); a dropped future (a
    ** select loser) keeps its own reason. */
    w.reason = dx__strdup(t->parent_cancelled ? "parent canceled"
                                              : "parent dropped sub-orchestration future");
    VEC_PUSH(t->orch_items, w);
  }
}

/* Replay must cancel what history cancelled (and only that): a cancel the code makes while
** replaying, of a future that persisted history neither cancelled nor completed, is one
** the original run never made (it would have left a breadcrumb). A cancel of a future whose
** completion is in history may be one that changed nothing then, so it passes. Timers leave
** no breadcrumb (as the reference): they are not checked. */
static int cancel_replays(dx_turn_t *t, uint64_t id, const slot_t *s) {
  const dx_event_t *e = ev_at(t, id);
  if (!dx_turn_is_replaying(t) || id > t->n_hist || e->kind == DX_EV_TIMER_CREATED ||
      s->has_crumb || s->hist_completed)
    return 1;
  NONDET(t, "nondeterministic: %s%s%s at event %" PRIu64 " was not cancelled in history but "
            "the code now cancels it",
         kind_word(e->kind), e->name ? " " : "", e->name ? e->name : "", id);
  return 0;
}

void dx_turn_cancel(dx_turn_t *t, uint64_t token) {
  const dx_event_t *e = ev_at(t, token);
  slot_t *s;
  if (t->fatal) return;
  s = e && is_schedule_kind(e->kind) ? slot(t, token) : NULL;
  if (s && s->emitted && s->state == DX_FUT_PENDING && !s->code_cancelled) {
    s->code_cancelled = 1;
    if (!cancel_replays(t, token, s)) return;
  }
  cancel_outstanding(t, token, "dropped_future");
}

/* The other direction, once the code has run past history: every future persisted history
** cancelled (dropped_future) the code must have cancelled again. A code that returned or
** continued-as-new drops what it still holds, so a future still pending then passes (the
** reference's drop-on-return). */
static void check_cancels_replayed(dx_turn_t *t) {
  uint64_t id;
  int ended = t->run_state == DX_RUN_DONE || t->run_state == DX_RUN_CAN;
  for (id = 1; id <= t->n_hist && id < t->slots.n && !t->fatal; id++) {
    const slot_t *s = &t->slots.v[id];
    const dx_event_t *e;
    if (!s->dropped_crumb || s->code_cancelled || (ended && s->state == DX_FUT_PENDING))
      continue;
    e = ev_at(t, id);
    NONDET(t, "nondeterministic: %s%s%s at event %" PRIu64 " was cancelled in history but "
              "the code no longer cancels it",
           kind_word(e->kind), e->name ? " " : "", e->name ? e->name : "", id);
  }
}

/* {===== metadata =====} */

const char *dx_turn_instance(const dx_turn_t *t) { return t->instance; }
uint64_t dx_turn_execution(const dx_turn_t *t) { return t->exec; }
const char *dx_turn_name(const dx_turn_t *t) { return t->name; }
const char *dx_turn_version(const dx_turn_t *t) { return t->version; }
int64_t dx_turn_instruction_budget(const dx_turn_t *t) { return t->cfg->instruction_budget; }
int64_t dx_turn_time_limit(const dx_turn_t *t) { return t->cfg->time_limit_ms; }
int dx_turn_is_replaying(const dx_turn_t *t) {
  return t->cursor < t->n_hist && t->emitted < t->n_sched_known;
}

const char *dx_turn_session_worker(dx_turn_t *t, const char *session_id) {
  uint64_t best = 0;
  size_t i;
  for (i = 0; session_id && i < t->sched.n; i++) {
    uint64_t id = t->sched.v[i];
    const dx_event_t *e = ev_at(t, id);
    const slot_t *s = id < t->slots.n ? &t->slots.v[id] : NULL;
    if (!s || s->state == DX_FUT_PENDING || e->kind != DX_EV_ACT_SCHEDULED ||
        !same_str(e->session_id, session_id))
      continue;
    if (s->order > best) best = s->order; /* order: the completion's event id */
  }
  return best ? ev_at(t, best)->worker_id : NULL;
}

void dx_turn_set_output(dx_turn_t *t, const char *json) {
  free(t->output);
  t->output = dx__strdup(json ? json : "null");
}

void dx_turn_set_failure(dx_turn_t *t, int category, const char *kind, const char *message) {
  if (t->fatal) return;
  dx_failure_clear(&t->failure);
  t->failure.category = category;
  t->failure.kind = dx__strdup(kind);
  t->failure.message = dx__strdup(message ? message : "orchestration failed");
}

const char *dx_turn_error(const dx_turn_t *t) { return t->fatal ? t->failure.message : NULL; }

void dx_turn_trace(dx_turn_t *t, int level, const char *message) {
  if (dx_turn_is_replaying(t)) return;
  dx__log(level, message, "instance=%s execution=%" PRIu64 " orchestration=%s", t->instance,
          t->exec, t->name);
}

/* {===== batch conversion =====} */

static int completion_kind_for(int wi_kind) {
  switch (wi_kind) {
    case DX_WI_ACT_COMPLETED: return DX_EV_ACT_COMPLETED;
    case DX_WI_ACT_FAILED: return DX_EV_ACT_FAILED;
    case DX_WI_TIMER_FIRED: return DX_EV_TIMER_FIRED;
    case DX_WI_SUB_COMPLETED: return DX_EV_SUB_COMPLETED;
    case DX_WI_SUB_FAILED: return DX_EV_SUB_FAILED;
    default: return 0;
  }
}

static int schedule_kind_for(int completion_kind) {
  switch (completion_kind) {
    case DX_EV_ACT_COMPLETED:
    case DX_EV_ACT_FAILED: return DX_EV_ACT_SCHEDULED;
    case DX_EV_TIMER_FIRED: return DX_EV_TIMER_CREATED;
    case DX_EV_SUB_COMPLETED:
    case DX_EV_SUB_FAILED: return DX_EV_SUB_SCHEDULED;
    default: return 0;
  }
}

/* A completion of `src` exists: indexed ones are marked in its slot, later ones (this batch;
** the whole history before a fresh turn's index) are looked up. */
static int has_completion(dx_turn_t *t, uint64_t src) {
  uint64_t id = t->indexed > src + 1 ? t->indexed : src + 1;
  if (src < t->slots.n && t->slots.v[src].completed) return 1;
  for (; id < next_id(t); id++) {
    const dx_event_t *e = ev_at(t, id);
    if (e->source_id == src && schedule_kind_for(e->kind)) return 1;
  }
  return 0;
}

/* The latest cancel request from event `from` on (a kept turn saw none before), or NULL. */
static const dx_event_t *cancel_request(dx_turn_t *t, uint64_t from) {
  const dx_event_t *cr = NULL;
  uint64_t id;
  for (id = from ? from : 1; id < next_id(t); id++)
    if (ev_at(t, id)->kind == DX_EV_ORCH_CANCEL_REQ) cr = ev_at(t, id);
  return cr;
}

static int has_cancel_request(dx_turn_t *t) { return cancel_request(t, t->indexed) != NULL; }

/* A queue message becomes an arrival event. */
static void convert_queue_message(dx_turn_t *t, const dx_work_item_t *m) {
  dx_event_t *e = append(t, DX_EV_QUEUE_EVENT);
  if (!e) return;
  e->name = dx__strdup(m->name);
  e->data = dx__strdup(m->data ? m->data : "null");
  if (!e->name || !e->data) t->oom = 1;
}

/* Messages carried over by continue_as_new (they hold the new execution's id) arrived before
** anything queued since: they go first, in their order. */
static int is_carried(const dx_turn_t *t, const dx_work_item_t *m) {
  return m->kind == DX_WI_QUEUE_MESSAGE && m->execution_id == t->exec && t->n_hist == 0;
}

/* Turn the batch into completion events (message order), dropping stale and duplicate ones. */
static void convert_batch(dx_turn_t *t) {
  size_t i;
  for (i = 0; i < t->item->messages_len; i++)
    if (is_carried(t, &t->item->messages[i])) convert_queue_message(t, &t->item->messages[i]);
  for (i = 0; i < t->item->messages_len && !t->fatal; i++) {
    const dx_work_item_t *m = &t->item->messages[i];
    int ck = completion_kind_for(m->kind);
    dx_event_t *e, *sched;
    if (m->kind == DX_WI_QUEUE_MESSAGE) {
      /* a carried message of another execution is stale; client messages have id 0 */
      if (m->execution_id == 0) convert_queue_message(t, m);
    } else if (ck) {
      if (m->execution_id != t->exec) continue;          /* an older execution's result */
      if (m->id == 0 || m->id >= next_id(t)) {
        NONDET(t, "nondeterministic: completion for event %" PRIu64 " which does not exist",
               m->id);
        return;
      }
      sched = ev_at(t, m->id);
      if (sched->kind != schedule_kind_for(ck)) {
        NONDET(t, "nondeterministic: completion kind mismatch for event %" PRIu64
                  " (a %s was scheduled there)",
               m->id, kind_word(sched->kind));
        return;
      }
      if (has_completion(t, m->id)) continue;            /* duplicate delivery */
      e = append(t, ck);
      if (!e) return;
      e->source_id = m->id;
      e->data = m->data; /* borrowed, then copied into the event's own arena */
      e->fire_at_ms = m->fire_at_ms;
      e->worker_id = m->worker_id;
      e->fail = m->fail;
      if (dx__event_own(e) != DX_OK) t->oom = 1;
    } else if (m->kind == DX_WI_EXTERNAL) {
      e = append(t, DX_EV_EXT_EVENT);
      if (!e) return;
      e->name = dx__strdup(m->name);
      e->data = dx__strdup(m->data ? m->data : "null");
    } else if (m->kind == DX_WI_CANCEL) {
      if (has_cancel_request(t)) continue;
      e = append(t, DX_EV_ORCH_CANCEL_REQ);
      if (!e) return;
      e->reason = dx__strdup(m->reason ? m->reason : "cancelled");
    }
  }
}

/* {===== the walk =====} */

static void resume(dx_turn_t *t) {
  if (t->run_state != DX_RUN_PENDING || t->fatal) return;
  t->run_state = t->host->orch_resume(t->host_ud, t->inst, t);
}

/* Positional external events: the oldest active, undelivered wait of that name gets it. */
static int deliver_external(dx_turn_t *t, const dx_event_t *e, uint64_t pos) {
  size_t i;
  for (i = 0; i < t->emitted && i < t->sched.n; i++) {
    uint64_t id = t->sched.v[i];
    dx_event_t *sub = ev_at(t, id);
    slot_t *s = slot(t, id);
    if (sub->kind != DX_EV_EXT_SUBSCRIBED || s->cancelled || s->delivered) continue;
    if (!same_str(sub->name, e->name)) continue;
    s->delivered = 1;
    s->state = DX_FUT_OK;
    s->data = e->data;
    s->order = pos;
    return 1;
  }
  return 0;
}

/* A queue message goes to the oldest waiting dequeue of its queue, else waits for one. Once
** the code has ended nobody will dequeue: it stays (continue_as_new carries it). */
static int deliver_queue(dx_turn_t *t, const dx_event_t *e) {
  size_t i;
  if (t->run_state == DX_RUN_PENDING && !t->fatal) {
    for (i = 0; i < t->emitted && i < t->sched.n; i++) {
      uint64_t id = t->sched.v[i];
      dx_event_t *sub = ev_at(t, id);
      slot_t *s = slot(t, id);
      if (!s || sub->kind != DX_EV_QUEUE_SUBSCRIBED || s->cancelled || s->delivered) continue;
      if (!same_str(sub->name, e->name)) continue;
      deliver_to(s, e);
      return 1;
    }
  }
  if (VEC_PUSH(t->arrivals, e->event_id)) t->oom = 1;
  return 0;
}

static void apply(dx_turn_t *t, uint64_t id) {
  dx_event_t *e = ev_at(t, id);
  slot_t *s;
  switch (e->kind) {
    case DX_EV_ACT_COMPLETED:
    case DX_EV_ACT_FAILED:
    case DX_EV_TIMER_FIRED:
    case DX_EV_SUB_COMPLETED:
    case DX_EV_SUB_FAILED:
      s = slot(t, e->source_id);
      if (!s) return;
      if (!s->emitted) {
        NONDET(t, "nondeterministic: history completes %s event %" PRIu64
                  " but the code did not schedule it (completion without open schedule)",
               kind_word(ev_at(t, e->source_id)->kind), e->source_id);
        return;
      }
      if (e->kind == DX_EV_ACT_FAILED || e->kind == DX_EV_SUB_FAILED) {
        if (e->fail.category != DX_CAT_APPLICATION) {
          /* Infrastructure, configuration and poison failures never reach user code. */
          t->fatal = 0;
          set_failure(t, e->fail.category, e->fail.kind, "%s",
                      e->fail.message ? e->fail.message : "failure");
          return;
        }
        s->state = DX_FUT_ERR;
        s->fail_id = id;
      } else {
        s->state = DX_FUT_OK;
        s->data = e->data;
      }
      s->order = id;
      resume(t);
      break;
    case DX_EV_EXT_EVENT:
      if (deliver_external(t, e, id)) resume(t);
      break;
    case DX_EV_QUEUE_EVENT:
      if (deliver_queue(t, e)) resume(t);
      break;
    default:
      break;
  }
}

/* {===== finishing =====} */

static void add_item(dx_turn_t *t, int to_worker, dx_work_item_t *w) {
  if (to_worker ? VEC_PUSH(t->worker_items, *w) : VEC_PUSH(t->orch_items, *w)) {
    dx_work_item_clear(w);
    t->oom = 1;
  }
}

/* Work items for the schedule events created this turn. */
static void emit_work(dx_turn_t *t, int terminal, int can) {
  size_t i;
  for (i = 0; i < t->new_sched.n; i++) {
    dx_event_t *e = ev_at(t, t->new_sched.v[i]);
    slot_t *s = slot(t, e->event_id);
    dx_work_item_t w;
    memset(&w, 0, sizeof w);
    if (e->kind == DX_EV_ORCH_CHAINED) {
      if (can) continue;
    } else if (e->kind == DX_EV_SESSION_CLOSED) {
      /* closing is a side effect that must happen even in the final turn */
    } else if (terminal || (s && s->cancelled)) {
      continue;
    }
    switch (e->kind) {
      case DX_EV_ACT_SCHEDULED:
        w.kind = DX_WI_ACT_EXECUTE;
        w.instance = t->instance; /* borrowed, then copied into the item's own arena */
        w.execution_id = t->exec;
        w.id = e->event_id;
        w.name = e->name;
        w.data = e->data;
        w.session_id = e->session_id;
        w.tag = e->tag;
        w.worker_id = s ? (char *)s->expect_owner : NULL;
        dx__work_item_own(&w); /* out of memory: fields NULL, as a failed strdup left them */
        add_item(t, 1, &w);
        break;
      case DX_EV_SESSION_CLOSED:
        /* Routed like a session activity, so it reaches the owner after earlier work. */
        w.kind = DX_WI_SESSION_CLOSE;
        w.instance = dx__strdup(t->instance);
        w.execution_id = t->exec;
        w.id = e->event_id;
        w.session_id = dx__strdup(e->session_id);
        add_item(t, 1, &w);
        break;
      case DX_EV_TIMER_CREATED:
        w.kind = DX_WI_TIMER_FIRED;
        w.instance = dx__strdup(t->instance);
        w.execution_id = t->exec;
        w.id = e->event_id;
        w.fire_at_ms = e->fire_at_ms;
        add_item(t, 0, &w);
        break;
      case DX_EV_SUB_SCHEDULED:
      case DX_EV_ORCH_CHAINED:
        w.kind = DX_WI_START;
        w.instance = dx__strdup(e->instance);
        w.name = dx__strdup(e->name);
        w.version = dx__strdup(e->version);
        w.data = dx__strdup(e->data);
        w.execution_id = 1;
        if (e->kind == DX_EV_SUB_SCHEDULED) {
          w.parent_instance = dx__strdup(t->instance);
          w.parent_id = e->event_id;
          w.parent_execution_id = t->exec;
        }
        add_item(t, 0, &w);
        break;
      default:
        break;
    }
  }
}

/* Tell the parent how the child ended. */
static void notify_parent(dx_turn_t *t, int completed) {
  const dx_event_t *st = ev_at(t, 1);
  dx_work_item_t w;
  if (!st || !st->instance || !st->parent_id) return;
  memset(&w, 0, sizeof w);
  w.kind = completed ? DX_WI_SUB_COMPLETED : DX_WI_SUB_FAILED;
  w.instance = dx__strdup(st->instance);
  w.execution_id = st->parent_execution_id ? st->parent_execution_id : 1;
  w.id = st->parent_id;
  if (completed) w.data = dx__strdup(t->output);
  else dx_failure_copy(&w.fail, &t->failure);
  add_item(t, 0, &w);
}

/* Everything still outstanding is cancelled when the execution ends. */
static void cancel_all_outstanding(dx_turn_t *t, const char *reason) {
  size_t i;
  for (i = 0; i < t->sched.n; i++) cancel_outstanding(t, t->sched.v[i], reason);
}

/* Queue messages nobody dequeued go to the next execution (the oldest DX_MAX_CARRY_FORWARD;
** the rest are dropped with a warning), after its start message. */
static void carry_forward(dx_turn_t *t) {
  size_t i;
  for (i = 0; i < t->arrivals.n && i < DX_MAX_CARRY_FORWARD; i++) {
    const dx_event_t *m = ev_at(t, t->arrivals.v[i]);
    dx_work_item_t w;
    memset(&w, 0, sizeof w);
    w.kind = DX_WI_QUEUE_MESSAGE;
    w.instance = dx__strdup(t->instance);
    w.execution_id = t->exec + 1;
    w.name = dx__strdup(m->name);
    w.data = dx__strdup(m->data);
    add_item(t, 0, &w);
  }
  if (t->arrivals.n > DX_MAX_CARRY_FORWARD)
    dx__log(DX_LOG_WARN, "queue messages dropped at continue_as_new", "instance=%s execution=%"
            PRIu64 " carried=%d dropped=%zu", t->instance, t->exec, DX_MAX_CARRY_FORWARD,
            t->arrivals.n - DX_MAX_CARRY_FORWARD);
}

static void finish_terminal(dx_turn_t *t, int status) {
  dx_event_t *e;
  cancel_all_outstanding(t, status == DX_STATUS_COMPLETED ? "orchestration_terminal_completed"
                            : status == DX_STATUS_FAILED  ? "orchestration_terminal_failed"
                                                          : "orchestration_terminal_continued_as_new");
  emit_work(t, 1, status == DX_STATUS_CONTINUED_AS_NEW);
  if (status == DX_STATUS_COMPLETED) {
    e = append(t, DX_EV_ORCH_COMPLETED);
    if (e) e->data = dx__strdup(t->output);
    t->ack.output = t->output;
    notify_parent(t, 1);
  } else if (status == DX_STATUS_FAILED) {
    e = append(t, DX_EV_ORCH_FAILED);
    if (e) dx_failure_copy(&e->fail, &t->failure);
    t->ack.failure = &t->failure;
    notify_parent(t, 0);
  } else {
    dx_work_item_t w;
    e = append(t, DX_EV_ORCH_CAN);
    if (e) e->data = dx__strdup(t->can_input);
    memset(&w, 0, sizeof w);
    w.kind = DX_WI_CAN;
    w.instance = dx__strdup(t->instance);
    w.name = dx__strdup(t->name);
    w.version = dx__strdup(t->can_version);
    w.data = dx__strdup(t->can_input);
    w.custom_status = dx__strdup(t->status_now);
    w.execution_id = t->exec + 1;
    add_item(t, 0, &w);
    carry_forward(t);
    t->ack.output = t->can_input;
  }
  t->ack.status = status;
}

static void log_outcome(dx_turn_t *t) {
  if (t->ack.status == DX_STATUS_COMPLETED)
    dx__log(DX_LOG_INFO, "orchestration completed", "instance=%s execution=%" PRIu64
            " orchestration=%s", t->instance, t->exec, t->name);
  else if (t->ack.status == DX_STATUS_FAILED)
    dx__log(DX_LOG_WARN, "orchestration failed", "instance=%s execution=%" PRIu64
            " orchestration=%s category=%s error=\"%s\"", t->instance, t->exec, t->name,
            dx__category_name(t->failure.category),
            t->failure.message ? t->failure.message : "");
  else if (t->ack.status == DX_STATUS_CONTINUED_AS_NEW)
    dx__log(DX_LOG_INFO, "orchestration continued as new", "instance=%s execution=%" PRIu64
            " orchestration=%s", t->instance, t->exec, t->name);
}

static void fill_ack(dx_turn_t *t) {
  t->ack.instance = t->item->instance;
  t->ack.lock_token = t->item->lock_token;
  t->ack.execution_id = t->exec;
  t->ack.delta = t->delta.v;
  t->ack.delta_len = t->delta.n;
  t->ack.worker_items = t->worker_items.v;
  t->ack.worker_items_len = t->worker_items.n;
  t->ack.orch_items = t->orch_items.v;
  t->ack.orch_items_len = t->orch_items.n;
  t->ack.cancelled = t->cancelled.v;
  t->ack.cancelled_len = t->cancelled.n;
  t->ack.custom_status_set = t->custom_status_set;
  t->ack.custom_status = t->custom_status;
  if (t->n_hist == 0 && t->delta.n > 0 && t->delta.v[0].kind == DX_EV_ORCH_STARTED) {
    t->ack.orchestration_name = t->name;
    t->ack.orchestration_version = t->version;
    t->ack.parent_instance = t->delta.v[0].instance;
    if (!t->ack.status) t->ack.status = DX_STATUS_RUNNING;
  }
}

/* {===== turn entry =====} */

int64_t dx__unregistered_backoff(uint32_t attempt, int64_t base_ms, int64_t max_ms) {
  uint32_t shift = attempt > 0 ? attempt - 1 : 0;
  int64_t d;
  if (shift > 6) shift = 6;
  d = base_ms << shift;
  return d < max_ms ? d : max_ms;
}

static const dx_work_item_t *find_start(const dx_orch_item_t *item, int kind) {
  size_t i;
  for (i = 0; i < item->messages_len; i++)
    if (item->messages[i].kind == kind) return &item->messages[i];
  return NULL;
}

enum { SEL_DROP = 0, SEL_RUN = 1, SEL_WAIT = 2 };

/* Decide which execution this turn works on: SEL_RUN; SEL_DROP = the execution has ended
** (ack drops stale messages); SEL_WAIT = the messages precede the execution they belong to,
** whose start (or continue-as-new) message is still queued but not visible yet (another
** worker handed it back with a delay, e.g. it lacked the orchestration): they must wait for
** that first turn, not be dropped. */
static int select_execution(dx_turn_t *t) {
  const dx_orch_item_t *it = t->item;
  const dx_work_item_t *can = find_start(it, DX_WI_CAN);
  const dx_work_item_t *start = find_start(it, DX_WI_START);
  const dx_event_t *last = it->history_len ? &it->history[it->history_len - 1] : NULL;
  t->exec = it->execution_id ? it->execution_id : 1;
  if (last && last->kind == DX_EV_ORCH_CAN && can) {
    t->exec = t->exec + 1;
    t->hist = NULL;
    t->n_hist = 0;
    start = can;
  } else if (last && last->kind == DX_EV_ORCH_CAN) {
    return SEL_WAIT; /* the next execution's start is queued: its messages wait for it */
  } else if (last && is_terminal_kind(last->kind)) {
    return SEL_DROP;
  } else {
    t->hist = it->history;
    t->n_hist = it->history_len;
  }
  if (t->n_hist == 0 && !start) return SEL_WAIT;
  t->instance = dx__strdup(it->instance);
  if (t->n_hist) {
    t->name = dx__strdup(t->hist[0].name);
    t->version = dx__strdup(t->hist[0].version);
  } else {
    t->name = dx__strdup(start->name);
    t->version = dx__strdup(start->version);
  }
  return SEL_RUN;
}

static int validate_history(dx_turn_t *t) {
  size_t i;
  for (i = 0; i < t->n_hist; i++) {
    const dx_event_t *e = &t->hist[i];
    if (e->event_id != i + 1) {
      NONDET(t, "nondeterministic: corrupted history: event %zu has id %" PRIu64, i + 1,
             e->event_id);
      return 0;
    }
    /* Completions and breadcrumbs must refer back to an earlier event: the walk indexes slots
    ** by source id (a huge one allocated without bound) and dereferences that event. */
    if ((schedule_kind_for(e->kind) || is_crumb_kind(e->kind)) &&
        (e->source_id == 0 || e->source_id >= e->event_id)) {
      NONDET(t, "nondeterministic: corrupted history: event %zu refers to event %" PRIu64,
             i + 1, e->source_id);
      return 0;
    }
  }
  if (t->n_hist && t->hist[0].kind != DX_EV_ORCH_STARTED) {
    NONDET(t, "nondeterministic: corrupted history: first event is not OrchestrationStarted");
    return 0;
  }
  return 1;
}

static void index_history(dx_turn_t *t) {
  uint64_t id;
  for (id = t->indexed ? t->indexed : 1; id < next_id(t); id++) {
    const dx_event_t *e = ev_at(t, id);
    if (is_schedule_kind(e->kind)) VEC_PUSH(t->sched, id);
    if (is_crumb_kind(e->kind)) {
      slot_t *s = slot(t, e->source_id);
      if (s) s->has_crumb = 1;
      if (s && id <= t->n_hist && same_str(e->reason, "dropped_future")) s->dropped_crumb = 1;
    } else if (schedule_kind_for(e->kind)) {
      slot_t *s = slot(t, e->source_id);
      if (s) s->completed = 1;
      if (s && id <= t->n_hist) s->hist_completed = 1;
    }
  }
  t->indexed = next_id(t);
  t->n_sched_known = t->sched.n;
}

static void start_event(dx_turn_t *t, const char *resolved_version) {
  const dx_work_item_t *start = find_start(t->item, t->exec > 1 ? DX_WI_CAN : DX_WI_START);
  dx_event_t *e;
  if (!start) start = find_start(t->item, DX_WI_START);
  e = append(t, DX_EV_ORCH_STARTED);
  if (!e) return;
  e->name = t->name; /* borrowed, then copied into the event's own arena */
  e->version = (char *)resolved_version;
  e->data = start && start->data ? start->data : "null";
  if (t->exec > 1 && start && start->custom_status) /* carried over by continue_as_new */
    e->custom_status = start->custom_status;
  if (start && start->parent_instance) {
    e->instance = start->parent_instance;
    e->parent_id = start->parent_id;
    e->parent_execution_id = start->parent_execution_id;
  }
  if (dx__event_own(e) != DX_OK) t->oom = 1;
  {
    /* resolved_version may point at t->version itself: copy before freeing. */
    char *v = dx__strdup(resolved_version);
    free(t->version);
    t->version = v;
  }
  /* t->version, not resolved_version: that may have been the string just freed. */
  dx__log(DX_LOG_INFO, "orchestration started", "instance=%s execution=%" PRIu64
          " orchestration=%s version=%s", t->instance, t->exec, t->name,
          t->version ? t->version : "");
}

/* What the code reads before it writes: the committed key-value state (never this
** execution's writes, which replay reproduces) and the status the execution started with. */
static void seed_state(dx_turn_t *t) {
  const dx_event_t *st = ev_at(t, 1);
  size_t i;
  for (i = 0; i < t->item->kv_len; i++)
    kv_put(t, t->item->kv[i].key, t->item->kv[i].value, t->item->kv[i].updated_ms);
  if (st && st->custom_status && !(t->status_now = dx__strdup(st->custom_status))) t->oom = 1;
}

/* Run the code over events [first, end): a fresh turn (first 0) starts it and replays the
** whole history; a kept turn's code is suspended where its last turn left it and is fed only
** the events of this batch. */
static void run_code(dx_turn_t *t, uint64_t first, uint64_t end) {
  dx_error_t err;
  const dx_event_t *st = ev_at(t, 1);
  uint64_t id = first;
  memset(&err, 0, sizeof err);
  if (!t->inst) {
    if (t->host->orch_start(t->host_ud, t, t->name, t->version, st->data, &t->inst, &err) != 0) {
      set_failure(t, DX_CAT_APPLICATION, "Panicked", "%s", err.msg);
      return;
    }
    t->cursor = 1;
    resume(t);
    id = 2;
  }
  for (; id < end && !t->fatal; id++) {
    t->cursor = id;
    apply(t, id);
  }
  t->cursor = next_id(t);
  if (t->fatal || t->run_state == DX_RUN_FAILED) return;
  if (t->emitted < t->n_sched_known) {
    const dx_event_t *e = ev_at(t, t->sched.v[t->emitted]);
    NONDET(t, "nondeterministic: history has a %s%s%s at event %" PRIu64
              " that the code no longer schedules",
           kind_word(e->kind), e->name ? " " : "", e->name ? e->name : "", e->event_id);
  }
  check_cancels_replayed(t);
}

static void run_batch(dx_turn_t *t);
static void finish_turn(dx_turn_t *t);

static void turn_body(dx_turn_t *t) {
  const dx_orch_item_t *it = t->item;
  const char *resolved = NULL;
  int registered;
  t->action = DX_TURN_ACK;
  if (it->history_error) {
    /* History is unreadable: retry (maybe a newer build can read it), then mark the
    ** execution failed without appending to the corrupt history. */
    t->instance = dx__strdup(it->instance);
    t->name = dx__strdup(it->orchestration_name);
    t->exec = it->execution_id;
    set_failure(t, DX_CAT_POISON, "FailedDeserialization",
                "poison: orchestration %s history could not be decoded: %s", it->instance,
                it->history_error_msg ? it->history_error_msg : "corrupted record");
    dx__log(DX_LOG_ERROR, "orchestration history unreadable", "instance=%s attempt=%u error=\"%s\"",
            it->instance, it->attempt_count, t->failure.message);
    if (it->attempt_count <= t->cfg->max_attempts) {
      t->action = DX_TURN_ABANDON;
      t->abandon_delay_ms = 1000;
    } else {
      t->ack.status = DX_STATUS_FAILED;
      t->ack.failure = &t->failure;
    }
    return;
  }
  switch (select_execution(t)) {
    case SEL_DROP: return; /* stale messages of an ended execution: ack drops them */
    case SEL_WAIT:
      if (it->attempt_count <= t->cfg->max_attempts) {
        /* Same schedule as the unregistered start they wait for: they come back after it. */
        t->action = DX_TURN_ABANDON;
        t->abandon_delay_ms = dx__unregistered_backoff(it->attempt_count,
                                                       t->cfg->unregistered_base_ms,
                                                       t->cfg->unregistered_max_ms);
        dx__log(DX_LOG_DEBUG, "messages wait for the instance's first turn",
                "instance=%s messages=%zu attempt=%u retry_in_ms=%" PRId64, it->instance,
                it->messages_len, it->attempt_count, t->abandon_delay_ms);
      } else {
        /* Outlived every attempt a start gets: nothing will ever run them. */
        dx__log(DX_LOG_WARN, "messages for an instance that never started dropped",
                "instance=%s messages=%zu attempts=%u", it->instance, it->messages_len,
                it->attempt_count);
      }
      return;
    default: break;
  }
  if (!validate_history(t)) goto terminal;
  /* Resolve the version even for a poisoned instance: its OrchestrationStarted records it. */
  registered = t->host->orch_lookup(t->host_ud, t->name, t->version, &resolved);
  if (it->attempt_count > t->cfg->max_attempts) {
    set_failure(t, DX_CAT_POISON, "Poison",
                "poison: orchestration %s exceeded %u attempts (max %u)", t->instance,
                it->attempt_count, t->cfg->max_attempts);
  } else if (!registered) {
    char what[512];
    if (t->version)
      snprintf(what, sizeof what, "orchestration '%s' version %s", t->name, t->version);
    else
      snprintf(what, sizeof what, "orchestration '%s'", t->name);
    if (it->attempt_count < t->cfg->max_attempts) {
      t->action = DX_TURN_ABANDON;
      t->abandon_delay_ms = dx__unregistered_backoff(it->attempt_count,
                                                     t->cfg->unregistered_base_ms,
                                                     t->cfg->unregistered_max_ms);
      dx__log(DX_LOG_WARN, "orchestration not registered; will retry",
              "instance=%s orchestration=%s version=%s attempt=%u retry_in_ms=%" PRId64,
              t->instance, t->name, t->version ? t->version : "", it->attempt_count,
              t->abandon_delay_ms);
      return;
    }
    set_failure(t, DX_CAT_CONFIGURATION, "Unregistered",
                "%s is not registered (gave up after %u attempts)", what, it->attempt_count);
  }
  if (t->n_hist == 0) start_event(t, registered && resolved ? resolved : t->version);
  if (t->fatal) goto terminal;
  seed_state(t);
  run_batch(t);
  return;
terminal:
  finish_turn(t);
}

/* Everything after the code exists: the batch becomes events, they are indexed and applied
** (a fresh turn replays from the start; a kept one goes on from where it stopped), and the
** outcome becomes the commit. */
static void run_batch(dx_turn_t *t) {
  uint64_t first = t->indexed; /* 0: fresh turn, all of history is new to the index */
  uint64_t batch = next_id(t); /* the batch's first event */
  const dx_event_t *cr;
  convert_batch(t);
  index_history(t);
  if (t->fatal) goto terminal;
  if ((cr = cancel_request(t, first)) != NULL) {
    /* The code does not see the batch, but what it saw before decides what is outstanding
    ** (a delivered wait is not): a fresh turn replays history up to the batch, so it cancels
    ** exactly what a kept turn's code left open. A new instance's code never runs. */
    if (!t->inst && t->n_hist > 0) run_code(t, 0, batch);
    if (!t->fatal)
      set_failure(t, DX_CAT_APPLICATION, "Cancelled", "canceled: %s",
                  cr->reason ? cr->reason : "cancelled");
    t->parent_cancelled = 1;
    goto terminal;
  }
  run_code(t, first, next_id(t));
terminal:
  finish_turn(t);
}

static void finish_turn(dx_turn_t *t) {
  if (t->fatal || t->run_state == DX_RUN_FAILED) {
    if (!t->failure.message) set_failure(t, DX_CAT_APPLICATION, "OrchestrationFailed",
                                         "orchestration failed");
    finish_terminal(t, DX_STATUS_FAILED);
  } else if (t->run_state == DX_RUN_CAN) {
    finish_terminal(t, DX_STATUS_CONTINUED_AS_NEW);
  } else if (t->run_state == DX_RUN_DONE) {
    if (!t->output) t->output = dx__strdup("null");
    if (!check_size(t, "output", t->output)) finish_terminal(t, DX_STATUS_FAILED);
    else finish_terminal(t, DX_STATUS_COMPLETED);
  } else {
    emit_work(t, 0, 0);
  }
}

static dx_turn_t *turn_end(dx_turn_t *t);

dx_turn_t *dx__turn_run(const dx_orch_item_t *item, const dx_turn_cfg_t *cfg,
                        const dx_host_methods_t *host, void *host_ud) {
  dx_turn_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->item = item;
  t->cfg = cfg;
  t->host = host;
  t->host_ud = host_ud;
  t->run_state = DX_RUN_PENDING;
  turn_body(t);
  return turn_end(t);
}

/* What every turn ends with: the code goes unless the turn may be kept, a turn short of memory
** is retried, an ack is filled. */
static dx_turn_t *turn_end(dx_turn_t *t) {
  if (t->inst && !(t->cfg->keep && dx__turn_keepable(t))) {
    t->host->orch_free(t->host_ud, t->inst);
    t->inst = NULL;
  } else if (t->inst) {
    t->host->orch_turn(t->host_ud, t->inst, NULL); /* suspended between turns */
  }
  if (t->oom) {
    /* Acking now would delete the batch's messages with some of their effects missing:
    ** release the lock instead, so the batch is fetched and the turn replayed again. */
    dx__log(DX_LOG_ERROR, "out of memory in an orchestration turn; retrying", "instance=%s",
            t->item->instance);
    t->action = DX_TURN_ABANDON;
    t->abandon_delay_ms = 100;
  }
  if (t->action == DX_TURN_ACK) {
    fill_ack(t);
    log_outcome(t);
  }
  return t;
}

/* {===== kept turns (the orchestration cache: orch_cache.c) =====} */

int dx__turn_keepable(const dx_turn_t *t) {
  return t->inst && t->host->version >= 5 && t->host->orch_turn && t->action == DX_TURN_ACK &&
         !t->oom && !t->fatal &&
         t->run_state == DX_RUN_PENDING && t->n_hist + t->delta.n > 0 &&
         (t->ack.status == DX_STATUS_NONE || t->ack.status == DX_STATUS_RUNNING);
}

static size_t str_bytes(const char *s) { return s ? strlen(s) + 1 : 0; }

static size_t event_bytes(const dx_event_t *e) {
  return str_bytes(e->name) + str_bytes(e->version) + str_bytes(e->data) +
         str_bytes(e->instance) + str_bytes(e->session_id) + str_bytes(e->reason) +
         str_bytes(e->fail.kind) + str_bytes(e->fail.message) + str_bytes(e->custom_status) +
         str_bytes(e->worker_id) + str_bytes(e->tag);
}

/* The turn's own output: the items of its commit and its per-turn vectors (the new events'
** strings are not freed here: a kept turn has moved them into its history). */
static void free_turn_output(dx_turn_t *t) {
  size_t i;
  for (i = 0; i < t->worker_items.n; i++) dx_work_item_clear(&t->worker_items.v[i]);
  for (i = 0; i < t->orch_items.n; i++) dx_work_item_clear(&t->orch_items.v[i]);
  free(t->delta.v);
  free(t->worker_items.v);
  free(t->orch_items.v);
  free(t->cancelled.v);
  free(t->new_sched.v);
}

int dx__turn_keep(dx_turn_t *t, dx_orch_item_t *item) {
  size_t n = t->n_hist + t->delta.n, i;
  uint64_t id;
  if (!dx__turn_keepable(t)) return DX_ESTATE;
  if (!t->own_hist && t->n_hist) {
    /* The history is the fetched item's: take it rather than copy it. */
    if (t->hist != item->history) return DX_ESTATE;
    t->own_hist = item->history;
    t->own_cap = item->history_len;
    item->history = NULL;
    item->history_len = 0;
    for (i = 0; i < t->n_hist; i++) t->ev_bytes += event_bytes(&t->own_hist[i]);
  }
  if (n > t->own_cap) {
    size_t cap = t->own_cap ? t->own_cap : 8;
    dx_event_t *nv;
    while (cap < n) cap *= 2;
    if (!(nv = realloc(t->own_hist, cap * sizeof *nv))) return DX_ENOMEM;
    t->own_hist = nv;
    t->own_cap = cap;
  }
  for (i = 0; i < t->delta.n; i++) t->ev_bytes += event_bytes(&t->delta.v[i]);
  memcpy(t->own_hist + t->n_hist, t->delta.v, t->delta.n * sizeof *t->delta.v);
  t->delta.n = 0; /* the strings now belong to own_hist */
  t->hist = t->own_hist;
  t->n_hist = n;
  /* Breadcrumbs the code wrote this turn: what a replay's index would mark. */
  for (id = t->indexed; id < next_id(t); id++)
    if (is_crumb_kind(ev_at(t, id)->kind)) {
      slot_t *s = slot(t, ev_at(t, id)->source_id);
      if (!s) return DX_ENOMEM;
      s->has_crumb = 1;
    }
  t->indexed = next_id(t);
  t->n_sched_known = t->sched.n;
  /* Forget the turn's commit; a kept instance is mostly idle, so give the memory back. */
  free_turn_output(t);
  memset(&t->delta, 0, sizeof t->delta);
  memset(&t->worker_items, 0, sizeof t->worker_items);
  memset(&t->orch_items, 0, sizeof t->orch_items);
  memset(&t->cancelled, 0, sizeof t->cancelled);
  memset(&t->new_sched, 0, sizeof t->new_sched);
  free(t->custom_status);
  t->custom_status = NULL;
  t->custom_status_set = 0;
  memset(&t->ack, 0, sizeof t->ack);
  t->item = NULL;
  t->cfg = NULL;
  return DX_OK;
}

dx_turn_t *dx__turn_continue(dx_turn_t *t, const dx_orch_item_t *item, const dx_turn_cfg_t *cfg) {
  t->item = item;
  t->cfg = cfg; /* the host reads the turn's budgets */
  if (t->host->orch_turn(t->host_ud, t->inst, t) != 0) return NULL; /* its code was replaced */
  t->action = DX_TURN_ACK;
  t->abandon_delay_ms = 0;
  run_batch(t);
  return turn_end(t);
}

uint64_t dx__turn_history_len(const dx_turn_t *t) { return t->n_hist + t->delta.n; }

int dx__item_continues(const dx_orch_item_t *item) {
  return item->history_len > 0 && !is_terminal_kind(item->history[item->history_len - 1].kind);
}

/* Same execution and length, and the same last event (and first, when the whole history came:
** an instance deleted and started again under the same id could reach the same length). */
int dx__turn_matches(const dx_turn_t *t, const dx_orch_item_t *item) {
  const dx_event_t *a, *b;
  size_t n = t->n_hist;
  if (item->history_error || item->execution_id != t->exec || n == 0 || t->delta.n) return 0;
  if (item->history_held) { /* the provider sent only the last event (set_history_hint) */
    if (item->history_held != n || item->history_len != 1) return 0;
    a = &item->history[0];
  } else {
    if (item->history_len != n || item->history[0].timestamp_ms != t->hist[0].timestamp_ms)
      return 0;
    a = &item->history[n - 1];
  }
  b = &t->hist[n - 1];
  return a->kind == b->kind && a->event_id == b->event_id && a->timestamp_ms == b->timestamp_ms &&
         a->source_id == b->source_id;
}

int64_t dx__turn_started_ms(const dx_turn_t *t) {
  const dx_event_t *e = t->n_hist ? &t->hist[0] : t->delta.n ? &t->delta.v[0] : NULL;
  return e && e->kind == DX_EV_ORCH_STARTED ? e->timestamp_ms : 0;
}

size_t dx__turn_bytes(const dx_turn_t *t) {
  size_t b = sizeof *t + t->own_cap * sizeof(dx_event_t) + t->ev_bytes +
             t->slots.cap * sizeof(slot_t) + t->sched.cap * sizeof(uint64_t) +
             t->delta.cap * sizeof(dx_event_t) + t->worker_items.cap * sizeof(dx_work_item_t) +
             t->orch_items.cap * sizeof(dx_work_item_t) +
             t->cancelled.cap * sizeof(dx_activity_ref_t) + t->new_sched.cap * sizeof(uint64_t) +
             t->arrivals.cap * sizeof(uint64_t) + t->kv.cap * sizeof(dx_kv_entry_t) +
             str_bytes(t->instance) + str_bytes(t->name) + str_bytes(t->version) +
             str_bytes(t->status_now);
  size_t i;
  for (i = 0; i < t->kv.n; i++) b += str_bytes(t->kv.v[i].key) + str_bytes(t->kv.v[i].value);
  if (t->inst && t->host->version >= 5 && t->host->orch_size)
    b += t->host->orch_size(t->host_ud, t->inst);
  return b;
}

int dx__turn_action(const dx_turn_t *t) { return t->action; }
const dx_orch_ack_t *dx__turn_ack(const dx_turn_t *t) { return &t->ack; }
int64_t dx__turn_abandon_delay(const dx_turn_t *t) { return t->abandon_delay_ms; }

void dx__turn_free(dx_turn_t *t) {
  size_t i;
  if (!t) return;
  if (t->inst) t->host->orch_free(t->host_ud, t->inst);
  for (i = 0; t->own_hist && i < t->n_hist; i++) dx_event_clear(&t->own_hist[i]);
  free(t->own_hist);
  for (i = 0; i < t->delta.n; i++) dx_event_clear(&t->delta.v[i]);
  free_turn_output(t);
  free(t->slots.v);
  free(t->sched.v);
  dx_failure_clear(&t->failure);
  free(t->instance);
  free(t->name);
  free(t->version);
  free(t->output);
  free(t->can_input);
  free(t->can_version);
  free(t->custom_status);
  free(t->status_now);
  for (i = 0; i < t->kv.n; i++) {
    free(t->kv.v[i].key);
    free(t->kv.v[i].value);
  }
  free(t->kv.v);
  free(t->arrivals.v);
  free(t);
}
