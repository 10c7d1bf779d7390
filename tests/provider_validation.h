/*
** provider_validation.h -- the provider contract tests, shared by every provider.
**
** provider_validation.c holds DX_TEST functions that only use the vtable. A provider's test
** program links them and defines the hooks below (see test_provider_lmdb.c).
*/
#ifndef DX_PROVIDER_VALIDATION_H
#define DX_PROVIDER_VALIDATION_H

#include <stdint.h>
#include <sys/types.h>

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

/* {===== shared by the suite's files =====}
** Each file that uses CHECK / CHECK_ERR defines `static dx_error_t E;` (the last call's error
** detail, printed on failure) and includes testlib.h. */
#define T0 INT64_C(1700000000000)
#define LOCK 30000
#define M(p) ((p)->methods)

#define CHECK(call)                                                                 \
  do {                                                                              \
    int rc_ = (call);                                                               \
    if (rc_ != 0) DX_FAIL_AT("%s -> %s: %s", #call, dx_err_name(rc_), E.msg);      \
  } while (0)
#define CHECK_ERR(call, code)                                                       \
  do {                                                                              \
    int rc_ = (call);                                                               \
    if (rc_ != (code))                                                              \
      DX_FAIL_AT("%s -> %s, expected %s (%s)", #call, dx_err_name(rc_),            \
                 dx_err_name(code), rc_ ? E.msg : "");                              \
  } while (0)

/* A child process that registers `worker` on `store` (claim 0: and nothing else; 1: claims
** session s1; 2: locks the due plain row and instance), then waits to be killed; returns its
** pid once it holds that (provider_validation.c). dx_pv_kill_holder: SIGKILL and reap. */
pid_t dx_pv_spawn_holder(const char *store, const char *worker, int claim);
void dx_pv_kill_holder(pid_t pid);

/* A handle on a new, empty store (dx_pv_new_store + dx_pv_open). */
dx_provider_t *dx_pv_fresh(void);

#endif
