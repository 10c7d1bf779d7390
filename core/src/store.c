/*
** store.c -- the store thread (see store.h).
**
** Why a thread: a durable commit waits for fsync, which must not stall Lua work on the loop.
** Why one transaction per cycle: a durable commit costs a flush (and a round trip on a
** database); batching every ack and fetch of a cycle into one commit turns N flushes into one
** (group commit), which is where throughput comes from.
** When a batch fails: DX_ERETRY (deadlock, serialization failure, lost connection) retries it
** whole, a bounded number of times with backoff; any other failure of the whole batch applies
** each operation in a transaction of its own, so one bad operation fails alone
** (cycle_retrying, cycle_isolate; the contract is in duroxide/provider.h). Cycles that still
** fail back off (10 ms doubling to 1 s); a store that begin or commit finds damaged is
** reported once to the loop (cfg.on_fatal).
** Why this thread renews locks: turns and activity code run on the loop one after another,
** so a long turn (or an activity that computes without yielding) blocks the loop and every
** timer on it, while the other items of its batch wait their turn. The store thread holds
** every fetched item until its settlement is applied and renews its lock on the monotonic
** clock: orchestration locks always, activity locks only when the loop's own renewal (which
** also detects cancellation) is late. So neither the long item nor the innocent ones queued
** behind it lose their lock.
*/
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "store.h"
#include "util.h"

/* A session this worker's fetches skip until `until` (DX_OP_DECLINE_SESSION). */
typedef struct declined_s {
  char *sid;
  int64_t until;
  struct declined_s *next;
} declined_t;

/* An item handed to the loop whose settlement (ack/abandon) is not applied yet. */
typedef struct held_s {
  char *instance;      /* orchestration items; NULL for work items */
  uint64_t token;
  uint64_t renew_at;   /* monotonic ms */
  uint64_t give_up_at; /* monotonic ms: a turn never takes this long (the turn time limit and
                          the budget stop code), nor does the loop go this long without
                          renewing an activity */
  int renewing;        /* renewed in the open transaction (undone if it is not kept) */
  struct held_s *next, *prev; /* s->held, in both directions */
  struct held_s *hnext;       /* s->hidx bucket chain */
} held_t;

typedef struct fetched_node_s {
  dx_store_fetched_t f;
  struct fetched_node_s *next;
} fetched_node_t;

struct dx_store_s {
  uv_loop_t *loop;
  dx_store_cfg_t cfg;
  uv_thread_t thread;
  uv_mutex_t mu;
  uv_cond_t cv;
  uv_async_t async;
  int thread_started;
  /* guarded by mu */
  dx_store_op_t *pending, *pending_tail;
  dx_store_op_t *done, *done_tail;
  fetched_node_t *fetched, *fetched_tail;
  int budget_orch, budget_work;
  int fetching;
  int stopping;
  int paused;         /* a simulated stall: no cycles */
  int poked;
  int woken;          /* another process may have committed work: check before sleeping */
  int busy;           /* the thread holds ops not yet on the done list */
  uint64_t commits, cycles;
  held_t *held;       /* store thread only */
  held_t **hidx;      /* store thread only: held by token (each settled op looks one up) */
  size_t hcap;
  size_t n_held;      /* store thread only: entries in held */
  int64_t renew_every_ms, work_renew_every_ms;
  int64_t orch_hold_ms; /* renew a turn's lock this long at most: past the turn time limit */
  uint64_t sess_due;  /* monotonic ms of the fallback session lease renewal (sessions only) */
  int64_t sess_every_ms;
  int sess_renewing;  /* the open transaction renewed the session leases */
  char **sess_new;    /* store thread: the ids it renewed in the open transaction */
  size_t n_sess_new;
  int64_t sess_new_until;
  char **sess_conf;   /* guarded by mu: the ids the last kept fallback renewal extended, */
  size_t n_sess_conf; /* to sess_conf_until (so the loop can tell a stall from a busy loop) */
  int64_t sess_conf_until;
  uint64_t depths_due; /* monotonic ms of the next queue depth poll (with metrics) */
  int64_t backoff_ms;  /* guarded by mu: after a failed cycle 10 ms doubling to 1 s, else 0 */
  int cycle_failed;    /* store thread only: the last cycle failed */
  int fatal;           /* guarded by mu: 1 = fatal_err is set, 2 = reported to the loop */
  int fatal_seen;      /* store thread only: a cycle found the store unusable */
  dx_error_t fatal_err;
  declined_t *declined;       /* store thread only */
  dx_session_cfg_t sess_cfg;  /* store thread only: cfg.sessions plus the declined ids */
  const char **declined_v;
  size_t declined_cap;
  void (*close_cb)(void *);
  void *close_ud;
  uint64_t cap_gen;    /* store thread only: the host capabilities generation applied */
  int filter_set;      /* store thread only: the provider has this worker's filter */
};

static int64_t now_ms(dx_store_t *s) {
  return s->cfg.clock ? s->cfg.clock(s->cfg.clock_ud) : dx__now_ms();
}

/* {===== store thread =====} */

#define HOLD_MAX_MS (10 * 60 * 1000)

static uint64_t mono_ms(void) { return uv_hrtime() / 1000000u; }

static held_t **bucket(dx_store_t *s, uint64_t token) {
  return &s->hidx[(token * UINT64_C(0x9E3779B97F4A7C15)) >> 32 & (s->hcap - 1)];
}

/* Room for one more entry in the token index (doubling; false when out of memory). */
static int hidx_room(dx_store_t *s) {
  held_t **nv, *h;
  size_t cap = s->hcap ? s->hcap * 2 : 64;
  if (s->n_held < s->hcap) return 1;
  if (!(nv = calloc(cap, sizeof *nv))) return 0;
  free(s->hidx);
  s->hidx = nv;
  s->hcap = cap;
  for (h = s->held; h; h = h->next) {
    held_t **b = bucket(s, h->token);
    h->hnext = *b;
    *b = h;
  }
  return 1;
}

/* instance: an orchestration item's; NULL for a work item. */
static void hold(dx_store_t *s, const char *instance, uint64_t token) {
  held_t *h = calloc(1, sizeof *h), **b;
  if (!h || (instance && !(h->instance = dx__strdup(instance))) || !hidx_room(s)) {
    if (h) free(h->instance);
    free(h); /* not renewed: the lock may lapse, and the item then simply comes back */
    return;
  }
  h->token = token;
  h->renew_at = mono_ms() + (uint64_t)(instance ? s->renew_every_ms : s->work_renew_every_ms);
  /* Bounded, so an item the loop dropped without a settlement (out of memory) is not kept
  ** locked for ever: its lock then lapses and it comes back. */
  h->give_up_at = mono_ms() + (uint64_t)(instance ? s->orch_hold_ms : HOLD_MAX_MS);
  h->next = s->held;
  if (s->held) s->held->prev = h;
  s->held = h;
  b = bucket(s, token);
  h->hnext = *b;
  *b = h;
  s->n_held++;
}

static held_t *find_held(dx_store_t *s, uint64_t token) {
  held_t *h;
  if (!s->hcap) return NULL;
  for (h = *bucket(s, token); h; h = h->hnext)
    if (h->token == token) return h;
  return NULL;
}

/* The loop renewed this activity lock itself: no fallback renewal needed until it is late. */
static void touch_held(dx_store_t *s, uint64_t token) {
  held_t *h = find_held(s, token);
  if (!h) return;
  h->renew_at = mono_ms() + (uint64_t)s->work_renew_every_ms;
  h->give_up_at = mono_ms() + HOLD_MAX_MS;
}

static void unhold(dx_store_t *s, uint64_t token) {
  held_t **pp, *dead;
  if (!s->hcap) return;
  for (pp = bucket(s, token); *pp && (*pp)->token != token; pp = &(*pp)->hnext) {}
  if (!(dead = *pp)) return;
  *pp = dead->hnext;
  if (dead->prev) dead->prev->next = dead->next;
  else s->held = dead->next;
  if (dead->next) dead->next->prev = dead->prev;
  s->n_held--;
  free(dead->instance);
  free(dead);
}

static void free_held(dx_store_t *s) {
  while (s->held) unhold(s, s->held->token);
  free(s->hidx);
  s->hidx = NULL;
  s->hcap = s->n_held = 0;
}

static void free_ids(char **v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) free(v[i]);
  free(v);
}

/* renew_session_lock callback of the fallback renewal: note each renewed id. */
static int note_renewed(void *ud, const dx_session_info_t *si) {
  dx_store_t *s = ud;
  char **v = realloc(s->sess_new, (s->n_sess_new + 1) * sizeof *v);
  if (!v) return 1;
  s->sess_new = v;
  if ((v[s->n_sess_new] = dx__strdup(si->session_id)) != NULL) s->n_sess_new++;
  return 0;
}

/* Items fetched but never delivered to the loop: nobody will settle them. */
static void unhold_fetched(dx_store_t *s, const dx_store_fetched_t *f) {
  size_t i;
  for (i = 0; i < f->n_orch; i++) unhold(s, f->orch[i]->lock_token);
  for (i = 0; i < f->n_work; i++) unhold(s, f->work[i].lock_token);
}

/* Earliest renewal due (monotonic ms), UINT64_MAX when nothing is held. */
static uint64_t next_renewal(dx_store_t *s) {
  uint64_t due = s->cfg.sessions ? s->sess_due : UINT64_MAX;
  held_t *h;
  for (h = s->held; h; h = h->next)
    if (h->renew_at < due) due = h->renew_at;
  return due;
}

/* Inside a cycle's transaction: extend the locks that are due. A lost lock (expired before we
** got here, or taken over) is forgotten; the turn's commit will then be refused as before. */
static void renew_held(dx_store_t *s, int64_t now) {
  dx_provider_t *p = s->cfg.provider;
  uint64_t mono = mono_ms();
  held_t *h, *next;
  int rc;
  if (s->cfg.sessions && mono >= s->sess_due) {
    /* The loop's session renewal is late (the loop is blocked): renew our leases here. */
    dx_error_t err;
    const dx_session_cfg_t *sc = s->cfg.sessions;
    free_ids(s->sess_new, s->n_sess_new);
    s->sess_new = NULL;
    s->n_sess_new = 0;
    if (p->methods->renew_session_lock(p, now, sc->worker_id, sc->session_lock_ms,
                                       s->cfg.session_idle_ms, note_renewed, s, NULL,
                                       &err) != 0) {
      dx__log(DX_LOG_WARN, "session lease renewal failed", "error=\"%s\"", err.msg);
    } else {
      s->sess_renewing = 1;
      s->sess_new_until = now + sc->session_lock_ms;
    }
    s->sess_due = mono + (uint64_t)s->sess_every_ms;
  }
  for (h = s->held; h; h = next) {
    dx_error_t err;
    next = h->next;
    if (h->renew_at > mono) continue;
    if (mono >= h->give_up_at) {
      dx__log(DX_LOG_WARN, "lock no longer renewed: its item was never settled",
              "instance=%s token=%016llx", h->instance ? h->instance : "(activity)",
              (unsigned long long)h->token);
      unhold(s, h->token);
      continue;
    }
    rc = h->instance ? p->methods->renew_orchestration_item_lock(p, now, h->instance, h->token,
                                                                 s->cfg.orch_lock_ms, &err)
                     : p->methods->renew_work_item_lock(p, now, h->token, s->cfg.work_lock_ms,
                                                        &err);
    if (rc == DX_ERETRY) continue; /* the store could not answer: still due, the batch retries */
    if (rc != 0) {
      /* Lost (expired before we got here, taken over, or the activity was cancelled): the
      ** settlement will be refused, or the loop's renewal reports the cancellation. */
      if (h->instance)
        dx__log(DX_LOG_WARN, "orchestration lock lost while its turn was pending",
                "instance=%s error=\"%s\"", h->instance, err.msg);
      unhold(s, h->token);
      continue;
    }
    h->renew_at = mono + (uint64_t)(h->instance ? s->renew_every_ms : s->work_renew_every_ms);
    h->renewing = 1;
  }
}

/* The transaction that renew_held ran in ended: kept (committed), or not (rolled back, as
** when it is retried on DX_ERETRY), in which case its renewals are due again at once. */
static void renewals_end(dx_store_t *s, int kept) {
  held_t *h;
  for (h = s->held; h; h = h->next) {
    if (h->renewing && !kept) h->renew_at = 0;
    h->renewing = 0;
  }
  if (s->sess_renewing && !kept) s->sess_due = 0;
  if (s->sess_renewing && kept) { /* publish: the loop's fence must not count these lapsed */
    char **old;
    size_t n_old;
    uv_mutex_lock(&s->mu);
    old = s->sess_conf;
    n_old = s->n_sess_conf;
    s->sess_conf = s->sess_new;
    s->n_sess_conf = s->n_sess_new;
    s->sess_conf_until = s->sess_new_until;
    uv_mutex_unlock(&s->mu);
    free_ids(old, n_old);
    s->sess_new = NULL;
    s->n_sess_new = 0;
  }
  s->sess_renewing = 0;
}

int64_t dx__store_session_confirmed(dx_store_t *s, const char *sid) {
  int64_t until = 0;
  size_t i;
  uv_mutex_lock(&s->mu);
  for (i = 0; i < s->n_sess_conf; i++)
    if (strcmp(s->sess_conf[i], sid) == 0) until = s->sess_conf_until;
  uv_mutex_unlock(&s->mu);
  return until;
}

/* renew_session_lock callback: remember each renewed session id on the op. */
static int collect_id(void *ud, const dx_session_info_t *si) {
  dx_store_op_t *op = ud;
  char **v = realloc(op->ids, (op->n_ids + 1) * sizeof *v);
  if (!v) return 1;
  op->ids = v;
  if ((v[op->n_ids] = dx__strdup(si->session_id)) != NULL) op->n_ids++;
  if (si->ended) { /* its instances all ended: the owner releases it */
    if (!(v = realloc(op->ended, (op->n_ended + 1) * sizeof *v))) return 1;
    op->ended = v;
    if ((v[op->n_ended] = dx__strdup(si->session_id)) != NULL) op->n_ended++;
  }
  return 0;
}

/* Skip session sid in this worker's fetches until `until` (a later decline replaces it). */
static int decline(dx_store_t *s, const char *sid, int64_t until, dx_error_t *err) {
  declined_t *d;
  for (d = s->declined; d; d = d->next)
    if (strcmp(d->sid, sid) == 0) break;
  if (!d) {
    if (!(d = calloc(1, sizeof *d)) || !(d->sid = dx__strdup(sid))) {
      free(d);
      return dx_error_set(err, DX_ENOMEM, "out of memory declining session '%s'", sid);
    }
    d->next = s->declined;
    s->declined = d;
  }
  d->until = until;
  return 0;
}

static void free_declined(dx_store_t *s) {
  while (s->declined) {
    declined_t *d = s->declined;
    s->declined = d->next;
    free(d->sid);
    free(d);
  }
  free(s->declined_v);
}

/* The session side of this cycle's fetches: cfg.sessions with the sessions declined now
** (expired declines are dropped here). NULL: no session work. */
static const dx_session_cfg_t *fetch_sessions(dx_store_t *s, int64_t now) {
  declined_t **pp = &s->declined, *d;
  size_t n = 0;
  if (!s->cfg.sessions) return NULL;
  s->sess_cfg = *s->cfg.sessions;
  while ((d = *pp)) {
    if (d->until <= now) {
      *pp = d->next;
      free(d->sid);
      free(d);
      continue;
    }
    if (n == s->declined_cap) {
      size_t cap = s->declined_cap ? 2 * s->declined_cap : 8;
      const char **v = realloc(s->declined_v, cap * sizeof *v);
      if (!v) break; /* out of memory: the rest are simply not declined this cycle */
      s->declined_v = v;
      s->declined_cap = cap;
    }
    s->declined_v[n++] = d->sid;
    pp = &d->next;
  }
  s->sess_cfg.declined = n ? s->declined_v : NULL;
  s->sess_cfg.n_declined = n;
  return &s->sess_cfg;
}

static int run_op(dx_store_t *s, dx_store_op_t *op, int64_t now) {
  dx_provider_t *p = s->cfg.provider;
  const dx_provider_methods_t *m = p->methods;
  memset(&op->err, 0, sizeof op->err);
  op->at_ms = now;
  switch (op->kind) {
    case DX_OP_ACK_ORCH:
      return m->ack_orchestration_item(p, now, op->ack, &op->err);
    case DX_OP_ABANDON_ORCH:
      return m->abandon_orchestration_item(p, now, op->instance, op->token, op->delay_ms,
                                           op->ignore_attempt, &op->err);
    case DX_OP_ACK_WORK:
      return m->ack_work_item(p, now, op->token, op->item, &op->err);
    case DX_OP_ABANDON_WORK:
      return m->abandon_work_item(p, now, op->token, op->delay_ms, op->ignore_attempt,
                                  &op->err);
    case DX_OP_RENEW_WORK:
      return m->renew_work_item_lock(p, now, op->token, op->delay_ms, &op->err);
    case DX_OP_ENQUEUE_ORCH:
      return m->enqueue_for_orchestrator(p, now, op->item, op->delay_ms, &op->err);
    case DX_OP_RENEW_SESSIONS:
      /* a retried or isolated batch runs the renewal again: an id an earlier attempt renewed
      ** was rolled back with it, and must not make the loop believe its lease was extended */
      free_ids(op->ids, op->n_ids);
      free_ids(op->ended, op->n_ended);
      op->ids = op->ended = NULL;
      op->n_ids = op->n_ended = 0;
      return m->renew_session_lock(p, now, op->worker_id, op->delay_ms, op->idle_ms, collect_id,
                                   op, NULL, &op->err);
    case DX_OP_RELEASE_SESSIONS:
      return m->release_session_locks(p, now, op->worker_id, op->session_id, &op->count,
                                      &op->err);
    case DX_OP_CLEANUP_SESSIONS:
      return m->cleanup_orphaned_sessions(p, now, &op->count, &op->err);
    case DX_OP_DECLINE_SESSION:
      return decline(s, op->session_id, now + op->delay_ms, &op->err);
    case DX_OP_SESSION_EVENT:
      if (m->version < 7 || !m->append_session_event) return 0;
      return m->append_session_event(p, op->sev, &op->err);
    default:
      return dx_error_set(&op->err, DX_EINVAL, "unknown store operation %d", op->kind);
  }
}

static void free_fetched(dx_store_fetched_t *f) {
  size_t i;
  for (i = 0; i < f->n_orch; i++) dx_orch_item_free(f->orch[i]);
  for (i = 0; i < f->n_work; i++) {
    dx_work_item_clear(&f->work[i].item);
    free(f->work[i].previous_owner);
  }
  free(f->orch);
  free(f->work);
  memset(f, 0, sizeof *f);
}

/* Before fetching: the provider takes only this worker's tags and the orchestrations its host
** can run, re-read whenever the host's registrations changed (rolling deployments). A failure
** is retried at the next cycle; meanwhile the previous filter stays. */
static void refresh_filter(dx_store_t *s) {
  dx_provider_t *p = s->cfg.provider;
  const dx_host_methods_t *h = s->cfg.host;
  dx_orch_capability_t *caps = NULL;
  size_t n = 0;
  uint64_t gen = s->cap_gen;
  int changed = 0;
  dx_fetch_filter_t f;
  dx_error_t err;
  if (p->methods->version < 9 || !p->methods->set_fetch_filter) return;
  if (h && h->version >= 4 && h->orch_capabilities) {
    changed = h->orch_capabilities(s->cfg.host_ud, s->cap_gen, &gen, &caps, &n);
    if (changed < 0) return;
  }
  if (s->filter_set && !changed) return;
  memset(&f, 0, sizeof f);
  if (s->cfg.tag_filter) f = *s->cfg.tag_filter;
  else f.untagged = 1;
  f.capabilities_set = changed;
  f.capabilities = caps;
  f.n_capabilities = n;
  if (p->methods->set_fetch_filter(p, &f, &err) == 0) {
    s->filter_set = 1;
    s->cap_gen = gen;
  } else {
    dx__log(DX_LOG_WARN, "setting the fetch filter failed", "error=\"%s\"", err.msg);
  }
  dx_orch_capabilities_free(caps, n);
}

/* Returns 1 when a fetch failed (the cycle then counts as failed, for the backoff). */
static int fetch_into(dx_store_t *s, int64_t now, int bo, int bw, dx_store_fetched_t *f) {
  dx_provider_t *p = s->cfg.provider;
  dx_error_t err;
  int failed = 0;
  const dx_session_cfg_t *sessions = fetch_sessions(s, now);
  /* arrays of capacity bo / bw; a second fetch of the same cycle (hold_turns) adds to them */
  if (bo > 0 && !f->orch) f->orch = calloc((size_t)bo, sizeof *f->orch);
  if (bw > 0 && !f->work) f->work = calloc((size_t)bw, sizeof *f->work);
  while (f->orch && (int)f->n_orch < bo) {
    dx_orch_item_t *it = NULL;
    if (p->methods->fetch_orchestration_item(p, now, s->cfg.orch_lock_ms, &it, &err) != 0) {
      dx__log(DX_LOG_WARN, "orchestration fetch failed", "error=\"%s\"", err.msg);
      failed = 1;
      break;
    }
    if (!it) break;
    f->orch[f->n_orch++] = it;
    hold(s, it->instance, it->lock_token);
  }
  while (f->work && (int)f->n_work < bw) {
    dx_work_fetch_t *w = &f->work[f->n_work];
    if (p->methods->fetch_work_item(p, now, s->cfg.work_lock_ms, sessions, w, &err) != 0) {
      dx__log(DX_LOG_WARN, "work fetch failed", "error=\"%s\"", err.msg);
      failed = 1;
      break;
    }
    if (w->item.kind == 0) {
      free(w->previous_owner);
      memset(w, 0, sizeof *w);
      break;
    }
    hold(s, NULL, w->lock_token);
    f->n_work++;
  }
  return failed;
}

/* After an op ran: settled items are no longer held (whatever the outcome: the loop does not
** settle them again); a renewal by the loop postpones this thread's fallback renewal. */
static void settle_held(dx_store_t *s, const dx_store_op_t *op) {
  if (op->kind == DX_OP_ACK_ORCH) unhold(s, op->ack->lock_token);
  else if (op->kind == DX_OP_ABANDON_ORCH || op->kind == DX_OP_ACK_WORK ||
           op->kind == DX_OP_ABANDON_WORK)
    unhold(s, op->token);
  else if (op->kind == DX_OP_RENEW_WORK) {
    if (op->rc == 0) touch_held(s, op->token);
    else unhold(s, op->token);
  } else if (op->kind == DX_OP_RENEW_SESSIONS && op->rc == 0) {
    s->sess_due = mono_ms() + (uint64_t)s->sess_every_ms; /* the loop is on time */
  }
}

/* What a power cut may lose without breaking a promise needs no sync of its own (it reaches
** the disk with the next synced commit, in order; the provider decides how much of the flush
** it may skip without risking the store: provider.h commit). Renewals only move lock
** expiries: losing one merely shortens a lease. An activity's result: losing it runs the
** activity again when its lock lapses, which activities allow anyway (at least once, as after
** any crash), and the turn that records the result in history is synced. */
static int op_needs_sync(const dx_store_op_t *op) {
  return op->kind != DX_OP_RENEW_WORK && op->kind != DX_OP_RENEW_SESSIONS &&
         op->kind != DX_OP_ACK_WORK && op->rc == 0;
}

enum { CALL_OP = 1, CALL_FETCH = 2 };

/* Run one op inside the cycle's batch and note its outcome. DX_ERETRY (the batch is lost)
** is returned, in *err; any other failure is the op's own answer. */
static int op_done(dx_store_t *s, dx_store_op_t *op, int *failed, int *durable,
                   dx_error_t *err) {
  if (op->rc == DX_ERETRY) {
    *err = op->err;
    *failed = CALL_OP;
    return DX_ERETRY;
  }
  settle_held(s, op);
  if (op->rc != 0) *failed |= CALL_OP;
  *durable |= op_needs_sync(op);
  return 0;
}

static int op_apply(dx_store_t *s, dx_store_op_t *op, int64_t now, int *failed, int *durable,
                    dx_error_t *err) {
  op->rc = run_op(s, op, now);
  return op_done(s, op, failed, durable, err);
}

static int has_run_cycle(dx_provider_t *p) {
  return p->methods->version >= 5 && p->methods->run_cycle != NULL;
}

static int is_ack(const dx_store_op_t *op) {
  return op->kind == DX_OP_ACK_ORCH || op->kind == DX_OP_ACK_WORK;
}

/* The fetch of a cycle that wanted items took since t0 (uv_hrtime). */
static void observe_fetch(dx_store_t *s, uint64_t t0, int bo, int bw) {
  if (bo > 0 || bw > 0)
    dx__metric_observe(s->cfg.metrics, DXM_STORE_FETCH_DURATION, DXM_NOLABELS,
                       dx__seconds_since(t0));
}

/* The provider takes the cycle's acks and fetches in one call (run_cycle, provider.h v5), so
** a database provider can send them in a few round trips; other ops run one by one first. */
static int run_cycle(dx_store_t *s, dx_store_op_t *ops, int bo, int bw, int64_t now,
                     dx_store_fetched_t *f, int *failed, int *durable, dx_error_t *err) {
  dx_provider_t *p = s->cfg.provider;
  dx_cycle_ack_t *acks = NULL;
  dx_store_op_t *op;
  dx_cycle_t cy;
  size_t n = 0, i;
  int rc = 0, sync = 0;
  uint64_t t0;
  for (op = ops; op && !rc; op = op->next)
    if (is_ack(op)) n++, sync |= op->kind == DX_OP_ACK_ORCH;
    else rc = op_apply(s, op, now, failed, durable, err);
  if (rc) return rc;
  if (n && !(acks = calloc(n, sizeof *acks)))
    return dx_error_set(err, DX_ERETRY, "out of memory for the cycle's acks");
  for (op = ops, i = 0; op; op = op->next) {
    if (!is_ack(op)) continue;
    if (op->kind == DX_OP_ACK_ORCH) acks[i].orch = op->ack;
    else {
      acks[i].work_token = op->token;
      acks[i].completion = op->item;
    }
    i++;
  }
  memset(&cy, 0, sizeof cy);
  cy.acks = acks;
  cy.n_acks = n;
  cy.orch_lock_ms = s->cfg.orch_lock_ms;
  cy.work_lock_ms = s->cfg.work_lock_ms;
  cy.sessions = fetch_sessions(s, now);
  /* a provider may commit inside run_cycle: decide now (turn acks sync, op_needs_sync) */
  cy.sync = *durable || sync;
  /* (after an eager cycle's calls f may hold items already: add to them) */
  if (bo > 0 && !f->orch) f->orch = calloc((size_t)bo, sizeof *f->orch);
  if (bw > 0 && !f->work) f->work = calloc((size_t)bw, sizeof *f->work);
  cy.orch_out = f->orch ? f->orch + f->n_orch : NULL;
  cy.work_out = f->work ? f->work + f->n_work : NULL;
  cy.max_orch = cy.orch_out && bo > (int)f->n_orch ? bo - (int)f->n_orch : 0;
  cy.max_work = cy.work_out && bw > (int)f->n_work ? bw - (int)f->n_work : 0;
  t0 = uv_hrtime();
  rc = p->methods->run_cycle(p, now, &cy, err);
  observe_fetch(s, t0, bo, bw); /* the acks ride along: one call does both */
  for (i = 0; i < cy.n_orch; i++) hold(s, cy.orch_out[i]->instance, cy.orch_out[i]->lock_token);
  for (i = 0; i < cy.n_work; i++) hold(s, NULL, cy.work_out[i].lock_token);
  f->n_orch += cy.n_orch;
  f->n_work += cy.n_work;
  if (cy.fetch_rc) {
    dx__log(DX_LOG_WARN, "fetch failed", "error=\"%s\"", cy.fetch_err.msg);
    *failed |= CALL_FETCH;
  }
  for (op = ops, i = 0; op; op = op->next) {
    if (!is_ack(op)) continue;
    if (rc == 0) {
      op->rc = acks[i].rc;
      op->err = acks[i].err;
      if (op_done(s, op, failed, durable, err)) rc = DX_ERETRY;
    } else {
      *failed |= CALL_OP;
    }
    i++;
  }
  free(acks);
  return rc;
}

/* {===== turns answered inside their fetch's transaction =====} */

/* A provider without run_cycle makes its calls without round trips (a local store), so a
** cycle's transaction can stay open a moment for the turns it fetched: the orchestration items
** go to the loop before the commit, their acks (with whatever else the loop queued meanwhile)
** join the transaction, which then fetches again and commits once. A step (an activity's
** result, the turn it unblocks, the next activity) then costs one commit instead of two, and
** the fetch of a start none of its own. Only for a few items (HOLD_MAX_ITEMS), waited for at
** most cfg.hold_ms, and only while the loop holds nothing else unsettled (idle, it answers at
** once): a big batch or a busy loop commits at once as before (a hold waiting on a busy loop
** would keep other processes' writers out for nothing), and other writers wait for the store
** at most that long. If the transaction is then lost, the loop's acks of
** those items are refused (their locks were never kept) and the items come back. Work items
** still wait for the commit: an activity never starts before the turn that scheduled it is
** durable. */
#define HOLD_MAX_ITEMS 8

typedef struct {
  uint64_t tokens[HOLD_MAX_ITEMS]; /* lock tokens of the items handed to the loop */
  size_t n;
} handed_t;

/* 1 when ops settle a turn of an instance f fetched again: the loop learns that settlement
** only with the commit (its cache keeps the turn then), so the new turn must not reach it
** before (it would replay the history instead of continuing the kept turn). */
static int refetched_settled(const dx_store_op_t *ops, const dx_store_fetched_t *f) {
  const dx_store_op_t *op;
  size_t i;
  for (op = ops; op; op = op->next) {
    const char *inst = op->kind == DX_OP_ACK_ORCH       ? op->ack->instance
                       : op->kind == DX_OP_ABANDON_ORCH ? op->instance
                                                        : NULL;
    for (i = 0; inst && i < f->n_orch; i++)
      if (strcmp(inst, f->orch[i]->instance) == 0) return 1;
  }
  return 0;
}

/* 1 when ops carry this process's own client start (dx__eager_start). */
static int has_eager(const dx_store_op_t *ops) {
  for (; ops; ops = ops->next)
    if (ops->kind == DX_OP_ENQUEUE_ORCH && ops->eager) return 1;
  return 0;
}

/* 1 when ops are only activity results (at most HOLD_MAX_ITEMS) and settle everything the
** loop holds: the loop is idle once they are applied, so it answers the turns they unblock at
** once. */
static int results_of_idle_loop(const dx_store_t *s, const dx_store_op_t *ops) {
  size_t k = 0;
  for (; ops; ops = ops->next, k++)
    if (ops->kind != DX_OP_ACK_WORK || !ops->item || k >= HOLD_MAX_ITEMS) return 0;
  return k > 0 && s->n_held == k;
}

/* The cycle makes one call per op and fetch (and so may hold its turns): always on a provider
** without run_cycle. On one with it (a database) only where someone waits for the turn and the
** idle loop answers in microseconds, so the row locks are kept that long only: a cycle
** carrying this process's own start (start, first turn and the activity it schedules cost one
** commit), or an idle loop's activity results (result and the turn it unblocks, one commit).
** Every other cycle stays one round trip. */
static int per_call(dx_store_t *s, const dx_store_op_t *ops) {
  return !has_run_cycle(s->cfg.provider) ||
         (s->cfg.hold_ms > 0 && (has_eager(ops) || results_of_idle_loop(s, ops)));
}

/* pc: per_call decided at the cycle's start */
static int can_hold(dx_store_t *s, const dx_store_op_t *ops, const dx_store_fetched_t *f, int pc) {
  return s->cfg.hold_ms > 0 && f->n_orch > 0 && f->n_orch <= HOLD_MAX_ITEMS &&
         s->n_held == f->n_orch && pc && !refetched_settled(ops, f);
}

/* Hand f's orchestration items to the loop now (f keeps its work items). 0 when the store is
** closing, or when the loop has not yet taken what it was handed before (it is busy: it
** would not answer in time); they are then delivered with the commit, as usual. */
static int hand_over_turns(dx_store_t *s, dx_store_fetched_t *f, handed_t *h) {
  fetched_node_t *n = calloc(1, sizeof *n);
  size_t i;
  if (!n) return 0;
  uv_mutex_lock(&s->mu);
  if (s->stopping || !s->cfg.on_fetch || s->fetched) {
    uv_mutex_unlock(&s->mu);
    free(n);
    return 0;
  }
  for (i = 0; i < f->n_orch; i++) h->tokens[h->n++] = f->orch[i]->lock_token;
  n->f.orch = f->orch;
  n->f.n_orch = f->n_orch;
  n->f.at_ms = f->at_ms;
  if (s->fetched_tail) s->fetched_tail->next = n;
  else s->fetched = n;
  s->fetched_tail = n;
  s->budget_orch -= (int)f->n_orch;
  uv_mutex_unlock(&s->mu);
  f->orch = NULL;
  f->n_orch = 0;
  uv_async_send(&s->async);
  return 1;
}

/* 1 when ops hold a settlement (ack or abandon) of every handed-over item. */
static int turns_settled(const dx_store_op_t *ops, const handed_t *h) {
  size_t i;
  for (i = 0; i < h->n; i++) {
    const dx_store_op_t *op;
    for (op = ops; op; op = op->next)
      if ((op->kind == DX_OP_ACK_ORCH && op->ack->lock_token == h->tokens[i]) ||
          (op->kind == DX_OP_ABANDON_ORCH && op->token == h->tokens[i]))
        break;
    if (!op) return 0;
  }
  return 1;
}

/* Wait (at most cfg.hold_ms; stop and pause end it) until the loop settled every handed-over
** item, then take everything it queued. */
static dx_store_op_t *await_turns(dx_store_t *s, const handed_t *h) {
  uint64_t until = uv_hrtime() + (uint64_t)s->cfg.hold_ms * 1000000u, t;
  dx_store_op_t *ops;
  uv_mutex_lock(&s->mu);
  while (!s->stopping && !s->paused && !turns_settled(s->pending, h) &&
         (t = uv_hrtime()) < until)
    uv_cond_timedwait(&s->cv, &s->mu, until - t);
  ops = s->pending;
  s->pending = s->pending_tail = NULL;
  uv_mutex_unlock(&s->mu);
  return ops;
}

/* Inside the open transaction, after its orchestration fetch: hand the turns over and take
** what the loop answered (appended to *opsp, so it is reported like the rest of the batch).
** With latep (a provider with run_cycle) *latep gets those ops for the cycle's closing
** run_cycle; else they are applied here and orchestrations fetched again. *bo is what may
** still be fetched of them. */
static int hold_turns(dx_store_t *s, dx_store_op_t **opsp, int *bo, dx_store_fetched_t *f,
                      handed_t *h, dx_store_op_t **latep, int *failed, int *durable,
                      dx_error_t *err) {
  dx_store_op_t *late, *op, **tail = opsp;
  int64_t now;
  int rc = 0;
  int k = (int)f->n_orch;
  if (!hand_over_turns(s, f, h)) return 0;
  *bo -= k;
  late = await_turns(s, h);
  while (*tail) tail = &(*tail)->next;
  *tail = late;
  now = now_ms(s);
  f->at_ms = now;
  if (latep) {
    *latep = late;
    return 0;
  }
  for (op = late; op && !rc; op = op->next) rc = op_apply(s, op, now, failed, durable, err);
  if (rc) return rc;
  if (fetch_into(s, now, *bo, 0, f)) *failed |= CALL_FETCH;
  return 0;
}

static void unhold_handed(dx_store_t *s, const handed_t *h) {
  size_t i;
  for (i = 0; i < h->n; i++) unhold(s, h->tokens[i]);
}

/* One transaction: apply `ops`, fetch, commit. 0, or the error that lost the whole batch
** (in *err; nothing of it was kept and nothing is left in f). DX_ERETRY from any call ends the
** batch at once: the provider says it cannot go on, and the same calls may succeed again.
** *failed gets CALL_OP / CALL_FETCH when an op / a fetch failed (a failed commit is then
** their consequence, not the store's own failure). Ops the loop queued while the transaction
** waited for its turns (hold_turns) are appended to *opsp; items handed over then reduce *bo. */
static int cycle_once(dx_store_t *s, dx_store_op_t **opsp, int *bo, int bw, int64_t now,
                      dx_store_fetched_t *f, int *failed, dx_error_t *err) {
  dx_provider_t *p = s->cfg.provider;
  dx_store_op_t *op;
  handed_t handed;
  int durable = 0, rc, pc;
  uint64_t t0;
  memset(f, 0, sizeof *f);
  memset(err, 0, sizeof *err);
  handed.n = 0;
  *failed = 0;
  f->at_ms = now;
  if ((rc = p->methods->begin(p, err)) != 0) return rc;
  renew_held(s, now);
  if (*bo > 0 || bw > 0) refresh_filter(s);
  if (!(pc = per_call(s, *opsp))) {
    rc = run_cycle(s, *opsp, *bo, bw, now, f, failed, &durable, err);
  } else {
    dx_store_op_t *late = NULL;
    int rcy = has_run_cycle(p);
    for (op = *opsp; op && !rc; op = op->next)
      rc = op_apply(s, op, now, failed, &durable, err);
    /* Orchestrations first, then activities, once per batch and after every ack the batch
    ** holds (a provider may skip work it found none of earlier in the batch: sessions) */
    t0 = uv_hrtime();
    /* (a database: one call, one round trip, for the start's turn; run_cycle fetches the rest) */
    if (!rc && fetch_into(s, now, rcy && *bo > 1 ? 1 : *bo, 0, f)) *failed |= CALL_FETCH;
    if (!rc && can_hold(s, *opsp, f, pc)) {
      uint64_t h0 = uv_hrtime();
      rc = hold_turns(s, opsp, bo, f, &handed, rcy ? &late : NULL, failed, &durable, err);
      t0 += uv_hrtime() - h0; /* the fetch metric leaves the wait for the loop out */
    }
    /* a database closes the cycle as usual: the turns' acks, the fetches and the commit in
    ** one round trip */
    if (!rc && rcy) rc = run_cycle(s, late, *bo, bw, f->at_ms, f, failed, &durable, err);
    else if (!rc && fetch_into(s, f->at_ms, 0, bw, f)) *failed |= CALL_FETCH;
    if (!rc && !rcy) observe_fetch(s, t0, *bo, bw); /* (run_cycle observed its own) */
  }
  if (rc) { /* DX_ERETRY from an op: it runs again, its outcome is not known yet */
    p->methods->rollback(p);
    unhold_fetched(s, f);
    unhold_handed(s, &handed);
    free_fetched(f);
    renewals_end(s, 0);
    return rc;
  }
  /* A cycle that only took locks need not reach the disk: a lost lock only delays. */
  t0 = uv_hrtime();
  rc = p->methods->commit(p, durable, err);
  dx__metric_observe(s->cfg.metrics, DXM_STORE_COMMIT_DURATION,
                     DXM_LABELS(durable ? "true" : "false"), dx__seconds_since(t0));
  if (rc != 0) {
    p->methods->rollback(p); /* a no-op when the failed commit already ended the batch */
    unhold_fetched(s, f);
    unhold_handed(s, &handed);
    free_fetched(f);
  }
  renewals_end(s, rc == 0);
  return rc;
}

#define RETRY_ATTEMPTS 8      /* whole-batch attempts on DX_ERETRY before giving up */
#define RETRY_FIRST_MS 2      /* backoff doubles from here: 2, 4, ... 256 ms (~0.5 s in all) */

/* cycle_once, repeated while it fails with DX_ERETRY (deadlock, serialization failure, lost
** connection), with a doubling backoff; each attempt takes the clock anew. */
static int cycle_retrying(dx_store_t *s, dx_store_op_t **opsp, int bo, int bw,
                          dx_store_fetched_t *f, int *failed, dx_error_t *err) {
  int attempt, rc = 0;
  for (attempt = 1; attempt <= RETRY_ATTEMPTS; attempt++) {
    rc = cycle_once(s, opsp, &bo, bw, now_ms(s), f, failed, err);
    if (rc != DX_ERETRY) break;
    dx__metric_add(s->cfg.metrics, DXM_STORE_RETRIES, DXM_NOLABELS, 1);
    dx__log(DX_LOG_WARN, "store transaction failed; retrying it whole", "attempt=%d error=\"%s\"",
            attempt, err->msg);
    if (attempt < RETRY_ATTEMPTS) uv_sleep(RETRY_FIRST_MS << (attempt - 1));
  }
  return rc;
}

/* One cycle ended with rc: the counters (dx__store_commits, metrics). */
static void count_cycle(dx_store_t *s, int rc) {
  s->cycles++;
  if (rc == 0) s->commits++;
  dx__metric_add(s->cfg.metrics, DXM_STORE_CYCLES, DXM_LABELS(rc ? "failed" : "ok"), 1);
}

/* Each op's outcome and what the cycle fetched, for the metrics. */
static void count_ops(dx_store_t *s, const dx_store_op_t *ops, const dx_store_fetched_t *f) {
  static const char *const names[] = {
    [DX_OP_ACK_ORCH] = "ack_orchestration", [DX_OP_ABANDON_ORCH] = "abandon_orchestration",
    [DX_OP_ACK_WORK] = "ack_work", [DX_OP_ABANDON_WORK] = "abandon_work",
    [DX_OP_RENEW_WORK] = "renew_work", [DX_OP_ENQUEUE_ORCH] = "enqueue",
    [DX_OP_RENEW_SESSIONS] = "renew_sessions", [DX_OP_RELEASE_SESSIONS] = "release_sessions",
    [DX_OP_CLEANUP_SESSIONS] = "cleanup_sessions"};
  const dx_store_op_t *op;
  if (!s->cfg.metrics) return;
  for (op = ops; op; op = op->next)
    dx__metric_add(s->cfg.metrics, DXM_STORE_OPERATIONS,
                   DXM_LABELS(op->kind > 0 && (size_t)op->kind < sizeof names / sizeof *names
                                  ? names[op->kind] : "other",
                              op->rc ? "refused" : "ok"), 1);
  if (f->n_orch)
    dx__metric_add(s->cfg.metrics, DXM_STORE_FETCHED, DXM_LABELS("orchestrator"),
                   (double)f->n_orch);
  if (f->n_work)
    dx__metric_add(s->cfg.metrics, DXM_STORE_FETCHED, DXM_LABELS("worker"), (double)f->n_work);
}

/* The batch failed as a whole (not by DX_ERETRY, or by DX_ERETRY too often): apply each op in
** a transaction of its own, so one bad op fails alone instead of failing its neighbours.
** Nothing is fetched; the next cycle does that. */
static void cycle_isolate(dx_store_t *s, dx_store_op_t *ops) {
  dx_store_fetched_t none;
  dx_store_op_t *op;
  dx_error_t err;
  int rc = 0, failed;
  for (op = ops; op; op = op->next) {
    dx_store_op_t *next = op->next;
    if (rc != DX_ERETRY) { /* once the store stays unavailable, the rest fail alike at once */
      op->next = NULL; /* a batch of one */
      dx_store_op_t *one = op;
      rc = cycle_retrying(s, &one, 0, 0, &none, &failed, &err);
      op->next = next;
      count_cycle(s, rc);
    }
    if (rc != 0) {
      op->rc = rc;
      op->err = err;
    }
  }
}

/* One cycle: apply *opsp, fetch, commit (ops the loop queued while it held its transaction
** open are appended to *opsp). Returns 1 when anything was fetched. */
static int cycle(dx_store_t *s, dx_store_op_t **opsp, int bo, int bw, dx_store_fetched_t *f) {
  dx_store_op_t *op, *ops;
  dx_error_t err;
  uint64_t t0 = uv_hrtime();
  int failed, rc = cycle_retrying(s, opsp, bo, bw, f, &failed, &err);
  ops = *opsp;
  dx__metric_observe(s->cfg.metrics, DXM_STORE_CYCLE_DURATION, DXM_NOLABELS,
                     dx__seconds_since(t0));
  count_cycle(s, rc);
  if (rc != 0) {
    dx__log(DX_LOG_ERROR, "store commit failed", "error=\"%s\"", err.msg);
    /* A damaged store (or one whose lock file vanished) cannot be used safely any more. Only
    ** when begin or commit found it so: a damaged record read by one call fails that call. */
    if (rc == DX_ECORRUPT && !failed && !s->fatal_seen) {
      s->fatal_err = err;
      s->fatal_seen = 1;
    }
    if (ops && ops->next) {
      cycle_isolate(s, ops);
    } else if (ops) {
      ops->rc = rc;
      ops->err = err;
    }
    for (op = ops; op; op = op->next) settle_held(s, op); /* ops that failed by DX_ERETRY */
  }
  count_ops(s, ops, f);
  /* a failed op (a lost lock, bad input) is an answer, not a failing store: no backoff */
  s->cycle_failed = rc != 0 || (failed & CALL_FETCH);
  return f->n_orch + f->n_work > 0;
}

#define DEPTHS_EVERY_MS 10000

/* Refresh the queue depth gauges every DEPTHS_EVERY_MS (mu not held; outside a batch, like
** next_due). A failed read keeps the last values. */
static void poll_depths(dx_store_t *s) {
  dx_provider_t *p = s->cfg.provider;
  dx_queue_depths_t d;
  dx_error_t err;
  if (!s->cfg.metrics || mono_ms() < s->depths_due || !p->methods->get_queue_depths) return;
  s->depths_due = mono_ms() + DEPTHS_EVERY_MS;
  if (p->methods->get_queue_depths(p, &d, &err) != 0) return;
  dx__metric_set(s->cfg.metrics, DXM_QUEUE_ORCH, DXM_NOLABELS, (double)d.orchestrator);
  dx__metric_set(s->cfg.metrics, DXM_QUEUE_WORK, DXM_NOLABELS, (double)d.worker);
  dx__metric_set(s->cfg.metrics, DXM_INSTANCES, DXM_NOLABELS, (double)d.instances);
}

static int64_t next_due(dx_store_t *s, int64_t now) {
  dx_provider_t *p = s->cfg.provider;
  int64_t due = INT64_MAX;
  dx_error_t err;
  refresh_filter(s); /* what is due depends on what this worker takes */
  if (p->methods->next_due_ms(p, now, &due, &err) != 0) return now; /* let fetch report it */
  return due;
}

/* Sleep (mu held) at most ms, and never past the next lock renewal. */
static void timed_wait(dx_store_t *s, int64_t ms) {
  uint64_t rdue = next_renewal(s), mono = mono_ms();
  if (rdue != UINT64_MAX && (int64_t)(rdue > mono ? rdue - mono : 0) < ms)
    ms = (int64_t)(rdue > mono ? rdue - mono : 0);
  if (ms < 1) ms = 1;
  uv_cond_timedwait(&s->cv, &s->mu, (uint64_t)ms * 1000000ull);
}

static void store_main(void *arg) {
  dx_store_t *s = arg;
  dx__log_set_worker(s->cfg.worker_id);
  uv_mutex_lock(&s->mu);
  for (;;) {
    dx_store_op_t *ops;
    dx_store_fetched_t f;
    int bo, bw, got, can_fetch = s->fetching && (s->budget_orch > 0 || s->budget_work > 0);
    uint64_t rdue = next_renewal(s);
    int renew_now = rdue <= mono_ms();
    if (s->paused && !s->stopping) { /* a simulated stall: nothing runs until it ends */
      uv_cond_wait(&s->cv, &s->mu);
      continue;
    }
    if (!s->pending && !can_fetch && !renew_now) {
      if (s->stopping) break;
      if (rdue == UINT64_MAX) uv_cond_wait(&s->cv, &s->mu);
      else timed_wait(s, INT64_MAX / 2);
      continue;
    }
    if (!s->pending && !s->poked && !renew_now) {
      int64_t now = now_ms(s), due;
      s->woken = 0; /* this check covers every wake so far */
      uv_mutex_unlock(&s->mu);
      poll_depths(s);
      due = next_due(s, now);
      uv_mutex_lock(&s->mu);
      if (due > now && !s->pending && !s->poked && !s->woken) {
        if (s->stopping) break;
        timed_wait(s, due - now < s->cfg.poll_interval_ms ? due - now : s->cfg.poll_interval_ms);
        continue;
      }
    }
    s->poked = 0;
    ops = s->pending;
    s->pending = s->pending_tail = NULL;
    bo = s->fetching ? s->budget_orch : 0;
    bw = s->fetching ? s->budget_work : 0;
    s->busy = 1;
    uv_mutex_unlock(&s->mu);

    got = cycle(s, &ops, bo, bw, &f);
    poll_depths(s);

    uv_mutex_lock(&s->mu);
    s->busy = 0;
    s->budget_orch -= (int)f.n_orch;
    s->budget_work -= (int)f.n_work;
    if (ops) {
      dx_store_op_t *last = ops;
      while (last->next) last = last->next;
      if (s->done_tail) s->done_tail->next = ops;
      else s->done = ops;
      s->done_tail = last;
    }
    if (got) {
      fetched_node_t *n = malloc(sizeof *n);
      if (n) {
        n->f = f;
        n->next = NULL;
        if (s->fetched_tail) s->fetched_tail->next = n;
        else s->fetched = n;
        s->fetched_tail = n;
      } else {
        unhold_fetched(s, &f);
        free_fetched(&f); /* locks expire and the items come back */
      }
    } else {
      free_fetched(&f);
    }
    /* A failing store is retried with backoff, not every poll interval. */
    if (s->cycle_failed)
      s->backoff_ms = s->backoff_ms ? (s->backoff_ms * 2 > 1000 ? 1000 : s->backoff_ms * 2) : 10;
    else
      s->backoff_ms = 0;
    if (s->fatal_seen == 1) {
      s->fatal_seen = 2;
      s->fatal = 1;
    }
    if (ops || got || s->fatal == 1) uv_async_send(&s->async);
    if (s->backoff_ms) { /* sleep it out: only stopping cuts it short */
      int64_t until = dx__now_ms() + s->backoff_ms;
      while (!s->stopping && dx__now_ms() < until) timed_wait(s, until - dx__now_ms());
      continue;
    }
    /* Found nothing although something looked due (locked elsewhere, not eligible): wait
    ** a poll interval instead of spinning. */
    if (!ops && !got && !s->pending && !s->poked && !s->woken && !s->stopping)
      timed_wait(s, s->cfg.poll_interval_ms);
  }
  uv_mutex_unlock(&s->mu);
  uv_async_send(&s->async);
}

/* {===== loop side =====} */

static void on_async(uv_async_t *h) {
  dx_store_t *s = h->data;
  dx_store_op_t *ops;
  fetched_node_t *fl;
  int fatal;
  dx__log_set_worker(s->cfg.worker_id); /* the loop may serve several runtimes (tests) */
  /* uv_async_send coalesces: drain everything on each wakeup. */
  uv_mutex_lock(&s->mu);
  ops = s->done;
  fl = s->fetched;
  fatal = s->fatal == 1;
  if (fatal) s->fatal = 2;
  s->done = s->done_tail = NULL;
  s->fetched = s->fetched_tail = NULL;
  uv_mutex_unlock(&s->mu);
  while (ops) {
    dx_store_op_t *next = ops->next;
    ops->next = NULL;
    if (ops->done) ops->done(ops);
    ops = next;
  }
  while (fl) {
    fetched_node_t *next = fl->next;
    if (s->cfg.on_fetch) s->cfg.on_fetch(s->cfg.ud, &fl->f);
    free_fetched(&fl->f);
    free(fl);
    fl = next;
  }
  if (fatal && s->cfg.on_fatal) s->cfg.on_fatal(s->cfg.ud, &s->fatal_err);
}

static void on_closed(uv_handle_t *h);

/* When the store thread renews a lock the loop renews every `every` ms: only once the loop is
** late, halfway between when its renewal was due and when the lock lapses. */
static int64_t late_after(int64_t every, int64_t lock) {
  int64_t at = every > 0 && every < lock ? every + (lock - every) / 2 : lock / 2;
  return at < 1 ? 1 : at;
}

int dx__store_new(dx_store_t **out, uv_loop_t *loop, const dx_store_cfg_t *cfg,
                  dx_error_t *err) {
  dx_store_t *s = calloc(1, sizeof *s);
  if (!s) return dx_error_set(err, DX_ENOMEM, "out of memory");
  s->loop = loop;
  s->cfg = *cfg;
  if (s->cfg.poll_interval_ms <= 0) s->cfg.poll_interval_ms = 10;
  s->renew_every_ms = dx__renewal_interval(s->cfg.orch_lock_ms, 5000);
  /* The time limit, not a lapsed lock, ends a runaway turn: renew well past the limit. */
  s->orch_hold_ms = s->cfg.turn_time_limit_ms > HOLD_MAX_MS / 2 ? 2 * s->cfg.turn_time_limit_ms
                                                                 : HOLD_MAX_MS;
  if (s->renew_every_ms < 1) s->renew_every_ms = 1;
  s->work_renew_every_ms = late_after(s->cfg.work_renew_ms, s->cfg.work_lock_ms);
  if (s->cfg.sessions) {
    s->sess_every_ms = late_after(s->cfg.session_renew_ms, s->cfg.sessions->session_lock_ms);
    s->sess_due = mono_ms() + (uint64_t)s->sess_every_ms;
  }
  s->fetching = 1;
  uv_mutex_init(&s->mu);
  uv_cond_init(&s->cv);
  uv_async_init(loop, &s->async, on_async);
  s->async.data = s;
  if (uv_thread_create(&s->thread, store_main, s) != 0) {
    /* on_closed frees the struct and its mutex once the loop has closed the handle */
    uv_close((uv_handle_t *)&s->async, on_closed);
    return dx_error_set(err, DX_ENOMEM, "cannot start the store thread");
  }
  s->thread_started = 1;
  *out = s;
  return DX_OK;
}

void dx__store_submit(dx_store_t *s, dx_store_op_t *op) {
  op->next = NULL;
  uv_mutex_lock(&s->mu);
  if (s->pending_tail) s->pending_tail->next = op;
  else s->pending = op;
  s->pending_tail = op;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_want(dx_store_t *s, int orch, int work) {
  uv_mutex_lock(&s->mu);
  s->budget_orch += orch;
  s->budget_work += work;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_poke(dx_store_t *s) {
  uv_mutex_lock(&s->mu);
  s->poked = 1;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_wake(dx_store_t *s) {
  uv_mutex_lock(&s->mu);
  s->woken = 1;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_pause(dx_store_t *s, int on) {
  uv_mutex_lock(&s->mu);
  s->paused = on;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

void dx__store_stop_fetching(dx_store_t *s) {
  uv_mutex_lock(&s->mu);
  s->fetching = 0;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
}

static void on_closed(uv_handle_t *h) {
  dx_store_t *s = h->data;
  void (*cb)(void *) = s->close_cb;
  void *ud = s->close_ud;
  free_held(s); /* the thread has been joined */
  free_declined(s);
  free_ids(s->sess_new, s->n_sess_new);
  free_ids(s->sess_conf, s->n_sess_conf);
  uv_mutex_destroy(&s->mu);
  uv_cond_destroy(&s->cv);
  free(s);
  if (cb) cb(ud);
}

void dx__store_close(dx_store_t *s, void (*cb)(void *ud), void *ud) {
  uv_mutex_lock(&s->mu);
  s->stopping = 1;
  s->fetching = 0;
  uv_cond_signal(&s->cv);
  uv_mutex_unlock(&s->mu);
  if (s->thread_started) uv_thread_join(&s->thread);
  on_async(&s->async); /* deliver what the last cycles produced */
  s->close_cb = cb;
  s->close_ud = ud;
  uv_close((uv_handle_t *)&s->async, on_closed);
}

uint64_t dx__store_commits(const dx_store_t *s) { return s->commits; }
uint64_t dx__store_cycles(const dx_store_t *s) { return s->cycles; }

int64_t dx__store_backoff_ms(dx_store_t *s) {
  int64_t ms;
  uv_mutex_lock(&s->mu);
  ms = s->backoff_ms;
  uv_mutex_unlock(&s->mu);
  return ms;
}

/* {===== test support =====} */

int dx__store_quiet(dx_store_t *s) {
  int quiet;
  uv_mutex_lock(&s->mu);
  quiet = !s->pending && !s->busy && !s->done && !s->fetched;
  uv_mutex_unlock(&s->mu);
  return quiet;
}

void dx__store_crash(dx_store_t *s, void (*cb)(void *ud), void *ud) {
  dx_store_op_t *op;
  uv_mutex_lock(&s->mu);
  s->cfg.on_fetch = NULL; /* items fetched but not delivered stay locked until they lapse */
  for (op = s->pending; op; op = op->next) {
    op->rc = dx_error_set(&op->err, DX_ESTATE, "the runtime crashed before this operation "
                          "was applied");
  }
  if (s->pending) {
    if (s->done_tail) s->done_tail->next = s->pending;
    else s->done = s->pending;
    s->done_tail = s->pending_tail;
    s->pending = s->pending_tail = NULL;
  }
  uv_mutex_unlock(&s->mu);
  dx__store_close(s, cb, ud);
}
