/*
** replay_sim.h -- a scripted fake host for the replay engine (core/src/replay.c), no Lua,
** shared by the replay test programs (test_replay*.c, test_replay_cancel.c).
**
** An orchestration is a C "program": an array of steps run by a tiny interpreter on every
** orch_resume. Emitting steps (ACT, TIMER, WAIT, SUB, CHAINED, SYSCALL) each take the next
** future slot 0, 1, 2, ...; AWAIT(k) and SELECT(j, k) poll those slots. What the code observes
** is written to a log ("ok(data)", "err(message)", "sel<i>(data)", "sys(value)", "r0"/"r1")
** that tests compare. A sim_t holds one instance: its history, the next batch of messages and
** the turn; sim_next() appends the turn's delta to the history, so a test plays a whole run
** turn by turn, exactly as the dispatcher would.
*/
#ifndef DX_REPLAY_SIM_H
#define DX_REPLAY_SIM_H

#include "testlib.h"

#include "duroxide/executor.h"
#include "log.h"
#include "replay.h"

#define T0 1000000 /* virtual clock at the start of every test */

/* {===== scripted orchestrations =====} */

enum {
  OP_END = 0,     /* suspend forever */
  OP_ACT,         /* name, input, extra = session id */
  OP_TIMER,       /* ms */
  OP_WAIT,        /* name */
  OP_SUB,         /* name, input, extra = explicit child id */
  OP_CHAINED,     /* name, input, extra = instance */
  OP_STATUS,      /* input = custom status (NULL clears) */
  OP_SYSCALL,     /* name = operation */
  OP_AWAIT,       /* a */
  OP_SELECT,      /* a, b: earliest completion wins, the loser is cancelled */
  OP_RETURN,      /* input = output */
  OP_RETURN_LAST, /* output = the last observed value */
  OP_FAIL,        /* input = message */
  OP_CAN,         /* input = new input; skipped when the current input already equals it */
  OP_MARK,        /* log dx_turn_is_replaying */
  OP_CANCEL_RAW,  /* dx_turn_cancel(ms as a raw token) */
  OP_CANCEL,      /* dx_turn_cancel of future slot a (future:cancel()) */
  OP_KV_SET,      /* name = key, input = value */
  OP_KV_CLEAR,    /* name = key */
  OP_KV_CLEAR_ALL,
  OP_KV_GET,      /* name = key: logs "kv(key=value)" */
  OP_DEQUEUE,     /* name = queue */
  OP_STATUS_GET,  /* logs "cs(status)" */
  OP_PARK         /* a wait on futures a..b: while one is pending, suspend parked on them
                     (dx__turn_park, as the Lua binding's await and join) */
};

typedef struct {
  int op;
  const char *name;
  const char *input;
  const char *extra;
  int64_t ms;
  int a, b;
  const char *tag;      /* ACT: routing tag */
  const char *version;  /* SUB, CHAINED, CAN: pinned version */
} step_t;

#define ACT(n, in) {.op = OP_ACT, .name = (n), .input = (in)}
#define ACT_S(n, in, sess) {.op = OP_ACT, .name = (n), .input = (in), .extra = (sess)}
#define TIMER(d) {.op = OP_TIMER, .ms = (d)}
#define WAIT(n) {.op = OP_WAIT, .name = (n)}
#define SUB(n, in) {.op = OP_SUB, .name = (n), .input = (in)}
#define SUB_ID(n, in, id) {.op = OP_SUB, .name = (n), .input = (in), .extra = (id)}
#define CHAINED(n, id, in) {.op = OP_CHAINED, .name = (n), .input = (in), .extra = (id)}
#define STATUS(j) {.op = OP_STATUS, .input = (j)}
#define SYSCALL(o) {.op = OP_SYSCALL, .name = (o)}
#define AWAIT(k) {.op = OP_AWAIT, .a = (k)}
#define SELECT(j, k) {.op = OP_SELECT, .a = (j), .b = (k)}
#define RETURN(out) {.op = OP_RETURN, .input = (out)}
#define RETURN_LAST {.op = OP_RETURN_LAST}
#define FAIL(msg) {.op = OP_FAIL, .input = (msg)}
#define CAN(in) {.op = OP_CAN, .input = (in)}
#define MARK {.op = OP_MARK}
#define END {.op = OP_END}
#define CANCEL_RAW(tok) {.op = OP_CANCEL_RAW, .ms = (int64_t)(tok)}
#define CANCEL(k) {.op = OP_CANCEL, .a = (k)}
#define ACT_T(n, in, t) {.op = OP_ACT, .name = (n), .input = (in), .tag = (t)}
#define SUB_V(n, in, v) {.op = OP_SUB, .name = (n), .input = (in), .version = (v)}
#define CAN_V(in, v) {.op = OP_CAN, .input = (in), .version = (v)}
#define KV_SET(k, v) {.op = OP_KV_SET, .name = (k), .input = (v)}
#define KV_CLEAR(k) {.op = OP_KV_CLEAR, .name = (k)}
#define KV_CLEAR_ALL {.op = OP_KV_CLEAR_ALL}
#define KV_GET(k) {.op = OP_KV_GET, .name = (k)}
#define DEQUEUE(q) {.op = OP_DEQUEUE, .name = (q)}
#define STATUS_GET {.op = OP_STATUS_GET}
#define PARK(j, k) {.op = OP_PARK, .a = (j), .b = (k)}

typedef struct {
  const char *name;     /* the one registered orchestration */
  const char *version;  /* its resolved version */
  const step_t *prog;
  char log[4096];
  int starts, resumes, frees;
} host_t;

typedef struct {
  host_t *h;
  const step_t *prog;
  size_t pc;
  uint64_t fut[64];
  size_t nfut;
  char *input;
  const char *last; /* borrowed from the turn */
} inst_t;

typedef struct {
  const char *instance;
  uint64_t exec;
  dx_event_t *hist;
  size_t n_hist;
  dx_work_item_t msgs[16];
  size_t n_msgs;
  uint32_t attempt;
  int history_error;
  dx_turn_cfg_t cfg;
  host_t host;
  dx_orch_item_t item;
  dx_turn_t *turn;
  dx_kv_entry_t *kv;  /* committed key-value state handed to the turn (borrowed) */
  size_t kv_len;
} sim_t;

/* one simulated instance (replay_sim.c says what each does) */
void sim_init(sim_t *s, const char *instance, const char *name, const step_t *prog);
void sim_clear_msgs(sim_t *s);
void sim_free(sim_t *s);
/* messages for the next batch */
dx_work_item_t *msg(sim_t *s, int kind);
dx_work_item_t *msg_start(sim_t *s, const char *name, const char *input);
dx_work_item_t *msg_act_done(sim_t *s, uint64_t id, const char *data);
dx_work_item_t *msg_act_fail(sim_t *s, uint64_t id, int cat, const char *kind,
                             const char *message);
dx_work_item_t *msg_timer(sim_t *s, uint64_t id, int64_t fire_at);
dx_work_item_t *msg_ext(sim_t *s, const char *name, const char *data);
dx_work_item_t *msg_queue(sim_t *s, const char *queue, const char *data);
dx_work_item_t *msg_sub_done(sim_t *s, uint64_t id, const char *data);
dx_work_item_t *msg_cancel(sim_t *s, const char *reason);
void msg_copy(sim_t *s, const dx_work_item_t *w);
/* turns */
const dx_orch_ack_t *sim_run(sim_t *s);
int sim_action(sim_t *s);
const dx_orch_ack_t *sim_ack(sim_t *s);
void sim_next(sim_t *s);
void sim_drop(sim_t *s);
/* assertion helpers */
const char *ev_name(int k);
const char *kinds(sim_t *s);
const dx_event_t *dev(sim_t *s, size_t i);
const dx_event_t *dlast(sim_t *s);
void assert_nondet(sim_t *s, const char *needle);
void sim_begin(sim_t *s, const char *input);

#define ASSERT_KINDS(s, want) ASSERT_STR_EQ(kinds(s), want)
#define ASSERT_NULL(p) ASSERT((p) == NULL)

#endif
