"""The batch as a live decision (--batch_policy=adaptive): a goodput controller of the
accumulation steps K and the gradients' compression c.

Every --batch_decide_every updates, and when a world begins, the controller picks the pair (K, c)
(K micro-batches per rank per update, the micro-batch, BatchNorm's batch, never changing; c one of
the compressions this run may choose) that makes the most base-batch progress a second,
goodput(K, c) = r(B_K) / t(K, c) (training/adaptive/goodput.py):

  r(B_K)     AdaScale's gain at the global batch B_K = K x micro-batch x ranks, from the live noise
             scale (training/adaptive/noise_scale.py), the LR rule that follows any batch (optimizers/adascale.py);
  t(K, c)    K x micro + h_c seconds an update. micro: fitted to this world's update times at two or
             more K (goodput.fit_micro); with one K timed, the last fit's, kept with its age, in this
             world or an earlier one (a rank's compute does not change with the world); before any
             fit, the micro-batch time timed alone at the world's start (the Prior). h_c: what is
             left of c's times once the K micro-batches are taken off, so the model is right at the
             pair it trains at; for a c not timed in this world, the other's corrected by the prior
             (what each exchange exposes, goodput.Prior), and before any time the prior's.

Issue 38's controller dropped times older than 4 decisions and then modelled a settled K with the
exchange timed alone, which left out the rest of an update's fixed cost: it under-rated larger
batches, shrank K for a predicted +10-12% whose truth was 0.77-0.83, and went K 1 -> 2 -> 4 -> 2 -> 6
-> 3 -> 8 -> 3 -> 8 on a fake clock. Here no model falls back on the exchange timed alone, and:

- It moves only for a predicted gain over 5% at the estimate and at both ends of its spread
  (goodput.choose; Pollux's threshold), and back towards the pair it last left only for over 10%
  (goodput.BACK): the hysteresis.
- A try moves to a pair to time it, not for a predicted gain; the decision after it compares the
  two pairs on the model refitted with both (with two K's of one c, or one K of each c, timed: their
  own times) and keeps the better without the hysteresis (a try is not a choice to go back on).
  K: a neighbour (twice K, or half) once a world while no fit on two K's exists in the run (the
  prior's micro-batch time was timed alone, outside the step: one too high under-rates every larger
  batch, and only a second K shows it); later, when the fit is older than REFIT decisions, as is
  the last try, and the neighbour is predicted within the threshold of the current pair. c: a c not
  yet timed in this world whose choice rests on the prior's overlap (it wins for some overlap in
  OVERLAP_RANGE but not for all) is tried, at most once a world; a choice of c that holds over the
  whole range is taken as a choice, and when the world starts, before anything is timed, only such
  a one is.
- Rank 0 decides and every rank takes its pair (one broadcast per decision): the ranks' update
  times differ a little, their K and c must not.

A change ends the loop's stretch (training/loop.RESIZED); train.py rebuilds the input at the new
step batch and runs on with the same traced step (training/step.make_train_step's any_k). The
position counts images and tau (training/course.py), so the epoch, the data's order and the LR
schedule stay right.
"""
import contextlib
import dataclasses
import time

from training.adaptive import goodput
from training.hooks import Hook
from training.loop import due

WARMUP = 2   # updates of each stretch not timed: a new K's first steps fill the input pipeline
KEEP = 20    # update times kept per pair (the newest): the model follows a machine whose speed drifts
# Times of a pair not trained for this many decisions are not compared with the fresh ones: times
# taken minutes apart on a machine whose speed drifts read as a fixed cost that is not there (make
# adaptive, seed 1: K=2 timed at updates 50-100, K=1 at 800-850 on a host running slower by then,
# fitted an exchange term 9x the one timed alone and moved to K=5, taking 2.7x the fixed batch's
# time to the target). The fit they made is kept (Fit), not dropped.
STALE = 4
# A kept fit older than this many decisions is refreshed by a try of a neighbouring K (when it is
# predicted to cost under the threshold): the fit is kept STALE decisions past its times' freshness,
# so at most one try (under 5% slower for one decision's updates) in 2 x STALE decisions, ~0.6%.
REFIT = 2 * STALE
MEASURED = 3  # timed updates at the current pair before a decision

Pair = tuple[int, str]


@dataclasses.dataclass(frozen=True)
class Change:
  """One change of (K, c): at which update, from and to, the predicted gain (summary.json)."""
  step: int
  k_from: int
  k_to: int
  c_from: str
  c_to: str
  global_from: int
  global_to: int
  gain: float
  b_simple: float
  probe: bool = False     # a try: to time the pair, not for a predicted gain (module docstring)
  ends_try: bool = False  # back to the pair before a try, which its times showed faster

  def to_json(self) -> dict:
    return {**dataclasses.asdict(self), "gain": round(self.gain, 4), "b_simple": round(self.b_simple, 1)}


@dataclasses.dataclass(frozen=True)
class Fit:
  """A micro-batch time fitted on two or more K's: which, the update its oldest K was last timed at
  (its age), and the world it was made in."""
  micro: float
  ks: tuple[int, ...]
  at: int
  world: int


class Controller(Hook):
  """The adaptive policy's state over a run: update times by (K, c) in this world, the fit, the
  decisions.

  micro_batch: the per-rank micro-batch; base_batch: AdaScale's B0; every: updates between
  decisions; noise: the run's NoiseScale; decide((k, c)) -> rank 0's (k, c) on every rank (train.py:
  one Horovod broadcast of the pair; in-process tests: the identity); log: rank 0's lines; clock:
  seconds; compressions: the c's this run may choose, ('none',), ('powersgd',) or both (auto).
  A world: new_world, then start; then the loop's hooks time each update, resize decides, and
  stretch(k, c) begins each stretch; `k` and `c` are the current pair."""

  def __init__(self, micro_batch: int, base_batch: int, every: int, noise, decide, log,
               clock=time.perf_counter, compressions=("none",)):
    if not compressions or set(compressions) - set(goodput.COMPRESSIONS):
      raise ValueError(f"compressions: some of {goodput.COMPRESSIONS}, got {compressions}")
    self.micro_batch, self.base_batch, self.every, self.noise = micro_batch, base_batch, every, noise
    self.decide, self.log, self.clock, self.compressions = decide, log, clock, tuple(compressions)
    self.configured = self.compressions  # what it was made with; offer() narrows what it may choose now
    self.ranks, self.k_min, self.k_max, self.k, self.c = 1, 1, 1, 1, self.compressions[0]
    self.prior: goodput.Prior | None = None
    self.times: dict[Pair, list[float]] = {}
    self._timed_at: dict[Pair, int] = {}  # pair -> the update of its newest time
    self._now = 0  # the newest update seen
    self.fit: Fit | None = None  # the newest micro-batch fit, kept over decisions and worlds
    self._world = 0
    self._left: Pair | None = None    # the pair this world's last change left (goodput.BACK)
    self._trying: Pair | None = None  # during a try: the pair before it
    self._c_tried = False             # this world has tried a c (at most once)
    self._k_tried: int | None = None  # the update of this world's last try of a K
    self.changes: list[Change] = []
    self._c_by_ranks: dict[int, str] = {}  # the c each size of world last trained with (compression_in)
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
  def new_world(self, ranks: int, k_range: tuple[int, int], prior: goodput.Prior) -> None:
    """A world begins: its update times start afresh (the exchange is another) and its prior is
    `prior` (an exchange timed alone for every c this run may choose); the fit is kept."""
    missing = [c for c in self.compressions if c not in prior.exchange]
    if missing:
      raise ValueError(f"the prior has no exchange time for {missing}, which this run may choose")
    self._refit()  # the old world's times, before they go: their fit is what carries over
    self.ranks, (self.k_min, self.k_max), self.prior, self._world = ranks, k_range, prior, self._world + 1
    self.times, self._timed_at, self._left, self._trying, self._c_tried, self._k_tried = {}, {}, None, None, False, None
    # Counted afresh like a joining rank's: a survivor that went on counting its last world's updates
    # decided (a broadcast) alone at the world's first due update, and the world hung (make faults).
    self._updates, self._started = 0, None

  def compression_in(self, ranks: int, default: str) -> str:
    """The compression this run last trained with in a world of `ranks` ranks (default: no such world
    yet, or this process joined since): a world that comes back starts from it, so a host lost and
    returned does not cost the exchange it had chosen; start() still moves it where the model says."""
    return self._c_by_ranks.get(ranks, default)

  def offer(self, compressions) -> None:
    """The c's it may choose from now on, of those it was made with (training/shape.py: before
    --compression_start only 'none', PowerSGD's exchange from that step on)."""
    self.compressions = tuple(c for c in self.configured if c in compressions) or self.configured[:1]
    if self.c not in self.compressions:
      self.c = self.compressions[0]

  def start_k(self, k_flag: int, global_batch: int) -> int:
    """The K nearest the global batch the run last trained at (global_batch, 0: none yet, then
    --accumulation_steps), within this world's range."""
    k = round(global_batch / (self.micro_batch * self.ranks)) if global_batch else k_flag
    return min(max(k, self.k_min), self.k_max)

  def start(self, k_flag: int, global_batch: int, c_flag: str, step: int = 0) -> Pair:
    """The world's first pair, before it has timed an update (every rank calls it: rank 0's is
    taken): start_k and c_flag (the compression the flags or the last world said; the run's first
    c when this run may not choose it), then the model's choice from the prior, its c only where
    it holds over OVERLAP_RANGE. One line when it differs from (k_flag, c_flag); step: the update
    the world starts after (summary.json's row). The current pair becomes it."""
    k0 = self.start_k(k_flag, global_batch)
    at = (k0, c_flag if c_flag in self.compressions else self.compressions[0])
    with self._own():
      self.k, self.c = at
      model = self.model()
      decision = self._choose(at, model)
      if decision.c != at[1] and not self._holds(decision, at):
        decision = self._choose(at, model.only(at[1]))
      pair = self._decided((decision.k, decision.c))
      why = []
      if k0 != k_flag:
        why.append(f"the nearest K to the global batch trained last ({global_batch}) within K {self.k_min}.."
                   f"{self.k_max}" if global_batch else f"K {k_flag} is outside this world's {self.k_min}..{self.k_max}")
      if at[1] != c_flag:
        why.append(f"{c_flag} is not among this run's compressions {self.compressions}")
      if pair != at:
        self._record(step, at, pair, decision.gain)
        why.append(f"{decision.reason}; update time model {model.describe()} ({self._micro_how()})")
      if pair != (k_flag, c_flag):
        self.log("batch: this world starts at K %d, compression %s (global batch %d): %s", *pair,
                 pair[0] * self.micro_batch * self.ranks, "; ".join(why))
      self.k, self.c = pair
      self._c_by_ranks[self.ranks] = self.c
    return pair

  def stretch(self, k: int, c: str) -> None:
    """A stretch at (K, c) begins (its first WARMUP updates are not timed)."""
    self.k, self.c, self._updates, self._started = k, c, 0, None
    self._c_by_ranks[self.ranks] = c

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
    pair = (self.k, self.c)
    self.times.setdefault(pair, []).append(seconds)
    del self.times[pair][:-KEEP]
    self._timed_at[pair] = step

  # ------------------------------------------------------------- model --
  def model(self, overlap: float | None = None) -> goodput.Model:
    """t(K, c) now (module docstring); overlap: the prior's replaced (the ends of OVERLAP_RANGE)."""
    self._refit()
    window = STALE * self.every
    newest = {}
    for (_, c), at in self._timed_at.items():
      newest[c] = max(at, newest.get(c, at))
    times = {p: ts for p, ts in self.times.items() if newest[p[1]] - self._timed_at[p] <= window}  # each c's freshest
    prior = self.prior if overlap is None else dataclasses.replace(self.prior, overlap=overlap)
    return goodput.step_model(times, prior, self.compressions, self.fit.micro if self.fit else None)

  def _refit(self) -> None:
    """A fit on the fresh times, when two K's of one c are, becomes the kept one."""
    fresh = {p: ts for p, ts in self.times.items() if self._now - self._timed_at[p] <= STALE * self.every}
    micro = goodput.fit_micro(fresh)
    if micro is not None:
      fitted = [p for p in fresh if sum(q[1] == p[1] for q in fresh) >= 2]
      self.fit = Fit(micro, tuple(sorted({k for k, _ in fitted})), min(self._timed_at[p] for p in fitted), self._world)

  def _micro_how(self) -> str:
    if self.fit is None:
      return "micro-batch time the one timed alone at the world's start"
    return (f"micro-batch time fit on K {', '.join(map(str, self.fit.ks))}"
            f"{'' if self.fit.world == self._world else ' in an earlier world'}, {self._now - self.fit.at} updates ago")

  # ----------------------------------------------------------- decisions --
  def _choose(self, now: Pair, model: goodput.Model, left: Pair | None = None) -> goodput.Decision:
    return goodput.choose(now, model, (self.k_min, self.k_max), self.noise.b_simple, self.noise.b_simple_range(),
                          self.base_batch, self.micro_batch, self.ranks, left=left)

  def _rate(self, pair: Pair, model: goodput.Model) -> float:
    return goodput.pair_goodput(pair, model, self.noise.b_simple, self.base_batch, self.micro_batch, self.ranks)

  def _holds(self, decision: goodput.Decision, now: Pair) -> bool:
    """Whether the decision's c is chosen whatever the overlap in OVERLAP_RANGE."""
    return all(self._choose(now, self.model(end)).c == decision.c for end in goodput.OVERLAP_RANGE)

  def _decided(self, pair: Pair) -> Pair:
    k, c = self.decide(pair)  # rank 0's, on every rank
    return int(k), str(c)

  def resize(self, step: int) -> Pair | None:
    """After update `step`: the new (k, c) when a decision is due and moves, else None. Every rank
    asks after the same updates (due and counted alike everywhere), since a decision is a
    collective."""
    if not due(step, self.every) or self._updates < WARMUP + MEASURED:
      return None
    with self._own():
      pair = self._decide(step)
    return None if pair == (self.k, self.c) else pair

  def _decide(self, step: int) -> Pair:
    """Rank 0's pair on every rank: a try's end, a choice, or a try (module docstring)."""
    now, model = (self.k, self.c), self.model()
    base, left, back = now, self._left, None
    if self._trying:  # both pairs timed now: the faster stays, and no hysteresis between them
      before, self._trying = self._trying, None
      gain = self._rate(before, model) / self._rate(now, model)
      if gain > 1:
        base, left = before, now
        back = goodput.Decision(*before, gain, f"the try timed K={now[0]} {now[1]} slower: back, {gain - 1:+.1%} "
                                "base-batch steps a second")
    decision, kind = self._choose(base, model, left), "choice"
    if decision.changes:
      if decision.c != base[1] and model.how[decision.c] != "timed" and not self._holds(decision, base):
        decision, kind = dataclasses.replace(decision, reason=f"{decision.reason}; tried first: the choice of "
                                             "compression holds only for some overlaps of 0-50%"), "try"
    elif base != now:
      decision, kind = back, "return"
    else:
      decision, kind = self._try(model) or (decision, "choice")
    pair = self._decided((decision.k, decision.c))
    if pair == now:
      return now
    self._record(step, now, pair, self._rate(pair, model) / self._rate(now, model), kind)
    self.log("batch: K %d -> %d%s (global batch %d -> %d) at update %d: %s; update time model %s (%s)", now[0],
             pair[0], self._c_phrase(now[1], pair[1]), now[0] * self.micro_batch * self.ranks,
             pair[0] * self.micro_batch * self.ranks, step, decision.reason, model.describe(), self._micro_how())
    self._left, self._trying = now, now if kind == "try" else None
    self._c_tried |= kind == "try" and pair[1] != now[1]
    self._k_tried = step if kind == "try" and pair[1] == now[1] else self._k_tried
    return pair

  def _try(self, model: goodput.Model) -> tuple[goodput.Decision, str] | None:
    """A pair to time (module docstring): an untimed c once a world, else a neighbouring K; None."""
    now = (self.k, self.c)
    for end in goodput.OVERLAP_RANGE if not self._c_tried else ():
      d = self._choose(now, self.model(end))
      if d.changes and d.c != self.c and model.how[d.c] != "timed":
        return goodput.Decision(d.k, d.c, d.gain, f"trying {d.c}: with {end:.0%} of the plain exchange hidden (the "
                                f"prior says {self.prior.overlap:.0%}) it would gain {d.gain - 1:+.1%}"), "try"
    age = None if self.fit is None else self._now - self.fit.at
    ks = [k for k in (2 * self.k, self.k // 2) if self.k_min <= k <= self.k_max]
    # Not again within REFIT decisions of the last, whatever its times fitted: times too noisy for a
    # slope (fit_micro's None) would otherwise try again at every other decision.
    recent = self._k_tried is not None and self._now - self._k_tried <= REFIT * self.every
    if self.noise.b_simple is None or not ks or recent or (age is not None and age <= REFIT * self.every):
      return None
    k = max(ks, key=lambda k: self._rate((k, self.c), model))
    gain = self._rate((k, self.c), model) / self._rate(now, model)
    if age is None and self._k_tried is None:  # the prior's micro-batch time was timed alone: once, whatever it predicts
      return goodput.Decision(k, self.c, gain, f"trying K={k} for the micro-batch time (none fitted on two K's yet, "
                              f"the prior's timed alone): predicted {gain - 1:+.1%}"), "try"
    if gain * (1 + goodput.THRESHOLD) < 1:
      return None
    return goodput.Decision(k, self.c, gain, f"trying K={k} for the micro-batch time (the fit on two K's is {age} "
                            f"updates old): predicted {gain - 1:+.1%}, within the {goodput.THRESHOLD:.0%} a try may "
                            "cost"), "try"

  def _c_phrase(self, c_from: str, c_to: str) -> str:
    if c_from != c_to:
      return f", compression {c_from} -> {c_to}"
    return f", compression {c_from}" if len(self.compressions) > 1 else ""

  def _record(self, step: int, now: Pair, pair: Pair, gain: float, kind: str = "choice") -> None:
    batch = self.micro_batch * self.ranks
    self.changes.append(Change(step, now[0], pair[0], now[1], pair[1], now[0] * batch, pair[0] * batch, gain,
                               self.noise.b_simple or 0.0, probe=kind == "try", ends_try=kind == "return"))

  def summary(self) -> dict:
    """summary.json's batch_policy: the changes and the pair the run ended at."""
    return {"policy": "adaptive", "k_final": self.k, "c_final": self.c, "k_range": [self.k_min, self.k_max],
            "compressions": list(self.compressions), "changes": [c.to_json() for c in self.changes],
            "own_seconds": round(self.own_seconds, 6), "change_seconds": round(self.change_seconds, 3)}
