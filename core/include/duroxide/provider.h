/*
** duroxide/provider.h -- the store interface, for provider authors.
**
** A provider is a struct whose first member is `const dx_provider_methods_t *methods`
** (SQLite's VFS shape). Members of dx_provider_methods_t are only ever appended; `version`
** says how many exist. Method names mirror duroxide's Rust Provider trait.
**
** Caveats
** - Methods are synchronous. The runtime decides the threading: it calls a provider from one
**   thread at a time (its store thread), clients call from their own thread. A provider must
**   tolerate other *processes* using the same store concurrently.
** - Group commit: calls made between begin() and commit() on one thread share one
**   transaction and one durable commit. Outside a batch every method is its own transaction.
** - Failures inside a batch. Expected outcomes (lock lost DX_ELOCK, token gone DX_ETOKEN,
**   DX_ENOTFOUND, DX_EEXIST, bad input DX_EINVAL/DX_ETOOBIG) are returned before anything is
**   written, or undone by the provider, and the batch stays usable. Any other error may spoil
**   the batch: commit() then fails and nothing of the batch is kept. The store thread then
**   retries the whole batch when the error is DX_ERETRY (deadlock, serialization failure, lost
**   connection: nothing was applied and the same calls may succeed), and otherwise applies
**   each operation in a transaction of its own, so one bad operation cannot fail its
**   neighbours. A provider need not (and on a SQL database should not) scope every method to a
**   nested transaction. A batch opened with begin_atomic (version 12) need not contain a failed
**   call at all: its caller rolls it back whole.
** - Concurrency: other processes run batches at the same time (on a SQL database, under READ
**   COMMITTED). Every enqueue must leave its instance visibly due even when a concurrent
**   release runs, and a START enqueued for an instance id that already exists, or whose START
**   is already queued, fails with DX_EEXIST from a uniqueness check in the store itself (the
**   client relies on it; it does not read first).
** - Every time-dependent method takes `now_ms` (wall clock, ms since the epoch) from the
**   caller, so tests can run on a virtual clock.
** - Ownership: inputs are borrowed for the call; everything returned through an out-param is
**   caller-owned and released with the matching dx_*_free / dx_*_clear function.
** - Errors: methods return 0 or a negative DX_E* code, with detail in `err` (may be NULL).
*/
#ifndef DUROXIDE_PROVIDER_H
#define DUROXIDE_PROVIDER_H

#include <stddef.h>
#include <stdint.h>

#include "duroxide/errors.h"

/* {===== model =====} */

/** History event kinds (duroxide EventKind). Values are stored: never renumber. */
typedef enum {
  DX_EV_ORCH_STARTED = 1,     /* name, version, data=input, instance=parent instance, parent_id */
  DX_EV_ORCH_COMPLETED = 2,   /* data=output */
  DX_EV_ORCH_FAILED = 3,      /* fail */
  DX_EV_ORCH_CAN = 4,         /* data=new input (continued as new) */
  DX_EV_ORCH_CANCEL_REQ = 5,  /* reason */
  DX_EV_ACT_SCHEDULED = 6,    /* name, data=input, session_id, tag */
  DX_EV_ACT_COMPLETED = 7,    /* source_id, data=result */
  DX_EV_ACT_FAILED = 8,       /* source_id, fail */
  DX_EV_ACT_CANCEL_REQ = 9,   /* source_id, reason */
  DX_EV_TIMER_CREATED = 10,   /* fire_at_ms */
  DX_EV_TIMER_FIRED = 11,     /* source_id, fire_at_ms */
  DX_EV_EXT_SUBSCRIBED = 12,  /* name */
  DX_EV_EXT_EVENT = 13,       /* name, data */
  DX_EV_EXT_SUB_CANCELLED = 14, /* source_id, reason */
  DX_EV_SUB_SCHEDULED = 15,   /* name, version, instance=child id, data=input */
  DX_EV_SUB_COMPLETED = 16,   /* source_id, data=result */
  DX_EV_SUB_FAILED = 17,      /* source_id, fail */
  DX_EV_SUB_CANCEL_REQ = 18,  /* source_id, reason */
  DX_EV_ORCH_CHAINED = 19,    /* name, version, instance, data=input (fire and forget) */
  DX_EV_CUSTOM_STATUS = 20,   /* data=status JSON or NULL (cleared) */
  DX_EV_SYSCALL = 21,         /* name=operation ("utc_now", "new_guid", "random"), data=value */
  DX_EV_SESSION_CLOSED = 22,  /* session_id (ctx:close_session; fire and forget) */
  /* key-value state and event queues (issue 11) */
  DX_EV_KV_SET = 23,          /* name=key, data=value JSON, timestamp_ms=last updated */
  DX_EV_KV_CLEARED = 24,      /* name=key */
  DX_EV_KV_CLEARED_ALL = 25,  /* (nothing) */
  DX_EV_QUEUE_SUBSCRIBED = 26, /* name=queue (ctx:dequeue_event) */
  DX_EV_QUEUE_EVENT = 27,     /* name=queue, data (a message arrived; kept until dequeued) */
  DX_EV_QUEUE_SUB_CANCELLED = 28, /* source_id, reason */
  DX_EV__COUNT
} dx_event_kind_t;

/** Error categories (duroxide ErrorDetails). Only APPLICATION reaches user code. */
typedef enum {
  DX_CAT_NONE = 0,
  DX_CAT_APPLICATION = 1,
  DX_CAT_INFRASTRUCTURE = 2,
  DX_CAT_CONFIGURATION = 3,
  DX_CAT_POISON = 4
} dx_category_t;

/** A failure: category, a kind word ("ActivityFailed", "OrchestrationFailed", "Panicked",
**  "Cancelled", "Nondeterminism", "Unregistered", "Timeout", ...) and a message. */
typedef struct dx_failure_s {
  int category;     /* dx_category_t */
  char *kind;       /* owned, may be NULL */
  char *message;    /* owned, may be NULL */
  int retryable;
} dx_failure_t;

/** One history event. Unused strings are NULL, unused numbers 0. All strings owned. */
typedef struct dx_event_s {
  int kind;             /* dx_event_kind_t */
  uint64_t event_id;    /* >= 1, position in the execution */
  uint64_t source_id;   /* completions and breadcrumbs: the scheduling event id */
  int64_t timestamp_ms;
  char *name;
  char *version;
  char *data;           /* canonical JSON text */
  char *instance;
  char *session_id;
  char *reason;
  uint64_t parent_id;
  uint64_t parent_execution_id;
  int64_t fire_at_ms;
  dx_failure_t fail;
  char *custom_status;  /* ORCH_STARTED of a continued execution: the custom status it
                           starts with (JSON; NULL = none) */
  char *worker_id;      /* ACT_COMPLETED / ACT_FAILED of a session activity: the worker that
                           ran it (or refused it: SessionMoved) */
  char *tag;            /* ACT_SCHEDULED: routing tag (NULL = untagged, "default") */
  void *arena;          /* a decoded event: one owned block holding its strings (fail's too),
                           freed by dx_event_clear; NULL = each string is its own malloc.
                           Never free() a string that lies in it: clear the event instead */
} dx_event_t;

/** Work item kinds (duroxide WorkItem). Values are stored: never renumber. */
typedef enum {
  DX_WI_START = 1,          /* instance, name, version, data=input, parent_instance, parent_id,
                               parent_execution_id, execution_id */
  DX_WI_ACT_EXECUTE = 2,    /* worker queue: instance, execution_id, id, name, data, session_id,
                               tag */
  DX_WI_ACT_COMPLETED = 3,  /* instance, execution_id, id, data */
  DX_WI_ACT_FAILED = 4,     /* instance, execution_id, id, fail */
  DX_WI_TIMER_FIRED = 5,    /* instance, execution_id, id, fire_at_ms (delayed visibility) */
  DX_WI_EXTERNAL = 6,       /* instance, name, data */
  DX_WI_SUB_COMPLETED = 7,  /* instance=parent, execution_id=parent exec, id=parent_id, data */
  DX_WI_SUB_FAILED = 8,     /* instance=parent, execution_id=parent exec, id=parent_id, fail */
  DX_WI_CANCEL = 9,         /* instance, reason */
  DX_WI_CAN = 10,           /* instance, name, version, data=input (continue as new) */
  DX_WI_SESSION_CLOSE = 11, /* worker queue: instance, execution_id, id, session_id. The close
                               marker ctx:close_session() routes to the session's owner, behind
                               the session's earlier work. fetch_work_item hands it to the owner
                               like any session row; at the head of a session nobody holds it is
                               deleted (with the session row when no rows are left) instead of
                               claiming the session. */
  DX_WI_QUEUE_MESSAGE = 12, /* instance, name=queue, data (client:enqueue_event). execution_id
                               0; a message carried across continue-as-new holds the new
                               execution's id and is delivered before newer ones */
  DX_WI__COUNT
} dx_work_kind_t;

/** One queue message. `instance` is always the routing instance. All strings owned. */
typedef struct dx_work_item_s {
  int kind;                 /* dx_work_kind_t */
  char *instance;
  uint64_t execution_id;
  uint64_t id;
  char *name;
  char *version;
  char *data;
  char *parent_instance;
  uint64_t parent_id;
  uint64_t parent_execution_id;
  char *session_id;
  char *reason;
  int64_t fire_at_ms;
  dx_failure_t fail;
  char *custom_status;      /* CAN: the custom status the next execution starts with */
  char *worker_id;          /* ACT_COMPLETED / ACT_FAILED of a session activity: the worker that
                               ran it. ACT_EXECUTE (on_moved = "fail"): the worker that must own
                               the session, else the activity fails SessionMoved unrun. */
  char *tag;                /* ACT_EXECUTE: routing tag (NULL = untagged) */
  void *arena;              /* as dx_event_t.arena: a decoded item's strings in one block */
} dx_work_item_t;

/** Execution status as stored. */
typedef enum {
  DX_STATUS_NONE = 0, /* no change (in acks) / not found (in reads) */
  DX_STATUS_RUNNING = 1,
  DX_STATUS_COMPLETED = 2,
  DX_STATUS_FAILED = 3,
  DX_STATUS_CONTINUED_AS_NEW = 4
} dx_status_t;

/** What fetch_orchestration_item hands the runtime: one locked instance and its messages. */
typedef struct dx_orch_item_s {
  char *instance;
  char *orchestration_name;   /* from the instance record, else the START/CAN message */
  char *orchestration_version;
  uint64_t execution_id;      /* latest execution (1 for a brand-new instance) */
  dx_event_t *history;        /* latest execution, ascending event_id */
  size_t history_len;
  dx_work_item_t *messages;   /* every visible message of the instance, oldest first */
  size_t messages_len;
  uint64_t lock_token;
  uint32_t attempt_count;     /* max over the batch, after this fetch's increment */
  int history_error;          /* DX_ECORRUPT when history could not be decoded (history empty) */
  char *history_error_msg;
  struct dx_kv_entry_s *kv;   /* committed key-value state (as of the end of the previous
                                 execution; never the current one's writes), ascending key */
  size_t kv_len;
  uint64_t history_held;      /* version 11 (set_history_hint): the caller holds this many
                                 events of execution_id, which is what the store holds: history
                                 then has only the last of them (history_len 1). 0: history is
                                 the whole execution, as always */
} dx_orch_item_t;

/** One key-value entry of an instance (strings owned). */
typedef struct dx_kv_entry_s {
  char *key;
  char *value;          /* canonical JSON */
  int64_t updated_ms;   /* when it was last set (orchestration clock) */
} dx_kv_entry_t;

/** Callback for key-value listings: return non-zero to stop. Strings borrowed for the call. */
typedef int (*dx_kv_cb)(void *ud, const char *key, const char *value, int64_t updated_ms);

/** Identity of a worker-queue row, for lock stealing (cancelled activities). */
typedef struct dx_activity_ref_s {
  const char *instance;
  uint64_t execution_id;
  uint64_t activity_id;
} dx_activity_ref_t;

/** One orchestration turn's commit (duroxide ack_orchestration_item). All borrowed. */
typedef struct dx_orch_ack_s {
  const char *instance;
  uint64_t lock_token;
  uint64_t execution_id;
  const dx_event_t *delta;              /* appended verbatim */
  size_t delta_len;
  const dx_work_item_t *worker_items;   /* ACT_EXECUTE, visible now */
  size_t worker_items_len;
  const dx_work_item_t *orch_items;     /* TIMER_FIRED visible at fire_at_ms, others now */
  size_t orch_items_len;
  const dx_activity_ref_t *cancelled;   /* worker rows to delete (missing rows are fine) */
  size_t cancelled_len;
  /* metadata */
  int status;                           /* dx_status_t; NONE = unchanged */
  const char *output;                   /* COMPLETED: output JSON; CAN: new input */
  const dx_failure_t *failure;          /* FAILED */
  const char *orchestration_name;       /* set when the delta starts an execution */
  const char *orchestration_version;
  const char *parent_instance;
  int custom_status_set;                /* 1: custom_status replaces the stored value */
  const char *custom_status;            /* NULL with custom_status_set = cleared */
} dx_orch_ack_t;

/** What fetch_work_item hands the runtime. */
typedef struct dx_work_fetch_s {
  dx_work_item_t item;
  uint64_t lock_token;
  uint32_t attempt_count;   /* after this fetch's increment */
  int session_claimed;      /* 1 when this fetch made the worker the session's owner (the row
                               was new, unowned, released, or its lease had lapsed) */
  char *previous_owner;     /* on a claim: the owner before it (NULL if none); owned */
  int64_t waited_ms;        /* on a claim: how long the row had been due before this fetch */
} dx_work_fetch_t;

/** Session side of a work fetch. NULL = this worker takes no session work. */
typedef struct dx_session_cfg_s {
  const char *worker_id;
  int64_t session_lock_ms;
  uint32_t max_sessions;    /* sessions this worker may own at once (live lease); 0 = none */
  /* Rolling upgrades: sessions this worker does not take now (it lacks one of their
  ** activities and handed the session on). A fetch neither claims them nor returns rows of
  ** them that it owns. Borrowed for the call; n_declined 0 = none. */
  const char *const *declined;
  size_t n_declined;
} dx_session_cfg_t;

/** A row of the sessions table (strings owned by the provider; valid during the callback). */
typedef struct dx_session_info_s {
  const char *session_id;
  const char *worker_id;      /* owner; NULL or "" when unowned (released) */
  int64_t locked_until_ms;
  int64_t last_activity_ms;
  uint64_t queued;            /* worker rows of this session (any lock state) */
  uint64_t running;           /* list_sessions: those of them locked now (in flight); 0 in
                                 renew_session_lock's reports */
  int ended;                  /* renew_session_lock only: no rows are left and every instance
                                 that ran activities of the session has ended (completed,
                                 failed, continued as new): the owner releases it ("ended") */
} dx_session_info_t;

/** Callback for session listings: return non-zero to stop. */
typedef int (*dx_session_cb)(void *ud, const dx_session_info_t *s);

/** One entry of a session's history in the store: who claimed it, from whom, who released it
**  and why (append_session_event, list_session_events). Strings borrowed. */
typedef struct dx_session_event_s {
  const char *session_id;
  int64_t at_ms;
  const char *event;          /* "claimed", "moved" (claimed from another worker), "released" */
  const char *worker_id;      /* the worker that claimed or released the session */
  const char *detail;         /* claimed/moved: how ("new", "reclaim"); released: the reason
                                 ("idle", "closed", "shutdown", "lost", "upgrade", ...) */
  const char *previous_owner; /* claimed/moved: the owner before (NULL: none) */
} dx_session_event_t;

/** Callback for list_session_events: return non-zero to stop. */
typedef int (*dx_session_event_cb)(void *ud, const dx_session_event_t *e);

/** A provider keeps at most this many events per session (the oldest go first), and drops
**  events older than DX_SESSION_EVENTS_MAX_AGE_MS in cleanup_orphaned_sessions. */
#define DX_SESSION_EVENTS_KEEP 100
#define DX_SESSION_EVENTS_MAX_AGE_MS (7LL * 24 * 3600 * 1000)

/** Instance summary for status and listing. */
typedef struct dx_instance_info_s {
  char *instance_id;
  char *orchestration_name;
  char *orchestration_version;
  uint64_t current_execution_id;
  int status;                 /* dx_status_t of the current execution */
  char *output;               /* COMPLETED: output JSON */
  dx_failure_t failure;       /* FAILED */
  char *custom_status;        /* JSON or NULL */
  uint64_t custom_status_version;
  char *parent_instance;
  int64_t created_at_ms;
  int64_t updated_at_ms;
} dx_instance_info_t;

/** Queue depths for management. */
typedef struct dx_queue_depths_s {
  uint64_t orchestrator;  /* messages, any state */
  uint64_t worker;
  uint64_t instances;
} dx_queue_depths_t;

/* {===== management types (provider version 6) =====} */

/** list_page's status filter: DX_LIST_ANY, DX_LIST_TERMINAL, or a dx_status_t. DX_STATUS_NONE
**  selects instances whose start is queued and that no worker has run yet ("Pending"). */
#define DX_LIST_ANY (-1)
#define DX_LIST_TERMINAL (-2) /* Completed or Failed */
#define DX_LIST_MAX_LIMIT 1000

/** One page request of list_page. All strings borrowed for the call. */
typedef struct dx_list_query_s {
  int status;                 /* DX_LIST_ANY, DX_LIST_TERMINAL or a dx_status_t */
  const char *name;           /* exact orchestration name; NULL = any */
  int64_t created_after_ms;   /* only instances created strictly after; 0 = any */
  int64_t updated_before_ms;  /* only instances last updated strictly before; 0 = any (purge) */
  int roots_only;             /* 1: skip sub-orchestrations (purge deletes whole trees) */
  const char *after;          /* the `next` cursor of the previous page; NULL/"" = first page */
  size_t limit;               /* rows wanted, 1..DX_LIST_MAX_LIMIT */
} dx_list_query_t;

/** One execution of an instance (list_executions). */
typedef struct dx_execution_info_s {
  uint64_t execution_id;
  int status;                 /* dx_status_t */
  int64_t started_at_ms;
  int64_t completed_at_ms;    /* 0 while running */
  uint64_t event_count;
} dx_execution_info_t;

/** Queue rows of one instance (instance_queue), for describe. Borrowed during the callback. */
enum { DX_QUEUE_ORCHESTRATOR = 1, DX_QUEUE_WORKER = 2 };
typedef struct dx_queued_s {
  int queue;                  /* DX_QUEUE_* */
  const dx_work_item_t *item;
  int64_t visible_at_ms;
  int64_t locked_until_ms;    /* 0: not locked */
  uint32_t attempt;           /* fetches so far */
  const char *locked_by;      /* worker holding it where the store knows (session owner,
                                 instance lock holder); NULL otherwise */
} dx_queued_t;
typedef int (*dx_queued_cb)(void *ud, const dx_queued_t *q);

/* Release helpers (safe on zeroed structs; leave the struct zeroed). */
void dx_failure_clear(dx_failure_t *f);
void dx_event_clear(dx_event_t *e);
void dx_work_item_clear(dx_work_item_t *w);
void dx_events_free(dx_event_t *events, size_t n);
void dx_orch_item_free(dx_orch_item_t *item);
void dx_instance_info_clear(dx_instance_info_t *info);
void dx_kv_entries_free(dx_kv_entry_t *kv, size_t n);
/** Clears every row, then frees the array (NULL is ignored). */
void dx_instance_infos_free(dx_instance_info_t *rows, size_t n);
/* Deep copies; return DX_OK or DX_ENOMEM. */
int dx_failure_copy(dx_failure_t *dst, const dx_failure_t *src);
int dx_event_copy(dx_event_t *dst, const dx_event_t *src);
int dx_work_item_copy(dx_work_item_t *dst, const dx_work_item_t *src);

/* {===== fetch filter (provider version 9) =====} */

/** One orchestration a worker can run: name and version registered there. */
typedef struct dx_orch_capability_s {
  const char *name;
  const char *version;
} dx_orch_capability_t;

/** Free an owned array of n capabilities: each name and version, then the array (NULL: no-op). */
void dx_orch_capabilities_free(dx_orch_capability_t *caps, size_t n);

/** What a worker takes from the queues (set_fetch_filter). Borrowed for the call; the
**  provider keeps its own copy.
**  Activities: rows whose tag is one of `tags` (n_tags <= DX_MAX_WORKER_TAGS), and untagged
**  rows when `untagged` is set (duroxide's DefaultOnly / Tags / DefaultAnd; no tags and
**  untagged 0 = no activity work at all). Session rows are filtered the same way.
**  Orchestrations (rolling deployments): when `capabilities_set`, only instances this worker
**  can run: a new instance whose start names a registered orchestration (any registered
**  version when the start pins none, else that version), an instance whose stored name and
**  version are registered, and instances whose name is not known yet (messages without a
**  start). A provider that has not been given a filter takes untagged rows and every
**  instance. */
typedef struct dx_fetch_filter_s {
  int untagged;
  const char *const *tags;
  size_t n_tags;
  int capabilities_set;
  const dx_orch_capability_t *capabilities;
  size_t n_capabilities;
} dx_fetch_filter_t;

/** Does `f` (NULL = no filter: untagged only) accept a row tagged `tag` (NULL = untagged)? */
int dx_fetch_filter_accepts_tag(const dx_fetch_filter_t *f, const char *tag);
/** Does `f` (NULL: yes) accept an orchestration `name` at `version` (NULL: not pinned, any
**  registered version will do; name NULL: not known yet)? */
int dx_fetch_filter_accepts_orch(const dx_fetch_filter_t *f, const char *name,
                                 const char *version);
/** Deep copy into *out (free with dx_fetch_filter_free). DX_OK, DX_ENOMEM, or DX_EINVAL
**  (more than DX_MAX_WORKER_TAGS tags, an empty or over-long tag) naming the problem. */
int dx_fetch_filter_copy(const dx_fetch_filter_t *src, dx_fetch_filter_t **out, dx_error_t *err);
void dx_fetch_filter_free(dx_fetch_filter_t *f);

/* {===== live workers (provider version 10) =====} */

/** One live worker registration (list_workers). Strings borrowed during the callback. */
typedef struct dx_worker_info_s {
  const char *worker_id;
  const char *host;             /* host name the worker registered from (NULL: unknown) */
  int64_t pid;                  /* its process id on that host (0: unknown) */
  int64_t started_at_ms;        /* when it registered (worker_register's now_ms) */
  uint64_t running_turns;       /* instance locks its store handle holds now */
  uint64_t running_activities;  /* plain (non-session) worker rows its handle holds locked now;
                                   session rows are counted per session (list_sessions) */
} dx_worker_info_t;

/** Callback for list_workers: return non-zero to stop. */
typedef int (*dx_worker_cb)(void *ud, const dx_worker_info_t *w);
/* {===== history hint (provider version 11) =====} */

/** What a fetching worker already holds (the orchestration cache): held() returns 1 with the
**  execution and the number of its events the caller holds for `instance`, else 0. Called by
**  the thread that fetches, inside the fetch; it must not call the provider. */
typedef struct dx_history_hint_s {
  int (*held)(void *ud, const char *instance, uint64_t *execution_id, uint64_t *n_events);
  void *ud;
  /** May be NULL. For a provider that names the histories it skips before it knows which
  **  instances a fetch locks (one statement locks and reads them: PostgreSQL): up to `max`
  **  held histories, most recently used first, into ids (malloc'd copies the provider frees),
  **  execution_ids and n_events; returns how many. */
  size_t (*recent)(void *ud, size_t max, char **ids, uint64_t *execution_ids,
                   uint64_t *n_events);
} dx_history_hint_t;

/* {===== provider vtable =====} */

typedef struct dx_provider_s dx_provider_t;

/** One acknowledgement handed to run_cycle: an orchestration turn (`orch` set) or a worker
**  item (`orch` NULL: `work_token` and `completion`, which may be NULL). */
typedef struct dx_cycle_ack_s {
  const dx_orch_ack_t *orch;        /* borrowed */
  uint64_t work_token;
  const dx_work_item_t *completion; /* borrowed, may be NULL */
  int rc;                           /* out: what ack_orchestration_item / ack_work_item return */
  dx_error_t err;                   /* out: detail when rc != 0 */
} dx_cycle_ack_t;

/** The acks and fetches of one store cycle (run_cycle). The caller allocates the out arrays
**  with room for max_orch / max_work entries; what lands there is caller-owned as with
**  fetch_orchestration_item / fetch_work_item. */
typedef struct dx_cycle_s {
  dx_cycle_ack_t *acks;
  size_t n_acks;
  int64_t orch_lock_ms, work_lock_ms;
  const dx_session_cfg_t *sessions;   /* as for fetch_work_item */
  int max_orch, max_work;             /* fetch budgets (0: fetch none) */
  int sync;                           /* in: what commit() would be given as `sync` */
  dx_orch_item_t **orch_out;          /* out: n_orch locked instances */
  size_t n_orch;
  dx_work_fetch_t *work_out;          /* out: n_work locked worker items */
  size_t n_work;
  int fetch_rc;                       /* out: a fetch failed (items before it are kept) */
  dx_error_t fetch_err;
} dx_cycle_t;

/** Callback for list_instances: return non-zero to stop. `id` is borrowed for the call. */
typedef int (*dx_instance_cb)(void *ud, const char *id);

/** One problem found by check: a message naming the store, the table and the record. */
typedef void (*dx_check_cb)(void *ud, const char *problem);

typedef struct dx_provider_methods_s {
  int version; /* 12 (older providers: 1..11; members past `version` are absent) */
  const char *name;

  /** Close and free the provider. */
  void (*destroy)(dx_provider_t *p);

  /* Group commit (see Caveats). commit(sync=0) is for batches whose loss after a power cut
  ** breaks no promise: taking locks (redelivery is merely delayed) and activity results (the
  ** activity runs again: at least once). The provider may then skip or shorten the flush,
  ** but a power cut must never damage the store (LMDB skips it only for lock-only batches
  ** and otherwise flushes the data, leaving the meta page to the next flush; PostgreSQL
  ** commits without waiting for the WAL flush). Such a batch still wakes other workers when
  ** it queued work (a completion for another's turn). */
  int (*begin)(dx_provider_t *p, dx_error_t *err);
  int (*commit)(dx_provider_t *p, int sync, dx_error_t *err);
  void (*rollback)(dx_provider_t *p);

  /** Lock the instance whose oldest visible message is oldest and whose lock is free or
  **  expired. *out = NULL (and 0 returned) when nothing is visible. */
  int (*fetch_orchestration_item)(dx_provider_t *p, int64_t now_ms, int64_t lock_ms,
                                  dx_orch_item_t **out, dx_error_t *err);
  /** Commit a turn atomically (duroxide §4.2). DX_ETOKEN / DX_ELOCK when the lock is gone. */
  int (*ack_orchestration_item)(dx_provider_t *p, int64_t now_ms, const dx_orch_ack_t *ack,
                                dx_error_t *err);
  /** Release the instance lock; delay_ms > 0 pushes the locked messages' visibility. */
  int (*abandon_orchestration_item)(dx_provider_t *p, int64_t now_ms, const char *instance,
                                    uint64_t lock_token, int64_t delay_ms, int ignore_attempt,
                                    dx_error_t *err);
  int (*renew_orchestration_item_lock)(dx_provider_t *p, int64_t now_ms, const char *instance,
                                       uint64_t lock_token, int64_t extend_ms, dx_error_t *err);

  /** Lock the oldest visible worker row. out->item.kind == 0 when nothing is visible.
  **  Sessions: a claim starts the session's next ownership epoch and makes the session's rows
  **  still locked (by an earlier owner) due at once; the locked row records the epoch and its
  **  instance joins the session's users. The capacity count skips sessions that ended (no rows,
  **  every user's execution no longer running). */
  int (*fetch_work_item)(dx_provider_t *p, int64_t now_ms, int64_t lock_ms,
                         const dx_session_cfg_t *sessions, dx_work_fetch_t *out,
                         dx_error_t *err);
  /** Delete the row (lock must be live) and enqueue `completion` (may be NULL). A session
  **  row locked under an earlier ownership epoch than the session's (another worker claimed
  **  it since) is refused with DX_ELOCK in the same transaction (fencing); so is its renewal. */
  int (*ack_work_item)(dx_provider_t *p, int64_t now_ms, uint64_t lock_token,
                       const dx_work_item_t *completion, dx_error_t *err);
  int (*abandon_work_item)(dx_provider_t *p, int64_t now_ms, uint64_t lock_token,
                           int64_t delay_ms, int ignore_attempt, dx_error_t *err);
  /** Extend a live lock; DX_ELOCK when the row is gone or expired (= cancellation). */
  int (*renew_work_item_lock)(dx_provider_t *p, int64_t now_ms, uint64_t lock_token,
                              int64_t extend_ms, dx_error_t *err);

  /** Client enqueue (start, raise, cancel); never creates the instance record. */
  int (*enqueue_for_orchestrator)(dx_provider_t *p, int64_t now_ms, const dx_work_item_t *item,
                                  int64_t delay_ms, dx_error_t *err);
  /** Tests: insert a worker row directly. */
  int (*enqueue_for_worker)(dx_provider_t *p, int64_t now_ms, const dx_work_item_t *item,
                            dx_error_t *err);

  /** History of one execution (execution_id 0 = latest). DX_ENOTFOUND for an unknown
  **  instance. *exec_out (may be NULL) receives the execution id read. */
  int (*read_history)(dx_provider_t *p, const char *instance, uint64_t execution_id,
                      dx_event_t **events, size_t *n, uint64_t *exec_out, dx_error_t *err);
  /** Tests: append events to an execution without a lock. */
  int (*append_with_execution)(dx_provider_t *p, const char *instance, uint64_t execution_id,
                               const dx_event_t *events, size_t n, dx_error_t *err);

  /** DX_ENOTFOUND for an unknown instance. An instance whose start is queued but has not
  **  run yet is found, with status DX_STATUS_NONE. */
  int (*get_instance_info)(dx_provider_t *p, const char *instance, dx_instance_info_t *out,
                           dx_error_t *err);
  /** Every instance id, newest first. */
  int (*list_instances)(dx_provider_t *p, dx_instance_cb cb, void *ud, dx_error_t *err);
  int (*get_queue_depths)(dx_provider_t *p, dx_queue_depths_t *out, dx_error_t *err);
  /** Earliest time (ms) at which an orchestrator or worker message becomes fetchable, or
  **  INT64_MAX when both queues are empty; lets the runtime sleep instead of polling. */
  int (*next_due_ms)(dx_provider_t *p, int64_t now_ms, int64_t *out, dx_error_t *err);
  /* methods above are version 1 */

  /** Sessions (duroxide v2 "implicit sessions"; DESIGN.md §6). */
  /** Extend to now+extend_ms the lease of every session owned by worker_id whose lease is
  **  live and whose last activity is within idle_ms (idle_ms 0: no idle limit). cb (may be
  **  NULL) is called for each renewed session. *renewed (may be NULL) receives the count. */
  int (*renew_session_lock)(dx_provider_t *p, int64_t now_ms, const char *worker_id,
                            int64_t extend_ms, int64_t idle_ms, dx_session_cb cb, void *ud,
                            uint64_t *renewed, dx_error_t *err);
  /** Give up ownership now (graceful shutdown, close, idle): sessions owned by worker_id, all
  **  of them when session_id is NULL. Another worker may claim them at once. */
  int (*release_session_locks)(dx_provider_t *p, int64_t now_ms, const char *worker_id,
                               const char *session_id, uint64_t *released, dx_error_t *err);
  /** Delete session rows whose lease has lapsed (or that are unowned) and that have no
  **  worker rows left, and (version 7) session events older than
  **  DX_SESSION_EVENTS_MAX_AGE_MS. *deleted counts the session rows. */
  int (*cleanup_orphaned_sessions)(dx_provider_t *p, int64_t now_ms, uint64_t *deleted,
                                   dx_error_t *err);
  /** Every session row (ordered by session id), then sessions that have queued work but were
  **  never claimed (unowned, lease 0). */
  int (*list_sessions)(dx_provider_t *p, dx_session_cb cb, void *ud, dx_error_t *err);
  /* methods above are version 2 */

  /** A file the provider writes to after every commit that other workers may have work
  **  from (NULL: none; the runtime then relies on polling). Runtimes watch it (inotify)
  **  to wake at once when another process enqueues work. Borrowed, valid while open. */
  const char *(*notify_path)(dx_provider_t *p);
  /* methods above are version 3 */

  /* Version 4 adds the four members below, in this order. A provider fills all four (any may
  ** be NULL where the provider has no such feature). */

  /** Verify the whole store (`duroxide-lua check`): every record decodes (and, where the
  **  provider keeps them, passes its checksum), every index entry points at its record and
  **  every record has its index entries. cb (may be NULL) receives each problem found, as a
  **  message naming the store, the table and the record. *records / *problems (may be NULL)
  **  receive the counts. Returns 0 when the walk finished, problems or not. NULL: the provider
  **  cannot check (the CLI says so). */
  int (*check)(dx_provider_t *p, dx_check_cb cb, void *ud, uint64_t *records,
               uint64_t *problems, dx_error_t *err);

  /** Wake-ups for providers without a file to watch (both may be NULL). wake_fd
  **  returns a descriptor that becomes readable when another process committed work this
  **  worker may fetch (-1: none; the runtime then uses notify_path, else polling). The runtime
  **  watches it on its loop thread and calls wake_drain when it is readable; wake_drain
  **  consumes what is pending and returns 0, or a negative DX_E* code when the descriptor is
  **  no longer usable (the runtime stops watching and polls). *lost = 1 tells the runtime the
  **  provider lost and re-established the connection behind the descriptor since the last
  **  drain. These two are the only members called from the loop thread: they must touch
  **  nothing the store thread uses. wake_fd is called once, after the runtime starts. */
  int (*wake_fd)(dx_provider_t *p);
  int (*wake_drain)(dx_provider_t *p, int *lost);

  /** Test-only hooks (NULL in a provider that has none; never used by the engine). */
  const struct dx_provider_test_hooks_s *test_hooks;
  /* members above are version 4 */

  /** The acks and fetches of one store cycle in one call (NULL: the runtime calls the
  **  methods above one by one). Called inside a batch (between begin and commit): acks
  **  first, in order, then up to max_orch orchestration fetches and max_work work fetches,
  **  with the same results as those calls made one by one. Per-ack outcomes land in
  **  acks[i].rc; a failed fetch in fetch_rc. The return value is for the batch: 0, or the
  **  error that spoiled it (DX_ERETRY: retry the whole cycle), and then nothing of the batch
  **  was kept. A provider may end the batch inside the call, committing it (flushed when
  **  cycle->sync is set) in the same round trip as the rest: the caller's commit() then
  **  returns 0 at once. Lets a provider on a network database send a cycle in one round trip
  **  instead of one per call. */
  int (*run_cycle)(dx_provider_t *p, int64_t now_ms, dx_cycle_t *cycle, dx_error_t *err);

  /** Worker liveness (version 5; both may be NULL: the provider has none, peers wait out
  **  leases). worker_register claims worker_id for this process on this store: it holds a
  **  token the operating system or the database server drops the moment the process dies,
  **  so peers treat the sessions, session rows and locks of a dead owner as free at once
  **  (the lease stays the fallback). DX_EEXIST, changing nothing, when a live process
  **  already holds worker_id (the message names it). A registration finds what a dead
  **  predecessor with the same id left in flight (its session rows) and makes it due now.
  **  Called by dx_runtime_start before the first fetch; worker_unregister (dx_runtime_stop,
  **  after the sessions are released) drops the token; it also drops a hold that fetches took
  **  for worker_id without a registration (a test harness probing on behalf of workers). */
  int (*worker_register)(dx_provider_t *p, const char *worker_id, int64_t now_ms,
                         dx_error_t *err);
  void (*worker_unregister)(dx_provider_t *p, const char *worker_id);
  /* members above are version 5 */

  /* Management (version 6; issue 10). A provider fills all six or none (NULL). They run
  ** outside the runtime's batches, each in transactions of their own. */

  /** One page of instances, newest first: instances whose start is queued and never ran
  **  (status DX_STATUS_NONE; name, version, parent and created time from the queued start)
  **  come before recorded instances, which follow in creation order. *rows (caller-owned,
  **  dx_instance_infos_free) receives up to q->limit rows; *next (caller-owned, free()) the
  **  cursor of the following page, NULL when this page is the last. The cursor names a
  **  position, not an offset: instances created meanwhile never shift a page. DX_EINVAL
  **  naming the problem for a bad limit or cursor. */
  int (*list_page)(dx_provider_t *p, int64_t now_ms, const dx_list_query_t *q,
                   dx_instance_info_t **rows, size_t *n, char **next, dx_error_t *err);
  /** Every stored execution of `instance`, ascending (*out caller-owned, free()).
  **  DX_ENOTFOUND for an instance without a record. */
  int (*list_executions)(dx_provider_t *p, const char *instance, dx_execution_info_t **out,
                         size_t *n, dx_error_t *err);
  /** Calls cb for every orchestrator message and worker row of `instance` (orchestrator
  **  messages first, oldest first). Reads everything before the first callback. */
  int (*instance_queue)(dx_provider_t *p, const char *instance, dx_queued_cb cb, void *ud,
                        dx_error_t *err);
  /** Delete the listed instances in one transaction: records, executions, history, both
  **  queues (with their session indexes; a session row left with no rows and no live owner
  **  goes too), instance locks. Without `force`, DX_ESTATE (nothing deleted) when one of them
  **  is not terminal (running, or queued and never run), naming it. Unknown ids are skipped.
  **  An in-flight turn or activity of a deleted instance finds its lock gone and its ack
  **  fails. *deleted (may be NULL) receives how many instances were removed. */
  int (*delete_instances)(dx_provider_t *p, const char *const *ids, size_t n, int force,
                          uint64_t *deleted, dx_error_t *err);
  /** Delete the history and records of executions older than the newest `keep` (>= 1) of
  **  `instance`; never the current execution nor a running one. *pruned (may be NULL)
  **  receives how many executions went. DX_ENOTFOUND for an unknown instance. */
  int (*prune_executions)(dx_provider_t *p, const char *instance, uint64_t keep,
                          uint64_t *pruned, dx_error_t *err);
  /** Fail a running instance now: append OrchestrationFailed (`why`) to its current
  **  execution, mark it Failed, drop its queued messages, its instance lock and its worker
  **  rows. With notify_parent, a sub-orchestration's running parent receives
  **  SubOrchestrationFailed. DX_ESTATE when the instance is not running; DX_ENOTFOUND when
  **  it has no record (a queued start: delete it instead). One transaction. */
  int (*terminate_instance)(dx_provider_t *p, int64_t now_ms, const char *instance,
                            const dx_failure_t *why, int notify_parent, dx_error_t *err);
  /* members above are version 6 */

  /* Key-value state (issue 11; version 7). A provider keeps two views: the committed state
  ** (as of the end of the instance's previous execution) and the current execution's changes
  ** (sets and tombstones). ack_orchestration_item applies the delta's DX_EV_KV_* events to
  ** the changes and, when the execution ends (COMPLETED, FAILED, CONTINUED_AS_NEW), folds
  ** them into the committed state; fetch_orchestration_item returns the committed state in
  ** item->kv. Deleting an instance deletes both. */
  /** The live value of `key` (changes over committed state). *value owned by the caller;
  **  DX_ENOTFOUND when the instance or key does not exist (or was cleared). */
  int (*get_kv)(dx_provider_t *p, const char *instance, const char *key, char **value,
                int64_t *updated_ms, dx_error_t *err);
  /** Every live entry of `instance`, ascending key (none for an unknown instance). */
  int (*list_kv)(dx_provider_t *p, const char *instance, dx_kv_cb cb, void *ud,
                 dx_error_t *err);
  /* members above are version 7 */

  /* Session history (version 8, `duroxide-lua sessions --history`; both may be NULL: the
  ** provider keeps none). */
  /** Record one session event (ev->at_ms is its time). Keeps the session's latest
  **  DX_SESSION_EVENTS_KEEP events. DX_EINVAL (changing nothing) for a missing session id,
  **  event word or worker id. */
  int (*append_session_event)(dx_provider_t *p, const dx_session_event_t *ev, dx_error_t *err);
  /** The stored events of one session, oldest first. */
  int (*list_session_events)(dx_provider_t *p, const char *session_id, dx_session_event_cb cb,
                             void *ud, dx_error_t *err);
  /* members above are version 8 */

  /* Activity tags and rolling deployments (version 9). */
  /** What this handle's later fetches take (fetch_orchestration_item, fetch_work_item,
  **  run_cycle, next_due_ms): see dx_fetch_filter_t. NULL = back to the default. Copied;
  **  DX_EINVAL (changing nothing) for a bad filter. */
  int (*set_fetch_filter)(dx_provider_t *p, const dx_fetch_filter_t *filter, dx_error_t *err);
  /* members above are version 9 */

  /* Live workers (version 10; issue 10, `duroxide-lua workers`). worker_register records the
  ** registration (worker id, host, process id, time, the handle's lock-holder tag) and
  ** worker_unregister removes it. */
  /** Calls cb for every registered worker whose process still lives (the liveness of
  **  worker_register: a worker killed with SIGKILL is left out at once), ascending worker id.
  **  Without liveness (a network filesystem, `?liveness=off`) every recorded registration is
  **  listed. Reads everything before the first callback. May be NULL (no registry). */
  int (*list_workers)(dx_provider_t *p, int64_t now_ms, dx_worker_cb cb, void *ud,
                      dx_error_t *err);
  /* members above are version 10 */
  /* Cached orchestrations (version 11; version 10 is the ops block). */
  /** Later orchestration fetches of this handle (fetch_orchestration_item, run_cycle) ask
  **  `hint` (copied; NULL = none) about each instance they hand out: when the caller holds N
  **  > 0 events of the instance's latest execution and the store's execution has exactly N,
  **  the item carries history_held = N and only the last event (so the caller can check it is
  **  the one it holds) instead of the whole history. Any other answer, or none: the whole
  **  history as always. A provider may also use `recent` (asked before the fetch): an item
  **  whose history it skipped that way carries history_held even if held() has changed its
  **  answer since (never a cut history without history_held). DX_OK. */
  int (*set_history_hint)(dx_provider_t *p, const dx_history_hint_t *hint, dx_error_t *err);
  /* members above are version 11 */

  /** All-or-nothing batches (version 12; may be NULL: callers use begin). Opens a batch as
  **  begin does, for a caller that rolls it back whole when any call in it fails (the
  **  client's start_many and raise_many). A failed call need not be contained: the provider
  **  may skip the scoping that keeps a failed call from changing the batch (LMDB: a nested
  **  transaction per call). Checks that can fail before anything is written (bad input,
  **  DX_EEXIST) still change nothing; after any other failure commit() may refuse with that
  **  error, keeping nothing; rollback() always leaves nothing. */
  int (*begin_atomic)(dx_provider_t *p, dx_error_t *err);
  /* members above are version 12 */
} dx_provider_methods_t;

/** Hooks the test harness (duroxide.testing, the validation suite) uses to set up states a
**  running engine reaches only through failures. Every member may be NULL (not supported). */
typedef struct dx_provider_test_hooks_s {
  int version; /* 1; 2 adds fail_next_commit */
  /** Overwrite the stored bytes of one history event with bytes that are not a valid record.
  **  DX_OK, DX_ENOTFOUND, or another DX_E* code. */
  int (*corrupt_history)(dx_provider_t *p, const char *instance, uint64_t execution_id,
                         uint64_t event_id);
  /** Make a session's lease lapse at now_ms without changing its owner (the owner did not
  **  renew in time). DX_ENOTFOUND when the session has no row. */
  int (*expire_session)(dx_provider_t *p, const char *session_id, int64_t now_ms);
  /** (version >= 2) This handle's next commit fails as a failed write or fsync makes it fail:
  **  nothing of the batch is stored, the commit returns an error. DX_OK. */
  int (*fail_next_commit)(dx_provider_t *p);
} dx_provider_test_hooks_t;

struct dx_provider_s {
  const dx_provider_methods_t *methods;
};

/* {===== opening a store =====} */

/** Options for dx_provider_open. Zero-initialise, set version = 1, then change fields. */
typedef struct dx_provider_opts_s {
  int version;            /* 1 */
  int no_sync;            /* 1: commits skip the flush to durable storage (faster; the last
                             commits may be lost on power loss; a killed process loses nothing).
                             For throwaway stores and benchmarks. */
  size_t map_size;        /* directory stores: first size of the memory map in bytes; 0 =
                             default (64 MiB). The map doubles whenever it is full or three
                             quarters used, up to max_size. Ignored by database URLs. */
  size_t max_size;        /* directory stores: the store's size limit in bytes, remembered by
                             the store for every process; 0 = keep the remembered limit (none:
                             grow until the disk is full). At least 1 MiB. Ignored by database
                             URLs. */
} dx_provider_opts_t;

/** Open (creating if missing) the store named by `url`, the one place that chooses a provider:
**  - a directory path: the embedded store (LMDB) in that directory, created if missing;
**  - `postgres://...` or `postgresql://...`: a libpq connection URI on PostgreSQL;
**    `?schema=NAME` selects the schema (default `duroxide`), created and migrated on open.
**    Builds without PostgreSQL support refuse it with DX_EINVAL ("this build has no
**    PostgreSQL support").
**  Anything else of the form `scheme://...` is refused with DX_EINVAL naming the scheme.
**  @param[in] url   borrowed for the call.
**  @param[in] opts  borrowed; NULL = defaults. DX_EINVAL when opts->version is not 1.
**  @param[out] out  the provider, owned by the caller: release with (*out)->methods->destroy.
**                   NULL on error.
**  @return DX_OK; DX_EINVAL (NULL or empty url, unknown scheme, bad options), or the opening
**          provider's error (DX_EIO, DX_ESTORE, DX_ECORRUPT, ...), naming the store.
**  Thread: any. */
int dx_provider_open(const char *url, const dx_provider_opts_t *opts, dx_provider_t **out,
                     dx_error_t *err);

/** Largest payload (input, output, event data) accepted anywhere, in bytes. */
#define DX_MAX_PAYLOAD_BYTES (256 * 1024)

/** Longest ids and names, in bytes (docs/lua-api.md "Limits" lists them all). The client and
**  every provider apply the same limits, so an id valid on one provider is valid on all. */
#define DX_MAX_INSTANCE_ID_BYTES 400
#define DX_MAX_SESSION_ID_BYTES 200
#define DX_MAX_NAME_BYTES 200       /* activity and orchestration names */
#define DX_MAX_EVENT_NAME_BYTES 400
#define DX_MAX_REASON_BYTES 1000    /* cancel reasons: failure messages keep them whole */
/* Key-value state (duroxide's limits; the key limit leaves room for the instance id in a
** store key). Checked at ctx:set_kv_value. */
#define DX_MAX_KV_KEY_BYTES 100
#define DX_MAX_KV_VALUE_BYTES 16384
#define DX_MAX_KV_KEYS 100
/* Queue messages carried into the next execution by continue_as_new (oldest kept). */
#define DX_MAX_CARRY_FORWARD 20
#define DX_MAX_TAG_BYTES 256        /* activity tags (duroxide MAX_TAG_NAME_BYTES) */
#define DX_MAX_WORKER_TAGS 5        /* tags one worker accepts (duroxide MAX_WORKER_TAGS) */

#endif
