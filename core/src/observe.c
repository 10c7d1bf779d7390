/*
** observe.c -- what an orchestration turn means for the metrics (metrics.h): the turn's
** outcome, sub-orchestrations it scheduled, and the start, end and failure of executions,
** read from the turn's commit.
*/
#include <string.h>

#include "codec.h"
#include "metrics.h"

static const char *const status_label[] = {
  [DX_STATUS_COMPLETED] = "success",
  [DX_STATUS_FAILED] = "failed",
  [DX_STATUS_CONTINUED_AS_NEW] = "continuedAsNew",
};

void dx__observe_turn(dx_metrics_t *m, const dx_orch_item_t *item, const dx_orch_ack_t *ack,
                      int rc, int64_t now, int64_t started_ms) {
  const char *name, *version;
  int64_t t0;
  size_t i;
  dx__metric_add(m, DXM_ORCH_TURNS, DXM_LABELS(rc ? "refused" : ack ? "committed" : "abandoned"),
                 1);
  if (rc || !ack) return;
  for (i = 0; i < ack->delta_len; i++)
    if (ack->delta[i].kind == DX_EV_SUB_SCHEDULED)
      dx__metric_add(m, DXM_SUBORCH_CALLS, DXM_LABELS(ack->delta[i].name), 1);
  /* a start names the execution in the commit; later turns read it from the instance */
  name = ack->orchestration_name ? ack->orchestration_name : item->orchestration_name;
  version = ack->orchestration_name ? ack->orchestration_version : item->orchestration_version;
  if (ack->orchestration_name)
    dx__metric_add(m, DXM_ORCH_STARTS,
                   DXM_LABELS(name, version, ack->execution_id > 1 ? "continueAsNew"
                                            : ack->parent_instance ? "suborchestration"
                                                                   : "client"), 1);
  if (ack->status != DX_STATUS_COMPLETED && ack->status != DX_STATUS_FAILED &&
      ack->status != DX_STATUS_CONTINUED_AS_NEW)
    return;
  dx__metric_add(m, DXM_ORCH_COMPLETIONS, DXM_LABELS(name, version, status_label[ack->status]),
                 1);
  if (ack->status == DX_STATUS_FAILED)
    dx__metric_add(m, DXM_ORCH_FAILURES,
                   DXM_LABELS(name, version,
                              dx__category_name(ack->failure ? ack->failure->category : 0)), 1);
  if ((t0 = started_ms) > 0 && now >= t0)
    dx__metric_observe(m, DXM_ORCH_DURATION, DXM_LABELS(name, status_label[ack->status]),
                       (double)(now - t0) / 1000.0);
}
