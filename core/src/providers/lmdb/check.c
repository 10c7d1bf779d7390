/*
** check.c -- LMDB provider: `check`, a verification of the whole store in one read txn. Every
** entry of every table must pass its checksum and decode; then each table's entries are
** checked against the tables they point to, both ways (a record and its index entries). Each
** problem is reported and the walk goes on, so one run lists everything that is wrong.
*/
#include "lmdb_int.h"

typedef struct {
  tx_t *t;
  dx_check_cb cb;
  void *ud;
  uint64_t records, problems;
} ck_t;

static void problem(ck_t *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static void problem(ck_t *c, const char *fmt, ...) {
  char msg[480], line[600];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  snprintf(line, sizeof line, "store %s: %s", c->t->se->path, msg);
  c->problems++;
  if (c->cb) c->cb(c->ud, line);
}

/* The error of the last failed helper call, as a problem (it already names the store). */
static void failed(ck_t *c) {
  c->problems++;
  if (c->cb) c->cb(c->ud, c->t->err->msg);
}

/* A NUL-terminated string at the start of a key, of `tail` bytes more: its length, or -1. */
static long key_str(const MDB_val *k, size_t tail) {
  const char *b = k->mv_data;
  size_t n = k->mv_size >= tail + 1 ? k->mv_size - tail : 0;
  if (n == 0 || b[n - 1] != 0 || memchr(b, 0, n) != b + n - 1) return -1;
  return (long)(n - 1);
}

/* 1 when `db` holds key k (its value, checksum stripped, in *v when v is not NULL). A damaged
** entry counts as present: it is reported when its own table is walked. */
static int has(ck_t *c, int db, const dkey_t *k, MDB_val *v) {
  MDB_val tmp;
  int rc = dx__lm_db_get(c->t, db, k, v ? v : &tmp);
  return rc != DX_ENOTFOUND;
}

static int same_key(const dkey_t *a, const MDB_val *b) {
  return a->n == b->mv_size && memcmp(a->b, b->mv_data, a->n) == 0;
}

/* {===== one checker per table =====} */

static void ck_meta(ck_t *c, const MDB_val *k, const MDB_val *v) {
  static const char *const names[] = {"format", "seq", "max_size", "list_idx"};
  static const size_t sizes[] = {4, 8, 8, 1};
  size_t i;
  for (i = 0; i < 4; i++)
    if (k->mv_size == strlen(names[i]) && memcmp(k->mv_data, names[i], k->mv_size) == 0) break;
  if (i == 4) problem(c, "meta: unknown key of %zu bytes", k->mv_size);
  else if (v->mv_size != sizes[i])
    problem(c, "meta: %s has %zu bytes", names[i], v->mv_size);
}

static void ck_instance(ck_t *c, const MDB_val *k, const MDB_val *v) {
  inst_rec_t r;
  dkey_t ck;
  const char *inst = k->mv_data;
  memset(&r, 0, sizeof r);
  if (key_str(k, 0) < 0) { problem(c, "instances: a key is not an instance id"); return; }
  if (dx__lm_rec_decode(c->t, &dx__lm_inst_schema, v, &r, inst)) { failed(c); return; }
  k_init(&ck);
  k_time(&ck, r.created_at);
  k_u64(&ck, r.created_seq);
  if (!has(c, DB_INST_CREATED, &ck, NULL))
    problem(c, "inst_created: no entry for instance '%s'", inst);
  if (!c->t->se->no_list_idx && r.name) {
    k_init(&ck);
    k_str(&ck, r.name);
    k_time(&ck, r.created_at);
    k_u64(&ck, r.created_seq);
    if (!has(c, DB_INST_NAME, &ck, NULL)) problem(c, "inst_name: no entry for instance '%s'", inst);
  }
  dx__lm_inst_clear(&r);
}

/* {===== the list indexes (listidx.c) =====} */

/* The record of the instance an index entry names, when its creation stamp is the key's. */
static int indexed_inst(ck_t *c, const char *table, const MDB_val *k, const MDB_val *v,
                        size_t prefix_n, inst_rec_t *r) {
  const char *inst = v->mv_data;
  const unsigned char *b = (const unsigned char *)k->mv_data + prefix_n;
  int rc;
  memset(r, 0, sizeof *r);
  if (k->mv_size != prefix_n + 16 || v->mv_size == 0 || inst[v->mv_size - 1] != 0) {
    problem(c, "%s: malformed entry", table);
    return -1;
  }
  rc = dx__lm_inst_get(c->t, inst, r);
  if (rc == DX_ENOTFOUND || (rc == 0 && (r->created_at != (int64_t)get_u64(b) ||
                                         r->created_seq != get_u64(b + 8)))) {
    problem(c, "%s: stray entry for instance '%s'", table, inst);
    dx__lm_inst_clear(r);
    return -1;
  }
  if (rc) failed(c);
  return rc ? -1 : 0;
}

static void ck_inst_status(ck_t *c, const MDB_val *k, const MDB_val *v) {
  inst_rec_t r;
  exec_rec_t er;
  int st;
  if (k->mv_size < 1 || indexed_inst(c, "inst_status", k, v, 1, &r)) return;
  if (dx__lm_exec_get(c->t, v->mv_data, r.current_exec, &er) == 0) {
    st = er.status == DX_STATUS_CONTINUED_AS_NEW ? DX_STATUS_RUNNING : er.status;
    if (st != *(const unsigned char *)k->mv_data)
      problem(c, "inst_status: instance '%s' is listed as status %u, its status is %d",
              (const char *)v->mv_data, *(const unsigned char *)k->mv_data, st);
    dx__lm_exec_clear(&er);
  }
  dx__lm_inst_clear(&r);
}

static void ck_inst_name(ck_t *c, const MDB_val *k, const MDB_val *v) {
  inst_rec_t r;
  long n = key_str(k, 16);
  if (n < 0) { problem(c, "inst_name: malformed key"); return; }
  if (indexed_inst(c, "inst_name", k, v, (size_t)n + 1, &r)) return;
  if (!r.name || strcmp(r.name, k->mv_data) != 0)
    problem(c, "inst_name: instance '%s' is listed under another name", (const char *)v->mv_data);
  dx__lm_inst_clear(&r);
}

/* A start entry names a START message still queued for an instance without a record. */
static void ck_orch_start(ck_t *c, const MDB_val *k, const MDB_val *v) {
  const unsigned char *b = k->mv_data;
  const char *inst = v->mv_data;
  inst_rec_t r;
  dkey_t mk;
  if (k->mv_size < 9 || (b[0] == 0 && k->mv_size != 9) || b[0] > 1 || v->mv_size == 0 ||
      inst[v->mv_size - 1] != 0) {
    problem(c, "orch_starts: malformed entry");
    return;
  }
  key_inst(&mk, inst);
  k_u64(&mk, get_u64(b + k->mv_size - 8));
  if (!has(c, DB_ORCH_MSGS, &mk, NULL)) {
    problem(c, "orch_starts: stray entry for instance '%s'", inst);
  } else if (dx__lm_inst_get(c->t, inst, &r) == 0) {
    problem(c, "orch_starts: instance '%s' has run", inst);
    dx__lm_inst_clear(&r);
  }
}

static void ck_sess_event(ck_t *c, const MDB_val *k, const MDB_val *v) {
  sev_rec_t r;
  memset(&r, 0, sizeof r);
  if (key_str(k, 8) < 0) { problem(c, "sess_events: malformed key"); return; }
  if (dx__lm_rec_decode(c->t, &dx__lm_sev_schema, v, &r, k->mv_data)) failed(c);
  dx__lm_rec_clear(&dx__lm_sev_schema, &r);
}

static void ck_worker(ck_t *c, const MDB_val *k, const MDB_val *v) {
  wreg_rec_t r;
  memset(&r, 0, sizeof r);
  if (key_str(k, 0) < 0) { problem(c, "workers: a key is not a worker id"); return; }
  if (dx__lm_rec_decode(c->t, &dx__lm_wreg_schema, v, &r, k->mv_data)) failed(c);
  dx__lm_rec_clear(&dx__lm_wreg_schema, &r);
}

static void ck_created(ck_t *c, const MDB_val *k, const MDB_val *v) {
  dkey_t ik;
  if (k->mv_size != 16 || v->mv_size == 0 || ((const char *)v->mv_data)[v->mv_size - 1] != 0) {
    problem(c, "inst_created: malformed entry");
    return;
  }
  key_inst(&ik, v->mv_data);
  if (!has(c, DB_INSTANCES, &ik, NULL))
    problem(c, "inst_created: instance '%s' has no record", (const char *)v->mv_data);
}

static void ck_execution(ck_t *c, const MDB_val *k, const MDB_val *v) {
  exec_rec_t r;
  memset(&r, 0, sizeof r);
  if (key_str(k, 8) < 0) { problem(c, "executions: malformed key"); return; }
  if (dx__lm_rec_decode(c->t, &dx__lm_exec_schema, v, &r, k->mv_data)) failed(c);
  dx__lm_exec_clear(&r);
}

typedef struct {
  ck_t *c;
  const MDB_val *k;
} ck_hist_t;

/* Each event of a history entry (one, or a turn's run) must decode. */
static int ck_event(void *ud, size_t i, const void *b, size_t len) {
  ck_hist_t *h = ud;
  const char *inst = h->k->mv_data;
  unsigned long long id = get_u64((const char *)h->k->mv_data + h->k->mv_size - 8) + i;
  dx_event_t ev;
  dx_error_t derr;
  memset(&ev, 0, sizeof ev);
  if (!b) {
    problem(h->c, "history: instance '%s' event %llu: bad event run", inst, id);
    return 1;
  }
  if (dx__event_decode(b, len, &ev, &derr))
    problem(h->c, "history: instance '%s' event %llu: %s", inst, id, derr.msg);
  dx_event_clear(&ev);
  return 0;
}

static void ck_history(ck_t *c, const MDB_val *k, const MDB_val *v) {
  ck_hist_t h = {c, k};
  if (key_str(k, 16) < 0) { problem(c, "history: malformed key"); return; }
  dx__lm_hist_walk(v, ck_event, &h);
}

/* A work item stored inside a message or row must decode too. */
static void ck_item(ck_t *c, const char *table, const char *what, const char *item, size_t n) {
  dx_work_item_t w;
  dx_error_t derr;
  memset(&w, 0, sizeof w);
  if (dx__work_item_decode(item, n, &w, &derr)) problem(c, "%s: %s: %s", table, what, derr.msg);
  dx_work_item_clear(&w);
}

static void ck_msg(ck_t *c, const MDB_val *k, const MDB_val *v) {
  orch_msg_t m;
  memset(&m, 0, sizeof m);
  if (key_str(k, 8) < 0) { problem(c, "orch_msgs: malformed key"); return; }
  if (dx__lm_rec_decode(c->t, &dx__lm_msg_schema, v, &m, k->mv_data)) { failed(c); return; }
  ck_item(c, "orch_msgs", k->mv_data, m.item, m.item_len);
  dx__lm_rec_clear(&dx__lm_msg_schema, &m);
}

static void ck_state(ck_t *c, const MDB_val *k, const MDB_val *v) {
  orch_state_t s;
  dkey_t ik;
  int db;
  if (key_str(k, 0) < 0) { problem(c, "orch_state: malformed key"); return; }
  if (dx__lm_rec_decode(c->t, &dx__lm_state_schema, v, &s, k->mv_data)) { failed(c); return; }
  db = dx__lm_state_index(k->mv_data, &s, &ik);
  if (db >= 0 && !has(c, db, &ik, NULL))
    problem(c, "%s: no entry for instance '%s'", dx__lm_db_names[db], (const char *)k->mv_data);
}

static void ck_orch_index(ck_t *c, int db, const MDB_val *k) {
  orch_state_t s;
  dkey_t want;
  const char *inst = (const char *)k->mv_data + 8;
  if (k->mv_size < 10 || ((const char *)k->mv_data)[k->mv_size - 1] != 0) {
    problem(c, "%s: malformed key", dx__lm_db_names[db]);
    return;
  }
  if (dx__lm_state_get(c->t, inst, &s)) { failed(c); return; }
  if (dx__lm_state_index(inst, &s, &want) != db || !same_key(&want, k))
    problem(c, "%s: stray entry for instance '%s'", dx__lm_db_names[db], inst);
}

static void ck_ready(ck_t *c, const MDB_val *k, const MDB_val *v) {
  ck_orch_index(c, DB_ORCH_READY, k);
}

static void ck_lock(ck_t *c, const MDB_val *k, const MDB_val *v) {
  ck_orch_index(c, DB_ORCH_LOCK, k);
}

static void ck_row(ck_t *c, const MDB_val *k, const MDB_val *v) {
  work_row_t r;
  dkey_t ik;
  char what[32];
  int db;
  memset(&r, 0, sizeof r);
  if (k->mv_size != 8) { problem(c, "work: malformed key"); return; }
  r.seq = get_u64(k->mv_data);
  snprintf(what, sizeof what, "row %llu", (unsigned long long)r.seq);
  if (dx__lm_rec_decode(c->t, &dx__lm_row_schema, v, &r, what)) { failed(c); return; }
  ck_item(c, "work", what, r.item, r.item_len);
  db = dx__lm_row_queue_key(&r, &ik);
  if (!has(c, db, &ik, NULL)) problem(c, "%s: no entry for %s", dx__lm_db_names[db], what);
  key_ident(&ik, r.instance, r.exec, r.act_id);
  k_u64(&ik, r.seq);
  if (!has(c, DB_WORK_IDENT, &ik, NULL)) problem(c, "work_ident: no entry for %s", what);
  key_seq(&ik, r.token);
  if (dx__lm_token_indexed(&r) && !has(c, DB_WORK_TOKEN, &ik, NULL))
    problem(c, "work_token: no entry for %s", what);
  dx__lm_row_clear(&r);
}

/* An index entry naming row `seq`: the row must exist and imply the entry (when `db` >= 0). */
static void ck_row_ref(ck_t *c, int db, uint64_t seq, const MDB_val *k) {
  work_row_t r;
  dkey_t want;
  int rc = dx__lm_row_get(c->t, seq, &r);
  if (rc == DX_ENOTFOUND)
    problem(c, "%s: entry for row %llu, which does not exist", dx__lm_db_names[db < 0 ? -db : db],
            (unsigned long long)seq);
  else if (rc == 0 && db >= 0 && (dx__lm_row_queue_key(&r, &want) != db || !same_key(&want, k)))
    problem(c, "%s: stray entry for row %llu", dx__lm_db_names[db], (unsigned long long)seq);
  dx__lm_row_clear(&r);
}

/* work_ready / work_lock keys: class 0, or class 2 + tag\0; then be64 due, be64 seq. */
static void ck_work_idx(ck_t *c, int db, const MDB_val *k) {
  const unsigned char *b = k->mv_data;
  size_t want = 17;
  if (k->mv_size > 0 && b[0] == 2) {
    const unsigned char *nul = memchr(b + 1, 0, k->mv_size - 1);
    want = nul ? (size_t)(nul - b) + 17 : 0;
  }
  if (k->mv_size < 17 || k->mv_size != want || (b[0] != 0 && b[0] != 2)) {
    problem(c, "%s: malformed key", dx__lm_db_names[db]);
    return;
  }
  ck_row_ref(c, db, get_u64((const char *)b + k->mv_size - 8), k);
}

static void ck_work_ready(ck_t *c, const MDB_val *k, const MDB_val *v) {
  ck_work_idx(c, DB_WORK_READY, k);
}

static void ck_work_lock(ck_t *c, const MDB_val *k, const MDB_val *v) {
  ck_work_idx(c, DB_WORK_LOCK, k);
}

static void ck_work_token(ck_t *c, const MDB_val *k, const MDB_val *v) {
  if (k->mv_size != 8 || v->mv_size != 8) { problem(c, "work_token: malformed entry"); return; }
  ck_row_ref(c, -DB_WORK_TOKEN, get_u64(v->mv_data), k);
}

static void ck_work_ident(ck_t *c, const MDB_val *k, const MDB_val *v) {
  if (key_str(k, 24) < 0) { problem(c, "work_ident: malformed key"); return; }
  ck_row_ref(c, -DB_WORK_IDENT, get_u64((const char *)k->mv_data + k->mv_size - 8), k);
}

static void ck_session(ck_t *c, const MDB_val *k, const MDB_val *v) {
  sess_rec_t r;
  dkey_t ok;
  memset(&r, 0, sizeof r);
  if (key_str(k, 0) < 0) { problem(c, "sessions: malformed key"); return; }
  if (dx__lm_rec_decode(c->t, &dx__lm_sess_schema, v, &r, k->mv_data)) { failed(c); return; }
  if (dx__lm_sess_owned(&r)) {
    key_sess_owner(&ok, r.owner, k->mv_data);
    if (!has(c, DB_SESS_OWNER, &ok, NULL))
      problem(c, "sess_owner: no entry for session '%s'", (const char *)k->mv_data);
  }
  dx__lm_sess_clear(&r);
}

static void ck_sess_owner(ck_t *c, const MDB_val *k, const MDB_val *v) {
  const char *owner = k->mv_data, *sid;
  sess_rec_t r;
  long n = -1;
  size_t on = strnlen(owner, k->mv_size);
  if (on < k->mv_size) {
    MDB_val rest = {k->mv_size - on - 1, (char *)k->mv_data + on + 1};
    n = key_str(&rest, 0);
  }
  if (n < 0 || v->mv_size != 8) { problem(c, "sess_owner: malformed entry"); return; }
  sid = owner + on + 1;
  if (dx__lm_sess_get(c->t, sid, &r) == DX_ENOTFOUND || !dx__lm_sess_owner_is(&r, owner))
    problem(c, "sess_owner: session '%s' is not owned by '%s'", sid, owner);
  dx__lm_sess_clear(&r);
}

static void ck_sess_item(ck_t *c, const MDB_val *k, const MDB_val *v) {
  if (key_str(k, 16) < 0) { problem(c, "sess_items: malformed key"); return; }
  ck_row_ref(c, DB_SESS_ITEMS, get_u64((const char *)k->mv_data + k->mv_size - 8), k);
}

static void ck_sess_queue(ck_t *c, const MDB_val *k, const MDB_val *v) {
  dkey_t hk;
  if (key_str(k, 0) < 0 || v->mv_size != 24) { problem(c, "sess_queue: malformed entry"); return; }
  key_sess_head(&hk, get_u64(v->mv_data), get_u64((const char *)v->mv_data + 8), k->mv_data);
  if (!has(c, DB_SESS_HEADS, &hk, NULL))
    problem(c, "sess_heads: no entry for session '%s'", (const char *)k->mv_data);
}

static void ck_sess_head(ck_t *c, const MDB_val *k, const MDB_val *v) {
  sess_queue_t q;
  const char *sid = (const char *)k->mv_data + 16;
  if (k->mv_size < 18 || ((const char *)k->mv_data)[k->mv_size - 1] != 0) {
    problem(c, "sess_heads: malformed key");
    return;
  }
  if (dx__lm_squeue_get(c->t, sid, &q)) { failed(c); return; }
  if (!q.found || q.due != get_u64(k->mv_data) || q.seq != get_u64((const char *)k->mv_data + 8))
    problem(c, "sess_heads: stray entry for session '%s'", sid);
}

/* Key-value records: inst\0 key\0, a decodable record, an instance that exists. */
static void ck_kv_in(ck_t *c, int db, const lm_schema_t *s, const MDB_val *k, const MDB_val *v) {
  kv_rec_t r;
  dkey_t ik;
  const char *b = k->mv_data;
  size_t il = b ? strnlen(b, k->mv_size) : 0;
  memset(&r, 0, sizeof r);
  if (il == 0 || k->mv_size < il + 3 ||
      strnlen(b + il + 1, k->mv_size - il - 1) != k->mv_size - il - 2) {
    problem(c, "%s: malformed key", dx__lm_db_names[db]);
    return;
  }
  if (dx__lm_rec_decode(c->t, s, v, &r, b)) { failed(c); return; }
  if (db == DB_KV && !r.value) problem(c, "kv: entry '%s' of '%s' has no value", b + il + 1, b);
  dx__lm_rec_clear(s, &r);
  key_inst(&ik, b);
  if (!has(c, DB_INSTANCES, &ik, NULL))
    problem(c, "%s: entry '%s' for instance '%s', which does not exist", dx__lm_db_names[db],
            b + il + 1, b);
}

static void ck_kv(ck_t *c, const MDB_val *k, const MDB_val *v) {
  ck_kv_in(c, DB_KV, &dx__lm_kv_schema, k, v);
}

static void ck_kv_delta(ck_t *c, const MDB_val *k, const MDB_val *v) {
  ck_kv_in(c, DB_KV_DELTA, &dx__lm_kv_delta_schema, k, v);
}

typedef void (*ck_fn)(ck_t *c, const MDB_val *k, const MDB_val *v);

static const ck_fn checkers[DB__COUNT] = {
  [DB_META] = ck_meta,           [DB_INSTANCES] = ck_instance,  [DB_INST_CREATED] = ck_created,
  [DB_EXECUTIONS] = ck_execution, [DB_HISTORY] = ck_history,     [DB_ORCH_MSGS] = ck_msg,
  [DB_ORCH_STATE] = ck_state,    [DB_ORCH_READY] = ck_ready,    [DB_ORCH_LOCK] = ck_lock,
  [DB_WORK] = ck_row,            [DB_WORK_READY] = ck_work_ready, [DB_WORK_LOCK] = ck_work_lock,
  [DB_WORK_TOKEN] = ck_work_token, [DB_WORK_IDENT] = ck_work_ident, [DB_SESSIONS] = ck_session,
  [DB_SESS_OWNER] = ck_sess_owner, [DB_SESS_ITEMS] = ck_sess_item, [DB_SESS_QUEUE] = ck_sess_queue,
  [DB_SESS_HEADS] = ck_sess_head, [DB_KV] = ck_kv,              [DB_KV_DELTA] = ck_kv_delta,
  [DB_SESS_EVENTS] = ck_sess_event, [DB_WORKERS] = ck_worker,   [DB_INST_STATUS] = ck_inst_status,
  [DB_INST_NAME] = ck_inst_name,  [DB_ORCH_STARTS] = ck_orch_start,
};

/* Walk one table: checksum, then the table's checker, for every entry. */
static int walk(ck_t *c, int db) {
  MDB_cursor *cur;
  MDB_val k, v;
  int mrc = mdb_cursor_open(c->t->txn, c->t->se->dbi[db], &cur);
  if (mrc) return dx__lm_tx_err(c->t, mrc, dx__lm_db_names[db]);
  for (mrc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); mrc == 0;
       mrc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    c->records++;
    if (dx__lm_check_sum(c->t, db, &k, &v)) failed(c);
    else checkers[db](c, &k, &v);
  }
  mdb_cursor_close(cur);
  return mrc == MDB_NOTFOUND ? 0 : dx__lm_tx_err(c->t, mrc, dx__lm_db_names[db]);
}

int dx__lm_check(dx_provider_t *pp, dx_check_cb cb, void *ud, uint64_t *records,
                 uint64_t *problems, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  dx_error_t scratch;
  ck_t c;
  tx_t t;
  int db, rc;
  if (records) *records = 0;
  if (problems) *problems = 0;
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  t.err = &scratch; /* helper errors become problems, not the call's error */
  memset(&c, 0, sizeof c);
  c.t = &t;
  c.cb = cb;
  c.ud = ud;
  for (db = 0, rc = 0; db < DB__COUNT && !rc; db++)
    if (!(db == DB_SESS_EVENTS && p->se->no_sess_events) && !(db == DB_WORKERS && p->se->no_workers) &&
        !((db == DB_INST_STATUS || db == DB_INST_NAME || db == DB_ORCH_STARTS) && p->se->no_list_idx))
      rc = walk(&c, db);
  if (rc) dx_error_set(err, rc, "%s", scratch.msg);
  rc = dx__lm_tx_end(&t, rc);
  if (records) *records = c.records;
  if (problems) *problems = c.problems;
  return rc;
}
