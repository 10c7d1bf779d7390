/*
** test_provider_pg.c -- the provider validation suite on PostgreSQL, plus PostgreSQL-only
** behaviour: open errors, schema versions, concurrent migrations, tenants, fork safety,
** reconnection, session capacity across processes.
**
** Needs $DX_TEST_PG, a libpq URL of a database the tests may create schemas in (see
** tests/pg_server.sh); without it the program prints a TAP skip plan. Every store is a fresh
** schema t_<pid>_<n>, dropped when the test process exits.
**
** This file: the schemas, the validation hooks, helpers shared (test_provider_pg.h) with
** test_provider_pg_cycle.c (a store cycle's round trips and reads), the PostgreSQL-only tests.
*/
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <time.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "providers/pg/pg.h"
#include "providers/pg/pg_sql.h"
#include "test_provider_pg.h"
#include "testlib.h"

#define T0 INT64_C(1700000000000)
#define M(p) ((p)->methods)

static const char *base_url(void) { return getenv("DX_TEST_PG"); }

__attribute__((constructor)) static void skip_without_server(void) {
  if (!base_url() || !*base_url()) {
    printf("1..0 # SKIP DX_TEST_PG is not set (tests/pg_server.sh start prints one)\n");
    fflush(stdout);
    _exit(0);
  }
}

/* {===== schemas =====} */

char g_schemas[64][40];
int g_nschemas;
static pid_t g_owner_pid;
char g_role[48]; /* a login role a test made (dropped at exit, before the schemas) */

PGconn *admin(void) {
  PGconn *c = PQconnectdb(base_url());
  if (PQstatus(c) != CONNECTION_OK) DX_FAIL_AT("connect %s: %s", base_url(), PQerrorMessage(c));
  return c;
}

void sql(PGconn *c, const char *q) {
  PGresult *r = PQexec(c, q);
  if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
    DX_FAIL_AT("%s: %s", q, PQresultErrorMessage(r));
  PQclear(r);
}

static void drop_schemas(void) {
  PGconn *c;
  char q[128];
  int i;
  if (getpid() != g_owner_pid || !g_nschemas) return;
  c = PQconnectdb(base_url());
  PQclear(PQexec(c, "SET client_min_messages TO warning; SET lock_timeout TO '5s'"));
  if (g_role[0]) {
    snprintf(q, sizeof q, "DROP OWNED BY %s; DROP ROLE %s", g_role, g_role);
    PQclear(PQexec(c, q));
  }
  for (i = 0; i < g_nschemas && PQstatus(c) == CONNECTION_OK; i++) {
    snprintf(q, sizeof q, "DROP SCHEMA IF EXISTS %s CASCADE", g_schemas[i]);
    PQclear(PQexec(c, q));
  }
  PQfinish(c);
}

/* A new schema name and the store URL that selects it. */
char *store_url(const char *extra) {
  static int n;
  char buf[1024];
  const char *u = base_url();
  if (!g_nschemas && !g_owner_pid) {
    g_owner_pid = getpid();
    atexit(drop_schemas);
  }
  ASSERT(g_nschemas < 64);
  snprintf(g_schemas[g_nschemas], sizeof g_schemas[0], "t_%d_%d", (int)getpid(), ++n);
  snprintf(buf, sizeof buf, "%s%sschema=%s%s", u, strchr(u, '?') ? "&" : "?",
           g_schemas[g_nschemas], extra ? extra : "");
  g_nschemas++;
  return strdup(buf);
}

/* {===== validation hooks =====} */

char *dx_pv_new_store(void) { return store_url(NULL); }

dx_provider_t *dx_pv_open(const char *store) {
  dx_provider_t *p = NULL;
  dx_error_t err;
  int rc = dx__pg_open(store, 1, &p, &err);
  if (rc) DX_FAIL_AT("dx__pg_open(%s): %s: %s", store, dx_err_name(rc), err.msg);
  return p;
}

int dx_pv_corrupt_history(dx_provider_t *p, const char *instance, uint64_t execution_id,
                          uint64_t event_id) {
  return M(p)->test_hooks->corrupt_history(p, instance, execution_id, event_id);
}

int dx_pv_multi_process(void) { return 1; }

/* Every table of the store's schema, each row as text (bytea columns as hex: instance and
** session ids live in text columns of every table that names them). */
uint64_t dx_pv_rows_naming(const char *store, const char *text) {
  const char *sch = strstr(store, "schema=");
  char schema[64], q[512];
  PGconn *c = admin();
  PGresult *tables;
  uint64_t hits = 0;
  int i;
  ASSERT(sch);
  snprintf(schema, sizeof schema, "%.*s", (int)strcspn(sch + 7, "&"), sch + 7);
  snprintf(q, sizeof q, "SELECT table_name FROM information_schema.tables WHERE table_schema = "
           "'%s' AND table_type = 'BASE TABLE'", schema);
  tables = PQexec(c, q);
  ASSERT(PQresultStatus(tables) == PGRES_TUPLES_OK);
  ASSERT(PQntuples(tables) > 0);
  for (i = 0; i < PQntuples(tables); i++) {
    const char *params[1] = {text};
    PGresult *r;
    snprintf(q, sizeof q, "SELECT count(*) FROM %s.%s t WHERE strpos(t::text, $1) > 0", schema,
             PQgetvalue(tables, i, 0));
    r = PQexecParams(c, q, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) DX_FAIL_AT("%s: %s", q, PQresultErrorMessage(r));
    if (atoll(PQgetvalue(r, 0, 0)) > 0)
      fprintf(stderr, "# %s names '%s'\n", PQgetvalue(tables, i, 0), text);
    hits += (uint64_t)atoll(PQgetvalue(r, 0, 0));
    PQclear(r);
  }
  PQclear(tables);
  PQfinish(c);
  return hits;
}

/* {===== helpers =====} */

dx_work_item_t item(int kind, const char *inst, uint64_t id) {
  dx_work_item_t w;
  memset(&w, 0, sizeof w);
  w.kind = kind;
  w.instance = (char *)inst;
  w.execution_id = 1;
  w.id = id;
  w.name = "Orch";
  w.data = "1";
  return w;
}

uint64_t orch_depth(dx_provider_t *p) {
  dx_queue_depths_t d;
  dx_error_t err;
  ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
  return d.orchestrator;
}

/* {===== PostgreSQL-only tests =====} */

DX_TEST(pg_open_errors_are_clear) {
  dx_provider_t *p = (dx_provider_t *)1;
  dx_error_t err;
  char url[1024];
  ASSERT_EQ(dx__pg_open("/tmp/some/dir", 0, &p, &err), DX_EINVAL);
  ASSERT(p == NULL);
  ASSERT_CONTAINS(err.msg, "not a PostgreSQL URL");
  ASSERT_EQ(dx__pg_open("postgresql://h/db?schema=Bad-Name", 0, &p, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "Bad-Name");
  ASSERT_EQ(dx__pg_open("postgresql://h/db?schema=x;drop", 0, &p, &err), DX_EINVAL);
  ASSERT_EQ(dx__pg_open("postgresql://h/db?no_such_option=1", 0, &p, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "invalid PostgreSQL URL");
  ASSERT_EQ(dx__pg_open("postgresql:///db?host=/nonexistent-dx-dir", 0, &p, &err), DX_EIO);
  ASSERT_CONTAINS(err.msg, "cannot connect to PostgreSQL");
  ASSERT_CONTAINS(err.msg, "/nonexistent-dx-dir");
  snprintf(url, sizeof url, "%s", base_url());
  {
    char *u = strstr(url, "user=");
    ASSERT(u);
    snprintf(u, sizeof url - (size_t)(u - url), "user=no_such_role_dx");
  }
  ASSERT_EQ(dx__pg_open(url, 0, &p, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "no_such_role_dx");
  ASSERT_EQ(dx__pg_open(NULL, 0, &p, &err), DX_EINVAL);
  ASSERT(p == NULL);
}

DX_TEST(pg_newer_schema_version_is_refused) {
  char *store = dx_pv_new_store(), q[256];
  dx_provider_t *p = dx_pv_open(store);
  PGconn *c = admin();
  dx_error_t err;
  M(p)->destroy(p);
  snprintf(q, sizeof q, "INSERT INTO %s.dx_migrations (version, name) VALUES (999, 'future')",
           g_schemas[g_nschemas - 1]);
  sql(c, q);
  PQfinish(c);
  p = (dx_provider_t *)1;
  ASSERT_EQ(dx__pg_open(store, 0, &p, &err), DX_ESTATE);
  ASSERT(p == NULL);
  ASSERT_CONTAINS(err.msg, "version 999");
  ASSERT_CONTAINS(err.msg, "newer");
  free(store);
}

DX_TEST(pg_reopen_keeps_data_and_migrates_once) {
  char *store = dx_pv_new_store(), q[256];
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t w = item(DX_WI_START, "A", 0);
  dx_error_t err;
  PGconn *c;
  PGresult *r;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  M(p)->destroy(p);
  p = dx_pv_open(store);
  ASSERT_EQ(orch_depth(p), 1);
  M(p)->destroy(p);
  c = admin();
  snprintf(q, sizeof q, "SELECT count(*) FROM %s.dx_migrations", g_schemas[g_nschemas - 1]);
  r = PQexec(c, q);
  ASSERT_EQ(atoi(PQgetvalue(r, 0, 0)), dx__pg_migration_count);
  PQclear(r);
  PQfinish(c);
  free(store);
}

DX_TEST(pg_concurrent_first_opens_migrate_once) {
  char *store = dx_pv_new_store(), q[256];
  pid_t pids[4];
  PGconn *c;
  PGresult *r;
  int i, status;
  for (i = 0; i < 4; i++) {
    ASSERT((pids[i] = fork()) >= 0);
    if (pids[i] == 0) {
      dx_provider_t *p = NULL;
      dx_error_t err;
      dx_work_item_t w = item(DX_WI_EXTERNAL, "A", 0);
      if (dx__pg_open(store, 1, &p, &err)) _exit(1);
      if (M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err)) _exit(2);
      M(p)->destroy(p);
      _exit(0);
    }
  }
  for (i = 0; i < 4; i++) {
    ASSERT(waitpid(pids[i], &status, 0) == pids[i]);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  c = admin();
  snprintf(q, sizeof q, "SELECT (SELECT count(*) FROM %s.dx_migrations),"
           " (SELECT count(*) FROM %s.orch_msgs)", g_schemas[g_nschemas - 1],
           g_schemas[g_nschemas - 1]);
  r = PQexec(c, q);
  ASSERT_EQ(atoi(PQgetvalue(r, 0, 0)), dx__pg_migration_count);
  ASSERT_STR_EQ(PQgetvalue(r, 0, 1), "4");
  PQclear(r);
  PQfinish(c);
  free(store);
}

DX_TEST(pg_schemas_are_separate_stores) {
  char *s1 = dx_pv_new_store(), *s2 = dx_pv_new_store();
  dx_provider_t *a = dx_pv_open(s1), *b = dx_pv_open(s2);
  dx_work_item_t w = item(DX_WI_START, "A", 0);
  dx_error_t err;
  ASSERT_OK(M(a)->enqueue_for_orchestrator(a, T0, &w, 0, &err));
  ASSERT_EQ(orch_depth(a), 1);
  ASSERT_EQ(orch_depth(b), 0);
  M(a)->destroy(a);
  M(b)->destroy(b);
  free(s1);
  free(s2);
}

DX_TEST(pg_forked_child_never_closes_the_parents_connection) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t w = item(DX_WI_EXTERNAL, "A", 0);
  dx_error_t err;
  pid_t pid;
  int status;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err)); /* connection made */
  ASSERT_OK(M(p)->begin(p, &err));                              /* and a batch open */
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  fflush(NULL);
  ASSERT((pid = fork()) >= 0);
  if (pid == 0) { /* the child uses the inherited handle: it gets its own connection */
    dx_work_item_t c = item(DX_WI_EXTERNAL, "child", 0);
    int rc = M(p)->enqueue_for_orchestrator(p, T0, &c, 0, &err);
    M(p)->destroy(p);
    _exit(rc == 0 ? 0 : 1);
  }
  ASSERT(waitpid(pid, &status, 0) == pid);
  ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err)); /* still in our batch */
  ASSERT_OK(M(p)->commit(p, 1, &err));
  ASSERT_EQ(orch_depth(p), 4);
  M(p)->destroy(p);
  free(store);
}

static void kill_backends(const char *app) {
  PGconn *c = admin();
  char q[256];
  snprintf(q, sizeof q,
           "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = '%s'",
           app);
  sql(c, q);
  PQfinish(c);
}

/* A store URL whose connections carry application_name TAG_<pid> (written to app), so a test
** can find and terminate exactly its own backends. Caller frees the URL. */
static char *store_for_app(const char *tag, char *app, size_t n) {
  char extra[96];
  snprintf(app, n, "%s_%d", tag, (int)getpid());
  snprintf(extra, sizeof extra, "&application_name=%s", app);
  return store_url(extra);
}

DX_TEST(pg_reconnects_after_connection_loss) {
  char app[64], *store;
  dx_provider_t *p;
  dx_work_item_t w = item(DX_WI_EXTERNAL, "A", 0);
  dx_error_t err;
  int rc;
  store = store_for_app("dxkill", app, sizeof app);
  p = dx_pv_open(store);
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  kill_backends(app);
  rc = M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err); /* may notice the loss */
  if (rc) {
    ASSERT_EQ(rc, DX_ERETRY);
    ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err)); /* reconnected */
  }
  /* inside a batch: the batch fails as a whole with DX_ERETRY, then work goes on */
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  kill_backends(app);
  rc = M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err); /* writes are queued: the loss */
  ASSERT(rc == 0 || rc == DX_ERETRY);                      /* may show only at commit */
  ASSERT_EQ(M(p)->commit(p, 1, &err), DX_ERETRY);
  ASSERT_EQ(orch_depth(p), 2); /* the batch's enqueue was rolled back */
  M(p)->destroy(p);
  free(store);
}

/* Several processes fetch session work at once under the same worker id with
** max_sessions = 1: exactly one session is ever claimed. */
enum { CAP_SESSIONS = 8, CAP_PER_SESSION = 5, CAP_PROCS = 4 };

static atomic_int *g_claims;

/* Start `inst` and commit its first turn: a running instance (its sessions keep their slot). */
void running_instance(dx_provider_t *p, const char *inst) {
  dx_work_item_t w = item(DX_WI_START, inst, 0);
  dx_orch_item_t *it = NULL;
  dx_event_t ev;
  dx_orch_ack_t a;
  dx_error_t err;
  w.name = "Orch";
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, dx_pv_wall_ms(), &w, 0, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, dx_pv_wall_ms(), 30000, &it, &err));
  ASSERT(it);
  memset(&ev, 0, sizeof ev);
  ev.kind = DX_EV_ORCH_STARTED;
  ev.event_id = 1;
  ev.name = "Orch";
  ev.data = "null";
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = it->execution_id;
  a.orchestration_name = "Orch";
  a.delta = &ev;
  a.delta_len = 1;
  ASSERT_OK(M(p)->ack_orchestration_item(p, dx_pv_wall_ms(), &a, &err));
  dx_orch_item_free(it);
}

DX_TEST(pg_session_capacity_holds_across_processes) {
  char *store = dx_pv_new_store(), sid[16];
  dx_provider_t *p = dx_pv_open(store);
  dx_error_t err;
  pid_t pids[CAP_PROCS];
  int i, j, status, owned = 0;
  g_claims = mmap(NULL, sizeof *g_claims, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
  ASSERT(g_claims != MAP_FAILED);
  atomic_store(g_claims, 0);
  running_instance(p, "I");
  ASSERT_OK(M(p)->begin(p, &err));
  for (i = 0; i < CAP_SESSIONS; i++)
    for (j = 0; j < CAP_PER_SESSION; j++) {
      dx_work_item_t w = item(DX_WI_ACT_EXECUTE, "I", (uint64_t)(i * 100 + j));
      snprintf(sid, sizeof sid, "s%d", i);
      w.session_id = sid;
      ASSERT_OK(M(p)->enqueue_for_worker(p, dx_pv_wall_ms(), &w, &err));
    }
  ASSERT_OK(M(p)->commit(p, 1, &err));
  M(p)->destroy(p);
  fflush(NULL);
  for (i = 0; i < CAP_PROCS; i++) {
    ASSERT((pids[i] = fork()) >= 0);
    if (pids[i] == 0) {
      dx_provider_t *c = dx_pv_open(store);
      dx_session_cfg_t cfg = {.worker_id = "same-worker", .session_lock_ms = 600000,
                              .max_sessions = 1};
      int empty = 0;
      while (empty < 20) {
        dx_work_fetch_t f;
        if (M(c)->fetch_work_item(c, dx_pv_wall_ms(), 600000, &cfg, &f, &err)) _exit(1);
        if (f.item.kind == 0) {
          empty++;
          usleep(1000);
          continue;
        }
        empty = 0;
        if (f.session_claimed) atomic_fetch_add(g_claims, 1);
        if (M(c)->ack_work_item(c, dx_pv_wall_ms(), f.lock_token, NULL, &err)) _exit(2);
        dx_work_item_clear(&f.item);
        free(f.previous_owner);
      }
      M(c)->destroy(c);
      _exit(0);
    }
  }
  for (i = 0; i < CAP_PROCS; i++) {
    ASSERT(waitpid(pids[i], &status, 0) == pids[i]);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  ASSERT_EQ(atomic_load(g_claims), 1);
  p = dx_pv_open(store);
  {
    dx_queue_depths_t d;
    ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
    ASSERT_EQ(d.worker, (CAP_SESSIONS - 1) * CAP_PER_SESSION); /* one session drained */
  }
  (void)owned;
  M(p)->destroy(p);
  free(store);
}

/* Clients in several processes START the same ids at once: each id is started exactly once,
** the others get DX_EEXIST (the uniqueness check is in the store, not a read first). */
enum { RACE_IDS = 40, RACE_PROCS = 4 };

DX_TEST(pg_racing_starts_of_one_id_start_it_once) {
  char *store = dx_pv_new_store();
  atomic_int *wins = mmap(NULL, sizeof(atomic_int) * RACE_IDS, PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  dx_provider_t *p = dx_pv_open(store);
  pid_t pids[RACE_PROCS];
  int i, status;
  ASSERT(wins != MAP_FAILED);
  for (i = 0; i < RACE_IDS; i++) atomic_store(&wins[i], 0);
  M(p)->destroy(p);
  fflush(NULL);
  for (i = 0; i < RACE_PROCS; i++) {
    ASSERT((pids[i] = fork()) >= 0);
    if (pids[i] == 0) {
      dx_provider_t *c = dx_pv_open(store);
      dx_error_t err;
      char id[16];
      int k, rc;
      for (k = 0; k < RACE_IDS; k++) {
        dx_work_item_t w = item(DX_WI_START, id, 0);
        snprintf(id, sizeof id, "r%d", k);
        rc = M(c)->enqueue_for_orchestrator(c, T0, &w, 0, &err);
        if (rc == 0) atomic_fetch_add(&wins[k], 1);
        else if (rc != DX_EEXIST) _exit(1);
      }
      M(c)->destroy(c);
      _exit(0);
    }
  }
  for (i = 0; i < RACE_PROCS; i++) {
    ASSERT(waitpid(pids[i], &status, 0) == pids[i]);
    ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  for (i = 0; i < RACE_IDS; i++) ASSERT_EQ(atomic_load(&wins[i]), 1);
  p = dx_pv_open(store);
  ASSERT_EQ(orch_depth(p), RACE_IDS);
  M(p)->destroy(p);
  free(store);
}

static int readable(int fd, int timeout_ms) {
  struct pollfd pf = {fd, POLLIN, 0};
  return poll(&pf, 1, timeout_ms) == 1 && (pf.revents & POLLIN);
}

/* A commit that made work visible wakes a listener at once (LISTEN/NOTIFY); draining consumes
** the wake-up; a lost listener says so. */
DX_TEST(pg_wake_fd_becomes_readable_on_committed_work) {
  char app[64], *store;
  dx_provider_t *p, *q;
  dx_work_item_t w = item(DX_WI_EXTERNAL, "A", 0);
  dx_error_t err;
  int fd, lost = 7, i, rc = 0;
  store = store_for_app("dxwake", app, sizeof app);
  p = dx_pv_open(store);
  q = dx_pv_open(store);
  ASSERT(M(p)->version >= 4 && M(p)->wake_fd && M(p)->wake_drain);
  fd = M(p)->wake_fd(p);
  ASSERT(fd >= 0);
  ASSERT_EQ(M(p)->wake_fd(p), fd); /* one listener per handle */
  ASSERT_OK(M(q)->enqueue_for_orchestrator(q, T0, &w, 0, &err));
  ASSERT(readable(fd, 10000));
  ASSERT_OK(M(p)->wake_drain(p, &lost));
  ASSERT_EQ(lost, 0);
  ASSERT(!readable(fd, 0));
  ASSERT_OK(M(q)->begin(q, &err)); /* a batch notifies once, at commit */
  ASSERT_OK(M(q)->enqueue_for_orchestrator(q, T0, &w, 0, &err));
  ASSERT_OK(M(q)->commit(q, 1, &err));
  ASSERT(readable(fd, 10000));
  ASSERT_OK(M(p)->wake_drain(p, &lost));
  kill_backends(app); /* the listener's connection goes away: the server's goodbye, then EOF */
  for (i = 0; i < 10 && rc == 0; i++) {
    ASSERT(readable(fd, 10000));
    rc = M(p)->wake_drain(p, &lost);
  }
  ASSERT(rc < 0);
  ASSERT_EQ(lost, 1);
  M(q)->destroy(q);
  M(p)->destroy(p);
  free(store);
}

/* A server restart closes every connection: a read on a handle whose connection the server
** closed just works (the loss is noticed, the read reconnects and runs again). */
DX_TEST(pg_reads_survive_a_closed_connection) {
  char app[64], *store;
  dx_provider_t *p;
  dx_work_item_t w = item(DX_WI_START, "A", 0);
  dx_instance_info_t info;
  dx_error_t err;
  int i;
  store = store_for_app("dxread", app, sizeof app);
  p = dx_pv_open(store);
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &err));
  for (i = 0; i < 3; i++) {
    kill_backends(app);
    ASSERT_OK(M(p)->get_instance_info(p, "A", &info, &err));
    ASSERT_STR_EQ(info.instance_id, "A");
    dx_instance_info_clear(&info);
  }
  M(p)->destroy(p);
  free(store);
}

/* A deadlock with another transaction fails the batch with DX_ERETRY (the store thread then
** retries it whole), naming SQLSTATE 40P01. The other side waits longer before it looks for
** deadlocks, so the provider's backend is the one that gives up. */
DX_TEST(pg_deadlock_fails_the_batch_with_eretry) {
  char *store = dx_pv_new_store(), q[256];
  const char *schema = g_schemas[g_nschemas - 1];
  dx_provider_t *p = dx_pv_open(store);
  dx_work_item_t a = item(DX_WI_START, "A", 0), b = item(DX_WI_START, "B", 0);
  dx_work_item_t raise_b = item(DX_WI_EXTERNAL, "B", 0);
  dx_orch_item_t *it = NULL;
  PGconn *c = admin();
  PGresult *r;
  dx_error_t err;
  int rc;
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0, &a, 0, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0 + 1, &b, 60000, &err)); /* B: not due yet */
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 2, 30000, &it, &err)); /* locks A's row */
  ASSERT(it && strcmp(it->instance, "A") == 0);
  sql(c, "BEGIN");
  sql(c, "SET LOCAL deadlock_timeout = '20s'");
  snprintf(q, sizeof q, "SELECT 1 FROM %s.orch_queue WHERE instance_id = 'B' FOR UPDATE", schema);
  sql(c, q);
  snprintf(q, sizeof q, "SELECT 1 FROM %s.orch_queue WHERE instance_id = 'A' FOR UPDATE", schema);
  ASSERT(PQsendQuery(c, q)); /* waits for the provider's lock on A */
  rc = M(p)->enqueue_for_orchestrator(p, T0 + 3, &raise_b, 0, &err); /* waits for B: deadlock */
  if (rc == 0) rc = M(p)->commit(p, 1, &err);
  else M(p)->rollback(p);
  ASSERT_EQ(rc, DX_ERETRY);
  ASSERT_CONTAINS(err.msg, "40P01");
  while ((r = PQgetResult(c)) != NULL) PQclear(r); /* the other side got A */
  sql(c, "ROLLBACK");
  PQfinish(c);
  dx_orch_item_free(it);
  it = NULL;
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 4, 30000, &it, &err)); /* nothing kept */
  ASSERT(it && strcmp(it->instance, "A") == 0 && it->attempt_count == 1);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

/* A fetch inside a batch may lock several instances ahead; the ones it did not hand out
** before the commit are released by it, as if never fetched (no attempt spent). */
DX_TEST(pg_batch_fetch_releases_what_it_did_not_hand_out) {
  char *store = dx_pv_new_store(), id[8];
  dx_provider_t *p = dx_pv_open(store);
  dx_orch_item_t *it = NULL, *again[5];
  dx_error_t err;
  int i;
  for (i = 0; i < 5; i++) {
    dx_work_item_t w = item(DX_WI_START, id, 0);
    snprintf(id, sizeof id, "i%d", i);
    ASSERT_OK(M(p)->enqueue_for_orchestrator(p, T0 + i, &w, 0, &err));
  }
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 10, 30000, &it, &err));
  ASSERT(it && strcmp(it->instance, "i0") == 0);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  for (i = 0; i < 4; i++) { /* the other four: fetchable now, first attempt */
    ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 11, 30000, &again[i], &err));
    ASSERT(again[i] != NULL);
    snprintf(id, sizeof id, "i%d", i + 1);
    ASSERT_STR_EQ(again[i]->instance, id);
    ASSERT_EQ(again[i]->attempt_count, 1);
  }
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 11, 30000, &again[4], &err));
  ASSERT(again[4] == NULL); /* i0 is still locked by the batch's fetch */
  for (i = 0; i < 4; i++) dx_orch_item_free(again[i]);
  dx_orch_item_free(it);
  /* a rolled back batch keeps nothing either */
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 40000, 30000, &it, &err));
  ASSERT(it != NULL);
  M(p)->rollback(p);
  dx_orch_item_free(it);
  ASSERT_OK(M(p)->fetch_orchestration_item(p, T0 + 40000, 30000, &it, &err));
  ASSERT(it && strcmp(it->instance, "i0") == 0 && it->attempt_count == 2);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}

/* Several processes run whole workflows on one schema at once, per-call transactions under
** READ COMMITTED: every turn schedules an activity and sends a message to the next instance,
** every activity completion enqueues the next turn. No instance is ever held twice, every
** instance finishes, nothing is left queued (an enqueue that raced a release would leave a
** message no fetch ever sees), and no fetch hands out a history older than its lock (no turn
** refused as a duplicate). A call that fails with DX_ERETRY changed nothing: it is retried. */
enum { ST_INST = 40, ST_TURNS = 10, ST_PROCS = 4 };

typedef struct {
  atomic_int holders[ST_INST];
  atomic_int violations, finished, retries, stale;
} stress_t;

static stress_t *g_st;

static int retry_call(int rc) {
  if (rc == DX_ERETRY) atomic_fetch_add(&g_st->retries, 1);
  return rc == DX_ERETRY;
}

static void stress_child(const char *store) {
  dx_provider_t *p = dx_pv_open(store);
  dx_error_t err;
  int64_t deadline = dx_pv_wall_ms() + 90000;
  int idle = 0, rc;
  while (dx_pv_wall_ms() < deadline) {
    dx_orch_item_t *it = NULL;
    dx_work_fetch_t f;
    int did = 0;
    while (retry_call(rc = M(p)->fetch_orchestration_item(p, dx_pv_wall_ms(), 60000, &it, &err))) {}
    if (rc) _exit(10);
    if (it) {
      int i = atoi(it->instance + 1), last;
      dx_event_t ev;
      dx_work_item_t act, note;
      char next[16];
      dx_orch_ack_t a;
      if (atomic_fetch_add(&g_st->holders[i], 1) != 0) atomic_fetch_add(&g_st->violations, 1);
      memset(&a, 0, sizeof a);
      memset(&ev, 0, sizeof ev);
      ev.event_id = it->history_len + 1;
      ev.kind = ev.event_id == 1 ? DX_EV_ORCH_STARTED : DX_EV_EXT_EVENT;
      ev.name = "e";
      ev.data = "{}";
      last = ev.event_id >= ST_TURNS;
      act = item(DX_WI_ACT_EXECUTE, it->instance, ev.event_id);
      snprintf(next, sizeof next, "i%d", (i + 1) % ST_INST);
      note = item(DX_WI_EXTERNAL, next, 0);
      a.instance = it->instance;
      a.lock_token = it->lock_token;
      a.execution_id = 1;
      a.delta = &ev;
      a.delta_len = 1;
      a.orchestration_name = "Orch";
      a.worker_items = &act;
      a.worker_items_len = !last;
      a.orch_items = &note;
      a.orch_items_len = !last;
      atomic_fetch_sub(&g_st->holders[i], 1);
      while (retry_call(rc = M(p)->ack_orchestration_item(p, dx_pv_wall_ms(), &a, &err))) {}
      if (rc == DX_EEXIST) {
        /* a turn refused as a duplicate: the fetch handed out a history older than its lock
        ** (READ COMMITTED: the lock follows the row's newest version, reads see the
        ** statement's snapshot; ORCH_FETCH puts such an instance back). Nothing was written:
        ** put it back and turn it again, as the runtime does, and fail the test below. */
        atomic_fetch_add(&g_st->stale, 1);
        while (retry_call(rc = M(p)->abandon_orchestration_item(p, dx_pv_wall_ms(), it->instance,
                                                                it->lock_token, 0, 1, &err))) {}
        if (rc) _exit(14);
        dx_orch_item_free(it);
        continue;
      }
      if (rc) {
        fprintf(stderr, "# ack %s: %s\n", it->instance, err.msg);
        _exit(11);
      }
      if (ev.event_id == ST_TURNS) atomic_fetch_add(&g_st->finished, 1);
      dx_orch_item_free(it);
      did = 1;
    }
    while (retry_call(rc = M(p)->fetch_work_item(p, dx_pv_wall_ms(), 60000, NULL, &f, &err))) {}
    if (rc) _exit(12);
    if (f.item.kind) {
      dx_work_item_t done_item = item(DX_WI_ACT_COMPLETED, f.item.instance, f.item.id);
      while (retry_call(rc = M(p)->ack_work_item(p, dx_pv_wall_ms(), f.lock_token, &done_item,
                                                 &err))) {}
      if (rc) _exit(13);
      dx_work_item_clear(&f.item);
      did = 1;
    }
    if (did) {
      idle = 0;
      continue;
    }
    if (atomic_load(&g_st->finished) >= ST_INST && ++idle > 50) {
      dx_queue_depths_t d;
      if (M(p)->get_queue_depths(p, &d, &err) == 0 && d.orchestrator == 0 && d.worker == 0) break;
    }
    usleep(1000);
  }
  M(p)->destroy(p);
  _exit(0);
}

DX_TEST(pg_processes_running_workflows_lose_nothing) {
  char *store = dx_pv_new_store(), id[16];
  dx_provider_t *p = dx_pv_open(store);
  dx_queue_depths_t d;
  dx_error_t err;
  pid_t pids[ST_PROCS];
  int i, status;
  int64_t due;
  g_st = mmap(NULL, sizeof *g_st, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT(g_st != MAP_FAILED);
  memset(g_st, 0, sizeof *g_st);
  for (i = 0; i < ST_INST; i++) {
    dx_work_item_t w = item(DX_WI_START, id, 0);
    snprintf(id, sizeof id, "i%d", i);
    ASSERT_OK(M(p)->enqueue_for_orchestrator(p, dx_pv_wall_ms(), &w, 0, &err));
  }
  M(p)->destroy(p);
  fflush(NULL);
  for (i = 0; i < ST_PROCS; i++) {
    ASSERT((pids[i] = fork()) >= 0);
    if (pids[i] == 0) stress_child(store);
  }
  for (i = 0; i < ST_PROCS; i++) {
    ASSERT(waitpid(pids[i], &status, 0) == pids[i]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) DX_FAIL_AT("child %d: status %d", i, status);
  }
  ASSERT_EQ(atomic_load(&g_st->violations), 0);
  ASSERT_EQ(atomic_load(&g_st->finished), ST_INST);
  p = dx_pv_open(store);
  for (i = 0; i < ST_INST; i++) {
    dx_event_t *ev;
    size_t n;
    snprintf(id, sizeof id, "i%d", i);
    ASSERT_OK(M(p)->read_history(p, id, 0, &ev, &n, NULL, &err));
    ASSERT(n >= ST_TURNS);
    dx_events_free(ev, n);
  }
  ASSERT_OK(M(p)->get_queue_depths(p, &d, &err));
  ASSERT_EQ(d.orchestrator, 0);
  ASSERT_EQ(d.worker, 0);
  ASSERT_OK(M(p)->next_due_ms(p, dx_pv_wall_ms(), &due, &err));
  ASSERT_EQ(due, INT64_MAX); /* no queue row left behind either */
  printf("# %d calls retried after DX_ERETRY, %d turns refused on a stale history\n",
         atomic_load(&g_st->retries), atomic_load(&g_st->stale));
  ASSERT_EQ(atomic_load(&g_st->stale), 0);
  M(p)->destroy(p);
  free(store);
}

/* Liveness is not trusted in the first seconds after a server (re)start (the restart grace):
** tests of dead-owner takeover wait until the server has been up for 6 s. */
static void wait_out_liveness_grace(void) {
  PGconn *c = admin();
  PGresult *r = PQexec(c, "SELECT extract(epoch from clock_timestamp() -"
                          " pg_postmaster_start_time())");
  double up = atof(PQgetvalue(r, 0, 0));
  PQclear(r);
  PQfinish(c);
  if (up < 6) usleep((useconds_t)((6 - up) * 1e6));
}

/* ?liveness=on: a session whose owner process died (SIGKILL) is claimable at once by another
** worker, long before its lease (10 min here) lapses; while the owner lives it is not. */
DX_TEST(pg_liveness_moves_a_dead_owners_session_at_once) {
  char *store = store_url("&liveness=on"), buf[4];
  dx_provider_t *p = dx_pv_open(store);
  dx_session_cfg_t cfg_b = {.worker_id = "B", .session_lock_ms = 600000, .max_sessions = 10};
  dx_work_item_t w1 = item(DX_WI_ACT_EXECUTE, "I", 1), w2 = item(DX_WI_ACT_EXECUTE, "I", 2);
  dx_work_fetch_t f;
  dx_error_t err;
  int fds[2], status, i;
  pid_t pid;
  w1.session_id = w2.session_id = "s1";
  ASSERT_OK(M(p)->enqueue_for_worker(p, dx_pv_wall_ms(), &w1, &err));
  wait_out_liveness_grace();
  ASSERT(pipe(fds) == 0);
  fflush(NULL);
  ASSERT((pid = fork()) >= 0);
  if (pid == 0) { /* worker A: claims s1, finishes item 1, then idles holding the session */
    dx_provider_t *a = dx_pv_open(store);
    dx_session_cfg_t cfg_a = {.worker_id = "A", .session_lock_ms = 600000,
                              .max_sessions = 10};
    if (M(a)->fetch_work_item(a, dx_pv_wall_ms(), 600000, &cfg_a, &f, &err) || f.item.id != 1 ||
        M(a)->ack_work_item(a, dx_pv_wall_ms(), f.lock_token, NULL, &err))
      _exit(1);
    if (write(fds[1], "x", 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(fds[1]);
  ASSERT(read(fds[0], buf, 1) == 1);
  close(fds[0]);
  ASSERT_OK(M(p)->enqueue_for_worker(p, dx_pv_wall_ms(), &w2, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, dx_pv_wall_ms(), 600000, &cfg_b, &f, &err));
  ASSERT_EQ(f.item.kind, 0); /* A lives: its session stays A's */
  kill(pid, SIGKILL);
  ASSERT(waitpid(pid, &status, 0) == pid);
  for (i = 0; i < 100; i++) { /* the server notices the closed connection within moments */
    ASSERT_OK(M(p)->fetch_work_item(p, dx_pv_wall_ms(), 600000, &cfg_b, &f, &err));
    if (f.item.kind) break;
    usleep(100 * 1000);
  }
  ASSERT_EQ(f.item.id, 2);
  ASSERT_EQ(f.session_claimed, 1);
  ASSERT_STR_EQ(f.previous_owner, "A");
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(pg_liveness_option_is_checked) {
  dx_provider_t *p = (dx_provider_t *)1;
  dx_error_t err;
  ASSERT_EQ(dx__pg_open("postgresql:///x?liveness=maybe", 0, &p, &err), DX_EINVAL);
  ASSERT(p == NULL);
  ASSERT_CONTAINS(err.msg, "liveness");
}

/* Worker rows: a fetch inside a batch locks only the row it hands out (dx_fetch_work with one
** row; run_cycle asks for the cycle's rows at once): at commit nothing else is locked, the
** rest are fetchable with no attempt spent. */
DX_TEST(pg_batch_work_fetch_releases_what_it_did_not_hand_out) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store);
  dx_session_cfg_t cfg = {.worker_id = "W", .session_lock_ms = 600000, .max_sessions = 10};
  dx_work_fetch_t f;
  dx_error_t err;
  uint64_t id;
  for (id = 1; id <= 5; id++) {
    dx_work_item_t w = item(DX_WI_ACT_EXECUTE, "P", id);
    ASSERT_OK(M(p)->enqueue_for_worker(p, T0 + (int64_t)id, &w, &err));
  }
  ASSERT_OK(M(p)->begin(p, &err));
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 10, 30000, &cfg, &f, &err));
  ASSERT_EQ(f.item.id, 1);
  dx_work_item_clear(&f.item);
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 10, 30000, &cfg, &f, &err));
  ASSERT_EQ(f.item.id, 2);
  dx_work_item_clear(&f.item);
  ASSERT_OK(M(p)->commit(p, 1, &err));
  for (id = 3; id <= 5; id++) { /* never locked: fetchable, first attempt */
    ASSERT_OK(M(p)->fetch_work_item(p, T0 + 11, 30000, NULL, &f, &err));
    ASSERT_EQ(f.item.id, id);
    ASSERT_EQ(f.attempt_count, 1);
    dx_work_item_clear(&f.item);
  }
  ASSERT_OK(M(p)->fetch_work_item(p, T0 + 11, 30000, NULL, &f, &err));
  ASSERT_EQ(f.item.kind, 0);
  M(p)->destroy(p);
  free(store);
}

/* ?liveness=on: what a killed process held in flight moves at once too: its locked session row
** (redelivered, second attempt, to the session's next owner) and its instance lock. */
DX_TEST(pg_liveness_moves_a_dead_processs_locks_at_once) {
  char *store = store_url("&liveness=on"), buf[4];
  dx_provider_t *p = dx_pv_open(store);
  dx_session_cfg_t cfg_b = {.worker_id = "B", .session_lock_ms = 600000, .max_sessions = 10};
  dx_work_item_t w1 = item(DX_WI_ACT_EXECUTE, "I", 1), st = item(DX_WI_START, "O", 0);
  dx_orch_item_t *it = NULL;
  dx_work_fetch_t f;
  dx_error_t err;
  int fds[2], status, i;
  pid_t pid;
  w1.session_id = "s1";
  ASSERT_OK(M(p)->enqueue_for_worker(p, dx_pv_wall_ms(), &w1, &err));
  ASSERT_OK(M(p)->enqueue_for_orchestrator(p, dx_pv_wall_ms(), &st, 0, &err));
  wait_out_liveness_grace();
  ASSERT(pipe(fds) == 0);
  fflush(NULL);
  ASSERT((pid = fork()) >= 0);
  if (pid == 0) { /* A locks the session row and the instance (10 min locks), then hangs */
    dx_provider_t *a = dx_pv_open(store);
    dx_session_cfg_t cfg_a = {.worker_id = "A", .session_lock_ms = 600000,
                              .max_sessions = 10};
    dx_orch_item_t *ai = NULL;
    if (M(a)->fetch_work_item(a, dx_pv_wall_ms(), 600000, &cfg_a, &f, &err) || f.item.id != 1 ||
        M(a)->fetch_orchestration_item(a, dx_pv_wall_ms(), 600000, &ai, &err) || !ai)
      _exit(1);
    if (write(fds[1], "x", 1) != 1) _exit(2);
    for (;;) pause();
  }
  close(fds[1]);
  ASSERT(read(fds[0], buf, 1) == 1);
  close(fds[0]);
  ASSERT_OK(M(p)->fetch_work_item(p, dx_pv_wall_ms(), 600000, &cfg_b, &f, &err));
  ASSERT_EQ(f.item.kind, 0); /* A lives: both stay A's */
  ASSERT_OK(M(p)->fetch_orchestration_item(p, dx_pv_wall_ms(), 600000, &it, &err));
  ASSERT(it == NULL);
  kill(pid, SIGKILL);
  ASSERT(waitpid(pid, &status, 0) == pid);
  for (i = 0; i < 100; i++) { /* sweeps run at most every 250 ms */
    ASSERT_OK(M(p)->fetch_work_item(p, dx_pv_wall_ms(), 600000, &cfg_b, &f, &err));
    if (f.item.kind) break;
    usleep(100 * 1000);
  }
  ASSERT_EQ(f.item.id, 1);
  ASSERT_EQ(f.attempt_count, 2);
  ASSERT_EQ(f.session_claimed, 1);
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  for (i = 0; i < 100 && !it; i++) {
    ASSERT_OK(M(p)->fetch_orchestration_item(p, dx_pv_wall_ms(), 600000, &it, &err));
    if (!it) usleep(100 * 1000);
  }
  ASSERT(it && strcmp(it->instance, "O") == 0);
  ASSERT_EQ(it->attempt_count, 2);
  dx_orch_item_free(it);
  M(p)->destroy(p);
  free(store);
}
