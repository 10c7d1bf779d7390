/*
** lmanage.c -- the client's management methods: list, describe, executions, delete, purge,
** prune, terminate. Bad input returns nil, err (err names the problem), like a store failure.
*/
#include <stdlib.h>
#include <string.h>

#include "dxlua.h"

/* [-0, +2] nil, err for bad input; returns 2. */
static int bad(lua_State *L, const char *fmt, const char *what) {
  dx_error_t e;
  dx_error_set(&e, DX_EINVAL, fmt, what);
  return dxl_client_fail(L, &e);
}

/* Text argument or field at idx: 1 and *out (NULL when absent and optional), else 0. */
static int text_at(lua_State *L, int idx, int optional, const char **out) {
  size_t n;
  *out = NULL;
  if (lua_isnoneornil(L, idx)) return optional;
  if (lua_type(L, idx) != LUA_TSTRING) return 0;
  *out = lua_tolstring(L, idx, &n);
  return memchr(*out, '\0', n) == NULL;
}

/* Integer field at idx: 1 and *out (unchanged when absent), else 0. */
static int int_at(lua_State *L, int idx, lua_Integer *out) {
  int ok;
  lua_Integer v;
  if (lua_isnoneornil(L, idx)) return 1;
  v = lua_tointegerx(L, idx, &ok);
  if (ok) *out = v;
  return ok;
}

/* A time field: ms since the epoch (number) or text for dx_parse_time. */
static int time_at(lua_State *L, int idx, int64_t *out, dx_error_t *e, const char *what) {
  const char *t;
  lua_Integer v = 0;
  if (lua_isnoneornil(L, idx)) return 1;
  if (lua_type(L, idx) == LUA_TNUMBER) {
    if (!int_at(L, idx, &v) || v < 0) {
      dx_error_set(e, DX_EINVAL, "%s must be ms since the epoch or a time text", what);
      return 0;
    }
    *out = (int64_t)v;
    return 1;
  }
  if (!text_at(L, idx, 0, &t)) {
    dx_error_set(e, DX_EINVAL, "%s must be ms since the epoch or a time text", what);
    return 0;
  }
  if (dx_parse_time(t, dx_clock_now_ms(), out, e) != 0) {
    char tmp[sizeof e->msg];
    memcpy(tmp, e->msg, sizeof tmp);
    snprintf(e->msg, sizeof e->msg, "%s: %.400s", what, tmp);
    return 0;
  }
  return 1;
}

static int status_at(lua_State *L, int idx, int *out) {
  const char *s;
  if (!text_at(L, idx, 1, &s)) return 0;
  if (!s) return 1;
  *out = dx_status_filter_from_name(s);
  return *out != -100;
}

#define STATUS_WORDS "Pending, Running, Completed or Failed"

/* client:list([filter]) -> rows, next_cursor */
static int l_list(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dx_list_query_t q;
  dx_instance_info_t *rows = NULL;
  char *next = NULL;
  size_t n = 0, i;
  lua_Integer limit = 50;
  dx_error_t e;
  memset(&q, 0, sizeof q);
  q.status = DX_LIST_ANY;
  if (!lua_isnoneornil(L, 2)) {
    if (!lua_istable(L, 2)) return bad(L, "%s", "list filter must be a table {status=, name=, "
                                       "limit=, after=, created_after=}");
    lua_getfield(L, 2, "status");
    if (!status_at(L, -1, &q.status)) return bad(L, "list status must be %s", STATUS_WORDS);
    lua_getfield(L, 2, "name");
    if (!text_at(L, -1, 1, &q.name)) return bad(L, "%s", "list name must be a string");
    lua_getfield(L, 2, "after");
    if (!text_at(L, -1, 1, &q.after)) return bad(L, "%s", "list after must be a cursor string");
    lua_getfield(L, 2, "limit");
    if (!int_at(L, -1, &limit) || limit < 1 || limit > DX_LIST_MAX_LIMIT)
      return bad(L, "list limit must be an integer from 1 to %s", "1000");
    lua_getfield(L, 2, "created_after");
    if (!time_at(L, -1, &q.created_after_ms, &e, "list created_after")) return dxl_client_fail(L, &e);
  }
  q.limit = (size_t)limit;
  if (dx_client_list(c, &q, &rows, &n, &next, &e) != 0) return dxl_client_fail(L, &e);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    char *json = dx_list_row_to_json(&rows[i]);
    dxl_push_decoded(L, json);
    free(json);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  if (next) lua_pushstring(L, next);
  else lua_pushnil(L);
  dx_instance_infos_free(rows, n);
  free(next);
  return 2;
}

static int id_arg(lua_State *L, const char **id) {
  return text_at(L, 2, 0, id) ? 0 : bad(L, "%s", "instance id must be a string");
}

static int l_describe(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id;
  char *json = NULL;
  dx_error_t e;
  if (id_arg(L, &id)) return 2;
  if (dx_client_describe(c, id, &json, &e) != 0) return dxl_client_fail(L, &e);
  dxl_push_decoded(L, json);
  free(json);
  return 1;
}

static int l_executions(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dx_execution_info_t *ex = NULL;
  const char *id;
  size_t n = 0, i;
  dx_error_t e;
  if (id_arg(L, &id)) return 2;
  if (dx_client_executions(c, id, &ex, &n, &e) != 0) return dxl_client_fail(L, &e);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    char *json = dx_execution_info_to_json(&ex[i]);
    dxl_push_decoded(L, json);
    free(json);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  free(ex);
  return 1;
}

/* client:delete(id [, {force=bool}]) -> number of instances deleted */
static int l_delete(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id;
  uint64_t n = 0;
  int force = 0;
  dx_error_t e;
  if (id_arg(L, &id)) return 2;
  if (!lua_isnoneornil(L, 3)) {
    if (!lua_istable(L, 3)) return bad(L, "%s", "delete options must be a table {force=bool}");
    lua_getfield(L, 3, "force");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1)) return bad(L, "%s", "delete force must be a boolean");
    force = lua_toboolean(L, -1);
  }
  if (dx_client_delete(c, id, force, &n, &e) != 0) return dxl_client_fail(L, &e);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

/* client:purge{completed_before=, status=, name=, dry_run=, batch=} -> {matched, deleted, batches} */
static int l_purge(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dx_purge_opts_t o;
  dx_purge_result_t r;
  lua_Integer batch = 0;
  int st = DX_LIST_ANY;
  dx_error_t e;
  memset(&o, 0, sizeof o);
  if (!lua_istable(L, 2))
    return bad(L, "%s", "purge needs a table {completed_before=, status=, name=, dry_run=}");
  lua_getfield(L, 2, "completed_before");
  if (lua_isnil(L, -1)) return bad(L, "%s", "purge needs completed_before (a time or a duration ago)");
  if (!time_at(L, -1, &o.completed_before_ms, &e, "purge completed_before")) return dxl_client_fail(L, &e);
  lua_getfield(L, 2, "status");
  if (!status_at(L, -1, &st) || (st != DX_LIST_ANY && st != DX_STATUS_COMPLETED && st != DX_STATUS_FAILED))
    return bad(L, "purge status must be %s", "Completed or Failed");
  o.status = st == DX_LIST_ANY ? DX_LIST_TERMINAL : st;
  lua_getfield(L, 2, "name");
  if (!text_at(L, -1, 1, &o.name)) return bad(L, "%s", "purge name must be a string");
  lua_getfield(L, 2, "dry_run");
  o.dry_run = lua_toboolean(L, -1);
  lua_getfield(L, 2, "batch");
  if (!int_at(L, -1, &batch) || batch < 0 || batch > DX_LIST_MAX_LIMIT)
    return bad(L, "purge batch must be an integer from 1 to %s", "1000");
  o.batch = (size_t)batch;
  if (dx_client_purge(c, &o, &r, &e) != 0) return dxl_client_fail(L, &e);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)r.matched);
  lua_setfield(L, -2, "matched");
  lua_pushinteger(L, (lua_Integer)r.deleted);
  lua_setfield(L, -2, "deleted");
  lua_pushinteger(L, (lua_Integer)r.batches);
  lua_setfield(L, -2, "batches");
  return 1;
}

/* client:prune(id, keep) -> executions removed */
static int l_prune(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id;
  lua_Integer keep = 0;
  uint64_t n = 0;
  dx_error_t e;
  if (id_arg(L, &id)) return 2;
  if (lua_isnoneornil(L, 3) || !int_at(L, 3, &keep) || keep < 1)
    return bad(L, "%s", "prune keep must be an integer of at least 1");
  if (dx_client_prune(c, id, (uint64_t)keep, &n, &e) != 0) return dxl_client_fail(L, &e);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

/* client:terminate(id [, reason]) -> instances failed */
static int l_terminate(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id, *reason;
  uint64_t n = 0;
  dx_error_t e;
  if (id_arg(L, &id)) return 2;
  if (!text_at(L, 3, 1, &reason)) return bad(L, "%s", "terminate reason must be a string");
  if (dx_client_terminate(c, id, reason, &n, &e) != 0) return dxl_client_fail(L, &e);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

/* client:workers(): the live workers (dx_client_workers_json) as an array of tables. */
static int l_workers(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  char *json = NULL;
  dx_error_t e;
  if (dx_client_workers_json(c, &json, &e) != 0) return dxl_client_fail(L, &e);
  dxl_push_decoded(L, json);
  free(json);
  lua_getfield(L, -1, "workers");
  return 1;
}

/* client:session_history(sid): the stored claims, moves and releases of one session. */
static int l_session_history(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *sid;
  char *json = NULL;
  dx_error_t e;
  if (!text_at(L, 2, 0, &sid)) return bad(L, "%s", "session id must be a string");
  if (dx_client_session_history_json(c, sid, &json, &e) != 0) return dxl_client_fail(L, &e);
  dxl_push_decoded(L, json);
  free(json);
  lua_getfield(L, -1, "events");
  return 1;
}

const luaL_Reg dxl_manage_methods[] = {
  {"workers", l_workers}, {"session_history", l_session_history},
  {"list", l_list}, {"describe", l_describe}, {"executions", l_executions},
  {"delete", l_delete}, {"purge", l_purge}, {"prune", l_prune}, {"terminate", l_terminate},
  {NULL, NULL}};
