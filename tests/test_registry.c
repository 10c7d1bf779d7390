/*
** test_registry.c -- the provider seam: dx_provider_open picks a provider from a store URL,
** refuses bad ones with a message naming the problem, and the clients and runtimes built on
** it (dx_client_open) accept both kinds. PostgreSQL cases run when this build has the
** provider and $DX_TEST_PG names a server (scripts/test starts one).
*/
#include <stdlib.h>
#include <sys/stat.h>

#include "duroxide.h"
#include "testlib.h"

static int open_rc(const char *url, const dx_provider_opts_t *opts, dx_error_t *err) {
  dx_provider_t *p = (dx_provider_t *)1;
  int rc = dx_provider_open(url, opts, &p, err);
  if (rc == 0) {
    ASSERT(p != NULL);
    p->methods->destroy(p);
  } else {
    ASSERT(p == NULL); /* never left dangling on error */
  }
  return rc;
}

DX_TEST(registry_refuses_missing_and_empty_urls) {
  dx_error_t err;
  dx_provider_t *p;
  ASSERT_EQ(open_rc(NULL, NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "store is empty");
  ASSERT_EQ(open_rc("", NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "store is empty");
  ASSERT_EQ(dx_provider_open(dx_test_tmpdir(), NULL, NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "out is NULL");
  ASSERT_EQ(dx_provider_open(NULL, NULL, &p, NULL), DX_EINVAL); /* err may be NULL */
}

DX_TEST(registry_refuses_unknown_schemes_and_creates_nothing) {
  char cwd_store[64];
  struct stat sb;
  dx_error_t err;
  ASSERT_EQ(open_rc("mysql://db.example/x", NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "unknown store scheme 'mysql://'");
  ASSERT_CONTAINS(err.msg, "postgres://");
  ASSERT_EQ(open_rc("file:///tmp/x", NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "'file://'");
  ASSERT_EQ(open_rc("Postgres://h/db", NULL, &err), DX_EINVAL); /* libpq takes lower case only */
  ASSERT_CONTAINS(err.msg, "'Postgres://'");
  /* nothing was created for the refused URLs (a directory store would have been) */
  snprintf(cwd_store, sizeof cwd_store, "mysql:");
  ASSERT(stat(cwd_store, &sb) != 0);
}

DX_TEST(registry_refuses_bad_options) {
  dx_provider_opts_t bad = {2, 0, 0, 0};
  dx_error_t err;
  ASSERT_EQ(open_rc(dx_test_tmpdir(), &bad, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "version is 2");
  bad.version = 0;
  ASSERT_EQ(open_rc(dx_test_tmpdir(), &bad, &err), DX_EINVAL);
}

DX_TEST(registry_opens_a_directory_as_the_embedded_store) {
  char path[512], odd[512];
  dx_provider_opts_t opts = {1, 1, 0, 0};
  dx_provider_t *p = NULL;
  dx_error_t err;
  struct stat sb;
  snprintf(path, sizeof path, "%s/dir-store", dx_test_tmpdir());
  ASSERT_OK(dx_provider_open(path, &opts, &p, &err));
  ASSERT(p && p->methods->version >= 4);
  ASSERT(stat(path, &sb) == 0 && S_ISDIR(sb.st_mode));
  p->methods->destroy(p);
  /* "://" after something that is not a scheme is part of a path */
  snprintf(odd, sizeof odd, "%s/a b://c", dx_test_tmpdir());
  ASSERT_OK(open_rc(odd, NULL, &err));
  ASSERT(stat(odd, &sb) == 0 && S_ISDIR(sb.st_mode));
}

DX_TEST(registry_directory_errors_name_the_store) {
  char path[512];
  FILE *f;
  dx_error_t err;
  snprintf(path, sizeof path, "%s/not-a-dir", dx_test_tmpdir());
  f = fopen(path, "w");
  ASSERT(f);
  fclose(f);
  ASSERT_EQ(open_rc(path, NULL, &err), DX_EIO);
  ASSERT_CONTAINS(err.msg, "not-a-dir");
}

DX_TEST(registry_postgres_urls) {
  const char *pg = getenv("DX_TEST_PG");
  dx_error_t err;
  int rc;
#ifndef DX_HAVE_POSTGRES
  (void)pg;
  rc = open_rc("postgres://localhost/db", NULL, &err);
  ASSERT_EQ(rc, DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "this build has no PostgreSQL support");
  ASSERT_EQ(open_rc("postgresql:///db?host=/tmp", NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "no PostgreSQL support");
#else
  /* a server that is not there: an error naming the problem, not a crash or a hang */
  rc = open_rc("postgresql:///dxtest?host=/nonexistent-dx-socket-dir&connect_timeout=2", NULL,
               &err);
  ASSERT(rc < 0);
  ASSERT(err.msg[0] != '\0');
  if (pg && *pg) {
    dx_provider_t *p = NULL;
    ASSERT_OK(dx_provider_open(pg, NULL, &p, &err));
    ASSERT(p && p->methods->version >= 4);
    p->methods->destroy(p);
  }
#endif
}

/* The client API goes through the same seam. */
DX_TEST(registry_client_open_accepts_both_kinds) {
  char path[512];
  dx_client_t *c = NULL;
  dx_instance_info_t info;
  dx_error_t err;
  const char *pg = getenv("DX_TEST_PG");
  snprintf(path, sizeof path, "%s/client-store", dx_test_tmpdir());
  ASSERT_OK(dx_client_open(&c, path, &err));
  ASSERT_OK(dx_client_start(c, "i1", "Orch", NULL, NULL, &err));
  ASSERT_EQ(dx_client_start(c, "i1", "Orch", NULL, NULL, &err), DX_EEXIST);
  ASSERT_CONTAINS(err.msg, "'i1' already exists");
  memset(&info, 0, sizeof info);
  ASSERT_OK(dx_client_status(c, "i1", &info, &err));
  dx_instance_info_clear(&info);
  dx_client_close(c);
  ASSERT_EQ(dx_client_open(&c, "redis://x", &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "'redis://'");
  if (pg && *pg) {
#ifdef DX_HAVE_POSTGRES
    ASSERT_OK(dx_client_open(&c, pg, &err));
    dx_client_close(c);
#endif
  }
}

