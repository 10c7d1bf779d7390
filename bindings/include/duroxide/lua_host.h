/*
** duroxide/lua_host.h -- the Lua host for C programs: a runtime whose orchestrations and
** activities come from a Lua app script (implemented in bindings/lua/embed.c).
**
** The engine's API (runtime, client, C activities, dx_runtime_run) is in duroxide.h, which
** this header includes. See docs/embedding.md and examples/embed.c.
*/
#ifndef DUROXIDE_LUA_HOST_H
#define DUROXIDE_LUA_HOST_H

#include "duroxide.h"

/** Create a runtime that runs the Lua app `app_path` (its duroxide.orchestration and
**  duroxide.activity registrations) over the store `store_dir`.
**  The app runs once, now, in a fresh Lua state with the standard libraries and
**  `require("duroxide")`; modules next to the app are found first; `arg[0]` is app_path.
**  The runtime is not started: register C activities, then dx_runtime_start or dx_runtime_run.
**  @param[out] out      the runtime, owned by the caller: free with dx_lua_runtime_free.
**                       Set to NULL on error.
**  @param[in] loop      the libuv loop to run on (borrowed; must outlive the runtime), or NULL
**                       for a loop owned by the runtime (drive it with dx_runtime_run).
**  @param[in] store_dir the store: a directory (created if missing) or a postgres:// URL
**                       (see dx_provider_open); NULL = the app's
**                       duroxide.configure{store=}, else $DUROXIDE_STORE, else ./duroxide-data.
**                       The app's own duroxide.client() defaults to the same store.
**  @param[in] opts      options (copied), or NULL for the app's duroxide.configure{} values
**                       (defaults when it sets none).
**  @param[in] app_path  path of the Lua app script.
**  @return DX_OK; DX_EINVAL (NULL out or app_path, bad option), DX_ENOTFOUND (no file at
**          app_path), DX_EIO (app unreadable, loop init failed), DX_ELUA (the app failed to
**          compile or raised while loading: err->msg is "file:line: message"), an error of
**          dx_provider_open (DX_ESTORE, DX_EIO, ...), DX_ENOMEM.
**  Thread: any; the runtime then belongs to the thread that runs its loop. */
int dx_lua_runtime_new(dx_runtime_t **out, uv_loop_t *loop, const char *store_dir,
                       const dx_options_t *opts, const char *app_path, dx_error_t *err);

/** Release a runtime made by dx_lua_runtime_new: its Lua state, store handle and (when owned)
**  loop. A runtime still running is stopped gracefully first, by running its loop until the
**  stop completes. NULL is ignored. For a runtime made by dx_runtime_new this is
**  dx_runtime_free. Do not call it from a callback of the runtime's loop.
**  Thread: the runtime's loop thread. */
void dx_lua_runtime_free(dx_runtime_t *rt);

#endif
