/*
** sessions.h -- the per-runtime session manager (internal).
**
** Keeps this process's view of the sessions it owns: renews their leases in one batched call
** per interval (skipping idle ones), notices idle unpins, lost leases, closes and shutdown,
** tells the app through the host's session hooks, and sweeps orphaned rows periodically.
** Every claim, renewal batch, unpin, release and cleanup is logged with session and worker id.
*/
#ifndef DX_SESSIONS_H
#define DX_SESSIONS_H

#include <uv.h>

#include "duroxide.h"
#include "store.h"

typedef struct dx_sessions_s dx_sessions_t;

/* All pointers borrowed; they must outlive the manager. */
dx_sessions_t *dx__sessions_new(uv_loop_t *loop, dx_store_t *store, const dx_options_t *opts,
                                const char *worker_id, const dx_host_methods_t *host,
                                void *host_ud);
/* A session activity was fetched (claimed says whether the fetch made us the owner). */
/* How often the session manager renews its leases (the store thread steps in when late). */
int64_t dx__sessions_renew_every(const dx_options_t *o);
void dx__sessions_on_fetch(dx_sessions_t *s, const char *session_id, int claimed,
                           const char *previous_owner);
/* A session activity finished (its result is queued). */
void dx__sessions_on_done(dx_sessions_t *s, const char *session_id);
/* ctx:close_session reached this owner: release the lease and fire hook "closed" once the
** session's activities running here have finished (at once when none runs). */
void dx__sessions_close(dx_sessions_t *s, const char *session_id);
/* Rolling upgrade: this worker lacks an activity of the session. Its fetches skip the session
** for for_ms, and it releases the session (hook "upgrade") once the session's activities
** running here have finished, so a worker that has the activity claims it. */
void dx__sessions_hand_on(dx_sessions_t *s, const char *session_id, int64_t for_ms);
/* Graceful shutdown: release every owned session (hook "shutdown"), stop the timers, then
** call cb. The manager is freed after cb returns. */
void dx__sessions_shutdown(dx_sessions_t *s, void (*cb)(void *ud), void *ud);
/* Number of sessions owned now (for stats). */
int dx__sessions_count(const dx_sessions_t *s);
/* Record claims, moves, releases and the owned count in m (borrowed; NULL = stop). */
void dx__sessions_set_metrics(dx_sessions_t *s, struct dx_metrics_s *m);
/* Run the lease renewal now instead of at the next renewal tick (tests on a virtual clock:
** idle unpins and lost leases are noticed here). A renewal already in flight is left alone. */
void dx__sessions_renew_now(dx_sessions_t *s);
/* Abrupt stop (a simulated crash): forget owned sessions without hooks or releases, stop the
** timers, then call cb once in-flight store operations have settled; the manager is freed
** after cb returns. */
void dx__sessions_crash(dx_sessions_t *s, void (*cb)(void *ud), void *ud);

#endif
