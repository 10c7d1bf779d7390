#!/usr/bin/env bash
# tests/e2e_turns.sh -- messages and turns with real processes (issue 7 items 1, 2, 4, 5, 16, 18;
# "Item N" below names the item a scenario covers).
#
#   bash tests/e2e_turns.sh           # uses $DUROXIDE_LUA, else build/bindings/duroxide-lua
#   E2E_ONLY="t1" bash tests/e2e_turns.sh
#
# Same conventions as tests/e2e.sh (helpers in e2e/lib.sh): fresh store per scenario, every
# worker killed on exit, every wait bounded, no assertion on how long something took except
# the documented "exited before grace + margin" check of the graceful stop.
source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"
TURNS=$APPS/turns.lua

# start_worker_env LOG ENV... -- APP ARGS...: start_worker with environment variables.
start_worker_env() {
  local log=$1 envs=()
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$DX" "$@" >/dev/null 2>>"$log" &
  WPID=$!
  WORKERS+=("$WPID")
}

# ---------------------------------------------------------------------------------------------
# Item 1. Rolling deploy: worker A (old release) lacks what an instance needs. Since issue 11
#    (capability filter) A never fetches it at all; an event raised or a cancel sent meanwhile
#    waits in the store for the first turn on worker B (new release), A still running.

t1_can_to_new_version_keeps_event() {
  local d S a
  d=$(new_dir t1); S=$(store_of "$d")
  start_worker_env "$d/A.log" TURNS_NEW=0 -- "$TURNS" --store "$S" --log-level debug
  a=$WPID
  run_cmd start Versioned '"in"' --id v1 --store "$S"
  check "rolling/can: instance started" "$RC" "$OUT" "$ERR"
  wait_until 20 has_event "$S" v1 OrchestrationContinuedAsNew
  check "rolling/can: the old worker ran 1.0.0 up to the continue-as-new to 2.0.0" $? \
    "$(tail -5 "$d/A.log")"
  run_cmd raise v1 go '"now"' --store "$S"
  check "rolling/can: event raised" "$RC" "$ERR"
  start_worker_env "$d/B.log" TURNS_NEW=1 -- "$TURNS" --store "$S"
  run_cmd wait v1 --timeout 60s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":{"ev":"now","input":"in"}' <<<"$OUT"
  check "rolling/can: new worker runs 2.0.0 and receives the event" $? "rc=$RC" "$OUT" "$ERR" \
    "$(tail -5 "$d/A.log")" "$(tail -5 "$d/B.log")"
  ! grep -q 'not registered' "$d/A.log"
  check "rolling/can: the old worker never took the execution it cannot run" $? \
    "$(grep 'not registered' "$d/A.log" | head -3)"
  stop_worker "$a"
}

t2_start_on_new_worker_keeps_event_and_cancel() {
  local d S st a
  d=$(new_dir t2); S=$(store_of "$d")
  start_worker_env "$d/A.log" TURNS_NEW=0 -- "$TURNS" --store "$S" --log-level debug
  a=$WPID
  run_cmd start WaitGo --id g1 --store "$S"
  check "rolling/start: instances started" "$RC" "$OUT" "$ERR"
  run_cmd start WaitCancel --id c1 --store "$S"
  run_cmd raise g1 go '"ev"' --store "$S"
  run_cmd cancel c1 "rolled back" --store "$S"
  check "rolling/start: cancel accepted" "$RC" "$ERR"
  start_worker_env "$d/B.log" TURNS_NEW=1 -- "$TURNS" --store "$S"
  run_cmd wait g1 --timeout 20s --store "$S"
  st=$RC
  [ "$st" -eq 0 ] && grep -q '"output":"ev"' <<<"$OUT"
  check "rolling/start: the event raised before the first turn reaches it" $? \
    "rc=$st" "$OUT" "$ERR"
  run_cmd wait c1 --timeout 5s --store "$S"
  [ "$RC" -eq 1 ] && grep -q 'canceled: rolled back' <<<"$OUT"
  check "rolling/start: the cancel sent before the first turn fails the instance" $? \
    "rc=$RC" "$OUT" "$ERR"
  ! grep -q 'not registered' "$d/A.log"
  check "rolling/start: the old worker never took the starts it cannot run" $? \
    "$(grep 'not registered' "$d/A.log" | head -3)"
  stop_worker "$a"
}

# ---------------------------------------------------------------------------------------------
# Item 2. A turn longer than the orchestrator lock commits (its lock is renewed), and the instances
#    fetched in the same batch behind it keep theirs: each runs exactly once.

t3_long_turn_keeps_its_lock() {
  local d S i bad=0 h n msgs=()
  d=$(new_dir t3); S=$(store_of "$d")
  # queued before the worker starts, so one fetch takes all of them: Busy first
  run_cmd start Busy 150000000 --id busy --store "$S"
  check "long turn: instance started" "$RC" "$OUT" "$ERR"
  for i in 1 2 3 4; do dx start Quick "$i" --id q$i --store "$S" >/dev/null || bad=1; done
  check "long turn: innocent instances started" $bad
  # the Busy turn takes seconds (150M iterations): longer than the 1s lock (renewed every 0.5s)
  start_worker "$d/w.log" "$TURNS" --store "$S" --orchestrator-lock-timeout 1s
  run_cmd wait busy --timeout 120s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"status":"Completed"' <<<"$OUT"
  check "long turn: the long turn commits" $? "rc=$RC" "$OUT" "$ERR" "$(tail -5 "$d/w.log")"
  h=$(dx history busy --store "$S")
  n=$(count_event "$h" OrchestrationStarted)
  check "long turn: it ran as one first turn (one OrchestrationStarted)" $((n != 1)) "$h"
  for i in 1 2 3 4; do
    run_cmd wait q$i --timeout 60s --store "$S"
    h=$(dx history q$i --store "$S")
    n=$(count_event "$h" OrchestrationStarted)
    [ "$RC" -eq 0 ] && [ "$n" -eq 1 ] || msgs+=("q$i: rc=$RC started=$n $OUT")
  done
  check "long turn: instances queued behind it complete once each" ${#msgs[@]} "${msgs[@]}"
  n=$(count_lines "$d/w.log" 'commit failed\|poison\|lock lost')
  check "long turn: no refused commit, lost lock or poison in the worker log" "$n" \
    "$(grep 'commit failed\|poison\|lock lost' "$d/w.log" | head -5)"
  stop_worker "$WPID"
}

# ---------------------------------------------------------------------------------------------
# Item 5. Option precedence: every worker option set by duroxide.configure in the app is used, and
#    the same option on the command line wins over it. One row per option:
#    NAME  CONFIGURE_VALUE  CLI_VALUE  PRINTED_FOR_CONFIGURE  PRINTED_FOR_CLI
#    (the "worker options" log line prints durations in ms)

OPTION_ROWS='
worker-node-id              "cfg-node"  cli-node  cfg-node    cli-node
orchestration-concurrency   7           9         7           9
worker-concurrency          5           6         5           6
max-sessions-per-worker     3           4         3           4
session-lock-timeout        "20s"       40s       20000ms     40000ms
session-idle-timeout        "60s"       2m        60000ms     120000ms
session-cleanup-interval    "90s"       3m        90000ms     180000ms
worker-lock-timeout         "20s"       40s       20000ms     40000ms
orchestrator-lock-timeout   "3s"        4s        3000ms      4000ms
poll-interval               "20ms"      30ms      20ms        30ms
max-attempts                3           7         3           7
shutdown-grace              "2s"        3s        2000ms      3000ms
turn-instruction-budget     200000      300000    200000      300000
turn-time-limit             "20s"       45s       20000ms     45000ms
log-level                   "debug"     info      debug       info
log-format                  "json"      text      json        text
'

# options_line LOG: the worker options line of a worker started with the given app and args.
run_for_options() {
  local log=$1 p
  shift
  : >"$log"
  "$DX" "$@" >/dev/null 2>>"$log" &
  p=$!
  WORKERS+=("$p")
  wait_until 20 grep -q 'worker options' "$log"
  stop_worker "$p"
}

t4_command_line_wins_over_configure() {
  local d S name cfg cli want_cfg want_cli lua_name app bad=() rows=0
  d=$(new_dir t4); S=$(store_of "$d")
  while read -r name cfg cli want_cfg want_cli; do
    [ -n "$name" ] || continue
    rows=$((rows + 1))
    lua_name=${name//-/_}
    app=$d/$lua_name.lua
    printf 'require("duroxide").configure({ %s = %s })\n' "$lua_name" "$cfg" >"$app"
    run_for_options "$d/$lua_name.cfg.log" "$app" --store "$S"
    grep 'worker options' "$d/$lua_name.cfg.log" | grep -Eq "\"?$name\"?[=:]\"?$want_cfg([\" ]|\$)" ||
      bad+=("$name: configure alone should give $want_cfg: $(grep 'worker options' "$d/$lua_name.cfg.log" | head -c 600)")
    run_for_options "$d/$lua_name.cli.log" "$app" --store "$S" "--$name" "$cli"
    grep 'worker options' "$d/$lua_name.cli.log" | grep -Eq "\"?$name\"?[=:]\"?$want_cli([\" ]|\$)" ||
      bad+=("$name: --$name $cli should win: $(grep 'worker options' "$d/$lua_name.cli.log" | head -c 600)")
  done <<<"$OPTION_ROWS"
  [ "$rows" -eq 16 ]
  check "options: the table covers every worker option ($rows rows)" $?
  check "options: configure sets each option, the command line wins over it" ${#bad[@]} "${bad[@]}"
}

# The budget itself (it used to be parsed and ignored): the app configures 1e9 instructions,
# the command line 1000; the command line's budget stops the turn.
t5_command_line_budget_applies() {
  local d S
  d=$(new_dir t5); S=$(store_of "$d")
  start_worker "$d/w.log" "$TURNS" --store "$S" --turn-instruction-budget 1000
  run_cmd start Busy 100000 --id b --wait 30s --store "$S"
  [ "$RC" -eq 1 ] && grep -q 'instruction budget exceeded' <<<"$OUT"
  check "options: --turn-instruction-budget stops a turn the app's configure would allow" $? \
    "rc=$RC" "$OUT" "$ERR"
  run_cmd start Quick 1 --id q --wait 30s --store "$S"
  check "options: the worker keeps serving" "$RC" "$OUT" "$ERR"
  stop_worker "$WPID"
}

# ---------------------------------------------------------------------------------------------
# Item 16. Graceful stop keeps its promise: SIGTERM with --shutdown-grace 2s while an activity sleeps
#     for a minute. The worker exits by the grace (plus a margin for a loaded machine), having
#     handed the activity back; another worker runs it, and it completes exactly once.

t6_shutdown_grace_hands_work_back() {
  local d S a h n session=$1
  d=$(new_dir "t6${session:+-session}"); S=$(store_of "$d")
  start_worker "$d/A.log" "$TURNS" --store "$S" --shutdown-grace 2s --worker-node-id node-A
  a=$WPID
  run_cmd start SleepyOnce "{\"marker\":\"$d/m\",\"ms\":60000${session:+,\"session\":\"$session\"}}" --id s1 --store "$S"
  check "shutdown${session:+ (session)}: instance started" "$RC" "$OUT" "$ERR"
  wait_until 30 grep -q '^start node-A' "$d/m"
  check "shutdown${session:+ (session)}: the activity runs on worker A" $? "$(tail -5 "$d/A.log")"
  stop_worker "$a" TERM 10   # grace 2s + margin; SIGKILLed (WRC=124) otherwise
  check "shutdown${session:+ (session)}: worker A exits by the grace, status 0" "$WRC" "rc=$WRC" "$(tail -5 "$d/A.log")"
  grep -q 'activity abandoned at shutdown instance=s1' "$d/A.log"
  check "shutdown${session:+ (session)}: the running activity was handed back" $? "$(tail -5 "$d/A.log")"
  start_worker "$d/B.log" "$TURNS" --store "$S" --worker-node-id node-B
  run_cmd wait s1 --timeout 60s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":"node-B"' <<<"$OUT"
  check "shutdown${session:+ (session)}: worker B completes the activity" $? "rc=$RC" "$OUT" "$ERR"
  h=$(dx history s1 --store "$S")
  n=$(count_event "$h" ActivityCompleted)
  [ "$n" -eq 1 ] && no_duplicate_completions "$h"
  check "shutdown${session:+ (session)}: exactly one completion in history" $? "$h"
  ! grep -q '^end node-A' "$d/m"
  check "shutdown${session:+ (session)}: worker A's run never finished (it was not left running)" $? "$(cat "$d/m")"
  stop_worker "$WPID"
}
t6_shutdown_grace() { t6_shutdown_grace_hands_work_back ""; }
t7_shutdown_grace_session() { t6_shutdown_grace_hands_work_back "sess-1"; }

# ---------------------------------------------------------------------------------------------
# Item 18. Clocks. (a) A worker that meets times from the store in its future warns. (b) A worker
#     whose wall clock steps 20 s ahead while another worker runs a session activity under 4 s
#     leases does not take the live session or the running activity.

t8_clock_ahead_is_reported() {
  local d S a
  d=$(new_dir t8); S=$(store_of "$d")
  start_worker_env "$d/A.log" TURNS_NEW=1 DX_TEST_CLOCK_OFFSET_MS=10000 -- "$TURNS" --store "$S" --log-level info
  a=$WPID
  run_cmd start WaitGo --id w --store "$S"
  wait_until 20 has_event "$S" w ExternalSubscribed
  check "clocks: worker A (clock 10s ahead) ran the first turn" $? "$(tail -5 "$d/A.log")"
  stop_worker "$a"
  start_worker_env "$d/B.log" TURNS_NEW=1 -- "$TURNS" --store "$S" --log-level info
  run_cmd raise w go '"x"' --store "$S"
  run_cmd wait w --timeout 30s --store "$S"
  check "clocks: worker B completes the instance" "$RC" "$OUT" "$ERR"
  grep -Eq "the store holds times ahead of this worker's clock.*instance=w ahead_ms=(8|9|10|11)[0-9]{3} " "$d/B.log"
  check "clocks: worker B warns that the store's times are ~10s in its future" $? "$(tail -5 "$d/B.log")"
  ! grep -q "ahead of this worker's clock" "$d/A.log"
  check "clocks: worker A (no history from a clock ahead of it) does not warn" $? "$(tail -5 "$d/A.log")"
  stop_worker "$WPID"
}

t9_clock_step_does_not_steal_a_live_session() {
  local d S a b
  d=$(new_dir t9); S=$(store_of "$d")
  echo 0 >"$d/offset"
  local lease=(--worker-lock-timeout 4s --session-lock-timeout 4s --session-idle-timeout 0)
  start_worker "$d/A.log" "$TURNS" --store "$S" --worker-node-id node-A "${lease[@]}"
  a=$WPID
  run_cmd start SlowOnce "{\"marker\":\"$d/m\",\"ms\":4000,\"session\":\"s1\"}" --id s --store "$S"
  check "clock step: instance started" "$RC" "$OUT" "$ERR"
  wait_until 20 grep -q '^start node-A' "$d/m"
  check "clock step: worker A runs the session activity" $? "$(tail -5 "$d/A.log")"
  start_worker_env "$d/B.log" DX_TEST_CLOCK_OFFSET_MS="@$d/offset" -- "$TURNS" --store "$S" \
    --worker-node-id node-B "${lease[@]}" --log-level info
  b=$WPID
  wait_until 20 grep -q 'worker started' "$d/B.log"
  echo 20000 >"$d/offset" # worker B's wall clock jumps 20 s ahead
  run_cmd wait s --timeout 60s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":"node-A"' <<<"$OUT"
  check "clock step: worker A completes its activity" $? "rc=$RC" "$OUT" "$ERR"
  ! grep -q 'node-B' "$d/m"
  check "clock step: worker B never ran the live session's activity" $? "$(cat "$d/m")"
  grep -q 'the wall clock stepped.*step_ms=' "$d/B.log"
  check "clock step: worker B reports the step" $? "$(tail -5 "$d/B.log")"
  stop_worker "$a"
  stop_worker "$b"
}

# Item 2 (activities). An activity that computes for 3 s without yielding blocks the loop, and with it every
# renewal timer, under 2s activity locks and session leases, with a second worker waiting:
# the store thread keeps the locks and the session lease, so every activity of the session
# runs once, on worker A.
t10_blocked_loop_keeps_activity_locks_and_session() {
  local d S a h n
  d=$(new_dir t10); S=$(store_of "$d")
  local lease=(--worker-lock-timeout 2s --session-lock-timeout 2s --session-idle-timeout 0)
  start_worker "$d/A.log" "$TURNS" --store "$S" --worker-node-id node-A "${lease[@]}"
  a=$WPID
  wait_until 20 grep -q 'worker started' "$d/A.log"
  run_cmd start HogPair "{\"marker\":\"$d/m\",\"ms\":3000,\"session\":\"s1\"}" --id hp --store "$S"
  check "blocked loop: instance started" "$RC" "$OUT" "$ERR"
  start_worker "$d/B.log" "$TURNS" --store "$S" --worker-node-id node-B "${lease[@]}"
  run_cmd wait hp --timeout 60s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":\["node-A","node-A","node-A"\]' <<<"$OUT"
  check "blocked loop: every session activity completes on worker A" $? "rc=$RC" "$OUT" "$ERR" "$(cat "$d/m")"
  n=$(grep -c . "$d/m")
  ! grep -q node-B "$d/m" && [ "$n" -eq 3 ]
  check "blocked loop: each activity ran exactly once, none on worker B" $? "$(cat "$d/m")"
  h=$(dx history hp --store "$S")
  no_duplicate_completions "$h"
  check "blocked loop: no duplicate completion in history" $? "$h"
  stop_worker "$a"
  stop_worker "$WPID"
}

# ---------------------------------------------------------------------------------------------
# Item 4. `start --version` takes only MAJOR.MINOR.PATCH, refused before the store is touched.

t11_start_refuses_a_bad_version() {
  local d S v bad=()
  d=$(new_dir t11); S=$(store_of "$d")
  for v in 1.x 1.2 1.2.3.4 v1.2.3 ""; do
    run_cmd start Quick 1 --id q --version "$v" --store "$S"
    [ "$RC" -eq 2 ] && grep -q -- "--version '$v' is not a version" <<<"$ERR" || bad+=("'$v': rc=$RC $ERR")
  done
  [ ! -e "$S" ] || bad+=("the store was created")
  check "version: start refuses versions that are not MAJOR.MINOR.PATCH (exit 2, no store)" ${#bad[@]} "${bad[@]}"
  run_cmd start Quick 1 --id q --version 1.0.0 --store "$S"
  check "version: a real version is accepted" "$RC" "$OUT" "$ERR"
}

# ---------------------------------------------------------------------------------------------
# Issue 12 (held rounds): on a directory store an activity runs inside the transaction of the
# turn that scheduled it. kill -9 of the worker there loses that transaction: the turn runs
# again after the restart and schedules the same activity, which runs again (at least once);
# the history holds one schedule and one completion.

# exited PID: the child process ended (a zombie not yet waited for counts).
exited() { ! alive "$1" || [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" = Z ]; }

t12_kill_inside_a_held_activity_runs_it_again_once_committed() {
  local d S a h
  d=$(new_dir t12); S=$(store_of "$d")
  # the victim: a Lua script's runtime with a long hold (held_victim.lua), the activity kills it
  "${LUA_ENV[@]}" lua5.4 "$APPS/held_victim.lua" "$S" >/dev/null 2>>"$d/A.log" &
  a=$!
  WORKERS+=("$a")
  run_cmd start CrashOnceOrch "{\"marker\":\"$d/m\",\"crash\":true}" --id k1 --store "$S"
  check "held crash: instance started" "$RC" "$OUT" "$ERR"
  wait_until 30 exited "$a" && [ "$(head -1 "$d/m" 2>/dev/null)" = "run node-A" ]
  check "held crash: the activity ran on the victim and killed it" $? \
    "$(cat "$d/m" 2>/dev/null)" "$(tail -5 "$d/A.log")"
  wait "$a" 2>/dev/null
  if [ "${DX_E2E_STORE:-}" != pg ]; then
    h=$(dx history k1 --store "$S")
    [ "$(count_event "$h" ActivityScheduled)" -eq 0 ]
    check "held crash: the turn that scheduled it was lost with the transaction" $? "$h"
  fi
  start_worker "$d/B.log" "$TURNS" --store "$S" --worker-node-id node-B
  run_cmd wait k1 --timeout 60s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":"done"' <<<"$OUT"
  check "held crash: after the restart the instance completes" $? "rc=$RC" "$OUT" "$ERR" \
    "$(tail -5 "$d/B.log")"
  [ "$(count_lines "$d/m" '^run ')" -eq 2 ]
  check "held crash: the activity ran twice (at least once)" $? "$(cat "$d/m")"
  h=$(dx history k1 --store "$S")
  [ "$(count_event "$h" ActivityScheduled)" -eq 1 ] && [ "$(count_event "$h" ActivityCompleted)" -eq 1 ]
  check "held crash: the history holds one schedule and one completion" $? "$h"
  stop_worker "$WPID"
}

run_scenarios t1_can_to_new_version_keeps_event t2_start_on_new_worker_keeps_event_and_cancel \
  t3_long_turn_keeps_its_lock t4_command_line_wins_over_configure t5_command_line_budget_applies \
  t6_shutdown_grace t7_shutdown_grace_session t8_clock_ahead_is_reported \
  t9_clock_step_does_not_steal_a_live_session t10_blocked_loop_keeps_activity_locks_and_session \
  t11_start_refuses_a_bad_version t12_kill_inside_a_held_activity_runs_it_again_once_committed
