/*
** commands.c -- duroxide-lua's client commands: the command table and its parser; start, raise,
** enqueue, status, wait, cancel, kv, sessions, stats, check (the management commands are in
** manage_cmds.c). Output on stdout is JSON, one object per line; errors go to stderr.
*/
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "duroxide.h"
#include "host.h"
#include "util.h"
#include "codec.h"
#include "jsonout.h"

int dxh_split_opt(int argc, char **argv, int *i, char *name, size_t len, const char **val) {
  const char *a = argv[*i] + 2, *eq = strchr(a, '=');
  if (eq) {
    snprintf(name, len, "%.*s", (int)(eq - a), a);
    *val = eq + 1;
  } else {
    snprintf(name, len, "%s", a);
    if (*i + 1 >= argc) return -1;
    *val = argv[++*i];
  }
  /* "--id --wait" is a forgotten value, not the id "--wait" */
  return strncmp(*val, "--", 2) == 0 ? -2 : 0;
}

int dxh_opt_error(const char *opt, int rc, const char *val) {
  char msg[512];
  if (rc == -2)
    snprintf(msg, sizeof msg, "option %s needs a value (got option-like '%.200s'; values may not "
             "start with --)", opt, val);
  else
    snprintf(msg, sizeof msg, "option %s needs a value", opt);
  return dxh_fail(2, "%s", msg);
}

const char *dxh_store_dir(const char *explicit_dir) {
  const char *env = getenv("DUROXIDE_STORE");
  if (explicit_dir) return explicit_dir;
  return env && *env ? env : "./duroxide-data";
}

/* {===== command line =====} */

/* Options a command may take (--store is taken by every command). */
enum {
  O_ID = 1, O_VERSION = 2, O_WAIT = 4, O_TIMEOUT = 8, O_STATUS = 16, O_NAME = 32, O_LIMIT = 64,
  O_AFTER = 128, O_CREATED_AFTER = 256, O_EXECUTION = 512, O_FORCE = 1024,
  O_COMPLETED_BEFORE = 2048, O_DRY_RUN = 4096, O_KEEP = 8192, O_HISTORY = 16384
};

typedef dxh_cmdline_t cmdline_t;

typedef int (*run_fn)(dx_client_t *cl, const cmdline_t *c);

typedef struct {
  const char *name;
  int min, max;        /* positional arguments */
  int payload;         /* index of the JSON positional (INPUT/DATA), -1 when none */
  unsigned opts;       /* O_* */
  const char *payload_name; /* how errors name the payload */
  const char *usage;
  run_fn run;
} command_t;

#define AT(f) offsetof(cmdline_t, f)
/* Every option: its bit, and where its value goes (a switch sets an int; --wait,
** whose value is optional, is parsed on its own). */
static const struct {
  const char *name;
  unsigned bit;
  size_t off;
} option_names[] = {{"id", O_ID, AT(id)}, {"version", O_VERSION, AT(version)},
                    {"wait", O_WAIT, AT(timeout)}, {"timeout", O_TIMEOUT, AT(timeout)},
                    {"status", O_STATUS, AT(status)}, {"name", O_NAME, AT(name)},
                    {"limit", O_LIMIT, AT(limit)}, {"after", O_AFTER, AT(after)},
                    {"created-after", O_CREATED_AFTER, AT(created_after)},
                    {"execution", O_EXECUTION, AT(execution)}, {"force", O_FORCE, AT(force)},
                    {"completed-before", O_COMPLETED_BEFORE, AT(completed_before)},
                    {"dry-run", O_DRY_RUN, AT(dry_run)}, {"keep", O_KEEP, AT(keep)},
                    {"history", O_HISTORY, AT(history)}};
/* Switches: their field is an int set to 1. */
static int is_switch(unsigned bit) { return bit == O_FORCE || bit == O_DRY_RUN; }

static const command_t *find_command(const char *word);

int dxh_is_command(const char *word) { return find_command(word) != NULL; }

/* "--wait" takes an optional duration: the next argument when it starts with a digit. */
static int takes_wait_value(int argc, char **argv, int i) {
  return i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9';
}

static int parse(const command_t *cmd, int argc, char **argv, cmdline_t *c) {
  int i, only_pos = 0;
  memset(c, 0, sizeof *c);
  for (i = 1; i < argc; i++) {
    char name[64];
    const char *val = NULL, *a = argv[i];
    unsigned bit = 0;
    size_t k, off = 0;
    int rc;
    if (!only_pos && strcmp(a, "--") == 0) { /* the rest are arguments, even "--x" */
      only_pos = 1;
      continue;
    }
    if (only_pos || strncmp(a, "--", 2) != 0) {
      if (c->npos == cmd->max) {
        char msg[512];
        snprintf(msg, sizeof msg, "unexpected argument '%.200s' (usage: duroxide-lua %s)", a,
                 cmd->usage);
        return dxh_fail(2, "%s", msg);
      }
      c->pos[c->npos++] = a;
      continue;
    }
    {
      const char *eq = strchr(a + 2, '=');
      snprintf(name, sizeof name, "%.*s", (int)(eq ? (size_t)(eq - a - 2) : strlen(a + 2)),
               a + 2);
    }
    if (strcmp(name, "store") != 0) {
      for (k = 0; k < sizeof option_names / sizeof option_names[0]; k++)
        if (strcmp(name, option_names[k].name) == 0) {
          bit = option_names[k].bit;
          off = option_names[k].off;
        }
      if (!bit) return dxh_fail(2, "unknown option --%s (see --help)", name);
      if (!(cmd->opts & bit)) {
        char msg[512];
        snprintf(msg, sizeof msg, "option --%s does not apply to %s (usage: duroxide-lua %s)",
                 name, cmd->name, cmd->usage);
        return dxh_fail(2, "%s", msg);
      }
    }
    if (strcmp(a, "--wait") == 0) {
      c->wait = 1;
      if (takes_wait_value(argc, argv, i)) c->timeout = argv[++i];
      continue;
    }
    if (is_switch(bit)) {
      if (strchr(a, '=')) return dxh_fail(2, "option --%s takes no value", name);
      *(int *)(void *)((char *)c + off) = 1;
      continue;
    }
    if ((rc = dxh_split_opt(argc, argv, &i, name, sizeof name, &val)) != 0)
      return dxh_opt_error(a, rc, val);
    if (strcmp(name, "store") == 0) c->store = val;
    else if (bit == O_ID) c->id = val;
    else if (bit == O_VERSION) {
      int v[3];
      if (!dx__semver_parse(val, v)) /* refused before the store is opened: nothing written */
        return dxh_fail(2, "--version '%s' is not a version (expected MAJOR.MINOR.PATCH such "
                        "as 1.2.0)", val);
      c->version = val;
    }
    else if (bit == O_WAIT) { c->wait = 1; c->timeout = val; }
    else *(const char **)(void *)((char *)c + off) = val;
  }
  if (c->npos < cmd->min) return dxh_fail(2, "usage: duroxide-lua %s", cmd->usage);
  return 0;
}

/* INPUT/DATA text: "-" reads stdin, "@path" reads a file (for payloads too large for a
** command-line argument), anything else is the JSON itself. Reading stops past the payload
** limit (no 2 GB read of /dev/zero), and text with a NUL byte is refused (it would be cut
** there). *buf receives malloc'd text when read. Returns 0, or an exit status after printing. */
static int json_arg(const char *arg, const char **text, char **buf) {
  const char *what = arg && arg[0] == '@' ? arg + 1 : "standard input";
  char msg[512];
  FILE *f;
  size_t len;
  *text = arg;
  *buf = NULL;
  if (!arg || (strcmp(arg, "-") != 0 && arg[0] != '@')) return 0;
  f = strcmp(arg, "-") == 0 ? stdin : fopen(arg + 1, "rb");
  if (!f) return dxh_fail(2, "cannot read %s", what);
  *buf = malloc((size_t)DX_MAX_PAYLOAD_BYTES + 2);
  if (!*buf) {
    if (f != stdin) fclose(f);
    return dxh_fail(1, "%s", "out of memory");
  }
  len = fread(*buf, 1, (size_t)DX_MAX_PAYLOAD_BYTES + 1, f); /* one byte more: too big? */
  msg[0] = '\0';
  if (ferror(f)) snprintf(msg, sizeof msg, "cannot read %s", what);
  else if (len > (size_t)DX_MAX_PAYLOAD_BYTES)
    snprintf(msg, sizeof msg, "%s is larger than the payload limit of %d bytes", what,
             DX_MAX_PAYLOAD_BYTES);
  else if (memchr(*buf, '\0', len))
    snprintf(msg, sizeof msg, "%s contains a NUL byte (JSON text cannot)", what);
  if (f != stdin) fclose(f);
  if (msg[0]) {
    free(*buf);
    *buf = NULL;
    return dxh_fail(2, "%s", msg);
  }
  (*buf)[len] = '\0';
  *text = *buf;
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

/* One session row as a JSON line: who owns it, until when, how long it has been idle, how
** much work is queued and how much of it runs now. */
static int print_session(void *ud, const dx_session_info_t *si) {
  int64_t now = *(const int64_t *)ud;
  int owned = si->worker_id && *si->worker_id;
  json_t *o = json_pack("{s:s, s:s?, s:I, s:I, s:I, s:I, s:s}", "session_id", si->session_id,
                        "owner", owned ? si->worker_id : NULL,
                        "locked_until_ms", (json_int_t)si->locked_until_ms,
                        "last_activity_ms", (json_int_t)si->last_activity_ms,
                        "queued", (json_int_t)si->queued,
                        "running", (json_int_t)si->running,
                        "lease", !owned ? "released" : si->locked_until_ms > now ? "live"
                                                                                : "lapsed");
  char *s;
  if (o && owned) /* negative once lapsed */
    json_object_set_new(o, "lease_expires_in_ms", json_integer(si->locked_until_ms - now));
  if (o && si->last_activity_ms > 0)
    json_object_set_new(o, "idle_ms", json_integer(now > si->last_activity_ms
                                                       ? now - si->last_activity_ms : 0));
  s = o ? dx__json_dump(o) : NULL;
  puts(s ? s : "{}");
  free(s);
  json_decref(o);
  return 0;
}

/* One entry of a session's history as a JSON line: when, what, which worker, how or why. */
static int print_session_event(void *ud, const dx_session_event_t *e) {
  int released = strcmp(e->event, "released") == 0;
  json_t *o = json_pack("{s:s, s:I, s:s, s:s}", "session_id", e->session_id,
                        "at_ms", (json_int_t)e->at_ms, "event", e->event,
                        "worker_id", e->worker_id);
  char *s;
  (void)ud;
  if (o && e->detail) json_object_set_new(o, released ? "reason" : "how", json_string(e->detail));
  if (o && e->previous_owner) json_object_set_new(o, "from", json_string(e->previous_owner));
  s = o ? dx__json_dump(o) : NULL;
  puts(s ? s : "{}");
  free(s);
  json_decref(o);
  return 0;
}

/* {===== commands =====} */

int dxh_client_fail(int code, const char *msg) {
  return dxh_fail(code == DX_EJSON || code == DX_ETOOBIG || code == DX_EINVAL ? 2 : 1, "%s", msg);
}

static int client_fail(const dx_error_t *err) { return dxh_client_fail(err->code, err->msg); }

static int run_start(dx_client_t *cl, const cmdline_t *c) {
  dx_error_t err;
  if (dx_client_start(cl, c->id, c->pos[0], c->payload, c->version, &err) != 0)
    return client_fail(&err);
  if (c->wait) return wait_and_print(cl, c->id, c->timeout);
  print_started(c->id);
  return 0;
}

static int run_raise(dx_client_t *cl, const cmdline_t *c) {
  dx_error_t err;
  return dx_client_raise(cl, c->pos[0], c->pos[1], c->payload, &err) != 0 ? client_fail(&err)
                                                                          : 0;
}

static int run_enqueue(dx_client_t *cl, const cmdline_t *c) {
  dx_error_t err;
  return dx_client_enqueue_event(cl, c->pos[0], c->pos[1], c->payload, &err) != 0
             ? client_fail(&err) : 0;
}

static int collect_kv(void *ud, const char *key, const char *value, int64_t updated_ms) {
  json_t *v = json_loads(value, JSON_DECODE_ANY, NULL);
  (void)updated_ms;
  json_object_set_new(ud, key, v ? v : json_null());
  return 0;
}

/* kv ID: one JSON object of every key; kv ID KEY: that key's value (exit 1 when absent). */
static int run_kv(dx_client_t *cl, const cmdline_t *c) {
  dx_instance_info_t info;
  dx_error_t err;
  char *out = NULL;
  int rc;
  if (dx_client_status(cl, c->pos[0], &info, &err) != 0) return client_fail(&err);
  rc = info.status == DX_STATUS_NONE;
  dx_instance_info_clear(&info);
  if (rc) return dxh_fail(1, "unknown instance '%s'", c->pos[0]);
  if (c->npos > 1) {
    if (dx_client_kv_get(cl, c->pos[0], c->pos[1], &out, &err) != 0) return client_fail(&err);
  } else {
    json_t *all = json_object();
    if (!all) return dxh_fail(1, "%s", "out of memory");
    if (dx_client_kv_list(cl, c->pos[0], collect_kv, all, &err) != 0) {
      json_decref(all);
      return client_fail(&err);
    }
    out = dx__json_dump(all);
    json_decref(all);
  }
  puts(out ? out : "null");
  free(out);
  return 0;
}

static int run_status(dx_client_t *cl, const cmdline_t *c) {
  dx_instance_info_t info;
  dx_error_t err;
  int rc;
  if (dx_client_status(cl, c->pos[0], &info, &err) != 0) return client_fail(&err);
  print_status(c->pos[0], &info);
  rc = info.status == DX_STATUS_NONE ? 1 : 0;
  if (rc) fprintf(stderr, "duroxide-lua: unknown instance '%s'\n", c->pos[0]);
  dx_instance_info_clear(&info);
  return rc;
}

static int run_wait(dx_client_t *cl, const cmdline_t *c) {
  return wait_and_print(cl, c->pos[0], c->timeout);
}

static int run_cancel(dx_client_t *cl, const cmdline_t *c) {
  dx_error_t err;
  return dx_client_cancel(cl, c->pos[0], c->npos > 1 ? c->pos[1] : NULL, &err) != 0
             ? client_fail(&err) : 0;
}


static int run_sessions(dx_client_t *cl, const cmdline_t *c) {
  dx_provider_t *p = dx_client_provider(cl);
  int64_t now = dx_clock_now_ms();
  dx_error_t err;
  if (c->history) {
    if (p->methods->version < 8 || !p->methods->list_session_events)
      return dxh_fail(1, "%s", "this store's provider keeps no session history");
    return p->methods->list_session_events(p, c->history, print_session_event, NULL, &err) != 0
               ? client_fail(&err) : 0;
  }
  return p->methods->list_sessions(p, print_session, &now, &err) != 0 ? client_fail(&err) : 0;
}

/* `workers`: one JSON line per live worker (dx_client_workers_json), ascending id. */
static int run_workers(dx_client_t *cl, const cmdline_t *c) {
  dx_error_t err;
  json_t *o, *w;
  char *json, *line;
  size_t i;
  (void)c;
  if (dx_client_workers_json(cl, &json, &err) != 0) return client_fail(&err);
  o = json_loads(json, 0, NULL);
  free(json);
  json_array_foreach(json_object_get(o, "workers"), i, w) {
    line = dx__json_dump(w);
    puts(line ? line : "{}");
    free(line);
  }
  json_decref(o);
  return 0;
}

/* `stats`: the store-wide figures (dx_client_stats_json) as one JSON line. */
static int run_stats(dx_client_t *cl, const cmdline_t *c) {
  dx_error_t err;
  char *json;
  (void)c;
  if (dx_client_stats_json(cl, &json, &err) != 0) return client_fail(&err);
  puts(json);
  free(json);
  return 0;
}

static int run_check(dx_client_t *cl, const cmdline_t *c);

static const command_t commands[] = {
  {"start", 1, 2, 1, O_ID | O_VERSION | O_WAIT | O_TIMEOUT,
   "input", "start NAME [INPUT] --id ID [--wait [TIMEOUT]] [--version V]", run_start},
  {"raise", 2, 3, 2, 0, "event data", "raise ID EVENT [DATA]", run_raise},
  {"enqueue", 2, 3, 2, 0, "event data", "enqueue ID QUEUE [DATA]", run_enqueue},
  {"status", 1, 1, -1, 0, NULL, "status ID", run_status},
  {"wait", 1, 1, -1, O_TIMEOUT, NULL, "wait ID [--timeout 10s]", run_wait},
  {"cancel", 1, 2, -1, 0, NULL, "cancel ID [REASON]", run_cancel},
  {"history", 1, 1, -1, O_EXECUTION, NULL, "history ID [--execution N]", dxh_run_history},
  {"kv", 1, 2, -1, 0, NULL, "kv ID [KEY]", run_kv},
  {"list", 0, 0, -1, O_STATUS | O_NAME | O_LIMIT | O_AFTER | O_CREATED_AFTER, NULL,
   "list [--status S] [--name N] [--limit N] [--after CURSOR] [--created-after T]",
   dxh_run_list},
  {"describe", 1, 1, -1, 0, NULL, "describe ID", dxh_run_describe},
  {"executions", 1, 1, -1, 0, NULL, "executions ID", dxh_run_executions},
  {"delete", 1, 1, -1, O_FORCE, NULL, "delete ID [--force]", dxh_run_delete},
  {"purge", 0, 0, -1, O_COMPLETED_BEFORE | O_STATUS | O_NAME | O_DRY_RUN, NULL,
   "purge --completed-before DURATION|TIME [--status S] [--name N] [--dry-run]", dxh_run_purge},
  {"prune", 1, 1, -1, O_KEEP, NULL, "prune ID --keep N", dxh_run_prune},
  {"terminate", 1, 2, -1, 0, NULL, "terminate ID [REASON]", dxh_run_terminate},
  {"sessions", 0, 0, -1, O_HISTORY, NULL, "sessions [--history SESSION_ID]", run_sessions},
  {"workers", 0, 0, -1, 0, NULL, "workers", run_workers},
  {"stats", 0, 0, -1, 0, NULL, "stats", run_stats},
  {"check", 0, 0, -1, 0, NULL, "check", run_check},
};

static const command_t *find_command(const char *word) {
  size_t i;
  for (i = 0; i < sizeof commands / sizeof commands[0]; i++)
    if (strcmp(word, commands[i].name) == 0) return &commands[i];
  return NULL;
}

/* Everything that can be checked without the store is checked first: a refused command
** exits 2 before the store is opened, so it creates no store files. */
static int check_args(const command_t *cmd, const cmdline_t *c) {
  int64_t ms;
  int rc;
  if ((rc = dxh_manage_check(cmd->name, c)) != 0) return rc;
  if (cmd->run == run_start && !c->id) return dxh_fail(2, "%s", "start needs --id ID");
  if (c->history && (!*c->history || strlen(c->history) > DX_MAX_SESSION_ID_BYTES)) {
    char msg[128];
    snprintf(msg, sizeof msg, "--history needs a session id of 1 to %d bytes (got %zu)",
             DX_MAX_SESSION_ID_BYTES, strlen(c->history));
    return dxh_fail(2, "%s", msg);
  }
  if (c->timeout && dx_parse_duration(c->timeout, &ms) != 0)
    return dxh_fail(2, c->wait && cmd->run == run_start
                           ? "invalid value for --wait: '%s' (expected a duration such as 10s)"
                           : "invalid value for --timeout: '%s' (expected a duration such as "
                             "10s)", c->timeout);
  return 0;
}

/* Invalid JSON is refused before the store is opened (the client checks it again). */
static int check_json(const command_t *cmd, const char *text) {
  char *canon = NULL;
  dx_error_t err;
  char msg[sizeof err.msg + 64];
  if (dx__json_canonical(text, strlen(text), &canon, &err) == 0) {
    free(canon);
    return 0;
  }
  snprintf(msg, sizeof msg, "%s: %s", cmd->payload_name, err.msg);
  return dxh_fail(err.code == DX_ENOMEM ? 1 : 2, "%s", msg);
}

static void print_problem(void *ud, const char *problem) {
  json_t *o = json_pack("{s:s}", "problem", problem);
  char *s = o ? dx__json_dump(o) : NULL;
  puts(s ? s : "{}");
  free(s);
  json_decref(o);
  (void)ud;
}

/* `check`: every problem on its own line, then a summary; exit 1 when anything is wrong. */
static int run_check(dx_client_t *cl, const cmdline_t *c) {
  const char *store = dxh_store_dir(c->store);
  dx_provider_t *p = dx_client_provider(cl);
  uint64_t records = 0, problems = 0;
  dx_error_t err;
  json_t *o;
  char *s;
  if (p->methods->version < 4 || !p->methods->check)
    return dxh_fail(1, "%s", "this store's provider cannot check stores");
  if (p->methods->check(p, print_problem, NULL, &records, &problems, &err) != 0)
    return dxh_fail(1, "%s", err.msg);
  o = json_pack("{s:s, s:I, s:I, s:b}", "store", store, "records", (json_int_t)records,
                "problems", (json_int_t)problems, "ok", problems == 0);
  s = o ? dx__json_dump(o) : NULL;
  puts(s ? s : "{}");
  free(s);
  json_decref(o);
  return problems ? 1 : 0;
}

int dxh_command(int argc, char **argv) {
  const command_t *cmd = find_command(argv[0]);
  dx_client_t *cl = NULL;
  dx_error_t err;
  cmdline_t c;
  int rc;
  if (!cmd) return dxh_fail(2, "unknown command '%s' (see --help)", argv[0]);
  if ((rc = parse(cmd, argc, argv, &c)) != 0 || (rc = check_args(cmd, &c)) != 0) return rc;
  if (cmd->payload >= 0 &&
      (rc = json_arg(c.npos > cmd->payload ? c.pos[cmd->payload] : NULL, &c.payload,
                     &c.payload_buf)) != 0)
    return rc;
  if (c.payload && (rc = check_json(cmd, c.payload)) != 0) {
    free(c.payload_buf);
    return rc;
  }
  if (dx_client_open(&cl, dxh_store_dir(c.store), &err) != 0) {
    fprintf(stderr, "duroxide-lua: cannot open store %s: %s\n", dxh_store_dir(c.store), err.msg);
    free(c.payload_buf);
    return 1;
  }
  rc = cmd->run(cl, &c);
  dx_client_close(cl);
  free(c.payload_buf);
  return rc;
}
