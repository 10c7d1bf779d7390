#!/usr/bin/env bash
# tests/cli_docs.sh -- docs/cli.md and docs/lua-api.md read literally against the real
# duroxide-lua (TAP output): the command summary and the option table match --help, `history`
# exits as documented (unknown and queued-but-never-run instances), and duroxide.client()
# inside a worker opens the worker's --store. Env: DUROXIDE_LUA, DX_SOURCE_DIR.
set -u
bin="${DUROXIDE_LUA:?}"
src="${DX_SOURCE_DIR:?}"
tmp="$(mktemp -d)"
worker=""
trap '[ -n "$worker" ] && kill "$worker" 2>/dev/null; rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do printf '%s\n' "$l" | sed 's/^/# /'; done; }
echo "1..6"
cli="$src/docs/cli.md"
help="$("$bin" --help 2>&1)"

# The summary block (the first ``` block of cli.md) names every command --help names.
summary="$(awk '/^```/{b++; next} b==1' "$cli")"
missing=()
for cmd in $(sed -n 's/^  duroxide-lua \([a-z]\+\) .*/\1/p; s/^  duroxide-lua \([a-z]\+\)$/\1/p' <<<"$help"); do
  grep -q "^duroxide-lua $cmd\b" <<<"$summary" || missing+=("$cmd")
done
if [ ${#missing[@]} -eq 0 ]; then ok "docs/cli.md's summary lists every command of --help"
else not_ok "docs/cli.md's summary lists every command of --help" "missing: ${missing[*]}"; fi

# Every option of --help is in the option table, and cli.md hides none from --help.
missing=()
for opt in $(grep -o -- '--[a-z][a-z-]*' <<<"$(sed -n '/^worker options/,$p' <<<"$help")" | sort -u); do
  grep -q "^| \`$opt\b" "$cli" || missing+=("$opt")
done
if tr '\n' ' ' <"$cli" | grep -q 'does not appear in *`--help`'; then missing+=("(cli.md says an option is not in --help)"); fi
if [ ${#missing[@]} -eq 0 ]; then ok "docs/cli.md's option table has every worker option of --help"
else not_ok "docs/cli.md's option table has every worker option of --help" "missing: ${missing[*]}"; fi

# history: an unknown id, and a start no worker has run yet, both exit 1 naming the instance.
store="$tmp/store"
"$bin" start Nothing '1' --id queued-1 --store "$store" >/dev/null 2>&1
out="$("$bin" history queued-1 --store "$store" 2>"$tmp/err")"; rc=$?
if [ "$rc" -eq 1 ] && [ -z "$out" ] && grep -qF "instance 'queued-1' has no history yet" "$tmp/err"; then
  ok "history of a queued, never-run instance exits 1 and says why"
else not_ok "history of a queued, never-run instance exits 1 and says why" "rc=$rc out=$out" "$(cat "$tmp/err")"; fi
out="$("$bin" history nope --store "$store" 2>"$tmp/err")"; rc=$?
if [ "$rc" -eq 1 ] && [ -z "$out" ] && grep -qF "unknown instance 'nope'" "$tmp/err"; then
  ok "history of an unknown instance exits 1 (unknown instance 'nope')"
else not_ok "history of an unknown instance exits 1 (unknown instance 'nope')" "rc=$rc out=$out" "$(cat "$tmp/err")"; fi

# duroxide.client() in a worker's app opens the worker's --store (lua-api.md, the client).
cat >"$tmp/app.lua" <<'LUA'
local duroxide = require("duroxide")
duroxide.orchestration("Noop", function(ctx) return "noop" end)
assert(duroxide.client():start("from-app", "Noop"))
LUA
(cd "$tmp" && exec "$bin" app.lua --store "$tmp/worker-store" --log-level warn) >"$tmp/worker.log" 2>&1 &
worker=$!
out="$(timeout 60 "$bin" wait from-app --timeout 30s --store "$tmp/worker-store" 2>&1)"
case "$out" in
  *'"output":"noop"'*) ok "duroxide.client() inside a worker uses the worker's --store" ;;
  *) not_ok "duroxide.client() inside a worker uses the worker's --store" "$out" "$(cat "$tmp/worker.log")" ;;
esac
[ -e "$tmp/duroxide-data" ] && not_ok "no ./duroxide-data next to the worker" || ok "no ./duroxide-data next to the worker"
kill "$worker" 2>/dev/null; wait "$worker" 2>/dev/null; worker=""
