/*
** work.c -- LMDB provider: the worker queue: rows and their indexes, fetch (plain and session
** rows), ack, abandon, renew, lock stealing.
*/
#include "lmdb_int.h"

void dx__lm_row_clear(work_row_t *r) {
  dx__lm_rec_clear(&dx__lm_row_schema, r);
  memset(r, 0, sizeof *r);
}

int dx__lm_row_get(tx_t *t, uint64_t seq, work_row_t *r) {
  dkey_t k;
  lm_what_t w = {"row %llu", NULL, seq};
  int rc;
  memset(r, 0, sizeof *r);
  if ((rc = dx__lm_srow_get(t, seq, r))) return rc > 0 ? 0 : rc; /* kept in the batch */
  if (dx__lm_row_kept_take(t, seq, r)) return 0; /* written by this thread's batches */
  key_seq(&k, seq);
  r->seq = seq;
  return dx__lm_rec_get_as(t, &dx__lm_row_schema, &k, r, &w);
}

static int row_write(tx_t *t, const work_row_t *r) {
  dkey_t k;
  key_seq(&k, r->seq);
  return dx__lm_rec_put(t, &dx__lm_row_schema, &k, r);
}

/* Add (put=1) or remove the row's queue index entry (ready or lock for plain rows, the
** session's sess_items for session rows) and, when locked, its token entry. */
int dx__lm_row_queue_key(const work_row_t *r, dkey_t *k) {
  int64_t due = dx__lm_row_due(r);
  if (r->session_id) {
    key_sess_item(k, r->session_id, due, r->seq);
    return DB_SESS_ITEMS;
  }
  key_work_prefix(k, r->tag);
  k_time(k, due);
  k_u64(k, r->seq);
  return r->token ? DB_WORK_LOCK : DB_WORK_READY;
}

int dx__lm_row_index(tx_t *t, const work_row_t *r, int put) {
  unsigned char seq[8];
  dkey_t k;
  int db = dx__lm_row_queue_key(r, &k);
  int rc = dx__lm_idx_op(t, db, &k, "", 0, put);
  if (rc || !dx__lm_token_indexed(r)) return rc;
  key_seq(&k, r->token);
  put_u64(seq, r->seq);
  return dx__lm_idx_op(t, DB_WORK_TOKEN, &k, seq, 8, put);
}

static int row_ident(tx_t *t, const work_row_t *r, int put) {
  dkey_t k;
  key_ident(&k, r->instance, r->exec, r->act_id);
  k_u64(&k, r->seq);
  return dx__lm_idx_op(t, DB_WORK_IDENT, &k, "", 0, put);
}

int dx__lm_row_store(tx_t *t, const work_row_t *r) {
  int rc;
  if ((rc = row_write(t, r)) || (rc = dx__lm_row_index(t, r, 1))) return rc;
  return row_ident(t, r, 1);
}

/* Replace row `old` (NULL: insert) by `nw` (NULL: delete), keeping every index in step. A
** session row queued in the open batch changes in memory (srows.c); an insert with `taken` set
** may move nw's strings there (*taken = 1: they stay valid, the caller forgets them). */
static int row_put(tx_t *t, const work_row_t *old, const work_row_t *nw, int *taken) {
  const char *sid = old ? old->session_id : nw->session_id;
  dkey_t k;
  int rc = 0;
  dx__lm_row_kept_forget(t, old ? old->seq : nw->seq);
  if ((rc = dx__lm_srow_set(t, old, nw, old ? NULL : taken)) < 0) return rc;
  if (rc) {
    rc = 0;
  } else {
    if (old && (rc = dx__lm_row_index(t, old, 0))) return rc;
    if (nw && old) {
      if ((rc = row_write(t, nw)) || (rc = dx__lm_row_index(t, nw, 1))) return rc;
    } else if (nw) {
      if ((rc = dx__lm_row_store(t, nw))) return rc;
    } else {
      key_seq(&k, old->seq);
      if ((rc = dx__lm_db_del(t, DB_WORK, &k)) || (rc = row_ident(t, old, 0))) return rc;
    }
  }
  if (!sid) return 0;
  { /* the rows' places in sess_items (a row keeps its session) */
    uint64_t gone[2], came[2];
    if (old) { gone[0] = (uint64_t)dx__lm_row_due(old); gone[1] = old->seq; }
    if (nw) { came[0] = (uint64_t)dx__lm_row_due(nw); came[1] = nw->seq; }
    return dx__lm_squeue_update(t, sid, (nw != NULL) - (old != NULL), old ? gone : NULL,
                                nw ? came : NULL);
  }
}

static int row_set(tx_t *t, const work_row_t *old, const work_row_t *nw) {
  return row_put(t, old, nw, NULL);
}

/* FIFO: earlier due time first, then older row. */
static int cand_better(const work_cand_t *c, int64_t at, uint64_t seq) {
  return !c->found || at < c->at || (at == c->at && seq < c->seq);
}

/* {===== rows queued in the batch =====}
** A plain row that a direct method (an orchestration ack) queues inside a batch is kept in
** memory (shared_env_t.pend) instead of being written with its ready index entry at once: the
** store cycle fetches work after its acks in the same transaction, and a row fetched there is
** written once, already locked (row, lock entry, identity: three writes where insert and
** fetch made five writes, a delete and a read). Rows not taken are written as the insert
** would have written them before any other method of the batch runs (dx__lm_tx_begin), and
** at commit; a cancel drops queued ones itself. A batch that ends otherwise drops them with
** the rest of its writes, so what a commit stores is what the direct writes would have
** stored: crash and lease semantics do not change. Session rows are written at once (their
** session queue summary is read by the session fetch). */

static int pend_add(tx_t *t, work_row_t *r) {
  shared_env_t *se = t->se;
  work_row_t *nv;
  if (!(nv = dx__lm_grow(se->pend, &se->pend_cap, se->pend_n, sizeof *se->pend)))
    return dx__lm_nomem(t->err);
  se->pend = nv;
  if (se->pend_n == 0 || r->visible_at > se->pend_last_due) se->pend_last_due = r->visible_at;
  else if (r->visible_at < se->pend_last_due) se->pend_unsorted = 1;
  se->pend[se->pend_n++] = *r; /* takes r's strings */
  memset(r, 0, sizeof *r);
  se->batch_writes++; /* a failure after this spoils the batch, as after a write */
  return 0;
}

void dx__lm_pend_drop(shared_env_t *se) {
  size_t i;
  for (i = se->pend_first; i < se->pend_n; i++) dx__lm_row_clear(&se->pend[i]);
  se->pend_n = se->pend_first = 0;
  se->pend_unsorted = 0;
  dx__lm_rpend_drop(se);
  dx__lm_srow_drop(se);
  dx__lm_kmsg_drop(se);
  dx__lm_sq_drop(se);
}

int dx__lm_pend_flush(shared_env_t *se, MDB_txn *txn, dx_error_t *err) {
  tx_t t;
  size_t i;
  int rc = 0;
  dx__lm_batch_tx(&t, se, txn, err);
  /* instances made ready (orch.c), rows queued here, then the session queue summaries
  ** (squeue.c; the rows above are plain) */
  if (se->rpend_live) rc = dx__lm_rpend_write(&t);
  for (i = se->pend_first; i < se->pend_n && !rc; i++)
    if (se->pend[i].seq && !(rc = row_set(&t, NULL, &se->pend[i])))
      dx__lm_row_keep(&t, &se->pend[i]); /* for the fetch that locks it */
  if (!rc && se->srow_live) rc = dx__lm_srow_write(&t);
  if (!rc && se->kmsg_live) rc = dx__lm_kmsg_write(&t);
  if (!rc && se->sq_n) rc = dx__lm_sq_write(&t);
  if (!rc && se->ik_dirty_n) rc = dx__lm_inst_keep_write(&t); /* records, runs (records.c) */
  dx__lm_pend_drop(se);
  if (rc && !se->batch_spoiled) { /* written in part: nothing of the batch may be kept */
    se->batch_spoiled = 1;
    dx_error_set(&se->spoil_err, rc, "%s", t.err->msg);
  }
  return rc;
}

/* Consider the rows queued in the batch that filter f takes (plain rows, FIFO). They are
** queued in seq order; while their due times are too (the usual case: due when queued), the
** first due one this worker takes is the best of them and the walk ends there. */
static void pend_cand(tx_t *t, const dx_fetch_filter_t *f, int64_t now, work_cand_t *c) {
  shared_env_t *se = t->se;
  size_t i;
  if (!t->direct) return; /* only this thread's batch has any (and only it may look) */
  while (se->pend_first < se->pend_n && se->pend[se->pend_first].seq == 0) se->pend_first++;
  for (i = se->pend_first; i < se->pend_n; i++) {
    const work_row_t *r = &se->pend[i];
    if (!se->pend_unsorted && r->seq && r->visible_at > now) break; /* so are the rest */
    if (!r->seq || r->visible_at > now || !dx_fetch_filter_accepts_tag(f, r->tag)) continue;
    if (cand_better(c, r->visible_at, r->seq)) {
      c->found = 1;
      c->db = -1;
      c->kind = WC_PENDING;
      c->at = r->visible_at;
      c->seq = r->seq;
      c->pend_at = i;
      k_init(&c->key);
    }
    if (!se->pend_unsorted) break; /* the later ones come after it */
  }
}

/* Drop the queued rows with this identity (a cancel). */
static void pend_cancel(shared_env_t *se, const dx_activity_ref_t *ref) {
  size_t i;
  for (i = se->pend_first; i < se->pend_n; i++) {
    work_row_t *r = &se->pend[i];
    if (r->seq && r->exec == ref->execution_id && r->act_id == ref->activity_id &&
        strcmp(r->instance, ref->instance) == 0)
      dx__lm_row_clear(r); /* seq 0: taken */
  }
}

int dx__lm_work_insert(tx_t *t, const dx_work_item_t *w, int64_t visible_at) {
  work_row_t r;
  int rc;
  if (t->nested) t->se->batch_wrote = 1;
  memset(&r, 0, sizeof r);
  r.visible_at = visible_at;
  r.exec = w->execution_id;
  r.act_id = w->id;
  if (dx__work_item_encode(w, &r.item, &r.item_len) || !(r.instance = dx__strdup(w->instance)) ||
      (w->session_id && !(r.session_id = dx__strdup(w->session_id))) ||
      (w->tag && !(r.tag = dx__strdup(w->tag)))) {
    dx__lm_row_clear(&r);
    return dx__lm_nomem(t->err);
  }
  rc = dx__lm_next_seq(t, &r.seq);
  if (!rc && t->direct && !r.session_id) {
    if (!(rc = pend_add(t, &r))) return 0; /* r's strings are the queued row's */
  } else if (!rc) {
    int taken = 0; /* kept in the batch with r's strings (srows.c) */
    if (!(rc = row_put(t, NULL, &r, &taken)) && !taken) dx__lm_row_keep(t, &r); /* for its fetch */
    if (taken) return rc; /* r's strings are the kept row's */
  }
  dx__lm_row_clear(&r);
  return rc;
}

/* The row locked with `token`. DX_ELOCK when none is: acked, cancelled (lock stolen), or
** re-locked by another worker after the lock expired. */
static int row_by_token(tx_t *t, uint64_t token, work_row_t *r) {
  dkey_t k;
  MDB_val v;
  int rc;
  memset(r, 0, sizeof *r);
  if (token == 0) return dx_error_set(t->err, DX_ETOKEN, "lock token 0 is never valid");
  /* a token names its row (fresh_work_token); else it is one from the work_token index */
  rc = dx__lm_row_get(t, token >> LM_TOKEN_GEN_BITS, r);
  if (rc == 0 && r->token == token) return 0;
  dx__lm_row_clear(r);
  if (rc && rc != DX_ENOTFOUND) return rc;
  key_seq(&k, token);
  rc = dx__lm_db_get(t, DB_WORK_TOKEN, &k, &v);
  if (rc == DX_ENOTFOUND)
    return dx_error_set(t->err, DX_ELOCK,
                        "no worker item is locked with token %llx (acked, cancelled, or "
                        "re-delivered after its lock expired)",
                        (unsigned long long)token);
  if (rc) return rc;
  if (v.mv_size != 8)
    return dx__lm_corrupt(t, DB_WORK_TOKEN, "not 8 bytes", "token %llx", (unsigned long long)token);
  return dx__lm_row_get(t, get_u64(v.mv_data), r);
}

static int row_check_live(tx_t *t, const work_row_t *r, int64_t now) {
  if (r->locked_until > now) return 0;
  return dx_error_set(t->err, DX_ELOCK, "the lock on worker item %llu expired at %lld (now %lld)",
                      (unsigned long long)r->seq, (long long)r->locked_until, (long long)now);
}


/* The earliest row of `db` with this tag (NULL: untagged). */
static int work_head(tx_t *t, int db, const char *tag, int64_t now, work_cand_t *c) {
  dkey_t pre;
  MDB_val k;
  int64_t at;
  uint64_t seq;
  int rc;
  if (!tag && dx__lm_floor_after(t, db, now)) return 0; /* nothing due (this batch knows) */
  key_work_prefix(&pre, tag);
  rc = dx__lm_head_key(t, db, &pre, &k);
  if (rc == DX_ENOTFOUND) {
    if (!tag) dx__lm_floor_learn(t, db, LM_NEVER);
    return 0;
  }
  if (rc) return rc;
  if (k.mv_size != pre.n + 16) return dx__lm_corrupt(t, db, "bad key", "%zu-byte key", k.mv_size);
  at = (int64_t)get_u64((const char *)k.mv_data + pre.n);
  seq = get_u64((const char *)k.mv_data + pre.n + 8);
  if (!tag) dx__lm_floor_learn(t, db, at);
  if (at > now || !cand_better(c, at, seq)) return 0;
  c->found = 1;
  c->db = db;
  c->kind = WC_PLAIN;
  c->at = at;
  c->seq = seq;
  k_init(&c->key);
  k_bytes(&c->key, k.mv_data, k.mv_size);
  return 0;
}

int dx__lm_work_db_heads(tx_t *t, int db, const dx_fetch_filter_t *f, int64_t now,
                         work_cand_t *c) {
  size_t i;
  int rc = 0;
  if (dx_fetch_filter_accepts_tag(f, NULL)) rc = work_head(t, db, NULL, now, c);
  for (i = 0; f && i < f->n_tags && !rc; i++) rc = work_head(t, db, f->tags[i], now, c);
  return rc;
}

int dx__lm_work_heads(tx_t *t, const dx_fetch_filter_t *f, int64_t now, work_cand_t *c) {
  int rc = dx__lm_work_db_heads(t, DB_WORK_READY, f, now, c);
  return rc ? rc : dx__lm_work_db_heads(t, DB_WORK_LOCK, f, now, c);
}

/* A session's head row is a candidate only when this worker takes its tag. In a fetch
** (t->memo set) the row read stays there: the lock that usually follows takes it instead of
** reading it again (the pick writes nothing, so it is still the stored row). */
static int sess_tag_ok(tx_t *t, const dx_fetch_filter_t *f, uint64_t seq, int *ok) {
  work_row_t r;
  /* a row kept in the batch is read in place: the memo borrows its strings (srows.c) */
  int rc = dx__lm_srow_peek(t, seq, &r) ? 0 : dx__lm_row_get(t, seq, &r);
  *ok = 0;
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  *ok = dx_fetch_filter_accepts_tag(f, r.tag);
  if (t->memo) {
    dx__lm_srow_release(t->se, t->memo);
    *t->memo = r; /* takes (or borrows) r's strings */
  } else {
    dx__lm_srow_release(t->se, &r);
  }
  return 0;
}

typedef struct {
  const dx_fetch_filter_t *f;
  int64_t *out;
} sess_due_scan_t;

/* sess_heads in time order: the first head whose row has a tag this worker takes. */
static int sess_due_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sess_due_scan_t *s = ud;
  int ok, rc;
  (void)v;
  if (k->mv_size < 18 || ((const char *)k->mv_data)[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_SESS_HEADS, "bad key", "%zu-byte key", k->mv_size);
  if ((rc = sess_tag_ok(t, s->f, get_u64((const char *)k->mv_data + 8), &ok))) return rc;
  if (!ok) return 0;
  *s->out = (int64_t)get_u64(k->mv_data);
  return 1;
}

int dx__lm_sess_heads_due(tx_t *t, const dx_fetch_filter_t *f, int64_t *out) {
  sess_due_scan_t s = {f, out};
  *out = LM_NEVER;
  return dx__lm_sess_heads_walk(t, sess_due_cb, &s);
}

/* Consider the earliest row of session `sid` (due at `due`). */
static void sess_cand(const char *sid, uint64_t due, uint64_t seq, int kind, int64_t now,
                      work_cand_t *c) {
  size_t n = strlen(sid);
  if ((int64_t)due > now || !cand_better(c, (int64_t)due, seq) || n > LM_SESSION_MAX) return;
  c->found = 1;
  c->db = DB_SESS_ITEMS;
  c->kind = kind;
  c->at = (int64_t)due;
  c->seq = seq;
  memcpy(c->sid, sid, n + 1);
  key_sess_item(&c->key, sid, (int64_t)due, seq);
}

/* The sessions `worker` owns (sess_owner), for two questions. Capacity (issue 9 item 4,
** c NULL): those with a live lease count against max_sessions, except idle ones (no rows)
** whose instances all ended; asked only when a claim is at hand. Pick (c set): the earliest
** due row of any of them (a lapsed lease is still ours until someone else claims it), used
** once the worker is at capacity, when walking sess_heads would step over every session
** waiting for a worker. */
typedef struct {
  const char *worker;
  size_t prefix_n;
  int64_t now;
  uint32_t live;   /* owned sessions with a live lease */
  int64_t until;   /* owned_count: the earliest of their leases' ends */
  uint32_t stop;   /* stop counting here (0: count all and collect idle) */
  str_list_t idle; /* live ones without rows: they may have ended */
  const dx_session_cfg_t *cfg;
  work_cand_t *c;  /* pick mode */
  const dx_fetch_filter_t *filter;
} owned_scan_t;

static int owned_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  owned_scan_t *o = ud;
  const char *sid = (const char *)k->mv_data + o->prefix_n;
  sess_queue_t q;
  int rc, ok;
  if (k->mv_size <= o->prefix_n || ((const char *)k->mv_data)[k->mv_size - 1] != 0 ||
      v->mv_size != 8)
    return dx__lm_corrupt(t, DB_SESS_OWNER, "bad entry", "worker '%s'", o->worker);
  if (!o->c) { /* the lease is the session row's (the entry's value is the one at claim) */
    sess_rec_t r;
    int live;
    if ((rc = dx__lm_sess_get(t, sid, &r)) == DX_ENOTFOUND) return 0;
    if (rc) return rc;
    live = r.locked_until > o->now;
    dx__lm_sess_clear(&r);
    if (!live) return 0; /* lapsed: not counted */
    o->live++;
    if (o->stop) return o->live >= o->stop;
  }
  if (dx__session_declined(o->cfg, sid)) return 0; /* handed on (rolling upgrade) */
  if ((rc = dx__lm_squeue_get(t, sid, &q))) return rc;
  if (!o->c) return !q.found && dx__lm_strs_push(&o->idle, sid) ? dx__lm_nomem(t->err) : 0;
  if (!q.found || (int64_t)q.due > o->now || !cand_better(o->c, (int64_t)q.due, q.seq))
    return 0; /* (before reading its row) */
  if ((rc = sess_tag_ok(t, o->filter, q.seq, &ok))) return rc;
  if (ok) sess_cand(sid, q.due, q.seq, WC_OWNED, o->now, o->c);
  return 0;
}

static int owned_scan(tx_t *t, owned_scan_t *o) {
  dkey_t pre;
  key_inst(&pre, o->worker);
  o->prefix_n = pre.n;
  o->live = 0;
  return dx__lm_scan_prefix(t, DB_SESS_OWNER, &pre, owned_cb, o);
}

/* In a batch: owned_scan's count (o->live, every live owned session) and idle list from the
** batch's copy of the owned sessions, which knows their queues (one session row read each);
** *done = 0 outside a batch. */
static int owned_count(tx_t *t, owned_scan_t *o, int *done) {
  const lm_own_t *own;
  size_t i, n;
  int rc;
  *done = 0;
  o->until = INT64_MAX;
  if ((rc = dx__lm_sess_owned_heads(t, o->worker, &own, &n)) || !own) return rc;
  for (i = 0; i < n; i++) {
    sess_rec_t r;
    int live;
    if ((rc = dx__lm_sess_times(t, own[i].sid, &r)) == DX_ENOTFOUND) continue;
    if (rc) return rc;
    live = r.locked_until > o->now;
    if (!live) continue;
    o->live++;
    if (r.locked_until < o->until) o->until = r.locked_until;
    if (!own[i].found && !dx__session_declined(o->cfg, own[i].sid) &&
        dx__lm_strs_push(&o->idle, own[i].sid))
      return dx__lm_nomem(t->err);
  }
  *done = 1;
  return 0;
}

/* *room = 1 when `worker` may claim one more session. In a batch the count is exact and kept
** for the batch; outside one the scan stops as soon as the answer is known. */
static int claim_room(tx_t *t, const dx_session_cfg_t *cfg, int64_t now, int *room) {
  shared_env_t *se = t->se;
  owned_scan_t o;
  size_t i;
  int rc = 0, counted = 0;
  memset(&o, 0, sizeof o);
  o.worker = cfg->worker_id;
  o.now = now;
  o.cfg = cfg;
  o.stop = cfg->max_sessions;
  *room = 0;
  if (se->cap_valid && se->cap_now <= now && now < se->cap_until &&
      strcmp(se->cap_worker, cfg->worker_id) == 0) {
    o.live = se->cap_live; /* counted earlier in this batch, kept up to date since */
  } else if ((rc = owned_count(t, &o, &counted))) {
    goto done;
  } else if (counted) { /* exact: cached for the batch */
    snprintf(se->cap_worker, sizeof se->cap_worker, "%s", cfg->worker_id);
    se->cap_now = now;
    se->cap_live = o.live;
    se->cap_until = o.until;
    se->cap_valid = 1;
  } else if ((rc = owned_scan(t, &o))) {
    return rc;
  }
  if (o.live < cfg->max_sessions) {
    *room = 1;
    goto done;
  }
  o.stop = 0; /* at capacity: idle sessions whose instances all ended do not count */
  if (!counted) {
    o.live = 0;
    if ((rc = owned_count(t, &o, &counted))) goto done;
    if (!counted && (rc = owned_scan(t, &o))) goto done;
  }
  for (i = 0; i < o.idle.n && o.live >= cfg->max_sessions; i++) {
    sess_rec_t r;
    int ended = 0;
    if ((rc = dx__lm_sess_get(t, o.idle.v[i], &r)) == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc) rc = dx__lm_sess_ended(t, o.idle.v[i], &r, &ended, NULL, NULL);
    dx__lm_sess_clear(&r);
    if (rc) break;
    if (ended && o.live > 0) o.live--;
  }
  *room = !rc && o.live < cfg->max_sessions;
done:
  dx__lm_strs_free(&o.idle);
  return rc;
}

typedef struct {
  lm_t *lm;
  const dx_session_cfg_t *cfg;
  int64_t now;
  work_cand_t *c;
  int full; /* no claims: at capacity, or claims over for this batch */
} sess_pick_t;

/* Remember for the rest of the batch that this worker claims nothing more (lm_t.claims_over). */
static void claims_over(lm_t *lm, const dx_session_cfg_t *cfg) {
  if (lm->in_batch) snprintf(lm->claims_over, sizeof lm->claims_over, "%s", cfg->worker_id);
}

/* sess_heads in time order (each session's earliest row): the first due head that is either
** of a session this worker owns (sess_owner; a lapsed lease is still ours until someone else
** claims it: same-id restart) or, below capacity, of one nobody holds (no row, released,
** lease lapsed, or its owner's process is dead) is the candidate. Sessions held by other live
** workers, declined ones and rows with a tag this worker does not take are skipped. The walk
** ends at the first head that is not due or not older than the best candidate so far, so a
** fetch costs the due heads before the one it takes, not the sessions the worker owns; it
** also ends when the worker turns out to be at capacity. */
static int sess_pick_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sess_pick_t *s = ud;
  const char *kb = k->mv_data, *sid;
  uint64_t due, seq;
  sess_rec_t r;
  dkey_t ok;
  MDB_val ov;
  int rc, held, room;
  (void)v;
  if (k->mv_size < 18 || kb[k->mv_size - 1] != 0)
    return dx__lm_corrupt(t, DB_SESS_HEADS, "bad key", "%zu-byte key", k->mv_size);
  due = get_u64(kb);
  seq = get_u64(kb + 8);
  sid = kb + 16;
  if ((int64_t)due > s->now || !cand_better(s->c, (int64_t)due, seq)) return 1;
  if (dx__session_declined(s->cfg, sid)) return 0; /* handed on (rolling upgrade) */
  key_sess_owner(&ok, s->cfg->worker_id, sid);
  rc = dx__lm_db_get(t, DB_SESS_OWNER, &ok, &ov);
  if (rc == 0) { /* ours */
    if ((rc = sess_tag_ok(t, s->lm->filter, seq, &held))) return rc;
    if (!held) return 0;
    sess_cand(sid, due, seq, WC_OWNED, s->now, s->c);
    return 1;
  }
  if (rc != DX_ENOTFOUND) return rc;
  if (s->full) return 0;
  rc = dx__lm_sess_get(t, sid, &r);
  if (rc && rc != DX_ENOTFOUND) return rc;
  held = rc == 0 && dx__lm_sess_owned(&r) && r.locked_until > s->now &&
         dx__lm_live_alive(s->lm, r.owner);
  dx__lm_sess_clear(&r);
  if (held) return 0;
  if ((rc = sess_tag_ok(t, s->lm->filter, seq, &held))) return rc;
  if (!held) return 0; /* a tag this worker does not take: another worker's session */
  if ((rc = claim_room(t, s->cfg, s->now, &room))) return rc;
  if (!room) { /* full: only our own sessions' rows from here on (work_pick) */
    s->full = 1;
    claims_over(s->lm, s->cfg);
    return 1;
  }
  sess_cand(sid, due, seq, WC_CLAIM, s->now, s->c);
  return 1;
}

/* Oldest due row this worker may take: plain rows (ready, or lock expired), rows of sessions
** it owns, and, while it owns fewer than max_sessions live sessions, rows of sessions it may
** claim. cfg NULL: plain rows only. Below capacity it walks the due session heads; at capacity
** (known for the rest of the batch once found) it looks only at the sessions it owns. */
static int work_pick(tx_t *t, lm_t *lm, int64_t now, const dx_session_cfg_t *cfg,
                     work_cand_t *c) {
  sess_pick_t s;
  owned_scan_t o;
  const lm_own_t *own;
  size_t i, n;
  int rc, ok;
  memset(c, 0, sizeof *c);
  if ((rc = dx__lm_work_heads(t, lm->filter, now, c))) return rc;
  pend_cand(t, lm->filter, now, c);
  if (!cfg) return 0;
  s.lm = lm;
  s.cfg = cfg;
  s.now = now;
  s.c = c;
  s.full = lm->in_batch && strcmp(lm->claims_over, cfg->worker_id) == 0;
  if (!s.full) {
    if ((rc = dx__lm_sess_heads_walk(t, sess_pick_cb, &s))) return rc;
    if (!s.full) {
      if (!c->found) claims_over(lm, cfg); /* nothing claimable in this batch */
      return 0;
    }
  }
  /* in a batch: its copy of the owned sessions' heads (the same test as owned_cb's) */
  if ((rc = dx__lm_sess_owned_heads(t, cfg->worker_id, &own, &n))) return rc;
  for (i = 0; own && i < n; i++) {
    if (!own[i].found || (int64_t)own[i].due > now || !cand_better(c, (int64_t)own[i].due,
                                                                    own[i].seq) ||
        dx__session_declined(cfg, own[i].sid))
      continue;
    if ((rc = sess_tag_ok(t, lm->filter, own[i].seq, &ok))) return rc;
    if (ok) sess_cand(own[i].sid, own[i].due, own[i].seq, WC_OWNED, now, c);
  }
  if (own) return 0;
  memset(&o, 0, sizeof o);
  o.worker = cfg->worker_id;
  o.now = now;
  o.cfg = cfg;
  o.c = c;
  o.filter = lm->filter;
  return owned_scan(t, &o);
}

/* A token for locking row `seq` (whose lock token was `prev`, 0 for none): the row's seq,
** then LM_TOKEN_GEN_BITS drawn from this process's tokens (random per process, mixed so that
** two processes' counters do not line up), never `prev`: so an expired holder's token does
** not match the new lock. It names its row and needs no work_token entry (two writes less per
** activity). A row past 2^(64 - LM_TOKEN_GEN_BITS) gets a token no live worker lock uses,
** kept in the work_token index (a repeat, say by a process forked after drawing tokens, must
** not overwrite another row's entry), as every row did before. */
static int fresh_work_token(tx_t *t, uint64_t seq, uint64_t prev, uint64_t *token) {
  if (seq >> (64 - LM_TOKEN_GEN_BITS) == 0) {
    do {
      uint64_t gen = (dx__new_token() * UINT64_C(0x9E3779B97F4A7C15)) >> (64 - LM_TOKEN_GEN_BITS);
      *token = seq << LM_TOKEN_GEN_BITS | gen;
    } while (*token == prev);
    return 0;
  }
  for (;;) {
    dkey_t k;
    MDB_val v;
    int rc;
    *token = dx__new_token();
    key_seq(&k, *token);
    rc = dx__lm_db_get(t, DB_WORK_TOKEN, &k, &v);
    if (rc == DX_ENOTFOUND) return 0;
    if (rc) return rc;
  }
}

/* {===== liveness: the locks of dead owners (live.c) =====} */

/* Rows of session `sid` still locked (except row `skip`) are due now: their locker is dead. */
/* The rows of l (seqs) still locked are due now, except row `skip` (0: none); with `p`, only
** those whose locker (a handle of p's liveness table) is dead. Frees l. */
static int locked_rows_due(tx_t *t, seq_list_t *l, int64_t now, uint64_t skip, lm_t *p) {
  size_t i;
  int rc = 0;
  for (i = 0; i < l->n && !rc; i++) {
    work_row_t r, nw;
    if (l->v[i] == skip) continue;
    if ((rc = dx__lm_row_get(t, l->v[i], &r)) == DX_ENOTFOUND) { rc = 0; continue; }
    if (rc) break;
    if (r.token && r.locked_until > now && (!p || !dx__lm_live_locker_alive(p, r.locker))) {
      nw = r; /* shares r's strings */
      nw.locked_until = now;
      rc = row_set(t, &r, &nw);
    }
    dx__lm_row_clear(&r);
  }
  free(l->v);
  return rc;
}

/* Rows of session `sid` still locked (except row `skip`) are due now: their locker is dead. */
static int reap_session(tx_t *t, const char *sid, int64_t now, uint64_t skip) {
  seq_list_t l = {NULL, 0, 0};
  dkey_t pre;
  int rc;
  key_inst(&pre, sid);
  /* sess_items keys end with be64 seq, as work_ident keys do; then the rows kept in the batch */
  rc = dx__lm_scan_prefix(t, DB_SESS_ITEMS, &pre, dx__lm_ident_cb, &l);
  if (!rc) rc = dx__lm_srow_seqs(t, sid, &l);
  if (rc) {
    free(l.v);
    return rc;
  }
  return locked_rows_due(t, &l, now, skip, NULL);
}

/* Sessions whose owner is `only` (NULL: any owner but `me` that is dead, with a live lease):
** their locked rows are due now. Walks sess_owner, which groups sessions by owner: one
** liveness probe per owner, and a live owner's sessions are skipped with one seek, so a sweep
** costs the owners and the dead owners' sessions (whose rows it reads), not every session. */
static int reap_dead(tx_t *t, lm_t *p, const char *me, const char *only, int64_t now) {
  str_list_t ids = {NULL, 0, 0};
  char owner[LM_KEY_MAX + 1];
  MDB_cursor *cur;
  MDB_val k, v;
  dkey_t pre, past;
  size_t i, on;
  int rc = 0, mrc, dead = 0;
  owner[0] = 0;
  if (only) key_inst(&pre, only);
  else k_init(&pre);
  if ((mrc = mdb_cursor_open(t->txn, t->se->dbi[DB_SESS_OWNER], &cur)))
    return dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_SESS_OWNER]);
  k = kval(&pre);
  mrc = mdb_cursor_get(cur, &k, &v, pre.n ? MDB_SET_RANGE : MDB_FIRST);
  while (mrc == 0 && k.mv_size >= pre.n && memcmp(k.mv_data, pre.b, pre.n) == 0) {
    const char *kb = k.mv_data;
    if ((rc = dx__lm_check_sum(t, DB_SESS_OWNER, &k, &v))) break;
    on = strnlen(kb, k.mv_size);
    if (on == 0 || on + 2 > k.mv_size || kb[k.mv_size - 1] != 0 || v.mv_size != 8) {
      rc = dx__lm_corrupt(t, DB_SESS_OWNER, "bad entry", "%zu-byte key", k.mv_size);
      break;
    }
    if (!only && strcmp(owner, kb) != 0) { /* the next owner: decide for all its sessions */
      memcpy(owner, kb, on + 1);
      dead = strcmp(kb, me) != 0 && !dx__lm_live_alive(p, kb);
      if (!dead) { /* skip past "owner\0..." */
        k_init(&past);
        k_bytes(&past, kb, on);
        k_u8(&past, 1);
        k = kval(&past);
        mrc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
        continue;
      }
    }
    if (dx__lm_strs_push(&ids, kb + on + 1)) {
      rc = dx__lm_nomem(t->err);
      break;
    }
    mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
  }
  mdb_cursor_close(cur);
  if (!rc && mrc && mrc != MDB_NOTFOUND)
    rc = dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_SESS_OWNER]);
  for (i = 0; i < ids.n && !rc; i++) {
    sess_rec_t r;
    int lapsed = 0;
    if (!only) { /* a dead owner's lapsed lease: the session is claimable anyway */
      if ((rc = dx__lm_sess_get(t, ids.v[i], &r)) == DX_ENOTFOUND) { rc = 0; continue; }
      if (rc) break;
      lapsed = r.locked_until <= now;
      dx__lm_sess_clear(&r);
    }
    if (!lapsed) rc = reap_session(t, ids.v[i], now, 0);
  }
  dx__lm_strs_free(&ids);
  return rc;
}

/* worker_register: what a dead predecessor with this id left locked is due now. */
int dx__lm_reap_own(lm_t *p, const char *worker, int64_t now, dx_error_t *err) {
  tx_t t;
  int rc;
  LM_WRITE(p, t, err, rc, reap_dead(&t, p, worker, worker, now), (void)0);
  return rc;
}

/* A close-session item at the head of a session nobody holds has nothing to close: delete
** it, and the session row once the session has no rows left. */
static int close_unheld(tx_t *t, const work_row_t *r) {
  sess_queue_t q;
  sess_rec_t s;
  int rc;
  if ((rc = row_set(t, r, NULL)) || (rc = dx__lm_squeue_get(t, r->session_id, &q)) || q.found)
    return rc;
  rc = dx__lm_sess_get(t, r->session_id, &s);
  if (rc == DX_ENOTFOUND) return 0;
  if (!rc) rc = dx__lm_sess_put(t, r->session_id, &s, NULL);
  dx__lm_sess_clear(&s);
  return rc;
}

/* The session side of fetching row `row` of c->sid: claim it (owner = us, fresh lease, next
** ownership epoch) or, when we own it, record the activity and refresh the lease. The row's
** instance joins the session's users. *epoch receives the epoch the row is locked under. */
static int sess_take(tx_t *t, const work_cand_t *c, const work_row_t *row, int64_t now,
                     const dx_session_cfg_t *cfg, dx_work_fetch_t *out, uint64_t *epoch) {
  sess_rec_t old, nw;
  char *users = NULL;
  sess_rec_t *kr = c->kind == WC_CLAIM ? NULL : dx__lm_kept_sess_rec(t, c->sid);
  int rc, found;
  if (kr && dx__lm_sess_owner_is(kr, cfg->worker_id)) { /* its owner's next fetch in the batch */
    *epoch = kr->epoch;
    return dx__lm_sess_kept_fetch(t, kr, now, sat_add(now, cfg->session_lock_ms), row->instance,
                                  row->exec);
  }
  rc = dx__lm_sess_get(t, c->sid, &old);
  found = rc == 0;
  if (rc && rc != DX_ENOTFOUND) return rc;
  rc = 0;
  nw = old; /* shares old's strings */
  nw.owner = (char *)cfg->worker_id;
  nw.last_activity = now;
  if (c->kind == WC_CLAIM || !dx__lm_sess_owner_is(&old, cfg->worker_id)) {
    const char *prev = dx__lm_sess_owned(&old) ? old.owner : old.prev;
    nw.prev = (char *)prev;
    nw.locked_until = sat_add(now, cfg->session_lock_ms);
    nw.epoch = old.epoch + 1; /* locks of earlier owners can no longer ack or renew */
    out->session_claimed = 1;
    out->waited_ms = now > c->at ? now - c->at : 0;
    if (prev && *prev && !(out->previous_owner = dx__strdup(prev))) rc = dx__lm_nomem(t->err);
  } else if (old.locked_until < sat_add(now, cfg->session_lock_ms)) {
    /* an owner's fetch refreshes the lease at once: after a same-id restart the dead
    ** process's lease must not lapse under the activity we start now (issue 9 item 3a) */
    nw.locked_until = sat_add(now, cfg->session_lock_ms);
  }
  if (!rc && row->instance) rc = dx__lm_sess_add_user(t, &nw, row->instance, row->exec, &users);
  if (!rc) rc = dx__lm_sess_put(t, c->sid, found ? &old : NULL, &nw);
  *epoch = nw.epoch;
  free(users);
  dx__lm_sess_clear(&old);
  return rc;
}

/* Fencing (issue 9 item 3): a session row locked under an earlier ownership epoch belongs to
** an owner that lost the session (it stalled past its lease and another worker claimed it):
** its ack and renewal are refused in their own transaction; the new owner runs the row.
** Passed, work flowed through the session: last_activity = now (one read of the session row
** for both). */
static int row_check_epoch(tx_t *t, const work_row_t *r, int64_t now) {
  sess_rec_t s, nw, *kr;
  int rc;
  if (!r->session_id) return 0;
  if ((kr = dx__lm_kept_sess_rec(t, r->session_id)) && kr->epoch == r->sess_epoch) {
    dx__lm_sess_kept_touch(t, kr, now); /* kept in the batch: in place */
    return 0;
  }
  rc = dx__lm_sess_get(t, r->session_id, &s);
  if (rc == DX_ENOTFOUND)
    return dx_error_set(t->err, DX_ELOCK, "session '%s' of worker item %llu no longer exists",
                        r->session_id, (unsigned long long)r->seq);
  if (rc) return rc;
  if (s.epoch != r->sess_epoch) {
    rc = dx_error_set(t->err, DX_ELOCK,
                      "session '%s' moved to worker '%s' (ownership epoch %llu; worker item "
                      "%llu was locked under epoch %llu): a result from an earlier owner is "
                      "refused",
                      r->session_id, s.owner && *s.owner ? s.owner : "(none)",
                      (unsigned long long)s.epoch, (unsigned long long)r->seq,
                      (unsigned long long)r->sess_epoch);
  } else {
    nw = s; /* shares s's strings */
    nw.last_activity = now;
    rc = dx__lm_sess_put(t, r->session_id, &s, &nw);
  }
  dx__lm_sess_clear(&s);
  return rc;
}

static void fetch_reset(dx_work_fetch_t *out) {
  dx_work_item_clear(&out->item);
  free(out->previous_owner);
  memset(out, 0, sizeof *out);
}

/* Lock candidate `c`. out->item.kind stays 0 when the candidate was cleaned up instead (a
** stray index entry, a close item of a session nobody holds); the caller picks again. */
/* Decode a row's item into out->item; a record that does not decode is reported as corrupt. */
static int row_item(tx_t *t, const work_row_t *r, dx_work_fetch_t *out) {
  dx_error_t derr = {0};
  int rc = dx__work_item_decode(r->item, r->item_len, &out->item, &derr);
  if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
  if (rc) return dx__lm_corrupt(t, DB_WORK, derr.msg, "row %llu", (unsigned long long)r->seq);
  return 0;
}

/* Lock the row queued in this batch that candidate c names: written once, locked. */
static int pend_lock(tx_t *t, lm_t *lm, const work_cand_t *c, int64_t now, int64_t lock_ms,
                     dx_work_fetch_t *out) {
  shared_env_t *se = t->se;
  work_row_t *r = NULL;
  size_t i;
  int rc;
  if (c->pend_at < se->pend_n && se->pend[c->pend_at].seq == c->seq) r = &se->pend[c->pend_at];
  for (i = se->pend_first; i < se->pend_n && !r; i++)
    if (se->pend[i].seq == c->seq) r = &se->pend[i];
  if (!r) return dx_error_set(t->err, DX_ESTATE, "row %llu left the batch's queue",
                              (unsigned long long)c->seq);
  r->locker = lm->tag;
  r->locked_until = sat_add(now, lock_ms);
  r->attempt++;
  if (!(rc = row_item(t, r, out)) && !(rc = fresh_work_token(t, r->seq, 0, &r->token)))
    rc = row_set(t, NULL, r);
  if (rc) {
    fetch_reset(out);
    dx__lm_row_clear(r); /* taken (seq 0): the batch is spoiled */
    return rc;
  }
  out->lock_token = r->token;
  out->attempt_count = (uint32_t)r->attempt;
  dx__lm_row_keep(t, r); /* taken (seq 0): written, and kept for the ack */
  return 0;
}

static int work_lock(tx_t *t, lm_t *lm, const work_cand_t *c, int64_t now, int64_t lock_ms,
                     const dx_session_cfg_t *cfg, dx_work_fetch_t *out) {
  work_row_t old, nw;
  int rc;
  if (c->kind == WC_PENDING) return pend_lock(t, lm, c, now, lock_ms, out);
  if (t->memo && t->memo->seq == c->seq && t->memo->instance) { /* read by the pick */
    old = *t->memo;
    memset(t->memo, 0, sizeof *t->memo);
    rc = 0;
  } else {
    rc = dx__lm_row_get(t, c->seq, &old);
  }
  if (rc == DX_ENOTFOUND) { /* stray index entry */
    if ((rc = dx__lm_db_del(t, c->db, &c->key))) return rc;
    return c->kind == WC_PLAIN ? 0 : dx__lm_squeue_refresh(t, c->sid, -1);
  }
  if (rc) return rc;
  rc = row_item(t, &old, out);
  if (!rc && c->kind == WC_CLAIM && out->item.kind == DX_WI_SESSION_CLOSE) {
    rc = close_unheld(t, &old); /* (its delete hands a borrowed row's strings to old) */
    fetch_reset(out);
    dx__lm_srow_release(t->se, &old);
    return rc;
  }
  /* A claim starts a new ownership epoch: rows of the session still locked were locked by an
  ** earlier owner (dead, or stalled past its lease): due now, the new owner runs them. */
  if (!rc && c->kind == WC_CLAIM) rc = reap_session(t, c->sid, now, c->seq);
  nw = old;
  nw.locker = lm->tag;
  if (!rc && c->kind != WC_PLAIN) rc = sess_take(t, c, &old, now, cfg, out, &nw.sess_epoch);
  if (!rc) rc = fresh_work_token(t, old.seq, old.token, &nw.token);
  if (!rc) {
    nw.locked_until = sat_add(now, lock_ms);
    nw.attempt++;
    rc = row_set(t, &old, &nw);
  }
  if (rc) {
    fetch_reset(out);
    dx__lm_srow_release(t->se, &old); /* nw shares old's strings */
    return rc;
  }
  out->lock_token = nw.token;
  out->attempt_count = (uint32_t)nw.attempt;
  if (dx__lm_srow_borrows(t->se, &nw)) memset(&nw, 0, sizeof nw); /* the kept row's */
  dx__lm_row_keep(t, &nw); /* takes the strings nw shares with old */
  return 0;
}

/* Plain rows whose lock is live but whose locker (another handle) is dead: due now. */
int dx__lm_work_reap_dead(tx_t *t, lm_t *p, int64_t now) {
  seq_list_t l = {NULL, 0, 0};
  dkey_t pre;
  int rc;
  k_init(&pre);
  k_u8(&pre, 0);
  rc = dx__lm_scan_prefix(t, DB_WORK_LOCK, &pre, dx__lm_ident_cb, &l);
  if (rc) {
    free(l.v);
    return rc;
  }
  return locked_rows_due(t, &l, now, 0, p);
}

int dx__lm_reap_dead_locks(tx_t *t, lm_t *p, int64_t now) {
  int rc = dx__lm_work_reap_dead(t, p, now);
  return rc ? rc : dx__lm_orch_reap_dead(t, p, now);
}

static int work_fetch(tx_t *t, lm_t *lm, int sweep, int locks, int64_t now, int64_t lock_ms,
                      const dx_session_cfg_t *cfg, dx_work_fetch_t *out) {
  work_row_t memo;
  work_cand_t c;
  int rc;
  if (locks && (rc = dx__lm_reap_dead_locks(t, lm, now))) return rc;
  if (sweep && (rc = reap_dead(t, lm, cfg->worker_id, NULL, now))) return rc;
  memset(&memo, 0, sizeof memo);
  t->memo = &memo;
  for (;;) { /* a round only repeats after removing a stray index entry or a close item */
    if ((rc = work_pick(t, lm, now, cfg, &c)) || !c.found) break;
    if ((rc = work_lock(t, lm, &c, now, lock_ms, cfg, out)) || out->item.kind) break;
    dx__lm_srow_release(t->se, &memo); /* the round wrote: a next pick reads afresh */
  }
  t->memo = NULL;
  dx__lm_srow_release(t->se, &memo);
  return rc;
}

int dx__lm_ident_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  seq_list_t *l = ud;
  uint64_t *nv;
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
  l->v = nv;
  l->v[l->n++] = get_u64((const char *)k->mv_data + k->mv_size - 8);
  return 0;
}

/* Lock stealing: delete every row with this identity; none is fine. */
int dx__lm_work_cancel(tx_t *t, const dx_activity_ref_t *ref) {
  seq_list_t l = {NULL, 0, 0};
  dkey_t k;
  size_t i;
  int rc;
  pend_cancel(t->se, ref); /* queued in this batch: never written */
  if ((rc = dx__lm_srow_flush(t))) return rc; /* the walk below sees stored rows only */
  key_ident(&k, ref->instance, ref->execution_id, ref->activity_id);
  rc = dx__lm_scan_prefix(t, DB_WORK_IDENT, &k, dx__lm_ident_cb, &l);
  for (i = 0; i < l.n && !rc; i++) {
    work_row_t r;
    rc = dx__lm_row_get(t, l.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc) rc = row_set(t, &r, NULL);
    dx__lm_row_clear(&r);
  }
  free(l.v);
  return rc;
}

/* {===== methods: worker queue =====} */

int dx__lm_fetch_work(dx_provider_t *pp, int64_t now, int64_t lock_ms,
                      const dx_session_cfg_t *sessions, dx_work_fetch_t *out,
                      dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc, sweep = 0, locks;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if (sessions && sessions->max_sessions == 0) sessions = NULL; /* takes no session work */
  if (sessions && (rc = dx__check_worker_id(sessions->worker_id, err))) return rc;
  if (sessions) {
    dx__lm_live_hold(p, sessions->worker_id); /* peers see this id alive from now on */
    sweep = dx__lm_live_sweep_due(p, now);
  }
  locks = dx__lm_live_locks_due(p, now);
  if (!sweep && !locks && (rc = dx__lm_nothing_due(p, now, 0, 1, sessions != NULL, err)))
    return rc < 0 ? rc : 0;
  LM_WRITE_DIRECT(p, t, err, rc, work_fetch(&t, p, sweep, locks, now, lock_ms, sessions, out),
           fetch_reset(out));
  return rc;
}

static int work_ack(tx_t *t, int64_t now, uint64_t token, const dx_work_item_t *completion) {
  work_row_t r;
  int rc = 0;
  /* a row kept in the batch is read in place; its delete hands its strings to r (srows.c) */
  if (!dx__lm_srow_peek(t, token >> LM_TOKEN_GEN_BITS, &r) || r.token != token) {
    memset(&r, 0, sizeof r); /* (borrowed, if anything: not freed) */
    rc = row_by_token(t, token, &r);
  }
  if (t->nested) t->se->batch_wrote = 1; /* an activity's result: its batch is flushed */
  if (!rc) rc = row_check_live(t, &r, now);
  if (!rc) rc = row_check_epoch(t, &r, now);
  if (!rc) rc = row_set(t, &r, NULL);
  dx__lm_srow_release(t->se, &r);
  if (!rc && completion) rc = dx__lm_orch_enqueue(t, completion, now);
  return rc;
}

int dx__lm_ack_work(dx_provider_t *pp, int64_t now, uint64_t token,
                    const dx_work_item_t *completion, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (completion && (rc = dx__check_item(completion, err))) return rc;
  LM_WRITE_DIRECT(p, t, err, rc, work_ack(&t, now, token, completion), (void)0);
  return rc;
}

/* Abandon (release, visible after `ms`) or renew (extend by `ms`) a worker lock. */
static int work_relock(tx_t *t, int64_t now, uint64_t token, int abandon, int64_t ms,
                       int ignore_attempt) {
  work_row_t r, nw;
  int rc = row_by_token(t, token, &r);
  if (!rc && !abandon) rc = row_check_live(t, &r, now);
  if (!rc && !abandon) rc = row_check_epoch(t, &r, now);
  if (rc) { dx__lm_row_clear(&r); return rc; }
  nw = r;
  if (abandon) {
    nw.token = 0;
    nw.locked_until = 0;
    nw.visible_at = sat_add(now, ms > 0 ? ms : 0);
    if (ignore_attempt && nw.attempt > 0) nw.attempt--;
  } else {
    nw.locked_until = sat_add(now, ms);
  }
  rc = row_set(t, &r, &nw);
  dx__lm_row_clear(&r); /* nw shares r's strings */
  return rc;
}

int dx__lm_abandon_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t delay_ms,
                        int ignore_attempt, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  LM_WRITE(p, t, err, rc, work_relock(&t, now, token, 1, delay_ms, ignore_attempt), (void)0);
  return rc;
}

int dx__lm_renew_work(dx_provider_t *pp, int64_t now, uint64_t token, int64_t extend_ms,
                      dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  LM_WRITE_DIRECT(p, t, err, rc, work_relock(&t, now, token, 0, extend_ms, 0), (void)0);
  return rc;
}

int dx__lm_enqueue_work(dx_provider_t *pp, int64_t now, const dx_work_item_t *item,
                        dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_item(item, err)) || (rc = dx__check_payload(item, err))) return rc;
  LM_WRITE(p, t, err, rc, dx__lm_work_insert(&t, item, now), (void)0);
  return rc;
}

/* Management: replace row `old` by `nw` (NULL: delete), indexes and session queue in step. */
int dx__lm_row_set(tx_t *t, const work_row_t *old, const work_row_t *nw) {
  return row_set(t, old, nw);
}
