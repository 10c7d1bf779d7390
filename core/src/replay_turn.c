/*
** replay_turn.c -- one orchestration turn from entry to commit: picking the execution the turn
** works on, running the code over history and the batch, finishing (work items, terminal
** events, carry-forward, the ack), and kept turns for the orchestration cache (orch_cache.c).
** The replay engine it drives (matching, queues, cancellation, the walk) is replay.c.
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

/* {===== finishing =====} */

/* The arena of a work item whose strings are the turn's own (its instance id, its events'
** strings): the ack is read by the provider while the turn lives, and nothing else keeps it,
** so an activity's item need not copy them (~650 instructions an item, with its free). Such
** an item is not cleared (free_turn_output). */
static char borrowed_strings;

static void item_clear(dx_work_item_t *w) {
  if (w->arena != &borrowed_strings) dx_work_item_clear(w);
}

static void add_item(dx_turn_t *t, int to_worker, dx_work_item_t *w) {
  if (to_worker ? VEC_PUSH(t->worker_items, *w) : VEC_PUSH(t->orch_items, *w)) {
    item_clear(w);
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
        w.instance = t->instance; /* all borrowed from the turn (borrowed_strings) */
        w.execution_id = t->exec;
        w.id = e->event_id;
        w.name = e->name;
        w.data = e->data;
        w.session_id = e->session_id;
        w.tag = e->tag;
        w.worker_id = s ? (char *)s->expect_owner : NULL;
        w.arena = &borrowed_strings;
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
  for (i = 0; i < t->sched.n; i++) dx__rp_cancel_outstanding(t, t->sched.v[i], reason);
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
    e = dx__rp_append(t, DX_EV_ORCH_COMPLETED);
    if (e) e->data = dx__strdup(t->output);
    t->ack.output = t->output;
    notify_parent(t, 1);
  } else if (status == DX_STATUS_FAILED) {
    e = dx__rp_append(t, DX_EV_ORCH_FAILED);
    if (e) dx_failure_copy(&e->fail, &t->failure);
    t->ack.failure = &t->failure;
    notify_parent(t, 0);
  } else {
    dx_work_item_t w;
    e = dx__rp_append(t, DX_EV_ORCH_CAN);
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
    if ((dx__rp_schedule_kind_for(e->kind) || is_crumb_kind(e->kind)) &&
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
      if (s && id <= t->n_hist && !s->dropped_crumb && same_str(e->reason, "dropped_future")) {
        s->dropped_crumb = 1;
        t->n_dropped_crumbs++;
      }
    } else if (dx__rp_schedule_kind_for(e->kind)) {
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
  e = dx__rp_append(t, DX_EV_ORCH_STARTED);
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
    dx__rp_kv_put(t, t->item->kv[i].key, t->item->kv[i].value, t->item->kv[i].updated_ms);
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
      dx__rp_set_failure(t, DX_CAT_APPLICATION, "Panicked", "%s", err.msg);
      return;
    }
    t->cursor = 1;
    dx__rp_resume(t);
    id = 2;
  }
  for (; id < end && !t->fatal; id++) {
    t->cursor = id;
    dx__rp_apply(t, id);
  }
  t->cursor = next_id(t);
  if (t->fatal || t->run_state == DX_RUN_FAILED) return;
  if (t->emitted < t->n_sched_known) {
    const dx_event_t *e = ev_at(t, t->sched.v[t->emitted]);
    NONDET(t, "nondeterministic: history has a %s%s%s at event %" PRIu64
              " that the code no longer schedules",
           dx__rp_kind_word(e->kind), e->name ? " " : "", e->name ? e->name : "", e->event_id);
  }
  dx__rp_check_cancels_replayed(t);
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
    dx__rp_set_failure(t, DX_CAT_POISON, "FailedDeserialization",
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
    dx__rp_set_failure(t, DX_CAT_POISON, "Poison",
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
    dx__rp_set_failure(t, DX_CAT_CONFIGURATION, "Unregistered",
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
  dx__rp_convert_batch(t);
  index_history(t);
  if (t->fatal) goto terminal;
  if ((cr = dx__rp_cancel_request(t, first)) != NULL) {
    /* The code does not see the batch, but what it saw before decides what is outstanding
    ** (a delivered wait is not): a fresh turn replays history up to the batch, so it cancels
    ** exactly what a kept turn's code left open. A new instance's code never runs. */
    if (!t->inst && t->n_hist > 0) run_code(t, 0, batch);
    if (!t->fatal)
      dx__rp_set_failure(t, DX_CAT_APPLICATION, "Cancelled", "canceled: %s",
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
    if (!t->failure.message) dx__rp_set_failure(t, DX_CAT_APPLICATION, "OrchestrationFailed",
                                         "orchestration failed");
    finish_terminal(t, DX_STATUS_FAILED);
  } else if (t->run_state == DX_RUN_CAN) {
    finish_terminal(t, DX_STATUS_CONTINUED_AS_NEW);
  } else if (t->run_state == DX_RUN_DONE) {
    if (!t->output) t->output = dx__strdup("null");
    if (!dx__rp_check_size(t, "output", t->output)) finish_terminal(t, DX_STATUS_FAILED);
    else finish_terminal(t, DX_STATUS_COMPLETED);
  } else {
    emit_work(t, 0, 0);
  }
}

static dx_turn_t *turn_end(dx_turn_t *t);
static void take_vectors(dx_turn_t *t);

dx_turn_t *dx__turn_run(const dx_orch_item_t *item, const dx_turn_cfg_t *cfg,
                        const dx_host_methods_t *host, void *host_ud) {
  dx_turn_t *t = calloc(1, sizeof *t);
  if (!t) return NULL;
  t->item = item;
  t->cfg = cfg;
  t->host = host;
  t->host_ud = host_ud;
  t->run_state = DX_RUN_PENDING;
  t->spares = cfg->spares;
  take_vectors(t);
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

/* {===== the turn's vectors' first blocks (dx_turn_spares_t) =====} */

/* Records in a kept first block: a capacity dx__rp_grow also reaches (4, 8, ...). Kept blocks
** are reused, not malloc'ed per turn, so they may be larger than dx__rp_grow's first: 8 holds a
** turn that schedules a fan-out of 5-8 without a realloc (copy) of each vector. */
#define SPARE_RECORDS 8

/* Blocks kept of each kind: as many as turns a worker runs at once by default
** (orchestration_concurrency, 256), so a delivery of that many turns finds a block for each:
** with 64, a chain of 200 instances calloc'ed (zeroed) and freed ~3 blocks in most turns. At
** most 256 * 2.75 KiB stay kept after such a peak. */
#define SPARE_BLOCKS 256

void dx__turn_spares_init(dx_turn_spares_t *s) {
  dx__spare_init(&s->events, SPARE_RECORDS * sizeof(dx_event_t), SPARE_BLOCKS);
  dx__spare_init(&s->items, SPARE_RECORDS * sizeof(dx_work_item_t), SPARE_BLOCKS);
  dx__spare_init(&s->ids, SPARE_RECORDS * sizeof(uint64_t), SPARE_BLOCKS);
}

void dx__turn_spares_drain(dx_turn_spares_t *s) {
  dx__spare_drain(&s->events);
  dx__spare_drain(&s->items);
  dx__spare_drain(&s->ids);
}

/* An empty vector takes a kept first block (unzeroed: VEC_PUSH writes each record whole),
** else a new one from malloc (calloc's zeroing of 1.3 KiB would be wasted). */
static void take_first(dx__spare_t *sp, void **v, size_t *cap) {
  if (*cap == 0 && (*v = sp->head ? dx__spare_calloc_head(sp, 0) : malloc(sp->size)) != NULL)
    *cap = SPARE_RECORDS;
}

/* Give a vector's block back: a first-size block to the spares sp (NULL: none), another to
** free. */
static void give_back(dx__spare_t *sp, void *v, size_t cap) {
  if (sp && cap == SPARE_RECORDS) dx__spare_free(sp, v);
  else free(v);
}

/* Before the code runs: the vectors most turns fill start with kept blocks. */
static void take_vectors(dx_turn_t *t) {
  if (!t->spares) return;
  take_first(&t->spares->events, (void **)&t->delta.v, &t->delta.cap);
  take_first(&t->spares->items, (void **)&t->worker_items.v, &t->worker_items.cap);
  take_first(&t->spares->ids, (void **)&t->new_sched.v, &t->new_sched.cap);
}

/* The turn's own output: the items of its commit and its per-turn vectors (the new events'
** strings are not freed here: a kept turn has moved them into its history). */
static void free_turn_output(dx_turn_t *t) {
  dx_turn_spares_t *sp = t->spares;
  size_t i;
  for (i = 0; i < t->worker_items.n; i++) item_clear(&t->worker_items.v[i]);
  for (i = 0; i < t->orch_items.n; i++) item_clear(&t->orch_items.v[i]);
  give_back(sp ? &sp->events : NULL, t->delta.v, t->delta.cap);
  give_back(sp ? &sp->items : NULL, t->worker_items.v, t->worker_items.cap);
  free(t->orch_items.v);
  free(t->cancelled.v);
  give_back(sp ? &sp->ids : NULL, t->new_sched.v, t->new_sched.cap);
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
  t->spares = cfg->spares;
  take_vectors(t);
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
  free(t->park.v);
  free(t);
}
