/*
** codec.c -- MessagePack records for history events and work items.
**
** A record is one map: "v" (format version) first, then only the fields that are present
** (non-NULL strings, non-zero numbers). Both record types and the failure submap are
** described by field tables (key, type, offsetof), so writing and reading are one generic
** loop each. Decoding is strict -- wrong types, unknown kinds, duplicates, truncation and
** trailing bytes are DX_ECORRUPT naming the problem -- except that unknown keys are skipped,
** so an older reader can open records written by a newer one of the same format version.
** Records are written into one exactly sized buffer and read straight from their bytes in one
** pass that checks the framing as it reads, without msgpack-c's growing buffers and object
** trees; a decoded record's strings are copied into one block, the record's arena (codec.h).
*/
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "mpack.h"

#define FORMAT_VERSION 1

typedef enum { FT_KIND, FT_STR, FT_U64, FT_I64, FT_INT, FT_BOOL, FT_FAIL } field_type_t;

typedef struct {
  char key[4];    /* NUL-padded: put_direct copies three bytes at once */
  field_type_t type;
  size_t off;
  size_t key_len; /* strlen(key), known at compile time (every record packs and matches keys);
                     1 to 3: a key is a fixstr (put_key) */
} field_t;

typedef struct {
  const char *what;     /* "event record", for messages */
  const field_t *fields;
  size_t n;
  int kind_limit;       /* valid kinds are 1 .. kind_limit-1 */
  size_t arena_off;     /* top-level records: offset of their `arena` member */
  size_t size;          /* top-level records: sizeof the record */
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
                                      DX_EV__COUNT, offsetof(dx_event_t, arena),
                                      sizeof(dx_event_t)};
static const schema_t work_schema = {"work item record", work_fields, COUNT(work_fields),
                                     DX_WI__COUNT, offsetof(dx_work_item_t, arena),
                                     sizeof(dx_work_item_t)};
static const schema_t failure_schema = {"failure", failure_fields, COUNT(failure_fields), 0, 0,
                                        0};

/* Field access through the descriptor's offset. */
#define AT(base, f, T) ((T *)(void *)((char *)(base) + (f)->off))
#define CAT(base, f, T) ((const T *)(const void *)((const char *)(base) + (f)->off))

/* {===== encoding =====} */

static int failure_present(const dx_failure_t *fl) {
  return fl->category || fl->kind || fl->message || fl->retryable;
}

/*
** A record that fits DIRECT_BYTES (nearly all) is written in one walk of the field table into
** a stack buffer, then copied into one exactly sized block (put_direct). A bigger one is a
** plan, then a write. The plan walks the field table once: it lists the present fields in
** order (a failure's own fields right after its entry), measures each string once and adds up
** the exact size; the write then fills one buffer of that size from the list, with no
** presence test or length count repeated. Both write the same bytes, the smallest encodings,
** as msgpack-c chooses them (test records_encode_as_msgpack_c_would).
*/
#define MAX_ITEMS 24 /* more than the fields of any record and its failure */
typedef struct {
  const field_t *f;
  size_t n; /* FT_STR: the string's length; FT_FAIL: how many entries of the failure follow */
} item_t;

typedef struct {
  item_t it[MAX_ITEMS];
  int n;
  size_t bytes;
} plan_t;

/* Plan the present fields of `base` (schema s); returns how many there are at this level. */
static size_t plan_fields(plan_t *p, const schema_t *s, const void *base) {
  size_t i, count = 0;
  for (i = 0; i < s->n; i++) {
    const field_t *f = &s->fields[i];
    size_t at = (size_t)p->n, n = 0, vsize;
    switch (f->type) {
      case FT_KIND: vsize = dx__mp_int(NULL, *CAT(base, f, int)); break; /* always: decoding needs it */
      case FT_INT:
        if (!*CAT(base, f, int)) continue;
        vsize = dx__mp_int(NULL, *CAT(base, f, int));
        break;
      case FT_BOOL:
        if (!*CAT(base, f, int)) continue;
        vsize = 1;
        break;
      case FT_U64:
        if (!*CAT(base, f, uint64_t)) continue;
        vsize = dx__mp_uint(NULL, *CAT(base, f, uint64_t));
        break;
      case FT_I64:
        if (!*CAT(base, f, int64_t)) continue;
        vsize = dx__mp_int(NULL, *CAT(base, f, int64_t));
        break;
      case FT_STR: {
        const char *str = *CAT(base, f, char *);
        if (!str) continue;
        n = strlen(str);
        vsize = dx__mp_bytes(NULL, 0, NULL, n);
        break;
      }
      case FT_FAIL:
        if (!failure_present(CAT(base, f, dx_failure_t))) continue;
        p->n++; /* the failure's entry comes before its fields */
        n = plan_fields(p, &failure_schema, CAT(base, f, dx_failure_t));
        vsize = dx__mp_container(NULL, 1, n);
        break;
      default: continue;
    }
    if (f->type != FT_FAIL) p->n++;
    p->it[at].f = f;
    p->it[at].n = n;
    p->bytes += 1 + f->key_len + vsize; /* (a key is a fixstr: put_key) */
    count++;
  }
  return count;
}

/* A key: every one is a fixstr of one to three bytes, written here without a memcpy call
** (every field of every record writes one). */
static unsigned char *put_key(unsigned char *o, const field_t *f) {
  size_t i;
  *o++ = (unsigned char)(0xa0 | f->key_len);
  for (i = 0; i < f->key_len; i++) *o++ = (unsigned char)f->key[i];
  return o;
}

/* Write `count` planned entries of `base` from *it on; returns the byte after them. */
static unsigned char *put_items(unsigned char *o, const item_t **it, size_t count,
                                const void *base) {
  size_t k;
  for (k = 0; k < count; k++) {
    const item_t *item = (*it)++;
    const field_t *f = item->f;
    o = put_key(o, f);
    switch (f->type) {
      case FT_KIND: case FT_INT: o += dx__mp_int(o, *CAT(base, f, int)); break;
      case FT_U64: o += dx__mp_uint(o, *CAT(base, f, uint64_t)); break;
      case FT_I64: o += dx__mp_int(o, *CAT(base, f, int64_t)); break;
      case FT_BOOL: *o++ = 0xc3; break; /* only present when true */
      case FT_STR: o += dx__mp_bytes(o, 0, *CAT(base, f, char *), item->n); break;
      case FT_FAIL:
        o += dx__mp_container(o, 1, item->n);
        o = put_items(o, it, item->n, CAT(base, f, dx_failure_t));
        break;
    }
  }
  return o;
}

/* The small record's way (most of them): one walk of the field table writes the present
** fields straight into o (a stack buffer) up to end, the same bytes as the plan's; returns the
** byte after them and their count in *count, or NULL when they do not fit (the plan then
** writes the record). Only a string is checked for room, and it must leave SCALARS_ROOM: the
** fields that are not strings (21 of them at most, a record's and its failure's) take no more
** than that together, so they need no check of their own. A key is written as four bytes (its
** fixstr header, then the three of the NUL-padded key: put_direct_key); the bytes past the key
** are written over by what follows. */
#define DIRECT_BYTES 1024
#define KEY_MAX 4  /* a key's bytes: fixstr header and up to three */
#define SCALAR_MAX 9 /* an integer's bytes at most */
#define SCALARS_ROOM (24 * (KEY_MAX + SCALAR_MAX))

static unsigned char *put_direct_key(unsigned char *o, const field_t *f) {
  o[0] = (unsigned char)(0xa0 | f->key_len);
  memcpy(o + 1, f->key, 3);
  return o + 1 + f->key_len;
}

static unsigned char *put_direct(const schema_t *s, const void *base, unsigned char *o,
                                 const unsigned char *end, size_t *count) {
  size_t i, c = 0;
  for (i = 0; i < s->n; i++) {
    const field_t *f = &s->fields[i];
    switch (f->type) {
      case FT_KIND:
        o = put_direct_key(o, f);
        o += dx__mp_int(o, *CAT(base, f, int));
        break;
      case FT_INT:
        if (!*CAT(base, f, int)) continue;
        o = put_direct_key(o, f);
        o += dx__mp_int(o, *CAT(base, f, int));
        break;
      case FT_BOOL:
        if (!*CAT(base, f, int)) continue;
        o = put_direct_key(o, f);
        *o++ = 0xc3;
        break;
      case FT_U64: {
        uint64_t v = *CAT(base, f, uint64_t);
        if (!v) continue;
        o = put_direct_key(o, f);
        o += dx__mp_uint(o, v);
        break;
      }
      case FT_I64: {
        int64_t v = *CAT(base, f, int64_t);
        if (!v) continue;
        o = put_direct_key(o, f);
        o += dx__mp_int(o, v);
        break;
      }
      case FT_STR: {
        const char *str = *CAT(base, f, char *);
        size_t n;
        if (!str) continue;
        n = strlen(str);
        /* (5: the str32 header) */
        if ((size_t)(end - o) < SCALARS_ROOM + KEY_MAX + 5 ||
            n > (size_t)(end - o) - SCALARS_ROOM - KEY_MAX - 5)
          return NULL;
        o = put_direct_key(o, f);
        o += dx__mp_bytes(o, 0, str, n);
        break;
      }
      case FT_FAIL: {
        unsigned char *head;
        size_t k;
        if (!failure_present(CAT(base, f, dx_failure_t))) continue;
        o = put_direct_key(o, f);
        head = o++; /* a fixmap: the failure has four fields */
        if (!(o = put_direct(&failure_schema, CAT(base, f, dx_failure_t), o, end, &k)))
          return NULL;
        dx__mp_container(head, 1, k);
        break;
      }
      default: continue;
    }
    c++;
  }
  *count = c;
  return o;
}

/* A map of the record's present fields, the version entry ("v": 1) first. */
static int encode(const schema_t *s, const void *rec, char **buf, size_t *len) {
  plan_t plan;
  const item_t *it = plan.it;
  unsigned char *o, direct[DIRECT_BYTES];
  size_t count;
  int kind = *CAT(rec, &s->fields[0], int); /* fields[0] is the kind in both schemas */
  *buf = NULL;
  *len = 0;
  /* A record with no valid kind could never be read back: refuse it at the writer. */
  if (kind < 1 || kind >= s->kind_limit) return DX_EINVAL;
  /* (the map's header, once its count is known, goes right before "v": room for 3 bytes) */
  o = direct + 3;
  o += dx__mp_bytes(o, 0, "v", 1);
  o += dx__mp_uint(o, FORMAT_VERSION);
  if ((o = put_direct(s, rec, o, direct + sizeof direct, &count)) != NULL) {
    /* (count + 1 <= 18 entries: a fixmap or a map16, as dx__mp_container writes them) */
    unsigned char *start = count + 1 < 16 ? direct + 2 : direct;
    if (count + 1 < 16) {
      start[0] = (unsigned char)(0x80 | (count + 1));
    } else {
      start[0] = 0xde;
      start[1] = 0;
      start[2] = (unsigned char)(count + 1);
    }
    *len = (size_t)(o - start);
    if (!(*buf = malloc(*len))) return *len = 0, DX_ENOMEM;
    memcpy(*buf, start, *len);
    return DX_OK;
  }
  plan.n = 0;
  plan.bytes = 3; /* "v" 1 */
  count = plan_fields(&plan, s, rec);
  plan.bytes += dx__mp_container(NULL, 1, count + 1);
  if (!(o = malloc(plan.bytes))) return DX_ENOMEM;
  *buf = (char *)o;
  *len = plan.bytes;
  o += dx__mp_container(o, 1, count + 1);
  o += dx__mp_bytes(o, 0, "v", 1);
  o += dx__mp_uint(o, FORMAT_VERSION);
  put_items(o, &it, count, rec);
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
** Also rejects the reserved byte 0xc1, deep nesting and trailing bytes. Decoding runs it only
** when its one-pass reader finds something wrong, for the message (decode).
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

/*
** A direct reader over the record's bytes, in one pass: every header and body is checked
** against the end of the buffer as it is read, and anything scan_framing would reject (a
** length past the end, the reserved byte 0xc1, deep nesting, trailing bytes) marks the read
** bad instead (rd_t.bad; what is read from then on is nil). A record that reads cleanly to
** its last byte is one scan_framing accepts; any other outcome is decoded again the old way,
** scan first (decode), so errors and their messages are as they were: framing first.
** Values are classified as msgpack-c would: any integer >= 0 is unsigned, any below 0 signed.
*/
typedef enum { V_NIL, V_BOOL, V_UINT, V_NEG, V_FLOAT, V_STR, V_BIN, V_ARRAY, V_MAP, V_EXT } vtype_t;

typedef struct {
  vtype_t type;
  uint64_t u;      /* V_UINT; V_BOOL: 0/1 */
  int64_t i;       /* V_NEG */
  const char *s;   /* V_STR, V_BIN, V_EXT: the body */
  uint64_t n;      /* body bytes; V_ARRAY / V_MAP: element count */
} val_t;

typedef struct {
  const unsigned char *p;
  size_t pos, len;
  int depth;       /* containers open (the record's own map is 1) */
  int max_depth;   /* a container deeper than this is bad (scan_framing's limit) */
  int bad;         /* a framing problem: the buffer is then used up (pos = len) */
} rd_t;

/* Mark the read bad; v (if any) reads as nil. */
static void rd_bad(rd_t *r, val_t *v) {
  r->bad = 1;
  r->pos = r->len;
  if (v) v->type = V_NIL;
}

/* n bytes (1..8) big-endian, or 0 and bad when they run past the end. */
static uint64_t rd_be(rd_t *r, int n) {
  uint64_t v = 0;
  int i;
  if ((size_t)n > r->len - r->pos) return rd_bad(r, NULL), 0;
  for (i = 0; i < n; i++) v = (v << 8) | r->p[r->pos++];
  return v;
}

static void rd_body(rd_t *r, val_t *v, vtype_t type, uint64_t n) {
  if (r->bad || n > r->len - r->pos) { rd_bad(r, v); return; }
  v->type = type;
  v->n = n;
  v->s = (const char *)r->p + r->pos;
  r->pos += (size_t)n;
}

/* One value's header (and body, for strings, bins and exts; containers' elements follow). */
static void rd_value(rd_t *r, val_t *v) {
  unsigned c;
  if (r->pos >= r->len) { rd_bad(r, v); return; }
  c = r->p[r->pos++];
  /* no memset: every reader looks only at the members its value type sets */
  if (c <= 0x7f) { v->type = V_UINT; v->u = c; return; }
  if (c >= 0xe0) { v->type = V_NEG; v->i = (int64_t)c - 256; return; }
  if (c <= 0x8f) { v->type = V_MAP; v->n = c & 0x0f; return; }
  if (c <= 0x9f) { v->type = V_ARRAY; v->n = c & 0x0f; return; }
  if (c <= 0xbf) { rd_body(r, v, V_STR, c & 0x1f); return; }
  switch (c) {
    case 0xc0: v->type = V_NIL; return;
    case 0xc2: case 0xc3: v->type = V_BOOL; v->u = c == 0xc3; return;
    case 0xc4: case 0xc5: case 0xc6: rd_body(r, v, V_BIN, rd_be(r, 1 << (c - 0xc4))); return;
    case 0xc7: case 0xc8: case 0xc9: {
      uint64_t n = rd_be(r, 1 << (c - 0xc7));
      rd_be(r, 1); /* type */
      rd_body(r, v, V_EXT, n);
      return;
    }
    case 0xca: case 0xcb:
      rd_body(r, v, V_FLOAT, c == 0xca ? 4 : 8);
      return;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
      v->type = V_UINT;
      v->u = rd_be(r, 1 << (c - 0xcc));
      if (r->bad) v->type = V_NIL;
      return;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
      int n = 1 << (c - 0xd0);
      uint64_t raw = rd_be(r, n);
      int64_t x = n == 8 ? (int64_t)raw : (int64_t)(raw ^ (UINT64_C(1) << (8 * n - 1))) -
                                              (int64_t)(UINT64_C(1) << (8 * n - 1));
      if (r->bad) v->type = V_NIL;
      else if (x >= 0) { v->type = V_UINT; v->u = (uint64_t)x; }
      else { v->type = V_NEG; v->i = x; }
      return;
    }
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
      rd_be(r, 1); /* type */
      rd_body(r, v, V_EXT, (uint64_t)1 << (c - 0xd4));
      return;
    case 0xd9: case 0xda: case 0xdb: rd_body(r, v, V_STR, rd_be(r, 1 << (c - 0xd9))); return;
    case 0xdc: case 0xdd: case 0xde: case 0xdf: {
      uint64_t n = rd_be(r, c == 0xdc || c == 0xde ? 2 : 4);
      if (r->bad) { v->type = V_NIL; return; }
      v->type = c <= 0xdd ? V_ARRAY : V_MAP;
      v->n = n;
      return;
    }
    default: rd_bad(r, v); return; /* 0xc1: reserved */
  }
}

/* Skip one whole value, containers with everything in them (up to r->max_depth deep). */
static void rd_skip(rd_t *r) {
  val_t v;
  uint64_t k, n;
  rd_value(r, &v);
  if (v.type != V_ARRAY && v.type != V_MAP) return;
  if (++r->depth > r->max_depth) { rd_bad(r, NULL); return; }
  n = v.type == V_MAP ? 2 * v.n : v.n;
  for (k = 0; k < n && !r->bad; k++) rd_skip(r); /* (each element takes a byte at least) */
  r->depth--;
}

static int key_is(const val_t *k, const char *key, size_t n) {
  if (k->n != n) return 0;
  switch (n) { /* keys are one to three bytes: no loop, no memcmp call */
    case 1: return k->s[0] == key[0];
    case 2: return k->s[0] == key[0] && k->s[1] == key[1];
    case 3: return k->s[0] == key[0] && k->s[1] == key[1] && k->s[2] == key[2];
    default: return memcmp(k->s, key, n) == 0;
  }
}

/* Where a record's strings are copied: one block, the record's arena, allocated at its first
** string (none for a record without strings) and sized for every string left in the buffer
** (a string of n bytes takes n + 1 at least there: its header and body). */
typedef struct {
  char *next;  /* NULL until the first string */
  void **slot; /* the record's arena member */
} strbuf_t;

/* Room for the string v (read by r) and all those after it; DX_OK or DX_ENOMEM. */
static int strbuf_open(strbuf_t *sb, const rd_t *r, const val_t *v) {
  size_t n = (size_t)v->n + 1 + (r->len - r->pos);
  char *block = malloc(sizeof(size_t) + n);
  if (!block) return DX_ENOMEM;
  memcpy(block, &n, sizeof n);
  *sb->slot = block;
  sb->next = block + sizeof(size_t);
  return DX_OK;
}

static int read_fields(const schema_t *s, rd_t *r, uint64_t count, uint32_t first, void *base,
                       const char *what, const char *prefix, strbuf_t *sb, dx_error_t *err);

/* Store one value (its header read into v) into the member a descriptor names; DX_ECORRUPT
** naming the field when the value has the wrong type or range. */
static int read_field(const field_t *f, const val_t *v, rd_t *r, void *base, int kind_limit,
                      const char *what, const char *prefix, strbuf_t *sb, dx_error_t *err) {
  const char *expected = NULL;
  switch (f->type) {
    case FT_STR: {
      char *str;
      if (v->type != V_STR) { expected = "a string"; break; }
      if (memchr(v->s, 0, (size_t)v->n))
        return dx_error_set(err, DX_ECORRUPT, "%s: field '%s%s' contains a NUL byte", what,
                            prefix, f->key);
      if (!sb->next && strbuf_open(sb, r, v) != DX_OK)
        return dx_error_set(err, DX_ENOMEM, "%s: out of memory while decoding", what);
      str = sb->next;
      sb->next += v->n + 1;
      memcpy(str, v->s, (size_t)v->n);
      str[v->n] = '\0';
      *AT(base, f, char *) = str;
      return DX_OK;
    }
    case FT_U64:
      if (v->type != V_UINT) { expected = "an unsigned integer"; break; }
      *AT(base, f, uint64_t) = v->u;
      return DX_OK;
    case FT_I64:
      if (v->type == V_NEG) {
        *AT(base, f, int64_t) = v->i;
        return DX_OK;
      }
      if (v->type != V_UINT || v->u > INT64_MAX) { expected = "a 64-bit signed integer"; break; }
      *AT(base, f, int64_t) = (int64_t)v->u;
      return DX_OK;
    case FT_KIND: case FT_INT: {
      int64_t x;
      if (v->type == V_NEG) x = v->i;
      else if (v->type == V_UINT && v->u <= INT_MAX) x = (int64_t)v->u;
      else { expected = "a small integer"; break; }
      if (x < INT_MIN) { expected = "a small integer"; break; }
      if (f->type == FT_KIND && (x < 1 || x >= kind_limit))
        return dx_error_set(err, DX_ECORRUPT, "%s: unknown kind %lld in field '%s%s'", what,
                            (long long)x, prefix, f->key);
      *AT(base, f, int) = (int)x;
      return DX_OK;
    }
    case FT_BOOL:
      if (v->type != V_BOOL) { expected = "a boolean"; break; }
      *AT(base, f, int) = (int)v->u;
      return DX_OK;
    case FT_FAIL: {
      int rc;
      if (v->type != V_MAP) { expected = "a map"; break; }
      r->depth++;
      rc = read_fields(&failure_schema, r, v->n, 0, AT(base, f, dx_failure_t), what, "f.", sb,
                       err);
      r->depth--;
      return rc;
    }
  }
  return dx_error_set(err, DX_ECORRUPT, "%s: field '%s%s' is not %s", what, prefix, f->key,
                      expected);
}

/* Fill `base` from the `count` entries of a map following schema `s` (r is at entry `first`:
** the caller has already read a top-level record's version entry). */
static int read_fields(const schema_t *s, rd_t *r, uint64_t count, uint32_t first, void *base,
                       const char *what, const char *prefix, strbuf_t *sb, dx_error_t *err) {
  uint32_t seen = 0;
  uint64_t i;
  size_t j, next = 0, t;
  for (i = first; i < count; i++) {
    val_t k, v;
    int rc;
    unsigned c = r->pos < r->len ? r->p[r->pos] : 0;
    if (c >= 0xa0 && c <= 0xbf) { /* a fixstr key (all of ours): read in place */
      r->pos++;
      rd_body(r, &k, V_STR, c & 0x1f);
    } else {
      rd_value(r, &k);
    }
    if (k.type != V_STR)
      return dx_error_set(err, DX_ECORRUPT, "%s: key %u%s is not a string", what,
                          (unsigned)(i + 1), prefix[0] ? " of field 'f'" : "");
    /* The writer follows the table's order: look from the field after the last one first. */
    for (t = 0, j = next; t < s->n; t++, j = j + 1 == s->n ? 0 : j + 1)
      if (key_is(&k, s->fields[j].key, s->fields[j].key_len)) break;
    if (t == s->n) { /* unknown key: written by a newer version, skip */
      rd_skip(r);
      continue;
    }
    if (seen & (1u << j))
      return dx_error_set(err, DX_ECORRUPT, "%s: field '%s%s' appears twice", what, prefix,
                          s->fields[j].key);
    seen |= 1u << j;
    next = j + 1 == s->n ? 0 : j + 1;
    /* the commonest values read here, the rest by rd_value: a positive fixint, a fixstr */
    c = r->pos < r->len ? r->p[r->pos] : 0xc1;
    if (c <= 0x7f) {
      r->pos++;
      v.type = V_UINT;
      v.u = c;
    } else if (c >= 0xa0 && c <= 0xbf) {
      r->pos++;
      rd_body(r, &v, V_STR, c & 0x1f);
    } else {
      rd_value(r, &v);
    }
    rc = read_field(&s->fields[j], &v, r, base, s->kind_limit, what, prefix, sb, err);
    if (rc != DX_OK) return rc;
  }
  /* (a top-level record's kind is fields[0]; the failure has none) */
  if (s->kind_limit && !(seen & 1u))
    return dx_error_set(err, DX_ECORRUPT, "%s: field '%s' (kind) is missing", what,
                        s->fields[0].key);
  return DX_OK;
}

/* One read of the record from r's start into the zeroed *out. */
static int read_record(const schema_t *s, rd_t *r, void *out, dx_error_t *err) {
  val_t root, k, v;
  strbuf_t sb;
  rd_value(r, &root);
  if (root.type != V_MAP) return dx_error_set(err, DX_ECORRUPT, "%s: not a map", s->what);
  r->depth = 1;
  if (root.n > 0) rd_value(r, &k);
  if (root.n == 0 || k.type != V_STR || !key_is(&k, "v", 1))
    return dx_error_set(err, DX_ECORRUPT, "%s: format version 'v' is not the first field",
                        s->what);
  rd_value(r, &v);
  if (v.type != V_UINT || v.u != FORMAT_VERSION)
    return dx_error_set(err, DX_ECORRUPT, "%s: unsupported format version (expected %d)",
                        s->what, FORMAT_VERSION);
  sb.next = NULL;
  sb.slot = (void **)(void *)((char *)out + s->arena_off);
  return read_fields(s, r, root.n, 1, out, s->what, "", &sb, err);
}

static int decode(const schema_t *s, const void *buf, size_t len, void *out, dx_error_t *err) {
  rd_t r = {buf, 0, len, 0, SCAN_MAX_DEPTH - 1, 0};
  int rc;
  if (!buf || len == 0) return dx_error_set(err, DX_ECORRUPT, "%s: empty", s->what);
  rc = read_record(s, &r, out, err);
  if (rc == DX_OK && !r.bad && r.pos == len) return DX_OK;
  /* Something is wrong: decoded again as before this reader had one pass, so the framing's
  ** errors come first, then the reader's on the checked bytes. */
  free(*(void **)(void *)((char *)out + s->arena_off));
  memset(out, 0, s->size);
  if ((rc = scan_framing(buf, len, s->what, err)) != DX_OK) return rc;
  memset(&r, 0, sizeof r);
  r.p = buf;
  r.len = len;
  r.max_depth = SCAN_MAX_DEPTH - 1;
  return read_record(s, &r, out, err);
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
