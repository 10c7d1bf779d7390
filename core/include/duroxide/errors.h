/*
** duroxide/errors.h -- error codes shared by the engine, providers and bindings.
**
** Codes are negative; 0 is DX_OK. The dx range is -20000..-20999, away from libuv's
** (>= -9919) and the embedded store library's (-30799..-30779). Each entry: name, retryable,
** message.
*/
#ifndef DUROXIDE_ERRORS_H
#define DUROXIDE_ERRORS_H

#define DX_ERRNO_MAP(XX)                                                        \
  XX(EINVAL,     -20001, 0, "invalid argument")                                 \
  XX(ENOMEM,     -20002, 1, "out of memory")                                    \
  XX(ENOTFOUND,  -20003, 0, "not found")                                        \
  XX(EEXIST,     -20004, 0, "already exists")                                   \
  XX(EBUSY,      -20005, 1, "store busy, retry")                                \
  XX(ELOCK,      -20006, 0, "lock lost or expired")                             \
  XX(ETOKEN,     -20007, 0, "invalid lock token")                               \
  XX(ECORRUPT,   -20008, 0, "corrupted record")                                 \
  XX(EJSON,      -20009, 0, "invalid JSON")                                     \
  XX(ETOOBIG,    -20010, 0, "payload too large")                                \
  XX(ESTORE,     -20011, 1, "store error")                                      \
  XX(ELUA,       -20012, 0, "Lua error")                                        \
  XX(ECLOSED,    -20013, 0, "object is closed")                                 \
  XX(ETIMEDOUT,  -20014, 1, "timed out")                                        \
  XX(ENONDET,    -20015, 0, "nondeterministic orchestration")                   \
  XX(EUNREG,     -20016, 0, "not registered")                                   \
  XX(EIO,        -20017, 1, "I/O error")                                        \
  XX(EFULL,      -20018, 1, "store is full")                                    \
  XX(ESTATE,     -20019, 0, "invalid state for this call")                      \
  XX(ERETRY,     -20020, 1, "transient store conflict: retry the transaction")

typedef enum {
  DX_OK = 0,
#define DX__ERR_ENUM(name, code, retry, msg) DX_##name = code,
  DX_ERRNO_MAP(DX__ERR_ENUM)
#undef DX__ERR_ENUM
  DX__ERR_LAST
} dx_errno_t;

/** Fixed message for a code (never NULL; static storage). */
const char *dx_strerror(int code);
/** "DX_EINVAL" style name for a code (never NULL; static storage). */
const char *dx_err_name(int code);
/** 1 when an operation that failed with `code` may succeed if simply retried. */
int dx_err_is_retryable(int code);

/*
** Detail of a failure. Functions that can fail take a trailing `dx_error_t *err` that may be
** NULL; on failure they return the negative code and, when err is non-NULL, fill it.
*/
typedef struct dx_error_s {
  int code;
  int retryable;
  char msg[512];
} dx_error_t;

/** Fill `err` (may be NULL) with code and a printf-formatted message; returns code. */
int dx_error_set(dx_error_t *err, int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

#endif
