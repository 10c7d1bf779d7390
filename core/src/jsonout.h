/* jsonout.h -- the one place canonical JSON text is produced from a jansson tree (internal). */
#ifndef DX_JSONOUT_H
#define DX_JSONOUT_H

#include <jansson.h>

/* Compact, keys sorted bytewise, any top-level value; reals in their shortest form that
** reads back to the same double, always with a '.' or an exponent (1.0 stays a float).
** malloc'd (caller frees), NULL when out of memory. */
char *dx__json_dump(const json_t *j);
/* The canonical text of a finite real, as dx__json_dump writes it inside any value, into
** out (NUL-terminated); its length, or 0 when it cannot be made here (use jansson). */
size_t dx__json_real(double d, char out[40]);

/* Builders shared by the client's JSON output (client.c): stored JSON text parsed (null when
** absent or unparsable); a string even for bytes that are not UTF-8 ('?' for those); a
** failure {"category","kind"?,"message"}. */
struct dx_failure_s;
json_t *dx__json_or_null(const char *text);
json_t *dx__jstr(const char *text);
json_t *dx__failure_json(const struct dx_failure_s *f);
/* A string node for any C text (invalid UTF-8 bytes become U+FFFD); NULL on ENOMEM. */
json_t *dx__json_text(const char *s);

#endif
