/* errors.c -- the error table: messages, names and retryability from DX_ERRNO_MAP. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "duroxide/errors.h"

const char *dx_strerror(int code) {
  switch (code) {
    case DX_OK: return "success";
#define XX(name, c, retry, msg) case c: return msg;
    DX_ERRNO_MAP(XX)
#undef XX
    default: return "unknown error";
  }
}

const char *dx_err_name(int code) {
  switch (code) {
    case DX_OK: return "DX_OK";
#define XX(name, c, retry, msg) case c: return "DX_" #name;
    DX_ERRNO_MAP(XX)
#undef XX
    default: return "DX_EUNKNOWN";
  }
}

int dx_err_is_retryable(int code) {
  switch (code) {
#define XX(name, c, retry, msg) case c: return retry;
    DX_ERRNO_MAP(XX)
#undef XX
    default: return 0;
  }
}

int dx_error_set(dx_error_t *err, int code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    err->code = code;
    err->retryable = dx_err_is_retryable(code);
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
  }
  return code;
}
