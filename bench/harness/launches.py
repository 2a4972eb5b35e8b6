"""Launches of train.py that a test or a benchmark watches and ends: bench/faults.py's rows,
bench/faults_elastic.py's and the multi-process fault tests share them.

Job: one launch in a session of its own, every pid it ever had tracked, ended by pid.
Hosts: emulated hosts (network namespaces) for elastic launches, a host lost and back.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from bench.harness import REPO
from bench.harness.slurm_jobs import env  # the launches' environment, one definition

PYTHON = sys.executable

# A progress line's step: the schedule's "step N/M", or under --lr_scaling=adascale "update N".
STEP_LINE = re.compile(r"step +(\d+)/\d+|update +(\d+)")
# A rank's tag (mpirun's or Gloo's), rank 0's log time (checkpoints.py logs a damaged one), the line.
USER_LINE = re.compile(r"^(?:\[\d+(?:,\d+)?\]<std\w+>:)?(?:\d\d:\d\d:\d\d )?"
                       r"((?:stopped|stalled|diverged|error|checkpoint)\b.*)$", re.M)
START_TIMEOUT_S = 900  # for the step a fault waits for: a launch on the loaded 2-core machine took minutes
CHECKPOINT = re.compile(r"^ckpt-(\d+)\.index$")



def newest_checkpoint(model_dir: str) -> int | None:
  """The step of the newest complete checkpoint file set in model_dir, or None."""
  try:
    steps = [int(m.group(1)) for f in os.listdir(model_dir) if (m := CHECKPOINT.match(f))]
  except FileNotFoundError:
    return None
  return max(steps, default=None)


def per_rank_data_dir(root: str) -> list[str]:
  """A Job's program that runs train.py with --data_dir=<root>/<rank>, as two hosts hold two copies
  of one --data_dir (the rank from Open MPI's environment, or Gloo's HOROVOD_RANK); exec'd, so the
  rank's process is train.py itself (Job.rank_pid finds it)."""
  script = 'd=$1; shift; exec "$0" train.py --data_dir="$d/${OMPI_COMM_WORLD_RANK:-$HOROVOD_RANK}" "$@"'
  return ["sh", "-c", script, PYTHON, root]


def last_step(text: str) -> int:
  """The newest step of rank 0's progress lines in text (0 before the first)."""
  steps = STEP_LINE.findall(text)
  return int("".join(steps[-1])) if steps else 0


class Job:
  """One launch of train.py (horovodrun, 2 ranks by default) in a session of its own.

  Every pid the job ever had is recorded by a thread (every 0.2 s), so
  processes that outlive their parent are still found; kill() ends exactly
  those, by pid.
  """

  def __init__(self, model_dir: str, *train_args: str, np_: int = 2, gloo: bool = False,
               launcher: list[str] | None = None, extra_env: dict | None = None,
               program: list[str] | None = None):
    """program: what each rank runs before --model_dir and train_args (default `python train.py`;
    per_rank_data_dir's wrapper gives each rank a --data_dir of its own)."""
    self.model_dir = model_dir
    cmd = launcher or ["horovodrun", "-np", str(np_), "-H", f"localhost:{np_}"] + (["--gloo"] if gloo else [])
    self.cmd = cmd + (program or [PYTHON, "train.py"]) + [f"--model_dir={model_dir}", *train_args]
    self.env = dict(env(), **(extra_env or {}))
    self.pids: set[int] = set()
    self._seen: dict[int, psutil.Process] = {}
    self._out = tempfile.TemporaryFile("w+")
    self._err = tempfile.TemporaryFile("w+")
    self.proc = None
    self._stop = threading.Event()

  def start(self) -> "Job":
    self.proc = subprocess.Popen(self.cmd, cwd=REPO, env=self.env, stdin=subprocess.DEVNULL,
                                 stdout=self._out, stderr=self._err, text=True, start_new_session=True)
    self._track(self.proc.pid)
    threading.Thread(target=self._tracker, daemon=True).start()
    return self

  def _track(self, pid: int) -> None:
    if pid not in self._seen:
      try:
        self._seen[pid] = psutil.Process(pid)
        self.pids.add(pid)
      except psutil.NoSuchProcess:
        pass

  def _tracker(self) -> None:
    while not self._stop.wait(0.2):
      for proc in list(self._seen.values()):
        try:
          for child in proc.children(recursive=True):
            self._track(child.pid)
        except psutil.NoSuchProcess:
          pass

  # ------------------------------------------------------------- reading --
  def stderr(self) -> str:
    self._err.flush()
    self._err.seek(0)
    return self._err.read()

  def stdout(self) -> str:
    self._out.flush()
    self._out.seek(0)
    return self._out.read()

  def step(self) -> int:
    """The newest step rank 0 reported (0 before the first progress line)."""
    return last_step(self.stderr())

  def wait_until(self, predicate, what: str, timeout: float = START_TIMEOUT_S) -> float:
    """Seconds until predicate(rank 0's log) holds, polled every 0.1 s; an AssertionError with the
    log's tail if the job ends first or timeout passes."""
    start = time.time()
    while time.time() - start < timeout:
      if predicate(self.stderr()):
        return time.time() - start
      if self.proc.poll() is not None:
        raise AssertionError(f"the job ended ({self.proc.returncode}) before {what}:\n{self.tail()}")
      time.sleep(0.1)
    raise AssertionError(f"no {what} within {timeout} s:\n{self.tail()}")

  def wait_for_step(self, step: int, timeout: float = START_TIMEOUT_S) -> int:
    """The newest step once rank 0 reported step (or later)."""
    self.wait_until(lambda text: last_step(text) >= step, f"step {step}", timeout)
    return self.step()

  def rank_traceback(self) -> bool:
    """Whether a rank printed a traceback (the launcher's own lines are not tagged with a rank:
    horovodrun over Gloo ends with a RuntimeError of its own whenever a rank exits non-zero)."""
    return bool(re.search(r"^\[\d+(,\d+)?\]<stderr>:Traceback \(most recent call last\)", self.stderr(), re.M))

  def user_lines(self) -> list[str]:
    """The lines a user acts on: stopped/stalled/diverged/error/checkpoint ..."""
    return [m.group(1).strip() for m in USER_LINE.finditer(self.stderr())]

  def tail(self, n: int = 3000) -> str:
    return f"stdout:\n{self.stdout()[-n:]}\nstderr:\n{self.stderr()[-n:]}"

  # ------------------------------------------------------------- faults --
  def rank_pid(self, rank: int) -> int:
    """The pid of train.py's rank `rank` (from its environment: Open MPI's or Gloo's rank)."""
    for pid in sorted(self.alive()):
      try:
        proc = self._seen[pid]
        if "train.py" not in " ".join(proc.cmdline()):
          continue
        e = proc.environ()
      except (psutil.NoSuchProcess, psutil.AccessDenied):
        continue
      if e.get("OMPI_COMM_WORLD_RANK", e.get("HOROVOD_RANK")) == str(rank):
        return pid
    raise AssertionError(f"no process of rank {rank} among {sorted(self.alive())}")

  def signal(self, sig: int, rank: int | None = None) -> None:
    """Send sig to the launcher (rank None) or to one rank's process."""
    os.kill(self.proc.pid if rank is None else self.rank_pid(rank), sig)

  # ------------------------------------------------------------- the end --
  def alive(self) -> set[int]:
    """The job's processes still running (zombies are gone: they only wait to be reaped)."""
    running = set()
    for pid, proc in list(self._seen.items()):
      try:
        if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
          running.add(pid)
      except psutil.NoSuchProcess:
        pass
    return running

  def wait_gone(self, timeout: float) -> tuple[float, set[int]]:
    """(seconds until every process of the job was gone, the pids still alive at the timeout)."""
    start = time.time()
    while time.time() - start < timeout:
      self.proc.poll()
      if not self.alive():
        break
      time.sleep(0.05)
    self.proc.poll()
    return time.time() - start, self.alive()

  def kill(self) -> None:
    """SIGKILL every process of the job still alive, by pid, and reap the launcher."""
    self._stop.set()
    for pid in self.alive():
      try:
        os.kill(pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    if self.proc and self.proc.poll() is None:
      try:
        self.proc.wait(timeout=10)
      except subprocess.TimeoutExpired:
        pass

  def __enter__(self):
    return self.start()

  def __exit__(self, *exc):
    self.kill()
    self._out.close()
    self._err.close()


# ------------------------------------------------------------- elastic --
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
    """None once the hosts (and the head) are up, else why not (nothing is left up then)."""
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
