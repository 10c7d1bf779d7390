#!/usr/bin/env bash
# tests/e2e_console.sh -- `duroxide-lua ui` and the worker's --metrics-listen over real HTTP
# (TAP): refused addresses and options, the JSON API's answers to bad input (and that bad
# input changes nothing), read-only mode, the token, the Host check, /metrics. The pages in a
# browser are tests/browser.sh. Apps: e2e/apps/console.lua.

source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"

# start_ui OUTFILE ARGS...: a console in the background (pid recorded); URL and UPID receive
# its address and pid.
start_ui() {
  local out=$1
  shift
  "$DX" ui "$@" >"$out" 2>"$out.err" &
  UPID=$!
  WORKERS+=("$UPID")
  wait_until 20 grep -q listening "$out"
  URL=$(sed -n 's/.*"listening":"\([^"]*\)".*/\1/p' "$out")
}

# http METHOD PATH [CURL ARGS...]: CODE (status), BODY (response body) from the console at $URL.
http() {
  local m=$1 p=$2
  shift 2
  BODY=$(curl -s -o - -w '\n%{http_code}' -X "$m" "$@" "${URL%/}$p")
  CODE=${BODY##*$'\n'}
  BODY=${BODY%$'\n'*}
}
post() { http POST "$1" -H 'Content-Type: application/json' --data-binary "$2"; }
# post_file PATH FILE: POST the JSON in FILE (too big for an argument).
post_file() { http POST "$1" -H 'Content-Type: application/json' --data-binary "@$2"; }

# expect_code NAME CODE [BODY_REGEX]: the last request answered CODE (and a body matching).
expect_code() {
  [ "$CODE" = "$2" ] && { [ -z "${3:-}" ] || grep -qE -- "$3" <<<"$BODY"; }
  check "$1" $? "status $CODE (want $2)" "$BODY"
}

# -----------------------------------------------------------------------------------------------
# 1. refused before anything starts: exit 2, a message naming the problem, no store created

c1_refusals() {
  local d S
  d=$(new_dir c1); S=$d/store
  run_cmd ui --listen 0.0.0.0:0 --store "$S"
  [ "$RC" -eq 2 ] && grep -q "0.0.0.0:0: it is not a loopback address" <<<"$ERR" && [ ! -e "$S" ]
  check "ui refuses a non-loopback address without --allow-remote (exit 2)" $? "rc=$RC" "$ERR"
  run_cmd ui --listen 0.0.0.0:0 --allow-remote --store "$S"
  [ "$RC" -eq 2 ] && grep -q -- "--allow-remote needs --token" <<<"$ERR" && [ ! -e "$S" ]
  check "ui refuses --allow-remote without a token (exit 2)" $? "rc=$RC" "$ERR"
  run_cmd ui --listen 127.0.0.1:0 --token short --store "$S"
  [ "$RC" -eq 2 ] && grep -q -- "--token is too short" <<<"$ERR"
  check "ui refuses a short token (exit 2)" $? "rc=$RC" "$ERR"
  run_cmd ui --listen 127.0.0.1:0 --token 'abcdefghijklmnop; q' --store "$S"
  [ "$RC" -eq 2 ] && grep -q -- "--token may contain only" <<<"$ERR"
  check "ui refuses a token with characters a cookie cannot carry (exit 2)" $? "rc=$RC" "$ERR"
  printf 'short\n' >"$d/short-token"
  run_cmd ui --listen 127.0.0.1:0 --token "@$d/short-token" --store "$S"
  [ "$RC" -eq 2 ] && grep -q -- "--token is too short" <<<"$ERR"
  check "ui refuses a short token read from a file (exit 2)" $? "rc=$RC" "$ERR"
  run_cmd ui --help
  [ "$RC" -eq 0 ] && grep -q "usage: duroxide-lua ui" <<<"$OUT"
  check "ui --help prints the usage (exit 0)" $? "rc=$RC" "$OUT" "$ERR"
  run_cmd ui --listen example.org:80 --store "$S"
  [ "$RC" -eq 2 ] && grep -q "listen address 'example.org:80' is not HOST:PORT" <<<"$ERR"
  check "ui refuses a host name other than localhost (exit 2)" $? "rc=$RC" "$ERR"
  run_cmd ui --listen 127.0.0.1:70000 --store "$S"
  [ "$RC" -eq 2 ] && grep -q "has no valid port" <<<"$ERR"
  check "ui refuses a port out of range (exit 2)" $? "rc=$RC" "$ERR"
  run_cmd ui --port 8080 --store "$S"
  [ "$RC" -eq 2 ] && grep -q "unknown option --port for ui" <<<"$ERR"
  check "ui refuses an unknown option (exit 2)" $? "rc=$RC" "$ERR"
  [ ! -e "$S" ]
  check "no refused ui command created the store" $?
  start_ui "$d/ui1.out" --listen 127.0.0.1:0 --store "$S"
  URL=${URL%/}
  run_cmd ui --listen "${URL#http://}" --store "$S"
  [ "$RC" -eq 1 ] && grep -q "cannot listen on 127.0.0.1 port ${URL##*:}: Address already in use" <<<"$ERR"
  check "ui on a port in use exits 1 naming the address" $? "rc=$RC" "$ERR"
  run_cmd "$APPS/console.lua" --metrics-listen nowhere --store "$S"
  [ "$RC" -eq 2 ] && grep -q "invalid value for --metrics-listen: listen address 'nowhere'" <<<"$ERR"
  check "worker refuses a bad --metrics-listen (exit 2)" $? "rc=$RC" "$ERR"
  run_cmd "$APPS/console.lua" --metrics-listen "${URL#http://}" --store "$S"
  [ "$RC" -eq 1 ] && grep -q -- "--metrics-listen: cannot listen on 127.0.0.1 port" <<<"$ERR"
  check "worker with a metrics port in use exits 1 before taking work" $? "rc=$RC" "$ERR"
}

# -----------------------------------------------------------------------------------------------
# 2. the JSON API: answers, and bad input refused with 400 naming it, changing nothing

c2_api() {
  local d S
  d=$(new_dir c2); S=$(store_of "$d")
  start_worker "$d/worker.log" "$APPS/console.lua" --store "$S"
  dx start Hello '"api"' --id done-1 --wait 30s --store "$S" >/dev/null
  dx start Waiter null --id wait-1 --store "$S" >/dev/null
  wait_until 30 has_event "$S" wait-1 ExternalSubscribed
  check "setup: wait-1 waits for its event" $? "$(tail -5 "$d/worker.log")"
  start_ui "$d/ui.out" --listen 127.0.0.1:0 --store "$S"

  http GET /api/instances
  expect_code "GET /api/instances lists both instances" 200 '"instance_id":"done-1".*"status":"Completed"'
  grep -q '"instance_id":"wait-1","orchestration":"Waiter"' <<<"$BODY" || grep -q '"wait-1"' <<<"$BODY"
  check "the list has the running one too" $? "$BODY"
  http GET "/api/instances?status=Completed"
  expect_code "status filter" 200 '"done-1"'
  ! grep -q '"wait-1"' <<<"$BODY"
  check "status filter leaves out the running one" $? "$BODY"
  http GET "/api/instances?limit=1"
  expect_code "limit=1 gives one row and a cursor" 200 '"next":"'
  http GET "/api/instances?status=Sleeping"
  expect_code "bad status filter: 400 naming it" 400 "status 'Sleeping' is not one of"
  http GET "/api/instances?limit=abc"
  expect_code "bad limit: 400 naming it" 400 "limit must be a whole number"
  http GET "/api/instances?colour=red"
  expect_code "unknown query parameter: 400 naming it" 400 "unknown query parameter 'colour'"
  http GET "/api/instance?id=done-1"
  expect_code "GET /api/instance shows input and output" 200 '"input":"api".*"output":"Hello, api!"'
  http GET "/api/instance"
  expect_code "instance without id: 400" 400 "query parameter id is missing"
  http GET "/api/instance?id=nobody"
  expect_code "unknown instance: 404 naming it" 404 "unknown instance 'nobody'"
  dx start Hello '"odd"' --id 'odd id/with?&=#%' --wait 30s --store "$S" >/dev/null
  http GET /api/instance --get --data-urlencode 'id=odd id/with?&=#%'
  expect_code "an id with spaces, slashes and query characters is found" 200 '"instance_id":"odd id/with\?&=#%"'
  http GET "/api/instance?id=%FF%FE"
  expect_code "an id that is not UTF-8: 404 with a JSON error, not 500" 404 '"error":"unknown instance'
  http GET "/api/history?id=%FF%FE"
  expect_code "history of an id that is not UTF-8: 404 with a JSON error" 404 '"error":'
  # a session id that is not UTF-8 is refused at the call on every store (lua-api.md "Limits")
  run_cmd start SessionUser '{"session":"bad-","raw":true}' --id sess-bad --wait 30s --store "$S"
  [ "$RC" -eq 1 ] && grep -q 'session id is not valid UTF-8' <<<"$OUT$ERR"
  check "a session id that is not UTF-8 fails the instance at the call, naming it" $? \
    "rc=$RC" "$OUT" "$ERR"
  http GET /api/sessions
  [ "$CODE" = 200 ] && ! grep -q '"session_id":"bad-' <<<"$BODY"
  check "... and no such session is listed" $? "status $CODE" "$BODY"
  http GET "/api/history?id=done-1&execution=0"
  expect_code "execution 0: 400" 400 "execution must be a whole number"
  http GET "/api/history?id=done-1"
  expect_code "history as JSON events" 200 '"type":"OrchestrationStarted"'

  post /api/raise '{"id":"wait-1","event":"go","data":1,"extra":true}'
  expect_code "raise with an unknown field: 400 naming it" 400 "unknown field 'extra'"
  post /api/raise '{"id":"wait-1","event":"go"'
  expect_code "raise with broken JSON: 400" 400 "request body is not a JSON object"
  post /api/raise '["wait-1","go"]'
  expect_code "raise with a JSON array: 400" 400 "request body is not a JSON object"
  post /api/raise '{"id":7,"event":"go"}'
  expect_code "raise with a numeric id: 400 naming the field" 400 "field 'id' must be a string"
  post /api/raise '{"id":"wait-1"}'
  expect_code "raise without an event: 400" 400 "field 'event' is missing"
  post /api/raise '{"id":"nobody","event":"go"}'
  expect_code "raise on an unknown instance: 404" 404 "nobody"
  { printf '{"id":"wait-1","event":"go","data":"'; head -c 300000 /dev/zero | tr '\0' a; printf '"}'; } >"$d/big.json"
  post_file /api/raise "$d/big.json"
  expect_code "raise over the payload limit: 400" 400 "payload|limit|large"
  { printf '{"id":"wait-1","event":"go","data":"'; head -c 1100000 /dev/zero | tr '\0' a; printf '"}'; } >"$d/huge.json"
  post_file /api/raise "$d/huge.json"
  expect_code "a body over 1 MiB: 413" 413 "larger than"
  http POST /api/raise -H 'Content-Type: text/plain' --data-binary '{"id":"wait-1","event":"go"}'
  expect_code "raise as text/plain (a cross-site form): 415" 415 "Content-Type: application/json"
  http GET /api/raise
  expect_code "GET on an action: 405" 405
  http GET /api/nothing
  expect_code "unknown API path: 404" 404 "no API /api/nothing"
  http GET /nothing.html
  expect_code "unknown page: 404" 404
  http GET /api/overview -H 'Host: attacker.example'
  expect_code "a foreign Host header (DNS rebinding): 403" 403 "not a loopback address"
  # Broken HTTP on raw connections: the server answers or drops them, and keeps serving.
  hp=${URL#http://}; hp=${hp%/}
  for junk in 'GARBAGE\r\n\r\n' 'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n' \
              'POST /api/raise HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\n' \
              'GET /api/instances HTTP/1.1\r\nHost: 127.0.0.1\r\n'; do
    timeout 5 bash -c "exec 3<>/dev/tcp/${hp%:*}/${hp##*:}; printf '$junk' >&3; timeout 1 cat <&3 >/dev/null" 2>/dev/null
  done
  http GET /api/overview
  expect_code "after broken requests and a half-sent one, the console still serves" 200 '"store"'
  ! has_event "$S" wait-1 ExternalEvent
  check "no refused request raised anything" $? "$(dx history wait-1 --store "$S")"

  post /api/raise '{"id":"wait-1","event":"go","data":{"n":1}}'
  expect_code "raise: 200" 200 '"raised":"go"'
  run_cmd wait wait-1 --timeout 30s --store "$S"
  [ "$RC" -eq 0 ] && grep -q '"output":{"got":{"n":1}}' <<<"$OUT"
  check "the raised event completes the instance with its data" $? "rc=$RC" "$OUT" "$ERR"
  dx start Sleeper null --id sleep-1 --store "$S" >/dev/null
  post /api/cancel '{"id":"sleep-1","reason":"from the API"}'
  expect_code "cancel: 200" 200 '"cancel_requested":true'
  run_cmd wait sleep-1 --timeout 30s --store "$S"
  [ "$RC" -eq 1 ] && grep -q "from the API" <<<"$OUT"
  check "the cancel fails the instance with the reason" $? "rc=$RC" "$OUT" "$ERR"
  dx start Sleeper null --id sleep-2 --store "$S" >/dev/null
  wait_until 30 has_event "$S" sleep-2 TimerCreated
  post /api/delete '{"id":"sleep-2"}'
  expect_code "delete of a running instance without force: 409" 409 "sleep-2"
  post /api/delete '{"id":"sleep-2","force":"yes"}'
  expect_code "delete with a non-boolean force: 400" 400 "field 'force' must be true or false"
  post /api/terminate '{"id":"sleep-2","reason":"stuck"}'
  expect_code "terminate: 200" 200 '"terminated":1'
  run_cmd status sleep-2 --store "$S"
  grep -q '"status":"Failed"' <<<"$OUT" && grep -q "stuck" <<<"$OUT"
  check "terminate fails the instance at once with the reason" $? "$OUT" "$ERR"
  post /api/terminate '{"id":"sleep-2"}'
  expect_code "terminate of a finished instance: 409" 409 "sleep-2"
  post /api/delete '{"id":"sleep-2"}'
  expect_code "delete of a finished instance: 200" 200 '"deleted":1'
  http GET "/api/instance?id=sleep-2"
  expect_code "a deleted instance is gone: 404" 404 "unknown instance 'sleep-2'"
  http GET /api/sessions
  expect_code "GET /api/sessions" 200 '"sessions":\['
  http GET /api/workers
  expect_code "GET /api/workers" 200 '"workers":\['
  http GET /api/metrics
  expect_code "GET /api/metrics has samples" 200 '"samples":\[\{'

  start_ui "$d/ro.out" --listen 127.0.0.1:0 --store "$S" --read-only
  dx start Waiter null --id wait-2 --store "$S" >/dev/null
  wait_until 30 has_event "$S" wait-2 ExternalSubscribed
  post /api/raise '{"id":"wait-2","event":"go"}'
  expect_code "read-only: raise refused with 403" 403 "--read-only"
  post /api/cancel '{"id":"wait-2"}'
  expect_code "read-only: cancel refused with 403" 403 "--read-only"
  http GET /api/instance?id=wait-2
  expect_code "read-only: reading works" 200 '"status":"Running"'
  ! has_event "$S" wait-2 ExternalEvent && ! has_event "$S" wait-2 OrchestrationCancelRequested
  check "read-only: nothing reached the instance" $? "$(dx history wait-2 --store "$S")"
  stop_worker "$WPID"
}

# -----------------------------------------------------------------------------------------------
# 3. a token: every request needs it; the first visit moves it into a cookie

c3_token() {
  local d S tok=0123456789abcdef0123
  d=$(new_dir c3); S=$d/store
  printf '%s\n' "$tok" >"$d/token"
  start_ui "$d/ui.out" --listen 127.0.0.1:0 --store "$S" --token "@$d/token"
  http GET /api/overview
  expect_code "token: a request without it gets 401" 401 "missing or wrong token"
  http GET /api/overview -H "Authorization: Bearer ${tok}x"
  expect_code "token: a wrong one gets 401" 401 "missing or wrong token"
  http GET /api/overview -H "Authorization: Bearer $tok"
  expect_code "token: the bearer header works" 200 '"read_only":false'
  http GET /api/overview -H "Cookie: dx_token=$tok"
  expect_code "token: the cookie works" 200 '"store"'
  BODY=$(curl -s -D - -o /dev/null "${URL%/}//elsewhere.example/?token=$tok")
  grep -qi "^Location: /"$'\r'"\?$" <<<"$BODY"
  check "token: the first-visit redirect always goes to / (no open redirect)" $? "$BODY"
  BODY=$(curl -s -D - -o /dev/null "${URL}?token=$tok")
  grep -q "^HTTP/1.1 303" <<<"$BODY" && grep -qi "^Set-Cookie: dx_token=$tok; HttpOnly; SameSite=Strict" <<<"$BODY" &&
    grep -qi "^Location: /" <<<"$BODY"
  check "token: ?token= sets an HttpOnly cookie and leaves the address" $? "$BODY"
  start_ui "$d/remote.out" --listen 0.0.0.0:0 --allow-remote --token "$tok" --store "$S"
  URL=http://127.0.0.1:${URL##*:}
  http GET /api/overview -H "Host: console.example:8080" -H "Authorization: Bearer $tok"
  expect_code "--allow-remote: other host names are served with the token" 200 '"store"'
  http GET /api/overview -H "Host: console.example:8080"
  expect_code "--allow-remote: still 401 without the token" 401
  kill -TERM "$UPID"
  wait "$UPID"
  check "ui exits 0 on SIGTERM" $? 
}

# -----------------------------------------------------------------------------------------------
# 4. the worker's /metrics

c4_metrics() {
  local d S port
  d=$(new_dir c4); S=$(store_of "$d")
  start_worker "$d/worker.log" "$APPS/console.lua" --store "$S" --metrics-listen 127.0.0.1:0
  wait_until 20 grep -q "serving metrics" "$d/worker.log"
  port=$(sed -n 's/.*serving metrics.*port=\([0-9]*\).*/\1/p' "$d/worker.log")
  URL=http://127.0.0.1:$port/
  dx start Hello '"m"' --id m1 --wait 30s --store "$S" >/dev/null
  http GET /metrics
  expect_code "GET /metrics answers Prometheus text" 200 "^# TYPE duroxide_"
  BODY=$(curl -s -D - -o /dev/null "${URL}metrics")
  grep -qi "^Content-Type: text/plain; version=0.0.4" <<<"$BODY"
  check "/metrics has the Prometheus content type" $? "$BODY"
  http GET /metrics
  awk '/^duroxide_orchestration_turns_total\{outcome="committed"\}/ { if ($NF + 0 >= 1) ok = 1 } END { exit !ok }' <<<"$BODY"
  check "/metrics counts the turns run" $? "$BODY"
  http GET /other
  expect_code "/other: 404" 404 "metrics are at /metrics"
  http POST /metrics
  expect_code "POST /metrics: 405" 405
  stop_worker "$WPID"
  check "worker with --metrics-listen exits 0 on SIGTERM" $((WRC != 0)) "rc=$WRC"
}

# -----------------------------------------------------------------------------------------------
# 5. the sessions page reads the store's session history; the workers page the live workers

owned_by() { dx sessions --store "$1" | grep "\"session_id\":\"$2\"" | grep -q "\"owner\":\"$3\".*\"lease\":\"live\"\|\"lease\":\"live\".*\"owner\":\"$3\""; }
api_lists_worker() { URL=$1; http GET /api/workers; grep -q "\"worker_id\":\"$2\"" <<<"$BODY"; }
api_drops_worker() { ! api_lists_worker "$@"; }
# change_row KIND: the move object of that kind in $BODY (empty when none).
change_row() { grep -o "{[^{}]*\"change\":\"$1\"[^{}]*}" <<<"$BODY" | head -1; }

c5_history_workers() {
  local d S pb
  d=$(new_dir c5); S=$(store_of "$d")
  start_worker "$d/a.log" "$APPS/console.lua" --store "$S" --worker-node-id hist-a
  local pa=$WPID
  dx start SessionUser '{"session":"sess-H"}' --id sess-h --store "$S" >/dev/null
  wait_until 30 owned_by "$S" sess-H hist-a
  check "setup: hist-a owns sess-H" $? "$(dx sessions --store "$S")"
  stop_worker "$pa" TERM
  check "setup: hist-a stopped (its sessions released)" "$WRC"
  # the console starts after the claim and the release: it can only know them from the store
  start_ui "$d/ui.out" --listen 127.0.0.1:0 --store "$S"
  local ui=$URL
  http GET /api/sessions
  expect_code "GET /api/sessions" 200 '"moves":\['
  local c r
  c=$(change_row claimed); r=$(change_row released)
  grep -q '"session_id":"sess-H"' <<<"$c" && grep -q '"to":"hist-a"' <<<"$c"
  check "sessions: a console started later shows the stored claim" $? "$BODY"
  grep -q '"from":"hist-a"' <<<"$r" && grep -q '"detail":"[a-z]' <<<"$r"
  check "sessions: ... and the release with its reason" $? "$BODY"
  start_worker "$d/b.log" "$APPS/console.lua" --store "$S" --worker-node-id hist-b
  pb=$WPID
  wait_until 30 api_lists_worker "$ui" hist-b
  check "workers: the live worker is listed" $? "$BODY"
  grep -q "\"pid\":$pb\b" <<<"$BODY" && grep -q '"host":"' <<<"$BODY"
  check "workers: with its host and process id" $? "$BODY"
  kill -9 "$pb"; wait "$pb" 2>/dev/null
  wait_until 15 api_drops_worker "$ui" hist-b
  check "workers: a worker killed with kill -9 leaves the page" $? "$BODY"
  if [ "${DX_E2E_STORE:-}" != pg ]; then
    run_cmd check --store "$S"
    check "check: a store with session history and a dead worker's registration is clean" \
      "$RC" "rc=$RC" "$OUT" "$ERR"
  fi
}

run_scenarios c1_refusals c2_api c3_token c4_metrics c5_history_workers
