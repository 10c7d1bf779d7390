/*
** history.c -- LMDB provider: history events: append, load, and which execution to read.
*/
#include "lmdb_int.h"
#include "mpack.h"

/* {===== history records =====}
** A history value holds one event (the codec's event record, a MessagePack map) or, since
** format 4, the events of one run of consecutive ids a turn (or a batch's turns: "runs kept by
** the batch" below) appended: a MessagePack array of two or more bins, each an event record;
** the key names the run's first id. One B-tree write per turn instead of one per event. */

/* The events of value v: *count (1 for a single event) and, for a run, *p at its first bin.
** -1 when the framing is bad. */
static int run_open(const MDB_val *v, size_t *count, const unsigned char **p) {
  const unsigned char *b = v->mv_data;
  size_t n = v->mv_size;
  *p = b;
  if (n == 0) return -1;
  if (b[0] >= 0x90 && b[0] <= 0x9f) { *count = b[0] & 0x0f; *p = b + 1; }
  else if (b[0] == 0xdc && n >= 3) { *count = (size_t)b[1] << 8 | b[2]; *p = b + 3; }
  else if (b[0] == 0xdd && n >= 5) {
    *count = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
    *p = b + 5;
  } else { *count = 1; return 0; } /* a single event record (decoding judges it) */
  return *count >= 2 ? 1 : -1;
}

/* The next bin of a run: its bytes in *ev and *len; -1 when the framing is bad. */
static int run_next(const unsigned char **p, const unsigned char *end, const void **ev,
                    size_t *len) {
  const unsigned char *b = *p;
  size_t n, h;
  if (b >= end) return -1;
  if (b[0] == 0xc4 && end - b >= 2) { n = b[1]; h = 2; }
  else if (b[0] == 0xc5 && end - b >= 3) { n = (size_t)b[1] << 8 | b[2]; h = 3; }
  else if (b[0] == 0xc6 && end - b >= 5) {
    n = (size_t)b[1] << 24 | (size_t)b[2] << 16 | (size_t)b[3] << 8 | b[4];
    h = 5;
  } else return -1;
  if ((size_t)(end - b) - h < n) return -1;
  *ev = b + h;
  *len = n;
  *p = b + h + n;
  return 0;
}

int dx__lm_hist_count(const MDB_val *v, size_t *count) {
  const unsigned char *p;
  return run_open(v, count, &p) < 0 ? -1 : 0;
}

int dx__lm_hist_walk(const MDB_val *v, dx__lm_hist_fn fn, void *ud) {
  const unsigned char *p, *end = (const unsigned char *)v->mv_data + v->mv_size;
  size_t count, i;
  int rc = run_open(v, &count, &p);
  if (rc < 0) return fn(ud, 0, NULL, 0);
  if (rc == 0) return fn(ud, 0, v->mv_data, v->mv_size);
  for (i = 0; i < count; i++) {
    const void *ev;
    size_t len;
    if (run_next(&p, end, &ev, &len)) return fn(ud, i, NULL, 0);
    if ((rc = fn(ud, i, ev, len))) return rc;
  }
  return p == end ? 0 : fn(ud, count, NULL, 0);
}

/* The record of `n` encoded events into b (NULL: only counts): a single event as is, a run as
** an array of bins (mpack.h's smallest forms). Returns its length. */
static size_t run_write(unsigned char *b, char **enc, const size_t *len, size_t n) {
  size_t i, at;
  if (n == 1) {
    if (b) memcpy(b, enc[0], len[0]);
    return len[0];
  }
  at = dx__mp_container(b, 0, n);
  for (i = 0; i < n; i++) at += dx__mp_bytes(b ? b + at : NULL, 1, enc[i], len[i]);
  return at;
}

/* run_write into a buffer of its own (malloc; NULL when out of memory), its length in *out_n. */
static unsigned char *run_pack(char **enc, const size_t *len, size_t n, size_t *out_n) {
  size_t total = run_write(NULL, enc, len, n);
  unsigned char *b = malloc(total ? total : 1);
  if (!b) return NULL;
  run_write(b, enc, len, n);
  *out_n = total;
  return b;
}

/* {===== history =====} */

static int event_exists(tx_t *t, const char *inst, uint64_t exec, uint64_t id) {
  return dx_error_set(t->err, DX_EEXIST,
                      "event %llu already exists in instance '%s' execution %llu",
                      (unsigned long long)id, inst, (unsigned long long)exec);
}

/* The id range [*first, *last] of history entry (k, v) under prefix pn; 0, or -1 when the
** key or value is not a history record's (`check` reports it). */
static int entry_range(const MDB_val *k, const MDB_val *v, size_t pn, uint64_t *first,
                       uint64_t *last) {
  size_t count;
  if (k->mv_size != pn + 8 || dx__lm_hist_count(v, &count)) return -1;
  *first = get_u64((const char *)k->mv_data + pn);
  *last = *first + count - 1;
  return 0;
}

/* DX_EEXIST when entry (k, v) holds one of the n events; *first = the entry's first id
** (UINT64_MAX when it is not a history record: `check` reports it). */
static int overlap(tx_t *t, const char *inst, uint64_t exec, MDB_val *k, MDB_val *v, size_t pn,
                   const dx_event_t *ev, size_t n, uint64_t *first) {
  uint64_t last;
  size_t i;
  int rc = dx__lm_check_sum(t, DB_HISTORY, k, v);
  *first = UINT64_MAX;
  if (rc) return rc;
  if (entry_range(k, v, pn, first, &last)) {
    *first = 0; /* go on */
    return 0;
  }
  for (i = 0; i < n; i++)
    if (ev[i].event_id >= *first && ev[i].event_id <= last)
      return event_exists(t, inst, exec, ev[i].event_id);
  return 0;
}

/* DX_EEXIST when one of the events is stored already: an ack checks before it writes
** anything (it runs in the batch's own txn: LM_WRITE_DIRECT). One cursor seek to the delta's
** lowest id, and one step back to the run that may hold it: a delta follows the stored
** history, so the seek normally lands past the delta (or on another execution) at once. */
int dx__lm_history_unused(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n) {
  uint64_t lo = UINT64_MAX, hi = 0, first = 0, end;
  const dx_event_t *last;
  lm_hrun_t *h;
  MDB_cursor *c;
  MDB_val key, v;
  dkey_t k;
  size_t i, pn;
  int mrc, rc = 0;
  if (n == 0) return 0;
  for (i = 0; i < n; i++) {
    if (ev[i].event_id < lo) lo = ev[i].event_id;
    if (ev[i].event_id > hi) hi = ev[i].event_id;
  }
  if (dx__lm_tail_get(t, inst, exec, &end, &last) && lo > end) return 0; /* past the end */
  if ((h = dx__lm_hrun_of(t, inst, 0)) && h->n && h->exec == exec) /* kept: not stored yet */
    for (i = 0; i < n; i++)
      if (ev[i].event_id >= h->first && ev[i].event_id < h->first + h->n)
        return event_exists(t, inst, exec, ev[i].event_id);
  key_hist(&k, inst, exec, lo);
  pn = k.n - 8;
  key = kval(&k);
  if ((rc = dx__lm_cursor(t, DB_HISTORY, &c))) return rc;
  mrc = mdb_cursor_get(c, &key, &v, MDB_SET_RANGE);
  if (mrc == 0 || mrc == MDB_NOTFOUND) { /* the run before the landing place may reach lo */
    int at_end = mrc == MDB_NOTFOUND, prc = mdb_cursor_get(c, &key, &v, at_end ? MDB_LAST : MDB_PREV);
    if (prc == 0 && key.mv_size >= pn && memcmp(key.mv_data, k.b, pn) == 0)
      rc = overlap(t, inst, exec, &key, &v, pn, ev, n, &first);
    if (prc && prc != MDB_NOTFOUND) mrc = prc;
    else if (at_end) mrc = MDB_NOTFOUND; /* nothing after it */
    else if (prc == 0) mrc = mdb_cursor_get(c, &key, &v, MDB_NEXT); /* back at the landing */
    else { key = kval(&k); mrc = mdb_cursor_get(c, &key, &v, MDB_SET_RANGE); }
  }
  for (; mrc == 0 && !rc; mrc = mdb_cursor_get(c, &key, &v, MDB_NEXT)) {
    if (key.mv_size < pn || memcmp(key.mv_data, k.b, pn) != 0) break; /* past the exec */
    if ((rc = overlap(t, inst, exec, &key, &v, pn, ev, n, &first)) || first > hi) break;
  }
  dx__lm_cursor_done(t, DB_HISTORY, c);
  if (rc) return rc;
  if (mrc && mrc != MDB_NOTFOUND) return dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_HISTORY]);
  return 0;
}

/* Write one run of events (consecutive ids) as one record. */
static int append_run(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev, size_t n) {
  char *one[8], **enc = n <= 8 ? one : calloc(n, sizeof *enc);
  size_t lone[8], *len = n <= 8 ? lone : calloc(n, sizeof *len), i, rn = 0;
  unsigned char *rec = NULL;
  dkey_t k;
  int rc = 0;
  if (!enc || !len) {
    rc = dx__lm_nomem(t->err);
    n = 0;
  }
  for (i = 0; i < n && !rc; i++)
    if (dx__event_encode(&ev[i], &enc[i], &len[i])) {
      rc = dx__lm_nomem(t->err);
      n = i;
    }
  if (!rc && !(rec = run_pack(enc, len, n, &rn))) rc = dx__lm_nomem(t->err);
  if (!rc) {
    key_hist(&k, inst, exec, ev[0].event_id);
    rc = dx__lm_db_put(t, DB_HISTORY, &k, rec, rn, MDB_NOOVERWRITE);
    if (rc == DX_EEXIST) rc = event_exists(t, inst, exec, ev[0].event_id);
  }
  free(rec);
  for (i = 0; enc && i < n; i++) free(enc[i]);
  if (enc != one) free(enc);
  if (len != lone) free(len);
  return rc;
}

/* {===== runs kept by the batch =====}
** With held rounds an instance's turns ack one after another in the same batch, each turn's
** events one record. In a batch's direct method an append instead joins the instance's kept
** run (records.c lm_hrun_t: the same execution, the next ids), and the run is written as one
** record (the format's run of consecutive ids) when the batch writes what it kept
** (dx__lm_inst_keep_write: before a nested method looks, at commit), or before anything here
** reads the instance's history from the store (hrun_settle; dx__lm_history_unused looks at
** the run in memory). It goes with a batch that does not commit, as its writes would. */

#define LM_HRUN_MAX (64u << 10) /* bytes: a longer run is written and another begun */
#define LM_HRUN_KEEP 4096u      /* a written run's buffer stays for the next one up to this:
                                   the instance table outlives batches (records.c) */

int dx__lm_hrun_write(tx_t *t, const char *inst, lm_hrun_t *h) {
  unsigned char *rec = h->b + LM_HRUN_ROOM;
  size_t rn = h->len - LM_HRUN_ROOM, hs;
  dkey_t k;
  int rc;
  if (!h->n) return 0;
  if (h->n == 1) { /* a single event record: the bin's contents */
    hs = rec[0] == 0xc4 ? 2 : rec[0] == 0xc5 ? 3 : 5;
    rec += hs;
    rn -= hs;
  } else {
    hs = dx__mp_container(NULL, 0, h->n);
    rec -= hs;
    rn += hs;
    dx__mp_container(rec, 0, h->n);
  }
  key_hist(&k, inst, h->exec, h->first);
  rc = dx__lm_db_put(t, DB_HISTORY, &k, rec, rn, MDB_NOOVERWRITE);
  if (rc == DX_EEXIST) rc = event_exists(t, inst, h->exec, h->first);
  h->n = 0;
  h->len = LM_HRUN_ROOM;
  if (h->cap > LM_HRUN_KEEP) {
    free(h->b);
    h->b = NULL;
    h->cap = 0;
  }
  return rc;
}

/* Write inst's kept run now (something reads its history from the store). */
static int hrun_settle(tx_t *t, const char *inst) {
  lm_hrun_t *h = dx__lm_hrun_of(t, inst, 0);
  return h && h->n ? dx__lm_hrun_write(t, inst, h) : 0;
}

/* Append events ev[0..n) (consecutive ids) to inst's kept run: 1 when kept, 0 when they are to
** be written now (no run can be kept), or an error. */
static int hrun_add(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev, size_t n) {
  lm_hrun_t *h;
  size_t i, len0, n0;
  int rc;
  if (!t->direct || t->se->fmt3 || !(h = dx__lm_hrun_of(t, inst, 1))) return 0;
  /* events the kept run holds already (a delta repeating an id): refused now, as a write at
  ** once refuses them, not when the flush writes the run */
  if (h->n && h->exec == exec && ev[0].event_id < h->first + h->n &&
      ev[0].event_id + n > h->first)
    return event_exists(t, inst, exec, ev[0].event_id < h->first ? h->first : ev[0].event_id);
  if (h->n && (h->exec != exec || ev[0].event_id != h->first + h->n || h->len > LM_HRUN_MAX) &&
      (rc = dx__lm_hrun_write(t, inst, h)))
    return rc;
  if (!h->n) h->len = LM_HRUN_ROOM;
  len0 = h->len;
  n0 = h->n;
  for (i = 0; i < n; i++) {
    char *enc;
    size_t len, need;
    if (dx__event_encode(&ev[i], &enc, &len)) goto nomem;
    need = h->len + dx__mp_bytes(NULL, 1, enc, len);
    if (need > h->cap) {
      size_t cap = h->cap ? h->cap : 1024;
      unsigned char *nb;
      while (cap < need) cap *= 2;
      if (!(nb = realloc(h->b, cap))) {
        free(enc);
        goto nomem;
      }
      h->b = nb;
      h->cap = cap;
    }
    h->len += dx__mp_bytes(h->b + h->len, 1, enc, len);
    free(enc);
  }
  if (!n0) {
    h->exec = exec;
    h->first = ev[0].event_id;
  }
  h->n = n0 + n;
  if ((rc = dx__lm_hrun_mark(t, inst))) { /* cannot be written later: not kept */
    h->n = n0;
    h->len = len0;
    return rc;
  }
  return 1;
nomem:
  h->len = len0;
  return dx__lm_nomem(t->err);
}

/* The caller has checked that the ids are unused (dx__lm_history_unused). */
int dx__lm_history_append(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *ev,
                          size_t n) {
  size_t i = 0, j, top = 0;
  uint64_t end = 0;
  const dx_event_t *last;
  int rc, known = dx__lm_tail_get(t, inst, exec, &end, &last);
  while (i < n) { /* a store kept at format 3 (se->fmt3): one event per record */
    for (j = i + 1; j < n && !t->se->fmt3 && ev[j].event_id == ev[j - 1].event_id + 1; j++) {}
    if ((rc = hrun_add(t, inst, exec, ev + i, j - i)) == 0)
      rc = append_run(t, inst, exec, ev + i, j - i);
    else if (rc > 0)
      rc = 0;
    if (rc) {
      dx__lm_tail_forget(t, inst);
      return rc;
    }
    i = j;
  }
  /* the kept end moves to the newest event when every one lies past it */
  for (i = 0; known && i < n; i++) {
    if (ev[i].event_id <= end) known = 0;
    else if (ev[i].event_id > ev[top].event_id) top = i;
  }
  if (known && n) dx__lm_tail_keep(t, inst, exec, &ev[top]);
  else if (!known) dx__lm_tail_forget(t, inst);
  return 0;
}

typedef struct {
  tx_t *t;
  const char *inst;
  uint64_t exec, first;
  size_t prefix_n;
  dx_event_t *v;
  size_t n, cap;
} hist_acc_t;

static int hist_bad(hist_acc_t *h, const char *why, uint64_t id) {
  return dx__lm_corrupt(h->t, DB_HISTORY, why, "instance '%s' execution %llu event %llu", h->inst,
                        (unsigned long long)h->exec, (unsigned long long)id);
}

static int hist_ev_cb(void *ud, size_t i, const void *b, size_t len) {
  hist_acc_t *h = ud;
  dx_error_t derr = {0};
  dx_event_t *nv;
  int rc;
  if (!b) return hist_bad(h, "bad event run", h->first + i);
  if (!(nv = dx__lm_grow(h->v, &h->cap, h->n, sizeof *h->v))) return dx__lm_nomem(h->t->err);
  h->v = nv;
  memset(&h->v[h->n], 0, sizeof h->v[h->n]);
  if ((rc = dx__event_decode(b, len, &h->v[h->n], &derr)) == DX_ENOMEM)
    return dx__lm_nomem(h->t->err);
  if (rc) return hist_bad(h, derr.msg, h->first + i);
  h->n++;
  return 0;
}

static int history_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  hist_acc_t *h = ud;
  (void)t;
  if (k->mv_size != h->prefix_n + 8) return hist_bad(h, "bad key", 0);
  h->first = get_u64((const unsigned char *)k->mv_data + h->prefix_n);
  return dx__lm_hist_walk(v, hist_ev_cb, h);
}

/* Events of one execution, ascending event_id. DX_ECORRUPT names the undecodable event. */
int dx__lm_history_load(tx_t *t, const char *inst, uint64_t exec, dx_event_t **out, size_t *n) {
  hist_acc_t h;
  dkey_t k;
  int rc;
  memset(&h, 0, sizeof h);
  h.t = t;
  h.inst = inst;
  h.exec = exec;
  key_exec(&k, inst, exec);
  h.prefix_n = k.n;
  if ((rc = hrun_settle(t, inst))) return rc;
  rc = dx__lm_scan_prefix(t, DB_HISTORY, &k, history_cb, &h);
  if (rc) {
    dx_events_free(h.v, h.n);
    return rc;
  }
  dx__lm_tail_keep(t, inst, exec, h.n ? &h.v[h.n - 1] : NULL);
  *out = h.v;
  *n = h.n;
  return 0;
}

typedef struct {
  const void *b;
  size_t len;
} last_ev_t;

static int last_cb(void *ud, size_t i, const void *b, size_t len) {
  last_ev_t *l = ud;
  (void)i;
  if (!b) return 1; /* bad framing: let the full read report it */
  l->b = b;
  l->len = len;
  return 0;
}

/* Does execution `exec` hold exactly `n` (> 0) events? Then 1 with the last one decoded into
** *last (caller-owned); 0 when it holds fewer or more (or event n does not decode: the whole
** history is read and reports it). One seek past event n and one step back to its run. */
int dx__lm_history_holds(tx_t *t, const char *inst, uint64_t exec, uint64_t n, dx_event_t *last) {
  dkey_t k;
  MDB_cursor *c;
  MDB_val key, v;
  last_ev_t l = {NULL, 0};
  uint64_t first, end;
  const dx_event_t *kept;
  dx_error_t derr = {0};
  size_t pn;
  int mrc, rc = 0;
  /* the batches know where it ends, and usually its last event: handed out, not copied (a
  ** second fetch before the next ack reads it again) */
  if (dx__lm_tail_get(t, inst, exec, &end, &kept)) {
    if (end != n) return 0;
    if (dx__lm_tail_take(t, inst, last)) return 1;
  }
  if ((rc = hrun_settle(t, inst))) return rc;
  key_hist(&k, inst, exec, n + 1);
  pn = k.n - 8;
  key = kval(&k);
  if ((rc = dx__lm_cursor(t, DB_HISTORY, &c))) return rc;
  mrc = mdb_cursor_get(c, &key, &v, MDB_SET_RANGE);
  if (mrc == 0 && key.mv_size >= pn && memcmp(key.mv_data, k.b, pn) == 0) {
    mrc = MDB_NOTFOUND; /* a run starts past n: more events (or a gap) */
  } else if (mrc == 0 || mrc == MDB_NOTFOUND) {
    mrc = mdb_cursor_get(c, &key, &v, mrc == 0 ? MDB_PREV : MDB_LAST);
    if (mrc == 0 && key.mv_size >= pn && memcmp(key.mv_data, k.b, pn) == 0 &&
        !(rc = dx__lm_check_sum(t, DB_HISTORY, &key, &v)) &&
        entry_range(&key, &v, pn, &first, &end) == 0 && end == n &&
        dx__lm_hist_walk(&v, last_cb, &l) == 0 && l.b) {
      memset(last, 0, sizeof *last);
      rc = dx__event_decode(l.b, l.len, last, &derr);
      if (rc == DX_ENOMEM) rc = dx__lm_nomem(t->err);
      else if (rc) { dx_event_clear(last); rc = 0; }
      else rc = 1;
    }
  }
  dx__lm_cursor_done(t, DB_HISTORY, c);
  if (rc == 1) dx__lm_tail_keep(t, inst, exec, last);
  if (rc) return rc;
  if (mrc && mrc != MDB_NOTFOUND) return dx__lm_tx_err(t, mrc, dx__lm_db_names[DB_HISTORY]);
  return 0;
}

static int max_exec_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  size_t pn = ((size_t *)ud)[0];
  uint64_t exec;
  if (k->mv_size < pn + 8) return 0;
  exec = get_u64((const unsigned char *)k->mv_data + pn);
  if (exec > ((uint64_t *)ud)[1]) ((uint64_t *)ud)[1] = exec;
  return 0;
}

/* The execution to read: `want`, or the latest. Instances written only through
** append_with_execution (tests) have history but no record: use the history's keys. */
int dx__lm_resolve_exec(tx_t *t, const char *inst, uint64_t want, uint64_t *exec) {
  inst_rec_t r;
  dkey_t k;
  uint64_t acc[2];
  int rc = dx__lm_inst_get(t, inst, &r);
  if (rc == 0) {
    *exec = want ? want : r.current_exec;
    dx__lm_inst_clear(&r);
    return 0;
  }
  if (rc != DX_ENOTFOUND) return rc;
  key_inst(&k, inst);
  acc[0] = k.n;
  acc[1] = 0;
  if ((rc = hrun_settle(t, inst)) ||
      (rc = dx__lm_scan_prefix(t, DB_HISTORY, &k, max_exec_cb, acc)))
    return rc;
  if (acc[1] == 0) return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  *exec = want ? want : acc[1];
  return 0;
}

