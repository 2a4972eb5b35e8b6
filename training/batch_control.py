"""The batch as a live decision (--batch_policy=adaptive): a goodput controller of the
accumulation steps K.

Every --batch_decide_every updates, and when a world begins, the controller picks the K
(micro-batches per rank per update; the micro-batch, BatchNorm's batch, never changes) that
makes the most base-batch progress a second, goodput(K) = r(B_K) / t(K) (training/goodput.py,
the model the planner bench/plan predicts with):

  r(B_K)  AdaScale's gain at the global batch B_K = K x micro-batch x ranks, from the live noise
          scale (training/noise_scale.py), the LR rule that follows any batch (optimizers/adascale.py);
  t(K)    exchange + K x micro seconds an update, fitted to this world's update times at each K
          tried (goodput.fit_step_time); before a second K is tried, the exchange is the one
          measured alone when the world began, and the micro-batch time what the last world's
          fit found (a rank's micro-batch takes the same time in any world; the exchange does not).

It moves K only for a predicted gain over 5% at the estimate and at both ends of its spread
(goodput.choose; Pollux's threshold), so noise in B_simple does not move the batch back and
forth. Once a world, while a single K is timed and the model says stay, it tries a second K (twice
the first) until the next decision: with one K the exchange term is the exchange timed alone, which
leaves out the rest of an update's fixed cost (the update itself, the agreement, the dispatch), and
the model would under-rate every larger batch; two K's fit both terms. Rank 0 decides and every
rank takes its K (one broadcast per decision): the ranks' update times differ a little, their K
must not.

A change ends the loop's stretch (training/loop.RESIZED); train.py rebuilds the input at the new
step batch and runs on with the same traced step (training/step.make_train_step's any_k). The
position counts images and tau (training/course.py), so the epoch, the data's order (the epoch's
rest dealt at the new batch, input/pipeline's elastic_plan) and the LR schedule stay right.
"""
import contextlib
import dataclasses
import statistics
import time

from training import goodput
from training.loop import Hook, due

WARMUP = 2   # updates of each stretch not timed: a new K's first steps fill the input pipeline
KEEP = 20    # update times kept per K (the newest): the model follows a machine whose speed drifts
# A K whose newest time is older than this many decisions is left out of the model: times taken
# minutes apart on a machine whose speed drifts read as a fixed cost that is not there (make
# adaptive, seed 1: K=2 timed at updates 50-100, K=1 at 800-850 on a host running slower by then,
# fitted an exchange term 9x the one timed alone and moved to K=5, taking 2.7x the fixed batch's
# time to the target). Left with one K, the model falls back on the exchange timed alone.
STALE = 4
MEASURED = 3  # timed updates at the current K before a decision


@dataclasses.dataclass(frozen=True)
class Change:
  """One change of K: at which update, from and to, and the predicted gain (summary.json)."""
  step: int
  k_from: int
  k_to: int
  global_from: int
  global_to: int
  gain: float
  b_simple: float
  probe: bool = False  # tried to fit the update time model (below), not for a predicted gain

  def to_json(self) -> dict:
    return {**dataclasses.asdict(self), "gain": round(self.gain, 4), "b_simple": round(self.b_simple, 1)}


class Controller(Hook):
  """The adaptive policy's state over a run: update times by K in this world, the decisions.

  micro_batch: the per-rank micro-batch; base_batch: AdaScale's B0; every: updates between
  decisions; noise: the run's NoiseScale; agree(k) -> rank 0's k on every rank (train.py: one
  Horovod broadcast; in-process tests: the identity); log: rank 0's lines; clock: seconds."""

  def __init__(self, micro_batch: int, base_batch: int, every: int, noise, agree, log,
               clock=time.perf_counter):
    self.micro_batch, self.base_batch, self.every, self.noise = micro_batch, base_batch, every, noise
    self.agree, self.log, self.clock = agree, log, clock
    self.ranks, self.k_min, self.k_max, self.k = 1, 1, 1, 1
    self.exchange = 0.0        # this world's exchange, measured alone
    self.micro_seconds = None  # the last world's fitted micro-batch time
    self.times: dict[int, list[float]] = {}
    self._timed_at: dict[int, int] = {}  # K -> the update of its newest time
    self._now = 0  # the newest update seen
    self.changes: list[Change] = []
    self._probed = False  # this world has tried a second K (_decide)
    self._started = None
    self._updates = 0  # of this stretch: the same count on every rank, so every rank decides at the same update
    # What the policy costs, in seconds of this process (summary.json): its own work (the hooks, the
    # fits, the decisions and their broadcast), and the changes it made (train.py: the input rebuilt).
    self.own_seconds = self.change_seconds = 0.0

  @contextlib.contextmanager
  def _own(self):
    start = time.perf_counter()
    try:
      yield
    finally:
      self.own_seconds += time.perf_counter() - start

  # ------------------------------------------------------------- worlds --
  def new_world(self, ranks: int, k_range: tuple[int, int], exchange_seconds: float) -> None:
    """A world begins: its update times start afresh (the exchange is another), its exchange
    is the one measured alone; the micro-batch time of the last world's fit is kept."""
    if self.times:
      self.micro_seconds = self.model().micro  # rank 0's is what counts: its choices are taken
    self.ranks, (self.k_min, self.k_max) = ranks, k_range
    self.exchange, self.times, self._timed_at, self._probed = exchange_seconds, {}, {}, False

  def start_k(self, k_flag: int, global_batch: int) -> int:
    """The K a world (or a resumed run) starts at: the one nearest the global batch the run last
    trained at (global_batch, 0: none yet, then --accumulation_steps), within this world's range."""
    k = round(global_batch / (self.micro_batch * self.ranks)) if global_batch else k_flag
    return min(max(k, self.k_min), self.k_max)

  def stretch(self, k: int) -> None:
    """A stretch at K begins (its first WARMUP updates are not timed)."""
    self.k, self._updates, self._started = k, 0, None

  # -------------------------------------------------------------- hooks --
  def before(self, phase, step):
    self._started = self.clock() if phase == "step" else None

  def after_step(self, step, nominal, out, lr):
    with self._own():
      self._after_step(step)

  def _after_step(self, step):
    self._updates, self._now = self._updates + 1, step
    if self._started is None:
      return
    seconds, self._started = self.clock() - self._started, None
    if self._updates <= WARMUP:
      return
    self.times.setdefault(self.k, []).append(seconds)
    del self.times[self.k][:-KEEP]
    self._timed_at[self.k] = step

  # ----------------------------------------------------------- decisions --
  def model(self) -> goodput.StepTime | None:
    """t(K) from this world's update times (one K: the exchange measured alone, and the last
    world's micro-batch time when there was one); None before any."""
    times = {k: ts for k, ts in self.times.items()
             if self._now - self._timed_at.get(k, self._now) <= STALE * self.every}  # fresh ones only
    if not times:
      return None
    if len(times) == 1 and self.micro_seconds is not None:
      (k, ts), = times.items()
      t = statistics.median(ts)
      return goodput.StepTime(max(min(self.exchange, t - k * self.micro_seconds), 0.0), self.micro_seconds)
    return goodput.fit_step_time(times, self.exchange)

  def first_choice(self, step: int) -> int:
    """A world's first K, before it has timed an update: from the exchange measured alone and the
    last world's micro-batch time (none yet: the K it starts at stays). Every rank calls it, and
    rank 0's choice is taken: a rank that joins this world has no last world's time."""
    model = goodput.StepTime(self.exchange, self.micro_seconds) if self.micro_seconds is not None else None
    with self._own():
      return self._decide(step, model)

  def resize(self, step: int) -> int | None:
    """After update `step`: the new K when one is due and chosen, else None. Every rank asks after
    the same updates (due and counted alike everywhere), since a decision is a collective."""
    if not due(step, self.every) or self._updates < WARMUP + MEASURED:
      return None
    with self._own():
      k = self._decide(step, self.model())
    return None if k == self.k else k

  def _decide(self, step: int, model: goodput.StepTime | None) -> int:
    """Rank 0's choice on every rank (model None: this rank has none, it keeps K)."""
    b_simple = self.noise.b_simple
    decision = (goodput.choose(self.k, self.k_max, model, b_simple, self.noise.b_simple_range(), self.base_batch,
                               self.micro_batch, self.ranks, k_min=self.k_min) if model else
                goodput.Decision(self.k, 1.0, "no update time measured yet"))
    probe = decision.k == self.k and b_simple is not None and self._probe()
    if probe:
      decision = goodput.Decision(probe, 1.0, f"trying K={probe} for the update time model: with one K timed, its "
                                  "exchange is the one timed alone, which leaves out the update's other fixed costs")
    k = int(self.agree(decision.k))  # rank 0's, on every rank
    if k == self.k:
      return k
    batch = self.micro_batch * self.ranks
    self.changes.append(Change(step, self.k, k, self.k * batch, k * batch, decision.gain, b_simple or 0.0,
                               probe=bool(probe)))
    self.log("batch: K %d -> %d (global batch %d -> %d) at update %d: %s%s", self.k, k, self.k * batch, k * batch,
             step, decision.reason, f"; update time model {model.exchange:.3f} + {model.micro:.3f} K s" if model else "")
    return k

  def _probe(self) -> int:
    """Once a world, while one K alone is timed: the K to try beside it (twice it, or half where
    twice is past the range), so the next decision fits both terms of t(K); 0: none."""
    if self._probed or len(self.times) != 1:
      return 0
    self._probed = True
    k = self.k * 2 if self.k * 2 <= self.k_max else self.k // 2
    return k if self.k_min <= k <= self.k_max and k != self.k else 0

  def summary(self) -> dict:
    """summary.json's batch_policy: the changes and the K the run ended at."""
    return {"policy": "adaptive", "k_final": self.k, "k_range": [self.k_min, self.k_max],
            "changes": [c.to_json() for c in self.changes], "own_seconds": round(self.own_seconds, 6),
            "change_seconds": round(self.change_seconds, 3)}
