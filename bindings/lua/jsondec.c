/*
** jsondec.c -- the fast path of JSON text -> Lua values: one pass over the text that pushes
** as it reads, with no intermediate tree (value.c's jansson path built one per payload, which
** was most of a decode's cost on the loop thread and in client:history).
**
** It takes only input it is sure jansson (with value.c's flags: any top-level value,
** duplicates refused, "\u0000" allowed in strings) accepts with the same meaning, and
** declines everything else by returning 0 with the stack as it was; the caller then runs the
** jansson path, which decides and words any error. Declining is never wrong, accepting is:
** so anything unusual (deep nesting, integer overflow, a real that overflows, a duplicate
** key, a NUL in a key, a bad escape, invalid UTF-8, stray bytes) is declined.
*/
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "util.h"
#include "value.h"

typedef struct {
  lua_State *L;
  const char *p, *end;
  int null_slot, set_slot; /* placeholders, filled on first use (need()) */
  int fetched;             /* 1: null_slot holds the sentinel, 2: set_slot the array set */
  int top_nil; /* a top-level null is nil (else duroxide.null, as inside tables) */
} dec_t;

static int value(dec_t *d, int depth);

/* The sentinel (which 1) or the array set (2) into its placeholder slot, made on first
** use: most payloads hold no null, scalars no array. */
static int need(dec_t *d, int which) {
  if (!(d->fetched & which)) {
    if (which == 1) dx__lua_push_null(d->L);
    else dx__lua_push_array_set(d->L);
    lua_replace(d->L, which == 1 ? d->null_slot : d->set_slot);
    d->fetched |= which;
  }
  return which == 1 ? d->null_slot : d->set_slot;
}

static void skip_ws(dec_t *d) {
  while (d->p < d->end && (*d->p == ' ' || *d->p == '\n' || *d->p == '\r' || *d->p == '\t'))
    d->p++;
}

static int hex4(const char *s, unsigned *out) {
  unsigned v = 0;
  int i;
  for (i = 0; i < 4; i++) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
    else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
    else return 0;
  }
  *out = v;
  return 1;
}

/* One escape after the backslash at d->p; appends its UTF-8 to b. 0: declined. */
static int escape(dec_t *d, luaL_Buffer *b, int is_key) {
  const char *s = d->p + 1;
  unsigned cp, lo;
  char u[4];
  int n;
  if (s >= d->end) return 0;
  switch (*s) {
    case '"': case '\\': case '/': luaL_addchar(b, *s); d->p = s + 1; return 1;
    case 'b': luaL_addchar(b, '\b'); d->p = s + 1; return 1;
    case 'f': luaL_addchar(b, '\f'); d->p = s + 1; return 1;
    case 'n': luaL_addchar(b, '\n'); d->p = s + 1; return 1;
    case 'r': luaL_addchar(b, '\r'); d->p = s + 1; return 1;
    case 't': luaL_addchar(b, '\t'); d->p = s + 1; return 1;
    case 'u': break;
    default: return 0;
  }
  if (d->end - s < 5 || !hex4(s + 1, &cp)) return 0;
  s += 5;
  if (cp >= 0xdc00 && cp <= 0xdfff) return 0; /* a lone low surrogate */
  if (cp >= 0xd800 && cp <= 0xdbff) {         /* needs its low half next */
    if (d->end - s < 6 || s[0] != '\\' || s[1] != 'u' || !hex4(s + 2, &lo) || lo < 0xdc00 ||
        lo > 0xdfff)
      return 0;
    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    s += 6;
  }
  if (cp == 0 && is_key) return 0; /* jansson refuses NUL in keys */
  if (cp < 0x80) { u[0] = (char)cp; n = 1; }
  else if (cp < 0x800) { u[0] = (char)(0xc0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3f)); n = 2; }
  else if (cp < 0x10000) {
    u[0] = (char)(0xe0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[2] = (char)(0x80 | (cp & 0x3f));
    n = 3;
  } else {
    u[0] = (char)(0xf0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[3] = (char)(0x80 | (cp & 0x3f));
    n = 4;
  }
  luaL_addlstring(b, u, (size_t)n);
  d->p = s;
  return 1;
}

/* The string whose opening quote is at d->p: pushes it. 0: declined (nothing pushed). */
static int string(dec_t *d, int is_key) {
  const char *s = d->p + 1, *run = s;
  luaL_Buffer b;
  int buffered = 0;
  unsigned high = 0; /* any byte >= 0x80 in this run: only then is UTF-8 checked */
  for (;;) {
    unsigned char c;
    if (s >= d->end) goto decline;
    c = (unsigned char)*s;
    if (c == '"' || c == '\\') {
      size_t n = (size_t)(s - run);
      if ((high & 0x80) && dx__utf8_valid_prefix(run, n) != n) goto decline;
      high = 0;
      if (c == '"' && !buffered) {
        lua_pushlstring(d->L, run, n); /* the common case: no escapes */
        d->p = s + 1;
        return 1;
      }
      if (!buffered) {
        luaL_buffinit(d->L, &b);
        buffered = 1;
      }
      luaL_addlstring(&b, run, n);
      if (c == '"') {
        luaL_pushresult(&b);
        d->p = s + 1;
        return 1;
      }
      d->p = s;
      if (!escape(d, &b, is_key)) goto decline;
      s = run = d->p;
      continue;
    }
    if (c < 0x20) goto decline; /* raw control characters (and NUL) are not JSON */
    high |= c;
    s++;
    /* after a plain byte, plain ASCII runs go eight bytes at a time (not tried after others:
    ** text of mostly non-ASCII bytes would pay for a failed test per byte) */
    if (c < 0x80)
      while (d->end - s >= 8 && dx__json_plain8(s)) s += 8;
  }
decline:
  if (buffered) {
    luaL_pushresult(&b);
    lua_pop(d->L, 1);
  }
  return 0;
}

static int digits(dec_t *d) {
  const char *s = d->p;
  while (d->p < d->end && *d->p >= '0' && *d->p <= '9') d->p++;
  return d->p > s;
}

/* JSON's number grammar exactly; integers that fit lua_Integer, reals that stay finite. */
static int number(dec_t *d) {
  const char *s = d->p;
  int neg = 0, real = 0;
  if (*d->p == '-') { neg = 1; d->p++; }
  if (d->p >= d->end) return 0;
  if (*d->p == '0') d->p++;
  else if (!digits(d)) return 0;
  if (d->p < d->end && *d->p == '.') {
    d->p++;
    if (!digits(d)) return 0;
    real = 1;
  }
  if (d->p < d->end && (*d->p == 'e' || *d->p == 'E')) {
    d->p++;
    if (d->p < d->end && (*d->p == '+' || *d->p == '-')) d->p++;
    if (!digits(d)) return 0;
    real = 1;
  }
  if (!real) {
    const char *q = s + neg;
    unsigned long long v = 0, lim = neg ? (unsigned long long)LUA_MAXINTEGER + 1u
                                        : (unsigned long long)LUA_MAXINTEGER;
    for (; q < d->p; q++) {
      unsigned dig = (unsigned)(*q - '0');
      if (v > (lim - dig) / 10) return 0; /* out of range: jansson refuses it */
      v = v * 10 + dig;
    }
    lua_pushinteger(d->L, neg ? (lua_Integer)(0u - v) : (lua_Integer)v);
    return 1;
  } else {
    char buf[64], *endp;
    size_t n = (size_t)(d->p - s);
    double v;
    if (n >= sizeof buf) return 0;
    memcpy(buf, s, n);
    buf[n] = '\0';
    v = strtod(buf, &endp);
    if (endp != buf + n || isinf(v)) return 0; /* another locale's decimal point; overflow */
    lua_pushnumber(d->L, v);
    return 1;
  }
}

static int literal(dec_t *d, const char *word, size_t n) {
  if ((size_t)(d->end - d->p) < n || memcmp(d->p, word, n) != 0) return 0;
  d->p += n;
  return 1;
}

static int object(dec_t *d, int depth) {
  lua_State *L = d->L;
  int t;
  d->p++;
  lua_createtable(L, 0, 4);
  t = lua_gettop(L);
  skip_ws(d);
  if (d->p < d->end && *d->p == '}') {
    d->p++;
    return 1;
  }
  for (;;) {
    if (d->p >= d->end || *d->p != '"' || !string(d, 1)) return 0;
    lua_pushvalue(L, -1);
    if (lua_rawget(L, t) != LUA_TNIL) return 0; /* a duplicate key */
    lua_pop(L, 1);
    skip_ws(d);
    if (d->p >= d->end || *d->p != ':') return 0;
    d->p++;
    skip_ws(d);
    if (!value(d, depth + 1)) return 0;
    lua_rawset(L, t);
    skip_ws(d);
    if (d->p >= d->end) return 0;
    if (*d->p == '}') {
      d->p++;
      return 1;
    }
    if (*d->p != ',') return 0;
    d->p++;
    skip_ws(d);
  }
}

static int array(dec_t *d, int depth) {
  lua_State *L = d->L;
  lua_Integer i = 0;
  d->p++;
  lua_createtable(L, 4, 0);
  lua_pushvalue(L, -1); /* marked, so [] stays an array */
  lua_pushboolean(L, 1);
  lua_rawset(L, need(d, 2));
  skip_ws(d);
  if (d->p < d->end && *d->p == ']') {
    d->p++;
    return 1;
  }
  for (;;) {
    if (!value(d, depth + 1)) return 0;
    lua_rawseti(L, -2, ++i);
    skip_ws(d);
    if (d->p >= d->end) return 0;
    if (*d->p == ']') {
      d->p++;
      return 1;
    }
    if (*d->p != ',') return 0;
    d->p++;
    skip_ws(d);
  }
}

/* The value at d->p (no leading space), pushed. 0: declined; the caller resets the stack. */
static int value(dec_t *d, int depth) {
  if (d->p >= d->end) return 0;
  switch (*d->p) {
    case '{':
    case '[':
      /* value.c's path words the depth error */
      if (depth >= DX__LUA_MAX_DEPTH) return 0;
      luaL_checkstack(d->L, 6, "JSON nesting");
      return *d->p == '{' ? object(d, depth) : array(d, depth);
    case '"': return string(d, 0);
    case 't': return literal(d, "true", 4) ? (lua_pushboolean(d->L, 1), 1) : 0;
    case 'f': return literal(d, "false", 5) ? (lua_pushboolean(d->L, 0), 1) : 0;
    case 'n':
      if (!literal(d, "null", 4)) return 0;
      if (depth == 0 && d->top_nil) lua_pushnil(d->L);
      else lua_pushvalue(d->L, need(d, 1));
      return 1;
    default: return (*d->p == '-' || (*d->p >= '0' && *d->p <= '9')) ? number(d) : 0;
  }
}

int dx__lua_decode_json(lua_State *L, const char *json, size_t len, int top_null) {
  dec_t d;
  int top = lua_gettop(L);
  luaL_checkstack(L, 8, "JSON decoding");
  d.L = L;
  d.p = json;
  d.end = json + len;
  d.top_nil = !top_null;
  /* A bare number (a count, an id) needs neither slot: read it straight (anything after it,
  ** even blanks, goes the general way). */
  if (len > 0 && (*json == '-' || (*json >= '0' && *json <= '9'))) {
    if (number(&d)) {
      if (d.p == d.end) return 1;
      lua_pop(L, 1);
    }
    d.p = json;
  }
  d.fetched = 0;
  lua_pushnil(L);
  d.null_slot = lua_gettop(L);
  lua_pushnil(L);
  d.set_slot = lua_gettop(L);
  skip_ws(&d);
  if (value(&d, 0)) {
    skip_ws(&d);
    if (d.p == d.end) {
      lua_replace(L, top + 1);
      lua_settop(L, top + 1);
      return 1;
    }
  }
  lua_settop(L, top);
  return 0;
}
