/*
** pg_sql.c -- the prepared statements of the PostgreSQL provider (and the liveness SQL run
** outside them). The schema and its migrations are in pg_migrations.c; SQL fragments both
** use are in pg_sql_parts.h.
*/
#include "providers/pg/pg_sql.h"
#include "providers/pg/pg_sql_parts.h"

/* Taken on a worker's idle liveness connection, held for as long as the connection lives. */
const char dx__pg_live_hold_sql[] = "SELECT pg_advisory_lock_shared(hashtextextended($1::text, 0))";
/* The exclusive registration lock of a worker id (one live process per id) and the server's
** clock in ms, for the skew check. */
const char dx__pg_live_register_sql[] =
  "SELECT pg_try_advisory_lock(hashtextextended($1::text, 0)),"
  " (extract(epoch FROM clock_timestamp()) * 1000)::bigint";
/* At registration: the session rows a dead predecessor with this id left locked are due now. */
const char dx__pg_live_reap_own_sql[] =
  "UPDATE work w SET due_at = $1::bigint, locked_until = $1::bigint FROM sessions s"
  " WHERE w.session_id = s.session_id AND s.owner = $2 AND w.lock_token IS NOT NULL"
  " AND w.locked_until > $1::bigint";

/* worker_register (migration 8): the registration row ($1 id, $2 host, $3 pid, $4 now, $5 the
** handle's lock-holder tag); rows of other ids whose process died ($6 liveness prefix) go. */
const char dx__pg_live_worker_put_sql[] =
  "WITH gone AS (DELETE FROM workers w WHERE w.worker_id <> $1 AND"
  OWNER_DEAD("w.worker_id", "$6::text", "1") ")"
  " INSERT INTO workers (worker_id, host, pid, started_at, locker)"
  " VALUES ($1, $2, $3::bigint, $4::bigint, $5) ON CONFLICT (worker_id) DO UPDATE SET"
  " host = EXCLUDED.host, pid = EXCLUDED.pid, started_at = EXCLUDED.started_at,"
  " locker = EXCLUDED.locker";
const char dx__pg_live_worker_del_sql[] = "DELETE FROM workers WHERE worker_id = $1";

/* Rolling deployments: the orchestration an orchestrator-queue row `q` asks for: its first
** start visible at `now` (s), else its instance record (i); joined only when the worker has
** capabilities (`names` not NULL). Both are probes by instance (the (instance, seq) order
** and OFFSET 0 keep them so): a generic plan made on small tables otherwise walked every
** pending start (orch_msgs_starts) or hashed all of `instances` per call. */
#define CAN_RUN_JOIN(now, names)                                                            \
  " LEFT JOIN LATERAL (SELECT m.start_name, m.start_version FROM orch_msgs m"              \
  " WHERE " names " IS NOT NULL AND m.instance_id = q.instance_id"                          \
  " AND m.start_name IS NOT NULL AND m.visible_at <= " now                                  \
  " ORDER BY m.instance_id, m.seq LIMIT 1) s" /* (instance, seq): the orch_msgs_inst order */ \
  " ON true LEFT JOIN LATERAL (SELECT x.name, x.version FROM instances x"                   \
  " WHERE " names " IS NOT NULL AND x.instance_id = q.instance_id OFFSET 0) i ON true"

/* ... and may the worker run it (capabilities `names`/`versions`; NULL: any instance)? An
** instance known by neither is taken (its turn drops or parks the messages). */
#define CAN_RUN(names, versions)                                                            \
  " (" names " IS NULL OR COALESCE(s.start_name, i.name) IS NULL"                           \
  " OR (s.start_name IS NOT NULL AND s.start_version IS NULL"                               \
  " AND s.start_name = ANY(" names "))"                                                     \
  " OR (COALESCE(s.start_name, i.name), CASE WHEN s.start_name IS NOT NULL"                 \
  " THEN s.start_version ELSE i.version END) IN (SELECT * FROM unnest(" names ", " versions \
  ")))"

/* next_due_ms: the earliest due time of the work this worker's filter takes ($1 untagged,
** $2 tags, $3/$4 capabilities): instances it can run (a start counts whenever it becomes
** visible), plain rows of its tags (each from its own index), session rows of its tags. */
#define NEXT_DUE_OF_FILTER                                                                  \
  " (SELECT q.due_at FROM orch_queue q" CAN_RUN_JOIN("9223372036854775807", "$3::text[]")    \
  " WHERE q.due_at IS NOT NULL AND" CAN_RUN("$3::text[]", "$4::text[]")                     \
  " ORDER BY q.due_at LIMIT 1),"                                                            \
  " (SELECT min(due_at) FROM work WHERE session_id IS NULL AND tag IS NULL"                 \
  " AND $1::bigint <> 0),"                                                                  \
  " (SELECT min(due_at) FROM work WHERE session_id IS NULL AND tag = ANY($2::text[])),"     \
  " (SELECT min(w.due_at) FROM work w WHERE w.session_id IS NOT NULL"                        \
  TAG_OK("w", "$1::bigint", "$2::text[]") ")"

/* Management: an instance's queue rows go, with session rows they leave unowned and empty
** (the CTEs share one snapshot: rows deleted by `w` still show, hence the instance test). */
#define DROP_QUEUES_CTE(inst)                                                               \
  " dm AS (DELETE FROM orch_msgs WHERE instance_id = " inst " RETURNING 1),"               \
  " dq AS (DELETE FROM orch_queue WHERE instance_id = " inst " RETURNING 1),"              \
  " dw AS (DELETE FROM work WHERE instance_id = " inst " RETURNING session_id),"           \
  " ds AS (DELETE FROM sessions ss WHERE ss.owner = ''"                                     \
  " AND ss.session_id IN (SELECT session_id FROM dw WHERE session_id IS NOT NULL)"          \
  " AND NOT EXISTS (SELECT 1 FROM work x WHERE x.session_id = ss.session_id"                \
  " AND x.instance_id <> " inst "))"

static const char *const SQL[PQ__COUNT] = {

  /* orchestrator queue */
  [PQ_ORCH_PUSH] = /* migration 7: $4/$5 the orchestration a start asks for (else NULL) */
    "SELECT dx_orch_push(ARRAY[$1::text], ARRAY[$2::bigint], ARRAY[$3::bytea], ARRAY[$4::text],"
    " ARRAY[$5::text])",
  [PQ_ORCH_FETCH] = /* lock the $3 instances due first (no other fetcher waits on them), tag
    ** their visible messages, and return per instance, in order: its lock (t 0), messages
    ** (t 1, by seq), record (t 2, if any), current history (t 3, by event id) and committed
    ** key-value entries (t 4). Columns:
    ** due, instance, t, id (token/seq/exec/event id), attempt, name, version, bytes.
    ** With capabilities ($5 names, $6 versions; NULL: any), only instances this worker can
    ** run: the orchestration its first visible start asks for, else the instance's own.
    ** $7..$9: histories the caller holds (instance, execution, events; NULL: none).
    ** An instance whose queue row changed after the statement's snapshot is put back (t 5,
    ** no other rows): see u. */
    "WITH c AS (SELECT q.instance_id, q.due_at, q.xmin AS xm FROM orch_queue q"
    CAN_RUN_JOIN("$1::bigint", "$5::text[]")
    " WHERE q.due_at <= $1::bigint AND" CAN_RUN("$5::text[]", "$6::text[]")
    " ORDER BY q.due_at, q.instance_id LIMIT $3::bigint FOR UPDATE OF q SKIP LOCKED),"
    /* = ANY(ARRAY(...)) and OFFSET 0 laterals keep every lookup an index probe per instance,
    ** whatever the table sizes were when the plan was made (a generic plan made on a fresh
    ** schema otherwise hash-joins sequential scans of orch_queue, instances and kv).
    ** READ COMMITTED: when a transaction that committed after this statement's snapshot
    ** updated a candidate's row (another process's turn releasing it), the lock in c takes
    ** the newest version while every read below sees the snapshot: its history, record and
    ** key-value state could miss that turn. u reads the version the snapshot sees, so such a
    ** row (its xmin is not the locked version's, c.xm) is not updated: it stays due,
    ** unmarked, and this transaction's row lock ends at its commit. Every history write
    ** releases (updates) the instance's row in its own transaction, so an equal xmin means
    ** the history read is whole. */
    " u AS (UPDATE orch_queue q SET lock_token = nextval('dx_seq'), locked_until = $2::bigint,"
    " due_at = $2::bigint, ready_at = NULL, locked_by = $4::text FROM c"
    " WHERE q.instance_id = ANY(ARRAY(SELECT instance_id FROM c))"
    " AND q.instance_id = c.instance_id AND q.xmin = c.xm"
    " RETURNING q.instance_id, q.lock_token, c.due_at),"
    /* (joined with u for the token: a subquery per message would scan u, n² per fetch) */
    " m AS (UPDATE orch_msgs o SET attempt = o.attempt + 1, lock_token = u.lock_token FROM u"
    " WHERE o.instance_id = ANY(ARRAY(SELECT instance_id FROM u))"
    " AND u.instance_id = o.instance_id AND o.visible_at <= $1::bigint"
    " RETURNING o.instance_id, o.seq, o.attempt, o.item),"
    /* per instance: its record, the execution whose history goes, and the events of it the
    ** caller holds (set_history_hint; the hint list joined once, hk, not scanned per
    ** instance): n when the store's last event of that execution is n, and then only event n
    ** goes (else 0: all of them) */
    " hk AS (SELECT k.i, k.e, max(k.n) AS n FROM unnest($7::text[], $8::bigint[], $9::bigint[])"
    " k(i, e, n) WHERE k.n > 0 GROUP BY k.i, k.e),"
    " x AS (SELECT u.instance_id, u.due_at, i.current_exec, i.name, i.version, i.e,"
    " CASE WHEN hk.n IS NULL THEN 0 WHEN hk.n = (SELECT max(z.event_id) FROM history z"
    " WHERE z.instance_id = u.instance_id AND z.exec = i.e) THEN hk.n ELSE 0 END AS held"
    " FROM u CROSS JOIN LATERAL (SELECT max(y.current_exec) AS current_exec, max(y.name) AS name,"
    " max(y.version) AS version, COALESCE(max(y.current_exec), 1) AS e FROM instances y"
    " WHERE y.instance_id = u.instance_id) i"
    " LEFT JOIN hk ON hk.i = u.instance_id AND hk.e = i.e)"
    " SELECT u.due_at, u.instance_id, 0::bigint, u.lock_token, 0::bigint, NULL::text,"
    " NULL::text, NULL::bytea FROM u"
    " UNION ALL SELECT u.due_at, u.instance_id, 1, m.seq, m.attempt, NULL, NULL, m.item"
    " FROM m JOIN u ON u.instance_id = m.instance_id"
    " UNION ALL SELECT x.due_at, x.instance_id, 2, x.current_exec, 0, x.name, x.version, NULL"
    " FROM x WHERE x.current_exec IS NOT NULL"
    " UNION ALL SELECT x.due_at, x.instance_id, 3, h.event_id, 0, NULL, NULL, h.rec"
    " FROM x CROSS JOIN LATERAL (SELECT y.event_id, y.rec FROM history y"
    " WHERE y.instance_id = x.instance_id AND y.exec = x.e AND y.event_id >= x.held OFFSET 0) h"
    /* (t 4) its committed key-value state: id = updated_at, name = key, version = value */
    " UNION ALL SELECT x.due_at, x.instance_id, 4, k.updated_at, 0, k.key, k.value, NULL"
    " FROM x CROSS JOIN LATERAL (SELECT z.updated_at, z.key, z.value FROM kv z"
    " WHERE z.instance_id = x.instance_id OFFSET 0) k"
    " UNION ALL SELECT c.due_at, c.instance_id, 5, 0, 0, NULL, NULL, NULL FROM c"
    " WHERE NOT EXISTS (SELECT 1 FROM u WHERE u.instance_id = c.instance_id)"
    " ORDER BY 1, 2, 3, 4",
  [PQ_ACK_ORCH] = /* migration 9: every orchestration ack of a cycle (pg_orch.c);
    ** one outcome row per ack, by k */
    "SELECT * FROM dx_ack_orchs($1::bigint, $2::text[], $3::bigint[], $4::bigint[],"
    " $5::bigint[], $6::text[], $7::text[], $8::bigint[], $9::text[], $10::text[],"
    " $11::bigint[], $12::text[], $13::bigint[], $14::text[], $15::text[], $16::bigint[],"
    " $17::bigint[], $18::bigint[], $19::bigint[], $20::bytea[], $21::bigint[],"
    " $22::text[], $23::text[], $24::bigint[], $25::bigint[], $26::bigint[],"
    " $27::bytea[], $28::text[], $29::bigint[], $30::text[], $31::bigint[],"
    " $32::bigint[], $33::bigint[], $34::text[], $35::bigint[], $36::bytea[],"
    " $37::text[], $38::text[], $39::bigint[], $40::text[], $41::bigint[], $42::bigint[],"
    " $43::text[], $44::text[], $45::bigint[])",
  [PQ_EXEC_UPSERT] = /* migration 2 */
    "SELECT dx_exec_set($1, $2::bigint, $3::bigint, $4::text, $5::bigint, $6::text, $7::text,"
    " $8::bigint, $9::bigint)",
  [PQ_ACK_WORK] = /* migration 9: every worker-item ack of a cycle (pg_work.c) */
    "SELECT * FROM dx_ack_works($1::bigint, $2::bigint[], $3::text[], $4::bytea[])",
  [PQ_START_CLAIM] =
    "INSERT INTO started (instance_id) SELECT $1::text"
    " WHERE NOT EXISTS (SELECT 1 FROM instances WHERE instance_id = $1::text)"
    " ON CONFLICT (instance_id) DO NOTHING RETURNING 1::bigint",
  [PQ_ORCH_REAP] = /* liveness on: instances locked by a dead process are due now */
    "UPDATE orch_queue SET due_at = $1::bigint, locked_until = $1::bigint"
    " WHERE lock_token IS NOT NULL AND locked_until > $1::bigint AND locked_by IS NOT NULL"
    " AND locked_by <> $2 AND" OWNER_DEAD("locked_by", "$3::text", "1"),
  [PQ_ORCH_RELEASE] = "SELECT dx_orch_release($1)",
  [PQ_ORCH_LATER_MSGS] = /* messages not visible yet: is a start among them? */
    "SELECT visible_at, item FROM orch_msgs WHERE instance_id = $1 AND visible_at > $2::bigint"
    " ORDER BY visible_at, seq",
  [PQ_ORCH_WAIT] = /* unlock; due when the start handed back is visible */
    "UPDATE orch_queue SET lock_token = NULL, locked_until = NULL, locked_by = NULL,"
    " ready_at = $2::bigint, due_at = $2::bigint WHERE instance_id = $1",
  [PQ_ORCH_DEL_BATCH] = "DELETE FROM orch_msgs WHERE instance_id = $1 AND lock_token = $2::bigint",
  [PQ_ORCH_CHECK] =
    "SELECT lock_token, locked_until FROM orch_queue WHERE instance_id = $1 FOR UPDATE",
  [PQ_ORCH_RENEW] =
    "UPDATE orch_queue SET locked_until = $2::bigint, due_at = $2::bigint WHERE instance_id = $1",
  [PQ_ORCH_ABANDON_MSGS] =
    "UPDATE orch_msgs SET lock_token = NULL, visible_at = COALESCE($3::bigint, visible_at),"
    " attempt = CASE WHEN $4::bigint <> 0 AND attempt > 0 THEN attempt - 1 ELSE attempt END"
    " WHERE instance_id = $1 AND lock_token = $2::bigint",

  /* instances, executions, history */
  [PQ_INST_GET] = "SELECT name, version, current_exec FROM instances WHERE instance_id = $1",
  [PQ_HIST_READ] = /* read_history: execution $2 (0: the latest) of $1 and its events, in one
    ** statement (one snapshot: a turn or a delete committing meanwhile is seen whole or not at
    ** all). First row: the execution (NULL: no record and no history, unknown), event id 0;
    ** then the events. An instance with history but no record (append_with_execution, tests)
    ** has the history's latest execution. */
    "WITH r AS (SELECT COALESCE((SELECT current_exec FROM instances WHERE instance_id = $1),"
    " (SELECT max(exec) FROM history WHERE instance_id = $1)) AS cur),"
    " x AS (SELECT CASE WHEN r.cur IS NULL OR $2::bigint = 0 THEN r.cur ELSE $2::bigint END AS e"
    " FROM r)"
    " SELECT x.e, 0::bigint, NULL::bytea FROM x"
    " UNION ALL SELECT x.e, y.event_id, y.rec FROM x JOIN history y ON y.instance_id = $1"
    " AND y.exec = x.e ORDER BY 2",
  [PQ_HIST_LOAD] =
    "SELECT event_id, rec FROM history WHERE instance_id = $1 AND exec = $2::bigint"
    " ORDER BY event_id",
  [PQ_HIST_DUPS] =
    "SELECT min(event_id) FROM history WHERE instance_id = $1 AND exec = $2::bigint"
    " AND event_id = ANY($3::bigint[])",
  [PQ_HIST_INSERT] =
    "INSERT INTO history (instance_id, exec, event_id, rec) VALUES ($1, $2::bigint, $3::bigint,"
    " $4::bytea)",
  /* worker queue */
  [PQ_WORK_INSERT] =
    "SELECT dx_work_push($1::bigint, ARRAY[$2::text], ARRAY[$3::text], ARRAY[$4::bigint],"
    " ARRAY[$5::bigint], ARRAY[$7::bigint], ARRAY[$6::bytea], ARRAY[$8::text])",
  [PQ_WORK_FETCH_PLAIN] = /* a worker without sessions: the plain part of dx_fetch_work alone,
    ** a statement of its own (no PL/pgSQL call on the common path) */
    PLAIN_LOCK("$1::bigint", "$2::bigint", "$3::bigint", "$4::text", "$5::bigint", "$6::text[]",
               "9223372036854775807", "9223372036854775807"),
  [PQ_WORK_FETCH] = /* migration 10: up to $3 rows, sessions claimed in the call (pg_work.c) */
    "SELECT * FROM dx_fetch_work($1::bigint, $2::bigint, $3::bigint, $4::text, $5::bigint,"
    " $6::text[], $7::text, $8::bigint, $9::bigint, $10::bigint, $11::bigint, $12::text[],"
    " $13::text, $14::bigint)",
  [PQ_WORK_REAP] = /* liveness on: a dead owner's in-flight session rows are due now */
    "UPDATE work w SET due_at = $1::bigint, locked_until = $1::bigint FROM sessions s"
    " WHERE w.session_id = s.session_id AND s.owner <> '' AND s.owner <> $2"
    " AND s.locked_until > $1::bigint AND w.lock_token IS NOT NULL"
    " AND w.locked_until > $1::bigint AND" OWNER_DEAD("s.owner", "$3::text", "1"),
  [PQ_WORK_REAP_PLAIN] = /* liveness on: plain rows locked by a dead handle are due now */
    "UPDATE work SET due_at = $1::bigint, locked_until = $1::bigint"
    " WHERE session_id IS NULL AND due_at > $1::bigint AND lock_token IS NOT NULL"
    " AND locked_until > $1::bigint AND locked_by IS NOT NULL AND locked_by <> $2 AND"
    OWNER_DEAD("locked_by", "$3::text", "1"),
  [PQ_WORK_BY_TOKEN] = /* with the session's epoch and owner now (fencing) */
    "SELECT w.seq, w.locked_until, w.session_id, w.sess_epoch, s.epoch, s.owner FROM work w"
    " LEFT JOIN sessions s ON s.session_id = w.session_id WHERE w.lock_token = $1::bigint"
    " FOR UPDATE OF w",
  [PQ_WORK_RENEW] =
    "UPDATE work SET locked_until = $2::bigint, due_at = $2::bigint WHERE seq = $1::bigint",
  [PQ_WORK_ABANDON] =
    "UPDATE work SET lock_token = NULL, locked_until = NULL, visible_at = $2::bigint,"
    " due_at = $2::bigint,"
    " attempt = CASE WHEN $3::bigint <> 0 AND attempt > 0 THEN attempt - 1 ELSE attempt END"
    " WHERE seq = $1::bigint",

  /* sessions */
  [PQ_SESS_TOUCH] = "UPDATE sessions SET last_activity = $2::bigint WHERE session_id = $1",
  [PQ_SESS_RENEW] =
    "WITH u AS (UPDATE sessions SET locked_until = $3::bigint WHERE owner = $1"
    " AND locked_until > $2::bigint"
    " AND ($4::bigint <= 0 OR last_activity > $2::bigint - $4::bigint)"
    " RETURNING session_id, owner, locked_until, last_activity)"
    " SELECT u.session_id, u.owner, u.locked_until, u.last_activity,"
    " (SELECT count(*) FROM work w WHERE w.session_id = u.session_id),"
    " CASE WHEN" SESSION_ENDED("u.session_id") " THEN 1 ELSE 0 END FROM u ORDER BY 1",
  [PQ_SESS_RELEASE] =
    "UPDATE sessions SET owner = '', prev = $1, locked_until = $2::bigint"
    " WHERE owner = $1 AND ($3::text IS NULL OR session_id = $3::text)",
  [PQ_SESS_CLEANUP] = /* and the users that ended or whose session is gone */
    "WITH d AS (DELETE FROM sessions s WHERE (s.owner = '' OR s.locked_until <= $1::bigint)"
    " AND NOT EXISTS (SELECT 1 FROM work w WHERE w.session_id = s.session_id)"
    " RETURNING s.session_id), x AS (DELETE FROM session_users u"
    " WHERE u.session_id IN (SELECT session_id FROM d)"
    " OR NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = u.session_id)"
    " OR NOT" USER_ALIVE("u") ")"
    " SELECT count(*) FROM d",
  [PQ_SEV_INSERT] =
    "INSERT INTO session_events (session_id, at, event, worker, detail, prev)"
    " VALUES ($1, $2::bigint, $3, $4, $5, $6)",
  [PQ_SEV_TRIM] = /* keep the session's latest $2 events */
    "DELETE FROM session_events WHERE session_id = $1 AND seq <= (SELECT seq FROM"
    " session_events WHERE session_id = $1 ORDER BY seq DESC OFFSET $2::bigint LIMIT 1)",
  [PQ_SEV_LIST] =
    "SELECT at, event, worker, detail, prev FROM session_events WHERE session_id = $1"
    " ORDER BY seq",
  [PQ_WORKERS_LIST] = /* live registrations ($1 now, $2 liveness prefix, $3 liveness on) with
  ** the instance locks and plain row locks their handles hold */
    "WITH t AS (SELECT locked_by, count(*) AS n FROM orch_queue WHERE lock_token IS NOT NULL"
    " AND locked_until > $1::bigint GROUP BY locked_by),"
    " a AS (SELECT locked_by, count(*) AS n FROM work WHERE lock_token IS NOT NULL"
    " AND session_id IS NULL AND locked_until > $1::bigint GROUP BY locked_by)"
    " SELECT w.worker_id, w.host, w.pid, w.started_at, coalesce(t.n, 0), coalesce(a.n, 0)"
    " FROM workers w LEFT JOIN t ON t.locked_by = w.locker LEFT JOIN a ON a.locked_by = w.locker"
    " WHERE NOT" OWNER_DEAD("w.worker_id", "$2::text", "$3::bigint") " ORDER BY w.worker_id",
  [PQ_SEV_PRUNE] = "DELETE FROM session_events WHERE at < $1::bigint",
  [PQ_SESS_LIST] =
    "SELECT sid, owner, locked_until, last_activity, queued, running FROM ("
    " SELECT s.session_id AS sid, s.owner, s.locked_until, s.last_activity,"
    " (SELECT count(*) FROM work w WHERE w.session_id = s.session_id) AS queued,"
    " (SELECT count(*) FROM work w WHERE w.session_id = s.session_id"
    " AND w.lock_token IS NOT NULL) AS running, 0 AS grp"
    " FROM sessions s UNION ALL"
    " SELECT w.session_id, NULL, 0::bigint, 0::bigint, count(*),"
    " count(*) FILTER (WHERE w.lock_token IS NOT NULL), 1 FROM work w"
    " WHERE w.session_id IS NOT NULL"
    " AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = w.session_id)"
    " GROUP BY w.session_id) l ORDER BY grp, sid",

  /* reads and management */
  /* One statement, so one snapshot: the record, or else (column 14 is 0) a start queued or
  ** being turned. Read as two statements, a first turn committing between them (record made,
  ** start consumed) was missed by both and a just-started instance read as unknown. */
  [PQ_INFO_GET] =
    "SELECT i.name, i.version, i.current_exec, i.custom_status, i.cs_version, i.created_at,"
    " i.updated_at, i.parent, e.status, e.output, e.f_cat, e.f_kind, e.f_msg, e.f_retry, 1::bigint"
    " FROM instances i LEFT JOIN executions e"
    " ON e.instance_id = i.instance_id AND e.exec = i.current_exec WHERE i.instance_id = $1"
    " UNION ALL SELECT NULL, NULL, 0, NULL, 0, 0, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    " 0::bigint FROM orch_queue q WHERE q.instance_id = $1"
    " AND (q.lock_token IS NOT NULL OR q.ready_at IS NOT NULL)"
    " AND NOT EXISTS (SELECT 1 FROM instances i2 WHERE i2.instance_id = $1)",
  [PQ_LIST_INSTANCES] =
    "SELECT instance_id FROM instances ORDER BY created_at DESC, created_seq DESC",
  [PQ_DEPTHS] =
    "SELECT (SELECT count(*) FROM orch_msgs), (SELECT count(*) FROM work),"
    " (SELECT count(*) FROM instances)",
  [PQ_TEST_CORRUPT] =
    "UPDATE history SET rec = '\\xc1c1c1c1'::bytea WHERE instance_id = $1 AND exec = $2::bigint"
    " AND event_id = $3::bigint",
  [PQ_TEST_EXPIRE] = "UPDATE sessions SET locked_until = $2::bigint WHERE session_id = $1",
  [PQ_NEXT_DUE_LIVE] = /* liveness on: while worker rows or instances are in flight, look
    ** again soon (their holder may die; the next fetch sweeps dead holders' locks)
    ** ($5 now, $6 the next sweep; rows of tags it does not take are not its concern) */
    "SELECT LEAST(" NEXT_DUE_OF_FILTER ","
    " CASE WHEN EXISTS (SELECT 1 FROM work w WHERE w.lock_token IS NOT NULL"
    " AND w.locked_until > $5::bigint" TAG_OK("w", "$1::bigint", "$2::text[]") ")"
    " OR EXISTS (SELECT 1 FROM orch_queue WHERE locked_by IS NOT NULL"
    " AND locked_until > $5::bigint) THEN $6::bigint END)",
  /* management (admin.c): a page of recorded instances newest first, strictly after the
  ** cursor ($1, $2), created after $4, updated before $5 (0: any), roots only when $6, at most
  ** $7 (one more than the page: is there a next one?). One statement per status filter and
  ** per name filter, so each plan fits its filter (a rare status reads executions_status, a
  ** name instances_name, no filter the newest of instances_created). */
#define ADM_PAGE(name_pred, status_pred)                                                     \
    "SELECT i.instance_id, i.name, i.version, i.current_exec, i.custom_status, i.cs_version," \
    " i.created_at, i.updated_at, i.parent, e.status, e.output, e.f_cat, e.f_kind, e.f_msg,"  \
    " e.f_retry, i.created_seq FROM instances i LEFT JOIN executions e"                       \
    " ON e.instance_id = i.instance_id AND e.exec = i.current_exec"                          \
    " WHERE (i.created_at, i.created_seq) < ($1::bigint, $2::bigint) AND " name_pred         \
    " AND i.created_at > $4::bigint AND ($5::bigint = 0 OR i.updated_at < $5::bigint)"      \
    " AND ($6::bigint = 0 OR i.parent IS NULL)" status_pred                                  \
    " ORDER BY i.created_at DESC, i.created_seq DESC LIMIT $7::bigint"
#define ADM_ANY_NAME "$3::text IS NULL"
#define ADM_NAME "i.name = $3::text"
#define ADM_RUN " AND e.status IN (1, 4)" /* continued-as-new counts as running */
#define ADM_DONE " AND e.status = 2"
#define ADM_FAIL " AND e.status = 3"
#define ADM_END " AND e.status IN (2, 3)"
  [PQ_ADM_PAGE] = ADM_PAGE(ADM_ANY_NAME, ""),
  [PQ_ADM_PAGE_RUN] = ADM_PAGE(ADM_ANY_NAME, ADM_RUN),
  [PQ_ADM_PAGE_DONE] = ADM_PAGE(ADM_ANY_NAME, ADM_DONE),
  [PQ_ADM_PAGE_FAIL] = ADM_PAGE(ADM_ANY_NAME, ADM_FAIL),
  [PQ_ADM_PAGE_END] = ADM_PAGE(ADM_ANY_NAME, ADM_END),
  [PQ_ADM_PAGE_N] = ADM_PAGE(ADM_NAME, ""),
  [PQ_ADM_PAGE_N_RUN] = ADM_PAGE(ADM_NAME, ADM_RUN),
  [PQ_ADM_PAGE_N_DONE] = ADM_PAGE(ADM_NAME, ADM_DONE),
  [PQ_ADM_PAGE_N_FAIL] = ADM_PAGE(ADM_NAME, ADM_FAIL),
  [PQ_ADM_PAGE_N_END] = ADM_PAGE(ADM_NAME, ADM_END),
  /* queued starts newest first, before seq $1, at most $2 (orch_msgs_starts, or with the name
  ** $3 orch_msgs_start_name): a batch of START messages read from the index first, then
  ** whether each instance has run (a record), so no plan reads every instance to find out */
#define ADM_QUEUED(name_pred)                                                                \
    "SELECT b.instance_id, b.seq, b.visible_at, b.item,"                                    \
    " EXISTS (SELECT 1 FROM instances i WHERE i.instance_id = b.instance_id) FROM"           \
    " (SELECT m.instance_id, m.seq, m.visible_at, m.item FROM orch_msgs m"                   \
    " WHERE m.start_name IS NOT NULL" name_pred " AND m.seq < $1::bigint"                   \
    " ORDER BY m.seq DESC LIMIT $2::bigint) b ORDER BY b.seq DESC"
  [PQ_ADM_QUEUED] = ADM_QUEUED(""),
  [PQ_ADM_QUEUED_N] = ADM_QUEUED(" AND m.start_name = $3::text"),
  /* Management reads are one statement each (one snapshot), like instance info: */
  [PQ_ADM_EXECS] = /* the record's executions (no row: no record; one row with a NULL
    ** execution: a record without executions) */
    "SELECT e.exec, e.status, e.started_at, e.completed_at,"
    " (SELECT count(*) FROM history h WHERE h.instance_id = e.instance_id AND h.exec = e.exec)"
    " FROM instances i LEFT JOIN executions e ON e.instance_id = i.instance_id"
    " WHERE i.instance_id = $1 ORDER BY e.exec",
  [PQ_ADM_QUEUE] = /* an instance's orchestrator messages (queue 1), then its worker rows (2):
    ** queue, visible_at, attempt, item, locked_until, locked_by */
    "SELECT 1 AS k, m.seq, m.visible_at, m.attempt, m.item,"
    " CASE WHEN q.lock_token IS NOT NULL AND m.lock_token = q.lock_token THEN q.locked_until END,"
    " CASE WHEN q.lock_token IS NOT NULL AND m.lock_token = q.lock_token THEN q.locked_by END"
    " FROM orch_msgs m LEFT JOIN orch_queue q ON q.instance_id = m.instance_id"
    " WHERE m.instance_id = $1"
    " UNION ALL SELECT 2, w.seq, w.visible_at, w.attempt, w.item,"
    " CASE WHEN w.lock_token IS NOT NULL THEN w.locked_until END,"
    " CASE WHEN s.owner <> '' THEN s.owner END"
    " FROM work w LEFT JOIN sessions s ON s.session_id = w.session_id"
    " WHERE w.instance_id = $1 ORDER BY 1, 2",
  [PQ_ADM_STATUS] = /* status of a record (0: no execution), -1: queued only, no row: unknown */
    "SELECT coalesce(e.status, 0) FROM instances i LEFT JOIN executions e"
    " ON e.instance_id = i.instance_id AND e.exec = i.current_exec WHERE i.instance_id = $1"
    " UNION ALL SELECT -1 FROM orch_queue q WHERE q.instance_id = $1"
    " AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.instance_id = $1) LIMIT 1",
  [PQ_ADM_DELETE] = /* everything under one id; returns how much was there */
    "WITH" DROP_QUEUES_CTE("$1") ","
    " dh AS (DELETE FROM history WHERE instance_id = $1 RETURNING 1),"
    " de AS (DELETE FROM executions WHERE instance_id = $1 RETURNING 1),"
    " dst AS (DELETE FROM started WHERE instance_id = $1 RETURNING 1),"
    " dk AS (DELETE FROM kv WHERE instance_id = $1), dkd AS (DELETE FROM kv_delta"
    " WHERE instance_id = $1),"
    " du AS (DELETE FROM session_users WHERE instance_id = $1),"
    " di AS (DELETE FROM instances WHERE instance_id = $1 RETURNING 1)"
    " SELECT (SELECT count(*) FROM di) + (SELECT count(*) FROM de) + (SELECT count(*) FROM dh)"
    " + (SELECT count(*) FROM dq)",
  [PQ_ADM_PRUNE] = /* ended executions older than the newest $2 */
    "WITH old AS (SELECT exec FROM executions WHERE instance_id = $1 AND status <> 1"
    " AND exec <= (SELECT current_exec FROM instances WHERE instance_id = $1) - $2::bigint),"
    " dh AS (DELETE FROM history WHERE instance_id = $1 AND exec IN (SELECT exec FROM old)),"
    " de AS (DELETE FROM executions WHERE instance_id = $1 AND exec IN (SELECT exec FROM old)"
    " RETURNING 1) SELECT count(*) FROM de",
  [PQ_ADM_TERM_CHECK] =
    "SELECT i.current_exec, coalesce(e.status, 0) FROM instances i LEFT JOIN executions e"
    " ON e.instance_id = i.instance_id AND e.exec = i.current_exec WHERE i.instance_id = $1"
    " FOR UPDATE OF i",
  [PQ_ADM_TOUCH] = "UPDATE instances SET updated_at = $2::bigint WHERE instance_id = $1",
  [PQ_ADM_DROP_QUEUES] = "WITH" DROP_QUEUES_CTE("$1") " SELECT 1",
  /* key-value state (pg_kv.c) */
  [PQ_KV_FOLD] = "SELECT dx_kv_fold($1)", /* migration 3 */
  [PQ_KV_GET] =
    "SELECT value, updated_at FROM (SELECT 0 AS o, value, updated_at FROM kv_delta"
    " WHERE instance_id = $1 AND key = $2 UNION ALL SELECT 1, value, updated_at FROM kv"
    " WHERE instance_id = $1 AND key = $2) s ORDER BY o LIMIT 1",
  [PQ_KV_LIST] =
    "SELECT key, value, updated_at FROM (SELECT DISTINCT ON (key) key, value, updated_at FROM"
    " (SELECT 0 AS o, key, value, updated_at FROM kv_delta WHERE instance_id = $1 UNION ALL"
    " SELECT 1, key, value, updated_at FROM kv WHERE instance_id = $1) u ORDER BY key, o) m"
    " WHERE value IS NOT NULL ORDER BY key",
  [PQ_NEXT_DUE] = "SELECT LEAST(" NEXT_DUE_OF_FILTER ")",
};

static const char *const NAMES[PQ__COUNT] = {
#define PG__STMT_NAME(name) "dx_" #name,
  PG_STATEMENTS(PG__STMT_NAME)
#undef PG__STMT_NAME
};

const char *dx__pg_sql(pg_stmt_t id) { return SQL[id]; }
const char *dx__pg_stmt_name(pg_stmt_t id) { return NAMES[id]; }
