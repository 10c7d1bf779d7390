/*
** metrics.c -- the metrics registry (see metrics.h) and its two renderings: the Prometheus
** text exposition format (for /metrics) and JSON (rt:metrics(), tests).
**
** The definition table below is the one list of metrics: names follow the Rust duroxide
** (`duroxide_*`) where it has the same metric, and docs/operations.md lists them all.
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <uv.h>

#include "metrics.h"
#include "spin.h"
#include "util.h"

typedef enum { COUNTER, GAUGE, HISTOGRAM } kind_t;

#define MAX_LABELS 4
#define MAX_SERIES 1000
#define MAX_LABEL_BYTES 200
#define N_BUCKETS 16

typedef struct {
  const char *name;
  kind_t kind;
  const char *help;
  const char *labels[MAX_LABELS]; /* NULL-terminated when shorter */
} def_t;

static const def_t defs[DXM__COUNT] = {
  [DXM_WORKER_INFO] = {"duroxide_worker_info", GAUGE,
    "This worker: always 1, labelled with its id and the engine version",
    {"worker_id", "version"}},
  [DXM_ORCH_STARTS] = {"duroxide_orchestration_starts_total", COUNTER,
    "Orchestration executions started (initiated_by: client, suborchestration, continueAsNew)",
    {"orchestration_name", "version", "initiated_by"}},
  [DXM_ORCH_COMPLETIONS] = {"duroxide_orchestration_completions_total", COUNTER,
    "Orchestration executions ended (status: success, failed, continuedAsNew)",
    {"orchestration_name", "version", "status"}},
  [DXM_ORCH_FAILURES] = {"duroxide_orchestration_failures_total", COUNTER,
    "Orchestration executions failed, by error category (application, infrastructure, "
    "configuration, poison)", {"orchestration_name", "version", "category"}},
  [DXM_ORCH_DURATION] = {"duroxide_orchestration_duration_seconds", HISTOGRAM,
    "Time from an execution's start to its end", {"orchestration_name", "status"}},
  [DXM_ORCH_TURNS] = {"duroxide_orchestration_turns_total", COUNTER,
    "Orchestration turns run (outcome: committed, abandoned, refused = the lock was lost)",
    {"outcome"}},
  [DXM_ORCH_TURN_DURATION] = {"duroxide_orchestration_turn_duration_seconds", HISTOGRAM,
    "Time one turn spent replaying history and running orchestration code", {NULL}},
  [DXM_ORCH_REPLAYS] = {"duroxide_orchestration_replays_total", COUNTER,
    "Turns that replayed stored history before running new code", {NULL}},
  [DXM_ORCH_REPLAYED_EVENTS] = {"duroxide_orchestration_replayed_events_total", COUNTER,
    "History events replayed by turns", {NULL}},
  [DXM_ORCH_FETCHED_EVENTS] = {"duroxide_orchestration_fetched_events_total", COUNTER,
    "History events fetched turns brought from the store (a cached instance's turn: its last)",
    {NULL}},
  [DXM_SUBORCH_CALLS] = {"duroxide_suborchestration_calls_total", COUNTER,
    "Sub-orchestrations scheduled, by the child's orchestration name", {"orchestration_name"}},
  [DXM_OCACHE_HITS] = {"duroxide_orchestration_cache_hits_total", COUNTER,
    "Turns that resumed a cached orchestration instead of replaying its history", {NULL}},
  [DXM_OCACHE_MISSES] = {"duroxide_orchestration_cache_misses_total", COUNTER,
    "Turns of a started execution that replayed history (reason: absent = not cached or "
    "evicted, stale = the store's history differs: another worker turned it, retry = a "
    "redelivery, refetch = evicted after the store sent only its last event: fetched again, "
    "code = its orchestration was registered again with other code)",
    {"reason"}},
  [DXM_OCACHE_EVICTIONS] = {"duroxide_orchestration_cache_evictions_total", COUNTER,
    "Cached orchestrations evicted to stay within orchestration_cache_size", {NULL}},
  [DXM_OCACHE_ENTRIES] = {"duroxide_orchestration_cache_entries", GAUGE,
    "Orchestrations cached on this worker now", {NULL}},
  [DXM_OCACHE_BYTES] = {"duroxide_orchestration_cache_bytes", GAUGE,
    "Memory the cached orchestrations hold (history, state and Lua heap estimate)", {NULL}},
  [DXM_ACT_EXECUTIONS] = {"duroxide_activity_executions_total", COUNTER,
    "Activity deliveries settled (outcome: success, app_error, config_error, poison, "
    "retry_unregistered, handed_back, fenced, lost)", {"activity_name", "outcome"}},
  [DXM_ACT_DURATION] = {"duroxide_activity_duration_seconds", HISTOGRAM,
    "Time an activity ran, for those that completed or failed", {"activity_name"}},
  [DXM_ACT_RUNNING] = {"duroxide_activities_running", GAUGE,
    "Activities running on this worker now", {NULL}},
  [DXM_STORE_CYCLES] = {"duroxide_store_cycles_total", COUNTER,
    "Store transactions (apply queued operations, fetch, commit), by result (ok, failed)",
    {"result"}},
  [DXM_STORE_CYCLE_DURATION] = {"duroxide_store_cycle_duration_seconds", HISTOGRAM,
    "Time of one store transaction, from begin to the end of its commit", {NULL}},
  [DXM_STORE_COMMIT_DURATION] = {"duroxide_store_commit_duration_seconds", HISTOGRAM,
    "Time of the commit call of a store transaction (sync: whether it was flushed to disk)",
    {"sync"}},
  [DXM_STORE_FETCH_DURATION] = {"duroxide_store_fetch_duration_seconds", HISTOGRAM,
    "Time a store transaction spent fetching and locking work (with the acks of the same call "
    "on providers that do both in one, such as PostgreSQL)", {NULL}},
  [DXM_STORE_FETCHED] = {"duroxide_store_fetched_items_total", COUNTER,
    "Items fetched and locked (queue: orchestrator, worker)", {"queue"}},
  [DXM_STORE_OPERATIONS] = {"duroxide_store_operations_total", COUNTER,
    "Store operations applied (operation: ack_orchestration, abandon_orchestration, "
    "ack_work, abandon_work, renew_work, enqueue, renew_sessions, release_sessions, "
    "cleanup_sessions; result: ok, refused)", {"operation", "result"}},
  [DXM_STORE_RETRIES] = {"duroxide_store_retries_total", COUNTER,
    "Store transactions retried whole after a transient failure (deadlock, lost connection)",
    {NULL}},
  [DXM_QUEUE_ORCH] = {"duroxide_orchestrator_queue_depth", GAUGE,
    "Orchestrator queue messages in the store (any state; polled every 10 s)", {NULL}},
  [DXM_QUEUE_WORK] = {"duroxide_worker_queue_depth", GAUGE,
    "Worker queue rows in the store (any state; polled every 10 s)", {NULL}},
  [DXM_INSTANCES] = {"duroxide_instances", GAUGE,
    "Instances in the store (polled every 10 s)", {NULL}},
  [DXM_SESS_OWNED] = {"duroxide_sessions_owned", GAUGE,
    "Sessions this worker owns now", {NULL}},
  [DXM_SESS_CLAIMS] = {"duroxide_session_claims_total", COUNTER,
    "Sessions this worker became the owner of (how: new, reclaim)", {"how"}},
  [DXM_SESS_MOVES] = {"duroxide_session_moves_total", COUNTER,
    "Claims of a session another worker owned before (the session moved here)", {NULL}},
  [DXM_SESS_RELEASES] = {"duroxide_session_releases_total", COUNTER,
    "Sessions this worker stopped owning, by reason (idle, lost, closed, shutdown, ...)",
    {"reason"}},
};

/* Upper bounds (seconds) of the histogram buckets; +Inf is implicit. */
static const double bucket_le[N_BUCKETS] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                            0.1,    0.25,  0.5,    1,     2.5,  5,     10,
                                            30,     120};

typedef struct series_s {
  struct series_s *next;      /* insertion order */
  struct series_s *hnext;     /* same hash bucket */
  uint32_t hash;
  char *labels[MAX_LABELS];
  double value;               /* counter, gauge; histogram: sum */
  uint64_t count;             /* histogram */
  uint64_t buckets[N_BUCKETS]; /* histogram: observations <= bucket_le[i] (not cumulative) */
} series_t;

#define HASH_BUCKETS 64

typedef struct {
  series_t *head, *tail;
  size_t n;
  series_t *bucket[HASH_BUCKETS]; /* lookup by label values without scanning every series */
  series_t *last;  /* the series found last: a worker records the same few again and again */
} family_t;

struct dx_metrics_s {
  dx__spin_t mu;              /* the families: taken per record, on any thread (spin.h) */
  family_t fam[DXM__COUNT];
  uv_mutex_t read_mu;         /* guards on_read: its owner may go while a rendering runs it */
  void (*on_read)(void *ud);  /* dx__metrics_on_read */
  void *on_read_ud;
};

static size_t n_labels(const def_t *d) {
  size_t n = 0;
  while (n < MAX_LABELS && d->labels[n]) n++;
  return n;
}

dx_metrics_t *dx__metrics_new(void) {
  dx_metrics_t *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  if (uv_mutex_init(&m->read_mu) != 0) {
    free(m);
    return NULL;
  }
  return m;
}

void dx__metrics_on_read(dx_metrics_t *m, void (*fn)(void *ud), void *ud) {
  uv_mutex_lock(&m->read_mu);
  m->on_read = fn;
  m->on_read_ud = ud;
  uv_mutex_unlock(&m->read_mu);
}

/* Before a rendering: let the owner of read-time gauges set them. */
static void refresh(dx_metrics_t *m) {
  uv_mutex_lock(&m->read_mu);
  if (m->on_read) m->on_read(m->on_read_ud);
  uv_mutex_unlock(&m->read_mu);
}

void dx__metrics_free(dx_metrics_t *m) {
  size_t i, k;
  if (!m) return;
  for (i = 0; i < DXM__COUNT; i++) {
    series_t *s = m->fam[i].head;
    while (s) {
      series_t *next = s->next;
      for (k = 0; k < MAX_LABELS; k++) free(s->labels[k]);
      free(s);
      s = next;
    }
  }
  uv_mutex_destroy(&m->read_mu);
  free(m);
}

/* A label value as stored: valid UTF-8, at most MAX_LABEL_BYTES bytes (before the fix). */
static char *label_copy(const char *v) {
  size_t n = v ? strlen(v) : 0;
  return dx__utf8_fix(v ? v : "", n > MAX_LABEL_BYTES ? MAX_LABEL_BYTES : n, NULL);
}

/* Already in stored form (the common case: no copy needed to look the series up). */
static int label_is_clean(const char *v) {
  size_t n = strlen(v);
  return n <= MAX_LABEL_BYTES && dx__utf8_valid_prefix(v, n) == n;
}

/* FNV-1a over the label values (each followed by a 0 byte, so ("ab","") != ("a","b")). */
static uint32_t labels_hash(const char *const *labels, size_t nl) {
  uint32_t h = 2166136261u;
  size_t k;
  for (k = 0; k < nl; k++) {
    const unsigned char *p = (const unsigned char *)labels[k];
    for (; *p; p++) h = (h ^ *p) * 16777619u;
    h = (h ^ 0xffu) * 16777619u;
  }
  return h;
}

static int same_labels(const series_t *s, const char *const *labels, size_t nl) {
  size_t k;
  for (k = 0; k < nl; k++)
    if (strcmp(s->labels[k], labels[k]) != 0) return 0;
  return 1;
}

/* The series of `id` with these (clean, non-NULL) labels, created when new (mu held). NULL
** on ENOMEM. */
static series_t *series_find_h(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels,
                               uint32_t h);

static series_t *series_find(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels) {
  return series_find_h(m, id, labels, labels_hash(labels, n_labels(&defs[id])));
}

/* The same, with labels_hash(labels) given. */
static series_t *series_find_h(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels,
                               uint32_t h) {
  static const char *const overflow[MAX_LABELS] = {"_overflow", "_overflow", "_overflow",
                                                   "_overflow"};
  family_t *f = &m->fam[id];
  size_t nl = n_labels(&defs[id]), k;
  series_t *s;
  for (s = f->bucket[h % HASH_BUCKETS]; s; s = s->hnext)
    if (s->hash == h && same_labels(s, labels, nl)) return s;
  if (f->n >= MAX_SERIES && labels != overflow) return series_find(m, id, overflow);
  if (!(s = calloc(1, sizeof *s))) return NULL;
  for (k = 0; k < nl; k++) {
    if (!(s->labels[k] = dx__strdup(labels[k]))) {
      while (k > 0) free(s->labels[--k]);
      free(s);
      return NULL;
    }
  }
  s->hash = h;
  s->hnext = f->bucket[h % HASH_BUCKETS];
  f->bucket[h % HASH_BUCKETS] = s;
  if (f->tail) f->tail->next = s;
  else f->head = s;
  f->tail = s;
  f->n++;
  return s;
}

/* series_find with the caller's labels: NULL ones read as "", bad UTF-8 and long values are
** fixed up first (copies freed here). */
/* Fold label v into the running labels_hash *h when it is plain ASCII within
** MAX_LABEL_BYTES (stored as it is: the common case, checked in the same pass); 0 when it needs
** label_is_clean's full look. */
static int ascii_label(const char *v, uint32_t *h) {
  const unsigned char *p = (const unsigned char *)v;
  uint32_t x = *h;
  for (; *p; p++) {
    if (*p >= 0x80) return 0;
    x = (x ^ *p) * 16777619u;
  }
  if ((size_t)(p - (const unsigned char *)v) > MAX_LABEL_BYTES) return 0;
  *h = (x ^ 0xffu) * 16777619u;
  return 1;
}

static series_t *series_get(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels) {
  const char *use[MAX_LABELS] = {0};
  char *fixed[MAX_LABELS] = {0};
  size_t nl = n_labels(&defs[id]), k;
  series_t *s = NULL;
  uint32_t h = 2166136261u;
  int oom = 0, ascii = 1;
  family_t *f = &m->fam[id];
  for (k = 0; k < nl; k++) use[k] = labels && labels[k] ? labels[k] : "";
  /* the same labels as last time: stored as they are, so they are clean (no hash needed) */
  if (f->last && same_labels(f->last, use, nl)) return f->last;
  for (k = 0; k < nl && ascii; k++) ascii = ascii_label(use[k], &h);
  if (ascii) return f->last = series_find_h(m, id, use, h);
  for (k = 0; k < nl; k++)
    if (!label_is_clean(use[k])) oom |= !(use[k] = fixed[k] = label_copy(use[k]));
  if (!oom) s = series_find(m, id, use);
  for (k = 0; k < nl; k++) free(fixed[k]);
  return s;
}

static void record(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels, double v,
                   kind_t kind) {
  series_t *s;
  size_t i;
  if (!m || (int)id < 0 || id >= DXM__COUNT || defs[id].kind != kind || isnan(v)) return;
  dx__spin_lock(&m->mu);
  /* a family without labels has one series, its head once made: most hot-path calls */
  s = !defs[id].labels[0] && m->fam[id].head ? m->fam[id].head : series_get(m, id, labels);
  if (s != NULL) {
    if (kind == COUNTER) {
      if (v > 0) s->value += v;
    } else if (kind == GAUGE) {
      s->value = v;
    } else {
      s->value += v;
      s->count++;
      for (i = 0; i < N_BUCKETS; i++)
        if (v <= bucket_le[i]) {
          s->buckets[i]++;
          break;
        }
    }
  }
  dx__spin_unlock(&m->mu);
}

void dx__metric_add(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels, double v) {
  record(m, id, labels, v, COUNTER);
}

void dx__metric_set(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels, double v) {
  record(m, id, labels, v, GAUGE);
}

void dx__metric_observe(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels,
                        double v) {
  record(m, id, labels, v, HISTOGRAM);
}

double dx__metric_sum(const dx_metrics_t *cm, dx_metric_id_t id) {
  dx_metrics_t *m = (dx_metrics_t *)cm; /* locking does not change the values */
  const series_t *s;
  double sum = 0;
  if (!m || (int)id < 0 || id >= DXM__COUNT) return 0;
  dx__spin_lock(&m->mu);
  for (s = m->fam[id].head; s; s = s->next)
    sum += defs[id].kind == HISTOGRAM ? (double)s->count : s->value;
  dx__spin_unlock(&m->mu);
  return sum;
}

double dx__seconds_since(uint64_t start) { return (double)(uv_hrtime() - start) / 1e9; }

/* {===== Prometheus text exposition format (version 0.0.4) =====} */

typedef struct {
  char *p;
  size_t n, cap;
  int oom;
} buf_t;

static void put(buf_t *b, const char *s, size_t n) {
  if (b->oom) return;
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    char *p;
    while (cap < b->n + n + 1) cap *= 2;
    if (!(p = realloc(b->p, cap))) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

static void puts_(buf_t *b, const char *s) { put(b, s, strlen(s)); }

/* A sample value: integers without a fraction, others in the shortest form %g keeps exact
** enough for monitoring (15 significant digits). */
static void put_number(buf_t *b, double v) {
  char t[64];
  if (v == floor(v) && fabs(v) < 1e15) snprintf(t, sizeof t, "%.0f", v);
  else snprintf(t, sizeof t, "%.15g", v);
  puts_(b, t);
}

/* A label value with the format's escapes: backslash, double quote and newline. */
static void put_label_value(buf_t *b, const char *v) {
  for (; *v; v++) {
    if (*v == '\\') puts_(b, "\\\\");
    else if (*v == '"') puts_(b, "\\\"");
    else if (*v == '\n') puts_(b, "\\n");
    else put(b, v, 1);
  }
}

/* {l1="v1",...[,le="x"]} (nothing when there are no labels at all) */
static void put_labels(buf_t *b, const def_t *d, const series_t *s, const char *le) {
  size_t nl = n_labels(d), k;
  if (!nl && !le) return;
  puts_(b, "{");
  for (k = 0; k < nl; k++) {
    if (k) puts_(b, ",");
    puts_(b, d->labels[k]);
    puts_(b, "=\"");
    put_label_value(b, s->labels[k]);
    puts_(b, "\"");
  }
  if (le) {
    if (nl) puts_(b, ",");
    puts_(b, "le=\"");
    puts_(b, le);
    puts_(b, "\"");
  }
  puts_(b, "}");
}

static void put_sample(buf_t *b, const def_t *d, const char *suffix, const series_t *s,
                       const char *le, double v) {
  puts_(b, d->name);
  puts_(b, suffix);
  put_labels(b, d, s, le);
  puts_(b, " ");
  put_number(b, v);
  puts_(b, "\n");
}

static void render_family(buf_t *b, const def_t *d, const family_t *f) {
  static const char *const types[] = {"counter", "gauge", "histogram"};
  static const series_t zero;
  const series_t *s;
  size_t i;
  puts_(b, "# HELP ");
  puts_(b, d->name);
  puts_(b, " ");
  puts_(b, d->help); /* our own text: no backslash or newline to escape */
  puts_(b, "\n# TYPE ");
  puts_(b, d->name);
  puts_(b, " ");
  puts_(b, types[d->kind]);
  puts_(b, "\n");
  /* a metric without labels is shown at zero before its first recording */
  if (!f->head && n_labels(d) == 0) {
    if (d->kind == HISTOGRAM) {
      put_sample(b, d, "_bucket", &zero, "+Inf", 0);
      put_sample(b, d, "_sum", &zero, NULL, 0);
      put_sample(b, d, "_count", &zero, NULL, 0);
    } else {
      put_sample(b, d, "", &zero, NULL, 0);
    }
  }
  for (s = f->head; s; s = s->next) {
    if (d->kind != HISTOGRAM) {
      put_sample(b, d, "", s, NULL, s->value);
      continue;
    }
    {
      uint64_t cum = 0;
      char le[32];
      for (i = 0; i < N_BUCKETS; i++) {
        cum += s->buckets[i];
        snprintf(le, sizeof le, "%g", bucket_le[i]);
        put_sample(b, d, "_bucket", s, le, (double)cum);
      }
      put_sample(b, d, "_bucket", s, "+Inf", (double)s->count);
      put_sample(b, d, "_sum", s, NULL, s->value);
      put_sample(b, d, "_count", s, NULL, (double)s->count);
    }
  }
}

char *dx_metrics_render_prometheus(dx_metrics_t *m) {
  buf_t b = {0};
  size_t i;
  if (!m) return NULL;
  refresh(m);
  dx__spin_lock(&m->mu);
  for (i = 0; i < DXM__COUNT; i++) render_family(&b, &defs[i], &m->fam[i]);
  dx__spin_unlock(&m->mu);
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  return b.p;
}

/* {===== JSON =====} */

static json_t *series_json(const def_t *d, const series_t *s) {
  json_t *o = json_object(), *labels = json_object();
  size_t k, nl = n_labels(d);
  int bad = !o || !labels;
  for (k = 0; k < nl && !bad; k++)
    bad = json_object_set_new(labels, d->labels[k], json_string(s->labels[k])) != 0;
  bad |= json_object_set_new(o, "labels", labels) != 0;
  labels = NULL; /* o owns it now (set_new consumes even on failure) */
  if (d->kind == HISTOGRAM) {
    json_t *buckets = json_array();
    uint64_t cum = 0;
    size_t i;
    bad |= !buckets;
    for (i = 0; i < N_BUCKETS && !bad; i++) {
      cum += s->buckets[i];
      bad = json_array_append_new(buckets, json_pack("{s:f, s:I}", "le", bucket_le[i], "count",
                                                     (json_int_t)cum)) != 0;
    }
    bad |= json_object_set_new(o, "buckets", buckets) != 0;
    bad |= json_object_set_new(o, "count", json_integer((json_int_t)s->count)) != 0;
    bad |= json_object_set_new(o, "sum", json_real(s->value)) != 0;
  } else if (s->value == floor(s->value) && fabs(s->value) < 9e15) {
    bad |= json_object_set_new(o, "value", json_integer((json_int_t)s->value)) != 0;
  } else {
    bad |= json_object_set_new(o, "value", json_real(s->value)) != 0;
  }
  if (bad) {
    json_decref(o);
    return NULL;
  }
  return o;
}

char *dx_metrics_render_json(dx_metrics_t *m) {
  static const char *const types[] = {"counter", "gauge", "histogram"};
  json_t *root;
  char *text = NULL;
  size_t i;
  int bad = 0;
  if (!m || !(root = json_object())) return NULL;
  refresh(m);
  dx__spin_lock(&m->mu);
  for (i = 0; i < DXM__COUNT && !bad; i++) {
    const def_t *d = &defs[i];
    json_t *fam = json_pack("{s:s, s:s, s:[]}", "type", types[d->kind], "help", d->help,
                            "series");
    json_t *arr = fam ? json_object_get(fam, "series") : NULL;
    const series_t *s;
    bad = !fam;
    for (s = m->fam[i].head; s && !bad; s = s->next) {
      json_t *sj = series_json(d, s);
      bad = !sj || json_array_append_new(arr, sj) != 0;
    }
    bad |= json_object_set_new(root, d->name, fam) != 0;
  }
  dx__spin_unlock(&m->mu);
  if (!bad) text = json_dumps(root, JSON_COMPACT | JSON_SORT_KEYS);
  json_decref(root);
  return text;
}
