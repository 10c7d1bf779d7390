/* options.h -- option helpers shared inside the core (internal; the API is in duroxide.h). */
#ifndef DX_OPTIONS_H
#define DX_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "duroxide.h"

/* How often activity locks are renewed for a lock of timeout_ms: duroxide's rule
** (dx__renewal_interval), floored at 1 s where the lock allows it. */
int64_t dx__lock_renewal_interval(int64_t timeout_ms, int64_t buffer_ms);
/* Log every option as a field of one record (the table's order and spelling; durations in
** ms). */
void dx__options_log(const dx_options_t *o, int level, const char *msg);

#endif
