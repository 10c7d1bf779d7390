/*
** replay_sim.c -- the scripted fake host and simulated instance of replay_sim.h.
*/
#include "replay_sim.h"

#include "embedding.h"

#include <stdarg.h>

static void logf_(host_t *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void logf_(host_t *h, const char *fmt, ...) {
  size_t n = strlen(h->log);
  va_list ap;
  if (n && n + 1 < sizeof h->log) h->log[n++] = ' ', h->log[n] = 0;
  va_start(ap, fmt);
  vsnprintf(h->log + n, sizeof h->log - n, fmt, ap);
  va_end(ap);
}

static int fake_lookup(void *host, const char *name, const char *version, const char **resolved) {
  host_t *h = host;
  (void)version;
  if (!h->name || strcmp(name, h->name) != 0) return 0;
  *resolved = h->version;
  return 1;
}

static int fake_start(void *host, dx_turn_t *t, const char *name, const char *version,
                      const char *input, void **out, dx_error_t *err) {
  host_t *h = host;
  inst_t *in = calloc(1, sizeof *in);
  (void)t; (void)name; (void)version; (void)err;
  ASSERT(in);
  in->h = h;
  in->prog = h->prog;
  in->input = input ? strdup(input) : NULL;
  h->starts++;
  logf_(h, "start(%s)", input ? input : "nil");
  *out = in;
  return DX_OK;
}

static int fake_resume(void *host, void *vi, dx_turn_t *t) {
  host_t *h = host;
  inst_t *in = vi;
  h->resumes++;
  for (;;) {
    const step_t *s = &in->prog[in->pc];
    dx_action_t a;
    uint64_t tok = 0;
    const char *val = NULL;
    int rc;
    memset(&a, 0, sizeof a);
    switch (s->op) {
      case OP_END: return DX_RUN_PENDING;
      case OP_ACT:
        a.kind = DX_ACT_ACTIVITY, a.name = s->name, a.input = s->input, a.session_id = s->extra;
        a.tag = s->tag;
        break;
      case OP_TIMER: a.kind = DX_ACT_TIMER, a.delay_ms = s->ms; break;
      case OP_WAIT: a.kind = DX_ACT_WAIT, a.name = s->name; break;
      case OP_SUB:
        a.kind = DX_ACT_SUB, a.name = s->name, a.input = s->input, a.instance = s->extra;
        a.version = s->version;
        break;
      case OP_CHAINED:
        a.kind = DX_ACT_CHAINED, a.name = s->name, a.input = s->input, a.instance = s->extra;
        break;
      case OP_STATUS: a.kind = DX_ACT_STATUS, a.input = s->input; break;
      case OP_SYSCALL: a.kind = DX_ACT_SYSCALL, a.name = s->name; break;
      case OP_AWAIT: {
        const char *d = NULL;
        const dx_failure_t *f = NULL;
        int st = dx_turn_poll(t, in->fut[s->a], &d, &f, NULL);
        if (st == DX_FUT_PENDING) return DX_RUN_PENDING;
        if (st == DX_FUT_OK) logf_(h, "ok(%s)", d ? d : "nil"), in->last = d;
        else logf_(h, "err(%s)", f && f->message ? f->message : "?"), in->last = NULL;
        in->pc++;
        continue;
      }
      case OP_SELECT: {
        const char *d[2] = {NULL, NULL};
        const dx_failure_t *f[2] = {NULL, NULL};
        uint64_t o[2] = {0, 0};
        int st[2], w;
        st[0] = dx_turn_poll(t, in->fut[s->a], &d[0], &f[0], &o[0]);
        st[1] = dx_turn_poll(t, in->fut[s->b], &d[1], &f[1], &o[1]);
        if (st[0] == DX_FUT_PENDING && st[1] == DX_FUT_PENDING) return DX_RUN_PENDING;
        w = (st[0] != DX_FUT_PENDING && (st[1] == DX_FUT_PENDING || o[0] <= o[1])) ? 0 : 1;
        dx_turn_cancel(t, in->fut[w ? s->a : s->b]);
        if (st[w] == DX_FUT_OK) logf_(h, "sel%d(%s)", w, d[w] ? d[w] : "nil"), in->last = d[w];
        else logf_(h, "sel%d-err(%s)", w, f[w] && f[w]->message ? f[w]->message : "?");
        in->pc++;
        continue;
      }
      case OP_RETURN: dx_turn_set_output(t, s->input); return DX_RUN_DONE;
      case OP_RETURN_LAST: dx_turn_set_output(t, in->last); return DX_RUN_DONE;
      case OP_FAIL:
        dx_turn_set_failure(t, DX_CAT_APPLICATION, "OrchestrationFailed", s->input);
        return DX_RUN_FAILED;
      case OP_CAN:
        if (in->input && strcmp(in->input, s->input) == 0) {
          in->pc++;
          continue;
        }
        a.kind = DX_ACT_CAN, a.input = s->input, a.version = s->version;
        rc = dx_turn_emit(t, &a, NULL, NULL);
        if (rc != DX_OK) logf_(h, "emit_rc=%s", dx_err_name(rc));
        return rc == DX_OK ? DX_RUN_CAN : DX_RUN_FAILED;
      case OP_MARK:
        logf_(h, "r%d", dx_turn_is_replaying(t));
        in->pc++;
        continue;
      case OP_CANCEL_RAW:
        dx_turn_cancel(t, (uint64_t)s->ms);
        in->pc++;
        continue;
      case OP_CANCEL:
        dx_turn_cancel(t, in->fut[s->a]);
        in->pc++;
        continue;
      case OP_KV_SET: a.kind = DX_ACT_KV_SET, a.name = s->name, a.input = s->input; break;
      case OP_KV_CLEAR: a.kind = DX_ACT_KV_CLEAR, a.name = s->name; break;
      case OP_KV_CLEAR_ALL: a.kind = DX_ACT_KV_CLEAR_ALL; break;
      case OP_DEQUEUE: a.kind = DX_ACT_DEQUEUE, a.name = s->name; break;
      case OP_KV_GET: {
        const char *v = dx_turn_kv_get(t, s->name);
        logf_(h, "kv(%s=%s)", s->name, v ? v : "nil");
        in->pc++;
        continue;
      }
      case OP_PARK: {
        uint64_t toks[16];
        size_t n = 0;
        int k, pending = 0;
        ASSERT(s->b - s->a < 16);
        for (k = s->a; k <= s->b; k++) {
          toks[n++] = in->fut[k];
          if (dx_turn_poll(t, in->fut[k], NULL, NULL, NULL) == DX_FUT_PENDING) pending = 1;
        }
        if (pending) {
          ASSERT_OK(dx__turn_park(t, toks, n));
          return DX_RUN_PENDING;
        }
        in->pc++;
        continue;
      }
      case OP_STATUS_GET: {
        const char *v = dx_turn_custom_status(t);
        logf_(h, "cs(%s)", v ? v : "nil");
        in->pc++;
        continue;
      }
      default: ASSERT(0);
    }
    rc = dx_turn_emit(t, &a, &tok, &val);
    if (rc != DX_OK) {
      /* the binding stops the code; the engine already recorded why */
      logf_(h, "emit_rc=%s", dx_err_name(rc));
      return DX_RUN_FAILED;
    }
    if (s->op != OP_STATUS && s->op != OP_KV_SET && s->op != OP_KV_CLEAR &&
        s->op != OP_KV_CLEAR_ALL) {
      ASSERT(in->nfut < 64);
      ASSERT(tok != 0);
      in->fut[in->nfut++] = tok;
    } else {
      ASSERT_EQ(tok, 0);
    }
    if (s->op == OP_SYSCALL) logf_(h, "sys(%s)", val ? val : "nil");
    in->pc++;
  }
}

static void fake_free(void *host, void *vi) {
  inst_t *in = vi;
  ((host_t *)host)->frees++;
  free(in->input);
  free(in);
}

static const dx_host_methods_t fake_methods = {
    .version = 1,
    .orch_lookup = fake_lookup,
    .orch_start = fake_start,
    .orch_resume = fake_resume,
    .orch_free = fake_free,
};

/* {===== one simulated instance =====} */


void sim_init(sim_t *s, const char *instance, const char *name, const step_t *prog) {
  memset(s, 0, sizeof *s);
  s->instance = instance;
  s->exec = 1;
  s->attempt = 1;
  s->cfg.now_ms = T0;
  s->cfg.max_attempts = 5;
  s->cfg.unregistered_base_ms = 1000;
  s->cfg.unregistered_max_ms = 60000;
  s->cfg.worker_id = "test";
  s->host.name = name;
  s->host.version = "1.0.0";
  s->host.prog = prog;
  dx__log_configure(-1, DX_LOGFMT_TEXT); /* quiet */
}

void sim_clear_msgs(sim_t *s) {
  size_t i;
  for (i = 0; i < s->n_msgs; i++) dx_work_item_clear(&s->msgs[i]);
  s->n_msgs = 0;
}

void sim_free(sim_t *s) {
  dx__turn_free(s->turn);
  s->turn = NULL;
  sim_clear_msgs(s);
  dx_events_free(s->hist, s->n_hist);
  s->hist = NULL;
  s->n_hist = 0;
}

dx_work_item_t *msg(sim_t *s, int kind) {
  dx_work_item_t *m;
  ASSERT(s->n_msgs < 16);
  m = &s->msgs[s->n_msgs++];
  memset(m, 0, sizeof *m);
  m->kind = kind;
  m->instance = strdup(s->instance);
  return m;
}

static char *dup_or_null(const char *x) { return x ? strdup(x) : NULL; }

dx_work_item_t *msg_start(sim_t *s, const char *name, const char *input) {
  dx_work_item_t *m = msg(s, DX_WI_START);
  m->name = strdup(name);
  m->data = dup_or_null(input);
  m->execution_id = 1;
  return m;
}

dx_work_item_t *msg_act_done(sim_t *s, uint64_t id, const char *data) {
  dx_work_item_t *m = msg(s, DX_WI_ACT_COMPLETED);
  m->execution_id = s->exec;
  m->id = id;
  m->data = dup_or_null(data);
  return m;
}

dx_work_item_t *msg_act_fail(sim_t *s, uint64_t id, int cat, const char *kind,
                                    const char *message) {
  dx_work_item_t *m = msg(s, DX_WI_ACT_FAILED);
  m->execution_id = s->exec;
  m->id = id;
  m->fail.category = cat;
  m->fail.kind = dup_or_null(kind);
  m->fail.message = dup_or_null(message);
  return m;
}

dx_work_item_t *msg_timer(sim_t *s, uint64_t id, int64_t fire_at) {
  dx_work_item_t *m = msg(s, DX_WI_TIMER_FIRED);
  m->execution_id = s->exec;
  m->id = id;
  m->fire_at_ms = fire_at;
  return m;
}

dx_work_item_t *msg_ext(sim_t *s, const char *name, const char *data) {
  dx_work_item_t *m = msg(s, DX_WI_EXTERNAL);
  m->name = strdup(name);
  m->data = dup_or_null(data);
  return m;
}

dx_work_item_t *msg_queue(sim_t *s, const char *queue, const char *data) {
  dx_work_item_t *m = msg(s, DX_WI_QUEUE_MESSAGE);
  m->name = strdup(queue);
  m->data = dup_or_null(data);
  return m;
}

dx_work_item_t *msg_sub_done(sim_t *s, uint64_t id, const char *data) {
  dx_work_item_t *m = msg(s, DX_WI_SUB_COMPLETED);
  m->execution_id = s->exec;
  m->id = id;
  m->data = dup_or_null(data);
  return m;
}

dx_work_item_t *msg_cancel(sim_t *s, const char *reason) {
  dx_work_item_t *m = msg(s, DX_WI_CANCEL);
  m->reason = dup_or_null(reason);
  return m;
}

/* Queue a copy of a work item the previous turn produced (e.g. the CAN message). */
void msg_copy(sim_t *s, const dx_work_item_t *w) {
  ASSERT(s->n_msgs < 16);
  ASSERT_OK(dx_work_item_copy(&s->msgs[s->n_msgs++], w));
}

/* Run one turn on the current history and batch. */
const dx_orch_ack_t *sim_run(sim_t *s) {
  size_t i;
  ASSERT(!s->turn);
  memset(&s->item, 0, sizeof s->item);
  s->host.log[0] = 0;
  s->host.starts = s->host.resumes = s->host.frees = 0;
  s->item.instance = (char *)s->instance;
  s->item.execution_id = s->exec;
  s->item.history = s->hist;
  s->item.history_len = s->n_hist;
  s->item.messages = s->msgs;
  s->item.messages_len = s->n_msgs;
  s->item.lock_token = 77;
  s->item.attempt_count = s->attempt;
  s->item.kv = s->kv;
  s->item.kv_len = s->kv_len;
  if (s->n_hist) s->item.orchestration_name = s->hist[0].name;
  for (i = 0; i < s->n_msgs && !s->item.orchestration_name; i++)
    if (s->msgs[i].kind == DX_WI_START) s->item.orchestration_name = s->msgs[i].name;
  if (s->history_error) {
    s->item.history = NULL;
    s->item.history_len = 0;
    s->item.history_error = s->history_error;
    s->item.history_error_msg = "bad record at 7";
  }
  s->turn = dx__turn_run(&s->item, &s->cfg, &fake_methods, &s->host);
  ASSERT(s->turn);
  /* every code instance the turn created was released */
  ASSERT_EQ(s->host.starts, s->host.frees);
  return dx__turn_ack(s->turn);
}

int sim_action(sim_t *s) { return dx__turn_action(s->turn); }
const dx_orch_ack_t *sim_ack(sim_t *s) { return dx__turn_ack(s->turn); }

/* Commit the turn (as the provider would) and start a fresh batch. */
void sim_next(sim_t *s) {
  ASSERT(s->turn);
  if (sim_action(s) == DX_TURN_ACK) {
    const dx_orch_ack_t *a = sim_ack(s);
    size_t i;
    if (a->execution_id != s->exec) {
      dx_events_free(s->hist, s->n_hist);
      s->hist = NULL;
      s->n_hist = 0;
      s->exec = a->execution_id;
    }
    if (a->delta_len) {
      dx_event_t *nh = realloc(s->hist, (s->n_hist + a->delta_len) * sizeof *nh);
      ASSERT(nh);
      s->hist = nh;
      for (i = 0; i < a->delta_len; i++) {
        ASSERT_EQ(a->delta[i].event_id, s->n_hist + 1);
        ASSERT_OK(dx_event_copy(&s->hist[s->n_hist++], &a->delta[i]));
      }
    }
  }
  dx__turn_free(s->turn);
  s->turn = NULL;
  sim_clear_msgs(s);
}

/* Drop the turn without committing (abandon): the batch stays for the next attempt. */
void sim_drop(sim_t *s) {
  dx__turn_free(s->turn);
  s->turn = NULL;
}

/* {===== assertion helpers =====} */

const char *ev_name(int k) {
  static const char *names[] = {"?", "Started", "Completed", "Failed", "CAN", "CancelReq",
                                "ActSched", "ActDone", "ActFailed", "ActCancel", "TimerCreated",
                                "TimerFired", "ExtSub", "ExtEvent", "ExtSubCancel", "SubSched",
                                "SubDone", "SubFailed", "SubCancel", "Chained", "Status",
                                "Syscall", "SessClosed", "KvSet", "KvClear", "KvClearAll",
                                "QueueSub", "QueueEvent", "QueueSubCancel"};
  return k > 0 && k < DX_EV__COUNT ? names[k] : "?";
}

/* The delta as "id:Kind" words, "<src" appended for completions and breadcrumbs. */
const char *kinds(sim_t *s) {
  static char buf[1024];
  const dx_orch_ack_t *a = sim_ack(s);
  size_t i, n = 0;
  buf[0] = 0;
  for (i = 0; i < a->delta_len && n < sizeof buf - 64; i++) {
    const dx_event_t *e = &a->delta[i];
    n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%" PRIu64 ":%s", i ? " " : "",
                          e->event_id, ev_name(e->kind));
    if (e->source_id) n += (size_t)snprintf(buf + n, sizeof buf - n, "<%" PRIu64, e->source_id);
  }
  return buf;
}

const dx_event_t *dev(sim_t *s, size_t i) {
  const dx_orch_ack_t *a = sim_ack(s);
  if (i >= a->delta_len) DX_FAIL_AT("delta has %zu events, wanted index %zu", a->delta_len, i);
  return &a->delta[i];
}

const dx_event_t *dlast(sim_t *s) {
  const dx_orch_ack_t *a = sim_ack(s);
  ASSERT(a->delta_len > 0);
  return &a->delta[a->delta_len - 1];
}


void assert_nondet(sim_t *s, const char *needle) {
  const dx_orch_ack_t *a = sim_ack(s);
  ASSERT_EQ(sim_action(s), DX_TURN_ACK);
  ASSERT_EQ(a->status, DX_STATUS_FAILED);
  ASSERT(a->failure);
  ASSERT_EQ(a->failure->category, DX_CAT_CONFIGURATION);
  ASSERT_STR_EQ(a->failure->kind, "Nondeterminism");
  ASSERT(a->failure->message && strncmp(a->failure->message, "nondeterministic", 16) == 0);
  ASSERT_CONTAINS(a->failure->message, needle);
  ASSERT_EQ(dlast(s)->kind, DX_EV_ORCH_FAILED);
  ASSERT_EQ(dlast(s)->fail.category, DX_CAT_CONFIGURATION);
  ASSERT_STR_EQ(dlast(s)->fail.message, a->failure->message);
  ASSERT_EQ(a->worker_items_len, 0);
}

/* Start an instance and commit the first turn. */
void sim_begin(sim_t *s, const char *input) {
  msg_start(s, s->host.name ? s->host.name : "Orch", input);
  sim_run(s);
  ASSERT_EQ(sim_action(s), DX_TURN_ACK);
  sim_next(s);
}
