#!/usr/bin/env bash
# pg_server.sh -- a throwaway PostgreSQL server for tests: unix socket only, no TCP port.
#
#   tests/pg_server.sh start   -> prints two lines: the URL, then the directory to stop
#   tests/pg_server.sh stop DIR
#   tests/pg_server.sh ctl DIR ARGS...  -> pg_ctl ARGS on that server (e.g. restart -m fast, reload)
#
# The server runs as user `postgres` (initdb refuses root) with fsync off: it is thrown away,
# and the crash tests kill workers, not the server. Needs the Debian postgresql package.
set -euo pipefail

bindir() {
  local b
  b=$(pg_config --bindir 2>/dev/null || true)
  if [ -z "$b" ] || [ ! -x "$b/initdb" ]; then
    b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
  fi
  [ -n "$b" ] && [ -x "$b/initdb" ] || { echo "pg_server.sh: initdb not found (install postgresql)" >&2; exit 2; }
  echo "$b"
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() {
  local B D user
  B=$(bindir)
  D=$(mktemp -d "${TMPDIR:-/tmp}/dxpg.XXXXXX")
  user=$(id -un)
  if [ "$(id -u)" = 0 ]; then chown postgres: "$D"; user=postgres; fi
  if ! as_pg "$B/initdb" -D "$D/data" -U "$user" -A trust -E UTF8 --locale=C.UTF-8 --no-sync \
       >"$D/initdb.log" 2>&1; then
    cat "$D/initdb.log" >&2; rm -rf "$D"; exit 1
  fi
  if ! as_pg "$B/pg_ctl" -D "$D/data" -l "$D/server.log" -w -s \
       -o "-c listen_addresses= -k $D -c fsync=off -c synchronous_commit=off -c full_page_writes=off ${DX_PG_OPTS:-}" \
       start >&2; then
    cat "$D/server.log" >&2; rm -rf "$D"; exit 1
  fi
  as_pg "$B/createdb" -h "$D" -U "$user" dxtest
  echo "postgresql:///dxtest?host=$D&user=$user"
  echo "$D"
}

stop() {
  local B D=$1
  [ -d "$D/data" ] || { echo "pg_server.sh: $D is not a server directory" >&2; exit 2; }
  B=$(bindir)
  as_pg "$B/pg_ctl" -D "$D/data" -m fast -w -s stop >&2 || true
  rm -rf "$D"
}

ctl() {
  local B D=$1
  shift
  [ -d "$D/data" ] || { echo "pg_server.sh: $D is not a server directory" >&2; exit 2; }
  B=$(bindir)
  as_pg "$B/pg_ctl" -D "$D/data" -w -s "$@"
}

case "${1:-}" in
  start) start ;;
  stop) [ $# -eq 2 ] || { echo "usage: $0 stop DIR" >&2; exit 2; }; stop "$2" ;;
  ctl) [ $# -ge 3 ] || { echo "usage: $0 ctl DIR ARGS..." >&2; exit 2; }; shift; ctl "$@" ;;
  *) echo "usage: $0 start | stop DIR | ctl DIR ARGS..." >&2; exit 2 ;;
esac
