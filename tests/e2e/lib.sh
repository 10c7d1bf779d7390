# tests/e2e/lib.sh -- shared setup and helpers of the end-to-end TAP scripts (tests/e2e*.sh).
#
# Source it from a script in tests/: it finds the binary ($DUROXIDE_LUA, else
# build/bindings/duroxide-lua; prints a SKIP plan and exits when missing), makes the temp dir
# $TMP with a private copy of the binary in it, kills every recorded worker on exit, and
# provides TAP helpers (pass/fail/check/diag), process helpers (dx, run_cmd, start_worker,
# stop_worker, wait_until, ...), history checks and run_scenarios.
#
#   E2E_KEEP=1     keep the temp dir (stores, worker logs) for debugging
#   E2E_ONLY="s2 s4"   run only some scenarios (by number prefix or full function name)
#   DX_E2E_STORE=pg    every store is a fresh schema on the PostgreSQL server $DX_TEST_PG
#                      (scripts/test starts one) instead of a directory; see store_of

set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)   # tests/
ROOT=$(cd "$HERE/.." && pwd)
DX=${DUROXIDE_LUA:-$ROOT/build/bindings/duroxide-lua}
APPS=$HERE/e2e/apps
HELLO=$ROOT/examples/hello.lua

if [ ! -x "$DX" ]; then
  echo "1..0 # SKIP duroxide-lua not found at $DX (build it, or set DUROXIDE_LUA)"
  exit 0
fi
case "${DX_E2E_STORE:-}" in
  ""|dir) ;;
  pg)
    if [ -z "${DX_TEST_PG:-}" ]; then
      echo "1..0 # SKIP DX_E2E_STORE=pg but no PostgreSQL server (\$DX_TEST_PG is not set)"
      exit 0
    fi ;;
  *) echo "Bail out! DX_E2E_STORE must be empty, dir or pg (got '$DX_E2E_STORE')"; exit 1 ;;
esac

TMP=$(mktemp -d "${TMPDIR:-/tmp}/${E2E_TMP_PREFIX:-duroxide-e2e}.XXXXXX")
# Run a private copy, so a rebuild during the run cannot swap the binary under the tests.
if cp "$DX" "$TMP/duroxide-lua" 2>/dev/null && "$TMP/duroxide-lua" --help >/dev/null 2>&1; then
  DX=$TMP/duroxide-lua
fi
WORKERS=()   # pids of every background worker we started
NTEST=0
NFAIL=0

cleanup() {
  local p
  for p in "${WORKERS[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${WORKERS[@]}"; do wait "$p" 2>/dev/null; done
  if [ -n "${E2E_KEEP:-}" ]; then echo "# kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# ---------------------------------------------------------------------------------------------
# TAP helpers

pass() { NTEST=$((NTEST + 1)); echo "ok $NTEST - $1"; }
fail() {
  NTEST=$((NTEST + 1)); NFAIL=$((NFAIL + 1))
  echo "not ok $NTEST - $1"
  shift
  local line
  for line in "$@"; do printf '%s\n' "$line" | sed 's/^/#   /' | head -c 4000; done
}
# check NAME COND_STATUS [diagnostic...]: ok when COND_STATUS is 0.
check() {
  local name=$1 st=$2
  shift 2
  if [ "$st" -eq 0 ]; then pass "$name"; else fail "$name" "$@"; fi
}
# todo NAME COND_STATUS REASON [diagnostic...]: a check of a known, reported gap (TAP TODO
# directive): printed like check, but it never fails the run. Remove the TODO once fixed.
todo() {
  local name=$1 st=$2 why=$3
  shift 3
  NTEST=$((NTEST + 1))
  if [ "$st" -eq 0 ]; then echo "ok $NTEST - $name # TODO $why"; return; fi
  echo "not ok $NTEST - $name # TODO $why"
  local line
  for line in "$@"; do printf '%s\n' "$line" | sed 's/^/#   /' | head -c 4000; done
}
diag() { printf '%s\n' "$@" | sed 's/^/# /'; }

# ---------------------------------------------------------------------------------------------
# process helpers

# dx ARGS...: a client command, bounded. stdout/stderr pass through.
dx() { timeout 60 "$DX" "$@"; }

# LUA_ENV: the environment for lua5.4 with the duroxide.so built next to the binary under test
# (with the sanitizer runtimes preloaded when that build is instrumented, as scripts/test does
# for busted). Use: "${LUA_ENV[@]}" lua5.4 script.lua ...
SO_DIR=$(dirname "${DUROXIDE_LUA:-$ROOT/build/bindings/duroxide-lua}")
LUA_ENV=(env "LUA_CPATH=$SO_DIR/?.so;;")
if ldd "$SO_DIR/duroxide.so" 2>/dev/null | grep -q libasan; then
  LUA_ENV+=("LD_PRELOAD=$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
            "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1")
fi

# run_cmd ARGS...: run a client command, capturing OUT, ERR and RC.
run_cmd() {
  local ef=$TMP/.stderr.$$
  OUT=$(timeout 60 "$DX" "$@" 2>"$ef")
  RC=$?
  ERR=$(cat "$ef")
  rm -f "$ef"
}

# start_worker LOG APP ARGS...: start a worker in the background (log level $WORKER_LOG_LEVEL,
# default info); its pid goes to WPID.
start_worker() {
  local log=$1
  shift
  "$DX" "$@" --log-level "${WORKER_LOG_LEVEL:-info}" >/dev/null 2>>"$log" &
  WPID=$!
  WORKERS+=("$WPID")
}

# stop_worker PID [SIGNAL [TIMEOUT_S]]: signal the worker and wait (bounded) for it to exit.
# Sets WRC to its exit status (124 when it did not exit in time: it is then SIGKILLed).
stop_worker() {
  local pid=$1 sig=${2:-TERM} t=${3:-30} i
  kill "-$sig" "$pid" 2>/dev/null
  for ((i = 0; i < t * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    WRC=124
  else
    wait "$pid" 2>/dev/null
    WRC=$?
  fi
}

# wait_until TIMEOUT_S CMD...: poll CMD every 0.1 s until it succeeds; 1 on timeout.
wait_until() {
  local t=$1 i
  shift
  for ((i = 0; i < t * 10; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  return 1
}

alive() { kill -0 "$1" 2>/dev/null; }
has_event() { dx history "$2" --store "$1" 2>/dev/null | grep -q "\"type\":\"$3\""; }
count_lines() { grep -c "$2" "$1" 2>/dev/null || true; }   # count_lines FILE REGEX
count_event() { grep -c "\"type\":\"$2\"" <<<"$1" || true; } # count_event HISTORY TYPE

# no_duplicate_completions HISTORY: every ActivityScheduled id completed exactly once.
no_duplicate_completions() { [ -z "$(printf '%s\n' "$1" | check_histories)" ]; }

# check_histories [FILE...]: history dumps (one JSON event per line; stdin when no file);
# prints "FILE: problem" for each history where some scheduled activity was not completed
# exactly once, a completion has no schedule, or OrchestrationCompleted is not there exactly
# once when E2E_WANT_DONE=1. Prints nothing when all are fine.
check_histories() {
  local f
  for f in "$@"; do [ -s "$f" ] || echo "$f: empty history"; done
  awk -v want_done="${E2E_WANT_DONE:-0}" '
    function field(name,   m) {
      if (match($0, "\"" name "\":[^,}]*")) {
        m = substr($0, RSTART + length(name) + 3, RLENGTH - length(name) - 3)
        gsub(/"/, "", m); return m
      }
      return ""
    }
    function finish(   id, bad) {
      if (file == "") return
      bad = ""
      for (id in sched) if (done[id] != 1) bad = bad " activity " id " completed " done[id] + 0 " times;"
      for (id in done) if (!(id in sched)) bad = bad " completion of unscheduled " id ";"
      if (want_done && ocomp != 1) bad = bad " OrchestrationCompleted x" ocomp ";"
      if (bad != "") print file ":" bad
    }
    FNR == 1 { finish(); file = FILENAME; delete sched; delete done; ocomp = 0 }
    {
      t = field("type")
      if (t == "ActivityScheduled") sched[field("event_id")] = 1
      else if (t == "ActivityCompleted" || t == "ActivityFailed") done[field("source_event_id")]++
      else if (t == "OrchestrationCompleted") ocomp++
    }
    END { finish() }' "$@"
}

new_dir() { local d=$TMP/$1; mkdir -p "$d"; echo "$d"; }

# store_of DIR: the store of the scenario that works in DIR (the same answer every time):
# DIR/store, or with DX_E2E_STORE=pg the schema e2e_<pid>_<DIR below $TMP> on $DX_TEST_PG.
store_of() {
  local rel
  if [ "${DX_E2E_STORE:-}" != pg ]; then echo "$1/store"; return; fi
  rel=${1#"$TMP"/}
  rel=$(printf '%s' "$rel" | tr -c 'a-zA-Z0-9\n' '_' | tr 'A-Z' 'a-z')
  case "$DX_TEST_PG" in
    *\?*) echo "${DX_TEST_PG}&schema=e2e_$$_${rel}" ;;
    *) echo "${DX_TEST_PG}?schema=e2e_$$_${rel}" ;;
  esac
}

# ---------------------------------------------------------------------------------------------
# run_scenarios FUNC...: run each scenario function (honouring $E2E_ONLY), kill any worker it
# left running, then print the plan line; returns non-zero when some check failed.

run_scenarios() {
  local s t0 p
  for s in "$@"; do
    if [ -n "${E2E_ONLY:-}" ]; then
      case " $E2E_ONLY " in *" ${s%%_*} "* | *" $s "*) ;; *) continue ;; esac
    fi
    diag "--- $s"
    t0=$SECONDS
    "$s"
    diag "($s took $((SECONDS - t0))s)"
    # Any worker the scenario left running is killed before the next one starts.
    for p in "${WORKERS[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    WORKERS=()
  done
  echo "1..$NTEST"
  [ "$NFAIL" -eq 0 ]
}
