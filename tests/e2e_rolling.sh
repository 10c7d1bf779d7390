#!/usr/bin/env bash
# tests/e2e_rolling.sh -- a rolling deployment with real processes (issue 11 item 4): worker A
# runs the old release of tests/e2e/apps/rolling.lua, worker B the new one (APP_VERSION=2,
# tags default,printer). Instances start before, during and after the overlap; A leaves with
# SIGTERM while work is in flight. No instance may fail or be lost, A must never take work
# only the new release can run, and pinned or tagged work must run where it can.
#
#   bash tests/e2e_rolling.sh            # $DUROXIDE_LUA, else build/bindings/duroxide-lua
#   DX_E2E_STORE=pg bash tests/e2e_rolling.sh   # on PostgreSQL ($DX_TEST_PG)
#
# Conventions of tests/e2e.sh (helpers in e2e/lib.sh): fresh store, bounded waits, no
# assertion on how long anything took.
source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"
APP=$APPS/rolling.lua

# start_release LOG VERSION ID ARGS...: a worker of release VERSION with worker id ID.
start_release() {
  local log=$1 v=$2 id=$3
  shift 3
  APP_VERSION=$v "$DX" "$APP" --store "$S" --worker-node-id "$id" --log-level info "$@" \
    >/dev/null 2>>"$log" &
  WPID=$!
  WORKERS+=("$WPID")
}

r1_rolling_deployment_loses_nothing() {
  local d a b i id bad=() ids=() h
  d=$(new_dir r1); S=$(store_of "$d")
  start_release "$d/A.log" 1 old
  a=$WPID
  for i in 1 2 3 4 5 6; do ids+=("o$i"); run_cmd start Order "$i" --id "o$i" --store "$S"; done
  run_cmd start Loop '{"i":0,"n":60}' --id loop --store "$S"
  check "rolling: instances started on the old release" "$RC" "$OUT" "$ERR"
  wait_until 30 has_event "$S" o1 ActivityCompleted
  check "rolling: the old release runs them" $? "$(tail -5 "$d/A.log")"

  # the overlap: both releases run; work only the new one can run is started now
  start_release "$d/B.log" 2 new --tags default,printer
  b=$WPID
  for i in 1 2 3; do
    ids+=("p$i"); run_cmd start Order "$i" --id "p$i" --version 2.0.0 --store "$S"
    ids+=("a$i"); run_cmd start Audit "$i" --id "a$i" --store "$S"
  done
  for i in 7 8; do ids+=("o$i"); run_cmd start Order "$i" --id "o$i" --store "$S"; done
  wait_until 30 has_event "$S" p1 ActivityCompleted
  check "rolling: the new release runs pinned work during the overlap" $? "$(tail -5 "$d/B.log")"

  # the old release leaves with work in flight; more instances arrive afterwards
  stop_worker "$a"
  check "rolling: the old release stops cleanly (SIGTERM)" "$WRC" "$(tail -5 "$d/A.log")"
  for i in 9 10; do ids+=("o$i"); run_cmd start Order "$i" --id "o$i" --store "$S"; done
  ids+=("loop")

  for id in "${ids[@]}"; do
    run_cmd wait "$id" --timeout 60s --store "$S"
    [ "$RC" -eq 0 ] || bad+=("$id: rc=$RC $OUT $ERR")
    case $id in
      p*) grep -q '"v":"2.0.0"' <<<"$OUT" && grep -q '"tag":"printer"' <<<"$OUT" &&
            grep -q '"new"' <<<"$OUT" || bad+=("$id did not run 2.0.0 on the new release: $OUT") ;;
      a*) grep -q '"output":"new"' <<<"$OUT" || bad+=("$id did not run on the new release: $OUT") ;;
      o9|o10) grep -q '"v":"2.0.0"' <<<"$OUT" || bad+=("$id started after the upgrade: $OUT") ;;
      loop) grep -q '"i":60' <<<"$OUT" && grep -q '"v":"2.0.0"' <<<"$OUT" ||
              bad+=("the loop did not finish upgraded: $OUT") ;;
    esac
  done
  check "rolling: every instance completed (none failed or lost), each on a release that has its code" \
    ${#bad[@]} "${bad[@]}" "$(tail -3 "$d/A.log")" "$(tail -3 "$d/B.log")"

  bad=()
  for id in "${ids[@]}"; do
    h=$(dx history "$id" --store "$S")
    no_duplicate_completions "$h" || bad+=("$id: $(printf '%s\n' "$h" | check_histories)")
  done
  check "rolling: every activity completed exactly once" ${#bad[@]} "${bad[@]}"
  ! grep -q 'not registered' "$d/A.log"
  check "rolling: the old release never fetched work it cannot run" $? \
    "$(grep 'not registered' "$d/A.log" | head -3)"
  stop_worker "$b"
}

run_scenarios r1_rolling_deployment_loses_nothing
