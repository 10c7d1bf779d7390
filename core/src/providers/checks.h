/*
** checks.h -- argument rules every provider applies the same way (internal): ids, item kinds,
** payload sizes, event ids, acks, and when an enqueued orchestrator item becomes visible.
** Each check returns 0 or DX_EINVAL / DX_ETOOBIG with a message naming the problem.
*/
#ifndef DX_PROVIDER_CHECKS_H
#define DX_PROVIDER_CHECKS_H

#include "duroxide/provider.h"

int dx__check_instance(const char *inst, dx_error_t *err);
/* Every id of a list of n instance ids (ids may be NULL only when n is 0). */
int dx__check_instances(const char *const *ids, size_t n, dx_error_t *err);
int dx__check_item(const dx_work_item_t *w, dx_error_t *err);
int dx__check_payload(const dx_work_item_t *w, dx_error_t *err);
int dx__check_events(const dx_event_t *ev, size_t n, dx_error_t *err);
int dx__check_worker_id(const char *id, dx_error_t *err);
int dx__check_ack(const dx_orch_ack_t *a, dx_error_t *err);
/* A key-value key: non-empty, at most DX_MAX_KV_KEY_BYTES. */
int dx__check_kv_key(const char *key, dx_error_t *err);
/* 1 when an ack with this status ends the execution: its key-value changes become committed. */
int dx__kv_folds(int status);
/* Timers become visible when they fire; everything else after the delay (saturating). */
int64_t dx__visible_at(const dx_work_item_t *w, int64_t now, int64_t delay_ms);
/* A session event to append: session id, event word and worker id present, within limits. */
int dx__check_session_event(const dx_session_event_t *ev, dx_error_t *err);
/* The SUB_FAILED item that tells the parent of a terminated child (terminate_instance):
** filled from the child's ORCH_STARTED event `started` (borrowed) and `why`. 1 when the
** child has a parent to tell, else 0 (*out untouched). */
int dx__sub_failed_for_parent(const dx_event_t *started, const dx_failure_t *why,
                              dx_work_item_t *out);
/* 1 when the fetch config declines session sid (cfg->declined: a rolling upgrade). */
int dx__session_declined(const dx_session_cfg_t *cfg, const char *sid);

#endif
