/*
** pg_kv.c -- key-value state per instance on PostgreSQL (issue 11; duroxide §7.7): tables kv
** (committed state) and kv_delta (the running execution's changes, value NULL = cleared),
** as kv.c does on LMDB. Acks write them in dx_ack_orchs and fetches read kv in ORCH_FETCH
** (pg_orch.c, migration 3); here: the client reads and the fold after a terminate.
*/
#include <stdlib.h>
#include <string.h>

#include "providers/checks.h"
#include "providers/pg/pg_internal.h"
#include "util.h"

/* Rows (key, value, updated_at) of `res` (taken) as entries; NULL values skipped. */
static int rows_to_entries(tx_t *t, PGresult *res, dx_kv_entry_t **out, size_t *n) {
  int i, rows = PQntuples(res), oom = 0;
  dx_kv_entry_t *v = rows ? calloc((size_t)rows, sizeof *v) : NULL;
  *out = NULL;
  *n = 0;
  if (rows && !v) oom = 1;
  for (i = 0; i < rows && !oom; i++) {
    if (dx__col_null(res, i, 1)) continue;
    v[*n].key = dx__col_str(res, i, 0, &oom);
    v[*n].value = dx__col_str(res, i, 1, &oom);
    v[*n].updated_ms = dx__col_i64(res, i, 2);
    (*n)++;
  }
  PQclear(res);
  if (oom) {
    dx_kv_entries_free(v, *n);
    *n = 0;
    return dx__pg_nomem(t->err);
  }
  *out = v;
  return 0;
}

int dx__pg_kv_fold(tx_t *t, const char *inst) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  return dx__pg_q(t, PQ_KV_FOLD, &q, NULL);
}

/* {===== client reads: kv_delta over kv =====} */

int dx__pg_get_kv(dx_provider_t *pp, const char *instance, const char *key, char **value,
                  int64_t *updated_ms, dx_error_t *err) {
  PGresult *res = NULL;
  qp_t q;
  int rc, oom = 0;
  if (!value) return dx_error_set(err, DX_EINVAL, "value is NULL");
  *value = NULL;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__check_kv_key(key, err))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, instance);
  dx__qp_str(&q, key);
  if ((rc = dx__pg_one((pg_t *)pp, 0, PQ_KV_GET, &q, &res, err))) return rc;
  if (PQntuples(res) == 0 || dx__col_null(res, 0, 0)) {
    PQclear(res);
    return dx_error_set(err, DX_ENOTFOUND, "instance '%s' has no key '%s'", instance, key);
  }
  *value = dx__col_str(res, 0, 0, &oom);
  if (updated_ms) *updated_ms = dx__col_i64(res, 0, 1);
  PQclear(res);
  return oom ? dx__pg_nomem(err) : 0;
}

int dx__pg_list_kv(dx_provider_t *pp, const char *instance, dx_kv_cb cb, void *ud,
                   dx_error_t *err) {
  PGresult *res = NULL;
  dx_kv_entry_t *v = NULL;
  size_t n = 0, i;
  tx_t t;
  qp_t q;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = dx__check_instance(instance, err))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, instance);
  if ((rc = dx__pg_one((pg_t *)pp, 0, PQ_KV_LIST, &q, &res, err))) return rc;
  memset(&t, 0, sizeof t);
  t.err = err;
  if ((rc = rows_to_entries(&t, res, &v, &n))) return rc;
  /* the callbacks run after the statement: they may take their time or call us */
  for (i = 0; i < n; i++)
    if (cb(ud, v[i].key, v[i].value, v[i].updated_ms)) break;
  dx_kv_entries_free(v, n);
  return 0;
}
