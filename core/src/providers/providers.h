/*
** providers.h -- the built-in providers' entry points (internal). Only registry.c calls them:
** the rest of the engine opens a store with dx_provider_open.
*/
#ifndef DX_PROVIDERS_H
#define DX_PROVIDERS_H

#include "duroxide/provider.h"

/* The embedded store in directory `path` (created if missing). opts is never NULL here. */
int dx__lmdb_open(const char *path, const dx_provider_opts_t *opts, dx_provider_t **out,
                  dx_error_t *err);

#endif
