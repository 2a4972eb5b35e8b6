"""The alpha-beta cost of flat and hierarchical allreduce: one latency and one bandwidth per level.

hybrid picks, per fused buffer, the cheaper of the two, as Jia et al. (2018)
switch between ring and hierarchical allreduce by tensor size and cluster size.
With L = local_size ranks per node, c = cross_size nodes and an n-byte buffer:

  intra  alpha_in per call; beta_in seconds per byte through each rank inside
         a node (reduce-scatter or allgather: (L-1)/L n per rank, the
         nccl-tests convention; allreduce twice that).
  inter  alpha_out per call; beta_out seconds per byte crossing ONE HOST'S
         link, shared by all of that host's ranks. An allreduce over the c
         nodes sends 2(c-1)/c of the buffer across each host's link.

  flat  = alpha + 2(L-1)/L n beta_in + 2(c-1)/c n beta_out
          (alpha = alpha_out once the call spans nodes, else alpha_in)
  hier  = [alpha_in + (L-1)/L n beta_in]          reduce-scatter in the node
        + [alpha_out + 2(c-1)/c n beta_out]       L allreduces of n/L across nodes at once
        + [alpha_in + (L-1)/L n beta_in]          allgather in the node
  (a phase over one rank is skipped, as comm/hierarchical.py skips it)

Why flat is not a ring over all L*c ranks: Open MPI's allreduce on CPU (what
Horovod's flat call runs under MPI) moves bytes as recursive halving/doubling
(Rabenseifner) does: with ranks numbered host by host its first log2(L) halving
steps and last log2(L) doubling steps pair ranks of the same host (the in-node
2(L-1)/L n), so only 1/L of each rank's data crosses the link. Measured on the
emulated 2 hosts x 2 ranks (results/scaling.md): flat sent 8.6 MB per host
for an 8 MB buffer, 104 MB for ResNet-50's 97.5 MB, the 2(c-1)/c n = n above,
not a ring's 2(g-1)/g n = 1.5 n per rank. The earlier model charged that ring
at a per-rank inter-node bandwidth and over-predicted flat 2-4x, steering
hybrid to hier, which was slower.

Why hier's cross phase costs the same link bytes as flat: its L concurrent
allreduces of n/L each send 2(c-1)/c n/L through the same host link, L * that
= 2(c-1)/c n (measured: 105 MB per host for ResNet-50, as flat). So on CPU
hier moves the same bytes as flat in three calls instead of one and this
mpi-flat model never prefers it (a tie, L = 1, goes to flat).

hier pays off where flat is a ring over all g = L*c ranks: Gloo's allreduce
on CPU (a ring by default in gloo/allreduce.cc; not yet measured across hosts
here) and NCCL's ring on GPUs (Jia et al.'s baseline). Numbered host by host, each
host's link then carries one ring edge, 2(g-1)/g n, and the pipelined ring
runs at its slowest edge, so (CostModel.flat = "ring"):

  ring  = alpha + 2(g-1)/g n max(beta_in, beta_out)     (once c > 1)

e.g. 1.5 n per host link on 2 x 2 against hier's n. The probe picks "ring"
under Gloo; --hybrid_cost takes it as an optional fifth field. The simulation
of bench/scaling/simulate.py keeps its own ring with a latency per ring step.

alpha is the latency of one collective call, not of one ring step: on
Horovod each call pays its engine's negotiation and cycle (hundreds of
microseconds to milliseconds measured here), which dwarfs the per-step
network latency at these group sizes. So three calls (hier) cost three alphas.

--hybrid_cost 'ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER[,FLAT]': GBPS_INTRA
is GB/s (1e9 bytes) per rank inside a node; GBPS_INTER is the bandwidth of one
host's network link (all its ranks together), e.g. 12.5 for 100 Gbit/s; FLAT
is mpi (the default) or ring.
"""
import dataclasses
import math
from typing import Sequence

from comm.topology import World


@dataclasses.dataclass(frozen=True)
class Link:
  """One level's cost: alpha seconds per collective call, beta seconds per byte.

  intra: per byte through one rank; inter: per byte through one host's link.
  """
  alpha: float
  beta: float

  @property
  def gbps(self) -> float:
    """Bandwidth in GB/s (1e9 bytes), for logs."""
    return 1e-9 / self.beta if self.beta else float("inf")


FLAT_ALGORITHMS = ("mpi", "ring")


@dataclasses.dataclass(frozen=True)
class CostModel:
  intra: Link  # among the ranks of one node, per rank
  inter: Link  # among nodes, per host link
  flat: str = "mpi"  # flat's algorithm: Open MPI's hierarchy-aware halving/doubling, or a ring (Gloo, NCCL)
  # hier's in-node reduce-scatter + allgather pair when measured as such (alpha of
  # the pair, beta per byte of its 2(L-1)/L n through a rank, fitted like an
  # allreduce); None: two scatter_time(intra), half an allreduce each.
  pair: Link | None = None
  # hier's local work: seconds per byte of one pass over a bucket (every rank of
  # the node at once). hier makes 3 passes over a bucket of several tensors
  # (pack, the 1/size scale, unpack; one for a lone tensor: pack and unpack are
  # then reshapes); flat hands its tensors to Horovod as they are. 0: unknown.
  copy: float = 0.0
  # flat's one call over every rank of several hosts, measured as such (alpha per
  # call, beta per byte of the buffer); None: the per-level formula of flat_time.
  # On the emulated 2 x 2 the formula put flat 4% under hier at 32 MB; measured,
  # flat was 11-13% over it in two runs, so hybrid kept the slower one.
  flat_call: Link | None = None


def allreduce_bytes(ranks: int, nbytes: float) -> float:
  """Bytes one member of an allreduce over `ranks` members sends: 2(g-1)/g of the buffer."""
  return 2 * (ranks - 1) / ranks * nbytes


def allreduce_time(link: Link, ranks: int, nbytes: float, sharing: int = 1) -> float:
  """Seconds of one allreduce of nbytes over `ranks` members (0 for one).

  sharing: how many such allreduces run at once through the same link (the
  L cross groups of one host), so the link carries sharing times the bytes.
  """
  return 0.0 if ranks <= 1 else link.alpha + sharing * allreduce_bytes(ranks, nbytes) * link.beta


def scatter_time(link: Link, ranks: int, nbytes: float) -> float:
  """Seconds of one reduce-scatter (or allgather) of an nbytes buffer over `ranks` ranks."""
  return 0.0 if ranks <= 1 else link.alpha + (ranks - 1) / ranks * nbytes * link.beta


def flat_time(model: CostModel, world: World, nbytes: float) -> float:
  """One allreduce over every rank, as model.flat runs it (the module docstring's flat or ring)."""
  local, cross = world.local_size, world.cross_size
  if local * cross <= 1:
    return 0.0
  if cross == 1:
    return allreduce_time(model.intra, local, nbytes)
  if model.flat_call is not None:
    return model.flat_call.alpha + nbytes * model.flat_call.beta
  if model.flat == "ring":
    return model.inter.alpha + allreduce_bytes(local * cross, nbytes) * max(model.intra.beta, model.inter.beta)
  return (model.inter.alpha + allreduce_bytes(local, nbytes) * model.intra.beta
          + allreduce_bytes(cross, nbytes) * model.inter.beta)


def node_phases_time(model: CostModel, local: int, nbytes: float) -> float:
  """hier's reduce-scatter and allgather in a node of `local` ranks, together."""
  if model.pair is not None:
    return allreduce_time(model.pair, local, nbytes)
  return 2 * scatter_time(model.intra, local, nbytes)


def local_time(model: CostModel, nbytes: float, tensors: int = 1) -> float:
  """hier's passes over a bucket of `tensors` tensors on each rank (CostModel.copy)."""
  return model.copy * nbytes * (1 if tensors == 1 else 3)


def hier_time(model: CostModel, world: World, nbytes: float, tensors: int = 1) -> float:
  """Reduce-scatter in the node, L concurrent allreduces of n/L across nodes, allgather in the
  node, and hier's local passes over the bucket."""
  local, cross = world.local_size, world.cross_size
  return (node_phases_time(model, local, nbytes) + allreduce_time(model.inter, cross, nbytes / local, sharing=local)
          + local_time(model, nbytes, tensors))


def choose(model: CostModel, world: World, nbytes: float, tensors: int = 1) -> tuple[str, float]:
  """('flat' or 'hier', predicted seconds): the cheaper for one buffer; flat on a tie (one call)."""
  flat, hier = flat_time(model, world, nbytes), hier_time(model, world, nbytes, tensors)
  return ("hier", hier) if hier < flat else ("flat", flat)


def bucket_time(model: CostModel, world: World, algorithm: str, nbytes: float, tensors: int = 1) -> float:
  """Seconds of one fused bucket as --allreduce=algorithm sends it: hybrid's choice, hier, or one
  allreduce over every rank (flat, and horovod, whose own fusion sends a buffer as flat does)."""
  if algorithm == "hybrid":
    return choose(model, world, nbytes, tensors)[1]
  if algorithm == "hier":
    return hier_time(model, world, nbytes, tensors)
  return flat_time(model, world, nbytes)


def fit(ranks: int, points: Sequence[tuple[float, float]], sharing: int = 1) -> Link:
  """The Link through timings (bytes, seconds) of allreduce_time(link, ranks, bytes, sharing)
  with the least squared RELATIVE error.

  For a level's calibration, run every group of the level at once and pass
  sharing = the groups per link: 1 inside a node (each rank its own
  bandwidth), local_size across nodes (the host's cross groups share its
  link), so beta comes out per host link as flat_time and hier_time use it.
  Relative, because predictions are judged (and hybrid chooses) by ratios:
  plain least squares let the 16 MB point set the line and missed the
  latency-bound sizes by 25-40% on the emulated cluster (results/scaling.md).
  Needs two distinct sizes; negative solutions (noise on a busy machine) are
  clipped to zero.
  """
  xs = [sharing * allreduce_bytes(ranks, n) for n, _ in points]
  ys = [t for _, t in points]
  if ranks <= 1 or len(set(xs)) < 2 or min(ys) <= 0:
    raise ValueError(f"fit needs two or more ranks and two distinct sizes with times > 0, got {ranks} ranks, {points}")
  ws = [1 / (y * y) for y in ys]  # minimise sum ((a + b x - y) / y)^2
  w, wx, wy = sum(ws), sum(a * x for a, x in zip(ws, xs)), sum(a * y for a, y in zip(ws, ys))
  wxx = sum(a * x * x for a, x in zip(ws, xs))
  wxy = sum(a * x * y for a, x, y in zip(ws, xs, ys))
  beta = (w * wxy - wx * wy) / (w * wxx - wx * wx)
  if beta <= 0:
    return Link(alpha=wy / w, beta=0.0)
  alpha = (wy - beta * wx) / w
  if alpha < 0:
    return Link(alpha=0.0, beta=wxy / wxx)
  return Link(alpha=alpha, beta=beta)


def parse(spec: str) -> CostModel:
  """CostModel from 'ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER[,FLAT]' (microseconds, GB/s).

  GBPS_INTRA per rank inside a node, GBPS_INTER per host link; FLAT mpi
  (default) or ring. Raises ValueError on anything else.
  """
  fields = spec.split(",")
  flat = fields.pop() if len(fields) == 5 else "mpi"
  parts = [float(x) for x in fields]
  if len(parts) != 4 or not all(math.isfinite(x) and x > 0 for x in parts) or flat not in FLAT_ALGORITHMS:
    raise ValueError(spec)
  a_in, bw_in, a_out, bw_out = parts
  return CostModel(intra=Link(a_in * 1e-6, 1e-9 / bw_in), inter=Link(a_out * 1e-6, 1e-9 / bw_out), flat=flat)
