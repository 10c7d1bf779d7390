/*
** pg_conn.c -- connections (one per calling thread, never across fork), error mapping,
** transactions and group commit, prepared statement execution, parameter and column helpers.
*/
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "providers/pg/pg_internal.h"
#include "util.h"

/* {===== helpers =====} */

int dx__pg_nomem(dx_error_t *err) { return dx_error_set(err, DX_ENOMEM, "out of memory"); }

int64_t dx__sat_add(int64_t a, int64_t b) {
  if (b > 0 && a > INT64_MAX - b) return INT64_MAX;
  return a + b;
}

/* FNV-1a over a, '\0', b: keys for advisory locks. */
uint64_t dx__pg_hash(const char *a, const char *b) {
  uint64_t h = dx__fnv1a64(DX_FNV1A64_BASIS, a) * UINT64_C(1099511628211); /* the '\0' */
  return b ? dx__fnv1a64(h, b) : h;
}

void dx__qp_init(qp_t *q) { memset(q, 0, sizeof *q); }

void dx__qp_i64(qp_t *q, int64_t v) {
  snprintf(q->num[q->n], sizeof q->num[0], "%lld", (long long)v);
  q->v[q->n] = q->num[q->n];
  q->len[q->n] = 0;
  q->fmt[q->n++] = 0;
}

void dx__qp_str(qp_t *q, const char *s) {
  q->v[q->n] = s;
  q->len[q->n] = 0;
  q->fmt[q->n++] = 0;
}

void dx__qp_bin(qp_t *q, const void *b, size_t n) {
  q->v[q->n] = b;
  q->len[q->n] = (int)n;
  q->fmt[q->n++] = 1;
}

/* Binary array layout (PostgreSQL's array_recv): ndim, has-nulls flag, element type oid, then
** per dimension its length and lower bound, then each element as a length (-1: NULL) and its
** bytes. The header is written last: HDR bytes are kept free for it. */
#define ARR_HDR 20

static void put32(unsigned char *b, uint32_t v) {
  b[0] = (unsigned char)(v >> 24);
  b[1] = (unsigned char)(v >> 16);
  b[2] = (unsigned char)(v >> 8);
  b[3] = (unsigned char)v;
}

static unsigned char *arr_room(pg_arr_t *a, size_t n) {
  if (a->oom) return NULL;
  if (a->len + n > a->cap) {
    size_t cap = a->cap ? a->cap : 256;
    unsigned char *b;
    while (cap < a->len + n) cap *= 2;
    if (!(b = realloc(a->b, cap))) {
      a->oom = 1;
      return NULL;
    }
    a->b = b;
    a->cap = cap;
  }
  a->len += n;
  return a->b + a->len - n;
}

void dx__arr_init(pg_arr_t *a, int oid) {
  memset(a, 0, sizeof *a);
  a->oid = oid;
  arr_room(a, ARR_HDR);
}

void dx__arr_bytes(pg_arr_t *a, const void *p, size_t n) {
  unsigned char *b = arr_room(a, 4 + (p ? n : 0));
  if (!b) return;
  put32(b, p ? (uint32_t)n : UINT32_C(0xffffffff));
  if (p && n) memcpy(b + 4, p, n);
  if (!p) a->nulls = 1;
  a->n++;
}

void dx__arr_str(pg_arr_t *a, const char *s) {
  char *keep = NULL;
  const char *t = dx__pg_text(s, &keep);
  if (s && !t) a->oom = 1;
  else dx__arr_bytes(a, t, t ? strlen(t) : 0);
  free(keep);
}

int dx__pg_lookup_id(tx_t *t, const char *inst) {
  if (!inst || dx__utf8_valid(inst)) return 0;
  return dx_error_set(t->err, DX_ENOTFOUND, "instance '%s' not found", inst);
}

const char *dx__pg_text(const char *s, char **keep) {
  size_t n = s ? strlen(s) : 0;
  *keep = NULL;
  if (!s || dx__utf8_valid_prefix(s, n) == n) return s;
  return *keep = dx__utf8_fix(s, n, NULL);
}

/* Every element quoted, with '"' and '\\' escaped, so any text is one element. */
#define TEXT_AT(v, i, stride) (*(const char *const *)((const char *)(v) + (i) * (stride)))
char *dx__pg_text_array(const void *v, size_t n, size_t stride) {
  size_t i, len = 3, o = 0;
  char *s;
  for (i = 0; i < n; i++) len += 2 * strlen(TEXT_AT(v, i, stride)) + 3;
  if (!(s = malloc(len))) return NULL;
  s[o++] = '{';
  for (i = 0; i < n; i++) {
    const char *c = TEXT_AT(v, i, stride);
    if (i) s[o++] = ',';
    s[o++] = '"';
    for (; *c; c++) {
      if (*c == '"' || *c == '\\') s[o++] = '\\';
      s[o++] = *c;
    }
    s[o++] = '"';
  }
  s[o++] = '}';
  s[o] = 0;
  return s;
}
#undef TEXT_AT

void dx__arr_i64(pg_arr_t *a, int64_t v) {
  unsigned char x[8];
  uint64_t u = (uint64_t)v;
  int i;
  for (i = 7; i >= 0; i--, u >>= 8) x[i] = (unsigned char)u;
  dx__arr_bytes(a, x, 8);
}

int dx__arr_done(pg_arr_t *a, dx_error_t *err) {
  if (a->oom) return dx__pg_nomem(err);
  put32(a->b, a->n ? 1 : 0);
  put32(a->b + 4, (uint32_t)a->nulls);
  put32(a->b + 8, (uint32_t)a->oid);
  if (a->n) { /* one dimension of n elements, lower bound 1 */
    put32(a->b + 12, (uint32_t)a->n);
    put32(a->b + 16, 1);
  } else { /* an empty array has no dimensions: move nothing, just end the header early */
    a->len = 12;
  }
  return 0;
}

void dx__arr_free(pg_arr_t *a) {
  free(a->b);
  memset(a, 0, sizeof *a);
}

void dx__qp_arr(qp_t *q, const pg_arr_t *a) { dx__qp_bin(q, a->b, a->len); }

int dx__col_null(const PGresult *r, int row, int col) { return PQgetisnull(r, row, col); }

/* Integer columns are all int8 (binary results: 8 bytes, big-endian). */
int64_t dx__col_i64(const PGresult *r, int row, int col) {
  const unsigned char *b;
  uint64_t v = 0;
  int i, len;
  if (PQgetisnull(r, row, col)) return 0;
  b = (const unsigned char *)PQgetvalue(r, row, col);
  len = PQgetlength(r, row, col);
  for (i = 0; i < len && i < 8; i++) v = (v << 8) | b[i];
  if (len == 4 && (v & 0x80000000u)) v |= UINT64_C(0xffffffff00000000);
  return (int64_t)v;
}

char *dx__col_str(const PGresult *r, int row, int col, int *oom) {
  char *s;
  int len;
  if (PQgetisnull(r, row, col)) return NULL;
  len = PQgetlength(r, row, col);
  if (!(s = malloc((size_t)len + 1))) {
    *oom = 1;
    return NULL;
  }
  memcpy(s, PQgetvalue(r, row, col), (size_t)len);
  s[len] = 0;
  return s;
}

/* {===== errors =====} */

/* Deadlocks, serialization failures and lost connections: the caller retries the batch. */
static int sqlstate_code(const char *st) {
  if (!st) return DX_ESTORE;
  if (!strcmp(st, "40P01") || !strcmp(st, "40001") || !strncmp(st, "08", 2) ||
      !strcmp(st, "57P01") || !strcmp(st, "57P02") || !strcmp(st, "57P03"))
    return DX_ERETRY;
  if (!strcmp(st, "53100")) return DX_EFULL;
  return DX_ESTORE;
}

static void trim(char *s) {
  size_t n = strlen(s);
  while (n && (s[n - 1] == '\n' || s[n - 1] == ' ')) s[--n] = 0;
}

int dx__pg_fail(PGconn *conn, PGresult *res, const char *what, dx_error_t *err) {
  char msg[400];
  int code;
  const char *st = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
  snprintf(msg, sizeof msg, "%s", res && *PQresultErrorMessage(res) ? PQresultErrorMessage(res)
                                                                     : PQerrorMessage(conn));
  trim(msg);
  code = sqlstate_code(st);
  if (PQstatus(conn) == CONNECTION_BAD) code = DX_ERETRY;
  return dx_error_set(err, code, "PostgreSQL %s failed%s%s: %s", what, st ? " with " : "",
                      st ? st : "", msg);
}

/* {===== connections =====} */

static void quiet_notices(void *arg, const char *message) {
  (void)arg;
  (void)message;
}

/* Classify a failed connection attempt: unreachable server vs bad credentials. */
static int connect_error(PGconn *conn, const char *conninfo, dx_error_t *err) {
  char msg[400];
  const char *host = conn ? PQhost(conn) : NULL;
  int code = DX_EIO;
  snprintf(msg, sizeof msg, "%s", conn ? PQerrorMessage(conn) : "out of memory");
  trim(msg);
  if (strstr(msg, "authentication failed") || strstr(msg, "role \"") ||
      strstr(msg, "password") || (strstr(msg, "database \"") && strstr(msg, "does not exist")))
    code = DX_EINVAL;
  (void)conninfo;
  return dx_error_set(err, code, "cannot connect to PostgreSQL%s%s: %s",
                      host && *host ? " at " : "", host && *host ? host : "", msg);
}

int dx__pg_connect(const char *conninfo, const char *schema_q, PGconn **out, dx_error_t *err) {
  PGconn *conn = PQconnectdb(conninfo);
  PGresult *res;
  char sql[256];
  *out = NULL;
  if (!conn || PQstatus(conn) != CONNECTION_OK) {
    int rc = connect_error(conn, conninfo, err);
    if (conn) PQfinish(conn);
    return rc;
  }
  PQsetNoticeProcessor(conn, quiet_notices, NULL);
  snprintf(sql, sizeof sql, "SET search_path TO %s; SET client_min_messages TO warning",
           schema_q);
  res = PQexec(conn, sql);
  if (PQresultStatus(res) != PGRES_COMMAND_OK) {
    int rc = dx__pg_fail(conn, res, "session setup", err);
    PQclear(res);
    PQfinish(conn);
    return rc;
  }
  PQclear(res);
  *out = conn;
  return 0;
}

/* Finish a connection this process opened; an inherited one is only forgotten (finishing it
** would end the parent's session on the shared socket). */
static void conn_drop(pg_conn_t *c) {
  if (c->conn && c->pid == getpid()) PQfinish(c->conn);
  c->conn = NULL;
  c->pending = 0;
  memset(c->prepared, 0, sizeof c->prepared);
}

static void conn_unlink(pg_t *p, pg_conn_t *c) {
  pg_conn_t **pp;
  for (pp = &p->conns; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
}

/* Close an unlinked connection and free it with its buffers. */
static void conn_free(pg_conn_t *c) {
  conn_drop(c);
  dx__pg_orch_unbuffer_drop(c);
  free(c->pend);
  free(c->pend_out);
  free(c);
}

/* pthread key destructor: the thread ended. */
static void conn_thread_exit(void *arg) {
  pg_conn_t *c = arg;
  pg_t *p = c->owner;
  pthread_mutex_lock(&p->mu);
  conn_unlink(p, c);
  pthread_mutex_unlock(&p->mu);
  conn_free(c);
}

int dx__pg_conn_key_init(pg_t *p) { return pthread_key_create(&p->key, conn_thread_exit); }

void dx__pg_conns_close(pg_t *p) {
  pg_conn_t *c, *next;
  pthread_key_delete(p->key); /* no destructor runs after this */
  pthread_mutex_lock(&p->mu);
  for (c = p->conns; c; c = next) {
    next = c->next;
    conn_free(c);
  }
  p->conns = NULL;
  pthread_mutex_unlock(&p->mu);
}

/* Connect again after losing the connection. A server that is restarting is waited for a
** little (the store thread has nothing else to do meanwhile); after that, calls fail fast
** with DX_ERETRY for a short while instead of each waiting again. */
#define RECONNECT_WAIT_MS 2000
#define RECONNECT_PAUSE_MS 500

static int64_t mono_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int reconnect(pg_t *p, PGconn **out, dx_error_t *err) {
  int64_t start = mono_ms(), until;
  int rc;
  pthread_mutex_lock(&p->mu);
  until = p->retry_after;
  pthread_mutex_unlock(&p->mu);
  if (start < until)
    return dx_error_set(err, DX_ERETRY, "PostgreSQL is unavailable; reconnecting");
  for (;;) {
    if ((rc = dx__pg_connect(p->conninfo, p->schema_q, out, err)) != DX_EIO) return rc;
    if (mono_ms() - start >= RECONNECT_WAIT_MS) break;
    usleep(100 * 1000);
  }
  pthread_mutex_lock(&p->mu);
  p->retry_after = mono_ms() + RECONNECT_PAUSE_MS;
  pthread_mutex_unlock(&p->mu);
  if (err) err->code = DX_ERETRY; /* the message says why; the caller retries the batch */
  return DX_ERETRY;
}

/* An idle connection has nothing to read: if its socket is readable, the server said goodbye
** (restart, terminated backend). Find out before starting a transaction on it, so the first
** call after a server restart reconnects instead of failing. */
static void check_idle(pg_conn_t *c) {
  struct pollfd pf;
  if (!c->conn || c->pending || c->in_batch) return;
  pf.fd = PQsocket(c->conn);
  pf.events = POLLIN;
  pf.revents = 0;
  if (pf.fd < 0 || poll(&pf, 1, 0) != 1) return;
  if (!PQconsumeInput(c->conn) || PQstatus(c->conn) == CONNECTION_BAD) conn_drop(c);
}

/* The calling thread's connection, (re)connected when needed. */
int dx__pg_conn_get(pg_t *p, pg_conn_t **out, dx_error_t *err) {
  pg_conn_t *c = pthread_getspecific(p->key);
  int rc;
  if (c && c->pid == getpid()) check_idle(c);
  if (c && c->pid != getpid()) { /* inherited across fork: forget it, start fresh */
    dx__pg_orch_unbuffer_drop(c); /* the parent's locks: never ours to release */
    c->conn = NULL;
    c->in_batch = 0;
    c->batch_rc = 0;
    c->pending = 0;
    memset(c->prepared, 0, sizeof c->prepared);
    c->pid = getpid();
  }
  if (!c) {
    if (!(c = calloc(1, sizeof *c))) return dx__pg_nomem(err);
    c->owner = p;
    c->pid = getpid();
    pthread_mutex_lock(&p->mu);
    c->next = p->conns;
    p->conns = c;
    pthread_mutex_unlock(&p->mu);
    pthread_setspecific(p->key, c);
  }
  if (!c->conn) {
    if (c->in_batch) {
      *out = c;
      return 0; /* the batch lost its connection: the caller reports batch_rc */
    }
    if ((rc = reconnect(p, &c->conn, err))) return rc;
    if (!PQenterPipelineMode(c->conn)) {
      rc = dx__pg_fail(c->conn, NULL, "pipeline mode", err);
      PQfinish(c->conn);
      c->conn = NULL;
      return rc;
    }
    memset(c->prepared, 0, sizeof c->prepared);
    c->pending = 0;
    c->reprepare = 0;
  }
  *out = c;
  return 0;
}

/* {===== statements: one pipeline per connection =====} */
/*
** Connections run in libpq pipeline mode. A statement whose result the caller does not need (a
** write) is only queued; the results of queued statements are read at the next statement that
** needs one, or at COMMIT, so a method's writes travel with the next read in one round trip.
** An error in a queued statement fails the transaction it belongs to: the method's own (its
** commit returns the error) or the batch (commit returns it; later calls report it at once).
*/

#define PG_PIPELINE_MAX 256 /* read results at least this often (bounded socket buffers) */

/* Queue one statement: prepared statement `id`, or `sql` without parameters when id < 0. */
static int send_stmt(pg_conn_t *c, int id, const char *sql, const qp_t *qp, PGresult **out,
                     dx_error_t *err) {
  const char *what = id >= 0 ? dx__pg_stmt_name((pg_stmt_t)id) : sql;
  int ok = 1, rc;
  if (c->pending + 2 > c->pend_cap) {
    size_t cap = c->pend_cap ? (size_t)c->pend_cap * 2 : 64;
    const char **v = realloc(c->pend, cap * sizeof *v);
    PGresult ***o;
    if (!v) return dx__pg_nomem(err);
    c->pend = v;
    if (!(o = realloc(c->pend_out, cap * sizeof *o))) return dx__pg_nomem(err);
    c->pend_out = o;
    c->pend_cap = (int)cap;
  }
  if (id >= 0 && !c->prepared[id]) {
    ok = PQsendPrepare(c->conn, what, dx__pg_sql((pg_stmt_t)id), 0, NULL);
    if (ok) {
      c->prepared[id] = 1;
      c->pend_out[c->pending] = NULL;
      c->pend[c->pending++] = what;
    }
  }
  if (ok && id >= 0)
    ok = PQsendQueryPrepared(c->conn, what, qp ? qp->n : 0, qp ? qp->v : NULL,
                             qp ? qp->len : NULL, qp ? qp->fmt : NULL, 1);
  else if (ok)
    ok = PQsendQueryParams(c->conn, sql, 0, NULL, NULL, NULL, NULL, 1);
  if (ok) {
    if (out) *out = NULL;
    c->pend_out[c->pending] = out;
    c->pend[c->pending++] = what;
    return 0;
  }
  rc = dx__pg_fail(c->conn, NULL, what, err);
  conn_drop(c); /* the pipeline's state is unknown: start over on a new connection */
  return rc == DX_ESTORE ? dx_error_set(err, DX_ERETRY, "%s", err ? err->msg : "") : rc;
}

/* Read the results of every queued statement; with `deliver`, hand each to the out-pointer it
** was queued with (only dx__pg_qwait delivers: a method's queued reads belong to that method's
** frame, anything else discards them). Returns the first error (the statements after it in
** the transaction were skipped); on error no result is handed out. */
static int drain(pg_conn_t *c, int deliver, dx_error_t *err) {
  int i, n = c->pending, rc = 0;
  PGresult *res;
  __atomic_fetch_add(&c->owner->round_trips, 1, __ATOMIC_RELAXED);
  if (!PQpipelineSync(c->conn)) {
    rc = dx__pg_fail(c->conn, NULL, "pipeline sync", err);
    conn_drop(c);
    return DX_ERETRY;
  }
  for (i = 0; i < n; i++) {
    ExecStatusType st;
    if (!(res = PQgetResult(c->conn))) break;
    st = PQresultStatus(res);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      c->reprepare = 1; /* a skipped or failed Parse leaves a statement unprepared */
      if (!rc && st != PGRES_PIPELINE_ABORTED) rc = dx__pg_fail(c->conn, res, c->pend[i], err);
      PQclear(res);
    } else if (deliver && c->pend_out[i]) {
      *c->pend_out[i] = res;
    } else {
      PQclear(res);
    }
    if (PQstatus(c->conn) == CONNECTION_BAD) break;
    while ((res = PQgetResult(c->conn)) != NULL) PQclear(res); /* end of this statement */
  }
  if (i == n && PQstatus(c->conn) != CONNECTION_BAD) {
    res = PQgetResult(c->conn); /* the sync */
    if (PQresultStatus(res) != PGRES_PIPELINE_SYNC && !rc)
      rc = dx__pg_fail(c->conn, res, "pipeline sync", err);
    PQclear(res);
  }
  if (PQstatus(c->conn) == CONNECTION_BAD) {
    if (!rc) rc = dx__pg_fail(c->conn, NULL, "connection", err);
    rc = DX_ERETRY;
    if (err) err->code = DX_ERETRY;
  }
  for (i = 0; rc && deliver && i < n; i++)
    if (c->pend_out[i] && *c->pend_out[i]) {
      PQclear(*c->pend_out[i]);
      *c->pend_out[i] = NULL;
    }
  c->pending = 0;
  if (rc == DX_ERETRY && c->conn && PQstatus(c->conn) == CONNECTION_BAD) conn_drop(c);
  return rc;
}

/* Run `sql` (no parameters) after everything queued, and wait for all of it. */
static int simple(pg_conn_t *c, const char *sql, dx_error_t *err) {
  int rc = send_stmt(c, -1, sql, NULL, NULL, err);
  return rc ? rc : drain(c, 0, err);
}

/* End the connection's transaction, whatever state it is in (errors ignored). */
static void rollback_now(pg_conn_t *c) {
  dx_error_t ignored;
  c->notify = 0;
  if (c->conn) simple(c, "ROLLBACK", &ignored);
}

static int batch_failed(pg_conn_t *c, dx_error_t *err) {
  return dx_error_set(err, c->batch_rc, "an earlier call in this batch failed: %s",
                      c->batch_msg);
}

int dx__pg_tx_poison(tx_t *t, int rc) {
  if (t->c && t->c->in_batch && !t->c->batch_rc && rc) {
    t->c->batch_rc = rc;
    snprintf(t->c->batch_msg, sizeof t->c->batch_msg, "%.500s", t->err ? t->err->msg : "");
  }
  return rc;
}

/* The method failed: an own transaction ends now (keeping the error), a batch is poisoned. */
static int q_failed(tx_t *t, int rc) {
  if (t->own) {
    rollback_now(t->c);
    t->own = 0;
  }
  return dx__pg_tx_poison(t, rc);
}

int dx__pg_qsend(tx_t *t, pg_stmt_t id, const qp_t *qp, PGresult **out) {
  pg_conn_t *c = t->c;
  int rc;
  if (out) *out = NULL;
  if (c->batch_rc) return batch_failed(c, t->err);
  if (!c->conn) return dx__pg_tx_poison(t, dx_error_set(t->err, DX_ERETRY, "connection lost"));
  if ((rc = send_stmt(c, (int)id, NULL, qp, out, t->err))) return q_failed(t, rc);
  if (!out && c->pending >= PG_PIPELINE_MAX && (rc = drain(c, 0, t->err)))
    return q_failed(t, rc);
  return 0;
}

int dx__pg_qwait(tx_t *t) {
  int rc;
  if (t->c->batch_rc) return batch_failed(t->c, t->err);
  if (!t->c->conn) return dx__pg_tx_poison(t, dx_error_set(t->err, DX_ERETRY, "connection lost"));
  return (rc = drain(t->c, 1, t->err)) ? q_failed(t, rc) : 0;
}

int dx__pg_q(tx_t *t, pg_stmt_t id, const qp_t *qp, PGresult **out) {
  int rc = dx__pg_qsend(t, id, qp, out);
  return rc || !out ? rc : dx__pg_qwait(t);
}

/* {===== transactions =====} */

/* After a failure, statements are prepared afresh (a Parse may have been skipped). */
static int reprepare_if_needed(pg_conn_t *c, dx_error_t *err) {
  int rc;
  if (!c->reprepare) return 0;
  if ((rc = send_stmt(c, -1, "DEALLOCATE ALL", NULL, NULL, err))) return rc;
  memset(c->prepared, 0, sizeof c->prepared);
  c->reprepare = 0;
  return 0;
}

/* Open a transaction with `begin` (queued: no round trip). */
static int open_tx_as(pg_conn_t *c, const char *begin, dx_error_t *err) {
  int rc;
  c->notify = 0;
  if ((rc = reprepare_if_needed(c, err))) return rc;
  return send_stmt(c, -1, begin, NULL, NULL, err);
}

static int open_tx(pg_conn_t *c, dx_error_t *err) { return open_tx_as(c, "BEGIN", err); }

/* The start shared by a transaction and a read: a connection, or the open batch's failure.
** The caller checks t->c->in_batch after a 0 return (inside a batch nothing more is sent). */
static int tx_attach(pg_t *p, tx_t *t, dx_error_t *err) {
  int rc;
  memset(t, 0, sizeof *t);
  t->p = p;
  t->err = err;
  if ((rc = dx__pg_conn_get(p, &t->c, err))) return rc;
  return t->c->in_batch && t->c->batch_rc ? batch_failed(t->c, err) : 0;
}

int dx__pg_tx_begin(pg_t *p, tx_t *t, dx_error_t *err) {
  int rc;
  if ((rc = tx_attach(p, t, err)) || t->c->in_batch) return rc;
  if ((rc = open_tx(t->c, err))) return rc;
  t->own = 1;
  return 0;
}

int dx__pg_read_begin(pg_t *p, tx_t *t, dx_error_t *err) {
  int rc;
  if ((rc = tx_attach(p, t, err)) || t->c->in_batch) return rc;
  return reprepare_if_needed(t->c, err);
}

int dx__pg_snapshot_begin(pg_t *p, tx_t *t, dx_error_t *err) {
  int rc;
  if ((rc = tx_attach(p, t, err)) || t->c->in_batch) return rc;
  if ((rc = open_tx_as(t->c, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", err))) return rc;
  t->own = 1;
  return 0;
}

/* COMMIT, queued behind the transaction's writes, in one round trip: optionally without
** waiting for the WAL flush, and with a NOTIFY (delivered at commit, folded per transaction)
** when the transaction made work visible. */
static int commit_send(pg_conn_t *c, int flush, dx_error_t *err) {
  int rc = 0, notify = c->notify;
  char sql[128];
  c->notify = 0;
  if (!flush) rc = send_stmt(c, -1, "SET LOCAL synchronous_commit TO off", NULL, NULL, err);
  if (!rc && notify) {
    snprintf(sql, sizeof sql, "NOTIFY %s", c->owner->channel_q);
    rc = send_stmt(c, -1, sql, NULL, NULL, err);
  }
  return rc ? rc : send_stmt(c, -1, "COMMIT", NULL, NULL, err);
}

static int commit_now(pg_conn_t *c, int flush, dx_error_t *err) {
  int rc = commit_send(c, flush, err);
  if (!rc) rc = drain(c, 0, err);
  if (rc) rollback_now(c);
  return rc;
}

int dx__pg_tx_end(tx_t *t, int rc) {
  if (!t->own) return rc;
  t->own = 0;
  if (!t->c->conn) return rc;
  if (rc) {
    rollback_now(t->c);
    return rc;
  }
  return commit_now(t->c, !t->p->no_sync, t->err);
}

int dx__pg_one(pg_t *p, int write, pg_stmt_t id, const qp_t *qp, PGresult **out,
               dx_error_t *err) {
  tx_t t;
  int rc = write ? dx__pg_tx_begin(p, &t, err) : dx__pg_read_begin(p, &t, err);
  if (rc) return rc;
  return dx__pg_tx_end(&t, dx__pg_q(&t, id, qp, out));
}

int dx__pg_batch_commit_wait(tx_t *t, int sync) {
  pg_conn_t *c = t->c;
  int rc = c->batch_rc ? batch_failed(c, t->err) : 0;
  if (!rc && !c->conn) rc = dx_error_set(t->err, DX_ERETRY, "connection lost during the batch");
  if (!rc) rc = commit_send(c, sync && !t->p->no_sync, t->err);
  if (!rc) rc = drain(c, 1, t->err);
  c->in_batch = 0;
  c->batch_rc = 0;
  if (rc) rollback_now(c);
  return rc;
}

int dx__pg_begin(dx_provider_t *pp, dx_error_t *err) {
  pg_t *p = (pg_t *)pp;
  pg_conn_t *c;
  int rc;
  if ((rc = dx__pg_conn_get(p, &c, err))) return rc;
  if (c->in_batch) return dx_error_set(err, DX_ESTATE, "a batch is already open on this thread");
  if ((rc = open_tx(c, err))) return rc;
  c->cycle_done = 0;
  c->in_batch = 1;
  c->batch_rc = 0;
  c->claim_none[0] = 0;
  return 0;
}

int dx__pg_commit(dx_provider_t *pp, int sync, dx_error_t *err) {
  pg_t *p = (pg_t *)pp;
  pg_conn_t *c = pthread_getspecific(p->key);
  int rc;
  if (c && c->cycle_done && c->pid == getpid()) { /* run_cycle committed it already */
    c->cycle_done = 0;
    return 0;
  }
  if (!c || !c->in_batch || c->pid != getpid())
    return dx_error_set(err, DX_ESTATE, "commit without begin");
  if (!c->batch_rc && c->conn) { /* instances locked ahead and not handed out go back */
    tx_t t;
    memset(&t, 0, sizeof t);
    t.p = p;
    t.c = c;
    t.err = err;
    dx__pg_orch_unbuffer(&t, 1);
  }
  dx__pg_orch_unbuffer_drop(c);
  c->in_batch = 0;
  if (c->batch_rc) {
    rc = batch_failed(c, err);
    c->batch_rc = 0;
    rollback_now(c);
    return rc;
  }
  if (!c->conn) return dx_error_set(err, DX_ERETRY, "connection lost during the batch");
  /* sync=0: a lock-only batch, whose loss after a crash merely delays redelivery */
  return commit_now(c, sync && !p->no_sync, err);
}

void dx__pg_rollback(dx_provider_t *pp) {
  pg_t *p = (pg_t *)pp;
  pg_conn_t *c = pthread_getspecific(p->key);
  if (c) c->cycle_done = 0;
  if (!c || !c->in_batch || c->pid != getpid()) return;
  dx__pg_orch_unbuffer_drop(c);
  c->in_batch = 0;
  c->batch_rc = 0;
  rollback_now(c);
}
