/*
** dxlua.h -- shared state of the Lua binding (internal to bindings/lua and the host).
**
** One dxl_state_t per lua_State, kept in the registry, so `require "duroxide"` may run more
** than once (busted's insulation does) without losing registrations.
*/
#ifndef DX_LUA_H
#define DX_LUA_H

#include <lauxlib.h>
#include <lua.h>
#include <stdatomic.h>

#include "duroxide.h"
#include "spare.h"

typedef struct dxl_alloc_s dxl_alloc_t;

/* A bound on untrusted code (budget.c): instructions and heap growth while it is entered. */
typedef struct dxl_budget_s {
  lua_State *top;      /* the thread that yields out when the budget runs out (NULL: raise) */
  int64_t used, limit; /* instructions (allocations are charged too) */
  int hit;             /* exhausted: every later instruction fails */
  atomic_int timed_out; /* set by the watchdog thread (dxl_budget_alarm): the turn time limit */
  atomic_int counting; /* the count hook is armed for the resume (dxl_budget_resume_begin) */
  atomic_int count_req; /* the watchdog asked the loop thread to arm it (dxl_budget_count) */
  int64_t time_limit_ms; /* for the message; 0: no time limit */
  struct dxl_running_s *running; /* coroutines the code resumed, innermost first (charged.c) */
  int64_t mem_limit;   /* heap growth allowed since dxl_budget_start_memory; 0: none */
  int64_t mem_base;
  int mem_refused;     /* an allocation was refused for mem_limit */
  dxl_alloc_t *A;
  struct dxl_budget_s *prev;
  struct dxl_budget_s *prev_in_state; /* the state's budget entered before this one */
} dxl_budget_t;

/* A string kept in a registry slot with its C copy (activity.c dxl_push_kept_str). */
typedef struct {
  int ref; /* 0: none yet */
  char text[128];
} dxl_kept_str_t;

typedef struct dxl_state_s {
  lua_State *L;             /* main thread */
  uv_loop_t *loop;
  int reg_ref;              /* registry ref of {orchestrations=, activities=, hooks=, ...} */
  int context_mt_ref;       /* metatable of each ctx's fields table (context.lua's Fields) */
  int actx_mt_ref;          /* activity context metatable (Actx, duroxide/activity.lua) */
  int prims_ref;            /* primitives table passed to the Lua layer */
  dx_options_t opts;        /* from duroxide.configure{} */
  char *worker_node_id;     /* storage behind opts.worker_node_id */
  char *store_dir;          /* from duroxide.configure{store=} */
  size_t store_max_size;    /* from duroxide.configure{store_max_size=}; 0 = the store's own */
  int in_orchestration;     /* >0 while orchestration code runs (sandbox guards check it) */
  int loop_depth;           /* >0 while a callback runs: driving the loop is then refused */
  dx_runtime_t *runtime;    /* the runtime running in this state, if any */
  void *timers;             /* pending C.after timers (activity.c), cancelled at close */
  int shared_runtimes;      /* runtimes started with {shared = true} (duroxide.testing) */
  int running_activities;
  int idle_threads;         /* finished activity coroutines kept for reuse (activity.c) */
  void *stepping;           /* the activity runs being resumed now, innermost first (activity.c) */
  lua_State *hot_co;        /* the activity coroutine kept last (registry slot hot_ref) */
  int hot_ref;
  /* registry refs (0: not made yet) of tables the loop reaches per activity or per turn:
  ** an integer key is found faster than a pointer or name key */
  int runs_ref, idle_ref, handle_mt_ref;
  const void *handle_mt;    /* the activity handle metatable's (handle_mt_ref): test_handle */
  int act_name_slot;        /* registry slot of the activity name C.emit checked last */
  int fut_mt_ref;           /* registry slot of the futures' metatable (orch.c C.future_mt) */
  const void *fut_mt;       /* its address: a future is a userdata with that metatable */
  dx__spare_t spare_runs;   /* freed activity runs (activity.c), reused */
  unsigned reg_gen;         /* counts changes of the orchestration registrations */
  /* the activity function looked up last (activity.c): the runtime looks a name up and then
  ** starts it, and a worker runs the same few names over and over. act_fn_ref 0: none. */
  int act_fn_ref;
  char act_fn_name[DX_MAX_NAME_BYTES + 1];
  /* strings every activity's actx holds, pushed from a registry slot while they repeat (a
  ** worker's id, the name it ran last): lua_pushstring hashes and interns each time */
  dxl_kept_str_t kept_worker, kept_name;
  int session_handler_set;  /* duroxide.session_handler{} was called (never unset) */
  dxl_alloc_t *alloc;       /* the allocator wrapper that enforces memory budgets */
  int orch_env_ref;         /* globals of the orchestration running now (LUA_NOREF: none) */
  struct dxl_caps_s *caps;  /* registered orchestrations for the store thread (capabilities.c) */
} dxl_state_t;

/* Registry key of the state userdata. */
extern const char dxl_state_key;

/* [-0, +0, e] The state of this lua_State (created by luaopen_duroxide). */
dxl_state_t *dxl_state(lua_State *L);

/* [-0, +1, e] push registrations[table][name] ("orchestrations", "activities" or "hooks");
** returns its Lua type (LUA_TNIL when nothing is registered under that name). */
int dxl_push_registered(lua_State *L, dxl_state_t *S, const char *table, const char *name);

/* activity.c: forget the activity function looked up last (duroxide.activity registers one). */
void dxl_activity_fn_forget(lua_State *L, dxl_state_t *S);
/* activity.c: the state closes: free the kept activity runs (later ones go to free()). */
void dxl_activity_state_close(dxl_state_t *S);

/* capabilities.c: after registrations change (loop thread), refresh the snapshot the store
** thread reads; the host method; release at state close. */
void dxl_caps_rebuild(lua_State *L, dxl_state_t *S);
int dxl_h_orch_capabilities(void *host, uint64_t known, uint64_t *gen,
                            dx_orch_capability_t **caps, size_t *n);
void dxl_caps_free(dxl_state_t *S);

/* Host methods for the engine (orchestrations + activities in this Lua state). */
extern const dx_host_methods_t dxl_host_methods;

/* Protected call with traceback; on error, leaves nothing on the stack and writes the
** message (without traceback when `with_traceback` is 0) into errbuf. [-(nargs+1), +nres, -] */
int dxl_pcall(lua_State *L, int nargs, int nres, char *errbuf, size_t errlen, int with_traceback);

/* Message of the error object at idx: a duroxide.Error's message, a string, or tostring.
** Written into buf. [-0, +0, m] */
const char *dxl_error_message(lua_State *L, int idx, char *buf, size_t len);

/* [-0, +0, e] The string (or number) at idx; raises "<what> must be a string, got T" or
** "<what> must not contain a NUL byte" (C would cut the text there). With `optional`, none or
** nil gives NULL. */
const char *dxl_check_text(lua_State *L, int idx, const char *what, int optional);

/* {===== lclient.c / lmanage.c: the client =====} */
/* [-0, +0, e] the open client at index 1 (raises when closed or not a client). */
dx_client_t *dxl_check_client(lua_State *L);
/* [-0, +2, m] nil, duroxide.Error from a dx_error_t; returns 2. */
int dxl_client_fail(lua_State *L, const dx_error_t *err);
/* [-0, +1, m] the Lua value of JSON text the engine produced (nil for NULL or bad text). */
void dxl_push_decoded(lua_State *L, const char *json);
/* lrecords.c: [-0, +1, m] a history event / an instance status as the table its JSON form
** (dx_event_to_json / dx_instance_info_to_json) decodes to. */
void dxl_push_event(lua_State *L, const dx_event_t *e);
void dxl_push_status(lua_State *L, const char *id, const dx_instance_info_t *info);
/* client:list, describe, executions, delete, purge, prune, terminate */
extern const luaL_Reg dxl_manage_methods[];

/* [-0, +1, m] push a duroxide.Error table {message=, category=, kind=}. */
void dxl_push_error(lua_State *L, const char *message, const char *category, const char *kind);

/* {===== sandbox.c: what orchestration code can reach =====} */

/* Install the guards that make non-deterministic, I/O and state-changing functions raise
** inside orchestrations; again on every luaopen (busted restores the globals per file). */
void dxl_install_sandbox(lua_State *L, dxl_state_t *S);
/* Wrap the C functions of the table at idx (those in `names`, NULL-terminated, or all when
** names is NULL) so they raise inside orchestrations with "<prefix><name> is not available in
** orchestrations; <instead>". [-0, +0, e] */
void dxl_guard_functions(lua_State *L, dxl_state_t *S, int idx, const char *const *names,
                         const char *prefix, const char *instead);
/* Guard the methods of luv handles (after luaopen_luv). [-0, +0, e] */
void dxl_guard_luv_handles(lua_State *L, dxl_state_t *S);
/* At registration: give the orchestration function at fidx its own _ENV cell so each instance
** can see its own globals. [-0, +0, e] */
void dxl_sandbox_adopt(lua_State *L, int fidx);
/* At instance start: registry refs of the function's sandbox info and of a fresh globals
** table for one instance (LUA_NOREF both when the function reads no globals). [-0, +0, e] */
void dxl_sandbox_new_env(lua_State *L, int fidx, int *info_ref, int *env_ref);
/* Bind the instance's globals while its code runs; unbind after. [-0, +0, -] */
void dxl_sandbox_enter(lua_State *L, dxl_state_t *S, int info_ref, int env_ref);
void dxl_sandbox_leave(lua_State *L, dxl_state_t *S, int info_ref);

/* {===== charged.c, pattern.c: library functions whose C loops the hook cannot see =====} */

/* Wrap string.find/match/gmatch/gsub (pattern.c), table.move and string.rep (before the
** libraries are made read-only): inside orchestrations they charge their work to the turn's
** budget; elsewhere they call the stock functions. [-0, +0, e] */
void dxl_charged_install(lua_State *L, dxl_state_t *S);
void dxl_pattern_install(lua_State *L, dxl_state_t *S);
/* Replace lib[name] by a C closure of each fns entry with upvalues (stock function, S, error
** handler); fns ends with {NULL, NULL}. [-0, +0, e] */
void dxl_wrap_stock(lua_State *L, dxl_state_t *S, const char *lib, const luaL_Reg *fns);
/* In such a wrapper: orchestration code is running. */
int dxl_stock_sandboxed(lua_State *L);
/* In such a wrapper: call the stock function with the wrapper's arguments and return its
** results; its own errors name the wrapper's caller, as from a direct call. */
int dxl_call_stock(lua_State *L);
/* The same, while the stock function resumes coroutine co (NULL: none): see dxl_running_t. */
int dxl_call_stock_on(lua_State *L, lua_State *co);

/* [-0, +1, m] registry[*ref]: the table made (and referenced) on first use, or the metatable
** luaL_newmetatable(L, mt_name) gives when mt_name is not NULL. */
void dxl_push_kept(lua_State *L, int *ref, const char *mt_name);

/* {===== heap.c: small blocks for the Lua state =====} */

#include "heap.h"

/* {===== budget.c: instruction and memory budgets =====} */

/* Wrap the state's allocator (once); uninstall before the state's memory goes away. */
void dxl_budget_install(lua_State *L, dxl_state_t *S);
void dxl_budget_uninstall(lua_State *L, dxl_state_t *S);
/* Charge instructions run on thread L (and threads it creates) to the entered budget. */
void dxl_budget_watch(lua_State *L);
void dxl_budget_enter(dxl_state_t *S, dxl_budget_t *b);
void dxl_budget_leave(dxl_budget_t *b);
/* [-0, +0, e] Charge n units of work done in C (pattern matching) to the entered budget;
** once it runs out, raise its error (sticky, like the hook's). No budget entered: nothing. */
void dxl_budget_charge(lua_State *L, int64_t n);
/* The watchdog thread's alarm (core/src/watchdog.h dx__watch_arm) for budget `arg`: the turn
** outlived its time limit. Any thread; sets a flag and arms the hook of the budget's top thread
** to fire on its next instruction, which then fails like an exhausted budget. */
void dxl_budget_alarm(void *arg);
/* Before a resume of b->top under the entered budget b: 1 when the count hook may wait
** (dxl_budget_count, the watchdog's early call DXL_COUNT_AFTER_MS into the resume): the top's
** hook is then off; 0 when it must count from the first instruction (a small budget) and is
** on. If the caller cannot arrange that call it must call dxl_budget_count_now itself. */
#define DXL_COUNT_AFTER_MS 2
int dxl_budget_resume_begin(dxl_budget_t *b);
/* The watchdog's early call for budget arg (any thread, as dxl_budget_alarm): the first asks
** the loop thread to arm the count hook at its next allocation and returns 1 (call again);
** the next, when the code allocated nothing meanwhile, arms it from this thread. */
int dxl_budget_count(void *arg);
/* Arm the count hook of b's top thread and of every coroutine on its resume chain now. */
void dxl_budget_count_now(dxl_budget_t *b);
/* A coroutine resumed under the entered budget (coroutine.resume / wrap, charged.c): while it
** is pushed, the alarm arms its hook as well, so a long C call inside it ends too. Lives on
** the C stack of the resuming call. */
typedef struct dxl_running_s {
  lua_State *L;
  dxl_budget_t *b; /* NULL: no budget was entered */
  struct dxl_running_s *prev;
} dxl_running_t;
void dxl_budget_running_push(dxl_running_t *n, lua_State *co);
void dxl_budget_running_pop(dxl_running_t *n);
/* The failure message of a budget that ran past its time limit, in buf. */
const char *dxl_budget_time_message(const dxl_budget_t *b, char *buf, size_t cap);
/* The entered budget's time limit in ms (0: none, or no budget entered). */
int64_t dxl_budget_time_limit(void);
/* The entered budget has run out (its failure is being raised). */
int dxl_budget_exhausted(void);
/* Allow `limit` bytes of heap growth from now on (0: no cap). */
void dxl_budget_start_memory(dxl_state_t *S, dxl_budget_t *b, int64_t limit);
/* Bytes the state's allocator holds (allocated minus freed since the wrapper went in). */
int64_t dxl_budget_heap(dxl_state_t *S);

/* Heap growth one orchestration turn may cause, and the bounds on an error object's
** __tostring (run outside the turn). */
#define DXL_TURN_MEMORY_LIMIT ((int64_t)256 << 20)
#define DXL_TOSTRING_INSTRUCTIONS 1000000
#define DXL_TOSTRING_MEMORY ((int64_t)16 << 20)

/* Stop every pending actx:sleep / C.after timer without calling into Lua: the state is
** closing. Their memory is freed when the loop next runs the close callbacks. */
void dxl_cancel_timers(dxl_state_t *S);
/* End the activities the runtime handed back at shutdown (their coroutines are closed, <close>
** handlers run): the duroxide-lua worker calls it once its runtime has stopped. */
void dxl_end_abandoned_activities(dxl_state_t *S);
/* Continue the activities whose steps waited while their runtime was stalled (tests). */
void dxl_resume_deferred(dxl_state_t *S);
/* coroutine.running() returned co (sandbox.c): an activity whose coroutine it is keeps it
** from the next activities (the code may close or resume it later). */
void dxl_activity_thread_seen(dxl_state_t *S, lua_State *co);

/* Orchestration primitives for duroxide/context.lua (registered into the prims table). */
void dxl_orch_register(lua_State *L, int prims_idx);
/* 1 when co is an orchestration instance's coroutine, not the running instance's: only the
** engine may resume or close it (charged.c's coroutine.resume / coroutine.close refuse). */
int dxl_orch_foreign_thread(lua_State *co);
/* Activity primitives for duroxide/activity.lua. */
void dxl_activity_register(lua_State *L, int prims_idx);

/* Client and runtime constructors (lua_CFunctions). */
int dxl_client_new(lua_State *L);
int dxl_runtime_new(lua_State *L);

/* Apply a Lua options table at idx onto opts (strings are kept alive in S). Raises on a bad
** value with a message naming the option. [-0, +0, e] */
void dxl_options_from_table(lua_State *L, int idx, dxl_state_t *S, dx_options_t *opts);

/* Run the loop once (blocking at most `max_ms`); refuses from inside a callback. */
int dxl_run_loop_once(lua_State *L, dxl_state_t *S, int64_t max_ms);

/* Open the standard libraries and `duroxide` (bound to `loop`) in L, set `arg` (app, argv)
** and package.path (the app's directory first), then run the app script -- all under one
** protected call. LUA_OK, or an error code with the message in errbuf. */
int dxl_load_app(lua_State *L, const char *app, uv_loop_t *loop, int argc, char **argv,
                 char *errbuf, size_t errlen, int with_traceback);

/* Load embedded Lua sources (generated). */
int dxl_load_embedded(lua_State *L, const char *name);

/* luaopen for the luv library bound to the runtime loop. */
int dxl_open_luv(lua_State *L);
uv_loop_t *dxl_pick_loop(lua_State *L);

/* [-0, +0, e] Set the duroxide.testing primitives (_clock_now, _run_once, _replay, ...) into
** the table at the top of the stack (ltesting.c). */
void dxl_testing_register(lua_State *L);

#endif
