/*
** delay_proxy.c -- a TCP proxy that adds a fixed delay to each direction: a stand-in for a
** network link with latency where the kernel has no netem qdisc (bench/netns --proxy-delay-ms).
**
**   delay_proxy --listen HOST:PORT --to HOST:PORT|/unix/socket --delay-us US
**
** Every chunk read from one side is written to the other side US microseconds after it arrived,
** in order, without holding later chunks behind it (a pipelined link, not a slow one): a
** request/response exchange costs 2*US more and bandwidth is unchanged. One thread, epoll, a
** timerfd for the earliest chunk due. Prints "listening HOST:PORT" once it accepts; runs until
** killed. A benchmark tool: a write that would block waits for the socket (poll).
*/
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef struct chunk_s {
  uint64_t due_ns;
  size_t len;               /* 0: end of stream */
  struct chunk_s *next;
  char data[];
} chunk_t;

typedef struct dir_s {
  int from, to;
  chunk_t *head, *tail;
  int eof;                  /* from has closed: nothing more is read */
} dir_t;

typedef struct pair_s {
  dir_t d[2];               /* client -> server, server -> client */
  int closed;
  struct pair_s *next;
} pair_t;

static uint64_t g_delay_ns;
static pair_t *g_pairs;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
  fprintf(stderr, "delay_proxy: %s: %s\n", what, strerror(errno));
  exit(1);
}

static int split_host(const char *s, struct sockaddr_in *sa) {
  char host[256];
  const char *colon = strrchr(s, ':');
  if (!colon || (size_t)(colon - s) >= sizeof host) return -1;
  memcpy(host, s, (size_t)(colon - s));
  host[colon - s] = 0;
  memset(sa, 0, sizeof *sa);
  sa->sin_family = AF_INET;
  sa->sin_port = htons((uint16_t)atoi(colon + 1));
  return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static int connect_to(const char *to) {
  int fd, one = 1;
  if (to[0] == '/') {
    struct sockaddr_un su;
    memset(&su, 0, sizeof su);
    su.sun_family = AF_UNIX;
    snprintf(su.sun_path, sizeof su.sun_path, "%s", to);
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) return -1;
    if (connect(fd, (struct sockaddr *)&su, sizeof su) == 0) return fd;
  } else {
    struct sockaddr_in sa;
    if (split_host(to, &sa) || (fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
      return -1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0) return fd;
  }
  close(fd);
  return -1;
}

/* Write all of buf (waiting for room when the socket is full); -1 when the peer is gone. */
static int write_all(int fd, const char *buf, size_t n) {
  while (n) {
    ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
    if (w > 0) {
      buf += w;
      n -= (size_t)w;
    } else if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, 1000);
    } else {
      return -1;
    }
  }
  return 0;
}

static void pair_close(pair_t *p) {
  chunk_t *c, *n;
  int i;
  if (p->closed) return;
  p->closed = 1;
  for (i = 0; i < 2; i++)
    for (c = p->d[i].head; c; c = n) {
      n = c->next;
      free(c);
    }
  close(p->d[0].from);
  close(p->d[1].from);
}

/* Deliver the chunks of d that are due; returns the next due time (0: none queued). */
static uint64_t deliver(pair_t *p, dir_t *d, uint64_t now) {
  while (d->head && d->head->due_ns <= now) {
    chunk_t *c = d->head;
    if (c->len == 0) shutdown(d->to, SHUT_WR);
    else if (write_all(d->to, c->data, c->len)) {
      pair_close(p);
      return 0;
    }
    d->head = c->next;
    if (!d->head) d->tail = NULL;
    free(c);
  }
  return d->head ? d->head->due_ns : 0;
}

static void read_side(pair_t *p, dir_t *d, int ep) {
  char buf[65536];
  ssize_t n = recv(d->from, buf, sizeof buf, 0);
  chunk_t *c;
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) { /* end of stream (or an error): pass it on after the delay, read no more */
    d->eof = 1;
    epoll_ctl(ep, EPOLL_CTL_DEL, d->from, NULL);
    if (p->d[0].eof && p->d[1].eof && !p->d[0].head && !p->d[1].head) {
      pair_close(p);
      return;
    }
    n = 0;
  }
  if (!(c = malloc(sizeof *c + (size_t)n))) die("malloc");
  c->due_ns = now_ns() + g_delay_ns;
  c->len = (size_t)n;
  c->next = NULL;
  memcpy(c->data, buf, (size_t)n);
  if (d->tail) d->tail->next = c;
  else d->head = c;
  d->tail = c;
}

int main(int argc, char **argv) {
  const char *listen_at = NULL, *to = NULL;
  struct sockaddr_in sa;
  struct epoll_event ev, evs[64];
  int i, ls, ep, tfd, one = 1;
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--listen")) listen_at = argv[i + 1];
    else if (!strcmp(argv[i], "--to")) to = argv[i + 1];
    else if (!strcmp(argv[i], "--delay-us")) g_delay_ns = strtoull(argv[i + 1], NULL, 10) * 1000ull;
    else break;
  }
  if (!listen_at || !to || i < argc || split_host(listen_at, &sa)) {
    fprintf(stderr, "usage: delay_proxy --listen IPV4:PORT --to IPV4:PORT|/unix/path "
                    "--delay-us US\n");
    return 2;
  }
  if ((ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) die("socket");
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, 128)) die("listen");
  if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0) die("epoll");
  if ((tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK)) < 0) die("timerfd");
  ev.events = EPOLLIN;
  ev.data.ptr = NULL; /* the listener */
  epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
  ev.data.ptr = &tfd; /* the timer */
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
  printf("listening %s\n", listen_at);
  fflush(stdout);
  for (;;) {
    int n = epoll_wait(ep, evs, 64, -1), k;
    uint64_t now, next = 0;
    pair_t **pp;
    struct itimerspec its;
    if (n < 0 && errno != EINTR) die("epoll_wait");
    for (k = 0; k < n; k++) {
      void *tag = evs[k].data.ptr;
      if (tag == NULL) { /* accept */
        int c = accept4(ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK), s;
        pair_t *p;
        if (c < 0) continue;
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if ((s = connect_to(to)) < 0) {
          fprintf(stderr, "delay_proxy: cannot reach %s: %s\n", to, strerror(errno));
          close(c);
          continue;
        }
        if (!(p = calloc(1, sizeof *p))) die("calloc");
        p->d[0].from = c; p->d[0].to = s;
        p->d[1].from = s; p->d[1].to = c;
        p->next = g_pairs;
        g_pairs = p;
        ev.events = EPOLLIN;
        ev.data.ptr = &p->d[0];
        epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
        ev.data.ptr = &p->d[1];
        epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
      } else if (tag == &tfd) {
        uint64_t x;
        if (read(tfd, &x, sizeof x) < 0) { /* nothing: spurious */ }
      } else {
        dir_t *d = tag;
        pair_t *p;
        for (p = g_pairs; p && &p->d[0] != d && &p->d[1] != d; p = p->next) continue;
        if (p && !p->closed) read_side(p, d, ep);
      }
    }
    now = now_ns();
    for (pp = &g_pairs; *pp;) { /* deliver what is due; drop closed pairs */
      pair_t *p = *pp;
      for (i = 0; i < 2 && !p->closed; i++) {
        uint64_t due = deliver(p, &p->d[i], now);
        if (due && (!next || due < next)) next = due;
      }
      if (!p->closed && p->d[0].eof && p->d[1].eof && !p->d[0].head && !p->d[1].head)
        pair_close(p);
      if (p->closed) {
        *pp = p->next;
        free(p);
      } else {
        pp = &p->next;
      }
    }
    memset(&its, 0, sizeof its);
    if (next) {
      its.it_value.tv_sec = (time_t)(next / 1000000000ull);
      its.it_value.tv_nsec = (long)(next % 1000000000ull);
    }
    timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
  }
}
