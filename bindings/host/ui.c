/*
** ui.c -- `duroxide-lua ui`: the web console's command line, access rules (loopback unless
** --allow-remote with a token, Host header check, token), its embedded static files and the
** sampling timer behind the charts. The JSON API is ui_api.c; the pages are bindings/host/ui/.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "ui.h"
#include "util.h"

/* The static files, embedded at build time by tools/embed.lua (bindings/meson.build). */
typedef struct { const char *name; const unsigned char *src; size_t len; } dxl_embedded_t;
extern const dxl_embedded_t dxh_ui_files[];

static const struct {
  const char *ext, *type;
} content_types[] = {{".html", "text/html; charset=utf-8"},
                     {".js", "text/javascript; charset=utf-8"},
                     {".css", "text/css; charset=utf-8"},
                     {".svg", "image/svg+xml"},
                     {".png", "image/png"}};

/* Shortest token accepted: a guessable token on a remote port is no protection. */
#define MIN_TOKEN_BYTES 16

static void serve_static(dxh_req_t *r) {
  const char *path = dxh_req_path(r);
  const dxl_embedded_t *f;
  size_t i;
  if (strcmp(path, "/") == 0) path = "/index.html";
  for (f = dxh_ui_files; f->name; f++) {
    if (strcmp(f->name, path + 1) != 0) continue;
    for (i = 0; i < sizeof content_types / sizeof content_types[0]; i++) {
      size_t n = strlen(f->name), e = strlen(content_types[i].ext);
      if (n > e && strcmp(f->name + n - e, content_types[i].ext) == 0) {
        dxh_reply(r, 200, content_types[i].type, f->src, f->len, 1);
        return;
      }
    }
    dxh_reply(r, 200, "application/octet-stream", f->src, f->len, 1);
    return;
  }
  dxh_reply_error(r, 404, "no page %s", path);
}

/* Equal without an early exit, so response time does not tell how much of a token matched. */
static int same_secret(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b), i;
  unsigned diff = (unsigned)(la ^ lb);
  for (i = 0; i < la && i < lb; i++) diff |= (unsigned char)a[i] ^ (unsigned char)b[i];
  return diff == 0;
}

/* A Host header naming a loopback address (with any port): what a browser sends for a page
** opened at 127.0.0.1, localhost or [::1]. Anything else, on a console bound to loopback, is a
** page from elsewhere reaching it through DNS rebinding. */
static int loopback_host(const char *host) {
  char name[256];
  const char *colon;
  dxh_listen_t l;
  char msg[8];
  if (!host || strlen(host) >= sizeof name - 8) return 0;
  colon = host[0] == '[' ? strstr(host, "]:") : strrchr(host, ':');
  if (colon && host[0] == '[') colon++;
  if (colon) snprintf(name, sizeof name, "%.*s:0", (int)(colon - host), host);
  else snprintf(name, sizeof name, "%s:0", host);
  return dxh_listen_parse(name, &l, msg, sizeof msg) == 0 && l.loopback;
}

/* The token from the Authorization header, the console's cookie or (first visit) ?token=. */
static const char *given_token(dxh_req_t *r) {
  const char *auth = dxh_req_header(r, "Authorization");
  if (auth && strncmp(auth, "Bearer ", 7) == 0) return auth + 7;
  if (dxh_req_cookie(r, "dx_token")) return dxh_req_cookie(r, "dx_token");
  return dxh_req_arg(r, "token");
}

static void on_request(void *ud, dxh_req_t *r) {
  dxh_ui_t *u = ud;
  const char *path = dxh_req_path(r);
  if (!u->allow_remote && !loopback_host(dxh_req_header(r, "Host"))) {
    dxh_reply_error(r, 403, "Host header '%s' is not a loopback address: this console serves "
                    "only pages opened at 127.0.0.1, localhost or [::1] (see --allow-remote)",
                    dxh_req_header(r, "Host") ? dxh_req_header(r, "Host") : "");
    return;
  }
  if (u->token) {
    const char *t = given_token(r);
    if (!t || !same_secret(t, u->token)) {
      dxh_reply_error(r, 401, "%s", "missing or wrong token: open the console as "
                      "http://HOST:PORT/?token=TOKEN, or send Authorization: Bearer TOKEN");
      return;
    }
    if (dxh_req_arg(r, "token") && strncmp(path, "/api/", 5) != 0) {
      /* First visit: keep the token in a cookie the page's scripts cannot read, and drop it
      ** from the address bar. */
      char cookie[600];
      snprintf(cookie, sizeof cookie, "dx_token=%.512s; HttpOnly; SameSite=Strict; Path=/",
               u->token);
      dxh_req_add_header(r, "Set-Cookie", cookie);
      dxh_req_add_header(r, "Location", "/"); /* never the request's path: "//elsewhere" */
      dxh_reply(r, 303, "text/plain", "", 0, 1);
      return;
    }
  }
  if (strncmp(path, "/api/", 5) == 0) dxh_ui_api(u, r);
  else if (strcmp(dxh_req_method(r), "GET") != 0 && strcmp(dxh_req_method(r), "HEAD") != 0)
    dxh_reply_error(r, 405, "%s", "pages answer GET only");
  else serve_static(r);
}

/* {===== command line =====} */

typedef struct {
  const char *listen, *store, *token;
  char *token_buf;
  int read_only, allow_remote;
} ui_args_t;

static const char ui_usage[] =
    "ui [--listen 127.0.0.1:8080] [--store STORE] [--read-only] [--allow-remote --token TOKEN]";

/* --token @FILE reads the token from a file (a token on the command line shows in ps). */
static int read_token(ui_args_t *a) {
  FILE *f;
  char buf[600];
  size_t n;
  if (!a->token || a->token[0] != '@') return 0;
  if (!(f = fopen(a->token + 1, "rb")))
    return dxh_fail(2, "cannot read token file %s", a->token + 1);
  n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
  a->token = a->token_buf = dx__strdup(buf);
  return 0;
}

static int parse_args(int argc, char **argv, ui_args_t *a) {
  int i, rc;
  memset(a, 0, sizeof *a);
  a->listen = "127.0.0.1:8080";
  for (i = 1; i < argc; i++) {
    char name[64];
    const char *val;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: duroxide-lua %s\n(see docs/operations.md, Web console)\n", ui_usage);
      return -1; /* not an error: the caller exits 0 */
    }
    if (strcmp(argv[i], "--read-only") == 0) { a->read_only = 1; continue; }
    if (strcmp(argv[i], "--allow-remote") == 0) { a->allow_remote = 1; continue; }
    if (strncmp(argv[i], "--", 2) != 0) {
      char msg[512];
      snprintf(msg, sizeof msg, "unexpected argument '%.200s' (usage: duroxide-lua %s)", argv[i],
               ui_usage);
      return dxh_fail(2, "%s", msg);
    }
    if ((rc = dxh_split_opt(argc, argv, &i, name, sizeof name, &val)) != 0)
      return dxh_opt_error(argv[i], rc, val);
    if (strcmp(name, "listen") == 0) a->listen = val;
    else if (strcmp(name, "store") == 0) a->store = val;
    else if (strcmp(name, "token") == 0) a->token = val;
    else {
      char msg[400];
      snprintf(msg, sizeof msg, "unknown option --%s for ui (usage: duroxide-lua %s)", name,
               ui_usage);
      return dxh_fail(2, "%s", msg);
    }
  }
  if ((rc = read_token(a)) != 0) return rc;
  if (a->token && strlen(a->token) < MIN_TOKEN_BYTES)
    return dxh_fail(2, "--token is too short: use at least %s characters (e.g. from "
                    "`openssl rand -hex 16`)", "16");
  if (a->token && strlen(a->token) > 512)
    return dxh_fail(2, "--token is longer than %s characters", "512");
  /* The token travels in a cookie and a header: no spaces, quotes, ';' or control bytes. */
  if (a->token && a->token[strspn(a->token, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789-._~+/=")] != '\0')
    return dxh_fail(2, "%s", "--token may contain only letters, digits and - . _ ~ + / =");
  if (a->allow_remote && !a->token)
    return dxh_fail(2, "%s", "--allow-remote needs --token TOKEN: a console reachable from "
                    "other machines must ask for a token");
  return 0;
}

/* {===== running =====} */

typedef struct {
  dxh_ui_t ui;
  dxh_http_t *http;
  uv_signal_t sigint, sigterm;
  uv_timer_t sampler;
} ui_run_t;

static void on_sample(uv_timer_t *t) { dxh_ui_sample(t->data); }

static void on_signal(uv_signal_t *s, int signum) {
  ui_run_t *run = s->data;
  (void)signum;
  dxh_http_close(run->http);
  run->http = NULL;
  uv_close((uv_handle_t *)&run->sigint, NULL);
  uv_close((uv_handle_t *)&run->sigterm, NULL);
  uv_close((uv_handle_t *)&run->sampler, NULL);
}

int dxh_ui(int argc, char **argv) {
  uv_loop_t *loop = uv_default_loop();
  ui_args_t a;
  dxh_listen_t addr;
  ui_run_t run;
  dx_error_t err;
  char msg[512];
  int rc;
  if ((rc = parse_args(argc, argv, &a)) != 0) {
    free(a.token_buf);
    return rc < 0 ? 0 : rc;
  }
  if (dxh_listen_parse(a.listen, &addr, msg, sizeof msg) != 0) {
    free(a.token_buf);
    return dxh_fail(2, "%s", msg);
  }
  if (!addr.loopback && !a.allow_remote) {
    free(a.token_buf);
    snprintf(msg, sizeof msg, "refusing to listen on %.200s: it is not a loopback address; "
             "pass --allow-remote and --token TOKEN to serve other machines", a.listen);
    return dxh_fail(2, "%s", msg);
  }
  memset(&run, 0, sizeof run);
  run.ui.store = dxh_store_dir(a.store);
  run.ui.token = a.token;
  run.ui.read_only = a.read_only;
  run.ui.allow_remote = a.allow_remote;
  if (dx_client_open(&run.ui.cl, run.ui.store, &err) != 0) {
    fprintf(stderr, "duroxide-lua: cannot open store %s: %s\n", run.ui.store, err.msg);
    free(a.token_buf);
    return 1;
  }
  run.ui.samples = json_array();
  if (dxh_http_start(loop, &addr, on_request, &run.ui, &run.http, msg, sizeof msg) != 0) {
    dx_client_close(run.ui.cl);
    free(a.token_buf);
    rc = dxh_fail(1, "%s", msg);
    goto out;
  }
  {
    /* The one line a script reads to find the console (port 0 picks a free port). */
    char host[80];
    const char *colon = addr.sa.ss_family == AF_INET6 ? strstr(a.listen, "]:")
                                                      : strrchr(a.listen, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - a.listen + (addr.sa.ss_family == AF_INET6)),
             a.listen);
    printf("{\"listening\":\"http://%s:%d/\",\"read_only\":%s}\n", host,
           dxh_http_port(run.http), a.read_only ? "true" : "false");
    fflush(stdout);
  }
  uv_signal_init(loop, &run.sigint);
  uv_signal_init(loop, &run.sigterm);
  run.sigint.data = run.sigterm.data = &run;
  uv_signal_start(&run.sigint, on_signal, SIGINT);
  uv_signal_start(&run.sigterm, on_signal, SIGTERM);
  uv_timer_init(loop, &run.sampler);
  run.sampler.data = &run.ui;
  uv_timer_start(&run.sampler, on_sample, 0, DXH_UI_SAMPLE_MS);
  uv_run(loop, UV_RUN_DEFAULT);
  dx_client_close(run.ui.cl);
  free(a.token_buf);
  rc = 0;
out:
  json_decref(run.ui.samples);
  return rc;
}
