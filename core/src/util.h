/* util.h -- small shared helpers (internal). */
#ifndef DX_UTIL_H
#define DX_UTIL_H
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* strdup that accepts NULL (returns NULL). Aborts never; returns NULL on ENOMEM. */
char *dx__strdup(const char *s);
/* Wall clock in ms since the epoch. */
int64_t dx__now_ms(void);
/* now + ms, saturated at INT64_MAX (a timeout of math.maxinteger waits, it does not wrap). */
int64_t dx__deadline_ms(int64_t ms);
/* FNV-1a (64-bit) of s's bytes, continuing from h (start with DX_FNV1A64_BASIS). The values
** key cross-process locks (LMDB liveness offsets, PostgreSQL advisory locks): never change. */
#define DX_FNV1A64_BASIS UINT64_C(14695981039346656037)
uint64_t dx__fnv1a64(uint64_t h, const char *s);
/* 64-bit random value from the OS (falls back to time^pid mixing). */
uint64_t dx__random_u64(void);
/* How often to renew a lease of `timeout_ms` (duroxide's rule, shared by activity locks and
** session leases): timeout - buffer from 15 s up, else half the timeout. No floor applied:
** callers add their own. */
int64_t dx__renewal_interval(int64_t timeout_ms, int64_t buffer_ms);
/* Strict "MAJOR.MINOR.PATCH" (digits only, nothing around it): 1 and v filled, else 0. */
int dx__semver_parse(const char *s, int v[3]);
/* Lock tokens: unique across processes and restarts, never 0. */
uint64_t dx__new_token(void);
/* getpid() cached per process (reset in a fork child). */
pid_t dx__getpid(void);
/* Parse a size: bytes, or a number with k, m, g or t (powers of 1024; "MiB", "mb" and
** friends accepted). DX_OK or DX_EINVAL. */
int dx__parse_size(const char *text, size_t *out);
/* A malloc'd, NUL-terminated copy of the n bytes at s in which every byte that does not
** start a valid UTF-8 sequence is replaced by U+FFFD; *out_n (may be NULL) gets its length.
** NULL on ENOMEM. */
char *dx__utf8_fix(const char *s, size_t n, size_t *out_n);
/* How many of the n bytes at s form valid UTF-8 before the first bad byte (n: all valid). */
size_t dx__utf8_valid_prefix(const char *s, size_t n);
/* 1 when the NUL-terminated text is valid UTF-8 (as jansson and PostgreSQL accept it). */
int dx__utf8_valid(const char *s);
/* Identifiers (instance and session ids, names) must be valid UTF-8: PostgreSQL's text refuses
** other bytes and replacing them would make two ids one. DX_OK, or DX_EINVAL in err with
** "WHAT is not valid UTF-8 (byte K is 0xXX)". s may be NULL (nothing to check). */
struct dx_error_s;
int dx__check_utf8(const char *what, const char *s, struct dx_error_s *err);
#endif
