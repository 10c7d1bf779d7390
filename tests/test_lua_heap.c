/*
** test_lua_heap.c -- the Lua state's small-block pool (bindings/lua/heap.c) and the allocator
** wrapper around it (budget.c): classes, reuse, ownership, blocks resized across the pool's
** limit, and Lua states that load duroxide, allocate every size and close (the last pooled
** block hands the state back to its original allocator), one after another.
** Under ASan the pool is off (dxl_heap_new gives NULL): the unit tests then check only that,
** and the state tests run on malloc.
*/
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "dxlua.h"
#include "testlib.h"

int luaopen_duroxide(lua_State *L);

/* {===== the pool itself =====} */

DX_TEST(pool_classes_reuse_and_ownership) {
  dxl_heap_t *H = dxl_heap_new();
  static unsigned char *blocks[DXL_HEAP_MAX + 1];
  size_t n, i;
  int x = 0;
  if (!H) return; /* pooling off (ASan, memcheck, DUROXIDE_LUA_HEAP=malloc) */
  for (n = 1; n <= DXL_HEAP_MAX; n++) {
    blocks[n] = dxl_heap_alloc(H, n);
    ASSERT(blocks[n] != NULL);
    ASSERT(dxl_heap_owns(H, blocks[n]));
    ASSERT_EQ((uintptr_t)blocks[n] % 16, 0);
    memset(blocks[n], (int)(n & 0xff), n);
  }
  ASSERT(!dxl_heap_owns(H, &x));
  ASSERT_EQ(dxl_heap_live(H), DXL_HEAP_MAX);
  for (n = 1; n <= DXL_HEAP_MAX; n++) /* no block overlaps another */
    for (i = 0; i < n; i++) ASSERT_EQ(blocks[n][i], n & 0xff);
  ASSERT(dxl_heap_same_class(1, 16));
  ASSERT(!dxl_heap_same_class(16, 17));
  ASSERT(dxl_heap_same_class(1009, 1024));
  /* a freed block is the next one of its class */
  dxl_heap_free(H, blocks[40], 40);
  ASSERT_EQ(dxl_heap_live(H), DXL_HEAP_MAX - 1);
  ASSERT(dxl_heap_alloc(H, 33) == blocks[40]);
  ASSERT(dxl_heap_alloc(H, 33) != blocks[40]);
  dxl_heap_free_all(H);
}

DX_TEST(pool_is_off_with_the_malloc_switch) {
  setenv("DUROXIDE_LUA_HEAP", "malloc", 1);
  ASSERT(dxl_heap_new() == NULL);
}

/* {===== Lua states on the wrapper =====} */

/* Every block size up to past the pool's limit, tables grown and shrunk across it, checked
** after a full collection. */
static const char *CHURN =
    "local duroxide = require('duroxide')\n"
    "local keep = {}\n"
    "for round = 1, 3 do\n"
    "  for i = 1, 3000 do keep[i] = string.rep(string.char(65 + i % 26), i % 1500) end\n"
    "  local t = {}\n"
    "  for i = 1, 200 do t[i] = i end            -- array part grows past 1 KiB\n"
    "  for i = 200, 3, -1 do t[i] = nil end\n"
    "  local h = {}\n"
    "  for i = 1, 100 do h['k' .. i] = { i, tostring(i) } end\n"
    "  collectgarbage()\n"
    "  for i = 1, 3000 do\n"
    "    local s = keep[i]\n"
    "    assert(#s == i % 1500 and (s == '' or s:byte(1) == 65 + i % 26), 'string ' .. i)\n"
    "  end\n"
    "  for i = 1, 100 do assert(h['k' .. i][2] == tostring(i)) end\n"
    "  assert(t[1] == 1 and t[2] == 2)\n"
    "  assert(duroxide.json_decode(duroxide.json_encode({ a = keep[77] })).a == keep[77])\n"
    "end\n"
    "return 'ok'\n";

static void run_state(void) {
  lua_State *L = luaL_newstate();
  ASSERT(L != NULL);
  luaL_openlibs(L);
  luaL_requiref(L, "duroxide", luaopen_duroxide, 0);
  lua_pop(L, 1);
  if (luaL_dostring(L, CHURN) != LUA_OK) DX_FAIL_AT("%s", lua_tostring(L, -1));
  ASSERT_STR_EQ(lua_tostring(L, -1), "ok");
  lua_close(L); /* frees every pooled block, then the state goes back to its allocator */
}

DX_TEST(states_allocate_every_size_and_close) {
  run_state();
  run_state(); /* a second state after the first closed */
}

DX_TEST(states_run_on_malloc_with_the_switch) {
  setenv("DUROXIDE_LUA_HEAP", "malloc", 1);
  run_state();
}
