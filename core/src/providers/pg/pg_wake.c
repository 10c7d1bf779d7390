/*
** pg_wake.c -- wake-ups through LISTEN/NOTIFY. Commits that made work visible send NOTIFY on
** the schema's channel (pg_conn.c); the runtime watches the socket of one listener connection
** per provider handle (wake_fd) on its loop thread and drains it (wake_drain). Only the loop
** thread touches the listener. A lost listener reports *lost = 1 and an error: the runtime
** then falls back to polling.
*/
#include <stdio.h>
#include <unistd.h>

#include "providers/pg/pg_internal.h"

int dx__pg_wake_fd(dx_provider_t *pp) {
  pg_t *p = (pg_t *)pp;
  char sql[128];
  PGresult *res;
  if (p->listen && p->listen_pid == getpid()) return PQsocket(p->listen);
  p->listen = NULL; /* inherited across fork: never ours to finish */
  if (dx__pg_connect(p->conninfo, p->schema_q, &p->listen, NULL)) return -1;
  p->listen_pid = getpid();
  snprintf(sql, sizeof sql, "LISTEN %s", p->channel_q);
  res = PQexec(p->listen, sql);
  if (PQresultStatus(res) != PGRES_COMMAND_OK || PQsetnonblocking(p->listen, 1) != 0) {
    PQclear(res);
    PQfinish(p->listen);
    p->listen = NULL;
    return -1;
  }
  PQclear(res);
  return PQsocket(p->listen);
}

int dx__pg_wake_drain(dx_provider_t *pp, int *lost) {
  pg_t *p = (pg_t *)pp;
  PGnotify *n;
  if (lost) *lost = 0;
  if (!p->listen || p->listen_pid != getpid()) return DX_ECLOSED;
  if (!PQconsumeInput(p->listen) || PQstatus(p->listen) == CONNECTION_BAD) {
    /* the connection is gone: the runtime polls from now on */
    if (lost) *lost = 1;
    return DX_EIO;
  }
  while ((n = PQnotifies(p->listen)) != NULL) PQfreemem(n);
  return 0;
}

void dx__pg_wake_close(pg_t *p) {
  if (p->listen && p->listen_pid == getpid()) PQfinish(p->listen);
  p->listen = NULL;
}
