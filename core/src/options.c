/*
** options.c -- worker options: defaults, validation, the option table (one row per option:
** name, type, field) that parses `--name value` / configure{name = value} and describes the
** effective values for the "worker options" log line.
*/
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "duroxide.h"
#include "log.h"
#include "options.h"
#include "util.h"

void dx_options_init(dx_options_t *o) {
  memset(o, 0, sizeof *o);
  o->version = 1;
  o->orchestration_concurrency = 256;
  /* Temporal's default too: a fan-out's activities fit one fetch (one commit); CPU-bound Lua
  ** activities are still taken a few at a time (credit.c) */
  o->worker_concurrency = 1000;
  o->max_sessions_per_worker = 10;
  o->session_lock_timeout_ms = 30000;
  o->session_lock_renewal_buffer_ms = 5000;
  o->session_idle_timeout_ms = 300000;
  o->session_cleanup_interval_ms = 300000;
  o->worker_lock_timeout_ms = 30000;
  o->worker_lock_renewal_buffer_ms = 5000;
  o->orchestrator_lock_timeout_ms = 5000;
  o->poll_interval_ms = 10;
  o->max_attempts = 10;
  o->shutdown_grace_ms = 10000;
  o->unregistered_base_ms = 1000;
  o->unregistered_max_ms = 60000;
  o->turn_instruction_budget = 50000000;
  o->loop_block_warning_ms = 1000;
  o->turn_time_limit_ms = 30000;
  o->session_wait_warning_ms = 30000;
  o->log_level = DX_LOG_INFO;
  o->log_format = 0;
  o->orchestration_cache_size = DX_ORCHESTRATION_CACHE_DEFAULT;
  o->heap_prefault = DX_HEAP_PREFAULT_DEFAULT;
  {
    /* Lets a test suite run every spec with the cache on and off (meson suite "cache"). */
    const char *env = getenv("DUROXIDE_ORCHESTRATION_CACHE_SIZE");
    size_t v;
    if (env && *env && dx__parse_size(env, &v) == 0 && v <= (size_t)INT64_MAX)
      o->orchestration_cache_size = (int64_t)v;
  }
}

int dx_parse_duration(const char *text, int64_t *out_ms) {
  char *end = NULL;
  double v;
  double mult = 1;
  if (!text || !*text) return DX_EINVAL;
  v = strtod(text, &end);
  if (end == text || v < 0 || v != v) return DX_EINVAL;
  if (strcmp(end, "") == 0 || strcmp(end, "ms") == 0) mult = 1;
  else if (strcmp(end, "s") == 0) mult = 1000;
  else if (strcmp(end, "m") == 0) mult = 60000;
  else if (strcmp(end, "h") == 0) mult = 3600000;
  else return DX_EINVAL;
  if (v * mult > 9.0e15) return DX_EINVAL;
  *out_ms = (int64_t)(v * mult + 0.5);
  return DX_OK;
}

/* Renewal period shared by activity leases and session leases (duroxide §4.4). */
int64_t dx__lock_renewal_interval(int64_t timeout, int64_t buffer) {
  int64_t r = dx__renewal_interval(timeout, buffer);
  return r < 1000 && timeout >= 2000 ? 1000 : (r < 1 ? 1 : r); /* floor 1 s where possible */
}

int dx_options_validate(const dx_options_t *o, dx_error_t *err) {
  int64_t renew = dx__lock_renewal_interval(o->worker_lock_timeout_ms,
                                            o->worker_lock_renewal_buffer_ms);
  if (o->orchestration_concurrency < 1)
    return dx_error_set(err, DX_EINVAL, "orchestration_concurrency must be at least 1 (got %d)",
                        o->orchestration_concurrency);
  if (o->worker_concurrency < 1)
    return dx_error_set(err, DX_EINVAL, "worker_concurrency must be at least 1 (got %d)",
                        o->worker_concurrency);
  if (o->max_sessions_per_worker < 0)
    return dx_error_set(err, DX_EINVAL, "max_sessions_per_worker must be 0 or more (got %d)",
                        o->max_sessions_per_worker);
  if (o->worker_lock_timeout_ms < 100)
    return dx_error_set(err, DX_EINVAL, "worker_lock_timeout must be at least 100ms (got %" PRId64
                        "ms)", o->worker_lock_timeout_ms);
  if (o->session_lock_timeout_ms < 100)
    return dx_error_set(err, DX_EINVAL, "session_lock_timeout must be at least 100ms (got %"
                        PRId64 "ms)", o->session_lock_timeout_ms);
  if (o->orchestrator_lock_timeout_ms < 100)
    return dx_error_set(err, DX_EINVAL, "orchestrator_lock_timeout must be at least 100ms");
  if (o->session_idle_timeout_ms != 0 && o->session_idle_timeout_ms <= renew)
    return dx_error_set(err, DX_EINVAL,
                        "session_idle_timeout (%" PRId64 "ms) must exceed the worker lock renewal "
                        "interval (%" PRId64 "ms, from worker_lock_timeout %" PRId64 "ms); use 0 "
                        "to never unpin idle sessions",
                        o->session_idle_timeout_ms, renew, o->worker_lock_timeout_ms);
  if (o->max_attempts < 1)
    return dx_error_set(err, DX_EINVAL, "max_attempts must be at least 1");
  if (o->turn_instruction_budget < 1000)
    return dx_error_set(err, DX_EINVAL, "turn_instruction_budget must be at least 1000");
  if (o->turn_time_limit_ms != 0 && o->turn_time_limit_ms < 100)
    return dx_error_set(err, DX_EINVAL, "turn_time_limit must be 0 (off) or at least 100ms (got "
                        "%" PRId64 "ms)", o->turn_time_limit_ms);
  if (o->tags) {
    int rc = dx__tags_parse(o->tags, NULL, err);
    if (rc) return rc;
  }
  if (o->heap_prefault < 0 || o->heap_prefault > (int64_t)256 << 20)
    return dx_error_set(err, DX_EINVAL, "heap_prefault must be 0 (off) to 256m (got %" PRId64
                        " bytes)", o->heap_prefault);
  if (o->worker_node_id && (!*o->worker_node_id || strlen(o->worker_node_id) > 200))
    return dx_error_set(err, DX_EINVAL, "worker_node_id must be 1 to 200 characters");
  return DX_OK;
}

typedef enum { OPT_INT, OPT_DUR, OPT_STR, OPT_LEVEL, OPT_FORMAT, OPT_SIZE } opt_type_t;

typedef struct {
  const char *name;
  opt_type_t type;
  size_t off;
} opt_desc_t;

static const opt_desc_t opt_table[] = {
  {"worker-node-id", OPT_STR, offsetof(dx_options_t, worker_node_id)},
  {"orchestration-concurrency", OPT_INT, offsetof(dx_options_t, orchestration_concurrency)},
  {"worker-concurrency", OPT_INT, offsetof(dx_options_t, worker_concurrency)},
  {"max-sessions-per-worker", OPT_INT, offsetof(dx_options_t, max_sessions_per_worker)},
  {"session-lock-timeout", OPT_DUR, offsetof(dx_options_t, session_lock_timeout_ms)},
  {"session-idle-timeout", OPT_DUR, offsetof(dx_options_t, session_idle_timeout_ms)},
  {"session-cleanup-interval", OPT_DUR, offsetof(dx_options_t, session_cleanup_interval_ms)},
  {"worker-lock-timeout", OPT_DUR, offsetof(dx_options_t, worker_lock_timeout_ms)},
  {"orchestrator-lock-timeout", OPT_DUR, offsetof(dx_options_t, orchestrator_lock_timeout_ms)},
  {"poll-interval", OPT_DUR, offsetof(dx_options_t, poll_interval_ms)},
  {"max-attempts", OPT_INT, offsetof(dx_options_t, max_attempts)},
  {"shutdown-grace", OPT_DUR, offsetof(dx_options_t, shutdown_grace_ms)},
  {"turn-instruction-budget", OPT_INT, offsetof(dx_options_t, turn_instruction_budget)},
  {"turn-time-limit", OPT_DUR, offsetof(dx_options_t, turn_time_limit_ms)},
  {"log-level", OPT_LEVEL, offsetof(dx_options_t, log_level)},
  {"log-format", OPT_FORMAT, offsetof(dx_options_t, log_format)},
  {"loop-block-warning", OPT_DUR, offsetof(dx_options_t, loop_block_warning_ms)},
  {"session-wait-warning", OPT_DUR, offsetof(dx_options_t, session_wait_warning_ms)},
  {"tags", OPT_STR, offsetof(dx_options_t, tags)},
  {"orchestration-cache-size", OPT_SIZE, offsetof(dx_options_t, orchestration_cache_size)},
  {"heap-prefault", OPT_SIZE, offsetof(dx_options_t, heap_prefault)},
};

int dx_options_set(dx_options_t *o, const char *name, const char *value, dx_error_t *err) {
  char norm[64];
  size_t i;
  if (!name || !value) return dx_error_set(err, DX_EINVAL, "option name and value required");
  snprintf(norm, sizeof norm, "%s", name);
  for (i = 0; norm[i]; i++)
    if (norm[i] == '_') norm[i] = '-';
  for (i = 0; i < sizeof opt_table / sizeof opt_table[0]; i++) {
    const opt_desc_t *d = &opt_table[i];
    char *p = (char *)o + d->off;
    if (strcmp(d->name, norm) != 0) continue;
    switch (d->type) {
      case OPT_INT: {
        char *end;
        long long v = strtoll(value, &end, 10);
        if (end == value || *end || v < 0 || v > 1000000000LL)
          return dx_error_set(err, DX_EINVAL, "invalid value for --%s: '%s' (expected a "
                              "non-negative integer)", d->name, value);
        if (d->off == offsetof(dx_options_t, max_attempts)) *(uint32_t *)p = (uint32_t)v;
        else if (d->off == offsetof(dx_options_t, turn_instruction_budget)) *(int64_t *)p = v;
        else *(int *)p = (int)v;
        return DX_OK;
      }
      case OPT_DUR:
        if (dx_parse_duration(value, (int64_t *)p) != 0)
          return dx_error_set(err, DX_EINVAL, "invalid value for --%s: '%s' (expected a "
                              "duration such as 250ms, 30s, 5m or 1h)", d->name, value);
        return DX_OK;
      case OPT_STR:
        *(const char **)p = value;
        return DX_OK;
      case OPT_SIZE: {
        size_t v;
        if (dx__parse_size(value, &v) != 0 || v > ((size_t)1 << 50))
          return dx_error_set(err, DX_EINVAL, "invalid value for --%s: '%s' (expected a size in "
                              "bytes such as 0, 512k, 64m or 1g)", d->name, value);
        *(int64_t *)p = (int64_t)v;
        return DX_OK;
      }
      case OPT_LEVEL: {
        int lv = dx__log_level_from_name(value);
        if (lv < 0)
          return dx_error_set(err, DX_EINVAL, "invalid value for --log-level: '%s' (expected "
                              "error, warn, info or debug)", value);
        *(int *)p = lv;
        return DX_OK;
      }
      case OPT_FORMAT:
        if (strcmp(value, "text") == 0) *(int *)p = 0;
        else if (strcmp(value, "json") == 0) *(int *)p = 1;
        else
          return dx_error_set(err, DX_EINVAL, "invalid value for --log-format: '%s' (expected "
                              "text or json)", value);
        return DX_OK;
    }
  }
  return dx_error_set(err, DX_ENOTFOUND, "unknown option --%s", norm);
}

/* "gpu,default" -> the tag half of a fetch filter ("default" = untagged work). f may be NULL
** (validation only); else its tags point into f's own storage (dx__tags_free). */
int dx__tags_parse(const char *csv, dx_fetch_filter_t *f, dx_error_t *err) {
  const char *p = csv;
  dx_fetch_filter_t tmp;
  int rc = DX_OK;
  memset(&tmp, 0, sizeof tmp);
  if (!*csv)
    return dx_error_set(err, DX_EINVAL, "invalid value for --tags: empty (expected tag names "
                        "separated by commas; \"default\" is untagged work)");
  for (;;) {
    const char *end = strchr(p, ',');
    size_t n = end ? (size_t)(end - p) : strlen(p), i;
    char *tag;
    if (n == 0 || n > DX_MAX_TAG_BYTES) {
      rc = dx_error_set(err, DX_EINVAL, "invalid value for --tags: '%s' (%s)", csv,
                        n ? "a tag is longer than 256 bytes" : "an empty tag");
      break;
    }
    if (n == 7 && memcmp(p, "default", 7) == 0) {
      tmp.untagged = 1;
    } else {
      for (i = 0; i < tmp.n_tags; i++)
        if (strlen(tmp.tags[i]) == n && memcmp(tmp.tags[i], p, n) == 0) break;
      if (i == tmp.n_tags) {
        const char **nv;
        if (tmp.n_tags == DX_MAX_WORKER_TAGS) {
          rc = dx_error_set(err, DX_EINVAL, "invalid value for --tags: '%s' (a worker takes "
                            "at most %d tags besides \"default\")", csv, DX_MAX_WORKER_TAGS);
          break;
        }
        nv = realloc((void *)tmp.tags, (tmp.n_tags + 1) * sizeof *nv);
        tag = malloc(n + 1);
        if (nv) tmp.tags = nv;
        if (!nv || !tag) {
          free(tag);
          rc = dx_error_set(err, DX_ENOMEM, "out of memory");
          break;
        }
        memcpy(tag, p, n);
        tag[n] = 0;
        nv[tmp.n_tags++] = tag;
      }
    }
    if (!end) break;
    p = end + 1;
  }
  if (rc || !f) {
    dx__tags_free(&tmp);
    return rc;
  }
  f->untagged = tmp.untagged;
  f->tags = tmp.tags;
  f->n_tags = tmp.n_tags;
  return DX_OK;
}

void dx__tags_free(dx_fetch_filter_t *f) {
  size_t i;
  for (i = 0; i < f->n_tags; i++) free((char *)f->tags[i]);
  free((void *)f->tags);
  f->tags = NULL;
  f->n_tags = 0;
}

/* The "worker options" log record: every option as a field (the table's order and spelling;
** durations in ms), what the worker really runs with, whichever source set it. */
void dx__options_log(const dx_options_t *o, int level, const char *msg) {
  static const char *levels[] = {"error", "warn", "info", "debug"};
  enum { N = sizeof opt_table / sizeof opt_table[0] };
  dx_log_field_t f[N];
  char vals[N][256];
  size_t i;
  for (i = 0; i < N; i++) {
    const opt_desc_t *d = &opt_table[i];
    const char *p = (const char *)o + d->off;
    const char *str = d->type == OPT_STR ? *(const char *const *)p : NULL;
    char *v = vals[i];
    switch (d->type) {
      case OPT_INT:
        if (d->off == offsetof(dx_options_t, max_attempts))
          snprintf(v, 256, "%u", *(const uint32_t *)p);
        else if (d->off == offsetof(dx_options_t, turn_instruction_budget))
          snprintf(v, 256, "%" PRId64, *(const int64_t *)p);
        else
          snprintf(v, 256, "%d", *(const int *)p);
        break;
      case OPT_DUR: snprintf(v, 256, "%" PRId64 "ms", *(const int64_t *)p); break;
      case OPT_STR: snprintf(v, 256, "%s", str ? str : ""); break;
      case OPT_LEVEL: {
        int lv = *(const int *)p;
        snprintf(v, 256, "%s", lv >= 0 && lv < 4 ? levels[lv] : "?");
        break;
      }
      case OPT_FORMAT: snprintf(v, 256, "%s", *(const int *)p ? "json" : "text"); break;
      case OPT_SIZE: snprintf(v, 256, "%" PRId64, *(const int64_t *)p); break;
    }
    memset(&f[i], 0, sizeof f[i]);
    f[i].key = d->name;
    f[i].key_len = strlen(d->name);
    f[i].value = v;
    f[i].quoted = d->type == OPT_STR;
    if ((f[i].is_int = d->type == OPT_INT || d->type == OPT_SIZE)) f[i].int_value = strtoll(v, NULL, 10);
  }
  dx__log_fields(level, msg, f, (int)N);
}
