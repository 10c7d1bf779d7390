/*
** embed.c -- the Lua host for C programs: dx_lua_runtime_new and dx_lua_runtime_free.
**
** A Lua runtime is a core runtime whose owner (embedding.h) is an embed_t: the Lua state that
** ran the app, the store and, when the caller gave no loop, the loop. dx_runtime_free
** releases the owner after the runtime, so the provider and loop outlive it.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <lualib.h>

#include "duroxide/lua_host.h"
#include "dxlua.h"
#include "embedding.h"
#include "log.h"
#include "util.h"

int luaopen_duroxide(lua_State *L);

typedef struct embed_s {
  lua_State *L;
  dx_provider_t *p;
  uv_loop_t *own_loop; /* NULL when the caller's loop is used */
} embed_t;

typedef struct {
  const char *app;
  uv_loop_t *loop;
  int argc;
  char **argv;
} load_args_t;

/* {===== loading the app =====} */

/* [-1, +0, e] Open the libraries and `duroxide` bound to the runtime's loop, then run the
** app (lua.c's pmain: everything that can raise runs under the protected call). */
static int pload(lua_State *L) {
  const load_args_t *a = lua_touserdata(L, 1);
  const char *slash = strrchr(a->app, '/');
  dxl_state_t *S;
  int i;
  luaL_openlibs(L);
  luaL_requiref(L, "duroxide", luaopen_duroxide, 0);
  lua_pop(L, 1);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_duroxide);
  lua_setfield(L, -2, "duroxide");
  lua_pop(L, 1);
  S = dxl_state(L);
  S->loop = a->loop; /* before the app runs: require("luv") binds to S->loop */
  lua_createtable(L, a->argc, 1); /* arg, as lua.c builds it */
  lua_pushstring(L, a->app);
  lua_rawseti(L, -2, 0);
  for (i = 0; i < a->argc; i++) {
    lua_pushstring(L, a->argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setglobal(L, "arg");
  /* Modules next to the app are found first. */
  lua_getglobal(L, "package");
  if (slash) lua_pushlstring(L, a->app, (size_t)(slash - a->app));
  else lua_pushliteral(L, ".");
  // stack: package, dir
  lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;", lua_tostring(L, -1), lua_tostring(L, -1));
  lua_remove(L, -2);
  // stack: package, prefix
  lua_getfield(L, -2, "path");
  lua_concat(L, 2);
  lua_setfield(L, -2, "path");
  lua_pop(L, 1);
  if (luaL_loadfile(L, a->app) != LUA_OK) return lua_error(L);
  lua_call(L, 0, 0);
  return 0;
}

int dxl_load_app(lua_State *L, const char *app, uv_loop_t *loop, int argc, char **argv,
                 char *errbuf, size_t errlen, int with_traceback) {
  load_args_t args;
  args.app = app;
  args.loop = loop;
  args.argc = argc;
  args.argv = argv;
  lua_pushcfunction(L, pload);
  lua_pushlightuserdata(L, &args);
  return dxl_pcall(L, 1, 0, errbuf, errlen, with_traceback);
}

/* The state set up by luaopen_duroxide, without raising. [-0, +0, -] */
static dxl_state_t *state_of(lua_State *L) {
  dxl_state_t *S;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &dxl_state_key);
  S = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return S;
}

/* }===== loading the app =====} */

/* {===== lifecycle =====} */

static void close_walk(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

/* Close what is left on a loop we own (handles the app opened, thread-pool work the runtime
** gave up on) and the loop itself. Waits for such work to return. */
static void close_own_loop(uv_loop_t *loop) {
  uv_walk(loop, close_walk, NULL);
  while (uv_loop_close(loop) == UV_EBUSY) {
    uv_run(loop, UV_RUN_DEFAULT);
    uv_walk(loop, close_walk, NULL);
  }
}

/* Owner destructor, run by dx_runtime_free after the runtime's memory is gone. */
static void embed_free(void *ud) {
  embed_t *e = ud;
  if (!e) return;
  if (e->L) {
    dxl_state_t *S = state_of(e->L);
    if (S) S->runtime = NULL;
    lua_close(e->L);
  }
  if (e->p) e->p->methods->destroy(e->p);
  if (e->own_loop) {
    close_own_loop(e->own_loop);
    free(e->own_loop);
  }
  free(e);
}

static int check_app(const char *app, dx_error_t *err) {
  struct stat st;
  FILE *f;
  if (!app) return dx_error_set(err, DX_EINVAL, "NULL app path");
  if (!*app) return dx_error_set(err, DX_EINVAL, "empty app path");
  if (stat(app, &st) != 0)
    return dx_error_set(err, errno == ENOENT || errno == ENOTDIR ? DX_ENOTFOUND : DX_EIO,
                        "cannot open app %s: %s", app, strerror(errno));
  if (!S_ISREG(st.st_mode)) return dx_error_set(err, DX_EIO, "app %s is not a file", app);
  if (!(f = fopen(app, "r")))
    return dx_error_set(err, DX_EIO, "cannot open app %s: %s", app, strerror(errno));
  fclose(f);
  return DX_OK;
}

int dx_lua_runtime_new(dx_runtime_t **out, uv_loop_t *loop, const char *store_dir,
                       const dx_options_t *opts, const char *app_path, dx_error_t *err) {
  embed_t *e;
  dxl_state_t *S;
  dx_options_t o;
  dx_provider_opts_t po = {1, 0, 0, 0};
  dx_runtime_t *rt = NULL;
  const char *store, *env;
  char msg[sizeof err->msg];
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "NULL out");
  *out = NULL;
  if ((rc = check_app(app_path, err)) != 0) return rc;
  if (store_dir && !*store_dir) return dx_error_set(err, DX_EINVAL, "empty store directory");
  if (opts && (rc = dx_options_validate(opts, err)) != 0) return rc;
  if (!(e = calloc(1, sizeof *e))) return dx_error_set(err, DX_ENOMEM, "out of memory");
  if (!loop) {
    if (!(e->own_loop = malloc(sizeof *e->own_loop))) {
      free(e);
      return dx_error_set(err, DX_ENOMEM, "out of memory");
    }
    if ((rc = uv_loop_init(e->own_loop)) != 0) {
      free(e->own_loop);
      free(e);
      return dx_error_set(err, DX_EIO, "cannot create a loop: %s", uv_strerror(rc));
    }
    loop = e->own_loop;
  }
  if (!(e->L = luaL_newstate())) {
    embed_free(e);
    return dx_error_set(err, DX_ENOMEM, "cannot create a Lua state");
  }
  if ((rc = dxl_load_app(e->L, app_path, loop, 0, NULL, msg, sizeof msg, 0)) != LUA_OK) {
    embed_free(e);
    return dx_error_set(err, rc == LUA_ERRMEM ? DX_ENOMEM : DX_ELUA, "%s", msg);
  }
  S = state_of(e->L);
  /* The store: explicit, else the app's configure{store=}, else the environment. */
  env = getenv("DUROXIDE_STORE");
  store = store_dir ? store_dir : S->store_dir ? S->store_dir : env && *env ? env
                                                                          : "./duroxide-data";
  if (store != S->store_dir) {
    char *copy = dx__strdup(store);
    if (!copy) {
      embed_free(e);
      return dx_error_set(err, DX_ENOMEM, "out of memory");
    }
    free(S->store_dir); /* the app's duroxide.client() now opens the runtime's store */
    S->store_dir = copy;
    store = copy;
  }
  po.max_size = S->store_max_size;
  if ((rc = dx_provider_open(store, &po, &e->p, err)) != 0) {
    if (err) {
      snprintf(msg, sizeof msg, "%s", err->msg);
      snprintf(err->msg, sizeof err->msg, "cannot open store %s: %.400s", store, msg);
    }
    embed_free(e);
    return rc;
  }
  o = opts ? *opts : S->opts;
  if ((rc = dx_runtime_new(&rt, loop, e->p, &o, &dxl_host_methods, S, err)) != 0) {
    embed_free(e);
    return rc;
  }
  dx__log_configure(o.log_level, o.log_format);
  S->runtime = rt;
  /* From here on Lua runs only inside callbacks of the loop: driving the loop from Lua
  ** (client:wait on this runtime, rt:run_until) is refused, as in the duroxide-lua worker. */
  S->loop_depth++;
  dx__runtime_set_owner(rt, embed_free, e);
  *out = rt;
  return DX_OK;
}

void dx_lua_runtime_free(dx_runtime_t *rt) {
  if (!rt) return;
  if (dx__runtime_in_run(rt)) {
    dx__log(DX_LOG_ERROR, "dx_lua_runtime_free called inside dx_runtime_run ignored", NULL);
    return;
  }
  if (!dx_runtime_is_stopped(rt)) {
    uv_loop_t *loop = dx__runtime_loop(rt);
    dx_runtime_stop(rt, NULL, NULL); /* no-op when a stop is already under way */
    while (!dx_runtime_is_stopped(rt)) uv_run(loop, UV_RUN_ONCE);
  }
  dx_runtime_free(rt);
}

/* }===== lifecycle =====} */
