/*
** main.c -- the duroxide-lua program: `duroxide-lua APP.lua [options]` runs a worker;
** `duroxide-lua COMMAND ...` is the client (commands.c).
**
** Exit status: 0 success, 1 failure (a Failed instance for wait/start --wait, an app error),
** 2 bad usage or bad input, 3 timeout.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lualib.h>

#include "dxlua.h"
#include "host.h"
#include "log.h"

int luaopen_duroxide(lua_State *L);

int dxh_usage(FILE *f) {
  fputs(
      "usage:\n"
      "  duroxide-lua APP.lua [options]        run a worker with APP.lua's registrations\n"
      "  duroxide-lua start NAME [INPUT] --id ID [--wait [TIMEOUT]] [--version V]\n"
      "  duroxide-lua raise ID EVENT [DATA]\n"
      "  duroxide-lua status ID\n"
      "  duroxide-lua wait ID [--timeout 10s]\n"
      "  duroxide-lua cancel ID [REASON]\n"
      "  duroxide-lua history ID\n"
      "  duroxide-lua list\n"
      "  duroxide-lua sessions                 the session table: owner, lease, queued work\n"
      "\n"
      "INPUT and DATA are JSON text, or - to read it from stdin, or @FILE to read a file.\n"
      "Every command takes --store DIR (default\n"
      "$DUROXIDE_STORE or ./duroxide-data).\n"
      "\n"
      "worker options (also duroxide.configure{...} in the app; durations take ms, s, m, h):\n"
      "  --worker-node-id ID  --orchestration-concurrency N  --worker-concurrency N\n"
      "  --max-sessions-per-worker N  --session-lock-timeout D  --session-idle-timeout D\n"
      "  --session-cleanup-interval D  --worker-lock-timeout D  --orchestrator-lock-timeout D\n"
      "  --poll-interval D  --max-attempts N  --shutdown-grace D  --turn-instruction-budget N\n"
      "  --log-level error|warn|info|debug\n"
      "  --log-format text|json  --no-sync (faster; may lose the last commits on power loss)\n",
      f);
  return 2;
}

int dxh_fail(int code, const char *fmt, const char *detail) {
  fprintf(stderr, "duroxide-lua: ");
  fprintf(stderr, fmt, detail);
  fputc('\n', stderr);
  return code;
}

/* {===== worker =====} */

typedef struct {
  dx_runtime_t *rt;
  dxl_state_t *S;
  uv_loop_t *loop;
  uv_signal_t sigint, sigterm;
  int signals;
} worker_t;

/* The runtime has stopped: every activity has finished or, past the grace, been handed back
** (its row released for another worker). The handed-back ones are ended now (cancelled, not
** left running), and handles the app or they still hold (a long sleep, a luv timer) must not
** keep the process alive past the grace: leave the loop now; lua_close releases them. */
static void on_stopped(dx_runtime_t *rt, void *ud) {
  worker_t *w = ud;
  (void)rt;
  uv_close((uv_handle_t *)&w->sigint, NULL);
  uv_close((uv_handle_t *)&w->sigterm, NULL);
  dxl_end_abandoned_activities(w->S); /* cancelled: their code stops here */
  uv_stop(w->loop);
}

static void on_signal(uv_signal_t *h, int signum) {
  worker_t *w = h->data;
  if (++w->signals > 1) {
    dx__log(DX_LOG_WARN, "second signal: exiting now", "signal=%d", signum);
    _exit(130);
  }
  dx__log(DX_LOG_INFO, "signal received: stopping", "signal=%d", signum);
  dx_runtime_stop(w->rt, on_stopped, w);
}

static int load_app(lua_State *L, const char *app, int argc, char **argv) {
  char msg[4096];
  if (dxl_load_app(L, app, uv_default_loop(), argc, argv, msg, sizeof msg, 1) != LUA_OK) {
    fprintf(stderr, "duroxide-lua: error in app %s: %s\n", app, msg);
    return 1;
  }
  return 0;
}

static int run_worker(const char *app, int argc, char **argv) {
  lua_State *L = luaL_newstate();
  dxl_state_t *S;
  dx_options_t opts;
  dx_provider_t *p = NULL;
  dx_lmdb_opts_t lo = {1, 0, 0};
  dx_error_t err;
  worker_t w;
  const char *store = NULL;
  int i, rc = 0;
  if (!L) return dxh_fail(1, "%s", "cannot create a Lua state");
  /* The app's own duroxide.client() should default to the worker's store. */
  for (i = 0; i + 1 < argc; i++)
    if (strcmp(argv[i], "--store") == 0) setenv("DUROXIDE_STORE", argv[i + 1], 1);
  for (i = 0; i < argc; i++)
    if (strncmp(argv[i], "--store=", 8) == 0) setenv("DUROXIDE_STORE", argv[i] + 8, 1);
  if (load_app(L, app, argc, argv) != 0) {
    lua_close(L);
    return 1;
  }
  S = dxl_state(L);
  opts = S->opts;
  for (i = 0; i < argc; i++) {
    const char *a = argv[i], *val;
    char name[64];
    if (strncmp(a, "--", 2) != 0) continue; /* positional args are the app's (arg table) */
    if (strcmp(a, "--no-sync") == 0) {
      lo.no_sync = 1;
      continue;
    }
    if (dxh_split_opt(argc, argv, &i, name, sizeof name, &val) != 0) {
      lua_close(L);
      return dxh_fail(2, "option %s needs a value", a);
    }
    if (strcmp(name, "store") == 0) {
      store = val;
      continue;
    }
    if (dx_options_set(&opts, name, val, &err) != 0) {
      lua_close(L);
      return dxh_fail(2, "%s", err.msg);
    }
  }
  if (dx_options_validate(&opts, &err) != 0) {
    lua_close(L);
    return dxh_fail(2, "%s", err.msg);
  }
  /* The command line wins over duroxide.configure: the state keeps the final options too. */
  S->opts = opts;
  dx__log_configure(opts.log_level, opts.log_format);
  if (!store) store = S->store_dir;
  store = dxh_store_dir(store);
  if (dx_lmdb_open(store, &lo, &p, &err) != 0) {
    lua_close(L);
    fprintf(stderr, "duroxide-lua: cannot open store %s: %s\n", store, err.msg);
    return 1;
  }
  memset(&w, 0, sizeof w);
  if (dx_runtime_new(&w.rt, S->loop, p, &opts, &dxl_host_methods, S, &err) != 0 ||
      dx_runtime_start(w.rt, &err) != 0) {
    fprintf(stderr, "duroxide-lua: %s\n", err.msg);
    dx_runtime_free(w.rt);
    p->methods->destroy(p);
    lua_close(L);
    return 1;
  }
  S->runtime = w.rt;
  w.loop = S->loop;
  w.S = S;
  uv_signal_init(S->loop, &w.sigint);
  uv_signal_init(S->loop, &w.sigterm);
  w.sigint.data = w.sigterm.data = &w;
  uv_signal_start(&w.sigint, on_signal, SIGINT);
  uv_signal_start(&w.sigterm, on_signal, SIGTERM);
  S->loop_depth++; /* code running from here on is inside a loop callback */
  uv_run(S->loop, UV_RUN_DEFAULT);
  S->loop_depth--;
  S->runtime = NULL;
  dx_runtime_free(w.rt);
  p->methods->destroy(p);
  lua_close(L);
  return rc;
}

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argc < 2) return dxh_usage(stderr);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
      strcmp(argv[1], "help") == 0) {
    dxh_usage(stdout);
    return 0;
  }
  if (strcmp(argv[1], "--version") == 0) {
    printf("duroxide-lua %s\n", dx_version());
    return 0;
  }
  if (dxh_is_command(argv[1])) return dxh_command(argc - 1, argv + 1);
  if (argv[1][0] == '-') return dxh_fail(2, "unknown option %s (see --help)", argv[1]);
  return run_worker(argv[1], argc - 2, argv + 2);
}
