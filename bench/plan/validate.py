"""The steps model against measurement, out of sample: each measured batch predicted by the
trade-off fitted without it (leave-one-out), and B_crit's spread over resamples of the batches."""
import dataclasses

import numpy as np

from training.adaptive import noise_scale

WITHIN = 1.5  # issue 24's target: predicted epochs within 1.5x of the measured at every batch


@dataclasses.dataclass(frozen=True)
class Held:
  """One measured batch against the fit of the others: steps measured and predicted, the B_crit
  fitted without it (the epochs' ratio is the steps', at one batch)."""
  batch: int
  measured: float
  predicted: float
  b_crit: float

  @property
  def ratio(self) -> float:
    return self.predicted / self.measured

  @property
  def within(self) -> bool:
    return 1 / WITHIN <= self.ratio <= WITHIN


def fit(points: list[tuple[int, float]]) -> noise_scale.TradeoffFit:
  """fit_tradeoff of (global batch, steps) points."""
  return noise_scale.fit_tradeoff([(s, s * b) for b, s in points])


def leave_one_out(points: list[tuple[int, float]]) -> list[Held]:
  """Each point predicted by the fit of the rest; [] when the rest would hold under two distinct batches."""
  out = []
  for i, (batch, steps) in enumerate(points):
    rest = points[:i] + points[i + 1:]
    if len({b for b, _ in rest}) < 2:
      return []
    f = fit(rest)
    out.append(Held(batch, steps, noise_scale.steps_at(batch, f.s_min, f.e_min), f.b_crit))
  return out


def bootstrap(points: list[tuple[int, float]], draws: int = 1000, seed: int = 0,
              level: float = 0.95) -> tuple[float, float, int]:
  """(low, high) percentile interval of B_crit over `draws` resamples of the points with
  replacement (resamples of one distinct batch, which fit nothing, are skipped), and the fits made."""
  rng = np.random.default_rng(seed)
  values = []
  for _ in range(draws):
    pick = [points[i] for i in rng.integers(0, len(points), len(points))]
    if len({b for b, _ in pick}) >= 2:
      values.append(fit(pick).b_crit)
  tail = 100 * (1 - level) / 2
  low, high = np.percentile(values, [tail, 100 - tail])
  return float(low), float(high), len(values)


@dataclasses.dataclass(frozen=True)
class Validation:
  """b_crit: fitted to every point; held: leave_one_out's; interval, draws: bootstrap's."""
  b_crit: float
  held: tuple[Held, ...]
  interval: tuple[float, float]
  draws: int

  @property
  def loo_range(self) -> tuple[float, float]:
    return min(h.b_crit for h in self.held), max(h.b_crit for h in self.held)


def validate(points: list[tuple[int, float]], draws: int = 1000, seed: int = 0) -> Validation | None:
  """The out-of-sample check of points (global batch, steps); None under three distinct batches
  (two fix the curve's two parameters: nothing is left to test)."""
  if len({b for b, _ in points}) < 3:
    return None
  low, high, made = bootstrap(points, draws, seed)
  return Validation(fit(points).b_crit, tuple(leave_one_out(points)), (low, high), made)
