#!/usr/bin/env bash
# Slurm on this machine for trying the sbatch scripts here (and for
# tests/multiprocess/test_slurm.py), every file under DIR, nothing in /etc/slurm or the
# system's munge touched. Two shapes:
#
#   scripts/slurm/local-slurm.sh install        # Debian's slurmctld, slurmd, clients, munge (root)
#
#   # one node: munged, slurmctld and slurmd on this host
#   scripts/slurm/local-slurm.sh start DIR      # prints: export SLURM_CONF=DIR/slurm.conf
#   SLURM_CONF=DIR/slurm.conf sbatch -n 2 scripts/slurm/cpu_node.sbatch --max_steps=5
#
#   # HOSTS nodes: a slurmd in each host of the emulated cluster (scripts/cluster/cluster.sh,
#   # brought up here when it is down), slurmctld on the first host (make slurm-up)
#   scripts/slurm/local-slurm.sh start-cluster DIR [HOSTS]
#   SLURM_CONF=DIR/slurm.conf scripts/cluster/cluster.sh run \
#       sbatch -N 2 --ntasks-per-node=1 --cpus-per-task=1 scripts/slurm/cpu_nodes.sbatch --max_steps=10
#   # (with LAUNCHER=mpirun add BIND_TO=none: every host's "core 0" is this machine's core 0)
#
#   scripts/slurm/local-slurm.sh stop DIR       # every daemon it started (and the cluster, if it did)
#
# The configuration is the smallest that runs jobs as root on a machine
# without cgroups or systemd: SlurmUser=root, proctrack/pgid, task/none,
# select/cons_tres by core, nodes with the CPUs and memory `slurmd -C`
# reports, no accounting. Needs root.
#
# On the emulated cluster the daemons reach each other only inside
# 198.18.0.0/15: slurmctld listens in host 1's namespace, each slurmd in its
# host's, under that host's name (nsrsh). Clients (sbatch, squeue, scontrol)
# run there too, through `cluster.sh run`, which also hands Open MPI the
# cluster's interface. munged stays in this machine's namespace: its socket is
# a file under DIR, which every namespace sees (they share the filesystem).
set -euo pipefail

# libpmix-dev: Slurm's mpi/pmix plugin (srun --mpi=pmix) dlopens pmix2/lib/libpmix.so, the
# unversioned name only the -dev package ships (libpmix2 has libpmix.so.2).
PACKAGES="slurmctld slurmd slurm-client munge libpmix-dev"
HERE=$(cd "$(dirname "$0")" && pwd)
CLUSTER_SH=$HERE/../cluster/cluster.sh
NSRSH=$HERE/../cluster/nsrsh
CLUSTER=${CLUSTER:-imc}
export CLUSTER

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

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether PID is still one of the daemons here: a pid file outlives its daemon (a reboot, a kill -9).
is_daemon() { [[ $(cat "/proc/$1/comm" 2>/dev/null) =~ ^(slurmd|slurmctld|munged)$ ]]; }

prepare() {
  # DIR's layout and munged; prints DIR's absolute path.
  local dir=$1 p f
  [ "$(id -u)" = 0 ] || die "starting Slurm's daemons needs root."
  for p in munged mungekey slurmctld slurmd sbatch; do
    command -v "$p" >/dev/null || die "$p not found; run '$0 install' first."
  done
  for f in "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$f" ] && is_daemon "$(cat "$f")" && die "$dir already runs a Slurm ($f); '$0 stop $dir' first."
  done
  mkdir -p "$dir"/{state,spool,log,tmp}
  dir=$(cd "$dir" && pwd)
  chmod 755 "$dir"
  # munged runs as the munge user and insists that its key and socket
  # directories are its own, searchable by all (clients reach the socket) and
  # writable by no one else.
  mkdir -p "$dir/munge"
  chown munge:munge "$dir/munge"
  chmod 755 "$dir/munge"
  {
    [ -f "$dir/munge/munge.key" ] || runuser -u munge -- mungekey --create --keyfile="$dir/munge/munge.key"
    runuser -u munge -- munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
      --pid-file="$dir/munge/munged.pid" --log-file="$dir/munge/munged.log" \
      --seed-file="$dir/munge/munged.seed"
  } >&2
  echo "$dir"
}

write_conf() {
  # slurm.conf for controller NAME(ADDR), then the node and partition lines on stdin.
  local dir=$1 controller=$2
  {
    cat <<EOF
ClusterName=local
SlurmctldHost=$controller
# Job ids that a later start of this Slurm does not hand out again (they count
# up from the start's second): runs/slurm-<jobid> and slurm-<jobid>.out are
# then a new job's own, never an old run's to resume or append to.
FirstJobId=$(( $(date +%s) % 60000000 + 1 ))
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire is also how long a requeued job waits before it may start
# again (120 s by default); 10 s keeps a preemption test short.
AuthInfo=socket=$dir/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$dir/state
# %n: one spool, pid file, log and scratch directory per node, as several
# slurmds share this machine's filesystem (PMIx puts its sockets in both).
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
# pgid, not linuxproc: linuxproc signals every descendant of a step, so
# scancel's SIGTERM would reach srun in the batch script, which answers it by
# SIGKILLing its tasks (srun_job.c) before they checkpoint. With pgid, as
# with cgroup on a real cluster, only the step's own tasks are signalled
# (common.sh starts the launcher in a process group of its own).
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
# scancel sends SIGTERM, then SIGKILL after KillWait: 30 s for the ranks to
# finish their step and rank 0 to write a checkpoint (common.sh).
KillWait=30
# A job that becomes eligible (a requeued one, after cred_expire) waits for
# the scheduler's next pass, every 60 s by default.
SchedulerParameters=sched_interval=2
ReturnToService=2
MailProg=/bin/true
EOF
    cat
  } > "$dir/slurm.conf"
  # slurmd loads a cgroup plugin whatever the other plugins, and autodetecting
  # which fails where /sys/fs/cgroup is not mounted, as in `ip netns exec`'s
  # own /sys. Naming v1 skips the probe; its init touches nothing.
  echo "CgroupPlugin=cgroup/v1" > "$dir/cgroup.conf"
}

wait_idle() {
  # Until every node of the partition is idle (30 s at most).
  local dir=$1 nodes=$2 run=("${@:3}") i
  for i in $(seq 1 60); do
    [ "$("${run[@]}" sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" = "$nodes" ] && return 0
    sleep 0.5
  done
  tail -5 "$dir"/log/*.log >&2
  die "the $nodes node(s) did not become idle in 30 s"
}

start() {
  local dir node cpus_line
  dir=$(prepare "$1")
  node=$(hostname)
  # e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
  cpus_line=$(slurmd -C | head -1)
  mkdir -p "$dir/spool/$node" "$dir/tmp/$node"
  write_conf "$dir" "$node(127.0.0.1)" <<EOF
$cpus_line NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -i
  slurmd -N "$node"
  wait_idle "$dir" 1
  echo "export SLURM_CONF=$dir/slurm.conf"
}

start_cluster() {
  local dir hosts=${2:-2} shape names=() addrs=() name addr ns i
  [[ $hosts =~ ^[0-9]+$ ]] && (( hosts >= 1 )) || die "HOSTS=$hosts: give a number of hosts, e.g. 2."
  dir=$(prepare "$1")
  # Half-way failures stop what was started (and the cluster, if started here).
  STARTING=$dir
  trap 'echo "local-slurm: start-cluster failed; stopping" >&2; stop "$STARTING"' EXIT
  if bash "$CLUSTER_SH" status | grep -q "is down"; then
    bash "$CLUSTER_SH" up "$hosts" >/dev/null
    echo "$CLUSTER" > "$dir/cluster-started"  # stop brings it down again
  fi
  while read -r name addr ns; do names+=("$name"); addrs+=("$addr"); done < "/run/$CLUSTER-cluster/hosts"
  (( ${#names[@]} >= hosts )) \
    || die "cluster '$CLUSTER' has ${#names[@]} hosts, fewer than $hosts; run 'cluster.sh down' first."
  # Every host is this machine: the same CPUs and memory in each.
  shape=$(slurmd -C | head -1 | sed 's/^NodeName=[^ ]* //')
  for i in $(seq 0 $((hosts - 1))); do
    mkdir -p "$dir/spool/${names[i]}" "$dir/tmp/${names[i]}"
    echo "NodeName=${names[i]} NodeAddr=${addrs[i]} $shape State=UNKNOWN"
  done | {
    cat
    echo "PartitionName=$CLUSTER Nodes=$(IFS=,; echo "${names[*]:0:hosts}") Default=YES" \
         "MaxTime=INFINITE State=UP"
  } | write_conf "$dir" "${names[0]}(${addrs[0]})"
  export SLURM_CONF=$dir/slurm.conf
  # nsrsh: the host's network namespace, under the host's name (slurmd
  # and slurmctld check it against slurm.conf).
  bash "$NSRSH" "${names[0]}" slurmctld -i
  for i in $(seq 0 $((hosts - 1))); do
    bash "$NSRSH" "${names[i]}" slurmd -N "${names[i]}"
  done
  wait_idle "$dir" "$hosts" bash "$NSRSH" "${names[0]}"
  trap - EXIT
  echo "export SLURM_CONF=$dir/slurm.conf  # then: scripts/cluster/cluster.sh run sbatch ..."
}

stop() {
  local dir=$1 f pid
  for f in "$dir"/slurmd*.pid "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    is_daemon "$pid" || continue
    kill "$pid" 2>/dev/null || continue
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [ -f "$dir/cluster-started" ]; then
    CLUSTER=$(cat "$dir/cluster-started") bash "$CLUSTER_SH" down >/dev/null
    rm -f "$dir/cluster-started"
  fi
}

case "${1:-}" in
  install) install ;;
  start) [ $# = 2 ] || die "usage: $0 start DIR"; start "$2" ;;
  start-cluster)
    [ $# = 2 ] || [ $# = 3 ] || die "usage: $0 start-cluster DIR [HOSTS]"
    start_cluster "$2" "${3:-2}" ;;
  stop) [ $# = 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  *) die "usage: $0 install | start DIR | start-cluster DIR [HOSTS] | stop DIR" ;;
esac
