/*
** records.c -- LMDB provider: the wrapper records (instance, execution, orchestrator message
** and lock state, session, worker row) and their one table-driven MessagePack codec.
**
** A record is a MessagePack array [format, field1, field2, ...] in the order of its schema's
** field table; each entry of the table names the field's type and its offset in the C struct,
** so writing, reading and freeing are one loop each. Strings are str or nil (NULL), byte
** strings are bin. A record with too few fields, a wrong type or a missing required field is
** DX_ECORRUPT naming the store, the DB and the record.
*/
#include <stddef.h>

#include "lmdb_int.h"
#include "mpack.h"

#define F(type, T, member, req) {type, offsetof(T, member), 0, req}
#define FB(T, member, len_member) {RF_BIN, offsetof(T, member), offsetof(T, len_member), 1}
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const lm_field_t inst_fields[] = {
  F(RF_STR, inst_rec_t, name, 0),       F(RF_STR, inst_rec_t, version, 0),
  F(RF_U64, inst_rec_t, current_exec, 0), F(RF_STR, inst_rec_t, custom_status, 0),
  F(RF_U64, inst_rec_t, cs_version, 0), F(RF_I64, inst_rec_t, created_at, 0),
  F(RF_I64, inst_rec_t, updated_at, 0), F(RF_STR, inst_rec_t, parent, 0),
  F(RF_U64, inst_rec_t, created_seq, 0),
};
static const lm_field_t exec_fields[] = {
  F(RF_INT, exec_rec_t, status, 0),        F(RF_STR, exec_rec_t, output, 0),
  F(RF_INT, exec_rec_t, fail.category, 0), F(RF_STR, exec_rec_t, fail.kind, 0),
  F(RF_STR, exec_rec_t, fail.message, 0),  F(RF_INT, exec_rec_t, fail.retryable, 0),
  F(RF_I64, exec_rec_t, started_at, 0),    F(RF_I64, exec_rec_t, completed_at, 0),
};
static const lm_field_t msg_fields[] = {
  F(RF_I64, orch_msg_t, visible_at, 0), F(RF_U64, orch_msg_t, token, 0),
  F(RF_U64, orch_msg_t, attempt, 0),    FB(orch_msg_t, item, item_len),
};
/* a message without its item: for readers that need its place and lock only */
static const lm_field_t msg_head_fields[] = {
  F(RF_I64, orch_msg_t, visible_at, 0), F(RF_U64, orch_msg_t, token, 0),
  F(RF_U64, orch_msg_t, attempt, 0),    {RF_SKIP, 0, 0, 0},
};
static const lm_field_t state_fields[] = {
  F(RF_I64, orch_state_t, ready_at, 0), F(RF_I64, orch_state_t, locked_until, 0),
  F(RF_U64, orch_state_t, token, 0),   F(RF_U64, orch_state_t, locker, 0),
  /* optional (absent in states written before format 4): */
  F(RF_U64, orch_state_t, batch_seq, 0), F(RF_I64, orch_state_t, batch_at, 0),
};
static const lm_field_t sess_fields[] = {
  F(RF_STR, sess_rec_t, owner, 0),        F(RF_STR, sess_rec_t, prev, 0),
  F(RF_I64, sess_rec_t, locked_until, 0), F(RF_I64, sess_rec_t, last_activity, 0),
  /* optional (absent in rows written before fencing): */
  F(RF_U64, sess_rec_t, epoch, 0),        FB(sess_rec_t, users, users_len),
};
/* a session's times and epoch only: for readers that need no owner or users */
static const lm_field_t sess_time_fields[] = {
  {RF_SKIP, 0, 0, 0},                     {RF_SKIP, 0, 0, 0},
  F(RF_I64, sess_rec_t, locked_until, 0), F(RF_I64, sess_rec_t, last_activity, 0),
  F(RF_U64, sess_rec_t, epoch, 0),        {RF_SKIP, 0, 0, 0},
};
static const lm_field_t sev_fields[] = {
  F(RF_I64, sev_rec_t, at, 0),     F(RF_STR, sev_rec_t, event, 1),
  F(RF_STR, sev_rec_t, worker, 1), F(RF_STR, sev_rec_t, detail, 0),
  F(RF_STR, sev_rec_t, prev, 0),
};
static const lm_field_t row_fields[] = {
  F(RF_I64, work_row_t, visible_at, 0), F(RF_I64, work_row_t, locked_until, 0),
  F(RF_U64, work_row_t, token, 0),      F(RF_U64, work_row_t, attempt, 0),
  F(RF_STR, work_row_t, session_id, 0), F(RF_STR, work_row_t, instance, 1),
  F(RF_U64, work_row_t, exec, 0),       F(RF_U64, work_row_t, act_id, 0),
  FB(work_row_t, item, item_len),       F(RF_U64, work_row_t, locker, 0),
  F(RF_U64, work_row_t, sess_epoch, 0), /* optional: absent in rows written before fencing */
  F(RF_STR, work_row_t, tag, 0),        /* optional: absent in rows written before tags */
};
static const lm_field_t wreg_fields[] = {
  F(RF_STR, wreg_rec_t, host, 0),       F(RF_I64, wreg_rec_t, pid, 0),
  F(RF_I64, wreg_rec_t, started_at, 0), F(RF_U64, wreg_rec_t, locker, 0),
};
static const lm_field_t kv_fields[] = {
  F(RF_STR, kv_rec_t, value, 0), F(RF_I64, kv_rec_t, updated_at, 0),
};
#undef F
#undef FB

/* (the masks: bit i for each RF_STR / RF_BIN field i of the table) */
const lm_schema_t dx__lm_inst_schema = {DB_INSTANCES, inst_fields, COUNT(inst_fields), 0, 0x8b};
const lm_schema_t dx__lm_exec_schema = {DB_EXECUTIONS, exec_fields, COUNT(exec_fields), 0, 0x1a};
const lm_schema_t dx__lm_msg_schema = {DB_ORCH_MSGS, msg_fields, COUNT(msg_fields), 0, 0x8};
const lm_schema_t dx__lm_msg_head_schema = {DB_ORCH_MSGS, msg_head_fields,
                                            COUNT(msg_head_fields), 0, 0};
const lm_schema_t dx__lm_state_schema = {DB_ORCH_STATE, state_fields, COUNT(state_fields), 3, 0};
/* A state without a batch (batch_seq 0) is written as format 3 wrote it: the first 4 fields. */
const lm_schema_t dx__lm_state3_schema = {DB_ORCH_STATE, state_fields, 4, 3, 0};
const lm_schema_t dx__lm_sess_schema = {DB_SESSIONS, sess_fields, COUNT(sess_fields), 4, 0x23};
const lm_schema_t dx__lm_sess_time_schema = {DB_SESSIONS, sess_time_fields,
                                             COUNT(sess_time_fields), 4, 0};
const lm_schema_t dx__lm_row_schema = {DB_WORK, row_fields, COUNT(row_fields), 9, 0x930};
const lm_schema_t dx__lm_kv_schema = {DB_KV, kv_fields, COUNT(kv_fields), 0, 0x1};
const lm_schema_t dx__lm_kv_delta_schema = {DB_KV_DELTA, kv_fields, COUNT(kv_fields), 0, 0x1};
const lm_schema_t dx__lm_sev_schema = {DB_SESS_EVENTS, sev_fields, COUNT(sev_fields), 0, 0x1e};
const lm_schema_t dx__lm_wreg_schema = {DB_WORKERS, wreg_fields, COUNT(wreg_fields), 0, 0x1};

#define AT(base, f, T) ((T *)(void *)((char *)(base) + (f)->off))
#define CAT(base, f, T) ((const T *)(const void *)((const char *)(base) + (f)->off))

/* {===== encoding =====} */

/* Each field with mpack.h's writer: b NULL only counts. */
static size_t w_field(unsigned char *b, const lm_field_t *f, const void *rec) {
  switch (f->type) {
    case RF_I64: return dx__mp_int(b, *CAT(rec, f, int64_t));
    case RF_U64: return dx__mp_uint(b, *CAT(rec, f, uint64_t));
    case RF_INT: return dx__mp_int(b, *CAT(rec, f, int));
    case RF_STR: {
      const char *s = *CAT(rec, f, char *);
      return s ? dx__mp_bytes(b, 0, s, strlen(s)) : dx__mp_nil(b);
    }
    case RF_BIN: {
      const char *p = *CAT(rec, f, char *);
      size_t n = *(const size_t *)(const void *)((const char *)rec + f->len_off);
      return dx__mp_bytes(b, 1, p ? p : "", n); /* an optional bin not set: stored empty */
    }
    case RF_SKIP: return 0; /* read-only schemas */
  }
  return 0;
}

/* {===== the writer of rec_put: one pass into a buffer of known room =====}
** The same bytes as w_field writes (lmdb_records_writer_matches_msgpack_c checks it through
** dx__lm_rec_pack), with each field's room checked as it goes instead of a sizing pass first
** (the elements by mpack.h's writers, as w_field). */

/* The record into out[0..room): its length, or 0 when it may not fit (each field asks for its
** widest form: dx__lm_rec_bound's room always does). */
static size_t rec_write(const lm_schema_t *s, const void *rec, unsigned char *out, size_t room) {
  unsigned char *b = out;
  size_t i, k = s->n + 1;
  if (room < 3 + 9) return 0;
  b += dx__mp_container(b, 0, k);
  b += dx__mp_uint(b, LM_RECORD_FORMAT);
  for (i = 0; i < s->n; i++) {
    const lm_field_t *f = &s->f[i];
    size_t left = room - (size_t)(b - out);
    switch (f->type) {
      case RF_I64: case RF_U64: case RF_INT:
        if (left < 9) return 0;
        if (f->type == RF_U64) b += dx__mp_uint(b, *CAT(rec, f, uint64_t));
        else if (f->type == RF_I64) b += dx__mp_int(b, *CAT(rec, f, int64_t));
        else b += dx__mp_int(b, *CAT(rec, f, int));
        break;
      case RF_STR: {
        const char *p = *CAT(rec, f, char *);
        size_t n = p ? strlen(p) : 0;
        if (left < (p ? 5 + n : 1)) return 0;
        b += p ? dx__mp_bytes(b, 0, p, n) : dx__mp_nil(b);
        break;
      }
      case RF_BIN: {
        const char *p = *CAT(rec, f, char *);
        size_t n = *(const size_t *)(const void *)((const char *)rec + f->len_off);
        if (left < 5 || left - 5 < n) return 0;
        b += dx__mp_bytes(b, 1, p ? p : "", n); /* an optional bin not set: stored empty */
        break;
      }
      case RF_SKIP: break; /* read-only schemas */
    }
  }
  return (size_t)(b - out);
}

size_t dx__lm_rec_pack(const lm_schema_t *s, const void *rec, unsigned char *out) {
  size_t n, i, k = s->n + 1;
  n = dx__mp_container(NULL, 0, k);
  n += dx__mp_uint(NULL, LM_RECORD_FORMAT);
  for (i = 0; i < s->n; i++) n += w_field(NULL, &s->f[i], rec);
  /* + 9: rec_write asks room for each field's widest form, at most 9 bytes over what it writes
  ** (n bytes) */
  return out ? rec_write(s, rec, out, n + 9) : n;
}

/* An upper bound of the record's packed size (MessagePack's widest forms). */
size_t dx__lm_rec_bound(const lm_schema_t *s, const void *rec) {
  size_t i, n = 3 + 9;
  for (i = 0; i < s->n; i++) {
    const lm_field_t *f = &s->f[i];
    if (f->type == RF_STR) {
      const char *p = *CAT(rec, f, char *);
      n += p ? strlen(p) + 5 : 1;
    } else if (f->type == RF_BIN) {
      n += *(const size_t *)(const void *)((const char *)rec + f->len_off) + 5;
    } else {
      n += 9;
    }
  }
  return n;
}

int dx__lm_rec_put(tx_t *t, const lm_schema_t *s, const dkey_t *k, const void *rec) {
  unsigned char stack[512], *b = stack;
  size_t n = rec_write(s, rec, stack, sizeof stack); /* the usual case: fits the stack */
  int rc;
  if (!n) {
    size_t room = dx__lm_rec_bound(s, rec);
    if (!(b = malloc(room))) return dx__lm_nomem(t->err);
    if (!(n = rec_write(s, rec, b, room))) { /* the bound always fits: a bug */
      free(b);
      return dx_error_set(t->err, DX_ESTORE, "internal error: a %s record does not fit its bound",
                          dx__lm_db_names[s->db]);
    }
  }
  rc = dx__lm_db_put(t, s->db, k, b, n, 0);
  if (b != stack) free(b);
  return rc;
}

/* {===== decoding =====} */

/* Owned, NUL-terminated copy of a str/bin object; *out NULL for nil when allowed. */
static int copy_bytes(const msgpack_object *o, int bin, char **out, size_t *len) {
  const char *p;
  size_t n;
  if (o->type == MSGPACK_OBJECT_NIL && !bin) return 0;
  if (o->type == MSGPACK_OBJECT_STR && !bin) { p = o->via.str.ptr; n = o->via.str.size; }
  else if (o->type == MSGPACK_OBJECT_BIN && bin) { p = o->via.bin.ptr; n = o->via.bin.size; }
  else return DX_ECORRUPT;
  if (!(*out = malloc(n + 1))) return DX_ENOMEM;
  if (n) memcpy(*out, p, n);
  (*out)[n] = 0;
  if (len) *len = n;
  return 0;
}

static int unpack_field(const msgpack_object *o, const lm_field_t *f, void *rec) {
  int64_t v;
  int rc;
  switch (f->type) {
    case RF_U64:
      if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return DX_ECORRUPT;
      *AT(rec, f, uint64_t) = o->via.u64;
      return 0;
    case RF_I64: case RF_INT:
      if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX)
        v = (int64_t)o->via.u64;
      else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
        v = o->via.i64;
      else
        return DX_ECORRUPT;
      if (f->type == RF_I64) *AT(rec, f, int64_t) = v;
      else if (v < INT_MIN || v > INT_MAX) return DX_ECORRUPT;
      else *AT(rec, f, int) = (int)v;
      return 0;
    case RF_SKIP:
      return o->type == MSGPACK_OBJECT_NIL || o->type == MSGPACK_OBJECT_STR ||
                     o->type == MSGPACK_OBJECT_BIN
                 ? 0
                 : DX_ECORRUPT;
    case RF_STR: case RF_BIN:
      rc = copy_bytes(o, f->type == RF_BIN, AT(rec, f, char *),
                      f->type == RF_BIN ? (size_t *)(void *)((char *)rec + f->len_off) : NULL);
      if (!rc && f->required && !*AT(rec, f, char *)) rc = DX_ECORRUPT;
      return rc;
  }
  return DX_ECORRUPT;
}

void dx__lm_rec_clear(const lm_schema_t *s, void *rec) {
  uint32_t m;
  for (m = s->strs; m; m &= m - 1) { /* the fields that own memory only (every row freed) */
    const lm_field_t *f = &s->f[__builtin_ctz(m)];
    free(*AT(rec, f, char *));
    *AT(rec, f, char *) = NULL;
  }
}

/* {===== the direct reader: records as the writer above makes them =====} */

/* A cursor over the bytes of one record. */
typedef struct {
  const unsigned char *p;
  size_t n, pos;
} rd_t;

static int rd_be(rd_t *r, size_t w, uint64_t *v) {
  const unsigned char *p = r->p + r->pos;
  if (r->n - r->pos < w) return -1;
  switch (w) { /* the widths MessagePack uses, as single loads */
    case 1: *v = p[0]; break;
    case 2: *v = (uint64_t)p[0] << 8 | p[1]; break;
    case 4: *v = (uint64_t)p[0] << 24 | (uint64_t)p[1] << 16 | (uint64_t)p[2] << 8 | p[3]; break;
    case 8: *v = get_u64(p); break;
    default: {
      size_t i;
      for (*v = 0, i = 0; i < w; i++) *v = *v << 8 | p[i];
    }
  }
  r->pos += w;
  return 0;
}

/* An integer: *neg 1 for a negative value (in *i), else the value in *u, as msgpack-c sorts
** them (a signed encoding of a non-negative value counts as positive). */
static int rd_int(rd_t *r, int *neg, uint64_t *u, int64_t *i) {
  unsigned c;
  uint64_t v;
  if (r->pos >= r->n) return -1;
  c = r->p[r->pos++];
  *neg = 0;
  if (c <= 0x7f) { *u = c; return 0; }
  if (c >= 0xe0) { *neg = 1; *i = (int64_t)(int8_t)c; return 0; }
  if (c >= 0xcc && c <= 0xcf) return rd_be(r, (size_t)1 << (c - 0xcc), u);
  if (c >= 0xd0 && c <= 0xd3) {
    size_t w = (size_t)1 << (c - 0xd0);
    int64_t sv;
    if (rd_be(r, w, &v)) return -1;
    sv = w == 8 ? (int64_t)v : (int64_t)(v ^ (1ull << (8 * w - 1))) - (int64_t)(1ull << (8 * w - 1));
    if (sv < 0) { *neg = 1; *i = sv; }
    else *u = (uint64_t)sv;
    return 0;
  }
  return -1;
}

/* A str (bin = 0) or bin (bin = 1), or nil (*p NULL; only for str). */
static int rd_bytes(rd_t *r, int bin, const char **p, size_t *len) {
  unsigned c;
  uint64_t n;
  if (r->pos >= r->n) return -1;
  c = r->p[r->pos++];
  *p = NULL;
  if (c == 0xc0 && !bin) return 0;
  if (!bin && c >= 0xa0 && c <= 0xbf) n = c & 0x1f;
  else if (!bin && c >= 0xd9 && c <= 0xdb) { if (rd_be(r, (size_t)1 << (c - 0xd9), &n)) return -1; }
  else if (bin && c >= 0xc4 && c <= 0xc6) { if (rd_be(r, (size_t)1 << (c - 0xc4), &n)) return -1; }
  else return -1;
  if (n > r->n - r->pos) return -1;
  *p = (const char *)r->p + r->pos;
  *len = (size_t)n;
  r->pos += (size_t)n;
  return 0;
}

/* Decode the record the common way it is stored: every element one the schema expects, no
** unknown trailing fields, no bytes after it. 0 done; DX_ENOMEM; 1 when the bytes are anything
** else (rec untouched then): the general decoder below decides, with its own messages. */
static int direct_decode(const lm_schema_t *s, const MDB_val *v, void *rec) {
  rd_t r = {v->mv_data, v->mv_size, 0};
  uint64_t have, u;
  int64_t i64;
  size_t i, len = 0;
  int neg;
  unsigned c;
  const char *p;
  void *tmp[16];
  size_t tlen[16];
  int64_t ival[16]; /* integer fields (a U64's bits as they are) */
  if (s->n > 16 || r.n == 0) return 1;
  c = r.p[r.pos++];
  if (c >= 0x90 && c <= 0x9f) have = c & 0x0f;
  else if (c == 0xdc) { if (rd_be(&r, 2, &have)) return 1; }
  else return 1;
  if (have < (s->n_min ? s->n_min : s->n) + 1 || have > s->n + 1) return 1;
  if (rd_int(&r, &neg, &u, &i64) || neg || u != LM_RECORD_FORMAT) return 1;
  /* first pass: read and check every field without writing (so a fallback finds rec
  ** untouched); the second only stores what the first read */
  for (i = 0; i + 1 < have; i++) {
    const lm_field_t *f = &s->f[i];
    tmp[i] = NULL;
    switch (f->type) {
      case RF_U64:
        if (rd_int(&r, &neg, &u, &i64) || neg) return 1;
        ival[i] = (int64_t)u;
        break;
      case RF_I64: case RF_INT:
        if (rd_int(&r, &neg, &u, &i64) || (!neg && u > INT64_MAX)) return 1;
        if (!neg) i64 = (int64_t)u;
        if (f->type == RF_INT && (i64 < INT_MIN || i64 > INT_MAX)) return 1;
        ival[i] = i64;
        break;
      case RF_STR: case RF_BIN:
        if (rd_bytes(&r, f->type == RF_BIN, &p, &len) || (f->required && !p)) return 1;
        tmp[i] = (void *)p;
        tlen[i] = len;
        break;
      case RF_SKIP: { /* a str or nil, else a bin */
        size_t at = r.pos;
        if (rd_bytes(&r, 0, &p, &len) && (r.pos = at, rd_bytes(&r, 1, &p, &len))) return 1;
        break;
      }
    }
  }
  if (r.pos != r.n) return 1; /* trailing bytes */
  /* second pass: the values */
  for (i = 0; i + 1 < have; i++) {
    const lm_field_t *f = &s->f[i];
    if (f->type == RF_SKIP) continue;
    if (f->type == RF_STR || f->type == RF_BIN) {
      char *cp = NULL;
      if (tmp[i] && !(cp = malloc(tlen[i] + 1))) {
        size_t j;
        for (j = 0; j < i; j++)
          if (s->f[j].type == RF_STR || s->f[j].type == RF_BIN) {
            free(*AT(rec, &s->f[j], char *));
            *AT(rec, &s->f[j], char *) = NULL;
          }
        return DX_ENOMEM;
      }
      if (cp) {
        if (tlen[i]) memcpy(cp, tmp[i], tlen[i]);
        cp[tlen[i]] = 0;
      }
      *AT(rec, f, char *) = cp;
      if (f->type == RF_BIN) *(size_t *)(void *)((char *)rec + f->len_off) = tlen[i];
      continue;
    }
    if (f->type == RF_U64) *AT(rec, f, uint64_t) = (uint64_t)ival[i];
    else if (f->type == RF_I64) *AT(rec, f, int64_t) = ival[i];
    else *AT(rec, f, int) = (int)ival[i];
  }
  return 0;
}

int dx__lm_rec_decode_direct(const lm_schema_t *s, const MDB_val *v, void *rec) {
  return direct_decode(s, v, rec);
}

/* The orchestrator queue reads every message of a turn (fetch and ack): its 4 fields read in
** place, the same checks as direct_decode's (msg_fields: format, i64, u64, u64, bin). */
int dx__lm_msg_decode_direct(const MDB_val *v, orch_msg_t *m, int heads) {
  rd_t r = {v->mv_data, v->mv_size, 1};
  uint64_t u, token, attempt;
  int64_t i, at;
  int neg;
  const char *p;
  size_t len;
  if (r.n < 1 || r.p[0] != 0x95 || rd_int(&r, &neg, &u, &i) || neg || u != LM_RECORD_FORMAT)
    return 1;
  if (rd_int(&r, &neg, &u, &i) || (!neg && u > INT64_MAX)) return 1;
  at = neg ? i : (int64_t)u;
  if (rd_int(&r, &neg, &token, &i) || neg || rd_int(&r, &neg, &attempt, &i) || neg) return 1;
  /* (a head's item may be a str or nil too: direct_decode takes those) */
  if (rd_bytes(&r, 1, &p, &len) || r.pos != r.n) return 1;
  if (!heads) {
    if (!(m->item = malloc(len + 1))) return DX_ENOMEM;
    if (len) memcpy(m->item, p, len);
    m->item[len] = 0;
    m->item_len = len;
  }
  m->visible_at = at;
  m->token = token;
  m->attempt = attempt;
  return 0;
}

/* Decode `v` into the schema's fields of `rec` (other members untouched). On failure the
** fields are freed and the error names the record as `what`. */
int dx__lm_rec_decode(tx_t *t, const lm_schema_t *s, const MDB_val *v, void *rec,
                      const char *what) {
  int rc = direct_decode(s, v, rec);
  if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
  return rc == 0 ? 0 : dx__lm_rec_decode_general(t, s, v, rec, what);
}

int dx__lm_rec_decode_general(tx_t *t, const lm_schema_t *s, const MDB_val *v, void *rec,
                              const char *what) {
  msgpack_unpacked up;
  const msgpack_object *o;
  size_t off = 0, i;
  int rc = DX_ECORRUPT;
  dx_error_t derr;
  msgpack_unpacked_init(&up);
  /* the framing check bounds every length by the bytes present before msgpack-c allocates */
  if (dx__msgpack_check(v->mv_data, v->mv_size, "record", &derr) == 0 &&
      msgpack_unpack_next(&up, v->mv_data, v->mv_size, &off) == MSGPACK_UNPACK_SUCCESS) {
    o = &up.data;
    size_t have = o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.size : 0;
    if (have >= (s->n_min ? s->n_min : s->n) + 1 &&
        o->via.array.ptr[0].type == MSGPACK_OBJECT_POSITIVE_INTEGER &&
        o->via.array.ptr[0].via.u64 == LM_RECORD_FORMAT) {
      o = o->via.array.ptr + 1;
      for (rc = 0, i = 0; i < s->n && i + 1 < have && !rc; i++)
        rc = unpack_field(&o[i], &s->f[i], rec);
    }
  }
  msgpack_unpacked_destroy(&up);
  if (rc == 0) return 0;
  dx__lm_rec_clear(s, rec);
  if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
  return dx__lm_corrupt(t, s->db, "not a valid record", "%s", what);
}

/* 0, DX_ENOTFOUND (err untouched) or an error. */
int dx__lm_rec_get(tx_t *t, const lm_schema_t *s, const dkey_t *k, void *rec, const char *what) {
  MDB_val v;
  int rc = dx__lm_db_get(t, s->db, k, &v);
  return rc ? rc : dx__lm_rec_decode(t, s, &v, rec, what);
}

/* The hot readers name their record only when it fails to decode: no snprintf per read. */
int dx__lm_rec_decode_as(tx_t *t, const lm_schema_t *s, const MDB_val *v, void *rec,
                         const lm_what_t *w) {
  char what[LM_KEY_MAX + 64];
  int rc = direct_decode(s, v, rec);
  if (rc == DX_ENOMEM) return dx__lm_nomem(t->err);
  if (rc == 0) return 0;
  if (w->s) snprintf(what, sizeof what, w->fmt, w->s, w->n);
  else snprintf(what, sizeof what, w->fmt, w->n);
  return dx__lm_rec_decode_general(t, s, v, rec, what);
}

int dx__lm_rec_get_as(tx_t *t, const lm_schema_t *s, const dkey_t *k, void *rec,
                      const lm_what_t *w) {
  MDB_val v;
  int rc = dx__lm_db_get(t, s->db, k, &v);
  return rc ? rc : dx__lm_rec_decode_as(t, s, &v, rec, w);
}

/* {===== instance and execution records =====} */

void dx__lm_inst_clear(inst_rec_t *r) {
  dx__lm_rec_clear(&dx__lm_inst_schema, r);
  memset(r, 0, sizeof *r);
}

/* {===== instance records kept by the batches =====}
** With held rounds the batches fetch and ack the same instances over and over: the pick's
** capabilities check, the fetch and every ack read an instance's record, every ack writes it.
** The batches' direct methods keep the last record they read or wrote (or that there is none)
** in se->ik and answer later reads from it instead of a B-tree lookup and a decode. A record a
** direct method wrote may still be unwritten (e->dirty): dx__lm_pend_flush writes it before
** any other method of the batch runs, and at commit. Only the batch thread fills and reads it,
** in the batch txn, which no other writer can change: its direct methods, and the flush, which
** keeps the lock states it writes (dx__lm_state_keep). Every other writing method of a batch
** may write or undo records: it is dropped before one runs (txn.c dx__lm_tx_begin; readers
** cannot change them). A batch that wrote anything in its own txn commits a txn with its own
** id, an empty one leaves the id to the next writer (LMDB skips empty commits); the next batch
** keeps the table only when its txn has the id that follows (mdb_txn_id): no writer of this or
** any other process committed in between, and that commit did not fail (a failed one leaves
** its id to the next writer: env.c commit_seen drops the table). A rollback drops it. */

#define LM_IK_SLOTS 2048u /* in pairs: an instance may take either slot of its pair */
#define LM_TAIL_MAX 4096u /* text bytes of a kept record or event: larger ones are not kept */

static size_t len_or_0(const char *s) { return s ? strlen(s) : 0; }

typedef struct lm_ik_s {
  char *inst;     /* NULL: empty slot */
  int rec_known;  /* r / present hold the instance record */
  int present;    /* 0: no record stored */
  inst_rec_t r;
  int tail_known; /* execution tail_exec's history ends at event tail_n (tail: it; zeroed
                     when tail_n is 0) */
  uint64_t tail_exec, tail_n;
  dx_event_t tail;
  int tail_lent;  /* tail was handed out (dx__lm_tail_take): the end is known, not the event */
  int st_known;   /* st is the instance's stored lock state (orch.c) */
  orch_state_t st;
  int ex_known;   /* ex is execution ex_id's stored record ("execution records kept") */
  uint64_t ex_id;
  exec_rec_t ex;
  int dirty;      /* IK_REC: r is newer than the stored record (rec_known); IK_HIST: hrun
                     holds events: the batch writes them */
  lm_hrun_t hrun;
} lm_ik_t;

enum { IK_REC = 1, IK_HIST = 2 };

static void ik_clear(shared_env_t *se, lm_ik_t *e) {
  if (!e->inst) return;
  free(e->inst);
  dx__lm_inst_clear(&e->r);
  dx__lm_exec_clear(&e->ex);
  dx_event_clear(&e->tail);
  free(e->hrun.b);
  memset(e, 0, sizeof *e);
  se->ik_live--;
}

static void rk_drop(shared_env_t *se);

void dx__lm_inst_keep_drop(shared_env_t *se) {
  size_t i;
  for (i = 0; se->ik_live && i < LM_IK_SLOTS; i++) ik_clear(se, &se->ik[i]);
  rk_drop(se);
  se->ik_txn = 0;
  se->ik_dirty_n = 0; /* written by the flush before, or lost with the batch */
}

/* The batch (txn txn_id) is about to commit, holding the store's write lock: the next write
** txn is txn_id + 1 after a commit that writes. One the batch cannot tell wrote (ik_wrote 0:
** it may be empty, or hold writes of nested txns) expects txn_id again: were it not empty, or
** did another writer take txn_id, the next id differs and the table goes. */
void dx__lm_inst_keep_commit(shared_env_t *se, size_t txn_id) {
  if (se->ik_nested && !se->ik_wrote) /* were the nested writes lost, the id stays: unclear */
    dx__lm_inst_keep_drop(se);
  else
    se->ik_txn = txn_id + (se->ik_wrote ? 1 : 0);
  se->ik_wrote = se->ik_nested = 0;
}

/* A batch began with txn txn_id (holding the write lock). */
void dx__lm_inst_keep_begin(shared_env_t *se, size_t txn_id) {
  if (!se->ik_txn || txn_id != se->ik_txn || se->ik_committing) dx__lm_inst_keep_drop(se);
  se->ik_committing = 0;
  se->ik_txn = 0;
  se->ik_wrote = se->ik_nested = 0;
}

/* The index of inst's first slot; its pair is at, at ^ 1 (two instances whose ids land on one
** slot, as a few of a few hundred do, both keep theirs) */
static size_t ik_slot(const char *inst) { return dx__lm_str_hash(inst) & (LM_IK_SLOTS - 1); }

static lm_ik_t *ik_lookup(shared_env_t *se, const char *inst) {
  size_t at;
  lm_ik_t *e;
  if (!se->ik_live) return NULL;
  e = &se->ik[se->ik_last]; /* (no hash for the instance asked for just before) */
  if (e->inst && strcmp(e->inst, inst) == 0) return e;
  at = ik_slot(inst);
  if (!((e = &se->ik[at])->inst && strcmp(e->inst, inst) == 0) &&
      !((e = &se->ik[at ^= 1])->inst && strcmp(e->inst, inst) == 0))
    return NULL;
  se->ik_last = at;
  return e;
}

/* inst's entry in a direct method, or NULL. */
static lm_ik_t *ik_find(tx_t *t, const char *inst) {
  return t->direct ? ik_lookup(t->se, inst) : NULL;
}

/* inst's entry, made (in a free slot of its pair, else replacing one's) when missing; NULL
** outside a direct method, out of memory, or when both slots hold other instances' unwritten
** records (they keep their slots: the caller writes at once). */
static lm_ik_t *ik_make(shared_env_t *se, const char *inst);
static lm_ik_t *ik_entry(tx_t *t, const char *inst) {
  return t->direct ? ik_make(t->se, inst) : NULL;
}

/* (ik_entry for any writer in the batch txn) */
static lm_ik_t *ik_make(shared_env_t *se, const char *inst) {
  lm_ik_t *e;
  size_t at;
  if ((e = ik_lookup(se, inst))) return e;
  if (!se->ik && !(se->ik = calloc(LM_IK_SLOTS, sizeof *se->ik))) return NULL;
  at = ik_slot(inst);
  e = &se->ik[at];
  if (e->inst && (!se->ik[at ^ 1].inst || e->dirty)) e = &se->ik[at ^ 1];
  if (e->dirty) return NULL; /* another instance's unwritten record keeps its slot */
  ik_clear(se, e);
  if (!(e->inst = dx__strdup(inst))) return NULL;
  se->ik_live++;
  se->ik_last = (size_t)(e - se->ik);
  return e;
}

/* *dst = a copy of src (strings duplicated); 0 or DX_ENOMEM with *dst cleared. */
static int inst_copy(inst_rec_t *dst, const inst_rec_t *src) {
  *dst = *src;
  dst->name = dst->version = dst->custom_status = dst->parent = NULL;
  if ((src->name && !(dst->name = dx__strdup(src->name))) ||
      (src->version && !(dst->version = dx__strdup(src->version))) ||
      (src->custom_status && !(dst->custom_status = dx__strdup(src->custom_status))) ||
      (src->parent && !(dst->parent = dx__strdup(src->parent)))) {
    dx__lm_inst_clear(dst);
    return DX_ENOMEM;
  }
  return 0;
}

/* *dst = a copy of src, taking *old instead when it is the same text (*old then NULL).
** DX_ENOMEM leaves *dst NULL. */
static int keep_str(char **dst, char **old, const char *src) {
  if (!src) {
    *dst = NULL;
    return 0;
  }
  if (*old && strcmp(*old, src) == 0) {
    *dst = *old;
    *old = NULL;
    return 0;
  }
  return (*dst = dx__strdup(src)) ? 0 : DX_ENOMEM;
}

/* Keep what the batch now knows of `inst`'s record (r NULL: none stored). Out of memory
** keeps nothing: the next read goes to the store. */
static void ik_keep(tx_t *t, const char *inst, const inst_rec_t *r) {
  lm_ik_t *e = ik_entry(t, inst);
  inst_rec_t was;
  if (!e) return;
  if (r && len_or_0(r->custom_status) > LM_TAIL_MAX) { /* kept small: read it again */
    dx__lm_inst_clear(&e->r);
    e->rec_known = 0;
    return;
  }
  was = e->r; /* an ack rewrites the record it read: its strings are mostly the same */
  e->r.name = e->r.version = e->r.custom_status = e->r.parent = NULL;
  e->rec_known = !r || !(keep_str(&e->r.name, &was.name, r->name) ||
                         keep_str(&e->r.version, &was.version, r->version) ||
                         keep_str(&e->r.custom_status, &was.custom_status, r->custom_status) ||
                         keep_str(&e->r.parent, &was.parent, r->parent));
  if (r) {
    inst_rec_t strs = e->r;
    e->r = *r;
    e->r.name = strs.name;
    e->r.version = strs.version;
    e->r.custom_status = strs.custom_status;
    e->r.parent = strs.parent;
  }
  dx__lm_inst_clear(&was); /* what keep_str did not take over */
  if (!r || !e->rec_known) dx__lm_inst_clear(&e->r);
  e->present = r != NULL;
}

/* {===== history tails kept by the batches =====}
** The same entries keep where an execution's history ends (history.c): the fetch of a cached
** orchestration asks whether the history still ends at the cache's last event and hands that
** event out, an ack checks that its new events' ids are unused and appends after the end. */

/* 1 with the end (*n, *last: event *n, borrowed, zeroed when *n is 0 or it was handed out)
** when known, else 0. */
int dx__lm_tail_get(tx_t *t, const char *inst, uint64_t exec, uint64_t *n,
                    const dx_event_t **last) {
  lm_ik_t *e = ik_find(t, inst);
  if (!e || !e->tail_known || e->tail_exec != exec) return 0;
  *n = e->tail_n;
  *last = &e->tail;
  return 1;
}

/* The table holds up to LM_IK_SLOTS last events: a large one (a big activity result) is not
** kept, so it stays small; its instance's next fetch and ack seek as before. */
static int tail_small(const dx_event_t *e) {
  return len_or_0(e->data) + len_or_0(e->fail.message) + len_or_0(e->fail.kind) +
             len_or_0(e->name) + len_or_0(e->version) + len_or_0(e->instance) +
             len_or_0(e->session_id) + len_or_0(e->reason) + len_or_0(e->custom_status) +
             len_or_0(e->worker_id) + len_or_0(e->tag) <= LM_TAIL_MAX;
}

/* Execution exec's history now ends at `last` (NULL: it is empty). */
void dx__lm_tail_keep(tx_t *t, const char *inst, uint64_t exec, const dx_event_t *last) {
  lm_ik_t *e = ik_entry(t, inst);
  if (!e) return;
  dx_event_clear(&e->tail);
  memset(&e->tail, 0, sizeof e->tail);
  e->tail_known = e->tail_lent = 0;
  if (last && (!tail_small(last) || dx_event_copy(&e->tail, last))) return;
  e->tail_known = 1;
  e->tail_exec = exec;
  e->tail_n = last ? last->event_id : 0;
}

/* Hand the kept last event of inst's history out (moved into *out, caller-owned): 1, or 0
** when it is not kept (or was handed out already). The end stays known. */
int dx__lm_tail_take(tx_t *t, const char *inst, dx_event_t *out) {
  lm_ik_t *e = ik_find(t, inst);
  if (!e || !e->tail_known || e->tail_lent || e->tail_n == 0) return 0;
  *out = e->tail;
  memset(&e->tail, 0, sizeof e->tail);
  e->tail_lent = 1;
  return 1;
}

/* Nothing known of inst's history end any more. */
void dx__lm_tail_forget(tx_t *t, const char *inst) {
  lm_ik_t *e = ik_find(t, inst);
  if (e) e->tail_known = 0;
}

/* {===== worker rows kept by the batches =====}
** A row is written and read back in the next step of its life, usually by the same or the
** next batch: queued (an orchestration ack, or the batch's commit writing the rows it kept
** queued), then read by the fetch that locks it; locked, then read by the ack of its activity
** to delete it. The batch thread keeps the row it wrote here (its strings moved, not copied)
** and the next read in a direct method takes it back instead of a B-tree read and a decode.
** Kept and dropped with the instance table above (same batches, same commits, same txn id
** rule); every row write of the batch forgets the row first (work.c row_set), so an entry is
** always the stored row. Rows with a large item are not kept. */

#define LM_RK_SLOTS 2048u        /* a burst of queued rows is fetched oldest first */
#define LM_RK_ITEM_MAX 2048u     /* larger items are not kept */
#define LM_RK_BYTES (1u << 20)   /* nor more item bytes than this in all */

static void rk_clear(shared_env_t *se, work_row_t *e) {
  se->rk_bytes -= e->item_len;
  se->rk_live--;
  dx__lm_row_clear(e);
}

static void rk_drop(shared_env_t *se) {
  size_t i;
  for (i = 0; se->rk_live && i < LM_RK_SLOTS; i++)
    if (se->rk[i].seq) rk_clear(se, &se->rk[i]);
}

void dx__lm_row_keep(tx_t *t, work_row_t *r) {
  shared_env_t *se = t->se;
  work_row_t *e;
  if (!dx__lm_in_batch_txn(t) || !r->seq || r->item_len > LM_RK_ITEM_MAX ||
      dx__lm_srow_held(se, r->seq) || /* kept in the batch (srows.c): not written */
      (!se->rk && !(se->rk = calloc(LM_RK_SLOTS, sizeof *se->rk)))) {
    dx__lm_row_clear(r);
    return;
  }
  e = &se->rk[r->seq & (LM_RK_SLOTS - 1)];
  if (e->seq) rk_clear(se, e);
  if (se->rk_bytes + r->item_len > LM_RK_BYTES) {
    dx__lm_row_clear(r);
    return;
  }
  *e = *r;
  memset(r, 0, sizeof *r);
  se->rk_live++;
  se->rk_bytes += e->item_len;
}

int dx__lm_row_kept_take(tx_t *t, uint64_t seq, work_row_t *r) {
  shared_env_t *se = t->se;
  work_row_t *e;
  if (!t->direct || !se->rk_live) return 0;
  e = &se->rk[seq & (LM_RK_SLOTS - 1)];
  if (!seq || e->seq != seq) return 0;
  *r = *e;
  memset(e, 0, sizeof *e);
  se->rk_live--;
  se->rk_bytes -= r->item_len;
  return 1;
}

/* Only the batch thread's writes in the batch txn itself look: nested writers drop the whole
** table first, and other threads' top-level writes commit a txn id the next batch does not
** expect. */
void dx__lm_row_kept_forget(tx_t *t, uint64_t seq) {
  shared_env_t *se = t->se;
  work_row_t *e;
  if (!se->rk_live || !dx__lm_in_batch_txn(t)) return;
  e = &se->rk[seq & (LM_RK_SLOTS - 1)];
  if (e->seq == seq) rk_clear(se, e);
}

/* {===== lock states kept by the batches =====}
** The same entries keep an instance's stored lock state (orch.c): a fetch locks an instance
** and the ack of its turn, in the same batch with held rounds, checks the lock; the ack
** releases it and the next fetch or an activity's result reads it again. */

/* 1 with *s the stored state of inst when kept, else 0. */
int dx__lm_state_kept(tx_t *t, const char *inst, orch_state_t *s) {
  lm_ik_t *e = ik_find(t, inst);
  if (!e || !e->st_known) return 0;
  *s = e->st;
  return 1;
}

/* inst's stored state is now *s (NULL: unknown). Writes in the batch's txn tell: its direct
** methods' and the flush of what they kept in memory (orch.c rpend: the locks a batch's
** fetches took and the instances its acks made ready, which the next batch's acks and
** fetches read); a failed flush spoils the batch, whose end drops the table. Other txns
** (nested ones drop the table first, other threads' never touch it) leave it alone. */
void dx__lm_state_keep(tx_t *t, const char *inst, const orch_state_t *s) {
  lm_ik_t *e;
  if (!dx__lm_in_batch_txn(t)) return;
  if (!(e = s ? ik_make(t->se, inst) : ik_lookup(t->se, inst))) return;
  e->st_known = s != NULL;
  if (e->st_known) e->st = *s;
}

/* 1 when the batches keep inst's record as stored (so an ack does not create it), else 0. */
int dx__lm_inst_kept(tx_t *t, const char *inst) {
  lm_ik_t *e = ik_find(t, inst);
  return e && e->rec_known && e->present;
}

/* 0, DX_ENOTFOUND (err untouched, *r zeroed) or an error. */
int dx__lm_inst_get(tx_t *t, const char *inst, inst_rec_t *r) {
  dkey_t k;
  lm_what_t w = {"instance '%s'", inst, 0};
  int rc;
  lm_ik_t *e = ik_find(t, inst);
  memset(r, 0, sizeof *r);
  if (e && e->rec_known) {
    if (!e->present) return DX_ENOTFOUND;
    return inst_copy(r, &e->r) ? dx__lm_nomem(t->err) : 0;
  }
  key_inst(&k, inst);
  rc = dx__lm_rec_get_as(t, &dx__lm_inst_schema, &k, r, &w);
  if (rc == 0 || rc == DX_ENOTFOUND) ik_keep(t, inst, rc == 0 ? r : NULL);
  return rc;
}

/* Entry e's record is to be written by the batch: 1, or 0 when it cannot be noted (write it
** now). A change in memory cannot be undone: a failure after it spoils the batch. */
static int ik_mark(shared_env_t *se, lm_ik_t *e, int what) {
  uint32_t *nv;
  if (!e->dirty) {
    if (!(nv = dx__lm_grow(se->ik_dirty, &se->ik_dirty_cap, se->ik_dirty_n, sizeof *nv)))
      return 0;
    se->ik_dirty = nv;
    nv[se->ik_dirty_n++] = (uint32_t)(e - se->ik);
  }
  e->dirty |= what;
  se->batch_writes++;
  return 1;
}

/* In a batch's direct method the record is kept (ik) and written once, when the batch writes
** what it kept (dx__lm_pend_flush: before any nested method looks, and at commit): with held
** rounds every turn of an instance rewrote it in the same transaction. */
int dx__lm_inst_put(tx_t *t, const char *inst, const inst_rec_t *r) {
  dkey_t k;
  lm_ik_t *e;
  int rc;
  if (t->direct) {
    ik_keep(t, inst, r);
    if ((e = ik_find(t, inst)) && e->rec_known && ik_mark(t->se, e, IK_REC)) return 0;
    if (e) e->dirty &= ~IK_REC; /* not kept (too large, out of memory): written now */
  }
  key_inst(&k, inst);
  rc = dx__lm_rec_put(t, &dx__lm_inst_schema, &k, r);
  if (rc && (e = ik_find(t, inst))) e->rec_known = 0; /* unknown now */
  return rc;
}

int dx__lm_inst_touch(tx_t *t, const char *inst, uint64_t exec, int64_t now, uint64_t *was,
                      int64_t *created_at, uint64_t *created_seq) {
  lm_ik_t *e = ik_find(t, inst);
  if (!e || !e->rec_known || !e->present || !ik_mark(t->se, e, IK_REC)) return 0;
  *was = e->r.current_exec;
  if (exec > e->r.current_exec) e->r.current_exec = exec;
  e->r.updated_at = now;
  *created_at = e->r.created_at;
  *created_seq = e->r.created_seq;
  return 1;
}

int dx__lm_inst_keep_write(tx_t *t) {
  shared_env_t *se = t->se;
  size_t i;
  int rc = 0;
  for (i = 0; i < se->ik_dirty_n && !rc; i++) {
    lm_ik_t *e = &se->ik[se->ik_dirty[i]];
    dkey_t k;
    if (!e->inst) continue;
    if (e->dirty & IK_HIST) rc = dx__lm_hrun_write(t, e->inst, &e->hrun);
    if (!rc && (e->dirty & IK_REC)) {
      key_inst(&k, e->inst);
      rc = dx__lm_rec_put(t, &dx__lm_inst_schema, &k, &e->r);
    }
    e->dirty = 0;
  }
  se->ik_dirty_n = 0;
  return rc;
}

lm_hrun_t *dx__lm_hrun_of(tx_t *t, const char *inst, int make) {
  lm_ik_t *e = make ? ik_entry(t, inst) : ik_find(t, inst);
  return e ? &e->hrun : NULL;
}

int dx__lm_hrun_mark(tx_t *t, const char *inst) {
  lm_ik_t *e = ik_find(t, inst);
  return e && ik_mark(t->se, e, IK_HIST) ? 0 : dx__lm_nomem(t->err);
}

void dx__lm_exec_clear(exec_rec_t *r) {
  dx__lm_rec_clear(&dx__lm_exec_schema, r);
  memset(r, 0, sizeof *r);
}

/* {===== execution records kept by the batches =====}
** The same entries keep the execution record an ack wrote or read last: the instance's next
** turn that ends its execution (an ack in a later batch, with held rounds the same one)
** rewrites it and reads it first. Only acks write execution records in direct methods; the
** management methods that change them (terminate, prune, delete) are nested and drop the
** table. Records with long texts (an output, a failure) are not kept. */

static int exec_copy(exec_rec_t *dst, const exec_rec_t *src) {
  *dst = *src;
  dst->output = NULL;
  dst->fail.kind = dst->fail.message = NULL;
  if ((src->output && !(dst->output = dx__strdup(src->output))) ||
      dx_failure_copy(&dst->fail, &src->fail)) {
    dx__lm_exec_clear(dst);
    return DX_ENOMEM;
  }
  return 0;
}

/* Execution exec of inst is now *r (NULL: unknown). */
static void exec_keep(tx_t *t, const char *inst, uint64_t exec, const exec_rec_t *r) {
  lm_ik_t *e = r ? ik_entry(t, inst) : ik_find(t, inst);
  if (!e) return;
  dx__lm_exec_clear(&e->ex);
  e->ex_known = r && len_or_0(r->output) + len_or_0(r->fail.kind) +
                             len_or_0(r->fail.message) <= LM_TAIL_MAX &&
                exec_copy(&e->ex, r) == 0;
  e->ex_id = exec;
}

int dx__lm_exec_get(tx_t *t, const char *inst, uint64_t exec, exec_rec_t *r) {
  dkey_t k;
  lm_what_t w = {"instance '%s' execution %llu", inst, exec};
  lm_ik_t *e = ik_find(t, inst);
  int rc;
  memset(r, 0, sizeof *r);
  if (e && e->ex_known && e->ex_id == exec)
    return exec_copy(r, &e->ex) ? dx__lm_nomem(t->err) : 0;
  key_exec(&k, inst, exec);
  rc = dx__lm_rec_get_as(t, &dx__lm_exec_schema, &k, r, &w);
  if (rc == 0) exec_keep(t, inst, exec, r);
  return rc;
}

int dx__lm_exec_put(tx_t *t, const char *inst, uint64_t exec, const exec_rec_t *r) {
  dkey_t k;
  int rc;
  key_exec(&k, inst, exec);
  rc = dx__lm_rec_put(t, &dx__lm_exec_schema, &k, r);
  exec_keep(t, inst, exec, rc ? NULL : r);
  return rc;
}
