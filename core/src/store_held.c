/*
** store_held.c -- what the store thread holds for the loop: every fetched item until its
** settlement is applied (indexed by lock token), the renewal of their locks and of this
** worker's session leases when the loop's own renewal is late, and the sessions this worker
** declines for a while (see store.c for why the store thread renews).
*/
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "metrics.h"
#include "store_int.h"
#include "util.h"

uint64_t dx__store_mono_ms(void) { return uv_hrtime() / 1000000u; }

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

/* instance: an orchestration item's; NULL for a work item. One block holds the entry and its
** instance id (one malloc and one free per fetched item). */
void dx__store_hold(dx_store_t *s, const char *instance, uint64_t token) {
  size_t len = instance ? strlen(instance) + 1 : 0;
  held_t *h = malloc(sizeof *h + len), **b;
  uint64_t mono = dx__store_mono_ms();
  if (!h || !hidx_room(s)) {
    free(h); /* not renewed: the lock may lapse, and the item then simply comes back */
    return;
  }
  memset(h, 0, sizeof *h);
  if (instance) h->instance = memcpy((char *)(h + 1), instance, len);
  h->token = token;
  h->renew_at = mono + (uint64_t)(instance ? s->renew_every_ms : s->work_renew_every_ms);
  /* Bounded, so an item the loop dropped without a settlement (out of memory) is not kept
  ** locked for ever: its lock then lapses and it comes back. */
  h->give_up_at = mono + (uint64_t)(instance ? s->orch_hold_ms : HOLD_MAX_MS);
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
void dx__store_touch_held(dx_store_t *s, uint64_t token) {
  held_t *h = find_held(s, token);
  if (!h) return;
  h->renew_at = dx__store_mono_ms() + (uint64_t)s->work_renew_every_ms;
  h->give_up_at = dx__store_mono_ms() + HOLD_MAX_MS;
}

void dx__store_unhold(dx_store_t *s, uint64_t token) {
  held_t **pp, *dead;
  if (!s->hcap) return;
  for (pp = bucket(s, token); *pp && (*pp)->token != token; pp = &(*pp)->hnext) {}
  if (!(dead = *pp)) return;
  *pp = dead->hnext;
  if (dead->prev) dead->prev->next = dead->next;
  else s->held = dead->next;
  if (dead->next) dead->next->prev = dead->prev;
  s->n_held--;
  s->n_handed -= dead->handed != 0;
  free(dead); /* (its instance id is in the same block) */
}

void dx__store_mark_handed(dx_store_t *s, uint64_t token) {
  held_t *h = find_held(s, token);
  if (!h || h->handed) return;
  h->handed = 1;
  s->n_handed++;
}

int dx__store_is_handed(dx_store_t *s, uint64_t token) {
  held_t *h;
  /* (every op asks, in every cycle: no lookup while nothing is handed over) */
  return s->n_handed && (h = find_held(s, token)) && h->handed;
}

/* The transaction ended: the items still held were handed over in an earlier one now. */
void dx__store_handed_end(dx_store_t *s, const uint64_t *tokens, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    held_t *h = find_held(s, tokens[i]);
    if (h) h->handed = 0;
  }
  s->n_handed = 0;
}

void dx__store_free_held(dx_store_t *s) {
  while (s->held) dx__store_unhold(s, s->held->token);
  free(s->hidx);
  s->hidx = NULL;
  s->hcap = s->n_held = 0;
}

void dx__store_free_ids(char **v, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) free(v[i]);
  free(v);
}

int dx__store_push_id(char ***v, size_t *n, const char *id) {
  char **nv = realloc(*v, (*n + 1) * sizeof *nv);
  if (!nv) return 1;
  *v = nv;
  if ((nv[*n] = dx__strdup(id)) != NULL) (*n)++;
  return 0;
}

/* renew_session_lock callback of the fallback renewal: note each renewed id. */
static int note_renewed(void *ud, const dx_session_info_t *si) {
  dx_store_t *s = ud;
  return dx__store_push_id(&s->sess_new, &s->n_sess_new, si->session_id);
}

/* Items fetched but never delivered to the loop: nobody will settle them. */
void dx__store_unhold_fetched(dx_store_t *s, const dx_store_fetched_t *f) {
  size_t i;
  for (i = 0; i < f->n_orch; i++) dx__store_unhold(s, f->orch[i]->lock_token);
  for (i = 0; i < f->n_work; i++) dx__store_unhold(s, f->work[i].lock_token);
}

/* Earliest renewal due (monotonic ms), UINT64_MAX when nothing is held. */
uint64_t dx__store_next_renewal(dx_store_t *s) {
  uint64_t due = s->cfg.sessions ? s->sess_due : UINT64_MAX;
  held_t *h;
  for (h = s->held; h; h = h->next)
    if (h->renew_at < due) due = h->renew_at;
  return due;
}

/* Inside a cycle's transaction: extend the locks that are due. A lost lock (expired before we
** got here, or taken over) is forgotten; the turn's commit will then be refused as before. */
void dx__store_renew_held(dx_store_t *s, int64_t now) {
  dx_provider_t *p = s->cfg.provider;
  uint64_t mono = dx__store_mono_ms();
  held_t *h, *next;
  int rc;
  if (s->cfg.sessions && mono >= s->sess_due) {
    /* The loop's session renewal is late (the loop is blocked): renew our leases here. */
    dx_error_t err;
    const dx_session_cfg_t *sc = s->cfg.sessions;
    dx__store_free_ids(s->sess_new, s->n_sess_new);
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
      dx__store_unhold(s, h->token);
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
      dx__store_unhold(s, h->token);
      continue;
    }
    h->renew_at = mono + (uint64_t)(h->instance ? s->renew_every_ms : s->work_renew_every_ms);
    h->renewing = 1;
  }
}

/* The transaction that renew_held ran in ended: kept (committed), or not (rolled back, as
** when it is retried on DX_ERETRY), in which case its renewals are due again at once. */
void dx__store_renewals_end(dx_store_t *s, int kept) {
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
    dx__store_free_ids(old, n_old);
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

/* Skip session sid in this worker's fetches until `until` (a later decline replaces it). */
int dx__store_decline(dx_store_t *s, const char *sid, int64_t until, dx_error_t *err) {
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

void dx__store_free_declined(dx_store_t *s) {
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
const dx_session_cfg_t *dx__store_fetch_sessions(dx_store_t *s, int64_t now) {
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
