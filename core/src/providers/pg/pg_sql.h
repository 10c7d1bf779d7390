/* pg_sql.h -- the PostgreSQL provider's prepared statements, by id (text in pg_sql.c). */
#ifndef DX_PG_SQL_H
#define DX_PG_SQL_H

#define PG_STATEMENTS(X)                                                                   \
  X(START_CLAIM) X(ORCH_PUSH) X(ORCH_FETCH) X(ACK_ORCH) X(ACK_WORK) X(EXEC_UPSERT) X(ORCH_REAP)    \
  X(ORCH_RELEASE) X(ORCH_LATER_MSGS) X(ORCH_WAIT) X(ORCH_DEL_BATCH) X(ORCH_CHECK) X(ORCH_RENEW)  \
  X(ORCH_ABANDON_MSGS) X(INST_GET) X(HIST_READ) X(HIST_LOAD) X(HIST_DUPS) X(HIST_INSERT) X(WORK_INSERT)      \
  X(WORK_FETCH_PLAIN) X(WORK_FETCH) X(WORK_REAP) X(WORK_REAP_PLAIN) X(WORK_BY_TOKEN) X(WORK_RENEW) X(WORK_ABANDON) \
  X(SESS_TOUCH) X(SESS_RENEW) X(SESS_RELEASE) X(SESS_CLEANUP) X(SESS_LIST)                     \
  X(INFO_GET) X(LIST_INSTANCES) X(DEPTHS) X(NEXT_DUE)           \
  X(NEXT_DUE_LIVE) X(TEST_CORRUPT) X(TEST_EXPIRE)                                              \
  X(SEV_INSERT) X(SEV_TRIM) X(SEV_LIST) X(SEV_PRUNE)                                          \
  X(ADM_PAGE) X(ADM_PAGE_RUN) X(ADM_PAGE_DONE) X(ADM_PAGE_FAIL) X(ADM_PAGE_END)  \
  X(ADM_PAGE_N) X(ADM_PAGE_N_RUN) X(ADM_PAGE_N_DONE) X(ADM_PAGE_N_FAIL) X(ADM_PAGE_N_END) X(ADM_QUEUED) X(ADM_QUEUED_N) X(ADM_EXECS) X(ADM_QUEUE) X(ADM_STATUS)      \
  X(ADM_DELETE) X(ADM_PRUNE) X(ADM_TERM_CHECK) X(ADM_TOUCH) X(ADM_DROP_QUEUES)             \
  X(KV_FOLD) X(KV_GET) X(KV_LIST) X(WORKERS_LIST)

typedef enum {
#define PG__STMT_ENUM(name) PQ_##name,
  PG_STATEMENTS(PG__STMT_ENUM)
#undef PG__STMT_ENUM
  PQ__COUNT
} pg_stmt_t;

/* SQL text and name of statement `id` (static storage). */
const char *dx__pg_sql(pg_stmt_t id);
const char *dx__pg_stmt_name(pg_stmt_t id);

/* The schema migrations, oldest first: version i+1 is dx__pg_migrations[i]. */
extern const char *const dx__pg_migrations[];
extern const int dx__pg_migration_count;
/* The liveness lock a worker holds (parameter: the key text, see pg_live.c). */
extern const char dx__pg_live_hold_sql[];
extern const char dx__pg_live_register_sql[];
extern const char dx__pg_live_reap_own_sql[];
extern const char dx__pg_live_worker_put_sql[];
extern const char dx__pg_live_worker_del_sql[];

#endif
