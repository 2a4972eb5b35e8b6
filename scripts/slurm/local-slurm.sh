#!/usr/bin/env bash
# A one-machine Slurm for trying the sbatch scripts here (and for
# tests/multiprocess/test_slurm.py): munged, slurmctld and slurmd on this host, every file
# under DIR, nothing in /etc/slurm or the system's munge touched.
#
#   scripts/slurm/local-slurm.sh install        # Debian: slurmctld slurmd slurm-client munge (root)
#   scripts/slurm/local-slurm.sh start DIR      # prints: export SLURM_CONF=DIR/slurm.conf
#   SLURM_CONF=DIR/slurm.conf sbatch --wait -n 2 scripts/slurm/train_cpu.sbatch --max_steps=5
#   scripts/slurm/local-slurm.sh stop DIR       # stops the three daemons it started
#
# The configuration is the smallest that runs jobs as root on a machine
# without cgroups or systemd: SlurmUser=root, proctrack/linuxproc, task/none,
# select/cons_tres by core, one node named after `hostname` with the CPUs and
# memory `slurmd -C` reports, no accounting. Needs root.
set -euo pipefail

PACKAGES="slurmctld slurmd slurm-client munge"

die() { echo "local-slurm: $*" >&2; exit 2; }

install() {
  [ "$(id -u)" = 0 ] || die "installing needs root."
  local missing="" p
  for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
  done
  [ -z "$missing" ] && return 0
  echo "local-slurm: apt-get install$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # policy-rc.d or no systemd: the packages' own services may not start; ours are started below.
  apt-get install -y -qq --no-install-recommends $missing >/tmp/local-slurm-apt.log 2>&1 \
    || { tail -20 /tmp/local-slurm-apt.log >&2; die "apt-get install$missing failed"; }
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start() {
  local dir=$1 node cpus_line i
  [ "$(id -u)" = 0 ] || die "starting Slurm's daemons needs root."
  for p in munged mungekey slurmctld slurmd sbatch; do
    command -v "$p" >/dev/null || die "$p not found; run '$0 install' first."
  done
  mkdir -p "$dir"/{state,spool,log}
  dir=$(cd "$dir" && pwd)
  chmod 755 "$dir"
  # munged runs as the munge user and insists that its key and socket
  # directories are its own, searchable by all (clients reach the socket) and
  # writable by no one else.
  mkdir -p "$dir/munge"
  chown munge:munge "$dir/munge"
  chmod 755 "$dir/munge"
  [ -f "$dir/munge/munge.key" ] || runuser -u munge -- mungekey --create --keyfile="$dir/munge/munge.key"
  runuser -u munge -- munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/munged.seed"

  node=$(hostname)
  # e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
  cpus_line=$(slurmd -C | head -1)
  cat > "$dir/slurm.conf" <<EOF
ClusterName=local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
$cpus_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -i
  slurmd -N "$node"
  for i in $(seq 1 60); do
    sinfo -h -o '%T' 2>/dev/null | grep -qx idle && break
    sleep 0.5
  done
  sinfo -h -o '%T' | grep -qx idle || { tail -5 "$dir"/log/*.log >&2; die "the node did not become idle in 30 s"; }
  echo "export SLURM_CONF=$dir/slurm.conf"
}

stop() {
  local dir=$1 f pid
  for f in slurmd.pid slurmctld.pid munge/munged.pid; do
    [ -f "$dir/$f" ] || continue
    pid=$(cat "$dir/$f")
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
}

case "${1:-}" in
  install) install ;;
  start) [ $# = 2 ] || die "usage: $0 start DIR"; start "$2" ;;
  stop) [ $# = 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 install | start DIR | stop DIR" ;;
esac
