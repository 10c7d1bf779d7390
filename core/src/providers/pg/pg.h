/* pg.h -- the PostgreSQL provider's entry point (internal; the provider registry calls it). */
#ifndef DX_PG_H
#define DX_PG_H

#include "duroxide/provider.h"

/** Open (creating and migrating the schema if needed) the store at `url`, a libpq URI
**  `postgres://...` or `postgresql://...`. A `schema=NAME` query parameter selects the
**  schema (default "duroxide"); it is removed before the URI reaches libpq. no_sync: commits
**  do not wait for the WAL flush. *out is owned by the caller and freed with methods->destroy.
**  Errors: DX_EINVAL (bad URL, schema name or credentials), DX_EIO (server unreachable),
**  DX_ESTATE (schema of a newer version), DX_ESTORE (other server errors). */
int dx__pg_open(const char *url, int no_sync, dx_provider_t **out, dx_error_t *err);

/** Round trips (pipeline syncs) this handle's connections made so far (any thread). A stat
**  for tests and benchmarks: the difference across a store cycle is that cycle's count. */
uint64_t dx__pg_round_trips(dx_provider_t *p);

/** The size of its array parameters past which a store cycle's acks go as more than one call
**  of the ack functions (still in the cycle's one round trip); default 64 MiB, far below
**  PostgreSQL's 1 GB per parameter. For tests (a small value splits every cycle); set it
**  while no store cycle runs. Returns the previous value. */
size_t dx__pg_set_ack_call_bytes(size_t n);

/** 1 when a and b are PostgreSQL handles of one store: the same connection URI and schema
**  (registry.c dx__provider_same_store). */
int dx__pg_same_store(dx_provider_t *a, dx_provider_t *b);

#endif
