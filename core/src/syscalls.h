/*
** syscalls.h -- built-in activities of the runtime (internal; see syscalls.c).
*/
#ifndef DX_SYSCALLS_H
#define DX_SYSCALLS_H

#include "duroxide.h"

#define DX_SYSCALL_GET_KV "__duroxide_syscall:get_kv_value"

/* userdata: the runtime's provider (borrowed). */
int dx__syscall_get_kv(const dx_activity_info_t *info, const char *input, char **output,
                       char **message, void *userdata);

#endif
