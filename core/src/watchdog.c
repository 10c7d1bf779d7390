/*
** watchdog.c -- the blocked-loop warning (see watchdog.h).
**
** Orchestration turns, activities and callbacks share one loop: code that runs for seconds
** without yielding stalls every instance of the worker. The loop cannot report that itself,
** so a thread does: the loop's heartbeat timer stamps the time every threshold/4, and when the
** stamp is older than the threshold the thread logs what the loop thread recorded as running.
** The same thread enforces the turn time limit: the loop thread arms an alarm around a turn
** of orchestration code (dx__watch_arm) and, when the turn is still running at its deadline,
** the thread calls the alarm, which makes the Lua hook fail the turn (bindings/lua/budget.c).
** That is what ends a single long C call (a sort of millions of entries) that the instruction
** budget counts as one instruction.
** One global mutex guards every watchdog (the loop threads and the watchdog threads are few).
*/
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "watchdog.h"

#define MAX_DEPTH 8     /* nested labels kept; deeper ones count but keep the 8th */
#define LABEL_LEN 240
/* While arms come (turns run), the thread looks this often, so an early call (the Lua count
** hook armed for a turn that runs long, bindings/lua/budget.c) comes at most this late
** without a wake-up per arm; after IDLE_LOOKS looks in a row with no arm since the one before
** it naps for its period, and the next early arm wakes it (a worker that alternates between
** turns and waits for the store does not pay a wake-up per turn). */
#define EARLY_POLL_MS 10
#define IDLE_LOOKS 10

typedef struct watchdog_s {
  uv_loop_t *loop;
  int refs;
  int64_t threshold_ms, period_ms; /* threshold 0: no blocked-loop warning, only alarms */
  uv_timer_t beat;
  uv_thread_t thread;
  uv_cond_t wake;
  int stop;
  int64_t beat_ms;        /* last heartbeat (monotonic ms) */
  int warned;             /* this blockage was reported */
  char reported[LABEL_LEN]; /* what the last report named (a new holder is reported too) */
  int64_t blocked_from;   /* the heartbeat before the reported blockage */
  int paused;             /* dx__watch_driven(loop, 0): the script is not driving the loop */
  int depth;              /* nesting of dx__watch_enter */
  char labels[MAX_DEPTH][LABEL_LEN];
  struct lazy_s {         /* a step entered by names or text: labels[] is built when reported */
    int kind;             /* 0: labels[] holds it; LAZY_NAMES, LAZY_TEXT */
    const char *a, *b, *c;
    uint64_t id;
  } lazy[MAX_DEPTH];
  int armed;              /* an arm is in place until its disarm */
  int64_t alarm_at;       /* monotonic ms; 0: no alarm (or it ran) */
  void (*alarm)(void *);
  void *alarm_arg;
  int64_t early_at;       /* monotonic ms of the arm's early call; 0: none (or it ran) */
  int (*early)(void *);
  uint64_t arms, seen_arms; /* arms so far / at the thread's last look */
  int idle_looks;         /* looks in a row that found no arm since the one before */
  int napping;            /* the thread sleeps past EARLY_POLL_MS: an early arm wakes it */
  char worker[256];       /* the worker of the thread that attached: the JSON logs name it */
  struct watchdog_s *next;
} watchdog_t;

static uv_mutex_t mu;
static uv_once_t mu_once = UV_ONCE_INIT;
static watchdog_t *all; /* guarded by mu */

static void mu_init(void) { uv_mutex_init(&mu); }

static int64_t mono_ms(void) { return (int64_t)(uv_hrtime() / 1000000u); }

/* Caller holds mu. */
static watchdog_t *find(uv_loop_t *loop) {
  watchdog_t *w;
  for (w = all; w; w = w->next)
    if (w->loop == loop) return w;
  return NULL;
}

static void on_beat(uv_timer_t *t) {
  watchdog_t *w = t->data;
  int64_t now = mono_ms(), blocked;
  int warned;
  uv_mutex_lock(&mu);
  blocked = now - w->blocked_from;
  warned = w->warned;
  w->beat_ms = now;
  w->warned = 0;
  uv_mutex_unlock(&mu);
  if (warned) dx__log(DX_LOG_WARN, "loop no longer blocked", "blocked_ms=%" PRId64, blocked);
}

enum { LAZY_NAMES = 1, LAZY_TEXT };
static void lazy_label(const struct lazy_s *l, char *out);

/* What the loop thread is running now (caller holds mu). */
static void current_label(const watchdog_t *w, char *out) {
  int d = w->depth, k = (d > MAX_DEPTH ? MAX_DEPTH : d) - 1;
  if (d > 0 && w->lazy[k].kind) lazy_label(&w->lazy[k], out);
  else
    snprintf(out, LABEL_LEN, "%s", d > 0 ? w->labels[k]
                                         : "engine or app code outside activities and turns");
}

/* A blockage is reported when it passes the threshold, and again whenever the code holding
** the loop changes while it lasts: engine work that ran into a spinning turn still names the
** turn. */
static void watch_thread(void *arg) {
  watchdog_t *w = arg;
  dx__log_set_worker(w->worker);
  uv_mutex_lock(&mu);
  while (!w->stop) {
    int64_t now = mono_ms(), blocked = now - w->beat_ms, wait = w->period_ms;
    /* under mu: dx__watch_disarm cannot return while they run */
    if (w->early_at > 0 && now >= w->early_at)
      w->early_at = w->early(w->alarm_arg) ? now + EARLY_POLL_MS : 0; /* again: a look later */
    if (w->alarm_at > 0 && now >= w->alarm_at) {
      w->alarm_at = 0;
      w->alarm(w->alarm_arg);
    }
    if (w->alarm_at > 0 && w->alarm_at - now < wait) wait = w->alarm_at - now;
    if (w->early_at > 0 && w->early_at - now < wait) wait = w->early_at - now;
    w->idle_looks = w->arms != w->seen_arms ? 0
                    : w->idle_looks < IDLE_LOOKS ? w->idle_looks + 1 : IDLE_LOOKS;
    w->seen_arms = w->arms;
    if (w->early_at == 0 && w->idle_looks < IDLE_LOOKS && wait > EARLY_POLL_MS)
      wait = EARLY_POLL_MS;
    w->napping = wait > EARLY_POLL_MS;
    if (w->threshold_ms > 0 && !w->paused && blocked > w->threshold_ms) {
      char running[LABEL_LEN];
      current_label(w, running);
      if (!w->warned || strcmp(running, w->reported) != 0) {
        if (!w->warned) w->blocked_from = w->beat_ms;
        w->warned = 1;
        memcpy(w->reported, running, LABEL_LEN);
        uv_mutex_unlock(&mu); /* never log under the lock: the loop would wait on it */
        dx__log(DX_LOG_WARN, "loop blocked: every instance of this worker waits",
                "blocked_ms=%" PRId64 " threshold_ms=%" PRId64 " running=\"%s\"", blocked,
                w->threshold_ms, running);
        uv_mutex_lock(&mu);
        continue;
      }
    }
    uv_cond_timedwait(&w->wake, &mu, (uint64_t)(wait > 1 ? wait : 1) * 1000000u);
  }
  uv_mutex_unlock(&mu);
}

/* How often the thread looks: a quarter of the threshold (or of the turn time limit when
** there is no threshold; alarms also wake it at their deadline), at least every 10ms. */
static int64_t period_of(int64_t threshold_ms, int64_t limit_ms) {
  int64_t p = (threshold_ms > 0 ? threshold_ms : limit_ms) / 4;
  return p > 10 ? p : 10;
}

int dx__watchdog_attach(uv_loop_t *loop, int64_t threshold_ms, int64_t limit_ms) {
  watchdog_t *w;
  int rc;
  if (threshold_ms <= 0 && limit_ms <= 0) return 0;
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if ((w = find(loop)) != NULL) {
    w->refs++; /* the first runtime's threshold stays */
    uv_mutex_unlock(&mu);
    return 0;
  }
  uv_mutex_unlock(&mu);
  if (!(w = calloc(1, sizeof *w))) return UV_ENOMEM;
  w->loop = loop;
  w->refs = 1;
  snprintf(w->worker, sizeof w->worker, "%s", dx__log_worker());
  w->threshold_ms = threshold_ms > 0 ? threshold_ms : 0;
  w->period_ms = period_of(threshold_ms, limit_ms);
  w->beat_ms = mono_ms();
  w->idle_looks = IDLE_LOOKS; /* nothing armed yet: nap */
  if ((rc = uv_cond_init(&w->wake)) != 0) {
    free(w);
    return rc;
  }
  uv_timer_init(loop, &w->beat);
  w->beat.data = w;
  uv_timer_start(&w->beat, on_beat, (uint64_t)w->period_ms, (uint64_t)w->period_ms);
  uv_unref((uv_handle_t *)&w->beat); /* never keeps the loop alive by itself */
  uv_mutex_lock(&mu);
  w->next = all;
  all = w;
  uv_mutex_unlock(&mu);
  if ((rc = uv_thread_create(&w->thread, watch_thread, w)) != 0) {
    w->refs = 0;
    w->thread = uv_thread_self(); /* no thread to join */
    dx__watchdog_detach(loop);
    return rc;
  }
  return 0;
}

static void beat_closed(uv_handle_t *h) {
  watchdog_t *w = h->data;
  uv_cond_destroy(&w->wake);
  free(w);
}

void dx__watchdog_detach(uv_loop_t *loop) {
  watchdog_t *w, **pp;
  uv_thread_t self = uv_thread_self();
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if (!(w = find(loop)) || --w->refs > 0) {
    uv_mutex_unlock(&mu);
    return;
  }
  for (pp = &all; *pp != w; pp = &(*pp)->next) {}
  *pp = w->next;
  w->stop = 1;
  uv_cond_signal(&w->wake);
  uv_mutex_unlock(&mu);
  if (!uv_thread_equal(&w->thread, &self)) uv_thread_join(&w->thread);
  uv_close((uv_handle_t *)&w->beat, beat_closed);
}

/* Push a step on loop's watch; fill writes its label (under mu) when there is a slot for it. */
static void push_step(uv_loop_t *loop, void (*fill)(char *label, void *ud), void *ud) {
  watchdog_t *w;
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if ((w = find(loop)) != NULL) {
    if (w->depth < MAX_DEPTH) {
      w->lazy[w->depth].kind = 0;
      fill(w->labels[w->depth], ud);
    }
    w->depth++;
  }
  uv_mutex_unlock(&mu);
}

typedef struct {
  const char *fmt;
  va_list ap;
} fmt_label_t;

static void fill_fmt(char *label, void *ud) {
  fmt_label_t *f = ud;
  vsnprintf(label, LABEL_LEN, f->fmt, f->ap);
}

void dx__watch_enter(uv_loop_t *loop, const char *fmt, ...) {
  fmt_label_t f;
  f.fmt = fmt;
  va_start(f.ap, fmt);
  push_step(loop, fill_fmt, &f);
  va_end(f.ap);
}

/* Append s to the label at *n, cut at the buffer's end (as vsnprintf would). */
static void label_add(char *label, size_t *n, const char *s) {
  size_t k = strlen(s);
  if (k > LABEL_LEN - 1 - *n) k = LABEL_LEN - 1 - *n;
  memcpy(label + *n, s, k);
  *n += k;
}

typedef struct {
  const char *what, *name, *instance;
  uint64_t id;
} names_label_t;

static void fill_names(char *label, void *ud) {
  const names_label_t *l = ud;
  char digits[24];
  size_t n = 0;
  uint64_t id = l->id;
  int k = (int)sizeof digits - 1;
  digits[k] = '\0';
  do digits[--k] = (char)('0' + id % 10); while ((id /= 10) != 0);
  label_add(label, &n, l->what);
  label_add(label, &n, " ");
  label_add(label, &n, l->name ? l->name : "(null)");
  label_add(label, &n, " (instance ");
  label_add(label, &n, l->instance ? l->instance : "(null)");
  label_add(label, &n, ", id ");
  label_add(label, &n, digits + k);
  label_add(label, &n, ")");
  label[n] = '\0';
}

/* Push a step whose label lazy_label builds from these pointers when it is reported. */
static void push_lazy(uv_loop_t *loop, int kind, const char *a, const char *b, const char *c,
                      uint64_t id) {
  watchdog_t *w;
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if ((w = find(loop)) != NULL) {
    if (w->depth < MAX_DEPTH) {
      struct lazy_s *l = &w->lazy[w->depth];
      l->kind = kind;
      l->a = a, l->b = b, l->c = c, l->id = id;
    }
    w->depth++;
  }
  uv_mutex_unlock(&mu);
}

void dx__watch_enter_names(uv_loop_t *loop, const char *what, const char *name,
                           const char *instance, uint64_t id) {
  push_lazy(loop, LAZY_NAMES, what, name, instance, id);
}

typedef struct {
  const char *prefix, *text;
} text_label_t;

static void fill_text(char *label, void *ud) {
  const text_label_t *l = ud;
  size_t n = 0;
  label_add(label, &n, l->prefix);
  label_add(label, &n, l->text ? l->text : "(null)");
  label[n] = '\0';
}

void dx__watch_enter_text(uv_loop_t *loop, const char *prefix, const char *text) {
  push_lazy(loop, LAZY_TEXT, prefix, text, NULL, 0);
}

static void lazy_label(const struct lazy_s *l, char *out) {
  if (l->kind == LAZY_NAMES) {
    names_label_t n = {l->a, l->b, l->c, l->id};
    fill_names(out, &n);
  } else {
    text_label_t t = {l->a, l->b};
    fill_text(out, &t);
  }
}

void dx__watch_leave(uv_loop_t *loop) {
  watchdog_t *w;
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if ((w = find(loop)) != NULL && w->depth > 0) w->depth--;
  uv_mutex_unlock(&mu);
}

void dx__watch_driven(uv_loop_t *loop, int driven) {
  watchdog_t *w;
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if ((w = find(loop)) != NULL) {
    w->paused = !driven;
    if (driven) w->beat_ms = mono_ms();
  }
  uv_mutex_unlock(&mu);
}

int dx__watch_arm_early(uv_loop_t *loop, int64_t limit_ms, void (*alarm)(void *),
                        int64_t early_ms, int (*early)(void *), void *arg) {
  watchdog_t *w;
  int armed = 0;
  if (limit_ms <= 0 && !early) return 0;
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if ((w = find(loop)) != NULL && !w->armed) {
    int64_t now = mono_ms();
    armed = w->armed = 1;
    /* no wake-up for the alarm: the thread looks every period, and a late alarm only adds
    ** that period */
    w->alarm_at = limit_ms > 0 ? now + limit_ms : 0;
    w->alarm = alarm;
    w->alarm_arg = arg;
    w->early_at = early ? now + (early_ms > 0 ? early_ms : 1) : 0;
    w->early = early;
    w->arms++;
    if (early && w->napping) {
      w->napping = 0;
      uv_cond_signal(&w->wake);
    }
  }
  uv_mutex_unlock(&mu);
  return armed;
}

int dx__watch_arm(uv_loop_t *loop, int64_t limit_ms, void (*alarm)(void *), void *arg) {
  return dx__watch_arm_early(loop, limit_ms, alarm, 0, NULL, arg);
}

void dx__watch_disarm(uv_loop_t *loop) {
  watchdog_t *w;
  uv_once(&mu_once, mu_init);
  uv_mutex_lock(&mu);
  if ((w = find(loop)) != NULL) {
    w->armed = 0;
    w->alarm_at = w->early_at = 0;
    w->alarm = NULL;
    w->early = NULL;
    w->alarm_arg = NULL;
  }
  uv_mutex_unlock(&mu);
}
