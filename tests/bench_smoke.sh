#!/usr/bin/env bash
# tests/bench_smoke.sh -- every bench/run workload of issue 12 at tiny sizes (TAP): each prints
# exactly one JSON line with its fields (tests/e2e/bench_line.lua checks them); bad options
# are refused before anything runs. No timing is asserted. With DX_E2E_STORE=pg the stores
# are fresh schemas on $DX_TEST_PG.
#   env: DUROXIDE_LUA (the binary; its directory holds duroxide.so)
. "$(dirname "$0")/e2e/lib.sh"

BUILD=$(dirname "$SO_DIR")
BENCH=$ROOT/bench/run

# bench ARGS...: bench/run on a fresh store of its own (an LMDB directory, or a new schema);
# sets OUT, ERR, RC.
bench() {
  local store ef=$TMP/.bench.err
  if [ "${DX_E2E_STORE:-}" = pg ]; then store=$DX_TEST_PG; else store=$(new_dir "b$NTEST")/store; fi
  LAST_STORE=$store
  OUT=$(timeout 300 "${LUA_ENV[@]}" DUROXIDE_BUILD="$BUILD" DUROXIDE_LUA="$DX" \
        "$BENCH" --store "$store" "$@" 2>"$ef")
  RC=$?
  ERR=$(cat "$ef")
}

# line_ok NAME CHECK...: the last bench run succeeded and its line passes the checks.
line_ok() {
  local name=$1 res
  shift
  if [ "$RC" -ne 0 ]; then fail "$name" "bench/run exited $RC" "$ERR"; return; fi
  res=$(printf '%s' "$OUT" | "${LUA_ENV[@]}" lua5.4 "$HERE/e2e/bench_line.lua" "$@" 2>&1)
  check "$name" $? "$res" "$ERR"
}

STORE_KIND='"lmdb"'
[ "${DX_E2E_STORE:-}" = pg ] && STORE_KIND='"postgres"'
COMMON=(engine='"duroxide-lua"' store="$STORE_KIND" durable=true loadavg:number)

b1_long() {
  bench --workload long --steps 20
  line_ok "long --steps 20: one line with the first and last 10% step times" "${COMMON[@]}" \
    workload='"long"' steps=20 n=1 first10_step_ms:number last10_step_ms:number \
    last_over_first:number\|null total_s:number worker_cpu_s:number worker='"same process"'
  bench --workload long --steps 10 --workers 1
  line_ok "long on a separate worker process" "${COMMON[@]}" workload='"long"' steps=10 \
    worker='"1 separate process"' worker_cpu_s:number
}

b2_payload() {
  bench --workload payload --kib 3 --n 4 --steps 2
  line_ok "payload --kib 3: orch/s and bytes/s, every instance completed" "${COMMON[@]}" \
    workload='"payload"' kib=3 steps=2 n=4 failed=0 orch_per_s:number bytes_per_s:number \
    act_per_s:number p50_ms:number
}

b3_prefill() {
  bench --workload chain --n 5 --prefill 300
  line_ok "chain --prefill 300: the line says the fill size" "${COMMON[@]}" workload='"chain"' \
    n=5 failed=0 prefill=300 prefill_s:number orch_per_s:number
  bench --workload fanout --n 5
  line_ok "fanout without prefill: no prefill field" "${COMMON[@]}" \
    workload='"fanout"' failed=0 prefill:null
}

b4_idle() {
  bench --workload idle --n 50
  line_ok "idle --n 50: the worker's memory per idle instance" "${COMMON[@]}" workload='"idle"' \
    n=50 rss_bytes_per_instance:number rss_anon_before_kib:number rss_anon_after_kib:number \
    cache_bytes_per_instance:number\|null cache_entries:number\|null \
    worker='"1 separate process"'
}

b5_cache_off() {
  if ! "$DX" --help 2>&1 | grep -q -- '--orchestration-cache-size'; then
    bench --workload chain --n 3
    line_ok "a build without the cache: the line says cache absent" "${COMMON[@]}" \
      cache='"absent"' failed=0
    bench --workload chain --n 3 --cache off
    [ "$RC" -eq 2 ] && [ -z "$OUT" ] &&
      grep -qF -- "--cache off: this build has no orchestration cache" <<<"$ERR"
    check "a build without the cache: --cache off is refused at once" $? "rc=$RC" "$OUT" "$ERR"
    return
  fi
  bench --workload chain --n 3
  line_ok "the cache is on by default" "${COMMON[@]}" cache='"on"' failed=0
  bench --workload chain --n 3 --cache off
  line_ok "--cache off, in-process worker: the line says cache off" "${COMMON[@]}" \
    cache='"off"' failed=0
  bench --workload long --steps 10 --workers 1 --cache off
  line_ok "--cache off, separate worker process" "${COMMON[@]}" cache='"off"' steps=10
}

b6_bad_options() {
  local args msg
  while IFS='|' read -r args msg; do
    # shellcheck disable=SC2086
    bench $args
    [ "$RC" -eq 2 ] && [ -z "$OUT" ] && grep -qF -- "$msg" <<<"$ERR" &&
      { [ "${DX_E2E_STORE:-}" = pg ] || [ ! -e "$LAST_STORE" ]; } # nothing made
    check "refused at once: $args" $? "rc=$RC" "$OUT" "$ERR"
  done <<'LIST'
--workload long --cache maybe|--cache expects on or off, got 'maybe'
--workload long --steps 2x|--steps expects a whole number of 0 or more, got '2x'
--workload long --steps 0|--n, --steps and --kib must be at least 1
--workload chain --kib 4|--kib applies to the payload workload
--workload nope|unknown workload nope
--workload list --prefill 10|--prefill does not apply to list
--workload long --steps|--steps needs a value
--workload idle --workers 2|idle measures one worker process (--workers 1)
LIST
}

b7_latency_precision() {
  bench --workload hello --n 3
  line_ok "hello: p50/p95 latency printed to 0.01 ms, every instance completed" "${COMMON[@]}" \
    workload='"hello"' n=3 failed=0 p50_ms:decimal2 p95_ms:decimal2 start='"one at a time"'
  bench --workload chain --n 3
  line_ok "chain: p50/p95 latency printed to 0.01 ms" "${COMMON[@]}" workload='"chain"' \
    failed=0 p50_ms:decimal2 p95_ms:decimal2
}

run_scenarios b1_long b2_payload b3_prefill b4_idle b5_cache_off b6_bad_options \
  b7_latency_precision
