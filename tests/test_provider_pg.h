/*
** test_provider_pg.h -- what the test_provider_pg program's files share (defined in
** test_provider_pg.c): its throwaway schemas and small helpers.
*/
#ifndef DX_TEST_PROVIDER_PG_H
#define DX_TEST_PROVIDER_PG_H

#include <libpq-fe.h>
#include <stdint.h>

#include "duroxide/provider.h"

/* The schemas made so far (dropped at exit), the last one at g_nschemas - 1. */
extern char g_schemas[64][40];
extern int g_nschemas;
/* A login role a test made, dropped at exit before the schemas (empty: none). */
extern char g_role[48];
/* A connection to the server; fails the test when it cannot connect. */
PGconn *admin(void);
/* Run `q` on c; fails the test unless it succeeded. */
void sql(PGconn *c, const char *q);
/* A new schema name and the store URL that selects it (malloc'd); `extra` is appended. */
char *store_url(const char *extra);
/* A work item of `kind` for execution 1 of `inst` (name "Orch", data "1"). */
dx_work_item_t item(int kind, const char *inst, uint64_t id);
/* The orchestrator queue's depth. */
uint64_t orch_depth(dx_provider_t *p);
/* Start `inst` and commit its first turn: a running instance (its sessions keep their slot). */
void running_instance(dx_provider_t *p, const char *inst);

#endif
