/* store_fake.c -- see store_fake.h. */
#include <string.h>

#include "store_fake.h"

static int f_commit(dx_provider_t *p, int sync, dx_error_t *err) { return 0; }
static void f_rollback(dx_provider_t *p) {}
static int f_fetch_orch(dx_provider_t *p, int64_t now, int64_t lock_ms, dx_orch_item_t **out,
                        dx_error_t *err) {
  *out = NULL;
  return 0;
}
static int f_fetch_work(dx_provider_t *p, int64_t now, int64_t lock_ms,
                        const dx_session_cfg_t *s, dx_work_fetch_t *out, dx_error_t *err) {
  memset(out, 0, sizeof *out);
  return 0;
}

void store_fake_methods(dx_provider_methods_t *m, int (*begin)(dx_provider_t *, dx_error_t *),
                        int (*next_due)(dx_provider_t *, int64_t, int64_t *, dx_error_t *)) {
  memset(m, 0, sizeof *m);
  m->version = 1;
  m->name = "fake";
  m->begin = begin;
  m->commit = f_commit;
  m->rollback = f_rollback;
  m->fetch_orchestration_item = f_fetch_orch;
  m->fetch_work_item = f_fetch_work;
  m->next_due_ms = next_due;
}
