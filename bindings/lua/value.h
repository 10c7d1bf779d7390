/*
** value.h -- Lua values <-> canonical JSON payloads (API.md §1), for the Lua binding.
**
** Mapping
**   nil (top level only)  <-> null          duroxide.null (sentinel) <-> null inside tables
**   boolean               <-> true/false
**   integer subtype       <-> integer       float subtype <-> real ("1.0" stays a float;
**                                           -0.0 round-trips as "-0.0"; NaN/inf refused)
**   string (UTF-8)        <-> string        (NUL bytes allowed in values, not in keys)
**   table with keys exactly 1..n, or marked by duroxide.array(t)  <-> array
**   table with string keys <-> object       empty unmarked table <-> {}
** Output is byte-identical to dx__json_canonical() of the same JSON: sorted keys, no
** whitespace, reals in their shortest exact form (dx__json_dump in core/src/json.c).
**
** duroxide.null is a zero-size full userdata with a protected metatable (__name and
** __tostring "duroxide.null"), created once per lua_State and kept in the registry, so it
** is the same value across calls and across re-requires of the module.
** Array marks live in a weak-keyed set in the registry (not in the table's metatable), so
** they never clash with user metatables and vanish with the table.
**
** Encoding errors name the offending path from the root name the caller gives:
**   input.items[3]: cannot encode a function
**   input.x: cannot encode NaN or infinity
**   input.self: cyclic table (refers back to input)
**   input: mixed table (array and string keys)
**   input: table key must be a string or integer
**   input: sparse table (integer keys are not 1..n; use duroxide.null for holes)
**   input.name: string is not valid UTF-8
**   input.a.a...: nested deeper than 100 levels
** Keys that are not identifiers appear as input["a key"].
**
** Stack effects use the Lua manual's notation [-o, +p, x].
*/
#ifndef DX_LUA_VALUE_H
#define DX_LUA_VALUE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <lua.h>

/* Deepest table nesting encoded or decoded; matches core/src/json.c. */
#define DX__LUA_MAX_DEPTH 100

/* [-0, +0, -] Canonical JSON of the value at idx (nil -> "null"), malloc'd and owned by the
** caller (free()). NULL on failure with a message naming the path (rooted at `root`, e.g.
** "input") in errbuf. Never raises a Lua error or calls a metamethod, so callers may hold
** C resources across the call. No payload size limit is applied here. */
char *dx__lua_to_json(lua_State *L, int idx, const char *root, char *errbuf, size_t errlen);
/* The same, written into buf (cap bytes) when the one-pass encoder's text fits: buf is
** returned, else a malloc'd text (or NULL). A small activity result needs no malloc. */
char *dx__lua_to_json_in(lua_State *L, int idx, const char *root, char *errbuf, size_t errlen,
                         char *buf, size_t cap);
/* The same through jansson alone (what dx__lua_to_json falls back to when the one-pass
** encoder declines); tests compare the two. */
char *dx__lua_to_json_tree(lua_State *L, int idx, const char *root, char *errbuf,
                           size_t errlen);

/* [-0, +(0|1), m] Decode JSON text and push the Lua value: 1 when pushed, 0 (nothing pushed)
** with the reason in errbuf ("invalid JSON at line L, column C: ..." and the like). A
** top-level null pushes nil; null inside tables becomes duroxide.null; arrays come back
** marked, so [] stays an array. Memory errors are reported the same way, not raised. */
int dx__lua_push_json(lua_State *L, const char *json, size_t len, char *errbuf, size_t errlen);
/* [-0, +1, e] The same where a Lua error may be raised (a C function called from Lua, or
** inside a protected call): the one-pass decoder runs without a protected call of its own
** (one per payload was a good part of a small payload's cost), and an error is raised as
** "<what>: <reason>" (luaL_error, with what dx__lua_push_json would have reported). */
void dx__lua_push_json_or_raise(lua_State *L, const char *json, size_t len, const char *what);
/* The same through jansson alone (what dx__lua_push_json falls back to when the one-pass
** decoder declines); tests compare the two. */
int dx__lua_push_json_tree(lua_State *L, const char *json, size_t len, char *errbuf,
                           size_t errlen);

/* [-0, +0, -] jsonenc.c's one-pass encoder: the canonical JSON of a value (nothing the
** encoder refuses, at most 100 levels), malloc'd; NULL when declined (use
** dx__lua_to_json, which also words the errors). Never raises. */
char *dx__lua_encode_json(lua_State *L, int idx);
/* The same, written into buf (cap bytes) when it fits: buf is returned, else a malloc'd text. */
char *dx__lua_encode_json_in(lua_State *L, int idx, char *buf, size_t cap);
/* The canonical JSON text of integer v, NUL-terminated, at the end of buf (returned: a
** pointer into buf). The one writer of integers: the encoder, and orch.c's codec-free path. */
#define DX_JSON_INT_MAX 24 /* "-9223372036854775808" and its NUL */
const char *dx__json_int_text(lua_Integer v, char buf[DX_JSON_INT_MAX]);
/* The registry keys (lua_rawgetp) of the null sentinel and of the array set. */
const void *dx__lua_null_key(void);
const void *dx__lua_arrays_key(void);

/* [-0, +(0|1), m] jsondec.c's one-pass decoder: pushes the value of JSON text it is sure
** jansson reads the same way and returns 1; else returns 0 with nothing pushed (use
** dx__lua_push_json, which decides and words the error). Raises on memory errors: call it
** where a Lua error may be raised. top_null: a top-level null becomes duroxide.null (as a
** payload inside a table) instead of nil. */
int dx__lua_decode_json(lua_State *L, const char *json, size_t len, int top_null);

/* 1 when none of the 8 bytes at s needs a look of its own in JSON string text: no control
** character, quote, backslash or byte >= 0x80. One test for eight bytes (exact, with the
** usual bit tricks): most text the JSON coders see is plain ASCII. */
static inline int dx__json_plain8(const char *s) {
  const uint64_t lo = UINT64_C(0x0101010101010101), hi = UINT64_C(0x8080808080808080);
  uint64_t w, q, bs;
  memcpy(&w, s, sizeof w);
  q = w ^ (lo * '"');
  bs = w ^ (lo * '\\');
  /* a byte >= 0x80, one below 0x20, a zero byte of q (a quote) or of bs (a backslash) */
  return ((w | ((w - lo * 0x20) & ~w) | ((q - lo) & ~q) | ((bs - lo) & ~bs)) & hi) == 0;
}

/* [-0, +1, m] The weak-keyed set of tables marked as arrays (created on first use). */
void dx__lua_push_array_set(lua_State *L);

/* [-0, +1, m] Push the duroxide.null sentinel (created on first use). */
void dx__lua_push_null(lua_State *L);
/* [-0, +0, -] 1 when the value at idx is duroxide.null. */
int dx__lua_is_null(lua_State *L, int idx);

/* lua_CFunction for duroxide.array([t]): marks table t as an array and returns it;
** with no argument returns a new empty marked table. [-(0|1), +1, e] */
int dx__lua_array(lua_State *L);
/* [-0, +0, -] 1 when the value at idx is a table marked as an array. */
int dx__lua_is_array_marked(lua_State *L, int idx);

#endif
