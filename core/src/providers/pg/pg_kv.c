/*
** pg_kv.c -- key-value state per instance on PostgreSQL (issue 11; duroxide §7.7): tables kv
** (committed state) and kv_delta (the running execution's changes, value NULL = cleared),
** as kv.c does on LMDB. Acks queue their writes; fetches read kv in their pipeline.
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

int dx__pg_kv_take(tx_t *t, PGresult *res, dx_orch_item_t *it) {
  return rows_to_entries(t, res, &it->kv, &it->kv_len);
}

static int dset(tx_t *t, const char *inst, const char *key, const char *value, int64_t at) {
  qp_t q;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_str(&q, key);
  dx__qp_str(&q, value);
  dx__qp_i64(&q, at);
  return dx__pg_q(t, PQ_KV_DSET, &q, NULL);
}

int dx__pg_kv_ack(tx_t *t, const char *inst, const dx_event_t *delta, size_t n, int status) {
  qp_t q;
  size_t i;
  int rc = 0;
  for (i = 0; i < n && !rc; i++) {
    const dx_event_t *e = &delta[i];
    if (e->kind == DX_EV_KV_SET) {
      rc = dset(t, inst, e->name, e->data, e->timestamp_ms);
    } else if (e->kind == DX_EV_KV_CLEARED) {
      rc = dset(t, inst, e->name, NULL, e->timestamp_ms);
    } else if (e->kind == DX_EV_KV_CLEARED_ALL) {
      dx__qp_init(&q);
      dx__qp_str(&q, inst);
      dx__qp_i64(&q, e->timestamp_ms);
      rc = dx__pg_q(t, PQ_KV_DCLEAR_ALL, &q, NULL);
    }
  }
  if (!rc && dx__kv_folds(status)) {
    dx__qp_init(&q);
    dx__qp_str(&q, inst);
    rc = dx__pg_q(t, PQ_KV_FOLD, &q, NULL);
  }
  return rc;
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
