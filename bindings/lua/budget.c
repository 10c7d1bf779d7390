/*
** budget.c -- bounds on Lua code the worker does not trust to stop: an instruction budget
** (a count hook) and a memory cap (a wrapper around the state's allocator).
**
** A budget is "entered" around a resume of an orchestration (or a protected tostring of an
** error object). Once its instructions run out it stays exhausted: the hook then fires on
** every instruction and fails again, so neither pcall nor a C function calling back into Lua
** (table.sort, string.gsub, tostring, metamethods) can swallow the failure -- each error
** escapes one more level until the budget's top thread can yield out to the engine.
** Allocations are charged too, so a loop of large C allocations (string.rep) cannot run
** for long between two hooks; so is work done in C that no hook sees (pattern matching,
** pattern.c, through dxl_budget_charge).
** A single C call the hook never sees (sorting millions of entries) is bounded by the turn
** time limit instead: the watchdog thread calls dxl_budget_alarm when the turn outlives it,
** and the hook fires at the next instruction and fails the same sticky way.
** Once set, a count hook costs a call before every VM instruction whatever its count (Lua 5.4
** traps each one), about a tenth of a short turn's CPU. So a resume under a budget of at least
** DXL_COUNT_EAGER_BELOW starts without it, and it is armed DXL_COUNT_AFTER_MS into the resume,
** or up to 20 ms after that (dxl_budget_count): such a budget counts from then on, some
** milliseconds' worth of instructions later, and turns that end sooner never pay for it. The
** memory cap and charged C work still see everything: a first hit arms the hook of every
** thread on the resume chain.
*/
#include <dlfcn.h> /* dladdr, RTLD_NODELETE: _GNU_SOURCE */
#include <sys/auxv.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dxlua.h"

#define HOOK_EVERY 10000
/* Smaller budgets count from a resume's first instruction (a lazily armed hook lets up to
** ~22 ms of instructions, a few million, pass uncounted). */
#define DXL_COUNT_EAGER_BELOW 1000000
#define BYTES_PER_INSTRUCTION 16 /* allocation charged against the instruction budget */

struct dxl_alloc_s {
  lua_Alloc f;   /* the allocator the state had before */
  void *ud;
  int64_t delta; /* bytes allocated minus bytes freed since the wrapper was installed */
  dxl_heap_t *heap; /* small blocks (heap.c); NULL: f does everything */
  lua_State *L;     /* the main thread: handed back to f once the state closes */
  int closing;      /* the state is closing: new blocks come from f */
  dxl_budget_t *cur; /* the innermost budget entered on this state (found without TLS) */
};

/* The budget running now on this OS thread (one Lua state runs on one thread at a time). */
static _Thread_local dxl_budget_t *current;

static void budget_hook(lua_State *L, lua_Debug *ar);

/* Make thread L's hook fire on its next instruction (a thread under a budget whose hook was
** not armed yet has none; another hook is left alone). */
static void escalate(lua_State *L) {
  lua_Hook h;
  if (L && ((h = lua_gethook(L)) == budget_hook || h == NULL))
    lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
}

static void escalate_chain(dxl_budget_t *b);
static void arm_chain(dxl_budget_t *b, int count);

/* The state closes and its last small block went back: f takes the state over again. */
static void release(dxl_alloc_t *A) {
  lua_setallocf(A->L, A->f, A->ud);
  dxl_heap_free_all(A->heap);
  free(A);
}

/* lua_Alloc's contract over two sources: small blocks from the heap, others (and all when
** the heap is off or used up) from f. A block moves between them by copy when it is resized
** across DXL_HEAP_MAX. Always inlined: a call per Lua allocation (its register saves) cost
** about as much as its body. */
static inline __attribute__((always_inline)) void *raw_alloc(dxl_alloc_t *A, void *ptr,
                                                             size_t osize, size_t nsize) {
  dxl_heap_t *H = A->heap;
  int mine = H && ptr && dxl_heap_owns(H, ptr);
  void *n;
  if (!mine && (!H || nsize == 0 || nsize > DXL_HEAP_MAX || A->closing))
    return A->f(A->ud, ptr, osize, nsize);
  if (nsize == 0) {
    dxl_heap_free(H, ptr, osize);
    if (A->closing && dxl_heap_live(H) == 0) release(A);
    return NULL;
  }
  if (mine && nsize <= DXL_HEAP_MAX && dxl_heap_same_class(osize, nsize)) return ptr;
  n = nsize <= DXL_HEAP_MAX && !A->closing ? dxl_heap_alloc(H, nsize) : NULL;
  if (!n && !(n = A->f(A->ud, NULL, 0, nsize))) return NULL; /* ptr is left as it was */
  if (ptr) {
    memcpy(n, ptr, osize < nsize ? osize : nsize);
    if (mine) dxl_heap_free(H, ptr, osize);
    else A->f(A->ud, ptr, osize, 0);
  }
  return n;
}

/* Every case (guard_alloc takes the common ones without it, with the same accounting: a
** change to the budget rules here is a change there too). Kept out of line: its calls make
** it save registers, which the common cases then need not pay for. */
static __attribute__((noinline)) void *guard_alloc_all(dxl_alloc_t *A, void *ptr,
                                                         size_t osize, size_t nsize) {
  size_t old = ptr ? osize : 0;
  dxl_budget_t *b = A->cur, *q;
  void *r;
  if (A->closing) return raw_alloc(A, ptr, osize, nsize); /* A may be gone on return */
  /* the watchdog asked (dxl_budget_count): this thread walks its own frames (a budget inside
  ** another, an error object's __tostring in a turn, answers for the outer one too) */
  for (q = b; q; q = q->prev_in_state)
    if (atomic_load_explicit(&q->count_req, memory_order_relaxed) &&
        !atomic_load_explicit(&q->counting, memory_order_relaxed))
      arm_chain(q, 0);
  if (b && nsize > old) {
    int64_t grow = A->delta - b->mem_base + (int64_t)(nsize - old);
    if (b->mem_limit > 0 && grow > b->mem_limit) {
      b->mem_refused = 1;
      return NULL; /* Lua collects garbage and retries once before raising "not enough memory" */
    }
    b->used += (int64_t)((nsize - old) / BYTES_PER_INSTRUCTION);
    if (b->used > b->limit && !b->hit) {
      b->hit = 1;
      escalate_chain(b); /* lua_sethook is safe here: lua.c calls it from a signal handler */
    }
  }
  r = raw_alloc(A, ptr, osize, nsize);
  if (r || nsize == 0) A->delta += (int64_t)nsize - (int64_t)old;
  return r;
}

/* The state's allocator. The common cases (a pool block handed out, resized in its class or
** freed, with at most one budget entered, none asking for a count, nothing over a limit) are
** done here without a call, the way guard_alloc_all would do them; anything else goes there,
** with nothing changed yet. */
static void *guard_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  dxl_alloc_t *A = ud;
  dxl_heap_t *H = A->heap;
  dxl_budget_t *b = A->cur;
  /* A free of nothing (Lua frees the empty parts of tables this way, about one call in five):
  ** what every path would end with, without their work. */
  if (!ptr && nsize == 0) return NULL;
  if (H && !A->closing &&
      (!b || (!b->prev_in_state && !atomic_load_explicit(&b->count_req, memory_order_relaxed)))) {
    if (nsize == 0) {
      if (dxl_heap_owns(H, ptr)) {
        dxl_heap_free(H, ptr, osize);
        A->delta -= (int64_t)osize;
        return NULL;
      }
    } else if (nsize <= DXL_HEAP_MAX &&
               (!ptr || (dxl_heap_owns(H, ptr) && dxl_heap_same_class(osize, nsize)))) {
      /* a new block, or one resized within its size class (it stays where it is) */
      size_t old = ptr ? osize : 0;
      int64_t used = 0;
      void *r;
      if (b && nsize > old) {
        used = b->used + (int64_t)((nsize - old) / BYTES_PER_INSTRUCTION);
        if ((b->mem_limit > 0 && A->delta - b->mem_base + (int64_t)(nsize - old) > b->mem_limit) ||
            (used > b->limit && !b->hit))
          return guard_alloc_all(A, ptr, osize, nsize);
      }
      if ((r = ptr ? ptr : dxl_heap_alloc(H, nsize)) != NULL) {
        if (b && nsize > old) b->used = used;
        A->delta += (int64_t)nsize - (int64_t)old;
        return r;
      }
    }
  }
  return guard_alloc_all(A, ptr, osize, nsize);
}

/* lua_close unloads C modules (package's __gc) before it frees the last blocks, and those
** frees still call guard_alloc: with a heap, this module stays mapped until the process ends.
** 1 when it does (or is not a loadable module at all). */
static int pin_module(void) {
  Dl_info info, prog;
  if (!dladdr((void *)guard_alloc, &info) || !info.dli_fname) return 0;
  if (dladdr((void *)getauxval(AT_ENTRY), &prog) && prog.dli_fbase == info.dli_fbase)
    return 1; /* linked into the program itself */
  return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE) != NULL;
}

void dxl_budget_install(lua_State *L, dxl_state_t *S) {
  dxl_alloc_t *A;
  if (S->alloc) return;
  if (!(A = calloc(1, sizeof *A))) luaL_error(L, "out of memory");
  A->f = lua_getallocf(L, &A->ud);
  A->heap = dxl_heap_new();
  if (A->heap && !pin_module()) {
    dxl_heap_free_all(A->heap);
    A->heap = NULL;
  }
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  A->L = lua_tothread(L, -1);
  lua_pop(L, 1);
  lua_setallocf(L, guard_alloc, A);
  S->alloc = A;
}

/* Called as the state closes (its state userdata's __gc): no more budgets. Blocks the heap
** still holds are freed by the rest of lua_close; the last one hands the state back to f
** (release). Without a heap, or with no block out, that happens now. */
void dxl_budget_uninstall(lua_State *L, dxl_state_t *S) {
  dxl_alloc_t *A = S->alloc;
  if (!A) return;
  S->alloc = NULL;
  A->closing = 1;
  (void)L;
  if (!A->heap || dxl_heap_live(A->heap) == 0) release(A);
}

static int timed_out(dxl_budget_t *b) {
  return atomic_load_explicit(&b->timed_out, memory_order_relaxed);
}

const char *dxl_budget_time_message(const dxl_budget_t *b, char *buf, size_t cap) {
  long long ms = (long long)b->time_limit_ms;
  char limit[32];
  if (ms % 1000 == 0) snprintf(limit, sizeof limit, "%llds", ms / 1000);
  else snprintf(limit, sizeof limit, "%lldms", ms);
  snprintf(buf, cap, "turn ran longer than the turn time limit (%s): the orchestration did not "
           "yield in time (a long loop, or slow calls such as table.sort of a huge table?)",
           limit);
  return buf;
}

static int exceeded(lua_State *L, dxl_budget_t *b) {
  char msg[256];
  if (timed_out(b)) return luaL_error(L, "%s", dxl_budget_time_message(b, msg, sizeof msg));
  return luaL_error(L, "instruction budget exceeded: the code ran more than %I instructions",
                    (LUAI_UACINT)b->limit);
}

/* Guards every budget's `running` list: the alarm walks it from the watchdog thread. */
static uv_mutex_t running_mu;
static uv_once_t running_once = UV_ONCE_INIT;
static void running_init(void) { uv_mutex_init(&running_mu); }

/* The count thread L is to run with under b now: every instruction once b is out, else the
** usual interval. */
static int count_for(dxl_budget_t *b) { return b->hit || timed_out(b) ? 1 : HOOK_EVERY; }

/* Arm thread L's hook: to fire on its next instruction (count 1), or every HOOK_EVERY where no
** budget hook is set yet. */
static void arm_one(lua_State *L, int count) {
  if (count == 1) lua_sethook(L, budget_hook, LUA_MASKCOUNT, 1);
  else if (lua_gethook(L) != budget_hook) lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY);
}

/* Arm the hook of b's top and of every thread on its resume chain: with count 1 (escalate), or
** (count 0: b starts counting) the usual interval where no budget hook is set yet; counting
** already: nothing. lua_sethook may be called asynchronously (lua.c does from a signal
** handler). Every thread on the chain is alive: its resumer's stack holds it until it is
** popped. */
static void arm_chain(dxl_budget_t *b, int count) {
  dxl_running_t *n;
  uv_once(&running_once, running_init);
  uv_mutex_lock(&running_mu);
  if (count != 1) {
    if (atomic_load_explicit(&b->counting, memory_order_relaxed)) {
      uv_mutex_unlock(&running_mu);
      return;
    }
    atomic_store_explicit(&b->counting, 1, memory_order_relaxed);
  }
  if (b->top) arm_one(b->top, count);
  for (n = b->running; n; n = n->prev) arm_one(n->L, count);
  uv_mutex_unlock(&running_mu);
}

/* The loop thread: b ran out. Threads on the chain whose hook was not armed yet would not
** notice (an armed one does at its next hook call). */
static void escalate_chain(dxl_budget_t *b) {
  if (atomic_load_explicit(&b->counting, memory_order_relaxed)) escalate(b->top);
  else arm_chain(b, 1);
}

void dxl_budget_alarm(void *arg) {
  dxl_budget_t *b = arg;
  atomic_store_explicit(&b->timed_out, 1, memory_order_relaxed);
  arm_chain(b, 1);
}

void dxl_budget_count_now(dxl_budget_t *b) { arm_chain(b, 0); }

/* lua_sethook walks the thread's call frames (CallInfo). From another thread that walk could
** meet a frame the collector frees meanwhile (luaE_shrinkCI), so the watchdog first asks the
** loop thread to arm the hook itself at its next allocation (guard_alloc), and arms it from
** here only when a look later the code has allocated nothing since: then no collector step
** ran, and one that would start waits in guard_alloc for running_mu, which the walk holds. */
int dxl_budget_count(void *arg) {
  dxl_budget_t *b = arg;
  if (atomic_load_explicit(&b->counting, memory_order_relaxed)) return 0;
  if (!atomic_exchange_explicit(&b->count_req, 1, memory_order_relaxed)) return 1;
  arm_chain(b, 0);
  return 0;
}

int dxl_budget_resume_begin(dxl_budget_t *b) {
  lua_State *L = b->top;
  int lazy = b->limit >= DXL_COUNT_EAGER_BELOW && !b->hit && !timed_out(b);
  atomic_store_explicit(&b->counting, !lazy, memory_order_relaxed);
  atomic_store_explicit(&b->count_req, 0, memory_order_relaxed);
  if (lazy) {
    if (lua_gethook(L) == budget_hook) lua_sethook(L, NULL, 0, 0);
  } else {
    arm_one(L, count_for(b));
  }
  return lazy;
}

void dxl_budget_running_push(dxl_running_t *n, lua_State *co) {
  dxl_budget_t *b = current;
  int count;
  n->L = co;
  n->b = b;
  if (!b) return;
  uv_once(&running_once, running_init);
  uv_mutex_lock(&running_mu);
  n->prev = b->running;
  b->running = n;
  uv_mutex_unlock(&running_mu);
  /* resumed after the alarm or a hit: a coroutine made before it still fires every
  ** HOOK_EVERY; resumed after the hook was armed: one made before that has none */
  count = count_for(b);
  if (count == 1 || atomic_load_explicit(&b->counting, memory_order_relaxed)) arm_one(co, count);
}

void dxl_budget_running_pop(dxl_running_t *n) {
  if (!n->b) return;
  uv_mutex_lock(&running_mu);
  n->b->running = n->prev;
  uv_mutex_unlock(&running_mu);
}

static void budget_hook(lua_State *L, lua_Debug *ar) {
  dxl_budget_t *b = current;
  (void)ar;
  if (!b) return;
  b->used += lua_gethookcount(L);
  if (b->used <= b->limit && !b->hit && !timed_out(b)) return;
  if (!b->hit) {
    b->hit = 1;
    escalate_chain(b);
  }
  escalate(L);
  /* A yield from the top thread reaches the engine; pcall cannot catch it. Elsewhere (inside
  ** a C function, a coroutine the code created, an error handler) raise; the next
  ** instruction of the caller raises again. */
  if (L == b->top && lua_isyieldable(L)) {
    lua_yield(L, 0);
    return;
  }
  exceeded(L, b);
}

void dxl_budget_charge(lua_State *L, int64_t n) {
  dxl_budget_t *b = current;
  if (!b) return;
  if (!b->hit && !timed_out(b) && n <= b->limit - b->used) { /* used <= limit until hit */
    b->used += n > 0 ? n : 0;
    return;
  }
  if (!b->hit) {
    if (!timed_out(b)) b->used = b->limit + 1;
    b->hit = 1;
    escalate_chain(b);
  }
  escalate(L); /* the caller's next instruction fails again, even under pcall */
  exceeded(L, b);
}

void dxl_budget_watch(lua_State *L) { lua_sethook(L, budget_hook, LUA_MASKCOUNT, HOOK_EVERY); }

void dxl_budget_enter(dxl_state_t *S, dxl_budget_t *b) {
  b->A = S->alloc;
  b->prev = current;
  current = b;
  if (b->A) {
    b->prev_in_state = b->A->cur;
    b->A->cur = b;
  }
}

void dxl_budget_leave(dxl_budget_t *b) {
  current = b->prev;
  if (b->A) b->A->cur = b->prev_in_state;
}

int64_t dxl_budget_time_limit(void) { return current ? current->time_limit_ms : 0; }

int dxl_budget_exhausted(void) { return current && (current->hit || timed_out(current)); }

void dxl_budget_start_memory(dxl_state_t *S, dxl_budget_t *b, int64_t limit) {
  b->mem_limit = limit;
  b->mem_base = S->alloc ? S->alloc->delta : 0;
  b->mem_refused = 0;
}

int64_t dxl_budget_heap(dxl_state_t *S) { return S->alloc ? S->alloc->delta : 0; }
