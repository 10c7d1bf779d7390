#!/usr/bin/env bash
# tests/browser.sh -- the web console in a real browser (TAP): a worker (e2e/apps/console.lua)
# with running, completed and failed instances and a session it owns, `duroxide-lua ui` on it
# (and a --read-only one), then tests/browser/console_test.mjs drives headless Chromium through
# every page, raises an event and cancels an instance from the page.
#
#   CHROMIUM=/usr/bin/chromium   the browser (Debian's chromium; scripts/install-deps installs it)
#   DX_BROWSER_CACHE=DIR         where playwright-core is installed from npm when missing
#                                (default ~/.cache/duroxide-lua)
#   SHOT_DIR=DIR                 where the screenshots go (default: build/meson-logs/console-
#                                screenshots when DX_BUILD_DIR is set, else the temp dir)
# Without Chromium, Node.js or playwright-core the test SKIPs, except in CI (CI=true), where
# it fails.

source "$(dirname "${BASH_SOURCE[0]}")/e2e/lib.sh"

PW_VERSION=1.64.1
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}
CACHE=${DX_BROWSER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/duroxide-lua}
PW_DIR=$CACHE/playwright-core-$PW_VERSION

# missing WHAT: SKIP the whole test, or fail it in CI.
missing() {
  if [ "${CI:-}" = true ]; then
    fail "browser test prerequisites: $1"
    echo "1..$NTEST"
    exit 1
  fi
  echo "1..0 # SKIP $1"
  exit 0
}

[ -x "$CHROMIUM" ] || missing "no Chromium at $CHROMIUM (scripts/install-deps installs Debian's chromium)"
command -v node >/dev/null || missing "no Node.js (node) to drive the browser"
if [ ! -f "$PW_DIR/node_modules/playwright-core/package.json" ]; then
  mkdir -p "$PW_DIR"
  if ! npm install --prefix "$PW_DIR" --no-audit --no-fund --loglevel=error \
         "playwright-core@$PW_VERSION" >"$TMP/npm.log" 2>&1; then
    cat "$TMP/npm.log" | sed 's/^/# /' | tail -20
    missing "cannot install playwright-core@$PW_VERSION from npm into $PW_DIR"
  fi
fi

if [ -z "${SHOT_DIR:-}" ]; then
  if [ -n "${DX_BUILD_DIR:-}" ]; then SHOT_DIR=$DX_BUILD_DIR/meson-logs/console-screenshots
  else SHOT_DIR=$TMP/screenshots; fi
fi
mkdir -p "$SHOT_DIR"
rm -f "$SHOT_DIR"/*.png

UIS=()
# start_ui OUTFILE ARGS...: a console in the background (pid recorded); URL receives its address.
start_ui() {
  local out=$1
  shift
  "$DX" ui --listen 127.0.0.1:0 "$@" >"$out" 2>"$out.err" &
  WORKERS+=("$!")
  UIS+=("$!")
  wait_until 20 grep -q listening "$out"
  URL=$(sed -n 's/.*"listening":"\([^"]*\)".*/\1/p' "$out")
}

session_owned() { dx sessions --store "$S" | grep -q '"session_id":"sess-A".*' && dx sessions --store "$S" | grep '"sess-A"' | grep -q '"lease":"live"'; }

d=$(new_dir browser); S=$(store_of "$d")
start_worker "$d/worker.log" "$APPS/console.lua" --store "$S" --worker-node-id console-worker \
  --session-idle-timeout 0
run_cmd start Hello '"web"' --id done-1 --wait 30s --store "$S"
check "setup: done-1 completed" "$RC" "$OUT" "$ERR" "$(tail -5 "$d/worker.log")"
run_cmd start Boom '"x"' --id fail-1 --wait 30s --store "$S"
check "setup: fail-1 failed" $((RC != 1)) "$OUT" "$ERR"
run_cmd start Parent '"kid"' --id parent-1 --wait 30s --store "$S"
check "setup: parent-1 completed" "$RC" "$OUT" "$ERR"
run_cmd start Counter 1 --id counter-1 --wait 30s --store "$S"
[ "$RC" -eq 0 ] && grep -q '"execution_id":3' <<<"$OUT"
check "setup: counter-1 completed in its third execution" $? "$OUT" "$ERR"
dx start Waiter '{"a":1}' --id wait-1 --store "$S" >/dev/null
dx start Sleeper null --id sleep-1 --store "$S" >/dev/null
dx start Sleeper null --id sleep-2 --store "$S" >/dev/null
dx start SessionUser '{"session":"sess-A"}' --id sess-1 --store "$S" >/dev/null
wait_until 30 session_owned
check "setup: session sess-A is owned by the live worker" $? "$(dx sessions --store "$S")"
wait_until 30 has_event "$S" wait-1 ExternalSubscribed
check "setup: wait-1 waits for its event" $? "$(dx history wait-1 --store "$S")"

start_ui "$d/ui.out" --store "$S"
RW_URL=$URL
start_ui "$d/ui_ro.out" --store "$S" --read-only
RO_URL=$URL
[ -n "$RW_URL" ] && [ -n "$RO_URL" ]
check "setup: two consoles listen (one read-only)" $? "$(cat "$d"/ui*.out*)"

diag "screenshots: $SHOT_DIR"
CONSOLE_URL=$RW_URL CONSOLE_RO_URL=$RO_URL WORKER_ID=console-worker WORKER_PID=$WPID SHOT_DIR=$SHOT_DIR \
  PROFILE_DIR=$(mktemp -d "$TMP/profile.XXXXXX") PLAYWRIGHT=$PW_DIR/node_modules/playwright-core \
  CHROMIUM=$CHROMIUM timeout 300 node "$HERE/browser/console_test.mjs" >"$d/browser.tap" 2>&1
BRC=$?
# The browser's results, renumbered into this script's plan.
while IFS= read -r line; do
  case "$line" in
    "ok "*) pass "browser: ${line#* - }" ;;
    "not ok "*) fail "browser: ${line#* - }" ;;
    "#"*) echo "$line" ;;
  esac
done <"$d/browser.tap"
grep -qE '^1\.\.[0-9]+' "$d/browser.tap"
check "browser: the run finished (exit $BRC)" $? "$(grep -vE '^(ok|not ok|#)' "$d/browser.tap" | tail -20)"
# The consoles served the whole session; they stop cleanly (under ASan: without leaks).
for p in "${UIS[@]}"; do
  kill -TERM "$p"
  wait "$p"
  check "console $p exits 0 on SIGTERM" $? "$(cat "$d"/ui*.out.err)"
done
for p in instances instance sessions workers metrics; do
  [ -s "$SHOT_DIR/$p.png" ]
  check "screenshot of the $p page saved" $?
done
echo "1..$NTEST"
[ "$NFAIL" -eq 0 ]
