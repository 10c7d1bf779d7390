/*
** pg_read.c -- reads and management on PostgreSQL: history, instance info, listing, queue
** depths, next due time; the test-only history append.
*/
#include <stdlib.h>
#include <string.h>

#include "providers/checks.h"
#include "providers/pg/pg_internal.h"
#include "util.h"

/* Execution `want` (0: the latest) of `inst` and its events, in one statement (PQ_HIST_READ:
** one snapshot, so a turn or a delete committing meanwhile is seen whole or not at all). */
static int history_read(tx_t *t, const char *inst, uint64_t want, uint64_t *exec,
                        dx_event_t **events, size_t *n) {
  PGresult *res;
  qp_t q;
  int rc;
  if ((rc = dx__pg_lookup_id(t, inst))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, (int64_t)want);
  if ((rc = dx__pg_q(t, PQ_HIST_READ, &q, &res))) return rc;
  if (PQntuples(res) < 1 || dx__col_null(res, 0, 0)) {
    PQclear(res);
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  }
  *exec = (uint64_t)dx__col_i64(res, 0, 0);
  rc = dx__pg_history_decode(t, res, 1, PQntuples(res) - 1, 1, 2, inst, *exec, events, n);
  PQclear(res);
  return rc;
}

static int read_history_once(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                             dx_event_t **events, size_t *n, uint64_t *exec_out,
                             dx_error_t *err) {
  uint64_t exec = 0;
  tx_t t;
  int rc;
  if (!events || !n) return dx_error_set(err, DX_EINVAL, "events/n is NULL");
  *events = NULL;
  *n = 0;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__pg_read_begin((pg_t *)pp, &t, err)))
    return rc;
  rc = dx__pg_tx_end(&t, history_read(&t, instance, execution_id, &exec, events, n));
  if (rc) {
    dx_events_free(*events, *n);
    *events = NULL;
    *n = 0;
  } else if (exec_out) {
    *exec_out = exec;
  }
  return rc;
}

int dx__pg_append(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                  const dx_event_t *events, size_t n, dx_error_t *err) {
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__check_events(events, n, err)))
    return rc;
  if (execution_id == 0) return dx_error_set(err, DX_EINVAL, "execution_id 0 (ids start at 1)");
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = dx__pg_history_dups(&t, instance, execution_id, events, n);
  if (!rc) rc = dx__pg_history_append(&t, instance, execution_id, events, n);
  return dx__pg_tx_end(&t, rc);
}

/* The columns of PQ_INFO_GET from column c (name .. f_retry) into *out. */
void dx__pg_info_fill(const PGresult *res, int row, int c, dx_instance_info_t *out, int *oom) {
  out->orchestration_name = dx__col_str(res, row, c + 0, oom);
  out->orchestration_version = dx__col_str(res, row, c + 1, oom);
  out->current_execution_id = (uint64_t)dx__col_i64(res, row, c + 2);
  out->custom_status = dx__col_str(res, row, c + 3, oom);
  out->custom_status_version = (uint64_t)dx__col_i64(res, row, c + 4);
  out->created_at_ms = dx__col_i64(res, row, c + 5);
  out->updated_at_ms = dx__col_i64(res, row, c + 6);
  out->parent_instance = dx__col_str(res, row, c + 7, oom);
  out->status = (int)dx__col_i64(res, row, c + 8); /* no execution row: NONE */
  out->output = dx__col_str(res, row, c + 9, oom);
  out->failure.category = (int)dx__col_i64(res, row, c + 10);
  out->failure.kind = dx__col_str(res, row, c + 11, oom);
  out->failure.message = dx__col_str(res, row, c + 12, oom);
  out->failure.retryable = (int)dx__col_i64(res, row, c + 13);
}

static int instance_info(tx_t *t, const char *inst, dx_instance_info_t *out) {
  PGresult *res;
  qp_t q;
  int rc, oom = 0;
  if ((rc = dx__pg_lookup_id(t, inst))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  if ((rc = dx__pg_q(t, PQ_INFO_GET, &q, &res))) return rc;
  if (PQntuples(res) == 0) {
    PQclear(res);
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  }
  out->instance_id = dx__strdup(inst);
  /* started but not yet run (no record, messages queued): status NONE, found */
  if (dx__col_i64(res, 0, 14)) dx__pg_info_fill(res, 0, 0, out, &oom);
  PQclear(res);
  return oom || !out->instance_id ? dx__pg_nomem(t->err) : 0;
}

static int get_info_once(dx_provider_t *pp, const char *instance, dx_instance_info_t *out,
                         dx_error_t *err) {
  tx_t t;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__pg_read_begin((pg_t *)pp, &t, err)))
    return rc;
  rc = dx__pg_tx_end(&t, instance_info(&t, instance, out));
  if (rc) dx_instance_info_clear(out);
  return rc;
}

static int list_once(dx_provider_t *pp, dx_instance_cb cb, void *ud, dx_error_t *err) {
  PGresult *res = NULL;
  int rc, i;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  rc = dx__pg_one((pg_t *)pp, 0, PQ_LIST_INSTANCES, NULL, &res, err);
  /* the callbacks run after the statement: they may take their time or call us */
  for (i = 0; !rc && i < PQntuples(res); i++)
    if (cb(ud, PQgetvalue(res, i, 0))) break;
  PQclear(res);
  return rc;
}

/* Reads outside a batch are retried once after a lost connection (a server restart): nothing
** was written, so running them again is safe. Inside a batch the caller retries the batch. */
static int read_again(dx_provider_t *pp, int rc, int attempt) {
  pg_conn_t *c = pthread_getspecific(((pg_t *)pp)->key);
  return rc == DX_ERETRY && attempt == 0 && !(c && c->in_batch);
}

int dx__pg_read_history(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                        dx_event_t **events, size_t *n, uint64_t *exec_out, dx_error_t *err) {
  int rc, attempt = 0;
  while (read_again(pp, rc = read_history_once(pp, instance, execution_id, events, n, exec_out,
                                               err), attempt++)) {}
  return rc;
}

int dx__pg_get_info(dx_provider_t *pp, const char *instance, dx_instance_info_t *out,
                    dx_error_t *err) {
  int rc, attempt = 0;
  while (read_again(pp, rc = get_info_once(pp, instance, out, err), attempt++)) {}
  return rc;
}

/* Every id is read before the first callback, so a retry never repeats a callback. */
int dx__pg_list(dx_provider_t *pp, dx_instance_cb cb, void *ud, dx_error_t *err) {
  int rc, attempt = 0;
  while (read_again(pp, rc = list_once(pp, cb, ud, err), attempt++)) {}
  return rc;
}

/* count(*) over the tables: O(rows), unlike LMDB's entry counts. */
int dx__pg_depths(dx_provider_t *pp, dx_queue_depths_t *out, dx_error_t *err) {
  PGresult *res = NULL;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  memset(out, 0, sizeof *out);
  rc = dx__pg_one((pg_t *)pp, 0, PQ_DEPTHS, NULL, &res, err);
  if (!rc) {
    out->orchestrator = (uint64_t)dx__col_i64(res, 0, 0);
    out->worker = (uint64_t)dx__col_i64(res, 0, 1);
    out->instances = (uint64_t)dx__col_i64(res, 0, 2);
  }
  PQclear(res);
  return rc;
}

int dx__pg_next_due(dx_provider_t *pp, int64_t now, int64_t *out, dx_error_t *err) {
  pg_t *p = (pg_t *)pp;
  PGresult *res = NULL;
  qp_t q;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = PG_NEVER;
  /* what this worker takes (set_fetch_filter): the same rules as its fetches */
  dx__qp_init(&q);
  dx__qp_i64(&q, dx_fetch_filter_accepts_tag(p->filter, NULL));
  dx__qp_str(&q, p->tags_param);
  dx__qp_str(&q, p->cap_names);
  dx__qp_str(&q, p->cap_versions);
  if (p->liveness) {
    dx__qp_i64(&q, now);
    dx__qp_i64(&q, dx__pg_live_next_sweep(p));
  }
  rc = dx__pg_one(p, 0, p->liveness ? PQ_NEXT_DUE_LIVE : PQ_NEXT_DUE, &q, &res, err);
  if (!rc && !dx__col_null(res, 0, 0)) *out = dx__col_i64(res, 0, 0);
  PQclear(res);
  return rc;
}

/* {===== test hooks =====} */

int dx__pg_test_corrupt_history(dx_provider_t *pp, const char *instance, uint64_t execution_id,
                                uint64_t event_id) {
  PGresult *res = NULL;
  qp_t q;
  int rc;
  dx__qp_init(&q);
  dx__qp_str(&q, instance);
  dx__qp_i64(&q, (int64_t)execution_id);
  dx__qp_i64(&q, (int64_t)event_id);
  rc = dx__pg_one((pg_t *)pp, 1, PQ_TEST_CORRUPT, &q, &res, NULL);
  if (!rc && atoi(PQcmdTuples(res)) == 0) rc = DX_ENOTFOUND;
  PQclear(res);
  return rc;
}

/* The session's lease ends at now_ms; the owner stays recorded (a lapse, not a release). */
int dx__pg_test_expire_session(dx_provider_t *pp, const char *session_id, int64_t now_ms) {
  PGresult *res = NULL;
  qp_t q;
  int rc;
  dx__qp_init(&q);
  dx__qp_str(&q, session_id);
  dx__qp_i64(&q, now_ms);
  rc = dx__pg_one((pg_t *)pp, 1, PQ_TEST_EXPIRE, &q, &res, NULL);
  if (!rc && atoi(PQcmdTuples(res)) == 0) rc = DX_ENOTFOUND;
  PQclear(res);
  return rc;
}
