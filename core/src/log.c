/* log.c -- the process logger. Records go to stderr so stdout stays for command output. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "log.h"

static int log_level = DX_LOG_INFO;
static int log_format = DX_LOGFMT_TEXT;
static const char *level_names[] = {"error", "warn", "info", "debug"};

void dx__log_configure(int level, int format) {
  log_level = level;
  log_format = format;
}

int dx__log_level(void) { return log_level; }

int dx__log_level_from_name(const char *name) {
  int i;
  for (i = 0; i < 4; i++)
    if (strcmp(name, level_names[i]) == 0) return i;
  if (strcmp(name, "warning") == 0) return DX_LOG_WARN;
  return -1;
}

/* Write "k=v k2=\"v 2\"" pairs as JSON members. Values are kept as strings. */
static void put_json_fields(FILE *f, const char *s) {
  while (*s) {
    const char *eq = strchr(s, '=');
    const char *v, *end;
    if (!eq) break;
    while (*s == ' ') s++;
    fputs(",\"", f);
    fwrite(s, 1, (size_t)(eq - s), f);
    fputs("\":\"", f);
    v = eq + 1;
    if (*v == '"') {
      v++;
      end = strchr(v, '"');
      if (!end) end = v + strlen(v);
    } else {
      end = strchr(v, ' ');
      if (!end) end = v + strlen(v);
    }
    for (; v < end; v++) {
      if (*v == '\\' || *v == '"') fputc('\\', f);
      if ((unsigned char)*v < 0x20) { fputc(' ', f); continue; }
      fputc(*v, f);
    }
    fputc('"', f);
    s = *end == '"' ? end + 1 : end;
    while (*s == ' ') s++;
  }
}

/* Text-format output: control characters (a newline in an instance id, say) are written
** escaped, so user text cannot end the record and forge the next line. */
static void put_escaped(FILE *f, const char *s) {
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '\n') fputs("\\n", f);
    else if (c == '\r') fputs("\\r", f);
    else if (c == '\t') fputs("\\t", f);
    else if (c < 0x20 || c == 0x7f) fprintf(f, "\\x%02x", c);
    else fputc(c, f);
  }
}

void dx__log(int level, const char *msg, const char *fields_fmt, ...) {
  char fields[2048] = "";
  char ts[96];
  struct timespec now;
  struct tm tm;
  if (level > log_level) return;
  if (fields_fmt) {
    va_list ap;
    va_start(ap, fields_fmt);
    vsnprintf(fields, sizeof fields, fields_fmt, ap);
    va_end(ap);
  }
  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &tm);
  snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
           tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
           now.tv_nsec / 1000000);
  flockfile(stderr);
  if (log_format == DX_LOGFMT_JSON) {
    fprintf(stderr, "{\"ts\":\"%s\",\"level\":\"%s\",\"msg\":\"", ts, level_names[level]);
    for (const char *p = msg; *p; p++) {
      if (*p == '"' || *p == '\\') fputc('\\', stderr);
      fputc(*p, stderr);
    }
    fputc('"', stderr);
    put_json_fields(stderr, fields);
    fputs("}\n", stderr);
  } else {
    fprintf(stderr, "%s %-5s ", ts, level_names[level]);
    put_escaped(stderr, msg);
    if (fields[0]) fputc(' ', stderr);
    put_escaped(stderr, fields);
    fputc('\n', stderr);
  }
  funlockfile(stderr);
}
