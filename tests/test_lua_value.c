/* test_lua_value.c -- the Lua <-> canonical JSON value codec (bindings/lua/value.c). */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "codec.h"
#include "testlib.h"
#include "value.h"

/* {===== harness =====} */

/* encode(v) -> json | nil, err  (root name "input"; checks the stack is left balanced) */
static int l_encode(lua_State *L) {
  char err[512];
  char *s;
  int top;
  lua_settop(L, 1);
  top = lua_gettop(L);
  s = dx__lua_to_json(L, 1, "input", err, sizeof err);
  if (lua_gettop(L) != top) return luaL_error(L, "dx__lua_to_json changed the stack");
  if (!s) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  lua_pushstring(L, s);
  free(s);
  return 1;
}

/* decode(json) -> true, value | false, err */
static int l_decode(lua_State *L) {
  size_t n;
  const char *j = luaL_checklstring(L, 1, &n);
  char err[512];
  int top = lua_gettop(L);
  if (!dx__lua_push_json(L, j, n, err, sizeof err)) {
    if (lua_gettop(L) != top) return luaL_error(L, "dx__lua_push_json pushed on failure");
    lua_pushboolean(L, 0);
    lua_pushstring(L, err);
    return 2;
  }
  if (lua_gettop(L) != top + 1) return luaL_error(L, "dx__lua_push_json did not push one value");
  lua_pushboolean(L, 1);
  lua_insert(L, -2);
  return 2;
}

/* encode_fast(v) -> json | nil: jsonenc.c alone; encode_tree(v) -> json | nil, err: jansson */
static int l_encode_fast(lua_State *L) {
  char *s;
  int top;
  lua_settop(L, 1);
  top = lua_gettop(L);
  s = dx__lua_encode_json(L, 1);
  if (lua_gettop(L) != top) return luaL_error(L, "dx__lua_encode_json changed the stack");
  if (!s) return 0;
  lua_pushstring(L, s);
  free(s);
  return 1;
}

static int l_encode_tree(lua_State *L) {
  char err[512], *s;
  lua_settop(L, 1);
  s = dx__lua_to_json_tree(L, 1, "input", err, sizeof err);
  if (!s) {
    lua_pushnil(L);
    lua_pushstring(L, err);
    return 2;
  }
  lua_pushstring(L, s);
  free(s);
  return 1;
}

/* decode_fast(json) -> handled, value: jsondec.c's one-pass decoder alone */
static int l_decode_fast(lua_State *L) {
  size_t n;
  const char *j = luaL_checklstring(L, 1, &n);
  int top = lua_gettop(L);
  if (!dx__lua_decode_json(L, j, n, 0)) {
    if (lua_gettop(L) != top) return luaL_error(L, "dx__lua_decode_json pushed when declining");
    lua_pushboolean(L, 0);
    return 1;
  }
  if (lua_gettop(L) != top + 1) return luaL_error(L, "dx__lua_decode_json did not push one value");
  lua_pushboolean(L, 1);
  lua_insert(L, -2);
  return 2;
}

/* decode_tree(json) -> true, value | false, err: the jansson path alone */
static int l_decode_tree(lua_State *L) {
  size_t n;
  const char *j = luaL_checklstring(L, 1, &n);
  char err[512];
  if (!dx__lua_push_json_tree(L, j, n, err, sizeof err)) {
    lua_pushboolean(L, 0);
    lua_pushstring(L, err);
    return 2;
  }
  lua_pushboolean(L, 1);
  lua_insert(L, -2);
  return 2;
}

/* canonical(json) -> the core canonicalizer's bytes (or raises) */
static int l_canonical(lua_State *L) {
  size_t n;
  const char *j = luaL_checklstring(L, 1, &n);
  char *out;
  dx_error_t err;
  if (dx__json_canonical(j, n, &out, &err) != DX_OK) return luaL_error(L, "%s", err.msg);
  lua_pushstring(L, out);
  free(out);
  return 1;
}

static int l_is_array(lua_State *L) {
  lua_pushboolean(L, dx__lua_is_array_marked(L, 1));
  return 1;
}

static int l_is_null(lua_State *L) {
  lua_pushboolean(L, dx__lua_is_null(L, 1));
  return 1;
}

/* A state with a `duroxide` global holding array/null, and the test helpers as globals. */
static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  ASSERT(L);
  luaL_openlibs(L);
  lua_newtable(L);
  lua_pushcfunction(L, dx__lua_array);
  lua_setfield(L, -2, "array");
  dx__lua_push_null(L);
  lua_setfield(L, -2, "null");
  lua_setglobal(L, "duroxide");
  lua_register(L, "encode", l_encode);
  lua_register(L, "decode", l_decode);
  lua_register(L, "decode_fast", l_decode_fast);
  lua_register(L, "encode_fast", l_encode_fast);
  lua_register(L, "encode_tree", l_encode_tree);
  lua_register(L, "decode_tree", l_decode_tree);
  lua_register(L, "canonical", l_canonical);
  lua_register(L, "is_array", l_is_array);
  lua_register(L, "is_null", l_is_null);
  return L;
}

/* Helpers shared by the Lua snippets: deep equality that also compares math.type, the sign
** of zero and null identity; and a check for an exact encode error. */
static const char *lua_prelude =
    "function deq(a, b, path)\n"
    "  path = path or 'v'\n"
    "  if type(a) ~= type(b) then error(path .. ': type ' .. type(a) .. ' vs ' .. type(b)) end\n"
    "  if type(a) == 'number' then\n"
    "    if math.type(a) ~= math.type(b) then error(path .. ': math.type differs') end\n"
    "    if a ~= b then error(path .. ': ' .. tostring(a) .. ' vs ' .. tostring(b)) end\n"
    "    if a == 0 and math.type(a) == 'float' and 1/a ~= 1/b then error(path .. ': sign of zero') end\n"
    "  elseif type(a) == 'table' then\n"
    "    local n = 0\n"
    "    for k, v in pairs(a) do n = n + 1; deq(v, b[k], path .. '.' .. tostring(k)) end\n"
    "    for _ in pairs(b) do n = n - 1 end\n"
    "    if n ~= 0 then error(path .. ': key count differs') end\n"
    "  elseif a ~= b then error(path .. ': ' .. tostring(a) .. ' vs ' .. tostring(b)) end\n"
    "end\n"
    "function expect_error(v, msg)\n"
    "  local j, err = encode(v)\n"
    "  if j then error('expected an error, got ' .. j) end\n"
    "  if err ~= msg then error('got error [' .. err .. '] want [' .. msg .. ']') end\n"
    "end\n";

static void run_lua(lua_State *L, const char *code) {
  if (luaL_loadstring(L, code) != LUA_OK || lua_pcall(L, 0, 0, 0) != LUA_OK)
    DX_FAIL_AT("lua: %s", lua_tostring(L, -1));
}

static lua_State *test_state(void) {
  lua_State *L = new_state();
  run_lua(L, lua_prelude);
  return L;
}

/* {===== tests =====} */

DX_TEST(property_round_trip_random_values) {
  lua_State *L = test_state();
  run_lua(L,
      "math.randomseed(20240611)\n"
      "local special_floats = {0.1, 1e300, -1e300, -0.0, 0.0, 5e-324, 1.0, -1.5, 2^53, 2^63,\n"
      "  1e-300, 123.456, 1/3, 1e16, 1e20, 0.30000000000000004}\n"
      "local special_ints = {0, 1, -1, math.maxinteger, math.mininteger, 2^53|0, 1000000}\n"
      "local function rfloat()\n"
      "  if math.random(3) == 1 then return special_floats[math.random(#special_floats)] end\n"
      "  while true do\n"
      "    local d = string.unpack('<d', string.pack('<i8', math.random(math.mininteger, math.maxinteger)))\n"
      "    if d == d and d ~= math.huge and d ~= -math.huge then return d end\n"
      "  end\n"
      "end\n"
      "local function rint()\n"
      "  if math.random(3) == 1 then return special_ints[math.random(#special_ints)] end\n"
      "  return math.random(math.mininteger, math.maxinteger)\n"
      "end\n"
      "local function rchar()\n"
      "  local r = math.random(10)\n"
      "  if r <= 5 then return string.char(math.random(0x20, 0x7e)) end\n"
      "  if r == 6 then return string.char(math.random(0, 0x1f)) end\n"  /* incl. NUL */
      "  if r == 7 then return utf8.char(math.random(0x80, 0x7ff)) end\n"
      "  if r == 8 then\n"
      "    local c = math.random(0x800, 0xfffd)\n"
      "    if c >= 0xd800 and c <= 0xdfff then c = 0x4e2d end\n"
      "    return utf8.char(c)\n"
      "  end\n"
      "  if r == 9 then return utf8.char(math.random(0x10000, 0x10ffff)) end\n"
      "  return ({'\"', '\\\\', '/', '\\127'})[math.random(4)]\n"
      "end\n"
      "local function rstr(nul_ok)\n"
      "  local t = {}\n"
      "  for i = 1, math.random(0, 12) do\n"
      "    local c = rchar()\n"
      "    if nul_ok or c ~= '\\0' then t[#t + 1] = c end\n"
      "  end\n"
      "  return table.concat(t)\n"
      "end\n"
      "local gen\n"
      "local function scalar()\n"
      "  local r = math.random(5)\n"
      "  if r == 1 then return math.random(2) == 1 end\n"
      "  if r == 2 then return rint() end\n"
      "  if r == 3 then return rfloat() end\n"
      "  if r == 4 then return rstr(true) end\n"
      "  return duroxide.null\n"
      "end\n"
      "function gen(depth)\n"
      "  local r = math.random(depth > 4 and 1 or 8)\n"
      "  if r <= 3 then return scalar() end\n"
      "  if r <= 5 then\n"
      "    local n = math.random(0, 6)\n"
      "    local t = {}\n"
      "    for i = 1, n do t[i] = gen(depth + 1) end\n"
      "    if n == 0 or math.random(2) == 1 then duroxide.array(t) end\n"
      "    return t\n"
      "  end\n"
      "  local t = {}\n"
      "  for i = 1, math.random(0, 10) do t[rstr(false)] = gen(depth + 1) end\n"
      "  return t\n"
      "end\n"
      "for i = 1, 2000 do\n"
      "  local v = gen(0)\n"
      "  if i == 1 then v = nil end\n"
      "  local j1, err = encode(v)\n"
      "  if not j1 then error('encode failed: ' .. err) end\n"
      "  local ok, v2 = decode(j1)\n"
      "  if not ok then error('decode of ' .. j1 .. ' failed: ' .. v2) end\n"
      "  local j2 = assert(encode(v2))\n"
      "  if j1 ~= j2 then error('not stable:\\n' .. j1 .. '\\n' .. j2) end\n"
      "  if canonical(j1) ~= j1 then error('differs from dx__json_canonical: ' .. j1) end\n"
      "  if v == duroxide.null then v = nil end\n"  /* top-level null decodes to nil */
      "  deq(v, v2)\n"
      "end\n");
  lua_close(L);
}

DX_TEST(scalars_and_number_subtypes) {
  lua_State *L = test_state();
  run_lua(L,
      "local cases = {\n"
      "  {1, '1'}, {1.0, '1.0'}, {-0.0, '-0.0'}, {0.1, '0.1'},\n"
      "  {1e300, '1e300'}, {2^53, '9007199254740992.0'}, {1e20, '1e20'},\n"
      "  {math.maxinteger, '9223372036854775807'}, {math.mininteger, '-9223372036854775808'},\n"
      "  {true, 'true'}, {false, 'false'}, {'hi', '\"hi\"'}, {'a\\0b', '\"a\\\\u0000b\"'},\n"
      "  {'\\u{e9}\\n', '\"\\u{e9}\\\\n\"'}, {duroxide.null, 'null'},\n"
      "}\n"
      "for _, c in ipairs(cases) do\n"
      "  local j = assert(encode(c[1]))\n"
      "  if j ~= c[2] then error(tostring(c[1]) .. ' -> ' .. j .. ', want ' .. c[2]) end\n"
      "end\n"
      "assert(encode(nil) == 'null')\n"
      "local ok, v = decode('1'); assert(ok and math.type(v) == 'integer' and v == 1)\n"
      "ok, v = decode('1.0'); assert(ok and math.type(v) == 'float' and v == 1)\n"
      "ok, v = decode('-0.0'); assert(ok and math.type(v) == 'float' and 1/v < 0)\n"
      "ok, v = decode('1e2'); assert(ok and math.type(v) == 'float' and v == 100)\n"
      "ok, v = decode('null'); assert(ok and v == nil)\n"
      "ok, v = decode('\"a\\\\u0000b\"'); assert(ok and v == 'a\\0b' and #v == 3)\n");
  lua_close(L);
}

DX_TEST(tables_arrays_objects_and_null) {
  lua_State *L = test_state();
  run_lua(L,
      "assert(encode({}) == '{}')\n"
      "assert(encode(duroxide.array({})) == '[]')\n"
      "assert(encode(duroxide.array()) == '[]')\n"
      "assert(encode({1, 2, 3}) == '[1,2,3]')\n"
      "assert(encode({b = 1, a = {2, 3}, c = {}}) == '{\"a\":[2,3],\"b\":1,\"c\":{}}')\n"
      "assert(encode({1, duroxide.null, 3}) == '[1,null,3]')\n"
      "assert(encode({a = duroxide.null}) == '{\"a\":null}')\n"
      "assert(encode(duroxide.array({'x'})) == '[\"x\"]')\n"
      /* raw access only: metamethods are never called */
      "local mt = {__index = function() error('index') end, __pairs = function() error('pairs') end,\n"
      "            __len = function() error('len') end, __name = 'Thing'}\n"
      "assert(encode(setmetatable({1, 2}, mt)) == '[1,2]')\n"
      "assert(encode(setmetatable({k = 1}, mt)) == '{\"k\":1}')\n"
      /* a shared (non-cyclic) subtable is fine */
      "local s = {1}\n"
      "assert(encode({a = s, b = s, c = {s}}) == '{\"a\":[1],\"b\":[1],\"c\":[[1]]}')\n"
      /* decoding: arrays come back marked, objects not, null becomes the sentinel */
      "local ok, v = decode('[]'); assert(ok and is_array(v) and next(v) == nil)\n"
      "assert(encode(v) == '[]')\n"
      "ok, v = decode('{}'); assert(ok and not is_array(v) and encode(v) == '{}')\n"
      "ok, v = decode('[null,1,null]'); assert(ok and #v == 3 and v[1] == duroxide.null and is_null(v[3]))\n"
      "ok, v = decode('{\"a\":null,\"b\":[[]]}'); assert(ok and v.a == duroxide.null and is_array(v.b[1]))\n"
      "assert(encode(v) == '{\"a\":null,\"b\":[[]]}')\n"
      "assert(not is_array({}) and not is_array(1) and not is_null({}) and not is_null(nil))\n"
      /* marking survives and does not touch the metatable */
      "local t = setmetatable({}, mt); assert(duroxide.array(t) == t and getmetatable(t) == mt)\n"
      "assert(encode(t) == '[]')\n");
  lua_close(L);
}

DX_TEST(null_sentinel_is_unique_and_stable) {
  lua_State *L = test_state();
  int top = lua_gettop(L);
  dx__lua_push_null(L);
  dx__lua_push_null(L);
  ASSERT(lua_rawequal(L, -1, -2));
  ASSERT(dx__lua_is_null(L, -1));
  ASSERT_EQ(lua_type(L, -1), LUA_TUSERDATA);
  lua_settop(L, top);
  lua_pushnil(L);
  ASSERT(!dx__lua_is_null(L, -1));
  lua_settop(L, top);
  run_lua(L,
      "assert(tostring(duroxide.null) == 'duroxide.null')\n"
      "assert(getmetatable(duroxide.null) == 'duroxide.null')\n"
      "assert(not pcall(setmetatable, duroxide.null, {}))\n"
      "local ok, v = decode('[null]'); assert(v[1] == duroxide.null)\n"
      "assert(rawequal(v[1], duroxide.null))\n");
  lua_close(L);
}

DX_TEST(error_paths_name_the_value) {
  lua_State *L = test_state();
  run_lua(L,
      "expect_error({items = {1, 2, function() end}}, 'input.items[3]: cannot encode a function')\n"
      "local t = {}; t.self = t\n"
      "expect_error(t, 'input.self: cyclic table (refers back to input)')\n"
      "local a = {b = {}}; a.b.c = {a.b}\n"
      "expect_error(a, 'input.b.c[1]: cyclic table (refers back to input.b)')\n"
      "expect_error({x = 0/0}, 'input.x: cannot encode NaN or infinity')\n"
      "expect_error({x = {math.huge}}, 'input.x[1]: cannot encode NaN or infinity')\n"
      "expect_error(-math.huge, 'input: cannot encode NaN or infinity')\n"
      "expect_error({1, 2, a = 1}, 'input: mixed table (array and string keys)')\n"
      "expect_error(duroxide.array({a = 1}), 'input: mixed table (array and string keys)')\n"
      "expect_error({[true] = 1}, 'input: table key must be a string or integer')\n"
      "expect_error({k = {[1.5] = 1}}, 'input.k: table key must be a string or integer')\n"
      "expect_error({[1] = 1, [3] = 3},\n"
      "  'input: sparse table (integer keys are not 1..n; use duroxide.null for holes)')\n"
      "expect_error({[0] = 'z'},\n"
      "  'input: sparse table (integer keys are not 1..n; use duroxide.null for holes)')\n"
      "expect_error({name = 'ab\\xffcd'}, 'input.name: string is not valid UTF-8')\n"
      "expect_error({'\\xed\\xa0\\x80'}, 'input[1]: string is not valid UTF-8')\n"  /* surrogate */
      "expect_error({['a key'] = {f = print}}, 'input[\"a key\"].f: cannot encode a function')\n"
      "expect_error({['a\\0b'] = 1}, 'input[\"a\\\\0b\"]: table key contains a NUL byte')\n"
      "expect_error({['\\xff'] = 1}, 'input[\"\\xff\"]: table key is not valid UTF-8')\n"
      "expect_error(coroutine.create(print), 'input: cannot encode a thread (coroutine)')\n"
      "expect_error({io.stdout}, 'input[1]: cannot encode a userdata')\n"
      /* 100 nested tables are fine, 101 are not */
      "local deep = 1\n"
      "for i = 1, 100 do deep = {deep} end\n"
      "assert(encode(deep))\n"
      "local j = assert(encode(deep)); local ok = decode(j); assert(ok)\n"
      "local j2, err = encode({deep})\n"
      "assert(not j2 and err:find('^input%[1%]%[1%]') and err:find(': nested deeper than 100 levels$'), err)\n");
  lua_close(L);
}

/* The one-pass encoder (jsonenc.c) writes exactly jansson's canonical bytes for every value
** it takes, takes every value the encoder accepts (floats included), and leaves what it
** refuses to jansson. */
DX_TEST(encode_fast_path_matches_jansson) {
  lua_State *L = test_state();
  run_lua(L,
      "math.randomseed(777)\n"
      "local handled, declined = 0, 0\n"
      "local function check(v, must_handle)\n"
      "  local t, err = encode_tree(v)\n"
      "  local f = encode_fast(v)\n"
      "  if f then\n"
      "    handled = handled + 1\n"
      "    if f ~= t then error('fast encoder wrote ' .. f .. ' where jansson gives ' .. tostring(t) .. ' ' .. tostring(err)) end\n"
      "  else\n"
      "    declined = declined + 1\n"
      "    if must_handle then error('fast encoder declined ' .. tostring(t) .. ' ' .. tostring(err)) end\n"
      "  end\n"
      "end\n"
      "local function rstr(bad)\n"
      "  local t = {}\n"
      "  for _ = 1, math.random(0, 10) do\n"
      "    local r = math.random(12)\n"
      "    if r <= 5 then t[#t + 1] = string.char(math.random(0x20, 0x7e))\n"
      "    elseif r == 6 then t[#t + 1] = string.char(math.random(bad and 0 or 1, 0x1f))\n"
      "    elseif r == 7 then t[#t + 1] = utf8.char(math.random(0x80, 0x7ff))\n"
      "    elseif r == 8 then t[#t + 1] = utf8.char(math.random(0x800, 0xd7ff))\n"
      "    elseif r == 9 then t[#t + 1] = utf8.char(math.random(0x10000, 0x10ffff))\n"
      "    elseif r == 10 then t[#t + 1] = ({'\"', '\\\\', '/', '\\127', 'a', 'aa', 'b'})[math.random(7)]\n"
      "    elseif r == 11 and bad then t[#t + 1] = ({'\\255', '\\192\\128', '\\237\\160\\128', '\\0'})[math.random(4)]\n"
      "    else t[#t + 1] = 'k' end\n"
      "  end\n"
      "  return table.concat(t)\n"
      "end\n"
      "local gen\n"
      "local function rfloat()\n"
      "  while true do\n"
      "    local d = string.unpack('<d', string.pack('<i8', math.random(math.mininteger, math.maxinteger)))\n"
      "    if d == d and d ~= math.huge and d ~= -math.huge then return d end\n"
      "  end\n"
      "end\n"
      "local function scalar(bad)\n"
      "  local r = math.random(bad and 9 or 8)\n"
      "  if r == 1 then return math.random(2) == 1 end\n"
      "  if r == 2 then return math.random(math.mininteger, math.maxinteger) end\n"
      "  if r == 3 then return ({0, 1, -1, math.maxinteger, math.mininteger, 10, -10, 99})[math.random(8)] end\n"
      "  if r == 4 then return rstr(bad) end\n"
      "  if r == 5 then return duroxide.null end\n"
      "  if r == 6 then return rstr(false) end\n"
      "  if r == 7 then return ({1.5, -0.0, 0.0, 1e300, -1e300, 0.1, 5e-324, 1e16, 1e17, 1e-6, 1e-7,\n"
      "    1/3, 2^53, 2^63, 123.456, 1.2345678901234567e-6, 0.30000000000000004})[math.random(17)] end\n"
      "  if r == 8 then return rfloat() end\n"
      "  return ({print, io.stdout, coroutine.create(print), 0/0, math.huge, -math.huge})[math.random(6)]\n"
      "end\n"
      "function gen(depth, bad)\n"
      "  local r = math.random(depth > 4 and 1 or 8)\n"
      "  if r <= 3 then return scalar(bad) end\n"
      "  if r <= 5 then\n"
      "    local n = math.random(0, 6)\n"
      "    local t = {}\n"
      "    for i = 1, n do t[i] = gen(depth + 1, bad) end\n"
      "    if n == 0 or math.random(2) == 1 then duroxide.array(t) end\n"
      "    if bad and math.random(10) == 1 then t[n + 2] = 1 end\n"
      "    if bad and math.random(10) == 1 then t.x = 1 end\n"
      "    return t\n"
      "  end\n"
      "  local t = {}\n"
      "  for _ = 1, math.random(0, 6) do t[rstr(bad and math.random(4) == 1)] = gen(depth + 1, bad) end\n"
      "  if bad and math.random(10) == 1 then t[math.random(2) == 1 and 1.5 or true] = 1 end\n"
      "  if bad and math.random(20) == 1 then t.self = t end\n"
      "  return t\n"
      "end\n"
      "for i = 1, 3000 do check(gen(0, false), true) end\n"
      "for i = 1, 30000 do check(rfloat(), true) end\n"
      "for i = 1, 3000 do check(gen(0, true), false) end\n"
      "-- nesting: 100 levels are written, 101 are left to jansson (which refuses them)\n"
      "local deep = 1\n"
      "for _ = 1, 100 do deep = {deep} end\n"
      "check(deep, true)\n"
      "check({deep}, false)\n"
      "-- many keys, sorted bytewise (a key that is a prefix of another comes first)\n"
      "local big = {}\n"
      "for k = 1, 3000 do big['k' .. k] = k; big[string.rep('z', k % 7)] = k end\n"
      "check(big, true)\n"
      "check({['\\195\\169'] = 1, e = 2, ['E'] = 3, ['e\\0'] = 4}, false)\n"
      "check({['\\195\\169'] = 1, e = 2, ['E'] = 3, ['\\127'] = 4, [''] = 5}, true)\n"
      "assert(handled > 3000 and declined > 500, handled .. ' handled, ' .. declined .. ' declined')\n");
  lua_close(L);
}

/* The one-pass decoder (jsondec.c) takes only what jansson reads the same way: on every
** input it handles, jansson succeeds with an equal value (math.type, sign of zero, null,
** array marks); what it declines goes to jansson. Canonical payloads are all handled. */
DX_TEST(decode_fast_path_matches_jansson) {
  lua_State *L = test_state();
  run_lua(L,
      "local function same(a, b, path)\n"
      "  deq(a, b, path)\n"
      "  if type(a) == 'table' then\n"
      "    assert(is_array(a) == is_array(b), path .. ': array mark differs')\n"
      "    for k, v in pairs(a) do same(v, b[k], path .. '.' .. tostring(k)) end\n"
      "  end\n"
      "end\n"
      "local handled, declined = 0, 0\n"
      "local function check(j, must_handle)\n"
      "  local okt, vt = decode_tree(j)\n"
      "  local h, vf = decode_fast(j)\n"
      "  local name = string.format('%q', j)\n"
      "  if h then\n"
      "    handled = handled + 1\n"
      "    if not okt then error('fast path took what jansson refuses: ' .. name .. ' (' .. vt .. ')') end\n"
      "    same(vf, vt, name)\n"
      "    local ok2, v2 = decode(j)\n"
      "    assert(ok2)\n"
      "    same(v2, vt, name)\n"
      "  else\n"
      "    declined = declined + 1\n"
      "    if must_handle then error('fast path declined ' .. name) end\n"
      "    local ok2, v2 = decode(j)\n"
      "    assert(ok2 == okt, name)\n"
      "    if ok2 then same(v2, vt, name) else assert(v2 == vt, name) end\n"
      "  end\n"
      "end\n"
      "for _, j in ipairs({'null', 'true', 'false', '0', '-0', '1', '-1', '9223372036854775807',\n"
      "    '-9223372036854775808', '1.0', '-0.0', '0.1', '1e20', '5e-324', '1.7976931348623157e308',\n"
      "    '7 ', ' 7', '-12\\n', '3\\t', '42',\n"
      "    '\"\"', '\"a\"', '\"\\\\u0000\"', '\"a\\\\\"b\\\\\\\\c\\\\/\\\\b\\\\f\\\\n\\\\r\\\\t\"', '\"\\\\u001f\\\\u00e9\\\\ud83d\\\\ude00\"',\n"
      "    '\"h\\xc3\\xa9llo \\xe2\\x82\\xac \\xf0\\x9f\\x98\\x80\"', '[]', '{}', '[null]', '[[],{}]',\n"
      "    '{\"a\":null,\"b\":[1,2.5,\"x\"],\"c\":{\"d\":true}}', ' [ 1 , 2 ] ', '\\n{\"a\" : 1}\\t',\n"
      "    string.rep('[', 100) .. string.rep(']', 100)}) do\n"
      "  check(j, true)\n"
      "end\n"
      "for _, j in ipairs({'', ' ', 'nul', 'nulll', 'True', '01', '-', '1.', '.5', '1e', '1e+',\n"
      "    '+1', '0x10', 'NaN', 'Infinity', '1e400', '-1e400', '9223372036854775808',\n"
      "    '-9223372036854775809', '99999999999999999999', '\"a', '\"\\\\x\"', '\"\\\\u12\"',\n"
      "    '\"\\\\ud800\"', '\"\\\\udc00\"', '\"\\\\ud800\\\\u0041\"', '\"a\\\\u0000b\"', '{\"a\\\\u0000\":1}',\n"
      "    '\"\\xff\"', '\"\\xc0\\x80\"', '\"\\xed\\xa0\\x80\"', '\"\\xf4\\x90\\x80\\x80\"', '\"a\\nb\"', '\"\\0\"',\n"
      "    '[1,]', '[,1]', '[1 2]', '{\"a\":1,}', '{\"a\" 1}', '{a:1}', '{\"a\":1,\"a\":2}',\n"
      "    '{\"a\":{\"b\":1,\"b\":1}}', '[1]]', '[1] x', '\\0', '1\\0', '\\xef\\xbb\\xbf1', '\\f1',\n"
      "    string.rep('[', 101) .. string.rep(']', 101),\n"
      "    string.rep('{\"a\":', 101) .. '1' .. string.rep('}', 101)}) do\n"
      "  check(j, false)\n"
      "end\n"
      "-- mutations of valid JSON: drop, insert or change up to three bytes, many times\n"
      "math.randomseed(12345)\n"
      "local seeds = {'{\"a\":[1,-2.5e3,\"x\\\\u00e9\"],\"b\":{\"c\":null,\"d\":true,\"e\":false}}',\n"
      "    '[0,1.0,-0.0,\"\\\\\\\\\\\\\"\",[],{},[[null]]]', '\"\\\\ud83d\\\\ude00\\xc3\\xa9\"', '123456789012345678'}\n"
      "local alphabet = '{}[],:\"\\\\ 0123456789.eE+-tfnulrsa\\0\\n\\x80\\xc3\\xa9\\xff'\n"
      "for i = 1, 10000 do\n"
      "  local j = seeds[i % #seeds + 1]\n"
      "  for _ = 1, math.random(1, 3) do\n"
      "    local p = math.random(1, #j + 1)\n"
      "    local c = math.random(1, #alphabet)\n"
      "    c = alphabet:sub(c, c)\n"
      "    local op = math.random(3)\n"
      "    if op == 1 then j = j:sub(1, p - 1) .. j:sub(p + 1)\n"
      "    elseif op == 2 then j = j:sub(1, p - 1) .. c .. j:sub(p)\n"
      "    else j = j:sub(1, p - 1) .. c .. j:sub(p + 1) end\n"
      "  end\n"
      "  check(j, false)\n"
      "end\n"
      "assert(handled > 1000 and declined > 1000, handled .. ' handled, ' .. declined .. ' declined')\n");
  lua_close(L);
}

DX_TEST(decode_errors) {
  lua_State *L = test_state();
  run_lua(L,
      "local ok, err = decode('{\"a\":1,\\n\"b\":x}')\n"
      "assert(not ok and err:find('^invalid JSON at line 2, column 5: invalid token'), err)\n"
      "ok, err = decode('{\"a\":1,\"a\":2}')\n"
      "assert(not ok and err:find('duplicate object key'), err)\n"
      "ok, err = decode('')\n"
      "assert(not ok and err:find('^invalid JSON at line 1'), err)\n"
      "ok, err = decode(string.rep('[', 101) .. string.rep(']', 101))\n"
      "assert(not ok and err == 'invalid JSON: nested deeper than 100 levels', err)\n"
      "ok, err = decode(string.rep('[', 100) .. string.rep(']', 100))\n"
      "assert(ok)\n");
  lua_close(L);
}

/* Keys "k1".."k200" inserted in a different random order in each state: the bytes must be
** identical and sorted (strcmp order), whatever each state's string hash seed. */
static char *encode_200_keys(int seed) {
  lua_State *L = test_state();
  char code[512], err[256], *s;
  snprintf(code, sizeof code,
           "math.randomseed(%d)\n"
           "local order = {}\n"
           "for i = 1, 200 do table.insert(order, math.random(#order + 1), i) end\n"
           "big = {}\n"
           "for _, i in ipairs(order) do big['k' .. i] = i end\n",
           seed);
  run_lua(L, code);
  lua_getglobal(L, "big");
  s = dx__lua_to_json(L, -1, "input", err, sizeof err);
  if (!s) DX_FAIL_AT("%s", err);
  lua_close(L);
  return s;
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

DX_TEST(map_of_200_keys_is_identical_across_states) {
  char *a = encode_200_keys(1), *b = encode_200_keys(2);
  static char names[200][16];
  char *keys[200], want[8192], *p = want;
  int i;
  ASSERT_STR_EQ(a, b);
  for (i = 0; i < 200; i++) {
    snprintf(names[i], sizeof names[i], "k%d", i + 1);
    keys[i] = names[i];
  }
  qsort(keys, 200, sizeof keys[0], cmp_str);
  *p++ = '{';
  for (i = 0; i < 200; i++) {
    p += sprintf(p, "%s\"%s\":%s", i ? "," : "", keys[i], keys[i] + 1);
  }
  strcpy(p, "}");
  ASSERT_STR_EQ(a, want);
  free(a);
  free(b);
}

DX_TEST(encode_never_raises_and_keeps_the_stack) {
  lua_State *L = test_state();
  char err[24]; /* small on purpose: messages are truncated, never overflow */
  char *s;
  int top;
  run_lua(L, "bad = {a = {b = {c = {d = {e = {f = {g = {h = {i = {j = {k = {print}}}}}}}}}}}}");
  lua_getglobal(L, "bad");
  top = lua_gettop(L);
  s = dx__lua_to_json(L, -1, "input", err, sizeof err);
  ASSERT(s == NULL);
  ASSERT_EQ(lua_gettop(L), top);
  ASSERT_STR_EQ(err, "input.a.b.c.d.e.f.g.h.i");
  s = dx__lua_to_json(L, -1, "input", NULL, 0); /* no error buffer at all */
  ASSERT(s == NULL);
  lua_pop(L, 1);
  lua_pushinteger(L, 42);
  s = dx__lua_to_json(L, -1, "input", err, sizeof err);
  ASSERT_STR_EQ(s, "42");
  free(s);
  lua_close(L);
}

DX_TEST(encode_works_before_null_or_array_exist) {
  /* A bare state where neither the sentinel nor the array set was ever created. */
  lua_State *L = luaL_newstate();
  char err[128], *s;
  luaL_openlibs(L);
  run_lua(L, "v = {a = {1, 2}, b = {}}");
  lua_getglobal(L, "v");
  s = dx__lua_to_json(L, -1, "input", err, sizeof err);
  ASSERT_STR_EQ(s, "{\"a\":[1,2],\"b\":{}}");
  free(s);
  ASSERT(!dx__lua_is_array_marked(L, -1));
  ASSERT(!dx__lua_is_null(L, -1));
  lua_close(L);
}

/* A fixed corpus with the bytes the encoder wrote before the one-pass encoder's single-pass
** arrays and lazy registry lookups (main 7e15040): every encoder path gives exactly those
** bytes, decoding them and encoding again gives them back, and each bad value keeps its
** error message. */
DX_TEST(encode_corpus_bytes_are_unchanged) {
  lua_State *L = test_state();
  run_lua(L,
      "-- each entry: a function building the value (so tables are fresh per run)\n"
      "local d = duroxide\n"
      "local N = d.null\n"
      "-- integer keys in the hash part (reused dead nodes): lua_next gives them out of order\n"
      "local function hashed_array() local t = {p = 1, q = 2, r = 3, s = 4}; t.p, t.q, t.r, t.s = nil, nil, nil, nil; t[3] = \"c\"; t[1] = \"a\"; t[2] = \"b\"; local o = {}; for k in next, t do o[#o + 1] = k end; assert(o[1] ~= 1 or o[2] ~= 2, 'hash part kept order'); return t end\n"
      "local function grown() local t = {} ; for i = 1, 40 do t[i] = i * i end; return t end\n"
      "local function shrunk() local t = d.array({1, 2}); t[2] = nil; t[1] = nil; return t end\n"
      "corpus = {\n"
      "  function() return nil end, function() return true end, function() return false end,\n"
      "  function() return 0 end, function() return -1 end, function() return math.maxinteger end,\n"
      "  function() return math.mininteger end, function() return 2^53 | 0 end,\n"
      "  function() return 1.0 end, function() return -0.0 end, function() return 0.0 end,\n"
      "  function() return 1e300 end, function() return -1e300 end, function() return 5e-324 end,\n"
      "  function() return 0.1 end, function() return 1/3 end, function() return 2^53 end, function() return 1e16 end,\n"
      "  function() return 1e17 end, function() return -123456789.0 end, function() return 100.0 end, function() return 1e-7 end,\n"
      "  function() return \"\" end, function() return \"plain\" end, function() return \"\303\251\346\227\245\346\234\254\350\252\236\360\237\216\211\" end,\n"
      "  function() return \"q\\\"b\\\\s/\\n\\r\\t\\b\\f\\1\\31\\127\" end, function() return \"nul\\0inside\" end,\n"
      "  function() return {} end, function() return d.array() end, function() return { N } end,\n"
      "  function() return { 1, 2, 3 } end, function() return { a = 1, b = { 2, 3 }, c = {} } end,\n"
      "  function() return { [\"\303\251\"] = 1, z = 2, A = 3, [\"a b\"] = 4, [\"\"] = 5, [\"\346\227\245\"] = 6, ab = 7, a = 8 } end,\n"
      "  function() return { { { { \"deep\" } } } } end, function() return { x = { y = { z = N } } } end,\n"
      "  hashed_array, grown, shrunk, function() return d.array({ 1, 2 }) end,\n"
      "  function() return { 1.5, -0.0, 1e300, 2 } end, function() return { value = 3, workers = { \"w-1\", \"w-2\" } } end,\n"
      "  function() return { { 1 }, { 2, \"w-1\" }, {} } end,\n"
      "}\n"
      "bad = {\n"
      "  function() return { 1, nil, 3 } end, function() local t = {}; t[2] = 1; return t end,\n"
      "  function() return { 1, a = 2 } end, function() return { [1.5] = 1 } end,\n"
      "  function() return { f = print } end, function() return 0/0 end, function() return { s = \"\\255\" } end,\n"
      "  function() return { [\"\\0\"] = 1 } end, function() return d.array({ a = 1 }) end,\n"
      "  function() local t = {}; t.self = t; return t end,\n"
      "}\n"
      "want = {\n"
      "  \"null\",\n"
      "  \"true\",\n"
      "  \"false\",\n"
      "  \"0\",\n"
      "  \"-1\",\n"
      "  \"9223372036854775807\",\n"
      "  \"-9223372036854775808\",\n"
      "  \"9007199254740992\",\n"
      "  \"1.0\",\n"
      "  \"-0.0\",\n"
      "  \"0.0\",\n"
      "  \"1e300\",\n"
      "  \"-1e300\",\n"
      "  \"5e-324\",\n"
      "  \"0.1\",\n"
      "  \"0.3333333333333333\",\n"
      "  \"9007199254740992.0\",\n"
      "  \"10000000000000000.0\",\n"
      "  \"1e17\",\n"
      "  \"-123456789.0\",\n"
      "  \"100.0\",\n"
      "  \"1e-7\",\n"
      "  \"\\\"\\\"\",\n"
      "  \"\\\"plain\\\"\",\n"
      "  \"\\\"\303\251\346\227\245\346\234\254\350\252\236\360\237\216\211\\\"\",\n"
      "  \"\\\"q\\\\\\\"b\\\\\\\\s/\\\\n\\\\r\\\\t\\\\b\\\\f\\\\u0001\\\\u001F\\127\\\"\",\n"
      "  \"\\\"nul\\\\u0000inside\\\"\",\n"
      "  \"{}\",\n"
      "  \"[]\",\n"
      "  \"[null]\",\n"
      "  \"[1,2,3]\",\n"
      "  \"{\\\"a\\\":1,\\\"b\\\":[2,3],\\\"c\\\":{}}\",\n"
      "  \"{\\\"\\\":5,\\\"A\\\":3,\\\"a\\\":8,\\\"a b\\\":4,\\\"ab\\\":7,\\\"z\\\":2,\\\"\303\251\\\":1,\\\"\346\227\245\\\":6}\",\n"
      "  \"[[[[\\\"deep\\\"]]]]\",\n"
      "  \"{\\\"x\\\":{\\\"y\\\":{\\\"z\\\":null}}}\",\n"
      "  \"[\\\"a\\\",\\\"b\\\",\\\"c\\\"]\",\n"
      "  \"[1,4,9,16,25,36,49,64,81,100,121,144,169,196,225,256,289,324,361,400,441,484,529,576,625,676,729,784,841,900,961,1024,1089,1156,1225,1296,1369,1444,1521,1600]\",\n"
      "  \"[]\",\n"
      "  \"[1,2]\",\n"
      "  \"[1.5,-0.0,1e300,2]\",\n"
      "  \"{\\\"value\\\":3,\\\"workers\\\":[\\\"w-1\\\",\\\"w-2\\\"]}\",\n"
      "  \"[[1],[2,\\\"w-1\\\"],{}]\"\n"
      "}\n"
      "want_err = {\n"
      "  \"input: sparse table (integer keys are not 1..n; use duroxide.null for holes)\",\n"
      "  \"input: sparse table (integer keys are not 1..n; use duroxide.null for holes)\",\n"
      "  \"input: mixed table (array and string keys)\",\n"
      "  \"input: table key must be a string or integer\",\n"
      "  \"input.f: cannot encode a function\",\n"
      "  \"input: cannot encode NaN or infinity\",\n"
      "  \"input.s: string is not valid UTF-8\",\n"
      "  \"input[\\\"\\\\0\\\"]: table key contains a NUL byte\",\n"
      "  \"input: mixed table (array and string keys)\",\n"
      "  \"input.self: cyclic table (refers back to input)\"\n"
      "}\n"
      "for i, f in ipairs(corpus) do\n"
      "  local w = want[i]\n"
      "  local j, err = encode(f())\n"
      "  if j ~= w then error('corpus ' .. i .. ': encode gave ' .. tostring(j or err) .. ' want ' .. w) end\n"
      "  if encode_tree(f()) ~= w then error('corpus ' .. i .. ': jansson path differs') end\n"
      "  local fast = encode_fast(f())\n"
      "  if fast ~= nil and fast ~= w then error('corpus ' .. i .. ': one-pass encoder gave ' .. fast) end\n"
      "  local ok, v = decode(w)\n"
      "  assert(ok, v)\n"
      "  if encode(v) ~= w then error('corpus ' .. i .. ': decode/encode round trip changed ' .. w) end\n"
      "  local okt, vt = decode_tree(w)\n"
      "  assert(okt, vt)\n"
      "  if encode(vt) ~= w then error('corpus ' .. i .. ': jansson decode differs for ' .. w) end\n"
      "  if canonical(w) ~= w then error('corpus ' .. i .. ': not canonical ' .. w) end\n"
      "end\n"
      "for i, f in ipairs(bad) do\n"
      "  expect_error(f(), want_err[i])\n"
      "  assert(encode_fast(f()) == nil, 'one-pass encoder took bad value ' .. i)\n"
      "end\n"
      "-- integral floats (written without printf below 2^53) against jansson's path\n"
      "math.randomseed(4242)\n"
      "local fl = {2.0^53 - 1, -(2.0^53 - 1), 2.0^53, -2.0^53, 2.0^53 + 2, 1e15, 1e16, -1e16, 1e17, 999999999999999.0, 10.0, -10.0, 7.0, 0.5}\n"
      "for p = 0, 22 do fl[#fl + 1] = 10.0^p; fl[#fl + 1] = -(10.0^p); fl[#fl + 1] = 2.0^p * 3 end\n"
      "for _ = 1, 3000 do local b = math.random(0, 53); fl[#fl + 1] = math.random(-(1 << b), 1 << b) + 0.0 end\n"
      "for _, x in ipairs(fl) do\n"
      "  local w = encode_tree(x)\n"
      "  if encode(x) ~= w or encode({x}) ~= '[' .. w .. ']' then error('float ' .. string.format('%.17g', x) .. ': ' .. encode(x) .. ' want ' .. w) end\n"
      "end\n");
  lua_close(L);
}

/* Strings go eight plain ASCII bytes at a time through both one-pass coders (value.h
** dx__json_plain8): a byte that needs a look of its own (quote, backslash, each control
** character, DEL, non-ASCII, valid or not) at every position of strings of 0..25 bytes, on
** either side of the 8-byte words, gives what jansson gives. */
DX_TEST(string_specials_at_every_offset_match_jansson) {
  lua_State *L = test_state();
  run_lua(L,
      "local specials = {'\"', '\\\\', '/', '\\127', '\\128', '\\195\\169', '\\226\\130\\172',\n"
      "    '\\240\\159\\152\\128', '\\255', '\\192\\128', '\\237\\160\\128', ' ', '~', '!', '#', '[', ']'}\n"
      "for c = 0, 0x1f do specials[#specials + 1] = string.char(c) end\n"
      "local n = 0\n"
      "for _, sp in ipairs(specials) do\n"
      "  for len = 0, 25 do\n"
      "    for pos = 0, len do\n"
      "      local s = string.rep('a', pos) .. sp .. string.rep('b', len - pos)\n"
      "      for _, v in ipairs({s, {s}, {[s] = s}}) do\n"
      "        local t, err = encode_tree(v)\n"
      "        local f = encode_fast(v)\n"
      "        if f ~= nil and f ~= t then error(string.format('%q: fast %s, jansson %s', s, f, tostring(t or err))) end\n"
      "        if t and not f and utf8.len(s) and not s:find('%z') then error(string.format('%q: declined', s)) end\n"
      "        if t then\n"
      "          local h, vf = decode_fast(t)\n"
      "          local okt, vt = decode_tree(t)\n"
      "          assert(h and okt, string.format('%q: decode', t))\n"
      "          deq(vf, vt, t)\n"
      "          n = n + 1\n"
      "        end\n"
      "      end\n"
      "      -- the raw byte between quotes: a control character is refused, the rest read as is\n"
      "      local j = '\"' .. s .. '\"'\n"
      "      local h, vf = decode_fast(j)\n"
      "      local okt, vt = decode_tree(j)\n"
      "      if h then\n"
      "        assert(okt, string.format('fast path took %q, jansson refuses it', j))\n"
      "        deq(vf, vt, j)\n"
      "      end\n"
      "    end\n"
      "  end\n"
      "end\n"
      "assert(n > 10000, n .. ' checked')\n");
  lua_close(L);
}
