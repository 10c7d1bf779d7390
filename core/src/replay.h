/*
** replay.h -- one orchestration turn: replay history, run code, build the commit (internal).
*/
#ifndef DX_REPLAY_H
#define DX_REPLAY_H

#include "duroxide/executor.h"
#include "spare.h"

/* What the dispatcher must do with the fetched item after the turn. */
enum {
  DX_TURN_ACK = 1,      /* commit turn->ack */
  DX_TURN_ABANDON = 2   /* release the lock; retry after turn->abandon_delay_ms */
};

/* First blocks (8 records: replay_turn.c SPARE_RECORDS) for the vectors every turn fills and its
** keep or free gives back: new events, worker items, new schedule ids. Owned by the caller's
** thread (spare.h); it must outlive the turns that use it. */
typedef struct {
  dx__spare_t events, items, ids;
} dx_turn_spares_t;
void dx__turn_spares_init(dx_turn_spares_t *s);
void dx__turn_spares_drain(dx_turn_spares_t *s);

typedef struct dx_turn_cfg_s {
  int64_t now_ms;
  uint32_t max_attempts;          /* poison threshold: attempt_count > max_attempts */
  int64_t unregistered_base_ms;   /* backoff for unregistered orchestrations */
  int64_t unregistered_max_ms;
  const char *worker_id;          /* for logs */
  int64_t instruction_budget;     /* the runtime's turn_instruction_budget (0 = host default) */
  int64_t time_limit_ms;          /* the runtime's turn_time_limit (0 = none) */
  int keep;                       /* the caller may keep the turn's code alive afterwards
                                     (orchestration cache): it is not freed when keepable */
  dx_turn_spares_t *spares;       /* NULL: the turn's vectors come from malloc each time */
} dx_turn_cfg_t;

/* Run one turn for a fetched item. Always returns a turn (NULL only on ENOMEM) whose
** `action` says what to do; the ack inside borrows from the turn. Free with dx__turn_free. */
dx_turn_t *dx__turn_run(const dx_orch_item_t *item, const dx_turn_cfg_t *cfg,
                        const dx_host_methods_t *host, void *host_ud);
int dx__turn_action(const dx_turn_t *t);
const dx_orch_ack_t *dx__turn_ack(const dx_turn_t *t);
int64_t dx__turn_abandon_delay(const dx_turn_t *t);
void dx__turn_free(dx_turn_t *t);

/* {===== kept turns (the orchestration cache) =====}
** A turn whose code is suspended waiting (the execution goes on) can be kept after its commit
** was applied: it then owns the execution's history so far and its live code, and the next
** turn of the instance feeds it only the new messages (dx__turn_continue) instead of replaying
** from the start. A kept turn is valid only while the store's history is exactly what it
** holds (same execution, same number of events): the caller checks that. */
int dx__turn_keepable(const dx_turn_t *t);
/* After the turn's commit was applied: take the item's history (item->history becomes NULL)
** and append the turn's own events, forget the commit. DX_OK; DX_ESTATE (not keepable) or
** DX_ENOMEM: then free the turn. */
int dx__turn_keep(dx_turn_t *t, dx_orch_item_t *item);
/* The next turn of a kept instance on `item` (its history must be what t holds): converts
** the messages, feeds them to the live code, builds the commit. Returns t (the same object,
** as dx__turn_run would return a new one): settle it, then keep it again or free it. NULL,
** with t untouched (free it), when the host no longer runs that code (re-registered): the
** item then needs a fresh turn. */
dx_turn_t *dx__turn_continue(dx_turn_t *t, const dx_orch_item_t *item, const dx_turn_cfg_t *cfg);
/* 1 when the item's history is of an execution still running (its turn replays it unless
** cached), 0 for a new instance or the first turn after continue-as-new. */
int dx__item_continues(const dx_orch_item_t *item);
/* 1 when the fetched item's history is the one kept turn t holds (a hit). */
int dx__turn_matches(const dx_turn_t *t, const dx_orch_item_t *item);
/* When the turn's execution started (its OrchestrationStarted), 0 when unknown. */
int64_t dx__turn_started_ms(const dx_turn_t *t);
/* Events of the execution the turn holds (history and this turn's). */
uint64_t dx__turn_history_len(const dx_turn_t *t);
/* Memory a kept turn holds: its events, indexes, state, and the host's estimate of its code. */
size_t dx__turn_bytes(const dx_turn_t *t);

/* Backoff for unregistered handlers: base * 2^min(attempt-1, 6), capped at max. */
int64_t dx__unregistered_backoff(uint32_t attempt, int64_t base_ms, int64_t max_ms);

#endif
