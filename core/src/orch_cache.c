/*
** orch_cache.c -- the orchestration cache (orch_cache.h): kept turns by instance id in a
** chained hash table, on a least-recently-used list, within a byte budget.
*/
#include <stdlib.h>
#include <string.h>

#include "orch_cache.h"
#include "spare.h"
#include "spin.h"
#include "util.h"

typedef struct entry_s {
  const char *key;          /* the turn's instance id (owned by the turn) */
  uint64_t hash;
  dx_turn_t *turn;
  uint64_t exec, n_events;  /* what the turn holds (read by the store thread) */
  int64_t bytes;            /* charged against the budget */
  struct entry_s *hnext;    /* hash chain */
  struct entry_s *newer, *older; /* LRU list */
} entry_t;

/* A turn out of the cache whose ack is on its way to the store: the loop keeps it once the
** ack is applied (holds answers for it meanwhile: dx__ocache_expect). */
typedef struct {
  const char *key; /* the caller's (dx__ocache_expect): valid until dx__ocache_expect_end */
  uint64_t hash, exec, n_events;
} expect_t;

struct dx_ocache_s {
  int64_t budget, bytes;
  size_t count, nb;         /* entries, buckets (a power of two) */
  entry_t **buckets;
  entry_t *newest, *oldest;
  dx_metrics_t *metrics;
  dx__spin_t mu;            /* the table against dx__ocache_holds on the store thread (spin.h:
                            ** four short holds per continued turn on the loop) */
  dx__spare_t spare;        /* freed entries: a continued turn takes one and puts one back */
  expect_t *expect;         /* turns whose commit is in flight, to be kept (dx__ocache_expect) */
  size_t n_expect, cap_expect;
  /* expect's index by hash (linear probing, a power of two of slots, at most half used):
  ** expect position + 1, 0 = empty. A scan of every expectation cost ~1k instructions a turn
  ** with 200 turns in flight, on the loop and (dx__ocache_holds) on the store thread. */
  uint32_t *xidx;
  size_t xslots;
};

static uint64_t hash_str(const char *s) { return dx__fnv1a64(DX_FNV1A64_BASIS, s); }

static void gauges(void *ud);

dx_ocache_t *dx__ocache_new(int64_t budget, dx_metrics_t *metrics) {
  dx_ocache_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->nb = 64;
  if (!(c->buckets = calloc(c->nb, sizeof *c->buckets))) {
    free(c);
    return NULL;
  }
  c->budget = budget;
  c->metrics = metrics;
  dx__spare_init(&c->spare, sizeof(entry_t), 256);
  if (metrics) dx__metrics_on_read(metrics, gauges, c);
  return c;
}

static entry_t **slot_of(dx_ocache_t *c, const char *key, uint64_t h) {
  entry_t **pp = &c->buckets[h & (c->nb - 1)];
  while (*pp && ((*pp)->hash != h || strcmp((*pp)->key, key) != 0)) pp = &(*pp)->hnext;
  return pp;
}

static void lru_unlink(dx_ocache_t *c, entry_t *e) {
  if (e->newer) e->newer->older = e->older;
  else c->newest = e->older;
  if (e->older) e->older->newer = e->newer;
  else c->oldest = e->newer;
  e->newer = e->older = NULL;
}

/* The entries and bytes gauges, set when a rendering reads them (metrics.h dx__metrics_on_read)
** rather than on every take and put (two of each per continued turn). Any thread: count and
** bytes change under the mutex. */
static void gauges(void *ud) {
  dx_ocache_t *c = ud;
  double count, bytes;
  dx__spin_lock(&c->mu);
  count = (double)c->count;
  bytes = (double)c->bytes;
  dx__spin_unlock(&c->mu);
  dx__metric_set(c->metrics, DXM_OCACHE_ENTRIES, DXM_NOLABELS, count);
  dx__metric_set(c->metrics, DXM_OCACHE_BYTES, DXM_NOLABELS, bytes);
}

/* Unlink e (under the mutex) and hand back its turn. */
static dx_turn_t *remove_entry(dx_ocache_t *c, entry_t *e) {
  dx_turn_t *t = e->turn;
  dx__spin_lock(&c->mu);
  *slot_of(c, e->key, e->hash) = e->hnext;
  lru_unlink(c, e);
  c->count--;
  c->bytes -= e->bytes;
  dx__spin_unlock(&c->mu);
  dx__spare_free(&c->spare, e);
  return t;
}

void dx__ocache_free(dx_ocache_t *c) {
  if (!c) return;
  if (c->metrics) dx__metrics_on_read(c->metrics, NULL, NULL); /* waits out a rendering */
  while (c->oldest) dx__turn_free(remove_entry(c, c->oldest));
  free(c->expect);
  free(c->xidx);
  dx__spare_drain(&c->spare);
  free(c->buckets);
  free(c);
}

dx_turn_t *dx__ocache_take(dx_ocache_t *c, const char *instance) {
  entry_t *e = *slot_of(c, instance, hash_str(instance));
  dx_turn_t *t;
  if (!e) return NULL;
  t = remove_entry(c, e);
  return t;
}

void dx__ocache_drop(dx_ocache_t *c, const char *instance) {
  if (c) dx__turn_free(dx__ocache_take(c, instance));
}

static void grow(dx_ocache_t *c) {
  size_t nb = c->nb * 2, i;
  entry_t **nv = calloc(nb, sizeof *nv);
  if (!nv) return; /* longer chains, still correct */
  for (i = 0; i < c->nb; i++)
    while (c->buckets[i]) {
      entry_t *e = c->buckets[i];
      c->buckets[i] = e->hnext;
      e->hnext = nv[e->hash & (nb - 1)];
      nv[e->hash & (nb - 1)] = e;
    }
  free(c->buckets);
  c->buckets = nv;
  c->nb = nb;
}

void dx__ocache_put(dx_ocache_t *c, dx_turn_t *t) {
  const char *key = dx_turn_instance(t);
  entry_t *e, **pp;
  uint64_t h = hash_str(key);
  int64_t bytes = (int64_t)dx__turn_bytes(t) + (int64_t)sizeof *e;
  dx_turn_t *old = NULL;
  if (bytes > c->budget || !(e = dx__spare_calloc(&c->spare))) {
    dx__metric_add(c->metrics, DXM_OCACHE_EVICTIONS, DXM_NOLABELS, 1);
    dx__turn_free(t);
    return;
  }
  e->key = key;
  e->hash = h;
  e->turn = t;
  e->exec = dx_turn_execution(t);
  e->n_events = dx__turn_history_len(t);
  e->bytes = bytes;
  if (*(pp = slot_of(c, key, h)) != NULL) old = remove_entry(c, *pp); /* an older copy */
  dx__spin_lock(&c->mu);
  if (c->count >= c->nb) grow(c);
  pp = &c->buckets[h & (c->nb - 1)];
  e->hnext = *pp;
  *pp = e;
  e->older = c->newest;
  if (c->newest) c->newest->newer = e;
  c->newest = e;
  if (!c->oldest) c->oldest = e;
  c->count++;
  c->bytes += bytes;
  dx__spin_unlock(&c->mu);
  dx__turn_free(old);
  while (c->bytes > c->budget && c->oldest != e) {
    dx__turn_free(remove_entry(c, c->oldest));
    dx__metric_add(c->metrics, DXM_OCACHE_EVICTIONS, DXM_NOLABELS, 1);
  }
}

/* (mu held) The index slot of instance's expectation (hash h), or the empty slot where it
** would go; NULL: no index yet. */
static uint32_t *expect_slot(dx_ocache_t *c, const char *instance, uint64_t h) {
  size_t mask = c->xslots - 1, i;
  if (!c->xidx) return NULL;
  for (i = h & mask; c->xidx[i]; i = (i + 1) & mask) {
    const expect_t *x = &c->expect[c->xidx[i] - 1];
    if (x->hash == h && strcmp(x->key, instance) == 0) break;
  }
  return &c->xidx[i];
}

/* (mu held) The expectation of instance (hash h), or NULL. */
static expect_t *expect_find(dx_ocache_t *c, const char *instance, uint64_t h) {
  uint32_t *s = expect_slot(c, instance, h);
  return s && *s ? &c->expect[*s - 1] : NULL;
}

/* (mu held) The index slot that holds expectation position pos (it is there). */
static uint32_t *slot_of_pos(dx_ocache_t *c, size_t pos) {
  size_t mask = c->xslots - 1, i;
  for (i = c->expect[pos].hash & mask; c->xidx[i] != pos + 1; i = (i + 1) & mask) {}
  return &c->xidx[i];
}

/* (mu held) An index of at least 2 * n slots, rebuilt from the expectations. 0: no memory. */
static int expect_index(dx_ocache_t *c, size_t n) {
  size_t slots = c->xslots ? c->xslots : 32, i, j;
  uint32_t *v;
  if (c->xidx && c->xslots >= 2 * n) return 1;
  while (slots < 2 * n) slots *= 2;
  if (!(v = calloc(slots, sizeof *v))) return 0;
  free(c->xidx);
  c->xidx = v;
  c->xslots = slots;
  for (i = 0; i < c->n_expect; i++) {
    for (j = c->expect[i].hash & (slots - 1); v[j]; j = (j + 1) & (slots - 1)) {}
    v[j] = (uint32_t)(i + 1);
  }
  return 1;
}

/* (mu held) Empty index slot s: later slots of its probe run move back where their home
** allows (backward-shift deletion: no tombstones). */
static void unindex(dx_ocache_t *c, uint32_t *s) {
  size_t mask = c->xslots - 1, i = (size_t)(s - c->xidx), j = i, k;
  for (;;) {
    j = (j + 1) & mask;
    if (!c->xidx[j]) break;
    k = c->expect[c->xidx[j] - 1].hash & mask; /* its home slot */
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue; /* stays: home after i */
    c->xidx[i] = c->xidx[j];
    i = j;
  }
  c->xidx[i] = 0;
}

int dx__ocache_expect(dx_ocache_t *c, const char *instance, uint64_t execution_id,
                      uint64_t n_events) {
  uint64_t h = hash_str(instance);
  expect_t *x;
  uint32_t *s;
  if (!c) return 0;
  dx__spin_lock(&c->mu);
  if (!(x = expect_find(c, instance, h))) {
    if (c->n_expect == c->cap_expect) {
      size_t cap = c->cap_expect ? 2 * c->cap_expect : 16;
      expect_t *v = realloc(c->expect, cap * sizeof *v);
      if (!v) goto fail;
      c->expect = v;
      c->cap_expect = cap;
    }
    if (!expect_index(c, c->n_expect + 1)) goto fail;
    s = expect_slot(c, instance, h); /* the empty slot it goes to */
    x = &c->expect[c->n_expect++];
    x->hash = h;
    *s = (uint32_t)c->n_expect;
  }
  x->key = instance; /* the newest caller's: each ends it before its copy goes */
  x->exec = execution_id;
  x->n_events = n_events;
  dx__spin_unlock(&c->mu);
  return 1;
fail:
  dx__spin_unlock(&c->mu);
  return 0;
}

void dx__ocache_expect_end(dx_ocache_t *c, const char *instance) {
  uint32_t *s;
  size_t pos, last;
  if (!c) return;
  dx__spin_lock(&c->mu);
  if ((s = expect_slot(c, instance, hash_str(instance))) != NULL && *s) {
    pos = *s - 1;
    last = c->n_expect - 1;
    unindex(c, s);
    if (pos != last) { /* the last one moves into its place */
      *slot_of_pos(c, last) = (uint32_t)(pos + 1);
      c->expect[pos] = c->expect[last];
    }
    c->n_expect--;
  }
  dx__spin_unlock(&c->mu);
}

int dx__ocache_holds(dx_ocache_t *c, const char *instance, uint64_t *execution_id,
                     uint64_t *n_events) {
  uint64_t h = hash_str(instance);
  entry_t *e;
  expect_t *x;
  int held = 0;
  dx__spin_lock(&c->mu);
  if ((e = *slot_of(c, instance, h)) != NULL) {
    *execution_id = e->exec;
    *n_events = e->n_events;
    held = 1;
  } else if ((x = expect_find(c, instance, h)) != NULL) {
    *execution_id = x->exec;
    *n_events = x->n_events;
    held = 1;
  }
  dx__spin_unlock(&c->mu);
  return held;
}

size_t dx__ocache_recent(dx_ocache_t *c, size_t max, char **ids, uint64_t *execution_ids,
                         uint64_t *n_events) {
  entry_t *e;
  size_t n = 0;
  dx__spin_lock(&c->mu);
  for (e = c->newest; e && n < max; e = e->older) {
    if (!(ids[n] = dx__strdup(e->key))) break;
    execution_ids[n] = e->exec;
    n_events[n++] = e->n_events;
  }
  dx__spin_unlock(&c->mu);
  return n;
}

size_t dx__ocache_count(const dx_ocache_t *c) { return c ? c->count : 0; }
int64_t dx__ocache_bytes(const dx_ocache_t *c) { return c ? c->bytes : 0; }
