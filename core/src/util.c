/* util.c -- small shared helpers: strings, sizes, clocks, randomness, lock tokens. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "duroxide.h"
#include "log.h"
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

/*
** The process clock. Locks, leases and timers compare wall-clock times written by different
** processes, so every host's clock must be synchronised (docs/architecture.md, "Clocks").
** What one process can do is not to jump: the time it uses runs at the speed of the steady
** clock (CLOCK_BOOTTIME: monotonic, and counts suspend), anchored to the wall clock when the
** process starts. When the wall clock steps (a bad NTP step, someone setting the date), the
** process time moves towards it by at most 5% of the time elapsed: a step of +20 s is adopted
** over 400 s instead of at once, so this worker does not suddenly see every live lease of the
** other workers as lapsed (and steal their sessions and activities), nor its own timers fire
** early; a real correction is still adopted. Process time never goes backwards.
**
** Tests inject a wall-clock offset for one process with DX_TEST_CLOCK_OFFSET_MS: a number of
** ms (a clock that runs ahead or behind), or @FILE whose content (ms) is re-read every 100 ms
** (a clock that steps while the process runs).
*/
#define CLOCK_SLEW_DIV 20 /* adopt at most elapsed/20 ms of a step: 5% */
#define CLOCK_STEP_WARN_MS 1000

static pthread_mutex_t clk_mu = PTHREAD_MUTEX_INITIALIZER;
static int clk_init;
static int64_t clk_time, clk_mono; /* process time at steady time clk_mono */
static int64_t clk_warned_mono = INT64_MIN / 2;
static const char *test_offset_spec;
static int64_t test_offset_ms, test_offset_read_mono = INT64_MIN / 2;

static int64_t read_clock(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The injected test offset (clk_mu held). */
static int64_t test_offset(int64_t mono) {
  if (!test_offset_spec) return 0;
  if (test_offset_spec[0] != '@') return test_offset_ms;
  if (mono - test_offset_read_mono >= 100) {
    FILE *f = fopen(test_offset_spec + 1, "r");
    long long v;
    if (f) {
      if (fscanf(f, "%lld", &v) == 1) test_offset_ms = (int64_t)v;
      fclose(f);
    }
    test_offset_read_mono = mono;
  }
  return test_offset_ms;
}

int64_t dx__now_ms(void) {
  int64_t mono, wall, t, diff, max_adj, step = 0;
  pthread_mutex_lock(&clk_mu);
  mono = read_clock(CLOCK_BOOTTIME);
  if (!clk_init) {
    const char *e = getenv("DX_TEST_CLOCK_OFFSET_MS");
    if (e && *e) {
      test_offset_spec = e;
      if (e[0] != '@') test_offset_ms = strtoll(e, NULL, 10);
    }
  }
  wall = read_clock(CLOCK_REALTIME) + test_offset(mono);
  if (!clk_init) {
    clk_init = 1;
    clk_time = wall;
    clk_mono = mono;
  }
  t = clk_time + (mono - clk_mono);
  diff = wall - t;
  max_adj = (mono - clk_mono) / CLOCK_SLEW_DIV;
  if (diff > max_adj || diff < -max_adj) {
    /* catching up with a step: say so (at most once a minute) */
    t += diff > 0 ? max_adj : -max_adj;
    if ((diff > CLOCK_STEP_WARN_MS || diff < -CLOCK_STEP_WARN_MS) &&
        mono - clk_warned_mono >= 60000) {
      clk_warned_mono = mono;
      step = diff;
    }
    /* only advance the anchor when some slew was granted, so that frequent calls (each
    ** with a tiny elapsed time) still accumulate their 5% allowance */
    if (max_adj > 0) {
      clk_time = t;
      clk_mono = mono;
    }
  } else {
    t = wall;
    clk_time = t;
    clk_mono = mono;
  }
  pthread_mutex_unlock(&clk_mu);
  if (step)
    dx__log(DX_LOG_WARN, "the wall clock stepped; this process adopts the change gradually "
            "(5% of elapsed time) so that leases, locks and timers stay safe",
            "step_ms=%" PRId64, step);
  return t + clock_offset_ms;
}

void dx_clock_advance(int64_t ms) {
  if (ms > 0) clock_offset_ms += ms;
}

int64_t dx_clock_now_ms(void) { return dx__now_ms(); }

int64_t dx__deadline_ms(int64_t ms) {
  int64_t now = dx__now_ms();
  if (ms < 0) ms = 0;
  return ms > INT64_MAX - now ? INT64_MAX : now + ms;
}

uint64_t dx__fnv1a64(uint64_t h, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) h = (h ^ *p++) * UINT64_C(1099511628211);
  return h;
}

uint64_t dx__random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
  }
  return v;
}

/* This process's id without a system call per question (the store thread asks for every
** token and liveness check): cached, and forgotten in the child of a fork(). */
static pid_t cached_pid; /* 0 = not known (atomic) */
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;
static void pid_forget(void) { __atomic_store_n(&cached_pid, 0, __ATOMIC_RELAXED); }
static void pid_install(void) { pthread_atfork(NULL, NULL, pid_forget); }

pid_t dx__getpid(void) {
  pid_t p = __atomic_load_n(&cached_pid, __ATOMIC_RELAXED);
  if (p) return p;
  pthread_once(&pid_once, pid_install);
  p = getpid();
  __atomic_store_n(&cached_pid, p, __ATOMIC_RELAXED);
  return p;
}

/* Random high half per process, counter low half: unique without a syscall per token. The
** high half is redrawn after fork() (pid change) so parent and child never share tokens. */
uint64_t dx__new_token(void) {
  static uint64_t base = 0;
  static pid_t base_pid = 0;
  static uint32_t counter = 0;
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  uint64_t t;
  pid_t pid = dx__getpid();
  pthread_mutex_lock(&mu);
  if (base == 0 || base_pid != pid) {
    base = dx__random_u64() & 0xFFFFFFFF00000000ull;
    if (base == 0) base = 1ull << 32;
    base_pid = pid;
    counter = 0;
  }
  t = base | ++counter;
  pthread_mutex_unlock(&mu);
  return t;
}

int dx__parse_size(const char *text, size_t *out) {
  static const char units[] = "kmgt";
  const char *u;
  char *end;
  unsigned long long v;
  int shift = 0;
  if (!text || *text < '0' || *text > '9') return DX_EINVAL;
  errno = 0;
  v = strtoull(text, &end, 10);
  if (errno) return DX_EINVAL;
  if (*end && (u = strchr(units, tolower((unsigned char)*end))) != NULL) {
    shift = 10 * (int)(u - units + 1);
    end++;
    if (tolower((unsigned char)*end) == 'i') end++;
    if (tolower((unsigned char)*end) == 'b') end++;
  } else if (tolower((unsigned char)*end) == 'b') {
    end++;
  }
  if (*end || (shift && v > (SIZE_MAX >> shift))) return DX_EINVAL;
  *out = (size_t)(v << shift);
  return DX_OK;
}

/* Length of the valid UTF-8 sequence at s (as jansson accepts it: no overlongs, no
** surrogates, at most U+10FFFF), or 0 when the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s, size_t left) {
  unsigned c = s[0], cp, i, n;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) { n = 2; cp = c & 0x1f; }
  else if (c >= 0xe0 && c <= 0xef) { n = 3; cp = c & 0x0f; }
  else if (c >= 0xf0 && c <= 0xf4) { n = 4; cp = c & 0x07; }
  else return 0;
  if (n > left) return 0;
  for (i = 1; i < n; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (s[i] & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

size_t dx__utf8_valid_prefix(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, k;
  while (i < n) {
    if (p[i] < 0x80) { /* ASCII, the common case, without a call per byte */
      i++;
      continue;
    }
    if ((k = utf8_seq(p + i, n - i)) == 0) break;
    i += k;
  }
  return i;
}

int dx__utf8_valid(const char *s) {
  size_t n = strlen(s);
  return dx__utf8_valid_prefix(s, n) == n;
}

char *dx__utf8_fix(const char *s, size_t n, size_t *out_n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0, o = 0, k;
  char *fixed = malloc(n * 3 + 1);
  if (!fixed) return NULL;
  while (i < n) {
    if ((k = utf8_seq(p + i, n - i)) == 0) {
      memcpy(fixed + o, "\xef\xbf\xbd", 3);
      o += 3;
      i++;
    } else {
      memcpy(fixed + o, p + i, k);
      o += k;
      i += k;
    }
  }
  fixed[o] = '\0';
  if (out_n) *out_n = o;
  return fixed;
}

int dx__check_utf8(const char *what, const char *s, dx_error_t *err) {
  size_t n = s ? strlen(s) : 0, k = s ? dx__utf8_valid_prefix(s, n) : 0;
  if (k == n) return DX_OK;
  return dx_error_set(err, DX_EINVAL, "%s is not valid UTF-8 (byte %zu is 0x%02x)", what, k + 1,
                      (unsigned)(unsigned char)s[k]);
}
