/*
** client.c -- the synchronous client: start, raise, cancel, status, wait (over any provider).
*/
#include <inttypes.h>
#include <jansson.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

#include "duroxide.h"
#include "codec.h"
#include "embedding.h"
#include "jsonout.h"
#include "util.h"

void dx__runtime_poke_all(void);

/* How a waiting client hears of commits (dx__client_await): not yet looked for, none (it
** sleeps), an inotify watch of the store's notify file, or the provider's wake descriptor. */
enum { WATCH_UNSET = 0, WATCH_NONE, WATCH_FILE, WATCH_WAKE };

struct dx_client_s {
  dx_provider_t *p;
  int owns_provider;
  int watch, watch_fd;
};

int dx_client_new(dx_client_t **out, dx_provider_t *p, dx_error_t *err) {
  dx_client_t *c;
  if (!out || !p) return dx_error_set(err, DX_EINVAL, "NULL argument");
  c = calloc(1, sizeof *c);
  if (!c) return dx_error_set(err, DX_ENOMEM, "out of memory");
  c->p = p;
  *out = c;
  return DX_OK;
}

int dx_client_open(dx_client_t **out, const char *store, dx_error_t *err) {
  dx_provider_t *p = NULL;
  int rc;
  if (!out || !store) return dx_error_set(err, DX_EINVAL, "NULL argument");
  rc = dx_provider_open(store, NULL, &p, err);
  if (rc != 0) return rc;
  rc = dx_client_new(out, p, err);
  if (rc != 0) {
    p->methods->destroy(p);
    return rc;
  }
  (*out)->owns_provider = 1;
  return DX_OK;
}

void dx_client_close(dx_client_t *c) {
  if (!c) return;
  if (c->watch == WATCH_FILE) close(c->watch_fd);
  if (c->owns_provider) c->p->methods->destroy(c->p); /* closes a WATCH_WAKE descriptor */
  free(c);
}

dx_provider_t *dx_client_provider(dx_client_t *c) { return c ? c->p : NULL; }

static int check_len(const char *what, const char *id, size_t max, dx_error_t *err) {
  if (!id || !*id) return dx_error_set(err, DX_EINVAL, "%s must be a non-empty string", what);
  if (strlen(id) > max)
    return dx_error_set(err, DX_EINVAL, "%s is %zu bytes; the limit is %zu bytes", what,
                        strlen(id), max);
  return DX_OK;
}

static int check_id(const char *what, const char *id, dx_error_t *err) {
  return check_len(what, id, DX_MAX_INSTANCE_ID_BYTES, err);
}

/* Canonical JSON of user text; NULL means JSON null. */
static int canonical(const char *what, const char *text, char **out, dx_error_t *err) {
  int rc;
  if (!text) {
    *out = dx__strdup("null");
    return *out ? DX_OK : dx_error_set(err, DX_ENOMEM, "out of memory");
  }
  rc = dx__json_canonical(text, strlen(text), out, err);
  if (rc != 0 && err) {
    char tmp[sizeof err->msg];
    memcpy(tmp, err->msg, sizeof tmp);
    snprintf(err->msg, sizeof err->msg, "%s: %.480s", what, tmp);
  }
  return rc;
}

static int enqueue(dx_client_t *c, dx_work_item_t *w, dx_error_t *err) {
  int rc = c->p->methods->enqueue_for_orchestrator(c->p, dx__now_ms(), w, 0, err);
  if (rc == 0) dx__runtime_poke_all();
  return rc;
}

/* Validate one start and build its work item (w->data is malloc'd: free it). Whether the id
** is taken is the provider's call: its START enqueue fails with DX_EEXIST (provider.h), which
** stays true when two clients start the same id at once. */
int dx__client_start_item(const dx_start_t *st, dx_work_item_t *w, dx_error_t *err) {
  char *json = NULL;
  int rc;
  if ((rc = check_id("instance id", st->id, err)) != 0) return rc;
  if ((rc = check_len("orchestration name", st->name, DX_MAX_NAME_BYTES, err)) != 0) return rc;
  /* ids and names a start creates must be UTF-8 (util.h); lookups of other ids find nothing */
  if ((rc = dx__check_utf8("instance id", st->id, err)) != 0 ||
      (rc = dx__check_utf8("orchestration name", st->name, err)) != 0)
    return rc;
  if (st->version) {
    int v[3];
    if (!dx__semver_parse(st->version, v))
      return dx_error_set(err, DX_EINVAL, "version '%.200s' is not a version: expected "
                          "MAJOR.MINOR.PATCH such as 1.2.0", st->version);
  }
  if ((rc = canonical("input", st->input, &json, err)) != 0) return rc;
  memset(w, 0, sizeof *w);
  w->kind = DX_WI_START;
  w->instance = (char *)st->id;
  w->name = (char *)st->name;
  w->version = (char *)st->version;
  w->data = json;
  w->execution_id = 1;
  w->fire_at_ms = dx__now_ms(); /* when it was started: listings show queued starts by it */
  return DX_OK;
}

int dx_client_start(dx_client_t *c, const char *id, const char *name, const char *input,
                    const char *version, dx_error_t *err) {
  dx_start_t st = {id, name, input, version};
  return dx_client_start_many(c, &st, 1, err);
}

/* A batch the caller rolls back whole when a call in it fails (provider.h begin_atomic):
** its calls need not be contained one by one. */
static int begin_all_or_nothing(dx_provider_t *p, dx_error_t *err) {
  const dx_provider_methods_t *m = p->methods;
  return m->version >= 12 && m->begin_atomic ? m->begin_atomic(p, err) : m->begin(p, err);
}

int dx_client_start_many(dx_client_t *c, const dx_start_t *starts, size_t n, dx_error_t *err) {
  dx_provider_t *p;
  int64_t now = dx__now_ms();
  size_t i;
  int rc;
  if (!c || (!starts && n)) return dx_error_set(err, DX_EINVAL, "NULL argument");
  p = c->p;
  if ((rc = begin_all_or_nothing(p, err)) != 0) return rc;
  for (i = 0; i < n && rc == 0; i++) {
    dx_work_item_t w;
    if ((rc = dx__client_start_item(&starts[i], &w, err)) != 0) break;
    rc = p->methods->enqueue_for_orchestrator(p, now, &w, 0, err);
    free(w.data);
  }
  if (rc != 0) {
    p->methods->rollback(p); /* all or nothing */
    return rc;
  }
  if ((rc = p->methods->commit(p, 1, err)) == 0) dx__runtime_poke_all();
  return rc;
}

static int require_instance(dx_client_t *c, const char *id, dx_error_t *err) {
  dx_instance_info_t info;
  int rc;
  memset(&info, 0, sizeof info);
  rc = c->p->methods->get_instance_info(c->p, id, &info, err);
  dx_instance_info_clear(&info);
  if (rc == DX_ENOTFOUND) return dx_error_set(err, DX_ENOTFOUND, "unknown instance '%s'", id);
  return rc;
}

/* raise_event and enqueue_event: check a named message with data for an existing instance
** and build its work item (w->data is malloc'd: free it). */
static int prepare_event(dx_client_t *c, int kind, const char *id, const char *name_what,
                         const char *name, const char *data, dx_work_item_t *w,
                         dx_error_t *err) {
  char *json = NULL;
  int rc;
  if ((rc = check_id("instance id", id, err)) != 0) return rc;
  if ((rc = check_len(name_what, name, DX_MAX_EVENT_NAME_BYTES, err)) != 0) return rc;
  if ((rc = canonical("event data", data, &json, err)) != 0) return rc;
  if ((rc = require_instance(c, id, err)) != 0) {
    free(json);
    return rc;
  }
  memset(w, 0, sizeof *w);
  w->kind = kind;
  w->instance = (char *)id;
  w->name = (char *)name;
  w->data = json;
  return DX_OK;
}

static int send_event(dx_client_t *c, int kind, const char *id, const char *name_what,
                      const char *name, const char *data, dx_error_t *err) {
  dx_work_item_t w;
  int rc;
  if (!c) return dx_error_set(err, DX_EINVAL, "NULL client");
  if ((rc = prepare_event(c, kind, id, name_what, name, data, &w, err)) != 0) return rc;
  rc = enqueue(c, &w, err);
  free(w.data);
  return rc;
}

int dx_client_raise(dx_client_t *c, const char *id, const char *name, const char *data,
                    dx_error_t *err) {
  return send_event(c, DX_WI_EXTERNAL, id, "event name", name, data, err);
}

/* Every raise is checked (instances must exist) before the one transaction that writes
** them all, so a bad entry changes nothing. */
int dx_client_raise_many(dx_client_t *c, const dx_raise_t *raises, size_t n, dx_error_t *err) {
  dx_work_item_t *w;
  dx_provider_t *p;
  int64_t now = dx__now_ms();
  size_t i, k;
  int rc = 0;
  if (!c || (!raises && n)) return dx_error_set(err, DX_EINVAL, "NULL argument");
  p = c->p;
  if (!(w = calloc(n ? n : 1, sizeof *w))) return dx_error_set(err, DX_ENOMEM, "out of memory");
  for (k = 0; k < n && rc == 0; k++) {
    rc = prepare_event(c, DX_WI_EXTERNAL, raises[k].id, "event name", raises[k].name,
                       raises[k].data, &w[k], err);
    if (rc != 0 && err) {
      char tmp[sizeof err->msg];
      memcpy(tmp, err->msg, sizeof tmp);
      snprintf(err->msg, sizeof err->msg, "entry %zu: %.480s", k + 1, tmp);
    }
  }
  if (rc == 0) rc = begin_all_or_nothing(p, err);
  for (i = 0; i < n && rc == 0; i++) {
    rc = p->methods->enqueue_for_orchestrator(p, now, &w[i], 0, err);
    if (rc != 0) p->methods->rollback(p); /* all or nothing */
  }
  if (rc == 0 && (rc = p->methods->commit(p, 1, err)) == 0) dx__runtime_poke_all();
  for (i = 0; i < n; i++) free(w[i].data);
  free(w);
  return rc;
}

int dx_client_enqueue_event(dx_client_t *c, const char *id, const char *queue, const char *data,
                            dx_error_t *err) {
  return send_event(c, DX_WI_QUEUE_MESSAGE, id, "queue name", queue, data, err);
}

/* The provider's key-value methods, or DX_EINVAL naming a provider without them. */
static int kv_capable(dx_client_t *c, dx_error_t *err) {
  if (!c) return dx_error_set(err, DX_EINVAL, "NULL client");
  if (c->p->methods->version < 7 || !c->p->methods->get_kv || !c->p->methods->list_kv)
    return dx_error_set(err, DX_EINVAL, "store provider '%s' has no key-value state",
                        c->p->methods->name);
  return DX_OK;
}

int dx_client_kv_get(dx_client_t *c, const char *id, const char *key, char **value,
                     dx_error_t *err) {
  int rc;
  if (!value) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *value = NULL;
  if ((rc = kv_capable(c, err)) != 0 || (rc = check_id("instance id", id, err)) != 0 ||
      (rc = check_len("key-value key", key, DX_MAX_KV_KEY_BYTES, err)) != 0)
    return rc;
  return c->p->methods->get_kv(c->p, id, key, value, NULL, err);
}

int dx_client_kv_list(dx_client_t *c, const char *id, dx_kv_cb cb, void *ud, dx_error_t *err) {
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "NULL callback");
  if ((rc = kv_capable(c, err)) != 0 || (rc = check_id("instance id", id, err)) != 0) return rc;
  return c->p->methods->list_kv(c->p, id, cb, ud, err);
}

int dx_client_cancel(dx_client_t *c, const char *id, const char *reason, dx_error_t *err) {
  dx_work_item_t w;
  int rc;
  if (!c) return dx_error_set(err, DX_EINVAL, "NULL client");
  if ((rc = check_id("instance id", id, err)) != 0) return rc;
  if (reason && strlen(reason) > DX_MAX_REASON_BYTES)
    return dx_error_set(err, DX_EINVAL, "cancel reason is %zu bytes; the limit is %d bytes",
                        strlen(reason), DX_MAX_REASON_BYTES);
  if ((rc = require_instance(c, id, err)) != 0) return rc;
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_CANCEL;
  w.instance = (char *)id;
  w.reason = (char *)(reason ? reason : "cancelled by client");
  return enqueue(c, &w, err);
}

int dx_client_status(dx_client_t *c, const char *id, dx_instance_info_t *out,
                     dx_error_t *err) {
  int rc;
  if (!c || !out) return dx_error_set(err, DX_EINVAL, "NULL argument");
  memset(out, 0, sizeof *out);
  if ((rc = check_id("instance id", id, err)) != 0) return rc;
  rc = c->p->methods->get_instance_info(c->p, id, out, err);
  if (rc == DX_ENOTFOUND) {
    memset(out, 0, sizeof *out);
    return DX_OK;
  }
  /* A queued start reads as Running: the instance exists, its first turn is pending. */
  if (rc == 0 && out->status == DX_STATUS_NONE) out->status = DX_STATUS_RUNNING;
  return rc;
}

int dx_client_history(dx_client_t *c, const char *id, uint64_t exec, dx_event_t **out,
                      size_t *n, dx_error_t *err) {
  dx_instance_info_t info;
  int rc, queued;
  if (!c || !out || !n) return dx_error_set(err, DX_EINVAL, "NULL argument");
  *out = NULL;
  *n = 0;
  if ((rc = check_id("instance id", id, err)) != 0) return rc;
  rc = c->p->methods->read_history(c->p, id, exec, out, n, NULL, err);
  if (rc == 0 && exec && *n == 0) /* the instance exists; that execution does not */
    return dx_error_set(err, DX_ENOTFOUND, "instance '%s' has no execution %llu (pruned, or "
                        "not reached yet)", id, (unsigned long long)exec);
  if (rc != DX_ENOTFOUND) return rc;
  /* One wording for every provider; a queued start exists (status Running) but has no events. */
  queued = dx_client_status(c, id, &info, NULL) == 0 && info.status != DX_STATUS_NONE;
  if (queued) {
    dx_instance_info_clear(&info);
    return dx_error_set(err, DX_ENOTFOUND,
                        "instance '%s' has no history yet: it is queued and no worker has run it",
                        id);
  }
  return dx_error_set(err, DX_ENOTFOUND, "unknown instance '%s'", id);
}

static void sleep_ms(int64_t ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* {===== waiting for a change =====} */

/* Watch for commits: the provider's wake descriptor when this client owns the provider (a
** runtime sharing it watches that descriptor itself), else an inotify watch of the store's
** notify file (written by commits that queue or finish work), else nothing. */
static void watch_open(dx_client_t *c) {
  const dx_provider_methods_t *m = c->p->methods;
  const char *path;
  int fd;
  if (c->watch != WATCH_UNSET) return;
  c->watch = WATCH_NONE;
  c->watch_fd = -1;
  if (c->owns_provider && m->version >= 4 && m->wake_fd && m->wake_drain &&
      (fd = m->wake_fd(c->p)) >= 0) {
    c->watch = WATCH_WAKE;
    c->watch_fd = fd;
    return;
  }
  path = m->version >= 3 && m->notify_path ? m->notify_path(c->p) : NULL;
  if (!path || (fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) < 0) return;
  if (inotify_add_watch(fd, path, IN_MODIFY) < 0) {
    close(fd);
    return;
  }
  c->watch = WATCH_FILE;
  c->watch_fd = fd;
}

void dx__client_watch(dx_client_t *c) { watch_open(c); }

int dx__client_await(dx_client_t *c, int64_t max_ms, int64_t fallback_ms) {
  struct pollfd pfd;
  watch_open(c);
  if (c->watch_fd < 0) {
    sleep_ms(fallback_ms);
    return 0;
  }
  pfd.fd = c->watch_fd;
  pfd.events = POLLIN;
  pfd.revents = 0;
  if (poll(&pfd, 1, max_ms > INT32_MAX ? INT32_MAX : (int)max_ms) <= 0) return 0;
  if (c->watch == WATCH_FILE) {
    char buf[1024];
    while (read(c->watch_fd, buf, sizeof buf) > 0) {}
  } else {
    int lost = 0;
    if (c->p->methods->wake_drain(c->p, &lost) < 0) { /* no more wake-ups: sleep from now on */
      c->watch = WATCH_NONE;
      c->watch_fd = -1;
    }
  }
  return 1;
}

int dx_client_wait(dx_client_t *c, const char *id, int64_t timeout_ms, dx_instance_info_t *out,
                   dx_error_t *err) {
  int64_t delay = 2, deadline = dx__deadline_ms(timeout_ms);
  if (c) watch_open(c); /* before the first read: no commit after it goes unheard */
  for (;;) {
    int64_t left;
    int rc = dx_client_status(c, id, out, err);
    if (rc != 0) return rc;
    if (out->status == DX_STATUS_COMPLETED || out->status == DX_STATUS_FAILED) return DX_OK;
    if ((left = deadline - dx__now_ms()) <= 0)
      return dx_error_set(err, DX_ETIMEDOUT, "instance '%s' did not finish within %" PRId64 "ms",
                          id, timeout_ms);
    dx_instance_info_clear(out);
    dx__client_await(c, left < DX_CLIENT_WATCH_MAX_MS ? left : DX_CLIENT_WATCH_MAX_MS,
                     left < delay ? left : delay);
    if (delay < 50) delay *= 2;
  }
}

const char *dx_status_name(int status) {
  switch (status) {
    case DX_STATUS_RUNNING:
    case DX_STATUS_CONTINUED_AS_NEW: return "Running";
    case DX_STATUS_COMPLETED: return "Completed";
    case DX_STATUS_FAILED: return "Failed";
    default: return "NotFound";
  }
}

/* Parse stored canonical JSON into a jansson value (null when absent or unparsable). */
json_t *dx__json_or_null(const char *text) {
  json_t *v = text ? json_loads(text, JSON_DECODE_ANY, NULL) : NULL;
  return v ? v : json_null();
}

/* A JSON string even for text that is not valid UTF-8 (error messages may carry any bytes):
** such bytes become U+FFFD (dx__json_text). */
json_t *dx__jstr(const char *text) {
  json_t *v = dx__json_text(text ? text : "");
  return v ? v : json_null();
}

json_t *dx__failure_json(const dx_failure_t *f) {
  json_t *o = json_object();
  json_object_set_new(o, "category", dx__jstr(dx__category_name(f->category)));
  if (f->kind) json_object_set_new(o, "kind", dx__jstr(f->kind));
  json_object_set_new(o, "message", dx__jstr(f->message ? f->message : ""));
  return o;
}

static char *dump(json_t *o) {
  char *s = dx__json_dump(o);
  json_decref(o);
  return s;
}

char *dx_instance_info_to_json(const char *id, const dx_instance_info_t *info) {
  json_t *o = json_object();
  json_object_set_new(o, "instance_id", dx__jstr(id));
  json_object_set_new(o, "status", dx__jstr(dx_status_name(info->status)));
  if (info->orchestration_name)
    json_object_set_new(o, "orchestration", dx__jstr(info->orchestration_name));
  if (info->current_execution_id) /* 0: the start is queued, no execution yet */
    json_object_set_new(o, "execution_id", json_integer((json_int_t)info->current_execution_id));
  if (info->status == DX_STATUS_COMPLETED)
    json_object_set_new(o, "output", dx__json_or_null(info->output));
  if (info->status == DX_STATUS_FAILED) json_object_set_new(o, "error", dx__failure_json(&info->failure));
  if (info->custom_status) json_object_set_new(o, "custom_status", dx__json_or_null(info->custom_status));
  if (info->status != DX_STATUS_NONE) /* grows with every custom status change */
    json_object_set_new(o, "custom_status_version",
                        json_integer((json_int_t)info->custom_status_version));
  return dump(o);
}

/* The event type names `history` prints, indexed by dx_event_kind_t. */
static const char *const event_names[DX_EV__COUNT] = {"",
  "OrchestrationStarted", "OrchestrationCompleted", "OrchestrationFailed",
  "OrchestrationContinuedAsNew", "OrchestrationCancelRequested", "ActivityScheduled",
  "ActivityCompleted", "ActivityFailed", "ActivityCancelRequested", "TimerCreated",
  "TimerFired", "ExternalSubscribed", "ExternalEvent", "ExternalSubscribedCancelled",
  "SubOrchestrationScheduled", "SubOrchestrationCompleted", "SubOrchestrationFailed",
  "SubOrchestrationCancelRequested", "OrchestrationChained", "CustomStatusUpdated",
  "SystemCall", "SessionClosed", "KeyValueSet", "KeyValueCleared", "KeyValuesCleared",
  "QueueSubscribed", "QueueEventDelivered", "QueueSubscriptionCancelled"};

const char *dx_event_kind_name(int kind) {
  return (kind > 0 && kind < DX_EV__COUNT) ? event_names[kind] : "Unknown";
}

int dx_event_kind_from_name(const char *name) {
  int k;
  for (k = 1; name && k < DX_EV__COUNT; k++)
    if (strcmp(name, event_names[k]) == 0) return k;
  return 0;
}

char *dx_event_to_json(const dx_event_t *e) {
  json_t *o = json_object();
  json_object_set_new(o, "event_id", json_integer((json_int_t)e->event_id));
  json_object_set_new(o, "type", dx__jstr(dx_event_kind_name(e->kind)));
  json_object_set_new(o, "timestamp_ms", json_integer((json_int_t)e->timestamp_ms));
  if (e->source_id) json_object_set_new(o, "source_event_id", json_integer((json_int_t)e->source_id));
  if (e->name) json_object_set_new(o, "name", dx__jstr(e->name));
  if (e->version) json_object_set_new(o, "version", dx__jstr(e->version));
  if (e->data) json_object_set_new(o, "data", dx__json_or_null(e->data));
  if (e->instance) json_object_set_new(o, "instance", dx__jstr(e->instance));
  if (e->session_id) json_object_set_new(o, "session_id", dx__jstr(e->session_id));
  if (e->tag) json_object_set_new(o, "tag", dx__jstr(e->tag));
  if (e->reason) json_object_set_new(o, "reason", dx__jstr(e->reason));
  if (e->worker_id) json_object_set_new(o, "worker_id", dx__jstr(e->worker_id));
  if (e->fire_at_ms) json_object_set_new(o, "fire_at_ms", json_integer((json_int_t)e->fire_at_ms));
  if (e->fail.category) json_object_set_new(o, "error", dx__failure_json(&e->fail));
  if (e->custom_status)
    json_object_set_new(o, "initial_custom_status", dx__json_or_null(e->custom_status));
  return dump(o);
}
