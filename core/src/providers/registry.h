/*
** registry.h -- what the engine asks registry.c besides dx_provider_open (provider-neutral:
** the engine still names no provider).
*/
#ifndef DX_REGISTRY_H
#define DX_REGISTRY_H

#include "duroxide/provider.h"

/* 1 when a and b are handles of one store (an eager start goes to a runtime of this process
** only on the client's own store): a local store by its notify file, a database by its
** connection and schema. Either may be NULL (then 0). */
int dx__provider_same_store(dx_provider_t *a, dx_provider_t *b);

#endif
