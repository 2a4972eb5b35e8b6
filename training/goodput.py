"""Goodput: how fast a choice of batch makes progress, and the choice that makes it fastest.

Pollux (Qiao et al., OSDI 2021) calls it goodput: throughput times statistical efficiency. With
AdaScale's clock (optimizers/adascale.py) it is plainly the base-batch steps the schedule counts
per second,

    goodput(K) = r(B_K) / t(K),   B_K = K x micro-batch x ranks,

K the micro-batches a rank accumulates per update (the micro-batch, BatchNorm's batch, stays as it
is: a larger B costs time, never a retrace). One update's time is modelled as

    t(K) = exchange + K x micro

(the forward and backward of K micro-batches, then one exchange and one update: training/step.py),
fitted to the update times measured at the K the run has tried, and before a second K is tried,
the exchange is the one measured on its own at start-up.

choose() moves K only when the predicted goodput is better by more than `threshold` (Pollux:
5%), for every B_simple in the estimate's own range, so noise in the estimate does not move the
batch back and forth. Pure functions and numbers, one model for two users: the planner
(bench/plan) predicts with StepTime, fit_step_time and goodput; the batch controller
(--batch_policy=adaptive, training/batch_control.py) decides with fit_step_time and choose().
"""
import dataclasses
import statistics
from typing import Mapping, Sequence

from optimizers import adascale

THRESHOLD = 0.05  # Pollux re-allocates only for a predicted gain above 5%


@dataclasses.dataclass(frozen=True)
class StepTime:
  """t(K) = exchange + K x micro seconds: one update at K micro-batches per rank."""
  exchange: float
  micro: float

  def __call__(self, k: int) -> float:
    return self.exchange + k * self.micro


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
  ks, ts = list(medians), list(medians.values())
  weights = [1 / (t * t) for t in ts]  # (predicted - t) / t squared: weight 1 / t^2
  total = sum(weights)
  mean_k = sum(w * k for w, k in zip(weights, ks)) / total
  mean_t = sum(w * t for w, t in zip(weights, ts)) / total
  slope = (sum(w * (k - mean_k) * (t - mean_t) for w, k, t in zip(weights, ks, ts)) /
           sum(w * (k - mean_k) ** 2 for w, k in zip(weights, ks)))
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


@dataclasses.dataclass(frozen=True)
class Decision:
  """The K to train at and why: `gain` the predicted goodput over the current K's (1.0: stay)."""
  k: int
  gain: float
  reason: str

  @property
  def changes(self) -> bool:
    return self.gain > 1.0


def choose(k_now: int, k_max: int, step_time: StepTime, b_simple: float | None,
           b_range: tuple[float, float] | None, base_batch: int, micro_batch: int, ranks: int,
           threshold: float = THRESHOLD, k_min: int = 1) -> Decision:
  """The K in k_min..k_max of most goodput at b_simple, if it beats k_now's by more than `threshold`
  at b_simple and at both ends of b_range (the estimate's spread; None: b_simple alone);
  otherwise k_now. No estimate yet (b_simple None): r = 1 at every K, which favours the
  smallest; the controller waits instead (k_now stays)."""
  if b_simple is None:
    return Decision(k_now, 1.0, "no noise scale measured yet")
  points = [b_simple] + [b for b in (b_range or ()) if b and b > 0]

  def ratio(k: int, b: float) -> float:
    return (goodput(k, step_time, b, base_batch, micro_batch, ranks) /
            goodput(k_now, step_time, b, base_batch, micro_batch, ranks))

  best = max(range(k_min, k_max + 1), key=lambda k: goodput(k, step_time, b_simple, base_batch, micro_batch, ranks))
  if best == k_now:
    return Decision(k_now, 1.0, f"K={k_now} is the best at B_simple {b_simple:.0f}")
  worst = min(ratio(best, b) for b in points)
  if worst <= 1 + threshold:
    return Decision(k_now, 1.0, f"K={best} would gain {ratio(best, b_simple) - 1:.1%} at B_simple {b_simple:.0f}, "
                    f"{worst - 1:.1%} at the estimate's worst; under the {threshold:.0%} that moves it")
  return Decision(best, ratio(best, b_simple),
                  f"B_simple {b_simple:.0f} (range {min(points):.0f}-{max(points):.0f}): predicted "
                  f"{ratio(best, b_simple) - 1:+.1%} base-batch steps a second, at least {worst - 1:+.1%}")
