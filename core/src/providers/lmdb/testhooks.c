/*
** testhooks.c -- LMDB provider: the test-only hooks behind methods->test_hooks (never used by
** the engine).
*/
#include "lmdb_int.h"

/* {===== test hooks =====} */

static int lm_test_corrupt_history(dx_provider_t *pp, const char *instance,
                                   uint64_t execution_id, uint64_t event_id) {
  static const unsigned char garbage[] = {0xc1, 0xc1, 0xc1, 0xc1}; /* 0xc1: never valid */
  lm_t *p = (lm_t *)pp;
  dkey_t k;
  tx_t t;
  int rc = dx__lm_begin_tx(p, 1, &t, NULL);
  if (rc) return rc;
  key_hist(&k, instance, execution_id, event_id);
  return dx__lm_tx_end(&t, dx__lm_db_put(&t, DB_HISTORY, &k, garbage, sizeof garbage, 0));
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

const dx_provider_test_hooks_t dx__lm_test_hooks = {1, lm_test_corrupt_history,
                                                    lm_test_expire_session};
