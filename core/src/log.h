/* log.h -- the process logger: one line per record, text or JSON (internal). */
#ifndef DX_LOG_H
#define DX_LOG_H
#include "duroxide/executor.h"

enum { DX_LOGFMT_TEXT = 0, DX_LOGFMT_JSON = 1 };

void dx__log_configure(int level, int format);
int dx__log_level(void);
/* `msg` is a short event phrase; `fields` is "key=value key=value" text (may be NULL). The
** JSON format turns the pairs into members; values with spaces must be quoted by the caller. */
void dx__log(int level, const char *msg, const char *fields_fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
int dx__log_level_from_name(const char *name);
#endif
