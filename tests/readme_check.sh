#!/usr/bin/env bash
# readme_check.sh -- README.md runs top to bottom when pasted: every ```sh snippet (extracted
# by tools/readme_snippets.lua, in order) runs in one shell in a copy of the source tree in a
# temporary folder, with a temporary HOME. A snippet fails when a command in it fails
# (errexit); it leaks when a process it started is still running 60 s after it ended. The
# whole README then runs a second time in the same folder: ids must not collide. TAP output.
# Env (set by tests/meson.build): DX_SOURCE_DIR, DX_BUILD_DIR.
set -u
src="${DX_SOURCE_DIR:?}"
build="${DX_BUILD_DIR:?}"
tmp="$(mktemp -d)"
sid=""
# Kill by pid whatever is left in the snippets' session (setsid below), then clean up.
kill_session() {
  [ -n "$sid" ] || return 0
  for p in $(ps -o pid= -s "$sid" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
}
trap 'kill_session; rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do printf '%s\n' "$l" | tail -40 | sed 's/^/# /'; done; }

mkdir -p "$tmp/snippets" "$tmp/home" "$tmp/tree"
count="$(lua5.4 "$src/tools/readme_snippets.lua" "$src/README.md" "$tmp/snippets")" || count=0
echo "1..$((2 * count + 1))"
if [ "$count" -ge 5 ]; then ok "README.md has $count shell snippets"
else not_ok "README.md has shell snippets (found $count)"; fi

# A fresh copy of the source tree, as a clone would be; build/ is the tested build.
(cd "$src" && if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
   git ls-files -z --cached --others --exclude-standard | tar --null -cf - -T -
 else tar --exclude='./build*' -cf - .; fi) | tar -xf - -C "$tmp/tree"
ln -s "$build" "$tmp/tree/build"

# The driver: every snippet in order in one shell (a paste keeps exports), each followed by
# a wait for the processes it started. Markers on fd 3 tell which snippet ended how.
driver="$tmp/driver.sh"
{
  echo 'set -e'
  echo 'settle() { local i; for i in $(seq 1 300); do [ -z "$(jobs -pr)" ] && return 0; sleep 0.2; done; echo "left running: $(jobs -l)" >&2; return 1; }'
  for i in $(seq -f '%02g' 1 "$count"); do
    echo "echo 'start $i' >&3"
    echo "source '$tmp/snippets/$i.sh'"
    echo "if settle; then echo 'done $i' >&3; else echo 'leak $i' >&3; exit 1; fi"
  done
} >"$driver"

run_readme() { # $1: the pass (first, second)
  : >"$tmp/markers"
  (cd "$tmp/tree" && exec setsid env -i PATH="/usr/bin:/bin" HOME="$tmp/home" TMPDIR="$tmp" \
     LANG=C.UTF-8 timeout 900 bash "$driver" 3>>"$tmp/markers" >"$tmp/out-$1.log" 2>&1) &
  local pid=$!
  sid=$pid
  wait "$pid"
  kill_session
  sid=""
  for i in $(seq -f '%02g' 1 "$count"); do
    local where
    where="$(sed -n 1p "$tmp/snippets/$i.sh" | sed 's/^# //')"
    if grep -qx "done $i" "$tmp/markers"; then ok "$1 run: snippet $i ($where) runs and stops what it starts"
    elif grep -qx "leak $i" "$tmp/markers"; then not_ok "$1 run: snippet $i ($where) leaves a process running" "$(cat "$tmp/snippets/$i.sh")" "$(cat "$tmp/out-$1.log")"
    elif grep -qx "start $i" "$tmp/markers"; then not_ok "$1 run: snippet $i ($where) fails" "$(cat "$tmp/snippets/$i.sh")" "$(cat "$tmp/out-$1.log")"
    else not_ok "$1 run: snippet $i ($where) not reached (an earlier one failed)"; fi
  done
}
run_readme first
run_readme second
