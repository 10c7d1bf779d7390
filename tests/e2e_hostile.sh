#!/usr/bin/env bash
# tests/e2e_hostile.sh -- hostile orchestration code against a real worker (TAP output).
#
#   bash tests/e2e_hostile.sh         # uses $DUROXIDE_LUA, else build/bindings/duroxide-lua
#   E2E_KEEP=1 / E2E_ONLY="h1" as in tests/e2e.sh
#
# Every attack in tests/e2e/apps/hostile.lua (budget bypasses, memory, shared-state tampering,
# unreachable functions) must fail its own instance with a clear error while the same worker
# process keeps serving an innocent orchestration with unchanged output, and still stops on
# SIGTERM. The busted twin with more cases is spec/hostile_spec.lua.

source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"

HOSTILE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/e2e/apps/hostile.lua

# attack name and a fragment its failure message must contain
ATTACKS=(
  "sort|instruction budget exceeded"
  "gsub|instruction budget exceeded"
  "tostring|instruction budget exceeded"
  "index|instruction budget exceeded"
  "handler|instruction budget exceeded"
  "errobj|instruction budget"
  "pattern|instruction budget exceeded"
  "patfind|instruction budget exceeded"
  "move|instruction budget exceeded"
  "emptyrep|instruction budget exceeded"
  "rep|memory limit exceeded"
  "strrep|string is read-only in orchestrations"
  "strmeta|read-only in orchestrations"
  "ctxmeta|read-only in orchestrations"
  "binary|binary chunks are not available in orchestrations"
  "luv|luv.now is not available in orchestrations"
  "luvhandle|luv handle method start is not available in orchestrations"
  "exit|os.exit is not available in orchestrations"
  "gcstop|collectgarbage(\\\"stop\\\") is not available in orchestrations"
  "finalizer|finalizers (__gc) are not available in orchestrations"
)

innocent_ok() { # innocent_ok STORE ID: the innocent instance completed with its usual output
  run_cmd start Innocent '"v"' --id "$2" --wait 60s --store "$1"
  [ "$RC" -eq 0 ] && grep -q '"status":"Completed"' <<<"$OUT" && grep -q '"output":"ababXv5"' <<<"$OUT"
}

h1_attacks() {
  local d S a name want i=0
  d=$(new_dir h1); S=$(store_of "$d")
  start_worker "$d/worker.log" "$HOSTILE" --store "$S"
  innocent_ok "$S" before
  check "hostile: innocent instance completes before the attacks" $? "rc=$RC" "$OUT" "$ERR"
  for a in "${ATTACKS[@]}"; do
    name=${a%%|*}
    want=${a#*|}
    i=$((i + 1))
    run_cmd start "Attack_$name" --id "attack-$name" --wait 120s --store "$S"
    grep -q '"status":"Failed"' <<<"$OUT" && grep -qF "$want" <<<"$OUT"
    check "hostile: $name fails its instance ($want)" $? "rc=$RC" "$OUT" "$ERR" \
      "$(tail -5 "$d/worker.log")"
    alive "$WPID"
    check "hostile: the worker survives $name" $? "$(tail -5 "$d/worker.log")"
    innocent_ok "$S" "after-$name"
    check "hostile: an innocent instance completes unchanged after $name" $? "rc=$RC" "$OUT" "$ERR"
  done
  run_cmd start HelperGlobals --id helper1 --wait 60s --store "$S"
  grep -q '"output":\[1,2\]' <<<"$OUT"
  check "hostile: a global created by a helper starts fresh in instance 1" $? "$OUT" "$ERR"
  run_cmd start HelperGlobals --id helper2 --wait 60s --store "$S"
  grep -q '"output":\[1,2\]' <<<"$OUT"
  check "hostile: ... and in instance 2 (not shared)" $? "$OUT" "$ERR"
  stop_worker "$WPID"
  check "hostile: worker exits 0 on SIGTERM after the attacks" $((WRC != 0)) "rc=$WRC" \
    "$(tail -8 "$d/worker.log")"
}

h2_concurrent() {
  local d S a name bad=0 msgs=()
  d=$(new_dir h2); S=$(store_of "$d")
  start_worker "$d/worker.log" "$HOSTILE" --store "$S"
  for a in "${ATTACKS[@]}"; do
    name=${a%%|*}
    dx start "Attack_$name" --id "attack-$name" --store "$S" >/dev/null || bad=1
  done
  check "hostile (concurrent): all attacks started" $bad
  innocent_ok "$S" innocent-during
  check "hostile (concurrent): an innocent instance completes among the attacks" $? "rc=$RC" \
    "$OUT" "$ERR"
  for a in "${ATTACKS[@]}"; do
    name=${a%%|*}
    run_cmd wait "attack-$name" --timeout 120s --store "$S"
    grep -q '"status":"Failed"' <<<"$OUT" || { bad=1; msgs+=("$name: $OUT $ERR"); }
  done
  check "hostile (concurrent): every attack failed" $bad "${msgs[@]}"
  stop_worker "$WPID" TERM 30
  check "hostile (concurrent): worker exits 0 on SIGTERM" $((WRC != 0)) "rc=$WRC" \
    "$(tail -8 "$d/worker.log")"
}

h3_sigterm_mid_attack() {
  local d S
  d=$(new_dir h3); S=$(store_of "$d")
  start_worker "$d/worker.log" "$HOSTILE" --store "$S"
  dx start Attack_sort --id looping --store "$S" >/dev/null
  wait_until 30 has_event "$S" looping OrchestrationStarted
  stop_worker "$WPID" TERM 60
  check "hostile: worker stops on SIGTERM while an attack runs" $((WRC == 124)) "rc=$WRC" \
    "$(tail -8 "$d/worker.log")"
}

# Single C calls the instruction budget counts as one instruction (a sort of a million
# entries, shifting a huge table, utf8.len of 16 MB, == of two 10 MB strings), in a loop: the
# turn time limit fails each instance; the worker serves the innocent one and stops on SIGTERM.
SLOW_ATTACKS=(slowsort shift utf8len streq)
h4_time_limit() {
  local d S name
  d=$(new_dir h4); S=$d/store
  start_worker "$d/worker.log" "$HOSTILE" --store "$S" --turn-time-limit 1s
  for name in "${SLOW_ATTACKS[@]}"; do
    run_cmd start "Attack_$name" --id "slow-$name" --wait 120s --store "$S"
    grep -q '"status":"Failed"' <<<"$OUT" && grep -q '"kind":"TimeLimitExceeded"' <<<"$OUT" &&
      grep -qF "turn ran longer than the turn time limit (1s)" <<<"$OUT"
    check "hostile: $name in a loop fails its instance (turn time limit)" $? "rc=$RC" "$OUT" \
      "$ERR" "$(tail -5 "$d/worker.log")"
    innocent_ok "$S" "after-$name"
    check "hostile: an innocent instance completes after $name" $? "rc=$RC" "$OUT" "$ERR"
  done
  # all at once: the innocent one still gets its turns between them
  for name in "${SLOW_ATTACKS[@]}"; do
    dx start "Attack_$name" --id "slow2-$name" --store "$S" >/dev/null
  done
  innocent_ok "$S" innocent-during
  check "hostile: an innocent instance completes among the slow attacks" $? "rc=$RC" "$OUT" "$ERR"
  stop_worker "$WPID" TERM 60
  check "hostile: worker exits 0 on SIGTERM during the slow attacks" $((WRC != 0)) "rc=$WRC" \
    "$(tail -8 "$d/worker.log")"
}

run_scenarios h1_attacks h2_concurrent h3_sigterm_mid_attack h4_time_limit
