/*
** runtime_int.h -- private to the worker runtime's files (runtime.c, runtime_embed.c): the
** runtime and activity structures and the C-activity calls runtime.c makes.
*/
#ifndef DX_RUNTIME_INT_H
#define DX_RUNTIME_INT_H

#include <stddef.h>
#include <stdint.h>

#include "duroxide.h"
#include "credit.h"
#include "options.h"
#include "orch_cache.h"
#include "sessions.h"
#include "replay.h"
#include "spare.h"
#include "store.h"
#include "wake.h"

struct dx_activity_s {
  dx_runtime_t *rt;
  dx_work_item_t item;
  uint64_t token;
  uint64_t started_hr;                /* uv_hrtime() at start: the duration metric */
  const char *outcome;                /* metric outcome of its settlement (NULL: not counted) */
  dx_activity_info_t info;
  dx_work_item_t result;
  int result_borrows;                 /* result's instance and worker_id are borrowed (from item
                                      ** and rt), its data owned unless it is out_inline:
                                      ** result_clear */
  uv_timer_t renew_timer;
  int renew_inflight;
  int acked;
  int timer_closed;
  int timer_on;                       /* renew_timer was started (activities that end within
                                      ** their start never need one) */
  int finished;
  int cancelled;
  uint64_t sess_gen;                  /* session activities: the hold they run under */
  void *userdata;
  struct cact_job_s *cjob;            /* a C activity on the thread pool (C embedding) */
  struct dx_activity_s *prev, *next;  /* running list */
  /* Last, and not zeroed at start (ACT_ZEROED): each is cleared (written) right before it is
  ** used, and together they are half the record (the ops' error texts). */
  dx_store_op_t op;
  dx_store_op_t renew_op;
  char out_inline[64];                /* a small output, written here (dx__activity_out_buf) */
};
#define ACT_ZEROED offsetof(struct dx_activity_s, op)

typedef struct turn_job_s {
  dx_runtime_t *rt;
  dx_orch_item_t *item;
  dx_turn_t *turn;
  int acked;                 /* the settlement is an ack (else an abandon) */
  int kept_early;            /* the turn went to the cache when its ack was applied, before
                                the commit (turn_applied): a lost commit drops it again */
  int expected;              /* the cache expects the turn until it is kept (dx__ocache_expect) */
  dx_store_op_t op;
} turn_job_t;

struct dx_runtime_s {
  uv_loop_t *loop;
  dx_provider_t *provider;
  dx_options_t opts;
  char *worker_id;
  const dx_host_methods_t *host;
  void *host_ud;
  dx_store_t *store;
  dx_session_cfg_t session_cfg;
  dx_fetch_filter_t tag_filter;   /* from opts.tags (owned) */
  char *tags_text;                /* opts.tags points here (owned) */
  dx_sessions_t *sessions;   /* NULL when max_sessions_per_worker == 0 */
  int sessions_stopping;
  dx_activity_t *running;
  int n_running;
  dx__spare_t spare_acts;  /* freed activity records and turn jobs, reused (spare.h) */
  dx__spare_t spare_jobs;
  dx_turn_spares_t turn_spares; /* first blocks of the turns' vectors (replay.h) */
  int in_fetch;        /* on_fetch runs: the running gauge is set once at its end */
  dx__credit_t credit;         /* how many activities to ask the store for (credit.h) */
  int started, stopping;
  int stalled;             /* dx__runtime_stall: a simulated SIGSTOP */
  char **hidden;           /* dx__runtime_hide_activity: names this worker lacks (tests) */
  size_t n_hidden;
  int registered;          /* worker_register succeeded: unregister when the store closed */
  uv_timer_t grace_timer;
  dx_wake_t *wake;             /* wake-ups from other processes' commits (NULL: polling) */
  int watchdog;                /* holds a reference on the loop's watchdog (watchdog.c) */
  int64_t stop_deadline_ms;
  dx_runtime_stop_cb stop_cb;
  void *stop_ud;
  dx_metrics_t *metrics;       /* this worker's counters (metrics.h); recorded from both threads */
  dx_ocache_t *ocache;         /* kept orchestrations (NULL: cache off); loop thread */
  int64_t skew_warned_ms;    /* last "store times in our future" warning (process time) */
  int64_t turn_hold_ms;      /* store.h hold_ms (DX__TURN_HOLD_MS; tests may set another) */
  int failed;                  /* the store became unusable: `failure` says why */
  dx_error_t failure;
  /* C embedding (section below): C activities, dx_runtime_run, the owner of a Lua runtime. */
  struct cact_s *cacts;
  int run_active, stop_requested;
  uv_async_t run_async;
  void (*owner_free)(void *owner);
  void *owner;
};

/* C activities (runtime_embed.c). A C activity shadows a host activity of the same name. */
typedef struct cact_s dx__cact_t;
/** The C activity registered as `name`, or NULL (borrowed from rt). */
const dx__cact_t *dx__cact_find(const dx_runtime_t *rt, const char *name);
/** Runs `a` with `c`: at once on the loop, or queued on the thread pool. */
void dx__cact_start(dx_activity_t *a, const dx__cact_t *c);
/** The runtime gives up on `a`: 1 when it was a C activity (its result is dropped later). */
int dx__cact_abort(dx_activity_t *a);
/** Registers fn as `name` (no checks: dx_register_activity_ex checks). name is copied. */
int dx__cact_add(dx_runtime_t *rt, const char *name, dx_activity_fn fn, void *userdata,
                 int flags, dx_error_t *err);
/** Frees every registered C activity. */
void dx__cact_free_all(dx_runtime_t *rt);

#endif
