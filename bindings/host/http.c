/*
** http.c -- the program's HTTP server: libmicrohttpd (HTTP parsing, connections, limits) run
** from a libuv loop. MHD keeps its sockets in one epoll set; the loop watches that set's
** descriptor and calls MHD_run, so every handler runs on the loop thread and may use what the
** loop owns (the runtime, a client) without locks. The socket is bound here, so a refused
** address gets a message naming it.
*/
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "http.h"
#include "jsonout.h"

struct dxh_http_s {
  struct MHD_Daemon *d;
  uv_poll_t poll;   /* MHD's epoll descriptor */
  uv_timer_t timer; /* MHD's own timeouts (idle connections, data it buffered) */
  dxh_handler_fn fn;
  void *ud;
  int port;
  int closing;
  int open_handles; /* while closing: handles whose close callback has not run */
};

#define MAX_EXTRA_HEADERS 4

struct dxh_req_s {
  struct MHD_Connection *conn;
  const char *method, *path;
  char *body;
  size_t len;
  int too_big, replied;
  char *extra[MAX_EXTRA_HEADERS][2];
  int nextra;
};

/* {===== listen addresses =====} */

int dxh_listen_parse(const char *text, dxh_listen_t *out, char *msg, size_t msglen) {
  char host[64];
  const char *colon, *port_text;
  char *end;
  long port;
  memset(out, 0, sizeof *out);
  if (!text || !*text) {
    snprintf(msg, msglen, "listen address is empty (expected HOST:PORT such as 127.0.0.1:8080)");
    return -1;
  }
  if (text[0] == '[') { /* [IPv6]:PORT */
    const char *close = strchr(text, ']');
    if (!close || close[1] != ':' || (size_t)(close - text - 1) >= sizeof host) goto bad;
    snprintf(host, sizeof host, "%.*s", (int)(close - text - 1), text + 1);
    port_text = close + 2;
  } else {
    colon = strrchr(text, ':');
    if (!colon || colon == text || (size_t)(colon - text) >= sizeof host ||
        memchr(text, ':', (size_t)(colon - text)))
      goto bad;
    snprintf(host, sizeof host, "%.*s", (int)(colon - text), text);
    port_text = colon + 1;
  }
  errno = 0;
  port = strtol(port_text, &end, 10);
  if (!*port_text || *end || errno || port < 0 || port > 65535) {
    snprintf(msg, msglen, "listen address '%.200s' has no valid port (expected 0 to 65535)", text);
    return -1;
  }
  if (strcmp(host, "localhost") == 0) snprintf(host, sizeof host, "127.0.0.1");
  {
    struct sockaddr_in *v4 = (struct sockaddr_in *)&out->sa;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&out->sa;
    if (text[0] != '[' && inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
      v4->sin_family = AF_INET;
      v4->sin_port = htons((uint16_t)port);
      out->salen = sizeof *v4;
      out->loopback = (ntohl(v4->sin_addr.s_addr) >> 24) == 127;
      return 0;
    }
    if (text[0] == '[' && inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
      v6->sin6_family = AF_INET6;
      v6->sin6_port = htons((uint16_t)port);
      out->salen = sizeof *v6;
      out->loopback = IN6_IS_ADDR_LOOPBACK(&v6->sin6_addr);
      return 0;
    }
  }
bad:
  snprintf(msg, msglen, "listen address '%.200s' is not HOST:PORT (HOST an IP address, [IPv6] "
           "or localhost; e.g. 127.0.0.1:8080)", text);
  return -1;
}

/* {===== requests and replies =====} */

const char *dxh_req_method(const dxh_req_t *r) { return r->method; }
const char *dxh_req_path(const dxh_req_t *r) { return r->path; }

const char *dxh_req_arg(const dxh_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *dxh_req_header(const dxh_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, name);
}

const char *dxh_req_cookie(const dxh_req_t *r, const char *name) {
  return MHD_lookup_connection_value(r->conn, MHD_COOKIE_KIND, name);
}

typedef struct {
  const char *const *allowed;
  const char *unknown;
} args_check_t;

static enum MHD_Result note_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
  args_check_t *c = cls;
  const char *const *a;
  (void)kind;
  (void)value;
  for (a = c->allowed; *a && strcmp(*a, key) != 0; a++) {}
  if (!*a && !c->unknown) c->unknown = key;
  return MHD_YES;
}

const char *dxh_req_unknown_arg(const dxh_req_t *r, const char *const *allowed) {
  args_check_t c = {allowed, NULL};
  MHD_get_connection_values(r->conn, MHD_GET_ARGUMENT_KIND, note_arg, &c);
  return c.unknown;
}

const char *dxh_req_body(const dxh_req_t *r, size_t *len) {
  if (len) *len = r->len;
  return r->body ? r->body : "";
}

void dxh_req_add_header(dxh_req_t *r, const char *name, const char *value) {
  if (r->nextra == MAX_EXTRA_HEADERS) return;
  r->extra[r->nextra][0] = strdup(name);
  r->extra[r->nextra][1] = strdup(value);
  r->nextra++;
}

void dxh_reply(dxh_req_t *r, int status, const char *content_type, const void *body, size_t len,
               int is_static) {
  struct MHD_Response *resp;
  int i;
  if (r->replied) return;
  r->replied = 1;
  resp = MHD_create_response_from_buffer(len, (void *)body,
                                         is_static ? MHD_RESPMEM_PERSISTENT
                                                   : MHD_RESPMEM_MUST_COPY);
  if (!resp) return; /* out of memory: MHD closes the connection */
  MHD_add_response_header(resp, "Content-Type", content_type);
  MHD_add_response_header(resp, "Cache-Control", "no-store");
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(resp, "X-Frame-Options", "DENY");
  MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
  /* Only the console's own files: no inline script, nothing from elsewhere. */
  MHD_add_response_header(resp, "Content-Security-Policy",
                          "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
  for (i = 0; i < r->nextra; i++)
    if (r->extra[i][0] && r->extra[i][1])
      MHD_add_response_header(resp, r->extra[i][0], r->extra[i][1]);
  MHD_queue_response(r->conn, (unsigned)status, resp);
  MHD_destroy_response(resp);
}

void dxh_reply_json(dxh_req_t *r, int status, json_t *o) {
  char *s = o ? dx__json_dump(o) : NULL;
  json_decref(o);
  if (!s) {
    static const char oom[] = "{\"error\":\"out of memory\"}";
    dxh_reply(r, 500, "application/json", oom, sizeof oom - 1, 1);
    return;
  }
  dxh_reply(r, status, "application/json", s, strlen(s), 0);
  free(s);
}

void dxh_reply_error(dxh_req_t *r, int status, const char *fmt, const char *detail) {
  char msg[1024];
  snprintf(msg, sizeof msg, fmt, detail);
  /* The detail may be user text that is not UTF-8 (an id, a name): keep it, not a 500. */
  dxh_reply_json(r, status, json_pack("{s:o}", "error", dx__json_text(msg)));
}

static void req_free(dxh_req_t *r) {
  int i;
  for (i = 0; i < r->nextra; i++) {
    free(r->extra[i][0]);
    free(r->extra[i][1]);
  }
  free(r->body);
  free(r);
}

/* MHD calls this first with no data (set up), then with each piece of the body, then once
** with *upload_data_size == 0 (the request is complete: answer it). */
static enum MHD_Result on_access(void *cls, struct MHD_Connection *conn, const char *url,
                                 const char *method, const char *version,
                                 const char *upload_data, size_t *upload_data_size,
                                 void **con_cls) {
  dxh_http_t *h = cls;
  dxh_req_t *r = *con_cls;
  (void)version;
  if (!r) {
    if (!(r = calloc(1, sizeof *r))) return MHD_NO;
    r->conn = conn;
    *con_cls = r;
    return MHD_YES;
  }
  if (*upload_data_size) {
    size_t n = *upload_data_size;
    *upload_data_size = 0;
    if (r->too_big || r->len + n > DXH_MAX_BODY) {
      r->too_big = 1; /* read the rest and drop it: the client gets a 413, not a reset */
      return MHD_YES;
    }
    {
      char *b = realloc(r->body, r->len + n + 1);
      if (!b) return MHD_NO;
      memcpy(b + r->len, upload_data, n);
      r->body = b;
      r->len += n;
      b[r->len] = '\0';
    }
    return MHD_YES;
  }
  if (r->replied) return MHD_YES;
  r->method = method;
  r->path = url;
  if (r->too_big) {
    char limit[32];
    snprintf(limit, sizeof limit, "%d", DXH_MAX_BODY);
    dxh_reply_error(r, 413, "request body is larger than %s bytes", limit);
  } else {
    h->fn(h->ud, r);
    if (!r->replied) dxh_reply_error(r, 500, "%s", "the request was not answered");
  }
  return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
  (void)cls;
  (void)conn;
  (void)toe;
  if (*con_cls) req_free(*con_cls);
  *con_cls = NULL;
}

/* {===== the loop side =====} */

static void drive(dxh_http_t *h);

static void on_timer(uv_timer_t *t) { drive(t->data); }

static void on_poll(uv_poll_t *p, int status, int events) {
  (void)status;
  (void)events;
  drive(p->data);
}

/* Let MHD do what is ready, then sleep until its next deadline (0: more is buffered). */
static void drive(dxh_http_t *h) {
  MHD_UNSIGNED_LONG_LONG ms;
  if (h->closing) return;
  MHD_run(h->d);
  if (MHD_get_timeout(h->d, &ms) == MHD_YES)
    uv_timer_start(&h->timer, on_timer, ms > 60000 ? 60000 : (uint64_t)ms, 0);
  else
    uv_timer_stop(&h->timer);
}

static int bind_socket(const dxh_listen_t *addr, int *port, char *msg, size_t msglen) {
  char text[INET6_ADDRSTRLEN];
  int one = 1, fd, p;
  struct sockaddr_storage got;
  socklen_t gotlen = sizeof got;
  const void *ip = addr->sa.ss_family == AF_INET
                       ? (const void *)&((const struct sockaddr_in *)&addr->sa)->sin_addr
                       : (const void *)&((const struct sockaddr_in6 *)&addr->sa)->sin6_addr;
  p = ntohs(addr->sa.ss_family == AF_INET ? ((const struct sockaddr_in *)&addr->sa)->sin_port
                                          : ((const struct sockaddr_in6 *)&addr->sa)->sin6_port);
  inet_ntop(addr->sa.ss_family, ip, text, sizeof text);
  fd = socket(addr->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    snprintf(msg, msglen, "cannot create a socket for %s: %s", text, strerror(errno));
    return -1;
  }
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (const struct sockaddr *)&addr->sa, addr->salen) != 0 || listen(fd, 64) != 0) {
    snprintf(msg, msglen, "cannot listen on %s port %d: %s", text, p, strerror(errno));
    close(fd);
    return -1;
  }
  if (getsockname(fd, (struct sockaddr *)&got, &gotlen) == 0)
    p = ntohs(got.ss_family == AF_INET ? ((struct sockaddr_in *)&got)->sin_port
                                       : ((struct sockaddr_in6 *)&got)->sin6_port);
  *port = p;
  return fd;
}

int dxh_http_start(uv_loop_t *loop, const dxh_listen_t *addr, dxh_handler_fn fn, void *ud,
                   dxh_http_t **out, char *msg, size_t msglen) {
  dxh_http_t *h = calloc(1, sizeof *h);
  const union MHD_DaemonInfo *info;
  int fd;
  *out = NULL;
  if (!h) {
    snprintf(msg, msglen, "out of memory");
    return -1;
  }
  if ((fd = bind_socket(addr, &h->port, msg, msglen)) < 0) {
    free(h);
    return -1;
  }
  h->fn = fn;
  h->ud = ud;
  h->d = MHD_start_daemon(MHD_USE_EPOLL | (addr->sa.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0),
                          0, NULL, NULL, on_access, h,
                          MHD_OPTION_LISTEN_SOCKET, fd,
                          MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                          MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                          MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                          MHD_OPTION_END);
  info = h->d ? MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_EPOLL_FD) : NULL;
  if (!info) {
    snprintf(msg, msglen, "cannot start the HTTP server (libmicrohttpd refused its options)");
    if (h->d) MHD_stop_daemon(h->d);
    close(fd);
    free(h);
    return -1;
  }
  uv_poll_init(loop, &h->poll, info->epoll_fd);
  uv_timer_init(loop, &h->timer);
  h->poll.data = h->timer.data = h;
  uv_poll_start(&h->poll, UV_READABLE, on_poll);
  *out = h;
  return 0;
}

int dxh_http_port(const dxh_http_t *h) { return h->port; }

/* Both handles live inside h: free it when the second one has closed (libuv does not promise
** the order of close callbacks). */
static void on_closed(uv_handle_t *handle) {
  dxh_http_t *h = handle->data;
  if (--h->open_handles == 0) free(h);
}

void dxh_http_close(dxh_http_t *h) {
  if (!h || h->closing) return;
  h->closing = 1;
  h->open_handles = 2;
  uv_close((uv_handle_t *)&h->poll, on_closed);
  uv_close((uv_handle_t *)&h->timer, on_closed);
  /* Closes the connections and the epoll descriptor the poll handle no longer watches. The
  ** listen socket was ours: MHD leaves it open. */
  {
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    MHD_stop_daemon(h->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
  }
}
