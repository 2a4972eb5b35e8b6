"""What one gradient exchange costs on a cluster, and how much of it backprop hides.

One model prices exchanges at scale for the planner and for time_to_accuracy's at-scale
section: the gradients go in SIM_BUCKET buckets (bench/scaling/simulate.py's fusion), each
bucket by hybrid allreduce, the cheaper of a ring over every rank and the hierarchical
allreduce (Jia et al. 2018, sec. 4.2; comm/exchange.py plans it per bucket the same way).
A cluster prices one bucket either with simulate.py's latency per ring step (stated GPU
clusters: NCCL's cost is per step, microseconds) or with comm/cost_model.py's latency per
collective call (this project's CPU ranks, e.g. a calibration from `make bench-scaling`).

Overlap as comm/exchange.py runs it: buckets leave in backprop order, each as soon as its
gradients exist, one at a time; so a bucket starts at the later of its gradients' readiness
and the previous bucket's end, and only what runs past the end of backprop adds to a step.
"""
import dataclasses
import math
from typing import Callable

from comm import cost_model
from comm.topology import World
from bench.scaling import simulate

# Backprop costs about twice the forward pass (two matrix products per layer against one), so
# two thirds of a micro-batch's compute is the backward pass the exchange can hide behind.
BACKWARD_SHARE = 2 / 3
# simulate.py's 100 Gbit/s: 12.5 GB/s nominal, ~10 GB/s achieved; the same 80% for faster links.
ACHIEVED = 10 / 12.5


@dataclasses.dataclass(frozen=True)
class Cluster:
  """ranks_per_node GPUs (or CPU ranks) a node; bucket(local, nodes, nbytes): seconds of one
  bucket's hybrid allreduce over local ranks a node on `nodes` nodes; stated: each figure and its source."""
  name: str
  ranks_per_node: int
  bucket: Callable[[int, int, float], float]
  stated: dict


def ring_step_pricing(params: dict) -> Callable[[int, int, float], float]:
  """simulate.py's hybrid for one bucket: min(ring over every rank, hierarchical)."""
  def price(local: int, nodes: int, nbytes: float) -> float:
    flat = simulate.flat_sim_time(params["intra"], params["inter"], local, nodes, nbytes)
    return min(flat, simulate.hier_sim_time(params["intra"], params["inter"], local, nodes, nbytes))
  return price


def call_pricing(model: cost_model.CostModel) -> Callable[[int, int, float], float]:
  """comm/cost_model.choose for one bucket: the cheaper of flat and hier, per collective call."""
  def price(local: int, nodes: int, nbytes: float) -> float:
    return cost_model.choose(model, World(size=local * nodes, local_size=local, cross_size=nodes), nbytes)[1]
  return price


def gbit_nodes(gbit: int) -> Cluster:
  """Jia et al.'s P40 node (8 GPUs on PCIe 3.0, simulate.P40) with a gbit Gbit/s host link."""
  bandwidth = gbit / 8 * 1e9 * ACHIEVED
  params = dict(simulate.P40, inter=(simulate.P40["inter"][0], 1 / bandwidth))
  stated = dict(simulate.P40_STATED,
                inter=f"{gbit} Gbit/s: 10 us per ring step, {bandwidth / 1e9:g} GB/s (80% of nominal, as "
                "simulate.py's 10 of 12.5 GB/s)")
  return Cluster(f"p40-{gbit}g", simulate.P40["local"], ring_step_pricing(params), stated)


P40 = Cluster("p40", simulate.P40["local"], ring_step_pricing(simulate.P40),
              dict(simulate.P40_STATED, source="Jia et al. 2018's cluster as bench/scaling/simulate.py states it"))
CLUSTERS = {c.name: c for c in (P40, gbit_nodes(200), gbit_nodes(400))}


def cost_model_cluster(spec: str, ranks_per_node: int) -> Cluster:
  """A cluster priced by comm/cost_model.py from --hybrid_cost's spec
  'ALPHA_INTRA_US,GBPS_INTRA,ALPHA_INTER_US,GBPS_INTER[,FLAT]' (ValueError on a bad one)."""
  return Cluster(f"cost-model {spec}", ranks_per_node, call_pricing(cost_model.parse(spec)),
                 {"ranks_per_node": ranks_per_node, "cost model": f"comm/cost_model.parse('{spec}')"})


def layout(cluster: Cluster, ranks: int) -> tuple[int, int]:
  """(ranks a node, nodes): a node filled before the next; ValueError when ranks do not fill whole nodes."""
  local = min(cluster.ranks_per_node, ranks)
  if ranks % local:
    raise ValueError(f"{ranks} ranks do not fill nodes of {cluster.ranks_per_node}")
  return local, ranks // local


def buckets(tensor_bytes: list[int], size: int = simulate.SIM_BUCKET) -> list[int]:
  """Bytes per bucket in the order they leave (simulate.split of the gradients' total)."""
  return simulate.split(sum(tensor_bytes), size)


def bucket_seconds(cluster: Cluster, ranks: int, sizes: list[int]) -> list[float]:
  """Seconds of each bucket's allreduce over `ranks` ranks (none on one rank)."""
  if ranks <= 1:
    return [0.0] * len(sizes)
  local, nodes = layout(cluster, ranks)
  return [cluster.bucket(local, nodes, n) for n in sizes]


def exposed(sizes: list[int], seconds: list[float], backward: float) -> float:
  """Seconds the exchange adds to a step whose backward pass takes `backward` seconds.

  Bucket i's gradients are ready once backprop has produced its share of the bytes up to it
  (gradients taken as produced at an even rate); buckets run one after another. 0 for backward
  0 means no overlap: the whole exchange.
  """
  total, done, end = sum(sizes), 0, 0.0
  for n, t in zip(sizes, seconds):
    done += n
    end = max(end, backward * done / total) + t
  return max(0.0, end - backward)


def tensor_bytes(model: str, num_classes: int, image_shape) -> list[int]:
  """float32 bytes of each trainable variable of models.build_model(model, ...), in the model's order."""
  from models import build_model  # builds a Keras model: only when a plan needs its gradients
  net = build_model(model, num_classes, image_shape)
  return [4 * math.prod(v.shape) for v in net.trainable_variables]
