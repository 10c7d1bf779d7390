/*
** pg_sql_parts.h -- SQL fragments shared by the migrations' functions (pg_migrations.c) and the
** prepared statements (pg_sql.c): owner liveness, session users and ends, tag filters, session
** heads and the plain-row lock. A change to one that a stored function uses needs a migration
** that replaces the function.
*/
#ifndef DX_PG_SQL_PARTS_H
#define DX_PG_SQL_PARTS_H

/* An owner counts as dead (liveness on: $live = 1) when nobody holds its shared liveness lock
** and the server has been up a while (a restart drops every lock: grace before trusting it).
** The probe's exclusive lock lasts to the end of the prober's transaction. */
#define OWNER_DEAD(owner, prefix, live)                                                      \
  " (" live " = 1 AND pg_postmaster_start_time() < clock_timestamp() - interval '5 seconds'" \
  " AND pg_try_advisory_xact_lock(hashtextextended(" prefix " || " owner ", 0)))"

/* A user (alias u) still runs: its execution runs, or it continued as new into an execution
** that has not had its first turn yet (it may use the session again). */
#define USER_ALIVE(u)                                                                       \
  " EXISTS (SELECT 1 FROM executions ee WHERE ee.instance_id = " u ".instance_id"             \
  " AND ee.exec = " u ".exec AND (ee.status = 1 OR (ee.status = 4 AND EXISTS (SELECT 1"        \
  " FROM instances ei WHERE ei.instance_id = " u ".instance_id"                               \
  " AND ei.current_exec = " u ".exec))))"

/* Session `sid` ended: no rows left and none of its users still runs. OFFSET 0 keeps the users
** test a per-session index lookup: without it the planner may hash the whole session_users x
** executions join, a scan of every execution in the store per evaluation. */
#define SESSION_ENDED(sid)                                                                  \
  " (NOT EXISTS (SELECT 1 FROM work ew WHERE ew.session_id = " sid ")"                       \
  " AND NOT EXISTS (SELECT 1 FROM session_users eu WHERE eu.session_id = " sid " AND"         \
  USER_ALIVE("eu") " OFFSET 0))"

/* The worker takes the row's tag: untagged rows when `untagged` <> 0, else tags in `tags`. */
#define TAG_OK(row, untagged, tags)                                                          \
  " AND CASE WHEN " row ".tag IS NULL THEN " untagged " <> 0 ELSE " row ".tag = ANY(" tags \
  ") END"

/* A claimable-or-owned session row is only a candidate when it is its session's head. */
#define SESSION_HEAD                                                                        \
  " AND NOT EXISTS (SELECT 1 FROM work x WHERE x.session_id = w.session_id"                 \
  " AND (x.due_at < w.due_at OR (x.due_at = w.due_at AND x.seq < w.seq)))"

/* Lock the `k` plain rows due first, before (`lim_due`, `lim_seq`) in due order: untagged ones
** when `untagged` <> 0, tagged ones whose tag is in `tags` (each from its own index); locked by
** `proc` (liveness). Returns a work fetch's columns (token, attempt, item, due, claimed = false,
** no previous owner), oldest first. */
#define PLAIN_LOCK(now, until, k, proc, untagged, tags, lim_due, lim_seq)                    \
  " WITH u AS (SELECT seq, due_at FROM work WHERE session_id IS NULL AND tag IS NULL"       \
  " AND " untagged " <> 0 AND due_at <= " now " AND (due_at, seq) < (" lim_due ", " lim_seq \
  ") ORDER BY due_at, seq LIMIT " k " FOR UPDATE SKIP LOCKED),"                             \
  " g AS (SELECT seq, due_at FROM work WHERE session_id IS NULL AND tag = ANY(" tags ")"    \
  " AND due_at <= " now " AND (due_at, seq) < (" lim_due ", " lim_seq ")"                   \
  " ORDER BY due_at, seq LIMIT " k " FOR UPDATE SKIP LOCKED),"                              \
  " c AS (SELECT seq, due_at FROM u UNION ALL SELECT seq, due_at FROM g"                    \
  " ORDER BY due_at, seq LIMIT " k "),"                                                     \
  " l AS (UPDATE work w SET lock_token = nextval('dx_seq'), locked_until = " until ","      \
  " due_at = " until ", attempt = w.attempt + 1, locked_by = " proc " FROM c"               \
  " WHERE w.seq = c.seq RETURNING w.lock_token, w.attempt, w.item, c.seq, c.due_at)"        \
  " SELECT l.lock_token, l.attempt, l.item, l.due_at, false, NULL::text FROM l"             \
  " ORDER BY l.due_at, l.seq"

#endif
