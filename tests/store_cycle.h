/*
** store_cycle.h -- the fixtures the test_store_cycle program's files share
** (test_store_cycle.c, test_store_cycle_turns.c, test_store_cycle_rounds.c).
**
** wrap_t is a provider that delegates to a real directory store (or $DX_TEST_PG's) and
** injects the failures a database provider reports (test_store_cycle.c); round_t drives
** instances that step together through a store held for the loop's answers
** (test_store_cycle_turns.c).
*/
#ifndef DX_TEST_STORE_CYCLE_H
#define DX_TEST_STORE_CYCLE_H

#include <stdint.h>

#include "duroxide.h"
#include "store.h"

/* {===== the wrapping provider (test_store_cycle.c) =====} */

typedef struct {
  dx_provider_t base;
  dx_provider_methods_t m;
  dx_provider_t *inner;
  int retry_commits;   /* this many commits fail with DX_ERETRY (-1: all) */
  int spoiled;         /* an op in the open batch spoiled it: its commit fails */
  int spoil_rc;        /* ... with this code (0: DX_ESTORE) */
  int corrupt_commits; /* this many commits fail with DX_ECORRUPT (the store is damaged) */
  int retry_renewing;  /* this many commits that renewed a lock fail with DX_ERETRY */
  int txn_renews;      /* lock renewals in the open transaction */
  int logging;         /* log each commit's renewals and outcome (and nothing else injected) */
  int log_n;           /* commits logged below (atomic: the test thread reads it) */
  int log_renews[64], log_rc[64];
  int commits, begins; /* calls seen */
  int last_sync;       /* `sync` of the last commit */
  int wake_pipe[2];    /* wake_fd: the read end */
  int drains, lost_next, next_dues;
  int acks_orch;       /* ack_orchestration_item calls (atomic: the test thread reads it) */
  int acks_work;       /* ack_work_item calls (atomic) */
  int fetch_works;     /* fetch_work_item calls (atomic) */
  int fetched;         /* items the fetches returned (atomic) */
  int txn_fetched;     /* of them, in the open transaction */
  void (*gate)(void *ud, int txn_fetched); /* called before each commit (tests of the lap) */
  void *gate_ud;
} wrap_t;

#define W(p) ((wrap_t *)(p))
#define IN(p) (W(p)->inner)

/* url NULL: a fresh directory store (wrap_open). */
wrap_t *wrap_open_at(const char *url);
wrap_t *wrap_open(void);
void w_destroy(dx_provider_t *p);
/* A next_due_ms that counts its calls (dues) and says nothing is due. */
int w_next_due(dx_provider_t *p, int64_t now, int64_t *out, dx_error_t *err);
int dues(wrap_t *w);
/* Close s (its queued ops are flushed first) and then its loop. */
void close_store(dx_store_t *s, uv_loop_t *loop);
/* 1 when instance `id` is known to the inner store. */
int queued(wrap_t *w, const char *id);
/* Run `loop` without waiting for about `ms` milliseconds. */
void spin(uv_loop_t *loop, int ms);

/* {===== turns and rounds (test_store_cycle_turns.c) =====} */

/* An op's done callback that asserts it applied. */
void start_applied(dx_store_op_t *op);
/* Each of w's instances <id> (one "r<k>" for k < n, or the one `only`) ended after four
** events: started, scheduled, completed activity, completed orchestration. */
void assert_four_events_completed(wrap_t *w, const char *only, int n);

#define ROUND_N 10
#define LAP_N 24 /* more than a held round takes (HOLD_MAX_ITEMS) */

typedef struct {
  dx_store_op_t op, res_op, fin_op; /* (the last turn's own: both turns may share a batch) */
  dx_orch_ack_t ack, fin_ack;
  dx_event_t ev[2], fin_ev[2];
  dx_work_item_t act, res;
  char instance[16];
} round_inst_t;

typedef struct {
  uv_loop_t loop;
  dx_store_t *s;
  wrap_t *w;
  round_inst_t in[LAP_N];
  int n; /* instances (0: ROUND_N) */
  int n_work, fin_done, fin_failed, commits_at_result, commits_at_done;
  int answer_first; /* the loop answers each activity before its work between two answers */
} round_t;

/* n starts of "Orch", instances <prefix>0 .. <prefix>n-1, queued straight in the store. */
void enqueue_starts(wrap_t *w, const char *prefix, int n);
/* A store on w with long locks and a hold the loop's answers always make in time. */
void held_cfg(dx_store_cfg_t *cfg, wrap_t *w);
/* on_fetch of a round (ud: the round_t): first turns schedule activity 2, activities are
** answered with their result, second turns complete. */
void answer_round(void *ud, dx_store_fetched_t *f);

#endif
