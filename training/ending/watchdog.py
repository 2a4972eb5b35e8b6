"""A stuck rank ends the job: a watchdog thread per rank, and heartbeats that name the culprit.

Horovod's stall inspector cannot be the only guard: a rank stopped with
SIGSTOP here produced no stall line in 90 s with HOROVOD_STALL_CHECK_TIME_SECONDS=10,
and with a shutdown time of 20 s the job still hung 150 s later
(../shared/REFERENCE.md): the coordinator itself waits inside the transport.
So every rank runs this thread. The training loop reports progress (a step
done, an evaluation batch done, a checkpoint written); when none comes for
the stall limit, the rank prints one line and exits with outcome.STALLED, and
mpirun/horovodrun end the rest.

A phase is judged against what its kind of work has taken so far in this run
(stall_limit): the set-up, a step with its input, the epoch change (the epoch's
iterator running out, the next one built), an evaluation, a checkpoint, the
export. The first time a kind runs (model building, tracing, the hybrid probe,
a dataset built) it gets twice --stall_timeout and at least STARTUP_SECONDS,
each stage of the set-up counting as progress. (A 30 s limit cut a healthy job
short at its first evaluation, tracing the eval step with both cores loaded 8
times over.) After, a step gets max(--stall_timeout, 20 x the median of the
recent step times), so a job whose steps take minutes is not cut short, and any
other kind max(--stall_timeout, KIND_FACTOR x the slowest of that kind so far):
one flat limit ended a healthy job in make test (2 runs of 2, --stall_timeout=10,
both cores loaded) at the first epoch's end, rank 0 reading past the epoch's
last batch for 10 s, judged as a step. Entering another kind of work counts as
progress (mark): each unit is judged from its own start. The first evaluation
stays first-time work until it has ended (evaluated()), not after this rank's
first batch: its closing exchange waits for peers still tracing theirs (rank 0,
done with its batches, fired at a 10 s limit while rank 1 traced its first
batch for 12 s).

A rank past its own limit may be waiting in a collective for a peer's
legitimate slow work: only rank 0 writes the checkpoint files, so the others'
first save is quick and they wait in the next step's allreduce with a step's
limit while rank 0 has the first save's allowance (issue 23). So every heartbeat
carries its rank's own limit, and a rank does not fire while no peer's heartbeat
is stale and one is fresh and within its own limit (explained_by_peer). That is
bounded: a peer's deadline is its progress time plus its limit, which only its
progress moves on; a stopped peer (a stale heartbeat) or one past its limit ends
the job as before, and a rank that sees no heartbeats keeps its own limit.

Under --elastic a world change renumbers the ranks, so no heartbeats are kept and each rank is
judged on its own progress (peers=False): a collective that never returns after a peer was lost
(Gloo's background loop can die without failing the op it holds) ended nothing before, and the
survivor and horovodrun waited for ever. The world re-forming is 'world' work, which Horovod's
own timeouts bound; each new world's work is first-time work again (new_world).

Rank 0 fires first; the others wait GRACE_SECONDS more (on a peer too), so the
line users read is rank 0's, which names the culprit: every rank writes a
heartbeat file (step, phase, times, limit, host, pid) into <model_dir>/heartbeats
every HEARTBEAT_SECONDS from this thread, so a stopped process shows as a stale
heartbeat, a deadlocked one as a fresh heartbeat stuck at an older step or
another phase. A rank whose file rank 0 cannot see (a model_dir not shared
between hosts) is named as such.
"""
import json
import math
import os
import shutil
import socket
import statistics
import sys
import threading
import time

from training.ending import outcome

HEARTBEAT_SECONDS = 2.0
WAKE_SECONDS = 0.5       # the thread's period
LATE_WAKE_SECONDS = 2.0  # a wake-up this much later than the last: the process was stopped
STALE_SECONDS = 3 * HEARTBEAT_SECONDS + 1  # a heartbeat older than this: the process is stopped or dead
GRACE_SECONDS = 10.0
STEP_FACTOR = 20      # a step's limit is at least this many typical steps
# Any other work's limit is at least this many times the slowest of its kind so far: the
# first of a kind (tracing, building) is usually its slowest, and the machine may get busier.
KIND_FACTOR = 4
RECENT = 50           # units of each kind remembered
# Before the first step: building the model and tracing the step took 10-20 s
# for ResNet-20 on this loaded 2-core machine; ResNet-50's first step is minutes.
STARTUP_SECONDS = 120
# Kinds of work (any other phase is the set-up): the input of a step belongs to the step.
# 'resize': the input built again at another batch (--batch_policy=adaptive's change of K).
KINDS = {"input": "step", "step": "step", "epoch": "epoch", "eval": "eval", "checkpoint": "checkpoint",
         "export": "export", "world": "world", "resize": "resize"}


def horovod_stall_defaults(stall_timeout: float) -> None:
  """Horovod's stall inspector (rank 0's coordinator) warns, naming the ranks that have not
  submitted a tensor, well before this watchdog ends the job; its own shutdown stays off,
  since the watchdog's line names the culprit and its limit follows the step time."""
  if stall_timeout > 0:
    os.environ.setdefault("HOROVOD_STALL_CHECK_TIME_SECONDS", str(int(max(5, min(60, stall_timeout / 2)))))


def stall_limit(floor_seconds: float, kind: str, took: dict[str, list[float]], first_time: bool) -> float:
  """Seconds without progress that count as a hang in work of `kind` (pure; see the module docstring).

  took: seconds each recent unit of each kind took in this run ('step': one step with its input;
  'epoch', 'eval', 'checkpoint': one epoch change, evaluation or save as a whole).
  first_time: no unit of this kind has ended in this process (the set-up, the first step, epoch
  change, evaluation or checkpoint, the export), so it may be tracing a function or building a dataset.
  'world' (--elastic: a world re-forming, waiting for --min-np ranks or for a joining host's start-up)
  has no limit here: Horovod bounds it (horovodrun's --elastic-timeout, its rendezvous timeout).
  """
  if kind == "world":
    return math.inf
  if first_time:
    return max(2 * floor_seconds, STARTUP_SECONDS)
  seen = took.get(kind, [])
  if kind == "step":  # the typical step: one that waited for a peer's first save does not raise it
    return max(floor_seconds, STEP_FACTOR * statistics.median(seen)) if seen else floor_seconds
  return max(floor_seconds, KIND_FACTOR * max(seen, default=0.0))


def explained_by_peer(beats: dict[int, dict | None], now: float, grace: float = 0.0) -> bool:
  """Whether the other ranks' heartbeats explain this rank's wait past its own limit (pure).

  True when none is stale (a stopped peer ends the job) and one is fresh and within its own limit
  (plus this rank's grace: rank 0 still fires first) for the work it is doing, e.g. rank 0 in its
  first save while this rank waits in the next step's allreduce. Bounded: a peer's deadline is its
  progress_time plus its limit, which only its progress moves on. A heartbeat not visible (None)
  or without a limit explains nothing: this rank's own limit holds.
  """
  seen = [beat for beat in beats.values() if beat is not None]
  if any(now - beat["beat_time"] > STALE_SECONDS for beat in seen):
    return False
  return any("limit" in beat and now - beat["progress_time"] <= beat["limit"] + grace for beat in seen)


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
    if age > STALE_SECONDS:
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
  """progress(step) after each unit of work; mark(phase) on entering one; close() at the end.

  clock: seconds (time.time; the tests move a clock by hand)."""

  def __init__(self, rank: int, size: int, floor_seconds: float, directory: str, log=None,
               newest_checkpoint=lambda: None, clock=time.time, peers: bool = True):
    self.rank, self.size = rank, size
    self.peers = peers  # False (--elastic): no heartbeats, each rank judged on its own progress
    self.floor = floor_seconds
    self.directory = directory
    self.newest_checkpoint = newest_checkpoint
    self.clock = clock
    self.host = socket.gethostname()
    self.step = 0
    self.phase = "startup"
    # The last progress (or change of kind) and the start of the unit under way.
    self._progress_time = self._began = clock()
    self._done_kinds: set[str] = set()
    self._took: dict[str, list[float]] = {}
    self._quiet_until = 0.0
    self._done = threading.Event()
    self._thread = threading.Thread(target=self._run, name="watchdog", daemon=True)

  @classmethod
  def started(cls, world, model_dir: str, floor_seconds: float, newest_checkpoint, peers: bool = True) -> "Watchdog":
    """This rank's watchdog, running, its heartbeats in <model_dir>/heartbeats (rank 0 empties it
    first: a previous run's would name ranks of another job). peers=False (--elastic, where a world
    change renumbers the ranks the heartbeats are named by): none written or read."""
    directory = os.path.join(model_dir, "heartbeats")
    if world.is_chief and peers:
      shutil.rmtree(directory, ignore_errors=True)
    dog = cls(world.rank, world.size, floor_seconds, directory, newest_checkpoint=newest_checkpoint, peers=peers)
    dog.start()
    return dog

  def start(self) -> None:
    if self.floor > 0:
      self._thread.start()

  def mark(self, phase: str) -> None:
    """Work of `phase` begins. Entering another kind of work is progress: the loop moved on, and
    the new work is judged from here against its own kind (the epoch change, which reports no
    progress of its own, ends here)."""
    if KINDS.get(phase, "setup") != self._kind():
      self._enter(self.clock())
    self.phase = phase

  def new_world(self) -> None:
    """A new world began (--elastic, after the world re-formed): its work is first-time work again
    (the step traced for the new number of ranks, the input built again), judged from here."""
    self._done_kinds.clear()
    self.mark("setup")

  def progress(self, step: int, phase: str = "step", timed: bool = True) -> None:
    """Work was done: a step (timed=True adds its duration to the typical step time), an
    evaluation batch or a checkpoint (timed=False)."""
    now = self.clock()
    kind = KINDS.get(phase, "setup")
    if kind != self._kind():  # work not marked: it began just now
      self._enter(now)
    elif timed and kind == "step" and kind in self._done_kinds:
      self._record("step", now - self._progress_time)
    if kind in ("checkpoint", "resize"):  # a unit that ends with its one progress
      self._record(kind, now - self._began)
    # Every stage of the set-up is first-time work (restoring, broadcasting, tracing); an
    # evaluation is done once it has ended (evaluated), not after this rank's first batch; the
    # epoch change (the iterator running out, the next one's first batch) once a step followed it.
    if kind in ("step", "checkpoint", "resize"):
      self._done_kinds.add(kind)
    if kind == "step" and "epoch" in self._took:
      self._done_kinds.add("epoch")
    self.step, self.phase, self._progress_time = step, phase, now

  def evaluated(self, step: int) -> None:
    """An evaluation ended, its exchange with the other ranks included: the next is not first-time work."""
    self.progress(step, "eval", timed=False)
    self._record("eval", self._progress_time - self._began)
    self._done_kinds.add("eval")

  def own_limit(self) -> float:
    """The stall limit for the work under way now (what this rank's heartbeat says)."""
    kind = self._kind()
    return stall_limit(self.floor, kind, self._took, kind not in self._done_kinds)

  def limit(self) -> float:
    """own_limit; other ranks wait GRACE_SECONDS longer than rank 0."""
    return self.own_limit() + self._grace()

  def overdue(self) -> tuple[float, float] | None:
    """(seconds without progress, limit) when this rank should end the job now, else None: its
    own limit has passed and no peer's heartbeat explains the wait (explained_by_peer)."""
    now = self.clock()
    limit, idle = self.limit(), now - self._progress_time
    if idle <= limit or now < self._quiet_until:
      return None
    if explained_by_peer(self._read(), now, self._grace()):
      self._quiet_until = now + HEARTBEAT_SECONDS  # the heartbeats change no faster than this
      return None
    return idle, limit

  def close(self) -> None:
    self._done.set()

  def _kind(self) -> str:
    return KINDS.get(self.phase, "setup")

  def _grace(self) -> float:
    return GRACE_SECONDS if self.rank else 0.0

  def _enter(self, now: float) -> None:
    """Another kind of work begins at `now`; an epoch change under way has ended."""
    if self._kind() == "epoch":
      self._record("epoch", now - self._began)
    self._began = self._progress_time = now

  def _record(self, kind: str, seconds: float) -> None:
    self._took[kind] = (self._took.get(kind, []) + [seconds])[-RECENT:]

  # -------------------------------------------------------------- thread --
  def _path(self, rank: int) -> str:
    return os.path.join(self.directory, f"rank-{rank}.json")

  def _beat(self) -> None:
    if not self.peers:
      return
    beat = {"rank": self.rank, "host": self.host, "pid": os.getpid(), "step": self.step,
            "phase": self.phase, "progress_time": self._progress_time, "limit": self.own_limit(),
            "beat_time": self.clock()}
    try:
      os.makedirs(self.directory, exist_ok=True)
      tmp = f"{self._path(self.rank)}.tmp"
      with open(tmp, "w") as fh:
        json.dump(beat, fh)
      os.replace(tmp, self._path(self.rank))
    except OSError:
      pass  # best effort: a rank that cannot write is named as unseen by rank 0

  def _read(self) -> dict[int, dict | None]:
    """The other ranks' heartbeats (none read without peers)."""
    beats = {}
    if not self.peers:
      return beats
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
    last_wake = self.clock()
    while not self._done.wait(WAKE_SECONDS):
      now = self.clock()
      # A late wake-up: this process itself was stopped (SIGSTOP, a
      # debugger, a suspended host) and has just been continued; the time it spent
      # stopped is not the others' fault. (Open MPI continues a stopped rank before it
      # terminates it: that rank blamed rank 0, which had already named it and exited.)
      if now - last_wake > LATE_WAKE_SECONDS:
        self._progress_time += now - last_wake
        self._began += now - last_wake
      last_wake = now
      if now - last_beat >= HEARTBEAT_SECONDS:
        self._beat()
        last_beat = now
      stalled = self.overdue()
      if stalled and not self._done.is_set():
        self._fire(*stalled)

  def _fire(self, idle: float, limit: float) -> None:
    named = culprits(self._read(), self.clock(), self.step)
    who = ("; ".join(named) if named else "no other rank looks stuck: this rank's own step hung") if self.peers else \
        "--elastic: the other ranks are not compared (a world change renumbers them)"
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
