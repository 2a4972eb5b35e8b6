"""Goodput: how fast a choice of batch and compression makes progress, and the choice that makes it
fastest.

Pollux (Qiao et al., OSDI 2021) calls it goodput: throughput times statistical efficiency. With
AdaScale's clock (optimizers/adascale.py) it is plainly the base-batch steps the schedule counts
per second,

    goodput(K, c) = r(B_K) / t(K, c),   B_K = K x micro-batch x ranks,

K the micro-batches a rank accumulates per update (the micro-batch, BatchNorm's batch, stays as it
is: a larger B costs time, never a retrace) and c the gradients' compression ('none' or
'powersgd', comm/powersgd.py). One update's time is modelled as

    t(K, c) = K x micro + h_c

(the forward and backward of K micro-batches, then one exchange at c and one update:
training/step.py). The planner (bench/plan) predicts with the one-compression form, StepTime,
fit_step_time and goodput; the batch controller (--batch_policy=adaptive,
training/adaptive/batch_control.py) decides with the joint one: a Prior measured when a world begins,
fit_micro and step_model from the update times, and choose().

choose() moves only when the predicted goodput is better by more than `threshold` (Pollux: 5%),
for every B_simple in the estimate's own range, so noise in the estimate does not move the batch
back and forth; a move back towards the pair it last left needs twice that (BACK, below).
"""
import dataclasses
import statistics
from typing import Mapping, Sequence

from optimizers import adascale

THRESHOLD = 0.05  # Pollux re-allocates only for a predicted gain above 5%
COMPRESSIONS = ("none", "powersgd")
# The share of the plain exchange hidden behind backprop. docs/communication.md measured a third
# (Horovod's allreduce: 33% of 122 ms) to a half (flat 4 MB buckets: 49%; 32 MB: 52%), ResNet-50 on
# 2 MPI ranks at K = 1; the prior takes the low end. PowerSGD's exchange hides nothing: it runs after
# the whole backward pass (training/step.py's order), and so does the plain one in the adaptive step,
# whose K micro-batches are a tf.while_loop whose gradients exist only when it ends: OVERLAP_RANGE,
# from none to the half measured, is where the truth may be, so a choice of c that holds over all
# of it is taken on the prior, and one that does not is tried first (training/adaptive/batch_control.py).
OVERLAP = 1 / 3
OVERLAP_RANGE = (0.0, 0.5)
# Going back towards the pair last left needs BACK x the threshold. A move was predicted to gain
# over the threshold; reversing it says the model or the estimate has since moved by more than that,
# and a pair of choices within the threshold of each other is decided by the model's error, not by
# the goodput: each back-and-forth costs two input rebuilds (training/loop's RESIZED) for nothing.
# The fake clock of issue 38 showed the pattern (K 1 -> 2 -> 4 -> 2 -> 6 -> 3 -> 8 -> 3 ...).
BACK = 2


@dataclasses.dataclass(frozen=True)
class StepTime:
  """t(K) = exchange + K x micro seconds: one update at K micro-batches per rank."""
  exchange: float
  micro: float

  def __call__(self, k: int) -> float:
    return self.exchange + k * self.micro


def _slope(medians: Mapping[int, float]) -> tuple[float, float, float]:
  """(slope, weighted mean K, weighted mean t) of the least squares of relative errors through
  (K, median t): weights 1 / t^2, since (predicted - t) / t squared is the error."""
  weights = {k: 1 / (t * t) for k, t in medians.items()}
  total = sum(weights.values())
  mean_k = sum(w * k for k, w in weights.items()) / total
  mean_t = sum(w * medians[k] for k, w in weights.items()) / total
  slope = (sum(w * (k - mean_k) * (medians[k] - mean_t) for k, w in weights.items()) /
           sum(w * (k - mean_k) ** 2 for k, w in weights.items()))
  return slope, mean_k, mean_t


def fit_step_time(times: Mapping[int, Sequence[float]], exchange: float) -> StepTime:
  """The step-time model from measured update times by K (seconds; the median of each K counts).

  Two or more K: least squares of the medians' relative errors on (1, K), the exchange clipped at
  0 and the micro-batch time kept positive. Relative, because the times span K: in `make
  noise-scale` (K = 1 to 64, 0.18 to 6.3 s an update) plain least squares let K = 64 set the line
  and missed K = 1 by 64%, relative errors by 19%. One K: `exchange` (measured on its own) and the
  rest of its update time shared by its K micro-batches."""
  medians = {k: statistics.median(ts) for k, ts in times.items() if ts}
  if not medians:
    raise ValueError("fit_step_time needs at least one measured update time")
  if len(medians) == 1:
    (k, t), = medians.items()
    e = min(max(exchange, 0.0), t)
    return StepTime(e, max((t - e) / k, 1e-9))
  slope, mean_k, mean_t = _slope(medians)
  slope = max(slope, 1e-9)
  return StepTime(max(mean_t - slope * mean_k, 0.0), slope)


def goodput(k: int, step_time: StepTime, b_simple: float | None, base_batch: int, micro_batch: int,
            ranks: int) -> float:
  """Base-batch steps per second at K micro-batches per rank (AdaScale's r over the update time)."""
  return adascale.gain(b_simple, base_batch, k * micro_batch * ranks) / step_time(k)


def updates_to(base_steps: float, b_noise: float, base_batch: int, batch: int) -> float:
  """Updates at global batch `batch` that go as far as base_steps updates at base_batch: each moves
  AdaScale's clock by r, so base_steps / r. With B_noise = B_crit this is McCandlish et al.'s
  S(B) = S_min (1 + B_crit / B) through (base_batch, base_steps): r / S = (B_crit + B0) / (B_crit + B)
  is their E(B) = E_min (1 + B / B_crit) normalised at B0 (bench/plan predicts with it)."""
  return base_steps / adascale.gain(b_noise, base_batch, batch)


def seconds_to(base_steps: float, k: int, step_time: StepTime, b_noise: float, base_batch: int,
               micro_batch: int, ranks: int) -> float:
  """Seconds to go base_steps base-batch steps at K micro-batches per rank: base_steps / goodput."""
  return base_steps / goodput(k, step_time, b_noise, base_batch, micro_batch, ranks)


# ------------------------------------------------------ batch and compression --
@dataclasses.dataclass(frozen=True)
class Prior:
  """What a world knows before it has timed an update.

  micro: seconds of one micro-batch's forward and backward, timed alone at the world's start
  (never zero: with compute priced as free the first model of issue 38 jumped to the largest batch
  over a 20 Mbit/s link); exchange: seconds of one update's exchange timed alone, by compression
  (for 'powersgd' its encode and decode too); overlap: the share of the plain exchange hidden
  behind backprop (OVERLAP above); update: seconds of the rest of an update (the optimizer, the
  agreement; 0 when not timed)."""
  micro: float
  exchange: dict[str, float]
  overlap: float = OVERLAP
  update: float = 0.0

  def __post_init__(self):
    if not self.micro > 0:
      raise ValueError(f"Prior.micro={self.micro}: a micro-batch takes time (time the compute alone)")
    if not 0 <= self.overlap <= 1 or self.update < 0 or any(e < 0 for e in self.exchange.values()):
      raise ValueError(f"Prior: overlap {self.overlap} outside 0..1, or a negative time in {self}")
    if set(self.exchange) - set(COMPRESSIONS):
      raise ValueError(f"Prior.exchange: compressions are {COMPRESSIONS}, got {sorted(self.exchange)}")

  def exposed(self, c: str) -> float:
    """Seconds an update waits for c's exchange: the plain one less its overlap, PowerSGD's whole."""
    return (1 - self.overlap) * self.exchange[c] if c == "none" else self.exchange[c]

  def fixed(self, c: str, measured: tuple[str, float] | None = None) -> float:
    """h_c: from another compression's measured h (c_m, h_m) corrected by what the two exchanges
    expose, h_m - exposed(c_m) + exposed(c), at least 0; None: from the prior alone."""
    if measured is None:
      return self.update + self.exposed(c)
    c_m, h_m = measured
    return max(h_m - self.exposed(c_m) + self.exposed(c), 0.0)


@dataclasses.dataclass(frozen=True)
class Model:
  """t(K, c) = K x micro + fixed[c] seconds an update; how[c]: where fixed[c] came from ('timed',
  another c's time corrected by the prior, or the prior)."""
  micro: float
  fixed: dict[str, float]
  how: dict[str, str]

  def __call__(self, k: int, c: str) -> float:
    return k * self.micro + self.fixed[c]

  def at(self, c: str) -> StepTime:
    return StepTime(self.fixed[c], self.micro)

  def only(self, c: str) -> "Model":
    return Model(self.micro, {c: self.fixed[c]}, {c: self.how[c]})

  def describe(self) -> str:
    """'0.500 + 0.100 K s' (one compression), else each c's with where its fixed part came from."""
    if len(self.fixed) == 1 and "timed" in self.how.values():
      (h,) = self.fixed.values()
      return f"{h:.3f} + {self.micro:.3f} K s"
    return ", ".join(f"{c} {h:.3f} + {self.micro:.3f} K s" + ("" if self.how[c] == "timed" else f" ({self.how[c]})")
                     for c, h in self.fixed.items())


def fit_micro(times: Mapping[tuple[int, str], Sequence[float]]) -> float | None:
  """The micro-batch time from update times by (K, c): the slope of fit_step_time's relative least
  squares through each c's medians, one slope for all c (a micro-batch's compute does not depend on
  how its gradients travel) and each c its own intercept (a within-c regression, pooled). None when
  no c has two K's timed, or the slope is not positive (the times' noise is over K's cost: a slope
  clipped to ~0 would price compute as free, as issue 38's first world did)."""
  by_c: dict[str, dict[int, float]] = {}
  for (k, c), ts in times.items():
    if ts:
      by_c.setdefault(c, {})[k] = statistics.median(ts)
  num = den = 0.0
  for medians in by_c.values():
    if len(medians) >= 2:
      slope, mean_k, _ = _slope(medians)
      spread = sum((k - mean_k) ** 2 / (t * t) for k, t in medians.items())
      num, den = num + slope * spread, den + spread
  return num / den if den and num > 0 else None


def step_model(times: Mapping[tuple[int, str], Sequence[float]], prior: Prior, compressions: Sequence[str],
               micro: float | None = None) -> Model:
  """t(K, c) for the compressions this run may choose: micro given (fitted), else the prior's;
  h_c the median over the K's timed at c of (median t - K x micro), else from the other c's timed
  h corrected by the prior, else the prior's alone. The caller picks which times count (the
  controller: each c's freshest)."""
  micro = prior.micro if micro is None else micro
  residuals: dict[str, list[float]] = {}
  for (k, c), ts in times.items():
    if ts and c in compressions:
      residuals.setdefault(c, []).append(statistics.median(ts) - k * micro)
  timed = {c: max(statistics.median(r), 0.0) for c, r in residuals.items()}
  fixed, how = {}, {}
  for c in compressions:
    other = next((m for m in compressions if m in timed), None)
    if c in timed:
      fixed[c], how[c] = timed[c], "timed"
    elif other:
      fixed[c], how[c] = prior.fixed(c, (other, timed[other])), f"{other}'s corrected by the prior"
    else:
      fixed[c], how[c] = prior.fixed(c), "the prior"
  return Model(micro, fixed, how)


def pair_goodput(pair: tuple[int, str], model: Model, b_simple: float | None, base_batch: int, micro_batch: int,
                 ranks: int) -> float:
  """goodput at (K, c) on the joint model."""
  return goodput(pair[0], model.at(pair[1]), b_simple, base_batch, micro_batch, ranks)


def backward(pair: tuple[int, str], now: tuple[int, str], left: tuple[int, str] | None) -> bool:
  """Whether moving from `now` to `pair` goes back towards `left`, the pair the last change left:
  its c again, or K on left's side of now's."""
  return left is not None and ((pair[1] == left[1] != now[1]) or (pair[0] - now[0]) * (left[0] - now[0]) > 0)


@dataclasses.dataclass(frozen=True)
class Decision:
  """The pair (K, c) to train at and why: `gain` the predicted goodput over the current pair's
  (1.0: stay)."""
  k: int
  c: str
  gain: float
  reason: str

  @property
  def changes(self) -> bool:
    return self.gain > 1.0


def choose(now: tuple[int, str], model: Model, k_range: tuple[int, int], b_simple: float | None,
           b_range: tuple[float, float] | None, base_batch: int, micro_batch: int, ranks: int,
           threshold: float = THRESHOLD, left: tuple[int, str] | None = None) -> Decision:
  """The pair of most goodput at b_simple over K in k_range and the model's compressions, if it
  beats `now` by more than `threshold` at b_simple and at both ends of b_range (the estimate's
  spread; None: b_simple alone), by BACK x threshold when it goes back towards `left`; otherwise
  `now`. No estimate yet (b_simple None): r = 1 at every K, which favours the smallest, so K stays
  and only c is chosen (at one K, r cancels)."""
  k_now, c_now = now
  if b_simple is None:
    pairs, points = [(k_now, c) for c in model.fixed], [None]
  else:
    pairs = [(k, c) for c in model.fixed for k in range(k_range[0], k_range[1] + 1)]
    points = [b_simple] + [b for b in (b_range or ()) if b and b > 0]
  where = "no noise scale measured yet" if b_simple is None else f"B_simple {b_simple:.0f}"

  def ratio(pair, b):
    return (pair_goodput(pair, model, b, base_batch, micro_batch, ranks) /
            pair_goodput(now, model, b, base_batch, micro_batch, ranks))

  best = max(pairs, key=lambda p: ratio(p, b_simple))
  if ratio(best, b_simple) <= 1.0:
    return Decision(k_now, c_now, 1.0, f"K={k_now} {c_now} is the best at {where}")
  bar = threshold * (BACK if backward(best, now, left) else 1)
  back = f" back towards K={left[0]} {left[1]}" if backward(best, now, left) else ""
  worst = min(ratio(best, b) for b in points)
  if worst <= 1 + bar:
    return Decision(k_now, c_now, 1.0, f"K={best[0]} {best[1]} would gain {ratio(best, b_simple) - 1:.1%} at {where}, "
                    f"{worst - 1:.1%} at the estimate's worst; under the {bar:.0%} that moves it{back}")
  spread = "" if b_simple is None else f" (range {min(points):.0f}-{max(points):.0f})"
  return Decision(*best, ratio(best, b_simple),
                  f"{where}{spread}: predicted {ratio(best, b_simple) - 1:+.1%} base-batch steps a second, "
                  f"at least {worst - 1:+.1%}" + (f", over the {bar:.0%} that moves it{back}" if back else ""))
