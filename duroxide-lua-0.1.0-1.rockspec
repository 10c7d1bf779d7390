-- duroxide-lua-0.1.0-1.rockspec: `luarocks make` (in this folder) builds with meson, as
-- `meson install` does, and installs the Lua module duroxide.so, duroxide.testing and the
-- duroxide-lua program into a LuaRocks tree. The C libraries (libuv, LMDB, jansson,
-- msgpack-c, libpq, libmicrohttpd for the program's web console and /metrics) and luv come
-- from the system: on Debian run scripts/install-deps first.
rockspec_format = "3.0"
package = "duroxide-lua"
version = "0.1.0-1"
-- No published home yet: build from a checkout with `luarocks make` (the source is this folder).
source = {
  url = ".",
}
description = {
  summary = "Durable execution engine: Lua 5.4 orchestrations replayed from an event history",
  detailed = [[
duroxide-lua runs orchestrations written as Lua coroutines that are replayed
deterministically from a durable event history (LMDB), with activities on a libuv loop,
timers, external events, sub-orchestrations and activity sessions.
require("duroxide") registers code; require("duroxide.testing") runs it under busted.
]],
}
dependencies = {
  "lua >= 5.4, < 5.5",
}
build = {
  type = "command",
  -- A build folder of its own, configured once; werror off so a newer compiler's new
  -- warning does not stop a user's install.
  build_command = [[
    ( test -f build-rock/build.ninja ||
      meson setup build-rock --buildtype=release -Dwerror=false >/dev/null ) &&
    ninja -C build-rock bindings/duroxide.so bindings/duroxide-lua
  ]],
  install = {
    lib = { duroxide = "build-rock/bindings/duroxide.so" },
    lua = { ["duroxide.testing"] = "lua/duroxide/testing.lua" },
    bin = { ["duroxide-lua"] = "build-rock/bindings/duroxide-lua" },
  },
}
