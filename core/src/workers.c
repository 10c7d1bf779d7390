/*
** workers.c -- the fleet as the store shows it, for `duroxide-lua workers`, client:workers()
** and the console: live worker registrations (provider list_workers) joined with the sessions
** each owns (list_sessions), and the stored history of one session (list_session_events).
*/
#include <string.h>

#include <jansson.h>

#include "duroxide.h"
#include "jsonout.h"

typedef struct {
  int64_t now;
  json_t *list, *by_id; /* by_id: worker id -> its object in list (borrowed) */
  int oom;
} fleet_t;

static int add_worker(void *ud, const dx_worker_info_t *w) {
  fleet_t *f = ud;
  json_t *o = json_pack("{s:o, s:o, s:I, s:I, s:I, s:I, s:[], s:I, s:I}",
    "worker_id", dx__json_text(w->worker_id), "host", w->host ? dx__json_text(w->host) : json_null(),
    "pid", (json_int_t)w->pid, "started_at_ms", (json_int_t)w->started_at_ms,
    "running_turns", (json_int_t)w->running_turns,
    "running_activities", (json_int_t)w->running_activities, "sessions",
    "session_queued", (json_int_t)0, "lease_until_ms", (json_int_t)0);
  if (!o || json_array_append_new(f->list, o) || json_object_set(f->by_id, w->worker_id, o))
    f->oom = 1;
  return f->oom;
}

static void add_to(json_t *o, const char *key, json_int_t n) {
  json_object_set_new(o, key, json_integer(json_integer_value(json_object_get(o, key)) + n));
}

/* A session owned with a live lease counts for its owner, when the owner is listed. */
static int add_session(void *ud, const dx_session_info_t *s) {
  fleet_t *f = ud;
  json_t *w;
  if (!s->worker_id || !*s->worker_id || s->locked_until_ms <= f->now ||
      !(w = json_object_get(f->by_id, s->worker_id)))
    return 0;
  if (json_array_append_new(json_object_get(w, "sessions"), dx__json_text(s->session_id)))
    f->oom = 1;
  add_to(w, "running_activities", (json_int_t)s->running);
  add_to(w, "session_queued", (json_int_t)s->queued);
  if (s->locked_until_ms > json_integer_value(json_object_get(w, "lease_until_ms")))
    json_object_set_new(w, "lease_until_ms", json_integer((json_int_t)s->locked_until_ms));
  return f->oom;
}

static int dump_to(json_t *o, char **out, dx_error_t *err) {
  if (!o || !(*out = dx__json_dump(o))) {
    json_decref(o);
    return dx_error_set(err, DX_ENOMEM, "out of memory");
  }
  json_decref(o);
  return DX_OK;
}

int dx_client_workers_json(dx_client_t *c, char **json, dx_error_t *err) {
  const dx_provider_methods_t *m;
  dx_provider_t *p;
  fleet_t f;
  int rc;
  if (!c || !json) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *json = NULL;
  p = dx_client_provider(c);
  m = p->methods;
  if (m->version < 10 || !m->list_workers)
    return dx_error_set(err, DX_ESTATE, "provider '%s' keeps no registry of workers", m->name);
  memset(&f, 0, sizeof f);
  f.now = dx_clock_now_ms();
  f.list = json_array();
  f.by_id = json_object();
  f.oom = !f.list || !f.by_id;
  rc = f.oom ? 0 : m->list_workers(p, f.now, add_worker, &f, err);
  if (!rc && !f.oom && json_array_size(f.list) && m->list_sessions)
    rc = m->list_sessions(p, add_session, &f, err);
  json_decref(f.by_id);
  if (rc || f.oom) {
    json_decref(f.list);
    return rc ? rc : dx_error_set(err, DX_ENOMEM, "out of memory");
  }
  return dump_to(json_pack("{s:I, s:o}", "time_ms", (json_int_t)f.now, "workers", f.list), json,
                 err);
}

static int add_event(void *ud, const dx_session_event_t *e) {
  json_t *o = json_pack("{s:I, s:s, s:o, s:o, s:o}", "at_ms", (json_int_t)e->at_ms, "event",
    e->event, "worker_id", dx__json_text(e->worker_id),
    "detail", e->detail ? dx__json_text(e->detail) : json_null(),
    "previous_owner", e->previous_owner ? dx__json_text(e->previous_owner) : json_null());
  return !o || json_array_append_new(ud, o);
}

int dx_client_session_history_json(dx_client_t *c, const char *session_id, char **json,
                                   dx_error_t *err) {
  const dx_provider_methods_t *m;
  dx_provider_t *p;
  json_t *events;
  int rc = 0;
  if (!c || !json) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *json = NULL;
  if (!session_id || !*session_id) return dx_error_set(err, DX_EINVAL, "session id is empty");
  p = dx_client_provider(c);
  m = p->methods;
  if (!(events = json_array())) return dx_error_set(err, DX_ENOMEM, "out of memory");
  if (m->version >= 8 && m->list_session_events &&
      (rc = m->list_session_events(p, session_id, add_event, events, err)) != 0) {
    json_decref(events);
    return rc;
  }
  return dump_to(json_pack("{s:o, s:o}", "session_id", dx__json_text(session_id), "events",
                           events), json, err);
}
