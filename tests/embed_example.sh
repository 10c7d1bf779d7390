#!/usr/bin/env bash
# embed_example.sh -- examples/embed.c builds with nothing but
# `cc examples/embed.c $(pkg-config --cflags --libs duroxide)` against the build tree (the
# uninstalled duroxide.pc meson writes), and runs to completion. TAP output.
# Env: DX_SOURCE_DIR, DX_BUILD_DIR (set by tests/meson.build).
set -u
src="${DX_SOURCE_DIR:?}"
build="${DX_BUILD_DIR:?}"
export PKG_CONFIG_PATH="$build/meson-uninstalled${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }
echo "1..5"

if flags="$(pkg-config --cflags --libs duroxide 2>"$tmp/pc.err")"; then
  ok "pkg-config --cflags --libs duroxide resolves in the build tree"
else
  not_ok "pkg-config --cflags --libs duroxide resolves in the build tree" "$(cat "$tmp/pc.err")"
fi

cd "$src"
# shellcheck disable=SC2086 # the flags are meant to split
if cc examples/embed.c $flags -o "$tmp/embed" 2>"$tmp/cc.err"; then
  ok "cc examples/embed.c \$(pkg-config --cflags --libs duroxide)"
else
  not_ok "cc examples/embed.c \$(pkg-config --cflags --libs duroxide)" "$(cat "$tmp/cc.err")"
fi

out="$(timeout 60 "$tmp/embed" examples/embed_app.lua "$tmp/store" 2>"$tmp/run.err")"
rc=$?
if [ "$rc" -eq 0 ]; then ok "embed exits 0"; else not_ok "embed exits 0 (got $rc)" "$out" "$(cat "$tmp/run.err")"; fi

expected='"output":{"summary":"4 words, checksum total 1081870","sums":[970894,107512,3365,99]},"status":"Completed"'
case "$out" in
  *"$expected"*) ok "embed prints the completed instance with the C activity's results" ;;
  *) not_ok "embed prints the completed instance with the C activity's results" "got: $out" ;;
esac

# A second run on the same store: a new instance next to the first, clean start and stop.
out2="$(timeout 60 "$tmp/embed" examples/embed_app.lua "$tmp/store" 2>"$tmp/run2.err")"
rc=$?
case "$rc:$out2" in
  0:*'"status":"Completed"'*) ok "embed runs again on the same store" ;;
  *) not_ok "embed runs again on the same store (rc $rc)" "$out2" "$(cat "$tmp/run2.err")" ;;
esac
