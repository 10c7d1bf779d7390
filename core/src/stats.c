/*
** stats.c -- store-wide figures for `duroxide-lua stats` and client:stats() / client:metrics():
** queue depths, the instance count and the session table summarised (owned with a live lease,
** lapsed, released or never claimed, and how many each worker owns). A worker's own counters
** are its metrics registry (metrics.c), served by the worker itself.
*/
#include <string.h>

#include <jansson.h>

#include "duroxide.h"
#include "jsonout.h"

typedef struct {
  int64_t now;
  json_int_t total, live, lapsed, unowned, queued;
  json_t *by_worker; /* worker id -> sessions it owns with a live lease */
  int oom;
} sess_sum_t;

static int add_session(void *ud, const dx_session_info_t *si) {
  sess_sum_t *t = ud;
  int owned = si->worker_id && *si->worker_id;
  t->total++;
  t->queued += (json_int_t)si->queued;
  if (!owned) {
    t->unowned++;
  } else if (si->locked_until_ms > t->now) {
    json_t *n = json_object_get(t->by_worker, si->worker_id);
    t->live++;
    if (json_object_set_new(t->by_worker, si->worker_id,
                            json_integer(n ? json_integer_value(n) + 1 : 1)) != 0)
      t->oom = 1; /* a worker id that is not UTF-8 is refused at start: this is memory */
  } else {
    t->lapsed++;
  }
  return t->oom;
}

int dx_client_stats_json(dx_client_t *c, char **out, dx_error_t *err) {
  dx_provider_t *p;
  dx_queue_depths_t d;
  sess_sum_t t;
  json_t *o;
  int rc;
  if (!c || !out) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *out = NULL;
  p = dx_client_provider(c);
  if ((rc = p->methods->get_queue_depths(p, &d, err)) != 0) return rc;
  memset(&t, 0, sizeof t);
  t.now = dx_clock_now_ms();
  if (!(t.by_worker = json_object())) return dx_error_set(err, DX_ENOMEM, "out of memory");
  if (p->methods->version >= 2 && p->methods->list_sessions &&
      (rc = p->methods->list_sessions(p, add_session, &t, err)) != 0) {
    json_decref(t.by_worker);
    return rc;
  }
  o = json_pack("{s:I, s:I, s:I, s:I, s:{s:I, s:I, s:I, s:I, s:I, s:o}}",
                "time_ms", (json_int_t)t.now,
                "orchestrator_queue", (json_int_t)d.orchestrator,
                "worker_queue", (json_int_t)d.worker,
                "instances", (json_int_t)d.instances,
                "sessions", "total", t.total, "live", t.live, "lapsed", t.lapsed,
                "unowned", t.unowned, "queued", t.queued, "by_worker", t.by_worker);
  if (!o || t.oom || !(*out = dx__json_dump(o))) {
    json_decref(o);
    return dx_error_set(err, DX_ENOMEM, "out of memory");
  }
  json_decref(o);
  return DX_OK;
}
