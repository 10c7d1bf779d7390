/*
** provider_validation_workers.c -- provider contract tests for the registry of live workers
** (provider version 10, list_workers; issue 10 `duroxide-lua workers`). Linked with
** provider_validation.c into every provider's test program; uses only the vtable and the
** hooks of provider_validation.h.
*/
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "duroxide/provider.h"
#include "provider_validation.h"
#include "testlib.h"

static dx_error_t E;

typedef struct {
  int n;
  char ids[8][32];
  int has_host[8];
  int64_t pid[8], started[8];
  uint64_t turns[8], acts[8];
} seen_t;

static int seen_cb(void *ud, const dx_worker_info_t *w) {
  seen_t *s = ud;
  if (s->n == 8) return 1;
  snprintf(s->ids[s->n], sizeof s->ids[0], "%s", w->worker_id);
  s->has_host[s->n] = w->host && *w->host;
  s->pid[s->n] = w->pid;
  s->started[s->n] = w->started_at_ms;
  s->turns[s->n] = w->running_turns;
  s->acts[s->n] = w->running_activities;
  s->n++;
  return 0;
}

static seen_t list(dx_provider_t *p, int64_t now) {
  seen_t s;
  memset(&s, 0, sizeof s);
  CHECK(M(p)->list_workers(p, now, seen_cb, &s, &E));
  return s;
}

static int find(const seen_t *s, const char *id) {
  int i;
  for (i = 0; i < s->n; i++)
    if (strcmp(s->ids[i], id) == 0) return i;
  return -1;
}

static int has_registry(dx_provider_t *p) {
  if (M(p)->version >= 10 && M(p)->list_workers && M(p)->worker_register) return 1;
  fprintf(stderr, "# SKIP: provider %s lists no workers\n", M(p)->name);
  return 0;
}

static int64_t now_wall(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return (int64_t)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

DX_TEST(pv_workers_lists_registrations_until_unregistered) {
  char *store = dx_pv_new_store();
  dx_provider_t *p = dx_pv_open(store), *q;
  seen_t s;
  int i;
  if (!has_registry(p)) { M(p)->destroy(p); free(store); return; }
  q = dx_pv_open(store); /* another handle: what any other client of the store sees */
  s = list(q, T0);
  ASSERT_EQ(s.n, 0);
  CHECK(M(p)->worker_register(p, "w-b", T0, &E));
  CHECK(M(p)->worker_register(p, "w-a", T0 + 5, &E));
  s = list(q, T0 + 10);
  ASSERT_EQ(s.n, 2);
  ASSERT_STR_EQ(s.ids[0], "w-a"); /* ascending id */
  ASSERT_STR_EQ(s.ids[1], "w-b");
  for (i = 0; i < 2; i++) {
    ASSERT(s.has_host[i]);
    ASSERT_EQ(s.pid[i], (int64_t)getpid());
    ASSERT_EQ(s.turns[i], 0);
    ASSERT_EQ(s.acts[i], 0);
  }
  ASSERT_EQ(s.started[0], T0 + 5);
  ASSERT_EQ(s.started[1], T0);
  M(p)->worker_unregister(p, "w-b");
  s = list(q, T0 + 20);
  ASSERT_EQ(s.n, 1);
  ASSERT_STR_EQ(s.ids[0], "w-a");
  M(p)->worker_unregister(p, "w-a");
  s = list(q, T0 + 30);
  ASSERT_EQ(s.n, 0);
  M(q)->destroy(q);
  M(p)->destroy(p);
  free(store);
}

DX_TEST(pv_workers_load_counts_the_locks_a_worker_holds) {
  dx_provider_t *p = dx_pv_fresh();
  dx_work_item_t w;
  dx_work_fetch_t f;
  dx_orch_item_t *it = NULL;
  seen_t s;
  if (!has_registry(p)) { M(p)->destroy(p); return; }
  CHECK(M(p)->worker_register(p, "busy", T0, &E));
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_START;
  w.instance = "I";
  w.execution_id = 1;
  w.name = "Orch";
  w.version = "1.0.0";
  w.data = "1";
  CHECK(M(p)->enqueue_for_orchestrator(p, T0, &w, 0, &E));
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_ACT_EXECUTE;
  w.instance = "J";
  w.execution_id = 1;
  w.id = 1;
  w.name = "Act";
  w.data = "1";
  CHECK(M(p)->enqueue_for_worker(p, T0, &w, &E));
  s = list(p, T0 + 1);
  ASSERT_EQ(s.n, 1);
  ASSERT_EQ(s.turns[0], 0);
  ASSERT_EQ(s.acts[0], 0);
  CHECK(M(p)->fetch_orchestration_item(p, T0 + 1, LOCK, &it, &E));
  ASSERT(it != NULL);
  CHECK(M(p)->fetch_work_item(p, T0 + 1, LOCK, NULL, &f, &E));
  ASSERT_EQ(f.item.kind, DX_WI_ACT_EXECUTE);
  s = list(p, T0 + 2);
  ASSERT_EQ(s.turns[0], 1);
  ASSERT_EQ(s.acts[0], 1);
  s = list(p, T0 + 2 + LOCK); /* the locks lapsed: no longer load */
  ASSERT_EQ(s.turns[0], 0);
  ASSERT_EQ(s.acts[0], 0);
  CHECK(M(p)->abandon_work_item(p, T0 + 3, f.lock_token, 0, 0, &E));
  dx_work_item_clear(&f.item);
  free(f.previous_owner);
  dx_orch_item_free(it);
  M(p)->worker_unregister(p, "busy");
  M(p)->destroy(p);
}

/* A worker process killed with SIGKILL leaves the list without unregistering (real process). */
DX_TEST(pv_workers_killed_process_leaves_the_list) {
  char *store = dx_pv_new_store();
  dx_provider_t *p;
  seen_t s;
  int64_t until;
  int i;
  pid_t pid;
  if (!dx_pv_multi_process()) { free(store); return; }
  p = dx_pv_open(store);
  if (!has_registry(p)) { M(p)->destroy(p); free(store); return; }
  CHECK(M(p)->worker_register(p, "stays", T0, &E));
  pid = dx_pv_spawn_holder(store, "doomed", 0);
  s = list(p, T0 + 1);
  ASSERT_EQ(s.n, 2);
  ASSERT((i = find(&s, "doomed")) >= 0);
  ASSERT_EQ(s.pid[i], (int64_t)pid);
  dx_pv_kill_holder(pid);
  /* up to 10 s of real time for the store to see it gone (a database server notices the
  ** closed connection a moment later, and trusts no lock in its first seconds) */
  until = now_wall() + 10000;
  do {
    s = list(p, T0 + 2);
    if (find(&s, "doomed") < 0) break;
    usleep(20000);
  } while (now_wall() < until);
  ASSERT_EQ(find(&s, "doomed"), -1);
  ASSERT(find(&s, "stays") >= 0);
  M(p)->worker_unregister(p, "stays");
  M(p)->destroy(p);
  free(store);
}
