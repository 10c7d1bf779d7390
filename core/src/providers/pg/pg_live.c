/*
** pg_live.c -- worker liveness through the database (opt-in: `?liveness=on` in the store URL).
**
** Every worker id that fetches session work holds a shared advisory lock, keyed on the schema
** and the worker id, on a connection of its own that stays idle. When the process dies (even
** by SIGKILL) the server closes that connection at once and the lock goes with it. A worker
** that looks for a session to claim treats a session whose lease is live but whose owner's
** lock nobody holds as claimable (pg_sql.c, OWNER_DEAD), instead of waiting out the lease. The
** lease stays the fallback. A session fetch also sweeps (at most every 200 ms) the in-flight
** rows of sessions whose owner is dead, making them due at once, so the session's next worker
** does not wait out the dead owner's item lock either. Instance locks work the same way: each
** handle holds a lock under its own random tag ("@<hex>"), orch_queue rows record the tag of
** the handle that locked them, and an orchestration fetch sweeps instances whose locker is
** dead. Every worker on a schema must run with
** the same setting: a worker without liveness looks dead to peers that have it.
*/
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/pg/pg_internal.h"
#include "util.h"

#define SWEEP_EVERY_MS 250

struct pg_live_s {
  char *worker;
  PGconn *conn;
  pid_t pid;
  struct pg_live_s *next;
};

/* 1 when the idle holder connection is still up (an idle connection has nothing to read). */
static int holder_up(PGconn *conn) {
  struct pollfd pf;
  if (PQstatus(conn) != CONNECTION_OK) return 0;
  pf.fd = PQsocket(conn);
  pf.events = POLLIN;
  pf.revents = 0;
  if (pf.fd < 0) return 0;
  if (poll(&pf, 1, 0) != 1) return 1;
  return PQconsumeInput(conn) && PQstatus(conn) == CONNECTION_OK;
}

static int hold(pg_t *p, struct pg_live_s *l, dx_error_t *err) {
  char key[512];
  const char *v[1];
  PGresult *res;
  int rc;
  if ((rc = dx__pg_connect(p->conninfo, p->schema_q, &l->conn, err)))
    return rc == DX_EIO ? dx_error_set(err, DX_ERETRY, "%s", err ? err->msg : "") : rc;
  l->pid = getpid();
  snprintf(key, sizeof key, "%s%s", p->live_prefix, l->worker);
  v[0] = key;
  res = PQexecParams(l->conn, dx__pg_live_hold_sql, 1, NULL, v, NULL, NULL, 0);
  if (PQresultStatus(res) != PGRES_TUPLES_OK) {
    rc = dx__pg_fail(l->conn, res, "liveness lock", err);
    PQclear(res);
    PQfinish(l->conn);
    l->conn = NULL;
    return rc;
  }
  PQclear(res);
  return 0;
}

int dx__pg_live_hold(pg_t *p, const char *worker, dx_error_t *err) {
  struct pg_live_s *l;
  int rc = 0;
  if (!p->liveness) return 0;
  pthread_mutex_lock(&p->mu);
  for (l = p->live; l; l = l->next)
    if (l->pid == getpid() && strcmp(l->worker, worker) == 0) break;
  if (l && l->conn && holder_up(l->conn)) goto done;
  if (l && l->conn) PQfinish(l->conn); /* lost (server restart): hold it again */
  if (!l) {
    if (!(l = calloc(1, sizeof *l)) || !(l->worker = dx__strdup(worker))) {
      free(l);
      rc = dx__pg_nomem(err);
      goto done;
    }
    l->pid = getpid();
    l->next = p->live;
    p->live = l;
  }
  l->conn = NULL;
  rc = hold(p, l, err);
done:
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* Sweeps run at most every SWEEP_EVERY_MS of the caller's clock; next_due_ms asks for a
** fetch (which sweeps) that often while anything is in flight. */
int dx__pg_live_sweep_due(pg_t *p, int64_t *last, int64_t now) {
  int due;
  if (!p->liveness) return 0;
  pthread_mutex_lock(&p->mu);
  if ((due = now - *last >= SWEEP_EVERY_MS || now < *last)) *last = now;
  pthread_mutex_unlock(&p->mu);
  return due;
}

int64_t dx__pg_live_next_sweep(pg_t *p) {
  int64_t at;
  pthread_mutex_lock(&p->mu);
  at = (p->reaped_at < p->reaped_orch_at ? p->reaped_at : p->reaped_orch_at) + SWEEP_EVERY_MS;
  pthread_mutex_unlock(&p->mu);
  return at;
}

void dx__pg_live_close(pg_t *p) {
  struct pg_live_s *l, *next;
  for (l = p->live; l; l = next) {
    next = l->next;
    if (l->conn && l->pid == getpid()) PQfinish(l->conn); /* never a parent's */
    free(l->worker);
    free(l);
  }
  p->live = NULL;
}
