/* embedding.h -- runtime hooks for bindings that build a runtime for C programs (internal). */
#ifndef DX_EMBEDDING_H
#define DX_EMBEDDING_H
#include "duroxide.h"

/* Attach `owner`, released by owner_free(owner) at the end of dx_runtime_free (after the
** runtime's own memory, so the owner may hold the provider and loop the runtime used). */
void dx__runtime_set_owner(dx_runtime_t *rt, void (*owner_free)(void *), void *owner);
/* The owner attached with this owner_free, else NULL (NULL rt gives NULL). */
void *dx__runtime_owner(const dx_runtime_t *rt, void (*owner_free)(void *));
/* The loop the runtime runs on. */
uv_loop_t *dx__runtime_loop(const dx_runtime_t *rt);
/* 1 while dx_runtime_run drives the runtime's loop. */
int dx__runtime_in_run(const dx_runtime_t *rt);
/* A simulated stall (duroxide.testing stall_worker): on = 1 the runtime runs nothing of its
** own (no store cycle, renewal or lease check; the binding holds its activities' steps), as a
** SIGSTOPped process; on = 0 resumes it: lapsed session leases are lost first. */
void dx__runtime_stall(dx_runtime_t *rt, int on);
int dx__runtime_stalled(const dx_runtime_t *rt);
/* Tests (duroxide.testing upgrade scenarios): this runtime treats activity `name` as not
** registered, as a worker running older code would. DX_OK or DX_ENOMEM. */
int dx__runtime_hide_activity(dx_runtime_t *rt, const char *name);
/* Client waits (client.c): dx__client_watch starts listening for commits (call it before
** the first read, so none after it goes unheard); dx__client_await blocks until a commit may
** have changed the store or max_ms passed (1), or, with nothing to listen to, sleeps
** fallback_ms (0). A watched wait still re-reads at least every DX_CLIENT_WATCH_MAX_MS. */
#define DX_CLIENT_WATCH_MAX_MS 1000
void dx__client_watch(dx_client_t *c);
int dx__client_await(dx_client_t *c, int64_t max_ms, int64_t fallback_ms);
/* Validate one start and build its START work item (client.c; w->data is malloc'd: free it;
** the other fields borrow st's strings). */
int dx__client_start_item(const dx_start_t *st, dx_work_item_t *w, dx_error_t *err);
/* Eager start: a runtime running on the client's own local store (the same notify file) takes
** the start into its store cycle, which commits it together with its first turn when the loop
** runs that turn in time (store_rounds.c): one durable commit instead of two. *out NULL
** (DX_OK): rt cannot take it now (not running, stopping, stalled, another store): use
** dx_client_start. Else the start is queued: run rt's loop until dx__eager_done(*out), then
** dx__eager_end gives its outcome (as dx_client_start's) and frees it. A bad start fails at
** once, as in dx_client_start. Loop thread; st's strings must live until the end. */
typedef struct dx__eager_s dx__eager_t;
int dx__eager_start(dx_runtime_t *rt, dx_client_t *c, const dx_start_t *st, dx__eager_t **out,
                    dx_error_t *err);
int dx__eager_done(const dx__eager_t *e);
int dx__eager_end(dx__eager_t *e, dx_error_t *err);
/* Tests: how long the runtime's store cycles wait for the turns they fetched (store.h
** hold_ms; default DX__TURN_HOLD_MS, 0 = never). Before dx_runtime_start. */
void dx__runtime_set_turn_hold(dx_runtime_t *rt, int64_t ms);
/* Tests: the runtime's next n store commits are lost (rolled back, reported as DX_ERETRY, so
** the batch is retried), as a database's serialization failure would be. After
** dx_runtime_start. */
void dx__runtime_lose_commits(dx_runtime_t *rt, int n);
/* The code suspended in a library wait (await, join) for every one of these n futures
** (tokens of dx_turn_emit): until none is pending, events that complete others do not resume
** it. Called by the host's orch_resume before it returns DX_RUN_PENDING; each resume forgets
** it (n 0 parks nothing). DX_ENOMEM: not parked (every event resumes the code, as without). */
int dx__turn_park(dx_turn_t *t, const uint64_t *tokens, size_t n);
/* The runtime an activity runs on. */
dx_runtime_t *dx__activity_runtime(const dx_activity_t *a);
/* dx_activity_complete with a malloc'd output the activity takes (freed by it, whatever
** happens): no copy of the result's texts (a binding encodes the output into a fresh buffer). */
void dx__activity_complete_take(dx_activity_t *a, char *output_json);
/* A buffer in a's record (*cap bytes) a binding may write a small output into and pass to
** dx__activity_complete_take (which then only borrows it): no malloc for most results. */
char *dx__activity_out_buf(dx_activity_t *a, size_t *cap);
#endif
