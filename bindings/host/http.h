/*
** http.h -- the duroxide-lua program's HTTP server (internal): libmicrohttpd driven by a libuv
** loop, so handlers run on the loop thread (the worker's /metrics, the web console).
*/
#ifndef DX_HOST_HTTP_H
#define DX_HOST_HTTP_H

#include <stddef.h>
#include <sys/socket.h>

#include <jansson.h>
#include <uv.h>

/* A parsed listen address: HOST:PORT with HOST an IPv4 literal, a bracketed IPv6 literal
** ([::1]) or "localhost"; PORT 0..65535 (0: any free port). */
typedef struct dxh_listen_s {
  struct sockaddr_storage sa;
  socklen_t salen;
  int loopback; /* 1 for 127.0.0.0/8 and ::1 */
} dxh_listen_t;

/* Parse `text` (borrowed) into *out. 0, or -1 with a message naming the text in msg. */
int dxh_listen_parse(const char *text, dxh_listen_t *out, char *msg, size_t msglen);

typedef struct dxh_http_s dxh_http_t;
typedef struct dxh_req_s dxh_req_t;

/* Handles one complete request (body read) on the loop thread. It answers with exactly one
** dxh_reply* call (a request left unanswered gets 500). `req` is valid during the call. */
typedef void (*dxh_handler_fn)(void *ud, dxh_req_t *req);

/* Listen on `addr` and serve requests with fn. *out owned by the caller: dxh_http_close.
** 0, or -1 with a message naming the address (in use, not permitted, ...) in msg. */
int dxh_http_start(uv_loop_t *loop, const dxh_listen_t *addr, dxh_handler_fn fn, void *ud,
                   dxh_http_t **out, char *msg, size_t msglen);
/* The bound port (the chosen one when the address asked for port 0). */
int dxh_http_port(const dxh_http_t *h);
/* Stop listening, drop open connections and free the server. NULL is ignored. */
void dxh_http_close(dxh_http_t *h);

/* {===== requests =====} */

const char *dxh_req_method(const dxh_req_t *r);
/* The path, percent-decoded, without the query string. */
const char *dxh_req_path(const dxh_req_t *r);
/* A query argument (decoded), a header (case-insensitive name) or a cookie; NULL if absent.
** Borrowed for the request. */
const char *dxh_req_arg(const dxh_req_t *r, const char *name);
const char *dxh_req_header(const dxh_req_t *r, const char *name);
const char *dxh_req_cookie(const dxh_req_t *r, const char *name);
/* The first query argument not in `allowed` (NULL-terminated), or NULL when all are. */
const char *dxh_req_unknown_arg(const dxh_req_t *r, const char *const *allowed);
/* The request body, NUL-terminated (empty for none); *len receives its length. */
const char *dxh_req_body(const dxh_req_t *r, size_t *len);
/* Largest request body accepted (bigger ones get 413 before the handler runs). */
#define DXH_MAX_BODY (1024 * 1024)

/* {===== responses =====} */

/* Add a header to the coming reply (copied; up to 4 per request). */
void dxh_req_add_header(dxh_req_t *r, const char *name, const char *value);
/* Reply with `len` bytes of `body` (borrowed: copied unless `is_static`, which must then outlive
** the server). Every reply carries no-store, nosniff and a same-origin content policy. */
void dxh_reply(dxh_req_t *r, int status, const char *content_type, const void *body, size_t len,
               int is_static);
/* Reply with JSON `o` (reference stolen; NULL answers 500). */
void dxh_reply_json(dxh_req_t *r, int status, json_t *o);
/* Reply {"error": MESSAGE} with MESSAGE = fmt formatted with one string argument. */
void dxh_reply_error(dxh_req_t *r, int status, const char *fmt, const char *detail);

#endif
