/*
** runtime_embed.c -- the C embedding side of a worker runtime: C activities (registered with
** dx_register_activity, run on the libuv thread pool or on the loop) and dx_runtime_run /
** dx_runtime_request_stop for hosts that hand the loop to the runtime.
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duroxide.h"
#include "codec.h"
#include "embedding.h"
#include "runtime_int.h"
#include "util.h"
#include "watchdog.h"

/* {===== C embedding: C activities, dx_runtime_run =====} */
/*
** C activities live in a list on the runtime and are looked up before the host's activities,
** so a C activity shadows a Lua activity of the same name. A pool activity runs on the libuv
** thread pool with its own copy of the invocation: the runtime may give up on it at shutdown
** (the result is then discarded) while the function still runs. A loop activity runs at once,
** synchronously, when it is fetched.
*/

struct cact_s {
  struct cact_s *next;
  char *name;
  dx_activity_fn fn;
  void *userdata;
  int flags;
};

typedef struct cact_job_s {
  uv_work_t req;
  dx_activity_t *a;         /* NULL once the runtime gave up on the activity */
  dx_activity_fn fn;
  void *userdata;
  dx_activity_info_t info;  /* points at the job's own copies below */
  char *instance, *name, *input, *session_id, *worker_id, *tag;
  int failed;
  char *output;             /* canonical JSON (NULL = null) on success */
  char *message;            /* the failure message */
} cact_job_t;

const dx__cact_t *dx__cact_find(const dx_runtime_t *rt, const char *name) {
  const dx__cact_t *c;
  for (c = rt->cacts; c; c = c->next)
    if (strcmp(c->name, name) == 0) return c;
  return NULL;
}

void dx__cact_free_all(dx_runtime_t *rt) {
  while (rt->cacts) {
    dx__cact_t *c = rt->cacts;
    rt->cacts = c->next;
    free(c->name);
    free(c);
  }
}

/* Call fn and turn its outcome into (failed, output, message). Runs on any thread, so it
** touches nothing but its arguments. */
static void cact_call(dx_activity_fn fn, void *ud, const dx_activity_info_t *info, int *failed,
                      char **output, char **message) {
  char *out = NULL, *msg = NULL, buf[640];
  dx_error_t e;
  int rc = fn(info, info->input ? info->input : "null", &out, &msg, ud);
  *output = *message = NULL;
  *failed = 0;
  if (rc != 0) {
    *failed = 1;
    free(out);
    if (msg) {
      *message = msg;
    } else {
      snprintf(buf, sizeof buf, "C activity '%s' failed (returned %d)", info->name, rc);
      *message = dx__strdup(buf);
    }
    return;
  }
  free(msg);
  if (!out) return; /* JSON null */
  if (dx__json_canonical(out, strlen(out), output, &e) != 0) {
    *failed = 1;
    snprintf(buf, sizeof buf, "C activity '%s' returned an invalid output: %s", info->name, e.msg);
    *message = dx__strdup(buf);
  }
  free(out);
}

static void cact_finish(dx_activity_t *a, int failed, const char *output, const char *message) {
  if (failed) dx_activity_fail(a, message ? message : "C activity failed");
  else dx_activity_complete(a, output);
}

static void cact_job_free(cact_job_t *j) {
  free(j->instance);
  free(j->name);
  free(j->input);
  free(j->session_id);
  free(j->tag);
  free(j->worker_id);
  free(j->output);
  free(j->message);
  free(j);
}

static void cact_work(uv_work_t *req) {
  cact_job_t *j = req->data;
  cact_call(j->fn, j->userdata, &j->info, &j->failed, &j->output, &j->message);
}

static void cact_after_work(uv_work_t *req, int status) {
  cact_job_t *j = req->data;
  if (j->a) {
    j->a->cjob = NULL;
    if (status != 0) cact_finish(j->a, 1, NULL, "C activity was cancelled before it ran");
    else cact_finish(j->a, j->failed, j->output, j->message);
  }
  cact_job_free(j);
}

void dx__cact_start(dx_activity_t *a, const dx__cact_t *c) {
  const dx_activity_info_t *in = &a->info;
  cact_job_t *j;
  int rc;
  if (c->flags & DX_ACTIVITY_ON_LOOP) {
    int failed;
    char *output, *message;
    dx__watch_enter(a->rt->loop, "C activity %s (instance %s, id %" PRIu64 ")", in->name,
                    in->instance, in->activity_id);
    cact_call(c->fn, c->userdata, in, &failed, &output, &message);
    dx__watch_leave(a->rt->loop);
    cact_finish(a, failed, output, message);
    free(output);
    free(message);
    return;
  }
  j = calloc(1, sizeof *j);
  if (!j) {
    dx_activity_fail(a, "out of memory starting the C activity");
    return;
  }
  j->fn = c->fn;
  j->userdata = c->userdata;
  j->info = *in;
  j->info.instance = j->instance = dx__strdup(in->instance);
  j->info.name = j->name = dx__strdup(in->name);
  j->info.input = j->input = dx__strdup(in->input ? in->input : "null");
  j->info.session_id = j->session_id = dx__strdup(in->session_id);
  j->info.worker_id = j->worker_id = dx__strdup(in->worker_id);
  j->info.tag = j->tag = dx__strdup(in->tag);
  if (!j->instance || !j->name || !j->input || !j->worker_id ||
      (in->session_id && !j->session_id) || (in->tag && !j->tag)) {
    cact_job_free(j);
    dx_activity_fail(a, "out of memory starting the C activity");
    return;
  }
  j->req.data = j;
  j->a = a;
  a->cjob = j;
  rc = uv_queue_work(a->rt->loop, &j->req, cact_work, cact_after_work);
  if (rc != 0) {
    char msg[256];
    a->cjob = NULL;
    cact_job_free(j);
    snprintf(msg, sizeof msg, "cannot queue the C activity on the thread pool: %s",
             uv_strerror(rc));
    dx_activity_fail(a, msg);
  }
}

/* The runtime gives up on `a` (shutdown grace expired): 1 when it was a C activity, whose
** result will then be dropped when its function returns. */
int dx__cact_abort(dx_activity_t *a) {
  if (!a->cjob) return 0;
  a->cjob->a = NULL;
  a->cjob = NULL;
  return 1;
}

static int check_activity_name(const char *name, dx_error_t *err) {
  size_t n, i;
  if (!name) return dx_error_set(err, DX_EINVAL, "NULL activity name");
  n = strlen(name);
  if (n == 0 || n > 200)
    return dx_error_set(err, DX_EINVAL, "activity name must be 1 to 200 bytes (got %zu)", n);
  for (i = 0; i < n; i++)
    if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
      return dx_error_set(err, DX_EINVAL, "activity name contains a control character");
  if (strncmp(name, "__duroxide", 10) == 0)
    return dx_error_set(err, DX_EINVAL, "activity names starting with __duroxide are reserved");
  return DX_OK;
}

int dx__cact_add(dx_runtime_t *rt, const char *name, dx_activity_fn fn, void *userdata,
                    int flags, dx_error_t *err) {
  dx__cact_t *c = calloc(1, sizeof *c);
  if (!c || !(c->name = dx__strdup(name))) {
    free(c);
    return dx_error_set(err, DX_ENOMEM, "out of memory");
  }
  c->fn = fn;
  c->userdata = userdata;
  c->flags = flags;
  c->next = rt->cacts;
  rt->cacts = c;
  return DX_OK;
}

int dx_register_activity_ex(dx_runtime_t *rt, const char *name, dx_activity_fn fn,
                            void *userdata, int flags, dx_error_t *err) {
  int rc;
  if (!rt) return dx_error_set(err, DX_EINVAL, "NULL runtime");
  if ((rc = check_activity_name(name, err)) != 0) return rc;
  if (!fn) return dx_error_set(err, DX_EINVAL, "NULL activity function for '%s'", name);
  if (flags != DX_ACTIVITY_ON_POOL && flags != DX_ACTIVITY_ON_LOOP)
    return dx_error_set(err, DX_EINVAL, "unknown activity flags 0x%x for '%s'", (unsigned)flags,
                        name);
  if (rt->stopping)
    return dx_error_set(err, DX_ECLOSED, "runtime is stopping or stopped: cannot register '%s'",
                        name);
  if (dx__cact_find(rt, name))
    return dx_error_set(err, DX_EEXIST, "C activity '%s' is already registered", name);
  return dx__cact_add(rt, name, fn, userdata, flags, err);
}

int dx_register_activity(dx_runtime_t *rt, const char *name, dx_activity_fn fn, void *userdata,
                         dx_error_t *err) {
  return dx_register_activity_ex(rt, name, fn, userdata, DX_ACTIVITY_ON_POOL, err);
}

/* Guards run_active/stop_requested/run_async against dx_runtime_request_stop's threads. */
static uv_mutex_t run_mu;
static uv_once_t run_once = UV_ONCE_INIT;

static void run_mu_init(void) { uv_mutex_init(&run_mu); }

int dx_runtime_is_stopped(const dx_runtime_t *rt) {
  return rt && rt->stopping && (!rt->started || !rt->store);
}

static void on_run_async(uv_async_t *h) { dx_runtime_stop(h->data, NULL, NULL); }

static void on_run_async_closed(uv_handle_t *h) { *(int *)h->data = 1; }

int dx_runtime_run(dx_runtime_t *rt, dx_error_t *err) {
  int rc, pending, closed = 0;
  if (!rt) return dx_error_set(err, DX_EINVAL, "NULL runtime");
  if (rt->run_active)
    return dx_error_set(err, DX_ESTATE, "dx_runtime_run is already running for this runtime");
  if (dx_runtime_is_stopped(rt)) return dx_error_set(err, DX_ECLOSED, "runtime is stopped");
  if (!rt->started && (rc = dx_runtime_start(rt, err)) != 0) return rc;
  uv_once(&run_once, run_mu_init);
  if ((rc = uv_async_init(rt->loop, &rt->run_async, on_run_async)) != 0)
    return dx_error_set(err, DX_EIO, "cannot set up the loop: %s", uv_strerror(rc));
  rt->run_async.data = rt;
  uv_mutex_lock(&run_mu);
  rt->run_active = 1;
  pending = rt->stop_requested;
  uv_mutex_unlock(&run_mu);
  if (pending) dx_runtime_stop(rt, NULL, NULL);
  while (!dx_runtime_is_stopped(rt)) uv_run(rt->loop, UV_RUN_ONCE);
  uv_mutex_lock(&run_mu);
  rt->run_active = 0;
  uv_mutex_unlock(&run_mu);
  rt->run_async.data = &closed;
  uv_close((uv_handle_t *)&rt->run_async, on_run_async_closed);
  while (!closed) uv_run(rt->loop, UV_RUN_NOWAIT);
  return DX_OK;
}

int dx_runtime_request_stop(dx_runtime_t *rt) {
  if (!rt) return DX_EINVAL;
  uv_once(&run_once, run_mu_init);
  uv_mutex_lock(&run_mu);
  rt->stop_requested = 1;
  if (rt->run_active) uv_async_send(&rt->run_async);
  uv_mutex_unlock(&run_mu);
  return DX_OK;
}

/* Internal (embedding.h): a binding attaches what it built around the runtime. */
void dx__runtime_set_owner(dx_runtime_t *rt, void (*owner_free)(void *), void *owner) {
  rt->owner_free = owner_free;
  rt->owner = owner;
}

void *dx__runtime_owner(const dx_runtime_t *rt, void (*owner_free)(void *)) {
  return rt && rt->owner_free == owner_free ? rt->owner : NULL;
}

uv_loop_t *dx__runtime_loop(const dx_runtime_t *rt) { return rt->loop; }

int dx__runtime_in_run(const dx_runtime_t *rt) { return rt->run_active; }

/* }===== C embedding =====} */
