#!/usr/bin/env bash
# tests/e2e_edges.sh -- bad input at the command line, misuse of luv in activities, a blocked
# loop and forged log lines, with real duroxide-lua processes (TAP output).
#
#   bash tests/e2e_edges.sh             # uses $DUROXIDE_LUA, else build/bindings/duroxide-lua
#   E2E_ONLY="e2" bash tests/e2e_edges.sh
#
# Setup, cleanup and helpers are in e2e/lib.sh. No assertion depends on how long something
# took: a blocking activity holds the loop until the warning is in the log.

E2E_TMP_PREFIX=duroxide-e2e-edges
source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"
EDGES=$APPS/edges.lua

# refused NAME STATUS PATTERN ARGS...: the command exits with STATUS, stderr has PATTERN (a
# fixed string), there is no stack trace, the store named by $NOSTORE was not created and the
# current directory (empty) got no file either (no store named after a misplaced option).
refused() {
  local name=$1 want=$2 pat=$3
  shift 3
  run_cmd "$@"
  [ "$RC" -eq "$want" ] && grep -qF -- "$pat" <<<"$ERR" && ! grep -q traceback <<<"$ERR" &&
    [ ! -e "$NOSTORE" ] && [ -z "$(ls -A .)" ]
  check "$name" $? "rc=$RC (want $want)" "stderr: $ERR" "created: $(ls -d "$NOSTORE" ./* 2>&1)"
}

# ---------------------------------------------------------------------------------------------
# 1. command-line usage errors: exit 2, a message naming the problem, no store created

e1_usage() {
  local d
  d=$(new_dir e1)
  NOSTORE=$d/store
  mkdir "$d/cwd" && cd "$d/cwd" || return
  export DUROXIDE_STORE=$NOSTORE
  refused "usage: unknown command" 2 "unknown command 'strat'" strat Foo --id x
  refused "usage: missing app file" 2 "cannot open app nothere.lua" nothere.lua
  refused "usage: extra argument to list" 2 "unexpected argument 'extra'" list extra
  refused "usage: extra argument to status" 2 "unexpected argument 'b'" status a b
  refused "usage: extra argument to start" 2 "unexpected argument 'three'" start N '1' three --id x
  refused "usage: unknown option at the end (client)" 2 "unknown option --bogus" list --bogus
  refused "usage: unknown option at the end (worker)" 2 "unknown option --bogus" "$EDGES" --bogus
  refused "usage: option that does not apply" 2 "option --id does not apply to status" \
    status a --id b
  refused "usage: option value that is an option (client)" 2 "values may not start with --" \
    start N --id --wait
  refused "usage: option value that is an option (worker)" 2 "values may not start with --" \
    "$EDGES" --store --no-sync
  refused "usage: missing option value" 2 "option --timeout needs a value" wait a --timeout
  refused "usage: invalid JSON is refused before the store is opened" 2 "input: invalid JSON" \
    start N '{bad' --id x
  refused "usage: start without --id" 2 "start needs --id" start N
  printf '"a\0b"' >"$d/nul.json"
  refused "payload: @FILE with a NUL byte" 2 "contains a NUL byte" start N "@$d/nul.json" --id x
  refused "payload: - with a NUL byte" 2 "contains a NUL byte" start N - --id x <"$d/nul.json"
  # /dev/zero never ends: reading stops at the payload limit
  refused "payload: @/dev/zero stops at the payload limit" 2 "larger than the payload limit" \
    start N @/dev/zero --id x
  refused "payload: - from /dev/zero stops at the payload limit" 2 \
    "larger than the payload limit" raise x ev - </dev/zero
  unset DUROXIDE_STORE
  cd "$ROOT" || return
  run_cmd start N '"ok"' --id ok --store "$d/real"
  check "payload: a valid start still creates the store and queues the instance" "$RC" "$ERR"
}

# ---------------------------------------------------------------------------------------------
# 2. luv misuse in activities: the worker serves on and stops on SIGTERM

e2_luv() {
  local d S
  d=$(new_dir e2); S=$(store_of "$d")
  start_worker "$d/worker.log" "$EDGES" --store "$S"
  run_cmd start Call '{"name":"UvStop"}' --id stop --wait 20s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":"stopped"' <<<"$OUT"
  check "luv: uv.stop() in an activity completes it" $? "rc=$RC" "$OUT" "$ERR"
  run_cmd start Call '{"name":"UvLeak"}' --id leak1 --wait 20s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":"leaked"' <<<"$OUT"
  check "luv: an activity leaking a timer and a socket completes" $? "rc=$RC" "$OUT" "$ERR"
  run_cmd start Call '{"name":"UvWalk"}' --id walk --wait 20s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":2' <<<"$OUT"
  check "luv: uv.walk shows only the app's handles (the 2 leaked ones) and closing them is safe" \
    $? "rc=$RC" "$OUT" "$ERR" "$(tail -5 "$d/worker.log")"
  run_cmd start Call '{"name":"UvRun"}' --id run --wait 20s --store "$S"
  [ "$RC" -eq 1 ] && grep -q 'uv.run cannot be called from an activity' <<<"$OUT"
  check "luv: uv.run() inside an activity fails that activity" $? "rc=$RC" "$OUT" "$ERR"
  run_cmd start Call '{"name":"UvLeak"}' --id leak2 --wait 20s --store "$S"
  check "luv: leak again before stopping" "$RC" "$OUT" "$ERR"
  run_cmd start Quick '"still here"' --id quick --wait 20s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":"still here"' <<<"$OUT"
  check "luv: the worker still serves other instances" $? "rc=$RC" "$OUT" "$ERR"
  alive "$WPID"
  check "luv: the worker is alive" $? "$(tail -5 "$d/worker.log")"
  stop_worker "$WPID" TERM 30
  [ "$WRC" -eq 0 ] && grep -q "worker stopped" "$d/worker.log"
  check "luv: the worker exits 0 on SIGTERM despite leaked handles" $? "rc=$WRC" \
    "$(tail -5 "$d/worker.log")"
}

# ---------------------------------------------------------------------------------------------
# 3. a blocked loop is reported, naming what blocked it

e3_blocked() {
  local d S
  d=$(new_dir e3); S=$(store_of "$d")
  start_worker "$d/worker.log" "$EDGES" --store "$S"
  run_cmd start Call "{\"name\":\"BlockUntilWarned\",\"input\":\"$d/worker.log\"}" --id block1 \
    --wait 60s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":"warned"' <<<"$OUT"
  check "blocked: a CPU-bound activity sees the warning appear while it holds the loop" $? \
    "rc=$RC" "$OUT" "$ERR" "$(tail -5 "$d/worker.log")"
  grep 'loop blocked' "$d/worker.log" | grep -q 'running="activity BlockUntilWarned (instance block1, id 2)"'
  check "blocked: the warning names the activity and its instance" $? "$(grep -i blocked "$d/worker.log")"
  grep -q 'loop no longer blocked' "$d/worker.log"
  check "blocked: the end of the blockage is logged" $? "$(grep -i blocked "$d/worker.log")"
  stop_worker "$WPID"
  # an orchestration turn that spins until its instruction budget stops it
  start_worker "$d/worker2.log" "$EDGES" --store "$S" --loop-block-warning 20ms
  run_cmd start Spin --id spin1 --wait 60s --store "$S"
  [ "$RC" -eq 1 ] && grep 'loop blocked' "$d/worker2.log" |
    grep -q 'running="orchestration turn of instance spin1"'
  check "blocked: a spinning turn is named by its instance" $? "rc=$RC" "$OUT" \
    "$(grep -i blocked "$d/worker2.log")"
  stop_worker "$WPID"
  run_cmd list --loop-block-warning 1s --store "$S"
  [ "$RC" -eq 2 ]
  check "blocked: --loop-block-warning is a worker option only" $? "rc=$RC" "$ERR"
}

# ---------------------------------------------------------------------------------------------
# 4. control characters in ids cannot forge log lines

e4_log_forging() {
  local d S id
  d=$(new_dir e4); S=$(store_of "$d")
  start_worker "$d/worker.log" "$EDGES" --store "$S"
  id=$'evil\n2026-01-01T00:00:00.000Z error FORGED record'
  run_cmd start Quick '1' --id "$id" --wait 20s --store "$S"
  check "log: an id with a newline is accepted and runs" "$RC" "$OUT" "$ERR"
  ! grep -q '^2026-01-01T00:00:00.000Z error FORGED' "$d/worker.log" &&
    grep -qF 'instance=evil\n2026-01-01T00:00:00.000Z error FORGED record' "$d/worker.log"
  check "log: the newline is written escaped, no forged record line" $? "$(cat "$d/worker.log")"
  stop_worker "$WPID"
}

# ---------------------------------------------------------------------------------------------
# 5. --log-format json: one valid JSON object per line, whatever users put in ids, names and
#    errors (quotes, newlines, control bytes, invalid UTF-8); each with ts, level, worker_id

e5_json_logs() {
  local d S id out
  d=$(new_dir e5); S=$(store_of "$d")
  WORKER_LOG_LEVEL=debug start_worker "$d/worker.log" "$APPS/logs.lua" --store "$S" \
    --log-format json
  id=$'i"d\\x\n2026-01-01T00:00:00.000Z error FORGED\r\t\x01 end'
  # ids must be valid UTF-8 (every store): refused at the call, nothing started
  run_cmd start Fails --id "$id"$'\xff' --store "$S"
  [ "$RC" -ne 0 ] && grep -q 'instance id is not valid UTF-8 (byte [0-9]* is 0xff)' <<<"$ERR"
  check "an instance id that is not UTF-8 is refused at the call, naming the byte" $? \
    "rc=$RC" "$ERR"
  run_cmd start Fails --id "$id" --wait 20s --store "$S"
  [ "$RC" -eq 1 ]
  check "json log: an instance with a hostile id fails with a hostile error" $? "rc=$RC" "$ERR"
  run_cmd start Hostile --id "h-$id" --store "$S"
  check "json log: the hostile orchestration starts" "$RC" "$ERR"
  wait_until 30 grep -q 'activity not registered; will retry' "$d/worker.log"
  stop_worker "$WPID"
  out=$("${LUA_ENV[@]}" lua5.4 "$HERE/e2e/json_lines.lua" "$d/worker.log" 2>"$d/check.err")
  grep -q '^lines [1-9][0-9]* bad 0$' <<<"$out"
  check "json log: every line is one JSON object with ts, level, msg and worker_id" $? "$out" \
    "$(head -c 2000 "$d/check.err")"
  ! grep -q '^2026-01-01' "$d/worker.log"
  check "json log: no forged record line" $?
  local want
  for want in $'orchestration started\tinstance' $'orchestration failed\tinstance' \
              $'orchestration failed\terror' $'session claimed\tsession_id' \
              $'activity failed (application error)\terror' \
              $'activity not registered; will retry\tactivity'; do
    grep -qF "$want" <<<"$out"
    check "json log: hostile text intact in '${want//$'\t'/' / '}'" $? "$out"
  done
  grep -q $'^trace q"b.*FORGED.*\tmsg$' <<<"$out" && grep -q $'^atrace q"b.*FORGED.*\tmsg$' <<<"$out"
  check "json log: ctx and actx traces with hostile text are one record each" $? "$out"
  grep '"msg":"activity started"' "$d/worker.log" | grep '"activity":"Echo"' |
    grep -q '"session_id":"sq' &&
    ! grep '"msg":"activity started"' "$d/worker.log" | grep '"activity":"Boom"' |
    grep -q session_id
  check "json log: activity records carry session_id for a session activity only" $? \
    "$(grep '"msg":"activity started"' "$d/worker.log")"
  # the watchdog thread's records name the worker too
  start_worker "$d/worker2.log" "$EDGES" --store "$S" --log-format json --loop-block-warning 20ms
  run_cmd start Spin --id spin1 --wait 60s --store "$S"
  stop_worker "$WPID"
  out=$("${LUA_ENV[@]}" lua5.4 "$HERE/e2e/json_lines.lua" "$d/worker2.log" 2>"$d/check2.err")
  grep -q '^lines [1-9][0-9]* bad 0$' <<<"$out" && grep -q '"msg":"loop blocked' "$d/worker2.log"
  check "json log: a blocked-loop record (watchdog thread) is valid and names the worker" $? \
    "$out" "$(head -c 2000 "$d/check2.err")"
  run_cmd stats --store "$S"
  [ "$RC" -eq 0 ] && grep -Eq '"instances":[3-9],' <<<"$OUT" && grep -q '"sessions":{.*"total":1,' <<<"$OUT"
  check "stats: store-wide figures as one JSON line (3 instances, the hostile session)" $? \
    "rc=$RC" "$OUT" "$ERR"
  run_cmd stats extra --store "$S"
  [ "$RC" -eq 2 ]
  check "stats: an extra argument is refused with exit 2" $? "rc=$RC" "$ERR"
  # free text that is not UTF-8 commits on every store (PostgreSQL: as U+FFFD); an activity
  # name that is not UTF-8 is refused at the call (the orchestration fails naming it)
  start_worker "$d/worker3.log" "$APPS/logs.lua" --store "$S"
  run_cmd start FailsNotUtf8 --id not-utf8 --wait 30s --store "$S"
  local rc1=$RC err1=$ERR
  run_cmd start NameNotUtf8 --id name-not-utf8 --wait 30s --store "$S"
  stop_worker "$WPID"
  [ "$rc1" -eq 1 ]
  check "an orchestration failing with a message that is not UTF-8 ends Failed" $? \
    "rc=$rc1" "$err1" "$(grep -m1 'invalid byte' "$d/worker3.log")"
  [ "$RC" -eq 1 ] && grep -q 'activity name is not valid UTF-8 (byte 5 is 0xff)' <<<"$OUT$ERR"
  check "an activity name that is not UTF-8 fails the orchestration at the call, naming the byte" \
    $? "rc=$RC" "$OUT" "$ERR"
}

run_scenarios e1_usage e2_luv e3_blocked e4_log_forging e5_json_logs
