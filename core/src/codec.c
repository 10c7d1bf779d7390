/*
** codec.c -- MessagePack records for history events and work items.
**
** A record is one map: "v" (format version) first, then only the fields that are present
** (non-NULL strings, non-zero numbers). Both record types and the failure submap are
** described by field tables (key, type, offsetof), so writing and reading are one generic
** loop each. Decoding is strict -- wrong types, unknown kinds, duplicates, truncation and
** trailing bytes are DX_ECORRUPT naming the problem -- except that unknown keys are skipped,
** so an older reader can open records written by a newer one of the same format version.
** A decoded record's strings are copied into one block, the record's arena (codec.h).
*/
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "codec.h"

#define FORMAT_VERSION 1

typedef enum { FT_KIND, FT_STR, FT_U64, FT_I64, FT_INT, FT_BOOL, FT_FAIL } field_type_t;

typedef struct {
  const char *key;
  field_type_t type;
  size_t off;
  size_t key_len; /* strlen(key), known at compile time (every record packs and matches keys) */
} field_t;

typedef struct {
  const char *what;     /* "event record", for messages */
  const field_t *fields;
  size_t n;
  int kind_limit;       /* valid kinds are 1 .. kind_limit-1 */
  size_t arena_off;     /* top-level records: offset of their `arena` member */
} schema_t;

#define EV(key, type, member) {key, type, offsetof(dx_event_t, member), sizeof key - 1}
static const field_t event_fields[] = {
  EV("k", FT_KIND, kind),         EV("id", FT_U64, event_id),
  EV("src", FT_U64, source_id),   EV("ts", FT_I64, timestamp_ms),
  EV("n", FT_STR, name),          EV("ver", FT_STR, version),
  EV("d", FT_STR, data),          EV("i", FT_STR, instance),
  EV("s", FT_STR, session_id),    EV("r", FT_STR, reason),
  EV("pid", FT_U64, parent_id),   EV("pex", FT_U64, parent_execution_id),
  EV("fa", FT_I64, fire_at_ms),   EV("f", FT_FAIL, fail),
  EV("cs", FT_STR, custom_status),
  EV("w", FT_STR, worker_id),
  EV("tg", FT_STR, tag),
};
#undef EV

#define WI(key, type, member) {key, type, offsetof(dx_work_item_t, member), sizeof key - 1}
static const field_t work_fields[] = {
  WI("k", FT_KIND, kind),         WI("i", FT_STR, instance),
  WI("ex", FT_U64, execution_id), WI("id", FT_U64, id),
  WI("n", FT_STR, name),          WI("ver", FT_STR, version),
  WI("d", FT_STR, data),          WI("pi", FT_STR, parent_instance),
  WI("pid", FT_U64, parent_id),   WI("pex", FT_U64, parent_execution_id),
  WI("s", FT_STR, session_id),    WI("r", FT_STR, reason),
  WI("fa", FT_I64, fire_at_ms),   WI("f", FT_FAIL, fail),
  WI("cs", FT_STR, custom_status),
  WI("w", FT_STR, worker_id),
  WI("tg", FT_STR, tag),
};
#undef WI

#define FL(key, type, member) {key, type, offsetof(dx_failure_t, member), sizeof key - 1}
static const field_t failure_fields[] = {
  FL("c", FT_INT, category), FL("k", FT_STR, kind),
  FL("m", FT_STR, message),  FL("rt", FT_BOOL, retryable),
};
#undef FL

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
static const schema_t event_schema = {"event record", event_fields, COUNT(event_fields),
                                      DX_EV__COUNT, offsetof(dx_event_t, arena)};
static const schema_t work_schema = {"work item record", work_fields, COUNT(work_fields),
                                     DX_WI__COUNT, offsetof(dx_work_item_t, arena)};
static const schema_t failure_schema = {"failure", failure_fields, COUNT(failure_fields), 0, 0};

/* Field access through the descriptor's offset. */
#define AT(base, f, T) ((T *)(void *)((char *)(base) + (f)->off))
#define CAT(base, f, T) ((const T *)(const void *)((const char *)(base) + (f)->off))

/* {===== encoding =====} */

static int failure_present(const dx_failure_t *fl) {
  return fl->category || fl->kind || fl->message || fl->retryable;
}

static int field_present(const field_t *f, const void *base) {
  switch (f->type) {
    case FT_KIND: return 1; /* always written: decoding requires it */
    case FT_STR: return *CAT(base, f, char *) != NULL;
    case FT_U64: return *CAT(base, f, uint64_t) != 0;
    case FT_I64: return *CAT(base, f, int64_t) != 0;
    case FT_INT: case FT_BOOL: return *CAT(base, f, int) != 0;
    case FT_FAIL: return failure_present(CAT(base, f, dx_failure_t));
  }
  return 0;
}

/* A MessagePack writer straight into one exactly sized buffer (msgpack-c's growing buffer
** reallocated and copied as a record grew). Run twice over a record: with p NULL it only
** counts the bytes and notes each string's length, then it writes them. The encodings are
** the smallest ones, as msgpack-c chooses them. */
#define MAX_STRS 24 /* more than the fields of any record and its failure */
typedef struct {
  unsigned char *p; /* NULL: counting pass */
  size_t n;         /* bytes so far */
  size_t lens[MAX_STRS];
  int nstr;         /* strings so far (noted in the counting pass, reused in the writing one) */
} wr_t;

static void wr_bytes(wr_t *w, const void *b, size_t n) {
  if (w->p && n) memcpy(w->p + w->n, b, n);
  w->n += n;
}

/* A tag byte followed by the low `n` bytes of v, big-endian. */
static void wr_tag(wr_t *w, unsigned tag, uint64_t v, int n) {
  if (w->p) {
    int i;
    w->p[w->n] = (unsigned char)tag;
    for (i = 0; i < n; i++) w->p[w->n + 1 + i] = (unsigned char)(v >> (8 * (n - 1 - i)));
  }
  w->n += 1 + (size_t)n;
}

static void wr_uint(wr_t *w, uint64_t v) {
  if (v < 128) wr_tag(w, (unsigned)v, 0, 0);
  else if (v < 256) wr_tag(w, 0xcc, v, 1);
  else if (v < 65536) wr_tag(w, 0xcd, v, 2);
  else if (v <= UINT32_MAX) wr_tag(w, 0xce, v, 4);
  else wr_tag(w, 0xcf, v, 8);
}

static void wr_int(wr_t *w, int64_t v) {
  if (v >= 0) wr_uint(w, (uint64_t)v);
  else if (v >= -32) wr_tag(w, (unsigned)(v & 0xff), 0, 0);
  else if (v >= -128) wr_tag(w, 0xd0, (uint64_t)v, 1);
  else if (v >= -32768) wr_tag(w, 0xd1, (uint64_t)v, 2);
  else if (v >= INT32_MIN) wr_tag(w, 0xd2, (uint64_t)v, 4);
  else wr_tag(w, 0xd3, (uint64_t)v, 8);
}

static void wr_str(wr_t *w, const char *s, size_t n) {
  if (n < 32) wr_tag(w, 0xa0 | (unsigned)n, 0, 0);
  else if (n < 256) wr_tag(w, 0xd9, n, 1);
  else if (n < 65536) wr_tag(w, 0xda, n, 2);
  else wr_tag(w, 0xdb, n, 4);
  wr_bytes(w, s, n);
}

static void wr_map(wr_t *w, size_t n) {
  if (n < 16) wr_tag(w, 0x80 | (unsigned)n, 0, 0);
  else if (n < 65536) wr_tag(w, 0xde, n, 2);
  else wr_tag(w, 0xdf, n, 4);
}

/* A string value: its length measured once, in the counting pass. */
static void wr_value_str(wr_t *w, const char *s) {
  size_t n;
  if (!w->p) w->lens[w->nstr] = strlen(s);
  n = w->lens[w->nstr++];
  wr_str(w, s, n);
}

static void wr_fields(wr_t *w, const schema_t *s, const void *base);

/* One present field (key and value). */
static void wr_field(wr_t *w, const field_t *f, const void *base) {
  wr_str(w, f->key, f->key_len);
  switch (f->type) {
    case FT_KIND: case FT_INT: wr_int(w, *CAT(base, f, int)); break;
    case FT_U64: wr_uint(w, *CAT(base, f, uint64_t)); break;
    case FT_I64: wr_int(w, *CAT(base, f, int64_t)); break;
    case FT_BOOL: wr_tag(w, 0xc3, 0, 0); break; /* only present when true */
    case FT_STR: wr_value_str(w, *CAT(base, f, char *)); break;
    case FT_FAIL: wr_fields(w, &failure_schema, CAT(base, f, dx_failure_t)); break;
  }
}

/* A map of the schema's present fields; top-level records get the version entry first. */
static void wr_fields(wr_t *w, const schema_t *s, const void *base) {
  size_t i, n = 0;
  int top = s != &failure_schema;
  for (i = 0; i < s->n; i++) n += (size_t)field_present(&s->fields[i], base);
  wr_map(w, n + (size_t)top);
  if (top) {
    wr_str(w, "v", 1);
    wr_uint(w, FORMAT_VERSION);
  }
  for (i = 0; i < s->n; i++)
    if (field_present(&s->fields[i], base)) wr_field(w, &s->fields[i], base);
}

static int encode(const schema_t *s, const void *rec, char **buf, size_t *len) {
  wr_t w;
  int kind = *CAT(rec, &s->fields[0], int); /* fields[0] is the kind in both schemas */
  *buf = NULL;
  *len = 0;
  /* A record with no valid kind could never be read back: refuse it at the writer. */
  if (kind < 1 || kind >= s->kind_limit) return DX_EINVAL;
  memset(&w, 0, sizeof w);
  wr_fields(&w, s, rec);
  if (!(w.p = malloc(w.n))) return DX_ENOMEM;
  *len = w.n;
  w.n = 0;
  w.nstr = 0;
  wr_fields(&w, s, rec);
  *buf = (char *)w.p;
  return DX_OK;
}

int dx__event_encode(const dx_event_t *e, char **buf, size_t *len) {
  return encode(&event_schema, e, buf, len);
}

int dx__work_item_encode(const dx_work_item_t *w, char **buf, size_t *len) {
  return encode(&work_schema, w, buf, len);
}

/* pack_fields writes a map, "v" 1, then "k" (the kind, a positive fixint: kinds are small). */
int dx__work_item_peek_kind(const void *buf, size_t len) {
  const unsigned char *p = buf;
  size_t pos;
  if (len < 1) return -1;
  if (p[0] >= 0x82 && p[0] <= 0x8f) pos = 1;                /* fixmap of 2..15 entries */
  else if (p[0] == 0xde && len >= 3) pos = 3;               /* map 16 */
  else return -1;
  if (len < pos + 5 || p[pos] != 0xa1 || p[pos + 1] != 'v' || p[pos + 2] != FORMAT_VERSION ||
      p[pos + 3] != 0xa1 || p[pos + 4] != 'k' || len < pos + 6)
    return -1;
  if (p[pos + 5] < 1 || p[pos + 5] >= DX_WI__COUNT) return -1;
  return p[pos + 5];
}

/* {===== framing check =====} */

#define SCAN_MAX_DEPTH 8 /* records nest two deep; leaves room for future fields */

/*
** Walk the MessagePack framing before msgpack-c sees the bytes. Its unpacker allocates
** count * sizeof(msgpack_object) as soon as it reads a container header, so one flipped
** length byte could ask for gigabytes; here every count must fit in the bytes that remain.
** Also rejects the reserved byte 0xc1, deep nesting and trailing bytes.
*/
static int scan_framing(const unsigned char *p, size_t len, const char *what, dx_error_t *err) {
  uint64_t left[SCAN_MAX_DEPTH]; /* elements still expected at each open level */
  uint64_t pending = 1;          /* elements still expected in total */
  size_t pos = 0;
  int depth = 0;
  left[0] = 1;
  while (depth >= 0) {
    unsigned c;
    size_t lenbytes = 0, fixed = 0;
    uint64_t items = 0, n = 0;
    size_t i;
    if (left[depth] == 0) { depth--; continue; }
    if (pos >= len)
      return dx_error_set(err, DX_ECORRUPT, "%s: truncated after %zu bytes", what, len);
    c = p[pos++];
    left[depth]--;
    pending--;
    if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
      /* fixint, nil, bool: the byte is the value */
    } else if (c <= 0x8f) {
      items = 2u * (c & 0x0f);
    } else if (c <= 0x9f) {
      items = c & 0x0f;
    } else if (c <= 0xbf) {
      fixed = c & 0x1f;
    } else {
      switch (c) {
        case 0xc4: case 0xd9: lenbytes = 1; break;            /* bin8, str8 */
        case 0xc5: case 0xda: lenbytes = 2; break;            /* bin16, str16 */
        case 0xc6: case 0xdb: lenbytes = 4; break;            /* bin32, str32 */
        case 0xc7: lenbytes = 1; fixed = 1; break;            /* ext8: len, type */
        case 0xc8: lenbytes = 2; fixed = 1; break;
        case 0xc9: lenbytes = 4; fixed = 1; break;
        case 0xca: fixed = 4; break;
        case 0xcb: fixed = 8; break;
        case 0xcc: case 0xd0: fixed = 1; break;
        case 0xcd: case 0xd1: fixed = 2; break;
        case 0xce: case 0xd2: fixed = 4; break;
        case 0xcf: case 0xd3: fixed = 8; break;
        case 0xd4: fixed = 2; break;                          /* fixext: type + data */
        case 0xd5: fixed = 3; break;
        case 0xd6: fixed = 5; break;
        case 0xd7: fixed = 9; break;
        case 0xd8: fixed = 17; break;
        case 0xdc: case 0xde: lenbytes = 2; break;            /* array16, map16 */
        case 0xdd: case 0xdf: lenbytes = 4; break;            /* array32, map32 */
        default:
          return dx_error_set(err, DX_ECORRUPT, "%s: invalid MessagePack byte 0x%02x at offset %zu",
                              what, c, pos - 1);
      }
    }
    if (lenbytes) {
      if (lenbytes > len - pos)
        return dx_error_set(err, DX_ECORRUPT, "%s: truncated after %zu bytes", what, len);
      for (i = 0; i < lenbytes; i++) n = (n << 8) | p[pos++];
      if (c >= 0xdc) items = c >= 0xde ? 2 * n : n;
      else fixed += (size_t)n;
    }
    if (fixed > len - pos)
      return dx_error_set(err, DX_ECORRUPT,
                          "%s: a length at offset %zu runs past the end of the %zu-byte buffer",
                          what, pos, len);
    pos += fixed;
    if (items) {
      pending += items;
      if (pending > len - pos) /* each element takes at least one byte */
        return dx_error_set(err, DX_ECORRUPT,
                            "%s: a count at offset %zu runs past the end of the %zu-byte buffer",
                            what, pos, len);
      if (depth + 1 >= SCAN_MAX_DEPTH)
        return dx_error_set(err, DX_ECORRUPT, "%s: nested too deeply", what);
      left[++depth] = items;
    }
  }
  if (pos != len)
    return dx_error_set(err, DX_ECORRUPT, "%s: %zu trailing bytes after the record", what,
                        len - pos);
  return DX_OK;
}

int dx__msgpack_check(const void *buf, size_t len, const char *what, dx_error_t *err) {
  return scan_framing(buf, len, what, err);
}

/* {===== decoding =====} */

static int key_is(const msgpack_object *k, const char *key, size_t n) {
  return k->via.str.size == n && memcmp(k->via.str.ptr, key, n) == 0;
}

/* Where a record's strings are copied: the cursor into its arena (decode sized it for every
** string of the record). */
typedef struct {
  char *next;
} strbuf_t;

static int read_fields(const schema_t *s, const msgpack_object *map, uint32_t first,
                       void *base, const char *what, const char *prefix, strbuf_t *sb,
                       dx_error_t *err);

/* Store one value into the member a descriptor names; DX_ECORRUPT naming the field when the
** value has the wrong type or range. */
static int read_field(const field_t *f, const msgpack_object *v, void *base, int kind_limit,
                      const char *what, const char *prefix, strbuf_t *sb, dx_error_t *err) {
  const char *expected = NULL;
  switch (f->type) {
    case FT_STR: {
      char *str;
      if (v->type != MSGPACK_OBJECT_STR) { expected = "a string"; break; }
      if (memchr(v->via.str.ptr, 0, v->via.str.size))
        return dx_error_set(err, DX_ECORRUPT, "%s: field '%s%s' contains a NUL byte", what,
                            prefix, f->key);
      str = sb->next;
      sb->next += v->via.str.size + 1;
      memcpy(str, v->via.str.ptr, v->via.str.size);
      str[v->via.str.size] = '\0';
      *AT(base, f, char *) = str;
      return DX_OK;
    }
    case FT_U64:
      if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER) { expected = "an unsigned integer"; break; }
      *AT(base, f, uint64_t) = v->via.u64;
      return DX_OK;
    case FT_I64:
      if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *AT(base, f, int64_t) = v->via.i64;
        return DX_OK;
      }
      if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER || v->via.u64 > INT64_MAX) {
        expected = "a 64-bit signed integer";
        break;
      }
      *AT(base, f, int64_t) = (int64_t)v->via.u64;
      return DX_OK;
    case FT_KIND: case FT_INT: {
      int64_t x;
      if (v->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) x = v->via.i64;
      else if (v->type == MSGPACK_OBJECT_POSITIVE_INTEGER && v->via.u64 <= INT_MAX)
        x = (int64_t)v->via.u64;
      else { expected = "a small integer"; break; }
      if (x < INT_MIN) { expected = "a small integer"; break; }
      if (f->type == FT_KIND && (x < 1 || x >= kind_limit))
        return dx_error_set(err, DX_ECORRUPT, "%s: unknown kind %lld in field '%s%s'", what,
                            (long long)x, prefix, f->key);
      *AT(base, f, int) = (int)x;
      return DX_OK;
    }
    case FT_BOOL:
      if (v->type != MSGPACK_OBJECT_BOOLEAN) { expected = "a boolean"; break; }
      *AT(base, f, int) = v->via.boolean ? 1 : 0;
      return DX_OK;
    case FT_FAIL:
      if (v->type != MSGPACK_OBJECT_MAP) { expected = "a map"; break; }
      return read_fields(&failure_schema, v, 0, AT(base, f, dx_failure_t), what, "f.", sb, err);
  }
  return dx_error_set(err, DX_ECORRUPT, "%s: field '%s%s' is not %s", what, prefix, f->key,
                      expected);
}

/* Fill `base` from a map following schema `s`, starting at entry `first` (the caller has
** already checked the version entry of a top-level record). */
static int read_fields(const schema_t *s, const msgpack_object *map, uint32_t first,
                       void *base, const char *what, const char *prefix, strbuf_t *sb,
                       dx_error_t *err) {
  uint32_t seen = 0, i;
  size_t j;
  for (i = first; i < map->via.map.size; i++) {
    const msgpack_object_kv *kv = &map->via.map.ptr[i];
    int rc;
    if (kv->key.type != MSGPACK_OBJECT_STR)
      return dx_error_set(err, DX_ECORRUPT, "%s: key %u%s is not a string", what, i + 1,
                          prefix[0] ? " of field 'f'" : "");
    for (j = 0; j < s->n; j++)
      if (key_is(&kv->key, s->fields[j].key, s->fields[j].key_len)) break;
    if (j == s->n) continue; /* unknown key: written by a newer version, skip */
    if (seen & (1u << j))
      return dx_error_set(err, DX_ECORRUPT, "%s: field '%s%s' appears twice", what, prefix,
                          s->fields[j].key);
    seen |= 1u << j;
    rc = read_field(&s->fields[j], &kv->val, base, s->kind_limit, what, prefix, sb, err);
    if (rc != DX_OK) return rc;
  }
  for (j = 0; j < s->n; j++)
    if (s->fields[j].type == FT_KIND && !(seen & (1u << j)))
      return dx_error_set(err, DX_ECORRUPT, "%s: field '%s' (kind) is missing", what,
                          s->fields[j].key);
  return DX_OK;
}

/* Bytes the strings of a record take with their NULs: its string values and those of the
** maps inside it (the failure). Unknown keys' strings are counted too: a few bytes spare. */
static size_t string_bytes(const msgpack_object *map, int depth) {
  size_t n = 0;
  uint32_t i;
  for (i = 0; i < map->via.map.size; i++) {
    const msgpack_object *v = &map->via.map.ptr[i].val;
    if (v->type == MSGPACK_OBJECT_STR) n += (size_t)v->via.str.size + 1;
    else if (v->type == MSGPACK_OBJECT_MAP && depth == 0) n += string_bytes(v, 1);
  }
  return n;
}

/* One allocation for all of a record's strings (instead of one each, freed one by one on
** another thread): its arena, stored in the record. DX_OK or DX_ENOMEM. */
static int arena_alloc(const schema_t *s, const msgpack_object *root, void *out,
                       strbuf_t *sb) {
  size_t n = string_bytes(root, 0);
  char *block;
  sb->next = NULL;
  if (n == 0) return DX_OK;
  if (!(block = malloc(sizeof(size_t) + n))) return DX_ENOMEM;
  memcpy(block, &n, sizeof n);
  *(void **)(void *)((char *)out + s->arena_off) = block;
  sb->next = block + sizeof(size_t);
  return DX_OK;
}

static int decode(const schema_t *s, const void *buf, size_t len, void *out, dx_error_t *err) {
  msgpack_unpacked up;
  const msgpack_object *root, *v;
  size_t off = 0;
  int rc;
  if (!buf || len == 0) return dx_error_set(err, DX_ECORRUPT, "%s: empty", s->what);
  rc = scan_framing(buf, len, s->what, err);
  if (rc != DX_OK) return rc;
  msgpack_unpacked_init(&up);
  switch (msgpack_unpack_next(&up, buf, len, &off)) {
    case MSGPACK_UNPACK_SUCCESS: break;
    case MSGPACK_UNPACK_NOMEM_ERROR:
      msgpack_unpacked_destroy(&up);
      return dx_error_set(err, DX_ENOMEM, "%s: out of memory while decoding", s->what);
    default: /* the framing scan makes this unreachable; kept as a guard */
      msgpack_unpacked_destroy(&up);
      return dx_error_set(err, DX_ECORRUPT, "%s: malformed MessagePack", s->what);
  }
  root = &up.data;
  if (root->type != MSGPACK_OBJECT_MAP) {
    rc = dx_error_set(err, DX_ECORRUPT, "%s: not a map", s->what);
  } else if (root->via.map.size == 0 || root->via.map.ptr[0].key.type != MSGPACK_OBJECT_STR ||
             !key_is(&root->via.map.ptr[0].key, "v", 1)) {
    rc = dx_error_set(err, DX_ECORRUPT, "%s: format version 'v' is not the first field",
                      s->what);
  } else if ((v = &root->via.map.ptr[0].val)->type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
             v->via.u64 != FORMAT_VERSION) {
    rc = dx_error_set(err, DX_ECORRUPT, "%s: unsupported format version (expected %d)",
                      s->what, FORMAT_VERSION);
  } else {
    strbuf_t sb;
    rc = arena_alloc(s, root, out, &sb);
    if (rc == DX_OK) rc = read_fields(s, root, 1, out, s->what, "", &sb, err);
  }
  msgpack_unpacked_destroy(&up);
  if (rc == DX_ENOMEM) dx_error_set(err, rc, "%s: out of memory while decoding", s->what);
  return rc;
}

int dx__event_decode(const void *buf, size_t len, dx_event_t *out, dx_error_t *err) {
  int rc;
  memset(out, 0, sizeof *out);
  rc = decode(&event_schema, buf, len, out, err);
  if (rc != DX_OK) dx_event_clear(out);
  return rc;
}

int dx__work_item_decode(const void *buf, size_t len, dx_work_item_t *out, dx_error_t *err) {
  int rc;
  memset(out, 0, sizeof *out);
  rc = decode(&work_schema, buf, len, out, err);
  if (rc != DX_OK) dx_work_item_clear(out);
  return rc;
}
