/*
** runtime.c -- a worker runtime: the orchestration and activity dispatchers on one loop.
**
** Items arrive from the store thread in batches. Orchestration turns run at once on the loop
** (they are pure computation over history) and their commits are queued back to the store
** thread; activities start as host coroutines and are acknowledged when they finish.
** Capacity is a budget handed to the store thread: a slot is returned when its item's
** commit has been applied.
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duroxide.h"
#include "codec.h"
#include "credit.h"
#include "embedding.h"
#include "log.h"
#include "metrics.h"
#include "options.h"
#include "orch_cache.h"
#include "providers/registry.h"
#include "replay.h"
#include "heap.h"
#include "sessions.h"
#include "store.h"
#include "syscalls.h"
#include "util.h"
#include "wake.h"
#include "watchdog.h"

/* How long a local store's cycle waits for the turns it fetched, so their acks share its
** commit (store.h hold_ms): a turn's usual loop time plus a thread wake-up, with room. */
#define DX__TURN_HOLD_MS 2

typedef struct runtime_list_s {
  dx_runtime_t *rt;
  struct runtime_list_s *next;
} runtime_list_t;

#include "runtime_int.h"

static uv_mutex_t registry_mu;
static uv_once_t registry_once = UV_ONCE_INIT;
static runtime_list_t *registry;

static void registry_init(void) { uv_mutex_init(&registry_mu); }

const char *dx_version(void) { return "0.1.0"; }

/* {===== orchestration dispatcher =====} */

/* Keep a turn in the cache (dx__turn_keep: its ack's memory goes back to the turn); 1 when
** kept (the turn then belongs to the cache). */
static int keep_turn(dx_runtime_t *rt, turn_job_t *job) {
  if (!rt->ocache || rt->stopping || !job->turn || !dx__turn_keepable(job->turn) ||
      dx__turn_keep(job->turn, job->item) != DX_OK)
    return 0;
  dx__ocache_put(rt->ocache, job->turn);
  job->turn = NULL;
  return 1;
}

static void expect_end(dx_runtime_t *rt, turn_job_t *job) {
  if (job->expected) dx__ocache_expect_end(rt->ocache, job->item->instance);
  job->expected = 0;
}

/* The turn's ack was applied in a transaction that stays open while the store hands this loop
** more items, maybe the instance's next turn (store.h op->applied): keep the turn now, so that
** turn continues it instead of replaying the history. Counted now (its ack is gone after the
** keep); turn_committed drops the copy if the transaction is lost. */
static void turn_applied(dx_store_op_t *op) {
  turn_job_t *job = op->ud;
  dx_runtime_t *rt = job->rt;
  if (!rt->ocache || rt->stopping || !job->turn || !dx__turn_keepable(job->turn)) return;
  dx__observe_turn(rt->metrics, job->item, op->ack, 0, dx__now_ms(),
                   dx__turn_started_ms(job->turn));
  job->kept_early = 1;
  if (!keep_turn(rt, job)) { /* its ack may be half taken back: nobody reads it any more */
    dx__turn_free(job->turn);
    job->turn = NULL;
  }
  expect_end(rt, job);
}

static void turn_committed(dx_store_op_t *op) {
  turn_job_t *job = op->ud;
  dx_runtime_t *rt = job->rt;
  if (op->rc != 0)
    dx__log(DX_LOG_WARN, "orchestration commit failed; the turn will be retried",
            "instance=%s error=\"%s\"", job->item->instance, op->err.msg);
  if (job->kept_early && op->rc != 0) {
    /* kept ahead of a commit that was lost: the store's history is shorter (a later turn of
    ** the same transaction, continued from this copy, was lost with it too) */
    dx__ocache_drop(rt->ocache, job->item->instance);
  } else if (!job->kept_early) {
    dx__observe_turn(rt->metrics, job->item, job->acked ? op->ack : NULL, op->rc, dx__now_ms(),
                     job->turn ? dx__turn_started_ms(job->turn) : 0);
  }
  /* Only a committed turn is kept: an abandoned or refused one is ahead of the store. */
  if (job->acked && op->rc == 0) keep_turn(rt, job);
  expect_end(rt, job);
  dx__turn_free(job->turn);
  dx__store_give_orch(rt->store, job->item); /* freed on the thread that made it */
  dx__spare_free(&rt->spare_jobs, job);
  if (!rt->stopping) dx__store_want(rt->store, 1, 0);
}

/* Another worker wrote times (history timestamps) in our future: its clock runs ahead of ours
** (or ours behind). Leases and timers assume synchronised clocks, so say so, once a minute. */
static void check_clock_skew(dx_runtime_t *rt, const dx_orch_item_t *item, int64_t now) {
  int64_t newest = now;
  size_t i;
  for (i = item->history_len; i > 0 && i + 8 > item->history_len; i--) /* the newest events */
    if (item->history[i - 1].timestamp_ms > newest) newest = item->history[i - 1].timestamp_ms;
  /* newest >= now here, and both are real times: no overflow */
  if (newest - now <= 1000 || now - rt->skew_warned_ms < 60000) return;
  rt->skew_warned_ms = now;
  dx__log(DX_LOG_WARN, "the store holds times ahead of this worker's clock: clocks are not "
          "synchronised (leases, locks and timers assume they are)",
          "instance=%s ahead_ms=%" PRId64 " worker_id=%s", item->instance, newest - now,
          rt->worker_id);
}

/* Queue the fetched item's settlement: the turn's commit (ack), or the item handed back,
** visible again after delay_ms. */
static void settle_turn(dx_runtime_t *rt, turn_job_t *job, int ack, int64_t delay_ms,
                        int ignore_attempt) {
  job->op.ud = job;
  job->op.done = turn_committed;
  if (ack) {
    job->op.kind = DX_OP_ACK_ORCH;
    job->op.ack = dx__turn_ack(job->turn);
    job->op.applied = rt->ocache ? turn_applied : NULL;
    job->acked = 1;
    /* a fetch of the instance's next turn before the loop kept this one reads the last event
    ** only (a long orchestration's steps would each read the whole history) */
    if (rt->ocache && job->turn && dx__turn_keepable(job->turn))
      job->expected = dx__ocache_expect(rt->ocache, job->item->instance,
                                        dx_turn_execution(job->turn),
                                        dx__turn_history_len(job->turn));
  } else {
    job->op.kind = DX_OP_ABANDON_ORCH;
    job->op.instance = job->item->instance;
    job->op.token = job->item->lock_token;
    job->op.delay_ms = delay_ms;
    job->op.ignore_attempt = ignore_attempt;
  }
  dx__store_submit(rt->store, &job->op);
}

static void cache_missed(dx_runtime_t *rt, const dx_orch_item_t *item, const char *why) {
  if (!why) return;
  dx__metric_add(rt->metrics, DXM_OCACHE_MISSES, DXM_LABELS(why), 1);
  dx__log(DX_LOG_DEBUG, "orchestration cache miss: replaying history", "instance=%s reason=%s",
          item->instance, why);
}

/* The instance's kept turn when it holds exactly the fetched history (a hit), else NULL (a
** miss: a stale copy is dropped). A redelivery (attempt > 1) always replays: the poison count
** and whatever made the previous delivery fail are the fresh turn's business. */
static dx_turn_t *cached_turn(dx_runtime_t *rt, dx_orch_item_t *item) {
  dx_turn_t *kept;
  const char *why = NULL;
  if (!rt->ocache) return NULL;
  kept = dx__ocache_take(rt->ocache, item->instance);
  if (kept && item->attempt_count <= 1 && dx__turn_matches(kept, item)) return kept;
  if (kept) why = item->attempt_count > 1 ? "retry" : "stale";
  else if (item->history_held) why = "refetch";
  else if (dx__item_continues(item)) why = "absent";
  cache_missed(rt, item, why);
  dx__turn_free(kept);
  return NULL;
}

static void run_turn(dx_runtime_t *rt, dx_orch_item_t *item) {
  turn_job_t *job = dx__spare_calloc(&rt->spare_jobs);
  dx_turn_t *kept;
  dx_turn_cfg_t cfg;
  uint64_t t0;
  if (!job) {
    dx_orch_item_free(item); /* the lock expires and the item comes back */
    return;
  }
  memset(&cfg, 0, sizeof cfg);
  cfg.now_ms = dx__now_ms();
  check_clock_skew(rt, item, cfg.now_ms);
  cfg.max_attempts = rt->opts.max_attempts;
  cfg.unregistered_base_ms = rt->opts.unregistered_base_ms;
  cfg.unregistered_max_ms = rt->opts.unregistered_max_ms;
  cfg.worker_id = rt->worker_id;
  cfg.instruction_budget = rt->opts.turn_instruction_budget;
  cfg.time_limit_ms = rt->opts.turn_time_limit_ms;
  job->rt = rt;
  job->item = item;
  cfg.keep = rt->ocache != NULL;
  cfg.spares = &rt->turn_spares;
  dx__metric_add(rt->metrics, DXM_ORCH_FETCHED_EVENTS, DXM_NOLABELS, (double)item->history_len);
  kept = cached_turn(rt, item);
  dx__watch_enter_text(rt->loop, "orchestration turn of instance ", item->instance);
  t0 = uv_hrtime();
  if (kept && !(job->turn = dx__turn_continue(kept, item, &cfg))) {
    cache_missed(rt, item, "code"); /* re-registered: the registered code replays */
    dx__turn_free(kept);
    kept = NULL;
  } else if (kept) {
    dx__metric_add(rt->metrics, DXM_OCACHE_HITS, DXM_NOLABELS, 1);
  }
  if (!kept && item->history_held) {
    dx__watch_leave(rt->loop);
    /* The store sent only the last event, for a copy this worker no longer has (evicted since
    ** the fetch) or that does not match: fetch again, with the whole history. */
    settle_turn(rt, job, 0, 0, 1);
    return;
  }
  if (!kept) job->turn = dx__turn_run(item, &cfg, rt->host, rt->host_ud);
  dx__metric_observe(rt->metrics, DXM_ORCH_TURN_DURATION, DXM_NOLABELS, dx__seconds_since(t0));
  dx__watch_leave(rt->loop);
  if (dx__item_continues(item) && !kept) {
    dx__metric_add(rt->metrics, DXM_ORCH_REPLAYS, DXM_NOLABELS, 1);
    dx__metric_add(rt->metrics, DXM_ORCH_REPLAYED_EVENTS, DXM_NOLABELS,
                   (double)item->history_len);
  }
  if (!job->turn) settle_turn(rt, job, 0, 100, 0);
  else if (dx__turn_action(job->turn) == DX_TURN_ABANDON)
    settle_turn(rt, job, 0, dx__turn_abandon_delay(job->turn), 0);
  else settle_turn(rt, job, 1, 0, 0);
}

/* {===== activity dispatcher =====} */

/* The fields every activity record starts with, and their arguments (session_id is left out
** of the record when the activity has no session). */
#define ACT_FIELDS "instance=%s activity=%s id=%" PRIu64 " session_id=%s"
#define ACT_ARGS(a) (a)->item.instance, (a)->item.name, (a)->item.id, (a)->item.session_id

/* duroxide_activities_running follows n_running; a delivery that starts (and often ends) many
** activities sets it once, when it is done. */
static void running_changed(dx_runtime_t *rt) {
  if (!rt->in_fetch) dx__metric_set(rt->metrics, DXM_ACT_RUNNING, DXM_NOLABELS, rt->n_running);
}

static void activity_unlink(dx_activity_t *a) {
  dx_runtime_t *rt = a->rt;
  if (a->prev) a->prev->next = a->next;
  else if (rt->running == a) rt->running = a->next;
  if (a->next) a->next->prev = a->prev;
  a->prev = a->next = NULL;
  rt->n_running--;
  running_changed(rt);
}

/* Free the result's texts, those it borrows excepted (dx__activity_complete_take). */
static void result_clear(dx_activity_t *a) {
  if (a->result_borrows) { /* data is its one text of its own (result_base, complete_take) */
    if (a->result.data != a->out_inline) free(a->result.data);
    memset(&a->result, 0, sizeof a->result);
    a->result_borrows = 0;
    return;
  }
  dx_work_item_clear(&a->result);
}

static void activity_release(dx_activity_t *a) {
  dx__store_give_work(a->rt->store, &a->item); /* freed on the thread that made it */
  result_clear(a);
  dx__spare_free(&a->rt->spare_acts, a);
}

/* Freed once its settlement is applied, its renewal settled and its timer closed. */
static void try_free(dx_activity_t *a) {
  if (a->acked && !a->renew_inflight && a->timer_closed) activity_release(a);
}

static void on_renew_timer_closed(uv_handle_t *h) {
  dx_activity_t *a = h->data;
  a->timer_closed = 1;
  try_free(a);
}

static void renew_timer_close(dx_activity_t *a) {
  if (a->timer_on) {
    uv_close((uv_handle_t *)&a->renew_timer, on_renew_timer_closed);
  } else {
    a->timer_closed = 1;
    try_free(a);
  }
}

static void check_stop_done(dx_runtime_t *rt);

static void cache_open(dx_runtime_t *rt);
static void cache_close(dx_runtime_t *rt);

/* Ask the store for activities the loop can start now (credit.h). */
static void ask_for_activities(dx_runtime_t *rt) {
  int more = rt->stopping ? 0 : dx__credit_top_up(&rt->credit);
  if (more > 0) dx__store_want(rt->store, 0, more);
}

static void activity_acked(dx_store_op_t *op) {
  dx_activity_t *a = op->ud;
  dx_runtime_t *rt = a->rt;
  if (a->outcome) /* a refused settlement changed nothing: the delivery's result is lost */
    dx__metric_add(rt->metrics, DXM_ACT_EXECUTIONS,
                   DXM_LABELS(a->item.name, op->rc ? "lost" : a->outcome), 1);
  if (op->rc == DX_ELOCK || op->rc == DX_ETOKEN)
    dx__log(DX_LOG_WARN, "activity result not recorded (lock lost: cancelled or expired)",
            ACT_FIELDS " error=\"%s\"", ACT_ARGS(a), op->err.msg);
  else if (op->rc != 0) /* the store refused it: say why; the row runs again after its lock */
    dx__log(DX_LOG_WARN, "activity result not recorded (store error)",
            ACT_FIELDS " error=\"%s\"", ACT_ARGS(a), op->err.msg);
  a->acked = 1;
  dx__credit_settled(&rt->credit);
  ask_for_activities(rt);
  renew_timer_close(a);
  check_stop_done(rt);
}

/* 1 when the activity's session hold ended here (lost, aborted) or lapsed: fenced. */
static int session_fenced(const dx_activity_t *a) {
  return a->item.session_id && a->rt->sessions &&
         dx__sessions_fenced(a->rt->sessions, a->item.session_id, a->sess_gen);
}

/* Queue the row's settlement: ack with a completion, ack without, or abandon. outcome: the
** duroxide_activity_executions_total label it is counted under once applied (NULL: none). */
static void activity_settle(dx_activity_t *a, int kind, int64_t delay_ms, int ignore_attempt,
                            const char *outcome) {
  dx_runtime_t *rt = a->rt;
  int fenced = 0;
  if (a->finished) return;
  a->finished = 1;
  /* the session's bookkeeping, and whether our hold ended, from one clock reading */
  if (a->item.session_id && rt->sessions)
    fenced = dx__sessions_settle(rt->sessions, a->item.session_id, a->sess_gen,
                                 kind == DX_OP_ACK_WORK && a->item.kind != DX_WI_SESSION_CLOSE);
  if (kind == DX_OP_ACK_WORK && a->item.kind != DX_WI_SESSION_CLOSE && fenced) {
    /* Our hold on the session ended (a stall let another worker claim it, or an abort): the
    ** result is not ours to give; the row goes back (the store would refuse the ack anyway
    ** once another worker claimed) and the session's next owner runs it. */
    dx__log(DX_LOG_WARN, "activity result discarded: its session was lost or aborted here",
            "instance=%s activity=%s id=%" PRIu64 " session_id=%s", a->item.instance,
            a->item.name, a->item.id, a->item.session_id);
    result_clear(a);
    kind = DX_OP_ABANDON_WORK;
    delay_ms = 0;
    ignore_attempt = 0;
    outcome = "fenced";
  }
  a->outcome = outcome;
  if (a->timer_on) uv_timer_stop(&a->renew_timer);
  activity_unlink(a);
  memset(&a->op, 0, sizeof a->op);
  a->op.kind = kind;
  a->op.token = a->token;
  a->op.item = a->result.kind ? &a->result : NULL;
  a->op.delay_ms = delay_ms;
  a->op.ignore_attempt = ignore_attempt;
  a->op.done = activity_acked;
  a->op.ud = a;
  dx__store_submit(rt->store, &a->op);
}

/* The activity's code ran to an end (a result or an application failure): how long it took. */
static void observe_ran(dx_activity_t *a) {
  dx__metric_observe(a->rt->metrics, DXM_ACT_DURATION, DXM_LABELS(a->item.name),
                     dx__seconds_since(a->started_hr));
}

/* The result's fields, borrowed: result_own then copies them into the result's arena. */
static void result_base(dx_activity_t *a, int kind) {
  a->result.kind = kind;
  a->result.instance = a->item.instance;
  a->result.execution_id = a->item.execution_id;
  a->result.id = a->item.id;
  /* history shows where each session activity ran (issue 9 item 7) */
  if (a->item.session_id) a->result.worker_id = a->rt->worker_id;
}

static void result_own(dx_activity_t *a) {
  dx__work_item_own(&a->result); /* out of memory: fields NULL, as a failed strdup left them */
}

void dx_activity_complete(dx_activity_t *a, const char *output_json) {
  if (!a || a->finished) return;
  /* out of memory: a NULL data, as a failed copy into the result's arena left it */
  dx__activity_complete_take(a, dx__strdup(output_json ? output_json : "null"));
}

char *dx__activity_out_buf(dx_activity_t *a, size_t *cap) {
  *cap = sizeof a->out_inline;
  return a->out_inline;
}

void dx__activity_complete_take(dx_activity_t *a, char *output_json) {
  size_t n = output_json ? strlen(output_json) : 0;
  if (!a || a->finished) {
    if (!a || output_json != a->out_inline) free(output_json);
    return;
  }
  dx__log_set_worker(a->rt->worker_id); /* called from activity code: say whose */
  if (n > DX_MAX_PAYLOAD_BYTES) {
    char msg[160];
    snprintf(msg, sizeof msg, "activity output is %zu bytes; the limit is %d bytes", n,
             DX_MAX_PAYLOAD_BYTES);
    if (output_json != a->out_inline) free(output_json);
    dx_activity_fail(a, msg);
    return;
  }
  observe_ran(a);
  result_base(a, DX_WI_ACT_COMPLETED);
  /* The instance (a->item's) and worker id (rt's) outlive the result (freed with `a`): borrowed,
  ** and the output is taken (or borrowed: out_inline), not copied into an arena (~430
  ** instructions per activity). */
  a->result.data = output_json;
  a->result_borrows = 1;
  dx__log(DX_LOG_DEBUG, "activity completed", ACT_FIELDS, ACT_ARGS(a));
  activity_settle(a, DX_OP_ACK_WORK, 0, 0, "success");
}

static void fail_with(dx_activity_t *a, int category, const char *kind, const char *message) {
  result_base(a, DX_WI_ACT_FAILED);
  a->result.fail.category = category;
  a->result.fail.kind = (char *)kind;
  a->result.fail.message = (char *)(message ? message : "activity failed");
  result_own(a);
  activity_settle(a, DX_OP_ACK_WORK, 0, 0,
                  category == DX_CAT_POISON          ? "poison"
                  : category == DX_CAT_CONFIGURATION ? "config_error"
                  : category == DX_CAT_APPLICATION   ? "app_error"
                                                     : "infra_error");
}

void dx_activity_fail(dx_activity_t *a, const char *message) {
  if (!a || a->finished) return;
  dx__log_set_worker(a->rt->worker_id);
  dx__log(DX_LOG_INFO, "activity failed (application error)", ACT_FIELDS " error=\"%s\"",
          ACT_ARGS(a), message ? message : "");
  observe_ran(a);
  fail_with(a, DX_CAT_APPLICATION, "ActivityFailed", message);
}

const dx_activity_info_t *dx_activity_info(const dx_activity_t *a) { return &a->info; }
int dx_activity_is_cancelled(const dx_activity_t *a) { return a->cancelled || session_fenced(a); }

int dx_activity_abort_session(dx_activity_t *a, const char *reason, dx_error_t *err) {
  if (!a || a->finished) return dx_error_set(err, DX_ESTATE, "the activity has finished");
  if (!a->item.session_id)
    return dx_error_set(err, DX_EINVAL, "activity %s (instance %s) does not run on a session: "
                        "nothing to abort", a->item.name, a->item.instance);
  if (reason && strlen(reason) > DX_MAX_REASON_BYTES)
    return dx_error_set(err, DX_ETOOBIG, "abort reason is %zu bytes; the limit is %d bytes",
                        strlen(reason), DX_MAX_REASON_BYTES);
  if (!a->rt->sessions)
    return dx_error_set(err, DX_ESTATE, "this worker holds no sessions");
  return dx__sessions_abort(a->rt->sessions, a->item.session_id, a->sess_gen, reason, err);
}
void dx_activity_set_userdata(dx_activity_t *a, void *ud) { a->userdata = ud; }
void *dx_activity_userdata(const dx_activity_t *a) { return a->userdata; }


static void renew_done(dx_store_op_t *op) {
  dx_activity_t *a = op->ud;
  a->renew_inflight = 0;
  if (op->rc != 0 && !a->finished) {
    /* The orchestration withdrew the activity (or the lease lapsed): tell the code. */
    a->cancelled = 1;
    dx__log(DX_LOG_INFO, "activity cancelled (lock lost)", ACT_FIELDS, ACT_ARGS(a));
  }
  try_free(a);
}

static void on_renew(uv_timer_t *h) {
  dx_activity_t *a = h->data;
  if (a->finished || a->renew_inflight) return;
  memset(&a->renew_op, 0, sizeof a->renew_op);
  a->renew_op.kind = DX_OP_RENEW_WORK;
  a->renew_op.token = a->token;
  a->renew_op.delay_ms = a->rt->opts.worker_lock_timeout_ms;
  a->renew_op.done = renew_done;
  a->renew_op.ud = a;
  a->renew_inflight = 1;
  dx__store_submit(a->rt->store, &a->renew_op);
}

static int hidden_activity(const dx_runtime_t *rt, const char *name) {
  size_t i;
  for (i = 0; i < rt->n_hidden; i++)
    if (strcmp(rt->hidden[i], name) == 0) return 1;
  return 0;
}

static void start_activity(dx_runtime_t *rt, dx_work_fetch_t *w, int64_t at_ms) {
  dx_activity_t *a = dx__spare_calloc_head(&rt->spare_acts, ACT_ZEROED);
  const dx__cact_t *cact;
  int64_t every, now = 0;
  if (!a) {
    dx_work_item_clear(&w->item);
    dx__credit_settled(&rt->credit); /* never settled in the store: its slot is free */
    return;
  }
  a->rt = rt;
  a->item = w->item; /* take ownership */
  memset(&w->item, 0, sizeof w->item);
  a->token = w->lock_token;
  a->info.instance = a->item.instance;
  a->info.execution_id = a->item.execution_id;
  a->info.activity_id = a->item.id;
  a->info.name = a->item.name;
  a->info.input = a->item.data;
  a->info.session_id = a->item.session_id;
  a->info.tag = a->item.tag;
  a->info.worker_id = rt->worker_id;
  a->info.attempt = w->attempt_count;
  a->next = rt->running;
  if (rt->running) rt->running->prev = a;
  rt->running = a;
  rt->n_running++;
  a->started_hr = uv_hrtime();
  running_changed(rt);
  if (a->item.session_id && rt->sessions) {
    now = dx__now_ms(); /* read once: the fence check before the start uses it too */
    a->sess_gen = dx__sessions_on_fetch_at(rt->sessions, a->item.session_id,
                                           w->session_claimed, w->previous_owner, at_ms, now);
  }
  if (w->session_claimed && rt->opts.session_wait_warning_ms > 0 &&
      w->waited_ms >= rt->opts.session_wait_warning_ms)
    dx__log(DX_LOG_WARN, "session work waited for a worker to claim its session (are all "
            "workers at max_sessions_per_worker?)", "session_id=%s instance=%s activity=%s "
            "waited_ms=%" PRId64 " previous_owner=%s worker_id=%s", a->item.session_id,
            a->item.instance, a->item.name ? a->item.name : "-", w->waited_ms,
            w->previous_owner ? w->previous_owner : "none", rt->worker_id);

  if (a->item.kind == DX_WI_SESSION_CLOSE) { /* not an activity: end the session here */
    activity_settle(a, DX_OP_ACK_WORK, 0, 0, NULL); /* first: the close item is not running */
    /* released once the session's running activities here finish (issue 9 item 5) */
    if (rt->sessions && a->item.session_id) dx__sessions_close(rt->sessions, a->item.session_id);
    return;
  }
  if (w->attempt_count > rt->opts.max_attempts) {
    char msg[512];
    snprintf(msg, sizeof msg, "poison: activity %s#%" PRIu64 " exceeded %u attempts (max %u)",
             a->item.name, a->item.id, w->attempt_count, rt->opts.max_attempts);
    dx__log(DX_LOG_ERROR, "activity poisoned", ACT_FIELDS " attempts=%u", ACT_ARGS(a),
            w->attempt_count);
    fail_with(a, DX_CAT_POISON, "Poison", msg);
    return;
  }
  if (a->item.kind == DX_WI_ACT_EXECUTE && a->item.session_id && a->item.worker_id &&
      strcmp(a->item.worker_id, rt->worker_id) != 0) {
    /* on_moved = "fail": the session moved since this instance's previous activity on it */
    char msg[700];
    snprintf(msg, sizeof msg, "session '%s' moved from worker '%s' to worker '%s': activity %s "
             "was not run", a->item.session_id, a->item.worker_id, rt->worker_id, a->item.name);
    dx__log(DX_LOG_INFO, "session activity refused (session moved)", "instance=%s activity=%s "
            "session_id=%s from=%s to=%s", a->item.instance, a->item.name, a->item.session_id,
            a->item.worker_id, rt->worker_id);
    fail_with(a, DX_CAT_APPLICATION, "SessionMoved", msg);
    return;
  }
  cact = dx__cact_find(rt, a->item.name);
  if ((!cact && !rt->host->activity_lookup(rt->host_ud, a->item.name)) ||
      hidden_activity(rt, a->item.name)) {
    if (a->item.session_id && rt->sessions && w->attempt_count < rt->opts.max_attempts) {
      /* Rolling upgrade: the session is pinned here, but this worker runs older code. Hand the
      ** session on (released "upgrade"; our fetches skip it for the backoff) so a worker that
      ** has the activity claims it; the row is visible again at once. */
      int64_t d = dx__unregistered_backoff(w->attempt_count, rt->opts.unregistered_base_ms,
                                           rt->opts.unregistered_max_ms);
      dx__log(DX_LOG_WARN, "activity not registered on this worker; handing its session to "
              "another worker", "instance=%s activity=%s session_id=%s attempt=%u "
              "declined_for_ms=%" PRId64, a->item.instance, a->item.name, a->item.session_id,
              w->attempt_count, d);
      dx__sessions_hand_on(rt->sessions, a->item.session_id, d); /* first: the decline */
      activity_settle(a, DX_OP_ABANDON_WORK, 0, 0, "retry_unregistered"); /* then the release, once nothing runs */
      return;
    }
    if (w->attempt_count < rt->opts.max_attempts) {
      int64_t d = dx__unregistered_backoff(w->attempt_count, rt->opts.unregistered_base_ms,
                                           rt->opts.unregistered_max_ms);
      dx__log(DX_LOG_WARN, "activity not registered; will retry",
              ACT_FIELDS " attempt=%u retry_in_ms=%" PRId64, ACT_ARGS(a), w->attempt_count, d);
      activity_settle(a, DX_OP_ABANDON_WORK, d, 0, "retry_unregistered");
    } else {
      char msg[512];
      snprintf(msg, sizeof msg, "activity '%s' is not registered (gave up after %u attempts)",
               a->item.name, w->attempt_count);
      fail_with(a, DX_CAT_CONFIGURATION, "Unregistered", msg);
    }
    return;
  }
  if (rt->stopping) {
    activity_settle(a, DX_OP_ABANDON_WORK, 0, 1, "handed_back"); /* fetched as we stopped */
    return;
  }
  if (a->item.session_id && rt->sessions &&
      dx__sessions_fenced_at(rt->sessions, a->item.session_id, a->sess_gen, now)) {
    /* lease lapsed (a stall), or released by us, since the fetch */
    dx__log(DX_LOG_WARN, "session activity not started: the session's lease lapsed or this "
            "worker released it since the fetch", "instance=%s activity=%s session_id=%s",
            a->item.instance, a->item.name, a->item.session_id);
    activity_settle(a, DX_OP_ABANDON_WORK, 0, 1, "handed_back");
    return;
  }
  dx__log(DX_LOG_DEBUG, "activity started", ACT_FIELDS " attempt=%u", ACT_ARGS(a),
          w->attempt_count);
  /* the loop time this start took (from the record's start: the checks above are a few
  ** hundred instructions): CPU-bound Lua work counts (credit.h) */
  if (cact) dx__cact_start(a, cact);
  else rt->host->activity_start(rt->host_ud, a);
  dx__credit_cost(&rt->credit, uv_hrtime() - a->started_hr);
  /* Still running: renew its lock. Started after the code's first step, in the same loop
  ** iteration: the loop's cached time (unless the code updated it) gives the due time a start
  ** before the step would have. A settlement is applied later (dx__store_submit queues), so
  ** `a` is alive here. */
  if (!a->finished) {
    every = dx__lock_renewal_interval(rt->opts.worker_lock_timeout_ms,
                                      rt->opts.worker_lock_renewal_buffer_ms);
    uv_timer_init(rt->loop, &a->renew_timer);
    a->renew_timer.data = a;
    a->timer_on = 1;
    uv_timer_start(&a->renew_timer, on_renew, (uint64_t)every, (uint64_t)every);
  }
}

static void on_fetch(void *ud, dx_store_fetched_t *f) {
  dx_runtime_t *rt = ud;
  size_t i;
  for (i = 0; i < f->n_orch; i++) {
    dx_orch_item_t *it = f->orch[i];
    f->orch[i] = NULL;
    run_turn(rt, it);
  }
  f->n_orch = 0;
  dx__credit_fetched(&rt->credit, (int)f->n_work);
  /* start_activity takes each item; free_fetched (after us) frees previous_owner strings */
  rt->in_fetch = f->n_work > 0;
  for (i = 0; i < f->n_work; i++) start_activity(rt, &f->work[i], f->at_ms);
  if (rt->in_fetch) {
    rt->in_fetch = 0;
    running_changed(rt);
  }
  ask_for_activities(rt);
}

/* {===== lifecycle =====} */

static char *make_worker_id(const dx_options_t *o) {
  char host[128] = "host", buf[256];
  if (o->worker_node_id) return dx__strdup(o->worker_node_id);
  gethostname(host, sizeof host - 1);
  snprintf(buf, sizeof buf, "%s-%d-%06" PRIx64, host, (int)getpid(),
           dx__random_u64() & 0xffffff);
  return dx__strdup(buf);
}

int dx_runtime_new(dx_runtime_t **out, uv_loop_t *loop, dx_provider_t *p,
                   const dx_options_t *opts, const dx_host_methods_t *host, void *host_ud,
                   dx_error_t *err) {
  dx_runtime_t *rt;
  int rc;
  if (!out || !loop || !p || !host) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *out = NULL;
  if (opts && (rc = dx_options_validate(opts, err)) != 0) return rc;
  rt = calloc(1, sizeof *rt);
  if (!rt) return dx_error_set(err, DX_ENOMEM, "out of memory");
  rt->loop = loop;
  rt->provider = p;
  dx__spare_init(&rt->spare_jobs, sizeof(turn_job_t), 256);
  dx__turn_spares_init(&rt->turn_spares);
  if (opts) rt->opts = *opts;
  else dx_options_init(&rt->opts);
  /* as many activity records kept as may run at once (up to 1024, 2 MB): a fan-out's burst
  ** of 1000 took malloc's slow path for each record past 256 */
  dx__spare_init(&rt->spare_acts, sizeof(dx_activity_t),
                 rt->opts.worker_concurrency < 1024 ? (size_t)rt->opts.worker_concurrency : 1024);
  rt->tag_filter.untagged = 1;
  if (rt->opts.tags && (rc = dx__tags_parse(rt->opts.tags, &rt->tag_filter, err)) != 0) {
    free(rt);
    return rc;
  }
  rt->opts.tags = rt->tags_text = dx__strdup(rt->opts.tags ? rt->opts.tags : "default");
  rt->worker_id = make_worker_id(&rt->opts);
  rt->metrics = dx__metrics_new();
  if (!rt->worker_id || !rt->metrics || !rt->tags_text) {
    dx__metrics_free(rt->metrics);
    free(rt->worker_id);
    free(rt->tags_text);
    dx__tags_free(&rt->tag_filter);
    free(rt);
    return dx_error_set(err, DX_ENOMEM, "out of memory");
  }
  dx__metric_set(rt->metrics, DXM_WORKER_INFO, DXM_LABELS(rt->worker_id, dx_version()), 1);
  dx__log_set_worker(rt->worker_id); /* this thread's JSON log records name the worker */
  rt->opts.worker_node_id = rt->worker_id;
  rt->host = host;
  rt->host_ud = host_ud;
  rt->skew_warned_ms = INT64_MIN / 2;
  rt->turn_hold_ms = DX__TURN_HOLD_MS;
  /* built-in: reads another instance's key-value state (ctx:get_kv_value_from_instance) */
  if ((rc = dx__cact_add(rt, DX_SYSCALL_GET_KV, dx__syscall_get_kv, p, DX_ACTIVITY_ON_POOL, err))) {
    dx_runtime_free(rt);
    return rc;
  }
  *out = rt;
  return DX_OK;
}

/* {===== process registry and cross-process wakeups =====} */

/* Runtimes of this process, so a client here can wake them after enqueueing. */
static void registry_add(dx_runtime_t *rt) {
  runtime_list_t *n = malloc(sizeof *n);
  uv_once(&registry_once, registry_init);
  if (!n) return;
  uv_mutex_lock(&registry_mu);
  n->rt = rt;
  n->next = registry;
  registry = n;
  uv_mutex_unlock(&registry_mu);
}

static void registry_remove(dx_runtime_t *rt) {
  runtime_list_t **pp;
  uv_once(&registry_once, registry_init);
  uv_mutex_lock(&registry_mu);
  for (pp = &registry; *pp; pp = &(*pp)->next) {
    if ((*pp)->rt == rt) {
      runtime_list_t *dead = *pp;
      *pp = dead->next;
      free(dead);
      break;
    }
  }
  uv_mutex_unlock(&registry_mu);
}

/* The provider lost its connection and re-established it: peers may have taken our sessions
** meanwhile, so check them now (the renewal reports the ones that are gone as lost). */
static void on_wake_lost(void *ud) {
  dx_runtime_t *rt = ud;
  dx__log(DX_LOG_WARN, "store connection was lost and re-established; checking sessions",
          "worker_id=%s", rt->worker_id);
  if (rt->sessions) dx__sessions_renew_now(rt->sessions);
}

/* Another process commits work: look for it at once instead of at the next poll. */
static void watch_start(dx_runtime_t *rt) {
  rt->watchdog = (rt->opts.loop_block_warning_ms > 0 || rt->opts.turn_time_limit_ms > 0) &&
                 dx__watchdog_attach(rt->loop, rt->opts.loop_block_warning_ms,
                                     rt->opts.turn_time_limit_ms) == 0;
  rt->wake = dx__wake_start(rt->loop, rt->provider, rt->store, on_wake_lost, rt);
}

static void watch_stop(dx_runtime_t *rt) {
  if (rt->watchdog) dx__watchdog_detach(rt->loop);
  rt->watchdog = 0;
  dx__wake_stop(rt->wake);
  rt->wake = NULL;
}

/* The store cannot be used any more: record why for the host (dx_runtime_error). */
static void on_store_fatal(void *ud, const dx_error_t *err) {
  dx_runtime_t *rt = ud;
  rt->failure = *err;
  rt->failed = 1;
  dx__log(DX_LOG_ERROR, "store unusable: the worker must stop", "error=\"%s\"", err->msg);
}

int dx_runtime_error(const dx_runtime_t *rt, dx_error_t *err) {
  if (!rt || !rt->failed) return 0;
  if (err) *err = rt->failure;
  return rt->failure.code ? rt->failure.code : DX_ESTORE;
}

/* Liveness (provider v5): one live process per worker id on a store; peers learn at once
** when it dies. Before the store thread exists, so the provider is ours alone here. */
static int worker_register(dx_runtime_t *rt, dx_error_t *err) {
  const dx_provider_methods_t *m = rt->provider->methods;
  int rc;
  if (m->version < 5 || !m->worker_register) return 0;
  rc = m->worker_register(rt->provider, rt->worker_id, dx__now_ms(), err);
  if (rc == 0) rt->registered = 1;
  else
    dx__log(DX_LOG_ERROR, "worker refused", "worker_id=%s error=\"%s\"", rt->worker_id,
            err ? err->msg : "");
  return rc;
}

/* After the store closed (no thread uses the provider any more). */
static void worker_unregister(dx_runtime_t *rt) {
  const dx_provider_methods_t *m = rt->provider->methods;
  if (!rt->registered) return;
  rt->registered = 0;
  if (m->version >= 5 && m->worker_unregister) m->worker_unregister(rt->provider, rt->worker_id);
}

int dx_runtime_start(dx_runtime_t *rt, dx_error_t *err) {
  dx_store_cfg_t cfg;
  int rc;
  if (!rt) return dx_error_set(err, DX_EINVAL, "NULL runtime");
  if (rt->stopping) return dx_error_set(err, DX_ECLOSED, "runtime is stopped");
  if (rt->started) return dx_error_set(err, DX_ESTATE, "runtime already started");
  dx__log_set_worker(rt->worker_id);
  dx__heap_prefault((size_t)rt->opts.heap_prefault); /* (this is the loop's thread) */
  memset(&cfg, 0, sizeof cfg);
  cfg.provider = rt->provider;
  cfg.heap_prefault = (size_t)rt->opts.heap_prefault;
  cfg.orch_lock_ms = rt->opts.orchestrator_lock_timeout_ms;
  cfg.turn_time_limit_ms = rt->opts.turn_time_limit_ms;
  cfg.work_lock_ms = rt->opts.worker_lock_timeout_ms;
  cfg.work_renew_ms = dx__lock_renewal_interval(rt->opts.worker_lock_timeout_ms,
                                       rt->opts.worker_lock_renewal_buffer_ms);
  cfg.poll_interval_ms = rt->opts.poll_interval_ms;
  cfg.hold_ms = rt->turn_hold_ms;
  cfg.hold_work = 1;
  cfg.on_fetch = on_fetch;
  cfg.on_fatal = on_store_fatal;
  cfg.ud = rt;
  cfg.tag_filter = &rt->tag_filter;
  cfg.host = rt->host;
  cfg.host_ud = rt->host_ud;
  cfg.metrics = rt->metrics;
  cfg.worker_id = rt->worker_id;
  if (rt->opts.max_sessions_per_worker > 0) {
    rt->session_cfg.worker_id = rt->worker_id;
    rt->session_cfg.session_lock_ms = rt->opts.session_lock_timeout_ms;
    rt->session_cfg.max_sessions = (uint32_t)rt->opts.max_sessions_per_worker;
    cfg.sessions = &rt->session_cfg;
    cfg.session_renew_ms = dx__sessions_renew_every(&rt->opts);
    cfg.session_idle_ms = rt->opts.session_idle_timeout_ms;
  }
  if ((rc = worker_register(rt, err)) != 0) return rc;
  cache_open(rt);
  rc = dx__store_new(&rt->store, rt->loop, &cfg, err);
  if (rc != 0) {
    worker_unregister(rt);
    return rc;
  }
  if (cfg.sessions)
    rt->sessions = dx__sessions_new(rt->loop, rt->store, &rt->opts, rt->worker_id, rt->host,
                                    rt->host_ud);
  dx__sessions_set_metrics(rt->sessions, rt->metrics);
  rt->started = 1;
  dx__credit_init(&rt->credit, rt->opts.worker_concurrency);
  dx__store_want(rt->store, rt->opts.orchestration_concurrency, dx__credit_top_up(&rt->credit));
  registry_add(rt);
  watch_start(rt);
  dx__log(DX_LOG_INFO, "worker started", "worker_id=%s orchestration_concurrency=%d "
          "worker_concurrency=%d", rt->worker_id, rt->opts.orchestration_concurrency,
          rt->opts.worker_concurrency);
  dx__options_log(&rt->opts, DX_LOG_INFO, "worker options");
  return DX_OK;
}

/* Only registered runtimes are poked: a stopping one has left the registry before its store
** is freed, so this is safe from any thread. */
void dx_runtime_poke(dx_runtime_t *rt) {
  runtime_list_t *n;
  if (!rt) return;
  uv_once(&registry_once, registry_init);
  uv_mutex_lock(&registry_mu);
  for (n = registry; n; n = n->next)
    if (n->rt == rt && rt->store) dx__store_poke(rt->store);
  uv_mutex_unlock(&registry_mu);
}

/* {===== eager start (embedding.h) =====} */

struct dx__eager_s {
  dx_store_op_t op;
  dx_work_item_t w;
  int done;
};

/* (no poke: this runtime's cycle took the start; others hear of its commit as of any other,
** through the store's notify file) */
static void eager_applied(dx_store_op_t *op) { ((dx__eager_t *)op->ud)->done = 1; }

int dx__eager_start(dx_runtime_t *rt, dx_client_t *c, const dx_start_t *st, dx__eager_t **out,
                    dx_error_t *err) {
  dx__eager_t *e;
  int rc;
  *out = NULL;
  if (!rt || !c || !rt->started || rt->stopping || rt->stalled || !rt->store ||
      !dx__provider_same_store(rt->provider, dx_client_provider(c)))
    return DX_OK;
  if (!(e = calloc(1, sizeof *e))) return dx_error_set(err, DX_ENOMEM, "out of memory");
  if ((rc = dx__client_start_item(st, &e->w, err)) != 0) {
    free(e);
    return rc;
  }
  e->op.kind = DX_OP_ENQUEUE_ORCH;
  e->op.eager = 1;
  e->op.item = &e->w;
  e->op.done = eager_applied;
  e->op.ud = e;
  dx__store_submit(rt->store, &e->op);
  *out = e;
  return DX_OK;
}

int dx__eager_done(const dx__eager_t *e) { return e->done; }

void dx__runtime_set_turn_hold(dx_runtime_t *rt, int64_t ms) { rt->turn_hold_ms = ms; }

void dx__runtime_lose_commits(dx_runtime_t *rt, int n) {
  if (rt->store) dx__store_lose_commits(rt->store, n);
}

int dx__eager_end(dx__eager_t *e, dx_error_t *err) {
  int rc = e->op.rc;
  if (rc && err) *err = e->op.err;
  free(e->w.data);
  free(e);
  return rc;
}

/* Wake every runtime of this process: a client here just enqueued work. */
void dx__runtime_poke_all(void) {
  runtime_list_t *n;
  uv_once(&registry_once, registry_init);
  uv_mutex_lock(&registry_mu);
  for (n = registry; n; n = n->next)
    if (n->rt->store) dx__store_poke(n->rt->store);
  uv_mutex_unlock(&registry_mu);
}

/* The provider asks while fetching (store thread): which histories does the cache hold? */
static int cache_holds(void *ud, const char *instance, uint64_t *exec, uint64_t *n) {
  return dx__ocache_holds(ud, instance, exec, n);
}

static size_t cache_recent(void *ud, size_t max, char **ids, uint64_t *execs, uint64_t *ns) {
  return dx__ocache_recent(ud, max, ids, execs, ns);
}

/* Before the store thread exists (the provider is ours alone here). */
static void cache_open(dx_runtime_t *rt) {
  const dx_provider_methods_t *m = rt->provider->methods;
  dx_history_hint_t hint = {cache_holds, NULL, cache_recent};
  if (rt->opts.orchestration_cache_size <= 0 || rt->host->version < 5 || !rt->host->orch_turn)
    return;
  rt->ocache = dx__ocache_new(rt->opts.orchestration_cache_size, rt->metrics);
  if (!rt->ocache || m->version < 11 || !m->set_history_hint) return;
  hint.ud = rt->ocache;
  m->set_history_hint(rt->provider, &hint, NULL);
}

/* The kept orchestrations go when the store closes (no fetch asks the cache any more): the
** host (their code) is still alive. */
static void cache_close(dx_runtime_t *rt) {
  const dx_provider_methods_t *m = rt->provider->methods;
  if (!rt->ocache) return;
  if (m->version >= 11 && m->set_history_hint) m->set_history_hint(rt->provider, NULL, NULL);
  dx__ocache_free(rt->ocache);
  rt->ocache = NULL;
}

static void store_closed(void *ud) {
  dx_runtime_t *rt = ud;
  cache_close(rt);
  rt->store = NULL;
  worker_unregister(rt);
  dx__log(DX_LOG_INFO, "worker stopped", "worker_id=%s", rt->worker_id);
  if (rt->stop_cb) rt->stop_cb(rt, rt->stop_ud);
}

static void grace_closed(uv_handle_t *h) {
  dx_runtime_t *rt = h->data;
  dx__store_close(rt->store, store_closed, rt);
}

static void sessions_stopped(void *ud) {
  dx_runtime_t *rt = ud;
  rt->sessions = NULL;
  rt->sessions_stopping = 0;
}

static void check_stop_done(dx_runtime_t *rt) {
  if (!rt->stopping || rt->n_running > 0 || !dx__store_quiet(rt->store)) return;
  /* Nothing runs any more: hand our sessions to other workers before closing the store. */
  if (rt->sessions && !rt->sessions_stopping) {
    rt->sessions_stopping = 1;
    dx__sessions_shutdown(rt->sessions, sessions_stopped, rt);
    return;
  }
  if (rt->sessions_stopping) return;
  if (uv_is_closing((uv_handle_t *)&rt->grace_timer)) return;
  uv_close((uv_handle_t *)&rt->grace_timer, grace_closed);
}

/* Ticks while stopping: past the grace period, hand unfinished activities back so another
** worker runs them now; close once nothing runs and every commit is applied. */
static void on_stop_tick(uv_timer_t *h) {
  dx_runtime_t *rt = h->data;
  dx__log_set_worker(rt->worker_id);
  if (dx__now_ms() >= rt->stop_deadline_ms) {
    while (rt->running) {
      dx_activity_t *a = rt->running;
      dx__log(DX_LOG_WARN, "activity abandoned at shutdown", ACT_FIELDS, ACT_ARGS(a));
      if (!dx__cact_abort(a)) rt->host->activity_abort(rt->host_ud, a);
      activity_settle(a, DX_OP_ABANDON_WORK, 0, 1, "handed_back");
    }
  }
  check_stop_done(rt);
}

void dx_runtime_stop(dx_runtime_t *rt, dx_runtime_stop_cb cb, void *ud) {
  if (!rt || rt->stopping) return;
  dx__log_set_worker(rt->worker_id);
  rt->stopping = 1;
  rt->stop_cb = cb;
  rt->stop_ud = ud;
  registry_remove(rt);
  watch_stop(rt);
  if (!rt->started) {
    if (cb) cb(rt, ud);
    return;
  }
  dx__log(DX_LOG_INFO, "worker stopping", "worker_id=%s running_activities=%d", rt->worker_id,
          rt->n_running);
  dx__store_stop_fetching(rt->store);
  rt->stop_deadline_ms = dx__now_ms() + rt->opts.shutdown_grace_ms;
  uv_timer_init(rt->loop, &rt->grace_timer);
  rt->grace_timer.data = rt;
  uv_timer_start(&rt->grace_timer, on_stop_tick, 1, 5);
}

void dx_runtime_free(dx_runtime_t *rt) {
  void (*owner_free)(void *);
  void *owner;
  if (!rt) return;
  if ((rt->started && rt->store) || rt->run_active) { /* it would crash later: refuse */
    dx__log(DX_LOG_ERROR, "dx_runtime_free on a running runtime ignored; stop it first", NULL);
    return;
  }
  owner_free = rt->owner_free;
  owner = rt->owner;
  cache_close(rt);
  dx__cact_free_all(rt);
  dx__spare_drain(&rt->spare_acts);
  dx__spare_drain(&rt->spare_jobs);
  dx__turn_spares_drain(&rt->turn_spares); /* after cache_close: kept turns gave theirs back */
  while (rt->n_hidden > 0) free(rt->hidden[--rt->n_hidden]);
  free(rt->hidden);
  dx__metrics_free(rt->metrics);
  free(rt->worker_id);
  free(rt->tags_text);
  dx__tags_free(&rt->tag_filter);
  free(rt);
  if (owner_free) owner_free(owner); /* after the runtime: it may own the provider and loop */
}

const char *dx_runtime_worker_id(const dx_runtime_t *rt) { return rt ? rt->worker_id : NULL; }

dx_metrics_t *dx_runtime_metrics(dx_runtime_t *rt) { return rt ? rt->metrics : NULL; }

void dx_runtime_stats(const dx_runtime_t *rt, dx_runtime_stats_t *out) {
  if (!out) return;
  memset(out, 0, sizeof *out);
  if (!rt) return;
  /* the registry counts them; commits and cycles are the store thread's own counters */
  out->turns = (uint64_t)dx__metric_sum(rt->metrics, DXM_ORCH_TURN_DURATION);
  out->activities = (uint64_t)dx__metric_sum(rt->metrics, DXM_ACT_EXECUTIONS);
  if (rt->store) {
    out->commits = dx__store_commits(rt->store);
    out->fetch_cycles = dx__store_cycles(rt->store);
  }
}

/* {===== simulated crash and test support =====} */
/*
** dx_runtime_crash stops a runtime the way a killed process stops: nothing more is committed,
** no hook runs and nothing is released. Queued store operations (turn commits, activity
** results, renewals) are dropped; fetched items, running activities and owned sessions stay
** locked in the store until their locks and leases lapse, as after a SIGKILL.
*/

typedef struct crash_wait_s {
  dx_runtime_t *rt;
  int parts;                 /* the store and the session manager still closing */
  dx_runtime_stop_cb cb;
  void *ud;
} crash_wait_t;

static void crash_part_done(crash_wait_t *w) {
  dx_runtime_t *rt = w->rt;
  if (--w->parts > 0) return;
  dx__log(DX_LOG_INFO, "worker crashed (simulated)", "worker_id=%s", rt->worker_id);
  if (w->cb) w->cb(rt, w->ud);
  free(w);
}

static void crash_store_closed(void *ud) {
  crash_wait_t *w = ud;
  cache_close(w->rt);
  w->rt->store = NULL;
  worker_unregister(w->rt); /* as the OS drops a killed process's registration */
  crash_part_done(w);
}

static void crash_sessions_closed(void *ud) {
  crash_wait_t *w = ud;
  w->rt->sessions = NULL;
  crash_part_done(w);
}

int dx_runtime_crash(dx_runtime_t *rt, dx_runtime_stop_cb cb, void *ud) {
  crash_wait_t *w;
  if (!rt) return DX_EINVAL;
  if (rt->stopping) return DX_ESTATE;
  if (!(w = calloc(1, sizeof *w))) return DX_ENOMEM;
  rt->stopping = 1;
  /* check_stop_done (reached from settled operations) must never start a graceful stop */
  rt->sessions_stopping = 1;
  registry_remove(rt);
  watch_stop(rt);
  if (!rt->started) {
    free(w);
    if (cb) cb(rt, ud);
    return DX_OK;
  }
  dx__log(DX_LOG_WARN, "worker crashing (simulated): in-flight work stays locked",
          "worker_id=%s running_activities=%d", rt->worker_id, rt->n_running);
  w->rt = rt;
  w->cb = cb;
  w->ud = ud;
  w->parts = 1 + (rt->sessions != NULL);
  /* Running activities: the code keeps no claim on them; their rows stay locked. */
  while (rt->running) {
    dx_activity_t *a = rt->running;
    if (!dx__cact_abort(a)) rt->host->activity_abort(rt->host_ud, a);
    a->finished = 1;
    a->acked = 1;
    if (a->timer_on) uv_timer_stop(&a->renew_timer);
    activity_unlink(a);
    renew_timer_close(a);
  }
  if (rt->sessions) dx__sessions_crash(rt->sessions, crash_sessions_closed, w);
  dx__store_crash(rt->store, crash_store_closed, w);
  return DX_OK;
}

int dx_runtime_is_idle(const dx_runtime_t *rt) {
  if (!rt || !rt->started || !rt->store) return 1;
  return rt->n_running == 0 && dx__store_quiet(rt->store);
}

void dx__runtime_stall(dx_runtime_t *rt, int on) {
  if (!rt || !rt->started || rt->stopping || rt->stalled == !!on) return;
  rt->stalled = !!on;
  dx__log(DX_LOG_INFO, on ? "worker stalled (simulated)" : "worker resumed (simulated)",
          "worker_id=%s", rt->worker_id);
  if (on) dx__store_pause(rt->store, 1);
  if (rt->sessions) dx__sessions_pause(rt->sessions, on);
  if (!on) dx__store_pause(rt->store, 0);
}

int dx__runtime_stalled(const dx_runtime_t *rt) { return rt && rt->stalled; }

int dx__runtime_hide_activity(dx_runtime_t *rt, const char *name) {
  char **v;
  if (!rt || !name) return DX_EINVAL;
  if (hidden_activity(rt, name)) return DX_OK;
  if (!(v = realloc(rt->hidden, (rt->n_hidden + 1) * sizeof *v))) return DX_ENOMEM;
  rt->hidden = v;
  if (!(v[rt->n_hidden] = dx__strdup(name))) return DX_ENOMEM;
  rt->n_hidden++;
  return DX_OK;
}

dx_runtime_t *dx__activity_runtime(const dx_activity_t *a) { return a ? a->rt : NULL; }

void dx_runtime_renew_sessions_now(dx_runtime_t *rt) {
  if (rt && rt->started && !rt->stopping && rt->sessions) dx__sessions_renew_now(rt->sessions);
}
