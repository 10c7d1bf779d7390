#!/usr/bin/env bash
# tests/busted_modes.sh MODULE_DIR -- every busted spec with the orchestration cache off
# (DUROXIDE_ORCHESTRATION_CACHE_SIZE=0: every turn replays its history), as TAP. scripts/test
# runs the specs with the default (cache on); meson suite "cache_off" runs this, so the replay,
# nondeterminism, crash and session specs pass both ways (issue 12 item 1).
set -u
dir=${1:?usage: busted_modes.sh MODULE_DIR}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 1
if ! command -v busted >/dev/null && [ ! -x /usr/bin/busted ]; then
  echo "1..0 # SKIP busted is not installed"
  exit 0
fi
# An ASan build's module needs the sanitizer runtimes loaded first, as scripts/test --asan
# does for its own busted run (the interpreter itself is not instrumented: no leak report).
if ldd "$dir/duroxide.so" 2>/dev/null | grep -q libasan; then
  export LD_PRELOAD="$(gcc -print-file-name=libasan.so):$(gcc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1"
fi
DUROXIDE_ORCHESTRATION_CACHE_SIZE=0 lua5.4 /usr/bin/busted --cpath="$dir/?.so" -o TAP
