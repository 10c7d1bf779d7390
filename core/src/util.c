/* util.c -- small shared helpers: strings, clocks, randomness, lock tokens. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "duroxide.h"
#include "util.h"

char *dx__strdup(const char *s) {
  size_t n;
  char *d;
  if (!s) return NULL;
  n = strlen(s) + 1;
  d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

int dx__semver_parse(const char *s, int v[3]) {
  int i;
  if (!s) return 0;
  for (i = 0; i < 3; i++) {
    long n = 0;
    const char *start = s;
    while (*s >= '0' && *s <= '9' && s - start < 9) n = n * 10 + (*s++ - '0');
    if (s == start || (*s >= '0' && *s <= '9')) return 0;
    v[i] = (int)n;
    if (*s != (i < 2 ? '.' : '\0')) return 0;
    s++;
  }
  return 1;
}

int64_t dx__renewal_interval(int64_t timeout_ms, int64_t buffer_ms) {
  if (timeout_ms >= 15000) return timeout_ms - (buffer_ms < timeout_ms ? buffer_ms : timeout_ms);
  return (timeout_ms + 1) / 2;
}

/* Offset added to the wall clock by dx_clock_advance (tests skip hours of timers and leases
** this way). Process-wide: every lock, lease, timer and timestamp moves together. */
static _Atomic int64_t clock_offset_ms;

int64_t dx__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + clock_offset_ms;
}

void dx_clock_advance(int64_t ms) {
  if (ms > 0) clock_offset_ms += ms;
}

int64_t dx_clock_now_ms(void) { return dx__now_ms(); }

uint64_t dx__random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
  }
  return v;
}

/* Random high half per process, counter low half: unique without a syscall per token. The
** high half is redrawn after fork() (pid change) so parent and child never share tokens. */
uint64_t dx__new_token(void) {
  static uint64_t base = 0;
  static pid_t base_pid = 0;
  static uint32_t counter = 0;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  uint64_t t;
  pthread_mutex_lock(&mu);
  if (base == 0 || base_pid != getpid()) {
    base = dx__random_u64() & 0xFFFFFFFF00000000ull;
    if (base == 0) base = 1ull << 32;
    base_pid = getpid();
    counter = 0;
  }
  t = base | ++counter;
  pthread_mutex_unlock(&mu);
  return t;
}
