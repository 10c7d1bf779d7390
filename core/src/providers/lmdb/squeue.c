/*
** squeue.c -- LMDB provider: session queue summaries (sess_queue: a session's earliest row and
** row count; sess_heads: those heads in time order), kept exact as rows come and go, and the
** open batch's changes to them and to session records held in memory until something else
** could look.
**
** A session step changes its session's summary three times in a store cycle (the ack removes
** the running row, the turn's ack queues the next one, the fetch locks it), each a read, a
** head seek and up to three writes. Inside a batch the direct methods (LM_WRITE_DIRECT) keep
** the changed summaries in shared_env_t.sq instead (the summary as stored and as it is now);
** they are written once, with the net change, by dx__lm_sq_write: before any other method of
** the batch begins and at commit (dx__lm_pend_flush), and dropped with a batch that does not
** commit. Readers in the batch's own direct methods ask dx__lm_squeue_get, which answers from
** memory first, and walk sess_heads through dx__lm_sess_heads_walk, which merges the kept
** heads in. A fetch walks the heads every time, so that merge must not cost the batch's
** sessions: a summary's stored head leaves sess_heads when the batch first keeps the summary
** (dx__lm_sq_write puts the net one back), so the stored walk meets no stale head to look up,
** and the kept heads stay sorted as they change (shared_env_t.kh), so nothing is sorted. A
** batch that fails part way is spoiled as a whole (se->batch_writes counts a kept change as a
** write), so what a commit stores is what writing at once would have stored.
** Session records (sessions) are kept the same way: a step writes its session's record twice
** (the ack notes the activity, the fetch renews the lease) and reads it twice. They are kept
** decoded (as decoding what dx__lm_sess_put would have stored gives them), packed once by
** dx__lm_sq_write, so those two changes can be made in place (dx__lm_kept_sess_rec) without a
** decode, copies of the strings and a packing pass each.
*/
#include "lmdb_int.h"

struct lm_sq_s {
  char *sid;
  int q_kept;        /* the queue summary is kept: */
  sess_queue_t disk; /* as stored (found 0: no record; found: its head left sess_heads) */
  sess_queue_t now;  /* as the batch left it */
  int rec_kept;      /* the session record is kept: 1 as rec, -1 deleted */
  sess_rec_t rec;    /* owned strings (owner "" when unowned, users never NULL) */
};

/* A kept head: se->sq[ix].now of a kept summary with a row (sq entries stay where they are
** until the batch ends; a pointer would not survive sq's growth). */
struct lm_kh_s {
  uint64_t due, seq;
  size_t ix;
};

/* {===== the batch's kept summaries =====} */

static lm_sq_t *sq_find(shared_env_t *se, const char *sid) {
  size_t at;
  if (!se->sq_n) return NULL;
  if (se->sq_last < se->sq_n && strcmp(se->sq[se->sq_last].sid, sid) == 0)
    return &se->sq[se->sq_last];
  if (!(at = dx__lm_strix_find(&se->sq_ix, se->sq, sizeof *se->sq, sid))) return NULL;
  se->sq_last = at - 1;
  return &se->sq[at - 1];
}

static lm_sq_t *sq_add(tx_t *t, const char *sid) {
  shared_env_t *se = t->se;
  lm_sq_t *nv;
  if (!(nv = dx__lm_grow(se->sq, &se->sq_cap, se->sq_n, sizeof *se->sq))) return NULL;
  se->sq = nv;
  if (dx__lm_strix_push(&se->sq_ix, nv, sizeof *nv, se->sq_n, sid)) return NULL;
  se->sq_last = se->sq_n;
  return &se->sq[se->sq_n++];
}

void dx__lm_sq_drop(shared_env_t *se) {
  size_t i;
  if (!se->sq_n) return;
  for (i = 0; i < se->sq_n; i++) {
    free(se->sq[i].sid);
    dx__lm_sess_clear(&se->sq[i].rec);
  }
  se->sq_n = se->kh_n = 0;
  dx__lm_strix_clear(&se->sq_ix);
}

/* {===== stored summaries =====} */

static int squeue_read(tx_t *t, const char *sid, sess_queue_t *q) {
  dkey_t k;
  MDB_val v;
  int rc;
  memset(q, 0, sizeof *q);
  key_inst(&k, sid);
  rc = dx__lm_db_get(t, DB_SESS_QUEUE, &k, &v);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return rc;
  if (v.mv_size != 24) return dx__lm_corrupt(t, DB_SESS_QUEUE, "not 24 bytes", "session '%s'", sid);
  q->found = 1;
  q->due = get_u64(v.mv_data);
  q->seq = get_u64((const char *)v.mv_data + 8);
  q->rows = get_u64((const char *)v.mv_data + 16);
  return 0;
}

/* Store summary `nw` of `sid` where `old` is stored: only what differs is written.
** head_gone: old's sess_heads entry was deleted already (a kept summary). */
static int squeue_write(tx_t *t, const char *sid, const sess_queue_t *old, const sess_queue_t *nw,
                        int head_gone) {
  unsigned char b[24];
  dkey_t k;
  int rc, moved = !old->found || !nw->found || old->due != nw->due || old->seq != nw->seq;
  if (old->found && moved && !head_gone) {
    key_sess_head(&k, old->due, old->seq, sid);
    if ((rc = dx__lm_db_del(t, DB_SESS_HEADS, &k))) return rc;
  }
  key_inst(&k, sid);
  if (!nw->found) return old->found ? dx__lm_db_del(t, DB_SESS_QUEUE, &k) : 0;
  if (moved || old->rows != nw->rows) {
    put_u64(b, nw->due);
    put_u64(b + 8, nw->seq);
    put_u64(b + 16, nw->rows);
    if ((rc = dx__lm_db_put(t, DB_SESS_QUEUE, &k, b, 24, 0))) return rc;
  }
  if (!moved && !head_gone) return 0;
  key_sess_head(&k, nw->due, nw->seq, sid);
  return dx__lm_db_put(t, DB_SESS_HEADS, &k, "", 0, 0);
}

int dx__lm_sq_write(tx_t *t) {
  shared_env_t *se = t->se;
  size_t i;
  int rc = 0;
  for (i = 0; i < se->sq_n && !rc; i++) {
    const lm_sq_t *e = &se->sq[i];
    dkey_t k;
    if (e->q_kept) rc = squeue_write(t, e->sid, &e->disk, &e->now, 1);
    if (rc || !e->rec_kept) continue;
    key_inst(&k, e->sid);
    rc = e->rec_kept > 0 ? dx__lm_rec_put(t, &dx__lm_sess_schema, &k, &e->rec)
                         : dx__lm_db_del(t, DB_SESSIONS, &k);
  }
  return rc;
}

int dx__lm_squeue_get(tx_t *t, const char *sid, sess_queue_t *q) {
  const lm_sq_t *e;
  if (t->direct && (e = sq_find(t->se, sid)) != NULL && e->q_kept) {
    *q = e->now;
    return 0;
  }
  return squeue_read(t, sid, q);
}

/* {===== session records =====} */

int dx__lm_kept_sess(tx_t *t, const char *sid, sess_rec_t **rec) {
  lm_sq_t *e;
  if (!t->direct || !(e = sq_find(t->se, sid)) || !e->rec_kept) return 0;
  if (e->rec_kept < 0) return DX_ENOTFOUND;
  *rec = &e->rec;
  return 1;
}

sess_rec_t *dx__lm_kept_sess_rec(tx_t *t, const char *sid) {
  sess_rec_t *r;
  return dx__lm_kept_sess(t, sid, &r) > 0 ? r : NULL;
}

/* *dst (owned; NULL for src NULL) = src's n bytes and a NUL; n: *dn, or strlen when dn is
** NULL. A put usually leaves owner, prev and users as they were: kept without a copy. */
static int kept_bytes(char **dst, size_t *dn, const char *src, size_t n) {
  char *b;
  if (!src) {
    free(*dst);
    *dst = NULL;
    return 0;
  }
  if (*dst && (dn ? *dn : strlen(*dst)) == n && memcmp(*dst, src, n) == 0) return 0;
  if (!(b = malloc(n + 1))) return DX_ENOMEM;
  memcpy(b, src, n);
  b[n] = 0;
  free(*dst);
  *dst = b;
  if (dn) *dn = n;
  return 0;
}

int dx__lm_keep_sess(tx_t *t, const char *sid, const sess_rec_t *row) {
  lm_sq_t *e;
  if (!t->direct) return 0;
  if (!(e = sq_find(t->se, sid)) && !(e = sq_add(t, sid))) return dx__lm_nomem(t->err);
  t->se->batch_writes++; /* a failure after this spoils the batch, as after a write */
  if (!row) {
    e->rec_kept = -1;
    return 1;
  }
  /* as decoding the packed row gives it: strings copied, an unset bin empty */
  if (kept_bytes(&e->rec.owner, NULL, row->owner, row->owner ? strlen(row->owner) : 0) ||
      kept_bytes(&e->rec.prev, NULL, row->prev, row->prev ? strlen(row->prev) : 0) ||
      kept_bytes(&e->rec.users, &e->rec.users_len, row->users ? row->users : "",
                 row->users_len))
    return dx__lm_nomem(t->err);
  e->rec.locked_until = row->locked_until;
  e->rec.last_activity = row->last_activity;
  e->rec.epoch = row->epoch;
  e->rec_kept = 1;
  return 1;
}

/* sess_heads key order of (due, seq, id): big-endian u64s, then the id's bytes and NUL, as
** LMDB compares them. */
static int kept_cmp(uint64_t ad, uint64_t as, const char *asid, uint64_t bd, uint64_t bs,
                    const char *bsid) {
  if (ad != bd) return ad < bd ? -1 : 1;
  if (as != bs) return as < bs ? -1 : 1;
  return strcmp(asid, bsid);
}

/* Where head (due, seq, sid) is, or would go, in se->kh. */
static size_t kh_at(const shared_env_t *se, uint64_t due, uint64_t seq, const char *sid) {
  size_t lo = 0, hi = se->kh_n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const struct lm_kh_s *h = &se->kh[mid];
    if (kept_cmp(h->due, h->seq, se->sq[h->ix].sid, due, seq, sid) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* Kept summary e's head (e->now, found) leaves se->kh / joins it. */
static void kh_remove(shared_env_t *se, const lm_sq_t *e) {
  size_t at = kh_at(se, e->now.due, e->now.seq, e->sid);
  if (at < se->kh_n && se->kh[at].ix == (size_t)(e - se->sq)) {
    memmove(&se->kh[at], &se->kh[at + 1], (se->kh_n - at - 1) * sizeof *se->kh);
    se->kh_n--;
  }
}

static int kh_insert(tx_t *t, const lm_sq_t *e) {
  shared_env_t *se = t->se;
  struct lm_kh_s *nv;
  size_t at;
  if (!(nv = dx__lm_grow(se->kh, &se->kh_cap, se->kh_n, sizeof *se->kh)))
    return dx__lm_nomem(t->err);
  se->kh = nv;
  at = kh_at(se, e->now.due, e->now.seq, e->sid);
  memmove(&se->kh[at + 1], &se->kh[at], (se->kh_n - at) * sizeof *se->kh);
  se->kh[at].due = e->now.due;
  se->kh[at].seq = e->now.seq;
  se->kh[at].ix = (size_t)(e - se->sq);
  se->kh_n++;
  return 0;
}

/* 1 when key (due, seq) a sorts before b. */
static int head_before(uint64_t ad, uint64_t as, uint64_t bd, uint64_t bs) {
  return ad < bd || (ad == bd && as < bs);
}

/* After rows of `sid` were added, removed or re-timed (delta: change in their number), point
** the session's summary at its earliest row again. `gone` (due, seq) names the row that left
** its place and `came` where a row arrived (NULL: not known): when neither was the head, the
** new head follows from them without a seek in sess_items. */
int dx__lm_squeue_update(tx_t *t, const char *sid, int delta, const uint64_t *gone,
                         const uint64_t *came) {
  sess_queue_t q, nw;
  dkey_t pre;
  MDB_val head;
  lm_sq_t *e = t->direct ? sq_find(t->se, sid) : NULL; /* (nothing below adds to se->sq) */
  int rc;
  if (e && e->q_kept) q = e->now; /* dx__lm_squeue_get, with the entry at hand */
  else if ((rc = squeue_read(t, sid, &q))) return rc;
  memset(&nw, 0, sizeof nw);
  if (q.found && !(gone && gone[0] == q.due && gone[1] == q.seq)) {
    nw.found = 1; /* the head stays, unless the row that came is earlier */
    nw.due = q.due;
    nw.seq = q.seq;
    if (came && head_before(came[0], came[1], nw.due, nw.seq)) {
      nw.due = came[0];
      nw.seq = came[1];
    }
  } else if (!q.found && !gone && came) { /* the first row of an empty queue */
    nw.found = 1;
    nw.due = came[0];
    nw.seq = came[1];
  } else if (q.found && gone && q.rows == 1) {
    /* the session's only row (the head) left its place: where it came, if anywhere, is the
    ** new head, no seek (a session step's fetch and ack each move its session's only row;
    ** rows is exact: every row change passes here with its delta) */
    nw.found = came != NULL;
    if (came) {
      nw.due = came[0];
      nw.seq = came[1];
    }
  } else {
    key_inst(&pre, sid);
    rc = dx__lm_head_key(t, DB_SESS_ITEMS, &pre, &head);
    if (rc && rc != DX_ENOTFOUND) return rc;
    if ((nw.found = rc == 0)) {
      if (head.mv_size != pre.n + 16)
        return dx__lm_corrupt(t, DB_SESS_ITEMS, "bad key", "session '%s'", sid);
      nw.due = get_u64((const char *)head.mv_data + pre.n);
      nw.seq = get_u64((const char *)head.mv_data + pre.n + 8);
    }
    if (t->direct) dx__lm_srow_head(t->se, sid, &nw); /* rows kept in the batch (srows.c) */
  }
  nw.rows = delta < 0 && q.rows < (uint64_t)-delta ? 0 : q.rows + (uint64_t)(int64_t)delta;
  if (nw.found && nw.rows == 0) nw.rows = 1;
  if (!nw.found) nw.rows = 0;
  if (q.found == nw.found && (!q.found || (q.due == nw.due && q.seq == nw.seq && q.rows == nw.rows)))
    return 0;
  dx__lm_own_moved(t->se, sid, nw.found, nw.due, nw.seq);
  if (!t->direct) return squeue_write(t, sid, &q, &nw, 0);
  if (!e && !(e = sq_add(t, sid))) return dx__lm_nomem(t->err);
  t->se->batch_writes++; /* a failure after this spoils the batch, as after a write */
  if (!e->q_kept) { /* q was read from the store: its head leaves sess_heads (see above) */
    e->q_kept = 1;
    e->disk = q;
    if (q.found) {
      key_sess_head(&pre, q.due, q.seq, sid);
      if ((rc = dx__lm_db_del(t, DB_SESS_HEADS, &pre))) return rc;
    }
  } else if (e->now.found) {
    kh_remove(t->se, e);
  }
  e->now = nw;
  return nw.found ? kh_insert(t, e) : 0;
}

int dx__lm_squeue_refresh(tx_t *t, const char *sid, int delta) {
  return dx__lm_squeue_update(t, sid, delta, NULL, NULL);
}

/* {===== sess_heads, with the batch's kept heads merged in =====} */

static int kept_emit(tx_t *t, size_t ki, scan_fn fn, void *ud) {
  static const MDB_val none = {0, ""};
  const struct lm_kh_s *h = &t->se->kh[ki];
  dkey_t dk;
  MDB_val kk;
  key_sess_head(&dk, h->due, h->seq, t->se->sq[h->ix].sid);
  kk = kval(&dk);
  return fn(t, &kk, &none, ud);
}

/* 1 when kept head ki sorts before stored key k (bytes, as LMDB compares them). */
static int kept_before_raw(const shared_env_t *se, size_t ki, const MDB_val *k) {
  const struct lm_kh_s *h = &se->kh[ki];
  dkey_t dk;
  size_t n;
  int c;
  key_sess_head(&dk, h->due, h->seq, se->sq[h->ix].sid);
  n = dk.n < k->mv_size ? dk.n : k->mv_size;
  c = memcmp(dk.b, k->mv_data, n);
  return c < 0 || (c == 0 && dk.n < k->mv_size);
}

/* The stored heads are those of sessions the batch did not keep (their kept summaries' heads
** left sess_heads), merged with se->kh, which is in key order. The callbacks only read, so
** se->kh does not change under the walk. */
int dx__lm_sess_heads_walk(tx_t *t, scan_fn fn, void *ud) {
  shared_env_t *se = t->se;
  size_t ki = 0;
  MDB_cursor *c;
  MDB_val k, v;
  int rc = 0, mrc;
  if (!t->direct || !se->kh_n) {
    dkey_t all;
    k_init(&all);
    return dx__lm_scan_prefix(t, DB_SESS_HEADS, &all, fn, ud);
  }
  if ((rc = dx__lm_cursor(t, DB_SESS_HEADS, &c))) return rc;
  for (mrc = mdb_cursor_get(c, &k, &v, MDB_FIRST); mrc == 0 && !rc;
       mrc = mdb_cursor_get(c, &k, &v, MDB_NEXT)) {
    const char *kb = k.mv_data;
    uint64_t due, seq;
    if ((rc = dx__lm_check_sum(t, DB_SESS_HEADS, &k, &v))) break;
    if (k.mv_size < 18 || kb[k.mv_size - 1] != 0) { /* malformed: the callback reports it */
      for (; ki < se->kh_n && !rc && kept_before_raw(se, ki, &k); ki++)
        rc = kept_emit(t, ki, fn, ud);
      if (!rc) rc = fn(t, &k, &v, ud);
      continue;
    }
    due = get_u64(kb);
    seq = get_u64(kb + 8);
    for (; ki < se->kh_n && !rc &&
           kept_cmp(se->kh[ki].due, se->kh[ki].seq, se->sq[se->kh[ki].ix].sid, due, seq,
                    kb + 16) < 0;
         ki++)
      rc = kept_emit(t, ki, fn, ud);
    if (!rc) rc = fn(t, &k, &v, ud);
  }
  dx__lm_cursor_done(t, DB_SESS_HEADS, c);
  for (; ki < se->kh_n && !rc; ki++) rc = kept_emit(t, ki, fn, ud);
  if (rc < 0) return rc;
  if (mrc && mrc != MDB_NOTFOUND && rc == 0) return dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_SESS_HEADS]);
  return 0;
}
