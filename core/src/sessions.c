/*
** sessions.c -- the per-runtime session manager (see sessions.h).
**
** The store is the authority on ownership; this file keeps the local view needed to call the
** app's hooks at the right moments:
** - claim: a fetch returned a session item we did not know we owned ("new", or "reclaim"
**   when the store already named us: a restart with the same worker_node_id);
** - idle: no activity for session_idle_timeout -> we stop renewing; once the lease lapses
**   the session is unpinned (another worker may claim it) and the hook fires;
** - lost: a renewal did not cover a session we still consider active (one claimed before the
**   renewal was submitted: a held round hands a claim over before its commit, so a renewal
**   applied earlier in that transaction does not list it), the store claimed a session for us that
**   we held already (the claim that began our hold was lost with its transaction), or its
**   lease lapsed with no renewal we know of (the process stalled, e.g. SIGSTOP: another
**   worker may have claimed it; the store refuses our late results by the session's
**   ownership epoch);
** - closed: ctx:close_session reached us and the session's running activities here finished
**   (until then we keep the lease, so no other worker runs the session meanwhile);
** - ended: every instance that used the session has ended and no work is left (renewals say
**   so): the slot is freed even with session_idle_timeout 0;
** - aborted: actx:abort_session gave it up;
** - shutdown: graceful stop.
** Fencing: each local hold of a session has a generation; activities started under it are
** fenced (cancelled, results handed back) once the hold ends or its lease is lapsed. The lapse
** is checked synchronously (dx__sessions_fenced) and by a uv_check handle after every loop
** iteration, so after a stall the hold ends before any timer of the session's activities runs.
*/
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "sessions.h"
#include "util.h"

typedef struct owned_s {
  char *id;
  uint64_t gen;         /* this hold of the session (a new one per claim here) */
  int64_t last_activity;
  int64_t lease_until;  /* as far as the loop's own renewals and fetches extended it */
  uint64_t renewals_before; /* renewals submitted when this hold began (dx_sessions_t.renewals) */
  int running;          /* activities of this session running here now */
  int idle;             /* stopped renewing because idle */
  const char *closing;  /* release reason ("closed", "upgrade") once `running` reaches 0 */
  uint64_t hash;        /* of id (index bucket) */
  struct owned_s *next, *prev; /* the owned list (newest first) */
  struct owned_s *hnext;       /* the index bucket's chain */
} owned_t;

/* A session this worker released in the store. Items of it fetched before the release took
** effect (in the close's batch, or in a batch not delivered yet) were fetched as ours; they
** must not start a new hold, since the store has the session unowned and any worker may claim
** it and run them. */
typedef struct released_s {
  char *id;
  int64_t at;           /* store time the release was applied; 0 while it is in flight */
  struct released_s *next;
} released_t;

struct dx_sessions_s {
  uv_loop_t *loop;
  dx_store_t *store;
  const dx_options_t *opts;
  const char *worker_id;
  const dx_host_methods_t *host;
  void *host_ud;
  owned_t *owned;
  int n_owned;
  owned_t **index;      /* owned sessions by id: every activity asks (fenced, fetch, done) */
  size_t index_cap;     /* buckets, a power of two (0: none yet) */
  released_t *released;
  int releases_busy;    /* single-session releases in flight (shutdown waits for them) */
  uint64_t next_gen;
  int64_t margin;       /* a hold ends this long before its lease does (dx__sessions_margin) */
  uv_timer_t renew_timer, cleanup_timer;
  uv_check_t check;     /* lapsed leases: after every loop iteration */
  dx_store_op_t renew_op, cleanup_op, release_op;
  int renew_busy, cleanup_busy;
  uint64_t renewals;    /* renewals submitted so far (the one in flight is the last) */
  int renewed_once;     /* the first renewal runs at start, owned or not (same-id restart) */
  int closing_handles;
  int shutting_down;
  int paused;           /* a simulated stall (tests) */
  void (*shutdown_cb)(void *);
  void *shutdown_ud;
  dx_metrics_t *metrics;  /* claims, moves, releases, owned (NULL = none) */
};

/* {===== session history in the store =====} */

typedef struct {
  dx_store_op_t op;
  dx_session_event_t ev;
  char *sid, *detail, *prev; /* owned copies behind ev */
} sev_op_t;

static void sev_done(dx_store_op_t *op) {
  sev_op_t *e = (sev_op_t *)op;
  if (op->rc != 0)
    dx__log(DX_LOG_WARN, "session history not recorded", "session_id=%s event=%s error=\"%s\"",
            e->sid, e->ev.event, op->err.msg);
  free(e->sid);
  free(e->detail);
  free(e->prev);
  free(e);
}

/* Record a claim, move or release in the store (`duroxide-lua sessions --history`). event is a
** literal; best effort: a failure is logged. */
static void record(dx_sessions_t *s, const char *sid, const char *event, const char *detail,
                   const char *prev) {
  sev_op_t *e = calloc(1, sizeof *e);
  if (!e || !(e->sid = dx__strdup(sid)) || (detail && !(e->detail = dx__strdup(detail))) ||
      (prev && !(e->prev = dx__strdup(prev)))) {
    if (e) {
      free(e->sid);
      free(e->detail);
    }
    free(e);
    return;
  }
  e->ev.session_id = e->sid;
  e->ev.at_ms = dx__now_ms();
  e->ev.event = event;
  e->ev.worker_id = s->worker_id;
  e->ev.detail = e->detail;
  e->ev.previous_owner = e->prev;
  e->op.kind = DX_OP_SESSION_EVENT;
  e->op.sev = &e->ev;
  e->op.done = sev_done;
  e->op.ud = s;
  dx__store_submit(s->store, &e->op);
}

/* {===== local set =====} */

static uint64_t id_hash(const char *id) { return dx__fnv1a64(DX_FNV1A64_BASIS, id); }

static owned_t *find_hashed(const dx_sessions_t *s, const char *id, uint64_t h) {
  owned_t *o;
  if (!s->index_cap) return NULL;
  for (o = s->index[h & (s->index_cap - 1)]; o; o = o->hnext)
    if (o->hash == h && strcmp(o->id, id) == 0) return o;
  return NULL;
}

static owned_t *find(const dx_sessions_t *s, const char *id) {
  return find_hashed(s, id, id_hash(id));
}

/* Index o (its hash set) and put it at the head of the owned list. The index doubles while
** it holds more than two sessions per bucket; failing to grow only makes chains longer.
** -1 (nothing changed) when there is no index at all and none can be made. */
static int link_owned(dx_sessions_t *s, owned_t *o) {
  size_t i;
  if ((size_t)s->n_owned >= s->index_cap * 2) {
    size_t cap = s->index_cap ? s->index_cap * 2 : 16;
    owned_t **nb = calloc(cap, sizeof *nb), *e, *next;
    if (nb) {
      for (i = 0; i < s->index_cap; i++)
        for (e = s->index[i]; e; e = next) {
          next = e->hnext;
          e->hnext = nb[e->hash & (cap - 1)];
          nb[e->hash & (cap - 1)] = e;
        }
      free(s->index);
      s->index = nb;
      s->index_cap = cap;
    }
  }
  if (!s->index_cap) return -1;
  i = o->hash & (s->index_cap - 1);
  o->hnext = s->index[i];
  s->index[i] = o;
  o->prev = NULL;
  o->next = s->owned;
  if (s->owned) s->owned->prev = o;
  s->owned = o;
  s->n_owned++;
  return 0;
}

static void unlink_owned(dx_sessions_t *s, owned_t *o) {
  owned_t **pp;
  for (pp = &s->index[o->hash & (s->index_cap - 1)]; *pp; pp = &(*pp)->hnext)
    if (*pp == o) {
      *pp = o->hnext;
      break;
    }
  if (o->prev) o->prev->next = o->next;
  else s->owned = o->next;
  if (o->next) o->next->prev = o->prev;
  s->n_owned--;
}

static released_t **find_released(dx_sessions_t *s, const char *id) {
  released_t **pp;
  for (pp = &s->released; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->id, id) == 0) return pp;
  return NULL;
}

static void forget_released(released_t **pp) {
  released_t *r = *pp;
  *pp = r->next;
  free(r->id);
  free(r);
}

/* A release of `id` is on its way to the store (at == 0) or was applied at store time `at`. */
static void note_released(dx_sessions_t *s, const char *id, int64_t at) {
  released_t **pp = find_released(s, id), *r;
  if (pp) {
    (*pp)->at = at;
    return;
  }
  if (!(r = calloc(1, sizeof *r)) || !(r->id = dx__strdup(id))) {
    free(r);
    return;
  }
  r->at = at;
  r->next = s->released;
  s->released = r;
}

/* Forget a session and tell the app why. */
static void drop(dx_sessions_t *s, const char *id, const char *reason) {
  owned_t *o = find(s, id);
  if (o) {
    unlink_owned(s, o);
    dx__metric_set(s->metrics, DXM_SESS_OWNED, DXM_NOLABELS, s->n_owned);
    dx__metric_add(s->metrics, DXM_SESS_RELEASES, DXM_LABELS(reason), 1);
    dx__log(DX_LOG_INFO, "session released", "session_id=%s worker_id=%s reason=%s "
            "idle_ms=%" PRId64, o->id, s->worker_id, reason, dx__now_ms() - o->last_activity);
    record(s, o->id, "released", reason, NULL);
    if (s->host->version >= 3 && s->host->session_released_by)
      s->host->session_released_by(s->host_ud, o->id, reason, s->worker_id);
    else if (s->host->version >= 2 && s->host->session_released)
      s->host->session_released(s->host_ud, o->id, reason);
    free(o->id);
    free(o);
  }
}

int dx__sessions_count(const dx_sessions_t *s) { return s ? s->n_owned : 0; }

void dx__sessions_set_metrics(dx_sessions_t *s, dx_metrics_t *m) {
  if (s) s->metrics = m;
}

/* The lease as far as we know it: our own renewals and fetches, or the store thread's. */
static int64_t confirmed_until(const dx_sessions_t *s, const owned_t *o) {
  int64_t st = dx__store_session_confirmed(s->store, o->id);
  return st > o->lease_until ? st : o->lease_until;
}

/* A hold with activities running here whose lease ran out unrenewed: they must stop (a
** stall). Holds with nothing running are left to the renewals, which tell "idle" from "lost".
** "Ran out" is a safety margin early: another worker may claim the session the moment the
** store's lease ends, so a check that passes must leave the step it guards time to finish.
** Cheap while our own view is live (every loop iteration asks): the store thread's renewals
** are looked up only once our view says the lease ran out. */
static int lapsed(const dx_sessions_t *s, const owned_t *o, int64_t now) {
  return o->running > 0 && !o->idle && now >= o->lease_until - s->margin &&
         now >= confirmed_until(s, o) - s->margin;
}

int dx__sessions_fenced_at(const dx_sessions_t *s, const char *sid, uint64_t gen, int64_t now) {
  const owned_t *o;
  if (!s) return 0;
  if (!(o = find(s, sid))) return 1;
  return o->gen != gen || lapsed(s, o, now);
}

int dx__sessions_fenced(const dx_sessions_t *s, const char *sid, uint64_t gen) {
  return s ? dx__sessions_fenced_at(s, sid, gen, dx__now_ms()) : 0;
}

/* After every loop iteration: a hold with running activities whose lease lapsed unrenewed is
** lost (a stall): before the activities' next timers fire. */
static void on_check(uv_check_t *h) {
  dx_sessions_t *s = h->data;
  int64_t now = dx__now_ms();
  owned_t *o, *next;
  if (s->shutting_down || s->paused) return;
  for (o = s->owned; o; o = next) {
    next = o->next;
    if (!lapsed(s, o, now)) continue;
    dx__log(DX_LOG_WARN, "session lease lapsed unrenewed (this process stalled?): giving it up",
            "session_id=%s worker_id=%s lapsed_ms=%" PRId64 " margin_ms=%" PRId64, o->id,
            s->worker_id, now - confirmed_until(s, o), s->margin);
    drop(s, o->id, "lost");
  }
}

uint64_t dx__sessions_on_fetch(dx_sessions_t *s, const char *sid, int claimed,
                               const char *previous_owner, int64_t at_ms) {
  return dx__sessions_on_fetch_at(s, sid, claimed, previous_owner, at_ms, dx__now_ms());
}

uint64_t dx__sessions_on_fetch_at(dx_sessions_t *s, const char *sid, int claimed,
                                  const char *previous_owner, int64_t at_ms, int64_t now) {
  int64_t until = at_ms + s->opts->session_lock_timeout_ms;
  owned_t *o = find(s, sid);
  released_t **rp = find_released(s, sid), **pp;
  if (!o && !claimed && rp && ((*rp)->at == 0 || at_ms <= (*rp)->at)) {
    /* fetched as ours before our release reached the store: not ours any more (generation
    ** 0 is no hold, so the activity is fenced and handed back for the next owner) */
    dx__log(DX_LOG_INFO, "session item fetched before this worker released the session: "
            "handed back", "session_id=%s worker_id=%s", sid, s->worker_id);
    return 0;
  }
  /* a claim, or a fetch after the release was applied: the release is behind us (fetches are
  ** delivered in the order the store made them) */
  for (pp = &s->released; *pp;)
    if ((*pp)->at != 0 && ((*pp)->at < at_ms || (claimed && strcmp((*pp)->id, sid) == 0)))
      forget_released(pp);
    else
      pp = &(*pp)->next;
  if (o && claimed) {
    /* the store made us owner anew (we had lost it meanwhile): a new hold */
    drop(s, sid, "lost");
    o = NULL;
  }
  if (!o) {
    const char *how = "new";
    o = calloc(1, sizeof *o);
    if (!o || !(o->id = dx__strdup(sid)) || (o->hash = id_hash(sid), link_owned(s, o))) {
      if (o) free(o->id);
      free(o);
      return 0; /* out of memory: no hold (fenced, handed back) */
    }
    o->gen = ++s->next_gen;
    o->renewals_before = s->renewals;
    /* The store already named us (claimed == 0), or we were the previous owner. */
    if (!claimed || (previous_owner && strcmp(previous_owner, s->worker_id) == 0)) how = "reclaim";
    dx__metric_set(s->metrics, DXM_SESS_OWNED, DXM_NOLABELS, s->n_owned);
    dx__metric_add(s->metrics, DXM_SESS_CLAIMS, DXM_LABELS(how), 1);
    if (claimed && previous_owner && *previous_owner && strcmp(previous_owner, s->worker_id))
      dx__metric_add(s->metrics, DXM_SESS_MOVES, DXM_NOLABELS, 1); /* it ran elsewhere before */
    dx__log(DX_LOG_INFO, "session claimed", "session_id=%s worker_id=%s how=%s "
            "previous_owner=%s", sid, s->worker_id, how,
            previous_owner && *previous_owner ? previous_owner : "none");
    if (previous_owner && *previous_owner && strcmp(previous_owner, s->worker_id) != 0)
      record(s, sid, "moved", how, previous_owner);
    else
      record(s, sid, "claimed", how, previous_owner && *previous_owner ? previous_owner : NULL);
    if (s->host->version >= 3 && s->host->session_claimed_by)
      s->host->session_claimed_by(s->host_ud, sid, how, s->worker_id);
    else if (s->host->version >= 2 && s->host->session_claimed)
      s->host->session_claimed(s->host_ud, sid, how);
  }
  o->last_activity = now;
  /* the fetch's store time, not ours: a stall between fetch and delivery must show */
  if (until > o->lease_until) o->lease_until = until;
  o->idle = 0;
  o->running++;
  return o->gen;
}

static void close_now(dx_sessions_t *s, const char *sid, const char *reason);

void dx__sessions_on_done(dx_sessions_t *s, const char *sid, uint64_t gen) {
  dx__sessions_settle(s, sid, gen, 0);
}

int dx__sessions_settle(dx_sessions_t *s, const char *sid, uint64_t gen, int check) {
  owned_t *o = find(s, sid);
  int64_t now;
  int fenced;
  if (!o || o->gen != gen) return 1;
  now = dx__now_ms();
  fenced = check && lapsed(s, o, now); /* before running drops: lapsed asks running > 0 */
  if (o->running > 0) o->running--;
  o->last_activity = now;
  if (o->closing && o->running == 0) close_now(s, sid, o->closing);
  return fenced;
}

static void maybe_finish(dx_sessions_t *s);

/* {===== store operations =====} */

static void release_done(dx_store_op_t *op) {
  dx_sessions_t *s = op->ud;
  if (op->rc != 0)
    dx__log(DX_LOG_WARN, "session release failed", "error=\"%s\"", op->err.msg);
  if (op->session_id) {
    s->releases_busy--;
    note_released(s, op->session_id, op->at_ms);
  }
  free((char *)op->session_id);
  free(op);
  if (s->shutting_down) maybe_finish(s); /* a stop was waiting for this release; may free s */
}

/* Release one session (or all when sid is NULL) in the store. */
static void submit_release(dx_sessions_t *s, const char *sid, dx_store_op_cb done) {
  dx_store_op_t *op = calloc(1, sizeof *op);
  if (!op) return;
  op->kind = DX_OP_RELEASE_SESSIONS;
  op->worker_id = s->worker_id;
  op->session_id = sid ? dx__strdup(sid) : NULL;
  op->done = done;
  op->ud = s;
  if (op->session_id) {
    s->releases_busy++;
    note_released(s, sid, 0);
  }
  dx__store_submit(s->store, op);
}

/* Release in the store, then tell the app. */
static void close_now(dx_sessions_t *s, const char *sid, const char *reason) {
  submit_release(s, sid, release_done);
  if (find(s, sid)) drop(s, sid, reason);
}

/* Release sid with `reason` (a literal) once its activities running here have finished: until
** then we keep the lease, so no other worker runs the session meanwhile. */
static void release_when_idle(dx_sessions_t *s, const char *sid, const char *reason) {
  owned_t *o = find(s, sid);
  dx__log(DX_LOG_INFO, "session release requested", "session_id=%s worker_id=%s reason=%s "
          "running=%d", sid, s->worker_id, reason, o ? o->running : 0);
  if (o && o->running > 0) { /* another instance's activity on it still runs here */
    o->closing = reason;
    return;
  }
  close_now(s, sid, reason);
}

void dx__sessions_close(dx_sessions_t *s, const char *sid) {
  release_when_idle(s, sid, "closed");
}

static void decline_done(dx_store_op_t *op) {
  free((char *)op->session_id);
  free(op);
}

void dx__sessions_hand_on(dx_sessions_t *s, const char *sid, int64_t for_ms) {
  dx_store_op_t *op = calloc(1, sizeof *op);
  /* first: this worker's fetches skip the session, so it does not take it straight back */
  if (op && (op->session_id = dx__strdup(sid))) {
    op->kind = DX_OP_DECLINE_SESSION;
    op->delay_ms = for_ms;
    op->done = decline_done;
    op->ud = s;
    dx__store_submit(s->store, op);
  } else {
    free(op);
  }
  release_when_idle(s, sid, "upgrade");
}

int dx__sessions_abort(dx_sessions_t *s, const char *sid, uint64_t gen, const char *reason,
                       dx_error_t *err) {
  owned_t *o = find(s, sid);
  if (!o || o->gen != gen)
    return dx_error_set(err, DX_ESTATE, "session '%s' is no longer held by this worker ('%s'): "
                        "nothing to abort", sid, s->worker_id);
  dx__log(DX_LOG_WARN, "session aborted by an activity", "session_id=%s worker_id=%s "
          "reason=\"%s\"", sid, s->worker_id, reason ? reason : "");
  submit_release(s, sid, release_done);
  drop(s, sid, "aborted");
  return DX_OK;
}

static int listed(char **ids, size_t n, const char *id) {
  size_t i;
  for (i = 0; i < n; i++)
    if (strcmp(ids[i], id) == 0) return 1;
  return 0;
}

static void free_renew_ids(dx_store_op_t *op) {
  size_t i;
  for (i = 0; i < op->n_ids; i++) free(op->ids[i]);
  for (i = 0; i < op->n_ended; i++) free(op->ended[i]);
  free(op->ids);
  free(op->ended);
  op->ids = op->ended = NULL;
  op->n_ids = op->n_ended = 0;
}

/* After a renewal batch: update leases; unpin idle sessions whose lease lapsed; report lost. */
static void renew_done(dx_store_op_t *op) {
  dx_sessions_t *s = op->ud;
  int64_t now = dx__now_ms();
  owned_t *o, *next;
  s->renew_busy = 0;
  if (op->rc != 0) {
    dx__log(DX_LOG_WARN, "session renewal failed", "worker_id=%s error=\"%s\"", s->worker_id,
            op->err.msg);
  } else {
    dx__log(DX_LOG_DEBUG, "session leases renewed", "worker_id=%s count=%zu owned=%d",
            s->worker_id, op->n_ids, s->n_owned);
    for (o = s->owned; o; o = next) {
      next = o->next;
      if (listed(op->ids, op->n_ids, o->id)) {
        /* from the store's clock when it renewed: time the answer took is not lease */
        o->lease_until = op->at_ms + s->opts->session_lock_timeout_ms;
        if (o->running == 0 && listed(op->ended, op->n_ended, o->id)) {
          submit_release(s, o->id, release_done);
          drop(s, o->id, "ended");
        }
        continue;
      }
      /* a hold begun while this renewal was out: a held round hands a claim over before its
      ** commit, so the renewal may have been applied before the claim in the same transaction
      ** (not in its list, yet not lost); the next renewal tells */
      if (o->renewals_before >= s->renewals) continue;
      if (o->idle || (s->opts->session_idle_timeout_ms > 0 && o->running == 0 &&
                      now - o->last_activity >= s->opts->session_idle_timeout_ms)) {
        if (!o->idle)
          dx__log(DX_LOG_DEBUG, "session idle: lease no longer renewed", "session_id=%s "
                  "worker_id=%s", o->id, s->worker_id);
        o->idle = 1;
        if (now >= o->lease_until) drop(s, o->id, "idle");
      } else {
        /* Active here, yet the store did not renew it: its lease lapsed (another worker
        ** may have claimed it). Our in-memory state for it can no longer be trusted. */
        drop(s, o->id, "lost");
      }
    }
  }
  free_renew_ids(op);
}

static void on_renew_timer(uv_timer_t *t) {
  dx_sessions_t *s = t->data;
  /* the first tick renews what the store says we own: a worker restarted with the same id
  ** keeps the dead process's leases instead of letting them lapse before it renews */
  if (s->renew_busy || s->shutting_down || s->paused || (!s->owned && s->renewed_once)) return;
  s->renewed_once = 1;
  memset(&s->renew_op, 0, sizeof s->renew_op);
  s->renew_op.kind = DX_OP_RENEW_SESSIONS;
  s->renew_op.worker_id = s->worker_id;
  s->renew_op.delay_ms = s->opts->session_lock_timeout_ms;
  s->renew_op.idle_ms = s->opts->session_idle_timeout_ms;
  s->renew_op.done = renew_done;
  s->renew_op.ud = s;
  s->renew_busy = 1;
  s->renewals++;
  dx__store_submit(s->store, &s->renew_op);
}

static void cleanup_done(dx_store_op_t *op) {
  dx_sessions_t *s = op->ud;
  s->cleanup_busy = 0;
  if (op->rc != 0)
    dx__log(DX_LOG_WARN, "session cleanup failed", "error=\"%s\"", op->err.msg);
  else
    dx__log(op->count ? DX_LOG_INFO : DX_LOG_DEBUG, "orphaned sessions cleaned up",
            "worker_id=%s deleted=%" PRIu64, s->worker_id, op->count);
  if (s->shutting_down) maybe_finish(s); /* a stop was waiting for this sweep; may free s */
}

static void on_cleanup_timer(uv_timer_t *t) {
  dx_sessions_t *s = t->data;
  if (s->cleanup_busy || s->shutting_down || s->paused) return;
  memset(&s->cleanup_op, 0, sizeof s->cleanup_op);
  s->cleanup_op.kind = DX_OP_CLEANUP_SESSIONS;
  s->cleanup_op.done = cleanup_done;
  s->cleanup_op.ud = s;
  s->cleanup_busy = 1;
  dx__store_submit(s->store, &s->cleanup_op);
}

/* Renew at the lease minus the buffer (duroxide's rule), but often enough to notice idle
** unpins close to idle timeout + lease. */
int64_t dx__sessions_renew_every(const dx_options_t *o) {
  int64_t r = dx__renewal_interval(o->session_lock_timeout_ms,
                                   o->session_lock_renewal_buffer_ms);
  return r < 50 ? 50 : r;
}

int64_t dx__sessions_margin(const dx_options_t *o) {
  int64_t lease = o->session_lock_timeout_ms;
  int64_t m = lease / 10, slack = lease - dx__sessions_renew_every(o);
  /* well inside the renewal's slack: an owner renewing on time never fences, nor one whose
  ** store thread renews for its blocked loop (halfway through the slack) */
  if (m > slack / 4) m = slack / 4;
  if (m > DX_SESSION_FENCE_MARGIN_MAX_MS) m = DX_SESSION_FENCE_MARGIN_MAX_MS;
  return m > 0 ? m : 0;
}

dx_sessions_t *dx__sessions_new(uv_loop_t *loop, dx_store_t *store, const dx_options_t *opts,
                                const char *worker_id, const dx_host_methods_t *host,
                                void *host_ud) {
  dx_sessions_t *s = calloc(1, sizeof *s);
  int64_t every;
  if (!s) return NULL;
  s->loop = loop;
  s->store = store;
  s->opts = opts;
  s->worker_id = worker_id;
  s->host = host;
  s->host_ud = host_ud;
  every = dx__sessions_renew_every(opts);
  s->margin = dx__sessions_margin(opts);
  uv_timer_init(loop, &s->renew_timer);
  uv_timer_init(loop, &s->cleanup_timer);
  uv_check_init(loop, &s->check);
  s->renew_timer.data = s->cleanup_timer.data = s->check.data = s;
  uv_check_start(&s->check, on_check);
  uv_unref((uv_handle_t *)&s->check);
  uv_timer_start(&s->renew_timer, on_renew_timer, 0, (uint64_t)every); /* first: at start */
  uv_timer_start(&s->cleanup_timer, on_cleanup_timer,
                 (uint64_t)opts->session_cleanup_interval_ms,
                 (uint64_t)opts->session_cleanup_interval_ms);
  /* Timers must not keep an otherwise idle loop alive. */
  uv_unref((uv_handle_t *)&s->renew_timer);
  uv_unref((uv_handle_t *)&s->cleanup_timer);
  return s;
}

/* {===== shutdown =====} */

static void maybe_finish(dx_sessions_t *s) {
  if (s->closing_handles > 0 || s->renew_busy || s->cleanup_busy || s->release_op.done ||
      s->releases_busy > 0)
    return;
  if (s->shutdown_cb) s->shutdown_cb(s->shutdown_ud);
  while (s->released) forget_released(&s->released);
  free(s->index);
  free(s);
}

static void handle_closed(uv_handle_t *h) {
  dx_sessions_t *s = h->data;
  s->closing_handles--;
  maybe_finish(s);
}

static void shutdown_release_done(dx_store_op_t *op) {
  dx_sessions_t *s = op->ud;
  if (op->rc != 0)
    dx__log(DX_LOG_WARN, "session release at shutdown failed", "error=\"%s\"", op->err.msg);
  else if (op->count)
    dx__log(DX_LOG_INFO, "sessions released at shutdown", "worker_id=%s count=%" PRIu64,
            s->worker_id, op->count);
  s->release_op.done = NULL;
  maybe_finish(s);
}

static void wait_renew_then_finish(dx_store_op_t *op) {
  /* A renewal in flight at shutdown: drop its result, then finish. */
  dx_sessions_t *s = op->ud;
  s->renew_busy = 0;
  free_renew_ids(op);
  maybe_finish(s);
}

void dx__sessions_shutdown(dx_sessions_t *s, void (*cb)(void *ud), void *ud) {
  s->shutting_down = 1;
  s->shutdown_cb = cb;
  s->shutdown_ud = ud;
  if (s->renew_busy) s->renew_op.done = wait_renew_then_finish;
  while (s->owned) drop(s, s->owned->id, "shutdown");
  memset(&s->release_op, 0, sizeof s->release_op);
  s->release_op.kind = DX_OP_RELEASE_SESSIONS;
  s->release_op.worker_id = s->worker_id;
  s->release_op.done = shutdown_release_done;
  s->release_op.ud = s;
  dx__store_submit(s->store, &s->release_op);
  s->closing_handles = 3;
  uv_close((uv_handle_t *)&s->renew_timer, handle_closed);
  uv_close((uv_handle_t *)&s->cleanup_timer, handle_closed);
  uv_close((uv_handle_t *)&s->check, handle_closed);
}

/* {===== test support: renew now, crash =====} */

void dx__sessions_renew_now(dx_sessions_t *s) {
  if (s) on_renew_timer(&s->renew_timer);
}

void dx__sessions_pause(dx_sessions_t *s, int on) {
  if (!s) return;
  s->paused = on;
  if (on) return;
  on_check(&s->check); /* what lapsed during the stall is lost, before anything else runs */
  on_renew_timer(&s->renew_timer);
}

static void cleanup_then_finish(dx_store_op_t *op) {
  dx_sessions_t *s = op->ud;
  s->cleanup_busy = 0;
  maybe_finish(s);
}

void dx__sessions_crash(dx_sessions_t *s, void (*cb)(void *ud), void *ud) {
  s->shutting_down = 1;
  s->shutdown_cb = cb;
  s->shutdown_ud = ud;
  while (s->owned) { /* forget without hooks or releases: the leases simply lapse */
    owned_t *o = s->owned;
    s->owned = o->next;
    free(o->id);
    free(o);
  }
  s->n_owned = 0;
  free(s->index);
  s->index = NULL;
  s->index_cap = 0;
  dx__metric_set(s->metrics, DXM_SESS_OWNED, DXM_NOLABELS, 0);
  if (s->renew_busy) s->renew_op.done = wait_renew_then_finish;
  if (s->cleanup_busy) s->cleanup_op.done = cleanup_then_finish;
  s->closing_handles = 3;
  uv_close((uv_handle_t *)&s->renew_timer, handle_closed);
  uv_close((uv_handle_t *)&s->cleanup_timer, handle_closed);
  uv_close((uv_handle_t *)&s->check, handle_closed);
}
