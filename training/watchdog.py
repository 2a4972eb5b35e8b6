"""A stuck rank ends the job: a watchdog thread per rank, and heartbeats that name the culprit.

Horovod's stall inspector cannot be the only guard: a rank stopped with
SIGSTOP here produced no stall line in 90 s with HOROVOD_STALL_CHECK_TIME_SECONDS=10,
and with a shutdown time of 20 s the job still hung 150 s later
(../shared/REFERENCE.md): the coordinator itself waits inside the transport.
So every rank runs this thread. The training loop reports progress (a step
done, an evaluation batch done, a checkpoint written); when none comes for
the stall limit, the rank prints one line and exits with outcome.STALLED, and
mpirun/horovodrun end the rest.

The limit is max(--stall_timeout, 20 x the median of the recent step times),
so a job whose steps take minutes is not cut short; the first time a kind of
work runs (the set-up, the first step, the first evaluation or checkpoint:
model building, tracing, the hybrid probe) twice --stall_timeout and at least
STARTUP_SECONDS, with each stage of the set-up counting as progress. (A
30 s limit cut a healthy job short at its first evaluation, tracing the eval
step with both cores loaded 8 times over.) The first evaluation stays first-time
work until it has ended (evaluated()), not after this rank's first batch: its
closing exchange waits for peers still tracing theirs (rank 0, done with its
batches, fired at a 10 s limit while rank 1 traced its first batch for 12 s).
Rank 0 fires first; the others wait GRACE_SECONDS more, so the line users read
is rank 0's, which names the culprit: every rank writes a heartbeat file (step, phase, time, host, pid)
into <model_dir>/heartbeats every HEARTBEAT_SECONDS from this thread, so a
stopped process shows as a stale heartbeat, a deadlocked one as a fresh
heartbeat stuck at an older step or another phase. A rank whose file rank 0
cannot see (a model_dir not shared between hosts) is named as such.
"""
import json
import os
import shutil
import socket
import statistics
import sys
import threading
import time

from training import outcome

HEARTBEAT_SECONDS = 2.0
WAKE_SECONDS = 0.5       # the thread's period
LATE_WAKE_SECONDS = 2.0  # a wake-up this much later than the last: the process was stopped
GRACE_SECONDS = 10.0
STEP_FACTOR = 20      # the limit is at least this many typical steps
RECENT_STEPS = 50
# Before the first step: building the model and tracing the step took 10-20 s
# for ResNet-20 on this loaded 2-core machine; ResNet-50's first step is minutes.
STARTUP_SECONDS = 120
# Kinds of work: the input of a step belongs to the step.
KINDS = {"input": "step", "step": "step", "eval": "eval", "checkpoint": "checkpoint", "export": "export"}


def horovod_stall_defaults(stall_timeout: float) -> None:
  """Horovod's stall inspector (rank 0's coordinator) warns, naming the ranks that have not
  submitted a tensor, well before this watchdog ends the job; its own shutdown stays off,
  since the watchdog's line names the culprit and its limit follows the step time."""
  if stall_timeout > 0:
    os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(int(max(5, min(60, stall_timeout / 2)))))


def stall_limit(floor_seconds: float, step_seconds: list[float], first_time: bool) -> float:
  """Seconds without progress that count as a hang (pure; see the module docstring).

  first_time: the work under way has not been done before in this process
  (the set-up, the first step, the first evaluation or checkpoint), so it may
  be tracing a function or building a dataset.
  """
  if first_time:
    return max(2 * floor_seconds, STARTUP_SECONDS)
  typical = statistics.median(step_seconds) if step_seconds else 0.0
  return max(floor_seconds, STEP_FACTOR * typical)


def culprits(beats: dict[int, dict | None], now: float, own_step: int) -> list[str]:
  """Phrases naming the ranks that look stuck, worst first (pure: heartbeats in, words out).

  beats: the other ranks' heartbeats (None: not visible). A heartbeat older
  than 3 beats means the process is stopped or dead; one behind this rank's
  step, or outside a step, means it is stuck there.
  """
  stale, behind, unseen = [], [], []
  for rank in sorted(beats):
    beat = beats[rank]
    if beat is None:
      unseen.append(rank)
      continue
    where = f"rank {rank} on {beat['host']} (pid {beat['pid']})"
    age = now - beat["beat_time"]
    if age > 3 * HEARTBEAT_SECONDS + 1:
      stale.append(f"{where} last heard {age:.0f} s ago at step {beat['step']} ({beat['phase']}): "
                   "stopped or dead")
    elif beat["step"] < own_step or beat["phase"] != "step":
      behind.append(f"{where} is at step {beat['step']} ({beat['phase']}), no progress for "
                    f"{now - beat['progress_time']:.0f} s")
  named = stale + behind
  if unseen:
    named.append(f"rank(s) {', '.join(map(str, unseen))}: no heartbeat visible "
                 "(is --model_dir on a filesystem every host shares?)")
  return named


class Watchdog:
  """progress(step) after each unit of work; mark(phase) on entering one; close() at the end."""

  def __init__(self, rank: int, size: int, floor_seconds: float, directory: str, log=None,
               newest_checkpoint=lambda: None):
    self.rank, self.size = rank, size
    self.floor = floor_seconds
    self.directory = directory
    self.newest_checkpoint = newest_checkpoint
    self.host = socket.gethostname()
    self.step = 0
    self.phase = "startup"
    self._progress_time = time.time()
    self._done_kinds: set[str] = set()
    self._step_seconds: list[float] = []
    self._done = threading.Event()
    self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

  @classmethod
  def started(cls, world, model_dir: str, floor_seconds: float, newest_checkpoint) -> "Watchdog":
    """This rank's watchdog, running, its heartbeats in <model_dir>/heartbeats (rank 0 empties it
    first: a previous run's would name ranks of another job)."""
    directory = os.path.join(model_dir, "heartbeats")
    if world.is_chief:
      shutil.rmtree(directory, ignore_errors=True)
    dog = cls(world.rank, world.size, floor_seconds, directory, newest_checkpoint=newest_checkpoint)
    dog.start()
    return dog

  def start(self) -> None:
    if self.floor > 0:
      self._thread.start()

  def mark(self, phase: str) -> None:
    self.phase = phase

  def progress(self, step: int, phase: str = "step", timed: bool = True) -> None:
    """Work was done: a step (timed=True adds its duration to the typical step time), an
    evaluation batch or a checkpoint (timed=False)."""
    now = time.time()
    kind = KINDS.get(phase, "setup")
    if timed and kind in self._done_kinds and self.phase in ("input", "step"):
      self._step_seconds = (self._step_seconds + [now - self._progress_time])[-RECENT_STEPS:]
    # Every stage of the set-up is first-time work (restoring, broadcasting, tracing); an
    # evaluation is done once it has ended (evaluated), not after this rank's first batch.
    if kind not in ("setup", "eval"):
      self._done_kinds.add(kind)
    self.step, self.phase, self._progress_time = step, phase, now

  def evaluated(self, step: int) -> None:
    """An evaluation ended, its exchange with the other ranks included: the next is not first-time work."""
    self.progress(step, "eval", timed=False)
    self._done_kinds.add("eval")

  def limit(self) -> float:
    """The stall limit for the work under way now; other ranks wait GRACE_SECONDS longer than rank 0."""
    first_time = KINDS.get(self.phase, "setup") not in self._done_kinds
    return stall_limit(self.floor, self._step_seconds, first_time) + (GRACE_SECONDS if self.rank else 0.0)

  def close(self) -> None:
    self._done.set()

  # -------------------------------------------------------------- thread --
  def _path(self, rank: int) -> str:
    return os.path.join(self.directory, f"rank-{rank}.json")

  def _beat(self) -> None:
    beat = {"rank": self.rank, "host": self.host, "pid": os.getpid(), "step": self.step,
            "phase": self.phase, "progress_time": self._progress_time, "beat_time": time.time()}
    try:
      os.makedirs(self.directory, exist_ok=True)
      tmp = f"{self._path(self.rank)}.tmp"
      with open(tmp, "w") as fh:
        json.dump(beat, fh)
      os.replace(tmp, self._path(self.rank))
    except OSError:
      pass  # best effort: a rank that cannot write is named as unseen by rank 0

  def _read(self) -> dict[int, dict | None]:
    """The other ranks' heartbeats."""
    beats = {}
    for rank in range(self.size):
      if rank == self.rank:
        continue
      try:
        with open(self._path(rank)) as fh:
          beats[rank] = json.load(fh)
      except (OSError, ValueError):
        beats[rank] = None
    return beats

  def _run(self) -> None:
    last_beat = 0.0
    last_wake = time.time()
    while not self._done.wait(WAKE_SECONDS):
      now = time.time()
      # A late wake-up: this process itself was stopped (SIGSTOP, a
      # debugger, a suspended host) and has just been continued; the time it spent
      # stopped is not the others' fault. (Open MPI continues a stopped rank before it
      # terminates it: that rank blamed rank 0, which had already named it and exited.)
      if now - last_wake > LATE_WAKE_SECONDS:
        self._progress_time += now - last_wake
      last_wake = now
      if now - last_beat >= HEARTBEAT_SECONDS:
        self._beat()
        last_beat = now
      limit = self.limit()
      idle = now - self._progress_time
      if idle > limit and not self._done.is_set():
        self._fire(idle, limit)

  def _fire(self, idle: float, limit: float) -> None:
    named = culprits(self._read(), time.time(), self.step)
    who = "; ".join(named) if named else "no other rank looks stuck: this rank's own step hung"
    try:
      newest = self.newest_checkpoint()
    except Exception:  # noqa: BLE001  (a hang before the checkpoints exist: the line must still come)
      newest = None
    resume = f"resume with the same command (newest checkpoint {newest})" if newest else \
        "resume with the same command"
    sys.stderr.write(f"stalled: rank {self.rank} on {self.host} saw no progress for {idle:.0f} s "
                     f"(limit {limit:.0f} s) after step {self.step} ({self.phase}); {who}; ending the "
                     f"job (exit {outcome.STALLED}); {resume}\n")
    sys.stderr.flush()
    os._exit(outcome.STALLED)
