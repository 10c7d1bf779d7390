/*
** pg_schema.c -- schema creation and versioned migrations, serialized across processes by an
** advisory lock keyed on the schema name (concurrent first opens are safe and idempotent).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/pg/pg_internal.h"

static int run(PGconn *conn, const char *sql, const char *what, PGresult **out, dx_error_t *err) {
  PGresult *res = PQexec(conn, sql);
  ExecStatusType st = PQresultStatus(res);
  int rc = 0;
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) rc = dx__pg_fail(conn, res, what, err);
  if (rc || !out) PQclear(res);
  else *out = res;
  return rc;
}

static int apply(pg_t *p, PGconn *conn, int version, dx_error_t *err) {
  char sql[160];
  int rc = run(conn, "BEGIN", "migration", NULL, err);
  if (!rc) rc = run(conn, dx__pg_migrations[version - 1], "migration", NULL, err);
  if (!rc) {
    snprintf(sql, sizeof sql, "INSERT INTO dx_migrations (version, name) VALUES (%d, 'v%d')",
             version, version);
    rc = run(conn, sql, "migration", NULL, err);
  }
  if (!rc) rc = run(conn, "COMMIT", "migration", NULL, err);
  if (rc) {
    PQclear(PQexec(conn, "ROLLBACK"));
    return dx_error_set(err, err ? err->code : rc, "schema \"%s\" migration %d: %s", p->schema,
                        version, err ? err->msg : "");
  }
  return 0;
}

int dx__pg_migrate(pg_t *p, PGconn *conn, dx_error_t *err) {
  char sql[512];
  long long key = (long long)dx__pg_hash("duroxide:migrations", p->schema);
  PGresult *res = NULL;
  int rc, have = 0, v;
  snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)", key);
  if ((rc = run(conn, sql, "migration lock", NULL, err))) return rc;
  snprintf(sql, sizeof sql,
           "CREATE SCHEMA IF NOT EXISTS %s;"
           "CREATE TABLE IF NOT EXISTS dx_migrations (version bigint PRIMARY KEY,"
           " name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())",
           p->schema_q);
  rc = run(conn, sql, "schema creation", NULL, err);
  if (!rc) rc = run(conn, "SELECT coalesce(max(version), 0) FROM dx_migrations", "migration",
                    &res, err);
  if (!rc) {
    have = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (have > dx__pg_migration_count)
      rc = dx_error_set(err, DX_ESTATE,
                        "schema \"%s\" is at version %d, newer than this build supports (%d); "
                        "upgrade duroxide-lua",
                        p->schema, have, dx__pg_migration_count);
  }
  for (v = have + 1; !rc && v <= dx__pg_migration_count; v++) rc = apply(p, conn, v, err);
  snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%lld)", key);
  PQclear(PQexec(conn, sql));
  return rc;
}
