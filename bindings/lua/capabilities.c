/*
** capabilities.c -- what this Lua state can run, for rolling deployments: a C snapshot of the
** registered orchestrations (name and version) that a runtime's store thread reads without
** touching the interpreter (dx_host_methods_t.orch_capabilities). Rebuilt on the loop thread
** whenever the registrations change; the generation tells readers that it did.
*/
#include <stdlib.h>
#include <string.h>

#include "dxlua.h"
#include "util.h"

struct dxl_caps_s {
  uv_mutex_t mu;
  uint64_t gen;
  dx_orch_capability_t *v;
  size_t n;
};

/* Append (name, version); 0 on success. */
static int caps_push(dx_orch_capability_t **v, size_t *n, size_t *cap, const char *name,
                     const char *version) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 8;
    dx_orch_capability_t *nv = realloc(*v, nc * sizeof *nv);
    if (!nv) return -1;
    *v = nv;
    *cap = nc;
  }
  (*v)[*n].name = dx__strdup(name);
  (*v)[*n].version = dx__strdup(version);
  (*n)++;
  return (*v)[*n - 1].name && (*v)[*n - 1].version ? 0 : -1;
}

void dxl_caps_rebuild(lua_State *L, dxl_state_t *S) {
  dx_orch_capability_t *v = NULL;
  size_t n = 0, cap = 0;
  int bad = 0, top = lua_gettop(L);
  if (!S->caps) {
    if (!(S->caps = calloc(1, sizeof *S->caps))) return;
    uv_mutex_init(&S->caps->mu);
  }
  if (!lua_checkstack(L, 8)) return;
  lua_rawgeti(L, LUA_REGISTRYINDEX, S->reg_ref);
  if (lua_getfield(L, -1, "orchestrations") == LUA_TTABLE) {
    lua_pushnil(L);
    while (!bad && lua_next(L, -2)) { /* name -> { versions = {[v] = fn} } */
      int vt = lua_type(L, -1) == LUA_TTABLE ? lua_getfield(L, -1, "versions") : LUA_TNONE;
      if (vt == LUA_TTABLE && lua_type(L, -3) == LUA_TSTRING) {
        lua_pushnil(L); /* stack: name, entry, versions, version, fn */
        while (!bad && lua_next(L, -2)) {
          if (lua_type(L, -2) == LUA_TSTRING && lua_type(L, -1) == LUA_TFUNCTION)
            bad = caps_push(&v, &n, &cap, lua_tostring(L, -5), lua_tostring(L, -2));
          lua_pop(L, 1);
        }
      }
      lua_pop(L, vt == LUA_TNONE ? 1 : 2);
    }
  }
  lua_settop(L, top);
  if (bad) { /* out of memory: the old snapshot stays */
    dx_orch_capabilities_free(v, n);
    return;
  }
  uv_mutex_lock(&S->caps->mu);
  dx_orch_capabilities_free(S->caps->v, S->caps->n);
  S->caps->v = v;
  S->caps->n = n;
  S->caps->gen++;
  uv_mutex_unlock(&S->caps->mu);
}

void dxl_caps_free(dxl_state_t *S) {
  if (!S->caps) return;
  dx_orch_capabilities_free(S->caps->v, S->caps->n);
  uv_mutex_destroy(&S->caps->mu);
  free(S->caps);
  S->caps = NULL;
}

/* Store thread: a copy of the snapshot when it changed since `known`. */
int dxl_h_orch_capabilities(void *host, uint64_t known, uint64_t *gen,
                            dx_orch_capability_t **caps, size_t *n) {
  dxl_state_t *S = host;
  dx_orch_capability_t *v = NULL;
  size_t i, got = 0;
  int rc = 0;
  *caps = NULL;
  *n = 0;
  if (!S->caps) { /* nothing registered yet */
    *gen = 1;
    return known == 1 ? 0 : 1;
  }
  uv_mutex_lock(&S->caps->mu);
  *gen = S->caps->gen + 1; /* 1 is "nothing registered yet" */
  if (*gen != known) {
    rc = 1;
    if (S->caps->n && !(v = calloc(S->caps->n, sizeof *v))) rc = DX_ENOMEM;
    for (i = 0; rc == 1 && i < S->caps->n; i++, got++) {
      v[i].name = dx__strdup(S->caps->v[i].name);
      v[i].version = dx__strdup(S->caps->v[i].version);
      if (!v[i].name || !v[i].version) rc = DX_ENOMEM;
    }
  }
  uv_mutex_unlock(&S->caps->mu);
  if (rc < 0) {
    dx_orch_capabilities_free(v, got);
    return rc;
  }
  *caps = v;
  *n = got;
  return rc;
}
