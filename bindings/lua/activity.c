/*
** activity.c -- Lua activities as coroutines on the runtime loop, and their primitives.
**
** An activity runs until it returns, raises, or parks in duroxide.wait(); a parked activity
** is resumed by C.resume_activity when its `done` callback fires (from a luv callback, a
** timer, or another coroutine). Nothing here blocks the loop.
*/
#include <stdlib.h>
#include <string.h>

#include "dxlua.h"
#include "embedding.h"
#include "log.h"
#include "util.h"
#include "value.h"
#include "watchdog.h"

#define HANDLE_MT "duroxide.ActivityHandle"
#define ACTX_FIELDS 8 /* actx's fields, numbered as activity.lua's FIELDS */

/* What actx._h holds; `run` is cleared when the activity is over or aborted, `owner` only
** when it is over. The coroutine's bottom frame (boot) holds it, which keeps it alive as long
** as its run (a dead coroutine's stack stays until run_end resets it); once the run parks, the
** runs table holds it too (code that kept the coroutine may close it, which clears its stack,
** while the run still writes to the handle). It also holds
** actx's fields, copied at the start so they outlive the run: the texts in text[] (userdata
** memory does not move), made Lua strings only when the code reads them (actx_index); most
** activities read one field or none, and eight user values set per activity cost more. */
typedef struct act_run_s act_run_t;
typedef struct {
  act_run_t *run;
  act_run_t *owner;
  uint64_t execution_id, activity_id;
  uint32_t attempt;
  const char *instance, *name, *session_id, *tag, *worker_id; /* in text[]; NULL: none */
  char text[];
} act_handle_t;

struct act_run_s {
  dxl_state_t *S;
  dx_activity_t *a;
  lua_State *co;
  act_handle_t *h; /* NULL once boot_done cleared it (the function returned) */
  int deferred;   /* its runtime is stalled (tests): resumed by dxl_resume_deferred */
  int listed;     /* in runs (it parked once) */
  int seen;       /* its code got its coroutine (coroutine.running): never reused */
  act_run_t *outer; /* S->stepping: the run whose step this one's runs inside */
};

/* S->runs_ref: the table mapping parked activity coroutines to their handles (the run is the
** handle's owner), which keeps each coroutine and its handle alive while it waits. A run is
** listed when it first yields: most activities return within their first step and never are
** (a run being resumed is found through S->stepping).
** A listed run whose coroutine has no frame left is gone: code that kept the coroutine
** (coroutine.running) closed it while it waited (run_gone). Nothing can continue it: it fails
** (or, aborted, just ends) when its done fires, at shutdown or when abandoned runs are ended.
** S->idle_ref: the array of finished activity coroutines kept for the next activities: a
** coroutine that returned can run another function, which saves making and collecting one per
** activity. Only those that returned normally go there (nothing of theirs is pending), and
** only those whose code never got them from coroutine.running (it may keep one, and close or
** resume it while a later activity runs on it; duroxide.wait's own copy is harmless: a stale
** done() resumes a later activity's wait, which waits on).
** S->hot_co: the one kept last, in a registry slot of its own (S->hot_ref) before the array:
** most activities return within their first step, and the next one takes their coroutine
** back without the array's pushes and pops. */
#define IDLE_MAX 64

static void push_runs(lua_State *L, dxl_state_t *S) { dxl_push_kept(L, &S->runs_ref, NULL); }

/* [-0, +1, m] A coroutine for a new activity: a kept one, else a new one. */
static lua_State *take_thread(lua_State *L, dxl_state_t *S) {
  lua_State *co;
  if (S->hot_co) { /* its slot keeps holding it: overwritten when another one is kept */
    co = S->hot_co;
    S->hot_co = NULL;
    lua_rawgeti(L, LUA_REGISTRYINDEX, S->hot_ref);
    lua_sethook(co, NULL, 0, 0);
    return co;
  }
  if (S->idle_threads <= 0) return lua_newthread(L);
  dxl_push_kept(L, &S->idle_ref, NULL);
  lua_rawgeti(L, -1, S->idle_threads);
  lua_pushnil(L);
  lua_rawseti(L, -3, S->idle_threads--);
  lua_remove(L, -2);
  co = lua_tothread(L, -1);
  if (co) {
    lua_sethook(co, NULL, 0, 0); /* nothing of the previous activity's carries over */
    return co;
  }
  lua_pop(L, 1); /* cannot happen: only threads are kept */
  return lua_newthread(L);
}

/* The run is over; `returned`: its coroutine returned normally and may run another. */
static void run_end(act_run_t *r, int returned) {
  lua_State *L = r->S->L;
  if (r->h) r->h->run = r->h->owner = NULL;
  if (r->seen) returned = 0; /* not kept for the next activities */
  if (r->co) {
    /* Run pending <close> handlers (an activity that raised, or was aborted while parked). */
    if (!returned) lua_resetthread(r->co);
    lua_pushthread(r->co);
    lua_xmove(r->co, L, 1); /* co */
    if (r->listed) {
      push_runs(L, r->S);
      lua_pushvalue(L, -2);
      lua_pushnil(L);
      lua_rawset(L, -3); /* runs[co] = nil */
      lua_pop(L, 1);
    }
    if (returned && lua_status(r->co) == LUA_OK && lua_gettop(r->co) == 0 &&
        !r->S->hot_co && r->S->hot_ref > 0) {
      lua_pushvalue(L, -1);
      lua_rawseti(L, LUA_REGISTRYINDEX, r->S->hot_ref); /* an existing slot: no allocation */
      r->S->hot_co = r->co;
    } else if (returned && lua_status(r->co) == LUA_OK && lua_gettop(r->co) == 0 &&
               r->S->idle_threads < IDLE_MAX && lua_checkstack(L, 2)) {
      dxl_push_kept(L, &r->S->idle_ref, NULL);
      lua_pushvalue(L, -2);
      lua_rawseti(L, -2, ++r->S->idle_threads);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
  r->S->running_activities--;
  dx__spare_free(&r->S->spare_runs, r);
}

void dxl_activity_state_close(dxl_state_t *S) {
  dx__spare_drain(&S->spare_runs);
  S->spare_runs.max = 0;
}

/* Protected: runs[co] = r's handle (it may grow the table). The handle is found in slot 1 of
** boot's frame, the coroutine's deepest. Only a run that parks pays for it. [-0, +0, e] */
static int list_impl(lua_State *L) {
  act_run_t *r = lua_touserdata(L, 1);
  lua_Debug ar;
  int level = 0;
  while (lua_getstack(r->co, level + 1, &ar)) level++;
  if (!r->h || !lua_getstack(r->co, level, &ar) || !lua_checkstack(r->co, 1) ||
      !lua_getlocal(r->co, &ar, 1))
    return luaL_error(L, "activity handle not found on its coroutine");
  lua_xmove(r->co, L, 1); /* h */
  if (lua_touserdata(L, -1) != r->h)
    return luaL_error(L, "activity handle not found on its coroutine");
  push_runs(L, r->S);
  lua_pushthread(r->co);
  lua_xmove(r->co, L, 1);
  lua_pushvalue(L, -3);
  lua_rawset(L, -3);
  r->listed = 1;
  return 0;
}

/* The run of the handle at idx, a value of runs (NULL: over). */
static act_run_t *run_of_handle(lua_State *L, int idx) {
  act_handle_t *h = lua_touserdata(L, idx);
  return h ? h->owner : NULL;
}

#define GONE_MSG \
  "the activity's coroutine was closed while it waited (an activity must not close its coroutine)"

/* 1 when r is listed but its coroutine has no frame left: other code closed it. A parked run
** has its frames, and so has one being resumed (a running coroutine's status is LUA_OK). */
static int run_gone(const act_run_t *r) {
  lua_Debug ar;
  return r->listed && lua_status(r->co) != LUA_YIELD && !lua_getstack(r->co, 0, &ar);
}

/* A gone run (run_gone) can never continue: fail it (unless aborted) and end it. */
static void end_gone(act_run_t *r) {
  if (r->a) dx_activity_fail(r->a, GONE_MSG);
  r->a = NULL;
  run_end(r, 0);
}

/* Resume the activity coroutine with nargs values already on its stack. */
static void step(act_run_t *r, lua_State *from, int nargs) {
  dxl_state_t *S = r->S;
  int nres = 0, rc;
  char msg[2048];
  const dx_activity_info_t *info = r->a ? dx_activity_info(r->a) : NULL;
  /* named in the `loop blocked` warning if this step runs too long */
  if (info)
    dx__watch_enter_names(S->loop, "activity", info->name, info->instance, info->activity_id);
  else
    dx__watch_enter(S->loop, "an activity abandoned at shutdown");
  r->outer = S->stepping;
  S->stepping = r;
  rc = lua_resume(r->co, from, nargs, &nres);
  S->stepping = r->outer;
  dx__watch_leave(S->loop);
  if (rc == LUA_YIELD) {
    lua_pop(r->co, nres);
    if (r->listed) return;
    /* parked: listed, which keeps the coroutine once its resumer lets it go */
    if (lua_checkstack(S->L, 3)) {
      lua_pushcfunction(S->L, list_impl);
      lua_pushlightuserdata(S->L, r);
      if (dxl_pcall(S->L, 1, 0, msg, sizeof msg, 0) == LUA_OK) return;
    } else {
      snprintf(msg, sizeof msg, "out of Lua stack space");
    }
    if (r->a) dx_activity_fail(r->a, msg); /* not listed, it could not be resumed */
    r->a = NULL;
    run_end(r, 0);
    return;
  }
  if (!r->a) { /* aborted at shutdown: the runtime already handed the row back */
    if (rc == LUA_OK) lua_pop(r->co, nres);
    run_end(r, rc == LUA_OK);
    return;
  }
  if (rc == LUA_OK) {
    size_t cap;
    char *buf = dx__activity_out_buf(r->a, &cap), *out;
    /* a small output is written into the activity's record: no malloc, no free */
    if (nres > 0) out = dx__lua_to_json_in(r->co, -nres, "output", msg, sizeof msg, buf, cap);
    else out = memcpy(buf, "null", 5);
    lua_pop(r->co, nres);
    if (out) dx__activity_complete_take(r->a, out); /* takes (or borrows) out */
    else dx_activity_fail(r->a, msg);
  } else {
    dxl_error_message(r->co, -1, msg, sizeof msg);
    lua_pop(r->co, 1);
    dx_activity_fail(r->a, msg);
  }
  r->a = NULL;
  run_end(r, rc == LUA_OK);
}

/* {===== host methods: activities =====} */

void dxl_activity_fn_forget(lua_State *L, dxl_state_t *S) {
  if (S->act_fn_ref > 0) luaL_unref(L, LUA_REGISTRYINDEX, S->act_fn_ref);
  S->act_fn_ref = 0;
  S->act_fn_name[0] = '\0';
}

/* [-0, +1, m] the function registered for activity `name` (or nil): the one looked up last
** when it has that name (registrations forget it), else from the registrations, kept. */
static int push_activity_fn(lua_State *L, dxl_state_t *S, const char *name) {
  size_t n;
  if (S->act_fn_ref > 0 && strcmp(S->act_fn_name, name) == 0) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, S->act_fn_ref);
    return LUA_TFUNCTION;
  }
  if (dxl_push_registered(L, S, "activities", name) != LUA_TFUNCTION) return LUA_TNIL;
  if ((n = strlen(name)) < sizeof S->act_fn_name) {
    dxl_activity_fn_forget(L, S);
    lua_pushvalue(L, -1);
    S->act_fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    memcpy(S->act_fn_name, name, n + 1);
  }
  return LUA_TFUNCTION;
}

int dxl_h_activity_lookup(void *host, const char *name) {
  dxl_state_t *S = host;
  lua_State *L = S->L;
  int found;
  /* the function looked up last, still registered (registrations and the testing harness's
  ** swaps forget it: duroxide._registry_changed): no Lua call */
  if (S->act_fn_ref > 0 && strcmp(S->act_fn_name, name) == 0) return 1;
  if (!lua_checkstack(L, 4)) return 0;
  found = push_activity_fn(L, S, name) == LUA_TFUNCTION;
  lua_pop(L, 1);
  return found;
}

/* [-0, +1, m] push s (NULL: nil) through k: from its registry slot while s is the text k
** kept last, else interned anew and kept (texts too long for k are just pushed). */
static void push_kept_str(lua_State *L, dxl_kept_str_t *k, const char *s) {
  size_t n;
  if (!s) {
    lua_pushnil(L);
    return;
  }
  if (k->ref > 0 && strcmp(k->text, s) == 0) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, k->ref);
    return;
  }
  lua_pushstring(L, s);
  if ((n = strlen(s)) >= sizeof k->text) return;
  lua_pushvalue(L, -1);
  if (k->ref > 0) lua_rawseti(L, LUA_REGISTRYINDEX, k->ref);
  else k->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  memcpy(k->text, s, n + 1);
}

/* [-0, +0, e] 1 when duroxide.session_handler{} registered a handler table (looked up only
** once one was registered). */
static int has_session_handler(lua_State *L, dxl_state_t *S) {
  int found;
  if (!S->session_handler_set) return 0;
  found = dxl_push_registered(L, S, "hooks", "session_handler") == LUA_TTABLE;
  lua_pop(L, 1);
  return found;
}

/* [-0, +1, e] push prims[name]. */
static void push_prim(lua_State *L, dxl_state_t *S, const char *name) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->prims_ref);
  lua_getfield(L, -1, name);
  lua_remove(L, -2);
}

/* [-0, +1, m] A new handle (metatable not set yet) holding a copy of info's fields. */
static act_handle_t *new_handle(lua_State *L, const dx_activity_info_t *info) {
  const char *src[5];
  const char **dst[5];
  size_t len[5], total = 0, k;
  act_handle_t *h;
  char *p;
  src[0] = info->instance, src[1] = info->name, src[2] = info->session_id;
  src[3] = info->tag, src[4] = info->worker_id;
  for (k = 0; k < 5; k++) total += (len[k] = src[k] ? strlen(src[k]) + 1 : 0);
  h = lua_newuserdatauv(L, sizeof *h + total, 0);
  h->run = h->owner = NULL;
  h->execution_id = info->execution_id;
  h->activity_id = info->activity_id;
  h->attempt = info->attempt;
  dst[0] = &h->instance, dst[1] = &h->name, dst[2] = &h->session_id;
  dst[3] = &h->tag, dst[4] = &h->worker_id;
  for (p = h->text, k = 0; k < 5; k++) {
    *dst[k] = src[k] ? memcpy(p, src[k], len[k]) : NULL;
    p += len[k];
  }
  return h;
}

/* The function returned: its handle is let go (boot's frame goes with this return). */
static int boot_done(lua_State *co, int status, lua_KContext ctx) {
  act_run_t *r = (act_run_t *)ctx;
  (void)status;
  if (r->h) r->h->run = r->h->owner = NULL;
  r->h = NULL;
  return lua_gettop(co) - 1; /* the function's results, above the handle */
}

/* The body of an activity coroutine: boot(r) sets the run up (handle, actx, input) and calls
** the activity's function, all inside the coroutine's first resume, which protects it: a
** setup error (a bad input, out of memory) fails the activity as an error of its code does,
** with no pcall of its own. A session activity with a session handler registered runs as
** session_run(fn, actx, input) (activity.lua: open first). The call is a lua_callk: the
** function may yield (duroxide.wait). The handle stays in slot 1 of boot's frame: it lives
** as long as the coroutine runs, waits, or lies dead with its stack (an error) until run_end. */
static int boot(lua_State *co) {
  act_run_t *r = lua_touserdata(co, 1);
  const dx_activity_info_t *info = dx_activity_info(r->a);
  act_handle_t *h;
  int wrapped;
  lua_settop(co, 0);
  if (!r->S->hot_ref) { /* made here, protected (run_end only writes it) */
    lua_pushboolean(co, 0);
    r->S->hot_ref = luaL_ref(co, LUA_REGISTRYINDEX);
  }
  h = new_handle(co, info);
  h->run = h->owner = r;
  /* typed: a foreign actx._h is refused */
  if (r->S->handle_mt) {
    lua_rawgeti(co, LUA_REGISTRYINDEX, r->S->handle_mt_ref);
  } else {
    dxl_push_kept(co, &r->S->handle_mt_ref, HANDLE_MT);
    r->S->handle_mt = lua_topointer(co, -1); /* the registry keeps it: one address */
  }
  lua_setmetatable(co, 1);
  r->h = h;
  wrapped = info->session_id && has_session_handler(co, r->S);
  if (wrapped) push_prim(co, r->S, "session_run");
  push_activity_fn(co, r->S, info->name);
  /* actx = setmetatable({ _h = h }, Actx); its fields are read from h (actx_index) */
  lua_createtable(co, 0, 1);
  lua_pushvalue(co, 1);
  lua_setfield(co, -2, "_h");
  lua_rawgeti(co, LUA_REGISTRYINDEX, r->S->actx_mt_ref);
  lua_setmetatable(co, -2);
  if (!info->input) lua_pushnil(co);
  else dx__lua_push_json_or_raise(co, info->input, strlen(info->input), "activity input");
  lua_callk(co, 2 + wrapped, LUA_MULTRET, (lua_KContext)r, boot_done);
  return boot_done(co, LUA_OK, (lua_KContext)r);
}

/* Protected: a new coroutine (take_thread without a kept one allocates). [-0, +1, m] */
static int new_thread_impl(lua_State *L) {
  lua_newthread(L);
  return 1;
}

void dxl_h_activity_start(void *host, dx_activity_t *a) {
  dxl_state_t *S = host;
  lua_State *L = S->L;
  act_run_t *r;
  char msg[1024];
  if (!S->spare_runs.size) dx__spare_init(&S->spare_runs, sizeof *r, 256);
  r = dx__spare_calloc(&S->spare_runs);
  if (!r || !lua_checkstack(L, 4)) {
    dx__spare_free(&S->spare_runs, r);
    dx_activity_fail(a, "out of memory starting the activity");
    return;
  }
  r->S = S;
  r->a = a;
  S->running_activities++;
  if (S->hot_co || S->idle_threads > 0) {
    r->co = take_thread(L, S); /* no allocation: a kept one */
  } else {
    lua_pushcfunction(L, new_thread_impl);
    if (dxl_pcall(L, 0, 1, msg, sizeof msg, 0) != LUA_OK) {
      dx_activity_fail(a, msg);
      r->a = NULL;
      run_end(r, 0);
      return;
    }
    r->co = lua_tothread(L, -1);
  }
  /* the coroutine stays on L's stack (anchored) through its first step: listed if it parks */
  if (!lua_checkstack(r->co, 2)) { /* does not raise */
    dx_activity_fail(a, "out of memory starting the activity");
    r->a = NULL;
    r->co = NULL; /* not listed, not kept: L's stack lets it go */
    run_end(r, 0);
    lua_pop(L, 1);
    return;
  }
  lua_pushcfunction(r->co, boot); /* a fresh or returned coroutine: an empty stack */
  lua_pushlightuserdata(r->co, r);
  step(r, L, 1);
  lua_pop(L, 1);
}

void dxl_h_activity_abort(void *host, dx_activity_t *a) {
  dxl_state_t *S = host;
  lua_State *L = S->L;
  act_run_t *found = NULL, *r;
  for (r = S->stepping; r && !found; r = r->outer) /* not listed yet: in its first step */
    if (r->a == a) found = r;
  push_runs(L, S);
  lua_pushnil(L);
  while (!found && lua_next(L, -2)) {
    r = run_of_handle(L, -1);
    lua_pop(L, 1);
    if (r && r->a == a) {
      found = r;
      lua_pop(L, 1);
      break;
    }
  }
  lua_pop(L, 1);
  if (found) {
    found->a = NULL;
    if (found->h) found->h->run = NULL;
    if (run_gone(found)) run_end(found, 0); /* nothing else would end it */
  }
}

/* The runs for which pick(r) holds, in a malloc'd array (*n of them; NULL when none or out
** of memory). Collected first because acting on a run edits the runs table. */
static act_run_t **runs_where(dxl_state_t *S, int (*pick)(const act_run_t *r), size_t *n) {
  lua_State *L = S->L;
  act_run_t **v = NULL;
  size_t cap = 0;
  int top = lua_gettop(L);
  *n = 0;
  if (!lua_checkstack(L, 4)) return NULL;
  push_runs(L, S);
  lua_pushnil(L);
  while (lua_next(L, -2)) {
    act_run_t *r = run_of_handle(L, -1);
    lua_pop(L, 1);
    if (r && pick(r)) {
      if (*n == cap) {
        act_run_t **nv = realloc(v, (cap = cap ? cap * 2 : 8) * sizeof *nv);
        if (!nv) break;
        v = nv;
      }
      v[(*n)++] = r;
    }
  }
  lua_settop(L, top);
  return v;
}

static int is_abandoned(const act_run_t *r) {
  return !r->a && (lua_status(r->co) == LUA_YIELD || run_gone(r));
}

void dxl_end_abandoned_activities(dxl_state_t *S) {
  size_t n, i;
  act_run_t **dead = runs_where(S, is_abandoned, &n);
  for (i = 0; i < n; i++) run_end(dead[i], 0);
  free(dead);
}

void dxl_activity_thread_seen(dxl_state_t *S, lua_State *co) {
  act_run_t *r;
  for (r = S->stepping; r; r = r->outer)
    if (r->co == co) r->seen = 1;
}

/* {===== session hooks =====} */

/* Call hooks[name](session_id, word, worker_id) under pcall: an app error is logged, never
** raised. worker_id names the runtime whose session manager fired (several simulated workers
** may share this Lua state). The session handler's own bookkeeping (prims.session_claimed /
** session_released: open state, close) runs first, when a handler is registered. */
static void call_hook(dxl_state_t *S, const char *name, const char *sid, const char *word,
                      const char *worker_id) {
  lua_State *L = S->L;
  char msg[1024];
  int rc, handler;
  if (!lua_checkstack(L, 6)) return;
  handler = has_session_handler(L, S);
  if (handler) {
    push_prim(L, S, strcmp(name, "claimed") == 0 ? "session_claimed" : "session_released");
    lua_pushstring(L, sid);
    lua_pushstring(L, word);
    lua_pushstring(L, worker_id);
    S->loop_depth++;
    dx__watch_enter(S->loop, "session handler (session %s, %s)", sid, word);
    rc = dxl_pcall(L, 3, 0, msg, sizeof msg, 1);
    dx__watch_leave(S->loop);
    S->loop_depth--;
    if (rc != LUA_OK)
      dx__log(DX_LOG_ERROR, "error in session handler close", "session_id=%s reason=%s "
              "error=\"%s\"", sid, word, msg);
  }
  if (dxl_push_registered(L, S, "hooks", name) != LUA_TFUNCTION) {
    lua_pop(L, 1);
    return;
  }
  lua_pushstring(L, sid);
  lua_pushstring(L, word);
  lua_pushstring(L, worker_id); /* nil when unknown */
  S->loop_depth++;
  dx__watch_enter(S->loop, "session hook %s (session %s)", name, sid);
  rc = dxl_pcall(L, 3, 0, msg, sizeof msg, 1);
  dx__watch_leave(S->loop);
  if (rc != LUA_OK)
    dx__log(DX_LOG_ERROR, "error in session hook", "hook=%s session_id=%s error=\"%s\"", name,
            sid, msg);
  S->loop_depth--;
}

void dxl_h_session_claimed(void *host, const char *sid, const char *how) {
  call_hook(host, "claimed", sid, how, NULL);
}

void dxl_h_session_released(void *host, const char *sid, const char *reason) {
  call_hook(host, "released", sid, reason, NULL);
}

void dxl_h_session_claimed_by(void *host, const char *sid, const char *how,
                              const char *worker_id) {
  call_hook(host, "claimed", sid, how, worker_id);
}

void dxl_h_session_released_by(void *host, const char *sid, const char *reason,
                               const char *worker_id) {
  call_hook(host, "released", sid, reason, worker_id);
}

/* {===== primitives for duroxide/activity.lua =====} */

/* The run of the coroutine at idx: one being resumed now (S->stepping), else a parked one
** (runs); NULL: not an activity's (or over). */
static act_run_t *run_of(lua_State *L, int idx) {
  dxl_state_t *S = dxl_state(L);
  lua_State *co = lua_tothread(L, idx);
  act_run_t *r;
  for (r = S->stepping; r; r = r->outer)
    if (r->co == co) return r;
  push_runs(L, S);
  lua_pushvalue(L, idx);
  lua_rawget(L, -2);
  r = run_of_handle(L, -1);
  lua_pop(L, 2);
  return r;
}

static int p_is_activity(lua_State *L) {
  lua_pushboolean(L, lua_type(L, 1) == LUA_TTHREAD && run_of(L, 1) != NULL);
  return 1;
}

/* C.resume_activity(co): continue a parked activity (its done() fired). */
static int p_resume_activity(lua_State *L) {
  act_run_t *r;
  lua_State *co;
  luaL_checktype(L, 1, LUA_TTHREAD);
  co = lua_tothread(L, 1);
  r = run_of(L, 1);
  if (!r || co == L || (lua_status(co) != LUA_YIELD && !run_gone(r))) return 0;
  if (r->a && dx__runtime_stalled(dx__activity_runtime(r->a))) {
    r->deferred = 1; /* a stalled worker runs nothing: continue once it resumes */
    return 0;
  }
  if (lua_status(co) == LUA_YIELD) step(r, L, 0);
  else end_gone(r); /* its coroutine was closed: it would wait forever */
  return 0;
}

static int is_due_deferred(const act_run_t *r) {
  return r->deferred && !(r->a && dx__runtime_stalled(dx__activity_runtime(r->a)));
}

void dxl_resume_deferred(dxl_state_t *S) {
  size_t n, i;
  act_run_t **due = runs_where(S, is_due_deferred, &n);
  for (i = 0; i < n; i++) {
    due[i]->deferred = 0;
    if (lua_status(due[i]->co) == LUA_YIELD) step(due[i], S->L, 0);
    else if (run_gone(due[i])) end_gone(due[i]);
  }
  free(due);
}

/* The handle at idx, or NULL when it is not one: its metatable's address is compared (the
** state is upvalue 1 of the primitives), not looked up by name in the registry as
** luaL_testudata does, on every actx field read. */
static act_handle_t *test_handle(lua_State *L, int idx) {
  dxl_state_t *S = lua_touserdata(L, lua_upvalueindex(1));
  act_handle_t *h = lua_touserdata(L, idx);
  const void *mt;
  if (!h || !S || !S->handle_mt || lua_type(L, idx) != LUA_TUSERDATA || !lua_getmetatable(L, idx))
    return NULL;
  mt = lua_topointer(L, -1);
  lua_pop(L, 1);
  return mt == S->handle_mt ? h : NULL;
}

static void push_text(lua_State *L, const char *s) {
  if (s) lua_pushstring(L, s);
  else lua_pushnil(L);
}

/* Actx.__index(t, k), made by C.actx_indexer(Actx, FIELDS) (upvalues: the state, Actx,
** FIELDS): a method of Actx, else field FIELDS[k] of the handle t._h (nil for a foreign
** handle), else nil. What activity.lua's Lua __index did, without a Lua call and a
** primitive call per field read (most session activities read actx.worker_id or
** actx.session_id). */

static int actx_index(lua_State *L) {
  dxl_state_t *S = lua_touserdata(L, lua_upvalueindex(1));
  act_handle_t *h;
  lua_Integer i;
  lua_settop(L, 2);
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(2)) != LUA_TNIL) return 1;
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(3));
  i = lua_tointeger(L, -1);
  if (i < 1 || i > ACTX_FIELDS) return 0;
  lua_getfield(L, 1, "_h"); /* as t._h: t's own field, or nil from this __index */
  if (!(h = test_handle(L, -1))) return 0;
  switch (i) {
    case 1: push_text(L, h->instance); break;
    case 2: lua_pushinteger(L, (lua_Integer)h->execution_id); break;
    case 3: lua_pushinteger(L, (lua_Integer)h->activity_id); break;
    case 4: push_kept_str(L, &S->kept_name, h->name); break;
    case 5: lua_pushinteger(L, (lua_Integer)h->attempt); break;
    case 6: push_text(L, h->session_id); break;
    case 7: push_text(L, h->tag); break;
    default: push_kept_str(L, &S->kept_worker, h->worker_id); break;
  }
  return 1;
}

/* C.actx_indexer(Actx, FIELDS) -> Actx's __index (actx_index). */
static int p_actx_indexer(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  luaL_checktype(L, 2, LUA_TTABLE);
  lua_settop(L, 2);
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_pushcclosure(L, actx_index, 3);
  return 1;
}

static int p_actx_cancelled(lua_State *L) {
  act_handle_t *h = test_handle(L, 1);
  lua_pushboolean(L, !h || !h->run || !h->run->a || dx_activity_is_cancelled(h->run->a));
  return 1;
}

/* C.session_handler() -> the registered { open =, close = } or nil. */
static int p_session_handler(lua_State *L) {
  if (dxl_push_registered(L, dxl_state(L), "hooks", "session_handler") != LUA_TTABLE) {
    lua_pop(L, 1);
    lua_pushnil(L);
  }
  return 1;
}

/* C.actx_abort_session(h, reason): give the activity's session up on this worker now. */
static int p_actx_abort_session(lua_State *L) {
  act_handle_t *h = test_handle(L, 1);
  const char *reason = luaL_optstring(L, 2, NULL);
  dx_error_t err;
  if (!h || !h->run || !h->run->a)
    return luaL_error(L, "actx:abort_session: the activity has finished");
  if (dx_activity_abort_session(h->run->a, reason, &err) != DX_OK)
    return luaL_error(L, "actx:abort_session: %s", err.msg);
  return 0;
}

static int p_actx_trace(lua_State *L) {
  act_handle_t *h = test_handle(L, 1);
  int level = (int)luaL_checkinteger(L, 2);
  const char *msg = luaL_checkstring(L, 3);
  const dx_activity_info_t *info = h && h->run && h->run->a ? dx_activity_info(h->run->a) : NULL;
  if (info)
    dx__log(level, msg, "instance=%s activity=%s id=%llu worker_id=%s", info->instance,
            info->name, (unsigned long long)info->activity_id, info->worker_id);
  else
    dx__log(level, msg, NULL);
  return 0;
}

/* {===== C.after(ms, fn): a one-shot timer on the runtime loop =====} */

typedef struct after_s {
  uv_timer_t timer;
  dxl_state_t *S;
  int fn_ref;
  struct after_s *prev, *next;  /* S->timers: pending ones */
} after_t;

static void after_closed(uv_handle_t *h) { free(h->data); }

static void after_unlink(after_t *a) {
  if (a->prev) a->prev->next = a->next;
  else if (a->S->timers == a) a->S->timers = a->next;
  if (a->next) a->next->prev = a->prev;
  a->prev = a->next = NULL;
}

void dxl_cancel_timers(dxl_state_t *S) {
  while (S->timers) {
    after_t *a = S->timers;
    after_unlink(a);
    uv_close((uv_handle_t *)&a->timer, after_closed);
  }
}

static void on_after(uv_timer_t *t) {
  after_t *a = t->data;
  lua_State *L = a->S->L;
  char msg[1024];
  int rc;
  after_unlink(a);
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->fn_ref);
  luaL_unref(L, LUA_REGISTRYINDEX, a->fn_ref);
  a->S->loop_depth++;
  dx__watch_enter(a->S->loop, "a timer callback (actx:sleep)");
  rc = dxl_pcall(L, 0, 0, msg, sizeof msg, 1);
  dx__watch_leave(a->S->loop);
  if (rc != LUA_OK) dx__log(DX_LOG_ERROR, "error in timer callback", "error=\"%s\"", msg);
  a->S->loop_depth--;
  uv_close((uv_handle_t *)&a->timer, after_closed);
}

static int p_after(lua_State *L) {
  dxl_state_t *S = dxl_state(L);
  lua_Integer ms = luaL_checkinteger(L, 1);
  after_t *a;
  luaL_checktype(L, 2, LUA_TFUNCTION);
  if (ms < 0) return luaL_argerror(L, 1, "must be >= 0");
  a = calloc(1, sizeof *a);
  if (!a) return luaL_error(L, "out of memory");
  a->S = S;
  lua_pushvalue(L, 2);
  a->fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  uv_timer_init(S->loop, &a->timer);
  a->timer.data = a;
  uv_timer_start(&a->timer, on_after, (uint64_t)ms, 0);
  a->next = S->timers;
  if (a->next) ((after_t *)a->next)->prev = a;
  S->timers = a;
  return 0;
}

void dxl_activity_register(lua_State *L, int prims) {
  static const luaL_Reg fns[] = {{"is_activity", p_is_activity},
                                 {"resume_activity", p_resume_activity},
                                 {"actx_cancelled", p_actx_cancelled},
                                 {"actx_indexer", p_actx_indexer},
                                 {"actx_trace", p_actx_trace},
                                 {"session_handler", p_session_handler},
                                 {"actx_abort_session", p_actx_abort_session},
                                 {"after", p_after},
                                 {NULL, NULL}};
  lua_pushvalue(L, prims);
  lua_pushlightuserdata(L, dxl_state(L)); /* upvalue 1 of each: test_handle's state */
  luaL_setfuncs(L, fns, 1);
  lua_pop(L, 1);
}
