/*
** test_embed.c -- the C embedding API (duroxide.h "C embedding"): dx_lua_runtime_new/free,
** C activities on the thread pool and on the loop, dx_runtime_run/request_stop, and misuse:
** NULL arguments, bad names, bad apps, calls on a stopped runtime.
**
** Most tests run the runtime on a loop of their own and drive it with UV_RUN_NOWAIT while
** polling the client, so everything stays on one thread; own_loop_* use dx_runtime_run with
** the client on a second thread, as examples/embed.c does. Each test ends by closing its loop
** (uv_loop_close == 0): nothing of the runtime is left on it.
*/
#include "testlib.h"

#include <time.h>
#include <unistd.h>

#include "duroxide/lua_host.h"

/* {===== helpers =====} */

static const char *APP =
    "local duroxide = require('duroxide')\n"
    "duroxide.activity('Shadowed', function(actx, v) return 'lua' end)\n"
    "duroxide.activity('LuaEcho', function(actx, v) return v end)\n"
    "-- input = {name=, input=}: call one activity, return its value or its error message\n"
    "duroxide.orchestration('CallOne', function(ctx, input)\n"
    "  local v, err = ctx:schedule_activity(input.name, input.input):await()\n"
    "  if err then return err.message end\n"
    "  return v\n"
    "end)\n"
    "duroxide.orchestration('Both', function(ctx, input)\n"
    "  local vals, errs = ctx:join({ ctx:schedule_activity('Pool', input),\n"
    "                                ctx:schedule_activity('Loop', input) })\n"
    "  if errs then error('an activity failed') end\n"
    "  return vals\n"
    "end)\n";

static const char *write_file(const char *name, const char *text) {
  static char path[8][512];
  static int n;
  char *p = path[n++ % 8];
  FILE *f;
  snprintf(p, 512, "%s/%s", dx_test_tmpdir(), name);
  f = fopen(p, "w");
  ASSERT(f != NULL);
  fputs(text, f);
  fclose(f);
  return p;
}

static const char *store_dir(void) {
  static char p[512];
  snprintf(p, sizeof p, "%s/store", dx_test_tmpdir());
  return p;
}

static dx_options_t quiet_opts(void) {
  dx_options_t o;
  dx_options_init(&o);
  o.log_level = DX_LOG_ERROR;
  o.shutdown_grace_ms = 2000;
  return o;
}

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A runtime of APP on `loop`, plus a client on its store. */
static dx_runtime_t *new_rt(uv_loop_t *loop, dx_client_t **client) {
  dx_runtime_t *rt = NULL;
  dx_options_t o = quiet_opts();
  dx_error_t err;
  int rc = dx_lua_runtime_new(&rt, loop, store_dir(), &o, write_file("app.lua", APP), &err);
  if (rc != 0) DX_FAIL_AT("dx_lua_runtime_new: %s %s", dx_err_name(rc), err.msg);
  ASSERT(rt != NULL);
  if (client) ASSERT_OK(dx_client_open(client, store_dir(), NULL));
  return rt;
}

/* Start `name` and drive `loop` until the instance finished; returns its status. */
static int run_instance(uv_loop_t *loop, dx_client_t *c, const char *id, const char *name,
                        const char *input, dx_instance_info_t *out) {
  int64_t deadline = now_ms() + 20000;
  dx_error_t err;
  int rc = dx_client_start(c, id, name, input, NULL, &err);
  if (rc != 0) DX_FAIL_AT("dx_client_start: %s", err.msg);
  for (;;) {
    ASSERT_OK(dx_client_status(c, id, out, NULL));
    if (out->status == DX_STATUS_COMPLETED || out->status == DX_STATUS_FAILED) return out->status;
    dx_instance_info_clear(out);
    if (now_ms() > deadline) DX_FAIL_AT("instance %s did not finish", id);
    uv_run(loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
}

/* Free the runtime (stopping it) and check nothing is left on the loop. */
static void finish(uv_loop_t *loop, dx_runtime_t *rt, dx_client_t *c) {
  dx_client_close(c);
  dx_lua_runtime_free(rt);
  uv_run(loop, UV_RUN_DEFAULT);
  ASSERT_EQ(uv_loop_close(loop), 0);
}

/* {===== C activities used by the tests =====} */

typedef struct {
  uv_thread_t thread;
  int calls;
  char name[64];
  char input[64];
  uint32_t attempt;
  int run_rc;
  dx_runtime_t *rt;
} probe_t;

/* Records where and with what it ran; returns its input. */
static int act_probe(const dx_activity_info_t *info, const char *input, char **out, char **msg,
                     void *ud) {
  probe_t *p = ud;
  (void)msg;
  p->thread = uv_thread_self();
  p->calls++;
  snprintf(p->name, sizeof p->name, "%s", info->name);
  snprintf(p->input, sizeof p->input, "%s", input);
  p->attempt = info->attempt;
  *out = strdup(input);
  return 0;
}

static int act_fail(const dx_activity_info_t *info, const char *input, char **out, char **msg,
                    void *ud) {
  (void)info, (void)input, (void)out, (void)ud;
  *msg = strdup("card declined");
  return 1;
}

static int act_fail_silent(const dx_activity_info_t *info, const char *input, char **out,
                           char **msg, void *ud) {
  (void)info, (void)input, (void)out, (void)msg, (void)ud;
  return 7;
}

static int act_bad_json(const dx_activity_info_t *info, const char *input, char **out,
                        char **msg, void *ud) {
  (void)info, (void)input, (void)msg, (void)ud;
  *out = strdup("{not json");
  return 0;
}

static int act_null(const dx_activity_info_t *info, const char *input, char **out, char **msg,
                    void *ud) {
  (void)info, (void)input, (void)out, (void)msg, (void)ud;
  return 0; /* output left NULL: JSON null */
}

static int act_const_c(const dx_activity_info_t *info, const char *input, char **out,
                       char **msg, void *ud) {
  (void)info, (void)input, (void)msg, (void)ud;
  *out = strdup("\"c\"");
  return 0;
}

/* On the loop: tries to re-enter dx_runtime_run (refused) and to register (allowed). */
static int act_reenter(const dx_activity_info_t *info, const char *input, char **out,
                       char **msg, void *ud) {
  probe_t *p = ud;
  dx_error_t err;
  (void)info, (void)input, (void)msg;
  p->run_rc = dx_runtime_run(p->rt, &err);
  p->calls++;
  *out = strdup("true");
  return 0;
}

/* {===== misuse =====} */

DX_TEST(null_arguments) {
  dx_runtime_t *rt = (dx_runtime_t *)1;
  dx_runtime_stats_t st;
  dx_error_t err;
  const char *app = write_file("app.lua", APP);
  uv_loop_t loop;
  ASSERT_EQ(dx_lua_runtime_new(NULL, NULL, store_dir(), NULL, app, &err), DX_EINVAL);
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), NULL, NULL, &err), DX_EINVAL);
  ASSERT(rt == NULL);
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), NULL, "", NULL), DX_EINVAL);
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, "", NULL, app, &err), DX_EINVAL);
  ASSERT_EQ(dx_register_activity(NULL, "x", act_null, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_register_activity(NULL, "x", act_null, NULL, NULL), DX_EINVAL);
  ASSERT_EQ(dx_register_activity_ex(NULL, "x", act_null, NULL, 0, &err), DX_EINVAL);
  ASSERT_EQ(dx_runtime_run(NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_runtime_request_stop(NULL), DX_EINVAL);
  ASSERT_EQ(dx_runtime_is_stopped(NULL), 0);
  ASSERT_EQ(dx_runtime_start(NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_runtime_new(NULL, NULL, NULL, NULL, NULL, NULL, &err), DX_EINVAL);
  dx_runtime_stop(NULL, NULL, NULL);
  dx_runtime_free(NULL);
  dx_lua_runtime_free(NULL);
  dx_runtime_poke(NULL);
  dx_runtime_stats(NULL, &st);
  ASSERT_EQ(st.turns, 0);
  ASSERT(dx_runtime_worker_id(NULL) == NULL);

  uv_loop_init(&loop);
  rt = new_rt(&loop, NULL);
  ASSERT_EQ(dx_register_activity(rt, NULL, act_null, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_register_activity(rt, "x", NULL, NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "NULL activity function");
  ASSERT_EQ(dx_register_activity_ex(rt, "x", act_null, NULL, 7, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "flags");
  ASSERT_EQ(dx_runtime_is_stopped(rt), 0);
  finish(&loop, rt, NULL);
}

DX_TEST(invalid_names) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  dx_error_t err;
  char long_name[202];
  uv_loop_init(&loop);
  rt = new_rt(&loop, NULL);
  memset(long_name, 'a', 201);
  long_name[201] = 0;
  ASSERT_EQ(dx_register_activity(rt, "", act_null, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_register_activity(rt, long_name, act_null, NULL, &err), DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "1 to 200 bytes");
  ASSERT_EQ(dx_register_activity(rt, "a\nb", act_null, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_register_activity(rt, "__duroxide:close_session", act_null, NULL, &err),
            DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "reserved");
  long_name[200] = 0;
  ASSERT_OK(dx_register_activity(rt, long_name, act_null, NULL, &err));
  ASSERT_OK(dx_register_activity(rt, "Twice", act_null, NULL, &err));
  ASSERT_EQ(dx_register_activity_ex(rt, "Twice", act_null, NULL, DX_ACTIVITY_ON_LOOP, &err),
            DX_EEXIST);
  ASSERT_CONTAINS(err.msg, "Twice");
  finish(&loop, rt, NULL);
}

DX_TEST(unknown_app_path) {
  dx_runtime_t *rt = NULL;
  dx_error_t err;
  char path[512];
  snprintf(path, sizeof path, "%s/no-such-app.lua", dx_test_tmpdir());
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), NULL, path, &err), DX_ENOTFOUND);
  ASSERT(rt == NULL);
  ASSERT_EQ(err.code, DX_ENOTFOUND);
  ASSERT_CONTAINS(err.msg, "no-such-app.lua");
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), NULL, dx_test_tmpdir(), &err), DX_EIO);
  ASSERT_CONTAINS(err.msg, "not a file");
  ASSERT(rt == NULL);
}

DX_TEST(app_errors_name_file_and_line) {
  dx_runtime_t *rt = NULL;
  dx_options_t bad;
  dx_error_t err;
  const char *syntax = write_file("bad_syntax.lua", "local duroxide = require('duroxide')\n"
                                                     "\n"
                                                     "this is not lua\n");
  const char *raises = write_file("raises.lua", "local duroxide = require('duroxide')\n"
                                                "error('boom at load')\n");
  const char *table_err = write_file("table_err.lua", "error(require('duroxide').error('as a "
                                                      "table'))\n");
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), NULL, syntax, &err), DX_ELUA);
  ASSERT(rt == NULL);
  ASSERT_CONTAINS(err.msg, "bad_syntax.lua:3:");
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), NULL, raises, &err), DX_ELUA);
  ASSERT_CONTAINS(err.msg, "raises.lua:2: boom at load");
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), NULL, table_err, &err), DX_ELUA);
  ASSERT_CONTAINS(err.msg, "as a table");
  dx_options_init(&bad);
  ASSERT_EQ(bad.worker_concurrency, 1000); /* the documented default (cli.md) */
  bad.worker_concurrency = 0;
  ASSERT_EQ(dx_lua_runtime_new(&rt, NULL, store_dir(), &bad, write_file("app.lua", APP), &err),
            DX_EINVAL);
  ASSERT_CONTAINS(err.msg, "worker_concurrency");
  ASSERT(rt == NULL);
}

/* {===== C activities =====} */

DX_TEST(pool_and_loop_activities_complete) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  dx_client_t *c;
  dx_instance_info_t info;
  dx_error_t err;
  probe_t pool, on_loop;
  uv_thread_t me = uv_thread_self();
  memset(&pool, 0, sizeof pool);
  memset(&on_loop, 0, sizeof on_loop);
  uv_loop_init(&loop);
  rt = new_rt(&loop, &c);
  ASSERT_OK(dx_register_activity(rt, "Pool", act_probe, &pool, &err)); /* before start */
  ASSERT_OK(dx_runtime_start(rt, &err));
  ASSERT_EQ(dx_runtime_start(rt, &err), DX_ESTATE);
  ASSERT_OK(dx_register_activity_ex(rt, "Loop", act_probe, &on_loop, DX_ACTIVITY_ON_LOOP,
                                    &err)); /* after start */
  ASSERT_EQ(run_instance(&loop, c, "both-1", "Both", "{\"n\":1}", &info), DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "[{\"n\":1},{\"n\":1}]");
  dx_instance_info_clear(&info);
  ASSERT_EQ(pool.calls, 1);
  ASSERT_EQ(on_loop.calls, 1);
  ASSERT(!uv_thread_equal(&pool.thread, &me)); /* a thread-pool thread */
  ASSERT(uv_thread_equal(&on_loop.thread, &me));
  ASSERT_STR_EQ(pool.name, "Pool");
  ASSERT_STR_EQ(pool.input, "{\"n\":1}");
  ASSERT_EQ(pool.attempt, 1);
  finish(&loop, rt, c);
}

DX_TEST(c_activity_error_reaches_orchestration) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  dx_client_t *c;
  dx_instance_info_t info;
  uv_loop_init(&loop);
  rt = new_rt(&loop, &c);
  ASSERT_OK(dx_register_activity(rt, "Charge", act_fail, NULL, NULL));
  ASSERT_OK(dx_register_activity(rt, "Silent", act_fail_silent, NULL, NULL));
  ASSERT_OK(dx_register_activity_ex(rt, "BadJson", act_bad_json, NULL, DX_ACTIVITY_ON_LOOP,
                                    NULL));
  ASSERT_OK(dx_register_activity(rt, "Null", act_null, NULL, NULL));
  ASSERT_OK(dx_runtime_start(rt, NULL));
  ASSERT_EQ(run_instance(&loop, c, "e1", "CallOne", "{\"name\":\"Charge\"}", &info),
            DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "\"card declined\"");
  dx_instance_info_clear(&info);
  ASSERT_EQ(run_instance(&loop, c, "e2", "CallOne", "{\"name\":\"Silent\"}", &info),
            DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "\"C activity 'Silent' failed (returned 7)\"");
  dx_instance_info_clear(&info);
  ASSERT_EQ(run_instance(&loop, c, "e3", "CallOne", "{\"name\":\"BadJson\"}", &info),
            DX_STATUS_COMPLETED);
  ASSERT_CONTAINS(info.output, "C activity 'BadJson' returned an invalid output");
  dx_instance_info_clear(&info);
  ASSERT_EQ(run_instance(&loop, c, "e4", "CallOne", "{\"name\":\"Null\"}", &info),
            DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "null");
  dx_instance_info_clear(&info);
  finish(&loop, rt, c);
}

DX_TEST(c_activity_shadows_lua_activity) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  dx_client_t *c;
  dx_instance_info_t info;
  uv_loop_init(&loop);
  rt = new_rt(&loop, &c);
  ASSERT_OK(dx_runtime_start(rt, NULL));
  ASSERT_EQ(run_instance(&loop, c, "s1", "CallOne", "{\"name\":\"Shadowed\"}", &info),
            DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "\"lua\"");
  dx_instance_info_clear(&info);
  ASSERT_OK(dx_register_activity(rt, "Shadowed", act_const_c, NULL, NULL));
  ASSERT_EQ(run_instance(&loop, c, "s2", "CallOne", "{\"name\":\"Shadowed\"}", &info),
            DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "\"c\"");
  dx_instance_info_clear(&info);
  /* Lua activities still run next to C ones. */
  ASSERT_EQ(run_instance(&loop, c, "s3", "CallOne", "{\"name\":\"LuaEcho\",\"input\":[1,2]}",
                         &info), DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(info.output, "[1,2]");
  dx_instance_info_clear(&info);
  finish(&loop, rt, c);
}

/* {===== lifecycle =====} */

DX_TEST(calls_after_stop_return_errors) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  dx_error_t err;
  uv_loop_init(&loop);
  rt = new_rt(&loop, NULL);
  ASSERT_OK(dx_runtime_start(rt, &err));
  dx_runtime_stop(rt, NULL, NULL);
  ASSERT_EQ(dx_register_activity(rt, "Late", act_null, NULL, &err), DX_ECLOSED); /* stopping */
  while (!dx_runtime_is_stopped(rt)) uv_run(&loop, UV_RUN_ONCE);
  ASSERT_EQ(dx_runtime_is_stopped(rt), 1);
  ASSERT_EQ(dx_register_activity(rt, "Late", act_null, NULL, &err), DX_ECLOSED);
  ASSERT_CONTAINS(err.msg, "stopped");
  ASSERT_EQ(dx_runtime_start(rt, &err), DX_ECLOSED);
  ASSERT_EQ(dx_runtime_run(rt, &err), DX_ECLOSED);
  ASSERT_OK(dx_runtime_request_stop(rt)); /* harmless */
  dx_runtime_stop(rt, NULL, NULL);        /* harmless */
  finish(&loop, rt, NULL);
}

DX_TEST(never_started_runtime_frees_cleanly) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  dx_error_t err;
  uv_loop_init(&loop);
  rt = new_rt(&loop, NULL);
  ASSERT_OK(dx_register_activity(rt, "Pool", act_null, NULL, &err));
  dx_runtime_stop(rt, NULL, NULL); /* a never-started runtime stops at once */
  ASSERT_EQ(dx_runtime_is_stopped(rt), 1);
  ASSERT_EQ(dx_runtime_start(rt, &err), DX_ECLOSED);
  finish(&loop, rt, NULL);
}

DX_TEST(free_stops_a_running_runtime) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  dx_client_t *c;
  dx_instance_info_t info;
  uv_loop_init(&loop);
  rt = new_rt(&loop, &c);
  ASSERT_OK(dx_register_activity(rt, "Pool", act_null, NULL, NULL));
  ASSERT_OK(dx_register_activity(rt, "Loop", act_null, NULL, NULL));
  ASSERT_OK(dx_runtime_start(rt, NULL));
  ASSERT_EQ(run_instance(&loop, c, "f1", "Both", NULL, &info), DX_STATUS_COMPLETED);
  dx_instance_info_clear(&info);
  dx_runtime_free(rt); /* refused: still running (logged), nothing freed */
  ASSERT_EQ(dx_runtime_is_stopped(rt), 0);
  finish(&loop, rt, c); /* dx_lua_runtime_free stops it first */
}

DX_TEST(stop_requested_before_run) {
  uv_loop_t loop;
  dx_runtime_t *rt;
  uv_loop_init(&loop);
  rt = new_rt(&loop, NULL);
  ASSERT_OK(dx_runtime_request_stop(rt)); /* remembered: run stops right after starting */
  ASSERT_OK(dx_runtime_run(rt, NULL));
  ASSERT_EQ(dx_runtime_is_stopped(rt), 1);
  finish(&loop, rt, NULL);
}

static uv_sem_t slow_started;

/* On the pool: signals that it runs, then outlives the shutdown grace period. */
static int act_slow(const dx_activity_info_t *info, const char *input, char **out, char **msg,
                    void *ud) {
  (void)info, (void)input, (void)msg, (void)ud;
  uv_sem_post(&slow_started);
  usleep(600 * 1000);
  *out = strdup("\"late\"");
  return 0;
}

DX_TEST(pool_activity_outliving_shutdown_grace_is_dropped) {
  uv_loop_t loop;
  dx_runtime_t *rt = NULL;
  dx_client_t *c;
  dx_options_t o = quiet_opts();
  dx_instance_info_t info;
  int64_t deadline = now_ms() + 10000;
  o.shutdown_grace_ms = 100;
  uv_sem_init(&slow_started, 0);
  uv_loop_init(&loop);
  ASSERT_OK(dx_lua_runtime_new(&rt, &loop, store_dir(), &o, write_file("app.lua", APP), NULL));
  ASSERT_OK(dx_client_open(&c, store_dir(), NULL));
  ASSERT_OK(dx_register_activity(rt, "Slow", act_slow, NULL, NULL));
  ASSERT_OK(dx_runtime_start(rt, NULL));
  ASSERT_OK(dx_client_start(c, "slow-1", "CallOne", "{\"name\":\"Slow\"}", NULL, NULL));
  while (uv_sem_trywait(&slow_started) != 0) {
    if (now_ms() > deadline) DX_FAIL_AT("the slow activity never started");
    uv_run(&loop, UV_RUN_NOWAIT);
    usleep(1000);
  }
  /* Stop: the grace period ends while the function still runs; the row is handed back and
  ** the late result is dropped when the function returns (the loop is drained in finish). */
  dx_lua_runtime_free(rt);
  ASSERT_OK(dx_client_status(c, "slow-1", &info, NULL));
  ASSERT_EQ(info.status, DX_STATUS_RUNNING);
  dx_instance_info_clear(&info);
  finish(&loop, NULL, c);
  uv_sem_destroy(&slow_started);
}

typedef struct {
  dx_runtime_t *rt;
  const char *id;
  int status;
  char output[256];
} client_job_t;

static void client_thread(void *arg) {
  client_job_t *j = arg;
  dx_client_t *c = NULL;
  dx_instance_info_t info;
  if (dx_client_open(&c, store_dir(), NULL) == 0 &&
      dx_client_start(c, j->id, "CallOne", "{\"name\":\"Reenter\"}", NULL, NULL) == 0 &&
      dx_client_wait(c, j->id, 20000, &info, NULL) == 0) {
    j->status = info.status;
    snprintf(j->output, sizeof j->output, "%s", info.output ? info.output : "");
    dx_instance_info_clear(&info);
  }
  dx_client_close(c);
  dx_runtime_request_stop(j->rt);
}

DX_TEST(own_loop_run_and_request_stop_from_thread) {
  dx_runtime_t *rt = NULL;
  dx_options_t o = quiet_opts();
  dx_error_t err;
  client_job_t job;
  uv_thread_t tid;
  probe_t p;
  memset(&p, 0, sizeof p);
  memset(&job, 0, sizeof job);
  ASSERT_OK(dx_lua_runtime_new(&rt, NULL, store_dir(), &o, write_file("app.lua", APP), &err));
  p.rt = rt;
  ASSERT_OK(dx_register_activity_ex(rt, "Reenter", act_reenter, &p, DX_ACTIVITY_ON_LOOP, &err));
  job.rt = rt;
  job.id = "own-1";
  ASSERT_OK(uv_thread_create(&tid, client_thread, &job));
  ASSERT_OK(dx_runtime_run(rt, &err));
  uv_thread_join(&tid);
  ASSERT_EQ(job.status, DX_STATUS_COMPLETED);
  ASSERT_STR_EQ(job.output, "true");
  ASSERT_EQ(p.calls, 1);
  ASSERT_EQ(p.run_rc, DX_ESTATE); /* dx_runtime_run from a callback of its own run */
  ASSERT_EQ(dx_runtime_is_stopped(rt), 1);
  ASSERT_EQ(dx_runtime_run(rt, &err), DX_ECLOSED);
  dx_lua_runtime_free(rt);
}

/* {===== the client with bad arguments =====} */

/* The orchestrator queue's message count (starts and raises not yet taken). */
static uint64_t queued_messages(dx_client_t *c) {
  dx_provider_t *p = dx_client_provider(c);
  dx_queue_depths_t d;
  dx_error_t err;
  ASSERT_OK(p->methods->get_queue_depths(p, &d, &err));
  return d.orchestrator;
}

DX_TEST(client_raise_many_is_all_or_nothing) {
  dx_client_t *c = NULL;
  dx_error_t err;
  dx_raise_t ok[3] = {{"r1", "E", "1"}, {"r2", "E", NULL}, {"r1", "F", "{\"a\": [1]}"}};
  dx_raise_t bad[2] = {{"r1", "E", "1"}, {"nope", "E", "2"}};
  dx_raise_t bad_json[2] = {{"r1", "E", "1"}, {"r2", "E", "{bad"}};
  ASSERT_EQ(dx_client_raise_many(NULL, ok, 3, &err), DX_EINVAL);
  ASSERT_OK(dx_client_open(&c, store_dir(), &err));
  ASSERT_EQ(dx_client_raise_many(c, NULL, 1, &err), DX_EINVAL);
  ASSERT_OK(dx_client_start(c, "r1", "X", NULL, NULL, &err));
  ASSERT_OK(dx_client_start(c, "r2", "X", NULL, NULL, &err));
  ASSERT_EQ(queued_messages(c), 2);
  ASSERT_EQ(dx_client_raise_many(c, bad, 2, &err), DX_ENOTFOUND);
  ASSERT_STR_EQ(err.msg, "entry 2: unknown instance 'nope'");
  ASSERT_EQ(dx_client_raise_many(c, bad_json, 2, &err), DX_EJSON);
  ASSERT(strncmp(err.msg, "entry 2: event data: ", 21) == 0);
  ASSERT_EQ(queued_messages(c), 2); /* nothing written */
  ASSERT_OK(dx_client_raise_many(c, ok, 0, &err));
  ASSERT_OK(dx_client_raise_many(c, ok, 3, &err));
  ASSERT_EQ(queued_messages(c), 5);
  dx_client_close(c);
}

/* {===== client waits hear commits =====} */

/* A provider that counts the client's status reads (get_instance_info), over a real store. */
typedef struct {
  dx_provider_t base;
  dx_provider_methods_t m;
  dx_provider_t *in;
  int reads;
} counting_t;

#define CIN(p) (((counting_t *)(p))->in)

static int count_info(dx_provider_t *p, const char *id, dx_instance_info_t *out,
                      dx_error_t *err) {
  ((counting_t *)p)->reads++;
  return CIN(p)->methods->get_instance_info(CIN(p), id, out, err);
}

static const char *count_notify_path(dx_provider_t *p) {
  return CIN(p)->methods->notify_path(CIN(p));
}

static int64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Instance `id` of "Orch", started and past its first turn (Running), through the provider. */
static void running_instance(dx_provider_t *p, const char *id) {
  dx_work_item_t w;
  dx_orch_item_t *it = NULL;
  dx_event_t ev;
  dx_orch_ack_t a;
  dx_error_t err;
  int64_t now = wall_ms();
  memset(&w, 0, sizeof w);
  w.kind = DX_WI_START;
  w.instance = (char *)id;
  w.name = "Orch";
  w.execution_id = 1;
  w.data = "null";
  ASSERT_OK(p->methods->enqueue_for_orchestrator(p, now, &w, 0, &err));
  ASSERT_OK(p->methods->fetch_orchestration_item(p, wall_ms(), 60000, &it, &err));
  ASSERT(it);
  memset(&ev, 0, sizeof ev);
  ev.kind = DX_EV_ORCH_STARTED;
  ev.event_id = 1;
  ev.name = "Orch";
  ev.data = "null";
  memset(&a, 0, sizeof a);
  a.instance = it->instance;
  a.lock_token = it->lock_token;
  a.execution_id = 1;
  a.delta = &ev;
  a.delta_len = 1;
  a.orchestration_name = "Orch";
  ASSERT_OK(p->methods->ack_orchestration_item(p, wall_ms(), &a, &err));
  dx_orch_item_free(it);
}

static void terminate_later(void *arg) {
  dx_client_t *c = NULL;
  (void)arg;
  usleep(300 * 1000);
  ASSERT_OK(dx_client_open(&c, store_dir(), NULL));
  ASSERT_OK(dx_client_terminate(c, "w1", "enough", NULL, NULL));
  dx_client_close(c);
}

/* A waiting client reads the status again when a commit may have changed it, not on a
** timer: over 300 ms of quiet it reads once, then once after the terminating commit (a
** polling wait, 2 ms doubling to 50 ms, reads about ten times). */
DX_TEST(client_wait_wakes_on_commits_instead_of_polling) {
  counting_t w;
  dx_client_t *c = NULL;
  dx_instance_info_t info;
  dx_error_t err;
  uv_thread_t tid;
  memset(&w, 0, sizeof w);
  ASSERT_OK(dx_provider_open(store_dir(), NULL, &w.in, &err));
  running_instance(w.in, "w1");
  w.m = *w.in->methods; /* the client calls only the members replaced below */
  w.m.get_instance_info = count_info;
  w.m.notify_path = count_notify_path;
  w.m.wake_fd = NULL;
  w.base.methods = &w.m;
  ASSERT_OK(dx_client_new(&c, &w.base, &err));
  ASSERT_OK(uv_thread_create(&tid, terminate_later, NULL));
  ASSERT_OK(dx_client_wait(c, "w1", 20000, &info, &err));
  uv_thread_join(&tid);
  ASSERT_EQ(info.status, DX_STATUS_FAILED);
  dx_instance_info_clear(&info);
  ASSERT(w.reads >= 2 && w.reads <= 4);
  dx_client_close(c);
  w.in->methods->destroy(w.in);
}

DX_TEST(client_null_arguments) {
  dx_client_t *c = NULL;
  dx_instance_info_t info;
  dx_start_t st = {NULL, "X", NULL, NULL};
  dx_error_t err;
  ASSERT_EQ(dx_client_open(NULL, store_dir(), &err), DX_EINVAL);
  ASSERT_EQ(dx_client_open(&c, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_new(&c, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_start(NULL, "id", "X", NULL, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_start_many(NULL, &st, 1, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_raise(NULL, "id", "E", NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_cancel(NULL, "id", NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_status(NULL, "id", &info, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_wait(NULL, "id", 10, &info, &err), DX_EINVAL);
  ASSERT(dx_client_provider(NULL) == NULL);
  dx_client_close(NULL);

  ASSERT_OK(dx_client_open(&c, store_dir(), &err));
  ASSERT_EQ(dx_client_start(c, NULL, "X", NULL, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_start(c, "id", NULL, NULL, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_start(c, "id", "X", "{bad", NULL, &err), DX_EJSON);
  ASSERT_EQ(dx_client_start_many(c, NULL, 1, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_start_many(c, &st, 1, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_raise(c, NULL, "E", NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_raise(c, "id", NULL, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_raise(c, "nope", "E", NULL, &err), DX_ENOTFOUND);
  ASSERT_EQ(dx_client_cancel(c, NULL, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_cancel(c, "nope", NULL, &err), DX_ENOTFOUND);
  ASSERT_EQ(dx_client_status(c, NULL, &info, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_status(c, "id", NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_wait(c, "id", 10, NULL, &err), DX_EINVAL);
  ASSERT_EQ(dx_client_wait(c, NULL, 10, &info, &err), DX_EINVAL);
  ASSERT_OK(dx_client_status(c, "nope", &info, &err)); /* unknown: OK with status NONE */
  ASSERT_EQ(info.status, DX_STATUS_NONE);
  dx_instance_info_clear(&info);
  dx_client_close(c);
}
