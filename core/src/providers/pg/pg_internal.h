/*
** pg_internal.h -- shared types and helpers of the PostgreSQL provider (internal).
**
** One provider handle owns one libpq connection per calling thread (a pthread key), made on
** first use. A connection remembers the pid that opened it: after fork() a child never
** touches (or PQfinish()es) an inherited connection, it opens its own. begin() opens a batch
** on the calling thread's connection; methods called on that thread until commit() share its
** transaction. Methods report expected outcomes (lock lost, token gone, duplicate event)
** before they write anything, so a batch survives them without savepoints; an unexpected
** server error poisons the batch and commit() returns it (DX_ERETRY for deadlocks,
** serialization failures and lost connections: the caller retries the whole batch).
*/
#ifndef DX_PG_INTERNAL_H
#define DX_PG_INTERNAL_H

#include <pthread.h>
#include <stdint.h>
#include <sys/types.h>

#include <libpq-fe.h>

#include "duroxide/provider.h"
#include "providers/pg/pg_sql.h"

#define PG_NEVER INT64_MAX
#define PG_MAX_PARAMS 48

typedef struct pg_s pg_t;

typedef struct pg_conn_s {
  PGconn *conn;             /* NULL after a lost connection: reconnect on next use */
  pid_t pid;                /* process that opened it */
  pg_t *owner;
  int in_batch;
  int batch_rc;             /* first unexpected failure inside the batch; 0 = none */
  int notify;               /* the transaction made work visible: NOTIFY at commit */
  int cycle_done;           /* run_cycle committed the batch: the caller's commit() is a no-op */
  char batch_msg[512];
  unsigned char prepared[PQ__COUNT];
  int reprepare;            /* a statement failed: prepare afresh at the next transaction */
  int pending;              /* statements queued in the pipeline, results unread */
  int pend_cap;
  const char **pend;        /* their names, for error messages */
  PGresult ***pend_out;     /* where each one's result goes (NULL: discarded) */
  /* orchestration items locked by a fetch in this batch and not handed out yet */
  dx_orch_item_t **obuf;
  int obuf_n, obuf_next;
  int64_t obuf_now, obuf_lock;
  /* a session claim pick of this batch found nothing (at capacity or nothing claimable): later
  ** fetches of the batch skip it. Capacity only grows within a batch and the batch's own
  ** operations come before its fetches, so it can only change by other processes' commits,
  ** whose wake-up starts the next batch (which asks again). */
  char claim_none[DX_MAX_SESSION_ID_BYTES + 1]; /* that worker id; "" none */
  struct pg_conn_s *next;   /* owner's list */
} pg_conn_t;

struct pg_s {
  dx_provider_t base;
  char *conninfo;           /* the URL without the schema parameter */
  char *schema;             /* validated schema name */
  char *schema_q;           /* quoted identifier */
  int no_sync;
  char *channel_q;          /* quoted LISTEN/NOTIFY channel of the schema */
  PGconn *listen;           /* wake-up listener (loop thread); NULL until wake_fd */
  int liveness;             /* default 1 (?liveness=off: 0): liveness locks (pg_live.c) */
  char *live_prefix;        /* "dx-live:<schema>:" */
  struct pg_live_s *live;   /* the locks this handle holds, guarded by mu */
  int64_t reaped_at;        /* caller-clock ms of the last dead-worker sweep of sessions */
  int64_t reaped_orch_at;   /* ... and of instance locks */
  char proc_tag[24];        /* "@<random hex>": this handle's name as a lock holder */
  pid_t listen_pid;
  pthread_key_t key;
  pthread_mutex_t mu;       /* guards conns and retry_after */
  int64_t retry_after;      /* monotonic ms: reconnects fail fast until then */
  pg_conn_t *conns;
  uint64_t round_trips;     /* pipeline syncs on store/client connections (atomic) */
  dx_fetch_filter_t *filter; /* set_fetch_filter (NULL: untagged rows, every instance) */
  char *tags_param;          /* the filter's tags as a text[] literal ("{}": none) */
  char *cap_names, *cap_versions; /* its capabilities as text[] literals (NULL: any instance) */
  dx_history_hint_t hint;    /* set_history_hint (held NULL: none) */
};

/* One method's transaction: the thread's batch, or its own BEGIN/COMMIT. */
typedef struct {
  pg_t *p;
  pg_conn_t *c;
  dx_error_t *err;
  int own;                  /* 1: this method issued BEGIN */
} tx_t;

/* Statement parameters: text, except bytea which goes binary. */
typedef struct {
  int n;
  const char *v[PG_MAX_PARAMS];
  int len[PG_MAX_PARAMS];
  int fmt[PG_MAX_PARAMS];
  char num[PG_MAX_PARAMS][24];
} qp_t;

/* A one-dimensional array parameter in binary form (int8[], text[] or bytea[]): elements are
** appended, then dx__qp_arr hands it to a statement (the buffer must outlive the send). */
typedef struct {
  unsigned char *b;
  size_t len, cap;
  int n, oid, nulls, oom;
} pg_arr_t;
#define PG_OID_INT8 20
#define PG_OID_TEXT 25
#define PG_OID_BYTEA 17

/* {===== pg_conn.c =====} */
void dx__arr_init(pg_arr_t *a, int oid);
void dx__arr_i64(pg_arr_t *a, int64_t v);
void dx__arr_bytes(pg_arr_t *a, const void *p, size_t n); /* p NULL: SQL NULL */
void dx__arr_str(pg_arr_t *a, const char *s);               /* s NULL: SQL NULL; see below */
/* Text for a text column or element: PostgreSQL refuses bytes that are not UTF-8 (22021), so
** free text (failure messages, outputs, custom status) goes with each bad byte replaced by
** U+FFFD. Returns s itself when valid (or NULL), else a fixed copy also left in *keep (free it
** once sent; NULL returned on ENOMEM). Identifiers are refused before they get here. */
const char *dx__pg_text(const char *s, char **keep);
/* A lookup by instance id: an id that is not UTF-8 names no instance (none can be created)
** and PostgreSQL would refuse the parameter, so answer DX_ENOTFOUND as for any unknown id. */
int dx__pg_lookup_id(tx_t *t, const char *inst);
/* Finish the header; DX_ENOMEM (in err) when an append ran out of memory. */
int dx__arr_done(pg_arr_t *a, dx_error_t *err);
void dx__arr_free(pg_arr_t *a);
void dx__qp_arr(qp_t *q, const pg_arr_t *a);
/* A text[] literal of n strings (element i: *(char **)((char *)v + i * stride)), each quoted
** and escaped; malloc'ed, NULL when out of memory. */
char *dx__pg_text_array(const void *v, size_t n, size_t stride);

int dx__pg_conn_key_init(pg_t *p);
int dx__pg_conn_get(pg_t *p, pg_conn_t **out, dx_error_t *err);
void dx__pg_conns_close(pg_t *p);
int dx__pg_connect(const char *conninfo, const char *schema_q, PGconn **out, dx_error_t *err);
/* Map a failed result (or NULL result) on `conn` to a DX code with a message naming `what`. */
int dx__pg_fail(PGconn *conn, PGresult *res, const char *what, dx_error_t *err);
int dx__pg_tx_begin(pg_t *p, tx_t *t, dx_error_t *err);
/* For methods that only read: the batch if one is open, else no transaction at all (each
** statement is its own; one round trip per read). dx__pg_tx_end still ends it. Each statement
** then has its own snapshot: a read of one statement only (several tables: one statement). */
int dx__pg_read_begin(pg_t *p, tx_t *t, dx_error_t *err);
/* For reads of several statements that must agree (list_page): the batch if one is open, else
** a REPEATABLE READ, READ ONLY transaction (one snapshot; its COMMIT at dx__pg_tx_end is a
** round trip of its own). */
int dx__pg_snapshot_begin(pg_t *p, tx_t *t, dx_error_t *err);
/* Ends the method: own txn -> COMMIT on rc == 0, else ROLLBACK. Returns rc (or the commit's). */
int dx__pg_tx_end(tx_t *t, int rc);
/* One statement as a whole method: begun (a transaction if `write`, else as a read), run as
** dx__pg_q, ended. Returns the method's code; *out as dx__pg_q leaves it. */
int dx__pg_one(pg_t *p, int write, pg_stmt_t id, const qp_t *qp, PGresult **out,
               dx_error_t *err);
/* An unexpected failure after writes: the batch (if any) must not commit. Returns rc. */
int dx__pg_tx_poison(tx_t *t, int rc);
/* The transaction made work visible to other workers: NOTIFY them at commit. */
#define dx__pg_tx_notify(t) ((t)->c->notify = 1)
/* Run prepared statement `id`; *out (may be NULL) receives the binary result. With out NULL
** the statement is only queued (a write): its errors show at the next read or the commit. */
int dx__pg_q(tx_t *t, pg_stmt_t id, const qp_t *qp, PGresult **out);
/* Queue statement `id`; *out (may be NULL) is filled by the next dx__pg_qwait (several reads in
** one round trip). Every *out is NULL after a failed wait. */
int dx__pg_qsend(tx_t *t, pg_stmt_t id, const qp_t *qp, PGresult **out);
int dx__pg_qwait(tx_t *t);
/* run_cycle: queue the batch's COMMIT (flushed when `sync`) behind everything queued and read
** all results (delivered as by dx__pg_qwait) in one round trip. The batch is over either way;
** on failure nothing of it was kept. */
int dx__pg_batch_commit_wait(tx_t *t, int sync);
int dx__pg_begin(dx_provider_t *pp, dx_error_t *err);
int dx__pg_commit(dx_provider_t *pp, int sync, dx_error_t *err);
void dx__pg_rollback(dx_provider_t *pp);

/* Parameters and binary result columns. */
void dx__qp_init(qp_t *q);
void dx__qp_i64(qp_t *q, int64_t v);
void dx__qp_str(qp_t *q, const char *s);
void dx__qp_bin(qp_t *q, const void *b, size_t n);
int64_t dx__col_i64(const PGresult *r, int row, int col);   /* NULL -> 0 */
int dx__col_null(const PGresult *r, int row, int col);
char *dx__col_str(const PGresult *r, int row, int col, int *oom); /* NULL -> NULL */
int64_t dx__sat_add(int64_t a, int64_t b);
uint64_t dx__pg_hash(const char *a, const char *b);

/* {===== shared queue steps =====} */
/* Before the batch ends: items a fetch locked ahead but never handed out are released
** (commit: their locks and attempts undone in the transaction) or just dropped (rollback). */
int dx__pg_orch_unbuffer(tx_t *t, int release);
void dx__pg_orch_unbuffer_drop(pg_conn_t *c);
int dx__pg_orch_enqueue(tx_t *t, const dx_work_item_t *w, int64_t visible_at);
int dx__pg_work_insert(tx_t *t, const dx_work_item_t *w, int64_t visible_at);
/* DX_EEXIST (writing nothing) when an event id of `ev` is stored or repeated. */
int dx__pg_history_dups(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev, size_t n);
/* Inserts only: call dx__pg_history_dups first. */
int dx__pg_history_append(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev, size_t n);
int dx__pg_history_load(tx_t *t, const char *inst, uint64_t exec, dx_event_t **out, size_t *n);
/* Decode rows r0..r0+n-1 of `res` (event id in column idc, record in column recc) as the
** history of `inst`/`exec`. DX_ECORRUPT names the undecodable event. */
int dx__pg_history_decode(tx_t *t, const PGresult *res, int r0, int n, int idc, int recc,
                          const char *inst, uint64_t exec, dx_event_t **out, size_t *nout);
int dx__pg_nomem(dx_error_t *err);

/* {===== key-value state (pg_kv.c) =====} */
/* The execution of `inst` ended outside an ack (terminate): its changes become committed. */
int dx__pg_kv_fold(tx_t *t, const char *inst);
int dx__pg_get_kv(dx_provider_t *, const char *, const char *, char **, int64_t *, dx_error_t *);
int dx__pg_list_kv(dx_provider_t *, const char *, dx_kv_cb, void *, dx_error_t *);

/* {===== methods =====} */
int dx__pg_fetch_orch(dx_provider_t *, int64_t, int64_t, dx_orch_item_t **, dx_error_t *);
int dx__pg_ack_orch(dx_provider_t *, int64_t, const dx_orch_ack_t *, dx_error_t *);
int dx__pg_abandon_orch(dx_provider_t *, int64_t, const char *, uint64_t, int64_t, int,
                        dx_error_t *);
int dx__pg_renew_orch(dx_provider_t *, int64_t, const char *, uint64_t, int64_t, dx_error_t *);
int dx__pg_enqueue_orch(dx_provider_t *, int64_t, const dx_work_item_t *, int64_t, dx_error_t *);
int dx__pg_fetch_work(dx_provider_t *, int64_t, int64_t, const dx_session_cfg_t *,
                      dx_work_fetch_t *, dx_error_t *);
int dx__pg_ack_work(dx_provider_t *, int64_t, uint64_t, const dx_work_item_t *, dx_error_t *);
int dx__pg_abandon_work(dx_provider_t *, int64_t, uint64_t, int64_t, int, dx_error_t *);
int dx__pg_renew_work(dx_provider_t *, int64_t, uint64_t, int64_t, dx_error_t *);
int dx__pg_enqueue_work(dx_provider_t *, int64_t, const dx_work_item_t *, dx_error_t *);
int dx__pg_read_history(dx_provider_t *, const char *, uint64_t, dx_event_t **, size_t *,
                        uint64_t *, dx_error_t *);
int dx__pg_append(dx_provider_t *, const char *, uint64_t, const dx_event_t *, size_t,
                  dx_error_t *);
int dx__pg_get_info(dx_provider_t *, const char *, dx_instance_info_t *, dx_error_t *);
void dx__pg_info_fill(const PGresult *res, int row, int c, dx_instance_info_t *out, int *oom);
/* management (pg_admin.c) */
int dx__pg_list_page(dx_provider_t *, int64_t, const dx_list_query_t *, dx_instance_info_t **,
                     size_t *, char **, dx_error_t *);
int dx__pg_list_executions(dx_provider_t *, const char *, dx_execution_info_t **, size_t *,
                           dx_error_t *);
int dx__pg_instance_queue(dx_provider_t *, const char *, dx_queued_cb, void *, dx_error_t *);
int dx__pg_delete_instances(dx_provider_t *, const char *const *, size_t, int, uint64_t *,
                            dx_error_t *);
int dx__pg_prune_executions(dx_provider_t *, const char *, uint64_t, uint64_t *, dx_error_t *);
int dx__pg_terminate(dx_provider_t *, int64_t, const char *, const dx_failure_t *, int,
                     dx_error_t *);
int dx__pg_list(dx_provider_t *, dx_instance_cb, void *, dx_error_t *);
int dx__pg_depths(dx_provider_t *, dx_queue_depths_t *, dx_error_t *);
int dx__pg_next_due(dx_provider_t *, int64_t, int64_t *, dx_error_t *);
int dx__pg_renew_sessions(dx_provider_t *, int64_t, const char *, int64_t, int64_t, dx_session_cb,
                          void *, uint64_t *, dx_error_t *);
int dx__pg_release_sessions(dx_provider_t *, int64_t, const char *, const char *, uint64_t *,
                            dx_error_t *);
int dx__pg_cleanup_sessions(dx_provider_t *, int64_t, uint64_t *, dx_error_t *);
int dx__pg_list_sessions(dx_provider_t *, dx_session_cb, void *, dx_error_t *);
/* pg_events.c */
int dx__pg_append_session_event(dx_provider_t *, const dx_session_event_t *, dx_error_t *);
int dx__pg_list_session_events(dx_provider_t *, const char *, dx_session_event_cb, void *,
                               dx_error_t *);

/* A work fetch is one call of dx_fetch_work (migration 10): up to k rows locked and handed
** out in due order, session claims decided in the database, so run_cycle queues it with the
** rest of the cycle (pg_work.c). *_send queues it (with the liveness sweep when due); *res
** arrives at the next wait. *_take hands its rows out into out[0..*n) (res taken), at most
** max; a failure leaves the rows handed out so far in out. */
int dx__pg_work_fetch_send(tx_t *t, int64_t now, int64_t lock_ms, const dx_session_cfg_t *cfg,
                           int k, PGresult **res);
int dx__pg_work_fetch_take(tx_t *t, int64_t now, const dx_session_cfg_t *cfg, PGresult *res,
                           dx_work_fetch_t *out, int max, size_t *n);

/* run_cycle (pg_cycle.c) and the halves it is made of: *_send queues one statement whose
** result arrives at the next dx__pg_qwait (or dx__pg_batch_commit_wait); the other half takes
** that result. An ack's outcome (lock lost, token gone, duplicate event) is its return code;
** it wrote nothing then. */
int dx__pg_run_cycle(dx_provider_t *, int64_t, dx_cycle_t *, dx_error_t *);
/* The orchestration acks (resp. worker-item acks) among acks[0..n) whose rc is 0 go as one
** call of dx_ack_orchs (dx_ack_works), up to the first ack that takes its arrays past
** dx__pg_ack_call_bytes (pg.h dx__pg_set_ack_call_bytes): *used says how many of acks[] the
** call covers (the caller sends the rest as further calls); *res is NULL when those hold none.
** *_take sets each such ack of acks[0..used) from that call's result (taken: res is cleared).
** The bound keeps a call far below PostgreSQL's 1 GB per parameter, whatever a cycle holds. */
extern size_t dx__pg_ack_call_bytes;
int dx__pg_ack_orchs_send(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n, PGresult **res,
                          size_t *used);
void dx__pg_ack_orchs_take(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n, PGresult *res);
int dx__pg_ack_works_send(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n, PGresult **res,
                          size_t *used);
void dx__pg_ack_works_take(tx_t *t, int64_t now, dx_cycle_ack_t *acks, size_t n, PGresult *res);
/* An instance a fetch locked that had nothing to hand out (see dx__pg_orch_park). */
typedef struct {
  char *inst;
  uint64_t token;
} dx__pg_park_t;
int dx__pg_orch_fetch_send(tx_t *t, int64_t now, int64_t lock_ms, int k, PGresult **res);
int dx__pg_orch_fetch_take(tx_t *t, PGresult *res, int64_t now, int64_t lock_ms,
                           dx__pg_park_t *parks, int *n_parks, int *picked, int *back);
int dx__pg_orch_park(tx_t *t, const char *inst, uint64_t token, int64_t now);

int dx__pg_test_corrupt_history(dx_provider_t *, const char *, uint64_t, uint64_t);
int dx__pg_test_expire_session(dx_provider_t *, const char *, int64_t);

/* {===== pg_wake.c =====} */
int dx__pg_wake_fd(dx_provider_t *pp);
int dx__pg_wake_drain(dx_provider_t *pp, int *lost);
void dx__pg_wake_close(pg_t *p);

/* {===== pg_live.c =====} */
/* Make sure `worker` holds its liveness lock (no-op with ?liveness=off). */
int dx__pg_live_hold(pg_t *p, const char *worker, dx_error_t *err);
void dx__pg_live_close(pg_t *p);
int dx__pg_worker_register(dx_provider_t *pp, const char *worker, int64_t now, dx_error_t *err);
int dx__pg_list_workers(dx_provider_t *pp, int64_t now, dx_worker_cb cb, void *ud,
                        dx_error_t *err);
void dx__pg_worker_unregister(dx_provider_t *pp, const char *worker);
/* 1 when a session fetch should first sweep dead owners' in-flight rows (throttled). */
int dx__pg_live_sweep_due(pg_t *p, int64_t *last, int64_t now);
/* When (caller's clock) the next sweep is worth a fetch. */
int64_t dx__pg_live_next_sweep(pg_t *p);

/* {===== pg_schema.c =====} */
int dx__pg_migrate(pg_t *p, PGconn *conn, dx_error_t *err);

#endif
