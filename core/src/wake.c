/*
** wake.c -- wake the store thread when another process commits work (see wake.h).
*/
#include <stdlib.h>

#include "log.h"
#include "wake.h"

struct dx_wake_s {
  union {
    uv_handle_t h;
    uv_poll_t poll;       /* wake_fd */
    uv_fs_event_t event;  /* notify_path */
  } u;
  dx_provider_t *p;
  dx_store_t *store;
  void (*on_lost)(void *ud);
  void *ud;
};

static void on_closed(uv_handle_t *h) { free(h->data); }

static void close_handle(dx_wake_t *w) {
  if (!uv_is_closing(&w->u.h)) uv_close(&w->u.h, on_closed);
}

/* The descriptor is readable: let the provider consume it, then look for work. */
static void on_poll(uv_poll_t *h, int status, int events) {
  dx_wake_t *w = h->data;
  int lost = 0, rc;
  (void)events;
  rc = status < 0 ? status : w->p->methods->wake_drain(w->p, &lost);
  if (lost && w->on_lost) w->on_lost(w->ud);
  dx__store_wake(w->store); /* also after an error: a wake-up may have been missed */
  if (rc < 0) {
    dx__log(DX_LOG_WARN, "store wake-ups stopped; polling instead", "error=%d", rc);
    uv_poll_stop(h);
  }
}

static void on_event(uv_fs_event_t *h, const char *name, int events, int status) {
  dx_wake_t *w = h->data;
  (void)name;
  (void)events;
  if (status == 0) dx__store_wake(w->store);
}

dx_wake_t *dx__wake_start(uv_loop_t *loop, dx_provider_t *p, dx_store_t *store,
                          void (*on_lost)(void *ud), void *ud) {
  const dx_provider_methods_t *m = p->methods;
  dx_wake_t *w = calloc(1, sizeof *w);
  int fd = m->version >= 4 && m->wake_fd && m->wake_drain ? m->wake_fd(p) : -1;
  const char *path = fd < 0 && m->version >= 3 && m->notify_path ? m->notify_path(p) : NULL;
  if (!w) return NULL;
  w->p = p;
  w->store = store;
  w->on_lost = on_lost;
  w->ud = ud;
  w->u.h.data = w;
  if (fd >= 0 && uv_poll_init(loop, &w->u.poll, fd) == 0) {
    w->u.h.data = w;
    if (uv_poll_start(&w->u.poll, UV_READABLE, on_poll) != 0) {
      close_handle(w);
      return NULL;
    }
  } else if (path && uv_fs_event_init(loop, &w->u.event) == 0) {
    w->u.h.data = w;
    if (uv_fs_event_start(&w->u.event, on_event, path, 0) != 0) {
      close_handle(w);
      return NULL;
    }
  } else {
    free(w);
    return NULL;
  }
  uv_unref(&w->u.h);
  return w;
}

void dx__wake_stop(dx_wake_t *w) {
  if (w) close_handle(w);
}
