/*
** orch.c -- orchestrations as Lua coroutines: the executor half of dxl_host_methods and the
** ctx primitives used by duroxide/context.lua.
**
** A fresh turn creates a coroutine and replays the code from the start; the engine resumes
** it after every delivery. With the orchestration cache the engine may keep the coroutine
** suspended after the turn and resume it in the instance's next turn (h_orch_turn gives it
** that turn's budgets). Every resume runs under the turn's budget (budget.c:
** instructions and heap growth) with the instance's own globals bound (sandbox.c).
*/
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "embedding.h"
#include "dxlua.h"
#include "util.h"
#include "value.h"
#include "watchdog.h"

#define GENERATED_SUFFIX_MAX 27 /* "::sub::" and up to 20 digits of an event id */
/* The box's user values: session_id_arg's kept id, the instance's function and coroutine. */
#define BOX_UV_SID 1
#define BOX_UV_FN 2
#define BOX_UV_CO 3
#define BOX_UVS 3

typedef struct orch_inst_s orch_inst_t;

/* {===== integers as JSON without the codec =====}
** Inputs, results and outputs are often counts and ids: an integer is written and read here
** in the text the codec gives it (written by its own dx__json_int_text, read as jsondec.c
** number reads it), without its setup and allocation. Anything else goes to the codec. */

/* The integer at idx as JSON text in buf (NULL: not an integer). */
static const char *int_text(lua_State *L, int idx, char buf[DX_JSON_INT_MAX]) {
  return lua_isinteger(L, idx) ? dx__json_int_text(lua_tointeger(L, idx), buf) : NULL;
}

/* Push JSON text s when it is exactly an integer of at most 18 digits (no overflow; "-0" is
** 0, as the decoder reads it). 0: it is not (nothing pushed). */
static int push_int_json(lua_State *L, const char *s) {
  const char *p = s + (*s == '-');
  lua_Integer v = 0;
  int n = 0;
  if (*p == '0' && p[1]) return 0; /* a leading zero: the decoder's error */
  for (; *p >= '0' && *p <= '9'; p++) {
    if (++n > 18) return 0;
    v = v * 10 + (*p - '0');
  }
  if (*p || n == 0) return 0;
  lua_pushinteger(L, *s == '-' ? -v : v);
  return 1;
}

/* dx__lua_push_json_or_raise for NUL-terminated text. [-0, +1, e] */
static void push_json(lua_State *L, const char *json, const char *what) {
  if (!push_int_json(L, json)) dx__lua_push_json_or_raise(L, json, strlen(json), what);
}

/* The instance's box, which is its ctx (push_ctx_mt): t is cleared when the turn ends, so a
** ctx kept past its turn fails cleanly instead of touching freed memory. */
typedef struct {
  dx_turn_t *t;
  orch_inst_t *inst;
} turn_box_t;

struct orch_inst_s {
  dxl_state_t *S;
  lua_State *co;
  turn_box_t *box;
  int box_ref;
  int started;
  int can;
  dxl_budget_t budget;
  int64_t ran_ms;             /* time spent in resumes this turn, against budget.time_limit_ms */
  int64_t heap;               /* Lua heap growth while this instance ran (its size estimate) */
  int info_ref, env_ref; /* sandbox: the function's _ENV carrier, this instance's globals */
  unsigned reg_gen;      /* S->reg_gen when that was last known to be so */
  turn_box_t *outer_box; /* running_box when its guards were entered (restored on leave) */
  dx_turn_t *t;
  const char *name, *version, *input;
};

/* {===== host methods: orchestrations =====} */

static int lookup_versions(lua_State *L, dxl_state_t *S, const char *name) {
  return dxl_push_registered(L, S, "orchestrations", name) == LUA_TTABLE;
}

static int h_orch_lookup(void *host, const char *name, const char *version,
                         const char **resolved) {
  dxl_state_t *S = host;
  lua_State *L = S->L;
  int found = 0;
  if (!lua_checkstack(L, 8)) return 0;
  if (lookup_versions(L, S, name)) {
    if (version) {
      lua_getfield(L, -1, "versions");
      found = lua_getfield(L, -1, version) == LUA_TFUNCTION;
      lua_pop(L, 2);
      if (found) *resolved = version;
    } else {
      /* The policy's version (duroxide.version_policy), else the latest; the string is kept
      ** alive by the registration table. */
      if (lua_getfield(L, -1, "policy") != LUA_TSTRING) {
        lua_pop(L, 1);
        lua_getfield(L, -1, "latest");
      }
      found = lua_type(L, -1) == LUA_TSTRING;
      if (found) *resolved = lua_tostring(L, -1);
      lua_pop(L, 1);
    }
  }
  lua_pop(L, 1);
  return found;
}

/* Marks an instance's coroutine: what its extra space holds (a thread the code makes copies
** the main thread's, so only the engine's own are marked). */
static const char instance_thread_key = 0;
_Static_assert(LUA_EXTRASPACE >= sizeof(void *), "a thread's extra space holds the mark");

/* __newindex of every ctx: another instance holding this ctx (stashed in a shared upvalue)
** must not change what its methods or fields are, nor can its own code. */
static int ctx_newindex(lua_State *L) {
  if (lua_type(L, 2) == LUA_TSTRING)
    return luaL_error(L, "ctx is read-only: cannot assign ctx.%s (keep state in locals)",
                      lua_tostring(L, 2));
  return luaL_error(L, "ctx is read-only (keep state in locals)");
}

/* [-0, +1, m] The ctx's metatable, one per instance: __index its fields table (instance_id,
** execution_id, name, version; missing keys fall to Context's methods), writes refused. A
** ctx is the instance's box, a full userdata: nothing in it can be assigned or rawset, so
** neither a kept coroutine's ctx nor its methods can differ from a replay's. getmetatable
** sees it only as a read-only view (sandbox.c: a userdata's metatable). */
static void push_ctx_mt(lua_State *L, dxl_state_t *S, orch_inst_t *inst) {
  lua_createtable(L, 0, 4);
  lua_createtable(L, 0, 4); /* the fields */
  lua_pushstring(L, dx_turn_instance(inst->t));
  lua_setfield(L, -2, "instance_id");
  lua_pushinteger(L, (lua_Integer)dx_turn_execution(inst->t));
  lua_setfield(L, -2, "execution_id");
  lua_pushstring(L, inst->name);
  lua_setfield(L, -2, "name");
  lua_pushstring(L, inst->version);
  lua_setfield(L, -2, "version");
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->context_mt_ref);
  lua_setmetatable(L, -2);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, ctx_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushliteral(L, "duroxide.Context");
  lua_setfield(L, -2, "__name"); /* tostring(ctx), argument errors */
  lua_pushvalue(L, -1);
  lua_setfield(L, -2, "__metatable"); /* getmetatable: itself, and in orchestrations a view */
}

/* Protected part of orch_start: build coroutine, ctx and input. [-1, +0, e] */
static int start_impl(lua_State *L) {
  orch_inst_t *inst = lua_touserdata(L, 1);
  dxl_state_t *S = inst->S;
  turn_box_t *box;
  lua_State *co;
  if (!lookup_versions(L, S, inst->name)) return luaL_error(L, "orchestration not registered");
  lua_getfield(L, -1, "versions");
  if (lua_getfield(L, -1, inst->version) != LUA_TFUNCTION)
    return luaL_error(L, "orchestration %s version %s is not registered", inst->name,
                      inst->version);
  inst->reg_gen = S->reg_gen;
  dxl_sandbox_new_env(L, -1, &inst->info_ref, &inst->env_ref);
  /* The box's user values keep the coroutine and the function alive: one registry ref (the
  ** box's) instead of three, each a registry insert and a removal per instance. Each is
  ** recorded in inst only once anchored: orch_free may follow an error at any step. */
  box = lua_newuserdatauv(L, sizeof *box, BOX_UVS);
  box->t = inst->t;
  box->inst = inst;
  lua_pushvalue(L, -1);
  inst->box_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  inst->box = box;
  lua_pushvalue(L, -2); /* the function */
  lua_setiuservalue(L, -2, BOX_UV_FN);
  co = lua_newthread(L);
  lua_setiuservalue(L, -2, BOX_UV_CO);
  inst->co = co;
  *(const void **)lua_getextraspace(co) = &instance_thread_key; /* see dxl_orch_foreign_thread */
  lua_rotate(L, -2, 1); /* versions, box, function */
  lua_xmove(L, co, 1);  /* function */
  lua_remove(L, -2);    /* versions */
  lua_remove(L, -2);    /* the registration */
  push_ctx_mt(L, S, inst);
  lua_setmetatable(L, -2); /* the box is the ctx */
  /* decoded here, under this protected call, then moved with ctx: co has no error handler */
  push_json(L, inst->input, "orchestration input");
  lua_xmove(L, inst->co, 2);
  inst->budget.top = inst->co;
  dxl_budget_watch(inst->co);
  return 0;
}

/* The state's heap size as the allocator wrapper counts it (budget.c). */
static int64_t heap_now(dxl_state_t *S) { return dxl_budget_heap(S); }

static int h_orch_start(void *host, dx_turn_t *t, const char *name, const char *version,
                        const char *input, void **out, dx_error_t *err) {
  dxl_state_t *S = host;
  lua_State *L = S->L;
  orch_inst_t *inst = calloc(1, sizeof *inst);
  char msg[1024];
  if (!inst) return dx_error_set(err, DX_ENOMEM, "out of memory");
  inst->S = S;
  inst->t = t;
  inst->name = name;
  inst->version = version ? version : "1.0.0";
  inst->input = input ? input : "null";
  /* the runtime's own options (command line, runtime{} or C options), not duroxide.configure's */
  inst->budget.limit = dx_turn_instruction_budget(t);
  if (inst->budget.limit <= 0) inst->budget.limit = S->opts.turn_instruction_budget;
  inst->budget.time_limit_ms = dx_turn_time_limit(t); /* 0 outside a runtime: none */
  dxl_budget_start_memory(S, &inst->budget, DXL_TURN_MEMORY_LIMIT); /* for the whole turn */
  inst->box_ref = inst->info_ref = inst->env_ref = LUA_NOREF;
  lua_pushcfunction(L, start_impl);
  lua_pushlightuserdata(L, inst);
  int64_t h0 = heap_now(S);
  int prc = dxl_pcall(L, 1, 0, msg, sizeof msg, 0);
  inst->heap += heap_now(S) - h0;
  if (prc != LUA_OK) {
    *out = inst; /* freed by orch_free */
    return dx_error_set(err, DX_ELUA, "%s", msg);
  }
  *out = inst;
  return DX_OK;
}

static int finish_ok(orch_inst_t *inst, int nres) {
  char err[512], num[DX_JSON_INT_MAX];
  const char *n = nres > 0 ? int_text(inst->co, -nres, num) : NULL;
  char *out;
  if (n) {
    lua_pop(inst->co, nres);
    dx_turn_set_output(inst->t, n);
    return DX_RUN_DONE;
  }
  out = nres > 0 ? dx__lua_to_json(inst->co, -nres, "output", err, sizeof err)
                 : dx__strdup("null");
  lua_pop(inst->co, nres);
  if (!out) {
    dx_turn_set_failure(inst->t, DX_CAT_APPLICATION, "OrchestrationFailed", err);
    return DX_RUN_FAILED;
  }
  dx_turn_set_output(inst->t, out);
  free(out);
  return DX_RUN_DONE;
}

/* The box of the instance whose code runs now on this thread (its guards are entered; its
** box_ref keeps it alive): check_box takes only it. */
static _Thread_local turn_box_t *running_box;

/* An instance's coroutine is the engine's to resume: another instance reaching it through a
** shared upvalue (a stashed coroutine.running()) would run that instance's code in its own
** turn, or close it, and the instance would then fail where a replay completes it. 1 when co
** is an instance's coroutine other than the running instance's (its own is running or normal
** while its code runs, and Lua refuses those itself): charged.c's coroutine.resume and
** coroutine.close refuse it, in orchestrations, activities and load-time code alike. */
int dxl_orch_foreign_thread(lua_State *co) {
  return *(const void **)lua_getextraspace(co) == &instance_thread_key &&
         !(running_box && running_box->inst->co == co);
}

/* Enter / leave the instance's guards: its budget, its globals, the sandbox checks. */
static void guards_enter(dxl_state_t *S, orch_inst_t *inst, dxl_budget_t *b) {
  dxl_sandbox_enter(S->L, S, inst->info_ref, inst->env_ref); /* outside the memory cap */
  dxl_budget_enter(S, b);
  S->in_orchestration++;
  inst->outer_box = running_box;
  running_box = inst->box;
}

static void guards_leave(dxl_state_t *S, orch_inst_t *inst, dxl_budget_t *b) {
  running_box = inst->outer_box;
  S->in_orchestration--;
  dxl_budget_leave(b);
  dxl_sandbox_leave(S->L, S, inst->info_ref);
}

/* A memory error, and the budget refused an allocation: the turn's cap, not the machine. */
static int memory_cap_hit(orch_inst_t *inst, int rc, const char *msg) {
  return inst->budget.mem_refused &&
         (rc == LUA_ERRMEM || strstr(msg, "not enough memory") != NULL);
}

/* lua_resume under the turn time limit: the watchdog's alarm is armed for what is left of the
** turn's limit (a turn may resume several times) and disarmed before the budget can go. The
** watchdog also arms the count hook of a resume that runs long (budget.c); without a watchdog
** it counts from the start. */
static int resume_timed(dxl_state_t *S, orch_inst_t *inst, int nargs, int *nres) {
  dxl_budget_t *b = &inst->budget;
  uint64_t t0 = uv_hrtime();
  int rc, armed, lazy = dxl_budget_resume_begin(b);
  int64_t left = b->time_limit_ms <= 0 ? 0
                 : b->time_limit_ms > inst->ran_ms ? b->time_limit_ms - inst->ran_ms : 1;
  armed = dx__watch_arm_early(S->loop, left, dxl_budget_alarm, DXL_COUNT_AFTER_MS,
                              lazy ? dxl_budget_count : NULL, b);
  if (lazy && !armed) dxl_budget_count_now(b);
  rc = lua_resume(inst->co, S->L, nargs, nres);
  if (armed) dx__watch_disarm(S->loop);
  inst->ran_ms += (int64_t)((uv_hrtime() - t0) / 1000000u);
  return rc;
}

/* C.PARK: what context.lua's waits yield first, (PARK, token) or (PARK, futures, i), so the
** engine knows which futures the code waits for (park_from_yield); private to the library. */
static char park_key;

/* A durable future (context.lua's Future methods): a full userdata, so no code can assign
** or rawset its token, flags or ctx: another instance holding it (stashed in a shared
** upvalue) cannot make it resolve as some other future, and a kept coroutine's futures stay
** what a replay's are. User value 1: the box whose turn it polls (kept alive: a freed box's
** address could come back as another instance's); a retry's: its private state table, and
** user value 2 the box of the instance it belongs to (only that instance reads or cancels it:
** another one marking it cancelled would make a kept coroutine disagree with a replay). */
typedef struct {
  uint64_t token;   /* its action's token in the turn (0: a retry) */
  turn_box_t *box;  /* the instance's box (its owner) */
  int retry;        /* a retry's future (context.lua runs it) */
  int cancelled;    /* withdrawn by Future:cancel */
} fut_t;

/* The future at idx when it is one (its metatable is context.lua's), else NULL. */
static fut_t *to_future(dxl_state_t *S, lua_State *L, int idx) {
  fut_t *f = NULL;
  if (lua_type(L, idx) == LUA_TUSERDATA && lua_getmetatable(L, idx)) {
    if (lua_topointer(L, -1) == S->fut_mt) f = lua_touserdata(L, idx);
    lua_pop(L, 1);
  }
  return f;
}

/* The token the engine parks the code on for the future at idx: a plain pending-or-done one,
** not cancelled nor a retry. 0: none. */
static uint64_t future_token(dxl_state_t *S, lua_State *co, int idx) {
  fut_t *f = to_future(S, co, idx);
  return f && !f->retry && !f->cancelled ? f->token : 0;
}

/* The code suspended with nres values on its stack: a library wait's (PARK, token) or (PARK,
** futures, i) parks the turn on those futures (dx__turn_park); anything else parks nothing.
** A list the binding cannot read as plain futures parks nothing either: every event then
** resumes the code, as it always did. */
static void park_from_yield(dxl_state_t *S, orch_inst_t *inst, dx_turn_t *t, int nres) {
  lua_State *co = inst->co;
  int base = lua_gettop(co) - nres + 1;
  uint64_t buf[16], *tok = buf, one;
  size_t n = 0, cap = sizeof buf / sizeof *buf;
  if (nres < 2 || lua_touserdata(co, base) != &park_key ||
      lua_type(co, base) != LUA_TLIGHTUSERDATA || !lua_checkstack(co, 8)) {
    dx__turn_park(t, NULL, 0);
    return;
  }
  if (lua_type(co, base + 1) == LUA_TUSERDATA) { /* (PARK, future) */
    one = future_token(S, co, base + 1);
    dx__turn_park(t, &one, one ? 1 : 0);
    return;
  }
  if (nres >= 3 && lua_type(co, base + 1) == LUA_TTABLE && lua_isinteger(co, base + 2)) {
    lua_Integer i = lua_tointeger(co, base + 2), last = (lua_Integer)lua_rawlen(co, base + 1);
    for (; i >= 1 && i <= last; i++) {
      uint64_t k;
      lua_rawgeti(co, base + 1, i);
      k = future_token(S, co, lua_gettop(co));
      lua_pop(co, 1);
      if (!k) break;
      if (n == cap) {
        uint64_t *nt = malloc(2 * cap * sizeof *nt);
        if (!nt) break;
        memcpy(nt, tok, n * sizeof *nt);
        if (tok != buf) free(tok);
        tok = nt;
        cap *= 2;
      }
      tok[n++] = k;
    }
    if (i <= last) n = 0; /* one it could not read: park nothing */
  }
  dx__turn_park(t, tok, n);
  if (tok != buf) free(tok);
}

static int h_orch_resume(void *host, void *vinst, dx_turn_t *t) {
  dxl_state_t *S = host;
  orch_inst_t *inst = vinst;
  int nres = 0, rc, nargs = inst->started ? 0 : 2, out;
  char msg[2048];
  inst->started = 1;
  int64_t h0 = heap_now(S);
  guards_enter(S, inst, &inst->budget);
  rc = resume_timed(S, inst, nargs, &nres);
  if (atomic_load(&inst->budget.timed_out)) {
    if (rc == LUA_YIELD || rc == LUA_OK) lua_pop(inst->co, nres);
    dxl_budget_time_message(&inst->budget, msg, sizeof msg);
    dx_turn_set_failure(t, DX_CAT_APPLICATION, "TimeLimitExceeded", msg);
    out = DX_RUN_FAILED;
  } else if (inst->budget.hit) {
    snprintf(msg, sizeof msg, "instruction budget exceeded: the orchestration ran more than %lld "
             "instructions in one turn (an infinite loop?)", (long long)inst->budget.limit);
    dx_turn_set_failure(t, DX_CAT_APPLICATION, "BudgetExceeded", msg);
    out = DX_RUN_FAILED;
  } else if (rc == LUA_YIELD) {
    if (!inst->can) park_from_yield(S, inst, t, nres);
    lua_pop(inst->co, nres);
    out = inst->can ? DX_RUN_CAN : DX_RUN_PENDING;
  } else if (rc == LUA_OK) {
    out = inst->can ? DX_RUN_CAN : finish_ok(inst, nres);
  } else {
    /* still inside the guards: the error object's __tostring is orchestration code */
    dxl_error_message(inst->co, -1, msg, sizeof msg);
    lua_pop(inst->co, 1);
    if (memory_cap_hit(inst, rc, msg)) {
      snprintf(msg, sizeof msg, "memory limit exceeded: the orchestration grew the Lua heap by "
               "more than %lld bytes in one turn", (long long)inst->budget.mem_limit);
      dx_turn_set_failure(t, DX_CAT_APPLICATION, "MemoryLimitExceeded", msg);
    } else {
      dx_turn_set_failure(t, DX_CAT_APPLICATION, "OrchestrationFailed", msg);
    }
    out = DX_RUN_FAILED;
  }
  guards_leave(S, inst, &inst->budget);
  inst->heap += heap_now(S) - h0;
  return out;
}

/* 1 when the function registered for the instance's orchestration and version is still the
** one it runs (duroxide.orchestration may register a name again). */
static int still_registered(dxl_state_t *S, orch_inst_t *inst) {
  lua_State *L = S->L;
  int same = 0;
  if (!lua_checkstack(L, 4)) return 0;
  if (lookup_versions(L, S, inst->name)) {
    lua_getfield(L, -1, "versions");
    lua_getfield(L, -1, inst->version);
    lua_rawgeti(L, LUA_REGISTRYINDEX, inst->box_ref);
    lua_getiuservalue(L, -1, BOX_UV_FN);
    same = lua_rawequal(L, -1, -3);
    lua_pop(L, 4);
  }
  lua_pop(L, 1);
  return same;
}

/* A kept instance starts its next turn: the budgets a new instance's turn would get (1 when
** its code was registered again: it must not go on). t NULL: it waits for its next turn. */
static int h_orch_turn(void *host, void *vinst, dx_turn_t *t) {
  dxl_state_t *S = host;
  orch_inst_t *inst = vinst;
  if (t && inst->reg_gen != S->reg_gen) { /* registrations changed since: look again */
    if (!still_registered(S, inst)) return 1;
    inst->reg_gen = S->reg_gen;
  }
  inst->t = t;
  if (inst->box) inst->box->t = t;
  if (!t) return 0;
  inst->budget.used = 0;
  inst->budget.hit = 0;
  atomic_store(&inst->budget.timed_out, 0);
  inst->ran_ms = 0;
  inst->budget.limit = dx_turn_instruction_budget(t);
  if (inst->budget.limit <= 0) inst->budget.limit = S->opts.turn_instruction_budget;
  inst->budget.time_limit_ms = dx_turn_time_limit(t);
  dxl_budget_start_memory(S, &inst->budget, DXL_TURN_MEMORY_LIMIT);
  return 0;
}

static size_t h_orch_size(void *host, void *vinst) {
  orch_inst_t *inst = vinst;
  (void)host;
  return sizeof *inst + (inst->heap > 0 ? (size_t)inst->heap : 0);
}

static void h_orch_free(void *host, void *vinst) {
  dxl_state_t *S = host;
  orch_inst_t *inst = vinst;
  if (inst->box) inst->box->t = NULL;
  /* A coroutine whose function returned (status ok, nothing on its stack once started) closed
  ** its variables as it returned: nothing is left to run, and the collector frees it. */
  if (inst->co && !(inst->started && lua_status(inst->co) == LUA_OK &&
                    lua_gettop(inst->co) == 0)) {
    /* Closing the coroutine runs pending __close handlers: orchestration code, so under a
    ** fresh budget and the same sandbox. */
    dxl_budget_t b;
    memset(&b, 0, sizeof b);
    b.limit = S->opts.turn_instruction_budget;
    b.top = inst->co; /* not yieldable while closing: the hook raises */
    b.time_limit_ms = inst->budget.time_limit_ms;
    dxl_budget_start_memory(S, &b, DXL_TURN_MEMORY_LIMIT);
    dxl_budget_watch(inst->co); /* its last resume may have run with the hook off */
    guards_enter(S, inst, &b);
    int armed = dx__watch_arm(S->loop, b.time_limit_ms, dxl_budget_alarm, &b);
    lua_resetthread(inst->co);
    if (armed) dx__watch_disarm(S->loop);
    guards_leave(S, inst, &b);
  }
  luaL_unref(S->L, LUA_REGISTRYINDEX, inst->box_ref);
  luaL_unref(S->L, LUA_REGISTRYINDEX, inst->info_ref);
  luaL_unref(S->L, LUA_REGISTRYINDEX, inst->env_ref);
  free(inst);
}

/* {===== ctx primitives =====} */

/* The ctx (argument 1, the instance's box): only the running instance's own, while its turn
** lasts. Another instance's ctx (stashed in a shared upvalue) is refused even while that
** instance's turn is open, so no code schedules into another instance's history; so is a
** ctx kept past its turn, which then fails cleanly instead of touching freed memory. A light
** userdata could carry the box's address: only the full userdata passes. */
static turn_box_t *check_box(lua_State *L) {
  turn_box_t *b = lua_touserdata(L, 1);
  if (b && b == running_box && b->t && lua_type(L, 1) == LUA_TUSERDATA) return b;
  /* no position: luaL_error's would name context.lua, not the caller */
  if (lua_type(L, 1) == LUA_TTABLE) /* a wrapper ({} with __index = ctx) worked before ctx
                                    ** became read-only: say what is wanted */
    lua_pushliteral(L, "expected the ctx itself (a duroxide.Context), got a table: call its "
                       "methods on the ctx the orchestration was given, not on a wrapper");
  else lua_pushliteral(L, "this ctx belongs to a finished orchestration turn or to another "
                     "instance; use the ctx passed to the running orchestration");
  return lua_error(L), NULL;
}

/* {===== sizes checked at the call (docs/lua-api.md "Limits") =====} */

/* What each action's name and input are called in errors, and the name's limit. */
static const struct {
  int kind;
  const char *name, *input;
  size_t name_max;
} action_words[] = {
  {DX_ACT_ACTIVITY, "activity name", "activity input", DX_MAX_NAME_BYTES},
  {DX_ACT_WAIT, "event name", NULL, DX_MAX_EVENT_NAME_BYTES},
  {DX_ACT_SUB, "orchestration name", "sub-orchestration input", DX_MAX_NAME_BYTES},
  {DX_ACT_CHAINED, "orchestration name", "orchestration input", DX_MAX_NAME_BYTES},
  {DX_ACT_CAN, NULL, "continue_as_new input", 0},
  {DX_ACT_STATUS, NULL, "custom status", 0},
  {DX_ACT_KV_SET, "key-value key", "key-value value", DX_MAX_KV_KEY_BYTES},
  {DX_ACT_KV_CLEAR, "key-value key", NULL, DX_MAX_KV_KEY_BYTES},
  {DX_ACT_DEQUEUE, "queue name", NULL, DX_MAX_EVENT_NAME_BYTES},
};

/* Argument idx as a string no longer than max bytes, valid UTF-8, without NUL bytes (NULL when nil):
** the store would refuse it at commit, long after the call. [-0, +0, e] */
static const char *opt_limited(lua_State *L, int idx, const char *what, size_t max) {
  size_t n;
  dx_error_t e;
  const char *s;
  if (lua_type(L, idx) <= LUA_TNIL) return NULL; /* most arguments of an emit: no call */
  s = dxl_check_text(L, idx, what, 1); /* NUL bytes refused, not cut */
  if (!s) return NULL;
  lua_tolstring(L, idx, &n);
  if (max && n > max) luaL_error(L, "%s is %d bytes; the limit is %d bytes", what, (int)n, (int)max);
  if (dx__check_utf8(what, s, &e)) luaL_error(L, "%s", e.msg); /* an identifier: see util.h */
  return s;
}

/* A key-value key at idx: length, NUL bytes (opt_limited) and UTF-8, as every store keeps
** keys as text. Raises naming the problem. [-0, +0, e] */
static const char *kv_key_at(lua_State *L, int idx) {
  const char *key = opt_limited(L, idx, "key-value key", DX_MAX_KV_KEY_BYTES);
  if (key && !dx__utf8_valid(key)) luaL_error(L, "key-value key is not valid UTF-8");
  return key;
}

/* An activity's name (argument 3) as opt_limited checks it. The name checked last is kept in
** a registry slot: a run of one name skips the check (the kept string cannot be collected,
** so an equal argument is that very string). [-0, +0, e] */
static const char *activity_name(lua_State *L, turn_box_t *b) {
  dxl_state_t *S = b->inst->S;
  const char *name;
  int same;
  if (S->act_name_slot > 0) {
    lua_rawgeti(L, LUA_REGISTRYINDEX, S->act_name_slot);
    same = lua_rawequal(L, 3, -1);
    lua_pop(L, 1);
    if (same) return lua_tostring(L, 3);
  }
  name = opt_limited(L, 3, "activity name", DX_MAX_NAME_BYTES);
  if (!name) return NULL;
  lua_pushvalue(L, 3);
  if (S->act_name_slot > 0) lua_rawseti(L, LUA_REGISTRYINDEX, S->act_name_slot);
  else S->act_name_slot = luaL_ref(L, LUA_REGISTRYINDEX);
  return name;
}

/* The session id (argument 5) as opt_limited checks it. The one checked last is kept in the
** box (argument 1, its user value): every step of a session orchestration passes the same
** string, which then is not checked again (a kept string is valid for good). [-0, +0, e] */
static const char *session_id_arg(lua_State *L) {
  const char *sid;
  if (lua_type(L, 5) == LUA_TSTRING) {
    int same;
    lua_getiuservalue(L, 1, BOX_UV_SID);
    same = lua_rawequal(L, 5, -1);
    lua_pop(L, 1);
    if (same) return lua_tostring(L, 5);
  }
  sid = opt_limited(L, 5, "session id", DX_MAX_SESSION_ID_BYTES);
  if (sid && lua_type(L, 5) == LUA_TSTRING) {
    lua_pushvalue(L, 5);
    lua_setiuservalue(L, 1, BOX_UV_SID);
  }
  return sid;
}

/* [-0, +1, m] A new future of the action `token` in box b's turn (argument 1, the ctx), or
** (retry) a retry's, whose user value 1 the caller sets. */
static fut_t *push_future(lua_State *L, dxl_state_t *S, turn_box_t *b, uint64_t token,
                          int retry) {
  fut_t *f = lua_newuserdatauv(L, sizeof *f, retry ? 2 : 1);
  f->token = token;
  f->box = b;
  f->retry = retry;
  f->cancelled = 0;
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->fut_mt_ref);
  lua_setmetatable(L, -2);
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, retry ? 2 : 1);
  return f;
}

/* C.emit(box, kind, name, input, session_id, instance, version, delay_ms, on_moved_fail,
**        tag); future: C.schedule, which returns the action's future instead of its token */
static int emit_impl(lua_State *L, int future) {
  turn_box_t *b = check_box(L);
  dx_action_t a;
  char err[512], num[DX_JSON_INT_MAX];
  char *input = NULL;
  const char *value = NULL;
  uint64_t token = 0;
  int rc;
  size_t i, n;
  const char *name_what = "name", *input_what = "input";
  size_t name_max = DX_MAX_NAME_BYTES;
  memset(&a, 0, sizeof a);
  a.kind = (int)luaL_checkinteger(L, 2);
  for (i = 0; i < sizeof action_words / sizeof action_words[0]; i++)
    if (action_words[i].kind == a.kind) {
      if (action_words[i].name) name_what = action_words[i].name, name_max = action_words[i].name_max;
      if (action_words[i].input) input_what = action_words[i].input;
    }
  a.name = a.kind == DX_ACT_ACTIVITY ? activity_name(L, b) : opt_limited(L, 3, name_what, name_max);
  if (lua_gettop(L) > 4) { /* the common calls pass none of these: all nil, nothing to check */
    a.session_id = session_id_arg(L);
    a.instance = opt_limited(L, 6, "instance id", DX_MAX_INSTANCE_ID_BYTES);
    a.version = opt_limited(L, 7, "version", 0);
    a.delay_ms = (int64_t)luaL_optinteger(L, 8, 0);
  }
  if (a.kind == DX_ACT_KV_SET || a.kind == DX_ACT_KV_CLEAR) kv_key_at(L, 3);
  if (lua_gettop(L) > 8) {
    a.on_moved_fail = lua_toboolean(L, 9);
    a.tag = opt_limited(L, 10, "activity tag", DX_MAX_TAG_BYTES);
    if (a.tag && !*a.tag) return luaL_error(L, "activity tag must not be empty");
  }
  if (a.kind == DX_ACT_SUB && !a.instance &&
      strlen(dx_turn_instance(b->t)) + GENERATED_SUFFIX_MAX > DX_MAX_INSTANCE_ID_BYTES)
    return luaL_error(L, "a generated sub-orchestration id (this instance's id + "
                      "\"::sub::N\") could exceed %d bytes: pass an instance id",
                      DX_MAX_INSTANCE_ID_BYTES);
  if (a.kind == DX_ACT_ACTIVITY || a.kind == DX_ACT_SUB || a.kind == DX_ACT_CHAINED ||
      a.kind == DX_ACT_CAN || a.kind == DX_ACT_KV_SET ||
      (a.kind == DX_ACT_STATUS && !lua_isnil(L, 4))) {
    size_t max = a.kind == DX_ACT_KV_SET ? DX_MAX_KV_VALUE_BYTES : DX_MAX_PAYLOAD_BYTES;
    if (!(a.input = int_text(L, 4, num))) {
      input = dx__lua_to_json(L, 4, input_what, err, sizeof err);
      if (!input) return luaL_error(L, "%s", err);
      if ((n = strlen(input)) > max) {
        free(input);
        return luaL_error(L, "%s is %d bytes; the limit is %d bytes", input_what, (int)n,
                          (int)max);
      }
      a.input = input;
    }
  }
  if (a.kind == DX_ACT_KV_SET && !dx_turn_kv_get(b->t, a.name) &&
      dx_turn_kv_count(b->t) >= DX_MAX_KV_KEYS) {
    free(input);
    return luaL_error(L, "cannot set key-value key '%s': the instance already has %d keys, the "
                      "limit (clear some first)", a.name, DX_MAX_KV_KEYS);
  }
  if (a.kind == DX_ACT_CAN) b->inst->can = 1;
  rc = dx_turn_emit(b->t, &a, &token, &value);
  free(input);
  if (rc != DX_OK) {
    const char *why = dx_turn_error(b->t);
    return luaL_error(L, "%s", why ? why : dx_strerror(rc));
  }
  if (a.kind == DX_ACT_SYSCALL) {
    push_json(L, value, "recorded value");
    return 1;
  }
  if (future && token) push_future(L, b->inst->S, b, token, 0);
  else lua_pushinteger(L, (lua_Integer)token);
  return 1;
}

static int p_emit(lua_State *L) { return emit_impl(L, 0); }
static int p_schedule(lua_State *L) { return emit_impl(L, 1); }

/* Argument 1 as a future (raises when it is not one). */
static fut_t *check_future(lua_State *L) {
  fut_t *f = to_future(lua_touserdata(L, lua_upvalueindex(1)), L, 1);
  if (!f) luaL_error(L, "a durable future expected, got %s", luaL_typename(L, 1));
  return f;
}

/* The future f's box: the running instance's own, while its turn lasts (else raises). */
static turn_box_t *future_box(lua_State *L, fut_t *f) {
  if (f->box == running_box && f->box->t) return f->box;
  lua_pushliteral(L, "this future belongs to a finished orchestration turn or to another "
                     "instance; await futures in the orchestration that scheduled them");
  return lua_error(L), NULL;
}

#define FUT_SPECIAL 3 /* C.fpoll's state of a cancelled future or a retry: context.lua's */

/* C.fpoll(future) -> state, value, err, order (state: 0 pending, 1 ok, 2 error, 3 special) */
static int p_fpoll(lua_State *L) {
  fut_t *f = check_future(L);
  turn_box_t *b;
  const char *data = NULL;
  const dx_failure_t *fail = NULL;
  uint64_t order = 0;
  int st;
  b = future_box(L, f);
  if (f->retry || f->cancelled) {
    lua_pushinteger(L, FUT_SPECIAL);
    return 1;
  }
  st = dx_turn_poll(b->t, f->token, &data, &fail, &order);
  lua_pushinteger(L, st);
  if (st == DX_FUT_OK) {
    if (!data) lua_pushnil(L);
    else push_json(L, data, "stored result");
    lua_pushnil(L);
  } else if (st == DX_FUT_ERR) {
    lua_pushnil(L);
    dxl_push_error(L, fail && fail->message ? fail->message : "failed",
                   fail ? dx__category_name(fail->category) : "application",
                   fail ? fail->kind : NULL);
  } else {
    lua_pushnil(L);
    lua_pushnil(L);
  }
  lua_pushinteger(L, (lua_Integer)order);
  return 4;
}

/* [-0, +1, e] push stored JSON as a Lua value (nil for NULL) */
static void push_stored(lua_State *L, const char *json) {
  if (!json) lua_pushnil(L);
  else push_json(L, json, "stored value");
}

/* C.kv_get(box, key) -> value | nil */
static int p_kv_get(lua_State *L) {
  turn_box_t *b = check_box(L);
  const char *key = kv_key_at(L, 2);
  push_stored(L, key ? dx_turn_kv_get(b->t, key) : NULL);
  return 1;
}

/* C.kv_key_check(key): raises as a write would for a bad key */
static int p_kv_key_check(lua_State *L) {
  kv_key_at(L, 1);
  return 0;
}

/* C.kv_all(box) -> { {key, value, updated_ms}, ... } ascending key */
static int p_kv_all(lua_State *L) {
  turn_box_t *b = check_box(L);
  size_t i, n = dx_turn_kv_count(b->t);
  lua_createtable(L, (int)n, 0);
  for (i = 0; i < n; i++) {
    const dx_kv_entry_t *e = dx_turn_kv_at(b->t, i);
    lua_createtable(L, 3, 0);
    lua_pushstring(L, e->key);
    lua_rawseti(L, -2, 1);
    push_stored(L, e->value);
    lua_rawseti(L, -2, 2);
    lua_pushinteger(L, (lua_Integer)e->updated_ms);
    lua_rawseti(L, -2, 3);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* C.custom_status(box) -> value | nil */
static int p_custom_status(lua_State *L) {
  turn_box_t *b = check_box(L);
  push_stored(L, dx_turn_custom_status(b->t));
  return 1;
}

/* C.fcancel(future [, drop]) -> true when it was still pending (now cancelled: it resolves
** to the "Cancelled" error), false when it had completed. drop (select's losers): the action
** is withdrawn, the future not marked. A retry's is context.lua's. */
static int p_fcancel(lua_State *L) {
  fut_t *f = check_future(L);
  turn_box_t *b;
  int drop = lua_toboolean(L, 2);
  if (f->retry) return luaL_error(L, "cancel: a retry future is cancelled by context.lua");
  b = future_box(L, f);
  if (f->cancelled && !drop) {
    lua_pushboolean(L, 1);
    return 1;
  }
  if (!drop && dx_turn_poll(b->t, f->token, NULL, NULL, NULL) != DX_FUT_PENDING) {
    lua_pushboolean(L, 0);
    return 1;
  }
  dx_turn_cancel(b->t, f->token);
  if (!drop) f->cancelled = 1;
  lua_pushboolean(L, 1);
  return 1;
}

/* C.fretry(ctx) -> future, state: a retry's future (context.lua runs it) and its private
** state table, which C.fstate gives back. */
static int p_fretry(lua_State *L) {
  dxl_state_t *S = lua_touserdata(L, lua_upvalueindex(1));
  push_future(L, S, check_box(L), 0, 1);
  lua_createtable(L, 0, 4);
  lua_pushvalue(L, -1);
  lua_setiuservalue(L, -3, 1);
  return 2;
}

/* C.fstate(future) -> a retry's state table (only for the instance it belongs to), nil for
** any other future */
static int p_fstate(lua_State *L) {
  fut_t *f = check_future(L);
  if (!f->retry) return 0;
  future_box(L, f);
  lua_getiuservalue(L, 1, 1);
  return 1;
}

/* C.future_mt(mt): context.lua's metatable of futures, set once as it loads */
static int p_future_mt(lua_State *L) {
  dxl_state_t *S = lua_touserdata(L, lua_upvalueindex(1));
  luaL_checktype(L, 1, LUA_TTABLE);
  if (S->fut_mt_ref > 0) luaL_unref(L, LUA_REGISTRYINDEX, S->fut_mt_ref);
  lua_settop(L, 1);
  S->fut_mt = lua_topointer(L, 1);
  S->fut_mt_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  return 0;
}

/* C.session_worker(box, session_id) -> worker id or nil */
static int p_session_worker(lua_State *L) {
  turn_box_t *b = check_box(L);
  const char *w = dx_turn_session_worker(b->t, luaL_checkstring(L, 2));
  if (w) lua_pushstring(L, w);
  else lua_pushnil(L);
  return 1;
}

static int p_replaying(lua_State *L) {
  turn_box_t *b = check_box(L);
  lua_pushboolean(L, dx_turn_is_replaying(b->t));
  return 1;
}

static int p_trace(lua_State *L) {
  turn_box_t *b = check_box(L);
  dx_turn_trace(b->t, (int)luaL_checkinteger(L, 2), luaL_checkstring(L, 3));
  return 0;
}

/* C.texts(a, b) -> true when both are non-empty strings: context.lua's fast paths check names
** with it (type() interns its answer, a string, on every call). */
static int p_texts(lua_State *L) {
  lua_pushboolean(L, lua_type(L, 1) == LUA_TSTRING && lua_rawlen(L, 1) > 0 &&
                     lua_type(L, 2) == LUA_TSTRING && lua_rawlen(L, 2) > 0);
  return 1;
}

/* C.on_main() -> true on the running instance's own coroutine: context.lua's waits suspend
** only there (a yield inside coroutine.wrap/resume would return to the code with nothing
** resolved). The coroutine itself is not in ctx, where any code holding the ctx could reach
** it (dxl_orch_foreign_thread). */
static int p_on_main(lua_State *L) {
  lua_pushboolean(L, running_box && running_box->inst->co == L);
  return 1;
}

void dxl_orch_register(lua_State *L, int prims) {
  dxl_state_t *S = dxl_state(L);
  static const luaL_Reg fns[] = {{"emit", p_emit}, {"schedule", p_schedule},
                                 {"fpoll", p_fpoll}, {"fcancel", p_fcancel},
                                 {"fretry", p_fretry}, {"fstate", p_fstate},
                                 {"future_mt", p_future_mt},
                                 {"replaying", p_replaying}, {"trace", p_trace},
                                 {"session_worker", p_session_worker},
                                 {"kv_get", p_kv_get}, {"kv_all", p_kv_all},
                                 {"kv_key_check", p_kv_key_check},
                                 {"custom_status", p_custom_status}, {"texts", p_texts},
                                 {"on_main", p_on_main}, {NULL, NULL}};
  lua_pushvalue(L, prims);
  lua_pushlightuserdata(L, S); /* upvalue 1 of each: check_box's state */
  luaL_setfuncs(L, fns, 1);
  lua_pushlightuserdata(L, &park_key);
  lua_setfield(L, -2, "PARK");
  lua_pop(L, 1);
}

/* The activity half lives in activity.c. */
int dxl_h_activity_lookup(void *host, const char *name);
void dxl_h_activity_start(void *host, dx_activity_t *a);
void dxl_h_activity_abort(void *host, dx_activity_t *a);
void dxl_h_session_claimed(void *host, const char *session_id, const char *how);
void dxl_h_session_released(void *host, const char *session_id, const char *reason);
void dxl_h_session_claimed_by(void *host, const char *session_id, const char *how,
                              const char *worker_id);
void dxl_h_session_released_by(void *host, const char *session_id, const char *reason,
                               const char *worker_id);

const dx_host_methods_t dxl_host_methods = {
  5,
  h_orch_lookup,
  h_orch_start,
  h_orch_resume,
  h_orch_free,
  dxl_h_activity_lookup,
  dxl_h_activity_start,
  dxl_h_activity_abort,
  dxl_h_session_claimed,
  dxl_h_session_released,
  dxl_h_session_claimed_by,
  dxl_h_session_released_by,
  dxl_h_orch_capabilities,
  h_orch_turn,
  h_orch_size,
};
