"""The alpha-beta cost of flat and hierarchical allreduce, one latency and one bandwidth per level.

hybrid picks, per fused buffer, the cheaper of the two, as Jia et al. (2018)
switch between ring and hierarchical allreduce by tensor size and cluster size.
Ring costs after the nccl-tests conventions: allreduce over g ranks moves
2(g-1)/g of the buffer through each rank, reduce-scatter and allgather
(g-1)/g each.

alpha is the latency of one collective call, not of one ring step: on
Horovod each call pays its engine's negotiation and cycle (hundreds of
microseconds to milliseconds measured here), which dwarfs the per-step
network latency at these group sizes. So three calls (hier) cost three alphas.
"""
import dataclasses

from comm.topology import World


@dataclasses.dataclass(frozen=True)
class Link:
  """One level's cost: alpha seconds per collective call, beta seconds per byte."""
  alpha: float
  beta: float

  @property
  def gbps(self) -> float:
    """Bandwidth in GB/s (1e9 bytes), for logs."""
    return 1e-9 / self.beta if self.beta else float("inf")


@dataclasses.dataclass(frozen=True)
class CostModel:
  intra: Link  # among the ranks of one node
  inter: Link  # among nodes (the ranks with the same local rank)


def allreduce_time(link: Link, ranks: int, nbytes: float) -> float:
  """Seconds of one ring allreduce of nbytes over `ranks` ranks on this link (0 for one rank)."""
  return 0.0 if ranks <= 1 else link.alpha + 2 * (ranks - 1) / ranks * nbytes * link.beta


def scatter_time(link: Link, ranks: int, nbytes: float) -> float:
  """Seconds of one reduce-scatter (or allgather) of an nbytes buffer over `ranks` ranks."""
  return 0.0 if ranks <= 1 else link.alpha + (ranks - 1) / ranks * nbytes * link.beta


def flat_time(model: CostModel, world: World, nbytes: float) -> float:
  """One allreduce over every rank; once it spans nodes, its ring runs at the inter-node cost."""
  link = model.inter if world.cross_size > 1 else model.intra
  return allreduce_time(link, world.size, nbytes)


def hier_time(model: CostModel, world: World, nbytes: float) -> float:
  """Reduce-scatter in the node, allreduce of 1/local_size of it across nodes, allgather in the node."""
  local, cross = world.local_size, world.cross_size
  return (2 * scatter_time(model.intra, local, nbytes)
          + allreduce_time(model.inter, cross, nbytes / local))


def choose(model: CostModel, world: World, nbytes: float) -> tuple[str, float]:
  """('flat' or 'hier', predicted seconds): the cheaper for one buffer; flat on a tie (one call)."""
  flat, hier = flat_time(model, world, nbytes), hier_time(model, world, nbytes)
  return ("hier", hier) if hier < flat else ("flat", flat)


def fit(ranks: int, small: tuple[float, float], large: tuple[float, float]) -> Link:
  """The Link that makes allreduce_time pass through two timings (bytes, seconds) over `ranks` ranks.

  Negative solutions (noise on a busy machine) are clipped to zero.
  """
  (n1, t1), (n2, t2) = small, large
  factor = 2 * (ranks - 1) / ranks
  beta = max(0.0, (t2 - t1) / ((n2 - n1) * factor))
  return Link(alpha=max(0.0, t1 - factor * n1 * beta), beta=beta)


def parse(spec: str) -> CostModel:
  """CostModel from 'ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER' (microseconds, GB/s).

  Raises ValueError on anything else.
  """
  parts = [float(x) for x in spec.split(",")]
  if len(parts) != 4 or any(x <= 0 for x in parts):
    raise ValueError(spec)
  a_in, bw_in, a_out, bw_out = parts
  return CostModel(intra=Link(a_in * 1e-6, 1e-9 / bw_in), inter=Link(a_out * 1e-6, 1e-9 / bw_out))
