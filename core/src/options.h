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
/* The tags option ("gpu,default") as the tag half of a fetch filter: f->untagged, f->tags,
** f->n_tags (owned by f: dx__tags_free). f NULL: validate only. DX_EINVAL names the problem. */
int dx__tags_parse(const char *csv, dx_fetch_filter_t *f, dx_error_t *err);
void dx__tags_free(dx_fetch_filter_t *f);

#endif
