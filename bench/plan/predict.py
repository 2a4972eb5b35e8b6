"""Time to a target for each number of ranks and global batch: the steps from the noise scale
(McCandlish et al. 2018), the time of a step from per-rank compute and the exchange it leaves exposed."""
import dataclasses

from training import noise_scale

from bench.plan import exchange
from bench.plan.workload import Workload


@dataclasses.dataclass(frozen=True)
class Point:
  """One (ranks, per-rank batch, accumulation) on one cluster. Seconds are per update unless named
  otherwise: compute on one rank, the whole exchange, the part of it past backprop (exposed)."""
  ranks: int
  per_rank_batch: int
  accumulation: int
  global_batch: int
  epochs: float
  steps: float
  compute: float
  exchange: float
  exposed: float
  seconds: float  # to the target

  @property
  def step(self) -> float:
    return self.compute + self.exposed

  @property
  def gpu_hours(self) -> float:
    return self.ranks * self.seconds / 3600

  @property
  def policy(self) -> str:
    """The batch policy the point belongs to: its per-rank batch and accumulation."""
    return f"{self.per_rank_batch} per rank" + (f" x {self.accumulation} accumulated" if self.accumulation > 1 else "")


def tradeoff(workload: Workload, ratio: float = 1.0) -> tuple[float, float]:
  """(S_min steps, E_min examples) through the workload's run, with B_crit = ratio x B_simple:
  E(B) = E_min (1 + B / B_crit) solved for E_min at the run's batch and epochs to target."""
  b_crit = ratio * workload.b_simple
  e_min = workload.epochs * workload.train_images / (1 + workload.batch / b_crit)
  return e_min / b_crit, e_min


def epochs_at(workload: Workload, batch: int, ratio: float = 1.0) -> float:
  """Epochs to the target at global batch `batch`."""
  return noise_scale.examples_at(batch, *tradeoff(workload, ratio)) / workload.train_images


def largest_batch_within(workload: Workload, epochs: float, ratio: float = 1.0) -> float:
  """The largest global batch that reaches the target within `epochs` epochs: E(B) <= epochs x images
  gives B <= B_crit (epochs / E_min's epochs - 1); 0 when even a batch of one needs more."""
  s_min, e_min = tradeoff(workload, ratio)
  return max(0.0, (epochs * workload.train_images - e_min) / s_min)


def point(workload: Workload, ranks: int, per_rank_batch: int, accumulation: int, sizes: list[int],
          bucket_seconds: list[float], images_per_sec: float, ratio: float = 1.0, overlap: bool = True) -> Point:
  """The time to the target at one (ranks, per-rank batch, accumulation).

  sizes, bucket_seconds: the exchange's buckets and their seconds at `ranks` (exchange.py).
  images_per_sec: one rank's compute speed, taken as independent of its batch. An update
  computes per_rank_batch x accumulation images a rank; the exchange can hide only behind the
  last micro-batch's backward pass (overlap=False: behind nothing).
  """
  batch = ranks * per_rank_batch * accumulation
  examples = noise_scale.examples_at(batch, *tradeoff(workload, ratio))
  backward = exchange.BACKWARD_SHARE * per_rank_batch / images_per_sec if overlap else 0.0
  compute = per_rank_batch * accumulation / images_per_sec
  exposed = exchange.exposed(sizes, bucket_seconds, backward)
  return Point(ranks=ranks, per_rank_batch=per_rank_batch, accumulation=accumulation, global_batch=batch,
               epochs=examples / workload.train_images, steps=examples / batch, compute=compute,
               exchange=sum(bucket_seconds), exposed=exposed, seconds=examples / batch * (compute + exposed))


def grid(workload: Workload, cluster: exchange.Cluster, sizes: list[int], ranks: list[int],
         per_rank_batches: list[int], accumulations: list[int], images_per_sec: float, ratio: float = 1.0,
         overlap: bool = True) -> list[Point]:
  """Every (ranks, per-rank batch, accumulation) whose global batch fits in one epoch (train.py
  runs images // global batch steps an epoch, so a larger batch runs none)."""
  out = []
  for p in ranks:
    seconds = exchange.bucket_seconds(cluster, p, sizes)
    for b in per_rank_batches:
      for a in accumulations:
        if p * b * a <= workload.train_images:
          out.append(point(workload, p, b, a, sizes, seconds, images_per_sec, ratio, overlap))
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
