/*
** module.c -- luaopen_duroxide: registrations, configuration, values, errors.
** (What orchestration code may reach is in sandbox.c; budgets in budget.c.)
*/
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "dxlua.h"
#include "log.h"
#include "util.h"
#include "value.h"
#include "watchdog.h"

const char dxl_state_key = 0;

int luaopen_duroxide_runtime_mt(lua_State *L);

/* {===== state =====} */

static int state_gc(lua_State *L) {
  dxl_state_t *S = lua_touserdata(L, 1);
  dxl_cancel_timers(S); /* the Lua state is going away: no timer may call into it */
  dxl_activity_state_close(S);
  dxl_budget_uninstall(L, S);
  free(S->worker_node_id);
  free(S->store_dir);
  S->worker_node_id = S->store_dir = NULL;
  dxl_caps_free(S);
  return 0;
}

dxl_state_t *dxl_state(lua_State *L) {
  dxl_state_t *S;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &dxl_state_key);
  S = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!S) luaL_error(L, "duroxide is not loaded in this Lua state");
  return S;
}

/* [-0, +1, e] the registry table field `name` ({orchestrations=, activities=, hooks=}). */
static void push_reg(lua_State *L, dxl_state_t *S, const char *name) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->reg_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}

int dxl_push_registered(lua_State *L, dxl_state_t *S, const char *table, const char *name) {
  push_reg(L, S, table);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
  return lua_type(L, -1);
}

void dxl_push_kept(lua_State *L, int *ref, const char *mt_name) {
  if (*ref > 0) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, *ref);
    return;
  }
  if (mt_name) luaL_newmetatable(L, mt_name);
  else lua_newtable(L);
  lua_pushvalue(L, -1);
  *ref = luaL_ref(L, LUA_REGISTRYINDEX);
}

/* {===== errors =====} */

static int error_tostring(lua_State *L) {
  lua_getfield(L, 1, "message");
  if (!lua_isstring(L, -1)) lua_pushliteral(L, "error");
  return 1;
}

void dxl_push_error(lua_State *L, const char *message, const char *category, const char *kind) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, message ? message : "error");
  lua_setfield(L, -2, "message");
  lua_pushstring(L, category ? category : "application");
  lua_setfield(L, -2, "category");
  if (kind) {
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
  }
  if (luaL_newmetatable(L, "duroxide.Error")) {
    lua_pushcfunction(L, error_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_setmetatable(L, -2);
}

/* [-1, +1, e] tostring of the value on top, for tostring_protected. */
static int tostring_impl(lua_State *L) {
  luaL_tolstring(L, 1, NULL);
  return 1;
}

/* __tostring of an error object may raise, loop or allocate without end, and the object may
** sit on a dead coroutine: convert it with a protected call on the main thread, under a small
** budget of its own. [-0, +0, -] */
static void tostring_protected(lua_State *L, int idx, char *buf, size_t len) {
  lua_State *M;
  dxl_state_t *S;
  dxl_budget_t b;
  lua_Hook hook;
  int mask, count, rc, armed;
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  M = lua_tothread(L, -1);
  lua_pop(L, 1);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &dxl_state_key);
  S = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (!M || !S || !lua_checkstack(M, 4)) {
    snprintf(buf, len, "error object is a %s value", luaL_typename(L, idx));
    return;
  }
  memset(&b, 0, sizeof b);
  b.limit = DXL_TOSTRING_INSTRUCTIONS;
  hook = lua_gethook(M);
  mask = lua_gethookmask(M);
  count = lua_gethookcount(M);
  lua_pushcfunction(M, tostring_impl);
  lua_pushvalue(L, idx);
  if (L != M) lua_xmove(L, M, 1);
  /* inside a turn, the turn's time limit applies afresh (it is not yieldable: the hook raises) */
  b.time_limit_ms = dxl_budget_time_limit();
  b.top = M;
  dxl_budget_enter(S, &b);
  dxl_budget_start_memory(S, &b, DXL_TOSTRING_MEMORY);
  dxl_budget_watch(M);
  armed = dx__watch_arm(S->loop, b.time_limit_ms, dxl_budget_alarm, &b);
  rc = lua_pcall(M, 1, 1, 0);
  if (armed) dx__watch_disarm(S->loop); /* before M's hook is restored */
  lua_sethook(M, hook, mask, count);
  dxl_budget_leave(&b);
  if (rc == LUA_OK && lua_type(M, -1) == LUA_TSTRING)
    snprintf(buf, len, "%s", lua_tostring(M, -1));
  else
    snprintf(buf, len, "error object is a %s value (its __tostring %s)", luaL_typename(L, idx),
             atomic_load(&b.timed_out) ? "ran longer than the turn time limit"
             : b.hit ? "ran out of its instruction budget"
             : b.mem_refused ? "ran out of memory" : "failed");
  lua_pop(M, 1);
}

/* Only raw accesses here: never runs __index. */
const char *dxl_error_message(lua_State *L, int idx, char *buf, size_t len) {
  int t;
  idx = lua_absindex(L, idx);
  t = lua_type(L, idx);
  if (t == LUA_TSTRING) {
    snprintf(buf, len, "%s", lua_tostring(L, idx));
    return buf;
  }
  if (t == LUA_TTABLE) {
    lua_pushliteral(L, "message");
    if (lua_rawget(L, idx) == LUA_TSTRING) {
      snprintf(buf, len, "%s", lua_tostring(L, -1));
      lua_pop(L, 1);
      return buf;
    }
    lua_pop(L, 1);
  }
  if ((t == LUA_TTABLE || t == LUA_TUSERDATA) &&
      luaL_getmetafield(L, idx, "__tostring") != LUA_TNIL) {
    lua_pop(L, 1);
    tostring_protected(L, idx, buf, len);
  } else {
    snprintf(buf, len, "error object is a %s value", luaL_typename(L, idx));
  }
  return buf;
}

static int msghandler(lua_State *L) {
  char buf[2048];
  dxl_error_message(L, 1, buf, sizeof buf);
  luaL_traceback(L, L, buf, 1);
  return 1;
}

int dxl_pcall(lua_State *L, int nargs, int nres, char *errbuf, size_t errlen, int with_tb) {
  int base = lua_gettop(L) - nargs, rc;
  if (with_tb) {
    lua_pushcfunction(L, msghandler);
    lua_insert(L, base);
  }
  rc = lua_pcall(L, nargs, nres, with_tb ? base : 0);
  if (with_tb) lua_remove(L, base);
  if (rc != LUA_OK) {
    if (rc == LUA_ERRMEM) snprintf(errbuf, errlen, "out of memory");
    else dxl_error_message(L, -1, errbuf, errlen);
    lua_pop(L, 1);
  }
  return rc;
}

/* {===== registration =====} */

static int parse_semver(const char *s, int v[3]) { return dx__semver_parse(s, v); }

static int semver_less(const char *a, const char *b) {
  int x[3], y[3], i;
  parse_semver(a, x);
  parse_semver(b, y);
  for (i = 0; i < 3; i++)
    if (x[i] != y[i]) return x[i] < y[i];
  return 0;
}

const char *dxl_check_text(lua_State *L, int idx, const char *what, int optional) {
  size_t n;
  const char *s;
  if (optional && lua_isnoneornil(L, idx)) return NULL;
  if (lua_type(L, idx) != LUA_TSTRING && lua_type(L, idx) != LUA_TNUMBER)
    luaL_error(L, "%s must be a string, got %s", what, luaL_typename(L, idx));
  s = lua_tolstring(L, idx, &n);
  if (memchr(s, '\0', n)) luaL_error(L, "%s must not contain a NUL byte", what);
  return s;
}

static void check_reg_name(lua_State *L, const char *what) {
  char label[64];
  snprintf(label, sizeof label, "%s name", what);
  if (lua_rawlen(L, 1) == 0 || lua_rawlen(L, 1) > DX_MAX_NAME_BYTES ||
      lua_type(L, 1) != LUA_TSTRING)
    luaL_argerror(L, 1, lua_pushfstring(L, "%s must be 1 to %d bytes", label,
                                        DX_MAX_NAME_BYTES));
  dxl_check_text(L, 1, label, 0);
  luaL_checktype(L, 2, LUA_TFUNCTION);
}

/* Registration and configuration change what every instance runs: never from orchestration
** code (guarded in luaopen_duroxide). */
static const char *const load_time_fns[] = {"activity", "orchestration", "on_session_released",
                                            "on_session_claimed", "session_handler",
                                            "configure", "client", "runtime", "version_policy",
                                            NULL};

static int l_activity(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  check_reg_name(L, "activity");
  dxl_activity_fn_forget(L, S);
  push_reg(L, S, "activities");
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_rawset(L, -3);
  return 0;
}

/* orchestrations[name] = { versions = {[v] = fn}, latest = v } */
static int l_orchestration(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  const char *version = "1.0.0";
  int v[3];
  check_reg_name(L, "orchestration");
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    if (lua_getfield(L, 3, "version") != LUA_TNIL) version = dxl_check_text(L, -1, "version", 0);
    lua_pop(L, 1);
    if (!parse_semver(version, v))
      return luaL_argerror(L, 3, "opts.version must look like \"1.2.3\"");
  }
  push_reg(L, S, "orchestrations");
  if (lua_getfield(L, -1, lua_tostring(L, 1)) == LUA_TNIL) {
    lua_pop(L, 1);
    lua_createtable(L, 0, 2);
    lua_newtable(L);
    lua_setfield(L, -2, "versions");
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, lua_tostring(L, 1));
  }
  lua_getfield(L, -1, "versions");
  lua_pushstring(L, version);
  lua_pushvalue(L, 2);
  lua_rawset(L, -3);
  dxl_sandbox_adopt(L, 2);
  lua_pop(L, 1);
  lua_getfield(L, -1, "latest");
  if (lua_isnil(L, -1) || semver_less(lua_tostring(L, -1), version)) {
    lua_pushstring(L, version);
    lua_setfield(L, -3, "latest");
  }
  S->reg_gen++; /* kept instances check their code again (orch.c h_orch_turn) */
  dxl_caps_rebuild(L, S);
  return 0;
}

/* duroxide.version_policy(name, "latest" | "exact:X.Y.Z"): the version a start or a
** continue-as-new that names none runs. orchestrations[name].policy = nil (latest) | "X.Y.Z". */
static int l_version_policy(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  const char *name = dxl_check_text(L, 1, "orchestration name", 0);
  const char *policy = dxl_check_text(L, 2, "version policy", 0);
  int v[3];
  push_reg(L, S, "orchestrations");
  if (lua_getfield(L, -1, name) != LUA_TTABLE)
    return luaL_error(L, "version_policy: orchestration '%s' is not registered (register it "
                      "first)", name);
  if (strcmp(policy, "latest") == 0) {
    lua_pushnil(L);
  } else if (strncmp(policy, "exact:", 6) == 0 && parse_semver(policy + 6, v)) {
    lua_getfield(L, -1, "versions");
    if (lua_getfield(L, -1, policy + 6) != LUA_TFUNCTION)
      return luaL_error(L, "version_policy: orchestration '%s' has no version %s registered",
                        name, policy + 6);
    lua_pop(L, 2);
    lua_pushstring(L, policy + 6);
  } else {
    return luaL_error(L, "version_policy: policy must be \"latest\" or \"exact:X.Y.Z\", got "
                      "'%s'", policy);
  }
  lua_setfield(L, -2, "policy");
  return 0;
}

/* duroxide._registry_changed(): the testing harness swapped the registration tables or
** wrapped their activities (the kept activity function is then stale too). */
static int l_registry_changed(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  dxl_activity_fn_forget(L, S);
  S->reg_gen++;
  dxl_caps_rebuild(L, S);
  return 0;
}

static int set_hook(lua_State *L, const char *name) {
  dxl_state_t *S = dxl_state(L);
  luaL_checktype(L, 1, LUA_TFUNCTION);
  push_reg(L, S, "hooks");
  lua_pushvalue(L, 1);
  lua_setfield(L, -2, name);
  return 0;
}
static int l_on_session_released(lua_State *L) { return set_hook(L, "released"); }
static int l_on_session_claimed(lua_State *L) { return set_hook(L, "claimed"); }

/* duroxide.session_handler{ open = fn(sid, how) -> state, close = fn(sid, state, reason) }:
** hooks.session_handler = a private copy { open =, close = } (activity.lua uses it). */
static int l_session_handler(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  int n = 0;
  luaL_argexpected(L, lua_type(L, 1) == LUA_TTABLE, 1, "a table { open =, close = }");
  lua_pushnil(L);
  while (lua_next(L, 1)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
    lua_pop(L, 1);
    if (!k || (strcmp(k, "open") != 0 && strcmp(k, "close") != 0))
      return luaL_error(L, "duroxide.session_handler: unknown field %s (expected open, close)",
                        k ? k : luaL_typename(L, -1));
  }
  lua_createtable(L, 0, 2);
  for (int i = 0; i < 2; i++) {
    const char *k = i == 0 ? "open" : "close";
    int t = lua_getfield(L, 1, k);
    if (t != LUA_TNIL && t != LUA_TFUNCTION)
      return luaL_error(L, "duroxide.session_handler: %s must be a function, got %s", k,
                        luaL_typename(L, -1));
    n += t == LUA_TFUNCTION;
    lua_setfield(L, -2, k);
  }
  if (n == 0) return luaL_error(L, "duroxide.session_handler: give open, close or both");
  push_reg(L, S, "hooks");
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "session_handler");
  S->session_handler_set = 1; /* activity.c looks the handler up only from now on */
  return 0;
}

/* {===== configuration =====} */

/* tags = {"gpu", "default"} (or "gpu,default") at the top of the stack -> opts->tags. The
** joined text is kept alive in the registration table (options borrow their strings). */
static void opts_tags(lua_State *L, dxl_state_t *S, dx_options_t *opts) {
  luaL_Buffer b;
  dx_error_t err;
  lua_Integer i, n;
  int t = lua_gettop(L);
  if (lua_type(L, t) == LUA_TSTRING) {
    lua_pushvalue(L, t);
  } else if (lua_type(L, t) == LUA_TTABLE) {
    n = (lua_Integer)lua_rawlen(L, t);
    if (n == 0) luaL_error(L, "invalid value for option tags: an empty list (name at least "
                           "one tag; \"default\" is untagged work)");
    luaL_buffinit(L, &b);
    for (i = 1; i <= n; i++) {
      if (lua_rawgeti(L, t, i) != LUA_TSTRING)
        luaL_error(L, "invalid value for option tags: element %d is a %s, not a string",
                   (int)i, luaL_typename(L, -1));
      if (strchr(lua_tostring(L, -1), ','))
        luaL_error(L, "invalid value for option tags: tag '%s' contains a comma",
                   lua_tostring(L, -1));
      lua_pop(L, 1);
    }
    for (i = 1; i <= n; i++) {
      if (i > 1) luaL_addchar(&b, ',');
      lua_rawgeti(L, t, i);
      luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
  } else {
    luaL_error(L, "invalid value for option tags: expected a list of tag names, got %s",
               luaL_typename(L, t));
  }
  dxl_check_text(L, -1, "tags", 0);
  if (dx_options_set(opts, "tags", lua_tostring(L, -1), &err) != 0 ||
      dx_options_validate(opts, &err) != 0) {
    lua_pushstring(L, err.msg);
    lua_error(L);
  }
  push_reg(L, S, "tag_texts"); /* [text] = true: the pointer stays valid */
  lua_pushvalue(L, -2);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_settop(L, t);
}

void dxl_options_from_table(lua_State *L, int idx, dxl_state_t *S, dx_options_t *opts) {
  idx = lua_absindex(L, idx);
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    dx_error_t err;
    const char *key, *val;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "option names must be strings");
    key = lua_tostring(L, -2);
    if (strcmp(key, "store") == 0) {
      const char *dir = dxl_check_text(L, -1, "store (a directory path)", 0);
      free(S->store_dir);
      S->store_dir = dx__strdup(dir);
      lua_pop(L, 1);
      continue;
    }
    if (strcmp(key, "store_max_size") == 0) { /* a store option: applied when it is opened */
      const char *v = lua_type(L, -1) == LUA_TNUMBER || lua_type(L, -1) == LUA_TSTRING
                          ? lua_tostring(L, -1) : NULL;
      size_t size = 0;
      if (!v || dx__parse_size(v, &size) != 0 || size < (size_t)1 << 20)
        luaL_error(L, "invalid value for store_max_size: expected a size of at least 1m, such "
                   "as 512m or 2g");
      S->store_max_size = size;
      lua_pop(L, 1);
      continue;
    }
    if (strcmp(key, "tags") == 0) {
      opts_tags(L, S, opts);
      lua_pop(L, 1);
      continue;
    }
    if (lua_type(L, -1) == LUA_TNUMBER) {
      if (lua_isinteger(L, -1)) lua_pushfstring(L, "%I", (LUAI_UACINT)lua_tointeger(L, -1));
      else lua_pushfstring(L, "%f", lua_tonumber(L, -1));
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      dxl_check_text(L, -1, key, 0);
      lua_pushvalue(L, -1);
    } else {
      luaL_error(L, "invalid value for option %s: expected a number or string, got %s", key,
                 luaL_typename(L, -1));
    }
    val = lua_tostring(L, -1);
    if (dx_options_set(opts, key, val, &err) != 0) {
      lua_pushstring(L, err.msg);
      lua_error(L);
    }
    if (opts->worker_node_id == val) {
      free(S->worker_node_id);
      S->worker_node_id = dx__strdup(val);
      opts->worker_node_id = S->worker_node_id;
    }
    lua_pop(L, 2);
  }
}

static int l_configure(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  dx_options_t o = S->opts;
  dx_error_t err;
  /* A running worker's options are final (the command line wins over the app's configure);
  ** changing them underneath it would let the app override the command line after all. */
  if (S->runtime)
    return luaL_error(L, "duroxide.configure: a worker is already running in this state; "
                      "options are fixed when it starts (configure before starting it)");
  dxl_options_from_table(L, 1, S, &o);
  if (dx_options_validate(&o, &err) != 0) return luaL_error(L, "%s", err.msg);
  S->opts = o;
  dx__log_configure(o.log_level, o.log_format);
  return 0;
}

/* {===== values =====} */

static int l_json_encode(lua_State *L) {
  char err[512];
  char *s;
  luaL_checkany(L, 1);
  s = dx__lua_to_json(L, 1, "value", err, sizeof err);
  if (!s) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  lua_pushstring(L, s);
  free(s);
  return 1;
}

static int l_json_decode(lua_State *L) {
  size_t n;
  const char *s = luaL_checklstring(L, 1, &n);
  char err[512];
  if (!dx__lua_push_json(L, s, n, err, sizeof err)) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  return 1;
}

static int l_error(lua_State *L) {
  dxl_push_error(L, luaL_checkstring(L, 1), luaL_optstring(L, 2, "application"),
                 luaL_optstring(L, 3, NULL));
  return 1;
}

/* {===== module =====} */

static int l_wait_placeholder(lua_State *L) {
  return luaL_error(L, "duroxide.wait is only available inside an activity");
}

/* package.preload["duroxide.testing"]: a copy found on package.path wins (a source tree under
** development, .busted's ./lua/?.lua), else the copy embedded at build time. */
static int open_testing(lua_State *L) {
  const char *name = luaL_optstring(L, 1, "duroxide.testing");
  lua_getglobal(L, "package");
  if (lua_istable(L, -1) && lua_getfield(L, -1, "searchpath") == LUA_TFUNCTION) {
    lua_pushstring(L, name);
    lua_getfield(L, -3, "path");
    lua_call(L, 2, 1);
    if (lua_isstring(L, -1)) {
      const char *file = lua_tostring(L, -1);
      if (luaL_loadfile(L, file) != LUA_OK) return lua_error(L);
      lua_pushstring(L, name);
      lua_pushstring(L, file);
      lua_call(L, 2, 1);
      return 1;
    }
  }
  lua_settop(L, 1);
  dxl_load_embedded(L, "duroxide/testing.lua");
  lua_pushstring(L, name);
  lua_pushliteral(L, ":preload:");
  lua_call(L, 2, 1);
  return 1;
}

/* package.preload.luv: luv bound to the runtime loop; its functions refuse orchestrations
** (they would reach the loop, files and processes). */
static int open_luv(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  dxl_open_luv(L);
  dxl_guard_functions(L, S, -1, NULL, "luv.",
                      "use ctx:schedule_timer for time and activities for I/O");
  dxl_guard_luv_handles(L, S);
  return 1;
}

static dxl_state_t *ensure_state(lua_State *L) {
  dxl_state_t *S;
  int prims;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &dxl_state_key);
  S = lua_touserdata(L, -1);
  lua_pop(L, 1);
  if (S) return S;
  S = lua_newuserdatauv(L, sizeof *S, 0);
  memset(S, 0, sizeof *S);
  lua_createtable(L, 0, 1);
  lua_pushcfunction(L, state_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &dxl_state_key);
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  S->L = lua_tothread(L, -1);
  lua_pop(L, 1);
  S->loop = dxl_pick_loop(L);
  S->orch_env_ref = LUA_NOREF;
  dxl_budget_install(L, S);
  dx_options_init(&S->opts);
  lua_createtable(L, 0, 4);
  lua_newtable(L);
  lua_setfield(L, -2, "orchestrations");
  lua_newtable(L);
  lua_setfield(L, -2, "activities");
  lua_newtable(L);
  lua_setfield(L, -2, "hooks");
  lua_newtable(L);
  lua_setfield(L, -2, "tag_texts");
  S->reg_ref = luaL_ref(L, LUA_REGISTRYINDEX);

  /* primitives for the Lua layer */
  lua_newtable(L);
  prims = lua_gettop(L);
  lua_pushcfunction(L, l_error);
  lua_setfield(L, prims, "error");
  dxl_orch_register(L, prims);
  dxl_activity_register(L, prims);
  lua_pushvalue(L, prims);
  S->prims_ref = luaL_ref(L, LUA_REGISTRYINDEX);

  dxl_load_embedded(L, "duroxide/context.lua");
  lua_pushvalue(L, prims);
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "Fields");
  S->context_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pop(L, 1);

  dxl_load_embedded(L, "duroxide/activity.lua");
  lua_pushvalue(L, prims);
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "Actx");
  S->actx_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_getfield(L, -1, "wait");
  lua_setfield(L, prims, "wait");
  lua_getfield(L, -1, "session_run");
  lua_setfield(L, prims, "session_run");
  lua_getfield(L, -1, "session_claimed");
  lua_setfield(L, prims, "session_claimed");
  lua_getfield(L, -1, "session_released");
  lua_setfield(L, prims, "session_released");
  lua_pop(L, 2);

  luaopen_duroxide_runtime_mt(L);

  /* luv, bound to our loop, for activities */
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_getfield(L, -1, "luv");
  if (lua_isnil(L, -1)) {
    lua_pushcfunction(L, open_luv);
    lua_setfield(L, -3, "luv");
  }
  lua_pop(L, 1);
  /* the busted harness, embedded so require("duroxide.testing") works in duroxide-lua too */
  if (lua_getfield(L, -1, "duroxide.testing") == LUA_TNIL) {
    lua_pushcfunction(L, open_testing);
    lua_setfield(L, -3, "duroxide.testing");
  }
  lua_pop(L, 2);
  return S;
}

static const luaL_Reg module_fns[] = {
  {"activity", l_activity},
  {"orchestration", l_orchestration},
  {"on_session_released", l_on_session_released},
  {"on_session_claimed", l_on_session_claimed},
  {"session_handler", l_session_handler},
  {"configure", l_configure},
  {"version_policy", l_version_policy},
  {"_registry_changed", l_registry_changed},
  {"client", dxl_client_new},
  {"runtime", dxl_runtime_new},
  {"array", dx__lua_array},
  {"json_encode", l_json_encode},
  {"json_decode", l_json_decode},
  {"error", l_error},
  {"wait", l_wait_placeholder},
  {NULL, NULL}
};

int luaopen_duroxide(lua_State *L) {
  dxl_state_t *S = ensure_state(L);
  dxl_install_sandbox(L, S);
  luaL_newlib(L, module_fns);
  dxl_guard_functions(L, S, -1, load_time_fns, "duroxide.",
                      "register, configure and open clients at load time (use "
                      "ctx:start_orchestration or ctx:schedule_sub_orchestration to start work)");
  dx__lua_push_null(L);
  lua_setfield(L, -2, "null");
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->prims_ref);
  lua_getfield(L, -1, "wait");
  lua_setfield(L, -3, "wait");
  lua_pop(L, 1);
  lua_pushstring(L, dx_version());
  lua_setfield(L, -2, "version");
  dxl_testing_register(L);
  return 1;
}

/* require("duroxide.testing") before require("duroxide"), with only duroxide.so on
** package.cpath (a build tree, a LuaRocks tree): Lua's all-in-one loader finds duroxide.so
** and calls this. It loads duroxide first (which registers the harness), then the harness. */
int luaopen_duroxide_testing(lua_State *L) {
  const char *name = luaL_optstring(L, 1, "duroxide.testing");
  lua_getglobal(L, "require");
  lua_pushliteral(L, "duroxide");
  lua_call(L, 1, 0);
  lua_settop(L, 0);
  lua_pushstring(L, name);
  return open_testing(L);
}
