/*
** listing.h -- the parts of list_page every provider shares (internal): query and cursor
** checks, row filters, and the page of queued-never-run instances.
**
** Order of a listing: queued-never-run instances first (phase 'q', newest first by the store
** sequence number of their START message, so a page reads only its own rows from an index),
** then recorded instances (phase 'i', newest first by (created_at, seq)). A cursor is
** "q.AT.SEQ" or "i.AT.SEQ": the position of the last row handed out (for 'q' AT is
** informative, SEQ decides); the next page starts strictly after it.
*/
#ifndef DX_PROVIDER_LISTING_H
#define DX_PROVIDER_LISTING_H

#include "duroxide/provider.h"

typedef struct {
  char phase;      /* 0: first page, 'q' or 'i' */
  int64_t at;
  uint64_t seq;
} dx__cursor_t;

/* A queued-never-run candidate: its row (owned) and its sort key. */
typedef struct {
  dx_instance_info_t row;
  uint64_t seq;
} dx__list_cand_t;

/* Checks limit, status and cursor; fills *cur. DX_EINVAL naming the problem. */
int dx__list_query_check(const dx_list_query_t *q, dx__cursor_t *cur, dx_error_t *err);
/* 1 when `r` passes the query's filters (status, name, created_after, updated_before, roots). */
int dx__list_match(const dx_list_query_t *q, const dx_instance_info_t *r);
/* 1 when the query can match queued-never-run instances at all. */
int dx__list_wants_queued(const dx_list_query_t *q);
/* Position strictly after the cursor in newest-first order? */
int dx__list_before(const dx__cursor_t *cur, char phase, int64_t at, uint64_t seq);
/* malloc'd cursor text; NULL on ENOMEM. */
char *dx__list_cursor(char phase, int64_t at, uint64_t seq);
/* The row of a queued start: id, name, version, parent and created time from the START item
** (its fire_at_ms is the enqueue time the client recorded; visible_at otherwise). */
int dx__list_queued_row(const char *inst, const dx_work_item_t *start, int64_t visible_at,
                        dx_instance_info_t *row);
/* Sort `cands` newest first (by seq), move the matching ones after the cursor into rows[*n..] (up to
** q->limit in all), clear the rest. *more = 1 when a match was left over; *last gets the
** position of the last row taken. rows has room for q->limit. */
int dx__list_take_queued(const dx_list_query_t *q, const dx__cursor_t *cur,
                         dx__list_cand_t *cands, size_t ncand, dx_instance_info_t *rows,
                         size_t *n, int *more, dx__cursor_t *last);

/* The frame of list_page, the same in every provider. dx__list_page_open checks the
** arguments and the query (*cur: where the page starts), clears the outputs and allocates
** *rows for q->limit rows. dx__list_page_close takes the page's result rc: on success it sets
** *next when `more` (the cursor of `last`); on any failure it frees the rows and clears *rows
** and *n. Both return 0 or the error. */
int dx__list_page_open(const dx_list_query_t *q, dx_instance_info_t **rows, size_t *n,
                       char **next, dx__cursor_t *cur, dx_error_t *err);
int dx__list_page_close(int rc, int more, const dx__cursor_t *last, dx_instance_info_t **rows,
                        size_t *n, char **next, dx_error_t *err);

#endif
