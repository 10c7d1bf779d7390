/*
** listidx.c -- LMDB provider: the indexes behind list pages (issue 10), so a page reads only
** its own rows however many instances the store holds and however little a filter matches:
**
**   inst_status   u8 status be64 created_at be64 created_seq -> inst   (status of the current
**                 execution; continued-as-new counts as running)
**   inst_name     name\0 be64 created_at be64 created_seq -> inst
**   orch_starts   u8 0 be64 seq -> inst          queued starts of instances without a record
**                 u8 1 name\0 be64 seq -> inst   (seq of the START message), by name
**
** Writes happen only when something listed changes: a START is queued, an instance's first
** turn creates its record (name, status, the start entries go), its status changes (an
** execution ends, terminate), or it is deleted; the other turns write nothing here. A store
** created before these indexes gets them built once when a build with them opens it
** (meta "list_idx"); a read-only such store is listed by scanning (manage.c). Readers
** re-check every entry against the record, so a stale entry can hide nothing.
*/
#include "lmdb_int.h"

/* The status an instance is listed under (0: not listed by status). */
static int list_status(int st) { return st == DX_STATUS_CONTINUED_AS_NEW ? DX_STATUS_RUNNING : st; }

static void key_at(dkey_t *k, int64_t at, uint64_t seq) {
  k_time(k, at);
  k_u64(k, seq);
}

static int put_or_del(tx_t *t, int db, const dkey_t *k, const char *inst, int put) {
  int rc = dx__lm_idx_op(t, db, k, inst, strlen(inst) + 1, put);
  return !put && rc == DX_ENOTFOUND ? 0 : rc;
}

int dx__lm_lidx_status(tx_t *t, const char *inst, int64_t at, uint64_t seq, int old_st,
                       int new_st) {
  dkey_t k;
  int rc;
  old_st = list_status(old_st);
  new_st = list_status(new_st);
  if (old_st == new_st || t->se->no_list_idx) return 0;
  if (old_st) {
    k_init(&k);
    k_u8(&k, (unsigned)old_st);
    key_at(&k, at, seq);
    if ((rc = put_or_del(t, DB_INST_STATUS, &k, inst, 0))) return rc;
  }
  if (!new_st) return 0;
  k_init(&k);
  k_u8(&k, (unsigned)new_st);
  key_at(&k, at, seq);
  return put_or_del(t, DB_INST_STATUS, &k, inst, 1);
}

int dx__lm_lidx_name(tx_t *t, const char *inst, int64_t at, uint64_t seq, const char *old_name,
                     const char *new_name) {
  dkey_t k;
  int rc;
  if (t->se->no_list_idx || (old_name && new_name && strcmp(old_name, new_name) == 0) ||
      (!old_name && !new_name))
    return 0;
  if (old_name) {
    k_init(&k);
    k_str(&k, old_name);
    key_at(&k, at, seq);
    if ((rc = put_or_del(t, DB_INST_NAME, &k, inst, 0))) return rc;
  }
  if (!new_name) return 0;
  k_init(&k);
  k_str(&k, new_name);
  key_at(&k, at, seq);
  return put_or_del(t, DB_INST_NAME, &k, inst, 1);
}

int dx__lm_lidx_start(tx_t *t, uint64_t seq, const char *inst, const char *name, int put) {
  dkey_t k;
  int rc;
  if (t->se->no_list_idx) return 0;
  k_init(&k);
  k_u8(&k, 0);
  k_u64(&k, seq);
  if ((rc = put_or_del(t, DB_ORCH_STARTS, &k, inst, put)) || !name) return rc;
  k_init(&k);
  k_u8(&k, 1);
  k_str(&k, name);
  k_u64(&k, seq);
  return put_or_del(t, DB_ORCH_STARTS, &k, inst, put);
}

int dx__lm_lidx_forget_starts(tx_t *t, const msg_list_t *l, const orch_state_t *st) {
  size_t i;
  int rc = 0;
  for (i = 0; i < l->n && !rc; i++) {
    dx_work_item_t w;
    if (st && !dx__lm_msg_in_lock(st, &l->v[i])) continue;
    if (dx__lm_msg_decode(t, l, i, &w)) continue; /* `check` reports undecodable messages */
    if (w.kind == DX_WI_START) rc = dx__lm_lidx_start(t, l->v[i].seq, l->inst, w.name, 0);
    dx_work_item_clear(&w);
  }
  return rc;
}

/* {===== building the indexes of an older store =====} */

static int build_inst_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  const char *inst = k->mv_data;
  inst_rec_t ir;
  exec_rec_t er;
  int rc, st = 0;
  (void)v;
  (void)ud;
  if (k->mv_size == 0 || inst[k->mv_size - 1] != 0) return 0; /* `check` reports such keys */
  if ((rc = dx__lm_inst_get(t, inst, &ir))) return rc;
  rc = dx__lm_exec_get(t, inst, ir.current_exec, &er);
  if (rc == 0) {
    st = er.status;
    dx__lm_exec_clear(&er);
  } else if (rc == DX_ENOTFOUND) {
    rc = 0;
  }
  if (!rc) rc = dx__lm_lidx_status(t, inst, ir.created_at, ir.created_seq, 0, st);
  if (!rc) rc = dx__lm_lidx_name(t, inst, ir.created_at, ir.created_seq, NULL, ir.name);
  dx__lm_inst_clear(&ir);
  return rc;
}

int dx__lm_lidx_build(tx_t *t) {
  static const unsigned char one = 1;
  dx__list_cand_t *c = NULL;
  size_t n = 0, i;
  dkey_t k;
  MDB_val v;
  int rc;
  key_name(&k, "list_idx");
  rc = dx__lm_db_get(t, DB_META, &k, &v);
  if (rc != DX_ENOTFOUND) return rc;
  if (t->se->read_only) { /* listed by scanning */
    t->se->no_list_idx = 1;
    return 0;
  }
  k_init(&k);
  if ((rc = dx__lm_scan_prefix(t, DB_INSTANCES, &k, build_inst_cb, NULL))) return rc;
  rc = dx__lm_queued_scan(t, &c, &n);
  for (i = 0; i < n; i++) {
    if (!rc)
      rc = dx__lm_lidx_start(t, c[i].seq, c[i].row.instance_id, c[i].row.orchestration_name, 1);
    dx_instance_info_clear(&c[i].row);
  }
  free(c);
  key_name(&k, "list_idx");
  return rc ? rc : dx__lm_db_put(t, DB_META, &k, &one, 1, 0);
}
