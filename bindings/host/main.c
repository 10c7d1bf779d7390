/*
** main.c -- the duroxide-lua program: `duroxide-lua APP.lua [options]` runs a worker;
** `duroxide-lua COMMAND ...` is the client (commands.c).
**
** Exit status: 0 success, 1 failure (a Failed instance for wait/start --wait, an app error),
** 2 bad usage or bad input, 3 timeout.
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lualib.h>

#include "dxlua.h"
#include "host.h"
#include "metrics_http.h"
#include "ui.h"
#include "log.h"
#include "util.h"

int luaopen_duroxide(lua_State *L);

int dxh_usage(FILE *f) {
  fputs(
      "usage:\n"
      "  duroxide-lua APP.lua [options]        run a worker with APP.lua's registrations\n"
      "  duroxide-lua start NAME [INPUT] --id ID [--wait [TIMEOUT]] [--version V]\n"
      "  duroxide-lua raise ID EVENT [DATA]\n"
      "  duroxide-lua enqueue ID QUEUE [DATA]  put DATA on the instance's event queue QUEUE\n"
      "  duroxide-lua status ID\n"
      "  duroxide-lua wait ID [--timeout 10s]\n"
      "  duroxide-lua cancel ID [REASON]\n"
      "  duroxide-lua history ID [--execution N]\n"
      "  duroxide-lua kv ID [KEY]              the instance's key-value state (or one key)\n"
      "  duroxide-lua list [--status S] [--name N] [--limit N] [--after CURSOR] [--created-after T]\n"
      "  duroxide-lua describe ID              everything about one instance\n"
      "  duroxide-lua executions ID\n"
      "  duroxide-lua delete ID [--force]      an instance with its sub-orchestrations\n"
      "  duroxide-lua purge --completed-before DURATION|TIME [--status S] [--name N] [--dry-run]\n"
      "  duroxide-lua prune ID --keep N        drop old executions (continue-as-new)\n"
      "  duroxide-lua terminate ID [REASON]    fail a running instance now, with its children\n"
      "  duroxide-lua sessions [--history SID] the session table: owner, lease, idle, queued and\n"
      "                                        running work; --history: claims, moves, releases\n"
      "  duroxide-lua workers                  live workers: host, pid, start, load, sessions\n"
      "  duroxide-lua stats                    store-wide figures: queue depths, instances, sessions\n"
      "  duroxide-lua check                    verify the whole store (exit 1 on any problem)\n"
      "  duroxide-lua ui [--listen 127.0.0.1:8080] [--read-only] [--allow-remote --token T]\n"
      "                                        the web console (instances, sessions, workers)\n"
      "\n"
      "INPUT and DATA are JSON text, or - to read it from stdin, or @FILE to read a file.\n"
      "Every command takes --store STORE, a directory or a postgres:// URL (default\n"
      "$DUROXIDE_STORE or ./duroxide-data). S is Pending, Running, Completed or Failed;\n"
      "T is a duration ago (30s, 15m, 12h, 7d), an ISO-8601 UTC time or ms since the epoch.\n"
      "\n"
      "worker options (also duroxide.configure{...} in the app; durations take ms, s, m, h):\n"
      "  --worker-node-id ID  --orchestration-concurrency N  --worker-concurrency N\n"
      "  --max-sessions-per-worker N  --session-lock-timeout D  --session-idle-timeout D\n"
      "  --session-cleanup-interval D  --worker-lock-timeout D  --orchestrator-lock-timeout D\n"
      "  --poll-interval D  --max-attempts N  --shutdown-grace D  --turn-instruction-budget N\n"
      "  --turn-time-limit D (30s; 0 = off)  --session-wait-warning D (30s; 0 = off)\n"
      "  --tags gpu,default (activity tags taken)\n"
      "  --orchestration-cache-size SIZE (64m; 0 = off: every turn replays its history)\n"
      "  --log-level error|warn|info|debug  --loop-block-warning D (1s; 0 = off)\n"
      "  --log-format text|json  --no-sync (faster; may lose the last commits on power loss)\n"
      "  --store-max-size SIZE (e.g. 512m, 2g; the store remembers it; default: the disk)\n"
      "  --metrics-listen HOST:PORT (serve Prometheus text at http://HOST:PORT/metrics)\n",
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
  uv_signal_t sigint, sigterm;
  uv_timer_t health;  /* watches for a store that became unusable */
  dxh_http_t *metrics; /* --metrics-listen, NULL without */
  int signals;
  int failed;
} worker_t;

/* The runtime has stopped: every activity has finished or, past the grace, been handed back
** (its row released for another worker). The handed-back ones are ended now (cancelled, not
** left running); dx_runtime_run then returns even while something still holds a handle. */
static void on_stopped(dx_runtime_t *rt, void *ud) {
  worker_t *w = ud;
  (void)rt;
  uv_close((uv_handle_t *)&w->sigint, NULL);
  uv_close((uv_handle_t *)&w->sigterm, NULL);
  uv_close((uv_handle_t *)&w->health, NULL);
  dxh_http_close(w->metrics);
  w->metrics = NULL;
  dxl_end_abandoned_activities(w->S); /* cancelled: their code stops here */
}

/* A worker's fatal error once the log format is known: "duroxide-lua: [WHAT: ]DETAIL" on
** stderr, or with --log-format json an error record, so every line stays one JSON object. */
static void worker_fatal(const char *what, const char *detail) {
  if (dx__log_format() == DX_LOGFMT_JSON)
    dx__log(DX_LOG_ERROR, what ? what : "worker did not start", "error=\"%s\"", detail);
  else if (what)
    fprintf(stderr, "duroxide-lua: %s: %s\n", what, detail);
  else
    fprintf(stderr, "duroxide-lua: %s\n", detail);
}

/* A store that became unusable (damaged, lock file deleted) stops the worker: exit 1. */
static void on_health(uv_timer_t *h) {
  worker_t *w = h->data;
  dx_error_t err;
  if (w->failed || dx_runtime_error(w->rt, &err) == 0) return;
  w->failed = 1;
  worker_fatal("stopping", err.msg);
  dx_runtime_stop(w->rt, on_stopped, w);
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
  dx_provider_opts_t po = {1, 0, 0, 0};
  dx_error_t err;
  worker_t w;
  const char *store = NULL;
  size_t max_size = 0;
  dxh_listen_t metrics_addr;
  const char *metrics_listen = NULL;
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
      po.no_sync = 1;
      continue;
    }
    if ((rc = dxh_split_opt(argc, argv, &i, name, sizeof name, &val)) != 0) {
      dx_options_t probe = opts;
      lua_close(L);
      /* an unknown option last on the line is reported as unknown, not as missing a value */
      if (rc == -1 && strcmp(name, "store") != 0 &&
          dx_options_set(&probe, name, "", &err) == DX_ENOTFOUND)
        return dxh_fail(2, "%s (see --help)", err.msg);
      return dxh_opt_error(a, rc, val);
    }
    if (strcmp(name, "store") == 0) {
      store = val;
      continue;
    }
    if (strcmp(name, "store-max-size") == 0 || strcmp(name, "store_max_size") == 0) {
      if (dx__parse_size(val, &max_size) != 0 || max_size < (size_t)1 << 20) {
        lua_close(L);
        return dxh_fail(2, "invalid value for --store-max-size: '%s' (expected a size of at "
                        "least 1m, such as 512m or 2g)", val);
      }
      continue;
    }
    if (strcmp(name, "metrics-listen") == 0 || strcmp(name, "metrics_listen") == 0) {
      char msg[400];
      if (dxh_listen_parse(val, &metrics_addr, msg, sizeof msg) != 0) {
        lua_close(L);
        return dxh_fail(2, "invalid value for --metrics-listen: %s", msg);
      }
      metrics_listen = val;
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
  po.max_size = max_size ? max_size : S->store_max_size; /* the command line wins */
  if (dx_provider_open(store, &po, &p, &err) != 0) {
    lua_close(L);
    char what[1200];
    snprintf(what, sizeof what, "cannot open store %s", store);
    worker_fatal(what, err.msg);
    return 1;
  }
  memset(&w, 0, sizeof w);
  rc = dx_runtime_new(&w.rt, S->loop, p, &opts, &dxl_host_methods, S, &err);
  /* The metrics port is bound before the runtime takes any work: a refused address stops
  ** the worker before it starts. */
  if (rc == 0 && metrics_listen &&
      dxh_metrics_serve(S->loop, &metrics_addr, w.rt, &w.metrics, err.msg, sizeof err.msg) != 0)
    rc = DX_EINVAL;
  if (rc == 0) rc = dx_runtime_start(w.rt, &err);
  if (rc != 0) {
    worker_fatal(w.rt && metrics_listen && !w.metrics ? "--metrics-listen" : NULL, err.msg);
    if (w.metrics) {
      dxh_http_close(w.metrics);
      uv_run(S->loop, UV_RUN_NOWAIT); /* its close callbacks */
    }
    dx_runtime_free(w.rt);
    p->methods->destroy(p);
    lua_close(L);
    return 1;
  }
  S->runtime = w.rt;
  w.S = S;
  if (w.metrics) /* port 0 picks a free port: the log says which */
    dx__log(DX_LOG_INFO, "serving metrics at /metrics", "port=%d", dxh_http_port(w.metrics));

  uv_signal_init(S->loop, &w.sigint);
  uv_signal_init(S->loop, &w.sigterm);
  w.sigint.data = w.sigterm.data = &w;
  uv_signal_start(&w.sigint, on_signal, SIGINT);
  uv_signal_start(&w.sigterm, on_signal, SIGTERM);
  uv_timer_init(S->loop, &w.health);
  w.health.data = &w;
  uv_timer_start(&w.health, on_health, 100, 100);
  S->loop_depth++; /* code running from here on is inside a loop callback */
  /* Until the runtime has stopped: an activity's uv.stop() only ends one uv_run, and handles
  ** an activity leaked (a luv timer, a listening socket) cannot keep a stopped worker alive. */
  if (dx_runtime_run(w.rt, &err) != 0) dx__log(DX_LOG_ERROR, err.msg, NULL);
  S->loop_depth--;
  S->runtime = NULL;
  if (!dx_runtime_is_stopped(w.rt)) return 1; /* never free the store under a live runtime */
  if (w.failed) rc = 1;
  dx_runtime_free(w.rt);
  p->methods->destroy(p);
  /* Handles the app leaked are closed by luv's finalizers; the loop is not run again (their
  ** close callbacks would reach the closed state): the process is exiting. */
  lua_close(L);
  return rc;
}

/* A word that is not a command is an app when it names a file, ends in .lua or is a path;
** anything else is a mistyped command. */
static int looks_like_app(const char *word) {
  size_t n = strlen(word);
  return access(word, F_OK) == 0 || strchr(word, '/') ||
         (n > 4 && strcmp(word + n - 4, ".lua") == 0);
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
  if (strcmp(argv[1], "ui") == 0) return dxh_ui(argc - 1, argv + 1);
  if (dxh_is_command(argv[1])) return dxh_command(argc - 1, argv + 1);
  if (argv[1][0] == '-') return dxh_fail(2, "unknown option %s (see --help)", argv[1]);
  if (!looks_like_app(argv[1])) return dxh_fail(2, "unknown command '%s' (see --help)", argv[1]);
  if (access(argv[1], R_OK) != 0) {
    char msg[512];
    snprintf(msg, sizeof msg, "cannot open app %.300s: %s", argv[1], strerror(errno));
    return dxh_fail(2, "%s", msg);
  }
  return run_worker(argv[1], argc - 2, argv + 2);
}
