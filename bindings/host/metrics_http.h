/* metrics_http.h -- the worker's --metrics-listen endpoint, GET /metrics (internal). */
#ifndef DX_HOST_METRICS_HTTP_H
#define DX_HOST_METRICS_HTTP_H

#include "duroxide.h"
#include "http.h"

/* Serve the runtime's metrics in the Prometheus text format at `addr` on rt's loop. *out owned
** by the caller (dxh_http_close; before the runtime is freed). 0, or -1 with msg filled. */
int dxh_metrics_serve(uv_loop_t *loop, const dxh_listen_t *addr, dx_runtime_t *rt,
                      dxh_http_t **out, char *msg, size_t msglen);

#endif
