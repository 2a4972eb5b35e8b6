"""Launches of train.py that a test or a benchmark watches and ends: make faults' rows (bench/faults/),
the elastic runs of make adaptive and make slow-links, and the multi-process fault tests share them.

Job: one launch in a session of its own, every pid it ever had tracked, ended by pid.
The emulated hosts that elastic launches run on: hosts.py.
"""
import fcntl
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
# What a dying process says before its end fills the log (Python's, C++'s, Gloo's, Horovod's).
CAUSE_LINE = re.compile(r"Fatal Python error|terminate called|what\(\): |Error: |Exception: |Aborted|Segmentation "
                        r"fault|uncaught exception|Traceback \(most recent call last\)|^\S*(?:stopped|stalled|error):")



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


def _appended():
  """A temporary file the job's processes write at its end whatever the offset (O_APPEND). They share
  its open file with this process, so stderr()'s seek to 0 moved their offset too: a write between the
  seek and the read landed at 0, over the log's first lines (an elastic launch of make faults lost its
  first world's line so, and was counted failed). With O_APPEND, 20,000 lines read back intact while
  read 8,000 times; without it the first 13,000 were overwritten."""
  fh = tempfile.TemporaryFile("w+")
  fcntl.fcntl(fh.fileno(), fcntl.F_SETFL, fcntl.fcntl(fh.fileno(), fcntl.F_GETFL) | os.O_APPEND)
  return fh


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
    self._running: set[int] = set()  # the tracked pids not yet seen ended
    self._out, self._err = _appended(), _appended()
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
        self._running.add(pid)
      except psutil.NoSuchProcess:
        pass

  def _tracker(self) -> None:
    while not self._stop.wait(0.2):
      self._track_descendants()

  def _track_descendants(self) -> None:
    """Track every descendant of a tracked process still running, from one read of the process
    table: psutil's children(recursive=True) reads all of /proc once per call, and calling it for
    every pid an elastic job ever had (a discovery script's shell each second) cost the test
    process 20-25 s of CPU a launch."""
    parents: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
      parents.setdefault(proc.info["ppid"], []).append(proc.pid)
    todo = [pid for pid, proc in list(self._seen.items()) if pid in self._running and proc.is_running()]
    self._running = set(todo)  # an ended pid is never walked again (its number may come back as another's)
    while todo:
      for child in parents.get(todo.pop(), ()):
        if child not in self._seen:
          self._track(child)
          todo.append(child)

  # ------------------------------------------------------------- reading --
  def stderr(self) -> str:
    self._err.flush()
    self._err.seek(0)
    return self._err.read()

  def stdout(self) -> str:
    self._out.flush()
    self._out.seek(0)
    return self._out.read()

  def save_logs(self, directory: str) -> None:
    """The launch's output so far as directory/stdout.log and stderr.log (a study keeps them with its run)."""
    for stream, text in (("stdout", self.stdout()), ("stderr", self.stderr())):
      with open(os.path.join(directory, f"{stream}.log"), "w") as fh:
        fh.write(text)

  def step(self) -> int:
    """The newest step rank 0 reported (0 before the first progress line)."""
    return last_step(self.stderr())

  def wait_until(self, predicate, what: str, timeout: float = START_TIMEOUT_S) -> float:
    """Seconds until predicate(rank 0's log) holds, polled every 0.1 s; an AssertionError with the
    log's tail if the job ends first or timeout passes."""
    start = time.time()
    while time.time() - start < timeout:
      ended = self.proc.poll() is not None  # before the log is read: a line written just before the end is in it
      if predicate(self.stderr()):
        return time.time() - start
      if ended:
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
    """The end of both outputs, after the lines anywhere in stderr that say why a process died: a
    rank's abort fills the end with its list of extension modules (a test in make test showed
    only that, exit 134 on both ranks, and not what aborted)."""
    err = self.stderr()
    causes = [line for line in err.splitlines() if CAUSE_LINE.search(line)][:20]
    return ((f"lines saying why (of {len(err.splitlines())}):\n" + "\n".join(causes) + "\n" if causes else "") +
            f"stdout:\n{self.stdout()[-n:]}\nstderr:\n{err[-n:]}")

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
