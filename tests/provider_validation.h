/*
** provider_validation.h -- the provider contract tests, shared by every provider.
**
** provider_validation.c holds DX_TEST functions that only use the vtable. A provider's test
** program links them and defines the hooks below (see test_provider_lmdb.c).
*/
#ifndef DX_PROVIDER_VALIDATION_H
#define DX_PROVIDER_VALIDATION_H

#include <stdint.h>

#include "duroxide/provider.h"

/* A location for a new, empty store (malloc'd); every call returns a different one. */
char *dx_pv_new_store(void);
/* Open a handle on `store`; fails the test when the provider cannot. */
dx_provider_t *dx_pv_open(const char *store);
/* Overwrite one history event with bytes that do not decode. 0, or -1 when the provider
** cannot (the corruption test is then skipped). */
int dx_pv_corrupt_history(dx_provider_t *p, const char *instance, uint64_t execution_id,
                          uint64_t event_id);
/* 1 when separate processes may use one store at the same time (fork tests run). */
int dx_pv_multi_process(void);

/* Rows (keys or values, in any table of the store) whose bytes contain `text`; called with
** no handle open on `store`. The management tests use it to prove a deletion left nothing. */
uint64_t dx_pv_rows_naming(const char *store, const char *text);

#endif
