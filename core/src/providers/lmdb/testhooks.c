/*
** testhooks.c -- LMDB provider: the test-only hooks behind methods->test_hooks (never used by
** the engine).
*/
#include "lmdb_int.h"

/* {===== test hooks =====} */

typedef struct {
  unsigned char *out;
  size_t n, hit;
} garble_t;

/* Copy a run's events as bins, the one at `hit` replaced by garbage of its length. */
static int garble_cb(void *ud, size_t i, const void *b, size_t len) {
  garble_t *g = ud;
  unsigned char *q = g->out + g->n;
  if (!b || len > 0xffff) return 1;
  *q++ = 0xc5;
  *q++ = (unsigned char)(len >> 8);
  *q++ = (unsigned char)len;
  if (i == g->hit) memset(q, 0xc1, len); /* 0xc1: never valid */
  else memcpy(q, b, len);
  g->n += 3 + len;
  return 0;
}

/* Event `event_id` no longer decodes: its own entry is replaced by garbage, or, inside a turn's
** run, its bin is (the other events of the run stay readable). */
static int corrupt_tx(tx_t *t, const char *inst, uint64_t exec, uint64_t id) {
  static const unsigned char garbage[] = {0xc1, 0xc1, 0xc1, 0xc1};
  MDB_cursor *c;
  MDB_val key, v;
  dkey_t k;
  size_t pn, count;
  uint64_t first;
  garble_t g = {NULL, 0, 0};
  int mrc, rc = 0;
  key_hist(&k, inst, exec, id + 1);
  pn = k.n - 8;
  key = kval(&k);
  if ((mrc = mdb_cursor_open(t->txn, t->se->dbi[DB_HISTORY], &c))) return DX_ESTORE;
  mrc = mdb_cursor_get(c, &key, &v, MDB_SET_RANGE);
  mrc = mdb_cursor_get(c, &key, &v, mrc == 0 ? MDB_PREV : MDB_LAST);
  if (mrc == 0 && key.mv_size == pn + 8 && memcmp(key.mv_data, k.b, pn) == 0 &&
      dx__lm_check_sum(t, DB_HISTORY, &key, &v) == 0 && dx__lm_hist_count(&v, &count) == 0 &&
      count > 1 && (first = get_u64((const char *)key.mv_data + pn)) + count > id) {
    g.hit = id - first;
    if (!(g.out = malloc(v.mv_size + 3 * count + 3))) {
      rc = DX_ENOMEM;
    } else {
      g.out[0] = 0xdc; /* the run's header, as a 16-bit array */
      g.out[1] = (unsigned char)(count >> 8);
      g.out[2] = (unsigned char)count;
      g.n = 3;
      if (dx__lm_hist_walk(&v, garble_cb, &g)) rc = DX_ECORRUPT;
    }
    k_init(&k);
    k_bytes(&k, key.mv_data, key.mv_size);
  }
  mdb_cursor_close(c);
  if (!rc && g.out) rc = dx__lm_db_put(t, DB_HISTORY, &k, g.out, g.n, 0);
  else if (!rc) {
    key_hist(&k, inst, exec, id);
    rc = dx__lm_db_put(t, DB_HISTORY, &k, garbage, sizeof garbage, 0);
  }
  free(g.out);
  return rc;
}

static int lm_test_corrupt_history(dx_provider_t *pp, const char *instance,
                                   uint64_t execution_id, uint64_t event_id) {
  lm_t *p = (lm_t *)pp;
  tx_t t;
  int rc = dx__lm_begin_tx(p, 1, &t, NULL);
  if (rc) return rc;
  return dx__lm_tx_end(&t, corrupt_tx(&t, instance, execution_id, event_id));
}

/* The session's lease ends at now_ms; the owner stays recorded (a lapse, not a release). */
static int lm_test_expire_session(dx_provider_t *pp, const char *session_id, int64_t now_ms) {
  lm_t *p = (lm_t *)pp;
  sess_rec_t r, nw;
  tx_t t;
  int rc = dx__lm_begin_tx(p, 1, &t, NULL);
  if (rc) return rc;
  rc = dx__lm_sess_get(&t, session_id, &r);
  if (rc == 0) {
    nw = r; /* shares r's strings */
    if (nw.locked_until > now_ms) nw.locked_until = now_ms;
    rc = dx__lm_sess_put(&t, session_id, &r, &nw);
    dx__lm_sess_clear(&r);
  }
  return dx__lm_tx_end(&t, rc);
}

/* The handle's next commit fails as a failed write or fsync makes it (the txn aborted, its id
** left to the next writer): the commit returns an error. */
static int lm_test_fail_next_commit(dx_provider_t *pp) {
  ((lm_t *)pp)->fail_commit = 1;
  return 0;
}

const dx_provider_test_hooks_t dx__lm_test_hooks = {2, lm_test_corrupt_history,
                                                    lm_test_expire_session,
                                                    lm_test_fail_next_commit};
