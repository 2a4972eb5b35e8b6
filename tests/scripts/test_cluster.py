"""The emulated cluster (scripts/cluster/cluster.sh): hosts as network namespaces
with their own names and addresses, rate-limited links, Horovod ranks across
them, and a teardown that leaves nothing behind, also after a failure.

Needs root, iproute2 and a kernel that allows network namespaces; skipped
with the reason elsewhere. Each test uses a cluster name and subnet of its own,
so a cluster a user has up (imc, 198.18.0.0/24) is never touched.
"""
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, _env

SCRIPT = os.path.join(REPO, "scripts", "cluster", "cluster.sh")


def _unavailable():
  if sys.platform != "linux" or os.geteuid() != 0:
    return "needs root on Linux (network namespaces and tc)"
  missing = [t for t in ("ip", "tc", "unshare") if not shutil.which(t)]
  if missing:
    return f"needs {', '.join(missing)} (iproute2, util-linux)"
  probe = subprocess.run(["ip", "netns", "add", "imcprobe-h1"], capture_output=True, text=True)
  if probe.returncode:
    return f"the kernel refuses network namespaces: {probe.stderr.strip()}"
  subprocess.run(["ip", "netns", "del", "imcprobe-h1"], capture_output=True)
  return None


UNAVAILABLE = _unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")


def cluster(name, subnet, *args, timeout=120, check=True):
  env = dict(_env(), CLUSTER=name, CLUSTER_SUBNET=subnet)
  proc = subprocess.run(["bash", SCRIPT, *args], cwd=REPO, env=env, capture_output=True, text=True,
                        timeout=timeout)
  if check and proc.returncode:
    raise AssertionError(f"cluster.sh {' '.join(args)} exited {proc.returncode}\n"
                         f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
  return proc


def leftovers(name):
  """Everything of cluster NAME that could outlive it: namespaces, /etc/netns and /run entries."""
  spaces = [line.split()[0] for line in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                       text=True).stdout.splitlines()]
  found = [s for s in spaces if s.startswith(f"{name}-")]
  found += [f"/etc/netns/{d}" for d in os.listdir("/etc/netns") if d.startswith(f"{name}-")] \
      if os.path.isdir("/etc/netns") else []
  return found + [p for p in [f"/run/{name}-cluster"] if os.path.exists(p)]


def root_links():
  return sorted(line.split(":")[1].strip() for line in
                subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout.splitlines())


@pytest.fixture(scope="module")
def two_hosts():
  """Cluster imctest: 2 hosts on 198.18.7.0/24, links 100 Mbit/s; the machine's links before it."""
  name, subnet = "imctest", "198.18.7"
  cluster(name, subnet, "down")
  before = root_links()
  cluster(name, subnet, "up", "2", "100mbit")
  try:
    yield name, subnet, before
  finally:
    cluster(name, subnet, "down")
  assert leftovers(name) == []


def test_hosts_have_their_own_name_address_and_no_route_out(two_hosts):
  name, subnet, links_before = two_hosts
  assert root_links() == links_before, "the machine's own namespace gained or lost a link"
  assert cluster(name, subnet, "run", "hostname").stdout.strip() == f"{name}-h1"
  assert cluster(name, subnet, "run", "ssh", f"{name}-h2", "hostname").stdout.strip() == f"{name}-h2"
  for i in (1, 2):
    routes = subprocess.run(["ip", "-n", f"{name}-h{i}", "-4", "route"], capture_output=True,
                            text=True).stdout.strip().splitlines()
    assert len(routes) == 1 and routes[0].startswith(f"{subnet}.0/24 dev {name}0"), routes
    addrs = subprocess.run(["ip", "-n", f"{name}-h{i}", "-4", "-o", "addr"], capture_output=True,
                           text=True).stdout
    assert f"inet {subnet}.{i}/24" in addrs and "default" not in addrs
  # The hosts file names the hosts inside the cluster only.
  hosts = cluster(name, subnet, "run", "ssh", f"{name}-h2", "getent", "hosts", f"{name}-h1").stdout
  assert hosts.split()[0] == f"{subnet}.1"


SINK = "import socket; s = socket.socket(); s.bind(('0.0.0.0', 5201)); s.listen(1); c, _ = s.accept()\n" \
       "while c.recv(1 << 20): pass\nc.sendall(b'k')"
SEND = "import socket, sys; c = socket.create_connection((sys.argv[1], 5201)); c.sendall(b'x' * (5 << 20))\n" \
       "c.shutdown(socket.SHUT_WR); c.recv(1)"


def test_links_between_hosts_are_rate_limited(two_hosts):
  name, subnet, _ = two_hosts
  sink = subprocess.Popen(["ip", "netns", "exec", f"{name}-h2", sys.executable, "-c", SINK])
  try:
    time.sleep(1.0)
    start = time.perf_counter()
    subprocess.run(["ip", "netns", "exec", f"{name}-h1", sys.executable, "-c", SEND, f"{subnet}.2"],
                   check=True, timeout=60)
    seconds = time.perf_counter() - start
  finally:
    sink.kill()
    sink.wait()
  # 5 MiB = 42 Mbit: at least 0.42 s on a 100 Mbit/s link (an unshaped veth takes milliseconds);
  # 0.3 s leaves room for the token bucket's first burst.
  assert seconds > 0.3, f"5 MiB crossed a 100 Mbit/s link in {seconds:.3f} s"


@pytest.mark.multiprocess
def test_horovod_ranks_span_hosts_and_only_cross_host_traffic_uses_the_link(two_hosts):
  name, subnet, _ = two_hosts
  # As the README launches it: the 4 ranks share this machine's cores, so Open MPI yields.
  proc = cluster(name, subnet, "run", "horovodrun", "-np", "4", "-H", f"{name}-h1:2,{name}-h2:2",
                 "--network-interface", f"{name}0", "--mpi-args=--mca mpi_yield_when_idle 1",
                 sys.executable, "tests/multiprocess/scripts/cluster_check.py",
                 name, f"{name}0", timeout=300)
  assert proc.stdout.count("OK rank") == 4, proc.stdout[-3000:]


def test_down_ends_processes_running_on_the_hosts():
  name, subnet = "imctest2", "198.18.8"
  cluster(name, subnet, "down")
  cluster(name, subnet, "up", "2", "none")
  env = dict(_env(), CLUSTER=name, CLUSTER_SUBNET=subnet)
  job = subprocess.Popen(["bash", SCRIPT, "run", "ssh", f"{name}-h2", "sleep", "600"], cwd=REPO, env=env)
  try:
    deadline = time.time() + 30
    while not subprocess.run(["ip", "netns", "pids", f"{name}-h2"], capture_output=True, text=True).stdout:
      assert time.time() < deadline, "the sleep never started on host 2"
      time.sleep(0.1)
    cluster(name, subnet, "down")
    assert job.wait(timeout=10) != 0
  finally:
    if job.poll() is None:
      job.kill()
    cluster(name, subnet, "down")
  assert leftovers(name) == []


def test_failed_up_tears_down_what_it_made_and_foreign_subnets_are_refused():
  name = "imctest3"
  failed = cluster(name, "198.18.9", "up", "2", "not-a-rate", check=False)
  assert failed.returncode != 0 and "tearing down" in failed.stderr, failed.stderr
  assert leftovers(name) == []
  refused = cluster(name, "10.0.0", "up", "2", check=False)
  assert refused.returncode == 2 and "outside 198.18.0.0/15" in refused.stderr, refused.stderr
  assert leftovers(name) == []
