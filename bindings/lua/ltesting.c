/*
** ltesting.c -- primitives behind lua/duroxide/testing.lua (the busted harness).
**
** The virtual clock, one step of the loop, the registration table, a store inspector (dry-run
** fetches, the next due time, session rows, making a lease lapse) and a replay-only check of
** a recorded history against the code registered now. Every name starts with "_": these are
** the harness's tools, not part of the public API.
*/
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "dxlua.h"
#include "replay.h"
#include "util.h"
#include "value.h"

#define STORE_MT "duroxide.TestStore"
#define EVENTS_MT "duroxide.TestEvents"
#define MAX_PROBE_WORKERS 64

/* {===== clock, loop, registrations =====} */

static int l_clock_now(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)dx_clock_now_ms());
  return 1;
}

/* duroxide._clock_advance(ms): move the engine's clock forward for the whole process. */
static int l_clock_advance(lua_State *L) {
  lua_Integer ms = luaL_checkinteger(L, 1);
  if (ms < 0) return luaL_argerror(L, 1, "the clock never moves backwards");
  dx_clock_advance((int64_t)ms);
  lua_pushinteger(L, (lua_Integer)dx_clock_now_ms());
  return 1;
}

/* duroxide._run_once(max_ms): one turn of the loop, blocking at most max_ms. */
static int l_run_once(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  dxl_run_loop_once(L, S, (int64_t)luaL_optinteger(L, 1, 0));
  return 0;
}

/* duroxide._registry() -> {orchestrations=, activities=, hooks=} (the live table). */
static int l_registry(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->reg_ref);
  return 1;
}

/* {===== store inspector =====} */

typedef struct {
  dx_provider_t *p;
} tstore_t;

static dx_provider_t *check_store(lua_State *L) {
  tstore_t *u = luaL_checkudata(L, 1, STORE_MT);
  if (!u->p) luaL_error(L, "test store is closed");
  return u->p;
}

/* store:probe(T, workers) -> true when some worker of `workers` (an array of {worker_id=,
** session_lock_ms=, max_sessions=}) could fetch an orchestration or work item at time T.
** Runs the fetches in a batch that is rolled back: nothing changes. */
static int ts_probe(lua_State *L) {
  dx_provider_t *p = check_store(L);
  int64_t at = (int64_t)luaL_checkinteger(L, 2);
  dx_session_cfg_t cfg[MAX_PROBE_WORKERS];
  int use_sessions[MAX_PROBE_WORKERS];
  lua_Integer n, i;
  dx_error_t err;
  int found = 0;
  luaL_checktype(L, 3, LUA_TTABLE);
  memset(cfg, 0, sizeof cfg);
  n = luaL_len(L, 3);
  if (n > MAX_PROBE_WORKERS) return luaL_error(L, "probe: at most %d workers", MAX_PROBE_WORKERS);
  for (i = 0; i < n; i++) { /* read everything before the batch opens: no error inside it */
    lua_geti(L, 3, i + 1);
    luaL_checktype(L, -1, LUA_TTABLE);
    lua_getfield(L, -1, "worker_id");
    cfg[i].worker_id = luaL_checkstring(L, -1); /* kept alive by the argument table */
    lua_getfield(L, -2, "session_lock_ms");
    cfg[i].session_lock_ms = (int64_t)luaL_optinteger(L, -1, 30000);
    lua_getfield(L, -3, "max_sessions");
    cfg[i].max_sessions = (uint32_t)luaL_optinteger(L, -1, 0);
    use_sessions[i] = cfg[i].max_sessions > 0;
    lua_pop(L, 4);
  }
  if (n == 0) {
    lua_pushboolean(L, 0);
    return 1;
  }
  if (p->methods->begin(p, &err) != 0) return luaL_error(L, "probe: %s", err.msg);
  {
    dx_orch_item_t *it = NULL;
    if (p->methods->fetch_orchestration_item(p, at, 1000, &it, &err) == 0 && it) found = 1;
    dx_orch_item_free(it);
  }
  for (i = 0; i < n && !found; i++) {
    dx_work_fetch_t w;
    memset(&w, 0, sizeof w);
    if (p->methods->fetch_work_item(p, at, 1000, use_sessions[i] ? &cfg[i] : NULL, &w,
                                    &err) == 0 && w.item.kind)
      found = 1;
    dx_work_item_clear(&w.item);
    free(w.previous_owner);
  }
  p->methods->rollback(p);
  /* the fetches held the workers' liveness ids on this handle: drop them, or a worker that
  ** is killed later would look alive to its peers for as long as this handle lives */
  for (i = 0; i < n && p->methods->version >= 5 && p->methods->worker_unregister; i++)
    if (use_sessions[i]) p->methods->worker_unregister(p, cfg[i].worker_id);
  lua_pushboolean(L, found);
  return 1;
}

/* store:next_due(now) -> earliest time a queued message becomes fetchable, nil when none. */
static int ts_next_due(lua_State *L) {
  dx_provider_t *p = check_store(L);
  int64_t now = (int64_t)luaL_optinteger(L, 2, dx_clock_now_ms()), due = INT64_MAX;
  dx_error_t err;
  if (p->methods->next_due_ms(p, now, &due, &err) != 0) return luaL_error(L, "%s", err.msg);
  if (due == INT64_MAX) lua_pushnil(L);
  else lua_pushinteger(L, (lua_Integer)due);
  return 1;
}

static int push_session(void *ud, const dx_session_info_t *si) {
  lua_State *L = ud;
  lua_createtable(L, 0, 5);
  lua_pushstring(L, si->session_id);
  lua_setfield(L, -2, "session_id");
  if (si->worker_id && *si->worker_id) {
    lua_pushstring(L, si->worker_id);
    lua_setfield(L, -2, "worker_id");
  }
  lua_pushinteger(L, (lua_Integer)si->locked_until_ms);
  lua_setfield(L, -2, "locked_until");
  lua_pushinteger(L, (lua_Integer)si->last_activity_ms);
  lua_setfield(L, -2, "last_activity");
  lua_pushinteger(L, (lua_Integer)si->queued);
  lua_setfield(L, -2, "queued");
  lua_pushinteger(L, (lua_Integer)si->running);
  lua_setfield(L, -2, "running");
  lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
  return 0;
}

static void set_opt_str(lua_State *L, const char *k, const char *v) {
  if (!v) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static int push_session_event(void *ud, const dx_session_event_t *e) {
  lua_State *L = ud;
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, (lua_Integer)e->at_ms);
  lua_setfield(L, -2, "at");
  set_opt_str(L, "event", e->event);
  set_opt_str(L, "worker_id", e->worker_id);
  set_opt_str(L, "detail", e->detail);
  set_opt_str(L, "from", e->previous_owner);
  lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
  return 0;
}

/* store:session_events(sid) -> { {at=, event=, worker_id=, detail=, from=}, ... } oldest first */
static int ts_session_events(lua_State *L) {
  dx_provider_t *p = check_store(L);
  const char *sid = luaL_checkstring(L, 2);
  dx_error_t err;
  lua_newtable(L);
  if (p->methods->version < 7 || !p->methods->list_session_events) return 1;
  if (p->methods->list_session_events(p, sid, push_session_event, L, &err) != 0)
    return luaL_error(L, "%s", err.msg);
  return 1;
}

/* store:sessions() -> { {session_id=, worker_id=, locked_until=, last_activity=, queued=} } */
static int ts_sessions(lua_State *L) {
  dx_provider_t *p = check_store(L);
  dx_error_t err;
  lua_newtable(L);
  if (p->methods->version < 2 || !p->methods->list_sessions) return 1;
  if (p->methods->list_sessions(p, push_session, L, &err) != 0)
    return luaL_error(L, "%s", err.msg);
  return 1;
}

/* store:expire_session(sid [, now]) -> true, or nil and a message */
static int ts_expire_session(lua_State *L) {
  dx_provider_t *p = check_store(L);
  const char *sid = luaL_checkstring(L, 2);
  int64_t now = (int64_t)luaL_optinteger(L, 3, dx_clock_now_ms());
  int rc;
  const dx_provider_test_hooks_t *h = p->methods->version >= 4 ? p->methods->test_hooks : NULL;
  if (!h || !h->expire_session)
    return luaL_error(L, "expire_session: the %s provider has no test hook for it",
                      p->methods->name);
  rc = h->expire_session(p, sid, now);
  if (rc != 0) {
    lua_pushnil(L);
    lua_pushfstring(L, rc == DX_ENOTFOUND ? "session '%s' has no row in the store"
                                          : "cannot expire session '%s'", sid);
    return 2;
  }
  lua_pushboolean(L, 1);
  return 1;
}

static int ts_close(lua_State *L) {
  tstore_t *u = luaL_checkudata(L, 1, STORE_MT);
  if (u->p) u->p->methods->destroy(u->p);
  u->p = NULL;
  return 0;
}

/* duroxide._test_store(store): a provider handle of its own, used from this thread only. */
static int l_test_store(lua_State *L) {
  static const luaL_Reg methods[] = {{"probe", ts_probe}, {"next_due", ts_next_due},
                                     {"sessions", ts_sessions},
                                     {"session_events", ts_session_events},
                                     {"expire_session", ts_expire_session},
                                     {"close", ts_close}, {NULL, NULL}};
  const char *dir = luaL_checkstring(L, 1);
  tstore_t *u = lua_newuserdatauv(L, sizeof *u, 0);
  dx_error_t err;
  u->p = NULL;
  if (luaL_newmetatable(L, STORE_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, ts_close);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (dx_provider_open(dir, NULL, &u->p, &err) != 0)
    return luaL_error(L, "cannot open store %s: %s", dir, err.msg);
  return 1;
}

/* {===== replay check =====} */

/* Owner of the converted events (freed by __gc, also after an error mid-conversion). */
typedef struct {
  dx_event_t *v;
  size_t n;
} events_box_t;

static int events_gc(lua_State *L) {
  events_box_t *b = lua_touserdata(L, 1);
  dx_events_free(b->v, b->n);
  b->v = NULL;
  b->n = 0;
  return 0;
}

static char *opt_string_field(lua_State *L, int idx, const char *k) {
  char *s = NULL;
  if (lua_getfield(L, idx, k) == LUA_TSTRING) s = dx__strdup(lua_tostring(L, -1));
  lua_pop(L, 1);
  return s;
}

static int64_t opt_int_field(lua_State *L, int idx, const char *k) {
  int64_t v = 0;
  if (lua_getfield(L, idx, k) == LUA_TNUMBER) v = (int64_t)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
}

/* Fill *e from the Lua event table at idx (the shape client:history returns). */
static void event_from_lua(lua_State *L, int idx, size_t pos, dx_event_t *e) {
  const char *type;
  char err[512];
  int k;
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx)) luaL_error(L, "history[%d] is not an event table", (int)pos);
  lua_getfield(L, idx, "type");
  type = lua_tostring(L, -1);
  k = dx_event_kind_from_name(type);
  if (k == 0)
    luaL_error(L, "history[%d]: unknown event type %s", (int)pos, type ? type : "(none)");
  lua_pop(L, 1);
  e->kind = k;
  e->event_id = (uint64_t)opt_int_field(L, idx, "event_id");
  e->source_id = (uint64_t)opt_int_field(L, idx, "source_event_id");
  e->timestamp_ms = opt_int_field(L, idx, "timestamp_ms");
  e->fire_at_ms = opt_int_field(L, idx, "fire_at_ms");
  e->name = opt_string_field(L, idx, "name");
  e->version = opt_string_field(L, idx, "version");
  e->instance = opt_string_field(L, idx, "instance");
  e->session_id = opt_string_field(L, idx, "session_id");
  e->reason = opt_string_field(L, idx, "reason");
  e->worker_id = opt_string_field(L, idx, "worker_id");
  if (lua_getfield(L, idx, "data") != LUA_TNIL) { /* duroxide.null stays "null" */
    e->data = dx__lua_to_json(L, -1, "data", err, sizeof err);
    if (!e->data) luaL_error(L, "history[%d]: %s", (int)pos, err);
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "initial_custom_status") != LUA_TNIL) {
    e->custom_status = dx__lua_to_json(L, -1, "initial_custom_status", err, sizeof err);
    if (!e->custom_status) luaL_error(L, "history[%d]: %s", (int)pos, err);
  }
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "error") == LUA_TTABLE) {
    int t = lua_gettop(L);
    char *cat = opt_string_field(L, t, "category");
    e->fail.category = cat ? dx__category_from_name(cat) : DX_CAT_APPLICATION;
    if (e->fail.category <= 0) e->fail.category = DX_CAT_APPLICATION;
    free(cat);
    e->fail.kind = opt_string_field(L, t, "kind");
    e->fail.message = opt_string_field(L, t, "message");
  }
  lua_pop(L, 1);
}

static int is_terminal(int kind) {
  return kind == DX_EV_ORCH_COMPLETED || kind == DX_EV_ORCH_FAILED || kind == DX_EV_ORCH_CAN;
}

/* The key-value table at idx ({key = value}) as the committed state of a replayed turn,
** sorted by key, into the box (freed by its __gc). */
typedef struct {
  dx_kv_entry_t *v;
  size_t n;
} kv_box_t;

static int kv_box_gc(lua_State *L) {
  kv_box_t *b = lua_touserdata(L, 1);
  dx_kv_entries_free(b->v, b->n);
  b->v = NULL;
  b->n = 0;
  return 0;
}

static int kv_cmp(const void *a, const void *b) {
  return strcmp(((const dx_kv_entry_t *)a)->key, ((const dx_kv_entry_t *)b)->key);
}

static kv_box_t *kv_from_lua(lua_State *L, int idx) {
  kv_box_t *box;
  char err[512];
  size_t cap = 0;
  idx = lua_absindex(L, idx);
  box = lua_newuserdatauv(L, sizeof *box, 0);
  box->v = NULL;
  box->n = 0;
  lua_newtable(L);
  lua_pushcfunction(L, kv_box_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  if (lua_isnoneornil(L, idx)) return box;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    dx_kv_entry_t *e;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "check_replay: kv keys must be strings");
    if (box->n == cap) {
      dx_kv_entry_t *nv = realloc(box->v, (cap ? cap * 2 : 8) * sizeof *nv);
      if (!nv) luaL_error(L, "out of memory");
      box->v = nv;
      cap = cap ? cap * 2 : 8;
    }
    e = &box->v[box->n];
    memset(e, 0, sizeof *e);
    e->key = dx__strdup(lua_tostring(L, -2));
    box->n++; /* freed by __gc even when the value does not encode */
    if (!e->key) luaL_error(L, "out of memory");
    e->value = dx__lua_to_json(L, -1, "kv value", err, sizeof err);
    if (!e->value) luaL_error(L, "check_replay: kv.%s: %s", e->key, err);
    lua_pop(L, 1);
  }
  if (box->n) qsort(box->v, box->n, sizeof *box->v, kv_cmp);
  return box;
}

/* duroxide._replay(history [, instance_id [, execution_id [, kv]]]) -> ok, message, outcome
** Replays the recorded events of one execution against the orchestration registered now,
** in a turn of its own (no store, no runtime): ok is false with the engine's
** "nondeterministic: ..." message when the code no longer matches the history, or with a
** message when the orchestration is not registered. A final completion event is left out so
** the code runs to its end over the whole history. outcome: "Completed", "Failed",
** "ContinuedAsNew" or "Running" (the code waits for more than the history holds). `kv` is the
** instance's key-value state when the execution began ({key = value}; default none). */
static int l_replay(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  const char *instance = luaL_optstring(L, 2, "replay-check");
  uint64_t exec = (uint64_t)luaL_optinteger(L, 3, 1);
  kv_box_t *kv = kv_from_lua(L, 4);
  events_box_t *box;
  dx_orch_item_t item;
  dx_turn_cfg_t cfg;
  dx_turn_t *turn;
  const dx_orch_ack_t *ack;
  lua_Integer n, i;
  size_t len;
  luaL_checktype(L, 1, LUA_TTABLE);
  if (S->in_orchestration) return luaL_error(L, "cannot check a replay from orchestration code");
  n = luaL_len(L, 1);
  box = lua_newuserdatauv(L, sizeof *box, 0);
  box->v = NULL;
  box->n = 0;
  if (luaL_newmetatable(L, EVENTS_MT)) {
    lua_pushcfunction(L, events_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  if (n <= 0) return luaL_error(L, "the history is empty");
  box->v = calloc((size_t)n, sizeof *box->v);
  if (!box->v) return luaL_error(L, "out of memory");
  for (i = 0; i < n; i++) {
    lua_geti(L, 1, i + 1);
    box->n = (size_t)i + 1; /* freed by __gc even when the conversion raises */
    event_from_lua(L, -1, (size_t)i + 1, &box->v[i]);
    lua_pop(L, 1);
  }
  if (box->v[0].kind != DX_EV_ORCH_STARTED || !box->v[0].name)
    return luaL_error(L, "the history does not begin with OrchestrationStarted");
  len = box->n;
  if (is_terminal(box->v[len - 1].kind)) len--;
  memset(&item, 0, sizeof item);
  item.instance = (char *)instance;
  item.orchestration_name = box->v[0].name;
  item.orchestration_version = box->v[0].version;
  item.execution_id = exec;
  item.history = box->v;
  item.history_len = len;
  item.attempt_count = 1;
  item.kv = kv->v;
  item.kv_len = kv->n;
  memset(&cfg, 0, sizeof cfg);
  cfg.now_ms = dx_clock_now_ms();
  cfg.max_attempts = 10;
  cfg.unregistered_base_ms = 1000;
  cfg.unregistered_max_ms = 60000;
  cfg.worker_id = "replay-check";
  turn = dx__turn_run(&item, &cfg, &dxl_host_methods, S);
  if (!turn) return luaL_error(L, "out of memory");
  if (dx__turn_action(turn) != DX_TURN_ACK) {
    dx__turn_free(turn);
    lua_pushboolean(L, 0);
    lua_pushfstring(L, "orchestration '%s' (version %s) is not registered", box->v[0].name,
                    box->v[0].version ? box->v[0].version : "latest");
    return 2;
  }
  ack = dx__turn_ack(turn);
  if (ack->status == DX_STATUS_FAILED && ack->failure && ack->failure->kind &&
      strcmp(ack->failure->kind, "Nondeterminism") == 0) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, ack->failure->message ? ack->failure->message : "nondeterministic");
    lua_pushliteral(L, "Failed");
    dx__turn_free(turn);
    return 3;
  }
  lua_pushboolean(L, 1);
  lua_pushnil(L);
  switch (ack->status) {
    case DX_STATUS_COMPLETED: lua_pushliteral(L, "Completed"); break;
    case DX_STATUS_FAILED: lua_pushliteral(L, "Failed"); break;
    case DX_STATUS_CONTINUED_AS_NEW: lua_pushliteral(L, "ContinuedAsNew"); break;
    default: lua_pushliteral(L, "Running"); break;
  }
  dx__turn_free(turn);
  return 3;
}

/* {===== registration =====} */

static const luaL_Reg testing_fns[] = {
  {"_clock_now", l_clock_now},
  {"_clock_advance", l_clock_advance},
  {"_run_once", l_run_once},
  {"_registry", l_registry},
  {"_test_store", l_test_store},
  {"_replay", l_replay},
  {NULL, NULL}
};

void dxl_testing_register(lua_State *L) { luaL_setfuncs(L, testing_fns, 0); }
