/*
** listing.c -- list_page logic shared by the providers (see listing.h).
*/
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/listing.h"
#include "util.h"

static int status_ok(int s) {
  return s == DX_LIST_ANY || s == DX_LIST_TERMINAL || s == DX_STATUS_NONE ||
         s == DX_STATUS_RUNNING || s == DX_STATUS_COMPLETED || s == DX_STATUS_FAILED;
}

int dx__list_query_check(const dx_list_query_t *q, dx__cursor_t *cur, dx_error_t *err) {
  const char *a;
  char phase, tail;
  long long at;
  unsigned long long seq;
  memset(cur, 0, sizeof *cur);
  if (!q) return dx_error_set(err, DX_EINVAL, "list query is NULL");
  if (q->limit < 1 || q->limit > DX_LIST_MAX_LIMIT)
    return dx_error_set(err, DX_EINVAL, "list limit %zu is out of range (1..%d)", q->limit,
                        DX_LIST_MAX_LIMIT);
  if (!status_ok(q->status))
    return dx_error_set(err, DX_EINVAL, "list status filter %d is not a status", q->status);
  if (q->name && (!*q->name || strlen(q->name) > DX_MAX_NAME_BYTES))
    return dx_error_set(err, DX_EINVAL, "list name filter must be 1 to %d bytes",
                        DX_MAX_NAME_BYTES);
  a = q->after;
  if (!a || !*a) return 0;
  if (strlen(a) > 64 || sscanf(a, "%c.%lld.%llu%c", &phase, &at, &seq, &tail) != 3 ||
      (phase != 'q' && phase != 'i') || at < 0 || seq == 0)
    return dx_error_set(err, DX_EINVAL,
                        "list cursor '%.80s' is not a cursor from a previous page", a);
  cur->phase = phase;
  cur->at = at;
  cur->seq = seq;
  return 0;
}

int dx__list_wants_queued(const dx_list_query_t *q) {
  return (q->status == DX_LIST_ANY || q->status == DX_STATUS_NONE) && !q->updated_before_ms;
}

int dx__list_match(const dx_list_query_t *q, const dx_instance_info_t *r) {
  int st = r->status == DX_STATUS_CONTINUED_AS_NEW ? DX_STATUS_RUNNING : r->status;
  if (q->status == DX_LIST_TERMINAL) {
    if (st != DX_STATUS_COMPLETED && st != DX_STATUS_FAILED) return 0;
  } else if (q->status != DX_LIST_ANY && st != q->status) {
    return 0;
  }
  if (q->name && (!r->orchestration_name || strcmp(q->name, r->orchestration_name) != 0))
    return 0;
  if (q->created_after_ms && r->created_at_ms <= q->created_after_ms) return 0;
  if (q->updated_before_ms && r->updated_at_ms >= q->updated_before_ms) return 0;
  if (q->roots_only && r->parent_instance) return 0;
  return 1;
}

int dx__list_before(const dx__cursor_t *cur, char phase, int64_t at, uint64_t seq) {
  if (!cur->phase) return 1;
  if (cur->phase != phase) return cur->phase == 'q' && phase == 'i';
  if (phase == 'q') return seq < cur->seq; /* queued starts: newest enqueue first */
  return at < cur->at || (at == cur->at && seq < cur->seq);
}

char *dx__list_cursor(char phase, int64_t at, uint64_t seq) {
  char buf[64];
  snprintf(buf, sizeof buf, "%c.%" PRId64 ".%" PRIu64, phase, at, seq);
  return dx__strdup(buf);
}

int dx__list_queued_row(const char *inst, const dx_work_item_t *start, int64_t visible_at,
                        dx_instance_info_t *row) {
  memset(row, 0, sizeof *row);
  row->status = DX_STATUS_NONE;
  row->created_at_ms = row->updated_at_ms = start->fire_at_ms ? start->fire_at_ms : visible_at;
  if (!(row->instance_id = dx__strdup(inst)) ||
      (start->name && !(row->orchestration_name = dx__strdup(start->name))) ||
      (start->version && !(row->orchestration_version = dx__strdup(start->version))) ||
      (start->parent_instance && !(row->parent_instance = dx__strdup(start->parent_instance)))) {
    dx_instance_info_clear(row);
    return DX_ENOMEM;
  }
  return 0;
}

static int cand_cmp(const void *a, const void *b) {
  const dx__list_cand_t *x = a, *y = b;
  return x->seq > y->seq ? -1 : x->seq < y->seq ? 1 : 0;
}

int dx__list_take_queued(const dx_list_query_t *q, const dx__cursor_t *cur,
                         dx__list_cand_t *cands, size_t ncand, dx_instance_info_t *rows,
                         size_t *n, int *more, dx__cursor_t *last) {
  size_t i;
  if (ncand) qsort(cands, ncand, sizeof *cands, cand_cmp);
  for (i = 0; i < ncand; i++) {
    dx__list_cand_t *c = &cands[i];
    if (dx__list_before(cur, 'q', c->row.created_at_ms, c->seq) && dx__list_match(q, &c->row)) {
      if (*n < q->limit) {
        rows[(*n)++] = c->row;
        memset(&c->row, 0, sizeof c->row);
        last->phase = 'q';
        last->at = rows[*n - 1].created_at_ms;
        last->seq = c->seq;
        continue;
      }
      *more = 1;
    }
    dx_instance_info_clear(&c->row);
  }
  return 0;
}

int dx__list_page_open(const dx_list_query_t *q, dx_instance_info_t **rows, size_t *n,
                       char **next, dx__cursor_t *cur, dx_error_t *err) {
  int rc;
  if (!rows || !n || !next) return dx_error_set(err, DX_EINVAL, "rows/n/next is NULL");
  *rows = NULL;
  *n = 0;
  *next = NULL;
  if ((rc = dx__list_query_check(q, cur, err))) return rc;
  if (!(*rows = calloc(q->limit, sizeof **rows)))
    return dx_error_set(err, DX_ENOMEM, "out of memory");
  return 0;
}

int dx__list_page_close(int rc, int more, const dx__cursor_t *last, dx_instance_info_t **rows,
                        size_t *n, char **next, dx_error_t *err) {
  if (!rc && more && !(*next = dx__list_cursor(last->phase, last->at, last->seq)))
    rc = dx_error_set(err, DX_ENOMEM, "out of memory");
  if (!rc) return 0;
  dx_instance_infos_free(*rows, *n);
  *rows = NULL;
  *n = 0;
  return rc;
}
