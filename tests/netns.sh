# tests/netns.sh -- sourced helpers that build "hosts" on one machine out of network namespaces,
# for tests/multihost_pg.sh and bench/netns. Needs root, iproute2 and the netem qdisc.
#
#   netns_can                 0 when this process can build namespaces; else prints why, 1
#   netns_up N DELAY_US       N namespaces, each with a veth pair into a fresh bridge in the
#                             root namespace, netem delay DELAY_US on both ends of every veth
#                             (so one round trip to the bridge costs about 4 x DELAY_US);
#                             sets NETNS_HOST (the bridge address), NETNS_NAMES (array) and
#                             NETNS_DELAY_US: the delay applied, 0 when the kernel has no netem
#                             (sch_netem); NETNS_NOTE then says so
#   netns_down                removes every namespace, link and bridge netns_up made (also
#                             after a partial netns_up); safe to call twice
#   netns_exec I CMD...       runs CMD in namespace I (0-based), replacing the shell's fork:
#                             the pid of `netns_exec ... &` is the pid of CMD
#
# Every name carries this shell's pid and every address is in a /24 of 10.77.0.0/16 that no
# interface on the machine uses yet, so parallel runs and the host's own networks are left alone.

NETNS_TAG="dx$$"
NETNS_NAMES=()
NETNS_LINKS=()
NETNS_BR=""
NETNS_HOST=""
NETNS_DELAY_US=0
NETNS_NOTE=""

netns_can() {
  if [ "$(id -u)" != 0 ]; then echo "needs root (network namespaces)"; return 1; fi
  command -v ip >/dev/null || { echo "ip (iproute2) not found"; return 1; }
  command -v tc >/dev/null || { echo "tc (iproute2) not found"; return 1; }
  local probe="${NETNS_TAG}probe"
  if ! ip netns add "$probe" 2>/dev/null; then echo "ip netns add failed (no CAP_SYS_ADMIN?)"; return 1; fi
  ip netns del "$probe" 2>/dev/null
  return 0
}

# 0 when the kernel has the netem qdisc (probed on lo of a scratch namespace).
netns_has_netem() {
  local probe="${NETNS_TAG}probe" rc=1
  ip netns add "$probe" 2>/dev/null || return 1
  ip netns exec "$probe" tc qdisc add dev lo root netem delay 1us 2>/dev/null && rc=0
  ip netns del "$probe" 2>/dev/null
  return $rc
}

# A /24 of 10.77.0.0/16 that no interface has an address in (bounded search).
netns_pick_subnet() {
  local used i x
  used=$(ip -4 -o addr show 2>/dev/null | awk '{ print $4 }')
  for ((i = 0; i < 200; i++)); do
    x=$(( ($$ + i) % 200 + 20 ))
    grep -q "^10\.77\.$x\." <<<"$used" || { echo "10.77.$x"; return 0; }
  done
  return 1
}

netns_up() {
  local n=$1 delay=$2 net i ns v
  net=$(netns_pick_subnet) || { echo "netns_up: no free /24 in 10.77.0.0/16" >&2; return 1; }
  NETNS_DELAY_US=$delay
  if [ "$delay" -gt 0 ] && ! netns_has_netem; then
    NETNS_DELAY_US=0
    NETNS_NOTE="the kernel has no netem qdisc (sch_netem): no delay added"
  fi
  NETNS_BR="${NETNS_TAG}br"
  ip link add "$NETNS_BR" type bridge || return 1
  ip addr add "$net.1/24" dev "$NETNS_BR" || return 1
  ip link set "$NETNS_BR" up || return 1
  NETNS_HOST="$net.1"
  for ((i = 0; i < n; i++)); do
    ns="${NETNS_TAG}h$i"; v="${NETNS_TAG}v$i"
    ip netns add "$ns" || return 1
    NETNS_NAMES+=("$ns")
    ip link add "$v" type veth peer name "${v}p" netns "$ns" || return 1
    NETNS_LINKS+=("$v")
    ip link set "$v" master "$NETNS_BR" up || return 1
    ip netns exec "$ns" ip link set lo up || return 1
    ip netns exec "$ns" ip addr add "$net.$((i + 2))/24" dev "${v}p" || return 1
    ip netns exec "$ns" ip link set "${v}p" up || return 1
    if [ "$NETNS_DELAY_US" -gt 0 ]; then
      tc qdisc add dev "$v" root netem delay "${delay}us" || return 1
      ip netns exec "$ns" tc qdisc add dev "${v}p" root netem delay "${delay}us" || return 1
    fi
  done
  # The first packets wait for the bridge to learn the ports: ping each namespace (bounded).
  for ((i = 0; i < n; i++)); do
    ip netns exec "${NETNS_NAMES[$i]}" ping -c 1 -W 2 "$NETNS_HOST" >/dev/null 2>&1 || true
  done
  return 0
}

netns_down() {
  local x
  for x in "${NETNS_LINKS[@]}"; do ip link del "$x" 2>/dev/null; done
  for x in "${NETNS_NAMES[@]}"; do ip netns del "$x" 2>/dev/null; done
  [ -n "$NETNS_BR" ] && ip link del "$NETNS_BR" 2>/dev/null
  NETNS_LINKS=(); NETNS_NAMES=(); NETNS_BR=""
  return 0
}

netns_exec() {
  local i=$1
  shift
  exec ip netns exec "${NETNS_NAMES[$i]}" "$@"
}
