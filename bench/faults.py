"""Faults against real launches: `make faults` (writes results/faults.{md,json}).

  python -m bench.faults               # every fault below, MPI and Gloo, 2 ranks on digits
  python -m bench.faults --only sigterm-launcher-mpi,sigstop-rank-gloo

Each fault starts train.py under horovodrun (2 ranks, digits, a checkpoint
every CHECKPOINT_EVERY steps) in a session of its own, waits until training
runs, does the fault (a signal to the launcher or to one rank, a truncated
checkpoint, a full disk, a diverging LR), and measures: the time from the
fault to the last process of the job gone, the exit status, the step at the
fault against the step of the newest checkpoint (steps lost), the processes
left behind (every pid the job ever had is tracked: a launcher that dies
leaves its children re-parented, out of reach of a process-tree walk), and
the line the user saw. Then the same command again, which must resume.
The multi-process tests (tests/test_faults.py) assert the same properties
through this module's Job; only this program reports times.
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PYTHON = sys.executable
STEP_LINE = re.compile(r"step +(\d+)/\d+")
USER_LINE = re.compile(r"^(?:\[\d+,\d+\]<std\w+>:)?((?:stopped|stalled|diverged|error|checkpoint)\b.*)$", re.M)
CHECKPOINT = re.compile(r"^ckpt-(\d+)\.index$")


def env() -> dict:
  e = dict(os.environ)
  e["PATH"] = os.path.dirname(PYTHON) + os.pathsep + e.get("PATH", "")
  e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
  e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
  e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
  e["TF_CPP_MIN_LOG_LEVEL"] = "2"
  return e


def newest_checkpoint(model_dir: str) -> int | None:
  """The step of the newest complete checkpoint file set in model_dir, or None."""
  try:
    steps = [int(m.group(1)) for f in os.listdir(model_dir) if (m := CHECKPOINT.match(f))]
  except FileNotFoundError:
    return None
  return max(steps, default=None)


class Job:
  """One launch of train.py (horovodrun, 2 ranks by default) in a session of its own.

  Every pid the job ever had is recorded by a thread (every 50 ms), so
  processes that outlive their parent are still found; kill() ends exactly
  those, by pid.
  """

  def __init__(self, model_dir: str, *train_args: str, np_: int = 2, gloo: bool = False,
               launcher: list[str] | None = None, extra_env: dict | None = None):
    self.model_dir = model_dir
    cmd = launcher or ["horovodrun", "-np", str(np_), "-H", f"localhost:{np_}"] + (["--gloo"] if gloo else [])
    self.cmd = cmd + [PYTHON, "train.py", f"--model_dir={model_dir}", *train_args]
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
    while not self._stop.wait(0.05):
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
    steps = STEP_LINE.findall(self.stderr())
    return int(steps[-1]) if steps else 0

  def wait_for_step(self, step: int, timeout: float = 180) -> int:
    deadline = time.time() + timeout
    while time.time() < deadline:
      if self.step() >= step:
        return self.step()
      if self.proc.poll() is not None:
        raise AssertionError(f"the job ended ({self.proc.returncode}) before step {step}:\n{self.tail()}")
      time.sleep(0.1)
    raise AssertionError(f"no step {step} within {timeout} s:\n{self.tail()}")

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
