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
} dx_options_t;

/** Fill defaults. */
void dx_options_init(dx_options_t *o);
/** Check values; DX_EINVAL with a message naming the option on a bad value. */
int dx_options_validate(const dx_options_t *o, dx_error_t *err);
/** Set one option from its command-line name ("worker-concurrency", "session-idle-timeout",
**  ...; '_' and '-' are interchangeable) and text value ("10", "30s", "5m", "250ms").
**  DX_EINVAL naming the option and value when either is bad. */
int dx_options_set(dx_options_t *o, const char *name, const char *value, dx_error_t *err);
/** Parse "250ms", "30s", "5m", "1h" or a bare number of ms. DX_EINVAL on bad text. */
int dx_parse_duration(const char *text, int64_t *out_ms);

/* {===== runtime =====} */

typedef struct dx_runtime_s dx_runtime_t;
typedef void (*dx_runtime_stop_cb)(dx_runtime_t *rt, void *ud);

/** Create a runtime on `loop` over provider `p` (borrowed; must outlive the runtime) running
**  code through `host`. The runtime is idle until dx_runtime_start. *out owned by caller. */
int dx_runtime_new(dx_runtime_t **out, uv_loop_t *loop, dx_provider_t *p,
                   const dx_options_t *opts, const dx_host_methods_t *host, void *host_ud,
                   dx_error_t *err);
/** Start the dispatchers and the store thread. */
int dx_runtime_start(dx_runtime_t *rt, dx_error_t *err);
/** Graceful stop: take no new work, let running activities finish for up to
**  shutdown_grace_ms, hand back the rest, commit, then call cb on the loop thread. */
void dx_runtime_stop(dx_runtime_t *rt, dx_runtime_stop_cb cb, void *ud);
/** Free a stopped (or never started) runtime. */
void dx_runtime_free(dx_runtime_t *rt);
/** This process's worker id (borrowed, valid for the runtime's life). */
const char *dx_runtime_worker_id(const dx_runtime_t *rt);
/** Wake the store thread now (work was enqueued in this process). Thread-safe. */
void dx_runtime_poke(dx_runtime_t *rt);
/** Counters for tests and benchmarks. */
typedef struct dx_runtime_stats_s {
  uint64_t turns, activities, commits, fetch_cycles;
} dx_runtime_stats_t;
void dx_runtime_stats(const dx_runtime_t *rt, dx_runtime_stats_t *out);

/* {===== client =====} */

typedef struct dx_client_s dx_client_t;

/** Open a client on the LMDB store in `store_dir` (created if missing). */
int dx_client_open(dx_client_t **out, const char *store_dir, dx_error_t *err);
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
/** Request cancellation. DX_ENOTFOUND for an unknown instance. */
int dx_client_cancel(dx_client_t *c, const char *id, const char *reason, dx_error_t *err);
/** Status of the latest execution. An unknown instance gives DX_OK with
**  out->status == DX_STATUS_NONE. Clear *out with dx_instance_info_clear. */
int dx_client_status(dx_client_t *c, const char *id, dx_instance_info_t *out,
                     dx_error_t *err);
/** Poll until Completed/Failed or timeout_ms passes (DX_ETIMEDOUT, *out holds the last
**  status). */
int dx_client_wait(dx_client_t *c, const char *id, int64_t timeout_ms, dx_instance_info_t *out,
                   dx_error_t *err);
/** Status as a canonical JSON object {"instance_id":..,"status":..,"output":..|"error":..}
**  (malloc'd). */
char *dx_instance_info_to_json(const char *id, const dx_instance_info_t *info);
/** "Running", "Completed", "Failed", "NotFound" (continued-as-new reads as Running). */
const char *dx_status_name(int status);
/** JSON text of one event (malloc'd), as `duroxide-lua history` prints it. */
char *dx_event_to_json(const dx_event_t *e);

#endif
