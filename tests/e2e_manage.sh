#!/usr/bin/env bash
# tests/e2e_manage.sh -- the management commands end to end with a real worker (TAP): list,
# describe, history --execution, executions, prune, delete, terminate, purge, workers, and
# their refusals (exit 2, nothing created). Runs on LMDB, and on PostgreSQL with DX_E2E_STORE=pg.
#
#   bash tests/e2e_manage.sh        E2E_ONLY="s2" bash tests/e2e_manage.sh
#
# Same conventions as tests/e2e.sh (helpers in e2e/lib.sh): a fresh store per scenario, every
# worker killed on exit, every wait bounded, no assertion on how long something took.

E2E_TMP_PREFIX=duroxide-e2e-manage
source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"

MAPP=$APPS/manage.lua

status_is() { dx status "$2" --store "$1" 2>/dev/null | grep -q "\"status\":\"$3\""; }
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | head -1 | cut -d: -f2- | tr -d '"'; }

# A worker on a fresh store with: d1..d3 Completed (Done), loop (3 executions), p1 running
# with child c1 waiting for "go". Sets S and D.
setup() {
  D=$(new_dir "$1"); S=$(store_of "$D")
  start_worker "$D/w.log" "$MAPP" --store "$S" --worker-node-id mgr-w
  local i
  for i in 1 2 3; do dx start Done "$i" --id d$i --store "$S" >/dev/null; done
  dx start Looper 1 --id loop --store "$S" >/dev/null
  dx start Parent '"c1"' --id p1 --store "$S" >/dev/null
  wait_until 60 status_is "$S" d3 Completed
  wait_until 60 status_is "$S" loop Completed
  wait_until 60 has_event "$S" c1 ExternalSubscribed
}

s1_list_describe_history() {
  setup s1
  run_cmd list --store "$S"
  local n; n=$(grep -c '"instance_id"' <<<"$OUT")
  check "list: every instance, one row each" $((n != 6 || RC != 0)) "rc=$RC" "$OUT" "$ERR"
  grep '"instance_id":"d1"' <<<"$OUT" | grep -q '"created_at_ms":[0-9]*.*"execution_id":1.*"orchestration":"Done".*"status":"Completed".*"updated_at_ms":[0-9]*'
  check "list: a row has created/updated times, execution, name, status" $? "$OUT"
  run_cmd list --status Running --store "$S"
  check "list --status Running: p1 and c1" $(( $(grep -c instance_id <<<"$OUT") != 2 )) "$OUT"
  run_cmd list --name Done --status Completed --store "$S"
  check "list --name Done: three" $(( $(grep -c instance_id <<<"$OUT") != 3 )) "$OUT"
  # pages of two: a cursor line, and together every instance once
  local after="" all="" page pages=0
  while :; do
    if [ -n "$after" ]; then page=$(dx list --limit 2 --after "$after" --store "$S")
    else page=$(dx list --limit 2 --store "$S"); fi
    all+=$(grep instance_id <<<"$page")$'\n'
    after=$(grep '^{"next"' <<<"$page" | sed 's/.*"next":"\([^"]*\)".*/\1/')
    pages=$((pages + 1))
    [ -z "$after" ] || [ $pages -gt 5 ] && break
  done
  n=$(grep -o '"instance_id":"[^"]*"' <<<"$all" | sort -u | wc -l)
  check "list --limit 2 --after: 3 pages cover all 6 once" $((pages != 3 || n != 6)) "pages=$pages distinct=$n" "$all"
  run_cmd describe p1 --store "$S"
  grep -q '"children":\["c1"\]' <<<"$OUT" && grep -q '"status":"Running"' <<<"$OUT"
  check "describe p1: running, child c1" $? "$OUT" "$ERR"
  run_cmd describe c1 --store "$S"
  grep -q '"parent_instance":"p1"' <<<"$OUT" && grep -q '"subscribed_events":\[{"name":"go","waiting":1}\]' <<<"$OUT"
  check "describe c1: parent p1, waiting for go" $? "$OUT"
  run_cmd executions loop --store "$S"
  check "executions loop: three, the first continued as new" \
    $(( $(grep -c execution_id <<<"$OUT") != 3 )) "$OUT"
  grep -q '"execution_id":1,"started_at_ms".*\|"status":"ContinuedAsNew"' <<<"$OUT"
  check "executions: statuses shown" $? "$OUT"
  run_cmd history loop --execution 1 --store "$S"
  grep -q '"data":1,.*"type":"OrchestrationStarted"' <<<"$OUT" && grep -q OrchestrationContinuedAsNew <<<"$OUT"
  check "history --execution 1: the first execution" $? "$OUT" "$ERR"
  run_cmd prune loop --keep 1 --store "$S"
  check "prune --keep 1: two executions dropped" $([ "$(field pruned "$OUT")" = 2 ]; echo $?) "$OUT" "$ERR"
  run_cmd executions loop --store "$S"
  check "prune: one execution left" $(( $(grep -c execution_id <<<"$OUT") != 1 )) "$OUT"
  run_cmd history loop --execution 1 --store "$S"
  check "history of a pruned execution: exit 1, named" \
    $([ $RC = 1 ] && grep -q "has no execution 1" <<<"$ERR"; echo $?) "rc=$RC" "$ERR"
  run_cmd status loop --store "$S"
  check "prune keeps the result" $([ "$(field output "$OUT")" = 3 ]; echo $?) "$OUT"
}

s2_delete() {
  setup s2
  run_cmd delete p1 --store "$S"
  check "delete of a running instance: refused, exit 1" \
    $([ $RC = 1 ] && grep -q "instance 'p1' is running; use force" <<<"$ERR"; echo $?) "rc=$RC" "$ERR"
  run_cmd delete c1 --force --store "$S"
  check "delete of a sub-orchestration: refused naming the root" \
    $([ $RC = 1 ] && grep -q "is a sub-orchestration of 'p1'; delete its root 'p1'" <<<"$ERR"; echo $?) "rc=$RC" "$ERR"
  status_is "$S" c1 Running
  check "refused deletes changed nothing" $?
  run_cmd delete p1 --force --store "$S"
  check "delete --force: the tree (2 instances)" $([ "$(field deleted "$OUT")" = 2 ]; echo $?) "$OUT" "$ERR"
  run_cmd raise c1 go '"late"' --store "$S"
  check "the deleted child is unknown" $([ $RC = 1 ] && grep -q "unknown instance 'c1'" <<<"$ERR"; echo $?) "rc=$RC" "$ERR"
  # the worker is unharmed and the ids are free again
  dx start Done '"again"' --id p1 --store "$S" >/dev/null
  wait_until 60 status_is "$S" p1 Completed
  check "a deleted id starts afresh; the worker still runs" $? "$(tail -5 "$D/w.log")"
  run_cmd delete d1 --store "$S"
  check "delete of a finished instance" $([ $RC = 0 ] && [ "$(field deleted "$OUT")" = 1 ]; echo $?) "$OUT" "$ERR"
  run_cmd list --store "$S"
  check "list no longer shows them" $(grep -q '"d1"\|"c1"' <<<"$OUT"; [ $? = 1 ]; echo $?) "$OUT"
}

s3_terminate() {
  setup s3
  run_cmd terminate c1 "stuck child" --store "$S"
  check "terminate the child: 1 instance" $([ "$(field terminated "$OUT")" = 1 ]; echo $?) "$OUT" "$ERR"
  wait_until 60 status_is "$S" p1 Completed
  run_cmd status p1 --store "$S"
  grep -q '"child_failed":"terminated: stuck child"' <<<"$OUT"
  check "the parent's code saw the child fail with the reason" $? "$OUT"
  dx start Parent '"c2"' --id p2 --store "$S" >/dev/null
  wait_until 60 has_event "$S" c2 ExternalSubscribed
  run_cmd terminate p2 --store "$S"
  check "terminate a parent: it and its child" $([ "$(field terminated "$OUT")" = 2 ]; echo $?) "$OUT" "$ERR"
  run_cmd status c2 --store "$S"
  grep -q '"kind":"Terminated"' <<<"$OUT" && grep -q '"status":"Failed"' <<<"$OUT"
  check "the child failed as Terminated" $? "$OUT"
  run_cmd status p2 --store "$S"
  grep -q '"message":"terminated: by operator"' <<<"$OUT"
  check "the parent failed at once (no code ran)" $? "$OUT"
  run_cmd terminate p2 --store "$S"
  check "terminate of a finished instance: exit 1" \
    $([ $RC = 1 ] && grep -q "is not running (Failed)" <<<"$ERR"; echo $?) "rc=$RC" "$ERR"
  run_cmd raise c2 go 1 --store "$S"
  sleep 0.5
  status_is "$S" c2 Failed
  check "an event for a terminated instance changes nothing" $?
}

s4_purge() {
  setup s4
  local i
  for i in $(seq 1 30); do dx start Done "$i" --id m$i --store "$S" >/dev/null; done
  wait_until 60 status_is "$S" m30 Completed
  run_cmd purge --completed-before 0s --dry-run --store "$S"
  check "purge --dry-run: counts 34 finished roots, deletes nothing" \
    $([ "$(field matched "$OUT")" = 34 ] && [ "$(field deleted "$OUT")" = 34 ]; echo $?) "$OUT" "$ERR"
  check "dry run left them" $(( $(dx list --limit 100 --store "$S" | grep -c instance_id) != 36 ))
  run_cmd purge --completed-before 0s --name Done --store "$S"
  check "purge --name Done: 33" $([ "$(field deleted "$OUT")" = 33 ]; echo $?) "$OUT" "$ERR"
  run_cmd purge --completed-before 1h --store "$S"
  check "purge --completed-before 1h: nothing that recent" $([ "$(field matched "$OUT")" = 0 ]; echo $?) "$OUT"
  run_cmd purge --completed-before 0s --store "$S"
  check "purge: the looper; running instances stay" $([ "$(field deleted "$OUT")" = 1 ]; echo $?) "$OUT"
  run_cmd list --store "$S"
  check "left: p1 and c1" $(( $(grep -c instance_id <<<"$OUT") != 2 )) "$OUT"
  if [ "${DX_E2E_STORE:-}" != pg ]; then
    run_cmd check --store "$S"
    check "the store checks clean after purging" $RC "$OUT"
  fi
}

s5_kill_during_purge() {
  # A purge killed with SIGKILL between batches leaves a sound store; a second run finishes.
  D=$(new_dir s5); S=$(store_of "$D")
  start_worker "$D/w.log" "$MAPP" --store "$S"
  local i
  for i in $(seq 1 120); do dx start Done "$i" --id k$i --store "$S" >/dev/null; done
  wait_until 90 status_is "$S" k120 Completed
  "$DX" purge --completed-before 0s --store "$S" >"$D/purge.out" 2>&1 &
  local pp=$!
  sleep 0.05; kill -9 $pp 2>/dev/null; wait $pp 2>/dev/null
  if [ "${DX_E2E_STORE:-}" != pg ]; then
    run_cmd check --store "$S"
    check "after kill -9 mid-purge the store checks clean" $RC "$OUT"
  fi
  run_cmd purge --completed-before 0s --store "$S"
  check "a second purge finishes the job" $RC "$ERR"
  run_cmd list --store "$S"
  check "nothing left" $(( $(grep -c instance_id <<<"$OUT") != 0 )) "$OUT"
  dx start Done '"after"' --id k1 --store "$S" >/dev/null
  wait_until 60 status_is "$S" k1 Completed
  check "the worker still serves the store" $?
}

s6_refusals() {
  D=$(new_dir s6); S=$(store_of "$D")
  local cases=(
    "list --status Bogus|invalid value for --status: 'Bogus' (expected Pending, Running, Completed or Failed)"
    "list --limit 0|invalid value for --limit: '0'"
    "list --limit abc|invalid value for --limit: 'abc'"
    "list --after nonsense|list cursor 'nonsense' is not a cursor from a previous page"
    "list --created-after yesterday|invalid value for --created-after: 'yesterday' is not a time"
    "describe|usage: duroxide-lua describe ID"
    "history x --execution 0|invalid value for --execution: '0'"
    "executions x y|unexpected argument 'y'"
    "delete x --force=yes|option --force takes no value"
    "purge|purge needs --completed-before"
    "purge --completed-before soon|invalid value for --completed-before: 'soon' is not a time"
    "purge --completed-before 1d --status Running|invalid value for --status: 'Running' (expected Completed or Failed)"
    "prune x|prune needs --keep N"
    "prune x --keep -1|invalid value for --keep: '-1'"
    "terminate $(printf 'x%.0s' $(seq 1 401))|instance id is 401 bytes"
    "describe x --keep 1|option --keep does not apply to describe"
  )
  local c args want bad=0
  for c in "${cases[@]}"; do
    args=${c%%|*}; want=${c#*|}
    # shellcheck disable=SC2086
    run_cmd $args --store "$S"
    if [ $RC != 2 ] || ! grep -qF -- "$want" <<<"$ERR"; then
      bad=1; diag "$args -> rc=$RC: $ERR (want: $want)"
    fi
  done
  check "bad ids, filters and durations: exit 2 with a message naming them" $bad
  if [ "${DX_E2E_STORE:-}" != pg ]; then
    check "refused commands created no store" $([ ! -e "$S" ]; echo $?)
  fi
  run_cmd describe nobody --store "$S"
  check "describe of an unknown id: exit 1, named" \
    $([ $RC = 1 ] && grep -q "unknown instance 'nobody'" <<<"$ERR"; echo $?) "rc=$RC" "$ERR"
}

listed() { dx workers --store "$1" 2>/dev/null | grep -q "\"worker_id\":\"$2\""; }
not_listed() { ! listed "$@"; }

s7_workers() {
  # `workers` lists each live worker process (host, pid, start); one killed with kill -9
  # leaves the list at once, one stopped gracefully removes itself.
  D=$(new_dir s7); S=$(store_of "$D")
  start_worker "$D/a.log" "$MAPP" --store "$S" --worker-node-id wk-a
  local pa=$WPID
  start_worker "$D/b.log" "$MAPP" --store "$S" --worker-node-id wk-b
  local pb=$WPID
  wait_until 30 listed "$S" wk-a && wait_until 30 listed "$S" wk-b
  run_cmd workers --store "$S"
  check "workers: both live workers, one line each" \
    $(( $(grep -c '"worker_id"' <<<"$OUT") != 2 || RC != 0 )) "rc=$RC" "$OUT" "$ERR"
  grep '"worker_id":"wk-b"' <<<"$OUT" | grep -q "\"pid\":$pb,.*\"started_at_ms\":[1-9]"
  check "workers: a row names the process id and start time" $? "$OUT"
  grep '"worker_id":"wk-a"' <<<"$OUT" | grep -q "\"host\":\"$(uname -n)\""
  check "workers: a row names the host" $? "$OUT"
  kill -9 "$pb"; wait "$pb" 2>/dev/null
  wait_until 15 not_listed "$S" wk-b
  check "a worker killed with kill -9 leaves the list" $? "$(dx workers --store "$S" 2>&1)"
  listed "$S" wk-a
  check "the other worker stays listed" $?
  stop_worker "$pa" TERM
  run_cmd workers --store "$S"
  check "a worker stopped gracefully removes itself" $(( RC != 0 || $(grep -c worker_id <<<"$OUT") != 0 )) "$OUT" "$ERR"
}

run_scenarios s1_list_describe_history s2_delete s3_terminate s4_purge s5_kill_during_purge s6_refusals s7_workers
