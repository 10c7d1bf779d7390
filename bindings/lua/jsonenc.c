/*
** jsonenc.c -- the fast path of Lua values -> canonical JSON: one pass that writes the
** canonical bytes straight into a buffer (value.c's path built a jansson tree, dumped it and
** rewrote its reals, for every activity input and result).
**
** It writes nil, booleans, integers, finite floats (json.c's dx__json_real: the same text
** the jansson path ends with), strings, the null sentinel, and tables of those (keys sorted
** bytewise, as jansson's JSON_SORT_KEYS). Anything the encoder refuses (value.c words the
** error with its path) or nesting past 100 levels (a cycle ends there too) is declined:
** NULL, and the caller runs the jansson path. Like value.c's
** encoder it never raises and never runs a metamethod: only lua_next, lua_rawget*,
** lua_pushvalue, lua_tolstring on strings and lua_checkstack.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>

#include "jsonout.h"
#include "util.h"
#include "value.h"

typedef struct {
  char *p;
  size_t n, cap;
  int lent; /* p is the caller's buffer (dx__lua_encode_json_in): grown by a copy, never freed */
} buf_t;

typedef struct {
  lua_State *L;
  buf_t b;
  int null_slot, arrays_slot; /* placeholders, filled by slot() on first use */
  int fetched;                /* 1: null_slot holds the sentinel, 2: arrays_slot the set */
} enc_t;

/* One key of an object being written: its bytes and the stack slot of its value. */
typedef struct {
  const char *s;
  size_t n;
  int value_slot;
} okey_t;

static int grow(buf_t *b, size_t more) {
  size_t cap;
  char *p;
  if (b->n + more <= b->cap) return 1;
  cap = b->cap ? b->cap : 128;
  while (cap < b->n + more) cap *= 2;
  if (b->lent) {
    if (!(p = malloc(cap))) return 0;
    memcpy(p, b->p, b->n);
    b->lent = 0;
  } else if (!(p = realloc(b->p, cap))) {
    return 0;
  }
  b->p = p;
  b->cap = cap;
  return 1;
}

static inline int put(buf_t *b, const char *s, size_t n) {
  if (b->n + n > b->cap && !grow(b, n)) return 0;
  memcpy(b->p + b->n, s, n);
  b->n += n;
  return 1;
}

/* One byte: the commonest write ('[', ',', ':', ...), without a call or a memcpy. */
static inline int put_char(buf_t *b, char c) {
  if (b->n == b->cap && !grow(b, 1)) return 0;
  b->p[b->n++] = c;
  return 1;
}

/* Valid UTF-8 (dx__utf8_valid_prefix skips plain ASCII without a call per byte). */
static int text_ok(const char *s, size_t n) { return dx__utf8_valid_prefix(s, n) == n; }

/* A JSON string with jansson's escapes: \" \\ \b \f \n \r \t, other controls \u00XX. */
static int put_string(buf_t *b, const char *s, size_t n) {
  static const char hex[] = "0123456789ABCDEF";
  size_t i, run = 0;
  if (!grow(b, n + 2) || !put_char(b, '"')) return 0;
  for (i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char esc[6];
    size_t k;
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    if (!put(b, s + run, i - run)) return 0;
    run = i + 1;
    esc[0] = '\\';
    switch (c) {
      case '"': esc[1] = '"'; k = 2; break;
      case '\\': esc[1] = '\\'; k = 2; break;
      case '\b': esc[1] = 'b'; k = 2; break;
      case '\f': esc[1] = 'f'; k = 2; break;
      case '\n': esc[1] = 'n'; k = 2; break;
      case '\r': esc[1] = 'r'; k = 2; break;
      case '\t': esc[1] = 't'; k = 2; break;
      default:
        esc[1] = 'u';
        esc[2] = '0';
        esc[3] = '0';
        esc[4] = hex[c >> 4];
        esc[5] = hex[c & 15];
        k = 6;
    }
    if (!put(b, esc, k)) return 0;
  }
  return put(b, s + run, n - run) && put_char(b, '"');
}

/* A string value: plain ASCII text (the common case, found eight bytes at a time) is copied
** as it is; anything else is checked (UTF-8) and escaped by put_string. */
static int put_text(buf_t *b, const char *s, size_t n) {
  size_t i = 0;
  while (n - i >= 8 && dx__json_plain8(s + i)) i += 8;
  for (; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\')
      return text_ok(s, n) && put_string(b, s, n);
  }
  if (!grow(b, n + 2)) return 0;
  b->p[b->n++] = '"';
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n++] = '"';
  return 1;
}

const char *dx__json_int_text(lua_Integer v, char buf[DX_JSON_INT_MAX]) {
  char *q = buf + DX_JSON_INT_MAX - 1;
  unsigned long long u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
  *q = '\0';
  do {
    *--q = (char)('0' + u % 10);
    u /= 10;
  } while (u);
  if (v < 0) *--q = '-';
  return q;
}

static int put_integer(buf_t *b, lua_Integer v) {
  char tmp[DX_JSON_INT_MAX];
  const char *q = dx__json_int_text(v, tmp);
  return put(b, q, (size_t)(tmp + sizeof tmp - 1 - q));
}

static int value(enc_t *e, int idx, int depth);

static int key_cmp(const void *a, const void *b) {
  const okey_t *x = a, *y = b;
  size_t n = x->n < y->n ? x->n : y->n;
  int c = memcmp(x->s, y->s, n);
  if (c) return c;
  return x->n < y->n ? -1 : x->n > y->n;
}

/* An object of nstr string keys: keys and values are copied onto the stack, sorted, written. */
static int object(enc_t *e, int t, int depth, size_t nstr) {
  lua_State *L = e->L;
  okey_t *keys;
  size_t i = 0;
  int ok = 0, base = lua_gettop(L);
  if (nstr == 0) return put(&e->b, "{}", 2);
  if (nstr > 100000 || !lua_checkstack(L, (int)nstr * 2 + 4)) return 0;
  if (!(keys = malloc(nstr * sizeof *keys))) return 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    size_t kn;
    const char *k = lua_tolstring(L, -2, &kn); /* a string: the caller classified the keys */
    if (i == nstr || memchr(k, '\0', kn) || !text_ok(k, kn)) goto out;
    keys[i].s = k;
    keys[i].n = kn;
    keys[i].value_slot = lua_gettop(L);
    i++;
    lua_pushvalue(L, -2); /* the key again, for lua_next; key and value stay below it */
  }
  if (i != nstr) goto out;
  qsort(keys, nstr, sizeof *keys, key_cmp);
  if (!put_char(&e->b, '{')) goto out;
  for (i = 0; i < nstr; i++) {
    if ((i && !put_char(&e->b, ',')) || !put_string(&e->b, keys[i].s, keys[i].n) ||
        !put_char(&e->b, ':') || !value(e, keys[i].value_slot, depth + 1))
      goto out;
  }
  ok = put_char(&e->b, '}');
out:
  free(keys);
  lua_settop(L, base);
  return ok;
}

/* The registry value under key into its placeholder slot, fetched on first use: most
** payloads hold no duroxide.null, and only tables without integer keys ask the array set.
** Balanced on the stack, so it may run between lua_next calls. */
static int slot(enc_t *e, int which, const void *key) {
  if (!(e->fetched & which)) {
    lua_rawgetp(e->L, LUA_REGISTRYINDEX, key); /* nil until created: nothing is marked */
    lua_replace(e->L, which == 1 ? e->null_slot : e->arrays_slot);
    e->fetched |= which;
  }
  return which == 1 ? e->null_slot : e->arrays_slot;
}

/* One pass over the keys classifies the table and, while its keys come as 1, 2, 3, ...
** (a sequence in the array part: the common case), writes its elements as an array at
** once; any other order is rewound and written from 1..n afterwards. */
static int table(enc_t *e, int t, int depth) {
  lua_State *L = e->L;
  lua_Integer nint = 0, kmin = LUA_MAXINTEGER, kmax = 0, i;
  size_t nstr = 0, start = e->b.n;
  int marked = 0, in_order = 1;
  if (depth >= DX__LUA_MAX_DEPTH || !lua_checkstack(L, 4) || !put_char(&e->b, '[')) return 0;
  lua_pushnil(L);
  while (lua_next(L, t)) {
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING) {
      nstr++;
      in_order = 0;
    } else if (kt == LUA_TNUMBER && lua_isinteger(L, -2)) {
      lua_Integer k = lua_tointeger(L, -2);
      nint++;
      if (k < kmin) kmin = k;
      if (k > kmax) kmax = k;
      if (in_order && k != nint) in_order = 0;
      if (in_order && ((k > 1 && !put_char(&e->b, ',')) || !value(e, lua_gettop(L), depth + 1)))
        return 0; /* declined: the caller resets the stack */
    } else {
      return 0;
    }
    lua_pop(L, 1);
  }
  if (nint > 0) {
    if (nstr > 0 || kmin != 1 || kmax != nint) return 0; /* mixed or sparse */
    if (in_order) return put_char(&e->b, ']');
    e->b.n = start + 1; /* keep the '[' */
    for (i = 1; i <= nint; i++) {
      int ok;
      lua_rawgeti(L, t, i);
      ok = (i == 1 || put_char(&e->b, ',')) && value(e, lua_gettop(L), depth + 1);
      lua_pop(L, 1);
      if (!ok) return 0;
    }
    return put_char(&e->b, ']');
  }
  e->b.n = start;
  {
    int set = slot(e, 2, dx__lua_arrays_key());
    if (lua_type(L, set) == LUA_TTABLE) {
      lua_pushvalue(L, t);
      marked = lua_rawget(L, set) != LUA_TNIL;
      lua_pop(L, 1);
    }
  }
  if (marked) return nstr == 0 && put(&e->b, "[]", 2); /* marked with string keys: mixed */
  return object(e, t, depth, nstr);
}

static int value(enc_t *e, int idx, int depth) {
  lua_State *L = e->L;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: return put(&e->b, "null", 4);
    case LUA_TBOOLEAN: return lua_toboolean(L, idx) ? put(&e->b, "true", 4) : put(&e->b, "false", 5);
    case LUA_TNUMBER: {
      char real[40];
      size_t n;
      double d;
      if (lua_isinteger(L, idx)) return put_integer(&e->b, lua_tointeger(L, idx));
      d = lua_tonumber(L, idx);
      return isfinite(d) && (n = dx__json_real(d, real)) != 0 && put(&e->b, real, n);
    }
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      return put_text(&e->b, s, n);
    }
    case LUA_TTABLE: return table(e, idx, depth);
    case LUA_TUSERDATA:
      return lua_rawequal(L, idx, slot(e, 1, dx__lua_null_key())) && put(&e->b, "null", 4);
    default: return 0;
  }
}

char *dx__lua_encode_json(lua_State *L, int idx) { return dx__lua_encode_json_in(L, idx, NULL, 0); }

char *dx__lua_encode_json_in(lua_State *L, int idx, char *buf, size_t cap) {
  enc_t e;
  int top = lua_gettop(L), ok;
  if (!lua_checkstack(L, 8)) return NULL;
  idx = lua_absindex(L, idx);
  memset(&e, 0, sizeof e);
  e.L = L;
  if (buf && cap) {
    e.b.p = buf;
    e.b.cap = cap;
    e.b.lent = 1;
  }
  /* Only tables and userdata (the null sentinel) look at the slots: a scalar payload (a
  ** count, an id, a flag) is written without making them. */
  if (lua_type(L, idx) == LUA_TTABLE || lua_type(L, idx) == LUA_TUSERDATA) {
    lua_pushnil(L);
    e.null_slot = lua_gettop(L);
    lua_pushnil(L);
    e.arrays_slot = lua_gettop(L);
  }
  ok = value(&e, idx, 0) && put_char(&e.b, '\0');
  lua_settop(L, top);
  if (!ok) {
    if (!e.b.lent) free(e.b.p);
    return NULL;
  }
  return e.b.p;
}
