/*
** sandbox.c -- what orchestration code can reach (API.md §3, docs/lua-api.md "Sandbox").
**
** Three layers, all checked only while orchestration code runs (S->in_orchestration):
**  - guards: functions that are non-deterministic, do I/O, stop the collector, load binary
**    chunks, install finalizers or change shared state raise with a message naming the
**    replacement; activities and load-time code call the originals unchanged;
**  - read-only libraries and views: the standard library tables keep their contents in a
**    private table behind __index and refuse writes while an orchestration runs (whatever
**    reference the code holds); metatables shared with other code (strings, C objects, ctx
**    and futures) are seen through read-only views;
**  - coroutine.running tells activity.c which activity coroutines the code got (not reused);
**  - per-instance globals: each registered orchestration function gets its own _ENV cell,
**    bound to a fresh globals table per instance while that instance runs. The table falls
**    back to one shared, read-only snapshot of the function's environment (per environment),
**    so an instance costs one small table. Globals that helper functions create in _G while
**    an instance runs go to that instance's table too (_G's __index/__newindex).
*/
#include <string.h>

#include "dxlua.h"

static const char views_key = 0;   /* weak: target -> its read-only view */
static const char targets_key = 0; /* weak: view -> its target */
static const char info_key = 0;    /* weak: orchestration function -> {carrier, env} (INFO_*) */
enum { INFO_CARRIER = 1, INFO_ENV = 2 }; /* integer keys: every resume reads them twice */
static const char shared_key = 0;  /* weak: environment -> metatable of its instance globals */
static const char base_key = 0;    /* name -> guarded base function (getmetatable, load...) */

/* Standard libraries that are read-only while orchestrations run. */
static const char *const std_libs[] = {"string", "table", "math", "os", "io", "coroutine",
                                       "utf8", "debug", NULL};
/* Globals an orchestration cannot see at all. */
static const char *const hidden[] = {"package", "luv", "_G", NULL};

static int in_list(const char *const *list, const char *s) {
  int i;
  for (i = 0; s && list[i]; i++)
    if (strcmp(list[i], s) == 0) return 1;
  return 0;
}

static dxl_state_t *state_of(lua_State *L, int upvalue) {
  return lua_touserdata(L, lua_upvalueindex(upvalue));
}

/* [-0, +1, m] registry[key], a table created on first use (weak keys when `weak`). */
static void push_table(lua_State *L, const void *key, int weak) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  if (weak) {
    lua_createtable(L, 0, 1);
    lua_pushliteral(L, "k");
    lua_setfield(L, -2, "__mode");
    lua_setmetatable(L, -2);
  }
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, key);
}

/* {===== read-only views =====} */

static void push_view(lua_State *L, int idx, const char *name);

/* Replace the value on top by what a view shows: tables as views, full userdata (io.stdout)
** hidden. [-1, +1, m] */
static int is_view(lua_State *L, int idx);

static void wrap_top(lua_State *L, const char *name, int key) {
  int t = lua_type(L, -1);
  if (t == LUA_TTABLE && !is_view(L, -1)) { /* read-only libraries are shown as they are */
    const char *sub = lua_type(L, key) == LUA_TSTRING
                        ? lua_pushfstring(L, "%s.%s", name, lua_tostring(L, key))
                        : lua_pushfstring(L, "%s[...]", name);
    push_view(L, -2, sub);
    lua_replace(L, -3);
    lua_pop(L, 1);
  } else if (t == LUA_TUSERDATA) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
}

/* Finalizers and closers of shared objects (a view of io.stderr's metatable) would close
** them for everyone: views do not show them. */
static int hidden_field(lua_State *L, int key) {
  const char *k = lua_type(L, key) == LUA_TSTRING ? lua_tostring(L, key) : NULL;
  return k && (strcmp(k, "__gc") == 0 || strcmp(k, "__close") == 0);
}

/* upvalues: target, name */
static int view_index(lua_State *L) {
  if (hidden_field(L, 2)) return 0;
  lua_settop(L, 2);
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  wrap_top(L, lua_tostring(L, lua_upvalueindex(2)), 2);
  return 1;
}

/* __newindex of read-only tables: (table, key, value), upvalue 2 the table's name. */
static int refuse_write(lua_State *L) {
  const char *name = lua_tostring(L, lua_upvalueindex(2));
  if (lua_type(L, 2) == LUA_TSTRING)
    return luaL_error(L, "cannot assign %s.%s: %s is read-only in orchestrations (it is shared "
                      "by every instance; keep state in locals)", name, lua_tostring(L, 2), name);
  return luaL_error(L, "%s is read-only in orchestrations (it is shared by every instance; "
                    "keep state in locals)", name);
}

/* upvalues: target, name; (view, key) -> key, value */
static int view_next(lua_State *L) {
  lua_settop(L, 2);
  while (lua_next(L, lua_upvalueindex(1))) {
    wrap_top(L, lua_tostring(L, lua_upvalueindex(2)), -2);
    if (!lua_isnil(L, -1) && !hidden_field(L, -2)) return 2;
    lua_pop(L, 1);
  }
  return 0;
}

static int view_pairs(lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushvalue(L, lua_upvalueindex(2));
  lua_pushcclosure(L, view_next, 2);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

static int view_len(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)lua_rawlen(L, lua_upvalueindex(1)));
  return 1;
}

/* [-0, +1, m] the read-only view of the table at idx (one per table, cached). */
static void push_view(lua_State *L, int idx, const char *name) {
  static const struct { const char *ev; lua_CFunction fn; } mms[] = {
    {"__index", view_index}, {"__newindex", refuse_write}, {"__pairs", view_pairs},
    {"__len", view_len}};
  size_t i;
  idx = lua_absindex(L, idx);
  push_table(L, &views_key, 1);
  lua_pushvalue(L, idx);
  if (lua_rawget(L, -2) == LUA_TTABLE) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 5);
  for (i = 0; i < sizeof mms / sizeof mms[0]; i++) {
    lua_pushvalue(L, idx);
    lua_pushstring(L, name);
    lua_pushcclosure(L, mms[i].fn, 2);
    lua_setfield(L, -2, mms[i].ev);
  }
  lua_pushliteral(L, "read-only view");
  lua_setfield(L, -2, "__metatable"); /* getmetatable cannot reach the target */
  lua_setmetatable(L, -2);
  lua_pushvalue(L, idx);
  lua_pushvalue(L, -2);
  lua_rawset(L, -4); /* views[target] = view */
  push_table(L, &targets_key, 1);
  lua_pushvalue(L, -2);
  lua_pushvalue(L, idx);
  lua_rawset(L, -3); /* targets[view] = target */
  lua_pop(L, 1);
  lua_remove(L, -2);
}

static int is_view(lua_State *L, int idx) {
  int r;
  idx = lua_absindex(L, idx);
  push_table(L, &targets_key, 1);
  lua_pushvalue(L, idx);
  r = lua_rawget(L, -2) != LUA_TNIL;
  lua_pop(L, 2);
  return r;
}

/* {===== guards =====} */

/* Continuation of a wrapper whose original yielded (xpcall around an await, say): the
** wrapper returns whatever the original returned. */
static int pass_results(lua_State *L, int status, lua_KContext ctx) {
  (void)status;
  (void)ctx;
  return lua_gettop(L);
}

/* upvalues: original function, message, state, date-mode flag */
static int guarded(lua_State *L) {
  dxl_state_t *S = state_of(L, 3);
  int date_mode = lua_toboolean(L, lua_upvalueindex(4));
  /* os.date is deterministic only for an explicit time in UTC ("!..." formats). */
  if (S->in_orchestration && !(date_mode && !lua_isnoneornil(L, 2) &&
                               lua_type(L, 1) == LUA_TSTRING && lua_tostring(L, 1)[0] == '!'))
    return luaL_error(L, "%s", lua_tostring(L, lua_upvalueindex(2)));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, pass_results);
  return lua_gettop(L);
}

/* [-1, +1, m] replace the function on top by its guard. */
static void push_guard(lua_State *L, dxl_state_t *S, const char *msg, int date_mode) {
  lua_pushstring(L, msg);
  lua_pushlightuserdata(L, S);
  lua_pushboolean(L, date_mode);
  lua_pushcclosure(L, guarded, 4);
}

static void guard(lua_State *L, dxl_state_t *S, const char *lib, const char *fn,
                  const char *instead) {
  char msg[256];
  if (lua_getglobal(L, lib) != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  if (lua_getfield(L, -1, fn) != LUA_TFUNCTION) {
    lua_pop(L, 2);
    return;
  }
  snprintf(msg, sizeof msg, "%s.%s is not available in orchestrations (it is not "
           "deterministic on replay); %s", lib, fn, instead);
  push_guard(L, S, msg, strcmp(lib, "os") == 0 && strcmp(fn, "date") == 0);
  lua_setfield(L, -2, fn);
  lua_pop(L, 1);
}

void dxl_guard_functions(lua_State *L, dxl_state_t *S, int idx, const char *const *names,
                         const char *prefix, const char *instead) {
  idx = lua_absindex(L, idx);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    if (lua_type(L, -2) == LUA_TSTRING && lua_iscfunction(L, -1) &&
        lua_tocfunction(L, -1) != guarded && /* tables shared by several metatables */
        (!names || in_list(names, lua_tostring(L, -2)))) {
      lua_pushvalue(L, -2);
      lua_insert(L, -2); /* key, key, function */
      lua_pushfstring(L, "%s%s is not available in orchestrations; %s", prefix,
                      lua_tostring(L, -2), instead);
      lua_pushlightuserdata(L, S);
      lua_pushboolean(L, 0);
      lua_pushcclosure(L, guarded, 4);
      lua_rawset(L, idx); /* replacing an existing key keeps lua_next valid */
    } else {
      lua_pop(L, 1);
    }
  }
}

/* coroutine.running, as the base library's (upvalue: the state); when it returns an activity's
** coroutine, that activity's code may keep it: activity.c then does not reuse it. */
static int co_running(lua_State *L) {
  int ismain = lua_pushthread(L);
  if (!ismain) dxl_activity_thread_seen(state_of(L, 1), L);
  lua_pushboolean(L, ismain);
  return 2;
}

/* {===== guarded base functions =====} */

/* Each runs `before` inside orchestrations (it may raise or adjust the arguments), then the
** original, then `after` on its results. upvalues: original, state, index in base_fns. */
typedef void (*policy_fn)(lua_State *L, dxl_state_t *S);

static void load_before(lua_State *L, dxl_state_t *S) {
  int has_env = lua_gettop(L) >= 4;
  if (!lua_isnoneornil(L, 3) && strchr(luaL_checkstring(L, 3), 'b'))
    luaL_error(L, "binary chunks are not available in orchestrations: load source text");
  lua_settop(L, has_env ? lua_gettop(L) : 4);
  lua_pushliteral(L, "t"); /* a binary string is then refused by load itself */
  lua_replace(L, 3);
  if (!has_env && S->orch_env_ref != LUA_NOREF) {
    /* without an explicit env, the chunk sees this instance's globals */
    lua_rawgeti(L, LUA_REGISTRYINDEX, S->orch_env_ref);
    lua_replace(L, 4);
  } else if (!has_env) {
    lua_settop(L, 3);
  }
}

/* upvalue: the handler. A message handler runs while the hook that raised the budget error
** is still active (hooks off): once the budget is out, the error passes through unhandled. */
static int handler_guard(lua_State *L) {
  if (dxl_budget_exhausted()) return 1;
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 1);
  return 1;
}

static void xpcall_before(lua_State *L, dxl_state_t *S) {
  (void)S;
  luaL_checkany(L, 2);
  lua_pushvalue(L, 2);
  lua_pushcclosure(L, handler_guard, 1);
  lua_replace(L, 2);
}

static void collect_before(lua_State *L, dxl_state_t *S) {
  const char *opt = luaL_optstring(L, 1, "collect");
  (void)S;
  if (strcmp(opt, "count") != 0 && strcmp(opt, "isrunning") != 0)
    luaL_error(L, "collectgarbage(\"%s\") is not available in orchestrations: the collector "
               "is shared by every instance (only \"count\" and \"isrunning\" are)", opt);
}

/* rawset and setmetatable take tables: a ctx or a future (a userdata, read-only) is refused
** naming it, not as "bad argument #1 to '?'". */
static void refuse_read_only_object(lua_State *L, const char *fn) {
  int t;
  if (lua_type(L, 1) != LUA_TUSERDATA || (t = luaL_getmetafield(L, 1, "__name")) == LUA_TNIL)
    return;
  if (t == LUA_TSTRING)
    luaL_error(L, "%s: a %s is read-only (it is not a table)", fn, lua_tostring(L, -1));
  lua_pop(L, 1);
}

static void setmetatable_before(lua_State *L, dxl_state_t *S) {
  (void)S;
  refuse_read_only_object(L, "setmetatable");
  if (lua_type(L, 2) == LUA_TTABLE) {
    lua_pushliteral(L, "__gc");
    if (lua_rawget(L, 2) != LUA_TNIL)
      luaL_error(L, "finalizers (__gc) are not available in orchestrations: they would run "
                 "outside the turn, its budget and its sandbox");
    lua_pop(L, 1);
  }
}

static void rawset_before(lua_State *L, dxl_state_t *S) {
  (void)S;
  refuse_read_only_object(L, "rawset");
  if (lua_type(L, 1) == LUA_TTABLE && is_view(L, 1))
    luaL_error(L, "rawset on a read-only view: standard libraries and engine metatables are "
               "shared by every instance");
}

/* A metatable shared beyond this instance: of a non-table value (strings, userdata: ctx and
** futures too), or one registered under its __name (luaL_newmetatable). */
static int shared_metatable(lua_State *L, int obj, int mt) {
  int r;
  if (lua_type(L, obj) != LUA_TTABLE) return 1;
  lua_pushliteral(L, "__name");
  if (lua_rawget(L, mt) != LUA_TSTRING) {
    lua_pop(L, 1);
    return 0;
  }
  lua_rawget(L, LUA_REGISTRYINDEX);
  r = lua_rawequal(L, -1, mt);
  lua_pop(L, 1);
  return r;
}

static void getmetatable_after(lua_State *L, dxl_state_t *S) {
  (void)S;
  if (lua_type(L, -1) == LUA_TTABLE && shared_metatable(L, 1, lua_gettop(L))) {
    push_view(L, -1, "this metatable");
    lua_replace(L, -2);
  }
}

static const struct {
  const char *lib, *name; /* lib NULL: a global, kept in registry[base_key] */
  policy_fn before, after;
  const char *instead; /* non-NULL: refused outright */
} base_fns[] = {
  {NULL, "load", load_before, NULL, NULL},
  {NULL, "xpcall", xpcall_before, NULL, NULL},
  {NULL, "collectgarbage", collect_before, NULL, NULL},
  {NULL, "setmetatable", setmetatable_before, NULL, NULL},
  {NULL, "rawset", rawset_before, NULL, NULL},
  {NULL, "getmetatable", NULL, getmetatable_after, NULL},
  {"debug", "getmetatable", NULL, getmetatable_after, NULL},
  {NULL, "dofile", NULL, NULL, "require modules at load time, outside the orchestration"},
  {NULL, "loadfile", NULL, NULL, "require modules at load time, outside the orchestration"},
  {NULL, "require", NULL, NULL, "require modules at load time, outside the orchestration"},
};

static int base_guarded(lua_State *L) {
  dxl_state_t *S = state_of(L, 2);
  int i = (int)lua_tointeger(L, lua_upvalueindex(3));
  int orch = S->in_orchestration > 0, keep = 0;
  if (orch && base_fns[i].before) base_fns[i].before(L, S);
  if (orch && base_fns[i].after) { /* the after-policy sees the first argument at index 1 */
    lua_settop(L, lua_gettop(L) < 1 ? 1 : lua_gettop(L));
    lua_pushvalue(L, 1);
    lua_insert(L, 1);
    keep = 1;
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, keep + 1);
  if (!keep) { /* the original may yield (xpcall around an await) */
    lua_callk(L, lua_gettop(L) - 1, LUA_MULTRET, 0, pass_results);
    return lua_gettop(L);
  }
  lua_call(L, lua_gettop(L) - keep - 1, LUA_MULTRET); /* getmetatable: never yields */
  {
    if (lua_gettop(L) > 1) base_fns[i].after(L, S);
    lua_remove(L, 1);
  }
  return lua_gettop(L);
}

/* Build registry[base_key] once from the current originals; then (every call) put the guards
** into _G. */
static void install_base(lua_State *L, dxl_state_t *S) {
  size_t i;
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &base_key) != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_newtable(L);
    for (i = 0; i < sizeof base_fns / sizeof base_fns[0]; i++) {
      if (base_fns[i].lib) { /* guarded in place: library tables are not restored */
        if (lua_getglobal(L, base_fns[i].lib) != LUA_TTABLE) {
          lua_pop(L, 1);
          continue;
        }
      } else {
        lua_pushglobaltable(L);
      }
      if (lua_getfield(L, -1, base_fns[i].name) != LUA_TFUNCTION) {
        lua_pop(L, 2);
        continue;
      }
      if (!base_fns[i].lib) lua_remove(L, -2);
      if (base_fns[i].instead) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s is not available in orchestrations (it is not "
                 "deterministic on replay); %s", base_fns[i].name, base_fns[i].instead);
        push_guard(L, S, msg, 0);
      } else {
        lua_pushlightuserdata(L, S);
        lua_pushinteger(L, (lua_Integer)i);
        lua_pushcclosure(L, base_guarded, 3);
      }
      lua_setfield(L, -2, base_fns[i].name); /* into the library, or into registry[base_key] */
      if (base_fns[i].lib) lua_pop(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_rawsetp(L, LUA_REGISTRYINDEX, &base_key);
  }
  lua_pushglobaltable(L);
  lua_pushnil(L);
  while (lua_next(L, -3)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, -4);
  }
  lua_pop(L, 2);
}

static void install_globals_mt(lua_State *L, dxl_state_t *S);

/* {===== read-only libraries =====} */

/* upvalues: contents, name, state */
static int lib_newindex(lua_State *L) {
  if (state_of(L, 3)->in_orchestration) return refuse_write(L);
  lua_settop(L, 3);
  lua_rawset(L, lua_upvalueindex(1));
  return 0;
}

/* upvalue: contents; (lib, key) -> key, value. The contents never reach Lua code. */
static int lib_next(lua_State *L) {
  lua_settop(L, 2);
  return lua_next(L, lua_upvalueindex(1)) ? 2 : 0;
}

/* upvalue: contents; pairs(lib) iterates them */
static int lib_pairs(lua_State *L) {
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_pushcclosure(L, lib_next, 1);
  lua_pushvalue(L, 1);
  lua_pushnil(L);
  return 3;
}

/* Move the library's contents behind __index; writes go there except in orchestrations. */
static void make_read_only(lua_State *L, dxl_state_t *S, const char *name) {
  int lib;
  if (lua_getglobal(L, name) != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  if (lua_getmetatable(L, -1)) { /* done already, or not a plain library */
    lua_pop(L, 2);
    return;
  }
  lib = lua_gettop(L);
  lua_newtable(L); /* contents */
  lua_pushnil(L);
  while (lua_next(L, lib)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, lib + 1);
  }
  lua_pushnil(L);
  while (lua_next(L, lib + 1)) {
    lua_pop(L, 1);
    lua_pushvalue(L, -1);
    lua_pushnil(L);
    lua_rawset(L, lib); /* clearing existing fields keeps lua_next valid */
  }
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, lib + 1);
  lua_setfield(L, -2, "__index");
  lua_pushvalue(L, lib + 1);
  lua_pushstring(L, name);
  lua_pushlightuserdata(L, S);
  lua_pushcclosure(L, lib_newindex, 3);
  lua_setfield(L, -2, "__newindex");
  lua_pushvalue(L, lib + 1);
  lua_pushcclosure(L, lib_pairs, 1);
  lua_setfield(L, -2, "__pairs");
  lua_pushliteral(L, "read-only library");
  lua_setfield(L, -2, "__metatable"); /* the contents stay private */
  lua_setmetatable(L, lib);
  push_table(L, &targets_key, 1); /* rawset on it is refused like on a view */
  lua_pushvalue(L, lib);
  lua_pushvalue(L, lib + 1);
  lua_rawset(L, -3);
  lua_settop(L, lib - 1);
}

void dxl_install_sandbox(lua_State *L, dxl_state_t *S) {
  static const char *io_fns[] = {"open", "read", "write", "lines", "popen", "input", "output",
                                 "close", "tmpfile", NULL};
  /* The debug library can remove the instruction-budget hook, reach the unguarded originals
  ** through upvalues, or change shared metatables. */
  static const char *debug_fns[] = {"sethook", "gethook", "getupvalue", "setupvalue",
                                    "upvalueid", "upvaluejoin", "getregistry", "getlocal",
                                    "setlocal", "setuservalue", "getuservalue",
                                    "setcstacklimit", "setmetatable", NULL};
  const char *io_msg = "do I/O in an activity";
  int i;
  install_base(L, S);
  install_globals_mt(L, S);
  lua_getglobal(L, "os");
  lua_getfield(L, -1, "__duroxide_guarded");
  i = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (i || !lua_istable(L, -1)) { /* already done (module re-opened) */
    lua_pop(L, 1);
    return;
  }
  lua_pushboolean(L, 1);
  lua_setfield(L, -2, "__duroxide_guarded");
  lua_pop(L, 1);
  guard(L, S, "os", "time", "use ctx:utc_now()");
  guard(L, S, "os", "clock", "use ctx:utc_now()");
  guard(L, S, "os", "date", "use os.date(\"!\" .. format, ctx:utc_now() // 1000)");
  guard(L, S, "os", "setlocale", "set the locale outside the orchestration");
  guard(L, S, "os", "getenv", "read configuration in an activity or pass it as input");
  guard(L, S, "os", "execute", io_msg);
  guard(L, S, "os", "remove", io_msg);
  guard(L, S, "os", "rename", io_msg);
  guard(L, S, "os", "tmpname", io_msg);
  guard(L, S, "os", "exit", "return from the orchestration or raise an error");
  guard(L, S, "math", "random", "use ctx:random()");
  guard(L, S, "math", "randomseed", "use ctx:random()");
  for (i = 0; io_fns[i]; i++) guard(L, S, "io", io_fns[i], io_msg);
  for (i = 0; debug_fns[i]; i++)
    guard(L, S, "debug", debug_fns[i], "the debug library is not available in orchestrations");
  /* methods of open files (io.stdout:write) */
  if (luaL_getmetatable(L, LUA_FILEHANDLE) == LUA_TTABLE &&
      lua_getfield(L, -1, "__index") == LUA_TTABLE) {
    dxl_guard_functions(L, S, -1, NULL, "file:", io_msg);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  if (lua_getglobal(L, "coroutine") == LUA_TTABLE) {
    lua_pushlightuserdata(L, S);
    lua_pushcclosure(L, co_running, 1);
    lua_setfield(L, -2, "running");
  }
  lua_pop(L, 1);
  dxl_charged_install(L, S);
  for (i = 0; std_libs[i]; i++) make_read_only(L, S, std_libs[i]);
}

/* {===== per-instance globals =====} */

/* _G's metamethods (when the app's globals are _G): a global created while an orchestration
** runs -- by a helper function defined outside it, say -- goes to that instance's globals,
** and a global missing from _G is looked up there, so such helpers see per-instance globals
** too. Raw accesses only: the instance table falls back to _G itself. upvalue: state */
static int globals_index(lua_State *L) {
  dxl_state_t *S = state_of(L, 1);
  if (S->orch_env_ref == LUA_NOREF) return 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->orch_env_ref);
  lua_pushvalue(L, 2);
  lua_rawget(L, -2);
  return 1;
}

static int globals_newindex(lua_State *L) {
  dxl_state_t *S = state_of(L, 1);
  lua_settop(L, 3);
  if (S->orch_env_ref != LUA_NOREF) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, S->orch_env_ref);
    lua_replace(L, 1);
  }
  lua_rawset(L, 1);
  return 0;
}

static void install_globals_mt(lua_State *L, dxl_state_t *S) {
  lua_pushglobaltable(L);
  if (lua_getmetatable(L, -1)) { /* the app's own (strict mode...): left alone */
    lua_pop(L, 2);
    return;
  }
  lua_createtable(L, 0, 2);
  lua_pushlightuserdata(L, S);
  lua_pushcclosure(L, globals_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushlightuserdata(L, S);
  lua_pushcclosure(L, globals_newindex, 1);
  lua_setfield(L, -2, "__newindex");
  lua_setmetatable(L, -2);
  lua_pop(L, 1);
}

/* luv's handle methods (timer:start, tcp:write...): handles made at load time stay
** unusable from orchestrations. */
void dxl_guard_luv_handles(lua_State *L, dxl_state_t *S) {
  int top = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, LUA_REGISTRYINDEX)) {
    if (lua_type(L, -2) == LUA_TSTRING && strncmp(lua_tostring(L, -2), "uv_", 3) == 0 &&
        lua_istable(L, -1)) {
      if (lua_getfield(L, -1, "__index") == LUA_TTABLE)
        dxl_guard_functions(L, S, -1, NULL, "luv handle method ",
                            "use ctx:schedule_timer for time and activities for I/O");
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  lua_settop(L, top);
}

/* upvalue: the environment. Globals not in the snapshot; hidden ones stay hidden. */
static int env_fallback(lua_State *L) {
  const char *k = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (in_list(hidden, k)) return 0;
  lua_settop(L, 2);
  lua_pushvalue(L, 2);
  lua_gettable(L, lua_upvalueindex(1));
  return 1;
}

/* [-0, +1, e] the metatable shared by the instance globals of environment E at idx: its
** __index is a snapshot of E (with the guarded base functions). */
static void push_shared_mt(lua_State *L, int env) {
  int snap;
  env = lua_absindex(L, env);
  push_table(L, &shared_key, 1);
  lua_pushvalue(L, env);
  if (lua_rawget(L, -2) == LUA_TTABLE) {
    lua_remove(L, -2);
    return;
  }
  lua_pop(L, 1);
  lua_newtable(L);
  snap = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, env)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    if (k && in_list(hidden, k)) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, snap);
  }
  lua_rawgetp(L, LUA_REGISTRYINDEX, &base_key); /* guarded even if E holds the originals */
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    lua_pushvalue(L, -2);
    lua_insert(L, -2);
    lua_rawset(L, snap);
  }
  lua_pop(L, 1);
  lua_createtable(L, 0, 1);
  lua_pushvalue(L, env);
  lua_pushcclosure(L, env_fallback, 1);
  lua_setfield(L, -2, "__index");
  lua_setmetatable(L, snap);
  lua_createtable(L, 0, 2); /* the shared metatable */
  lua_insert(L, -2);
  lua_setfield(L, -2, "__index");
  lua_pushliteral(L, "orchestration globals");
  lua_setfield(L, -2, "__metatable"); /* hides the shared snapshot */
  lua_pushvalue(L, env);
  lua_pushvalue(L, -2);
  lua_rawset(L, -4);
  lua_remove(L, -2);
}

void dxl_sandbox_adopt(lua_State *L, int fidx) {
  const char *name;
  int i, found = 0;
  fidx = lua_absindex(L, fidx);
  if (lua_iscfunction(L, fidx)) return;
  push_table(L, &info_key, 1);
  lua_pushvalue(L, fidx);
  if (lua_rawget(L, -2) != LUA_TNIL) { /* already adopted (registered twice) */
    lua_pop(L, 2);
    return;
  }
  lua_pop(L, 1);
  for (i = 1; (name = lua_getupvalue(L, fidx, i)) != NULL; i++) {
    if (strcmp(name, "_ENV") == 0 && lua_istable(L, -1)) {
      found = 1;
      break;
    }
    lua_pop(L, 1);
  }
  if (!found) { /* reads no globals */
    lua_pop(L, 1);
    return;
  }
  /* stack: info, E. The carrier is a closure whose one upvalue becomes f's _ENV cell. */
  if (luaL_loadstring(L, "local e; return function() return e end") != LUA_OK)
    lua_error(L);
  lua_call(L, 0, 1);
  lua_pushvalue(L, -2);
  lua_setupvalue(L, -2, 1);
  lua_upvaluejoin(L, fidx, i, -1, 1);
  lua_createtable(L, 2, 0);
  lua_insert(L, -2);
  lua_rawseti(L, -2, INFO_CARRIER);
  lua_insert(L, -2);
  lua_rawseti(L, -2, INFO_ENV);
  lua_pushvalue(L, fidx);
  lua_insert(L, -2);
  lua_rawset(L, -3);
  lua_pop(L, 1);
}

void dxl_sandbox_new_env(lua_State *L, int fidx, int *info_ref, int *env_ref) {
  fidx = lua_absindex(L, fidx);
  *info_ref = *env_ref = LUA_NOREF;
  push_table(L, &info_key, 1);
  lua_pushvalue(L, fidx);
  if (lua_rawget(L, -2) != LUA_TTABLE) {
    lua_pop(L, 2);
    return;
  }
  lua_createtable(L, 0, 1); /* the instance's globals: _G is itself */
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "_G");
  lua_rawgeti(L, -2, INFO_ENV);
  push_shared_mt(L, -1);
  lua_setmetatable(L, -3);
  lua_pop(L, 1);
  *env_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  *info_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 1);
}

static void bind_carrier(lua_State *L, int info_ref, int value_ref) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, info_ref);
  lua_rawgeti(L, -1, INFO_CARRIER);
  if (value_ref != LUA_NOREF) lua_rawgeti(L, LUA_REGISTRYINDEX, value_ref);
  else lua_rawgeti(L, -2, INFO_ENV);
  lua_setupvalue(L, -2, 1);
  lua_pop(L, 2);
}

void dxl_sandbox_enter(lua_State *L, dxl_state_t *S, int info_ref, int env_ref) {
  S->orch_env_ref = env_ref;
  if (info_ref != LUA_NOREF && lua_checkstack(L, 4)) bind_carrier(L, info_ref, env_ref);
}

void dxl_sandbox_leave(lua_State *L, dxl_state_t *S, int info_ref) {
  S->orch_env_ref = LUA_NOREF;
  if (info_ref != LUA_NOREF && lua_checkstack(L, 4)) bind_carrier(L, info_ref, LUA_NOREF);
}
