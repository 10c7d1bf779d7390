/*
** ui_api.c -- the web console's JSON API: one table of routes over the client and the
** provider's read calls. Every answer is a JSON object; bad input gets 400 with {"error": ...}
** naming the parameter or field, before anything is changed.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "jsonout.h"
#include "ui.h"

/* {===== input checks =====} */

/* Refuse (400) a query argument the route does not take (`allowed`: NULL-terminated). */
static int check_args_known(dxh_req_t *r, const char *const *allowed);

/* A required id argument or field: non-empty, within the limit. 0, or replies 400. */
static int check_id(dxh_req_t *r, const char *where, const char *id) {
  char msg[200];
  if (!id || !*id) {
    dxh_reply_error(r, 400, "%s is missing (the instance id)", where);
    return -1;
  }
  if (strlen(id) > DX_MAX_INSTANCE_ID_BYTES) {
    snprintf(msg, sizeof msg, "%s is longer than %d bytes", where, DX_MAX_INSTANCE_ID_BYTES);
    dxh_reply_error(r, 400, "%s", msg);
    return -1;
  }
  return 0;
}

/* A positive integer argument within [1, max]; absent leaves *out. 0, or replies 400. */
static int uint_arg(dxh_req_t *r, const char *name, uint64_t max, uint64_t *out) {
  const char *text = dxh_req_arg(r, name);
  char *end, msg[200];
  unsigned long long v;
  if (!text) return 0;
  errno = 0;
  v = strtoull(text, &end, 10);
  if (!*text || *end || errno || text[0] == '-' || v < 1 || v > max) {
    snprintf(msg, sizeof msg, "query parameter %s must be a whole number from 1 to %llu (got "
             "'%%s')", name, (unsigned long long)max);
    dxh_reply_error(r, 400, msg, text);
    return -1;
  }
  *out = v;
  return 0;
}

/* The request body as a JSON object whose members are all in `fields`. NULL after a 400. */
static json_t *body_object(dxh_req_t *r, const char *const *fields) {
  const char *ct = dxh_req_header(r, "Content-Type");
  size_t len;
  const char *body = dxh_req_body(r, &len);
  json_error_t jerr;
  json_t *o;
  const char *key;
  json_t *v;
  /* A form on another site cannot send application/json without the browser asking first. */
  if (!ct || strncmp(ct, "application/json", 16) != 0) {
    dxh_reply_error(r, 415, "%s", "actions take a JSON body: send Content-Type: application/json");
    return NULL;
  }
  o = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
  if (!o || !json_is_object(o)) {
    char msg[300];
    snprintf(msg, sizeof msg, "request body is not a JSON object%s%.200s", o ? "" : ": ",
             o ? "" : jerr.text);
    json_decref(o);
    dxh_reply_error(r, 400, "%s", msg);
    return NULL;
  }
  json_object_foreach(o, key, v) {
    const char *const *f;
    for (f = fields; *f && strcmp(*f, key) != 0; f++) {}
    if (!*f) {
      dxh_reply_error(r, 400, "unknown field '%s' in the request body", key);
      json_decref(o);
      return NULL;
    }
  }
  return o;
}

/* Field `name` of o as a string (NULL when absent). -1 after a 400 when it is not a string. */
static int str_field(dxh_req_t *r, json_t *o, const char *name, const char **out) {
  json_t *v = json_object_get(o, name);
  *out = NULL;
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v)) {
    dxh_reply_error(r, 400, "field '%s' must be a string", name);
    return -1;
  }
  *out = json_string_value(v);
  return 0;
}

/* Answer a failed client call: bad input 400, unknown instance 404, the rest 500. */
static void reply_client_error(dxh_req_t *r, const dx_error_t *err) {
  int status = err->code == DX_ENOTFOUND ? 404
               : (err->code == DX_EINVAL || err->code == DX_EJSON || err->code == DX_ETOOBIG)
                   ? 400 : err->code == DX_ESTATE ? 409 : 500;
  dxh_reply_error(r, status, "%s", err->msg);
}

/* {===== instances =====} */

/* JSON text made by the client (malloc'd, taken) as a tree; NULL when it does not parse. */
static json_t *take_json(char *text) {
  json_t *j = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
  free(text);
  return j;
}

static void api_instances(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const args[] = {"status", "name", "limit", "after", NULL};
  dx_list_query_t q;
  uint64_t limit = 50;
  const char *status = dxh_req_arg(r, "status"), *name = dxh_req_arg(r, "name");
  const char *after = dxh_req_arg(r, "after");
  char *page = NULL;
  dx_error_t err;
  if (check_args_known(r, args) != 0 || uint_arg(r, "limit", DX_LIST_MAX_LIMIT, &limit) != 0)
    return;
  memset(&q, 0, sizeof q);
  q.status = status && *status ? dx_status_filter_from_name(status) : DX_LIST_ANY;
  if (q.status == -100) {
    dxh_reply_error(r, 400, "query parameter status '%s' is not one of Pending, Running, "
                    "Completed, Failed", status);
    return;
  }
  q.name = name && *name ? name : NULL;
  q.after = after && *after ? after : NULL;
  q.limit = (size_t)limit;
  if (dx_client_list_json(u->cl, &q, &page, &err) != 0) {
    reply_client_error(r, &err); /* a bad name or cursor: 400 naming it */
    return;
  }
  dxh_reply_json(r, 200, take_json(page));
}

/* The input of the current execution (its OrchestrationStarted event), or nothing. */
static void add_input(dxh_ui_t *u, const char *id, json_t *o) {
  dx_event_t *ev = NULL;
  size_t n = 0, i;
  if (dx_client_history(u->cl, id, 0, &ev, &n, NULL) != 0) return; /* queued: no history */
  for (i = 0; i < n; i++)
    if (ev[i].kind == DX_EV_ORCH_STARTED) {
      json_object_set_new(o, "input", dx__json_or_null(ev[i].data));
      break;
    }
  dx_events_free(ev, n);
}

/* describe's children are ids: add each one's orchestration and status for the page. */
static void add_child_rows(dxh_ui_t *u, json_t *o) {
  dx_provider_t *p = dx_client_provider(u->cl);
  json_t *rows = json_array(), *c;
  size_t i;
  json_array_foreach(json_object_get(o, "children"), i, c) {
    const char *cid = json_string_value(c);
    dx_instance_info_t info;
    memset(&info, 0, sizeof info);
    if (!cid) continue;
    if (p->methods->get_instance_info(p, cid, &info, NULL) == 0)
      json_array_append_new(rows, json_pack("{s:s, s:s, s:o}", "instance_id", cid, "status",
                                            dx_list_status_name(info.status), "orchestration",
                                            info.orchestration_name
                                                ? dx__json_text(info.orchestration_name)
                                                : json_null()));
    else
      json_array_append_new(rows, json_pack("{s:s}", "instance_id", cid));
    dx_instance_info_clear(&info);
  }
  json_object_set_new(o, "child_rows", rows);
}

/* describe (everything the store knows about the instance) plus its input and its children's
** status. */
static void api_instance(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const args[] = {"id", NULL};
  const char *id = dxh_req_arg(r, "id");
  char *text = NULL;
  dx_error_t err;
  json_t *o;
  if (check_args_known(r, args) != 0 || check_id(r, "query parameter id", id) != 0) return;
  if (dx_client_describe(u->cl, id, &text, &err) != 0) {
    reply_client_error(r, &err);
    return;
  }
  if ((o = take_json(text)) != NULL) {
    add_input(u, id, o);
    add_child_rows(u, o);
  }
  dxh_reply_json(r, 200, o);
}

static void api_history(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const args[] = {"id", "execution", NULL};
  const char *id = dxh_req_arg(r, "id");
  uint64_t exec = 0;
  dx_event_t *ev = NULL;
  size_t n = 0, i;
  dx_error_t err;
  json_t *events;
  if (check_args_known(r, args) != 0 || check_id(r, "query parameter id", id) != 0 ||
      uint_arg(r, "execution", UINT32_MAX, &exec) != 0)
    return;
  if (dx_client_history(u->cl, id, exec, &ev, &n, &err) != 0) {
    reply_client_error(r, &err);
    return;
  }
  events = json_array();
  for (i = 0; i < n; i++) {
    char *s = dx_event_to_json(&ev[i]);
    json_array_append_new(events, dx__json_or_null(s));
    free(s);
  }
  dx_events_free(ev, n);
  dxh_reply_json(r, 200, json_pack("{s:o, s:o}", "instance_id", dx__json_text(id), "events",
                                   events));
}

/* {===== actions =====} */

static void api_raise(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const fields[] = {"id", "event", "data", NULL};
  json_t *o = body_object(r, fields);
  const char *id, *event;
  char *data = NULL;
  dx_error_t err;
  if (!o) return;
  if (str_field(r, o, "id", &id) == 0 && check_id(r, "field 'id'", id) == 0 &&
      str_field(r, o, "event", &event) == 0) {
    if (!event || !*event)
      dxh_reply_error(r, 400, "%s", "field 'event' is missing (the event name)");
    else {
      json_t *d = json_object_get(o, "data");
      data = d ? dx__json_dump(d) : NULL;
      if (dx_client_raise(u->cl, id, event, data, &err) != 0) reply_client_error(r, &err);
      else dxh_reply_json(r, 200, json_pack("{s:s, s:s}", "instance_id", id, "raised", event));
    }
  }
  free(data);
  json_decref(o);
}

static void api_cancel(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const fields[] = {"id", "reason", NULL};
  json_t *o = body_object(r, fields);
  const char *id, *reason;
  dx_error_t err;
  if (!o) return;
  if (str_field(r, o, "id", &id) == 0 && check_id(r, "field 'id'", id) == 0 &&
      str_field(r, o, "reason", &reason) == 0) {
    if (dx_client_cancel(u->cl, id, reason, &err) != 0) reply_client_error(r, &err);
    else dxh_reply_json(r, 200, json_pack("{s:s, s:b}", "instance_id", id, "cancel_requested", 1));
  }
  json_decref(o);
}

static void api_terminate(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const fields[] = {"id", "reason", NULL};
  json_t *o = body_object(r, fields);
  const char *id, *reason;
  uint64_t n = 0;
  dx_error_t err;
  if (!o) return;
  if (str_field(r, o, "id", &id) == 0 && check_id(r, "field 'id'", id) == 0 &&
      str_field(r, o, "reason", &reason) == 0) {
    if (dx_client_terminate(u->cl, id, reason, &n, &err) != 0) reply_client_error(r, &err);
    else dxh_reply_json(r, 200, json_pack("{s:s, s:I}", "instance_id", id, "terminated",
                                          (json_int_t)n));
  }
  json_decref(o);
}

static void api_delete(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const fields[] = {"id", "force", NULL};
  json_t *o = body_object(r, fields), *force;
  const char *id;
  uint64_t n = 0;
  dx_error_t err;
  if (!o) return;
  force = json_object_get(o, "force");
  if (str_field(r, o, "id", &id) == 0 && check_id(r, "field 'id'", id) == 0) {
    if (force && !json_is_boolean(force))
      dxh_reply_error(r, 400, "%s", "field 'force' must be true or false");
    else if (dx_client_delete(u->cl, id, force && json_is_true(force), &n, &err) != 0)
      reply_client_error(r, &err);
    else
      dxh_reply_json(r, 200, json_pack("{s:s, s:I}", "instance_id", id, "deleted", (json_int_t)n));
  }
  json_decref(o);
}

/* {===== sessions, workers, charts =====} */

typedef struct {
  int64_t now;
  json_t *rows;
} sess_walk_t;

static int lease_live(const dx_session_info_t *s, int64_t now) {
  return s->worker_id && *s->worker_id && s->locked_until_ms > now;
}

static int sess_one(void *ud, const dx_session_info_t *s) {
  sess_walk_t *w = ud;
  int owned = s->worker_id && *s->worker_id;
  /* Session and worker ids are user text, not always UTF-8: dx__json_text keeps them whole. */
  json_array_append_new(w->rows, json_pack("{s:o, s:o, s:s, s:I, s:I, s:I, s:I}",
    "session_id", dx__json_text(s->session_id),
    "owner", owned ? dx__json_text(s->worker_id) : json_null(), "lease",
    !owned ? "released" : lease_live(s, w->now) ? "live" : "lapsed", "locked_until_ms",
    (json_int_t)s->locked_until_ms, "last_activity_ms", (json_int_t)s->last_activity_ms,
    "idle_ms", (json_int_t)(s->last_activity_ms ? w->now - s->last_activity_ms : 0),
    "queued", (json_int_t)s->queued));
  return 0;
}

/* The session table now; NULL (err filled) when the store cannot list it. */
static json_t *session_rows(dxh_ui_t *u, int64_t now, dx_error_t *err) {
  dx_provider_t *p = dx_client_provider(u->cl);
  sess_walk_t w = {now, json_array()};
  if (p->methods->list_sessions(p, sess_one, &w, err) != 0) {
    json_decref(w.rows);
    return NULL;
  }
  return w.rows;
}

/* One stored session event as the sessions page shows it (newest first after sorting). */
static json_t *change_of(const char *sid, json_t *ev) {
  const char *event = json_string_value(json_object_get(ev, "event"));
  json_t *worker = json_object_get(ev, "worker_id"), *prev = json_object_get(ev, "previous_owner");
  int released = event && strcmp(event, "released") == 0;
  return json_pack("{s:O, s:o, s:s, s:O, s:O, s:O}", "t", json_object_get(ev, "at_ms"),
                   "session_id", dx__json_text(sid), "change", event ? event : "",
                   "from", released ? worker : prev, "to", released ? json_null() : worker,
                   "detail", json_object_get(ev, "detail"));
}

static int newest_first(const void *a, const void *b) {
  json_int_t x = json_integer_value(json_object_get(*(json_t *const *)a, "t"));
  json_int_t y = json_integer_value(json_object_get(*(json_t *const *)b, "t"));
  return x < y ? 1 : x > y ? -1 : 0;
}

/* The stored history (claims, moves, releases) of the listed sessions, newest first, at most
** DXH_UI_MOVES entries. NULL (err filled) when the store cannot be read. */
static json_t *stored_changes(dxh_ui_t *u, json_t *rows, dx_error_t *err) {
  json_t *all = json_array(), *row, *hist, *ev, **v, *out;
  const char *sid;
  char *text;
  size_t i, j, n;
  json_array_foreach(rows, i, row) {
    sid = json_string_value(json_object_get(row, "session_id"));
    if (!sid) continue;
    if (dx_client_session_history_json(u->cl, sid, &text, err) != 0) {
      json_decref(all);
      return NULL;
    }
    hist = take_json(text);
    json_array_foreach(json_object_get(hist, "events"), j, ev)
      json_array_append_new(all, change_of(sid, ev));
    json_decref(hist);
  }
  n = json_array_size(all);
  out = json_array();
  if (n && (v = malloc(n * sizeof *v)) != NULL) {
    for (i = 0; i < n; i++) v[i] = json_array_get(all, i);
    qsort(v, n, sizeof *v, newest_first);
    for (i = 0; i < n && i < DXH_UI_MOVES; i++) json_array_append(out, v[i]);
    free(v);
  }
  json_decref(all);
  return out;
}

static void api_sessions(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const args[] = {NULL};
  int64_t now = dx_clock_now_ms();
  dx_error_t err;
  json_t *rows, *moves;
  if (check_args_known(r, args) != 0) return;
  if (!(rows = session_rows(u, now, &err))) {
    reply_client_error(r, &err);
    return;
  }
  if (!(moves = stored_changes(u, rows, &err))) {
    json_decref(rows);
    reply_client_error(r, &err);
    return;
  }
  dxh_reply_json(r, 200, json_pack("{s:I, s:o, s:o}", "now_ms", (json_int_t)now, "sessions",
                                    rows, "moves", moves));
}

/* The live workers of the store (dx_client_workers_json): registrations whose process lives,
** with their load and sessions. */
static void api_workers(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const args[] = {NULL};
  dx_error_t err;
  char *text;
  json_t *o;
  if (check_args_known(r, args) != 0) return;
  if (dx_client_workers_json(u->cl, &text, &err) != 0) {
    reply_client_error(r, &err);
    return;
  }
  o = take_json(text);
  json_object_set(o, "now_ms", json_object_get(o, "time_ms"));
  dxh_reply_json(r, 200, o);
}

static void api_metrics(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const args[] = {NULL};
  if (check_args_known(r, args) != 0) return;
  dxh_reply_json(r, 200, json_pack("{s:I, s:i, s:O}", "now_ms", (json_int_t)dx_clock_now_ms(),
                                   "interval_ms", DXH_UI_SAMPLE_MS, "samples", u->samples));
}

static void api_overview(dxh_ui_t *u, dxh_req_t *r) {
  static const char *const args[] = {NULL};
  if (check_args_known(r, args) != 0) return;
  dxh_reply_json(r, 200, json_pack("{s:o, s:b, s:s}", "store", dx__json_text(u->store),
                                   "read_only", u->read_only, "version", dx_version()));
}

/* A chart sample: the store-wide figures of `duroxide-lua stats`, flattened. */
void dxh_ui_sample(dxh_ui_t *u) {
  int64_t now = dx_clock_now_ms();
  char *text = NULL;
  json_t *st, *ss, *ws = NULL;
  if (dx_client_stats_json(u->cl, &text, NULL) != 0 || !(st = take_json(text)))
    return; /* the store is busy or gone: a gap in the chart */
  if (dx_client_workers_json(u->cl, &text, NULL) == 0) ws = take_json(text);
  ss = json_object_get(st, "sessions");
  json_array_append_new(u->samples, json_pack("{s:I, s:O, s:O, s:O, s:O, s:O, s:O, s:I}",
    "t", (json_int_t)now, "orchestrator_queue", json_object_get(st, "orchestrator_queue"),
    "worker_queue", json_object_get(st, "worker_queue"), "instances",
    json_object_get(st, "instances"), "sessions", json_object_get(ss, "total"),
    "sessions_owned", json_object_get(ss, "live"), "session_work", json_object_get(ss, "queued"),
    "workers", (json_int_t)(ws ? json_array_size(json_object_get(ws, "workers"))
                               : json_object_size(json_object_get(ss, "by_worker")))));
  json_decref(st);
  json_decref(ws);
  while (json_array_size(u->samples) > DXH_UI_SAMPLES) json_array_remove(u->samples, 0);
}

/* {===== routing =====} */

typedef void (*api_fn)(dxh_ui_t *u, dxh_req_t *r);

static const struct {
  const char *method, *path;
  int action; /* changes something: refused in read-only mode */
  api_fn fn;
} routes[] = {
  {"GET", "/api/overview", 0, api_overview},
  {"GET", "/api/instances", 0, api_instances},
  {"GET", "/api/instance", 0, api_instance},
  {"GET", "/api/history", 0, api_history},
  {"GET", "/api/sessions", 0, api_sessions},
  {"GET", "/api/workers", 0, api_workers},
  {"GET", "/api/metrics", 0, api_metrics},
  {"POST", "/api/raise", 1, api_raise},
  {"POST", "/api/cancel", 1, api_cancel},
  {"POST", "/api/terminate", 1, api_terminate},
  {"POST", "/api/delete", 1, api_delete},
};

static int check_args_known(dxh_req_t *r, const char *const *allowed) {
  const char *bad = dxh_req_unknown_arg(r, allowed);
  if (!bad) return 0;
  dxh_reply_error(r, 400, "unknown query parameter '%s'", bad);
  return -1;
}

void dxh_ui_api(dxh_ui_t *u, dxh_req_t *r) {
  const char *method = dxh_req_method(r), *path = dxh_req_path(r);
  size_t i;
  int path_known = 0;
  for (i = 0; i < sizeof routes / sizeof routes[0]; i++) {
    if (strcmp(routes[i].path, path) != 0) continue;
    path_known = 1;
    if (strcmp(routes[i].method, method) != 0) continue;
    if (routes[i].action && u->read_only) {
      dxh_reply_error(r, 403, "%s: the console runs with --read-only", path);
      return;
    }
    routes[i].fn(u, r);
    return;
  }
  if (path_known) dxh_reply_error(r, 405, "%s does not answer this method", path);
  else dxh_reply_error(r, 404, "no API %s", path);
}
