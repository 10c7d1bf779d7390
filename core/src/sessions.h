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
/* How often the session manager renews its leases (the store thread steps in when late). */
int64_t dx__sessions_renew_every(const dx_options_t *o);
/* The fence's safety margin: a hold whose activities run is given up this long before its
** lease ends in the store, so that a step begun after a passing actx:is_cancelled() check
** (shorter than the margin) ends before another worker can claim the session. A tenth of the
** lease, under a quarter of the renewal's slack (lease - renewal interval), at most this many ms. */
#define DX_SESSION_FENCE_MARGIN_MAX_MS 500
int64_t dx__sessions_margin(const dx_options_t *o);
/* A session activity was fetched at store time at_ms (claimed says whether the fetch made us
** the owner). Returns the generation of our hold on the session the activity runs under:
** each claim here (after a release, a loss or an abort) starts a new one. */
uint64_t dx__sessions_on_fetch(dx_sessions_t *s, const char *session_id, int claimed,
                               const char *previous_owner, int64_t at_ms);
/* The same with the caller's reading of dx__now_ms (one reading for several calls). */
uint64_t dx__sessions_on_fetch_at(dx_sessions_t *s, const char *session_id, int claimed,
                                  const char *previous_owner, int64_t at_ms, int64_t now);
/* A session activity of generation gen finished (its result is queued). */
void dx__sessions_on_done(dx_sessions_t *s, const char *session_id, uint64_t gen);
/* on_done, and (check) dx__sessions_fenced as it stood just before, from one clock reading:
** returns 1 when fenced (always when generation gen no longer holds the session). */
int dx__sessions_settle(dx_sessions_t *s, const char *session_id, uint64_t gen, int check);
/* 1 when this process no longer holds the session as it did for generation gen: the session
** was released (lost, aborted, ended), or its lease lapsed (less than the margin left) with no
** renewal we know of (a stall: another worker may claim it). Activities of that generation are fenced: they
** see actx:is_cancelled() and their results are handed back instead of acked. Pure: hooks fire
** from the manager's check after each loop iteration. */
int dx__sessions_fenced(const dx_sessions_t *s, const char *session_id, uint64_t gen);
int dx__sessions_fenced_at(const dx_sessions_t *s, const char *session_id, uint64_t gen,
                           int64_t now);
/* actx:abort_session: give the session up now (hook "aborted", lease released in the store;
** its queued work goes to the next claimer). DX_ESTATE when generation gen no longer holds it. */
int dx__sessions_abort(dx_sessions_t *s, const char *session_id, uint64_t gen,
                       const char *reason, dx_error_t *err);
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
/* A simulated stall (tests): on = 1 stops renewals, sweeps and lapse checks; on = 0 resumes
** them and checks the leases at once (a lease that lapsed meanwhile is "lost"). */
void dx__sessions_pause(dx_sessions_t *s, int on);
/* Abrupt stop (a simulated crash): forget owned sessions without hooks or releases, stop the
** timers, then call cb once in-flight store operations have settled; the manager is freed
** after cb returns. */
void dx__sessions_crash(dx_sessions_t *s, void (*cb)(void *ud), void *ud);

#endif
