/*
** lclient.c -- duroxide.client{}: start, raise_event, enqueue_event, cancel, status, wait,
** wait_for_status_change, key-value reads, history, stats (the management methods are in
** lmanage.c).
**
** Operational failures return nil, err (err is a duroxide.Error); misuse raises.
*/
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dxlua.h"
#include "util.h"
#include "value.h"

#define CLIENT_MT "duroxide.Client"

typedef struct {
  dx_client_t *c;
} lclient_t;

dx_client_t *dxl_check_client(lua_State *L) {
  lclient_t *u = luaL_checkudata(L, 1, CLIENT_MT);
  if (!u->c) luaL_error(L, "client is closed");
  return u->c;
}

/* [-0, +2, m] nil, duroxide.Error from a dx_error_t */
int dxl_client_fail(lua_State *L, const dx_error_t *err) {
  lua_pushnil(L);
  dxl_push_error(L, err->msg, "client", dx_err_name(err->code));
  return 2;
}

/* JSON of argument idx (absent = null); raises naming the argument on unencodable values. */
static char *arg_json(lua_State *L, int idx, const char *what) {
  char err[512];
  char *s = dx__lua_to_json(L, idx, what, err, sizeof err);
  if (!s) luaL_error(L, "%s", err);
  return s;
}

static int l_start(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  const char *name = dxl_check_text(L, 3, "orchestration name", 0);
  const char *version = dxl_check_text(L, 5, "version", 1);
  char *input = arg_json(L, 4, "input");
  dx_error_t err;
  int rc = dx_client_start(c, id, name, input, version, &err);
  free(input);
  if (rc != 0) return dxl_client_fail(L, &err);
  lua_pushstring(L, id);
  return 1;
}

/* Field of a start_many entry at idx: a string (NULL when absent or not a string); *nul is
** set to `what` when it holds a NUL byte (C would cut it there). */
static const char *entry_text(lua_State *L, int idx, const char *what, const char **nul) {
  size_t n;
  const char *s;
  if (lua_type(L, idx) != LUA_TSTRING) return NULL;
  s = lua_tolstring(L, idx, &n);
  if (memchr(s, '\0', n)) *nul = what;
  return s;
}

/* client:start_many({ {id, name, input [, version]}, ... }): one durable commit. */
static int l_start_many(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  lua_Integer n, i;
  dx_start_t *st;
  char **inputs;
  dx_error_t err;
  const char *nul = NULL;
  int rc;
  luaL_checktype(L, 2, LUA_TTABLE);
  n = luaL_len(L, 2);
  st = lua_newuserdatauv(L, sizeof *st * (size_t)(n ? n : 1), 0);     /* freed by GC */
  inputs = lua_newuserdatauv(L, sizeof *inputs * (size_t)(n ? n : 1), 0);
  memset(inputs, 0, sizeof *inputs * (size_t)(n ? n : 1));
  for (i = 0; i < n; i++) {
    char err_text[512];
    lua_geti(L, 2, i + 1);
    if (!lua_istable(L, -1)) {
      rc = (int)i;
      goto bad;
    }
    lua_geti(L, -1, 1);
    lua_geti(L, -2, 2);
    lua_geti(L, -3, 3);
    lua_geti(L, -4, 4);
    st[i].id = entry_text(L, -4, "instance id", &nul);
    st[i].name = entry_text(L, -3, "orchestration name", &nul);
    st[i].version = entry_text(L, -1, "version", &nul);
    inputs[i] = dx__lua_to_json(L, -2, "input", err_text, sizeof err_text);
    st[i].input = inputs[i];
    /* keep the strings alive: they stay referenced by the argument table */
    lua_pop(L, 5);
    if (!inputs[i] || !st[i].id || !st[i].name || nul) {
      rc = (int)i;
      goto bad;
    }
  }
  rc = dx_client_start_many(c, st, (size_t)n, &err);
  for (i = 0; i < n; i++) free(inputs[i]);
  if (rc != 0) return dxl_client_fail(L, &err);
  lua_pushinteger(L, n);
  return 1;
bad:
  for (i = 0; i < n; i++) free(inputs[i]);
  if (nul) return luaL_error(L, "start_many: entry %d: %s must not contain a NUL byte", rc + 1, nul);
  return luaL_error(L, "start_many: entry %d must be {id, name, input [, version]} with an "
                    "encodable input", rc + 1);
}

static int l_raise(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  const char *name = dxl_check_text(L, 3, "event name", 0);
  char *data = arg_json(L, 4, "data");
  dx_error_t err;
  int rc = dx_client_raise(c, id, name, data, &err);
  free(data);
  if (rc != 0) return dxl_client_fail(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_enqueue(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  const char *queue = dxl_check_text(L, 3, "queue name", 0);
  char *data = arg_json(L, 4, "data");
  dx_error_t err;
  int rc = dx_client_enqueue_event(c, id, queue, data, &err);
  free(data);
  if (rc != 0) return dxl_client_fail(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_cancel(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dx_error_t err;
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  if (dx_client_cancel(c, id, dxl_check_text(L, 3, "cancel reason", 1), &err) != 0)
    return dxl_client_fail(L, &err);
  lua_pushboolean(L, 1);
  return 1;
}

/* [-0, +1, m] decode JSON text produced by the engine into a Lua value */
void dxl_push_decoded(lua_State *L, const char *json) {
  char err[256];
  if (!json || !dx__lua_push_json(L, json, strlen(json), err, sizeof err)) lua_pushnil(L);
}

static void push_status(lua_State *L, const char *id, const dx_instance_info_t *info) {
  char *json = dx_instance_info_to_json(id, info);
  dxl_push_decoded(L, json);
  free(json);
}

static int l_status(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  dx_instance_info_t info;
  dx_error_t err;
  if (dx_client_status(c, id, &info, &err) != 0) return dxl_client_fail(L, &err);
  push_status(L, id, &info);
  dx_instance_info_clear(&info);
  return 1;
}

/* Between two polls of a wait: run this state's runtime for a moment when one runs here (specs
** and scripts start and wait in one process), else sleep. */
static void pause_polling(lua_State *L, dxl_state_t *S) {
  if (S->runtime || S->shared_runtimes > 0) {
    dxl_run_loop_once(L, S, 5);
  } else {
    struct timespec ts = {0, 5 * 1000000L};
    nanosleep(&ts, NULL);
  }
}

/* A wait's timeout argument and deadline; raises when called where it would block the loop. */
static int64_t wait_deadline(lua_State *L, dxl_state_t *S, int idx, const char *what) {
  lua_Integer timeout = luaL_optinteger(L, idx, 30000);
  luaL_argcheck(L, timeout >= 0, idx, "timeout must be >= 0 ms");
  if (S->loop_depth > 0)
    luaL_error(L, "client:%s would block the worker's loop (called from an activity or "
                  "callback); poll client:status with actx:sleep instead", what);
  return dx__deadline_ms((int64_t)timeout);
}

/* [-0, +3] nil, a timeout error, and the last status (on top of the stack, moved below) */
static int timed_out(lua_State *L, const char *what) {
  lua_pushnil(L);
  lua_insert(L, -2);
  dxl_push_error(L, what, "client", "DX_ETIMEDOUT");
  lua_insert(L, -2);
  return 3;
}

static int is_done(int status) {
  return status == DX_STATUS_COMPLETED || status == DX_STATUS_FAILED;
}

/* client:wait_for_status_change(id, last_version, timeout_ms): the status once its
** custom_status_version exceeds last_version or the instance has ended. */
static int l_wait_status_change(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dxl_state_t *S = dxl_state(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  lua_Integer last = luaL_checkinteger(L, 3);
  int64_t deadline = wait_deadline(L, S, 4, "wait_for_status_change");
  dx_instance_info_t info;
  dx_error_t err;
  for (;;) {
    int changed;
    if (dx_client_status(c, id, &info, &err) != 0) return dxl_client_fail(L, &err);
    changed = (lua_Integer)info.custom_status_version > last || is_done(info.status);
    if (changed || dx__now_ms() >= deadline) {
      push_status(L, id, &info);
      dx_instance_info_clear(&info);
      return changed ? 1 : timed_out(L, "timed out waiting for a custom status change");
    }
    dx_instance_info_clear(&info);
    pause_polling(L, S);
  }
}

/* client:get_kv_value(id, key) -> value | nil (no such key), or nil, err */
static int l_kv_get(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  const char *key = dxl_check_text(L, 3, "key-value key", 0);
  char *value = NULL;
  dx_error_t err;
  int rc = dx_client_kv_get(c, id, key, &value, &err);
  if (rc == DX_ENOTFOUND) {
    lua_pushnil(L);
    return 1;
  }
  if (rc != 0) return dxl_client_fail(L, &err);
  dxl_push_decoded(L, value);
  free(value);
  return 1;
}

static int collect_kv(void *ud, const char *key, const char *value, int64_t updated_ms) {
  lua_State *L = ud;
  (void)updated_ms;
  dxl_push_decoded(L, value);
  lua_setfield(L, -2, key);
  return 0;
}

/* client:get_kv_all_values(id) -> { key = value, ... } ({} for an unknown instance) */
static int l_kv_all(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  dx_error_t err;
  lua_newtable(L);
  if (dx_client_kv_list(c, id, collect_kv, L, &err) != 0) return dxl_client_fail(L, &err);
  return 1;
}

/* client:wait_for_kv_value(id, key, timeout_ms) -> value once the key exists, or nil, err */
static int l_kv_wait(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dxl_state_t *S = dxl_state(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  const char *key = dxl_check_text(L, 3, "key-value key", 0);
  int64_t deadline = wait_deadline(L, S, 4, "wait_for_kv_value");
  dx_error_t err;
  for (;;) {
    char *value = NULL;
    int rc = dx_client_kv_get(c, id, key, &value, &err);
    if (rc == 0) {
      dxl_push_decoded(L, value);
      free(value);
      return 1;
    }
    if (rc != DX_ENOTFOUND) return dxl_client_fail(L, &err);
    if (dx__now_ms() >= deadline) {
      lua_pushnil(L);
      dxl_push_error(L, "timed out waiting for the key-value key", "client", "DX_ETIMEDOUT");
      return 2;
    }
    pause_polling(L, S);
  }
}

/* client:wait(id, timeout_ms): the status once the instance has ended. */
static int l_wait(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dxl_state_t *S = dxl_state(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  int64_t deadline = wait_deadline(L, S, 3, "wait");
  dx_instance_info_t info;
  dx_error_t err;
  for (;;) {
    if (dx_client_status(c, id, &info, &err) != 0) return dxl_client_fail(L, &err);
    if (is_done(info.status) || dx__now_ms() >= deadline) {
      int done = is_done(info.status);
      push_status(L, id, &info);
      dx_instance_info_clear(&info);
      return done ? 1 : timed_out(L, "timed out waiting for the instance"); /* nil, err, last */
    }
    dx_instance_info_clear(&info);
    pause_polling(L, S);
  }
}

static int l_history(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  dx_event_t *ev = NULL;
  size_t n = 0, i;
  dx_error_t err;
  lua_Integer n_exec = luaL_optinteger(L, 3, 0);
  uint64_t exec;
  luaL_argcheck(L, n_exec >= 0, 3, "execution_id must be >= 0");
  exec = (uint64_t)n_exec;
  if (dx_client_history(c, id, exec, &ev, &n, &err) != 0) return dxl_client_fail(L, &err);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    char *json = dx_event_to_json(&ev[i]);
    dxl_push_decoded(L, json);
    free(json);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  dx_events_free(ev, n);
  return 1;
}

/* client:stats() (also client:metrics()): the store-wide figures of dx_client_stats_json as a
** table. A worker's own counters are rt:metrics() / its /metrics endpoint. */
static int l_stats(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dx_error_t err;
  char *json;
  if (dx_client_stats_json(c, &json, &err) != 0) return dxl_client_fail(L, &err);
  dxl_push_decoded(L, json);
  free(json);
  return 1;
}

static int l_close(lua_State *L) {
  lclient_t *u = luaL_checkudata(L, 1, CLIENT_MT);
  if (u->c) dx_client_close(u->c);
  u->c = NULL;
  return 0;
}

/* duroxide.client{ store = dir } or duroxide.client(dir) */
int dxl_client_new(lua_State *L) {
  static const luaL_Reg methods[] = {{"start", l_start}, {"start_many", l_start_many},
                                     {"raise_event", l_raise},
                                     {"enqueue_event", l_enqueue},
                                     {"wait_for_status_change", l_wait_status_change},
                                     {"get_kv_value", l_kv_get},
                                     {"get_kv_all_values", l_kv_all},
                                     {"wait_for_kv_value", l_kv_wait},
                                     {"cancel", l_cancel}, {"status", l_status},
                                     {"wait", l_wait}, {"history", l_history},
                                     {"stats", l_stats}, {"metrics", l_stats},
                                     {"close", l_close}, {NULL, NULL}};
  dxl_state_t *S = dxl_state(L);
  const char *store = NULL;
  lclient_t *u;
  dx_error_t err;
  if (lua_type(L, 1) == LUA_TSTRING) {
    store = dxl_check_text(L, 1, "store (a directory path)", 0);
  } else if (lua_type(L, 1) == LUA_TTABLE) {
    lua_getfield(L, 1, "store");
    store = dxl_check_text(L, -1, "store (a directory path)", 1);
  } else if (!lua_isnoneornil(L, 1)) {
    return luaL_argerror(L, 1, "expected a table {store=...} or a store (a directory or a postgres:// URL)");
  }
  if (!store) store = S->store_dir ? S->store_dir : getenv("DUROXIDE_STORE");
  if (!store) store = "./duroxide-data";
  u = lua_newuserdatauv(L, sizeof *u, 0);
  u->c = NULL;
  if (luaL_newmetatable(L, CLIENT_MT)) {
    luaL_newlib(L, methods);
    luaL_setfuncs(L, dxl_manage_methods, 0);
    dxl_guard_functions(L, S, -1, NULL, "client:", "start work with ctx:start_orchestration or "
                        "ctx:schedule_sub_orchestration, or use the client in an activity");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_close);
    lua_setfield(L, -2, "__close");
  }
  lua_setmetatable(L, -2);
  if (dx_client_open(&u->c, store, &err) != 0)
    return luaL_error(L, "cannot open store %s: %s", store, err.msg);
  return 1;
}
