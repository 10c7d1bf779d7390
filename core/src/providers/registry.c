/*
** registry.c -- dx_provider_open: the one place that turns a store URL into a provider; and
** dx__provider_same_store, which tells whether two handles name one store.
**
** Every way of naming a store (--store, $DUROXIDE_STORE, configure{store=}, client{store=},
** testing.env{store=}, the C API) ends here, so the engine never names a provider. A URL of
** the form `scheme://...` picks a provider by its scheme (table below); anything else is a
** directory path for the embedded store.
*/
#include <stdio.h>
#include <string.h>

#include "providers/providers.h"
#include "providers/registry.h"
#ifdef DX_HAVE_POSTGRES
#include "providers/pg/pg.h"
#endif

typedef int (*open_fn)(const char *url, const dx_provider_opts_t *opts, dx_provider_t **out,
                       dx_error_t *err);

#ifdef DX_HAVE_POSTGRES
static int open_pg(const char *url, const dx_provider_opts_t *opts, dx_provider_t **out,
                   dx_error_t *err) {
  return dx__pg_open(url, opts->no_sync, out, err);
}
#else
static int open_pg(const char *url, const dx_provider_opts_t *opts, dx_provider_t **out,
                   dx_error_t *err) {
  (void)url;
  (void)opts;
  (void)out;
  return dx_error_set(err, DX_EINVAL, "this build has no PostgreSQL support (rebuild with "
                                      "libpq installed, meson option -Dpostgres=enabled)");
}
#endif

/* URL schemes and the provider each selects. */
static const struct {
  const char *scheme;
  open_fn open;
} schemes[] = {
  {"postgres", open_pg},
  {"postgresql", open_pg},
};

/* Length of the scheme when `url` starts with `scheme://` (RFC 3986 scheme characters), else 0:
** a path such as "./a://b" stays a directory. */
static size_t scheme_len(const char *url) {
  size_t n = 0;
  if (!((url[0] >= 'a' && url[0] <= 'z') || (url[0] >= 'A' && url[0] <= 'Z'))) return 0;
  while (url[n] && (strchr("+-.", url[n]) || (url[n] >= '0' && url[n] <= '9') ||
                    (url[n] >= 'a' && url[n] <= 'z') || (url[n] >= 'A' && url[n] <= 'Z')))
    n++;
  return strncmp(url + n, "://", 3) == 0 ? n : 0;
}

int dx__provider_same_store(dx_provider_t *a, dx_provider_t *b) {
  const char *pa, *pb;
  if (!a || !b || a->methods != b->methods) return 0;
#ifdef DX_HAVE_POSTGRES
  if (dx__pg_same_store(a, b)) return 1;
#endif
  if (a->methods->version < 3 || !a->methods->notify_path) return 0;
  pa = a->methods->notify_path(a);
  pb = b->methods->notify_path(b);
  return pa && pb && strcmp(pa, pb) == 0;
}

int dx_provider_open(const char *url, const dx_provider_opts_t *opts, dx_provider_t **out,
                     dx_error_t *err) {
  static const dx_provider_opts_t defaults = {1, 0, 0, 0};
  size_t i, n;
  if (!out) return dx_error_set(err, DX_EINVAL, "dx_provider_open: out is NULL");
  *out = NULL;
  if (!url || !*url)
    return dx_error_set(err, DX_EINVAL, "store is empty (expected a directory or a "
                                        "postgres:// URL)");
  if (opts && opts->version != 1)
    return dx_error_set(err, DX_EINVAL, "dx_provider_opts_t.version is %d, expected 1",
                        opts->version);
  if (!opts) opts = &defaults;
  if ((n = scheme_len(url)) == 0) return dx__lmdb_open(url, opts, out, err);
  for (i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
    if (strlen(schemes[i].scheme) == n && strncmp(url, schemes[i].scheme, n) == 0)
      return schemes[i].open(url, opts, out, err);
  return dx_error_set(err, DX_EINVAL,
                      "unknown store scheme '%.*s://' (expected a directory, postgres:// or "
                      "postgresql://)", (int)(n > 40 ? 40 : n), url);
}
