/*
** pg_migrations.c -- the schema of the PostgreSQL provider: its numbered migrations, oldest first.
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
#include "providers/pg/pg_sql_parts.h"

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
** from the fragments in pg_sql_parts.h: a change to one of them that stores must see needs a migration that
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
const int dx__pg_migration_count = (int)(sizeof dx__pg_migrations / sizeof dx__pg_migrations[0]);
