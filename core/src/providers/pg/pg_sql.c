/*
** pg_sql.c -- the SQL of the PostgreSQL provider: schema migrations and prepared statements.
**
** Schema (all times BIGINT ms on the caller's clock; text keys use COLLATE "C" so order is
** byte order, as in the LMDB provider):
**   orch_queue  one row per instance with queued or locked messages. due_at = ready_at while
**               unlocked (earliest visible message) and locked_until while locked, so one index
**               serves "ready" and "lock expired". Every enqueue upserts it (READ COMMITTED:
**               a release re-reads the row it waited for, so no wake-up is lost).
**   orch_msgs   the messages; a fetch tags the visible ones with its lock token.
**   work        worker rows; due_at = visible_at while unlocked, locked_until while locked.
**   sessions    session ownership and leases ('' owner = released); epoch counts the claims
**               (fencing: work.sess_epoch is the epoch a session row was locked under, and a
**               lock from an earlier epoch can no longer ack or renew).
**   session_users  the instances (and executions) that ran activities of a session: once they
**               all ended and no rows are left, the session is "ended" (frees its slot).
**   started     every instance id a START was enqueued for: the uniqueness key that makes a
**               second client START of an id DX_EEXIST, even when two clients race.
** Tokens and sequence numbers come from one sequence, so they are unique across hosts.
*/
#include "providers/pg/pg_sql.h"

static const char MIGRATION_1[] =
  "CREATE SEQUENCE dx_seq;"
  "CREATE TABLE instances (instance_id text COLLATE \"C\" PRIMARY KEY, name text, version text,"
  "  current_exec bigint NOT NULL DEFAULT 0, custom_status text,"
  "  cs_version bigint NOT NULL DEFAULT 0, created_at bigint NOT NULL, updated_at bigint NOT NULL,"
  "  parent text, created_seq bigint NOT NULL);"
  "CREATE INDEX instances_created ON instances (created_at, created_seq);"
  "CREATE TABLE executions (instance_id text COLLATE \"C\", exec bigint, status bigint NOT NULL,"
  "  output text, f_cat bigint, f_kind text, f_msg text, f_retry bigint,"
  "  started_at bigint NOT NULL, completed_at bigint NOT NULL, PRIMARY KEY (instance_id, exec));"
  "CREATE TABLE history (instance_id text COLLATE \"C\", exec bigint, event_id bigint,"
  "  rec bytea NOT NULL, PRIMARY KEY (instance_id, exec, event_id));"
  "CREATE TABLE orch_queue (instance_id text COLLATE \"C\" PRIMARY KEY, ready_at bigint,"
  "  locked_until bigint, lock_token bigint, due_at bigint, locked_by text);"
  "CREATE INDEX orch_queue_due ON orch_queue (due_at, instance_id) WHERE due_at IS NOT NULL;"
  "CREATE TABLE orch_msgs (seq bigint PRIMARY KEY, instance_id text COLLATE \"C\" NOT NULL,"
  "  visible_at bigint NOT NULL, lock_token bigint, attempt bigint NOT NULL DEFAULT 0,"
  "  item bytea NOT NULL);"
  "CREATE INDEX orch_msgs_inst ON orch_msgs (instance_id, seq);"
  "CREATE TABLE work (seq bigint PRIMARY KEY, due_at bigint NOT NULL, visible_at bigint NOT NULL,"
  "  locked_until bigint, lock_token bigint, attempt bigint NOT NULL DEFAULT 0,"
  "  session_id text COLLATE \"C\", instance_id text COLLATE \"C\" NOT NULL, exec bigint,"
  "  activity_id bigint, kind bigint NOT NULL, item bytea NOT NULL);"
  "CREATE INDEX work_plain ON work (due_at, seq) WHERE session_id IS NULL;"
  "CREATE INDEX work_sess_due ON work (due_at, seq) WHERE session_id IS NOT NULL;"
  "CREATE INDEX work_sess ON work (session_id, due_at, seq) WHERE session_id IS NOT NULL;"
  "CREATE UNIQUE INDEX work_token ON work (lock_token) WHERE lock_token IS NOT NULL;"
  "CREATE INDEX work_ident ON work (instance_id, exec, activity_id);"
  "CREATE TABLE sessions (session_id text COLLATE \"C\" PRIMARY KEY,"
  "  owner text COLLATE \"C\" NOT NULL DEFAULT '', prev text, locked_until bigint NOT NULL,"
  "  last_activity bigint NOT NULL);"
  "CREATE INDEX sessions_owner ON sessions (owner);"
  "CREATE TABLE started (instance_id text COLLATE \"C\" PRIMARY KEY);";

/* Version 2: the writes of an acknowledgement as server-side functions, so that a store cycle's
** acks need no check round trip of their own (pg_cycle.c): each ack is one call that checks
** the lock and either writes everything or nothing, and returns its outcome as a row
** (r_code 0 ok; 1 not locked with that token; 2 lock expired; 3 duplicate event r_a).
** CREATE OR REPLACE keeps the migration idempotent. The two entry points resolve tables in the
** schema they were created in (until version 4); the helpers they call (also called directly, on
** connections whose search_path is the schema) run in the caller's path, which saves a path
** switch per call. Helpers are PL/pgSQL, not SQL, so their plans are cached per connection.
** Also: work.locked_by. */
static const char MIGRATION_2[] =
  /* the handle that locked a worker row (liveness: a dead locker's rows are due at once) */
  "ALTER TABLE work ADD COLUMN IF NOT EXISTS locked_by text;"
  /* messages for the orchestrator, in array order; each instance's queue row folds in its
  ** earliest one (see orch_queue: a concurrent release re-reads the row, nothing is lost) */
  "CREATE OR REPLACE FUNCTION dx_orch_push(o_inst text[], o_vis bigint[], o_item bytea[])"
  " RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " INSERT INTO orch_msgs (seq, instance_id, visible_at, item)"
  "  SELECT nextval('dx_seq'), u.i, u.v, u.it FROM unnest(o_inst, o_vis, o_item) u(i, v, it);"
  " INSERT INTO orch_queue AS q (instance_id, ready_at, due_at)"
  "  SELECT u.i, min(u.v), min(u.v) FROM unnest(o_inst, o_vis) u(i, v) GROUP BY u.i ORDER BY u.i"
  "  ON CONFLICT (instance_id) DO UPDATE SET ready_at = LEAST(q.ready_at, EXCLUDED.ready_at),"
  "  due_at = CASE WHEN q.lock_token IS NULL THEN LEAST(q.due_at, EXCLUDED.due_at)"
  "  ELSE q.due_at END;"
  " END $f$;"
  /* worker rows, visible at p_vis */
  "CREATE OR REPLACE FUNCTION dx_work_push(p_vis bigint, w_sid text[], w_inst text[],"
  " w_exec bigint[], w_act bigint[], w_kind bigint[], w_item bytea[])"
  " RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " INSERT INTO work (seq, due_at, visible_at, session_id, instance_id, exec, activity_id,"
  "  kind, item) SELECT nextval('dx_seq'), p_vis, p_vis, u.s, u.i, u.e, u.a, u.k, u.it"
  "  FROM unnest(w_sid, w_inst, w_exec, w_act, w_kind, w_item) u(s, i, e, a, k, it);"
  " END $f$;"
  /* unlock an instance: ready at its earliest remaining message (or what concurrent
  ** enqueuers folded in); the row goes when nothing is left */
  "CREATE OR REPLACE FUNCTION dx_orch_release(p_inst text)"
  " RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " UPDATE orch_queue q SET lock_token = NULL, locked_until = NULL, locked_by = NULL,"
  "  ready_at = LEAST(q.ready_at, m.nxt), due_at = LEAST(q.ready_at, m.nxt)"
  "  FROM (SELECT min(visible_at) AS nxt FROM orch_msgs WHERE instance_id = p_inst) m"
  "  WHERE q.instance_id = p_inst;"
  " DELETE FROM orch_queue WHERE instance_id = p_inst AND lock_token IS NULL"
  "  AND ready_at IS NULL;"
  " END $f$;"
  /* an execution's row: created running (status 0), or given its final status */
  "CREATE OR REPLACE FUNCTION dx_exec_set(p_inst text, p_exec bigint, p_status bigint,"
  " p_output text, p_fcat bigint, p_fkind text, p_fmsg text, p_fretry bigint, p_now bigint)"
  " RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " INSERT INTO executions AS e (instance_id, exec, status, output, f_cat, f_kind, f_msg,"
  "  f_retry, started_at, completed_at) VALUES (p_inst, p_exec,"
  "  CASE WHEN p_status = 0 THEN 1 ELSE p_status END, p_output, p_fcat, p_fkind, p_fmsg,"
  "  p_fretry, p_now, CASE WHEN p_status = 0 THEN 0 ELSE p_now END)"
  "  ON CONFLICT (instance_id, exec) DO UPDATE SET status = p_status, output = p_output,"
  "  f_cat = p_fcat, f_kind = p_fkind, f_msg = p_fmsg, f_retry = p_fretry,"
  "  completed_at = p_now WHERE p_status <> 0;"
  " END $f$;"
  /* one orchestration turn (provider.h ack_orchestration_item) */
  "CREATE OR REPLACE FUNCTION dx_ack_orch(p_inst text, p_token bigint, p_now bigint,"
  " p_exec bigint, p_dup bigint, e_id bigint[], e_rec bytea[], p_name text, p_version text,"
  " p_cs_set bigint, p_cs text, p_parent text, p_status bigint, p_output text, p_fcat bigint,"
  " p_fkind text, p_fmsg text, p_fretry bigint, w_sid text[], w_inst text[], w_exec bigint[],"
  " w_act bigint[], w_kind bigint[], w_item bytea[], c_inst text[], c_exec bigint[],"
  " c_act bigint[], o_inst text[], o_vis bigint[], o_item bytea[], o_start text[])"
  " RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " SET search_path FROM CURRENT AS $f$"
  " DECLARE tok bigint; til bigint; dup bigint;"
  " BEGIN"
  "  SELECT q.lock_token, q.locked_until INTO tok, til FROM orch_queue q"
  "   WHERE q.instance_id = p_inst FOR UPDATE;"
  "  IF tok IS DISTINCT FROM p_token THEN RETURN QUERY SELECT 1::bigint, tok, til; RETURN;"
  "  END IF;"
  "  IF til <= p_now THEN RETURN QUERY SELECT 2::bigint, tok, til; RETURN; END IF;"
  "  dup := NULLIF(p_dup, 0);"
  "  IF dup IS NULL THEN SELECT min(h.event_id) INTO dup FROM history h"
  "   WHERE h.instance_id = p_inst AND h.exec = p_exec AND h.event_id = ANY(e_id); END IF;"
  "  IF dup IS NOT NULL THEN RETURN QUERY SELECT 3::bigint, dup, 0::bigint; RETURN; END IF;"
  "  DELETE FROM orch_msgs WHERE instance_id = p_inst AND lock_token = p_token;"
  "  INSERT INTO instances AS i (instance_id, name, version, current_exec, custom_status,"
  "   cs_version, created_at, updated_at, parent, created_seq)"
  "   VALUES (p_inst, p_name, p_version, p_exec, CASE WHEN p_cs_set <> 0 THEN p_cs END,"
  "   p_cs_set, p_now, p_now, p_parent, nextval('dx_seq'))"
  "   ON CONFLICT (instance_id) DO UPDATE SET"
  "   name = CASE WHEN p_name IS NOT NULL THEN p_name ELSE i.name END,"
  "   version = CASE WHEN p_name IS NOT NULL THEN p_version ELSE i.version END,"
  "   current_exec = GREATEST(i.current_exec, p_exec),"
  "   custom_status = CASE WHEN p_cs_set <> 0 THEN p_cs ELSE i.custom_status END,"
  "   cs_version = i.cs_version + p_cs_set, updated_at = p_now;"
  "  PERFORM dx_exec_set(p_inst, p_exec, p_status, p_output, p_fcat, p_fkind, p_fmsg,"
  "   p_fretry, p_now);"
  "  INSERT INTO history (instance_id, exec, event_id, rec)"
  "   SELECT p_inst, p_exec, u.i, u.r FROM unnest(e_id, e_rec) u(i, r);"
  "  IF cardinality(w_inst) > 0 THEN"
  "   PERFORM dx_work_push(p_now, w_sid, w_inst, w_exec, w_act, w_kind, w_item); END IF;"
  "  IF cardinality(c_inst) > 0 THEN DELETE FROM work w USING unnest(c_inst, c_exec, c_act)"
  "   u(i, e, a) WHERE w.instance_id = u.i AND w.exec = u.e AND w.activity_id = u.a; END IF;"
  "  IF cardinality(o_inst) > 0 THEN PERFORM dx_orch_push(o_inst, o_vis, o_item); END IF;"
  "  IF cardinality(o_start) > 0 THEN" /* a child's id is taken too */
  "   INSERT INTO started (instance_id) SELECT DISTINCT u.i FROM unnest(o_start) u(i)"
  "   ON CONFLICT DO NOTHING; END IF;"
  "  PERFORM dx_orch_release(p_inst);"
  "  RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint;"
  " END $f$;"
  /* one worker item done (provider.h ack_work_item): row gone, completion queued */
  "CREATE OR REPLACE FUNCTION dx_ack_work(p_token bigint, p_now bigint, c_inst text,"
  " c_item bytea) RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " SET search_path FROM CURRENT AS $f$"
  " DECLARE s bigint; til bigint; sid text;"
  " BEGIN"
  "  SELECT w.seq, w.locked_until, w.session_id INTO s, til, sid FROM work w"
  "   WHERE w.lock_token = p_token FOR UPDATE;"
  "  IF NOT FOUND THEN RETURN QUERY SELECT 1::bigint, 0::bigint, 0::bigint; RETURN; END IF;"
  "  IF til <= p_now THEN RETURN QUERY SELECT 2::bigint, s, til; RETURN; END IF;"
  "  DELETE FROM work WHERE seq = s;"
  "  IF sid IS NOT NULL THEN"
  "   UPDATE sessions SET last_activity = p_now WHERE session_id = sid; END IF;"
  "  IF c_item IS NOT NULL THEN"
  "   PERFORM dx_orch_push(ARRAY[c_inst], ARRAY[p_now], ARRAY[c_item]); END IF;"
  "  RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint;"
  " END $f$;";

/* Version 3: key-value state (issue 11; pg_kv.c). kv holds the committed state, kv_delta the
** running execution's changes (value NULL = cleared), as the LMDB provider's tables.
** dx_ack_orch_kv is dx_ack_orch plus the turn's key-value events (k_* arrays, in delta order;
** k_val NULL = clear, k_op 1 = clear all) and, with p_fold, the fold of the changes into the
** committed state when the execution ends: all of it, or nothing when the ack is refused. */
static const char MIGRATION_3[] =
  "CREATE TABLE IF NOT EXISTS kv (instance_id text COLLATE \"C\", key text COLLATE \"C\","
  "  value text NOT NULL, updated_at bigint NOT NULL, PRIMARY KEY (instance_id, key));"
  "CREATE TABLE IF NOT EXISTS kv_delta (instance_id text COLLATE \"C\", key text COLLATE \"C\","
  "  value text, updated_at bigint NOT NULL, PRIMARY KEY (instance_id, key));"
  "CREATE OR REPLACE FUNCTION dx_kv_fold(p_inst text) RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " DELETE FROM kv k USING kv_delta d WHERE k.instance_id = p_inst AND d.instance_id = p_inst"
  "  AND d.key = k.key AND d.value IS NULL;"
  " INSERT INTO kv (instance_id, key, value, updated_at) SELECT instance_id, key, value,"
  "  updated_at FROM kv_delta WHERE instance_id = p_inst AND value IS NOT NULL"
  "  ON CONFLICT (instance_id, key) DO UPDATE SET value = EXCLUDED.value,"
  "  updated_at = EXCLUDED.updated_at;"
  " DELETE FROM kv_delta WHERE instance_id = p_inst;"
  " END $f$;"
  "CREATE OR REPLACE FUNCTION dx_kv_apply(p_inst text, k_op bigint[], k_key text[],"
  " k_val text[], k_at bigint[], p_fold bigint) RETURNS void LANGUAGE plpgsql AS $f$"
  " DECLARE i int; BEGIN"
  " FOR i IN 1 .. coalesce(cardinality(k_op), 0) LOOP"
  "  IF k_op[i] = 1 THEN"
  "   INSERT INTO kv_delta (instance_id, key, value, updated_at) SELECT p_inst, u.key, NULL,"
  "    k_at[i] FROM (SELECT key FROM kv WHERE instance_id = p_inst UNION"
  "    SELECT key FROM kv_delta WHERE instance_id = p_inst) u"
  "    ON CONFLICT (instance_id, key) DO UPDATE SET value = NULL, updated_at = EXCLUDED.updated_at;"
  "  ELSE"
  "   INSERT INTO kv_delta (instance_id, key, value, updated_at)"
  "    VALUES (p_inst, k_key[i], k_val[i], k_at[i]) ON CONFLICT (instance_id, key) DO UPDATE"
  "    SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;"
  "  END IF;"
  " END LOOP;"
  " IF p_fold <> 0 THEN PERFORM dx_kv_fold(p_inst); END IF;"
  " END $f$;"
  "CREATE OR REPLACE FUNCTION dx_ack_orch_kv(p_inst text, p_token bigint, p_now bigint,"
  " p_exec bigint, p_dup bigint, e_id bigint[], e_rec bytea[], p_name text, p_version text,"
  " p_cs_set bigint, p_cs text, p_parent text, p_status bigint, p_output text, p_fcat bigint,"
  " p_fkind text, p_fmsg text, p_fretry bigint, w_sid text[], w_inst text[], w_exec bigint[],"
  " w_act bigint[], w_kind bigint[], w_item bytea[], c_inst text[], c_exec bigint[],"
  " c_act bigint[], o_inst text[], o_vis bigint[], o_item bytea[], o_start text[],"
  " k_op bigint[], k_key text[], k_val text[], k_at bigint[], p_fold bigint)"
  " RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " SET search_path FROM CURRENT AS $f$"
  " DECLARE r record;"
  " BEGIN"
  "  SELECT * INTO r FROM dx_ack_orch(p_inst, p_token, p_now, p_exec, p_dup, e_id, e_rec,"
  "   p_name, p_version, p_cs_set, p_cs, p_parent, p_status, p_output, p_fcat, p_fkind, p_fmsg,"
  "   p_fretry, w_sid, w_inst, w_exec, w_act, w_kind, w_item, c_inst, c_exec, c_act, o_inst,"
  "   o_vis, o_item, o_start);"
  "  IF r.r_code = 0 THEN PERFORM dx_kv_apply(p_inst, k_op, k_key, k_val, k_at, p_fold); END IF;"
  "  RETURN QUERY SELECT r.r_code, r.r_a, r.r_b;"
  " END $f$;";

/* Version 4: the two ack entry points of version 2 again, without their per-call search_path
** switch (SET ... FROM CURRENT): it cost more than the call (pg_stat_statements on a loaded
** machine: a turn's ack 0.5 -> 0.4 ms of server time). The provider's connections set the
** path to the schema. Same signatures and behaviour. */
static const char MIGRATION_4[] =
  /* one orchestration turn (provider.h ack_orchestration_item) */
  "CREATE OR REPLACE FUNCTION dx_ack_orch(p_inst text, p_token bigint, p_now bigint,"
  " p_exec bigint, p_dup bigint, e_id bigint[], e_rec bytea[], p_name text, p_version text,"
  " p_cs_set bigint, p_cs text, p_parent text, p_status bigint, p_output text, p_fcat bigint,"
  " p_fkind text, p_fmsg text, p_fretry bigint, w_sid text[], w_inst text[], w_exec bigint[],"
  " w_act bigint[], w_kind bigint[], w_item bytea[], c_inst text[], c_exec bigint[],"
  " c_act bigint[], o_inst text[], o_vis bigint[], o_item bytea[], o_start text[])"
  " RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " AS $f$"
  " DECLARE tok bigint; til bigint; dup bigint;"
  " BEGIN"
  "  SELECT q.lock_token, q.locked_until INTO tok, til FROM orch_queue q"
  "   WHERE q.instance_id = p_inst FOR UPDATE;"
  "  IF tok IS DISTINCT FROM p_token THEN RETURN QUERY SELECT 1::bigint, tok, til; RETURN;"
  "  END IF;"
  "  IF til <= p_now THEN RETURN QUERY SELECT 2::bigint, tok, til; RETURN; END IF;"
  "  dup := NULLIF(p_dup, 0);"
  "  IF dup IS NULL THEN SELECT min(h.event_id) INTO dup FROM history h"
  "   WHERE h.instance_id = p_inst AND h.exec = p_exec AND h.event_id = ANY(e_id); END IF;"
  "  IF dup IS NOT NULL THEN RETURN QUERY SELECT 3::bigint, dup, 0::bigint; RETURN; END IF;"
  "  DELETE FROM orch_msgs WHERE instance_id = p_inst AND lock_token = p_token;"
  "  INSERT INTO instances AS i (instance_id, name, version, current_exec, custom_status,"
  "   cs_version, created_at, updated_at, parent, created_seq)"
  "   VALUES (p_inst, p_name, p_version, p_exec, CASE WHEN p_cs_set <> 0 THEN p_cs END,"
  "   p_cs_set, p_now, p_now, p_parent, nextval('dx_seq'))"
  "   ON CONFLICT (instance_id) DO UPDATE SET"
  "   name = CASE WHEN p_name IS NOT NULL THEN p_name ELSE i.name END,"
  "   version = CASE WHEN p_name IS NOT NULL THEN p_version ELSE i.version END,"
  "   current_exec = GREATEST(i.current_exec, p_exec),"
  "   custom_status = CASE WHEN p_cs_set <> 0 THEN p_cs ELSE i.custom_status END,"
  "   cs_version = i.cs_version + p_cs_set, updated_at = p_now;"
  "  PERFORM dx_exec_set(p_inst, p_exec, p_status, p_output, p_fcat, p_fkind, p_fmsg,"
  "   p_fretry, p_now);"
  "  INSERT INTO history (instance_id, exec, event_id, rec)"
  "   SELECT p_inst, p_exec, u.i, u.r FROM unnest(e_id, e_rec) u(i, r);"
  "  IF cardinality(w_inst) > 0 THEN"
  "   PERFORM dx_work_push(p_now, w_sid, w_inst, w_exec, w_act, w_kind, w_item); END IF;"
  "  IF cardinality(c_inst) > 0 THEN DELETE FROM work w USING unnest(c_inst, c_exec, c_act)"
  "   u(i, e, a) WHERE w.instance_id = u.i AND w.exec = u.e AND w.activity_id = u.a; END IF;"
  "  IF cardinality(o_inst) > 0 THEN PERFORM dx_orch_push(o_inst, o_vis, o_item); END IF;"
  "  IF cardinality(o_start) > 0 THEN" /* a child's id is taken too */
  "   INSERT INTO started (instance_id) SELECT DISTINCT u.i FROM unnest(o_start) u(i)"
  "   ON CONFLICT DO NOTHING; END IF;"
  "  PERFORM dx_orch_release(p_inst);"
  "  RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint;"
  " END $f$;"
  /* one worker item done (provider.h ack_work_item): row gone, completion queued */
  "CREATE OR REPLACE FUNCTION dx_ack_work(p_token bigint, p_now bigint, c_inst text,"
  " c_item bytea) RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " AS $f$"
  " DECLARE s bigint; til bigint; sid text;"
  " BEGIN"
  "  SELECT w.seq, w.locked_until, w.session_id INTO s, til, sid FROM work w"
  "   WHERE w.lock_token = p_token FOR UPDATE;"
  "  IF NOT FOUND THEN RETURN QUERY SELECT 1::bigint, 0::bigint, 0::bigint; RETURN; END IF;"
  "  IF til <= p_now THEN RETURN QUERY SELECT 2::bigint, s, til; RETURN; END IF;"
  "  DELETE FROM work WHERE seq = s;"
  "  IF sid IS NOT NULL THEN"
  "   UPDATE sessions SET last_activity = p_now WHERE session_id = sid; END IF;"
  "  IF c_item IS NOT NULL THEN"
  "   PERFORM dx_orch_push(ARRAY[c_inst], ARRAY[p_now], ARRAY[c_item]); END IF;"
  "  RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint;"
  " END $f$;";


/* Version 5: the session history (`duroxide-lua sessions --history`). */
static const char MIGRATION_5[] =
  "CREATE TABLE session_events (session_id text COLLATE \"C\" NOT NULL,"
  "  seq bigint NOT NULL DEFAULT nextval('dx_seq'), at bigint NOT NULL, event text NOT NULL,"
  "  worker text NOT NULL, detail text, prev text, PRIMARY KEY (session_id, seq));"
  "CREATE INDEX session_events_at ON session_events (at);";

/* Version 6: fencing and ended sessions (issue 9 items 3 and 4): the ownership epoch of a
** session (+1 per claim) and the epoch a row was locked under; the instances that used a
** session; dx_ack_work refuses a row locked under an earlier epoch (r_code 4: r_a the row,
** r_b the session's epoch or -1 when it is gone, r_sid and r_owner naming the session, r_c
** the epoch the row was locked under). */
static const char MIGRATION_6[] =
  "ALTER TABLE sessions ADD COLUMN epoch bigint NOT NULL DEFAULT 0;"
  "ALTER TABLE work ADD COLUMN sess_epoch bigint NOT NULL DEFAULT 0;"
  "CREATE TABLE session_users (session_id text COLLATE \"C\", instance_id text COLLATE \"C\","
  "  exec bigint NOT NULL, PRIMARY KEY (session_id, instance_id));"
  "DROP FUNCTION IF EXISTS dx_ack_work(bigint, bigint, text, bytea);"
  "CREATE FUNCTION dx_ack_work(p_token bigint, p_now bigint, c_inst text, c_item bytea)"
  " RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint, r_sid text, r_owner text,"
  " r_c bigint)"
  " LANGUAGE plpgsql AS $f$"
  " DECLARE s bigint; til bigint; sid text; we bigint; ep bigint; own text;"
  " BEGIN"
  "  SELECT w.seq, w.locked_until, w.session_id, w.sess_epoch INTO s, til, sid, we FROM work w"
  "   WHERE w.lock_token = p_token FOR UPDATE;"
  "  IF NOT FOUND THEN RETURN QUERY SELECT 1::bigint, 0::bigint, 0::bigint, NULL::text,"
  "   NULL::text, 0::bigint; RETURN; END IF;"
  "  IF til <= p_now THEN RETURN QUERY SELECT 2::bigint, s, til, NULL::text, NULL::text,"
  "   0::bigint; RETURN; END IF;"
  "  IF sid IS NOT NULL THEN"
  "   SELECT x.epoch, x.owner INTO ep, own FROM sessions x WHERE x.session_id = sid;"
  "   IF ep IS DISTINCT FROM we THEN"
  "    RETURN QUERY SELECT 4::bigint, s, coalesce(ep, -1), sid, own, we; RETURN; END IF;"
  "  END IF;"
  "  DELETE FROM work WHERE seq = s;"
  "  IF sid IS NOT NULL THEN"
  "   UPDATE sessions SET last_activity = p_now WHERE session_id = sid; END IF;"
  "  IF c_item IS NOT NULL THEN"
  "   PERFORM dx_orch_push(ARRAY[c_inst], ARRAY[p_now], ARRAY[c_item]); END IF;"
  "  RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint, NULL::text, NULL::text, 0::bigint;"
  " END $f$;";

/* Version 7: activity tags and rolling deployments (issue 11 items 3, 4). Tagged plain rows
** have an index of their own (a fetch reads the untagged index and the tagged one for each of
** its tags); a START / continue-as-new message records the orchestration it asks for
** (start_name / start_version), so ORCH_FETCH can skip instances the worker cannot run. The
** push and ack functions take the tags and start names as extra arrays (one element per row
** or message); the old signatures of dx_work_push / dx_ack_orch / dx_ack_orch_kv go, the
** 3-array dx_orch_push stays (dx_ack_work's completions) and forwards to the 5-array one. */
static const char MIGRATION_7[] =
  "ALTER TABLE work ADD COLUMN tag text COLLATE \"C\";"
  "DROP INDEX work_plain;"
  "CREATE INDEX work_plain ON work (due_at, seq) WHERE session_id IS NULL AND tag IS NULL;"
  "CREATE INDEX work_tagged ON work (tag, due_at, seq)"
  "  WHERE session_id IS NULL AND tag IS NOT NULL;"
  "ALTER TABLE orch_msgs ADD COLUMN start_name text, ADD COLUMN start_version text;"
  "DROP FUNCTION dx_ack_orch_kv(text, bigint, bigint, bigint, bigint, bigint[], bytea[], text,"
  " text, bigint, text, text, bigint, text, bigint, text, text, bigint, text[], text[],"
  " bigint[], bigint[], bigint[], bytea[], text[], bigint[], bigint[], text[], bigint[],"
  " bytea[], text[], bigint[], text[], text[], bigint[], bigint);"
  "DROP FUNCTION dx_ack_orch(text, bigint, bigint, bigint, bigint, bigint[], bytea[], text,"
  " text, bigint, text, text, bigint, text, bigint, text, text, bigint, text[], text[],"
  " bigint[], bigint[], bigint[], bytea[], text[], bigint[], bigint[], text[], bigint[],"
  " bytea[], text[]);"
  "DROP FUNCTION dx_work_push(bigint, text[], text[], bigint[], bigint[], bigint[], bytea[]);"
  /* messages with the orchestration a start asks for (NULL: not a start) */
  "CREATE FUNCTION dx_orch_push(o_inst text[], o_vis bigint[], o_item bytea[], o_sname text[],"
  " o_sver text[]) RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " INSERT INTO orch_msgs (seq, instance_id, visible_at, item, start_name, start_version)"
  "  SELECT nextval('dx_seq'), u.i, u.v, u.it, u.n, u.r"
  "  FROM unnest(o_inst, o_vis, o_item, o_sname, o_sver) u(i, v, it, n, r);"
  " INSERT INTO orch_queue AS q (instance_id, ready_at, due_at)"
  "  SELECT u.i, min(u.v), min(u.v) FROM unnest(o_inst, o_vis) u(i, v) GROUP BY u.i ORDER BY u.i"
  "  ON CONFLICT (instance_id) DO UPDATE SET ready_at = LEAST(q.ready_at, EXCLUDED.ready_at),"
  "  due_at = CASE WHEN q.lock_token IS NULL THEN LEAST(q.due_at, EXCLUDED.due_at)"
  "  ELSE q.due_at END;"
  " END $f$;"
  "CREATE OR REPLACE FUNCTION dx_orch_push(o_inst text[], o_vis bigint[], o_item bytea[])"
  " RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " PERFORM dx_orch_push(o_inst, o_vis, o_item, NULL::text[], NULL::text[]);"
  " END $f$;"
  /* worker rows with their tags (NULL: untagged), visible at p_vis */
  "CREATE FUNCTION dx_work_push(p_vis bigint, w_sid text[], w_inst text[], w_exec bigint[],"
  " w_act bigint[], w_kind bigint[], w_item bytea[], w_tag text[])"
  " RETURNS void LANGUAGE plpgsql AS $f$ BEGIN"
  " INSERT INTO work (seq, due_at, visible_at, session_id, instance_id, exec, activity_id,"
  "  kind, item, tag) SELECT nextval('dx_seq'), p_vis, p_vis, u.s, u.i, u.e, u.a, u.k, u.it,"
  "  u.g FROM unnest(w_sid, w_inst, w_exec, w_act, w_kind, w_item, w_tag)"
  "  u(s, i, e, a, k, it, g);"
  " END $f$;"
  /* one orchestration turn (provider.h ack_orchestration_item), as version 4 plus w_tag,
  ** o_sname, o_sver */
  "CREATE FUNCTION dx_ack_orch(p_inst text, p_token bigint, p_now bigint,"
  " p_exec bigint, p_dup bigint, e_id bigint[], e_rec bytea[], p_name text, p_version text,"
  " p_cs_set bigint, p_cs text, p_parent text, p_status bigint, p_output text, p_fcat bigint,"
  " p_fkind text, p_fmsg text, p_fretry bigint, w_sid text[], w_inst text[], w_exec bigint[],"
  " w_act bigint[], w_kind bigint[], w_item bytea[], c_inst text[], c_exec bigint[],"
  " c_act bigint[], o_inst text[], o_vis bigint[], o_item bytea[], o_start text[],"
  " w_tag text[], o_sname text[], o_sver text[])"
  " RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " AS $f$"
  " DECLARE tok bigint; til bigint; dup bigint;"
  " BEGIN"
  "  SELECT q.lock_token, q.locked_until INTO tok, til FROM orch_queue q"
  "   WHERE q.instance_id = p_inst FOR UPDATE;"
  "  IF tok IS DISTINCT FROM p_token THEN RETURN QUERY SELECT 1::bigint, tok, til; RETURN;"
  "  END IF;"
  "  IF til <= p_now THEN RETURN QUERY SELECT 2::bigint, tok, til; RETURN; END IF;"
  "  dup := NULLIF(p_dup, 0);"
  "  IF dup IS NULL THEN SELECT min(h.event_id) INTO dup FROM history h"
  "   WHERE h.instance_id = p_inst AND h.exec = p_exec AND h.event_id = ANY(e_id); END IF;"
  "  IF dup IS NOT NULL THEN RETURN QUERY SELECT 3::bigint, dup, 0::bigint; RETURN; END IF;"
  "  DELETE FROM orch_msgs WHERE instance_id = p_inst AND lock_token = p_token;"
  "  INSERT INTO instances AS i (instance_id, name, version, current_exec, custom_status,"
  "   cs_version, created_at, updated_at, parent, created_seq)"
  "   VALUES (p_inst, p_name, p_version, p_exec, CASE WHEN p_cs_set <> 0 THEN p_cs END,"
  "   p_cs_set, p_now, p_now, p_parent, nextval('dx_seq'))"
  "   ON CONFLICT (instance_id) DO UPDATE SET"
  "   name = CASE WHEN p_name IS NOT NULL THEN p_name ELSE i.name END,"
  "   version = CASE WHEN p_name IS NOT NULL THEN p_version ELSE i.version END,"
  "   current_exec = GREATEST(i.current_exec, p_exec),"
  "   custom_status = CASE WHEN p_cs_set <> 0 THEN p_cs ELSE i.custom_status END,"
  "   cs_version = i.cs_version + p_cs_set, updated_at = p_now;"
  "  PERFORM dx_exec_set(p_inst, p_exec, p_status, p_output, p_fcat, p_fkind, p_fmsg,"
  "   p_fretry, p_now);"
  "  INSERT INTO history (instance_id, exec, event_id, rec)"
  "   SELECT p_inst, p_exec, u.i, u.r FROM unnest(e_id, e_rec) u(i, r);"
  "  IF cardinality(w_inst) > 0 THEN PERFORM dx_work_push(p_now, w_sid, w_inst, w_exec,"
  "   w_act, w_kind, w_item, w_tag); END IF;"
  "  IF cardinality(c_inst) > 0 THEN DELETE FROM work w USING unnest(c_inst, c_exec, c_act)"
  "   u(i, e, a) WHERE w.instance_id = u.i AND w.exec = u.e AND w.activity_id = u.a; END IF;"
  "  IF cardinality(o_inst) > 0 THEN"
  "   PERFORM dx_orch_push(o_inst, o_vis, o_item, o_sname, o_sver); END IF;"
  "  IF cardinality(o_start) > 0 THEN" /* a child's id is taken too */
  "   INSERT INTO started (instance_id) SELECT DISTINCT u.i FROM unnest(o_start) u(i)"
  "   ON CONFLICT DO NOTHING; END IF;"
  "  PERFORM dx_orch_release(p_inst);"
  "  RETURN QUERY SELECT 0::bigint, 0::bigint, 0::bigint;"
  " END $f$;"
  /* dx_ack_orch plus the turn's key-value events (as version 3) */
  "CREATE FUNCTION dx_ack_orch_kv(p_inst text, p_token bigint, p_now bigint,"
  " p_exec bigint, p_dup bigint, e_id bigint[], e_rec bytea[], p_name text, p_version text,"
  " p_cs_set bigint, p_cs text, p_parent text, p_status bigint, p_output text, p_fcat bigint,"
  " p_fkind text, p_fmsg text, p_fretry bigint, w_sid text[], w_inst text[], w_exec bigint[],"
  " w_act bigint[], w_kind bigint[], w_item bytea[], c_inst text[], c_exec bigint[],"
  " c_act bigint[], o_inst text[], o_vis bigint[], o_item bytea[], o_start text[],"
  " w_tag text[], o_sname text[], o_sver text[],"
  " k_op bigint[], k_key text[], k_val text[], k_at bigint[], p_fold bigint)"
  " RETURNS TABLE (r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " AS $f$"
  " DECLARE r record;"
  " BEGIN"
  "  SELECT * INTO r FROM dx_ack_orch(p_inst, p_token, p_now, p_exec, p_dup, e_id, e_rec,"
  "   p_name, p_version, p_cs_set, p_cs, p_parent, p_status, p_output, p_fcat, p_fkind, p_fmsg,"
  "   p_fretry, w_sid, w_inst, w_exec, w_act, w_kind, w_item, c_inst, c_exec, c_act, o_inst,"
  "   o_vis, o_item, o_start, w_tag, o_sname, o_sver);"
  "  IF r.r_code = 0 THEN PERFORM dx_kv_apply(p_inst, k_op, k_key, k_val, k_at, p_fold); END IF;"
  "  RETURN QUERY SELECT r.r_code, r.r_a, r.r_b;"
  " END $f$;";

/* Version 8: operating it (issue 10). The registry of workers behind `duroxide-lua workers`
** (written by worker_register on the liveness connection, removed by worker_unregister; the
** liveness locks say which rows still live). Indexes for list pages: queued-never-run starts
** newest first (all, and by name), recorded instances by name and by the status of an
** execution, so a page with a filter that matches little reads only its rows. */
static const char MIGRATION_8[] =
  "CREATE TABLE workers (worker_id text COLLATE \"C\" PRIMARY KEY, host text,"
  "  pid bigint NOT NULL DEFAULT 0, started_at bigint NOT NULL, locker text);"
  "CREATE INDEX orch_msgs_starts ON orch_msgs (seq) WHERE start_name IS NOT NULL;"
  "CREATE INDEX orch_msgs_start_name ON orch_msgs (start_name, seq)"
  "  WHERE start_name IS NOT NULL;"
  "CREATE INDEX instances_name ON instances (name, created_at, created_seq);"
  "CREATE INDEX executions_status ON executions (status, instance_id, exec);";

/* Version 9: a store cycle's acks as two calls, whatever their number: dx_ack_orchs takes
** every orchestration ack of the cycle, dx_ack_works every worker-item ack, as arrays (one
** element per ack; the rows, events, messages and key-value events of all acks flattened,
** each with the number k of its ack).
** Each checks every lock (and duplicate event ids) first, then writes the acks that passed with
** one statement per table, and returns one outcome row per ack, by k: (k, r_code, r_a, r_b
** [, r_sid, r_owner, r_c]) with the codes of migration 2/6 (0 ok, 1 not locked with that token,
** 2 expired, 3 duplicate event r_a, 4 fenced). A refused ack writes nothing. Per ack, one call
** of migration 7's functions cost ~10 statements and 5 nested calls (pg_stat_statements, track =
** all: 0.15 ms a turn); per cycle this is about 15 statements for all of them. Instances are locked
** in id order. An instance acked twice in one call: the first that holds the lock wins, the
** others find it released (1, as one call after another would). The execution row is written
** when the execution is new or ends (a running one's row does not change). The ack functions
** of migrations 2-7 go; the helpers stay (enqueue, abandon, terminate call them). Both run
** with generic plans: their statements take arrays whose length a custom plan sees, so for a
** few acks "auto" kept planning them afresh on every call (a single ack: ~0.2 ms of planning
** for ~0.06 ms of work); the SET clause costs ~5 us a call (pgbench). Every lookup in them is
** by key from the arrays, so they also run without sequential scans: a generic plan is made
** once per connection, and one made while a fresh schema's tables were small hash-joined a
** sequential scan of history into every call for good. (Not set for the whole connection.) */
static const char MIGRATION_9[] =
  "DROP FUNCTION dx_ack_orch_kv(text, bigint, bigint, bigint, bigint, bigint[], bytea[], text,"
  " text, bigint, text, text, bigint, text, bigint, text, text, bigint, text[], text[],"
  " bigint[], bigint[], bigint[], bytea[], text[], bigint[], bigint[], text[], bigint[],"
  " bytea[], text[], text[], text[], text[], bigint[], text[], text[], bigint[], bigint);"
  "DROP FUNCTION dx_ack_orch(text, bigint, bigint, bigint, bigint, bigint[], bytea[], text,"
  " text, bigint, text, text, bigint, text, bigint, text, text, bigint, text[], text[],"
  " bigint[], bigint[], bigint[], bytea[], text[], bigint[], bigint[], text[], bigint[],"
  " bytea[], text[], text[], text[], text[]);"
  "DROP FUNCTION dx_ack_work(bigint, bigint, text, bytea);"
  "CREATE FUNCTION dx_ack_orchs(p_now bigint, a_inst text[], a_token bigint[],"
  " a_exec bigint[], a_dup bigint[], a_name text[], a_version text[], a_cs_set bigint[],"
  " a_cs text[], a_parent text[], a_status bigint[], a_output text[], a_fcat bigint[],"
  " a_fkind text[], a_fmsg text[], a_fretry bigint[], a_fold bigint[],"
  " e_k bigint[], e_id bigint[], e_rec bytea[],"
  " w_k bigint[], w_sid text[], w_inst text[], w_exec bigint[], w_act bigint[],"
  " w_kind bigint[], w_item bytea[], w_tag text[],"
  " c_k bigint[], c_inst text[], c_exec bigint[], c_act bigint[],"
  " o_k bigint[], o_inst text[], o_vis bigint[], o_item bytea[], o_sname text[],"
  " o_sver text[], s_k bigint[], s_inst text[],"
  " k_k bigint[], k_op bigint[], k_key text[], k_val text[], k_at bigint[])"
  " RETURNS TABLE (r_k bigint, r_code bigint, r_a bigint, r_b bigint) LANGUAGE plpgsql"
  " SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $f$"
  " DECLARE n int := coalesce(cardinality(a_inst), 0); code bigint[]; ra bigint[];"
  "  rb bigint[]; tok bigint[]; til bigint[]; cur bigint[]; ok bigint[] := '{}';"
  "  oki text[] := '{}'; fold text[] := '{}'; r record; k int; j int;"
  "  dups boolean := false; f_upd boolean := false; f_ins boolean := false;"
  "  f_newx boolean := false; f_end boolean := false;"
  " BEGIN"
  "  IF n = 0 THEN RETURN; END IF;"
  "  code := array_fill(0::bigint, ARRAY[n]); ra := code; rb := code;"
  /* each ack's lock (the queue rows locked in id order), and its instance's current
  ** execution before the turn (NULL: no record) */
  "  SELECT array_agg(l.lock_token ORDER BY u.k), array_agg(l.locked_until ORDER BY u.k),"
  "   array_agg(x.current_exec ORDER BY u.k) INTO tok, til, cur"
  "   FROM unnest(a_inst) WITH ORDINALITY u(i, k)"
  "   LEFT JOIN (SELECT q.instance_id, q.lock_token, q.locked_until FROM orch_queue q"
  "   WHERE q.instance_id = ANY(a_inst) ORDER BY q.instance_id FOR UPDATE) l"
  "   ON l.instance_id = u.i LEFT JOIN instances x ON x.instance_id = u.i;"
  "  FOR k IN 1 .. n LOOP"
  "   IF a_inst[k] = ANY(oki) THEN code[k] := 1; ra[k] := NULL; rb[k] := NULL;"
  "   ELSIF tok[k] IS DISTINCT FROM a_token[k] THEN code[k] := 1; ra[k] := tok[k];"
  "    rb[k] := til[k];"
  "   ELSIF til[k] <= p_now THEN code[k] := 2; ra[k] := tok[k]; rb[k] := til[k];"
  "   ELSIF a_dup[k] <> 0 THEN code[k] := 3; ra[k] := a_dup[k];"
  "   ELSE oki := oki || a_inst[k]; ok := ok || k::bigint; END IF;"
  "  END LOOP;"
  "  IF cardinality(e_k) > 0 AND cardinality(ok) > 0 THEN"
  "   FOR r IN SELECT e.k, min(h.event_id) AS d FROM unnest(e_k, e_id) e(k, id)"
  "    JOIN history h ON h.instance_id = a_inst[e.k] AND h.exec = a_exec[e.k]"
  "    AND h.event_id = e.id WHERE e.k = ANY(ok) GROUP BY e.k LOOP"
  "    code[r.k] := 3; ra[r.k] := r.d; dups := true;"
  "   END LOOP;"
  "  END IF;"
  "  IF dups THEN"
  "   ok := ARRAY(SELECT o.k FROM unnest(ok) o(k) WHERE code[o.k] = 0);"
  "   oki := ARRAY(SELECT a_inst[o.k] FROM unnest(ok) o(k));"
  "  END IF;"
  /* which of the writes below the acks that passed need (a statement with nothing to do
  ** still costs its executor start) */
  "  FOR j IN 1 .. cardinality(ok) LOOP"
  "   k := ok[j];"
  "   IF cur[k] IS NULL THEN f_ins := true; ELSE f_upd := true; END IF;"
  "   IF cur[k] IS NULL OR cur[k] < a_exec[k] OR a_status[k] <> 0 THEN f_newx := true; END IF;"
  "   IF a_status[k] <> 0 THEN f_end := true; END IF;"
  "   IF a_fold[k] <> 0 THEN fold := fold || a_inst[k]; END IF;"
  "  END LOOP;"
  "  IF cardinality(ok) > 0 THEN"
  "   DELETE FROM orch_msgs m USING unnest(ok) o(k)"
  "    WHERE m.instance_id = a_inst[o.k] AND m.lock_token = a_token[o.k];"
  /* the records: created by an instance's first turn, then updated in place */
  "   IF f_upd THEN UPDATE instances i SET"
  "    name = CASE WHEN a_name[o.k] IS NOT NULL THEN a_name[o.k] ELSE i.name END,"
  "    version = CASE WHEN a_name[o.k] IS NOT NULL THEN a_version[o.k] ELSE i.version END,"
  "    current_exec = GREATEST(i.current_exec, a_exec[o.k]),"
  "    custom_status = CASE WHEN a_cs_set[o.k] <> 0 THEN a_cs[o.k] ELSE i.custom_status END,"
  "    cs_version = i.cs_version + a_cs_set[o.k], updated_at = p_now"
  "    FROM unnest(ok) o(k) WHERE i.instance_id = a_inst[o.k] AND cur[o.k] IS NOT NULL;"
  "   END IF;"
  "   IF f_ins THEN INSERT INTO instances (instance_id, name, version, current_exec,"
  "    custom_status,"
  "    cs_version, created_at, updated_at, parent, created_seq)"
  "    SELECT a_inst[o.k], a_name[o.k], a_version[o.k], a_exec[o.k],"
  "    CASE WHEN a_cs_set[o.k] <> 0 THEN a_cs[o.k] END, a_cs_set[o.k], p_now, p_now,"
  "    a_parent[o.k], nextval('dx_seq') FROM unnest(ok) o(k) WHERE cur[o.k] IS NULL;"
  "   END IF;"
  /* the execution's row: created running by its first turn (or when it ends without one),
  ** then given its final status */
  "   IF f_newx THEN INSERT INTO executions (instance_id, exec, status, output, f_cat,"
  "    f_kind, f_msg,"
  "    f_retry, started_at, completed_at) SELECT a_inst[o.k], a_exec[o.k], 1, a_output[o.k],"
  "    a_fcat[o.k], a_fkind[o.k], a_fmsg[o.k], a_fretry[o.k], p_now, 0 FROM unnest(ok) o(k)"
  "    WHERE cur[o.k] IS NULL OR cur[o.k] < a_exec[o.k] OR a_status[o.k] <> 0"
  "    ON CONFLICT (instance_id, exec) DO NOTHING; END IF;"
  "   IF f_end THEN UPDATE executions e SET status = a_status[o.k], output = a_output[o.k],"
  "    f_cat = a_fcat[o.k], f_kind = a_fkind[o.k], f_msg = a_fmsg[o.k],"
  "    f_retry = a_fretry[o.k], completed_at = p_now FROM unnest(ok) o(k)"
  "    WHERE a_status[o.k] <> 0 AND e.instance_id = a_inst[o.k] AND e.exec = a_exec[o.k];"
  "   END IF;"
  "   IF cardinality(e_k) > 0 THEN INSERT INTO history (instance_id, exec, event_id, rec)"
  "    SELECT a_inst[u.k], a_exec[u.k], u.i, u.r FROM unnest(e_k, e_id, e_rec) u(k, i, r)"
  "    WHERE u.k = ANY(ok); END IF;"
  "   IF cardinality(w_k) > 0 THEN"
  "    INSERT INTO work (seq, due_at, visible_at, session_id, instance_id, exec, activity_id,"
  "     kind, item, tag) SELECT nextval('dx_seq'), p_now, p_now, u.s, u.i, u.e, u.a, u.t,"
  "     u.it, u.g FROM unnest(w_k, w_sid, w_inst, w_exec, w_act, w_kind, w_item, w_tag)"
  "     u(k, s, i, e, a, t, it, g) WHERE u.k = ANY(ok);"
  "   END IF;"
  "   IF cardinality(c_k) > 0 THEN DELETE FROM work w USING unnest(c_k, c_inst, c_exec, c_act)"
  "    u(k, i, e, a) WHERE u.k = ANY(ok) AND w.instance_id = u.i AND w.exec = u.e"
  "    AND w.activity_id = u.a; END IF;"
  /* messages (as dx_orch_push) */
  "   IF cardinality(o_k) > 0 THEN"
  "    INSERT INTO orch_msgs (seq, instance_id, visible_at, item, start_name, start_version)"
  "     SELECT nextval('dx_seq'), u.i, u.v, u.it, u.n, u.r"
  "     FROM unnest(o_k, o_inst, o_vis, o_item, o_sname, o_sver) u(k, i, v, it, n, r)"
  "     WHERE u.k = ANY(ok);"
  "    INSERT INTO orch_queue AS q (instance_id, ready_at, due_at)"
  "     SELECT u.i, min(u.v), min(u.v) FROM unnest(o_k, o_inst, o_vis) u(k, i, v)"
  "     WHERE u.k = ANY(ok) GROUP BY u.i ORDER BY u.i ON CONFLICT (instance_id) DO UPDATE"
  "     SET ready_at = LEAST(q.ready_at, EXCLUDED.ready_at),"
  "     due_at = CASE WHEN q.lock_token IS NULL THEN LEAST(q.due_at, EXCLUDED.due_at)"
  "     ELSE q.due_at END;"
  "   END IF;"
  "   IF cardinality(s_k) > 0 THEN" /* a child's id is taken too */
  "    INSERT INTO started (instance_id) SELECT DISTINCT u.i FROM unnest(s_k, s_inst) u(k, i)"
  "    WHERE u.k = ANY(ok) ON CONFLICT DO NOTHING; END IF;"
  /* key-value events (as dx_ack_orch_kv), then the folds of the executions that end */
  "   IF cardinality(k_k) > 0 THEN"
  "    FOR r IN SELECT DISTINCT u.k FROM unnest(k_k) u(k) WHERE u.k = ANY(ok) ORDER BY 1 LOOP"
  "     PERFORM dx_kv_apply(a_inst[r.k],"
  "      ARRAY(SELECT u.o FROM unnest(k_k, k_op) WITH ORDINALITY u(k, o, n) WHERE u.k = r.k"
  "      ORDER BY u.n),"
  "      ARRAY(SELECT u.o FROM unnest(k_k, k_key) WITH ORDINALITY u(k, o, n) WHERE u.k = r.k"
  "      ORDER BY u.n),"
  "      ARRAY(SELECT u.o FROM unnest(k_k, k_val) WITH ORDINALITY u(k, o, n) WHERE u.k = r.k"
  "      ORDER BY u.n),"
  "      ARRAY(SELECT u.o FROM unnest(k_k, k_at) WITH ORDINALITY u(k, o, n) WHERE u.k = r.k"
  "      ORDER BY u.n), 0);"
  "    END LOOP;"
  "   END IF;"
  "   IF cardinality(fold) > 0 AND EXISTS (SELECT 1 FROM kv_delta d"
  "    WHERE d.instance_id = ANY(fold)) THEN"
  "    DELETE FROM kv k USING kv_delta d WHERE d.instance_id = ANY(fold)"
  "     AND k.instance_id = d.instance_id AND k.key = d.key AND d.value IS NULL;"
  "    INSERT INTO kv (instance_id, key, value, updated_at) SELECT d.instance_id, d.key,"
  "     d.value, d.updated_at FROM kv_delta d WHERE d.instance_id = ANY(fold)"
  "     AND d.value IS NOT NULL ON CONFLICT (instance_id, key) DO UPDATE"
  "     SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;"
  "    DELETE FROM kv_delta d WHERE d.instance_id = ANY(fold);"
  "   END IF;"
  /* the releases (as dx_orch_release): the row goes when nothing is left (no message, and
  ** no enqueuer folded a time in), else it is ready at the earliest message left */
  "   DELETE FROM orch_queue q WHERE q.instance_id = ANY(oki) AND q.ready_at IS NULL"
  "    AND NOT EXISTS (SELECT 1 FROM orch_msgs x WHERE x.instance_id = q.instance_id);"
  "   UPDATE orch_queue q SET lock_token = NULL, locked_until = NULL, locked_by = NULL,"
  "    ready_at = LEAST(q.ready_at, m.nxt), due_at = LEAST(q.ready_at, m.nxt)"
  "    FROM (SELECT u.i, (SELECT min(x.visible_at) FROM orch_msgs x WHERE x.instance_id = u.i)"
  "    AS nxt FROM unnest(oki) u(i)) m WHERE q.instance_id = m.i;"
  "  END IF;"
  "  RETURN QUERY SELECT u.k::bigint, code[u.k], ra[u.k], rb[u.k]"
  "   FROM generate_series(1, n) u(k) ORDER BY u.k;"
  " END $f$;"
  /* worker items done: a plain row whose lock is current goes in one statement for all of
  ** them; the others (session rows: fencing; a lock that is gone or expired) one by one as
  ** migration 6's dx_ack_work; then the completions of the acks that passed */
  "CREATE FUNCTION dx_ack_works(p_now bigint, a_token bigint[], c_inst text[], c_item bytea[])"
  " RETURNS TABLE (r_k bigint, r_code bigint, r_a bigint, r_b bigint, r_sid text,"
  " r_owner text, r_c bigint) LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan"
  " SET enable_seqscan = off AS $f$"
  " DECLARE n int := coalesce(cardinality(a_token), 0); code bigint[]; ra bigint[];"
  "  rb bigint[]; rs text[]; ro text[]; rc bigint[]; done bigint[]; seen bigint[] := '{}';"
  "  k int; s bigint; til bigint; sid text; we bigint; ep bigint; own text;"
  " BEGIN"
  "  IF n = 0 THEN RETURN; END IF;"
  "  code := array_fill(0::bigint, ARRAY[n]); ra := code; rb := code; rc := code;"
  "  rs := array_fill(NULL::text, ARRAY[n]); ro := rs;"
  "  WITH d AS (DELETE FROM work w WHERE w.lock_token = ANY(a_token)"
  "   AND w.locked_until > p_now AND w.session_id IS NULL RETURNING w.lock_token)"
  "   SELECT coalesce(array_agg(d.lock_token), '{}') INTO done FROM d;"
  "  FOR k IN 1 .. n LOOP"
  "   IF a_token[k] = ANY(done) AND NOT a_token[k] = ANY(seen) THEN"
  "    seen := seen || a_token[k]; CONTINUE; END IF;"
  "   SELECT w.seq, w.locked_until, w.session_id, w.sess_epoch INTO s, til, sid, we"
  "    FROM work w WHERE w.lock_token = a_token[k] FOR UPDATE;"
  "   IF NOT FOUND THEN code[k] := 1; CONTINUE; END IF;"
  "   IF til <= p_now THEN code[k] := 2; ra[k] := s; rb[k] := til; CONTINUE; END IF;"
  "   IF sid IS NOT NULL THEN"
  "    SELECT x.epoch, x.owner INTO ep, own FROM sessions x WHERE x.session_id = sid;"
  "    IF ep IS DISTINCT FROM we THEN code[k] := 4; ra[k] := s; rb[k] := coalesce(ep, -1);"
  "     rs[k] := sid; ro[k] := own; rc[k] := we; CONTINUE; END IF;"
  "   END IF;"
  "   DELETE FROM work WHERE seq = s;"
  "   IF sid IS NOT NULL THEN"
  "    UPDATE sessions SET last_activity = p_now WHERE session_id = sid; END IF;"
  "  END LOOP;"
  /* the completions (as dx_orch_push) */
  "  INSERT INTO orch_msgs (seq, instance_id, visible_at, item)"
  "   SELECT nextval('dx_seq'), c_inst[u.k], p_now, c_item[u.k]"
  "   FROM generate_series(1, n) u(k) WHERE code[u.k] = 0 AND c_item[u.k] IS NOT NULL"
  "   ORDER BY u.k;"
  "  IF FOUND THEN"
  "   INSERT INTO orch_queue AS q (instance_id, ready_at, due_at)"
  "    SELECT DISTINCT c_inst[u.k], p_now, p_now FROM generate_series(1, n) u(k)"
  "    WHERE code[u.k] = 0 AND c_item[u.k] IS NOT NULL ORDER BY 1"
  "    ON CONFLICT (instance_id) DO UPDATE SET ready_at = LEAST(q.ready_at, EXCLUDED.ready_at),"
  "    due_at = CASE WHEN q.lock_token IS NULL THEN LEAST(q.due_at, EXCLUDED.due_at)"
  "    ELSE q.due_at END;"
  "  END IF;"
  "  RETURN QUERY SELECT u.k::bigint, code[u.k], ra[u.k], rb[u.k], rs[u.k], ro[u.k], rc[u.k]"
  "   FROM generate_series(1, n) u(k) ORDER BY u.k;"
  " END $f$;";

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

/* Version 10: a work fetch is one call, dx_fetch_work, so a store cycle stays one round trip
** when session rows are due (pg_cycle.c). It hands out up to p_k rows in due order, as that
** many fetches one after another would: each step picks the oldest due row of a session the
** worker owns and the oldest claimable session head, locks the plain rows due before both,
** then takes the older candidate: a close marker at the head of a session nobody holds is
** deleted (with the session row once it has no rows); a claim starts the session's next
** ownership epoch (migration 6) and makes rows an earlier owner still holds due now; an owned
** session's lease is refreshed; the row is locked under the session's epoch only while the
** session is the worker's (a claim lost to another worker locks nothing: pick again), and its
** instance joins the session's users. Deciding the claim in the database is what spares the
** round trip per session row the client-side claim cost (PQ_SESS_CLAIM & co., up to 64 more
** per fetch). Capacity: claims under one worker id are serialized by a transaction-scoped
** advisory lock on it (p_key), so the count and the claim cannot interleave; each claim counts
** the worker's live sessions again. A claim pick that finds nothing is not repeated in the
** call; the call then ends with a row whose token is NULL (the caller skips the pick for the
** rest of its batch). A worker without sessions runs the plain part alone (WORK_FETCH_PLAIN,
** a statement). Each row: token, attempt, item, the due
** time it was picked at, claimed?, the previous owner (claims). The candidates keep their row
** locks (FOR UPDATE SKIP LOCKED) to the end of the transaction, as the statements did. Built
** from the macros above: a change to one of them that stores must see needs a migration that
** replaces the function. */
static const char MIGRATION_10[] =
  "CREATE FUNCTION dx_fetch_work(p_now bigint, p_until bigint, p_k bigint, p_proc text,"
  " p_untagged bigint, p_tags text[], p_worker text, p_key bigint, p_sess_until bigint,"
  " p_max bigint, p_claims bigint, p_declined text[], p_prefix text, p_live bigint)"
  " RETURNS TABLE (r_token bigint, r_attempt bigint, r_item bytea, r_due bigint,"
  " r_claimed boolean, r_prev text) LANGUAGE plpgsql"
  " SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $f$"
  " DECLARE n bigint := 0; got bigint; steps bigint := 0; claims boolean := p_claims <> 0;"
  "  need_o boolean := true; need_c boolean := true; o_ok boolean := false;"
  "  c_ok boolean := false; o_seq bigint; o_due bigint; o_sid text; c_seq bigint;"
  "  c_due bigint; c_sid text; c_kind bigint; b_seq bigint; b_due bigint; b_sid text;"
  "  b_claim boolean; lim_seq bigint; lim_due bigint; v_prev text;"
  " BEGIN"
  "  PERFORM pg_advisory_xact_lock(p_key);"
  "  LOOP"
  "   steps := steps + 1;"
  "   EXIT WHEN n >= p_k OR steps > p_k + 64;"
  "   IF need_o THEN"
  "    SELECT w.seq, w.due_at, w.session_id INTO o_seq, o_due, o_sid FROM sessions s JOIN work w"
  "     ON w.session_id = s.session_id WHERE s.owner = p_worker AND w.due_at <= p_now"
  "     AND NOT (w.session_id = ANY(p_declined))" /* declined: a rolling upgrade */
  TAG_OK("w", "p_untagged", "p_tags") SESSION_HEAD
  "     ORDER BY w.due_at, w.seq LIMIT 1 FOR UPDATE OF w SKIP LOCKED;"
  "    o_ok := FOUND; need_o := false;"
  "   END IF;"
  "   IF claims AND need_c THEN" /* anti-joins: the plan walks
    ** work_sess_due in order and stops; only at capacity count again without the sessions
    ** that ended */
  "    SELECT w.seq, w.due_at, w.session_id, w.kind INTO c_seq, c_due, c_sid, c_kind FROM work w"
  "     WHERE w.session_id IS NOT NULL AND w.due_at <= p_now"
  "     AND NOT (w.session_id = ANY(p_declined))"
  "     AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_id = w.session_id"
  "     AND s.owner <> '' AND (s.owner = p_worker OR (s.locked_until > p_now AND NOT"
  OWNER_DEAD("s.owner", "p_prefix", "p_live") ")))"
  "     AND ((SELECT count(*) FROM sessions o WHERE o.owner = p_worker"
  "     AND o.locked_until > p_now) < p_max OR (SELECT count(*) FROM sessions o"
  "     WHERE o.owner = p_worker AND o.locked_until > p_now AND NOT"
  SESSION_ENDED("o.session_id") ") < p_max)" TAG_OK("w", "p_untagged", "p_tags") SESSION_HEAD
  "     ORDER BY w.due_at, w.seq LIMIT 1 FOR UPDATE OF w SKIP LOCKED;"
  "    c_ok := FOUND; need_c := false; claims := c_ok;"
  "   END IF;"
  "   b_seq := NULL; b_due := NULL; b_claim := false;"
  "   IF o_ok THEN b_seq := o_seq; b_due := o_due; b_sid := o_sid; END IF;"
  "   IF c_ok AND (b_seq IS NULL OR c_due < b_due OR (c_due = b_due AND c_seq < b_seq)) THEN"
  "    b_seq := c_seq; b_due := c_due; b_sid := c_sid; b_claim := true;"
  "   END IF;"
  "   lim_due := coalesce(b_due, 9223372036854775807);"
  "   lim_seq := coalesce(b_seq, 9223372036854775807);"
  /* the plain rows due before it (all when no session row is due) */
  "   RETURN QUERY" PLAIN_LOCK("p_now", "p_until", "p_k - n", "p_proc", "p_untagged", "p_tags",
                             "lim_due", "lim_seq") ";"
  "   GET DIAGNOSTICS got = ROW_COUNT;"
  "   n := n + got;"
  "   EXIT WHEN b_seq IS NULL OR n >= p_k;"
  /* pick again what this step takes; the owned pick in any case (a claim makes the
  ** session's next row, and rows an earlier owner held, the worker's own) */
  "   need_o := true; o_ok := false;"
  "   IF b_claim THEN need_c := true; c_ok := false; END IF;"
  "   IF b_claim AND c_kind = 11 THEN" /* DX_WI_SESSION_CLOSE: nothing to close */
  "    DELETE FROM work WHERE seq = b_seq;"
  "    DELETE FROM sessions WHERE session_id = b_sid"
  "     AND NOT EXISTS (SELECT 1 FROM work WHERE session_id = b_sid);"
  "    CONTINUE;"
  "   END IF;"
  "   v_prev := NULL;"
  "   IF b_claim THEN"
  "    INSERT INTO sessions AS s (session_id, owner, prev, locked_until, last_activity, epoch)"
  "     VALUES (b_sid, p_worker, NULL, p_sess_until, p_now, 1)"
  "     ON CONFLICT (session_id) DO UPDATE SET owner = p_worker,"
  "     prev = CASE WHEN s.owner <> '' THEN s.owner ELSE s.prev END,"
  "     locked_until = p_sess_until, last_activity = p_now, epoch = s.epoch + 1"
  "     WHERE s.owner = '' OR (s.owner <> p_worker AND (s.locked_until <= p_now OR"
  OWNER_DEAD("s.owner", "p_prefix", "p_live") ")) RETURNING s.prev INTO v_prev;"
  "    CONTINUE WHEN NOT FOUND;"
  /* rows still locked under an earlier epoch belong to an owner that died or stalled past
  ** its lease: due now, this worker runs them */
  "    UPDATE work w SET due_at = p_now, locked_until = p_now FROM sessions s"
  "     WHERE s.session_id = b_sid AND s.owner = p_worker AND w.session_id = s.session_id"
  "     AND w.lock_token IS NOT NULL AND w.sess_epoch <> s.epoch AND w.locked_until > p_now;"
  "   ELSE" /* an owner's fetch refreshes the lease at once (a same-id restart) */
  "    UPDATE sessions SET last_activity = p_now,"
  "     locked_until = GREATEST(locked_until, p_sess_until)"
  "     WHERE session_id = b_sid AND owner = p_worker;"
  "   END IF;"
  "   RETURN QUERY WITH l AS (UPDATE work w SET lock_token = nextval('dx_seq'),"
  "    locked_until = p_until, due_at = p_until, attempt = w.attempt + 1,"
  "    sess_epoch = s.epoch FROM sessions s WHERE w.seq = b_seq AND s.session_id = b_sid"
  "    AND s.owner = p_worker RETURNING w.lock_token, w.attempt, w.item, w.instance_id, w.exec),"
  "    x AS (INSERT INTO session_users (session_id, instance_id, exec)"
  "    SELECT b_sid, l.instance_id, l.exec FROM l"
  "    ON CONFLICT (session_id, instance_id) DO UPDATE SET exec = EXCLUDED.exec)"
  "    SELECT l.lock_token, l.attempt, l.item, b_due, b_claim, v_prev FROM l;"
  "   GET DIAGNOSTICS got = ROW_COUNT;"
  "   n := n + got;"
  "  END LOOP;"
  "  IF p_claims <> 0 AND NOT claims THEN"
  "   RETURN QUERY SELECT NULL::bigint, NULL::bigint, NULL::bytea, NULL::bigint, false,"
  "    NULL::text;"
  "  END IF;"
  " END $f$;";

/* Version 11: dx_ack_works decides
** every ack of the call with a fixed number of statements instead of four per session row: the
** plain rows whose lock is current go in one DELETE (as in version 9); the rest are locked in
** one statement (seq order), then their sessions' epochs and owners are read in a second one
** (a fresh snapshot after the locks, as the per-row version read them: a claim that committed
** while this call waited for a row lock is seen, so its rows are fenced), the rows that passed
** go in one DELETE and their sessions are touched in one UPDATE. Outcomes per token as version
** 9: 0 ok; 1 not locked with that token (or the same token already acked earlier in the call);
** 2 expired (r_a row, r_b locked_until); 4 fenced (r_a row, r_b the session's epoch or -1 when
** it is gone, r_sid, r_owner, r_c the epoch the row was locked under). A token given twice is
** decided once: the repeats get the first one's refusal, or 1 when it passed. */
static const char MIGRATION_11[] =
  "CREATE OR REPLACE FUNCTION dx_ack_works(p_now bigint, a_token bigint[], c_inst text[],"
  " c_item bytea[]) RETURNS TABLE (r_k bigint, r_code bigint, r_a bigint, r_b bigint,"
  " r_sid text, r_owner text, r_c bigint) LANGUAGE plpgsql"
  " SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $f$"
  " DECLARE n int := coalesce(cardinality(a_token), 0); code bigint[]; ra bigint[];"
  "  rb bigint[]; rs text[]; ro text[]; rc bigint[]; done bigint[]; gone bigint[] := '{}';"
  "  seqs bigint[]; tils bigint[]; sids text[]; wes bigint[]; eps bigint[]; owns text[];"
  "  okseq bigint[] := '{}'; oksid text[] := '{}'; k int;"
  " BEGIN"
  "  IF n = 0 THEN RETURN; END IF;"
  "  code := array_fill(0::bigint, ARRAY[n]); ra := code; rb := code; rc := code;"
  "  rs := array_fill(NULL::text, ARRAY[n]); ro := rs;"
  "  WITH d AS (DELETE FROM work w WHERE w.lock_token = ANY(a_token)"
  "   AND w.locked_until > p_now AND w.session_id IS NULL RETURNING w.lock_token)"
  "   SELECT coalesce(array_agg(d.lock_token), '{}') INTO done FROM d;"
  "  IF cardinality(done) < n THEN"
  /* every other row, locked (by seq), by ack */
  "   SELECT array_agg(l.seq ORDER BY u.k), array_agg(l.locked_until ORDER BY u.k),"
  "    array_agg(l.session_id ORDER BY u.k), array_agg(l.sess_epoch ORDER BY u.k)"
  "    INTO seqs, tils, sids, wes FROM unnest(a_token) WITH ORDINALITY u(t, k)"
  "    LEFT JOIN (SELECT w.lock_token, w.seq, w.locked_until, w.session_id, w.sess_epoch"
  "    FROM work w WHERE w.lock_token = ANY(a_token) AND NOT (w.lock_token = ANY(done))"
  "    ORDER BY w.seq FOR UPDATE) l ON l.lock_token = u.t;"
  /* their sessions now (a statement of its own: see above) */
  "   SELECT array_agg(x.epoch ORDER BY u.k), array_agg(x.owner ORDER BY u.k)"
  "    INTO eps, owns FROM unnest(sids) WITH ORDINALITY u(s, k)"
  "    LEFT JOIN (SELECT y.session_id, y.epoch, y.owner FROM sessions y"
  "    WHERE y.session_id = ANY(sids)) x ON x.session_id = u.s;"
  "  END IF;"
  "  FOR k IN 1 .. n LOOP"
  "   IF a_token[k] = ANY(gone) THEN code[k] := 1;"
  "   ELSIF a_token[k] = ANY(done) THEN gone := gone || a_token[k];"
  "   ELSIF seqs[k] IS NULL THEN code[k] := 1;"
  "   ELSIF tils[k] <= p_now THEN code[k] := 2; ra[k] := seqs[k]; rb[k] := tils[k];"
  "   ELSIF sids[k] IS NOT NULL AND eps[k] IS DISTINCT FROM wes[k] THEN code[k] := 4;"
  "    ra[k] := seqs[k]; rb[k] := coalesce(eps[k], -1); rs[k] := sids[k]; ro[k] := owns[k];"
  "    rc[k] := wes[k];"
  "   ELSE gone := gone || a_token[k]; okseq := okseq || seqs[k];"
  "    IF sids[k] IS NOT NULL THEN oksid := oksid || sids[k]; END IF;"
  "   END IF;"
  "  END LOOP;"
  "  IF cardinality(okseq) > 0 THEN"
  "   DELETE FROM work WHERE seq = ANY(okseq);"
  "   IF cardinality(oksid) > 0 THEN"
  "    UPDATE sessions SET last_activity = p_now WHERE session_id = ANY(oksid); END IF;"
  "  END IF;"
  /* the completions (as dx_orch_push; unnest keeps ack order without subscripts or a sort) */
  "  INSERT INTO orch_msgs (seq, instance_id, visible_at, item)"
  "   SELECT nextval('dx_seq'), u.i, p_now, u.it FROM unnest(c_inst, c_item, code) u(i, it, c)"
  "   WHERE u.c = 0 AND u.it IS NOT NULL;"
  "  IF FOUND THEN"
  "   INSERT INTO orch_queue AS q (instance_id, ready_at, due_at)"
  "    SELECT DISTINCT u.i, p_now, p_now FROM unnest(c_inst, c_item, code) u(i, it, c)"
  "    WHERE u.c = 0 AND u.it IS NOT NULL ORDER BY 1"
  "    ON CONFLICT (instance_id) DO UPDATE SET ready_at = LEAST(q.ready_at, EXCLUDED.ready_at),"
  "    due_at = CASE WHEN q.lock_token IS NULL THEN LEAST(q.due_at, EXCLUDED.due_at)"
  "    ELSE q.due_at END;"
  "  END IF;"
  "  RETURN QUERY SELECT u.k, u.c, u.a, u.b, u.s, u.o, u.e"
  "   FROM unnest(code, ra, rb, rs, ro, rc) WITH ORDINALITY u(c, a, b, s, o, e, k);"
  " END $f$;";

const char *const dx__pg_migrations[] = {MIGRATION_1, MIGRATION_2, MIGRATION_3, MIGRATION_4,
                                        MIGRATION_5, MIGRATION_6, MIGRATION_7, MIGRATION_8,
                                        MIGRATION_9, MIGRATION_10, MIGRATION_11};

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
const int dx__pg_migration_count = (int)(sizeof dx__pg_migrations / sizeof dx__pg_migrations[0]);

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
    ** $7..$9: histories the caller holds (instance, execution, events; NULL: none). */
    "WITH c AS (SELECT q.instance_id, q.due_at FROM orch_queue q"
    CAN_RUN_JOIN("$1::bigint", "$5::text[]")
    " WHERE q.due_at <= $1::bigint AND" CAN_RUN("$5::text[]", "$6::text[]")
    " ORDER BY q.due_at, q.instance_id LIMIT $3::bigint FOR UPDATE OF q SKIP LOCKED),"
    /* = ANY(ARRAY(...)) and OFFSET 0 laterals keep every lookup an index probe per instance,
    ** whatever the table sizes were when the plan was made (a generic plan made on a fresh
    ** schema otherwise hash-joins sequential scans of orch_queue, instances and kv) */
    " u AS (UPDATE orch_queue q SET lock_token = nextval('dx_seq'), locked_until = $2::bigint,"
    " due_at = $2::bigint, ready_at = NULL, locked_by = $4::text FROM c"
    " WHERE q.instance_id = ANY(ARRAY(SELECT instance_id FROM c))"
    " AND q.instance_id = c.instance_id RETURNING q.instance_id, q.lock_token, c.due_at),"
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
  [PQ_HIST_MAX_EXEC] = "SELECT max(exec) FROM history WHERE instance_id = $1",
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
  [PQ_ADM_EXECS] =
    "SELECT e.exec, e.status, e.started_at, e.completed_at,"
    " (SELECT count(*) FROM history h WHERE h.instance_id = e.instance_id AND h.exec = e.exec)"
    " FROM executions e WHERE e.instance_id = $1 ORDER BY e.exec",
  [PQ_ADM_QUEUE_ORCH] =
    "SELECT m.visible_at, m.attempt, m.item,"
    " CASE WHEN q.lock_token IS NOT NULL AND m.lock_token = q.lock_token THEN q.locked_until END,"
    " CASE WHEN q.lock_token IS NOT NULL AND m.lock_token = q.lock_token THEN q.locked_by END"
    " FROM orch_msgs m LEFT JOIN orch_queue q ON q.instance_id = m.instance_id"
    " WHERE m.instance_id = $1 ORDER BY m.seq",
  [PQ_ADM_QUEUE_WORK] =
    "SELECT w.visible_at, w.attempt, w.item,"
    " CASE WHEN w.lock_token IS NOT NULL THEN w.locked_until END,"
    " CASE WHEN s.owner <> '' THEN s.owner END"
    " FROM work w LEFT JOIN sessions s ON s.session_id = w.session_id"
    " WHERE w.instance_id = $1 ORDER BY w.seq",
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
