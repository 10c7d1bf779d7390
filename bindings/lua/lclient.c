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
#include "embedding.h"
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

/* With this state's own runtime running on the same local store (and called outside its
** loop's callbacks), the start is handed to that runtime and the loop runs until it is
** committed: its first turn then commits with it (embedding.h dx__eager_start). */
static int l_start(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dxl_state_t *S = dxl_state(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  const char *name = dxl_check_text(L, 3, "orchestration name", 0);
  const char *version = dxl_check_text(L, 5, "version", 1);
  char *input = arg_json(L, 4, "input");
  dx_start_t st = {id, name, input, version};
  dx__eager_t *e = NULL;
  dx_error_t err;
  int rc = S->loop_depth == 0 ? dx__eager_start(S->runtime, c, &st, &e, &err) : 0;
  if (rc == 0 && e) {
    while (!dx__eager_done(e)) dxl_run_loop_once(L, S, 5);
    rc = dx__eager_end(e, &err);
  } else if (rc == 0) {
    rc = dx_client_start(c, id, name, input, version, &err);
  }
  free(input);
  if (rc != 0) return dxl_client_fail(L, &err);
  lua_pushstring(L, id);
  return 1;
}

/* A batch argument (client:start_many, client:raise_many): argument 2 is a list of entries,
** each a list of fields. spec[f] says what field f is: 't' required text, 'o' optional text,
** 'j' any encodable value (absent = null). */
typedef struct {
  const char *fn;            /* "start_many" */
  const char *spec;          /* "ttjo" */
  const char *const *names;  /* field names for errors */
  const char *shape;         /* "{id, name, input [, version]}" */
} batch_spec_t;

/* Free the JSON fields of the first n entries of v. */
static void batch_free(const batch_spec_t *b, const char **v, lua_Integer n) {
  size_t nf = strlen(b->spec), f;
  lua_Integer i;
  for (i = 0; i < n; i++)
    for (f = 0; f < nf; f++)
      if (b->spec[f] == 'j') free((char *)v[i * (lua_Integer)nf + (lua_Integer)f]);
}

/* Read every entry into a GC-owned array (left on the stack): v[i * nf + f] is field f of
** entry i, texts borrowed from the argument table, JSON malloc'd (batch_free). A bad entry
** raises "<fn>: entry N ..." naming it, before anything is sent. */
static const char **batch_read(lua_State *L, const batch_spec_t *b, lua_Integer *n_out) {
  size_t nf = strlen(b->spec), f;
  lua_Integer n, i;
  const char **v;
  luaL_checktype(L, 2, LUA_TTABLE);
  n = luaL_len(L, 2);
  if (n < 0 || (lua_Unsigned)n > (lua_Unsigned)(SIZE_MAX / sizeof *v / nf - 1))
    luaL_error(L, "%s: too many entries", b->fn);
  v = lua_newuserdatauv(L, sizeof *v * nf * (size_t)(n ? n : 1), 0);
  memset(v, 0, sizeof *v * nf * (size_t)(n ? n : 1));
  for (i = 0; i < n; i++) {
    char why[512];
    int bad = 0; /* 1: not the entry's shape; 2: `why` says what */
    lua_geti(L, 2, i + 1);
    if (!lua_istable(L, -1)) bad = 1;
    for (f = 0; f < nf && !bad; f++) {
      const char **slot = &v[i * (lua_Integer)nf + (lua_Integer)f];
      size_t len;
      lua_geti(L, -1, (lua_Integer)f + 1);
      if (b->spec[f] == 'j') {
        if (!(*slot = dx__lua_to_json(L, -1, b->names[f], why, sizeof why))) bad = 2;
      } else if (lua_type(L, -1) == LUA_TSTRING) {
        *slot = lua_tolstring(L, -1, &len); /* referenced by the argument table */
        if (memchr(*slot, '\0', len)) {
          snprintf(why, sizeof why, "%s must not contain a NUL byte", b->names[f]);
          bad = 2;
        }
      } else if (b->spec[f] == 't' || !lua_isnil(L, -1)) {
        bad = 1;
      }
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    if (bad) {
      batch_free(b, v, i + 1);
      if (bad == 2) luaL_error(L, "%s: entry %d: %s", b->fn, (int)(i + 1), why);
      luaL_error(L, "%s: entry %d must be %s", b->fn, (int)(i + 1), b->shape);
    }
  }
  *n_out = n;
  return v;
}

/* client:start_many({ {id, name, input [, version]}, ... }): one durable commit. */
static int l_start_many(lua_State *L) {
  static const char *const names[] = {"instance id", "orchestration name", "input", "version"};
  static const batch_spec_t spec = {"start_many", "ttjo", names,
                                    "{id, name, input [, version]}"};
  dx_client_t *c = dxl_check_client(L);
  lua_Integer n, i;
  const char **v = batch_read(L, &spec, &n);
  dx_start_t *st = lua_newuserdatauv(L, sizeof *st * (size_t)(n ? n : 1), 0);
  dx_error_t err;
  int rc;
  for (i = 0; i < n; i++) {
    st[i].id = v[i * 4];
    st[i].name = v[i * 4 + 1];
    st[i].input = v[i * 4 + 2];
    st[i].version = v[i * 4 + 3];
  }
  rc = dx_client_start_many(c, st, (size_t)n, &err);
  batch_free(&spec, v, n);
  if (rc != 0) return dxl_client_fail(L, &err);
  lua_pushinteger(L, n);
  return 1;
}

/* client:raise_many({ {id, name [, data]}, ... }): one durable commit. */
static int l_raise_many(lua_State *L) {
  static const char *const names[] = {"instance id", "event name", "data"};
  static const batch_spec_t spec = {"raise_many", "ttj", names, "{id, name [, data]}"};
  dx_client_t *c = dxl_check_client(L);
  lua_Integer n, i;
  const char **v = batch_read(L, &spec, &n);
  dx_raise_t *r = lua_newuserdatauv(L, sizeof *r * (size_t)(n ? n : 1), 0);
  dx_error_t err;
  int rc;
  for (i = 0; i < n; i++) {
    r[i].id = v[i * 3];
    r[i].name = v[i * 3 + 1];
    r[i].data = v[i * 3 + 2];
  }
  rc = dx_client_raise_many(c, r, (size_t)n, &err);
  batch_free(&spec, v, n);
  if (rc != 0) return dxl_client_fail(L, &err);
  lua_pushinteger(L, n);
  return 1;
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
  dxl_push_status(L, id, info);
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

/* Between two reads of a wait: run this state's runtime for a moment when one runs here (specs
** and scripts start and wait in one process), else wait for a commit to the store (until the
** deadline; a store without wake-ups is read again after 5 ms). */
static void pause_polling(lua_State *L, dxl_state_t *S, dx_client_t *c, int64_t deadline) {
  int64_t left = deadline - dx__now_ms();
  if (S->runtime || S->shared_runtimes > 0) {
    dxl_run_loop_once(L, S, 5);
  } else if (left > 0) {
    dx__client_await(c, left < DX_CLIENT_WATCH_MAX_MS ? left : DX_CLIENT_WATCH_MAX_MS,
                     left < 5 ? left : 5);
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
  dx__client_watch(c); /* before the first read: no commit after it goes unheard */
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
    pause_polling(L, S, c, deadline);
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
  dx__client_watch(c); /* before the first read: no commit after it goes unheard */
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
    pause_polling(L, S, c, deadline);
  }
}

/* client:wait(id, timeout_ms): the status once the instance has ended. */
static int l_wait(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  dxl_state_t *S = dxl_state(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  int64_t deadline = wait_deadline(L, S, 3, "wait");
  dx__client_watch(c); /* before the first read: no commit after it goes unheard */
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
    pause_polling(L, S, c, deadline);
  }
}

/* client:history(id [, execution]): the events as tables (as_json: as JSON text) */
static int history(lua_State *L, int as_json) {
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
    if (as_json) {
      char *json = dx_event_to_json(&ev[i]);
      lua_pushstring(L, json);
      free(json);
    } else {
      dxl_push_event(L, &ev[i]);
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  dx_events_free(ev, n);
  return 1;
}

static int l_history(lua_State *L) { return history(L, 0); }

/* client:_history_json(id [, execution]) / client:_status_json(id): the JSON text the CLI
** prints for the same records (specs check the tables above decode from it). */
static int l_history_json(lua_State *L) { return history(L, 1); }

static int l_status_json(lua_State *L) {
  dx_client_t *c = dxl_check_client(L);
  const char *id = dxl_check_text(L, 2, "instance id", 0);
  dx_instance_info_t info;
  dx_error_t err;
  char *json;
  if (dx_client_status(c, id, &info, &err) != 0) return dxl_client_fail(L, &err);
  json = dx_instance_info_to_json(id, &info);
  dx_instance_info_clear(&info);
  lua_pushstring(L, json);
  free(json);
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
                                     {"raise_many", l_raise_many},
                                     {"enqueue_event", l_enqueue},
                                     {"wait_for_status_change", l_wait_status_change},
                                     {"get_kv_value", l_kv_get},
                                     {"get_kv_all_values", l_kv_all},
                                     {"wait_for_kv_value", l_kv_wait},
                                     {"cancel", l_cancel}, {"status", l_status},
                                     {"wait", l_wait}, {"history", l_history},
                                     {"_history_json", l_history_json},
                                     {"_status_json", l_status_json},
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
