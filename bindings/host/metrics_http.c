/*
** metrics_http.c -- `duroxide-lua APP.lua --metrics-listen ADDR`: GET /metrics answers with the
** worker runtime's metrics registry in the Prometheus text exposition format (version 0.0.4,
** rendered by dx_metrics_render_prometheus).
*/
#include <stdlib.h>
#include <string.h>

#include "metrics_http.h"

static void on_request(void *ud, dxh_req_t *r) {
  dx_runtime_t *rt = ud;
  char *text;
  if (strcmp(dxh_req_path(r), "/metrics") != 0) {
    dxh_reply_error(r, 404, "no page %s (metrics are at /metrics)", dxh_req_path(r));
    return;
  }
  if (strcmp(dxh_req_method(r), "GET") != 0 && strcmp(dxh_req_method(r), "HEAD") != 0) {
    dxh_reply_error(r, 405, "%s", "/metrics answers GET only");
    return;
  }
  if (!(text = dx_metrics_render_prometheus(dx_runtime_metrics(rt)))) {
    dxh_reply_error(r, 500, "%s", "out of memory rendering the metrics");
    return;
  }
  dxh_reply(r, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text), 0);
  free(text);
}

int dxh_metrics_serve(uv_loop_t *loop, const dxh_listen_t *addr, dx_runtime_t *rt,
                      dxh_http_t **out, char *msg, size_t msglen) {
  return dxh_http_start(loop, addr, on_request, rt, out, msg, msglen);
}
