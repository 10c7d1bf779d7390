/*
** examples/embed.c -- a C program hosting Lua orchestrations (examples/embed_app.lua) with one
** C activity. Build and run (from the source tree, after `meson setup build && ninja -C build`):
**
**   export PKG_CONFIG_PATH=$PWD/build/meson-uninstalled   # or an installed duroxide.pc
**   cc examples/embed.c $(pkg-config --cflags --libs duroxide) -o embed
**   ./embed examples/embed_app.lua /tmp/embed-store
**
** The main thread runs the runtime (dx_runtime_run); a second thread is the client: it starts
** an instance, waits for it, prints its output and asks the runtime to stop.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <duroxide/lua_host.h>

/* The C activity: a checksum of a JSON string. It runs on a libuv thread-pool thread, so it
** must not call dx_runtime_* functions; it returns malloc'd JSON (the runtime frees it). */
static int checksum(const dx_activity_info_t *info, const char *input_json, char **output_json,
                    char **error_message, void *userdata) {
  unsigned long sum = 0;
  const char *p = input_json;
  char buf[32];
  (void)info;
  (void)userdata;
  if (*p != '"') {
    *error_message = strdup("Checksum expects a string");
    return 1;
  }
  for (p++; *p && *p != '"'; p++) sum = (sum * 31 + (unsigned char)*p) % 1000003;
  snprintf(buf, sizeof buf, "%lu", sum);
  *output_json = strdup(buf);
  return 0;
}

typedef struct {
  dx_runtime_t *rt;
  const char *store;
  int ok;
} client_job_t;

static void client_thread(void *arg) {
  client_job_t *job = arg;
  dx_client_t *client = NULL;
  dx_instance_info_t info;
  dx_error_t err;
  char id[64];
  snprintf(id, sizeof id, "embed-%ld", (long)getpid());
  if (dx_client_open(&client, job->store, &err) != 0 ||
      dx_client_start(client, id, "WordStats", "[\"durable\", \"lua\", \"in\", \"c\"]", NULL,
                      &err) != 0 ||
      dx_client_wait(client, id, 30000, &info, &err) != 0) {
    fprintf(stderr, "embed: %s: %s\n", dx_err_name(err.code), err.msg);
  } else {
    char *json = dx_instance_info_to_json(id, &info);
    printf("%s\n", json ? json : "?");
    job->ok = info.status == DX_STATUS_COMPLETED;
    free(json);
    dx_instance_info_clear(&info);
  }
  dx_client_close(client);
  dx_runtime_request_stop(job->rt); /* thread-safe: dx_runtime_run returns once stopped */
}

int main(int argc, char **argv) {
  const char *app = argc > 1 ? argv[1] : "examples/embed_app.lua";
  const char *store = argc > 2 ? argv[2] : "./embed-data";
  client_job_t job = {NULL, store, 0};
  dx_options_t opts;
  dx_error_t err;
  uv_thread_t tid;

  dx_options_init(&opts);
  opts.log_level = DX_LOG_WARN;
  /* NULL loop: the runtime owns its loop, driven by dx_runtime_run below. */
  if (dx_lua_runtime_new(&job.rt, NULL, store, &opts, app, &err) != 0) {
    fprintf(stderr, "embed: %s: %s\n", dx_err_name(err.code), err.msg);
    return 1;
  }
  if (dx_register_activity(job.rt, "Checksum", checksum, NULL, &err) != 0) {
    fprintf(stderr, "embed: %s\n", err.msg);
    dx_lua_runtime_free(job.rt);
    return 1;
  }
  uv_thread_create(&tid, client_thread, &job);
  if (dx_runtime_run(job.rt, &err) != 0) /* starts the runtime, returns when it stopped */
    fprintf(stderr, "embed: %s\n", err.msg);
  uv_thread_join(&tid);
  dx_lua_runtime_free(job.rt);
  return job.ok ? 0 : 1;
}
