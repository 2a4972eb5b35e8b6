"""Emulated hosts for elastic launches (scripts/cluster/cluster.sh's network namespaces), a host lost
and back, and what an elastic run's log says of its worlds: make faults' elastic rows, make adaptive's
and make slow-links' lost-host runs, and tests/multiprocess/test_elastic.py.
"""
import os
import re
import signal
import subprocess

import psutil

from bench.harness import REPO, stop_on_sigterm
from bench.harness.launches import Job
from bench.harness.slurm_jobs import env

CLUSTER_SH = os.path.join(REPO, "scripts", "cluster", "cluster.sh")
DISCOVER = os.path.join(REPO, "scripts", "elastic", "discover_hosts.sh")
# A host whose rank failed is blacklisted by Horovod's elastic driver; the cooldown lets it return
# once the hosts file lists it again.
BLACKLIST_COOLDOWN_S = (2, 4)


class Hosts:
  """Emulated hosts (scripts/cluster/cluster.sh: a network namespace each, on a subnet of
  198.18.0.0/15, links unshaped, or at `rate`, tc's, e.g. 20mbit) for elastic launches: a host is
  lost by SIGKILLing the job's processes in its namespace, found by pid, and comes back when the
  hosts file lists it again.
  A cluster of the caller's own name and subnet: one a user has up is never touched.

  `names`: the `count` hosts ranks run on. horovodrun runs on a head host of its own (`head`,
  the cluster's first, never listed), as on a login node, so losing a host never takes the
  launcher with it: when it ran on the first of `names`, Horovod placed rank 0 on either host
  (its driver orders new hosts by iterating a set), and a test that lost the host without rank
  0 lost horovodrun half the time, leaving rank 0 orphaned (CI saw it wait out its bound)."""

  def __init__(self, name: str, subnet: str, count: int, hosts_file: str, rate: str = "none"):
    self.name, self.hosts_file, self.rate = name, hosts_file, rate
    self.head = f"{name}-h1"
    self.names = tuple(f"{name}-h{i + 2}" for i in range(count))
    self.env = dict(env(), CLUSTER=name, CLUSTER_SUBNET=subnet, ELASTIC_HOSTS=hosts_file)

  def up(self) -> str | None:
    """None once the hosts (and the head) are up, else why not (nothing is left up then). A SIGTERM
    from here on ends the program through the caller's down()."""
    stop_on_sigterm()
    done = subprocess.run(["bash", CLUSTER_SH, "up", str(len(self.names) + 1), self.rate], env=self.env,
                          capture_output=True, text=True, timeout=120)
    if done.returncode:
      self.down()
      return (done.stderr or done.stdout).strip().splitlines()[-1] if (done.stderr or done.stdout) else "failed"
    return None

  def down(self) -> None:
    subprocess.run(["bash", CLUSTER_SH, "down"], env=self.env, capture_output=True, timeout=120)

  def publish(self, *hosts: str, slots: int = 1) -> None:
    """The hosts the discovery script prints from now on (the file replaced whole)."""
    tmp = f"{self.hosts_file}.tmp"
    with open(tmp, "w") as fh:
      fh.writelines(f"{host}:{slots}\n" for host in hosts)
    os.replace(tmp, self.hosts_file)

  def pids(self, host: str) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}

  def connections(self, host: str, pid: int) -> set[tuple[str, str]]:
    """The established TCP connections (local, peer address:port) of process pid in host's
    namespace: a rank that holds some has initialised Horovod (Gloo's pairs, the driver's services)."""
    out = subprocess.run(["ip", "netns", "exec", host, "ss", "-Htnp", "state", "established"],
                         capture_output=True, text=True).stdout
    return {(f[-3], f[-2]) for line in out.splitlines() if f"pid={pid}," in line and len(f := line.split()) >= 5}

  def launcher(self, np_: int, min_np: int, max_np: int, *more: str) -> list[str]:
    """horovodrun in elastic mode over Gloo on the first host, the others reached by the cluster's
    ssh, the hosts from scripts/elastic/discover_hosts.sh; `more`: horovodrun's own options."""
    return ["bash", CLUSTER_SH, "run", "horovodrun", "--gloo", "-np", str(np_), "--min-np", str(min_np),
            "--max-np", str(max_np), "--host-discovery-script", DISCOVER, "--network-interface", f"{self.name}0",
            "--blacklist-cooldown-range", *map(str, BLACKLIST_COOLDOWN_S), *more]

  def static_launcher(self) -> list[str]:
    """horovodrun over Gloo on the head host, one rank on each of the hosts (no elastic driver)."""
    return ["bash", CLUSTER_SH, "run", "horovodrun", "--gloo", "-np", str(len(self.names)),
            "-H", ",".join(f"{h}:1" for h in self.names), "--network-interface", f"{self.name}0"]

  def host_of_rank(self, job: "Job", rank: int) -> str:
    """The host whose namespace holds the job's rank `rank` of its first world (HOROVOD_RANK)."""
    for host in self.names:
      for pid in self.pids(host) & job.alive():
        try:
          if psutil.Process(pid).environ().get("HOROVOD_RANK") == str(rank):
            return host
        except (psutil.NoSuchProcess, psutil.AccessDenied):
          continue
    raise AssertionError(f"no process of rank {rank} on {self.names}")

  def lose(self, job: "Job", host: str) -> list[int]:
    """The host is gone: no longer listed, and the job's processes on it SIGKILLed (by pid)."""
    self.publish(*[h for h in self.names if h != host])
    pids = sorted(self.pids(host) & job.alive())
    for pid in pids:
      os.kill(pid, signal.SIGKILL)
    return pids


WORLD_LINE = re.compile(r"(\d\d:\d\d:\d\d) world: (\d+) ranks on \d+ hosts at step (\d+)")


def world_sizes(text: str) -> list[int]:
  """The world sizes rank 0 logged in an elastic run, in order."""
  return [int(n) for _, n, _ in WORLD_LINE.findall(text)]


def regrown(text: str, size: int) -> int | None:
  """The index (in world_sizes) of the first world of `size` ranks after a smaller one, or None.

  A lost host may re-form the smaller world more than once: Horovod's driver notifies the host's
  removal on its own schedule, and a notice that arrives after the survivors' reset (which empties
  their queue of notices) interrupts the next commit again (horovod/common/elastic.py,
  check_host_updates). Worlds [2, 1, 1, 2] came of it in CI, under load."""
  sizes = world_sizes(text)
  shrunk = next((i for i, n in enumerate(sizes) if n < size), None)
  if shrunk is None:
    return None
  return next((i for i in range(shrunk + 1, len(sizes)) if sizes[i] == size), None)


HOROVOD_LOOP_DIED = "Horovod background loop uncaught exception"
ELASTIC_STALL = re.compile(r"stalled: rank \d+ on \S+ saw no progress .*--elastic")


def stalled_after_horovod_died(text: str) -> bool:
  """Whether an elastic run was ended by the watchdog after a Horovod background loop had died
  (a peer lost), the op a survivor held orphaned: Horovod 0.28.1's race, not this project's.

  The background thread, on the transport's exception, sets shut_down and then finalizes the
  tensor queues, failing the ops in them (operations.cc, BackgroundThreadLoop's shutdown path);
  an op whose enqueue checked shut_down before it was set and reached the queue after that
  finalization is never failed nor run, and its rank waits in the kernel until the watchdog ends
  the job (native stacks: the background thread gone, the main thread in AsyncOpKernel::Compute,
  once in the train step's allreduce, once in check_host_updates' broadcast at a commit). Seen 3
  times in ~52 lost-host launches here. A rank cannot abandon that wait, and Horovod's elastic
  driver ends the job when its only survivor exits, so the watchdog's resumable end stands."""
  died = text.find(HOROVOD_LOOP_DIED)
  return died >= 0 and ELASTIC_STALL.search(text, died) is not None
