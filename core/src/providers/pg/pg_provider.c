/*
** pg_provider.c -- the PostgreSQL provider's vtable, URL parsing and open/close.
*/
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "providers/pg/pg.h"
#include "providers/pg/pg_internal.h"
#include "util.h"

#define DEFAULT_SCHEMA "duroxide"

static void pg_destroy(dx_provider_t *pp) {
  pg_t *p = (pg_t *)pp;
  if (!p) return;
  dx__pg_wake_close(p);
  dx__pg_live_close(p);
  dx__pg_conns_close(p);
  pthread_mutex_destroy(&p->mu);
  free(p->channel_q);
  free(p->live_prefix);
  free(p->conninfo);
  free(p->schema);
  free(p->schema_q);
  dx_fetch_filter_free(p->filter);
  free(p->tags_param);
  free(p->cap_names);
  free(p->cap_versions);
  free(p);
}

static int pg_set_history_hint(dx_provider_t *pp, const dx_history_hint_t *h, dx_error_t *err) {
  pg_t *p = (pg_t *)pp;
  (void)err;
  if (h) p->hint = *h;
  else memset(&p->hint, 0, sizeof p->hint);
  return 0;
}

static int pg_set_fetch_filter(dx_provider_t *pp, const dx_fetch_filter_t *f, dx_error_t *err) {
  pg_t *p = (pg_t *)pp;
  dx_fetch_filter_t *copy = NULL;
  char *tags, *names = NULL, *versions = NULL;
  int caps;
  int rc;
  if (f && (rc = dx_fetch_filter_copy(f, &copy, err))) return rc;
  caps = copy && copy->capabilities_set;
  tags = dx__pg_text_array(copy ? copy->tags : NULL, copy ? copy->n_tags : 0, sizeof(char *));
  if (caps) {
    const dx_orch_capability_t *c = copy->capabilities;
    names = dx__pg_text_array(c ? &c[0].name : NULL, copy->n_capabilities, sizeof *c);
    versions = dx__pg_text_array(c ? &c[0].version : NULL, copy->n_capabilities, sizeof *c);
  }
  if (!tags || (caps && (!names || !versions))) {
    free(tags);
    free(names);
    free(versions);
    dx_fetch_filter_free(copy);
    return dx__pg_nomem(err);
  }
  dx_fetch_filter_free(p->filter);
  free(p->tags_param);
  free(p->cap_names);
  free(p->cap_versions);
  p->filter = copy;
  p->tags_param = tags;
  p->cap_names = names;
  p->cap_versions = versions;
  return 0;
}

int dx__pg_same_store(dx_provider_t *a, dx_provider_t *b) {
  const pg_t *x = (const pg_t *)a, *y = (const pg_t *)b;
  return a->methods == b->methods && a->methods->destroy == pg_destroy &&
         strcmp(x->conninfo, y->conninfo) == 0 && strcmp(x->schema, y->schema) == 0;
}

static const char *pg_notify_path(dx_provider_t *pp) {
  (void)pp;
  return NULL; /* no file to watch: the runtime polls */
}

static const dx_provider_test_hooks_t pg_test_hooks = {1, dx__pg_test_corrupt_history,
                                                       dx__pg_test_expire_session, NULL};

static const dx_provider_methods_t pg_methods = {
  12,
  "postgres",
  pg_destroy,
  dx__pg_begin,
  dx__pg_commit,
  dx__pg_rollback,
  dx__pg_fetch_orch,
  dx__pg_ack_orch,
  dx__pg_abandon_orch,
  dx__pg_renew_orch,
  dx__pg_fetch_work,
  dx__pg_ack_work,
  dx__pg_abandon_work,
  dx__pg_renew_work,
  dx__pg_enqueue_orch,
  dx__pg_enqueue_work,
  dx__pg_read_history,
  dx__pg_append,
  dx__pg_get_info,
  dx__pg_list,
  dx__pg_depths,
  dx__pg_next_due,
  dx__pg_renew_sessions,
  dx__pg_release_sessions,
  dx__pg_cleanup_sessions,
  dx__pg_list_sessions,
  pg_notify_path,
  NULL, /* check: not offered (`duroxide-lua check` says the provider cannot check) */
  dx__pg_wake_fd,
  dx__pg_wake_drain,
  &pg_test_hooks,
  dx__pg_run_cycle,
  dx__pg_worker_register,
  dx__pg_worker_unregister,
  /* management (version 6) */
  dx__pg_list_page,
  dx__pg_list_executions,
  dx__pg_instance_queue,
  dx__pg_delete_instances,
  dx__pg_prune_executions,
  dx__pg_terminate,
  /* key-value state (version 7) */
  dx__pg_get_kv,
  dx__pg_list_kv,
  /* session history (version 8) */
  dx__pg_append_session_event,
  dx__pg_list_session_events,
  pg_set_fetch_filter, /* activity tags and rolling deployments (version 9) */
  dx__pg_list_workers, /* live workers (version 10) */
  pg_set_history_hint, /* cached orchestrations (version 11) */
  /* begin_atomic (version 12): nothing to skip. A batch's calls here take no savepoint (their
  ** expected refusals come before any write: pg_orch.c), so begin serves all-or-nothing
  ** batches as cheaply. */
  NULL,
};

uint64_t dx__pg_round_trips(dx_provider_t *pp) {
  return __atomic_load_n(&((pg_t *)pp)->round_trips, __ATOMIC_RELAXED);
}

/* Schema names: lower-case letters, digits and '_', not starting with a digit, <= 63 bytes
** (PostgreSQL's identifier limit), so the name is the same quoted or not. */
static int valid_schema(const char *s, size_t n) {
  size_t i;
  if (n == 0 || n > 63 || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '_')) return 0;
  return 1;
}

/* Split `url` into the libpq URI without `schema=` and the schema name. */
static int parse_url(const char *url, char **conninfo, char **schema, int *liveness,
                     dx_error_t *err) {
  const char *q = strchr(url, '?'), *s, *name = DEFAULT_SCHEMA;
  size_t name_n = strlen(DEFAULT_SCHEMA), cap = strlen(url) + 1, o;
  char *ci, *sc, *errmsg = NULL;
  PQconninfoOption *opts;
  if (strncmp(url, "postgres://", 11) != 0 && strncmp(url, "postgresql://", 13) != 0)
    return dx_error_set(err, DX_EINVAL,
                        "store URL '%s' is not a PostgreSQL URL (postgres://... or "
                        "postgresql://...)", url);
  if (!(ci = malloc(cap))) return dx__pg_nomem(err);
  o = (size_t)(q ? q - url : (ptrdiff_t)strlen(url));
  memcpy(ci, url, o);
  ci[o] = 0;
  for (s = q ? q + 1 : NULL; s && *s;) {
    const char *end = strchr(s, '&');
    size_t n = end ? (size_t)(end - s) : strlen(s);
    if (n > 7 && strncmp(s, "schema=", 7) == 0) {
      name = s + 7;
      name_n = n - 7;
    } else if (n >= 9 && strncmp(s, "liveness=", 9) == 0) {
      if (n == 11 && strncmp(s + 9, "on", 2) == 0) *liveness = 1;
      else if (n == 12 && strncmp(s + 9, "off", 3) == 0) *liveness = 0;
      else {
        int rc = dx_error_set(err, DX_EINVAL, "store URL option '%.*s': liveness is on or off",
                              (int)(n > 60 ? 60 : n), s);
        free(ci);
        return rc;
      }
    } else if (n) {
      strcat(ci, strchr(ci, '?') ? "&" : "?");
      strncat(ci, s, n);
    }
    s = end ? end + 1 : NULL;
  }
  if (!valid_schema(name, name_n)) {
    int rc = dx_error_set(err, DX_EINVAL,
                          "schema name '%.*s' in store URL is not valid (use lower-case "
                          "letters, digits and '_', at most 63, not starting with a digit)",
                          (int)(name_n > 100 ? 100 : name_n), name);
    free(ci);
    return rc;
  }
  if (!(opts = PQconninfoParse(ci, &errmsg))) {
    int rc = dx_error_set(err, DX_EINVAL, "invalid PostgreSQL URL '%s': %s", url,
                          errmsg ? errmsg : "out of memory");
    size_t n = strlen(err ? err->msg : "");
    if (err && n && err->msg[n - 1] == '\n') err->msg[n - 1] = 0;
    PQfreemem(errmsg);
    free(ci);
    return rc;
  }
  PQconninfoFree(opts);
  if (!(sc = malloc(name_n + 1))) {
    free(ci);
    return dx__pg_nomem(err);
  }
  memcpy(sc, name, name_n);
  sc[name_n] = 0;
  *conninfo = ci;
  *schema = sc;
  return 0;
}

int dx__pg_open(const char *url, int no_sync, dx_provider_t **out, dx_error_t *err) {
  pg_t *p;
  PGconn *conn = NULL;
  int rc;
  if (!out) return dx_error_set(err, DX_EINVAL, "out is NULL");
  *out = NULL;
  if (!url) return dx_error_set(err, DX_EINVAL, "store URL is NULL");
  if (!(p = calloc(1, sizeof *p))) return dx__pg_nomem(err);
  p->base.methods = &pg_methods;
  p->no_sync = no_sync;
  p->liveness = 1; /* ?liveness=off turns it off */
  pthread_mutex_init(&p->mu, NULL);
  if (dx__pg_conn_key_init(p)) {
    pthread_mutex_destroy(&p->mu);
    free(p);
    return dx_error_set(err, DX_ENOMEM, "no thread-local key left for a PostgreSQL store");
  }
  if ((rc = parse_url(url, &p->conninfo, &p->schema, &p->liveness, err))) goto fail;
  if (!(p->schema_q = malloc(strlen(p->schema) + 3))) {
    rc = dx__pg_nomem(err);
    goto fail;
  }
  sprintf(p->schema_q, "\"%s\"", p->schema);
  if (!(p->channel_q = malloc(strlen(p->schema) + 6))) {
    rc = dx__pg_nomem(err);
    goto fail;
  }
  sprintf(p->channel_q, "\"dx_%s\"", p->schema);
  if (!(p->live_prefix = malloc(strlen(p->schema) + 10))) {
    rc = dx__pg_nomem(err);
    goto fail;
  }
  sprintf(p->live_prefix, "dx-live:%s:", p->schema);
  snprintf(p->proc_tag, sizeof p->proc_tag, "@%016llx", (unsigned long long)dx__random_u64());
  if ((rc = dx__pg_connect(p->conninfo, p->schema_q, &conn, err))) goto fail;
  rc = dx__pg_migrate(p, conn, err);
  PQfinish(conn);
  if (rc) goto fail;
  *out = &p->base;
  return 0;
fail:
  pg_destroy(&p->base);
  return rc;
}
