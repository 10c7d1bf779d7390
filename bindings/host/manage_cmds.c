/*
** manage_cmds.c -- duroxide-lua's management commands: list, describe, history, executions,
** delete, purge, prune, terminate. Their options are checked before the store is opened
** (dxh_manage_check), so a refused command exits 2 and creates nothing.
*/
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "duroxide.h"
#include "host.h"
#include "jsonout.h"
#include "providers/checks.h"
#include "providers/listing.h"

void dxh_put(char *json) {
  puts(json ? json : "{}");
  free(json);
}

static void put_obj(json_t *o) {
  dxh_put(o ? dx__json_dump(o) : NULL);
  json_decref(o);
}

/* A whole number in [min, max] from option text; 0 or an exit status after printing. */
static int whole(const char *opt, const char *text, long long min, long long max,
                 long long *out) {
  char *end = NULL;
  long long v = strtoll(text, &end, 10);
  if (!*text || *end || v < min || v > max) {
    char msg[256];
    snprintf(msg, sizeof msg, "invalid value for --%s: '%.60s' (expected a whole number from "
             "%lld to %lld)", opt, text, min, max);
    return dxh_fail(2, "%s", msg);
  }
  *out = v;
  return 0;
}

static int time_opt(const char *opt, const char *text, int64_t *out) {
  dx_error_t e;
  char msg[600];
  if (dx_parse_time(text, dx_clock_now_ms(), out, &e) == 0) return 0;
  snprintf(msg, sizeof msg, "invalid value for --%s: %s", opt, e.msg);
  return dxh_fail(2, "%s", msg);
}

static int status_opt(const char *text, int purge, int *out) {
  *out = dx_status_filter_from_name(text);
  if (*out == -100 || (purge && *out != DX_STATUS_COMPLETED && *out != DX_STATUS_FAILED)) {
    char msg[256];
    snprintf(msg, sizeof msg, "invalid value for --status: '%.60s' (expected %s)", text,
             purge ? "Completed or Failed" : "Pending, Running, Completed or Failed");
    return dxh_fail(2, "%s", msg);
  }
  return 0;
}

/* The list query of a command line (values already checked). */
static void list_query(const dxh_cmdline_t *c, dx_list_query_t *q) {
  long long limit = 50;
  memset(q, 0, sizeof *q);
  q->status = DX_LIST_ANY;
  if (c->status) q->status = dx_status_filter_from_name(c->status);
  q->name = c->name;
  if (c->limit) limit = strtoll(c->limit, NULL, 10);
  q->limit = (size_t)limit;
  q->after = c->after;
  if (c->created_after) dx_parse_time(c->created_after, dx_clock_now_ms(), &q->created_after_ms, NULL);
}

int dxh_manage_check(const char *cmd, const dxh_cmdline_t *c) {
  static const char *const with_id[] = {"describe", "history", "executions", "delete", "prune",
                                        "terminate"};
  long long n;
  int64_t t;
  int st, rc;
  size_t i;
  for (i = 0; i < sizeof with_id / sizeof with_id[0]; i++) {
    dx_error_t e;
    if (strcmp(cmd, with_id[i]) == 0 && c->npos > 0 && dx__check_instance(c->pos[0], &e) != 0)
      return dxh_fail(2, "%s", e.msg);
  }
  if (c->status && (rc = status_opt(c->status, strcmp(cmd, "purge") == 0, &st))) return rc;
  if (c->limit && (rc = whole("limit", c->limit, 1, DX_LIST_MAX_LIMIT, &n))) return rc;
  if (c->execution && (rc = whole("execution", c->execution, 1, INT64_MAX, &n))) return rc;
  if (c->keep && (rc = whole("keep", c->keep, 1, INT64_MAX, &n))) return rc;
  if (c->created_after && (rc = time_opt("created-after", c->created_after, &t))) return rc;
  if (c->completed_before && (rc = time_opt("completed-before", c->completed_before, &t)))
    return rc;
  if (c->name && (!*c->name || strlen(c->name) > DX_MAX_NAME_BYTES))
    return dxh_fail(2, "--name must be 1 to %s bytes", "200");
  if (c->after) {
    dx_list_query_t q;
    dx__cursor_t cur;
    dx_error_t e;
    list_query(c, &q);
    if (dx__list_query_check(&q, &cur, &e) != 0) return dxh_fail(2, "%s", e.msg);
  }
  if (strcmp(cmd, "purge") == 0 && !c->completed_before)
    return dxh_fail(2, "%s", "purge needs --completed-before DURATION|TIME (such as 30d or "
                    "2026-11-01T00:00:00Z)");
  if (strcmp(cmd, "prune") == 0 && !c->keep) return dxh_fail(2, "%s", "prune needs --keep N");
  if (strcmp(cmd, "terminate") == 0 && c->npos > 1 && strlen(c->pos[1]) > DX_MAX_REASON_BYTES)
    return dxh_fail(2, "terminate reason is longer than %s bytes", "1000");
  return 0;
}

int dxh_run_list(dx_client_t *cl, const dxh_cmdline_t *c) {
  dx_list_query_t q;
  dx_instance_info_t *rows = NULL;
  char *next = NULL;
  size_t n = 0, i;
  dx_error_t e;
  list_query(c, &q);
  if (dx_client_list(cl, &q, &rows, &n, &next, &e) != 0) return dxh_client_fail(e.code, e.msg);
  for (i = 0; i < n; i++) dxh_put(dx_list_row_to_json(&rows[i]));
  if (next) put_obj(json_pack("{s:s}", "next", next));
  dx_instance_infos_free(rows, n);
  free(next);
  return 0;
}

int dxh_run_describe(dx_client_t *cl, const dxh_cmdline_t *c) {
  char *json = NULL;
  dx_error_t e;
  if (dx_client_describe(cl, c->pos[0], &json, &e) != 0) return dxh_client_fail(e.code, e.msg);
  dxh_put(json);
  return 0;
}

int dxh_run_history(dx_client_t *cl, const dxh_cmdline_t *c) {
  dx_event_t *ev = NULL;
  size_t n = 0, i;
  uint64_t exec = c->execution ? (uint64_t)strtoull(c->execution, NULL, 10) : 0;
  dx_error_t e;
  if (dx_client_history(cl, c->pos[0], exec, &ev, &n, &e) != 0)
    return dxh_client_fail(e.code, e.msg);
  for (i = 0; i < n; i++) dxh_put(dx_event_to_json(&ev[i]));
  dx_events_free(ev, n);
  return 0;
}

int dxh_run_executions(dx_client_t *cl, const dxh_cmdline_t *c) {
  dx_execution_info_t *ex = NULL;
  size_t n = 0, i;
  dx_error_t e;
  if (dx_client_executions(cl, c->pos[0], &ex, &n, &e) != 0) return dxh_client_fail(e.code, e.msg);
  for (i = 0; i < n; i++) dxh_put(dx_execution_info_to_json(&ex[i]));
  free(ex);
  return 0;
}

int dxh_run_delete(dx_client_t *cl, const dxh_cmdline_t *c) {
  uint64_t n = 0;
  dx_error_t e;
  if (dx_client_delete(cl, c->pos[0], c->force, &n, &e) != 0) return dxh_client_fail(e.code, e.msg);
  put_obj(json_pack("{s:s, s:I}", "instance_id", c->pos[0], "deleted", (json_int_t)n));
  return 0;
}

int dxh_run_purge(dx_client_t *cl, const dxh_cmdline_t *c) {
  dx_purge_opts_t o;
  dx_purge_result_t r;
  dx_error_t e;
  memset(&o, 0, sizeof o);
  dx_parse_time(c->completed_before, dx_clock_now_ms(), &o.completed_before_ms, NULL);
  o.status = c->status ? dx_status_filter_from_name(c->status) : DX_LIST_TERMINAL;
  o.name = c->name;
  o.dry_run = c->dry_run;
  if (dx_client_purge(cl, &o, &r, &e) != 0) return dxh_client_fail(e.code, e.msg);
  put_obj(json_pack("{s:I, s:I, s:I, s:b, s:I}", "matched", (json_int_t)r.matched, "deleted",
                    (json_int_t)r.deleted, "batches", (json_int_t)r.batches, "dry_run",
                    c->dry_run, "completed_before_ms", (json_int_t)o.completed_before_ms));
  return 0;
}

int dxh_run_prune(dx_client_t *cl, const dxh_cmdline_t *c) {
  uint64_t n = 0, keep = (uint64_t)strtoull(c->keep, NULL, 10);
  dx_error_t e;
  if (dx_client_prune(cl, c->pos[0], keep, &n, &e) != 0) return dxh_client_fail(e.code, e.msg);
  put_obj(json_pack("{s:s, s:I, s:I}", "instance_id", c->pos[0], "pruned", (json_int_t)n,
                    "kept", (json_int_t)keep));
  return 0;
}

int dxh_run_terminate(dx_client_t *cl, const dxh_cmdline_t *c) {
  uint64_t n = 0;
  dx_error_t e;
  if (dx_client_terminate(cl, c->pos[0], c->npos > 1 ? c->pos[1] : NULL, &n, &e) != 0)
    return dxh_client_fail(e.code, e.msg);
  put_obj(json_pack("{s:s, s:I}", "instance_id", c->pos[0], "terminated", (json_int_t)n));
  return 0;
}
