/*
** records.c -- LMDB provider: the wrapper records (instance, execution, ...) and their MessagePack codec.
*/
#include "lmdb_int.h"

/* {===== wrapper records (MessagePack arrays [format, fields...]) =====} */


void dx__lm_wr_begin(wr_t *w, uint32_t nfields) {
  msgpack_sbuffer_init(&w->sb);
  msgpack_packer_init(&w->pk, &w->sb, msgpack_sbuffer_write);
  w->bad = msgpack_pack_array(&w->pk, nfields + 1);
  w->bad |= msgpack_pack_uint32(&w->pk, LM_RECORD_FORMAT);
}

void dx__lm_wr_int(wr_t *w, int64_t v) { w->bad |= msgpack_pack_int64(&w->pk, v); }
void dx__lm_wr_uint(wr_t *w, uint64_t v) { w->bad |= msgpack_pack_uint64(&w->pk, v); }

void dx__lm_wr_str(wr_t *w, const char *s) {
  size_t n;
  if (!s) { w->bad |= msgpack_pack_nil(&w->pk); return; }
  n = strlen(s);
  w->bad |= msgpack_pack_str(&w->pk, n);
  w->bad |= msgpack_pack_str_body(&w->pk, s, n);
}

void dx__lm_wr_bin(wr_t *w, const void *p, size_t n) {
  w->bad |= msgpack_pack_bin(&w->pk, n);
  w->bad |= msgpack_pack_bin_body(&w->pk, p, n);
}

/* Store the record under k and release the writer. */
int dx__lm_wr_put(tx_t *t, wr_t *w, int db, const dkey_t *k) {
  int rc = w->bad ? dx__lm_nomem(t->err) : dx__lm_db_put(t, db, k, w->sb.data, w->sb.size, 0);
  msgpack_sbuffer_destroy(&w->sb);
  return rc;
}


void dx__lm_rd_open(rd_t *r, const MDB_val *v, uint32_t nfields) {
  size_t off = 0;
  const msgpack_object *o;
  msgpack_unpacked_init(&r->up);
  r->f = NULL;
  r->rc = DX_ECORRUPT;
  if (msgpack_unpack_next(&r->up, v->mv_data, v->mv_size, &off) != MSGPACK_UNPACK_SUCCESS) return;
  o = &r->up.data;
  if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < nfields + 1) return;
  o = o->via.array.ptr;
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER || o->via.u64 != LM_RECORD_FORMAT) return;
  r->f = o;
  r->rc = 0;
}

int64_t dx__lm_rd_int(rd_t *r, uint32_t i) {
  const msgpack_object *o;
  if (r->rc) return 0;
  o = &r->f[i];
  if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
    return (int64_t)o->via.u64;
  if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return o->via.i64;
  r->rc = DX_ECORRUPT;
  return 0;
}

uint64_t dx__lm_rd_uint(rd_t *r, uint32_t i) {
  if (r->rc) return 0;
  if (r->f[i].type == MSGPACK_OBJECT_POSITIVE_INTEGER) return r->f[i].via.u64;
  r->rc = DX_ECORRUPT;
  return 0;
}

/* Owned copy of a str or bin field (NUL-terminated); NULL for nil. */
char *dx__lm_rd_bytes(rd_t *r, uint32_t i, size_t *len) {
  const msgpack_object *o;
  const char *p;
  size_t n;
  char *s;
  if (len) *len = 0;
  if (r->rc) return NULL;
  o = &r->f[i];
  if (o->type == MSGPACK_OBJECT_NIL) return NULL;
  if (o->type == MSGPACK_OBJECT_STR) { p = o->via.str.ptr; n = o->via.str.size; }
  else if (o->type == MSGPACK_OBJECT_BIN) { p = o->via.bin.ptr; n = o->via.bin.size; }
  else { r->rc = DX_ECORRUPT; return NULL; }
  if (!(s = malloc(n + 1))) { r->rc = DX_ENOMEM; return NULL; }
  if (n) memcpy(s, p, n);
  s[n] = 0;
  if (len) *len = n;
  return s;
}

char *dx__lm_rd_str(rd_t *r, uint32_t i) { return dx__lm_rd_bytes(r, i, NULL); }

int dx__lm_rd_close(rd_t *r) {
  msgpack_unpacked_destroy(&r->up);
  return r->rc;
}

/* Turn a decode result into the error reported to the caller. */
int dx__lm_decoded(tx_t *t, int rc, int db, const char *what) {
  if (rc == 0) return 0;
  if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
  return dx__lm_corrupt(t, db, "not a valid record", "%s", what);
}

/* {===== instance and execution records =====} */


void dx__lm_inst_clear(inst_rec_t *r) {
  free(r->name);
  free(r->version);
  free(r->custom_status);
  free(r->parent);
  memset(r, 0, sizeof *r);
}

/* 0, DX_ENOTFOUND (err untouched, *r zeroed) or an error. */
int dx__lm_inst_get(tx_t *t, const char *inst, inst_rec_t *r) {
  dkey_t k;
  MDB_val v;
  rd_t rd;
  char what[LM_INSTANCE_MAX + 16];
  int rc;
  memset(r, 0, sizeof *r);
  key_inst(&k, inst);
  if ((rc = dx__lm_db_get(t, DB_INSTANCES, &k, &v))) return rc;
  dx__lm_rd_open(&rd, &v, IR__END - 1);
  r->name = dx__lm_rd_str(&rd, IR_NAME);
  r->version = dx__lm_rd_str(&rd, IR_VERSION);
  r->current_exec = dx__lm_rd_uint(&rd, IR_EXEC);
  r->custom_status = dx__lm_rd_str(&rd, IR_CS);
  r->cs_version = dx__lm_rd_uint(&rd, IR_CS_VER);
  r->created_at = dx__lm_rd_int(&rd, IR_CREATED);
  r->updated_at = dx__lm_rd_int(&rd, IR_UPDATED);
  r->parent = dx__lm_rd_str(&rd, IR_PARENT);
  r->created_seq = dx__lm_rd_uint(&rd, IR_SEQ);
  if ((rc = dx__lm_rd_close(&rd))) dx__lm_inst_clear(r);
  snprintf(what, sizeof what, "instance '%s'", inst);
  return dx__lm_decoded(t, rc, DB_INSTANCES, what);
}

int dx__lm_inst_put(tx_t *t, const char *inst, const inst_rec_t *r) {
  dkey_t k;
  wr_t w;
  dx__lm_wr_begin(&w, IR__END - 1);
  dx__lm_wr_str(&w, r->name);
  dx__lm_wr_str(&w, r->version);
  dx__lm_wr_uint(&w, r->current_exec);
  dx__lm_wr_str(&w, r->custom_status);
  dx__lm_wr_uint(&w, r->cs_version);
  dx__lm_wr_int(&w, r->created_at);
  dx__lm_wr_int(&w, r->updated_at);
  dx__lm_wr_str(&w, r->parent);
  dx__lm_wr_uint(&w, r->created_seq);
  key_inst(&k, inst);
  return dx__lm_wr_put(t, &w, DB_INSTANCES, &k);
}


void dx__lm_exec_clear(exec_rec_t *r) {
  free(r->output);
  dx_failure_clear(&r->fail);
  memset(r, 0, sizeof *r);
}

int dx__lm_exec_get(tx_t *t, const char *inst, uint64_t exec, exec_rec_t *r) {
  dkey_t k;
  MDB_val v;
  rd_t rd;
  char what[LM_INSTANCE_MAX + 64];
  int rc;
  memset(r, 0, sizeof *r);
  key_exec(&k, inst, exec);
  if ((rc = dx__lm_db_get(t, DB_EXECUTIONS, &k, &v))) return rc;
  dx__lm_rd_open(&rd, &v, ER__END - 1);
  r->status = (int)dx__lm_rd_int(&rd, ER_STATUS);
  r->output = dx__lm_rd_str(&rd, ER_OUTPUT);
  r->fail.category = (int)dx__lm_rd_int(&rd, ER_FCAT);
  r->fail.kind = dx__lm_rd_str(&rd, ER_FKIND);
  r->fail.message = dx__lm_rd_str(&rd, ER_FMSG);
  r->fail.retryable = (int)dx__lm_rd_int(&rd, ER_FRETRY);
  r->started_at = dx__lm_rd_int(&rd, ER_STARTED);
  r->completed_at = dx__lm_rd_int(&rd, ER_COMPLETED);
  if ((rc = dx__lm_rd_close(&rd))) dx__lm_exec_clear(r);
  snprintf(what, sizeof what, "instance '%s' execution %llu", inst, (unsigned long long)exec);
  return dx__lm_decoded(t, rc, DB_EXECUTIONS, what);
}

int dx__lm_exec_put(tx_t *t, const char *inst, uint64_t exec, const exec_rec_t *r) {
  dkey_t k;
  wr_t w;
  dx__lm_wr_begin(&w, ER__END - 1);
  dx__lm_wr_int(&w, r->status);
  dx__lm_wr_str(&w, r->output);
  dx__lm_wr_int(&w, r->fail.category);
  dx__lm_wr_str(&w, r->fail.kind);
  dx__lm_wr_str(&w, r->fail.message);
  dx__lm_wr_int(&w, r->fail.retryable);
  dx__lm_wr_int(&w, r->started_at);
  dx__lm_wr_int(&w, r->completed_at);
  key_exec(&k, inst, exec);
  return dx__lm_wr_put(t, &w, DB_EXECUTIONS, &k);
}
