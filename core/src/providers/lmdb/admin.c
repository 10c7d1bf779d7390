/*
** admin.c -- LMDB provider: management writes: delete instances (every table that names
** them), prune old executions, terminate a running instance.
*/
#include "lmdb_int.h"

/* Keys of `db` under `prefix`, copied (deleting while a cursor walks is avoided). */
typedef struct {
  MDB_val *v;
  size_t n, cap;
} key_list_t;

static void keys_free(key_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) free(l->v[i].mv_data);
  free(l->v);
}

static int key_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  key_list_t *l = ud;
  MDB_val *nv;
  (void)v;
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
  l->v = nv;
  if (!(l->v[l->n].mv_data = malloc(k->mv_size ? k->mv_size : 1))) return dx__lm_nomem(t->err);
  memcpy(l->v[l->n].mv_data, k->mv_data, k->mv_size);
  l->v[l->n++].mv_size = k->mv_size;
  return 0;
}

/* Delete every key of `db` starting with `prefix`; *count (may be NULL) += how many. */
static int del_prefix(tx_t *t, int db, const dkey_t *prefix, uint64_t *count) {
  key_list_t l = {NULL, 0, 0};
  size_t i;
  int rc = dx__lm_scan_prefix(t, db, prefix, key_cb, &l);
  for (i = 0; i < l.n && !rc; i++) {
    int mrc = mdb_del(t->txn, t->se->dbi[db], &l.v[i], NULL);
    if (mrc && mrc != MDB_NOTFOUND) rc = dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
  }
  if (!rc && count) *count += l.n;
  keys_free(&l);
  return rc;
}

/* The instance's orchestrator messages and lock state (an in-flight turn's ack then fails). */
static int drop_orch_queue(tx_t *t, const char *inst) {
  orch_state_t st;
  dkey_t k;
  int rc = dx__lm_state_get(t, inst, &st);
  if (!rc && (st.token || st.ready_at != LM_NEVER)) rc = dx__lm_state_set(t, inst, &st, &STATE_EMPTY);
  key_inst(&k, inst);
  return rc ? rc : del_prefix(t, DB_ORCH_MSGS, &k, NULL);
}

/* The instance's worker rows with their indexes; a session left with no rows and no owner
** goes too (an owned one is the owner's to release; cleanup_orphaned_sessions takes lapsed). */
static int drop_work_rows(tx_t *t, const char *inst) {
  seq_list_t seqs = {NULL, 0, 0};
  dkey_t k;
  size_t i;
  int rc;
  key_inst(&k, inst);
  rc = dx__lm_scan_prefix(t, DB_WORK_IDENT, &k, dx__lm_ident_cb, &seqs);
  for (i = 0; i < seqs.n && !rc; i++) {
    work_row_t r;
    sess_queue_t q;
    sess_rec_t s;
    rc = dx__lm_row_get(t, seqs.v[i], &r);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (!rc) rc = dx__lm_row_set(t, &r, NULL);
    if (!rc && r.session_id && !(rc = dx__lm_squeue_get(t, r.session_id, &q)) && !q.found) {
      rc = dx__lm_sess_get(t, r.session_id, &s);
      if (rc == DX_ENOTFOUND) rc = 0;
      else if (!rc) {
        if (!dx__lm_sess_owned(&s)) rc = dx__lm_sess_put(t, r.session_id, &s, NULL);
        dx__lm_sess_clear(&s);
      }
    }
    dx__lm_row_clear(&r);
  }
  free(seqs.v);
  return rc;
}

/* Everything stored under one instance id, its key-value state included. */
static int delete_one(tx_t *t, const char *inst, uint64_t *deleted) {
  inst_rec_t ir;
  dkey_t k;
  uint64_t found = 0;
  int rc = dx__lm_inst_get(t, inst, &ir);
  if (rc && rc != DX_ENOTFOUND) return rc;
  if (rc == 0) {
    exec_rec_t er;
    found = 1;
    k_init(&k);
    k_time(&k, ir.created_at);
    k_u64(&k, ir.created_seq);
    rc = dx__lm_idx_op(t, DB_INST_CREATED, &k, NULL, 0, 0);
    if (!rc && (rc = dx__lm_exec_get(t, inst, ir.current_exec, &er)) == 0) {
      rc = dx__lm_lidx_status(t, inst, ir.created_at, ir.created_seq, er.status, DX_STATUS_NONE);
      dx__lm_exec_clear(&er);
    } else if (rc == DX_ENOTFOUND) {
      rc = 0;
    }
    if (!rc) rc = dx__lm_lidx_name(t, inst, ir.created_at, ir.created_seq, ir.name, NULL);
    key_inst(&k, inst);
    if (!rc) rc = dx__lm_db_del(t, DB_INSTANCES, &k);
    dx__lm_inst_clear(&ir);
  } else {
    orch_state_t st;
    msg_list_t l;
    rc = dx__lm_state_get(t, inst, &st);
    found = !rc && (st.token || st.ready_at != LM_NEVER);
    if (found && !(rc = dx__lm_msgs_load(t, inst, &l))) { /* a queued start: its entries go */
      rc = dx__lm_lidx_forget_starts(t, &l, NULL);
      dx__lm_msgs_free(&l);
    }
  }
  key_inst(&k, inst);
  if (!rc) rc = del_prefix(t, DB_EXECUTIONS, &k, &found);
  if (!rc) rc = del_prefix(t, DB_HISTORY, &k, &found);
  if (!rc) rc = drop_orch_queue(t, inst);
  if (!rc) rc = drop_work_rows(t, inst);
  if (!rc) rc = dx__lm_kv_delete(t, inst);
  if (!rc && found && deleted) (*deleted)++;
  return rc;
}

/* Without force: DX_ESTATE unless every listed instance is terminal or unknown. */
static int all_terminal(tx_t *t, const char *const *ids, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    dx_instance_info_t info;
    dx_error_t *saved = t->err, probe = {0};
    int rc, st;
    memset(&info, 0, sizeof info);
    t->err = &probe;
    rc = dx__lm_instance_info(t, ids[i], &info);
    t->err = saved;
    st = info.status;
    dx_instance_info_clear(&info);
    if (rc == DX_ENOTFOUND) continue;
    if (rc) return dx_error_set(t->err, rc, "%s", probe.msg);
    if (st != DX_STATUS_COMPLETED && st != DX_STATUS_FAILED)
      return dx_error_set(t->err, DX_ESTATE, "instance '%s' is %s; use force to delete it anyway",
                          ids[i], st == DX_STATUS_NONE ? "queued (its start has not run yet)"
                                                       : "running");
  }
  return 0;
}

static int delete_tx(tx_t *t, const char *const *ids, size_t n, int force, uint64_t *deleted) {
  size_t i;
  int rc = force ? 0 : all_terminal(t, ids, n);
  for (i = 0; i < n && !rc; i++) rc = delete_one(t, ids[i], deleted);
  return rc;
}

int dx__lm_delete_instances(dx_provider_t *pp, const char *const *ids, size_t n, int force,
                            uint64_t *deleted, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t count = 0;
  tx_t t;
  int rc;
  if ((rc = dx__check_instances(ids, n, err))) return rc;
  LM_WRITE(p, t, err, rc, delete_tx(&t, ids, n, force, &count), count = 0);
  if (deleted) *deleted = rc ? 0 : count;
  return rc;
}

/* {===== prune =====} */

static int prune_tx(tx_t *t, const char *inst, uint64_t keep, uint64_t *pruned) {
  inst_rec_t ir;
  uint64_t i;
  int rc = dx__lm_inst_get(t, inst, &ir);
  if (rc == DX_ENOTFOUND) return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  if (rc) return rc;
  for (i = 1; i + keep <= ir.current_exec && !rc; i++) {
    exec_rec_t er;
    dkey_t k;
    uint64_t exec = ir.current_exec - keep - (i - 1);
    rc = dx__lm_exec_get(t, inst, exec, &er);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; } /* pruned before */
    if (rc) break;
    if (er.status != DX_STATUS_RUNNING) {
      key_exec(&k, inst, exec);
      rc = dx__lm_db_del(t, DB_EXECUTIONS, &k);
      if (!rc) rc = del_prefix(t, DB_HISTORY, &k, NULL);
      if (!rc) (*pruned)++;
    }
    dx__lm_exec_clear(&er);
  }
  dx__lm_inst_clear(&ir);
  return rc;
}

int dx__lm_prune_executions(dx_provider_t *pp, const char *instance, uint64_t keep,
                            uint64_t *pruned, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t count = 0;
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err))) return rc;
  if (keep < 1) return dx_error_set(err, DX_EINVAL, "keep must be at least 1 (the current execution)");
  LM_WRITE(p, t, err, rc, prune_tx(&t, instance, keep, &count), count = 0);
  if (pruned) *pruned = rc ? 0 : count;
  return rc;
}

/* {===== terminate =====} */

static int terminate_tx(tx_t *t, int64_t now, const char *inst, const dx_failure_t *why,
                        int notify_parent) {
  inst_rec_t ir;
  exec_rec_t er;
  dx_event_t *hist = NULL, ev;
  size_t n = 0;
  int rc = dx__lm_inst_get(t, inst, &ir);
  if (rc == DX_ENOTFOUND)
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' has no record (unknown, or its "
                        "start is queued and has not run: delete it instead)", inst);
  if (rc) return rc;
  memset(&er, 0, sizeof er);
  rc = dx__lm_exec_get(t, inst, ir.current_exec, &er);
  if (!rc && er.status != DX_STATUS_RUNNING)
    rc = dx_error_set(t->err, DX_ESTATE, "instance '%s' is not running (%s)", inst,
                      er.status == DX_STATUS_COMPLETED ? "Completed" : er.status == DX_STATUS_FAILED
                                                                        ? "Failed" : "ended");
  if (!rc) rc = dx__lm_history_load(t, inst, ir.current_exec, &hist, &n);
  if (!rc) {
    memset(&ev, 0, sizeof ev);
    ev.kind = DX_EV_ORCH_FAILED;
    ev.event_id = n ? hist[n - 1].event_id + 1 : 1;
    ev.timestamp_ms = now;
    ev.fail = *why;
    rc = dx__lm_history_append(t, inst, ir.current_exec, &ev, 1);
  }
  if (!rc) {
    er.status = DX_STATUS_FAILED;
    er.completed_at = now;
    dx_failure_clear(&er.fail);
    if (dx_failure_copy(&er.fail, why)) rc = dx__lm_nomem(t->err);
  }
  if (!rc) rc = dx__lm_exec_put(t, inst, ir.current_exec, &er);
  if (!rc)
    rc = dx__lm_lidx_status(t, inst, ir.created_at, ir.created_seq, DX_STATUS_RUNNING,
                            DX_STATUS_FAILED);
  if (!rc) {
    ir.updated_at = now;
    rc = dx__lm_inst_put(t, inst, &ir);
  }
  if (!rc) rc = drop_orch_queue(t, inst);
  if (!rc) rc = drop_work_rows(t, inst);
  /* the execution ended: its key-value changes become committed, as an ack's would */
  if (!rc) rc = dx__lm_kv_ack(t, inst, NULL, 0, DX_STATUS_FAILED);
  if (!rc && notify_parent && n) {
    dx_work_item_t w;
    if (dx__sub_failed_for_parent(&hist[0], why, &w)) rc = dx__lm_orch_enqueue(t, &w, now);
  }
  dx_events_free(hist, n);
  dx__lm_exec_clear(&er);
  dx__lm_inst_clear(&ir);
  return rc;
}

int dx__lm_terminate(dx_provider_t *pp, int64_t now, const char *instance,
                     const dx_failure_t *why, int notify_parent, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err))) return rc;
  if (!why) return dx_error_set(err, DX_EINVAL, "failure is NULL");
  LM_WRITE(p, t, err, rc, terminate_tx(&t, now, instance, why, notify_parent), (void)0);
  return rc;
}
