/*
** lrecords.c -- the client's records (history events, instance status) as Lua tables, built
** straight from the C structs. They are the tables the JSON of dx_event_to_json /
** dx_instance_info_to_json decodes to (same fields, names and values), without writing and
** re-reading that JSON: client:history and client:status are called in polling loops and
** for every instance of a run, and the round trip was most of their cost.
*/
#include <string.h>

#include "codec.h"
#include "dxlua.h"
#include "util.h"
#include "value.h"

/* [-0, +1, m] C text as a Lua string; bytes that are not UTF-8 become U+FFFD, as the JSON
** form writes them (dx__json_text). */
static void push_text(lua_State *L, const char *s) {
  size_t n = s ? strlen(s) : 0, k = s ? dx__utf8_valid_prefix(s, n) : 0;
  luaL_Buffer b;
  if (k == n) {
    lua_pushlstring(L, s ? s : "", n);
    return;
  }
  luaL_buffinit(L, &b);
  for (;;) {
    luaL_addlstring(&b, s, k);
    s += k;
    n -= k;
    if (!n) break;
    luaL_addstring(&b, "\xef\xbf\xbd");
    s++;
    n--;
    k = dx__utf8_valid_prefix(s, n);
  }
  luaL_pushresult(&b);
}

/* [-0, +1, m] A stored JSON payload as a field value: JSON null, and text that is not JSON
** (never stored by the engine), are duroxide.null, as inside any decoded table. */
static void push_payload(lua_State *L, const char *json) {
  if (json && dx__lua_decode_json(L, json, strlen(json), 1)) return;
  if (json && dx__lua_push_json(L, json, strlen(json), NULL, 0)) {
    if (!lua_isnil(L, -1)) return;
    lua_pop(L, 1);
  }
  dx__lua_push_null(L);
}

static void set_text(lua_State *L, const char *field, const char *s) {
  push_text(L, s);
  lua_setfield(L, -2, field);
}

static void set_int(lua_State *L, const char *field, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, field);
}

static void set_payload(lua_State *L, const char *field, const char *json) {
  push_payload(L, json);
  lua_setfield(L, -2, field);
}

/* {category, kind?, message} */
static void set_failure(lua_State *L, const char *field, const dx_failure_t *f) {
  luaL_checkstack(L, 3, "failure record");
  lua_createtable(L, 0, 3);
  set_text(L, "category", dx__category_name(f->category));
  if (f->kind) set_text(L, "kind", f->kind);
  set_text(L, "message", f->message ? f->message : "");
  lua_setfield(L, -2, field);
}

/* How many fields dxl_push_event sets: the table is made that size (a table that grows past
** its size is rehashed, which was a good part of building one). */
static int event_fields(const dx_event_t *e) {
  return 3 + !!e->source_id + !!e->name + !!e->version + !!e->data + !!e->instance +
         !!e->session_id + !!e->tag + !!e->reason + !!e->worker_id + !!e->fire_at_ms +
         !!e->fail.category + !!e->custom_status;
}

void dxl_push_event(lua_State *L, const dx_event_t *e) {
  luaL_checkstack(L, 4, "history event");
  lua_createtable(L, 0, event_fields(e));
  set_int(L, "event_id", (lua_Integer)e->event_id);
  set_text(L, "type", dx_event_kind_name(e->kind));
  set_int(L, "timestamp_ms", (lua_Integer)e->timestamp_ms);
  if (e->source_id) set_int(L, "source_event_id", (lua_Integer)e->source_id);
  if (e->name) set_text(L, "name", e->name);
  if (e->version) set_text(L, "version", e->version);
  if (e->data) set_payload(L, "data", e->data);
  if (e->instance) set_text(L, "instance", e->instance);
  if (e->session_id) set_text(L, "session_id", e->session_id);
  if (e->tag) set_text(L, "tag", e->tag);
  if (e->reason) set_text(L, "reason", e->reason);
  if (e->worker_id) set_text(L, "worker_id", e->worker_id);
  if (e->fire_at_ms) set_int(L, "fire_at_ms", (lua_Integer)e->fire_at_ms);
  if (e->fail.category) set_failure(L, "error", &e->fail);
  if (e->custom_status) set_payload(L, "initial_custom_status", e->custom_status);
}

void dxl_push_status(lua_State *L, const char *id, const dx_instance_info_t *info) {
  luaL_checkstack(L, 4, "instance status");
  lua_createtable(L, 0, 2 + !!info->orchestration_name + !!info->current_execution_id +
                            (info->status == DX_STATUS_COMPLETED) +
                            (info->status == DX_STATUS_FAILED) + !!info->custom_status +
                            (info->status != DX_STATUS_NONE));
  set_text(L, "instance_id", id);
  set_text(L, "status", dx_status_name(info->status));
  if (info->orchestration_name) set_text(L, "orchestration", info->orchestration_name);
  if (info->current_execution_id) /* 0: the start is queued, no execution yet */
    set_int(L, "execution_id", (lua_Integer)info->current_execution_id);
  if (info->status == DX_STATUS_COMPLETED) set_payload(L, "output", info->output);
  if (info->status == DX_STATUS_FAILED) set_failure(L, "error", &info->failure);
  if (info->custom_status) set_payload(L, "custom_status", info->custom_status);
  if (info->status != DX_STATUS_NONE) /* grows with every custom status change */
    set_int(L, "custom_status_version", (lua_Integer)info->custom_status_version);
}
