/*
** pg_live.c -- worker liveness through the database (on by default; `?liveness=off` in the
** store URL turns it off).
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
**
** Registration (worker_register, at runtime start) adds an exclusive lock on a second key of
** the worker id on the same connection: a second live process with that id fails to take it
** and is refused, on any host. It also checks the caller's clock against the server's.
*/
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "providers/pg/pg_internal.h"
#include "log.h"
#include "util.h"

#define SWEEP_EVERY_MS 250

#define SKEW_WARN_MS 1000

struct pg_live_s {
  char *worker;
  PGconn *conn;
  pid_t pid;
  int registered;         /* worker_register calls not yet undone (the exclusive lock) */
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

/* Try the exclusive registration lock of l's worker id on l's connection; *server_ms (may be
** NULL) receives the server's clock. */
static int take_id(pg_t *p, struct pg_live_s *l, int *got, int64_t *server_ms, dx_error_t *err) {
  char key[512];
  const char *v[1];
  PGresult *res;
  int rc;
  snprintf(key, sizeof key, "%sid:%s", p->live_prefix, l->worker);
  v[0] = key;
  res = PQexecParams(l->conn, dx__pg_live_register_sql, 1, NULL, v, NULL, NULL, 0);
  if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
    rc = dx__pg_fail(l->conn, res, "worker registration", err);
    PQclear(res);
    return rc;
  }
  *got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
  if (server_ms) *server_ms = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
  PQclear(res);
  return 0;
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
  if (l->registered) { /* the connection was lost (server restart): take the id again */
    int got = 0;
    if ((rc = take_id(p, l, &got, NULL, err))) return rc;
    if (!got)
      dx__log(DX_LOG_ERROR, "worker id taken by another live process while reconnecting",
              "worker_id=%s", l->worker);
  }
  return 0;
}

/* With p->mu held: the entry of `worker` in this process, its lock held (*out NULL on error). */
static int hold_locked(pg_t *p, const char *worker, struct pg_live_s **out, dx_error_t *err) {
  struct pg_live_s *l;
  int rc = 0;
  *out = NULL;
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
  if (rc == 0) *out = l;
  return rc;
}

int dx__pg_live_hold(pg_t *p, const char *worker, dx_error_t *err) {
  struct pg_live_s *l;
  int rc;
  if (!p->liveness) return 0;
  pthread_mutex_lock(&p->mu);
  rc = hold_locked(p, worker, &l, err);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

/* Run one statement with text parameters on l's idle connection (autocommit). */
static int live_exec(struct pg_live_s *l, const char *sql, int n, const char *const *v,
                     const char *what, dx_error_t *err) {
  PGresult *res = PQexecParams(l->conn, sql, n, NULL, v, NULL, NULL, 0);
  int rc = 0;
  if (PQresultStatus(res) != PGRES_COMMAND_OK) rc = dx__pg_fail(l->conn, res, what, err);
  PQclear(res);
  return rc;
}

/* The registration row `duroxide-lua workers` lists (migration 8). */
static int record_worker(pg_t *p, struct pg_live_s *l, int64_t now, dx_error_t *err) {
  char host[256], pid[24], nows[24];
  const char *v[6];
  if (gethostname(host, sizeof host) != 0) host[0] = 0;
  host[sizeof host - 1] = 0;
  snprintf(pid, sizeof pid, "%lld", (long long)getpid());
  snprintf(nows, sizeof nows, "%lld", (long long)now);
  v[0] = l->worker;
  v[1] = host[0] ? host : NULL;
  v[2] = pid;
  v[3] = nows;
  v[4] = p->proc_tag;
  v[5] = p->live_prefix;
  return live_exec(l, dx__pg_live_worker_put_sql, 6, v, "worker registration", err);
}

/* A dead predecessor with this id may have left session rows locked: due now. One statement
** on the idle connection (autocommit), before the runtime fetches anything. */
static int reap_own(pg_t *p, struct pg_live_s *l, int64_t now, dx_error_t *err) {
  char nows[24];
  const char *v[2];
  PGresult *res;
  int rc = 0;
  snprintf(nows, sizeof nows, "%lld", (long long)now);
  v[0] = nows;
  v[1] = l->worker;
  res = PQexecParams(l->conn, dx__pg_live_reap_own_sql, 2, NULL, v, NULL, NULL, 0);
  if (PQresultStatus(res) != PGRES_COMMAND_OK) rc = dx__pg_fail(l->conn, res, "worker registration", err);
  PQclear(res);
  return rc;
}

int dx__pg_worker_register(dx_provider_t *pp, const char *worker, int64_t now,
                           dx_error_t *err) {
  pg_t *p = (pg_t *)pp;
  struct pg_live_s *l;
  int64_t server_ms = 0, skew;
  int rc, got = 0;
  if (!worker || !*worker) return dx_error_set(err, DX_EINVAL, "worker id is empty");
  if (!p->liveness) return 0;
  pthread_mutex_lock(&p->mu);
  if ((rc = hold_locked(p, worker, &l, err))) goto done;
  if (l->registered) { /* this process holds the id already: count it */
    l->registered++;
    goto done;
  }
  if ((rc = take_id(p, l, &got, &server_ms, err))) goto done;
  if (!got) {
    rc = dx_error_set(err, DX_EEXIST, "worker_node_id '%s' is already in use by a live process "
                      "on store schema '%s': give each worker process its own id", worker,
                      p->schema);
    goto done;
  }
  l->registered = 1;
  if ((rc = reap_own(p, l, now, err)) || (rc = record_worker(p, l, now, err))) goto done;
  skew = server_ms - now;
  if (skew > SKEW_WARN_MS || skew < -SKEW_WARN_MS)
    dx__log(DX_LOG_WARN, "clock skew against the PostgreSQL server",
            "worker_id=%s skew_ms=%lld hint=\"leases and timers compare clocks of different "
            "hosts: run NTP on every worker host\"", worker, (long long)skew);
done:
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void dx__pg_worker_unregister(dx_provider_t *pp, const char *worker) {
  pg_t *p = (pg_t *)pp;
  struct pg_live_s *l, **lp;
  int was_registered;
  if (!p->liveness || !worker) return;
  pthread_mutex_lock(&p->mu);
  for (lp = &p->live; (l = *lp); lp = &l->next)
    if (l->pid == getpid() && strcmp(l->worker, worker) == 0) break;
  was_registered = l && l->registered > 0;
  if (l && (!l->registered || --l->registered == 0)) { /* a hold fetches took goes too */
    /* closing the connection drops both locks: peers see the id gone at once */
    *lp = l->next;
    if (l->conn && was_registered && PQstatus(l->conn) == CONNECTION_OK) {
      const char *v[1] = {l->worker};
      dx_error_t e = {0};
      if (live_exec(l, dx__pg_live_worker_del_sql, 1, v, "worker unregistration", &e))
        dx__log(DX_LOG_WARN, "could not remove the worker registration (listings leave a "
                "dead worker out)", "worker_id=%s error=\"%s\"", l->worker, e.msg);
    }
    if (l->conn) PQfinish(l->conn);
    free(l->worker);
    free(l);
  }
  pthread_mutex_unlock(&p->mu);
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
  /* the later sweep: a worker without sessions never sweeps session rows, and the earlier
  ** stamp would then stay in the past and make it poll without pause */
  at = (p->reaped_at > p->reaped_orch_at ? p->reaped_at : p->reaped_orch_at) + SWEEP_EVERY_MS;
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

int dx__pg_list_workers(dx_provider_t *pp, int64_t now, dx_worker_cb cb, void *ud,
                        dx_error_t *err) {
  pg_t *p = (pg_t *)pp;
  PGresult *res = NULL;
  qp_t q;
  int rc, i, n;
  if (!cb) return dx_error_set(err, DX_EINVAL, "callback is NULL");
  dx__qp_init(&q);
  dx__qp_i64(&q, now);
  dx__qp_str(&q, p->live_prefix);
  dx__qp_i64(&q, p->liveness ? 1 : 0);
  if ((rc = dx__pg_one(p, 0, PQ_WORKERS_LIST, &q, &res, err))) return rc;
  n = PQntuples(res);
  for (i = 0; i < n; i++) { /* after the read: callbacks may call the provider */
    dx_worker_info_t w;
    w.worker_id = PQgetvalue(res, i, 0);
    w.host = dx__col_null(res, i, 1) ? NULL : PQgetvalue(res, i, 1);
    w.pid = dx__col_i64(res, i, 2);
    w.started_at_ms = dx__col_i64(res, i, 3);
    w.running_turns = (uint64_t)dx__col_i64(res, i, 4);
    w.running_activities = (uint64_t)dx__col_i64(res, i, 5);
    if (cb(ud, &w)) break;
  }
  PQclear(res);
  return 0;
}
