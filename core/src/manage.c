/*
** manage.c -- the client's management calls over the provider's management part: list pages,
** executions, describe, delete (whole trees), purge, prune, terminate; and their JSON.
*/
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "duroxide.h"
#include "jsonout.h"
#include "providers/checks.h"
#include "providers/listing.h"
#include "util.h"

void dx__runtime_poke_all(void);

/* The provider, when it has the management part; else DX_ESTATE naming it. */
static int admin(dx_client_t *c, dx_provider_t **out, dx_error_t *err) {
  dx_provider_t *p = dx_client_provider(c);
  if (!p) return dx_error_set(err, DX_EINVAL, "NULL client");
  if (p->methods->version < 6 || !p->methods->list_page)
    return dx_error_set(err, DX_ESTATE, "the %s provider has no management support",
                        p->methods->name);
  *out = p;
  return 0;
}

/* {===== names and JSON =====} */

static const struct {
  const char *name;
  int status;
} status_names[] = {{"Pending", DX_STATUS_NONE}, {"Running", DX_STATUS_RUNNING},
                    {"Completed", DX_STATUS_COMPLETED}, {"Failed", DX_STATUS_FAILED}};

int dx_status_filter_from_name(const char *name) {
  size_t i;
  if (!name) return DX_LIST_ANY;
  for (i = 0; i < sizeof status_names / sizeof status_names[0]; i++)
    if (strcmp(name, status_names[i].name) == 0) return status_names[i].status;
  return -100;
}

const char *dx_list_status_name(int status) {
  return status == DX_STATUS_NONE ? "Pending" : dx_status_name(status);
}

static json_t *row_json(const dx_instance_info_t *r) {
  json_t *o = json_object();
  json_object_set_new(o, "instance_id", dx__jstr(r->instance_id));
  json_object_set_new(o, "status", dx__jstr(dx_list_status_name(r->status)));
  json_object_set_new(o, "orchestration", r->orchestration_name ? dx__jstr(r->orchestration_name)
                                                                : json_null());
  json_object_set_new(o, "version", r->orchestration_version ? dx__jstr(r->orchestration_version)
                                                             : json_null());
  json_object_set_new(o, "execution_id", json_integer((json_int_t)r->current_execution_id));
  json_object_set_new(o, "created_at_ms", json_integer(r->created_at_ms));
  json_object_set_new(o, "updated_at_ms", json_integer(r->updated_at_ms));
  if (r->parent_instance) json_object_set_new(o, "parent_instance", dx__jstr(r->parent_instance));
  /* what `status` shows too, so a listing answers without a status call per row */
  if (r->status == DX_STATUS_COMPLETED) json_object_set_new(o, "output", dx__json_or_null(r->output));
  if (r->status == DX_STATUS_FAILED) json_object_set_new(o, "error", dx__failure_json(&r->failure));
  if (r->custom_status) json_object_set_new(o, "custom_status", dx__json_or_null(r->custom_status));
  return o;
}

static char *dump(json_t *o) {
  char *s = o ? dx__json_dump(o) : NULL;
  json_decref(o);
  return s;
}

char *dx_list_row_to_json(const dx_instance_info_t *row) { return dump(row_json(row)); }

static json_t *exec_json(const dx_execution_info_t *e) {
  json_t *o = json_object();
  json_object_set_new(o, "execution_id", json_integer((json_int_t)e->execution_id));
  json_object_set_new(o, "status", dx__jstr(e->status == DX_STATUS_CONTINUED_AS_NEW
                                               ? "ContinuedAsNew" : dx_list_status_name(e->status)));
  json_object_set_new(o, "started_at_ms", json_integer(e->started_at_ms));
  if (e->completed_at_ms) json_object_set_new(o, "completed_at_ms", json_integer(e->completed_at_ms));
  json_object_set_new(o, "event_count", json_integer((json_int_t)e->event_count));
  return o;
}

char *dx_execution_info_to_json(const dx_execution_info_t *e) { return dump(exec_json(e)); }

int dx_parse_time(const char *text, int64_t now_ms, int64_t *out_ms, dx_error_t *err) {
  struct tm tm;
  const char *end;
  char *e = NULL;
  long long v;
  size_t n = text ? strlen(text) : 0;
  if (!text || !*text || n > 40) goto bad;
  v = strtoll(text, &e, 10);
  if (*text >= '0' && *text <= '9' && e && *e == '\0') { /* ms since the epoch */
    *out_ms = (int64_t)v;
    return 0;
  }
  if (e && e != text && strcmp(e, "d") == 0 && v >= 0 && v < 100000) { /* days ago */
    *out_ms = now_ms - (int64_t)v * 86400000;
    return 0;
  }
  if (text[n - 1] >= 'a' && text[n - 1] <= 'z') { /* a duration with its unit: that long ago */
    int64_t d;
    if (dx_parse_duration(text, &d) != 0) goto bad;
    *out_ms = now_ms - d;
    return 0;
  }
  memset(&tm, 0, sizeof tm);
  end = strptime(text, "%Y-%m-%dT%H:%M:%S", &tm);
  if (end && (strcmp(end, "Z") == 0 || strcmp(end, "") == 0)) {
    *out_ms = (int64_t)timegm(&tm) * 1000;
    return 0;
  }
  memset(&tm, 0, sizeof tm);
  end = strptime(text, "%Y-%m-%d", &tm);
  if (end && *end == '\0') {
    *out_ms = (int64_t)timegm(&tm) * 1000;
    return 0;
  }
bad:
  return dx_error_set(err, DX_EINVAL, "'%.60s' is not a time: expected a duration ago (30s, 15m, "
                      "12h, 7d), an ISO-8601 UTC time (2026-11-20T08:00:00Z) or ms since the "
                      "epoch", text ? text : "");
}

/* {===== list, executions =====} */

int dx_client_list(dx_client_t *c, const dx_list_query_t *q, dx_instance_info_t **rows,
                   size_t *n, char **next, dx_error_t *err) {
  dx_list_query_t qq;
  dx_provider_t *p;
  int rc;
  if (!q || !rows || !n || !next) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *rows = NULL;
  *n = 0;
  *next = NULL;
  if ((rc = admin(c, &p, err))) return rc;
  qq = *q;
  if (qq.limit == 0) qq.limit = 50;
  return p->methods->list_page(p, dx__now_ms(), &qq, rows, n, next, err);
}

int dx_client_list_json(dx_client_t *c, const dx_list_query_t *q, char **json,
                        dx_error_t *err) {
  dx_instance_info_t *rows = NULL;
  char *next = NULL;
  size_t n = 0, i;
  json_t *o, *a;
  int rc;
  if (!json) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *json = NULL;
  if ((rc = dx_client_list(c, q, &rows, &n, &next, err))) return rc;
  o = json_object();
  a = json_array();
  for (i = 0; i < n; i++) json_array_append_new(a, row_json(&rows[i]));
  json_object_set_new(o, "instances", a);
  json_object_set_new(o, "next", next ? dx__jstr(next) : json_null());
  dx_instance_infos_free(rows, n);
  free(next);
  if (!(*json = dump(o))) return dx_error_set(err, DX_ENOMEM, "out of memory");
  return 0;
}

/* What the store knows of `id`: its record, or (status NONE) a queued start's row. */
static int lookup(dx_provider_t *p, const char *id, dx_instance_info_t *out, dx_error_t *err) {
  int rc;
  memset(out, 0, sizeof *out);
  if ((rc = dx__check_instance(id, err))) return rc;
  rc = p->methods->get_instance_info(p, id, out, err);
  if (rc == DX_ENOTFOUND) return dx_error_set(err, DX_ENOTFOUND, "unknown instance '%s'", id);
  return rc;
}

int dx_client_executions(dx_client_t *c, const char *id, dx_execution_info_t **out,
                         size_t *n, dx_error_t *err) {
  dx_instance_info_t info;
  dx_provider_t *p;
  int rc;
  if (!out || !n) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *out = NULL;
  *n = 0;
  if ((rc = admin(c, &p, err)) || (rc = lookup(p, id, &info, err))) return rc;
  rc = info.status == DX_STATUS_NONE && !info.current_execution_id
           ? dx_error_set(err, DX_ENOTFOUND, "instance '%s' has no executions yet: it is queued "
                          "and no worker has run it", id)
           : p->methods->list_executions(p, id, out, n, err);
  dx_instance_info_clear(&info);
  return rc;
}

/* {===== the tree of sub-orchestrations =====} */

typedef struct {
  char **v;
  size_t n, cap;
} ids_t;

static void ids_free(ids_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int ids_has(const ids_t *l, const char *id) {
  size_t i;
  for (i = 0; i < l->n; i++)
    if (strcmp(l->v[i], id) == 0) return 1;
  return 0;
}

static int ids_add(ids_t *l, const char *id) {
  if (ids_has(l, id)) return 0;
  if (l->n == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 8;
    char **nv = realloc(l->v, cap * sizeof *nv);
    if (!nv) return DX_ENOMEM;
    l->v = nv;
    l->cap = cap;
  }
  if (!(l->v[l->n] = dx__strdup(id))) return DX_ENOMEM;
  l->n++;
  return 0;
}

/* Children of `id`: the instances its executions scheduled as sub-orchestrations. */
static int children_of(dx_provider_t *p, const char *id, ids_t *out, dx_error_t *err) {
  dx_execution_info_t *ex = NULL;
  size_t nx = 0, i, j;
  int rc = p->methods->list_executions(p, id, &ex, &nx, err);
  if (rc == DX_ENOTFOUND) return 0; /* queued, never ran: no children */
  for (i = 0; i < nx && !rc; i++) {
    dx_event_t *ev = NULL;
    size_t n = 0;
    rc = p->methods->read_history(p, id, ex[i].execution_id, &ev, &n, NULL, err);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    for (j = 0; j < n && !rc; j++)
      if (ev[j].kind == DX_EV_SUB_SCHEDULED && ev[j].instance && ids_add(out, ev[j].instance))
        rc = dx_error_set(err, DX_ENOMEM, "out of memory");
    dx_events_free(ev, n);
  }
  free(ex);
  return rc;
}

/* Append `id` and every descendant (parents before children) to `tree`, which may already
** hold other trees: only what this call adds is walked. */
static int tree_of(dx_provider_t *p, const char *id, ids_t *tree, dx_error_t *err) {
  size_t i = tree->n;
  int rc;
  if (ids_has(tree, id)) return 0;
  rc = ids_add(tree, id) ? dx_error_set(err, DX_ENOMEM, "out of memory") : 0;
  for (; i < tree->n && !rc; i++) rc = children_of(p, tree->v[i], tree, err);
  return rc;
}

/* The parent of a queued start (its record does not exist yet) from the START message. */
typedef struct {
  char *parent;
  int64_t retry_at;
  uint32_t attempt;
  int found;
} start_probe_t;

static int probe_start(void *ud, const dx_queued_t *q) {
  start_probe_t *s = ud;
  if (q->queue != DX_QUEUE_ORCHESTRATOR || q->item->kind != DX_WI_START || s->found) return 0;
  s->found = 1;
  s->parent = q->item->parent_instance ? dx__strdup(q->item->parent_instance) : NULL;
  s->retry_at = q->visible_at_ms;
  s->attempt = q->attempt;
  return 0;
}

static int parent_of(dx_provider_t *p, const dx_instance_info_t *info, char **parent,
                     dx_error_t *err) {
  start_probe_t s;
  int rc;
  *parent = NULL;
  if (info->parent_instance) {
    *parent = dx__strdup(info->parent_instance);
    return *parent ? 0 : dx_error_set(err, DX_ENOMEM, "out of memory");
  }
  if (info->status != DX_STATUS_NONE) return 0;
  memset(&s, 0, sizeof s);
  rc = p->methods->instance_queue(p, info->instance_id, probe_start, &s, err);
  *parent = s.parent;
  return rc;
}

/* {===== delete, purge, prune =====} */

/* DX_ESTATE naming the root when `info` is a sub-orchestration. */
static int refuse_child(dx_provider_t *p, const dx_instance_info_t *info, dx_error_t *err) {
  char *parent = NULL, *root = NULL;
  int rc = parent_of(p, info, &parent, err), hops = 0;
  if (rc || !parent) return rc;
  root = dx__strdup(parent);
  while (root && hops++ < 64) { /* the root: walk up while the store knows the parents */
    dx_instance_info_t up;
    char *next = NULL;
    dx_error_t ignored;
    if (p->methods->get_instance_info(p, root, &up, &ignored) != 0) break;
    rc = parent_of(p, &up, &next, &ignored);
    dx_instance_info_clear(&up);
    if (rc || !next) { rc = 0; break; }
    free(root);
    root = next;
  }
  rc = dx_error_set(err, DX_ESTATE, "instance '%s' is a sub-orchestration of '%s'; delete its "
                    "root '%s' instead (that deletes the whole tree)", info->instance_id, parent,
                    root ? root : parent);
  free(parent);
  free(root);
  return rc;
}

int dx_client_delete(dx_client_t *c, const char *id, int force, uint64_t *deleted,
                     dx_error_t *err) {
  dx_instance_info_t info;
  dx_provider_t *p;
  ids_t tree = {NULL, 0, 0};
  int rc;
  if (deleted) *deleted = 0;
  if ((rc = admin(c, &p, err)) || (rc = lookup(p, id, &info, err))) return rc;
  rc = refuse_child(p, &info, err);
  dx_instance_info_clear(&info);
  if (!rc) rc = tree_of(p, id, &tree, err);
  if (!rc) rc = p->methods->delete_instances(p, (const char *const *)tree.v, tree.n, force,
                                             deleted, err);
  ids_free(&tree);
  return rc;
}

int dx_client_purge(dx_client_t *c, const dx_purge_opts_t *o, dx_purge_result_t *out,
                    dx_error_t *err) {
  dx_list_query_t q;
  dx_provider_t *p;
  char *cursor = NULL;
  int rc;
  if (!o || !out) return dx_error_set(err, DX_EINVAL, "NULL argument");
  memset(out, 0, sizeof *out);
  if ((rc = admin(c, &p, err))) return rc;
  if (o->completed_before_ms <= 0)
    return dx_error_set(err, DX_EINVAL, "purge needs a completed-before time");
  if (o->status != 0 && o->status != DX_LIST_TERMINAL && o->status != DX_STATUS_COMPLETED &&
      o->status != DX_STATUS_FAILED)
    return dx_error_set(err, DX_EINVAL, "purge deletes only Completed or Failed instances");
  if (o->batch > DX_LIST_MAX_LIMIT)
    return dx_error_set(err, DX_EINVAL, "purge batch %zu is over %d", o->batch, DX_LIST_MAX_LIMIT);
  memset(&q, 0, sizeof q);
  q.status = o->status ? o->status : DX_LIST_TERMINAL;
  q.name = o->name;
  q.updated_before_ms = o->completed_before_ms;
  q.roots_only = 1;
  q.limit = o->batch ? o->batch : 100;
  do {
    dx_instance_info_t *rows = NULL;
    size_t n = 0, i;
    ids_t all = {NULL, 0, 0};
    char *next = NULL;
    q.after = cursor;
    rc = p->methods->list_page(p, dx__now_ms(), &q, &rows, &n, &next, err);
    free(cursor);
    cursor = next;
    for (i = 0; i < n && !rc; i++) rc = tree_of(p, rows[i].instance_id, &all, err);
    out->matched += rc ? 0 : n;
    if (!rc && o->dry_run) out->deleted += all.n;
    if (!rc && !o->dry_run && all.n) {
      uint64_t d = 0;
      dx_error_t e2;
      /* one short transaction per batch; a tree that turned out running is skipped */
      rc = p->methods->delete_instances(p, (const char *const *)all.v, all.n, 0, &d, &e2);
      if (rc == DX_ESTATE) {
        rc = 0;
        for (i = 0; i < n && !rc; i++) {
          ids_t one = {NULL, 0, 0};
          rc = tree_of(p, rows[i].instance_id, &one, err);
          if (!rc) {
            uint64_t d1 = 0;
            int r1 = p->methods->delete_instances(p, (const char *const *)one.v, one.n, 0, &d1, &e2);
            if (r1 && r1 != DX_ESTATE) rc = dx_error_set(err, r1, "%s", e2.msg);
            d += d1;
            out->batches++;
          }
          ids_free(&one);
        }
      } else if (rc) {
        rc = dx_error_set(err, rc, "%s", e2.msg);
      } else {
        out->batches++;
      }
      out->deleted += d;
    }
    ids_free(&all);
    dx_instance_infos_free(rows, n);
  } while (!rc && cursor);
  free(cursor);
  return rc;
}

int dx_client_prune(dx_client_t *c, const char *id, uint64_t keep, uint64_t *pruned,
                    dx_error_t *err) {
  dx_instance_info_t info;
  dx_provider_t *p;
  int rc;
  if (pruned) *pruned = 0;
  if ((rc = admin(c, &p, err))) return rc;
  if (keep < 1) return dx_error_set(err, DX_EINVAL, "prune --keep must be at least 1 (the "
                                    "current execution always stays)");
  if ((rc = lookup(p, id, &info, err))) return rc;
  dx_instance_info_clear(&info);
  rc = p->methods->prune_executions(p, id, keep, pruned, err);
  if (rc == DX_ENOTFOUND)
    return dx_error_set(err, DX_ENOTFOUND, "instance '%s' has no executions yet: it is queued "
                        "and no worker has run it", id);
  return rc;
}

/* {===== terminate =====} */

int dx_client_terminate(dx_client_t *c, const char *id, const char *reason,
                        uint64_t *terminated, dx_error_t *err) {
  dx_instance_info_t info;
  dx_provider_t *p;
  dx_failure_t why;
  ids_t tree = {NULL, 0, 0};
  char msg[DX_MAX_REASON_BYTES + 32];
  int64_t now = dx__now_ms();
  size_t i;
  int rc;
  if (terminated) *terminated = 0;
  if ((rc = admin(c, &p, err))) return rc;
  if (reason && strlen(reason) > DX_MAX_REASON_BYTES)
    return dx_error_set(err, DX_EINVAL, "terminate reason is %zu bytes; the limit is %d bytes",
                        strlen(reason), DX_MAX_REASON_BYTES);
  if ((rc = lookup(p, id, &info, err))) return rc;
  if (info.status == DX_STATUS_NONE)
    rc = dx_error_set(err, DX_ESTATE, "instance '%s' has not started: its start is queued and "
                      "no worker has run it (delete it instead)", id);
  else if (info.status != DX_STATUS_RUNNING && info.status != DX_STATUS_CONTINUED_AS_NEW)
    rc = dx_error_set(err, DX_ESTATE, "instance '%s' is not running (%s)", id,
                      dx_status_name(info.status));
  dx_instance_info_clear(&info);
  if (rc || (rc = tree_of(p, id, &tree, err))) {
    ids_free(&tree);
    return rc;
  }
  snprintf(msg, sizeof msg, "terminated: %s", reason && *reason ? reason : "by operator");
  memset(&why, 0, sizeof why);
  why.category = DX_CAT_APPLICATION;
  why.kind = "Terminated";
  why.message = msg;
  /* the root first (its parent hears of it), then its running descendants: their own
  ** notifications would reach a parent that has already ended */
  rc = p->methods->terminate_instance(p, now, id, &why, 1, err);
  if (!rc && terminated) (*terminated)++;
  for (i = 1; i < tree.n && !rc; i++) {
    dx_error_t e2;
    uint64_t gone = 0;
    int r = p->methods->terminate_instance(p, now, tree.v[i], &why, 0, &e2);
    if (r == DX_ENOTFOUND) /* a child's start not run yet: it never will */
      r = p->methods->delete_instances(p, (const char *const *)&tree.v[i], 1, 1, &gone, &e2);
    if (r == 0 && terminated) *terminated += gone ? 0 : 1;
    else if (r && r != DX_ESTATE) rc = dx_error_set(err, r, "%s", e2.msg);
  }
  ids_free(&tree);
  if (!rc) dx__runtime_poke_all();
  return rc;
}

/* {===== describe =====} */

/* Message types as describe shows them, indexed by dx_work_kind_t. */
static const char *const work_names[DX_WI__COUNT] = {"",
  "StartOrchestration", "ActivityExecute", "ActivityCompleted", "ActivityFailed", "TimerFired",
  "ExternalRaised", "SubOrchCompleted", "SubOrchFailed", "CancelInstance", "ContinueAsNew",
  "SessionClose"};

typedef struct {
  json_t *acts, *timers, *msgs;
  int64_t now;
  dx_work_item_t start;     /* copy of the first queued START */
  int have_start;
  uint32_t start_attempt;
  int64_t start_retry_at;
} queue_view_t;

static void set_lock(json_t *o, const dx_queued_t *q) {
  if (q->locked_until_ms) json_object_set_new(o, "locked_until_ms", json_integer(q->locked_until_ms));
  if (q->locked_by) json_object_set_new(o, "locked_by", dx__jstr(q->locked_by));
}

static int view_row(void *ud, const dx_queued_t *q) {
  queue_view_t *v = ud;
  const dx_work_item_t *w = q->item;
  json_t *o = json_object();
  if (q->queue == DX_QUEUE_WORKER && w->kind == DX_WI_ACT_EXECUTE) {
    json_object_set_new(o, "activity_id", json_integer((json_int_t)w->id));
    json_object_set_new(o, "execution_id", json_integer((json_int_t)w->execution_id));
    json_object_set_new(o, "name", dx__jstr(w->name));
    if (w->session_id) json_object_set_new(o, "session_id", dx__jstr(w->session_id));
    json_object_set_new(o, "attempt", json_integer(q->attempt));
    json_object_set_new(o, "visible_at_ms", json_integer(q->visible_at_ms));
    set_lock(o, q);
    json_array_append_new(v->acts, o);
    return 0;
  }
  if (q->queue == DX_QUEUE_ORCHESTRATOR && w->kind == DX_WI_TIMER_FIRED) {
    json_object_set_new(o, "timer_id", json_integer((json_int_t)w->id));
    json_object_set_new(o, "execution_id", json_integer((json_int_t)w->execution_id));
    json_object_set_new(o, "fire_at_ms", json_integer(w->fire_at_ms ? w->fire_at_ms
                                                                    : q->visible_at_ms));
    json_array_append_new(v->timers, o);
    return 0;
  }
  if (q->queue == DX_QUEUE_ORCHESTRATOR && w->kind == DX_WI_START && !v->have_start) {
    v->have_start = dx_work_item_copy(&v->start, w) == 0;
    v->start_attempt = q->attempt;
    v->start_retry_at = q->visible_at_ms;
  }
  json_object_set_new(o, "type", dx__jstr(w->kind > 0 && w->kind < DX_WI__COUNT
                                              ? work_names[w->kind] : "Unknown"));
  if (w->name) json_object_set_new(o, "name", dx__jstr(w->name));
  if (q->queue == DX_QUEUE_WORKER) json_object_set_new(o, "queue", dx__jstr("worker"));
  json_object_set_new(o, "visible_at_ms", json_integer(q->visible_at_ms));
  json_object_set_new(o, "attempt", json_integer(q->attempt));
  set_lock(o, q);
  json_array_append_new(v->msgs, o);
  return 0;
}

/* External events the current execution waits for: subscriptions not cancelled, by name,
** minus the events of that name already received (they match in order). */
static json_t *subscriptions(const dx_event_t *ev, size_t n) {
  json_t *counts = json_object(), *out = json_array(), *val;
  const char *key;
  size_t i, j;
  for (i = 0; i < n; i++) {
    int delta = 0;
    if (!ev[i].name) continue;
    if (ev[i].kind == DX_EV_EXT_SUBSCRIBED) {
      delta = 1;
      for (j = i + 1; j < n; j++)
        if (ev[j].kind == DX_EV_EXT_SUB_CANCELLED && ev[j].source_id == ev[i].event_id) delta = 0;
    } else if (ev[i].kind == DX_EV_EXT_EVENT) {
      delta = -1;
    }
    if (delta) {
      json_t *cur = json_object_get(counts, ev[i].name);
      json_object_set_new(counts, ev[i].name,
                          json_integer((cur ? json_integer_value(cur) : 0) + delta));
    }
  }
  json_object_foreach(counts, key, val) {
    if (json_integer_value(val) > 0)
      json_array_append_new(out, json_pack("{s:s, s:I}", "name", key, "waiting",
                                           (json_int_t)json_integer_value(val)));
  }
  json_decref(counts);
  return out;
}

int dx_client_describe(dx_client_t *c, const char *id, char **json, dx_error_t *err) {
  dx_instance_info_t info;
  dx_provider_t *p;
  queue_view_t v;
  ids_t kids = {NULL, 0, 0};
  json_t *o, *a;
  size_t i;
  int rc;
  if (!json) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *json = NULL;
  if ((rc = admin(c, &p, err)) || (rc = lookup(p, id, &info, err))) return rc;
  memset(&v, 0, sizeof v);
  v.now = dx__now_ms();
  v.acts = json_array();
  v.timers = json_array();
  v.msgs = json_array();
  rc = p->methods->instance_queue(p, id, view_row, &v, err);
  if (!rc && info.status == DX_STATUS_NONE && v.have_start) {
    /* a queued start: name, version, parent and created time come from its message */
    dx_instance_info_t row;
    if (dx__list_queued_row(id, &v.start, v.start_retry_at, &row) == 0) {
      dx_instance_info_clear(&info);
      info = row;
    }
  }
  o = row_json(&info);
  json_object_set_new(o, "custom_status_version", json_integer((json_int_t)info.custom_status_version));
  if (!rc && info.current_execution_id) {
    dx_execution_info_t *ex = NULL;
    dx_event_t *ev = NULL;
    size_t nx = 0, ne = 0;
    rc = p->methods->list_executions(p, id, &ex, &nx, err);
    a = json_array();
    for (i = 0; !rc && i < nx; i++) json_array_append_new(a, exec_json(&ex[i]));
    json_object_set_new(o, "executions", a);
    free(ex);
    if (!rc) rc = p->methods->read_history(p, id, 0, &ev, &ne, NULL, err);
    if (!rc) json_object_set_new(o, "subscribed_events",
                                 info.status == DX_STATUS_RUNNING ? subscriptions(ev, ne)
                                                                  : json_array());
    dx_events_free(ev, ne);
    if (rc == DX_ENOTFOUND) rc = 0;
  } else if (!rc) {
    json_object_set_new(o, "executions", json_array());
    json_object_set_new(o, "subscribed_events", json_array());
  }
  if (!rc && info.status == DX_STATUS_NONE && v.have_start && v.start_attempt > 0 &&
      v.start_retry_at > v.now) {
    char reason[600];
    snprintf(reason, sizeof reason, "orchestration '%s'%s%s was not registered on the worker "
             "that fetched the start (attempt %u); it is retried with backoff",
             info.orchestration_name ? info.orchestration_name : "?",
             info.orchestration_version ? " version " : "",
             info.orchestration_version ? info.orchestration_version : "", v.start_attempt);
    json_object_set_new(o, "start_backoff",
                        json_pack("{s:I, s:I, s:s}", "attempt", (json_int_t)v.start_attempt,
                                  "retry_at_ms", (json_int_t)v.start_retry_at, "reason", reason));
  }
  if (!rc) rc = children_of(p, id, &kids, err);
  a = json_array();
  for (i = 0; i < kids.n; i++) json_array_append_new(a, dx__jstr(kids.v[i]));
  json_object_set_new(o, "children", a);
  json_object_set_new(o, "pending_activities", v.acts);
  json_object_set_new(o, "pending_timers", v.timers);
  json_object_set_new(o, "queued_messages", v.msgs);
  ids_free(&kids);
  dx_instance_info_clear(&info);
  dx_work_item_clear(&v.start);
  if (rc) {
    json_decref(o);
    return rc;
  }
  if (!(*json = dump(o))) return dx_error_set(err, DX_ENOMEM, "out of memory");
  return 0;
}
