/*
** providers.h -- the built-in providers' entry points (internal). Only registry.c calls them:
** the rest of the engine opens a store with dx_provider_open (and compares two handles with
** dx__provider_same_store).
*/
#ifndef DX_PROVIDERS_H
#define DX_PROVIDERS_H

#include "duroxide/provider.h"

/* The embedded store in directory `path` (created if missing). opts is never NULL here. */
int dx__lmdb_open(const char *path, const dx_provider_opts_t *opts, dx_provider_t **out,
                  dx_error_t *err);

/* 1 when a and b are handles of one store (the engine asks, provider-neutral: an eager start
** goes to a runtime of this process only on the client's own store): a local store by its
** notify file, a database by its connection and schema. Either may be NULL (then 0). */
int dx__provider_same_store(dx_provider_t *a, dx_provider_t *b);

#endif
