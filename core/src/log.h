/* log.h -- the process logger: one line per record, text or JSON (internal). */
#ifndef DX_LOG_H
#define DX_LOG_H
#include <stddef.h>

#include "duroxide/executor.h"

enum { DX_LOGFMT_TEXT = 0, DX_LOGFMT_JSON = 1 };

/* One field of a record: key (key_len bytes, not NUL-terminated), value text, and for a
** value that is one integer the number (JSON writes it as a number). */
typedef struct dx_log_field_s {
  const char *key;
  size_t key_len;
  const char *value;
  int quoted;          /* the text format writes it in quotes */
  int is_int;
  long long int_value;
} dx_log_field_t;

void dx__log_configure(int level, int format);
/* The worker this thread works for: JSON records that name no worker_id carry it. Copied;
** NULL or "" = none. */
void dx__log_set_worker(const char *worker_id);
/* This thread's worker ("" = none), for threads started on its behalf. */
const char *dx__log_worker(void);
/* Write one record from fields built by the caller (dx__log parses a format into these). */
void dx__log_fields(int level, const char *msg, const dx_log_field_t *fields, int n);
int dx__log_level(void);
int dx__log_format(void);
/* `msg` is a short event phrase; `fields_fmt` is a printf format of "key=value" pairs (may be
** NULL): "instance=%s attempt=%u error=\"%s\"". Each value is expanded on its own, so user text
** in it cannot split or forge fields; quote a value to have the text format quote it. A field
** that is only "%s" given NULL is left out (optional fields: "session_id=%s"). */
void dx__log(int level, const char *msg, const char *fields_fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int dx__log_level_from_name(const char *name);
#endif
