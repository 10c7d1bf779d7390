/*
** charged.c -- standard library functions whose C loops the instruction-count hook never
** sees, wrapped so orchestration code cannot hang the worker with one call.
**
** A wrapper replaces a library function (before the library is made read-only, so references
** taken at load time are wrapped too). Inside orchestrations it charges the call's work to the
** turn's budget before (or while) doing it; elsewhere it calls the stock function unchanged.
** pattern.c wraps the pattern functions this way; the functions here charge their length up
** front: table.move(a, f, e) loops e - f + 1 times and string.rep("", n) n times whatever
** memory they use, so neither the hook nor the allocator would ever stop them.
** coroutine.resume and coroutine.wrap are wrapped too, not to charge but to put the resumed
** coroutine on the budget's resume chain, so the turn time limit's alarm arms its hook.
** coroutine.resume and coroutine.close also refuse an orchestration instance's coroutine
** (dxl_orch_foreign_thread): only the engine may run or close it.
*/
#include <string.h>

#include "dxlua.h"

#define REP_COPIES_PER_STEP 64 /* string.rep of empty strings: one step per 64 copies */

/* upvalues of every wrapper: the stock function, the state, stock_error (bound to the stock
** function) */
int dxl_stock_sandboxed(lua_State *L) {
  dxl_state_t *S = lua_touserdata(L, lua_upvalueindex(2));
  return S && S->in_orchestration > 0;
}

/* Message handler of dxl_call_stock (upvalues: the stock function, its "lib.name" or nil). An
** error the stock function raised itself names no place (its caller, the wrapper, is C); add
** the wrapper's caller, as a direct call would, and the function's name where luaL_argerror
** found none ("bad argument #1 to '?'": the library now holds the wrapper). Errors from a
** callback or a metamethod pass unchanged. Levels: 0 this handler, 1 the raiser, 2 the
** wrapper, 3 its caller. */
static int stock_error(lua_State *L) {
  lua_Debug ar;
  int from_stock;
  const char *msg, *q;
  if (lua_type(L, 1) != LUA_TSTRING || !lua_getstack(L, 1, &ar)) return 1;
  lua_getinfo(L, "f", &ar);
  from_stock = lua_rawequal(L, -1, lua_upvalueindex(1));
  lua_pop(L, 1);
  if (!from_stock) return 1;
  msg = lua_tostring(L, 1);
  if (lua_type(L, lua_upvalueindex(2)) == LUA_TSTRING && strncmp(msg, "bad argument #", 14) == 0 &&
      (q = strstr(msg, " to '?'")) != NULL) {
    lua_pushlstring(L, msg, (size_t)(q - msg) + 5);
    lua_pushvalue(L, lua_upvalueindex(2));
    lua_pushstring(L, q + 6);
    lua_concat(L, 3);
    lua_replace(L, 1);
  }
  luaL_where(L, 3);
  lua_insert(L, 1);
  lua_concat(L, 2);
  return 1;
}

int dxl_call_stock_on(lua_State *L, lua_State *co) {
  int n = lua_gettop(L), rc;
  dxl_running_t node;
  lua_pushvalue(L, lua_upvalueindex(3));
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_rotate(L, 1, 2); /* handler, stock, args... */
  if (co) dxl_budget_running_push(&node, co);
  rc = lua_pcall(L, n, LUA_MULTRET, 1);
  if (co) dxl_budget_running_pop(&node);
  if (rc != LUA_OK) return lua_error(L);
  return lua_gettop(L) - 1;
}

int dxl_call_stock(lua_State *L) { return dxl_call_stock_on(L, NULL); }

void dxl_wrap_stock(lua_State *L, dxl_state_t *S, const char *lib, const luaL_Reg *fns) {
  if (lua_getglobal(L, lib) != LUA_TTABLE) {
    lua_pop(L, 1);
    return;
  }
  for (; fns->name; fns++) {
    if (lua_getfield(L, -1, fns->name) != LUA_TFUNCTION) {
      lua_pop(L, 1);
      continue;
    }
    lua_pushlightuserdata(L, S);
    lua_pushvalue(L, -2);
    lua_pushfstring(L, "%s.%s", lib, fns->name);
    lua_pushcclosure(L, stock_error, 2);
    lua_pushcclosure(L, fns->func, 3);
    lua_setfield(L, -2, fns->name);
  }
  lua_pop(L, 1);
}

/* The integer argument at idx, or 0 when it is not one (the stock function then raises). */
static lua_Integer int_arg(lua_State *L, int idx) {
  int ok;
  lua_Integer v = lua_tointegerx(L, idx, &ok);
  return ok ? v : 0;
}

/* table.move(a1, f, e, t [, a2]): e - f + 1 element copies. */
static int charged_move(lua_State *L) {
  if (dxl_stock_sandboxed(L)) {
    lua_Integer f = int_arg(L, 2), e = int_arg(L, 3);
    if (e >= f) {
      lua_Unsigned n = (lua_Unsigned)e - (lua_Unsigned)f + 1u;
      dxl_budget_charge(L, n > (lua_Unsigned)INT64_MAX || n == 0 ? INT64_MAX : (int64_t)n);
    }
  }
  return dxl_call_stock(L);
}

static int empty_string(lua_State *L, int idx) {
  return lua_type(L, idx) == LUA_TSTRING && lua_rawlen(L, idx) == 0;
}

/* string.rep(s, n [, sep]): n copies. Copies of empty strings allocate nothing (the
** allocator charges all other calls). */
static int charged_rep(lua_State *L) {
  if (dxl_stock_sandboxed(L) && empty_string(L, 1) &&
      (lua_isnoneornil(L, 3) || empty_string(L, 3))) {
    lua_Integer n = int_arg(L, 2);
    if (n > 0) dxl_budget_charge(L, (int64_t)(n / REP_COPIES_PER_STEP));
  }
  return dxl_call_stock(L);
}

/* The thread argument of coroutine.resume / coroutine.close (NULL: not a thread; the stock
** function raises), refused when it is another instance's coroutine. [-0, +0, e] */
static lua_State *thread_arg(lua_State *L, const char *fn) {
  lua_State *co = lua_type(L, 1) == LUA_TTHREAD ? lua_tothread(L, 1) : NULL;
  if (co && dxl_orch_foreign_thread(co))
    luaL_error(L, "%s: this thread is an orchestration instance's own coroutine: only the "
               "engine resumes or closes it", fn);
  return co;
}

/* coroutine.resume(co, ...): co runs on the resume chain the turn time limit arms. */
static int tracked_resume(lua_State *L) {
  return dxl_call_stock_on(L, thread_arg(L, "coroutine.resume"));
}

/* coroutine.close(co): closing an instance's suspended coroutine would end it for good. */
static int checked_close(lua_State *L) {
  thread_arg(L, "coroutine.close");
  return dxl_call_stock(L);
}

/* The function coroutine.wrap returned (upvalues: it, S, its error handler, its coroutine). */
static int tracked_wrapped(lua_State *L) {
  return dxl_call_stock_on(L, lua_tothread(L, lua_upvalueindex(4)));
}

/* coroutine.wrap(f): the stock function, called through tracked_wrapped. The stock wrapper
** keeps its coroutine as its only upvalue (lcorolib.c); anything else passes unchanged. */
static int tracked_wrap(lua_State *L) {
  dxl_state_t *S = lua_touserdata(L, lua_upvalueindex(2));
  dxl_call_stock(L);
  if (lua_tocfunction(L, -1) == NULL || lua_getupvalue(L, -1, 1) == NULL) return 1;
  if (lua_type(L, -1) != LUA_TTHREAD) {
    lua_pop(L, 1);
    return 1;
  }
  lua_pushvalue(L, -2);               /* w, co, w */
  lua_pushlightuserdata(L, S);        /* w, co, w, S */
  lua_pushvalue(L, -2);
  lua_pushnil(L);                     /* its errors never read "to '?'" */
  lua_pushcclosure(L, stock_error, 2); /* w, co, w, S, handler */
  lua_rotate(L, -4, -1);              /* w, w, S, handler, co */
  lua_pushcclosure(L, tracked_wrapped, 4);
  return 1;
}

void dxl_charged_install(lua_State *L, dxl_state_t *S) {
  static const luaL_Reg table_fns[] = {{"move", charged_move}, {NULL, NULL}};
  static const luaL_Reg string_fns[] = {{"rep", charged_rep}, {NULL, NULL}};
  /* not charged: tracked, so the turn time limit reaches C calls inside coroutines */
  static const luaL_Reg coroutine_fns[] = {{"resume", tracked_resume}, {"wrap", tracked_wrap},
                                           {"close", checked_close}, {NULL, NULL}};
  dxl_wrap_stock(L, S, "table", table_fns);
  dxl_wrap_stock(L, S, "string", string_fns);
  dxl_wrap_stock(L, S, "coroutine", coroutine_fns);
  dxl_pattern_install(L, S);
}
