"""The gradient noise scale and the steps/examples trade-off (McCandlish et al. 2018, arXiv 1812.06162).

B_simple = tr(Sigma) / |G|^2: G the true gradient, Sigma the covariance of one example's
gradient. Below B_simple a batch's gradient is mostly noise and doubling the batch nearly
halves the steps to a target; above it the steps barely fall and the examples grow. Both
quantities come from two batch sizes B_small < B_big and their gradients' squared norms
(McCandlish et al., appendix A.1): E|g_B|^2 = |G|^2 + tr(Sigma) / B, two equations in two
unknowns. In data-parallel training B_small is the per-rank batch (each rank's own gradient,
its squared norm averaged over ranks) and B_big the global batch (the exchanged mean); with
accumulation on one rank, a micro-batch and the accumulated batch.

Pure Python and numpy: train.py feeds NoiseScale once per step with four numbers (fp32, unscaled
gradients), the planner (bench/plan/) and a study call the trade-off functions. docs/noise_scale.md
says how to read B_simple and where it misleads.
"""
import dataclasses
import math
from typing import Sequence

import numpy as np

# Per-step decay of the two moving averages: an effective window of 1 / (1 - 0.99) = 100 steps.
# Short against a run, because the noise scale grows as the loss falls (McCandlish et al., sec. 3):
# at batch 64 on Fashion-MNIST (results/time_to_accuracy.md, (a)) the target came after ~1,400
# steps, so 100 steps are about 0.1 epoch of it. Long against one step's noise: at 2 ranks
# B_big = 2 B_small and |G|^2's estimate 2|g_big|^2 - |g_small|^2 is the difference of two nearly
# equal norms whenever B_simple >> B_big, which KungFu's 0.9 (10 steps) would pass through. AdaptDL
# uses 0.999 per base batch; with (e)'s 56 updates in 4 epochs, the bias correction below already
# makes any decay a plain mean of the steps there are.
DECAY = 0.99


def grad_sq(sq_small: float, sq_big: float, b_small: float, b_big: float) -> float:
  """Unbiased estimate of |G|^2 from the squared norms of gradients over b_small and b_big examples:
  (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small). Can be negative (noise); sizes must differ."""
  return (b_big * sq_big - b_small * sq_small) / (b_big - b_small)


def trace_sigma(sq_small: float, sq_big: float, b_small: float, b_big: float) -> float:
  """Unbiased estimate of tr(Sigma), per example: (|g_small|^2 - |g_big|^2) / (1/B_small - 1/B_big)."""
  return (sq_small - sq_big) / (1 / b_small - 1 / b_big)


class _Mean:
  """An exponential moving average, bias-corrected as AdaptDL's GradientNoiseScale._update_avg:
  the weights given so far are tracked beside the sum, so early values are not pulled to zero
  and a decay that changes from step to step still gives a weighted mean."""

  def __init__(self):
    self.total, self.weight = 0.0, 0.0
    self.squares, self.weight_sq = 0.0, 0.0  # for the spread: the weighted mean of value^2, the weights' squares

  def add(self, value: float, decay: float) -> None:
    self.total = decay * self.total + (1 - decay) * value
    self.weight = decay * self.weight + (1 - decay)
    self.squares = decay * self.squares + (1 - decay) * value * value
    self.weight_sq = decay * decay * self.weight_sq + (1 - decay) ** 2

  @property
  def value(self) -> float | None:
    return self.total / self.weight if self.weight else None

  @property
  def standard_error(self) -> float | None:
    """Of the weighted mean, from the values' weighted variance and the weights' effective count
    (Kish: (sum w)^2 / sum w^2); None before two values."""
    if not self.weight_sq or self.weight * self.weight / self.weight_sq < 2:
      return None
    n = self.weight * self.weight / self.weight_sq
    variance = max(self.squares / self.weight - (self.total / self.weight) ** 2, 0.0) * n / (n - 1)
    return (variance / n) ** 0.5


class NoiseScale:
  """B_simple from per-step squared norms, |G|^2 and tr(Sigma) smoothed apart (never their ratio:
  a ratio of noisy estimates is biased and blows up when |G|^2's estimate nears zero).

  update() once per step; the sizes may change between steps (elastic training): each step's
  estimates are unbiased for its own sizes, so one average runs on, and the decay is raised to
  b_big / (the first measured b_big) so the window keeps covering the same number of examples
  (AdaptDL: theta = smoothing ** scale).
  """

  def __init__(self, decay: float = DECAY):
    if not 0 < decay < 1:
      raise ValueError(f"decay={decay}: pass a value in (0, 1), e.g. {DECAY}")
    self.decay = decay
    self._grad_sq, self._trace = _Mean(), _Mean()
    self._reference = None  # b_big of the first measured step
    self.steps = 0          # steps measured
    self.b_small = self.b_big = None  # the sizes of the last step offered
    self.reason = None      # why the last step offered was not measured, or None

  def update(self, sq_small: float, sq_big: float, b_small: int, b_big: int) -> bool:
    """Fold in one step: sq_small the mean over ranks (or micro-batches) of each one's gradient's
    squared norm over b_small examples, sq_big the squared norm of their mean over b_big. Returns
    whether the step was measured; if not, self.reason says why in one sentence."""
    if b_small <= 0 or b_big <= 0:
      raise ValueError(f"batch sizes must be positive, got b_small={b_small}, b_big={b_big}")
    self.b_small, self.b_big = int(b_small), int(b_big)
    if b_small == b_big:
      self.reason = (f"noise scale not measurable: both gradients cover {b_small} examples (one rank, no "
                     "accumulation); two sizes need 2+ ranks or --accumulation_steps >= 2")
      return False
    if not (math.isfinite(sq_small) and math.isfinite(sq_big)):
      # A step fp16 loss scaling skips has inf/NaN gradients (AdaptDL skips it too).
      self.reason = f"noise scale step skipped: non-finite squared norm ({sq_small}, {sq_big})"
      return False
    if self._reference is None:
      self._reference = b_big
    decay = self.decay ** (b_big / self._reference)
    # The raw estimates, negative ones included: clipping a noisy estimate at zero before
    # averaging would bias the mean up; the sign is judged once, on the average (b_simple).
    self._grad_sq.add(grad_sq(sq_small, sq_big, b_small, b_big), decay)
    self._trace.add(trace_sigma(sq_small, sq_big, b_small, b_big), decay)
    self.steps += 1
    self.reason = None
    return True

  @property
  def grad_sq(self) -> float | None:
    """Smoothed |G|^2 (squared gradient units), None before a measured step."""
    return self._grad_sq.value

  @property
  def trace_sigma(self) -> float | None:
    """Smoothed tr(Sigma) (squared gradient units x examples), None before a measured step."""
    return self._trace.value

  @property
  def b_simple(self) -> float | None:
    """tr(Sigma) / |G|^2 in examples; None until both averages are positive (tr(Sigma) is a trace
    of a covariance and |G|^2 a squared norm: an average at or below zero means the two norms
    are not yet told apart at these sizes)."""
    g, s = self.grad_sq, self.trace_sigma
    return s / g if g is not None and g > 0 and s > 0 else None

  def b_simple_range(self, z: float = 2.0) -> tuple[float, float] | None:
    """B_simple's spread: tr(Sigma) and |G|^2 each moved z standard errors of their averages, the
    ratio at both corners (the upper one 1e15 when |G|^2 could be 0); None until both have one."""
    g, s = self.grad_sq, self.trace_sigma
    se_g, se_s = self._grad_sq.standard_error, self._trace.standard_error
    if self.b_simple is None or se_g is None or se_s is None:
      return None
    low = max(s - z * se_s, 0.0) / (g + z * se_g)
    high = (s + z * se_s) / (g - z * se_g) if g > z * se_g else 1e15
    return low, high

  def state(self) -> dict:
    """What a checkpoint and a commit keep (training/state.Position.noise): the two averages
    with their weights and second moments, the reference size and the steps. Plain floats: JSON
    keeps them exactly, so every rank restored from it computes the same B_simple (AdaScale's
    gain and the batch controller depend on it)."""
    return {"grad_sq": [self._grad_sq.total, self._grad_sq.weight, self._grad_sq.squares, self._grad_sq.weight_sq],
            "trace": [self._trace.total, self._trace.weight, self._trace.squares, self._trace.weight_sq],
            "reference": self._reference, "steps": self.steps}

  def restore(self, state: dict | None) -> None:
    """Back to a state() (None: nothing measured yet)."""
    state = state or {"grad_sq": [0.0] * 4, "trace": [0.0] * 4, "reference": None, "steps": 0}
    for mean, values in ((self._grad_sq, state["grad_sq"]), (self._trace, state["trace"])):
      mean.total, mean.weight, mean.squares, mean.weight_sq = (float(x) for x in values)
    self._reference, self.steps = state["reference"], int(state["steps"])

  def snapshot(self, step: int) -> dict:
    """summary.json's noise_scale.at_target: the estimates as they stand at `step`."""
    return {"b_simple": self.b_simple, "grad_sq": self.grad_sq, "trace_sigma": self.trace_sigma, "step": step}

  def summary(self, at_target: dict | None = None) -> dict:
    """summary.json's noise_scale: the estimates now, the last sizes, steps measured, at_target."""
    return {"b_simple": self.b_simple, "grad_sq": self.grad_sq, "trace_sigma": self.trace_sigma,
            "b_small": self.b_small, "b_big": self.b_big, "steps": self.steps, "at_target": at_target}


# ------------------------------------------------------------- steps and examples --
# McCandlish et al. eq. 2.11: (S/S_min - 1)(E/E_min - 1) = 1 with E = S B, where S_min is the
# fewest steps (an infinite batch) and E_min the fewest examples (a batch of one) to a target.
# Solved for S and E at batch B: S = S_min + E_min / B and E = E_min + S_min B; B_crit = E_min / S_min
# is the batch at which both are twice their minimum.
def steps_at(batch: float, s_min: float, e_min: float) -> float:
  """Steps to the target at global batch `batch`: S_min (1 + B_crit / B)."""
  return s_min + e_min / batch


def examples_at(batch: float, s_min: float, e_min: float) -> float:
  """Examples to the target at global batch `batch`: E_min (1 + B / B_crit)."""
  return e_min + s_min * batch


@dataclasses.dataclass(frozen=True)
class TradeoffFit:
  """S_min, E_min and B_crit fitted to measured (steps, examples) pairs. residuals: per pair,
  log(predicted steps / measured steps) (the same for examples at that batch); rms: their root mean square."""
  s_min: float
  e_min: float
  residuals: tuple[float, ...]

  @property
  def b_crit(self) -> float:
    return self.e_min / self.s_min

  @property
  def rms(self) -> float:
    return math.sqrt(sum(r * r for r in self.residuals) / len(self.residuals))


def _initial(batches: np.ndarray, steps: np.ndarray) -> np.ndarray:
  """log(S_min), log(E_min) from S = S_min + E_min / B by least squared relative error (linear);
  a non-positive solution is replaced by 1% of what the data allow (S_min < S, E_min < E)."""
  rows = np.stack([1 / steps, 1 / (batches * steps)], axis=1)
  s_min, e_min = np.linalg.lstsq(rows, np.ones_like(steps), rcond=None)[0]
  s_min = s_min if s_min > 0 else 0.01 * steps.min()
  e_min = e_min if e_min > 0 else 0.01 * (steps * batches).min()
  return np.log([s_min, e_min])


def fit_tradeoff(points: Sequence[tuple[float, float]], huber: float | None = 0.2,
                 iterations: int = 200) -> TradeoffFit:
  """S_min and E_min through measured (steps, examples) pairs of runs to one target (E = S B).

  Fitted in log space: runs at batches 64 and 65,536 differ 1,000x in steps, and plain least
  squares on S would let the smallest batch set the line (the measurements' errors are relative:
  a quarter-epoch evaluation grid, seeds). Parameters are log S_min and log E_min, so both stay
  positive. huber: residuals beyond it (in log units, 0.2 = 22%) weigh less (Huber's loss by
  reweighting), so one badly tuned run does not drag the fit; None: plain least squares.
  Damped Gauss-Newton (Levenberg). Needs two or more distinct batches. Points with no bend
  (steps halving with every doubling, or not falling at all) drive S_min or E_min towards zero:
  B_crit then lies beyond the batches measured, and the fit says nothing past them.
  """
  if len(points) < 2 or min(min(p) for p in points) <= 0 or len({round(e / s, 9) for s, e in points}) < 2:
    raise ValueError(f"fit_tradeoff needs two or more runs at distinct batches with steps, examples > 0, got {points}")
  steps = np.array([s for s, _ in points], float)
  batches = np.array([e / s for s, e in points], float)

  def residuals(theta):
    return np.log(np.exp(theta[0]) + np.exp(theta[1]) / batches) - np.log(steps)

  def weights(r):
    return np.ones_like(r) if huber is None else np.minimum(1.0, huber / np.maximum(np.abs(r), 1e-300))

  def cost(r):
    if huber is None:
      return float(np.sum(r * r))
    a = np.abs(r)
    return float(np.sum(np.where(a <= huber, r * r, 2 * huber * a - huber * huber)))

  theta, damping = _initial(batches, steps), 1e-3
  for _ in range(iterations):
    r = residuals(theta)
    model = np.exp(theta[0]) + np.exp(theta[1]) / batches
    jac = np.stack([np.exp(theta[0]) / model, np.exp(theta[1]) / (batches * model)], axis=1)
    w = weights(r)
    normal = jac.T @ (w[:, None] * jac)
    gradient = jac.T @ (w * r)
    step = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -gradient)
    if cost(residuals(theta + step)) < cost(r):
      theta, damping = theta + step, damping / 3
      if np.abs(step).max() < 1e-12:
        break
    else:
      damping *= 10
      if damping > 1e12:
        break
  return TradeoffFit(s_min=float(np.exp(theta[0])), e_min=float(np.exp(theta[1])),
                     residuals=tuple(float(x) for x in residuals(theta)))
