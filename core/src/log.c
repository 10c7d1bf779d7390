/*
** log.c -- the process logger. Records go to stderr so stdout stays for command output.
**
** Call sites describe fields with a printf format of "key=value" pairs ("instance=%s id=%"
** PRIu64 " error=\"%s\""), which keeps the compiler's format checks. The format is parsed here,
** not the text it expands to, so a value holding spaces, quotes, '=' or newlines (ids and
** messages come from users) stays one value. Each field's conversions are expanded on their
** own (a field that is just a NULL %s is left out: "session_id=%s" with no session), then the
** record is written:
** - text: "TS LEVEL msg key=value ...", control characters escaped (\n, \xHH) so user text
**   cannot end the record; a value the format quotes is written quoted, its quotes escaped;
** - JSON: one object per line built with jansson: ts, level, msg, worker_id (the field, else
**   the worker this thread works for, else null), then the fields in order; a field that is
**   one integer conversion is a JSON number, every other one a string (invalid UTF-8 bytes
**   become U+FFFD).
*/
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include <jansson.h>

#include "jsonout.h"
#include "log.h"

static int log_level = DX_LOG_INFO;
static int log_format = DX_LOGFMT_TEXT;
static const char *level_names[] = {"error", "warn", "info", "debug"};

/* The worker this thread works for (JSON records carry it); "" = none. A copy, so a freed
** runtime leaves no dangling pointer behind. */
static _Thread_local char thread_worker[256];

void dx__log_configure(int level, int format) {
  log_level = level;
  log_format = format;
}

int dx__log_level(void) { return log_level; }

int dx__log_format(void) { return log_format; }

int dx__log_level_from_name(const char *name) {
  int i;
  for (i = 0; i < 4; i++)
    if (strcmp(name, level_names[i]) == 0) return i;
  if (strcmp(name, "warning") == 0) return DX_LOG_WARN;
  return -1;
}

void dx__log_set_worker(const char *worker_id) {
  if (!worker_id) worker_id = "";
  if (strcmp(thread_worker, worker_id) == 0) return; /* called per activity result: usually so */
  snprintf(thread_worker, sizeof thread_worker, "%s", worker_id);
}

const char *dx__log_worker(void) { return thread_worker; }

/* {===== fields =====} */

#define MAX_FIELDS 40
#define ARENA 8192

typedef struct {
  char arena[ARENA]; /* field values, NUL-separated */
  size_t used;
  int n;
  dx_log_field_t f[MAX_FIELDS];
} fields_t;

/* Append bytes to the value being built (cut when the arena is full). */
static void arena_put(fields_t *fs, const char *s, size_t n) {
  if (fs->used + n + 1 > ARENA) n = ARENA - 1 - fs->used;
  memcpy(fs->arena + fs->used, s, n);
  fs->used += n;
  fs->arena[fs->used] = '\0';
}

/* One conversion at *pp (just past '%'): consume its argument from ap and append its text.
** *is_int is set when it was an integer conversion that fits an int64 (*iv); *null when it was
** %s of a NULL string. */
static void convert(fields_t *fs, const char **pp, va_list *ap, int *is_int, long long *iv,
                    int *null) {
  const char *p = *pp;
  char spec[48], tmp[128];
  size_t k = 0;
  char len[3] = "";
  int n = 0;
  *is_int = 0;
  spec[k++] = '%';
  while (*p && strchr("-+ #0", *p) && k < 8) spec[k++] = *p++;
  if (*p == '*') { /* width from the arguments */
    k += (size_t)snprintf(spec + k, sizeof spec - k, "%d", va_arg(*ap, int));
    p++;
  } else {
    while (*p >= '0' && *p <= '9' && k < 20) spec[k++] = *p++;
  }
  if (*p == '.') {
    spec[k++] = *p++;
    if (*p == '*') {
      k += (size_t)snprintf(spec + k, sizeof spec - k, "%d", va_arg(*ap, int));
      p++;
    } else {
      while (*p >= '0' && *p <= '9' && k < 32) spec[k++] = *p++;
    }
  }
  while (*p && strchr("hlzjtL", *p) && n < 2) len[n++] = *p, spec[k++] = *p++;
  len[n] = '\0';
  if (!*p) { /* a lone '%' at the end */
    *pp = p;
    return;
  }
  spec[k++] = *p;
  spec[k] = '\0';
  switch (*p) {
    case 'd': case 'i': {
      long long v = strcmp(len, "ll") == 0 ? va_arg(*ap, long long)
                  : len[0] == 'l'          ? va_arg(*ap, long)
                  : len[0] == 'z'          ? (long long)va_arg(*ap, ssize_t)
                  : len[0] == 'j'          ? (long long)va_arg(*ap, intmax_t)
                  : len[0] == 't'          ? (long long)va_arg(*ap, ptrdiff_t)
                                           : va_arg(*ap, int);
      if (strcmp(len, "hh") == 0) v = (signed char)v;
      else if (len[0] == 'h') v = (short)v;
      snprintf(tmp, sizeof tmp, "%lld", v);
      *is_int = 1;
      *iv = v;
      break;
    }
    case 'u': case 'x': case 'X': case 'o': {
      unsigned long long v = strcmp(len, "ll") == 0 ? va_arg(*ap, unsigned long long)
                           : len[0] == 'l'          ? va_arg(*ap, unsigned long)
                           : len[0] == 'z'          ? va_arg(*ap, size_t)
                           : len[0] == 'j'          ? (unsigned long long)va_arg(*ap, uintmax_t)
                           : len[0] == 't'          ? (unsigned long long)va_arg(*ap, ptrdiff_t)
                                                    : va_arg(*ap, unsigned);
      if (strcmp(len, "hh") == 0) v = (unsigned char)v;
      else if (len[0] == 'h') v = (unsigned short)v;
      /* re-format with the spec's flags and width, as unsigned long long */
      k -= (size_t)n + 1;
      k += (size_t)snprintf(spec + k, sizeof spec - k, "ll%c", *p);
      snprintf(tmp, sizeof tmp, spec, v);
      if (*p == 'u' && v <= (unsigned long long)INT64_MAX) {
        *is_int = 1;
        *iv = (long long)v;
      }
      break;
    }
    case 'c': snprintf(tmp, sizeof tmp, spec, va_arg(*ap, int)); break;
    case 'p': snprintf(tmp, sizeof tmp, spec, va_arg(*ap, void *)); break;
    case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': case 'a': case 'A':
      if (len[0] == 'L') snprintf(tmp, sizeof tmp, spec, va_arg(*ap, long double));
      else snprintf(tmp, sizeof tmp, spec, va_arg(*ap, double));
      break;
    case 's': {
      const char *s = va_arg(*ap, const char *);
      const char *dot = strchr(spec, '.');
      if (!s) {
        *null = 1;
        s = "";
      }
      if (strcmp(spec, "%s") == 0) { /* the common case, any length: straight in */
        arena_put(fs, s, strlen(s));
        *pp = p + 1;
        return;
      }
      if (dot) { /* precision: at most that many bytes of s */
        size_t max = (size_t)strtoul(dot + 1, NULL, 10);
        arena_put(fs, s, strnlen(s, max));
        *pp = p + 1;
        return;
      }
      snprintf(tmp, sizeof tmp, spec, s);
      break;
    }
    case '%': snprintf(tmp, sizeof tmp, "%%"); break;
    default: snprintf(tmp, sizeof tmp, "%s", spec); break; /* unknown: shown as written */
  }
  arena_put(fs, tmp, strlen(tmp));
  *pp = p + 1;
}

/* Parse "key=value key=\"value\" ..." of fmt, expanding each value's conversions alone. A
** piece without '=' becomes a field named "detail". */
static void parse_fields(fields_t *fs, const char *fmt, va_list *ap) {
  const char *p = fmt;
  while (*p) {
    dx_log_field_t *f;
    const char *key, *eq;
    int quoted, convs = 0, last_int = 0, other_text = 0, null = 0;
    long long iv = 0;
    size_t start;
    while (*p == ' ') p++;
    if (!*p) break;
    key = p;
    eq = p;
    while (*eq && *eq != '=' && *eq != ' ' && *eq != '%') eq++;
    if (*eq != '=') { /* no key: the whole piece is a value */
      eq = NULL;
    }
    p = eq ? eq + 1 : key;
    quoted = *p == '"';
    if (quoted) p++;
    start = fs->used;
    fs->arena[start] = '\0'; /* an empty value */
    for (;;) {
      if (!*p || (quoted ? *p == '"' : *p == ' ')) break;
      if (*p == '%' && p[1] != '%') {
        int is_int = 0;
        p++;
        convert(fs, &p, ap, &is_int, &iv, &null);
        convs++;
        last_int = is_int;
        continue;
      }
      if (*p == '%') p++; /* "%%" */
      arena_put(fs, p, 1);
      other_text = 1;
      p++;
    }
    if (quoted && *p == '"') p++;
    /* arguments are still consumed in order; a field that is only a NULL %s is left out */
    if (fs->n == MAX_FIELDS || (null && convs == 1 && !other_text)) {
      fs->used = start;
      continue;
    }
    f = &fs->f[fs->n++];
    memset(f, 0, sizeof *f);
    if (eq) {
      f->key_len = (size_t)(eq - key);
      f->key = key;
    } else {
      f->key = "detail";
      f->key_len = 6;
    }
    f->value = fs->arena + start;
    f->quoted = quoted;
    f->is_int = convs == 1 && last_int && !other_text;
    f->int_value = iv;
    if (fs->used + 1 < ARENA) fs->used++; /* keep the NUL that ends this value */
  }
}

/* {===== output =====} */

/* Text: control characters escaped; in a quoted value also the quote and backslash. */
static void put_escaped(FILE *f, const char *s, int quoted) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n') fputs("\\n", f);
    else if (c == '\r') fputs("\\r", f);
    else if (c == '\t') fputs("\\t", f);
    else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
    else if (quoted && (c == '"' || c == '\\')) fputc('\\', f), fputc(c, f);
    else fputc(c, f);
  }
}

static void write_text(const char *ts, int level, const char *msg, const dx_log_field_t *fs,
                       int n) {
  int i;
  fprintf(stderr, "%s %-5s ", ts, level_names[level]);
  put_escaped(stderr, msg, 0);
  for (i = 0; i < n; i++) {
    fputc(' ', stderr);
    fwrite(fs[i].key, 1, fs[i].key_len, stderr);
    fputs(fs[i].quoted ? "=\"" : "=", stderr);
    put_escaped(stderr, fs[i].value, fs[i].quoted);
    if (fs[i].quoted) fputc('"', stderr);
  }
  fputc('\n', stderr);
}

/* JSON: built with jansson, so any text is a valid string; NULL when out of memory. */
static char *json_record(const char *ts, int level, const char *msg, const dx_log_field_t *fs,
                         int n) {
  json_t *o = json_object();
  char key[128];
  char *out;
  int i, bad = !o, has_worker = 0;
  for (i = 0; i < n; i++)
    if (fs[i].key_len == 9 && memcmp(fs[i].key, "worker_id", 9) == 0) has_worker = 1;
  if (!bad) {
    bad |= json_object_set_new(o, "ts", json_string(ts)) != 0;
    bad |= json_object_set_new(o, "level", json_string(level_names[level])) != 0;
    bad |= json_object_set_new(o, "msg", dx__json_text(msg)) != 0;
    if (!has_worker) /* the record names none: the thread's worker, or null */
      bad |= json_object_set_new(o, "worker_id", thread_worker[0] ? dx__json_text(thread_worker)
                                                                  : json_null()) != 0;
  }
  for (i = 0; i < n && !bad; i++) {
    json_t *v = fs[i].is_int ? json_integer((json_int_t)fs[i].int_value)
                             : dx__json_text(fs[i].value);
    snprintf(key, sizeof key, "%.*s", (int)fs[i].key_len, fs[i].key);
    /* our own keys: never one of the members above, so nothing is overwritten */
    bad |= json_object_set_new(o, key, v) != 0;
  }
  out = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(o);
  return out;
}

void dx__log_fields(int level, const char *msg, const dx_log_field_t *fs, int n) {
  char ts[96];
  struct timespec now;
  struct tm tm;
  if (level > log_level || level < 0) return;
  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &tm);
  snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           now.tv_nsec / 1000000);
  if (log_format == DX_LOGFMT_JSON) {
    char *line = json_record(ts, level, msg ? msg : "", fs, n);
    flockfile(stderr);
    if (line) fprintf(stderr, "%s\n", line);
    else fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"error\",\"msg\":\"out of memory writing "
                         "a log record\"}\n", ts);
    funlockfile(stderr);
    free(line);
    return;
  }
  flockfile(stderr);
  write_text(ts, level, msg ? msg : "", fs, n);
  funlockfile(stderr);
}

void dx__log(int level, const char *msg, const char *fields_fmt, ...) {
  static _Thread_local fields_t fs; /* 8 KiB: off the stack of deep callers */
  va_list ap;
  if (level > log_level || level < 0) return;
  fs.used = 0;
  fs.n = 0;
  fs.arena[0] = '\0';
  if (fields_fmt) {
    va_start(ap, fields_fmt);
    parse_fields(&fs, fields_fmt, &ap);
    va_end(ap);
  }
  dx__log_fields(level, msg, fs.f, fs.n);
}
