/*
** manage.c -- LMDB provider: management reads: due times, instance info, listing, queue depths,
** history reads.
*/
#include "lmdb_int.h"

/* Earliest due time over the orchestrator indexes (orch), the plain worker indexes (work)
** and the session heads (sess). A due session head may belong to a session another worker
** holds: the fetch then finds nothing and the runtime waits a poll interval. */
static int due_time(tx_t *t, int orch, int work, int sess, int64_t *out) {
  static const int orch_dbs[] = {DB_ORCH_READY, DB_ORCH_LOCK};
  static const int work_dbs[] = {DB_WORK_READY, DB_WORK_LOCK};
  size_t i;
  int rc;
  *out = LM_NEVER;
  for (i = 0; orch && i < 2; i++) {
    orch_cand_t c;
    memset(&c, 0, sizeof c);
    if ((rc = dx__lm_orch_head(t, orch_dbs[i], LM_NEVER, &c))) return rc;
    if (c.inst && c.at < *out) *out = c.at;
    free(c.inst);
  }
  for (i = 0; work && i < 2; i++) {
    work_cand_t c;
    memset(&c, 0, sizeof c);
    if ((rc = dx__lm_work_head(t, work_dbs[i], LM_NEVER, &c))) return rc;
    if (c.found && c.at < *out) *out = c.at;
  }
  if (sess) {
    dkey_t none;
    MDB_val k;
    k_init(&none);
    rc = dx__lm_head_key(t, DB_SESS_HEADS, &none, &k);
    if (rc && rc != DX_ENOTFOUND) return rc;
    if (rc == 0 && k.mv_size >= 8 && (int64_t)get_u64(k.mv_data) < *out)
      *out = (int64_t)get_u64(k.mv_data);
  }
  return 0;
}

/* The earliest expiry of a held instance lock or plain row lock (LM_NEVER: none held). */
static int locks_head(lm_t *p, int64_t *out) {
  orch_cand_t oc;
  work_cand_t wc;
  tx_t t;
  int rc;
  *out = LM_NEVER;
  memset(&oc, 0, sizeof oc);
  memset(&wc, 0, sizeof wc);
  if ((rc = dx__lm_begin_tx(p, 0, &t, NULL))) return rc;
  rc = dx__lm_orch_head(&t, DB_ORCH_LOCK, LM_NEVER, &oc);
  if (!rc) rc = dx__lm_work_head(&t, DB_WORK_LOCK, LM_NEVER, &wc);
  if (!rc && oc.inst) *out = oc.at;
  if (!rc && wc.found && wc.at < *out) *out = wc.at;
  free(oc.inst);
  return dx__lm_tx_end(&t, rc);
}

/* When the earliest session row is due (LM_NEVER: none). */
static int due_time_sess(lm_t *p, int64_t *out) {
  tx_t t;
  int rc;
  if ((rc = dx__lm_begin_tx(p, 0, &t, NULL))) return rc;
  return dx__lm_tx_end(&t, due_time(&t, 0, 0, 1, out));
}

/* Read-only look before a fetch takes the writer lock: idle polling from several processes
** then never contends with writers. Inside a batch the write txn is already held. */
int dx__lm_nothing_due(lm_t *p, int64_t now, int orch, int work, int sess, dx_error_t *err) {
  tx_t t;
  int64_t due;
  int rc;
  if (dx__lm_thread_batch(p->se)) return 0;
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  rc = dx__lm_tx_end(&t, due_time(&t, orch, work, sess, &due));
  if (rc) return rc;
  return due > now;
}

int dx__lm_read_history(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                        dx_event_t **events, size_t *n, uint64_t *exec_out, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  uint64_t exec = 0;
  tx_t t;
  int rc;
  if (!events || !n) return dx_error_set(err, DX_EINVAL, "events/n is NULL");
  *events = NULL;
  *n = 0;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__lm_begin_tx(p, 0, &t, err)))
    return rc;
  rc = dx__lm_resolve_exec(&t, instance, execution_id, &exec);
  if (!rc) rc = dx__lm_history_load(&t, instance, exec, events, n);
  rc = dx__lm_tx_end(&t, rc);
  if (!rc && exec_out) *exec_out = exec;
  return rc;
}

int dx__lm_append(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                  const dx_event_t *events, size_t n, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__check_events(events, n, err)))
    return rc;
  if (execution_id == 0) return dx_error_set(err, DX_EINVAL, "execution_id 0 (ids start at 1)");
  LM_WRITE(p, t, err, rc, dx__lm_history_append(&t, instance, execution_id, events, n), (void)0);
  return rc;
}

static int instance_info(tx_t *t, const char *inst, dx_instance_info_t *out) {
  inst_rec_t ir;
  exec_rec_t er;
  orch_state_t st;
  int rc = dx__lm_inst_get(t, inst, &ir);
  if (rc == DX_ENOTFOUND && dx__lm_state_get(t, inst, &st) == 0 &&
      (st.token || st.ready_at != LM_NEVER)) {
    /* Started but not yet run: messages are queued, no record yet. Status NONE, found. */
    out->instance_id = dx__strdup(inst);
    return out->instance_id ? 0 : dx__lm_nomem(t->err);
  }
  if (rc == DX_ENOTFOUND)
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  if (rc) return rc;
  rc = dx__lm_exec_get(t, inst, ir.current_exec, &er);
  if (rc == DX_ENOTFOUND) rc = 0; /* status stays NONE */
  if (!rc) {
    /* hand the decoded strings over instead of copying them */
    out->orchestration_name = ir.name;
    out->orchestration_version = ir.version;
    out->custom_status = ir.custom_status;
    out->parent_instance = ir.parent;
    out->output = er.output;
    out->failure = er.fail;
    out->current_execution_id = ir.current_exec;
    out->status = er.status;
    out->custom_status_version = ir.cs_version;
    out->created_at_ms = ir.created_at;
    out->updated_at_ms = ir.updated_at;
    memset(&ir, 0, sizeof ir);
    memset(&er, 0, sizeof er);
    if (!(out->instance_id = dx__strdup(inst))) rc = dx__lm_nomem(t->err);
  }
  dx__lm_inst_clear(&ir);
  dx__lm_exec_clear(&er);
  return rc;
}

/* The contract's uniqueness rule: a START for an id that exists or whose start is queued
** fails with DX_EEXIST (checked in the writing transaction; LMDB has one writer). */
int dx__lm_start_unique(tx_t *t, const dx_work_item_t *w) {
  dx_instance_info_t info;
  dx_error_t *saved = t->err, probe = {0};
  int rc;
  if (w->kind != DX_WI_START) return 0;
  memset(&info, 0, sizeof info);
  t->err = &probe;
  rc = instance_info(t, w->instance, &info);
  t->err = saved;
  dx_instance_info_clear(&info);
  if (rc == DX_ENOTFOUND) return 0;
  if (rc) return dx_error_set(t->err, rc, "%s", probe.msg);
  return dx_error_set(t->err, DX_EEXIST, "instance '%s' already exists", w->instance);
}

int dx__lm_get_info(dx_provider_t *pp, const char *instance, dx_instance_info_t *out,
                    dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__lm_begin_tx(p, 0, &t, err)))
    return rc;
  rc = dx__lm_tx_end(&t, instance_info(&t, instance, out));
  if (rc) dx_instance_info_clear(out);
  return rc;
}

void dx__lm_strs_free(str_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) free(l->v[i]);
  free(l->v);
}

int dx__lm_strs_push(str_list_t *l, const char *s) {
  char **nv;
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return DX_ENOMEM;
  l->v = nv;
  if (!(l->v[l->n] = dx__strdup(s))) return DX_ENOMEM;
  l->n++;
  return 0;
}

/* Instance ids newest first, walking the creation index backwards. */
static int collect_instances(tx_t *t, str_list_t *l) {
  MDB_cursor *c;
  MDB_val k, v;
  int rc = 0, mrc = mdb_cursor_open(t->txn, t->se->dbi[DB_INST_CREATED], &c);
  if (mrc) return dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_INST_CREATED]);
  for (mrc = mdb_cursor_get(c, &k, &v, MDB_LAST); mrc == 0 && !rc;
       mrc = mdb_cursor_get(c, &k, &v, MDB_PREV)) {
    if ((rc = dx__lm_check_sum(t, DB_INST_CREATED, &k, &v))) break;
    if (v.mv_size == 0 || ((const char *)v.mv_data)[v.mv_size - 1] != 0)
      rc = dx__lm_corrupt(t, DB_INST_CREATED, "value is not a string", "%zu-byte key", k.mv_size);
    else if (dx__lm_strs_push(l, v.mv_data))
      rc = dx__lm_nomem(t->err);
  }
  mdb_cursor_close(c);
  if (!rc && mrc != MDB_NOTFOUND) rc = dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_INST_CREATED]);
  return rc;
}

int dx__lm_list(dx_provider_t *pp, dx_instance_cb cb, void *ud, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  str_list_t l = {NULL, 0, 0};
  size_t i;
  tx_t t;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  /* the callbacks run after the read txn ends: they may take their time or call us */
  rc = dx__lm_tx_end(&t, collect_instances(&t, &l));
  for (i = 0; i < l.n && !rc; i++)
    if (cb(ud, l.v[i])) break;
  dx__lm_strs_free(&l);
  return rc;
}

int dx__lm_depths(dx_provider_t *pp, dx_queue_depths_t *out, dx_error_t *err) {
  static const int dbs[3] = {DB_ORCH_MSGS, DB_WORK, DB_INSTANCES};
  lm_t *p = (lm_t *)pp;
  uint64_t *dst[3];
  MDB_stat st;
  tx_t t;
  int i, rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  dst[0] = &out->orchestrator;
  dst[1] = &out->worker;
  dst[2] = &out->instances;
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  for (i = 0; i < 3 && !rc; i++) {
    int mrc = mdb_stat(t.txn, p->se->dbi[dbs[i]], &st);
    if (mrc) rc = dx__lm_tx_err(&t, mrc, dx__lm_db_names[dbs[i]]);
    else *dst[i] = st.ms_entries;
  }
  return dx__lm_tx_end(&t, rc);
}

int dx__lm_next_due(dx_provider_t *pp, int64_t now, int64_t *out, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = LM_NEVER;
  int64_t sess_due = LM_NEVER, locks_due = LM_NEVER, sweep;
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  rc = dx__lm_tx_end(&t, due_time(&t, 1, 1, 1, out));
  if (!rc) rc = due_time_sess(p, &sess_due);
  if (!rc) rc = locks_head(p, &locks_due);
  /* session rows wait in flight (or delayed), or locks are held: their holder may die, and
  ** only a fetch sweeps dead holders' locks, so look again soon (live.c) */
  if (!rc && ((sess_due != LM_NEVER && sess_due > now) || (locks_due != LM_NEVER && locks_due > now)) &&
      (sweep = dx__lm_live_next_sweep(p)) < *out)
    *out = sweep > now ? sweep : now;
  return rc;
}
