"""Time to a target for each number of ranks and global batch, through training/goodput, the model
the batch controller optimises: the steps by AdaScale's clock (goodput.updates_to, McCandlish et
al.'s trade-off normalised at the run's batch), an update's time as a goodput.StepTime (a fixed
part, one rank's per-update overhead plus what the exchange leaves exposed, and K micro-batches)."""
import dataclasses

from training.adaptive import goodput, noise_scale

from bench.plan import exchange
from bench.plan.workload import Workload


@dataclasses.dataclass(frozen=True)
class Steps:
  """Steps to the target by global batch B: base_steps at base_batch B0, and B_noise (B_crit),
  S(B) = base_steps / r(B) = S_min (1 + B_noise / B). source: where B_noise comes from, in words."""
  base_batch: int
  base_steps: float
  b_noise: float
  source: str

  def at(self, batch: float) -> float:
    return goodput.updates_to(self.base_steps, self.b_noise, self.base_batch, batch)

  @property
  def s_min(self) -> float:
    """Steps at an unbounded batch."""
    return self.base_steps / (1 + self.b_noise / self.base_batch)

  @property
  def e_min(self) -> float:
    """Examples at a batch of one (E_min = S_min x B_crit)."""
    return self.s_min * self.b_noise

  def largest_within(self, examples: float) -> float:
    """The largest global batch whose examples to the target, E_min + S_min B, are at most
    `examples`; 0 when even a batch of one needs more."""
    return max(0.0, (examples - self.e_min) / self.s_min)


def run_steps(workload: Workload) -> float:
  """The run's own steps to its target (epochs x images / batch)."""
  return workload.epochs * workload.train_images / workload.batch


def from_ratio(workload: Workload, ratio: float) -> Steps:
  """B_crit = ratio x B_simple, through the run's own point (its batch and steps to target)."""
  b_crit = ratio * workload.b_simple
  return Steps(workload.batch, run_steps(workload), b_crit,
               f"B_crit = {ratio:g} x B_simple {workload.b_simple:,.0f} = {b_crit:,.0f} images, "
               "through the run's point")


def measured_points(workload: Workload, measured) -> list[tuple[int, float]]:
  """(global batch, steps to target) of the run (if it reached its target) and of every measured
  (batch, epochs, reached) that reached it: what a fit may use (a run that missed is only a bound)."""
  run = [(workload.batch, run_steps(workload))] if workload.reached else []
  return run + [(b, e * workload.train_images / b) for b, e, reached in measured if reached]


def fitted(workload: Workload, points: list[tuple[int, float]]) -> Steps:
  """B_crit and the curve fitted (training/noise_scale.fit_tradeoff) to (batch, steps) points,
  read at the run's batch. ValueError (fit_tradeoff's) with fewer than two distinct batches."""
  fit = noise_scale.fit_tradeoff([(s, s * b) for b, s in points])
  return Steps(workload.batch, noise_scale.steps_at(workload.batch, fit.s_min, fit.e_min), fit.b_crit,
               f"B_crit fitted to the {len(points)} measured batches (training/noise_scale.fit_tradeoff): "
               f"{fit.b_crit:,.0f} images = {fit.b_crit / workload.b_simple:.2f} x the run's B_simple "
               f"{workload.b_simple:,.0f}")


@dataclasses.dataclass(frozen=True)
class Compute:
  """One rank's compute in an update: `overhead` seconds whatever its images (the update, the
  step's fixed costs, the measured run's own exchange) plus `per_image` seconds an image."""
  overhead: float
  per_image: float

  def step_time(self, micro_batch: int, exposed: float) -> goodput.StepTime:
    """An update of K micro-batches of micro_batch images a rank: exchange = overhead + exposed."""
    return goodput.StepTime(self.overhead + exposed, micro_batch * self.per_image)


def update_times(workload: Workload, speeds) -> dict[int, list[float]]:
  """{K: seconds an update} measured at the run's ranks and micro-batch: the run's own and each
  (global batch, global images/s) of speeds (K = batch / (ranks x micro-batch))."""
  micro = workload.ranks * workload.per_rank_batch
  times = {workload.accumulation: [workload.per_rank_batch * workload.accumulation / workload.images_per_sec]}
  for batch, rate in speeds:
    times.setdefault(batch // micro, []).append(batch / rate)
  return times


def fit_compute(workload: Workload, speeds=()) -> Compute:
  """Compute fitted (goodput.fit_step_time) to the update times measured at several K; with the
  run's alone, no overhead: its images/s whatever the batch."""
  fit = goodput.fit_step_time(update_times(workload, speeds), exchange=0.0)
  return Compute(fit.exchange, fit.micro / workload.per_rank_batch)


@dataclasses.dataclass(frozen=True)
class Model:
  """What the plan predicts with: the steps by batch, one rank's compute, the training split's images."""
  steps: Steps
  compute: Compute
  images: int

  def epochs(self, batch: float) -> float:
    return self.steps.at(batch) * batch / self.images


@dataclasses.dataclass(frozen=True)
class Point:
  """One (ranks, per-rank batch, accumulation) on one cluster. Seconds are per update unless named
  otherwise: one rank's overhead and its images' compute, the whole exchange, the part of it past
  backprop (exposed)."""
  ranks: int
  per_rank_batch: int
  accumulation: int
  global_batch: int
  epochs: float
  steps: float
  overhead: float
  compute: float
  exchange: float
  exposed: float
  seconds: float  # to the target

  @property
  def step(self) -> float:
    return self.overhead + self.compute + self.exposed

  @property
  def gpu_hours(self) -> float:
    return self.ranks * self.seconds / 3600

  @property
  def policy(self) -> str:
    """The batch policy the point belongs to: its per-rank batch and accumulation."""
    return f"{self.per_rank_batch} per rank" + (f" x {self.accumulation} accumulated" if self.accumulation > 1 else "")


def point(model: Model, ranks: int, per_rank_batch: int, accumulation: int, sizes: list[int],
          bucket_seconds: list[float], overlap: bool = True) -> Point:
  """The time to the target at one (ranks, per-rank batch, accumulation): goodput.seconds_to.

  sizes, bucket_seconds: the exchange's buckets and their seconds at `ranks` (exchange.py). The
  exchange can hide only behind the last micro-batch's backward pass (overlap=False: behind nothing).
  """
  batch = ranks * per_rank_batch * accumulation
  c, s = model.compute, model.steps
  backward = exchange.BACKWARD_SHARE * per_rank_batch * c.per_image if overlap else 0.0
  exposed = exchange.exposed(sizes, bucket_seconds, backward)
  steps = s.at(batch)
  return Point(ranks=ranks, per_rank_batch=per_rank_batch, accumulation=accumulation, global_batch=batch,
               epochs=steps * batch / model.images, steps=steps, overhead=c.overhead,
               compute=per_rank_batch * accumulation * c.per_image, exchange=sum(bucket_seconds), exposed=exposed,
               seconds=goodput.seconds_to(s.base_steps, accumulation, c.step_time(per_rank_batch, exposed),
                                          s.b_noise, s.base_batch, per_rank_batch, ranks))


def grid(model: Model, cluster: exchange.Cluster, sizes: list[int], ranks: list[int],
         per_rank_batches: list[int], accumulations: list[int], overlap: bool = True) -> list[Point]:
  """Every (ranks, per-rank batch, accumulation) whose global batch fits in one epoch (train.py
  runs images // global batch steps an epoch, so a larger batch runs none)."""
  out = []
  for p in ranks:
    seconds = exchange.bucket_seconds(cluster, p, sizes)
    for b in per_rank_batches:
      for a in accumulations:
        if p * b * a <= model.images:
          out.append(point(model, p, b, a, sizes, seconds, overlap))
  return out


def best_by_ranks(points: list[Point]) -> list[Point]:
  """For each number of ranks, ascending, its point with the least time to the target."""
  best = {}
  for q in points:
    if q.ranks not in best or q.seconds < best[q.ranks].seconds:
      best[q.ranks] = q
  return [best[p] for p in sorted(best)]


def knee(best: list[Point], gain: float = 0.1) -> Point | None:
  """The first of best_by_ranks' points from which doubling the ranks cuts the time by less than
  `gain` (0.1: 10%); None when every doubling still does."""
  by = {q.ranks: q for q in best}
  for q in best:
    twice = by.get(2 * q.ranks)
    if twice is not None and twice.seconds > (1 - gain) * q.seconds:
      return q
  return None
