/*
** replay.c -- the replay engine of one orchestration turn (replay_turn.c runs the turn around
** it: entry, finishing, kept turns; replay_int.h holds what both share).
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
#include "replay_int.h"
#include "util.h"

/* A turn's vectors start small: most turns add an event or two and an item, and 4 records
** (672 bytes) stay within malloc's per-thread cache where 16 (2.7 KB) took its slow path on
** every turn. */
int dx__rp_grow(void **v, size_t *cap, size_t elem) {
  size_t ncap = *cap ? *cap * 2 : 4;
  void *nv = realloc(*v, ncap * elem);
  if (!nv) return 1;
  *v = nv;
  *cap = ncap;
  return 0;
}

const char *dx__rp_kind_word(int k) {
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
dx_event_t *dx__rp_append(dx_turn_t *t, int kind) {
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

void dx__rp_set_failure(dx_turn_t *t, int category, const char *kind, const char *fmt, ...) {
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


/* {===== emission (called by the binding while code runs) =====} */

/* A pinned child version is part of a start: the child would run different code. */
static int same_version(dx_turn_t *t, const dx_action_t *a, const dx_event_t *e) {
  if (same_str(a->version, e->version)) return 1;
  NONDET(t, "nondeterministic: %s %s at event %" PRIu64 " asked for version %s in history but "
            "the code now asks for version %s",
         dx__rp_kind_word(e->kind), e->name, e->event_id, e->version ? e->version : "(by policy)",
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
           dx__rp_kind_word(e->kind), e->event_id, e->name ? e->name : "-", dx__rp_kind_word(want),
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
               dx__rp_kind_word(e->kind), e->event_id, e->name, a->name);
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

int dx__rp_check_size(dx_turn_t *t, const char *what, const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n > DX_MAX_PAYLOAD_BYTES) {
    dx__rp_set_failure(t, DX_CAT_APPLICATION, "OrchestrationFailed",
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

void dx__rp_kv_put(dx_turn_t *t, const char *key, const char *value, int64_t ts) {
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
  if (e->kind == DX_EV_KV_SET) dx__rp_kv_put(t, e->name, e->data, e->timestamp_ms);
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
    if (!dx__rp_check_size(t, "continue_as_new input", a->input)) return DX_ETOOBIG;
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
  if (!dx__rp_check_size(t, "input", a->input)) return DX_ETOOBIG;
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
    e = dx__rp_append(t, action_event_kind(a->kind));
    if (!e || VEC_PUSH(t->sched, e->event_id) || VEC_PUSH(t->new_sched, e->event_id) ||
        !fill_new_event(t, e, a)) {
      dx__rp_set_failure(t, DX_CAT_INFRASTRUCTURE, "OutOfMemory", "out of memory in turn");
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
void dx__rp_cancel_outstanding(dx_turn_t *t, uint64_t id, const char *reason) {
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
    crumb = dx__rp_append(t, crumb_kind);
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
         dx__rp_kind_word(e->kind), e->name ? " " : "", e->name ? e->name : "", id);
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
  dx__rp_cancel_outstanding(t, token, "dropped_future");
}

/* The other direction, once the code has run past history: every future persisted history
** cancelled (dropped_future) the code must have cancelled again. A code that returned or
** continued-as-new drops what it still holds, so a future still pending then passes (the
** reference's drop-on-return). */
void dx__rp_check_cancels_replayed(dx_turn_t *t) {
  uint64_t id;
  int ended = t->run_state == DX_RUN_DONE || t->run_state == DX_RUN_CAN;
  /* without dropped_future breadcrumbs in history there is nothing to compare: a kept turn
  ** would otherwise walk its whole history again at every step */
  if (t->n_dropped_crumbs == 0) return;
  for (id = 1; id <= t->n_hist && id < t->slots.n && !t->fatal; id++) {
    const slot_t *s = &t->slots.v[id];
    const dx_event_t *e;
    if (!s->dropped_crumb || s->code_cancelled || (ended && s->state == DX_FUT_PENDING))
      continue;
    e = ev_at(t, id);
    NONDET(t, "nondeterministic: %s%s%s at event %" PRIu64 " was cancelled in history but "
              "the code no longer cancels it",
           dx__rp_kind_word(e->kind), e->name ? " " : "", e->name ? e->name : "", id);
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

int dx__rp_schedule_kind_for(int completion_kind) {
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
    if (e->source_id == src && dx__rp_schedule_kind_for(e->kind)) return 1;
  }
  return 0;
}

/* The latest cancel request from event `from` on (a kept turn saw none before), or NULL. */
const dx_event_t *dx__rp_cancel_request(dx_turn_t *t, uint64_t from) {
  const dx_event_t *cr = NULL;
  uint64_t id;
  for (id = from ? from : 1; id < next_id(t); id++)
    if (ev_at(t, id)->kind == DX_EV_ORCH_CANCEL_REQ) cr = ev_at(t, id);
  return cr;
}

static int has_cancel_request(dx_turn_t *t) { return dx__rp_cancel_request(t, t->indexed) != NULL; }

/* A queue message becomes an arrival event. */
static void convert_queue_message(dx_turn_t *t, const dx_work_item_t *m) {
  dx_event_t *e = dx__rp_append(t, DX_EV_QUEUE_EVENT);
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
void dx__rp_convert_batch(dx_turn_t *t) {
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
      if (sched->kind != dx__rp_schedule_kind_for(ck)) {
        NONDET(t, "nondeterministic: completion kind mismatch for event %" PRIu64
                  " (a %s was scheduled there)",
               m->id, dx__rp_kind_word(sched->kind));
        return;
      }
      if (has_completion(t, m->id)) continue;            /* duplicate delivery */
      e = dx__rp_append(t, ck);
      if (!e) return;
      e->source_id = m->id;
      e->data = m->data; /* borrowed, then copied into the event's own arena */
      e->fire_at_ms = m->fire_at_ms;
      e->worker_id = m->worker_id;
      e->fail = m->fail;
      if (dx__event_own(e) != DX_OK) t->oom = 1;
    } else if (m->kind == DX_WI_EXTERNAL) {
      e = dx__rp_append(t, DX_EV_EXT_EVENT);
      if (!e) return;
      e->name = dx__strdup(m->name);
      e->data = dx__strdup(m->data ? m->data : "null");
    } else if (m->kind == DX_WI_CANCEL) {
      if (has_cancel_request(t)) continue;
      e = dx__rp_append(t, DX_EV_ORCH_CANCEL_REQ);
      if (!e) return;
      e->reason = dx__strdup(m->reason ? m->reason : "cancelled");
    }
  }
}

/* {===== the walk =====} */

void dx__rp_resume(dx_turn_t *t) {
  if (t->run_state != DX_RUN_PENDING || t->fatal) return;
  t->park.n = 0; /* the host parks the code again if it suspends in a library wait */
  t->run_state = t->host->orch_resume(t->host_ud, t->inst, t);
}

int dx__turn_park(dx_turn_t *t, const uint64_t *tokens, size_t n) {
  size_t i;
  t->park.n = 0;
  for (i = 0; i < n; i++)
    if (VEC_PUSH(t->park, tokens[i])) {
      t->park.n = 0; /* unparked: every event resumes it */
      return DX_ENOMEM;
    }
  return DX_OK;
}

/* An event changed a future: resume the code unless it is parked on futures of which one is
** still pending. Resuming it then would only let it poll that future and suspend again, so
** the skip changes nothing the code does, on a replay the same as in a live turn. */
static void wake(dx_turn_t *t) {
  size_t i;
  for (i = 0; i < t->park.n; i++)
    if (dx_turn_poll(t, t->park.v[i], NULL, NULL, NULL) == DX_FUT_PENDING) return;
  dx__rp_resume(t);
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

void dx__rp_apply(dx_turn_t *t, uint64_t id) {
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
               dx__rp_kind_word(ev_at(t, e->source_id)->kind), e->source_id);
        return;
      }
      if (e->kind == DX_EV_ACT_FAILED || e->kind == DX_EV_SUB_FAILED) {
        if (e->fail.category != DX_CAT_APPLICATION) {
          /* Infrastructure, configuration and poison failures never reach user code. */
          t->fatal = 0;
          dx__rp_set_failure(t, e->fail.category, e->fail.kind, "%s",
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
      wake(t);
      break;
    case DX_EV_EXT_EVENT:
      if (deliver_external(t, e, id)) wake(t);
      break;
    case DX_EV_QUEUE_EVENT:
      if (deliver_queue(t, e)) wake(t);
      break;
    default:
      break;
  }
}

