/* embedded.c -- load the Lua layer compiled into the binary (see tools/embed.lua). */
#include <string.h>

#include "dxlua.h"

typedef struct { const char *name; const unsigned char *src; size_t len; } dxl_embedded_t;
extern const dxl_embedded_t dxl_embedded[];

/* [-0, +1, e] push the chunk `name` ("duroxide/context.lua") as a function. */
int dxl_load_embedded(lua_State *L, const char *name) {
  const dxl_embedded_t *e;
  for (e = dxl_embedded; e->name; e++) {
    if (strcmp(e->name, name) == 0) {
      char chunk[256];
      snprintf(chunk, sizeof chunk, "@lua/%s", name);
      if (luaL_loadbuffer(L, (const char *)e->src, e->len, chunk) != LUA_OK) lua_error(L);
      return 1;
    }
  }
  return luaL_error(L, "embedded Lua source %s missing", name);
}
