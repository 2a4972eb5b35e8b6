#!/usr/bin/env bash
# An emulated multi-host cluster on one machine: H hosts as Linux network
# namespaces, each with its own address, hostname and /etc/hosts, joined to a
# switch (a bridge in a namespace of its own) by a veth link that tc
# rate-limits in both directions. Ranks on one emulated host talk over shared
# memory; ranks on different hosts cross the shaped links.
#
#   scripts/cluster/cluster.sh up [HOSTS] [RATE]   # e.g. up 2 200mbit (make cluster-up HOSTS=2)
#   scripts/cluster/cluster.sh run CMD...          # CMD on host 1, the others reachable (make cluster-run CMD=...)
#   scripts/cluster/cluster.sh status
#   scripts/cluster/cluster.sh down                # every namespace, link and process gone (make cluster-down)
#
# Inside `run`, `ssh HOST CMD` is scripts/cluster/nsrsh, which runs CMD in
# HOST's namespaces, so horovodrun and mpirun reach the other hosts as they
# would over ssh:
#   scripts/cluster/cluster.sh run horovodrun -np 4 -H imc-h1:2,imc-h2:2 \
#       --network-interface imc0 python train.py --max_steps=5
#
# Safety: addresses come from 198.18.0.0/15 (RFC 2544, benchmarking), exist
# only inside these namespaces, and no namespace has a route out; nothing is
# added to or changed in the machine's own namespace, interfaces, routes or
# firewall. Needs root, iproute2 (ip, tc) and util-linux (unshare, nsenter).
#
# CLUSTER=name (default imc) and CLUSTER_SUBNET=198.18.N (default 198.18.0)
# let two clusters coexist (the tests use their own). The kernel here has tbf
# and htb but not netem: links get a rate, not a delay.
set -euo pipefail

CLUSTER=${CLUSTER:-imc}
SUBNET=${CLUSTER_SUBNET:-198.18.0}
STATE=/run/$CLUSTER-cluster
HERE=$(cd "$(dirname "$0")" && pwd)
IFACE=${CLUSTER}0

die() { echo "cluster: $*" >&2; exit 2; }

check_subnet() {
  # Only 198.18.0.0/15 (198.18.x.y and 198.19.x.y): addresses no real network uses.
  [[ $SUBNET =~ ^198\.(18|19)\.([0-9]{1,3})$ ]] && (( BASH_REMATCH[2] < 256 )) \
    || die "CLUSTER_SUBNET=$SUBNET is outside 198.18.0.0/15; use e.g. 198.18.0."
}

namespaces() { ip netns list | awk '{print $1}' | grep -E "^$CLUSTER-(sw|h[0-9]+)$" || true; }

down() {
  # Processes first (every one whose network namespace is ours), then the
  # namespaces, whose deletion destroys the veths and the bridge inside them.
  local ns pids
  for sig in TERM KILL; do
    for ns in $(namespaces); do
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      [ -n "$pids" ] && kill -s "$sig" $pids 2>/dev/null || true
    done
    [ "$sig" = TERM ] && sleep 0.5
  done
  for ns in $(namespaces); do
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "/etc/netns/$CLUSTER"-h* "$STATE"
}

up() {
  local hosts=${1:-2} rate=${2:-200mbit} i ns
  [[ $hosts =~ ^[0-9]+$ ]] && (( hosts >= 1 && hosts <= 16 )) || die "HOSTS=$hosts: give 1 to 16 hosts."
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces and tc)."
  check_subnet
  [ -z "$(namespaces)" ] && [ ! -e "$STATE" ] || die "cluster '$CLUSTER' is already up; run 'down' first."
  # Any failure or interruption half-way leaves nothing behind.
  trap 'echo "cluster: up failed; tearing down" >&2; down' EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$STATE/bin"
  ln -s "$HERE/nsrsh" "$STATE/bin/ssh"

  ip netns add "$CLUSTER-sw"
  ip netns exec "$CLUSTER-sw" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  ip -n "$CLUSTER-sw" link add br0 type bridge
  ip -n "$CLUSTER-sw" link set br0 up
  : > "$STATE/hosts"
  {
    echo "127.0.0.1 localhost"
    for i in $(seq 1 "$hosts"); do echo "$SUBNET.$i $CLUSTER-h$i"; done
  } > "$STATE/etc-hosts"
  for i in $(seq 1 "$hosts"); do
    ns=$CLUSTER-h$i
    ip netns add "$ns"
    # IPv4 only: no link-local IPv6 chatter on the links.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    # One link per host: 'p$i' on the switch, '$IFACE' in the host.
    ip -n "$CLUSTER-sw" link add "p$i" type veth peer name "$IFACE" netns "$ns"
    ip -n "$CLUSTER-sw" link set "p$i" master br0 up
    ip -n "$ns" link set lo up
    ip -n "$ns" addr add "$SUBNET.$i/24" dev "$IFACE"
    ip -n "$ns" link set "$IFACE" up
    # The link's rate in both directions: host -> switch on the host's side,
    # switch -> host on the switch's side (what several senders share).
    shape "$ns" "$IFACE" "$rate"
    shape "$CLUSTER-sw" "p$i" "$rate"
    # ip netns exec bind-mounts /etc/netns/NS/hosts over /etc/hosts: names resolve inside only.
    mkdir -p "/etc/netns/$ns"
    cp "$STATE/etc-hosts" "/etc/netns/$ns/hosts"
    echo "$CLUSTER-h$i $SUBNET.$i $ns" >> "$STATE/hosts"
  done
  echo "$rate" > "$STATE/rate"
  trap - EXIT INT TERM
  echo "cluster '$CLUSTER' up: $hosts hosts on $SUBNET.0/24, links $rate each way"
  status
}

shape() {
  # tbf: a token bucket at RATE; the burst holds one 64 KiB GSO segment so
  # veth's large segments pass, and the queue holds 50 ms at the rate.
  local ns=$1 dev=$2 rate=$3
  [ "$rate" = none ] && return 0
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 64kb latency 50ms
}

status() {
  [ -f "$STATE/hosts" ] || { echo "cluster '$CLUSTER' is down"; return 0; }
  echo "host        address       namespace  (links $(cat "$STATE/rate"))"
  while read -r name addr ns; do printf '%-11s %-13s %s\n' "$name" "$addr" "$ns"; done < "$STATE/hosts"
}

run() {
  # CMD on host 1 (the head node), with the cluster's ssh first on PATH and
  # Open MPI told which subnet carries its traffic. Every other host is
  # reached through that ssh.
  [ -f "$STATE/hosts" ] || die "cluster '$CLUSTER' is down; run 'up' first (make cluster-up HOSTS=2)."
  [ $# -gt 0 ] || die "give a command to run, e.g. run hostname."
  export CLUSTER CLUSTER_SUBNET=$SUBNET PATH="$STATE/bin:$PATH"
  export OMPI_MCA_btl_tcp_if_include=$SUBNET.0/24 OMPI_MCA_oob_tcp_if_include=$SUBNET.0/24
  export HOROVOD_GLOO_IFACE=$IFACE
  exec "$HERE/nsrsh" "$CLUSTER-h1" "$(printf '%q ' "$@")"
}

cmd=${1:-}
shift || true
case "$cmd" in
  up) up "$@" ;;
  down) down; echo "cluster '$CLUSTER' down" ;;
  status) status ;;
  run) run "$@" ;;
  *) die "usage: $0 up [HOSTS] [RATE] | run CMD... | status | down" ;;
esac
