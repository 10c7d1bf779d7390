/*
** watchdog.h -- warns when a loop is blocked (internal).
**
** One watchdog per libuv loop, shared by the runtimes on it. A heartbeat timer on the loop
** stamps the time; a thread notices when the stamps stop for longer than the threshold and
** logs `loop blocked`, naming what the loop thread said it was running (dx__watch_enter).
** The thread also calls the alarm of a turn that outlives the turn time limit (dx__watch_arm).
*/
#ifndef DX_WATCHDOG_H
#define DX_WATCHDOG_H
#include <stdint.h>
#include <uv.h>

/* Start watching `loop` (or take another reference when it is watched already). threshold_ms
** 0: no blocked-loop warning; limit_ms (the turn time limit) 0: no alarms expected; both 0
** does nothing. Loop thread. 0, or a libuv error (the loop is then simply not watched). */
int dx__watchdog_attach(uv_loop_t *loop, int64_t threshold_ms, int64_t limit_ms);
/* Drop a reference taken by a successful attach; the last one stops the thread and closes
** the timer (freed by its close callback: the loop must run once more). Loop thread. */
void dx__watchdog_detach(uv_loop_t *loop);

/* The loop thread starts running user code described by fmt (say "activity Foo (instance
** i1, id 3)") until the matching dx__watch_leave; calls nest. No-op on an unwatched loop. */
void dx__watch_enter(uv_loop_t *loop, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The same for "<what> <name> (instance <instance>, id <id>)". Every activity step pays this
** on the loop thread, so only the pointers are kept and the label is built when a blockage is
** reported: the strings must stay valid until the matching dx__watch_leave. */
void dx__watch_enter_names(uv_loop_t *loop, const char *what, const char *name,
                           const char *instance, uint64_t id);
/* The same for the label "<prefix><text>" (every orchestration turn pays this; the strings
** must stay valid until the matching dx__watch_leave, as above). */
void dx__watch_enter_text(uv_loop_t *loop, const char *prefix, const char *text);
void dx__watch_leave(uv_loop_t *loop);
/* A loop that a script drives now and then (duroxide.runtime) is not blocked while the script
** does other things: driven 0 pauses the watch, 1 resumes it with a fresh heartbeat. */
void dx__watch_driven(uv_loop_t *loop, int driven);
/* Arm the loop's one alarm: unless disarmed within limit_ms, the watchdog thread calls
** alarm(arg) once, from its own thread and under the watchdog's lock (so alarm may only set
** flags and call async-signal-safe functions such as lua_sethook, and must not log). limit_ms
** <= 0, an unwatched loop or an alarm armed already (an outer one stays): nothing. Loop
** thread. 1 when armed: the caller must disarm. */
int dx__watch_arm(uv_loop_t *loop, int64_t limit_ms, void (*alarm)(void *), void *arg);
/* The same, and unless disarmed within early_ms (up to 10 ms late: the thread looks every 10 ms
** while arms come), early(arg) is called, the same way as alarm; when it returns non-zero it
** is called again about 10 ms later (until it returns 0 or the disarm). limit_ms <= 0 with
** early: only the early calls. 1 when armed. */
int dx__watch_arm_early(uv_loop_t *loop, int64_t limit_ms, void (*alarm)(void *),
                        int64_t early_ms, int (*early)(void *), void *arg);
/* Cancel the armed alarm (only after an arm that returned 1); once this returns the alarm is
** not running and will not run. */
void dx__watch_disarm(uv_loop_t *loop);
#endif
