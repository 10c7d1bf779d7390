/*
** duroxide.h -- the public C API of duroxide-lua's engine.
**
** Caveats
** - Threads: a runtime lives on one libuv loop; call dx_runtime_* from that loop's thread.
**   The runtime owns one store thread that performs every store transaction (group commit).
**   A client may be used from any single thread at a time; its calls block on the store.
** - Lifetime: objects are created by dx_*_new/open and released by the matching close/free.
**   Strings passed in are borrowed for the call and copied when kept. Strings and structs
**   returned through out-params are owned by the caller (free with the named function).
** - Errors: functions return 0 (DX_OK) or a negative DX_E* code (see duroxide/errors.h), and
**   fill an optional trailing dx_error_t with a message naming the problem.
** - fork(): do not use a store or runtime across fork(); open them in the child.
*/
#ifndef DUROXIDE_H
#define DUROXIDE_H

#include <stdint.h>
#include <uv.h>

#include "duroxide/errors.h"
#include "duroxide/executor.h"
#include "duroxide/provider.h"

#define DX_VERSION_MAJOR 0
#define DX_VERSION_MINOR 1
#define DX_VERSION_PATCH 0
/** "0.1.0" (static storage). */
const char *dx_version(void);

/* {===== clock =====} */

/** The engine's clock: wall time in ms since the epoch, plus any dx_clock_advance offset. */
int64_t dx_clock_now_ms(void);
/** Move the engine's clock forward by ms for this whole process (tests: a three-hour timer
**  fires at once, leases lapse). Never moves backwards. Thread-safe. */
void dx_clock_advance(int64_t ms);

/* {===== options =====} */

/** Runtime options. Initialise with dx_options_init(), then change fields. Durations in ms. */
typedef struct dx_options_s {
  int version;                       /* 1 */
  const char *worker_node_id;        /* NULL = unique id per process start (borrowed) */
  int orchestration_concurrency;     /* instances locked at once (default 64) */
  int worker_concurrency;            /* activities running at once (default 64) */
  int max_sessions_per_worker;       /* default 10 */
  int64_t session_lock_timeout_ms;   /* default 30s */
  int64_t session_lock_renewal_buffer_ms; /* default 5s */
  int64_t session_idle_timeout_ms;   /* default 5m; 0 = never unpin while alive */
  int64_t session_cleanup_interval_ms; /* default 5m */
  int64_t worker_lock_timeout_ms;    /* default 30s */
  int64_t worker_lock_renewal_buffer_ms; /* default 5s */
  int64_t orchestrator_lock_timeout_ms; /* default 5s */
  int64_t poll_interval_ms;          /* idle poll for work from other processes (default 10ms) */
  uint32_t max_attempts;             /* poison threshold (default 10) */
  int64_t shutdown_grace_ms;         /* wait for in-flight activities on stop (default 10s) */
  int64_t unregistered_base_ms;      /* backoff for unregistered names (default 1s) */
  int64_t unregistered_max_ms;       /* (default 60s) */
  int64_t turn_instruction_budget;   /* Lua instructions per orchestration turn (default 50M) */
  int log_level;                     /* DX_LOG_* (default INFO) */
  int log_format;                    /* 0 text, 1 json */
  int64_t loop_block_warning_ms;     /* warn when the loop is blocked this long (default 1s; 0 off) */
  int64_t turn_time_limit_ms;        /* wall clock per orchestration turn (default 30s; 0 off) */
  const char *tags;                  /* activity tags this worker takes, comma-separated; "default"
                                        = untagged work (NULL = "default"); borrowed */
  int64_t session_wait_warning_ms;   /* warn when session work waited this long before a worker
                                        claimed its session (default 30s; 0 off) */
  int64_t orchestration_cache_size;  /* bytes of memory for orchestrations kept alive between
                                        turns (no replay per turn; LRU); 0 = off. Default: the
                                        DUROXIDE_ORCHESTRATION_CACHE_SIZE environment variable
                                        when set, else DX_ORCHESTRATION_CACHE_DEFAULT */
  int64_t heap_prefault;             /* bytes of heap the loop thread and the store thread each
                                        touch at start and keep, so a first burst does not take
                                        a page fault per new page (default DX_HEAP_PREFAULT_DEFAULT;
                                        at most 256 MiB; 0 = off: malloc's settings untouched) */
} dx_options_t;

/** The default orchestration cache budget in bytes. */
#define DX_ORCHESTRATION_CACHE_DEFAULT (64 * 1024 * 1024)

/** The default heap prefault in bytes (per worker thread kind: loop, store). */
#define DX_HEAP_PREFAULT_DEFAULT (8 * 1024 * 1024)

/** Fill defaults. */
void dx_options_init(dx_options_t *o);
/** Check values; DX_EINVAL with a message naming the option on a bad value. */
int dx_options_validate(const dx_options_t *o, dx_error_t *err);
/** Set one option from its command-line name ("worker-concurrency", "session-idle-timeout",
**  ...; '_' and '-' are interchangeable) and text value ("10", "30s", "5m", "250ms").
**  DX_EINVAL naming the option and value when the value is bad; DX_ENOTFOUND for an unknown
**  option name. */
int dx_options_set(dx_options_t *o, const char *name, const char *value, dx_error_t *err);
/** Parse "250ms", "30s", "5m", "1h" or a bare number of ms. DX_EINVAL on bad text. */
int dx_parse_duration(const char *text, int64_t *out_ms);

/* {===== runtime =====} */

typedef struct dx_runtime_s dx_runtime_t;
typedef void (*dx_runtime_stop_cb)(dx_runtime_t *rt, void *ud);

/** Create a runtime on `loop` over provider `p` (borrowed; must outlive the runtime) running
**  code through `host`. The runtime is idle until dx_runtime_start. *out owned by caller.
**  While it runs, the runtime is the only user of the handle `p`: it sets the handle's fetch
**  filter and history hint (open one handle per runtime). */
int dx_runtime_new(dx_runtime_t **out, uv_loop_t *loop, dx_provider_t *p,
                   const dx_options_t *opts, const dx_host_methods_t *host, void *host_ud,
                   dx_error_t *err);
/** Start the dispatchers and the store thread. */
int dx_runtime_start(dx_runtime_t *rt, dx_error_t *err);
/** Graceful stop: take no new work, let running activities finish for up to
**  shutdown_grace_ms, hand back the rest, commit, then call cb on the loop thread. */
void dx_runtime_stop(dx_runtime_t *rt, dx_runtime_stop_cb cb, void *ud);
/** Free a stopped (or never started) runtime, and what dx_lua_runtime_new built around it.
**  NULL is ignored. A runtime still running (or driven by dx_runtime_run) is not freed: the
**  call logs an error and returns. */
void dx_runtime_free(dx_runtime_t *rt);
/** 0 while the runtime's store works; otherwise the error (a DX_E* code, message in *err when
**  err is not NULL) that made the store unusable (damaged, lock file deleted): the host
**  should then stop the runtime and exit with that message. Loop thread. */
int dx_runtime_error(const dx_runtime_t *rt, dx_error_t *err);
/** This process's worker id (borrowed, valid for the runtime's life). */
const char *dx_runtime_worker_id(const dx_runtime_t *rt);
/** Wake the store thread now (work was enqueued in this process). Thread-safe. */
void dx_runtime_poke(dx_runtime_t *rt);
/** Counters for tests and benchmarks (a summary of dx_runtime_metrics: turns run, activity
**  deliveries settled, store commits and cycles). */
typedef struct dx_runtime_stats_s {
  uint64_t turns, activities, commits, fetch_cycles;
} dx_runtime_stats_t;
void dx_runtime_stats(const dx_runtime_t *rt, dx_runtime_stats_t *out);

/* {===== metrics =====} */
/*
** Each runtime counts what it does (orchestration starts and ends, failures by category,
** turns, replays, activity outcomes and durations, store transactions and their commit
** latency, queue depths, session claims, moves and releases) in a registry of counters, gauges
** and histograms. docs/operations.md lists every metric.
*/
typedef struct dx_metrics_s dx_metrics_t;
/** The runtime's metrics registry (borrowed: valid until dx_runtime_free). NULL for NULL. */
dx_metrics_t *dx_runtime_metrics(dx_runtime_t *rt);
/** The registry in the Prometheus text exposition format (version 0.0.4), as served on
**  /metrics: malloc'd, the caller frees it; NULL for NULL or out of memory. Any thread. */
char *dx_metrics_render_prometheus(dx_metrics_t *m);
/** The registry as one JSON object {"<metric>": {"type", "help", "series": [{"labels": {..},
**  "value"} or, for histograms, {"labels", "count", "sum", "buckets": [{"le", "count"}]}]}}
**  (bucket counts cumulative): malloc'd, caller frees; NULL for NULL or out of memory. Any
**  thread. */
char *dx_metrics_render_json(dx_metrics_t *m);

/* Test support (the duroxide.testing harness; not for production use). */
/** Stop `rt` abruptly, as if its process were killed: no hook runs, nothing is released or
**  committed any more. Queued commits and results are dropped; running activities, fetched
**  items and owned sessions stay locked in the store until their locks and leases lapse
**  (a runtime restarted with the same worker_node_id reclaims the sessions at once). cb runs
**  on the loop thread once the runtime has closed; then dx_runtime_free it. DX_ESTATE when
**  it is already stopping. */
int dx_runtime_crash(dx_runtime_t *rt, dx_runtime_stop_cb cb, void *ud);
/** 1 when the runtime has no running activity and no store operation queued, in flight or
**  undelivered (a stopped or never started runtime is idle). Work visible in the store but
**  not fetched yet is not seen here. */
int dx_runtime_is_idle(const dx_runtime_t *rt);
/** Renew the owned session leases now instead of at the next renewal tick, so idle unpins
**  and lost leases are noticed at once (tests moving the clock with dx_clock_advance). */
void dx_runtime_renew_sessions_now(dx_runtime_t *rt);

/* {===== client =====} */

typedef struct dx_client_s dx_client_t;

/** Open a client on the store `store` (a directory or a postgres:// URL; see dx_provider_open),
**  created if missing. *out owned by the caller: dx_client_close. */
int dx_client_open(dx_client_t **out, const char *store, dx_error_t *err);
/** A client over an existing provider (borrowed). */
int dx_client_new(dx_client_t **out, dx_provider_t *p, dx_error_t *err);
void dx_client_close(dx_client_t *c);
/** The provider behind the client (borrowed). */
dx_provider_t *dx_client_provider(dx_client_t *c);

/** Start `name` as instance `id` with JSON `input` (NULL = null). version NULL = latest.
**  DX_EJSON for invalid JSON, DX_ETOOBIG over the payload limit, DX_EEXIST when the id is
**  taken; nothing is written on error. */
int dx_client_start(dx_client_t *c, const char *id, const char *name, const char *input,
                    const char *version, dx_error_t *err);
/** One start for dx_client_start_many (all fields borrowed). */
typedef struct dx_start_s {
  const char *id;
  const char *name;
  const char *input;    /* JSON text, NULL = null */
  const char *version;  /* NULL = latest */
} dx_start_t;
/** Start many instances in one durable commit: all or nothing (on error nothing is written
**  and err names the failing instance). */
int dx_client_start_many(dx_client_t *c, const dx_start_t *starts, size_t n, dx_error_t *err);
/** Raise event `name` with JSON `data`. DX_ENOTFOUND for an unknown instance. */
int dx_client_raise(dx_client_t *c, const char *id, const char *name, const char *data,
                    dx_error_t *err);
/** One raise for dx_client_raise_many (all fields borrowed). */
typedef struct dx_raise_s {
  const char *id;
  const char *name;
  const char *data;     /* JSON text, NULL = null */
} dx_raise_t;
/** Raise many events in one durable commit: all or nothing. Every entry is checked first
**  (as dx_client_raise: DX_ENOTFOUND for an unknown instance, DX_EINVAL / DX_EJSON /
**  DX_ETOOBIG for bad arguments); on error nothing is written and err starts with
**  "entry N: " naming the first bad entry (1-based). */
int dx_client_raise_many(dx_client_t *c, const dx_raise_t *raises, size_t n, dx_error_t *err);
/** Request cancellation. DX_ENOTFOUND for an unknown instance. */
/** Enqueue `data` (JSON text; NULL = null) on event queue `queue` of instance `id`, for
**  ctx:dequeue_event (kept until dequeued). DX_ENOTFOUND for an unknown instance, DX_EINVAL /
**  DX_EJSON / DX_ETOOBIG for bad arguments. All arguments borrowed. */
int dx_client_enqueue_event(dx_client_t *c, const char *id, const char *queue, const char *data,
                            dx_error_t *err);
/** The live key-value value of `key` of instance `id` (JSON; *value owned by the caller).
**  DX_ENOTFOUND when the instance or the key does not exist. */
int dx_client_kv_get(dx_client_t *c, const char *id, const char *key, char **value,
                     dx_error_t *err);
/** Every live key-value entry of instance `id`, ascending key (none for an unknown instance);
**  cb's strings are borrowed for the call. */
int dx_client_kv_list(dx_client_t *c, const char *id, dx_kv_cb cb, void *ud, dx_error_t *err);
int dx_client_cancel(dx_client_t *c, const char *id, const char *reason, dx_error_t *err);
/** Status of the latest execution. An unknown instance gives DX_OK with
**  out->status == DX_STATUS_NONE. Clear *out with dx_instance_info_clear. */
int dx_client_status(dx_client_t *c, const char *id, dx_instance_info_t *out,
                     dx_error_t *err);
/** Wait until Completed/Failed or timeout_ms passes (DX_ETIMEDOUT, *out holds the last
**  status). The status is read again whenever a commit may have changed it (LMDB: the
**  store's notify file; PostgreSQL: LISTEN, when the client opened its own store), at least
**  every second; a store without wake-ups is polled (2 ms, doubling to 50 ms). */
int dx_client_wait(dx_client_t *c, const char *id, int64_t timeout_ms, dx_instance_info_t *out,
                   dx_error_t *err);
/** The events of execution `exec` (0: the latest) into *out (*n of them; free with
**  dx_events_free). DX_ENOTFOUND "unknown instance 'ID'" for an id the store does not know,
**  and "instance 'ID' has no history yet: it is queued and no worker has run it" for a
**  start no worker has run yet. */
int dx_client_history(dx_client_t *c, const char *id, uint64_t exec, dx_event_t **out,
                      size_t *n, dx_error_t *err);
/** Status as a canonical JSON object {"instance_id":..,"status":..,"output":..|"error":..}
**  (malloc'd). */
char *dx_instance_info_to_json(const char *id, const dx_instance_info_t *info);
/** "Running", "Completed", "Failed", "NotFound" (continued-as-new reads as Running). */
const char *dx_status_name(int status);
/** "ActivityScheduled" etc. for a dx_event_kind_t ("Unknown" otherwise; static storage). */
const char *dx_event_kind_name(int kind);
/** The dx_event_kind_t named `name`, or 0 when none is. */
int dx_event_kind_from_name(const char *name);
/** JSON text of one event (malloc'd), as `duroxide-lua history` prints it. */
char *dx_event_to_json(const dx_event_t *e);
/** Store-wide figures as one JSON object in *out (malloc'd, caller frees):
**  {"time_ms", "orchestrator_queue", "worker_queue" (messages and rows in any state),
**   "instances", "sessions": {"total", "live" (owned, lease not lapsed), "lapsed", "unowned"
**   (released or never claimed), "queued" (their worker rows), "by_worker": {id: live}}}.
**  What `duroxide-lua stats` prints and client:stats() returns; a worker's own counters are
**  its metrics (dx_runtime_metrics). DX_OK, or the provider's error. */
int dx_client_stats_json(dx_client_t *c, char **out, dx_error_t *err);

/* {===== management (issue 10) =====} */
/*
** Management over any provider with the version-6 management members (DX_ESTATE naming the
** provider otherwise).
** Bad input (ids, filters, cursors, durations) gives DX_EINVAL naming it and changes nothing.
** JSON shapes (the CLI prints them, the Lua client and the web console decode them):
**   list row:  {"instance_id","status","orchestration","version","execution_id",
**               "created_at_ms","updated_at_ms","parent_instance"?,"output"? (Completed),
**               "error"? (Failed),"custom_status"?}
**              status: "Pending" (queued, never run), "Running", "Completed", "Failed"
**   list page: {"instances":[row...],"next":CURSOR|null}
**   execution: {"execution_id","status","started_at_ms","completed_at_ms"?,"event_count"}
**   describe:  row fields + {"custom_status_version",
**               "executions":[execution...],
**               "pending_activities":[{"activity_id","execution_id","name","session_id"?,
**                  "attempt","visible_at_ms","locked_until_ms"?,"locked_by"?}],
**               "pending_timers":[{"timer_id","execution_id","fire_at_ms"}],
**               "subscribed_events":[{"name","waiting"}],
**               "queued_messages":[{"type","name"?,"visible_at_ms","attempt",
**                  "locked_until_ms"?}],
**               "start_backoff"?:{"attempt","retry_at_ms","reason"},
**               "children":[instance ids], "parent_instance"?}
*/

/** A point in time for filters (--created-after, --completed-before): a duration ago with a
**  unit ("30s", "15m", "12h", "7d"), an ISO-8601 UTC time ("2026-11-20T08:00:00Z",
**  "2026-11-20"), or a bare integer of ms since the epoch. DX_EINVAL (err names the text) for
**  anything else. now_ms: the clock durations count back from. */
int dx_parse_time(const char *text, int64_t now_ms, int64_t *out_ms, dx_error_t *err);
/** Status filter from its name: "Pending", "Running", "Completed", "Failed" (exact).
**  Returns a dx_list_query_t status, or DX_LIST_ANY for NULL; -100 for an unknown name. */
int dx_status_filter_from_name(const char *name);
/** Status name of a list row: "Pending" for DX_STATUS_NONE, else dx_status_name. */
const char *dx_list_status_name(int status);
/** JSON text of one list row (malloc'd). */
char *dx_list_row_to_json(const dx_instance_info_t *row);

/** One page of instances (see list_page in duroxide/provider.h for order and cursor).
**  q->limit 0 means 50. *rows (dx_instance_infos_free) and *next (free(); NULL on the last
**  page) are caller-owned. DX_EINVAL for a bad limit, status or cursor. */
int dx_client_list(dx_client_t *c, const dx_list_query_t *q, dx_instance_info_t **rows,
                   size_t *n, char **next, dx_error_t *err);
/** The same page as JSON text {"instances":[...],"next":...} (malloc'd into *json). */
int dx_client_list_json(dx_client_t *c, const dx_list_query_t *q, char **json,
                        dx_error_t *err);
/** Executions of `id`, ascending (*out caller-owned: free()). DX_ENOTFOUND "unknown instance
**  'ID'" (or "... has no executions yet: it is queued" for a start no worker has run). */
int dx_client_executions(dx_client_t *c, const char *id, dx_execution_info_t **out,
                         size_t *n, dx_error_t *err);
/** JSON text of one execution (malloc'd). */
char *dx_execution_info_to_json(const dx_execution_info_t *e);
/** Everything about `id` as one JSON object (shape above) in *json (malloc'd).
**  DX_ENOTFOUND "unknown instance 'ID'". */
int dx_client_describe(dx_client_t *c, const char *id, char **json, dx_error_t *err);
/** Delete `id` with its whole tree of sub-orchestrations, atomically. DX_ESTATE when one of
**  them is not terminal and `force` is 0 ("instance 'X' is running; ..."), or when `id` is a
**  sub-orchestration ("... delete its root 'R' instead"); DX_ENOTFOUND for an unknown id.
**  *deleted (may be NULL) receives the number of instances removed. */
int dx_client_delete(dx_client_t *c, const char *id, int force, uint64_t *deleted,
                     dx_error_t *err);
/** What dx_client_purge deletes (strings borrowed). */
typedef struct dx_purge_opts_s {
  int64_t completed_before_ms;  /* required (> 0): terminal instances last updated before */
  int status;                   /* DX_LIST_TERMINAL (0 is taken as this), DX_STATUS_COMPLETED
                                   or DX_STATUS_FAILED */
  const char *name;             /* NULL = any orchestration */
  int dry_run;                  /* 1: count only */
  size_t batch;                 /* instances per transaction (0 = 100) */
} dx_purge_opts_t;
typedef struct dx_purge_result_s {
  uint64_t matched;             /* root instances that matched */
  uint64_t deleted;             /* instances removed, sub-orchestrations included */
  uint64_t batches;             /* transactions used */
} dx_purge_result_t;
/** Delete terminal root instances (with their trees) matching `o`, in batches of o->batch,
**  each its own short transaction. Instances that turn out running are skipped. */
int dx_client_purge(dx_client_t *c, const dx_purge_opts_t *o, dx_purge_result_t *out,
                    dx_error_t *err);
/** Keep the newest `keep` (>= 1) executions of `id`; *pruned (may be NULL) receives how many
**  went. DX_ENOTFOUND for an unknown id, DX_EINVAL for keep 0. */
int dx_client_prune(dx_client_t *c, const char *id, uint64_t keep, uint64_t *pruned,
                    dx_error_t *err);
/** Fail running instance `id` now (Application error, kind "Terminated", message
**  "terminated: REASON"), then its running descendants; its parent, when it has one,
**  receives SubOrchestrationFailed. Unlike cancel, no orchestration code runs. DX_ESTATE when
**  `id` is not running; DX_ENOTFOUND when unknown. *terminated (may be NULL) counts the
**  instances failed. */
int dx_client_terminate(dx_client_t *c, const char *id, const char *reason,
                        uint64_t *terminated, dx_error_t *err);
/** The live workers of the store as one JSON object in *json (malloc'd, caller frees):
**  {"time_ms", "workers": [{"worker_id", "host" (null: unknown), "pid" (0: unknown),
**   "started_at_ms", "running_turns", "running_activities" (plain rows plus session rows in
**   flight on its sessions), "sessions" [ids it owns with a live lease], "session_queued"
**   (worker rows queued on them), "lease_until_ms" (its latest session lease; 0: none)}]},
**  ascending worker id. A worker killed with SIGKILL is gone from the list at once (provider
**  liveness). DX_ESTATE when the provider keeps no registry (version < 10). What `duroxide-lua
**  workers` prints and client:workers() returns. Thread: any. */
int dx_client_workers_json(dx_client_t *c, char **json, dx_error_t *err);
/** The stored history of session `session_id` (claims, moves, releases: provider
**  list_session_events) as JSON in *json (malloc'd, caller frees): {"session_id", "events":
**  [{"at_ms", "event", "worker_id", "detail", "previous_owner"}]}, oldest first. An empty list
**  when the provider keeps no session history. DX_EINVAL for a bad session id. */
int dx_client_session_history_json(dx_client_t *c, const char *session_id, char **json,
                                   dx_error_t *err);

/* {===== C embedding =====} */
/*
** A C program hosts Lua orchestrations and activities with dx_lua_runtime_new (declared in
** duroxide/lua_host.h, the Lua host's header; this header declares no Lua function), adds C
** activities with dx_register_activity, drives the runtime with dx_runtime_run (or its own
** libuv loop) and talks to instances with the dx_client_* functions above. See
** docs/embedding.md and examples/embed.c. Build flags: `pkg-config --cflags --libs duroxide`.
**
** Threads: dx_register_activity*, dx_runtime_start/stop/run and dx_lua_runtime_free are called
** on the thread that runs the runtime's loop (before the loop runs, any single thread).
** dx_runtime_request_stop may be called from any thread. Clients are independent objects and
** may live on other threads.
*/

/** A C activity. Called once per delivery of the activity.
**  @param[in] info        the invocation (instance, name, attempt, ...); borrowed for the call.
**  @param[in] input_json  the input as JSON text (never NULL; "null" for no input); borrowed.
**  @param[out] output_json on success, malloc'd JSON text for the output, or left NULL for
**                          JSON null. The runtime frees it with free().
**  @param[out] error_message on failure, a malloc'd message (may be left NULL). The runtime
**                          frees it with free().
**  @param[in] userdata    the pointer given to dx_register_activity.
**  @return 0 for success (the output is validated: text that is not JSON, or larger than
**          DX_MAX_PAYLOAD_BYTES, fails the activity), non-zero for an application failure that
**          reaches the orchestration as `nil, err` with err.message = *error_message.
**  Runs on a libuv thread-pool thread (the default) or on the loop thread (DX_ACTIVITY_ON_LOOP);
**  a thread-pool activity must not call dx_runtime_* functions nor touch Lua. */
typedef int (*dx_activity_fn)(const dx_activity_info_t *info, const char *input_json,
                              char **output_json, char **error_message, void *userdata);

/** Where a C activity runs (flags of dx_register_activity_ex). */
enum {
  DX_ACTIVITY_ON_POOL = 0, /**< libuv thread pool (uv_queue_work); the result returns to the
                                loop. Default. Pool size: UV_THREADPOOL_SIZE (libuv: 4). */
  DX_ACTIVITY_ON_LOOP = 1  /**< the loop thread, synchronously: only for quick, non-blocking
                                work (it stalls every orchestration of the runtime while it runs) */
};

/** Register C activity `name` running `fn` on the libuv thread pool.
**  Same as dx_register_activity_ex(rt, name, fn, userdata, DX_ACTIVITY_ON_POOL, err). */
int dx_register_activity(dx_runtime_t *rt, const char *name, dx_activity_fn fn, void *userdata,
                         dx_error_t *err);

/** Register C activity `name`.
**  A C activity takes precedence over a Lua activity (duroxide.activity) of the same name.
**  Registering is allowed before dx_runtime_start and while the runtime runs; deliveries of
**  `name` fetched before the registration were handed back as unregistered and come back after
**  the unregistered backoff (1 s, 2 s, ...).
**  @param[in] rt       the runtime (not stopped).
**  @param[in] name     1 to 200 bytes, no control characters, not starting with "__duroxide";
**                      copied.
**  @param[in] fn       the function (non-NULL).
**  @param[in] userdata passed to fn; borrowed: it must stay valid until dx_runtime_free, and
**                      until the loop has finished running if a pool activity may still be
**                      running past the shutdown grace period.
**  @param[in] flags    DX_ACTIVITY_ON_POOL or DX_ACTIVITY_ON_LOOP.
**  @return DX_OK; DX_EINVAL (NULL rt/name/fn, invalid name or flags), DX_EEXIST (a C activity
**          of that name is already registered), DX_ECLOSED (the runtime is stopping or stopped),
**          DX_ENOMEM.
**  Thread: the runtime's loop thread. */
int dx_register_activity_ex(dx_runtime_t *rt, const char *name, dx_activity_fn fn,
                            void *userdata, int flags, dx_error_t *err);

/** Run the runtime's loop until the runtime has stopped (dx_runtime_stop from a loop callback,
**  or dx_runtime_request_stop from any thread), then return. Starts the runtime first when it
**  was not started. Works on the runtime's own loop and on a caller's loop (other handles on
**  that loop run too; the call still returns once the runtime has stopped).
**  @return DX_OK once stopped; DX_EINVAL (NULL rt), DX_ESTATE (already inside dx_runtime_run
**          for this runtime, e.g. called from a callback), DX_ECLOSED (already stopped), or an
**          error of dx_runtime_start.
**  Thread: the runtime's loop thread; never from inside a callback of that loop. */
int dx_runtime_run(dx_runtime_t *rt, dx_error_t *err);

/** Ask a runtime driven by dx_runtime_run to stop gracefully (as dx_runtime_stop). Returns at
**  once; dx_runtime_run returns when the stop is complete. When dx_runtime_run is not running,
**  the request is remembered and the next dx_runtime_run stops right after starting.
**  @return DX_OK, or DX_EINVAL for NULL.
**  Thread: any (not async-signal-safe). */
int dx_runtime_request_stop(dx_runtime_t *rt);

/** 1 once the runtime has stopped (its stop callback ran, or it was stopped before starting);
**  0 otherwise and for NULL. */
int dx_runtime_is_stopped(const dx_runtime_t *rt);

#endif
