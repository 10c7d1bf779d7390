#!/usr/bin/env bash
# tests/e2e_cache.sh -- the orchestration cache with real processes (issue 12 item 1): a second
# worker process turning an instance makes the first one's cached copy stale (it replays, and
# the instance ends as with no cache), and a worker killed with -9 while the cache holds its
# instances loses nothing.
#
#   bash tests/e2e_cache.sh           # uses $DUROXIDE_LUA, else build/bindings/duroxide-lua
#   E2E_ONLY="c1" bash tests/e2e_cache.sh
#
# Same conventions as tests/e2e.sh (helpers in e2e/lib.sh).
source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"
APP=$APPS/cache.lua

count_subscribed() { dx history "$2" --store "$1" 2>/dev/null | grep -c '"type":"ExternalSubscribed"'; }
has_subscribed() { [ "$(count_subscribed "$1" "$2")" -ge "$3" ]; }
event_types() { dx history "$2" --store "$1" 2>/dev/null | grep -o '"type":"[A-Za-z]*"' | tr '\n' ' '; }

# Run "Steps" on instance ID to its end: three events; before_event K runs before event K.
# Sets STEPS_OUT (the wait output) and STEPS_TYPES (the history's event types).
run_steps() {
  local S=$1 id=$2 hook=$3 k
  run_cmd start Steps --id "$id" --store "$S"
  check "$id: started" "$RC" "$OUT" "$ERR"
  for k in 1 2 3; do
    wait_until 30 has_subscribed "$S" "$id" "$k"
    check "$id: waits for event $k" $? "$(event_types "$S" "$id")"
    "$hook" "$k"
    run_cmd raise "$id" go "$((k * 10))" --store "$S"
    check "$id: event $k raised" "$RC" "$ERR"
  done
  run_cmd wait "$id" --timeout 60s --store "$S"
  STEPS_OUT=$OUT
  STEPS_TYPES=$(event_types "$S" "$id")
}

no_hook() { :; }

c1_other_process_invalidates_the_cached_copy() {
  local d S a b ref
  d=$(new_dir c1); S=$(store_of "$d")
  # A wakes only when a commit is announced (no polling): stopped between cycles, it holds
  # no store transaction
  WORKER_LOG_LEVEL=debug start_worker "$d/A.log" "$APP" --store "$S" --orchestration-cache-size 16m \
    --poll-interval 1h
  a=$WPID
  run_steps "$S" ref no_hook
  ref=$STEPS_TYPES
  grep -q '"output":\[11,21,31\]' <<<"$STEPS_OUT"
  check "one worker: the instance completes" $? "$STEPS_OUT"
  hook() {
    case $1 in
      2) # A holds the instance's code from its first turns; B takes the second event
        sleep 0.5
        kill -STOP "$a"
        WORKER_LOG_LEVEL=debug start_worker "$d/B.log" "$APP" --store "$S" --orchestration-cache-size 16m
        b=$WPID ;;
      3) wait_until 30 has_subscribed "$S" moved 3
        check "B turned the instance while A was stopped" $? "$(event_types "$S" moved)"
        stop_worker "$b"
        kill -CONT "$a" ;;
    esac
  }
  run_steps "$S" moved hook
  grep -q '"output":\[11,21,31\]' <<<"$STEPS_OUT"
  check "two workers: the instance completes with the same output" $? "$STEPS_OUT" \
    "$(tail -5 "$d/A.log")"
  [ "$STEPS_TYPES" = "$ref" ]
  check "two workers: the same history as with one" $? "$ref" "$STEPS_TYPES"
  grep -q 'orchestration cache miss.*instance=moved reason=stale' "$d/A.log"
  check "A found its cached copy stale and replayed" $? \
    "$(grep 'cache miss' "$d/A.log" | tail -5)"
  grep -q 'orchestration cache miss.*instance=moved reason=absent' "$d/B.log"
  check "B replayed the instance it had never seen" $? "$(grep 'cache miss' "$d/B.log" | tail -5)"
  no_duplicate_completions "$(dx history moved --store "$S")"
  check "no duplicate completion" $? "$(dx history moved --store "$S")"
  stop_worker "$a"
}

c2_kill_with_the_cache_on() {
  local d S h
  d=$(new_dir c2); S=$(store_of "$d")
  start_worker "$d/A.log" "$APP" --store "$S" --orchestration-cache-size 16m
  run_cmd start Chain '{"steps":12,"ms":100}' --id k1 --store "$S"
  check "crash: started" "$RC" "$ERR"
  wait_until 30 eval '[ "$(dx history k1 --store "$S" | grep -c ActivityCompleted)" -ge 4 ]'
  check "crash: a few steps ran" $? "$(event_types "$S" k1)"
  kill -9 "$WPID"
  wait "$WPID" 2>/dev/null
  start_worker "$d/B.log" "$APP" --store "$S" --orchestration-cache-size 16m
  run_cmd wait k1 --timeout 90s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":12' <<<"$OUT"
  check "crash: the chain completes after kill -9 and restart" $? "rc=$RC" "$OUT" "$ERR"
  h=$(dx history k1 --store "$S")
  no_duplicate_completions "$h"
  check "crash: no duplicate completion" $? "$h"
  [ "$(count_event "$h" ActivityScheduled)" -eq 12 ]
  check "crash: each step scheduled once" $? "$(event_types "$S" k1)"
  stop_worker "$WPID"
}

c3_cache_off_writes_the_same_history() {
  local d S on
  d=$(new_dir c3); S=$(store_of "$d")
  start_worker "$d/A.log" "$APP" --store "$S" --orchestration-cache-size 16m
  run_steps "$S" on no_hook
  on=$STEPS_TYPES
  stop_worker "$WPID"
  start_worker "$d/B.log" "$APP" --store "$S" --orchestration-cache-size 0
  run_steps "$S" off no_hook
  grep -q '"output":\[11,21,31\]' <<<"$STEPS_OUT"
  check "cache off: the instance completes" $? "$STEPS_OUT"
  [ "$STEPS_TYPES" = "$on" ]
  check "cache off: the same history as with the cache on" $? "$on" "$STEPS_TYPES"
  stop_worker "$WPID"
}

run_scenarios c1_other_process_invalidates_the_cached_copy c2_kill_with_the_cache_on \
  c3_cache_off_writes_the_same_history
