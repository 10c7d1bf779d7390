/*
** store_fake.h -- a fake provider for the store thread's tests (test_store_backoff.c,
** test_store_pause.c): begin and next_due_ms are the test's own; commit and rollback do nothing
** and the fetches find nothing.
*/
#ifndef DX_TEST_STORE_FAKE_H
#define DX_TEST_STORE_FAKE_H

#include "duroxide/provider.h"

/* Fill m (owned by the caller, static in practice) with the fake's methods. */
void store_fake_methods(dx_provider_methods_t *m, int (*begin)(dx_provider_t *, dx_error_t *),
                        int (*next_due)(dx_provider_t *, int64_t, int64_t *, dx_error_t *));

#endif
