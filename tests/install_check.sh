#!/usr/bin/env bash
# install_check.sh -- duroxide-lua installed the ways a user installs it, then used from a
# folder outside the repository with nothing but the installed files (TAP output):
#   meson install --destdir  -> program, module, busted harness, man page, headers, .pc;
#                               examples/project's specs and worker; examples/embed.c
#   luarocks make            -> a temporary LuaRocks tree; require and the program from it
#   scripts/deb              -> the .deb files' contents and Depends; the unpacked package
#                               runs; with CI=true (as root) apt-get installs it, runs it and
#                               purges it again.
# Env (set by tests/meson.build): DX_SOURCE_DIR, DX_BUILD_DIR, DX_PREFIX, DX_LIBDIR,
# DX_VERSION, DX_SANITIZE.
set -u
src="${DX_SOURCE_DIR:?}"
build="${DX_BUILD_DIR:?}"
prefix="${DX_PREFIX:?}"
libdir="${DX_LIBDIR:?}"
version="${DX_VERSION:?}"
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); echo "not ok $n - $1"; shift; for l in "$@"; do printf '%s\n' "$l" | sed 's/^/# /' | tail -40; done; }
skip() { n=$((n + 1)); echo "ok $n - $1 # SKIP $2"; }
# check DESCRIPTION LOGFILE CMD...: ok when CMD exits 0, else not ok with the log.
check() {
  local what="$1" log="$2"; shift 2
  if "$@" >"$log" 2>&1; then ok "$what"; else not_ok "$what (exit $?)" "$(cat "$log")"; fi
}

if [ "${DX_SANITIZE:-none}" != none ]; then
  # the installed module would need the sanitizer runtime preloaded into lua5.4
  echo "1..0 # SKIP sanitized build (${DX_SANITIZE}): the install checks run in the plain build"
  exit 0
fi

tmp="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
echo "1..15"

# ---- meson install --destdir ------------------------------------------------------------
dest="$tmp/root"
root="$dest$prefix"
if [ "$prefix" = /usr ]; then cmod="$root/$libdir/lua/5.4"; else cmod="$root/lib/lua/5.4"; fi
lmod="$root/share/lua/5.4"
check "meson install --destdir" "$tmp/install.log" meson install -C "$build" --no-rebuild --destdir "$dest"
missing=()
for f in "$root/bin/duroxide-lua" "$cmod/duroxide.so" "$lmod/duroxide/testing.lua" \
         "$root/share/man/man1/duroxide-lua.1" "$root/include/duroxide.h" \
         "$root/include/duroxide/errors.h" "$root/$libdir/libduroxide.a" \
         "$root/$libdir/pkgconfig/duroxide.pc"; do
  [ -f "$f" ] || missing+=("${f#"$dest"}")
done
if [ ${#missing[@]} -eq 0 ]; then ok "installed: program, Lua module, duroxide.testing, man page, headers, library, .pc"
else not_ok "installed: program, Lua module, duroxide.testing, man page, headers, library, .pc" "missing: ${missing[*]}"; fi

# Only the installed files: a clean environment, a folder outside the repository.
run_installed() {
  env -i PATH="$root/bin:/usr/bin:/bin" HOME="$tmp" \
    LUA_PATH="$lmod/?.lua;;" LUA_CPATH="$cmod/?.so;;" "$@"
}
out="$(cd "$tmp" && run_installed duroxide-lua --version 2>&1)"
if [ "$out" = "duroxide-lua $version" ]; then ok "installed duroxide-lua --version"
else not_ok "installed duroxide-lua --version" "got: $out"; fi

# duroxide.testing on its own (it requires duroxide itself), both from the installed folders.
probe='local t = require("duroxide.testing")
assert(type(t.env) == "function", "duroxide.testing.env missing")
print(package.searchpath("duroxide", package.cpath), package.searchpath("duroxide.testing", package.path))'
out="$(cd "$tmp" && run_installed lua5.4 -e "$probe" 2>&1)"
if [ "$out" = "$cmod/duroxide.so	$lmod/duroxide/testing.lua" ]; then
  ok "lua5.4 require(\"duroxide.testing\") alone loads the installed module and harness"
else not_ok "lua5.4 require(\"duroxide.testing\") alone loads the installed module and harness" "got: $out"; fi

# examples/project: the user's own project, its specs under busted with its own .busted.
proj="$tmp/project"
cp -r "$src/examples/project" "$proj"
(cd "$proj" && run_installed lua5.4 /usr/bin/busted -o TAP) >"$tmp/busted.log" 2>&1
rc=$?
passed=$(grep -c '^ok ' "$tmp/busted.log")
if [ "$rc" -eq 0 ] && [ "$passed" -ge 3 ] && ! grep -q '^not ok' "$tmp/busted.log"; then
  ok "examples/project: busted runs its specs against the installed files ($passed passed)"
else not_ok "examples/project: busted runs its specs against the installed files (exit $rc)" "$(cat "$tmp/busted.log")"; fi

# The same app as a worker of the installed program, and a client starting an order.
(cd "$proj" && exec env -i PATH="$root/bin:/usr/bin:/bin" HOME="$tmp" \
  duroxide-lua app.lua --store "$tmp/store" --log-level warn) >"$tmp/worker.log" 2>&1 &
pids+=($!)
out="$(cd "$proj" && run_installed timeout 60 duroxide-lua start PlaceOrder '{"item":"book","qty":2}' \
  --id order-1 --wait 30s --store "$tmp/store" 2>&1)"
case "$out" in
  *'"output":{"charged":10,"ok":true,"reservation":"r-book"}'*'"status":"Completed"'*)
    ok "examples/project: the installed worker completes PlaceOrder" ;;
  *) not_ok "examples/project: the installed worker completes PlaceOrder" "$out" "$(cat "$tmp/worker.log")" ;;
esac
kill -TERM "${pids[0]}" 2>/dev/null
if wait "${pids[0]}"; then ok "examples/project: the worker stops cleanly on SIGTERM"
else not_ok "examples/project: the worker stops cleanly on SIGTERM" "$(cat "$tmp/worker.log")"; fi
pids=()

# examples/embed.c against the installed duroxide.pc (its prefix moved to the destdir).
pc() { PKG_CONFIG_PATH="$root/$libdir/pkgconfig" pkg-config --define-variable=prefix="$root" "$@"; }
if flags="$(pc --cflags --libs duroxide 2>&1)" &&
   cc "$src/examples/embed.c" $flags -o "$tmp/embed" >"$tmp/cc.log" 2>&1; then
  cp "$src/examples/embed_app.lua" "$tmp/embed_app.lua"
  out="$(cd "$tmp" && timeout 60 ./embed embed_app.lua "$tmp/embed-store" 2>&1)"
  case "$out" in
    *'"output":{"summary":"4 words, checksum total 1081870"'*'"status":"Completed"'*)
      ok "examples/embed.c builds with the installed duroxide.pc and runs" ;;
    *) not_ok "examples/embed.c builds with the installed duroxide.pc and runs" "$out" ;;
  esac
else
  not_ok "examples/embed.c builds with the installed duroxide.pc and runs" "$flags" "$(cat "$tmp/cc.log" 2>/dev/null)"
fi

# ---- luarocks make ----------------------------------------------------------------------
# A copy of the source (tracked and new files), so the rock's build folder stays out of it.
copy_source() {
  mkdir -p "$1"
  (cd "$src" && if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
     git ls-files -z --cached --others --exclude-standard | tar --null -cf - -T -
   else tar --exclude='./build*' -cf - .; fi) | tar -xf - -C "$1"
}
rocksrc="$tmp/rock-src"
tree="$tmp/rocks"
copy_source "$rocksrc"
spec="$(cd "$rocksrc" && ls duroxide-lua-"$version"-*.rockspec 2>/dev/null | head -n 1)"
check "luarocks make ${spec:-duroxide-lua-$version-*.rockspec} into a temporary tree" "$tmp/rock.log" \
  env -C "$rocksrc" luarocks --lua-version 5.4 --tree "$tree" make "${spec:-missing.rockspec}"
out="$(cd "$tmp" && env -i PATH="/usr/bin:/bin" HOME="$tmp" bash -c \
  'eval "$(luarocks --lua-version 5.4 --tree "$1" path)" && lua5.4 -e "
     local t = require(\"duroxide.testing\")
     print(require(\"duroxide\").version, package.searchpath(\"duroxide\", package.cpath))" &&
   "$1/bin/duroxide-lua" --version' _ "$tree" 2>&1)"
if [ "$out" = "$version	$tree/lib/lua/5.4/duroxide.so
duroxide-lua $version" ]; then ok "the LuaRocks tree: require(\"duroxide\"), duroxide.testing and duroxide-lua"
else not_ok "the LuaRocks tree: require(\"duroxide\"), duroxide.testing and duroxide-lua" "got: $out"; fi

# ---- the Debian packages ----------------------------------------------------------------
debsrc="$tmp/deb-src"
copy_source "$debsrc"
check "scripts/deb builds the packages" "$tmp/deb.log" "$debsrc/scripts/deb" "$tmp/debs"
deb="$(ls "$tmp"/debs/duroxide-lua_"$version"_*.deb 2>/dev/null | head -n 1)"
dev="$(ls "$tmp"/debs/libduroxide-dev_"$version"_*.deb 2>/dev/null | head -n 1)"
contents="$( { dpkg-deb -c "$deb"; dpkg-deb -c "$dev"; } 2>&1 | awk '{print $NF}')"
missing=()
for f in ./usr/bin/duroxide-lua "./usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/lua/5.4/duroxide.so" \
         ./usr/share/lua/5.4/duroxide/testing.lua ./usr/share/man/man1/duroxide-lua.1.gz \
         ./usr/include/duroxide.h ./usr/include/duroxide/provider.h \
         "./usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)/pkgconfig/duroxide.pc"; do
  grep -qxF "$f" <<<"$contents" || missing+=("$f")
done
if [ -n "$deb" ] && [ -n "$dev" ] && [ ${#missing[@]} -eq 0 ]; then
  ok "dpkg-deb -c: program, Lua module for lua5.4, harness, man page, headers, .pc"
else not_ok "dpkg-deb -c: program, Lua module for lua5.4, harness, man page, headers, .pc" \
  "missing: ${missing[*]}" "$contents"; fi
deps="$(dpkg-deb -f "$deb" Depends 2>&1) | $(dpkg-deb -f "$dev" Depends 2>&1)"
missing=()
for d in lua5.4 lua-luv libuv1 liblmdb0 libjansson4 libmsgpackc2 "duroxide-lua (= $version)" \
         libuv1-dev liblmdb-dev liblua5.4-dev; do
  grep -qF "$d" <<<"$deps" || missing+=("$d")
done
if [ ${#missing[@]} -eq 0 ]; then ok "Depends name the runtime libraries, lua5.4, lua-luv and the -dev packages"
else not_ok "Depends name the runtime libraries, lua5.4, lua-luv and the -dev packages" "missing: ${missing[*]}" "$deps"; fi

# The unpacked package works as laid out (no root needed): program and module.
unpacked="$tmp/unpacked"
dpkg-deb -x "$deb" "$unpacked" 2>/dev/null
ma="$(dpkg-architecture -qDEB_HOST_MULTIARCH)"
out="$(cd "$tmp" && env -i PATH=/usr/bin:/bin LUA_CPATH="$unpacked/usr/lib/$ma/lua/5.4/?.so;;" \
  LUA_PATH="$unpacked/usr/share/lua/5.4/?.lua;;" lua5.4 -e \
  'print(require("duroxide.testing") and require("duroxide").version)' 2>&1;
  "$unpacked/usr/bin/duroxide-lua" --version 2>&1)"
if [ "$out" = "$version
duroxide-lua $version" ]; then ok "the unpacked .deb: lua5.4 requires duroxide, duroxide-lua --version"
else not_ok "the unpacked .deb: lua5.4 requires duroxide, duroxide-lua --version" "got: $out"; fi

# In CI (a throw-away root run): install with apt (Depends resolved), run, purge again so
# the system module never shadows a developer's build later on this machine.
if [ "${CI:-}" = true ] && [ "$(id -u)" = 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  if apt-get install -y -qq "$deb" "$dev" >"$tmp/apt.log" 2>&1; then
    out="$(cd "$tmp" && env -i PATH=/usr/bin:/bin duroxide-lua --version 2>&1;
      env -i PATH=/usr/bin:/bin lua5.4 -e 'print(require("duroxide").version)' 2>&1)"
    apt-get purge -y -qq duroxide-lua libduroxide-dev >>"$tmp/apt.log" 2>&1
    if [ "$out" = "duroxide-lua $version
$version" ]; then ok "CI: apt-get install the .deb, duroxide-lua --version, require(\"duroxide\")"
    else not_ok "CI: apt-get install the .deb, duroxide-lua --version, require(\"duroxide\")" "got: $out"; fi
  else
    not_ok "CI: apt-get install the .deb" "$(cat "$tmp/apt.log")"
  fi
else
  skip "apt-get install the .deb and run duroxide-lua --version" "only in CI (CI=true, root)"
fi
