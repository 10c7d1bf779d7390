/*
** metrics.h -- a runtime's metrics registry: counters, gauges and latency histograms (internal).
**
** Every metric is a row of the definition table in metrics.c (name, type, help, label names),
** named here by its DXM_* id. Recording takes the registry's mutex, so the loop thread, the
** store thread and a reader (the /metrics endpoint, rt:metrics()) can all use it at once.
** Label values are copied, made valid UTF-8 and cut at 200 bytes; a metric keeps at most
** 1000 label combinations, past which values are counted under labels "_overflow" (so a
** stream of distinct activity names from an orchestration cannot grow memory without bound).
*/
#ifndef DX_METRICS_H
#define DX_METRICS_H

#include "duroxide.h"

/* The metrics, in definition-table order (metrics.c). */
typedef enum {
  DXM_WORKER_INFO,
  /* orchestrations (loop thread, when a turn's commit is applied) */
  DXM_ORCH_STARTS,
  DXM_ORCH_COMPLETIONS,
  DXM_ORCH_FAILURES,
  DXM_ORCH_DURATION,
  DXM_ORCH_TURNS,
  DXM_ORCH_TURN_DURATION,
  DXM_ORCH_REPLAYS,
  DXM_ORCH_REPLAYED_EVENTS,
  DXM_ORCH_FETCHED_EVENTS,
  DXM_SUBORCH_CALLS,
  /* the orchestration cache (loop thread) */
  DXM_OCACHE_HITS,
  DXM_OCACHE_MISSES,
  DXM_OCACHE_EVICTIONS,
  DXM_OCACHE_ENTRIES,
  DXM_OCACHE_BYTES,
  /* activities (loop thread) */
  DXM_ACT_EXECUTIONS,
  DXM_ACT_DURATION,
  DXM_ACT_RUNNING,
  /* the store thread */
  DXM_STORE_CYCLES,
  DXM_STORE_CYCLE_DURATION,
  DXM_STORE_COMMIT_DURATION,
  DXM_STORE_FETCH_DURATION,
  DXM_STORE_FETCHED,
  DXM_STORE_OPERATIONS,
  DXM_STORE_RETRIES,
  DXM_QUEUE_ORCH,
  DXM_QUEUE_WORK,
  DXM_INSTANCES,
  /* sessions (loop thread) */
  DXM_SESS_OWNED,
  DXM_SESS_CLAIMS,
  DXM_SESS_MOVES,
  DXM_SESS_RELEASES,
  DXM__COUNT
} dx_metric_id_t;

/* Label values of one recording, in the order of the metric's label names. */
#define DXM_LABELS(...) ((const char *const[]){__VA_ARGS__})
#define DXM_NOLABELS ((const char *const *)NULL)

dx_metrics_t *dx__metrics_new(void);
void dx__metrics_free(dx_metrics_t *m);
/* fn(ud) sets gauges from its owner's state just before each rendering (Prometheus, JSON)
** reads them: a value that changes on every turn is set when read, not on every change.
** One per registry; fn NULL removes it, and returns only once no rendering runs it any more.
** fn runs on the rendering's thread, without the registry's lock (it may set metrics). */
void dx__metrics_on_read(dx_metrics_t *m, void (*fn)(void *ud), void *ud);

/* Counters: add v (>= 0). Gauges: set to v. Histograms: record one observation of v
** (seconds). labels: the metric's label values (NULL strings read as ""); NULL when it has
** none. A NULL registry is ignored. Any thread. */
void dx__metric_add(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels, double v);
void dx__metric_set(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels, double v);
void dx__metric_observe(dx_metrics_t *m, dx_metric_id_t id, const char *const *labels,
                        double v);
/* Sum over every label combination of a counter or gauge (the count for a histogram). */
double dx__metric_sum(const dx_metrics_t *m, dx_metric_id_t id);

/* What one orchestration turn changed, once its settlement was applied (observe.c): turns by
** outcome, and for a committed ack the execution started, ended or failed (with its
** duration). ack is NULL when the turn was abandoned; rc is the settlement's result;
** started_ms: when the execution started (dx__turn_started_ms; 0: unknown). */
void dx__observe_turn(dx_metrics_t *m, const dx_orch_item_t *item, const dx_orch_ack_t *ack,
                      int rc, int64_t now_ms, int64_t started_ms);

/* Seconds since a uv_hrtime() reading. */
double dx__seconds_since(uint64_t hrtime_start);

#endif
