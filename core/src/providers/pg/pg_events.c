/*
** pg_events.c -- PostgreSQL provider: the session history (claims, moves, releases and their
** reasons) behind `duroxide-lua sessions --history`: append (keeping each session's latest
** DX_SESSION_EVENTS_KEEP events) and list. cleanup_orphaned_sessions prunes old events.
*/
#include <string.h>

#include "providers/checks.h"
#include "providers/pg/pg_internal.h"

int dx__pg_append_session_event(dx_provider_t *pp, const dx_session_event_t *ev,
                                dx_error_t *err) {
  qp_t qi, qt;
  tx_t t;
  int rc;
  if ((rc = dx__check_session_event(ev, err))) return rc;
  dx__qp_init(&qi);
  dx__qp_str(&qi, ev->session_id);
  dx__qp_i64(&qi, ev->at_ms);
  dx__qp_str(&qi, ev->event);
  dx__qp_str(&qi, ev->worker_id);
  dx__qp_str(&qi, ev->detail);
  dx__qp_str(&qi, ev->previous_owner);
  dx__qp_init(&qt);
  dx__qp_str(&qt, ev->session_id);
  dx__qp_i64(&qt, DX_SESSION_EVENTS_KEEP);
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = dx__pg_q(&t, PQ_SEV_INSERT, &qi, NULL);
  if (!rc) rc = dx__pg_q(&t, PQ_SEV_TRIM, &qt, NULL);
  return dx__pg_tx_end(&t, rc);
}

int dx__pg_list_session_events(dx_provider_t *pp, const char *sid, dx_session_event_cb cb,
                               void *ud, dx_error_t *err) {
  PGresult *res = NULL;
  qp_t q;
  int rc, i, n;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if (!sid || !*sid) return dx_error_set(err, DX_EINVAL, "session id is missing or empty");
  if (strlen(sid) > DX_MAX_SESSION_ID_BYTES)
    return dx_error_set(err, DX_EINVAL, "session id is %zu bytes; the limit is %d bytes",
                        strlen(sid), DX_MAX_SESSION_ID_BYTES);
  dx__qp_init(&q);
  dx__qp_str(&q, sid);
  if ((rc = dx__pg_one((pg_t *)pp, 0, PQ_SEV_LIST, &q, &res, err))) return rc;
  n = PQntuples(res);
  for (i = 0; i < n; i++) { /* after the read: callbacks may call the provider */
    dx_session_event_t e;
    e.session_id = sid;
    e.at_ms = dx__col_i64(res, i, 0);
    e.event = PQgetvalue(res, i, 1);
    e.worker_id = PQgetvalue(res, i, 2);
    e.detail = dx__col_null(res, i, 3) ? NULL : PQgetvalue(res, i, 3);
    e.previous_owner = dx__col_null(res, i, 4) ? NULL : PQgetvalue(res, i, 4);
    if (cb(ud, &e)) break;
  }
  PQclear(res);
  return 0;
}
