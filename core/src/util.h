/* util.h -- small shared helpers (internal). */
#ifndef DX_UTIL_H
#define DX_UTIL_H
#include <stddef.h>
#include <stdint.h>

/* strdup that accepts NULL (returns NULL). Aborts never; returns NULL on ENOMEM. */
char *dx__strdup(const char *s);
/* Wall clock in ms since the epoch. */
int64_t dx__now_ms(void);
/* 64-bit random value from the OS (falls back to time^pid mixing). */
uint64_t dx__random_u64(void);
/* Lock tokens: unique across processes and restarts, never 0. */
uint64_t dx__new_token(void);
#endif
