/*
** kmsgs.c -- LMDB provider: orchestration messages kept in the open batch (issue 12, lmcpu4).
**
** With held rounds an activity's result usually lives and dies inside one batch: the
** activity's ack (a direct method) queues the result for its instance, the cycle's
** orchestration fetch locks the instance with it, and the turn's ack deletes it. Written at
** once that was a record write and a delete of orch_msgs per activity (and that DB's pages in
** every commit) for a message the commit does not keep.
**
** So a message a direct method (LM_WRITE_DIRECT) queues stays in memory (shared_env_t.kmsg)
** from its enqueue: orch.c's msgs_read appends the instance's kept messages to what it reads
** (they are the newest: their seqs come after every stored one's), a rewrite or delete of one
** (msg_put, msg_del) changes or drops it there. A nested method and the commit write the
** rest first, exactly as the enqueue would have written them, as they are now
** (dx__lm_pend_flush); a batch that ends otherwise drops them. A kept change counts as a write
** (se->batch_writes), so a direct method that fails after one spoils the batch: what a commit
** stores is what writing at once would have stored.
**
** Instances have an entry each (hash index by id, lm_strix_t) with the list of their kept
** messages in seq order; a message that leaves stays as a dead entry until the batch ends.
*/
#include "lmdb_int.h"

struct lm_kinst_s {
  char *inst;          /* owned; the index's key */
  uint32_t head, tail; /* the instance's messages: entry index + 1 (0: none) */
};

struct lm_kmsg_s {
  orch_msg_t m;   /* owned item */
  uint32_t inst;  /* its instance's entry index */
  uint32_t next;  /* the instance's next message: entry index + 1 (0: none) */
  int live;
};

static lm_kinst_t *kinst_find(shared_env_t *se, const char *inst) {
  size_t at;
  if (!se->kinst_n) return NULL;
  at = dx__lm_strix_find(&se->kinst_ix, se->kinst, sizeof *se->kinst, inst);
  return at ? &se->kinst[at - 1] : NULL;
}

static lm_kinst_t *kinst_add(tx_t *t, const char *inst) {
  shared_env_t *se = t->se;
  lm_kinst_t *v;
  if (!(v = dx__lm_grow(se->kinst, &se->kinst_cap, se->kinst_n, sizeof *se->kinst))) return NULL;
  se->kinst = v;
  if (dx__lm_strix_push(&se->kinst_ix, v, sizeof *v, se->kinst_n, inst)) return NULL;
  return &se->kinst[se->kinst_n++];
}

/* The live kept message `seq` of inst, or NULL. */
static lm_kmsg_t *kmsg_find(shared_env_t *se, const char *inst, uint64_t seq) {
  lm_kinst_t *ki = kinst_find(se, inst);
  uint32_t i;
  for (i = ki ? ki->head : 0; i; i = se->kmsg[i - 1].next) {
    lm_kmsg_t *e = &se->kmsg[i - 1];
    if (e->m.seq == seq) return e->live ? e : NULL;
    if (e->m.seq > seq) break;
  }
  return NULL;
}

int dx__lm_kmsg_add(tx_t *t, const char *inst, orch_msg_t *m) {
  shared_env_t *se = t->se;
  lm_kinst_t *ki;
  lm_kmsg_t *v;
  size_t at;
  if (!t->direct) return 0;
  /* the list stays in seq order: seqs only grow within a batch */
  if ((!(ki = kinst_find(se, inst)) && !(ki = kinst_add(t, inst))) ||
      !(v = dx__lm_grow(se->kmsg, &se->kmsg_cap, se->kmsg_n, sizeof *se->kmsg)))
    return dx__lm_nomem(t->err);
  se->kmsg = v;
  if (ki->tail && se->kmsg[ki->tail - 1].m.seq >= m->seq) return 0; /* written at once */
  at = se->kmsg_n++;
  v[at].m = *m; /* takes the item */
  m->item = NULL;
  m->item_len = 0;
  v[at].inst = (uint32_t)(ki - se->kinst);
  v[at].next = 0;
  v[at].live = 1;
  if (ki->tail) v[ki->tail - 1].next = (uint32_t)(at + 1);
  else ki->head = (uint32_t)(at + 1);
  ki->tail = (uint32_t)(at + 1);
  se->kmsg_live++;
  se->batch_writes++; /* a failure after this spoils the batch, as after a write */
  return 1;
}

int dx__lm_kmsg_put(tx_t *t, const char *inst, const orch_msg_t *m) {
  lm_kmsg_t *e;
  if (!t->direct || !(e = kmsg_find(t->se, inst, m->seq))) return 0;
  e->m.visible_at = m->visible_at; /* a message keeps its item */
  e->m.token = m->token;
  e->m.attempt = m->attempt;
  t->se->batch_writes++;
  return 1;
}

int dx__lm_kmsg_del(tx_t *t, const char *inst, uint64_t seq) {
  shared_env_t *se = t->se;
  lm_kmsg_t *e;
  if (!t->direct || !(e = kmsg_find(se, inst, seq))) return 0;
  free(e->m.item);
  e->m.item = NULL;
  e->live = 0;
  se->kmsg_live--;
  se->batch_writes++;
  return 1;
}

int dx__lm_kmsg_list(tx_t *t, msg_list_t *l) {
  shared_env_t *se = t->se;
  lm_kinst_t *ki;
  uint32_t i;
  if (!t->direct || !(ki = kinst_find(se, l->inst))) return 0;
  for (i = ki->head; i; i = se->kmsg[i - 1].next) {
    const lm_kmsg_t *e = &se->kmsg[i - 1];
    orch_msg_t *nv, *d;
    if (!e->live) continue;
    if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
    l->v = nv;
    d = &l->v[l->n];
    *d = e->m;
    d->item = NULL;
    d->item_len = 0;
    if (!l->heads) {
      if (!(d->item = malloc(e->m.item_len ? e->m.item_len : 1))) return dx__lm_nomem(t->err);
      if (e->m.item_len) memcpy(d->item, e->m.item, e->m.item_len);
      d->item_len = e->m.item_len;
    }
    l->n++;
  }
  return 0;
}

void dx__lm_kmsg_drop(shared_env_t *se) {
  size_t i;
  if (!se->kinst_n && !se->kmsg_n) return;
  for (i = 0; i < se->kmsg_n; i++) free(se->kmsg[i].m.item);
  for (i = 0; i < se->kinst_n; i++) free(se->kinst[i].inst);
  se->kmsg_n = se->kmsg_live = se->kinst_n = 0;
  dx__lm_strix_clear(&se->kinst_ix);
}

int dx__lm_kmsg_write(tx_t *t) {
  shared_env_t *se = t->se;
  size_t i;
  int rc = 0;
  for (i = 0; i < se->kmsg_n && !rc; i++) {
    const lm_kmsg_t *e = &se->kmsg[i];
    dkey_t k;
    if (!e->live) continue;
    key_inst(&k, se->kinst[e->inst].inst);
    k_u64(&k, e->m.seq);
    rc = dx__lm_rec_put(t, &dx__lm_msg_schema, &k, &e->m);
  }
  dx__lm_kmsg_drop(se);
  return rc;
}
