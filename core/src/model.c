/* model.c -- release and deep-copy helpers for the provider model structs (provider.h). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "duroxide/provider.h"
#include "util.h"

/* The owned strings of each struct, listed once so clear and copy cannot drift apart when a
** field is added. The embedded dx_failure_t is handled separately. */
static const size_t event_strings[] = {
  offsetof(dx_event_t, name),     offsetof(dx_event_t, version),
  offsetof(dx_event_t, data),     offsetof(dx_event_t, instance),
  offsetof(dx_event_t, session_id), offsetof(dx_event_t, reason),
  offsetof(dx_event_t, custom_status),
  offsetof(dx_event_t, worker_id),
  offsetof(dx_event_t, tag),
};
static const size_t work_strings[] = {
  offsetof(dx_work_item_t, instance),   offsetof(dx_work_item_t, name),
  offsetof(dx_work_item_t, version),    offsetof(dx_work_item_t, data),
  offsetof(dx_work_item_t, parent_instance), offsetof(dx_work_item_t, session_id),
  offsetof(dx_work_item_t, reason),   offsetof(dx_work_item_t, custom_status),
  offsetof(dx_work_item_t, worker_id), offsetof(dx_work_item_t, tag),
};
static const size_t info_strings[] = {
  offsetof(dx_instance_info_t, instance_id), offsetof(dx_instance_info_t, orchestration_name),
  offsetof(dx_instance_info_t, orchestration_version), offsetof(dx_instance_info_t, output),
  offsetof(dx_instance_info_t, custom_status), offsetof(dx_instance_info_t, parent_instance),
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static char **str_at(void *base, size_t off) {
  return (char **)(void *)((char *)base + off);
}

/* Free the listed strings, except those inside the record's arena (freed with it). */
static void free_strings(void *base, const size_t *offs, size_t n, const void *arena) {
  size_t i;
  for (i = 0; i < n; i++) {
    char *p = *str_at(base, offs[i]);
    if (p && !dx__arena_owns(arena, p)) free(p); /* most are NULL: skip the call */
  }
}

static void failure_clear_in(dx_failure_t *f, const void *arena) {
  if (!dx__arena_owns(arena, f->kind)) free(f->kind);
  if (!dx__arena_owns(arena, f->message)) free(f->message);
  memset(f, 0, sizeof *f);
}

/* Replace each listed (borrowed, shallow-copied) pointer in dst by a private copy. On failure
** the pointers not yet copied are set to NULL so the caller can free dst uniformly. */
static int dup_strings(void *dst, const size_t *offs, size_t n) {
  size_t i;
  for (i = 0; i < n; i++) {
    char **p = str_at(dst, offs[i]);
    if (*p && !(*p = dx__strdup(*p))) {
      for (i = i + 1; i < n; i++) *str_at(dst, offs[i]) = NULL;
      return DX_ENOMEM;
    }
  }
  return DX_OK;
}

/* Copy the record's listed strings and its failure's (borrowed pointers, NULL allowed) into
** one new block, its arena (codec.h layout), and point them there: one allocation and one free
** for the record instead of one per string. DX_ENOMEM: every one of them is NULL. */
static int own_in_arena(void *rec, const size_t *offs, size_t n, dx_failure_t *f,
                        void **arena) {
  char **slots[16];
  size_t lens[16], m = 0, total = 0, i;
  char *block, *cur;
  /* one pass keeps only the strings present (most fields are NULL), with their sizes */
  for (i = 0; i < n + 2; i++) {
    char **p = i < n ? str_at(rec, offs[i]) : i == n ? &f->kind : &f->message;
    if (*p) {
      slots[m] = p;
      total += (lens[m++] = strlen(*p) + 1);
    }
  }
  *arena = NULL;
  if (total == 0) return DX_OK;
  if (!(block = malloc(sizeof(size_t) + total))) {
    for (i = 0; i < m; i++) *slots[i] = NULL; /* the others are NULL already */
    return DX_ENOMEM;
  }
  memcpy(block, &total, sizeof total);
  cur = block + sizeof(size_t);
  for (i = 0; i < m; i++) {
    memcpy(cur, *slots[i], lens[i]);
    *slots[i] = cur;
    cur += lens[i];
  }
  *arena = block;
  return DX_OK;
}

int dx__event_own(dx_event_t *e) {
  return own_in_arena(e, event_strings, COUNT(event_strings), &e->fail, &e->arena);
}

int dx__work_item_own(dx_work_item_t *w) {
  return own_in_arena(w, work_strings, COUNT(work_strings), &w->fail, &w->arena);
}

void dx_failure_clear(dx_failure_t *f) {
  if (f) failure_clear_in(f, NULL);
}

void dx_event_clear(dx_event_t *e) {
  if (!e) return;
  free_strings(e, event_strings, COUNT(event_strings), e->arena);
  failure_clear_in(&e->fail, e->arena);
  free(e->arena);
  memset(e, 0, sizeof *e);
}

void dx_work_item_clear(dx_work_item_t *w) {
  if (!w) return;
  free_strings(w, work_strings, COUNT(work_strings), w->arena);
  failure_clear_in(&w->fail, w->arena);
  free(w->arena);
  memset(w, 0, sizeof *w);
}

void dx_events_free(dx_event_t *events, size_t n) {
  size_t i;
  if (!events) return;
  for (i = 0; i < n; i++) dx_event_clear(&events[i]);
  free(events);
}

void dx_orch_item_free(dx_orch_item_t *item) {
  size_t i;
  if (!item) return;
  free(item->instance);
  free(item->orchestration_name);
  free(item->orchestration_version);
  dx_events_free(item->history, item->history_len);
  if (item->messages) {
    for (i = 0; i < item->messages_len; i++) dx_work_item_clear(&item->messages[i]);
    free(item->messages);
  }
  free(item->history_error_msg);
  dx_kv_entries_free(item->kv, item->kv_len);
  free(item);
}

void dx_kv_entries_free(dx_kv_entry_t *kv, size_t n) {
  size_t i;
  if (!kv) return;
  for (i = 0; i < n; i++) {
    free(kv[i].key);
    free(kv[i].value);
  }
  free(kv);
}

void dx_instance_info_clear(dx_instance_info_t *info) {
  if (!info) return;
  free_strings(info, info_strings, COUNT(info_strings), NULL);
  dx_failure_clear(&info->failure);
  memset(info, 0, sizeof *info);
}

int dx_failure_copy(dx_failure_t *dst, const dx_failure_t *src) {
  static const size_t strs[] = {offsetof(dx_failure_t, kind), offsetof(dx_failure_t, message)};
  *dst = *src;
  if (dup_strings(dst, strs, COUNT(strs)) != DX_OK) {
    dx_failure_clear(dst);
    return DX_ENOMEM;
  }
  return DX_OK;
}

int dx_event_copy(dx_event_t *dst, const dx_event_t *src) {
  *dst = *src;
  dst->arena = NULL; /* every string is copied on its own */
  dst->fail.kind = dst->fail.message = NULL; /* not yet owned: keep clear() from freeing src's */
  if (dup_strings(dst, event_strings, COUNT(event_strings)) != DX_OK ||
      dx_failure_copy(&dst->fail, &src->fail) != DX_OK) {
    dx_event_clear(dst);
    return DX_ENOMEM;
  }
  return DX_OK;
}

int dx_work_item_copy(dx_work_item_t *dst, const dx_work_item_t *src) {
  *dst = *src;
  dst->arena = NULL;
  dst->fail.kind = dst->fail.message = NULL;
  if (dup_strings(dst, work_strings, COUNT(work_strings)) != DX_OK ||
      dx_failure_copy(&dst->fail, &src->fail) != DX_OK) {
    dx_work_item_clear(dst);
    return DX_ENOMEM;
  }
  return DX_OK;
}

void dx_instance_infos_free(dx_instance_info_t *rows, size_t n) {
  size_t i;
  if (!rows) return;
  for (i = 0; i < n; i++) dx_instance_info_clear(&rows[i]);
  free(rows);
}
