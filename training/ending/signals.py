"""Stop requests: a signal, or a launcher that vanished, becomes one polite stop at a step boundary.

SIGTERM (kill, a job manager, a pod stop, mpirun aborting a job), SIGINT
(Ctrl-C), SIGUSR1 (Slurm's `--signal=B:USR1@N` preemption notice, forwarded
by our sbatch scripts; mpirun forwards it to every rank) and SIGHUP do not end
the process: they record a request that the training loop reads after each
step. The ranks agree on it inside the next step (training/step.py, one small
allreduce of the codes, max over ranks), so every rank stops after the same
step and none is left waiting in a collective; rank 0 then checkpoints. A
later signal changes nothing (launchers send several: a forwarded notice, then
their own SIGTERM); the watchdog bounds the stop, SIGKILL is there for a user
who will not wait.

The launcher watch covers what no signal reports. horovodrun over MPI
replaces itself by `/bin/sh -c "mpirun ..."` (horovod/runner/mpi_run.py,
os.execve), and /bin/sh (dash) does not exec mpirun: a SIGTERM to
horovodrun's pid ends only that shell, and mpirun and the ranks trained on,
unseen, to the end of the run. So each rank remembers its parent and
grandparent (mpirun and that shell, or Gloo's executor shell and middleman)
and asks for a stop when either goes away.
"""
import os
import signal
import sys
import threading
import time

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)
LAUNCHER_GONE = int(signal.SIGHUP)  # the code a vanished launcher reports: a hang-up


def name(code: int) -> str:
  """'SIGTERM' for 15 ...; the agreed stop code as a word."""
  try:
    return signal.Signals(code).name
  except ValueError:
    return f"signal {code}"


def leave(status: int, together) -> None:
  """End the run with this exit status (0: return). together() returns once every rank calls
  it: with mpirun or Gloo's horovodrun, the first rank to exit non-zero makes the launcher kill
  the rest, which must not catch rank 0 before its checkpoint and summary are written."""
  if status == 0:
    return
  together()
  for sig in STOP_SIGNALS:  # the launcher's clean-up signal is no longer a request
    signal.signal(sig, signal.SIG_IGN)
  sys.exit(status)


def _parent_of(pid: int) -> int | None:
  """The parent pid of a process from /proc (None when it is gone)."""
  try:
    with open(f"/proc/{pid}/stat") as fh:
      return int(fh.read().rpartition(")")[2].split()[1])
  except (OSError, ValueError, IndexError):
    return None


def _command(pid: int) -> str:
  try:
    with open(f"/proc/{pid}/comm") as fh:
      return fh.read().strip()
  except OSError:
    return "?"


class StopRequest:
  """Why this rank was asked to stop: `code` is 0 or a signal number, `reason` a phrase.

  install() in the main thread, before training; the loop passes `code` to
  each step and stops when the agreed code is non-zero.
  """

  def __init__(self, poll_seconds: float = 1.0):
    self.code = 0
    self.reason = ""
    self._poll = poll_seconds
    self._done = threading.Event()

  def install(self, watch_launcher: bool = True) -> None:
    for sig in STOP_SIGNALS:
      signal.signal(sig, self._on_signal)
    if watch_launcher:
      threading.Thread(target=self._watch, name="launcher-watch", daemon=True).start()

  def request(self, code: int, reason: str) -> None:
    if not self.code:
      self.code, self.reason = code, reason

  def asked(self) -> int:
    """The code of the stop asked of this rank, 0 for none (what the loop and the evaluation agree)."""
    return self.code

  def wait(self, seconds: float) -> None:
    """Return once a request arrives, or after `seconds`."""
    deadline = time.time() + seconds
    while not self.code and time.time() < deadline:
      time.sleep(0.05)

  def close(self) -> None:
    """Stop the launcher watch (the run is over: its exit is no longer a stop request)."""
    self._done.set()

  def _on_signal(self, signum, frame):
    self.request(signum, f"{name(signum)} received")  # a later signal changes nothing

  def _watch(self):
    parent = os.getppid()
    grandparent = _parent_of(parent)
    watched = [(pid, _command(pid)) for pid in (parent, grandparent) if pid and pid > 1]
    if not watched:
      return
    while not self._done.wait(self._poll):
      if os.getppid() != parent:
        gone = watched[0]
      elif len(watched) > 1 and _parent_of(parent) != grandparent:
        gone = watched[1]
      else:
        continue
      self.request(LAUNCHER_GONE, f"the launcher's process {gone[0]} ({gone[1]}) is gone")
      return
