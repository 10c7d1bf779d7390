/*
** srows.c -- LMDB provider: session rows kept in the open batch (issue 12, lmcpu4).
**
** With held rounds a session row usually lives and dies inside one batch: an orchestration
** ack queues it, the session fetch of the same store cycle locks it, and its activity's ack
** (answered inside the fetch's transaction) deletes it. Written at once that cost the row
** record twice, its sess_items entry three times (queued, re-timed by the lock, deleted), its
** identity entry twice and a delete of the row: about nine B-tree writes per activity, and
** the pages of three named DBs in every commit, for rows the commit does not keep.
**
** So a session row a direct method (LM_WRITE_DIRECT) queues stays in memory
** (shared_env_t.srow) from its insert: work.c row_set changes or drops it there, the session's
** queue summary (squeue.c) still counts it, dx__lm_row_get reads it first, and the head seek of
** its session merges it in (dx__lm_srow_head), and so does a claim's walk of the session's
** rows (dx__lm_srow_seqs). Everything else that could look writes the kept rows first, exactly
** as the insert would have written them, as they are now: a nested method and the commit
** (dx__lm_pend_flush), and a cancel's walk of work_ident (dx__lm_srow_flush). A batch that ends otherwise drops them with the
** rest of its writes. A kept change counts as a write (se->batch_writes), so a direct method
** that fails after one spoils the batch. What a commit stores is what writing at once would
** have stored, so crash, lease and fencing semantics do not change.
**
** Entries are added in seq order (seqs only grow within a batch), so a lookup by seq is a
** binary search; a row that leaves stays as a dead entry until the batch ends. The insert
** hands its strings over, and the fetch that locks the row and the ack that deletes it read it
** in place (dx__lm_srow_peek), so a step copies none of them.
*/
#include "lmdb_int.h"

struct lm_srow_s {
  uint64_t seq;   /* stays when the row leaves (the search needs the order) */
  int live;
  uint32_t sh;    /* dx__lm_str_hash of r.session_id */
  work_row_t r;   /* owned */
};

static lm_srow_t *srow_find(shared_env_t *se, uint64_t seq) {
  size_t lo = 0, hi = se->srow_n;
  if (!se->srow_live) return NULL;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (se->srow[mid].seq < seq) lo = mid + 1;
    else hi = mid;
  }
  return lo < se->srow_n && se->srow[lo].seq == seq && se->srow[lo].live ? &se->srow[lo] : NULL;
}

int dx__lm_srow_held(shared_env_t *se, uint64_t seq) { return srow_find(se, seq) != NULL; }

/* *dst = an owned copy of src. */
static int row_copy(tx_t *t, const work_row_t *src, work_row_t *dst) {
  *dst = *src;
  dst->session_id = dst->instance = dst->item = dst->tag = NULL;
  if ((src->session_id && !(dst->session_id = dx__strdup(src->session_id))) ||
      (src->instance && !(dst->instance = dx__strdup(src->instance))) ||
      (src->tag && !(dst->tag = dx__strdup(src->tag))) ||
      (src->item && !(dst->item = malloc(src->item_len ? src->item_len : 1)))) {
    dx__lm_row_clear(dst);
    return dx__lm_nomem(t->err);
  }
  if (src->item_len) memcpy(dst->item, src->item, src->item_len);
  return 0;
}

int dx__lm_srow_get(tx_t *t, uint64_t seq, work_row_t *r) {
  lm_srow_t *e;
  int rc;
  if (!t->direct || !(e = srow_find(t->se, seq))) return 0;
  return (rc = row_copy(t, &e->r, r)) ? rc : 1;
}

/* A fetch reads the row it locks, and an ack the row it deletes: without a copy of its strings
** each time (the borrow is told by its session id: the kept row's own pointer). */
int dx__lm_srow_peek(tx_t *t, uint64_t seq, work_row_t *r) {
  lm_srow_t *e;
  if (!t->direct || !(e = srow_find(t->se, seq))) {
    memset(r, 0, sizeof *r);
    return 0;
  }
  *r = e->r;
  return 1;
}

int dx__lm_srow_borrows(shared_env_t *se, const work_row_t *r) {
  const lm_srow_t *e = r->session_id ? srow_find(se, r->seq) : NULL;
  return e && e->r.session_id == r->session_id;
}

void dx__lm_srow_release(shared_env_t *se, work_row_t *r) {
  if (dx__lm_srow_borrows(se, r) || !(r->session_id || r->instance || r->item || r->tag))
    memset(r, 0, sizeof *r); /* borrowed, or nothing to free (a memo not filled) */
  else
    dx__lm_row_clear(r);
}

/* Keep new row nw (its strings moved when taken is set): 1, 0 (not kept: written at once) or
** an error. */
static int srow_add(tx_t *t, const work_row_t *nw, int *taken) {
  shared_env_t *se = t->se;
  lm_srow_t *v;
  int rc;
  /* a lock token must name the row (no work_token entry) and the order must hold */
  if (nw->seq >> (64 - LM_TOKEN_GEN_BITS) || (se->srow_n && se->srow[se->srow_n - 1].seq >= nw->seq))
    return 0;
  if (!(v = dx__lm_grow(se->srow, &se->srow_cap, se->srow_n, sizeof *se->srow)))
    return dx__lm_nomem(t->err);
  se->srow = v;
  v = &se->srow[se->srow_n];
  if (taken) { /* the caller forgets them */
    v->r = *nw;
    *taken = 1;
  } else if ((rc = row_copy(t, nw, &v->r))) {
    return rc;
  }
  v->seq = nw->seq;
  v->live = 1;
  v->sh = dx__lm_str_hash(nw->session_id);
  se->srow_n++;
  se->srow_live++;
  return 1;
}

int dx__lm_srow_set(tx_t *t, const work_row_t *old, const work_row_t *nw, int *taken) {
  shared_env_t *se = t->se;
  lm_srow_t *e;
  int rc;
  if (!t->direct || !(old ? old->session_id : nw->session_id)) return 0;
  if (!old) {
    if ((rc = srow_add(t, nw, taken)) > 0) se->batch_writes++; /* a failure after this spoils */
    return rc;
  }
  if (!(e = srow_find(se, old->seq))) return 0; /* a stored row */
  se->batch_writes++;
  if (!nw) {
    if (old->session_id == e->r.session_id) memset(&e->r, 0, sizeof e->r); /* old's now */
    else dx__lm_row_clear(&e->r);
    e->live = 0;
    se->srow_live--;
    return 1;
  }
  /* a lock, renewal or re-timing: a row keeps its identity, session, tag and item */
  e->r.visible_at = nw->visible_at;
  e->r.locked_until = nw->locked_until;
  e->r.token = nw->token;
  e->r.attempt = nw->attempt;
  e->r.locker = nw->locker;
  e->r.sess_epoch = nw->sess_epoch;
  return 1;
}

/* 1 when e is a live kept row of session sid (h: its dx__lm_str_hash). */
static int srow_of(const lm_srow_t *e, uint32_t h, const char *sid) {
  return e->live && e->sh == h && strcmp(e->r.session_id, sid) == 0;
}

void dx__lm_srow_head(shared_env_t *se, const char *sid, sess_queue_t *q) {
  uint32_t h;
  size_t i;
  if (!se->srow_live) return;
  h = dx__lm_str_hash(sid);
  for (i = 0; i < se->srow_n; i++) {
    const lm_srow_t *e = &se->srow[i];
    uint64_t due;
    if (!srow_of(e, h, sid)) continue;
    due = (uint64_t)dx__lm_row_due(&e->r);
    if (!q->found || due < q->due || (due == q->due && e->seq < q->seq)) {
      q->found = 1;
      q->due = due;
      q->seq = e->seq;
    }
  }
}

int dx__lm_srow_seqs(tx_t *t, const char *sid, seq_list_t *l) {
  shared_env_t *se = t->se;
  uint32_t h;
  size_t i;
  if (!t->direct || !se->srow_live) return 0;
  h = dx__lm_str_hash(sid);
  for (i = 0; i < se->srow_n; i++) {
    const lm_srow_t *e = &se->srow[i];
    uint64_t *nv;
    if (!srow_of(e, h, sid)) continue;
    if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
    l->v = nv;
    l->v[l->n++] = e->seq;
  }
  return 0;
}

void dx__lm_srow_drop(shared_env_t *se) {
  size_t i;
  if (!se->srow_n) return;
  for (i = 0; i < se->srow_n; i++)
    if (se->srow[i].live) dx__lm_row_clear(&se->srow[i].r);
  se->srow_n = se->srow_live = 0;
}

int dx__lm_srow_write(tx_t *t) {
  shared_env_t *se = t->se;
  size_t i;
  int rc = 0;
  for (i = 0; i < se->srow_n && !rc; i++)
    if (se->srow[i].live) rc = dx__lm_row_store(t, &se->srow[i].r);
  dx__lm_srow_drop(se);
  return rc;
}

int dx__lm_srow_flush(tx_t *t) {
  if (!t->direct || !t->se->srow_live) return 0;
  t->se->batch_writes++;
  return dx__lm_srow_write(t);
}
