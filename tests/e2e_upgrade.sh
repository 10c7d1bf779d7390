#!/usr/bin/env bash
# tests/e2e_upgrade.sh -- an LMDB store shared by a worker of an OLDER build (store format 3,
# which checks the format only when it opens the store) and workers of this build, started
# while the old one runs (a rolling upgrade of processes on one host). The old worker must keep
# reading everything this build writes: no instance may fail or be lost, no worker may call the
# store damaged, and the store stays format 3 while the old process has it open.
#
#   DX_OLD=/path/to/old/duroxide-lua bash tests/e2e_upgrade.sh
#
# Without DX_OLD (an older release's binary) the script skips. A build of commit 993f809
# (format 3, before history runs): git worktree add /tmp/old 993f809; meson setup ...; ninja.
source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"
APP=$APPS/rolling.lua
OLD=${DX_OLD:-}
if [ -z "$OLD" ] || [ ! -x "$OLD" ] || [ "${DX_E2E_STORE:-}" = pg ]; then
  echo "1..0 # SKIP DX_OLD (an older build's duroxide-lua) not set, or not an LMDB run"
  exit 0
fi
cp "$OLD" "$TMP/duroxide-lua-old" && OLD=$TMP/duroxide-lua-old

# start_build LOG BINARY ID: a worker of BINARY; its pid goes to WPID.
start_build() {
  local log=$1 bin=$2 id=$3
  "$bin" "$APP" --store "$S" --worker-node-id "$id" --log-level info >/dev/null 2>>"$log" &
  WPID=$!
  WORKERS+=("$WPID")
}

u1_old_worker_beside_new_ones_reads_everything() {
  local d a b i id bad=() ids=() h outs=""
  d=$(new_dir u1); S=$(store_of "$d")
  start_build "$d/A.log" "$OLD" old
  a=$WPID
  for i in 1 2 3; do ids+=("o$i"); timeout 60 "$OLD" start Order "$i" --id "o$i" --store "$S" >/dev/null; done
  wait_until 30 has_event "$S" o1 ActivityCompleted
  check "upgrade: the old build runs instances" $? "$(tail -5 "$d/A.log")"

  # the overlap: a client and a worker of this build open the store the old worker holds
  for i in 4 5 6 7 8 9; do ids+=("o$i"); run_cmd start Order "$i" --id "o$i" --store "$S"; done
  start_build "$d/B.log" "$DX" new
  b=$WPID
  run_cmd start Loop '{"i":0,"n":20}' --id loop --store "$S"
  ids+=("loop")
  for i in 10 11 12 13; do ids+=("o$i"); run_cmd start Order "$i" --id "o$i" --store "$S"; done
  # the new worker dies holding locks (the old one takes them over), a new one replaces it
  wait_until 30 grep -q 'orchestration started' "$d/B.log"
  check "upgrade: the new worker runs turns beside the old one" $? "$(tail -5 "$d/B.log")"
  kill -9 "$b"; wait "$b" 2>/dev/null
  for i in 14 15 16; do ids+=("o$i"); run_cmd start Order "$i" --id "o$i" --store "$S"; done
  start_build "$d/B.log" "$DX" new2
  b=$WPID
  for id in "${ids[@]}"; do
    run_cmd wait "$id" --timeout 60s --store "$S"
    [ "$RC" -eq 0 ] || bad+=("$id: rc=$RC $OUT $ERR")
    outs+="$OUT"$'\n'
  done
  check "upgrade: every instance completed while old and new workers shared the store" \
    ${#bad[@]} "${bad[@]}" "$(tail -3 "$d/A.log")" "$(tail -3 "$d/B.log")"
  grep -q '"old"' <<<"$outs" && grep -q '"new' <<<"$outs"
  check "upgrade: both builds ran activities" $? "$outs"
  alive "$a"
  check "upgrade: the old worker still runs" $? "$(tail -5 "$d/A.log")"
  ! grep -Eqi 'damaged|corrupt|has format' "$d/A.log" "$d/B.log"
  check "upgrade: no worker calls the store damaged or refuses its format" $? \
    "$(grep -Ehi 'damaged|corrupt|has format' "$d/A.log" "$d/B.log" | head -5)"
  bad=()
  for id in "${ids[@]}"; do
    h=$(timeout 60 "$OLD" history "$id" --store "$S" 2>&1) || bad+=("$id: the old build cannot read it: $h")
    no_duplicate_completions "$h" || bad+=("$id: $(printf '%s\n' "$h" | check_histories)")
  done
  check "upgrade: the old build reads every history this build wrote, each activity completed once" \
    ${#bad[@]} "${bad[@]}"
  stop_worker "$a"
  check "upgrade: the old worker stops cleanly" "$WRC" "$(tail -5 "$d/A.log")"
  stop_worker "$b"

  # alone now: this build's next open moves the store to format 4; the old build refuses it
  run_cmd check --store "$S"
  check "upgrade: check (opening the store alone) finds it sound" "$RC" "$OUT" "$ERR"
  OUT=$(timeout 60 "$OLD" status o1 --store "$S" 2>&1)
  RC=$?
  [ "$RC" -ne 0 ] && grep -q 'has format 4' <<<"$OUT"
  check "upgrade: after an open alone the store is format 4 and the old build refuses it by number" \
    $? "rc=$RC $OUT"
  run_cmd status o1 --store "$S"
  check "upgrade: this build reads it" "$RC" "$OUT" "$ERR"
}

run_scenarios u1_old_worker_beside_new_ones_reads_everything
