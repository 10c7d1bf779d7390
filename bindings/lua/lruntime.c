/*
** lruntime.c -- duroxide.runtime{}: a worker runtime driven from Lua (specs, scripts, host),
** and luv bound to the same loop.
*/
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include <luv/luv.h>

#include "dxlua.h"
#include "embedding.h"
#include "log.h"
#include "util.h"
#include "value.h"
#include "watchdog.h"

typedef struct {
  dxl_state_t *S;
  dx_runtime_t *rt;
  dx_provider_t *p;
  int state; /* 0 new, 1 running, 2 stopping, 3 stopped */
  int shared;  /* started with {shared = true}: counted in S->shared_runtimes */
  /* options the testing harness reads back (rt:_config()) */
  int max_sessions;
  int64_t session_lock_ms, session_idle_ms, worker_lock_ms;
} lrt_t;

#define RT_MT "duroxide.Runtime"

/* {===== loop driving =====} */

/* Block until the loop has something to do or max_ms passed, then run what is ready. The
** wait is a poll on the loop's backend fd capped at max_ms (libuv's embedding pattern): a
** guard timer would not do, since uv_run runs due timers *before* it polls, so a guard that is
** already due fires there and the poll then sleeps until the next real timer (25 s away). */
int dxl_run_loop_once(lua_State *L, dxl_state_t *S, int64_t max_ms) {
  struct pollfd pfd;
  int timeout;
  if (S->loop_depth > 0)
    return luaL_error(L, "cannot wait for the runtime from inside a callback or activity; "
                         "use duroxide.wait in activities");
  uv_update_time(S->loop);
  /* (a loop with no active handle reports 0: nothing to do, so wait the full max_ms) */
  timeout = uv_loop_alive(S->loop) ? uv_backend_timeout(S->loop) : -1;
  if (max_ms < 0) max_ms = 0;
  if (timeout < 0 || timeout > max_ms) timeout = (int)(max_ms > 1000000 ? 1000000 : max_ms);
  if (timeout > 0) {
    pfd.fd = uv_backend_fd(S->loop);
    pfd.events = POLLIN;
    pfd.revents = 0;
    if (pfd.fd >= 0) poll(&pfd, 1, timeout);
  }
  S->loop_depth++;
  dx__watch_driven(S->loop, 1);
  uv_run(S->loop, UV_RUN_NOWAIT);
  dx__watch_driven(S->loop, 0); /* the script goes on: the loop is not blocked meanwhile */
  S->loop_depth--;
  return 0;
}

static int luv_pcall_cb(lua_State *L, int nargs, int nresults, int flags) {
  char msg[2048];
  int base = lua_gettop(L) - nargs - 1, rc;
  dxl_state_t *S = dxl_state(L);
  (void)flags;
  S->loop_depth++;
  dx__watch_enter(S->loop, "a luv callback");
  rc = dxl_pcall(L, nargs, nresults, msg, sizeof msg, 1);
  dx__watch_leave(S->loop);
  S->loop_depth--;
  if (rc != LUA_OK) {
    /* A luv callback error is the app's bug: report it, never exit the worker. */
    dx__log(DX_LOG_ERROR, "error in luv callback", "error=\"%s\"", msg);
    lua_settop(L, base);
    return -rc;
  }
  return nresults == LUA_MULTRET ? lua_gettop(L) - base : nresults;
}

/* {===== luv functions that would reach the engine's own handles or loop =====} */

/* The userdata of a luv handle, pushed when `h` is one (else nothing; returns 0). luv keeps
** a registry ref to the handle's userdata first in handle->data, and the userdata holds the
** handle's address: a handle of the engine (timers, signals, the store's async) fails the
** address check, so it is never handed to Lua. */
static int push_luv_handle(lua_State *L, uv_handle_t *h) {
  int ref;
  void **ud;
  if (!h->data) return 0;
  memcpy(&ref, h->data, sizeof ref);
  if (ref <= 0) return 0;
  if (lua_rawgeti(L, LUA_REGISTRYINDEX, ref) == LUA_TUSERDATA &&
      lua_rawlen(L, -1) >= sizeof(void *) && (ud = lua_touserdata(L, -1)) && *ud == h)
    return 1;
  lua_pop(L, 1);
  return 0;
}

static void collect_handle(uv_handle_t *h, void *arg) {
  lua_State *L = arg;
  if (lua_checkstack(L, 2) && push_luv_handle(L, h))
    lua_rawseti(L, -2, (lua_Integer)luaL_len(L, -2) + 1);
}

/* uv.walk(fn): luv's walk hands every handle of the loop to Lua, the engine's too, and
** closing those crashes the worker. This one visits the app's luv handles only. */
static int l_uv_walk(lua_State *L) {
  lua_Integer i, n;
  luaL_checktype(L, 1, LUA_TFUNCTION);
  lua_newtable(L);
  uv_walk(dxl_state(L)->loop, collect_handle, L); /* collect first: fn may close handles */
  n = luaL_len(L, -1);
  for (i = 1; i <= n; i++) {
    lua_pushvalue(L, 1);
    lua_rawgeti(L, -2, i);
    lua_call(L, 1, 0);
  }
  return 0;
}

/* uv.run() inside a callback or activity would re-enter the worker's running loop. */
static int l_uv_run(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  static const char *const modes[] = {"default", "once", "nowait", NULL};
  static const uv_run_mode uv_modes[] = {UV_RUN_DEFAULT, UV_RUN_ONCE, UV_RUN_NOWAIT};
  int mode = luaL_checkoption(L, 1, "default", modes), rc;
  if (S->loop_depth > 0)
    return luaL_error(L, "uv.run cannot be called from an activity or callback: the loop is "
                         "already running");
  S->loop_depth++;
  rc = uv_run(S->loop, uv_modes[mode]);
  S->loop_depth--;
  lua_pushboolean(L, rc);
  return 1;
}

/* The loop belongs to duroxide: closing it would pull it from under the runtime. */
static int l_uv_loop_close(lua_State *L) {
  return luaL_error(L, "uv.loop_close: the loop belongs to duroxide and is closed by it");
}

/* The loop duroxide runs on: luv's when the app required luv before duroxide (its uv.run()
** must run duroxide's work too; on a loop of its own duroxide would never progress), else the
** default loop, which require("luv") after duroxide then gets (dxl_open_luv). */
uv_loop_t *dxl_pick_loop(lua_State *L) {
  int luv_first;
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
  luv_first = lua_getfield(L, -1, "luv") == LUA_TTABLE;
  lua_pop(L, 2);
  return luv_first && luv_loop(L) ? luv_loop(L) : uv_default_loop();
}

int dxl_open_luv(lua_State *L) {
  static const luaL_Reg guarded[] = {{"walk", l_uv_walk}, {"run", l_uv_run},
                                     {"loop_close", l_uv_loop_close}, {NULL, NULL}};
  dxl_state_t *S = dxl_state(L);
  /* luv runs every callback on the thread given here: the main thread, never the coroutine
  ** (an activity, say) whose require("luv") happened to load it first. */
  luv_set_loop(S->L, S->loop);
  luv_set_callback(L, luv_pcall_cb);
  luaopen_luv(L);
  luaL_setfuncs(L, guarded, 0);
  return 1;
}

/* {===== runtime object =====} */

static lrt_t *check_rt(lua_State *L) { return luaL_checkudata(L, 1, RT_MT); }

static void on_stopped(dx_runtime_t *rt, void *ud) {
  lrt_t *r = ud;
  (void)rt;
  r->state = 3;
}

static void rt_release(lrt_t *r) {
  if (r->state == 1 || r->state == 2) return; /* still running: never free the store under it */
  if (r->shared) {
    r->shared = 0;
    r->S->shared_runtimes--;
  }
  if (r->rt) {
    if (r->S->runtime == r->rt) r->S->runtime = NULL;
    dx_runtime_free(r->rt);
    r->rt = NULL;
  }
  if (r->p) {
    r->p->methods->destroy(r->p);
    r->p = NULL;
  }
}

/* Stop gracefully, driving the loop until the runtime has closed. */
static void rt_stop_sync(lua_State *L, lrt_t *r) {
  if (r->state == 1) {
    r->state = 2;
    dx_runtime_stop(r->rt, on_stopped, r);
    while (r->state != 3) uv_run(r->S->loop, UV_RUN_ONCE);
  }
  (void)L;
  rt_release(r);
}

/* rt:start([{shared = true}]). A plain runtime is the only one of its Lua state (client:wait
** drives it). Shared runtimes (the duroxide.testing harness's simulated workers) may run
** side by side on the state's loop, each with its own worker_node_id. */
static int l_rt_start(lua_State *L) {
  lrt_t *r = check_rt(L);
  dx_error_t err;
  int shared = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    lua_getfield(L, 2, "shared");
    shared = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  if (r->state != 0) return luaL_error(L, "runtime already started");
  if (!shared && (r->S->runtime || r->S->shared_runtimes > 0))
    return luaL_error(L, "another runtime is already running in this Lua state (stop it first; "
                         "duroxide.testing runs several simulated workers with {shared = true})");
  if (dx_runtime_start(r->rt, &err) != 0) return luaL_error(L, "%s", err.msg);
  dx__watch_driven(r->S->loop, 0); /* watched only while the script drives the loop */
  r->state = 1;
  if (shared) {
    r->shared = 1;
    r->S->shared_runtimes++;
  } else {
    r->S->runtime = r->rt;
  }
  lua_settop(L, 1);
  return 1;
}

/* rt:crash(): stop abruptly, as if the process were killed (dx_runtime_crash): no hooks, no
** releases; in-flight work stays locked in the store until its locks and leases lapse. */
static int l_rt_crash(lua_State *L) {
  lrt_t *r = check_rt(L);
  if (r->state == 1) {
    if (r->S->loop_depth > 0)
      return luaL_error(L, "cannot crash a runtime from inside a callback or activity");
    r->state = 2;
    if (dx_runtime_crash(r->rt, on_stopped, r) != 0) return luaL_error(L, "cannot crash runtime");
    while (r->state != 3) uv_run(r->S->loop, UV_RUN_ONCE);
  }
  rt_release(r);
  return 0;
}

/* rt:_idle() -> true when no activity runs and no store operation is pending here. */
static int l_rt_idle(lua_State *L) {
  lrt_t *r = check_rt(L);
  lua_pushboolean(L, r->state != 1 || dx_runtime_is_idle(r->rt));
  return 1;
}

/* rt:_renew_sessions(): run the session lease renewal now. */
static int l_rt_renew_sessions(lua_State *L) {
  lrt_t *r = check_rt(L);
  if (r->state == 1) dx_runtime_renew_sessions_now(r->rt);
  return 0;
}

/* rt:_stall(on): a simulated SIGSTOP (true) and SIGCONT (false) of this runtime (tests). */
static int l_rt_stall(lua_State *L) {
  lrt_t *r = check_rt(L);
  int on = lua_toboolean(L, 2);
  if (r->state != 1) return luaL_error(L, "the runtime is not running");
  if (r->S->loop_depth > 0)
    return luaL_error(L, "cannot stall a runtime from inside a callback or activity");
  dx__runtime_stall(r->rt, on);
  if (!on) dxl_resume_deferred(r->S);
  return 0;
}

/* rt:_without(names): this runtime lacks these activities (an older worker; tests). */
static int l_rt_without(lua_State *L) {
  lrt_t *r = check_rt(L);
  lua_Integer i, n;
  luaL_checktype(L, 2, LUA_TTABLE);
  if (!r->rt) return luaL_error(L, "the runtime is closed");
  n = luaL_len(L, 2);
  for (i = 1; i <= n; i++) {
    lua_geti(L, 2, i);
    if (lua_type(L, -1) != LUA_TSTRING)
      return luaL_error(L, "activity names must be strings (entry %d is a %s)", (int)i,
                        luaL_typename(L, -1));
    if (dx__runtime_hide_activity(r->rt, lua_tostring(L, -1)) != DX_OK)
      return luaL_error(L, "out of memory");
    lua_pop(L, 1);
  }
  return 0;
}

/* rt:_turn_hold(ms): before rt:start, how long its store cycles wait for the turns they
** fetched (tests: a long hold makes sharing a commit independent of the machine's load). */
static int l_rt_turn_hold(lua_State *L) {
  lrt_t *r = check_rt(L);
  lua_Integer ms = luaL_checkinteger(L, 2);
  luaL_argcheck(L, ms >= 0, 2, "hold must be >= 0 ms");
  if (!r->rt || r->state != 0) return luaL_error(L, "set the turn hold before rt:start");
  dx__runtime_set_turn_hold(r->rt, (int64_t)ms);
  return 0;
}

/* rt:_lose_commits(n): tests: the runtime's next n store commits are lost (rolled back and
** retried, embedding.h dx__runtime_lose_commits). */
static int l_rt_lose_commits(lua_State *L) {
  lrt_t *r = check_rt(L);
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n >= 0 && n <= 1000, 2, "count must be 0..1000");
  if (!r->rt || r->state != 1) return luaL_error(L, "lose commits of a started runtime");
  dx__runtime_lose_commits(r->rt, (int)n);
  return 0;
}

/* rt:_poke(): wake the store thread (look for due work now). */
static int l_rt_poke(lua_State *L) {
  lrt_t *r = check_rt(L);
  if (r->state == 1) dx_runtime_poke(r->rt);
  return 0;
}

/* rt:_config() -> {worker_id=, running=, max_sessions=, session_lock_ms=, session_idle_ms=,
** worker_lock_ms=} */
static int l_rt_config(lua_State *L) {
  lrt_t *r = check_rt(L);
  lua_createtable(L, 0, 6);
  if (r->rt) {
    lua_pushstring(L, dx_runtime_worker_id(r->rt));
    lua_setfield(L, -2, "worker_id");
  }
  lua_pushboolean(L, r->state == 1);
  lua_setfield(L, -2, "running");
  lua_pushinteger(L, r->max_sessions);
  lua_setfield(L, -2, "max_sessions");
  lua_pushinteger(L, (lua_Integer)r->session_lock_ms);
  lua_setfield(L, -2, "session_lock_ms");
  lua_pushinteger(L, (lua_Integer)r->session_idle_ms);
  lua_setfield(L, -2, "session_idle_ms");
  lua_pushinteger(L, (lua_Integer)r->worker_lock_ms);
  lua_setfield(L, -2, "worker_lock_ms");
  return 1;
}

/* rt:run_until(pred, timeout_ms) -> true when pred() returned true, false on timeout */
static int l_rt_run_until(lua_State *L) {
  lrt_t *r = check_rt(L);
  int64_t deadline = dx__deadline_ms((int64_t)luaL_optinteger(L, 3, 10000));
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (r->state != 1) return luaL_error(L, "runtime is not running (call rt:start())");
  for (;;) {
    int ok;
    lua_pushvalue(L, 2);
    lua_call(L, 0, 1);
    ok = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (ok) {
      lua_pushboolean(L, 1);
      return 1;
    }
    if (dx__now_ms() >= deadline) {
      lua_pushboolean(L, 0);
      return 1;
    }
    dxl_run_loop_once(L, r->S, 5);
  }
}

/* rt:run_for(ms): drive the loop for ms of wall time. */
static int l_rt_run_for(lua_State *L) {
  lrt_t *r = check_rt(L);
  int64_t deadline = dx__deadline_ms((int64_t)luaL_checkinteger(L, 2));
  while (dx__now_ms() < deadline) dxl_run_loop_once(L, r->S, deadline - dx__now_ms());
  (void)r;
  return 0;
}

static int l_rt_stop(lua_State *L) {
  lrt_t *r = check_rt(L);
  if (r->state == 1 && r->S->loop_depth > 0) /* the stop would re-enter the running loop */
    return luaL_error(L, "cannot stop a runtime from inside a callback or activity");
  rt_stop_sync(L, r);
  return 0;
}

static int l_rt_gc(lua_State *L) {
  lrt_t *r = lua_touserdata(L, 1);
  if (r->state == 1) rt_stop_sync(L, r);
  else rt_release(r);
  return 0;
}

static int l_rt_worker_id(lua_State *L) {
  lrt_t *r = check_rt(L);
  lua_pushstring(L, r->rt ? dx_runtime_worker_id(r->rt) : NULL);
  return 1;
}

static int l_rt_stats(lua_State *L) {
  lrt_t *r = check_rt(L);
  dx_runtime_stats_t st;
  memset(&st, 0, sizeof st);
  if (r->rt) dx_runtime_stats(r->rt, &st);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)st.turns);
  lua_setfield(L, -2, "turns");
  lua_pushinteger(L, (lua_Integer)st.activities);
  lua_setfield(L, -2, "activities");
  lua_pushinteger(L, (lua_Integer)st.commits);
  lua_setfield(L, -2, "commits");
  lua_pushinteger(L, (lua_Integer)st.fetch_cycles);
  lua_setfield(L, -2, "fetch_cycles");
  return 1;
}

/* rt:metrics(): this worker's metrics as dx_metrics_render_json shapes them
** ({ [name] = { type =, help =, series = { { labels = {..}, value = n }, ... } } }). */
static int l_rt_metrics(lua_State *L) {
  lrt_t *r = check_rt(L);
  char err[256], *json = r->rt ? dx_metrics_render_json(dx_runtime_metrics(r->rt)) : NULL;
  if (!json) return luaL_error(L, "rt:metrics(): %s", r->rt ? "out of memory" : "runtime is freed");
  if (!dx__lua_push_json(L, json, strlen(json), err, sizeof err)) {
    free(json);
    return luaL_error(L, "rt:metrics(): %s", err);
  }
  free(json);
  return 1;
}

/* [-2, +0, e] dxl_options_from_table(arg 1) into the dx_options_t at arg 2. */
static int parse_options(lua_State *L) {
  dxl_options_from_table(L, 1, dxl_state(L), lua_touserdata(L, 2));
  return 0;
}

/* duroxide.runtime{ store = dir, [no_sync = true,] <options> } (options override
** duroxide.configure; no_sync skips fsync on the runtime's commits: for throwaway stores) */
int dxl_runtime_new(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  dx_options_t opts = S->opts;
  dx_error_t err;
  const char *store;
  lrt_t *r;
  dx_provider_opts_t po;
  char *saved_store;
  size_t saved_max;
  memset(&po, 0, sizeof po);
  po.version = 1;
  if (lua_istable(L, 1)) {
    /* no_sync = true: skip fsync on commits (a store option, not an engine option) */
    int t = lua_getfield(L, 1, "no_sync");
    po.no_sync = lua_toboolean(L, -1);
    lua_pop(L, 1);
    if (t != LUA_TNIL) { /* parse a copy without it */
      lua_newtable(L);
      lua_pushnil(L);
      while (lua_next(L, 1)) {
        if (lua_type(L, -2) == LUA_TSTRING && strcmp(lua_tostring(L, -2), "no_sync") == 0) {
          lua_pop(L, 1);
          continue;
        }
        lua_pushvalue(L, -2);
        lua_insert(L, -2);
        lua_rawset(L, -4);
      }
      lua_replace(L, 1);
    }
  }
  saved_store = dx__strdup(S->store_dir);
  saved_max = S->store_max_size; /* like store: this runtime's option only */
  if (!lua_isnoneornil(L, 1)) {
    /* Parse under pcall: a bad option must not leave this call's `store` as the default. */
    lua_pushcfunction(L, parse_options);
    lua_pushvalue(L, 1);
    lua_pushlightuserdata(L, &opts);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
      free(S->store_dir);
      S->store_dir = saved_store;
      S->store_max_size = saved_max;
      return lua_error(L);
    }
  }
  store = S->store_dir ? S->store_dir : getenv("DUROXIDE_STORE");
  if (!store) store = "./duroxide-data";
  po.max_size = S->store_max_size;
  S->store_max_size = saved_max;
  r = lua_newuserdatauv(L, sizeof *r, 0);
  memset(r, 0, sizeof *r);
  r->S = S;
  luaL_setmetatable(L, RT_MT);
  if (dx_provider_open(store, &po, &r->p, &err) != 0) {
    /* the message first: `store` may be the S->store_dir freed below */
    luaL_where(L, 1);
    lua_pushfstring(L, "cannot open store %s: %s", store, err.msg);
    lua_concat(L, 2);
    free(S->store_dir);
    S->store_dir = saved_store;
    return lua_error(L);
  }
  free(S->store_dir);
  S->store_dir = saved_store;
  dx__log_configure(opts.log_level, opts.log_format);
  if (dx_runtime_new(&r->rt, S->loop, r->p, &opts, &dxl_host_methods, S, &err) != 0) {
    rt_release(r);
    return luaL_error(L, "%s", err.msg);
  }
  r->max_sessions = opts.max_sessions_per_worker;
  r->session_lock_ms = opts.session_lock_timeout_ms;
  r->session_idle_ms = opts.session_idle_timeout_ms;
  r->worker_lock_ms = opts.worker_lock_timeout_ms;
  return 1;
}

int luaopen_duroxide_runtime_mt(lua_State *L);
int luaopen_duroxide_runtime_mt(lua_State *L) {
  static const luaL_Reg methods[] = {{"start", l_rt_start}, {"run_until", l_rt_run_until},
                                     {"run_for", l_rt_run_for}, {"stop", l_rt_stop},
                                     {"worker_id", l_rt_worker_id}, {"stats", l_rt_stats},
                                     {"metrics", l_rt_metrics},
                                     {"crash", l_rt_crash}, {"_idle", l_rt_idle},
                                     {"_renew_sessions", l_rt_renew_sessions},
                                     {"_poke", l_rt_poke}, {"_config", l_rt_config},
                                     {"_stall", l_rt_stall}, {"_without", l_rt_without},
                                     {"_turn_hold", l_rt_turn_hold},
                                     {"_lose_commits", l_rt_lose_commits},
                                     {NULL, NULL}};
  if (luaL_newmetatable(L, RT_MT)) {
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_rt_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_rt_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  return 0;
}
