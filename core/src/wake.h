/*
** wake.h -- wake the store thread when another process commits work (internal).
**
** A provider offers one of two sources: a pollable descriptor (wake_fd/wake_drain, version 4:
** e.g. a database connection that LISTENs) or a file it writes after such commits
** (notify_path, watched with inotify). Without either, the store thread polls.
*/
#ifndef DX_WAKE_H
#define DX_WAKE_H

#include <uv.h>

#include "duroxide/provider.h"
#include "store.h"

typedef struct dx_wake_s dx_wake_t;

/* Start watching `p`'s source on `loop` (the loop thread); each wake-up calls
** dx__store_wake(store), and on_lost(ud) when the provider re-established the connection behind
** its descriptor. NULL when the provider offers no source (or it cannot be watched): the
** store thread's poll covers it. The watch never keeps the loop alive by itself. */
dx_wake_t *dx__wake_start(uv_loop_t *loop, dx_provider_t *p, dx_store_t *store,
                          void (*on_lost)(void *ud), void *ud);
/* Stop and free (the handle is freed once the loop has closed it). NULL is ignored. */
void dx__wake_stop(dx_wake_t *w);

#endif
