/*
** commands.c -- duroxide-lua's client commands: start, raise, status, wait, cancel, history,
** list. Output on stdout is JSON, one object per line; errors go to stderr.
*/
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "duroxide.h"
#include "host.h"
#include "util.h"
#include "jsonout.h"

static const char *commands[] = {"start", "raise", "status", "wait", "cancel", "history",
                                  "list", "sessions", NULL};

int dxh_is_command(const char *word) {
  int i;
  for (i = 0; commands[i]; i++)
    if (strcmp(word, commands[i]) == 0) return 1;
  return 0;
}

int dxh_split_opt(int argc, char **argv, int *i, char *name, size_t len, const char **val) {
  const char *a = argv[*i] + 2, *eq = strchr(a, '=');
  if (eq) {
    snprintf(name, len, "%.*s", (int)(eq - a), a);
    *val = eq + 1;
    return 0;
  }
  snprintf(name, len, "%s", a);
  if (*i + 1 >= argc) return -1;
  *val = argv[++*i];
  return 0;
}

const char *dxh_store_dir(const char *explicit_dir) {
  const char *env = getenv("DUROXIDE_STORE");
  if (explicit_dir) return explicit_dir;
  return env && *env ? env : "./duroxide-data";
}

/* Parsed command line of a client command. */
typedef struct {
  const char *pos[4];
  int npos;
  const char *store, *id, *version;
  int wait;
  const char *timeout;
} cmdline_t;

static int parse(int argc, char **argv, cmdline_t *c) {
  int i;
  memset(c, 0, sizeof *c);
  for (i = 1; i < argc; i++) {
    char name[64];
    const char *val = NULL;
    if (strcmp(argv[i], "--") == 0) continue; /* conventional end of options: ignored */
    if (strncmp(argv[i], "--", 2) != 0) {
      if (c->npos == 4) return dxh_fail(2, "unexpected argument %s", argv[i]);
      c->pos[c->npos++] = argv[i];
      continue;
    }
    if (strcmp(argv[i], "--wait") == 0) {
      c->wait = 1;
      /* --wait takes an optional duration */
      if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') c->timeout = argv[++i];
      continue;
    }
    if (dxh_split_opt(argc, argv, &i, name, sizeof name, &val) != 0)
      return dxh_fail(2, "option %s needs a value", argv[i]);
    if (strcmp(name, "store") == 0) c->store = val;
    else if (strcmp(name, "id") == 0) c->id = val;
    else if (strcmp(name, "version") == 0) {
      int v[3];
      if (!dx__semver_parse(val, v)) /* refused before the store is opened: nothing written */
        return dxh_fail(2, "--version '%s' is not a version (expected MAJOR.MINOR.PATCH such "
                        "as 1.2.0)", val);
      c->version = val;
    }
    else if (strcmp(name, "timeout") == 0) c->timeout = val;
    else if (strcmp(name, "wait") == 0) { c->wait = 1; c->timeout = val; }
    else return dxh_fail(2, "unknown option --%s (see --help)", name);
  }
  return 0;
}

/* INPUT/DATA text: "-" reads stdin, "@path" reads a file (for payloads too large for a
** command-line argument), anything else is the JSON itself. *buf receives malloc'd text when
** read; NULL text stays NULL (JSON null). Returns 0, or an exit status after printing. */
static int json_arg(const char *arg, const char **text, char **buf) {
  FILE *f;
  size_t len = 0, cap = 0, got;
  *text = arg;
  *buf = NULL;
  if (!arg || (strcmp(arg, "-") != 0 && arg[0] != '@')) return 0;
  f = strcmp(arg, "-") == 0 ? stdin : fopen(arg + 1, "rb");
  if (!f) return dxh_fail(2, "cannot read %s", arg + 1);
  do {
    if (len + 4096 + 1 > cap) {
      char *nb = realloc(*buf, cap = (cap ? cap * 2 : 8192));
      if (!nb) break;
      *buf = nb;
    }
    got = fread(*buf + len, 1, cap - len - 1, f);
    len += got;
  } while (got > 0);
  if (ferror(f) || got > 0) { /* a read error, or stopped early for lack of memory */
    if (f != stdin) fclose(f);
    free(*buf);
    *buf = NULL;
    return dxh_fail(2, "cannot read %s", arg[0] == '@' ? arg + 1 : "standard input");
  }
  if (f != stdin) fclose(f);
  if (!*buf) return dxh_fail(1, "%s", "out of memory");
  (*buf)[len] = '\0';
  *text = *buf;
  return 0;
}

static int need(const cmdline_t *c, int n, const char *usage) {
  if (c->npos < n) return dxh_fail(2, "usage: duroxide-lua %s", usage);
  return 0;
}

static int print_status(const char *id, const dx_instance_info_t *info) {
  char *json = dx_instance_info_to_json(id, info);
  puts(json ? json : "{}");
  free(json);
  return info->status == DX_STATUS_FAILED ? 1 : 0;
}

static void print_started(const char *id) {
  json_t *o = json_pack("{s:s, s:s}", "instance_id", id, "status", "Started");
  char *s = dx__json_dump(o);
  puts(s ? s : "{}");
  free(s);
  json_decref(o);
}

static int wait_and_print(dx_client_t *cl, const char *id, const char *timeout_text) {
  int64_t timeout = 30000;
  dx_instance_info_t info;
  dx_error_t err;
  int rc;
  if (timeout_text && dx_parse_duration(timeout_text, &timeout) != 0)
    return dxh_fail(2, "invalid value for --timeout: '%s' (expected a duration such as 10s)",
                    timeout_text);
  rc = dx_client_wait(cl, id, timeout, &info, &err);
  if (rc == DX_ETIMEDOUT) {
    print_status(id, &info);
    dx_instance_info_clear(&info);
    fprintf(stderr, "duroxide-lua: %s\n", err.msg);
    return 3;
  }
  if (rc != 0) return dxh_fail(1, "%s", err.msg);
  rc = print_status(id, &info);
  dx_instance_info_clear(&info);
  return rc;
}

static int print_history(dx_client_t *cl, const char *id) {
  dx_provider_t *p = dx_client_provider(cl);
  dx_event_t *ev = NULL;
  size_t n = 0, i;
  dx_error_t err;
  int rc = p->methods->read_history(p, id, 0, &ev, &n, NULL, &err);
  if (rc == DX_ENOTFOUND) {
    dx_instance_info_t info;
    int queued = dx_client_status(cl, id, &info, NULL) == 0 && info.status != DX_STATUS_NONE;
    if (queued) dx_instance_info_clear(&info);
    return queued ? 0 : dxh_fail(1, "unknown instance '%s'", id); /* queued: no events yet */
  }
  if (rc != 0) return dxh_fail(1, "%s", err.msg);
  for (i = 0; i < n; i++) {
    char *json = dx_event_to_json(&ev[i]);
    puts(json ? json : "{}");
    free(json);
  }
  dx_events_free(ev, n);
  return 0;
}

static int print_id(void *ud, const char *id) {
  dx_client_t *cl = ud;
  dx_instance_info_t info;
  if (dx_client_status(cl, id, &info, NULL) == 0) {
    print_status(id, &info);
    dx_instance_info_clear(&info);
  }
  return 0;
}

/* One session row as a JSON line: who owns it, until when, and how much work is queued. */
static int print_session(void *ud, const dx_session_info_t *si) {
  int64_t now = *(const int64_t *)ud;
  int owned = si->worker_id && *si->worker_id;
  json_t *o = json_pack("{s:s, s:s?, s:I, s:I, s:I, s:s}", "session_id", si->session_id,
                        "owner", owned ? si->worker_id : NULL,
                        "locked_until_ms", (json_int_t)si->locked_until_ms,
                        "last_activity_ms", (json_int_t)si->last_activity_ms,
                        "queued", (json_int_t)si->queued,
                        "lease", !owned ? "released" : si->locked_until_ms > now ? "live"
                                                                                : "lapsed");
  char *s = o ? dx__json_dump(o) : NULL;
  puts(s ? s : "{}");
  free(s);
  json_decref(o);
  return 0;
}

int dxh_command(int argc, char **argv) {
  const char *cmd = argv[0];
  dx_client_t *cl = NULL;
  dx_error_t err;
  cmdline_t c;
  int rc = 0;
  if ((rc = parse(argc, argv, &c)) != 0) return rc;
  if (dx_client_open(&cl, dxh_store_dir(c.store), &err) != 0) {
    fprintf(stderr, "duroxide-lua: cannot open store %s: %s\n", dxh_store_dir(c.store), err.msg);
    return 1;
  }
  if (strcmp(cmd, "start") == 0) {
    if (!(rc = need(&c, 1, "start NAME [INPUT] --id ID [--wait [TIMEOUT]]"))) {
      const char *input;
      char *buf = NULL;
      int64_t ignored;
      if (!c.id) rc = dxh_fail(2, "%s", "start needs --id ID");
      else if (c.timeout && dx_parse_duration(c.timeout, &ignored) != 0)
        rc = dxh_fail(2, "invalid value for --wait: '%s' (expected a duration such as 10s)",
                      c.timeout); /* refused before anything is written */
      else if ((rc = json_arg(c.npos > 1 ? c.pos[1] : NULL, &input, &buf)) != 0) {
      } else if (dx_client_start(cl, c.id, c.pos[0], input, c.version, &err) != 0)
        rc = dxh_fail(err.code == DX_EJSON || err.code == DX_ETOOBIG ? 2 : 1, "%s", err.msg);
      else if (c.wait) rc = wait_and_print(cl, c.id, c.timeout);
      else print_started(c.id);
      free(buf);
    }
  } else if (strcmp(cmd, "raise") == 0) {
    if (!(rc = need(&c, 2, "raise ID EVENT [DATA]"))) {
      const char *data;
      char *buf = NULL;
      if ((rc = json_arg(c.npos > 2 ? c.pos[2] : NULL, &data, &buf)) != 0) {
      } else if (dx_client_raise(cl, c.pos[0], c.pos[1], data, &err) != 0) {
        rc = dxh_fail(err.code == DX_EJSON || err.code == DX_ETOOBIG ? 2 : 1, "%s", err.msg);
      }
      free(buf);
    }
  } else if (strcmp(cmd, "status") == 0) {
    if (!(rc = need(&c, 1, "status ID"))) {
      dx_instance_info_t info;
      if (dx_client_status(cl, c.pos[0], &info, &err) != 0) {
        rc = dxh_fail(1, "%s", err.msg);
      } else {
        print_status(c.pos[0], &info);
        rc = info.status == DX_STATUS_NONE ? 1 : 0;
        if (rc) fprintf(stderr, "duroxide-lua: unknown instance '%s'\n", c.pos[0]);
        dx_instance_info_clear(&info);
      }
    }
  } else if (strcmp(cmd, "wait") == 0) {
    if (!(rc = need(&c, 1, "wait ID [--timeout 10s]"))) rc = wait_and_print(cl, c.pos[0], c.timeout);
  } else if (strcmp(cmd, "cancel") == 0) {
    if (!(rc = need(&c, 1, "cancel ID [REASON]"))) {
      if (dx_client_cancel(cl, c.pos[0], c.npos > 1 ? c.pos[1] : NULL, &err) != 0)
        rc = dxh_fail(1, "%s", err.msg);
    }
  } else if (strcmp(cmd, "history") == 0) {
    if (!(rc = need(&c, 1, "history ID"))) rc = print_history(cl, c.pos[0]);
  } else if (strcmp(cmd, "sessions") == 0) {
    dx_provider_t *p = dx_client_provider(cl);
    int64_t now = dx_clock_now_ms();
    if (p->methods->list_sessions(p, print_session, &now, &err) != 0)
      rc = dxh_fail(1, "%s", err.msg);
  } else if (strcmp(cmd, "list") == 0) {
    dx_provider_t *p = dx_client_provider(cl);
    if (p->methods->list_instances(p, print_id, cl, &err) != 0) rc = dxh_fail(1, "%s", err.msg);
  }
  dx_client_close(cl);
  return rc;
}
