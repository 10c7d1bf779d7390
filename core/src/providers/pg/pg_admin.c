/*
** pg_admin.c -- management on PostgreSQL: list pages, executions, an instance's queue rows,
** delete, prune, terminate (the SQL is in pg_sql.c, PQ_ADM_*).
*/
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "providers/checks.h"
#include "providers/listing.h"
#include "providers/pg/pg_internal.h"
#include "util.h"

/* {===== list_page =====} */

/* One batch of queued-never-run candidates: of the `want` newest START messages before seq
** `before`, those of instances without a record. *last_seq: the seq of the batch's last
** message when the batch was full (0: nothing older is left). */
static int queued_batch(tx_t *t, const dx_list_query_t *q, uint64_t before, size_t want,
                        dx__list_cand_t **out, size_t *n, uint64_t *last_seq) {
  PGresult *res;
  dx__list_cand_t *v;
  qp_t qp;
  int rc, i, rows;
  *out = NULL;
  *n = 0;
  *last_seq = 0;
  dx__qp_init(&qp);
  dx__qp_i64(&qp, before > INT64_MAX ? INT64_MAX : (int64_t)before);
  dx__qp_i64(&qp, (int64_t)want);
  if (q->name) dx__qp_str(&qp, q->name);
  if ((rc = dx__pg_q(t, q->name ? PQ_ADM_QUEUED_N : PQ_ADM_QUEUED, &qp, &res))) return rc;
  rows = PQntuples(res);
  if (!(v = calloc(rows ? (size_t)rows : 1, sizeof *v))) {
    PQclear(res);
    return dx__pg_nomem(t->err);
  }
  if (rows > 0 && (size_t)rows == want) *last_seq = (uint64_t)dx__col_i64(res, rows - 1, 1);
  for (i = 0; i < rows && !rc; i++) {
    dx_work_item_t w;
    dx_error_t derr = {0};
    if (strcmp(PQgetvalue(res, i, 4), "t") == 0) continue; /* it has run: a record exists */
    if (dx__work_item_decode(PQgetvalue(res, i, 3), (size_t)PQgetlength(res, i, 3), &w, &derr))
      continue; /* `check` reports undecodable messages; a listing skips them */
    if (w.kind == DX_WI_START) {
      v[*n].seq = (uint64_t)dx__col_i64(res, i, 1);
      if (dx__list_queued_row(PQgetvalue(res, i, 0), &w, dx__col_i64(res, i, 2), &v[*n].row))
        rc = dx__pg_nomem(t->err);
      else
        (*n)++;
    }
    dx_work_item_clear(&w);
  }
  PQclear(res);
  *out = v;
  return rc;
}

/* The queued-never-run part of a page: batches of one page (+1) after the cursor until the
** page is full or nothing older is left (a filter such as created_after may skip rows). */
static int queued_page(tx_t *t, const dx_list_query_t *q, const dx__cursor_t *cur,
                       dx_instance_info_t *rows, size_t *n, int *more, dx__cursor_t *last) {
  dx__cursor_t at = *cur;
  uint64_t next;
  int rc = 0;
  at.phase = 'q';
  if (cur->phase != 'q') at.seq = UINT64_MAX;
  while (!rc && !*more) {
    dx__list_cand_t *c = NULL;
    size_t nc = 0, i;
    rc = queued_batch(t, q, at.seq, q->limit - *n + 1, &c, &nc, &next);
    if (!rc) rc = dx__list_take_queued(q, &at, c, nc, rows, n, more, last);
    else
      for (i = 0; i < nc; i++) dx_instance_info_clear(&c[i].row);
    free(c);
    if (!next) break;
    at.seq = next;
  }
  return rc;
}

/* The page statement of the query's status and name filters. */
static pg_stmt_t page_stmt(const dx_list_query_t *q) {
  static const pg_stmt_t by[2][5] = {
    {PQ_ADM_PAGE, PQ_ADM_PAGE_RUN, PQ_ADM_PAGE_DONE, PQ_ADM_PAGE_FAIL, PQ_ADM_PAGE_END},
    {PQ_ADM_PAGE_N, PQ_ADM_PAGE_N_RUN, PQ_ADM_PAGE_N_DONE, PQ_ADM_PAGE_N_FAIL, PQ_ADM_PAGE_N_END}};
  int k = q->status == DX_STATUS_RUNNING ? 1 : q->status == DX_STATUS_COMPLETED ? 2
        : q->status == DX_STATUS_FAILED ? 3 : q->status == DX_LIST_TERMINAL ? 4 : 0;
  return by[q->name != NULL][k];
}

static int recorded_page(tx_t *t, const dx_list_query_t *q, const dx__cursor_t *cur,
                         dx_instance_info_t *rows, size_t *n, int *more, dx__cursor_t *last) {
  PGresult *res;
  qp_t qp;
  int rc, i, oom = 0;
  size_t want = q->limit - *n;
  dx__qp_init(&qp);
  dx__qp_i64(&qp, cur->phase == 'i' ? cur->at : INT64_MAX);
  dx__qp_i64(&qp, cur->phase == 'i' ? (int64_t)cur->seq : INT64_MAX);
  dx__qp_str(&qp, q->name);
  dx__qp_i64(&qp, q->created_after_ms);
  dx__qp_i64(&qp, q->updated_before_ms);
  dx__qp_i64(&qp, q->roots_only ? 1 : 0);
  dx__qp_i64(&qp, (int64_t)want + 1);
  if ((rc = dx__pg_q(t, page_stmt(q), &qp, &res))) return rc;
  for (i = 0; i < PQntuples(res); i++) {
    dx_instance_info_t *r;
    if ((size_t)i == want) {
      *more = 1;
      break;
    }
    r = &rows[(*n)++];
    memset(r, 0, sizeof *r);
    r->instance_id = dx__col_str(res, i, 0, &oom);
    dx__pg_info_fill(res, i, 1, r, &oom);
    last->phase = 'i';
    last->at = r->created_at_ms;
    last->seq = (uint64_t)dx__col_i64(res, i, 15);
  }
  PQclear(res);
  return oom ? dx__pg_nomem(t->err) : 0;
}

static int list_page_tx(tx_t *t, const dx_list_query_t *q, const dx__cursor_t *cur,
                        dx_instance_info_t *rows, size_t *n, int *more, dx__cursor_t *last) {
  int rc = 0;
  if (dx__list_wants_queued(q) && cur->phase != 'i') rc = queued_page(t, q, cur, rows, n, more, last);
  /* a page already full still asks for one recorded row: is there a next page? */
  if (!rc && !*more && q->status != DX_STATUS_NONE)
    rc = recorded_page(t, q, cur, rows, n, more, last);
  return rc;
}

int dx__pg_list_page(dx_provider_t *pp, int64_t now, const dx_list_query_t *q,
                     dx_instance_info_t **rows, size_t *n, char **next, dx_error_t *err) {
  dx__cursor_t cur, last = {0, 0, 0};
  int more = 0, rc;
  tx_t t;
  (void)now;
  if ((rc = dx__list_page_open(q, rows, n, next, &cur, err))) return rc;
  /* queued starts and recorded instances are read by several statements: one snapshot, or a
  ** first turn committing between them listed an instance twice (queued, then recorded) */
  if (!(rc = dx__pg_snapshot_begin((pg_t *)pp, &t, err)))
    rc = dx__pg_tx_end(&t, list_page_tx(&t, q, &cur, *rows, n, &more, &last));
  return dx__list_page_close(rc, more, &last, rows, n, next, err);
}

/* {===== executions and queue rows =====} */

static int require_record(tx_t *t, const char *inst) {
  PGresult *res;
  qp_t q;
  int rc, found;
  if ((rc = dx__pg_lookup_id(t, inst))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  if ((rc = dx__pg_q(t, PQ_INST_GET, &q, &res))) return rc;
  found = PQntuples(res) == 1;
  PQclear(res);
  return found ? 0 : dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
}

/* One statement (PQ_ADM_EXECS): the record and its executions in one snapshot. */
static int executions_tx(tx_t *t, const char *inst, dx_execution_info_t **out, size_t *n) {
  PGresult *res;
  qp_t q;
  int rc, i, rows;
  if ((rc = dx__pg_lookup_id(t, inst))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  if ((rc = dx__pg_q(t, PQ_ADM_EXECS, &q, &res))) return rc;
  if ((rows = PQntuples(res)) == 0) {
    PQclear(res);
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
  }
  if (dx__col_null(res, 0, 0)) rows = 0; /* a record without executions */
  if (!(*out = calloc(rows ? (size_t)rows : 1, sizeof **out))) {
    PQclear(res);
    return dx__pg_nomem(t->err);
  }
  *n = (size_t)rows;
  for (i = 0; i < rows; i++) {
    dx_execution_info_t *e = &(*out)[i];
    e->execution_id = (uint64_t)dx__col_i64(res, i, 0);
    e->status = (int)dx__col_i64(res, i, 1);
    e->started_at_ms = dx__col_i64(res, i, 2);
    e->completed_at_ms = e->status == DX_STATUS_RUNNING ? 0 : dx__col_i64(res, i, 3);
    e->event_count = (uint64_t)dx__col_i64(res, i, 4);
  }
  PQclear(res);
  return 0;
}

int dx__pg_list_executions(dx_provider_t *pp, const char *instance, dx_execution_info_t **out,
                           size_t *n, dx_error_t *err) {
  tx_t t;
  int rc;
  if (!out || !n) return dx_error_set(err, DX_EINVAL, "out/n is NULL");
  *out = NULL;
  *n = 0;
  if ((rc = dx__check_instance(instance, err)) || (rc = dx__pg_read_begin((pg_t *)pp, &t, err)))
    return rc;
  rc = dx__pg_tx_end(&t, executions_tx(&t, instance, out, n));
  if (rc) {
    free(*out);
    *out = NULL;
    *n = 0;
  }
  return rc;
}

/* Rows of PQ_ADM_QUEUE (queue, seq, visible_at, attempt, item, locked_until, locked_by) to
** cb, until it asks to stop. */
static int queue_report(PGresult *res, dx_queued_cb cb, void *ud, dx_error_t *err) {
  int i, rc = 0;
  for (i = 0; i < PQntuples(res); i++) {
    dx_work_item_t w;
    dx_queued_t q;
    dx_error_t derr = {0};
    int queue = (int)dx__col_i64(res, i, 0), stop;
    if ((rc = dx__work_item_decode(PQgetvalue(res, i, 4), (size_t)PQgetlength(res, i, 4), &w,
                                   &derr)))
      return dx_error_set(err, rc == DX_ENOMEM ? DX_ENOMEM : DX_ECORRUPT,
                          "undecodable %s queue row: %s",
                          queue == DX_QUEUE_WORKER ? "worker" : "orchestrator", derr.msg);
    memset(&q, 0, sizeof q);
    q.queue = queue;
    q.item = &w;
    q.visible_at_ms = dx__col_i64(res, i, 2);
    q.attempt = (uint32_t)dx__col_i64(res, i, 3);
    q.locked_until_ms = dx__col_i64(res, i, 5);
    q.locked_by = dx__col_null(res, i, 6) ? NULL : PQgetvalue(res, i, 6);
    stop = cb(ud, &q);
    dx_work_item_clear(&w);
    if (stop) break;
  }
  return 0;
}

/* Both queues in one statement (one snapshot: a turn that takes a message and queues an
** activity is seen whole or not at all). */
int dx__pg_instance_queue(dx_provider_t *pp, const char *instance, dx_queued_cb cb, void *ud,
                          dx_error_t *err) {
  PGresult *res = NULL;
  qp_t q;
  int rc;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  if ((rc = dx__check_instance(instance, err))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, instance);
  rc = dx__pg_one((pg_t *)pp, 0, PQ_ADM_QUEUE, &q, &res, err);
  /* the callbacks run after the read: they may call us */
  if (!rc) rc = queue_report(res, cb, ud, err);
  PQclear(res);
  return rc;
}

/* {===== delete, prune, terminate =====} */

static int delete_tx(tx_t *t, const char *const *ids, size_t n, int force, uint64_t *deleted) {
  PGresult *res;
  qp_t q;
  size_t i;
  int rc = 0;
  for (i = 0; i < n && !rc && !force; i++) {
    int st;
    dx__qp_init(&q);
    dx__qp_str(&q, ids[i]);
    if ((rc = dx__pg_q(t, PQ_ADM_STATUS, &q, &res))) return rc;
    st = PQntuples(res) ? (int)dx__col_i64(res, 0, 0) : DX_STATUS_COMPLETED; /* unknown: skip */
    PQclear(res);
    if (st != DX_STATUS_COMPLETED && st != DX_STATUS_FAILED)
      return dx_error_set(t->err, DX_ESTATE, "instance '%s' is %s; use force to delete it anyway",
                          ids[i], st == -1 ? "queued (its start has not run yet)" : "running");
  }
  for (i = 0; i < n && !rc; i++) {
    dx__qp_init(&q);
    dx__qp_str(&q, ids[i]);
    if ((rc = dx__pg_q(t, PQ_ADM_DELETE, &q, &res))) return dx__pg_tx_poison(t, rc);
    if (dx__col_i64(res, 0, 0) > 0) (*deleted)++;
    PQclear(res);
  }
  return rc;
}

int dx__pg_delete_instances(dx_provider_t *pp, const char *const *ids, size_t n, int force,
                            uint64_t *deleted, dx_error_t *err) {
  uint64_t count = 0;
  tx_t t;
  int rc;
  if ((rc = dx__check_instances(ids, n, err))) return rc;
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = dx__pg_tx_end(&t, delete_tx(&t, ids, n, force, &count));
  if (deleted) *deleted = rc ? 0 : count;
  return rc;
}

static int prune_tx(tx_t *t, const char *inst, uint64_t keep, uint64_t *pruned) {
  PGresult *res;
  qp_t q;
  int rc;
  if ((rc = require_record(t, inst))) return rc;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  dx__qp_i64(&q, (int64_t)keep);
  if ((rc = dx__pg_q(t, PQ_ADM_PRUNE, &q, &res))) return dx__pg_tx_poison(t, rc);
  *pruned = (uint64_t)dx__col_i64(res, 0, 0);
  PQclear(res);
  return 0;
}

int dx__pg_prune_executions(dx_provider_t *pp, const char *instance, uint64_t keep,
                            uint64_t *pruned, dx_error_t *err) {
  uint64_t count = 0;
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err))) return rc;
  if (keep < 1) return dx_error_set(err, DX_EINVAL, "keep must be at least 1 (the current execution)");
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  rc = dx__pg_tx_end(&t, prune_tx(&t, instance, keep, &count));
  if (pruned) *pruned = rc ? 0 : count;
  return rc;
}

static const char *status_word(int st) {
  return st == DX_STATUS_COMPLETED ? "Completed" : st == DX_STATUS_FAILED ? "Failed" : "ended";
}

static int terminate_tx(tx_t *t, int64_t now, const char *inst, const dx_failure_t *why,
                        int notify_parent) {
  PGresult *res;
  dx_event_t *hist = NULL, ev;
  size_t n = 0;
  uint64_t exec;
  qp_t q;
  int rc, st;
  dx__qp_init(&q);
  dx__qp_str(&q, inst);
  if ((rc = dx__pg_q(t, PQ_ADM_TERM_CHECK, &q, &res))) return rc;
  if (PQntuples(res) == 0) {
    PQclear(res);
    return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' has no record (unknown, or its "
                        "start is queued and has not run: delete it instead)", inst);
  }
  exec = (uint64_t)dx__col_i64(res, 0, 0);
  st = (int)dx__col_i64(res, 0, 1);
  PQclear(res);
  if (st != DX_STATUS_RUNNING)
    return dx_error_set(t->err, DX_ESTATE, "instance '%s' is not running (%s)", inst,
                        status_word(st));
  if ((rc = dx__pg_history_load(t, inst, exec, &hist, &n))) return rc;
  memset(&ev, 0, sizeof ev);
  ev.kind = DX_EV_ORCH_FAILED;
  ev.event_id = n ? hist[n - 1].event_id + 1 : 1;
  ev.timestamp_ms = now;
  ev.fail = *why;
  rc = dx__pg_history_append(t, inst, exec, &ev, 1);
  if (!rc) {
    char *keep[2];
    const char *kind = dx__pg_text(why->kind, &keep[0]), *msg = dx__pg_text(why->message, &keep[1]);
    dx__qp_init(&q);
    dx__qp_str(&q, inst);
    dx__qp_i64(&q, (int64_t)exec);
    dx__qp_i64(&q, DX_STATUS_FAILED);
    dx__qp_str(&q, NULL);
    dx__qp_i64(&q, why->category);
    dx__qp_str(&q, kind);
    dx__qp_str(&q, msg);
    dx__qp_i64(&q, why->retryable);
    dx__qp_i64(&q, now);
    rc = (why->kind && !kind) || (why->message && !msg) ? dx__pg_nomem(t->err)
                                                         : dx__pg_q(t, PQ_EXEC_UPSERT, &q, NULL);
    free(keep[0]);
    free(keep[1]);
  }
  if (!rc) {
    dx__qp_init(&q);
    dx__qp_str(&q, inst);
    dx__qp_i64(&q, now);
    rc = dx__pg_q(t, PQ_ADM_TOUCH, &q, NULL);
  }
  if (!rc) {
    dx__qp_init(&q);
    dx__qp_str(&q, inst);
    rc = dx__pg_q(t, PQ_ADM_DROP_QUEUES, &q, NULL);
  }
  /* the execution ended: its key-value changes become committed, as an ack's would */
  if (!rc) rc = dx__pg_kv_fold(t, inst);
  if (!rc && notify_parent && n) {
    dx_work_item_t w;
    if (dx__sub_failed_for_parent(&hist[0], why, &w)) rc = dx__pg_orch_enqueue(t, &w, now);
  }
  dx_events_free(hist, n);
  return rc ? dx__pg_tx_poison(t, rc) : 0;
}

int dx__pg_terminate(dx_provider_t *pp, int64_t now, const char *instance,
                     const dx_failure_t *why, int notify_parent, dx_error_t *err) {
  tx_t t;
  int rc;
  if ((rc = dx__check_instance(instance, err))) return rc;
  if (!why) return dx_error_set(err, DX_EINVAL, "failure is NULL");
  if ((rc = dx__pg_tx_begin((pg_t *)pp, &t, err))) return rc;
  return dx__pg_tx_end(&t, terminate_tx(&t, now, instance, why, notify_parent));
}
