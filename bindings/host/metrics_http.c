/*
** metrics_http.c -- `duroxide-lua APP.lua --metrics-listen ADDR`: GET /metrics answers with the
** worker runtime's counters in the Prometheus text exposition format (version 0.0.4).
*/
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "metrics_http.h"

/* The runtime's counters, one row each: name, help, where the value is. */
static const struct {
  const char *name, *help;
  size_t offset;
} counters[] = {
  {"duroxide_turns_total", "Orchestration turns run by this worker.",
   offsetof(dx_runtime_stats_t, turns)},
  {"duroxide_activities_total", "Activities run by this worker.",
   offsetof(dx_runtime_stats_t, activities)},
  {"duroxide_commits_total", "Store commits made by this worker.",
   offsetof(dx_runtime_stats_t, commits)},
  {"duroxide_fetch_cycles_total", "Store fetch cycles run by this worker.",
   offsetof(dx_runtime_stats_t, fetch_cycles)},
};

static void on_request(void *ud, dxh_req_t *r) {
  dx_runtime_t *rt = ud;
  dx_runtime_stats_t st;
  char buf[4096];
  size_t i, len = 0;
  if (strcmp(dxh_req_path(r), "/metrics") != 0) {
    dxh_reply_error(r, 404, "no page %s (metrics are at /metrics)", dxh_req_path(r));
    return;
  }
  if (strcmp(dxh_req_method(r), "GET") != 0 && strcmp(dxh_req_method(r), "HEAD") != 0) {
    dxh_reply_error(r, 405, "%s", "/metrics answers GET only");
    return;
  }
  dx_runtime_stats(rt, &st);
  for (i = 0; i < sizeof counters / sizeof counters[0]; i++)
    len += (size_t)snprintf(buf + len, sizeof buf - len,
                            "# HELP %s %s\n# TYPE %s counter\n%s %" PRIu64 "\n",
                            counters[i].name, counters[i].help, counters[i].name,
                            counters[i].name,
                            *(const uint64_t *)((const char *)&st + counters[i].offset));
  dxh_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", buf, len, 0);
}

int dxh_metrics_serve(uv_loop_t *loop, const dxh_listen_t *addr, dx_runtime_t *rt,
                      dxh_http_t **out, char *msg, size_t msglen) {
  return dxh_http_start(loop, addr, on_request, rt, out, msg, msglen);
}
