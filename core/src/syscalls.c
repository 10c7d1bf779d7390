/*
** syscalls.c -- built-in activities the runtime registers itself (names starting with
** "__duroxide_syscall:", which applications cannot register).
**
** __duroxide_syscall:get_kv_value  input {"instance": id, "key": key}; output the live value
**   of that key of that instance (JSON), or null. Backs ctx:get_kv_value_from_instance: an
**   activity, so the value read is recorded in history and replay is deterministic.
*/
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "duroxide.h"
#include "syscalls.h"
#include "util.h"

int dx__syscall_get_kv(const dx_activity_info_t *info, const char *input, char **output,
                       char **message, void *userdata) {
  dx_provider_t *p = userdata;
  json_t *in = json_loads(input, JSON_DECODE_ANY, NULL);
  const char *inst = json_string_value(json_object_get(in, "instance"));
  const char *key = json_string_value(json_object_get(in, "key"));
  dx_error_t err;
  int rc;
  (void)info;
  if (!inst || !key) {
    json_decref(in);
    *message = dx__strdup("get_kv_value_from_instance: input must be {instance, key}");
    return 1;
  }
  memset(&err, 0, sizeof err);
  rc = p->methods->version >= 7 && p->methods->get_kv
           ? p->methods->get_kv(p, inst, key, output, NULL, &err)
           : dx_error_set(&err, DX_EINVAL, "the store has no key-value support");
  json_decref(in);
  if (rc == DX_ENOTFOUND) {
    *output = NULL; /* JSON null: no such instance or key */
    return 0;
  }
  if (rc != 0) {
    *message = dx__strdup(err.msg);
    return 1;
  }
  return 0;
}
