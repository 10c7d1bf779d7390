/* lmdb_test.h -- test-only hooks into the LMDB provider (internal; never used by the engine). */
#ifndef DX_LMDB_TEST_H
#define DX_LMDB_TEST_H

#include <stdint.h>
#include "duroxide/provider.h"

/* Overwrite the stored bytes of one history event with bytes that are not a valid record,
** so tests can check how fetch and read_history report corruption. DX_OK or a DX_E* code. */
int dx__lmdb_test_corrupt_history(dx_provider_t *p, const char *instance, uint64_t execution_id,
                                  uint64_t event_id);

/* Make a session's lease lapse at now_ms without changing its owner (the owner simply did not
** renew in time). DX_ENOTFOUND when the session has no row. */
int dx__lmdb_test_expire_session(dx_provider_t *p, const char *session_id, int64_t now_ms);

#endif
