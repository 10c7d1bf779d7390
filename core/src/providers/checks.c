/*
** checks.c -- argument rules shared by the providers (see checks.h).
*/
#include <string.h>

#include "providers/checks.h"
#include "util.h"

int dx__check_instance(const char *inst, dx_error_t *err) {
  size_t n;
  if (!inst || !*inst) return dx_error_set(err, DX_EINVAL, "instance id is missing or empty");
  n = strlen(inst);
  if (n > DX_MAX_INSTANCE_ID_BYTES)
    return dx_error_set(err, DX_EINVAL, "instance id is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_INSTANCE_ID_BYTES);
  return 0;
}

int dx__check_item(const dx_work_item_t *w, dx_error_t *err) {
  size_t n;
  if (!w) return dx_error_set(err, DX_EINVAL, "work item is NULL");
  if (w->kind <= 0 || w->kind >= DX_WI__COUNT)
    return dx_error_set(err, DX_EINVAL, "unknown work item kind %d", w->kind);
  if (w->session_id && (n = strlen(w->session_id)) > DX_MAX_SESSION_ID_BYTES)
    return dx_error_set(err, DX_EINVAL, "session id is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_SESSION_ID_BYTES);
  if (w->tag && ((n = strlen(w->tag)) == 0 || n > DX_MAX_TAG_BYTES))
    return dx_error_set(err, DX_EINVAL, "activity tag is %zu bytes; it must be 1 to %d bytes", n,
                        DX_MAX_TAG_BYTES);
  if (dx__check_utf8("session id", w->session_id, err) ||
      dx__check_utf8("instance id", w->instance, err))
    return DX_EINVAL;
  return dx__check_instance(w->instance, err);
}

int dx__check_payload(const dx_work_item_t *w, dx_error_t *err) {
  size_t n = w->data ? strlen(w->data) : 0;
  if (n > DX_MAX_PAYLOAD_BYTES)
    return dx_error_set(err, DX_ETOOBIG, "work item data is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_PAYLOAD_BYTES);
  return 0;
}

int dx__check_events(const dx_event_t *ev, size_t n, dx_error_t *err) {
  size_t i;
  if (n && !ev) return dx_error_set(err, DX_EINVAL, "events are NULL");
  for (i = 0; i < n; i++)
    if (ev[i].event_id == 0)
      return dx_error_set(err, DX_EINVAL, "event %zu has event_id 0 (ids start at 1)", i);
  return 0;
}

int dx__check_kv_key(const char *key, dx_error_t *err) {
  size_t n;
  if (!key || !*key) return dx_error_set(err, DX_EINVAL, "key-value key is missing or empty");
  if ((n = strlen(key)) > DX_MAX_KV_KEY_BYTES)
    return dx_error_set(err, DX_EINVAL, "key-value key is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_KV_KEY_BYTES);
  /* a text key on every store: PostgreSQL refuses invalid UTF-8 (the ack would never commit) */
  if (!dx__utf8_valid(key)) return dx_error_set(err, DX_EINVAL, "key-value key is not valid UTF-8");
  return 0;
}

/* Key-value events carry a key the store can index and a value. */
static int check_kv_events(const dx_event_t *ev, size_t n, dx_error_t *err) {
  size_t i;
  int rc;
  for (i = 0; i < n; i++) {
    if (ev[i].kind != DX_EV_KV_SET && ev[i].kind != DX_EV_KV_CLEARED) continue;
    if ((rc = dx__check_kv_key(ev[i].name, err))) return rc;
    if (ev[i].kind == DX_EV_KV_SET && !ev[i].data)
      return dx_error_set(err, DX_EINVAL, "key-value set of '%s' has no value", ev[i].name);
  }
  return 0;
}

int dx__kv_folds(int status) {
  return status == DX_STATUS_COMPLETED || status == DX_STATUS_FAILED ||
         status == DX_STATUS_CONTINUED_AS_NEW;
}

int dx__check_worker_id(const char *id, dx_error_t *err) {
  size_t n;
  if (!id || !*id) return dx_error_set(err, DX_EINVAL, "session worker id is missing or empty");
  if ((n = strlen(id)) > DX_MAX_SESSION_ID_BYTES)
    return dx_error_set(err, DX_EINVAL, "worker id is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_SESSION_ID_BYTES);
  return dx__check_utf8("worker id", id, err);
}

static int check_items(const dx_work_item_t *w, size_t n, dx_error_t *err) {
  size_t i;
  int rc;
  for (i = 0; i < n; i++)
    if ((rc = dx__check_item(&w[i], err))) return rc;
  return 0;
}

int dx__check_ack(const dx_orch_ack_t *a, dx_error_t *err) {
  size_t i;
  int rc;
  if (!a) return dx_error_set(err, DX_EINVAL, "ack is NULL");
  if ((rc = dx__check_instance(a->instance, err))) return rc;
  if (a->execution_id == 0) return dx_error_set(err, DX_EINVAL, "execution_id 0 (ids start at 1)");
  if ((rc = dx__check_events(a->delta, a->delta_len, err)) ||
      (rc = check_kv_events(a->delta, a->delta_len, err)) ||
      (rc = check_items(a->worker_items, a->worker_items_len, err)) ||
      (rc = check_items(a->orch_items, a->orch_items_len, err)))
    return rc;
  for (i = 0; i < a->cancelled_len; i++)
    if ((rc = dx__check_instance(a->cancelled[i].instance, err))) return rc;
  return 0;
}

int dx__check_session_event(const dx_session_event_t *ev, dx_error_t *err) {
  size_t n;
  if (!ev) return dx_error_set(err, DX_EINVAL, "session event is NULL");
  if (!ev->session_id || !*ev->session_id)
    return dx_error_set(err, DX_EINVAL, "session event without a session id");
  if ((n = strlen(ev->session_id)) > DX_MAX_SESSION_ID_BYTES)
    return dx_error_set(err, DX_EINVAL, "session id is %zu bytes; the limit is %d bytes", n,
                        DX_MAX_SESSION_ID_BYTES);
  if (!ev->event || !*ev->event)
    return dx_error_set(err, DX_EINVAL, "session event for '%s' has no event word",
                        ev->session_id);
  return dx__check_worker_id(ev->worker_id, err);
}

int dx__session_declined(const dx_session_cfg_t *cfg, const char *sid) {
  size_t i;
  for (i = 0; cfg && sid && i < cfg->n_declined; i++)
    if (strcmp(cfg->declined[i], sid) == 0) return 1;
  return 0;
}

int64_t dx__visible_at(const dx_work_item_t *w, int64_t now, int64_t delay_ms) {
  int64_t d = delay_ms > 0 ? delay_ms : 0;
  int64_t at = now > INT64_MAX - d ? INT64_MAX : now + d;
  if (w->kind == DX_WI_TIMER_FIRED && w->fire_at_ms > at) at = w->fire_at_ms;
  return at;
}

int dx__sub_failed_for_parent(const dx_event_t *started, const dx_failure_t *why,
                              dx_work_item_t *out) {
  if (started->kind != DX_EV_ORCH_STARTED || !started->instance || !started->parent_id) return 0;
  memset(out, 0, sizeof *out);
  out->kind = DX_WI_SUB_FAILED;
  out->instance = started->instance;
  out->execution_id = started->parent_execution_id ? started->parent_execution_id : 1;
  out->id = started->parent_id;
  out->fail = *why;
  return 1;
}

int dx__check_instances(const char *const *ids, size_t n, dx_error_t *err) {
  size_t i;
  int rc;
  if (!ids && n) return dx_error_set(err, DX_EINVAL, "ids is NULL");
  for (i = 0; i < n; i++)
    if ((rc = dx__check_instance(ids[i], err))) return rc;
  return 0;
}
