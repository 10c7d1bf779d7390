/*
** orch.c -- LMDB provider: the orchestrator queue: messages, per-instance lock state, fetch, ack,
** abandon, renew.
*/
#include "lmdb_int.h"

static void msgs_free(msg_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) free(l->v[i].item);
  free(l->v);
  l->v = NULL;
  l->n = l->cap = 0;
}

static int msgs_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  msg_list_t *l = ud;
  orch_msg_t *m;
  int rc;
  lm_what_t w = {"instance '%s' message %llu", l->inst, 0};
  orch_msg_t *nv;
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
  l->v = nv;
  m = &l->v[l->n];
  memset(m, 0, sizeof *m);
  m->seq = k->mv_size == l->prefix_n + 8 ? get_u64((const char *)k->mv_data + l->prefix_n) : 0;
  w.n = m->seq;
  if (m->seq == 0)
    return dx__lm_corrupt(t, DB_ORCH_MSGS, "bad key", "instance '%s' message 0", l->inst);
  if ((rc = dx__lm_msg_decode_direct(v, m, l->heads)) == DX_ENOMEM) return dx__lm_nomem(t->err);
  if (rc && (rc = dx__lm_rec_decode_as(t, l->heads ? &dx__lm_msg_head_schema : &dx__lm_msg_schema,
                                       v, m, &w)))
    return rc;
  l->n++;
  return 0;
}

/* Every message of one instance, oldest first; heads: without their items. *stored (when
** not NULL): how many of them came from the B-tree (the first ones). */
static int msgs_read_n(tx_t *t, const char *inst, msg_list_t *l, int heads, size_t *stored) {
  dkey_t k;
  int rc;
  memset(l, 0, sizeof *l);
  l->inst = inst;
  l->heads = heads;
  key_inst(&k, inst);
  l->prefix_n = k.n;
  rc = dx__lm_scan_prefix(t, DB_ORCH_MSGS, &k, msgs_cb, l);
  if (stored) *stored = l->n;
  if (!rc) rc = dx__lm_kmsg_list(t, l); /* kept in the batch (kmsgs.c): the newest */
  if (rc) msgs_free(l);
  return rc;
}

static int msgs_read(tx_t *t, const char *inst, msg_list_t *l, int heads) {
  return msgs_read_n(t, inst, l, heads, NULL);
}

static int msgs_load(tx_t *t, const char *inst, msg_list_t *l) { return msgs_read(t, inst, l, 0); }

/* Rewrite a message (a kept one in memory, kmsgs.c). */
static int msg_put(tx_t *t, const char *inst, const orch_msg_t *m) {
  dkey_t k;
  int rc = dx__lm_kmsg_put(t, inst, m);
  if (rc) return rc < 0 ? rc : 0;
  key_inst(&k, inst);
  k_u64(&k, m->seq);
  return dx__lm_rec_put(t, &dx__lm_msg_schema, &k, m);
}

static int msg_del(tx_t *t, const char *inst, uint64_t seq) {
  dkey_t k;
  int rc = dx__lm_kmsg_del(t, inst, seq);
  if (rc) return rc < 0 ? rc : 0;
  key_inst(&k, inst);
  k_u64(&k, seq);
  return dx__lm_db_del(t, DB_ORCH_MSGS, &k);
}

/* The ack's read of the instance's messages (msgs_read), then the delete of those in lock st:
** the stored ones in one walk from the first of them (a cursor delete each, where a delete per
** message searched the B-tree again). Every message is read before the first delete, so a
** damaged one refuses the ack before it writes anything (the batch stays usable). */
static int msgs_take(tx_t *t, const char *inst, const orch_state_t *st, msg_list_t *l,
                     int heads) {
  dkey_t k;
  MDB_cursor *c;
  MDB_val key, v;
  size_t stored, first, last, i;
  int rc, mrc = 0;
  if ((rc = msgs_read_n(t, inst, l, heads, &stored))) return rc;
  for (first = 0; first < stored && !dx__lm_msg_in_lock(st, &l->v[first]); first++) {}
  for (last = stored; last > first && !dx__lm_msg_in_lock(st, &l->v[last - 1]); last--) {}
  if (first < last) {
    if ((rc = dx__lm_cursor(t, DB_ORCH_MSGS, &c))) {
      msgs_free(l);
      return rc;
    }
    key_inst(&k, inst);
    k_u64(&k, l->v[first].seq);
    key = kval(&k);
    for (i = first; i < last && !rc; i++) {
      /* (after a delete, MDB_NEXT gives the one after it) */
      mrc = mdb_cursor_get(c, &key, &v, i == first ? MDB_SET_RANGE : MDB_NEXT);
      if (mrc) break;
      /* the walk meets the records the read found, in the same txn */
      if (key.mv_size != l->prefix_n + 8 ||
          get_u64((const char *)key.mv_data + l->prefix_n) != l->v[i].seq) {
        rc = dx_error_set(t->err, DX_ESTORE, "internal error: instance '%s' message %llu "
                          "not where the ack read it", inst, (unsigned long long)l->v[i].seq);
        break;
      }
      if (dx__lm_msg_in_lock(st, &l->v[i])) rc = dx__lm_cursor_del(t, DB_ORCH_MSGS, c);
    }
    dx__lm_cursor_done(t, DB_ORCH_MSGS, c);
    if (!rc && mrc) rc = dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_ORCH_MSGS]);
  }
  for (i = stored; i < l->n && !rc; i++)
    if (dx__lm_msg_in_lock(st, &l->v[i])) rc = msg_del(t, inst, l->v[i].seq);
  if (rc) msgs_free(l);
  return rc;
}

/* Delete the messages of `l` visible at `now`. */
static int msgs_delete(tx_t *t, const msg_list_t *l, int64_t now) {
  size_t i;
  int rc;
  for (i = 0; i < l->n; i++)
    if (l->v[i].visible_at <= now && (rc = msg_del(t, l->inst, l->v[i].seq))) return rc;
  return 0;
}

/* The index entry a state implies: DB_ORCH_LOCK, DB_ORCH_READY or -1 (none). */
int dx__lm_state_index(const char *inst, const orch_state_t *s, dkey_t *k) {
  if (s->token) { key_timed(k, s->locked_until, inst); return DB_ORCH_LOCK; }
  if (s->ready_at != LM_NEVER) { key_timed(k, s->ready_at, inst); return DB_ORCH_READY; }
  return -1;
}

/* {===== instances made ready or locked in the batch =====}
** An instance without lock state (no messages, not locked) that gets a message from a direct
** method inside a batch (an activity's result acked, a message from another turn) becomes
** ready in memory (shared_env_t.rpend) instead of by a state record and a ready index entry:
** the cycle's orchestration fetch, later in the same transaction, takes it from there.
** The lock that fetch takes stays in the same entry (st.token set), and so does the lock of
** an instance whose stored ready state the fetch takes (its index entry goes; its record stays
** for the flush to write the lock over, or goes when the lock does: rpend_t.stored): with held
** rounds the turn's ack comes in the same batch and releases it, so a turn writes no state and
** no index entry where it wrote four or five (ready out, lock in, state; lock out, state out).
** Entries left are written as they would have been before any other method of the batch runs
** and at commit (with the queued worker rows: dx__lm_pend_flush); they vanish with a batch that
** does not commit, which is all a lock taken in it could do anyway. Only this thread's direct
** methods look at them (t->direct): the pick takes a kept lock that lapsed as it takes an
** expired stored one, the dead-lock sweep looks at kept locks too. */

typedef struct rpend_s {
  char *inst;        /* NULL: taken */
  int64_t ready_at;  /* ready in memory (st.token 0) */
  orch_state_t st;   /* st.token set: locked in memory (ready_at unused) */
  int stored;        /* a state record is stored (no index entry): the write overwrites it, a
                        take that leaves nothing deletes it */
} rpend_t;

static int state_set_db(tx_t *t, const char *inst, const orch_state_t *old,
                        const orch_state_t *nw);

static rpend_t *rpend_find(shared_env_t *se, const char *inst) {
  size_t at;
  if (!se->rpend_live) return NULL;
  at = dx__lm_strix_find(&se->rpend_ix, se->rpend, sizeof *se->rpend, inst);
  return at ? &se->rpend[at - 1] : NULL;
}

/* Entry e holds lock nw. A change in memory cannot be undone: a failure after it spoils the
** batch, as after a write. */
static void rpend_lock(shared_env_t *se, rpend_t *e, const orch_state_t *nw) {
  if (!e->st.token) se->rpend_locks++;
  e->st = *nw;
  if (nw->locked_until < se->rpend_lock_min) se->rpend_lock_min = nw->locked_until;
  se->batch_writes++;
}

/* A new entry: ready at nw->ready_at, or holding lock nw; stored: see rpend_t. */
static int rpend_add(tx_t *t, const char *inst, const orch_state_t *nw, int stored) {
  shared_env_t *se = t->se;
  rpend_t *nv;
  if (!(nv = dx__lm_grow(se->rpend, &se->rpend_cap, se->rpend_n, sizeof *se->rpend)))
    return dx__lm_nomem(t->err);
  se->rpend = nv;
  if (dx__lm_strix_push(&se->rpend_ix, nv, sizeof *nv, se->rpend_n, inst))
    return dx__lm_nomem(t->err);
  se->rpend_n++;
  se->rpend_live++;
  se->batch_writes++; /* a failure after this spoils the batch, as after a write */
  nv[se->rpend_n - 1].stored = stored;
  if (nw->token) {
    nv[se->rpend_n - 1].ready_at = LM_NEVER;
    rpend_lock(se, &nv[se->rpend_n - 1], nw);
    return 0;
  }
  nv[se->rpend_n - 1].ready_at = nw->ready_at;
  if (nw->ready_at > se->rpend_last_at) se->rpend_last_at = nw->ready_at;
  else if (nw->ready_at < se->rpend_last_at) se->rpend_unsorted = 1;
  return 0;
}

static void rpend_take(shared_env_t *se, rpend_t *e) {
  free(e->inst);
  e->inst = NULL; /* stays in the table as a tombstone until the batch ends */
  se->rpend_live--;
  if (e->st.token && !--se->rpend_locks) se->rpend_lock_min = LM_NEVER;
  se->batch_writes++;
}

void dx__lm_rpend_drop(shared_env_t *se) {
  size_t i;
  for (i = 0; i < se->rpend_n; i++) free(se->rpend[i].inst);
  se->rpend_n = se->rpend_live = se->rpend_first = se->rpend_ready_first = se->rpend_locks = 0;
  se->rpend_unsorted = 0;
  se->rpend_last_at = INT64_MIN; /* (no ready entry yet) */
  se->rpend_lock_min = LM_NEVER;
  dx__lm_strix_clear(&se->rpend_ix);
}

int dx__lm_rpend_write(tx_t *t) {
  shared_env_t *se = t->se;
  size_t i;
  int rc = 0;
  for (i = 0; i < se->rpend_n && !rc; i++) {
    orch_state_t nw = STATE_EMPTY;
    if (!se->rpend[i].inst) continue;
    if (se->rpend[i].st.token) nw = se->rpend[i].st;
    else nw.ready_at = se->rpend[i].ready_at;
    rc = state_set_db(t, se->rpend[i].inst, &STATE_EMPTY, &nw);
  }
  return rc;
}

/* Replace state `old` by `nw`. In this thread's batch an instance made ready or locked in
** memory has no stored index entry; one without stored state that becomes ready or locked
** stays in memory, and so does the lock of a stored ready one: its index entry goes at once
** (the picks walk the index), its record stays until the batch writes the lock over it (one
** record write where a delete and a write were) or the lock goes without a trace (deleted
** then). */
static int state_set(tx_t *t, const char *inst, const orch_state_t *old, const orch_state_t *nw) {
  rpend_t *e;
  dkey_t k;
  int rc, db, stored = 0;
  if (!t->direct) return state_set_db(t, inst, old, nw);
  if ((e = rpend_find(t->se, inst))) {
    if (nw->token) { /* locked, renewed or lapsed: in place */
      rpend_lock(t->se, e, nw);
      return 0;
    }
    if (!e->st.token && nw->ready_at != LM_NEVER) { /* still ready: at another time */
      if (nw->ready_at != e->ready_at) t->se->rpend_unsorted = 1;
      e->ready_at = nw->ready_at;
      return 0;
    }
    stored = e->stored;
    rpend_take(t->se, e); /* (a released lock that stays ready: a new entry, in time order) */
    old = &STATE_EMPTY;
  }
  if (!old->token && old->ready_at == LM_NEVER) { /* nothing stored but maybe a record */
    if (!nw->token && nw->ready_at == LM_NEVER) {
      if (!stored) return 0;
      key_inst(&k, inst);
      rc = dx__lm_db_del(t, DB_ORCH_STATE, &k);
      dx__lm_state_keep(t, inst, rc ? NULL : &STATE_EMPTY);
      return rc;
    }
    return rpend_add(t, inst, nw, stored);
  }
  if (nw->token && !old->token) { /* a stored ready instance locked: kept from now on */
    if ((db = dx__lm_state_index(inst, old, &k)) >= 0 &&
        (rc = dx__lm_idx_op(t, db, &k, NULL, 0, 0)))
      return rc;
    dx__lm_state_keep(t, inst, NULL); /* the entry answers for it */
    return rpend_add(t, inst, nw, 1);
  }
  return state_set_db(t, inst, old, nw);
}

/* 0 or an error; a missing record reads as STATE_EMPTY. */
int dx__lm_state_get(tx_t *t, const char *inst, orch_state_t *s) {
  dkey_t k;
  lm_what_t w = {"instance '%s'", inst, 0};
  rpend_t *e;
  int rc;
  *s = STATE_EMPTY;
  if (t->direct && (e = rpend_find(t->se, inst))) { /* in memory: nothing stored */
    if (e->st.token) *s = e->st;
    else s->ready_at = e->ready_at;
    return 0;
  }
  if (dx__lm_state_kept(t, inst, s)) return 0;
  key_inst(&k, inst);
  rc = dx__lm_rec_get_as(t, &dx__lm_state_schema, &k, s, &w);
  if (rc == DX_ENOTFOUND) rc = 0;
  if (!rc && t->direct) dx__lm_state_keep(t, inst, s);
  return rc;
}

/* Replace state `old` by `nw`, moving the instance between the ready and lock indexes. */
static int state_set_db(tx_t *t, const char *inst, const orch_state_t *old,
                        const orch_state_t *nw) {
  dkey_t k;
  int db, rc;
  if ((db = dx__lm_state_index(inst, old, &k)) >= 0 && (rc = dx__lm_idx_op(t, db, &k, NULL, 0, 0)))
    return rc;
  db = dx__lm_state_index(inst, nw, &k);
  if (db >= 0 && (rc = dx__lm_idx_op(t, db, &k, "", 0, 1))) return rc;
  key_inst(&k, inst);
  if (db < 0) rc = dx__lm_db_del(t, DB_ORCH_STATE, &k);
  else rc = dx__lm_rec_put(t, nw->batch_seq ? &dx__lm_state_schema : &dx__lm_state3_schema, &k, nw);
  dx__lm_state_keep(t, inst, rc ? NULL : db < 0 ? &STATE_EMPTY : nw);
  return rc;
}

/* Unlock the instance; it becomes ready at `ready_at` (LM_NEVER: not queued). */
static int orch_release_at(tx_t *t, const char *inst, const orch_state_t *old,
                           int64_t ready_at) {
  orch_state_t nw = STATE_EMPTY;
  nw.ready_at = ready_at;
  return state_set(t, inst, old, &nw);
}

/* Unlock the instance; it becomes ready at its earliest remaining message, if any. */
static int orch_release(tx_t *t, const char *inst, const orch_state_t *old) {
  msg_list_t l;
  int64_t at = LM_NEVER;
  size_t i;
  int rc = msgs_read(t, inst, &l, 1);
  if (rc) return rc;
  for (i = 0; i < l.n; i++)
    if (l.v[i].visible_at < at) at = l.v[i].visible_at;
  msgs_free(&l);
  return orch_release_at(t, inst, old, at);
}

/* Store a message for item->instance. A locked instance is re-indexed by ack or abandon. */
int dx__lm_orch_enqueue(tx_t *t, const dx_work_item_t *w, int64_t visible_at) {
  orch_msg_t m;
  orch_state_t old, nw;
  int rc;
  if (t->nested) t->se->batch_wrote = 1;
  memset(&m, 0, sizeof m);
  m.visible_at = visible_at;
  if (dx__work_item_encode(w, &m.item, &m.item_len)) return dx__lm_nomem(t->err);
  rc = dx__lm_next_seq(t, &m.seq);
  if (!rc && (rc = dx__lm_kmsg_add(t, w->instance, &m)) == 0) rc = msg_put(t, w->instance, &m);
  else if (rc > 0) rc = 0; /* kept in the batch (kmsgs.c) */
  if (!rc && w->kind == DX_WI_START) rc = dx__lm_lidx_start(t, m.seq, w->instance, w->name, 1);
  free(m.item);
  if (!rc) rc = dx__lm_state_get(t, w->instance, &old);
  if (rc || old.token || old.ready_at <= visible_at) return rc;
  nw = old;
  nw.ready_at = visible_at;
  return state_set(t, w->instance, &old, &nw);
}

/* Validate a lock: unknown or other token -> DX_ETOKEN; expired (when need_live) -> DX_ELOCK. */
static int orch_check_lock(tx_t *t, const char *inst, uint64_t token, int64_t now, int need_live,
                           orch_state_t *s) {
  int rc = dx__lm_state_get(t, inst, s);
  if (rc) return rc;
  if (token == 0 || s->token != token)
    return dx_error_set(t->err, DX_ETOKEN, "instance '%s' is not locked with token %llx", inst,
                        (unsigned long long)token);
  if (need_live && s->locked_until <= now)
    return dx_error_set(t->err, DX_ELOCK, "the lock on instance '%s' expired at %lld (now %lld)",
                        inst, (long long)s->locked_until, (long long)now);
  return 0;
}

/* {===== liveness: instances locked by dead handles =====} */

static int timed_inst_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  (void)v;
  if (k->mv_size < 10 || ((const char *)k->mv_data)[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_ORCH_LOCK, "bad key", "%zu-byte key", k->mv_size);
  return dx__lm_strs_push(ud, (const char *)k->mv_data + 8) ? dx__lm_nomem(t->err) : 0;
}

/* Instances whose lock is live but whose locker (another handle) is dead: the lock expires
** now, so the next pick takes them (as a lapsed lock: the attempt counts). */
int dx__lm_orch_reap_dead(tx_t *t, lm_t *p, int64_t now) {
  str_list_t l = {NULL, 0, 0};
  dkey_t none;
  size_t i;
  int rc;
  k_init(&none);
  rc = dx__lm_scan_prefix(t, DB_ORCH_LOCK, &none, timed_inst_cb, &l);
  for (i = 0; i < l.n && !rc; i++) {
    orch_state_t st, nw;
    if ((rc = dx__lm_state_get(t, l.v[i], &st))) break;
    if (!st.token || st.locked_until <= now || dx__lm_live_locker_alive(p, st.locker)) continue;
    nw = st;
    nw.locked_until = now;
    rc = state_set(t, l.v[i], &st, &nw);
  }
  dx__lm_strs_free(&l);
  for (i = 0; t->direct && i < t->se->rpend_n && !rc; i++) { /* locks kept in memory */
    rpend_t *e = &t->se->rpend[i];
    if (e->inst && e->st.token && e->st.locked_until > now &&
        !dx__lm_live_locker_alive(p, e->st.locker)) {
      orch_state_t nw = e->st;
      nw.locked_until = now;
      rpend_lock(t->se, e, &nw);
    }
  }
  return rc;
}

/* {===== orchestrator fetch =====} */

void dx__lm_cand_clear(orch_cand_t *c) {
  free(c->inst);
  c->inst = NULL;
  if (c->msgs_held) msgs_free(&c->msgs);
  if (c->ir_held > 0) dx__lm_inst_clear(&c->ir);
  c->msgs_held = c->ir_held = 0;
}

/* Make the timed-index entry `k` (be64 time + inst\0) the candidate. */
static int cand_set(tx_t *t, orch_cand_t *c, int db, const MDB_val *k, int64_t at) {
  char *inst = dx__strdup((const char *)k->mv_data + 8);
  if (!inst) return dx__lm_nomem(t->err);
  dx__lm_cand_clear(c);
  c->inst = inst;
  c->db = db;
  c->at = at;
  k_init(&c->key);
  k_bytes(&c->key, k->mv_data, k->mv_size);
  return 0;
}

static int timed_key_ok(tx_t *t, int db, const MDB_val *k) {
  if (k->mv_size < 10 || ((const char *)k->mv_data)[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, db, "bad key", "%zu-byte key", k->mv_size);
  return 0;
}

/* Consider the head of a timed index (be64 time + inst\0); keep the older candidate. */
int dx__lm_orch_head(tx_t *t, int db, int64_t now, orch_cand_t *c) {
  dkey_t none;
  MDB_val k;
  int64_t at;
  int rc;
  if (dx__lm_floor_after(t, db, now)) return 0; /* nothing due there (this batch knows) */
  k_init(&none);
  rc = dx__lm_head_key(t, db, &none, &k);
  if (rc == DX_ENOTFOUND) {
    dx__lm_floor_learn(t, db, LM_NEVER);
    return 0;
  }
  if (rc || (rc = timed_key_ok(t, db, &k))) return rc;
  at = (int64_t)get_u64(k.mv_data);
  dx__lm_floor_learn(t, db, at);
  if (at > now || (c->inst && c->at <= at)) return 0;
  return cand_set(t, c, db, &k, at);
}

static int starts_instance(const dx_work_item_t *w);
static int msg_decode(tx_t *t, const msg_list_t *l, size_t i, dx_work_item_t *w);

/* Rolling deployments: may a worker with filter `f` run instance `inst`? A visible start or
** continue-as-new names the orchestration (and maybe a version), else the instance record
** does; an instance known by neither is taken (its turn drops or parks the messages). */
/* What it read is left in `keep` (msgs_held, ir_held) for the lock that may follow. */
static int orch_runnable(tx_t *t, const dx_fetch_filter_t *f, const char *inst, int64_t now,
                         int *ok, orch_cand_t *keep) {
  msg_list_t l;
  size_t i;
  int rc = 0, found = 0;
  *ok = 1;
  if ((rc = msgs_load(t, inst, &l))) return rc;
  for (i = 0; i < l.n && !found && !rc; i++) {
    dx_work_item_t w;
    int kind = dx__work_item_peek_kind(l.v[i].item, l.v[i].item_len);
    /* only a start names the orchestration: others need no decoding (the fetch decodes them) */
    if (l.v[i].visible_at > now || (kind > 0 && kind != DX_WI_START && kind != DX_WI_CAN))
      continue;
    if ((rc = msg_decode(t, &l, i, &w))) continue;
    if (starts_instance(&w)) {
      found = 1;
      *ok = dx_fetch_filter_accepts_orch(f, w.name, w.version);
    }
    dx_work_item_clear(&w);
  }
  if (rc) {
    msgs_free(&l);
    return rc;
  }
  keep->msgs = l;
  keep->msgs_held = 1;
  if (found) return 0;
  rc = dx__lm_inst_get(t, inst, &keep->ir);
  if (rc == DX_ENOTFOUND) {
    keep->ir_held = -1;
    return 0;
  }
  if (rc) return rc;
  keep->ir_held = 1;
  *ok = dx_fetch_filter_accepts_orch(f, keep->ir.name, keep->ir.version);
  return 0;
}

typedef struct {
  const dx_fetch_filter_t *f;
  int db;
  int64_t now;
  orch_cand_t *c;
  int seen; /* an entry was visited (the first is the index's head) */
} orch_scan_t;

/* Timed index in order: the first due instance this worker can run is the candidate. */
static int orch_scan_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  orch_scan_t *s = ud;
  orch_cand_t read;
  int64_t at;
  int ok, rc;
  (void)v;
  if ((rc = timed_key_ok(t, s->db, k))) return rc;
  at = (int64_t)get_u64(k->mv_data);
  if (!s->seen++) dx__lm_floor_learn(t, s->db, at);
  if (at > s->now || (s->c->inst && s->c->at <= at)) return 1;
  memset(&read, 0, sizeof read);
  rc = orch_runnable(t, s->f, (const char *)k->mv_data + 8, s->now, &ok, &read);
  if (!rc && ok && !(rc = cand_set(t, s->c, s->db, k, at))) {
    s->c->msgs = read.msgs; /* the candidate takes what was read */
    s->c->msgs_held = read.msgs_held;
    s->c->ir = read.ir;
    s->c->ir_held = read.ir_held;
    s->c->msgs.inst = s->c->inst; /* the key's bytes do not outlive a write */
    return 1;
  }
  dx__lm_cand_clear(&read);
  return rc ? rc : 0;
}

/* Make kept entry e (ready or lapsed lock at `at`) the candidate when the filter takes it
** (db -1: in memory, no index entry). */
static int rpend_cand(tx_t *t, const dx_fetch_filter_t *f, const rpend_t *e, int64_t at,
                      int64_t now, orch_cand_t *c) {
  orch_cand_t read;
  char *inst;
  int ok = 1, rc;
  memset(&read, 0, sizeof read);
  if (f && f->capabilities_set && (rc = orch_runnable(t, f, e->inst, now, &ok, &read))) return rc;
  if (!ok || !(inst = dx__strdup(e->inst))) {
    dx__lm_cand_clear(&read);
    return ok ? dx__lm_nomem(t->err) : 0;
  }
  dx__lm_cand_clear(c);
  *c = read; /* the candidate takes what was read (nothing without a filter) */
  c->inst = inst;
  c->msgs.inst = inst;
  c->db = -1;
  c->at = at;
  k_init(&c->key);
  return 0;
}

/* Instances made ready in this batch (in memory) compete with the index heads: an earlier
** ready time wins, a tie goes to the stored entry (it was queued first). While the entries are
** in ready-time order (made ready as their messages came), the walk ends at the first one
** that is not due or does not beat the candidate, or that the filter takes. Locks kept in
** memory compete once one may have lapsed (rpend_lock_min), as expired stored locks do. */
static int rpend_pick(tx_t *t, const dx_fetch_filter_t *f, int64_t now, orch_cand_t *c) {
  shared_env_t *se = t->se;
  size_t i;
  int rc = 0;
  if (!t->direct) return 0;
  while (se->rpend_first < se->rpend_n && !se->rpend[se->rpend_first].inst) se->rpend_first++;
  /* an entry that is not ready never becomes ready again (a released lock that stays ready
  ** is a new entry): the walk starts past the first ones that are not */
  if (se->rpend_ready_first < se->rpend_first) se->rpend_ready_first = se->rpend_first;
  while (se->rpend_ready_first < se->rpend_n &&
         (!se->rpend[se->rpend_ready_first].inst || se->rpend[se->rpend_ready_first].st.token))
    se->rpend_ready_first++;
  for (i = se->rpend_ready_first; i < se->rpend_n && se->rpend_live > se->rpend_locks && !rc;
       i++) {
    const rpend_t *e = &se->rpend[i];
    if (!e->inst || e->st.token) continue;
    if (e->ready_at > now || (c->inst && c->at <= e->ready_at)) {
      if (se->rpend_unsorted) continue;
      break; /* so are the ones after it */
    }
    rc = rpend_cand(t, f, e, e->ready_at, now, c);
  }
  for (i = se->rpend_first; se->rpend_locks && se->rpend_lock_min <= now && i < se->rpend_n &&
                            !rc; i++) {
    const rpend_t *e = &se->rpend[i];
    if (!e->inst || !e->st.token || e->st.locked_until > now ||
        (c->inst && c->at <= e->st.locked_until))
      continue;
    rc = rpend_cand(t, f, e, e->st.locked_until, now, c);
  }
  return rc;
}

/* The instance to lock: the older of the ready head (due) and the lock head (expired); with
** orchestration capabilities, the older of the first ones this worker can run. */
int dx__lm_orch_pick(tx_t *t, const dx_fetch_filter_t *f, int64_t now, orch_cand_t *c) {
  static const int dbs[2] = {DB_ORCH_READY, DB_ORCH_LOCK};
  int rc = 0, i;
  memset(c, 0, sizeof *c);
  for (i = 0; i < 2 && !rc; i++) {
    if (!f || !f->capabilities_set) {
      rc = dx__lm_orch_head(t, dbs[i], now, c);
    } else if (!dx__lm_floor_after(t, dbs[i], now)) { /* (else nothing due there) */
      orch_scan_t s = {f, dbs[i], now, c, 0};
      dkey_t none;
      k_init(&none);
      rc = dx__lm_scan_prefix(t, dbs[i], &none, orch_scan_cb, &s);
      if (!rc && !s.seen) dx__lm_floor_learn(t, dbs[i], LM_NEVER);
    }
  }
  return rc ? rc : rpend_pick(t, f, now, c);
}

static int starts_instance(const dx_work_item_t *w) {
  return w->kind == DX_WI_START || w->kind == DX_WI_CAN;
}

/* Decode message `i` of `l`; a record that does not decode is reported as corrupt. */
static int msg_decode(tx_t *t, const msg_list_t *l, size_t i, dx_work_item_t *w) {
  dx_error_t derr = {0};
  int rc = dx__work_item_decode(l->v[i].item, l->v[i].item_len, w, &derr);
  if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
  if (rc)
    return dx__lm_corrupt(t, DB_ORCH_MSGS, derr.msg, "instance '%s' message %llu", l->inst,
                          (unsigned long long)l->v[i].seq);
  return 0;
}

/* Decode the messages visible at `now` (the batch). */
static int batch_decode(tx_t *t, const msg_list_t *l, int64_t now, dx_work_item_t **out,
                        size_t *n) {
  dx_work_item_t *v = calloc(l->n ? l->n : 1, sizeof *v);
  size_t i, k = 0;
  int rc;
  if (!v) return dx__lm_nomem(t->err);
  for (i = 0; i < l->n; i++) {
    if (l->v[i].visible_at > now) continue;
    if ((rc = msg_decode(t, l, i, &v[k]))) {
      size_t j;
      for (j = 0; j < k; j++) dx_work_item_clear(&v[j]);
      free(v);
      return rc;
    }
    k++;
  }
  *out = v;
  *n = k;
  return 0;
}

/* The earliest visible_at of a start (START or CAN) queued for later than `now`, or LM_NEVER. */
static int queued_start_at(tx_t *t, const msg_list_t *l, int64_t now, int64_t *at) {
  size_t i;
  *at = LM_NEVER;
  for (i = 0; i < l->n; i++) {
    dx_work_item_t w;
    int rc;
    if (l->v[i].visible_at <= now || l->v[i].visible_at >= *at) continue;
    if ((rc = msg_decode(t, l, i, &w))) return rc;
    if (starts_instance(&w)) *at = l->v[i].visible_at;
    dx_work_item_clear(&w);
  }
  return 0;
}

/* Lock the batch (the messages visible at `now`) under nw: the state names it (batch_seq,
** batch_at) and the messages are not rewritten; returns the batch's max attempt, this one
** counted. A lapsed lock `old` being taken over first stores its attempt in its messages (they
** were handed out once); a tag of a lock no longer held (an older build's) is cleared.
** On a store kept at format 3 (se->fmt3) the lock tags its messages and counts their attempt
** in them, as format 3 builds do: a process of such a build may take the lock over. */
static int batch_lock(tx_t *t, msg_list_t *l, int64_t now, const orch_state_t *old,
                      orch_state_t *nw, uint32_t *max_attempt) {
  size_t i;
  int rc;
  *max_attempt = 0;
  nw->batch_seq = 0;
  nw->batch_at = t->se->fmt3 ? 0 : now;
  for (i = 0; i < l->n; i++) {
    orch_msg_t *m = &l->v[i];
    int tag = t->se->fmt3 && m->visible_at <= now;
    if (m->token || dx__lm_msg_in_lock(old, m) || tag) {
      m->attempt = dx__lm_msg_attempt(old, m) + tag;
      m->token = tag ? nw->token : 0;
      if ((rc = msg_put(t, l->inst, m))) return rc;
    }
    if (m->visible_at > now) continue;
    if (!tag && m->seq > nw->batch_seq) nw->batch_seq = m->seq;
    if (m->attempt + !tag > *max_attempt) *max_attempt = (uint32_t)(m->attempt + !tag);
  }
  return 0;
}

/* Fill the locked item's name/version and history. A history that cannot be decoded is
** reported through history_error with the lock kept, as the runtime expects. */
/* The caller holds the whole current execution (set_history_hint): hand out only its last
** event. 1 when so, 0 to read the history, or an error. */
static int history_held(tx_t *t, const lm_t *lm, dx_orch_item_t *it) {
  uint64_t exec, n;
  int rc;
  if (!lm->hint.held || !lm->hint.held(lm->hint.ud, it->instance, &exec, &n) || n == 0 ||
      exec != it->execution_id)
    return 0;
  if (!(it->history = calloc(1, sizeof *it->history))) return dx__lm_nomem(t->err);
  if ((rc = dx__lm_history_holds(t, it->instance, exec, n, it->history)) != 1) {
    free(it->history);
    it->history = NULL;
    return rc;
  }
  it->history_len = 1;
  it->history_held = n;
  return 1;
}

/* (ir's name and version move into the item) */
static int orch_item_fill(tx_t *t, const lm_t *lm, dx_orch_item_t *it, inst_rec_t *ir) {
  const char *name = NULL, *version = NULL;
  dx_error_t herr = {0}, *saved = t->err;
  size_t i;
  int rc;
  if (ir) {
    it->orchestration_name = ir->name;
    it->orchestration_version = ir->version;
    ir->name = ir->version = NULL;
  } else {
    for (i = 0; i < it->messages_len && !name; i++)
      if (starts_instance(&it->messages[i])) {
        name = it->messages[i].name;
        version = it->messages[i].version;
      }
  }
  it->execution_id = ir ? ir->current_exec : 1;
  if ((name && !(it->orchestration_name = dx__strdup(name))) ||
      (version && !(it->orchestration_version = dx__strdup(version))))
    return dx__lm_nomem(t->err);
  if ((rc = dx__lm_kv_snapshot(t, it->instance, &it->kv, &it->kv_len))) return rc;
  if ((rc = history_held(t, lm, it)) != 0) return rc < 0 ? rc : 0;
  t->err = &herr; /* a corrupt history is reported in the item, not as the call's error */
  rc = dx__lm_history_load(t, it->instance, it->execution_id, &it->history, &it->history_len);
  t->err = saved;
  if (rc == DX_ECORRUPT) {
    it->history_error = DX_ECORRUPT;
    if (!(it->history_error_msg = dx__strdup(herr.msg))) return dx__lm_nomem(t->err);
    return 0;
  }
  if (rc) dx_error_set(t->err, rc, "%s", herr.msg);
  return rc;
}

/* Try to lock candidate `c`. *out stays NULL when the candidate was cleaned up instead (no
** visible message, orphan messages, stray index entry); the caller then picks again. */
static int orch_try_lock(tx_t *t, lm_t *lm, orch_cand_t *c, int64_t now,
                         int64_t lock_ms, dx_orch_item_t **out) {
  orch_state_t st, nw;
  msg_list_t l;
  dkey_t k;
  inst_rec_t ir;
  dx_orch_item_t *it = NULL;
  dx_work_item_t *items = NULL;
  size_t n = 0, i;
  int rc, has_ir, starts = 0;
  if ((rc = dx__lm_state_get(t, c->inst, &st))) return rc;
  if (c->db < 0) { /* kept in this batch (ready, or a lapsed lock): still so? */
    if (st.token ? st.locked_until > now : st.ready_at == LM_NEVER) return 0;
  } else if (dx__lm_state_index(c->inst, &st, &k) != c->db || k.n != c->key.n ||
             memcmp(k.b, c->key.b, k.n)) {
    return dx__lm_db_del(t, c->db, &c->key); /* stray index entry: drop it */
  }
  if (c->msgs_held) { /* read by the capabilities check in this txn */
    l = c->msgs;
    c->msgs_held = 0;
  } else if ((rc = msgs_load(t, c->inst, &l))) {
    return rc;
  }
  if ((rc = batch_decode(t, &l, now, &items, &n))) goto done;
  if (n == 0) { rc = orch_release(t, c->inst, &st); goto done; }
  if (c->ir_held) {
    rc = c->ir_held > 0 ? 0 : DX_ENOTFOUND;
    memset(&ir, 0, sizeof ir);
    if (c->ir_held > 0) ir = c->ir;
    c->ir_held = 0;
  } else if ((rc = dx__lm_inst_get(t, c->inst, &ir)) && rc != DX_ENOTFOUND) {
    goto done;
  }
  has_ir = rc == 0;
  for (i = 0; i < n; i++) starts |= starts_instance(&items[i]);
  /* Neither branch below (nor n == 0 above) meets a lapsed format 4 lock whose attempt
  ** batch_lock would have to store in its messages: a lock is only taken with an instance
  ** record or a visible start, and its messages stay visible and stored until an ack (which
  ** writes the record), an abandon (which releases the lock) or a delete/terminate (which
  ** drops the queue and the state). */
  if (!has_ir && !starts) {
    int64_t start_at;
    if ((rc = queued_start_at(t, &l, now, &start_at))) goto done;
    if (start_at != LM_NEVER) {
      /* the start was handed back with a delay: the messages wait for it (issue 7.1) */
      orch_state_t wait = STATE_EMPTY;
      wait.ready_at = start_at;
      rc = state_set(t, c->inst, &st, &wait);
      goto done;
    }
    /* messages for an instance that never started and never will: drop them instead of
    ** letting them sit at the head of the queue (the reference's starvation quirk) */
    rc = msgs_delete(t, &l, now);
    if (!rc) rc = orch_release(t, c->inst, &st);
    goto done;
  }
  nw = STATE_EMPTY;
  nw.locked_until = sat_add(now, lock_ms);
  nw.token = dx__new_token();
  nw.locker = lm->tag;
  if (!(it = calloc(1, sizeof *it)) || !(it->instance = dx__strdup(c->inst))) {
    rc = dx__lm_nomem(t->err);
    goto done_ir;
  }
  it->lock_token = nw.token;
  it->messages = items;
  it->messages_len = n;
  items = NULL;
  if ((rc = batch_lock(t, &l, now, &st, &nw, &it->attempt_count))) goto done_ir;
  if ((rc = state_set(t, c->inst, &st, &nw))) goto done_ir;
  rc = orch_item_fill(t, lm, it, has_ir ? &ir : NULL);
done_ir:
  dx__lm_inst_clear(&ir);
done:
  msgs_free(&l);
  if (items) {
    for (i = 0; i < n; i++) dx_work_item_clear(&items[i]);
    free(items);
  }
  if (rc == 0 && it) *out = it;
  else if (it) dx_orch_item_free(it);
  return rc;
}

static int orch_fetch(tx_t *t, lm_t *lm, int sweep, int64_t now, int64_t lock_ms,
                      dx_orch_item_t **out) {
  orch_cand_t c;
  int rc;
  memset(&c, 0, sizeof c);
  if (sweep && (rc = dx__lm_reap_dead_locks(t, lm, now))) return rc;
  for (;;) { /* each round locks an instance or removes the candidate from the indexes */
    if ((rc = dx__lm_orch_pick(t, lm->filter, now, &c)) || !c.inst) break;
    rc = orch_try_lock(t, lm, &c, now, lock_ms, out);
    dx__lm_cand_clear(&c);
    if (rc || *out) return rc;
  }
  dx__lm_cand_clear(&c);
  return rc;
}

/* {===== orchestrator ack =====} */

static int set_str(char **dst, const char *src) {
  char *s = dx__strdup(src);
  if (src && !s) return DX_ENOMEM;
  free(*dst);
  *dst = s;
  return 0;
}

/* A new instance record: parent is immutable, the creation index orders list_instances. */
static int inst_create(tx_t *t, int64_t now, const dx_orch_ack_t *a, inst_rec_t *r) {
  dkey_t k;
  int rc;
  r->created_at = now;
  if (set_str(&r->parent, a->parent_instance)) return dx__lm_nomem(t->err);
  if ((rc = dx__lm_next_seq(t, &r->created_seq))) return rc;
  k_init(&k);
  k_time(&k, r->created_at);
  k_u64(&k, r->created_seq);
  return dx__lm_db_put(t, DB_INST_CREATED, &k, a->instance, strlen(a->instance) + 1, 0);
}

/* What an ack learned of the instance record, for the list indexes (listidx.c). */
typedef struct {
  int created;             /* this ack created the record (the instance's first turn) */
  int current;             /* the ack's execution is (or becomes) the current one */
  int known;               /* the ack's execution was the current one before: an earlier ack
                              of it stored its execution record */
  int64_t created_at;
  uint64_t created_seq;
} ack_inst_t;

/* Steps 3 and 7: create or update the instance record. */
static int ack_instance(tx_t *t, int64_t now, const dx_orch_ack_t *a, ack_inst_t *ai) {
  inst_rec_t r;
  char *old_name = NULL;
  uint64_t was;
  int rc;
  if (!a->orchestration_name && !a->custom_status_set && /* most turns: in the batch's copy */
      dx__lm_inst_touch(t, a->instance, a->execution_id, now, &was, &ai->created_at,
                        &ai->created_seq)) {
    ai->created = 0;
    ai->current = a->execution_id >= was;
    ai->known = a->execution_id == was;
    return 0;
  }
  rc = dx__lm_inst_get(t, a->instance, &r);
  ai->created = rc == DX_ENOTFOUND;
  if (rc == DX_ENOTFOUND) rc = inst_create(t, now, a, &r);
  if (!rc && a->orchestration_name && r.name && !(old_name = dx__strdup(r.name)))
    rc = dx__lm_nomem(t->err);
  if (!rc && ((a->orchestration_name && (set_str(&r.name, a->orchestration_name) ||
                                         set_str(&r.version, a->orchestration_version))) ||
              (a->custom_status_set && set_str(&r.custom_status, a->custom_status))))
    rc = dx__lm_nomem(t->err);
  if (!rc) {
    if (a->custom_status_set) r.cs_version++;
    ai->current = a->execution_id >= r.current_exec;
    ai->known = !ai->created && a->execution_id == r.current_exec;
    if (a->execution_id > r.current_exec) r.current_exec = a->execution_id;
    r.updated_at = now;
    ai->created_at = r.created_at;
    ai->created_seq = r.created_seq;
    rc = dx__lm_inst_put(t, a->instance, &r);
  }
  /* the name index changes only with the name (the first turn) */
  if (!rc && a->orchestration_name)
    rc = dx__lm_lidx_name(t, a->instance, r.created_at, r.created_seq, old_name, r.name);
  free(old_name);
  dx__lm_inst_clear(&r);
  return rc;
}

/* Steps 4 and 6: create the execution record if missing; apply the status. */
static int ack_execution(tx_t *t, int64_t now, const dx_orch_ack_t *a, const ack_inst_t *ai) {
  exec_rec_t r;
  int old_st, rc;
  if (ai->known && a->status == DX_STATUS_NONE) return 0; /* stored, and nothing ends */
  /* an instance's first turn finds no execution record: they go with its record (delete) */
  if (ai->created) memset(&r, 0, sizeof r);
  rc = ai->created ? DX_ENOTFOUND : dx__lm_exec_get(t, a->instance, a->execution_id, &r);
  if (rc && rc != DX_ENOTFOUND) return rc;
  if (rc == 0 && a->status == DX_STATUS_NONE) { /* a turn that ends nothing changes nothing */
    dx__lm_exec_clear(&r);
    return 0;
  }
  /* as listed before: a new execution follows one that continued as new (listed running) */
  old_st = rc == 0 ? r.status : ai->created ? DX_STATUS_NONE : DX_STATUS_RUNNING;
  if (rc == DX_ENOTFOUND) {
    r.status = DX_STATUS_RUNNING;
    r.started_at = now;
  }
  rc = 0;
  if (a->status != DX_STATUS_NONE) {
    r.status = a->status;
    r.completed_at = now;
    dx_failure_clear(&r.fail);
    if (set_str(&r.output, a->output) || (a->failure && dx_failure_copy(&r.fail, a->failure)))
      rc = dx__lm_nomem(t->err);
  }
  if (!rc) rc = dx__lm_exec_put(t, a->instance, a->execution_id, &r);
  if (!rc && ai->current) /* writes only when the listed status changes */
    rc = dx__lm_lidx_status(t, a->instance, ai->created_at, ai->created_seq, old_st, r.status);
  dx__lm_exec_clear(&r);
  return rc;
}

static int orch_ack(tx_t *t, int64_t now, const dx_orch_ack_t *a) {
  orch_state_t st;
  ack_inst_t ai = {0, 0, 0, 0, 0};
  msg_list_t l;
  int64_t next = LM_NEVER; /* when the instance is ready again: its earliest message left */
  size_t i;
  int rc;
  /* the expected refusals come before the first write (LM_WRITE_DIRECT) */
  if ((rc = orch_check_lock(t, a->instance, a->lock_token, now, 1, &st)) ||
      (rc = dx__lm_history_unused(t, a->instance, a->execution_id, a->delta, a->delta_len)) ||
      (rc = msgs_take(t, a->instance, &st, &l, dx__lm_inst_kept(t, a->instance))))
    return rc;
  for (i = 0; i < l.n; i++)
    if (!dx__lm_msg_in_lock(&st, &l.v[i]) && l.v[i].visible_at < next) next = l.v[i].visible_at;
  if (!rc) rc = ack_instance(t, now, a, &ai);
  /* no longer queued; created: the record was not kept as present, so l has the items */
  if (!rc && ai.created) rc = dx__lm_lidx_forget_starts(t, &l, &st);
  msgs_free(&l);
  if (rc || (rc = ack_execution(t, now, a, &ai)) ||
      (rc = dx__lm_history_append(t, a->instance, a->execution_id, a->delta, a->delta_len)) ||
      (rc = dx__lm_kv_ack(t, a->instance, a->delta, a->delta_len, a->status)))
    return rc;
  for (i = 0; i < a->worker_items_len && !rc; i++)
    rc = dx__lm_work_insert(t, &a->worker_items[i], now);
  for (i = 0; i < a->cancelled_len && !rc; i++) rc = dx__lm_work_cancel(t, &a->cancelled[i]);
  for (i = 0; i < a->orch_items_len && !rc; i++) {
    int64_t at = dx__visible_at(&a->orch_items[i], now, 0);
    /* a message to itself (a timer) waits behind the lock this ack releases */
    if (strcmp(a->orch_items[i].instance, a->instance) == 0 && at < next) next = at;
    rc = dx__lm_orch_enqueue(t, &a->orch_items[i], at);
  }
  return rc ? rc : orch_release_at(t, a->instance, &st, next);
}
/* {===== methods: orchestrator queue =====} */

int dx__lm_fetch_orch(dx_provider_t *pp, int64_t now, int64_t lock_ms, dx_orch_item_t **out,
                      dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  int sweep;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = NULL;
  sweep = dx__lm_live_locks_due(p, now);
  if (!sweep && (rc = dx__lm_nothing_due(p, now, 1, 0, 0, err))) return rc < 0 ? rc : 0;
  LM_WRITE_DIRECT(p, t, err, rc, orch_fetch(&t, p, sweep, now, lock_ms, out), {
    dx_orch_item_free(*out);
    *out = NULL;
  });
  return rc;
}

int dx__lm_ack_orch(dx_provider_t *pp, int64_t now, const dx_orch_ack_t *ack, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_ack(ack, err))) return rc;
  LM_WRITE_DIRECT(p, t, err, rc, orch_ack(&t, now, ack), (void)0);
  return rc;
}

static int orch_abandon(tx_t *t, int64_t now, const char *inst, uint64_t token, int64_t delay_ms,
                        int ignore_attempt) {
  orch_state_t st;
  msg_list_t l;
  size_t i;
  int rc;
  if ((rc = orch_check_lock(t, inst, token, now, 0, &st))) return rc;
  if ((rc = msgs_load(t, inst, &l))) return rc;
  for (i = 0; i < l.n && !rc; i++) {
    orch_msg_t *m = &l.v[i];
    uint64_t att = dx__lm_msg_attempt(&st, m); /* this lock's attempt counted */
    int64_t vis = delay_ms > 0 ? sat_add(now, delay_ms) : m->visible_at;
    if (!dx__lm_msg_in_lock(&st, m)) continue;
    if (ignore_attempt && att > 0) att--;
    if (!m->token && att == m->attempt && vis == m->visible_at) continue; /* as stored */
    m->token = 0;
    m->attempt = att;
    m->visible_at = vis;
    rc = msg_put(t, inst, m);
  }
  msgs_free(&l);
  return rc ? rc : orch_release(t, inst, &st);
}

int dx__lm_abandon_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                        int64_t delay_ms, int ignore_attempt, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err))) return rc;
  LM_WRITE(p, t, err, rc, orch_abandon(&t, now, instance, token, delay_ms, ignore_attempt),
           (void)0);
  return rc;
}

static int orch_renew(tx_t *t, int64_t now, const char *inst, uint64_t token, int64_t extend_ms) {
  orch_state_t st, nw;
  int rc = orch_check_lock(t, inst, token, now, 1, &st);
  if (rc) return rc;
  nw = st;
  nw.locked_until = sat_add(now, extend_ms);
  return state_set(t, inst, &st, &nw);
}

int dx__lm_renew_orch(dx_provider_t *pp, int64_t now, const char *instance, uint64_t token,
                      int64_t extend_ms, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err))) return rc;
  LM_WRITE_DIRECT(p, t, err, rc, orch_renew(&t, now, instance, token, extend_ms), (void)0);
  return rc;
}

static int enqueue_unique(tx_t *t, const dx_work_item_t *item, int64_t visible_at) {
  int rc = dx__lm_start_unique(t, item);
  return rc ? rc : dx__lm_orch_enqueue(t, item, visible_at);
}

int dx__lm_enqueue_orch(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                        int64_t delay_ms, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_item(item, err)) || (rc = dx__check_payload(item, err))) return rc;
  /* in an all-or-nothing batch (begin_atomic) in the batch txn itself: its refusals (DX_EEXIST)
  ** come before any write, and a later failure spoils the batch its caller rolls back */
  LM_WRITE_MODE(p, t, err, rc, enqueue_unique(&t, item, dx__visible_at(item, now, delay_ms)),
                (void)0, p->atomic);
  return rc;
}

/* {===== for management (manage.c, admin.c) =====} */

int dx__lm_msgs_load(tx_t *t, const char *inst, msg_list_t *l) { return msgs_load(t, inst, l); }
void dx__lm_msgs_free(msg_list_t *l) { msgs_free(l); }
int dx__lm_msg_decode(tx_t *t, const msg_list_t *l, size_t i, dx_work_item_t *w) {
  return msg_decode(t, l, i, w);
}
int dx__lm_state_set(tx_t *t, const char *inst, const orch_state_t *old,
                     const orch_state_t *nw) {
  return state_set(t, inst, old, nw);
}
