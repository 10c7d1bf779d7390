/*
** sess_events.c -- LMDB provider: the session history (claims, moves, releases and their
** reasons) behind `duroxide-lua sessions --history`: append (keeping each session's latest
** DX_SESSION_EVENTS_KEEP events), list, and the age prune that cleanup runs.
*/
#include "lmdb_int.h"

static void key_sev(dkey_t *k, const char *sid, uint64_t seq) {
  k_init(k);
  k_str(k, sid);
  k_u64(k, seq);
}

/* Keys of one session's events (or, with `before`, of every event older than it). */
typedef struct {
  size_t prefix_n;
  int64_t before;    /* prune: collect events with at < before; 0: collect every seq */
  uint64_t *seqs;    /* collected seqs (per session), or... */
  size_t n, cap;
  str_list_t sids;   /* ...(prune) the session id of each collected seq */
} sev_scan_t;

static int sev_push(tx_t *t, sev_scan_t *s, uint64_t seq) {
  uint64_t *nv = dx__lm_grow(s->seqs, &s->cap, s->n, sizeof *s->seqs);
  if (!nv) return dx__lm_nomem(t->err);
  s->seqs = nv;
  s->seqs[s->n++] = seq;
  return 0;
}

static int seq_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sev_scan_t *s = ud;
  (void)v;
  if (k->mv_size != s->prefix_n + 8)
    return dx__lm_corrupt(t, DB_SESS_EVENTS, "bad key", "%zu-byte key", k->mv_size);
  return sev_push(t, s, get_u64((const char *)k->mv_data + s->prefix_n));
}

static int sev_append(tx_t *t, const dx_session_event_t *ev) {
  sev_scan_t s;
  sev_rec_t r;
  dkey_t k;
  uint64_t seq;
  size_t i;
  int rc;
  if ((rc = dx__lm_next_seq(t, &seq))) return rc;
  r.at = ev->at_ms;
  r.event = (char *)ev->event;
  r.worker = (char *)ev->worker_id;
  r.detail = (char *)ev->detail;
  r.prev = (char *)ev->previous_owner;
  key_sev(&k, ev->session_id, seq);
  if ((rc = dx__lm_rec_put(t, &dx__lm_sev_schema, &k, &r))) return rc;
  /* keep the latest DX_SESSION_EVENTS_KEEP: drop the oldest beyond them */
  memset(&s, 0, sizeof s);
  key_inst(&k, ev->session_id);
  s.prefix_n = k.n;
  rc = dx__lm_scan_prefix(t, DB_SESS_EVENTS, &k, seq_cb, &s);
  for (i = 0; !rc && s.n > DX_SESSION_EVENTS_KEEP && i < s.n - DX_SESSION_EVENTS_KEEP; i++) {
    key_sev(&k, ev->session_id, s.seqs[i]);
    rc = dx__lm_db_del(t, DB_SESS_EVENTS, &k);
  }
  free(s.seqs);
  return rc;
}

int dx__lm_append_session_event(dx_provider_t *pp, const dx_session_event_t *ev,
                                dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc;
  if ((rc = dx__check_session_event(ev, err))) return rc;
  /* direct in a batch: nothing is refused after the checks above */
  LM_WRITE_DIRECT(p, t, err, rc, sev_append(&t, ev), (void)0);
  return rc;
}

/* Decoded events handed to the callback after the read txn ended. */
typedef struct {
  size_t prefix_n;
  sev_rec_t *v;
  size_t n, cap;
} sev_list_t;

static int list_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sev_list_t *l = ud;
  sev_rec_t *nv;
  char what[64];
  int rc;
  if (k->mv_size != l->prefix_n + 8)
    return dx__lm_corrupt(t, DB_SESS_EVENTS, "bad key", "%zu-byte key", k->mv_size);
  if (!(nv = dx__lm_grow(l->v, &l->cap, l->n, sizeof *l->v))) return dx__lm_nomem(t->err);
  l->v = nv;
  memset(&l->v[l->n], 0, sizeof l->v[l->n]);
  snprintf(what, sizeof what, "session event %llu",
           (unsigned long long)get_u64((const char *)k->mv_data + l->prefix_n));
  if ((rc = dx__lm_rec_decode(t, &dx__lm_sev_schema, v, &l->v[l->n], what))) return rc;
  l->n++;
  return 0;
}

int dx__lm_list_session_events(dx_provider_t *pp, const char *sid, dx_session_event_cb cb,
                               void *ud, dx_error_t *err) {
  lm_t *p = (lm_t *)pp;
  sev_list_t l;
  dkey_t pre;
  tx_t t;
  size_t i;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if (!sid || !*sid) return dx_error_set(err, DX_EINVAL, "session id is missing or empty");
  if (strlen(sid) > DX_MAX_SESSION_ID_BYTES)
    return dx_error_set(err, DX_EINVAL, "session id is %zu bytes; the limit is %d bytes",
                        strlen(sid), DX_MAX_SESSION_ID_BYTES);
  if (p->se->no_sess_events) return 0;
  memset(&l, 0, sizeof l);
  key_inst(&pre, sid);
  l.prefix_n = pre.n;
  if ((rc = dx__lm_begin_tx(p, 0, &t, err))) return rc;
  rc = dx__lm_tx_end(&t, dx__lm_scan_prefix(&t, DB_SESS_EVENTS, &pre, list_cb, &l));
  for (i = 0; i < l.n; i++) {
    if (!rc) {
      dx_session_event_t e;
      e.session_id = sid;
      e.at_ms = l.v[i].at;
      e.event = l.v[i].event;
      e.worker_id = l.v[i].worker;
      e.detail = l.v[i].detail;
      e.previous_owner = l.v[i].prev;
      if (cb(ud, &e)) rc = 1; /* stop reporting; still free the rest */
    }
    dx__lm_rec_clear(&dx__lm_sev_schema, &l.v[i]);
  }
  free(l.v);
  return rc > 0 ? 0 : rc;
}

/* Prune: collect the keys of events older than s->before (their session id and seq). */
static int old_cb(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  sev_scan_t *s = ud;
  const char *kb = k->mv_data;
  const char *nul = k->mv_size > 9 ? memchr(kb, 0, k->mv_size - 8) : NULL;
  sev_rec_t r;
  int rc;
  if (!nul || (size_t)(nul - kb) + 9 != k->mv_size)
    return dx__lm_corrupt(t, DB_SESS_EVENTS, "bad key", "%zu-byte key", k->mv_size);
  memset(&r, 0, sizeof r);
  if ((rc = dx__lm_rec_decode(t, &dx__lm_sev_schema, v, &r, "session event"))) return rc;
  if (r.at < s->before) {
    if (dx__lm_strs_push(&s->sids, kb)) rc = dx__lm_nomem(t->err);
    else rc = sev_push(t, s, get_u64(nul + 1));
  }
  dx__lm_rec_clear(&dx__lm_sev_schema, &r);
  return rc;
}

int dx__lm_prune_session_events(tx_t *t, int64_t now) {
  sev_scan_t s;
  dkey_t k;
  size_t i;
  int rc;
  if (t->se->no_sess_events) return 0;
  memset(&s, 0, sizeof s);
  s.before = now - DX_SESSION_EVENTS_MAX_AGE_MS;
  k_init(&k);
  rc = dx__lm_scan_prefix(t, DB_SESS_EVENTS, &k, old_cb, &s);
  for (i = 0; !rc && i < s.n; i++) {
    key_sev(&k, s.sids.v[i], s.seqs[i]);
    rc = dx__lm_db_del(t, DB_SESS_EVENTS, &k);
  }
  free(s.seqs);
  dx__lm_strs_free(&s.sids);
  return rc;
}
