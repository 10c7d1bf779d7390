/*
** codec.h -- record and payload codecs (internal).
**
** Records (events, work items) are MessagePack maps with short keys, only present fields
** written, a leading format version. Payloads are canonical JSON text (API.md §1): keys
** sorted bytewise, no whitespace, integers as integers, reals always with '.', or 'e'.
*/
#ifndef DX_CODEC_H
#define DX_CODEC_H

#include <stddef.h>
#include <stdint.h>
#include "duroxide/provider.h"

/* Encode into a malloc'd buffer (*buf, *len), owned by the caller. DX_OK or DX_ENOMEM. */
int dx__event_encode(const dx_event_t *e, char **buf, size_t *len);
int dx__work_item_encode(const dx_work_item_t *w, char **buf, size_t *len);
/* Decode into a zeroed *out (caller clears it). DX_ECORRUPT with a message naming what is
** wrong when the bytes are not a valid record; *out is left cleared on failure. */
int dx__event_decode(const void *buf, size_t len, dx_event_t *out, dx_error_t *err);
int dx__work_item_decode(const void *buf, size_t len, dx_work_item_t *out, dx_error_t *err);
/* A decoded record's strings share one malloc'd block, its `arena` (dx_event_t.arena):
** a size_t byte count, then the strings with their NULs. 1 when p points into it. */
static inline int dx__arena_owns(const void *arena, const void *p) {
  uintptr_t b = (uintptr_t)arena, c = (uintptr_t)p;
  return arena && c >= b + sizeof(size_t) && c < b + sizeof(size_t) + *(const size_t *)arena;
}

/* A record the engine builds: its string fields (and its failure's) hold borrowed pointers
** (NULL allowed) and it has no arena yet. Copies them into one arena of its own, so clear()
** frees one block. DX_OK, or DX_ENOMEM with every string NULL. (model.c) */
int dx__event_own(dx_event_t *e);
int dx__work_item_own(dx_work_item_t *w);

/* The kind of an encoded work item without decoding it, when the record starts the way
** dx__work_item_encode writes it ("v" then "k" first); -1 otherwise (decode it to know). */
int dx__work_item_peek_kind(const void *buf, size_t len);

/* Check the MessagePack framing of buf (one object, every length within the bytes present,
** no reserved bytes, no trailing bytes) before msgpack-c allocates. DX_ECORRUPT naming `what`. */
int dx__msgpack_check(const void *buf, size_t len, const char *what, dx_error_t *err);

/* Validate JSON text and return its canonical form (malloc'd, caller frees). Any JSON value
** is accepted at top level (string, number, ...). On invalid JSON: DX_EJSON with
** "invalid JSON at line L, column C: reason". DX_ETOOBIG over DX_MAX_PAYLOAD_BYTES. */
int dx__json_canonical(const char *text, size_t len, char **out, dx_error_t *err);

/* Encode a string as a JSON string literal (malloc'd). */
char *dx__json_quote(const char *s);
/* Build a failure's JSON object {"category":..,"kind":..,"message":..} (malloc'd). */
char *dx__failure_to_json(const dx_failure_t *f);
/* "application", "infrastructure", ... ; "" for NONE. */
const char *dx__category_name(int category);
int dx__category_from_name(const char *name);

#endif
