/*
** store_mem.c -- fetched items' memory goes back to the store thread, which allocated it.
**
** Why: the provider allocates every fetched item (its strings, history, messages) on the store
** thread and the loop frees it once the turn or activity is settled. glibc gives each thread an
** arena of its own: a free from another thread takes the owning arena's lock (which the store
** thread takes for each of its own mallocs meanwhile) and leaves the chunk where the store
** thread's fast per-thread cache does not see it. So the loop only collects what it is done
** with (a pointer each, no free), hands the collection over with its next wake-up (on_async),
** and the store thread frees it before its next cycle, whose fetches then reuse that memory.
** A collection the store thread has not taken yet stays with the loop; past TRASH_MAX entries
** (the thread is stuck in a long cycle) the loop frees at once, as before.
*/
#include <stdlib.h>
#include <string.h>

#include "store_int.h"

#define TRASH_MAX 4096 /* entries one collection holds at most */

/* Room for one more entry in the array *v of *n (cap *cap, elements of size sz); 0 = none. */
static int room(void **v, size_t *cap, size_t n, size_t sz) {
  void *nv;
  size_t nc;
  if (n < *cap) return 1;
  if (n >= TRASH_MAX) return 0;
  nc = *cap ? *cap * 2 : 64;
  if (!(nv = realloc(*v, nc * sz))) return 0;
  *v = nv;
  *cap = nc;
  return 1;
}

void dx__store_give_orch(dx_store_t *s, dx_orch_item_t *it) {
  dx__store_trash_t *t;
  if (!it) return;
  if (!s) {
    dx_orch_item_free(it);
    return;
  }
  t = &s->tr_loop;
  if (room((void **)&t->orch, &t->cap_orch, t->n_orch, sizeof *t->orch))
    t->orch[t->n_orch++] = it;
  else
    dx_orch_item_free(it);
}

void dx__store_give_work(dx_store_t *s, dx_work_item_t *w) {
  dx__store_trash_t *t;
  if (!s) {
    dx_work_item_clear(w);
    return;
  }
  t = &s->tr_loop;
  if (room((void **)&t->work, &t->cap_work, t->n_work, sizeof *t->work))
    t->work[t->n_work++] = *w; /* takes its fields */
  else
    dx_work_item_clear(w);
  memset(w, 0, sizeof *w);
}

void dx__store_give_block(dx_store_t *s, void *p) {
  dx__store_trash_t *t;
  if (!p) return;
  if (!s) {
    free(p);
    return;
  }
  t = &s->tr_loop;
  if (room((void **)&t->ptrs, &t->cap_ptrs, t->n_ptrs, sizeof *t->ptrs))
    t->ptrs[t->n_ptrs++] = p;
  else
    free(p);
}

void dx__store_give_fetched(dx_store_t *s, dx_store_fetched_t *f) {
  size_t i;
  for (i = 0; i < f->n_orch; i++) dx__store_give_orch(s, f->orch[i]);
  for (i = 0; i < f->n_work; i++) {
    if (f->work[i].item.kind) dx__store_give_work(s, &f->work[i].item);
    dx__store_give_block(s, f->work[i].previous_owner);
  }
  dx__store_give_block(s, f->orch);
  dx__store_give_block(s, f->work);
  memset(f, 0, sizeof *f);
}

static int trash_empty(const dx__store_trash_t *t) {
  return !t->n_orch && !t->n_work && !t->n_ptrs;
}

static void trash_swap(dx__store_trash_t *a, dx__store_trash_t *b) {
  dx__store_trash_t tmp = *a;
  *a = *b;
  *b = tmp;
}

void dx__store_trash_hand(dx_store_t *s) {
  if (trash_empty(&s->tr_given) && !trash_empty(&s->tr_loop)) trash_swap(&s->tr_given, &s->tr_loop);
}

/* Free the entries (the arrays stay, for the next collection). */
static void trash_empty_out(dx__store_trash_t *t) {
  size_t i;
  for (i = 0; i < t->n_orch; i++) dx_orch_item_free(t->orch[i]);
  for (i = 0; i < t->n_work; i++) dx_work_item_clear(&t->work[i]);
  for (i = 0; i < t->n_ptrs; i++) free(t->ptrs[i]);
  t->n_orch = t->n_work = t->n_ptrs = 0;
}

void dx__store_trash_take(dx_store_t *s) {
  /* tr_store is empty (dx__store_trash_drop): its arrays go back for the next collection */
  if (trash_empty(&s->tr_given)) return;
  s->given_back += s->tr_given.n_orch + s->tr_given.n_work;
  trash_swap(&s->tr_given, &s->tr_store);
}

uint64_t dx__store_items_given_back(dx_store_t *s) {
  uint64_t n;
  uv_mutex_lock(&s->mu);
  n = s->given_back;
  uv_mutex_unlock(&s->mu);
  return n;
}

void dx__store_trash_drop(dx_store_t *s) { trash_empty_out(&s->tr_store); }

static void trash_free(dx__store_trash_t *t) {
  trash_empty_out(t);
  free(t->orch);
  free(t->work);
  free(t->ptrs);
  memset(t, 0, sizeof *t);
}

void dx__store_trash_free(dx_store_t *s) {
  trash_free(&s->tr_loop);
  trash_free(&s->tr_given);
  trash_free(&s->tr_store);
}
