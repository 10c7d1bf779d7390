/*
** manage.c -- LMDB provider: management reads: due times, instance info, listing (pages,
** executions, an instance's queue rows), queue depths, history reads.
*/
#include "lmdb_int.h"

/* Earliest due time over the orchestrator indexes (orch), the plain worker indexes (work)
** and the session heads (sess), counting only work the filter `f` takes (tags,
** capabilities). A due session head may belong to a session another worker holds: the
** fetch then finds nothing and the runtime waits a poll interval. */
static int due_time(tx_t *t, const dx_fetch_filter_t *f, int orch, int work, int sess,
                    int64_t *out) {
  static const int orch_dbs[] = {DB_ORCH_READY, DB_ORCH_LOCK};
  size_t i;
  int rc;
  *out = LM_NEVER;
  if (orch && f && f->capabilities_set) { /* the first instance this worker can run */
    orch_cand_t c;
    if ((rc = dx__lm_orch_pick(t, f, LM_NEVER, &c))) return rc;
    if (c.inst && c.at < *out) *out = c.at;
    dx__lm_cand_clear(&c);
    orch = 0;
  }
  for (i = 0; orch && i < 2; i++) {
    orch_cand_t c;
    memset(&c, 0, sizeof c);
    if ((rc = dx__lm_orch_head(t, orch_dbs[i], LM_NEVER, &c))) return rc;
    if (c.inst && c.at < *out) *out = c.at;
    free(c.inst);
  }
  if (work) {
    work_cand_t c;
    memset(&c, 0, sizeof c);
    if ((rc = dx__lm_work_heads(t, f, LM_NEVER, &c))) return rc;
    if (c.found && c.at < *out) *out = c.at;
  }
  if (sess) {
    int64_t at;
    if ((rc = dx__lm_sess_heads_due(t, f, &at))) return rc;
    if (at < *out) *out = at;
  }
  return 0;
}

/* The earliest expiry of a held instance lock or plain row lock this handle's filter takes
** (LM_NEVER: none held). */
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
  if (!rc) rc = dx__lm_work_db_heads(&t, DB_WORK_LOCK, p->filter, LM_NEVER, &wc);
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
  return dx__lm_tx_end(&t, due_time(&t, p->filter, 0, 0, 1, out));
}

/* Read-only look before a fetch takes the writer lock: idle polling from several processes
** then never contends with writers. Inside a batch the write txn is already held. */
int dx__lm_nothing_due(lm_t *p, int64_t now, int orch, int work, int sess, dx_error_t *err) {
  tx_t t;
  int64_t due;
  int rc;
  if (dx__lm_thread_batch(p->se)) return 0;
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  rc = dx__lm_tx_end(&t, due_time(&t, p->filter, orch, work, sess, &due));
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

static int append_tx(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev, size_t n) {
  int rc = dx__lm_history_unused(t, inst, exec, ev, n);
  return rc ? rc : dx__lm_history_append(t, inst, exec, ev, n);
}

int dx__lm_append(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                  const dx_event_t *events, size_t n, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__check_events(events, n, err)))
    return rc;
  if (execution_id == 0) return dx_error_set(err, DX_EINVAL, "execution_id 0 (ids start at 1)");
  LM_WRITE(p, t, err, rc, append_tx(&t, instance, execution_id, events, n), (void)0);
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

int dx__lm_instance_info(tx_t *t, const char *inst, dx_instance_info_t *out) {
  return instance_info(t, inst, out);
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
  rc = dx__lm_tx_end(&t, due_time(&t, p->filter, 1, 1, 1, out));
  if (!rc) rc = due_time_sess(p, &sess_due);
  if (!rc) rc = locks_head(p, &locks_due);
  /* session rows wait in flight (or delayed), or locks are held: their holder may die, and
  ** only a fetch sweeps dead holders' locks, so look again soon (live.c) */
  if (!rc && ((sess_due != LM_NEVER && sess_due > now) || (locks_due != LM_NEVER && locks_due > now)) &&
      (sweep = dx__lm_live_next_sweep(p)) < *out)
    *out = sweep > now ? sweep : now;
  return rc;
}

/* {===== list_page =====} */

typedef struct {
  dx__list_cand_t *v;
  size_t n, cap;
} cand_list_t;

/* The queued START of an instance without a record: its row and seq (found = 0: none). */
static int queued_start(tx_t *t, const char *inst, dx__list_cand_t *c, int *found) {
  msg_list_t l;
  size_t i;
  int rc = dx__lm_msgs_load(t, inst, &l);
  *found = 0;
  for (i = 0; !rc && !*found && i < l.n; i++) {
    dx_work_item_t w;
    if ((rc = dx__lm_msg_decode(t, &l, i, &w))) break;
    if (w.kind == DX_WI_START) {
      *found = 1;
      c->seq = l.v[i].seq;
      if (dx__list_queued_row(inst, &w, l.v[i].visible_at, &c->row)) rc = dx__lm_nomem(t->err);
    }
    dx_work_item_clear(&w);
  }
  dx__lm_msgs_free(&l);
  return rc;
}

/* The queued START of `inst` when it has no record yet (found = 0: none, or it ran). */
static int never_run(tx_t *t, const char *inst, dx__list_cand_t *c, int *found) {
  inst_rec_t ir;
  int rc = dx__lm_inst_get(t, inst, &ir);
  *found = 0;
  if (rc == 0) dx__lm_inst_clear(&ir);
  if (rc != DX_ENOTFOUND) return rc;
  memset(c, 0, sizeof *c);
  return queued_start(t, inst, c, found);
}

/* Instances with queue state but no record: starts no worker has run yet. */
static int queued_scan_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  cand_list_t *l = ud;
  dx__list_cand_t c, *nv;
  const char *inst = k->mv_data;
  int rc, found;
  (void)v;
  if (k->mv_size == 0 || inst[k->mv_size - 1] != 0) return 0; /* check reports such keys */
  if ((rc = never_run(t, inst, &c, &found)) || !found) return rc;
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) {
    dx_instance_info_clear(&c.row);
    return dx__lm_nomem(t->err);
  }
  l->v = nv;
  l->v[l->n++] = c;
  return 0;
}

int dx__lm_queued_scan(tx_t *t, dx__list_cand_t **out, size_t *n) {
  cand_list_t l = {NULL, 0, 0};
  dkey_t all;
  size_t i;
  int rc;
  k_init(&all);
  rc = dx__lm_scan_prefix(t, DB_ORCH_STATE, &all, queued_scan_cb, &l);
  if (rc) {
    for (i = 0; i < l.n; i++) dx_instance_info_clear(&l.v[i].row);
    free(l.v);
    l.v = NULL;
    l.n = 0;
  }
  *out = l.v;
  *n = l.n;
  return rc;
}

/* One index walked newest first: the entries of `db` under a prefix, whose keys end with
** `nums` big-endian numbers ((created_at, seq) or (seq)) and whose values are instance ids. */
typedef struct {
  MDB_cursor *c;
  int db, nums, valid;
  dkey_t prefix;
  int64_t at;
  uint64_t seq;
  const char *inst;
} stream_t;

/* Check the entry under the cursor (mrc: the cursor operation's result) and decode it. */
static int stream_take(tx_t *t, stream_t *s, int mrc, MDB_val *k, MDB_val *v) {
  const unsigned char *b;
  s->valid = 0;
  if (mrc == MDB_NOTFOUND) return 0;
  if (mrc) return dx__lm_tx_err(t, mrc, dx__lm_db_names[s->db]);
  if (k->mv_size != s->prefix.n + 8u * (size_t)s->nums ||
      memcmp(k->mv_data, s->prefix.b, s->prefix.n) != 0)
    return 0; /* before the prefix: this index has no more entries */
  if ((mrc = dx__lm_check_sum(t, s->db, k, v))) return mrc;
  if (v->mv_size == 0 || ((const char *)v->mv_data)[v->mv_size - 1] != 0)
    return dx__lm_corrupt(t, s->db, "value is not an instance id", "%zu-byte key", k->mv_size);
  b = (const unsigned char *)k->mv_data + s->prefix.n;
  s->at = s->nums == 2 ? (int64_t)get_u64(b) : 0;
  s->seq = get_u64(b + 8 * (s->nums - 1));
  s->inst = v->mv_data;
  s->valid = 1;
  return 0;
}

/* Open s on db under `prefix`, on the newest entry strictly before (at, seq) (has_cur 0: the
** newest entry). */
static int stream_open(tx_t *t, stream_t *s, int db, const dkey_t *prefix, int nums,
                       int has_cur, int64_t at, uint64_t seq) {
  MDB_val k, v;
  dkey_t start;
  int mrc;
  memset(s, 0, sizeof *s);
  s->db = db;
  s->nums = nums;
  s->prefix = *prefix;
  if ((mrc = mdb_cursor_open(t->txn, t->se->dbi[db], &s->c))) {
    s->c = NULL;
    return dx__lm_tx_err(t, mrc, dx__lm_db_names[db]);
  }
  start = *prefix;
  if (!has_cur) { /* past every key under the prefix */
    at = INT64_MAX;
    seq = UINT64_MAX;
  }
  if (nums == 2) k_time(&start, at);
  k_u64(&start, seq);
  k = kval(&start);
  mrc = mdb_cursor_get(s->c, &k, &v, MDB_SET_RANGE); /* the first key >= start: step back */
  mrc = mrc == MDB_NOTFOUND ? mdb_cursor_get(s->c, &k, &v, MDB_LAST)
                            : mrc ? mrc : mdb_cursor_get(s->c, &k, &v, MDB_PREV);
  return stream_take(t, s, mrc, &k, &v);
}

static int stream_next(tx_t *t, stream_t *s) {
  MDB_val k, v;
  return stream_take(t, s, mdb_cursor_get(s->c, &k, &v, MDB_PREV), &k, &v);
}

static void stream_close(stream_t *s) {
  if (s->c) mdb_cursor_close(s->c);
  s->c = NULL;
}

/* The newest valid stream of n (NULL: all ended). */
static stream_t *newest(stream_t *s, int n) {
  stream_t *best = NULL;
  int i;
  for (i = 0; i < n; i++)
    if (s[i].valid && (!best || s[i].at > best->at || (s[i].at == best->at && s[i].seq > best->seq)))
      best = &s[i];
  return best;
}

/* Where recorded instances come from: the name index, the status index (two statuses for
** terminal), or the creation index. Returns how many streams were opened. */
static int recorded_streams(tx_t *t, const dx_list_query_t *q, const dx__cursor_t *cur,
                            stream_t *s, int *rc) {
  int has = cur->phase == 'i', n = 0, i;
  dkey_t p;
  k_init(&p);
  if (t->se->no_list_idx) {
    *rc = stream_open(t, &s[n++], DB_INST_CREATED, &p, 2, has, cur->at, cur->seq);
  } else if (q->name) {
    k_str(&p, q->name);
    *rc = stream_open(t, &s[n++], DB_INST_NAME, &p, 2, has, cur->at, cur->seq);
  } else if (q->status == DX_LIST_TERMINAL || (q->status >= DX_STATUS_RUNNING &&
                                                q->status <= DX_STATUS_FAILED)) {
    int lo = q->status == DX_LIST_TERMINAL ? DX_STATUS_COMPLETED : q->status;
    int hi = q->status == DX_LIST_TERMINAL ? DX_STATUS_FAILED : q->status;
    for (i = lo, *rc = 0; i <= hi && !*rc; i++) {
      k_init(&p);
      k_u8(&p, (unsigned)i);
      *rc = stream_open(t, &s[n++], DB_INST_STATUS, &p, 2, has, cur->at, cur->seq);
    }
  } else {
    *rc = stream_open(t, &s[n++], DB_INST_CREATED, &p, 2, has, cur->at, cur->seq);
  }
  return n;
}

/* Recorded instances newest first, starting after the cursor. Every index entry is checked
** against the record (a stale entry hides nothing and shows nothing wrong). */
static int recorded_page(tx_t *t, const dx_list_query_t *q, const dx__cursor_t *cur,
                         dx_instance_info_t *rows, size_t *n, int *more, dx__cursor_t *last) {
  stream_t s[2], *best;
  int rc = 0, ns = recorded_streams(t, q, cur, s, &rc), i;
  while (!rc && !*more && (best = newest(s, ns)) != NULL) {
    dx_instance_info_t r;
    if (q->created_after_ms && best->at <= q->created_after_ms) break; /* older from here on */
    memset(&r, 0, sizeof r);
    rc = instance_info(t, best->inst, &r);
    if (rc == DX_ENOTFOUND) {
      rc = 0;
    } else if (!rc && (r.created_at_ms != best->at || !dx__list_match(q, &r))) {
      dx_instance_info_clear(&r);
    } else if (!rc && *n == q->limit) {
      *more = 1;
      dx_instance_info_clear(&r);
    } else if (!rc) {
      rows[(*n)++] = r;
      last->phase = 'i';
      last->at = best->at;
      last->seq = best->seq;
    }
    if (!rc && !*more) rc = stream_next(t, best);
  }
  for (i = 0; i < ns; i++) stream_close(&s[i]);
  return rc;
}

/* Queued-never-run instances newest first from the start index (by name when filtered). */
static int queued_page(tx_t *t, const dx_list_query_t *q, const dx__cursor_t *cur,
                       dx_instance_info_t *rows, size_t *n, int *more, dx__cursor_t *last) {
  stream_t s;
  dkey_t p;
  int rc;
  k_init(&p);
  k_u8(&p, q->name ? 1 : 0);
  if (q->name) k_str(&p, q->name);
  rc = stream_open(t, &s, DB_ORCH_STARTS, &p, 1, cur->phase == 'q', 0, cur->seq);
  while (!rc && !*more && s.valid) {
    dx__list_cand_t c;
    int found;
    rc = never_run(t, s.inst, &c, &found);
    if (!rc && found && c.seq == s.seq && dx__list_match(q, &c.row)) {
      if (*n == q->limit) {
        *more = 1;
      } else {
        rows[(*n)++] = c.row;
        memset(&c.row, 0, sizeof c.row);
        last->phase = 'q';
        last->at = rows[*n - 1].created_at_ms;
        last->seq = c.seq;
      }
    }
    if (found) dx_instance_info_clear(&c.row);
    if (!rc && !*more) rc = stream_next(t, &s);
  }
  stream_close(&s);
  return rc;
}

static int list_page_tx(tx_t *t, const dx_list_query_t *q, const dx__cursor_t *cur,
                        dx_instance_info_t *rows, size_t *n, int *more, dx__cursor_t *last) {
  int rc = 0;
  if (dx__list_wants_queued(q) && cur->phase != 'i') {
    if (!t->se->no_list_idx) {
      rc = queued_page(t, q, cur, rows, n, more, last);
    } else { /* a read-only store from before the indexes: scan */
      dx__list_cand_t *c = NULL;
      size_t nc = 0;
      rc = dx__lm_queued_scan(t, &c, &nc);
      if (!rc) rc = dx__list_take_queued(q, cur, c, nc, rows, n, more, last);
      free(c);
    }
  }
  if (!rc && !*more && q->status != DX_STATUS_NONE) rc = recorded_page(t, q, cur, rows, n, more, last);
  return rc;
}

int dx__lm_list_page(dx_provider_t *pp, int64_t now, const dx_list_query_t *q,
                     dx_instance_info_t **rows, size_t *n, char **next, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  dx__cursor_t cur, last = {0, 0, 0};
  int more = 0, rc;
  tx_t t;
  (void)now;
  if ((rc = dx__list_page_open(q, rows, n, next, &cur, err))) return rc;
  if (!(rc = dx__lm_begin_tx(p, 0, &t, err)))
    rc = dx__lm_tx_end(&t, list_page_tx(&t, q, &cur, *rows, n, &more, &last));
  return dx__list_page_close(rc, more, &last, rows, n, next, err);
}

/* {===== executions =====} */

typedef struct {
  const char *inst;
  size_t prefix_n;
  dx_execution_info_t *v;
  size_t n, cap;
} exec_acc_t;

/* A history entry holds one event or a turn's run of them (a damaged one counts as one). */
static int count_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  size_t n;
  (void)t; (void)k;
  *(uint64_t *)ud += dx__lm_hist_count(v, &n) ? 1 : n;
  return 0;
}

static int exec_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  exec_acc_t *a = ud;
  dx_execution_info_t *nv, *e;
  exec_rec_t r;
  char what[LM_INSTANCE_MAX + 64];
  int rc;
  if (k->mv_size != a->prefix_n + 8) return dx__lm_corrupt(t, DB_EXECUTIONS, "bad key", "instance '%s'", a->inst);
  if (!(nv = dx__lm_grow(a->v, &a->cap, a->n, sizeof *a->v))) return dx__lm_nomem(t->err);
  a->v = nv;
  e = &a->v[a->n];
  memset(e, 0, sizeof *e);
  e->execution_id = get_u64((const char *)k->mv_data + a->prefix_n);
  snprintf(what, sizeof what, "instance '%s' execution %llu", a->inst,
           (unsigned long long)e->execution_id);
  memset(&r, 0, sizeof r);
  if ((rc = dx__lm_rec_decode(t, &dx__lm_exec_schema, v, &r, what))) return rc;
  e->status = r.status;
  e->started_at_ms = r.started_at;
  e->completed_at_ms = r.status == DX_STATUS_RUNNING ? 0 : r.completed_at;
  dx__lm_exec_clear(&r);
  a->n++;
  return 0;
}

static int executions_tx(tx_t *t, exec_acc_t *a) {
  inst_rec_t ir;
  dkey_t k;
  size_t i;
  int rc = dx__lm_inst_get(t, a->inst, &ir);
  if (rc == DX_ENOTFOUND)
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", a->inst);
  if (rc) return rc;
  dx__lm_inst_clear(&ir);
  key_inst(&k, a->inst);
  a->prefix_n = k.n;
  if ((rc = dx__lm_scan_prefix(t, DB_EXECUTIONS, &k, exec_cb, a))) return rc;
  for (i = 0; i < a->n && !rc; i++) {
    key_exec(&k, a->inst, a->v[i].execution_id);
    rc = dx__lm_scan_prefix(t, DB_HISTORY, &k, count_cb, &a->v[i].event_count);
  }
  return rc;
}

int dx__lm_list_executions(dx_provider_t *pp, const char *instance, dx_execution_info_t **out,
                           size_t *n, dx_error_t *err) {
  exec_acc_t a;
  tx_t t;
  int rc;
  if (!out || !n) return dx_error_set(err, DX_EINVAL, "out/n is NULL");
  *out = NULL;
  *n = 0;
  memset(&a, 0, sizeof a);
  a.inst = instance;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__lm_begin_tx((lm_t *)pp, 0, &t, err)))
    return rc;
  rc = dx__lm_tx_end(&t, executions_tx(&t, &a));
  if (rc) {
    free(a.v);
    return rc;
  }
  *out = a.v;
  *n = a.n;
  return 0;
}

/* {===== an instance's queue rows =====} */

typedef struct {
  dx_queued_t q;
  dx_work_item_t item;
  char *locked_by;
} qrow_t;

typedef struct {
  qrow_t *v;
  size_t n, cap;
} qrow_list_t;

static void qrows_free(qrow_list_t *l) {
  size_t i;
  for (i = 0; i < l->n; i++) {
    dx_work_item_clear(&l->v[i].item);
    free(l->v[i].locked_by);
  }
  free(l->v);
}

static qrow_t *qrow_add(tx_t *t, qrow_list_t *l) {
  qrow_t *nv;
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) {
    dx__lm_nomem(t->err);
    return NULL;
  }
  l->v = nv;
  memset(&l->v[l->n], 0, sizeof l->v[l->n]);
  return &l->v[l->n++];
}

static int queue_orch(tx_t *t, const char *inst, qrow_list_t *out) {
  msg_list_t l;
  orch_state_t st;
  size_t i;
  int rc = dx__lm_state_get(t, inst, &st);
  if (rc || (rc = dx__lm_msgs_load(t, inst, &l))) return rc;
  for (i = 0; i < l.n && !rc; i++) {
    qrow_t *r = qrow_add(t, out);
    if (!r) rc = DX_ENOMEM;
    else if (!(rc = dx__lm_msg_decode(t, &l, i, &r->item))) {
      r->q.queue = DX_QUEUE_ORCHESTRATOR;
      r->q.visible_at_ms = l.v[i].visible_at;
      r->q.attempt = (uint32_t)dx__lm_msg_attempt(&st, &l.v[i]);
      if (dx__lm_msg_in_lock(&st, &l.v[i])) r->q.locked_until_ms = st.locked_until;
    } else {
      out->n--;
    }
  }
  dx__lm_msgs_free(&l);
  return rc;
}

static int queue_work(tx_t *t, const char *inst, qrow_list_t *out) {
  seq_list_t seqs = {NULL, 0, 0};
  dkey_t k;
  size_t i;
  int rc;
  key_inst(&k, inst);
  rc = dx__lm_scan_prefix(t, DB_WORK_IDENT, &k, dx__lm_ident_cb, &seqs);
  for (i = 0; i < seqs.n && !rc; i++) {
    work_row_t w;
    qrow_t *r;
    dx_error_t derr = {0};
    rc = dx__lm_row_get(t, seqs.v[i], &w);
    if (rc == DX_ENOTFOUND) { rc = 0; continue; }
    if (rc) break;
    if (!(r = qrow_add(t, out))) rc = DX_ENOMEM;
    else if ((rc = dx__work_item_decode(w.item, w.item_len, &r->item, &derr))) {
      out->n--;
      rc = rc == DX_ENOMEM ? dx__lm_nomem(t->err)
                           : dx__lm_corrupt(t, DB_WORK, derr.msg, "row %llu", (unsigned long long)w.seq);
    } else {
      r->q.queue = DX_QUEUE_WORKER;
      r->q.visible_at_ms = w.visible_at;
      r->q.attempt = (uint32_t)w.attempt;
      if (w.token) r->q.locked_until_ms = w.locked_until;
      if (w.session_id) {
        sess_rec_t s;
        int src = dx__lm_sess_get(t, w.session_id, &s);
        if (src == 0) {
          if (dx__lm_sess_owned(&s) && !(r->locked_by = dx__strdup(s.owner))) rc = dx__lm_nomem(t->err);
          dx__lm_sess_clear(&s);
        } else if (src != DX_ENOTFOUND) {
          rc = src;
        }
      }
    }
    dx__lm_row_clear(&w);
  }
  free(seqs.v);
  return rc;
}

int dx__lm_instance_queue(dx_provider_t *pp, const char *instance, dx_queued_cb cb, void *ud,
                          dx_error_t *err) {
  qrow_list_t l = {NULL, 0, 0};
  size_t i;
  tx_t t;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__lm_begin_tx((lm_t *)pp, 0, &t, err)))
    return rc;
  rc = queue_orch(&t, instance, &l);
  if (!rc) rc = queue_work(&t, instance, &l);
  rc = dx__lm_tx_end(&t, rc);
  /* the callbacks run after the read txn ends: they may call us */
  for (i = 0; i < l.n && !rc; i++) {
    l.v[i].q.item = &l.v[i].item;
    l.v[i].q.locked_by = l.v[i].locked_by;
    if (cb(ud, &l.v[i].q)) break;
  }
  qrows_free(&l);
  return rc;
}
