/*
** sessions.c -- LMDB provider: session rows, per-session queue summaries, and the session methods
** (renew, release, cleanup, list).
*/
#include "lmdb_int.h"

int dx__lm_sess_owned(const sess_rec_t *r) { return r->owner && *r->owner; }

int dx__lm_sess_owner_is(const sess_rec_t *r, const char *worker) {
  return dx__lm_sess_owned(r) && strcmp(r->owner, worker) == 0;
}

void dx__lm_sess_clear(sess_rec_t *r) {
  dx__lm_rec_clear(&dx__lm_sess_schema, r);
  memset(r, 0, sizeof *r);
}

static int sess_decode(tx_t *t, const lm_schema_t *s, const char *sid, const MDB_val *v,
                       sess_rec_t *r) {
  lm_what_t w = {"session '%s'", sid, 0};
  memset(r, 0, sizeof *r);
  return dx__lm_rec_decode_as(t, s, v, r, &w);
}

/* *r = the fields schema s reads of kept record k (the time schema's: no strings), as
** decoding its packed bytes would give them. */
static int sess_copy(tx_t *t, const lm_schema_t *s, const sess_rec_t *k, sess_rec_t *r) {
  r->locked_until = k->locked_until;
  r->last_activity = k->last_activity;
  r->epoch = k->epoch;
  if (s == &dx__lm_sess_time_schema) return 0;
  if ((k->owner && !(r->owner = dx__strdup(k->owner))) ||
      (k->prev && !(r->prev = dx__strdup(k->prev))) || !(r->users = malloc(k->users_len + 1))) {
    dx__lm_sess_clear(r);
    return dx__lm_nomem(t->err);
  }
  if (k->users_len) memcpy(r->users, k->users, k->users_len);
  r->users[k->users_len] = 0;
  r->users_len = k->users_len;
  return 0;
}

static int sess_read(tx_t *t, const lm_schema_t *s, const char *sid, sess_rec_t *r) {
  sess_rec_t *kr;
  dkey_t k;
  MDB_val v;
  int rc;
  memset(r, 0, sizeof *r);
  if ((rc = dx__lm_kept_sess(t, sid, &kr)) < 0) return rc;
  if (rc) return sess_copy(t, s, kr, r);
  key_inst(&k, sid);
  if ((rc = dx__lm_db_get(t, DB_SESSIONS, &k, &v))) return rc;
  return sess_decode(t, s, sid, &v, r);
}

/* 0, DX_ENOTFOUND (err untouched, *r zeroed) or an error. */
int dx__lm_sess_get(tx_t *t, const char *sid, sess_rec_t *r) {
  return sess_read(t, &dx__lm_sess_schema, sid, r);
}

int dx__lm_sess_times(tx_t *t, const char *sid, sess_rec_t *r) {
  return sess_read(t, &dx__lm_sess_time_schema, sid, r);
}

/* {===== the batch's copy of one worker's owned sessions (shared_env_t.own) =====} */

static void own_forget(shared_env_t *se) {
  size_t i;
  for (i = 0; i < se->own_n; i++) free(se->own[i].sid);
  free(se->own);
  se->own = NULL;
  se->own_n = se->own_cap = 0;
  se->own_valid = 0;
}

void dx__lm_sess_batch_forget(shared_env_t *se) {
  se->cap_valid = 0;
  own_forget(se);
}

/* The entry of sid in the copy (sorted by id, as sess_owner is), or NULL. */
static lm_own_t *own_find(shared_env_t *se, const char *sid) {
  size_t lo = 0, hi = se->own_n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(se->own[mid].sid, sid);
    if (c == 0) return &se->own[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

/* The batch's copy of owned sessions follows a change of session `sid`'s queue head. */
void dx__lm_own_moved(shared_env_t *se, const char *sid, int found, uint64_t due, uint64_t seq) {
  lm_own_t *o = se->own_valid ? own_find(se, sid) : NULL;
  if (o) {
    o->found = found;
    o->due = due;
    o->seq = seq;
  }
}

typedef struct {
  size_t prefix_n;
  const char *worker;
} own_scan_t;

static int own_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  own_scan_t *o = ud;
  shared_env_t *se = t->se;
  const char *sid = (const char *)k->mv_data + o->prefix_n;
  sess_queue_t q;
  lm_own_t *nv;
  int rc;
  if (k->mv_size <= o->prefix_n || ((const char *)k->mv_data)[k->mv_size - 1] != 0 ||
      v->mv_size != 8)
    return dx__lm_corrupt(t, DB_SESS_OWNER, "bad entry", "worker '%s'", o->worker);
  if ((rc = dx__lm_squeue_get(t, sid, &q))) return rc;
  if (!(nv = dx__lm_grow(se->own, &se->own_cap, se->own_n, sizeof *se->own)))
    return dx__lm_nomem(t->err);
  se->own = nv;
  if (!(nv[se->own_n].sid = dx__strdup(sid))) return dx__lm_nomem(t->err);
  nv[se->own_n].found = q.found;
  nv[se->own_n].due = q.due;
  nv[se->own_n].seq = q.seq;
  se->own_n++;
  return 0;
}

static const lm_own_t no_own;

int dx__lm_sess_owned_heads(tx_t *t, const char *worker, const lm_own_t **own, size_t *n) {
  shared_env_t *se = t->se;
  own_scan_t o;
  dkey_t pre;
  int rc;
  *own = NULL;
  *n = 0;
  if (!dx__lm_thread_batch(se)) return 0;
  if (!se->own_valid || strcmp(se->own_worker, worker) != 0) {
    own_forget(se);
    key_inst(&pre, worker);
    o.prefix_n = pre.n;
    o.worker = worker;
    if ((rc = dx__lm_scan_prefix(t, DB_SESS_OWNER, &pre, own_cb, &o))) {
      own_forget(se);
      return rc;
    }
    snprintf(se->own_worker, sizeof se->own_worker, "%s", worker);
    se->own_valid = 1;
  }
  *own = se->own ? se->own : &no_own; /* (none owned: still the batch's answer) */
  *n = se->own_n;
  return 0;
}

/* 1 when session row r counts in the open batch's live count (shared_env_t.cap_live). */
static int cap_counts(const shared_env_t *se, const sess_rec_t *r) {
  return r && dx__lm_sess_owner_is(r, se->cap_worker) && r->locked_until > se->cap_now;
}

/* A session record changed from one counted (was_counted) to nw: the batch's live count of
** one worker (work.c claim_room) and the earliest lease it counts follow (one place for
** dx__lm_sess_put and the kept record's in-place changes). */
static void cap_note(shared_env_t *se, int was_counted, const sess_rec_t *nw) {
  int now_counted;
  if (!se->cap_valid) return;
  now_counted = cap_counts(se, nw);
  se->cap_live += (uint32_t)(now_counted - was_counted);
  if (now_counted && nw->locked_until < se->cap_until) se->cap_until = nw->locked_until;
}

/* Replace session row `old` (NULL: none) by `nw` (NULL: delete), keeping sess_owner in step.
** The entry changes only with the owner: a lease renewal (every owner fetch, every renewal)
** rewrites the session row alone, so it dirties no sess_owner page. */
int dx__lm_sess_put(tx_t *t, const char *sid, const sess_rec_t *old, const sess_rec_t *nw) {
  int same = old && nw && dx__lm_sess_owned(old) && dx__lm_sess_owned(nw) &&
             strcmp(old->owner, nw->owner) == 0;
  unsigned char b[8];
  sess_rec_t row;
  dkey_t k;
  int rc;
  shared_env_t *se = t->se;
  cap_note(se, cap_counts(se, old), nw);
  if (se->own_valid && !same && ((old && dx__lm_sess_owner_is(old, se->own_worker)) ||
                                 (nw && dx__lm_sess_owner_is(nw, se->own_worker))))
    own_forget(se); /* the batch's copy of that worker's sessions is out of date */
  if (!same && old && dx__lm_sess_owned(old)) {
    key_sess_owner(&k, old->owner, sid);
    if ((rc = dx__lm_db_del(t, DB_SESS_OWNER, &k))) return rc;
  }
  if (!same && nw && dx__lm_sess_owned(nw)) {
    key_sess_owner(&k, nw->owner, sid);
    put_u64(b, time_u64(nw->locked_until));
    if ((rc = dx__lm_db_put(t, DB_SESS_OWNER, &k, b, 8, 0))) return rc;
  }
  key_inst(&k, sid);
  if (nw) {
    row = *nw;
    if (!dx__lm_sess_owned(nw)) row.owner = ""; /* unowned is stored as "" */
  }
  if ((rc = dx__lm_keep_sess(t, sid, nw ? &row : NULL))) return rc < 0 ? rc : 0; /* squeue.c */
  if (!nw) return dx__lm_db_del(t, DB_SESSIONS, &k);
  return dx__lm_rec_put(t, &dx__lm_sess_schema, &k, &row);
}

void dx__lm_sess_kept_touch(tx_t *t, sess_rec_t *kr, int64_t now) {
  t->se->batch_writes++; /* a kept change: as after a write */
  kr->last_activity = now;
}

/* (defined below) */
static int users_last_is(const sess_rec_t *r, const char *inst, uint64_t exec);

int dx__lm_sess_kept_fetch(tx_t *t, sess_rec_t *kr, int64_t now, int64_t until,
                           const char *inst, uint64_t exec) {
  shared_env_t *se = t->se;
  int before = cap_counts(se, kr); /* the owner stays: only the live count may change */
  se->batch_writes++; /* a kept change: as after a write */
  kr->last_activity = now;
  if (kr->locked_until < until) kr->locked_until = until;
  cap_note(se, before, kr);
  if (inst && !users_last_is(kr, inst, exec)) {
    char *old = kr->users, *blob;
    int rc = dx__lm_sess_add_user(t, kr, inst, exec, &blob); /* kr->users = blob, or unchanged */
    if (rc) return rc;
    free(old);
  }
  return 0;
}

/* {===== users: the instances that ran activities of a session =====} */

/* 1 when r's users end with (inst, exec) and list inst nowhere else: adding the user again
** changes nothing. 0 also for a malformed blob (dx__lm_sess_add_user reports it). */
static int users_last_is(const sess_rec_t *r, const char *inst, uint64_t exec) {
  const char *b = r->users;
  size_t off = 0, len = r->users_len, n = strlen(inst);
  while (off < len) {
    size_t en;
    int same;
    if (len - off < 10) return 0;
    en = ((size_t)(unsigned char)b[off + 8] << 8) | (unsigned char)b[off + 9];
    if (len - off - 10 < en) return 0;
    same = en == n && memcmp(b + off + 10, inst, n) == 0;
    if (same) return off + 10 + en == len && get_u64(b + off) == exec;
    off += 10 + en;
  }
  return 0;
}

/* Entries are be64 exec, be16 n, n bytes of instance id. Calls fn for each until it returns
** non-zero; a malformed blob is corruption. */
typedef int (*user_fn)(tx_t *t, const char *inst, size_t n, uint64_t exec, void *ud);

static int users_each(tx_t *t, const char *sid, const char *b, size_t len, user_fn fn,
                      void *ud) {
  size_t off = 0;
  while (off < len) {
    uint64_t exec;
    size_t n;
    int rc;
    if (len - off < 10) return dx__lm_corrupt(t, DB_SESSIONS, "bad users", "session '%s'", sid);
    exec = get_u64(b + off);
    n = ((size_t)(unsigned char)b[off + 8] << 8) | (unsigned char)b[off + 9];
    if (len - off - 10 < n) return dx__lm_corrupt(t, DB_SESSIONS, "bad users", "session '%s'", sid);
    if ((rc = fn(t, b + off + 10, n, exec, ud))) return rc < 0 ? rc : 0;
    off += 10 + n;
  }
  return 0;
}

typedef struct {
  char *b;
  size_t n, cap;
  const char *skip; /* add_user: the instance being replaced */
  int first_only;   /* alive_cb: stop at the first live user (counted in n, b stays NULL) */
} ublob_t;

static int ublob_put(tx_t *t, ublob_t *u, const char *inst, size_t n, uint64_t exec) {
  char *nb;
  while (u->n + 10 + n > u->cap) {
    size_t cap = u->cap ? u->cap * 2 : 64;
    if (!(nb = realloc(u->b, cap))) return dx__lm_nomem(t->err);
    u->b = nb;
    u->cap = cap;
  }
  put_u64((unsigned char *)u->b + u->n, exec);
  u->b[u->n + 8] = (char)(n >> 8);
  u->b[u->n + 9] = (char)(n & 0xff);
  memcpy(u->b + u->n + 10, inst, n);
  u->n += 10 + n;
  return 0;
}

static int keep_other_cb(tx_t *t, const char *inst, size_t n, uint64_t exec, void *ud) {
  ublob_t *u = ud;
  if (n == strlen(u->skip) && memcmp(inst, u->skip, n) == 0) return 0;
  return ublob_put(t, u, inst, n, exec);
}

int dx__lm_sess_add_user(tx_t *t, sess_rec_t *nw, const char *inst, uint64_t exec, char **blob) {
  ublob_t u = {NULL, 0, 0, inst, 0};
  size_t n = strlen(inst);
  int rc;
  *blob = NULL;
  if (n > 0xffff) n = 0xffff; /* ids are far shorter (DX_MAX_INSTANCE_ID_BYTES) */
  rc = users_each(t, "", nw->users, nw->users_len, keep_other_cb, &u);
  if (!rc) rc = ublob_put(t, &u, inst, n, exec);
  if (rc) {
    free(u.b);
    return rc;
  }
  *blob = nw->users = u.b;
  nw->users_len = u.n;
  return 0;
}

/* Keep the users whose execution still runs, or continued as new into one that has not had
** its first turn yet (it may use the session again: "continued-as-new without it" only ends
** the session once the new execution ran without scheduling on it). */
static int alive_cb(tx_t *t, const char *inst, size_t n, uint64_t exec, void *ud) {
  ublob_t *u = ud;
  char id[LM_INSTANCE_MAX + 1];
  exec_rec_t er;
  int rc, status;
  if (n > LM_INSTANCE_MAX) return 0; /* cannot name a stored instance */
  memcpy(id, inst, n);
  id[n] = 0;
  rc = dx__lm_exec_get(t, id, exec, &er);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  status = er.status;
  dx__lm_exec_clear(&er);
  if (status == DX_STATUS_CONTINUED_AS_NEW) {
    inst_rec_t ir;
    if ((rc = dx__lm_inst_get(t, id, &ir)) == DX_ENOTFOUND) return 0;
    if (rc) return rc;
    if (ir.current_exec == exec) status = DX_STATUS_RUNNING;
    dx__lm_inst_clear(&ir);
  }
  if (status != DX_STATUS_RUNNING) return 0;
  if (u->first_only) {
    u->n = 1;
    return 1; /* one live user is enough: stop */
  }
  return ublob_put(t, u, inst, n, exec);
}

int dx__lm_sess_ended(tx_t *t, const char *sid, const sess_rec_t *r, int *ended, char **alive,
                      size_t *alive_len) {
  ublob_t u = {NULL, 0, 0, NULL, !alive}; /* no list wanted: the first live user decides */
  sess_queue_t q;
  int rc;
  *ended = 0;
  if (alive) *alive = NULL;
  if (alive_len) *alive_len = 0;
  if ((rc = dx__lm_squeue_get(t, sid, &q)) || q.found) return rc; /* work queued or running */
  if ((rc = users_each(t, sid, r->users, r->users_len, alive_cb, &u))) {
    free(u.b);
    return rc;
  }
  *ended = u.n == 0;
  if (alive && u.n) {
    *alive = u.b;
    *alive_len = u.n;
  } else {
    free(u.b);
  }
  return 0;
}

/* Session rows handed to callbacks after the read or write txn ended. */
typedef struct {
  char *sid, *owner;
  int64_t locked_until, last_activity;
  uint64_t queued, running;
  int ended;
} sess_out_t;

typedef struct {
  sess_out_t *v;
  size_t n, cap;
} sess_list_t;

static void slist_free(sess_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) {
    free(l->v[i].sid);
    free(l->v[i].owner);
  }
  free(l->v);
  memset(l, 0, sizeof *l);
}

static int slist_push(tx_t *t, sess_list_t *l, const char *sid, const sess_rec_t *r, int ended) {
  sess_queue_t q;
  sess_out_t *o, *nv;
  int rc;
  if ((rc = dx__lm_squeue_get(t, sid, &q))) return rc;
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
  l->v = nv;
  o = &l->v[l->n];
  memset(o, 0, sizeof *o);
  if (!(o->sid = dx__strdup(sid)) || (r->owner && !(o->owner = dx__strdup(r->owner)))) {
    free(o->sid);
    return dx__lm_nomem(t->err);
  }
  o->locked_until = r->locked_until;
  o->last_activity = r->last_activity;
  o->queued = q.rows;
  o->ended = ended;
  l->n++;
  return 0;
}

/* Call cb for each collected row until it returns non-zero. */
static void slist_report(const sess_list_t *l, dx_session_cb cb, void *ud) {
  size_t i;
  for (i = 0; cb && i < l->n; i++) {
    dx_session_info_t s;
    s.session_id = l->v[i].sid;
    s.worker_id = l->v[i].owner;
    s.locked_until_ms = l->v[i].locked_until;
    s.last_activity_ms = l->v[i].last_activity;
    s.queued = l->v[i].queued;
    s.running = l->v[i].running;
    s.ended = l->v[i].ended;
    if (cb(ud, &s)) break;
  }
}

typedef struct {
  str_list_t l;
  size_t prefix_n;
} owned_ids_t;

static int owned_ids_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  owned_ids_t *o = ud;
  if (k->mv_size <= o->prefix_n || ((const char *)k->mv_data)[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_SESS_OWNER, "bad key", "%zu-byte key", k->mv_size);
  return dx__lm_strs_push(&o->l, (const char *)k->mv_data + o->prefix_n) ? dx__lm_nomem(t->err) : 0;
}

/* Ids of the sessions `worker` owns (any lease state), in session id order. */
static int owned_ids(tx_t *t, const char *worker, str_list_t *out) {
  owned_ids_t o;
  dkey_t pre;
  int rc;
  memset(&o, 0, sizeof o);
  key_inst(&pre, worker);
  o.prefix_n = pre.n;
  rc = dx__lm_scan_prefix(t, DB_SESS_OWNER, &pre, owned_ids_cb, &o);
  if (rc) dx__lm_strs_free(&o.l);
  else *out = o.l;
  return rc;
}

static int sess_renew(tx_t *t, int64_t now, const char *worker, int64_t extend_ms,
                      int64_t idle_ms, sess_list_t *out) {
  str_list_t ids = {NULL, 0, 0};
  size_t i;
  int rc = owned_ids(t, worker, &ids);
  for (i = 0; i < ids.n && !rc; i++) {
    sess_rec_t r, nw;
    rc = dx__lm_sess_get(t, ids.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc && dx__lm_sess_owner_is(&r, worker) && r.locked_until > now &&
        (idle_ms <= 0 || sat_add(r.last_activity, idle_ms) > now)) {
      char *alive = NULL;
      int ended = 0;
      nw = r;
      nw.locked_until = sat_add(now, extend_ms);
      /* users whose instance ended are dropped; none left and no rows: the session ended */
      rc = dx__lm_sess_ended(t, ids.v[i], &r, &ended, &alive, &nw.users_len);
      nw.users = alive;
      if (!rc) rc = dx__lm_sess_put(t, ids.v[i], &r, &nw);
      if (!rc) rc = slist_push(t, out, ids.v[i], &nw, ended);
      free(alive);
    }
    dx__lm_sess_clear(&r);
  }
  dx__lm_strs_free(&ids);
  return rc;
}

int dx__lm_renew_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                          int64_t extend_ms, int64_t idle_ms, dx_session_cb cb, void *ud,
                          uint64_t *renewed, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  sess_list_t l = {NULL, 0, 0};
  tx_t t;
  int rc;
  if (renewed) *renewed = 0;
  if ((rc = dx__check_worker_id(worker_id, err))) return rc;
  LM_WRITE(p, t, err, rc, sess_renew(&t, now, worker_id, extend_ms, idle_ms, &l), slist_free(&l));
  if (!rc) {
    if (renewed) *renewed = l.n;
    slist_report(&l, cb, ud); /* after the commit: callbacks may call the provider */
  }
  slist_free(&l);
  return rc;
}

/* Give up ownership: owner "" (previous owner = worker), lease ends now. */
static int sess_release(tx_t *t, int64_t now, const char *worker, const char *sid,
                        uint64_t *count) {
  str_list_t ids = {NULL, 0, 0};
  size_t i;
  int rc = sid ? (dx__lm_strs_push(&ids, sid) ? dx__lm_nomem(t->err) : 0)
               : owned_ids(t, worker, &ids);
  for (i = 0; i < ids.n && !rc; i++) {
    sess_rec_t r, nw;
    rc = dx__lm_sess_get(t, ids.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc && dx__lm_sess_owner_is(&r, worker)) {
      nw = r;
      nw.owner = "";
      nw.prev = (char *)worker;
      nw.locked_until = now;
      rc = dx__lm_sess_put(t, ids.v[i], &r, &nw);
      if (!rc) (*count)++;
    }
    dx__lm_sess_clear(&r);
  }
  dx__lm_strs_free(&ids);
  return rc;
}

int dx__lm_release_sessions(dx_provider_t *pp, int64_t now, const char *worker_id,
                            const char *session_id, uint64_t *released, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t n = 0;
  tx_t t;
  int rc;
  if (released) *released = 0;
  if ((rc = dx__check_worker_id(worker_id, err))) return rc;
  /* direct in a batch: only a store error fails it after its first write */
  LM_WRITE_DIRECT(p, t, err, rc, sess_release(&t, now, worker_id, session_id, &n), n = 0);
  if (!rc && n) p->claims_over[0] = 0; /* room again: the batch may claim (work.c claims_over) */
  if (!rc && released) *released = n;
  return rc;
}

typedef struct {
  int64_t now;
  int orphans_only;   /* 1: collect only rows cleanup deletes; 0: every row */
  str_list_t ids;     /* orphans_only */
  sess_list_t rows;   /* !orphans_only */
} sess_scan_t;

typedef struct {
  size_t prefix_n;
  uint64_t running;
} running_scan_t;

static int running_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  running_scan_t *s = ud;
  work_row_t r;
  int rc;
  (void)v;
  if (k->mv_size != s->prefix_n + 16)
    return dx__lm_corrupt(t, DB_SESS_ITEMS, "bad key", "%zu-byte key", k->mv_size);
  if ((rc = dx__lm_row_get(t, get_u64((const char *)k->mv_data + s->prefix_n + 8), &r))) return rc;
  if (r.token) s->running++;
  dx__lm_row_clear(&r);
  return 0;
}

/* For listings: how many rows of the last listed session are locked (in flight). */
static int count_running(tx_t *t, sess_list_t *l) {
  sess_out_t *o = &l->v[l->n - 1];
  running_scan_t s;
  dkey_t pre;
  int rc;
  key_inst(&pre, o->sid);
  s.prefix_n = pre.n;
  s.running = 0;
  if (!o->queued) return 0;
  rc = dx__lm_scan_prefix(t, DB_SESS_ITEMS, &pre, running_cb, &s);
  o->running = s.running;
  return rc;
}

static int sess_scan_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sess_scan_t *s = ud;
  const char *sid = k->mv_data;
  sess_rec_t r;
  sess_queue_t q;
  int rc;
  if (k->mv_size == 0 || sid[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_SESSIONS, "bad key", "%zu-byte key", k->mv_size);
  if ((rc = sess_decode(t, &dx__lm_sess_schema, sid, v, &r))) return rc;
  if (!s->orphans_only) {
    if (!(rc = slist_push(t, &s->rows, sid, &r, 0))) rc = count_running(t, &s->rows);
  } else if (!dx__lm_sess_owned(&r) || r.locked_until <= s->now) {
    if (!(rc = dx__lm_squeue_get(t, sid, &q)) && !q.found && dx__lm_strs_push(&s->ids, sid))
      rc = dx__lm_nomem(t->err);
  }
  dx__lm_sess_clear(&r);
  return rc;
}

static int sess_cleanup(tx_t *t, int64_t now, uint64_t *count) {
  sess_scan_t s;
  dkey_t none;
  size_t i;
  int rc;
  memset(&s, 0, sizeof s);
  s.now = now;
  s.orphans_only = 1;
  k_init(&none);
  rc = dx__lm_scan_prefix(t, DB_SESSIONS, &none, sess_scan_cb, &s);
  if (!rc) rc = dx__lm_prune_session_events(t, now);
  for (i = 0; i < s.ids.n && !rc; i++) {
    sess_rec_t r;
    rc = dx__lm_sess_get(t, s.ids.v[i], &r);
    if (!rc) rc = dx__lm_sess_put(t, s.ids.v[i], &r, NULL);
    if (!rc) (*count)++;
    dx__lm_sess_clear(&r);
  }
  dx__lm_strs_free(&s.ids);
  return rc;
}

int dx__lm_cleanup_sessions(dx_provider_t *pp, int64_t now, uint64_t *deleted,
                            dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t n = 0;
  tx_t t;
  int rc;
  if (deleted) *deleted = 0;
  LM_WRITE(p, t, err, rc, sess_cleanup(&t, now, &n), n = 0);
  if (!rc && deleted) *deleted = n;
  return rc;
}

/* Sessions with queued work but no row yet (never claimed: held back by capacity, or no
** worker takes session work) are listed too, unowned: their queue is what an operator needs. */
static int unclaimed_scan_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sess_scan_t *s = ud;
  const char *sid = k->mv_data;
  sess_rec_t r;
  int rc;
  (void)v;
  if (k->mv_size == 0 || sid[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_SESS_QUEUE, "bad key", "%zu-byte key", k->mv_size);
  rc = dx__lm_sess_get(t, sid, &r);
  if (rc == DX_ENOTFOUND) {
    memset(&r, 0, sizeof r);
    if (!(rc = slist_push(t, &s->rows, sid, &r, 0))) rc = count_running(t, &s->rows);
  }
  dx__lm_sess_clear(&r);
  return rc;
}

int dx__lm_list_sessions(dx_provider_t *pp, dx_session_cb cb, void *ud, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  sess_scan_t s;
  dkey_t none;
  tx_t t;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  memset(&s, 0, sizeof s);
  k_init(&none);
  rc = dx__lm_scan_prefix(&t, DB_SESSIONS, &none, sess_scan_cb, &s);
  if (!rc) rc = dx__lm_scan_prefix(&t, DB_SESS_QUEUE, &none, unclaimed_scan_cb, &s);
  rc = dx__lm_tx_end(&t, rc);
  if (!rc) slist_report(&s.rows, cb, ud);
  slist_free(&s.rows);
  return rc;
}
