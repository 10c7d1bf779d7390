/*
** value.c -- Lua values <-> canonical JSON (see value.h for the mapping and decisions).
**
** Encoding builds a jansson tree and dumps it with the flags core/src/json.c uses, so the
** bytes equal dx__json_canonical() of the same JSON. The encoder only uses Lua API calls
** that neither allocate nor run metamethods (lua_next, lua_rawgeti, lua_rawget,
** lua_rawgetp, lua_tolstring on strings), so it cannot raise; the decoder does its pushing
** inside lua_pcall so a memory error cannot leak the jansson tree.
*/
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>

#include "jsonout.h"
#include "util.h"
#include "value.h"

#define LOAD_FLAGS (JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL)
#define MAX_DEPTH DX__LUA_MAX_DEPTH
#define PATH_CHARS 200  /* longer paths are shown clipped */
#define KEY_CHARS 40    /* longer keys are shown clipped */

/* Registry keys: addresses are unique per process and need no string interning (which could
** raise a memory error inside the encoder). */
static char null_key;
static char arrays_key;

/* {===== shared helpers =====} */

static int utf8_valid(const unsigned char *s, size_t n) {
  return dx__utf8_valid_prefix((const char *)s, n) == n;
}

static void set_err(char *errbuf, size_t errlen, const char *fmt, ...) {
  va_list ap;
  if (!errbuf || errlen == 0) return;
  va_start(ap, fmt);
  vsnprintf(errbuf, errlen, fmt, ap);
  va_end(ap);
}

void dx__lua_push_array_set(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &arrays_key) == LUA_TTABLE) return;
  lua_pop(L, 1);
  lua_newtable(L);
  lua_createtable(L, 0, 1);
  lua_pushliteral(L, "k");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &arrays_key);
}

const void *dx__lua_null_key(void) { return &null_key; }
const void *dx__lua_arrays_key(void) { return &arrays_key; }

static int null_tostring(lua_State *L) {
  lua_pushliteral(L, "duroxide.null");
  return 1;
}

void dx__lua_push_null(lua_State *L) {
  if (lua_rawgetp(L, LUA_REGISTRYINDEX, &null_key) != LUA_TNIL) return;
  lua_pop(L, 1);
  lua_newuserdatauv(L, 0, 0);
  lua_createtable(L, 0, 3);
  lua_pushliteral(L, "duroxide.null");
  lua_setfield(L, -2, "__name");
  lua_pushliteral(L, "duroxide.null"); /* getmetatable() sees this; the table stays private */
  lua_setfield(L, -2, "__metatable");
  lua_pushcfunction(L, null_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_setmetatable(L, -2);
  lua_pushvalue(L, -1);
  lua_rawsetp(L, LUA_REGISTRYINDEX, &null_key);
}

int dx__lua_is_null(lua_State *L, int idx) {
  int r;
  if (lua_type(L, idx) != LUA_TUSERDATA) return 0;
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &null_key);
  r = lua_rawequal(L, idx, -1);
  lua_pop(L, 1);
  return r;
}

int dx__lua_array(lua_State *L) {
  if (lua_isnoneornil(L, 1)) {
    lua_settop(L, 0);
    lua_newtable(L);
  } else {
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 1);
  }
  dx__lua_push_array_set(L);
  lua_pushvalue(L, 1);
  lua_pushboolean(L, 1);
  lua_rawset(L, -3);
  lua_pop(L, 1);
  return 1;
}

/* Like dx__lua_is_array_marked with the set already at stack slot `set` (or nil there). */
static int marked_in(lua_State *L, int set, int idx) {
  int r;
  if (lua_type(L, set) != LUA_TTABLE) return 0;
  lua_pushvalue(L, idx);
  r = lua_rawget(L, set) != LUA_TNIL;
  lua_pop(L, 1);
  return r;
}

int dx__lua_is_array_marked(lua_State *L, int idx) {
  int r;
  if (lua_type(L, idx) != LUA_TTABLE) return 0;
  idx = lua_absindex(L, idx);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &arrays_key);
  r = marked_in(L, lua_gettop(L), idx);
  lua_pop(L, 1);
  return r;
}

/* {===== encoding =====} */

/* One step of the path from the root: a string key (its stack slot) or an array index. */
typedef struct {
  int key_slot; /* > 0: string key at this slot; 0: use index */
  lua_Integer index;
} seg_t;

typedef struct {
  lua_State *L;
  const char *root;
  int null_slot, arrays_slot;
  seg_t seg[MAX_DEPTH + 2];
  const void *open[MAX_DEPTH + 1]; /* tables being encoded, outermost first */
  int open_depth[MAX_DEPTH + 1];   /* path length of each, for cycle messages */
  int nopen;
  char *errbuf;
  size_t errlen;
} enc_t;

typedef struct {
  char buf[PATH_CHARS + 4];
  size_t len;
  int clipped;
} pathbuf_t;

static void pb_add(pathbuf_t *pb, const char *s, size_t n) {
  if (pb->clipped) return;
  if (n > PATH_CHARS - pb->len) {
    n = PATH_CHARS - pb->len;
    pb->clipped = 1;
  }
  memcpy(pb->buf + pb->len, s, n);
  pb->len += n;
  if (pb->clipped) {
    memcpy(pb->buf + pb->len, "...", 3);
    pb->len += 3;
  }
  pb->buf[pb->len] = '\0';
}

static int is_identifier(const char *s, size_t n) {
  size_t i;
  if (n == 0 || n > KEY_CHARS || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (i = 0; i < n; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return 0;
  }
  return 1;
}

/* `root` followed by the first n steps: input.items[3], input["a key"]. */
static void format_path(enc_t *e, int n, pathbuf_t *pb) {
  int i;
  pb->len = 0;
  pb->clipped = 0;
  pb->buf[0] = '\0';
  pb_add(pb, e->root, strlen(e->root));
  for (i = 0; i < n; i++) {
    char tmp[KEY_CHARS * 4 + 16];
    size_t t = 0, klen, k;
    if (e->seg[i].key_slot == 0) {
      t = (size_t)snprintf(tmp, sizeof tmp, "[%lld]", (long long)e->seg[i].index);
    } else {
      const char *key = lua_tolstring(e->L, e->seg[i].key_slot, &klen);
      if (is_identifier(key, klen)) {
        tmp[t++] = '.';
        memcpy(tmp + t, key, klen);
        t += klen;
      } else {
        tmp[t++] = '[';
        tmp[t++] = '"';
        for (k = 0; k < klen && k < KEY_CHARS; k++) {
          unsigned char c = (unsigned char)key[k];
          if (c == '"' || c == '\\') { tmp[t++] = '\\'; tmp[t++] = (char)c; }
          else if (c < 0x20 || c == 0x7f) t += (size_t)snprintf(tmp + t, 5, "\\%u", c);
          else tmp[t++] = (char)c; /* UTF-8 passes through; invalid bytes are the caller's */
        }
        if (k < klen) { memcpy(tmp + t, "...", 3); t += 3; }
        tmp[t++] = '"';
        tmp[t++] = ']';
      }
    }
    pb_add(pb, tmp, t);
  }
}

/* Record "path: message" for the value at path length n. Returns NULL for the caller. */
static json_t *fail(enc_t *e, int n, const char *msg) {
  pathbuf_t pb;
  format_path(e, n, &pb);
  set_err(e->errbuf, e->errlen, "%s: %s", pb.buf, msg);
  return NULL;
}

static json_t *encode(enc_t *e, int idx, int depth);

static json_t *encode_array(enc_t *e, int t, int depth, lua_Integer n) {
  lua_State *L = e->L;
  json_t *arr = json_array(), *child;
  lua_Integer i;
  if (!arr) return fail(e, depth, "out of memory");
  for (i = 1; i <= n; i++) {
    lua_rawgeti(L, t, i);
    e->seg[depth].key_slot = 0;
    e->seg[depth].index = i;
    child = encode(e, lua_gettop(L), depth + 1);
    lua_pop(L, 1);
    if (!child) goto error;
    if (json_array_append_new(arr, child) != 0) {
      fail(e, depth, "out of memory");
      goto error;
    }
  }
  return arr;
error:
  json_decref(arr);
  return NULL;
}

static json_t *encode_object(enc_t *e, int t, int depth) {
  lua_State *L = e->L;
  json_t *obj = json_object(), *child;
  if (!obj) return fail(e, depth, "out of memory");
  lua_pushnil(L);
  while (lua_next(L, t)) {
    size_t klen;
    const char *key = lua_tolstring(L, -2, &klen); /* a string: checked by the caller */
    e->seg[depth].key_slot = lua_gettop(L) - 1;
    if (memchr(key, '\0', klen)) {
      fail(e, depth + 1, "table key contains a NUL byte");
      goto error;
    }
    if (!utf8_valid((const unsigned char *)key, klen)) {
      fail(e, depth + 1, "table key is not valid UTF-8");
      goto error;
    }
    child = encode(e, lua_gettop(L), depth + 1);
    if (!child) goto error;
    if (json_object_set_new(obj, key, child) != 0) {
      fail(e, depth + 1, "out of memory");
      goto error;
    }
    lua_pop(L, 1);
  }
  return obj;
error:
  json_decref(obj); /* the stack is reset by dx__lua_to_json */
  return NULL;
}

static json_t *encode_table(enc_t *e, int t, int depth) {
  lua_State *L = e->L;
  const void *p = lua_topointer(L, t);
  lua_Integer nint = 0, kmin = LUA_MAXINTEGER, kmax = 0;
  size_t nstr = 0;
  int i, marked;
  json_t *r;
  for (i = 0; i < e->nopen; i++) {
    if (e->open[i] == p) {
      pathbuf_t back;
      char msg[PATH_CHARS + 64];
      format_path(e, e->open_depth[i], &back);
      snprintf(msg, sizeof msg, "cyclic table (refers back to %s)", back.buf);
      return fail(e, depth, msg);
    }
  }
  if (e->nopen >= MAX_DEPTH) return fail(e, depth, "nested deeper than 100 levels");
  /* First pass: classify the keys without touching values. */
  lua_pushnil(L);
  while (lua_next(L, t)) {
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING) {
      nstr++;
    } else if (kt == LUA_TNUMBER && lua_isinteger(L, -2)) {
      lua_Integer k = lua_tointeger(L, -2);
      nint++;
      if (k < kmin) kmin = k;
      if (k > kmax) kmax = k;
    } else {
      return fail(e, depth, "table key must be a string or integer");
    }
    lua_pop(L, 1);
  }
  marked = marked_in(L, e->arrays_slot, t);
  if (nstr > 0 && (nint > 0 || marked))
    return fail(e, depth, "mixed table (array and string keys)");
  /* Distinct integer keys with min 1 and max == count are exactly 1..n. */
  if (nint > 0 && (kmin != 1 || kmax != nint))
    return fail(e, depth,
                "sparse table (integer keys are not 1..n; use duroxide.null for holes)");
  e->open[e->nopen] = p;
  e->open_depth[e->nopen] = depth;
  e->nopen++;
  r = (nint > 0 || marked) ? encode_array(e, t, depth, nint) : encode_object(e, t, depth);
  e->nopen--;
  return r;
}

static json_t *encode(enc_t *e, int idx, int depth) {
  lua_State *L = e->L;
  json_t *j = NULL;
  switch (lua_type(L, idx)) {
    case LUA_TNIL: j = json_null(); break;
    case LUA_TBOOLEAN: j = json_boolean(lua_toboolean(L, idx)); break;
    case LUA_TNUMBER:
      if (lua_isinteger(L, idx)) {
        j = json_integer((json_int_t)lua_tointeger(L, idx));
      } else {
        double d = lua_tonumber(L, idx);
        if (!isfinite(d)) return fail(e, depth, "cannot encode NaN or infinity");
        j = json_real(d);
      }
      break;
    case LUA_TSTRING: {
      size_t n;
      const char *s = lua_tolstring(L, idx, &n);
      if (!utf8_valid((const unsigned char *)s, n))
        return fail(e, depth, "string is not valid UTF-8");
      j = json_stringn_nocheck(s, n);
      break;
    }
    case LUA_TTABLE: return encode_table(e, idx, depth);
    case LUA_TUSERDATA:
      if (lua_rawequal(L, idx, e->null_slot)) {
        j = json_null();
        break;
      }
      return fail(e, depth, "cannot encode a userdata");
    case LUA_TLIGHTUSERDATA: return fail(e, depth, "cannot encode a light userdata");
    case LUA_TFUNCTION: return fail(e, depth, "cannot encode a function");
    case LUA_TTHREAD: return fail(e, depth, "cannot encode a thread (coroutine)");
    default: return fail(e, depth, "cannot encode this value");
  }
  if (!j) return fail(e, depth, "out of memory");
  return j;
}

char *dx__lua_to_json(lua_State *L, int idx, const char *root, char *errbuf, size_t errlen) {
  return dx__lua_to_json_in(L, idx, root, errbuf, errlen, NULL, 0);
}

char *dx__lua_to_json_in(lua_State *L, int idx, const char *root, char *errbuf, size_t errlen,
                         char *buf, size_t cap) {
  char *s;
  if (errbuf && errlen) errbuf[0] = '\0';
  /* jsonenc.c writes plain values in one pass; the tree does the rest and the errors */
  if ((s = dx__lua_encode_json_in(L, idx, buf, cap)) != NULL) return s;
  return dx__lua_to_json_tree(L, idx, root, errbuf, errlen);
}

char *dx__lua_to_json_tree(lua_State *L, int idx, const char *root, char *errbuf,
                           size_t errlen) {
  enc_t e;
  int top = lua_gettop(L);
  json_t *j;
  char *s;
  if (!root) root = "value";
  if (errbuf && errlen) errbuf[0] = '\0';
  idx = lua_absindex(L, idx);
  /* Worst case per nesting level: key and value of lua_next; plus the two slots below. */
  if (!lua_checkstack(L, 2 * MAX_DEPTH + 8)) {
    set_err(errbuf, errlen, "%s: out of Lua stack space", root);
    return NULL;
  }
  memset(&e, 0, sizeof e);
  e.L = L;
  e.root = root;
  e.errbuf = errbuf;
  e.errlen = errlen;
  lua_rawgetp(L, LUA_REGISTRYINDEX, &null_key); /* nil until first created: nothing is null */
  e.null_slot = lua_gettop(L);
  lua_rawgetp(L, LUA_REGISTRYINDEX, &arrays_key);
  e.arrays_slot = lua_gettop(L);
  j = encode(&e, idx, 0);
  lua_settop(L, top);
  if (!j) return NULL;
  s = dx__json_dump(j);
  json_decref(j);
  if (!s) set_err(errbuf, errlen, "%s: out of memory", root);
  return s;
}

/* {===== decoding =====} */

/* [-0, +1, e] Push v; null_slot/set_slot hold the sentinel and the array set. */
static void push_value(lua_State *L, json_t *v, int depth, int null_slot, int set_slot) {
  switch (json_typeof(v)) {
    case JSON_OBJECT: {
      const char *key;
      json_t *x;
      if (depth >= MAX_DEPTH) luaL_error(L, "invalid JSON: nested deeper than %d levels", MAX_DEPTH);
      luaL_checkstack(L, 4, "JSON nesting");
      lua_createtable(L, 0, (int)json_object_size(v));
      json_object_foreach(v, key, x) {
        lua_pushstring(L, key);
        push_value(L, x, depth + 1, null_slot, set_slot);
        lua_rawset(L, -3);
      }
      break;
    }
    case JSON_ARRAY: {
      size_t i, n = json_array_size(v);
      if (depth >= MAX_DEPTH) luaL_error(L, "invalid JSON: nested deeper than %d levels", MAX_DEPTH);
      luaL_checkstack(L, 4, "JSON nesting");
      lua_createtable(L, n < 1u << 30 ? (int)n : 0, 0);
      for (i = 0; i < n; i++) {
        push_value(L, json_array_get(v, i), depth + 1, null_slot, set_slot);
        lua_rawseti(L, -2, (lua_Integer)i + 1);
      }
      lua_pushvalue(L, -1); /* mark it, so [] stays an array */
      lua_pushboolean(L, 1);
      lua_rawset(L, set_slot);
      break;
    }
    case JSON_STRING: lua_pushlstring(L, json_string_value(v), json_string_length(v)); break;
    case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(v)); break;
    case JSON_REAL: lua_pushnumber(L, json_real_value(v)); break;
    case JSON_TRUE: lua_pushboolean(L, 1); break;
    case JSON_FALSE: lua_pushboolean(L, 0); break;
    case JSON_NULL:
      if (depth == 0) lua_pushnil(L);
      else lua_pushvalue(L, null_slot);
      break;
  }
}

/* Protected body of dx__lua_push_json: [root lightuserdata] -> value. */
static int push_json_protected(lua_State *L) {
  json_t *root = lua_touserdata(L, 1);
  dx__lua_push_null(L);  /* slot 2 */
  dx__lua_push_array_set(L); /* slot 3 */
  push_value(L, root, 0, 2, 3);
  return 1;
}

/* Protected body of the fast path: [text lightuserdata, length] -> value, true | false. */
static int push_fast_protected(lua_State *L) {
  const char *json = lua_touserdata(L, 1);
  size_t len = (size_t)lua_tointeger(L, 2);
  if (!dx__lua_decode_json(L, json, len, 0)) return 0;
  lua_pushboolean(L, 1);
  return 2;
}

int dx__lua_push_json(lua_State *L, const char *json, size_t len, char *errbuf, size_t errlen) {
  if (errbuf && errlen) errbuf[0] = '\0';
  /* jsondec.c takes the text it is sure of in one pass; jansson decides the rest */
  if (json && lua_checkstack(L, 3)) {
    lua_pushcfunction(L, push_fast_protected);
    lua_pushlightuserdata(L, (void *)json);
    lua_pushinteger(L, (lua_Integer)len);
    if (lua_pcall(L, 2, 2, 0) == LUA_OK && lua_toboolean(L, -1)) {
      lua_pop(L, 1);
      return 1;
    }
    lua_pop(L, 2); /* declined (nil, nil) or an error (message, nil) */
  }
  return dx__lua_push_json_tree(L, json, len, errbuf, errlen);
}

void dx__lua_push_json_or_raise(lua_State *L, const char *json, size_t len, const char *what) {
  char err[512];
  luaL_checkstack(L, 3, what);
  if (json && dx__lua_decode_json(L, json, len, 0)) return;
  if (!dx__lua_push_json_tree(L, json, len, err, sizeof err)) luaL_error(L, "%s: %s", what, err);
}

int dx__lua_push_json_tree(lua_State *L, const char *json, size_t len, char *errbuf,
                           size_t errlen) {
  json_error_t je;
  json_t *root;
  int st;
  if (errbuf && errlen) errbuf[0] = '\0';
  root = json_loadb(json ? json : "", json ? len : 0, LOAD_FLAGS, &je);
  if (!root) {
    set_err(errbuf, errlen, "invalid JSON at line %d, column %d: %s", je.line, je.column,
            je.text);
    return 0;
  }
  if (!lua_checkstack(L, 3)) {
    json_decref(root);
    set_err(errbuf, errlen, "out of Lua stack space");
    return 0;
  }
  lua_pushcfunction(L, push_json_protected);
  lua_pushlightuserdata(L, root);
  st = lua_pcall(L, 1, 1, 0);
  json_decref(root);
  if (st != LUA_OK) {
    const char *msg = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "error";
    set_err(errbuf, errlen, "%s", msg);
    lua_pop(L, 1);
    return 0;
  }
  return 1;
}
