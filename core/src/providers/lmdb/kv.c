/*
** kv.c -- LMDB provider: key-value state per instance (issue 11; duroxide §7.7).
**
** Two tables keyed inst\0 key\0: `kv` holds the committed state (as of the end of the previous
** execution), `kv_delta` the running execution's changes, a nil value marking a cleared key.
** A turn's ack applies its KeyValue* events to kv_delta; the ack that ends the execution
** folds kv_delta into kv. Fetch hands the runtime only kv (replay reproduces the running
** execution's writes); clients read kv_delta over kv.
*/
#include "lmdb_int.h"

static void key_kv(dkey_t *k, const char *inst, const char *key) {
  key_inst(k, inst);
  k_str(k, key);
}

/* One scanned entry: the key after the instance prefix and the decoded record. */
typedef struct {
  dx_kv_entry_t *v;
  size_t n, cap;
  size_t prefix_n;
  const lm_schema_t *schema;
  int keep_cleared; /* kv_delta: keep nil values (value NULL) */
} kv_list_t;

static void kv_list_free(kv_list_t *l) {
  dx_kv_entries_free(l->v, l->n);
  l->v = NULL;
  l->n = l->cap = 0;
}

static int kv_collect(tx_t *t, const MDB_val *k, const MDB_val *v, void *ud) {
  kv_list_t *l = ud;
  kv_rec_t r;
  dx_kv_entry_t *e;
  int rc;
  memset(&r, 0, sizeof r);
  if ((rc = dx__lm_rec_decode(t, l->schema, v, &r, (const char *)k->mv_data))) return rc;
  if (!r.value && !l->keep_cleared) return 0;
  if (l->n == l->cap && !(l->v = dx__lm_grow(l->v, &l->cap, l->n + 1, sizeof *l->v))) {
    free(r.value);
    return dx__lm_nomem(t->err);
  }
  e = &l->v[l->n];
  e->key = dx__strdup((const char *)k->mv_data + l->prefix_n);
  e->value = r.value;
  e->updated_ms = r.updated_at;
  if (!e->key) {
    free(r.value);
    return dx__lm_nomem(t->err);
  }
  l->n++;
  return 0;
}

static int kv_load(tx_t *t, int db, const char *inst, int keep_cleared, kv_list_t *l) {
  dkey_t k;
  int rc;
  memset(l, 0, sizeof *l);
  key_inst(&k, inst);
  l->prefix_n = k.n;
  l->schema = db == DB_KV ? &dx__lm_kv_schema : &dx__lm_kv_delta_schema;
  l->keep_cleared = keep_cleared;
  if ((rc = dx__lm_scan_prefix(t, db, &k, kv_collect, l))) kv_list_free(l);
  return rc;
}

int dx__lm_kv_snapshot(tx_t *t, const char *inst, dx_kv_entry_t **out, size_t *n) {
  kv_list_t l;
  int rc = kv_load(t, DB_KV, inst, 0, &l);
  *out = rc ? NULL : l.v;
  *n = rc ? 0 : l.n;
  return rc;
}

static int kv_put(tx_t *t, int db, const char *inst, const char *key, const char *value,
                  int64_t at) {
  kv_rec_t r;
  dkey_t k;
  r.value = (char *)value;
  r.updated_at = at;
  key_kv(&k, inst, key);
  return dx__lm_rec_put(t, db == DB_KV ? &dx__lm_kv_schema : &dx__lm_kv_delta_schema, &k, &r);
}

static int kv_del(tx_t *t, int db, const char *inst, const char *key) {
  dkey_t k;
  int rc;
  key_kv(&k, inst, key);
  rc = dx__lm_db_del(t, db, &k);
  return rc == DX_ENOTFOUND ? 0 : rc;
}

/* Clear every key: tombstones over the committed keys and the running execution's ones. */
static int kv_clear_all(tx_t *t, const char *inst, int64_t at) {
  kv_list_t l;
  size_t i;
  int db, rc = 0;
  for (db = DB_KV; db <= DB_KV_DELTA && !rc; db++) {
    if ((rc = kv_load(t, db, inst, 0, &l))) return rc;
    for (i = 0; i < l.n && !rc; i++) rc = kv_put(t, DB_KV_DELTA, inst, l.v[i].key, NULL, at);
    kv_list_free(&l);
  }
  return rc;
}

/* The execution ended: its changes become the committed state. */
static int kv_fold(tx_t *t, const char *inst) {
  kv_list_t l;
  size_t i;
  int rc = kv_load(t, DB_KV_DELTA, inst, 1, &l);
  for (i = 0; i < l.n && !rc; i++) {
    rc = l.v[i].value ? kv_put(t, DB_KV, inst, l.v[i].key, l.v[i].value, l.v[i].updated_ms)
                      : kv_del(t, DB_KV, inst, l.v[i].key);
    if (!rc) rc = kv_del(t, DB_KV_DELTA, inst, l.v[i].key);
  }
  kv_list_free(&l);
  return rc;
}

int dx__lm_kv_ack(tx_t *t, const char *inst, const dx_event_t *delta, size_t n, int status) {
  size_t i;
  int rc = 0;
  for (i = 0; i < n && !rc; i++) {
    const dx_event_t *e = &delta[i];
    if (e->kind == DX_EV_KV_SET)
      rc = kv_put(t, DB_KV_DELTA, inst, e->name, e->data, e->timestamp_ms);
    else if (e->kind == DX_EV_KV_CLEARED)
      rc = kv_put(t, DB_KV_DELTA, inst, e->name, NULL, e->timestamp_ms);
    else if (e->kind == DX_EV_KV_CLEARED_ALL)
      rc = kv_clear_all(t, inst, e->timestamp_ms);
  }
  if (!rc && dx__kv_folds(status)) rc = kv_fold(t, inst);
  return rc;
}

int dx__lm_kv_delete(tx_t *t, const char *inst) {
  kv_list_t l;
  size_t i;
  int db, rc = 0;
  for (db = DB_KV; db <= DB_KV_DELTA && !rc; db++) {
    if ((rc = kv_load(t, db, inst, 1, &l))) return rc;
    for (i = 0; i < l.n && !rc; i++) rc = kv_del(t, db, inst, l.v[i].key);
    kv_list_free(&l);
  }
  return rc;
}

/* {===== client reads: kv_delta over kv =====} */

static int kv_get(tx_t *t, const char *inst, const char *key, char **value, int64_t *at) {
  kv_rec_t r;
  dkey_t k;
  int rc;
  memset(&r, 0, sizeof r);
  key_kv(&k, inst, key);
  rc = dx__lm_rec_get(t, &dx__lm_kv_delta_schema, &k, &r, inst);
  if (rc == DX_ENOTFOUND) rc = dx__lm_rec_get(t, &dx__lm_kv_schema, &k, &r, inst);
  if (rc) return rc;
  if (!r.value) return DX_ENOTFOUND; /* cleared in the running execution */
  *value = r.value;
  if (at) *at = r.updated_at;
  return 0;
}

int dx__lm_get_kv(dx_provider_t *pp, const char *instance, const char *key, char **value,
                  int64_t *updated_ms, dx_error_t *err) {
  tx_t t;
  int rc;
  if (!value) return dx_error_set(err, DX_EINVAL, "value is NULL");
  *value = NULL;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__check_kv_key(key, err))) return rc;
  if ((rc = dx__lm_begin_tx((lm_t *)pp, 0, &t, err))) return rc;
  rc = kv_get(&t, instance, key, value, updated_ms);
  if (rc == DX_ENOTFOUND) {
    dx__lm_tx_end(&t, 0);
    return dx_error_set(err, DX_ENOTFOUND, "instance '%s' has no key '%s'", instance, key);
  }
  return dx__lm_tx_end(&t, rc);
}

/* Both tables ascending by key: a kv_delta entry replaces the kv entry of its key. */
static int kv_merged(tx_t *t, const char *inst, kv_list_t *out) {
  kv_list_t a, d;
  size_t i = 0, j = 0;
  int rc;
  memset(out, 0, sizeof *out);
  if ((rc = kv_load(t, DB_KV, inst, 0, &a))) return rc;
  if ((rc = kv_load(t, DB_KV_DELTA, inst, 1, &d))) {
    kv_list_free(&a);
    return rc;
  }
  if (a.n + d.n && !(out->v = calloc(a.n + d.n, sizeof *out->v))) rc = dx__lm_nomem(t->err);
  while (!rc && (i < a.n || j < d.n)) {
    int c = i == a.n ? 1 : j == d.n ? -1 : strcmp(a.v[i].key, d.v[j].key);
    dx_kv_entry_t *src = c < 0 ? &a.v[i] : &d.v[j];
    if (c >= 0) j++;
    if (c <= 0) i++;
    if (!src->value) continue;
    out->v[out->n++] = *src; /* moved: the source lists keep only what was not taken */
    src->key = src->value = NULL;
  }
  kv_list_free(&a);
  kv_list_free(&d);
  if (rc) kv_list_free(out);
  return rc;
}

int dx__lm_list_kv(dx_provider_t *pp, const char *instance, dx_kv_cb cb, void *ud,
                   dx_error_t *err) {
  kv_list_t l;
  tx_t t;
  size_t i;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = dx__check_instance(instance, err))) return rc;
  if ((rc = dx__lm_begin_tx((lm_t *)pp, 0, &t, err))) return rc;
  rc = dx__lm_tx_end(&t, kv_merged(&t, instance, &l));
  if (rc) return rc;
  for (i = 0; i < l.n; i++)
    if (cb(ud, l.v[i].key, l.v[i].value, l.v[i].updated_ms)) break;
  kv_list_free(&l);
  return 0;
}
