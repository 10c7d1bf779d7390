/*
** duroxide/executor.h -- how a language binding runs user code for the engine.
**
** The engine (core/) knows nothing about Lua. A binding supplies dx_host_methods_t: it
** resolves names, runs orchestration code one turn at a time against a dx_turn_t, and runs
** activities asynchronously on the runtime's loop.
**
** Orchestration protocol (one turn): the engine calls orch_start() once, then orch_resume()
** at start and after every delivery the code may be waiting for. While running, the code calls
** dx_turn_emit() for every schedule call (at call time, not at await time), dx_turn_poll() to
** see whether a future is resolved, and dx_turn_cancel() for select losers. orch_resume()
** returns DX_RUN_PENDING (suspended on an unresolved future), DX_RUN_DONE (returned output),
** DX_RUN_FAILED (raised) or DX_RUN_CAN (continue_as_new was emitted).
**
** Threads: everything here runs on the runtime's loop thread.
*/
#ifndef DUROXIDE_EXECUTOR_H
#define DUROXIDE_EXECUTOR_H

#include <stdint.h>

#include "duroxide/provider.h"

typedef struct dx_turn_s dx_turn_t;
typedef struct dx_activity_s dx_activity_t;

enum { DX_RUN_PENDING = 0, DX_RUN_DONE = 1, DX_RUN_FAILED = 2, DX_RUN_CAN = 3 };

/** What orchestration code emits. All strings borrowed for the call. */
typedef enum {
  DX_ACT_ACTIVITY = 1,  /* name, input, session_id, tag */
  DX_ACT_TIMER = 2,     /* delay_ms */
  DX_ACT_WAIT = 3,      /* name (event name) */
  DX_ACT_SUB = 4,       /* name, version, input, instance (NULL = generated child id) */
  DX_ACT_CHAINED = 5,   /* name, version, input, instance (fire and forget) */
  DX_ACT_STATUS = 6,    /* input = custom status JSON (NULL clears) */
  DX_ACT_SYSCALL = 7,   /* name = "utc_now" | "new_guid" | "random"; value returned at once */
  DX_ACT_CAN = 8,       /* input, version (continue as new; terminal) */
  DX_ACT_CLOSE_SESSION = 9, /* session_id: release the session on its owner */
  DX_ACT_KV_SET = 10,       /* name = key, input = value JSON (no future) */
  DX_ACT_KV_CLEAR = 11,     /* name = key (no future) */
  DX_ACT_KV_CLEAR_ALL = 12, /* (no future) */
  DX_ACT_DEQUEUE = 13       /* name = queue: a future of its next message */
} dx_action_kind_t;

typedef struct dx_action_s {
  int kind;
  const char *name;
  const char *version;
  const char *input;
  const char *instance;
  const char *session_id;
  int64_t delay_ms;
  int on_moved_fail;      /* ACTIVITY on a session: fail SessionMoved (unrun) when the session's
                             owner is not the worker that ran this instance's previous activity
                             on it (dx_turn_session_worker) */
  const char *tag;          /* ACTIVITY: routing tag; NULL or "default" = untagged */
} dx_action_t;

/** Record an action. *token identifies the durable future (0 for STATUS, CAN and KV_*). For SYSCALL,
**  *value receives the recorded value (borrowed, valid for the turn). Returns DX_OK, or
**  DX_ENONDET when the action does not match history (the turn then fails whatever the code
**  does next; the binding should stop the code), DX_ETOOBIG for an oversized input. */
int dx_turn_emit(dx_turn_t *t, const dx_action_t *a, uint64_t *token, const char **value);

enum { DX_FUT_PENDING = 0, DX_FUT_OK = 1, DX_FUT_ERR = 2 };
/** State of a future. For OK, *data is the result JSON (borrowed for the turn; may be NULL
**  for timers). For ERR, *fail is the application failure (borrowed only until the next
**  dx_turn_emit: copy it before emitting). *order is the history position of the completion
**  (select uses it: earliest completion wins). */
int dx_turn_poll(dx_turn_t *t, uint64_t token, const char **data, const dx_failure_t **fail,
                 uint64_t *order);
/** Cancel an unresolved future (select loser): activities are withdrawn from the queue,
**  sub-orchestrations cancelled, waits unsubscribed. No-op when resolved. */
void dx_turn_cancel(dx_turn_t *t, uint64_t token);

/** Metadata for ctx fields. Strings borrowed for the turn. */
const char *dx_turn_instance(const dx_turn_t *t);
uint64_t dx_turn_execution(const dx_turn_t *t);
const char *dx_turn_name(const dx_turn_t *t);
const char *dx_turn_version(const dx_turn_t *t);
/** The running runtime's turn_instruction_budget (its final options: command line over
**  duroxide.configure); 0 when the turn was not started by a runtime (the host decides). */
int64_t dx_turn_instruction_budget(const dx_turn_t *t);
/** The running runtime's turn_time_limit in ms (same sources); 0 when off or not started by a
**  runtime: the turn then has no wall-clock limit. */
int64_t dx_turn_time_limit(const dx_turn_t *t);
int dx_turn_is_replaying(const dx_turn_t *t);
/** Key-value state as the code sees it: the committed state plus this execution's writes so
**  far. dx_turn_kv_get: the value JSON of `key` or NULL. dx_turn_kv_at: entry i (ascending
**  key) of dx_turn_kv_count, NULL past the end. Borrowed until the next dx_turn_emit.
**  KV_SET refuses (DX_EINVAL / DX_ETOOBIG, nothing recorded) a key that is empty or longer than
**  DX_MAX_KV_KEY_BYTES, a value over DX_MAX_KV_VALUE_BYTES, and a new key past
**  DX_MAX_KV_KEYS. */
const char *dx_turn_kv_get(const dx_turn_t *t, const char *key);
size_t dx_turn_kv_count(const dx_turn_t *t);
const dx_kv_entry_t *dx_turn_kv_at(const dx_turn_t *t, size_t i);
/** The custom status as the code sees it (JSON; NULL = none). Borrowed for the turn step. */
const char *dx_turn_custom_status(const dx_turn_t *t);
/** The worker recorded by the latest completion the code has seen so far of an activity of
**  this execution on session `session_id` (NULL: none yet, or recorded before workers were).
**  Deterministic on replay: it is read from history. Borrowed for the turn. */
const char *dx_turn_session_worker(dx_turn_t *t, const char *session_id);
/** Set by the binding before returning DX_RUN_DONE / DX_RUN_FAILED (copied). */
void dx_turn_set_output(dx_turn_t *t, const char *json);
void dx_turn_set_failure(dx_turn_t *t, int category, const char *kind, const char *message);
/** The turn's failure message once it failed (nondeterminism etc.), else NULL. */
const char *dx_turn_error(const dx_turn_t *t);
/** Log through the runtime logger unless replaying. */
void dx_turn_trace(dx_turn_t *t, int level, const char *message);

/** An activity invocation handed to the binding. Strings borrowed until completion. */
typedef struct dx_activity_info_s {
  const char *instance;
  uint64_t execution_id;
  uint64_t activity_id;
  const char *name;
  const char *input;
  const char *session_id;   /* NULL unless scheduled on a session */
  const char *worker_id;
  uint32_t attempt;
  const char *tag;          /* NULL unless scheduled with a tag */
} dx_activity_info_t;

const dx_activity_info_t *dx_activity_info(const dx_activity_t *a);
/** Finish an activity (exactly once): output JSON, or an application failure message.
**  Copies its arguments. After this the dx_activity_t must not be used. */
void dx_activity_complete(dx_activity_t *a, const char *output_json);
void dx_activity_fail(dx_activity_t *a, const char *message);
/** 1 once the runtime lost the activity's lock (cancelled by the orchestration, or stolen),
**  or, for a session activity, once this worker no longer holds the session it started under
**  (lease lapsed during a stall, lost, aborted): its result is then handed back, not recorded. */
int dx_activity_is_cancelled(const dx_activity_t *a);
/** Give up the activity's session on this worker now (its in-memory state is bad): the
**  released hook fires with "aborted", the lease is released in the store and the session's
**  queued work goes to the next claimer. Every activity of the session running here, this one
**  included, is cancelled: its result is handed back and runs again on the next claimer.
**  reason is borrowed (may be NULL; logged). DX_EINVAL when the activity is not on a session,
**  DX_ETOOBIG for a reason over DX_MAX_REASON_BYTES, DX_ESTATE when the session is no longer
**  held here (already lost or aborted) or the activity has finished. Thread: the loop. */
int dx_activity_abort_session(dx_activity_t *a, const char *reason, dx_error_t *err);
/** Opaque per-activity slot for the binding. */
void dx_activity_set_userdata(dx_activity_t *a, void *ud);
void *dx_activity_userdata(const dx_activity_t *a);

enum { DX_LOG_ERROR = 0, DX_LOG_WARN = 1, DX_LOG_INFO = 2, DX_LOG_DEBUG = 3 };

typedef struct dx_host_methods_s {
  int version; /* 5 */
  /** 1 when an orchestration `name` (version NULL = latest) is registered; *resolved receives
  **  the version string (static or host-owned, borrowed). */
  int (*orch_lookup)(void *host, const char *name, const char *version, const char **resolved);
  /** Create the code instance for a turn. DX_OK, or an error with `err` filled. */
  int (*orch_start)(void *host, dx_turn_t *t, const char *name, const char *version,
                    const char *input, void **inst, dx_error_t *err);
  int (*orch_resume)(void *host, void *inst, dx_turn_t *t);
  void (*orch_free)(void *host, void *inst);
  int (*activity_lookup)(void *host, const char *name);
  /** Start an activity; it finishes later through dx_activity_complete/fail. */
  void (*activity_start)(void *host, dx_activity_t *a);
  /** The runtime is giving up on a running activity (shutdown grace expired). The binding
  **  must stop touching `a`; the runtime releases it after this returns. */
  void (*activity_abort)(void *host, dx_activity_t *a);
  /* methods above are version 1 */
  /** This process now owns `session_id`; how is "new" or "reclaim". May be NULL. */
  void (*session_claimed)(void *host, const char *session_id, const char *how);
  /** This process no longer owns `session_id`; reason is "idle", "closed", "shutdown",
  **  "lost", "ended" or "aborted" (and "upgrade"). Free per-session memory here. May be NULL. */
  void (*session_released)(void *host, const char *session_id, const char *reason);
  /* methods above are version 2 */
  /** As session_claimed / session_released, also naming the worker id of the runtime whose
  **  session manager fired (several runtimes may share one host, e.g. simulated workers in
  **  tests). When set, they are called instead of the version 2 methods. May be NULL. */
  void (*session_claimed_by)(void *host, const char *session_id, const char *how,
                             const char *worker_id);
  void (*session_released_by)(void *host, const char *session_id, const char *reason,
                              const char *worker_id);
  /* methods above are version 3 */
  /** Rolling deployments: the orchestrations this host can run (name and version), so the
  **  worker fetches only work it can run. Called from the runtime's store thread, so it must
  **  not touch the host's interpreter: it reads a snapshot the host keeps. When the host's
  **  registrations changed since `known` (0 = never asked), *gen receives the new generation
  **  and *caps / *n a copy (caller-owned: free each name and version, then the array) and 1 is
  **  returned; 0 when nothing changed; negative DX_E* on failure. May be NULL (the worker then
  **  takes every orchestration). */
  int (*orch_capabilities)(void *host, uint64_t known, uint64_t *gen,
                           dx_orch_capability_t **caps, size_t *n);
  /* methods above are version 4 */
  /** Orchestration cache (version 5; both may be NULL: the runtime then never keeps code
  **  alive between turns). orch_turn: a kept instance `inst` (suspended where its previous
  **  turn left it) starts a new turn on `t`: 0, after giving it the fresh per-turn budgets a
  **  new instance would get; non-zero when the code registered for its orchestration and
  **  version is no longer the code it runs (re-registered): the runtime then frees it and
  **  replays the history on the registered code. t NULL: the turn ended and `inst` is kept
  **  suspended (its ctx must fail cleanly until the next turn, as a finished turn's does).
  **  orch_size: bytes the instance's code holds in the host (an honest estimate: the host's
  **  allocator growth while it ran), for the cache's memory budget. */
  int (*orch_turn)(void *host, void *inst, dx_turn_t *t);
  size_t (*orch_size)(void *host, void *inst);
  /* methods above are version 5 */
} dx_host_methods_t;

#endif
